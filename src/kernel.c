/* SPDX-License-Identifier: MIT */
/*
 * kernel — the call gate: one dispatch that every request passes through.
 *
 * cg_kernel_submit() is the chokepoint. For each request line it:
 *   1. decodes and validates it (wire, MCP-*-I on failure);
 *   2. resolves it (world adapter, WA-*-I on failure);
 *   3. decides it in-process through the adjudicator chain of the policy
 *      generation in force (EN; pure, no I/O);
 *   4. for an allowed exec, hands it to a worker thread, which makes the
 *      permit durable in the evidence journal (write-ahead), prepares the
 *      confinement, runs the pipeline, screens the output, and answers;
 *   5. records every step as evidence and seals the trace.
 *
 * Invariants:
 *  - Every exit of the request path MUST be exactly one response line with a
 *    registry reply and a trace id (the seed-001 safety wrapper, in C): an
 *    internal failure becomes MCP-SYS-E-001 with the trace id, and the
 *    details go to the log.
 *  - Nothing MUST run unless the fold said ALLOW or DEGRADE, the permit is
 *    durable (when evidence is on) and the confinement was prepared.
 *  - A call keeps the policy generation it started with; reload swaps the
 *    pointer under a lock and never frees a generation still referenced.
 *  - respond() is called exactly once per submit.
 */
#include "callgate.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "chain.h"
#include "confine.h"
#include "evidence.h"
#include "exec.h"
#include "policy.h"
#include "reply.h"
#if __has_include("sign.h")
#include "sign.h"
#endif
#include "util.h"
#include "wire.h"
#include "world.h"

#define DEFAULT_WORKERS 32
#define MAX_WORKERS	256

/* One policy generation and the chain built over it. */
struct gen {
	atomic_int refs;
	uint64_t number;
	struct cg_policy *policy;
	struct cg_chain chain;
};

struct cg_kernel {
	char *policy_file; /* NULL: embedded default */
	char *pubkey_file; /* require signed policies when set */
	struct cg_world world;
	struct cg_evidence *ev; /* NULL: evidence off */
	int64_t freshness_s;

	pthread_mutex_t gen_lock; /* guards gen and gen_seq */
	struct gen *gen;
	uint64_t gen_seq;

	pthread_mutex_t replay_lock; /* guards replay */
	struct cg_replay *replay;

	pthread_mutex_t lock; /* guards the job queue and the active list */
	pthread_cond_t cond;
	struct cg_job *queue_head, *queue_tail;
	struct cg_job *active; /* jobs handed to workers, for shutdown */
	bool stopping;
	unsigned n_threads;
	pthread_t *threads;
};

struct cg_job {
	atomic_int refs; /* the kernel's and the submitter's */
	struct cg_kernel *k;
	struct gen *gen;
	struct cg_request *req;
	struct cg_call call;
	bool call_ok;
	struct cg_folded folded;
	struct cg_peer peer;
	char trace_id[40];
	cg_respond_fn respond;
	void *cookie;
	int cancel_fd; /* eventfd; readable once cancelled */
	atomic_bool cancelled;
	struct cg_job *next; /* queue link */
	struct cg_job *prev_active, *next_active;
};

/* ---- generations ------------------------------------------------------- */

static struct gen *gen_get(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->gen_lock);
	struct gen *g = k->gen;
	atomic_fetch_add(&g->refs, 1);
	pthread_mutex_unlock(&k->gen_lock);
	return g;
}

static void gen_put(struct gen *g)
{
	if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
		cg_policy_unref(g->policy);
		free(g);
	}
}

/*
 * Check the policy file's detached signature against the configured key.
 * Without the signing module built in, a required signature cannot be
 * checked, so the policy is refused (fail closed).
 */
static int verify_policy(const char *policy, const char *pubkey, struct cg_reply **err)
{
#if __has_include("sign.h")
	return cg_sign_verify_policy(policy, NULL, pubkey, err);
#else
	*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", policy, "detail",
			    "signature verification is not built in");
	return -1;
#endif
}

/*
 * Load a policy (file or embedded), verifying its signature first when a
 * public key is configured, and build its chain. 0 with *out, or -1 and *err.
 */
static int gen_load(struct cg_kernel *k, struct gen **out, struct cg_reply **err)
{
	struct cg_policy *p = NULL;
	int rc;
	if (k->policy_file) {
		if (k->pubkey_file && verify_policy(k->policy_file, k->pubkey_file, err) != 0)
			return -1;
		rc = cg_policy_load_file(k->policy_file, &p, err);
	} else {
		if (k->pubkey_file) {
			*err = cg_reply_new(
			    CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", "<embedded>", "detail",
			    "a signed policy is required but no policy file was given");
			return -1;
		}
		rc = cg_policy_load_default(&p, err);
	}
	if (rc != 0)
		return -1;
	struct gen *g = calloc(1, sizeof(*g));
	if (!g) {
		cg_policy_unref(p);
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "loading the policy");
		return -1;
	}
	atomic_init(&g->refs, 1);
	g->policy = p;
	if (cg_policy_register_rungs(&g->chain, p) != 0) {
		gen_put(g);
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source",
				    cg_policy_source(p), "detail",
				    "its rungs could not be registered");
		return -1;
	}
	*out = g;
	return 0;
}

