/* SPDX-License-Identifier: MIT */
/*
 * cli_proof — proofs a third party checks offline (docs/evidence.md,
 * "Proofs"): `callgate evidence checkpoint` prints a signed checkpoint as a
 * C2SP note, `evidence prove TRACE_ID` writes one file holding a trace's
 * events, their Merkle inclusion proofs and the signed checkpoint they lead
 * to, and `evidence consistency OLD NEW` proves one checkpoint extends
 * another. docs/verify_proof.py checks both files without callgate.
 * Witnessing (docs/evidence.md, "Witnesses"): `evidence witness-request`
 * writes a C2SP tlog-witness add-checkpoint request for this log,
 * `evidence witness` cosigns another log's checkpoint as a witness, and
 * `evidence witnessed` keeps cosigned notes for a witness-policy quorum.
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
 *  - A witness MUST NOT cosign a checkpoint that is not signed by the log's
 *    key or not consistent with the last one it cosigned for that origin,
 *    and MUST record the new checkpoint (synced, under its lock) before it
 *    prints the cosignature: otherwise two racing requests could roll its
 *    view back, and a fork could be cosigned.
 *  - Nothing here writes the journal or the checkpoints.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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

static const struct cg_cli_opt prove_opts[] = {
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ "--pubkey", "FILE", "the evidence public key to trust (default: DIR/keys/evidence.pub)" },
	{ "--out", "FILE", "write the result to FILE (default: standard output)" },
	{ "--checkpoint", "NOTE",
	  "prove against this checkpoint note (e.g. one witnesses cosigned; default: the latest)" },
	{ NULL, NULL, NULL },
};

static const struct cg_cli_opt request_opts[] = {
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ "--pubkey", "FILE", "the evidence public key to trust (default: DIR/keys/evidence.pub)" },
	{ "--out", "FILE", "write the request to FILE (default: standard output)" },
	{ "--old", "N", "the tree size the witness last cosigned (default 0: first contact)" },
	{ "--size", "N", "the checkpoint of tree size N (default: the latest)" },
	{ NULL, NULL, NULL },
};

static const struct cg_cli_opt witness_opts[] = {
	{ "--witness-dir", "DIR", "the witness's key and state (default: STATE/witness)" },
	{ "--origin", "NAME", "the log to witness (the checkpoints' origin line)" },
	{ "--log-key", "FILE", "that log's Ed25519 public key (PEM)" },
	{ "--name", "NAME",
	  "the witness's key name, at first use (default: callgate-witness/<host>)" },
	{ "--out", "FILE", "write the cosignature line to FILE (default: standard output)" },
	{ "--state-dir", "DIR", "a state directory whose witness/ is the default witness dir" },
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
	if (!ck->root[0] || !ck->note_sig_len ||
	    cg_hex_decode(ck->root, root, CG_MERKLE_HASH_LEN) < 0) {
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
	const char *state_dir, *pubkey, *out, *size, *old, *checkpoint;
	const char *witness_dir, *origin, *log_key, *name;
	const char *state_from; /* where state_dir came from, for a missing-directory message */
	const char *pos[2];
	int n_pos;
};

static int parse_opts(const char *sub, int argc, char **argv, const struct cg_cli_opt *table,
		      int max_pos, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (strcmp(a, "--state-dir") == 0 && has) {
			o->state_dir = argv[++i];
			o->state_from = "--state-dir";
		} else if (strcmp(a, "--pubkey") == 0 && has)
			o->pubkey = argv[++i];
		else if ((strcmp(a, "--out") == 0 || strcmp(a, "-o") == 0) && has)
			o->out = argv[++i];
		else if (strcmp(a, "--size") == 0 && has &&
			 (table == checkpoint_opts || table == request_opts))
			o->size = argv[++i];
		else if (strcmp(a, "--old") == 0 && has && table == request_opts)
			o->old = argv[++i];
		else if (strcmp(a, "--checkpoint") == 0 && has && table == prove_opts)
			o->checkpoint = argv[++i];
		else if (strcmp(a, "--witness-dir") == 0 && has && table == witness_opts)
			o->witness_dir = argv[++i];
		else if (strcmp(a, "--origin") == 0 && has && table == witness_opts)
			o->origin = argv[++i];
		else if (strcmp(a, "--log-key") == 0 && has && table == witness_opts)
			o->log_key = argv[++i];
		else if (strcmp(a, "--name") == 0 && has && table == witness_opts)
			o->name = argv[++i];
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

static int cmd_checkpoint(const char *state_dir, const char *from, int argc, char **argv)
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
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("checkpoint", argc, argv, checkpoint_opts, 0, &o) < 0)
		return CG_EXIT_USAGE;
	if (cg_cli_state_dir_check("evidence checkpoint", o.state_dir, o.state_from) < 0)
		return CG_EXIT_NOINPUT;
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

