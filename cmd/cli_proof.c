/* SPDX-License-Identifier: MIT */
/*
 * cli_proof — proofs a third party checks offline (docs/evidence.md,
 * "Proofs"): `callgate evidence checkpoint` prints a signed checkpoint as a
 * C2SP note, `evidence prove TRACE_ID` writes one file holding a trace's
 * events, their Merkle inclusion proofs and the signed checkpoint they lead
 * to, and `evidence consistency OLD NEW` proves one checkpoint extends
 * another. docs/verify_proof.py checks both files without callgate.
 *
 * Like the other evidence tools they read the state directory directly and
 * work with the daemon stopped or running.
 *
 * Invariants:
 *  - Nothing is proved against a checkpoint the journal does not match: the
 *    Merkle root recomputed from the journal MUST equal the signed one, and
 *    the note signature MUST verify with the evidence key, before any proof
 *    is written (a proof of a rewritten journal would be a false statement).
 *  - consistency MUST refuse two checkpoints that are not both prefixes of
 *    this journal (different histories: a forked log), and say so.
 *  - Nothing here writes the journal or the checkpoints.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "journal.h"
#include "key.h"
#include "merkle.h"
#include "note.h"
#include "replay.h"
#include "util.h"

#define EXIT_FAIL     1 /* cannot prove: no such trace, not yet signed, or inconsistent */
#define PROOF_FORMAT  "callgate-proof/1"
#define CONS_FORMAT   "callgate-consistency/1"
#define CKPT_FILE_CAP ((size_t)1 << 30)

static const struct cg_cli_opt common_opts[] = {
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ "--pubkey", "FILE", "the evidence public key to trust (default: DIR/keys/evidence.pub)" },
	{ "--out", "FILE", "write the result to FILE (default: standard output)" },
	{ NULL, NULL, NULL },
};

static const struct cg_cli_opt checkpoint_opts[] = {
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ "--pubkey", "FILE", "the evidence public key to trust (default: DIR/keys/evidence.pub)" },
	{ "--out", "FILE", "write the note to FILE (default: standard output)" },
	{ "--size", "N", "the checkpoint of tree size N (default: the latest)" },
	{ NULL, NULL, NULL },
};

/* What every subcommand reads: the journal, its tree, the key and the checkpoints. */
struct proof_ctx {
	struct cg_journal_view jv;
	unsigned char (*leaves)[CG_MERKLE_HASH_LEN];
	uint64_t n_leaves; /* events 1..n_leaves are present and in order */
	struct cg_merkle_tree *tree;
	EVP_PKEY *key;
	char origin[CG_NOTE_NAME_MAX + 1];
	struct cg_ckpt *ck; /* checkpoints.ndjson, in file order */
	size_t n_ck;
};

static void ctx_free(struct proof_ctx *c)
{
	cg_journal_view_free(&c->jv);
	free(c->leaves);
	cg_merkle_tree_free(c->tree);
	EVP_PKEY_free(c->key);
	free(c->ck);
}

static int load_checkpoints(const char *state_dir, struct proof_ctx *c, char *why, size_t why_len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", state_dir);
	char *buf = NULL;
	size_t len = 0, pos = 0, lineno = 0;
	if (cg_file_read(path, CKPT_FILE_CAP, &buf, &len) < 0) {
		snprintf(why, why_len, "%.300s: %s", path, strerror(errno));
		return -1;
	}
	int rc = 0;
	while (pos < len) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		if (!nl)
			break; /* a line being written by a running daemon */
		size_t ll = (size_t)(nl - (buf + pos)) + 1;
		lineno++;
		struct cg_ckpt *q = realloc(c->ck, (c->n_ck + 1) * sizeof(*q));
		if (!q) {
			snprintf(why, why_len, "out of memory");
			rc = -1;
			break;
		}
		c->ck = q;
		char w[160];
		if (cg_ckpt_parse(buf + pos, ll, &c->ck[c->n_ck], w, sizeof(w)) < 0) {
			snprintf(why, why_len, "%.300s line %zu: %s (run callgate replay)", path,
				 lineno, w);
			rc = -1;
			break;
		}
		c->n_ck++;
		pos += ll;
	}
	free(buf);
	return rc;
}

