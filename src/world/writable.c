/* SPDX-License-Identifier: MIT */
/*
 * writable — where a peer can write on this host, as far as a privileged
 * call needs to know: there the agent can plant a symlink to any file, and
 * root would follow it (an approved `cat ws/notes.txt` read /etc/shadow;
 * a second attack used /run/lock). The confinement layer mounts these
 * nosymfollow (cg_view_nosymfollow). A map of the usual places, not of the
 * whole file system: deeper writable directories are not found, as
 * docs/confinement.md says.
 */
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"
#include "world.h"

/* Directories whose children are looked at for ones the peer can write. */
static const char *const writable_bases[] = { "/",	    "/dev",	  "/run",
					      "/run/user",  "/var",	  "/var/lib",
					      "/var/cache", "/var/spool", "/var/local",
					      "/usr/local", "/opt",	  "/srv",
					      "/home",	    "/mnt",	  "/media" };

/* The dirs found so far: canonical, owned, each once. */
struct dirs {
	char **v;
	size_t n, cap;
};

/* dir canonical into d, unless missing, "/", not a directory, or there already. -1 on OOM. */
static int take_dir(struct dirs *d, const char *dir)
{
	char *c = realpath(dir, NULL);
	struct stat st;
	bool keep = c && strcmp(c, "/") != 0 && stat(c, &st) == 0 && S_ISDIR(st.st_mode);
	for (size_t i = 0; keep && i < d->n; i++)
		keep = strcmp(d->v[i], c) != 0;
	if (keep && d->n == d->cap) {
		size_t nc = d->cap ? d->cap * 2 : 16;
		char **g = realloc(d->v, nc * sizeof(*g));
		if (!g) {
			free(c);
			return -1;
		}
		d->v = g;
		d->cap = nc;
	}
	if (keep)
		d->v[d->n++] = c;
	else
		free(c);
	return 0;
}

/* May the peer (uid, its groups) create entries in a directory of st? */
static bool peer_may_write(const struct stat *st, uid_t uid, const gid_t *groups, int ng)
{
	if (st->st_mode & S_IWOTH)
		return true;
	if (uid == 0)
		return false; /* a root peer writes everything: only what all may write counts */
	if (st->st_uid == uid && (st->st_mode & S_IWUSR))
		return true;
	for (int i = 0; (st->st_mode & S_IWGRP) && i < ng; i++)
		if (groups[i] == st->st_gid && groups[i] != 0)
			return true;
	return false;
}

/* Each directory one level under base that the peer may write, into d. -1 on OOM. */
static int writable_children(struct dirs *d, const char *base, uid_t peer, const gid_t *groups,
			     int ng)
{
	DIR *dir = opendir(base);
	struct dirent *e;
	int rc = 0;
	while (dir && rc == 0 && (e = readdir(dir))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char path[4200];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", strcmp(base, "/") ? base : "", e->d_name);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
		    peer_may_write(&st, peer, groups, ng))
			rc = take_dir(d, path);
	}
	if (dir)
		closedir(dir);
	return rc;
}

static int writable_by(const struct cg_world *w, uid_t peer, struct dirs *d)
{
	for (size_t i = 0; i < w->n_workspaces; i++)
		if (take_dir(d, w->workspaces[i]) != 0)
			return -1;
	struct passwd pw, *res = NULL;
	char buf[4096];
	gid_t groups[256];
	int ng = 0;
	struct stat st;
	if (getpwuid_r(peer, &pw, buf, sizeof(buf), &res) == 0 && res) {
		ng = (int)CG_ARRAY_LEN(groups);
		if (getgrouplist(res->pw_name, res->pw_gid, groups, &ng) < 0)
			ng = 0; /* more than fit: the uid and the world still count */
		if (res->pw_dir && stat(res->pw_dir, &st) == 0 && st.st_uid == peer &&
		    take_dir(d, res->pw_dir) != 0)
			return -1;
	}
	for (size_t b = 0; b < CG_ARRAY_LEN(writable_bases); b++)
		if (writable_children(d, writable_bases[b], peer, groups, ng) != 0)
			return -1;
	return 0;
}

int cg_world_writable_by(const struct cg_world *w, uid_t peer, char ***dirs, size_t *n)
{
	struct dirs d = { 0 };
	if (writable_by(w, peer, &d) != 0) {
		cg_strv_free(d.v, d.n);
		*dirs = NULL;
		*n = 0;
		return -1;
	}
	*dirs = d.v;
	*n = d.n;
	return 0;
}