/* ---- evidence helpers --------------------------------------------------- */

/* Append a non-durable event; evidence off is not an error, a full queue is logged. */
static void ev_note(struct cg_kernel *k, const char *trace, enum cg_event_type t, json_t *payload)
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

/* The request as evidence: env values are hashed, never stored. */
static json_t *redacted_request(const struct cg_request *req, const struct cg_peer *peer)
{
	json_t *o = json_object();
	json_t *pipeline = json_array();
	json_t *env = json_object();
	if (!o || !pipeline || !env) {
		json_decref(o);
		json_decref(pipeline);
		json_decref(env);
		return NULL;
	}
	for (size_t i = 0; i < req->n_stages; i++) {
		json_t *argv = json_array();
		for (size_t j = 0; argv && j < req->stages[i].argc; j++)
			json_array_append_new(argv, json_string(req->stages[i].argv[j]));
		json_array_append_new(pipeline, argv);
	}
	for (size_t i = 0; i < req->n_env; i++) {
		char hex[65], tagged[80];
		cg_sha256_hex(req->env[i].value, strlen(req->env[i].value), hex);
		snprintf(tagged, sizeof(tagged), "sha256:%s", hex);
		json_object_set_new(env, req->env[i].name, json_string(tagged));
	}
	static const char *const actions[] = { "exec", "gate", "ping" };
	json_object_set_new(o, "id", json_string(req->id));
	json_object_set_new(o, "action", json_string(actions[req->action]));
	json_object_set_new(o, "host", json_string(req->host));
	json_object_set_new(o, "session", json_string(req->session));
	json_object_set_new(o, "time", json_string(req->time_str ? req->time_str : ""));
	json_object_set_new(o, "reason", json_string(req->reason));
	json_object_set_new(o, "privileged", json_boolean(req->privileged));
	json_object_set_new(o, "forward_agent", json_boolean(req->forward_agent));
	json_object_set_new(o, "pipeline", pipeline);
	json_object_set_new(o, "env", env);
	if (req->timeout_ms >= 0)
		json_object_set_new(o, "timeout_ms", json_integer(req->timeout_ms));
	if (req->cwd)
		json_object_set_new(o, "cwd", json_string(req->cwd));
	if (req->actions)
		json_object_set_new(o, "actions", json_incref(req->actions));
	json_t *p = json_pack("{s:i,s:i,s:i}", "pid", (int)peer->pid, "uid", (int)peer->uid, "gid",
			      (int)peer->gid);
	return json_pack("{s:o,s:o?}", "request", o, "peer", p);
}

static json_t *resolved_json(const struct cg_call *call)
{
	json_t *stages = json_array();
	for (size_t i = 0; stages && i < call->n_stages; i++) {
		const struct cg_resolved_stage *s = &call->stages[i];
		json_array_append_new(stages, json_pack("{s:s,s:s,s:b}", "exe", s->exe, "found",
							s->found, "via_symlink", s->via_symlink));
	}
	return json_pack("{s:o?,s:s?,s:s?}", "stages", stages, "cwd", call->cwd, "workspace",
			 call->workspace);
}

static const char *next_steps(enum cg_rtype t)
{
	switch (t) {
	case CG_RTYPE_S:
		return "continue";
	case CG_RTYPE_I:
		return "fix the request as the message says and retry";
	case CG_RTYPE_D:
		return "escalate: ask for approval or a grant, or narrow the request";
	default:
		return "stop and report the trace id";
	}
}

/*
 * Record the verdict and seal the trace. Called once per trace, on every path,
 * so that replay finds a complete structure for refusals as well as runs.
 */
