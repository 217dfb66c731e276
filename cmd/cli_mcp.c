/* SPDX-License-Identifier: MIT */
/*
 * cli_mcp — `callgate mcp`: a Model Context Protocol server on stdio that
 * turns an agent's tool calls into requests on the daemon's socket.
 *
 * JSON-RPC 2.0, one message per line (the MCP stdio transport). Methods:
 * initialize (protocol 2025-06-18 or 2025-03-26), ping, tools/list,
 * tools/call; notifications/initialized is accepted and
 * notifications/cancelled kills a running call. Tools: execute, gate,
 * verdict, replay, status (docs/agents.md, callgate-mcp(1)).
 *
 * Each tools/call runs on its own thread, so the main thread keeps reading
 * stdin while a command runs: that is what lets a cancellation arrive. A call
 * is cancelled by closing its socket connection; the daemon cancels a call
 * whose client disconnects (and records it). Progress notifications are
 * heartbeats sent while the daemon has not answered: "waiting for
 * approval, N s left" while a human is asked, else "running for N s".
 * verdict, replay and status are the daemon's evidence reads (protocol
 * actions verdict, replay, log): the socket is all the bridge needs, and it
 * never runs another program.
 *
 * The bridge sends through the CLI's one client (cg_client_call_wait), which
 * waits on the answer and a cancellation descriptor at once and routes a
 * call whose "host" is another machine over ssh (docs/fleet.md), as run
 * and gate do.
 *
 * A "host" tool argument is a network capability: the bridge runs ssh to it
 * unconfined, outside the daemon's judgement. So the agent may name only a
 * host the operator granted when starting the bridge (--allow-host NAME, or
 * the --host / $CALLGATE_HOST the bridge sends to anyway) or this machine
 * itself; anything else is refused with MCP-VAL-I-102 before ssh is started.
 *
 * Invariants:
 *  - No tool argument starts ssh to a host the operator did not allow.
 *  - Fail closed: if the daemon cannot be reached or its answer cannot be
 *    read, the tool result is isError with an MCP-IO-E reply. Nothing is
 *    ever run locally, and there is no fallback path that skips the gate.
 *  - Every line written to stdout is one complete JSON-RPC message; writers
 *    serialise on out_lock, so concurrent calls never interleave bytes.
 *  - Command output is decoded to text with invalid UTF-8 replaced (and a
 *    flag saying so); the reply's code and trace id are passed through
 *    unchanged so the agent can branch on them and the operator can replay.
 *  - A cancelled request gets no response (MCP: the receiver SHOULD NOT
 *    respond to a cancelled request).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "callgate.h"
#include "cli.h"
#include "reply.h"
#include "util.h"

/* The most stdout an execute result carries (ux-s42e M7). */
#define MCP_STDOUT_CAP	 (256 * 1024)
#define MCP_LINE_MAX	 (8u << 20)	     /* an MCP request line; more is refused */
#define MCP_RESPONSE_MAX CG_CLI_MAX_RESPONSE /* any response the daemon may send (cli.h) */
#define MCP_MAX_JOBS	 64		     /* concurrent tool calls */
#define MCP_PROGRESS_MS	 1000		     /* heartbeat period while a call runs */
#define MCP_QUICK_MS	 30000		     /* deadline for gate/status exchanges */

static const char *const protocol_versions[] = { "2025-06-18", "2025-03-26" };

struct job {
	json_t *rpc_id; /* the request id (owned) */
	json_t *params; /* tools/call params (owned) */
	int cancel_fd;	/* eventfd; readable once the client cancelled */
	bool cancelled; /* guarded by server.lock */
	struct server *srv;
};

struct server {
	const struct cg_cli *g;
	const char *session;		/* --session, sent with every request */
	const char *cwd;		/* --cwd, absolute: a tool call's cwd when it names none */
	const char *const *allow_hosts; /* --allow-host values: the hosts a tool call may name */
	size_t n_allow_hosts;
	pthread_mutex_t lock; /* jobs[], n_jobs, out */
	pthread_cond_t idle;  /* signalled when n_jobs drops */
	struct job *jobs[MCP_MAX_JOBS];
	unsigned int n_jobs;
};

/* ---- output ------------------------------------------------------------- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/* Write one message (stolen) as one line. A failed stdout means the client is gone. */
static void emit(json_t *msg)
{
	char *s;

	if (!msg)
		return;
	s = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!s)
		return;
	pthread_mutex_lock(&out_lock);
	if (cg_write_all(STDOUT_FILENO, s, strlen(s)) == 0)
		(void)cg_write_all(STDOUT_FILENO, "\n", 1);
	pthread_mutex_unlock(&out_lock);
	free(s);
}

static void emit_result(const json_t *id, json_t *result)
{
	emit(json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

/* An error response; data (stolen, may be NULL) is the JSON-RPC error's "data". */
static void emit_error_data(const json_t *id, int code, const char *message, json_t *data)
{
	json_t *null = json_null();

	emit(json_pack("{s:s,s:O,s:{s:i,s:s,s:o*}}", "jsonrpc", "2.0", "id", id ? id : null,
		       "error", "code", code, "message", message, "data", data));
	json_decref(null);
}

static void emit_error(const json_t *id, int code, const char *message)
{
	emit_error_data(id, code, message, NULL);
}

/*
 * A message that could not be read: say why and where. A duplicate key is
 * valid JSON syntax but not a request we will guess at (-32600); anything
 * else is a parse error (-32700). jansson's text may quote the bad input,
 * so it is cut to printable ASCII before it goes into a JSON string.
 */
static void emit_parse_error(const json_error_t *jerr)
{
	bool dup = json_error_code(jerr) == json_error_duplicate_key;
	const char *text = json_error_code(jerr) == json_error_null_character
			       ? "\\u0000 (a NUL character) is not accepted"
			       : jerr->text;
	char why[sizeof(jerr->text)], msg[sizeof(jerr->text) + 128];
	size_t i = 0;

	for (; text[i] && i + 1 < sizeof(why); i++) {
		unsigned char c = (unsigned char)text[i];
		why[i] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
	}
	why[i] = '\0';
	snprintf(msg, sizeof(msg), "%s: %s (line %d, column %d, byte %d)",
		 dup ? "Invalid Request" : "Parse error", why, jerr->line, jerr->column,
		 jerr->position);
	emit_error_data(NULL, dup ? -32600 : -32700, msg,
			json_pack("{s:s,s:i,s:i,s:i}", "reason", why, "line", jerr->line, "column",
				  jerr->column, "position", jerr->position));
}

/* ---- text helpers --------------------------------------------------------- */

static const char *str_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/*
 * Copy p[0..n) as valid UTF-8, replacing each invalid byte with U+FFFD, so
 * that any command output can be carried in a JSON string. *lossy is set
 * when something was replaced. Returns a json string or NULL on OOM.
 */
static json_t *utf8_text(const unsigned char *p, size_t n, bool *lossy)
{
	unsigned char *o = malloc(n * 3 + 1);
	size_t j = 0;
	json_t *s;

	if (!o)
		return NULL;
	for (size_t i = 0; i < n;) {
		unsigned char c = p[i];
		size_t len = c < 0x80	      ? 1
			     : (c >> 5) == 6  ? 2
			     : (c >> 4) == 14 ? 3
			     : (c >> 3) == 30 ? 4
					      : 0;
		bool ok = len > 0 && i + len <= n;

		for (size_t k = 1; ok && k < len; k++)
			ok = (p[i + k] & 0xc0) == 0x80;
		if (ok && len == 2 && c < 0xc2)
			ok = false; /* overlong */
		if (ok && len == 3) {
			unsigned int cp = ((c & 0x0fu) << 12) | ((p[i + 1] & 0x3fu) << 6);
			ok = cp >= 0x800 && !(cp >= 0xd800 && cp <= 0xdfff);
		}
		if (ok && len == 4) {
			unsigned int cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3fu) << 12);
			ok = cp >= 0x10000 && cp <= 0x10ffff;
		}
		if (ok) {
			memcpy(o + j, p + i, len);
			j += len;
			i += len;
		} else {
			memcpy(o + j, "\xef\xbf\xbd", 3);
			j += 3;
			i += 1;
			*lossy = true;
		}
	}
	s = json_stringn((const char *)o, j);
	free(o);
	return s;
}

