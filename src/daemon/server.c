/* SPDX-License-Identifier: MIT */
/*
 * server — the daemon's transport: Unix sockets and a small epoll loop.
 * This file is the loop, the connections and their I/O, admin requests,
 * accepting and signals; who goes next is admission.c's, whether an admin
 * peer is a person peer.c's, the approval notifier notifier.c's and the
 * sockets themselves listener.c's (server_priv.h).
 *
 * One thread runs the loop. It owns every connection; worker threads only
 * ever touch a connection through respond(), which queues the response line
 * under a mutex and wakes the loop through an eventfd. Each connection reads
 * one line (capped at CG_WIRE_MAX_LINE, bounded by a read deadline), submits
 * it to the kernel, writes the one response line non-blocking (EPOLLOUT for
 * large ones), half-closes and closes. signalfd delivers SIGTERM/SIGINT
 * (stop) and SIGHUP (reload); deadlines are the loop's wait timeout, taken
 * from the head of a FIFO of reading connections (every connection has the
 * same read deadline, so accept order is deadline order).
 *
 * Invariants:
 *  - The loop MUST NOT block on a peer: every socket is non-blocking, and a
 *    slow peer is cut off by the read deadline.
 *  - No source MAY hold a loop turn without end: accepts are taken
 *    ACCEPT_BATCH at a time and queued requests admitted ADMIT_BATCH at a
 *    time, so finished calls are answered between them.
 *  - Requests that arrive together are decided round robin over uids, never
 *    in the listening socket's backlog order: one uid's reconnecting flood
 *    fills the backlog, not the turns.
 *  - While another uid's call runs (one submitted within RUN_SHARE_MS), each
 *    of a uid's requests MUST be followed by a wait as long as the request
 *    took on the loop (budget_hold): about half of the loop for that uid.
 *    The loop's own timer ends the wait; it never waits for an unrelated
 *    event.
 *  - A connection freed while a batch of events is handled MUST NOT be
 *    released before the batch ends: answers are handed out between its
 *    events, and a later event of the batch may point at it (SRC_FREED).
 *  - A live socket MUST NOT be clobbered: a lock file, then a connect probe;
 *    only a socket that refuses connections is unlinked as stale.
 *  - The socket MUST NOT be reachable before its mode is set: chmod/chown
 *    happen between bind() and listen(), and a socket that is bound but not
 *    listening refuses every connect.
 *  - A connection struct MUST outlive its kernel job: it is freed only after
 *    respond() has been called for it (the job may still be running when the
 *    peer goes away), and its job is always released.
 *  - The admin socket MUST only serve the daemon's own uid (or root), checked
 *    by SO_PEERCRED on every connection, on top of its 0600 mode.
 */
#include "server_priv.h"

#include <errno.h>
#include <malloc.h>
#include <limits.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <systemd/sd-daemon.h>

#include "reply.h"
#include "util.h"
#include "wire.h"

/* ---- small helpers ----------------------------------------------------- */

int set_events(struct server *s, struct conn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = &c->src };
	int op = c->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	if (epoll_ctl(s->ep_fd, op, c->fd, &ev) < 0)
		return -1;
	c->in_epoll = true;
	return 0;
}

static void drop_events(struct server *s, struct conn *c)
{
	if (c->in_epoll && c->fd >= 0)
		(void)epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
	c->in_epoll = false;
}

void fifo_remove(struct server *s, struct conn *c)
{
	if (!c->in_fifo)
		return;
	if (c->rprev)
		c->rprev->rnext = c->rnext;
	else
		s->fifo_head = c->rnext;
	if (c->rnext)
		c->rnext->rprev = c->rprev;
	else
		s->fifo_tail = c->rprev;
	c->rprev = c->rnext = NULL;
	c->in_fifo = false;
}

/*
 * Append to the deadline FIFO. Deadlines are "now + a constant" per list
 * position, and the read and write constants differ, so the FIFO is kept
 * sorted by inserting from the tail (almost always O(1)).
 */
static void fifo_push(struct server *s, struct conn *c, int64_t deadline_ns)
{
	fifo_remove(s, c);
	c->deadline_ns = deadline_ns;
	struct conn *after = s->fifo_tail;
	while (after && after->deadline_ns > deadline_ns)
		after = after->rprev;
	c->rprev = after;
	c->rnext = after ? after->rnext : s->fifo_head;
	if (c->rnext)
		c->rnext->rprev = c;
	else
		s->fifo_tail = c;
	if (after)
		after->rnext = c;
	else
		s->fifo_head = c;
	c->in_fifo = true;
}

/* Set the response bytes c holds, in the daemon's count and its uid's. */
static void held_set(struct server *s, struct conn *c, uint64_t len)
{
	s->out_held = s->out_held - c->held + len;
	if (c->uq)
		c->uq->out_held = c->uq->out_held - c->held + len;
	c->held = len;
}

void conn_free(struct server *s, struct conn *c)
{
	fifo_remove(s, c);
	/*
	 * EPOLL_CTL_DEL before close(): a worker's fork (the runner) holds a
	 * copy of every descriptor until its child execs, and while any copy
	 * is open close() does not take the file out of the epoll set, so an
	 * event would later point at this freed struct.
	 */
	drop_events(s, c);
	if (c->fd >= 0)
		close(c->fd);
	if (c->job)
		cg_job_release(c->job);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->admin)
		s->n_admin--;
	else
		s->n_conns--;
	run_end(c);
	bool large = c->held >= LARGE_REPLY;
	held_set(s, c, 0);
	uid_release(s, c);
	free(c->rbuf);
	free(c->wbuf);
	if (s->in_batch) {
		/*
		 * A later event of the same epoll batch may still point at c
		 * (answers are handed out between events, and one can free a
		 * connection whose event is further on): release it after the
		 * batch, marked so that such an event is skipped.
		 */
		c->src.kind = SRC_FREED;
		c->freed_next = s->freed;
		s->freed = c;
	} else {
		free(c);
	}
	if (large)
		(void)malloc_trim(0); /* give a large response's pages back */
}

/* Release the connections freed during an epoll batch (see conn_free). */
static void release_freed(struct server *s)
{
	while (s->freed) {
		struct conn *c = s->freed;
		s->freed = c->freed_next;
		free(c);
	}
}

/*
 * Close the socket of a connection. If the kernel still owes it a response
 * (a job is running), the struct stays until respond() arrives, because the
 * kernel holds its address as the cookie.
 */
static void conn_close(struct server *s, struct conn *c)
{
	if (c->state == CONN_WAITING) {
		fifo_remove(s, c);
		drop_events(s, c);
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		return;
	}
	conn_free(s, c);
}

/* Start sending a response line (ownership of line passes to c). */
static void conn_start_write(struct server *s, struct conn *c, char *line, size_t len);

/* ---- the kernel's callback (any thread) -------------------------------- */

/*
 * respond() may run on a worker thread, or on the loop thread inside
 * cg_kernel_submit. It only hands the line over (inline, or through the
 * mutex-guarded queue and an eventfd wake); the loop does the writing, so
 * no socket is touched off the loop thread.
 */
