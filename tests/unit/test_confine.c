/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for confine: each test prepares a plan from constraint sets,
 * forks, applies it in the child exactly as the runner does, and checks the
 * errno of an operation the confinement must refuse next to the same
 * operation that must succeed. Needs root (CI runs as root) for the
 * network namespace, the id drop and the cgroup tree.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "confine.h"
#include "landlock.h"
#include "netns.h"

#define CHILD_CONFINE_FAILED 250

/* cg_confine_exec's failure report in a child: the exit status says it. */
__attribute__((noreturn)) static void view_child_failed(int fd, int step, int err)
{
	(void)fd;
	(void)step;
	(void)err;
	_exit(CHILD_CONFINE_FAILED);
}

static const struct cg_limits no_limits = { CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
					    CG_LIMIT_UNSET, CG_LIMIT_UNSET };

static char tmpdir[64];
static char inside[128], outside[128];

static void mk_tree(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/cg-confine-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	snprintf(inside, sizeof(inside), "%s/in", tmpdir);
	snprintf(outside, sizeof(outside), "%s/out", tmpdir);
	cr_assert_eq(mkdir(inside, 0755), 0);
	cr_assert_eq(mkdir(outside, 0755), 0);
}

static void rm_tree(void)
{
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "%s", tmpdir);
	/* Small, known layout: remove files we may have created, then dirs. */
	const char *names[] = { "in/a", "in/b", "out/a", "out/b", "in", "out", "" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char p[200];
		snprintf(p, sizeof(p), "%s/%s", cmd, names[i]);
		if (remove(p) != 0 && errno != ENOENT)
			cr_log_warn("cannot remove %s", p);
	}
}

static struct cg_constraints base_cons(void)
{
	struct cg_constraints c = { 0 };
	c.limits = no_limits;
	c.timeout_ms = CG_LIMIT_UNSET;
	return c;
}

static bool close_fds_first; /* the child closes fds >= 3 before confining */
static bool use_plain_fork;  /* fork + join (migration) instead of cg_tree_fork */

/* Fork; the child applies plan and returns fn()'s value as its exit code. */
static int run_child(const struct cg_confine_plan *plan, struct cg_tree *tree, int (*fn)(void *),
		     void *arg)
{
	pid_t pid = tree && !use_plain_fork ? cg_tree_fork(tree) : fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (tree && cg_tree_child_join(tree, 0) != 0)
			_exit(CHILD_CONFINE_FAILED);
		if (close_fds_first)
			(void)close_range(3, ~0U, 0);
		int e = cg_confine_child(plan);
		if (e != 0)
			_exit(CHILD_CONFINE_FAILED);
		_exit(fn(arg));
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "child died of signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

static int open_errno(void *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static struct cg_confine_plan *prepare1(const struct cg_constraints *c,
					const struct cg_confine_ctx *ctx)
{
	const struct cg_constraints *sets[1] = { c };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	int rc = cg_confine_prepare(sets, 1, ctx, &p, &err);
	cr_assert_eq(rc, 0, "prepare failed: %s", err ? cg_reply_def_of(err)->code : "?");
	return p;
}

Test(confine, no_constraints_is_not_confined)
{
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(NULL, 0, NULL, &p, &err), 0);
	json_t *r = cg_confine_report(p);
	cr_assert_not(json_is_true(json_object_get(r, "confined")));
	cr_assert_eq(cg_confine_timeout_ms(p), CG_LIMIT_UNSET);
	json_decref(r);
	cg_confine_plan_free(p);
}

Test(confine, write_set_confines_writes, .init = mk_tree, .fini = rm_tree)
{
	const char *rd[] = { "/" }, *wr[] = { "${workspace}/in" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	c.write = wr;
	c.n_write = 1;
	struct cg_confine_ctx ctx = { .workspace = tmpdir, .cwd = tmpdir };
	struct cg_confine_plan *p = prepare1(&c, &ctx);
	char a_in[200], a_out[200];
	snprintf(a_in, sizeof(a_in), "%s/a", inside);
	snprintf(a_out, sizeof(a_out), "%s/a", outside);
	cr_assert_eq(run_child(p, NULL, open_errno, a_in), 0);
	cr_assert_eq(run_child(p, NULL, open_errno, a_out), EACCES);
	/* Unconfined, the same open outside works: the denial is the plan's. */
	cr_assert_eq(run_child(NULL, NULL, open_errno, a_out), 0);
	json_t *r = cg_confine_report(p);
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "landlock"), "abi")),
		     cg_landlock_abi());
	cr_assert(json_is_true(json_object_get(json_object_get(r, "landlock"), "fs")));
	json_decref(r);
	cg_confine_plan_free(p);
}

