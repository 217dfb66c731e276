/* SPDX-License-Identifier: MIT */
/*
 * confine — turn a verdict's constraint sets into kernel confinement for a
 * command, and keep the per-call process tree that the deadline kills.
 *
 * The parent (cg_confine_prepare) does everything that may allocate or
 * fail slowly: folds the constraint sets, expands ${workspace}/${cwd}/
 * ${home}, checks what the running kernel can enforce, compiles the seccomp
 * filter, and writes the report. The forked child (cg_confine_child) only
 * makes async-signal-safe calls, in this order, each for a reason:
 *
 *   1. umask          the caller's (src/kernel/run.c), else private (077).
 *      mount ns       a privileged call (no view, as root): symlinks under the
 *                     workspaces, the peer's home and /tmp are not followed
 *                     (cg_view_nosymfollow); needs CAP_SYS_ADMIN.
 *   2. network ns     needs CAP_SYS_ADMIN, so before any privilege is dropped
 *                     (skipped when the child was born in a pooled one:
 *                     cg_confine_spawn, netns.c).
 *   3. pids.max       root ignores RLIMIT_NPROC; the cgroup limit is written
 *                     while we still may (root-owned file).
 *   4. rlimits        hard = soft, so an unprivileged command cannot raise them
 *                     (RLIMIT_NOFILE waits until after step 7: Landlock's
 *                     O_PATH fds stay open until execve).
 *   5. groups, gid, uid   setgroups(0) first: after setuid we could not, and
 *                     a kept supplementary group (e.g. docker, disk) is a
 *                     ready-made escalation.
 *   6. no_new_privs   setuid binaries and file capabilities can no longer
 *                     raise privilege; required by both Landlock and seccomp.
 *   7. Landlock       one ruleset per constraint set; stacked domains give
 *                     exactly the intersection of the sets.
 *   8. seccomp        last, because landlock_restrict_self is itself a syscall.
 *
 * Invariants:
 *  - cg_confine_child MUST only make async-signal-safe calls.
 *  - A constraint the kernel cannot enforce MUST make prepare fail unless
 *    its set is best_effort; a downgrade MUST appear in the report.
 *  - Every step in the child MUST fail closed: an error is returned and the
 *    caller exits instead of exec'ing.
 *  - The tree MUST contain every descendant (per-call cgroup) when cgroups
 *    are available; the process-group fallback's limit is reported.
 */
#include "confine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <mntent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "landlock.h"
#include "netns.h"
#include "seccomp_filter.h"
#include "util.h"
#include "view.h"
#include "watch.h"

#define CONFINE_MAX_PATHS 256 /* per plan, all sets together */
#define CONFINE_VIEW_EXTRA                                                                         \
	6 /* Landlock rules a set gets beside its own (devices; shm, tmp in a view) */

bool cg_confine_exec_defaulted(const json_t *set)
{
	const json_t *exec = json_object_get(set, "exec");
	return json_is_array(exec) && json_array_size(exec) == 0;
}

#define CONFINE_UMASK 077
/* How long a stage's command waits for its permit before it gives up (EIO, ETIMEDOUT). */
#define CONFINE_GATE_WAIT_MS 60000

struct cg_confine_plan {
	bool confined; /* any constraint set: no_new_privs + seccomp */
	mode_t umask;  /* step 1 */
	int abi;       /* Landlock ABI of the running kernel */
	size_t n_sets;
	struct cg_landlock_ruleset *sets;
	struct cg_landlock_path *paths; /* all sets' paths; sets point into it */
	char **strings;			/* owned expanded path strings */
	size_t n_strings;
	uint16_t *ports; /* all sets' ports; sets point into it */
	bool netns;
	bool netns_userns;
	/* net: a host list: the sets to judge by, and where the child sends its listener. */
	size_t n_egress;
	const struct cg_constraints *egress[CG_VERDICT_MAX_CONS];
	int egress_fd;		/* the child's end of the proxy's socketpair, or -1 */
	_Atomic uint32_t *gate; /* the command execs only once it is GO, or NULL */
	int view_stall_ms;	/* CALLGATE_TEST_VIEW_STALL_MS (tests only), read with the plan */
	uid_t outer_uid;
	gid_t outer_gid;
	struct cg_limits limits;
	bool nproc_cgroup; /* enforce nproc with pids.max (the command runs as root) */
	char **nosym;	   /* no view, as root: dirs mounted nosymfollow (owned) */
	size_t n_nosym;
	char **rw; /* and, bound by a set: the write trees; every other mount read-only (owned) */
	size_t n_rw;
	char *nosym_cwd; /* entered again through those mounts (owned) */
	int64_t timeout_ms;
	bool clear_groups;
	bool set_ids;
	uid_t uid;
	gid_t gid;
	char *peer_cwd; /* with set_ids: the cwd, entered again as the peer (owned) */
	const struct sock_fprog *seccomp;
	const struct sock_fprog *seccomp_root; /* stacked on it, or NULL */
	struct cg_view *view; /* the call's world, or NULL (privileged, or not asked for) */
	size_t n_stage_plans; /* > 0: one plan per stage, each with its own terms and view */
	struct cg_confine_plan **stage_plans;
	json_t *report;
};

/* ---- the process tree: per-call cgroup, or process group ------------- */

struct cg_tree {
	pid_t pgid;
	int cg_fd;		   /* the call's cgroup v2 directory, or -1 */
	int procs_fd;		   /* its cgroup.procs (write "0" to join), or -1 */
	int pids_procs_fd;	   /* unused (kept -1): the pids cgroup is joined lazily by path */
	int pids_base_fd;	   /* parent of the v1 pids cgroup (for rmdir), or -1 */
	char name[96];		   /* directory name under the callgate cgroups */
	char pids_max[PATH_MAX];   /* path of pids.max for the child, or "" */
	char pids_procs[PATH_MAX]; /* v1 pids cgroup.procs to join (by path), or "" */
};

/* Where per-call cgroups go; detected once per process. */
static struct {
	int v2_base_fd;	     /* <cgroup2 mount>/<own cgroup>/callgate, or -1 */
	bool v2_pids;	     /* pids controller enabled in v2 below the base */
	int v1_pids_base_fd; /* <pids v1 mount>/<own cgroup>/callgate, or -1 */
	char v1_pids_base[PATH_MAX];
	char v2_base[PATH_MAX];
	char why_not[160]; /* why there is no cgroup tree, for the report */
	size_t killed;	   /* calls of daemons that are gone killed by the sweep */
} cgs = { -1, false, -1, "", "", "", 0 };
static pthread_once_t cgs_once = PTHREAD_ONCE_INIT;
static atomic_ulong tree_counter;

/*
 * Child-side state, per thread: a child that shares the daemon's memory
 * (cg_confine_spawn) runs on its suspended parent thread's TLS, so these
 * never cross between concurrent calls. Every child path assigns them.
 */
/* Set in the child by cg_tree_child_join so cg_confine_child finds pids.max. */
static __thread const struct cg_tree *joined_tree;
/* Set in the child by cg_tree_fork when clone3 already put it in the cgroup. */
static __thread const struct cg_tree *born_in;
/*
 * Set in the child that shares the daemon's memory until it execs: the
 * word its command's exec clears (struct shared_start), else NULL.
 */
static __thread pid_t *shared_exec_word;
/* Set around the clone: the child is born in a pooled network namespace. */
static __thread bool netns_given;
static atomic_bool clone3_unusable;
/* callgate-init, opened once (cg_confine_init_open), or -1: pid 1 stays a copy. */
static _Atomic int init_fd = -1;

/* The path of this process's cgroup in the hierarchy whose line matches key. */
static int own_cgroup(const char *key, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -1;
	char line[PATH_MAX + 64];
	int rc = -1;
	size_t klen = strlen(key);
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');
		if (!p || strncmp(p + 1, key, klen) != 0 || p[1 + klen] != ':')
			continue;
		char *path = p + 2 + klen;
		path[strcspn(path, "\n")] = 0;
		if (snprintf(out, len, "%s", strcmp(path, "/") == 0 ? "" : path) < (int)len)
			rc = 0;
		break;
	}
	(void)fclose(f);
	return rc;
}

