/* SPDX-License-Identifier: MIT */
/*
 * evidence — the journal writer, trace packages and signed checkpoints
 * (seed 004, design/EVIDENCE.md, docs/evidence.md).
 *
 * Callers enqueue events; one writer thread owns every file. It takes the
 * whole queue at once, gives each event its sequence numbers and both chain
 * links, writes the batch with one write(2), and calls fdatasync once for
 * all of it when anyone in the batch asked for durability (group commit).
 * An event nobody waits for (item_lazy) does not make the writer take the
 * queue: it waits for company, at most LAZY_WRITE_MS or LAZY_WRITE_ITEMS.
 * Seals run the call's own replay step on the trace's events in memory,
 * append the replay and seal events and sign a checkpoint on the writer
 * thread (at once, or at most SEAL_CKPT_GAP_MS later when one was just
 * signed); a second thread then writes the trace packages (traces/<id>/), so
 * that slow directory operations never delay a group commit, and the event
 * loop never waits on disk at all.
 *
 * Invariants:
 *  - A durable append MUST NOT return 0 before fdatasync covered its event.
 *  - A queued item MUST be written without further work from anyone: the
 *    writer never sleeps without a deadline while the queue holds items.
 *  - Once a write or sync fails, the journal is failed: every later append
 *    returns -1 (fail closed; the daemon must not run commands whose permit
 *    it cannot record) until the writer has healed it: rebuilt its state
 *    from what is on disk, exactly as a start does, and recorded the gap
 *    in a recovery event (heal()). A trace left open by the failure is
 *    marked incomplete and MUST NOT take further events.
 *  - Only the writer thread touches the files, the chain heads and the
 *    per-trace state; callers touch only the queue (under mu).
 *  - Open MUST NOT silently drop bytes: a torn final line is moved aside to
 *    journal/torn-<seq>.bin and recorded by a recovery event; a journal that
 *    does not verify otherwise refuses to open.
 *  - Traces left open by a crash are marked incomplete, never sealed.
 */
#include "evidence.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "journal.h"
#include "key.h"
#include "merkle.h"
#include "note.h"
#include "resume.h"
#include "retention.h"
#include "util.h"
#include "verdict.h"

#define DEFAULT_SEGMENT_BYTES (64ull << 20)
#define DEFAULT_CKPT_EVERY    10000u
#define DEFAULT_CKPT_MS	      1000
#define CKPT_MS_MAX	      (24 * 3600 * 1000) /* a day */
/*
 * A batch that seals a trace is signed at once unless a checkpoint was
 * signed less than this long ago; then the next one, at most this much
 * later, covers it (a group commit of signatures under a flood).
 */
#define SEAL_CKPT_GAP_MS 10
/*
 * An item nobody waits for (not durable, no gate: a refusal, a ping's
 * events, an answered call's seal) does not wake a sleeping writer: it is
 * written with the next item that does, once this many wait, or this long
 * after the first of them, whichever comes first. One wake-up of the writer
 * and package threads serves many of them.
 */
#define LAZY_WRITE_MS	  1
#define LAZY_WRITE_ITEMS  16u
#define QUEUE_CAP	  (1u << 20) /* pending items; past this appends fail (EAGAIN) */
#define ADMIT_HIGH_WATER  32768u     /* pending items past which new calls are turned away */
#define PKG_WEIGHT	  8u	     /* a waiting trace package, in queued-item units */
#define SEGMENT_READ_CAP  ((size_t)2 << 30)
#define RESUME_READ_CAP	  ((size_t)256 << 20)
#define PKG_BACKLOG_CAP	  8192u /* packages waiting to be written; past this the writer waits */
#define HEAL_PROBE_MS	  1000	/* a failed journal tries to reopen this often */
#define PACKAGE_RETRY_MS  250	/* a package with no room is tried again this often */
#define PACKAGE_WAIT_MS	  10000 /* … for this long, while the file system stays full */
#define HOLD_AHEAD_MAX	  ((uint64_t)4 << 20)  /* what each file holds past its end, at most */
#define HOLD_PROMISED_MAX ((uint64_t)64 << 20) /* … or, to cover promises, at most this */
#define PKG_DISK_BYTES	  ((uint64_t)16 << 10) /* a package still to be written, on disk */
#define RETENTION_TICK_MS 60000 /* with retention on, old segments are looked at this often */

static const char *const ev_names[] = {
#define CG_EVENT_NAME(e, s) s,
	CG_EVENT_LIST(CG_EVENT_NAME)
#undef CG_EVENT_NAME
};

const char *cg_event_name(enum cg_event_type t)
{
	if ((int)t < 0 || t >= CG_EV__COUNT)
		return NULL;
	return ev_names[t];
}

enum item_kind { IT_EVENT, IT_SEAL, IT_REFUSAL, IT_INCOMPLETE, IT_FLUSH };

struct item {
	struct item *next;
	enum item_kind kind;
	int type;
	bool durable;
	_Atomic uint32_t *gate; /* opened once the batch is on disk, or cannot be */
	uint64_t ticket;
	char trace[CG_TRACE_ID_MAX + 1];
	char ts[40];
	char decision[CG_DECISION_CAP]; /* decision and refusal events: for the structure check */
	char *payload;			/* serialised payload (events) */
	size_t payload_len;
	json_t *refused; /* refusals: the payload serialised, for the package's facts */
	json_t *verdict; /* seals: the normalised verdict */
	const char *why; /* incomplete markers: why the trace was cut (static) */
};

/* One line of an open trace, as the writer produced it. */
struct tline {
	size_t off, len;
	uint64_t seq, tseq;
	int type;
	char decision[CG_DECISION_CAP];
};

/* Writer-thread state for one trace that is not yet sealed. */
struct tstate {
	uint64_t tseq;
	char hash[65];
	char *buf; /* the trace's lines, in order */
	size_t len, cap;
	struct tline *lines;
	size_t n, ncap;
	bool keep; /* false for the journal's own trace: its lines are not kept */
};

struct package {
	struct package *next;
	char trace[CG_TRACE_ID_MAX + 1];
	char seg[40]; /* the journal segment its trace was sealed in */
	bool archive; /* appended to that segment's archive, not written as a directory */
	struct tstate *t;
	json_t *verdict, *replay, *diff;
	/*
	 * A refusal's payload as serialised into its one line, and the line's
	 * ts: its facts are read from these, not by parsing the line again.
	 * Nobody changes a payload once it is queued.
	 */
	json_t *refused;
	char ts[40];
};

/* The packages of one journal batch, handed to the package thread in order. */
struct pkg_batch {
	struct pkg_batch *next;
	struct package *pkgs;
	size_t n;
	uint64_t last; /* the batch's last ticket: done once these are written */
	bool write;    /* false when the batch failed: free, do not write */
	char *resume;  /* a resume point to write after the packages, or NULL */
	size_t resume_len;
};

struct cg_evidence {
	char *state_dir;
	struct cg_evidence_config cfg;
	int lock_fd, seg_fd, ckpt_fd, dir_fd;
	uint64_t seg_bytes;
	uint64_t seg_held;  /* the segment's blocks are allocated up to here (hold_want) */
	uint64_t ckpt_held; /* checkpoints.ndjson's, likewise */
	/* Held and not yet written (journal, checkpoints, live archive): counted as free. */
	_Atomic uint64_t spare_seg, spare_ckpt, spare_live;
	_Atomic uint64_t promised_seen; /* promised, as last computed under mu */
	_Atomic uint64_t live_ahead;	/* live.ahead, readable without live_mu */
	char seg_name[32];		/* the current segment's file name */
	/* writer-only */
	uint64_t seq;
	char head[65];
	struct cg_smap *traces;
	EVP_PKEY *key;
	char key_fp[65];
	char origin[CG_NOTE_NAME_MAX + 1]; /* the log's name in its checkpoint notes */
	struct cg_merkle_range mr;	   /* the Merkle tree over events 1..seq */
	uint64_t since_ckpt, ckpt_seq;
	uint64_t last_line_len; /* the length of event seq's line */
	uint64_t ckpt_line_off; /* where the last checkpoint line starts */
	bool ckpt_line_valid;	/* … and it was written by this run */
	int64_t last_ckpt_ns;
	bool seal_unsigned; /* a sealed trace waits for the next checkpoint */
	/*
	 * This start follows a clean stop at that seq (0: it does not): its
	 * first event says so and is signed before any call (ckpt_now), so that
	 * a crash of this run leaves a tail after a checkpoint of its own, not
	 * events after the stop's (s43b F3: the next start refused them as no
	 * daemon's, and the gate stayed down).
	 */
	uint64_t after_stop;
	bool ckpt_now;
	/* events a start found after the last checkpoint (a crash's), recorded */
	uint64_t tail_from, tail_to;
	char tail_head[65];
	int64_t last_resume_ns; /* when a resume point was last made */
	char *resume;		/* the newest resume point, not yet handed on */
	size_t resume_len;
	/*
	 * A package was given up: no later resume point is written, so the next
	 * start reads from the last one and rebuilds it (s41b F1: the resume
	 * point had moved past a trace with no package, and no start looked).
	 */
	atomic_bool pkg_lost;
	int64_t last_note_ns; /* when checkpoint.note was last replaced */
	char *batch;
	size_t batch_len, batch_cap;
	struct package *pkgs;
	/* shared, under mu */
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	struct item *q_head, **q_tail;
	size_t q_len;
	bool q_eager; /* an item that wakes the writer at once (item_lazy false) is queued */
	int64_t lazy_since_ns; /* monotonic: when the oldest queued item was queued */
	unsigned flushers;     /* callers in cg_evidence_flush: take the queue now */
	size_t inflight; /* items of the batch the writer holds, until its packages are handed on */
	uint64_t next_ticket, synced_ticket, done_ticket;
	int failed;		 /* errno of the failure that stopped the journal, or 0 */
	_Atomic int failed_seen; /* the same, for readers that take no lock */
	int64_t failed_at_ns;	 /* wall clock of that failure */
	uint64_t refused;	 /* appends refused while failed */
	struct cg_smap *cut;	 /* traces a failure cut short: they take no more events */
	json_t *cut_pending;	 /* traces cut at the queue cap, to be marked incomplete */
	json_t *cut_runs;	 /* the permits of calls a crash cut short: cg_evidence_cut_runs */
	bool stop;
	pthread_t thr;
	bool thr_started;
	/* the package thread (files under traces/ never delay the journal) */
	struct pkg_batch *pb_head, **pb_tail;
	size_t pb_pending;
	/* cg_evidence_wake_below: eventfd to write once pending < wake_level, or -1 */
	int wake_fd;
	size_t wake_level;
	pthread_cond_t pkg_cv, room_cv;
	pthread_t pkg_thr;
	bool pkg_started, pkg_stop;
	int64_t pkg_full_since_ns; /* package thread: when a package first found no room, or 0 */
	int64_t retention_s;	   /* pack packages of segments older than this; 0: never */
	_Atomic bool archive; /* evidence.packages: archive (packages packed as they are sealed) */
	pthread_mutex_t live_mu;     /* guards live: whoever writes packages appends there */
	struct cg_live_archive live; /* the segment archive packages are appended to */
	int64_t last_pack_ns;	     /* package thread: when retention last looked */
	uint64_t reserve;	     /* the disk reserve in bytes (set at open); 0: none */
	_Atomic bool disk_low;	     /* below it when last asked */
	/* Under mu: bytes admitted calls may still write (cg_evidence_promise). */
	uint64_t promised;
	/* Ended calls' promises, oldest first: kept until done_ticket reaches ticket. */
	struct promise {
		struct promise *next;
		uint64_t ticket, bytes;
	} * promises, **promises_tail;
	/* Test-only knobs (environment, read at open; see docs/limits.md). */
	size_t high_water; /* ADMIT_HIGH_WATER, or CALLGATE_TEST_EVIDENCE_HIGH_WATER */
	int stall_ms;	   /* CALLGATE_TEST_EVIDENCE_STALL_MS: the writer sleeps per batch */
	int pack_tick_ms;  /* RETENTION_TICK_MS, or CALLGATE_TEST_RETENTION_TICK_MS */
};

/* ---- small helpers ----------------------------------------------------------- */

static void tstate_free(void *p)
{
	struct tstate *t = p;
	if (!t)
		return;
	free(t->buf);
	free(t->lines);
	free(t);
}

static void item_free(struct item *it)
{
	if (!it)
		return;
	free(it->payload);
	json_decref(it->refused);
	json_decref(it->verdict);
	free(it);
}

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap : 4096;
	while (nc < need)
		nc *= 2;
	char *q = realloc(*p, nc);
	if (!q)
		return -1;
	*p = q;
	*cap = nc;
	return 0;
}

static int tstate_add_line(struct tstate *t, const char *line, size_t len, uint64_t seq, int type,
			   const char *decision)
{
	if (!t->keep)
		return 0;
	if (grow(&t->buf, &t->cap, t->len + len) < 0)
		return -1;
	if (t->n == t->ncap) {
		size_t nc = t->ncap ? t->ncap * 2 : 16;
		struct tline *q = realloc(t->lines, nc * sizeof(*q));
		if (!q)
			return -1;
		t->lines = q;
		t->ncap = nc;
	}
	memcpy(t->buf + t->len, line, len);
	struct tline *l = &t->lines[t->n++];
	memset(l, 0, sizeof(*l));
	l->off = t->len;
	l->len = len;
	l->seq = seq;
	l->tseq = t->tseq;
	l->type = type;
	if (decision)
		snprintf(l->decision, sizeof(l->decision), "%s", decision);
	t->len += len;
	return 0;
}

static struct tstate *tstate_get(struct cg_evidence *ev, const char *trace, bool create)
{
	struct tstate *t = cg_smap_get(ev->traces, trace);
	if (t || !create)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	memcpy(t->hash, cg_journal_genesis(), 65);
	t->keep = strcmp(trace, CG_JOURNAL_TRACE) != 0;
	if (cg_smap_put(ev->traces, trace, t) < 0) {
		free(t);
		return NULL;
	}
	return t;
}