static int open_errno_after_close(void *path)
{
	return open_errno(path);
}

Test(confine, ruleset_rebuilt_in_child_when_fd_gone, .init = mk_tree, .fini = rm_tree)
{
	/* A runner that closes every fd above 2 loses the parent's ruleset fd:
	 * the child must build the same ruleset itself, never run unconfined. */
	const char *rd[] = { "/" }, *wr[] = { inside };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	c.write = wr;
	c.n_write = 1;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	char a_in[200], a_out[200];
	snprintf(a_in, sizeof(a_in), "%s/a", inside);
	snprintf(a_out, sizeof(a_out), "%s/a", outside);
	close_fds_first = true;
	cr_assert_eq(run_child(p, NULL, open_errno_after_close, a_in), 0);
	cr_assert_eq(run_child(p, NULL, open_errno_after_close, a_out), EACCES);
	close_fds_first = false;
	cg_confine_plan_free(p);
}

Test(confine, stacked_sets_intersect, .init = mk_tree, .fini = rm_tree)
{
	/* Set A may write the whole temp tree, set B only in/: together only in/. */
	const char *rd[] = { "/" }, *wa[] = { tmpdir }, *wb[] = { inside };
	struct cg_constraints a = base_cons(), b = base_cons();
	a.fs = b.fs = true;
	a.read = b.read = rd;
	a.n_read = b.n_read = 1;
	a.write = wa;
	a.n_write = 1;
	b.write = wb;
	b.n_write = 1;
	const struct cg_constraints *sets[2] = { &a, &b };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 2, NULL, &p, &err), 0);
	char a_in[200], a_out[200];
	snprintf(a_in, sizeof(a_in), "%s/b", inside);
	snprintf(a_out, sizeof(a_out), "%s/b", outside);
	cr_assert_eq(run_child(p, NULL, open_errno, a_in), 0);
	cr_assert_eq(run_child(p, NULL, open_errno, a_out), EACCES);
	cg_confine_plan_free(p);
}

Test(confine, missing_workspace_refused, .init = mk_tree, .fini = rm_tree)
{
	const char *wr[] = { "${workspace}/nope" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.write = wr;
	c.n_write = 1;
	struct cg_confine_ctx ctx = { .workspace = tmpdir };
	const struct cg_constraints *sets[1] = { &c };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 1, &ctx, &p, &err), -1);
	cr_assert_eq(err->id, CG_R_CONFINE_PATH_INVALID);
	cg_reply_free(err);
}

Test(confine, missing_read_path_skipped_with_note)
{
	const char *rd[] = { "/", "/nonexistent-cg-path" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 2;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	json_t *r = cg_confine_report(p);
	json_t *sk = json_object_get(r, "skipped"), *e;
	size_t i;
	bool found = false;
	json_array_foreach(sk, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "path")), "/nonexistent-cg-path") ==
		    0) {
			found = true;
			cr_assert_str_eq(json_string_value(json_object_get(e, "reason")), "ENOENT");
			cr_assert_str_eq(json_string_value(json_object_get(e, "access")), "read");
		}
		/* Only missing paths are skipped. */
		cr_assert_neq(access(json_string_value(json_object_get(e, "path")), F_OK), 0);
	}
	cr_assert(found, "the missing read path is not reported as skipped");
	json_decref(r);
	cg_confine_plan_free(p);
}