static void on_respond(void *cookie, char *line, size_t len)
{
	struct conn *c = cookie;
	struct server *s = c->srv;
	/*
	 * Answered inside cg_kernel_submit on the loop thread: conn_submit
	 * writes it as soon as submit returns. The thread test comes first so
	 * that a worker never reads s->submitting (which only the loop
	 * thread writes).
	 */
	if (pthread_equal(pthread_self(), s->loop_thread) && s->submitting == c) {
		c->wbuf = line;
		c->wlen = len;
		c->responded = true;
		c->answered_inline = true;
		/*
		 * A line the output bounds always let through goes out now: the
		 * kernel builds and queues the call's record after handing it
		 * over (answer_sealed_now), so the peer reads its answer
		 * meanwhile. conn_submit sends the rest, if any.
		 */
		c->sent_inline = 0;
		if (line && len <= ALWAYS_SENT) {
			ssize_t n = send(c->fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0)
				c->sent_inline = (size_t)n;
		}
		return;
	}
	pthread_mutex_lock(&s->mu);
	c->wbuf = line;
	c->wlen = len;
	c->woff = 0;
	c->responded = true;
	c->done_next = NULL;
	if (s->done_tail)
		s->done_tail->done_next = c;
	else
		s->done_head = c;
	s->done_tail = c;
	pthread_mutex_unlock(&s->mu);
	uint64_t one = 1;
	/* The eventfd counter cannot overflow in practice; a failed wake is
	 * harmless because the loop drains the queue on every iteration too. */
	ssize_t n = write(s->wake_fd, &one, sizeof(one));
	(void)n;
}

/* Move delivered responses from the queue to their connections (loop thread). */
void drain_done(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	struct conn *c = s->done_head;
	s->done_head = s->done_tail = NULL;
	pthread_mutex_unlock(&s->mu);
	while (c) {
		struct conn *next = c->done_next;
		char *line = c->wbuf;
		size_t len = c->wlen;
		c->wbuf = NULL;
		c->wlen = 0;
		run_end(c);
		if (c->job) {
			cg_job_release(c->job);
			c->job = NULL;
		}
		c->state = CONN_READING; /* no longer owed anything */
		if (c->fd < 0) {
			/* The peer left while its call ran; nobody to tell. */
			free(line);
			conn_free(s, c);
		} else {
			conn_start_write(s, c, line, len);
		}
		c = next;
	}
}

/* ---- admin requests ---------------------------------------------------- */

/* A response line carrying one reply (status taken from the registry). */
static char *reply_line(const char *id, struct cg_reply *r, size_t *len)
{
	const struct cg_reply_def *d = cg_reply_def_of(r);
	json_t *o = json_object();
	json_t *rj = cg_reply_to_json(r);
	char *out = NULL;
	if (!o || !rj)
		goto release;
	json_object_set_new(o, "id", json_string(id ? id : ""));
	json_object_set_new(o, "status", json_string(cg_status_name(d->status)));
	if (d->status == CG_STATUS_ERROR) {
		json_t *m = json_object_get(rj, "message");
		if (m)
			json_object_set(o, "message", m);
	}
	json_object_set(o, "reply", rj);
	out = json_dumps(o, JSON_COMPACT);
release:
	json_decref(rj);
	json_decref(o);
	if (!out)
		return NULL;
	size_t n = strlen(out);
	char *line = realloc(out, n + 2);
	if (!line) {
		free(out);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	*len = n + 1;
	return line;
}

static char *admin_simple(const char *id, enum cg_reply_id rid, const char *action, size_t *len)
{
	struct cg_reply *r = cg_reply_build(rid, "{s:s}", "action", action);
	char tid[40] = "";
	if (cg_uuid4(tid, sizeof(tid)) == 0)
		cg_reply_set_trace(r, tid);
	char *line = reply_line(id, r, len);
	cg_reply_free(r);
	return line;
}

/* The kernel answers admin lines synchronously; this catches the line. */
void admin_respond(void *cookie, char *line, size_t len)
{
	struct admin_box *b = cookie;
	b->line = line;
	b->len = len;
}

/*
 * Serve one admin line. "stop" is the transport's own (it ends this loop);
 * everything else (ping, reload, pending, approve, deny, grant_*) is the
 * kernel's, through cg_kernel_admin, which answers before it returns.
 */
static char *admin_handle(struct server *s, struct conn *c, bool *stop, size_t *len)
{
	json_t *req = json_loadb(c->rbuf, c->rlen, JSON_REJECT_DUPLICATES, NULL);
	const char *action = json_string_value(json_object_get(req, "action"));
	const char *id = json_string_value(json_object_get(req, "id"));
	char *line = NULL;
	cg_log("info", NULL, "admin %s from uid %u pid %d", action ? action : "(invalid)",
	       (unsigned)c->peer.uid, (int)c->peer.pid);
	bool answers = action && (strcmp(action, "approve") == 0 || strcmp(action, "deny") == 0 ||
				  strcmp(action, "grant_open") == 0);
	/* What changes the daemon for everyone: its owner's or an approver's. */
	bool runs_it = action && (strcmp(action, "stop") == 0 || strcmp(action, "reload") == 0 ||
				  strcmp(action, "grant_close") == 0);
	if ((answers && !c->approver) || (runs_it && !c->approver && c->peer.uid != geteuid())) {
		/*
		 * Only configured approvers answer; the two-person rule then
		 * counts distinct uids among them (the kernel refuses a repeated
		 * uid). Other admin peers (--admin-group) may look, not act: an
		 * attack stopped the daemon, reloaded it and closed an
		 * approver's grant as a mere member of the admin group.
		 */
		cg_log("warn", NULL, "admin %s refused: uid %u is not a configured approver",
		       action, (unsigned)c->peer.uid);
		struct cg_reply *r = cg_reply_new(CG_R_APPROVER_NOT_ALLOWED, "{s:I,s:s}", "uid",
						  (json_int_t)c->peer.uid, "action", action);
		char tid[40] = "";
		if (cg_uuid4(tid, sizeof(tid)) == 0)
			cg_reply_set_trace(r, tid);
		line = reply_line(id, r, len);
		cg_reply_free(r);
		goto release;
	}
	if (action && strcmp(action, "stop") == 0) {
		line = admin_simple(id, CG_R_ADMIN_DONE, action, len);
		*stop = true;
		goto release;
	}
	struct admin_box box = { 0 };
	cg_kernel_admin(s->k, c->rbuf, c->rlen, &c->peer, admin_respond, &box);
	line = box.line;
	*len = box.len;
	if (line && action && strcmp(action, "reload") == 0)
		cg_log("info", NULL, "admin reload: %.*s", (int)(box.len ? box.len - 1 : 0), line);
release:
	json_decref(req);
	return line;
}

/*
 * A transport refusal's line, recorded as a trace once a second per step
 * and uid and sent again meanwhile. A peer reconnecting in a loop past its
 * cap once made a trace per connection, which nothing held back (no
 * admission queue, no evidence back-pressure): the daemon grew by hundreds
 * of megabytes and others' calls waited 20 s. A repeat answers with the
 * trace of the first. Consumes r; returns a malloc'd line, or NULL.
 */
static char *memo_refusal(struct server *s, const char *which, const struct cg_peer *peer,
			  struct cg_reply *r, size_t *len)
{
	int64_t now = cg_now_mono_ns();
	struct refusal_memo *slot = &s->memo[0];
	for (size_t i = 0; i < REFUSAL_MEMOS; i++) {
		struct refusal_memo *m = &s->memo[i];
		if (m->line && m->uid == peer->uid && strcmp(m->which, which) == 0 &&
		    now < m->until_ns) {
			cg_reply_free(r);
			slot = m;
			goto copy;
		}
		if (m->until_ns < slot->until_ns)
			slot = m; /* the one that expires first is replaced */
	}
	free(slot->line);
	slot->line = cg_kernel_transport_reply(s->k, which, peer, r, &slot->len);
	slot->until_ns = slot->line ? now + 1000000000LL : 0;
	slot->uid = peer->uid;
	(void)snprintf(slot->which, sizeof(slot->which), "%s", which);
	if (!slot->line)
		return NULL;
copy:;
	char *line = malloc(slot->len + 1);
	if (line) {
		memcpy(line, slot->line, slot->len);
		line[slot->len] = '\0';
		*len = slot->len;
	}
	return line;
}

/* busy or read_deadline, with the limit the transport enforces (the kernel knows neither). */
static char *transport_reply(struct server *s, const char *which, const struct cg_peer *peer,
			     size_t *len)
{
	struct cg_reply *r =
	    strcmp(which, "busy") == 0
		? cg_reply_new(CG_R_SERVER_BUSY, "{s:I}", "limit", (json_int_t)s->max_conns)
		: cg_reply_new(CG_R_READ_DEADLINE, "{s:I}", "deadline_ms",
			       (json_int_t)(s->read_deadline_ns / 1000000));
	return memo_refusal(s, which, peer, r, len);
}

/* ---- connection I/O ---------------------------------------------------- */

static void conn_try_write(struct server *s, struct conn *c)
{
	while (c->woff < c->wlen) {
		/* One send per readiness; MSG_NOSIGNAL: a vanished peer is EPIPE,
		 * never a SIGPIPE that would kill the daemon. */
		ssize_t n =
		    send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->woff += (size_t)n;
			if (c->woff < c->wlen) /* progress: the idle deadline starts again */
				fifo_push(s, c, cg_now_mono_ns() + s->write_idle_ns);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (set_events(s, c, EPOLLOUT) < 0)
				conn_free(s, c);
			return;
		}
		conn_free(s, c); /* EPIPE/ECONNRESET: the peer is gone */
		return;
	}
	/*
	 * Whole line sent. close() alone gives the peer its EOF (the half-close
	 * that says "no more is coming"); a separate shutdown(SHUT_WR) would
	 * only add a syscall, since nothing is read after the response.
	 */
	conn_free(s, c);
}

