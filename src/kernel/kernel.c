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
#include <time.h>
#include <unistd.h>

#include "approval.h"
#include "chain.h"
#include "confine.h"
#include "evidence.h"
#include "exec.h"
#include "grant.h"
#include "policy.h"
#include "reply.h"
#include "screen.h"
#include "sign.h"
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
	struct cg_evidence *ev;	  /* NULL: evidence off */
	struct cg_screen *screen; /* result screening patterns, compiled once */
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

	/* Approval (issue 6): all guarded by lock. */
	bool approval;		     /* UNKNOWN waits for a human; else it is refused */
	int64_t approval_timeout_ms; /* 0: the policy's */
	struct cg_approvals approvals;
	struct cg_grants grants;
	pthread_cond_t timer_cond; /* CLOCK_MONOTONIC; wakes the deadline thread */
	pthread_t timer;
	bool timer_started;
	char *ssh_auth_sock; /* the daemon's own agent socket, for forward_agent */
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
	bool in_active;

	/* Approval state; guarded by the kernel's lock until the job is queued. */
	struct cg_pending *pending; /* non-NULL while waiting for a human */
	struct cg_reply *final;	    /* answer without running (denied, timed out) */
	char request_sha256[65];    /* what the approval was bound to */
	size_t n_approved;
	uid_t approved_by[CG_APPROVAL_MAX_APPROVERS];
	char grant_id[40];  /* the grant that let it run, or "" */
	bool grant_request; /* the agent asked for a grant: a human opens it, or not */

	/* sudo -n wrapping of privileged stages when the daemon is not root. */
	char **sudo_argv_saved[CG_WIRE_MAX_STAGES];
	size_t sudo_argc_saved[CG_WIRE_MAX_STAGES];
	char *sudo_exe_saved[CG_WIRE_MAX_STAGES];
	size_t sudo_wrapped; /* stages wrapped so far */
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
 * Read the policy file once, check its detached signature over exactly those
 * bytes (when a key is configured), and load the same bytes: a file swapped
 * between the check and the load cannot get in.
 */
static int load_policy_file(const char *path, const char *pubkey, struct cg_policy **p,
			    struct cg_reply **err)
{
	char *buf = NULL;
	size_t len = 0;
	if (cg_sign_read_file(path, &buf, &len) != 0) {
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", path, "detail",
				    strerror(errno));
		return -1;
	}
	int rc = 0;
	if (pubkey)
		rc = cg_sign_verify_buffer(path, buf, len, NULL, pubkey, err);
	if (rc == 0)
		rc = cg_policy_load_buffer(path, buf, len, p, err);
	free(buf);
	return rc;
}

/*
 * Load a policy (file or embedded) and build its chain. 0 with *out, or -1 and *err.
 */
static int gen_load(struct cg_kernel *k, struct gen **out, struct cg_reply **err)
{
	struct cg_policy *p = NULL;
	int rc;
	if (k->policy_file) {
		rc = load_policy_file(k->policy_file, k->pubkey_file, &p, err);
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
	if (cg_screen_run(scr, true, false, (const unsigned char *)s, strlen(s), &out, &out_len,
			  NULL, NULL) != 0)
		return json_string("[WITHHELD: screening failed]");
	json_t *j = json_stringn((const char *)out, out_len);
	free(out);
	return j;
}

/*
 * The request as evidence: env values are hashed, never stored, and argv and
 * reason pass through the secret screen, so an agent that puts a key on a
 * command line does not put it in the journal.
 */
static json_t *redacted_request(const struct cg_request *req, const struct cg_peer *peer,
				const struct cg_screen *scr, bool redact)
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
			json_array_append_new(argv,
					      screened_string(scr, redact, req->stages[i].argv[j]));
		json_array_append_new(pipeline, argv);
	}
	for (size_t i = 0; i < req->n_env; i++) {
		char hex[65], tagged[80];
		cg_sha256_hex(req->env[i].value, strlen(req->env[i].value), hex);
		snprintf(tagged, sizeof(tagged), "sha256:%s", hex);
		json_object_set_new(env, req->env[i].name, json_string(tagged));
	}
	static const char *const actions[] = { [CG_ACTION_EXEC] = "exec",
					       [CG_ACTION_GATE] = "gate",
					       [CG_ACTION_PING] = "ping",
					       [CG_ACTION_GRANT] = "grant" };
	_Static_assert(sizeof(actions) / sizeof(actions[0]) == CG_ACTION_GRANT + 1,
		       "every action has a name for the evidence");
	json_object_set_new(o, "id", json_string(req->id));
	json_object_set_new(o, "action", json_string(actions[req->action]));
	json_object_set_new(o, "host", json_string(req->host));
	json_object_set_new(o, "session", json_string(req->session));
	json_object_set_new(o, "time", json_string(req->time_str ? req->time_str : ""));
	json_object_set_new(o, "reason", screened_string(scr, redact, req->reason));
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

/* Last-resort line when even encoding fails: fixed text, no JSON library involved. */
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

/*
 * Give back a request id claimed in the replay window: a request refused as
 * invalid does not consume its id (PROTOCOL.md).
 */
static void release_claim(struct cg_kernel *k, const char *id)
{
	pthread_mutex_lock(&k->replay_lock);
	cg_replay_forget(k->replay, id);
	pthread_mutex_unlock(&k->replay_lock);
}

/* ---- jobs ---------------------------------------------------------------- */

static void enqueue_locked(struct cg_kernel *k, struct cg_job *j);