Test(confine, default_exec_when_set_lists_none)
{
	const char *rd[] = { "/tmp" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	json_t *r = cg_confine_report(p), *e;
	size_t i;
	bool usr = false;
	json_array_foreach(json_object_get(r, "paths"), i, e)
	{
		usr |= strcmp(json_string_value(json_object_get(e, "path")), "/usr") == 0 &&
		       strcmp(json_string_value(json_object_get(e, "access")), "exec") == 0;
	}
	cr_assert(usr, "/usr should be in the default exec set");
	json_decref(r);
	cg_confine_plan_free(p);
}

Test(confine, unknown_token_refused)
{
	const char *rd[] = { "${nothing}/x" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	const struct cg_constraints *sets[1] = { &c };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 1, NULL, &p, &err), -1);
	cr_assert_eq(err->id, CG_R_CONFINE_PATH_INVALID);
	cg_reply_free(err);
}

Test(confine, old_abi_tcp_fails_closed_unless_best_effort)
{
	uint16_t ports[] = { 80 };
	struct cg_constraints c = base_cons();
	c.net = CG_NET_TCP;
	c.ports = ports;
	c.n_ports = 1;
	cg_landlock_abi_override(3); /* Landlock without network rules */
	const struct cg_constraints *sets[1] = { &c };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 1, NULL, &p, &err), -1);
	cr_assert_eq(err->id, CG_R_CONSTRAINT_UNENFORCEABLE);
	cr_assert_str_eq(json_string_value(json_object_get(err->params, "constraint")), "net.tcp");
	cg_reply_free(err);
	err = NULL;
	c.best_effort = true;
	cr_assert_eq(cg_confine_prepare(sets, 1, NULL, &p, &err), 0);
	json_t *r = cg_confine_report(p);
	json_t *d = json_object_get(r, "downgraded");
	cr_assert_eq(json_array_size(d), 1);
	cr_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "constraint")),
			 "net.tcp");
	json_decref(r);
	cg_confine_plan_free(p);
	cg_landlock_abi_override(-1);
}

Test(confine, no_landlock_fs_fails_closed)
{
	const char *rd[] = { "/" };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	cg_landlock_abi_override(0);
	const struct cg_constraints *sets[1] = { &c };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 1, NULL, &p, &err), -1);
	cr_assert_eq(err->id, CG_R_CONSTRAINT_UNENFORCEABLE);
	cg_reply_free(err);
	/* ABI 2 cannot deny truncate(): also refused, named precisely. */
	cg_landlock_abi_override(2);
	err = NULL;
	cr_assert_eq(cg_confine_prepare(sets, 1, NULL, &p, &err), -1);
	cr_assert_str_eq(json_string_value(json_object_get(err->params, "constraint")),
			 "fs.truncate");
	cg_reply_free(err);
	cg_landlock_abi_override(-1);
}

static int seccomp_probe(void *arg)
{
	int which = *(int *)arg;
	errno = 0;
	int r = which == 0   ? unshare(CLONE_NEWUSER)
		: which == 1 ? (int)ptrace(PTRACE_TRACEME, 0, NULL, NULL)
			     : mount("none", "/mnt", "tmpfs", 0, NULL);
	return r == 0 ? 0 : errno;
}

Test(confine, seccomp_denies_with_eperm)
{
	struct cg_constraints c = base_cons(); /* an empty set: baseline confinement */
	struct cg_confine_plan *p = prepare1(&c, NULL);
	for (int which = 0; which < 3; which++) {
		cr_assert_eq(run_child(p, NULL, seccomp_probe, &which), EPERM, "probe %d", which);
	}
	/* Without the plan, unshare(CLONE_NEWUSER) works here (root): the EPERM is ours. */
	int w = 0;
	cr_assert_eq(run_child(NULL, NULL, seccomp_probe, &w), 0);
	cg_confine_plan_free(p);
}

