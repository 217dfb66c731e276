/* SPDX-License-Identifier: MIT */
/*
 * merkle — RFC 9162 section 2.1 Merkle tree hashing, proofs and their
 * verification, for the journal's events (see merkle.h and
 * docs/evidence.md, "The Merkle tree").
 *
 * Invariants:
 *  - Leaves are hashed with the 0x00 prefix and nodes with 0x01, so a leaf
 *    can never be passed off as a node (the second-preimage attack RFC 6962
 *    section 2.1 prevents).
 *  - Proof generation never returns a proof for a leaf or size outside the
 *    tree; verification never reads past the proof it is given.
 */
#include "merkle.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#define HL CG_MERKLE_HASH_LEN

/* One fetched SHA-256 and one context per thread (as base/util.c does): the
 * one-shot SHA256() fetches the algorithm, taking locks, on every call. */
static EVP_MD *md;
static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static pthread_key_t md_key; /* per-thread EVP_MD_CTX, freed at thread exit */

static void md_ctx_free(void *p)
{
	EVP_MD_CTX_free(p);
}

static void md_fetch(void)
{
	md = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (pthread_key_create(&md_key, md_ctx_free) != 0) {
		EVP_MD_free(md);
		md = NULL;
	}
}

/* SHA-256(prefix || a || b) into out. */
static void hash3(unsigned char prefix, const void *a, size_t an, const void *b, size_t bn,
		  unsigned char out[HL])
{
	unsigned char tmp[HL];
	unsigned int ml = 0;
	pthread_once(&md_once, md_fetch);
	EVP_MD_CTX *ctx = md ? pthread_getspecific(md_key) : NULL;
	if (md && !ctx && (ctx = EVP_MD_CTX_new()) && pthread_setspecific(md_key, ctx) != 0) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	if (!ctx || EVP_DigestInit_ex2(ctx, md, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, &prefix, 1) != 1 || EVP_DigestUpdate(ctx, a, an) != 1 ||
	    (bn && EVP_DigestUpdate(ctx, b, bn) != 1) || EVP_DigestFinal_ex(ctx, tmp, &ml) != 1)
		memset(tmp, 0, HL); /* never a real hash: every check against it fails */
	memcpy(out, tmp, HL);
}

void cg_merkle_leaf_hash(const void *data, size_t len, unsigned char out[HL])
{
	hash3(0x00, data, len, NULL, 0, out);
}

void cg_merkle_node_hash(const unsigned char left[HL], const unsigned char right[HL],
			 unsigned char out[HL])
{
	hash3(0x01, left, HL, right, HL, out);
}

static void empty_root(unsigned char out[HL])
{
	SHA256((const unsigned char *)"", 0, out);
}

/* ---- the compact range --------------------------------------------------- */

void cg_merkle_range_init(struct cg_merkle_range *r)
{
	memset(r, 0, sizeof(*r));
}

int cg_merkle_range_append(struct cg_merkle_range *r, const unsigned char leaf[HL])
{
	if (r->size == UINT64_MAX || r->n >= 64)
		return -1;
	memcpy(r->h[r->n++], leaf, HL);
	/* Each trailing 1-bit of the old size is a perfect subtree the new leaf completes. */
	for (uint64_t s = r->size; s & 1; s >>= 1) {
		cg_merkle_node_hash(r->h[r->n - 2], r->h[r->n - 1], r->h[r->n - 2]);
		r->n--;
	}
	r->size++;
	return 0;
}

void cg_merkle_range_root(const struct cg_merkle_range *r, unsigned char out[HL])
{
	if (r->n == 0) {
		empty_root(out);
		return;
	}
	unsigned char acc[HL];
	memcpy(acc, r->h[r->n - 1], HL);
	for (unsigned i = r->n - 1; i-- > 0;)
		cg_merkle_node_hash(r->h[i], acc, acc);
	memcpy(out, acc, HL);
}

/* ---- the whole tree ---------------------------------------------------------- */

struct cg_merkle_tree {
	uint64_t n;		     /* leaves */
	unsigned n_levels;	     /* levels kept, 0 = leaves */
	unsigned char (*lv[64])[HL]; /* lv[l][i]: the perfect subtree of 2^l leaves at i·2^l */
};

void cg_merkle_tree_free(struct cg_merkle_tree *t)
{
	if (!t)
		return;
	for (unsigned l = 0; l < t->n_levels; l++)
		free(t->lv[l]);
	free(t);
}

struct cg_merkle_tree *cg_merkle_tree_new(const unsigned char (*leaves)[HL], uint64_t n)
{
	struct cg_merkle_tree *t = calloc(1, sizeof(*t));
	if (!t || n > (SIZE_MAX / HL))
		goto fail;
	t->n = n;
	uint64_t w = n;
	for (unsigned l = 0; w > 0 && l < 64; l++, w >>= 1) {
		t->lv[l] = malloc((size_t)w * HL);
		if (!t->lv[l])
			goto fail;
		t->n_levels = l + 1;
		for (uint64_t i = 0; i < w; i++) {
			if (l == 0)
				memcpy(t->lv[0][i], leaves[i], HL);
			else
				cg_merkle_node_hash(t->lv[l - 1][2 * i], t->lv[l - 1][2 * i + 1],
						    t->lv[l][i]);
		}
	}
	return t;
fail:
	cg_merkle_tree_free(t);
	return NULL;
}

uint64_t cg_merkle_tree_size(const struct cg_merkle_tree *t)
{
	return t ? t->n : 0;
}

/* The largest power of two strictly below w (w >= 2). */
static uint64_t split(uint64_t w)
{
	uint64_t k = 1;
	while (k < w - k)
		k <<= 1;
	return k;
}

