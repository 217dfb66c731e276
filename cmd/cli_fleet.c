/* SPDX-License-Identifier: MIT */
/*
 * cli_fleet — a fleet's evidence in PostgreSQL (docs/fleet.md):
 * `callgate evidence ship --to URL` copies this host's journal events (their
 * exact bytes and hashes), its signed checkpoints with their C2SP notes, and
 * its public key into the database, resuming where the database stops;
 * `callgate evidence verify --from URL` re-verifies every host's chains and
 * signatures from the database alone. The schema is dist/fleet.sql,
 * compiled in (cg_fleet_sql). Only the CLI links libpq.
 *
 * Invariants:
 *  - ship MUST NOT store what does not verify here first: each line's hash,
 *    both chains, and every checkpoint's signatures, head and Merkle root are
 *    checked (journal.c, note.c, merkle.c) before the batch holding them is
 *    sent; a break stops the ship and names the seq.
 *  - ship sends only events a signed checkpoint covers: the daemon syncs
 *    events before it signs them, so a crash can never take back a shipped
 *    event, and an unsigned row in the database is a forgery verify reports.
 *  - ship MUST NOT write the state directory or take the journal's lock:
 *    it reads whole lines only, and a running daemon is never held up.
 *  - A batch is one transaction, with the host's row locked: a crash leaves
 *    the database at a batch boundary; a row already present must be byte
 *    for byte what is shipped again (a no-op), else the batch is rolled back
 *    and the host and seq named.
 *  - verify MUST check every stored copy (seq, trace, type, ts, hashes,
 *    payload) against the line's bytes, so the views cannot be misled by an
 *    edited column, and exit non-zero on any break.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <libpq-fe.h>
#include <openssl/pem.h>

#include "cli.h"
#include "journal.h"
#include "key.h"
#include "merkle.h"
#include "note.h"
#include "util.h"

extern const char cg_fleet_sql[]; /* dist/fleet.sql, compiled in */

#define EXIT_BREAK     1   /* verify found a break; ship refused what it read or met a conflict */
#define BATCH_EVENTS   500 /* events per transaction */
#define MAX_FAILS      50  /* failures listed per host (the count goes on) */
#define SHIP_POLL_MS   1000
#define CKPT_LINE_MAX  4096
#define FLEET_LOCK_KEY "7462295338040117" /* pg_advisory_xact_lock: schema creation */
#define TS_SQL(col)    "to_char(" col " AT TIME ZONE 'UTC','YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* ---- the chain: every check ship and verify make, over lines in seq order --------- */

struct tstate {
	uint64_t tseq;
	char hash[65];
};

struct chain {
	EVP_PKEY *key;			   /* checkpoints must verify with it (borrowed) */
	char key_fp[65];		   /* its fingerprint */
	char origin[CG_NOTE_NAME_MAX + 1]; /* the log's name: its notes' origin and key name */
	uint64_t seq;			   /* the last event taken */
	char head[65];			   /* its "hash" member (the genesis before seq 1) */
	struct cg_merkle_range mr;	   /* the tree over events 1..seq */
	struct cg_smap *traces;		   /* open traces: trace id -> struct tstate */
	uint64_t signed_seq;		   /* the last checkpoint's seq */
	uint64_t n_ckpt;		   /* checkpoints taken */
	json_t *fails;			   /* failures (cg_diff_add objects), at most MAX_FAILS */
	uint64_t n_fails;		   /* failures found, listed or not */
};

static int chain_init(struct chain *c, EVP_PKEY *key, const char *origin)
{
	memset(c, 0, sizeof(*c));
	c->key = key;
	memcpy(c->head, cg_journal_genesis(), 65);
	cg_merkle_range_init(&c->mr);
	snprintf(c->origin, sizeof(c->origin), "%s", origin);
	c->traces = cg_smap_new();
	c->fails = json_array();
	if (!c->traces || !c->fails || cg_key_fingerprint(key, c->key_fp) < 0)
		return -1;
	return 0;
}

static void chain_free(struct chain *c)
{
	cg_smap_free(c->traces, free);
	json_decref(c->fails);
	c->traces = NULL;
	c->fails = NULL;
}

static void chain_fail(struct chain *c, const char *check, uint64_t seq, const char *expected,
		       const char *found, const char *detail)
{
	if (c->n_fails++ < MAX_FAILS)
		cg_diff_add(c->fails, check, NULL, 0, seq, expected, found, detail);
}