static void job_put(struct cg_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	cg_reply_free(j->final);
	cg_pending_free(j->pending);
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
	/* A call waiting for a human is withdrawn: out of the queue, answered by a worker. */
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

/* Hand a job to the workers. Caller holds k->lock. */
static void enqueue_locked(struct cg_kernel *k, struct cg_job *j)
{
	active_add(k, j);
	j->next = NULL;
	if (k->queue_tail)
		k->queue_tail->next = j;
	else
		k->queue_head = j;
	k->queue_tail = j;
	pthread_cond_signal(&k->cond);
}

/*
 * How long the pipeline may run. A rule's constraint timeout_ms is that
 * call's deadline (the tightest of them when several sets apply); the
 * request may ask for less, never more; and the policy's max_timeout_ms caps
 * everything. Without a constraint, the request's or the policy's default.
 */
static int64_t effective_timeout(const struct cg_job *j)
{
	const struct cg_policy_defaults *d = cg_policy_defaults(j->gen->policy);
	int64_t cap = d->max_timeout_ms, rule = CG_LIMIT_UNSET;
	for (size_t i = 0; i < j->folded.n_constraints; i++) {
		int64_t c = j->folded.constraints[i]->timeout_ms;
		if (c != CG_LIMIT_UNSET && c > 0 && (rule == CG_LIMIT_UNSET || c < rule))
			rule = c;
	}
	if (rule != CG_LIMIT_UNSET && rule < cap)
		cap = rule;
	int64_t t = j->req->timeout_ms > 0   ? j->req->timeout_ms
		    : rule != CG_LIMIT_UNSET ? rule
					     : d->timeout_ms;
	return t < cap ? t : cap;
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

/* Append NAME=value to a malloc'd envp. 0, or -1 on OOM (envp unchanged). */
static int add_env(char ***envp, const char *name, const char *value)
{
	size_t n = 0;
	while ((*envp)[n])
		n++;
	size_t l = strlen(name) + strlen(value) + 2;
	char *kv = malloc(l);
	char **grown = kv ? realloc(*envp, (n + 2) * sizeof(**envp)) : NULL;
	if (!grown) {
		free(kv);
		return -1;
	}
	snprintf(kv, l, "%s=%s", name, value);
	grown[n] = kv;
	grown[n + 1] = NULL;
	*envp = grown;
	return 0;
}

/*
 * Privileged stages from a daemon that is not root run as
 *   sudo -n NAME=value… -- /resolved/exe args…
 * an argv, never a shell; only allow-listed names are passed (sudo resets
 * the rest), and -n makes sudo fail instead of prompting. The job's stages
 * are swapped for the wrapped ones and restored by sudo_unwrap().
 */
static void sudo_unwrap(struct cg_job *j);

static int sudo_wrap(struct cg_job *j, struct cg_reply **err)
{
	static const char sudo_path[] = "/usr/bin/sudo";
	struct cg_request *req = j->req;
	if (access(sudo_path, X_OK) != 0) {
		*err = cg_reply_new(CG_R_EXEC_SPAWN_FAILED, "{s:i,s:s,s:s,s:s}", "stage", 0, "exe",
				    sudo_path, "errno_name", cg_errno_name(errno), "step", "sudo");
		return -1;
	}
	for (size_t i = 0; i < j->call.n_stages; i++) {
		struct cg_stage *st = &req->stages[i];
		char **argv = calloc(3 + req->n_env + st->argc + 1, sizeof(char *));
		char *exe = strdup(sudo_path);
		size_t a = 0;
		bool ok = argv && exe;
		if (ok) {
			argv[a++] = "sudo";
			argv[a++] = "-n";
		}
		/* Every allow-listed variable is passed, or the stage does not run. */
		for (size_t e = 0; ok && e < req->n_env; e++) {
			size_t l = strlen(req->env[e].name) + strlen(req->env[e].value) + 2;
			if (!(argv[a] = malloc(l)))
				ok = false;
			else
				snprintf(argv[a++], l, "%s=%s", req->env[e].name,
					 req->env[e].value);
		}
		if (!ok) {
			for (size_t e = 2; argv && e < a; e++)
				free(argv[e]);
			free(argv);
			free(exe);
			sudo_unwrap(j); /* the stages already wrapped */
			*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					    "wrapping with sudo");
			return -1;
		}
		argv[a++] = "--";
		argv[a++] = j->call.stages[i].exe;
		for (size_t k2 = 1; k2 < st->argc; k2++)
			argv[a++] = st->argv[k2];
		argv[a] = NULL;
		j->sudo_argv_saved[i] = st->argv;
		j->sudo_argc_saved[i] = st->argc;
		j->sudo_exe_saved[i] = j->call.stages[i].exe;
		st->argv = argv;
		st->argc = a;
		j->call.stages[i].exe = exe;
		j->sudo_wrapped = i + 1;
	}
	return 0;
}

static void sudo_unwrap(struct cg_job *j)
{
	for (size_t i = 0; i < j->sudo_wrapped; i++) {
		struct cg_stage *st = &j->req->stages[i];
		for (size_t e = 0; e < j->req->n_env; e++)
			free(st->argv[2 + e]);
		free(st->argv);
		free(j->call.stages[i].exe);
		st->argv = j->sudo_argv_saved[i];
		st->argc = j->sudo_argc_saved[i];
		j->call.stages[i].exe = j->sudo_exe_saved[i];
	}
	j->sudo_wrapped = 0;
}

/* Did sudo refuse for want of a password? Returns the wrapped exe, or NULL. */
static const char *sudo_password_needed(const struct cg_job *j, const struct cg_exec_result *res)
{
	static const char needle[] = "a password is required";
	for (size_t i = 0; i < res->n_stages && i < j->call.n_stages; i++) {
		const struct cg_buf *b = &res->stages[i].err;
		if (res->stages[i].exit_code != 1 || !b->p)
			continue;
		if (memmem(b->p, b->len, needle, sizeof(needle) - 1))
			return j->sudo_wrapped ? j->sudo_exe_saved[i] : j->call.stages[i].exe;
	}
	return NULL;
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
	json_t *screening = NULL;
	const struct cg_request *req = j->req;

	if (j->final) {
		/* Decided without running: denied by a human, or no answer in time. */
		reply = j->final;
		j->final = NULL;
		goto answer;
	}
	if (atomic_load(&j->cancelled)) {
		pthread_mutex_lock(&k->lock);
		bool stopping = k->stopping;
		pthread_mutex_unlock(&k->lock);
		reply = stopping ? cg_reply_new(CG_R_SHUTTING_DOWN, NULL)
				 : cg_reply_new(CG_R_EXEC_CANCELLED, NULL);
		goto answer;
	}

	/*
	 * Who the stages run as. A privileged call only reaches here approved by a
	 * human, a grant, or a rule that allows privileged use explicitly: as root
	 * it runs as root; otherwise through sudo -n.
	 * Everything else runs as the peer when we are root, or as ourselves.
	 */
	bool root = geteuid() == 0;
	bool priv = req->privileged;
	uid_t run_uid = root ? (priv ? 0 : j->peer.uid) : geteuid();
	gid_t run_gid = root ? (priv ? 0 : j->peer.gid) : getegid();

	envp = cg_world_envp(&k->world, req, run_uid, &reply);
	if (!envp)
		goto answer;
	if (req->forward_agent && !priv && k->ssh_auth_sock &&
	    add_env(&envp, "SSH_AUTH_SOCK", k->ssh_auth_sock) != 0) {
		/* The socket path is the daemon's own, never the request's. */
		reply = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "forwarding the agent");
		goto answer;
	}
	if (priv && !root && sudo_wrap(j, &reply) != 0)
		goto answer;

	char home[4096] = "";
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "HOME=", 5) == 0)
			snprintf(home, sizeof(home), "%s", *e + 5);
	struct cg_confine_ctx cctx = { .workspace = j->call.workspace,
				       .cwd = j->call.cwd,
				       .home = home,
				       .set_ids = root && run_uid != 0,
				       .allow_setuid = priv && !root,
				       .view = !priv, /* approved too; privileged: none */
				       .agent_socket = req->forward_agent ? k->ssh_auth_sock : NULL,
				       .uid = run_uid,
				       .gid = run_gid };
	if (cg_confine_prepare_stages(j->folded.constraints, j->folded.stages,
				      j->folded.n_constraints, j->call.n_stages, &cctx, &plan,
				      &reply) != 0)
		goto answer;

	int64_t timeout_ms = effective_timeout(j);

	/* Write-ahead: the permit is durable before anything starts, or nothing starts. */
	if (k->ev) {
		char hex[65];
		char *canon = json_dumps(req->raw, JSON_COMPACT | JSON_SORT_KEYS);
		cg_sha256_hex(canon ? canon : "", canon ? strlen(canon) : 0, hex);
		free(canon);
		json_t *by = json_array();
		for (size_t i = 0; by && i < j->n_approved; i++)
			json_array_append_new(by, json_integer(j->approved_by[i]));
		json_t *permit = json_pack(
		    "{s:s,s:s,s:s,s:I,s:i,s:i,s:o?,s:o?,s:s,s:s}", "decision",
		    cg_decision_name(j->folded.decision), "rule_id",
		    j->folded.rule_id ? j->folded.rule_id : "", "request_sha256", hex, "timeout_ms",
		    (json_int_t)timeout_ms, "run_uid", (int)run_uid, "run_gid", (int)run_gid,
		    "confinement", cg_confine_report(plan), "approved_by", by, "approval_sha256",
		    j->request_sha256, "grant_id", j->grant_id);
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

	/*
	 * Screen the output before anyone sees it: the reply and the evidence
	 * both get the redacted bytes. If screening fails, the streams are
	 * emptied and the call answers an E: unscreened bytes never pass.
	 */
	const struct cg_policy_defaults *pd = cg_policy_defaults(j->gen->policy);
	int screen_errno = 0; /* non-zero: screening failed and the output was withheld */
	if (pd->screen_secrets || pd->screen_injection) {
		if (cg_screen_exec_result(k->screen, pd->screen_secrets, pd->screen_injection, &res,
					  &screening) != 0) {
			screen_errno = errno ? errno : EIO;
			cg_log("error", j->trace_id, "screening failed: %s",
			       cg_errno_name(screen_errno));
			ev_note(
			    k, j->trace_id, CG_EV_SCREEN,
			    json_pack("{s:b,s:s}", "ok", 0, "errno", cg_errno_name(screen_errno)));
		} else {
			ev_note(k, j->trace_id, CG_EV_SCREEN, json_incref(screening));
		}
	}

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
	const char *sudo_exe = priv && !root ? sudo_password_needed(j, &res) : NULL;
	if (screen_errno)
		reply = cg_reply_new(CG_R_SCREEN_FAILED, "{s:s}", "errno_name",
				     cg_errno_name(screen_errno));
	else if (sudo_exe)
		reply = cg_reply_new(CG_R_SUDO_NEEDS_PASSWORD, "{s:s}", "exe", sudo_exe);
	else if (res.timed_out)
		reply =
		    cg_reply_new(CG_R_EXEC_DEADLINE, "{s:I}", "timeout_ms", (json_int_t)timeout_ms);
	else if (res.cancelled)
		reply = cg_reply_new(CG_R_EXEC_CANCELLED, NULL);
	else
		reply = cg_reply_new(CG_R_EXEC_DONE, "{s:I,s:i}", "stages",
				     (json_int_t)res.n_stages, "exit_code", last);

answer:;
	json_t *data = decision_data(j);
	if (data && screening)
		json_object_set(data, "screening", screening);
	json_decref(screening);
	if (data && plan)
		json_object_set_new(data, "confinement", cg_confine_report(plan));
	if (data && ran && res.tree_escapees_killed)
		json_object_set_new(data, "escapees_killed", json_true());
	if (data && j->n_approved) {
		json_t *by = json_array();
		for (size_t i = 0; by && i < j->n_approved; i++)
			json_array_append_new(by, json_integer(j->approved_by[i]));
		json_object_set_new(data, "approved_by", by);
	}
	if (data && j->grant_id[0])
		json_object_set_new(data, "grant_id", json_string(j->grant_id));
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
	sudo_unwrap(j);
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
		/* Not cg_job_cancel: it takes k->lock, which we hold. Nothing has started. */
		if (k->stopping)
			atomic_store(&j->cancelled, true);
		pthread_mutex_unlock(&k->lock);

		run_job(k, j);

		/*
		 * No broadcast here: only idle workers wait on k->cond, and waking
		 * all of them after every call was a thundering herd (shutdown
		 * joins the threads instead of waiting on the condition).
		 */
		pthread_mutex_lock(&k->lock);
		active_del(k, j);
		pthread_mutex_unlock(&k->lock);
		job_put(j);
	}
}