/* mkdir base (EEXIST is fine) and open it; -1 with errno. */
static int open_base(const char *mount, const char *own, char *out, size_t len)
{
	if (snprintf(out, len, "%s%s/callgate", mount, own) >= (int)len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (mkdir(out, 0700) != 0 && errno != EEXIST)
		return -1;
	return open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static void kill_cgroup(int cg_fd);

/*
 * A call a daemon that is gone left running: nothing enforces its deadline
 * or records what it does any more, so it is killed (its trace was marked
 * incomplete when the journal was opened). Then its cgroup is removed once
 * the kernel has finished the exits (at most a second).
 */
static void kill_leftover(int base_fd, const char *name)
{
	int fd = openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	kill_cgroup(fd);
	(void)close(fd);
	int i = 0;
	while (unlinkat(base_fd, name, AT_REMOVEDIR) != 0 && errno == EBUSY && i++ < 100) {
		struct timespec ts = { 0, 10 * 1000000L };
		(void)nanosleep(&ts, NULL);
	}
	cgs.killed++;
}

/*
 * Per-call cgroups a crashed daemon left behind: removed, and what still
 * runs in them killed first (best effort).
 */
static void sweep(int base_fd)
{
	int fd = dup(base_fd);
	if (fd < 0)
		return;
	DIR *d = fdopendir(fd);
	if (!d) {
		(void)close(fd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		/*
		 * Only the cgroups of daemons that are gone: another live process
		 * may have just created its (still empty) call cgroup, and removing
		 * it would make its child's join fail.
		 */
		char *end;
		long owner = strtol(e->d_name, &end, 10);
		if (end == e->d_name || *end != '-' || owner <= 0)
			continue;
		/* Ours only when the pid was reused (a container's restart): we made none yet. */
		if (owner != (long)getpid() && (kill((pid_t)owner, 0) == 0 || errno != ESRCH))
			continue;
		if (unlinkat(base_fd, e->d_name, AT_REMOVEDIR) != 0 && errno == EBUSY)
			kill_leftover(base_fd, e->d_name);
	}
	(void)closedir(d);
}

static void detect_cgroups(void)
{
	char own[PATH_MAX];
	struct statfs sf;
	const char *v2 = NULL;
	if (statfs("/sys/fs/cgroup/unified", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
		v2 = "/sys/fs/cgroup/unified"; /* hybrid layout */
	else if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
		v2 = "/sys/fs/cgroup"; /* unified layout */
	if (!v2) {
		(void)snprintf(cgs.why_not, sizeof(cgs.why_not), "no cgroup v2 mount");
		return;
	}
	if (own_cgroup("", own, sizeof(own)) != 0) {
		(void)snprintf(cgs.why_not, sizeof(cgs.why_not), "own cgroup v2 path unknown");
		return;
	}
	cgs.v2_base_fd = open_base(v2, own, cgs.v2_base, sizeof(cgs.v2_base));
	if (cgs.v2_base_fd < 0) {
		(void)snprintf(cgs.why_not, sizeof(cgs.why_not),
			       "cannot create the callgate "
			       "cgroup: %s",
			       cg_errno_name(errno));
		return;
	}
	sweep(cgs.v2_base_fd);
	/* pids in v2 if it can be delegated to our subtree; else the v1 hierarchy. */
	int fd = openat(cgs.v2_base_fd, "cgroup.subtree_control", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		cgs.v2_pids = cg_write_all(fd, "+pids", 5) == 0;
		(void)close(fd);
	}
	if (!cgs.v2_pids && statfs("/sys/fs/cgroup/pids", &sf) == 0 &&
	    sf.f_type == CGROUP_SUPER_MAGIC && own_cgroup("pids", own, sizeof(own)) == 0) {
		cgs.v1_pids_base_fd = open_base("/sys/fs/cgroup/pids", own, cgs.v1_pids_base,
						sizeof(cgs.v1_pids_base));
		if (cgs.v1_pids_base_fd >= 0)
			sweep(cgs.v1_pids_base_fd);
	}
}

static bool have_cgroup_tree(void)
{
	(void)pthread_once(&cgs_once, detect_cgroups);
	return cgs.v2_base_fd >= 0;
}

size_t cg_confine_sweep_gone(void)
{
	(void)have_cgroup_tree();
	return cgs.killed;
}

static bool have_pids_cgroup(void)
{
	return have_cgroup_tree() && (cgs.v2_pids || cgs.v1_pids_base_fd >= 0);
}

const char *cg_confine_pids_note(void)
{
	if (!have_cgroup_tree() || cgs.v2_pids || cgs.v1_pids_base_fd < 0)
		return NULL;
	FILE *f = setmntent("/proc/self/mounts", "re");
	if (!f)
		return NULL; /* nothing to say that would be sure */
	bool favor = false;
	struct mntent m;
	char buf[4096];
	while (!favor && getmntent_r(f, &m, buf, sizeof(buf)))
		favor = strcmp(m.mnt_type, "cgroup2") == 0 && hasmntopt(&m, "favordynmods");
	(void)endmntent(f);
	return favor ? NULL
		     : "calls with an nproc limit join their pids cgroup on cgroup v1 "
		       "(this host's pids controller is not on cgroup2); without "
		       "favordynmods on the cgroup2 mount each join waits for an RCU grace "
		       "period, 10-15 ms a call on a 2-core VM (docs/limits.md)";
}

int cg_tree_new(const char *trace_id, struct cg_tree **out, struct cg_reply **err)
{
	int saved = 0;
	struct cg_tree *t = calloc(1, sizeof(*t));
	if (!t) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating process tree");
		return -1;
	}
	t->cg_fd = t->procs_fd = t->pids_procs_fd = t->pids_base_fd = -1;
	if (!have_cgroup_tree()) {
		*out = t; /* process-group fallback; the report says so */
		return 0;
	}
	/* Only [A-Za-z0-9-] of the trace id: it becomes a directory name. */
	char tid[40] = "";
	size_t k = 0;
	for (const char *p = trace_id ? trace_id : ""; *p && k < sizeof(tid) - 1; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '-')
			tid[k++] = *p;
	tid[k] = 0;
	(void)snprintf(t->name, sizeof(t->name), "%ld-%lu%s%s", (long)getpid(),
		       (unsigned long)atomic_fetch_add(&tree_counter, 1), k ? "-" : "", tid);
	if (mkdirat(cgs.v2_base_fd, t->name, 0700) != 0) {
		saved = errno;
		goto fail;
	}
	t->cg_fd = openat(cgs.v2_base_fd, t->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->cg_fd < 0 ||
	    (t->procs_fd = openat(t->cg_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0) {
		saved = errno;
		goto fail;
	}
	if (cgs.v2_pids) {
		if (snprintf(t->pids_max, sizeof(t->pids_max), "%s/%s/pids.max", cgs.v2_base,
			     t->name) >= (int)sizeof(t->pids_max))
			t->pids_max[0] = 0;
	} else if (cgs.v1_pids_base_fd >= 0 && mkdirat(cgs.v1_pids_base_fd, t->name, 0700) == 0) {
		t->pids_base_fd = cgs.v1_pids_base_fd;
		/*
		 * Joined lazily, by the child, only when the plan needs pids.max:
		 * each cgroup migration costs the caller a few hundred
		 * microseconds (an RCU grace period), so calls without an
		 * nproc limit for root must not pay for a second one.
		 */
		if (snprintf(t->pids_max, sizeof(t->pids_max), "%s/%s/pids.max", cgs.v1_pids_base,
			     t->name) >= (int)sizeof(t->pids_max) ||
		    snprintf(t->pids_procs, sizeof(t->pids_procs), "%s/%s/cgroup.procs",
			     cgs.v1_pids_base, t->name) >= (int)sizeof(t->pids_procs))
			t->pids_max[0] = t->pids_procs[0] = 0;
	}
	*out = t;
	return 0;
fail:
	*err = cg_reply_new(CG_R_CONFINE_SETUP_FAILED, "{s:s,s:s}", "detail",
			    "creating the per-call cgroup", "errno_name", cg_errno_name(saved));
	cg_tree_free(t);
	return -1;
}

int cg_tree_child_join(const struct cg_tree *t, pid_t leader_pgid)
{
	/*
	 * The process group stays: terminals and the fallback rely on it. A
	 * stage in a view is pid 1 of a new pid namespace, where the leader is
	 * invisible: it leads a group of its own (the parent's cg_tree_add
	 * may still move it), and killing it ends its namespace, so every
	 * kill path still reaches the whole stage.
	 */
	joined_tree = NULL;
	if (setpgid(0, leader_pgid) != 0 && !(getpid() == 1 && setpgid(0, 0) == 0))
		return errno;
	if (!t)
		return 0;
	/*
	 * Join the call's cgroup before anything else runs, so that every
	 * descendant is born inside it: setsid() and double-forks change the
	 * session and the parent, never the cgroup, so cgroup.kill still
	 * reaches them. If joining fails we do not run uncontained.
	 */
	if (born_in != t && t->procs_fd >= 0 && write(t->procs_fd, "0", 1) != 1)
		return errno ? errno : EIO;
	joined_tree = t;
	return 0;
}

/* struct clone_args of clone3(2), up to the cgroup field (kernel 5.7). */
struct cg_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
	    set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* fork(2) with namespace flags: clone3 into the tree's cgroup, else clone. */
static pid_t tree_fork_flags(struct cg_tree *t, unsigned long ns_flags)
{
	if (t && t->cg_fd >= 0 && !atomic_load(&clone3_unusable)) {
		/*
		 * Born inside the call's cgroup: no migration, so no RCU grace
		 * period on the caller's path, and no window in which the child
		 * runs outside the tree. Without CLONE_VM this is fork(2) minus
		 * libc's atfork handlers, which the child (async-signal-safe
		 * calls only, then execve) does not need.
		 */
		struct cg_clone_args args = {
			.flags = CLONE_INTO_CGROUP | ns_flags,
			.exit_signal = SIGCHLD,
			.cgroup = (uint64_t)t->cg_fd,
		};
		long r = syscall(SYS_clone3, &args, sizeof(args));
		if (r == 0) {
			born_in = t;
			shared_exec_word = NULL;
			return 0;
		}
		if (r > 0)
			return (pid_t)r;
		if (errno != ENOSYS && errno != E2BIG && errno != EINVAL && errno != EPERM)
			return -1;
		if (ns_flags == 0) /* with namespaces, EPERM/EINVAL may be theirs */
			atomic_store(&clone3_unusable, true); /* old kernel or filtered */
	}
	/* Raw clone without a stack: fork semantics, in new namespaces if any. */
	pid_t pid = ns_flags == 0
			? fork()
			: (pid_t)syscall(SYS_clone, ns_flags | SIGCHLD, NULL, NULL, NULL, 0);
	if (pid == 0) {
		born_in = NULL;
		shared_exec_word = NULL;
	}
	return pid;
}

pid_t cg_tree_fork(struct cg_tree *t)
{
	return tree_fork_flags(t, 0);
}

pid_t cg_confine_fork(struct cg_tree *t, const struct cg_confine_plan *plan)
{
	return tree_fork_flags(t, plan ? cg_view_clone_flags(plan->view) : 0);
}

/* ---- pid 1 without a copy of the daemon ---------------------------------- */

/* Is fd (O_PATH) a program only its owner, root or we, could have put there? */
static bool init_trusted(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR) &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH)) && (st.st_uid == 0 || st.st_uid == geteuid());
}

int cg_confine_init_open(char *where, size_t len)
{
	char self[PATH_MAX], cand[2][PATH_MAX + 32];
	size_t n = 0;
	ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (l > 0) {
		self[l] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand[n++], sizeof(cand[0]), "%s/callgate-init", self);
		}
	}
	snprintf(cand[n++], sizeof(cand[0]), "%s/callgate/callgate-init", CG_LIBEXECDIR);
	for (size_t i = 0; i < n; i++) {
		int fd = open(cand[i], O_PATH | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (!init_trusted(fd)) {
			close(fd);
			continue;
		}
		int old = atomic_exchange(&init_fd, fd);
		if (old >= 0)
			close(old);
		snprintf(where, len, "%s", cand[i]);
		return 0;
	}
	snprintf(where, len, "no trusted callgate-init beside the program or in %s/callgate",
		 CG_LIBEXECDIR);
	errno = ENOENT;
	return -1;
}

#if defined(__x86_64__)
/*
 * clone3 with a stack of our own: the child starts on it with no frame to
 * return to, so it calls fn(arg) and exits in the same instructions (what
 * libc's clone() does for clone(2); glibc 2.36 exports no clone3 wrapper).
 * Returns like clone3: the child's pid, or -1 with errno.
 */
static long clone3_call(struct cg_clone_args *args, int (*fn)(void *), void *arg)
{
	long ret;
	register uintptr_t fn_reg __asm__("r12") = (uintptr_t)fn;
	register void *arg_reg __asm__("r13") = arg;
	__asm__ volatile("syscall\n\t"
			 "testq %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xorl %%ebp, %%ebp\n\t" /* the child: outermost frame */
			 "movq %%r13, %%rdi\n\t"
			 "callq *%%r12\n\t"
			 "movl %%eax, %%edi\n\t"
			 "movl %[sys_exit], %%eax\n\t"
			 "syscall\n\t"
			 "hlt\n\t"
			 "1:\n\t"
			 : "=a"(ret)
			 : "0"((long)SYS_clone3), "D"(args), "S"(sizeof(*args)), "r"(fn_reg),
			   "r"(arg_reg), [sys_exit] "i"(SYS_exit)
			 : "rcx", "r11", "memory", "cc");
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

#define SHARED_STACK (256 * 1024)

struct shared_start {
	const struct cg_tree *t;
	int (*fn)(void *);
	void *arg;
	pid_t exec_word; /* the command's pid from its clone until its exec or exit */
};

/*
 * Wait until the kernel clears *w (CLONE_CHILD_CLEARTID) when the command
 * execs or exits. A raw syscall, not syscall(3): until then the command
 * runs on this thread's TLS, and libc would write errno there under it.
 */
static void exec_word_wait(pid_t *w)
{
	for (;;) {
		pid_t v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
		if (v == 0)
			return;
		long ret;
		register long timeout __asm__("r10") = 0;
		/* FUTEX_WAIT, not _PRIVATE: the kernel's wake at exec is not private. */
		__asm__ volatile("syscall"
				 : "=a"(ret)
				 : "0"((long)SYS_futex), "D"(w), "S"((long)FUTEX_WAIT),
				   "d"((long)v), "r"(timeout)
				 : "rcx", "r11", "memory");
		(void)ret; /* EAGAIN (it changed) and EINTR: look again */
	}
}

static int shared_main(void *p)
{
	struct shared_start *s = p;
	born_in = s->t;
	shared_exec_word = &s->exec_word;
	cg_oom_deferred = true; /* the daemon's memory until exec (s43b F2) */
	/*
	 * If the thread that started us dies (the daemon is killed) before we
	 * become callgate-init, so do we: half a start must not go on alone
	 * in memory whose owner is gone. callgate-init clears it again.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		_exit(127);
	(void)s->fn(s->arg);
	_exit(127);
}

/*
 * CLONE_VM | CLONE_VFORK into the tree's cgroup and the view's namespaces:
 * no copy of the daemon's page tables, and none of the copy-on-write faults
 * that a fork costs both sides afterwards. This thread is suspended until
 * the child execs (pid 1 execs callgate-init as soon as it has started the
 * command) or exits, and then waits for the command's own exec or exit
 * (exec_word_wait); the child runs on its own stack, with a guard page
 * below it.
 */
static pid_t spawn_shared(struct cg_tree *t, unsigned long ns_flags, int (*fn)(void *), void *arg)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t guard = page > 0 ? (size_t)page : 4096;
	char *map = mmap(NULL, SHARED_STACK + guard, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (map == MAP_FAILED)
		return -1;
	if (mprotect(map, guard, PROT_NONE) != 0) {
		int e = errno;
		(void)munmap(map, SHARED_STACK + guard);
		errno = e;
		return -1;
	}
	struct shared_start s = { t, fn, arg, 0 };
	struct cg_clone_args args = {
		.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP | ns_flags,
		.exit_signal = SIGCHLD,
		.stack = (uint64_t)(uintptr_t)(map + guard),
		.stack_size = SHARED_STACK,
		.cgroup = (uint64_t)t->cg_fd,
	};
	cg_stack_unpoison(map + guard, SHARED_STACK);
	long r = clone3_call(&args, shared_main, &s);
	/* Pid 1 exec'd or died; its command, if it has one, may still run on our TLS. */
	if (r > 0)
		exec_word_wait(&s.exec_word);
	int e = errno;
	/* The child set them on our TLS; they point into this frame. */
	born_in = NULL;
	shared_exec_word = NULL;
	cg_oom_deferred = false;
	/* Every process of the call has exec'd (or died): now the OOM killer's first. */
	if (r > 0)
		cg_oom_first_procs(t->cg_fd);
	cg_stack_unpoison(map + guard, SHARED_STACK);
	(void)munmap(map, SHARED_STACK + guard);
	errno = e;
	return (pid_t)r;
}
#endif

static pid_t spawn_in(struct cg_tree *t, const struct cg_confine_plan *plan, int (*fn)(void *),
		      void *arg);

/*
 * A command without the host's network is born in a namespace the pool
 * made ahead (the clone inherits this thread's): the child skips making
 * one. Without a ready one, the child makes its own, as it always could.
 */
pid_t cg_confine_spawn(struct cg_tree *t, const struct cg_confine_plan *plan, int (*fn)(void *),
		       void *arg)
{
	netns_given = plan && plan->netns && cg_netns_pool_enter() == 0;
	pid_t pid = spawn_in(t, plan, fn, arg);
	int e = errno;
	if (netns_given)
		cg_netns_pool_leave();
	netns_given = false;
	errno = e;
	return pid;
}

static pid_t spawn_in(struct cg_tree *t, const struct cg_confine_plan *plan, int (*fn)(void *),
		      void *arg)
{
#if defined(__x86_64__)
	if (plan && plan->view && atomic_load(&init_fd) >= 0 && t && t->cg_fd >= 0 &&
	    !atomic_load(&clone3_unusable)) {
		pid_t pid = spawn_shared(t, cg_view_clone_flags(plan->view), fn, arg);
		if (pid > 0 ||
		    (errno != ENOSYS && errno != E2BIG && errno != EINVAL && errno != EPERM))
			return pid;
		/* Refused (a filter, an old kernel): the copying way below. */
	}
#endif
	/* A copy of our memory would never see the gate open: it must be open first. */
	if (plan && plan->gate)
		(void)cg_gate_wait(plan->gate, -1);
	pid_t pid = cg_confine_fork(t, plan);
	if (pid == 0) {
		(void)fn(arg);
		_exit(127);
	}
	return pid;
}

void cg_tree_add(struct cg_tree *t, pid_t pid)
{
	if (!t)
		return;
	if (t->pgid == 0)
		t->pgid = pid;
	/* Both sides call setpgid so the group exists before either proceeds. */
	(void)setpgid(pid, t->pgid);
}

/* Signal every pid listed in the cgroup's cgroup.procs; how many were listed. */
static int signal_procs(int cg_fd, int sig)
{
	int fd = openat(cg_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[8192];
	int n_listed = 0;
	ssize_t n;
	size_t have = 0;
	while ((n = cg_read_some(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
		have += (size_t)n;
		buf[have] = 0;
		char *p = buf, *nl;
		while ((nl = strchr(p, '\n'))) {
			*nl = 0;
			char *end;
			long pid = strtol(p, &end, 10);
			if (end != p && pid > 0) {
				(void)kill((pid_t)pid, sig);
				n_listed++;
			}
			p = nl + 1;
		}
		have = strlen(p);
		memmove(buf, p, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* an absurd line; drop it */
	}
	(void)close(fd);
	return n_listed;
}

/* SIGKILL to every process in the cgroup cg_fd and below. */
static void kill_cgroup(int cg_fd)
{
	/* cgroup.kill (5.14+) kills the whole subtree atomically: a fork bomb
	 * cannot outrun it the way it outruns a pid loop. */
	int fd = openat(cg_fd, "cgroup.kill", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		int ok = cg_write_all(fd, "1", 1);
		(void)close(fd);
		if (ok == 0)
			return;
	}
	/* Older kernels: freeze, kill what is listed, thaw; repeat. */
	int ffd = openat(cg_fd, "cgroup.freeze", O_WRONLY | O_CLOEXEC);
	if (ffd >= 0)
		(void)cg_write_all(ffd, "1", 1);
	for (int i = 0; i < 16 && signal_procs(cg_fd, SIGKILL) > 0; i++)
		;
	if (ffd >= 0) {
		(void)cg_write_all(ffd, "0", 1);
		(void)close(ffd);
	}
}

void cg_tree_kill(struct cg_tree *t, int sig)
{
	if (!t)
		return;
	if (t->cg_fd >= 0) {
		if (sig == SIGKILL)
			kill_cgroup(t->cg_fd);
		else
			(void)signal_procs(t->cg_fd, sig);
		return;
	}
	if (t->pgid > 0)
		(void)kill(-t->pgid, sig);
}

bool cg_tree_alive(struct cg_tree *t)
{
	if (!t)
		return false;
	if (t->cg_fd >= 0) {
		int fd = openat(t->cg_fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return true; /* cannot tell: assume alive, so the caller kills */
		char buf[256];
		ssize_t n = cg_read_some(fd, buf, sizeof(buf) - 1);
		(void)close(fd);
		if (n <= 0)
			return true;
		buf[n] = 0;
		return strstr(buf, "populated 0") == NULL;
	}
	return t->pgid > 0 && kill(-t->pgid, 0) == 0;
}

/*
 * Cgroups whose rmdir said EBUSY. Right after the last process is reaped
 * the kernel may still count the cgroup populated for a moment (the exit
 * is finished asynchronously); waiting for it would put milliseconds on
 * every call's path. The processes are already killed; only the empty
 * directory is left, and it is removed by a later cg_tree_new or free.
 */
#define GRAVE_MAX 64
static struct {
	int base_fd;
	char name[96];
} grave[GRAVE_MAX];
static size_t n_grave;		   /* under grave_mu */
static atomic_bool grave_nonempty; /* lock-free hint for the common, empty case */
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;

/* Retry the graveyard; then remove (or bury) name under base_fd. */
static void remove_cgroup(int base_fd, const char *name)
{
	(void)pthread_mutex_lock(&grave_mu);
	for (size_t i = 0; i < n_grave;) {
		if (unlinkat(grave[i].base_fd, grave[i].name, AT_REMOVEDIR) == 0 || errno != EBUSY)
			grave[i] = grave[--n_grave];
		else
			i++;
	}
	if (name && unlinkat(base_fd, name, AT_REMOVEDIR) != 0 && errno == EBUSY) {
		if (n_grave < GRAVE_MAX) {
			grave[n_grave].base_fd = base_fd;
			(void)snprintf(grave[n_grave].name, sizeof(grave[n_grave].name), "%s",
				       name);
			n_grave++;
		} else {
			/* Full (something keeps cgroups busy): a brief bounded wait. */
			for (int i = 0;
			     i < 20 && unlinkat(base_fd, name, AT_REMOVEDIR) != 0 && errno == EBUSY;
			     i++)
				(void)usleep(1000);
		}
	}
	atomic_store(&grave_nonempty, n_grave > 0);
	(void)pthread_mutex_unlock(&grave_mu);
}

void cg_tree_free(struct cg_tree *t)
{
	if (!t)
		return;
	if (t->cg_fd >= 0) {
		/* Busy: whatever is still in it dies first; removal is deferred. */
		if (unlinkat(cgs.v2_base_fd, t->name, AT_REMOVEDIR) == 0 || errno != EBUSY) {
			if (atomic_load(&grave_nonempty))
				remove_cgroup(-1, NULL); /* retry the deferred ones */
		} else {
			cg_tree_kill(t, SIGKILL);
			remove_cgroup(cgs.v2_base_fd, t->name);
		}
	}
	if (t->pids_base_fd >= 0)
		remove_cgroup(t->pids_base_fd, t->name);
	if (t->pids_procs_fd >= 0)
		(void)close(t->pids_procs_fd);
	if (t->procs_fd >= 0)
		(void)close(t->procs_fd);
	if (t->cg_fd >= 0)
		(void)close(t->cg_fd);
	free(t);
}

json_t *cg_tree_report(const struct cg_tree *t)
{
	if (t && t->cg_fd >= 0)
		return json_pack("{s:s,s:s,s:b}", "mechanism", "cgroup2", "cgroup", t->name,
				 "pids_max", t->pids_max[0] != 0);
	return json_pack("{s:s,s:s,s:s}", "mechanism", "process-group", "limitation",
			 "descendants that call setsid() leave the process group and are not "
			 "killed at the deadline",
			 "why", have_cgroup_tree() ? "tree not created" : cgs.why_not);
}

/* The mechanism trees of this process get, for the plan's report. */
static json_t *tree_mechanism(void)
{
	if (have_cgroup_tree())
		return json_pack("{s:s,s:s,s:s}", "mechanism", "cgroup2", "base", cgs.v2_base,
				 "pids",
				 cgs.v2_pids		    ? "cgroup2"
				 : cgs.v1_pids_base_fd >= 0 ? "cgroup1"
							    : "none");
	return cg_tree_report(NULL);
}

/* ---- preparing the plan (parent) -------------------------------------- */

static const char *const limit_names[] = { "cpu_s", "as_bytes", "nproc", "fsize_bytes", "nofile" };

static int64_t *limit_slot(struct cg_limits *l, size_t i)
{
	int64_t *slots[] = { &l->cpu_s, &l->as_bytes, &l->nproc, &l->fsize_bytes, &l->nofile };
	return slots[i];
}

static int64_t limit_get(const struct cg_limits *l, size_t i)
{
	const int64_t vals[] = { l->cpu_s, l->as_bytes, l->nproc, l->fsize_bytes, l->nofile };
	return vals[i];
}

static int64_t limit_min(int64_t a, int64_t b)
{
	if (a == CG_LIMIT_UNSET)
		return b;
	if (b == CG_LIMIT_UNSET)
		return a;
	return a < b ? a : b;
}

/* Expand ${workspace}, ${cwd}, ${home}; relative results join ctx->cwd. */
static char *expand_path(const char *raw, const struct cg_confine_ctx *ctx, const char **why)
{
	char out[PATH_MAX];
	size_t o = 0;
	for (const char *p = raw; *p;) {
		const char *val = NULL;
		size_t skip = 0;
		if (p[0] == '$' && p[1] == '{') {
			static const struct {
				const char *tok;
				size_t off;
			} toks[] = {
				{ "${workspace}", offsetof(struct cg_confine_ctx, workspace) },
				{ "${cwd}", offsetof(struct cg_confine_ctx, cwd) },
				{ "${home}", offsetof(struct cg_confine_ctx, home) },
			};
			for (size_t i = 0; i < CG_ARRAY_LEN(toks); i++) {
				size_t tl = strlen(toks[i].tok);
				if (strncmp(p, toks[i].tok, tl) == 0) {
					val = ctx ? *(const char *const *)((const char *)ctx +
									   toks[i].off)
						  : NULL;
					skip = tl;
					if (!val) {
						*why = "token has no value for this call";
						return NULL;
					}
					break;
				}
			}
			if (!skip) {
				*why = "unknown ${token}";
				return NULL;
			}
		}
		const char *src = val ? val : p;
		size_t n = val ? strlen(val) : 1;
		if (o + n >= sizeof(out)) {
			*why = "path too long";
			return NULL;
		}
		memcpy(out + o, src, n);
		o += n;
		p += val ? skip : 1;
	}
	out[o] = 0;
	if (o == 0) {
		*why = "empty path";
		return NULL;
	}
	if (out[0] != '/') {
		if (!ctx || !ctx->cwd || ctx->cwd[0] != '/') {
			*why = "relative path and no absolute cwd";
			return NULL;
		}
		char *abs = NULL;
		if (asprintf(&abs, "%s/%s", ctx->cwd, out) < 0) {
			*why = "out of memory";
			return NULL;
		}
		return abs;
	}
	char *s = strdup(out);
	if (!s)
		*why = "out of memory";
	return s;
}

/* Record a downgrade, or refuse when the set is not best-effort. */
static int downgrade(json_t *downs, bool best_effort, const char *constraint, const char *detail,
		     struct cg_reply **err)
{
	if (!best_effort) {
		*err = cg_reply_new(CG_R_CONSTRAINT_UNENFORCEABLE, "{s:s,s:s}", "constraint",
				    constraint, "detail", detail);
		return -1;
	}
	(void)json_array_append_new(downs, json_pack("{s:s,s:s,s:b}", "constraint", constraint,
						     "detail", detail, "best_effort", 1));
	return 0;
}

static const char *class_name(int cls)
{
	return cls == 0	  ? "read"
	       : cls == 1 ? "write"
	       : cls == 2 ? "exec"
	       : cls == 3 ? "view"
			  : "scratch";
}

/*
 * In that namespace a call a set binds sees every mount read-only but its
 * write trees (cg_view_read_only_but): the paths its sets let it write,
 * once each; devices are written on a read-only mount too (/dev/null). The
 * report names them. -1 on OOM.
 */
static int take_write_trees(struct cg_confine_plan *p)
{
	json_t *rw = json_array();
	size_t cap = 0;
	for (size_t s = 0; s < p->n_sets; s++)
		cap += p->sets[s].n_paths;
	p->rw = cap ? calloc(cap, sizeof(*p->rw)) : NULL;
	if (!rw || (cap && !p->rw)) {
		json_decref(rw);
		return -1;
	}
	for (size_t s = 0; s < p->n_sets; s++)
		for (size_t k = 0; k < p->sets[s].n_paths; k++) {
			const struct cg_landlock_path *lp = &p->sets[s].paths[k];
			bool dup = false;
			struct stat st;
			if (!(lp->access & LANDLOCK_ACCESS_FS_WRITE_FILE) ||
			    (stat(lp->path, &st) == 0 &&
			     (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))))
				continue;
			for (size_t i = 0; i < p->n_rw && !dup; i++)
				dup = strcmp(p->rw[i], lp->path) == 0;
			if (dup)
				continue;
			if (!(p->rw[p->n_rw] = strdup(lp->path))) {
				json_decref(rw);
				return -1;
			}
			p->n_rw++;
			(void)json_array_append_new(rw, json_string(lp->path));
		}
	(void)json_object_set_new(p->report, "writable_mounts_only", rw);
	return 0;
}

/*
 * A privileged call (no view, as root) gets a mount namespace where symlinks
 * under ctx->nosymfollow are not followed; the report names them. -1 on OOM.
 */
static int take_nosymfollow(struct cg_confine_plan *p, const struct cg_confine_ctx *ctx)
{
	json_t *dirs = json_array();
	p->nosym = calloc(ctx->n_nosymfollow, sizeof(*p->nosym));
	p->nosym_cwd = ctx->cwd ? strdup(ctx->cwd) : NULL;
	if (!dirs || !p->nosym || !p->nosym_cwd) {
		json_decref(dirs);
		return -1;
	}
	for (size_t i = 0; i < ctx->n_nosymfollow; i++) {
		if (!(p->nosym[i] = strdup(ctx->nosymfollow[i]))) {
			json_decref(dirs);
			return -1;
		}
		p->n_nosym++;
		(void)json_array_append_new(dirs, json_string(ctx->nosymfollow[i]));
	}
	(void)json_object_set_new(p->report, "symlinks_not_followed", dirs);
	return p->n_sets ? take_write_trees(p) : 0;
}

/* Step 1's umask: the caller's, as the kernel read it, else private. */
static mode_t plan_umask(const struct cg_confine_ctx *ctx)
{
	return ctx && ctx->umask_set ? ctx->umask & 0777 : CONFINE_UMASK;
}

static int prepare_plan(const struct cg_constraints *const *cons, size_t n,
			const struct cg_confine_ctx *ctx, bool setuid_ok,
			struct cg_confine_plan **out, struct cg_reply **err);

/*
 * A privileged stage from a daemon that is not root runs as `sudo -n …`.
 * sudo can only gain privilege without no_new_privs, and Landlock, seccomp
 * (unprivileged) and a user-namespace netns all require or imply it, so such
 * a stage gets rlimits, umask and the process tree only. A constraint set
 * asking for filesystem or network confinement therefore cannot be honoured:
 * the call is refused (fail closed) unless the set is best_effort.
 */
int cg_confine_prepare(const struct cg_constraints *const *cons, size_t n,
		       const struct cg_confine_ctx *ctx, struct cg_confine_plan **out,
		       struct cg_reply **err)
{
	if (!ctx || !ctx->allow_setuid)
		return prepare_plan(cons, n, ctx, false, out, err);
	struct cg_constraints *copy = calloc(n ? n : 1, sizeof(*copy));
	const struct cg_constraints **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
	int rc = -1;
	bool dropped = false;
	if (!copy || !ptrs) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing confinement");
		goto release;
	}
	for (size_t i = 0; i < n; i++) {
		copy[i] = *cons[i];
		if (copy[i].fs || copy[i].net != CG_NET_UNSET) {
			if (!copy[i].best_effort) {
				*err = cg_reply_new(
				    CG_R_CONSTRAINT_UNENFORCEABLE, "{s:s,s:s}", "constraint",
				    copy[i].fs ? "fs" : "net", "detail",
				    "a privileged stage runs through sudo -n, which cannot gain "
				    "privilege under no_new_privs, Landlock or a new namespace; "
				    "run "
				    "the daemon as root to confine privileged calls");
				goto release;
			}
			copy[i].fs = false;
			copy[i].net = CG_NET_UNSET;
			dropped = true;
		}
		ptrs[i] = &copy[i];
	}
	rc = prepare_plan(ptrs, n, ctx, true, out, err);
	if (rc == 0) {
		json_t *notes = json_object_get((*out)->report, "notes");
		(void)json_array_append_new(
		    notes,
		    json_string("privileged via sudo -n: no_new_privs, seccomp, Landlock "
				"and namespaces are not applied (sudo must gain privilege)"));
		if (dropped)
			(void)json_array_append_new(
			    json_object_get((*out)->report, "downgraded"),
			    json_pack("{s:s,s:s,s:b}", "constraint", "fs/net", "detail",
				      "not enforceable under sudo", "best_effort", 1));
	}
release:
	free(copy);
	free(ptrs);
	return rc;
}

/* Is path p at or below tree t? */
static bool path_under(const char *p, const char *t)
{
	size_t n = strlen(t);
	if (n == 1 && t[0] == '/')
		return true;
	return strncmp(p, t, n) == 0 && (p[n] == 0 || p[n] == '/');
}

/* Expanded copies of a constraint list, appended to *out (owned by the caller). */
static int expand_all(const char *const *raw, size_t n_raw, const struct cg_confine_ctx *ctx,
		      bool keep_relative, char **out, size_t *n, size_t cap, struct cg_reply **err)
{
	for (size_t i = 0; i < n_raw; i++) {
		const char *why = "too many paths";
		char *e = NULL;
		if (*n < cap)
			e = keep_relative && raw[i][0] != '/' && raw[i][0] != '$'
				? strdup(raw[i])
				: expand_path(raw[i], ctx, &why);
		if (!e) {
			*err = cg_reply_new(CG_R_CONFINE_PATH_INVALID, "{s:s,s:s}", "path", raw[i],
					    "detail", why);
			return -1;
		}
		out[(*n)++] = e;
	}
	return 0;
}

/*
 * The view's write set: what every filesystem-confined set may write (the
 * view, like the stacked Landlock domains, grants the intersection). No
 * such set: the workspace.
 */
static int view_write_set(const struct cg_constraints *const *cons, size_t n,
			  const struct cg_confine_ctx *ctx, char **out, size_t *n_out,
			  struct cg_reply **err)
{
	char *all[CONFINE_MAX_PATHS];
	size_t n_all = 0, n_fs = 0;
	int rc = -1;
	for (size_t i = 0; i < n; i++) {
		if (!cons[i]->fs)
			continue;
		n_fs++;
		if (expand_all(cons[i]->write, cons[i]->n_write, ctx, false, all, &n_all,
			       CONFINE_MAX_PATHS, err) != 0)
			goto release;
	}
	if (n_fs == 0 && ctx->workspace && ctx->workspace[0] == '/') {
		if (!(out[0] = strdup(ctx->workspace)))
			goto oom;
		*n_out = 1;
		return 0;
	}
	for (size_t k = 0; k < n_all; k++) {
		bool everywhere = true;
		for (size_t i = 0; everywhere && i < n; i++) {
			if (!cons[i]->fs)
				continue;
			bool in_set = false;
			for (size_t j = 0; !in_set && j < cons[i]->n_write; j++) {
				const char *why;
				char *e = expand_path(cons[i]->write[j], ctx, &why);
				in_set = e && path_under(all[k], e);
				free(e);
			}
			everywhere = in_set;
		}
		if (everywhere) {
			out[(*n_out)++] = all[k];
			all[k] = NULL;
		}
	}
	rc = 0;
	goto release;
oom:
	*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing the view");
release:
	for (size_t k = 0; k < n_all; k++)
		free(all[k]);
	return rc;
}

/* Private unless some set asks for the shared /tmp and none for a private one. */
static bool view_shared_tmp(const struct cg_constraints *const *cons, size_t n)
{
	bool shared = false;
	for (size_t i = 0; i < n; i++) {
		if (cons[i]->tmp == CG_TMP_PRIVATE)
			return false;
		shared |= cons[i]->tmp == CG_TMP_SHARED;
	}
	return shared;
}

/* .git writable only when every set of the stage grants it (git: write). */
static bool view_git_write(const struct cg_constraints *const *cons, size_t n)
{
	bool all = n > 0;
	for (size_t i = 0; i < n; i++)
		all &= cons[i]->git_write;
	return all;
}

/*
 * What hides the daemon's agent socket from a call (into out): its directory
 * when that is a directory of its own (below the top level, holding no write
 * tree, workspace, cwd or home), else the socket alone. False when too long.
 */
static bool agent_hiding(const struct cg_confine_ctx *ctx, const char *const *write, size_t n_write,
			 char *out, size_t cap)
{
	const char *sock = ctx->daemon_agent, *slash = strrchr(sock, '/');
	if (sock[0] != '/' || !slash || (size_t)snprintf(out, cap, "%s", sock) >= cap)
		return false;
	size_t dl = (size_t)(slash - sock);
	if (dl == 0 || !memchr(sock + 1, '/', dl - 1))
		return true; /* a top-level directory (/run, /home): the socket alone */
	out[dl] = '\0';
	bool shared = (ctx->workspace && cg_path_under(ctx->workspace, out)) ||
		      (ctx->cwd && cg_path_under(ctx->cwd, out)) ||
		      (ctx->home && ctx->home[0] && cg_path_under(ctx->home, out));
	for (size_t i = 0; i < n_write && !shared; i++)
		shared = cg_path_under(write[i], out);
	if (shared)
		out[dl] = '/'; /* the socket alone */
	return true;
}

/*
 * The call's world (ctx->view): prepared here, entered by the child. An
 * unprivileged daemon needs a user namespace for it; without one the call
 * is refused unless every set is best_effort (then the downgrade is noted).
 */
static int prepare_view(struct cg_confine_plan *p, const struct cg_constraints *const *cons,
			size_t n, const struct cg_confine_ctx *ctx, json_t *downs,
			struct cg_reply **err)
{
	char *write[CONFINE_MAX_PATHS], *hide[CONFINE_MAX_PATHS], *prot[CONFINE_MAX_PATHS];
	char *scratch[CONFINE_MAX_PATHS];
	size_t n_write = 0, n_hide = 0, n_prot = 0, n_scratch = 0;
	int rc = -1;
	bool be_all = n > 0, userns = false;
	for (size_t i = 0; i < n; i++)
		be_all &= cons[i]->best_effort;
	bool unpriv = geteuid() != 0;
	if (unpriv && !cg_netns_possible(&userns))
		return downgrade(downs, be_all, "view",
				 "not root and user namespaces are disabled: the call's own "
				 "mount and pid namespaces cannot be created",
				 err);
	if (view_write_set(cons, n, ctx, write, &n_write, err) != 0)
		goto release;
	for (size_t i = 0; i < n; i++)
		if (expand_all(cons[i]->hide, cons[i]->n_hide, ctx, false, hide, &n_hide,
			       CONFINE_MAX_PATHS, err) != 0 ||
		    expand_all(cons[i]->protect, cons[i]->n_protect, ctx, true, prot, &n_prot,
			       CONFINE_MAX_PATHS, err) != 0 ||
		    expand_all(cons[i]->scratch, cons[i]->n_scratch, ctx, false, scratch,
			       &n_scratch, CONFINE_MAX_PATHS, err) != 0)
			goto release;
	if (expand_all(ctx->own_paths, ctx->n_own_paths, ctx, false, hide, &n_hide,
		       CONFINE_MAX_PATHS, err) != 0)
		goto release;
	/*
	 * The daemon's ssh agent, wherever it lives, when the call was not lent
	 * it: one under a path the view shows (~/.1password/agent.sock, a home
	 * workspace) had listed and wiped the keys from a call that never asked
	 * (s39c). Its directory, when that holds nothing the call needs: a cover
	 * on the socket alone is gone once the agent makes a new one there
	 * (s39e: a restarted agent was reached mid-call).
	 */
	char agent_dir[PATH_MAX];
	const char *agent[1] = { agent_dir };
	if (ctx->daemon_agent && !ctx->agent_socket) {
		if (!agent_hiding(ctx, (const char *const *)write, n_write, agent_dir,
				  sizeof(agent_dir))) {
			*err = cg_reply_new(CG_R_CONFINE_PATH_INVALID, "{s:s,s:s}", "path",
					    ctx->daemon_agent, "detail",
					    "the daemon's ssh agent socket cannot be hidden");
			goto release;
		}
		if (expand_all(agent, 1, ctx, false, hide, &n_hide, CONFINE_MAX_PATHS, err) != 0)
			goto release;
	}
	struct cg_view_spec spec = {
		.write = (const char *const *)write,
		.n_write = n_write,
		.hide = (const char *const *)hide,
		.n_hide = n_hide,
		.protect = (const char *const *)prot,
		.n_protect = n_prot,
		.scratch = (const char *const *)scratch,
		.n_scratch = n_scratch,
		.scratch_uid = ctx->set_ids ? ctx->uid : geteuid(),
		.scratch_gid = ctx->set_ids ? ctx->gid : getegid(),
		.home = ctx->home,
		.cwd = ctx->cwd,
		.workspace = ctx->workspace,
		.reveal = ctx->agent_socket,
		.shared_tmp = view_shared_tmp(cons, n),
		.git_write = view_git_write(cons, n),
		.unprivileged = unpriv,
		.outer_uid = geteuid(),
		.outer_gid = getegid(),
	};
	rc = cg_view_prepare(&spec, &p->view, err);
release:
	for (size_t i = 0; i < n_write; i++)
		free(write[i]);
	for (size_t i = 0; i < n_hide; i++)
		free(hide[i]);
	for (size_t i = 0; i < n_prot; i++)
		free(prot[i]);
	for (size_t i = 0; i < n_scratch; i++)
		free(scratch[i]);
	return rc;
}

static int prepare_plan(const struct cg_constraints *const *cons, size_t n,
			const struct cg_confine_ctx *ctx, bool setuid_ok,
			struct cg_confine_plan **out, struct cg_reply **err)
{
	json_t *downs = json_array(), *skipped = json_array(), *paths_j = json_array();
	json_t *notes = json_array();
	struct cg_confine_plan *p = calloc(1, sizeof(*p));
	size_t n_paths = 0, n_ports = 0;
	if (!p || !downs || !skipped || !paths_j || !notes)
		goto oom;
	p->abi = cg_landlock_abi();
	p->egress_fd = -1;
	p->limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
					CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	p->timeout_ms = CG_LIMIT_UNSET;
	p->view_stall_ms = (int)cg_test_knob("CALLGATE_TEST_VIEW_STALL_MS", 0, 60000);
	p->confined = n > 0 && !setuid_ok; /* confined implies no_new_privs */
	p->set_ids = ctx && ctx->set_ids;
	p->uid = p->set_ids ? ctx->uid : 0;
	p->gid = p->set_ids ? ctx->gid : 0;
	if (p->set_ids && ctx->cwd && ctx->cwd[0] == '/' && !(p->peer_cwd = strdup(ctx->cwd)))
		goto oom;
	p->outer_uid = geteuid();
	p->outer_gid = getegid();
	p->umask = plan_umask(ctx);
	/* Without CAP_SETGID the groups cannot be cleared; say so below. */
	p->clear_groups = geteuid() == 0;
	bool any_best_effort = false;
	const char *net_mode = "host";

	for (size_t i = 0; i < n; i++) {
		n_paths += cons[i]->fs ? cons[i]->n_read + cons[i]->n_write + cons[i]->n_scratch +
					     (cons[i]->n_exec ? cons[i]->n_exec
							      : CG_ARRAY_LEN(cg_exec_default)) +
					     CONFINE_VIEW_EXTRA
				       : 0;
		n_ports += cons[i]->net == CG_NET_TCP ? cons[i]->n_ports : 0;
	}
	if (n_paths > CONFINE_MAX_PATHS) {
		*err = cg_reply_new(CG_R_CONFINE_PATH_INVALID, "{s:s,s:s}", "path", "(many)",
				    "detail", "more than 256 paths in the constraint sets");
		goto fail;
	}
	p->sets = calloc(n ? n : 1, sizeof(*p->sets));
	p->paths = calloc(n_paths ? n_paths : 1, sizeof(*p->paths));
	p->strings = calloc(n_paths ? n_paths : 1, sizeof(*p->strings));
	p->ports = calloc(n_ports ? n_ports : 1, sizeof(*p->ports));
	if (!p->sets || !p->paths || !p->strings || !p->ports)
		goto oom;
	if (ctx && ctx->view && !setuid_ok && prepare_view(p, cons, n, ctx, downs, err) != 0)
		goto fail;
	if (p->view)
		p->confined = true; /* no_new_privs and seccomp for every call in a view */
	/*
	 * In a view, Landlock must also let a writer use the devices bound in
	 * and the private /dev/shm; the rulesets are built by the child inside
	 * the view, so "/tmp" there names the private tmpfs (a rule on the
	 * host's /tmp would not cover its inodes).
	 */
	const char *view_rules[CONFINE_VIEW_EXTRA] = { "/dev/null", "/dev/zero", "/dev/full",
						       "/dev/tty",  NULL,	 NULL };
	/* Without a view (a privileged call) the host's own devices: `2>/dev/null` failed. */
	size_t n_view_rules = 4;
	if (p->view) {
		view_rules[4] = cg_view_shm_rule_path(p->view);
		n_view_rules = view_rules[4] ? 5 : 4;
	}
	const char *tmp_rule = p->view ? cg_view_tmp_rule_path(p->view) : NULL;

	size_t pi = 0, qi = 0;
	bool scope_noted = false;
	for (size_t i = 0; i < n; i++) {
		const struct cg_constraints *c = cons[i];
		bool be = c->best_effort;
		any_best_effort |= be;
		for (size_t k = 0; k < CG_ARRAY_LEN(limit_names); k++) {
			int64_t v = limit_get(&c->limits, k);
			if (v != CG_LIMIT_UNSET && v < 0) {
				*err = cg_reply_new(CG_R_CONSTRAINT_UNENFORCEABLE, "{s:s,s:s}",
						    "constraint", limit_names[k], "detail",
						    "negative limit");
				goto fail;
			}
			int64_t *slot = limit_slot(&p->limits, k);
			*slot = limit_min(*slot, v);
		}
		p->timeout_ms = limit_min(p->timeout_ms, c->timeout_ms);

		/*
		 * A host list: a fresh namespace whose only way out is the gate's
		 * proxy. Never downgraded: the host's network would be more than
		 * the list, so best_effort does not apply.
		 */
		if (c->net == CG_NET_HOSTS) {
			bool userns = false;
			if (!cg_netns_possible(&userns) || p->n_egress >= CG_VERDICT_MAX_CONS) {
				*err =
				    cg_reply_new(CG_R_CONSTRAINT_UNENFORCEABLE, "{s:s,s:s}",
						 "constraint", "net", "detail",
						 "a host list needs a network namespace of its own "
						 "(root, or user namespaces enabled)");
				goto fail;
			}
			p->netns = true;
			p->netns_userns = userns;
			p->egress[p->n_egress++] = c;
			net_mode = "hosts";
		}
		/* Network: a fresh namespace for none/loopback. */
		if (c->net == CG_NET_NONE || c->net == CG_NET_LOOPBACK) {
			bool userns = false;
			if (cg_netns_possible(&userns)) {
				p->netns = true;
				p->netns_userns = userns;
				net_mode = c->net == CG_NET_NONE ? "none" : "loopback";
			} else if (downgrade(downs, be, "net",
					     "cannot create a network namespace (not root and "
					     "user namespaces disabled)",
					     err) != 0) {
				goto fail;
			}
		}
		struct cg_landlock_ruleset *rs = &p->sets[p->n_sets];
		rs->ruleset_fd = -1;
		bool want_fs = c->fs && !(ctx && ctx->no_landlock), want_tcp = c->net == CG_NET_TCP;
		if (want_fs && p->abi < 1) {
			if (downgrade(downs, be, "fs", "Landlock is not available", err) != 0)
				goto fail;
			want_fs = false;
		} else if (want_fs && p->abi < 3) {
			/* ABI 1-2 cannot stop truncate(2) of a file outside the write set. */
			if (downgrade(downs, be, "fs.truncate",
				      "Landlock ABI < 3 cannot deny truncate()", err) != 0)
				goto fail;
		}
		if (want_fs && p->abi >= 1 && p->abi < 2)
			(void)json_array_append_new(
			    notes, json_string("Landlock ABI 1: linking or renaming across "
					       "directories is always denied (EXDEV)"));
		if (want_fs && p->abi >= 1 && p->abi < 5)
			(void)json_array_append_new(
			    notes, json_string("Landlock ABI < 5: ioctl on device files is not "
					       "restricted"));
		if (want_tcp && p->abi < 4) {
			if (downgrade(downs, be, "net.tcp",
				      "Landlock ABI < 4 cannot restrict TCP ports", err) != 0)
				goto fail;
			want_tcp = false;
		}
		if (want_tcp && strcmp(net_mode, "host") == 0)
			net_mode = "tcp";
		/*
		 * A set without filesystem or TCP terms still gets a ruleset when
		 * the kernel can scope (ABI 6): without one, `callgate sandbox`
		 * with no path flag reached a host service on an abstract Unix
		 * socket, which no view hides (found by attack).
		 */
		if (!want_fs && !want_tcp && !cg_landlock_scope_mask(p->abi))
			continue;
		rs->handled_fs = want_fs ? cg_landlock_fs_mask(p->abi) : 0;
		rs->handled_net = want_tcp ? cg_landlock_net_mask(p->abi) : 0;
		/*
		 * Scoping (ABI 6): without it a confined command could signal
		 * (kill, SIGSTOP) processes outside its domain, the daemon
		 * included, or reach services listening on abstract Unix
		 * sockets (which no filesystem rule covers).
		 */
		rs->scoped = cg_landlock_scope_mask(p->abi);
		if (!rs->scoped && !scope_noted) {
			(void)json_array_append_new(
			    notes, json_string("Landlock ABI < 6: signals and abstract Unix "
					       "sockets are not scoped"));
			scope_noted = true;
		}
		/* ABI 7: audit denials of the exec'd command too, not just ours. */
		rs->restrict_flags = p->abi >= 7 ? LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0;
		rs->paths = &p->paths[pi];
		rs->ports = &p->ports[qi];
		if (want_fs) {
			/*
			 * A set that lists no exec tree gets the system's program
			 * directories: with none, not even the command the rule
			 * matched could start (EACCES at execve), and every degrade
			 * rule would have to repeat the same list.
			 */
			bool dflt = c->n_exec == 0;
			const char *const *lists[5] = { c->read, c->write,
							dflt ? cg_exec_default : c->exec,
							view_rules, c->scratch };
			size_t counts[5] = { c->n_read, c->n_write,
					     dflt ? CG_ARRAY_LEN(cg_exec_default) : c->n_exec,
					     n_view_rules, p->view ? c->n_scratch : 0 };
			if (dflt)
				(void)json_array_append_new(
				    notes, json_string("exec: the set lists no tree; the system "
						       "program directories apply (default)"));
			/*
			 * A scratch directory is written like a write tree (a tmpfs
			 * there); without a view (privileged) it is the host's: none.
			 */
			uint64_t access[5] = { CG_LL_FS_READ, CG_LL_FS_WRITE, CG_LL_FS_EXEC,
					       CG_LL_FS_WRITE, CG_LL_FS_WRITE };
			for (int cls = 0; cls < 5; cls++) {
				for (size_t j = 0; j < counts[cls]; j++) {
					const char *raw = lists[cls][j], *why = NULL;
					char *path = expand_path(raw, ctx, &why);
					if (path && tmp_rule && strcmp(path, "/tmp") == 0) {
						free(path);
						path = strdup(tmp_rule);
						why = "out of memory";
					}
					if (!path) {
						*err = cg_reply_new(CG_R_CONFINE_PATH_INVALID,
								    "{s:s,s:s}", "path", raw,
								    "detail", why);
						goto fail;
					}
					p->strings[p->n_strings++] = path;
					struct stat st;
					if (stat(path, &st) != 0) {
						bool workspace =
						    cls == 1 &&
						    (strstr(raw, "${workspace}") ||
						     (ctx && ctx->workspace &&
						      strcmp(path, ctx->workspace) == 0));
						if (workspace) {
							*err = cg_reply_new(
							    CG_R_CONFINE_PATH_INVALID, "{s:s,s:s}",
							    "path", path, "detail",
							    "the workspace does not exist");
							goto fail;
						}
						(void)json_array_append_new(
						    skipped,
						    json_pack("{s:s,s:s,s:s}", "path", path,
							      "access", class_name(cls), "reason",
							      cg_errno_name(errno)));
						continue;
					}
					p->paths[pi].path = path;
					p->paths[pi].access = access[cls] & rs->handled_fs;
					if (!S_ISDIR(
						st.st_mode)) /* the kernel refuses dir rights on files */
						p->paths[pi].access &= CG_LL_FS_FILE;
					pi++;
					rs->n_paths++;
					(void)json_array_append_new(
					    paths_j,
					    json_pack("{s:s,s:s,s:I}", "path", path, "access",
						      class_name(cls), "set", (json_int_t)i));
				}
			}
		}
		if (want_tcp)
			for (size_t j = 0; j < c->n_ports; j++) {
				p->ports[qi++] = c->ports[j];
				rs->n_ports++;
			}
		p->n_sets++;
	}
	/*
	 * The sets intersect, the network too: a set's none (or loopback) holds
	 * against another set's host list, which would otherwise open the
	 * proxy's way out (an attack reached a listener through a wrapper's
	 * net: none, because the inner rule's list came last). The strictest
	 * mode wins, whatever the order of the sets.
	 */
	bool net_none = false, net_loop = false;
	for (size_t i = 0; i < n; i++) {
		net_none |= cons[i]->net == CG_NET_NONE;
		net_loop |= cons[i]->net == CG_NET_LOOPBACK;
	}
	if (p->netns && (net_none || net_loop)) {
		net_mode = net_none ? "none" : "loopback";
		p->n_egress = 0; /* no proxy: no way out */
	}

	/*
	 * Build each ruleset once, here: the children only restrict themselves.
	 * Except in a view, whose /tmp and /dev/shm exist only in the child:
	 * cg_landlock_apply then builds the rulesets there, inside the view
	 * (ruleset_fd stays -1; ~0.1 ms of copy-on-write faults, less than
	 * releasing parent-made filesystems would cost).
	 */
	for (size_t i = 0; i < p->n_sets && !cg_view_rules_in_child(p->view); i++) {
		int e = cg_landlock_prepare(&p->sets[i]);
		if (e != 0) {
			*err = cg_reply_new(CG_R_CONFINE_SETUP_FAILED, "{s:s,s:s}", "detail",
					    "building the Landlock ruleset", "errno_name",
					    cg_errno_name(e));
			goto fail;
		}
	}
	if (p->confined) {
		p->seccomp = cg_seccomp_filter();
		/* Root without a view: no Unix socket either (cg_seccomp_filter_root). */
		if (p->seccomp && ctx && !ctx->view && !ctx->set_ids && geteuid() == 0 &&
		    !(p->seccomp_root = cg_seccomp_filter_root()))
			p->seccomp = NULL;
		if (!p->seccomp) {
			int e = errno;
			*err = cg_reply_new(CG_R_CONFINE_SETUP_FAILED, "{s:s,s:s}", "detail",
					    "compiling the seccomp filter", "errno_name",
					    cg_errno_name(e));
			goto fail;
		}
	}
	/*
	 * RLIMIT_NPROC is not enforced for root (the kernel exempts it), and
	 * counts every process of the uid rather than this call's: a developer
	 * whose uid already runs 256 processes could fork nothing. A root daemon
	 * enforces it with the call's pids cgroup, for every command's uid; a
	 * command that keeps uid 0 with no such cgroup is downgraded below.
	 */
	bool root_cmd = (p->set_ids ? p->uid : geteuid()) == 0;
	if (p->limits.nproc != CG_LIMIT_UNSET && geteuid() == 0 && have_pids_cgroup()) {
		p->nproc_cgroup = true;
	} else if (p->limits.nproc != CG_LIMIT_UNSET && root_cmd) {
		bool be_all = true;
		for (size_t i = 0; i < n; i++)
			if (cons[i]->limits.nproc != CG_LIMIT_UNSET)
				be_all &= cons[i]->best_effort;
		if (downgrade(downs, be_all, "nproc",
			      "root ignores RLIMIT_NPROC and no pids cgroup is writable", err) != 0)
			goto fail;
	}

	json_t *limits = json_object();
	for (size_t k = 0; limits && k < CG_ARRAY_LEN(limit_names); k++) {
		int64_t v = *limit_slot(&p->limits, k);
		if (v != CG_LIMIT_UNSET)
			(void)json_object_set_new(limits, limit_names[k], json_integer(v));
	}
	json_t *ports_j = json_array();
	for (size_t j = 0; ports_j && j < qi; j++)
		(void)json_array_append_new(ports_j, json_integer(p->ports[j]));
	json_t *scopes = json_array();
	uint64_t sm = cg_landlock_scope_mask(p->abi);
	if (scopes && p->n_sets && (sm & LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET))
		(void)json_array_append_new(scopes, json_string("abstract_unix_socket"));
	if (scopes && p->n_sets && (sm & LANDLOCK_SCOPE_SIGNAL))
		(void)json_array_append_new(scopes, json_string("signal"));
	if (!p->clear_groups)
		(void)json_array_append_new(notes,
					    json_string("not root: supplementary groups are kept"));
	char umask_s[8];
	(void)snprintf(umask_s, sizeof(umask_s), "%04o", (unsigned)p->umask);
	p->report = json_pack(
	    "{s:b,s:{s:i,s:i,s:b,s:b,s:o,s:b},s:{s:s,s:b,s:o},s:o,s:s,s:b,s:{s:b,s:s,s:o},"
	    "s:s,s:b,s:o,s:o,s:o,s:o,s:o,s:b}",
	    "confined", p->confined, "landlock", "abi", p->abi, "rulesets", (int)p->n_sets, "fs",
	    p->n_sets && pi > 0, "net_tcp", strcmp(net_mode, "tcp") == 0 && p->n_sets, "scoped",
	    scopes ? scopes : json_array(), "audit_log", p->n_sets && p->abi >= 7, "network",
	    "mode", net_mode, "namespace", p->netns, "tcp_ports", ports_j ? ports_j : json_array(),
	    "limits", limits ? limits : json_object(), "nproc_via",
	    p->limits.nproc == CG_LIMIT_UNSET ? "none"
	    : p->nproc_cgroup		      ? "cgroup pids.max"
					      : "RLIMIT_NPROC",
	    "no_new_privs", p->confined, "seccomp", "enforced", p->seccomp != NULL, "action",
	    "EPERM", "denied", p->seccomp ? cg_seccomp_denied_json() : json_array(), "umask",
	    umask_s, "groups_cleared", p->clear_groups, "tree", tree_mechanism(), "paths", paths_j,
	    "skipped", skipped, "downgraded", downs, "notes", notes, "best_effort",
	    any_best_effort);
	downs = skipped = paths_j = notes = NULL; /* owned by the report now */
	if (!p->report)
		goto oom;
	if (p->seccomp_root)
		(void)json_array_append_new(
		    json_object_get(json_object_get(p->report, "seccomp"), "denied"),
		    json_string("socket(AF_UNIX) (as root without a view)"));
	(void)json_object_set_new(p->report, "view", cg_view_report(p->view));
	/*
	 * A privileged stage no set governs is unconfined, as the screen says,
	 * but it follows no symlink the agent planted either: an approved root
	 * `curl -o data.json` wrote /etc/cron.d through a link the agent made
	 * after the screen was shown (s37 attack). Its own mounts then stay in
	 * its namespace, except for mount and umount, whose job they are.
	 */
	if (ctx && !ctx->view && (n > 0 || !ctx->host_mounts) && ctx->n_nosymfollow &&
	    geteuid() == 0 && take_nosymfollow(p, ctx) != 0)
		goto oom;
	if (p->set_ids)
		(void)json_object_set_new(
		    p->report, "ids",
		    json_pack("{s:I,s:I}", "uid", (json_int_t)p->uid, "gid", (json_int_t)p->gid));
	*out = p;
	return 0;
oom:
	*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing confinement");
fail:
	json_decref(downs);
	json_decref(skipped);
	json_decref(paths_j);
	json_decref(notes);
	cg_confine_plan_free(p);
	return -1;
}

/* ---- applying it (child) ---------------------------------------------- */

static int set_rlimit(int resource, int64_t v)
{
	if (v == CG_LIMIT_UNSET)
		return 0;
	/*
	 * Hard = soft: an unprivileged command cannot raise them back. CPU is
	 * the exception by one second: at the soft limit the kernel sends
	 * SIGXCPU (a chance to stop cleanly), at the hard one SIGKILL.
	 */
	struct rlimit rl = { (rlim_t)v, (rlim_t)v + (resource == RLIMIT_CPU ? 1 : 0) };
	return setrlimit(resource, &rl) == 0 ? 0 : errno;
}

/*
 * Last of the head: a privileged call a set binds writes only its write trees,
 * metadata too. Its namespace (n_nosym) always exists: the workspaces are
 * among the directories the agent can write.
 */
static int read_only_rest(const struct cg_confine_plan *plan)
{
	if (!plan->n_nosym || !plan->n_sets)
		return 0;
	return cg_view_read_only_but((const char *const *)plan->rw, plan->n_rw, plan->nosym_cwd);
}

/* Steps 1-3 (umask, a privileged call's mounts, network namespace, pids.max): before any view. */
static int confine_head(const struct cg_confine_plan *plan)
{
	int rc;
	(void)umask(plan->umask);
	cg_oom_first();
	if (plan->n_nosym && (rc = cg_view_nosymfollow((const char *const *)plan->nosym,
						       plan->n_nosym, plan->nosym_cwd)) != 0)
		return rc;
	/* In a view with a user namespace, the clone made it: no second one. */
	/* Born in a pooled namespace (cg_confine_spawn): it is already ours alone. */
	if (plan->netns && !netns_given &&
	    (rc = cg_netns_enter(plan->netns_userns && !plan->view, plan->outer_uid,
				 plan->outer_gid)) != 0)
		return rc;
	/* A host list: hand the proxy a listener made inside the new namespace. */
	if (plan->n_egress && (rc = cg_netns_send_listener(plan->egress_fd)) != 0)
		return rc;
	if (!plan->nproc_cgroup)
		return read_only_rest(plan);
	if (!joined_tree || !joined_tree->pids_max[0])
		return EPERM; /* not in a pids cgroup: cannot enforce */
	if (joined_tree->pids_procs[0]) {
		int pfd = open(joined_tree->pids_procs, O_WRONLY | O_CLOEXEC);
		if (pfd < 0)
			return errno;
		rc = write(pfd, "0", 1) == 1 ? 0 : (errno ? errno : EIO);
		(void)close(pfd);
		if (rc != 0)
			return rc;
	}
	char num[24];
	size_t len = cg_fmt_u64(num, plan->limits.nproc < 0 ? 0 : (uint64_t)plan->limits.nproc);
	int fd = open(joined_tree->pids_max, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	rc = write(fd, num, len) == (ssize_t)len ? 0 : (errno ? errno : EIO);
	(void)close(fd);
	return rc ? rc : read_only_rest(plan);
}

/* Steps 4-8 (rlimits, ids, capabilities, no_new_privs, Landlock, seccomp). */
static int confine_tail(const struct cg_confine_plan *plan)
{
	int rc;
	if ((rc = set_rlimit(RLIMIT_CPU, plan->limits.cpu_s)) != 0 ||
	    (rc = set_rlimit(RLIMIT_AS, plan->limits.as_bytes)) != 0 ||
	    (rc = set_rlimit(RLIMIT_NPROC,
			     plan->nproc_cgroup ? CG_LIMIT_UNSET : plan->limits.nproc)) != 0 ||
	    (rc = set_rlimit(RLIMIT_FSIZE, plan->limits.fsize_bytes)) != 0)
		return rc;
	/*
	 * In a view no capability survives, whoever the peer is: a root peer's
	 * call could otherwise mknod a disk, change the host's network or
	 * prlimit the daemon. The bounding set goes first (it needs
	 * CAP_SETPCAP), the rest after the ids change (it needs CAP_SETUID).
	 */
	if (plan->view && (rc = cg_caps_lock()) != 0)
		return rc;
	/*
	 * Raw syscalls, not the libc wrappers: glibc's setuid family signals
	 * every thread of the process to keep ids consistent, machinery that
	 * has no business running in a child forked from a threaded daemon.
	 */
	if (plan->clear_groups && syscall(SYS_setgroups, 0, NULL) != 0)
		return errno;
	if (plan->set_ids) {
		if (syscall(SYS_setresgid, plan->gid, plan->gid, plan->gid) != 0 ||
		    syscall(SYS_setresuid, plan->uid, plan->uid, plan->uid) != 0)
			return errno;
		/* Verify: a partial drop must never be exec'd. */
		if (getuid() != plan->uid || geteuid() != plan->uid || getgid() != plan->gid ||
		    getegid() != plan->gid)
			return EPERM;
	}
	if (plan->view && (rc = cg_caps_clear()) != 0)
		return rc;
	if (!plan->view && (plan->confined || plan->netns) && geteuid() == 0 &&
	    (rc = cg_caps_drop_root(plan->netns)) != 0)
		return rc;
	if (!plan->confined)
		return set_rlimit(RLIMIT_NOFILE, plan->limits.nofile);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return errno;
	for (size_t i = 0; i < plan->n_sets; i++)
		if ((rc = cg_landlock_apply(&plan->sets[i])) != 0)
			return rc;
	/* After Landlock, whose O_PATH fds stay open until execve. */
	if ((rc = set_rlimit(RLIMIT_NOFILE, plan->limits.nofile)) != 0)
		return rc;
	if ((rc = cg_seccomp_load(plan->seccomp)) != 0)
		return rc;
	return plan->seccomp_root ? cg_seccomp_load(plan->seccomp_root) : 0;
}

int cg_confine_child(const struct cg_confine_plan *plan)
{
	int rc;
	if (!plan)
		return 0;
	if (plan->view)
		return EINVAL; /* a view needs cg_confine_fork + cg_confine_exec */
	if ((rc = confine_head(plan)) != 0)
		return rc;
	return confine_tail(plan);
}

/*
 * What the command's process (pid 2 of a view) runs until execve: a copy
 * on its own stack (cg_view_spawn), so nothing here may point into pid 1's.
 */
struct exec_args {
	const struct cg_confine_plan *plan;
	const char *exe;
	char *const *argv;
	char *const *envp;
	cg_confine_fail_fn fail;
	cg_confine_ready_fn ready;
	int fail_fd;
};

__attribute__((noreturn)) static void exec_failed(const struct exec_args *a, int step, int err)
{
	a->fail(a->fail_fd, step, err);
	_exit(127); /* a fail that returned */
}

#define KEEP_FDS_MAX 32

/*
 * Close every fd >= 3 but the report's, the Landlock rulesets' and `also`
 * (n_also of them; -1s are skipped). All of them are close-on-exec already,
 * but this process was started while the daemon held other calls' pipes,
 * and until its exec (which waits for its permit) it would hold their write
 * ends too: another call's report or output would not see EOF before our
 * permit is on disk. More rulesets than we can list: leave the fds to the
 * exec.
 */
static void close_others(const struct exec_args *a, const int *also, size_t n_also)
{
	int keep[KEEP_FDS_MAX];
	size_t n = 0;
	if (a->fail_fd >= 3)
		keep[n++] = a->fail_fd;
	for (size_t i = 0; i < n_also; i++)
		if (also[i] >= 3)
			keep[n++] = also[i];
	for (size_t i = 0; i < a->plan->n_sets; i++) {
		int fd = a->plan->sets[i].ruleset_fd;
		if (fd < 3)
			continue;
		if (n == KEEP_FDS_MAX)
			return;
		keep[n++] = fd;
	}
	for (size_t i = 1; i < n; i++) /* insertion sort: a handful at most */
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned lo = 3;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned)keep[i] > lo)
			(void)syscall(SYS_close_range, lo, (unsigned)keep[i] - 1, 0U);
		if ((unsigned)keep[i] >= lo)
			lo = (unsigned)keep[i] + 1;
	}
	(void)syscall(SYS_close_range, lo, ~0U, 0U);
}

/*
 * The cwd was entered as root (the daemon pinned it): entered again by path
 * as the peer, ids dropped and no capability left, so that the kernel checks
 * the search permission of every directory above it as the peer's own shell
 * would (s42a F1: another uid's project below a 0700 home was read through a
 * cwd in it). The same directory, or no exec. 0 or errno.
 */
static int peer_cwd_enter(const struct cg_confine_plan *plan)
{
	struct stat here, there;
	if (!plan->set_ids || !plan->peer_cwd)
		return 0;
	if (stat(".", &here) != 0 || chdir(plan->peer_cwd) != 0 || stat(".", &there) != 0)
		return errno;
	return here.st_dev == there.st_dev && here.st_ino == there.st_ino ? 0 : ESTALE;
}

__attribute__((noreturn)) static void confine_and_exec(void *arg)
{
	const struct exec_args *a = arg;
	close_others(a, NULL, 0);
	int rc = confine_tail(a->plan);
	if (rc != 0)
		exec_failed(a, CG_CONFINE_STEP_CONFINE, rc);
	if ((rc = peer_cwd_enter(a->plan)) != 0)
		exec_failed(a, CG_CONFINE_STEP_CWD, rc);
	/* Write-ahead: everything is ready; the command itself waits for its permit. */
	if (a->plan->gate && (rc = cg_gate_wait(a->plan->gate, CONFINE_GATE_WAIT_MS)) != 0)
		exec_failed(a, CG_CONFINE_STEP_CONFINE, rc);
	if (a->ready)
		a->ready(a->fail_fd);
	execve(a->exe, a->argv, a->envp);
	exec_failed(a, CG_CONFINE_STEP_EXEC, errno);
}

void cg_confine_exec(const struct cg_confine_plan *plan, const char *exe, char *const *argv,
		     char *const *envp, cg_confine_fail_fn fail, cg_confine_ready_fn ready,
		     int fail_fd)
{
	struct exec_args a = { plan, exe, argv, envp, fail, ready, fail_fd };
	int rc;
	if (!plan) {
		if (ready)
			ready(fail_fd);
		execve(exe, argv, envp);
		exec_failed(&a, CG_CONFINE_STEP_EXEC, errno);
	}
	/*
	 * This process was cloned with every descriptor the daemon had, other
	 * peers' sockets among them. It lets go of them first, before the
	 * network namespace it may make (0.5-8 ms when the pool has none
	 * ready) and, as a view's pid 1, before the view (until it execs
	 * callgate-init), keeping only what the steps below need.
	 */
	const int also[] = { plan->view ? cg_view_fd(plan->view) : -1,
			     plan->view ? atomic_load(&init_fd) : -1,
			     plan->n_egress ? plan->egress_fd : -1 };
	close_others(&a, also, CG_ARRAY_LEN(also));
	if ((rc = confine_head(plan)) != 0)
		exec_failed(&a, CG_CONFINE_STEP_CONFINE, rc);
	if (!plan->view)
		confine_and_exec(&a);
	if (plan->view_stall_ms > 0) {
		struct timespec ts = { plan->view_stall_ms / 1000,
				       (long)(plan->view_stall_ms % 1000) * 1000000 };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	if ((rc = cg_view_enter(plan->view)) != 0)
		exec_failed(&a, CG_CONFINE_STEP_CONFINE, rc);
	/* Returns on failure only: pid 1 could not start the command or become its init. */
	rc = cg_view_spawn(plan->view, confine_and_exec, &a, sizeof(a), atomic_load(&init_fd),
			   shared_exec_word);
	exec_failed(&a, CG_CONFINE_STEP_CONFINE, rc);
}

json_t *cg_confine_report(const struct cg_confine_plan *plan)
{
	if (!plan)
		return json_pack("{s:b}", "confined", 0);
	return json_deep_copy(plan->report);
}

int64_t cg_confine_timeout_ms(const struct cg_confine_plan *plan)
{
	return plan ? plan->timeout_ms : CG_LIMIT_UNSET;
}

void cg_confine_plan_free(struct cg_confine_plan *plan)
{
	if (!plan)
		return;
	for (size_t i = 0; i < plan->n_strings; i++)
		free(plan->strings[i]);
	free(plan->strings);
	for (size_t i = 0; i < plan->n_nosym; i++)
		free(plan->nosym[i]);
	free(plan->nosym);
	for (size_t i = 0; i < plan->n_rw; i++)
		free(plan->rw[i]);
	free(plan->rw);
	free(plan->nosym_cwd);
	free(plan->peer_cwd);
	free(plan->paths);
	free(plan->ports);
	for (size_t i = 0; i < plan->n_sets; i++)
		cg_landlock_release(&plan->sets[i]);
	free(plan->sets);
	for (size_t i = 0; i < plan->n_stage_plans; i++)
		cg_confine_plan_free(plan->stage_plans[i]);
	free(plan->stage_plans);
	cg_view_free(plan->view);
	json_decref(plan->report);
	free(plan);
}

/* Does a set that governs the stages in mask apply to stage i? */
static bool governs(uint64_t mask, size_t i)
{
	return mask == 0 || (mask & (1ULL << (i < 63 ? i : 63))) != 0;
}

/* Is every set's mask the same stages (then one plan serves them all)? */
static bool one_plan_fits(const uint64_t *stages, size_t n, size_t n_stages)
{
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < n_stages; i++)
			if (!governs(stages ? stages[k] : 0, i))
				return false;
	return true;
}

/*
 * The container plan: stage 0's report with every stage's under "stages",
 * and pipeline_confined, whether every stage is (stage 0's "confined" alone
 * had a verdict call a pipeline confined whose second stage ran unconfined
 * as root: found by attack).
 */
static int stages_report(struct cg_confine_plan *top)
{
	json_t *all = json_array();
	top->report = json_deep_copy(top->stage_plans[0]->report);
	if (!all || !top->report) {
		json_decref(all);
		return -1;
	}
	top->timeout_ms = CG_LIMIT_UNSET;
	bool every = true;
	for (size_t i = 0; i < top->n_stage_plans; i++) {
		const json_t *r = top->stage_plans[i]->report;
		every &= json_is_true(json_object_get(r, "confined"));
		(void)json_array_append_new(all, json_deep_copy(r));
		top->timeout_ms = limit_min(top->timeout_ms, top->stage_plans[i]->timeout_ms);
	}
	if (json_object_set_new(top->report, "pipeline_confined", json_boolean(every)) != 0)
		return -1;
	return json_object_set_new(top->report, "stages", all);
}

int cg_confine_prepare_stages(const struct cg_constraints *const *cons, const uint64_t *stages,
			      size_t n, size_t n_stages, const struct cg_confine_ctx *ctx,
			      struct cg_confine_plan **out, struct cg_reply **err)
{
	if (n_stages <= 1 || one_plan_fits(stages, n, n_stages))
		return cg_confine_prepare(cons, n, ctx, out, err);
	struct cg_confine_plan *top = calloc(1, sizeof(*top));
	const struct cg_constraints **sel = calloc(n ? n : 1, sizeof(*sel));
	if (!top || !sel || !(top->stage_plans = calloc(n_stages, sizeof(*top->stage_plans)))) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing confinement");
		goto fail;
	}
	top->umask = plan_umask(ctx); /* as each stage's */
	for (size_t i = 0; i < n_stages; i++) {
		size_t k = 0;
		for (size_t j = 0; j < n; j++)
			if (governs(stages[j], i))
				sel[k++] = cons[j];
		if (cg_confine_prepare(sel, k, ctx, &top->stage_plans[i], err) != 0)
			goto fail;
		top->n_stage_plans++;
	}
	if (stages_report(top) != 0) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing confinement");
		goto fail;
	}
	free(sel);
	*out = top;
	return 0;
fail:
	free(sel);
	cg_confine_plan_free(top);
	return -1;
}

/* The write trees of the plan's views (stage 0's and every stage's), up to 64. */
static size_t plan_write_trees(const struct cg_confine_plan *plan, const char *trees[64])
{
	size_t n = 0;
	if (!plan)
		return 0;
	n += cg_view_write_trees(plan->view, trees, 64);
	for (size_t i = 0; i < plan->n_stage_plans; i++)
		n += cg_view_write_trees(plan->stage_plans[i]->view, trees + n, 64 - n);
	return n;
}

struct cg_watch *cg_confine_watch(const struct cg_confine_plan *plan)
{
	const char *trees[64];
	size_t n = plan_write_trees(plan, trees);
	return n ? cg_watch_start(trees, n, cg_view_watched_names()) : NULL;
}

json_t *cg_confine_sweep(const struct cg_confine_plan *plan, struct cg_watch *watch,
			 const char *tag)
{
	json_t *out = json_array();
	cg_watch_stop(watch);
	const char *trees[64];
	if (!cg_watch_complete(watch) && plan_write_trees(plan, trees) > 0)
		cg_log(
		    "info", NULL,
		    "call %s: %s; its write trees are walked whole after it (docs/confinement.md)",
		    tag,
		    watch ? "the kernel's record of what it changed is not whole (a file system "
			    "that cannot be marked, a mount below a tree, its bound)"
			  : "no record of what it changed could be kept (fanotify refused)");
	if (out && plan) {
		(void)cg_view_sweep(plan->view, watch, tag, out);
		for (size_t i = 0; i < plan->n_stage_plans; i++)
			(void)cg_view_sweep(plan->stage_plans[i]->view, watch, tag, out);
	}
	cg_watch_free(watch);
	return out;
}

/* One list of a stage's report's view (writable, protected, pinned), added to out once each. */
static void report_paths(const json_t *report, const char *list, json_t *trees)
{
	size_t i, k;
	const json_t *t, *have;
	json_array_foreach(json_object_get(json_object_get(report, "view"), list), i, t)
	{
		bool dup = !json_is_string(t);
		json_array_foreach(trees, k, have) dup |= json_equal(have, t);
		if (!dup)
			(void)json_array_append_new(trees, json_string(json_string_value(t)));
	}
}

json_t *cg_confine_sweep_cut(const json_t *report, int64_t since_ns, const char *tag,
			     json_t **trees)
{
	json_t *all = json_array(), *known = json_array(), *out = json_array();
	size_t i;
	const json_t *st, *t;
	static const char *const kept[] = { "protected", "pinned" };
	for (size_t l = 0; all && known && l < 3; l++) {
		json_t *into = l ? known : all;
		const char *list = l ? kept[l - 1] : "writable";
		report_paths(report, list, into);
		json_array_foreach(json_object_get(report, "stages"), i, st)
		    report_paths(st, list, into);
	}
	const char **w = all ? calloc(json_array_size(all) + 1, sizeof(*w)) : NULL;
	const char **k = known ? calloc(json_array_size(known) + 1, sizeof(*k)) : NULL;
	if (!w || !k || !out) {
		json_decref(all);
		json_decref(known);
		json_decref(out);
		free(w);
		free(k);
		return NULL;
	}
	json_array_foreach(all, i, t) w[i] = json_string_value(t);
	json_array_foreach(known, i, t) k[i] = json_string_value(t);
	(void)cg_view_sweep_trees(w, json_array_size(all), k, json_array_size(known), since_ns, tag,
				  out);
	free(w);
	free(k);
	json_decref(known);
	*trees = all;
	return out;
}

const struct cg_confine_plan *cg_confine_stage_plan(const struct cg_confine_plan *plan, size_t i)
{
	if (!plan || plan->n_stage_plans == 0)
		return plan;
	return plan->stage_plans[i < plan->n_stage_plans ? i : plan->n_stage_plans - 1];
}

size_t cg_confine_egress_sets(const struct cg_confine_plan *plan, const struct cg_constraints **out,
			      size_t max)
{
	size_t n = 0;
	for (size_t i = 0; plan && i < plan->n_egress && n < max; i++)
		out[n++] = plan->egress[i];
	for (size_t i = 0; plan && i < plan->n_stage_plans; i++)
		n += cg_confine_egress_sets(plan->stage_plans[i], out + n, max - n);
	return n;
}

void cg_confine_set_egress_fd(struct cg_confine_plan *plan, int fd)
{
	if (!plan)
		return;
	plan->egress_fd = fd;
	for (size_t i = 0; i < plan->n_stage_plans; i++)
		cg_confine_set_egress_fd(plan->stage_plans[i], fd);
}

void cg_confine_set_gate(struct cg_confine_plan *plan, _Atomic uint32_t *gate)
{
	if (!plan)
		return;
	plan->gate = gate;
	for (size_t i = 0; i < plan->n_stage_plans; i++)
		cg_confine_set_gate(plan->stage_plans[i], gate);
}

int cg_confine_egress_fd(const struct cg_confine_plan *plan)
{
	return plan && plan->n_egress ? plan->egress_fd : -1;
}
