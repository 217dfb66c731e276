/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/evidence/merkle.c and src/evidence/note.c.
 *
 * The expected values come from a reference written here from RFC 9162's
 * recursive definitions (MTH, PATH, SUBPROOF) over plain leaf data, with its
 * own SHA-256 calls: the module under test must agree with it for every
 * tree of 1..40 leaves, every leaf, and every pair of sizes, and a proof
 * with one bit flipped (or a wrong size, index or root) must fail.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <openssl/sha.h>

#include "evidence.h"
#include "journal.h"
#include "key.h"
#include "merkle.h"
#include "note.h"
#include "replay.h"
#include "util.h"

#define N_MAX 40
#define HL    32

/* ---- the reference: RFC 9162 2.1 read literally -------------------------- */

static unsigned char data[N_MAX][8]; /* leaf i's data: "leaf-%02d" */

static void ref_leaf(int i, unsigned char out[HL])
{
	unsigned char b[1 + 8];
	b[0] = 0;
	memcpy(b + 1, data[i], 8);
	SHA256(b, sizeof(b), out);
}

static void ref_node(const unsigned char *l, const unsigned char *r, unsigned char out[HL])
{
	unsigned char b[1 + 2 * HL];
	b[0] = 1;
	memcpy(b + 1, l, HL);
	memcpy(b + 1 + HL, r, HL);
	SHA256(b, sizeof(b), out);
}

static int ref_k(int n)
{
	int k = 1;
	while (k * 2 < n)
		k *= 2;
	return k;
}

/* MTH(D[lo:hi]) */
static void ref_mth(int lo, int hi, unsigned char out[HL])
{
	if (hi - lo == 0) {
		SHA256((const unsigned char *)"", 0, out);
		return;
	}
	if (hi - lo == 1) {
		ref_leaf(lo, out);
		return;
	}
	int k = ref_k(hi - lo);
	unsigned char a[HL], b[HL];
	ref_mth(lo, lo + k, a);
	ref_mth(lo + k, hi, b);
	ref_node(a, b, out);
}

/* PATH(m, D[lo:hi]) appended to p */
static void ref_path(int m, int lo, int hi, unsigned char (*p)[HL], size_t *n)
{
	if (hi - lo <= 1)
		return;
	int k = ref_k(hi - lo);
	if (m < k) {
		ref_path(m, lo, lo + k, p, n);
		ref_mth(lo + k, hi, p[(*n)++]);
	} else {
		ref_path(m - k, lo + k, hi, p, n);
		ref_mth(lo, lo + k, p[(*n)++]);
	}
}

/* SUBPROOF(m, D[lo:hi], b) appended to p */
static void ref_sub(int m, int lo, int hi, bool b, unsigned char (*p)[HL], size_t *n)
{
	if (m == hi - lo) {
		if (!b)
			ref_mth(lo, hi, p[(*n)++]);
		return;
	}
	int k = ref_k(hi - lo);
	if (m <= k) {
		ref_sub(m, lo, lo + k, b, p, n);
		ref_mth(lo + k, hi, p[(*n)++]);
	} else {
		ref_sub(m - k, lo + k, hi, false, p, n);
		ref_mth(lo, lo + k, p[(*n)++]);
	}
}

static unsigned char leaves[N_MAX][HL];
static struct cg_merkle_tree *tree;

static void setup(void)
{
	for (int i = 0; i < N_MAX; i++) {
		char s[9];
		snprintf(s, sizeof(s), "leaf-%02d", i);
		memcpy(data[i], s, 8);
		cg_merkle_leaf_hash(data[i], 8, leaves[i]);
	}
	tree = cg_merkle_tree_new((const unsigned char(*)[HL])leaves, N_MAX);
	cr_assert_not_null(tree);
}

static void teardown(void)
{
	cg_merkle_tree_free(tree);
}

TestSuite(merkle, .init = setup, .fini = teardown);

Test(merkle, leaf_and_node_hashes_follow_rfc6962)
{
	for (int i = 0; i < N_MAX; i++) {
		unsigned char want[HL];
		ref_leaf(i, want);
		cr_assert(memcmp(want, leaves[i], HL) == 0, "leaf %d", i);
	}
	unsigned char a[HL], b[HL];
	ref_node(leaves[0], leaves[1], a);
	cg_merkle_node_hash(leaves[0], leaves[1], b);
	cr_assert(memcmp(a, b, HL) == 0);
	/* The empty tree's root is SHA-256 of nothing (RFC 9162 2.1.1). */
	struct cg_merkle_range r;
	cg_merkle_range_init(&r);
	cg_merkle_range_root(&r, a);
	ref_mth(0, 0, b);
	cr_assert(memcmp(a, b, HL) == 0);
}

