/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the world adapter: exe resolution through the controlled
 * PATH to canonical paths, cwd containment in workspaces, and the exact
 * command environment.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reply.h"
#include "world.h"

static char tmp[256]; /* canonical temp dir; workspace is tmp/ws */
static char ws[300];
static struct cg_world world;

static void path_in(char *out, size_t len, const char *rel)
{
	int n = snprintf(out, len, "%s/%s", tmp, rel);
	cr_assert(n > 0 && (size_t)n < len);
}

static void setup(void)
{
	char t[] = "/tmp/cg-world-XXXXXX";
	cr_assert_not_null(mkdtemp(t));
	char *canon = realpath(t, NULL);
	cr_assert_not_null(canon);
	snprintf(tmp, sizeof(tmp), "%s", canon);
	free(canon);
	path_in(ws, sizeof(ws), "ws");
	cr_assert_eq(mkdir(ws, 0755), 0);

	char p[512];
	path_in(p, sizeof(p), "ws/sub");
	cr_assert_eq(mkdir(p, 0755), 0);
	path_in(p, sizeof(p), "ws/escape");
	cr_assert_eq(symlink("/etc", p), 0);
	path_in(p, sizeof(p), "ws/inner");
	cr_assert_eq(symlink("sub", p), 0);
	path_in(p, sizeof(p), "ws2");
	cr_assert_eq(mkdir(p, 0755), 0);
	path_in(p, sizeof(p), "rm");
	cr_assert_eq(symlink("/usr/bin/rm", p), 0);
	path_in(p, sizeof(p), "plain");
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs("#!/bin/sh\n", f);
	fclose(f);
	cr_assert_eq(chmod(p, 0644), 0);
	path_in(p, sizeof(p), "loop");
	cr_assert_eq(symlink("loop", p), 0);

	const char *wss[] = { ws };
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_init(&world, wss, 1, &err), 0);
}

static void teardown(void)
{
	cg_world_fini(&world);
	char p[512];
	const char *rels[] = {
		"ws/escape", "ws/inner", "ws/sub", "ws", "ws2", "rm", "plain", "loop"
	};
	for (size_t i = 0; i < sizeof(rels) / sizeof(rels[0]); i++) {
		path_in(p, sizeof(p), rels[i]);
		(void)remove(p);
	}
	(void)rmdir(tmp);
}

TestSuite(world, .init = setup, .fini = teardown);

/* A request with stages given as NULL-terminated argv lists. */
struct req_builder {
	struct cg_request req;
	struct cg_stage stages[4];
};

static void build(struct req_builder *b, char *cwd, char **const *argvs, size_t n)
{
	memset(b, 0, sizeof(*b));
	for (size_t i = 0; i < n; i++) {
		size_t argc = 0;
		while (argvs[i][argc])
			argc++;
		b->stages[i] = (struct cg_stage){ .argc = argc, .argv = argvs[i] };
	}
	b->req.n_stages = n;
	b->req.stages = b->stages;
	b->req.cwd = cwd;
	b->req.timeout_ms = -1;
}

static const char *key_of(const struct cg_reply *r)
{
	return cg_reply_def_of(r)->key;
}

static const char *param_s(const struct cg_reply *r, const char *name)
{
	json_t *v = json_object_get(r->params, name);
	cr_assert(json_is_string(v), "param %s missing", name);
	return json_string_value(v);
}

/* Resolve one stage; returns 0 and fills call, or the reply in *err. */
static int resolve1(char *arg0, char *cwd, struct cg_call *call, struct cg_reply **err)
{
	char *argv[] = { arg0, "x", NULL };
	char **argvs[] = { argv };
	static struct req_builder b;
	build(&b, cwd, argvs, 1);
	struct cg_peer peer = { .pid = 1, .uid = 0, .gid = 0 };
	*err = NULL;
	return cg_world_resolve(&world, &b.req, &peer, call, err);
}

