/* SPDX-License-Identifier: MIT */
/*
 * replay — offline verification of the evidence trail (`callgate replay`)
 * and rebuilding of trace packages (`callgate evidence rebuild`).
 *
 * Replay reads every journal segment, re-parses and re-hashes every line,
 * checks both chains and the sequence, verifies each signed checkpoint
 * against the journal, then compares each trace package with the journal
 * lines of its trace. The checks are those of journal.c, shared with the
 * daemon's own per-call replay step. With --all, the journal's lines are
 * parsed and the traces checked on every CPU the process may use
 * (cg_parallel_for); each item writes only its own slot, and the report is
 * assembled afterwards in the order of a one-thread run.
 *
 * Invariants:
 *  - The journal and checkpoints are opened read-only; only replay.json and
 *    diff.json of trace directories are (re)written, and only on request.
 *  - A missing or unreadable piece of evidence is a named failure, never a
 *    silent pass: PASS requires every check to have run and held.
 */
#include "replay.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence.h"
#include "key.h"
#include "merkle.h"
#include "note.h"
#include "util.h"
#include "retention.h"
#include "verdict.h"

#define JOURNAL_CAP ((size_t)16 << 30)
#define PACKAGE_CAP ((size_t)1 << 30)

static const char *const package_files[] = { "events.ndjson", "verdict.json", "verdict.md",
					     "replay.json", "diff.json" };

/* True when a daemon holds the journal lock (its last line may be in flight). */
static bool journal_live(const char *state_dir)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/%s", state_dir, CG_EVIDENCE_LOCK);
	int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	bool live = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);
	return live;
}

void cg_journal_view_free(struct cg_journal_view *jv)
{
	free(jv->buf);
	free(jv->v);
	free(jv->leaf);
	memset(jv, 0, sizeof(*jv));
}

/*
 * Append the lines of buf[0..len) to *v, unparsed: line, line_len and lineno
 * (counted on from *lineno). A last line without its newline is left out when
 * tail_in_flight: the daemon is writing it right now.
 */
static int split_lines(const char *buf, size_t len, bool tail_in_flight, struct cg_evline **v,
		       size_t *n, size_t *cap, size_t *lineno)
{
	for (size_t pos = 0; pos < len;) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - (buf + pos)) + 1 : len - pos;
		(*lineno)++;
		if (!nl && tail_in_flight)
			break;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 1024;
			struct cg_evline *q = realloc(*v, nc * sizeof(*q));
			if (!q) {
				errno = ENOMEM;
				return -1;
			}
			*v = q;
			*cap = nc;
		}
		(*v)[(*n)++] =
		    (struct cg_evline){ .line = buf + pos, .line_len = ll, .lineno = *lineno };
		pos += ll;
	}
	return 0;
}

struct line_parse {
	struct cg_evline *v;
	bool *bad;
};

static void parse_one(size_t i, void *arg)
{
	struct line_parse *lp = arg;
	struct cg_evline *o = &lp->v[i];
	const char *check;
	size_t lineno = o->lineno;
	char why[200];
	lp->bad[i] = cg_evline_parse(o->line, o->line_len, o, &check, why, sizeof(why)) < 0;
	o->lineno = lineno; /* the parse starts from a cleared line */
}

/*
 * Parse v[from..*n) in place, on every CPU this process may use when
 * parallel: each parse writes only its own line's slot. A line that fails is
 * parsed again, alone and in order, to name its failure in diff exactly as a
 * one-thread parse would, and is left out of v.
 */
static int parse_range(struct cg_evline *v, size_t from, size_t *n, const char *file, bool parallel,
		       json_t *diff)
{
	size_t count = *n - from;
	struct line_parse lp = { v + from, calloc(count ? count : 1, sizeof(bool)) };
	if (!lp.bad) {
		errno = ENOMEM;
		return -1;
	}
	if (parallel)
		cg_parallel_for(count, 1024, parse_one, &lp);
	else
		for (size_t i = 0; i < count; i++)
			parse_one(i, &lp);
	*n = from;
	for (size_t k = 0; k < count; k++) {
		const struct cg_evline *o = &lp.v[k];
		if (!lp.bad[k]) {
			v[(*n)++] = *o;
			continue;
		}
		struct cg_evline again;
		const char *check;
		char why[200];
		(void)cg_evline_parse(o->line, o->line_len, &again, &check, why, sizeof(why));
		if (diff)
			cg_diff_add(diff, check, file, o->lineno, 0, NULL, NULL, why);
	}
	free(lp.bad);
	return 0;
}

/* Split buf[0..len) into lines and parse each into v (appending), on this thread. */
static int parse_lines(const char *buf, size_t len, const char *file, bool tail_in_flight,
		       struct cg_evline **v, size_t *n, size_t *cap, size_t *lineno, json_t *diff)
{
	size_t from = *n;
	if (split_lines(buf, len, tail_in_flight, v, n, cap, lineno) < 0)
		return -1;
	return parse_range(*v, from, n, file, false, diff);
}

int cg_journal_load(const char *state_dir, struct cg_journal_view *jv, json_t *diff)
{
	memset(jv, 0, sizeof(*jv));
	jv->live = journal_live(state_dir);
	char **names = NULL;
	size_t n_names = 0;
	if (cg_journal_segments(state_dir, &names, &n_names) < 0)
		return -1;
	/* One buffer for all segments, so evlines can point into it. */
	size_t total = 0;
	char path[4300];
	for (size_t i = 0; i < n_names; i++) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/journal/%s", state_dir, names[i]);
		if (stat(path, &st) == 0)
			total += (size_t)st.st_size;
	}
	int rc = -1;
	size_t *seg_len = calloc(n_names + 1, sizeof(*seg_len));
	jv->buf = malloc(total + 1);
	if (!jv->buf || !seg_len) {
		errno = ENOMEM;
		goto free_names;
	}
	for (size_t i = 0; i < n_names; i++) {
		snprintf(path, sizeof(path), "%s/journal/%s", state_dir, names[i]);
		/* Read straight into the shared buffer: no second copy of the journal. */
		int fd = cg_file_open_regular(AT_FDCWD, path, NULL);
		if (fd < 0)
			goto free_names;
		size_t len = 0;
		for (;;) {
			ssize_t r =
			    cg_read_some(fd, jv->buf + jv->len + len, total - jv->len - len);
			if (r < 0) {
				int e = errno;
				close(fd);
				errno = e;
				goto free_names;
			}
			if (r == 0)
				break;
			len += (size_t)r;
		}
		close(fd);
		if (jv->len + len == total && i + 1 < n_names) {
			/* A segment grew since we measured it (a live daemon): keep whole lines. */
			const char *nl = len ? memrchr(jv->buf + jv->len, '\n', len) : NULL;
			len = nl ? (size_t)(nl - (jv->buf + jv->len)) + 1 : 0;
		}
		seg_len[i] = len;
		jv->len += len;
	}
	/* Segment by segment, each one's lines parsed on every CPU. */
	size_t off = 0, cap = 0;
	for (size_t i = 0; i < n_names; i++) {
		char file[64];
		size_t from = jv->n, lineno = 0;
		snprintf(file, sizeof(file), "journal/%s", names[i]);
		bool last = i + 1 == n_names;
		if (split_lines(jv->buf + off, seg_len[i], last && jv->live, &jv->v, &jv->n, &cap,
				&lineno) < 0 ||
		    parse_range(jv->v, from, &jv->n, file, true, diff) < 0)
			goto free_names;
		off += seg_len[i];
	}
	rc = 0;
