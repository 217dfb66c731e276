/* SPDX-License-Identifier: MIT */
/*
 * file — opening and reading files that someone else may have planted.
 *
 * Every file callgate reads whole (a policy, a signature, a key, a journal
 * segment, a trace file) goes through here, so the same three defences hold
 * everywhere:
 *  - the open MUST NOT block: a FIFO planted where a file was expected would
 *    otherwise hang the reader until someone writes to it (O_NONBLOCK);
 *  - only regular files are read: a FIFO, device or socket is refused with
 *    EINVAL (EISDIR for a directory), never streamed;
 *  - the size is capped before reading and again while reading, since the
 *    file may grow under us (a live journal): past the cap is EFBIG.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "util.h"

int cg_file_open_regular(int dir_fd, const char *path, off_t *size)
{
	int fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		int e = errno;
		if (e == 0 || S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode))
			e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		close(fd);
		errno = e;
		return -1;
	}
	if (size)
		*size = st.st_size;
	return fd;
}

static int read_from(int dir_fd, const char *path, uint64_t from, size_t cap, char **out,
		     size_t *out_len)
{
	off_t size = 0;
	int fd = cg_file_open_regular(dir_fd, path, &size);
	if (fd < 0)
		return -1;
	char *p = NULL;
	int saved = 0;
	if ((uint64_t)size < from) {
		saved = ERANGE; /* the file is shorter than the caller knew it */
		goto close_fd;
	}
	size -= (off_t)from;
	if (from && lseek(fd, (off_t)from, SEEK_SET) < 0) {
		saved = errno;
		goto close_fd;
	}
	if ((uint64_t)size > cap) {
		saved = EFBIG;
		goto close_fd;
	}
	/* Slack so the read that meets EOF needs no reallocation. */
	size_t alloc = (size_t)size + 4096, len = 0;
	p = malloc(alloc);
	if (!p) {
		saved = ENOMEM;
		goto close_fd;
	}
	for (;;) {
		if (len + 1 >= alloc) {
			/* The file grew while we read it: read on, up to the cap. */
			if (alloc > cap) {
				saved = EFBIG;
				goto close_fd;
			}
			char *q = realloc(p, alloc * 2);
			if (!q) {
				saved = ENOMEM;
				goto close_fd;
			}
			p = q;
			alloc *= 2;
		}
		ssize_t r = cg_read_some(fd, p + len, alloc - 1 - len);
		if (r < 0) {
			saved = errno;
			goto close_fd;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	if (len > cap) {
		saved = EFBIG;
		goto close_fd;
	}
	p[len] = '\0';
	*out = p;
	*out_len = len;
	p = NULL;
close_fd:
	free(p);
	close(fd);
	if (saved) {
		errno = saved;
		return -1;
	}
	return 0;
}

int cg_mkdirs(const char *path, mode_t parents, mode_t mode)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, parents) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * Is gid the private group of uid: named as it, no member listed, and no
 * other user's primary group? (Start-up only: the password database is
 * walked with getpwent.)
 */
static bool private_group(gid_t gid, uid_t uid)
{
	char gbuf[4096], pbuf[4096];
	struct group gr, *g = NULL;
	struct passwd pw, *p = NULL;
	if (getgrgid_r(gid, &gr, gbuf, sizeof(gbuf), &g) != 0 || !g ||
	    getpwuid_r(uid, &pw, pbuf, sizeof(pbuf), &p) != 0 || !p ||
	    strcmp(g->gr_name, p->pw_name) != 0 || (g->gr_mem && g->gr_mem[0]))
		return false;
	bool alone = true;
	setpwent();
	for (struct passwd *o; alone && (o = getpwent());)
		alone = o->pw_gid != gid || o->pw_uid == uid;
	endpwent();
	/* Nor a second group of the same gid (groupadd -o) whose members get it. */
	setgrent();
	for (struct group *o; alone && (o = getgrent());)
		alone = o->gr_gid != gid || strcmp(o->gr_name, p->pw_name) == 0;
	endgrent();
	return alone;
}