static void ev_seal(struct cg_kernel *k, const char *trace, const struct cg_reply *reply,
		    const struct cg_folded *folded, const struct gen *g)
{
	if (!k->ev)
		return;
	const struct cg_reply_def *d = cg_reply_def_of(reply);
	char type[2] = { cg_rtype_char(d->type), 0 };
	char *msg = cg_reply_message(reply);
	json_t *why = json_array();
	json_t *constrained = json_array();
	const char *decision = "BLOCK";
	if (folded) {
		decision = cg_decision_name(folded->decision);
		for (size_t i = 0; why && i < folded->n_rungs; i++) {
			const struct cg_verdict *v = &folded->rungs[i].v;
			const struct cg_reply_def *rd = &cg_reply_registry[v->reason];
			json_array_append_new(why, json_pack("{s:s,s:s,s:s?,s:s,s:s,s:s?}", "rung",
							     folded->rungs[i].rung, "decision",
							     cg_decision_name(v->decision),
							     "rule_id", v->rule_id, "layer",
							     cg_layer_name(rd->layer), "code",
							     rd->code, "why", v->why));
		}
		for (size_t i = 0; constrained && i < folded->n_constraints; i++)
			json_array_append_new(constrained,
					      cg_constraints_to_json(folded->constraints[i]));
	} else if (d->type == CG_RTYPE_S) {
		decision = "ALLOW";
	} else {
		json_array_append_new(why, json_pack("{s:s,s:s,s:s}", "rung", "wire", "layer",
						     cg_layer_name(d->layer), "code", d->code));
	}
	json_t *verdict = json_pack(
	    "{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s},s:o?,s:o?,s:s,s:f,s:{s:s,s:I}}", "decision", decision,
	    "rule_id", folded && folded->rule_id ? folded->rule_id : "", "summary",
	    msg ? msg : d->key, "reply", "type", type, "code", d->code, "message_key", d->key,
	    "message", msg ? msg : "", "why", why, "constrained", constrained, "next_steps",
	    next_steps(d->type), "confidence", 1.0, "policy", "sha256",
	    g ? cg_policy_sha256(g->policy) : "", "generation", (json_int_t)(g ? g->number : 0));
	free(msg);
	ev_note(k, trace, CG_EV_VERDICT, json_incref(verdict));
	if (cg_evidence_seal(k->ev, trace, verdict) != 0)
		cg_log("error", trace, "evidence seal failed: %s", cg_errno_name(errno));
}

/* ---- responses ---------------------------------------------------------- */

/* Last-resort line when even encoding fails: fixed text, no allocation needed. */
static char *fallback_line(const char *trace, size_t *len)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf),
			 "{\"id\":\"\",\"status\":\"error\",\"message\":\"internal failure\","
			 "\"reply\":{\"type\":\"E\",\"code\":\"%s\",\"message_key\":\"%s\","
			 "\"message\":\"Internal failure; report trace id %s.\",\"params\":{},"
			 "\"trace_id\":\"%s\"}}\n",
			 cg_reply_registry[CG_R_SYS_CRASH].code,
			 cg_reply_registry[CG_R_SYS_CRASH].key, trace, trace);
	char *p = malloc((size_t)n + 1);
	if (p) {
		memcpy(p, buf, (size_t)n + 1);
		*len = (size_t)n;
	}
	return p;
}

/* Encode a response; on failure fall back to the crash line (never NULL unless OOM). */
static char *encode(const struct cg_response *resp, const char *trace, size_t *len)
{
	char *line = cg_wire_encode_response(resp, len);
	if (!line) {
		cg_log("error", trace, "response encoding failed; answering %s",
		       cg_reply_registry[CG_R_SYS_CRASH].code);
		line = fallback_line(trace, len);
	}
	return line;
}

/* Answer with a reply only (no stages/stdout), consuming reply. */
static void answer_reply(cg_respond_fn respond, void *cookie, const char *id, const char *trace,
			 struct cg_reply *reply)
{
	cg_reply_set_trace(reply, trace);
	struct cg_response resp = { .id = id ? id : "",
				    .status = cg_reply_def_of(reply)->status,
				    .reply = reply };
	size_t len = 0;
	char *line = encode(&resp, trace, &len);
	cg_reply_free(reply);
	respond(cookie, line, len);
}

static json_t *policy_json(const struct gen *g)
{
	return json_pack("{s:s,s:I,s:s}", "sha256", cg_policy_sha256(g->policy), "generation",
			 (json_int_t)g->number, "source", cg_policy_source(g->policy));
}

/* ---- jobs ---------------------------------------------------------------- */

static void job_put(struct cg_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	if (j->call_ok)
		cg_call_fini(&j->call);
	cg_request_free(j->req);
	gen_put(j->gen);
	if (j->cancel_fd >= 0)
		close(j->cancel_fd);
	free(j);
}

void cg_job_cancel(struct cg_job *j)
{
	if (!j)
		return;
	atomic_store(&j->cancelled, true);
	uint64_t one = 1;
	/* An eventfd write of 1 cannot block or fail short; ignore EAGAIN at the max. */
	if (j->cancel_fd >= 0)
		(void)!write(j->cancel_fd, &one, sizeof(one));
}

void cg_job_release(struct cg_job *j)
{
	job_put(j);
}

static void active_add(struct cg_kernel *k, struct cg_job *j)
{
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
}

/* How long the pipeline may run: request, capped by policy, tightened by constraints. */
static int64_t effective_timeout(const struct cg_job *j)
{
	const struct cg_policy_defaults *d = cg_policy_defaults(j->gen->policy);
	int64_t t = j->req->timeout_ms > 0 ? j->req->timeout_ms : d->timeout_ms;
	if (t > d->max_timeout_ms)
		t = d->max_timeout_ms;
	for (size_t i = 0; i < j->folded.n_constraints; i++) {
		int64_t c = j->folded.constraints[i]->timeout_ms;
		if (c != CG_LIMIT_UNSET && c > 0 && c < t)
			t = c;
	}
	return t;
}

