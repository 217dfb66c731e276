/* SPDX-License-Identifier: MIT */
/*
 * record — what the kernel writes to the evidence journal about a call: the
 * request (redacted), its resolution, each rung's verdict, the decision, and
 * the sealed verdict; or, for a call refused before anything else of it was
 * recorded, all of that in one "refusal" event that is its whole trace.
 *
 * The decision is rendered to JSON once per call (decision_json) and that
 * one object is shared by the DECISION event, the gate reply's data and the
 * decision facts of every other reply; the objects are never modified after
 * they are built, so threads may serialise them at once.
 *
 * Invariants:
 *  - Secrets MUST NOT reach the journal through the request: env values are
 *    hashed, argv and reason pass the secret screen (withheld if screening
 *    fails).
 *  - Every trace MUST be sealed exactly once, refusals included, so that
 *    replay finds a complete structure (a refusal event seals its trace).
 *  - Evidence off (no state dir) is not an error; a failed append is logged,
 *    never turned into a permit (the durable permit is run.c's).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_priv.h"
#include "util.h"

void ev_note(struct cg_kernel *k, const char *trace, enum cg_event_type t, json_t *payload)
{
	if (!k->ev) {
		json_decref(payload);
		return;
	}
	if (!payload)
		payload = json_object();
	if (cg_evidence_append(k->ev, trace, t, payload, false) != 0)
		cg_log("error", trace, "evidence append (%s) failed: %s", cg_event_name(t),
		       cg_errno_name(errno));
}

/*
 * A string for the evidence with secret shapes redacted (the same screen as
 * command output). On a screening failure the string is withheld, not kept.
 */
static json_t *screened_string(const struct cg_screen *scr, bool redact, const char *s)
{
	if (!redact || !scr)
		return json_string(s);
	unsigned char *out = NULL;
	size_t out_len = 0;
	if (cg_screen_record(scr, (const unsigned char *)s, strlen(s), &out, &out_len) != 0)
		return json_string("[WITHHELD: screening failed]");
	json_t *j = json_stringn((const char *)out, out_len);
	free(out);
	return j;
}

/*
 * Every string in v screened, in place (objects' values, arrays' items): the
 * request's other members, a grant's spec, an action's arguments (s42b F2: a
 * token in a grant request's argv, a cwd or a session was in the journal in
 * clear). A value that cannot be screened is withheld.
 */
static void screen_tree(const struct cg_screen *scr, bool redact, json_t *v)
{
	if (!redact || !scr || !v)
		return;
	if (json_is_object(v)) {
		const char *key;
		json_t *x;
		void *tmp;
		json_object_foreach_safe(v, tmp, key, x)
		{
			if (json_is_string(x))
				json_object_set_new(
				    v, key, screened_string(scr, redact, json_string_value(x)));
			else
				screen_tree(scr, redact, x);
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++) {
			json_t *x = json_array_get(v, i);
			if (json_is_string(x))
				json_array_set_new(
				    v, i, screened_string(scr, redact, json_string_value(x)));
			else
				screen_tree(scr, redact, x);
		}
	}
}

json_t *ev_screened(const struct cg_kernel *k, json_t *v)
{
	screen_tree(k->screen, true, v);
	return v;
}

/*
 * The same for what holds paths the agent names (a cwd, a program's path,
 * the repositories a view found, what a sweep set aside), where a secret is
 * rare: one scan of the whole first, each string only when it finds one (so
 * a governed call does not pay a scan per path: issue 14).
 */
static bool holds_secret(const struct cg_kernel *k, const json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	unsigned char *out = NULL;
	size_t out_len = 0;
	bool found = !text ||
		     cg_screen_record(k->screen, (const unsigned char *)text, strlen(text), &out,
				      &out_len) != 0 ||
		     out_len != strlen(text) || memcmp(out, text, out_len) != 0;
	free(text);
	free(out);
	return found;
}

json_t *ev_screened_paths(const struct cg_kernel *k, json_t *v)
{
	if (v && k->screen && holds_secret(k, v))
		screen_tree(k->screen, true, v);
	return v;
}

json_t *ev_screened_copy(const struct cg_kernel *k, json_t *v)
{
	if (!v || !k->screen || !holds_secret(k, v))
		return json_incref(v);
	json_t *c = json_deep_copy(v);
	screen_tree(k->screen, true, c);
	return c;
}

