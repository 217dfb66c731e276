/* SPDX-License-Identifier: MIT */
/*
 * server_priv — what the daemon's modules share, and nobody else sees: the
 * connection, the per-uid share and the server, and the few functions one
 * module calls in another.
 *
 *   server.c     the loop, connections and their I/O, admin requests,
 *                accepting, signals, options
 *   admission.c  who goes next: per-uid queues and shares, the turn ring,
 *                the loop's budget, and admitting queued requests
 *   peer.c       is an admin peer a person: its cgroup, pid namespace and
 *                ancestry, read from /proc; approvers
 *   notifier.c   the program that takes pending approvals to people
 *   listener.c   the sockets: make, probe, lock, adopt, unlink
 *
 * Everything here runs on the loop thread unless it says otherwise.
 */
#ifndef CG_SERVER_PRIV_H
#define CG_SERVER_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <jansson.h>

#include "server.h"

#define DEFAULT_MAX_CONNS     1024u
#define DEFAULT_READ_DEADLINE 10000
#define ADMIN_MAX_CONNS	      32u
#define READ_CHUNK	      65536
#define STOP_FLUSH_MS	      5000
/* A peer that does not take its response for this long is dropped. */
#define WRITE_IDLE_MS 30000 /* a response not taken for this long is cut (idle, not total) */
/* Bounds of issue 14; each can be set on the command line. */
#define DEFAULT_PER_UID_CONNS 256u
#define DEFAULT_MAX_REPLY     ((uint64_t)256 << 20)
#define DEFAULT_OUTPUT_BUDGET ((uint64_t)1 << 30)
#define DEFAULT_ADMIT_QUEUE   512u
/* A response line this short always goes out whole: its error line would be as long. */
#define ALWAYS_SENT 4096u
/*
 * Queued requests admitted per loop turn: a refused one costs about 100 us
 * of this thread, so a peer arriving meanwhile waits about a millisecond
 * for the next accept, not the whole queue.
 */
#define ADMIT_BATCH 8
/*
 * Connections accepted per loop turn. A listening socket under a flood
 * never runs dry: accepting until EAGAIN would hold every answer owed to
 * other peers (and admission's round robin) back for as long as the flood
 * lasts. The socket stays readable, so the next turn takes the rest. The
 * lines of a turn's connections after its first are only read and queued
 * (conn_ready); admit() decides them round robin over uids.
 */
#define ACCEPT_BATCH   64
#define SHARE_DECAY_MS 250 /* a uid's count of recent admissions halves this often */
/*
 * The loop's budget per uid: while another uid has a call running that
 * started within RUN_SHARE_MS, a uid is held after each of its requests for
 * as long as that request took on the loop, so it gets about half of the
 * loop (and of what its requests cost the evidence threads and its own
 * clients), and the other uid's call the CPU it needs. A call running
 * longer (a build, a wait for a human) stops holding others back.
 */
#define RUN_SHARE_MS   1000
#define HELD_REPORT_MS 10000 /* a spell of holds is logged at its end, or this often */
#define LARGE_REPLY    ((uint64_t)1 << 20) /* freeing one trims the heap */
/* A held queue is looked at again when evidence says it caught up (the wake
 * eventfd); this timer is only the safety net. */
#define ADMIT_RETRY_MS 20
/* Notifiers running at once; a pending call past this is not pushed (it is still listed). */
#define MAX_NOTIFIERS 16
/* Bytes of /proc/<pid>/cgroup (or stat) read; more is treated as unknowable. */
#define PROC_READ_MAX 16384
/* Parent links followed when looking for the daemon among a peer's ancestors. */
#define MAX_ANCESTRY 256
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

extern char **environ;

enum src_kind {
	SRC_LISTEN,
	SRC_ADMIN_LISTEN,
	SRC_SIGNAL,
	SRC_WAKE,
	SRC_CONN,
	SRC_NOTIFIER,
	SRC_FREED, /* a connection freed while a batch of events was being handled */
};

/* The first member of everything registered with epoll: what it is. */
struct src {
	enum src_kind kind;
};

enum conn_state {
	CONN_READING, /* collecting the request line */
	CONN_WAITING, /* submitted; the kernel owes us respond() */
	CONN_WRITING, /* sending the response line */
	CONN_QUEUED,  /* a whole line read, waiting in its uid's queue to be admitted */
};

/*
 * One uid's share of the agent socket: its connection count (capped) and its
 * queue of read requests waiting for admission. Requests are admitted round
 * robin over uids, so one uid's flood cannot hold another uid's call back.
 */
struct uidq {
	uid_t uid;
	unsigned n_conns;
	struct conn *head, *tail; /* CONN_QUEUED connections, in arrival order */
	struct uidq *next;	  /* all uids with a connection */
	struct uidq *rr_next;	  /* the admission ring */
	bool in_ring;
	unsigned recent; /* requests admitted lately (halved every SHARE_DECAY_MS) */
	/* Its calls submitted and not answered yet (run, wait), oldest first. */
	struct conn *run_head, *run_tail;
	int64_t held_until_ns; /* the loop's budget: not admitted before this */
	unsigned held;	       /* requests followed by a hold in this spell (budget_report) */
	int64_t held_since_ns, held_last_ns; /* the spell: its first hold, its last one's end */
	uint64_t out_held; /* response bytes its connections hold (at most half the budget) */
};

