/* SPDX-License-Identifier: MIT */
/*
 * world — the world adapter (WA): resolves what a request names into what
 * will actually be touched, so that policy decides on the real thing.
 *
 * argv[0] of every stage becomes a canonical absolute path (realpath: no
 * "..", no symlink), found either as an absolute path given by the request
 * or by searching the controlled PATH (CG_WORLD_PATH, never the request's
 * environment). The working directory becomes a canonical directory inside
 * one of the operator's workspaces. The command environment is built from
 * the request's (already allow-listed) variables plus PATH/HOME/USER/LOGNAME
 * from the password database. Everything here answers S, I or E, never D.
 *
 * Invariants:
 *  - A resolved exe MUST be canonical, so that "/bin/../bin/rm", a symlink
 *    named "rm" and "rm" on the PATH are all decided as /usr/bin/rm (stops
 *    an agent from renaming its way past a rule).
 *  - A relative argv[0] containing '/' MUST be refused: it would be resolved
 *    against a directory the policy never saw.
 *  - The cwd MUST be inside a workspace after canonicalisation: a symlink in
 *    the workspace that points outside is refused, not followed out.
 *  - The environment MUST contain nothing from the daemon's own environment
 *    (stops LD_PRELOAD/PATH smuggling through the daemon).
 *  - struct cg_call MUST stay plain data: the decide path reads it without
 *    syscalls.
 */
#include "world.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

static struct cg_reply *oom(const char *doing)
{
	return cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", doing);
}

static struct cg_reply *resolve_failed(int err)
{
	return cg_reply_new(CG_R_RESOLVE_FAILED, "{s:s}", "errno_name", cg_errno_name(err));
}

/*
 * Why the canonical directory p cannot be a workspace, or NULL: the root,
 * a top-level tree, anything at or below a system tree, a user's home
 * itself or anything in its dot-directories (a project below it is fine).
 */
static const char *system_tree(const char *p)
{
	static const char *const exact[] = { "/",	 "/home", "/root", "/tmp", "/var",
					     "/var/tmp", "/srv",  "/opt",  "/mnt", "/media" };
	static const char *const below[] = { "/etc",	   "/usr",     "/bin",	   "/sbin",
					     "/lib",	   "/lib32",   "/lib64",   "/libx32",
					     "/boot",	   "/proc",    "/sys",	   "/dev",
					     "/run",	   "/var/lib", "/var/log", "/var/spool",
					     "/var/cache", "/var/mail" };
	for (size_t i = 0; i < CG_ARRAY_LEN(exact); i++)
		if (strcmp(p, exact[i]) == 0)
			return "the root or a top-level directory cannot be a workspace "
			       "(everything below it would be the agent's): name a project "
			       "directory with --workspace";
	for (size_t i = 0; i < CG_ARRAY_LEN(below); i++) {
		size_t n = strlen(below[i]);
		if (strncmp(p, below[i], n) == 0 && (p[n] == '/' || !p[n]))
			return "a system directory cannot be a workspace (the agent would "
			       "write the system): name a project directory with --workspace";
	}
	const char *why = NULL;
	size_t plen = strlen(p);
	setpwent();
	for (struct passwd *pw; !why && (pw = getpwent());)
		if (pw->pw_dir && pw->pw_dir[0] == '/' && strcmp(pw->pw_dir, "/") != 0) {
			char *home = realpath(pw->pw_dir, NULL);
			size_t hl = home ? strlen(home) : 0;
			if (home && strcmp(home, p) == 0)
				why = "a user's home directory cannot be a workspace (its start-up "
				      "files, agent settings and services would be the agent's): "
				      "name a project directory below it";
			else if (home && hl > 1 && strncmp(p, home, hl) == 0 && p[hl] == '/' &&
				 p[hl + 1] == '.')
				why = "a directory in a home's dot-directories cannot be a "
				      "workspace (~/.config, ~/.local and the like hold the user's "
				      "settings, services and programs on PATH): name a project "
				      "directory";
			/*
			 * Above a home (/data holding /data/users/dev): the home's
			 * start-up files and settings would be the agent's, and the
			 * protected names cover only some of them (s42a F2: a call
			 * wrote ~/.config/git/config and ~/.bash_aliases).
			 */
			else if (home && hl > plen && strncmp(home, p, plen) == 0 &&
				 home[plen] == '/')
				why = "a directory that holds a user's home cannot be a workspace "
				      "(the home's start-up files and settings would be the "
				      "agent's): name a project directory";
			free(home);
		}
	endpwent();
	return why;
}

/*
 * Canonicalise one workspace: realpath, and it must be a directory. Returns
 * the malloc'd canonical path, or NULL with *err.
 */