/* The pipeline with every argument screened. */
static json_t *screened_pipeline(const struct cg_request *req, const struct cg_screen *scr,
				 bool redact)
{
	json_t *pipeline = json_array();
	for (size_t i = 0; pipeline && i < req->n_stages; i++) {
		json_t *argv = json_array();
		for (size_t j = 0; argv && j < req->stages[i].argc; j++)
			json_array_append_new(argv,
					      screened_string(scr, redact, req->stages[i].argv[j]));
		json_array_append_new(pipeline, argv);
	}
	return pipeline;
}

/* env as {"NAME": "sha256:<hex of the value>"}: values are never stored. */
static json_t *hashed_env(const struct cg_request *req)
{
	json_t *env = json_object();
	for (size_t i = 0; env && i < req->n_env; i++) {
		char hex[65], tagged[80];
		cg_sha256_hex(req->env[i].value, strlen(req->env[i].value), hex);
		snprintf(tagged, sizeof(tagged), "sha256:%s", hex);
		json_object_set_new(env, req->env[i].name, json_string(tagged));
	}
	return env;
}

json_t *ev_request_json(const struct cg_kernel *k, const struct cg_request *req,
			const struct cg_peer *peer, bool redact)
{
	static const char *const actions[] = {
		[CG_ACTION_EXEC] = "exec",	 [CG_ACTION_GATE] = "gate",
		[CG_ACTION_PING] = "ping",	 [CG_ACTION_GRANT] = "grant",
		[CG_ACTION_VERDICT] = "verdict", [CG_ACTION_REPLAY] = "replay",
		[CG_ACTION_LOG] = "log"
	};
	_Static_assert(sizeof(actions) / sizeof(actions[0]) == CG_ACTION_LOG + 1,
		       "every action has a name for the evidence");
	json_t *o = json_object();
	json_t *pipeline = screened_pipeline(req, k->screen, redact);
	json_t *env = hashed_env(req);
	if (!o || !pipeline || !env) {
		json_decref(o);
		json_decref(pipeline);
		json_decref(env);
		return NULL;
	}
	/* Members at their protocol default (empty, false) are left out: a smaller journal. */
	/* Any string the client chose, the id too (s42d F2: a token as the id). */
	json_object_set_new(o, "id", screened_string(k->screen, redact, req->id));
	json_object_set_new(o, "action", json_string(actions[req->action]));
	if (req->host && *req->host)
		json_object_set_new(o, "host", screened_string(k->screen, redact, req->host));
	if (req->session && *req->session)
		json_object_set_new(o, "session", screened_string(k->screen, redact, req->session));
	json_object_set_new(o, "time", json_string(req->time_str ? req->time_str : ""));
	if (req->reason && *req->reason)
		json_object_set_new(o, "reason", screened_string(k->screen, redact, req->reason));
	json_object_set_new(o, "privileged", json_boolean(req->privileged));
	if (req->forward_agent)
		json_object_set_new(o, "forward_agent", json_true());
	json_object_set_new(o, "pipeline", pipeline);
	if (json_object_size(env))
		json_object_set(o, "env", env);
	json_decref(env);
	if (req->timeout_ms >= 0)
		json_object_set_new(o, "timeout_ms", json_integer(req->timeout_ms));
	if (req->cwd)
		json_object_set_new(o, "cwd", screened_string(k->screen, redact, req->cwd));
	if (req->actions) {
		json_t *acts = json_deep_copy(req->actions);
		screen_tree(k->screen, redact, acts);
		json_object_set_new(o, "actions", acts);
	}
	if (req->trace_id) /* an evidence read: which trace was asked for */
		json_object_set_new(o, "trace_id",
				    screened_string(k->screen, redact, req->trace_id));
	json_t *p = json_pack("{s:i,s:i,s:i}", "pid", (int)peer->pid, "uid", (int)peer->uid, "gid",
			      (int)peer->gid);
	return json_pack("{s:o,s:o?}", "request", o, "peer", p);
}

