/* SPDX-License-Identifier: MIT */
/*
 * kernel_priv — the kernel's shared state and the seams between its modules.
 * Not installed, not for callers outside src/kernel.
 *
 *   gen.c       policy generations: load, swap on reload, reference counts
 *   gate.c      the one decide path (gate.h: also for the CLI and benchmarks)
 *   dispatch.c  the request path: gate, evidence, refusal or hand-off
 *   job.c       calls in flight: reference counts, cancel, the worker queue,
 *               and the per-call log record (cg_kernel_config.on_call)
 *   run.c       a permitted call on a worker: permit, confine, exec, screen
 *   sudo.c      privileged stages from a daemon that is not root
 *   approve.c   calls waiting for a human or a grant, and their deadlines
 *   admin.c     the admin protocol (pending, approve, deny, grants, reload)
 *   record.c    evidence: the request, the decision and the sealed verdict
 *   evidence_actions.c  the evidence reads verdict, replay, log (a peer's own traces)
 *   respond.c   response lines, including the last-resort one
 *   kernel.c    lifecycle: new, shutdown, free
 *
 * Locks, outermost first: gen_lock, replay_lock and journal_read_lock are leaves taken alone;
 * k->lock guards the job queue, the active list, the approval queue and the
 * grant store. No lock is held while a call runs or while evidence is made
 * durable.
 */
#ifndef CG_KERNEL_PRIV_H
#define CG_KERNEL_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "approval.h"
#include "callgate.h"
#include "chain.h"
#include "evidence.h"
#include "exec.h"
#include "gate.h"
#include "grant.h"
#include "policy.h"
#include "reply.h"
#include "screen.h"
#include "wire.h"
#include "world.h"

#define CG_KERNEL_DEFAULT_WORKERS 32
#define CG_KERNEL_MAX_WORKERS	  256

/* One policy generation and the chain built over it. */
struct gen {
	atomic_int refs;
	uint64_t number;
	struct cg_policy *policy;
	struct cg_chain chain;
};

/* The daemon's own paths (state dir, sockets) hidden in every call's view. */
#define KERNEL_MAX_OWN_PATHS 8

/* One uid's jobs on workers (queued or running) at most: this fraction of them. */
#define CG_WORKERS_PER_UID_SHARE 4 /* a quarter: 8 of the default 32 */

#define CG_EV_READS_MAX	    4 /* evidence reads on workers at once, daemon-wide */
#define CG_EV_READS_PER_UID 2 /* the same, per reading uid */
/*
 * A log read's events at most, in journal bytes: the most recent that fit
 * (s44b F2). Parsed, a line of many small values is up to ~50 times its
 * bytes (s44e F4: 16 MiB of them took the daemon to 820 MB).
 */
#define CG_LOG_READ_BYTES (4u << 20)

struct cg_kernel {
	char *policy_file; /* NULL: embedded default */
	char *own_paths[KERNEL_MAX_OWN_PATHS];
	size_t n_own_paths;
	char *pubkey_file; /* require signed policies when set */
	struct cg_world world;
	struct cg_evidence *ev;	  /* NULL: evidence off */
	char *state_dir;	  /* where ev keeps its files (evidence reads), or NULL */
	struct cg_screen *screen; /* result screening patterns, compiled once */
	int64_t freshness_s;

	pthread_mutex_t gen_lock; /* guards gen and gen_seq */
	struct gen *gen;
	uint64_t gen_seq;
	json_t
	    *reload_failed; /* the last reload's failure {at, code, message}, or NULL (gen_lock) */

	pthread_mutex_t replay_lock; /* guards replay */
	/*
	 * Held while an evidence read (log, replay) holds the journal in
	 * memory: one at a time, so reads cost one journal's size at most,
	 * not one per read slot (s44b F2: two log reads of one uid took the
	 * daemon to 1.9 GB); by tickets, in the order they came (s44e F5: one
	 * uid looping its reads won the lock again and again). A leaf, taken
	 * alone, held only to take or give a turn.
	 */
	pthread_mutex_t journal_read_lock;
	pthread_cond_t journal_read_turn; /* with it: readers go in the order they came */
	uint64_t journal_read_next, journal_read_serving;
	struct cg_replay *replay;