/* Decode a base64 field of obj into text; missing or empty yields "". */
static json_t *decoded(const json_t *obj, const char *key, bool *lossy)
{
	const char *b64 = json_string_value(json_object_get(obj, key));
	unsigned char *raw;
	size_t raw_len = 0;
	json_t *s;

	if (!b64 || !*b64)
		return json_string("");
	raw = cg_base64_decode(b64, strlen(b64), &raw_len);
	if (!raw) {
		*lossy = true;
		return json_string("");
	}
	s = utf8_text(raw, raw_len, lossy);
	free(raw);
	return s;
}

/* A reply object for a failure the bridge itself detected. New reference. */
static json_t *local_reply(enum cg_reply_id id, json_t *params)
{
	struct cg_reply *r = cg_reply_build_params(id, params);
	char trace[40];
	json_t *j;

	/* A local failure never reached the daemon, so it has no evidence; the
	 * trace id still identifies it in the client's logs. */
	if (cg_uuid4(trace, sizeof(trace)) == 0)
		cg_reply_set_trace(r, trace);
	j = cg_reply_to_json(r);
	cg_reply_free(r);
	return j;
}

/* The one-line summary of a reply: "[D EN-EXEC-D-002] message (trace …)". */
static void reply_line(const json_t *reply, char *buf, size_t len)
{
	snprintf(buf, len, "[%s %s] %s (trace %s)",
		 str_or(json_string_value(json_object_get(reply, "type")), "?"),
		 str_or(json_string_value(json_object_get(reply, "code")), "?"),
		 str_or(json_string_value(json_object_get(reply, "message")), ""),
		 str_or(json_string_value(json_object_get(reply, "trace_id")), "-"));
}

/* A tool result: structured (stolen), its text rendering, and the error flag. */
static json_t *tool_result(json_t *structured, const char *text, bool is_error)
{
	return json_pack("{s:[{s:s,s:s}],s:o,s:b}", "content", "type", "text", "text", text,
			 "structuredContent", structured, "isError", is_error);
}

/* isError result carrying a locally made reply (params stolen). */
static json_t *local_failure(enum cg_reply_id id, json_t *params)
{
	json_t *reply = local_reply(id, params);
	char line[1024];

	reply_line(reply, line, sizeof(line));
	return tool_result(json_pack("{s:s,s:o}", "status", "error", "reply", reply), line, true);
}

/* ---- the daemon exchange -------------------------------------------------- */

enum call_rc { CALL_OK = 0, CALL_FAILED = -1, CALL_CANCELLED = -2 };

struct progress {
	const json_t *token; /* the client's progressToken, or NULL */
	int64_t start_ns;
	int n;
	int64_t approval_until_ns; /* monotonic end of the human's window, or 0 */
};

static void progress_tick(struct progress *pr)
{
	int64_t s;

	if (!pr || !pr->token)
		return;
	s = (cg_now_mono_ns() - pr->start_ns) / 1000000000;
	pr->n++;
	char msg[96];
	int64_t now = cg_now_mono_ns();
	if (pr->approval_until_ns > now)
		snprintf(msg, sizeof(msg), "waiting for approval, %lld s left",
			 (long long)((pr->approval_until_ns - now + 999999999) / 1000000000));
	else
		snprintf(msg, sizeof(msg), "running for %lld s", (long long)s);
	emit(json_pack("{s:s,s:s,s:{s:O,s:i,s:s}}", "jsonrpc", "2.0", "method",
		       "notifications/progress", "params", "progressToken", pr->token, "progress",
		       pr->n, "message", msg));
}

static void progress_tick_cb(void *arg)
{
	progress_tick(arg);
}

/*
 * One request/response exchange with the daemon, through the CLI's one
 * client (cg_client_call_wait): the local socket, or over ssh the daemon of
 * the request's "host" (the server's --host when the request names none).
 * request is borrowed and may gain "host". Waits on the answer and cancel_fd
 * (-1: none), with a progress tick every MCP_PROGRESS_MS; deadline_ms 0
 * means none. Returns CALL_OK with *resp, CALL_CANCELLED (the connection was
 * closed, which cancels the call in the daemon), or CALL_FAILED with a
 * message in err.
 */
static int daemon_call(const struct cg_cli *g, json_t *request, int cancel_fd, int64_t deadline_ms,
		       struct progress *pr, json_t **resp, char *err, size_t err_len)
{
	struct cg_client_wait w = { cancel_fd, pr ? progress_tick_cb : NULL, pr, MCP_PROGRESS_MS };
	if (g->host && *g->host && !json_object_get(request, "host"))
		json_object_set_new(request, "host", json_string(g->host));
	int rc = cg_client_call_wait(g->socket_path, request, deadline_ms, &w, resp, err, err_len);
	return rc == 0 ? CALL_OK : rc == 1 ? CALL_CANCELLED : CALL_FAILED;
}

/* ---- argument checking ---------------------------------------------------- */

static bool is_string_array(const json_t *a, bool nonempty)
{
	size_t i;
	const json_t *v;

	if (!json_is_array(a) || (nonempty && json_array_size(a) == 0))
		return false;
	json_array_foreach(a, i, v) if (!json_is_string(v)) return false;
	return true;
}

/*
 * Build the daemon request from execute/gate arguments. Only the shape the
 * bridge needs is checked here (so a bad call gets a precise I reply naming
 * the tool argument); everything else — stage contents, env names, cwd —
 * is the daemon's to judge. Returns the request, or NULL with *why set.
 */
static json_t *build_request(struct server *srv, const char *tool, const json_t *args,
			     bool allow_actions, const char **why)
{
	const json_t *argv = json_object_get(args, "argv");
	const json_t *pipeline = json_object_get(args, "pipeline");
	const json_t *actions = json_object_get(args, "actions");
	const json_t *v;
	json_t *req = json_object();

	if (!req) {
		*why = "out of memory";
		return NULL;
	}
	if (argv && pipeline) {
		*why = "give either argv or pipeline, not both";
		goto fail;
	}
	if (argv) {
		if (!is_string_array(argv, true)) {
			*why = "argv must be a non-empty array of strings";
			goto fail;
		}
		json_object_set_new(req, "pipeline", json_pack("[O]", argv));
	} else if (pipeline) {
		if (!json_is_array(pipeline)) {
			*why = "pipeline must be an array of arrays of strings";
			goto fail;
		}
		json_object_set(req, "pipeline", (json_t *)(uintptr_t)pipeline);
	}
	if (allow_actions && actions) {
		if (!json_is_array(actions)) {
			*why = "actions must be an array of action objects";
			goto fail;
		}
		json_object_set(req, "actions", (json_t *)(uintptr_t)actions);
	}
	if (!json_object_get(req, "pipeline") && !json_object_get(req, "actions")) {
		*why = allow_actions ? "give argv, pipeline or actions" : "give argv or pipeline";
		goto fail;
	}
	if ((v = json_object_get(args, "description"))) {
		if (!json_is_string(v)) {
			*why = "description must be a string";
			goto fail;
		}
		json_object_set(req, "reason", (json_t *)(uintptr_t)v);
	}
	if ((v = json_object_get(args, "privileged"))) {
		if (!json_is_boolean(v)) {
			*why = "privileged must be true or false";
			goto fail;
		}
		json_object_set(req, "privileged", (json_t *)(uintptr_t)v);
	}
	if ((v = json_object_get(args, "forward_agent"))) {
		if (!json_is_boolean(v)) {
			*why = "forward_agent must be true or false";
			goto fail;
		}
		json_object_set(req, "forward_agent", (json_t *)(uintptr_t)v);
	}
	if ((v = json_object_get(args, "env"))) {
		const char *k;
		const json_t *ev;
		if (!json_is_object(v)) {
			*why = "env must be an object of strings";
			goto fail;
		}
		json_object_foreach((json_t *)(uintptr_t)v, k, ev) if (!json_is_string(ev))
		{
			*why = "env values must be strings";
			goto fail;
		}
		json_object_set(req, "env", (json_t *)(uintptr_t)v);
	}
	if ((v = json_object_get(args, "timeout_ms"))) {
		if (!json_is_integer(v) || json_integer_value(v) <= 0) {
			*why = "timeout_ms must be a positive integer";
			goto fail;
		}
		json_object_set(req, "timeout_ms", (json_t *)(uintptr_t)v);
	}
	if ((v = json_object_get(args, "cwd"))) {
		if (!json_is_string(v)) {
			*why = "cwd must be a string";
			goto fail;
		}
		json_object_set(req, "cwd", (json_t *)(uintptr_t)v);
	} else if (srv->cwd && !json_object_get(args, "host") &&
		   !cg_client_host_is_remote(srv->g->host)) {
		/*
		 * The project the server was started for (ux-s40 M6), not the
		 * daemon's first workspace; gate judges the call where execute
		 * would run it. Another host's paths are its own.
		 */
		json_object_set_new(req, "cwd", json_string(srv->cwd));
	}
	if ((v = json_object_get(args, "host"))) {
		if (!json_is_string(v)) {
			*why = "host must be a string";
			goto fail;
		}
		json_object_set(req, "host", (json_t *)(uintptr_t)v);
	}
	if (srv->session)
		json_object_set_new(req, "session", json_string(srv->session));
	(void)tool;
	return req;
fail:
	json_decref(req);
	return NULL;
}