/* The value of "key":"..." first found in line (at most max-1 bytes), or "". */
static void line_string(const char *line, size_t len, const char *key, bool last, char *out,
			size_t max)
{
	char pat[32];
	int pn = snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	const char *hit = NULL, *p = line, *end = line + len;
	while (p < end && (p = memmem(p, (size_t)(end - p), pat, (size_t)pn))) {
		hit = p;
		p += pn;
		if (!last)
			break;
	}
	out[0] = '\0';
	if (!hit)
		return;
	hit += pn;
	size_t n = 0;
	while (hit + n < end && hit[n] != '"' && hit[n] != '\\' && n + 1 < max)
		n++;
	memcpy(out, hit, n);
	out[n] = '\0';
}

/*
 * The response line's own "id" (its first member), decoded: an id may hold
 * escapes (\" \\ \uXXXX), which line_string would cut at. "" if absent.
 */
static void line_id(const char *line, size_t len, char *out, size_t max)
{
	static const char head[] = "{\"id\":\"";
	size_t h = sizeof(head) - 1, i = h;
	out[0] = '\0';
	if (len < h || memcmp(line, head, h) != 0)
		return;
	while (i < len && i < 4096 && line[i] != '"')
		i += line[i] == '\\' ? 2 : 1;
	if (i >= len || line[i] != '"')
		return;
	json_t *v = json_loadb(line + h - 1, i - (h - 1) + 1, JSON_DECODE_ANY, NULL);
	if (json_is_string(v))
		(void)snprintf(out, max, "%s", json_string_value(v));
	json_decref(v);
}

/*
 * The error line that stands for a response which cannot be sent whole: the
 * request's id and the response's trace id carried over, so the client can
 * tell which call it was and find its record.
 */
static char *stand_in(const char *line, size_t len, struct cg_reply *r, size_t *out_len)
{
	char id[512], trace[80];
	line_id(line, len, id, sizeof(id));
	line_string(line, len, "trace_id", true, trace, sizeof(trace));
	if (trace[0])
		cg_reply_set_trace(r, trace);
	char *out = reply_line(id, r, out_len);
	cg_reply_free(r);
	return out;
}

/* Past the per-response limit, a uid's share or the daemon-wide budget: the error instead. */
static char *bound_output(struct server *s, const struct conn *c, char *line, size_t *len)
{
	char trace[80];
	struct cg_reply *r = NULL;
	if (*len <= ALWAYS_SENT)
		return line; /* small lines always go: an error line is as large */
	line_string(line, *len, "trace_id", true, trace, sizeof(trace));
	if (*len > s->max_reply)
		r = cg_reply_new(CG_R_REPLY_TOO_LARGE, "{s:I,s:I,s:s}", "bytes", (json_int_t)*len,
				 "limit", (json_int_t)s->max_reply, "ref", trace);
	/* A uid's first held response may be large (up to --max-reply-bytes); past it, half. */
	else if (c->uq && c->uq->out_held - c->held > 0 &&
		 c->uq->out_held - c->held + *len > s->out_budget / 2)
		r = cg_reply_new(CG_R_OUTPUT_SHARE, "{s:I,s:I,s:I,s:I,s:s}", "uid",
				 (json_int_t)c->peer.uid, "held", (json_int_t)c->uq->out_held,
				 "bytes", (json_int_t)*len, "limit",
				 (json_int_t)(s->out_budget / 2), "ref", trace);
	else if (s->out_held - c->held + *len > s->out_budget)
		r = cg_reply_new(CG_R_OUTPUT_BUDGET, "{s:I,s:I,s:I,s:s}", "held",
				 (json_int_t)s->out_held, "bytes", (json_int_t)*len, "limit",
				 (json_int_t)s->out_budget, "ref", trace);
	if (!r)
		return line;
	cg_log("warn", trace, "response of %zu bytes not sent (%s)", *len,
	       cg_reply_def_of(r)->code);
	char *out = stand_in(line, *len, r, len);
	free(line);
	return out;
}

/* Write line to c, of which the first sent bytes already went (on_respond). */
static void conn_start_write_from(struct server *s, struct conn *c, char *line, size_t len,
				  size_t sent)
{
	if (line && !c->admin && !sent)
		line = bound_output(s, c, line, &len);
	if (!line) {
		/* The kernel could not even build a line (OOM): close rather
		 * than hang the peer. */
		conn_free(s, c);
		return;
	}
	free(c->wbuf);
	c->wbuf = line;
	c->wlen = len;
	c->woff = sent;
	held_set(s, c, len);
	c->state = CONN_WRITING;
	fifo_push(s, c, cg_now_mono_ns() + s->write_idle_ns);
	conn_try_write(s, c);
}

static void conn_start_write(struct server *s, struct conn *c, char *line, size_t len)
{
	conn_start_write_from(s, c, line, len, 0);
}

/*
 * A reader took nothing for the idle deadline: its response is cut. What was
 * not sent is replaced by an error line (after a newline, so the cut line is
 * visibly unfinished), which a reader that resumes gets; one more idle
 * deadline without progress closes the connection.
 */
