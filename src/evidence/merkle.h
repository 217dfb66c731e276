/* SPDX-License-Identifier: MIT */
/*
 * merkle — the Merkle tree over the journal (RFC 9162 section 2.1, the same
 * hashing as RFC 6962): leaf and node hashes, a compact range the writer
 * keeps (O(log n) state, the root at any size), and, for the proof tools, a
 * tree over a list of leaf hashes that answers roots, inclusion proofs and
 * consistency proofs, with the RFC's verification algorithms beside them.
 *
 * The leaves are the journal's event lines in seq order (leaf index =
 * seq - 1), each hashed over its exact bytes including the '\n':
 *   leaf = SHA-256(0x00 || line),  node = SHA-256(0x01 || left || right),
 *   the root of the empty tree = SHA-256("").
 * See docs/evidence.md, "The Merkle tree".
 *
 * Invariants:
 *  - Hashes MUST be computed over the bytes as given, never re-serialised.
 *  - Proof generation MUST refuse (return -1) an index or size outside the
 *    tree rather than return a proof of something else.
 *  - The verifiers MUST NOT accept a proof of the wrong length, and MUST
 *    NOT read past the proof they are given.
 */
#ifndef CG_MERKLE_H
#define CG_MERKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_MERKLE_HASH_LEN  32
#define CG_MERKLE_MAX_PROOF 64 /* no proof of a tree of < 2^63 leaves is longer */

/* leaf = SHA-256(0x00 || data[0..len)) into out. */
void cg_merkle_leaf_hash(const void *data, size_t len, unsigned char out[CG_MERKLE_HASH_LEN]);

/* node = SHA-256(0x01 || left || right) into out (out may alias either input). */
void cg_merkle_node_hash(const unsigned char left[CG_MERKLE_HASH_LEN],
			 const unsigned char right[CG_MERKLE_HASH_LEN],
			 unsigned char out[CG_MERKLE_HASH_LEN]);

/*
 * A compact range over leaves [0, size): the roots of the perfect subtrees
 * that make up the tree, one per set bit of size, largest (leftmost) first.
 * Plain data: no allocation, copy freely, nothing to free.
 */
struct cg_merkle_range {
	uint64_t size;				 /* leaves appended */
	unsigned n;				 /* subtree roots held */
	unsigned char h[64][CG_MERKLE_HASH_LEN]; /* the roots, left to right */
};

/* An empty range (size 0). */
void cg_merkle_range_init(struct cg_merkle_range *r);

/* Append one leaf hash. 0, or -1 when the range is full (2^64 - 1 leaves). */
int cg_merkle_range_append(struct cg_merkle_range *r, const unsigned char leaf[CG_MERKLE_HASH_LEN]);

/* The root of the tree of r->size leaves (the empty root when size is 0). */
void cg_merkle_range_root(const struct cg_merkle_range *r, unsigned char out[CG_MERKLE_HASH_LEN]);

/*
 * A whole tree over n leaf hashes, every level kept (about 2n hashes), so
 * that any root, inclusion or consistency proof of a prefix costs O(log n).
 * Free with cg_merkle_tree_free.
 */
struct cg_merkle_tree;

/*
 * Build a tree over leaves[0..n) (copied; the caller keeps leaves). NULL on
 * ENOMEM.
 */
struct cg_merkle_tree *cg_merkle_tree_new(const unsigned char (*leaves)[CG_MERKLE_HASH_LEN],
					  uint64_t n);
/* Free the tree and every level it holds. Safe on NULL. */
void cg_merkle_tree_free(struct cg_merkle_tree *t);
/* The number of leaves the tree was built over (0 for NULL). */
uint64_t cg_merkle_tree_size(const struct cg_merkle_tree *t);

/* The root of the first size leaves. 0, or -1 when size exceeds the tree. */
int cg_merkle_tree_root(const struct cg_merkle_tree *t, uint64_t size,
			unsigned char out[CG_MERKLE_HASH_LEN]) __attribute__((warn_unused_result));

/*
 * The inclusion proof of leaf index in the tree of its first size leaves
 * (RFC 9162 2.1.3.1) into proof (room for CG_MERKLE_MAX_PROOF hashes), its
 * length in *n. 0, or -1 when index >= size or size exceeds the tree.
 */
int cg_merkle_inclusion_proof(const struct cg_merkle_tree *t, uint64_t index, uint64_t size,
			      unsigned char (*proof)[CG_MERKLE_HASH_LEN], size_t *n)
    __attribute__((warn_unused_result));

/*
 * The consistency proof between the trees of the first old_size and
 * new_size leaves (RFC 9162 2.1.4.1), as above. 0, or -1 when
 * old_size > new_size or new_size exceeds the tree. Empty when the sizes are
 * equal or old_size is 0.
 */
int cg_merkle_consistency_proof(const struct cg_merkle_tree *t, uint64_t old_size,
				uint64_t new_size, unsigned char (*proof)[CG_MERKLE_HASH_LEN],
				size_t *n) __attribute__((warn_unused_result));

/* True when proof[0..n) shows leaf at index in the tree of size leaves with root (2.1.3.2). */
bool cg_merkle_inclusion_verify(uint64_t index, uint64_t size,
				const unsigned char leaf[CG_MERKLE_HASH_LEN],
				const unsigned char (*proof)[CG_MERKLE_HASH_LEN], size_t n,
				const unsigned char root[CG_MERKLE_HASH_LEN])
    __attribute__((warn_unused_result));

/*
 * True when proof[0..n) shows the tree (new_size, new_root) extends
 * (old_size, old_root) (2.1.4.2). Equal sizes need an empty proof and equal
 * roots; old_size 0 is accepted with an empty proof (everything extends the
 * empty tree).
 */
bool cg_merkle_consistency_verify(uint64_t old_size, uint64_t new_size,
				  const unsigned char old_root[CG_MERKLE_HASH_LEN],
				  const unsigned char new_root[CG_MERKLE_HASH_LEN],
				  const unsigned char (*proof)[CG_MERKLE_HASH_LEN], size_t n)
    __attribute__((warn_unused_result));

#endif
