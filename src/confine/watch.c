/* SPDX-License-Identifier: MIT */
/*
 * watch — the changes a call made in its write trees, from fanotify (see
 * watch.h). A file written through a shared mapping makes no FAN_MODIFY;
 * its close for writing (at the latest when the process exits) names it.
 * One group per call, a file-system mark per distinct file system,
 * and a thread that drains the kernel's queue while the call runs, so that
 * a call making many files (an npm install) does not overflow it. Records
 * are packed into one buffer and resolved to paths once, at the stop: a
 * directory by its handle (open_by_handle_at), so a directory renamed
 * during the call is found where it is now.
 */
#include "watch.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define WATCH_FS_MAX	 16
#define WATCH_BYTES_MAX	 (16u << 20) /* records kept: past it, the watch is incomplete */
#define WATCH_READ_BYTES 65536
#define WATCH_MOVED_MAX	 65536 /* directories moved in, each by name: past it, incomplete */
#define WATCH_EVENTS                                                                               \
	(FAN_CREATE | FAN_MOVED_TO | FAN_MODIFY | FAN_CLOSE_WRITE | FAN_ATTRIB | FAN_ONDIR)

/* One record: this header, the handle's bytes, the name and its NUL, padded to 8. */
struct rec {
	uint32_t len;
	uint32_t mask;
	uint16_t fs;
	uint16_t hlen;
	int32_t htype;
	unsigned char data[];
};

struct fs {
	int mount_fd; /* a directory in it, for open_by_handle_at */
	int fsid[2];
};

struct cg_watch {
	const char *const *names; /* recorded by name; any other, once per directory */
	/*
	 * The records made, by key (file system, handle, name; and for a name
	 * judged, the kind of change): a hash seeded at random per watch, each
	 * slot the record's offset in buf + 1, the key compared on a match.
	 */
	struct seen {
		uint64_t hash;
		size_t at; /* 0: free */
	} * seen;
	size_t n_seen, cap_seen;
	uint64_t seed;
	int fan, stop;
	pid_t self;
	struct fs fs[WATCH_FS_MAX];
	size_t n_fs;
	bool lost; /* something may not have been recorded */
	bool threaded, stopped;
	size_t bytes_max; /* WATCH_BYTES_MAX, or the test-only knob's */
	size_t n_moved;	  /* directories moved in, recorded by name */
	_Atomic bool stopping;
	unsigned char *rbuf; /* WATCH_READ_BYTES, for one reader at a time */
	pthread_t thread;
	unsigned char *buf;
	size_t len, cap;
	struct cg_watch_change *changes;
	size_t n_changes;
	char **dirs;
	size_t n_dirs;
};

static unsigned mask_of(uint64_t m)
{
	return ((m & (FAN_CREATE | FAN_MOVED_TO)) ? CG_WATCH_MADE : 0) |
	       ((m & (FAN_MODIFY | FAN_CLOSE_WRITE | FAN_ATTRIB)) ? CG_WATCH_WRITTEN : 0) |
	       ((m & FAN_ONDIR) ? CG_WATCH_DIR : 0) | ((m & FAN_MOVED_TO) ? CG_WATCH_MOVED : 0);
}

/* FNV-1a, from the watch's random seed, over a record's key. */
static uint64_t key_hash(uint64_t seed, size_t fs, int32_t htype, const unsigned char *handle,
			 uint32_t hlen, const char *name, unsigned mask)
{
	uint64_t x = seed ^ fs ^ ((uint64_t)(uint32_t)htype << 8) ^ ((uint64_t)mask << 40);
	for (uint32_t i = 0; i < hlen; i++)
		x = (x ^ handle[i]) * 1099511628211ULL;
	for (const char *c = name; *c; c++)
		x = (x ^ (unsigned char)*c) * 1099511628211ULL;
	return x;
}

/* Is the record at offset at the one of this key (the kind of change: a name's only)? */
static bool same_key(const struct cg_watch *w, size_t at, size_t fs, int32_t htype,
		     const unsigned char *handle, uint32_t hlen, const char *name, unsigned mask)
{
	const struct rec *r = (const struct rec *)(w->buf + at);
	return r->fs == fs && r->htype == htype && r->hlen == hlen &&
	       (!name[0] || r->mask == mask) && memcmp(r->data, handle, hlen) == 0 &&
	       strcmp((const char *)r->data + hlen, name) == 0;
}