static void conn_cut(struct server *s, struct conn *c)
{
	cg_log("warn", NULL, "peer pid %d uid %u took no bytes for %lld ms (%zu of %zu sent); %s",
	       (int)c->peer.pid, (unsigned)c->peer.uid, (long long)(s->write_idle_ns / 1000000),
	       c->woff, c->wlen, c->cut ? "closed" : "response cut");
	if (c->cut) {
		conn_free(s, c);
		return;
	}
	size_t len = 0;
	char trace[80];
	line_string(c->wbuf, c->wlen, "trace_id", true, trace, sizeof(trace));
	struct cg_reply *r =
	    cg_reply_new(CG_R_REPLY_CUT, "{s:I,s:I,s:I,s:s}", "idle_ms",
			 (json_int_t)(s->write_idle_ns / 1000000), "sent", (json_int_t)c->woff,
			 "bytes", (json_int_t)c->wlen, "ref", trace);
	char *err = stand_in(c->wbuf, c->wlen, r, &len);
	char *line = err ? malloc(len + 1) : NULL;
	if (!line) {
		free(err);
		conn_free(s, c);
		return;
	}
	/* Nothing sent yet: the error replaces the response; else it follows a newline. */
	size_t off = c->woff ? 1 : 0;
	line[0] = '\n';
	memcpy(line + off, err, len);
	free(err);
	free(c->wbuf);
	c->wbuf = line;
	c->wlen = len + off;
	c->woff = 0;
	held_set(s, c, c->wlen);
	c->cut = true;
	fifo_push(s, c, cg_now_mono_ns() + s->write_idle_ns);
	conn_try_write(s, c);
}

/*
 * Requests served up to now: a successor refuses those dated before the
 * lock file's mtime (and before its own start). The mark is set
 * SERVED_LEAD_NS ahead and moved only once the clock reaches it, so a
 * stream of calls costs one futimens per lead rather than one each; every
 * request taken is still dated before the mark. A request dated further
 * ahead (inside the freshness window) moves the mark past its own time
 * before it goes on (the wire's mark-ahead hook). The price: a successor
 * refuses requests dated up to the lead after the last one served
 * (docs/approval.md).
 */
#define SERVED_LEAD_NS (10 * 1000000LL)

static struct server *marking; /* the server whose lock marks requests (one per process) */

/* Move the mark to at least at_least + 1 ns. 0, or -1 with errno: not marked. */
static int mark_until(struct server *s, int64_t at_least)
{
	if (s->served_fd < 0 || at_least < atomic_load(&s->served_until))
		return 0;
	pthread_mutex_lock(&s->mark_mu);
	int rc = 0;
	int64_t until = cg_now_wall_ns() + SERVED_LEAD_NS;
	if (until <= at_least)
		until = at_least + 1;
	if (at_least >= atomic_load(&s->served_until)) {
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT },
					  { .tv_sec = until / 1000000000,
					    .tv_nsec = until % 1000000000 } };
		struct stat st;
		/* A file system that keeps coarser times must not round the mark down. */
		if (futimens(s->served_fd, ts) != 0 || fstat(s->served_fd, &st) != 0)
			rc = -1;
		else if ((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec <= at_least)
			rc = -1, errno = ERANGE;
		else
			atomic_store(&s->served_until, until);
	}
	pthread_mutex_unlock(&s->mark_mu);
	return rc;
}

static void mark_served(struct server *s)
{
	(void)mark_until(s, cg_now_wall_ns());
}

/* The wire's hook for a request dated ahead of the clock (cg_wire_set_mark_ahead). */
static int mark_ahead(int64_t wall_ns)
{
	return marking ? mark_until(marking, wall_ns) : 0;
}

/* Hand the collected line to the kernel (or to the admin handler). */
void conn_submit(struct server *s, struct conn *c, size_t line_len, bool had_newline, bool too_long)
{
	fifo_remove(s, c);
	if (c->admin) {
		bool stop = false;
		size_t len = 0;
		c->rlen = line_len;
		char *line = NULL;
		if (!had_newline || too_long) {
			struct cg_reply *r =
			    too_long ? cg_reply_new(CG_R_LINE_TOO_LONG, "{s:I}", "limit",
						    (json_int_t)CG_WIRE_MAX_LINE)
				     : cg_reply_new(CG_R_LINE_NO_NEWLINE, "{s:I}", "bytes",
						    (json_int_t)line_len);
			line = reply_line("", r, &len);
			cg_reply_free(r);
		} else {
			line = admin_handle(s, c, &stop, &len);
		}
		drop_events(s, c);
		conn_start_write(s, c, line, len);
		if (stop)
			s->stopping = true;
		return;
	}
	/* Not freed before this returns, even if c is: its recent count is not 0. */
	struct uidq *u = c->uq;
	int64_t t0 = cg_now_mono_ns();
	if (u)
		share_count(s, u);
	/*
	 * While the call runs, watch only for a full hang-up (EPOLLHUP is
	 * always reported). EPOLLRDHUP alone is a half-close, which a client
	 * may legitimately do after sending its line; it is not withdrawal.
	 */
	c->state = CONN_WAITING;
	struct cg_job *job = NULL;
	mark_served(s);
	s->submitting = c;
	cg_kernel_submit(s->k, c->rbuf, line_len, had_newline, too_long, &c->peer, on_respond, c,
			 &job);
	s->submitting = NULL;
	c->job = job;
	if (u && job && !c->answered_inline)
		run_begin(c, cg_now_mono_ns());
	free(c->rbuf);
	c->rbuf = NULL;
	c->rlen = c->ralloc = 0;
	if (c->answered_inline) {
		/* Decided without running anything (refusals, ping, gate):
		 * write now, without the eventfd round trip. */
		char *line = c->wbuf;
		size_t len = c->wlen, sent = c->sent_inline;
		c->wbuf = NULL;
		c->answered_inline = false;
		c->sent_inline = 0;
		if (c->job) {
			cg_job_release(c->job);
			c->job = NULL;
		}
		/* Still registered for EPOLLIN: harmless, because the write
		 * either completes now or switches the events to EPOLLOUT. */
		conn_start_write_from(s, c, line, len, sent);
		if (u)
			budget_hold(s, u, t0);
		return;
	}
	if (set_events(s, c, 0) < 0)
		drop_events(s, c);
	notify_new_pending(s);
	if (u)
		budget_hold(s, u, t0);
}

/*
 * Read what the peer has sent. Returns true while the connection still waits
 * for more bytes (it is then alive and in CONN_READING); false when it moved
 * on (submitted, answered) or was freed: the caller MUST NOT touch c then.
 */
static bool conn_read(struct server *s, struct conn *c)
{
	for (;;) {
		if (c->rlen == c->ralloc) {
			if (c->ralloc >= CG_WIRE_MAX_LINE) {
				/* The cap holds no newline: the line is too long.
				 * Stop reading; answer now. */
				conn_ready(s, c, c->rlen, false, true);
				return false;
			}
			size_t na = c->ralloc ? c->ralloc * 2 : 4096;
			if (na > CG_WIRE_MAX_LINE)
				na = CG_WIRE_MAX_LINE;
			char *nb = realloc(c->rbuf, na);
			if (!nb) {
				cg_log("error", NULL, "out of memory reading a request; closing");
				conn_free(s, c);
				return false;
			}
			c->rbuf = nb;
			c->ralloc = na;
		}
		size_t want = c->ralloc - c->rlen;
		if (want > READ_CHUNK)
			want = READ_CHUNK;
		ssize_t n = cg_read_some(c->fd, c->rbuf + c->rlen, want);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			conn_free(s, c); /* ECONNRESET and friends */
			return false;
		}
		if (n == 0) {
			/* EOF: no bytes at all is a probe (e.g. a second daemon
			 * checking for a live socket), not a request. */
			if (c->rlen == 0)
				conn_free(s, c);
			else
				conn_ready(s, c, c->rlen, false, false);
			return false;
		}
		char *nl = memchr(c->rbuf + c->rlen, '\n', (size_t)n);
		c->rlen += (size_t)n;
		if (nl) {
			/* Bytes after the newline are ignored: one request per
			 * connection. */
			conn_ready(s, c, (size_t)(nl - c->rbuf), true, false);
			return false;
		}
	}
}