Test(merkle, compact_range_and_tree_roots_match_the_reference_for_sizes_0_to_40)
{
	struct cg_merkle_range r;
	cg_merkle_range_init(&r);
	for (int n = 0; n <= N_MAX; n++) {
		unsigned char want[HL], got[HL], t[HL];
		ref_mth(0, n, want);
		cg_merkle_range_root(&r, got);
		cr_assert(memcmp(want, got, HL) == 0, "range root at size %d", n);
		cr_assert_eq(cg_merkle_tree_root(tree, (uint64_t)n, t), 0);
		cr_assert(memcmp(want, t, HL) == 0, "tree root at size %d", n);
		cr_assert_eq(r.size, (uint64_t)n);
		if (n < N_MAX)
			cr_assert_eq(cg_merkle_range_append(&r, leaves[n]), 0);
	}
	unsigned char x[HL];
	cr_assert_eq(cg_merkle_tree_root(tree, N_MAX + 1, x), -1, "a size past the tree");
}

Test(merkle, every_inclusion_proof_matches_the_reference_verifies_and_fails_when_flipped)
{
	unsigned char p[CG_MERKLE_MAX_PROOF][HL], q[CG_MERKLE_MAX_PROOF][HL], root[HL];
	for (int n = 1; n <= N_MAX; n++) {
		ref_mth(0, n, root);
		for (int m = 0; m < n; m++) {
			size_t np = 0, nq = 0;
			cr_assert_eq(
			    cg_merkle_inclusion_proof(tree, (uint64_t)m, (uint64_t)n, p, &np), 0);
			ref_path(m, 0, n, q, &nq);
			cr_assert_eq(np, nq, "size %d leaf %d", n, m);
			cr_assert(memcmp(p, q, np * HL) == 0, "size %d leaf %d", n, m);
			const unsigned char(*cp)[HL] = (const unsigned char(*)[HL])p;
			cr_assert(cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n, leaves[m],
							     cp, np, root),
				  "size %d leaf %d", n, m);
			/* Every single flipped bit of the proof, leaf or root fails. */
			for (size_t e = 0; e < np; e++) {
				p[e][e % HL] ^= 0x10;
				cr_assert(!cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n,
								      leaves[m], cp, np, root));
				p[e][e % HL] ^= 0x10;
			}
			unsigned char bad[HL];
			memcpy(bad, leaves[m], HL);
			bad[31] ^= 1;
			cr_assert(!cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n, bad, cp, np,
							      root));
			memcpy(bad, root, HL);
			bad[0] ^= 0x80;
			cr_assert(!cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n, leaves[m],
							      cp, np, bad));
			/* The proof does not prove another leaf, or the same leaf elsewhere. */
			if (n > 1) {
				int o = (m + 1) % n;
				cr_assert(!cg_merkle_inclusion_verify((uint64_t)o, (uint64_t)n,
								      leaves[m], cp, np, root));
				cr_assert(!cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n,
								      leaves[o], cp, np, root));
				cr_assert(!cg_merkle_inclusion_verify((uint64_t)m, (uint64_t)n,
								      leaves[m], cp, np - 1, root));
			}
		}
		size_t np;
		cr_assert_eq(cg_merkle_inclusion_proof(tree, (uint64_t)n, (uint64_t)n, p, &np), -1);
	}
}

