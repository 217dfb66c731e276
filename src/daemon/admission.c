/* SPDX-License-Identifier: MIT */
/*
 * admission — who the loop serves next. Each uid has a queue of read
 * requests and a share: requests are admitted round robin over uids with
 * queued lines (the ring), a uid admitted less lately goes first, and while
 * another uid's call runs, a uid is held after each request for as long as
 * it took on the loop (the loop's budget; docs/limits.md). Admission waits
 * while evidence is behind (admit_open).
 *
 * Invariants: see server.c's; this file keeps those on turns and the
 * budget. Loop thread only.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_priv.h"
#include "util.h"

struct uidq *uid_get(struct server *s, uid_t uid, bool create)
{
	for (struct uidq *u = s->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	if (!create)
		return NULL;
	struct uidq *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->next = s->uids;
	s->uids = u;
	return u;
}

/* A spell of u's requests held by the loop's budget is over: say so, once. */
static void budget_report(struct uidq *u)
{
	if (u->held == 0)
		return;
	cg_log("info", NULL,
	       "uid %u: held to half of the loop for %lld ms (%u request(s), each followed by a "
	       "wait) while other uids' calls ran (the loop's budget; docs/limits.md)",
	       (unsigned)u->uid, (long long)((u->held_last_ns - u->held_since_ns) / 1000000),
	       u->held);
	u->held = 0;
}

