/* SPDX-License-Identifier: MIT */
/*
 * live_archive — trace packages appended to their journal segment's archive
 * as they are sealed (retention.h, "Packages appended ..."; policy
 * evidence.packages: archive). No directory and no inode per call: a
 * package is five tar members and one index line.
 *
 * The members are POSIX ustar, written by hand: a 512-byte header (name,
 * mode, size, mtime, checksum, magic) and the file's bytes padded to 512.
 * That is the whole format this needs, and the only one read back
 * (cg_ustar_header); libarchive (used by retention to pack) stays unloaded.
 *
 * Invariants:
 *  - A trace's index line is written only after all five of its members:
 *    a reader that finds the line finds the package whole.
 *  - A failed append leaves nothing behind: the tar is cut back to where the
 *    package began, so a later append writes over it.
 *  - An archive is repaired before it is appended to again (a crash may
 *    have torn its tail): see cg_live_archive_repair.
 */
#include "retention.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "evidence.h"
#include "journal.h"
#include "util.h"

#define BLOCK	  512u
#define INDEX_CAP ((size_t)256 << 20)

static uint64_t padded(uint64_t n)
{
	return (n + BLOCK - 1) / BLOCK * BLOCK;
}

/* Paths of segment's tar and index ("0000000000000001.ndjson" -> 0000000000000001.tar). */
static void archive_paths(const char *state_dir, const char *segment, char *tar, char *idx,
			  size_t cap)
{
	const char *dot = strrchr(segment, '.');
	int base = (int)(dot ? (size_t)(dot - segment) : strlen(segment));
	snprintf(tar, cap, "%s/%s/%.*s.tar", state_dir, CG_ARCHIVE_DIR, base, segment);
	snprintf(idx, cap, "%s/%s/%.*s.idx", state_dir, CG_ARCHIVE_DIR, base, segment);
}

/* One ustar header for a regular file: name (< 100 bytes), size, mtime. */
static void ustar_header(unsigned char h[BLOCK], const char *name, uint64_t size, int64_t mtime)
{
	memset(h, 0, BLOCK);
	memcpy(h, name, strnlen(name, 99)); /* names here are at most 78 bytes */
	snprintf((char *)h + 100, 8, "%07o", 0644u);
	snprintf((char *)h + 108, 8, "%07o", 0u);
	snprintf((char *)h + 116, 8, "%07o", 0u);
	snprintf((char *)h + 124, 12, "%011" PRIo64, size);
	snprintf((char *)h + 136, 12, "%011" PRIo64, (uint64_t)mtime);
	h[156] = '0'; /* a regular file */
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8); /* the checksum counts its own field as spaces */
	unsigned sum = 0;
	for (size_t i = 0; i < BLOCK; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
}

/*
 * A numeric header field read strictly, as the writers here write it:
 * leading spaces, 1 to 11 octal digits, then only NULs and spaces. Readers
 * differ on anything else (a sign, a newline, base-256), so a member whose
 * size one reader takes one way and another another is not accepted.
 */
static bool octal_field(const unsigned char *f, size_t n, uint64_t *out)
{
	size_t i = 0, digits = 0;
	uint64_t v = 0;
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++)
		v = v * 8 + (uint64_t)(f[i] - '0');
	if (digits == 0 || digits > 11)
		return false;
	for (; i < n; i++)
		if (f[i] != '\0' && f[i] != ' ')
			return false;
	*out = v;
	return true;
}

/* devmajor or devminor: all NUL (as writers of regular files may leave them), or a number. */
static bool dev_field(const unsigned char *f)
{
	static const unsigned char none[8];
	uint64_t v = 0;
	return memcmp(f, none, sizeof(none)) == 0 || octal_field(f, 8, &v);
}

int cg_ustar_header(const unsigned char h[512], uint64_t pos, uint64_t file_size, char *name,
		    size_t cap, uint64_t *next)
{
	static const unsigned char zero[BLOCK];
	if (memcmp(h, zero, BLOCK) == 0)
		return 1;
	/* POSIX ustar, a regular file, no name prefix, its writer's checksum. */
	if (memcmp(h + 257,
		   "ustar\0"
		   "00",
		   8) != 0 ||
	    (h[156] != '0' && h[156] != '\0') || h[345])
		return -1;
	uint64_t want = 0, size = 0;
	unsigned sum = 8 * ' ';
	for (size_t i = 0; i < BLOCK; i++)
		sum += i >= 148 && i < 156 ? 0 : h[i];
	/*
	 * mode, uid, gid, mtime, devmajor and devminor too: tarfile takes a
	 * header it cannot read as the end.
	 */
	uint64_t other = 0;
	if (!octal_field(h + 148, 8, &want) || want != sum || !octal_field(h + 124, 12, &size) ||
	    !octal_field(h + 100, 8, &other) || !octal_field(h + 108, 8, &other) ||
	    !octal_field(h + 116, 8, &other) || !octal_field(h + 136, 12, &other) ||
	    !dev_field(h + 329) || !dev_field(h + 337) || !memchr(h, '\0', 100))
		return -1;
	snprintf(name, cap, "%s", (const char *)h);
	*next = pos + BLOCK + padded(size); /* size < 8 GiB: no overflow */
	return *next <= file_size ? 0 : -2;
}

