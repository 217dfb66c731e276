/* SPDX-License-Identifier: MIT */
/* src/policy.c — placeholder; being written. */
#include "policy.h"
int cg_policy_load_buffer(const char *source, const char *buf, size_t len, struct cg_policy **out,
			  struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
int cg_policy_load_file(const char *path, struct cg_policy **out, struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
int cg_policy_load_default(struct cg_policy **out, struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
struct cg_policy *cg_policy_ref(struct cg_policy *p)
{
	return p;
}
void cg_policy_unref(struct cg_policy *p)
{
}
const struct cg_policy_defaults *cg_policy_defaults(const struct cg_policy *p)
{
	return NULL;
}
const char *cg_policy_sha256(const struct cg_policy *p)
{
	return "";
}
const char *cg_policy_source(const struct cg_policy *p)
{
	return "";
}
int cg_policy_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	return -1;
}
int cg_privilege_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	return -1;
}
int cg_policy_register_rungs(struct cg_chain *c, struct cg_policy *p)
{
	return -1;
}
json_t *cg_policy_dump(const struct cg_policy *p)
{
	return NULL;
}
json_t *cg_policy_lint(const struct cg_policy *p)
{
	return NULL;
}
