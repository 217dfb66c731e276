/* SPDX-License-Identifier: MIT */
/*
 * view — the world a confined call sees: a mount namespace built for each
 * stage before exec, with its own pid, UTS and IPC namespaces.
 *
 * The parent (cg_view_prepare) decides everything and may allocate: which
 * trees are writable, which paths are hidden or protected. The child
 * created with cg_view_clone_flags() (cg_view_enter) only makes raw,
 * async-signal-safe syscalls; it also makes the stage's private /tmp and
 * /dev/shm, so Landlock rulesets of a view are built there, afterwards.
 *
 * Invariants:
 *  - cg_view_enter and cg_view_spawn MUST only make async-signal-safe calls.
 *  - The process that runs the command MUST NOT hold a capability unless the
 *    call is privileged (then there is no view at all).
 *  - A view that cannot be built MUST stop the call (the child returns an
 *    errno and never execs).
 */
#ifndef CG_VIEW_H
#define CG_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "chain.h"
#include "reply.h"

#if defined(__SANITIZE_ADDRESS__)
#define CG_VIEW_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CG_VIEW_ASAN 1
#endif
#endif
#ifdef CG_VIEW_ASAN
#include <sanitizer/asan_interface.h>
#endif

/*
 * A stack a child of ours ran on while sharing our memory: under ASan its
 * frames' redzones stay poisoned in our shadow when the child execs or
 * exits without returning; clear them before the memory is used again.
 */
static inline void cg_stack_unpoison(void *p, size_t n)
{
#ifdef CG_VIEW_ASAN
	__asan_unpoison_memory_region(p, n);
#else
	(void)p;
	(void)n;
#endif
}

struct cg_view;
struct cg_watch;

/* What the view is built from (all strings are borrowed for the call). */
struct cg_view_spec {
	const char *const *write; /* expanded absolute trees bound read-write */
	size_t n_write;
	const char *const *hide; /* expanded absolute paths or globs, beyond the built-in ones */
	size_t n_hide;
	const char *const *protect; /* absolute, or relative to every write tree */
	size_t n_protect;
	const char *const *scratch; /* expanded absolute directories: an empty tmpfs each */
	size_t n_scratch;
	uid_t scratch_uid; /* who owns them: the user the command runs as */
	gid_t scratch_gid;
	const char *home;      /* the call's home, for the built-in credential stores */
	const char *cwd;       /* the call's canonical cwd (absolute), entered in the view */
	const char *workspace; /* visible (read-only unless written) even under a private /tmp */
	const char *reveal;    /* a granted socket (forward_agent) kept reachable, or NULL */
	bool shared_tmp;       /* the host's /tmp instead of a private one */
	bool git_write;	       /* .git in a write tree stays writable (pinned), else read-only */
	bool unprivileged;     /* the daemon is not root: a user namespace carries the view */
	uid_t outer_uid;       /* for the user namespace's maps */
	gid_t outer_gid;
};

/*
 * Prepare the view for one stage. On success 0 and *out (free with
 * cg_view_free); on failure -1 and *err (the call must not run).
 */
int cg_view_prepare(const struct cg_view_spec *spec, struct cg_view **out, struct cg_reply **err)
    __attribute__((warn_unused_result));

/* The namespace flags the stage's process must be cloned with. */
unsigned long cg_view_clone_flags(const struct cg_view *v);

/*
 * Path of the private /tmp's root for a Landlock rule, as the child sees it
 * inside the view ("/tmp"); NULL when /tmp is shared. Owned by the view.
 */
const char *cg_view_tmp_rule_path(const struct cg_view *v);
/* Same for the private /dev/shm. */
const char *cg_view_shm_rule_path(const struct cg_view *v);
/*
 * The view's filesystems exist only in the child: the Landlock rulesets of
 * a plan with a view must be built by the child, after cg_view_enter.
 */
bool cg_view_rules_in_child(const struct cg_view *v);

/*
 * Child, first process of the new namespaces (pid 1 there), cwd the pinned
 * directory: build the view, pivot into it and enter spec.cwd there,
 * checked to be that same directory. 0, or an errno value.
 */
int cg_view_enter(const struct cg_view *v);

/* The one descriptor cg_view_enter needs of the parent's (the tmpfs of holes), or -1. */
int cg_view_fd(const struct cg_view *v);

/* The most bytes of fn's argument cg_view_spawn copies for the command. */
#define CG_VIEW_ARG_MAX 128

/*
 * Child, after cg_view_enter: split pid 1 from the command. fn runs in a
 * new process (pid 2) that shares pid 1's memory until it execs, on a copy
 * of arg (arg_len bytes, at most CG_VIEW_ARG_MAX) kept on its own stack;
 * fn must not return (it execs, or reports its failure and exits). Pid 1
 * becomes the namespace's init (forwards TERM/INT/HUP/QUIT/USR1/USR2,
 * reaps, exits with the command's status, or 128+signal): by exec'ing
 * init_fd (callgate-init) when it is >= 0, before fn starts, else as
 * itself once fn has exec'd or failed. exec_word, when not NULL: pid 1
 * shares the daemon's memory (then init_fd is required), and the kernel
 * sets *exec_word to the command's pid at the clone and clears it (with a
 * futex wake) when the command execs or exits; the daemon's thread must
 * wait for that before it runs on, because until then the command runs
 * on that thread's TLS. Returns only on failure: the command could not be
 * started, or the init could not be exec'd (the command killed before it
 * ran anything).
 */
