/* SPDX-License-Identifier: MIT */
/*
 * listener — the daemon's Unix sockets: the directory made with its mode, a
 * lock file, a connect probe before a stale socket is unlinked, the mode
 * set between bind() and listen(), a socket passed by systemd adopted, and
 * only our own socket unlinked at the stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server_priv.h"
#include "util.h"

/*
 * Bind and listen on path without clobbering a live daemon:
 *  1. an exclusive flock on "<path>.lock" (two daemons starting together
 *     cannot both decide the socket is stale and unlink each other's);
 *  2. if path exists and is not a socket, refuse (never unlink a file we
 *     did not make);
 *  3. if it is a socket that accepts a connection, a daemon is live: refuse;
 *     ECONNREFUSED means stale: unlink it;
 *  4. bind, set the mode (and group) BEFORE listen(), so there is no moment
 *     when the socket is reachable with the umask's mode.
 * On failure logs one line and returns -1.
 */
int open_listener(const char *path, mode_t mode, gid_t gid, int *lock_out, struct stat *st_out,
		  int64_t *locked_at_ns)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = -1, lock_fd = -1, probe = -1;
	char lockpath[PATH_MAX];
	if (strlen(path) >= sizeof(sa.sun_path)) {
		cg_log("error", NULL, "socket path %s is longer than %zu bytes", path,
		       sizeof(sa.sun_path) - 1);
		goto fail;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	/*
	 * The socket's directory, made if missing (the last with dmode, those
	 * above it 0755). In a directory another user can change, the socket
	 * could be swapped for a link between bind and chmod, or for their own
	 * socket later; directly in a sticky one (/tmp) it cannot: others rename
	 * only theirs. Nothing is made through a directory of theirs either.
	 */
	mode_t dmode = geteuid() == 0 ? 0755 : (gid != (gid_t)-1 ? 0710 : 0700);
	char dir[PATH_MAX], untrusted[400];
	const char *slash = strrchr(path, '/');
	snprintf(dir, sizeof(dir), "%.*s",
		 slash == path ? 1
		 : slash       ? (int)(slash - path)
			       : 1,
		 slash ? path : ".");
	if (cg_mkdirs_trusted(dir, 0755, dmode, true, untrusted, sizeof(untrusted)) != 0) {
		cg_log("error", NULL,
		       "refusing the socket %s: %s (choose a directory only the daemon's user "
		       "and root can change, or a sticky one such as /tmp)",
		       path, untrusted);
		goto fail;
	}
	if (snprintf(lockpath, sizeof(lockpath), "%s.lock", path) >= (int)sizeof(lockpath)) {
		cg_log("error", NULL, "socket path %s is too long", path);
		goto fail;
	}
	lock_fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock_fd < 0) {
		cg_log("error", NULL, "cannot open lock %s: %s", lockpath, strerror(errno));
		goto fail;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		cg_log("error", NULL, "%s: another callgated holds %s; already running", path,
		       lockpath);
		goto fail;
	}
	if (locked_at_ns) {
		/*
		 * Every daemon that served this socket before us held this lock
		 * until it exited, so every request it accepted is dated before
		 * now: requests dated before now are refused (replay across a
		 * restart). Then wait for the next millisecond before listening,
		 * so that a request made after we listen is dated at or after now
		 * even by a client that writes milliseconds only.
		 */
		*locked_at_ns = cg_now_wall_ns();
		int64_t wait_ns = 1000000 - *locked_at_ns % 1000000;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)wait_ns };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			cg_log("error", NULL,
			       "%s exists and is not a socket; refusing to replace it", path);
			goto fail;
		}
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe < 0) {
			cg_log("error", NULL, "socket: %s", strerror(errno));
			goto fail;
		}
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			cg_log("error", NULL, "%s: a daemon is already listening; already running",
			       path);
			goto fail;
		}
		if (errno != ECONNREFUSED) {
			cg_log("error", NULL, "%s: cannot probe the existing socket: %s", path,
			       strerror(errno));
			goto fail;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			cg_log("error", NULL, "cannot remove stale socket %s: %s", path,
			       strerror(errno));
			goto fail;
		}
		cg_log("info", NULL, "removed stale socket %s", path);
		close(probe);
		probe = -1;
	} else if (errno != ENOENT) {
		cg_log("error", NULL, "cannot stat %s: %s", path, strerror(errno));
		goto fail;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		cg_log("error", NULL, "socket: %s", strerror(errno));
		goto fail;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		cg_log("error", NULL, "cannot bind %s: %s", path, strerror(errno));
		goto fail;
	}
	/* Never through a link: what is at path now may not be what bind made. */
	if (gid != (gid_t)-1 && fchownat(AT_FDCWD, path, (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) < 0) {
		cg_log("error", NULL, "cannot give %s to group %u: %s", path, (unsigned)gid,
		       strerror(errno));
		goto unlink_path;
	}
	if (fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW) < 0) {
		cg_log("error", NULL, "cannot chmod %s: %s", path, strerror(errno));
		goto unlink_path;
	}
	if (lstat(path, st_out) < 0 || listen(fd, SOMAXCONN) < 0) {
		cg_log("error", NULL, "cannot listen on %s: %s", path, strerror(errno));
		goto unlink_path;
	}
	*lock_out = lock_fd;
	return fd;