Test(merkle, every_consistency_proof_matches_the_reference_verifies_and_fails_when_flipped)
{
	unsigned char p[CG_MERKLE_MAX_PROOF][HL], q[CG_MERKLE_MAX_PROOF][HL];
	unsigned char r1[HL], r2[HL], bad[HL];
	for (int n = 1; n <= N_MAX; n++) {
		ref_mth(0, n, r2);
		for (int m = 1; m <= n; m++) {
			ref_mth(0, m, r1);
			size_t np = 0, nq = 0;
			cr_assert_eq(
			    cg_merkle_consistency_proof(tree, (uint64_t)m, (uint64_t)n, p, &np), 0);
			if (m < n)
				ref_sub(m, 0, n, true, q, &nq);
			cr_assert_eq(np, nq, "%d -> %d", m, n);
			cr_assert(memcmp(p, q, np * HL) == 0, "%d -> %d", m, n);
			const unsigned char(*cp)[HL] = (const unsigned char(*)[HL])p;
			cr_assert(
			    cg_merkle_consistency_verify((uint64_t)m, (uint64_t)n, r1, r2, cp, np),
			    "%d -> %d", m, n);
			for (size_t e = 0; e < np; e++) {
				p[e][(e * 7) % HL] ^= 0x01;
				cr_assert(!cg_merkle_consistency_verify((uint64_t)m, (uint64_t)n,
									r1, r2, cp, np),
					  "%d -> %d flipped element %zu", m, n, e);
				p[e][(e * 7) % HL] ^= 0x01;
			}
			memcpy(bad, r1, HL);
			bad[5] ^= 4;
			cr_assert(!cg_merkle_consistency_verify((uint64_t)m, (uint64_t)n, bad, r2,
								cp, np));
			memcpy(bad, r2, HL);
			bad[9] ^= 4;
			cr_assert(!cg_merkle_consistency_verify((uint64_t)m, (uint64_t)n, r1, bad,
								cp, np));
			if (m < n) {
				/* The old root of another size is not extended by this proof. */
				unsigned char other[HL];
				ref_mth(0, m - 1 > 0 ? m - 1 : 0, other);
				if (m > 1)
					cr_assert(!cg_merkle_consistency_verify(
					    (uint64_t)m, (uint64_t)n, other, r2, cp, np));
				if (np > 0)
					cr_assert(!cg_merkle_consistency_verify(
					    (uint64_t)m, (uint64_t)n, r1, r2, cp, np - 1));
			}
		}
		size_t np;
		cr_assert_eq(
		    cg_merkle_consistency_proof(tree, (uint64_t)n + 1, (uint64_t)n, p, &np), -1);
		cr_assert(
		    !cg_merkle_consistency_verify((uint64_t)n + 1, (uint64_t)n, r2, r2, NULL, 0));
	}
}

/* ---- checkpoint notes -------------------------------------------------------- */

