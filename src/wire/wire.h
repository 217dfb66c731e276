/* SPDX-License-Identifier: MIT */
/*
 * wire — the seed-002 / PROTOCOL.md request codec.
 *
 * Decodes one request line into a struct cg_request, validating it in the
 * documented order (docs/protocol.md), and encodes responses. Every refusal
 * is a specific MCP-*-I reply; the codec never executes anything.
 *
 * Invariants:
 *  - cg_wire_decode MUST reject duplicate keys, invalid UTF-8, and control,
 *    zero-width and bidi characters in every field an approver or log reader
 *    sees (argv, env values, reason, session, host, id, cwd).
 *  - The replay-window check is NOT here (it is stateful): see cg_replay_*.
 *    A request refused at validation MUST NOT consume its id.
 *  - Unknown request fields are ignored.
 */
#ifndef CG_WIRE_H
#define CG_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "reply.h"

#define CG_WIRE_MAX_LINE    (1024 * 1024) /* bytes, newline included */
#define CG_WIRE_MAX_ID	    128
#define CG_WIRE_MAX_STAGES  64
#define CG_WIRE_MAX_ARGS    4096
#define CG_WIRE_MAX_ENV	    256
#define CG_WIRE_FRESHNESS_S 60
/* How far ahead of the daemon's clock a request may be dated (at most the
 * window): a request dated ahead moves the restart mark past its time, so
 * this bounds how long one request can lock callers out after a restart. */
#define CG_WIRE_AHEAD_S	      5
#define CG_WIRE_MAX_TIMEOUTMS (24LL * 3600 * 1000)

/* One argv or NAME=value string, its NUL excluded: the kernel's MAX_ARG_STRLEN
 * (32 pages of 4 KiB) less the NUL. execve answers E2BIG past it. */
#define CG_WIRE_MAX_ARG_STRLEN (32 * 4096 - 1)

#define CG_WIRE_MAX_TRACE_ID 64
#define CG_WIRE_LOG_LIMIT    200  /* log: events returned when no limit is given */
#define CG_WIRE_LOG_MAX	     5000 /* log: the most events one request may ask for */

/*
 * What a request asks for. VERDICT, REPLAY and LOG read evidence (a trace's
 * verdict, its replay, journal events); they decide nothing and run nothing.
 */
enum cg_action {
	CG_ACTION_EXEC,
	CG_ACTION_GATE,
	CG_ACTION_PING,
	CG_ACTION_GRANT,
	CG_ACTION_VERDICT,
	CG_ACTION_REPLAY,
	CG_ACTION_LOG,
};

/* Does action read evidence (verdict, replay, log) rather than decide? */
static inline bool cg_action_reads_evidence(enum cg_action a)
{
	return a == CG_ACTION_VERDICT || a == CG_ACTION_REPLAY || a == CG_ACTION_LOG;
}

struct cg_stage {
	size_t argc;
	char **argv; /* argc strings plus a NULL terminator; owned by the request */
};

struct cg_env_var {
	char *name;
	char *value;
};

/* A decoded, validated request. Free with cg_request_free(). */
struct cg_request {
	char *id;	/* given or a fresh UUIDv4 */
	bool id_given;	/* the client supplied the id */
	char *host;	/* "" default */
	char *session;	/* "" default */
	char *reason;	/* "" default */
	char *time_str; /* as sent */
	int64_t time_ns;
	size_t n_stages;
	struct cg_stage *stages;
	size_t n_env;
	struct cg_env_var *env;
	bool privileged;    /* default true */
	bool forward_agent; /* default false */
	enum cg_action action;
	int64_t timeout_ms; /* -1 when absent */
	char *cwd;	    /* NULL when absent */
	json_t *actions;    /* gate: validated array of abstract actions, or NULL */
	json_t *grant;	    /* grant: the grant asked for (a human opens it, or not), or NULL */
	json_t *raw;	    /* the parsed request object, for evidence */
	char *trace_id;	    /* verdict/replay (required), log (optional): a trace, or NULL */
	int64_t limit;	    /* log: the most recent events to return; 0 when absent */
	int64_t since_ns;   /* log: only events at or after this wall time; 0 when absent */
};

/* What validation needs to know that is not in the line itself. */
struct cg_wire_rules {
	int64_t now_ns;		      /* wall clock at receipt */
	int64_t freshness_s;	      /* window for stale/future time */
	const char *const *env_allow; /* names a request may set */
	size_t n_env_allow;
};

