/* SPDX-License-Identifier: MIT */
/* Tests for the adjudicator chain and its fold (seed 003). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "refusal.h"

static int say(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	const struct cg_verdict *v = ctx;
	*out = *v;
	return 0;
}

static int fail(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	out->decision = CG_ALLOW; /* a failing rung's verdict must be ignored */
	return -1;
}

static int silent(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	return 0; /* leaves the verdict undecided */
}

static struct cg_verdict v_allow = { .decision = CG_ALLOW, .rule_id = "a", .reason = CG_R_ALLOWED };
static struct cg_verdict v_degrade = { .decision = CG_DEGRADE,
				       .rule_id = "d",
				       .reason = CG_R_DEGRADED };
static struct cg_verdict v_unknown = {
	.decision = CG_UNKNOWN, .rule_id = "u", .reason = CG_R_NEEDS_HUMAN, .approvers = 2
};
static struct cg_verdict v_block = {
	.decision = CG_BLOCK, .rule_id = "b", .reason = CG_R_DENIED_BY_RULE, .why = "no"
};

Test(chain, empty_chain_blocks)
{
	struct cg_chain c = { 0 };
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_BLOCK);
	cr_assert_eq(f.reason, CG_R_CHAIN_EMPTY);
	cg_chain_decide(NULL, NULL, &f);
	cr_assert_eq(f.decision, CG_BLOCK);
}

Test(chain, fold_takes_the_most_restrictive_in_every_order)
{
	struct cg_verdict *all[] = { &v_allow, &v_degrade, &v_unknown, &v_block };
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++) {
			struct cg_chain c = { 0 };
			cr_assert_eq(cg_chain_register(&c, 1, "x", say, all[a]), 0);
			cr_assert_eq(cg_chain_register(&c, 2, "y", say, all[b]), 0);
			struct cg_folded f;
			cg_chain_decide(&c, NULL, &f);
			enum cg_decision want = all[a]->decision > all[b]->decision
						    ? all[a]->decision
						    : all[b]->decision;
			cr_assert_eq(f.decision, want, "%d,%d", a, b);
			cr_assert_eq(f.n_rungs, 2);
		}
}

Test(chain, failing_rung_blocks_even_if_it_said_allow)
{
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 1, "ok", say, &v_allow), 0);
	cr_assert_eq(cg_chain_register(&c, 2, "broken", fail, NULL), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_BLOCK);
	cr_assert_eq(f.reason, CG_R_RUNG_FAILED);
	cr_assert_str_eq(f.deciding_rung, "broken");
	cr_assert_neq(f.rungs[1].rc, 0);
}

/* The refusal names the rung that failed: its message has no placeholder left. */
Test(chain, a_failed_rung_is_named_in_the_refusal)
{
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 2, "broken", fail, NULL), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	struct cg_reply *r = cg_en_refusal(&f, "/usr/bin/x");
	char *msg = cg_reply_message(r);
	cr_assert_not_null(msg);
	cr_assert_not_null(strstr(msg, "'broken'"), "%s", msg);
	cr_assert_null(strchr(msg, '{'), "%s", msg);
	free(msg);
	cg_reply_free(r);
}

Test(chain, undecided_rung_blocks)
{
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 1, "ok", say, &v_allow), 0);
	cr_assert_eq(cg_chain_register(&c, 5, "mute", silent, NULL), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_BLOCK);
	cr_assert_eq(f.reason, CG_R_RUNG_UNDECIDED);
}

Test(chain, rungs_run_in_rank_order_and_ties_keep_the_first_rule)
{
	struct cg_verdict b2 = v_block;
	b2.rule_id = "b2";
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 30, "late", say, &b2), 0);
	cr_assert_eq(cg_chain_register(&c, 10, "early", say, &v_block), 0);
	cr_assert_eq(cg_chain_register(&c, 20, "mid", say, &v_allow), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_str_eq(f.rungs[0].rung, "early");
	cr_assert_str_eq(f.rungs[1].rung, "mid");
	cr_assert_str_eq(f.rungs[2].rung, "late");
	cr_assert_str_eq(f.rule_id, "b");
	cr_assert_str_eq(f.why, "no");
}