free_names:
	free(seg_len);
	cg_strv_free(names, n_names);
	if (rc < 0) {
		int e = errno;
		cg_journal_view_free(jv);
		errno = e;
	}
	return rc;
}

/* ---- the loaded view, checked at once ------------------------------------------ */

static void leaf_one(size_t i, void *arg)
{
	struct cg_journal_view *jv = arg;
	cg_merkle_leaf_hash(jv->v[i].line, jv->v[i].line_len, jv->leaf[i]);
}

/*
 * Every event's Merkle leaf hash, on every CPU this process may use: the
 * checkpoints' roots then cost no second pass over the journal's bytes on
 * one thread. Without memory for them, journal_root hashes as it goes.
 */
static void journal_leaves(struct cg_journal_view *jv)
{
	_Static_assert(CG_MERKLE_HASH_LEN == sizeof(*jv->leaf), "a leaf is one SHA-256");
	if (jv->n == 0 || !(jv->leaf = malloc(jv->n * sizeof(*jv->leaf))))
		return;
	cg_parallel_for(jv->n, 1024, leaf_one, jv);
}

struct tidx {
	size_t *ix; /* indices into the journal view, in journal order */
	size_t n, cap;
};

struct links {
	const struct cg_journal_view *jv;
	bool intact;
};

/* A trace's events: tseq 1, 2, ... and each tprev the hash of the one before. */
static void trace_links(const char *key, void *value, void *arg)
{
	struct links *l = arg;
	const struct tidx *t = value;
	const char *prev = cg_journal_genesis();
	for (size_t k = 0; l->intact && k < t->n; k++) {
		const struct cg_evline *e = &l->jv->v[t->ix[k]];
		l->intact = e->tseq == k + 1 && memcmp(e->tprev, prev, 64) == 0;
		prev = e->hash;
	}
}

/*
 * The one-pass chain check over the view already parsed (each line's hash
 * recomputed as it was parsed): seq 1, 2, ... with each prev the hash of the
 * line before, and every trace's own chain (m: index_traces), without
 * reading and hashing the journal a second time. True when all hold;
 * otherwise the precise, naming check (cg_evlines_check_chain) runs.
 */
static bool chain_intact(const struct cg_journal_view *jv, struct cg_smap *m)
{
	const char *prev = cg_journal_genesis();
	for (size_t i = 0; i < jv->n; i++) {
		const struct cg_evline *e = &jv->v[i];
		if (!e->hash_ok || e->seq != i + 1 || memcmp(e->prev, prev, 64) != 0)
			return false;
		prev = e->hash;
	}
	struct links l = { jv, true };
	cg_smap_each(m, trace_links, &l);
	return l.intact;
}

/* ---- checkpoints ---------------------------------------------------------------- */

static const struct cg_evline *by_seq(const struct cg_journal_view *jv, uint64_t seq)
{
	/* The journal is normally contiguous from 1: try the direct slot, then search. */
	if (seq >= 1 && seq <= jv->n && jv->v[seq - 1].seq == seq)
		return &jv->v[seq - 1];
	for (size_t i = 0; i < jv->n; i++)
		if (jv->v[i].seq == seq)
			return &jv->v[i];
	return NULL;
}

static void to_hex(const unsigned char *p, size_t n, char *hex)
{
	static const char hexd[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		hex[2 * i] = hexd[p[i] >> 4];
		hex[2 * i + 1] = hexd[p[i] & 15];
	}
	hex[2 * n] = '\0';
}

/*
 * The Merkle root of the journal's first seq events into hex, advancing r
 * (restarted when seq is behind it). -1 when the journal does not hold
 * events 1..seq in order (the chain checks name that failure).
 */
static int journal_root(const struct cg_journal_view *jv, struct cg_merkle_range *r, uint64_t seq,
			char hex[65])
{
	if (seq < r->size)
		cg_merkle_range_init(r);
	while (r->size < seq) {
		uint64_t i = r->size;
		if (i >= jv->n || jv->v[i].seq != i + 1)
			return -1;
		unsigned char leaf[CG_MERKLE_HASH_LEN];
		if (jv->leaf)
			memcpy(leaf, jv->leaf[i], sizeof(leaf));
		else
			cg_merkle_leaf_hash(jv->v[i].line, jv->v[i].line_len, leaf);
		if (cg_merkle_range_append(r, leaf) < 0)
			return -1;
	}
	unsigned char root[CG_MERKLE_HASH_LEN];
	cg_merkle_range_root(r, root);
	to_hex(root, sizeof(root), hex);
	return 0;
}

/*
 * What was signed, read BEFORE the journal: the writer syncs events before
 * it signs them, so every checkpoint read first names an event the journal
 * read after must hold, a live daemon's or not. (Read after, a checkpoint
 * past the head could be a live daemon's newer one, or a cut journal.)
 */
struct signed_files {
	char *ck, *note; /* checkpoints.ndjson, checkpoint.note; NULL: not read */
	size_t ck_len, note_len;
	int ck_errno, note_errno; /* why one was not read (ENOENT: absent) */
};

static void signed_files_read(const struct cg_replay_opts *o, struct signed_files *sf)
{
	char path[4300];
	memset(sf, 0, sizeof(*sf));
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", o->state_dir);
	if (cg_file_read(path, PACKAGE_CAP, &sf->ck, &sf->ck_len) < 0)
		sf->ck_errno = errno;
	snprintf(path, sizeof(path), "%s/checkpoint.note", o->state_dir);
	if (cg_file_read(path, CG_NOTE_MAX + 1, &sf->note, &sf->note_len) < 0)
		sf->note_errno = errno;
}

static void signed_files_free(struct signed_files *sf)
{
	free(sf->ck);
	free(sf->note);
	memset(sf, 0, sizeof(*sf));
}

/*
 * How long a live daemon may leave a sealed trace unsigned, or without its
 * package. It signs a seal within milliseconds and writes the package from
 * a bounded backlog; "live" only means that something holds the journal's
 * lock, which proves nothing about what wrote the tail.
 */
#define LIVE_GRACE_NS (60LL * 1000000000)

/*
 * Was event e written less than LIVE_GRACE_NS before replay read the signed
 * files (by its own timestamp)? Measured from then, not from now: a long
 * replay must not fail a daemon that signed everything after that moment.
 */
static bool recent(const struct cg_journal_view *jv, const struct cg_evline *e)
{
	int64_t at = 0;
	return cg_parse_time(e->ts, &at) == 0 && jv->signed_read_ns - at < LIVE_GRACE_NS;
}

/* The first event past seq `signed_to` that ends a trace and is no longer recent; or NULL. */
static const struct cg_evline *stale_unsigned_end(const struct cg_journal_view *jv,
						  uint64_t signed_to)
{
	for (size_t i = 0; i < jv->n; i++)
		if (jv->v[i].seq > signed_to && cg_event_ends_trace(jv->v[i].type) &&
		    !recent(jv, &jv->v[i]))
			return &jv->v[i];
	return NULL;
}

