/* SPDX-License-Identifier: MIT */
/*
 * grant — the contract system (CT): scoped, expiring, counted grants that
 * let a call the policy defers (UNKNOWN) run without a prompt each time.
 *
 * A grant scopes: the pipeline shape (each stage's exact resolved
 * executable and an argv pattern: one fnmatch glob per position, a final
 * "**" matching any remaining arguments), the session (glob), the peer uid,
 * paths that path-like arguments must stay within, a number of uses and an
 * expiry. It is opened only from the admin side; an agent can only ask.
 *
 * Invariants:
 *  - A grant MUST only ever turn UNKNOWN into a run; BLOCK is never
 *    overridden (the kernel consults grants only for UNKNOWN).
 *  - Every use MUST decrement the count under the kernel's lock, and an
 *    expired or used-up grant MUST NOT match.
 *  - The store is NOT thread-safe; the kernel's lock guards it.
 */
#ifndef CG_GRANT_H
#define CG_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "reply.h"
#include "world.h"

#define CG_GRANT_MAX	   1024
#define CG_GRANT_MAX_USES  100000
#define CG_GRANT_MAX_TTL_S (7 * 24 * 3600)

struct cg_grant;

struct cg_grants {
	struct cg_grant *head;
	size_t n;
};

/*
 * Validate and build a grant from its JSON spec:
 *   {"pipeline":[{"exe":"/usr/bin/apt","argv":["apt","install","*"]}],
 *    "session":"glob", "uid":1000, "paths":["/abs/dir"], "uses":N, "ttl_s":S,
 *    "privileged":false, "env":["NAME"], "cwd":"/abs", "host":"h",
 *    "constraints":[...]}
 * privileged (default false) and env (default []) always bind: the call must
 * be exactly as privileged and set exactly those env names. uid, session,
 * paths, cwd, host and constraints are optional (absent: any); the approver's
 * `g` always sets them all. On error returns -1 and a CT-OPEN-I reply naming
 * the problem.
 */
int cg_grant_parse(json_t *spec, uid_t opened_by, int64_t now_wall_ns, struct cg_grant **out,
		   struct cg_reply **err) __attribute__((warn_unused_result));

/* Free a grant that is in no store. Safe on NULL. */
void cg_grant_free(struct cg_grant *g);

/* Add g to the store (taking ownership). -1 when full (g is freed). */
int cg_grants_add(struct cg_grants *gs, struct cg_grant *g) __attribute__((warn_unused_result));

/*
 * The first live grant covering call, or NULL. Drops expired/used-up grants.
 * constraints is the call's folded constraints as the approval view shows
 * them (its "constraints" member; NULL: none). A grant covers a call only
 * when every stage's exact resolved executable and argv pattern match, and
 * privileged, forward_agent, the set of env names (and values, where given),
 * and (where the grant names them) cwd, host, constraints, session, uid and
 * paths are equal or within, and the call's decided deadline
 * (call->timeout_ms) is at most the grant's timeout_ms.
 */
struct cg_grant *cg_grants_match(struct cg_grants *gs, const struct cg_call *call,
				 const json_t *constraints, int64_t now_wall_ns)
    __attribute__((warn_unused_result));

/* Consume one use; the grant is closed when none remain. Returns the uses left. */
int64_t cg_grant_use(struct cg_grants *gs, struct cg_grant *g);

const char *cg_grant_id(const struct cg_grant *g);
json_t *cg_grant_to_json(const struct cg_grant *g);
json_t *cg_grants_list(struct cg_grants *gs, int64_t now_wall_ns);

/* Close by id. 0, or -1 when no such grant. */
int cg_grants_close(struct cg_grants *gs, const char *id);

void cg_grants_clear(struct cg_grants *gs);

#endif
