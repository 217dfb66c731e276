/* SPDX-License-Identifier: MIT */
/*
 * dispatch — the request path: the chokepoint every request line passes.
 *
 * cg_kernel_submit() takes a line through the gate (gate.c: decode, admit,
 * defaults, resolve, decide) under the generation in force, records what
 * the gate found, and then answers at once (an invalid request, a ping, a
 * gate dry run, a refusal), defers the call to a human or a grant
 * (approve.c), or hands it to a worker (run.c).
 *
 * Invariants:
 *  - Every exit of the request path MUST be exactly one response line with
 *    a registry reply and a trace id; respond() is called exactly once per
 *    submit, here or by whoever the job was handed to.
 *  - Nothing MUST reach a worker unless the fold said ALLOW or DEGRADE (or
 *    a human or a grant lifted an UNKNOWN, in approve.c).
 *  - A captured request id MUST NOT be accepted twice (replay window); a
 *    request refused as invalid at resolution gives its id back.
 *  - A call keeps the policy generation it was decided under.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_priv.h"
#include "util.h"

/* Evidence a call writes besides its request's bytes, at most (dispatch). */
#define DISK_PROMISE_BASE ((uint64_t)64 << 10)

void release_claim(struct cg_kernel *k, const char *id, uid_t uid)
{
	pthread_mutex_lock(&k->replay_lock);
	cg_replay_forget(k->replay, id, uid);
	pthread_mutex_unlock(&k->replay_lock);
}

/* What the admit hook needs, and what it did. */
struct admit {
	struct cg_kernel *k;
	const struct cg_peer *peer;
	const char *trace;
	bool redact;	 /* screen secrets out of the recorded request */
	bool claimed;	 /* the request's id was claimed in the replay window */
	json_t *request; /* the request event's payload, held (owned) until the outcome */
};

/*
 * The gate's admit step: render the request for the evidence (held until
 * the outcome is known: a refusal records it in its one event), then (for
 * anything but ping) claim its id. A captured request can never be accepted
 * twice, whatever its timestamp: check and remember in one step.
 */
static int admit_request(void *arg, const struct cg_request *req, int64_t now_ns,
			 struct cg_reply **refusal)
{
	struct admit *a = arg;
	struct cg_kernel *k = a->k;
	if (k->ev && !a->request && req->action != CG_ACTION_PING)
		a->request = ev_request_json(k, req, a->peer, a->redact);
	if (req->action == CG_ACTION_PING || !req->id_given)
		return 0;
	pthread_mutex_lock(&k->replay_lock);
	int rc = cg_replay_claim(k->replay, req->id, a->peer->uid, now_ns);
	pthread_mutex_unlock(&k->replay_lock);
	if (rc == 0) {
		a->claimed = true;
		return 0;
	}
	int e = errno;
	*refusal = rc == 1	 ? cg_reply_new(CG_R_ID_REPLAYED, "{s:s}", "id", req->id)
		   : e == ENOSPC ? cg_reply_new(CG_R_REPLAY_WINDOW_FULL, NULL)
				 : cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
						"remembering the request id");
	return -1;
}

/* Take the gate's refusal out of the job. */
static struct cg_reply *take_refusal(struct cg_job *j)
{
	struct cg_reply *r = j->gate.refusal;
	j->gate.refusal = NULL;
	return r;
}

/* Answer a request a step before the chain refused. */
static void answer_refused(struct cg_kernel *k, struct cg_job *j, const struct admit *a,
			   const char *line, size_t len, bool had_newline)
{
	const struct cg_peer *peer = a->peer;
	const char *id = j->gate.req ? j->gate.req->id : j->gate.id;
	if (k->ev && !j->ev_request && j->gate.step == CG_GATE_DECODE) {
		/* Not decoded: record only the line's size and hash. */
		char hex[65];
		cg_sha256_hex(line, len, hex);
		j->ev_request =
		    json_pack("{s:{s:I,s:s,s:b},s:{s:i,s:i,s:i}}", "raw", "bytes", (json_int_t)len,
			      "sha256", hex, "newline", had_newline, "peer", "pid", (int)peer->pid,
			      "uid", (int)peer->uid, "gid", (int)peer->gid);
	}
	if (a->claimed)
		release_claim(k, j->gate.req->id,
			      j->peer.uid); /* refused as invalid: not consumed */
	json_t *request = j->ev_request;
	j->ev_request = NULL;
	answer_refusal_now(k, j->respond, j->cookie, id, j->trace_id, take_refusal(j), request,
			   NULL, NULL, j->gen);
}

/*
 * Liveness: not a call, so not recorded (like the admin socket's ping). Its
 * trace id names no trace; a ping refused as invalid is recorded as any
 * invalid request is.
 */