Test(confine, a_missing_scratch_directory_is_made_only_in_the_calls_own_directory, .init = mk_tree,
     .fini = rm_tree)
{
	/*
	 * s44c M2: a fresh account's missing ~/.npm got no scratch tmpfs, and an
	 * approved npm install failed making it. It is made now, empty, but only
	 * as the last name in a directory of the call's uid reached through no
	 * link: a .cache that is a link to /etc gets nothing made in /etc.
	 */
	char mine[200], lnk[200], via_link[256], theirs[200], in_theirs[256], made[200];
	snprintf(mine, sizeof(mine), "%s/cache", outside);
	snprintf(lnk, sizeof(lnk), "%s/lnk", tmpdir);
	snprintf(via_link, sizeof(via_link), "%s/viacache", lnk);
	snprintf(made, sizeof(made), "%s/viacache", outside);
	snprintf(theirs, sizeof(theirs), "%s/theirs", tmpdir);
	snprintf(in_theirs, sizeof(in_theirs), "%s/cache", theirs);
	cr_assert_eq(symlink(outside, lnk), 0);
	cr_assert_eq(mkdir(theirs, 0755), 0);
	cr_assert_eq(chown(theirs, 65534, 65534), 0);
	const char *rd[] = { "/" }, *wr[] = { inside }, *scr[] = { mine, via_link, in_theirs };
	struct cg_constraints c = base_cons();
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	c.write = wr;
	c.n_write = 1;
	c.scratch = scr;
	c.n_scratch = 3;
	struct cg_confine_ctx ctx = { .workspace = inside, .cwd = inside, .view = true };
	struct cg_confine_plan *p = prepare1(&c, &ctx);
	struct stat st;
	cr_assert_eq(lstat(mine, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_eq(st.st_mode & 07777, 0700);
	cr_assert_eq(st.st_uid, geteuid());
	cr_assert_neq(lstat(made, &st), 0, "made through a link");
	cr_assert_neq(lstat(in_theirs, &st), 0, "made in another uid's directory");
	cg_confine_plan_free(p);
	(void)rmdir(mine);
	(void)unlink(lnk);
	(void)rmdir(theirs);
}

/* open_tree_attr (467, Linux 6.15): a clone of a mount with new attributes. */
static int new_syscall_probe(void *arg)
{
	long nr = *(long *)arg;
	errno = 0;
	long r = syscall(nr, AT_FDCWD, "/", 0, NULL, 0);
	return r >= 0 ? 0 : errno;
}

Test(confine, syscalls_newer_than_the_list_answer_enosys)
{
	/*
	 * s44a F1: open_tree_attr made a read-only mount writable for a root
	 * call that kept CAP_SYS_ADMIN; open_tree was denied, its successor was
	 * not. Every syscall after the reviewed list answers ENOSYS.
	 */
	struct cg_constraints c = base_cons();
	struct cg_confine_plan *p = prepare1(&c, NULL);
	long nrs[] = { 467, 468, 469, 470, 500, 1000 };
	for (size_t i = 0; i < sizeof(nrs) / sizeof(nrs[0]); i++)
		cr_assert_eq(run_child(p, NULL, new_syscall_probe, &nrs[i]), ENOSYS, "nr %ld",
			     nrs[i]);
	/* What lies below the ceiling is the kernel's to answer (removexattrat, 466). */
	long nr = 466;
	cr_assert_eq(run_child(p, NULL, new_syscall_probe, &nr),
		     run_child(NULL, NULL, new_syscall_probe, &nr));
	cg_confine_plan_free(p);
}

static int connect_port(void *arg)
{
	int port = *(int *)arg;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return 200;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int r = connect(s, (struct sockaddr *)&sa, sizeof(sa));
	int e = r == 0 ? 0 : errno;
	close(s);
	return e;
}

static int listener(int *port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(sa);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(s, 8), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return s;
}

Test(confine, net_none_cannot_reach_host_loopback)
{
	int port, s = listener(&port);
	struct cg_constraints c = base_cons();
	c.net = CG_NET_NONE;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(run_child(NULL, NULL, connect_port, &port), 0);
	cr_assert_eq(run_child(p, NULL, connect_port, &port), ECONNREFUSED);
	close(s);
	cg_confine_plan_free(p);
}

/* In a child of cg_confine_spawn: confine, report the namespace and what it reaches, wait. */
struct pooled_probe {
	const struct cg_confine_plan *plan;
	int report_fd, hold_fd; /* hold_fd: read until EOF, so all are alive at once */
	int hold_wr;		/* its write end, closed in the child */
	int host_port;
};

static int pooled_child(void *arg)
{
	struct pooled_probe *a = arg;
	if (cg_confine_child(a->plan) != 0)
		_exit(CHILD_CONFINE_FAILED);
	struct stat st;
	int own_port = 0, own = listener(&own_port);
	uint64_t r[3] = { stat("/proc/self/ns/net", &st) == 0 ? (uint64_t)st.st_ino : 0,
			  (uint64_t)connect_port(&a->host_port),
			  (uint64_t)connect_port(&own_port) };
	close(own);
	if (write(a->report_fd, r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
	close(a->hold_wr);
	char b;
	while (read(a->hold_fd, &b, 1) > 0)
		;
	_exit(0);
}

/*
 * The pool (root): each child of cg_confine_spawn is born in a namespace of
 * its own, made ahead, with loopback up and no way to the host's loopback;
 * the spawning thread is back in its own namespace after each spawn. The
 * children stay alive until all have reported, so a namespace number the
 * kernel freed cannot come back and be mistaken for sharing.
 */
Test(confine, pooled_network_namespaces_are_one_per_child)
{
	if (geteuid() != 0)
		cr_skip_test("the pool needs root");
	int port, s = listener(&port);
	struct cg_constraints c = base_cons();
	c.net = CG_NET_NONE;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(cg_netns_pool_start(2), 0);
	for (int i = 0; i < 500 && cg_netns_pool_ready() < 2; i++)
		usleep(10000);
	cr_assert_eq(cg_netns_pool_ready(), 2);
	struct stat home;
	cr_assert_eq(stat("/proc/thread-self/ns/net", &home), 0);
	int hold[2];
	cr_assert_eq(pipe2(hold, O_CLOEXEC), 0);
	enum { N = 4 }; /* two from the pool, then refilled or made by the child */
	uint64_t seen[N];
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		int fds[2];
		cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
		struct pooled_probe a = { p, fds[1], hold[0], hold[1], port };
		pids[i] = cg_confine_spawn(NULL, p, pooled_child, &a);
		cr_assert_gt(pids[i], 0);
		close(fds[1]);
		uint64_t r[3];
		cr_assert_eq(read(fds[0], r, sizeof(r)), (ssize_t)sizeof(r), "child %d", i);
		close(fds[0]);
		cr_assert_neq(r[0], (uint64_t)home.st_ino, "child %d shares the host's namespace",
			      i);
		cr_assert_eq(r[1], (uint64_t)ECONNREFUSED, "child %d reached the host: %d", i,
			     (int)r[1]);
		cr_assert_eq(r[2], 0, "child %d: own loopback %d", i, (int)r[2]);
		for (int j = 0; j < i; j++)
			cr_assert_neq(r[0], seen[j], "children %d and %d share a namespace", j, i);
		seen[i] = r[0];
		struct stat now;
		cr_assert_eq(stat("/proc/thread-self/ns/net", &now), 0);
		cr_assert_eq(now.st_ino, home.st_ino, "the spawning thread did not come home");
	}
	close(hold[1]);
	close(hold[0]);
	for (int i = 0; i < N; i++) {
		int st;
		cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %#x", i, st);
	}
	cg_netns_pool_stop();
	cr_assert_eq(cg_netns_pool_ready(), 0);
	close(s);
	cg_confine_plan_free(p);
}

Test(confine, tcp_port_allow_list)
{
	int port_a, port_b;
	int sa = listener(&port_a), sb = listener(&port_b);
	uint16_t ports[] = { (uint16_t)port_a };
	struct cg_constraints c = base_cons();
	c.net = CG_NET_TCP;
	c.ports = ports;
	c.n_ports = 1;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(run_child(p, NULL, connect_port, &port_a), 0);
	cr_assert_eq(run_child(p, NULL, connect_port, &port_b), EACCES);
	close(sa);
	close(sb);
	cg_confine_plan_free(p);
}

static int open_many(void *arg)
{
	for (int i = 0; i < 64; i++)
		if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0)
			return errno;
	return 0;
}

Test(confine, nofile_limit)
{
	struct cg_constraints c = base_cons();
	c.limits.nofile = 16;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(run_child(p, NULL, open_many, NULL), EMFILE);
	cg_confine_plan_free(p);
}

static int ids_probe(void *arg)
{
	gid_t groups[4];
	if (getuid() != 65534 || geteuid() != 65534 || getgid() != 65534)
		return 1;
	if (getgroups(4, groups) != 0)
		return 2;
	/* No way back up: no_new_privs + dropped ids. */
	return setuid(0) == 0 ? 3 : errno;
}

Test(confine, ids_dropped_groups_cleared)
{
	if (geteuid() != 0)
		cr_skip_test("needs root");
	struct cg_constraints c = base_cons();
	struct cg_confine_ctx ctx = { .set_ids = true, .uid = 65534, .gid = 65534 };
	struct cg_confine_plan *p = prepare1(&c, &ctx);
	cr_assert_eq(run_child(p, NULL, ids_probe, NULL), EPERM);
	cg_confine_plan_free(p);
}

static int escape_and_sleep(void *arg)
{
	int fd = *(int *)arg;
	pid_t pid = fork();
	if (pid == 0) {
		setsid();
		if (fork() == 0) {
			pid_t me = getpid();
			(void)!write(fd, &me, sizeof(me));
			sleep(60);
			_exit(0);
		}
		_exit(0);
	}
	waitpid(pid, NULL, 0);
	return 0;
}

static bool pid_running(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static void tree_kills_setsid_double_fork(void)
{
	struct cg_tree *t = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_tree_new("test-tree", &t, &err), 0);
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	struct cg_constraints c = base_cons();
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(run_child(p, t, escape_and_sleep, &pfd[1]), 0);
	pid_t gc = 0;
	cr_assert_eq(read(pfd[0], &gc, sizeof(gc)), (ssize_t)sizeof(gc));
	cr_assert(pid_running(gc), "grandchild should be running");
	json_t *tr = cg_tree_report(t);
	bool cgroup = strcmp(json_string_value(json_object_get(tr, "mechanism")), "cgroup2") == 0;
	json_decref(tr);
	cr_assert(cgroup, "this machine offers cgroup v2; the tree must use it");
	cr_assert(cg_tree_alive(t), "the escaped grandchild is still in the tree");
	cg_tree_kill(t, SIGKILL);
	for (int i = 0; i < 200 && pid_running(gc); i++)
		usleep(10000);
	cr_assert_not(pid_running(gc), "setsid grandchild survived the tree kill");
	for (int i = 0; i < 200 && cg_tree_alive(t); i++)
		usleep(10000);
	cr_assert_not(cg_tree_alive(t));
	cg_tree_free(t);
	cg_confine_plan_free(p);
	close(pfd[0]);
	close(pfd[1]);
}

Test(confine, tree_kills_setsid_double_fork)
{
	tree_kills_setsid_double_fork(); /* child created inside the cgroup (clone3) */
}

Test(confine, tree_kills_setsid_double_fork_after_join)
{
	use_plain_fork = true; /* fork, then the child migrates itself in */
	tree_kills_setsid_double_fork();
}

static int fork_until_refused(void *arg)
{
	for (int i = 0; i < 200; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return errno;
		if (pid == 0) {
			pause();
			_exit(0);
		}
	}
	return 0;
}

Test(confine, nproc_limit_stops_fork_bomb)
{
	struct cg_tree *t = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_tree_new("test-nproc", &t, &err), 0);
	struct cg_constraints c = base_cons();
	c.limits.nproc = 20;
	struct cg_confine_plan *p = prepare1(&c, NULL);
	cr_assert_eq(run_child(p, t, fork_until_refused, NULL), EAGAIN);
	cg_tree_kill(t, SIGKILL);
	cg_tree_free(t);
	cg_confine_plan_free(p);
}

Test(confine, net_none_unprivileged_via_user_namespace)
{
	/* The non-root path: prepare and apply as uid 65534, in a child. */
	int port, s = listener(&port);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
		    setresuid(65534, 65534, 65534) != 0)
			_exit(201);
		/* A process that dropped from root is not dumpable, which would
		 * leave /proc/self/uid_map root-owned; a real unprivileged
		 * daemon is dumpable. */
		(void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
		struct cg_constraints c = base_cons();
		c.net = CG_NET_NONE;
		const struct cg_constraints *sets[1] = { &c };
		struct cg_confine_plan *p = NULL;
		struct cg_reply *err = NULL;
		if (cg_confine_prepare(sets, 1, NULL, &p, &err) != 0)
			_exit(err->id == CG_R_CONSTRAINT_UNENFORCEABLE ? 202 : 203);
		if (connect_port(&port) != 0)
			_exit(204); /* the host loopback is reachable before */
		int e = cg_confine_child(p);
		if (e != 0)
			_exit(e == ECONNREFUSED ? 205 : e);
		_exit(connect_port(&port));
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	if (WEXITSTATUS(st) == 202)
		cr_skip_test("user namespaces are disabled here (refused, as documented)");
	cr_assert_eq(WEXITSTATUS(st), ECONNREFUSED, "exit %d", WEXITSTATUS(st));
	close(s);
}

/* ---- the view --------------------------------------------------------------- */

/* Fork with the plan's namespaces, exec argv in the view; the command's status. */
static int run_in_view(const struct cg_confine_plan *plan, char *const argv[])
{
	struct cg_tree *tree = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_tree_new("unit-view", &tree, &err), 0);
	pid_t pid = cg_confine_fork(tree, plan);
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char *envp[] = { "PATH=/usr/bin:/bin", NULL };
		if (cg_tree_child_join(tree, 0) != 0 || chdir(inside) != 0)
			_exit(CHILD_CONFINE_FAILED);
		cg_confine_exec(plan, argv[0], argv, envp, view_child_failed, NULL, -1);
	}
	cg_tree_add(tree, pid);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cg_tree_free(tree);
	cr_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