static void hex_of(const unsigned char *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* The trace chain of one event: tseq and tprev follow the trace's previous event. */
static int chain_trace(struct chain *c, const struct cg_evline *o)
{
	struct tstate *t = cg_smap_get(c->traces, o->trace);
	if (!t) {
		if (!(t = calloc(1, sizeof(*t))) || cg_smap_put(c->traces, o->trace, t) < 0) {
			free(t);
			return -1;
		}
		memcpy(t->hash, cg_journal_genesis(), 65);
	}
	if (o->tseq != t->tseq + 1 || memcmp(o->tprev, t->hash, 64) != 0)
		chain_fail(c, "trace_link", o->seq, t->hash, o->tprev,
			   "the event does not follow its trace's previous event");
	t->tseq = o->tseq;
	memcpy(t->hash, o->hash, 65);
	/* Nothing may follow a seal, refusal or incomplete marker: forget the trace. */
	if (cg_event_ends_trace(o->type))
		free(cg_smap_del(c->traces, o->trace));
	return 0;
}

/*
 * Take the next event line. Parses it into *o and its leaf hash into leaf
 * (hex). Returns 0 when it holds, 1 when a failure was recorded (the chain
 * still advanced to the line's seq), 2 when the line does not parse (the
 * chain did not advance: the caller knows the seq), -1 on ENOMEM.
 */
static int chain_event(struct chain *c, const char *line, size_t len, struct cg_evline *o,
		       char leaf[65])
{
	unsigned char lh[CG_MERKLE_HASH_LEN];
	const char *check;
	char why[200], a[24], b[24];
	uint64_t before = c->n_fails;
	cg_merkle_leaf_hash(line, len, lh);
	hex_of(lh, sizeof(lh), leaf);
	if (cg_evline_parse(line, len, o, &check, why, sizeof(why)) < 0) {
		chain_fail(c, check, c->seq + 1, NULL, NULL, why);
		return 2;
	}
	if (!o->hash_ok)
		chain_fail(c, "hash", o->seq, NULL, o->hash,
			   "the line's bytes do not hash to its \"hash\" member");
	if (o->seq != c->seq + 1) {
		snprintf(a, sizeof(a), "%" PRIu64, c->seq + 1);
		snprintf(b, sizeof(b), "%" PRIu64, o->seq);
		chain_fail(c, o->seq <= c->seq ? "line_reordered" : "line_deleted", o->seq, a, b,
			   "the journal's seq does not go on by one");
	}
	if (memcmp(o->prev, c->head, 64) != 0)
		chain_fail(c, "link", o->seq, c->head, o->prev,
			   "\"prev\" does not name the previous event");
	if (chain_trace(c, o) < 0 || cg_merkle_range_append(&c->mr, lh) < 0)
		return -1;
	c->seq = o->seq;
	memcpy(c->head, o->hash, 65);
	return c->n_fails == before ? 0 : 1;
}

/*
 * A line that does not parse still takes its place, as its row's columns
 * say (verify goes on past it, so that only the break itself is reported).
 */
static int chain_skip(struct chain *c, uint64_t seq, const char *trace, uint64_t tseq,
		      const char *hash, const char *line, size_t len)
{
	unsigned char lh[CG_MERKLE_HASH_LEN];
	cg_merkle_leaf_hash(line, len, lh);
	if (cg_merkle_range_append(&c->mr, lh) < 0)
		return -1;
	struct tstate *t = cg_smap_get(c->traces, trace);
	if (!t && (!(t = calloc(1, sizeof(*t))) || cg_smap_put(c->traces, trace, t) < 0)) {
		free(t);
		return -1;
	}
	t->tseq = tseq;
	snprintf(t->hash, sizeof(t->hash), "%s", hash);
	c->seq = seq;
	snprintf(c->head, sizeof(c->head), "%s", hash);
	return 0;
}

/*
 * The checkpoint's C2SP note, rebuilt from its line and the log's origin,
 * into *note (malloc'd; NULL for a line older than notes). 0 when it
 * verifies with the chain's key, 1 when not (recorded), -1 on ENOMEM.
 */
static int chain_note(struct chain *c, const struct cg_ckpt *ck, char **note, size_t *note_len)
{
	unsigned char root[CG_MERKLE_HASH_LEN];
	char text[CG_NOTE_NAME_MAX + 128], w[200];
	*note = NULL;
	if (!ck->root[0] || !ck->note_sig_len)
		return 0;
	int tn = cg_hex_decode(ck->root, root, CG_MERKLE_HASH_LEN) < 0
		     ? -1
		     : cg_note_checkpoint_text(text, sizeof(text), c->origin, ck->seq, root);
	if (tn < 0) {
		chain_fail(c, "checkpoint_origin", ck->seq, NULL, c->origin,
			   "no note can be made for this log's name");
		return 1;
	}
	*note =
	    cg_note_assemble(text, (size_t)tn, c->origin, ck->note_sig, ck->note_sig_len, note_len);
	if (!*note)
		return -1;
	struct cg_note n;
	if (cg_note_parse(*note, *note_len, &n, w, sizeof(w)) < 0 ||
	    !cg_note_verify(&n, *note, NULL, c->key)) {
		chain_fail(c, "note_signature", ck->seq, NULL, NULL,
			   "the checkpoint's note signature does not verify with the host's key "
			   "under its origin");
		return 1;
	}
	return 0;
}

/*
 * Take a checkpoint line at the chain's current seq: its key, its Ed25519
 * signature, the head and Merkle root it signs, and its note. *note as
 * chain_note. 0 when it holds, 1 when a failure was recorded, -1 on ENOMEM.
 */
static int chain_ckpt(struct chain *c, const char *line, size_t len, struct cg_ckpt *ck,
		      char **note, size_t *note_len)
{
	char why[160], rhex[65];
	unsigned char root[CG_MERKLE_HASH_LEN];
	uint64_t before = c->n_fails;
	*note = NULL;
	if (cg_ckpt_parse(line, len, ck, why, sizeof(why)) < 0) {
		chain_fail(c, "checkpoint_schema", c->seq, NULL, NULL, why);
		return 1;
	}
	if (strcmp(ck->key, c->key_fp) != 0)
		chain_fail(c, "checkpoint_key", ck->seq, c->key_fp, ck->key,
			   "the checkpoint was signed by another key");
	else if (!cg_key_verify(c->key, line, ck->msg_len, ck->sig, ck->sig_len))
		chain_fail(c, "checkpoint_signature", ck->seq, NULL, NULL,
			   "the Ed25519 signature does not verify");
	if (strcmp(ck->head, c->head) != 0)
		chain_fail(c, "checkpoint_mismatch", ck->seq, c->head, ck->head,
			   "the signed head is not the event at that seq");
	cg_merkle_range_root(&c->mr, root);
	hex_of(root, sizeof(root), rhex);
	if (ck->root[0] && strcmp(ck->root, rhex) != 0)
		chain_fail(c, "merkle_root_mismatch", ck->seq, rhex, ck->root,
			   "the signed Merkle root is not the root of the events");
	if (chain_note(c, ck, note, note_len) < 0)
		return -1;
	c->signed_seq = ck->seq;
	c->n_ckpt++;
	return c->n_fails == before ? 0 : 1;
}

/* ---- the database -------------------------------------------------------------- */

/* Print "callgate evidence SUB: what: <the server's message>" and return code. */
static int pq_err(const char *sub, PGconn *db, const PGresult *r, const char *what, int code)
{
	const char *m = r ? PQresultErrorMessage(r) : "";
	if (!m || !*m)
		m = PQerrorMessage(db);
	fprintf(stderr, "callgate evidence %s: %s: %s", sub, what, m && *m ? m : "failed\n");
	if (m && *m && m[strlen(m) - 1] != '\n')
		fputc('\n', stderr);
	return code;
}

/* Run one statement expecting status want; the result (caller clears) or NULL after pq_err. */
static PGresult *pq_run(const char *sub, PGconn *db, ExecStatusType want, const char *what,
			const char *sql, int n, const char *const *vals, const int *lens,
			const int *fmts, int binary)
{
	PGresult *r = PQexecParams(db, sql, n, NULL, vals, lens, fmts, binary);
	if (PQresultStatus(r) != want) {
		pq_err(sub, db, r, what, CG_EXIT_ERROR);
		PQclear(r);
		return NULL;
	}
	return r;
}

static int pq_cmd(const char *sub, PGconn *db, const char *what, const char *sql)
{
	PGresult *r = pq_run(sub, db, PGRES_COMMAND_OK, what, sql, 0, NULL, NULL, NULL, 0);
	PQclear(r);
	return r ? 0 : -1;
}

/*
 * Connect to conninfo (a postgresql:// URI or key=value words). The
 * connection (caller PQfinish-es), or NULL after saying why. Notices (the
 * schema's "already exists") are not printed.
 */
static void quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static PGconn *db_open(const char *sub, const char *conninfo)
{
	PGconn *db = PQconnectdb(conninfo);
	if (!db || PQstatus(db) != CONNECTION_OK) {
		fprintf(stderr, "callgate evidence %s: cannot connect to the database: %s", sub,
			db ? PQerrorMessage(db) : "out of memory\n");
		PQfinish(db);
		return NULL;
	}
	PQsetNoticeProcessor(db, quiet, NULL);
	return db;
}

/*
 * True when every table and view of dist/fleet.sql exists (for a ship, its
 * row policies too: with_policies); -1 on error. A database from before the
 * row policies still verifies.
 */
static int schema_present(const char *sub, PGconn *db, bool with_policies)
{
	PGresult *r = pq_run(
	    sub, db, PGRES_TUPLES_OK, "cannot look for the schema",
	    with_policies ? "SELECT to_regclass('callgate.hosts') IS NOT NULL AND "
			    "to_regclass('callgate.events') IS NOT NULL AND "
			    "to_regclass('callgate.checkpoints') IS NOT NULL AND "
			    "to_regclass('callgate.denials_by_rule') IS NOT NULL AND "
			    "to_regclass('callgate.approvals') IS NOT NULL AND "
			    "EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = 'callgate' "
			    "AND policyname = 'shipper_adds')"
			  : "SELECT to_regclass('callgate.hosts') IS NOT NULL AND "
			    "to_regclass('callgate.events') IS NOT NULL AND "
			    "to_regclass('callgate.checkpoints') IS NOT NULL AND "
			    "to_regclass('callgate.denials_by_rule') IS NOT NULL AND "
			    "to_regclass('callgate.approvals') IS NOT NULL",
	    0, NULL, NULL, NULL, 0);
	if (!r)
		return -1;
	int ok = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return ok;
}

/*
 * Create the schema when any part of it is missing, in one transaction
 * under an advisory lock (two shippers starting at once must not race on
 * CREATE). A role that may only insert works once the schema exists.
 */
static int schema_ensure(const char *sub, PGconn *db)
{
	int have = schema_present(sub, db, true);
	if (have != 0)
		return have < 0 ? -1 : 0;
	if (pq_cmd(sub, db, "cannot begin", "BEGIN") < 0)
		return -1;
	PGresult *r = PQexec(db, "SELECT pg_advisory_xact_lock(" FLEET_LOCK_KEY ")");
	bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	PQclear(r);
	r = ok ? PQexec(db, cg_fleet_sql) : NULL;
	if (!ok || PQresultStatus(r) != PGRES_COMMAND_OK) {
		pq_err(sub, db, r, "cannot create the schema (dist/fleet.sql)", 0);
		PQclear(r);
		PQclear(PQexec(db, "ROLLBACK"));
		return -1;
	}
	PQclear(r);
	return pq_cmd(sub, db, "cannot create the schema", "COMMIT");
}

/* ---- reading a growing file by whole lines ------------------------------------- */

struct lreader {
	int fd;
	char *buf;
	size_t cap, pos, have; /* buf[pos..have) not yet taken */
	uint64_t off;	       /* the file offset of buf[have] */
};

static int lr_open(struct lreader *r, const char *path, size_t cap)
{
	memset(r, 0, sizeof(*r));
	r->fd = cg_file_open_regular(AT_FDCWD, path, NULL);
	r->buf = r->fd >= 0 ? malloc(cap) : NULL;
	r->cap = cap;
	if (!r->buf) {
		int e = errno;
		if (r->fd >= 0)
			close(r->fd);
		r->fd = -1;
		errno = e;
		return -1;
	}
	return 0;
}

static void lr_close(struct lreader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
}

/*
 * Forget what was read but not taken, so that the next read starts at the
 * first line not taken: a torn tail that crash recovery cuts back, or lines
 * past the last checkpoint, are read again as they are then.
 */
static void lr_rewind(struct lreader *r)
{
	r->off -= r->have - r->pos;
	r->pos = r->have = 0;
}

/*
 * The next whole line (with its '\n'): 1 with *line (valid until the next
 * call) and *len; 0 when no whole line is there yet (a partial one is left
 * unread); -1 with errno (E2BIG: a line longer than the buffer).
 */
static int lr_next(struct lreader *r, const char **line, size_t *len)
{
	for (;;) {
		const char *p = r->buf + r->pos;
		const char *nl = memchr(p, '\n', r->have - r->pos);
		if (nl) {
			*line = p;
			*len = (size_t)(nl - p) + 1;
			r->pos += *len;
			return 1;
		}
		if (r->pos > 0) {
			memmove(r->buf, p, r->have - r->pos);
			r->have -= r->pos;
			r->pos = 0;
		}
		if (r->have == r->cap) {
			errno = E2BIG;
			return -1;
		}
		ssize_t n;
		do
			n = pread(r->fd, r->buf + r->have, r->cap - r->have, (off_t)r->off);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -1;
		if (n == 0) {
			lr_rewind(r);
			return 0;
		}
		r->have += (size_t)n;
		r->off += (uint64_t)n;
	}
}

/*
 * Whether a payload goes to the jsonb column: not when PostgreSQL could not
 * hold it (\u0000, bytes outside ASCII, which the writer never leaves
 * unescaped) or it is not one JSON object with distinct keys. Ship and
 * verify apply the same rule, so a NULL payload is never a silent gap.
 */
static bool payload_queryable(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)p[i] >= 0x80)
			return false;
	if (memmem(p, n, "\\u0000", 6))
		return false;
	json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
	bool ok = json_is_object(j);
	json_decref(j);
	return ok;
}