/* One step of cg_dir_trusted: last when it is the path itself. */
static int step_trusted(const char *step, bool last, bool sticky_last, char *why, size_t why_len)
{
	struct stat st;
	uid_t me = geteuid();
	if (lstat(step, &st) != 0) {
		snprintf(why, why_len, "%.300s: %s", step, strerror(errno));
		return -1;
	}
	bool link = S_ISLNK(st.st_mode), sticky = (st.st_mode & S_ISVTX) != 0;
	/*
	 * A non-root daemon's own private group may write (a user private
	 * group: its name the user's, no member listed), unless an access ACL
	 * is there: then the group bits are its mask, and a named user it
	 * lists may write too.
	 */
	bool acl = lgetxattr(step, "system.posix_acl_access", NULL, 0) > 0;
	mode_t others = me != 0 && st.st_gid == getegid() && !acl && private_group(st.st_gid, me)
			    ? S_IWOTH
			    : (S_IWGRP | S_IWOTH);
	const char *bad = st.st_uid != 0 && st.st_uid != me ? "owned by another user"
			  : !link && !S_ISDIR(st.st_mode)   ? "not a directory"
			  : !link && (st.st_mode & others) && !(sticky && (!last || sticky_last))
			      ? "writable by other users"
			      : NULL;
	if (!bad)
		return 0;
	snprintf(why, why_len, "%.300s is %s (uid %u, mode %04o)", step, bad, (unsigned)st.st_uid,
		 (unsigned)(st.st_mode & 07777));
	errno = EPERM;
	return -1;
}

/* Every step of the absolute path abs, from / on. */
static int steps_trusted(const char *abs, bool sticky_last, char *why, size_t why_len)
{
	char buf[PATH_MAX];
	size_t n = strlen(abs);
	while (n > 1 && abs[n - 1] == '/')
		n--;
	if (n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, abs, n);
	buf[n] = '\0';
	if (step_trusted("/", n == 1, sticky_last, why, why_len) != 0)
		return -1;
	for (size_t i = 1; i <= n; i++) {
		if (i < n && buf[i] != '/')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		int rc = step_trusted(buf, i == n, sticky_last, why, why_len);
		buf[i] = c;
		if (rc != 0)
			return -1;
	}
	return 0;
}

