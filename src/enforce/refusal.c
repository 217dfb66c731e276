/* SPDX-License-Identifier: MIT */
/*
 * refusal — the D replies of the enforcement layer (see refusal.h).
 *
 * MUST: answer every fold that did not permit with a D code; MUST NOT return
 * NULL (cg_reply_build never does).
 */
#include "refusal.h"

struct cg_reply *cg_en_refusal(const struct cg_folded *f, const char *exe)
{
	enum cg_reply_id why = f->reason;
	/* UNKNOWN waits for a human; with no approver configured it is a refusal. */
	if (f->decision == CG_UNKNOWN && why != CG_R_PRIVILEGED_NEEDS_APPROVAL)
		why = CG_R_NEEDS_HUMAN;
	/* Several people: a grant, which is one person's, never covers it. */
	if (why == CG_R_NEEDS_HUMAN && f->approvers > 1)
		return cg_reply_new(CG_R_NEEDS_PEOPLE, "{s:s,s:i}", "rule_id",
				    f->rule_id ? f->rule_id : "", "needed", (int)f->approvers);
	if (cg_reply_registry[why].type != CG_RTYPE_D)
		why = CG_R_DENIED_BY_RULE;
	const char *rule = f->rule_id ? f->rule_id : "";
	const char *reason = f->why ? f->why : cg_decision_name(f->decision);
	/* A rung that failed or said nothing is named in its message: {rung}. */
	if (why == CG_R_RUNG_FAILED || why == CG_R_RUNG_UNDECIDED)
		return cg_reply_build(why, "{s:s,s:s,s:s,s:s,s:s}", "rule_id", rule, "layer", "EN",
				      "why", reason, "exe", exe ? exe : "", "rung",
				      f->deciding_rung ? f->deciding_rung : "");
	return cg_reply_build(why, "{s:s,s:s,s:s,s:s}", "rule_id", rule, "layer", "EN", "why",
			      reason, "exe", exe ? exe : "");
}

struct cg_reply *cg_en_needs_human(const char *rule_id)
{
	return cg_reply_new(CG_R_NEEDS_HUMAN, "{s:s}", "rule_id", rule_id ? rule_id : "");
}

struct cg_reply *cg_en_queue_full(size_t limit)
{
	return cg_reply_new(CG_R_APPROVAL_QUEUE_FULL, "{s:I}", "limit", (json_int_t)limit);
}

struct cg_reply *cg_en_uid_share_full(uid_t uid, size_t limit)
{
	return cg_reply_new(CG_R_APPROVAL_UID_SHARE_FULL, "{s:I,s:I}", "uid", (json_int_t)uid,
			    "limit", (json_int_t)limit);
}

struct cg_reply *cg_en_policy_changed(int64_t generation, const char *rule_id)
{
	return cg_reply_new(CG_R_POLICY_CHANGED_WAITING, "{s:I,s:s}", "generation",
			    (json_int_t)generation, "rule_id", rule_id ? rule_id : "");
}

struct cg_reply *cg_en_approval_timeout(int64_t timeout_ms, size_t answered, int needed,
					const char *rule_id, const char *why)
{
	rule_id = rule_id ? rule_id : "";
	why = why && *why ? why : "no reason given";
	if (answered > 0 && needed > 1)
		return cg_reply_new(CG_R_APPROVAL_TIMEOUT_SHORT, "{s:I,s:i,s:i,s:s,s:s}",
				    "timeout_ms", (json_int_t)timeout_ms, "answered", (int)answered,
				    "needed", needed, "rule_id", rule_id, "why", why);
	return cg_reply_new(CG_R_APPROVAL_TIMEOUT, "{s:I,s:s,s:s}", "timeout_ms",
			    (json_int_t)timeout_ms, "rule_id", rule_id, "why", why);
}

struct cg_reply *cg_en_approval_denied(uid_t uid, const char *why)
{
	return cg_reply_new(CG_R_APPROVAL_DENIED, "{s:i,s:s}", "uid", (int)uid, "why",
			    why ? why : "no reason given");
}