struct server;

/* A notifier process the daemon started (F: approvals where humans are). */
struct notifier {
	struct src src; /* MUST stay first: epoll data points here */
	pid_t pid;	/* 0: slot free */
	int pidfd;	/* readable when the process exits */
};

struct conn {
	struct src src;	      /* MUST stay first: epoll data points here */
	struct server *srv;   /* for respond(), which gets only the conn as cookie */
	int fd;		      /* -1 once closed (the peer left while its job ran) */
	bool admin;	      /* came in on the admin socket */
	bool in_epoll;	      /* fd is registered */
	bool cancelled;	      /* cg_job_cancel already called */
	bool responded;	      /* respond() has delivered (set under the mutex) */
	bool answered_inline; /* respond() ran inside cg_kernel_submit, on the loop */
	size_t sent_inline;   /* of that answer, bytes sent before submit returned */
	bool approver;	      /* admin: a configured approver (may approve, deny, grant_open) */
	enum conn_state state;
	struct cg_peer peer;
	int64_t deadline_ns; /* monotonic; read deadline, then write deadline */
	char *rbuf;	     /* request bytes, at most CG_WIRE_MAX_LINE */
	size_t rlen, ralloc;
	struct cg_job *job; /* the kernel job while running, or NULL */
	char *wbuf;	    /* the response line, owned */
	size_t wlen, woff;
	struct conn *prev, *next;   /* all connections */
	struct conn *rprev, *rnext; /* FIFO of CONN_READING / CONN_WRITING (deadlines) */
	struct conn *done_next;	    /* respond() queue, under server.mu */
	bool in_fifo;
	struct uidq *uq;    /* agent connections: the peer's uid share */
	struct conn *qnext; /* the uid queue (CONN_QUEUED) */
	size_t q_len;	    /* the queued line: its length and how it ended */
	bool q_newline, q_too_long;
	bool cut;		 /* the response was cut; wbuf holds the error line */
	struct conn *freed_next; /* freed within a batch: released after it */
	uint64_t held;		 /* response bytes counted in server.out_held */
	bool running;		 /* in its uid's run list (run_begin) */
	struct conn *run_prev, *run_next;
	int64_t run_start_ns; /* when its call was submitted */
};

/* A recorded transport refusal, sent again for a second (memo_refusal). */
#define REFUSAL_MEMOS 16
struct refusal_memo {
	char which[16]; /* the transport step: busy, conn_cap, ... */
	uid_t uid;
	int64_t until_ns; /* monotonic */
	char *line;
	size_t len;
};

struct server {
	struct cg_kernel *k;
	const struct cg_server_config *cfg;
	int ep_fd, sig_fd, wake_fd, listen_fd, admin_fd, lock_fd, admin_lock_fd;
	struct src listen_src, admin_src, sig_src, wake_src;
	struct stat listen_st, admin_st; /* what we bound, so stop unlinks only ours */
	int served_fd; /* the agent lock file, its mtime bumped per request (adopt_listener) */
	struct refusal_memo memo[REFUSAL_MEMOS];
	_Atomic int64_t served_until; /* wall ns its mtime marks: no bump for requests before it */
	pthread_mutex_t mark_mu;      /* one futimens at a time (mark_until) */
	bool have_listen_st, have_admin_st;
	unsigned max_conns;
	int64_t read_deadline_ns;
	unsigned n_conns, n_admin;
	struct conn *conns;		    /* all */
	struct conn *fifo_head, *fifo_tail; /* deadline order */
	pthread_mutex_t mu;		    /* guards done_head/done_tail and conn->responded */
	struct conn *done_head, *done_tail; /* responses delivered by respond() */
	bool stopping;
	uid_t euid;		 /* the daemon's; the admin socket serves only it (and root) */
	pthread_t loop_thread;	 /* the thread running cg_server_run */
	struct conn *submitting; /* inside cg_kernel_submit for this conn (loop thread only) */
	int64_t accept_paused_until_ns; /* after EMFILE, so a full fd table does not spin */
	pid_t self_pid;			/* the daemon, as its own pid namespace sees it */
	struct stat pidns_st;		/* the daemon's /proc/self/ns/pid */
	int nspid_depth;		/* pids on the daemon's own NSpid line */
	char *own_cgroup;		/* the daemon's /proc/self/cgroup, as read at start */
	struct notifier notifiers[MAX_NOTIFIERS];
	json_t *notified; /* trace ids of pending calls already pushed to the notifier */
	/* bounds (issue 14) */
	struct uidq *uids;		    /* uids with agent connections or recent admissions */
	struct uidq *ring_head, *ring_tail; /* uids with queued requests */
	unsigned per_uid, admit_queue;	    /* caps */
	uint64_t recent_total;		    /* the sum of every uid's recent */
	unsigned n_recent;		    /* uids whose recent is not 0 */
	int64_t share_decay_ns;		    /* when the recent counts halve next */
	int64_t write_idle_ns;		    /* idle write deadline */
	uint64_t max_reply, out_budget;	    /* response bytes: per line, daemon-wide */
	uint64_t out_held;		    /* response bytes held now */
	bool accepting;	      /* accept_batch reads a turn's second or later peer: queue its line */
	unsigned n_queued;    /* agent lines waiting in uid queues (CONN_QUEUED) */
	bool in_batch;	      /* handling one epoll batch: a freed conn is released after it */
	struct conn *freed;   /* connections freed during the batch */
	int64_t hold_wake_ns; /* admit() left only held uids queued: look again then */
	bool no_pwait2;	      /* epoll_pwait2 is missing or filtered: loop_wait uses epoll_wait */
};