Test(confine, view_report_names_what_is_writable_protected_and_hidden, .init = mk_tree,
     .fini = rm_tree)
{
	char git[160], hooks[180];
	snprintf(git, sizeof(git), "%s/.git", inside);
	snprintf(hooks, sizeof(hooks), "%s/hooks", git);
	cr_assert_eq(mkdir(git, 0755), 0);
	struct cg_constraints c = base_cons();
	const char *const rd[] = { "/" }, *const wr[] = { inside };
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	c.write = wr;
	c.n_write = 1;
	struct cg_confine_ctx ctx = { .workspace = inside, .cwd = inside, .view = true };
	/* Without git: write, .git is read-only as a whole (and nothing is made in it). */
	struct cg_confine_plan *p = prepare1(&c, &ctx);
	json_t *rep = cg_confine_report(p);
	json_t *view = json_object_get(rep, "view");
	cr_assert_not_null(view);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(view, "protected"), 0)),
			 git);
	cr_assert_eq(json_array_size(json_object_get(view, "pinned")), 0);
	struct stat st;
	cr_assert_neq(stat(hooks, &st), 0);
	json_decref(rep);
	cg_confine_plan_free(p);
	/* With it, .git is pinned, and a missing .git/hooks is created so that it can be covered. */
	c.git_write = true;
	p = prepare1(&c, &ctx);
	rep = cg_confine_report(p);
	view = json_object_get(rep, "view");
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(view, "writable"), 0)),
			 inside);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(view, "pinned"), 0)),
			 git);
	cr_assert_eq(stat(hooks, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(view, "protected"), 0)),
			 hooks);
	bool shadow = false;
	json_t *h;
	size_t i;
	json_array_foreach(json_object_get(view, "hidden"), i, h) shadow |=
	    strcmp(json_string_value(h), "/etc/shadow") == 0;
	cr_assert(shadow);
	json_decref(rep);
	/* A plan with a view cannot be applied by a plain fork. */
	cr_assert_eq(cg_confine_child(p), EINVAL);
	cg_confine_plan_free(p);
	cr_assert_eq(rmdir(hooks), 0);
	cr_assert_eq(rmdir(git), 0);
}