/* MTH of leaves [lo, hi) (hi <= t->n, hi > lo), from the kept levels. */
static void mth(const struct cg_merkle_tree *t, uint64_t lo, uint64_t hi, unsigned char out[HL])
{
	uint64_t w = hi - lo;
	if ((w & (w - 1)) == 0 && lo % w == 0) {
		unsigned l = (unsigned)__builtin_ctzll(w);
		memcpy(out, t->lv[l][lo >> l], HL);
		return;
	}
	uint64_t k = split(w);
	unsigned char a[HL], b[HL];
	mth(t, lo, lo + k, a);
	mth(t, lo + k, hi, b);
	cg_merkle_node_hash(a, b, out);
}

int cg_merkle_tree_root(const struct cg_merkle_tree *t, uint64_t size, unsigned char out[HL])
{
	if (!t || size > t->n)
		return -1;
	if (size == 0)
		empty_root(out);
	else
		mth(t, 0, size, out);
	return 0;
}

/* PATH(m, D[lo:hi]) of RFC 9162 2.1.3.1, appended bottom-up. */
static void path(const struct cg_merkle_tree *t, uint64_t m, uint64_t lo, uint64_t hi,
		 unsigned char (*proof)[HL], size_t *n)
{
	if (hi - lo <= 1)
		return;
	uint64_t k = split(hi - lo);
	if (m < lo + k) {
		path(t, m, lo, lo + k, proof, n);
		mth(t, lo + k, hi, proof[(*n)++]);
	} else {
		path(t, m, lo + k, hi, proof, n);
		mth(t, lo, lo + k, proof[(*n)++]);
	}
}

int cg_merkle_inclusion_proof(const struct cg_merkle_tree *t, uint64_t index, uint64_t size,
			      unsigned char (*proof)[HL], size_t *n)
{
	*n = 0;
	if (!t || size > t->n || index >= size)
		return -1;
	path(t, index, 0, size, proof, n);
	return 0;
}

/* SUBPROOF(m, D[lo:hi], b) of RFC 9162 2.1.4.1; m counts old leaves from lo. */
static void subproof(const struct cg_merkle_tree *t, uint64_t m, uint64_t lo, uint64_t hi,
		     bool whole, unsigned char (*proof)[HL], size_t *n)
{
	if (m == hi - lo) {
		if (!whole)
			mth(t, lo, hi, proof[(*n)++]);
		return;
	}
	uint64_t k = split(hi - lo);
	if (m <= k) {
		subproof(t, m, lo, lo + k, whole, proof, n);
		mth(t, lo + k, hi, proof[(*n)++]);
	} else {
		subproof(t, m - k, lo + k, hi, false, proof, n);
		mth(t, lo, lo + k, proof[(*n)++]);
	}
}

int cg_merkle_consistency_proof(const struct cg_merkle_tree *t, uint64_t old_size,
				uint64_t new_size, unsigned char (*proof)[HL], size_t *n)
{
	*n = 0;
	if (!t || new_size > t->n || old_size > new_size)
		return -1;
	if (old_size == 0 || old_size == new_size)
		return 0;
	subproof(t, old_size, 0, new_size, true, proof, n);
	return 0;
}

/* ---- verification (RFC 9162 2.1.3.2 and 2.1.4.2) ------------------------------ */

bool cg_merkle_inclusion_verify(uint64_t index, uint64_t size, const unsigned char leaf[HL],
				const unsigned char (*proof)[HL], size_t n,
				const unsigned char root[HL])
{
	if (index >= size || n > CG_MERKLE_MAX_PROOF)
		return false;
	uint64_t fn = index, sn = size - 1;
	unsigned char r[HL];
	memcpy(r, leaf, HL);
	for (size_t i = 0; i < n; i++) {
		if (sn == 0)
			return false;
		if ((fn & 1) || fn == sn) {
			cg_merkle_node_hash(proof[i], r, r);
			while (!(fn & 1) && fn != 0) {
				fn >>= 1;
				sn >>= 1;
			}
		} else {
			cg_merkle_node_hash(r, proof[i], r);
		}
		fn >>= 1;
		sn >>= 1;
	}
	return sn == 0 && memcmp(r, root, HL) == 0;
}

bool cg_merkle_consistency_verify(uint64_t old_size, uint64_t new_size,
				  const unsigned char old_root[HL],
				  const unsigned char new_root[HL],
				  const unsigned char (*proof)[HL], size_t n)
{
	if (old_size > new_size || n > CG_MERKLE_MAX_PROOF)
		return false;
	if (old_size == new_size)
		return n == 0 && memcmp(old_root, new_root, HL) == 0;
	if (old_size == 0)
		return n == 0;
	if (n == 0)
		return false;
	/* An old tree that is a perfect subtree is its own first proof element. */
	bool prepend = (old_size & (old_size - 1)) == 0;
	size_t i = 0;
	const unsigned char *first = prepend ? old_root : proof[i++];
	uint64_t fn = old_size - 1, sn = new_size - 1;
	while (fn & 1) {
		fn >>= 1;
		sn >>= 1;
	}
	unsigned char fr[HL], sr[HL];
	memcpy(fr, first, HL);
	memcpy(sr, first, HL);
	for (; i < n; i++) {
		if (sn == 0)
			return false;
		if ((fn & 1) || fn == sn) {
			cg_merkle_node_hash(proof[i], fr, fr);
			cg_merkle_node_hash(proof[i], sr, sr);
			while (!(fn & 1) && fn != 0) {
				fn >>= 1;
				sn >>= 1;
			}
		} else {
			cg_merkle_node_hash(sr, proof[i], sr);
		}
		fn >>= 1;
		sn >>= 1;
	}
	return sn == 0 && memcmp(fr, old_root, HL) == 0 && memcmp(sr, new_root, HL) == 0;
}
