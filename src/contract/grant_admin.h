/* SPDX-License-Identifier: MIT */
/*
 * grant_admin — the contract system's answers about grants: opening one
 * (from the admin side), listing, closing, and checking an agent's request
 * for one. Each returns the CT reply the caller passes on, so grant codes
 * are built only in src/contract.
 *
 * Invariants:
 *  - The store is NOT thread-safe: the caller holds the lock that guards it
 *    (the kernel's) around every call here.
 *  - An agent MUST only ask for a grant for its own uid; a request naming
 *    another uid is refused (GRANT_FOR_OTHER_UID) before any human sees it.
 *  - Replies are never NULL; the caller frees them with cg_reply_free().
 */
#ifndef CG_GRANT_ADMIN_H
#define CG_GRANT_ADMIN_H

#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "grant.h"
#include "reply.h"

/*
 * Validate spec (borrowed) and store it as a grant opened by `opener` at
 * now_wall_ns. Returns GRANT_OPENED with the grant as its data and its id
 * in grant_id, or the refusal (CT-OPEN-I naming the problem, or
 * GRANT_STORE_FULL) with grant_id "". Caller frees the reply.
 */
struct cg_reply *cg_grants_open(struct cg_grants *gs, json_t *spec, uid_t opener,
				int64_t now_wall_ns, char grant_id[40]);

/* GRANT_LIST with {"grants": [...]} as data. Caller frees. */
struct cg_reply *cg_grants_list_reply(struct cg_grants *gs, int64_t now_wall_ns);

/* Close grant id: GRANT_CLOSED, or GRANT_NOT_FOUND. Caller frees. */
struct cg_reply *cg_grants_close_reply(struct cg_grants *gs, const char *id);

/*
 * Check an agent's grant request spec (borrowed, completed in place: a
 * missing uid becomes peer_uid, and each stage's exe the program it
 * resolves to now, with the path as written kept as its as_sent) without
 * opening anything: the grant is
 * built again when a human approves it. 0, or -1 with *err (caller frees).
 */
int cg_grant_request_check(json_t *spec, uid_t peer_uid, int64_t now_wall_ns, struct cg_reply **err)
    __attribute__((warn_unused_result));

/*
 * At the approver's yes: is every stage's program (resolved when the request
 * was checked) still that file, reached through no link? NULL, or the
 * GRANT_REQUEST_INVALID to answer the agent with (caller frees).
 */
struct cg_reply *cg_grant_request_unchanged(const json_t *spec);

#endif