Test(confine, view_makes_root_read_only_and_keeps_the_write_set, .init = mk_tree, .fini = rm_tree)
{
	struct cg_constraints c = base_cons();
	const char *const rd[] = { "/" }, *const wr[] = { inside };
	c.fs = true;
	c.read = rd;
	c.n_read = 1;
	c.write = wr;
	c.n_write = 1;
	struct cg_confine_ctx ctx = { .workspace = inside, .cwd = inside, .view = true };
	struct cg_confine_plan *p = prepare1(&c, &ctx);
	char script[512];
	/* 0 only if: inside writable, outside read-only, /etc/shadow unreadable,
	 * /dev/null writable, pid 2, hostname callgate. */
	snprintf(script, sizeof(script),
		 "echo a > %s/a && ! (echo b > %s/b) 2>/dev/null && ! cat /etc/shadow "
		 "2>/dev/null && echo x > /dev/null && [ $$ = 2 ] && [ \"$(cat "
		 "/proc/sys/kernel/hostname)\" = callgate ]",
		 inside, outside);
	char *argv[] = { "/bin/sh", "-c", script, NULL };
	cr_assert_eq(run_in_view(p, argv), 0);
	cg_confine_plan_free(p);
	char b[200];
	snprintf(b, sizeof(b), "%s/b", outside);
	cr_assert_neq(access(b, F_OK), 0);
}

