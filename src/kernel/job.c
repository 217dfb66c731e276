/* SPDX-License-Identifier: MIT */
/*
 * job — one call in flight: its reference counts, cancellation, the queue
 * the workers take calls from, and the workers' loop.
 *
 * A job is created per request on the dispatch path and holds the gate's
 * result (request, resolved call, fold), the policy generation it was
 * decided under, and the submitter's respond callback.
 *
 * Invariants:
 *  - A job MUST be freed only when its last reference is dropped: the
 *    kernel's (queue, approval queue or dispatch) and the submitter's
 *    (*job_out) are independent.
 *  - The queue and the active list are guarded by k->lock; a queued or
 *    waiting job is on the active list, so that shutdown can cancel it.
 *  - Workers MUST NOT take signals (the daemon's loop owns them).
 */
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kernel_priv.h"

/*
 * Where "key": stands as a member name in [from, to) of an encoded line: the
 * quote must follow '{' or ',', which no string content can (inside a JSON
 * string a quote is always escaped). last: the last such place, else the
 * first. Returns the byte after the colon, or NULL.
 */
static const char *member(const char *from, const char *to, const char *key, bool last)
{
	char pat[32];
	int n = snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *hit = NULL;
	for (const char *p = from; p < to;) {
		const char *q = memmem(p, (size_t)(to - p), pat, (size_t)n);
		if (!q)
			break;
		if (q > from && (q[-1] == '{' || q[-1] == ',')) {
			hit = q + n;
			if (!last)
				break;
		}
		p = q + 1;
	}
	return hit;
}

/* Past the JSON string whose opening quote is at p; NULL if it does not end before to. */
static const char *skip_string(const char *p, const char *to)
{
	for (p++; p < to;) {
		const char *q = memchr(p, '"', (size_t)(to - p));
		if (!q)
			return NULL;
		size_t bs = 0;
		while (q - bs > p && q[-1 - (ptrdiff_t)bs] == '\\')
			bs++;
		if (bs % 2 == 0)
			return q + 1;
		p = q + 1;
	}
	return NULL;
}

/* Past the JSON value at p (the line is the daemon's own encoding); NULL if cut. */
static const char *skip_value(const char *p, const char *to)
{
	if (p < to && *p == '"')
		return skip_string(p, to);
	int depth = 0;
	for (; p < to; p++) {
		if (*p == '"') {
			if (!(p = skip_string(p, to)))
				return NULL;
			p--;
		} else if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			if (depth == 0)
				return p;
			if (--depth == 0)
				return p + 1;
		} else if (*p == ',' && depth == 0) {
			return p;
		}
	}
	return NULL;
}

/*
 * The value of the top-level member key of the encoded object line, or NULL.
 * Not member(): an evidence read's data holds journal events whose payloads
 * have "reply" members too, and the call log named one of theirs.
 */
static const char *top_member(const char *line, const char *to, const char *key)
{
	size_t kl = strlen(key);
	const char *p = line;
	if (p >= to || *p != '{')
		return NULL;
	for (p++; p < to && *p == '"';) {
		const char *k = p + 1, *ke = skip_string(p, to);
		if (!ke || ke >= to || *ke != ':')
			return NULL;
		if ((size_t)(ke - 1 - k) == kl && memcmp(k, key, kl) == 0)
			return ke + 1;
		if (!(p = skip_value(ke + 1, to)) || p >= to || *p != ',')
			return NULL;
		p++;
	}
	return NULL;
}

/* A short plain string value at p (no escapes: codes, names, rule ids) into out. */
static const char *short_string(const char *p, const char *to, char *out, size_t cap)
{
	if (!p || p >= to || *p != '"')
		return NULL;
	size_t i = 0;
	for (p++; p < to && *p != '"' && *p != '\\' && i + 1 < cap; p++)
		out[i++] = *p;
	if (p >= to || *p != '"')
		return NULL;
	out[i] = '\0';
	return out;
}

/*
 * What the per-call record needs, read from the encoded response without
 * parsing it (a response may be hundreds of megabytes): the reply is the
 * line's last member, its type and code come first, the decision and rule
 * sit in its data, and the last stage's exit code precedes it.
 */
struct line_facts {
	char type[4], code[24], decision[24], rule[160];
	const char *decision_p, *rule_p;
	bool ran;
	int exit_code;
};

