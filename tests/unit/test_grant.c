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
/* An attack (s34): a tar grant scoped to the workspace read /etc/shadow as root. */
static char *argv_tar_eq[] = { "tar", "--directory=/etc", "-cf", "-", "shadow", NULL };
static char *argv_tar_attached[] = { "tar", "-C/etc", "-cf", "-", "shadow", NULL };
static char *argv_tar_bare[] = { "tar", "-cf", "-", "shadow", NULL };
static char *argv_tar_in[] = { "tar", "-C/ws/sub", "--file=/ws/out.tar", "-c", "notes", NULL };
/* A second attack (s34b): values with no '/', and paths inside a word. */
static char *argv_tar_up[] = { "tar", "-C..", "-C..", "-cO", "etc/shadow", NULL };
static char *argv_dd[] = { "dd", "if=/etc/shadow", NULL };
static char *argv_file_url[] = { "curl", "file:///etc/shadow", NULL };
static char *argv_host_path[] = { "scp", "host:/etc/shadow", NULL };
static char *argv_https[] = { "curl", "-o/ws/page", "https://example.org/a", NULL };
static char *argv_cat_up[] = { "cat", "/ws/../etc/shadow", NULL };
/* A third attack (s34c): bundles, a file URL with a host, a scheme cat reads as a path. */
static char *argv_tar_bundle[] = { "tar", "-cvf", "-", "-vC/etc", "shadow", NULL };
static char *argv_curl_bundle[] = { "curl", "-so/etc/x", "file:///ws/readme", NULL };
static char *argv_curl_eq[] = { "curl", "-s", "-o/etc/x=y", "file:///ws/readme", NULL };
static char *argv_file_host[] = { "curl", "-s", "file://localhost/etc/shadow", NULL };
static char *argv_cat_scheme[] = { "cat", "a://../../../../etc/shadow", NULL };
static char *argv_tar_stdin[] = { "tar", "-cf", "-", "notes", NULL };
static char *argv_cat_in[] = { "cat", "/ws/notes", NULL };

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
	memset(rs, 0, sizeof(*rs));
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
	struct cg_grant *m = cg_grants_match(&gs, &call, NULL, NOW);
	cr_assert_eq(m, g);
	call_of(&call, &req, &st, &rs, argv_remove, 3, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "argv shape is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "other", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "session is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "proj-alpha", 1001);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "peer uid is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/local/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "executable is scoped");
	call_of(&call, &req, &st, &rs, argv_install, 2, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "argument count is scoped");

	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "proj-alpha", 1000);
	cr_assert_eq(cg_grant_use(&gs, cg_grants_match(&gs, &call, NULL, NOW)), 1);
	cr_assert_eq(cg_grant_use(&gs, cg_grants_match(&gs, &call, NULL, NOW)), 0);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "used up");
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
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW + 59LL * 1000000000LL));
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW + 60LL * 1000000000LL));
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
	call.cwd = "/ws";
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW));
	call.cwd = "/etc";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW),
		       "a cwd outside: a.txt is /etc/a.txt");
	call_of(&call, &req, &st, &rs, argv_cp_out, 3, "/usr/bin/cp", "", 7);
	call.cwd = "/ws";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "'..' cannot climb out");
	cr_assert_eq(cg_grants_close(&gs, cg_grant_id(g)), 0);
	g = open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/tar\",\"argv\":[\"tar\",\"**\"]}],"
		       "\"paths\":[\"/ws\"],\"uses\":9,\"ttl_s\":60}");
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	call_of(&call, &req, &st, &rs, argv_tar_eq, 5, "/usr/bin/tar", "", 7);
	call.cwd = "/ws";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "an option's value after '='");
	call_of(&call, &req, &st, &rs, argv_tar_attached, 5, "/usr/bin/tar", "", 7);
	call.cwd = "/ws";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "a short option's attached value");
	call_of(&call, &req, &st, &rs, argv_tar_bare, 4, "/usr/bin/tar", "", 7);
	call.cwd = "/etc";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "a bare word from a cwd outside");
	call.cwd = "/ws";
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "the same inside (control)");
	call_of(&call, &req, &st, &rs, argv_tar_in, 5, "/usr/bin/tar", "", 7);
	call.cwd = "/ws";
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "values inside (control)");
	call_of(&call, &req, &st, &rs, argv_tar_up, 5, "/usr/bin/tar", "", 7);
	call.cwd = "/ws";
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "an attached value with no '/'");
	struct {
		char **argv;
		size_t argc;
		char *exe;
		bool covered;
	} words[] = { { argv_dd, 2, "/usr/bin/dd", false },
		      { argv_file_url, 2, "/usr/bin/curl", false },
		      { argv_host_path, 2, "/usr/bin/scp", false },
		      { argv_https, 3, "/usr/bin/curl", true },
		      { argv_tar_bundle, 5, "/usr/bin/tar", false },
		      { argv_curl_bundle, 3, "/usr/bin/curl", false },
		      { argv_curl_eq, 4, "/usr/bin/curl", false },
		      { argv_file_host, 3, "/usr/bin/curl", false },
		      { argv_cat_scheme, 2, "/usr/bin/cat", false },
		      { argv_tar_stdin, 4, "/usr/bin/tar", true } };
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		char spec[256];
		snprintf(spec, sizeof(spec),
			 "{\"pipeline\":[{\"exe\":\"%s\",\"argv\":[\"%s\",\"**\"]}],"
			 "\"paths\":[\"/ws\"],\"uses\":9,\"ttl_s\":60}",
			 words[i].exe, words[i].argv[0]);
		struct cg_grant *w = open_grant(spec);
		cr_assert_eq(cg_grants_add(&gs, w), 0);
		call_of(&call, &req, &st, &rs, words[i].argv, words[i].argc, words[i].exe, "", 7);
		call.cwd = "/ws";
		cr_assert_eq(cg_grants_match(&gs, &call, NULL, NOW) != NULL, words[i].covered,
			     "%s %s", words[i].argv[0], words[i].argv[1]);
	}
	cr_assert_eq(cg_grants_close(&gs, "nope"), -1);
}

