/* SPDX-License-Identifier: MIT */
/*
 * chain — the adjudicator chain and its fold (seed 003).
 *
 * Rungs register with a rank; cg_chain_decide walks them in rank order and
 * folds to the most restrictive verdict on ALLOW < DEGRADE < UNKNOWN < BLOCK.
 * Ties at BLOCK/UNKNOWN keep the earlier rung's rule; ties at ALLOW/DEGRADE
 * take the later, more specific one.
 *
 * MUST: an empty chain, a failing rung, an undecided rung -> BLOCK.
 * MUST NOT: allocate, lock or make syscalls in cg_chain_decide.
 */
#include "chain.h"

#include <stdio.h>
#include <string.h>

const char *const cg_exec_default[9] = { "/usr",   "/bin",    "/sbin", "/lib",	    "/lib32",
					 "/lib64", "/libx32", "/opt",  "/usr/local" };

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
		struct cg_verdict v = { .decision = CG_DECISION_NONE,
					.reason = CG_R_RUNG_UNDECIDED };
		int rc = r->decide(r->ctx, call, &v);

		/*
		 * A rung that errs or returns garbage must not be able to open the
		 * gate: its verdict becomes BLOCK with the chain's own reason.
		 */
		if (rc != 0) {
			v = (struct cg_verdict){ .decision = CG_BLOCK,
						 .rule_id = "rung-failed",
						 .reason = CG_R_RUNG_FAILED };
		} else if (!decision_valid(v.decision)) {
			v = (struct cg_verdict){ .decision = CG_BLOCK,
						 .rule_id = "rung-undecided",
						 .reason = CG_R_RUNG_UNDECIDED };
		} else if (v.n_constraints > CG_VERDICT_MAX_CONS) {
			v = (struct cg_verdict){ .decision = CG_BLOCK,
						 .rule_id = "rung-failed",
						 .reason = CG_R_RUNG_FAILED };
		}

		out->rungs[out->n_rungs].rung = r->name;
		out->rungs[out->n_rungs].rank = r->rank;
		out->rungs[out->n_rungs].rc = rc;
		out->rungs[out->n_rungs].v = v;
		out->n_rungs++;

		/*
		 * Constraints of every verdict that may lead to a run: ALLOW, DEGRADE,
		 * and UNKNOWN (a deferred call, once a human approves it, still runs
		 * under its rule's constraints). More sets only ever tighten.
		 */
		if (v.decision == CG_ALLOW || v.decision == CG_DEGRADE ||
		    v.decision == CG_UNKNOWN) {
			for (size_t k = 0; k < v.n_constraints; k++)
				if (v.constraints[k]) {
					out->stages[out->n_constraints] = v.stages[k];
					out->constraints[out->n_constraints++] = v.constraints[k];
				}
		}
		if (v.decision == CG_UNKNOWN && v.approvers > out->approvers)
			out->approvers = v.approvers;
		/*
		 * The most restrictive verdict names the rule. On a tie at BLOCK or
		 * UNKNOWN the first rung keeps it (the earliest reason to refuse); on
		 * a tie at ALLOW or DEGRADE the later, more specific rung names it
		 * (the policy rule that allowed, not the privilege rung's "not
		 * privileged").
		 */
		if ((int)v.decision > (int)folded ||
		    (v.decision == folded && v.decision <= CG_DEGRADE)) {
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

static json_t *str_array(const char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

json_t *cg_host_entries_json(const struct cg_host_entry *e, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		char buf[300];
		if (e[i].port)
			snprintf(buf, sizeof(buf), "%s:%u", e[i].name, (unsigned)e[i].port);
		else
			snprintf(buf, sizeof(buf), "%s", e[i].name);
		json_array_append_new(a, json_string(buf));
	}
	return a;
}

static const char *net_name(enum cg_net n)
{
	switch (n) {
	case CG_NET_NONE:
		return "none";
	case CG_NET_LOOPBACK:
		return "loopback";
	case CG_NET_TCP:
		return "tcp";
	case CG_NET_HOSTS:
		return "hosts";
	default:
		return "unset";
	}
}

json_t *cg_constraints_to_json(const struct cg_constraints *c)
{
	if (!c)
		return json_null();
	json_t *o = json_object();
	if (!o)
		return NULL;
	if (c->fs) {
		json_object_set_new(o, "read", str_array(c->read, c->n_read));
		json_object_set_new(o, "write", str_array(c->write, c->n_write));
		json_object_set_new(o, "exec", str_array(c->exec, c->n_exec));
	}
	if (c->n_hide)
		json_object_set_new(o, "hide", str_array(c->hide, c->n_hide));
	if (c->n_protect)
		json_object_set_new(o, "protect", str_array(c->protect, c->n_protect));
	if (c->n_scratch)
		json_object_set_new(o, "scratch", str_array(c->scratch, c->n_scratch));
	if (c->tmp != CG_TMP_UNSET)
		json_object_set_new(o, "tmp",
				    json_string(c->tmp == CG_TMP_SHARED ? "shared" : "private"));
	if (c->git_write)
		json_object_set_new(o, "git", json_string("write"));
	if (c->net != CG_NET_UNSET) {
		json_object_set_new(o, "net", json_string(net_name(c->net)));
		if (c->net == CG_NET_TCP) {
			json_t *ports = json_array();
			for (size_t i = 0; ports && i < c->n_ports; i++)
				json_array_append_new(ports, json_integer(c->ports[i]));
			json_object_set_new(o, "ports", ports);
		}
		if (c->net == CG_NET_HOSTS) {
			json_object_set_new(o, "allow_hosts",
					    cg_host_entries_json(c->allow_hosts, c->n_allow_hosts));
			json_object_set_new(o, "deny_hosts",
					    cg_host_entries_json(c->deny_hosts, c->n_deny_hosts));
			json_t *pins = json_object();
			for (size_t i = 0; pins && i < c->n_pins; i++)
				json_object_set_new(pins, c->pins[i].name,
						    json_string(c->pins[i].address));
			json_object_set_new(o, "resolve", pins);
		}
	}
	json_t *lim = json_object();
	const struct {
		const char *name;
		int64_t v;
	} limits[] = { { "cpu_s", c->limits.cpu_s },
		       { "as_bytes", c->limits.as_bytes },
		       { "nproc", c->limits.nproc },
		       { "fsize_bytes", c->limits.fsize_bytes },
		       { "nofile", c->limits.nofile } };
	for (size_t i = 0; lim && i < sizeof(limits) / sizeof(limits[0]); i++)
		if (limits[i].v != CG_LIMIT_UNSET)
			json_object_set_new(lim, limits[i].name, json_integer(limits[i].v));
	if (lim && json_object_size(lim) > 0)
		json_object_set_new(o, "limits", lim);
	else
		json_decref(lim);
	if (c->timeout_ms != CG_LIMIT_UNSET)
		json_object_set_new(o, "timeout_ms", json_integer(c->timeout_ms));
	if (c->best_effort)
		json_object_set_new(o, "best_effort", json_true());
	return o;
}

json_t *cg_folded_stage_sets(const struct cg_folded *f, size_t stage)
{
	json_t *bound = json_array();
	uint64_t bit = 1ULL << (stage < 63 ? stage : 63);
	for (size_t k = 0; bound && f && k < f->n_constraints; k++)
		if (f->stages[k] == 0 || (f->stages[k] & bit))
			json_array_append_new(bound, json_integer((json_int_t)k));
	return bound;
}

json_t *cg_folded_to_json(const struct cg_folded *f)
{
	json_t *o = json_object();
	json_t *rungs = json_array();
	json_t *cons = json_array();
	if (!o || !rungs || !cons) {
		json_decref(o);
		json_decref(rungs);
		json_decref(cons);
		return NULL;
	}
	for (size_t i = 0; i < f->n_rungs; i++) {
		const struct cg_verdict *v = &f->rungs[i].v;
		json_t *r = json_pack("{s:s,s:i,s:s,s:s?,s:s,s:s?}", "rung", f->rungs[i].rung,
				      "rank", f->rungs[i].rank, "decision",
				      cg_decision_name(v->decision), "rule_id", v->rule_id,
				      "reason", cg_reply_registry[v->reason].code, "why", v->why);
		if (r && f->rungs[i].rc != 0)
			json_object_set_new(r, "failed", json_true());
		json_array_append_new(rungs, r);
	}
	for (size_t i = 0; i < f->n_constraints; i++)
		json_array_append_new(cons, cg_constraints_to_json(f->constraints[i]));
	json_object_set_new(o, "decision", json_string(cg_decision_name(f->decision)));
	json_object_set_new(o, "rule_id", json_string(f->rule_id ? f->rule_id : ""));
	json_object_set_new(o, "reason", json_string(cg_reply_registry[f->reason].code));
	if (f->why)
		json_object_set_new(o, "why", json_string(f->why));
	json_object_set_new(o, "rung", json_string(f->deciding_rung ? f->deciding_rung : ""));
	if (f->decision == CG_UNKNOWN)
		json_object_set_new(o, "approvers", json_integer(f->approvers));
	json_object_set_new(o, "rungs", rungs);
	json_object_set_new(o, "constraints", cons);
	return o;
}