	pthread_mutex_t lock; /* guards the job queue and the active list */
	pthread_cond_t cond;
	struct cg_job *queue_head, *queue_tail;
	struct cg_job *active; /* jobs handed to workers, for shutdown */
	/*
	 * Jobs whose uid already has CG_WORKERS_PER_UID_SHARE of the workers
	 * (queued or running), in arrival order: one uid's long calls never
	 * hold every worker. Whenever a job ends, each that may start now is
	 * queued (release_held_locked).
	 */
	struct cg_job *held_head, *held_tail;
	bool stopping;
	/*
	 * Evidence reads on workers (a log or replay scans the journal: seconds
	 * of CPU on a large one), by reader uid: at most CG_EV_READS_PER_UID
	 * each and CG_EV_READS_MAX in all, so that reads never hold the
	 * workers calls need. Guarded by lock.
	 */
	uid_t ev_reads[CG_EV_READS_MAX];
	unsigned n_ev_reads;
	unsigned n_threads;
	pthread_t *threads;

	/* Approval (issue 6): all guarded by lock. */
	bool approval;		     /* UNKNOWN waits for a human; else it is refused */
	int64_t approval_timeout_ms; /* 0: the policy's */
	struct cg_approvals approvals;
	struct cg_grants grants;
	pthread_cond_t timer_cond; /* CLOCK_MONOTONIC; wakes the deadline thread */
	pthread_t timer;
	bool timer_started;
	bool netns_pool;     /* this kernel started the network namespace pool */
	char *ssh_auth_sock; /* the daemon's own agent socket, for forward_agent */

	/* The operator's per-call log (cg_kernel_config.on_call); NULL: none. */
	cg_call_log_fn on_call;
	void *on_call_arg;
};

struct cg_job {
	atomic_int refs; /* the kernel's and the submitter's */
	struct cg_kernel *k;
	struct gen *gen;
	struct cg_gate gate; /* the request, its resolved call and the fold */
	json_t *decision;    /* the fold as JSON, rendered once (owned), or NULL */
	/*
	 * The request event's payload, held (owned) until the call's outcome is
	 * known: a refusal records it in its one event, anything else notes it
	 * first (ev_note_request). NULL once noted, or with evidence off.
	 */
	json_t *ev_request;
	struct cg_peer peer;
	char trace_id[40];
	uint64_t disk_promise; /* evidence bytes counted against the disk reserve (dispatch.c) */
	cg_respond_fn respond;
	void *cookie;
	/* With a call log, respond is job.c's logging wrapper and these the submitter's. */
	cg_respond_fn user_respond;
	void *user_cookie;
	int cancel_fd; /* eventfd; readable once cancelled; -1 until the call is accepted */
	atomic_bool cancelled;
	struct cg_job *next; /* queue link */
	struct cg_job *prev_active, *next_active;
	bool in_active;
	bool on_worker;		  /* queued for a worker or on one: counts against its uid */
	struct cg_job *held_next; /* in k's held list: its uid has its share of workers */

	/* Approval state; guarded by the kernel's lock until the job is queued. */
	struct cg_pending *pending; /* non-NULL while waiting for a human */
	struct cg_reply *final;	    /* answer without running (denied, timed out) */
	char request_sha256[65];    /* what the approval was bound to */
	size_t n_approved;
	uid_t approved_by[CG_APPROVAL_MAX_APPROVERS];
	char grant_id[40];  /* the grant that let it run, or "" */
	bool grant_request; /* the agent asked for a grant: a human opens it, or not */
	/* A worker runs this instead of run_job (evidence reads), or NULL. */
	void (*work)(struct cg_kernel *k, struct cg_job *j);

	/* sudo -n wrapping of privileged stages when the daemon is not root. */
	char **sudo_argv_saved[CG_WIRE_MAX_STAGES];
	size_t sudo_argc_saved[CG_WIRE_MAX_STAGES];
	char *sudo_exe_saved[CG_WIRE_MAX_STAGES];
	size_t sudo_wrapped; /* stages wrapped so far */
};

/* ---- gen.c ---- */

/* The generation in force, with a reference the caller drops with gen_put. */
struct gen *gen_get(struct cg_kernel *k);
/* Drop a reference; the last one frees the generation. Safe on NULL. */
void gen_put(struct gen *g);
/* Load the configured policy into a new generation (one reference). 0, or -1 and *err. */
int gen_load(struct cg_kernel *k, struct gen **out, struct cg_reply **err);
/* The gate's view of generation g over the kernel's world. */
struct cg_gate_ctx gen_gate_ctx(const struct cg_kernel *k, const struct gen *g);
/* {sha256, generation, source} of g. New reference, or NULL on OOM. */
json_t *gen_policy_json(const struct gen *g);
/* The last reload's failure since the last success ({at, code, message}), or NULL. New ref. */
json_t *gen_reload_failed(struct cg_kernel *k);
/* Swap in a fresh generation: POLICY_RELOADED, or the load error. Caller frees; *ok tells. */
struct cg_reply *gen_reload(struct cg_kernel *k, bool *ok);

/* ---- record.c (evidence) ---- */

