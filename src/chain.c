/* SPDX-License-Identifier: MIT */
/*
 * chain — the adjudicator chain and its fold (seed 003).
 *
 * Rungs register with a rank; cg_chain_decide walks them in rank order and
 * folds to the most restrictive verdict on ALLOW < DEGRADE < UNKNOWN < BLOCK.
 * Ties keep the earlier rung's verdict, so the deciding rule is stable.
 *
 * MUST: an empty chain, a failing rung, an undecided rung -> BLOCK.
 * MUST NOT: allocate, lock or make syscalls in cg_chain_decide.
 */
#include "chain.h"

#include <string.h>

const char *cg_decision_name(enum cg_decision d)
{
	switch (d) {
	case CG_ALLOW:
		return "ALLOW";
	case CG_DEGRADE:
		return "DEGRADE";
	case CG_UNKNOWN:
		return "UNKNOWN";
	case CG_BLOCK:
		return "BLOCK";
	default:
		return "NONE";
	}
}

int cg_chain_register(struct cg_chain *c, int rank, const char *name, cg_rung_fn fn, void *ctx)
{
	if (!c || !fn || !name || c->n >= CG_CHAIN_MAX_RUNGS)
		return -1;
	/* Insertion keeps the registry sorted by rank; equal ranks keep registration order. */
	size_t i = c->n;
	while (i > 0 && c->rungs[i - 1].rank > rank) {
		c->rungs[i] = c->rungs[i - 1];
		i--;
	}
	c->rungs[i] = (struct cg_rung){ .rank = rank, .name = name, .decide = fn, .ctx = ctx };
	c->n++;
	return 0;
}

static bool decision_valid(enum cg_decision d)
{
	return d == CG_ALLOW || d == CG_DEGRADE || d == CG_UNKNOWN || d == CG_BLOCK;
}

void cg_chain_decide(const struct cg_chain *c, const struct cg_call *call, struct cg_folded *out)
{
	memset(out, 0, sizeof(*out));
	out->decision = CG_BLOCK;
	out->rule_id = "chain-empty";
	out->reason = CG_R_CHAIN_EMPTY;
	out->deciding_rung = "chain";
	if (!c || c->n == 0)
		return; /* fail closed: nothing registered permits nothing */

	enum cg_decision folded = CG_DECISION_NONE;
	for (size_t i = 0; i < c->n; i++) {
		const struct cg_rung *r = &c->rungs[i];
		struct cg_verdict v = { .decision = CG_DECISION_NONE, .reason = CG_R_RUNG_UNDECIDED };
		int rc = r->decide(r->ctx, call, &v);

		/*
		 * A rung that errs or returns garbage must not be able to open the
		 * gate: its verdict becomes BLOCK with the chain's own reason.
		 */
		if (rc != 0) {
			v = (struct cg_verdict){ .decision = CG_BLOCK, .rule_id = "rung-failed",
						 .reason = CG_R_RUNG_FAILED };
		} else if (!decision_valid(v.decision)) {
			v = (struct cg_verdict){ .decision = CG_BLOCK, .rule_id = "rung-undecided",
						 .reason = CG_R_RUNG_UNDECIDED };
		} else if (v.n_constraints > CG_VERDICT_MAX_CONS) {
			v = (struct cg_verdict){ .decision = CG_BLOCK, .rule_id = "rung-failed",
						 .reason = CG_R_RUNG_FAILED };
		}

		out->rungs[out->n_rungs].rung = r->name;
		out->rungs[out->n_rungs].rank = r->rank;
		out->rungs[out->n_rungs].rc = rc;
		out->rungs[out->n_rungs].v = v;
		out->n_rungs++;

		if (v.decision == CG_ALLOW || v.decision == CG_DEGRADE) {
			for (size_t k = 0; k < v.n_constraints; k++)
				if (v.constraints[k])
					out->constraints[out->n_constraints++] = v.constraints[k];
		}
		if (v.decision == CG_UNKNOWN && v.approvers > out->approvers)
			out->approvers = v.approvers;
		if ((int)v.decision > (int)folded) {
			folded = v.decision;
			out->rule_id = v.rule_id ? v.rule_id : r->name;
			out->reason = v.reason;
			out->why = v.why;
			out->deciding_rung = r->name;
		}
	}
	out->decision = folded;
	if (out->decision == CG_UNKNOWN && out->approvers < 1)
		out->approvers = 1;
}