static json_t *bad_args(const char *tool, const char *why)
{
	return local_failure(CG_R_TOOL_ARGS_INVALID,
			     json_pack("{s:s,s:s}", "tool", tool, "detail", why));
}

/*
 * The failure of an exchange that got no answer. req is the request as sent
 * (daemon_call added the server's --host when it named none): a call routed
 * over ssh names its host, not the local socket it never tried.
 */
static json_t *unreachable(struct server *srv, const json_t *req, const char *detail)
{
	const char *host = json_string_value(json_object_get(req, "host"));
	if (cg_client_host_is_remote(host))
		return local_failure(CG_R_HOST_UNREACHABLE,
				     json_pack("{s:s,s:s}", "host", host, "detail", detail));
	return local_failure(
	    CG_R_DAEMON_UNREACHABLE,
	    json_pack("{s:s,s:s}", "socket", srv->g->socket_path, "detail", detail));
}

/*
 * May a tool call name this host? This machine (no network: the local
 * socket), the server's own --host, or an --allow-host value, compared
 * exactly as given. Anything else would be a connection the agent chose.
 */
static bool host_allowed(const struct server *srv, const char *host)
{
	if (!cg_client_host_is_remote(host))
		return true;
	if (srv->g->host && strcmp(host, srv->g->host) == 0)
		return true;
	for (size_t i = 0; i < srv->n_allow_hosts; i++)
		if (strcmp(host, srv->allow_hosts[i]) == 0)
			return true;
	return false;
}

/* The refusal of a host the operator did not allow (nothing is spawned). */
static json_t *host_refused(const struct server *srv, const char *tool, const char *host)
{
	char shown[72], allowed[512], dflt[300];
	size_t n = 0, o = 0;

	/* The agent's text, bounded and printable ASCII (a cut never splits a
	 * UTF-8 sequence): it is echoed in the reply. */
	for (; host[n] && o + 4 < sizeof(shown); n++) {
		unsigned char c = (unsigned char)host[n];
		shown[o++] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
	}
	if (host[n])
		o += (size_t)snprintf(shown + o, sizeof(shown) - o, "...");
	shown[o] = '\0';
	int l = snprintf(allowed, sizeof(allowed), "this machine");
	const char *remote_default =
	    srv->g->host && cg_client_host_is_remote(srv->g->host) ? srv->g->host : NULL;
	if (remote_default && l > 0 && (size_t)l < sizeof(allowed))
		l += snprintf(allowed + l, sizeof(allowed) - (size_t)l, ", %s", remote_default);
	for (size_t i = 0; i < srv->n_allow_hosts && l > 0 && (size_t)l < sizeof(allowed); i++)
		l +=
		    snprintf(allowed + l, sizeof(allowed) - (size_t)l, ", %s", srv->allow_hosts[i]);
	if (remote_default)
		snprintf(dflt, sizeof(dflt), "the server's host %s", remote_default);
	else
		snprintf(dflt, sizeof(dflt), "this machine's daemon");
	return local_failure(CG_R_TOOL_HOST_NOT_ALLOWED,
			     json_pack("{s:s,s:s,s:s,s:s}", "tool", tool, "host", shown, "allowed",
				       allowed, "default", dflt));
}

/* The reply object of a response, or a DAEMON_REPLY_INVALID one. New reference. */
static json_t *response_reply(const json_t *resp)
{
	json_t *r = json_object_get(resp, "reply");

	if (json_is_object(r) && json_is_string(json_object_get(r, "type")) &&
	    json_is_string(json_object_get(r, "code")))
		return json_incref(r);
	return local_reply(CG_R_DAEMON_REPLY_INVALID,
			   json_pack("{s:s}", "detail", "the response has no reply object"));
}

/* ---- tools ---------------------------------------------------------------- */

/*
 * A client that asked for progress is told when its call waits for a
 * human: the same request is first put to the gate (decide only, nothing
 * runs), and an UNKNOWN that approval will hold makes the heartbeats say
 * "waiting for approval, N s left" until the approval window ends.
 */
static void approval_window(struct server *srv, const json_t *req, int cancel_fd,
			    struct progress *pr)
{
	json_t *g = json_deep_copy(req), *resp = NULL;
	char err[256];
	if (!g)
		return;
	json_object_set_new(g, "action", json_string("gate"));
	json_object_del(g, "id");
	if (daemon_call(srv->g, g, cancel_fd, MCP_QUICK_MS, NULL, &resp, err, sizeof(err)) ==
	    CALL_OK) {
		const json_t *data = json_object_get(json_object_get(resp, "reply"), "data");
		const json_t *ap = json_object_get(data, "approval");
		const char *d = json_string_value(json_object_get(data, "decision"));
		json_int_t ms = json_integer_value(json_object_get(ap, "timeout_ms"));
		if (d && strcmp(d, "UNKNOWN") == 0 &&
		    json_is_true(json_object_get(ap, "enabled")) && ms > 0)
			pr->approval_until_ns = cg_now_mono_ns() + (int64_t)ms * 1000000;
	}
	json_decref(resp);
	json_decref(g);
}

