/* SPDX-License-Identifier: MIT */
/*
 * admin — the admin protocol: one JSON line from the owner-only admin socket
 * (the server has already checked the peer), one reply back. Actions: ping,
 * pending, approve, deny, grant_open, grant_list, grant_close, reload.
 *
 * Invariants:
 *  - An approval MUST name the pending call by trace id AND the SHA-256 of
 *    the view the approver was shown; a mismatch applies nothing.
 *  - Approvals come from distinct uids; a call leaves the queue (to run, or
 *    as an opened grant) once it has the approvals it needs, so an approval
 *    is used once.
 *  - Opening a grant is evidence: who opened what, for how long.
 *  - respond is called exactly once, before cg_kernel_admin returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grant_admin.h"
#include "kernel_priv.h"
#include "refusal.h"
#include "util.h"

/* One admin request: its parsed line and the peer that sent it. */
struct admin_rq {
	json_t *o;		    /* the request object (borrowed) */
	const char *target;	    /* "trace_id", or NULL */
	const struct cg_peer *peer; /* who asks */
};

static const char *field(const struct admin_rq *rq, const char *name)
{
	return json_string_value(json_object_get(rq->o, name));
}

static struct cg_reply *invalid(const char *detail)
{
	return cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail", detail);
}

static struct cg_reply *admin_ping(struct cg_kernel *k, const struct admin_rq *rq)
{
	(void)rq;
	struct gen *g = gen_get(k);
	struct cg_reply *r = cg_reply_new(CG_R_PONG, "{s:s}", "version", CALLGATE_VERSION);
	pthread_mutex_lock(&k->lock);
	size_t waiting = k->approvals.n, grants = k->grants.n;
	pthread_mutex_unlock(&k->lock);
	json_t *data = json_pack("{s:s,s:o,s:I,s:I,s:b}", "version", CALLGATE_VERSION, "policy",
				 gen_policy_json(g), "pending", (json_int_t)waiting, "grants",
				 (json_int_t)grants, "approval", k->approval);
	json_t *failed = gen_reload_failed(k);
	if (data && failed)
		json_object_set(data, "reload_failed", failed);
	json_decref(failed);
	cg_reply_set_data(r, data);
	gen_put(g);
	return r;
}

static struct cg_reply *admin_pending(struct cg_kernel *k, const struct admin_rq *rq)
{
	(void)rq;
	pthread_mutex_lock(&k->lock);
	json_t *list = cg_approvals_list(&k->approvals, cg_now_mono_ns());
	pthread_mutex_unlock(&k->lock);
	struct cg_reply *r =
	    cg_reply_new(CG_R_PENDING_LIST, "{s:I}", "count", (json_int_t)json_array_size(list));
	/* approval: whether calls wait here at all (without it, UNKNOWN is refused at once). */
	cg_reply_set_data(r, json_pack("{s:o?,s:b}", "pending", list, "approval", k->approval));
	return r;
}

/*
 * Would the policy rung's verdict v show the person another call than the
 * one they were shown under the old policy's (in j's fold)? Another
 * decision, rule, number of approvers or constraint set.
 */
static bool verdict_changed(const struct cg_job *j, const struct cg_verdict *v)
{
	const struct cg_verdict *old = NULL;
	const struct cg_folded *f = &j->gate.folded;
	for (size_t i = 0; i < f->n_rungs && !old; i++)
		if (strcmp(f->rungs[i].rung, "policy") == 0)
			old = &f->rungs[i].v;
	if (!old || old->decision != v->decision || old->approvers != v->approvers ||
	    strcmp(old->rule_id ? old->rule_id : "", v->rule_id ? v->rule_id : "") != 0 ||
	    old->n_constraints != v->n_constraints)
		return true;
	for (size_t i = 0; i < v->n_constraints; i++) {
		json_t *a = cg_constraints_to_json(old->constraints[i]);
		json_t *b = cg_constraints_to_json(v->constraints[i]);
		bool same = a && b && json_equal(a, b) && old->stages[i] == v->stages[i];
		json_decref(a);
		json_decref(b);
		if (!same)
			return true;
	}
	return false;
}

