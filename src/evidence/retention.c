/* SPDX-License-Identifier: MIT */
/*
 * retention — packed trace packages (see retention.h). The tar is written
 * with libarchive and read with the strict ustar reader of live_archive.c
 * (cg_ustar_header), the one the archive walk uses; the index is ours.
 *
 * libarchive is loaded the first time an archive is packed, not at start-up:
 * with the libraries it pulls in (ICU, libxml2, nettle, bzip2, zlib) it is
 * 1.4 MiB of resident pages that a daemon which never packs would carry for
 * nothing.
 */
#include "retention.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "evidence.h"
#include "journal.h"
#include "util.h"

#define SEGMENT_CAP ((size_t)2 << 30)
#define INDEX_CAP   ((size_t)256 << 20)
/* Archives an index holds open at most: the rest are opened per read. */
#define ARCHIVE_FDS_HELD 256

/* The library's ABI name in Debian since 2012 (libarchive13). */
#define LIBARCHIVE_SONAME "libarchive.so.13"
#define LA_FUNCS(X)                                                                                \
	X(archive_entry_free)                                                                      \
	X(archive_entry_new)                                                                       \
	X(archive_entry_pathname)                                                                  \
	X(archive_entry_set_filetype)                                                              \
	X(archive_entry_set_mtime)                                                                 \
	X(archive_entry_set_pathname)                                                              \
	X(archive_entry_set_perm)                                                                  \
	X(archive_entry_set_size)                                                                  \
	X(archive_entry_size)                                                                      \
	X(archive_error_string)                                                                    \
	X(archive_read_data)                                                                       \
	X(archive_read_free)                                                                       \
	X(archive_read_new)                                                                        \
	X(archive_read_next_header)                                                                \
	X(archive_read_open_fd)                                                                    \
	X(archive_read_support_format_tar)                                                         \
	X(archive_write_close)                                                                     \
	X(archive_write_data)                                                                      \
	X(archive_write_free)                                                                      \
	X(archive_write_header)                                                                    \
	X(archive_write_new)                                                                       \
	X(archive_write_open)                                                                      \
	X(archive_write_set_bytes_per_block)                                                       \
	X(archive_write_set_format_ustar)

static struct {
#define LA_MEMBER(f) __typeof__(f) *f;
	LA_FUNCS(LA_MEMBER)
#undef LA_MEMBER
} la;
static pthread_once_t la_once = PTHREAD_ONCE_INIT;
static char la_error[256] = "not loaded";

static void la_load(void)
{
	void *h = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(la_error, sizeof(la_error), "%s", e ? e : "dlopen failed");
		return;
	}
	void *p;
