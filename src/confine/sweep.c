/* SPDX-License-Identifier: MIT */
/*
 * sweep — after a call, what it left in its write trees that the
 * developer's tools would run is set aside (see view.h, cg_view_sweep, and
 * docs/confinement.md, "After the call").
 *
 * A protected name the call made, a repository it made or wrote that names
 * a program (a config key off git's own, a hook, a commondir, a rebase's
 * exec), a directory that became a git directory: each is renamed aside
 * with a random suffix, never deleted, and the reply says where. What the
 * call changed is what the kernel saw (watch.h); where that record is not
 * whole, every directory of the trees is walked and judged by what changed
 * since the oldest live call began.
 *
 * Invariants:
 *  - Nothing is deleted: a name is renamed aside in its own directory,
 *    reached beneath its write tree through no symlink.
 *  - A name that could not be set aside is said (an "error" entry), never
 *    skipped in silence.
 *  - The developer's own files that did not change since the call began
 *    stay where they are.
 */
#include "view_parts.h"
#include "watch.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

static bool same_file(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->type == b->type &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec &&
	       a->btime.tv_sec == b->btime.tv_sec && a->btime.tv_nsec == b->btime.tv_nsec;
}

/*
 * Rename name in directory dfd aside (p: its path, for the report). The new
 * name ends in 64 random bits: a call that made the name it would get (the
 * trace id is its cgroup's) kept its .envrc when the rename met EEXIST (s36
 * attack). A clash is tried again, never skipped. 0, or an errno.
 */
static int aside_in(int dfd, const char *name, const char *p, const char *tag, json_t *out)
{
	struct stat st;
	char aside[NAME_MAX + 1];
	int rc = 0;
	for (int tries = 0; tries < 8 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	     tries++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
			rc = errno ? errno : EIO;
			break;
		}
		(void)snprintf(aside, sizeof(aside), "%s.callgate-set-aside-%s-%016llx", name, tag,
			       (unsigned long long)r);
		if (renameat2(dfd, name, dfd, aside, RENAME_NOREPLACE) == 0) {
			json_array_append_new(
			    out, json_pack("{s:s,s:s}", "path", p, "set_aside_as", aside));
			rc = 0;
			break;
		}
		rc = errno;
		if (rc != EEXIST)
			break;
	}
	return rc;
}