/*
 * A call waiting for a person whose answer lets it run: a policy reloaded
 * meanwhile that now denies it, or decides it otherwise than the person was
 * shown (verdict_changed), wins. BLOCK is final, and an operator's
 * emergency deny must reach calls already waiting (found by a review).
 * Only the policy rung is asked again (the others count calls, and this is
 * not a new one); if it cannot decide, the call does not run either. True:
 * the call was refused (settled) and *r is the answerer's reply. k->lock held.
 */
static bool overruled_locked(struct cg_kernel *k, struct cg_job *j, const char *id,
			     struct cg_reply **r)
{
	struct gen *cur = gen_get(k);
	if (cur == j->gen) {
		gen_put(cur);
		return false;
	}
	struct cg_verdict v = { .decision = CG_DECISION_NONE };
	int rc = cg_policy_rung(cur->policy, &j->gate.call, &v);
	if (rc == 0 && v.decision != CG_BLOCK && verdict_changed(j, &v)) {
		/*
		 * Not denied, but decided otherwise: more approvers, other
		 * constraints, another rule. The person approved what the old
		 * policy showed; the call does not run on it (an attack had a
		 * call raised to two approvers run on one, with the old
		 * constraints). The agent sends it again, to be decided and
		 * shown under the policy in force.
		 */
		ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
			json_pack("{s:s,s:I,s:s?,s:b}", "outcome", "overruled", "generation",
				  (json_int_t)cur->number, "rule_id", v.rule_id, "changed", 1));
		settle_locked(k, j, cg_en_policy_changed((int64_t)cur->number, v.rule_id));
		*r = cg_reply_new(CG_R_APPROVAL_STALE, "{s:s,s:I,s:s}", "id", id, "generation",
				  (json_int_t)cur->number, "rule_id", v.rule_id ? v.rule_id : "");
		gen_put(cur);
		return true;
	}
	if (rc == 0 && v.decision != CG_BLOCK) {
		gen_put(cur);
		return false;
	}
	if (rc != 0)
		v = (struct cg_verdict){ .decision = CG_BLOCK,
					 .rule_id = "rung-failed",
					 .reason = CG_R_RUNG_FAILED };
	struct cg_folded f = { .decision = CG_BLOCK,
			       .rule_id = v.rule_id,
			       .reason = v.reason,
			       .why = v.why,
			       .deciding_rung = "policy" };
	ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
		json_pack("{s:s,s:I,s:s?}", "outcome", "overruled", "generation",
			  (json_int_t)cur->number, "rule_id", v.rule_id));
	settle_locked(k, j,
		      cg_en_refusal(&f, j->gate.call.n_stages ? j->gate.call.stages[0].exe : ""));
	*r = cg_reply_new(CG_R_APPROVAL_OVERRULED, "{s:s,s:I,s:s}", "id", id, "generation",
			  (json_int_t)cur->number, "rule_id", v.rule_id ? v.rule_id : "");
	gen_put(cur);
	return true;
}

/* Approve pending call `id` as uid, bound to sha. Caller holds k->lock. */
static struct cg_reply *approve_locked(struct cg_kernel *k, const char *id, const char *sha,
				       uid_t uid)
{
	struct cg_pending *p = cg_approvals_find(&k->approvals, id);
	if (!p)
		return cg_reply_new(CG_R_APPROVAL_NOT_FOUND, "{s:s}", "id", id);
	/* Bound to the exact request the approver was shown: never another one. */
	if (!sha || strcmp(sha, p->request_sha256) != 0)
		return cg_reply_new(CG_R_APPROVAL_HASH_MISMATCH, "{s:s}", "id", id);
	if (cg_pending_has_approver(p, uid))
		return cg_reply_new(CG_R_APPROVER_REPEATED, "{s:i,s:s,s:i}", "uid", (int)uid, "id",
				    id, "need", (int)p->needed);
	p->approvers[p->n_approvals++] = uid;
	struct cg_job *j = p->job;
	int have = (int)p->n_approvals, need = p->needed;
	ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
		json_pack("{s:s,s:i,s:i,s:i,s:s}", "outcome", "approved", "uid", (int)uid, "have",
			  have, "need", need, "request_sha256", sha));
	struct cg_reply *over = NULL;
	if (have >= need && !j->grant_request && overruled_locked(k, j, id, &over))
		return over;
	if (have >= need) {
		j->n_approved = p->n_approvals;
		memcpy(j->approved_by, p->approvers, sizeof(j->approved_by));
		/*
		 * Used once: it leaves the queue to run. A grant request is opened
		 * now instead (its ttl counts from here) and answered with the grant.
		 */
		struct cg_reply *final = NULL;
		if (j->grant_request)
			final = cg_grant_request_unchanged(j->gate.req->grant);
		if (j->grant_request && !final)
			final = cg_grants_open(&k->grants, j->gate.req->grant, uid,
					       cg_now_wall_ns(), j->grant_id);
		settle_locked(k, j, final);
	}
	return cg_reply_new(CG_R_APPROVAL_RECORDED, "{s:s,s:i,s:i}", "id", id, "have", have, "need",
			    need);
}

