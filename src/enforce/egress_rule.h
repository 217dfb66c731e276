/* SPDX-License-Identifier: MIT */
/*
 * egress_rule — the EN judgment of one outbound connection of a call whose
 * network is a host list (net: {allow, deny, resolve}; docs/egress.md).
 * Pure functions: the gate's proxy (src/egress/) asks, and passes the
 * answers on.
 *
 * Invariants:
 *  - Deny wins: a name on any deny list is refused whatever allows it; a
 *    deny entry without a port denies every port.
 *  - With several constraint sets (a pipeline, or a rule and a grant) a name
 *    MUST be on an allow list of every set that has one (intersection).
 *  - An address that is not public (loopback, private, link-local, CGNAT,
 *    cloud metadata, multicast, unspecified, or one of this host's own) is
 *    refused unless the policy names it: the literal address is on an allow
 *    list, or the name is pinned to it (resolve:, --resolve).
 */
#ifndef CG_EGRESS_RULE_H
#define CG_EGRESS_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chain.h"
#include "reply.h"

#define CG_HOST_NAME_MAX 253

/*
 * Parse "name", "name:port", "*.suffix[:port]", "1.2.3.4[:port]" or
 * "[v6][:port]" into a lower-case name (brackets removed) and a port (0 when
 * none is given). 0, or -1 with *why set to a static explanation.
 */
int cg_host_entry_parse(const char *text, char *name, size_t name_len, uint16_t *port,
			const char **why);

/* Is the name an IPv4 or IPv6 literal (without brackets)? */
bool cg_host_is_address(const char *name);

/*
 * The judgment of a name and port: NULL when every set allows it, else the
 * EN refusal (EGRESS_DENIED or EGRESS_NOT_LISTED) naming rule_id.
 */
struct cg_reply *cg_egress_judge_name(const struct cg_constraints *const *sets, size_t n,
				      const char *host, uint16_t port, const char *rule_id);

/*
 * The address a name is pinned to in any set, or NULL: what the proxy
 * resolves the name to. cg_egress_judge_address then refuses it when
 * another set pins the name elsewhere.
 */
const char *cg_egress_pin(const struct cg_constraints *const *sets, size_t n, const char *host);

/*
 * The judgment of the address a name resolved to: cls is the address's
 * class ("loopback", "private", …) or NULL for a public one. Every set with
 * a host list must let it be reached, as every one must allow the name:
 * EGRESS_PINNED_ELSEWHERE when one pins the name to another address;
 * EGRESS_ADDRESS when it has a class and some set names it neither by a pin
 * of this name nor by the literal on its allow list for this port (80 and
 * 443 when the entry gives none). NULL when it may be reached.
 */
struct cg_reply *cg_egress_judge_address(const struct cg_constraints *const *sets, size_t n,
					 const char *host, uint16_t port, const char *address,
					 const char *cls, const char *rule_id);

/* The other answers of the proxy, with the layer that owns them. */
struct cg_reply *cg_egress_mismatch(const char *host, uint16_t port, const char *what,
				    const char *other, const char *rule_id);
struct cg_reply *cg_egress_bad_request(const char *detail, const char *rule_id);
struct cg_reply *cg_egress_allowed(const char *host, uint16_t port, const char *address,
				   const char *rule_id);
/* count connections refused past the per-call total, limit. */
struct cg_reply *cg_egress_call_cap(size_t count, size_t limit, const char *rule_id);

#endif