/*
 * The slot of the record of this key, or the free slot it would take. An
 * open-addressed table grown at half full; NULL when it cannot grow (the
 * watch is then incomplete). s43e F5: a bare 64-bit hash was the key, and a
 * name chosen to collide could have dropped a record unsaid.
 */
static struct seen *seen_slot(struct cg_watch *w, uint64_t x, size_t fs, int32_t htype,
			      const unsigned char *handle, uint32_t hlen, const char *name,
			      unsigned mask)
{
	if (2 * (w->n_seen + 1) > w->cap_seen) {
		size_t cap = w->cap_seen ? 2 * w->cap_seen : 1024;
		struct seen *t =
		    cap <= WATCH_BYTES_MAX / sizeof(*t) ? calloc(cap, sizeof(*t)) : NULL;
		if (!t)
			return NULL;
		for (size_t i = 0; i < w->cap_seen; i++)
			for (size_t k = w->seen[i].hash % cap; w->seen[i].at; k = (k + 1) % cap)
				if (!t[k].at) {
					t[k] = w->seen[i];
					break;
				}
		free(w->seen);
		w->seen = t, w->cap_seen = cap;
	}
	size_t k = x % w->cap_seen;
	for (; w->seen[k].at; k = (k + 1) % w->cap_seen)
		if (w->seen[k].hash == x &&
		    same_key(w, w->seen[k].at - 1, fs, htype, handle, hlen, name, mask))
			break;
	return &w->seen[k];
}

static bool named(const struct cg_watch *w, const char *name)
{
	for (const char *const *n = w->names; n && *n; n++)
		if (strcmp(*n, name) == 0)
			return true;
	return false;
}

/*
 * One DFID_NAME record (info, len bytes: header, fsid, file handle, name).
 * The kernel packs records without aligning them for our structs, so each
 * field is copied out (UBSan caught a misaligned read).
 */
static void keep(struct cg_watch *w, uint64_t mask, const unsigned char *info, size_t len)
{
	const size_t fsid_at = offsetof(struct fanotify_event_info_fid, fsid);
	const size_t fh_at = offsetof(struct fanotify_event_info_fid, handle);
	const size_t bytes_at = fh_at + offsetof(struct file_handle, handle_bytes);
	const size_t type_at = fh_at + offsetof(struct file_handle, handle_type);
	const size_t data_at = fh_at + offsetof(struct file_handle, f_handle);
	int fsid[2];
	uint32_t hlen;
	int32_t htype;
	if (len < data_at)
		return;
	memcpy(fsid, info + fsid_at, sizeof(fsid));
	memcpy(&hlen, info + bytes_at, sizeof(hlen));
	memcpy(&htype, info + type_at, sizeof(htype));
	if (hlen > UINT16_MAX || data_at + hlen >= len)
		return;
	const unsigned char *handle = info + data_at;
	const char *name = (const char *)handle + hlen;
	if (!memchr(name, '\0', len - data_at - hlen))
		return; /* no name ends in this record */
	size_t fs = 0;
	while (fs < w->n_fs && memcmp(w->fs[fs].fsid, fsid, sizeof(fsid)) != 0)
		fs++;
	if (fs == w->n_fs || !name[0])
		return; /* another file system's, or no name: not a change in a tree */
	/*
	 * Once per directory and name (and kind of change) for a name the
	 * caller judges, or a directory moved in; once per directory for any
	 * other name. So a call writing one file a million times, or a million
	 * files in few directories, costs few records (s43d F2 filled the
	 * bound with writes to files named config).
	 */
	bool moved_dir = (mask & FAN_MOVED_TO) && (mask & FAN_ONDIR);
	/*
	 * Each directory moved in keeps its name (the sweep walks it), so
	 * renames could fill the bound cheaply (s43e F2): past this many the
	 * watch is incomplete, and the sweep walks the trees whole.
	 */
	if (moved_dir && ++w->n_moved > WATCH_MOVED_MAX) {
		w->lost = true;
		return;
	}
	unsigned kind = 0;
	if (moved_dir || named(w, name))
		kind = mask_of(mask);
	else
		name = ""; /* the directory's one record for every other name */
	uint64_t x = key_hash(w->seed, fs, htype, handle, hlen, name, kind);
	struct seen *slot = seen_slot(w, x, fs, htype, handle, hlen, name, kind);
	if (!slot) {
		w->lost = true;
		return;
	}
	if (slot->at)
		return; /* recorded */
	size_t nl = strlen(name);
	size_t rl = (sizeof(struct rec) + hlen + nl + 1 + 7) & ~(size_t)7;
	if (w->len + rl > w->bytes_max) {
		w->lost = true; /* the bound: the sweep walks instead */
		return;
	}
	if (w->len + rl > w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 65536;
		cap = cap > w->bytes_max ? w->bytes_max : cap;
		unsigned char *b = cap <= w->bytes_max ? realloc(w->buf, cap) : NULL;
		if (!b) {
			w->lost = true;
			return;
		}
		w->buf = b, w->cap = cap;
	}
	struct rec *r = (struct rec *)(w->buf + w->len);
	memset(r, 0, rl);
	r->len = (uint32_t)rl;
	r->mask = mask_of(mask);
	r->fs = (uint16_t)fs;
	r->hlen = (uint16_t)hlen;
	r->htype = htype;
	memcpy(r->data, handle, hlen);
	memcpy(r->data + hlen, name, nl + 1);
	slot->hash = x;
	slot->at = w->len + 1;
	w->n_seen++;
	w->len += rl;
}