/* Append a non-durable event (payload stolen); evidence off is not an error. */
void ev_note(struct cg_kernel *k, const char *trace, enum cg_event_type t, json_t *payload);
/* v with every string in it screened for secrets, in place (record.c). */
json_t *ev_screened(const struct cg_kernel *k, json_t *v);
/* The same, but one scan of the whole first: for paths, where a secret is rare. */
json_t *ev_screened_paths(const struct cg_kernel *k, json_t *v);
/* v itself (a new reference) when it holds no secret, else a screened copy. */
json_t *ev_screened_copy(const struct cg_kernel *k, json_t *v);
/* The decoded request, redacted (env hashed, secrets screened), with its peer. */
json_t *ev_request_json(const struct cg_kernel *k, const struct cg_request *req,
			const struct cg_peer *peer, bool redact);
/* Note the held request event (j->ev_request), if any: the call is not a one-event refusal. */
void ev_note_request(struct cg_kernel *k, struct cg_job *j);
/*
 * Record a call refused before anything else of it was recorded as one
 * "refusal" event, its whole trace (docs/evidence.md "Refusals"): request
 * (stolen, the held request payload, or NULL), the resolution when g is
 * given, decision (borrowed, or NULL before the chain) and the reply.
 */
void ev_refuse(struct cg_kernel *k, const char *trace, json_t *request, const struct cg_gate *g,
	       json_t *decision, const struct cg_reply *reply, const struct gen *gen);
/* Note RESOLVED, one RUNG per rung and DECISION (decision borrowed) for a decided gate. */
void ev_note_decided(struct cg_kernel *k, const char *trace, const struct cg_gate *g,
		     json_t *decision);
/*
 * Record the verdict of reply and seal the trace; once per trace, on every
 * path. folded is the call's fold, or NULL before the chain; decision (may
 * be NULL) is the fold as rendered once, whose constraints are reused. ran:
 * a command of the call started (the verdict's executed), which no reply
 * code tells alone (a cancel may come before the run or during it).
 */
void ev_seal(struct cg_kernel *k, const char *trace, const struct cg_reply *reply,
	     const struct cg_folded *folded, json_t *decision, const struct gen *g, bool ran);
/* The fold plus its policy as JSON (DECISION event, gate data). New reference or NULL. */
json_t *decision_json(const struct cg_folded *f, const struct gen *g);
/* The decision facts every reply of a decided call carries. New reference or NULL. */
json_t *decision_data(const struct cg_job *j);
/* Add to a reply's data which constraint sets bind each stage ("stage_sets"). */
void decision_add_stage_sets(json_t *data, const struct cg_job *j);

/* ---- respond.c ---- */

/* The fixed crash line for trace (no JSON library involved); NULL only on OOM. */
char *fallback_line(const char *trace, size_t *len);
/* Encode resp; on failure the crash line. Never NULL unless OOM. Caller frees. */
char *encode_response(const struct cg_response *resp, const char *trace, size_t *len);
/* Answer a reply only (no streams): trace set, reply consumed, respond called once. */
void answer_reply(cg_respond_fn respond, void *cookie, const char *id, const char *trace,
		  struct cg_reply *reply);
/* A refusal on the request path: trace set, verdict sealed, answered; reply consumed. */
void answer_sealed(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		   const char *trace, struct cg_reply *reply, const struct cg_folded *folded,
		   json_t *decision, const struct gen *g);

/* The same for a refusal recorded as one event (ev_refuse; request stolen). */
void answer_refusal(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		    const char *trace, struct cg_reply *reply, json_t *request,
		    const struct cg_gate *g, json_t *decision, const struct gen *gen);

/*
 * The same two for an answer given inside cg_kernel_submit: the line is
 * handed over first and the record queued right after (respond.c's
 * invariants say why that is safe only there).
 */
void answer_sealed_now(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		       const char *trace, struct cg_reply *reply, const struct cg_folded *folded,
		       json_t *decision, const struct gen *g);
void answer_refusal_now(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
			const char *trace, struct cg_reply *reply, json_t *request,
			const struct cg_gate *g, json_t *decision, const struct gen *gen);

/* ---- job.c ---- */

/* A job for one request (one reference), or NULL on OOM. */
struct cg_job *job_new(struct cg_kernel *k, const struct cg_peer *peer, cg_respond_fn respond,
		       void *cookie, const char trace[40]);
/* Make the job cancellable (its eventfd). 0, or -1 on failure. */
int job_accept(struct cg_job *j);
void job_hold(struct cg_job *j);
void job_put(struct cg_job *j);
/* Hand out a reference to the submitter, if it asked for one. */
void job_lend(struct cg_job *j, struct cg_job **job_out);
void active_add(struct cg_kernel *k, struct cg_job *j);
/* Hand a job to the workers. Caller holds k->lock. */
void enqueue_locked(struct cg_kernel *k, struct cg_job *j);
/* At shutdown: every held job to the workers (to be answered as cancelled). */
void release_all_held_locked(struct cg_kernel *k);
/* Wake the job's running children to die (cancel_fd). */
void job_signal_cancel(struct cg_job *j);
/* A worker thread's loop: run queued jobs until the kernel stops. */
void *worker_main(void *arg);

