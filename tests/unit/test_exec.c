/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the pipeline runner: pipes, output caps with a 20 MiB
 * producer, deadline and cancel killing the whole tree (grandchildren
 * included), signals, no fd leaks, spawn failures, escaped descendants.
 *
 * The test process is set up like the daemon: SIGPIPE ignored and the usual
 * signals blocked (signalfd style), so that the runner's duty to give
 * children default signal handling is exercised.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "confine.h"
#include "exec.h"
#include "reply.h"
#include "world.h"

#define MIB (1024u * 1024u)

static char tmp[256];
static char ws[300];
static struct cg_world world;

static void setup(void)
{
	char t[] = "/tmp/cg-exec-XXXXXX";
	cr_assert_not_null(mkdtemp(t));
	char *canon = realpath(t, NULL);
	cr_assert_not_null(canon);
	snprintf(tmp, sizeof(tmp), "%s", canon);
	free(canon);
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	cr_assert_eq(mkdir(ws, 0755), 0);
	char sub[512];
	snprintf(sub, sizeof(sub), "%s/sub", ws);
	cr_assert_eq(mkdir(sub, 0755), 0);
	const char *wss[] = { ws };
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_init(&world, wss, 1, &err), 0);

	/* Like the daemon: SIGPIPE ignored, signals blocked for a signalfd. */
	signal(SIGPIPE, SIG_IGN);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

static void teardown(void)
{
	cg_world_fini(&world);
	char p[600];
	snprintf(p, sizeof(p), "%s/sub", ws);
	(void)rmdir(p);
	(void)rmdir(ws);
	(void)rmdir(tmp);
}

TestSuite(exec, .init = setup, .fini = teardown, .timeout = 60);

/* One call: request, resolution, environment and result, freed by done(). */
struct run {
	struct cg_request req;
	struct cg_stage stages[4];
	struct cg_call call;
	char **envp;
	struct cg_exec_result res;
	struct cg_reply *err;
	int rc;
	int64_t elapsed_ms;
};

static void prepare(struct run *r, char **const *argvs, size_t n, char *cwd)
{
	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < n; i++) {
		size_t argc = 0;
		while (argvs[i][argc])
			argc++;
		r->stages[i] = (struct cg_stage){ .argc = argc, .argv = argvs[i] };
	}
	r->req.n_stages = n;
	r->req.stages = r->stages;
	r->req.cwd = cwd;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_world_resolve(&world, &r->req, NULL, &r->call, &err), 0, "resolve: %s",
		     err ? cg_reply_def_of(err)->key : "");
	r->envp = cg_world_envp(&world, &r->req, 0, &err);
	cr_assert_not_null(r->envp);
}

static void execute(struct run *r, int64_t timeout_ms, int cancel_fd,
		    const struct cg_confine_plan *plan)
{
	struct cg_exec_spec spec = { .call = &r->call,
				     .envp = r->envp,
				     .timeout_ms = timeout_ms,
				     .plan = plan,
				     .cancel_fd = cancel_fd,
				     .trace_id = "test" };
	int64_t t0 = cg_now_mono_ns();
	r->rc = cg_exec_run(&spec, &r->res, &r->err);
	r->elapsed_ms = (cg_now_mono_ns() - t0) / 1000000;
}

static void run(struct run *r, char **const *argvs, size_t n, int64_t timeout_ms)
{
	prepare(r, argvs, n, NULL);
	execute(r, timeout_ms, -1, NULL);
	if (r->rc != 0) {
		char *msg = cg_reply_message(r->err);
		json_t *step = json_object_get(r->err->params, "step");
		cr_assert_fail("run failed: %s (step %s)", msg,
			       step ? json_string_value(step) : "-");
	}
}

static void done(struct run *r)
{
	cg_exec_result_fini(&r->res); /* also after a failure: a partial start keeps exit codes */
	cg_reply_free(r->err);
	cg_envp_free(r->envp);
	cg_call_fini(&r->call);
}

