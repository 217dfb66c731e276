/* SPDX-License-Identifier: MIT */
/*
 * respond — response lines: encoding a reply (with or without the streams
 * of a run), the last-resort crash line, the transport's own refusals, and
 * the public struct cg_result.
 *
 * Invariants:
 *  - Every answer MUST be one line carrying a registry reply and a trace id;
 *    if encoding fails, the fixed crash line (MCP-SYS-E-001 with the trace
 *    id) is sent instead, built without the JSON library.
 *  - The functions that answer consume the reply they are given and call
 *    respond exactly once.
 *  - An answer's record (its seal, or its one refusal event) MUST be queued
 *    before anything else can read the trace. answer_sealed and
 *    answer_refusal queue it before the line goes out, from any thread. The
 *    _now forms, only for answers given inside cg_kernel_submit, hand the
 *    line over first and queue the record right after, on the same thread,
 *    before submit returns: the submitter takes its next request only then
 *    (the server's loop is one thread), so nothing overtakes the record,
 *    and the peer reads its answer while the record is built. Neither order
 *    waits for the disk: a record is in memory until the writer takes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_priv.h"
#include "util.h"

char *fallback_line(const char *trace, size_t *len)
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

char *encode_response(const struct cg_response *resp, const char *trace, size_t *len)
{
	char *line = cg_wire_encode_response(resp, len);
	if (!line) {
		cg_log("error", trace, "response encoding failed; answering %s",
		       cg_reply_registry[CG_R_SYS_CRASH].code);
		line = fallback_line(trace, len);
	}
	return line;
}

/* Encode and hand over the reply's line; the reply stays the caller's. */
static void send_reply(cg_respond_fn respond, void *cookie, const char *id, const char *trace,
		       struct cg_reply *reply)
{
	struct cg_response resp = { .id = id ? id : "",
				    .status = cg_reply_def_of(reply)->status,
				    .reply = reply };
	size_t len = 0;
	char *line = encode_response(&resp, trace, &len);
	respond(cookie, line, len);
}

void answer_reply(cg_respond_fn respond, void *cookie, const char *id, const char *trace,
		  struct cg_reply *reply)
{
	cg_reply_set_trace(reply, trace);
	send_reply(respond, cookie, id, trace, reply);
	cg_reply_free(reply);
}

void answer_sealed(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		   const char *trace, struct cg_reply *reply, const struct cg_folded *folded,
		   json_t *decision, const struct gen *g)
{
	cg_reply_set_trace(reply, trace);
	ev_seal(k, trace, reply, folded, decision, g, false);
	answer_reply(respond, cookie, id, trace, reply);
}

void answer_refusal(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		    const char *trace, struct cg_reply *reply, json_t *request,
		    const struct cg_gate *g, json_t *decision, const struct gen *gen)
{
	cg_reply_set_trace(reply, trace);
	ev_refuse(k, trace, request, g, decision, reply, gen);
	answer_reply(respond, cookie, id, trace, reply);
}

void answer_sealed_now(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
		       const char *trace, struct cg_reply *reply, const struct cg_folded *folded,
		       json_t *decision, const struct gen *g)
{
	cg_reply_set_trace(reply, trace);
	send_reply(respond, cookie, id, trace, reply);
	ev_seal(k, trace, reply, folded, decision, g, false);
	cg_reply_free(reply);
}

void answer_refusal_now(struct cg_kernel *k, cg_respond_fn respond, void *cookie, const char *id,
			const char *trace, struct cg_reply *reply, json_t *request,
			const struct cg_gate *g, json_t *decision, const struct gen *gen)
{
	cg_reply_set_trace(reply, trace);
	send_reply(respond, cookie, id, trace, reply);
	ev_refuse(k, trace, request, g, decision, reply, gen);
	cg_reply_free(reply);
}

char *cg_kernel_transport_reply(struct cg_kernel *k, const char *which, const struct cg_peer *peer,
				struct cg_reply *r, size_t *resp_len)
{
	char trace[40] = "";
	if (!r || cg_uuid4(trace, sizeof(trace)) != 0) {
		cg_reply_free(r);
		return fallback_line("00000000-0000-0000-0000-000000000000", resp_len);
	}
	cg_reply_set_trace(r, trace);
	ev_note(k, trace, CG_EV_REQUEST,
		json_pack("{s:s,s:{s:i,s:i,s:i}}", "transport", which, "peer", "pid",
			  (int)peer->pid, "uid", (int)peer->uid, "gid", (int)peer->gid));
	struct gen *g = gen_get(k);
	ev_seal(k, trace, r, NULL, NULL, g, false);
	gen_put(g);
	struct cg_response resp = { .id = "", .status = cg_reply_def_of(r)->status, .reply = r };
	char *line = encode_response(&resp, trace, resp_len);
	cg_reply_free(r);
	return line;
}

void result_from_reply(const struct cg_reply *r, struct cg_result *out)
{
	const struct cg_reply_def *d = cg_reply_def_of(r);
	char *msg = cg_reply_message(r);
	memset(out, 0, sizeof(*out));
	out->type = cg_rtype_char(d->type);
	snprintf(out->code, sizeof(out->code), "%s", d->code);
	snprintf(out->message, sizeof(out->message), "%s", msg ? msg : d->key);
	free(msg);
}