static json_t *resolved_json(const struct cg_call *call)
{
	json_t *stages = json_array();
	for (size_t i = 0; stages && i < call->n_stages; i++) {
		const struct cg_resolved_stage *s = &call->stages[i];
		/* "found" only when it differs from exe, "via_symlink" only when true. */
		json_t *st = json_pack("{s:s}", "exe", s->exe);
		if (st && s->found && strcmp(s->found, s->exe) != 0)
			json_object_set_new(st, "found", json_string(s->found));
		if (st && s->via_symlink)
			json_object_set_new(st, "via_symlink", json_true());
		if (st && s->argv0_is_exe)
			json_object_set_new(st, "argv0", json_string(s->argv0));
		json_array_append_new(stages, st);
	}
	json_t *o = json_pack("{s:o?,s:s?,s:s?}", "stages", stages, "cwd", call->cwd, "workspace",
			      call->workspace);
	/* An action's resource that a symlink moved: where it was judged, and as asked. */
	size_t i;
	json_t *a;
	bool moved = false;
	json_array_foreach(call->actions, i, a) moved |=
	    json_object_get(a, "resource_given") != NULL;
	if (o && moved)
		json_object_set(o, "actions", call->actions);
	return o;
}

json_t *decision_json(const struct cg_folded *f, const struct gen *g)
{
	json_t *dj = cg_folded_to_json(f);
	if (!dj)
		return NULL;
	json_object_set_new(dj, "policy", gen_policy_json(g));
	/* A rung that failed says so here: the decision event carries every rung. */
	json_t *rungs = json_object_get(dj, "rungs");
	for (size_t i = 0; i < f->n_rungs && i < json_array_size(rungs); i++)
		if (f->rungs[i].rc != 0)
			json_object_set_new(json_array_get(rungs, i), "failed", json_true());
	return dj;
}

void ev_note_request(struct cg_kernel *k, struct cg_job *j)
{
	if (j->ev_request)
		ev_note(k, j->trace_id, CG_EV_REQUEST, j->ev_request);
	j->ev_request = NULL;
}

void ev_refuse(struct cg_kernel *k, const char *trace, json_t *request, const struct cg_gate *g,
	       json_t *decision, const struct cg_reply *reply, const struct gen *gen)
{
	if (!k->ev) {
		json_decref(request);
		return;
	}
	const struct cg_reply_def *d = cg_reply_def_of(reply);
	char type[2] = { cg_rtype_char(d->type), 0 };
	char *msg = cg_reply_message(reply);
	json_t *p = request ? request : json_object();
	if (p && g)
		json_object_set_new(p, "resolved", ev_screened_paths(k, resolved_json(&g->call)));
	if (p && decision)
		json_object_set(p, "decision", decision);
	else if (p) /* before the chain: the policy in force, as a seal would name it */
		json_object_set_new(p, "policy",
				    json_pack("{s:s,s:I}", "sha256",
					      gen ? cg_policy_sha256(gen->policy) : "",
					      "generation", (json_int_t)(gen ? gen->number : 0)));
	/* The message may quote the request (command 'ghp_…' not found): screened too. */
	if (p)
		json_object_set_new(p, "reply",
				    json_pack("{s:s,s:s,s:s,s:o}", "type", type, "code", d->code,
					      "message_key", d->key, "message",
					      screened_string(k->screen, true, msg ? msg : "")));
	free(msg);
	if (!p || cg_evidence_refuse(k->ev, trace, p) != 0)
		cg_log("error", trace, "evidence: refusal not recorded: %s",
		       cg_errno_name(p ? errno : ENOMEM));
}

void ev_note_decided(struct cg_kernel *k, const char *trace, const struct cg_gate *g,
		     json_t *decision)
{
	if (!k->ev)
		return;
	ev_note(k, trace, CG_EV_RESOLVED, ev_screened_paths(k, resolved_json(&g->call)));
	/*
	 * Each rung's verdict is in the decision's rungs[] (failed ones marked):
	 * no separate rung events, so a refusal costs the journal less
	 * (docs/evidence.md "Structure of a trace").
	 */
	ev_note(k, trace, CG_EV_DECISION, json_incref(decision));
}

json_t *decision_data(const struct cg_job *j)
{
	const struct cg_folded *f = &j->gate.folded;
	/* Shared with the decision rendered once; a grant request has none. */
	json_t *cons = json_object_get(j->decision, "constraints");
	json_t *policy = json_object_get(j->decision, "policy");
	cons = cons ? json_incref(cons) : json_array();
	policy = policy ? json_incref(policy) : gen_policy_json(j->gen);
	json_t *data = json_pack(
	    "{s:s,s:s,s:s,s:o?,s:o?}", "decision", cg_decision_name(f->decision), "rule_id",
	    f->rule_id ? f->rule_id : "", "rung", f->deciding_rung ? f->deciding_rung : "",
	    "constraints", cons, "policy", policy);
	decision_add_stage_sets(data, j);
	return data;
}

