/* SPDX-License-Identifier: MIT */
/*
 * egress — the gate's HTTP proxy for a call whose network is a host list
 * (docs/egress.md). The call's stages run in network namespaces of their
 * own; each hands the proxy a listener made inside its namespace
 * (cg_netns_send_listener), and the proxy, outside, is the only way out:
 * CONNECT and plain HTTP forward, judged by name, by the address it
 * resolves itself, and by the TLS server name, one record per connection.
 *
 * Invariants:
 *  - Every decision is egress_rule's (EN); the proxy only carries it out. A
 *    refused connection never reaches the server: the name, the address and
 *    the TLS server name are judged before the proxy connects.
 *  - The proxy connects to exactly the address it judged (no second lookup).
 *  - It runs on threads of its own, never on the decide path; at most
 *    CG_EGRESS_MAX_CONNS connections at a time, each with deadlines.
 *  - cg_egress_stop ends every connection and returns one record each.
 */
#ifndef CG_EGRESS_H
#define CG_EGRESS_H

#include <jansson.h>

#include "confine.h"
#include "reply.h"

#define CG_EGRESS_MAX_CONNS 32
/*
 * Connections one call may make in all: past it each is refused unserved
 * and only counted (one summary record, EGRESS_CALL_CAP). One call's 20,000
 * refused CONNECTs had made a verdict too large to write and grown the
 * daemon by hundreds of MB (found by attack).
 */
#define CG_EGRESS_MAX_RECORDS 4096

/* The variables a stage with a host list gets, "NAME=value", NULL-ended. */
extern const char *const cg_egress_env[];

struct cg_egress;

/*
 * Start the proxy for a plan with host lists, or do nothing (0, *out NULL)
 * for one without. rule_id names the rule the records and refusals cite.
 * 0, or -1 with *err (an MCP reply): the call must not run.
 */
int cg_egress_start(struct cg_confine_plan *plan, const char *rule_id, struct cg_egress **out,
		    struct cg_reply **err) __attribute__((warn_unused_result));

/*
 * End every connection, stop, and return the records (a JSON array, new
 * reference, one object per connection; docs/egress.md). Safe on NULL
 * (returns NULL).
 */
json_t *cg_egress_stop(struct cg_egress *e);

#endif