static void conn_event(struct server *s, struct conn *c, uint32_t events)
{
	switch (c->state) {
	case CONN_READING:
		if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
			(void)conn_read(s, c);
		return;
	case CONN_WAITING:
		if (events & (EPOLLHUP | EPOLLERR)) {
			/* The peer withdrew while its call ran (issue 6): cancel
			 * it; respond() still comes and frees the struct. */
			if (c->job && !c->cancelled) {
				c->cancelled = true;
				cg_job_cancel(c->job);
			}
			conn_close(s, c);
		}
		return;
	case CONN_WRITING:
		if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
			conn_try_write(s, c);
		return;
	case CONN_QUEUED:
		if (events & (EPOLLHUP | EPOLLERR))
			conn_free(s, c); /* withdrawn before it was admitted */
		return;
	}
}

/* A deadline passed: a reader gets the read-deadline reply, a writer is dropped. */
static void expire(struct server *s, int64_t now)
{
	while (s->fifo_head && s->fifo_head->deadline_ns <= now) {
		struct conn *c = s->fifo_head;
		fifo_remove(s, c);
		if (c->state == CONN_WRITING) {
			conn_cut(s, c);
			continue;
		}
		if (c->state != CONN_READING) {
			conn_free(s, c);
			continue;
		}
		cg_log("warn", NULL, "peer pid %d uid %u missed the read deadline (%zu bytes read)",
		       (int)c->peer.pid, (unsigned)c->peer.uid, c->rlen);
		size_t len = 0;
		char *line = transport_reply(s, "read_deadline", &c->peer, &len);
		drop_events(s, c);
		conn_start_write(s, c, line, len);
	}
}

/* The bounds of issue 14: --max-conns-per-uid, --write-idle-ms, --max-reply-bytes,
 * --output-budget, --admit-queue. 1 taken, 0 not one of them, -1 bad value. */
static int bound_option(struct cg_server_config *cfg, const char *name, const char *value,
			char *why, size_t why_len)
{
	static const struct {
		const char *name;
		long long max;
	} opts[] = { { "--max-conns-per-uid", 1000000 },
		     { "--write-idle-ms", 3600000 },
		     { "--max-reply-bytes", (long long)1 << 40 },
		     { "--output-budget", (long long)1 << 40 },
		     { "--admit-queue", 1 << 20 } };
	size_t i = 0;
	while (i < CG_ARRAY_LEN(opts) && strcmp(name, opts[i].name) != 0)
		i++;
	if (i == CG_ARRAY_LEN(opts))
		return 0;
	char *end = NULL;
	errno = 0;
	long long v = strtoll(value, &end, 10);
	if (errno || end == value || *end || v < 1 || v > opts[i].max) {
		(void)snprintf(why, why_len, "%s needs 1..%lld, got '%s'", name, opts[i].max,
			       value);
		return -1;
	}
	switch (i) {
	case 0:
		cfg->max_conns_per_uid = (unsigned)v;
		break;
	case 1:
		cfg->write_idle_ms = v;
		break;
	case 2:
		cfg->max_reply_bytes = (uint64_t)v;
		break;
	case 3:
		cfg->output_budget = (uint64_t)v;
		break;
	default:
		cfg->admit_queue = (unsigned)v;
		break;
	}
	return 1;
}

int cg_server_option(struct cg_server_config *cfg, const char *name, const char *value, char *why,
		     size_t why_len)
{
	char *end = NULL;
	if (strcmp(name, "--approver-uid") == 0) {
		errno = 0;
		long long v = strtoll(value, &end, 10);
		if (errno || end == value || *end || v < 0 || v > INT32_MAX) {
			(void)snprintf(why, why_len, "--approver-uid needs a uid, got '%s'", value);
			return -1;
		}
		if (cfg->n_approver_uids == CG_SERVER_MAX_APPROVERS) {
			(void)snprintf(why, why_len, "at most %d --approver-uid flags",
				       CG_SERVER_MAX_APPROVERS);
			return -1;
		}
		cfg->approver_uids[cfg->n_approver_uids++] = (uid_t)v;
		return 1;
	}
	if (strcmp(name, "--approver-group") == 0) {
		struct group *gr = getgrnam(value);
		long long v = -1;
		if (gr) {
			v = gr->gr_gid;
		} else {
			errno = 0;
			v = strtoll(value, &end, 10);
			if (errno || end == value || *end || v < 0 || v > INT32_MAX) {
				(void)snprintf(why, why_len, "--approver-group: unknown group '%s'",
					       value);
				return -1;
			}
		}
		if (cfg->n_approver_gids == CG_SERVER_MAX_APPROVERS) {
			(void)snprintf(why, why_len, "at most %d --approver-group flags",
				       CG_SERVER_MAX_APPROVERS);
			return -1;
		}
		cfg->approver_gids[cfg->n_approver_gids++] = (gid_t)v;
		return 1;
	}
	int b = bound_option(cfg, name, value, why, why_len);
	if (b != 0)
		return b;
	bool prog = strcmp(name, "--approval-notify") == 0;
	if (prog || strcmp(name, "--approval-notify-arg") == 0) {
		if (prog && (value[0] != '/' || cfg->n_notify_args)) {
			(void)snprintf(why, why_len,
				       "--approval-notify needs an absolute program path, once");
			return -1;
		}
		if (!prog && cfg->n_notify_args == 0) {
			(void)snprintf(why, why_len,
				       "--approval-notify-arg must follow --approval-notify");
			return -1;
		}
		if (cfg->n_notify_args == CG_SERVER_MAX_NOTIFY_ARGS) {
			(void)snprintf(why, why_len, "at most %d notifier arguments",
				       CG_SERVER_MAX_NOTIFY_ARGS);
			return -1;
		}
		cfg->notify_argv[cfg->n_notify_args++] = value;
		cfg->notify_argv[cfg->n_notify_args] = NULL;
		return 1;
	}
	return 0;
}

/* ---- accepting --------------------------------------------------------- */

/*
 * May this peer use the admin socket? The daemon's own uid and root always;
 * members of the admin group (by primary gid, or by a supplementary group
 * the kernel reports with SO_PEERGROUPS) when one is configured. The file
 * mode already keeps others out; this check holds even if it is loosened.
 */
static bool admin_peer_ok(struct server *s, int fd, const struct ucred *cred)
{
	if (cred->uid == s->euid || cred->uid == 0)
		return true;
	if (!s->cfg->has_admin_group)
		return false;
	if (cred->gid == s->cfg->admin_group)
		return true;
	gid_t groups[256];
	socklen_t gl = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) < 0)
		return false; /* ERANGE (too many groups) or old kernel: fail closed */
	for (size_t i = 0; i < gl / sizeof(gid_t); i++)
		if (groups[i] == s->cfg->admin_group)
			return true;
	return false;
}

/*
 * Answer a refused peer with one line and close. Whatever it already sent is
 * read away first: closing a Unix socket with unread bytes resets the
 * connection, and the peer would lose the line that says why. The peer was
 * never admitted (the uid's connection cap, an admin peer refused), and
 * the refusal is a trace of its own, like busy (its id once named nothing
 * a verdict could find).
 */