/* ---- approvals ------------------------------------------------------------ */

static int64_t approval_timeout(const struct cg_kernel *k, const struct gen *g)
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

/*
 * Let j run under grant gr: consume one use and record it (with the approver's
 * uid when a human opened the grant for this very call). Caller holds k->lock.
 */
static void use_grant_locked(struct cg_kernel *k, struct cg_job *j, struct cg_grant *gr,
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
 * and record the request for approval. 0 when queued (the queue holds j's
 * reference; *job_out gets one too), -1 when the queue is full (view freed,
 * nothing queued). Caller holds k->lock.
 */
static int queue_for_human_locked(struct cg_kernel *k, struct cg_job *j, json_t *view, int needed,
				  json_t *extra, struct cg_job **job_out)
{
	struct cg_pending *p = calloc(1, sizeof(*p));
	if (!p || cg_approvals_push(&k->approvals, p) != 0) {
		free(p);
		json_decref(view);
		json_decref(extra);
		return -1;
	}
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
		      j->folded.rule_id ? j->folded.rule_id : "");
	if (ev && extra)
		json_object_update(ev, extra);
	json_decref(extra);
	ev_note(k, j->trace_id, CG_EV_APPROVAL_REQ, ev);
	if (job_out) {
		atomic_fetch_add(&j->refs, 1);
		*job_out = j;
	}
	active_add(k, j);
	pthread_cond_signal(&k->timer_cond); /* the deadline thread may need waking */
	return 0;
}