/* Parse the trace's kept lines back into evlines (the same parser replay uses). */
static struct cg_evline *tstate_evlines(const struct tstate *t, json_t *diff)
{
	struct cg_evline *v = calloc(t->n ? t->n : 1, sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < t->n; i++) {
		const struct tline *l = &t->lines[i];
		const char *check;
		char why[200];
		/*
		 * A refusal's members were checked when it was queued
		 * (cg_evidence_refuse) and its decision kept in its line: its
		 * payload needs no second parse here. Replay parses it in full.
		 */
		bool known = l->type == CG_EV_REFUSAL;
		int rc = known ? cg_evline_parse_chain(t->buf + l->off, l->len, &v[i], &check, why,
						       sizeof(why))
			       : cg_evline_parse(t->buf + l->off, l->len, &v[i], &check, why,
						 sizeof(why));
		if (rc < 0)
			cg_diff_add(diff, check, "events.ndjson", i + 1, l->seq, NULL, NULL, why);
		else if (known)
			memcpy(v[i].decision, l->decision, sizeof(v[i].decision));
		v[i].lineno = i + 1;
	}
	return v;
}

/* ---- the writer ------------------------------------------------------------------ */

/*
 * Space the journal, its checkpoints and the live archive hold past their
 * ends: half the disk reserve, at most HOLD_AHEAD_MAX (none with
 * --disk-reserve 0). A call admitted while there was room that then fills
 * the file system (the state beside a workspace) still has its finish,
 * verdict, seal, checkpoint and package written there instead of tearing a
 * line and losing its package (s38c, s39d).
 */
static uint64_t ahead_of(const struct cg_evidence *ev)
{
	return ev->reserve / 2 < HOLD_AHEAD_MAX ? ev->reserve / 2 : HOLD_AHEAD_MAX;
}

/*
 * What the journal and the archive each hold: that, or all that admitted
 * calls are promised to write when it is more (at most HOLD_PROMISED_MAX):
 * twenty calls of 100 KB requests had been admitted against 4.2 MB while
 * 614 KiB was held, and three that ran ended incomplete (s39d). What is
 * held unwritten (spare) covers promises at admission: holding for them
 * does not count them twice.
 */
static uint64_t hold_want(struct cg_evidence *ev)
{
	uint64_t a = ahead_of(ev), p = atomic_load(&ev->promised_seen);
	if (!a)
		return 0;
	p = p < HOLD_PROMISED_MAX ? p : HOLD_PROMISED_MAX;
	return p > a ? p : a;
}

static uint64_t spare_of(uint64_t held, uint64_t end)
{
	return held > end ? held - end : 0;
}

static void release_ahead(struct cg_evidence *ev)
{
	cg_file_release_ahead(ev->seg_fd, &ev->seg_held);
	atomic_store(&ev->spare_seg, 0);
}

/* live_mu held: what the live archive holds and has not written yet. */
static void live_spare(struct cg_evidence *ev)
{
	atomic_store(&ev->spare_live, spare_of(ev->live.tar_held, ev->live.end) +
					  spare_of(ev->live.idx_held, ev->live.idx_end));
}

/* The current segment's archive, opened with its space held before packages need it. */
static void archive_ready(struct cg_evidence *ev)
{
	if (!atomic_load(&ev->archive) || !ev->cfg.write_traces || !ahead_of(ev))
		return;
	pthread_mutex_lock(&ev->live_mu);
	ev->live.ahead = hold_want(ev);
	atomic_store(&ev->live_ahead, ev->live.ahead);
	if (cg_live_archive_ready(&ev->live, ev->state_dir, ev->seg_name, false) < 0)
		cg_log("warn", NULL, "evidence: the archive of %s is not open yet: %s",
		       ev->seg_name, strerror(errno));
	live_spare(ev);
	pthread_mutex_unlock(&ev->live_mu);
}

static int segment_open(struct cg_evidence *ev, uint64_t first_seq)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/journal/%016" PRIu64 ".ndjson", ev->state_dir, first_seq);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	/* The new name must survive a crash too: sync the directory. */
	if (fsync(ev->dir_fd) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	release_ahead(ev);
	if (ev->seg_fd >= 0)
		close(ev->seg_fd);
	ev->seg_fd = fd;
	ev->seg_bytes = 0;
	snprintf(ev->seg_name, sizeof(ev->seg_name), "%016" PRIu64 ".ndjson", first_seq);
	archive_ready(ev);
	return 0;
}

/* Write the pending batch bytes to the current segment. */
static int batch_write(struct cg_evidence *ev)
{
	if (ev->batch_len == 0)
		return 0;
	uint64_t want = hold_want(ev);
	/* Not past the segment's size: the next segment holds its own. */
	uint64_t room = ev->cfg.segment_bytes > ev->seg_bytes + ev->batch_len
			    ? ev->cfg.segment_bytes - ev->seg_bytes - ev->batch_len
			    : 0;
	cg_file_hold_ahead(ev->seg_fd, ev->seg_bytes, ev->batch_len, want < room ? want : room,
			   &ev->seg_held);
	/*
	 * The archive's packages come only once calls end, when a call may have
	 * filled the disk: its hold grows here, in the batch that holds a call's
	 * permit, before the call can run (s39d: packages were lost). The lock
	 * is taken only when the hold must grow (promises rose past it), so the
	 * journal seldom waits for a package being appended.
	 */
	if (want > atomic_load(&ev->live_ahead) && atomic_load(&ev->archive)) {
		pthread_mutex_lock(&ev->live_mu);
		if (want > ev->live.ahead && strcmp(ev->live.segment, ev->seg_name) == 0) {
			ev->live.ahead = want;
			atomic_store(&ev->live_ahead, want);
			if (cg_live_archive_ready(&ev->live, ev->state_dir, ev->seg_name, false) ==
			    0)
				live_spare(ev);
		}
		pthread_mutex_unlock(&ev->live_mu);
	}
	if (cg_write_all(ev->seg_fd, ev->batch, ev->batch_len) < 0)
		return -1;
	ev->seg_bytes += ev->batch_len;
	atomic_store(&ev->spare_seg, spare_of(ev->seg_held, ev->seg_bytes));
	ev->batch_len = 0;
	return 0;
}

/* Format one event into the batch, advancing both chains. */
static int emit(struct cg_evidence *ev, const char *trace, int type, const char *ts,
		const char *payload, size_t payload_len, const char *decision)
{
	struct tstate *t = tstate_get(ev, trace, true);
	if (!t) {
		errno = ENOMEM;
		return -1;
	}
	char hdr[600];
	int hn = snprintf(hdr, sizeof(hdr),
			  "{\"seq\":%" PRIu64 ",\"trace\":\"%s\",\"tseq\":%" PRIu64
			  ",\"type\":\"%s\",\"ts\":\"%s\",\"prev\":\"%s\",\"tprev\":\"%s\","
			  "\"payload\":",
			  ev->seq + 1, trace, t->tseq + 1, ev_names[type], ts, ev->head, t->hash);
	if (hn < 0 || (size_t)hn >= sizeof(hdr)) {
		errno = EOVERFLOW;
		return -1;
	}
	size_t len = (size_t)hn + payload_len + CG_LINE_TAIL_LEN;
	if (len > CG_LINE_MAX) {
		errno = E2BIG;
		return -1;
	}
	/* Rotate before a line that would overflow the segment (never mid-line). */
	if (ev->seg_bytes + ev->batch_len > 0 &&
	    ev->seg_bytes + ev->batch_len + len > ev->cfg.segment_bytes) {
		if (batch_write(ev) < 0 || fdatasync(ev->seg_fd) != 0 ||
		    segment_open(ev, ev->seq + 1) < 0)
			return -1;
	}
	if (grow(&ev->batch, &ev->batch_cap, ev->batch_len + len) < 0) {
		errno = ENOMEM;
		return -1;
	}
	char *line = ev->batch + ev->batch_len;
	memcpy(line, hdr, (size_t)hn);
	memcpy(line + hn, payload, payload_len);
	char h[65];
	cg_sha256_hex(line, (size_t)hn + payload_len, h);
	memcpy(line + hn + payload_len, ",\"hash\":\"", 9);
	memcpy(line + hn + payload_len + 9, h, 64);
	memcpy(line + hn + payload_len + 73, "\"}\n", 3);
	unsigned char leaf[CG_MERKLE_HASH_LEN];
	cg_merkle_leaf_hash(line, len, leaf);
	if (cg_merkle_range_append(&ev->mr, leaf) < 0) {
		errno = EOVERFLOW;
		return -1;
	}
	ev->batch_len += len;
	ev->last_line_len = len;
	ev->seq++;
	t->tseq++;
	memcpy(ev->head, h, 65);
	memcpy(t->hash, h, 65);
	ev->since_ckpt++;
	if (tstate_add_line(t, line, len, ev->seq, type, decision) < 0) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

static int emit_json(struct cg_evidence *ev, const char *trace, int type, json_t *payload)
{
	char ts[40];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	char *p = json_dumps(payload, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	int rc = emit(ev, trace, type, ts, p, strlen(p), NULL);
	free(p);
	return rc;
}

/*
 * The call's own replay step over the trace's events so far: chain and
 * structure. presealed: its replay and seal events are still to come. The
 * failures found (new reference, an array) or NULL on OOM.
 */
static json_t *self_check(const struct tstate *t, bool presealed)
{
	json_t *diff = json_array();
	struct cg_evline *v = diff ? tstate_evlines(t, diff) : NULL;
	if (!v) {
		json_decref(diff);
		errno = ENOMEM;
		return NULL;
	}
	cg_evlines_check_chain(v, t->n, false, "events.ndjson", diff);
	(void)cg_trace_check_structure(v, t->n, presealed, "events.ndjson", diff);
	free(v);
	return diff;
}

/*
 * The sealed trace leaves the open set: its package is written by the
 * package thread after the batch is on disk. verdict NULL: the trace is one
 * refusal (its item it), whose verdict the package thread derives from the
 * event's payload.
 */
static int queue_package(struct cg_evidence *ev, const char *trace, json_t *verdict, json_t *diff,
			 struct item *it)
{
	struct package *pk = calloc(1, sizeof(*pk));
	if (!pk) {
		errno = ENOMEM;
		return -1;
	}
	const char *status = json_array_size(diff) == 0 ? "PASS" : "FAIL";
	memcpy(pk->trace, trace, strlen(trace) + 1);
	memcpy(pk->seg, ev->seg_name, sizeof(pk->seg));
	pk->archive = atomic_load(&ev->archive);
	pk->t = cg_smap_del(ev->traces, trace);
	pk->verdict = json_incref(verdict); /* NULL stays NULL */
	pk->replay = cg_replay_doc(trace, status, pk->t->n, diff, "trace (sealing)");
	pk->diff = json_incref(diff);
	if (it) {
		pk->refused = it->refused;
		it->refused = NULL;
		memcpy(pk->ts, it->ts, sizeof(pk->ts));
	}
	pk->next = ev->pkgs;
	ev->pkgs = pk;
	return 0;
}

/* The call's own replay step, then the replay and seal events, then its package. */
static int do_seal(struct cg_evidence *ev, struct item *it)
{
	struct tstate *t = tstate_get(ev, it->trace, false);
	if (!t || !t->keep) {
		cg_log("warn", it->trace, "evidence: seal of a trace with no open events");
		return 0;
	}
	json_t *diff = self_check(t, true);
	if (!diff)
		return -1;
	const char *status = json_array_size(diff) == 0 ? "PASS" : "FAIL";
	json_t *rp = json_pack("{s:s, s:I, s:[sssss], s:O}", "status", status, "events",
			       (json_int_t)t->n, "checks", "schema", "hash", "link", "sequence",
			       "structure", "failures", diff);
	int rc = -1;
	if (!rp || emit_json(ev, it->trace, CG_EV_REPLAY, rp) < 0)
		goto free_docs;
	json_t *sp = json_pack("{s:I, s:s, s:O}", "events", (json_int_t)t->tseq, "head", t->hash,
			       "verdict", it->verdict);
	if (!sp || emit_json(ev, it->trace, CG_EV_SEAL, sp) < 0) {
		json_decref(sp);
		goto free_docs;
	}
	json_decref(sp);
	rc = queue_package(ev, it->trace, it->verdict, diff, NULL);
free_docs:
	json_decref(rp);
	json_decref(diff);
	return rc;
}

/* A refusal: its one event is the whole trace and seals it (no replay or seal event). */
static int do_refusal(struct cg_evidence *ev, struct item *it)
{
	if (emit(ev, it->trace, CG_EV_REFUSAL, it->ts, it->payload, it->payload_len, it->decision) <
	    0)
		return -1;
	struct tstate *t = tstate_get(ev, it->trace, false);
	json_t *diff = t ? self_check(t, false) : NULL;
	if (!diff)
		return -1;
	int rc = queue_package(ev, it->trace, NULL, diff, it);
	json_decref(diff);
	return rc;
}

/*
 * The verdict of a trace cut short (no seal): decision as last recorded, an
 * E reply saying why, status "incomplete". New reference, or NULL on OOM.
 */
/* A trace cut short by a crash (or left open at close): marked, never sealed. */
static int do_incomplete(struct cg_evidence *ev, const char *trace, const char *why)
{
	struct tstate *t = tstate_get(ev, trace, false);
	if (!t || !t->keep)
		return 0;
	const char *decision = "UNKNOWN";
	bool ran = false, permitted = false;
	for (size_t i = 0; i < t->n; i++) {
		if (t->lines[i].type == CG_EV_DECISION && t->lines[i].decision[0])
			decision = t->lines[i].decision;
		ran |= t->lines[i].type == CG_EV_EXEC_START;
		permitted |= t->lines[i].type == CG_EV_PERMIT;
	}
	json_t *p =
	    json_pack("{s:s, s:I, s:s, s:b, s:b}", "reason", why, "events", (json_int_t)t->tseq,
		      "head", t->hash, "permitted", permitted, "exec_started", ran);
	char dec[16];
	snprintf(dec, sizeof(dec), "%s", decision);
	if (!p || emit_json(ev, trace, CG_EV_INCOMPLETE, p) < 0) {
		json_decref(p);
		return -1;
	}
	json_decref(p);
	json_t *diff = json_array();
	json_t *verdict = cg_verdict_incomplete(dec, why, trace);
	struct package *pk = calloc(1, sizeof(*pk));
	if (!pk || !verdict || !diff) {
		free(pk);
		json_decref(verdict);
		json_decref(diff);
		errno = ENOMEM;
		return -1;
	}
	memcpy(pk->trace, trace, strlen(trace) + 1);
	pk->t = cg_smap_del(ev->traces, trace);
	pk->verdict = verdict;
	pk->replay = cg_replay_doc(trace, "INCOMPLETE", pk->t->n, diff, "trace (recovery)");
	pk->diff = diff;
	pk->next = ev->pkgs;
	ev->pkgs = pk;
	return 0;
}

/*
 * Replace state_dir/checkpoint.note with the latest note. Not synced, and
 * refreshed at most once per checkpoint interval (and at shutdown) so that
 * busy batches do not pay a file replacement each: it is a convenience copy;
 * checkpoints.ndjson holds every note's signature and `callgate evidence
 * checkpoint` rebuilds any of them.
 */
static void write_latest_note(struct cg_evidence *ev, const char *note, size_t len)
{
	char tmp[4300], dst[4300];
	snprintf(tmp, sizeof(tmp), "%s/checkpoint.note.tmp", ev->state_dir);
	snprintf(dst, sizeof(dst), "%s/checkpoint.note", ev->state_dir);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	bool ok = fd >= 0 && cg_write_all(fd, note, len) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok || rename(tmp, dst) != 0) {
		(void)unlink(tmp);
		cg_log("warn", NULL, "evidence: checkpoint.note not written: %s", strerror(errno));
	}
}

/*
 * Sign the journal's head: one checkpoints.ndjson line carrying the chain
 * head, the Merkle root of events 1..seq, the line's own signature and the
 * signature of the same checkpoint as a C2SP note.
 */
static int checkpoint(struct cg_evidence *ev, bool final)
{
	char ts[40], msg[600], rhex[65], text[CG_NOTE_NAME_MAX + 128];
	unsigned char root[CG_MERKLE_HASH_LEN], sig[64], idsig[CG_NOTE_IDSIG_LEN];
	if (ev->mr.size != ev->seq) {
		errno = EIO; /* the tree lost track of the journal: sign nothing */
		return -1;
	}
	cg_merkle_range_root(&ev->mr, root);
	cg_hex_encode(root, sizeof(root), rhex);
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	int m = cg_ckpt_format_msg(msg, sizeof(msg), ev->seq, ev->head, rhex, ts, ev->key_fp);
	int tn = cg_note_checkpoint_text(text, sizeof(text), ev->origin, ev->seq, root);
	if (m < 0 || tn < 0 || cg_key_sign(ev->key, msg, (size_t)m, sig) < 0 ||
	    cg_note_sign(text, (size_t)tn, ev->origin, ev->key, idsig) < 0) {
		errno = EIO;
		return -1;
	}
	char *b64 = cg_base64_encode(sig, sizeof(sig));
	char *n64 = cg_base64_encode(idsig, sizeof(idsig));
	size_t nlen = 0;
	char *note = cg_note_assemble(text, (size_t)tn, ev->origin, idsig, sizeof(idsig), &nlen);
	char line[1000];
	int n = b64 && n64 ? snprintf(line, sizeof(line), "%s%s%s\",\"note_sig\":\"%s\"}\n", msg,
				      CG_CKPT_SIG_MARK, b64, n64)
			   : -1;
	free(b64);
	free(n64);
	off_t at = lseek(ev->ckpt_fd, 0, SEEK_END);
	/* Held too: a checkpoint torn at ENOSPC had closed the journal (s39d). */
	if (at >= 0 && n > 0)
		cg_file_hold_ahead(ev->ckpt_fd, (uint64_t)at, (size_t)n, ahead_of(ev) / 8,
				   &ev->ckpt_held);
	if (n < 0 || (size_t)n >= sizeof(line) || !note || at < 0 ||
	    cg_write_all(ev->ckpt_fd, line, (size_t)n) < 0) {
		int e = errno ? errno : ENOMEM;
		free(note);
		errno = e;
		return -1;
	}
	int64_t now = cg_now_mono_ns();
	if (final || now - ev->last_note_ns >= ev->cfg.checkpoint_ms * 1000000) {
		write_latest_note(ev, note, nlen);
		ev->last_note_ns = now;
	}
	free(note);
	atomic_store(&ev->spare_ckpt, spare_of(ev->ckpt_held, (uint64_t)at + (uint64_t)n));
	ev->ckpt_line_off = (uint64_t)at;
	ev->ckpt_line_valid = true;
	ev->since_ckpt = 0;
	ev->ckpt_seq = ev->seq;
	ev->last_ckpt_ns = cg_now_mono_ns();
	ev->seal_unsigned = false;
	return 0;
}

/* ---- the resume point ----------------------------------------------------------- */

struct resume_build {
	char *buf;
	size_t len, n_lines;
	uint64_t journal_tseq;
	char journal_hash[65];
};

static void resume_size(const char *key, void *value, void *arg)
{
	struct resume_build *b = arg;
	const struct tstate *t = value;
	(void)key;
	if (!t->keep) {
		b->journal_tseq = t->tseq;
		memcpy(b->journal_hash, t->hash, 65);
		return;
	}
	b->len += t->len;
	b->n_lines += t->n;
}

static void resume_copy(const char *key, void *value, void *arg)
{
	struct resume_build *b = arg;
	const struct tstate *t = value;
	(void)key;
	if (!t->keep)
		return;
	memcpy(b->buf + b->len, t->buf, t->len);
	b->len += t->len;
}

/*
 * Writer thread, right after a checkpoint: the state a start needs to go on
 * from it (resume.h), kept in ev->resume until the batch's packages are
 * handed on. Best effort: without one, the next start verifies everything.
 */
static void resume_make(struct cg_evidence *ev)
{
	struct cg_resume r = { .seq = ev->seq,
			       .ckpt_off = ev->ckpt_line_off,
			       .end = ev->seg_bytes,
			       .line_len = ev->last_line_len,
			       .mr = ev->mr };
	struct resume_build b = { .journal_hash = "" };
	memcpy(b.journal_hash, cg_journal_genesis(), 65);
	cg_smap_each(ev->traces, resume_size, &b);
	unsigned char root[CG_MERKLE_HASH_LEN];
	memcpy(r.head, ev->head, 65);
	cg_merkle_range_root(&ev->mr, root);
	cg_hex_encode(root, sizeof(root), r.root);
	snprintf(r.segment, sizeof(r.segment), "%s", ev->seg_name);
	r.journal_tseq = b.journal_tseq;
	memcpy(r.journal_hash, b.journal_hash, 65);
	r.n_lines = b.n_lines;
	size_t hl = 0, body = b.len;
	char *buf = r.line_len ? cg_resume_header(&r, body, &hl) : NULL;
	if (!buf)
		return;
	b.buf = buf + hl;
	b.len = 0;
	cg_smap_each(ev->traces, resume_copy, &b);
	free(ev->resume);
	ev->resume = buf;
	ev->resume_len = hl + b.len;
	ev->last_resume_ns = cg_now_mono_ns();
}

/* Package thread (or the writer, with no package thread): replace the file. */
static void resume_write(struct cg_evidence *ev, const char *buf, size_t len)
{
	char tmp[4300], dst[4300];
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", ev->state_dir, CG_RESUME_FILE);
	snprintf(dst, sizeof(dst), "%s/%s", ev->state_dir, CG_RESUME_FILE);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	bool ok = fd >= 0 && cg_write_all(fd, buf, len) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok || rename(tmp, dst) != 0) {
		(void)unlink(tmp);
		cg_log("warn", NULL, "evidence: resume point not written: %s", strerror(errno));
	}
}