static struct cg_reply *admin_approve(struct cg_kernel *k, const struct admin_rq *rq)
{
	if (!rq->target)
		return invalid("'trace_id' and 'request_sha256' are required");
	pthread_mutex_lock(&k->lock);
	struct cg_reply *r =
	    approve_locked(k, rq->target, field(rq, "request_sha256"), rq->peer->uid);
	pthread_mutex_unlock(&k->lock);
	/* An answer recorded on the call's trace is answered with that trace id. */
	if (r && (r->id == CG_R_APPROVAL_RECORDED || r->id == CG_R_APPROVAL_STALE ||
		  r->id == CG_R_APPROVAL_OVERRULED))
		cg_reply_set_trace(r, rq->target);
	return r;
}

static struct cg_reply *admin_deny(struct cg_kernel *k, const struct admin_rq *rq)
{
	const char *why = field(rq, "why");
	if (!rq->target)
		return invalid("'trace_id' is required");
	pthread_mutex_lock(&k->lock);
	struct cg_pending *p = cg_approvals_find(&k->approvals, rq->target);
	if (!p) {
		pthread_mutex_unlock(&k->lock);
		return cg_reply_new(CG_R_APPROVAL_NOT_FOUND, "{s:s}", "id", rq->target);
	}
	struct cg_job *j = p->job;
	/* The approver's words, screened as the agent's are (s42d F2). */
	ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
		ev_screened(k, json_pack("{s:s,s:i,s:s}", "outcome", "denied", "uid",
					 (int)rq->peer->uid, "why", why ? why : "")));
	settle_locked(k, j, cg_en_approval_denied(rq->peer->uid, why));
	pthread_mutex_unlock(&k->lock);
	struct cg_reply *r = cg_reply_new(CG_R_DENIAL_RECORDED, "{s:s}", "id", rq->target);
	if (r)
		cg_reply_set_trace(r, rq->target); /* the denial is on the call's trace */
	return r;
}

/*
 * The approver's `g`: the grant was opened for the call shown (bound to its
 * hash), which then runs under it. Not for an agent's own grant request,
 * which is answered with y or not at all. Caller holds k->lock.
 */
static void run_shown_call_locked(struct cg_kernel *k, const struct admin_rq *rq)
{
	struct cg_pending *p = rq->target ? cg_approvals_find(&k->approvals, rq->target) : NULL;
	const char *sha = field(rq, "request_sha256");
	if (!p || ((struct cg_job *)p->job)->grant_request || !sha ||
	    strcmp(sha, p->request_sha256) != 0)
		return;
	struct cg_job *j = p->job;
	struct cg_grant *mg = grant_for_locked(k, j, json_object_get(p->view, "constraints"));
	struct cg_reply *over = NULL;
	if (mg && overruled_locked(k, j, rq->target, &over)) {
		cg_reply_free(over); /* the grant stays open; the call does not run */
		return;
	}
	if (mg) {
		use_grant_locked(k, j, mg, &rq->peer->uid);
		settle_locked(k, j, NULL);
	}
}