uint64_t cg_ustar_size(const unsigned char h[512])
{
	uint64_t size = 0;
	return octal_field(h + 124, 12, &size) ? size : 0;
}

int cg_ustar_member(int fd, uint64_t pos, uint64_t file_size, char *name, size_t cap,
		    uint64_t *next)
{
	unsigned char h[BLOCK];
	if (pos + BLOCK > file_size)
		return -2;
	if (pread(fd, h, BLOCK, (off_t)pos) != (ssize_t)BLOCK)
		return -1;
	return cg_ustar_header(h, pos, file_size, name, cap, next);
}

/*
 * The package whose first member is at pos: five members of one trace (a
 * valid trace id, each of the five file names once), all within the file. Its trace id into id and where it ends into *end: 0; or
 * what stopped it (cg_ustar_member's 1, -1 or -2; -1 for a member of another
 * trace or a name that is not ID/FILE).
 */
static int package_at(int fd, uint64_t pos, uint64_t file_size, char *id, size_t cap, uint64_t *end)
{
	char name[128], mid[CG_TRACE_ID_MAX + 2];
	uint64_t next = 0;
	unsigned have = 0;
	for (size_t members = 0; members < CG_PACKAGE_N; members++) {
		int r = cg_ustar_member(fd, pos, file_size, name, sizeof(name), &next);
		if (r != 0)
			return r;
		/* The five files of one trace, each once, in any order (retention's is readdir's). */
		int file = cg_package_member(name, members ? mid : id, members ? sizeof(mid) : cap);
		if (file < 0 || (members && strcmp(mid, id) != 0) || (have & (1u << file)))
			return -1;
		have |= 1u << file;
		pos = next;
	}
	*end = pos;
	return 0;
}

int cg_package_member(const char *name, char *id, size_t cap)
{
	const char *slash = strchr(name, '/');
	if (!slash || (size_t)(slash - name) >= cap)
		return -1;
	snprintf(id, cap, "%.*s", (int)(slash - name), name);
	if (!cg_trace_id_valid(id))
		return -1;
	for (int i = 0; i < CG_PACKAGE_N; i++)
		if (strcmp(slash + 1, cg_package_names[i]) == 0)
			return i;
	return -1;
}

/* Does the index line at p ("TRACE OFFSET\n") name a whole package of TRACE? *end: its end. */
static bool line_whole(int fd, const char *p, uint64_t file_size, uint64_t *end)
{
	char trace[CG_TRACE_ID_MAX + 2] = "", id[CG_TRACE_ID_MAX + 2];
	unsigned long long off = 0;
	return sscanf(p, "%65s %llu", trace, &off) == 2 && off < file_size &&
	       package_at(fd, off, file_size, id, sizeof(id), end) == 0 && strcmp(id, trace) == 0;
}

/*
 * From the index's last line back (buf[0..*len), whole lines), the first
 * naming a whole package is where the index is right up to: *len is cut to
 * end with it (a lost write-back can leave several lines naming bytes that
 * never reached the disk: they go). Where that package ends, or 0.
 */
static uint64_t index_whole_to(int fd, const char *buf, size_t *len, uint64_t size)
{
	uint64_t end = 0;
	while (*len > 0) {
		size_t last = *len - 1;
		while (last > 0 && buf[last - 1] != '\n')
			last--;
		if (line_whole(fd, buf + last, size, &end))
			return end;
		*len = last;
	}
	return 0;
}

/*
 * Whole packages from *end on that no line names (a crash between a package
 * and its line, a lost or missing index) get their lines back into add: the
 * index is derived from the tar, and nothing whole is cut. After a hole
 * (write-back lost out of order at a power cut) the whole packages beyond
 * it are found again; the hole stays, and replay --all reports it. *end:
 * where the last whole package ends; *stop: what is there (package_at's
 * code), or 0 at the end of the file. 0, or -1 (ENOMEM).
 */