/* ---- evidence ship ------------------------------------------------------------- */

static const struct cg_cli_opt ship_opts[] = {
	{ "--to", "URL", "the database: postgresql://… (a libpq connection string)" },
	{ "--state-dir", "DIR", "the daemon's state directory to ship from" },
	{ "--follow", NULL, "keep shipping new events until SIGINT or SIGTERM" },
	{ "--interval", "MS", "with --follow, how often to look for new events (default 1000)" },
	{ NULL, NULL, NULL },
};

struct ship_ev {
	char *line; /* owned copy, '\n' included */
	size_t len;
	uint64_t seq, tseq;
	char trace[CG_TRACE_ID_MAX + 1], type[32], ts[40], hash[65], leaf[65];
	bool queryable; /* the payload goes to the jsonb column */
	size_t payload_off, payload_len;
};

struct ship_ck {
	char *line; /* owned copy, '\n' included */
	size_t len;
	uint64_t seq;
	char ts[40];
	char *note; /* owned, NULL for a line older than notes */
};

struct ship {
	PGconn *db;
	const char *state_dir;
	char host[CG_NOTE_NAME_MAX + 1];
	struct chain ch;
	uint64_t db_seq;      /* the database's last event of this host (0: none) */
	int64_t db_ckpt;      /* its last checkpoint (-1: none) */
	struct lreader seg;   /* the segment being read */
	char seg_name[32];    /* its name ("" before the first) */
	struct lreader ckr;   /* checkpoints.ndjson */
	struct ship_ck *cq;   /* checkpoints read, waiting for the chain to reach them */
	size_t cq_head, n_cq; /* cq[cq_head..n_cq) wait */
	size_t cap_cq;
	struct ship_ev bev[BATCH_EVENTS]; /* the batch: events … */
	size_t n_bev;
	struct ship_ck *bck; /* … and checkpoints */
	size_t n_bck, cap_bck;
	uint64_t n_shipped_ev, n_shipped_ck;
};

static void ship_ck_free(struct ship_ck *k)
{
	free(k->line);
	free(k->note);
	k->line = k->note = NULL;
}

static void ship_batch_free(struct ship *s)
{
	for (size_t i = 0; i < s->n_bev; i++)
		free(s->bev[i].line);
	for (size_t i = 0; i < s->n_bck; i++)
		ship_ck_free(&s->bck[i]);
	s->n_bev = s->n_bck = 0;
}

static void ship_free(struct ship *s)
{
	ship_batch_free(s);
	for (size_t i = s->cq_head; i < s->n_cq; i++)
		ship_ck_free(&s->cq[i]);
	free(s->cq);
	free(s->bck);
	lr_close(&s->seg);
	lr_close(&s->ckr);
	chain_free(&s->ch);
	EVP_PKEY_free(s->ch.key);
	PQfinish(s->db);
}

/* The first failure the chain recorded, as one line on stderr: it stops the ship. */
static int ship_broken(struct ship *s)
{
	json_t *f = json_array_get(s->ch.fails, 0);
	uint64_t seq = (uint64_t)json_integer_value(json_object_get(f, "seq"));
	/* The batch in hand is dropped: it holds events no verified checkpoint signs. */
	uint64_t from = s->n_bev && s->bev[0].seq < seq ? s->bev[0].seq : seq;
	fprintf(stderr,
		"callgate evidence ship: %s: the local evidence does not verify at seq %" PRIu64
		": %s: %s; nothing from seq %" PRIu64
		" on was shipped (run callgate replay --all)\n",
		s->host, seq, json_string_value(json_object_get(f, "check")),
		json_string_value(json_object_get(f, "detail")), from);
	return EXIT_BREAK;
}

/* Prepare the statements a batch uses. 0 or -1 (said). */
static int ship_prepare(struct ship *s)
{
	static const struct {
		const char *name, *sql;
		int n;
	} st[] = {
		{ "ev_ins",
		  "INSERT INTO callgate.events (host, seq, trace, tseq, type, ts, hash, leaf_hash,"
		  " line, payload) VALUES ($1, $2, $3, $4, $5, $6::timestamptz, $7, $8, $9,"
		  " $10::jsonb) ON CONFLICT (host, seq) DO NOTHING RETURNING seq",
		  10 },
		{ "ev_get", "SELECT line FROM callgate.events WHERE host = $1 AND seq = $2", 2 },
		{ "ck_ins",
		  "INSERT INTO callgate.checkpoints (host, seq, ts, line, note) VALUES ($1, $2,"
		  " $3::timestamptz, $4, $5) ON CONFLICT (host, seq) DO NOTHING RETURNING seq",
		  5 },
		{ "ck_get", "SELECT line FROM callgate.checkpoints WHERE host = $1 AND seq = $2",
		  2 },
		{ "host_lock", "SELECT 1 FROM callgate.hosts WHERE host = $1 FOR UPDATE", 1 },
		{ "host_done", "UPDATE callgate.hosts SET last_shipped = now() WHERE host = $1",
		  1 },
	};
	for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
		PGresult *r = PQprepare(s->db, st[i].name, st[i].sql, st[i].n, NULL);
		bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		if (!ok)
			pq_err("ship", s->db, r, "cannot prepare a statement", 0);
		PQclear(r);
		if (!ok)
			return -1;
	}
	return 0;
}

/* The statement and parameters of row i of the batch (events first, then checkpoints). */
struct row {
	const char *ins, *get, *what; /* insert and read-back statements; "event"/"checkpoint" */
	const char *v[10];
	int lens[10], fmts[10], n;
	char seq[24], tseq[24];
	char *pl; /* owned: the payload as text, or NULL */
	const char *line;
	size_t len;
	uint64_t seqn;
};

static int row_of(struct ship *s, size_t i, struct row *w)
{
	memset(w, 0, sizeof(*w));
	if (i < s->n_bev) {
		struct ship_ev *e = &s->bev[i];
		snprintf(w->seq, sizeof(w->seq), "%" PRIu64, e->seq);
		snprintf(w->tseq, sizeof(w->tseq), "%" PRIu64, e->tseq);
		if (e->queryable && !(w->pl = strndup(e->line + e->payload_off, e->payload_len)))
			return -1;
		const char *v[10] = { s->host, w->seq,	e->trace, w->tseq, e->type,
				      e->ts,   e->hash, e->leaf,  e->line, w->pl };
		memcpy(w->v, v, sizeof(v));
		w->n = 10;
		w->lens[8] = (int)e->len;
		w->fmts[8] = 1; /* the line as bytes: bytea, no escaping */
		w->ins = "ev_ins";
		w->get = "ev_get";
		w->what = "event";
		w->line = e->line;
		w->len = e->len;
		w->seqn = e->seq;
		return 0;
	}
	struct ship_ck *k = &s->bck[i - s->n_bev];
	snprintf(w->seq, sizeof(w->seq), "%" PRIu64, k->seq);
	const char *v[5] = { s->host, w->seq, k->ts, k->line, k->note };
	memcpy(w->v, v, sizeof(v));
	w->n = 5;
	w->lens[3] = (int)k->len;
	w->fmts[3] = 1;
	w->ins = "ck_ins";
	w->get = "ck_get";
	w->what = "checkpoint";
	w->line = k->line;
	w->len = k->len;
	w->seqn = k->seq;
	return 0;
}