static void read_facts(const char *line, size_t len, struct line_facts *f)
{
	const char *end = line + len;
	const char *reply = top_member(line, end, "reply");
	if (!reply)
		return;
	if (!short_string(member(reply, end, "type", false), end, f->type, sizeof(f->type)))
		f->type[0] = '\0';
	if (!short_string(member(reply, end, "code", false), end, f->code, sizeof(f->code)))
		f->code[0] = '\0';
	const char *data = member(reply, end, "data", false);
	if (data) {
		f->decision_p = short_string(member(data, end, "decision", false), end, f->decision,
					     sizeof(f->decision));
		f->rule_p = short_string(member(data, end, "rule_id", false), end, f->rule,
					 sizeof(f->rule));
	}
	const char *stages = top_member(line, end, "stages");
	const char *ec = stages ? member(stages, reply, "exit_code", true) : NULL;
	if (ec && (*ec == '-' || (*ec >= '0' && *ec <= '9'))) {
		f->ran = true;
		f->exit_code = (int)strtol(ec, NULL, 10);
	}
}

/*
 * Every answer passes here on its way out: the per-call record is taken
 * from the line, whichever path produced it, so no answering path needs to
 * know about logging. Then the submitter's respond, exactly once. The log
 * line comes first: a log that blocks or fails holds the answer back with
 * it, so no client is answered while its evidence record (which an answer
 * given at once queues right after the respond, respond.c) waits behind a
 * stalled log.
 */
static void log_respond(void *cookie, char *line, size_t len)
{
	struct cg_job *j = cookie;
	struct cg_kernel *k = j->k;
	struct line_facts f = { .type = "" };
	if (line)
		read_facts(line, len, &f);
	char rtype = f.type[0] ? f.type[0] : 'E';
	struct cg_call_record rec = {
		.trace_id = j->trace_id,
		.peer_pid = j->peer.pid,
		.peer_uid = j->peer.uid,
		.host = j->gate.req && j->gate.req->host ? j->gate.req->host : "",
		.decision = f.decision_p   ? f.decision_p
			    : rtype == 'S' ? "ALLOW"
					   : "BLOCK",
		.rule_id = f.rule_p ? f.rule_p : "",
		.reply_type = rtype,
		.reply_code = f.code[0] ? f.code : cg_reply_registry[CG_R_SYS_CRASH].code,
		.ran = f.ran,
		.exit_code = f.exit_code,
	};
	k->on_call(k->on_call_arg, &rec);
	j->user_respond(j->user_cookie, line, len);
}

struct cg_job *job_new(struct cg_kernel *k, const struct cg_peer *peer, cg_respond_fn respond,
		       void *cookie, const char trace[40])
{
	struct cg_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	atomic_init(&j->refs, 1);
	j->k = k;
	j->cancel_fd = -1;
	j->peer = *peer;
	j->respond = respond;
	j->cookie = cookie;
	if (k->on_call) {
		j->user_respond = respond;
		j->user_cookie = cookie;
		j->respond = log_respond;
		j->cookie = j;
	}
	memcpy(j->trace_id, trace, sizeof(j->trace_id));
	return j;
}

int job_accept(struct cg_job *j)
{
	j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return j->cancel_fd < 0 ? -1 : 0;
}

void job_hold(struct cg_job *j)
{
	atomic_fetch_add(&j->refs, 1);
}

void job_put(struct cg_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	if (j->disk_promise)
		cg_evidence_promise_end(j->k->ev, j->disk_promise);
	cg_reply_free(j->final);
	cg_pending_free(j->pending);
	json_decref(j->decision);
	json_decref(j->ev_request);
	cg_gate_fini(&j->gate);
	gen_put(j->gen);
	if (j->cancel_fd >= 0)
		close(j->cancel_fd);
	free(j);
}

void job_lend(struct cg_job *j, struct cg_job **job_out)
{
	if (job_out) {
		job_hold(j);
		*job_out = j;
	}
}

void job_signal_cancel(struct cg_job *j)
{
	uint64_t one = 1;
	/* An eventfd write of 1 cannot block or fail short; ignore EAGAIN at the max. */
	if (j->cancel_fd >= 0)
		(void)!write(j->cancel_fd, &one, sizeof(one));
}

/*
 * Cancel a call (the client went away). A call waiting for a human is
 * withdrawn: out of the approval queue, answered by a worker.
 */
void cg_job_cancel(struct cg_job *j)
{
	if (!j)
		return;
	atomic_store(&j->cancelled, true);
	struct cg_kernel *k = j->k;
	pthread_mutex_lock(&k->lock);
	if (j->pending) {
		cg_approvals_remove(&k->approvals, j->pending);
		cg_pending_free(j->pending);
		j->pending = NULL;
		ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
			json_pack("{s:s}", "outcome", "withdrawn"));
		enqueue_locked(k, j);
	}
	pthread_mutex_unlock(&k->lock);
	job_signal_cancel(j);
}

