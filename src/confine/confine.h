/* SPDX-License-Identifier: MIT */
/*
 * confine — kernel confinement of a command, applied in the child before exec,
 * and the per-call process tree that the deadline kills.
 *
 * The parent prepares a plan (may allocate, open fds, compile filters); the
 * forked child applies it with async-signal-safe calls only, then execs.
 *
 * Invariants:
 *  - cg_confine_child MUST only make async-signal-safe calls (the daemon is
 *    multi-threaded; the child of fork() may not allocate or lock).
 *  - A constraint the running kernel cannot enforce MUST make prepare fail
 *    (fail closed), unless the constraint set is marked best_effort; then
 *    the downgrade is recorded in the report.
 *  - The tree MUST contain every descendant, including those that setsid()
 *    or double-fork, so that cg_tree_kill reaches them all.
 */
#ifndef CG_CONFINE_H
#define CG_CONFINE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

#include "chain.h"
#include "reply.h"

struct cg_confine_ctx {
	const char *workspace;	  /* expands ${workspace} */
	const char *cwd;	  /* expands ${cwd} */
	const char *home;	  /* expands ${home} */
	bool set_ids;		  /* drop to uid/gid (daemon is root, stage unprivileged) */
	bool allow_setuid;	  /* the command is sudo: it must be able to gain privilege */
	bool view;		  /* build the call's world (every unprivileged call) */
	bool no_landlock;	  /* debugging (callgate sandbox): the view alone, no Landlock */
	const char *agent_socket; /* forward_agent: the one socket the view keeps reachable */
	const char *daemon_agent; /* the daemon's own SSH_AUTH_SOCK: hidden unless forwarded */
	const char *const *own_paths; /* the daemon's state dir and sockets: hidden in every view */
	size_t n_own_paths;
	/* No view, as root: where symlinks are not followed (cg_view_nosymfollow). */
	const char *const *nosymfollow;
	size_t n_nosymfollow;
	/* Every stage is mount or umount: their job is the host's mount table (if unconfined). */
	bool host_mounts;
	uid_t uid;
	gid_t gid;
	/* The command's umask when umask_set (the caller's: src/kernel/run.c); else 077. */
	bool umask_set;
	mode_t umask;
};

struct cg_confine_plan;

/*
 * Does the constraint set (as cg_constraints_to_json writes it) get those?
 * Its filesystem is confined (it has an exec list) and the list is empty.
 * What every view of a set (gate, the approver's screen) shows for exec.
 */
bool cg_confine_exec_defaulted(const json_t *set);

/*
 * Prepare confinement for the intersection of n constraint sets (n may be 0:
 * baseline hardening only). On success 0 and *out (free with
 * cg_confine_plan_free); on failure -1 and *err (the call must not run).
 */
int cg_confine_prepare(const struct cg_constraints *const *cons, size_t n,
		       const struct cg_confine_ctx *ctx, struct cg_confine_plan **out,
		       struct cg_reply **err) __attribute__((warn_unused_result));

/*
 * Per-stage terms: stages[k] says which stages set k governs (bit i: stage
 * i, bit 63: stage 63 and later; 0: every stage). Each stage gets a plan of
 * the sets that govern it (its own Landlock domains and view); when every
 * set governs every stage this is cg_confine_prepare. The report is stage
 * 0's with every stage's under "stages". Free with cg_confine_plan_free.
 */
int cg_confine_prepare_stages(const struct cg_constraints *const *cons, const uint64_t *stages,
			      size_t n, size_t n_stages, const struct cg_confine_ctx *ctx,
			      struct cg_confine_plan **out, struct cg_reply **err)
    __attribute__((warn_unused_result));

/*
 * After the call's processes are gone: protected names the call made where
 * none existed, and what names a program in repositories it made or wrote,
 * are set aside (cg_view_sweep, for every stage's view). The
 * list of what was (or could not be) set aside; empty when nothing was.
 */
struct cg_watch;
json_t *cg_confine_sweep(const struct cg_confine_plan *plan, struct cg_watch *watch,
			 const char *tag);

