/* SPDX-License-Identifier: MIT */
/*
 * approval — calls waiting for a human: the queue, the view an approver
 * sees, and the binding of an approval to exactly one request.
 *
 * An approval names the pending call by trace id AND the SHA-256 of its
 * canonical resolved view (what the approver was shown). A mismatch applies
 * nothing, so an approval for request A can never run request B. Approvals
 * come from distinct uids; a call runs once it has `needed` of them, and
 * leaves the queue then (so it is used once).
 *
 * Invariants:
 *  - The queue is a plain data structure, NOT thread-safe: the kernel's
 *    lock guards every call.
 *  - cg_approval_view MUST include everything that decides what runs
 *    (resolved executables, argv, env values, cwd, privileged, peer), so
 *    that the hash binds all of it.
 */
#ifndef CG_APPROVAL_H
#define CG_APPROVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "chain.h"
#include "world.h"

#define CG_APPROVAL_MAX_APPROVERS 16
/*
 * Calls one peer uid may have waiting for a person at once: one uid's 256
 * calls of 1 MiB had buried every other uid's behind them, unseen until they
 * timed out, and grown the daemon by 1 GB (s41b F2).
 */
#define CG_APPROVAL_UID_SHARE 16
#define CG_APPROVAL_QUEUE_MAX 1024

struct cg_pending {
	char trace_id[40];
	char request_sha256[65];
	json_t *view; /* what the approver sees (owned) */
	int64_t deadline_mono_ns;
	int64_t timeout_ms;
	int32_t needed; /* distinct approvers required */
	size_t n_approvals;
	uid_t approvers[CG_APPROVAL_MAX_APPROVERS];
	void *job; /* the waiting call (the kernel's) */
	uid_t uid; /* the peer's: its share of the queue (CG_APPROVAL_UID_SHARE) */
	struct cg_pending *next;
};

/* FIFO of pending calls; zero-initialise. */
struct cg_approvals {
	struct cg_pending *head, *tail;
	size_t n;
};

/*
 * The canonical view of a resolved call for the approver and the binding
 * hash: request id, session, host, time, reason, peer (uid/gid/pid and
 * executable), each stage's argv with resolved exe and symlink hop, env
 * values, cwd, privileged, constraints, and the rule that deferred it.
 * sha256_hex receives the SHA-256 of the view serialised compactly with
 * sorted keys. New reference, or NULL on OOM.
 */
json_t *cg_approval_view(const struct cg_call *call, const struct cg_folded *f,
			 const char *trace_id, const char *peer_exe, char sha256_hex[65]);

/* Append p; -1 when the queue holds CG_APPROVAL_QUEUE_MAX already. */
int cg_approvals_push(struct cg_approvals *q, struct cg_pending *p)
    __attribute__((warn_unused_result));
struct cg_pending *cg_approvals_find(struct cg_approvals *q, const char *trace_id);
/* Unlink p (which must be in q). */
void cg_approvals_remove(struct cg_approvals *q, struct cg_pending *p);
/* Earliest deadline, or INT64_MAX when empty. */
int64_t cg_approvals_next_deadline(const struct cg_approvals *q);

/* Has uid approved p already? */
bool cg_pending_has_approver(const struct cg_pending *p, uid_t uid);

/* The pending list for `callgate pending`: array of views with progress. */
json_t *cg_approvals_list(const struct cg_approvals *q, int64_t now_mono_ns);

void cg_pending_free(struct cg_pending *p);

/*
 * Make a string safe to show on a terminal: control characters, ESC
 * sequences, DEL, C1 controls, zero-width and bidi characters, and invalid
 * UTF-8 become visible escapes (\x1b, <U+202E>), so an agent cannot make
 * the approver see something other than what will run. Caller frees.
 */
char *cg_sanitize_for_terminal(const char *s);

#endif
