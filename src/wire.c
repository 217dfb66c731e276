/* SPDX-License-Identifier: MIT */
/* src/wire.c — placeholder; being written. */
#include "wire.h"
#include <stdlib.h>
int cg_wire_decode(const char *line, size_t len, bool had_newline, bool too_long,
		   const struct cg_wire_rules *rules, struct cg_request **out,
		   struct cg_reply **err, char **id_out)
{
	*out = NULL;
	*id_out = NULL;
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
void cg_request_free(struct cg_request *req)
{
	free(req);
}
bool cg_wire_env_dangerous(const char *name, const char **why)
{
	*why = "unknown";
	return true;
}
char *cg_wire_encode_response(const struct cg_response *resp, size_t *len)
{
	return NULL;
}
struct cg_replay *cg_replay_new(int64_t window_ns)
{
	return NULL;
}
bool cg_replay_seen(struct cg_replay *rp, const char *id, int64_t now_ns)
{
	return true;
}
int cg_replay_remember(struct cg_replay *rp, const char *id, int64_t now_ns)
{
	return -1;
}
void cg_replay_free(struct cg_replay *rp)
{
}
