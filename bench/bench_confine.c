/* SPDX-License-Identifier: MIT */
/*
 * bench_confine — what confinement costs per exec, in one run, side by side:
 * /bin/true started the way the runner starts a stage (fork, confine in
 * the child, execve, waitpid), unconfined and under each confinement, next
 * to bubblewrap and sudo started with posix_spawn.
 *
 * Each confined iteration includes the parent's cg_confine_prepare and
 * cg_confine_plan_free, because the daemon pays those per call too.
 *
 * The figures issue 11 asks for side by side: bare posix_spawn of /bin/true,
 * today's confinement of an interpreter (Landlock fs + net: none + seccomp),
 * the same in the full view (cg_confine_fork + cg_confine_exec: mount, pid,
 * UTS, IPC namespaces built per stage), and bubblewrap building a similar
 * world (--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all).
 *
 * The last row is net: none as the daemon starts it (cg_confine_spawn): born
 * in a network namespace the pool made ahead (netns.c), against the row that
 * makes its own in the child.
 *
 * Usage: bench_confine [ITERATIONS]   (default 400; run as root)
 * Prints median and p99 in microseconds, and the median's delta and ratio
 * against the unconfined fork+exec.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "confine.h"
#include "netns.h"
#include "util.h"

extern char **environ;

enum mode { M_PLAIN, M_SECCOMP, M_LANDLOCK, M_NETNS, M_SPAWN, M_TODAY, M_VIEW, M_NETPOOL };
enum tree { T_NONE, T_JOIN, T_CLONE3 };

struct variant {
	const char *name;
	enum mode mode;
	enum tree tree;	   /* none; fork + join (migration); clone3 into the cgroup */
	char *const *argv; /* for M_SPAWN */
};

static const char *const rd[] = { "/" };
static const char *const wr[] = { "/tmp" };
static const char *const ex[] = { "/usr", "/bin", "/lib", "/lib64" };
static const uint16_t ports[] = { 80, 443 };