static void refuse_and_close(struct server *s, int fd, const char *which, const struct ucred *cred,
			     struct cg_reply *r)
{
	struct cg_peer peer = { .pid = cred->pid, .uid = cred->uid, .gid = cred->gid };
	size_t len = 0;
	char *line = memo_refusal(s, which, &peer, r, &len);
	char sink[4096];
	for (int i = 0; i < 256 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	if (line)
		(void)send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	free(line);
	(void)shutdown(fd, SHUT_WR);
	for (int i = 0; i < 256 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	close(fd);
}

/* Accept up to ACCEPT_BATCH waiting connections, reading each one's line if it is here. */
static void accept_batch(struct server *s, int lfd, bool admin)
{
	int n_got = 0;
	for (int n = 0; n < ACCEPT_BATCH; n++) {
		/*
		 * While admission keeps up, a turn queues no more than
		 * ACCEPT_BATCH lines: the rest wait in the listening socket's
		 * backlog, so a burst is not turned away by the connection caps
		 * while it waits for admit(). (While evidence is behind,
		 * accepting goes on, so that a uid below its share is still
		 * seen; the caps then bound the queues.)
		 */
		if (!admin && s->n_queued >= ACCEPT_BATCH && admit_open(s))
			return;
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Out of descriptors: level-triggered epoll would
				 * spin; pause accepting for a moment. */
				cg_log("warn", NULL, "accept: %s; pausing accepts for 100 ms",
				       cg_errno_name(errno));
				s->accept_paused_until_ns = cg_now_mono_ns() + 100000000;
				struct epoll_event ev = { .events = 0 };
				ev.data.ptr = admin ? &s->admin_src : &s->listen_src;
				(void)epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, lfd, &ev);
			}
			return; /* EAGAIN, or a peer that vanished: nothing to do */
		}
		struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
		socklen_t cl = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
			cg_log("warn", NULL, "SO_PEERCRED: %s; closing", cg_errno_name(errno));
			close(fd);
			continue;
		}
		if (admin && !admin_peer_ok(s, fd, &cred)) {
			cg_log("warn", NULL, "admin socket: refused uid %u pid %d (not the owner)",
			       (unsigned)cred.uid, (int)cred.pid);
			refuse_and_close(s, fd, "admin_peer", &cred,
					 cg_reply_new(CG_R_ADMIN_PEER_REFUSED, "{s:I}", "uid",
						      (json_int_t)cred.uid));
			continue;
		}
		char where[PATH_MAX + 32] = "";
		if (admin && !peer_outside_calls(s, fd, cred.pid, where, sizeof(where))) {
			cg_log("warn", NULL,
			       "admin socket: refused uid %u pid %d: inside a call (%s)",
			       (unsigned)cred.uid, (int)cred.pid, where);
			refuse_and_close(s, fd, "admin_peer", &cred,
					 cg_reply_new(CG_R_ADMIN_PEER_IN_CALL, "{s:I,s:I,s:s}",
						      "pid", (json_int_t)cred.pid, "uid",
						      (json_int_t)cred.uid, "where", where));
			continue;
		}
		unsigned cap = admin ? ADMIN_MAX_CONNS : s->max_conns;
		unsigned have = admin ? s->n_admin : s->n_conns;
		if (have >= cap || s->stopping) {
			/* Past the cap: one small line fits any socket buffer,
			 * so a single non-blocking send is enough. */
			size_t len = 0;
			struct cg_peer peer = { .pid = cred.pid, .uid = cred.uid, .gid = cred.gid };
			char *line = transport_reply(s, "busy", &peer, &len);
			if (line)
				(void)send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
			free(line);
			close(fd);
			continue;
		}
		struct uidq *u = admin ? NULL : uid_get(s, cred.uid, true);
		if (!admin && (!u || u->n_conns >= s->per_uid)) {
			cg_log("warn", NULL, "uid %u is at its %u connections; refused pid %d",
			       (unsigned)cred.uid, s->per_uid, (int)cred.pid);
			refuse_and_close(s, fd, "conn_cap", &cred,
					 cg_reply_new(CG_R_PEER_CONN_CAP, "{s:I,s:I}", "uid",
						      (json_int_t)cred.uid, "limit",
						      (json_int_t)s->per_uid));
			continue;
		}
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->uq = u;
		if (u)
			u->n_conns++;
		c->src.kind = SRC_CONN;
		c->srv = s;
		c->fd = fd;
		c->admin = admin;
		c->approver = admin && peer_is_approver(s, fd, &cred);
		/* Evidence reads on the agent socket: only an approver named by
		 * --approver-uid/--approver-group reads other uids' traces. */
		c->peer.approver = admin ? c->approver
					 : (s->cfg->n_approver_uids || s->cfg->n_approver_gids) &&
					       peer_is_approver(s, fd, &cred);
		c->state = CONN_READING;
		c->peer.pid = cred.pid;
		c->peer.uid = cred.uid;
		c->peer.gid = cred.gid;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		if (admin)
			s->n_admin++;
		else
			s->n_conns++;
		fifo_push(s, c, cg_now_mono_ns() + s->read_deadline_ns);
		/*
		 * Most clients send their line right after connect(), so it is
		 * often already here: read before registering, which saves the
		 * epoll_ctl and a loop turn for every such request. The first
		 * connection of a turn is decided at once; the lines of those
		 * that came with it are queued for admit() (conn_ready), so that
		 * they are decided round robin over uids, not in backlog order.
		 */
		s->accepting = n_got++ > 0;
		if (conn_read(s, c) && set_events(s, c, EPOLLIN | EPOLLRDHUP) < 0)
			conn_free(s, c);
		s->accepting = false;
	}
}

static void resume_accepts(struct server *s)
{
	s->accept_paused_until_ns = 0;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->listen_src };
	if (s->listen_fd >= 0)
		(void)epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
	ev.data.ptr = &s->admin_src;
	if (s->admin_fd >= 0)
		(void)epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, s->admin_fd, &ev);
}

/* ---- signals ----------------------------------------------------------- */

static void handle_signals(struct server *s)
{
	struct signalfd_siginfo si;
	for (;;) {
		ssize_t n = read(s->sig_fd, &si, sizeof(si));
		if (n != (ssize_t)sizeof(si))
			return;
		if (si.ssi_signo == SIGHUP) {
			struct cg_result res;
			struct timespec mono;
			clock_gettime(CLOCK_MONOTONIC, &mono);
			(void)sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
					 (unsigned long long)mono.tv_sec * 1000000ULL +
					     (unsigned long long)mono.tv_nsec / 1000ULL);
			int rc = cg_kernel_reload(s->k, &res);
			(void)sd_notifyf(0, "READY=1\nSTATUS=policy reload %s: %s",
					 rc == 0 ? "succeeded" : "failed", res.code);
			cg_log(rc == 0 ? "info" : "error", NULL, "SIGHUP reload %s: %c %s: %s",
			       rc == 0 ? "succeeded" : "failed (old policy stays in force)",
			       res.type, res.code, res.message);
		} else {
			cg_log("info", NULL, "%s received; stopping",
			       si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
			s->stopping = true;
		}
	}
}

/* ---- the loop ---------------------------------------------------------- */

static int add_src(struct server *s, int fd, struct src *src, enum src_kind kind)
{
	src->kind = kind;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = src };
	return epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, fd, &ev);
}