static int reindex_from(int fd, uint64_t *end, uint64_t size, struct cg_buf *add, int *stop)
{
	*stop = 0;
	while (*end < size) {
		char id[CG_TRACE_ID_MAX + 2], line[CG_TRACE_ID_MAX + 32];
		uint64_t pend = 0, at = *end;
		if ((*stop = package_at(fd, at, size, id, sizeof(id), &pend)) != 0) {
			for (at += BLOCK; at + BLOCK <= size; at += BLOCK)
				if (package_at(fd, at, size, id, sizeof(id), &pend) == 0)
					break;
			if (at + BLOCK > size)
				return 0; /* no whole package after it: a torn tail */
		}
		int n = snprintf(line, sizeof(line), "%s %" PRIu64 "\n", id, at);
		if (cg_buf_add(add, line, (size_t)n) < 0 || add->truncated) {
			errno = ENOMEM;
			return -1;
		}
		*end = pend;
	}
	return 0;
}

/*
 * open(2) of an archive file to change it: a regular file only, never
 * through a link (a FIFO put in its place would block the opener, and a
 * device or a link would be written through). -1 with errno (EINVAL: not a
 * regular file).
 */
static int open_own(const char *path, int flags, mode_t mode)
{
	int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, mode);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

int cg_live_archive_repair(const char *state_dir, const char *segment, bool for_append,
			   uint64_t *cut)
{
	char tar[4400], idx[4400];
	*cut = 0;
	archive_paths(state_dir, segment, tar, idx, sizeof(tar));
	int tfd = open_own(tar, O_RDWR, 0);
	if (tfd < 0)
		return errno == ENOENT ? 0 : -1;
	char *buf = NULL;
	size_t len = 0;
	struct cg_buf add;
	cg_buf_init(&add, INDEX_CAP);
	if (cg_file_read(idx, INDEX_CAP, &buf, &len) < 0 && errno != ENOENT) {
		close(tfd);
		return -1;
	}
	/* Whole lines only. */
	while (len > 0 && buf[len - 1] != '\n')
		len--;
	struct stat st;
	int rc = fstat(tfd, &st), stop = 0;
	uint64_t size = rc == 0 ? (uint64_t)st.st_size : 0;
	uint64_t end = rc == 0 ? index_whole_to(tfd, buf, &len, size) : 0;
	if (rc == 0)
		rc = reindex_from(tfd, &end, size, &add, &stop);
	/*
	 * What follows: a torn package (a crash mid-append) goes. Zeros (an
	 * end-of-archive marker, or write-back lost at a power cut) go only
	 * before an append, which must not land after them.
	 */
	bool zeros = rc == 0 && stop == 1 && cg_file_zeros(tfd, end, size);
	if (rc == 0 && end < size && (!zeros || for_append)) {
		*cut = size - end;
		rc = ftruncate(tfd, (off_t)end);
	}
	if (rc == 0 && (*cut || add.len))
		rc = fsync(tfd);
	int e = errno;
	close(tfd);
	if (rc == 0 && (buf || add.len)) {
		int ifd = open_own(idx, O_WRONLY | O_CREAT, 0644);
		rc = ifd < 0 || ftruncate(ifd, (off_t)len) != 0 ||
			     (add.len &&
			      pwrite(ifd, add.p, add.len, (off_t)len) != (ssize_t)add.len) ||
			     fsync(ifd) != 0
			 ? -1
			 : 0;
		e = errno;
		if (ifd >= 0)
			close(ifd);
	}
	free(buf);
	cg_buf_free(&add);
	errno = e;
	return rc;
}

void cg_live_archive_close(struct cg_live_archive *la)
{
	cg_file_release_ahead(la->tar_fd, &la->tar_held);
	cg_file_release_ahead(la->idx_fd, &la->idx_held);
	if (la->tar_fd >= 0)
		close(la->tar_fd);
	if (la->idx_fd >= 0)
		close(la->idx_fd);
	la->tar_fd = la->idx_fd = -1;
	la->segment[0] = '\0';
	la->end = la->idx_end = 0; /* ahead stays: it is the evidence's setting */
	la->appendable = false;
}

static int live_open(struct cg_live_archive *la, const char *state_dir, const char *segment,
		     bool for_append)
{
	char tar[4400], idx[4400], dir[4300];
	cg_live_archive_close(la);
	snprintf(dir, sizeof(dir), "%s/%s", state_dir, CG_ARCHIVE_DIR);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -1;
	uint64_t cut = 0;
	if (cg_live_archive_repair(state_dir, segment, for_append, &cut) < 0)
		return -1;
	if (cut)
		cg_log("warn", NULL, "evidence: %" PRIu64 " torn byte(s) cut off the end of %s",
		       cut, segment);
	archive_paths(state_dir, segment, tar, idx, sizeof(tar));
	la->tar_fd = open_own(tar, O_RDWR | O_CREAT, 0644);
	la->idx_fd = open_own(idx, O_WRONLY | O_APPEND | O_CREAT, 0644);
	off_t end = la->tar_fd >= 0 ? lseek(la->tar_fd, 0, SEEK_END) : -1;
	off_t idx_end = la->idx_fd >= 0 ? lseek(la->idx_fd, 0, SEEK_END) : -1;
	if (idx_end < 0 || end < 0) {
		int e = errno;
		cg_live_archive_close(la);
		errno = e;
		return -1;
	}
	la->end = (uint64_t)end;
	la->idx_end = (uint64_t)idx_end;
	/* What a run killed before its own release held past the ends goes back. */
	la->tar_held = la->end + CG_FILE_HOLD_SWEEP;
	la->idx_held = la->idx_end + CG_FILE_HOLD_SWEEP;
	cg_file_release_ahead(la->tar_fd, &la->tar_held);
	cg_file_release_ahead(la->idx_fd, &la->idx_held);
	la->appendable = for_append;
	snprintf(la->segment, sizeof(la->segment), "%s", segment);
	return 0;
}