static void answer_ping(struct cg_kernel *k, struct cg_job *j)
{
	struct cg_reply *r = cg_reply_new(CG_R_PONG, "{s:s}", "version", CALLGATE_VERSION);
	/* approval: whether a call could wait here for a person (callgate run's note). */
	json_t *data = json_pack("{s:s,s:i,s:o,s:b}", "version", CALLGATE_VERSION, "protocol",
				 CALLGATE_PROTOCOL, "policy", gen_policy_json(j->gen), "approval",
				 k->approval);
	json_t *failed = gen_reload_failed(k);
	if (data && failed)
		json_object_set(data, "reload_failed", failed);
	json_decref(failed);
	cg_reply_set_data(r, data);
	answer_reply(j->respond, j->cookie, j->gate.req->id, j->trace_id, r);
}

/* A gate dry run: the decision itself is the answer; nothing runs. */
static void answer_gate(struct cg_kernel *k, struct cg_job *j)
{
	const struct cg_folded *f = &j->gate.folded;
	struct cg_reply *r =
	    cg_reply_new(CG_R_GATE_DONE, "{s:s,s:s}", "decision", cg_decision_name(f->decision),
			 "rule_id", f->rule_id ? f->rule_id : "");
	json_t *data = json_deep_copy(j->decision);
	decision_add_stage_sets(data, j);
	/* The programs judged, as resolved (ux-s42e M2: .venv/bin/python was pyenv's). */
	json_t *progs = data && j->gate.resolved ? json_array() : NULL;
	for (size_t i = 0; progs && i < j->gate.call.n_stages; i++)
		json_array_append_new(progs, json_string(j->gate.call.stages[i].exe));
	if (progs)
		json_object_set_new(data, "programs", progs);
	/* What an UNKNOWN would meet if it ran: an open grant, a human (for how long), or a refusal. */
	if (data && f->decision == CG_UNKNOWN)
		json_object_set_new(data, "approval", gate_approval(k, j));
	cg_reply_set_data(r, data);
	answer_sealed_now(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, r, f, j->decision,
			  j->gen);
}

/*
 * The fold did not permit and no one will be asked: its EN refusal. While
 * the request is still held nothing else of the call was recorded, and the
 * refusal is its one event; else (no approver for an UNKNOWN) it is sealed.
 */
static void answer_denied(struct cg_kernel *k, struct cg_job *j)
{
	struct cg_reply *r = take_refusal(j);
	cg_reply_set_data(r, decision_data(j));
	json_t *request = j->ev_request;
	j->ev_request = NULL;
	if (request || !k->ev)
		answer_refusal_now(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, r,
				   request, &j->gate, j->decision, j->gen);
	else
		answer_sealed_now(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, r,
				  &j->gate.folded, j->decision, j->gen);
}

/* Make the job cancellable before it leaves the dispatch; answers when it cannot. */
static int accept_job(struct cg_kernel *k, struct cg_job *j, bool claimed)
{
	if (job_accept(j) == 0)
		return 0;
	if (claimed)
		release_claim(k, j->gate.req->id, j->peer.uid);
	answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id,
		      cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "accepting the call"),
		      NULL, NULL, j->gen);
	return -1;
}

/* ALLOW or DEGRADE: to a worker. Consumes the dispatch's reference to j. */
static void hand_to_worker(struct cg_kernel *k, struct cg_job *j, struct cg_job **job_out)
{
	pthread_mutex_lock(&k->lock);
	if (k->stopping) {
		pthread_mutex_unlock(&k->lock);
		answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id,
			      cg_reply_new(CG_R_SHUTTING_DOWN, NULL), &j->gate.folded, j->decision,
			      j->gen);
		job_put(j);
		return;
	}
	job_lend(j, job_out);
	enqueue_locked(k, j);
	pthread_mutex_unlock(&k->lock);
}

/* A decided call: record, then answer, defer or run. Consumes j. */
static void decided(struct cg_kernel *k, struct cg_job *j, bool claimed, struct cg_job **job_out)
{
	const struct cg_folded *f = &j->gate.folded;
	j->decision = decision_json(f, j->gen);
	/*
	 * Refused at once (a BLOCK, or an UNKNOWN with nobody to ask): one
	 * refusal event (answer_denied) is its trace.
	 */
	bool gate = j->gate.req->action == CG_ACTION_GATE;
	bool refuse =
	    !gate && (f->decision == CG_BLOCK || (f->decision == CG_UNKNOWN && nobody_to_ask(k)));
	if (!refuse) {
		ev_note_request(k, j);
		ev_note_decided(k, j->trace_id, &j->gate, j->decision);
	}
	if (gate) {
		answer_gate(k, j);
	} else if (refuse) {
		answer_denied(k, j);
	} else if (accept_job(k, j, claimed) != 0) {
		/* answered */
	} else if (f->decision != CG_UNKNOWN) {
		hand_to_worker(k, j, job_out);
		return;
	} else {
		switch (defer_to_human(k, j, job_out)) {
		case 0:
			return; /* queued, or runs under a grant: answered elsewhere */
		case 1:
			answer_denied(k, j); /* no approver: refused */
			break;
		default:
			break; /* answered (queue full) */
		}
	}
	job_put(j);
}