/* The Merkle root and the note signature of one checkpoint line. */
static void check_ckpt_merkle(const struct cg_journal_view *jv, struct cg_merkle_range *r,
			      EVP_PKEY *k, const char *origin, const struct cg_ckpt *c,
			      size_t lineno, json_t *diff)
{
	char hex[65];
	if (c->root[0] && journal_root(jv, r, c->seq, hex) == 0 && strcmp(hex, c->root) != 0)
		cg_diff_add(diff, "merkle_root_mismatch", "checkpoints.ndjson", lineno, c->seq,
			    c->root, hex,
			    "the Merkle root of the journal at this size is not the signed one");
	if (!c->note_sig_len || !k || !origin)
		return;
	unsigned char root[CG_MERKLE_HASH_LEN], id[4];
	char text[CG_NOTE_NAME_MAX + 128];
	for (int i = 0; i < CG_MERKLE_HASH_LEN; i++) {
		unsigned hi = (unsigned)(c->root[2 * i] <= '9' ? c->root[2 * i] - '0'
							       : c->root[2 * i] - 'a' + 10);
		unsigned lo = (unsigned)(c->root[2 * i + 1] <= '9' ? c->root[2 * i + 1] - '0'
								   : c->root[2 * i + 1] - 'a' + 10);
		root[i] = (unsigned char)(hi << 4 | lo);
	}
	int tn = cg_note_checkpoint_text(text, sizeof(text), origin, c->seq, root);
	if (tn < 0 || cg_note_key_id(origin, k, id) < 0 || memcmp(id, c->note_sig, 4) != 0 ||
	    !cg_key_verify(k, text, (size_t)tn, c->note_sig + 4, c->note_sig_len - 4))
		cg_diff_add(diff, "note_signature", "checkpoints.ndjson", lineno, c->seq, NULL,
			    NULL, "the checkpoint's note signature does not verify");
}

/* state_dir/checkpoint.note, when present: a signed note of a journal prefix. */
static void check_latest_note(const struct signed_files *sf, const struct cg_journal_view *jv,
			      struct cg_merkle_range *r, EVP_PKEY *k, const char *origin,
			      json_t *diff)
{
	char why[200], hex[65], rhex[65];
	const char *p = sf->note;
	size_t len = sf->note_len;
	if (!p) {
		if (sf->note_errno != ENOENT)
			cg_diff_add(diff, "note_schema", "checkpoint.note", 0, 0, NULL, NULL,
				    strerror(sf->note_errno));
		return;
	}
	struct cg_note n;
	uint64_t head_seq = jv->n ? jv->v[jv->n - 1].seq : 0;
	if (cg_note_parse(p, len, &n, why, sizeof(why)) < 0) {
		cg_diff_add(diff, "note_schema", "checkpoint.note", 0, 0, NULL, NULL, why);
		return;
	}
	if (origin && strcmp(n.origin, origin) != 0)
		cg_diff_add(diff, "checkpoint_origin", "checkpoint.note", 1, 0, origin, n.origin,
			    "the note names another log");
	if (k && !cg_note_verify(&n, p, NULL, k))
		cg_diff_add(diff, "note_signature", "checkpoint.note", 0, n.size, NULL, NULL,
			    "no signature by the evidence key verifies");
	to_hex(n.root, sizeof(n.root), rhex);
	if (n.size > head_seq)
		cg_diff_add(diff, "journal_truncated", "checkpoint.note", 2, n.size, NULL, NULL,
			    "the note names a tree larger than the journal");
	else if (journal_root(jv, r, n.size, hex) == 0 && strcmp(hex, rhex) != 0)
		cg_diff_add(diff, "merkle_root_mismatch", "checkpoint.note", 3, n.size, rhex, hex,
			    "the Merkle root of the journal at this size is not the signed one");
}

static void check_checkpoints(const struct cg_replay_opts *o, const struct signed_files *sf,
			      const struct cg_journal_view *jv, json_t *diff, json_t *jrep)
{
	char path[4300], d[200], why[4600];
	snprintf(path, sizeof(path), "%s/keys/evidence.pub", o->state_dir);
	const char *kp = o->pubkey_file ? o->pubkey_file : path;
	EVP_PKEY *k = cg_key_load(kp, CG_KEY_PUBLIC_OR_PRIVATE, false, d, sizeof(d));
	snprintf(why, sizeof(why), "%s: %s", kp, d);
	char fp[65] = "";
	if (!k || cg_key_fingerprint(k, fp) < 0)
		cg_diff_add(diff, "checkpoint_key", o->pubkey_file ? o->pubkey_file : "keys/", 0, 0,
			    NULL, NULL, k ? "no raw public key" : why);
	char origin[CG_NOTE_NAME_MAX + 1];
	bool have_origin = k && cg_note_origin_load_or_create(o->state_dir, fp, false, origin,
							      sizeof(origin)) == 0;
	bool origin_reported = false;
	struct cg_merkle_range mr;
	cg_merkle_range_init(&mr);
	const char *buf = sf->ck;
	size_t len = sf->ck_len, pos = 0, lineno = 0, n = 0, bad_sig = 0;
	uint64_t last_seq = 0, head_seq = jv->n ? jv->v[jv->n - 1].seq : 0;
	if (!buf && sf->ck_errno != ENOENT)
		cg_diff_add(diff, "checkpoint_missing", "checkpoints.ndjson", 0, 0, NULL, NULL,
			    strerror(sf->ck_errno));
	/* Read before the journal (signed_files): no line here may pass its head. */
	while (buf && pos < len) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - (buf + pos)) + 1 : len - pos;
		lineno++;
		if (!nl && jv->live)
			break; /* a line the daemon is writing */
		struct cg_ckpt c;
		if (cg_ckpt_parse(buf + pos, ll, &c, why, sizeof(why)) < 0) {
			cg_diff_add(diff, nl ? "checkpoint_schema" : "truncated",
				    "checkpoints.ndjson", lineno, 0, NULL, NULL, why);
			pos += ll;
			continue;
		}
		char a[32], b[32];
		n++;
		if (c.note_sig_len && k && !have_origin && !origin_reported) {
			origin_reported = true;
			cg_diff_add(diff, "checkpoint_origin", "keys/evidence.origin", 0, 0, NULL,
				    NULL,
				    "the log's origin is missing or invalid: notes cannot be "
				    "verified");
		}
		if (c.seq <= head_seq)
			check_ckpt_merkle(jv, &mr, k, have_origin ? origin : NULL, &c, lineno,
					  diff);
		if (k && strcmp(c.key, fp) != 0)
			cg_diff_add(diff, "checkpoint_key", "checkpoints.ndjson", lineno, c.seq, fp,
				    c.key, "signed by another key");
		else if (k && !cg_key_verify(k, buf + pos, c.msg_len, c.sig, c.sig_len)) {
			bad_sig++;
			cg_diff_add(diff, "checkpoint_signature", "checkpoints.ndjson", lineno,
				    c.seq, NULL, NULL, "the Ed25519 signature does not verify");
		}
		if (c.seq < last_seq) {
			snprintf(a, sizeof(a), ">= %" PRIu64, last_seq);
			snprintf(b, sizeof(b), "%" PRIu64, c.seq);
			cg_diff_add(diff, "checkpoint_order", "checkpoints.ndjson", lineno, c.seq,
				    a, b, "checkpoints go backwards");
		}
		last_seq = c.seq;
		if (c.seq > head_seq) {
			snprintf(a, sizeof(a), ">= %" PRIu64, c.seq);
			snprintf(b, sizeof(b), "%" PRIu64, head_seq);
			cg_diff_add(diff, "journal_truncated", "checkpoints.ndjson", lineno, c.seq,
				    a, b,
				    "a signed checkpoint names an event the journal no longer has");
		} else if (c.seq == 0) {
			if (strcmp(c.head, cg_journal_genesis()) != 0)
				cg_diff_add(diff, "checkpoint_mismatch", "checkpoints.ndjson",
					    lineno, 0, cg_journal_genesis(), c.head,
					    "an empty journal's head is the genesis");
		} else {
			const struct cg_evline *e = by_seq(jv, c.seq);
			if (e && strcmp(e->hash, c.head) != 0)
				cg_diff_add(diff, "checkpoint_mismatch", "checkpoints.ndjson",
					    lineno, c.seq, c.head, e->hash,
					    "the journal was rewritten: this event is not the one "
					    "that was signed");
		}
		pos += ll;
	}
	check_latest_note(sf, jv, &mr, k, have_origin ? origin : NULL, diff);
	EVP_PKEY_free(k);
	if (n == 0 && head_seq > 0)
		cg_diff_add(diff, "checkpoint_missing", "checkpoints.ndjson", 0, 0, NULL, NULL,
			    "the journal has events but no signed checkpoint");
	else if (!jv->live && n > 0 && last_seq != head_seq) {
		char a[32], b[32];
		snprintf(a, sizeof(a), "%" PRIu64, head_seq);
		snprintf(b, sizeof(b), "%" PRIu64, last_seq);
		cg_diff_add(diff, "head_unsigned", "checkpoints.ndjson", lineno, 0, a, b,
			    "the journal's head is not the latest signed checkpoint");
	} else if (jv->live && n > 0 && last_seq < head_seq) {
		const struct cg_evline *e = stale_unsigned_end(jv, last_seq);
		if (e)
			cg_diff_add(diff, "head_unsigned", "journal", e->lineno, e->seq, NULL,
				    e->ts,
				    "a sealed trace has gone unsigned for more than 60 s; a "
				    "daemon signs a seal within milliseconds (does something "
				    "other than callgated hold the journal's lock?)");
	}
	json_object_set_new(jrep, "checkpoints", json_integer((json_int_t)n));
	json_object_set_new(jrep, "checkpoint_seq", json_integer((json_int_t)last_seq));
	json_object_set_new(
	    jrep, "unsigned_tail",
	    json_integer((json_int_t)(head_seq > last_seq ? head_seq - last_seq : 0)));
	json_object_set_new(jrep, "key", json_string(fp));
	(void)bad_sig;
}

