/* SPDX-License-Identifier: MIT */
/*
 * gate — the one decide path: decode → admit → defaults → resolve → decide.
 *
 * Every caller that wants to know what callgate would do with a request line
 * goes through cg_gate_decide(): the daemon's dispatch, `callgate policy
 * explain` and `policy test`, and the benchmarks. It runs the real modules in
 * the daemon's order, so no caller can skip a step (the policy's
 * defaults.cwd, its freshness window, its env allow-list) and drift from the
 * others.
 *
 * Invariants:
 *  - The steps MUST run in this order and only here: wire decode (with the
 *    policy's rules), the caller's admit hook, the policy's defaults
 *    (defaults.cwd for a request that names no cwd), world resolution, the
 *    generation's chain, and the pipeline's deadline from the fold.
 *  - It MUST NOT execute anything, write evidence or block on a lock: what
 *    a caller records, it records from the result.
 *  - A refusal before the chain is the I or E reply of the step that
 *    refused; a fold that does not permit carries the EN refusal built from
 *    it (cg_en_refusal), so every caller shows the same reply.
 */
#ifndef CG_GATE_H
#define CG_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "callgate.h"
#include "chain.h"
#include "policy.h"
#include "reply.h"
#include "wire.h"
#include "world.h"

/* What deciding needs that outlives one request; all borrowed. */
struct cg_gate_ctx {
	const struct cg_policy *policy; /* defaults: env allow-list, freshness, cwd, timeouts */
	const struct cg_chain *chain;	/* the generation's rungs (cg_policy_register_rungs) */
	const struct cg_world *world;	/* workspaces and the controlled PATH */
	int64_t freshness_s;		/* when the policy sets none; 0: the protocol's */
};

/*
 * The caller's step between decode and resolution (the daemon records the
 * request and claims its id in the replay window there). Return 0 to go on,
 * or -1 with *refusal (stolen) to stop the gate.
 */
typedef int (*cg_gate_admit_fn)(void *arg, const struct cg_request *req, int64_t now_ns,
				struct cg_reply **refusal);

/* How far a request got. */
enum cg_gate_step {
	CG_GATE_DECODE,	 /* refused by the wire codec */
	CG_GATE_ADMIT,	 /* refused by the admit hook */
	CG_GATE_ACTION,	 /* decoded and admitted, but not a call (ping, grant): not resolved */
	CG_GATE_RESOLVE, /* refused by defaults or the world adapter */
	CG_GATE_DECIDED, /* the chain folded it: folded is valid */
};

/* One request through the gate. Zero-initialise; release with cg_gate_fini. */
struct cg_gate {
	enum cg_gate_step step;
	int64_t now_ns;		  /* the wall clock the request was judged at */
	struct cg_request *req;	  /* the decoded request (owned), NULL when decode refused */
	char *id;		  /* decode refused: the line's id when readable (owned), or NULL */
	bool resolved;		  /* call is valid (and owned) */
	struct cg_call call;	  /* the resolved call; call.req points at req */
	struct cg_folded folded;  /* step CG_GATE_DECIDED; points into policy memory */
	int64_t timeout_ms;	  /* step CG_GATE_DECIDED: the pipeline's deadline if it runs */
	int64_t timeout_cap_ms;	  /* ...and the most a request could have asked for */
	struct cg_reply *refusal; /* why it does not run (owned), or NULL: see the invariants */
};

/*
 * Take line (len bytes, without its newline) through the gate as peer, at
 * the current wall clock. admit may be NULL. Fills *out in every case; returns 0 when the request was decided or is a ping/grant action,
 * -1 when a step before the chain refused it, or when a privileged call
 * the chain did not block names a program others can change
 * (cg_world_root_only); out->refusal says why.
 * The caller releases *out with cg_gate_fini.
 */
int cg_gate_decide(const struct cg_gate_ctx *ctx, const char *line, size_t len, bool had_newline,
		   bool too_long, const struct cg_peer *peer, cg_gate_admit_fn admit,
		   void *admit_arg, struct cg_gate *out) __attribute__((warn_unused_result));

/* Free what the gate holds and zero it. Safe on a zeroed struct. */
void cg_gate_fini(struct cg_gate *g);

/*
 * How long a decided pipeline may run. A rule's constraint timeout_ms is that
 * call's deadline (the tightest of them when several sets apply); the request
 * may ask for less, never more; and the policy's max_timeout_ms caps
 * everything. Without a constraint, the request's or the policy's default.
 * *cap (when not NULL): the most the request could have asked for.
 */
int64_t cg_gate_timeout(const struct cg_policy *p, const struct cg_request *req,
			const struct cg_folded *f, int64_t *cap);

#endif