static void expect_reply(char *arg0, char *cwd, const char *key)
{
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1(arg0, cwd, &call, &err), -1, "%s resolved", arg0);
	cr_assert_not_null(err);
	cr_assert_str_eq(key_of(err), key, "%s: got %s", arg0, key_of(err));
	cr_assert_neq(cg_reply_def_of(err)->type, CG_RTYPE_D, "WA never denies");
	cg_reply_free(err);
}

Test(world, dotdot_path_is_canonical)
{
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("/bin/../bin/rm", NULL, &call, &err), 0);
	cr_assert_str_eq(call.stages[0].exe, "/usr/bin/rm");
	cr_assert_str_eq(call.stages[0].found, "/bin/../bin/rm");
	cr_assert(call.stages[0].via_symlink);
	cr_assert_str_eq(call.stages[0].base, "rm");
	cg_call_fini(&call);
}

Test(world, symlink_resolves_to_target)
{
	char p[512];
	path_in(p, sizeof(p), "rm");
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1(p, NULL, &call, &err), 0);
	cr_assert_str_eq(call.stages[0].exe, "/usr/bin/rm");
	cr_assert_str_eq(call.stages[0].found, p);
	cr_assert(call.stages[0].via_symlink);
	cr_assert_str_eq(call.stages[0].base, "rm");
	cg_call_fini(&call);
}

Test(world, bare_name_uses_controlled_path_not_callers)
{
	/* The daemon's (or request's) PATH must not matter. */
	cr_assert_eq(setenv("PATH", "/nonexistent:.", 1), 0);
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("ls", NULL, &call, &err), 0);
	cr_assert_str_eq(call.stages[0].exe, "/usr/bin/ls");
	cr_assert_str_eq(call.stages[0].found, "/usr/bin/ls");
	cr_assert_not(call.stages[0].via_symlink);
	cr_assert_str_eq(call.stages[0].base, "ls");
	cr_assert_str_eq(call.req->stages[0].argv[0], "ls", "argv is left as sent");
	cg_call_fini(&call);
}

Test(world, bare_name_never_searches_cwd)
{
	/* "plain" exists in tmp (not executable) and we chdir there: still not found. */
	cr_assert_eq(chdir(tmp), 0);
	expect_reply("plain", NULL, "EXE_NOT_FOUND");
}

Test(world, not_found_names_the_command_and_stage)
{
	char *a0[] = { "true", NULL };
	char *a1[] = { "no-such-command-cg", NULL };
	char **argvs[] = { a0, a1 };
	struct req_builder b;
	build(&b, NULL, argvs, 2);
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_resolve(&world, &b.req, NULL, &call, &err), -1);
	cr_assert_str_eq(key_of(err), "EXE_NOT_FOUND");
	cr_assert_str_eq(param_s(err, "command"), "no-such-command-cg");
	cr_assert_eq(json_integer_value(json_object_get(err->params, "stage")), 1);
	cr_assert_eq(cg_reply_def_of(err)->type, CG_RTYPE_I);
	cg_reply_free(err);
}

Test(world, directory_is_not_executable)
{
	expect_reply("/usr/bin", NULL, "EXE_NOT_EXECUTABLE");
}

Test(world, non_executable_file)
{
	char p[512];
	path_in(p, sizeof(p), "plain");
	expect_reply(p, NULL, "EXE_NOT_EXECUTABLE");
}

/* A name with a slash that is not absolute is taken from the call's cwd, as a shell does. */
Test(world, relative_path_is_taken_from_the_cwd)
{
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("../rm", NULL, &call, &err), 0); /* the cwd is the workspace */
	cr_assert_str_eq(call.stages[0].exe, "/usr/bin/rm");
	char want[600];
	snprintf(want, sizeof(want), "%s/../rm", ws);
	cr_assert_str_eq(call.stages[0].found, want);
	cg_call_fini(&call);
	char sub[512];
	path_in(sub, sizeof(sub), "ws/sub");
	cr_assert_eq(resolve1("../../rm", sub, &call, &err), 0);
	cr_assert_str_eq(call.stages[0].exe, "/usr/bin/rm");
	cg_call_fini(&call);
	expect_reply("bin/ls", NULL, "EXE_PATH_INVALID");
	/* The cwd's own errors come first for such a name: there is nothing to take it from. */
	expect_reply("./ls", "/etc", "CWD_OUTSIDE_WORKSPACE");
}