/* Read what the kernel has queued, without waiting. Events are copied out, not cast. */
static void drain(struct cg_watch *w)
{
	unsigned char *buf = w->rbuf;
	for (;;) {
		ssize_t n = read(w->fan, buf, WATCH_READ_BYTES);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0 && errno != EAGAIN)
				w->lost = true;
			return;
		}
		struct fanotify_event_metadata m;
		for (size_t at = 0; at + sizeof(m) <= (size_t)n; at += m.event_len) {
			memcpy(&m, buf + at, sizeof(m));
			if (m.event_len < sizeof(m) || at + m.event_len > (size_t)n) {
				w->lost = true;
				break;
			}
			if (m.vers != FANOTIFY_METADATA_VERSION || (m.mask & FAN_Q_OVERFLOW)) {
				w->lost = true;
				continue;
			}
			if (m.fd >= 0)
				(void)close(m.fd); /* not asked for; never kept */
			if (m.pid == w->self)
				continue;
			struct fanotify_event_info_header hd;
			for (size_t off = m.metadata_len; off + sizeof(hd) <= m.event_len;) {
				memcpy(&hd, buf + at + off, sizeof(hd));
				if (hd.len == 0 || off + hd.len > m.event_len)
					break;
				if (hd.info_type == FAN_EVENT_INFO_TYPE_DFID_NAME)
					keep(w, m.mask, buf + at + off, hd.len);
				off += hd.len;
			}
		}
	}
}

static void *collect(void *arg)
{
	struct cg_watch *w = arg;
	struct pollfd p[2] = { { .fd = w->fan, .events = POLLIN },
			       { .fd = w->stop, .events = POLLIN } };
	/* The timeout only bounds a stop whose wake-up was lost. */
	while (!atomic_load(&w->stopping)) {
		if (poll(p, 2, 1000) < 0 && errno != EINTR) {
			w->lost = true;
			return NULL;
		}
		drain(w);
	}
	return NULL;
}

static int add_tree(struct cg_watch *w, const char *tree)
{
	struct statfs sf;
	int fd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstatfs(fd, &sf) != 0) {
		if (fd >= 0)
			(void)close(fd);
		return -1;
	}
	for (size_t i = 0; i < w->n_fs; i++)
		if (memcmp(w->fs[i].fsid, &sf.f_fsid, sizeof(w->fs[i].fsid)) == 0) {
			(void)close(fd);
			return 0; /* that file system is marked already */
		}
	if (w->n_fs == WATCH_FS_MAX || fanotify_mark(w->fan, FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
						     WATCH_EVENTS, fd, NULL) != 0) {
		(void)close(fd);
		return -1;
	}
	w->fs[w->n_fs].mount_fd = fd;
	memcpy(w->fs[w->n_fs].fsid, &sf.f_fsid, sizeof(w->fs[w->n_fs].fsid));
	w->n_fs++;
	return 0;
}

/* Unescape mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/*
 * Is anything mounted below one of trees? Its changes are another mount's:
 * another file system no mark covers, or a bind mount whose directories
 * resolve to paths outside every tree (s43d F4: a repository under a tmpfs
 * or a bind mount in the workspace went unjudged while the watch said it
 * was whole). true also when mountinfo cannot be read.
 */