/*
 * Read the pipeline's results: each insert's (one result, then NULL) in
 * order, then the sync. fresh[i] is set when row i was inserted. 0, or -1
 * (said once).
 */
static int pipeline_results(struct ship *s, unsigned char *fresh, size_t sent)
{
	int rc = 0;
	size_t i = 0;
	for (;;) {
		PGresult *r = PQgetResult(s->db);
		if (!r) {
			/* The end of one statement's results; more ends than statements: lost. */
			if (++i > sent + 1 || PQstatus(s->db) == CONNECTION_BAD) {
				pq_err("ship", s->db, NULL, "the connection was lost", 0);
				return -1;
			}
			continue;
		}
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			return rc;
		}
		if (st == PGRES_TUPLES_OK && i < sent)
			fresh[i] = PQntuples(r) > 0;
		else if (!rc) {
			pq_err("ship", s->db, r, "cannot store a row", 0);
			rc = -1;
		}
		PQclear(r);
	}
}

/*
 * Send every row's insert (ON CONFLICT DO NOTHING) in one libpq pipeline,
 * so a batch costs one round trip, not one per row. The results are small
 * (a row each), so the server never blocks on us while we send. 0, or -1.
 */
static int ship_pipeline(struct ship *s, unsigned char *fresh, size_t n)
{
	if (PQenterPipelineMode(s->db) != 1) {
		pq_err("ship", s->db, NULL, "cannot enter pipeline mode", 0);
		return -1;
	}
	int rc = 0;
	size_t sent = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		struct row w;
		if (row_of(s, i, &w) < 0 ||
		    !PQsendQueryPrepared(s->db, w.ins, w.n, w.v, w.lens, w.fmts, 0))
			rc = -1;
		else
			sent++;
		free(w.pl);
		(void)PQconsumeInput(s->db);
	}
	if (rc)
		pq_err("ship", s->db, NULL, "cannot send a row", 0);
	if (PQpipelineSync(s->db) != 1 || pipeline_results(s, fresh, sent) < 0)
		rc = -1;
	if (PQexitPipelineMode(s->db) != 1 && !rc) {
		pq_err("ship", s->db, NULL, "cannot leave pipeline mode", 0);
		rc = -1;
	}
	return rc;
}

/*
 * A row that was there already must be byte for byte the one shipped now.
 * 0 the same, 1 a different row holds that seq (said), -1 a database error.
 */
static int ship_compare(struct ship *s, const struct row *w)
{
	PGresult *r = PQexecPrepared(s->db, w->get, 2, w->v, NULL, NULL, 1);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		pq_err("ship", s->db, r, "cannot read a stored row back", 0);
		PQclear(r);
		return -1;
	}
	bool same = (size_t)PQgetlength(r, 0, 0) == w->len &&
		    memcmp(PQgetvalue(r, 0, 0), w->line, w->len) == 0;
	PQclear(r);
	if (same)
		return 0;
	fprintf(stderr,
		"callgate evidence ship: host %s seq %" PRIu64
		": the database holds a different %s at this seq; nothing of this batch was "
		"stored (see docs/fleet.md, \"Conflicts\")\n",
		s->host, w->seqn, w->what);
	return 1;
}

/* Insert the batch's rows; count those added; compare those already there. */
static int ship_batch_rows(struct ship *s, uint64_t *n_ev, uint64_t *n_ck)
{
	size_t n = s->n_bev + s->n_bck;
	unsigned char *fresh = calloc(n ? n : 1, 1);
	int rc = fresh ? ship_pipeline(s, fresh, n) : -1;
	for (size_t i = 0; !rc && i < n; i++) {
		struct row w;
		if (fresh[i]) {
			*(i < s->n_bev ? n_ev : n_ck) += 1;
			continue;
		}
		rc = row_of(s, i, &w) < 0 ? -1 : ship_compare(s, &w);
		free(w.pl);
	}
	free(fresh);
	return rc;
}

/*
 * Store the batch in one transaction, with the host's row locked so that
 * two shippers of one host take turns. 0, EXIT_BREAK on a conflict, or
 * CG_EXIT_ERROR; the batch is emptied either way.
 */
static int ship_flush(struct ship *s)
{
	if (!s->n_bev && !s->n_bck)
		return 0;
	const char *v[1] = { s->host };
	int rc = pq_cmd("ship", s->db, "cannot begin a batch", "BEGIN") < 0 ? -1 : 0;
	PGresult *r = rc ? NULL : PQexecPrepared(s->db, "host_lock", 1, v, NULL, NULL, 0);
	if (!rc && (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)) {
		pq_err("ship", s->db, r, "cannot lock the host's row", 0);
		rc = -1;
	}
	PQclear(r);
	uint64_t n_ev = 0, n_ck = 0;
	if (!rc)
		rc = ship_batch_rows(s, &n_ev, &n_ck);
	if (!rc) {
		r = PQexecPrepared(s->db, "host_done", 1, v, NULL, NULL, 0);
		rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
		PQclear(r);
	}
	if (!rc && pq_cmd("ship", s->db, "cannot commit a batch", "COMMIT") == 0) {
		s->n_shipped_ev += n_ev; /* rows already there are not counted */
		s->n_shipped_ck += n_ck;
		if (s->n_bev)
			s->db_seq = s->bev[s->n_bev - 1].seq;
		ship_batch_free(s);
		return 0;
	}
	PQclear(PQexec(s->db, "ROLLBACK"));
	ship_batch_free(s);
	return rc == 1 ? EXIT_BREAK : CG_EXIT_ERROR;
}

/* Queue one whole checkpoints.ndjson line. 0, or -1 after saying why. */
static int ship_queue_ckpt(struct ship *s, const char *line, size_t len)
{
	struct cg_ckpt ck;
	char why[160];
	if (cg_ckpt_parse(line, len, &ck, why, sizeof(why)) < 0) {
		fprintf(stderr,
			"callgate evidence ship: %s: checkpoints.ndjson: %s; nothing from there on "
			"was shipped (run callgate replay --all)\n",
			s->host, why);
		return -1;
	}
	if (s->n_cq == s->cap_cq) {
		size_t nc = s->cap_cq ? 2 * s->cap_cq : 64;
		struct ship_ck *q = realloc(s->cq, nc * sizeof(*q));
		if (!q)
			return -1;
		s->cq = q;
		s->cap_cq = nc;
	}
	struct ship_ck *k = &s->cq[s->n_cq];
	memset(k, 0, sizeof(*k));
	if (!(k->line = malloc(len)))
		return -1;
	memcpy(k->line, line, len);
	k->len = len;
	k->seq = ck.seq;
	snprintf(k->ts, sizeof(k->ts), "%s", ck.ts);
	s->n_cq++;
	return 0;
}

/* Check the queued checkpoints the chain has reached, batching those the database lacks. */
static int ship_take_ckpts(struct ship *s)
{
	while (s->cq_head < s->n_cq && s->cq[s->cq_head].seq <= s->ch.seq) {
		struct ship_ck *k = &s->cq[s->cq_head];
		struct cg_ckpt ck;
		size_t nl = 0;
		if (k->seq < s->ch.seq) {
			char a[24];
			snprintf(a, sizeof(a), ">= %" PRIu64, s->ch.seq);
			chain_fail(&s->ch, "checkpoint_order", k->seq, a, NULL,
				   "a checkpoint goes backwards");
			return ship_broken(s);
		}
		int rc = chain_ckpt(&s->ch, k->line, k->len, &ck, &k->note, &nl);
		if (rc < 0)
			return CG_EXIT_ERROR;
		if (rc > 0)
			return ship_broken(s);
		s->cq_head++;
		if ((int64_t)k->seq < s->db_ckpt) {
			ship_ck_free(k);
			continue;
		}
		if (s->n_bck == s->cap_bck) {
			size_t nc = s->cap_bck ? 2 * s->cap_bck : 16;
			struct ship_ck *q = realloc(s->bck, nc * sizeof(*q));
			if (!q)
				return CG_EXIT_ERROR;
			s->bck = q;
			s->cap_bck = nc;
		}
		s->bck[s->n_bck++] = *k; /* the batch owns its line and note now */
		memset(k, 0, sizeof(*k));
	}
	if (s->cq_head == s->n_cq)
		s->cq_head = s->n_cq = 0;
	return 0;
}