static struct cg_reply *admin_grant_open(struct cg_kernel *k, const struct admin_rq *rq)
{
	char gid[40];
	pthread_mutex_lock(&k->lock);
	struct cg_reply *r = cg_grants_open(&k->grants, json_object_get(rq->o, "grant"),
					    rq->peer->uid, cg_now_wall_ns(), gid);
	if (gid[0])
		run_shown_call_locked(k, rq);
	pthread_mutex_unlock(&k->lock);
	char trace[40];
	if (gid[0] && cg_uuid4(trace, sizeof(trace)) == 0) {
		ev_note(k, trace, CG_EV_REQUEST,
			json_pack("{s:s,s:O?,s:i}", "admin", "grant_open", "grant", r->data, "uid",
				  (int)rq->peer->uid));
		struct gen *g = gen_get(k);
		cg_reply_set_trace(r, trace);
		ev_seal(k, trace, r, NULL, NULL, g, false);
		gen_put(g);
	}
	return r;
}

static struct cg_reply *admin_grant_list(struct cg_kernel *k, const struct admin_rq *rq)
{
	(void)rq;
	pthread_mutex_lock(&k->lock);
	struct cg_reply *r = cg_grants_list_reply(&k->grants, cg_now_wall_ns());
	pthread_mutex_unlock(&k->lock);
	return r;
}

static struct cg_reply *admin_grant_close(struct cg_kernel *k, const struct admin_rq *rq)
{
	const char *gid = field(rq, "grant_id");
	if (!gid)
		return invalid("'grant_id' is required");
	pthread_mutex_lock(&k->lock);
	struct cg_reply *r = cg_grants_close_reply(&k->grants, gid);
	pthread_mutex_unlock(&k->lock);
	return r;
}

static struct cg_reply *admin_reload(struct cg_kernel *k, const struct admin_rq *rq)
{
	(void)rq;
	bool ok;
	return gen_reload(k, &ok);
}

static const struct {
	const char *name;
	struct cg_reply *(*fn)(struct cg_kernel *, const struct admin_rq *);
	bool answers; /* decides a call or opens what decides calls: its record must be possible */
} actions[] = {
	{ "ping", admin_ping, false },
	{ "pending", admin_pending, false },
	{ "approve", admin_approve, true },
	{ "deny", admin_deny, true },
	{ "grant_open", admin_grant_open, true },
	{ "grant_list", admin_grant_list, false },
	{ "grant_close", admin_grant_close, false }, /* narrows what runs; not recorded */
	{ "reload", admin_reload, false },
};

void cg_kernel_admin(struct cg_kernel *k, const char *line, size_t len, const struct cg_peer *peer,
		     cg_respond_fn respond, void *cookie)
{
	json_error_t jerr;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	const char *action = json_string_value(json_object_get(o, "action"));
	const char *rid = json_string_value(json_object_get(o, "id"));
	struct admin_rq rq = { .o = o,
			       .target = json_string_value(json_object_get(o, "trace_id")),
			       .peer = peer };
	struct cg_reply *r = NULL;
	if (!json_is_object(o) || !action)
		r = invalid(o ? "an object with a string 'action' is required" : jerr.text);
	for (size_t i = 0; !r && i < CG_ARRAY_LEN(actions); i++) {
		if (strcmp(action, actions[i].name) != 0)
			continue;
		/*
		 * While the journal is closed an answer or a grant would not be
		 * recorded (s39d: a grant opened then ran a call later, with no
		 * record of who opened it): turned away like an agent's call.
		 */
		int closed = actions[i].answers && k->ev ? cg_evidence_failed(k->ev) : 0;
		r = closed ? cg_reply_new(CG_R_EVIDENCE_CLOSED, "{s:s}", "errno_name",
					  cg_errno_name(closed))
			   : actions[i].fn(k, &rq);
	}
	if (!r)
		r = invalid("unknown action (ping, pending, approve, deny, grant_open, "
			    "grant_list, grant_close, reload)");
	/* An action that left a trace (a grant opened) answers with it; others with a fresh id. */
	char trace[40] = "";
	if (r->trace_id[0])
		memcpy(trace, r->trace_id, sizeof(trace));
	else if (cg_uuid4(trace, sizeof(trace)) != 0)
		snprintf(trace, sizeof(trace), "admin");
	answer_reply(respond, cookie, rid ? rid : "", trace, r);
	json_decref(o);
}