/* ---- the witness policy: a quorum before a checkpoint counts ------------------------- */

#define POLICY_MAX_WITNESSES 16

/*
 * STATE/witness-policy: "quorum K" and "witness NAME PUBKEY_FILE" lines (#
 * comments). When it exists, `evidence prove` uses only checkpoints that at
 * least K of the named witnesses cosigned (kept in STATE/witnessed/).
 */
struct wpolicy {
	unsigned quorum;
	size_t n;
	char name[POLICY_MAX_WITNESSES][CG_NOTE_NAME_MAX + 1];
	EVP_PKEY *key[POLICY_MAX_WITNESSES];
};

static void policy_free(struct wpolicy *w)
{
	for (size_t i = 0; i < w->n; i++)
		EVP_PKEY_free(w->key[i]);
	w->n = 0;
}

/* 0: no policy file (quorum 0); 1: loaded; -1: unusable, with why. */
static int policy_load(const char *state_dir, struct wpolicy *w, char *why, size_t why_len)
{
	memset(w, 0, sizeof(*w));
	char path[4200];
	snprintf(path, sizeof(path), "%s/witness-policy", state_dir);
	char *buf = NULL;
	size_t len = 0;
	if (cg_file_read(path, 65536, &buf, &len) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, why_len, "%.300s: %s", path, strerror(errno));
		return -1;
	}
	int rc = 1;
	size_t lineno = 0;
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l && rc == 1;
	     l = strtok_r(NULL, "\n", &save)) {
		lineno++;
		char a[16], b[CG_NOTE_NAME_MAX + 1], f[4096], d[200];
		int n = sscanf(l, "%15s %255s %4095s", a, b, f);
		if (n <= 0 || a[0] == '#')
			continue;
		uint64_t q;
		if (n == 2 && strcmp(a, "quorum") == 0 && parse_u64(b, &q) == 0 && q <= 64)
			w->quorum = (unsigned)q;
		else if (n == 3 && strcmp(a, "witness") == 0 && cg_note_name_valid(b) &&
			 w->n < POLICY_MAX_WITNESSES) {
			w->key[w->n] =
			    cg_key_load(f, CG_KEY_PUBLIC_OR_PRIVATE, false, d, sizeof(d));
			if (!w->key[w->n]) {
				snprintf(why, why_len, "%.200s line %zu: %.150s: %.100s", path,
					 lineno, f, d);
				rc = -1;
				break;
			}
			memcpy(w->name[w->n++], b, strlen(b) + 1);
		} else {
			snprintf(why, why_len,
				 "%.300s line %zu: expected \"quorum K\" or \"witness NAME "
				 "PUBKEY_FILE\"",
				 path, lineno);
			rc = -1;
		}
	}
	if (rc == 1 && (w->quorum == 0 || w->quorum > w->n)) {
		snprintf(why, why_len, "%.300s: quorum %u of %zu witnesses cannot be met", path,
			 w->quorum, w->n);
		rc = -1;
	}
	free(buf);
	if (rc < 0)
		policy_free(w);
	return rc;
}

/* How many of the policy's witnesses cosigned the note. */
static unsigned cosigners(const struct wpolicy *w, const struct cg_note *n, const char *p)
{
	unsigned k = 0;
	for (size_t i = 0; i < w->n; i++)
		k += cg_note_cosig_verify(n, p, w->name[i], w->key[i], NULL) ? 1 : 0;
	return k;
}

/* p[0..len) is a checkpoint of this journal, signed by its key: parsed into n. */
static bool own_note(const struct proof_ctx *c, const char *p, size_t len, struct cg_note *n)
{
	char why[200];
	unsigned char root[CG_MERKLE_HASH_LEN];
	return cg_note_parse(p, len, n, why, sizeof(why)) == 0 &&
	       strcmp(n->origin, c->origin) == 0 && cg_note_verify(n, p, NULL, c->key) &&
	       cg_merkle_tree_root(c->tree, n->size, root) == 0 &&
	       memcmp(root, n->root, sizeof(root)) == 0;
}