/*
 * Wait for events for at most wait_ns (-1: until one comes). epoll_pwait2
 * (Linux 5.11) takes nanoseconds, which the loop's budget needs; where it is
 * missing or filtered (ENOSYS, EPERM), epoll_wait with the wait rounded up
 * to whole milliseconds, from then on.
 */
static int loop_wait(struct server *s, struct epoll_event *evs, int max, int64_t wait_ns)
{
	if (!s->no_pwait2) {
		struct timespec ts = { .tv_sec = wait_ns / 1000000000,
				       .tv_nsec = wait_ns % 1000000000 };
		int n = epoll_pwait2(s->ep_fd, evs, max, wait_ns < 0 ? NULL : &ts, NULL);
		if (n >= 0 || (errno != ENOSYS && errno != EPERM))
			return n;
		s->no_pwait2 = true;
		cg_log("warn", NULL,
		       "epoll_pwait2: %s; waiting in whole milliseconds (the loop's budget holds "
		       "a uid up to 1 ms longer)",
		       strerror(errno));
	}
	int64_t ms = wait_ns < 0 ? -1 : (wait_ns + 999999) / 1000000;
	return epoll_wait(s->ep_fd, evs, max, ms > INT32_MAX ? INT32_MAX : (int)ms);
}

/* How long the loop may wait for events, in ns; -1: until one comes. */
static int64_t wait_timeout_ns(struct server *s, int64_t now)
{
	int64_t next = INT64_MAX;
	if (s->fifo_head)
		next = s->fifo_head->deadline_ns;
	if (s->accept_paused_until_ns && s->accept_paused_until_ns < next)
		next = s->accept_paused_until_ns;
	if (s->ring_head && admit_open(s) && s->hold_wake_ns) {
		if (s->hold_wake_ns < next) /* only held uids wait: until the first is free */
			next = s->hold_wake_ns;
	} else if (s->ring_head && admit_open(s)) {
		next = now; /* more to admit: only look for new events first */
	} else if (s->ring_head && now + ADMIT_RETRY_MS * 1000000 < next) {
		next = now + ADMIT_RETRY_MS * 1000000;
	}
	if (next == INT64_MAX)
		return -1;
	return next <= now ? 0 : next - now;
}

static void stop_listening(struct server *s)
{
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		s->listen_fd = -1;
		if (s->have_listen_st)
			unlink_ours(s->cfg->socket_path, &s->listen_st);
	}
	if (s->admin_fd >= 0) {
		close(s->admin_fd);
		s->admin_fd = -1;
		if (s->have_admin_st)
			unlink_ours(s->cfg->admin_socket_path, &s->admin_st);
	}
}

/*
 * The clean stop: no new connections; readers that have not delivered a
 * line are closed unanswered (nothing was asked); the kernel cancels and
 * answers every running call; those answers are flushed (bounded), then
 * the sockets are unlinked.
 */