/* Decision facts every reply of a decided call carries in its data. */
static json_t *decision_data(const struct cg_job *j)
{
	json_t *cons = json_array();
	for (size_t i = 0; cons && i < j->folded.n_constraints; i++)
		json_array_append_new(cons, cg_constraints_to_json(j->folded.constraints[i]));
	return json_pack("{s:s,s:s,s:s,s:o?,s:o?}", "decision",
			 cg_decision_name(j->folded.decision), "rule_id",
			 j->folded.rule_id ? j->folded.rule_id : "", "rung",
			 j->folded.deciding_rung ? j->folded.deciding_rung : "", "constraints",
			 cons, "policy", policy_json(j->gen));
}

static json_t *hash_json(const struct cg_buf *b)
{
	char hex[65];
	cg_sha256_hex(b->p ? (const void *)b->p : (const void *)"", b->len, hex);
	return json_pack("{s:I,s:I,s:b,s:s}", "bytes", (json_int_t)b->len, "seen",
			 (json_int_t)b->seen, "truncated", b->truncated, "sha256", hex);
}

/*
 * Run an allowed call on a worker thread: permit (durable), confine, exec,
 * answer, seal. Every path answers exactly once.
 */
static void run_job(struct cg_kernel *k, struct cg_job *j)
{
	struct cg_reply *reply = NULL;
	struct cg_confine_plan *plan = NULL;
	char **envp = NULL;
	struct cg_exec_result res = { 0 };
	bool ran = false;
	const struct cg_request *req = j->req;

	if (atomic_load(&j->cancelled)) {
		pthread_mutex_lock(&k->lock);
		bool stopping = k->stopping;
		pthread_mutex_unlock(&k->lock);
		reply = cg_reply_new(stopping ? CG_R_SHUTTING_DOWN : CG_R_EXEC_CANCELLED, NULL);
		goto answer;
	}

	/* Who the stages run as: the peer when we are root (privileged needs approval). */
	bool root = geteuid() == 0;
	uid_t run_uid = root ? j->peer.uid : geteuid();
	gid_t run_gid = root ? j->peer.gid : getegid();

	envp = cg_world_envp(&k->world, req, run_uid, &reply);
	if (!envp)
		goto answer;

	char home[4096] = "";
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "HOME=", 5) == 0)
			snprintf(home, sizeof(home), "%s", *e + 5);
	struct cg_confine_ctx cctx = { .workspace = j->call.workspace,
				       .cwd = j->call.cwd,
				       .home = home,
				       .set_ids = root && run_uid != 0,
				       .uid = run_uid,
				       .gid = run_gid };
	if (cg_confine_prepare(j->folded.constraints, j->folded.n_constraints, &cctx, &plan,
			       &reply) != 0)
		goto answer;

	int64_t timeout_ms = effective_timeout(j);

	/* Write-ahead: the permit is durable before anything starts, or nothing starts. */
	if (k->ev) {
		char hex[65];
		char *canon = json_dumps(req->raw, JSON_COMPACT | JSON_SORT_KEYS);
		cg_sha256_hex(canon ? canon : "", canon ? strlen(canon) : 0, hex);
		free(canon);
		json_t *permit =
		    json_pack("{s:s,s:s,s:s,s:I,s:i,s:i,s:o?}", "decision",
			      cg_decision_name(j->folded.decision), "rule_id",
			      j->folded.rule_id ? j->folded.rule_id : "", "request_sha256", hex,
			      "timeout_ms", (json_int_t)timeout_ms, "run_uid", (int)run_uid,
			      "run_gid", (int)run_gid, "confinement", cg_confine_report(plan));
		if (cg_evidence_append(k->ev, j->trace_id, CG_EV_PERMIT, permit, true) != 0) {
			int e = errno;
			cg_log("error", j->trace_id, "permit not durable: %s", cg_errno_name(e));
			reply = cg_reply_new(CG_R_EVIDENCE_WRITE_FAILED, "{s:s}", "errno_name",
					     cg_errno_name(e));
			goto answer;
		}
	}

	struct cg_exec_spec spec = { .call = &j->call,
				     .envp = envp,
				     .timeout_ms = timeout_ms,
				     .cap = cg_policy_defaults(j->gen->policy)->output_cap,
				     .plan = plan,
				     .cancel_fd = j->cancel_fd,
				     .trace_id = j->trace_id };
	ev_note(k, j->trace_id, CG_EV_EXEC_START,
		json_pack("{s:I,s:I}", "stages", (json_int_t)j->call.n_stages, "timeout_ms",
			  (json_int_t)timeout_ms));
	if (cg_exec_run(&spec, &res, &reply) != 0) {
		ev_note(k, j->trace_id, CG_EV_EXEC_END,
			json_pack("{s:b,s:s}", "started", 0, "code", cg_reply_def_of(reply)->code));
		goto answer;
	}
	ran = true;

	json_t *codes = json_array();
	json_t *errs = json_array();
	for (size_t i = 0; i < res.n_stages; i++) {
		json_array_append_new(codes, json_integer(res.stages[i].exit_code));
		json_array_append_new(errs, hash_json(&res.stages[i].err));
	}
	ev_note(k, j->trace_id, CG_EV_EXEC_END,
		json_pack("{s:b,s:o,s:o,s:o,s:b,s:b,s:b,s:I}", "started", 1, "exit_codes", codes,
			  "stdout", hash_json(&res.out), "stderr", errs, "timed_out", res.timed_out,
			  "cancelled", res.cancelled, "escapees_killed", res.tree_escapees_killed,
			  "duration_us", (json_int_t)((res.ended_ns - res.started_ns) / 1000)));

	int last = res.n_stages ? res.stages[res.n_stages - 1].exit_code : 0;
	if (res.timed_out)
		reply =
		    cg_reply_new(CG_R_EXEC_DEADLINE, "{s:I}", "timeout_ms", (json_int_t)timeout_ms);
	else if (res.cancelled)
		reply = cg_reply_new(CG_R_EXEC_CANCELLED, NULL);
	else
		reply = cg_reply_new(CG_R_EXEC_DONE, "{s:I,s:i}", "stages",
				     (json_int_t)res.n_stages, "exit_code", last);