static json_t *tool_execute(struct job *j, const json_t *args, bool *cancelled)
{
	struct server *srv = j->srv;
	const char *why = NULL;
	json_t *req = build_request(srv, "execute", args, false, &why);
	json_t *resp = NULL, *reply, *out, *stages, *st;
	struct progress pr = { .token = json_object_get(json_object_get(j->params, "_meta"),
							"progressToken"),
			       .start_ns = cg_now_mono_ns() };
	char err[256], line[1024];
	const char *status;
	bool lossy = false;
	size_t i;
	int rc;

	if (!req)
		return bad_args("execute", why);
	const char *host = json_string_value(json_object_get(req, "host"));
	if (host && !host_allowed(srv, host)) {
		json_t *refused = host_refused(srv, "execute", host);
		json_decref(req);
		return refused;
	}
	if (pr.token)
		approval_window(srv, req, j->cancel_fd, &pr);
	json_object_set_new(req, "action", json_string("exec"));
	rc = daemon_call(srv->g, req, j->cancel_fd, 0, &pr, &resp, err, sizeof(err));
	/* What callgate run would add after a failed stage (ux-s41b M2). */
	char *hint =
	    rc == CALL_OK ? cg_cli_stage_hint(resp, json_object_get(req, "pipeline")) : NULL;
	if (rc != CALL_OK) {
		json_t *failed = rc == CALL_CANCELLED ? NULL : unreachable(srv, req, err);
		json_decref(req);
		*cancelled = rc == CALL_CANCELLED;
		return failed;
	}
	json_decref(req);

	status = str_or(json_string_value(json_object_get(resp, "status")), "error");
	reply = response_reply(resp);
	out = json_pack("{s:s,s:O}", "status", status, "reply", reply);
	stages = json_array();
	const json_t *rst = json_object_get(resp, "stages");
	json_array_foreach(rst, i, st)
	{
		json_t *o = json_pack("{s:O?,s:o}", "exit_code", json_object_get(st, "exit_code"),
				      "stderr", decoded(st, "stderr", &lossy));
		if (json_is_true(json_object_get(st, "stderr_truncated")))
			json_object_set_new(o, "stderr_truncated", json_true());
		json_array_append_new(stages, o);
	}
	json_object_set_new(out, "stages", stages);
	if (json_array_size(stages) > 0) {
		json_object_set(out, "exit_code",
				json_object_get(json_array_get(stages, json_array_size(stages) - 1),
						"exit_code"));
		json_t *so_full = decoded(resp, "stdout", &lossy);
		bool cut = json_is_true(json_object_get(resp, "stdout_truncated"));
		size_t so_len = json_string_length(so_full);
		/*
		 * A tool result is read into the model's context: 16 MiB (the
		 * runner's cap) in one was past any client's budget, with no word of
		 * it (ux-s42e M7). The first MCP_STDOUT_CAP bytes, at a character's
		 * start, and what to do instead.
		 */
		if (so_len > MCP_STDOUT_CAP) {
			const char *t = json_string_value(so_full);
			size_t k = MCP_STDOUT_CAP;
			while (k > 0 && ((unsigned char)t[k] & 0xc0) == 0x80)
				k--;
			json_t *shorter = json_stringn(t, k);
			if (shorter) {
				json_decref(so_full);
				so_full = shorter;
			}
			char *more = NULL;
			if (asprintf(&more,
				     "%s%sstdout was %zu bytes%s; the first %d KiB are here: write "
				     "large output to a file in the workspace and read it in parts",
				     hint ? hint : "", hint ? "\n" : "", so_len,
				     cut ? " when callgate's own cap (16 MiB a stream) cut it" : "",
				     MCP_STDOUT_CAP / 1024) >= 0) {
				free(hint);
				hint = more;
			}
			cut = true;
		}
		json_object_set_new(out, "stdout", so_full);
		json_object_set_new(out, "stdout_truncated", json_boolean(cut));
		if (lossy)
			json_object_set_new(out, "output_lossy", json_true());
	}

	/* The text rendering: the reply line, then the output an agent reads. */
	size_t cap = 4096, tl = 0;
	char *text;
	reply_line(reply, line, sizeof(line));
	const char *so = json_string_value(json_object_get(out, "stdout"));
	if (so)
		cap += strlen(so);
	json_array_foreach(stages, i, st) cap +=
	    strlen(str_or(json_string_value(json_object_get(st, "stderr")), "")) + 64;
	cap += hint ? strlen(hint) + 32 : 0;
	text = malloc(cap);
	if (!text) {
		free(hint);
		json_decref(reply);
		json_decref(resp);
		json_decref(out);
		return local_failure(CG_R_OUT_OF_MEMORY, json_pack("{s:s}", "doing", "rendering"));
	}
	tl += (size_t)snprintf(text + tl, cap - tl, "%s\n", line);
	/*
	 * The harness that keeps flagged output out of the model's context is
	 * this one: the output is still given (the model may need it), but
	 * marked before it, never silently (s36 walk).
	 */
	if (json_is_true(json_object_get(
		json_object_get(json_object_get(reply, "data"), "screening"), "quarantined")))
		tl += (size_t)snprintf(text + tl, cap - tl, "%s\n", CG_CLI_QUARANTINE_NOTE);
	if (json_array_size(stages) > 0) {
		tl += (size_t)snprintf(text + tl, cap - tl, "exit codes:");
		json_array_foreach(stages, i, st) tl += (size_t)snprintf(
		    text + tl, cap - tl, " %lld",
		    (long long)json_integer_value(json_object_get(st, "exit_code")));
		tl += (size_t)snprintf(
		    text + tl, cap - tl, "\n--- stdout%s ---\n%s",
		    json_is_true(json_object_get(out, "stdout_truncated")) ? " (truncated)" : "",
		    so ? so : "");
		json_array_foreach(stages, i, st)
		{
			const char *se =
			    str_or(json_string_value(json_object_get(st, "stderr")), "");
			if (*se)
				tl +=
				    (size_t)snprintf(text + tl, cap - tl,
						     "\n--- stderr (stage %zu) ---\n%s", i + 1, se);
		}
	}
	if (hint) {
		tl += (size_t)snprintf(text + tl, cap - tl, "\n--- callgate ---\n%s\n", hint);
		json_object_set_new(out, "hint", json_string(hint));
		free(hint);
	}
	json_t *res = tool_result(out, text, strcmp(status, "ok") != 0);
	free(text);
	json_decref(reply);
	json_decref(resp);
	return res;
}

static json_t *tool_gate(struct job *j, const json_t *args, bool *cancelled)
{
	struct server *srv = j->srv;
	const char *why = NULL;
	json_t *req = build_request(srv, "gate", args, true, &why);
	json_t *resp = NULL, *reply, *data, *out;
	char err[256], line[1024];
	const char *type;
	int rc;

	if (!req)
		return bad_args("gate", why);
	const char *host = json_string_value(json_object_get(req, "host"));
	if (host && !host_allowed(srv, host)) {
		json_t *refused = host_refused(srv, "gate", host);
		json_decref(req);
		return refused;
	}
	json_object_set_new(req, "action", json_string("gate"));
	rc = daemon_call(srv->g, req, j->cancel_fd, MCP_QUICK_MS, NULL, &resp, err, sizeof(err));
	if (rc != CALL_OK) {
		json_t *failed = rc == CALL_CANCELLED ? NULL : unreachable(srv, req, err);
		json_decref(req);
		*cancelled = rc == CALL_CANCELLED;
		return failed;
	}
	json_decref(req);
	reply = response_reply(resp);
	data = json_object_get(reply, "data");
	type = str_or(json_string_value(json_object_get(reply, "type")), "E");
	out = json_pack("{s:O?,s:O?,s:O?,s:O?,s:O}", "decision", json_object_get(data, "decision"),
			"rule_id", json_object_get(data, "rule_id"), "constraints",
			json_object_get(data, "constraints"), "trace_id",
			json_object_get(reply, "trace_id"), "reply", reply);
	/* Every rung's rule, in rung order: the folded rule_id alone may be the
	 * privilege rung's when both allow, which says little about why. */
	json_t *ids = json_array();
	const json_t *rung;
	size_t i;
	json_array_foreach(json_object_get(data, "rungs"), i,
			   rung) if (json_is_string(json_object_get(rung, "rule_id")))
	    json_array_append(ids, json_object_get(rung, "rule_id"));
	if (json_array_size(ids) == 0 && json_is_string(json_object_get(data, "rule_id")))
		json_array_append(ids, json_object_get(data, "rule_id"));
	json_object_set_new(out, "rule_ids", ids);
	reply_line(reply, line, sizeof(line));
	/*
	 * The lines callgate gate prints besides the decision (ux-s41b M3): why,
	 * each rung's verdict, and for an UNKNOWN what it would meet if sent.
	 */
	struct cg_buf tb;
	cg_buf_init(&tb, 1u << 16);
	(void)cg_buf_add(&tb, line, strlen(line));
	const char *rule_why = json_string_value(json_object_get(data, "why"));
	if (rule_why) {
		(void)cg_buf_add(&tb, "\nwhy: ", 6);
		(void)cg_buf_add(&tb, rule_why, strlen(rule_why));
	}
	json_array_foreach(json_object_get(data, "rungs"), i, rung)
	{
		char r[256];
		int n = snprintf(r, sizeof(r), "%s%s=%s (%s)", i ? ", " : "\nrungs: ",
				 str_or(json_string_value(json_object_get(rung, "rung")), "?"),
				 str_or(json_string_value(json_object_get(rung, "decision")), "?"),
				 str_or(json_string_value(json_object_get(rung, "rule_id")), "-"));
		(void)cg_buf_add(&tb, r, n > 0 && (size_t)n < sizeof(r) ? (size_t)n : 0);
	}
	/*
	 * Decided by the privilege rung: the request asked to run as root (the
	 * protocol's default), which a file action never needs (ux-s42c L3).
	 */
	const char *rid = json_string_value(json_object_get(data, "rule_id"));
	if (rid && strcmp(rid, "privileged") == 0) {
		static const char as_you[] =
		    "\nprivileged: sent as a privileged call (the protocol's default): send "
		    "privileged: false to be judged as yourself";
		(void)cg_buf_add(&tb, as_you, sizeof(as_you) - 1);
	}
	char *next = cg_cli_gate_next(json_object_get(data, "approval"));
	if (next) {
		(void)cg_buf_add(&tb, "\nnext: ", 7);
		(void)cg_buf_add(&tb, next, strlen(next));
		json_object_set_new(out, "next", json_string(next));
		free(next);
	}
	char *text = cg_buf_cstr(&tb);
	/* A BLOCK is an answer, not a failure: isError only when no decision came back. */
	json_t *res = tool_result(out, text ? text : line, strcmp(type, "S") != 0);
	free(text);
	json_decref(reply);
	json_decref(resp);
	return res;
}