/* mu held: evidence work not yet done, in event-sized units. */
static size_t pending_locked(const struct cg_evidence *ev)
{
	return ev->q_len + ev->inflight + ev->pb_pending * PKG_WEIGHT;
}

/* mu held: once pending is below the level asked for, write the eventfd (once). */
static void wake_if_below(struct cg_evidence *ev)
{
	if (ev->wake_fd < 0 || pending_locked(ev) >= ev->wake_level)
		return;
	uint64_t one = 1;
	(void)!write(ev->wake_fd, &one, sizeof(one));
	ev->wake_fd = -1;
}

/* One package: a directory under traces/, or members of its segment's archive. */
static int write_package(struct cg_evidence *ev, const struct package *pk)
{
	json_t *facts = pk->refused ? cg_refusal_facts(pk->trace, pk->ts, pk->refused) : NULL;
	if (pk->refused && !facts) {
		errno = ENOMEM;
		return -1;
	}
	int rc;
	struct cg_package r;
	if (!pk->archive) {
		rc = cg_trace_write_package(ev->state_dir, pk->trace, pk->t->buf, pk->t->len,
					    pk->verdict, facts, pk->replay, pk->diff);
	} else if ((rc = cg_package_render(pk->t->buf, pk->t->len, pk->verdict, facts, pk->replay,
					   pk->diff, &r)) == 0) {
		pthread_mutex_lock(&ev->live_mu);
		ev->live.ahead = hold_want(ev);
		atomic_store(&ev->live_ahead, ev->live.ahead);
		rc = cg_live_archive_append(&ev->live, ev->state_dir, pk->seg, pk->trace, &r);
		live_spare(ev);
		pthread_mutex_unlock(&ev->live_mu);
		cg_package_free(&r);
	}
	int e = errno;
	json_decref(facts);
	errno = e;
	return rc;
}

/*
 * Write one package; on the package thread (counted), a full file system is
 * waited out, retrying every PACKAGE_RETRY_MS, for PACKAGE_WAIT_MS from the
 * first package that found no room: a call admitted while another was
 * filling the disk had its package lost at once (s39d). Meanwhile the
 * packages behind it wait too, its call's promise stays counted, and
 * admission turns new calls away. Bounded, because a flush (an evidence
 * read, a start, a stop) waits for packages (review-s39): past the bound a
 * package is given up at once, logged, until one is written again.
 */
static void write_package_waiting(struct cg_evidence *ev, const struct package *pk, bool counted)
{
	bool waited = false;
	while (write_package(ev, pk) < 0) {
		int e = errno;
		pthread_mutex_lock(&ev->mu);
		bool stop = ev->pkg_stop;
		pthread_mutex_unlock(&ev->mu);
		int64_t now = cg_now_mono_ns();
		bool full = e == ENOSPC || e == EDQUOT;
		if (full && !ev->pkg_full_since_ns)
			ev->pkg_full_since_ns = now;
		if (!full || !counted || stop ||
		    now - ev->pkg_full_since_ns > (int64_t)PACKAGE_WAIT_MS * 1000000) {
			cg_log("error", pk->trace, "evidence: trace package not written: %s%s",
			       strerror(e),
			       e == ENOSPC || e == EDQUOT
				   ? " (callgate evidence rebuild writes it from the journal)"
				   : "");
			if (!atomic_exchange(&ev->pkg_lost, true))
				cg_log(
				    "warn", NULL,
				    "evidence: no resume point is written until a restart, which "
				    "verifies from the last one and rebuilds the package");
			return;
		}
		if (!waited)
			cg_log("warn", pk->trace,
			       "evidence: no space for a trace package under %s: waiting for room "
			       "(retried every %d ms)",
			       ev->state_dir, PACKAGE_RETRY_MS);
		waited = true;
		usleep(PACKAGE_RETRY_MS * 1000);
	}
	ev->pkg_full_since_ns = 0;
	if (waited)
		cg_log("info", pk->trace, "evidence: trace package written after waiting for room");
}

/*
 * Write (or, with !write, drop) a list of packages. With counted (the
 * package thread's batches), each one leaves pb_pending as soon as it is
 * written: admission reopens package by package, not after a whole batch,
 * so a call held back behind a flood waits for one package, not a batch.
 */
static size_t write_packages(struct cg_evidence *ev, struct package *pk, bool write, bool counted)
{
	size_t n = 0;
	while (pk) {
		struct package *nx = pk->next;
		/* A refusal's verdict (pk->verdict NULL) is derived from its event while rendering. */
		if (write && ev->cfg.write_traces)
			write_package_waiting(ev, pk, counted);
		tstate_free(pk->t);
		json_decref(pk->verdict);
		json_decref(pk->replay);
		json_decref(pk->diff);
		json_decref(pk->refused);
		free(pk);
		pk = nx;
		n++;
		if (counted) {
			pthread_mutex_lock(&ev->mu);
			ev->pb_pending--;
			wake_if_below(ev);
			pthread_cond_signal(&ev->room_cv);
			pthread_mutex_unlock(&ev->mu);
		}
	}
	return n;
}

/*
 * Package thread, mu NOT held: pack the packages of every journal segment
 * (never the one being written) last written to more than keep_s ago into
 * one archive each (retention.h), oldest first.
 */
static void retention_run(struct cg_evidence *ev, int64_t keep_s)
{
	char **names = NULL;
	size_t n = 0;
	if (cg_journal_segments(ev->state_dir, &names, &n) < 0)
		return;
	time_t now = time(NULL);
	for (size_t i = 0; i + 1 < n; i++) {
		char path[4300], why[300];
		struct stat st;
		snprintf(path, sizeof(path), "%s/journal/%s", ev->state_dir, names[i]);
		if (cg_archive_exists(ev->state_dir, names[i]))
			continue;
		if (stat(path, &st) != 0 || (int64_t)(now - st.st_mtime) < keep_s)
			break; /* later segments are newer */
		size_t packed = 0;
		if (cg_archive_pack_segment(ev->state_dir, names[i], &packed, why, sizeof(why)) <
		    0) {
			cg_log("warn", NULL, "evidence: retention: %s not packed: %s", names[i],
			       why);
			break;
		}
		cg_log("info", NULL,
		       "evidence: retention: packed %zu trace packages of segment %s into %s/",
		       packed, names[i], CG_ARCHIVE_DIR);
	}
	cg_strv_free(names, n);
}