Test(chain, constraints_of_every_degrade_are_kept_for_intersection)
{
	static const char *const w1[] = { "/ws" };
	static const char *const w2[] = { "/ws/sub" };
	struct cg_constraints c1 = { .fs = true,
				     .n_write = 1,
				     .write = w1,
				     .limits = { CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
						 CG_LIMIT_UNSET, CG_LIMIT_UNSET },
				     .timeout_ms = CG_LIMIT_UNSET };
	struct cg_constraints c2 = c1;
	c2.write = w2;
	c2.net = CG_NET_NONE;
	struct cg_verdict d1 = { .decision = CG_DEGRADE,
				 .rule_id = "d1",
				 .reason = CG_R_DEGRADED,
				 .n_constraints = 1,
				 .constraints = { &c1 } };
	struct cg_verdict d2 = { .decision = CG_DEGRADE,
				 .rule_id = "d2",
				 .reason = CG_R_DEGRADED,
				 .n_constraints = 1,
				 .constraints = { &c2 } };
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 1, "g", say, &d1), 0);
	cr_assert_eq(cg_chain_register(&c, 2, "k", say, &d2), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_DEGRADE);
	cr_assert_eq(f.n_constraints, 2);
	cr_assert_eq(f.constraints[0], &c1);
	cr_assert_eq(f.constraints[1], &c2);
	json_t *j = cg_folded_to_json(&f);
	cr_assert_str_eq(json_string_value(json_object_get(j, "decision")), "DEGRADE");
	cr_assert_eq(json_array_size(json_object_get(j, "constraints")), 2);
	json_t *c2j = json_array_get(json_object_get(j, "constraints"), 1);
	cr_assert_str_eq(json_string_value(json_object_get(c2j, "net")), "none");
	json_decref(j);
}

Test(chain, unknown_carries_the_most_approvers)
{
	struct cg_verdict u1 = v_unknown;
	u1.approvers = 0;
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 1, "a", say, &u1), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_UNKNOWN);
	cr_assert_eq(f.approvers, 1, "UNKNOWN needs at least one human");
	cr_assert_eq(cg_chain_register(&c, 2, "b", say, &v_unknown), 0);
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.approvers, 2);
}

Test(chain, registry_is_bounded)
{
	struct cg_chain c = { 0 };
	for (int i = 0; i < CG_CHAIN_MAX_RUNGS; i++)
		cr_assert_eq(cg_chain_register(&c, i, "r", say, &v_allow), 0);
	cr_assert_eq(cg_chain_register(&c, 99, "overflow", say, &v_allow), -1);
	cr_assert_eq(cg_chain_register(&c, 1, "nofn", NULL, NULL), -1);
}

Test(chain, allow_ties_name_the_later_more_specific_rule)
{
	struct cg_verdict first = { .decision = CG_ALLOW,
				    .rule_id = "unprivileged",
				    .reason = CG_R_ALLOWED };
	struct cg_verdict second = { .decision = CG_ALLOW,
				     .rule_id = "read-only-tools",
				     .reason = CG_R_ALLOWED };
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 10, "privilege", say, &first), 0);
	cr_assert_eq(cg_chain_register(&c, 100, "policy", say, &second), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_ALLOW);
	cr_assert_str_eq(f.rule_id, "read-only-tools");
	cr_assert_str_eq(f.deciding_rung, "policy");
}

Test(chain, unknown_keeps_its_constraints_for_when_it_is_approved)
{
	static const char *const w[] = { "/ws" };
	struct cg_constraints cons = { .fs = true,
				       .n_write = 1,
				       .write = w,
				       .limits = { CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
						   CG_LIMIT_UNSET, CG_LIMIT_UNSET },
				       .timeout_ms = CG_LIMIT_UNSET };
	struct cg_verdict defer = { .decision = CG_UNKNOWN,
				    .rule_id = "two-person",
				    .reason = CG_R_NEEDS_HUMAN,
				    .approvers = 2,
				    .n_constraints = 1,
				    .constraints = { &cons } };
	struct cg_chain c = { 0 };
	cr_assert_eq(cg_chain_register(&c, 100, "policy", say, &defer), 0);
	struct cg_folded f;
	cg_chain_decide(&c, NULL, &f);
	cr_assert_eq(f.decision, CG_UNKNOWN);
	cr_assert_eq(f.n_constraints, 1);
	cr_assert_eq(f.constraints[0], &cons);
}