/* Refuse a call that wanted a human: queue full, or approval off. Consumes nothing. */
static void refuse_deferred(struct cg_kernel *k, struct cg_job *j, struct cg_reply *r)
{
	cg_reply_set_data(r, decision_data(j));
	cg_reply_set_trace(r, j->trace_id);
	ev_seal(k, j->trace_id, r, &j->folded, j->gen);
	answer_reply(j->respond, j->cookie, j->req->id, j->trace_id, r);
}

/*
 * An UNKNOWN call: a live grant covering it lets it run (its use recorded);
 * otherwise, with approval on, it waits in the queue for a human until its
 * deadline. Returns 0 when queued (someone else answers), 1 when approval is
 * off (the caller refuses), -1 when it was answered here (queue full).
 */
static int defer_to_human(struct cg_kernel *k, struct cg_job *j, struct cg_job **job_out)
{
	char exe[4096];
	peer_exe(j->peer.pid, exe, sizeof(exe));
	char sha[65];
	json_t *view = cg_approval_view(&j->call, &j->folded, j->trace_id, exe, sha);
	if (!view)
		return 1;
	memcpy(j->request_sha256, sha, sizeof(sha));

	pthread_mutex_lock(&k->lock);
	if (k->stopping) {
		pthread_mutex_unlock(&k->lock);
		json_decref(view);
		return 1;
	}
	struct cg_grant *gr = cg_grants_match(&k->grants, &j->call, cg_now_wall_ns());
	if (gr) {
		use_grant_locked(k, j, gr, NULL);
		json_decref(view);
		if (job_out) {
			atomic_fetch_add(&j->refs, 1);
			*job_out = j;
		}
		enqueue_locked(k, j);
		pthread_mutex_unlock(&k->lock);
		return 0;
	}
	if (!k->approval) {
		pthread_mutex_unlock(&k->lock);
		json_decref(view);
		return 1;
	}
	if (queue_for_human_locked(k, j, view, j->folded.approvers, NULL, job_out) != 0) {
		size_t waiting = k->approvals.n;
		pthread_mutex_unlock(&k->lock);
		refuse_deferred(
		    k, j,
		    cg_reply_new(CG_R_APPROVAL_QUEUE_FULL, "{s:I}", "limit", (json_int_t)waiting));
		return -1;
	}
	pthread_mutex_unlock(&k->lock);
	return 0;
}