static bool mounts_below(const char *const *trees, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	bool below = !f;
	while (f && !below && getline(&line, &cap, f) > 0) {
		/* id parent major:minor root MOUNTPOINT ... */
		char *save = NULL, *mp = strtok_r(line, " ", &save);
		for (int k = 0; mp && k < 4; k++)
			mp = strtok_r(NULL, " ", &save);
		if (!mp)
			continue;
		unescape(mp);
		for (size_t i = 0; i < n && !below; i++)
			below = cg_path_under(mp, trees[i]) && strcmp(mp, trees[i]) != 0;
	}
	free(line);
	if (f)
		(void)fclose(f);
	return below;
}

struct cg_watch *cg_watch_start(const char *const *trees, size_t n, const char *const *names)
{
	struct cg_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->names = names;
	/* A seed the call cannot learn: names chosen to collide cost it the probes, not us. */
	if (getrandom(&w->seed, sizeof(w->seed), GRND_NONBLOCK) != (ssize_t)sizeof(w->seed))
		w->seed = 1469598103934665603ULL ^ (uint64_t)cg_now_mono_ns();
	/* Test-only: a smaller bound, so that a test can take the walk's path. */
	static _Atomic long knob;
	if (!atomic_load(&knob))
		atomic_store(&knob, cg_test_knob("CALLGATE_TEST_WATCH_BYTES", WATCH_BYTES_MAX,
						 WATCH_BYTES_MAX));
	w->bytes_max = (size_t)atomic_load(&knob);
	w->self = getpid();
	w->stop = -1;
	unsigned flags = FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME | FAN_CLOEXEC | FAN_NONBLOCK;
	w->fan = fanotify_init(flags | FAN_UNLIMITED_QUEUE, O_RDONLY | O_CLOEXEC | O_LARGEFILE);
	if (w->fan < 0) /* a bounded queue still works; an overflow then makes it incomplete */
		w->fan = fanotify_init(flags, O_RDONLY | O_CLOEXEC | O_LARGEFILE);
	if (w->fan < 0)
		goto fail;
	for (size_t i = 0; i < n; i++)
		if (add_tree(w, trees[i]) != 0)
			w->lost = true; /* its changes are not seen: the sweep walks */
	if (mounts_below(trees, n))
		w->lost = true;
	if (w->n_fs == 0)
		goto fail;
	w->stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->rbuf = malloc(WATCH_READ_BYTES);
	if (w->stop < 0 || !w->rbuf || pthread_create(&w->thread, NULL, collect, w) != 0)
		goto fail;
	w->threaded = true;
	return w;
fail : {
	int e = errno;
	cg_watch_free(w);
	errno = e ? e : EIO;
	return NULL;
}
}

/* Records in (fs, handle, name) order, so that each directory is resolved once. */
static int rec_cmp(const void *a, const void *b)
{
	const struct rec *x = *(const struct rec *const *)a, *y = *(const struct rec *const *)b;
	if (x->fs != y->fs)
		return x->fs < y->fs ? -1 : 1;
	if (x->hlen != y->hlen)
		return x->hlen < y->hlen ? -1 : 1;
	if (x->htype != y->htype)
		return x->htype < y->htype ? -1 : 1;
	int c = memcmp(x->data, y->data, x->hlen);
	return c ? c : strcmp((const char *)x->data + x->hlen, (const char *)y->data + y->hlen);
}

static bool same_dir(const struct rec *x, const struct rec *y)
{
	return x->fs == y->fs && x->hlen == y->hlen && x->htype == y->htype &&
	       memcmp(x->data, y->data, x->hlen) == 0;
}

/*
 * The directory's path now, malloc'd; NULL when it is gone (a handle gone
 * stale, a directory with no links left). Anything else that cannot be
 * resolved (a path past PATH_MAX, an error) makes the watch incomplete:
 * s43d F5 had a directory named "x (deleted)" taken for a deleted one by
 * its name, and a repository made there went unjudged.
 */