/* ---- traces ------------------------------------------------------------------------ */

static void tidx_free(void *p)
{
	struct tidx *t = p;
	if (t)
		free(t->ix);
	free(t);
}

static int index_traces(const struct cg_journal_view *jv, struct cg_smap *m)
{
	for (size_t i = 0; i < jv->n; i++) {
		struct tidx *t = cg_smap_get(m, jv->v[i].trace);
		if (!t) {
			t = calloc(1, sizeof(*t));
			if (!t || cg_smap_put(m, jv->v[i].trace, t) < 0) {
				free(t);
				return -1;
			}
		}
		if (t->n == t->cap) {
			size_t nc = t->cap ? t->cap * 2 : 16;
			size_t *q = realloc(t->ix, nc * sizeof(*q));
			if (!q)
				return -1;
			t->ix = q;
			t->cap = nc;
		}
		t->ix[t->n++] = i;
	}
	return 0;
}

/*
 * Journal failures that concern this trace: global ones and those on its
 * events, by reference (one thread only: references count up). replay --all
 * gathers them for every trace before the traces are checked in parallel.
 */
static void add_relevant(json_t *tdiff, const json_t *jdiff, const struct cg_journal_view *jv,
			 const struct tidx *t)
{
	size_t i;
	json_t *d;
	json_array_foreach(jdiff, i, d)
	{
		json_int_t seq = json_integer_value(json_object_get(d, "seq"));
		bool mine = seq == 0;
		for (size_t k = 0; !mine && t && k < t->n; k++)
			mine = (json_int_t)jv->v[t->ix[k]].seq == seq;
		if (mine)
			json_array_append(tdiff, d);
	}
}

static bool package_file_known(const char *name)
{
	for (size_t i = 0; i < CG_ARRAY_LEN(package_files); i++)
		if (strcmp(name, package_files[i]) == 0)
			return true;
	return false;
}

/*
 * The verdict a package must show: the sealed one (borrowed; NULL: the one
 * the events seal with, a refusal's) with what the trace's events in the
 * journal add (verdict.h). New reference, or NULL.
 */
static json_t *trace_verdict_as(const json_t *sealed, const struct cg_journal_view *jv,
				const struct tidx *t, bool legacy)
{
	struct cg_buf b;
	cg_buf_init(&b, PACKAGE_CAP);
	const char *lines = jv->v[t->ix[0]].line; /* one line (a refusal's) is read where it is */
	size_t len = jv->v[t->ix[0]].line_len;
	if (t->n > 1) {
		for (size_t k = 0; k < t->n; k++)
			(void)cg_buf_add(&b, jv->v[t->ix[k]].line, jv->v[t->ix[k]].line_len);
		lines = (const char *)b.p;
		len = b.len;
	}
	json_t *v = b.truncated ? NULL
		    : legacy	? cg_verdict_with_events_legacy(sealed, lines, len)
				: cg_verdict_with_events(sealed, lines, len);
	cg_buf_free(&b);
	return v;
}

static json_t *trace_verdict(const json_t *sealed, const struct cg_journal_view *jv,
			     const struct tidx *t)
{
	return trace_verdict_as(sealed, jv, t, false);
}

/* Are the bytes fmd[0..fl) exactly the rendering of verdict v? */
static bool md_is(const char *fmd, size_t fl, const json_t *v)
{
	char *md = v ? cg_verdict_render_md(v) : NULL;
	bool same = md && fmd && fl == strlen(md) && memcmp(fmd, md, fl) == 0;
	free(md);
	return same;
}

struct spelled {
	const char *file;
	size_t len, at; /* bytes of the file, and how many the dump has matched */
};

/* json_dump_callback's sink: the next bytes of the dump must be the file's next bytes. */
static int spelled_next(const char *buf, size_t size, void *arg)
{
	struct spelled *sp = arg;
	if (size > sp->len - sp->at || memcmp(sp->file + sp->at, buf, size) != 0)
		return -1; /* stops the dump at the first difference */
	sp->at += size;
	return 0;
}

/* Is the file fb[0..fl) verdict v, as the package writer spells it, or (parsed) equal to it? */
static bool json_file_is(const char *fb, size_t fl, const json_t *v)
{
	if (!fb || !v)
		return false;
	/* Compared as it is dumped, in cg_package_json's spelling: the dump and its newline. */
	bool same = false;
	if (fl > 0 && fb[fl - 1] == '\n') {
		struct spelled sp = { fb, fl - 1, 0 };
		same = json_dump_callback(v, spelled_next, &sp, CG_PACKAGE_JSON_FLAGS) == 0 &&
		       sp.at == sp.len;
	}
	if (!same) { /* spelled otherwise (an older writer): the same JSON still counts */
		json_t *fv = json_loadb(fb, fl, JSON_REJECT_DUPLICATES, NULL);
		same = fv && json_equal(v, fv);
		json_decref(fv);
	}
	return same;
}

/* What seal recorded, alone: a seal's verdict, or a refusal's derived one. New reference. */
static json_t *sealed_verdict(const struct cg_evline *seal)
{
	json_t *pl = json_loadb(seal->line + seal->payload_off, seal->payload_len, 0, NULL);
	json_t *v = seal->type == CG_EV_SEAL ? json_incref(json_object_get(pl, "verdict"))
					     : cg_refusal_verdict(pl, seal->trace);
	json_decref(pl);
	return v;
}