#define LA_RESOLVE(f)                                                                              \
	if (!(p = dlsym(h, #f))) {                                                                 \
		snprintf(la_error, sizeof(la_error), "%s lacks %s", LIBARCHIVE_SONAME, #f);        \
		return;                                                                            \
	}                                                                                          \
	memcpy(&la.f, &p, sizeof(p));
	LA_FUNCS(LA_RESOLVE)
#undef LA_RESOLVE
	la_error[0] = '\0';
}

/* libarchive, loaded once; false (errno ENOSYS, la_error says why) when it cannot be. */
static bool la_ready(void)
{
	(void)pthread_once(&la_once, la_load);
	if (la_error[0] == '\0')
		return true;
	errno = ENOSYS;
	return false;
}

void cg_package_files_free(struct cg_package_files *pf)
{
	for (size_t i = 0; i < pf->n; i++)
		free(pf->data[i]);
	memset(pf, 0, sizeof(*pf));
}

const char *cg_package_file(const struct cg_package_files *pf, const char *name, size_t *len)
{
	for (size_t i = 0; i < pf->n; i++)
		if (strcmp(pf->name[i], name) == 0) {
			*len = pf->len[i];
			return pf->data[i];
		}
	*len = 0;
	return NULL;
}

/* Add one member; the name must fit (package files have short names). */
static int pf_add(struct cg_package_files *pf, const char *name, char *data, size_t len)
{
	if (pf->n == CG_PACKAGE_FILES || strlen(name) >= sizeof(pf->name[0])) {
		pf->extra++;
		free(data);
		return 0;
	}
	snprintf(pf->name[pf->n], sizeof(pf->name[0]), "%s", name);
	pf->data[pf->n] = data;
	pf->len[pf->n] = len;
	pf->n++;
	return 0;
}

/* traces/<id>/, every non-hidden file. 0, or -1 with errno (ENOENT: no directory). */
static int load_dir(const char *state_dir, const char *trace_id, struct cg_package_files *pf)
{
	char dir[4300];
	snprintf(dir, sizeof(dir), "%s/traces/%s", state_dir, trace_id);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	snprintf(pf->where, sizeof(pf->where), "traces/%s", trace_id);
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char *p = NULL;
		size_t len = 0;
		if (cg_file_read_at(dirfd(d), e->d_name, CG_PACKAGE_FILE_CAP, &p, &len) < 0)
			p = NULL; /* unreadable: present by name, without bytes */
		rc = pf_add(pf, e->d_name, p, len);
	}
	closedir(d);
	return rc;
}

/* ---- the index -------------------------------------------------------------------- */

struct ix_entry {
	char archive[40]; /* the tar's file name */
	uint64_t off;
	uint64_t span; /* to the index's next package in the tar, or its end; 0: unknown */
	int fd;	       /* the tar, held open by the index (its ix_archive's); -1: open it */
	bool repeated; /* another index line names the trace too: ambiguous */
};

/* One archive as the index saw it: its tar's size, taken before its .idx was read. */
struct ix_archive {
	char tar[40];
	int64_t size; /* -1: no tar */
	bool has_idx;
	int fd; /* the tar, opened as its size was taken; -1: not held open */
};

struct cg_archive_index {
	struct cg_smap *by_trace;
	struct ix_archive *archives;
	size_t n_archives;
	size_t repeats; /* index lines naming a trace already named */
	char first_repeat[CG_TRACE_ID_MAX + 1];
	size_t odd; /* *.tar or *.idx files whose names no archive has: no reader reads them */
	char first_odd[64];
};

static bool archive_name(const char *s, const char *ext)
{
	size_t n = strlen(s), e = strlen(ext);
	return n > e && n < 40 && strcmp(s + n - e, ext) == 0 && s[0] != '.';
}

/* One index line "ID OFFSET" (NUL-terminated, no newline) into id and *off. */
static bool index_line(char *line, char **id, uint64_t *off)
{
	char *sp = strchr(line, ' ');
	if (!sp)
		return false;
	*sp = '\0';
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(sp + 1, &end, 10);
	if (!cg_trace_id_valid(line) || errno || !end || *end || sp[1] == '-')
		return false;
	*id = line;
	*off = v;
	return true;
}

static int index_add_file(struct cg_archive_index *ix, const char *dir, const char *name,
			  int64_t tar_size, int tar_fd)
{
	char path[4400], tar[40];
	struct ix_entry *prev = NULL; /* this file's previous line's, to size its span */
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tar, sizeof(tar), "%.*s.tar", (int)(strlen(name) - 4), name);
	char *buf = NULL;
	size_t len = 0;
	if (cg_file_read(path, INDEX_CAP, &buf, &len) < 0)
		return errno == ENOENT ? 0 : -1;
	int rc = 0;
	for (char *line = buf, *nl; rc == 0 && line < buf + len; line = nl + 1) {
		nl = memchr(line, '\n', (size_t)(buf + len - line));
		if (!nl)
			break;
		*nl = '\0';
		char *id;
		uint64_t off;
		if (!index_line(line, &id, &off))
			continue;
		struct ix_entry *seen = cg_smap_get(ix->by_trace, id);
		if (seen) {
			/*
			 * A repeat hides a package, never passes one: replay --all
			 * reports it, and no reader takes either copy (EBADMSG).
			 */
			seen->repeated = true;
			if (ix->repeats++ == 0)
				snprintf(ix->first_repeat, sizeof(ix->first_repeat), "%s", id);
			continue;
		}
		struct ix_entry *x = calloc(1, sizeof(*x));
		if (!x) {
			rc = -1;
			break;
		}
		snprintf(x->archive, sizeof(x->archive), "%s", tar);
		x->off = off;
		x->fd = tar_fd;
		if (prev && off > prev->off)
			prev->span = off - prev->off;
		if (cg_smap_put(ix->by_trace, id, x) < 0) {
			free(x);
			rc = -1;
		} else {
			prev = x;
		}
	}
	if (prev && tar_size > 0 && (uint64_t)tar_size > prev->off)
		prev->span = (uint64_t)tar_size - prev->off;
	free(buf);
	return rc;
}

/* Note archive base (a file name without .tar/.idx): its tar's size now, before its index. */
static int note_archive(struct cg_archive_index *ix, int dfd, const char *base, bool has_idx,
			bool hold)
{
	for (size_t i = 0; i < ix->n_archives; i++)
		if (strncmp(ix->archives[i].tar, base, strlen(base)) == 0 &&
		    strcmp(ix->archives[i].tar + strlen(base), ".tar") == 0) {
			ix->archives[i].has_idx |= has_idx;
			return 0;
		}
	struct ix_archive *v = realloc(ix->archives, (ix->n_archives + 1) * sizeof(*v));
	if (!v)
		return -1;
	ix->archives = v;
	struct ix_archive *a = &v[ix->n_archives++];
	snprintf(a->tar, sizeof(a->tar), "%s.tar", base);
	/*
	 * Held open while the index lives (up to ARCHIVE_FDS_HELD of them), so
	 * that reading each package costs no open of its own; the rest are
	 * opened per read.
	 */
	struct stat st;
	off_t size = -1;
	a->fd = hold && ix->n_archives <= ARCHIVE_FDS_HELD
		    ? cg_file_open_regular(dfd, a->tar, &size)
		    : -1;
	if (a->fd < 0)
		a->size = fstatat(dfd, a->tar, &st, 0) == 0 ? (int64_t)st.st_size : -1;
	else
		a->size = (int64_t)size;
	a->has_idx = has_idx;
	return 0;
}