static bool retention_due(const struct cg_evidence *ev)
{
	return ev->retention_s > 0 &&
	       cg_now_mono_ns() - ev->last_pack_ns >= (int64_t)ev->pack_tick_ms * 1000000;
}

/* Package thread, mu held: sleep until a batch comes, stop, or retention is due. */
static void package_wait(struct cg_evidence *ev)
{
	if (ev->retention_s <= 0) {
		pthread_cond_wait(&ev->pkg_cv, &ev->mu);
		return;
	}
	int64_t left = ev->last_pack_ns + (int64_t)ev->pack_tick_ms * 1000000 - cg_now_mono_ns();
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (left > 0 ? left : 0);
	ts.tv_sec = (time_t)(at / 1000000000);
	ts.tv_nsec = (long)(at % 1000000000);
	(void)pthread_cond_timedwait(&ev->pkg_cv, &ev->mu, &ts);
}

static void *package_main(void *arg)
{
	struct cg_evidence *ev = arg;
	/*
	 * Packages are views written after the fact: on a busy machine they
	 * yield the CPU to the calls being answered and run (nice 10, this
	 * thread only). Admission still holds new calls when they fall behind.
	 */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	cg_archive_sweep(ev->state_dir);
	pthread_mutex_lock(&ev->mu);
	for (;;) {
		while (!ev->pb_head && !ev->pkg_stop && !retention_due(ev))
			package_wait(ev);
		if (!ev->pb_head && !ev->pkg_stop) {
			/* Between batches: every package handed on so far is written. */
			int64_t keep = ev->retention_s;
			pthread_mutex_unlock(&ev->mu);
			retention_run(ev, keep);
			pthread_mutex_lock(&ev->mu);
			ev->last_pack_ns = cg_now_mono_ns();
			continue;
		}
		struct pkg_batch *pb = ev->pb_head;
		if (!pb)
			break;
		ev->pb_head = pb->next;
		if (!ev->pb_head)
			ev->pb_tail = &ev->pb_head;
		pthread_mutex_unlock(&ev->mu);
		(void)write_packages(ev, pb->pkgs, pb->write, true);
		/* After the packages it vouches for: see resume.h. */
		if (pb->resume && pb->write && !atomic_load(&ev->pkg_lost))
			resume_write(ev, pb->resume, pb->resume_len);
		free(pb->resume);
		pthread_mutex_lock(&ev->mu);
		if (pb->last > ev->done_ticket)
			ev->done_ticket = pb->last;
		pthread_cond_broadcast(&ev->done_cv);
		pthread_cond_signal(&ev->room_cv);
		free(pb);
	}
	pthread_mutex_unlock(&ev->mu);
	return NULL;
}

/* Hand this batch's packages on (under mu); waits when the backlog is at its cap. */
static void hand_packages(struct cg_evidence *ev, uint64_t last, bool write)
{
	struct pkg_batch *pb = calloc(1, sizeof(*pb));
	struct package *list = ev->pkgs;
	char *resume = ev->resume;
	size_t resume_len = ev->resume_len;
	ev->pkgs = NULL;
	ev->resume = NULL;
	if (!pb || !ev->pkg_started) {
		/* No memory for the hand-off: wait for the queue to drain, write here. */
		free(pb);
		while (ev->pb_head)
			pthread_cond_wait(&ev->done_cv, &ev->mu);
		pthread_mutex_unlock(&ev->mu);
		(void)write_packages(ev, list, write, false);
		if (resume && write && !atomic_load(&ev->pkg_lost))
			resume_write(ev, resume, resume_len);
		free(resume);
		pthread_mutex_lock(&ev->mu);
		if (last > ev->done_ticket)
			ev->done_ticket = last;
		pthread_cond_broadcast(&ev->done_cv);
		return;
	}
	for (struct package *p = list; p; p = p->next)
		pb->n++;
	pb->pkgs = list;
	pb->last = last;
	pb->write = write;
	pb->resume = resume;
	pb->resume_len = resume_len;
	while (ev->pb_pending > PKG_BACKLOG_CAP)
		pthread_cond_wait(&ev->room_cv, &ev->mu);
	*ev->pb_tail = pb;
	ev->pb_tail = &pb->next;
	ev->pb_pending += pb->n;
	pthread_cond_signal(&ev->pkg_cv);
}

struct open_list {
	char **v;
	size_t n;
	bool oom;
};

static void collect_open(const char *key, void *value, void *arg)
{
	struct open_list *ol = arg;
	const struct tstate *t = value;
	if (!t->keep)
		return;
	char *d = strdup(key);
	if (!d)
		ol->oom = true;
	else
		ol->v[ol->n++] = d;
}

/* At close, traces still open are marked incomplete before the last checkpoint. */
static int mark_all_incomplete(struct cg_evidence *ev)
{
	struct open_list ol = { calloc(cg_smap_count(ev->traces) + 1, sizeof(char *)), 0, false };
	if (!ol.v) {
		errno = ENOMEM;
		return -1;
	}
	cg_smap_each(ev->traces, collect_open, &ol);
	int rc = ol.oom ? -1 : 0;
	for (size_t i = 0; i < ol.n; i++) {
		if (rc == 0 && do_incomplete(ev, ol.v[i],
					     "the daemon stopped before the trace was sealed") < 0)
			rc = -1;
		free(ol.v[i]);
	}
	free(ol.v);
	return rc;
}

/* Process one batch; returns 0 or -1 with errno (the journal is then failed). */
static int process(struct cg_evidence *ev, struct item *batch, bool final)
{
	bool need_sync = final, sealed = false;
	for (struct item *it = batch; it; it = it->next) {
		int rc = 0;
		switch (it->kind) {
		case IT_EVENT:
			rc = emit(ev, it->trace, it->type, it->ts, it->payload, it->payload_len,
				  it->decision[0] ? it->decision : NULL);
			break;
		case IT_SEAL:
			rc = do_seal(ev, it);
			sealed = true;
			break;
		case IT_REFUSAL:
			rc = do_refusal(ev, it);
			sealed = true;
			break;
		case IT_INCOMPLETE:
			rc = do_incomplete(ev, it->trace, it->why ? it->why : CG_INCOMPLETE_WHY);
			sealed = true;
			break;
		case IT_FLUSH:
			break;
		}
		if (rc < 0)
			return -1;
		need_sync |= it->durable;
	}
	if (final && mark_all_incomplete(ev) < 0)
		return -1;
	/*
	 * The clean stop's own event, under the last checkpoint: a start that
	 * finds events after it knows this daemon did not write them (s42b
	 * F4: a line chained onto a stopped journal was signed by the next
	 * start, and passed replay from then on).
	 */
	if (final) {
		json_t *p = json_pack("{s:s}", "what", "the daemon stopped");
		int rc = p ? emit_json(ev, CG_JOURNAL_TRACE, CG_EV_STOPPED, p) : -1;
		json_decref(p);
		if (rc < 0)
			return -1;
	}
	if (batch_write(ev) < 0)
		return -1;
	int64_t since = cg_now_mono_ns() - ev->last_ckpt_ns;
	ev->seal_unsigned |= sealed;
	bool want_ckpt = ev->seq > ev->ckpt_seq &&
			 (final || ev->ckpt_now || ev->since_ckpt >= ev->cfg.checkpoint_every ||
			  since >= ev->cfg.checkpoint_ms * 1000000 ||
			  (ev->seal_unsigned && since >= SEAL_CKPT_GAP_MS * 1000000));
	/* A checkpoint may only name a head that is already durable. */
	if ((need_sync || want_ckpt) && fdatasync(ev->seg_fd) != 0)
		return -1;
	if (want_ckpt && checkpoint(ev, final) < 0)
		return -1;
	ev->ckpt_now &= !want_ckpt;
	/*
	 * A resume point names a checkpoint of this run at the head: at most one
	 * per checkpoint interval, and one at close.
	 */
	if (ev->ckpt_line_valid && ev->ckpt_seq == ev->seq &&
	    (final || cg_now_mono_ns() - ev->last_resume_ns >= ev->cfg.checkpoint_ms * 1000000))
		resume_make(ev);
	if (final && fdatasync(ev->ckpt_fd) != 0)
		return -1;
	return 0;
}

/* ---- healing a failed journal ------------------------------------------------- */

static int recover(struct cg_evidence *ev, json_t *torn, char *why, size_t why_len);
static struct item *item_event(const char *trace_id, int type, json_t *payload, bool durable);

/* Incomplete markers for every trace left open (a crash, a journal failure). */
struct incomplete_list {
	struct item *head, **tail;
	const char *why; /* static: recorded in each marker */
	json_t *names;	 /* when not NULL: the traces marked, by id */
	bool oom;
};

static void queue_incomplete(const char *key, void *value, void *arg)
{
	struct incomplete_list *l = arg;
	const struct tstate *t = value;
	if (!t->keep)
		return;
	struct item *it = calloc(1, sizeof(*it));
	if (!it || (l->names && json_array_append_new(l->names, json_string(key)) != 0)) {
		free(it);
		l->oom = true;
		return;
	}
	it->kind = IT_INCOMPLETE;
	it->why = l->why;
	snprintf(it->trace, sizeof(it->trace), "%s", key);
	*l->tail = it;
	l->tail = &it->next;
}

/*
 * A call a crash cut short after its permit (it may have run, and nothing
 * swept its write trees after it): its trace, the permit's time and
 * payload, for cg_evidence_cut_runs. A trace with its exec.finished had its
 * sweep: that event is noted after it.
 */
struct cut_runs {
	json_t *runs;
	bool oom;
};

static void note_cut_run(const char *key, void *value, void *arg)
{
	struct cut_runs *c = arg;
	const struct tstate *t = value;
	const struct tline *permit = NULL;
	for (size_t i = 0; t->keep && i < t->n; i++) {
		if (t->lines[i].type == CG_EV_EXEC_END)
			return;
		if (t->lines[i].type == CG_EV_PERMIT)
			permit = &t->lines[i];
	}
	if (!permit)
		return;
	json_t *line = json_loadb(t->buf + permit->off, permit->len, 0, NULL);
	json_t *payload = json_object_get(line, "payload");
	const char *ts = json_string_value(json_object_get(line, "ts"));
	/* The line was verified as it was read: only memory can fail here. */
	if (!json_is_object(payload) || !ts ||
	    json_array_append_new(c->runs, json_pack("{s:s,s:s,s:O}", "trace", key, "ts", ts,
						     "permit", payload)) != 0)
		c->oom = true;
	json_decref(line);
}

/* Can the journal's file system take a small synced write again? */
static bool disk_accepts_writes(struct cg_evidence *ev)
{
	static const char probe[4096];
	int fd = openat(ev->dir_fd, ".probe", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	bool ok = cg_write_all(fd, probe, sizeof(probe)) == 0 && fsync(fd) == 0;
	close(fd);
	(void)unlinkat(ev->dir_fd, ".probe", 0);
	return ok;
}

/*
 * Writer thread, journal failed, mu NOT held. Rebuild the writer's state from
 * the files as a start does (a torn tail is set aside, never dropped), then
 * write and sync a recovery event naming the failure, how long it lasted and
 * what was refused meanwhile, and mark every trace it left open incomplete.
 * 0 when the journal takes events again; -1 (state still failed) otherwise:
 * the next attempt starts again from the files.
 */
static int heal(struct cg_evidence *ev, int cause, int64_t failed_at_ns, uint64_t refused)
{
	if (!disk_accepts_writes(ev))
		return -1;
	char why[512] = "";
	json_t *torn = json_array();
	struct incomplete_list l = { NULL, &l.head, "the journal failed while the trace was open",
				     json_array(), false };
	struct cg_smap *fresh = cg_smap_new();
	int rc = -1;
	if (!torn || !l.names || !fresh)
		goto free_all;
	cg_smap_free(ev->traces, tstate_free);
	ev->traces = fresh;
	fresh = NULL;
	ev->seq = 0;
	memcpy(ev->head, cg_journal_genesis(), 65);
	ev->batch_len = 0;
	release_ahead(ev);
	if (ev->seg_fd >= 0)
		close(ev->seg_fd);
	ev->seg_fd = -1;
	if (recover(ev, torn, why, sizeof(why)) < 0) {
		cg_log("warn", NULL, "evidence: journal not reopened yet: %s", why);
		goto free_all;
	}
	cg_smap_each(ev->traces, queue_incomplete, &l);
	char from[40], to[40];
	cg_format_time(failed_at_ns, from, sizeof(from));
	cg_format_time(cg_now_wall_ns(), to, sizeof(to));
	json_t *p = json_pack("{s:s, s:s, s:s, s:s, s:I, s:O, s:O}", "what",
			      "journal reopened after a write failure", "error",
			      cg_errno_name(cause), "failed_at", from, "reopened_at", to, "refused",
			      (json_int_t)refused, "incomplete", l.names, "torn", torn);
	struct item *it = p ? item_event(CG_JOURNAL_TRACE, CG_EV_RECOVERY, p, true) : NULL;
	json_decref(p);
	if (!it || l.oom)
		goto free_all;
	it->next = l.head;
	l.head = it;
	if (process(ev, l.head, false) < 0)
		goto free_all;
	pthread_mutex_lock(&ev->mu);
	size_t i;
	json_t *x;
	json_array_foreach(l.names, i, x)
	{
		if (cg_smap_put(ev->cut, json_string_value(x), (void *)1) != 0)
			cg_log("error", json_string_value(x),
			       "evidence: cannot remember a cut trace");
	}
	pthread_mutex_unlock(&ev->mu);
	cg_log("info", NULL,
	       "evidence: journal reopened (failed %s: %s); %" PRIu64 " appends refused", from,
	       cg_errno_name(cause), refused);
	rc = 0;
free_all:
	while (l.head) {
		struct item *nx = l.head->next;
		item_free(l.head);
		l.head = nx;
	}
	cg_smap_free(fresh, tstate_free);
	json_decref(l.names);
	json_decref(torn);
	return rc;
}

/*
 * Writer thread, mu held: queue an incomplete marker for each trace an
 * append was refused for at the queue cap (past the cap on purpose: these
 * markers are how the refusal is recorded).
 */
static void append_cut_markers(struct cg_evidence *ev)
{
	size_t i;
	json_t *x;
	json_array_foreach(ev->cut_pending, i, x)
	{
		struct item *it = calloc(1, sizeof(*it));
		if (!it) {
			cg_log("error", json_string_value(x),
			       "evidence: out of memory marking a cut trace");
			continue;
		}
		it->kind = IT_INCOMPLETE;
		it->why = "an event of this trace was refused at the evidence queue's cap";
		it->ticket = ++ev->next_ticket;
		snprintf(it->trace, sizeof(it->trace), "%s", json_string_value(x));
		*ev->q_tail = it;
		ev->q_tail = &it->next;
		ev->q_len++;
	}
	json_array_clear(ev->cut_pending);
}

/* May this item wait for company before the writer takes it (LAZY_WRITE_MS)? */
static bool item_lazy(const struct item *it)
{
	return !it->durable && !it->gate && it->kind != IT_FLUSH;
}

/*
 * mu held: is there work the writer should not sleep on? An eager item, a
 * flush waiting, enough lazy items, or lazy items that have waited long
 * enough (a clock read only while nothing else is ready).
 */
static bool ready_locked(const struct cg_evidence *ev)
{
	if (!ev->q_head)
		return false;
	if (ev->q_eager || ev->q_len >= LAZY_WRITE_ITEMS || ev->failed || ev->flushers)
		return true;
	return cg_now_mono_ns() - ev->lazy_since_ns >= (int64_t)LAZY_WRITE_MS * 1000000;
}

/* Writer thread, mu held, journal failed: wait a probe interval, then try. */
static void try_heal(struct cg_evidence *ev)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += HEAL_PROBE_MS / 1000;
	if (pthread_cond_timedwait(&ev->work_cv, &ev->mu, &ts) != ETIMEDOUT || ev->stop)
		return;
	int cause = ev->failed;
	int64_t at = ev->failed_at_ns;
	uint64_t refused = ev->refused;
	pthread_mutex_unlock(&ev->mu);
	int rc = heal(ev, cause, at, refused);
	pthread_mutex_lock(&ev->mu);
	if (rc == 0) {
		ev->failed = 0;
		atomic_store(&ev->failed_seen, 0);
	}
}