/*
 * verdict.json and verdict.md of a sealed trace: the seal's verdict with what
 * the trace's events add (trace_verdict), or — a package written before
 * verdicts read the events — the seal's verdict exactly. Either is the
 * sealed truth; anything else is a mismatch. The first is checked first,
 * byte for byte; the second only when the first does not match.
 */
static void check_package_verdict(const struct cg_package_files *pf, const struct cg_evline *seal,
				  const struct cg_journal_view *jv, const struct tidx *t,
				  const bool seen[], json_t *diff)
{
	char path[400];
	/* A refusal's verdict comes from the same parse of its event as the facts. */
	json_t *sealed = seal->type == CG_EV_SEAL ? sealed_verdict(seal) : NULL;
	json_t *sv = seal->type == CG_EV_SEAL && !sealed ? NULL : trace_verdict(sealed, jv, t);
	json_t *alone = sealed;
	size_t jl = 0, ml = 0;
	const char *jb = cg_package_file(pf, "verdict.json", &jl);
	const char *mb = cg_package_file(pf, "verdict.md", &ml);
	bool json_ok = !seen[1] || json_file_is(jb, jl, sv);
	bool md_ok = !seen[2] || md_is(mb, ml, sv);
	if ((!json_ok || !md_ok) && sv) {
		/* A package written before a grant's opening read as one (verdict.h). */
		json_t *old = trace_verdict_as(sealed, jv, t, true);
		json_ok = json_ok || json_file_is(jb, jl, old);
		md_ok = md_ok || md_is(mb, ml, old);
		json_decref(old);
	}
	if ((!json_ok || !md_ok) && !alone)
		alone = sealed_verdict(seal);
	if (!json_ok && !json_file_is(jb, jl, alone)) {
		snprintf(path, sizeof(path), "%s/verdict.json", pf->where);
		cg_diff_add(diff, "verdict_mismatch", path, 0, seal->seq, NULL, NULL,
			    "verdict.json is not the verdict the seal recorded");
	}
	if (!md_ok && !md_is(mb, ml, alone)) {
		snprintf(path, sizeof(path), "%s/verdict.md", pf->where);
		cg_diff_add(diff, "verdict_mismatch", path, 0, seal->seq, NULL, NULL,
			    "verdict.md is not the rendering of the sealed verdict");
	}
	json_decref(sv);
	json_decref(alone);
}

/*
 * verdict.json and verdict.md of an incomplete trace: the verdict its events
 * give (cg_incomplete_verdict_of, with what the events add), or the form an
 * earlier rebuild wrote. Both come from the journal alone; anything else is
 * a mismatch (a crash mid-run is when a verdict is most worth rewriting).
 */
static void check_incomplete_verdict(const struct cg_package_files *pf,
				     const struct cg_journal_view *jv, const struct tidx *t,
				     const bool seen[], json_t *diff)
{
	char path[400];
	const char *id = jv->v[t->ix[0]].trace;
	struct cg_evline *tv = malloc(t->n * sizeof(*tv));
	if (!tv) {
		cg_diff_add(diff, "internal", pf->where, 0, 0, NULL, NULL, "out of memory");
		return;
	}
	for (size_t k = 0; k < t->n; k++)
		tv[k] = jv->v[t->ix[k]];
	size_t jl = 0, ml = 0;
	const char *jb = cg_package_file(pf, "verdict.json", &jl);
	const char *mb = cg_package_file(pf, "verdict.md", &ml);
	bool json_ok = !seen[1], md_ok = !seen[2];
	for (int legacy = 0; legacy < 2 && (!json_ok || !md_ok); legacy++) {
		json_t *base = cg_incomplete_verdict_of(tv, t->n, id, legacy);
		json_t *v = base ? trace_verdict(base, jv, t) : NULL;
		json_ok = json_ok || json_file_is(jb, jl, v);
		md_ok = md_ok || md_is(mb, ml, v);
		json_decref(v);
		json_decref(base);
	}
	free(tv);
	const struct cg_evline *last = &jv->v[t->ix[t->n - 1]];
	if (!json_ok) {
		snprintf(path, sizeof(path), "%s/verdict.json", pf->where);
		cg_diff_add(diff, "verdict_mismatch", path, 0, last->seq, NULL, NULL,
			    "verdict.json is not the verdict of the trace's events (incomplete)");
	}
	if (!md_ok) {
		snprintf(path, sizeof(path), "%s/verdict.md", pf->where);
		cg_diff_add(diff, "verdict_mismatch", path, 0, last->seq, NULL, NULL,
			    "verdict.md is not the rendering of the trace's verdict (incomplete)");
	}
}

/* Are buf[0..len) exactly the journal's lines of trace t, in order? */
static bool journal_bytes(const char *buf, size_t len, const struct cg_journal_view *jv,
			  const struct tidx *t)
{
	size_t at = 0;
	for (size_t k = 0; k < t->n; k++) {
		const struct cg_evline *j = &jv->v[t->ix[k]];
		if (j->line_len > len - at || memcmp(buf + at, j->line, j->line_len) != 0)
			return false;
		at += j->line_len;
	}
	return at == len;
}

/*
 * A package line that differs from the journal's: where, and what each says
 * there. (Both carry the same hash field when only the body was changed, so
 * the hashes alone would name no difference.)
 */
/* Up to 32 bytes of p as ASCII text ('?' for anything else), for a diff. */
static void excerpt(char *out, size_t cap, const char *p, size_t n)
{
	size_t k = 0;
	for (; k < n && k < 32 && k + 1 < cap; k++)
		out[k] = (p[k] >= 0x20 && p[k] < 0x7f) ? p[k] : '?';
	out[k] = '\0';
}

static void line_mismatch(json_t *diff, const char *file, const struct cg_evline *j,
			  const struct cg_evline *f)
{
	size_t at = 0, n = j->line_len < f->line_len ? j->line_len : f->line_len;
	while (at < n && j->line[at] == f->line[at])
		at++;
	char want[48], got[48], detail[96];
	excerpt(want, sizeof(want), j->line + at, j->line_len - at);
	excerpt(got, sizeof(got), f->line + at, f->line_len - at);
	snprintf(detail, sizeof(detail), "the line differs from the journal's from byte %zu", at);
	cg_diff_add(diff, "trace_line_mismatch", file, f->lineno, f->seq, want, got, detail);
}