Test(world, explicit_path_errors)
{
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("/nonexistent/cg/rm", NULL, &call, &err), -1);
	cr_assert_str_eq(key_of(err), "EXE_PATH_INVALID");
	cr_assert_str_eq(param_s(err, "errno_name"), "ENOENT");
	cg_reply_free(err);

	char p[512];
	path_in(p, sizeof(p), "loop");
	cr_assert_eq(resolve1(p, NULL, &call, &err), -1);
	cr_assert_str_eq(key_of(err), "EXE_PATH_INVALID");
	cr_assert_str_eq(param_s(err, "errno_name"), "ELOOP");
	cg_reply_free(err);

	expect_reply("", NULL, "EXE_NOT_FOUND");
}

Test(world, cwd_default_is_first_workspace)
{
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("true", NULL, &call, &err), 0);
	cr_assert_str_eq(call.cwd, ws);
	cr_assert_str_eq(call.workspace, ws);
	cg_call_fini(&call);
}

Test(world, cwd_inside_workspace)
{
	char p[512], want[512];
	path_in(want, sizeof(want), "ws/sub");
	/* Through an in-workspace symlink and a "..": canonical result. */
	path_in(p, sizeof(p), "ws/inner/../sub");
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("true", p, &call, &err), 0);
	cr_assert_str_eq(call.cwd, want);
	cr_assert_str_eq(call.workspace, ws);
	cg_call_fini(&call);

	/* Relative cwd: relative to the first workspace. */
	cr_assert_eq(resolve1("true", "inner", &call, &err), 0);
	cr_assert_str_eq(call.cwd, want);
	cg_call_fini(&call);
}

Test(world, cwd_outside_refused)
{
	expect_reply("true", "/", "CWD_OUTSIDE_WORKSPACE");
	char p[512];
	/* A sibling sharing the prefix "ws" is not inside "ws". */
	path_in(p, sizeof(p), "ws2");
	expect_reply("true", p, "CWD_OUTSIDE_WORKSPACE");
	/* "ws/.." climbs out. */
	path_in(p, sizeof(p), "ws/..");
	expect_reply("true", p, "CWD_OUTSIDE_WORKSPACE");
}

Test(world, cwd_symlink_escaping_refused)
{
	char p[512];
	path_in(p, sizeof(p), "ws/escape");
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("true", p, &call, &err), -1);
	cr_assert_str_eq(key_of(err), "CWD_OUTSIDE_WORKSPACE");
	cr_assert_str_eq(param_s(err, "cwd"), p);
	cg_reply_free(err);
	expect_reply("true", "escape", "CWD_OUTSIDE_WORKSPACE");
}

Test(world, cwd_nonexistent_or_file)
{
	char p[512];
	path_in(p, sizeof(p), "ws/missing");
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(resolve1("true", p, &call, &err), -1);
	cr_assert_str_eq(key_of(err), "CWD_INVALID");
	cr_assert_str_eq(param_s(err, "errno_name"), "ENOENT");
	cg_reply_free(err);
}

Test(world, zero_stages_resolves_cwd_only)
{
	struct req_builder b;
	build(&b, "sub", NULL, 0);
	struct cg_call call;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_resolve(&world, &b.req, NULL, &call, &err), 0);
	cr_assert_eq(call.n_stages, 0);
	cr_assert_null(call.stages);
	cr_assert_not_null(call.cwd);
	cg_call_fini(&call);
}

Test(world, nested_workspaces_pick_the_most_specific)
{
	char sub[512];
	path_in(sub, sizeof(sub), "ws/sub");
	const char *wss[] = { ws, sub };
	struct cg_world w2;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_init(&w2, wss, 2, &err), 0);
	char *argv[] = { "true", NULL };
	char **argvs[] = { argv };
	struct req_builder b;
	build(&b, sub, argvs, 1);
	struct cg_call call;
	cr_assert_eq(cg_world_resolve(&w2, &b.req, NULL, &call, &err), 0);
	cr_assert_str_eq(call.workspace, sub);
	cg_call_fini(&call);
	cg_world_fini(&w2);
}