static char *workspace_canon(const char *path, struct cg_reply **err)
{
	char *canon = NULL;
	struct stat st;

	/* A relative workspace ("." by default) means the daemon's start directory. */
	if (!path || !*path) {
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", "", "detail",
				    "empty path", "errno_name", cg_errno_name(EINVAL));
		return NULL;
	}
	canon = realpath(path, NULL);
	if (!canon) {
		int e = errno;
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", path, "detail",
				    "cannot be resolved", "errno_name", cg_errno_name(e));
		return NULL;
	}
	int e = stat(canon, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (e != 0) {
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", path, "detail",
				    "not a directory", "errno_name", cg_errno_name(e));
		free(canon);
		return NULL;
	}
	/*
	 * Everything below a workspace is the agent's to write (an agent's own
	 * file tools are judged by it): the root, a system tree or a user's
	 * whole home would hand over the machine or the account. A daemon
	 * started in / with no --workspace lands here.
	 */
	const char *why = system_tree(canon);
	if (why) {
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", canon,
				    "detail", why, "errno_name", cg_errno_name(EINVAL));
		free(canon);
		return NULL;
	}
	return canon;
}

int cg_world_init(struct cg_world *w, const char *const *workspaces, size_t n,
		  struct cg_reply **err)
{
	memset(w, 0, sizeof(*w));
	w->path = CG_WORLD_PATH;
	if (n == 0) {
		/* No workspace means no cwd could ever be accepted: refuse up front. */
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", "", "detail",
				    "no workspace configured", "errno_name", cg_errno_name(EINVAL));
		return -1;
	}
	w->workspaces = calloc(n, sizeof(*w->workspaces));
	if (!w->workspaces) {
		*err = oom("canonicalising workspaces");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		w->workspaces[i] = workspace_canon(workspaces[i], err);
		if (!w->workspaces[i])
			goto free_world;
		w->n_workspaces = i + 1;
	}
	return 0;

free_world:
	cg_world_fini(w);
	return -1;
}

void cg_world_fini(struct cg_world *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_workspaces; i++)
		free(w->workspaces[i]);
	free(w->workspaces);
	w->workspaces = NULL;
	w->n_workspaces = 0;
}

/*
 * Is st an executable regular file? Any execute bit is what execve demands
 * even of root; whether the run uid in particular may execute it is left to
 * execve (a refusal there is a spawn failure, reported as such).
 */
static bool is_exec_file(const struct stat *st)
{
	return S_ISREG(st->st_mode) && (st->st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)) != 0;
}

/* Fill rs from a found path: canonicalise, check, set base. 0 or -1 with *err. */
static int stage_from_found(struct cg_resolved_stage *rs, size_t idx, char *found,
			    struct cg_reply **err)
{
	struct stat st;

	rs->found = found;
	rs->exe = realpath(found, NULL);
	if (!rs->exe) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG)
			*err = cg_reply_new(CG_R_EXE_PATH_INVALID, "{s:I,s:s,s:s}", "stage",
					    (json_int_t)idx, "path", found, "errno_name",
					    cg_errno_name(e));
		else if (e == ENOMEM)
			*err = oom("resolving a command");
		else
			*err = resolve_failed(e);
		return -1;
	}
	if (stat(rs->exe, &st) != 0) {
		*err = resolve_failed(errno);
		return -1;
	}
	if (!is_exec_file(&st)) {
		*err = cg_reply_new(CG_R_EXE_NOT_EXECUTABLE, "{s:I,s:s}", "stage", (json_int_t)idx,
				    "path", found);
		return -1;
	}
	rs->via_symlink = strcmp(rs->found, rs->exe) != 0;
	const char *slash = strrchr(rs->exe, '/');
	rs->base = slash ? slash + 1 : rs->exe;
	return 0;
}

/*
 * Search the controlled PATH for a bare name, like execvp: the first
 * executable regular file wins; a hit that is not executable is remembered
 * so that "found but not executable" is reported as such, not as missing.
 */
static int search_path(const char *path, const char *name, size_t idx, char **found_out,
		       struct cg_reply **err)
{
	char cand[PATH_MAX];
	char *non_exec = NULL;
	const char *p = path;

	while (*p) {
		const char *colon = strchr(p, ':');
		size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
		struct stat st;

		/* An empty PATH element would mean ".": never search the cwd. */
		if (dlen > 0 && p[0] == '/') {
			int n = snprintf(cand, sizeof(cand), "%.*s/%s", (int)dlen, p, name);
			if (n > 0 && (size_t)n < sizeof(cand) && stat(cand, &st) == 0) {
				if (is_exec_file(&st)) {
					free(non_exec);
					*found_out = strdup(cand);
					if (!*found_out) {
						*err = oom("resolving a command");
						return -1;
					}
					return 0;
				}
				if (!non_exec)
					non_exec = strdup(cand);
			}
		}
		p += dlen;
		if (*p == ':')
			p++;
	}
	if (non_exec) {
		*err = cg_reply_new(CG_R_EXE_NOT_EXECUTABLE, "{s:I,s:s}", "stage", (json_int_t)idx,
				    "path", non_exec);
		free(non_exec);
		return -1;
	}
	*err = cg_reply_new(CG_R_EXE_NOT_FOUND, "{s:I,s:s,s:s}", "stage", (json_int_t)idx,
			    "command", name, "path", path);
	return -1;
}