static void stop_cleanly(struct server *s)
{
	stop_listening(s);
	for (struct conn *c = s->conns, *next; c; c = next) {
		next = c->next;
		if (c->state == CONN_READING) {
			conn_free(s, c);
		} else if (c->state == CONN_QUEUED) {
			/* Never admitted: told so, rather than left to the flush's timeout. */
			uid_unqueue(s, c);
			struct cg_reply *r = cg_reply_new(CG_R_SHUTTING_DOWN, NULL);
			size_t len = 0;
			char *line = reply_line("", r, &len);
			cg_reply_free(r);
			conn_start_write(s, c, line, len);
		}
	}
	cg_kernel_shutdown(s->k);
	drain_done(s);
	int64_t until = cg_now_mono_ns() + (int64_t)STOP_FLUSH_MS * 1000000;
	while (s->conns) {
		int64_t now = cg_now_mono_ns();
		if (now >= until)
			break;
		struct epoll_event evs[64];
		int n = epoll_wait(s->ep_fd, evs, 64, (int)((until - now) / 1000000) + 1);
		for (int i = 0; i < n; i++) {
			struct src *src = evs[i].data.ptr;
			/*
			 * Every readable source is read, or epoll_wait returns at
			 * once and the flush spins: a signal now (already
			 * stopping) is dropped, an exited notifier reaped.
			 */
			if (src->kind == SRC_CONN) {
				conn_event(s, (struct conn *)src, evs[i].events);
			} else if (src->kind == SRC_WAKE) {
				uint64_t v;
				ssize_t r = read(s->wake_fd, &v, sizeof(v));
				(void)r;
			} else if (src->kind == SRC_SIGNAL) {
				struct signalfd_siginfo si;
				while (read(s->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
					cg_log("info", NULL, "signal %u ignored: already stopping",
					       si.ssi_signo);
			} else if (src->kind == SRC_NOTIFIER) {
				notifier_reap(s, (struct notifier *)src, false);
			}
		}
		drain_done(s);
	}
	while (s->conns) {
		struct conn *c = s->conns;
		if (c->state == CONN_WAITING) {
			/* The kernel promised to answer everything before
			 * shutdown returned; a straggler is a kernel bug, and
			 * freeing it would leave the kernel a dangling cookie. */
			cg_log("error", NULL, "a call was not answered at shutdown; leaking it");
			s->conns = c->next;
			continue;
		}
		conn_free(s, c);
	}
}

int cg_server_run(struct cg_kernel *k, const struct cg_server_config *cfg)
{
	int ret = -1;
	bool loop_failed = false;
	struct server *s = calloc(1, sizeof(*s));
	if (!s) {
		cg_log("error", NULL, "out of memory");
		return -1;
	}
	s->k = k;
	s->cfg = cfg;
	s->ep_fd = s->sig_fd = s->wake_fd = s->listen_fd = s->admin_fd = -1;
	s->lock_fd = s->admin_lock_fd = s->served_fd = -1;
	/*
	 * Memory (issue 14): glibc's per-thread arenas keep freed memory
	 * resident, and large responses are freed on this thread long after
	 * a worker made them; a few arenas and a low trim threshold let RSS
	 * return after large calls (conn_free trims after a large response).
	 * Four, not two: the loop, the journal writer and the package thread
	 * all allocate for every call, and with two of them sharing an arena
	 * a refused flood cost a quarter more CPU per call (its lock).
	 */
	(void)mallopt(M_ARENA_MAX, 4);
	(void)mallopt(M_TRIM_THRESHOLD, 1 << 20);
	(void)mallopt(M_MMAP_THRESHOLD, 1 << 20);
	s->max_conns = cfg->max_conns ? cfg->max_conns : DEFAULT_MAX_CONNS;
	s->per_uid = cfg->max_conns_per_uid ? cfg->max_conns_per_uid : DEFAULT_PER_UID_CONNS;
	s->write_idle_ns = (cfg->write_idle_ms ? cfg->write_idle_ms : WRITE_IDLE_MS) * 1000000;
	s->max_reply = cfg->max_reply_bytes ? cfg->max_reply_bytes : DEFAULT_MAX_REPLY;
	s->out_budget = cfg->output_budget ? cfg->output_budget : DEFAULT_OUTPUT_BUDGET;
	s->admit_queue = cfg->admit_queue ? cfg->admit_queue : DEFAULT_ADMIT_QUEUE;
	s->read_deadline_ns =
	    (cfg->read_deadline_ms > 0 ? cfg->read_deadline_ms : DEFAULT_READ_DEADLINE) * 1000000;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->mark_mu, NULL);
	s->loop_thread = pthread_self();
	s->euid = geteuid();
	s->self_pid = getpid();
	for (size_t i = 0; i < MAX_NOTIFIERS; i++)
		s->notifiers[i].pidfd = -1;
	/* What "inside a call" is measured against (peer_outside_calls). */
	s->own_cgroup = malloc(PROC_READ_MAX);
	if (!s->own_cgroup || read_proc("/proc/self/cgroup", s->own_cgroup, PROC_READ_MAX) != 0 ||
	    stat("/proc/self/ns/pid", &s->pidns_st) != 0 || (s->nspid_depth = nspid_depth(0)) < 1) {
		cg_log("error", NULL, "cannot read the daemon's own cgroup and pid namespace: %s",
		       strerror(errno));
		goto close_fds;
	}

	/*
	 * The signals MUST already be blocked in every thread (main blocks them
	 * before cg_kernel_new starts workers); blocking here again covers
	 * callers that did not, for this thread at least.
	 */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	s->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->sig_fd < 0 || s->ep_fd < 0 || s->wake_fd < 0) {
		cg_log("error", NULL, "cannot set up the event loop: %s", strerror(errno));
		goto close_fds;
	}
	mode_t mode = cfg->socket_group != (gid_t)-1 ? 0660 : 0600;
	int64_t not_before = 0;
	if (cfg->has_passed_fd) {
		s->listen_fd =
		    adopt_listener(cfg->passed_fd, cfg->socket_path, &s->lock_fd, &not_before);
		if (s->listen_fd < 0)
			goto close_fds;
	} else {
		s->listen_fd = open_listener(cfg->socket_path, mode, cfg->socket_group, &s->lock_fd,
					     &s->listen_st, &not_before);
		if (s->listen_fd < 0)
			goto close_fds;
		s->have_listen_st = true;
	}
	s->served_fd = s->lock_fd;
	/*
	 * The lock's mtime is the last daemon's mark (mark_until): past its
	 * start when it took a request dated ahead of its clock. Socket
	 * activation already starts from it (adopt_listener; a lock it made
	 * just now is no mark).
	 */
	struct stat lst;
	if (!cfg->has_passed_fd && s->lock_fd >= 0 && fstat(s->lock_fd, &lst) == 0) {
		int64_t mark = (int64_t)lst.st_mtim.tv_sec * 1000000000 + lst.st_mtim.tv_nsec;
		if (mark > not_before)
			not_before = mark;
	}
	if (cfg->has_passed_admin_fd) {
		s->admin_fd = adopt_listener(cfg->passed_admin_fd, cfg->admin_socket_path,
					     &s->admin_lock_fd, NULL);
		if (s->admin_fd < 0)
			goto close_fds;
	} else if (cfg->admin_socket_path) {
		s->admin_fd =
		    open_listener(cfg->admin_socket_path, cfg->has_admin_group ? 0660 : 0600,
				  cfg->has_admin_group ? cfg->admin_group : (gid_t)-1,
				  &s->admin_lock_fd, &s->admin_st, NULL);
		if (s->admin_fd < 0)
			goto close_fds;
		s->have_admin_st = true;
	}
	/*
	 * The seen-id window starts empty: nothing dated before we held the
	 * agent socket's lock is accepted. Not the process start: a daemon
	 * still serving while we initialised may have accepted requests dated
	 * after it.
	 */
	cg_wire_set_not_before(not_before);
	marking = s;
	cg_wire_set_mark_ahead(mark_ahead);
	if (add_src(s, s->sig_fd, &s->sig_src, SRC_SIGNAL) < 0 ||
	    add_src(s, s->wake_fd, &s->wake_src, SRC_WAKE) < 0 ||
	    add_src(s, s->listen_fd, &s->listen_src, SRC_LISTEN) < 0 ||
	    (s->admin_fd >= 0 && add_src(s, s->admin_fd, &s->admin_src, SRC_ADMIN_LISTEN) < 0)) {
		cg_log("error", NULL, "epoll_ctl: %s", strerror(errno));
		goto close_fds;
	}
	cg_log("info", NULL, "listening on %s%s%s (max %u connections, read deadline %lld ms)%s",
	       cfg->socket_path, cfg->admin_socket_path ? ", admin " : "",
	       cfg->admin_socket_path ? cfg->admin_socket_path : "", s->max_conns,
	       (long long)(s->read_deadline_ns / 1000000),
	       cfg->has_passed_fd ? " (socket activated)" : "");
	(void)sd_notifyf(0, "READY=1\nSTATUS=listening on %s", cfg->socket_path);
	(void)malloc_trim(0); /* start-up's scratch (policy, screen compilation) */

	while (!s->stopping) {
		int64_t now = cg_now_mono_ns();
		struct epoll_event evs[128];
		int n = loop_wait(s, evs, 128, wait_timeout_ns(s, now));
		if (n < 0 && errno != EINTR) {
			cg_log("error", NULL, "waiting for events: %s", strerror(errno));
			loop_failed = true;
			break;
		}
		s->in_batch = true;
		for (int i = 0; i < n; i++) {
			struct src *src = evs[i].data.ptr;
			switch (src->kind) {
			case SRC_FREED:
				break; /* freed by an earlier event of this batch */
			case SRC_LISTEN:
				accept_batch(s, s->listen_fd, false);
				break;
			case SRC_ADMIN_LISTEN:
				accept_batch(s, s->admin_fd, true);
				break;
			case SRC_SIGNAL:
				handle_signals(s);
				break;
			case SRC_WAKE: {
				uint64_t v;
				ssize_t r = read(s->wake_fd, &v, sizeof(v));
				(void)r;
				break;
			}
			case SRC_NOTIFIER:
				notifier_reap(s, (struct notifier *)src, false);
				break;
			case SRC_CONN:
				conn_event(s, (struct conn *)src, evs[i].events);
				break;
			}
			drain_done(s); /* answers owed wait for one event, not a whole batch */
		}
		s->in_batch = false;
		release_freed(s);
		drain_done(s);
		admit(s);
		now = cg_now_mono_ns();
		expire(s, now);
		if (now >= s->share_decay_ns)
			share_decay(s, now);
		if (s->accept_paused_until_ns && s->accept_paused_until_ns <= now)
			resume_accepts(s);
	}
	(void)sd_notify(0, "STOPPING=1");
	stop_cleanly(s);
	cg_log("info", NULL, "stopped");
	ret = loop_failed ? -1 : 0; /* a loop that broke is a failure: systemd restarts it */
close_fds:
	for (size_t i = 0; i < MAX_NOTIFIERS; i++)
		if (s->notifiers[i].pid) {
			/* A notifier only informs; the calls it was about are answered. */
			(void)kill(s->notifiers[i].pid, SIGKILL);
			notifier_reap(s, &s->notifiers[i], true);
		}
	json_decref(s->notified);
	while (s->uids) {
		struct uidq *u = s->uids;
		s->uids = u->next;
		free(u);
	}
	free(s->own_cgroup);
	stop_listening(s);
	if (marking == s) {
		cg_wire_set_mark_ahead(NULL);
		marking = NULL;
	}
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->admin_lock_fd >= 0)
		close(s->admin_lock_fd);
	if (s->wake_fd >= 0) {
		cg_kernel_evidence_wake_below(s->k, 0, -1); /* evidence outlives this fd */
		close(s->wake_fd);
	}
	if (s->sig_fd >= 0)
		close(s->sig_fd);
	if (s->ep_fd >= 0)
		close(s->ep_fd);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->mark_mu);
	for (size_t i = 0; i < REFUSAL_MEMOS; i++)
		free(s->memo[i].line);
	free(s);
	return ret;
}