/* Take a pending call out of the queue and give it to a worker with a final answer. */
static void settle_locked(struct cg_kernel *k, struct cg_job *j, struct cg_reply *final)
{
	cg_approvals_remove(&k->approvals, j->pending);
	cg_pending_free(j->pending);
	j->pending = NULL;
	cg_reply_free(j->final);
	j->final = final;
	enqueue_locked(k, j);
}

/* The deadline thread: no answer by the deadline is a refusal, never a pass. */
static void *timer_main(void *arg)
{
	struct cg_kernel *k = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&k->lock);
	while (!k->stopping) {
		int64_t now = cg_now_mono_ns();
		struct cg_pending *p = k->approvals.head;
		while (p) {
			struct cg_pending *next = p->next;
			if (p->deadline_mono_ns <= now) {
				struct cg_job *j = p->job;
				ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
					json_pack("{s:s}", "outcome", "timeout"));
				settle_locked(k, j,
					      cg_reply_new(CG_R_APPROVAL_TIMEOUT, "{s:I}",
							   "timeout_ms",
							   (json_int_t)p->timeout_ms));
			}
			p = next;
		}
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

/*
 * The policy's defaults.cwd, when the request names no cwd: "${workspace}"
 * (optionally followed by /sub/dir) is the first configured workspace. The
 * world adapter then checks it like any requested cwd (inside a workspace).
 */
static int apply_default_cwd(struct cg_kernel *k, struct cg_job *j, struct cg_reply **err)
{
	const char *d = cg_policy_defaults(j->gen->policy)->default_cwd;
	if (j->req->cwd || !d || !*d)
		return 0;
	static const char token[] = "${workspace}";
	const char *ws = k->world.n_workspaces ? k->world.workspaces[0] : "/";
	bool tok = strncmp(d, token, sizeof(token) - 1) == 0;
	const char *rest = tok ? d + sizeof(token) - 1 : d;
	size_t len = (tok ? strlen(ws) : 0) + strlen(rest) + 1;
	char *cwd = malloc(len);
	if (!cwd) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "applying defaults.cwd");
		return -1;
	}
	snprintf(cwd, len, "%s%s", tok ? ws : "", rest);
	j->req->cwd = cwd; /* owned by the request from here, freed with it */
	return 0;
}

/*
 * The agent asks for a grant (action "grant"). It never opens one: the
 * request is validated now (CT codes; only for the agent's own uid) and
 * queued for a human like any UNKNOWN call. Approved, the grant is opened and
 * the agent gets its id; denied or unanswered, it is refused. Consumes the
 * caller's reference to j.
 */
static void request_grant(struct cg_kernel *k, struct cg_job *j, bool claimed,
			  struct cg_job **job_out)
{
	struct cg_reply *err = NULL;
	json_t *spec = j->req->grant;
	json_t *uid = json_object_get(spec, "uid");
	if (uid && (!json_is_integer(uid) || json_integer_value(uid) != (json_int_t)j->peer.uid))
		err = cg_reply_new(CG_R_GRANT_FOR_OTHER_UID, "{s:i}", "uid", (int)j->peer.uid);
	else if (!uid)
		json_object_set_new(spec, "uid", json_integer(j->peer.uid));
	struct cg_grant *probe = NULL;
	/* Validation only: the grant is built again, when a human approves it. */
	if (!err && cg_grant_parse(spec, j->peer.uid, cg_now_wall_ns(), &probe, &err) == 0)
		cg_grant_free(probe);
	if (err) {
		if (claimed)
			release_claim(k, j->req->id);
		cg_reply_set_trace(err, j->trace_id);
		ev_seal(k, j->trace_id, err, NULL, j->gen);
		answer_reply(j->respond, j->cookie, j->req->id, j->trace_id, err);
		job_put(j);
		return;
	}

	j->folded.decision = CG_UNKNOWN;
	j->folded.rule_id = "grant-request";
	j->folded.reason = CG_R_NEEDS_HUMAN;
	j->folded.deciding_rung = "grant";
	j->folded.approvers = 1;
	j->grant_request = true;
	ev_note(k, j->trace_id, CG_EV_DECISION,
		json_pack("{s:s,s:s,s:s}", "decision", "UNKNOWN", "rule_id", "grant-request",
			  "reason", cg_reply_registry[CG_R_NEEDS_HUMAN].code));