/* A wildcard never matches a word with a ".." component (attack, s34b); a literal one does. */
Test(grant, wildcards_do_not_climb_out)
{
	struct cg_grants gs = { 0 };
	cr_assert_eq(cg_grants_add(&gs, open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/cat\","
						   "\"argv\":[\"cat\",\"/ws/*\"]}],"
						   "\"uses\":9,\"ttl_s\":60}")),
		     0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	call_of(&call, &req, &st, &rs, argv_cat_in, 2, "/usr/bin/cat", "", 7);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "control: a file in /ws");
	call_of(&call, &req, &st, &rs, argv_cat_up, 2, "/usr/bin/cat", "", 7);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "'/ws/*' is not /ws/../etc/shadow");
	cr_assert_eq(cg_grants_add(&gs, open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/cat\","
						   "\"argv\":[\"cat\",\"/ws/../etc/shadow\"]}],"
						   "\"uses\":9,\"ttl_s\":60}")),
		     0);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "a literal names its word");
}

/*
 * A wildcard is not an option word: apt install '*' took -oDPkg::Pre-Invoke::=CMD,
 * which runs CMD as root (attack, s36). A pattern that starts with '-' may.
 */
static char *argv_apt_opt[] = { "apt", "install", "-oDPkg::Pre-Invoke::=id", NULL };
static char *argv_apt_dash[] = { "apt", "install", "-", NULL };