static void *writer_main(void *arg)
{
	struct cg_evidence *ev = arg;
	pthread_mutex_lock(&ev->mu);
	for (;;) {
		while (!ready_locked(ev) && !ev->stop) {
			if (ev->failed) {
				try_heal(ev);
				continue;
			}
			if (ev->since_ckpt == 0 && !ev->q_head) {
				pthread_cond_wait(&ev->work_cv, &ev->mu);
				continue;
			}
			/*
			 * Events not yet under a checkpoint: wake when the interval is
			 * due; refusals waiting: when the oldest has waited long enough.
			 */
			int64_t due = INT64_MAX;
			if (ev->since_ckpt)
				due = ev->last_ckpt_ns + (ev->seal_unsigned
							      ? SEAL_CKPT_GAP_MS * 1000000
							      : ev->cfg.checkpoint_ms * 1000000);
			if (ev->q_head &&
			    ev->lazy_since_ns + (int64_t)LAZY_WRITE_MS * 1000000 < due)
				due = ev->lazy_since_ns + (int64_t)LAZY_WRITE_MS * 1000000;
			struct timespec ts = { (time_t)(due / 1000000000),
					       (long)(due % 1000000000) };
			if (pthread_cond_timedwait(&ev->work_cv, &ev->mu, &ts) == ETIMEDOUT)
				break;
		}
		bool final = ev->stop;
		append_cut_markers(ev);
		struct item *batch = ev->q_head;
		ev->q_head = NULL;
		ev->q_tail = &ev->q_head;
		ev->inflight = ev->q_len;
		ev->q_len = 0;
		ev->q_eager = false;
		uint64_t last = ev->next_ticket;
		bool failed = ev->failed != 0;
		pthread_mutex_unlock(&ev->mu);

		if (ev->stall_ms)
			usleep((useconds_t)ev->stall_ms * 1000);
		int rc = failed ? -1 : process(ev, batch, final);
		int e = errno ? errno : EIO;
		pthread_mutex_lock(&ev->mu);
		if (rc < 0 && !ev->failed) {
			ev->failed = e;
			atomic_store(&ev->failed_seen, e);
			ev->failed_at_ns = cg_now_wall_ns();
			ev->refused = 0;
			cg_log("error", NULL,
			       "evidence: journal failed (%s); refusing further events",
			       strerror(e));
		}
		/* Only a batch that reached the disk counts as synced (write-ahead). */
		if (rc == 0)
			ev->synced_ticket = last;
		pthread_cond_broadcast(&ev->done_cv);
		pthread_mutex_unlock(&ev->mu);

		while (batch) {
			struct item *nx = batch->next;
			if (batch->gate)
				cg_gate_open(batch->gate, rc == 0 ? CG_GATE_GO : CG_GATE_REFUSED);
			item_free(batch);
			batch = nx;
		}
		pthread_mutex_lock(&ev->mu);
		hand_packages(ev, last, rc == 0);
		ev->inflight = 0; /* its packages are counted now */
		wake_if_below(ev);
		if (final)
			break;
	}
	pthread_mutex_unlock(&ev->mu);
	return NULL;
}

/* Queue an item (owned from here on); durable: wait for its sync. */
static int enqueue(struct cg_evidence *ev, struct item *it)
{
	int saved = 0;
	pthread_mutex_lock(&ev->mu);
	if (ev->failed || ev->stop) {
		saved = EIO;
		ev->refused++;
	} else if (it->kind != IT_FLUSH && cg_smap_get(ev->cut, it->trace)) {
		saved = ESTALE; /* marked incomplete when the journal healed */
	} else if (ev->q_len >= QUEUE_CAP) {
		/*
		 * An event that cannot be queued is never dropped silently: its
		 * trace takes no more events (its permit fails, so nothing runs)
		 * and the writer marks it incomplete, naming why.
		 */
		saved = EAGAIN;
		if ((it->kind == IT_EVENT || it->kind == IT_REFUSAL) &&
		    strcmp(it->trace, CG_JOURNAL_TRACE) != 0 && !cg_smap_get(ev->cut, it->trace) &&
		    (cg_smap_put(ev->cut, it->trace, (void *)1) != 0 ||
		     json_array_append_new(ev->cut_pending, json_string(it->trace)) != 0))
			cg_log("error", it->trace,
			       "evidence: cannot remember a trace cut at the cap");
	} else {
		/*
		 * A writer may sleep on an empty queue with no deadline, or until
		 * its lazy items are due: the first item of a queue wakes it (to
		 * take it, or to set that deadline), and later ones only when they
		 * make the queue ready (an eager item, or enough lazy ones).
		 */
		bool wake =
		    ev->q_len == 0 ||
		    (!ready_locked(ev) && (!item_lazy(it) || ev->q_len + 1 >= LAZY_WRITE_ITEMS));
		it->ticket = ++ev->next_ticket;
		it->next = NULL;
		*ev->q_tail = it;
		ev->q_tail = &it->next;
		if (ev->q_len++ == 0)
			ev->lazy_since_ns = cg_now_mono_ns();
		ev->q_eager |= !item_lazy(it);
		if (wake)
			pthread_cond_signal(&ev->work_cv);
		uint64_t t = it->ticket;
		bool durable = it->durable && !it->gate; /* a gated item is waited for elsewhere */
		it = NULL;
		while (durable && ev->synced_ticket < t && !ev->failed)
			pthread_cond_wait(&ev->done_cv, &ev->mu);
		/* Not synced, or the journal failed meanwhile: never report durable. */
		if (durable && (ev->synced_ticket < t || ev->failed))
			saved = EIO;
	}
	pthread_mutex_unlock(&ev->mu);
	item_free(it);
	if (saved) {
		errno = saved;
		return -1;
	}
	return 0;
}

/*
 * A payload's bytes in its line, within the journal's line bound. A member
 * that would carry the line past it (s44b F1: a gate of 240 actions on 4 KB
 * paths through a link, each action copied as given and resolved, and every
 * emoji six bytes as a \u pair: one line past 4 MiB made the writer fail
 * the journal for every uid) is replaced, the largest first, by a stand-in
 * {"oversize": BYTES, "sha256": HEX of its bytes}; the reply and the
 * decision, which replay reads, last. The payload object itself changes, so
 * the line, replay and the package read the same members. NULL on ENOMEM,
 * or E2BIG when no member is left to replace.
 */
#define EVENT_PAYLOAD_MAX (CG_LINE_MAX - 4096) /* the envelope's room */
#define STANDIN_MIN	  512

static char *dump_fitted(json_t *payload)
{
	const size_t flags = JSON_COMPACT | JSON_ENSURE_ASCII;
	char *s = json_dumps(payload, flags);
	for (int pass = 0; s && strlen(s) > EVENT_PAYLOAD_MAX && json_is_object(payload);) {
		const char *k;
		json_t *v;
		char key[256] = "", *big = NULL;
		size_t bl = 0;
		json_object_foreach(payload, k, v)
		{
			bool kept = strcmp(k, "reply") == 0 || strcmp(k, "decision") == 0;
			char *m = (pass || !kept) && strlen(k) < sizeof(key)
				      ? json_dumps(v, flags | JSON_ENCODE_ANY)
				      : NULL;
			size_t ml = m ? strlen(m) : 0;
			if (ml > bl && ml >= STANDIN_MIN) {
				free(big);
				big = m, bl = ml;
				(void)snprintf(key, sizeof(key), "%s", k);
			} else {
				free(m);
			}
		}
		if (!big && pass++ == 0)
			continue; /* then the reply and the decision too */
		free(s);
		s = NULL;
		if (!big) {
			errno = E2BIG;
			return NULL;
		}
		char hex[65];
		cg_sha256_hex(big, bl, hex);
		free(big);
		if (json_object_set_new(
			payload, key,
			json_pack("{s:I,s:s}", "oversize", (json_int_t)bl, "sha256", hex)) != 0)
			return NULL;
		s = json_dumps(payload, flags);
	}
	if (s && strlen(s) > EVENT_PAYLOAD_MAX) {
		free(s);
		errno = E2BIG;
		return NULL;
	}
	return s;
}

static struct item *item_event(const char *trace_id, int type, json_t *payload, bool durable)
{
	struct item *it = calloc(1, sizeof(*it));
	if (!it)
		return NULL;
	it->kind = IT_EVENT;
	it->type = type;
	it->durable = durable;
	memcpy(it->trace, trace_id, strlen(trace_id) + 1);
	cg_format_time(cg_now_wall_ns(), it->ts, sizeof(it->ts));
	/* Serialised now, on the caller's thread: the bytes are those of this moment. */
	it->payload = dump_fitted(payload);
	if (!it->payload) {
		free(it);
		return NULL;
	}
	it->payload_len = strlen(it->payload);
	if (type == CG_EV_DECISION || type == CG_EV_REFUSAL) {
		const json_t *dj =
		    type == CG_EV_DECISION ? payload : json_object_get(payload, "decision");
		const char *d = json_string_value(json_object_get(dj, "decision"));
		if (d)
			snprintf(it->decision, sizeof(it->decision), "%s", d);
	}
	return it;
}

/* May a caller append this event? The replay, seal, incomplete, recovery and stopped events are ours. */
static bool caller_event_ok(const char *trace_id, enum cg_event_type type, const json_t *payload)
{
	return cg_trace_id_valid(trace_id) && strcmp(trace_id, CG_JOURNAL_TRACE) != 0 &&
	       (int)type >= 0 && type < CG_EV__COUNT && type != CG_EV_REPLAY &&
	       type != CG_EV_SEAL && type != CG_EV_INCOMPLETE && type != CG_EV_RECOVERY &&
	       type != CG_EV_REFUSAL && type != CG_EV_STOPPED && json_is_object(payload);
}

/*
 * Queue one event of a caller's (payload consumed): ok says the caller's
 * checks passed. kind IT_REFUSAL makes the event seal its trace; a gate
 * is opened by the writer once the event is durable.
 */
static int queue_event(struct cg_evidence *ev, bool ok, const char *trace_id, int type,
		       json_t *payload, bool durable, enum item_kind kind, _Atomic uint32_t *gate)
{
	struct item *it = ev && ok ? item_event(trace_id, type, payload, durable) : NULL;
	if (it && kind == IT_REFUSAL)
		it->refused = json_incref(payload); /* the package's facts (struct package) */
	json_decref(payload);
	if (!it) {
		errno = ev && ok ? ENOMEM : EINVAL;
		return -1;
	}
	it->kind = kind;
	it->gate = gate;
	return enqueue(ev, it);
}

int cg_evidence_append(struct cg_evidence *ev, const char *trace_id, enum cg_event_type type,
		       json_t *payload, bool durable)
{
	return queue_event(ev, caller_event_ok(trace_id, type, payload), trace_id, (int)type,
			   payload, durable, IT_EVENT, NULL);
}

int cg_evidence_append_gated(struct cg_evidence *ev, const char *trace_id, enum cg_event_type type,
			     json_t *payload, _Atomic uint32_t *gate)
{
	return queue_event(ev, gate && caller_event_ok(trace_id, type, payload), trace_id,
			   (int)type, payload, true, IT_EVENT, gate);
}

int cg_evidence_refuse(struct cg_evidence *ev, const char *trace_id, json_t *payload)
{
	/* What replay requires of a refusal (journal.c): a reply, and a decision, if any, it can read. */
	const json_t *dj = json_object_get(payload, "decision");
	const char *d = json_string_value(json_object_get(dj, "decision"));
	bool ok = cg_trace_id_valid(trace_id) && strcmp(trace_id, CG_JOURNAL_TRACE) != 0 &&
		  json_is_object(payload) && json_is_object(json_object_get(payload, "reply")) &&
		  (!dj || (d && strlen(d) < CG_DECISION_CAP));
	return queue_event(ev, ok, trace_id, CG_EV_REFUSAL, payload, false, IT_REFUSAL, NULL);
}