/*
 * The next journal segment after cur ("" for the first) into next. 1 found,
 * 0 none yet, -1 with errno.
 */
static int next_segment(const char *state_dir, const char *cur, char next[32])
{
	char **names = NULL;
	size_t n = 0;
	if (cg_journal_segments(state_dir, &names, &n) < 0)
		return -1;
	int found = 0;
	for (size_t i = 0; i < n && !found; i++)
		if (strcmp(names[i], cur) > 0) {
			snprintf(next, 32, "%s", names[i]);
			found = 1;
		}
	cg_strv_free(names, n);
	return found;
}

/*
 * The next whole event line of the journal, across segments: 1 with the
 * line, 0 when there is none yet, -1 after saying why (-2: the journal is
 * damaged, which waiting will not mend).
 */
static int ship_next_line(struct ship *s, const char **line, size_t *len)
{
	for (;;) {
		if (s->seg.fd >= 0) {
			int r = lr_next(&s->seg, line, len);
			if (r != 0) {
				bool big = r < 0 && errno == E2BIG;
				if (r < 0)
					fprintf(stderr, "callgate evidence ship: journal/%s: %s\n",
						s->seg_name,
						big ? "a line longer than any the daemon writes"
						    : strerror(errno));
				return big ? -2 : r;
			}
		}
		char next[32], path[4200];
		int nx = next_segment(s->state_dir, s->seg_name, next);
		if (nx <= 0) {
			if (nx < 0)
				fprintf(stderr,
					"callgate evidence ship: cannot list the journal: %s\n",
					strerror(errno));
			return nx;
		}
		/* A segment is closed before the next begins: a partial line left is damage. */
		struct stat st;
		if (s->seg.fd >= 0 && fstat(s->seg.fd, &st) == 0 &&
		    (uint64_t)st.st_size > s->seg.off) {
			fprintf(
			    stderr,
			    "callgate evidence ship: %s: journal/%s ends mid-line; nothing from "
			    "there on was shipped (run callgate replay --all)\n",
			    s->host, s->seg_name);
			return -2;
		}
		lr_close(&s->seg);
		snprintf(s->seg_name, sizeof(s->seg_name), "%s", next);
		snprintf(path, sizeof(path), "%s/journal/%s", s->state_dir, next);
		if (lr_open(&s->seg, path, 2 * (size_t)CG_LINE_MAX) < 0) {
			fprintf(stderr, "callgate evidence ship: %s: %s\n", path, strerror(errno));
			return -1;
		}
	}
}

/* Take one event line: check it, and batch it when the database lacks it. */
static int ship_take_event(struct ship *s, const char *line, size_t len)
{
	struct cg_evline o;
	char leaf[65];
	int rc = chain_event(&s->ch, line, len, &o, leaf);
	if (rc < 0)
		return CG_EXIT_ERROR;
	if (rc > 0)
		return ship_broken(s);
	if (o.seq >= s->db_seq && o.seq > 0) {
		struct ship_ev *e = &s->bev[s->n_bev];
		memset(e, 0, sizeof(*e));
		if (!(e->line = malloc(len)))
			return CG_EXIT_ERROR;
		memcpy(e->line, line, len);
		e->len = len;
		e->seq = o.seq;
		e->tseq = o.tseq;
		snprintf(e->trace, sizeof(e->trace), "%s", o.trace);
		snprintf(e->type, sizeof(e->type), "%s", o.type_name);
		snprintf(e->ts, sizeof(e->ts), "%s", o.ts);
		memcpy(e->hash, o.hash, 65);
		memcpy(e->leaf, leaf, 65);
		e->payload_off = o.payload_off;
		e->payload_len = o.payload_len;
		e->queryable = payload_queryable(line + o.payload_off, o.payload_len);
		s->n_bev++;
	}
	rc = ship_take_ckpts(s);
	if (!rc && s->n_bev == BATCH_EVENTS)
		rc = ship_flush(s);
	return rc;
}

/*
 * One pass: read the checkpoints signed so far, then the journal up to the
 * last of them, checking everything and storing what the database lacks.
 * Returns 0 or an exit code.
 */
static int ship_round(struct ship *s)
{
	const char *line;
	size_t len;
	int r;
	while ((r = lr_next(&s->ckr, &line, &len)) == 1)
		if (ship_queue_ckpt(s, line, len) < 0)
			return EXIT_BREAK;
	if (r < 0 && errno == E2BIG) {
		fprintf(stderr,
			"callgate evidence ship: checkpoints.ndjson: a line longer than any "
			"the daemon writes (run callgate replay --all)\n");
		return EXIT_BREAK;
	}
	if (r < 0) {
		fprintf(stderr, "callgate evidence ship: checkpoints.ndjson: %s\n",
			strerror(errno));
		return CG_EXIT_ERROR;
	}
	uint64_t target = s->n_cq > s->cq_head ? s->cq[s->n_cq - 1].seq : s->ch.seq;
	int rc = ship_take_ckpts(s);
	while (!rc && s->ch.seq < target) {
		r = ship_next_line(s, &line, &len);
		if (r < 0)
			return r == -2 ? EXIT_BREAK : CG_EXIT_ERROR;
		if (r == 0) {
			char a[24], b[24];
			snprintf(a, sizeof(a), "%" PRIu64, target);
			snprintf(b, sizeof(b), "%" PRIu64, s->ch.seq);
			chain_fail(&s->ch, "journal_truncated", s->ch.seq + 1, a, b,
				   "a checkpoint signs events past the journal's end");
			return ship_broken(s);
		}
		rc = ship_take_event(s, line, len);
	}
	/* Lines read past the last checkpoint are read again once one signs them. */
	lr_rewind(&s->seg);
	return rc ? rc : ship_flush(s);
}

/* Record the host (pinning its key at the first ship) and learn where the database stops. */
static int ship_register(struct ship *s, const char *pem)
{
	char hostname[256] = "unknown";
	(void)gethostname(hostname, sizeof(hostname) - 1);
	const char *v[4] = { s->host, hostname, s->ch.key_fp, pem };
	if (pq_cmd("ship", s->db, "cannot begin", "BEGIN") < 0)
		return CG_EXIT_ERROR;
	PGresult *r = pq_run("ship", s->db, PGRES_COMMAND_OK, "cannot record the host",
			     "INSERT INTO callgate.hosts (host, hostname, key_fp, pubkey) VALUES "
			     "($1, $2, $3, $4) ON CONFLICT (host) DO NOTHING",
			     4, v, NULL, NULL, 0);
	PQclear(r);
	PGresult *q = r ? pq_run("ship", s->db, PGRES_TUPLES_OK, "cannot read the host",
				 "SELECT h.key_fp, (SELECT coalesce(max(seq), 0) FROM "
				 "callgate.events WHERE host = $1), (SELECT coalesce(max(seq), -1) "
				 "FROM callgate.checkpoints WHERE host = $1) FROM callgate.hosts h "
				 "WHERE h.host = $1",
				 1, v, NULL, NULL, 0)
			: NULL;
	int rc = q && PQntuples(q) == 1 ? 0 : CG_EXIT_ERROR;
	if (!rc && strcmp(PQgetvalue(q, 0, 0), s->ch.key_fp) != 0) {
		fprintf(stderr,
			"callgate evidence ship: host %s: the database pinned another key at its "
			"first ship (sha256:%s); this host's key is sha256:%s. Nothing was shipped "
			"(see docs/fleet.md, \"Trust on first ship\")\n",
			s->host, PQgetvalue(q, 0, 0), s->ch.key_fp);
		rc = EXIT_BREAK;
	}
	if (!rc) {
		s->db_seq = strtoull(PQgetvalue(q, 0, 1), NULL, 10);
		s->db_ckpt = strtoll(PQgetvalue(q, 0, 2), NULL, 10);
	}
	PQclear(q);
	if (rc || pq_cmd("ship", s->db, "cannot commit", "COMMIT") < 0) {
		PQclear(PQexec(s->db, "ROLLBACK"));
		return rc ? rc : CG_EXIT_ERROR;
	}
	return 0;
}