/* The checks of one loaded package (a directory's, or an archive's members). */
static void check_files(const struct cg_journal_view *jv, const struct tidx *t,
			enum cg_trace_state st, const struct cg_package_files *pf, json_t *diff)
{
	char file[400];
	snprintf(file, sizeof(file), "%s/events.ndjson", pf->where);
	bool seen[CG_ARRAY_LEN(package_files)] = { false };
	for (size_t k = 0; k < pf->n; k++) {
		if (!package_file_known(pf->name[k]))
			cg_diff_add(diff, "package_files", pf->where, 0, 0, NULL, pf->name[k],
				    "a file that is not part of a trace package");
		for (size_t i = 0; i < CG_ARRAY_LEN(package_files); i++)
			if (strcmp(pf->name[k], package_files[i]) == 0)
				seen[i] = true;
	}
	if (pf->extra)
		cg_diff_add(diff, "package_files", pf->where, 0, 0, NULL, "more files",
			    "more files than a trace package has");
	/* An archive can hold a member twice; a reader would take one copy, tar another. */
	for (size_t k = 0; k < pf->n; k++)
		for (size_t l = 0; l < k; l++)
			if (strcmp(pf->name[k], pf->name[l]) == 0) {
				cg_diff_add(diff, "package_files", pf->where, 0, 0, NULL,
					    pf->name[k],
					    "a file that appears twice in the package");
				break;
			}
	for (size_t i = 0; i < CG_ARRAY_LEN(package_files); i++)
		if (!seen[i])
			cg_diff_add(diff, "package_files", pf->where, 0, 0, package_files[i],
				    "missing", "the package lacks one of its five files");
	size_t len = 0, n = 0, cap = 0, lineno = 0;
	struct cg_evline *v = NULL;
	const char *buf = cg_package_file(pf, "events.ndjson", &len);
	if (!buf || len > PACKAGE_CAP) {
		if (seen[0])
			cg_diff_add(diff, "package_files", file, 0, 0, NULL, NULL,
				    "events.ndjson cannot be read");
		goto verdict;
	}
	if (journal_bytes(buf, len, jv, t)) {
		/* The file is the journal's lines of the trace: their parse is the journal's. */
		v = malloc((t->n ? t->n : 1) * sizeof(*v));
		if (!v)
			goto verdict;
		for (n = 0; n < t->n; n++) {
			v[n] = jv->v[t->ix[n]];
			v[n].lineno = n + 1;
		}
		lineno = n;
	} else if (parse_lines(buf, len, file, false, &v, &n, &cap, &lineno, diff) < 0) {
		goto verdict;
	}
	cg_evlines_check_chain(v, n, false, file, diff);
	(void)cg_trace_check_structure(v, n, false, file, diff);
	/* The trace's events are exactly those the journal holds for it. */
	uint64_t max_file_tseq = 0;
	for (size_t i = 0; i < n; i++) {
		const struct cg_evline *j = NULL;
		for (size_t k = 0; k < t->n && !j; k++)
			if (jv->v[t->ix[k]].seq == v[i].seq)
				j = &jv->v[t->ix[k]];
		if (!j) {
			cg_diff_add(diff, "trace_extra_event", file, v[i].lineno, v[i].seq, NULL,
				    v[i].type_name,
				    "an event the journal does not hold for this trace");
			continue;
		}
		if (j->line_len != v[i].line_len || memcmp(j->line, v[i].line, j->line_len) != 0)
			line_mismatch(diff, file, j, &v[i]);
		if (v[i].tseq > max_file_tseq)
			max_file_tseq = v[i].tseq;
	}
	for (size_t k = 0; k < t->n; k++) {
		const struct cg_evline *j = &jv->v[t->ix[k]];
		if (j->tseq > max_file_tseq) {
			char a[32], b[32];
			snprintf(a, sizeof(a), "%zu events", t->n);
			snprintf(b, sizeof(b), "%" PRIu64 " events", max_file_tseq);
			cg_diff_add(diff, "truncated", file, lineno, j->seq, a, b,
				    "the file ends before the trace does");
			break;
		}
	}
verdict:;
	/* verdict.json and verdict.md must say what the seal says. */
	const struct cg_evline *seal = t->n ? &jv->v[t->ix[t->n - 1]] : NULL;
	if (st == CG_TRACE_SEALED && seal &&
	    (seal->type == CG_EV_SEAL || seal->type == CG_EV_REFUSAL))
		check_package_verdict(pf, seal, jv, t, seen, diff);
	else if (st == CG_TRACE_INCOMPLETE && seal && seal->type == CG_EV_INCOMPLETE)
		check_incomplete_verdict(pf, jv, t, seen, diff);
	free(v);
}

/*
 * dirs: every trace directory replay --all listed before it read the
 * journal, or NULL when there is no complete listing. A trace the listing
 * lacks and an index names is read from its archive at once, without first
 * looking for its directory.
 */
static void check_package(const struct cg_replay_opts *o, const struct cg_journal_view *jv,
			  const struct cg_archive_index *ix, struct cg_smap *dirs, const char *id,
			  const struct tidx *t, enum cg_trace_state st, json_t *diff)
{
	char dir[4300];
	struct cg_package_files pf;
	snprintf(dir, sizeof(dir), "%s/traces/%s", o->state_dir, id);
	int lrc = dirs && !cg_smap_get(dirs, id) && cg_archive_index_has(ix, id)
		      ? cg_package_load_archived(o->state_dir, ix, id, &pf)
		      : cg_package_load(o->state_dir, ix, id, &pf);
	if (lrc < 0 && errno == ENOENT && ix) /* packed since the index was read */
		lrc = cg_package_load(o->state_dir, NULL, id, &pf);
	if (lrc < 0 && errno == ENOENT && jv->live && t->n && recent(jv, &jv->v[t->ix[t->n - 1]])) {
		/*
		 * A live daemon writes a package after the trace is sealed in the
		 * journal, from its own thread: a trace sealed a moment ago may not
		 * have one yet. A replay of the stopped daemon's state checks it.
		 */
		return;
	}
	if (lrc < 0) {
		cg_diff_add(diff, "trace_dir_missing", dir, 0, 0, "a trace directory or archive",
			    "none",
			    errno == ENOENT ? "the journal holds this trace but its package is gone"
					    : "the trace's package cannot be read");
		return;
	}
	check_files(jv, t, st, &pf, diff);
	/*
	 * A directory is read first (callgate evidence rebuild writes one); a
	 * package in an archive for the same trace is what tar shows: it must
	 * verify too.
	 */
	bool from_dir = !pf.archived;
	cg_package_files_free(&pf);
	if (!from_dir || !cg_archive_index_has(ix, id))
		return;
	if (cg_package_load_archived(o->state_dir, ix, id, &pf) < 0) {
		cg_diff_add(diff, "trace_dir_missing", dir, 0, 0, "its package in the archive",
			    "none", "the index names a package of this trace the archive lacks");
		return;
	}
	check_files(jv, t, st, &pf, diff);
	cg_package_files_free(&pf);
}

static const char *state_name(enum cg_trace_state st)
{
	return st == CG_TRACE_SEALED ? "sealed" : st == CG_TRACE_INCOMPLETE ? "incomplete" : "open";
}

/*
 * Check one trace. diff (taken) holds the journal's failures that concern it
 * (add_relevant); the trace's own are appended. Its elements may be shared
 * with other traces' lists: they are only read here.
 */