answer:;
	json_t *data = decision_data(j);
	if (data && plan)
		json_object_set_new(data, "confinement", cg_confine_report(plan));
	if (data && ran && res.tree_escapees_killed)
		json_object_set_new(data, "escapees_killed", json_true());
	cg_reply_set_data(reply, data);
	cg_reply_set_trace(reply, j->trace_id);

	struct cg_stage_out *outs = NULL;
	size_t n_out = 0;
	if (ran && (outs = calloc(res.n_stages ? res.n_stages : 1, sizeof(*outs)))) {
		n_out = res.n_stages;
		for (size_t i = 0; i < n_out; i++)
			outs[i] =
			    (struct cg_stage_out){ .exit_code = res.stages[i].exit_code,
						   .err = res.stages[i].err.p,
						   .err_len = res.stages[i].err.len,
						   .err_truncated = res.stages[i].err.truncated };
	}
	struct cg_response resp = { .id = req->id,
				    .status = cg_reply_def_of(reply)->status,
				    .n_stages = n_out,
				    .stages = outs,
				    .out = ran ? res.out.p : NULL,
				    .out_len = ran ? res.out.len : 0,
				    .out_truncated = ran && res.out.truncated,
				    .reply = reply };
	size_t len = 0;
	char *line = encode(&resp, j->trace_id, &len);
	free(outs);
	ev_seal(k, j->trace_id, reply, &j->folded, j->gen);
	cg_reply_free(reply);
	if (ran)
		cg_exec_result_fini(&res);
	cg_confine_plan_free(plan);
	cg_envp_free(envp);
	j->respond(j->cookie, line, len);
}

static void *worker_main(void *arg)
{
	struct cg_kernel *k = arg;
	/* Workers never take signals; the daemon's loop owns them via signalfd. */
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		pthread_mutex_lock(&k->lock);
		while (!k->queue_head && !k->stopping)
			pthread_cond_wait(&k->cond, &k->lock);
		struct cg_job *j = k->queue_head;
		if (!j) {
			pthread_mutex_unlock(&k->lock);
			return NULL;
		}
		k->queue_head = j->next;
		if (!k->queue_head)
			k->queue_tail = NULL;
		j->next = NULL;
		if (k->stopping)
			cg_job_cancel(j);
		pthread_mutex_unlock(&k->lock);

		run_job(k, j);

		pthread_mutex_lock(&k->lock);
		active_del(k, j);
		pthread_cond_broadcast(&k->cond);
		pthread_mutex_unlock(&k->lock);
		job_put(j);
	}
}

/* ---- the dispatch -------------------------------------------------------- */

/*
 * The request path. Every return below has answered exactly once; a job that
 * goes to a worker is answered there. *job_out is set only for such a job.
 */
static void dispatch(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		     bool too_long, const struct cg_peer *peer, cg_respond_fn respond, void *cookie,
		     struct cg_job **job_out)
{
	char trace[40];
	struct cg_reply *err = NULL;
	char *id = NULL;
	struct cg_request *req = NULL;
	struct cg_job *j = NULL;

	if (job_out)
		*job_out = NULL;
	if (cg_uuid4(trace, sizeof(trace)) != 0) {
		/* No randomness: refuse rather than reuse an id. */
		size_t n = 0;
		respond(cookie, fallback_line("00000000-0000-0000-0000-000000000000", &n), n);
		return;
	}

	struct gen *g = gen_get(k);
	const struct cg_policy_defaults *d = cg_policy_defaults(g->policy);
	struct cg_wire_rules rules = { .now_ns = cg_now_wall_ns(),
				       .freshness_s =
					   d->freshness_s ? d->freshness_s : k->freshness_s,
				       .env_allow = d->env_allow,
				       .n_env_allow = d->n_env_allow };