int cg_evidence_seal(struct cg_evidence *ev, const char *trace_id, json_t *verdict)
{
	int saved = 0;
	struct item *it = NULL;
	if (!ev || !cg_trace_id_valid(trace_id) || strcmp(trace_id, CG_JOURNAL_TRACE) == 0 ||
	    !json_is_object(verdict)) {
		saved = EINVAL;
		goto free_verdict;
	}
	it = calloc(1, sizeof(*it));
	if (!it || !(it->verdict = cg_verdict_normalize(verdict, trace_id))) {
		free(it);
		saved = ENOMEM;
		goto free_verdict;
	}
	it->kind = IT_SEAL;
	memcpy(it->trace, trace_id, strlen(trace_id) + 1);
	json_decref(verdict);
	return enqueue(ev, it);
free_verdict:
	json_decref(verdict);
	errno = saved;
	return -1;
}

/* The reserve cfg asks for on a file system of total bytes (evidence.h). */
static uint64_t reserve_of(const struct cg_evidence_config *cfg, uint64_t total)
{
	if (cfg->no_reserve)
		return 0;
	if (cfg->reserve_pct)
		return total / 100 * cfg->reserve_pct;
	if (cfg->reserve_bytes)
		return cfg->reserve_bytes;
	uint64_t pct5 = total / 20, cap = (uint64_t)1 << 30;
	return pct5 < cap ? pct5 : cap;
}

void cg_evidence_promise(struct cg_evidence *ev, uint64_t bytes)
{
	pthread_mutex_lock(&ev->mu);
	ev->promised += bytes;
	atomic_store(&ev->promised_seen, ev->promised);
	pthread_mutex_unlock(&ev->mu);
}

void cg_evidence_promise_end(struct cg_evidence *ev, uint64_t bytes)
{
	struct promise *p = malloc(sizeof(*p));
	pthread_mutex_lock(&ev->mu);
	if (!p || ev->done_ticket >= ev->next_ticket) {
		/* Nothing of it still waits (or no memory to wait: let it go now). */
		ev->promised -= bytes < ev->promised ? bytes : ev->promised;
		free(p);
	} else {
		*p = (struct promise){ NULL, ev->next_ticket, bytes };
		*ev->promises_tail = p;
		ev->promises_tail = &p->next;
	}
	pthread_mutex_unlock(&ev->mu);
}

/* mu held: the bytes still promised, once what is on disk is let go. */
static uint64_t promised_locked(struct cg_evidence *ev)
{
	while (ev->promises && ev->promises->ticket <= ev->done_ticket) {
		struct promise *p = ev->promises;
		ev->promises = p->next;
		if (!ev->promises)
			ev->promises_tail = &ev->promises;
		ev->promised -= p->bytes < ev->promised ? p->bytes : ev->promised;
		free(p);
	}
	atomic_store(&ev->promised_seen, ev->promised);
	return ev->promised;
}

bool cg_evidence_disk_low(struct cg_evidence *ev, uint64_t *avail, uint64_t *promised_out,
			  uint64_t *reserve)
{
	struct statvfs sv;
	*avail = *promised_out = 0;
	*reserve = ev->reserve;
	if (!ev->reserve)
		return false;
	pthread_mutex_lock(&ev->mu);
	/*
	 * A call's promise ends once its lines are on disk; its package is
	 * written after, by the package thread. Those still to be written count
	 * too: under load thousands wait, and a refusal flood took the disk
	 * from the reserve down to 360 KiB free (CI, under ASan).
	 */
	uint64_t promised = *promised_out =
	    promised_locked(ev) + (uint64_t)ev->pb_pending * PKG_DISK_BYTES;
	pthread_mutex_unlock(&ev->mu);
	int asked = fstatvfs(ev->dir_fd, &sv);
	int e = errno;
	if (asked == 0) {
		uint64_t free_now = (uint64_t)sv.f_bavail * sv.f_frsize;
		/*
		 * What admitted calls will still write is as good as written,
		 * less what the evidence already holds unwritten for it.
		 */
		uint64_t spare = atomic_load(&ev->spare_seg) + atomic_load(&ev->spare_ckpt) +
				 atomic_load(&ev->spare_live);
		uint64_t need = promised > spare ? promised - spare : 0;
		*avail = free_now > need ? free_now - need : 0;
	}
	bool low = asked != 0 || *avail < ev->reserve;
	if (atomic_exchange(&ev->disk_low, low) == low)
		return low;
	if (asked != 0)
		cg_log("error", NULL,
		       "evidence: cannot ask the file system of %s for its free space (%s): new "
		       "calls are turned away",
		       ev->state_dir, strerror(e));
	else if (low)
		cg_log("error", NULL,
		       "evidence: %" PRIu64 " bytes free under %s once admitted calls are recorded "
		       "(%" PRIu64 " promised), below the disk reserve of %" PRIu64
		       ": new calls are turned away until there is room (--disk-reserve)",
		       *avail, ev->state_dir, promised, ev->reserve);
	else
		cg_log("info", NULL,
		       "evidence: %" PRIu64 " bytes free under %s again: calls are taken", *avail,
		       ev->state_dir);
	return low;
}

int cg_evidence_failed(struct cg_evidence *ev)
{
	return atomic_load(&ev->failed_seen); /* on every request: no lock */
}

bool cg_evidence_backlogged(struct cg_evidence *ev, size_t *pending)
{
	pthread_mutex_lock(&ev->mu);
	size_t n = ev->q_len;
	pthread_mutex_unlock(&ev->mu);
	if (pending)
		*pending = n;
	return n >= ev->high_water;
}

size_t cg_evidence_pending(struct cg_evidence *ev)
{
	pthread_mutex_lock(&ev->mu);
	size_t n = pending_locked(ev);
	pthread_mutex_unlock(&ev->mu);
	return n;
}

void cg_evidence_wake_below(struct cg_evidence *ev, size_t level, int fd)
{
	pthread_mutex_lock(&ev->mu);
	ev->wake_level = level;
	ev->wake_fd = fd;
	wake_if_below(ev);
	pthread_mutex_unlock(&ev->mu);
}

/* A positive number from a test-only environment variable, or def. */
void cg_evidence_set_packages(struct cg_evidence *ev, bool archive)
{
	if (ev)
		atomic_store(&ev->archive, archive);
}

void cg_evidence_set_retention(struct cg_evidence *ev, int64_t keep_s)
{
	if (!ev)
		return;
	pthread_mutex_lock(&ev->mu);
	ev->retention_s = keep_s > 0 ? keep_s : 0;
	pthread_cond_signal(&ev->pkg_cv);
	pthread_mutex_unlock(&ev->mu);
}

int cg_evidence_flush(struct cg_evidence *ev)
{
	if (!ev) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&ev->mu);
	uint64_t t = ev->next_ticket;
	if (ev->flushers++ == 0 && ev->q_head)
		pthread_cond_signal(&ev->work_cv); /* lazy items: take them now */
	while (ev->done_ticket < t && !ev->failed)
		pthread_cond_wait(&ev->done_cv, &ev->mu);
	ev->flushers--;
	int failed = ev->failed;
	pthread_mutex_unlock(&ev->mu);
	if (failed) {
		errno = EIO;
		return -1;
	}
	return 0;
}

json_t *cg_evidence_cut_runs(struct cg_evidence *ev)
{
	json_t *runs = ev ? ev->cut_runs : NULL;
	if (ev)
		ev->cut_runs = NULL;
	return runs ? runs : json_array();
}

int cg_evidence_note_swept(struct cg_evidence *ev, json_t *calls)
{
	json_t *p = json_pack("{s:s,s:o}", "what",
			      "the write trees of calls a crash cut short, swept at this start",
			      "calls", calls);
	struct item *it = p ? item_event(CG_JOURNAL_TRACE, CG_EV_RECOVERY, p, true) : NULL;
	json_decref(p);
	if (!it) {
		errno = ENOMEM;
		return -1;
	}
	return enqueue(ev, it); /* durable: returns once it is on disk */
}

/* ---- open and recovery ------------------------------------------------------------ */

struct ckpt_pos {
	uint64_t seq;
	char head[65];
	char root[65]; /* "" on lines older than the Merkle tree */
};

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

/*
 * Move a torn tail aside (never drop it): the bytes go to journal/torn-…bin,
 * the file is cut back to its last whole line, and both are synced.
 */