/* The host's key (PEM, as the database keeps it), its origin, and the readers. */
static int ship_open_local(struct ship *s, char **pem)
{
	char path[4200], why[200], fp[65];
	snprintf(path, sizeof(path), "%s/keys/evidence.pub", s->state_dir);
	EVP_PKEY *k = cg_key_load(path, CG_KEY_PUBLIC, false, why, sizeof(why));
	if (!k || cg_key_fingerprint(k, fp) < 0) {
		fprintf(stderr, "callgate evidence ship: %s: %s\n", path, k ? "no raw key" : why);
		EVP_PKEY_free(k);
		return CG_EXIT_NOINPUT;
	}
	if (cg_note_origin_load_or_create(s->state_dir, fp, false, s->host, sizeof(s->host)) < 0) {
		fprintf(stderr, "callgate evidence ship: %s/keys/evidence.origin: %s\n",
			s->state_dir, errno == EINVAL ? "not a valid log name" : strerror(errno));
		EVP_PKEY_free(k);
		return CG_EXIT_NOINPUT;
	}
	BIO *b = BIO_new(BIO_s_mem());
	char *data = NULL;
	long n = b && PEM_write_bio_PUBKEY(b, k) == 1 ? BIO_get_mem_data(b, &data) : -1;
	*pem = n > 0 ? strndup(data, (size_t)n) : NULL;
	BIO_free(b);
	if (!*pem || chain_init(&s->ch, k, s->host) < 0) {
		EVP_PKEY_free(k);
		return CG_EXIT_ERROR;
	}
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", s->state_dir);
	if (lr_open(&s->ckr, path, CKPT_LINE_MAX * 64) < 0) {
		fprintf(stderr, "callgate evidence ship: %s: %s\n", path, strerror(errno));
		return CG_EXIT_NOINPUT;
	}
	return 0;
}

static volatile sig_atomic_t ship_stop;

static void on_stop(int sig)
{
	(void)sig;
	ship_stop = 1;
}

static void sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	(void)nanosleep(&t, NULL); /* a signal ends it early: that is the point */
}

static int ship_run(struct ship *s, bool follow, long interval_ms)
{
	int rc;
	uint64_t ev = 0, ck = 0;
	do {
		rc = ship_round(s);
		if (!rc && (s->n_shipped_ev + s->n_shipped_ck > ev + ck || !follow))
			printf("%s: shipped %" PRIu64 " events and %" PRIu64
			       " checkpoints; the database holds seq 1..%" PRIu64
			       " (signed through %" PRIu64 ")\n",
			       s->host, s->n_shipped_ev - ev, s->n_shipped_ck - ck,
			       s->db_seq > s->ch.seq ? s->db_seq : s->ch.seq, s->ch.signed_seq);
		fflush(stdout);
		ev = s->n_shipped_ev;
		ck = s->n_shipped_ck;
		if (rc || !follow || ship_stop)
			break;
		sleep_ms(interval_ms);
	} while (!ship_stop);
	return rc;
}

/* One ship from connecting to the end (or, following, to a stop or a failure). */
static int ship_session(const char *sd, const char *to, bool follow, long interval)
{
	struct ship *s = calloc(1, sizeof(*s));
	if (!s)
		return CG_EXIT_ERROR;
	s->state_dir = sd;
	s->seg.fd = s->ckr.fd = -1;
	char *pem = NULL;
	int rc = ship_open_local(s, &pem);
	if (!rc && !(s->db = db_open("ship", to)))
		rc = CG_EXIT_UNAVAILABLE;
	if (!rc && (schema_ensure("ship", s->db) < 0 || ship_prepare(s) < 0))
		rc = CG_EXIT_ERROR;
	if (!rc)
		rc = ship_register(s, pem);
	if (!rc)
		rc = ship_run(s, follow, interval);
	free(pem);
	ship_free(s);
	free(s);
	return rc;
}

static int cmd_ship(const struct cg_cli *g, int argc, char **argv)
{
	static const char usage[] = "callgate evidence ship --to URL [--state-dir DIR] [--follow]";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Copy this host's evidence into PostgreSQL: every journal event a signed\n"
		    "checkpoint covers (its exact bytes, chain hash and Merkle leaf hash), the\n"
		    "checkpoints with their C2SP notes, and the public key, pinned at the first\n"
		    "ship. Resumes where the database stops; shipping again is a no-op; the\n"
		    "schema (dist/fleet.sql) is created when missing. See docs/fleet.md.\n"
		    "Exit: 0 shipped, 1 the local evidence does not verify or the database\n"
		    "holds something else (named), 66 no state directory, 69 no database.",
		    ship_opts);
	const char *to = NULL, *sd = g->state_dir, *from = g->state_dir_from, *iv = NULL;
	bool follow = false;
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		const struct cg_cli_opt *o =
		    cg_cli_opt_take("evidence ship", ship_opts, argc, argv, &i, &v);
		if (!o)
			return CG_EXIT_USAGE;
		if (strcmp(o->name, "--to") == 0)
			to = v;
		else if (strcmp(o->name, "--state-dir") == 0) {
			sd = v;
			from = "--state-dir";
		} else if (strcmp(o->name, "--follow") == 0)
			follow = true;
		else if (strcmp(o->name, "--interval") == 0)
			iv = v;
	}
	long interval = iv ? strtol(iv, NULL, 10) : SHIP_POLL_MS;
	if (!to ||
	    (iv && (strspn(iv, "0123456789") != strlen(iv) || interval < 10 || interval > 3600000)))
		return cg_cli_bad_option("evidence ship", to ? "--interval" : "--to",
					 to ? "needs 10..3600000 ms:" : "missing", ship_opts);
	if (!sd)
		sd = CG_DEFAULT_STATE_DIR;
	if (cg_cli_state_dir_check("evidence ship", sd, from) < 0)
		return CG_EXIT_NOINPUT;
	if (follow) {
		struct sigaction sa = { 0 };
		sa.sa_handler = on_stop;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	/*
	 * A follower outlives the database's restarts and the network's
	 * hiccups: after a failure that may pass (69, 70) it starts over —
	 * reconnect, ask where the database stops, read the journal again —
	 * after a pause that grows to 30 s. A break (1) is never retried.
	 */
	long pause = 1000;
	for (;;) {
		int rc = ship_session(sd, to, follow, interval);
		if (!follow || ship_stop || (rc != CG_EXIT_ERROR && rc != CG_EXIT_UNAVAILABLE))
			return rc;
		fprintf(stderr, "callgate evidence ship: trying again in %ld s\n", pause / 1000);
		sleep_ms(pause);
		if (ship_stop)
			return rc;
		pause = pause * 2 > 30000 ? 30000 : pause * 2;
	}
}

/* ---- evidence verify ----------------------------------------------------------- */

static const struct cg_cli_opt verify_opts[] = {
	{ "--from", "URL", "the database: postgresql://… (a libpq connection string)" },
	{ "--host", "H", "verify only this host (its log name, or its machine's name)" },
	{ "--key", "HOST=FILE",
	  "trust FILE's public key for HOST, not the one pinned in the database" },
	{ "--json", NULL, "print the report as JSON" },
	{ NULL, NULL, NULL },
};

#define MAX_PINS 64

struct pin {
	char *host; /* owned */
	const char *file;
	bool used;
};