/*
 * What this call may still write, counted against the disk reserve until
 * it is on disk (job_put ends it), once the gate has resolved it and before
 * anything of it is recorded: its request line, recorded in its events, its
 * package's events.ndjson and its verdicts (four times); the paths
 * resolution added, recorded in the resolved event, the decision, both
 * verdicts and the package (eight times: a 14.6 KB gate request whose
 * resources resolved through a link to long paths wrote 2 MB, s38d); and
 * the rest of a call's evidence (a refusal's is about 12 KB).
 */
static void promise_call(struct cg_kernel *k, struct cg_job *j, size_t len)
{
	const struct cg_call *c = &j->gate.call;
	uint64_t bytes = c->cwd ? strlen(c->cwd) : 0;
	for (size_t i = 0; i < c->n_stages; i++)
		bytes += (c->stages[i].exe ? strlen(c->stages[i].exe) : 0) +
			 (c->stages[i].found ? strlen(c->stages[i].found) : 0);
	size_t i;
	const json_t *act;
	json_array_foreach(c->actions, i, act)
	{
		const char *r = json_string_value(json_object_get(act, "resource"));
		bytes += r ? strlen(r) : 0;
	}
	j->disk_promise = 4 * (uint64_t)len + 8 * bytes + DISK_PROMISE_BASE;
	cg_evidence_promise(k->ev, j->disk_promise);
}

/*
 * The request path. Every return has answered exactly once, or handed the
 * job to someone who will; *job_out is set only for such a job.
 */
static void dispatch(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		     bool too_long, const struct cg_peer *peer, cg_respond_fn respond, void *cookie,
		     struct cg_job **job_out)
{
	char trace[40];
	if (job_out)
		*job_out = NULL;
	if (cg_uuid4(trace, sizeof(trace)) != 0) {
		/* No randomness: refuse rather than reuse an id. */
		size_t n = 0;
		respond(cookie, fallback_line("00000000-0000-0000-0000-000000000000", &n), n);
		return;
	}
	size_t pending = 0;
	if (k->ev && cg_evidence_backlogged(k->ev, &pending)) {
		/* Back-pressure: turned away before anything is recorded or run. */
		answer_reply(
		    respond, cookie, "", trace,
		    cg_reply_new(CG_R_EVIDENCE_BACKLOG, "{s:I}", "pending", (json_int_t)pending));
		return;
	}
	int closed = k->ev ? cg_evidence_failed(k->ev) : 0;
	if (closed) {
		/* A refusal or a dry run is answered before it is recorded: none while it cannot be. */
		answer_reply(respond, cookie, "", trace,
			     cg_reply_new(CG_R_EVIDENCE_CLOSED, "{s:s}", "errno_name",
					  cg_errno_name(closed)));
		return;
	}
	uint64_t avail = 0, promised = 0, reserve = 0;
	if (k->ev && cg_evidence_disk_low(k->ev, &avail, &promised, &reserve)) {
		/* The evidence would fill the disk: turned away like a backlog. */
		answer_reply(respond, cookie, "", trace,
			     cg_reply_new(CG_R_EVIDENCE_DISK_LOW, "{s:I,s:I,s:I}", "free",
					  (json_int_t)avail, "promised", (json_int_t)promised,
					  "reserve", (json_int_t)reserve));
		return;
	}
	struct gen *g = gen_get(k);
	struct cg_job *j = job_new(k, peer, respond, cookie, trace);
	if (!j) {
		answer_sealed(
		    k, respond, cookie, "", trace,
		    cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "accepting the call"), NULL,
		    NULL, g);
		gen_put(g);
		return;
	}
	j->gen = g; /* the job holds the generation now */
	struct admit a = { .k = k,
			   .peer = peer,
			   .trace = j->trace_id,
			   .redact = cg_policy_defaults(g->policy)->screen_secrets };
	struct cg_gate_ctx ctx = gen_gate_ctx(k, g);
	int refused = cg_gate_decide(&ctx, line, len, had_newline, too_long, peer, admit_request,
				     &a, &j->gate);
	j->ev_request = a.request; /* noted, or recorded in the refusal, from here on */
	if (k->ev)
		promise_call(k, j, len);
	/* Only a refusal on the request path is one event; other actions but ping note the request now. */
	if (refused == 0 && j->gate.req->action != CG_ACTION_EXEC &&
	    j->gate.req->action != CG_ACTION_GATE && j->gate.req->action != CG_ACTION_PING)
		ev_note_request(k, j);
	if (refused != 0) {
		answer_refused(k, j, &a, line, len, had_newline);
	} else if (j->gate.req->action == CG_ACTION_PING) {
		answer_ping(k, j);
	} else if (cg_action_reads_evidence(j->gate.req->action)) {
		if (accept_job(k, j, a.claimed) == 0) {
			read_evidence(k, j, a.claimed, job_out);
			return; /* answered, or a worker will */
		}
	} else if (j->gate.req->action == CG_ACTION_GRANT) {
		if (accept_job(k, j, a.claimed) == 0) {
			request_grant(k, j, a.claimed, job_out);
			return; /* answered, queued, or released by request_grant */
		}
	} else {
		decided(k, j, a.claimed, job_out);
		return;
	}
	job_put(j);
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