/* ---- server.c ---------------------------------------------------------- */

/* An admin answer given inside cg_kernel_admin: admin_respond stores it here. */
struct admin_box {
	char *line; /* the caller frees it */
	size_t len;
};

/* The cg_kernel_admin callback that fills a struct admin_box (the cookie). */
void admin_respond(void *cookie, char *line, size_t len);

/* c's epoll events set to events (registered if it was not). 0, or -1 with errno. */
int set_events(struct server *s, struct conn *c, uint32_t events);
/* c out of the deadline FIFO, if it is in it. */
void fifo_remove(struct server *s, struct conn *c);
/* Release c: its fd, job, buffers and counts (after an epoll batch: SRC_FREED). */
void conn_free(struct server *s, struct conn *c);
/* Move the responses delivered by worker threads to their connections. */
void drain_done(struct server *s);
/* Hand c's collected line to the kernel (or the admin handler); may free c. */
void conn_submit(struct server *s, struct conn *c, size_t line_len, bool had_newline,
		 bool too_long);

/* ---- admission.c ------------------------------------------------------- */

/* uid's share, or NULL (none and !create, or no memory). Owned by the server. */
struct uidq *uid_get(struct server *s, uid_t uid, bool create);
/* A queued c out of its uid's queue: it is reading again and owed nothing. */
void uid_unqueue(struct server *s, struct conn *c);
/* c out of its uid's queue and count; an idle share is freed. */
void uid_release(struct server *s, struct conn *c);
/* Count an admitted agent request against u's share. */
void share_count(struct server *s, struct uidq *u);
/* Halve every uid's recent count now (the caller keeps the schedule); forget uids left with nothing. */
void share_decay(struct server *s, int64_t now);
/* c's call went to the kernel unanswered: it runs from now (the budget's view). */
void run_begin(struct conn *c, int64_t now);
/* u's request held the loop from t0 to now: while others' calls run, u waits as long. */
void budget_hold(struct server *s, struct uidq *u, int64_t t0);
/* c's call was answered, or c is going: it runs no more. */
void run_end(struct conn *c);
/* May another request go to the kernel now (evidence is not behind)? */
bool admit_open(struct server *s);
/* A whole line is in c: submitted now, or queued in its uid's queue; may free c. */
void conn_ready(struct server *s, struct conn *c, size_t line_len, bool had_newline, bool too_long);
/* Submit up to ADMIT_BATCH queued lines, round robin over uids not held. */
void admit(struct server *s);

/* ---- peer.c ------------------------------------------------------------ */

/* A /proc file whole into buf, NUL-terminated. 0, or -1: cannot tell (refuse). */
int read_proc(const char *path, char *buf, size_t len);
/* Pids on pid's NSpid line (0: self), one per pid namespace; -1: unreadable. */
int nspid_depth(pid_t pid);
/* Is the admin peer (fd, pid) outside every call? false with *where saying why not. */
bool peer_outside_calls(struct server *s, int fd, pid_t pid, char *where, size_t where_len);
/* Is the peer on fd (cred) a configured approver: uid, primary or supplementary gid? */
bool peer_is_approver(const struct server *s, int fd, const struct ucred *cred);

/* ---- notifier.c -------------------------------------------------------- */

/* Notifier n exited (its pidfd is readable; wait_for_it: block until it does): reap it. */
void notifier_reap(struct server *s, struct notifier *n, bool wait_for_it);
/* Push every pending approval not pushed yet to the notifier program. */
void notify_new_pending(struct server *s);

/* ---- listener.c -------------------------------------------------------- */

/*
 * Bind and listen on path without clobbering a live daemon (a lock file,
 * then a connect probe; the mode set before listen). The listening fd, or
 * -1 after one log line; *lock_out holds the lock file's fd.
 */
int open_listener(const char *path, mode_t mode, gid_t gid, int *lock_out, struct stat *st_out,
		  int64_t *locked_at_ns);
/* Adopt a socket passed by systemd at path. The fd, or -1 after one log line. */
int adopt_listener(int fd, const char *path, int *lock_out, int64_t *not_before);
/* Unlink path only if it is still the socket we bound (ours), not a successor's. */
void unlink_ours(const char *path, const struct stat *ours);

#endif /* CG_SERVER_PRIV_H */