void cg_job_release(struct cg_job *j)
{
	job_put(j);
}

void active_add(struct cg_kernel *k, struct cg_job *j)
{
	if (j->in_active)
		return;
	j->in_active = true;
	j->prev_active = NULL;
	j->next_active = k->active;
	if (k->active)
		k->active->prev_active = j;
	k->active = j;
}

static void active_del(struct cg_kernel *k, struct cg_job *j)
{
	if (j->prev_active)
		j->prev_active->next_active = j->next_active;
	else if (k->active == j)
		k->active = j->next_active;
	if (j->next_active)
		j->next_active->prev_active = j->prev_active;
	j->prev_active = j->next_active = NULL;
	j->in_active = false;
}

static void queue_locked(struct cg_kernel *k, struct cg_job *j)
{
	j->on_worker = true;
	j->next = NULL;
	if (k->queue_tail)
		k->queue_tail->next = j;
	else
		k->queue_head = j;
	k->queue_tail = j;
	pthread_cond_signal(&k->cond);
}

static unsigned share_locked(const struct cg_kernel *k)
{
	unsigned share = k->n_threads / CG_WORKERS_PER_UID_SHARE;
	return share ? share : 1;
}

/*
 * May a job of uid start on a worker now? Calls (not evidence reads, which
 * have slots of their own) count. A uid holds at most a share of the
 * workers, and the last share is kept for uids with nothing running: four
 * uids at their share would otherwise hold them all (found by an attack).
 */
static bool may_start_locked(const struct cg_kernel *k, uid_t uid)
{
	unsigned mine = 0, all = 0;
	for (const struct cg_job *a = k->active; a; a = a->next_active)
		if (a->on_worker && !a->work) {
			all++;
			mine += a->peer.uid == uid;
		}
	unsigned share = share_locked(k);
	return mine < share && (mine == 0 || all + share < k->n_threads);
}

void enqueue_locked(struct cg_kernel *k, struct cg_job *j)
{
	active_add(k, j);
	if (!k->stopping && !j->work && !may_start_locked(k, j->peer.uid)) {
		/* Held, not refused: it runs when a worker is its to take. */
		j->held_next = NULL;
		if (k->held_tail)
			k->held_tail->held_next = j;
		else
			k->held_head = j;
		k->held_tail = j;
		return;
	}
	queue_locked(k, j);
}

/*
 * A job ended (or the kernel stops): every held job that may start now goes
 * to the workers, in arrival order (all of them when all). Not only the
 * first: the one that ended may make another uid's job eligible as well as
 * its own uid's (an attack found a call held with workers idle).
 */
static void release_held_locked(struct cg_kernel *k, bool all)
{
	struct cg_job **pp = &k->held_head, *kept = NULL;
	while (*pp) {
		struct cg_job *h = *pp;
		if (all || may_start_locked(k, h->peer.uid)) {
			*pp = h->held_next;
			h->held_next = NULL;
			queue_locked(k, h);
		} else {
			kept = h;
			pp = &h->held_next;
		}
	}
	k->held_tail = kept;
}

void release_all_held_locked(struct cg_kernel *k)
{
	release_held_locked(k, true);
}

/* The next queued job, or NULL once the kernel stops with nothing queued. */
static struct cg_job *dequeue(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->lock);
	while (!k->queue_head && !k->stopping)
		pthread_cond_wait(&k->cond, &k->lock);
	struct cg_job *j = k->queue_head;
	if (j) {
		k->queue_head = j->next;
		if (!k->queue_head)
			k->queue_tail = NULL;
		j->next = NULL;
		/* Not cg_job_cancel: it takes k->lock, which we hold. Nothing has started. */
		if (k->stopping)
			atomic_store(&j->cancelled, true);
	}
	pthread_mutex_unlock(&k->lock);
	return j;
}

void *worker_main(void *arg)
{
	struct cg_kernel *k = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	struct cg_job *j;
	while ((j = dequeue(k))) {
		if (j->work)
			j->work(k, j);
		else
			run_job(k, j);
		/*
		 * No broadcast here: only idle workers wait on k->cond, and waking
		 * all of them after every call was a thundering herd (shutdown
		 * joins the threads instead of waiting on the condition).
		 */
		pthread_mutex_lock(&k->lock);
		j->on_worker = false;
		active_del(k, j);
		release_held_locked(k, false);
		pthread_mutex_unlock(&k->lock);
		job_put(j);
	}
	return NULL;
}