/*
 * Before the call's first process: record what is made or written in the
 * plan's write trees while it runs (watch.h), for cg_confine_sweep, which
 * stops and frees it. NULL when the plan writes nowhere or nothing can be
 * watched (the sweep then walks).
 */
struct cg_watch *cg_confine_watch(const struct cg_confine_plan *plan);

/*
 * After a crash: the sweep of a call a daemon that is gone ran, from the
 * confinement report its permit recorded (cg_confine_report: the view's
 * writable trees, every stage's). Its write trees are judged by what
 * changed since since_ns (cg_view_sweep_trees). *trees: the trees (a new
 * array). The set-aside list as cg_confine_sweep's, or NULL on ENOMEM.
 */
json_t *cg_confine_sweep_cut(const json_t *report, int64_t since_ns, const char *tag,
			     json_t **trees);

/* The plan stage i runs under (plan itself unless it holds per-stage plans). */
const struct cg_confine_plan *cg_confine_stage_plan(const struct cg_confine_plan *plan, size_t i);

/*
 * In the child, after fork and fd set-up, before exec. 0, or an errno value.
 * A plan with a view refuses (EINVAL): use cg_confine_fork + cg_confine_exec.
 */
int cg_confine_child(const struct cg_confine_plan *plan);

#define CG_CONFINE_STEP_CONFINE 0
#define CG_CONFINE_STEP_EXEC	1
#define CG_CONFINE_STEP_CWD	2 /* the cwd, entered again as the peer, was refused */

/*
 * How the child reports a failure: write (step, err) where the parent reads
 * it, then _exit. Must not return; async-signal-safe. fd is the value given
 * to cg_confine_exec.
 */
typedef void (*cg_confine_fail_fn)(int fd, int step, int err);

/*
 * How the command says it reached its execve: called right before it, with
 * its permit and its confinement in place, so that a parent can tell an
 * exec (this, then the close-on-exec fd's EOF) from a death on the way
 * (EOF alone). May return; async-signal-safe. fd as for fail. NULL: none.
 */
typedef void (*cg_confine_ready_fn)(int fd);

/*
 * In the child made by cg_confine_fork, after fd set-up and fchdir to the
 * call's cwd: apply the plan (the view first, if any) and execve. Never
 * returns: on failure, fail(fail_fd, step, errno) is called, step saying
 * whether confinement or execve failed, in whichever process failed: with
 * a view, that is pid 1 of the call's namespaces while it builds the view,
 * and the command's own process (pid 2, its init already running) after.
 * ready(fail_fd) is called right before the command's execve.
 * plan may be NULL (plain execve). Async-signal-safe.
 */
__attribute__((noreturn)) void cg_confine_exec(const struct cg_confine_plan *plan, const char *exe,
					       char *const *argv, char *const *envp,
					       cg_confine_fail_fn fail, cg_confine_ready_fn ready,
					       int fail_fd);

/* What was enforced: constraints, Landlock ABI, downgrades. New reference. */
json_t *cg_confine_report(const struct cg_confine_plan *plan);

/* Deadline override from the constraints (CG_LIMIT_UNSET when none). */
int64_t cg_confine_timeout_ms(const struct cg_confine_plan *plan);

void cg_confine_plan_free(struct cg_confine_plan *plan);

/*
 * The constraint sets with a host list (net: {allow: …}) of the plan and its
 * stage plans, at most max of them, into out. 0: the call needs no proxy.
 */
size_t cg_confine_egress_sets(const struct cg_confine_plan *plan, const struct cg_constraints **out,
			      size_t max);

/*
 * Where a child of a host-list plan sends the listener it makes inside its
 * network namespace (an AF_UNIX socket, SCM_RIGHTS; see src/egress/). Set
 * before the pipeline starts; the plan does not own the fd.
 */
void cg_confine_set_egress_fd(struct cg_confine_plan *plan, int fd);

/*
 * Write-ahead across the spawn: every stage's command, fully confined,
 * waits right before execve until gate is GO (REFUSED or a minute without
 * an answer: it does not run, and the stage fails). A stage started by
 * copying memory (cg_confine_fork's way) is started only once the gate is
 * open. The plan does not own the gate; it must outlive the run. NULL: none.
 */