static int archive_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ix_archive *)a)->tar, ((const struct ix_archive *)b)->tar);
}

static struct cg_archive_index *index_load(const char *state_dir, bool hold)
{
	struct cg_archive_index *ix = calloc(1, sizeof(*ix));
	if (!ix || !(ix->by_trace = cg_smap_new())) {
		free(ix);
		errno = ENOMEM;
		return NULL;
	}
	char dir[4300];
	snprintf(dir, sizeof(dir), "%s/%s", state_dir, CG_ARCHIVE_DIR);
	DIR *d = opendir(dir);
	if (!d)
		return ix;
	/*
	 * Every tar's size first, then the indexes: a package is appended
	 * before its index line, so each line read names bytes within the size
	 * noted (cg_archive_audit walks that far, no further).
	 */
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d))) {
		bool tar = archive_name(e->d_name, ".tar"), idx = archive_name(e->d_name, ".idx");
		char base[40];
		size_t nl = strlen(e->d_name);
		if (!tar && !idx && nl > 4 &&
		    (strcmp(e->d_name + nl - 4, ".tar") == 0 ||
		     strcmp(e->d_name + nl - 4, ".idx") == 0) &&
		    ix->odd++ == 0)
			snprintf(ix->first_odd, sizeof(ix->first_odd), "%s", e->d_name);
		if (tar || idx) {
			snprintf(base, sizeof(base), "%.*s", (int)(strlen(e->d_name) - 4),
				 e->d_name);
			rc = note_archive(ix, dirfd(d), base, idx, hold);
		}
	}
	/* In name order, as index_find reads them: which line names a trace first is fixed. */
	if (rc == 0 && ix->n_archives > 1)
		qsort(ix->archives, ix->n_archives, sizeof(*ix->archives), archive_cmp);
	for (size_t i = 0; rc == 0 && i < ix->n_archives; i++)
		if (ix->archives[i].has_idx) {
			char idx[48];
			snprintf(idx, sizeof(idx), "%.*s.idx",
				 (int)(strlen(ix->archives[i].tar) - 4), ix->archives[i].tar);
			rc = index_add_file(ix, dir, idx, ix->archives[i].size, ix->archives[i].fd);
		}
	int saved = errno;
	closedir(d);
	if (rc < 0) {
		cg_archive_index_free(ix);
		errno = saved ? saved : ENOMEM; /* an index that is not a regular file: EINVAL */
		return NULL;
	}
	return ix;
}

struct cg_archive_index *cg_archive_index_load(const char *state_dir)
{
	return index_load(state_dir, false);
}

struct cg_archive_index *cg_archive_index_load_held(const char *state_dir)
{
	return index_load(state_dir, true);
}

bool cg_archive_index_has(const struct cg_archive_index *ix, const char *trace_id)
{
	return ix && cg_smap_get(ix->by_trace, trace_id) != NULL;
}

void cg_archive_index_free(struct cg_archive_index *ix)
{
	if (!ix)
		return;
	cg_smap_free(ix->by_trace, free);
	for (size_t i = 0; i < ix->n_archives; i++)
		if (ix->archives[i].fd >= 0)
			close(ix->archives[i].fd);
	free(ix->archives);
	free(ix);
}

/*
 * The first index line naming trace_id, over every index, without loading
 * them all (a reader of one trace: callgate verdict, the socket's actions):
 * one index file in memory at a time. 0, or -1 with errno (ENOENT: none).
 */
