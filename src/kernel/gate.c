/* SPDX-License-Identifier: MIT */
/*
 * gate — decode → admit → defaults → resolve → decide, once (see gate.h).
 *
 * MUST: apply the policy's defaults (freshness, env allow-list, cwd,
 * timeouts) for every caller alike; MUST NOT execute, record or lock.
 */
#include "gate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refusal.h"
#include "util.h"

/* The wire rules a request is validated with: the policy's, else the caller's. */
static struct cg_wire_rules wire_rules(const struct cg_gate_ctx *ctx, int64_t now_ns)
{
	const struct cg_policy_defaults *d = cg_policy_defaults(ctx->policy);
	int64_t fresh = d->freshness_s > 0     ? d->freshness_s
			: ctx->freshness_s > 0 ? ctx->freshness_s
					       : CG_WIRE_FRESHNESS_S;
	return (struct cg_wire_rules){ .now_ns = now_ns,
				       .freshness_s = fresh,
				       .env_allow = d->env_allow,
				       .n_env_allow = d->n_env_allow };
}

/*
 * The policy's defaults.cwd, when the request names no cwd: "${workspace}"
 * (optionally followed by /sub/dir) is the first configured workspace. The
 * world adapter then checks it like any requested cwd (inside a workspace).
 */
static int apply_default_cwd(const struct cg_gate_ctx *ctx, struct cg_request *req,
			     struct cg_reply **err)
{
	const char *d = cg_policy_defaults(ctx->policy)->default_cwd;
	if (req->cwd || !d || !*d)
		return 0;
	static const char token[] = "${workspace}";
	const struct cg_world *w = ctx->world;
	const char *ws = w->n_workspaces ? w->workspaces[0] : "/";
	bool tok = strncmp(d, token, sizeof(token) - 1) == 0;
	const char *rest = tok ? d + sizeof(token) - 1 : d;
	size_t len = (tok ? strlen(ws) : 0) + strlen(rest) + 1;
	char *cwd = malloc(len);
	if (!cwd) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "applying defaults.cwd");
		return -1;
	}
	snprintf(cwd, len, "%s%s", tok ? ws : "", rest);
	req->cwd = cwd; /* owned by the request from here, freed with it */
	return 0;
}

int64_t cg_gate_timeout(const struct cg_policy *p, const struct cg_request *req,
			const struct cg_folded *f, int64_t *cap_out)
{
	const struct cg_policy_defaults *d = cg_policy_defaults(p);
	int64_t cap = d->max_timeout_ms, rule = CG_LIMIT_UNSET;
	for (size_t i = 0; i < f->n_constraints; i++) {
		int64_t c = f->constraints[i]->timeout_ms;
		if (c != CG_LIMIT_UNSET && c > 0 && (rule == CG_LIMIT_UNSET || c < rule))
			rule = c;
	}
	if (rule != CG_LIMIT_UNSET && rule < cap)
		cap = rule;
	int64_t t = req->timeout_ms > 0	     ? req->timeout_ms
		    : rule != CG_LIMIT_UNSET ? rule
					     : d->timeout_ms;
	if (cap_out)
		*cap_out = cap;
	return t < cap ? t : cap;
}

int cg_gate_decide(const struct cg_gate_ctx *ctx, const char *line, size_t len, bool had_newline,
		   bool too_long, const struct cg_peer *peer, cg_gate_admit_fn admit,
		   void *admit_arg, struct cg_gate *out)
{
	memset(out, 0, sizeof(*out));
	out->now_ns = cg_now_wall_ns();
	struct cg_wire_rules rules = wire_rules(ctx, out->now_ns);

	out->step = CG_GATE_DECODE;
	if (cg_wire_decode(line, len, had_newline, too_long, &rules, &out->req, &out->refusal,
			   &out->id) != 0)
		return -1;
	out->step = CG_GATE_ADMIT;
	if (admit && admit(admit_arg, out->req, out->now_ns, &out->refusal) != 0)
		return -1;
	out->step = CG_GATE_ACTION;
	if (out->req->action == CG_ACTION_PING || out->req->action == CG_ACTION_GRANT ||
	    cg_action_reads_evidence(out->req->action))
		return 0;

	out->step = CG_GATE_RESOLVE;
	if (apply_default_cwd(ctx, out->req, &out->refusal) != 0 ||
	    cg_world_resolve(ctx->world, out->req, peer, &out->call, &out->refusal) != 0)
		return -1;
	out->resolved = true;

	out->step = CG_GATE_DECIDED;
	cg_chain_decide(ctx->chain, &out->call, &out->folded);
	const struct cg_folded *f = &out->folded;
	/* Runs as root, or waits for a person to say so: its bytes must be root's alone. */
	if (out->req->privileged && f->decision != CG_BLOCK &&
	    cg_world_root_only(ctx->world, &out->call, &out->refusal) != 0)
		return -1;
	/* An UNKNOWN call may still run, approved by a human or under a grant. */
	out->timeout_ms = cg_gate_timeout(ctx->policy, out->req, f, &out->timeout_cap_ms);
	out->call.timeout_ms = out->timeout_ms; /* shown to an approver, bound by grants */
	if (f->decision != CG_ALLOW && f->decision != CG_DEGRADE)
		out->refusal = cg_en_refusal(f, out->call.n_stages ? out->call.stages[0].exe : "");
	return 0;
}

void cg_gate_fini(struct cg_gate *g)
{
	if (g->resolved)
		cg_call_fini(&g->call);
	cg_request_free(g->req);
	cg_reply_free(g->refusal);
	free(g->id);
	memset(g, 0, sizeof(*g));
}