Test(confine, per_stage_plans_differ_and_report_every_stage, .init = mk_tree, .fini = rm_tree)
{
	struct cg_constraints ro = base_cons(), rw = base_cons();
	const char *const rd[] = { "/" }, *const wr[] = { inside };
	ro.fs = rw.fs = true;
	ro.read = rw.read = rd;
	ro.n_read = rw.n_read = 1;
	rw.write = wr;
	rw.n_write = 1;
	const struct cg_constraints *sets[2] = { &ro, &rw };
	const uint64_t stages[2] = { 1u << 0, 1u << 1 };
	struct cg_confine_ctx ctx = { .workspace = inside, .cwd = inside, .view = true };
	struct cg_confine_plan *p = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_confine_prepare_stages(sets, stages, 2, 2, &ctx, &p, &err), 0);
	cr_assert_neq(cg_confine_stage_plan(p, 0), cg_confine_stage_plan(p, 1));
	json_t *rep = cg_confine_report(p);
	json_t *st = json_object_get(rep, "stages");
	cr_assert_eq(json_array_size(st), 2);
	cr_assert_eq(json_array_size(json_object_get(json_object_get(json_array_get(st, 0), "view"),
						     "writable")),
		     0);
	cr_assert_eq(json_array_size(json_object_get(json_object_get(json_array_get(st, 1), "view"),
						     "writable")),
		     1);
	json_decref(rep);
	cg_confine_plan_free(p);
	/* Every set for every stage: one plan. */
	const uint64_t all[2] = { 0, 0 };
	cr_assert_eq(cg_confine_prepare_stages(sets, all, 2, 2, &ctx, &p, &err), 0);
	cr_assert_eq(cg_confine_stage_plan(p, 0), cg_confine_stage_plan(p, 1));
	cg_confine_plan_free(p);
}