static int index_find(const char *state_dir, const char *trace_id, struct ix_entry *out)
{
	char dir[4300];
	snprintf(dir, sizeof(dir), "%s/%s", state_dir, CG_ARCHIVE_DIR);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	/* Every index, in name order (as cg_archive_index_load): a second line naming it is EBADMSG. */
	struct dirent **names = NULL;
	int n = scandirat(dfd, ".", &names, NULL, alphasort);
	int found = 0, saved = n < 0 ? errno : ENOENT;
	size_t idlen = strlen(trace_id);
	for (int k = 0; k < n && found < 2 && (saved == ENOENT || saved == 0); k++) {
		const char *name = names[k]->d_name;
		if (!archive_name(name, ".idx"))
			continue;
		char *buf = NULL;
		size_t len = 0;
		if (cg_file_read_at(dfd, name, INDEX_CAP, &buf, &len) < 0) {
			if (errno != ENOENT)
				saved = errno;
			continue;
		}
		for (char *p = buf; p < buf + len && found < 2;) {
			char *hit = memmem(p, (size_t)(buf + len - p), trace_id, idlen);
			if (!hit)
				break;
			char *nl = memchr(hit, '\n', (size_t)(buf + len - hit));
			p = hit + idlen;
			if (!nl || (hit > buf && hit[-1] != '\n') || hit[idlen] != ' ')
				continue; /* not a whole line's id (or the unfinished last line) */
			*nl = '\0';
			char *id;
			uint64_t off;
			if (index_line(hit, &id, &off) && strcmp(id, trace_id) == 0 &&
			    found++ == 0) {
				snprintf(out->archive, sizeof(out->archive), "%.*s.tar",
					 (int)(strlen(name) - 4), name);
				out->off = off;
			}
			p = nl + 1;
		}
		free(buf);
	}
	for (int k = 0; k < n; k++)
		free(names[k]);
	free(names);
	close(dfd);
	if (found == 1 && (saved == ENOENT || saved == 0))
		return 0;
	errno = found > 1 ? EBADMSG : saved ? saved : ENOENT;
	return -1;
}

/* ---- replay --all: each archive as a whole ---------------------------------------- */

/* A tar read in windows: the header blocks of a walk cost one read per window, not each. */
struct window {
	int fd;
	uint64_t at;
	size_t len;
	unsigned char b[128 * 1024];
};

/* The 512 bytes at pos (refilling the window when they are not in it), or NULL. */
static const unsigned char *window_block(struct window *w, uint64_t pos)
{
	if (pos < w->at || pos + 512 > w->at + w->len) {
		ssize_t n = pread(w->fd, w->b, sizeof(w->b), (off_t)pos);
		if (n < 512)
			return NULL;
		w->at = pos;
		w->len = (size_t)n;
	}
	return w->b + (pos - w->at);
}

struct audit {
	const struct cg_archive_index *ix;
	bool (*known)(const char *trace_id, void *arg);
	void *arg;
	bool live;
	json_t *diff;
	struct cg_smap *seen; /* trace ids with a package in some archive */
};

/*
 * A package of id begins at pos in archive a: the journal must hold id, no
 * archive may hold a second package of it. Is it indexed there, at pos?
 */
static bool package_begins(struct audit *au, const struct ix_archive *a, const char *where,
			   const char *id, uint64_t pos)
{
	if (!au->known(id, au->arg))
		cg_diff_add(au->diff, "trace_not_in_journal", where, 0, 0, NULL, id,
			    "a package in the archive with no events in the journal");
	if (cg_smap_get(au->seen, id))
		cg_diff_add(au->diff, "package_repeated", where, 0, 0, NULL, id,
			    "a second package of the same trace");
	else if (cg_smap_put(au->seen, id, (void *)1) < 0)
		cg_diff_add(au->diff, "archive_unreadable", where, 0, 0, NULL, "ENOMEM",
			    "out of memory while reading the archive");
	const struct ix_entry *x = cg_smap_get(au->ix->by_trace, id);
	return x && strcmp(x->archive, a->tar) == 0 && x->off == pos;
}