static int ctx_open(const char *state_dir, const char *pubkey, struct proof_ctx *c, char *why,
		    size_t why_len)
{
	memset(c, 0, sizeof(*c));
	char path[4200], d[200], fp[65];
	snprintf(path, sizeof(path), "%s/keys/evidence.pub", state_dir);
	const char *kp = pubkey ? pubkey : path;
	c->key = cg_key_load(kp, CG_KEY_PUBLIC_OR_PRIVATE, false, d, sizeof(d));
	if (!c->key || cg_key_fingerprint(c->key, fp) < 0) {
		snprintf(why, why_len, "%.300s: %s", kp, c->key ? "no raw public key" : d);
		return -1;
	}
	if (cg_note_origin_load_or_create(state_dir, fp, false, c->origin, sizeof(c->origin)) < 0) {
		snprintf(why, why_len, "%.300s/keys/evidence.origin: %s", state_dir,
			 errno == EINVAL ? "not a valid key name" : strerror(errno));
		return -1;
	}
	if (load_checkpoints(state_dir, c, why, why_len) < 0)
		return -1;
	if (cg_journal_load(state_dir, &c->jv, NULL) < 0) {
		snprintf(why, why_len, "cannot read the journal: %s", strerror(errno));
		return -1;
	}
	c->leaves = malloc((c->jv.n ? c->jv.n : 1) * sizeof(*c->leaves));
	if (!c->leaves) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	while (c->n_leaves < c->jv.n && c->jv.v[c->n_leaves].seq == c->n_leaves + 1) {
		const struct cg_evline *e = &c->jv.v[c->n_leaves];
		cg_merkle_leaf_hash(e->line, e->line_len, c->leaves[c->n_leaves]);
		c->n_leaves++;
	}
	c->tree =
	    cg_merkle_tree_new((const unsigned char(*)[CG_MERKLE_HASH_LEN])c->leaves, c->n_leaves);
	if (!c->tree) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	return 0;
}

static int unhex32(const char *hex, unsigned char out[CG_MERKLE_HASH_LEN])
{
	for (int i = 0; i < CG_MERKLE_HASH_LEN; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char ch = hex[2 * i + j];
			unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
				     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
							      : 16;
			if (d == 16)
				return -1;
			v = v << 4 | d;
		}
		out[i] = (unsigned char)v;
	}
	return 0;
}

/*
 * The note of checkpoint line ck, rebuilt from checkpoints.ndjson, after
 * checking that the journal gives its root and that its signature verifies.
 * Returns it (malloc'd; the caller frees) or NULL with why.
 */
static char *ckpt_note(const struct proof_ctx *c, const struct cg_ckpt *ck, size_t *len, char *why,
		       size_t why_len)
{
	unsigned char root[CG_MERKLE_HASH_LEN], mine[CG_MERKLE_HASH_LEN];
	char text[CG_NOTE_NAME_MAX + 128];
	if (!ck->root[0] || !ck->note_sig_len || unhex32(ck->root, root) < 0) {
		snprintf(why, why_len,
			 "the checkpoint at size %" PRIu64 " predates the Merkle tree (no root)",
			 ck->seq);
		return NULL;
	}
	if (cg_merkle_tree_root(c->tree, ck->seq, mine) < 0 || memcmp(mine, root, sizeof(mine))) {
		snprintf(why, why_len,
			 "the journal does not give the signed Merkle root at size %" PRIu64
			 " (run callgate replay)",
			 ck->seq);
		return NULL;
	}
	int tn = cg_note_checkpoint_text(text, sizeof(text), c->origin, ck->seq, root);
	char *note = tn < 0 ? NULL
			    : cg_note_assemble(text, (size_t)tn, c->origin, ck->note_sig,
					       ck->note_sig_len, len);
	struct cg_note n;
	char w[200];
	if (!note || cg_note_parse(note, *len, &n, w, sizeof(w)) < 0 ||
	    !cg_note_verify(&n, note, NULL, c->key)) {
		snprintf(why, why_len,
			 "the note signature of the checkpoint at size %" PRIu64
			 " does not verify with the evidence key (run callgate replay)",
			 ck->seq);
		free(note);
		return NULL;
	}
	return note;
}