/* ---- egress: the address a name resolved to (egress_rule.h) --------------------- */

#include "egress_rule.h"
#include "reply.h"

/* The reply code of judging address for host:port under sets, or "" when allowed. */
static const char *judged(const struct cg_constraints *const *sets, size_t n, const char *host,
			  uint16_t port, const char *address, const char *cls)
{
	static char code[32];
	struct cg_reply *r = cg_egress_judge_address(sets, n, host, port, address, cls, "r");
	snprintf(code, sizeof(code), "%s", r ? cg_reply_def_of(r)->code : "");
	cg_reply_free(r);
	return code;
}

Test(egress, a_literal_names_its_address_only_on_its_port)
{
	const struct cg_host_entry allow[] = { { "*.x.test", 0 }, { "127.0.0.1", 9000 } };
	struct cg_constraints s = { .net = CG_NET_HOSTS, .allow_hosts = allow, .n_allow_hosts = 2 };
	const struct cg_constraints *sets[] = { &s };
	cr_assert_str_eq(judged(sets, 1, "lo.x.test", 9000, "127.0.0.1", "loopback"), "");
	cr_assert_str_eq(judged(sets, 1, "lo.x.test", 80, "127.0.0.1", "loopback"), "EN-NET-D-003");
	/* The same address in IPv4-mapped form is the same address. */
	cr_assert_str_eq(judged(sets, 1, "lo.x.test", 9000, "::ffff:127.0.0.1", "loopback"), "");
	/* A public address needs no naming. */
	cr_assert_str_eq(judged(sets, 1, "www.x.test", 443, "8.8.8.8", NULL), "");
}

Test(egress, every_set_must_name_an_address_of_a_class)
{
	const struct cg_host_entry allow[] = { { "*.x.test", 0 } };
	const struct cg_host_pin pin[] = { { "pinned.x.test", "127.0.0.1" } };
	struct cg_constraints a = { .net = CG_NET_HOSTS,
				    .allow_hosts = allow,
				    .n_allow_hosts = 1,
				    .pins = pin,
				    .n_pins = 1 };
	struct cg_constraints b = { .net = CG_NET_HOSTS, .allow_hosts = allow, .n_allow_hosts = 1 };
	const struct cg_constraints *one[] = { &a }, *both[] = { &a, &b }, *rev[] = { &b, &a };
	cr_assert_str_eq(judged(one, 1, "pinned.x.test", 80, "127.0.0.1", "loopback"), "");
	/* Stage a's pin does not name loopback for stage b's program. */
	cr_assert_str_eq(judged(both, 2, "pinned.x.test", 80, "127.0.0.1", "loopback"),
			 "EN-NET-D-003");
	cr_assert_str_eq(judged(rev, 2, "pinned.x.test", 80, "127.0.0.1", "loopback"),
			 "EN-NET-D-003");
	/* A pin names its address for its own name only. */
	cr_assert_str_eq(judged(one, 1, "other.x.test", 80, "127.0.0.1", "loopback"),
			 "EN-NET-D-003");
}

Test(egress, a_set_pinning_the_name_elsewhere_refuses)
{
	const struct cg_host_entry allow[] = { { "*.x.test", 0 } };
	const struct cg_host_pin p1[] = { { "api.x.test", "93.184.216.34" } };
	const struct cg_host_pin p2[] = { { "api.x.test", "198.51.100.7" } };
	struct cg_constraints a = { .net = CG_NET_HOSTS,
				    .allow_hosts = allow,
				    .n_allow_hosts = 1,
				    .pins = p1,
				    .n_pins = 1 };
	struct cg_constraints b = { .net = CG_NET_HOSTS,
				    .allow_hosts = allow,
				    .n_allow_hosts = 1,
				    .pins = p2,
				    .n_pins = 1 };
	const struct cg_constraints *both[] = { &a, &b };
	cr_assert_str_eq(judged(both, 2, "api.x.test", 443, "93.184.216.34", NULL), "EN-NET-D-006");
}