	char exe[4096], sha[65];
	peer_exe(j->peer.pid, exe, sizeof(exe));
	json_t *view = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:{s:i,s:i,s:i,s:s},s:[],s:{},s:n,s:b,s:[],s:O,s:s,"
	    "s:s,s:s}",
	    "kind", "grant", "trace_id", j->trace_id, "id", j->req->id, "session", j->req->session,
	    "host", j->req->host, "time", j->req->time_str ? j->req->time_str : "", "reason",
	    j->req->reason, "peer", "uid", (int)j->peer.uid, "gid", (int)j->peer.gid, "pid",
	    (int)j->peer.pid, "exe", exe, "pipeline", "env", "cwd", "privileged", 0, "constraints",
	    "grant", spec, "rule_id", "grant-request", "rung", "grant", "code",
	    cg_reply_registry[CG_R_NEEDS_HUMAN].code);
	char *canon = view ? json_dumps(view, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	if (!canon) {
		json_decref(view);
		refuse_deferred(k, j,
				cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					     "queueing the grant request"));
		job_put(j);
		return;
	}
	cg_sha256_hex(canon, strlen(canon), sha);
	free(canon);
	memcpy(j->request_sha256, sha, sizeof(sha));

	pthread_mutex_lock(&k->lock);
	struct cg_reply *r = NULL;
	if (!k->approval || k->stopping) {
		json_decref(view);
		r = cg_reply_new(CG_R_NEEDS_HUMAN, "{s:s}", "rule_id", "grant-request");
	} else if (queue_for_human_locked(k, j, view, 1, json_pack("{s:O}", "grant", spec),
					  job_out) != 0) {
		r = cg_reply_new(CG_R_APPROVAL_QUEUE_FULL, "{s:I}", "limit",
				 (json_int_t)k->approvals.n);
	}
	pthread_mutex_unlock(&k->lock);
	if (!r)
		return; /* the queue holds our reference now */
	refuse_deferred(k, j, r);
	job_put(j);
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
	ev_note(k, trace, CG_EV_REQUEST, redacted_request(req, peer, k->screen, d->screen_secrets));

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

	/*
	 * A captured request can never be accepted twice, whatever its timestamp.
	 * Check and remember in one step; a refusal at resolution gives it back.
	 */
	bool claimed = false;
	if (req->id_given) {
		pthread_mutex_lock(&k->replay_lock);
		int rc = cg_replay_claim(k->replay, req->id, rules.now_ns);
		pthread_mutex_unlock(&k->replay_lock);
		if (rc != 0) {
			int e = errno;
			err = rc == 1	    ? cg_reply_new(CG_R_ID_REPLAYED, "{s:s}", "id", req->id)
			      : e == ENOSPC ? cg_reply_new(CG_R_REPLAY_WINDOW_FULL, NULL)
					    : cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
							   "remembering the request id");
			cg_reply_set_trace(err, trace);
			ev_seal(k, trace, err, NULL, g);
			answer_reply(respond, cookie, req->id, trace, err);
			goto out;
		}
		claimed = true;
	}

	j = calloc(1, sizeof(*j));
	if (!j || (j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		if (j)
			j->cancel_fd = -1;
		if (claimed)
			release_claim(k, req->id);
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

	if (j->req->action == CG_ACTION_GRANT) {
		request_grant(k, j, claimed, job_out);
		j = NULL; /* answered, queued, or released by request_grant */
		goto out;
	}

	if (apply_default_cwd(k, j, &err) != 0 ||
	    cg_world_resolve(&k->world, j->req, peer, &j->call, &err) != 0) {
		if (claimed)
			release_claim(k, j->req->id); /* refused as invalid: not consumed */
		cg_reply_set_trace(err, trace);
		ev_seal(k, trace, err, NULL, j->gen);
		answer_reply(respond, cookie, j->req->id, trace, err);
		goto out;
	}
	j->call_ok = true;
	j->call.trace_id = j->trace_id;
	ev_note(k, trace, CG_EV_RESOLVED, resolved_json(&j->call));

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

	if (f->decision == CG_UNKNOWN) {
		switch (defer_to_human(k, j, job_out)) {
		case 0:
			return; /* queued: a worker or the deadline thread answers */
		case 1:
			break; /* approval is off: refuse below */
		default:
			goto out; /* answered (queue full) */
		}
	}

	if (f->decision == CG_BLOCK || f->decision == CG_UNKNOWN) {
		enum cg_reply_id why = f->reason;
		/* UNKNOWN waits for a human; with no approver configured it is a refusal. */
		if (f->decision == CG_UNKNOWN && why != CG_R_PRIVILEGED_NEEDS_APPROVAL)
			why = CG_R_NEEDS_HUMAN;
		if (cg_reply_registry[why].type != CG_RTYPE_D)
			why = CG_R_DENIED_BY_RULE;
		const char *exe = j->call.n_stages ? j->call.stages[0].exe : "";
		struct cg_reply *r = cg_reply_build(
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
	enqueue_locked(k, j);
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

/* ---- the admin side -------------------------------------------------------- */

static struct cg_reply *reload(struct cg_kernel *k, bool *ok);

/* Answer an admin request: reply JSON (consumed) plus the request's id. */
static void admin_answer(cg_respond_fn respond, void *cookie, const char *id, struct cg_reply *r)
{
	char trace[40] = "";
	if (cg_uuid4(trace, sizeof(trace)) != 0)
		snprintf(trace, sizeof(trace), "admin");
	answer_reply(respond, cookie, id, trace, r);
}

/*
 * Validate spec and store it as a grant opened by `opener`. Returns the CT
 * reply: GRANT_OPENED with the grant as its data (and its id in gid), or the
 * refusal naming what is wrong. Caller holds k->lock.
 */
static struct cg_reply *open_grant_locked(struct cg_kernel *k, json_t *spec, uid_t opener,
					  char gid[40])
{
	struct cg_grant *g = NULL;
	struct cg_reply *r = NULL;
	gid[0] = '\0';
	if (cg_grant_parse(spec, opener, cg_now_wall_ns(), &g, &r) != 0)
		return r;
	json_t *gj = cg_grant_to_json(g);
	char id[40];
	snprintf(id, sizeof(id), "%s", cg_grant_id(g));
	if (!gj || cg_grants_add(&k->grants, g) != 0) { /* add frees g when full */
		if (!gj)
			cg_grant_free(g);
		json_decref(gj);
		return cg_reply_new(CG_R_GRANT_STORE_FULL, "{s:I}", "limit",
				    (json_int_t)k->grants.n);
	}
	json_t *st = json_array_get(json_object_get(gj, "pipeline"), 0);
	r = cg_reply_new(CG_R_GRANT_OPENED, "{s:s,s:s,s:O,s:O}", "grant_id", id, "exe",
			 json_string_value(json_object_get(st, "exe")), "uses",
			 json_object_get(gj, "uses_left"), "expires",
			 json_object_get(gj, "expires"));
	cg_reply_set_data(r, gj);
	memcpy(gid, id, sizeof(id));
	return r;
}

/* A human approved an agent's grant request: open it now (its ttl counts from here). */
static struct cg_reply *open_requested_grant_locked(struct cg_kernel *k, struct cg_job *j,
						    uid_t approver)
{
	return open_grant_locked(k, j->req->grant, approver, j->grant_id);
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
	if (have >= need) {
		j->n_approved = p->n_approvals;
		memcpy(j->approved_by, p->approvers, sizeof(j->approved_by));
		/* Used once: it leaves the queue to run (a grant request: to be opened). */
		settle_locked(k, j,
			      j->grant_request ? open_requested_grant_locked(k, j, uid) : NULL);
	}
	return cg_reply_new(CG_R_APPROVAL_RECORDED, "{s:s,s:i,s:i}", "id", id, "have", have, "need",
			    need);
}

void cg_kernel_admin(struct cg_kernel *k, const char *line, size_t len, const struct cg_peer *peer,
		     cg_respond_fn respond, void *cookie)
{
	json_error_t jerr;
	json_t *rq = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	const char *action = json_string_value(json_object_get(rq, "action"));
	const char *rid = json_string_value(json_object_get(rq, "id"));
	struct cg_reply *r = NULL;
	if (!json_is_object(rq) || !action) {
		r = cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail",
				 rq ? "an object with a string 'action' is required" : jerr.text);
		goto answer;
	}
	const char *target = json_string_value(json_object_get(rq, "trace_id"));

	if (strcmp(action, "ping") == 0) {
		struct gen *g = gen_get(k);
		r = cg_reply_new(CG_R_PONG, "{s:s}", "version", CALLGATE_VERSION);
		pthread_mutex_lock(&k->lock);
		size_t waiting = k->approvals.n, grants = k->grants.n;
		pthread_mutex_unlock(&k->lock);
		cg_reply_set_data(r, json_pack("{s:s,s:o,s:I,s:I,s:b}", "version", CALLGATE_VERSION,
					       "policy", policy_json(g), "pending",
					       (json_int_t)waiting, "grants", (json_int_t)grants,
					       "approval", k->approval));
		gen_put(g);
	} else if (strcmp(action, "pending") == 0) {
		pthread_mutex_lock(&k->lock);
		json_t *list = cg_approvals_list(&k->approvals, cg_now_mono_ns());
		pthread_mutex_unlock(&k->lock);
		r = cg_reply_new(CG_R_PENDING_LIST, "{s:I}", "count",
				 (json_int_t)json_array_size(list));
		cg_reply_set_data(r, json_pack("{s:o?}", "pending", list));
	} else if (strcmp(action, "approve") == 0) {
		const char *sha = json_string_value(json_object_get(rq, "request_sha256"));
		if (!target) {
			r = cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail",
					 "'trace_id' and 'request_sha256' are required");
			goto answer;
		}
		pthread_mutex_lock(&k->lock);
		r = approve_locked(k, target, sha, peer->uid);
		pthread_mutex_unlock(&k->lock);
	} else if (strcmp(action, "deny") == 0) {
		const char *why = json_string_value(json_object_get(rq, "why"));
		if (!target) {
			r = cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail",
					 "'trace_id' is required");
			goto answer;
		}
		pthread_mutex_lock(&k->lock);
		struct cg_pending *p = cg_approvals_find(&k->approvals, target);
		if (!p) {
			pthread_mutex_unlock(&k->lock);
			r = cg_reply_new(CG_R_APPROVAL_NOT_FOUND, "{s:s}", "id", target);
			goto answer;
		}
		struct cg_job *j = p->job;
		ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
			json_pack("{s:s,s:i,s:s}", "outcome", "denied", "uid", (int)peer->uid,
				  "why", why ? why : ""));
		settle_locked(k, j,
			      cg_reply_new(CG_R_APPROVAL_DENIED, "{s:i,s:s}", "uid", (int)peer->uid,
					   "why", why ? why : "no reason given"));
		pthread_mutex_unlock(&k->lock);
		r = cg_reply_new(CG_R_DENIAL_RECORDED, "{s:s}", "id", target);
	} else if (strcmp(action, "grant_open") == 0) {
		char gid[40];
		pthread_mutex_lock(&k->lock);
		r = open_grant_locked(k, json_object_get(rq, "grant"), peer->uid, gid);
		/*
		 * The approver's `g`: the grant was opened for the call shown (bound to
		 * its hash), which then runs under it. Not for an agent's own grant
		 * request, which is answered with y or not at all.
		 */
		struct cg_pending *p =
		    gid[0] && target ? cg_approvals_find(&k->approvals, target) : NULL;
		const char *sha = json_string_value(json_object_get(rq, "request_sha256"));
		if (p && !((struct cg_job *)p->job)->grant_request && sha &&
		    strcmp(sha, p->request_sha256) == 0) {
			struct cg_job *j = p->job;
			struct cg_grant *mg =
			    cg_grants_match(&k->grants, &j->call, cg_now_wall_ns());
			if (mg) {
				use_grant_locked(k, j, mg, &peer->uid);
				settle_locked(k, j, NULL);
			}
		}
		pthread_mutex_unlock(&k->lock);
		/* Opening a grant is evidence too: who opened what, for how long. */
		char trace[40];
		if (gid[0] && cg_uuid4(trace, sizeof(trace)) == 0) {
			ev_note(k, trace, CG_EV_REQUEST,
				json_pack("{s:s,s:O?,s:i}", "admin", "grant_open", "grant", r->data,
					  "uid", (int)peer->uid));
			struct gen *gg = gen_get(k);
			cg_reply_set_trace(r, trace);
			ev_seal(k, trace, r, NULL, gg);
			gen_put(gg);
		}
	} else if (strcmp(action, "grant_list") == 0) {
		pthread_mutex_lock(&k->lock);
		json_t *list = cg_grants_list(&k->grants, cg_now_wall_ns());
		pthread_mutex_unlock(&k->lock);
		r = cg_reply_new(CG_R_GRANT_LIST, "{s:I}", "count",
				 (json_int_t)json_array_size(list));
		cg_reply_set_data(r, json_pack("{s:o?}", "grants", list));
	} else if (strcmp(action, "grant_close") == 0) {
		const char *gid = json_string_value(json_object_get(rq, "grant_id"));
		if (!gid) {
			r = cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail",
					 "'grant_id' is required");
			goto answer;
		}
		pthread_mutex_lock(&k->lock);
		int rc = cg_grants_close(&k->grants, gid);
		pthread_mutex_unlock(&k->lock);
		r = rc == 0 ? cg_reply_new(CG_R_GRANT_CLOSED, "{s:s}", "grant_id", gid)
			    : cg_reply_new(CG_R_GRANT_NOT_FOUND, "{s:s}", "grant_id", gid);
	} else if (strcmp(action, "reload") == 0) {
		bool ok;
		r = reload(k, &ok);
	} else {
		r = cg_reply_new(CG_R_ADMIN_REQUEST_INVALID, "{s:s}", "detail",
				 "unknown action (ping, pending, approve, deny, grant_open, "
				 "grant_list, grant_close, reload)");
	}
