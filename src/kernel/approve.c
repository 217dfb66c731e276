/* SPDX-License-Identifier: MIT */
/*
 * approve — calls that wait: an UNKNOWN call runs under a live grant that
 * covers it, or waits in the approval queue for a human until its deadline;
 * an agent's request for a grant waits the same way.
 *
 * The queue itself (enforce/approval.c) and the replies it ends with
 * (enforce/refusal.c, contract/grant_admin.c) live in their layers; this
 * module only moves jobs between the queue and the workers, under k->lock.
 *
 * Invariants:
 *  - No answer by the deadline MUST be a refusal (APPROVAL_TIMEOUT), never
 *    a pass; a full queue or approval switched off is a refusal too.
 *  - An approval is bound to the SHA-256 of the view the approver saw.
 *  - A grant only ever lets an UNKNOWN call run; it is consulted nowhere else.
 *  - A waiting job is on the active list (shutdown answers it) and holds the
 *    queue's reference until it is settled.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grant_admin.h"
#include "kernel_priv.h"
#include "refusal.h"
#include "util.h"

int64_t approval_timeout(const struct cg_kernel *k, const struct gen *g)
{
	if (k->approval_timeout_ms > 0)
		return k->approval_timeout_ms;
	int64_t t = cg_policy_defaults(g->policy)->approval_timeout_ms;
	return t > 0 ? t : 60000;
}

/* The executable of the peer process, for the approver's eyes (best effort). */
static void peer_exe(pid_t pid, char *buf, size_t len)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(link, buf, len - 1);
	buf[n > 0 ? (size_t)n : 0] = '\0';
}

struct cg_grant *grant_for_locked(struct cg_kernel *k, const struct cg_job *j,
				  const json_t *constraints)
{
	if (j->gate.folded.approvers > 1)
		return NULL;
	return cg_grants_match(&k->grants, &j->gate.call, constraints, cg_now_wall_ns());
}

void use_grant_locked(struct cg_kernel *k, struct cg_job *j, struct cg_grant *gr,
		      const uid_t *approver)
{
	snprintf(j->grant_id, sizeof(j->grant_id), "%s", cg_grant_id(gr));
	int64_t left = cg_grant_use(&k->grants, gr);
	json_t *ev = json_pack("{s:s,s:s,s:I,s:s}", "outcome", "grant", "grant_id", j->grant_id,
			       "uses_left", (json_int_t)left, "request_sha256", j->request_sha256);
	if (ev && approver)
		json_object_set_new(ev, "uid", json_integer(*approver));
	ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS, ev);
}

/*
 * Put j in the approval queue under view (owned from here) with its deadline,
 * and record the request for approval (extra, stolen, is merged into that
 * event). 0 when queued (the queue holds j's reference; *job_out gets one
 * too), -1 when the queue is full (view freed, nothing queued). Caller holds
 * k->lock.
 */
static int queue_for_human_locked(struct cg_kernel *k, struct cg_job *j, json_t *view, int needed,
				  json_t *extra, struct cg_job **job_out, struct cg_reply **why)
{
	size_t mine = 0;
	for (const struct cg_pending *q = k->approvals.head; q; q = q->next)
		mine += q->uid == j->peer.uid;
	if (mine >= CG_APPROVAL_UID_SHARE) {
		json_decref(view);
		json_decref(extra);
		*why = cg_en_uid_share_full(j->peer.uid, CG_APPROVAL_UID_SHARE);
		return -1;
	}
	struct cg_pending *p = calloc(1, sizeof(*p));
	if (!p || cg_approvals_push(&k->approvals, p) != 0) {
		free(p);
		json_decref(view);
		json_decref(extra);
		*why = cg_en_queue_full(k->approvals.n);
		return -1;
	}
	p->uid = j->peer.uid;
	int64_t timeout = approval_timeout(k, j->gen);
	memcpy(p->trace_id, j->trace_id, sizeof(p->trace_id));
	memcpy(p->request_sha256, j->request_sha256, sizeof(p->request_sha256));
	p->view = view;
	p->timeout_ms = timeout;
	p->deadline_mono_ns = cg_now_mono_ns() + timeout * 1000000LL;
	p->needed = needed < 1				 ? 1
		    : needed > CG_APPROVAL_MAX_APPROVERS ? CG_APPROVAL_MAX_APPROVERS
							 : needed;
	p->job = j;
	j->pending = p;
	json_t *ev =
	    json_pack("{s:s,s:i,s:I,s:s}", "request_sha256", j->request_sha256, "approvers_needed",
		      (int)p->needed, "timeout_ms", (json_int_t)timeout, "rule_id",
		      j->gate.folded.rule_id ? j->gate.folded.rule_id : "");
	if (ev && extra)
		json_object_update(ev, ev_screened(k, extra)); /* a grant's spec: its argv too */
	json_decref(extra);
	ev_note(k, j->trace_id, CG_EV_APPROVAL_REQ, ev);
	job_lend(j, job_out);
	active_add(k, j);
	pthread_cond_signal(&k->timer_cond); /* the deadline thread may need waking */
	return 0;
}