unlink_path:
	(void)unlink(path);
fail:
	if (probe >= 0)
		close(probe);
	if (fd >= 0)
		close(fd);
	if (lock_fd >= 0)
		close(lock_fd);
	return -1;
}

/*
 * Adopt a listening socket passed by systemd (socket activation). It is
 * already bound with the mode the unit gave it, and may already hold
 * connections that arrived before we started, so it is neither probed nor
 * replaced. The lock next to it still keeps a second daemon off the same
 * path. Replay across a restart: the last daemon bumped the lock file's
 * mtime each time it took a request (conn_submit), so requests dated before
 * that mtime are refused; a lock file made now (no daemon served this path
 * since boot) refuses requests dated before boot. On failure logs one line
 * and returns -1.
 */
int adopt_listener(int fd, const char *path, int *lock_out, int64_t *not_before)
{
	char lockpath[PATH_MAX];
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		cg_log("error", NULL, "passed socket %s: %s", path, strerror(errno));
		return -1;
	}
	if (snprintf(lockpath, sizeof(lockpath), "%s.lock", path) >= (int)sizeof(lockpath)) {
		cg_log("error", NULL, "socket path %s is too long", path);
		return -1;
	}
	bool fresh = true;
	int lock_fd = open(lockpath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock_fd < 0 && errno == EEXIST) {
		fresh = false;
		lock_fd = open(lockpath, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	}
	if (lock_fd < 0) {
		cg_log("error", NULL, "cannot open lock %s: %s", lockpath, strerror(errno));
		return -1;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		cg_log("error", NULL, "%s: another callgated holds %s; already running", path,
		       lockpath);
		close(lock_fd);
		return -1;
	}
	if (not_before) {
		struct stat st;
		struct timespec boot, wall;
		if (!fresh && fstat(lock_fd, &st) == 0) {
			*not_before = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		} else if (clock_gettime(CLOCK_BOOTTIME, &boot) == 0 &&
			   clock_gettime(CLOCK_REALTIME, &wall) == 0) {
			*not_before = ((int64_t)wall.tv_sec - boot.tv_sec) * 1000000000 +
				      (wall.tv_nsec - boot.tv_nsec);
		} else {
			*not_before = cg_now_wall_ns();
		}
	}
	*lock_out = lock_fd;
	return fd;
}

/* Unlink path only if it is still the socket we bound (not a successor's). */
void unlink_ours(const char *path, const struct stat *ours)
{
	struct stat st;
	if (lstat(path, &st) == 0 && st.st_dev == ours->st_dev && st.st_ino == ours->st_ino)
		(void)unlink(path);
}