static json_t *verify_trace(const struct cg_replay_opts *o, const struct cg_journal_view *jv,
			    const struct cg_archive_index *ix, struct cg_smap *dirs, const char *id,
			    const struct tidx *t, json_t *diff)
{
	if (!diff)
		return NULL;
	enum cg_trace_state st = CG_TRACE_OPEN;
	char file[120];
	snprintf(file, sizeof(file), "journal (trace %s)", id);
	if (!t) {
		cg_diff_add(diff, "trace_unknown", id, 0, 0, "events in the journal", "none",
			    "the journal holds no event of this trace");
	} else {
		struct cg_evline *tv = calloc(t->n, sizeof(*tv));
		if (tv) {
			for (size_t k = 0; k < t->n; k++)
				tv[k] = jv->v[t->ix[k]];
			json_t *sd = json_array();
			st = cg_trace_check_structure(tv, t->n, false, file, sd);
			/* An open trace of a live daemon is in progress, not a failure. */
			size_t i;
			json_t *x;
			json_array_foreach(sd, i, x)
			{
				if (jv->live && st == CG_TRACE_OPEN &&
				    strcmp(json_string_value(json_object_get(x, "check")),
					   "not_sealed") == 0)
					continue;
				json_array_append(diff, x);
			}
			json_decref(sd);
			free(tv);
		}
		if (st != CG_TRACE_OPEN || !jv->live)
			check_package(o, jv, ix, dirs, id, t, st, diff);
	}
	const char *status = json_array_size(diff)	 ? "FAIL"
			     : st == CG_TRACE_INCOMPLETE ? "INCOMPLETE"
			     : st == CG_TRACE_OPEN	 ? "OPEN"
							 : "PASS";
	char ts[40];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	json_t *r = json_pack(
	    "{s:s, s:s, s:s, s:s, s:s, s:I, s:[ssssssss], s:I}", "trace_id", id, "status", status,
	    "state", state_name(st), "checked_at", ts, "scope", "trace+journal", "events",
	    (json_int_t)(t ? t->n : 0), "checks", "schema", "hash", "link", "sequence", "structure",
	    "journal", "checkpoint", "package", "failures", (json_int_t)json_array_size(diff));
	if (o->write_files && t && r) {
		char dir[4300];
		snprintf(dir, sizeof(dir), "%s/traces/%s", o->state_dir, id);
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			const json_t *docs[2] = { r, diff };
			const char *names[2] = { "replay.json", "diff.json" };
			for (int i = 0; i < 2; i++) {
				char *s = json_dumps(docs[i], JSON_INDENT(2));
				int fd = s ? openat(dfd, names[i],
						    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
					   : -1;
				if (fd >= 0) {
					size_t n = strlen(s);
					s[n] = '\n';
					(void)cg_write_all(fd, s, n + 1);
					close(fd);
				}
				free(s);
			}
			close(dfd);
		}
	}
	json_object_set_new(r, "failures_list", diff);
	return r;
}

/*
 * replay --all checks the traces on every CPU it may use: each trace's check
 * reads only the shared journal view, archive index and journal failures, and
 * writes only its own report (and, on request, its own directory). The
 * reports keep the order of a one-thread run.
 */
struct trace_job {
	const char *id;
	const struct tidx *t;
	json_t *relevant; /* the journal's failures that concern it (add_relevant) */
	json_t *report;	  /* verify_trace's; NULL only when memory ran out */
};

struct all_jobs {
	const struct cg_replay_opts *o;
	const struct cg_journal_view *jv;
	const struct cg_archive_index *ix;
	struct cg_smap *dirs; /* the listing of trace directories, when whole */
	struct trace_job *v;
	size_t n, cap;
	bool oom;
};

static void add_job(const char *key, void *value, void *arg)
{
	struct all_jobs *js = arg;
	if (strcmp(key, CG_JOURNAL_TRACE) == 0 || js->oom)
		return;
	if (js->n == js->cap) {
		size_t nc = js->cap ? js->cap * 2 : 1024;
		struct trace_job *q = realloc(js->v, nc * sizeof(*q));
		if (!q) {
			js->oom = true;
			return;
		}
		js->v = q;
		js->cap = nc;
	}
	js->v[js->n++] = (struct trace_job){ key, value, NULL, NULL };
}

static void run_job(size_t i, void *arg)
{
	struct all_jobs *js = arg;
	js->v[i].report = verify_trace(js->o, js->jv, js->ix, js->dirs, js->v[i].id, js->v[i].t,
				       js->v[i].relevant);
}

struct audit_job {
	const struct cg_replay_opts *o;
	const struct cg_archive_index *ix;
	struct cg_smap *journal_traces;
	bool live;
	json_t *diff; /* its own: the trace checks run meanwhile */
	bool started;
	pthread_t th;
};

/* A trace of the journal with a package: the journal's own events ("journal") have none. */
static bool journal_knows(const char *trace_id, void *journal_traces)
{
	return strcmp(trace_id, CG_JOURNAL_TRACE) != 0 &&
	       cg_smap_get(journal_traces, trace_id) != NULL;
}

static void *audit_run(void *arg)
{
	struct audit_job *a = arg;
	cg_archive_audit(a->o->state_dir, a->ix, journal_knows, a->journal_traces, a->live,
			 a->diff);
	return NULL;
}

struct orphan_ctx {
	struct cg_smap *journal_traces;
	json_t *diff;
};

static void report_orphan(const char *key, void *value, void *arg)
{
	struct orphan_ctx *c = arg;
	if (!journal_knows(key, c->journal_traces))
		cg_diff_add(c->diff, "trace_not_in_journal", key, 0, 0, NULL, NULL,
			    "a trace directory with no events in the journal");
}

