/* SPDX-License-Identifier: MIT */
/* src/exec.c — placeholder; being written. */
#include "exec.h"
int cg_exec_run(const struct cg_exec_spec *spec, struct cg_exec_result *res, struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
void cg_exec_result_fini(struct cg_exec_result *res)
{
}