/* Write text to out (a path) or stdout. Returns an exit code. */
static int emit(const char *sub, const char *out, const char *p, size_t n)
{
	if (!out) {
		if (fwrite(p, 1, n, stdout) != n || fflush(stdout) != 0) {
			fprintf(stderr, "callgate evidence %s: cannot write: %s\n", sub,
				strerror(errno));
			return CG_EXIT_ERROR;
		}
		return CG_EXIT_OK;
	}
	if (cg_file_write_atomic(out, p, n, 0644, false) < 0) {
		fprintf(stderr, "callgate evidence %s: %s: %s\n", sub, out, strerror(errno));
		return CG_EXIT_ERROR;
	}
	return CG_EXIT_OK;
}

static int emit_json(const char *sub, const char *out, json_t *doc)
{
	char *s = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
	if (!s) {
		fprintf(stderr, "callgate evidence %s: out of memory\n", sub);
		return CG_EXIT_ERROR;
	}
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);
	if (t) {
		s = t;
		s[n++] = '\n';
		s[n] = '\0';
	}
	int rc = emit(sub, out, s, n);
	free(s);
	return rc;
}

static json_t *proof_array(unsigned char (*p)[CG_MERKLE_HASH_LEN], size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		char *b = cg_base64_encode(p[i], CG_MERKLE_HASH_LEN);
		if (!b || json_array_append_new(a, json_string(b)) != 0) {
			free(b);
			json_decref(a);
			return NULL;
		}
		free(b);
	}
	return a;
}

/* The options every subcommand takes; -1 on a usage error (already reported). */
struct opts {
	const char *state_dir, *pubkey, *out, *size;
	const char *pos[2];
	int n_pos;
};

static int parse_opts(const char *sub, int argc, char **argv, const struct cg_cli_opt *table,
		      int max_pos, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (strcmp(a, "--state-dir") == 0 && has)
			o->state_dir = argv[++i];
		else if (strcmp(a, "--pubkey") == 0 && has)
			o->pubkey = argv[++i];
		else if ((strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0) && has)
			o->out = argv[++i];
		else if (strcmp(a, "--size") == 0 && has && table == checkpoint_opts)
			o->size = argv[++i];
		else if (a[0] == '-' && a[1] != '\0') {
			char sc[64];
			snprintf(sc, sizeof(sc), "evidence %s", sub);
			bool known = false;
			for (const struct cg_cli_opt *t = table; t->name; t++)
				known |= strcmp(t->name, a) == 0;
			cg_cli_bad_option(sc, a, known ? "missing the value of" : NULL, table);
			return -1;
		} else if (o->n_pos < max_pos)
			o->pos[o->n_pos++] = a;
		else {
			fprintf(stderr, "callgate evidence %s: unexpected argument '%s'\n", sub, a);
			return -1;
		}
	}
	if (o->n_pos != max_pos) {
		fprintf(stderr, "callgate evidence %s: missing argument (see --help)\n", sub);
		return -1;
	}
	return 0;
}