void decision_add_stage_sets(json_t *data, const struct cg_job *j)
{
	const struct cg_folded *f = &j->gate.folded;
	size_t n = j->gate.resolved ? j->gate.call.n_stages : 0;
	json_t *per_stage = data && n && f->n_constraints ? json_array() : NULL;
	for (size_t i = 0; per_stage && i < n; i++)
		json_array_append_new(per_stage, cg_folded_stage_sets(f, i));
	if (per_stage)
		json_object_set_new(data, "stage_sets", per_stage);
}

/* Each rung's verdict, with its layer and code, for the verdict's why[]. */
static json_t *verdict_why(const struct cg_folded *f, const struct cg_reply_def *d)
{
	json_t *why = json_array();
	if (!f) {
		if (why && d->type != CG_RTYPE_S)
			json_array_append_new(why,
					      json_pack("{s:s,s:s,s:s}", "rung", "wire", "layer",
							cg_layer_name(d->layer), "code", d->code));
		return why;
	}
	for (size_t i = 0; why && i < f->n_rungs; i++) {
		const struct cg_verdict *v = &f->rungs[i].v;
		const struct cg_reply_def *rd = &cg_reply_registry[v->reason];
		json_array_append_new(why, json_pack("{s:s,s:s,s:s?,s:s,s:s,s:s?}", "rung",
						     f->rungs[i].rung, "decision",
						     cg_decision_name(v->decision), "rule_id",
						     v->rule_id, "layer", cg_layer_name(rd->layer),
						     "code", rd->code, "why", v->why));
	}
	return why;
}

/* The fold's constraint sets: the decision's own array when it was rendered. */
static json_t *verdict_constrained(const struct cg_folded *f, json_t *decision)
{
	json_t *shared = json_object_get(decision, "constraints");
	if (f && shared)
		return json_incref(shared);
	json_t *constrained = json_array();
	for (size_t i = 0; f && constrained && i < f->n_constraints; i++)
		json_array_append_new(constrained, cg_constraints_to_json(f->constraints[i]));
	return constrained;
}

void ev_seal(struct cg_kernel *k, const char *trace, const struct cg_reply *reply,
	     const struct cg_folded *folded, json_t *decision, const struct gen *g, bool ran)
{
	if (!k->ev)
		return;
	const struct cg_reply_def *d = cg_reply_def_of(reply);
	char type[2] = { cg_rtype_char(d->type), 0 };
	/* It may name paths (set aside, not found): screened as the request's words. */
	char *raw = cg_reply_message(reply);
	json_t *mj = raw ? screened_string(k->screen, true, raw) : NULL;
	free(raw);
	char *msg = mj ? strdup(json_string_value(mj)) : NULL;
	json_decref(mj);
	struct cg_verdict_facts facts = {
		.decision = folded		    ? cg_decision_name(folded->decision)
			    : d->type == CG_RTYPE_S ? "ALLOW"
						    : "BLOCK",
		.rule_id = folded && folded->rule_id ? folded->rule_id : "",
		.summary = msg ? msg : d->key,
		.reply_type = type[0],
		.reply_code = d->code,
		.layer = d->layer,
		.message = msg ? msg : "",
		.why = verdict_why(folded, d),
		.constrained = verdict_constrained(folded, decision),
		.next_step = NULL, /* the default for the reply type and decision */
		.confidence = 1.0,
		/*
		 * compact: the package's verdict rebuilds next steps, blocked[], the
		 * summary (the message) and, after a decision, why[] from the trace's
		 * events, so the seal does not carry them twice (docs/evidence.md).
		 */
		.extra = cg_verdict_seal_extra(g ? cg_policy_sha256(g->policy) : "",
					       g ? (int64_t)g->number : 0, ran,
					       folded && decision != NULL),
	};
	/*
	 * The verdict event: the answer given, in brief. Its why, constraints and
	 * policy are the decision event's, its text the seal's verdict's.
	 */
	json_t *event =
	    json_pack("{s:s,s:s,s:{s:s,s:s,s:s}}", "decision", facts.decision, "rule_id",
		      facts.rule_id, "reply", "type", type, "code", d->code, "message_key", d->key);
	ev_note(k, trace, CG_EV_VERDICT, event);
	/* verdict.json, rendered from the same facts: nothing is parsed back. */
	if (cg_evidence_seal_facts(k->ev, trace, &facts) != 0)
		cg_log("error", trace, "evidence seal failed: %s", cg_errno_name(errno));
	json_decref(facts.why);
	json_decref(facts.constrained);
	json_decref(facts.extra);
	free(msg);
}