Test(world, init_refuses_bad_workspaces)
{
	struct cg_world w2;
	struct cg_reply *err = NULL;
	const char *missing[] = { "/nonexistent/cg-ws" };
	cr_assert_eq(cg_world_init(&w2, missing, 1, &err), -1);
	cr_assert_str_eq(key_of(err), "WORKSPACE_INVALID");
	cr_assert_str_eq(param_s(err, "errno_name"), "ENOENT");
	cg_reply_free(err);

	const char *file[] = { "/etc/passwd" };
	cr_assert_eq(cg_world_init(&w2, file, 1, &err), -1);
	cr_assert_str_eq(key_of(err), "WORKSPACE_INVALID");
	cr_assert_str_eq(param_s(err, "errno_name"), "ENOTDIR");
	cg_reply_free(err);

	cr_assert_eq(cg_world_init(&w2, NULL, 0, &err), -1);
	cr_assert_str_eq(key_of(err), "WORKSPACE_INVALID");
	cg_reply_free(err);

	/* A workspace reached through ".." is stored canonical. */
	char p[512];
	path_in(p, sizeof(p), "ws/sub/..");
	const char *dotdot[] = { p };
	cr_assert_eq(cg_world_init(&w2, dotdot, 1, &err), 0);
	cr_assert_str_eq(w2.workspaces[0], ws);
	cg_world_fini(&w2);
}

static size_t envp_len(char **envp)
{
	size_t n = 0;
	while (envp[n])
		n++;
	return n;
}

Test(world, envp_is_exact)
{
	/* Nothing of the daemon's own environment may leak. */
	cr_assert_eq(setenv("LD_PRELOAD", "/tmp/evil.so", 1), 0);
	cr_assert_eq(setenv("CG_DAEMON_SECRET", "x", 1), 0);
	struct cg_env_var env[] = {
		{ .name = "LANG", .value = "C.UTF-8" },
		{ .name = "PATH", .value = "/tmp/evil" }, /* the controlled PATH wins */
		{ .name = "TZ", .value = "UTC" },
	};
	struct req_builder b;
	build(&b, NULL, NULL, 0);
	b.req.env = env;
	b.req.n_env = 3;
	struct cg_reply *err = NULL;
	char **envp = cg_world_envp(&world, &b.req, 0, &err);
	cr_assert_not_null(envp);
	const char *want[] = { ("PATH=" CG_WORLD_PATH), "HOME=/root",	"USER=root",
			       "LOGNAME=root",		"LANG=C.UTF-8", "TZ=UTC" };
	cr_assert_eq(envp_len(envp), 6);
	for (size_t i = 0; i < 6; i++)
		cr_assert_str_eq(envp[i], want[i]);
	cg_envp_free(envp);
}

Test(world, envp_for_unprivileged_uid)
{
	struct req_builder b;
	build(&b, NULL, NULL, 0);
	struct cg_reply *err = NULL;
	char **envp = cg_world_envp(&world, &b.req, 65534, &err);
	cr_assert_not_null(envp);
	cr_assert_eq(envp_len(envp), 4);
	cr_assert_str_eq(envp[0], "PATH=" CG_WORLD_PATH);
	cr_assert_str_eq(envp[1], "HOME=/nonexistent");
	cr_assert_str_eq(envp[2], "USER=nobody");
	cr_assert_str_eq(envp[3], "LOGNAME=nobody");
	cg_envp_free(envp);
}

Test(world, envp_unknown_uid)
{
	struct req_builder b;
	build(&b, NULL, NULL, 0);
	struct cg_reply *err = NULL;
	cr_assert_null(cg_world_envp(&world, &b.req, 4242421, &err));
	cr_assert_str_eq(key_of(err), "EXEC_USER_UNKNOWN");
	cr_assert_eq(json_integer_value(json_object_get(err->params, "uid")), 4242421);
	cg_reply_free(err);
}