Test(note, sign_parse_verify_and_every_tamper_fails, .init = setup, .fini = teardown)
{
	EVP_PKEY *k = cg_key_generate(), *other = cg_key_generate();
	cr_assert(k && other);
	unsigned char root[HL];
	cr_assert_eq(cg_merkle_tree_root(tree, 17, root), 0);
	size_t len = 0;
	char *note = cg_note_checkpoint_sign("callgate/test/0123456789abcdef", 17, root, k, &len);
	cr_assert_not_null(note);
	cr_assert_eq(strlen(note), len);
	/* The C2SP shape: origin, size, base64 root, blank line, em-dash signature line. */
	cr_assert(strncmp(note, "callgate/test/0123456789abcdef\n17\n", 34) == 0, "%s", note);
	cr_assert_not_null(strstr(note, "\n\n\xe2\x80\x94 callgate/test/0123456789abcdef "));
	struct cg_note n;
	char why[200];
	cr_assert_eq(cg_note_parse(note, len, &n, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(n.size, 17);
	cr_assert(memcmp(n.root, root, HL) == 0);
	cr_assert_eq(n.n_sigs, 1);
	cr_assert_eq(n.sigs[0].sig_len, 64);
	unsigned char id[4];
	cr_assert_eq(cg_note_key_id(n.origin, k, id), 0);
	cr_assert(memcmp(id, n.sigs[0].key_id, 4) == 0);
	cr_assert(cg_note_verify(&n, note, NULL, k));
	cr_assert(!cg_note_verify(&n, note, NULL, other), "another key");
	cr_assert(!cg_note_verify(&n, note, "callgate/other", k), "another key name");
	/* A changed size or root: still parses, no longer verifies. */
	char *t = strdup(note);
	t[strlen("callgate/test/0123456789abcdef\n")] = '2';
	cr_assert_eq(cg_note_parse(t, len, &n, why, sizeof(why)), 0, "%s", why);
	cr_assert(!cg_note_verify(&n, t, NULL, k));
	memcpy(t, note, len);
	char *rl = strchr(strchr(t, '\n') + 1, '\n') + 1;
	rl[2] = rl[2] == 'A' ? 'B' : 'A';
	if (cg_note_parse(t, len, &n, why, sizeof(why)) == 0)
		cr_assert(!cg_note_verify(&n, t, NULL, k));
	/* A flipped signature byte. */
	memcpy(t, note, len);
	t[len - 5] = t[len - 5] == 'A' ? 'B' : 'A';
	if (cg_note_parse(t, len, &n, why, sizeof(why)) == 0)
		cr_assert(!cg_note_verify(&n, t, NULL, k));
	/* Malformed notes are refused by the parser. */
	const char *badv[] = {
		"",
		"o\n1\nAAAA\n\n",
		"o\n01\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\xe2\x80\x94 o AAAAAA==\n",
		"o p\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\xe2\x80\x94 o AAAAAA==\n",
		"o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n- o AAAAAA==\n",
		"o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\xe2\x80\x94 o AAAAAA==",
		"o\n1\n47DEQpj8HBSa\n\n\xe2\x80\x94 o AAAAAA==\n",
		"o\n99999999999999999999\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n"
		"\xe2\x80\x94 o AAAAAA==\n",
	};
	for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++)
		cr_assert_eq(cg_note_parse(badv[i], strlen(badv[i]), &n, why, sizeof(why)), -1,
			     "case %zu", i);
	/* Well-formed with an unknown signer: parses, does not verify. */
	const char *ok = "o\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n"
			 "\xe2\x80\x94 o AAAAAA==\n";
	cr_assert_eq(cg_note_parse(ok, strlen(ok), &n, why, sizeof(why)), 0, "%s", why);
	cr_assert(!cg_note_verify(&n, ok, NULL, k));
	free(t);
	free(note);
	EVP_PKEY_free(k);
	EVP_PKEY_free(other);
}

/* ---- the writer and replay -------------------------------------------------- */

static char state[256];

static void ev_setup(void)
{
	setup();
	snprintf(state, sizeof(state), "/tmp/cg-merkletest-XXXXXX");
	cr_assert_not_null(mkdtemp(state));
}

static void ev_teardown(void)
{
	teardown();
	pid_t pid = fork(); /* test scaffolding: rm -rf the temporary state */
	if (pid == 0) {
		execl("/bin/rm", "rm", "-rf", state, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
}

static int open_ev(struct cg_evidence **ev)
{
	struct cg_evidence_config c = { .state_dir = state, .write_traces = true };
	struct cg_reply *err = NULL;
	int rc = cg_evidence_open(&c, ev, &err);
	cg_reply_free(err);
	return rc;
}

/* A refused call: request, decision BLOCK, verdict, seal. */
static void blocked_call(struct cg_evidence *ev, const char *id)
{
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_REQUEST,
					json_pack("{s:[[s]]}", "pipeline", "/bin/rm"), false),
		     0);
	cr_assert_eq(cg_evidence_append(
			 ev, id, CG_EV_DECISION,
			 json_pack("{s:s, s:s}", "decision", "BLOCK", "rule_id", "r1"), false),
		     0);
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_VERDICT,
					json_pack("{s:s}", "code", "EN-EXEC-D-001"), false),
		     0);
	cr_assert_eq(cg_evidence_seal(ev, id,
				      json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "decision",
						"BLOCK", "rule_id", "r1", "reply", "type", "D",
						"code", "EN-EXEC-D-001", "message", "no")),
		     0);
}

static json_t *replay_all(int *rc)
{
	struct cg_replay_opts o = { .state_dir = state, .all = true };
	json_t *rep = NULL;
	*rc = cg_replay_run(&o, &rep);
	return rep;
}

static bool has_failure(const json_t *rep, const char *check)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(rep, "failures"), i, f)
	{
		if (strcmp(json_string_value(json_object_get(f, "check")), check) == 0)
			return true;
	}
	return false;
}