static void audit_archive(struct audit *au, const char *state_dir, const struct ix_archive *a)
{
	char path[4400], where[120], name[128], id[CG_TRACE_ID_MAX + 1], at[64];
	snprintf(path, sizeof(path), "%s/%s/%s", state_dir, CG_ARCHIVE_DIR, a->tar);
	snprintf(where, sizeof(where), "%s/%s", CG_ARCHIVE_DIR, a->tar);
	struct window *w = malloc(sizeof(*w));
	int fd = !w ? -1 : a->fd >= 0 ? a->fd : cg_file_open_regular(AT_FDCWD, path, NULL);
	if (fd < 0) {
		int e = w ? errno : ENOMEM;
		if (e != ENOENT || !au->live) /* packed away meanwhile, under a live daemon */
			cg_diff_add(au->diff, "archive_unreadable", where, 0, 0, NULL,
				    cg_errno_name(e), "the archive cannot be opened");
		free(w);
		return;
	}
	w->fd = fd;
	w->at = w->len = 0;
	uint64_t size = (uint64_t)a->size, pos = 0, next = 0, first_hidden = 0;
	size_t hidden = 0, pending = 0;
	uint64_t first_pending = 0;
	char cur[CG_TRACE_ID_MAX + 1] = "";
	unsigned have = 0; /* the current package's files seen */
	while (pos < size) {
		int r;
		if (pos + 512 > size) { /* less than a block: zeros are padding, as to tar */
			r = cg_file_zeros(fd, pos, size) ? 1 : -2;
		} else {
			const unsigned char *h = window_block(w, pos);
			r = h ? cg_ustar_header(h, pos, size, name, sizeof(name), &next) : -1;
		}
		snprintf(at, sizeof(at), "offset %" PRIu64, pos);
		if (r == 1) {
			if (!cg_file_zeros(fd, pos, size))
				cg_diff_add(au->diff, "archive_layout", where, 0, 0, "only zeros",
					    at, "bytes after the archive's end-of-archive blocks");
			break;
		}
		if (r == -2 && au->live) {
			/* Appended as the size was taken? Then it is whole now. */
			struct stat now;
			uint64_t whole = 0;
			if (fstat(fd, &now) == 0 &&
			    cg_ustar_member(fd, pos, (uint64_t)now.st_size, name, sizeof(name),
					    &whole) == 0)
				break;
		}
		if (r < 0) {
			cg_diff_add(au->diff, "archive_layout", where, 0, 0, "a tar member", at,
				    r == -2
					? "the archive ends inside a member"
					: "not a member a package writer makes (ustar, a regular "
					  "file, its checksum)");
			break;
		}
		int file = cg_package_member(name, id, sizeof(id));
		if (file < 0) {
			cg_diff_add(au->diff, "package_files", where, 0, 0, NULL, name,
				    "a member that is not part of a trace package");
		} else if (strcmp(id, cur) != 0) { /* a package begins */
			snprintf(cur, sizeof(cur), "%s", id);
			have = 1u << file;
			if (package_begins(au, a, where, id, pos)) {
				/* Packages before an indexed one were not in progress. */
				if (pending && !hidden)
					first_hidden = first_pending;
				hidden += pending;
				pending = 0;
			} else if (pending++ == 0) {
				first_pending = pos;
			}
		} else if (have & (1u << file)) {
			cg_diff_add(au->diff, "package_files", where, 0, 0, NULL, name,
				    "a member that appears twice in one package of the archive");
		} else {
			have |= 1u << file;
		}
		pos = next;
	}
	/* Under a live daemon the last packages may be appended before their index lines. */
	if (pending && !au->live) {
		if (!hidden)
			first_hidden = first_pending;
		hidden += pending;
	}
	if (hidden) {
		char n[80];
		snprintf(n, sizeof(n), "%zu package(s), the first at offset %" PRIu64, hidden,
			 first_hidden);
		cg_diff_add(au->diff, "archive_unindexed", where, 0, 0, "every package indexed", n,
			    "packages no reader sees (their index lines are missing)");
	}
	if (fd != a->fd)
		close(fd);
	free(w);
}

/* An index line whose trace the journal does not hold: a reader would show its package. */
static void audit_line(const char *trace_id, void *entry, void *arg)
{
	struct audit *au = arg;
	const struct ix_entry *x = entry;
	if (!au->known(trace_id, au->arg)) {
		char where[120];
		snprintf(where, sizeof(where), "%s/%.*s.idx", CG_ARCHIVE_DIR,
			 (int)(strlen(x->archive) - 4), x->archive);
		cg_diff_add(au->diff, "trace_not_in_journal", where, 0, 0, NULL, trace_id,
			    "an index line naming a trace the journal does not hold");
	}
}

void cg_archive_audit(const char *state_dir, const struct cg_archive_index *ix,
		      bool (*known)(const char *trace_id, void *arg), void *arg, bool live,
		      json_t *diff)
{
	struct audit au = { ix, known, arg, live, diff, cg_smap_new() };
	if (!au.seen) {
		cg_diff_add(diff, "archive_unreadable", CG_ARCHIVE_DIR, 0, 0, NULL, "ENOMEM",
			    "out of memory while reading the archives");
		return;
	}
	if (ix->odd) {
		char n[120];
		snprintf(n, sizeof(n), "%zu file(s), the first %s", ix->odd, ix->first_odd);
		cg_diff_add(diff, "archive_layout", CG_ARCHIVE_DIR, 0, 0, NULL, n,
			    "a .tar or .idx no reader reads (not an archive's name), which tar "
			    "would still show");
	}
	if (ix->repeats) {
		char n[120];
		snprintf(n, sizeof(n), "%zu line(s), the first naming %s", ix->repeats,
			 ix->first_repeat);
		cg_diff_add(diff, "archive_index_repeat", CG_ARCHIVE_DIR, 0, 0, NULL, n,
			    "index lines naming a trace another line already names");
	}
	cg_smap_each(ix->by_trace, audit_line, &au);
	/* Every tar there is, a FIFO or other non-regular file included (reported). */
	for (size_t i = 0; i < ix->n_archives; i++)
		if (ix->archives[i].size > 0 ||
		    (ix->archives[i].size == 0 && ix->archives[i].fd < 0))
			audit_archive(&au, state_dir, &ix->archives[i]);
	cg_smap_free(au.seen, NULL);
}

/* ---- reading a trace's members ---------------------------------------------------- */

/*
 * n bytes at pos into dst: from the window win (win_len bytes read at
 * win_at) when they are all in it, else read. 0, or -1 with errno.
 */