	if (cg_wire_decode(line, len, had_newline, too_long, &rules, &req, &err, &id) != 0) {
		char hex[65];
		cg_sha256_hex(line, len, hex);
		ev_note(k, trace, CG_EV_REQUEST,
			json_pack("{s:{s:I,s:s,s:b},s:{s:i,s:i,s:i}}", "raw", "bytes",
				  (json_int_t)len, "sha256", hex, "newline", had_newline, "peer",
				  "pid", (int)peer->pid, "uid", (int)peer->uid, "gid",
				  (int)peer->gid));
		cg_reply_set_trace(err, trace);
		ev_seal(k, trace, err, NULL, g);
		answer_reply(respond, cookie, id, trace, err);
		free(id);
		gen_put(g);
		return;
	}
	free(id);
	ev_note(k, trace, CG_EV_REQUEST, redacted_request(req, peer));

	if (req->action == CG_ACTION_PING) {
		struct cg_reply *r = cg_reply_new(CG_R_PONG, "{s:s}", "version", CALLGATE_VERSION);
		cg_reply_set_data(r, json_pack("{s:s,s:i,s:o}", "version", CALLGATE_VERSION,
					       "protocol", CALLGATE_PROTOCOL, "policy",
					       policy_json(g)));
		cg_reply_set_trace(r, trace);
		ev_seal(k, trace, r, NULL, g);
		answer_reply(respond, cookie, req->id, trace, r);
		goto out;
	}

	/* A captured request can never be accepted twice, whatever its timestamp. */
	pthread_mutex_lock(&k->replay_lock);
	bool seen = req->id_given && cg_replay_seen(k->replay, req->id, rules.now_ns);
	pthread_mutex_unlock(&k->replay_lock);
	if (seen) {
		err = cg_reply_new(CG_R_ID_REPLAYED, "{s:s}", "id", req->id);
		cg_reply_set_trace(err, trace);
		ev_seal(k, trace, err, NULL, g);
		answer_reply(respond, cookie, req->id, trace, err);
		goto out;
	}

	j = calloc(1, sizeof(*j));
	if (!j || (j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		if (j)
			j->cancel_fd = -1;
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "accepting the call");
		cg_reply_set_trace(err, trace);
		ev_seal(k, trace, err, NULL, g);
		answer_reply(respond, cookie, req->id, trace, err);
		free(j);
		j = NULL;
		goto out;
	}
	atomic_init(&j->refs, 1);
	j->k = k;
	j->gen = g;
	g = NULL; /* the job holds the generation now */
	j->req = req;
	req = NULL;
	j->peer = *peer;
	j->respond = respond;
	j->cookie = cookie;
	memcpy(j->trace_id, trace, sizeof(trace));

	if (cg_world_resolve(&k->world, j->req, peer, &j->call, &err) != 0) {
		cg_reply_set_trace(err, trace);
		ev_seal(k, trace, err, NULL, j->gen);
		answer_reply(respond, cookie, j->req->id, trace, err);
		goto out;
	}
	j->call_ok = true;
	j->call.trace_id = j->trace_id;
	ev_note(k, trace, CG_EV_RESOLVED, resolved_json(&j->call));