static char *dir_path(struct cg_watch *w, const struct rec *r)
{
	union {
		struct file_handle h;
		unsigned char b[sizeof(struct file_handle) + UINT16_MAX];
	} fh;
	fh.h.handle_bytes = r->hlen;
	fh.h.handle_type = r->htype;
	memcpy(fh.h.f_handle, r->data, r->hlen);
	int fd = open_by_handle_at(w->fs[r->fs].mount_fd, &fh.h, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		w->lost |= errno != ESTALE && errno != ENOENT;
		return NULL;
	}
	struct stat st;
	char link[64], path[4096];
	(void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = fstat(fd, &st) == 0 && st.st_nlink > 0 ? readlink(link, path, sizeof(path)) : 0;
	bool gone = n == 0;
	(void)close(fd);
	if (gone)
		return NULL;
	if (n < 0 || n >= (ssize_t)sizeof(path) || path[0] != '/') {
		w->lost = true;
		return NULL;
	}
	path[n] = '\0';
	char *s = strdup(path);
	w->lost |= !s;
	return s;
}

static void resolve(struct cg_watch *w)
{
	size_t n = 0;
	for (size_t off = 0; off < w->len; off += ((struct rec *)(w->buf + off))->len)
		n++;
	struct rec **v = n ? malloc(n * sizeof(*v)) : NULL;
	w->changes = n ? malloc(n * sizeof(*w->changes)) : NULL;
	w->dirs = n ? malloc(n * sizeof(*w->dirs)) : NULL;
	if (n && (!v || !w->changes || !w->dirs)) {
		w->lost = true;
		free(v);
		return;
	}
	size_t k = 0;
	for (size_t off = 0; off < w->len; off += ((struct rec *)(w->buf + off))->len)
		v[k++] = (struct rec *)(w->buf + off);
	if (n)
		qsort(v, n, sizeof(*v), rec_cmp);
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && same_dir(v[i], v[j]))
			j++;
		char *dir = dir_path(w, v[i]);
		if (dir) {
			w->dirs[w->n_dirs++] = dir;
			for (size_t a = i; a < j;) {
				const char *name = (const char *)v[a]->data + v[a]->hlen;
				unsigned mask = 0;
				size_t b = a;
				for (; b < j &&
				       strcmp(name, (const char *)v[b]->data + v[b]->hlen) == 0;
				     b++)
					mask |= v[b]->mask;
				w->changes[w->n_changes++] = (struct cg_watch_change){
					.dir = dir, .name = name, .mask = mask
				};
				a = b;
			}
		}
		i = j;
	}
	free(v);
}

static void join(struct cg_watch *w)
{
	uint64_t one = 1;
	atomic_store(&w->stopping, true);
	(void)!write(w->stop, &one, sizeof(one));
	(void)pthread_join(w->thread, NULL);
	w->threaded = false;
}

void cg_watch_stop(struct cg_watch *w)
{
	if (!w || !w->threaded)
		return;
	join(w);
	drain(w); /* what came after the thread's last read */
	resolve(w);
	w->stopped = true;
}

bool cg_watch_complete(const struct cg_watch *w)
{
	return w && !w->lost && !w->threaded && w->stopped;
}

size_t cg_watch_changes(const struct cg_watch *w, const struct cg_watch_change **out)
{
	*out = w ? w->changes : NULL;
	return w ? w->n_changes : 0;
}

/*
 * Closing a group whose marks the kernel still holds waits for a grace
 * period (13-19 ms measured here): done on a thread of its own, so that the
 * call's answer does not wait for it.
 */
static void *close_later(void *arg)
{
	(void)close((int)(intptr_t)arg);
	return NULL;
}

static void close_group(int fd)
{
	pthread_attr_t a;
	pthread_t t;
	if (fd < 0)
		return;
	bool handed = pthread_attr_init(&a) == 0;
	if (handed) {
		handed = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
			 pthread_attr_setstacksize(&a, 65536) == 0 &&
			 pthread_create(&t, &a, close_later, (void *)(intptr_t)fd) == 0;
		(void)pthread_attr_destroy(&a);
	}
	if (!handed)
		(void)close(fd);
}

void cg_watch_free(struct cg_watch *w)
{
	if (!w)
		return;
	if (w->threaded)
		join(w);
	for (size_t i = 0; i < w->n_fs; i++)
		(void)close(w->fs[i].mount_fd);
	close_group(w->fan);
	if (w->stop >= 0)
		(void)close(w->stop);
	for (size_t i = 0; i < w->n_dirs; i++)
		free(w->dirs[i]);
	free(w->dirs);
	free(w->changes);
	free(w->buf);
	free(w->rbuf);
	free(w->seen);
	free(w);
}