static int bytes_at(int fd, const unsigned char *win, uint64_t win_at, size_t win_len, uint64_t pos,
		    void *dst, size_t n)
{
	if (pos >= win_at && pos - win_at <= win_len && n <= win_len - (pos - win_at)) {
		memcpy(dst, win + (pos - win_at), n);
		return 0;
	}
	ssize_t got = pread(fd, dst, n, (off_t)pos);
	if (got == (ssize_t)n)
		return 0;
	if (got >= 0)
		errno = EIO;
	return -1;
}

/*
 * trace_id's members from x->off on, read as the archive walk reads them
 * (cg_ustar_header: plain ustar, strictly written numbers), so that what
 * replay and verdict check is what the walk vouched for. A package is read
 * with one pread when it fits the window: its span in the index and the
 * next header (where the walk sees the next trace), or PACKAGE_WINDOW.
 */
#define PACKAGE_WINDOW ((size_t)64 << 10)
static int load_archived(const char *state_dir, const struct ix_entry *x, const char *trace_id,
			 struct cg_package_files *pf)
{
	char path[4400], prefix[CG_TRACE_ID_MAX + 2];
	snprintf(path, sizeof(path), "%s/%s/%s", state_dir, CG_ARCHIVE_DIR, x->archive);
	snprintf(prefix, sizeof(prefix), "%s/", trace_id);
	size_t plen = strlen(prefix);
	int fd = x->fd >= 0 ? x->fd : cg_file_open_regular(AT_FDCWD, path, NULL);
	if (fd < 0)
		return -1;
	struct stat st;
	size_t window =
	    x->span && x->span <= PACKAGE_WINDOW - 512 ? (size_t)x->span + 512 : PACKAGE_WINDOW;
	unsigned char *win = malloc(window);
	if (!win || fstat(fd, &st) != 0) {
		int e = win ? errno : ENOMEM;
		free(win);
		if (fd != x->fd)
			close(fd);
		errno = e;
		return -1;
	}
	uint64_t size = (uint64_t)st.st_size, pos = x->off;
	ssize_t got = pos < size ? pread(fd, win, window, (off_t)pos) : 0;
	size_t win_len = got > 0 ? (size_t)got : 0;
	snprintf(pf->where, sizeof(pf->where), "%s/%s:%s", CG_ARCHIVE_DIR, x->archive, trace_id);
	pf->archived = true;
	int rc = 0;
	size_t members = 0;
	for (;;) {
		unsigned char h[512];
		char name[128];
		uint64_t next = 0;
		if (pos + sizeof(h) > size ||
		    bytes_at(fd, win, x->off, win_len, pos, h, sizeof(h)) != 0 ||
		    cg_ustar_header(h, pos, size, name, sizeof(name), &next) != 0 ||
		    strncmp(name, prefix, plen) != 0)
			break; /* the end, what the walk reports, or the next trace's members */
		members++;
		uint64_t len = cg_ustar_size(h);
		if (len > CG_PACKAGE_FILE_CAP) {
			rc = pf_add(pf, name + plen, NULL, 0);
		} else {
			char *p = malloc((size_t)len + 1);
			if (p && bytes_at(fd, win, x->off, win_len, pos + sizeof(h), p,
					  (size_t)len) == 0) {
				p[len] = '\0';
				rc = pf_add(pf, name + plen, p, (size_t)len);
			} else {
				free(p);
				rc = pf_add(pf, name + plen, NULL, 0);
			}
		}
		if (rc != 0)
			break;
		pos = next;
	}
	free(win);
	if (fd != x->fd)
		close(fd);
	if (rc == 0 && members == 0) {
		errno = ENOENT; /* the index points at another trace */
		return -1;
	}
	return rc;
}

/* load_archived, leaving pf empty when it fails. */
static int load_entry(const char *state_dir, const struct ix_entry *x, const char *trace_id,
		      struct cg_package_files *pf)
{
	if (x->repeated) {
		errno = EBADMSG; /* two index lines name it: which copy is the trace's? */
		return -1;
	}
	int rc = load_archived(state_dir, x, trace_id, pf);
	if (rc < 0) {
		int e = errno;
		cg_package_files_free(pf);
		errno = e;
	}
	return rc;
}

int cg_package_load(const char *state_dir, const struct cg_archive_index *ix, const char *trace_id,
		    struct cg_package_files *pf)
{
	memset(pf, 0, sizeof(*pf));
	/* The journal's own events have no package: one under their name is not one. */
	if (!cg_trace_id_valid(trace_id) || strcmp(trace_id, CG_JOURNAL_TRACE) == 0) {
		errno = EINVAL;
		return -1;
	}
	if (load_dir(state_dir, trace_id, pf) == 0)
		return 0;
	if (errno != ENOENT)
		return -1;
	/* replay --all holds every index (ix); one trace's reader looks its line up. */
	if (ix)
		return cg_package_load_archived(state_dir, ix, trace_id, pf);
	struct ix_entry x = { .fd = -1 };
	return index_find(state_dir, trace_id, &x) < 0 ? -1
						       : load_entry(state_dir, &x, trace_id, pf);
}