/* A column of a binary-format row: an int8, or text (NUL-terminated by libpq). */
static uint64_t col_u64(const PGresult *r, int row, int col)
{
	const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
	uint64_t v = 0;
	for (int i = 0; i < 8 && PQgetlength(r, row, col) == 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* Every copy a row keeps of its line must be the line's (the views read them). */
static void verify_columns(struct chain *c, const PGresult *r, int i, const struct cg_evline *o,
			   const char *leaf)
{
	static const char *const names[] = { "seq", "trace", "tseq",	 "type",
					     "ts",  "hash",  "leaf_hash" };
	char seq[24], tseq[24], cseq[24], ctseq[24];
	snprintf(seq, sizeof(seq), "%" PRIu64, o->seq);
	snprintf(tseq, sizeof(tseq), "%" PRIu64, o->tseq);
	snprintf(cseq, sizeof(cseq), "%" PRIu64, col_u64(r, i, 0));
	snprintf(ctseq, sizeof(ctseq), "%" PRIu64, col_u64(r, i, 2));
	const char *want[] = { seq, o->trace, tseq, o->type_name, o->ts, o->hash, leaf };
	const char *have[] = { cseq,
			       PQgetvalue(r, i, 1),
			       ctseq,
			       PQgetvalue(r, i, 3),
			       PQgetvalue(r, i, 4),
			       PQgetvalue(r, i, 5),
			       PQgetvalue(r, i, 6) };
	char why[80];
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (strcmp(want[k], have[k]) != 0) {
			snprintf(why, sizeof(why), "the %s column is not the line's", names[k]);
			chain_fail(c, "column_mismatch", o->seq, want[k], have[k], why);
		}
	const char *pl = o->line + o->payload_off;
	bool q = payload_queryable(pl, o->payload_len), null = PQgetisnull(r, i, 8);
	json_t *a = q ? json_loadb(pl, o->payload_len, 0, NULL) : NULL;
	json_t *b = q && !null ? json_loads(PQgetvalue(r, i, 8), 0, NULL) : NULL;
	if (q == null || (q && !json_equal(a, b)))
		chain_fail(c, "column_mismatch", o->seq, NULL, NULL,
			   "the payload column is not the line's payload");
	json_decref(a);
	json_decref(b);
}

/* A cursor read in chunks (binary rows). */
struct cursor {
	PGconn *db;
	const char *name;
	PGresult *r;
	int i, n;
	bool done;
};

/* The next row (its index in c->r), or -1 at the end; -2 on a database error (said). */
static int cursor_next(struct cursor *c)
{
	if (c->r && c->i < c->n)
		return c->i++;
	PQclear(c->r);
	c->r = NULL;
	if (c->done)
		return -1;
	char sql[64];
	snprintf(sql, sizeof(sql), "FETCH 1000 FROM %s", c->name);
	c->r = PQexecParams(c->db, sql, 0, NULL, NULL, NULL, NULL, 1);
	if (PQresultStatus(c->r) != PGRES_TUPLES_OK) {
		pq_err("verify", c->db, c->r, "cannot read the rows", 0);
		return -2;
	}
	c->n = PQntuples(c->r);
	c->i = 0;
	c->done = c->n < 1000;
	return c->n ? c->i++ : -1;
}

/* Checkpoint rows (seq, line, note, ts) at or below the chain's seq. 0, or -1 on error. */
static int verify_ckpts(struct chain *c, struct cursor *k, int *row)
{
	while (*row >= 0 && col_u64(k->r, *row, 0) <= c->seq) {
		uint64_t seq = col_u64(k->r, *row, 0);
		const char *line = PQgetvalue(k->r, *row, 1);
		size_t len = (size_t)PQgetlength(k->r, *row, 1), nl = 0;
		struct cg_ckpt ck;
		char *note = NULL;
		if (seq < c->seq) {
			chain_fail(c, "checkpoint_orphan", seq, NULL, NULL,
				   "the events do not reach this checkpoint's seq in order");
		} else if (chain_ckpt(c, line, len, &ck, &note, &nl) < 0) {
			return -1;
		} else {
			bool stored = !PQgetisnull(k->r, *row, 2);
			if (ck.seq != seq || strcmp(ck.ts, PQgetvalue(k->r, *row, 3)) != 0)
				chain_fail(c, "column_mismatch", seq, NULL, NULL,
					   "the checkpoint's seq or ts column is not its line's");
			if (stored != (note != NULL) ||
			    (note && strcmp(note, PQgetvalue(k->r, *row, 2)) != 0))
				chain_fail(c, "note_mismatch", seq, NULL, NULL,
					   "the stored note is not the checkpoint's note");
		}
		free(note);
		*row = cursor_next(k);
		if (*row == -2)
			return -1;
	}
	return 0;
}

/* One event row: its line through the chain, and its columns against the line. */
static int verify_event(struct chain *c, const PGresult *r, int i)
{
	const char *line = PQgetvalue(r, i, 7);
	size_t len = (size_t)PQgetlength(r, i, 7);
	struct cg_evline o;
	char leaf[65];
	int rc = chain_event(c, line, len, &o, leaf);
	if (rc < 0)
		return -1;
	if (rc == 2) /* unparseable: it still takes its row's place */
		return chain_skip(c, col_u64(r, i, 0), PQgetvalue(r, i, 1), col_u64(r, i, 2),
				  PQgetvalue(r, i, 5), line, len);
	verify_columns(c, r, i, &o, leaf);
	return 0;
}

/* Open cursor name over "SELECT … FROM table" for one host (lit: its quoted name), by seq. */
static int declare(PGconn *db, const char *name, const char *select, const char *lit)
{
	char sql[1024];
	snprintf(sql, sizeof(sql),
		 "DECLARE %s NO SCROLL CURSOR FOR %s WHERE host = %s ORDER BY seq", name, select,
		 lit);
	return pq_cmd("verify", db, "cannot read the rows", sql);
}

/*
 * Walk one host's events and checkpoints in seq order through the chain,
 * inside one read-only snapshot. 0, or -1 on a database error (said).
 */
static int verify_walk(PGconn *db, struct chain *c, const char *host)
{
	char *lit = PQescapeLiteral(db, host, strlen(host));
	struct cursor ev = { db, "fleet_ev", NULL, 0, 0, false };
	struct cursor ck = { db, "fleet_ck", NULL, 0, 0, false };
	int rc = lit && pq_cmd("verify", db, "cannot begin",
			       "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY") == 0
		     ? 0
		     : -1;
	if (!rc)
		rc = declare(db, ev.name,
			     "SELECT seq, trace, tseq, type, " TS_SQL(
				 "ts") ", hash, leaf_hash, line,"
				       " payload::text FROM callgate.events",
			     lit);
	if (!rc)
		rc = declare(db, ck.name,
			     "SELECT seq, line, note, " TS_SQL("ts") " FROM callgate.checkpoints",
			     lit);
	int krow = rc ? -2 : cursor_next(&ck), erow;
	rc = krow == -2 ? -1 : verify_ckpts(c, &ck, &krow);
	while (!rc && (erow = cursor_next(&ev)) >= 0) {
		rc = verify_event(c, ev.r, erow);
		if (!rc)
			rc = verify_ckpts(c, &ck, &krow);
	}
	if (!rc && erow == -2)
		rc = -1;
	for (; !rc && krow >= 0; krow = cursor_next(&ck)) {
		char a[24];
		snprintf(a, sizeof(a), "%" PRIu64, c->seq);
		chain_fail(c, "journal_truncated", col_u64(ck.r, krow, 0), a, NULL,
			   "a checkpoint signs events the database does not hold");
	}
	if (!rc && krow == -2)
		rc = -1;
	if (!rc && c->seq > c->signed_seq) /* ship stores only signed events: this was added */
		chain_fail(c, "unsigned_tail", c->signed_seq + 1, NULL, NULL,
			   "events no checkpoint signs (ship never stores these)");
	PQclear(ev.r);
	PQclear(ck.r);
	PQclear(PQexec(db, "ROLLBACK"));
	PQfreemem(lit);
	return rc;
}

/* An Ed25519 public key from PEM text; NULL when it is not one. */
static EVP_PKEY *key_from_pem(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *k = b ? PEM_read_bio_PUBKEY(b, NULL, NULL, NULL) : NULL;
	BIO_free(b);
	if (k && EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(k);
		k = NULL;
	}
	return k;
}

/*
 * The key to verify HOST with: the pinned file's when --key names it, else
 * the database's; a database key that is not the pinned one, or whose
 * fingerprint column is not its own, is a failure. NULL when none can be used.
 */
static EVP_PKEY *verify_key(struct chain *c, const char *fp_col, const char *pem,
			    const struct pin *pin, bool *pin_bad)
{
	char fp[65] = "", pfp[65] = "", why[200];
	EVP_PKEY *db_key = key_from_pem(pem);
	if (!db_key || cg_key_fingerprint(db_key, fp) < 0 || strcmp(fp, fp_col) != 0)
		chain_fail(c, "host_key", 0, fp_col, fp,
			   "the stored public key is unreadable or not the stored fingerprint's");
	if (!pin)
		return db_key;
	EVP_PKEY *k = cg_key_load(pin->file, CG_KEY_PUBLIC_OR_PRIVATE, false, why, sizeof(why));
	if (!k || cg_key_fingerprint(k, pfp) < 0) {
		fprintf(stderr, "callgate evidence verify: %s: %s\n", pin->file,
			k ? "no raw key" : why);
		*pin_bad = true;
		EVP_PKEY_free(k);
		EVP_PKEY_free(db_key);
		return NULL;
	}
	if (strcmp(pfp, fp) != 0)
		chain_fail(c, "key_not_pinned", 0, pfp, fp,
			   "the database's key for this host is not the key given with --key");
	EVP_PKEY_free(db_key);
	return k;
}

/* The report of one host (the chain's failures are borrowed). */
static json_t *host_report(const struct chain *c, const char *host, const char *hostname,
			   const struct pin *pin)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:s,s:O,s:I}", "host", host, "hostname",
			 hostname, "status", c->n_fails ? "FAIL" : "PASS", "events",
			 (json_int_t)c->seq, "checkpoints", (json_int_t)c->n_ckpt, "signed_through",
			 (json_int_t)c->signed_seq, "key", pin ? pin->file : "pinned at first ship",
			 "failures", c->fails, "breaks", (json_int_t)c->n_fails);
}