int cg_view_spawn(const struct cg_view *v, void (*fn)(void *), const void *arg, size_t arg_len,
		  int init_fd, pid_t *exec_word);

/* What the view holds, for the report. New reference. */
/*
 * After a call, in the daemon: a protected name (a write tree's .envrc,
 * .claude, .vscode, a .git's commondir under git: write) that did not exist
 * when the view was made cannot be covered by a mount, so the call could make
 * it. Each such name that exists now is renamed NAME.callgate-set-aside-TAG
 * beside itself (reached beneath its tree, no symlink followed), so that
 * nothing the developer runs later takes it, and appended to out as {path,
 * set_aside_as} ({path, error} when it could not be). So are what names a
 * program in repositories the call made or wrote: found by watch's changes
 * at any depth when it saw them all, else by the prepare's walk of levels.
 * 0, or -1 if any failed.
 */
int cg_view_sweep(const struct cg_view *v, const struct cg_watch *watch, const char *tag,
		  json_t *out);

/*
 * After a crash: the sweep of a call whose view is gone (a daemon killed
 * while it ran; its permit named these write trees). Every directory of
 * each tree, its root too, is judged as a sweep with no whole record of a
 * call's changes judges them, by what changed since since_ns, with no
 * repository taken for the developer's but those its view protected or
 * pinned (known: its report's lists); and the protected names at each
 * root that changed since then are set aside. Appends to out as
 * cg_view_sweep does. 0, or -1 if any failed.
 */
int cg_view_sweep_trees(const char *const *trees, size_t n, const char *const *known,
			size_t n_known, int64_t since_ns, const char *tag, json_t *out);

/* The names whose changes the sweep judges by name (cg_watch_start's names). */
const char *const *cg_view_watched_names(void);

/* The write trees a watch of the call covers (cg_confine_watch): up to max, how many. */
size_t cg_view_write_trees(const struct cg_view *v, const char **out, size_t max);
json_t *cg_view_report(const struct cg_view *v);

void cg_view_free(struct cg_view *v);

/*
 * Capabilities, in two steps around the change of ids (which needs
 * CAP_SETUID): cg_caps_lock locks the securebits (no fix-ups, no root
 * privilege at exec, no ambient raise) and empties the bounding and
 * ambient sets; cg_caps_clear then empties effective, permitted and
 * inheritable. Async-signal-safe. 0 or errno.
 */
int cg_caps_lock(void);
int cg_caps_clear(void);

/*
 * A privileged call without a view that a constraint set governs keeps
 * root's capabilities but these: CAP_MKNOD (an approved `tar -xf` made a
 * 0666 node of the host's disk in the workspace, s37 attack), module and raw
 * I/O, file capabilities, immutable flags, reboot, the clock and MAC; and
 * when its network is a namespace of its own (none, loopback, a host list,
 * net), CAP_NET_ADMIN (it changed the host's network from its namespace: an
 * attack made a veth pair in pid 1's), CAP_NET_RAW and CAP_SYS_ADMIN (which
 * would let it setns() out). From the bounding, effective, permitted and
 * inheritable sets; ambient cleared. 0 or errno.
 */
int cg_caps_drop_root(bool net);

/*
 * A privileged call has no view, but a mount namespace of its own: the
 * host's mounts, propagated in and none out, with dirs (n of them: the
 * workspaces, the peer's home, the world-writable temporary directories)
 * cloned over themselves with nosymfollow. There the agent can plant a
 * symlink to any file, and root would follow it: an approved `cat
 * ws/notes.txt` read /etc/shadow (found by attack). Each dir must exist
 * (one renamed away meanwhile fails the call). The cwd is entered again
 * through the new mounts and must still be the directory it was. Child
 * only, async-signal-safe; 0 or an errno value.
 */
int cg_view_nosymfollow(const char *const *dirs, size_t n, const char *cwd);
/*
 * In that namespace, when a constraint set binds the call, and once
 * nothing of the setup writes a file any more (pids.max): every mount
 * read-only but the write trees rw, which keep the host's own attributes
 * (cloned before / goes read-only, so that one the host mounts read-only
 * stays so), shortest path first. Landlock binds what a file holds, not
 * its owner, mode, times or attributes: a confined root `make install`
 * chowned a file in /etc to the agent, who then rewrote it (s37 attack).
 * The cwd is entered again. Child only, async-signal-safe; 0 or errno.
 */
int cg_view_read_only_but(const char *const *rw, size_t n_rw, const char *cwd);
/* Write trees cg_view_read_only_but keeps writable at most (more: E2BIG, the call does not run). */
#define CG_VIEW_RW_MAX 64

/*
 * The calling process (a call's pid 1 or command, in the child) asks the
 * kernel's OOM killer to take it before the daemon: oom_score_adj 1000.
 */
void cg_oom_first(void);

/*
 * Set (on this thread) while a child shares the daemon's memory until it
 * execs: cg_oom_first does nothing then, since the OOM killer's choice of
 * that child would kill every task of the memory it shares, the daemon
 * first (s43b F2). The spawner raises the call's processes after they exec
 * (cg_oom_first_procs).
 */
extern __thread bool cg_oom_deferred;

/* Raise every process in the cgroup dir cg_fd names to oom_score_adj 1000 (best effort). */
void cg_oom_first_procs(int cg_fd);

#endif