/* The first link among rel's directories below tfd (tree's), set aside. 0, or an errno. */
static int aside_first_link(int tfd, const char *rel, const char *tree, const char *tag,
			    json_t *out)
{
	char part[PATH_MAX], path[PATH_MAX];
	int dfd = dup(tfd), rc = ELOOP;
	const char *at = rel;
	while (dfd >= 0 && *at) {
		size_t n = strcspn(at, "/");
		if (n == 0 || n >= sizeof(part))
			break;
		memcpy(part, at, n);
		part[n] = '\0';
		struct stat st;
		if (fstatat(dfd, part, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = errno == ENOENT ? 0 : errno;
			break;
		}
		if (S_ISLNK(st.st_mode)) {
			(void)snprintf(path, sizeof(path), "%s/%.*s", tree, (int)(at - rel + n),
				       rel);
			rc = aside_in(dfd, part, path, tag, out);
			break;
		}
		int next = openat(dfd, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		(void)close(dfd);
		dfd = next;
		at += n;
		at += *at == '/';
	}
	if (dfd >= 0)
		(void)close(dfd);
	return rc;
}

/*
 * Set aside what the call made at protected path p (cg_view_sweep); with
 * keep, only when the file there now is not keep. 0, or an errno.
 */
static int set_aside(const struct cg_view *v, const char *p, const struct file_id *keep,
		     const char *tag, json_t *out)
{
	const char *tree = NULL;
	/* The deepest write tree holding it: a workspace under /tmp is bound into a private one. */
	for (size_t w = 0; w < v->n_write; w++)
		if (cg_path_under(p, v->write[w]) && strcmp(p, v->write[w]) != 0 &&
		    (!tree || strlen(v->write[w]) > strlen(tree)))
			tree = v->write[w];
	if (tree && v->private_tmp && strcmp(tree, "/tmp") == 0)
		return 0; /* the call's /tmp was its own: the host's is not its doing */
	const char *slash = strrchr(p, '/');
	if (!tree || !slash)
		return 0;
	if (strlen(slash + 1) + strlen(tag) + 41 > NAME_MAX)
		return ENAMETOOLONG; /* said, not skipped */
	/* The name's directory, reached beneath its tree and through no symlink. */
	size_t tl = strlen(tree) == 1 ? 0 : strlen(tree);
	char rel[PATH_MAX];
	size_t rl = (size_t)(slash - p) > tl ? (size_t)(slash - p) - tl - 1 : 0;
	if (rl >= sizeof(rel))
		return ENAMETOOLONG;
	memcpy(rel, p + tl + 1, rl);
	rel[rl] = '\0';
	int tfd = open(tree, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (tfd < 0)
		return errno == ENOENT ? 0 : errno;
	struct open_how h = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			      .resolve =
				  RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int dfd = rl ? (int)syscall(SYS_openat2, tfd, rel, &h, sizeof(h)) : dup(tfd);
	int e = dfd < 0 ? errno : 0;
	if (dfd < 0 && e == ELOOP) {
		/*
		 * A link on the way to the name (a call made .config a link to a
		 * directory holding lefthook.yml): the developer's tools follow it,
		 * so the first link is set aside (s41a, review of F2).
		 */
		e = aside_first_link(tfd, rel, tree, tag, out);
		(void)close(tfd);
		return e;
	}
	(void)close(tfd);
	if (dfd < 0)
		return e == ENOENT || e == ENOTDIR ? 0 : e; /* no directory: no name in it */
	int rc = 0;
	struct file_id now;
	if (keep && cg_view_file_id(dfd, slash + 1, &now) && same_file(&now, keep)) {
		(void)close(dfd);
		return 0; /* what the call held: its own file still */
	}
	rc = aside_in(dfd, slash + 1, p, tag, out);
	(void)close(dfd);
	return rc;
}

/* Set aside p (unless it is still keep), or say in out why not. 0 or -1. */
static int sweep_one(const struct cg_view *v, const char *p, const struct file_id *keep,
		     const char *tag, json_t *out)
{
	int e = set_aside(v, p, keep, tag, out);
	if (e)
		json_array_append_new(out,
				      json_pack("{s:s,s:s}", "path", p, "error", cg_errno_name(e)));
	return e ? -1 : 0;
}

/*
 * What a stopped rebase, cherry-pick or revert keeps in a .git a call could
 * write, for the developer's --continue to run on the host: a todo list with
 * exec lines (s41c F1: git rebase --exe CMD), a merge strategy that is not
 * one of git's own (s41d F1: git-merge-../../x ran ./x from the workspace).
 * Whatever let it in, the state is the call's: it is set aside.
 */
static bool builtin_strategy(const char *s, size_t n)
{
	static const char *const own[] = { "ort",     "recursive", "resolve",
					   "octopus", "ours",	   "subtree" };
	for (size_t i = 0; i < CG_ARRAY_LEN(own); i++)
		if (strlen(own[i]) == n && strncmp(s, own[i], n) == 0)
			return true;
	return false;
}

/*
 * A line of sequencer/opts (git's config syntax): does it set a strategy
 * that is not one of git's own? Read as git reads it, key case-insensitive,
 * after a [section] header on the same line too; a value quoted, escaped or
 * continued is not read as harmless (s44d F1: "[options] Strategy =
 * foo/../evil" passed a reader of lines starting "strategy").
 */
static bool opts_line_runs(const char *line, size_t n)
{
	const char *end = line + n;
	if (line < end && *line == '[') {
		const char *close = memchr(line, ']', n);
		if (!close)
			return false;
		line = close + 1;
		line += strspn(line, " \t");
	}
	if ((size_t)(end - line) < 8 || strncasecmp(line, "strategy", 8) != 0)
		return false;
	const char *v = line + 8;
	if (v < end && !strchr(" \t=", *v))
		return false; /* another key: strategy-option */
	v += strspn(v, " \t");
	if (v >= end || *v != '=')
		return true; /* a strategy with no value, or odd text after it */
	v++;
	v += strspn(v, " \t");
	size_t vl = (size_t)(end - v);
	if (memchr(v, '"', vl) || memchr(v, '\\', vl) || memchr(v, ';', vl) || memchr(v, '#', vl))
		return true;
	return !builtin_strategy(v, vl);
}

/* Does state file rel of git name a program (kind: todo, strategy, opts)? */
static bool state_runs_programs(const char *git, const char *rel, char kind)
{
	char path[PATH_MAX], *text = NULL;
	size_t len = 0;
	if (snprintf(path, sizeof(path), "%s/%s", git, rel) >= (int)sizeof(path))
		return false;
	if (cg_file_read(path, 1u << 20, &text, &len) != 0)
		return errno == EFBIG; /* too long to read is not read as harmless */
	bool runs = false;
	for (char *line = text; line && *line && !runs; line = strchr(line, '\n')) {
		line += *line == '\n';
		line += strspn(line, " \t");
		size_t n = strcspn(line, "\r\n");
		while (n && strchr(" \t", line[n - 1]))
			n--;
		if (kind == 't')
			runs = (strncmp(line, "exec", 4) == 0 && strchr(" \t", line[4])) ||
			       (line[0] == 'x' && strchr(" \t", line[1]));
		else if (kind == 's')
			runs = n && !builtin_strategy(line, n);
		else
			runs = opts_line_runs(line, n);
	}
	free(text);
	return runs;
}

/*
 * Repositories a call made below a write tree's root, in the levels the
 * prepare walk looks at (found in review, s42: `git init sub` and then a
 * core.fsmonitor in sub/.git/config, which the developer's git status in sub
 * ran, as an editor's scan of the workspace's repositories would). A new
 * .git that is not a directory (a gitdir: file, a link) is set aside; a new
 * directory is kept only when it is as git's init or clone makes it: hooks
 * that are git's samples, no commondir or config.worktree, and a config
 * whose every key is one of those below (an allow-list: git keeps adding
 * keys that name programs, pager.*, diff.external, submodule.*.update, ...).
 * A line this reading does not take for such a key sets the repository
 * aside, so a misreading errs that way.
 */
#define SWEEP_ALL_DIRS (1u << 20) /* directories a walk of a whole tree reads, at most */

/* Is key (lower case) of section sec one that git's init or clone writes? */
static bool config_key_plain(const char *sec, const char *key)
{
	static const struct {
		const char *sec, *keys;
	} plain[] = {
		{ "core", " repositoryformatversion filemode bare logallrefupdates ignorecase "
			  "precomposeunicode symlinks autocrlf eol safecrlf quotepath abbrev "
			  "untrackedcache preloadindex splitindex checkstat trustctime "
			  "compression loosecompression bigfilethreshold sparsecheckout "
			  "sparsecheckoutcone warnambiguousrefs commitgraph multipackindex "
			  "longpaths " },
		{ "remote", " url pushurl fetch tagopt mirror promisor partialclonefilter prune " },
		{ "branch", " remote merge rebase pushremote description " },
		{ "extensions", " objectformat " },
		{ "user", " name email " },
		{ "init", " defaultbranch " },
		{ "lfs", " repositoryformatversion url locksverify fetchinclude fetchexclude " },
		{ "pull", " rebase ff " },
		{ "push", " default autosetupremote followtags " },
		{ "fetch", " prune prunetags recursesubmodules writecommitgraph " },
		/*
		 * What a developer's own repository commonly holds that names no
		 * program (s43d F6: a deep clone's submodule url and gc.auto had
		 * its whole config set aside after a call's git branch -u). Not
		 * submodule.*.update, diff/merge drivers, filters, aliases, pagers,
		 * editors, hooksPath, fsmonitor, sshCommand, gpg, credential or
		 * include: those run programs or read other files as config.
		 */
		{ "submodule", " url active branch shallow fetchrecursesubmodules ignore " },
		{ "gc", " auto autopacklimit autodetach pruneexpire reflogexpire "
			"reflogexpireunreachable writecommitgraph " },
		{ "maintenance", " auto strategy " },
		{ "rerere", " enabled autoupdate " },
		{ "status", " showuntrackedfiles submodulesummary short branch relativepaths " },
		{ "index", " version threads skiphash " },
		{ "pack", " threads windowmemory depth " },
		{ "protocol", " version " },
		{ "feature", " manyfiles experimental " },
		{ "color", " ui diff status branch interactive grep decorate " },
		{ "merge", " ff conflictstyle renames log stat " },
		{ "rebase", " autosquash autostash updaterefs stat " },
		{ "diff", " renames algorithm colormoved mnemonicprefix noprefix submodule "
			  "ignoresubmodules indentheuristic " },
	};
	if (strcmp(sec, "advice") == 0)
		return true; /* hints on or off, each a boolean */
	char k[80];
	if (snprintf(k, sizeof(k), " %s ", key) >= (int)sizeof(k))
		return false;
	for (size_t i = 0; i < CG_ARRAY_LEN(plain); i++)
		if (strcmp(sec, plain[i].sec) == 0)
			return strstr(plain[i].keys, k) != NULL;
	return false;
}

/*
 * A section header at p ('['): [name], [name "sub"] (\\ escapes a character in
 * sub), or [name.sub]; sec gets the name's first part, lower case. Returns
 * what follows the ']', or NULL where git's reading may differ (s42d F0: a
 * ']' inside the quoted subsection had ended the header here, and git read
 * a core.fsmonitor after it).
 */
static char *config_header(char *p, char *sec, size_t cap)
{
	p++;
	size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-.");
	size_t first = strcspn(p, ".");
	if (n == 0 || (first < n ? first : n) >= cap)
		return NULL;
	size_t k = first < n ? first : n;
	for (size_t i = 0; i < k; i++)
		sec[i] = (char)tolower((unsigned char)p[i]);
	sec[k] = '\0';
	p += n;
	if (*p == ']')
		return p + 1;
	if (first < n || !strchr(" \t", *p))
		return NULL; /* [a.b "c"] or junk */
	p += strspn(p, " \t");
	if (*p++ != '"')
		return NULL;
	for (; *p && *p != '"'; p++)
		if (*p == '\\' && !*++p)
			return NULL;
	if (*p != '"' || p[1] != ']')
		return NULL;
	return p + 2;
}

/* Does every line of config text hold only keys config_key_plain takes? */
static bool config_plain(char *text)
{
	char sec[64] = "";
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		for (;;) {
			line += strspn(line, " \t\r");
			if (!*line || *line == '#' || *line == ';')
				break;
			if (*line == '[') { /* a header, and maybe a key after it */
				if (!(line = config_header(line, sec, sizeof(sec))))
					return false;
				continue;
			}
			size_t n =
			    strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					 "0123456789-");
			char key[64];
			if (n == 0 || n >= sizeof(key) || !sec[0] || !isalpha((unsigned char)*line))
				return false;
			for (size_t i = 0; i < n; i++)
				key[i] = (char)tolower((unsigned char)line[i]);
			key[n] = '\0';
			if (!config_key_plain(sec, key))
				return false;
			break;
		}
	}
	return true;
}

/*
 * Does git directory git (relative to dfd: NAME/.git, or NAME itself when
 * it is one) hold what runs programs: hooks that are not git's samples, a
 * commondir or config.worktree, a config with a key off the allow-list?
 */
/*
 * Does hooks directory rel (relative to dfd) hold a hook that is not one of
 * git's samples? One that is not a directory (a link), or cannot be read,
 * counts as one: not read as harmless. None there: false.
 */
static bool hooks_run_programs(int dfd, const char *rel)
{
	int hfd = openat(dfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *h = hfd >= 0 ? fdopendir(hfd) : NULL;
	bool runs = !h && (hfd >= 0 || errno != ENOENT);
	for (struct dirent *e; h && !runs && (e = readdir(h));) {
		size_t n = strlen(e->d_name);
		runs = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
		       (n < 7 || strcmp(e->d_name + n - 7, ".sample") != 0);
	}
	if (h)
		(void)closedir(h);
	else if (hfd >= 0)
		(void)close(hfd);
	return runs;
}

static bool gitdir_runs_programs(int dfd, const char *git)
{
	char rel[NAME_MAX + 32];
	struct stat st;
	/*
	 * A new repository with an operation in progress (a cherry-pick, a
	 * rebase) is not as git's init or clone leaves one, and its state can
	 * name a program the developer's --continue runs (s44d F1: a root .git
	 * was kept whose sequencer/opts named ../evil as the strategy).
	 */
	static const char *const never[] = { "commondir", "config.worktree", "sequencer",
					     "rebase-merge", "rebase-apply" };
	for (size_t i = 0; i < CG_ARRAY_LEN(never); i++) {
		(void)snprintf(rel, sizeof(rel), "%s/%s", git, never[i]);
		if (fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0)
			return true;
	}
	(void)snprintf(rel, sizeof(rel), "%s/hooks", git);
	if (hooks_run_programs(dfd, rel))
		return true;
	char *text = NULL;
	size_t len = 0;
	(void)snprintf(rel, sizeof(rel), "%s/config", git);
	if (cg_file_read_at(dfd, rel, 1u << 20, &text, &len) != 0)
		return errno != ENOENT; /* a link, not a file, too long: not read as harmless */
	bool runs = memchr(text, '\0', len) != NULL || !config_plain(text);
	free(text);
	return runs;
}

/* A new NAME/.git: set aside when it is not a directory, or runs programs. */
static bool new_repo_runs_programs(int dfd, const char *name)
{
	char rel[NAME_MAX + 16];
	struct stat st;
	(void)snprintf(rel, sizeof(rel), "%s/.git", name);
	if (fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
		return true;
	return gitdir_runs_programs(dfd, rel);
}

static bool known_git(const struct cg_view *v, const char *git)
{
	for (size_t i = 0; i < v->n_protect; i++)
		if (strcmp(v->protect[i], git) == 0)
			return true;
	for (size_t i = 0; i < v->n_pin; i++)
		if (strcmp(v->pin[i], git) == 0)
			return true;
	return false;
}

/* A bare repository the view knew (protect_bare made its HEAD read-only)? */
static bool known_bare(const struct cg_view *v, const char *dir)
{
	char head[PATH_MAX + 8];
	(void)snprintf(head, sizeof(head), "%s/HEAD", dir);
	for (size_t i = 0; i < v->n_protect; i++)
		if (strcmp(v->protect[i], head) == 0)
			return true;
	return false;
}

/* The sweep's visit: a repository the call made in dir pfd's NAME, set aside when it runs programs. */
struct sweep_arg {
	const struct cg_view *v;
	const char *tag;
	json_t *out;
	/*
	 * What changed at or after this is the call's to judge (the oldest live
	 * call's start, less a margin); INT64_MIN: all of it, where the
	 * directory holding it changed (a rename carries old contents in).
	 */
	int64_t since;
};

/*
 * Is directory path what this sweep has just set aside (its walk meets the
 * new name after the rename)? It is judged once: a repository set aside
 * whole keeps its HEAD and config, for the developer to look at or take back.
 */
static bool set_aside_here(const struct sweep_arg *a, const char *name, const char *path)
{
	size_t i, pl = strlen(path) - strlen(name);
	const json_t *e;
	if (!strstr(name, ".callgate-set-aside-"))
		return false;
	json_array_foreach(a->out, i, e)
	{
		const char *was = json_string_value(json_object_get(e, "path"));
		const char *as = json_string_value(json_object_get(e, "set_aside_as"));
		const char *slash = was ? strrchr(was, '/') : NULL;
		if (as && slash && strcmp(as, name) == 0 && (size_t)(slash - was + 1) == pl &&
		    strncmp(was, path, pl) == 0)
			return true;
	}
	return false;
}

static int sweep_visit(void *arg, int pfd, const char *name, const char *path)
{
	struct sweep_arg *a = arg;
	if (set_aside_here(a, name, path))
		return 0;
	char git[PATH_MAX + 8], head[PATH_MAX + 8], rel[NAME_MAX + 16];
	struct stat st;
	(void)snprintf(rel, sizeof(rel), "%s/.git", name);
	if (snprintf(git, sizeof(git), "%s/.git", path) < (int)sizeof(git) &&
	    fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && !known_git(a->v, git) &&
	    new_repo_runs_programs(pfd, name))
		(void)sweep_one(a->v, git, NULL, a->tag, a->out);
	/* A git directory itself: its HEAD set aside, and git sees none. */
	if (cg_view_git_dir_at(pfd, name) && !known_bare(a->v, path) &&
	    gitdir_runs_programs(pfd, name) &&
	    snprintf(head, sizeof(head), "%s/HEAD", path) < (int)sizeof(head))
		(void)sweep_one(a->v, head, NULL, a->tag, a->out);
	return 0;
}

/*
 * The names the sweep judges a change to by name (the watch records each);
 * a change to any other name is one record for its directory (watch.h).
 */
static const char *const watched_names[] = {
	".git",	 "HEAD", "objects", "refs", "config",	   "commondir", "config.worktree",
	"hooks", ".hg",	 ".jj",	    "hgrc", "config.toml", NULL
};

const char *const *cg_view_watched_names(void)
{
	return watched_names;
}

/* The write tree holding p (p itself or below it); never the call's private /tmp. */
static const char *tree_of(const struct cg_view *v, const char *p)
{
	const char *tree = NULL;
	for (size_t w = 0; w < v->n_write; w++)
		if (cg_path_under(p, v->write[w]) && (!tree || strlen(v->write[w]) > strlen(tree)))
			tree = v->write[w];
	return tree && v->private_tmp && strcmp(tree, "/tmp") == 0 ? NULL : tree;
}

/* Directory dir, judged as the sweep's walk judges one (sweep_visit). */
static void judge_dir(struct sweep_arg *a, const char *dir)
{
	const char *slash = strrchr(dir, '/');
	char parent[PATH_MAX];
	size_t pl = slash ? (size_t)(slash - dir) : 0;
	if (!slash || !slash[1] || pl >= sizeof(parent))
		return;
	memcpy(parent, dir, pl);
	(void)snprintf(parent + pl, sizeof(parent) - pl, "%s", pl ? "" : "/");
	int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return;
	(void)sweep_visit(a, pfd, slash + 1, dir);
	(void)close(pfd);
}

/* Is dir a git directory (named .git, or as git_dir_at takes one)? */
static bool git_dir_path(const char *dir)
{
	const char *base = strrchr(dir, '/');
	if (base && strcmp(base + 1, ".git") == 0)
		return true;
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	bool is = fd >= 0 && cg_view_git_dir_at(fd, ".");
	if (fd >= 0)
		(void)close(fd);
	return is;
}

/* Directory p, opened through no link at its last name; NULL when it is none. */
static DIR *dir_open(const char *p)
{
	int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0)
		(void)close(fd);
	return d;
}

/*
 * What changed since the oldest live call began at p (a hooks directory, a
 * protected name of a repository the view did not protect): p itself when it
 * is not a directory (a file, a link), else what changed in it, to a few
 * levels, git's samples left alone (hooks: one level). The developer's own,
 * older files there stay.
 */
static void aside_changed_since(struct sweep_arg *a, const char *p, int depth)
{
	struct stat st;
	if (lstat(p, &st) != 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		size_t k = strlen(p);
		/* What a sweep set aside already: no tool reads it by that name. */
		const char *base = strrchr(p, '/');
		if (file_changed_since(&st, a->since) &&
		    (k < 7 || strcmp(p + k - 7, ".sample") != 0) &&
		    !strstr(base ? base : p, ".callgate-set-aside-"))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
		return;
	}
	/*
	 * A directory that changed (an entry made, or itself renamed in) is
	 * judged whole: a rename carries old contents, whose own times say
	 * nothing (s44d F2: a hooks directory and a .claude staged in one call
	 * and moved in during another that flooded the watch were kept).
	 */
	struct sweep_arg whole = *a;
	if (file_changed_since(&st, a->since))
		whole.since = INT64_MIN;
	DIR *d = dir_open(p);
	if (!d)
		return;
	char q[PATH_MAX];
	for (struct dirent *e; (e = readdir(d));)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && depth < 3 &&
		    snprintf(q, sizeof(q), "%s/%s", p, e->d_name) < (int)sizeof(q))
			aside_changed_since(&whole, q, depth + 1);
	(void)closedir(d);
}

/*
 * A change inside an existing git directory g that the prepare did not know
 * (below the walk's levels, under a hidden directory or node_modules: s42d
 * F1): what the call wrote there that names a program is set aside, the
 * rest (an index, objects, refs) stays. rel is the change's path in g.
 */
static void judge_in_git_dir(struct sweep_arg *a, const char *g, const char *rel, unsigned mask)
{
	char p[PATH_MAX];
	if (known_git(a->v, g) || known_bare(a->v, g) ||
	    snprintf(p, sizeof(p), "%s/%s", g, rel) >= (int)sizeof(p))
		return;
	size_t n = strlen(rel);
	if (strcmp(rel, "config") == 0) {
		char *text = NULL;
		size_t len = 0;
		bool runs = cg_file_read_at(AT_FDCWD, p, 1u << 20, &text, &len) != 0
				? errno != ENOENT
				: memchr(text, '\0', len) != NULL || !config_plain(text);
		free(text);
		if (runs)
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	} else if (strcmp(rel, "commondir") == 0 || strcmp(rel, "config.worktree") == 0) {
		(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	} else if (strcmp(rel, "hooks") == 0 && (mask & CG_WATCH_MADE)) {
		/* A hooks directory made or replaced: judged whole, as a new repository's. */
		if (hooks_run_programs(AT_FDCWD, p))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	} else if (n >= 6 && memcmp(rel, "hooks/", 6) == 0) {
		/* hooks/ alone: something in hooks changed, which is told by its ctime */
		if (n == 6 && snprintf(p, sizeof(p), "%s/hooks", g) < (int)sizeof(p))
			aside_changed_since(a, p, 2);
		else if (!memchr(rel + 6, '/', n - 6) &&
			 (n < 13 || memcmp(rel + n - 7, ".sample", 7) != 0))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	} else if (strncmp(rel, "rebase-merge/", 13) == 0 || strncmp(rel, "sequencer/", 10) == 0) {
		bool seq = rel[0] == 's';
		char dir[PATH_MAX];
		if ((seq ? state_runs_programs(g, "sequencer/opts", 'o')
			 : state_runs_programs(g, "rebase-merge/git-rebase-todo", 't') ||
			       state_runs_programs(g, "rebase-merge/strategy", 's')) &&
		    snprintf(dir, sizeof(dir), "%s/%s", g, seq ? "sequencer" : "rebase-merge") <
			(int)sizeof(dir))
			(void)sweep_one(a->v, dir, NULL, a->tag, a->out);
	}
}

/*
 * A change below a repository the view did not protect (deeper than its
 * levels), under one of the names the developer's tools run at a project's
 * root (.githooks with core.hooksPath, .husky, .envrc, lefthook's, ...):
 * s43e F4 had a call write .githooks/pre-commit in such a repository, and the
 * developer's git commit ran it. What changed there is set aside. Looked for
 * from dir up to two levels (name may be "": something in dir changed).
 */
static void judge_tool_names(struct sweep_arg *a, const char *dir, const char *name)
{
	char root[PATH_MAX], git[PATH_MAX + 8], p[PATH_MAX];
	struct stat st;
	const char *tree = tree_of(a->v, dir);
	if (!tree || snprintf(root, sizeof(root), "%s", dir) >= (int)sizeof(root))
		return;
	for (int up = 0; up < 3 && strlen(root) > strlen(tree); up++) {
		(void)snprintf(git, sizeof(git), "%s/.git", root);
		if (lstat(git, &st) == 0) {
			if (known_git(a->v, git))
				return;
			const char *rel = dir + strlen(root) + (dir[strlen(root)] == '/');
			char whole[PATH_MAX];
			(void)snprintf(whole, sizeof(whole), "%s%s%s", rel,
				       *rel && *name ? "/" : "", name);
			for (size_t i = 0; i < cg_view_n_protected_rel; i++) {
				size_t n = strlen(cg_view_protected_rel[i]);
				if (strncmp(whole, cg_view_protected_rel[i], n) == 0 &&
				    (whole[n] == '\0' || whole[n] == '/') &&
				    snprintf(p, sizeof(p), "%s/%s", root,
					     cg_view_protected_rel[i]) < (int)sizeof(p)) {
					aside_changed_since(a, p, 0);
					return;
				}
			}
			return;
		}
		char *slash = strrchr(root, '/');
		if (!slash || slash == root)
			return;
		*slash = '\0';
	}
}

/* Does name in a git directory, or in one of its directories, call for judge_in_git_dir? */
static bool git_name(const char *name)
{
	static const char *const names[] = { "config", "commondir", "config.worktree", "hooks" };
	for (size_t i = 0; i < CG_ARRAY_LEN(names); i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return false;
}

static bool git_subdir(const char *base)
{
	return strcmp(base, "hooks") == 0 || strcmp(base, "rebase-merge") == 0 ||
	       strcmp(base, "sequencer") == 0;
}

/*
 * The sweep by what the kernel saw the call change (watch.h), at any depth:
 * a .git or a HEAD made is its directory judged as the walk judges one; a
 * directory moved in is walked whole (what it holds may predate the call);
 * a change inside a git directory the prepare did not protect is judged by
 * judge_in_git_dir. Returns -1 when a moved-in tree could not be read whole.
 */
static int sweep_changes(const struct cg_view *v, const struct cg_watch *watch, const char *tag,
			 json_t *out)
{
	struct sweep_arg a = { v, tag, out, v->suspect_from_ns };
	struct level_walk all = {
		.cap = SWEEP_ALL_DIRS, .every = true, .visit = sweep_visit, .arg = &a
	};
	const struct cg_watch_change *c;
	size_t n = cg_watch_changes(watch, &c);
	int rc = 0;
	char p[PATH_MAX];
	for (size_t i = 0; i < n; i++) {
		if (!tree_of(v, c[i].dir))
			continue;
		/*
		 * A .git file (a linked worktree's or a submodule's gitdir:)
		 * rewritten in place points the developer's git elsewhere (s43d
		 * F3): set aside, as a new one is.
		 */
		struct stat st;
		if (strcmp(c[i].name, ".git") == 0 && (c[i].mask & CG_WATCH_WRITTEN) &&
		    snprintf(p, sizeof(p), "%s/.git", c[i].dir) < (int)sizeof(p) &&
		    lstat(p, &st) == 0 && !S_ISDIR(st.st_mode) && !known_git(v, p))
			(void)sweep_one(v, p, NULL, tag, out);
		if (!(c[i].mask & CG_WATCH_MADE))
			continue;
		/*
		 * What makes a directory a repository, made in one call or over
		 * several (s43d F3: HEAD and a config in one call, objects and
		 * refs in the next): the directory judged as it is now.
		 */
		static const char *const makes[] = { ".git", "HEAD", "objects", "refs",
						     "commondir" };
		for (size_t k = 0; k < CG_ARRAY_LEN(makes); k++)
			if (strcmp(c[i].name, makes[k]) == 0) {
				judge_dir(&a, c[i].dir);
				break;
			}
		/*
		 * Another version control's repository made, which runs what its
		 * config names for whoever uses it there next (s43a F7: hg's hooks).
		 */
		if ((strcmp(c[i].name, ".hg") == 0 || strcmp(c[i].name, ".jj") == 0) &&
		    snprintf(p, sizeof(p), "%s/%s", c[i].dir, c[i].name) < (int)sizeof(p))
			(void)sweep_one(v, p, NULL, tag, out);
		if ((c[i].mask & (CG_WATCH_MOVED | CG_WATCH_DIR)) ==
			(CG_WATCH_MOVED | CG_WATCH_DIR) &&
		    snprintf(p, sizeof(p), "%s/%s", c[i].dir, c[i].name) < (int)sizeof(p)) {
			judge_dir(&a, p);
			if (cg_view_walk_all(&all, p) != 0 && errno != ENOENT && errno != ENOTDIR) {
				json_array_append_new(
				    out, json_pack("{s:s,s:s}", "path", p, "error",
						   cg_errno_name(errno ? errno : EIO)));
				rc = -1;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		const char *base = strrchr(c[i].dir, '/');
		if (!base || !tree_of(v, c[i].dir))
			continue;
		judge_tool_names(&a, c[i].dir, c[i].name);
		/*
		 * A linked worktree's too (.git/worktrees/W/config.worktree): never
		 * git's own writing; nor an hg or jj repository's config.
		 */
		bool hg = strcmp(base + 1, ".hg") == 0 && strcmp(c[i].name, "hgrc") == 0;
		bool jj = strcmp(c[i].name, "config.toml") == 0 && strlen(c[i].dir) > 9 &&
			  strcmp(c[i].dir + strlen(c[i].dir) - 9, "/.jj/repo") == 0;
		if ((hg || jj || strcmp(c[i].name, "config.worktree") == 0) &&
		    snprintf(p, sizeof(p), "%s/%s", c[i].dir, c[i].name) < (int)sizeof(p)) {
			(void)sweep_one(v, p, NULL, tag, out);
		} else if (git_name(c[i].name) && git_dir_path(c[i].dir)) {
			judge_in_git_dir(&a, c[i].dir, c[i].name, c[i].mask);
		} else if (git_subdir(base + 1) && base != c[i].dir &&
			   snprintf(p, sizeof(p), "%.*s", (int)(base - c[i].dir), c[i].dir) <
			       (int)sizeof(p) &&
			   tree_of(v, p) && git_dir_path(p)) {
			char rel[NAME_MAX * 2 + 2];
			(void)snprintf(rel, sizeof(rel), "%s/%s", base + 1, c[i].name);
			judge_in_git_dir(&a, p, rel, c[i].mask);
		}
	}
	return rc;
}

/*
 * Git directory g that the view did not know, judged by what in it changed
 * since the oldest live call began (ctime, which no call can set back):
 * its config, commondir, config.worktree, hooks and sequencer states as
 * judge_in_git_dir judges a watched change; a bare-shaped one's HEAD as the
 * walk judges a new one.
 */
static void judge_git_since(struct sweep_arg *a, const char *g, bool bare);

/*
 * The git directories a git directory holds (s43e F2: the walk did not look
 * inside .git, and a submodule's config under .git/modules ran for the
 * developer's git status in the superproject): modules/NAME (NAME may be a
 * path: descended until a git directory is met), each judged as one; and
 * worktrees/NAME, whose commondir and config.worktree, changed, are set aside.
 */
static void judge_git_subdirs_since(struct sweep_arg *a, const char *dir, bool worktrees, int depth)
{
	DIR *d = dir_open(dir);
	if (!d)
		return;
	int fd = dirfd(d);
	char p[PATH_MAX], q[PATH_MAX];
	struct stat st;
	for (struct dirent *e; (e = readdir(d));) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
		    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= (int)sizeof(p))
			continue;
		if (worktrees) {
			static const char *const own[] = { "commondir", "config.worktree",
							   "config" };
			for (size_t i = 0; i < CG_ARRAY_LEN(own); i++)
				if (snprintf(q, sizeof(q), "%s/%s", p, own[i]) < (int)sizeof(q) &&
				    lstat(q, &st) == 0 && file_changed_since(&st, a->since))
					(void)sweep_one(a->v, q, NULL, a->tag, a->out);
		} else if (cg_view_git_dir_at(fd, e->d_name)) {
			judge_git_since(a, p, false);
		} else if (depth < 8) {
			judge_git_subdirs_since(a, p, false, depth + 1);
		}
	}
	(void)closedir(d);
}

static void judge_git_since(struct sweep_arg *a0, const char *g, bool bare)
{
	static const char *const files[] = { "config", "commondir", "config.worktree" };
	char p[PATH_MAX];
	struct stat st;
	if (known_git(a0->v, g) || known_bare(a0->v, g))
		return;
	/*
	 * A git directory that itself changed (renamed in, an entry made in it):
	 * every part that names a program is judged, whatever its own times
	 * (s44d F2, F3: one staged in an earlier call and renamed into place
	 * kept its core.fsmonitor and hooks).
	 */
	struct sweep_arg whole = *a0, *a = &whole;
	if (lstat(g, &st) == 0 && file_changed_since(&st, a0->since))
		whole.since = INT64_MIN;
	/* A bare-shaped one made or changed: judged whole first, as a new one is. */
	if (bare && snprintf(p, sizeof(p), "%s/HEAD", g) < (int)sizeof(p) && lstat(p, &st) == 0 &&
	    file_changed_since(&st, a->since))
		judge_dir(a, g);
	for (size_t i = 0; i < CG_ARRAY_LEN(files); i++)
		if (snprintf(p, sizeof(p), "%s/%s", g, files[i]) < (int)sizeof(p) &&
		    lstat(p, &st) == 0 && file_changed_since(&st, a->since))
			judge_in_git_dir(a, g, files[i], CG_WATCH_MADE);
	if (snprintf(p, sizeof(p), "%s/hooks", g) < (int)sizeof(p))
		aside_changed_since(a, p, 2); /* one level: the hooks themselves */
	judge_in_git_dir(a, g, "rebase-merge/", 0);
	judge_in_git_dir(a, g, "sequencer/", 0);
	if (snprintf(p, sizeof(p), "%s/modules", g) < (int)sizeof(p))
		judge_git_subdirs_since(a, p, false, 0);
	if (snprintf(p, sizeof(p), "%s/worktrees", g) < (int)sizeof(p))
		judge_git_subdirs_since(a, p, true, 0);
}

/* Was rel (below dfd) made since the oldest live call began (its birth time, where kept)? */
static bool born_since(const struct sweep_arg *a, int dfd, const char *rel)
{
	struct statx sx;
	return statx(dfd, rel, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) == 0 &&
	       (sx.stx_mask & STATX_BTIME) &&
	       (int64_t)sx.stx_btime.tv_sec * 1000000000 + sx.stx_btime.tv_nsec >= a->since;
}

/* The walk's visit when a watch missed changes: every directory, judged by what changed. */
static int since_visit(void *arg, int pfd, const char *name, const char *path)
{
	struct sweep_arg *a = arg;
	if (set_aside_here(a, name, path))
		return 0;
	static const char *const other[] = { ".hg/hgrc", ".jj/repo/config.toml" };
	static const char *const vcs[] = { ".hg", ".jj" };
	char p[PATH_MAX], rel[NAME_MAX + 32];
	struct stat st;
	(void)snprintf(rel, sizeof(rel), "%s/.git", name);
	if (snprintf(p, sizeof(p), "%s/.git", path) < (int)sizeof(p) &&
	    fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && !known_git(a->v, p)) {
		/* A new one is judged whole, as the watch judges it; an older one by what changed. */
		if (S_ISDIR(st.st_mode) && born_since(a, pfd, rel))
			(void)sweep_visit(a, pfd, name, path);
		else if (S_ISDIR(st.st_mode))
			judge_git_since(a, p, false);
		else if (file_changed_since(&st, a->since))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
		/* The names the developer's tools run at such a repository's root (s43e F4). */
		for (size_t i = 0; i < cg_view_n_protected_rel; i++)
			if (snprintf(p, sizeof(p), "%s/%s", path, cg_view_protected_rel[i]) <
			    (int)sizeof(p))
				aside_changed_since(a, p, 0);
	}
	for (size_t i = 0; i < CG_ARRAY_LEN(vcs); i++) {
		(void)snprintf(rel, sizeof(rel), "%s/%s", name, vcs[i]);
		if (born_since(a, pfd, rel) &&
		    snprintf(p, sizeof(p), "%s/%s", path, vcs[i]) < (int)sizeof(p))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	}
	if (cg_view_git_dir_at(pfd, name))
		judge_git_since(a, path, true);
	for (size_t i = 0; i < CG_ARRAY_LEN(other); i++) {
		(void)snprintf(rel, sizeof(rel), "%s/%s", name, other[i]);
		if (fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    file_changed_since(&st, a->since) &&
		    snprintf(p, sizeof(p), "%s/%s", path, other[i]) < (int)sizeof(p))
			(void)sweep_one(a->v, p, NULL, a->tag, a->out);
	}
	return 0;
}

/*
 * When a watch missed changes (its record bound; possibly on purpose, by a
 * call making files by the million): every directory of the tree, at any
 * depth, is looked at and what changed since the oldest live call began is
 * judged (since_visit), rather than the prepare's levels alone, which a
 * call forcing the watch out could otherwise plant below.
 */
static int sweep_changed_since(const struct cg_view *v, const char *tree, const char *tag,
			       json_t *out)
{
	struct sweep_arg a = { v, tag, out, v->suspect_from_ns };
	struct level_walk w = {
		.cap = SWEEP_ALL_DIRS, .every = true, .visit = since_visit, .arg = &a
	};
	int rc = cg_view_walk_all(&w, tree);
	if (rc != 0)
		json_array_append_new(out, json_pack("{s:s,s:s}", "path", tree, "error",
						     cg_errno_name(errno ? errno : EIO)));
	return rc;
}

/*
 * A .git the call made where a write tree's root had none, as git's init or
 * clone leaves one (a directory whose config names no program, no hooks,
 * no commondir), and the protected names in it (.git/hooks, .git/config,
 * missing too): the developer's from now on, as one made below the root is
 * (s44c M1: an agent's git init of a new project printed success and was
 * then set aside, and every later git call failed).
 */
static bool plain_new_repo(const char *path)
{
	/* The .git itself, or a protected name in it (.git/hooks, .git/config). */
	const char *slash = strstr(path, "/.git/");
	if (!slash && (slash = strrchr(path, '/')) && strcmp(slash + 1, ".git") != 0)
		slash = NULL;
	char parent[PATH_MAX];
	struct stat st;
	if (!slash || (size_t)(slash - path) >= sizeof(parent))
		return false;
	memcpy(parent, path, (size_t)(slash - path));
	parent[slash - path] = '\0';
	struct open_how h = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, parent[0] ? parent : "/", &h, sizeof(h));
	if (fd < 0)
		return false;
	bool plain = fstatat(fd, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
		     !gitdir_runs_programs(fd, ".git");
	(void)close(fd);
	return plain;
}

int cg_view_sweep(const struct cg_view *v, const struct cg_watch *watch, const char *tag,
		  json_t *out)
{
	int rc = 0;
	static const struct {
		const char *dir, *file;
		char kind;
	} states[] = { { "rebase-merge", "rebase-merge/git-rebase-todo", 't' },
		       { "rebase-merge", "rebase-merge/strategy", 's' },
		       { "sequencer", "sequencer/opts", 'o' } };
	char dir[PATH_MAX];
	for (size_t i = 0; v && v->noexec_writes && i < v->n_pin; i++)
		for (size_t k = 0; k < CG_ARRAY_LEN(states); k++)
			if (state_runs_programs(v->pin[i], states[k].file, states[k].kind) &&
			    snprintf(dir, sizeof(dir), "%s/%s", v->pin[i], states[k].dir) <
				(int)sizeof(dir))
				rc |= sweep_one(v, dir, NULL, tag, out);
	for (size_t i = 0; v && i < v->n_missing; i++)
		if (!plain_new_repo(v->missing[i]))
			rc |= sweep_one(v, v->missing[i], NULL, tag, out);
	/*
	 * A name the call held read-only that is another file now: a host-side
	 * rename (by another call that made the name, or its sweep) carried the
	 * read-only mount away with the old file, and this call could then write
	 * a fresh one (s37 attack, twice). Only names that changed since the
	 * oldest live call began (one of them may have made it) are checked: a
	 * developer's long-standing .envrc saved by rename during a call stays.
	 */
	for (size_t i = 0; v && v->protect_id && i < v->n_protect; i++)
		if (v->protect_id[i].suspect)
			rc |= sweep_one(v, v->protect[i], &v->protect_id[i], tag, out);
	for (size_t i = 0; v && v->link_id && i < v->n_link; i++)
		rc |= sweep_one(v, v->link[i], &v->link_id[i], tag, out);
	char p[PATH_MAX];
	struct stat st;
	for (size_t r = 0; v && r < v->n_nested; r++)
		for (size_t i = 0; i < cg_view_n_protected_rel; i++)
			if ((v->nested[r].missing[i / 64] >> (i % 64) & 1) &&
			    snprintf(p, sizeof(p), "%s/%s", v->nested[r].dir,
				     cg_view_protected_rel[i]) < (int)sizeof(p) &&
			    lstat(p, &st) == 0)
				rc |= sweep_one(v, p, NULL, tag, out);
	/*
	 * Repositories made or written: by what the kernel saw where it saw
	 * everything; else (no watch: a daemon that is not root, fanotify
	 * refused; or one that missed changes) by a walk of every directory
	 * judging what changed since the call began. s43e F1: without a watch
	 * this had walked only the prepare's levels, and a call that used up
	 * root's fanotify groups, or a workspace on a file system fanotify
	 * cannot mark, wrote a deep repository's config unjudged.
	 */
	if (v && watch)
		rc |= sweep_changes(v, watch, tag, out);
	for (size_t w = 0; v && !cg_watch_complete(watch) && w < v->n_write; w++)
		if (!(v->private_tmp && strcmp(v->write[w], "/tmp") == 0))
			rc |= sweep_changed_since(v, v->write[w], tag, out);
	return rc;
}

int cg_view_sweep_trees(const char *const *trees, size_t n, const char *const *known,
			size_t n_known, int64_t since_ns, const char *tag, json_t *out)
{
	struct cg_view v = { .suspect_from_ns = since_ns };
	int rc = 0;
	/* The view's lists, borrowed: the trees, and what the call's view protected or pinned. */
	v.write = (char **)(uintptr_t)trees;
	v.n_write = n;
	v.protect = (char **)(uintptr_t)known;
	v.n_protect = n_known;
	struct sweep_arg a = { &v, tag, out, since_ns };
	char p[PATH_MAX];
	for (size_t w = 0; w < v.n_write; w++) {
		const char *tree = v.write[w], *slash = strrchr(tree, '/');
		struct stat st;
		if (tree[0] != '/' || !slash[1] || (lstat(tree, &st) != 0 && errno == ENOENT))
			continue; /* never / itself (no view writes it), nor a tree gone since */
		for (size_t i = 0; i < cg_view_n_protected_rel; i++)
			if (snprintf(p, sizeof(p), "%s/%s", tree, cg_view_protected_rel[i]) <
			    (int)sizeof(p))
				aside_changed_since(&a, p, 0);
		/* The root as any directory below it (the walk hands on what is below). */
		(void)snprintf(p, sizeof(p), "%.*s", slash == tree ? 1 : (int)(slash - tree), tree);
		int pfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (pfd >= 0) {
			(void)since_visit(&a, pfd, slash + 1, tree);
			(void)close(pfd);
		}
		rc |= sweep_changed_since(&v, tree, tag, out);
	}
	return rc;
}