int cg_package_load_archived(const char *state_dir, const struct cg_archive_index *ix,
			     const char *trace_id, struct cg_package_files *pf)
{
	memset(pf, 0, sizeof(*pf));
	const struct ix_entry *x = ix ? cg_smap_get(ix->by_trace, trace_id) : NULL;
	if (!x) {
		errno = ENOENT;
		return -1;
	}
	return load_entry(state_dir, x, trace_id, pf);
}

int cg_package_read(const char *state_dir, const char *trace_id, const char *file, size_t cap,
		    char **p, size_t *len)
{
	struct cg_package_files pf;
	if (cg_package_load(state_dir, NULL, trace_id, &pf) < 0)
		return -1;
	size_t n = 0;
	const char *d = cg_package_file(&pf, file, &n);
	int rc = -1;
	if (!d)
		errno = ENOENT;
	else if (n > cap)
		errno = EFBIG;
	else if (!(*p = malloc(n + 1)))
		errno = ENOMEM;
	else {
		memcpy(*p, d, n);
		(*p)[n] = '\0';
		*len = n;
		rc = 0;
	}
	int e = errno;
	cg_package_files_free(&pf);
	errno = e;
	return rc;
}

bool cg_archive_exists(const char *state_dir, const char *segment)
{
	char path[4400];
	size_t n = strlen(segment);
	const char *dot = strrchr(segment, '.');
	snprintf(path, sizeof(path), "%s/%s/%.*s.idx", state_dir, CG_ARCHIVE_DIR,
		 (int)(dot ? (size_t)(dot - segment) : n), segment);
	struct stat st;
	return stat(path, &st) == 0;
}

/* ---- packing ---------------------------------------------------------------------- */

/* Renamed away before removal: readers skip names beginning with a dot. */
#define PACKED_PREFIX ".packed-"

/* Remove a directory of plain files (a package's). */
static void remove_flat_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			(void)unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	(void)rmdir(path);
}

void cg_archive_sweep(const char *state_dir)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/traces", state_dir);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, PACKED_PREFIX, strlen(PACKED_PREFIX)) != 0)
			continue;
		char path[4500];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		remove_flat_dir(path);
	}
	if (d)
		closedir(d);
}

struct counter {
	int fd;
	uint64_t bytes;
};

static la_ssize_t count_write(struct archive *a, void *arg, const void *buf, size_t n)
{
	struct counter *c = arg;
	(void)a;
	if (cg_write_all(c->fd, buf, n) < 0)
		return -1;
	c->bytes += n;
	return (la_ssize_t)n;
}

/* The traces whose seal, refusal or incomplete marker is in the segment, in order. */
static char **sealed_in(const char *buf, size_t len, size_t *n_out)
{
	size_t n = 0, cap = 0;
	char **v = NULL;
	for (size_t pos = 0; pos < len;) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - (buf + pos)) + 1 : len - pos;
		struct cg_evline o;
		const char *check;
		char w[200];
		if (nl && cg_evline_parse(buf + pos, ll, &o, &check, w, sizeof(w)) == 0 &&
		    cg_event_ends_trace(o.type) && strcmp(o.trace, CG_JOURNAL_TRACE) != 0) {
			if (n == cap) {
				cap = cap ? 2 * cap : 256;
				char **q = realloc(v, cap * sizeof(*q));
				if (!q)
					goto oom;
				v = q;
			}
			if (!(v[n] = strdup(o.trace)))
				goto oom;
			n++;
		}
		pos += ll;
	}
	*n_out = n;
	return v ? v : calloc(1, sizeof(char *));
oom:
	cg_strv_free(v, n);
	errno = ENOMEM;
	return NULL;
}

static int write_trace(struct archive *a, const struct cg_package_files *pf, const char *trace,
		       time_t now)
{
	for (size_t i = 0; i < pf->n; i++) {
		if (!pf->data[i])
			continue;
		char name[CG_TRACE_ID_MAX + 80];
		snprintf(name, sizeof(name), "%s/%s", trace, pf->name[i]);
		struct archive_entry *en = la.archive_entry_new();
		if (!en)
			return -1;
		la.archive_entry_set_pathname(en, name);
		la.archive_entry_set_filetype(en, AE_IFREG);
		la.archive_entry_set_perm(en, 0644);
		la.archive_entry_set_size(en, (la_int64_t)pf->len[i]);
		la.archive_entry_set_mtime(en, now, 0);
		int rc = la.archive_write_header(a, en);
		la.archive_entry_free(en);
		if (rc != ARCHIVE_OK ||
		    la.archive_write_data(a, pf->data[i], pf->len[i]) != (la_ssize_t)pf->len[i])
			return -1;
	}
	return 0;
}