/* Free u once it holds no connection, no queued request and no recent admission. */
static void uid_forget_idle(struct server *s, struct uidq *u)
{
	if (u->n_conns > 0 || u->in_ring || u->recent > 0 || u->run_head)
		return;
	budget_report(u);
	for (struct uidq **pp = &s->uids; *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	free(u);
}

/* Take a queued c out of its uid's queue; it is reading again, owed nothing. */
void uid_unqueue(struct server *s, struct conn *c)
{
	struct uidq *u = c->uq;
	if (!u || c->state != CONN_QUEUED)
		return;
	s->n_queued--;
	struct conn **pp = &u->head, *prev = NULL;
	while (*pp && *pp != c) {
		prev = *pp;
		pp = &(*pp)->qnext;
	}
	if (*pp)
		*pp = c->qnext;
	if (u->tail == c)
		u->tail = prev;
	c->qnext = NULL;
	c->state = CONN_READING;
}

/* Take c out of its uid's queue (if queued) and count, freeing an idle share. */
void uid_release(struct server *s, struct conn *c)
{
	struct uidq *u = c->uq;
	if (!u)
		return;
	uid_unqueue(s, c);
	c->uq = NULL;
	u->n_conns--;
	uid_forget_idle(s, u);
}

/* Count an admitted agent request against its uid's share. */
void share_count(struct server *s, struct uidq *u)
{
	if (u->recent++ == 0)
		s->n_recent++;
	s->recent_total++;
}

/*
 * Below its fair share: u was admitted less often lately than the mean of
 * the uids that were admitted at all. A uid alone is never below it.
 */
static bool share_light(const struct server *s, const struct uidq *u)
{
	return (uint64_t)u->recent * s->n_recent < s->recent_total;
}

/* Halve every uid's recent count, and forget uids with nothing left. */
void share_decay(struct server *s, int64_t now)
{
	s->share_decay_ns = now + (int64_t)SHARE_DECAY_MS * 1000000;
	s->recent_total = 0;
	s->n_recent = 0;
	for (struct uidq *u = s->uids, *next; u; u = next) {
		next = u->next;
		u->recent /= 2;
		s->recent_total += u->recent;
		s->n_recent += u->recent != 0;
		uid_forget_idle(s, u);
	}
}

/*
 * Has a uid other than u a call running that was submitted within
 * RUN_SHARE_MS? Each uid's run list is in submission order: its tail is the
 * newest call still running.
 */
static bool others_running(const struct server *s, const struct uidq *u, int64_t now)
{
	for (const struct uidq *o = s->uids; o; o = o->next)
		if (o != u && o->run_tail &&
		    now - o->run_tail->run_start_ns < (int64_t)RUN_SHARE_MS * 1000000)
			return true;
	return false;
}

static bool budget_held(const struct uidq *u, int64_t now)
{
	return u->held_until_ns > now;
}

/* c's request went to the kernel and was not answered there and then: its call runs. */
void run_begin(struct conn *c, int64_t now)
{
	struct uidq *u = c->uq;
	c->running = true;
	c->run_start_ns = now;
	c->run_next = NULL;
	c->run_prev = u->run_tail;
	if (u->run_tail)
		u->run_tail->run_next = c;
	else
		u->run_head = c;
	u->run_tail = c;
}

/*
 * u's request took the loop from t0 until now (deciding it, and writing an
 * answer given at once): while others' calls run, u waits as long again.
 */
void budget_hold(struct server *s, struct uidq *u, int64_t t0)
{
	int64_t now = cg_now_mono_ns();
	if (!others_running(s, u, now)) {
		u->held_until_ns = 0;
		budget_report(u);
		return;
	}
	u->held_until_ns = now + (now - t0);
	if (u->held > 0 && now - u->held_since_ns >= (int64_t)HELD_REPORT_MS * 1000000)
		budget_report(u); /* a long spell is logged as it goes */
	if (u->held++ == 0)
		u->held_since_ns = now;
	u->held_last_ns = u->held_until_ns;
}

/* c's call was answered (or c is going): it no longer runs. */
void run_end(struct conn *c)
{
	if (!c->running)
		return;
	c->running = false;
	struct uidq *u = c->uq;
	if (!u)
		return;
	if (c->run_prev)
		c->run_prev->run_next = c->run_next;
	else
		u->run_head = c->run_next;
	if (c->run_next)
		c->run_next->run_prev = c->run_prev;
	else
		u->run_tail = c->run_prev;
	c->run_prev = c->run_next = NULL;
}

static void ring_push(struct server *s, struct uidq *u)
{
	u->rr_next = NULL;
	u->in_ring = true;
	if (s->ring_tail)
		s->ring_tail->rr_next = u;
	else
		s->ring_head = u;
	s->ring_tail = u;
}

static struct uidq *ring_pop(struct server *s)
{
	struct uidq *u = s->ring_head;
	if (!u)
		return NULL;
	s->ring_head = u->rr_next;
	if (!s->ring_head)
		s->ring_tail = NULL;
	u->in_ring = false;
	u->rr_next = NULL;
	return u;
}

/* May another request go to the kernel now? Not while evidence is behind. */
bool admit_open(struct server *s)
{
	return cg_kernel_evidence_pending(s->k) < s->admit_queue;
}

/*
 * While evidence is behind, a quarter of --admit-queue more is kept for
 * uids below their fair share with nothing of their own waiting: the
 * backlog one uid's flood made holds that uid back, not the others.
 */
static bool reserve_open(struct server *s, const struct uidq *u)
{
	return !u->head && share_light(s, u) &&
	       cg_kernel_evidence_pending(s->k) < s->admit_queue + s->admit_queue / 4;
}

/*
 * A whole line is here. Admin lines, agent lines when nobody is waiting and
 * evidence keeps up, and lines of a uid below its share while the reserve
 * lasts go to the kernel at once; others wait in their uid's queue, and
 * admit() takes them round robin over uids. Lines read from a batch of new
 * connections all wait for admit(), except those of a uid below its share
 * with nothing waiting: the requests that arrived together are decided round
 * robin over uids, not in the order of the listening socket's backlog.
 */
void conn_ready(struct server *s, struct conn *c, size_t line_len, bool had_newline, bool too_long)
{
	struct uidq *u = c->uq;
	if (c->admin || !u ||
	    (!budget_held(u, cg_now_mono_ns()) &&
	     ((!s->accepting && !s->ring_head && admit_open(s)) || reserve_open(s, u)))) {
		conn_submit(s, c, line_len, had_newline, too_long);
		return;
	}
	fifo_remove(s, c); /* the wait is the daemon's, not the peer's */
	if (set_events(s, c, 0) < 0) {
		conn_free(s, c);
		return;
	}
	c->q_len = line_len;
	c->q_newline = had_newline;
	c->q_too_long = too_long;
	c->state = CONN_QUEUED;
	s->n_queued++;
	c->qnext = NULL;
	if (u->tail)
		u->tail->qnext = c;
	else
		u->head = c;
	u->tail = c;
	if (!u->in_ring)
		ring_push(s, u);
}

/*
 * Has the peer closed its end entirely? A queued request's hang-up may not
 * have been reported by epoll yet; it is withdrawn all the same, whatever
 * its place in the queue. (A half-close, POLLRDHUP alone, is not.)
 */
static bool peer_hung_up(const struct conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = 0 };
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

/*
 * Admit queued requests, one per uid in turn, while evidence keeps up. A
 * uid held by its budget goes to the back of the ring; when only held uids
 * are left, hold_wake_ns says when to look again.
 */
void admit(struct server *s)
{
	int64_t now = cg_now_mono_ns();
	struct uidq *first_held = NULL;
	s->hold_wake_ns = 0;
	for (int n = 0; n < ADMIT_BATCH && s->ring_head && admit_open(s);) {
		struct uidq *u = ring_pop(s);
		struct conn *c = u->head;
		if (!c) {
			uid_forget_idle(s, u); /* its last connection left while queued */
			n++;
			continue;
		}
		if (budget_held(u, now)) {
			ring_push(s, u);
			if (u == first_held) { /* round the ring: every uid in it is held */
				s->hold_wake_ns = first_held->held_until_ns;
				for (struct uidq *h = s->ring_head; h; h = h->rr_next)
					if (h->held_until_ns < s->hold_wake_ns)
						s->hold_wake_ns = h->held_until_ns;
				break;
			}
			if (!first_held)
				first_held = u;
			continue;
		}
		first_held = NULL;
		n++;
		uid_unqueue(s, c);
		if (u->head)
			ring_push(s, u);
		if (peer_hung_up(c)) {
			conn_free(s, c); /* withdrawn before it was admitted */
			continue;
		}
		conn_submit(s, c, c->q_len, c->q_newline, c->q_too_long);
		drain_done(s); /* a call that finished meanwhile is not held for the batch */
	}
	/* Held back: evidence writes the wake eventfd once it is below the mark. */
	if (s->ring_head && !admit_open(s))
		cg_kernel_evidence_wake_below(s->k, s->admit_queue, s->wake_fd);
}
