/* SPDX-License-Identifier: MIT */
/*
 * refusal — the enforcement layer's answers to a call that does not run:
 * the denial built from a folded decision, and the approval queue's
 * outcomes (needs a human, queue full, no answer in time, denied).
 *
 * Every D reply the gate gives is built here, in EN, so that the kernel
 * above speaks only for the infrastructure (MCP) and the compiler checks it
 * (src/meson.build gives src/kernel layer MCP only).
 *
 * Invariants:
 *  - A refusal MUST be a D reply: a fold whose reason is not a D code
 *    (a failed rung, a default deny) is answered DENIED_BY_RULE, never
 *    passed through as something an agent would retry.
 *  - An UNKNOWN fold without an approver is a refusal (NEEDS_HUMAN, or
 *    PRIVILEGED_NEEDS_APPROVAL when that is why), never a pass.
 *  - Every function returns a reply (the static out-of-memory reply at
 *    worst), never NULL; the caller frees it with cg_reply_free().
 */
#ifndef CG_REFUSAL_H
#define CG_REFUSAL_H

#include <stdint.h>
#include <sys/types.h>

#include "chain.h"
#include "reply.h"

/*
 * The refusal for a fold that did not permit (BLOCK or UNKNOWN): its D code,
 * with rule_id, layer "EN", why and exe (the first stage's resolved
 * executable, or "") as params, and rung (the deciding rung) when a rung
 * failed or said nothing. Caller frees.
 */
struct cg_reply *cg_en_refusal(const struct cg_folded *f, const char *exe);

/* NEEDS_HUMAN for rule_id, when no approver can be asked. Caller frees. */
struct cg_reply *cg_en_needs_human(const char *rule_id);

/* APPROVAL_QUEUE_FULL: limit calls are waiting already. Caller frees. */
struct cg_reply *cg_en_queue_full(size_t limit);

/* APPROVAL_UID_SHARE_FULL: uid has limit calls waiting already. Caller frees. */
struct cg_reply *cg_en_uid_share_full(uid_t uid, size_t limit);

/*
 * APPROVAL_TIMEOUT: no answer within timeout_ms; APPROVAL_TIMEOUT_SHORT when
 * some of the needed distinct approvers (answered of needed) did. Both name
 * the rule that sent the call to a person, and its why. Caller frees.
 */
struct cg_reply *cg_en_approval_timeout(int64_t timeout_ms, size_t answered, int needed,
					const char *rule_id, const char *why);

/*
 * POLICY_CHANGED_WAITING: policy generation `generation` decides a waiting
 * call otherwise (rule rule_id) than what the approver was shown. Caller frees.
 */
struct cg_reply *cg_en_policy_changed(int64_t generation, const char *rule_id);

/* APPROVAL_DENIED by uid, with why (NULL: "no reason given"). Caller frees. */
struct cg_reply *cg_en_approval_denied(uid_t uid, const char *why);

#endif
