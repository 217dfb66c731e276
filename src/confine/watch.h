/* SPDX-License-Identifier: MIT */
/*
 * watch — what was made or written in a call's write trees while it ran,
 * as the kernel saw it (fanotify: a mark on each tree's file system, with
 * the directory and name of every entry created, moved in, written or
 * changed in its attributes). The sweep after the call (cg_view_sweep)
 * judges the repositories those changes touched, at any depth, instead of
 * walking a few levels of each tree.
 *
 * Invariants:
 *  - A watch that may have missed a change says so (cg_watch_complete is
 *    false: a tree whose file system could not be marked, the record bound
 *    was reached); the sweep then walks every directory and judges what
 *    changed since the call began. Nothing is ever taken for "no change".
 *    The kernel's queue is unbounded (FAN_UNLIMITED_QUEUE): a thread drains
 *    it while the call runs, and a call that outran it would only cost the
 *    kernel memory until it caught up.
 *  - The daemon's own changes (its pid) are not recorded: the set-aside
 *    renames of another call's sweep are not a call's doing.
 *  - It needs CAP_SYS_ADMIN (a root daemon); without it cg_watch_start
 *    returns NULL and the sweep walks.
 */
#ifndef CG_WATCH_H
#define CG_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cg_watch;

/* What happened to a name (any of them, merged over the call). */
#define CG_WATCH_MADE	 0x1u /* created, or moved (renamed) in */
#define CG_WATCH_WRITTEN 0x2u /* its contents or attributes changed */
#define CG_WATCH_DIR	 0x4u /* it is a directory */
#define CG_WATCH_MOVED	 0x8u /* moved (renamed) in: what it holds may predate the call */

struct cg_watch_change {
	const char *dir;  /* the directory holding it, by its path when the watch stopped */
	const char *name; /* the entry's name in dir; "" for any other name (see below) */
	unsigned mask;	  /* CG_WATCH_* */
};

/*
 * Start recording changes in the file systems holding trees[0..n) (absolute
 * paths). A change to an entry named in names[] (NULL-terminated), and a
 * directory moved in, is recorded by its name; any other change is recorded
 * once per directory, with the name "" (so that a call making a million
 * files costs a record per directory, not per file). NULL with errno when
 * nothing can be watched (no fanotify, not permitted, out of memory); a
 * tree that alone cannot be marked leaves the watch incomplete.
 */
struct cg_watch *cg_watch_start(const char *const *trees, size_t n, const char *const *names);

/*
 * Stop recording and resolve what was recorded to paths (call once, after
 * the call's processes are gone). The changes stay valid until
 * cg_watch_free. Changes outside the trees are not left out here.
 */
void cg_watch_stop(struct cg_watch *w);
bool cg_watch_complete(const struct cg_watch *w);
size_t cg_watch_changes(const struct cg_watch *w, const struct cg_watch_change **out);

void cg_watch_free(struct cg_watch *w);

#endif
