/* SPDX-License-Identifier: MIT */
/* src/world.c — placeholder; being written. */
#include "world.h"
int cg_world_init(struct cg_world *w, const char *const *workspaces, size_t n,
		  struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
void cg_world_fini(struct cg_world *w)
{
}
int cg_world_resolve(const struct cg_world *w, const struct cg_request *req,
		     const struct cg_peer *peer, struct cg_call *call, struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
void cg_call_fini(struct cg_call *call)
{
}
char **cg_world_envp(const struct cg_world *w, const struct cg_request *req, uid_t run_uid,
		     struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return NULL;
}
void cg_envp_free(char **envp)
{
}