/* Refuse a call that wanted a human (queue full, approval off). Consumes r. */
static void refuse_deferred(struct cg_kernel *k, struct cg_job *j, struct cg_reply *r)
{
	/* Not queued is answered, even when its reply could not be made. */
	if (!r)
		r = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "refusing the call");
	cg_reply_set_data(r, decision_data(j));
	answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, r, &j->gate.folded,
		      j->decision, j->gen);
}

/*
 * With nobody to ask (no queue, no grant at all) that is the answer, before
 * any sudo dead end: a non-root daemon's privileged call said "cannot be
 * enforced on this kernel" (E, 70) where "send privileged false" was the fix
 * (s36 walk).
 */
bool nobody_to_ask(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->lock);
	bool none = !k->approval && k->grants.n == 0;
	pthread_mutex_unlock(&k->lock);
	return none;
}

json_t *gate_approval(struct cg_kernel *k, const struct cg_job *j)
{
	char sha[65];
	json_t *view = cg_approval_view(&j->gate.call, &j->gate.folded, j->trace_id, "", sha);
	pthread_mutex_lock(&k->lock);
	bool enabled = k->approval;
	struct cg_grant *gr =
	    view ? grant_for_locked(k, j, json_object_get(view, "constraints")) : NULL;
	json_t *grant = gr ? cg_grant_to_json(gr) : NULL;
	pthread_mutex_unlock(&k->lock);
	json_decref(view);
	json_t *a = json_pack("{s:b,s:I,s:i}", "enabled", enabled, "timeout_ms",
			      (json_int_t)approval_timeout(k, j->gen), "approvers",
			      j->gate.folded.approvers > 1 ? j->gate.folded.approvers : 1);
	if (a && grant)
		json_object_set_new(a, "grant",
				    json_pack("{s:O,s:O,s:O}", "grant_id",
					      json_object_get(grant, "grant_id"), "uses_left",
					      json_object_get(grant, "uses_left"), "expires",
					      json_object_get(grant, "expires")));
	json_decref(grant);
	/*
	 * A non-root daemon's privileged call no one could make run (ux-s40 M1),
	 * when someone could say yes: with nobody to ask the run is refused as
	 * UNKNOWN first (nobody_to_ask), as "next" already says (review-s40).
	 */
	struct cg_reply *dead = a && (enabled || gr) ? sudo_confine_dead_end(j) : NULL;
	if (dead) {
		char *msg = cg_reply_message(dead);
		json_object_set_new(a, "refused",
				    json_pack("{s:s,s:s}", "code", cg_reply_registry[dead->id].code,
					      "message", msg ? msg : ""));
		free(msg);
		cg_reply_free(dead);
	}
	return a;
}

int defer_to_human(struct cg_kernel *k, struct cg_job *j, struct cg_job **job_out)
{
	char exe[4096];
	peer_exe(j->peer.pid, exe, sizeof(exe));
	char sha[65];
	json_t *view = cg_approval_view(&j->gate.call, &j->gate.folded, j->trace_id, exe, sha);
	if (!view)
		return 1;
	memcpy(j->request_sha256, sha, sizeof(sha));
	/*
	 * A sudo dead end matters only when someone could say yes, a queue or a
	 * grant covering it; it spawns sudo, so outside the lock, and the grant
	 * is looked up again below (it may be used up meanwhile).
	 */
	if (sudo_in_play(j)) {
		pthread_mutex_lock(&k->lock);
		bool someone = k->approval ||
			       grant_for_locked(k, j, json_object_get(view, "constraints")) != NULL;
		pthread_mutex_unlock(&k->lock);
		struct cg_reply *dead = someone ? sudo_dead_end(j) : NULL;
		if (!someone || dead) {
			json_decref(view);
			if (dead)
				refuse_deferred(k, j, dead);
			return dead ? -1 : 1;
		}
	}

	pthread_mutex_lock(&k->lock);
	if (k->stopping) {
		pthread_mutex_unlock(&k->lock);
		json_decref(view);
		return 1;
	}
	struct cg_grant *gr = grant_for_locked(k, j, json_object_get(view, "constraints"));
	if (gr) {
		use_grant_locked(k, j, gr, NULL);
		json_decref(view);
		job_lend(j, job_out);
		enqueue_locked(k, j);
		pthread_mutex_unlock(&k->lock);
		return 0;
	}
	if (!k->approval) {
		pthread_mutex_unlock(&k->lock);
		json_decref(view);
		return 1;
	}
	struct cg_reply *why = NULL;
	if (queue_for_human_locked(k, j, view, j->gate.folded.approvers, NULL, job_out, &why) !=
	    0) {
		pthread_mutex_unlock(&k->lock);
		refuse_deferred(k, j, why);
		return -1;
	}
	pthread_mutex_unlock(&k->lock);
	return 0;
}