/* cg_confine_exec's failure report: 112 confining, 113 exec. */
__attribute__((noreturn)) static void view_failed(int fd, int step, int err)
{
	(void)fd;
	(void)err;
	_exit(112 + step);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int last_status;			       /* wait status of the last failed run */
static volatile int64_t *child_ns;	       /* shared page: the child's cg_confine_child time */
static int64_t last_prepare_ns, last_child_ns; /* of the last successful run */

/* Median ns of n back-to-back prepare+free of the mode's plan (no fork between). */
static double prepare_alone(enum mode m, int n)
{
	struct cg_constraints c = { 0 };
	c.limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
				       CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	c.timeout_ms = CG_LIMIT_UNSET;
	if (m == M_LANDLOCK) {
		c.fs = true;
		c.read = rd;
		c.n_read = 1;
		c.write = wr;
		c.n_write = 1;
		c.exec = ex;
		c.n_exec = 4;
		c.net = CG_NET_TCP;
		c.ports = ports;
		c.n_ports = 2;
	} else if (m == M_NETNS) {
		c.net = CG_NET_NONE;
	}
	const struct cg_constraints *sets[1] = { &c };
	int64_t *t = calloc((size_t)n, sizeof(int64_t));
	if (!t)
		return -1;
	for (int i = 0; i < n; i++) {
		struct cg_confine_plan *plan = NULL;
		struct cg_reply *err = NULL;
		int64_t t0 = cg_now_mono_ns();
		if (cg_confine_prepare(sets, 1, NULL, &plan, &err) != 0) {
			cg_reply_free(err);
			free(t);
			return -1;
		}
		cg_confine_plan_free(plan);
		t[i] = cg_now_mono_ns() - t0;
	}
	qsort(t, (size_t)n, sizeof(int64_t), cmp_i64);
	double med = (double)t[n / 2];
	free(t);
	return med;
}

/* The child of a pooled run (cg_confine_spawn): as once()'s, born in the namespace. */
struct pool_child_arg {
	struct cg_tree *tree;
	const struct cg_confine_plan *plan;
};

static int pool_child(void *p)
{
	const struct pool_child_arg *a = p;
	char *const argv[] = { "/bin/true", NULL };
	if (a->tree && cg_tree_child_join(a->tree, 0) != 0)
		_exit(111);
	int64_t c0 = cg_now_mono_ns();
	if (cg_confine_child(a->plan) != 0)
		_exit(112);
	*child_ns = cg_now_mono_ns() - c0;
	execve(argv[0], argv, environ);
	_exit(113);
}

/* One iteration; returns elapsed ns, or -1 when the run failed. */
static int64_t once(const struct variant *v)
{
	struct cg_constraints c = { 0 };
	c.limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
				       CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	c.timeout_ms = CG_LIMIT_UNSET;
	if (v->mode == M_LANDLOCK) {
		c.fs = true;
		c.read = rd;
		c.n_read = 1;
		c.write = wr;
		c.n_write = 1;
		c.exec = ex;
		c.n_exec = 4;
		c.net = CG_NET_TCP;
		c.ports = ports;
		c.n_ports = 2;
	} else if (v->mode == M_NETNS || v->mode == M_NETPOOL) {
		c.net = CG_NET_NONE;
	}
	if (v->mode == M_TODAY || v->mode == M_VIEW) {
		c.fs = true;
		c.read = rd;
		c.n_read = 1;
		c.write = wr;
		c.n_write = 1;
		c.exec = ex;
		c.n_exec = 4;
		c.net = CG_NET_NONE;
	}
	char cwd[4096];
	if (!getcwd(cwd, sizeof(cwd)))
		return -1;
	struct cg_confine_ctx ctx = {
		.workspace = cwd, .cwd = cwd, .home = getenv("HOME"), .view = v->mode == M_VIEW
	};
	const struct cg_constraints *sets[1] = { &c };
	struct cg_confine_plan *plan = NULL;
	struct cg_tree *tree = NULL;
	struct cg_reply *err = NULL;
	int status = 0;
	int64_t t0 = cg_now_mono_ns();
	if (v->mode == M_SPAWN) {
		pid_t pid;
		if (posix_spawn(&pid, v->argv[0], NULL, NULL, v->argv, environ) != 0 ||
		    waitpid(pid, &status, 0) != pid)
			return -1;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			return cg_now_mono_ns() - t0;
		last_status = status;
		return -1;
	}
	if (v->mode != M_PLAIN && cg_confine_prepare(sets, 1, &ctx, &plan, &err) != 0) {
		cg_reply_free(err);
		return -1;
	}
	int64_t t_prep = cg_now_mono_ns() - t0;
	if (v->tree != T_NONE && cg_tree_new("bench", &tree, &err) != 0) {
		cg_reply_free(err);
		cg_confine_plan_free(plan);
		return -1;
	}
	struct pool_child_arg pa = { tree, plan };
	pid_t pid = v->mode == M_NETPOOL  ? cg_confine_spawn(tree, plan, pool_child, &pa)
		    : v->tree == T_CLONE3 ? cg_confine_fork(tree, plan)
					  : fork();
	if (pid == 0) {
		/* 111-113 say which step failed, for the failure line. */
		char *const argv[] = { "/bin/true", NULL };
		if (tree && cg_tree_child_join(tree, 0) != 0)
			_exit(111);
		if (v->mode == M_VIEW) { /* the view's own time is in the whole-exec figure */
			*child_ns = 0;
			cg_confine_exec(plan, argv[0], argv, environ, view_failed, NULL, -1);
		}
		int64_t c0 = cg_now_mono_ns();
		if (cg_confine_child(plan) != 0)
			_exit(112);
		*child_ns = cg_now_mono_ns() - c0;
		execve(argv[0], argv, environ);
		_exit(113);
	}
	if (pid > 0) {
		cg_tree_add(tree, pid);
		(void)waitpid(pid, &status, 0);
	}
	cg_tree_free(tree);
	cg_confine_plan_free(plan);
	int64_t dt = cg_now_mono_ns() - t0;
	if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		last_prepare_ns = t_prep;
		last_child_ns = *child_ns;
		return dt;
	}
	last_status = pid > 0 ? status : -1;
	return -1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 400;
	if (n < 10)
		n = 10;
	/* As the daemon does (root): the pooled variant draws on it, the others never. */
	bool pooled = cg_netns_pool_start(CG_NETNS_POOL_SIZE) == 0;
	char *bwrap[] = { "/usr/bin/bwrap", "--ro-bind", "/", "/",
			  "--unshare-net",  "/bin/true", NULL };
	char *sudo[] = { "/usr/bin/sudo", "-n", "/bin/true", NULL };
	char *bare[] = { "/bin/true", NULL };
	char *bwrap_all[] = { "/usr/bin/bwrap", "--ro-bind", "/",     "/",	 "--dev",
			      "/dev",		"--proc",    "/proc", "--tmpfs", "/tmp",
			      "--unshare-all",	"/bin/true", NULL };
	const struct variant vs[] = {
		{ "fork+exec, unconfined", M_PLAIN, T_NONE, NULL },
		{ "+ cgroup tree, fork + join", M_PLAIN, T_JOIN, NULL },
		{ "+ cgroup tree, clone3 into it", M_PLAIN, T_CLONE3, NULL },
		{ "tree + nnp + seccomp (empty set)", M_SECCOMP, T_CLONE3, NULL },
		{ "tree + Landlock fs+net + seccomp", M_LANDLOCK, T_CLONE3, NULL },
		{ "tree + net: none + seccomp", M_NETNS, T_CLONE3, NULL },
		{ "bwrap --ro-bind / / --unshare-net", M_SPAWN, T_NONE, bwrap },
		{ "sudo -n /bin/true", M_SPAWN, T_NONE, sudo },
		{ "posix_spawn /bin/true (bare)", M_SPAWN, T_NONE, bare },
		{ "today: Landlock fs + net none + seccomp", M_TODAY, T_CLONE3, NULL },
		{ "full view + today's confinement", M_VIEW, T_CLONE3, NULL },
		{ "bwrap ro / dev proc tmpfs unshare-all", M_SPAWN, T_NONE, bwrap_all },
		/* The daemon's way (cg_confine_spawn): born in a namespace made ahead. */
		{ "tree + net: none (pooled) + seccomp", M_NETPOOL, T_CLONE3, NULL },
	};
	enum { V_BARE = 8, V_TODAY, V_VIEW, V_BWRAP };
	double meds[16] = { 0 };
	size_t nv = sizeof(vs) / sizeof(vs[0]);
	int64_t *samples = calloc((size_t)n * nv, sizeof(int64_t));
	int64_t *steps = calloc((size_t)n * nv, sizeof(int64_t));  /* prepare + child confine */
	int64_t *preps = calloc((size_t)n * nv, sizeof(int64_t));  /* parent prepare */
	int64_t *childs = calloc((size_t)n * nv, sizeof(int64_t)); /* child cg_confine_child */
	child_ns = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!samples || !steps || !preps || !childs || child_ns == MAP_FAILED)
		return 1;
	/* Interleave the variants so drift (cache, frequency) hits all alike. */
	for (size_t v = 0; v < nv; v++)
		(void)once(&vs[v]); /* warm-up */
	int n_ok[16] = { 0 }, n_failed[16] = { 0 }, fail_status[16] = { 0 };
	for (int i = 0; i < n; i++)
		for (size_t v = 0; v < nv; v++) {
			/* A variant that keeps failing (not installed) stops being tried. */
			if (n_failed[v] > 5 && n_ok[v] == 0)
				continue;
			int64_t dt = once(&vs[v]);
			if (dt < 0) {
				n_failed[v]++;
				fail_status[v] = last_status;
				continue;
			}
			steps[v * (size_t)n + (size_t)n_ok[v]] = last_prepare_ns + last_child_ns;
			preps[v * (size_t)n + (size_t)n_ok[v]] = last_prepare_ns;
			childs[v * (size_t)n + (size_t)n_ok[v]] = last_child_ns;
			samples[v * (size_t)n + (size_t)n_ok[v]++] = dt;
		}
	printf("bench_confine: %d iterations each, /bin/true, times in microseconds\n", n);
	if (!pooled)
		printf("(not root: no network namespace pool; the pooled row makes its own)\n");
	printf("%-36s %10s %10s %12s %8s\n", "variant", "median", "p99", "d median", "ratio");
	double base = 0;
	for (size_t v = 0; v < nv; v++) {
		int k = n_ok[v];
		if (n_failed[v])
			printf("%-36s %d run(s) failed, last wait status %#x\n", vs[v].name,
			       n_failed[v], (unsigned)fail_status[v]);
		if (k == 0)
			continue;
		int64_t *s = samples + v * (size_t)n;
		qsort(s, (size_t)k, sizeof(int64_t), cmp_i64);
		double med = (double)s[k / 2] / 1000.0, p99 = (double)s[(k * 99) / 100] / 1000.0;
		if (v == 0 || base == 0)
			base = med;
		printf("%-36s %10.1f %10.1f %+12.1f %7.2fx\n", vs[v].name, med, p99, med - base,
		       base > 0 ? med / base : 0.0);
		meds[v] = med;
	}
	if (meds[V_BARE] > 0 && meds[V_VIEW] > 0)
		printf("\nissue 11: bare spawn %.1f, today %.1f, full view %.1f, bwrap %.1f us; "
		       "view = %.2fx bare spawn, %.2fx bwrap\n",
		       meds[V_BARE], meds[V_TODAY], meds[V_VIEW], meds[V_BWRAP],
		       meds[V_VIEW] / meds[V_BARE],
		       meds[V_BWRAP] > 0 ? meds[V_VIEW] / meds[V_BWRAP] : 0);
	/*
	 * The whole-exec figures above carry the machine's scheduling noise;
	 * the confinement's own cost is measured directly too: the parent's
	 * cg_confine_prepare plus the child's cg_confine_child, per exec.
	 */
	printf("\nconfinement's own cost per exec, microseconds: parent cg_confine_prepare "
	       "and child cg_confine_child\n(medians of each part; d = against the empty set, "
	       "which is no_new_privs + seccomp)\n");
	printf("%-36s %9s %9s %9s %9s %9s %9s\n", "variant", "prep med", "prep p99", "child med",
	       "child p99", "sum med", "d sum");
	double sbase = -1;
	for (size_t v = 0; v < nv; v++) {
		int k = n_ok[v];
		if (k == 0 || vs[v].mode == M_SPAWN || vs[v].mode == M_PLAIN)
			continue;
		int64_t *pp = preps + v * (size_t)n, *cc = childs + v * (size_t)n;
		qsort(pp, (size_t)k, sizeof(int64_t), cmp_i64);
		qsort(cc, (size_t)k, sizeof(int64_t), cmp_i64);
		double pm = (double)pp[k / 2] / 1000.0, p9 = (double)pp[(k * 99) / 100] / 1000.0;
		double cm = (double)cc[k / 2] / 1000.0, c9 = (double)cc[(k * 99) / 100] / 1000.0;
		if (sbase < 0)
			sbase = pm + cm;
		printf("%-36s %9.1f %9.1f %9.1f %9.1f %9.1f %+9.1f\n", vs[v].name, pm, p9, cm, c9,
		       pm + cm, pm + cm - sbase);
	}
	free(preps);
	free(childs);
	/* Without forks in between, the parent's part has no copy-on-write faults. */
	double pe = prepare_alone(M_SECCOMP, n), pl = prepare_alone(M_LANDLOCK, n),
	       pn = prepare_alone(M_NETNS, n);
	printf("\nprepare+free alone, %d back-to-back, median microseconds: empty set %.1f, "
	       "Landlock fs+net %.1f (%+.1f), net none %.1f (%+.1f)\n",
	       n, pe / 1000.0, pl / 1000.0, (pl - pe) / 1000.0, pn / 1000.0, (pn - pe) / 1000.0);
	free(steps);
	free(samples);
	return 0;
}