/* ---- run.c ---- */

/* Run (or finally answer) a job on a worker. Every path answers exactly once. */
void run_job(struct cg_kernel *k, struct cg_job *j);

/* Log each entry of a sweep's set-aside list (cg_confine_sweep), saying when. */
void log_set_aside(const char *trace, const json_t *set_aside, const char *when);

/* ---- sudo.c ---- */

int sudo_wrap(struct cg_job *j, struct cg_reply **err);
void sudo_unwrap(struct cg_job *j);
const char *sudo_password_needed(const struct cg_job *j, const struct cg_exec_result *res);
/*
 * No dead ends (issue 12): a privileged call on a daemon that is not root
 * runs through `sudo -n`; when that cannot work (its constraints need a
 * confinement sudo cannot gain privilege under, or `sudo -n -l` says the
 * command would need a password) no approval can make it run. Returns the
 * refusal to give before anyone is asked (caller frees), or NULL.
 */
struct cg_reply *sudo_dead_end(struct cg_job *j);
/*
 * A privileged call's "cannot be enforced" (E) as what it is on a non-root
 * daemon: PRIVILEGED_NEEDS_ROOT_DAEMON (I), wherever it is found (ux-s40 M1).
 * Consumes err; returns the reply to give.
 */
struct cg_reply *sudo_unenforceable(struct cg_reply *err);
/* Its first half, which spawns nothing (gate's dry run): the confinement sudo cannot keep. */
struct cg_reply *sudo_confine_dead_end(const struct cg_job *j);
/* Would j run through sudo (privileged, from a non-root daemon)? Only then can it dead-end. */
bool sudo_in_play(const struct cg_job *j);

/* ---- approve.c ---- */

/* How long a call waits for a human under generation g (ms). */
int64_t approval_timeout(const struct cg_kernel *k, const struct gen *g);
/* UNKNOWN: 0 queued or run under a grant, 1 no approver (caller refuses), -1 answered. */
int defer_to_human(struct cg_kernel *k, struct cg_job *j, struct cg_job **job_out);
/*
 * Would defer_to_human refuse j at once for want of anyone to ask: approval
 * off, no grant open, and no sudo dead end to name? Then the call is a
 * refusal like a BLOCK (one event). Conservative: false when unsure.
 */
bool nobody_to_ask(struct cg_kernel *k);
/*
 * What an UNKNOWN call would meet if it were sent (a gate dry run's answer):
 * {enabled, timeout_ms, approvers, grant?}, where grant names the open
 * grant that would run it without asking (none is used). New reference.
 */
json_t *gate_approval(struct cg_kernel *k, const struct cg_job *j);
/* An agent's grant request: validated, then queued for a human. Consumes j. */
void request_grant(struct cg_kernel *k, struct cg_job *j, bool claimed, struct cg_job **job_out);
/*
 * The open grant that covers j's call shown with constraints, or NULL. Never
 * one for a call whose rule needs more than one approver: a grant is opened
 * by one person, and would let one person run what the policy says needs
 * two (found by attack). k->lock held.
 */
struct cg_grant *grant_for_locked(struct cg_kernel *k, const struct cg_job *j,
				  const json_t *constraints);
/* Let j run under gr (a use consumed and recorded). Caller holds k->lock. */
void use_grant_locked(struct cg_kernel *k, struct cg_job *j, struct cg_grant *gr,
		      const uid_t *approver);
/* Out of the approval queue, to a worker with final (may be NULL: run). Caller holds k->lock. */
void settle_locked(struct cg_kernel *k, struct cg_job *j, struct cg_reply *final);
/* The deadline thread: no answer in time is a refusal. */
void *timer_main(void *arg);

/* ---- evidence_actions.c ---- */

/*
 * verdict, replay, log: a worker reads the evidence the peer may see (its
 * own uid's traces; every trace for an approver) and answers. Consumes j.
 */
void read_evidence(struct cg_kernel *k, struct cg_job *j, bool claimed, struct cg_job **job_out);

/* ---- dispatch.c ---- */

/* Give back a request id claimed in the replay window (refused as invalid). */
void release_claim(struct cg_kernel *k, const char *id, uid_t uid);

/* A reply as the public struct cg_result. */
void result_from_reply(const struct cg_reply *r, struct cg_result *out);

#endif
