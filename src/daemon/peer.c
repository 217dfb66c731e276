/* SPDX-License-Identifier: MIT */
/*
 * peer — is an admin peer a person, or code running inside a call? Read
 * from /proc and the socket (SO_PEERPIDFD, SO_PEERCRED), never from what
 * the peer sends: its cgroup must not lie under the calls' cgroup parent,
 * its pid namespace must be the daemon's, and the daemon must not be its
 * ancestor except through a notifier it started. Which admin peers may
 * approve (peer_is_approver). Unknowable means refused. Loop thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "reply.h"
#include "server_priv.h"
#include "util.h"

/*
 * Read a /proc file whole into buf (NUL-terminated). 0, or -1 when it cannot
 * be read or does not fit: the callers treat both as "cannot tell", which
 * refuses the peer.
 */
int read_proc(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	size_t o = 0;
	for (;;) {
		if (o + 1 >= len) {
			close(fd);
			return -1;
		}
		ssize_t n = cg_read_some(fd, buf + o, len - 1 - o);
		if (n < 0) {
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		o += (size_t)n;
	}
	close(fd);
	buf[o] = '\0';
	return 0;
}

/*
 * The path of the hierarchy "ID:CONTROLLERS" (hier, hier_len bytes) in a
 * /proc/<pid>/cgroup text, copied into out. 0, or -1 when absent.
 */
static int cgroup_path_of(const char *text, const char *hier, size_t hier_len, char *out,
			  size_t len)
{
	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);
		const char *c2 = memchr(l, ':', ll);
		c2 = c2 ? memchr(c2 + 1, ':', ll - (size_t)(c2 + 1 - l)) : NULL;
		if (c2 && (size_t)(c2 - l) == hier_len && memcmp(l, hier, hier_len) == 0) {
			size_t pl = ll - (size_t)(c2 + 1 - l);
			if (pl + 1 > len)
				return -1;
			memcpy(out, c2 + 1, pl);
			out[pl] = '\0';
			return 0;
		}
		l = nl ? nl + 1 : NULL;
	}
	return -1;
}

/*
 * Does the cgroup text of a peer place it under the daemon's per-call cgroup
 * parent in any hierarchy? Calls run in <daemon's cgroup>/callgate/<call>
 * (src/confine/confine.c, cg_tree_new), in cgroup v2 and, for pids.max
 * under v1, in the pids hierarchy. 1 inside, 0 not, -1 cannot tell.
 */
static int cgroup_in_call(const struct server *s, const char *peer_text, char *where,
			  size_t where_len)
{
	for (const char *l = peer_text; *l;) {
		const char *nl = strchr(l, '\n');
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);
		const char *c1 = memchr(l, ':', ll);
		const char *c2 = c1 ? memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - l)) : NULL;
		if (!c2)
			return -1;
		size_t hl = (size_t)(c2 - l);
		char own[PATH_MAX], base[PATH_MAX + 16];
		if (cgroup_path_of(s->own_cgroup, l, hl, own, sizeof(own)) == 0) {
			int bn = snprintf(base, sizeof(base), "%s/callgate",
					  strcmp(own, "/") == 0 ? "" : own);
			if (bn < 0 || (size_t)bn >= sizeof(base))
				return -1;
			const char *pp = c2 + 1;
			size_t pl = ll - (size_t)(pp - l);
			if (pl >= (size_t)bn && memcmp(pp, base, (size_t)bn) == 0 &&
			    (pl == (size_t)bn || pp[bn] == '/')) {
				(void)snprintf(where, where_len, "cgroup %.*s", (int)pl, pp);
				return 1;
			}
		}
		l = nl ? nl + 1 : l + ll;
	}
	return 0;
}

static bool is_notifier(const struct server *s, pid_t pid)
{
	for (size_t i = 0; i < MAX_NOTIFIERS; i++)
		if (s->notifiers[i].pid == pid)
			return true;
	return false;
}

/*
 * How many pids the process has on its NSpid line (/proc/<pid>/status; pid
 * 0: self): one per pid namespace from procfs's down to its own. -1 when it
 * cannot be read.
 */
int nspid_depth(pid_t pid)
{
	char path[64], buf[4096];
	if (pid)
		(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	else
		(void)snprintf(path, sizeof(path), "/proc/self/status");
	if (read_proc(path, buf, sizeof(buf)) != 0)
		return -1;
	const char *l = strstr(buf, "\nNSpid:");
	if (!l)
		return -1;
	int n = 0;
	for (const char *p = l + 8; *p && *p != '\n'; p++)
		if ((*p >= '0' && *p <= '9') && (p[-1] == '\t' || p[-1] == ' ' || p[-1] == ':'))
			n++;
	return n;
}

/* The parent of pid from /proc/<pid>/stat; -1 when it cannot be read. */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[1024];
	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_proc(path, buf, sizeof(buf)) != 0)
		return -1;
	/* "pid (comm) state ppid ...": comm may hold anything, so from the last ')'. */
	const char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || !rp[2] || rp[3] != ' ')
		return -1;
	char *end;
	long pp = strtol(rp + 4, &end, 10);
	if (end == rp + 4 || pp < 0 || pp > INT32_MAX)
		return -1;
	return (pid_t)pp;
}