answer:
	admin_answer(respond, cookie, rid ? rid : "", r);
	json_decref(rq);
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
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->timer_cond, &ca);
	pthread_condattr_destroy(&ca);
	k->approval = cfg->approval;
	k->approval_timeout_ms = cfg->approval_timeout_ms;
	const char *agent = getenv("SSH_AUTH_SOCK");
	if (agent && *agent)
		k->ssh_auth_sock = strdup(agent);
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

	if (cg_screen_new(&k->screen, &err) != 0)
		goto fail_evidence;

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
	if (pthread_create(&k->timer, NULL, timer_main, k) != 0) {
		cg_kernel_shutdown(k);
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
				   "starting the deadline thread");
		goto fail_threads;
	}
	k->timer_started = true;
	*out = k;
	return 0;

fail_threads:
	free(k->threads);
fail_evidence:
	cg_screen_free(k->screen);
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

/*
 * Swap in a freshly loaded policy generation. A policy that fails to load
 * leaves the old one in force. Returns the reply (caller frees); *ok tells.
 */
static struct cg_reply *reload(struct cg_kernel *k, bool *ok)
{
	struct cg_reply *r = NULL;
	struct gen *g = NULL;
	*ok = false;
	if (gen_load(k, &g, &r) != 0)
		return r;
	pthread_mutex_lock(&k->gen_lock);
	g->number = ++k->gen_seq;
	struct gen *old = k->gen;
	k->gen = g;
	pthread_mutex_unlock(&k->gen_lock);
	/* In-flight calls hold their own references; this drops only ours. */
	gen_put(old);
	*ok = true;
	return cg_reply_new(CG_R_POLICY_RELOADED, "{s:I,s:s}", "generation", (json_int_t)g->number,
			    "sha256", cg_policy_sha256(g->policy));
}

