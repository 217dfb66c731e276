/* SPDX-License-Identifier: MIT */
/*
 * grant_admin — the CT replies about grants (see grant_admin.h).
 *
 * MUST: build every grant reply from the store's own state under the
 * caller's lock; MUST NOT open a grant for an agent's request (only a human
 * approval does, through cg_grants_open).
 */
#include "grant_admin.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cg_reply *cg_grants_open(struct cg_grants *gs, json_t *spec, uid_t opener,
				int64_t now_wall_ns, char grant_id[40])
{
	struct cg_grant *g = NULL;
	struct cg_reply *r = NULL;
	grant_id[0] = '\0';
	if (cg_grant_parse(spec, opener, now_wall_ns, &g, &r) != 0)
		return r;
	json_t *gj = cg_grant_to_json(g);
	char id[40];
	snprintf(id, sizeof(id), "%s", cg_grant_id(g));
	if (!gj || cg_grants_add(gs, g) != 0) { /* add frees g when full */
		if (!gj)
			cg_grant_free(g);
		json_decref(gj);
		return cg_reply_new(CG_R_GRANT_STORE_FULL, "{s:I}", "limit", (json_int_t)gs->n);
	}
	json_t *st = json_array_get(json_object_get(gj, "pipeline"), 0);
	r = cg_reply_new(CG_R_GRANT_OPENED, "{s:s,s:s,s:O,s:O}", "grant_id", id, "exe",
			 json_string_value(json_object_get(st, "exe")), "uses",
			 json_object_get(gj, "uses_left"), "expires",
			 json_object_get(gj, "expires"));
	cg_reply_set_data(r, gj);
	memcpy(grant_id, id, sizeof(id));
	return r;
}

struct cg_reply *cg_grants_list_reply(struct cg_grants *gs, int64_t now_wall_ns)
{
	json_t *list = cg_grants_list(gs, now_wall_ns);
	struct cg_reply *r =
	    cg_reply_new(CG_R_GRANT_LIST, "{s:I}", "count", (json_int_t)json_array_size(list));
	cg_reply_set_data(r, json_pack("{s:o?}", "grants", list));
	return r;
}

struct cg_reply *cg_grants_close_reply(struct cg_grants *gs, const char *id)
{
	if (cg_grants_close(gs, id) == 0)
		return cg_reply_new(CG_R_GRANT_CLOSED, "{s:s}", "grant_id", id);
	return cg_reply_new(CG_R_GRANT_NOT_FOUND, "{s:s}", "grant_id", id);
}

int cg_grant_request_check(json_t *spec, uid_t peer_uid, int64_t now_wall_ns, struct cg_reply **err)
{
	json_t *uid = json_object_get(spec, "uid");
	if (uid && (!json_is_integer(uid) || json_integer_value(uid) != (json_int_t)peer_uid)) {
		*err = cg_reply_new(CG_R_GRANT_FOR_OTHER_UID, "{s:i}", "uid", (int)peer_uid);
		return -1;
	}
	if (!uid)
		json_object_set_new(spec, "uid", json_integer(peer_uid));
	/*
	 * Each stage's program resolved now, for the approver to see and the
	 * grant to open for (s43b F1: a link shown as /ws/tool, pointing at
	 * echo on screen, was re-pointed at dash before the yes, and the grant
	 * opened for dash). What the agent wrote stays beside it, as_sent.
	 */
	size_t i;
	json_t *st;
	json_array_foreach(json_object_get(spec, "pipeline"), i, st)
	{
		const char *e = json_string_value(json_object_get(st, "exe"));
		char real[PATH_MAX];
		(void)json_object_del(st, "as_sent");
		if (e && e[0] == '/' && realpath(e, real) && strcmp(real, e) != 0) {
			json_object_set_new(st, "as_sent", json_string(e));
			json_object_set_new(st, "exe", json_string(real));
		}
	}
	struct cg_grant *probe = NULL;
	if (cg_grant_parse(spec, peer_uid, now_wall_ns, &probe, err) != 0)
		return -1;
	cg_grant_free(probe);
	return 0;
}

struct cg_reply *cg_grant_request_unchanged(const json_t *spec)
{
	size_t i;
	const json_t *st;
	json_array_foreach(json_object_get(spec, "pipeline"), i, st)
	{
		const char *e = json_string_value(json_object_get(st, "exe"));
		char real[PATH_MAX];
		if (e && (!realpath(e, real) || strcmp(real, e) != 0)) {
			char detail[PATH_MAX + 256];
			(void)snprintf(detail, sizeof(detail),
				       "stage %zu's program %s is not the file the approver was "
				       "shown any more (it is a link now, or gone); nothing was "
				       "opened: ask again",
				       i + 1, e);
			return cg_reply_new(CG_R_GRANT_REQUEST_INVALID, "{s:s}", "detail", detail);
		}
	}
	return NULL;
}