/* ---- evidence checkpoint -------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *v)
{
	if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 19)
		return -1;
	*v = strtoull(s, NULL, 10);
	return 0;
}

static const struct cg_ckpt *find_ckpt(const struct proof_ctx *c, uint64_t size)
{
	for (size_t i = c->n_ck; i-- > 0;)
		if (c->ck[i].seq == size && c->ck[i].note_sig_len)
			return &c->ck[i];
	return NULL;
}

static const struct cg_ckpt *latest_ckpt(const struct proof_ctx *c)
{
	for (size_t i = c->n_ck; i-- > 0;)
		if (c->ck[i].note_sig_len && c->ck[i].seq <= c->n_leaves)
			return &c->ck[i];
	return NULL;
}

static int cmd_checkpoint(const char *state_dir, int argc, char **argv)
{
	static const char usage[] =
	    "callgate evidence checkpoint [--state-dir DIR] [--size N] [--out FILE]";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(usage,
				   "Print a signed checkpoint of the journal as a C2SP signed note "
				   "(origin, tree size,\nbase64 Merkle root, Ed25519 signature), "
				   "rebuilt from checkpoints.ndjson after\nchecking it against the "
				   "journal.",
				   checkpoint_opts);
	struct opts o = { .state_dir = state_dir };
	if (parse_opts("checkpoint", argc, argv, checkpoint_opts, 0, &o) < 0)
		return CG_EXIT_USAGE;
	uint64_t size = 0;
	if (o.size && parse_u64(o.size, &size) < 0) {
		fprintf(stderr, "callgate evidence checkpoint: --size takes a number\n");
		return CG_EXIT_USAGE;
	}
	struct proof_ctx c;
	char why[600];
	int rc = CG_EXIT_ERROR;
	if (ctx_open(o.state_dir, o.pubkey, &c, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence checkpoint: %s\n", why);
		goto free_ctx;
	}
	const struct cg_ckpt *ck = o.size ? find_ckpt(&c, size) : latest_ckpt(&c);
	if (!ck) {
		fprintf(stderr, "callgate evidence checkpoint: no signed checkpoint%s\n",
			o.size ? " of that size" : "");
		rc = EXIT_FAIL;
		goto free_ctx;
	}
	size_t len = 0;
	char *note = ckpt_note(&c, ck, &len, why, sizeof(why));
	if (!note) {
		fprintf(stderr, "callgate evidence checkpoint: %s\n", why);
		rc = EXIT_FAIL;
		goto free_ctx;
	}
	rc = emit("checkpoint", o.out, note, len);
	free(note);
free_ctx:
	ctx_free(&c);
	return rc;
}

/* ---- evidence prove ------------------------------------------------------------- */