int cg_archive_pack_segment(const char *state_dir, const char *segment, size_t *packed, char *why,
			    size_t why_len)
{
	char seg[4400], dir[4300], tar_tmp[4400], idx_tmp[4400], tar[4400], idx[4400];
	const char *dot = strrchr(segment, '.');
	int base = (int)(dot ? (size_t)(dot - segment) : strlen(segment));
	*packed = 0;
	snprintf(seg, sizeof(seg), "%s/journal/%s", state_dir, segment);
	snprintf(dir, sizeof(dir), "%s/%s", state_dir, CG_ARCHIVE_DIR);
	snprintf(tar, sizeof(tar), "%s/%.*s.tar", dir, base, segment);
	snprintf(idx, sizeof(idx), "%s/%.*s.idx", dir, base, segment);
	snprintf(tar_tmp, sizeof(tar_tmp), "%s/.%.*s.tar.tmp", dir, base, segment);
	snprintf(idx_tmp, sizeof(idx_tmp), "%s/.%.*s.idx.tmp", dir, base, segment);
	if (!la_ready()) {
		snprintf(why, why_len, "cannot load libarchive: %s", la_error);
		return -1;
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		snprintf(why, why_len, "cannot create %s: %s", CG_ARCHIVE_DIR, strerror(errno));
		return -1;
	}
	char *buf = NULL;
	size_t len = 0, n = 0;
	if (cg_file_read(seg, SEGMENT_CAP, &buf, &len) < 0) {
		snprintf(why, why_len, "cannot read %s: %s", segment, strerror(errno));
		return -1;
	}
	char **ids = sealed_in(buf, len, &n);
	free(buf);
	if (!ids) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	struct counter c = { open(tar_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), 0 };
	FILE *ixf = fopen(idx_tmp, "we");
	struct archive *a = la.archive_write_new();
	bool *done = calloc(n ? n : 1, sizeof(bool));
	int rc = -1;
	if (c.fd < 0 || !ixf || !a || !done || la.archive_write_set_format_ustar(a) != ARCHIVE_OK ||
	    la.archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK ||
	    la.archive_write_open(a, &c, NULL, count_write, NULL) != ARCHIVE_OK) {
		snprintf(why, why_len, "cannot start the archive: %s",
			 a && la.archive_error_string(a) ? la.archive_error_string(a)
							 : strerror(errno));
		goto out;
	}
	time_t now = time(NULL);
	for (size_t i = 0; i < n; i++) {
		struct cg_package_files pf;
		memset(&pf, 0, sizeof(pf));
		if (load_dir(state_dir, ids[i], &pf) < 0)
			continue; /* no directory: nothing to pack (replay reports it) */
		/* The last entry's padding is written with the next header: round up. */
		fprintf(ixf, "%s %" PRIu64 "\n", ids[i], (c.bytes + 511) & ~(uint64_t)511);
		int w = write_trace(a, &pf, ids[i], now);
		cg_package_files_free(&pf);
		if (w < 0) {
			snprintf(why, why_len, "cannot write %s: %s", ids[i],
				 la.archive_error_string(a) ? la.archive_error_string(a) : "?");
			goto out;
		}
		done[i] = true;
		(*packed)++;
	}
	if (la.archive_write_close(a) != ARCHIVE_OK || fsync(c.fd) != 0 || fflush(ixf) != 0 ||
	    fsync(fileno(ixf)) != 0) {
		snprintf(why, why_len, "cannot finish the archive: %s", strerror(errno));
		goto out;
	}
	/* The tar first, then its index: an index never names a tar that is not there. */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || rename(tar_tmp, tar) != 0 || rename(idx_tmp, idx) != 0 || fsync(dfd) != 0) {
		snprintf(why, why_len, "cannot put the archive in place: %s", strerror(errno));
		if (dfd >= 0)
			close(dfd);
		goto out;
	}
	close(dfd);
	rc = 0;
	/*
	 * Only now that the archive is durable do the directories go, each first
	 * renamed out of the readers' way in one step: a reader finds the whole
	 * directory or, once it is gone, the archive; never a directory half
	 * emptied (which would read as a package missing files), not even after a
	 * crash here (cg_archive_sweep removes what is left).
	 */
	for (size_t i = 0; i < n; i++) {
		if (!done[i])
			continue;
		char from[4400], td[4400];
		snprintf(from, sizeof(from), "%s/traces/%s", state_dir, ids[i]);
		snprintf(td, sizeof(td), "%s/traces/%s%s", state_dir, PACKED_PREFIX, ids[i]);
		if (rename(from, td) == 0)
			remove_flat_dir(td);
	}
out:
	if (a)
		la.archive_write_free(a);
	if (c.fd >= 0)
		close(c.fd);
	if (ixf)
		fclose(ixf);
	if (rc < 0) {
		(void)unlink(tar_tmp);
		(void)unlink(idx_tmp);
		*packed = 0;
	}
	free(done);
	cg_strv_free(ids, n);
	return rc;
}