static int set_aside(struct cg_evidence *ev, const char *path, const char *what, uint64_t next_seq,
		     const char *tail, size_t tail_len, size_t valid_len, json_t *torn)
{
	char dst[4300];
	int fd = -1;
	for (int n = 0; n < 1000 && fd < 0; n++) {
		if (n == 0)
			snprintf(dst, sizeof(dst), "%s/journal/torn-%s-%016" PRIu64 ".bin",
				 ev->state_dir, what, next_seq);
		else
			snprintf(dst, sizeof(dst), "%s/journal/torn-%s-%016" PRIu64 "-%d.bin",
				 ev->state_dir, what, next_seq, n);
		fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return -1;
	}
	if (fd < 0)
		return -1;
	if (cg_write_all(fd, tail, tail_len) < 0 || fsync(fd) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	if (fsync(ev->dir_fd) != 0 || truncate(path, (off_t)valid_len) != 0 ||
	    fsync_path(path) != 0)
		return -1;
	char h[65];
	cg_sha256_hex(tail, tail_len, h);
	const char *base = strrchr(dst, '/');
	json_array_append_new(torn,
			      json_pack("{s:s, s:s, s:I, s:s, s:I}", "file", base + 1, "from",
					strrchr(path, '/') + 1, "offset", (json_int_t)valid_len,
					"sha256", h, "bytes", (json_int_t)tail_len));
	cg_log("warn", NULL, "evidence: torn tail of %zu bytes set aside as %s", tail_len, dst);
	return 0;
}

/* The checkpoint lines from byte offset from on (a resume point's checkpoint, or 0). */
static int load_checkpoints(struct cg_evidence *ev, uint64_t from, struct ckpt_pos **out,
			    size_t *n_out, json_t *torn, char *why, size_t why_len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", ev->state_dir);
	char *buf = NULL;
	size_t len = 0, n = 0;
	struct ckpt_pos *v = NULL;
	*out = NULL;
	*n_out = 0;
	if (cg_file_read_from(path, from, SEGMENT_READ_CAP, &buf, &len) < 0) {
		if (errno == ENOENT && from == 0)
			return 0;
		snprintf(why, why_len, "cannot read %.300s: %s", path, strerror(errno));
		return -1;
	}
	size_t pos = 0;
	int rc = -1;
	while (pos < len) {
		char *nl = memchr(buf + pos, '\n', len - pos);
		if (!nl) {
			uint64_t next = n ? v[n - 1].seq + 1 : 1;
			if (set_aside(ev, path, "checkpoints", next, buf + pos, len - pos,
				      from + pos, torn) < 0) {
				snprintf(why, why_len, "cannot set aside the torn checkpoint: %s",
					 strerror(errno));
				goto free_buf;
			}
			break;
		}
		size_t ll = (size_t)(nl - (buf + pos)) + 1;
		struct cg_ckpt c;
		char w[160];
		if (cg_ckpt_parse(buf + pos, ll, &c, w, sizeof(w)) < 0) {
			snprintf(why, why_len, "checkpoint %zu: %s", n + 1, w);
			goto free_buf;
		}
		struct ckpt_pos *q = realloc(v, (n + 1) * sizeof(*v));
		if (!q) {
			snprintf(why, why_len, "out of memory");
			goto free_buf;
		}
		v = q;
		v[n].seq = c.seq;
		memcpy(v[n].head, c.head, 65);
		memcpy(v[n].root, c.root, 65);
		n++;
		pos += ll;
	}
	*out = v;
	*n_out = n;
	v = NULL;
	rc = 0;
free_buf:
	free(v);
	free(buf);
	return rc;
}

static bool trace_dir_exists(const char *state_dir, const char *trace)
{
	char p[4300];
	snprintf(p, sizeof(p), "%s/traces/%s", state_dir, trace);
	struct stat st;
	return stat(p, &st) == 0;
}

/* True when the range's root is hex (64 lower-case hex digits). */
static bool root_is(const struct cg_merkle_range *r, const char *hex)
{
	unsigned char root[CG_MERKLE_HASH_LEN];
	char mine[2 * CG_MERKLE_HASH_LEN + 1];
	cg_merkle_range_root(r, root);
	cg_hex_encode(root, sizeof(root), mine);
	return strcmp(mine, hex) == 0;
}

/* Forget what a start rebuilt: the writer's state of an empty journal. */
static int state_reset(struct cg_evidence *ev)
{
	struct cg_smap *fresh = cg_smap_new();
	if (!fresh)
		return -1;
	cg_smap_free(ev->traces, tstate_free);
	ev->traces = fresh;
	ev->seq = 0;
	memcpy(ev->head, cg_journal_genesis(), 65);
	cg_merkle_range_init(&ev->mr);
	return 0;
}

/* Re-hash and re-link the open traces' lines of a resume point into ev->traces. */
static int resume_traces(struct cg_evidence *ev, const struct cg_resume *r, char *why,
			 size_t why_len)
{
	struct tstate *jt = tstate_get(ev, CG_JOURNAL_TRACE, true);
	if (!jt) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	if (r->journal_tseq == 0 && strcmp(r->journal_hash, cg_journal_genesis()) != 0) {
		snprintf(why, why_len, "the journal trace's head is not the genesis");
		return -1;
	}
	jt->tseq = r->journal_tseq;
	memcpy(jt->hash, r->journal_hash, 65);
	const char *p = r->lines, *end = r->lines + r->lines_len;
	for (size_t i = 1; p < end; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = (size_t)(nl - p) + 1;
		struct cg_evline o;
		const char *check;
		char w[200];
		struct tstate *t = NULL;
		if (cg_evline_parse(p, ll, &o, &check, w, sizeof(w)) < 0 || !o.hash_ok ||
		    o.seq > r->seq || !(t = tstate_get(ev, o.trace, true)) || !t->keep ||
		    o.tseq != t->tseq + 1 || strcmp(o.tprev, t->hash) != 0) {
			snprintf(why, why_len, "open-trace line %zu does not check out", i);
			return -1;
		}
		t->tseq = o.tseq;
		memcpy(t->hash, o.hash, 65);
		if (tstate_add_line(t, p, ll, o.seq, o.type, o.decision[0] ? o.decision : NULL) <
		    0) {
			snprintf(why, why_len, "out of memory");
			return -1;
		}
		p += ll;
	}
	return 0;
}

/*
 * Take up the writer's state at the resume point when it checks out against
 * the signed checkpoint and the journal (resume.h). Then a start reads only
 * what follows it: names[*seg] from byte *off on, checkpoints from *ckpt_off.
 * 0, or -1 with why and the state as it was (empty).
 */
static int resume_from(struct cg_evidence *ev, char **names, size_t n_names, size_t *seg,
		       uint64_t *off, uint64_t *ckpt_off, bool *at_stop, char *why, size_t why_len)
{
	char path[4300];
	char *buf = NULL;
	size_t len = 0, s = 0;
	struct cg_resume r;
	snprintf(path, sizeof(path), "%s/%s", ev->state_dir, CG_RESUME_FILE);
	if (cg_file_read(path, RESUME_READ_CAP, &buf, &len) < 0) {
		snprintf(why, why_len, "%s", errno == ENOENT ? "there is none" : strerror(errno));
		return -1;
	}
	int rc = -1;
	if (cg_resume_parse(buf, len, &r, why, why_len) < 0 ||
	    cg_resume_check(ev->state_dir, &r, ev->key, ev->key_fp, why, why_len) < 0)
		goto out;
	while (s < n_names && strcmp(names[s], r.segment) != 0)
		s++;
	if (s == n_names) {
		snprintf(why, why_len, "its segment is not in the journal");
		goto out;
	}
	if (resume_traces(ev, &r, why, why_len) < 0)
		goto out;
	ev->mr = r.mr;
	ev->seq = r.seq;
	memcpy(ev->head, r.head, 65);
	ev->last_line_len = r.line_len;
	*seg = s;
	*off = r.end;
	*ckpt_off = r.ckpt_off;
	*at_stop = r.at_stop;
	rc = 0;
out:
	free(buf);
	return rc;
}

/*
 * Rebuild the writer's state from the files, verifying as it reads (the
 * daemon appends only to a journal it has verified): chain heads, the
 * Merkle frontier, the traces still open, and packages lost to a crash.
 * From a resume point that checks out, only the events after its signed
 * checkpoint are read; otherwise (or with cfg.verify_all) the whole journal.
 */
static int recover(struct cg_evidence *ev, json_t *torn, char *why, size_t why_len)
{
	char **names = NULL;
	size_t n_names = 0, n_ck = 0, ci = 0, s0 = 0;
	uint64_t off0 = 0, ckpt_off = 0;
	struct ckpt_pos *ck = NULL;
	char *buf = NULL;
	int rc = -1;
	struct cg_archive_index *ix = NULL; /* loaded the first time a package is missing */
	bool ix_loaded = false;
	cg_merkle_range_init(&ev->mr);
	if (cg_journal_segments(ev->state_dir, &names, &n_names) < 0) {
		snprintf(why, why_len, "cannot list the journal: %s", strerror(errno));
		return -1;
	}
	char rwhy[300] = "";
	bool resumed = false, resumed_at_stop = false;
	uint64_t stop_seq = 0; /* the last clean stop's event */
	if (ev->cfg.verify_all)
		snprintf(rwhy, sizeof(rwhy), "a full verification was asked for");
	else if (n_names && resume_from(ev, names, n_names, &s0, &off0, &ckpt_off, &resumed_at_stop,
					rwhy, sizeof(rwhy)) == 0)
		resumed = true;
	else if (state_reset(ev) < 0) {
		snprintf(why, why_len, "out of memory");
		goto free_all;
	}
	uint64_t resumed_at = ev->seq;
	if (resumed_at_stop)
		stop_seq = resumed_at;
	if (n_names && !resumed)
		cg_log("info", NULL, "evidence: verifying the whole journal (resume point: %s)",
		       rwhy);
	if (load_checkpoints(ev, ckpt_off, &ck, &n_ck, torn, why, why_len) < 0)
		goto free_all;
	/*
	 * Archives packages were appended to after the resume point may end in a
	 * torn package (a crash mid-append): cut it off before looking for the
	 * packages the scan below expects.
	 */
	for (size_t s = s0; s < n_names; s++) {
		uint64_t cut = 0;
		if (cg_live_archive_repair(ev->state_dir, names[s], false, &cut) < 0)
			cg_log("warn", NULL, "evidence: the archive of %s was not repaired: %s",
			       names[s], strerror(errno));
		else if (cut)
			cg_log("warn", NULL,
			       "evidence: %" PRIu64 " torn byte(s) cut off the end of %s's archive",
			       cut, names[s]);
	}
	char path[4300];
	for (size_t s = s0; s < n_names; s++) {
		snprintf(path, sizeof(path), "%s/journal/%s", ev->state_dir, names[s]);
		uint64_t base = s == s0 ? off0 : 0;
		size_t len = 0, pos = 0;
		free(buf);
		buf = NULL;
		if (cg_file_read_from(path, base, SEGMENT_READ_CAP, &buf, &len) < 0) {
			snprintf(why, why_len, "cannot read %.300s: %s", path,
				 errno == ERANGE ? "shorter than its resume point"
						 : strerror(errno));
			goto free_all;
		}
		while (pos < len) {
			char *nl = memchr(buf + pos, '\n', len - pos);
			if (!nl) {
				if (s + 1 != n_names) {
					snprintf(why, why_len,
						 "%s ends mid-line but is not the last "
						 "segment",
						 names[s]);
					goto free_all;
				}
				if (set_aside(ev, path, "journal", ev->seq + 1, buf + pos,
					      len - pos, base + pos, torn) < 0) {
					snprintf(why, why_len, "cannot set aside the torn tail: %s",
						 strerror(errno));
					goto free_all;
				}
				break;
			}
			size_t ll = (size_t)(nl - (buf + pos)) + 1;
			struct cg_evline o;
			const char *check;
			char w[200];
			if (cg_evline_parse(buf + pos, ll, &o, &check, w, sizeof(w)) < 0) {
				snprintf(why, why_len, "%s byte %" PRIu64 ": %s: %s", names[s],
					 base + pos, check, w);
				goto free_all;
			}
			struct tstate *t = tstate_get(ev, o.trace, true);
			if (!t) {
				snprintf(why, why_len, "out of memory");
				goto free_all;
			}
			const char *bad = !o.hash_ok		     ? "hash"
					  : o.seq != ev->seq + 1     ? "sequence"
					  : strcmp(o.prev, ev->head) ? "link"
					  : o.tseq != t->tseq + 1 || strcmp(o.tprev, t->hash) != 0
					      ? "trace_link"
					      : NULL;
			if (bad) {
				snprintf(why, why_len, "%s byte %" PRIu64 " (seq %" PRIu64 "): %s",
					 names[s], base + pos, o.seq, bad);
				goto free_all;
			}
			unsigned char leaf[CG_MERKLE_HASH_LEN];
			cg_merkle_leaf_hash(buf + pos, ll, leaf);
			if (cg_merkle_range_append(&ev->mr, leaf) < 0) {
				snprintf(why, why_len, "the Merkle tree is full");
				goto free_all;
			}
			while (ci < n_ck && ck[ci].seq <= o.seq) {
				if (ck[ci].seq == o.seq && strcmp(ck[ci].head, o.hash) != 0) {
					snprintf(why, why_len,
						 "checkpoint at seq %" PRIu64 " names another head",
						 o.seq);
					goto free_all;
				}
				if (ck[ci].seq == o.seq && ck[ci].root[0] &&
				    !root_is(&ev->mr, ck[ci].root)) {
					snprintf(why, why_len,
						 "checkpoint at seq %" PRIu64
						 " names another Merkle root",
						 o.seq);
					goto free_all;
				}
				ci++;
			}
			ev->seq = o.seq;
			memcpy(ev->head, o.hash, 65);
			if (o.type == CG_EV_STOPPED && !t->keep)
				stop_seq = o.seq;
			t->tseq = o.tseq;
			memcpy(t->hash, o.hash, 65);
			if (tstate_add_line(t, buf + pos, ll, o.seq, o.type,
					    o.decision[0] ? o.decision : NULL) < 0) {
				snprintf(why, why_len, "out of memory");
				goto free_all;
			}
			if (t->keep && cg_event_ends_trace(o.type)) {
				t = cg_smap_del(ev->traces, o.trace);
				/* A crash between the seal and its package: rebuild the view. */
				bool missing = ev->cfg.write_traces &&
					       !trace_dir_exists(ev->state_dir, o.trace);
				if (missing && !ix_loaded) {
					ix = cg_archive_index_load(ev->state_dir);
					ix_loaded = true;
				}
				if (missing && !cg_archive_index_has(ix, o.trace) &&
				    cg_trace_rebuild_package(ev->state_dir, o.trace, t->buf,
							     t->len) < 0)
					cg_log("warn", o.trace, "evidence: package not rebuilt: %s",
					       strerror(errno));
				tstate_free(t);
			}
			pos += ll;
		}
	}
	/*
	 * Events and no checkpoint at all: a start would sign whatever the
	 * journal now says. Its chains are anyone's to recompute, so a history
	 * rewritten and its checkpoints.ndjson removed came out signed and
	 * passing (s41b F3). Only the operator says it is the daemon's own: a
	 * stop before the first checkpoint.
	 */
	if (ev->seq && !n_ck && !resumed) {
		if (!ev->cfg.resign) {
			snprintf(why, why_len,
				 "the journal holds %" PRIu64 " events and no signed checkpoint "
				 "(checkpoints.ndjson is missing or empty): a start would sign "
				 "whatever it now says; if the daemon stopped before its first "
				 "checkpoint, start it once with --resign-journal",
				 ev->seq);
			goto free_all;
		}
		cg_log("warn", NULL,
		       "evidence: --resign-journal: signing %" PRIu64
		       " events that no checkpoint vouched for",
		       ev->seq);
	}
	/*
	 * Events after a clean stop's checkpoint: the daemon that stopped wrote
	 * none, and the next start would sign them (s42b F4: a forged line,
	 * chained as anyone can chain one, passed replay from then on). The
	 * operator who knows where they come from starts it with --resign-journal.
	 */
	uint64_t last_ck = n_ck ? ck[n_ck - 1].seq : resumed ? resumed_at : 0;
	if (stop_seq && stop_seq == last_ck && ev->seq > last_ck) {
		if (!ev->cfg.resign) {
			snprintf(why, why_len,
				 "the journal holds %" PRIu64 " event(s) after the daemon's clean "
				 "stop at seq %" PRIu64 ", signed there: no daemon wrote them; "
				 "`callgate replay --all` shows them (head_unsigned); start with "
				 "--resign-journal only if you know where they come from",
				 ev->seq - last_ck, last_ck);
			goto free_all;
		}
		cg_log("warn", NULL,
		       "evidence: --resign-journal: signing %" PRIu64
		       " event(s) written after the clean stop at seq %" PRIu64,
		       ev->seq - last_ck, last_ck);
	}
	if (stop_seq && stop_seq == last_ck && ev->seq == last_ck)
		ev->after_stop = stop_seq;
	if (ev->seq > last_ck) {
		ev->tail_from = last_ck + 1;
		ev->tail_to = ev->seq;
		memcpy(ev->tail_head, ev->head, 65);
	}
	if (n_ck && ck[n_ck - 1].seq > ev->seq) {
		snprintf(why, why_len,
			 "the journal ends at seq %" PRIu64 " but a checkpoint names seq %" PRIu64,
			 ev->seq, ck[n_ck - 1].seq);
		goto free_all;
	}
	ev->ckpt_seq = n_ck ? ck[n_ck - 1].seq : 0;
	ev->ckpt_line_valid = false; /* a resume point waits for this run's first checkpoint */
	ev->since_ckpt = ev->seq - ev->ckpt_seq;
	if (resumed)
		cg_log("info", NULL,
		       "evidence: resumed at the signed checkpoint of seq %" PRIu64
		       "; verified the %" PRIu64 " events after it (`callgate replay --all` "
		       "verifies everything)",
		       resumed_at, ev->seq - resumed_at);
	if (n_names) {
		snprintf(path, sizeof(path), "%s/journal/%s", ev->state_dir, names[n_names - 1]);
		ev->seg_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		struct stat st;
		if (ev->seg_fd < 0 || fstat(ev->seg_fd, &st) != 0) {
			snprintf(why, why_len, "cannot open %.300s: %s", path, strerror(errno));
			goto free_all;
		}
		ev->seg_bytes = (uint64_t)st.st_size;
		/* What a run that did not close (SIGKILL) held past the end goes back. */
		ev->seg_held = (uint64_t)st.st_size + CG_FILE_HOLD_SWEEP;
		release_ahead(ev); /* held again at the first append */
		snprintf(ev->seg_name, sizeof(ev->seg_name), "%s", names[n_names - 1]);
	} else if (segment_open(ev, 1) < 0) {
		snprintf(why, why_len, "cannot create the first segment: %s", strerror(errno));
		goto free_all;
	}
	rc = 0;
free_all:
	cg_archive_index_free(ix);
	free(buf);
	cg_strv_free(names, n_names);
	free(ck);
	return rc;
}

int cg_evidence_open(const struct cg_evidence_config *cfg, struct cg_evidence **out,
		     struct cg_reply **err)
{
	char why[512] = "";
	char path[4200];
	*out = NULL;
	*err = NULL;
	struct cg_evidence *ev = calloc(1, sizeof(*ev));
	json_t *torn = json_array();
	if (!ev || !torn || !cfg || !cfg->state_dir) {
		free(ev);
		json_decref(torn);
		*err = cg_reply_new(CG_R_EVIDENCE_OPEN_FAILED, "{s:s, s:s}", "path",
				    cfg && cfg->state_dir ? cfg->state_dir : "(none)", "detail",
				    "no state directory or out of memory");
		return -1;
	}
	ev->cfg = *cfg;
	if (!ev->cfg.segment_bytes)
		ev->cfg.segment_bytes = (uint64_t)cg_test_knob(
		    "CALLGATE_TEST_SEGMENT_BYTES", (long)DEFAULT_SEGMENT_BYTES, LONG_MAX);
	if (!ev->cfg.checkpoint_every)
		ev->cfg.checkpoint_every = DEFAULT_CKPT_EVERY;
	if (ev->cfg.checkpoint_ms <= 0)
		ev->cfg.checkpoint_ms = DEFAULT_CKPT_MS;
	if (ev->cfg.checkpoint_ms > CKPT_MS_MAX) /* the writer's deadlines stay in range */
		ev->cfg.checkpoint_ms = CKPT_MS_MAX;
	ev->lock_fd = ev->seg_fd = ev->ckpt_fd = ev->dir_fd = -1;
	ev->wake_fd = -1;
	ev->promises_tail = &ev->promises;
	ev->high_water =
	    (size_t)cg_test_knob("CALLGATE_TEST_EVIDENCE_HIGH_WATER", ADMIT_HIGH_WATER, LONG_MAX);
	ev->stall_ms = (int)cg_test_knob("CALLGATE_TEST_EVIDENCE_STALL_MS", 0, LONG_MAX);
	ev->pack_tick_ms =
	    (int)cg_test_knob("CALLGATE_TEST_RETENTION_TICK_MS", RETENTION_TICK_MS, LONG_MAX);
	ev->retention_s = cfg->retention_s;
	atomic_store(&ev->archive, cfg->archive);
	ev->live = (struct cg_live_archive)CG_LIVE_ARCHIVE_INIT;
	pthread_mutex_init(&ev->live_mu, NULL);
	ev->last_pack_ns = cg_now_mono_ns();
	ev->q_tail = &ev->q_head;
	memcpy(ev->head, cg_journal_genesis(), 65);
	pthread_mutex_init(&ev->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ev->work_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&ev->done_cv, NULL);
	pthread_cond_init(&ev->pkg_cv, NULL);
	pthread_cond_init(&ev->room_cv, NULL);
	ev->pb_tail = &ev->pb_head;
	ev->state_dir = strdup(cfg->state_dir);
	ev->traces = cg_smap_new();
	ev->cut = cg_smap_new();
	ev->cut_pending = json_array();
	enum cg_reply_id fail = CG_R_EVIDENCE_OPEN_FAILED;
	if (!ev->state_dir || !ev->traces || !ev->cut || !ev->cut_pending) {
		snprintf(why, sizeof(why), "out of memory");
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/journal", ev->state_dir);
	/*
	 * A state directory someone else made, or could change, is theirs: links
	 * they planted would take the daemon's writes, and a key they planted
	 * would sign the evidence. Refused before anything in it is opened, and
	 * nothing is made through a directory of theirs on the way.
	 */
	char untrusted[400];
	if (cg_mkdirs_trusted(ev->state_dir, 0700, 0700, false, untrusted, sizeof(untrusted)) !=
	    0) {
		snprintf(why, sizeof(why),
			 "%.380s: another user could change the state directory (choose one "
			 "only the daemon's user and root can write, on every step from /)",
			 untrusted);
		goto fail;
	}
	struct stat sd;
	if (stat(ev->state_dir, &sd) == 0 && (sd.st_mode & (S_IRWXG | S_IRWXO)))
		cg_log("warn", NULL,
		       "state dir %s is open to other users (mode %04o): every uid's call records "
		       "under traces/ are readable there; chmod 700 it",
		       ev->state_dir, (unsigned)(sd.st_mode & 07777));
	if (cg_mkdirs(path, 0700, 0700) < 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", path, strerror(errno));
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/traces", ev->state_dir);
	if (cg_mkdirs(path, 0755, 0755) < 0) {
		snprintf(why, sizeof(why), "cannot create %.300s: %s", path, strerror(errno));
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/journal", ev->state_dir);
	ev->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/%s", ev->state_dir, CG_EVIDENCE_LOCK);
	ev->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (ev->dir_fd < 0 || ev->lock_fd < 0) {
		snprintf(why, sizeof(why), "cannot open %.300s: %s", path, strerror(errno));
		goto fail;
	}
	/* One writer: a second daemon on the same journal would fork the chain. */
	if (flock(ev->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		fail = CG_R_EVIDENCE_LOCKED;
		goto fail;
	}
	struct statvfs sv;
	if (fstatvfs(ev->dir_fd, &sv) != 0) {
		snprintf(why, sizeof(why), "cannot ask the file system of %.300s for its size: %s",
			 ev->state_dir, strerror(errno));
		goto fail;
	}
	ev->reserve = reserve_of(&ev->cfg, (uint64_t)sv.f_blocks * sv.f_frsize);
	ev->live.ahead = ahead_of(ev);
	cg_log("info", NULL,
	       "evidence: disk reserve %" PRIu64 " bytes of the %" PRIu64
	       "-byte file system under %s (%" PRIu64 " free)",
	       ev->reserve, (uint64_t)sv.f_blocks * sv.f_frsize, ev->state_dir,
	       (uint64_t)sv.f_bavail * sv.f_frsize);
	if (ev->reserve && ev->reserve >= (uint64_t)sv.f_bavail * sv.f_frsize)
		cg_log("error", NULL,
		       "evidence: the disk reserve (%" PRIu64 " bytes) is not below the free space "
		       "under %s: every call will be turned away until there is more room; lower "
		       "--disk-reserve or free space",
		       ev->reserve, ev->state_dir);
	/*
	 * A new key is made only for a new journal: with events already written,
	 * a missing key means someone removed it (a fresh key would sign whatever
	 * the journal now says), so the start is refused instead.
	 */
	char **segs = NULL;
	size_t n_segs = 0;
	if (cg_journal_segments(ev->state_dir, &segs, &n_segs) < 0) {
		snprintf(why, sizeof(why), "cannot list the journal: %s", strerror(errno));
		goto fail;
	}
	cg_strv_free(segs, n_segs);
	ev->key = cg_evkey_load_or_create(ev->state_dir, n_segs == 0, why, sizeof(why));
	if (!ev->key || cg_key_fingerprint(ev->key, ev->key_fp) < 0) {
		if (!why[0])
			snprintf(why, sizeof(why), "the evidence key has no raw public key");
		goto fail;
	}
	if (cg_note_origin_load_or_create(ev->state_dir, ev->key_fp, true, ev->origin,
					  sizeof(ev->origin)) < 0) {
		snprintf(why, sizeof(why), "%s/keys/evidence.origin: %s", ev->state_dir,
			 errno == EINVAL ? "not a valid key name" : strerror(errno));
		goto fail;
	}
	if (recover(ev, torn, why, sizeof(why)) < 0) {
		fail = strstr(why, "cannot") || strstr(why, "memory")
			   ? CG_R_EVIDENCE_OPEN_FAILED
			   : CG_R_EVIDENCE_JOURNAL_CORRUPT;
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", ev->state_dir);
	ev->ckpt_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (ev->ckpt_fd < 0) {
		snprintf(why, sizeof(why), "cannot open %.300s: %s", path, strerror(errno));
		goto fail;
	}
	struct stat cst;
	if (fstat(ev->ckpt_fd, &cst) == 0) { /* a killed run's hold goes back */
		ev->ckpt_held = (uint64_t)cst.st_size + CG_FILE_HOLD_SWEEP;
		cg_file_release_ahead(ev->ckpt_fd, &ev->ckpt_held);
	}
	archive_ready(ev);
	if (pthread_create(&ev->pkg_thr, NULL, package_main, ev) != 0) {
		snprintf(why, sizeof(why), "cannot start the package thread");
		goto fail;
	}
	ev->pkg_started = true;
	(void)pthread_setname_np(ev->pkg_thr, "cg-package");
	if (pthread_create(&ev->thr, NULL, writer_main, ev) != 0) {
		snprintf(why, sizeof(why), "cannot start the writer thread");
		goto fail;
	}
	ev->thr_started = true;
	(void)pthread_setname_np(ev->thr, "cg-writer");
	/* Record what recovery found, then mark the traces a crash cut short. */
	struct cut_runs cut = { json_array(), !cut.runs };
	cg_smap_each(ev->traces, note_cut_run, &cut);
	ev->cut_runs = cut.runs;
	if (cut.oom) {
		snprintf(why, sizeof(why), "the calls a crash cut short could not be listed: %s",
			 strerror(ENOMEM));
		goto fail;
	}
	struct incomplete_list l = { NULL, &l.head, CG_INCOMPLETE_WHY, NULL, false };
	cg_smap_each(ev->traces, queue_incomplete, &l);
	int rc = 0;
	if (json_array_size(torn)) {
		json_t *p = json_pack("{s:s, s:O}", "what", "torn tail set aside", "torn", torn);
		struct item *it = p ? item_event(CG_JOURNAL_TRACE, CG_EV_RECOVERY, p, false) : NULL;
		json_decref(p);
		rc = it ? enqueue(ev, it) : -1;
	}
	/*
	 * Events no checkpoint of the run that wrote them vouched for (a
	 * crash's tail): this start signs them, and says so, so that an
	 * auditor can tell them from events their own run signed.
	 */
	if (rc == 0 && ev->tail_to) {
		json_t *p = json_pack(
		    "{s:s, s:I, s:I, s:s}", "what",
		    "events after the last checkpoint, signed at this start, not by the run that "
		    "wrote them",
		    "from", (json_int_t)ev->tail_from, "to", (json_int_t)ev->tail_to, "head",
		    ev->tail_head);
		struct item *it = p ? item_event(CG_JOURNAL_TRACE, CG_EV_RECOVERY, p, false) : NULL;
		json_decref(p);
		rc = it ? enqueue(ev, it) : -1;
	}
	if (rc == 0 && ev->after_stop) {
		json_t *p = json_pack("{s:s, s:I}", "what", "started after the clean stop",
				      "after_stop", (json_int_t)ev->after_stop);
		struct item *it = p ? item_event(CG_JOURNAL_TRACE, CG_EV_RECOVERY, p, false) : NULL;
		json_decref(p);
		pthread_mutex_lock(&ev->mu);
		ev->ckpt_now = true;
		pthread_mutex_unlock(&ev->mu);
		rc = it ? enqueue(ev, it) : -1;
	}
	while (l.head) {
		struct item *it = l.head;
		l.head = it->next;
		if (rc == 0)
			rc = enqueue(ev, it);
		else
			item_free(it);
	}
	if (rc < 0 || l.oom || cg_evidence_flush(ev) < 0) {
		snprintf(why, sizeof(why), "recovery events could not be written: %s",
			 strerror(errno));
		goto fail;
	}
	json_decref(torn);
	*out = ev;
	return 0;
fail:
	json_decref(torn);
	*err = cg_reply_build(fail, "{s:s, s:s}", "path", cfg->state_dir, "detail", why);
	cg_evidence_close(ev);
	return -1;
}

void cg_evidence_close(struct cg_evidence *ev)
{
	if (!ev)
		return;
	if (ev->thr_started) {
		pthread_mutex_lock(&ev->mu);
		ev->stop = true;
		pthread_cond_signal(&ev->work_cv);
		pthread_mutex_unlock(&ev->mu);
		pthread_join(ev->thr, NULL);
	}
	if (ev->pkg_started) {
		pthread_mutex_lock(&ev->mu);
		ev->pkg_stop = true;
		pthread_cond_signal(&ev->pkg_cv);
		pthread_mutex_unlock(&ev->mu);
		pthread_join(ev->pkg_thr, NULL);
	}
	while (ev->q_head) {
		struct item *it = ev->q_head;
		ev->q_head = it->next;
		if (it->gate) /* never on disk: whoever waits learns it */
			cg_gate_open(it->gate, CG_GATE_REFUSED);
		item_free(it);
	}
	(void)write_packages(ev, ev->pkgs, false, false);
	cg_live_archive_close(&ev->live);
	release_ahead(ev);
	cg_file_release_ahead(ev->ckpt_fd, &ev->ckpt_held);
	if (ev->seg_fd >= 0)
		close(ev->seg_fd);
	if (ev->ckpt_fd >= 0)
		close(ev->ckpt_fd);
	if (ev->dir_fd >= 0)
		close(ev->dir_fd);
	if (ev->lock_fd >= 0)
		close(ev->lock_fd);
	EVP_PKEY_free(ev->key);
	cg_smap_free(ev->traces, tstate_free);
	cg_smap_free(ev->cut, NULL);
	for (struct promise *p = ev->promises, *nx; p; p = nx) {
		nx = p->next;
		free(p);
	}
	json_decref(ev->cut_pending);
	json_decref(ev->cut_runs);
	free(ev->batch);
	free(ev->resume);
	free(ev->state_dir);
	pthread_cond_destroy(&ev->work_cv);
	pthread_cond_destroy(&ev->done_cv);
	pthread_cond_destroy(&ev->pkg_cv);
	pthread_cond_destroy(&ev->room_cv);
	pthread_mutex_destroy(&ev->mu);
	pthread_mutex_destroy(&ev->live_mu);
	free(ev);
}

int cg_evidence_seal_facts(struct cg_evidence *ev, const char *trace_id,
			   const struct cg_verdict_facts *facts)
{
	if (!ev || !cg_trace_id_valid(trace_id) || strcmp(trace_id, CG_JOURNAL_TRACE) == 0) {
		errno = EINVAL;
		return -1;
	}
	struct item *it = calloc(1, sizeof(*it));
	if (!it || !(it->verdict = cg_verdict_render(facts, trace_id))) {
		free(it);
		errno = ENOMEM;
		return -1;
	}
	it->kind = IT_SEAL;
	memcpy(it->trace, trace_id, strlen(trace_id) + 1);
	return enqueue(ev, it);
}