int cg_kernel_reload(struct cg_kernel *k, char **result_json)
{
	bool ok;
	struct cg_reply *r = reload(k, &ok);
	if (result_json)
		*result_json = reply_json_string(r);
	cg_reply_free(r);
	return ok ? 0 : -1;
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
	/* Calls waiting for a human are answered: the daemon is going away. */
	while (k->approvals.head)
		settle_locked(k, k->approvals.head->job, cg_reply_new(CG_R_SHUTTING_DOWN, NULL));
	/* Cancel everything running or queued: children are killed, calls answered. */
	for (struct cg_job *j = k->active; j; j = j->next_active) {
		atomic_store(&j->cancelled, true);
		uint64_t one = 1;
		if (j->cancel_fd >= 0)
			(void)!write(j->cancel_fd, &one, sizeof(one));
	}
	pthread_cond_broadcast(&k->timer_cond);
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
	for (unsigned i = 0; i < k->n_threads; i++)
		pthread_join(k->threads[i], NULL);
	k->n_threads = 0;
	if (k->timer_started) {
		pthread_join(k->timer, NULL);
		k->timer_started = false;
	}
}

void cg_kernel_free(struct cg_kernel *k)
{
	if (!k)
		return;
	cg_kernel_shutdown(k);
	free(k->threads);
	cg_screen_free(k->screen);
	cg_evidence_close(k->ev);
	cg_replay_free(k->replay);
	gen_put(k->gen);
	cg_world_fini(&k->world);
	free(k->policy_file);
	free(k->pubkey_file);
	free(k->ssh_auth_sock);
	cg_grants_clear(&k->grants);
	pthread_cond_destroy(&k->timer_cond);
	pthread_mutex_destroy(&k->gen_lock);
	pthread_mutex_destroy(&k->replay_lock);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->cond);
	free(k);
}