/*
 * Is the admin peer running inside a call? Answered from the kernel's view
 * of the process, never from anything the peer says (issue 12, item 1): an
 * agent running as the daemon's uid, or as root, could otherwise approve its
 * own deferred call from inside it. Refused when
 *  - its cgroup lies under the daemon's per-call cgroup parent;
 *  - its pid namespace is not the daemon's (calls get their own; a peer
 *    whose pid the kernel cannot map into ours reports pid 0);
 *  - the daemon is among its ancestors, other than through a notifier the
 *    daemon started (this also covers hosts without a cgroup tree, where
 *    calls run in the daemon's own cgroup);
 *  - any of this cannot be read (fail closed), or the peer has exited by
 *    the time it was checked (its pid could name another process then).
 * Returns true for a person (outside every call); else false with where.
 */
bool peer_outside_calls(struct server *s, int fd, pid_t pid, char *where, size_t where_len)
{
	char path[64];
	struct stat st;
	char *text = NULL;
	bool ok = false;
	/* A pidfd pins the process: after the checks it must still be alive. */
	int pidfd = -1;
	socklen_t pl = sizeof(pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pl) < 0)
		pidfd = -1; /* kernel before 6.5: the pid alone */
	if (pid <= 0) {
		(void)snprintf(where, where_len, "a pid namespace the daemon cannot see into");
		goto release;
	}
	/*
	 * Same pid namespace: by the namespace inode where we may read it (a
	 * non-root daemon may not, for a root peer), and always by the depth
	 * of the peer's NSpid line in the world-readable status file, which
	 * grows by one in every nested namespace.
	 */
	(void)snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	bool ns_readable = stat(path, &st) == 0;
	if (!ns_readable && errno != EACCES) {
		(void)snprintf(where, where_len, "its pid namespace cannot be read: %s",
			       cg_errno_name(errno));
		goto release;
	}
	if (ns_readable && (st.st_ino != s->pidns_st.st_ino || st.st_dev != s->pidns_st.st_dev)) {
		(void)snprintf(where, where_len, "pid namespace %lu, not the daemon's",
			       (unsigned long)st.st_ino);
		goto release;
	}
	int depth = nspid_depth(pid);
	if (depth < 0 || depth != s->nspid_depth) {
		(void)snprintf(where, where_len, "pid namespace depth %d, not the daemon's %d",
			       depth, s->nspid_depth);
		goto release;
	}
	text = malloc(PROC_READ_MAX);
	(void)snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (!text || !s->own_cgroup || read_proc(path, text, PROC_READ_MAX) != 0) {
		(void)snprintf(where, where_len, "its cgroup cannot be read");
		goto release;
	}
	int in = cgroup_in_call(s, text, where, where_len);
	if (in != 0) {
		if (in < 0)
			(void)snprintf(where, where_len, "its cgroup cannot be parsed");
		goto release;
	}
	pid_t cur = pid;
	for (int hop = 0; hop < MAX_ANCESTRY; hop++) {
		pid_t pp = parent_of(cur);
		if (pp < 0) {
			(void)snprintf(where, where_len, "its ancestry cannot be read");
			goto release;
		}
		if (pp == s->self_pid) {
			if (is_notifier(s, cur))
				break; /* started by the daemon to reach a person */
			(void)snprintf(where, where_len, "a descendant of the daemon (via pid %d)",
				       (int)cur);
			goto release;
		}
		if (pp <= 1)
			break;
		cur = pp;
		if (hop == MAX_ANCESTRY - 1) {
			(void)snprintf(where, where_len, "its ancestry is too deep to check");
			goto release;
		}
	}
	/* EPERM (a root peer of a non-root daemon) still means alive. */
	if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0 &&
	    errno != EPERM) {
		(void)snprintf(where, where_len, "it exited before it could be checked");
		goto release;
	}
	ok = true;
release:
	free(text);
	if (pidfd >= 0)
		close(pidfd);
	return ok;
}

/* Is the peer on fd (cred) a configured approver? By uid, primary or supplementary gid. */
bool peer_is_approver(const struct server *s, int fd, const struct ucred *cred)
{
	const struct cg_server_config *cfg = s->cfg;
	if (cfg->n_approver_uids == 0 && cfg->n_approver_gids == 0)
		return cred->uid == s->euid;
	for (size_t i = 0; i < cfg->n_approver_uids; i++)
		if (cfg->approver_uids[i] == cred->uid)
			return true;
	if (cfg->n_approver_gids == 0)
		return false;
	gid_t groups[256];
	socklen_t gl = sizeof(groups);
	size_t ng = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0)
		ng = gl / sizeof(gid_t);
	for (size_t i = 0; i < cfg->n_approver_gids; i++) {
		if (cfg->approver_gids[i] == cred->gid)
			return true;
		for (size_t j = 0; j < ng; j++)
			if (groups[j] == cfg->approver_gids[i])
				return true;
	}
	return false;
}