int cg_replay_run(const struct cg_replay_opts *o, json_t **report)
{
	*report = NULL;
	if (!o || !o->state_dir || (!o->all && !cg_trace_id_valid(o->trace_id))) {
		errno = EINVAL;
		return -1;
	}
	struct cg_journal_view jv;
	struct signed_files sf = { 0 };
	json_t *jdiff = json_array();
	json_t *rep = json_object();
	json_t *jrep = json_object();
	json_t *traces = json_array();
	struct cg_smap *m = cg_smap_new();
	struct cg_smap *dirs = NULL;
	bool listed = false; /* dirs holds every trace directory */
	struct cg_archive_index *ix = NULL;
	int rc = -1;
	if (!jdiff || !rep || !jrep || !traces || !m) {
		errno = ENOMEM;
		goto free_all;
	}
	/*
	 * List the trace directories BEFORE reading the journal: a package is
	 * written only after its events are in the journal, so every directory
	 * seen now must have its events in the snapshot read next. (Listing after
	 * would race a live daemon sealing a call in between.)
	 */
	if (o->all && !(dirs = cg_smap_new())) {
		errno = ENOMEM;
		goto free_all;
	}
	if (o->all) {
		char dir[4200];
		snprintf(dir, sizeof(dir), "%s/traces", o->state_dir);
		DIR *d = opendir(dir);
		struct dirent *e;
		listed = d != NULL || errno == ENOENT;
		while (d) {
			errno = 0;
			if (!(e = readdir(d))) {
				listed = listed && errno == 0; /* a failed readdir: not whole */
				break;
			}
			if (e->d_name[0] != '.' && strcmp(e->d_name, "archive") != 0 &&
			    cg_smap_put(dirs, e->d_name, (void *)1) < 0) {
				listed = false;
				break;
			}
		}
		if (d)
			closedir(d);
	}
	/* The archives' indexes too, before the journal (packed traces are sealed ones). */
	if (!(ix = o->all ? cg_archive_index_load_held(o->state_dir)
			  : cg_archive_index_load(o->state_dir)))
		goto free_all; /* errno: ENOMEM, or EINVAL for an index that is not a file */
	int64_t signed_read_ns = cg_now_wall_ns(); /* taken first: the earlier, the kinder */
	signed_files_read(o, &sf);
	if (cg_journal_load(o->state_dir, &jv, jdiff) < 0) {
		cg_diff_add(jdiff, "journal_unreadable", "journal/", 0, 0, NULL, NULL,
			    strerror(errno));
		memset(&jv, 0, sizeof(jv));
	}
	jv.signed_read_ns = signed_read_ns;
	if (index_traces(&jv, m) < 0) {
		errno = ENOMEM;
		goto free_view;
	}
	/* The precise, naming check runs only when the one-pass check finds something. */
	if (jv.live || json_array_size(jdiff) || !chain_intact(&jv, m))
		cg_evlines_check_chain(jv.v, jv.n, true, "journal", jdiff);
	journal_leaves(&jv);
	check_checkpoints(o, &sf, &jv, jdiff, jrep);
	json_object_set_new(jrep, "events", json_integer((json_int_t)jv.n));
	json_object_set_new(jrep, "bytes", json_integer((json_int_t)jv.len));
	json_object_set_new(jrep, "live", json_boolean(jv.live));
	json_object_set_new(jrep, "head",
			    json_string(jv.n ? jv.v[jv.n - 1].hash : cg_journal_genesis()));
	json_t *failures = json_array();
	if (o->all) {
		struct all_jobs js = { .o = o, .jv = &jv, .ix = ix, .dirs = listed ? dirs : NULL };
		cg_smap_each(m, add_job, &js);
		for (size_t k = 0; !js.oom && k < js.n; k++) {
			js.v[k].relevant = json_array();
			js.oom = !js.v[k].relevant;
			if (!js.oom)
				add_relevant(js.v[k].relevant, jdiff, &jv, js.v[k].t);
		}
		/*
		 * The archives as wholes (what no index line shows, or no journal
		 * knows) are walked on a thread of their own while the traces are
		 * checked: both only read the index and the journal's trace map.
		 */
		struct audit_job aj = { o, ix, m, jv.live, json_array(), false };
		aj.started = aj.diff && pthread_create(&aj.th, NULL, audit_run, &aj) == 0;
		if (!js.oom)
			cg_parallel_for(js.n, 256, run_job, &js);
		else
			for (size_t k = 0; k < js.n; k++)
				json_decref(js.v[k].relevant);
		if (aj.started)
			(void)pthread_join(aj.th, NULL);
		else if (aj.diff)
			(void)audit_run(&aj);
		else
			cg_diff_add(jdiff, "archive_unreadable", CG_ARCHIVE_DIR, 0, 0, NULL,
				    "ENOMEM", "out of memory while reading the archives");
		for (size_t k = 0; k < js.n; k++) {
			if (js.oom)
				json_decref(js.v[k].report);
			else /* takes the report, or frees it; NULL fails */
				js.oom = json_array_append_new(traces, js.v[k].report) != 0;
		}
		free(js.v);
		if (js.oom) { /* a trace left unchecked must not read as a pass */
			json_decref(failures);
			errno = ENOMEM;
			goto free_view;
		}
		/* A trace directory the journal knows nothing of was not written by the daemon. */
		struct orphan_ctx oc = { m, jdiff };
		if (dirs)
			cg_smap_each(dirs, report_orphan, &oc);
		json_array_extend(jdiff, aj.diff);
		json_decref(aj.diff);
		json_array_extend(failures, jdiff);
	} else {
		const struct tidx *t = cg_smap_get(m, o->trace_id);
		json_t *relevant = json_array();
		if (relevant)
			add_relevant(relevant, jdiff, &jv, t);
		json_array_append_new(traces,
				      verify_trace(o, &jv, ix, NULL, o->trace_id, t, relevant));
	}
	size_t i, n_pass = 0, n_fail = 0, n_incomplete = 0, n_open = 0;
	json_t *t;
	json_array_foreach(traces, i, t)
	{
		const char *s = json_string_value(json_object_get(t, "status"));
		json_t *fl = json_object_get(t, "failures_list");
		if (strcmp(s, "PASS") == 0)
			n_pass++;
		else if (strcmp(s, "INCOMPLETE") == 0)
			n_incomplete++;
		else if (strcmp(s, "OPEN") == 0)
			n_open++;
		else
			n_fail++;
		size_t k;
		json_t *f;
		json_array_foreach(fl, k, f)
		{
			json_t *c = json_copy(f);
			json_object_set_new(
			    c, "trace_id",
			    json_string(json_string_value(json_object_get(t, "trace_id"))));
			json_array_append_new(failures, c);
		}
	}
	bool pass = o->all ? json_array_size(failures) == 0 && n_fail == 0
			   : n_pass == 1 && json_array_size(failures) == 0;
	json_object_set_new(rep, "status", json_string(pass ? "PASS" : "FAIL"));
	json_object_set_new(rep, "journal", jrep);
	jrep = NULL;
	json_object_set_new(rep, "summary",
			    json_pack("{s:I, s:I, s:I, s:I}", "pass", (json_int_t)n_pass, "fail",
				      (json_int_t)n_fail, "incomplete", (json_int_t)n_incomplete,
				      "open", (json_int_t)n_open));
	json_object_set_new(rep, "traces", traces);
	traces = NULL;
	json_object_set_new(rep, "failures", failures);
	*report = rep;
	rep = NULL;
	rc = pass ? 0 : 1;
free_view:
	cg_journal_view_free(&jv);
free_all:
	signed_files_free(&sf);
	cg_archive_index_free(ix);
	cg_smap_free(m, tidx_free);
	cg_smap_free(dirs, NULL);
	json_decref(traces);
	json_decref(jrep);
	json_decref(rep);
	json_decref(jdiff);
	return rc;
}

/* ---- rebuild ----------------------------------------------------------------------- */

struct rebuild_ctx {
	const char *state_dir;
	const struct cg_journal_view *jv;
	int n;
	int *failed; /* how many could not be written */
};

static int rebuild_one(const char *state_dir, const struct cg_journal_view *jv, const char *id,
		       const struct tidx *t)
{
	size_t len = 0;
	for (size_t k = 0; k < t->n; k++)
		len += jv->v[t->ix[k]].line_len;
	char *buf = malloc(len + 1);
	if (!buf)
		return -1;
	size_t off = 0;
	for (size_t k = 0; k < t->n; k++) {
		memcpy(buf + off, jv->v[t->ix[k]].line, jv->v[t->ix[k]].line_len);
		off += jv->v[t->ix[k]].line_len;
	}
	int rc = cg_trace_rebuild_package(state_dir, id, buf, len);
	free(buf);
	return rc;
}

static void rebuild_each(const char *key, void *value, void *arg)
{
	struct rebuild_ctx *c = arg;
	if (strcmp(key, CG_JOURNAL_TRACE) == 0)
		return;
	if (rebuild_one(c->state_dir, c->jv, key, value) == 0)
		c->n++;
	else
		(*c->failed)++;
}

int cg_evidence_rebuild(const char *state_dir, const char *trace_id, int *failed)
{
	*failed = 0;
	struct cg_journal_view jv;
	if (cg_journal_load(state_dir, &jv, NULL) < 0)
		return -1;
	struct cg_smap *m = cg_smap_new();
	int rc = -1;
	if (!m || index_traces(&jv, m) < 0) {
		errno = ENOMEM;
		goto free_view;
	}
	if (trace_id) {
		struct tidx *t = cg_smap_get(m, trace_id);
		if (!t) {
			errno = ENOENT;
			goto free_view;
		}
		rc = rebuild_one(state_dir, &jv, trace_id, t) == 0 ? 1 : -1;
	} else {
		struct rebuild_ctx c = { state_dir, &jv, 0, failed };
		cg_smap_each(m, rebuild_each, &c);
		rc = c.n;
	}
free_view:
	cg_smap_free(m, tidx_free);
	cg_journal_view_free(&jv);
	return rc;
}