Test(grant, wildcards_do_not_take_option_words)
{
	struct cg_grants gs = { 0 };
	cr_assert_eq(cg_grants_add(&gs, open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\","
						   "\"argv\":[\"apt\",\"install\",\"*\"]}],"
						   "\"uses\":9,\"ttl_s\":60}")),
		     0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "", 7);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "control: a package name");
	call_of(&call, &req, &st, &rs, argv_apt_opt, 3, "/usr/bin/apt", "", 7);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "'*' is not -oDPkg::...");
	call_of(&call, &req, &st, &rs, argv_apt_dash, 3, "/usr/bin/apt", "", 7);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "'*' is not '-'");
	cr_assert_eq(cg_grants_add(&gs, open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\","
						   "\"argv\":[\"apt\",\"install\",\"-o*\"]}],"
						   "\"uses\":9,\"ttl_s\":60}")),
		     0);
	call_of(&call, &req, &st, &rs, argv_apt_opt, 3, "/usr/bin/apt", "", 7);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "'-o*' says options");
}

/* env as an object binds the values too (the approver's g: "this exact call"; attack, s34c). */
Test(grant, env_values_bind_when_given)
{
	struct cg_grants gs = { 0 };
	cr_assert_eq(cg_grants_add(&gs, open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\","
						   "\"argv\":[\"apt\",\"**\"]}],"
						   "\"env\":{\"TZ\":\"UTC\"},"
						   "\"uses\":9,\"ttl_s\":60}")),
		     0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	struct cg_env_var utc = { .name = "TZ", .value = "UTC" };
	struct cg_env_var other = { .name = "TZ", .value = "/etc/shadow" };
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "", 7);
	req.env = &utc;
	req.n_env = 1;
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "the control: the same value");
	req.env = &other;
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "another value is not covered");
	struct cg_grant *names = open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\","
					    "\"argv\":[\"apt\",\"**\"]}],\"env\":[\"TZ\"],"
					    "\"uses\":9,\"ttl_s\":60}");
	cr_assert_eq(cg_grants_add(&gs, names), 0);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "names alone: any value");
	json_t *listed = cg_grant_to_json(names);
	cr_assert(json_is_array(json_object_get(listed, "env")));
	json_decref(listed);
}

/* Issue 12, item 2: everything that changes what runs binds; any difference is no match. */
Test(grant, privilege_env_cwd_host_and_constraints_bind)
{
	struct cg_grants gs = { 0 };
	struct cg_grant *g =
	    open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\",\"**\"]}],"
		       "\"env\":[\"LANG\"],\"cwd\":\"/ws\",\"host\":\"box\","
		       "\"constraints\":[{\"net\":\"none\"}],\"uses\":100,\"ttl_s\":60}");
	cr_assert_not_null(g);
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	struct cg_env_var lang = { .name = "LANG", .value = "C" };
	struct cg_env_var two[2] = { { .name = "LANG", .value = "C" },
				     { .name = "PAGER", .value = "cat" } };
	json_t *cons = json_loads("[{\"net\":\"none\"}]", 0, NULL);
	json_t *other = json_loads("[{\"net\":\"host\"}]", 0, NULL);

	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "", 1000);
	req.host = "box";
	req.env = &lang;
	req.n_env = 1;
	cr_assert_not_null(cg_grants_match(&gs, &call, cons, NOW), "the control matches");

	req.privileged = true;
	cr_assert_null(cg_grants_match(&gs, &call, cons, NOW), "privileged is bound");
	req.privileged = false;
	req.n_env = 0;
	cr_assert_null(cg_grants_match(&gs, &call, cons, NOW), "a missing env name differs");
	req.env = two;
	req.n_env = 2;
	cr_assert_null(cg_grants_match(&gs, &call, cons, NOW), "an extra env name differs");
	req.env = &lang;
	req.n_env = 1;
	call.cwd = "/ws/sub";
	cr_assert_null(cg_grants_match(&gs, &call, cons, NOW), "cwd is bound");
	call.cwd = "/ws";
	req.host = "other";
	cr_assert_null(cg_grants_match(&gs, &call, cons, NOW), "host is bound");
	req.host = "box";
	cr_assert_null(cg_grants_match(&gs, &call, other, NOW), "constraints are bound");
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "no constraints differ too");
	cr_assert_not_null(cg_grants_match(&gs, &call, cons, NOW), "and the control still does");
	json_decref(cons);
	json_decref(other);
	cg_grants_clear(&gs);
}