int cg_dir_trusted(const char *path, bool sticky_last, char *why, size_t why_len)
{
	char abs[PATH_MAX], real[PATH_MAX], cwd[PATH_MAX];
	/* Every failure names itself in why. */
	snprintf(why, why_len, "%.300s: %s", path, strerror(ENAMETOOLONG));
	if (path[0] == '/' ? snprintf(abs, sizeof(abs), "%s", path) >= (int)sizeof(abs)
			   : !getcwd(cwd, sizeof(cwd)) || snprintf(abs, sizeof(abs), "%s/%s", cwd,
								   path) >= (int)sizeof(abs)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (steps_trusted(abs, sticky_last, why, why_len) != 0)
		return -1;
	if (!realpath(abs, real)) {
		snprintf(why, why_len, "%.300s: %s", abs, strerror(errno));
		return -1;
	}
	return strcmp(real, abs) == 0 ? 0 : steps_trusted(real, sticky_last, why, why_len);
}

int cg_mkdirs_trusted(const char *path, mode_t parents, mode_t mode, bool sticky_last, char *why,
		      size_t why_len)
{
	char have[PATH_MAX];
	struct stat st;
	if (snprintf(have, sizeof(have), "%s", path) >= (int)sizeof(have)) {
		snprintf(why, why_len, "%.300s: %s", path, strerror(ENAMETOOLONG));
		errno = ENAMETOOLONG;
		return -1;
	}
	/* The deepest part that exists (lstat: a link there is judged, not followed). */
	while (lstat(have, &st) != 0) {
		char *slash = strrchr(have, '/');
		if (!slash || slash == have) {
			snprintf(have, sizeof(have), "%s", path[0] == '/' ? "/" : ".");
			break;
		}
		*slash = '\0';
	}
	if (strcmp(have, path) != 0 && cg_dir_trusted(have, true, why, why_len) != 0)
		return -1;
	if (cg_mkdirs(path, parents, mode) != 0) {
		snprintf(why, why_len, "cannot create %.300s: %s", path, strerror(errno));
		return -1;
	}
	return cg_dir_trusted(path, sticky_last, why, why_len);
}

int cg_file_read(const char *path, size_t cap, char **out, size_t *out_len)
{
	return read_from(AT_FDCWD, path, 0, cap, out, out_len);
}

int cg_file_read_at(int dir_fd, const char *path, size_t cap, char **out, size_t *out_len)
{
	return read_from(dir_fd, path, 0, cap, out, out_len);
}

int cg_file_read_from(const char *path, uint64_t from, size_t cap, char **out, size_t *out_len)
{
	return read_from(AT_FDCWD, path, from, cap, out, out_len);
}

int cg_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
			 bool exclusive)
{
	int rc = -1, saved = 0;
	size_t tn = strlen(path) + sizeof(".tmp.XXXXXX");
	char *tmp = malloc(tn);
	if (!tmp)
		return -1;
	snprintf(tmp, tn, "%s.tmp.XXXXXX", path);
	/* mkostemp creates mode 0600, so secret bytes are never world-readable. */
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		saved = errno;
		goto free_tmp;
	}
	if (cg_write_all(fd, data, len) != 0 || fchmod(fd, mode) != 0 || fsync(fd) != 0) {
		saved = errno;
		goto unlink_tmp;
	}
	if (close(fd) != 0) {
		fd = -1;
		saved = errno;
		goto unlink_tmp;
	}
	fd = -1;
	/* link() fails on an existing name: an exclusive write never replaces a key. */
	if (exclusive ? link(tmp, path) != 0 : rename(tmp, path) != 0) {
		saved = errno;
		goto unlink_tmp;
	}
	if (exclusive)
		unlink(tmp);
	rc = 0;
	goto free_tmp;
unlink_tmp:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
free_tmp:
	free(tmp);
	if (rc != 0)
		errno = saved;
	return rc;
}

bool cg_path_under(const char *p, const char *t)
{
	size_t n = strlen(t);
	if (n == 1 && t[0] == '/')
		return true;
	return strncmp(p, t, n) == 0 && (p[n] == 0 || p[n] == '/');
}

void cg_file_hold_ahead(int fd, uint64_t end, size_t need, uint64_t ahead, uint64_t *held)
{
	uint64_t to = end + need;
	if (fd < 0 || !ahead || *held >= to + ahead / 2)
		return; /* enough still held, or nothing asked */
	if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)end, (off_t)(to + ahead - end)) == 0)
		*held = to + ahead;
}

void cg_file_release_ahead(int fd, uint64_t *held)
{
	struct stat st;
	/*
	 * A truncate to the file's own size: it changes no byte (a torn tail
	 * stays) and frees the blocks past the end, on ext4 as on tmpfs (a punch
	 * past the end frees nothing on ext4: review-s39). The caller is the
	 * file's one writer.
	 */
	if (fd >= 0 && *held && fstat(fd, &st) == 0)
		(void)ftruncate(fd, st.st_size);
	*held = 0;
}

bool cg_file_zeros(int fd, uint64_t from, uint64_t to)
{
	unsigned char b[65536];
	while (from < to) {
		size_t n = to - from < sizeof(b) ? (size_t)(to - from) : sizeof(b);
		if (pread(fd, b, n, (off_t)from) != (ssize_t)n)
			return false;
		for (size_t i = 0; i < n; i++)
			if (b[i])
				return false;
		from += n;
	}
	return true;
}

int64_t cg_dir_btime_ns(int dirfd, const char *path)
{
	struct statx sx;
	if (statx(dirfd, path, (path[0] ? 0 : AT_EMPTY_PATH) | AT_SYMLINK_NOFOLLOW, STATX_BTIME,
		  &sx) != 0 ||
	    !(sx.stx_mask & STATX_BTIME))
		return 0;
	return (int64_t)sx.stx_btime.tv_sec * 1000000000 + sx.stx_btime.tv_nsec;
}