#define MCP_RECENT 10 /* calls the status tool lists */

/*
 * The peer's most recent calls (newest first), from the daemon's log
 * action: each trace's request action and its verdict event. Reads of
 * evidence and pings are left out: they are not calls the agent made to
 * act. A new reference; an empty array when the log cannot be had.
 */
static json_t *recent_calls(struct server *srv, int cancel_fd)
{
	json_t *req = json_pack("{s:s,s:i}", "action", "log", "limit", 1000);
	json_t *resp = NULL, *out = json_array(), *actions = json_object();
	char err[256];
	if (daemon_call(srv->g, req, cancel_fd, MCP_QUICK_MS, NULL, &resp, err, sizeof(err)) ==
	    CALL_OK) {
		const json_t *evs = json_object_get(
		    json_object_get(json_object_get(resp, "reply"), "data"), "events");
		for (size_t i = json_array_size(evs);
		     i-- > 0 && json_array_size(out) < MCP_RECENT;) {
			const json_t *e = json_array_get(evs, i);
			const char *tr = json_string_value(json_object_get(e, "trace"));
			const char *ty = json_string_value(json_object_get(e, "type"));
			const json_t *pl = json_object_get(e, "payload");
			if (!tr || !ty)
				continue;
			if (strcmp(ty, "verdict") == 0) {
				json_object_set_new(
				    actions, tr,
				    json_pack(
					"{s:s,s:O?,s:O?,s:O?}", "trace_id", tr, "time",
					json_object_get(e, "ts"), "decision",
					json_object_get(pl, "decision"), "code",
					json_object_get(json_object_get(pl, "reply"), "code")));
				continue;
			}
			json_t *call = json_object_get(actions, tr);
			const char *act = json_string_value(
			    json_object_get(json_object_get(pl, "request"), "action"));
			if (strcmp(ty, "request") != 0 || !call || !act)
				continue;
			if (strcmp(act, "exec") == 0 || strcmp(act, "gate") == 0 ||
			    strcmp(act, "grant") == 0)
				json_array_append(out, call);
		}
	}
	json_decref(actions);
	json_decref(resp);
	json_decref(req);
	return out;
}

static json_t *tool_status(struct job *j, bool *cancelled)
{
	struct server *srv = j->srv;
	json_t *req = json_pack("{s:s}", "action", "ping");
	json_t *resp = NULL, *reply, *data, *out;
	char err[256], line[1200];
	int rc;

	rc = daemon_call(srv->g, req, j->cancel_fd, MCP_QUICK_MS, NULL, &resp, err, sizeof(err));
	if (rc != CALL_OK) {
		json_t *res = rc == CALL_CANCELLED ? NULL : unreachable(srv, req, err);
		json_decref(req);
		*cancelled = rc == CALL_CANCELLED;
		if (res)
			json_object_set_new(json_object_get(res, "structuredContent"), "alive",
					    json_false());
		return res;
	}
	json_decref(req);
	reply = response_reply(resp);
	data = json_object_get(reply, "data");
	bool alive = json_is_string(json_object_get(reply, "type")) &&
		     strcmp(json_string_value(json_object_get(reply, "type")), "S") == 0;
	out = json_pack("{s:b,s:s,s:O?,s:O?,s:O?,s:O}", "alive", alive, "socket",
			srv->g->socket_path, "version", json_object_get(data, "version"),
			"protocol", json_object_get(data, "protocol"), "policy",
			json_object_get(data, "policy"), "reply", reply);
	if (alive)
		json_object_set_new(out, "recent", recent_calls(srv, j->cancel_fd));
	reply_line(reply, line, sizeof(line));
	const json_t *pol = json_object_get(data, "policy");
	const char *sha = json_string_value(json_object_get(pol, "sha256"));
	if (sha) {
		size_t l = strlen(line);
		snprintf(line + l, sizeof(line) - l, "\npolicy sha256 %s", sha);
	}
	json_t *res = tool_result(out, line, !alive);
	json_decref(reply);
	json_decref(resp);
	return res;
}

/*
 * verdict/replay: the daemon's evidence reads (protocol actions "verdict"
 * and "replay"), so the socket is all the bridge needs. The daemon answers
 * only for traces of the bridge's own uid (or every trace for an approver);
 * anything else is TRACE_NOT_FOUND. The trace id is checked here only for
 * its shape, to name the bad argument; the daemon checks it again.
 */
static json_t *tool_evidence(struct job *j, const char *tool, const json_t *args, bool *cancelled)
{
	struct server *srv = j->srv;
	const char *id = json_string_value(json_object_get(args, "trace_id"));
	json_t *resp = NULL, *reply, *data, *out;
	char err[256], line[1200];
	bool verdict = strcmp(tool, "verdict") == 0;

	if (!id || !*id || strlen(id) > 64 || id[0] == '.' ||
	    strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-") !=
		strlen(id))
		return bad_args(tool,
				"trace_id must be a trace id (letters, digits, '.', '_', '-')");
	json_t *req =
	    json_pack("{s:s,s:s}", "action", verdict ? "verdict" : "replay", "trace_id", id);
	int rc =
	    daemon_call(srv->g, req, j->cancel_fd, MCP_QUICK_MS, NULL, &resp, err, sizeof(err));
	if (rc != CALL_OK) {
		json_t *failed = rc == CALL_CANCELLED ? NULL : unreachable(srv, req, err);
		json_decref(req);
		*cancelled = rc == CALL_CANCELLED;
		return failed;
	}
	json_decref(req);
	reply = response_reply(resp);
	data = json_object_get(reply, "data");
	const char *type = str_or(json_string_value(json_object_get(reply, "type")), "E");
	bool ok = strcmp(type, "S") == 0;
	reply_line(reply, line, sizeof(line));
	if (!ok) {
		out = json_pack("{s:s,s:s,s:O}", "status", "error", "trace_id", id, "reply", reply);
	} else if (verdict) {
		json_t *v = json_object_get(data, "verdict");
		out = json_pack("{s:s,s:s,s:O?,s:O?,s:O?,s:O}", "status", "ok", "trace_id", id,
				"decision", json_object_get(v, "decision"), "summary",
				json_object_get(v, "summary"), "verdict", v, "reply", reply);
		const char *sum = json_string_value(json_object_get(v, "summary"));
		if (sum) {
			size_t l = strlen(line);
			snprintf(line + l, sizeof(line) - l, "\n%s", sum);
		}
	} else {
		const char *st = str_or(json_string_value(json_object_get(data, "status")), "FAIL");
		out = json_pack("{s:s,s:s,s:s,s:b,s:O?,s:O?,s:O}", "status", "ok", "trace_id", id,
				"result", st, "pass", strcmp(st, "PASS") == 0, "traces",
				json_object_get(data, "traces"), "failures",
				json_object_get(data, "failures"), "reply", reply);
	}
	/* A replay that FAILs is an answer (evidence does not check out), not a tool error. */
	json_t *res = tool_result(out, line, !ok);
	json_decref(reply);
	json_decref(resp);
	return res;
}