/*
 * The largest checkpoint in STATE/witnessed/ of size >= min_size that the
 * policy's quorum cosigned; malloc'd (the caller frees), or NULL.
 */
static char *best_witnessed(const char *state_dir, const struct proof_ctx *c,
			    const struct wpolicy *w, uint64_t min_size, size_t *len, uint64_t *size)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/witnessed", state_dir);
	DIR *d = opendir(dir);
	char *best = NULL;
	if (!d)
		return NULL;
	for (struct dirent *e; (e = readdir(d));) {
		size_t nl = strlen(e->d_name);
		if (nl < 6 || strcmp(e->d_name + nl - 5, ".note") != 0)
			continue;
		char path[4500], *p = NULL;
		size_t pl = 0;
		struct cg_note n;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (cg_file_read(path, CG_NOTE_MAX, &p, &pl) == 0 && own_note(c, p, pl, &n) &&
		    n.size >= min_size && (!best || n.size > *size) &&
		    cosigners(w, &n, p) >= w->quorum) {
			free(best);
			best = p;
			p = NULL;
			*len = pl;
			*size = n.size;
		}
		free(p);
	}
	closedir(d);
	return best;
}

static int cmd_witnessed(const char *state_dir, const char *from, int argc, char **argv)
{
	static const char usage[] = "callgate evidence witnessed [--state-dir DIR] NOTE";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Keep a cosigned checkpoint NOTE (this log's note with witness "
		    "cosignature lines\nappended) in DIR/witnessed/<size>.note, adding "
		    "its signature lines to those\nalready kept for that size. With "
		    "DIR/witness-policy, `evidence prove` uses only\ncheckpoints a "
		    "quorum of its witnesses cosigned.",
		    common_opts);
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("witnessed", argc, argv, common_opts, 1, &o) < 0)
		return CG_EXIT_USAGE;
	if (cg_cli_state_dir_check("evidence witnessed", o.state_dir, o.state_from) < 0)
		return CG_EXIT_NOINPUT;
	struct proof_ctx c;
	struct wpolicy w;
	char why[600], path[4300];
	char *p = NULL, *old = NULL;
	size_t len = 0, old_len = 0;
	struct cg_note n, on;
	int rc = CG_EXIT_ERROR, pol = 0;
	struct cg_buf b;
	cg_buf_init(&b, CG_NOTE_MAX);
	memset(&w, 0, sizeof(w));
	if (ctx_open(o.state_dir, o.pubkey, &c, why, sizeof(why)) < 0 ||
	    (pol = policy_load(o.state_dir, &w, why, sizeof(why))) < 0) {
		fprintf(stderr, "callgate evidence witnessed: %s\n", why);
		goto free_all;
	}
	rc = EXIT_FAIL;
	if (cg_file_read(o.pos[0], CG_NOTE_MAX, &p, &len) < 0 || !own_note(&c, p, len, &n)) {
		fprintf(stderr,
			"callgate evidence witnessed: %s is not a checkpoint of this journal "
			"signed by its key\n",
			o.pos[0]);
		goto free_all;
	}
	snprintf(path, sizeof(path), "%s/witnessed", o.state_dir);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "callgate evidence witnessed: %s: %s\n", path, strerror(errno));
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	snprintf(path, sizeof(path), "%s/witnessed/%" PRIu64 ".note", o.state_dir, n.size);
	/* Merge: the kept note's lines, then the new signature lines it lacks. */
	const char *base = p;
	size_t base_len = len;
	if (cg_file_read(path, CG_NOTE_MAX, &old, &old_len) == 0 &&
	    own_note(&c, old, old_len, &on) && on.text_len == n.text_len &&
	    memcmp(old, p, n.text_len) == 0) {
		base = old;
		base_len = old_len;
	}
	cg_buf_add(&b, base, base_len);
	for (size_t pos = n.text_len + 1; pos < len;) {
		const char *nl = memchr(p + pos, '\n', len - pos);
		size_t ll = (size_t)(nl - (p + pos)) + 1;
		if (base != p && !memmem(base + n.text_len, base_len - n.text_len, p + pos, ll))
			cg_buf_add(&b, p + pos, ll);
		pos += ll;
	}
	struct cg_note merged;
	if (b.truncated || cg_note_parse((const char *)b.p, b.len, &merged, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence witnessed: the merged note is invalid: %s\n",
			b.truncated ? "too large" : why);
		goto free_all;
	}
	if (cg_file_write_atomic(path, b.p, b.len, 0644, false) < 0) {
		fprintf(stderr, "callgate evidence witnessed: %s: %s\n", path, strerror(errno));
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	if (pol == 1)
		printf("tree size %" PRIu64 ": %u of the %u witness cosignatures required\n",
		       n.size, cosigners(&w, &merged, (const char *)b.p), w.quorum);
	else
		printf("tree size %" PRIu64 ": kept (no witness-policy)\n", n.size);
	rc = CG_EXIT_OK;
free_all:
	cg_buf_free(&b);
	free(p);
	free(old);
	policy_free(&w);
	ctx_free(&c);
	return rc;
}