Test(journal, checkpoints_carry_the_journal_root_and_a_resigned_wrong_root_is_caught,
     .init = ev_setup, .fini = ev_teardown)
{
	struct cg_evidence *ev = NULL;
	cr_assert_eq(open_ev(&ev), 0);
	blocked_call(ev, "t1");
	blocked_call(ev, "t2");
	cg_evidence_close(ev);

	int rc;
	json_t *rep = replay_all(&rc);
	char *t = json_dumps(json_object_get(rep, "failures"), JSON_COMPACT);
	cr_assert_eq(rc, 0, "%s", t);
	free(t);
	json_decref(rep);

	/* The last checkpoint names the RFC 6962 root of every journal line. */
	char path[400], *buf = NULL;
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", state);
	cr_assert_eq(cg_file_read(path, 1 << 20, &buf, &len), 0);
	char *last = buf + len - 1;
	while (last > buf && last[-1] != '\n')
		last--;
	struct cg_ckpt c;
	char why[200];
	cr_assert_eq(cg_ckpt_parse(last, (size_t)(buf + len - last), &c, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert_eq(c.note_sig_len, 68);
	struct cg_journal_view jv;
	cr_assert_eq(cg_journal_load(state, &jv, NULL), 0);
	cr_assert_eq(jv.n, c.seq);
	struct cg_merkle_range r;
	cg_merkle_range_init(&r);
	for (size_t i = 0; i < jv.n; i++) {
		unsigned char leaf[HL];
		cg_merkle_leaf_hash(jv.v[i].line, jv.v[i].line_len, leaf);
		cr_assert_eq(cg_merkle_range_append(&r, leaf), 0);
	}
	cg_journal_view_free(&jv);
	unsigned char root[HL];
	cg_merkle_range_root(&r, root);
	char hex[65];
	for (int i = 0; i < HL; i++)
		snprintf(hex + 2 * i, 3, "%02x", root[i]);
	cr_assert_str_eq(c.root, hex);

	/*
	 * Re-sign the last checkpoint line over another root (as someone with
	 * the key but not the journal would): its line signature verifies, so
	 * only the Merkle check and the note signature can catch it.
	 */
	hex[0] = hex[0] == 'a' ? 'b' : 'a';
	char kp[400], msg[600];
	snprintf(kp, sizeof(kp), "%s/keys/evidence.key", state);
	EVP_PKEY *k = cg_key_load(kp, CG_KEY_PRIVATE, true, why, sizeof(why));
	cr_assert_not_null(k, "%s", why);
	int m = cg_ckpt_format_msg(msg, sizeof(msg), c.seq, c.head, hex, c.ts, c.key);
	unsigned char sig[64];
	cr_assert(m > 0 && cg_key_sign(k, msg, (size_t)m, sig) == 0);
	char *s64 = cg_base64_encode(sig, sizeof(sig));
	char *n64 = cg_base64_encode(c.note_sig, c.note_sig_len);
	char line[1200];
	int n =
	    snprintf(line, sizeof(line), "%s,\"sig\":\"%s\",\"note_sig\":\"%s\"}\n", msg, s64, n64);
	size_t keep = (size_t)(last - buf);
	cr_assert_eq(cg_file_write_atomic(path, buf, keep, 0644, false), 0);
	FILE *f = fopen(path, "a");
	cr_assert_not_null(f);
	fwrite(line, 1, (size_t)n, f);
	fclose(f);
	free(s64);
	free(n64);
	free(buf);
	EVP_PKEY_free(k);

	rep = replay_all(&rc);
	t = json_dumps(json_object_get(rep, "failures"), JSON_COMPACT);
	cr_assert_eq(rc, 1, "%s", t);
	cr_assert(has_failure(rep, "merkle_root_mismatch"), "%s", t);
	cr_assert(has_failure(rep, "note_signature"), "%s", t);
	cr_assert(!has_failure(rep, "checkpoint_signature"), "%s", t);
	free(t);
	json_decref(rep);
	/* And the daemon refuses to append to a journal its checkpoint disowns. */
	ev = NULL;
	cr_assert_eq(open_ev(&ev), -1);
	cg_evidence_close(ev);
}

Test(journal, the_writer_root_survives_a_restart, .init = ev_setup, .fini = ev_teardown)
{
	/* Recovery rebuilds the compact range: checkpoints after a restart still match. */
	struct cg_evidence *ev = NULL;
	for (int round = 0; round < 3; round++) {
		cr_assert_eq(open_ev(&ev), 0, "round %d", round);
		char id[16];
		snprintf(id, sizeof(id), "r%d", round);
		blocked_call(ev, id);
		cg_evidence_close(ev);
	}
	int rc;
	json_t *rep = replay_all(&rc);
	char *t = json_dumps(json_object_get(rep, "failures"), JSON_COMPACT);
	cr_assert_eq(rc, 0, "%s", t);
	cr_assert_geq(
	    json_integer_value(json_object_get(json_object_get(rep, "journal"), "checkpoints")), 3);
	free(t);
	json_decref(rep);
}

/* The C2SP signed-note specification's example: key name, vkey and signature. */
Test(note, key_id_and_signature_match_the_c2sp_signed_note_example)
{
	size_t vl = 0, sl = 0;
	unsigned char *vkey =
	    cg_base64_decode("AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k", 44, &vl);
	const char *sig64 =
	    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXm"
	    "RKuwHjG1Yu72IneyaQM=";
	unsigned char *blob = cg_base64_decode(sig64, strlen(sig64), &sl);
	cr_assert(vkey && vl == 33 && vkey[0] == 0x01, "a type-0x01 Ed25519 vkey");
	cr_assert(blob && sl == 68);
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, vkey + 1, 32);
	cr_assert_not_null(k);
	unsigned char id[4];
	cr_assert_eq(cg_note_key_id("example.com/foo", k, id), 0);
	static const unsigned char want[4] = { 0x53, 0x0d, 0x90, 0x3a };
	cr_assert(memcmp(id, want, 4) == 0, "key ID %02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
	cr_assert(memcmp(blob, want, 4) == 0);
	const char *text = "This is an example message.\n";
	cr_assert(cg_key_verify(k, text, strlen(text), blob + 4, 64));
	cr_assert(!cg_key_verify(k, text, strlen(text) - 1, blob + 4, 64));
	/* The cosignature key ID of the same key differs (type byte 0x04). */
	unsigned char cs[CG_COSIG_LEN];
	cr_assert_eq(cg_note_cosign(text, strlen(text), "example.com/foo", k, 1, cs), -1,
		     "a public key cannot cosign");
	free(vkey);
	free(blob);
	EVP_PKEY_free(k);
}

Test(note, cosignatures_verify_only_for_their_witness_and_timestamp, .init = setup,
     .fini = teardown)
{
	EVP_PKEY *log = cg_key_generate(), *w = cg_key_generate(), *other = cg_key_generate();
	cr_assert(log && w && other);
	unsigned char root[HL];
	cr_assert_eq(cg_merkle_tree_root(tree, 9, root), 0);
	size_t len = 0;
	char *note = cg_note_checkpoint_sign("log.example/a", 9, root, log, &len);
	cr_assert_not_null(note);
	struct cg_note n;
	char why[200];
	cr_assert_eq(cg_note_parse(note, len, &n, why, sizeof(why)), 0, "%s", why);
	unsigned char cs[CG_COSIG_LEN];
	cr_assert_eq(cg_note_cosign(note, n.text_len, "witness.example/w", w, 1700000000, cs), 0);
	cr_assert_eq(cg_note_cosign(note, n.text_len, "witness.example/w", w, 0, cs), -1,
		     "a zero timestamp is refused");
	cr_assert_eq(cg_note_cosign(note, n.text_len, "witness.example/w", w, 1700000000, cs), 0);
	char *b64 = cg_base64_encode(cs, sizeof(cs));
	char buf[2048];
	int bl = snprintf(buf, sizeof(buf), "%s\xe2\x80\x94 witness.example/w %s\n", note, b64);
	cr_assert_eq(cg_note_parse(buf, (size_t)bl, &n, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(n.n_sigs, 2);
	uint64_t ts = 0;
	cr_assert(cg_note_cosig_verify(&n, buf, "witness.example/w", w, &ts));
	cr_assert_eq(ts, 1700000000);
	cr_assert(cg_note_verify(&n, buf, NULL, log), "the log's signature still verifies");
	cr_assert(!cg_note_cosig_verify(&n, buf, "witness.example/w", other, NULL));
	cr_assert(!cg_note_cosig_verify(&n, buf, "witness.example/x", w, NULL));
	cr_assert(!cg_note_cosig_verify(&n, buf, "log.example/a", log, NULL),
		  "a note signature is not a cosignature");
	/* A changed timestamp (or any signature byte) breaks it. */
	cs[11] ^= 1;
	free(b64);
	b64 = cg_base64_encode(cs, sizeof(cs));
	bl = snprintf(buf, sizeof(buf), "%s\xe2\x80\x94 witness.example/w %s\n", note, b64);
	cr_assert_eq(cg_note_parse(buf, (size_t)bl, &n, why, sizeof(why)), 0, "%s", why);
	cr_assert(!cg_note_cosig_verify(&n, buf, "witness.example/w", w, NULL));
	free(b64);
	free(note);
	EVP_PKEY_free(log);
	EVP_PKEY_free(w);
	EVP_PKEY_free(other);
}