/* ---- tool descriptions ---------------------------------------------------- */

/*
 * The tools, their input schemas and the output schemas their
 * structuredContent follows (MCP 2025-06-18). Every result, success or
 * failure, carries "reply" (the canonical reply); a failure the bridge or the
 * daemon refused also carries "status": "error". tests/e2e/test_mcp.py checks
 * each result against the schema declared here.
 */
#define REPLY_SCHEMA                                                                               \
	"{\"type\":\"object\",\"description\":\"The canonical reply: branch on type and code.\","  \
	"\"properties\":{\"type\":{\"type\":\"string\",\"enum\":[\"S\",\"I\",\"D\",\"E\"]},"       \
	"\"code\":{\"type\":\"string\"},\"message\":{\"type\":\"string\"},"                        \
	"\"trace_id\":{\"type\":\"string\"}},\"required\":[\"type\",\"code\"]}"

#define COMMAND_PROPS                                                                              \
	"\"argv\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,"             \
	"\"description\":\"One command and its arguments, run without a shell (a one-stage "       \
	"pipeline).\"},"                                                                           \
	"\"pipeline\":{\"type\":\"array\",\"minItems\":1,\"description\":\"Stages without a "      \
	"shell: "                                                                                  \
	"[[\\\"cmd\\\",\\\"arg\\\"],[\\\"next\\\"]] is cmd arg | next.\",\"items\":{\"type\":"     \
	"\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1}},"                              \
	"\"description\":{\"type\":\"string\",\"description\":\"Why it should run; shown to the "  \
	"approver and kept in evidence.\"},"                                                       \
	"\"privileged\":{\"type\":\"boolean\",\"description\":\"Run as root after approval "       \
	"(default true, the protocol's most restrictive default); false runs as the caller.\"},"   \
	"\"forward_agent\":{\"type\":\"boolean\",\"description\":\"Forward the daemon owner's "    \
	"SSH "                                                                                     \
	"agent to the command (only with privileged false; a human decides, or a grant).\"},"      \
	"\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},"             \
	"\"description\":\"Environment variables (only names on the policy's allow-list).\"},"     \
	"\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"The command's "      \
	"deadline in milliseconds (capped by policy).\"},"                                         \
	"\"cwd\":{\"type\":\"string\",\"description\":\"Working directory; must be inside a "      \
	"configured workspace (default: the daemon's first workspace, not the project this "       \
	"server runs in: pass the project's directory).\"},"                                       \
	"\"host\":{\"type\":\"string\",\"description\":\"The machine whose callgate daemon "       \
	"decides and runs it, reached over SSH (default: the server's --host, else this one). "    \
	"Only a host the operator allowed when starting this server (callgate mcp --allow-host, "  \
	"or its --host) is accepted; any other is refused (MCP-VAL-I-102) and nothing is "         \
	"sent.\"}"

static const char tools_json[] =
    "{\"tools\":["
    /* execute */
    "{\"name\":\"execute\",\"title\":\"Run a command through callgate\",\"description\":"
    "\"Run a command or pipeline (no shell) through the callgate daemon: policy decides, a "
    "human may approve, the command runs confined, and the result comes back with exit codes, "
    "decoded stdout/stderr (secrets redacted) and the canonical reply (type S/I/D/E, code, "
    "message, trace id). For redirections, globs or && send argv [\\\"bash\\\", "
    "\\\"-c\\\", \\\"...\\\"]: it runs confined as any interpreter does, with the "
    "repository's .git read-only (run git as an argv of its own to commit). "
    "Branch on reply.type and reply.code. Send \\\"privileged\\\": "
    "false for ordinary commands; without it the call asks to run as root.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" COMMAND_PROPS "}},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\",\"enum\":[\"ok\",\"denied\",\"timeout\",\"error\"]},"
    "\"reply\":" REPLY_SCHEMA ","
    "\"exit_code\":{\"type\":\"integer\"},\"stdout\":{\"type\":\"string\"},"
    "\"stdout_truncated\":{\"type\":\"boolean\"},\"output_lossy\":{\"type\":\"boolean\"},\"hint\":{"
    "\"type\":\"string\"},"
    "\"stages\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"exit_code\":{\"type\":\"integer\"},\"stderr\":{\"type\":\"string\"},"
    "\"stderr_truncated\":{\"type\":\"boolean\"}}}}},"
    "\"required\":[\"status\",\"reply\"]}},"
    /* gate */
    "{\"name\":\"gate\",\"title\":\"Ask callgate whether an action would be allowed\","
    "\"description\":\"Decide without running anything: a pipeline and/or proposed actions "
    "({action_type, tool, resource, args}) -> decision ALLOW/DEGRADE/UNKNOWN/BLOCK, the rule "
    "that decided, constraints, trace id.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" COMMAND_PROPS ","
    "\"actions\":{\"type\":\"array\",\"description\":\"Proposed actions that are not commands "
    "(file reads/writes, fetches).\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"action_type\":{\"type\":\"string\"},\"tool\":{\"type\":\"string\"},"
    "\"resource\":{\"type\":\"string\"},\"args\":{\"type\":\"object\"}},"
    "\"required\":[\"action_type\"]}}}},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\"},"
    "\"decision\":{\"type\":\"string\",\"enum\":[\"ALLOW\",\"DEGRADE\",\"UNKNOWN\",\"BLOCK\"]},"
    "\"rule_id\":{\"type\":\"string\"},\"rule_ids\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\"}},\"constraints\":{},\"trace_id\":{\"type\":\"string\"},"
    "\"next\":{\"type\":\"string\"},"
    "\"reply\":" REPLY_SCHEMA "},\"required\":[\"reply\"]}},"
    /* verdict */
    "{\"name\":\"verdict\",\"title\":\"Show a call's verdict\",\"description\":"
    "\"The structured verdict recorded for a trace id of yours (what was asked, decided, "
    "run), read from the daemon.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"trace_id\":{\"type\":\"string\","
    "\"description\":\"The trace id from a reply.\"}},\"required\":[\"trace_id\"]},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\",\"enum\":[\"ok\",\"error\"]},"
    "\"trace_id\":{\"type\":\"string\"},\"decision\":{\"type\":\"string\"},"
    "\"summary\":{\"type\":\"string\"},\"verdict\":{\"type\":\"object\"},"
    "\"reply\":" REPLY_SCHEMA "},\"required\":[\"status\",\"reply\"]}},"
    /* replay */
    "{\"name\":\"replay\",\"title\":\"Verify a call's evidence\",\"description\":"
    "\"Replay and verify the evidence chain of a trace id of yours against the journal and "
    "its signed checkpoints; result PASS or FAIL with each failure named.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"trace_id\":{\"type\":\"string\","
    "\"description\":\"The trace id from a reply.\"}},\"required\":[\"trace_id\"]},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\",\"enum\":[\"ok\",\"error\"]},"
    "\"trace_id\":{\"type\":\"string\"},\"result\":{\"type\":\"string\",\"enum\":[\"PASS\","
    "\"FAIL\"]},\"pass\":{\"type\":\"boolean\"},\"traces\":{\"type\":\"array\"},"
    "\"failures\":{\"type\":\"array\"},"
    "\"reply\":" REPLY_SCHEMA "},\"required\":[\"status\",\"reply\"]}},"
    /* status */
    "{\"name\":\"status\",\"title\":\"Daemon status\",\"description\":"
    "\"Is the callgate daemon alive, which version, which policy (sha256) is in force, and "
    "your most recent calls with their decisions.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{}},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\"},\"alive\":{\"type\":\"boolean\"},"
    "\"socket\":{\"type\":\"string\"},\"version\":{\"type\":\"string\"},"
    "\"protocol\":{\"type\":\"integer\"},\"policy\":{\"type\":\"object\"},"
    "\"recent\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"trace_id\":{\"type\":\"string\"},\"time\":{\"type\":\"string\"},"
    "\"decision\":{\"type\":\"string\"},\"code\":{\"type\":\"string\"}}}},"
    "\"reply\":" REPLY_SCHEMA "},\"required\":[\"alive\",\"reply\"]}}"
    "]}";