/* ---- evidence prove ------------------------------------------------------------- */

static int cmd_prove(const char *state_dir, const char *from, int argc, char **argv)
{
	static const char usage[] =
	    "callgate evidence prove [--state-dir DIR] [--pubkey FILE] [--out FILE] TRACE_ID";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(usage,
				   "Write one JSON file holding the trace's events (the journal's "
				   "exact lines), the\nMerkle inclusion proof of each, and the "
				   "signed checkpoint note they lead to.\nCheck it without "
				   "callgate: python3 docs/verify_proof.py --pubkey PUB proof FILE",
				   prove_opts);
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("prove", argc, argv, prove_opts, 1, &o) < 0)
		return CG_EXIT_USAGE;
	if (cg_cli_state_dir_check("evidence prove", o.state_dir, o.state_from) < 0)
		return CG_EXIT_NOINPUT;
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
	struct cg_ckpt given;
	size_t nlen = 0;
	if (o.checkpoint) {
		/* A note from elsewhere (cosigned, say): it must be one of this journal's. */
		struct cg_note n;
		unsigned char root[CG_MERKLE_HASH_LEN];
		if (cg_file_read(o.checkpoint, CG_NOTE_MAX, &note, &nlen) < 0 ||
		    cg_note_parse(note, nlen, &n, why, sizeof(why)) < 0 ||
		    strcmp(n.origin, c.origin) != 0 || !cg_note_verify(&n, note, NULL, c.key) ||
		    cg_merkle_tree_root(c.tree, n.size, root) < 0 ||
		    memcmp(root, n.root, sizeof(root)) != 0) {
			fprintf(stderr,
				"callgate evidence prove: %s is not a checkpoint of this journal "
				"signed by its key\n",
				o.checkpoint);
			rc = EXIT_FAIL;
			goto free_all;
		}
		memset(&given, 0, sizeof(given));
		given.seq = n.size;
		ck = &given;
	} else {
		struct wpolicy w;
		int pol = policy_load(o.state_dir, &w, why, sizeof(why));
		if (pol < 0) {
			fprintf(stderr, "callgate evidence prove: %s\n", why);
			goto free_all;
		}
		if (pol == 1) {
			/* Configured: a checkpoint counts only once a quorum cosigned it. */
			memset(&given, 0, sizeof(given));
			note = best_witnessed(o.state_dir, &c, &w, last, &nlen, &given.seq);
			unsigned q = w.quorum;
			policy_free(&w);
			if (!note) {
				fprintf(stderr,
					"callgate evidence prove: no checkpoint covering the trace "
					"(seq %" PRIu64 ") has %u witness cosignatures yet "
					"(witness-policy); see `callgate evidence witnessed`\n",
					last, q);
				rc = EXIT_FAIL;
				goto free_all;
			}
			ck = &given;
		}
	}
	if (!ck || ck->seq < last) {
		fprintf(stderr,
			"callgate evidence prove: the trace's last event (seq %" PRIu64
			") is not under a signed checkpoint yet; a running daemon signs "
			"within a second: retry\n",
			last);
		rc = EXIT_FAIL;
		goto free_all;
	}
	if (!note && !(note = ckpt_note(&c, ck, &nlen, why, sizeof(why)))) {
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

static int cmd_consistency(const char *state_dir, const char *from, int argc, char **argv)
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
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("consistency", argc, argv, common_opts, 2, &o) < 0)
		return CG_EXIT_USAGE;
	if (cg_cli_state_dir_check("evidence consistency", o.state_dir, o.state_from) < 0)
		return CG_EXIT_NOINPUT;
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