void cg_confine_set_gate(struct cg_confine_plan *plan, _Atomic uint32_t *gate);

/* The fd a child sends its listener over, or -1 (for benchmarks and tests). */
int cg_confine_egress_fd(const struct cg_confine_plan *plan);

/* The process tree of one call. */
struct cg_tree;

/* Parent, before the first fork of a call. 0 and *out, or -1 with *err. */
int cg_tree_new(const char *trace_id, struct cg_tree **out, struct cg_reply **err)
    __attribute__((warn_unused_result));
/*
 * In each child, first thing after fork (async-signal-safe). leader_pgid is
 * 0 for the first stage (it becomes the group leader) and that stage's pid
 * for later ones. 0, or an errno value.
 */
int cg_tree_child_join(const struct cg_tree *t, pid_t leader_pgid);
/*
 * Parent: fork(2) for a stage of this tree. Where the kernel allows, the
 * child is created directly inside the call's cgroup (clone3 with
 * CLONE_INTO_CGROUP), which saves the migration cost of joining it (an RCU
 * grace period, hundreds of microseconds); otherwise plain fork(). Returns
 * like fork(). The child MUST still call cg_tree_child_join (it then skips
 * the cgroup write) and MUST only make async-signal-safe calls until exec:
 * libc's atfork handlers did not run.
 */
pid_t cg_tree_fork(struct cg_tree *t);
/*
 * Parent: cg_tree_fork for a stage that runs under plan (may be NULL): with
 * a view, the child is created in its own mount, pid, UTS and IPC
 * namespaces. Same contract as cg_tree_fork.
 */
pid_t cg_confine_fork(struct cg_tree *t, const struct cg_confine_plan *plan);
/*
 * Parent: start a stage of this tree under plan (may be NULL): fn(arg) runs
 * in the child (async-signal-safe calls only; it execs or _exits, and a
 * return _exits 127). With a view, callgate-init at hand
 * (cg_confine_init_open) and the kernel willing, the child shares this
 * process's memory (clone3 CLONE_VM|CLONE_VFORK into the tree's cgroup):
 * this thread is suspended until the stage's pid 1 has started the command
 * and exec'd callgate-init, or failed. Otherwise cg_confine_fork. Returns
 * the child's pid, or -1 with errno.
 */
pid_t cg_confine_spawn(struct cg_tree *t, const struct cg_confine_plan *plan, int (*fn)(void *),
		       void *arg);
/*
 * Find this process's cgroup tree now rather than at the first call, and
 * sweep what daemons that are gone left in it: empty per-call cgroups are
 * removed, and calls still running there are killed first (no deadline or
 * record covers them any more). Returns how many such calls were killed.
 */
size_t cg_confine_sweep_gone(void);
/*
 * What a call with an nproc limit costs here, when it is worth saying: the
 * pids controller only on cgroup v1 and the cgroup2 mount without
 * favordynmods (each call's migration into its pids cgroup then waits for
 * an RCU grace period). NULL otherwise. After cg_confine_sweep_gone.
 */
const char *cg_confine_pids_note(void);
/*
 * Find and open callgate-init, for every later view: beside this program,
 * else in LIBEXECDIR/callgate; a regular executable file owned by root or
 * by us, writable by no one else. 0 and where (its path), or -1 and where
 * (why not): views then keep a forked pid 1 as their init.
 */
int cg_confine_init_open(char *where, size_t len);
/* Parent: record a started child (its pid) so kill can reach it. */
void cg_tree_add(struct cg_tree *t, pid_t pid);
/* Signal every process of the tree, descendants that escaped included. */
void cg_tree_kill(struct cg_tree *t, int sig);
/* Are processes of this tree still alive (e.g. escaped grandchildren)? */
bool cg_tree_alive(struct cg_tree *t);
void cg_tree_free(struct cg_tree *t);

/*
 * How this tree contains its processes, for the evidence: {"mechanism":
 * "cgroup2", "cgroup": name, "pids_max": bool} or {"mechanism":
 * "process-group", "limitation": …, "why": …}. New reference.
 */
json_t *cg_tree_report(const struct cg_tree *t);

#endif