/*
 * Decode and validate one request. line/len exclude the newline;
 * had_newline says whether one ended the line (false -> LINE_NO_NEWLINE),
 * too_long says the transport gave up past CG_WIRE_MAX_LINE.
 * On success returns 0 and *out (caller frees with cg_request_free).
 * On refusal returns -1 and *err (an I reply; caller frees); *id_out is set
 * to the request's id when it could be read (malloc'd, caller frees) or NULL.
 */
int cg_wire_decode(const char *line, size_t len, bool had_newline, bool too_long,
		   const struct cg_wire_rules *rules, struct cg_request **out,
		   struct cg_reply **err, char **id_out) __attribute__((warn_unused_result));

void cg_request_free(struct cg_request *req);

/*
 * Refuse every request whose "time" is before wall_ns (TIME_BEFORE_START),
 * process-wide; 0 turns the check off (the default). The daemon sets its
 * start time, so request bytes captured before a restart cannot run again
 * after it: the replay window is memory only, and this needs no disk
 * write on the request path.
 */
void cg_wire_set_not_before(int64_t wall_ns);

/*
 * Called with a request's time when it is ahead of the clock, before the
 * request goes further: such a request would still be dated after a
 * restart, so whoever takes it marks the time where its successor reads
 * its not-before (the daemon: its lock file). 0, or -1 (errno) to refuse
 * the request (TIME_AHEAD_UNMARKED). NULL (the default): no mark.
 */
typedef int (*cg_wire_mark_fn)(int64_t wall_ns);
void cg_wire_set_mark_ahead(cg_wire_mark_fn fn);

/* Is this env name on the built-in dangerous list (LD_*, BASH_ENV, …)? why gets a reason. */
bool cg_wire_env_dangerous(const char *name, const char **why);

/* Per-stage outcome for the response. */
struct cg_stage_out {
	int exit_code; /* or 128+signal */
	const unsigned char *err;
	size_t err_len;
	bool err_truncated;
};

struct cg_response {
	const char *id; /* "" when unreadable */
	enum cg_status status;
	size_t n_stages; /* 0: no stages/stdout fields (refusals) */
	const struct cg_stage_out *stages;
	const unsigned char *out;
	size_t out_len;
	bool out_truncated;
	const struct cg_reply *reply; /* required */
	json_t *extra;		      /* optional top-level members to merge (borrowed) */
};

/*
 * Encode a response line (with trailing '\n'). Returns malloc'd bytes and
 * *len, or NULL on OOM. For status "error", the seed's top-level "message"
 * is the rendered reply message.
 */
char *cg_wire_encode_response(const struct cg_response *resp, size_t *len);

/*
 * The replay window: ids accepted within the last window_ns are refused.
 * Thread-compatible (the daemon uses it from the loop thread only).
 */
struct cg_replay;
struct cg_replay *cg_replay_new(int64_t window_ns);
/*
 * true if uid's id was seen within the window (and is thus refused). Ids
 * are per uid: another uid's same id is another id.
 */
bool cg_replay_seen(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns);
/*
 * Remember an accepted id, counted in uid's share. 0, or -1 (the caller
 * refuses the request) with errno ENOMEM, or ENOSPC when the window holds its
 * limit of ids, or uid holds its share (1/8 of it), and none has expired
 * (fail closed, for that uid only when it is the share).
 */
int cg_replay_remember(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns);
/*
 * Check and remember in one step, so two concurrent requests with one id
 * cannot both pass: 1 = seen within the window (refuse with ID_REPLAYED),
 * 0 = newly remembered, -1 = could not remember (errno as above; refuse).
 */
int cg_replay_claim(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns)
    __attribute__((warn_unused_result));
/*
 * Release an id claimed by a request that was then refused before it was
 * accepted (e.g. at resolution), so that the refusal does not consume it.
 */
void cg_replay_forget(struct cg_replay *rp, const char *id, uid_t uid);
/* Cap the number of ids held (default 1,000,000; at least 1). */
void cg_replay_set_limit(struct cg_replay *rp, size_t max_entries);
/* Ids currently held (expired ones may linger until the next call). */
size_t cg_replay_count(const struct cg_replay *rp);
void cg_replay_free(struct cg_replay *rp);

#endif