/*
 * Verify one host into a report object (caller decrefs). NULL on a database
 * error or an unreadable --key file (said).
 */
static json_t *verify_host(PGconn *db, const char *host, const char *hostname, const char *fp,
			   const char *pem, struct pin *pin)
{
	struct chain pre, c;
	memset(&pre, 0, sizeof(pre));
	memset(&c, 0, sizeof(c));
	if (!(pre.fails = json_array()))
		return NULL;
	bool pin_bad = false;
	EVP_PKEY *k = verify_key(&pre, fp, pem, pin, &pin_bad);
	json_t *out = NULL;
	if (!k) {
		/* No key to check a signature with: the host fails on its key alone. */
		out = pin_bad ? NULL : host_report(&pre, host, hostname, pin);
	} else if (chain_init(&c, k, host) == 0 && json_array_extend(c.fails, pre.fails) == 0) {
		c.n_fails = pre.n_fails;
		if (verify_walk(db, &c, host) == 0)
			out = host_report(&c, host, hostname, pin);
	}
	chain_free(&c);
	chain_free(&pre);
	EVP_PKEY_free(k);
	return out;
}

static void print_host(const json_t *h)
{
	const char *host = json_string_value(json_object_get(h, "host"));
	const char *st = json_string_value(json_object_get(h, "status"));
	if (strcmp(st, "PASS") == 0) {
		printf("PASS %s: %" JSON_INTEGER_FORMAT " events, %" JSON_INTEGER_FORMAT
		       " checkpoints, signed through seq %" JSON_INTEGER_FORMAT " (key: %s)\n",
		       host, json_integer_value(json_object_get(h, "events")),
		       json_integer_value(json_object_get(h, "checkpoints")),
		       json_integer_value(json_object_get(h, "signed_through")),
		       json_string_value(json_object_get(h, "key")));
		return;
	}
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(h, "failures"), i, f)
	{
		printf("FAIL %s seq %" JSON_INTEGER_FORMAT ": %s: %s", host,
		       json_integer_value(json_object_get(f, "seq")),
		       json_string_value(json_object_get(f, "check")),
		       json_string_value(json_object_get(f, "detail")));
		const char *e = json_string_value(json_object_get(f, "expected"));
		const char *g = json_string_value(json_object_get(f, "found"));
		if (e || g)
			printf(" (expected %s, found %s)", e ? e : "-", g ? g : "-");
		printf("\n");
	}
	json_int_t n = json_integer_value(json_object_get(h, "breaks"));
	if ((size_t)n > json_array_size(json_object_get(h, "failures")))
		printf("FAIL %s: %" JSON_INTEGER_FORMAT " breaks in all (the first %zu listed)\n",
		       host, n, json_array_size(json_object_get(h, "failures")));
}

static int parse_pin(const char *v, struct pin *pins, size_t *n)
{
	const char *eq = strrchr(v, '=');
	if (!eq || eq == v || !eq[1] || *n == MAX_PINS)
		return -1;
	char *host = strndup(v, (size_t)(eq - v));
	if (!host)
		return -1;
	pins[(*n)++] = (struct pin){ host, eq + 1, false };
	return 0;
}

static struct pin *find_pin(struct pin *pins, size_t n, const char *host, const char *hostname)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(pins[i].host, host) == 0 || strcmp(pins[i].host, hostname) == 0) {
			pins[i].used = true;
			return &pins[i];
		}
	return NULL;
}

/* Verify every selected host; the report in *out. 0, or an exit code. */
static int verify_all(PGconn *db, const char *only, struct pin *pins, size_t n_pins, json_t *hosts)
{
	const char *v[1] = { only };
	PGresult *r =
	    pq_run("verify", db, PGRES_TUPLES_OK, "cannot read the hosts",
		   only ? "SELECT host, hostname, key_fp, pubkey FROM callgate.hosts WHERE "
			  "host = $1 OR hostname = $1 ORDER BY host"
			: "SELECT host, hostname, key_fp, pubkey FROM callgate.hosts ORDER "
			  "BY host",
		   only ? 1 : 0, only ? v : NULL, NULL, NULL, 0);
	if (!r)
		return CG_EXIT_ERROR;
	int rc = 0;
	if (only && PQntuples(r) == 0) {
		fprintf(stderr, "callgate evidence verify: no host %s in the database\n", only);
		rc = CG_EXIT_NOINPUT;
	}
	for (int i = 0; !rc && i < PQntuples(r); i++) {
		const char *host = PQgetvalue(r, i, 0), *hn = PQgetvalue(r, i, 1);
		struct pin *pin = find_pin(pins, n_pins, host, hn);
		json_t *h =
		    verify_host(db, host, hn, PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), pin);
		if (!h || json_array_append_new(hosts, h) < 0)
			rc = CG_EXIT_ERROR;
	}
	PQclear(r);
	for (size_t i = 0; !rc && i < n_pins; i++)
		if (!pins[i].used) {
			fprintf(stderr,
				"callgate evidence verify: --key %s=%s: no such host checked\n",
				pins[i].host, pins[i].file);
			rc = CG_EXIT_USAGE;
		}
	return rc;
}

static int cmd_verify(int argc, char **argv)
{
	static const char usage[] =
	    "callgate evidence verify --from URL [--host H] [--key HOST=FILE]... [--json]";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Re-verify every host's evidence from the database alone: each line's hash,\n"
		    "the journal and trace chains, each checkpoint's signatures, head and Merkle\n"
		    "root, and every stored copy against the line. Signatures are checked with\n"
		    "the key pinned at the host's first ship, or with --key's. Each break is\n"
		    "named by host and seq. Exit: 0 every host verifies, 1 a break, 64 usage,\n"
		    "66 no such host or no fleet schema, 69 no database. See docs/fleet.md.",
		    verify_opts);
	const char *url = NULL, *only = NULL;
	bool as_json = false;
	struct pin pins[MAX_PINS];
	size_t n_pins = 0;
	int rc = 0;
	for (int i = 1; !rc && i < argc; i++) {
		const char *v = NULL;
		const struct cg_cli_opt *o =
		    cg_cli_opt_take("evidence verify", verify_opts, argc, argv, &i, &v);
		if (!o)
			rc = CG_EXIT_USAGE;
		else if (strcmp(o->name, "--from") == 0)
			url = v;
		else if (strcmp(o->name, "--host") == 0)
			only = v;
		else if (strcmp(o->name, "--json") == 0)
			as_json = true;
		else if (parse_pin(v, pins, &n_pins) < 0)
			rc = cg_cli_bad_option("evidence verify", "--key",
					       "needs HOST=FILE:", verify_opts);
	}
	if (!rc && !url)
		rc = cg_cli_bad_option("evidence verify", "--from", "missing", verify_opts);
	PGconn *db = rc ? NULL : db_open("verify", url);
	if (!rc && !db)
		rc = CG_EXIT_UNAVAILABLE;
	int have = rc ? 0 : schema_present("verify", db, false);
	if (!rc && have <= 0) {
		if (have == 0)
			fprintf(stderr, "callgate evidence verify: the database has no callgate "
					"fleet schema (nothing was shipped to it)\n");
		rc = have < 0 ? CG_EXIT_ERROR : CG_EXIT_NOINPUT;
	}
	json_t *hosts = json_array();
	if (!rc)
		rc = hosts ? verify_all(db, only, pins, n_pins, hosts) : CG_EXIT_ERROR;
	bool pass = true;
	size_t i;
	json_t *h;
	json_array_foreach(hosts, i, h) pass &=
	    strcmp(json_string_value(json_object_get(h, "status")), "PASS") == 0;
	if (!rc && as_json) {
		json_t *doc =
		    json_pack("{s:s,s:O}", "status", pass ? "PASS" : "FAIL", "hosts", hosts);
		char *s = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(doc);
	} else if (!rc) {
		json_array_foreach(hosts, i, h) print_host(h);
		if (!json_array_size(hosts))
			printf("no hosts in the database\n");
	}
	if (!rc && !pass)
		rc = EXIT_BREAK;
	json_decref(hosts);
	for (size_t k = 0; k < n_pins; k++)
		free(pins[k].host);
	PQfinish(db);
	return rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

bool cg_cli_fleet_handles(const char *verb)
{
	return verb && (strcmp(verb, "ship") == 0 || strcmp(verb, "verify") == 0);
}

int cg_cli_fleet(const struct cg_cli *g, int argc, char **argv)
{
	if (strcmp(argv[0], "ship") == 0)
		return cmd_ship(g, argc, argv);
	return cmd_verify(argc, argv);
}