Test(grant, unprivileged_by_default_and_escaped_metacharacters_are_literal)
{
	struct cg_grants gs = { 0 };
	/* What the approver's `g` sends for a literal-star argument (items/STAR). */
	struct cg_grant *g =
	    open_grant("{\"pipeline\":[{\"exe\":\"/usr/bin/curl\",\"argv\":"
		       "[\"curl\",\"/api/v1/items/\\\\*\"]}],\"uses\":5,\"ttl_s\":60}");
	cr_assert_not_null(g);
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	char *literal[] = { "curl", "/api/v1/items/*", NULL };
	char *other[] = { "curl", "/api/v1/items/delete-all", NULL };
	call_of(&call, &req, &st, &rs, literal, 2, "/usr/bin/curl", "", 0);
	cr_assert_not_null(cg_grants_match(&gs, &call, NULL, NOW), "the literal star matches");
	req.privileged = true;
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "no privileged: false by default");
	req.privileged = false;
	call_of(&call, &req, &st, &rs, other, 2, "/usr/bin/curl", "", 0);
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "an escaped star is no glob");
	cg_grants_clear(&gs);
}

Test(grant, binding_fields_are_validated)
{
	const char *base = "{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],"
			   "\"uses\":1,\"ttl_s\":60,";
	const char *bad[] = { "\"privileged\":1}", "\"env\":[\"A=B\"]}", "\"env\":[\"A\",\"A\"]}",
			      "\"cwd\":\"rel\"}",  "\"host\":7}",	 "\"constraints\":{}}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char spec[512];
		snprintf(spec, sizeof(spec), "%s%s", base, bad[i]);
		refused(spec);
	}
}

/* A grant's timeout_ms bounds the deadline its calls run under (as decided), inclusive. */
Test(grant, timeout_bounds_the_calls_deadline)
{
	struct cg_grants gs = { 0 };
	struct cg_grant *g = open_grant(
	    "{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\",\"install\",\"*\"]}],"
	    "\"timeout_ms\":5000,\"uses\":9,\"ttl_s\":60}");
	cr_assert_not_null(g);
	cr_assert_eq(cg_grants_add(&gs, g), 0);
	struct cg_call call;
	struct cg_request req;
	struct cg_stage st;
	struct cg_resolved_stage rs;
	call_of(&call, &req, &st, &rs, argv_install, 3, "/usr/bin/apt", "s", 1000);
	call.timeout_ms = 5000;
	cr_assert_eq(cg_grants_match(&gs, &call, NULL, NOW), g);
	call.timeout_ms = 30;
	cr_assert_eq(cg_grants_match(&gs, &call, NULL, NOW), g);
	call.timeout_ms = 5001;
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "a longer deadline");
	call.timeout_ms = 0;
	cr_assert_null(cg_grants_match(&gs, &call, NULL, NOW), "a deadline not decided");
	json_t *j = cg_grant_to_json(g);
	cr_assert_eq(json_integer_value(json_object_get(j, "timeout_ms")), 5000);
	json_decref(j);
	cg_grants_clear(&gs);
	const char *bad[] = { "0", "-1", "1.5", "\"5000\"", "604800001" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char spec[256];
		snprintf(spec, sizeof(spec),
			 "{\"pipeline\":[{\"exe\":\"/usr/bin/apt\",\"argv\":[\"apt\"]}],"
			 "\"timeout_ms\":%s,\"uses\":1,\"ttl_s\":60}",
			 bad[i]);
		refused(spec);
	}
}