/* ---- witnessing (c2sp.org/tlog-witness, add-checkpoint) ---------------------------- */

static int cmd_witness_request(const char *state_dir, const char *from, int argc, char **argv)
{
	static const char usage[] = "callgate evidence witness-request [--state-dir DIR] [--old N] "
				    "[--size N] [--out FILE]";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Write a tlog-witness add-checkpoint request for a checkpoint of "
		    "this log: \"old N\",\nthe consistency proof from tree size N, "
		    "an empty line, and the signed note.\nHand it to `callgate "
		    "evidence witness` (or any tlog-witness) to be cosigned.",
		    request_opts);
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("witness-request", argc, argv, request_opts, 0, &o) < 0)
		return CG_EXIT_USAGE;
	if (cg_cli_state_dir_check("evidence witness-request", o.state_dir, o.state_from) < 0)
		return CG_EXIT_NOINPUT;
	uint64_t old = 0, size = 0;
	if ((o.old && parse_u64(o.old, &old) < 0) || (o.size && parse_u64(o.size, &size) < 0)) {
		fprintf(stderr,
			"callgate evidence witness-request: --old and --size take numbers\n");
		return CG_EXIT_USAGE;
	}
	struct proof_ctx c;
	char why[600];
	int rc = CG_EXIT_ERROR;
	char *note = NULL;
	struct cg_buf b;
	cg_buf_init(&b, 1 << 20);
	if (ctx_open(o.state_dir, o.pubkey, &c, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence witness-request: %s\n", why);
		goto free_all;
	}
	rc = EXIT_FAIL;
	const struct cg_ckpt *ck = o.size ? find_ckpt(&c, size) : latest_ckpt(&c);
	size_t nlen = 0;
	if (!ck || !(note = ckpt_note(&c, ck, &nlen, why, sizeof(why)))) {
		fprintf(stderr, "callgate evidence witness-request: %s\n",
			ck ? why : "no signed checkpoint of that size");
		goto free_all;
	}
	unsigned char p[CG_MERKLE_MAX_PROOF][CG_MERKLE_HASH_LEN];
	size_t np = 0;
	if (cg_merkle_consistency_proof(c.tree, old, ck->seq, p, &np) < 0) {
		fprintf(stderr,
			"callgate evidence witness-request: --old %" PRIu64
			" is past the checkpoint (size %" PRIu64 ")\n",
			old, ck->seq);
		goto free_all;
	}
	char line[64];
	int ln = snprintf(line, sizeof(line), "old %" PRIu64 "\n", old);
	cg_buf_add(&b, line, (size_t)ln);
	for (size_t i = 0; i < np; i++) {
		char *h = cg_base64_encode(p[i], CG_MERKLE_HASH_LEN);
		if (!h)
			goto free_all;
		cg_buf_add(&b, h, strlen(h));
		cg_buf_add(&b, "\n", 1);
		free(h);
	}
	cg_buf_add(&b, "\n", 1);
	cg_buf_add(&b, note, nlen);
	if (b.truncated) {
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	rc = emit("witness-request", o.out, (const char *)b.p, b.len);
free_all:
	cg_buf_free(&b);
	free(note);
	ctx_free(&c);
	return rc;
}

/* The witness's key (made at first use, 0600) and name (kept in witness.name). */
static EVP_PKEY *witness_key(const char *dir, const char *want_name, char *name, size_t cap,
			     char *why, size_t why_len)
{
	char kp[4300], pp[4300], np[4300];
	snprintf(kp, sizeof(kp), "%s/witness.key", dir);
	snprintf(pp, sizeof(pp), "%s/witness.pub", dir);
	snprintf(np, sizeof(np), "%s/witness.name", dir);
	EVP_PKEY *k = NULL;
	char d[200];
	if (access(kp, F_OK) != 0) {
		k = cg_key_generate();
		if (!k || cg_key_write(kp, k, true, true, why, why_len) != 0 ||
		    cg_key_write(pp, k, false, false, why, why_len) != 0) {
			EVP_PKEY_free(k);
			return NULL;
		}
		EVP_PKEY_free(k);
	}
	k = cg_key_load(kp, CG_KEY_PRIVATE, true, d, sizeof(d));
	if (!k) {
		snprintf(why, why_len, "%.300s: %s", kp, d);
		return NULL;
	}
	char *p = NULL;
	size_t n = 0;
	if (cg_file_read(np, 4096, &p, &n) != 0) {
		char host[256] = "localhost", fp[65];
		if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
			snprintf(host, sizeof(host), "localhost");
		for (char *ch = host; *ch; ch++)
			if (*ch <= ' ' || *ch == '+' || *ch > '~')
				*ch = '-';
		char def[400];
		if (cg_key_fingerprint(k, fp) < 0)
			fp[0] = '\0';
		snprintf(def, sizeof(def), "callgate-witness/%.200s/%.16s", host, fp);
		const char *nm = want_name ? want_name : def;
		char line[400];
		int ln = snprintf(line, sizeof(line), "%s\n", nm);
		if (!cg_note_name_valid(nm) || ln < 0 || (size_t)ln >= sizeof(line) ||
		    cg_file_write_atomic(np, line, (size_t)ln, 0644, true) != 0 ||
		    cg_file_read(np, 4096, &p, &n) != 0) {
			snprintf(why, why_len, "%.300s: cannot record the witness name", np);
			EVP_PKEY_free(k);
			return NULL;
		}
	}
	if (n && p[n - 1] == '\n')
		p[--n] = '\0';
	bool ok = n < cap && strlen(p) == n && cg_note_name_valid(p);
	if (ok)
		memcpy(name, p, n + 1);
	free(p);
	if (!ok || (want_name && strcmp(want_name, name) != 0)) {
		snprintf(why, why_len, "%.300s: %s", np,
			 ok ? "the witness already has another name" : "not a valid key name");
		EVP_PKEY_free(k);
		return NULL;
	}
	return k;
}

/* Parse an add-checkpoint body: "old N\n", proof lines, "\n", then the note. */
static int parse_request(const char *p, size_t len, uint64_t *old,
			 unsigned char (*proof)[CG_MERKLE_HASH_LEN], size_t *np, size_t *note_off,
			 char *why, size_t why_len)
{
	const char *nl = memchr(p, '\n', len);
	char num[24];
	size_t ll = nl ? (size_t)(nl - p) : 0;
	if (!nl || ll < 5 || ll - 4 >= sizeof(num) || memcmp(p, "old ", 4) != 0) {
		snprintf(why, why_len, "the request does not start with an \"old N\" line");
		return -1;
	}
	memcpy(num, p + 4, ll - 4);
	num[ll - 4] = '\0';
	if ((num[0] == '0' && num[1]) || parse_u64(num, old) < 0) {
		snprintf(why, why_len, "the old size is not a decimal number");
		return -1;
	}
	size_t pos = ll + 1;
	*np = 0;
	for (;;) {
		nl = pos < len ? memchr(p + pos, '\n', len - pos) : NULL;
		if (!nl) {
			snprintf(why, why_len, "no empty line before the checkpoint");
			return -1;
		}
		ll = (size_t)(nl - (p + pos));
		if (ll == 0)
			break;
		size_t got = 0;
		unsigned char *h = *np < 63 ? cg_base64_decode(p + pos, ll, &got) : NULL;
		if (!h || got != CG_MERKLE_HASH_LEN) {
			free(h);
			snprintf(why, why_len,
				 "a consistency proof line is not one base64 hash "
				 "(or there are more than 63)");
			return -1;
		}
		memcpy(proof[(*np)++], h, CG_MERKLE_HASH_LEN);
		free(h);
		pos += ll + 1;
	}
	*note_off = pos + 1;
	return 0;
}

static int cmd_witness(const char *state_dir, const char *from, int argc, char **argv)
{
	static const char usage[] =
	    "callgate evidence witness [--witness-dir DIR] --origin NAME --log-key FILE "
	    "[--name NAME] [--out FILE] REQUEST";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Act as a tlog-witness for another log: check the add-checkpoint REQUEST\n"
		    "(from `callgate evidence witness-request`), and cosign its checkpoint only "
		    "if\n"
		    "the log's key signed it and it is consistent with the last checkpoint this\n"
		    "witness cosigned for that origin. Prints the cosignature line; append it to\n"
		    "the note. Exits 1 when it refuses, naming why (on a size conflict the\n"
		    "witness's last cosigned size is printed on standard output).",
		    witness_opts);
	struct opts o = { .state_dir = state_dir, .state_from = from };
	if (parse_opts("witness", argc, argv, witness_opts, 1, &o) < 0)
		return CG_EXIT_USAGE;
	if (!o.origin || !o.log_key || !cg_note_name_valid(o.origin) ||
	    (o.name && !cg_note_name_valid(o.name))) {
		fprintf(stderr, "callgate evidence witness: --origin NAME and --log-key FILE are "
				"required (see --help)\n");
		return CG_EXIT_USAGE;
	}
	char wdir[4096], path[4400], why[600], wname[CG_NOTE_NAME_MAX + 1], d[200];
	if (o.witness_dir)
		snprintf(wdir, sizeof(wdir), "%s", o.witness_dir);
	else
		snprintf(wdir, sizeof(wdir), "%s/witness", o.state_dir);
	snprintf(path, sizeof(path), "%s/logs", wdir);
	if ((mkdir(wdir, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(path, 0700) != 0 && errno != EEXIST)) {
		fprintf(stderr, "callgate evidence witness: %s: %s\n", path, strerror(errno));
		return CG_EXIT_ERROR;
	}
	/*
	 * One request at a time: checking the old size and recording the new
	 * checkpoint must be atomic, or two racing requests could roll the
	 * witness's view back (tlog-witness, add-checkpoint).
	 */
	snprintf(path, sizeof(path), "%s/LOCK", wdir);
	int lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
		fprintf(stderr, "callgate evidence witness: %s: %s\n", path, strerror(errno));
		if (lock_fd >= 0)
			close(lock_fd);
		return CG_EXIT_ERROR;
	}
	int rc = CG_EXIT_ERROR;
	char *req = NULL, *stored = NULL;
	size_t req_len = 0, stored_len = 0;
	EVP_PKEY *wk = witness_key(wdir, o.name, wname, sizeof(wname), why, sizeof(why));
	EVP_PKEY *lk = cg_key_load(o.log_key, CG_KEY_PUBLIC_OR_PRIVATE, false, d, sizeof(d));
	if (!wk || !lk) {
		fprintf(stderr, "callgate evidence witness: %s\n", !wk ? why : d);
		goto free_all;
	}
	if (cg_file_read(o.pos[0], 1 << 16, &req, &req_len) < 0) {
		fprintf(stderr, "callgate evidence witness: %s: %s\n", o.pos[0], strerror(errno));
		goto free_all;
	}
	rc = EXIT_FAIL;
	uint64_t old = 0;
	unsigned char proof[64][CG_MERKLE_HASH_LEN];
	size_t np = 0, off = 0;
	struct cg_note n;
	if (parse_request(req, req_len, &old, proof, &np, &off, why, sizeof(why)) < 0 ||
	    cg_note_parse(req + off, req_len - off, &n, why, sizeof(why)) < 0) {
		fprintf(stderr, "callgate evidence witness: bad request: %s\n", why);
		goto free_all;
	}
	const char *note = req + off;
	if (strcmp(n.origin, o.origin) != 0) {
		fprintf(stderr,
			"callgate evidence witness: unknown origin: %s (this witness is "
			"configured for %s)\n",
			n.origin, o.origin);
		goto free_all;
	}
	if (!cg_note_verify(&n, note, NULL, lk)) {
		fprintf(stderr, "callgate evidence witness: forbidden: no valid signature by the "
				"log's key\n");
		goto free_all;
	}
	if (old > n.size) {
		fprintf(stderr,
			"callgate evidence witness: bad request: old size %" PRIu64
			" is past the checkpoint's %" PRIu64 "\n",
			old, n.size);
		goto free_all;
	}
	/* What this witness last cosigned for the origin: a checkpoint body, or nothing. */
	char hex[65], sp[4400];
	cg_sha256_hex(o.origin, strlen(o.origin), hex);
	snprintf(sp, sizeof(sp), "%s/logs/%s", wdir, hex);
	struct cg_note last;
	uint64_t last_size = 0;
	unsigned char last_root[CG_MERKLE_HASH_LEN];
	if (cg_file_read(sp, CG_NOTE_MAX, &stored, &stored_len) == 0) {
		if (cg_note_parse(stored, stored_len, &last, why, sizeof(why)) < 0 ||
		    strcmp(last.origin, o.origin) != 0) {
			fprintf(stderr, "callgate evidence witness: %s is damaged: %s\n", sp, why);
			rc = CG_EXIT_ERROR;
			goto free_all;
		}
		last_size = last.size;
		memcpy(last_root, last.root, sizeof(last_root));
	} else if (errno != ENOENT) {
		fprintf(stderr, "callgate evidence witness: %s: %s\n", sp, strerror(errno));
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	if (old != last_size) {
		fprintf(
		    stderr,
		    "callgate evidence witness: conflict: this witness last cosigned size %" PRIu64
		    " of %s, not %" PRIu64 "\n",
		    last_size, o.origin, old);
		printf("%" PRIu64 "\n", last_size);
		goto free_all;
	}
	unsigned char empty[CG_MERKLE_HASH_LEN];
	struct cg_merkle_range er;
	cg_merkle_range_init(&er);
	cg_merkle_range_root(&er, empty);
	bool ok = n.size == 0 ? memcmp(n.root, empty, sizeof(empty)) == 0 && np == 0
		  : old == 0  ? np == 0
			      : cg_merkle_consistency_verify(
				    old, n.size, last_root, n.root,
				    (const unsigned char(*)[CG_MERKLE_HASH_LEN])proof, np);
	if (!ok) {
		fprintf(stderr,
			"callgate evidence witness: unprocessable: the checkpoint (size %" PRIu64
			") is not consistent with the one this witness cosigned (size %" PRIu64
			"): NOT cosigned\n",
			n.size, old);
		goto free_all;
	}
	/* Record before answering: a cosignature never outruns the witness's memory. */
	if (cg_file_write_atomic(sp, note, req_len - off, 0644, false) < 0) {
		fprintf(stderr, "callgate evidence witness: %s: %s\n", sp, strerror(errno));
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	unsigned char cs[CG_COSIG_LEN];
	uint64_t ts = (uint64_t)(cg_now_wall_ns() / 1000000000);
	char *b64 = NULL;
	if (cg_note_cosign(note, n.text_len, wname, wk, ts, cs) < 0 ||
	    !(b64 = cg_base64_encode(cs, sizeof(cs)))) {
		fprintf(stderr, "callgate evidence witness: signing failed\n");
		rc = CG_EXIT_ERROR;
		goto free_all;
	}
	char out[CG_NOTE_NAME_MAX + 200];
	int on = snprintf(out, sizeof(out), "\xe2\x80\x94 %s %s\n", wname, b64);
	free(b64);
	rc = emit("witness", o.out, out, (size_t)on);
free_all:
	EVP_PKEY_free(wk);
	EVP_PKEY_free(lk);
	free(req);
	free(stored);
	close(lock_fd);
	return rc;
}

bool cg_cli_proof_handles(const char *sub)
{
	return sub && (cg_cli_fleet_handles(sub) || strcmp(sub, "prove") == 0 ||
		       strcmp(sub, "consistency") == 0 || strcmp(sub, "checkpoint") == 0 ||
		       strcmp(sub, "witness") == 0 || strcmp(sub, "witness-request") == 0 ||
		       strcmp(sub, "witnessed") == 0);
}

int cg_cli_proof(const struct cg_cli *g, int argc, char **argv)
{
	const char *sd = g->state_dir ? g->state_dir : CG_DEFAULT_STATE_DIR;
	const char *from = g->state_dir_from ? g->state_dir_from : "the default";
	if (cg_cli_fleet_handles(argv[0]))
		return cg_cli_fleet(g, argc, argv);
	if (strcmp(argv[0], "prove") == 0)
		return cmd_prove(sd, from, argc, argv);
	if (strcmp(argv[0], "consistency") == 0)
		return cmd_consistency(sd, from, argc, argv);
	if (strcmp(argv[0], "checkpoint") == 0)
		return cmd_checkpoint(sd, from, argc, argv);
	if (strcmp(argv[0], "witness-request") == 0)
		return cmd_witness_request(sd, from, argc, argv);
	if (strcmp(argv[0], "witness") == 0)
		return cmd_witness(sd, from, argc, argv);
	if (strcmp(argv[0], "witnessed") == 0)
		return cmd_witnessed(sd, from, argc, argv);
	fprintf(stderr, "callgate evidence: %s: not a proof command\n", argv[0]);
	return CG_EXIT_USAGE;
}
