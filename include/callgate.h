/* SPDX-License-Identifier: MIT */
/*
 * callgate.h — the public API of libcallgate.
 *
 * libcallgate is the call gate: every tool call an agent makes passes through
 * cg_kernel_handle() (or cg_kernel_submit(), its asynchronous form), which
 * decodes the request, resolves it, decides it default-deny through the
 * adjudicator chain, runs it confined when allowed, and answers with exactly
 * one response line carrying a canonical reply (docs/protocol.md).
 *
 * The daemon callgated is a thin shell around this API; an agent harness in C
 * (or anything with a C FFI) can link it and adjudicate in-process.
 *
 * Conventions: functions return 0 on success and -1 on failure; anything that
 * decides or verifies is warn_unused_result; handles are opaque; the caller
 * frees what a function documents as "caller frees", with free() unless said.
 */
#ifndef CALLGATE_H
#define CALLGATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CALLGATE_VERSION	     "0.1.0"
#define CALLGATE_PROTOCOL	     1
#define CG_DEFAULT_SOCKET	     "/run/callgate/callgate.sock"
#define CG_DEFAULT_ADMIN_SOCKET_NAME "admin.sock"
#define CG_DEFAULT_STATE_DIR	     "/var/lib/callgate"

/* The caller, as the kernel reports it (SO_PEERCRED), never as it claims. */
struct cg_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool approver; /* a configured approver (the server says): reads every trace's evidence */
};

/*
 * One answered call, as the kernel hands it to cg_kernel_config.on_call: the
 * facts an operator's log needs, borrowed for the callback's duration only.
 * decision is ALLOW, BLOCK, UNKNOWN, ... (or the verdict's: ALLOW for a
 * success, BLOCK otherwise, when the call was refused before any rule ran);
 * rule_id is "" when no rule decided; host is the request's ("" is local, and
 * so is a request that could not be read); exit_code is the pipeline's (its
 * last stage's) when ran is true.
 */
struct cg_call_record {
	const char *trace_id;
	pid_t peer_pid;
	uid_t peer_uid;
	const char *host;
	const char *decision;
	const char *rule_id;
	char reply_type;	/* 'S', 'I', 'D' or 'E' */
	const char *reply_code; /* e.g. "EN-POL-D-001" */
	bool ran;
	int exit_code;
};

/*
 * Called once per answered agent call (not for admin requests), on whichever
 * thread answers it, just before the response line is handed to the caller.
 * It MUST NOT block for long or call back into the kernel.
 */
typedef void (*cg_call_log_fn)(void *arg, const struct cg_call_record *rec);

/* How to build a kernel. Zero-initialise, then set what you need. */
struct cg_kernel_config {
	const char *policy_file;	/* NULL: the embedded default policy */
	const char *state_dir;		/* evidence lives here; NULL: no evidence */
	const char *const *workspaces;	/* directories an agent may work in */
	size_t n_workspaces;		/* 0: the current directory */
	int64_t freshness_s;		/* request time window; 0: 60 s */
	const char *policy_pubkey_file; /* require policies signed by this key; NULL: don't */
	unsigned n_workers;		/* execution threads; 0: default */
	bool approval;			/* UNKNOWN waits for a human (admin socket); else refused */
	bool verify_journal;		/* start-up verifies the whole journal, not from the
					   last signed checkpoint */
	bool resign_journal;		/* sign a journal no checkpoint vouches for (after a
					   stop before the first one): refused otherwise */
	uint64_t disk_reserve;		/* bytes the evidence leaves free on its file system:
					   below it new calls are turned away (MCP-LOG-E-006) */
	unsigned disk_reserve_pct;	/* … or this percent of the file system; both 0: 5%,
					   at most 1 GiB */
	bool no_disk_reserve;		/* no reserve (--disk-reserve 0) */
	int64_t approval_timeout_ms;	/* 0: the policy's (default 60 s) */
	const char *const *own_paths;	/* the caller's own files every call's view hides */
	size_t n_own_paths;		/* (its sockets); state_dir is hidden anyway */
	cg_call_log_fn on_call;		/* one record per answered call; NULL: none */
	void *on_call_arg;		/* passed to on_call */
};

struct cg_kernel;

/*
 * A reply as the API hands it back: the canonical type and registry code
 * (docs/replies.md) and the rendered message. Branch on type and code, never
 * on the message. Plain storage: nothing to free.
 */
struct cg_result {
	char type;	    /* 'S' success, 'I' invalid, 'D' denied, 'E' error */
	char code[24];	    /* e.g. "MCP-CFG-E-001" */
	char message[1024]; /* for people; truncated to fit */
};