static void expect_out(const struct run *r, const char *want)
{
	size_t n = strlen(want);
	cr_assert_eq(r->res.out.len, n, "stdout length %zu, want %zu", r->res.out.len, n);
	cr_assert(n == 0 || memcmp(r->res.out.p, want, n) == 0, "stdout %.*s", (int)r->res.out.len,
		  (const char *)r->res.out.p);
}

/*
 * A process that is gone: no /proc entry, or a zombie (dead; in a container
 * whose init does not reap, killed orphans stay zombies).
 */
static bool proc_gone(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* The first line of stdout as a pid. */
static pid_t out_pid(const struct run *r)
{
	char buf[32] = "";
	size_t n = r->res.out.len < sizeof(buf) - 1 ? r->res.out.len : sizeof(buf) - 1;
	memcpy(buf, r->res.out.p, n);
	char *end = NULL;
	long v = strtol(buf, &end, 10);
	cr_assert(end != buf && v > 1, "no pid in stdout: '%s'", buf);
	return (pid_t)v;
}

/*
 * Run `true` once so that process-wide state the runner's collaborators open
 * lazily (the confinement module's cgroup base fds) exists before fds are
 * counted: those are opened once per process, not per call.
 */
static void warm_up(void);

static size_t count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	size_t n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void warm_up(void)
{
	char *a0[] = { "true", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 10000);
	done(&r);
}

Test(exec, two_stage_pipe)
{
	char *a0[] = { "echo", "hi", NULL };
	char *a1[] = { "tr", "a-z", "A-Z", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	run(&r, argvs, 2, 10000);
	expect_out(&r, "HI\n");
	cr_assert_eq(r.res.n_stages, 2);
	cr_assert_eq(r.res.stages[0].exit_code, 0);
	cr_assert_eq(r.res.stages[1].exit_code, 0);
	cr_assert_not(r.res.out.truncated);
	cr_assert_not(r.res.timed_out);
	cr_assert_not(r.res.cancelled);
	cr_assert_not(r.res.tree_escapees_killed);
	cr_assert_gt(r.res.stages[0].pid, 0);
	cr_assert_neq(r.res.stages[0].pid, r.res.stages[1].pid);
	cr_assert_geq(r.res.ended_ns, r.res.started_ns);
	done(&r);
}

Test(exec, three_stage_pipe)
{
	char *a0[] = { "printf", "c\\na\\nb\\n", NULL };
	char *a1[] = { "sort", NULL };
	char *a2[] = { "head", "-n", "2", NULL };
	char **argvs[] = { a0, a1, a2 };
	struct run r;
	run(&r, argvs, 3, 10000);
	expect_out(&r, "a\nb\n");
	for (size_t i = 0; i < 3; i++)
		cr_assert_eq(r.res.stages[i].exit_code, 0);
	done(&r);
}

Test(exec, exit_codes_per_stage)
{
	char *a0[] = { "false", NULL };
	char *a1[] = { "true", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	run(&r, argvs, 2, 10000);
	cr_assert_eq(r.res.stages[0].exit_code, 1);
	cr_assert_eq(r.res.stages[1].exit_code, 0);
	cr_assert(WIFEXITED(r.res.stages[0].raw_status));
	done(&r);

	char *b0[] = { "sh", "-c", "echo oops >&2; exit 7", NULL };
	char *b1[] = { "cat", NULL };
	char **bargvs[] = { b0, b1 };
	run(&r, bargvs, 2, 10000);
	cr_assert_eq(r.res.stages[0].exit_code, 7);
	cr_assert_eq(r.res.stages[1].exit_code, 0);
	cr_assert_eq(r.res.stages[0].err.len, 5);
	cr_assert_eq(memcmp(r.res.stages[0].err.p, "oops\n", 5), 0);
	cr_assert_eq(r.res.stages[1].err.len, 0);
	done(&r);
}

Test(exec, stdout_cap_with_20mib_producer)
{
	char *a0[] = { "head", "-c", "20971520", "/dev/zero", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 30000);
	cr_assert_eq(r.res.out.len, 16 * MIB);
	cr_assert(r.res.out.truncated);
	cr_assert_eq(r.res.out.seen, 20 * MIB, "drained past the cap");
	cr_assert_eq(r.res.stages[0].exit_code, 0, "child was not blocked or killed");
	cr_assert_not(r.res.timed_out);
	done(&r);
}

Test(exec, stderr_cap_with_20mib_producer)
{
	char *a0[] = { "sh", "-c", "head -c 20971520 /dev/zero >&2; echo end", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 30000);
	cr_assert_eq(r.res.stages[0].err.len, 16 * MIB);
	cr_assert(r.res.stages[0].err.truncated);
	cr_assert_eq(r.res.stages[0].err.seen, 20 * MIB);
	expect_out(&r, "end\n");
	cr_assert_not(r.res.out.truncated);
	cr_assert_eq(r.res.stages[0].exit_code, 0);
	done(&r);
}

Test(exec, deadline_kills_pipeline_with_grandchild)
{
	char *a0[] = { "sh", "-c", "sleep 100 & echo $!; sleep 100", NULL };
	/*
	 * Not a bare cat: killed a moment after sh, it could read EOF first and
	 * exit 0 (seen under a parallel test run). This stage outlives EOF.
	 */
	char *a1[] = { "sh", "-c", "cat; sleep 100", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	run(&r, argvs, 2, 300);
	cr_assert(r.res.timed_out);
	cr_assert_not(r.res.cancelled);
	pid_t grandchild = out_pid(&r);
	cr_assert(proc_gone(grandchild), "grandchild %d survived the deadline", (int)grandchild);
	/* sh died of TERM (the parent has TERM blocked: the child must not). */
	cr_assert_eq(r.res.stages[0].exit_code, 128 + SIGTERM);
	cr_assert_eq(r.res.stages[1].exit_code, 128 + SIGTERM);
	cr_assert_lt(r.elapsed_ms, 20000);
	done(&r);
}

Test(exec, term_ignored_gets_kill)
{
	char *a0[] = { "sh", "-c", "trap '' TERM; echo ready; sleep 100", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 300);
	cr_assert(r.res.timed_out);
	cr_assert_eq(r.res.stages[0].exit_code, 128 + SIGKILL);
	done(&r);
}

Test(exec, signal_exit_codes)
{
	char *a0[] = { "sh", "-c", "kill -KILL $$", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 10000);
	cr_assert_eq(r.res.stages[0].exit_code, 137);
	cr_assert(WIFSIGNALED(r.res.stages[0].raw_status));
	done(&r);

	/* SIGPIPE is default in children even though the parent ignores it. */
	char *b0[] = { "yes", NULL };
	char *b1[] = { "head", "-n", "1", NULL };
	char **bargvs[] = { b0, b1 };
	run(&r, bargvs, 2, 10000);
	expect_out(&r, "y\n");
	cr_assert_eq(r.res.stages[0].exit_code, 128 + SIGPIPE);
	cr_assert_eq(r.res.stages[1].exit_code, 0);
	cr_assert_not(r.res.timed_out);
	done(&r);
}

Test(exec, no_fd_leaks)
{
	/* A daemon fd opened without CLOEXEC must still not reach the child. */
	int leak = open("/dev/null", O_RDONLY);
	cr_assert_geq(leak, 0);
	cr_assert_eq(dup2(leak, 57), 57);
	warm_up();
	size_t before = count_fds();

	char *a0[] = { "ls", "/proc/self/fd", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 10000);
	/* 0 1 2 and the directory fd ls itself opened. */
	expect_out(&r, "0\n1\n2\n3\n");
	done(&r);

	char *b0[] = { "sh", "-c", "ls /proc/$$/fd", NULL };
	char *b1[] = { "cat", NULL };
	char **bargvs[] = { b0, b1 };
	run(&r, bargvs, 2, 10000);
	expect_out(&r, "0\n1\n2\n");
	done(&r);

	cr_assert_eq(count_fds(), before, "the runner leaked fds in the parent");
	close(57);
	close(leak);
}

Test(exec, stdin_is_dev_null)
{
	char *a0[] = { "cat", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 10000);
	expect_out(&r, "");
	cr_assert_eq(r.res.stages[0].exit_code, 0);
	cr_assert_not(r.res.timed_out);
	done(&r);

	char *b0[] = { "readlink", "/proc/self/fd/0", NULL };
	char **bargvs[] = { b0 };
	run(&r, bargvs, 1, 10000);
	expect_out(&r, "/dev/null\n");
	done(&r);
}

Test(exec, environment_and_cwd)
{
	char *a0[] = { "env", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 10000);
	expect_out(&r, "PATH=" CG_WORLD_PATH "\nHOME=/root\nUSER=root\nLOGNAME=root\n");
	done(&r);

	char *b0[] = { "pwd", NULL };
	char **bargvs[] = { b0 };
	prepare(&r, bargvs, 1, "sub");
	execute(&r, 10000, -1, NULL);
	cr_assert_eq(r.rc, 0);
	char want[600];
	snprintf(want, sizeof(want), "%s/sub\n", ws);
	expect_out(&r, want);
	done(&r);
}

Test(exec, own_process_group)
{
	char *a0[] = { "sh", "-c", "ps -o pgid= -p $$; echo $$", NULL };
	char *a1[] = { "cat", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	run(&r, argvs, 2, 10000);
	char buf[64] = "";
	memcpy(buf, r.res.out.p, r.res.out.len < 63 ? r.res.out.len : 63);
	long pgid = 0, pid = 0;
	cr_assert_eq(sscanf(buf, " %ld %ld", &pgid, &pid), 2, "out: %s", buf);
	cr_assert_eq(pgid, pid, "first stage leads its own group");
	cr_assert_neq(pgid, (long)getpgrp());
	done(&r);
}

Test(exec, spawn_failure_enoent)
{
	char *a0[] = { "true", NULL };
	char **argvs[] = { a0 };
	struct run r;
	prepare(&r, argvs, 1, NULL);
	free(r.call.stages[0].exe);
	r.call.stages[0].exe = strdup("/nonexistent/cg-nope");
	execute(&r, 10000, -1, NULL);
	cr_assert_eq(r.rc, -1);
	cr_assert_str_eq(cg_reply_def_of(r.err)->key, "EXEC_SPAWN_FAILED");
	cr_assert_str_eq(cg_reply_def_of(r.err)->code, "MCP-EXEC-E-001");
	cr_assert_str_eq(json_string_value(json_object_get(r.err->params, "errno_name")), "ENOENT");
	cr_assert_str_eq(json_string_value(json_object_get(r.err->params, "step")), "exec");
	cr_assert_eq(r.res.n_execd, 0);
	done(&r);
}

Test(exec, spawn_failure_later_stage_leaves_nothing_running)
{
	char *a0[] = { "sleep", "100", NULL };
	char *a1[] = { "true", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	warm_up();
	size_t before = count_fds();
	prepare(&r, argvs, 2, NULL);
	free(r.call.stages[1].exe);
	r.call.stages[1].exe = strdup("/nonexistent/cg-nope");
	execute(&r, 10000, -1, NULL);
	cr_assert_eq(r.rc, -1);
	/* The sleep had exec'd: the pipeline ran in part, and the reply says so. */
	cr_assert_str_eq(cg_reply_def_of(r.err)->key, "EXEC_PARTLY_STARTED");
	cr_assert_eq(json_integer_value(json_object_get(r.err->params, "stage")), 1);
	cr_assert_eq(json_integer_value(json_object_get(r.err->params, "started")), 1);
	cr_assert_str_eq(json_string_value(json_object_get(r.err->params, "cause")),
			 cg_reply_registry[CG_R_EXEC_SPAWN_FAILED].code);
	cr_assert_eq(r.res.n_execd, 1);
	cr_assert_eq(r.res.stages[0].exit_code, 128 + SIGKILL); /* what the started sleep died of */
	/* The started sleep was killed and reaped: the test process has no child left. */
	cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1);
	cr_assert_eq(errno, ECHILD);
	cr_assert_lt(r.elapsed_ms, 20000);
	done(&r);
	cr_assert_eq(count_fds(), before);
}

Test(exec, cancel_via_eventfd)
{
	int efd = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(efd, 0);
	uint64_t one = 1;
	cr_assert_eq(write(efd, &one, sizeof(one)), (ssize_t)sizeof(one));

	char *a0[] = { "sh", "-c", "sleep 100 & echo $!; sleep 100", NULL };
	char **argvs[] = { a0 };
	struct run r;
	prepare(&r, argvs, 1, NULL);
	execute(&r, 60000, efd, NULL);
	cr_assert_eq(r.rc, 0);
	cr_assert(r.res.cancelled);
	cr_assert_not(r.res.timed_out);
	cr_assert_eq(r.res.stages[0].exit_code, 128 + SIGTERM);
	if (r.res.out.len > 0) /* cancel may land before sh printed */
		cr_assert(proc_gone(out_pid(&r)));
	cr_assert_lt(r.elapsed_ms, 20000);
	done(&r);
	close(efd);
}

Test(exec, escaped_grandchild_holding_stdout_is_killed)
{
	char *a0[] = { "sh", "-c", "sleep 100 & echo $!; echo done", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 60000);
	cr_assert_not(r.res.timed_out);
	cr_assert(r.res.tree_escapees_killed);
	cr_assert_eq(r.res.stages[0].exit_code, 0);
	pid_t grandchild = out_pid(&r);
	const char *nl = memchr(r.res.out.p, '\n', r.res.out.len);
	cr_assert_not_null(nl);
	cr_assert_eq(r.res.out.len - (size_t)(nl + 1 - (const char *)r.res.out.p), 5);
	cr_assert_eq(memcmp(nl + 1, "done\n", 5), 0);
	cr_assert(proc_gone(grandchild), "escaped grandchild %d still runs", (int)grandchild);
	cr_assert_lt(r.elapsed_ms, 20000, "returned promptly, not at the deadline");
	done(&r);
}

Test(exec, escaped_grandchild_with_closed_fds_is_killed)
{
	char *a0[] = { "sh", "-c", "sleep 100 >/dev/null 2>&1 & echo $!", NULL };
	char **argvs[] = { a0 };
	struct run r;
	run(&r, argvs, 1, 60000);
	cr_assert(r.res.tree_escapees_killed);
	cr_assert(proc_gone(out_pid(&r)));
	cr_assert_lt(r.elapsed_ms, 20000);
	done(&r);
}

Test(exec, cwd_swapped_after_resolution_is_refused)
{
	char *a0[] = { "pwd", NULL };
	char **argvs[] = { a0 };
	struct run r;
	prepare(&r, argvs, 1, "sub");
	char sub[600], moved[600];
	snprintf(sub, sizeof(sub), "%s/sub", ws);
	snprintf(moved, sizeof(moved), "%s/moved", ws);
	cr_assert_eq(rename(sub, moved), 0);
	cr_assert_eq(symlink("/etc", sub), 0);
	execute(&r, 10000, -1, NULL);
	cr_assert_eq(r.rc, -1);
	cr_assert_str_eq(cg_reply_def_of(r.err)->key, "EXEC_CWD_CHANGED");
	done(&r);
	cr_assert_eq(unlink(sub), 0);
	cr_assert_eq(rename(moved, sub), 0);
}

/* A plan that runs the stages as nobody (65534) in ws, as a root daemon does. */
static struct cg_confine_plan *nobody_plan(void)
{
	cr_assert_eq(geteuid(), 0, "this test needs root (as the daemon runs)");
	struct cg_confine_ctx ctx = { .workspace = ws,
				      .cwd = ws,
				      .home = "/nonexistent",
				      .set_ids = true,
				      .uid = 65534,
				      .gid = 65534 };
	struct cg_confine_plan *plan = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(NULL, 0, &ctx, &plan, &err), 0, "prepare: %s",
		     err ? cg_reply_def_of(err)->key : "");
	return plan;
}

Test(exec, unprivileged_stage_runs_as_peer_ids)
{
	/* The peer enters its cwd itself (s42a F1): mkdtemp's 0700 would refuse it. */
	cr_assert_eq(chmod(tmp, 0755), 0);
	struct cg_confine_plan *plan = nobody_plan();

	char *a0[] = { "sh", "-c", "id -u; id -g; id -G", NULL };
	char *a1[] = { "cat", NULL };
	char **argvs[] = { a0, a1 };
	struct run r;
	prepare(&r, argvs, 2, NULL);
	execute(&r, 10000, -1, plan);
	cr_assert_eq(r.rc, 0, "run: %s", r.err ? cg_reply_def_of(r.err)->key : "");
	expect_out(&r, "65534\n65534\n65534\n");
	done(&r);
	cg_confine_plan_free(plan);
}

/* s42a F1: a cwd the peer's own uid could not enter is not entered for it. */
Test(exec, a_cwd_closed_to_the_peer_runs_nothing)
{
	cr_assert_eq(chmod(ws, 0700), 0);
	struct cg_confine_plan *plan = nobody_plan();
	char *a0[] = { "echo", "ran", NULL };
	char **argvs[] = { a0 };
	struct run r;
	prepare(&r, argvs, 1, NULL);
	execute(&r, 10000, -1, plan);
	cr_assert_eq(r.rc, -1);
	cr_assert_str_eq(cg_reply_def_of(r.err)->key, "EXEC_CWD_NOT_REACHABLE");
	done(&r);
	cg_confine_plan_free(plan);
}

/*
 * The daemon runs calls on worker threads: concurrent forks must not cross
 * wires. Criterion asserts only work on the test's thread, so the workers
 * return what went wrong instead.
 */
static void *run_many(void *arg)
{
	long id = (long)arg;
	char word[32], want[40];
	snprintf(word, sizeof(word), "w%ld", id);
	snprintf(want, sizeof(want), "%s\n", word);
	for (int k = 0; k < 8; k++) {
		char *a0[] = { "echo", word, NULL };
		char *a1[] = { "cat", NULL };
		char **argvs[] = { a0, a1 };
		struct run r;
		char *bad = NULL;
		memset(&r, 0, sizeof(r));
		for (size_t i = 0; i < 2; i++) {
			size_t argc = 0;
			while (argvs[i][argc])
				argc++;
			r.stages[i] = (struct cg_stage){ .argc = argc, .argv = argvs[i] };
		}
		r.req.n_stages = 2;
		r.req.stages = r.stages;
		if (cg_world_resolve(&world, &r.req, NULL, &r.call, &r.err) != 0 ||
		    !(r.envp = cg_world_envp(&world, &r.req, 0, &r.err)))
			return strdup("resolve failed");
		struct cg_exec_spec spec = {
			.call = &r.call, .envp = r.envp, .timeout_ms = 10000, .cancel_fd = -1
		};
		r.rc = cg_exec_run(&spec, &r.res, &r.err);
		if (r.rc != 0)
			bad = cg_reply_message(r.err);
		else if (r.res.out.len != strlen(want) || memcmp(r.res.out.p, want, strlen(want)) ||
			 r.res.stages[0].exit_code != 0 || r.res.stages[1].exit_code != 0)
			bad = strdup("wrong output or exit code");
		if (r.rc == 0)
			cg_exec_result_fini(&r.res);
		cg_reply_free(r.err);
		cg_envp_free(r.envp);
		cg_call_fini(&r.call);
		if (bad)
			return bad;
	}
	return NULL;
}

Test(exec, concurrent_calls_from_threads)
{
	warm_up();
	size_t before = count_fds();
	pthread_t th[4];
	for (long i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, run_many, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *bad = NULL;
		cr_assert_eq(pthread_join(th[i], &bad), 0);
		cr_expect_null(bad, "thread %d: %s", i, bad ? (char *)bad : "");
		free(bad);
	}
	cr_assert_eq(count_fds(), before);
	cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1, "no child left behind");
}