void settle_locked(struct cg_kernel *k, struct cg_job *j, struct cg_reply *final)
{
	cg_approvals_remove(&k->approvals, j->pending);
	cg_pending_free(j->pending);
	j->pending = NULL;
	cg_reply_free(j->final);
	j->final = final;
	enqueue_locked(k, j);
}

/* Settle every pending call whose deadline has passed. Caller holds k->lock. */
static void expire_locked(struct cg_kernel *k, int64_t now)
{
	struct cg_pending *p = k->approvals.head;
	while (p) {
		struct cg_pending *next = p->next;
		if (p->deadline_mono_ns <= now) {
			struct cg_job *j = p->job;
			ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
				json_pack("{s:s}", "outcome", "timeout"));
			settle_locked(k, j,
				      cg_en_approval_timeout(p->timeout_ms, p->n_approvals,
							     p->needed, j->gate.folded.rule_id,
							     j->gate.folded.why));
		}
		p = next;
	}
}

void *timer_main(void *arg)
{
	struct cg_kernel *k = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&k->lock);
	while (!k->stopping) {
		expire_locked(k, cg_now_mono_ns());
		int64_t next = cg_approvals_next_deadline(&k->approvals);
		if (next == INT64_MAX) {
			pthread_cond_wait(&k->timer_cond, &k->lock);
		} else {
			struct timespec ts = { .tv_sec = next / 1000000000LL,
					       .tv_nsec = next % 1000000000LL };
			pthread_cond_timedwait(&k->timer_cond, &k->lock, &ts);
		}
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

/* A grant request as a fold: UNKNOWN by "grant-request", one approver. */
static void fold_grant_request(struct cg_kernel *k, struct cg_job *j)
{
	struct cg_folded *f = &j->gate.folded;
	f->decision = CG_UNKNOWN;
	f->rule_id = "grant-request";
	f->reason = CG_R_NEEDS_HUMAN;
	f->deciding_rung = "grant";
	f->approvers = 1;
	j->grant_request = true;
	ev_note(k, j->trace_id, CG_EV_DECISION,
		json_pack("{s:s,s:s,s:s}", "decision", "UNKNOWN", "rule_id", "grant-request",
			  "reason", cg_reply_registry[CG_R_NEEDS_HUMAN].code));
}

/*
 * What the approver sees of a grant request, and the hash that binds their
 * answer to it (into j->request_sha256). New reference, or NULL on OOM.
 */
static json_t *grant_view(struct cg_job *j)
{
	const struct cg_request *req = j->gate.req;
	char exe[4096];
	peer_exe(j->peer.pid, exe, sizeof(exe));
	json_t *view = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:{s:i,s:i,s:i,s:s},s:[],s:{},s:n,s:b,s:[],s:O,s:s,"
	    "s:s,s:s}",
	    "kind", "grant", "trace_id", j->trace_id, "id", req->id, "session", req->session,
	    "host", req->host, "time", req->time_str ? req->time_str : "", "reason", req->reason,
	    "peer", "uid", (int)j->peer.uid, "gid", (int)j->peer.gid, "pid", (int)j->peer.pid,
	    "exe", exe, "pipeline", "env", "cwd", "privileged", 0, "constraints", "grant",
	    req->grant, "rule_id", "grant-request", "rung", "grant", "code",
	    cg_reply_registry[CG_R_NEEDS_HUMAN].code);
	char *canon = view ? json_dumps(view, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (!canon) {
		json_decref(view);
		return NULL;
	}
	cg_sha256_hex(canon, strlen(canon), j->request_sha256);
	free(canon);
	return view;
}

void request_grant(struct cg_kernel *k, struct cg_job *j, bool claimed, struct cg_job **job_out)
{
	struct cg_reply *err = NULL;
	json_t *spec = j->gate.req->grant;
	if (cg_grant_request_check(spec, j->peer.uid, cg_now_wall_ns(), &err) != 0) {
		if (claimed)
			release_claim(k, j->gate.req->id, j->peer.uid);
		answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, err, NULL,
			      NULL, j->gen);
		job_put(j);
		return;
	}
	fold_grant_request(k, j);
	json_t *view = grant_view(j);
	if (!view) {
		refuse_deferred(k, j,
				cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					     "queueing the grant request"));
		job_put(j);
		return;
	}
	pthread_mutex_lock(&k->lock);
	struct cg_reply *r = NULL;
	bool queued = false;
	if (!k->approval || k->stopping) {
		json_decref(view);
		r = cg_en_needs_human("grant-request");
	} else {
		queued = queue_for_human_locked(k, j, view, 1, json_pack("{s:O}", "grant", spec),
						job_out, &r) == 0;
	}
	pthread_mutex_unlock(&k->lock);
	if (queued)
		return; /* the queue holds our reference now */
	refuse_deferred(k, j, r);
	job_put(j);
}