/*
 * Create a kernel: load the policy, register the adjudicators, open the
 * evidence journal. Returns 0 with *out (free with cg_kernel_free), or -1
 * and, if why is not NULL, the reply saying why (why is zeroed on success).
 */
int cg_kernel_new(const struct cg_kernel_config *cfg, struct cg_kernel **out, struct cg_result *why)
    __attribute__((warn_unused_result));

/*
 * Would cg_kernel_new take these workspaces (none: the current directory)?
 * 0, or -1 with *why: what a daemon checks before it makes any state.
 */
int cg_kernel_workspaces_check(const char *const *workspaces, size_t n, struct cg_result *why)
    __attribute__((warn_unused_result));

/*
 * Reload the policy from its file. A policy that fails to load leaves the
 * old generation in force; in-flight calls keep the generation they started
 * with. Returns 0 or -1; *result (if not NULL) is the reply either way
 * (S MCP-CFG-S-001 on success).
 */
int cg_kernel_reload(struct cg_kernel *k, struct cg_result *result)
    __attribute__((warn_unused_result));

/* SHA-256 (hex) of the policy bytes in force, and its generation number. */
void cg_kernel_policy_identity(struct cg_kernel *k, char sha256_hex[65], uint64_t *generation);

/*
 * Stop accepting work: pending and running calls are cancelled (children
 * killed) and answered; returns once all have answered. Then free.
 */
void cg_kernel_shutdown(struct cg_kernel *k);
void cg_kernel_free(struct cg_kernel *k);

/*
 * Handle one request line synchronously (blocks while the command runs).
 * line/len exclude the newline; had_newline tells whether one ended it.
 * Returns the response line including its '\n' (caller frees) and its
 * length in *resp_len. Never returns NULL except on allocation failure.
 */
char *cg_kernel_handle(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		       const struct cg_peer *peer, size_t *resp_len);

/*
 * Asynchronous form, for event loops. respond(cookie, line, len) is called
 * exactly once per submit, either before cg_kernel_submit returns or later
 * from a worker thread; line is malloc'd and ownership passes to respond.
 * If *job_out is set (non-NULL), the call is still running: the caller may
 * cg_job_cancel() it (e.g. the client disconnected) and MUST cg_job_release()
 * it after respond has been called or once it no longer cares.
 * An answer given before cg_kernel_submit returns (a refusal, ping, gate) is
 * handed to respond first and its evidence record queued right after, still
 * before cg_kernel_submit returns: a trace read (verdict, replay) submitted
 * after that return finds the record. A caller that submits from several
 * threads must not pass a trace id from respond to another thread's read
 * before the submit that answered it has returned.
 */
typedef void (*cg_respond_fn)(void *cookie, char *line, size_t len);
struct cg_job;
void cg_kernel_submit(struct cg_kernel *k, const char *line, size_t len, bool had_newline,
		      bool too_long, const struct cg_peer *peer, cg_respond_fn respond,
		      void *cookie, struct cg_job **job_out);
void cg_job_cancel(struct cg_job *job);
void cg_job_release(struct cg_job *job);

/*
 * Handle one line from the admin socket (the server has already checked that
 * the peer may use it): pending, approve, deny, grant_open, grant_list,
 * grant_close, reload, ping. respond is called exactly once, before this
 * returns. Approvals are bound to the SHA-256 of the exact request shown.
 */
void cg_kernel_admin(struct cg_kernel *k, const char *line, size_t len, const struct cg_peer *peer,
		     cg_respond_fn respond, void *cookie);

/*
 * The line for a transport refusal that happens before a request exists (a
 * read deadline, busy, a uid's connection cap, an admin peer refused),
 * recorded as a trace of its own: a request event naming the transport
 * step (which, e.g. "busy") and the peer's credentials, so that the peer
 * may read its verdict, and a seal with reply, which it consumes and gives
 * that trace id. Caller frees the line.
 */
struct cg_reply;
char *cg_kernel_transport_reply(struct cg_kernel *k, const char *which, const struct cg_peer *peer,
				struct cg_reply *reply, size_t *resp_len);

/*
 * Evidence work not yet done, in event-sized units (queued events, plus
 * waiting trace packages weighted as several events); 0 with evidence off.
 * The server holds new requests back while this is high (issue 14).
 */
size_t cg_kernel_evidence_pending(struct cg_kernel *k);

/*
 * Write 1 (a uint64_t) to the eventfd fd once the evidence work pending is
 * below level (at once if it already is; fd -1 cancels). With evidence off
 * nothing is pending and nothing is written. The server waits on it instead
 * of polling.
 */
void cg_kernel_evidence_wake_below(struct cg_kernel *k, size_t level, int fd);

#ifdef __cplusplus
}
#endif
#endif