	/* Remember the id: from here on the request was valid, whatever is decided. */
	if (j->req->id_given) {
		pthread_mutex_lock(&k->replay_lock);
		int rc = cg_replay_remember(k->replay, j->req->id, rules.now_ns);
		pthread_mutex_unlock(&k->replay_lock);
		if (rc != 0) {
			err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					   "remembering the request id");
			cg_reply_set_trace(err, trace);
			ev_seal(k, trace, err, NULL, j->gen);
			answer_reply(respond, cookie, j->req->id, trace, err);
			goto out;
		}
	}

	cg_chain_decide(&j->gen->chain, &j->call, &j->folded);
	for (size_t i = 0; i < j->folded.n_rungs; i++) {
		const struct cg_verdict *v = &j->folded.rungs[i].v;
		ev_note(k, trace, CG_EV_RUNG,
			json_pack("{s:s,s:i,s:s,s:s?,s:s,s:s?,s:b}", "rung",
				  j->folded.rungs[i].rung, "rank", j->folded.rungs[i].rank,
				  "decision", cg_decision_name(v->decision), "rule_id", v->rule_id,
				  "code", cg_reply_registry[v->reason].code, "why", v->why,
				  "failed", j->folded.rungs[i].rc != 0));
	}
	json_t *dj = cg_folded_to_json(&j->folded);
	if (dj)
		json_object_set_new(dj, "policy", policy_json(j->gen));
	ev_note(k, trace, CG_EV_DECISION, dj);

	const struct cg_folded *f = &j->folded;
	if (j->req->action == CG_ACTION_GATE) {
		struct cg_reply *r = cg_reply_new(CG_R_GATE_DONE, "{s:s,s:s}", "decision",
						  cg_decision_name(f->decision), "rule_id",
						  f->rule_id ? f->rule_id : "");
		json_t *data = cg_folded_to_json(f);
		if (data)
			json_object_set_new(data, "policy", policy_json(j->gen));
		cg_reply_set_data(r, data);
		cg_reply_set_trace(r, trace);
		ev_seal(k, trace, r, f, j->gen);
		answer_reply(respond, cookie, j->req->id, trace, r);
		goto out;
	}

	if (f->decision == CG_BLOCK || f->decision == CG_UNKNOWN) {
		enum cg_reply_id why = f->reason;
		/* UNKNOWN waits for a human; with no approver configured it is a refusal. */
		if (f->decision == CG_UNKNOWN && why != CG_R_PRIVILEGED_NEEDS_APPROVAL)
			why = CG_R_NEEDS_HUMAN;
		if (cg_reply_registry[why].type != CG_RTYPE_D)
			why = CG_R_DENIED_BY_RULE;
		const char *exe = j->call.n_stages ? j->call.stages[0].exe : "";
		struct cg_reply *r = cg_reply_new(
		    why, "{s:s,s:s,s:s,s:s}", "rule_id", f->rule_id ? f->rule_id : "", "layer",
		    "EN", "why", f->why ? f->why : cg_decision_name(f->decision), "exe", exe);
		cg_reply_set_data(r, decision_data(j));
		cg_reply_set_trace(r, trace);
		ev_seal(k, trace, r, f, j->gen);
		answer_reply(respond, cookie, j->req->id, trace, r);
		goto out;
	}

	/* ALLOW or DEGRADE: to a worker. The submitter gets a reference too. */
	pthread_mutex_lock(&k->lock);
	if (k->stopping) {
		pthread_mutex_unlock(&k->lock);
		struct cg_reply *r = cg_reply_new(CG_R_SHUTTING_DOWN, NULL);
		cg_reply_set_trace(r, trace);
		ev_seal(k, trace, r, f, j->gen);
		answer_reply(respond, cookie, j->req->id, trace, r);
		goto out;
	}
	if (job_out) {
		atomic_fetch_add(&j->refs, 1);
		*job_out = j;
	}
	active_add(k, j);
	if (k->queue_tail)
		k->queue_tail->next = j;
	else
		k->queue_head = j;
	k->queue_tail = j;
	pthread_cond_signal(&k->cond);
	pthread_mutex_unlock(&k->lock);
	return;

out:
	job_put(j);
	cg_request_free(req);
	gen_put(g);
}

void cg_kernel_submit(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		      bool too_long, const struct cg_peer *peer, cg_respond_fn respond,
		      void *cookie, struct cg_job **job_out)
{
	dispatch(k, line, len, had_newline, too_long, peer, respond, cookie, job_out);
}

/* ---- synchronous form ---------------------------------------------------- */

struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	char *line;
	size_t len;
};