/*
 * The workspace that contains canon (equal, or below it at a '/' boundary);
 * the longest (most specific) one when workspaces nest, so that
 * ${workspace} grants the least. NULL when none does.
 */
static const char *containing_workspace(const struct cg_world *w, const char *canon)
{
	const char *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < w->n_workspaces; i++) {
		const char *ws = w->workspaces[i];
		size_t len = strlen(ws);
		if (strncmp(canon, ws, len) != 0)
			continue;
		/* "/" is the only canonical path that ends with '/'. */
		bool boundary = canon[len] == '\0' || canon[len] == '/' || ws[len - 1] == '/';
		if (boundary && len >= best_len) {
			best = ws;
			best_len = len;
		}
	}
	return best;
}

/*
 * A program a privileged call runs as root: an approval names it by path,
 * so the bytes at that path must be root's alone, or whoever can change
 * them between the approval and the exec chooses what root runs. The file
 * and every directory above it (canonical, from realpath) must be owned by
 * root and writable by no group or other, and it must not lie in a
 * workspace. 0, or -1 with *err.
 */
static int root_only(const struct cg_world *w, const char *exe, size_t idx, struct cg_reply **err)
{
	char p[PATH_MAX];
	size_t n = strlen(exe);
	if (n >= sizeof(p)) {
		*err = resolve_failed(ENAMETOOLONG);
		return -1;
	}
	memcpy(p, exe, n + 1);
	for (;;) {
		struct stat st;
		if (lstat(p[0] ? p : "/", &st) != 0) {
			*err = resolve_failed(errno);
			return -1;
		}
		/* A sticky directory (/tmp) lets others add names, not replace root's. */
		bool sticky = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
		const char *why = st.st_uid != 0 ? "is not owned by root"
				  : (st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky
				      ? "is writable by others"
				      : NULL;
		if (why) {
			*err = cg_reply_new(CG_R_EXE_NOT_ROOT_ONLY, "{s:I,s:s,s:s,s:s}", "stage",
					    (json_int_t)idx, "path", exe, "changeable",
					    p[0] ? p : "/", "why", why);
			return -1;
		}
		char *slash = strrchr(p, '/');
		if (!p[0] || !slash)
			break;
		*slash = '\0'; /* the parent; "" stands for / */
	}
	/*
	 * A workspace is what calls write: a root caller's own calls (uid 0,
	 * owning what they make) rewrote a root-owned program there while its
	 * approval waited (found by a review).
	 */
	const char *ws = containing_workspace(w, exe);
	if (ws) {
		*err = cg_reply_new(CG_R_EXE_NOT_ROOT_ONLY, "{s:I,s:s,s:s,s:s}", "stage",
				    (json_int_t)idx, "path", exe, "changeable", ws, "why",
				    "is a workspace, which calls write");
		return -1;
	}
	return 0;
}

/*
 * May a program found at `found` (a symlink chain to a program named base) be
 * told it was called by found's name? Yes when the names agree, or when the
 * last link lies outside every workspace, in a directory root owns and
 * nobody else may write (unxz in /usr/bin): root named it. A link the agent
 * could have made is no name.
 */
static bool name_is_roots(const struct cg_world *w, const char *found, const char *base)
{
	const char *slash = strrchr(found, '/');
	const char *name = slash ? slash + 1 : found;
	if (strcmp(name, base) == 0)
		return true;
	char dir[PATH_MAX];
	size_t n = slash ? (size_t)(slash - found) : 0;
	if (n == 0 || n >= sizeof(dir))
		return n == 0 && slash; /* "/name": the root directory */
	memcpy(dir, found, n);
	dir[n] = '\0';
	char *real = realpath(dir, NULL);
	struct stat st;
	bool roots = real && !containing_workspace(w, real) && stat(real, &st) == 0 &&
		     st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
	free(real);
	return roots;
}

static int resolve_stage(const struct cg_world *w, const struct cg_stage *stage, size_t idx,
			 const char *cwd, struct cg_resolved_stage *rs, struct cg_reply **err)
{
	const char *arg0 = stage->argc > 0 ? stage->argv[0] : NULL;
	char *found = NULL;

	if (!arg0 || !*arg0) {
		*err = cg_reply_new(CG_R_EXE_NOT_FOUND, "{s:I,s:s,s:s}", "stage", (json_int_t)idx,
				    "command", "", "path", w->path);
		return -1;
	}
	if (strchr(arg0, '/')) {
		/*
		 * ./hello, .venv/bin/python: from the call's working directory,
		 * as a shell runs them (ux-s39: refused, with advice that ran an
		 * ELF file through sh). The program is judged where it resolves.
		 */
		if (arg0[0] != '/' && !cwd) {
			*err = cg_reply_new(CG_R_EXE_PATH_RELATIVE, "{s:I,s:s}", "stage",
					    (json_int_t)idx, "path", arg0);
			return -1;
		}
		if (arg0[0] == '/')
			found = strdup(arg0);
		else if (asprintf(&found, "%s/%s", strcmp(cwd, "/") ? cwd : "", arg0) < 0)
			found = NULL;
		if (!found) {
			*err = oom("resolving a command");
			return -1;
		}
	} else if (search_path(w->path, arg0, idx, &found, err) != 0) {
		return -1;
	}
	/* rs owns found from here on, success or not (cg_call_fini frees it). */
	if (stage_from_found(rs, idx, found, err) != 0)
		return -1;
	rs->argv0_is_exe = rs->via_symlink && !name_is_roots(w, rs->found, rs->base);
	if (rs->argv0_is_exe) {
		/* The name as sent, its last component the program's own. */
		const char *sent = stage->argv[0], *slash = strrchr(sent, '/');
		size_t dir = slash ? (size_t)(slash - sent) + 1 : 0;
		rs->argv0 = malloc(dir + strlen(rs->base) + 1);
		if (!rs->argv0) {
			*err = oom("resolving a command");
			return -1;
		}
		memcpy(rs->argv0, sent, dir);
		memcpy(rs->argv0 + dir, rs->base, strlen(rs->base) + 1);
	}
	return 0;
}

static int resolve_cwd(const struct cg_world *w, const char *req_cwd, struct cg_call *call,
		       struct cg_reply **err)
{
	char *joined = NULL;
	const char *want = req_cwd ? req_cwd : w->workspaces[0];
	struct stat st;
	int rc = -1;

	/* A relative cwd is taken relative to the default cwd (the first workspace). */
	if (want[0] != '/') {
		size_t n = strlen(w->workspaces[0]) + 1 + strlen(want) + 1;
		joined = malloc(n);
		if (!joined) {
			*err = oom("resolving the working directory");
			return -1;
		}
		(void)snprintf(joined, n, "%s/%s", w->workspaces[0], want);
	}
	call->cwd = realpath(joined ? joined : want, NULL);
	if (!call->cwd) {
		int e = errno;
		*err = e == ENOMEM ? oom("resolving the working directory")
				   : cg_reply_new(CG_R_CWD_INVALID, "{s:s,s:s}", "cwd", want,
						  "errno_name", cg_errno_name(e));
		goto free_joined;
	}
	if (stat(call->cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		*err = cg_reply_new(CG_R_CWD_INVALID, "{s:s,s:s}", "cwd", want, "errno_name",
				    cg_errno_name(ENOTDIR));
		goto free_joined;
	}
	call->cwd_dev = st.st_dev;
	call->cwd_ino = st.st_ino;
	call->cwd_btime_ns = cg_dir_btime_ns(AT_FDCWD, call->cwd);
	const char *ws = containing_workspace(w, call->cwd);
	if (!ws) {
		/*
		 * Named, so that an agent can send a cwd that is one (ux-s39): those
		 * the peer owns (all, to root); another user's project names are not
		 * this peer's to learn (s39c).
		 */
		char list[1024] = "";
		for (size_t i = 0, at = 0; i < w->n_workspaces; i++) {
			struct stat wst;
			if (call->peer.uid != 0 &&
			    (stat(w->workspaces[i], &wst) != 0 || wst.st_uid != call->peer.uid))
				continue;
			int n = snprintf(list + at, sizeof(list) - at, "%s%s", at ? ", " : "",
					 w->workspaces[i]);
			if (n < 0 || (size_t)n >= sizeof(list) - at) {
				list[at] = '\0'; /* the first KiB of them */
				break;
			}
			at += (size_t)n;
		}
		*err = cg_reply_new(CG_R_CWD_OUTSIDE_WORKSPACE, "{s:s,s:s,s:s}", "cwd", want,
				    "resolved", call->cwd, "workspaces", list);
		goto free_joined;
	}
	call->workspace = strdup(ws);
	if (!call->workspace) {
		*err = oom("resolving the working directory");
		goto free_joined;
	}
	rc = 0;

free_joined:
	free(joined);
	return rc;
}

int cg_world_root_only(const struct cg_world *w, const struct cg_call *call, struct cg_reply **err)
{
	for (size_t i = 0; i < call->n_stages; i++)
		if (root_only(w, call->stages[i].exe, i, err) != 0)
			return -1;
	return 0;
}

/* NULL with errno e. */
static char *none(int e)
{
	errno = e;
	return NULL;
}

/*
 * Name-walking steps one request's file resources may take in all (every
 * name looked at, and every name a link adds): a walk costs a system call or
 * two per step on the event loop's thread, and a request holds up to 256
 * resources of up to PATH_MAX each. Past it: E2BIG, the request is refused.
 */
#define RESOLVE_STEPS 8192

/* The walk of one resource (real_resource). */
struct walk {
	char todo[2 * PATH_MAX]; /* the names still to walk, '/'-separated */
	char real[PATH_MAX];	 /* where the walk is: canonical, no link in it */
	size_t len;		 /* strlen(real) */
	int fd;			 /* O_PATH of real while it exists, else -1 */
	dev_t dev;		 /* fd's device, once known not to be procfs */
	bool dev_known;
	bool writing; /* a write or delete: no kernel interface is a file to it */
	bool missing; /* a name did not exist: the rest is appended */
	bool leaf;    /* real is not a directory: no name may follow */
};

/* Append name to w->real. 0, or -1 with errno. */
static int walk_append(struct walk *w, const char *name, size_t n)
{
	size_t sep = w->len > 1 ? 1 : 0;
	if (w->len + sep + n >= sizeof(w->real)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (sep)
		w->real[w->len++] = '/';
	memcpy(w->real + w->len, name, n);
	w->len += n;
	w->real[w->len] = '\0';
	return 0;
}

/* The file systems that are the kernel's settings, not files: a write there sets it. */
static bool kernel_fs(unsigned long type)
{
	/* fusectl's and configfs's magic numbers: no macro in linux/magic.h here. */
	static const unsigned long types[] = {
		SYSFS_MAGIC,	CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, DEBUGFS_MAGIC,
		TRACEFS_MAGIC,	SECURITYFS_MAGIC,   BPF_FS_MAGIC,	 EFIVARFS_MAGIC,
		BINFMTFS_MAGIC, PSTOREFS_MAGIC,	    0x65735543UL,	 0x62656570UL,
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(types); i++)
		if (type == types[i])
			return true;
	return false;
}

/*
 * Is what fd is on a place the walk may not judge as a file? /proc, whose
 * links resolve as the daemon's process, not the agent's; when writing,
 * sysfs, cgroupfs and the like too, where a write sets the kernel's values
 * (s38d, s38e: one mounted in the workspace was judged as it). A file
 * system that cannot be asked counts as one (fail closed).
 */
static bool kernel_place(const struct walk *w, int fd)
{
	struct statfs sf;
	return fstatfs(fd, &sf) != 0 || sf.f_type == PROC_SUPER_MAGIC ||
	       (w->writing && kernel_fs((unsigned long)sf.f_type));
}

/*
 * Is the directory fd a git directory, by git's own test (HEAD, objects/,
 * refs/), whatever its name? The developer's git obeys its config and hooks:
 * the file tools made one in lib/ whose core.fsmonitor ran on git status
 * (s38e, s38f; a separate git dir .gd, a bare NAME.git).
 */
static bool git_dir(int fd)
{
	struct stat h, o, r;
	return fstatat(fd, "HEAD", &h, AT_SYMLINK_NOFOLLOW) == 0 &&
	       (S_ISREG(h.st_mode) || S_ISLNK(h.st_mode)) &&
	       fstatat(fd, "objects", &o, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(o.st_mode) &&
	       fstatat(fd, "refs", &r, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(r.st_mode);
}

/*
 * Go to dirfd's entry name (O_PATH, a directory), leaving the old one;
 * known: its lstat, when the walk has it. A directory on the device the
 * walk is on is on the same file system; another one is asked what it is.
 */
static int walk_enter(struct walk *w, int dirfd, const char *name, const struct stat *known)
{
	int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (!known || !w->dev_known || known->st_dev != w->dev) {
		if (kernel_place(w, fd) || fstat(fd, &st) != 0) {
			close(fd);
			errno = EXDEV;
			return -1;
		}
		w->dev = st.st_dev;
		w->dev_known = true;
	}
	if (w->writing && git_dir(fd)) {
		close(fd);
		errno = EROFS; /* resolve_actions: RESOURCE_IN_GIT_DIR */
		return -1;
	}
	close(w->fd);
	w->fd = fd;
	return 0;
}

/*
 * The walk ends at dirfd's entry c, not a directory (st its lstat): it is
 * the place, unless a write there writes a device, or it is a file mounted
 * on its own where a workspace file would be (a bind mount of a /proc or
 * /sys file: s38d, the domain name changed). 0, or -1 with EXDEV.
 */
static int walk_leaf(struct walk *w, const char *c, const struct stat *st)
{
	w->leaf = true;
	bool kernel = w->writing && (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode));
	if (!kernel && (!w->dev_known || st->st_dev != w->dev)) {
		int fd = openat(w->fd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		kernel = fd < 0 || kernel_place(w, fd);
		if (fd >= 0)
			close(fd);
	}
	if (kernel)
		errno = EXDEV;
	return kernel ? -1 : 0;
}

/* One name of the walk (nofollow: a link there is the place itself). 0, or -1 with errno. */
static int walk_name(struct walk *w, const char *name, size_t n, bool nofollow, int *hops)
{
	char c[NAME_MAX + 1], target[PATH_MAX];
	if (n == 0 || (n == 1 && name[0] == '.'))
		return 0;
	if (w->leaf) {
		errno = ENOTDIR;
		return -1;
	}
	bool dotdot = n == 2 && name[0] == '.' && name[1] == '.';
	if (w->missing) {
		/*
		 * .. after a missing name: a tool that makes the missing
		 * directories first lands beyond it where links below may lead
		 * anywhere (found by a review).
		 */
		if (dotdot) {
			errno = EINVAL;
			return -1;
		}
		return walk_append(w, name, n);
	}
	if (dotdot) {
		if (walk_enter(w, w->fd, "..", NULL) != 0)
			return -1;
		while (w->len > 1 && w->real[w->len - 1] != '/')
			w->len--;
		if (w->len > 1)
			w->len--;
		w->real[w->len] = '\0';
		return 0;
	}
	if (n > NAME_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(c, name, n);
	c[n] = '\0';
	struct stat st;
	if (fstatat(w->fd, c, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno != ENOENT)
			return -1;
		w->missing = true;
		return walk_append(w, name, n);
	}
	if (S_ISLNK(st.st_mode) && nofollow) {
		w->leaf = true;
		return walk_append(w, name, n);
	}
	if (S_ISLNK(st.st_mode)) {
		/* Where it points is where the tool lands (a dangling one too). */
		ssize_t tl = readlinkat(w->fd, c, target, sizeof(target) - 1);
		if (tl <= 0 || ++*hops > 40) {
			errno = tl < 0 ? errno : ELOOP;
			return -1;
		}
		size_t rest = strlen(w->todo);
		if ((size_t)tl + 1 + rest >= sizeof(w->todo)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		memmove(w->todo + tl + 1, w->todo, rest + 1);
		memcpy(w->todo, target, (size_t)tl);
		w->todo[tl] = '/';
		if (target[0] == '/') {
			w->len = 1;
			w->real[1] = '\0';
			return walk_enter(w, AT_FDCWD, "/", NULL);
		}
		return 0;
	}
	if (walk_append(w, name, n) != 0)
		return -1;
	if (S_ISDIR(st.st_mode))
		return walk_enter(w, w->fd, c, &st);
	return walk_leaf(w, c, &st);
}

/*
 * Where a file resource really lies, walked name by name from / as the
 * kernel would walk it for the agent's tool: links followed (a dangling
 * one to where it points), .. taken from where the walk really is, the
 * part below the first missing name appended (nothing there can be a link
 * yet; a .. there is refused). A walk that enters /proc is refused (EXDEV):
 * /proc's links (self, cwd, root, fd) resolve as the daemon's process, not
 * the agent's; when writing (a write or delete), so is a walk into sysfs,
 * cgroupfs and the like, or to a device node: the tool would set the
 * kernel's values or write the device. One system call or two per name,
 * each counted against the request's budget. Relative to cwd. Without
 * follow_last, a link at the last name (no '/' after it) is the place
 * itself, as unlink takes it. A malloc'd absolute path, or NULL with errno
 * (not a path, too long, unreadable, E2BIG past the budget).
 */
static char *real_resource(const char *cwd, const char *res, bool writing, bool follow_last,
			   size_t *budget)
{
	struct walk *w = calloc(1, sizeof(*w));
	if (!w)
		return none(ENOMEM);
	char *out = NULL;
	int hops = 0, e = 0;
	w->writing = writing;
	w->fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	w->real[0] = '/';
	w->len = 1;
	if (!res[0])
		e = EINVAL;
	else if (snprintf(w->todo, sizeof(w->todo), "%s%s%s", res[0] == '/' ? "" : cwd,
			  res[0] == '/' ? "" : "/", res) >= (int)sizeof(w->todo))
		e = ENAMETOOLONG;
	else if (w->fd < 0)
		e = errno;
	while (!e && w->todo[0]) {
		if (*budget == 0) {
			e = E2BIG;
			break;
		}
		--*budget;
		char name[NAME_MAX + 2];
		size_t n = strcspn(w->todo, "/");
		size_t skip = n + (w->todo[n] == '/');
		if (n > NAME_MAX) {
			e = ENAMETOOLONG;
			break;
		}
		memcpy(name, w->todo, n);
		/* The last name, with no '/' after it: a delete takes a link itself. */
		bool nofollow = !follow_last && skip == n;
		memmove(w->todo, w->todo + skip, strlen(w->todo + skip) + 1);
		if (walk_name(w, name, n, nofollow, &hops) != 0)
			e = errno ? errno : EINVAL;
	}
	if (!e && !(out = strdup(w->real)))
		e = ENOMEM;
	if (w->fd >= 0)
		close(w->fd);
	free(w);
	errno = e;
	return out;
}

/* call->actions: the request's, with file resources where they really lie. */
static int resolve_actions(const struct cg_request *req, struct cg_call *call,
			   struct cg_reply **err)
{
	if (!req->actions)
		return 0;
	call->actions = json_deep_copy(req->actions);
	if (!call->actions) {
		*err = oom("resolving the actions");
		return -1;
	}
	static const char *const file_types[] = { "read", "write", "delete", "exec" };
	size_t i, budget = RESOLVE_STEPS;
	json_t *a;
	json_array_foreach(call->actions, i, a)
	{
		const char *ty = json_string_value(json_object_get(a, "action_type"));
		const char *res = json_string_value(json_object_get(a, "resource"));
		bool file = false;
		for (size_t t = 0; ty && t < CG_ARRAY_LEN(file_types); t++)
			file |= strcmp(ty, file_types[t]) == 0;
		if (!file || !res || !call->cwd)
			continue;
		/*
		 * A path some tools rewrite before they open it: judged as it is
		 * written (a directory '~' or 'file:' in the cwd), it would be
		 * allowed for a tool that opens $HOME/.ssh/... or /etc/... (attack
		 * s40a). Refused rather than guessed at.
		 */
		const char *why = res[0] == '~' ? "starts with '~', which some tools expand to a "
						  "home directory and others do not"
				  : res[0] == '$'
				      ? "starts with '$', a variable some tools expand ($HOME, "
					"${HOME}) and others do not"
				  : strncasecmp(res, "file:", 5) == 0
				      ? "is a file: URI, which some tools open as the path it names"
				      : NULL;
		if (why) {
			*err = cg_reply_new(CG_R_RESOURCE_AMBIGUOUS, "{s:I,s:s,s:s}", "index",
					    (json_int_t)i, "path", res, "why", why);
			return -1;
		}
		errno = 0;
		/* A delete removes a link, not what it points at: it is judged where it is. */
		bool del = strcmp(ty, "delete") == 0;
		char *real =
		    real_resource(call->cwd, res, del || strcmp(ty, "write") == 0, !del, &budget);
		if (!real) {
			/*
			 * Not judged is not allowed: a symlink chain too long for
			 * realpath (ENAMETOOLONG) is still followed by the kernel,
			 * out of the workspace (found by a review).
			 */
			int e = errno ? errno : EINVAL;
			*err = e == ENOMEM  ? oom("resolving the actions")
			       : e == EROFS ? cg_reply_new(CG_R_RESOURCE_IN_GIT_DIR, "{s:I,s:s}",
							   "index", (json_int_t)i, "path", res)
			       : e == E2BIG
				   ? cg_reply_new(CG_R_RESOLVE_BUDGET, "{s:i,s:I}", "limit",
						  RESOLVE_STEPS, "index", (json_int_t)i)
				   : cg_reply_new(CG_R_RESOURCE_UNRESOLVABLE, "{s:I,s:s,s:s}",
						  "index", (json_int_t)i, "path", res, "errno_name",
						  cg_errno_name(e));
			return -1;
		}
		if (strcmp(real, res) != 0 &&
		    (json_object_set(a, "resource_given", json_object_get(a, "resource")) != 0 ||
		     json_object_set_new(a, "resource", json_string(real)) != 0)) {
			free(real);
			*err = oom("resolving the actions");
			return -1;
		}
		free(real);
	}
	return 0;
}

int cg_world_resolve(const struct cg_world *w, const struct cg_request *req,
		     const struct cg_peer *peer, struct cg_call *call, struct cg_reply **err)
{
	memset(call, 0, sizeof(*call));
	call->req = req;
	if (peer)
		call->peer = *peer;
	if (w->n_workspaces == 0) {
		*err = cg_reply_new(CG_R_WORKSPACE_INVALID, "{s:s,s:s,s:s}", "path", "", "detail",
				    "no workspace configured", "errno_name", cg_errno_name(EINVAL));
		return -1;
	}
	/* Gate requests may carry actions only: zero stages is valid here. */
	if (req->n_stages > 0) {
		call->stages = calloc(req->n_stages, sizeof(*call->stages));
		if (!call->stages) {
			*err = oom("resolving the pipeline");
			goto fini_call;
		}
		call->n_stages = req->n_stages;
	}
	/* A program named relative to the cwd needs the cwd first; else the stages' errors come first. */
	bool relative = false;
	for (size_t i = 0; i < req->n_stages; i++) {
		const char *a0 = req->stages[i].argc > 0 ? req->stages[i].argv[0] : NULL;
		relative |= a0 && a0[0] != '/' && strchr(a0, '/');
	}
	if (relative && resolve_cwd(w, req->cwd, call, err) != 0)
		goto fini_call;
	for (size_t i = 0; i < req->n_stages; i++)
		if (resolve_stage(w, &req->stages[i], i, call->cwd, &call->stages[i], err) != 0)
			goto fini_call;
	if ((!relative && resolve_cwd(w, req->cwd, call, err) != 0) ||
	    resolve_actions(req, call, err) != 0)
		goto fini_call;
	return 0;

fini_call:
	cg_call_fini(call);
	return -1;
}

void cg_call_fini(struct cg_call *call)
{
	if (!call)
		return;
	for (size_t i = 0; i < call->n_stages; i++) {
		free(call->stages[i].exe);
		free(call->stages[i].found);
		free(call->stages[i].argv0);
	}
	free(call->stages);
	free(call->cwd);
	free(call->workspace);
	json_decref(call->actions);
	memset(call, 0, sizeof(*call));
}

/* "name=value" into a fresh string; NULL on OOM. */
static char *env_entry(const char *name, const char *value)
{
	size_t n = strlen(name) + 1 + strlen(value) + 1;
	char *s = malloc(n);
	if (s)
		(void)snprintf(s, n, "%s=%s", name, value);
	return s;
}

/* Names the world sets itself; a request cannot override them. */
static bool env_reserved(const char *name)
{
	static const char *const reserved[] = { "PATH", "HOME", "USER", "LOGNAME" };
	for (size_t i = 0; i < CG_ARRAY_LEN(reserved); i++)
		if (strcmp(name, reserved[i]) == 0)
			return true;
	return false;
}

char **cg_world_envp(const struct cg_world *w, const struct cg_request *req, uid_t run_uid,
		     struct cg_reply **err)
{
	struct passwd pw, *pwp = NULL;
	char *pwbuf = NULL;
	size_t pwlen = 4096;
	char **envp = NULL;
	size_t n = 0;
	int e;

	/* getpwuid_r wants a caller buffer; grow on ERANGE up to a sane bound. */
	for (;;) {
		pwbuf = malloc(pwlen);
		if (!pwbuf) {
			*err = oom("reading the password database");
			return NULL;
		}
		e = getpwuid_r(run_uid, &pw, pwbuf, pwlen, &pwp);
		if (e != ERANGE || pwlen >= (1u << 20))
			break;
		free(pwbuf);
		pwlen *= 2;
	}
	if (e != 0) {
		*err = resolve_failed(e);
		goto free_pwbuf;
	}
	if (!pwp) {
		*err = cg_reply_new(CG_R_EXEC_USER_UNKNOWN, "{s:I}", "uid", (json_int_t)run_uid);
		goto free_pwbuf;
	}
	size_t n_req = req ? req->n_env : 0;
	envp = calloc(4 + n_req + 1, sizeof(*envp));
	if (!envp)
		goto oom_envp;
	if (!(envp[n++] = env_entry("PATH", w->path)) ||
	    !(envp[n++] = env_entry("HOME", pw.pw_dir)) ||
	    !(envp[n++] = env_entry("USER", pw.pw_name)) ||
	    !(envp[n++] = env_entry("LOGNAME", pw.pw_name)))
		goto oom_envp;
	/* The wire codec already held the request's names to the allow-list. */
	for (size_t i = 0; i < n_req; i++) {
		if (env_reserved(req->env[i].name))
			continue;
		if (!(envp[n++] = env_entry(req->env[i].name, req->env[i].value)))
			goto oom_envp;
	}
	free(pwbuf);
	return envp;

oom_envp:
	*err = oom("building the command environment");
	cg_envp_free(envp);
	envp = NULL;
free_pwbuf:
	free(pwbuf);
	return NULL;
}

void cg_envp_free(char **envp)
{
	if (!envp)
		return;
	for (char **p = envp; *p; p++)
		free(*p);
	free(envp);
}