static json_t *tools_list(void)
{
	json_error_t e;
	json_t *t = json_loads(tools_json, 0, &e);
	if (!t)
		cg_log("error", NULL, "callgate mcp: tool list: %s (column %d)", e.text, e.column);
	return t ? t : json_pack("{s:[]}", "tools");
}

/* ---- dispatch ------------------------------------------------------------- */

/*
 * An argument the tool's inputSchema does not name: a typo (cwdd, timout_ms)
 * would otherwise be dropped without a word and the call run without it.
 * Writes "unknown argument 'X' (valid: a, b)" to why and returns true.
 */
static bool unknown_argument(const char *tool, const json_t *args, char *why, size_t len)
{
	json_t *list = tools_list();
	const json_t *props = NULL;
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(list, "tools"), i, t)
	{
		const char *tn = json_string_value(json_object_get(t, "name"));
		if (tn && strcmp(tn, tool) == 0)
			props = json_object_get(json_object_get(t, "inputSchema"), "properties");
	}
	const char *key;
	json_t *v;
	bool bad = false;
	json_object_foreach((json_t *)(uintptr_t)args, key, v)
	{
		if (!props || json_object_get(props, key))
			continue;
		int n = snprintf(why, len, "unknown argument '%.64s' (valid:", key);
		const char *pk;
		json_t *pv;
		bool first = true;
		json_object_foreach((json_t *)(uintptr_t)props, pk, pv)
		{
			if (n > 0 && (size_t)n < len)
				n += snprintf(why + n, len - (size_t)n, "%s %s", first ? "" : ",",
					      pk);
			first = false;
		}
		if (n > 0 && (size_t)n < len)
			(void)snprintf(why + n, len - (size_t)n, ")");
		bad = true;
		break;
	}
	json_decref(list);
	return bad;
}

static void job_remove(struct job *j)
{
	struct server *srv = j->srv;

	pthread_mutex_lock(&srv->lock);
	for (unsigned int i = 0; i < srv->n_jobs; i++)
		if (srv->jobs[i] == j) {
			srv->jobs[i] = srv->jobs[--srv->n_jobs];
			break;
		}
	pthread_cond_broadcast(&srv->idle);
	pthread_mutex_unlock(&srv->lock);
	close(j->cancel_fd);
	json_decref(j->rpc_id);
	json_decref(j->params);
	free(j);
}

static void *job_run(void *arg)
{
	struct job *j = arg;
	const char *name = json_string_value(json_object_get(j->params, "name"));
	json_t *args = json_object_get(j->params, "arguments");
	json_t *empty = NULL, *res = NULL;
	bool cancelled = false;

	if (!args)
		args = empty = json_object();
	if (strcmp(name, "execute") == 0)
		res = tool_execute(j, args, &cancelled);
	else if (strcmp(name, "gate") == 0)
		res = tool_gate(j, args, &cancelled);
	else if (strcmp(name, "status") == 0)
		res = tool_status(j, &cancelled);
	else
		res = tool_evidence(j, name, args, &cancelled);
	json_decref(empty);

	pthread_mutex_lock(&j->srv->lock);
	cancelled = cancelled || j->cancelled;
	pthread_mutex_unlock(&j->srv->lock);
	if (cancelled)
		json_decref(res);
	else if (res)
		emit_result(j->rpc_id, res);
	else
		emit_error(j->rpc_id, -32603, "internal error building the result");
	job_remove(j);
	return NULL;
}