static void sync_respond(void *cookie, char *line, size_t len)
{
	struct sync_wait *w = cookie;
	pthread_mutex_lock(&w->lock);
	w->line = line;
	w->len = len;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

char *cg_kernel_handle(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		       const struct cg_peer *peer, size_t *resp_len)
{
	struct sync_wait w = { .lock = PTHREAD_MUTEX_INITIALIZER,
			       .cond = PTHREAD_COND_INITIALIZER };
	struct cg_job *job = NULL;
	dispatch(k, line, len, had_newline, len >= CG_WIRE_MAX_LINE, peer, sync_respond, &w, &job);
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	cg_job_release(job);
	*resp_len = w.len;
	return w.line;
}

char *cg_kernel_transport_reply(struct cg_kernel *k, const char *which, size_t *resp_len)
{
	char trace[40] = "";
	if (cg_uuid4(trace, sizeof(trace)) != 0)
		return fallback_line("00000000-0000-0000-0000-000000000000", resp_len);
	struct cg_reply *r;
	if (strcmp(which, "busy") == 0)
		r = cg_reply_new(CG_R_SERVER_BUSY, "{s:i}", "limit", 0);
	else
		r = cg_reply_new(CG_R_READ_DEADLINE, "{s:i}", "deadline_ms", 0);
	cg_reply_set_trace(r, trace);
	ev_note(k, trace, CG_EV_REQUEST, json_pack("{s:s}", "transport", which));
	struct gen *g = gen_get(k);
	ev_seal(k, trace, r, NULL, g);
	gen_put(g);
	struct cg_response resp = { .id = "", .status = cg_reply_def_of(r)->status, .reply = r };
	char *line = encode(&resp, trace, resp_len);
	cg_reply_free(r);
	return line;
}

/* ---- lifecycle ----------------------------------------------------------- */

static char *reply_json_string(struct cg_reply *r)
{
	json_t *o = cg_reply_to_json(r);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

int cg_kernel_new(const struct cg_kernel_config *cfg, struct cg_kernel **out, char **err_json)
{
	struct cg_reply *err = NULL;
	struct cg_kernel *k = calloc(1, sizeof(*k));
	if (err_json)
		*err_json = NULL;
	if (!k) {
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating the kernel");
		goto fail;
	}
	pthread_mutex_init(&k->gen_lock, NULL);
	pthread_mutex_init(&k->replay_lock, NULL);
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cond, NULL);
	k->freshness_s = cfg->freshness_s > 0 ? cfg->freshness_s : CG_WIRE_FRESHNESS_S;
	if ((cfg->policy_file && !(k->policy_file = strdup(cfg->policy_file))) ||
	    (cfg->policy_pubkey_file && !(k->pubkey_file = strdup(cfg->policy_pubkey_file)))) {
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating the kernel");
		goto fail_kernel;
	}

	const char *here[1] = { "." };
	const char *const *ws = cfg->n_workspaces ? cfg->workspaces : here;
	size_t n_ws = cfg->n_workspaces ? cfg->n_workspaces : 1;
	if (cg_world_init(&k->world, ws, n_ws, &err) != 0)
		goto fail_kernel;

	if (gen_load(k, &k->gen, &err) != 0)
		goto fail_world;
	k->gen->number = ++k->gen_seq;

	/* Twice the freshness window, so a replayed id is refused whatever its time. */
	int64_t window = cg_policy_defaults(k->gen->policy)->freshness_s;
	if (window <= 0)
		window = k->freshness_s;
	k->replay = cg_replay_new(2 * window * 1000000000LL);
	if (!k->replay) {
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
				   "creating the replay window");
		goto fail_gen;
	}

	if (cfg->state_dir) {
		struct cg_evidence_config ec = { .state_dir = cfg->state_dir,
						 .write_traces = true };
		if (cg_evidence_open(&ec, &k->ev, &err) != 0)
			goto fail_replay;
	}

	k->n_threads = cfg->n_workers ? cfg->n_workers : DEFAULT_WORKERS;
	if (k->n_threads > MAX_WORKERS)
		k->n_threads = MAX_WORKERS;
	k->threads = calloc(k->n_threads, sizeof(*k->threads));
	if (!k->threads) {
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting workers");
		goto fail_evidence;
	}
	for (unsigned i = 0; i < k->n_threads; i++) {
		if (pthread_create(&k->threads[i], NULL, worker_main, k) != 0) {
			k->n_threads = i;
			cg_kernel_shutdown(k);
			err =
			    cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting workers");
			goto fail_threads;
		}
	}
	*out = k;
	return 0;

fail_threads:
	free(k->threads);
fail_evidence:
	cg_evidence_close(k->ev);
fail_replay:
	cg_replay_free(k->replay);
fail_gen:
	gen_put(k->gen);
fail_world:
	cg_world_fini(&k->world);
fail_kernel:
	free(k->policy_file);
	free(k->pubkey_file);
	free(k);
fail:
	if (err_json)
		*err_json = reply_json_string(err);
	cg_reply_free(err);
	return -1;
}

int cg_kernel_reload(struct cg_kernel *k, char **result_json)
{
	struct cg_reply *r = NULL;
	struct gen *g = NULL;
	int rc = -1;
	if (gen_load(k, &g, &r) == 0) {
		pthread_mutex_lock(&k->gen_lock);
		g->number = ++k->gen_seq;
		struct gen *old = k->gen;
		k->gen = g;
		pthread_mutex_unlock(&k->gen_lock);
		/* In-flight calls hold their own references; this drops only ours. */
		gen_put(old);
		r = cg_reply_new(CG_R_POLICY_RELOADED, "{s:I,s:s}", "generation",
				 (json_int_t)g->number, "sha256", cg_policy_sha256(g->policy));
		rc = 0;
	}
	if (result_json)
		*result_json = reply_json_string(r);
	cg_reply_free(r);
	return rc;
}

void cg_kernel_policy_identity(struct cg_kernel *k, char sha256_hex[65], uint64_t *generation)
{
	struct gen *g = gen_get(k);
	snprintf(sha256_hex, 65, "%s", cg_policy_sha256(g->policy));
	if (generation)
		*generation = g->number;
	gen_put(g);
}

void cg_kernel_shutdown(struct cg_kernel *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->stopping = true;
	/* Cancel everything running or queued: children are killed, calls answered. */
	for (struct cg_job *j = k->active; j; j = j->next_active)
		cg_job_cancel(j);
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
	for (unsigned i = 0; i < k->n_threads; i++)
		pthread_join(k->threads[i], NULL);
	k->n_threads = 0;
}

void cg_kernel_free(struct cg_kernel *k)
{
	if (!k)
		return;
	cg_kernel_shutdown(k);
	free(k->threads);
	cg_evidence_close(k->ev);
	cg_replay_free(k->replay);
	gen_put(k->gen);
	cg_world_fini(&k->world);
	free(k->policy_file);
	free(k->pubkey_file);
	pthread_mutex_destroy(&k->gen_lock);
	pthread_mutex_destroy(&k->replay_lock);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->cond);
	free(k);
}