static int cmd_prove(const char *state_dir, int argc, char **argv)
{
	static const char usage[] =
	    "callgate evidence prove [--state-dir DIR] [--pubkey FILE] [--out FILE] TRACE_ID";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(usage,
				   "Write one JSON file holding the trace's events (the journal's "
				   "exact lines), the\nMerkle inclusion proof of each, and the "
				   "signed checkpoint note they lead to.\nCheck it without "
				   "callgate: python3 docs/verify_proof.py --pubkey PUB proof FILE",
				   common_opts);
	struct opts o = { .state_dir = state_dir };
	if (parse_opts("prove", argc, argv, common_opts, 1, &o) < 0)
		return CG_EXIT_USAGE;
	const char *id = o.pos[0];
	if (!cg_trace_id_valid(id)) {
		fprintf(stderr, "callgate evidence prove: '%s' is not a trace id\n", id);
		return CG_EXIT_USAGE;
	}
	struct proof_ctx c;
	char why[600];
	int rc = CG_EXIT_ERROR;
	json_t *doc = NULL, *events = NULL;
	char *note = NULL;
	if (ctx_open(o.state_dir, o.pubkey, &c, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence prove: %s\n", why);
		goto free_all;
	}
	uint64_t last = 0, n_ev = 0;
	for (uint64_t i = 0; i < c.n_leaves; i++)
		if (strcmp(c.jv.v[i].trace, id) == 0) {
			last = i + 1;
			n_ev++;
		}
	if (n_ev == 0) {
		fprintf(stderr, "callgate evidence prove: the journal holds no trace %s\n", id);
		rc = EXIT_FAIL;
		goto free_all;
	}
	const struct cg_ckpt *ck = latest_ckpt(&c);
	if (!ck || ck->seq < last) {
		fprintf(stderr,
			"callgate evidence prove: the trace's last event (seq %" PRIu64
			") is not under a signed checkpoint yet; a running daemon signs "
			"within a second: retry\n",
			last);
		rc = EXIT_FAIL;
		goto free_all;
	}
	size_t nlen = 0;
	if (!(note = ckpt_note(&c, ck, &nlen, why, sizeof(why)))) {
		fprintf(stderr, "callgate evidence prove: %s\n", why);
		rc = EXIT_FAIL;
		goto free_all;
	}
	unsigned char root[CG_MERKLE_HASH_LEN];
	if (cg_merkle_tree_root(c.tree, ck->seq, root) < 0)
		goto free_all;
	doc = json_pack("{s:s, s:s, s:s, s:[]}", "format", PROOF_FORMAT, "trace", id, "checkpoint",
			note, "events");
	events = json_object_get(doc, "events");
	for (uint64_t i = 0; doc && i < last; i++) {
		if (strcmp(c.jv.v[i].trace, id) != 0)
			continue;
		unsigned char p[CG_MERKLE_MAX_PROOF][CG_MERKLE_HASH_LEN];
		size_t np = 0;
		const struct cg_evline *e = &c.jv.v[i];
		/* Self-check: never hand out a proof that does not verify. */
		if (cg_merkle_inclusion_proof(c.tree, i, ck->seq, p, &np) < 0 ||
		    !cg_merkle_inclusion_verify(i, ck->seq, c.leaves[i],
						(const unsigned char(*)[CG_MERKLE_HASH_LEN])p, np,
						root)) {
			fprintf(stderr,
				"callgate evidence prove: internal error: the proof of seq %" PRIu64
				" does not verify\n",
				i + 1);
			goto free_all;
		}
		json_t *pa = proof_array(p, np);
		json_t *line = json_stringn(e->line, e->line_len);
		if (!pa || !line ||
		    json_array_append_new(events,
					  json_pack("{s:I, s:o, s:o}", "index", (json_int_t)i,
						    "line", line, "proof", pa)) != 0) {
			json_decref(pa);
			json_decref(line);
			fprintf(stderr, "callgate evidence prove: out of memory\n");
			goto free_all;
		}
	}
	rc = emit_json("prove", o.out, doc);
free_all:
	free(note);
	json_decref(doc);
	ctx_free(&c);
	return rc;
}

/* ---- evidence consistency -------------------------------------------------------- */

/*
 * OLD or NEW: a note file, or a tree size of this journal's checkpoints.
 * Returns the note (malloc'd) or NULL with why.
 */
static char *note_arg(const struct proof_ctx *c, const char *arg, size_t *len, char *why,
		      size_t why_len)
{
	struct stat st;
	uint64_t size;
	if (stat(arg, &st) != 0 && parse_u64(arg, &size) == 0) {
		const struct cg_ckpt *ck = find_ckpt(c, size);
		if (!ck) {
			snprintf(why, why_len, "no signed checkpoint of size %s", arg);
			return NULL;
		}
		return ckpt_note(c, ck, len, why, why_len);
	}
	char *p = NULL;
	if (cg_file_read(arg, CG_NOTE_MAX, &p, len) < 0) {
		snprintf(why, why_len, "%.300s: %s", arg,
			 errno == EFBIG ? "larger than any note" : strerror(errno));
		return NULL;
	}
	return p;
}

static int cmd_consistency(const char *state_dir, int argc, char **argv)
{
	static const char usage[] = "callgate evidence consistency [--state-dir DIR] [--pubkey "
				    "FILE] [--out FILE] OLD NEW";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Prove that checkpoint NEW extends checkpoint OLD: both signed by this log's\n"
		    "key, OLD a prefix of the journal NEW signs. OLD and NEW are note files (as\n"
		    "`evidence checkpoint` prints) or tree sizes of this journal's "
		    "checkpoints.\nExits 1 when they show different histories. Check the "
		    "file without callgate:\npython3 docs/verify_proof.py --pubkey PUB "
		    "consistency FILE",
		    common_opts);
	struct opts o = { .state_dir = state_dir };
	if (parse_opts("consistency", argc, argv, common_opts, 2, &o) < 0)
		return CG_EXIT_USAGE;
	struct proof_ctx c;
	char why[600];
	int rc = CG_EXIT_ERROR;
	char *txt[2] = { NULL, NULL };
	struct cg_note n[2];
	json_t *doc = NULL;
	if (ctx_open(o.state_dir, o.pubkey, &c, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence consistency: %s\n", why);
		goto free_all;
	}
	rc = EXIT_FAIL;
	for (int i = 0; i < 2; i++) {
		size_t len = 0;
		const char *what = i ? "NEW" : "OLD";
		if (!(txt[i] = note_arg(&c, o.pos[i], &len, why, sizeof(why))) ||
		    cg_note_parse(txt[i], len, &n[i], why, sizeof(why)) < 0) {
			fprintf(stderr, "callgate evidence consistency: %s: %s\n", what, why);
			goto free_all;
		}
		if (strcmp(n[i].origin, c.origin) != 0 ||
		    !cg_note_verify(&n[i], txt[i], NULL, c.key)) {
			fprintf(stderr,
				"callgate evidence consistency: %s is not a checkpoint signed by "
				"this log (%s) with its evidence key\n",
				what, c.origin);
			goto free_all;
		}
	}
	if (n[0].size > n[1].size) {
		fprintf(stderr,
			"callgate evidence consistency: OLD (size %" PRIu64
			") is larger than NEW (size %" PRIu64 ")\n",
			n[0].size, n[1].size);
		goto free_all;
	}
	for (int i = 1; i >= 0; i--) {
		unsigned char root[CG_MERKLE_HASH_LEN];
		if (n[i].size > c.n_leaves || cg_merkle_tree_root(c.tree, n[i].size, root) < 0 ||
		    memcmp(root, n[i].root, sizeof(root)) != 0) {
			fprintf(stderr,
				"callgate evidence consistency: INCONSISTENT: %s (size %" PRIu64
				") is not a prefix of this journal: the checkpoints show "
				"different histories (or the journal was rewritten; run callgate "
				"replay)\n",
				i ? "NEW" : "OLD", n[i].size);
			goto free_all;
		}
	}
	unsigned char p[CG_MERKLE_MAX_PROOF][CG_MERKLE_HASH_LEN];
	size_t np = 0;
	if (cg_merkle_consistency_proof(c.tree, n[0].size, n[1].size, p, &np) < 0 ||
	    !cg_merkle_consistency_verify(n[0].size, n[1].size, n[0].root, n[1].root,
					  (const unsigned char(*)[CG_MERKLE_HASH_LEN])p, np)) {
		fprintf(stderr, "callgate evidence consistency: internal error: the proof does "
				"not verify\n");
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	doc = json_pack("{s:s, s:s, s:s, s:o}", "format", CONS_FORMAT, "old", txt[0], "new", txt[1],
			"proof", proof_array(p, np));
	rc = emit_json("consistency", o.out, doc);
free_all:
	json_decref(doc);
	free(txt[0]);
	free(txt[1]);
	ctx_free(&c);
	return rc;
}

bool cg_cli_proof_handles(const char *sub)
{
	return sub && (strcmp(sub, "prove") == 0 || strcmp(sub, "consistency") == 0 ||
		       strcmp(sub, "checkpoint") == 0);
}

int cg_cli_proof(const struct cg_cli *g, int argc, char **argv)
{
	if (strcmp(argv[0], "prove") == 0)
		return cmd_prove(g->state_dir, argc, argv);
	if (strcmp(argv[0], "consistency") == 0)
		return cmd_consistency(g->state_dir, argc, argv);
	if (strcmp(argv[0], "checkpoint") == 0)
		return cmd_checkpoint(g->state_dir, argc, argv);
	fprintf(stderr, "callgate evidence: %s: not a proof command\n", argv[0]);
	return CG_EXIT_USAGE;
}
