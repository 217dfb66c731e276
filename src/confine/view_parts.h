/* SPDX-License-Identifier: MIT */
/*
 * view_parts — what the view (view.c) and the sweep after its call
 * (sweep.c) share: the prepared view itself, and the few readings of a tree
 * both make. Internal to src/confine; nothing outside includes it.
 *
 * Invariants:
 *  - Only view.c builds or frees a struct cg_view; the sweep reads it.
 *  - A reading of a tree (a git directory's parts, a walk) exists once,
 *    here, so that the prepare and the sweep cannot disagree on what a
 *    repository is.
 */
#ifndef CG_VIEW_PARTS_H
#define CG_VIEW_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <jansson.h>
#include <limits.h>

#include "view.h"

struct cg_view {
	char **write; /* absolute, existing */
	size_t n_write;
	char **pin; /* directories bound onto themselves: mount points, never renamed */
	size_t n_pin;
	char **anchor; /* a hidden path's directories in a write tree: bound onto themselves */
	size_t n_anchor;
	char **protect; /* absolute, existing, inside a write tree */
	size_t n_protect;
	char **missing; /* protected names that did not exist: set aside if made (cg_view_sweep) */
	char failed_at[PATH_MAX]; /* the file a failed prepare could not take, or "" */
	char failed_why[256];	  /* why a prepare failed, when no file is to blame, or "" */
	size_t n_missing;
	/* protect[i] when the view was prepared, and whether a running call may have made it */
	struct file_id {
		dev_t dev;
		ino_t ino;
		mode_t type;
		/* An inode number is soon reused: when the file was born, where the file
		 * system says, and for what is not a directory its change time (a
		 * directory's changes with every entry made in it: .git's would). */
		struct timespec ctime, btime;
		bool suspect;
	} * protect_id;
	/*
	 * Repositories below a write tree's root, and which of protected_rel
	 * were missing there: set aside if made (cg_view_sweep). A mask, not
	 * the missing list: a workspace of many projects would fill that.
	 */
	struct nested_root {
		char *dir;
		uint64_t missing[2];
	} * nested;
	size_t n_nested;
	char **link; /* protected names that are links: the link itself, watched (cg_view_sweep) */
	size_t n_link;
	struct file_id *link_id;
	int64_t started_ns;	 /* when prepared: in live_views until freed */
	int64_t suspect_from_ns; /* a protected file changed since then may be a call's */
	char **hide;		 /* absolute, existing, not symlinks */
	unsigned char *hide_dir; /* 1: cover with a directory, 0: with a file */
	size_t n_hide;
	char **tmp_dirs; /* trees under a private /tmp: their mount points */
	size_t n_tmp_dirs;
	char **scratch; /* existing directories, each covered by an empty writable tmpfs */
	size_t n_scratch;
	char scratch_opts[64]; /* their tmpfs options, made before the fork */
	char **keep; /* the workspace and cwd when a private /tmp would cover them: read-only */
	size_t n_keep;
	char *reveal;	     /* a granted socket (forward_agent) shown where it lives, or NULL */
	size_t reveal_under; /* index of the hidden dir holding it, or SIZE_MAX */
	char *cwd;	     /* the call's cwd, re-entered by path inside the view */
	bool private_tmp;
	/*
	 * git: write: nothing the call can write may be executed (write trees,
	 * /tmp, /dev/shm noexec), or the loader, which git's own exec set needs,
	 * would run an ELF from the workspace while .git is writable.
	 */
	bool noexec_writes;
	bool userns;
	uid_t outer_uid;
	gid_t outer_gid;
	int empty_fd; /* the process's read-only tmpfs of holes (shared, never closed here) */
	char tmp_rule[32], shm_rule[32];
	void *stack; /* the command's stack while it shares pid 1's memory */
	json_t *report;
};

/* Did the file change (its ctime, which no call can set back) at or after since_ns? */
static inline bool file_changed_since(const struct stat *st, int64_t since_ns)
{
	return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec >= since_ns;
}

/*
 * The names the developer's tools run at a project's root (.envrc, .husky,
 * an agent's or an editor's settings, ...): read-only in a view, set aside
 * by the sweep where a call made them.
 */
extern const char *const *const cg_view_protected_rel;
extern const size_t cg_view_n_protected_rel;

/* The file at dfd + name as a file_id; false if it is not there. */
bool cg_view_file_id(int dfd, const char *name, struct file_id *id);

/*
 * Does NAME in dfd hold a git directory's parts, as git's discovery takes
 * one: HEAD, and objects and refs or a commondir naming where they are?
 */
bool cg_view_git_dir_at(int dfd, const char *name);

/*
 * The walk of a tree that the prepare (protect_nested: its levels) and the
 * sweep after a call (cg_view_walk_all: every level) share: every directory below
 * the tree is handed to visit (its parent's fd, its name, its path); those
 * above the last level are read for the next, but (unless every) for hidden
 * ones, node_modules and links (O_NOFOLLOW, d_type). More than cap entries
 * (directories, with every) read: -1 with E2BIG. A directory below the tree
 * that cannot be opened goes to unreadable, when set.
 */
struct level_walk {
	size_t cap, entries;
	bool every; /* read hidden directories and node_modules too (cg_view_walk_all) */
	int (*visit)(void *arg, int pfd, const char *name, const char *path);
	int (*unreadable)(void *arg, const char *dir, int err);
	void *arg;
};

/* Every directory below tree, at any depth, hidden ones too (w->every). 0, or -1 with errno. */
int cg_view_walk_all(struct level_walk *w, const char *tree);

#endif