bool cg_cli_mcp_tool_known(const char *name)
{
	static const char *const names[] = { "execute", "gate", "verdict", "replay", "status" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return false;
}

static void start_call(struct server *srv, const json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	const json_t *args = json_object_get(params, "arguments");
	struct job *j;
	pthread_t t;
	pthread_attr_t attr;

	if (!json_is_object(params) || !name || (args && !json_is_object(args))) {
		emit_error(id, -32602, "tools/call needs params {name: string, arguments: object}");
		return;
	}
	if (!cg_cli_mcp_tool_known(name)) {
		char msg[200];
		snprintf(msg, sizeof(msg), "Unknown tool: %.100s", name);
		emit_error(id, -32602, msg);
		return;
	}
	char why[512];
	if (args && unknown_argument(name, args, why, sizeof(why))) {
		emit_result(id, bad_args(name, why));
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		emit_error(id, -32603, "out of memory");
		return;
	}
	j->srv = srv;
	j->rpc_id = json_incref((json_t *)(uintptr_t)id);
	j->params = json_incref(params);
	j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_lock(&srv->lock);
	bool full = srv->n_jobs >= MCP_MAX_JOBS;
	if (!full && j->cancel_fd >= 0)
		srv->jobs[srv->n_jobs++] = j;
	pthread_mutex_unlock(&srv->lock);
	if (full) {
		emit_result(
		    id, local_failure(CG_R_BRIDGE_BUSY, json_pack("{s:i}", "limit", MCP_MAX_JOBS)));
		goto fail_job;
	}
	if (j->cancel_fd < 0) {
		emit_result(id, local_failure(CG_R_OUT_OF_MEMORY,
					      json_pack("{s:s}", "doing",
							"making the tool call's cancel eventfd")));
		goto fail_job;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&t, &attr, job_run, j);
	pthread_attr_destroy(&attr);
	if (e == 0)
		return;
	emit_result(id,
		    local_failure(CG_R_OUT_OF_MEMORY,
				  json_pack("{s:s}", "doing", "starting the tool call's thread")));
	/* By pointer: a job finishing meanwhile may have moved this one to another slot. */
	job_remove(j);
	return;
fail_job:
	if (j->cancel_fd >= 0)
		close(j->cancel_fd);
	json_decref(j->rpc_id);
	json_decref(j->params);
	free(j);
}

/* Cancel the running call whose JSON-RPC id equals request_id (if any). */
static void cancel_call(struct server *srv, const json_t *request_id)
{
	uint64_t one = 1;

	if (!request_id)
		return;
	pthread_mutex_lock(&srv->lock);
	for (unsigned int i = 0; i < srv->n_jobs; i++)
		if (json_equal(srv->jobs[i]->rpc_id, request_id)) {
			srv->jobs[i]->cancelled = true;
			(void)cg_write_all(srv->jobs[i]->cancel_fd, &one, sizeof(one));
		}
	pthread_mutex_unlock(&srv->lock);
}

static json_t *initialize_result(const json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *ver = protocol_versions[0];

	/* Answer with the client's version when we speak it, else our latest;
	 * the client decides whether it can continue. */
	for (size_t i = 0; want && i < sizeof(protocol_versions) / sizeof(protocol_versions[0]);
	     i++)
		if (strcmp(want, protocol_versions[i]) == 0)
			ver = protocol_versions[i];
	return json_pack(
	    "{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:s}", "protocolVersion", ver, "capabilities",
	    "tools", "listChanged", false, "serverInfo", "name", "callgate", "title",
	    "callgate call gate", "version", CALLGATE_VERSION, "instructions",
	    "Every command goes through the callgate daemon's policy before it runs. Use the "
	    "execute tool to run commands (no shell: pass argv or pipeline; for redirections, "
	    "globs or && pass argv [\"bash\", \"-c\", \"...\"], which runs confined with .git "
	    "read-only, so run git as an argv of its own). Send "
	    "\"privileged\": false for ordinary commands: a call without it asks to run as root, "
	    "which needs a human's approval. Branch on reply.type: S continue, I fix the "
	    "request, D do not retry the same call (escalate to a human; a D may say which "
	    "change would be allowed), E stop and report the trace id, except MCP-EXEC-E-002 (the "
	    "command ran past its deadline: retry with a larger timeout_ms if it needs longer).");
}

static void handle(struct server *srv, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	const json_t *id, *params;
	const char *method;

	if (!msg) {
		emit_parse_error(&jerr);
		return;
	}
	if (!json_is_object(msg)) {
		emit_error(NULL, -32600, "Invalid Request: a message is one JSON object");
		goto out_msg;
	}
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	params = json_object_get(msg, "params");
	if (id && !json_is_string(id) && !json_is_integer(id)) {
		emit_error(NULL, -32600, "Invalid Request: id must be a string or an integer");
		goto out_msg;
	}
	if (!method) {
		/* A response to us (we send no requests) is ignored; anything else is invalid. */
		if (!json_object_get(msg, "result") && !json_object_get(msg, "error"))
			emit_error(id, -32600, "Invalid Request: no method");
		goto out_msg;
	}
	if (strcmp(str_or(json_string_value(json_object_get(msg, "jsonrpc")), ""), "2.0") != 0) {
		if (id)
			emit_error(id, -32600, "Invalid Request: jsonrpc must be \"2.0\"");
		goto out_msg;
	}
	if (params && !json_is_object(params)) {
		if (id)
			emit_error(id, -32602, "Invalid params: params must be an object");
		goto out_msg;
	}
	if (!id) { /* a notification: never answered */
		if (strcmp(method, "notifications/cancelled") == 0)
			cancel_call(srv, json_object_get(params, "requestId"));
		goto out_msg;
	}
	if (strcmp(method, "initialize") == 0)
		emit_result(id, initialize_result(params));
	else if (strcmp(method, "ping") == 0)
		emit_result(id, json_object());
	else if (strcmp(method, "tools/list") == 0)
		emit_result(id, tools_list());
	else if (strcmp(method, "tools/call") == 0)
		start_call(srv, id, (json_t *)(uintptr_t)params);
	else {
		/* Named (printable ASCII, cut): the peer sees which method it sent. */
		char msg_text[200], shown[96];
		size_t k = 0;
		for (; method[k] && k + 1 < sizeof(shown); k++)
			shown[k] = method[k] >= 0x20 && method[k] < 0x7f ? method[k] : '?';
		shown[k] = '\0';
		snprintf(
		    msg_text, sizeof(msg_text),
		    "Method not found: '%s' (served: initialize, ping, tools/list, tools/call)",
		    shown);
		emit_error(id, -32601, msg_text);
	}
out_msg:
	json_decref(msg);
}

static const struct cg_cli_opt mcp_opts[] = {
	{ "--session", "NAME", "the session every request names (default: $CALLGATE_SESSION)" },
	{ "--allow-host", "NAME", "a host a tool call may name (reached over ssh); repeatable" },
	{ "--cwd", "DIR",
	  "where execute runs when a call names no cwd (default: the daemon's "
	  "first workspace)" },
	{ 0 },
};

int cg_cli_mcp(const struct cg_cli *g, int argc, char **argv)
{
	struct server srv = { .g = g, .session = getenv("CALLGATE_SESSION") };
	static char cwd_buf[PATH_MAX];
	char *buf = NULL;
	size_t len = 0, alloc = 0;
	bool skipping = false; /* inside an over-long line: drop to its newline */
	int rc = CG_EXIT_OK;

	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate [--socket PATH] [--host NAME] mcp [--session NAME] [--allow-host "
		    "NAME]... [--cwd DIR]",
		    "Serve the Model Context Protocol on stdin/stdout: tools execute, "
		    "gate,\nverdict, replay and status, every call through the daemon. "
		    "A tool's \"host\"\nargument is a network capability: the bridge runs "
		    "ssh to it, so the agent may\nname only this machine, --host, or an "
		    "--allow-host NAME. See callgate-mcp(1).",
		    mcp_opts);
	const char **allow = calloc((size_t)argc, sizeof(*allow));
	if (!allow) {
		fprintf(stderr, "callgate mcp: out of memory\n");
		return CG_EXIT_ERROR;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--session") == 0 && i + 1 < argc) {
			srv.session = argv[++i];
		} else if (strcmp(argv[i], "--cwd") == 0 && i + 1 < argc) {
			/* Absolute now: the daemon judges it against its workspaces. */
			struct stat st;
			bool found = realpath(argv[++i], cwd_buf) && stat(cwd_buf, &st) == 0;
			if (!found || !S_ISDIR(st.st_mode)) {
				fprintf(stderr, "callgate mcp: --cwd %s: %s\n", argv[i],
					found ? "not a directory" : strerror(errno));
				free(allow);
				return CG_EXIT_USAGE;
			}
			srv.cwd = cwd_buf;
		} else if (strcmp(argv[i], "--allow-host") == 0 && i + 1 < argc && argv[i + 1][0] &&
			   argv[i + 1][0] != '-') {
			allow[srv.n_allow_hosts++] = argv[++i];
		} else {
			bool flag = strcmp(argv[i], "--session") == 0 ||
				    strcmp(argv[i], "--allow-host") == 0 ||
				    strcmp(argv[i], "--cwd") == 0;
			rc = cg_cli_bad_option("mcp", argv[i],
					       !flag	      ? NULL
					       : i + 1 < argc ? "a host name that does not start "
								"with '-' after"
							      : "no value after",
					       mcp_opts);
			free(allow);
			return rc;
		}
	}
	srv.allow_hosts = allow;
	/* A client that closes its end must not kill the bridge mid-write, and
	 * neither must a daemon that closes first: both show up as EPIPE. */
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&srv.lock, NULL);
	pthread_cond_init(&srv.idle, NULL);

	for (;;) {
		if (alloc - len < 65536) {
			size_t na = alloc ? alloc * 2 : 262144;
			char *nb = realloc(buf, na);
			if (!nb) {
				rc = CG_EXIT_ERROR;
				break;
			}
			buf = nb;
			alloc = na;
		}
		ssize_t r = cg_read_some(STDIN_FILENO, buf + len, alloc - len);
		if (r <= 0)
			break; /* EOF (or a broken stdin): the client is done */
		size_t start = 0, scan = len;
		len += (size_t)r;
		for (char *nl; (nl = memchr(buf + scan, '\n', len - scan));) {
			size_t end = (size_t)(nl - buf);
			if (!skipping && end > start)
				handle(&srv, buf + start, end - start);
			skipping = false;
			start = scan = end + 1;
		}
		memmove(buf, buf + start, len - start);
		len -= start;
		if (len > MCP_LINE_MAX) {
			/* No valid request is this long; answer once, drop it to its end. */
			if (!skipping)
				emit_error(NULL, -32600, "Invalid Request: message too long");
			skipping = true;
			len = 0;
		}
		if (alloc > 2 * MCP_LINE_MAX && len == 0) {
			free(buf);
			buf = NULL;
			alloc = 0;
			len = 0;
		}
	}
	if (len > 0 && !skipping)
		handle(&srv, buf, len); /* a last message without its newline */
	/* stdin is closed: finish the calls in flight and answer them (a script
	 * that pipes requests in wants its answers). A client that wants them
	 * stopped sends SIGTERM, as the MCP stdio shutdown prescribes; the
	 * process dies, each socket closes, and the daemon cancels each call. */
	pthread_mutex_lock(&srv.lock);
	while (srv.n_jobs > 0)
		pthread_cond_wait(&srv.idle, &srv.lock);
	pthread_mutex_unlock(&srv.lock);
	free(buf);
	free(allow);
	return rc;
}