static int pwrite_all(int fd, const unsigned char *p, size_t n, uint64_t at)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, (off_t)at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
		at += (uint64_t)w;
	}
	return 0;
}

int cg_live_archive_ready(struct cg_live_archive *la, const char *state_dir, const char *segment,
			  bool for_append)
{
	if (strlen(segment) >= sizeof(la->segment)) {
		errno = EINVAL;
		return -1;
	}
	if (strcmp(la->segment, segment) != 0) {
		if (live_open(la, state_dir, segment, for_append) < 0)
			return -1;
	} else if (for_append && !la->appendable) {
		/*
		 * Opened ahead of an append: zeros at its end stayed; cut them now,
		 * keeping the descriptors and what they hold (a reopen had given the
		 * hold back just as a call filled the disk).
		 */
		uint64_t cut = 0;
		if (cg_live_archive_repair(state_dir, segment, true, &cut) < 0)
			return -1;
		off_t end = lseek(la->tar_fd, 0, SEEK_END);
		off_t idx_end = lseek(la->idx_fd, 0, SEEK_END);
		if (end < 0 || idx_end < 0)
			return -1;
		if (cut) { /* a shorter file lost what was held past its old end */
			cg_log("warn", NULL, "evidence: %" PRIu64 " byte(s) cut off the end of %s",
			       cut, segment);
			la->tar_held = 0;
		}
		la->idx_held = 0; /* the repair rewrote the index to its size: held again below */
		la->end = (uint64_t)end;
		la->idx_end = (uint64_t)idx_end;
		la->appendable = true;
	}
	cg_file_hold_ahead(la->tar_fd, la->end, 0, la->ahead, &la->tar_held);
	cg_file_hold_ahead(la->idx_fd, la->idx_end, 0, la->ahead / 64, &la->idx_held);
	return 0;
}

int cg_live_archive_append(struct cg_live_archive *la, const char *state_dir, const char *segment,
			   const char *trace_id, const struct cg_package *pk)
{
	if (!cg_trace_id_valid(trace_id) ||
	    cg_live_archive_ready(la, state_dir, segment, true) < 0) {
		if (!cg_trace_id_valid(trace_id))
			errno = EINVAL;
		return -1;
	}
	size_t total = 0;
	for (size_t i = 0; i < CG_PACKAGE_N; i++)
		total += BLOCK + padded(pk->len[i]);
	unsigned char *buf = calloc(1, total);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	int64_t now = (int64_t)time(NULL);
	size_t at = 0;
	for (size_t i = 0; i < CG_PACKAGE_N; i++) {
		char name[128];
		snprintf(name, sizeof(name), "%s/%s", trace_id, cg_package_names[i]);
		ustar_header(buf + at, name, pk->len[i], now);
		memcpy(buf + at + BLOCK, pk->data[i], pk->len[i]);
		at += BLOCK + padded(pk->len[i]);
	}
	char line[CG_TRACE_ID_MAX + 32];
	int ln = snprintf(line, sizeof(line), "%s %" PRIu64 "\n", trace_id, la->end);
	/* Space held ahead: a call that filled the disk still gets its package. */
	cg_file_hold_ahead(la->tar_fd, la->end, total, la->ahead, &la->tar_held);
	cg_file_hold_ahead(la->idx_fd, la->idx_end, (size_t)ln, la->ahead / 64, &la->idx_held);
	int rc = pwrite_all(la->tar_fd, buf, total, la->end) == 0 &&
			 cg_write_all(la->idx_fd, line, (size_t)ln) == 0
		     ? 0
		     : -1;
	int e = errno;
	free(buf);
	if (rc == 0) {
		la->end += total;
		la->idx_end += (uint64_t)ln;
		return 0;
	}
	/* Nothing half-written stays: the next package is written over it. */
	(void)!ftruncate(la->tar_fd, (off_t)la->end);
	cg_live_archive_close(la); /* reopened (and repaired) by the next append */
	errno = e;
	return -1;
}
