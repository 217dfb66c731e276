/* SPDX-License-Identifier: MIT */
/* Tests for grants (the CT contract system): validation, matching, uses, expiry. */
#include <criterion/criterion.h>
#include <string.h>

#include "grant.h"

#define NOW 1000000000000000000LL

static struct cg_reply *err;

static struct cg_grant *open_grant(const char *spec_json)
{
	json_error_t je;
	json_t *spec = json_loads(spec_json, 0, &je);
	cr_assert_not_null(spec, "%s", je.text);
	struct cg_grant *g = NULL;
	err = NULL;
	int rc = cg_grant_parse(spec, 0, NOW, &g, &err);
	json_decref(spec);
	return rc == 0 ? g : NULL;
}

static void refused(const char *spec_json)
{
	struct cg_grant *g = open_grant(spec_json);
	cr_assert_null(g, "accepted: %s", spec_json);
	cr_assert_not_null(err);
	cr_assert_str_eq(cg_reply_def_of(err)->code, "CT-OPEN-I-001", "%s", spec_json);
	cg_reply_free(err);
}

Test(grant, invalid_requests_get_ct_invalid_codes)
{
	refused("[]");
	refused("{\"pipeline\":[],\"uses\":1,\"ttl_s\":60}");
	refused("{\"pipeline\":[{\"exe\":\"apt\",\"argv\":[\"apt\"]}],\"uses\":1,\"ttl_s\":60}");
	refused(
	    "{\"pipeline\":[{\"exe\":\"/usr/bin/*\",\"argv\":[\"x\"]}],\"uses\":1,\"ttl_s\":60}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[]}],\"uses\":1,\"ttl_s\":60}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],\"ttl_s\":60}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/"
		"apt\",\"argv\":[\"apt\"]}],\"uses\":0,\"ttl_s\":60}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],\"uses\":1}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],\"uses\":1,"
		"\"ttl_s\":99999999}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],\"uses\":1,"
		"\"ttl_s\":60,\"paths\":[\"relative\"]}");
	refused("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],\"uses\":1,"
		"\"ttl_s\":60,\"forever\":true}");
}

static char *argv_install[] = { "apt", "install", "nginx", NULL };
static char *argv_remove[] = { "apt", "remove", "nginx", NULL };
static char *argv_cp[] = { "cp", "a.txt", "/ws/out/b.txt", NULL };
static char *argv_cp_out[] = { "cp", "a.txt", "/ws/../etc/passwd", NULL };

static void call_of(struct cg_call *call, struct cg_request *req, struct cg_stage *st,
		    struct cg_resolved_stage *rs, char **argv, size_t argc, char *exe,
		    char *session, uid_t uid)
{
	memset(req, 0, sizeof(*req));
	st->argc = argc;
	st->argv = argv;
	req->n_stages = 1;
	req->stages = st;
	req->session = session;
	rs->exe = exe;
	memset(call, 0, sizeof(*call));
	call->req = req;
	call->n_stages = 1;
	call->stages = rs;
	call->peer.uid = uid;
	call->cwd = "/ws";
}

Test(grant, matches_shape_session_uid_and_counts_uses)
{
	struct cg_grants gs = { 0 };
	struct cg_grant *g = open_grant(
	    "{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\",\"install\",\"*\"]}],"
	    "\"session\":\"proj-*\",\"uid\":1000,\"uses\":2,\"ttl_s\":60}");
	cr_assert_not_null(g);
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;

	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "proj-alpha", 1000);
	struct cg_grant *m = cg_grants_match(&gs, &call, NOW);
	cr_assert_eq(m, g);
	call_of(&call, &req, &st, &rs, argv_remove, 3, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "argv shape is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "other", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "session is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "proj-alpha", 1001);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "peer uid is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/local/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "executable is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 2, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "argument count is scoped");

	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_eq(cg_grant_use(&gs, cg_grants_match(&gs, &call, NOW)), 1);
	cr_assert_eq(cg_grant_use(&gs, cg_grants_match(&gs, &call, NOW)), 0);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "used up");
	cr_assert_eq(gs.n, 0);
}

Test(grant, expires)
{
	struct cg_grants gs = { 0 };
	struct cg_grant *g =
	    open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\",\"**\"]}],"
		       "\"uses\":5,\"ttl_s\":60}");
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "", 7);
	cr_assert_not_null(cg_grants_match(&gs, &call, NOW + 59LL * 1000000000LL));
	cr_assert_null(cg_grants_match(&gs, &call, NOW + 60LL * 1000000000LL));
	json_t *list = cg_grants_list(&gs, NOW + 61LL * 1000000000LL);
	cr_assert_eq(json_array_size(list), 0);
	json_decref(list);
}

Test(grant, paths_scope_path_like_arguments_lexically)
{
	struct cg_grants gs = { 0 };
	struct cg_grant *g =
	    open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/cp\",\"argv\":[\"cp\",\"**\"]}],"
		       "\"paths\":[\"/ws\"],\"uses\":5,\"ttl_s\":60}");
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	call_of(&call, &req, &st, &rs, argv_cp, 3, "/usr/bin/cp", "", 7);
	cr_assert_not_null(cg_grants_match(&gs, &call, NOW));
	call_of(&call, &req, &st, &rs, argv_cp_out, 3, "/usr/bin/cp", "", 7);
	cr_assert_null(cg_grants_match(&gs, &call, NOW), "'..' cannot climb out");
	cr_assert_eq(cg_grants_close(&gs, cg_grant_id(g)), 0);
	cr_assert_eq(cg_grants_close(&gs, "nope"), -1);
}
