/* SPDX-License-Identifier: MIT */
/* src/evidence.c — placeholder; being written. */
#include "evidence.h"
const char *cg_event_name(enum cg_event_type t)
{
	return "?";
}
int cg_evidence_open(const struct cg_evidence_config *cfg, struct cg_evidence **out,
		     struct cg_reply **err)
{
	*err = cg_reply_new(CG_R_SYS_CRASH, NULL);
	return -1;
}
void cg_evidence_close(struct cg_evidence *ev)
{
}
int cg_evidence_append(struct cg_evidence *ev, const char *trace_id, enum cg_event_type type,
		       json_t *payload, bool durable)
{
	json_decref(payload);
	return -1;
}
int cg_evidence_seal(struct cg_evidence *ev, const char *trace_id, json_t *verdict)
{
	json_decref(verdict);
	return -1;
}
