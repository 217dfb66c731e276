/* SPDX-License-Identifier: MIT */
/*
 * note — checkpoints as C2SP signed notes (c2sp.org/signed-note) carrying a
 * C2SP tlog-checkpoint body (c2sp.org/tlog-checkpoint), so transparency-log
 * tools and witnesses can read callgate's signed tree heads:
 *
 *   <origin>\n
 *   <tree size, decimal>\n
 *   <root hash, base64>\n
 *   \n
 *   — <key name> <base64(key ID || Ed25519 signature)>\n
 *
 * The signature covers the text: every byte before the blank line,
 * including the body's last '\n'. The key ID is the first 4 bytes of
 * SHA-256(key name || 0x0A || 0x01 || 32-byte Ed25519 public key). The
 * em dash is U+2014 (bytes E2 80 94). See docs/evidence.md, "Checkpoint
 * notes".
 *
 * Invariants:
 *  - The parser MUST NOT trust a note: sizes, line shapes, base64 and the
 *    number of signatures are bounded and checked before anything is used.
 *  - A signature counts only when its key name AND key ID match the key it
 *    is checked against and the Ed25519 signature verifies over the exact
 *    text bytes; an unknown signer is skipped, never trusted.
 */
#ifndef CG_NOTE_H
#define CG_NOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#include "merkle.h"

#define CG_NOTE_MAX	 8192 /* bytes of a whole note, signatures included */
#define CG_NOTE_MAX_SIGS 16   /* signature lines kept; a note with more is refused */
#define CG_NOTE_NAME_MAX 255

/* One signature line. */
struct cg_note_sig {
	char name[CG_NOTE_NAME_MAX + 1]; /* the key name as written */
	unsigned char key_id[4];	 /* the first 4 bytes of the decoded signature */
	unsigned char sig[72]; /* the rest: Ed25519 (64 bytes), or a cosignature (8 + 64) */
	size_t sig_len;	       /* bytes after the key ID (0..72; longer is refused) */
};

/* A parsed checkpoint note. Plain data: nothing to free. */
struct cg_note {
	size_t text_len; /* the signed text: the note's first text_len bytes */
	char origin[CG_NOTE_NAME_MAX + 1];
	uint64_t size;				/* tree size */
	unsigned char root[CG_MERKLE_HASH_LEN]; /* root hash */
	size_t n_ext;				/* extension lines after the root (ignored) */
	struct cg_note_sig sigs[CG_NOTE_MAX_SIGS];
	size_t n_sigs;
};

/* True when name can be a key name: 1..255 bytes of printable ASCII, no space or '+'. */
bool cg_note_name_valid(const char *name);

/* The Ed25519 key ID of (name, k) into id. 0, or -1 when k has no raw public key. */
int cg_note_key_id(const char *name, EVP_PKEY *k, unsigned char id[4]);

/* ---- witness cosignatures (c2sp.org/tlog-cosignature, cosignature/v1) ---- */

#define CG_COSIG_LEN (4 + 8 + 64) /* key ID || big-endian u64 timestamp || Ed25519 signature */

/*
 * Cosign the checkpoint text[0..len) as the witness key named name, at
 * timestamp ts (POSIX seconds, > 0): the signature is over
 * "cosignature/v1\ntime <ts>\n" || text, and the key ID is that of
 * SHA-256(name || 0x0A || 0x04 || public key). 0, or -1.
 */
int cg_note_cosign(const char *text, size_t len, const char *name, EVP_PKEY *k, uint64_t ts,
		   unsigned char out[CG_COSIG_LEN]);

/*
 * True when the note (text p, parsed as n) carries a cosignature by the
 * witness key named name that verifies; its timestamp goes to *ts (may be NULL).
 */
bool cg_note_cosig_verify(const struct cg_note *n, const char *p, const char *name, EVP_PKEY *k,
			  uint64_t *ts) __attribute__((warn_unused_result));

#define CG_NOTE_IDSIG_LEN (4 + 64) /* key ID || Ed25519 signature */

/*
 * The checkpoint body "origin\nsize\nbase64(root)\n" into buf (cap bytes).
 * Returns its length, or -1 when origin is not a key name or buf too small.
 */
int cg_note_checkpoint_text(char *buf, size_t cap, const char *origin, uint64_t size,
			    const unsigned char root[CG_MERKLE_HASH_LEN]);

/* Sign text[0..len) as the key named name: idsig = key ID || signature. 0 or -1. */
int cg_note_sign(const char *text, size_t len, const char *name, EVP_PKEY *k,
		 unsigned char idsig[CG_NOTE_IDSIG_LEN]);

/*
 * The note: text[0..len) (ending in '\n'), a blank line and the signature
 * line "— name base64(idsig)". Returns it malloc'd and NUL-terminated (the
 * caller frees), its length in *out_len; NULL on ENOMEM.
 */
char *cg_note_assemble(const char *text, size_t len, const char *name, const unsigned char *idsig,
		       size_t idsig_len, size_t *out_len);

/*
 * The checkpoint note for (origin, size, root), signed by k under the key
 * name origin. Returns the note (malloc'd, NUL-terminated, the caller frees)
 * and its length in *len, or NULL on a bad origin or a signing failure.
 */
char *cg_note_checkpoint_sign(const char *origin, uint64_t size,
			      const unsigned char root[CG_MERKLE_HASH_LEN], EVP_PKEY *k,
			      size_t *len);

/*
 * The log's origin (also its note key name), from state_dir/keys/evidence.origin.
 * When the file is absent and may_create is set, it is created once as
 * "callgate/<host name>/<first 16 hex of key_fp>" and kept from then on (a
 * later host rename does not change the log's name). 0 with out filled, or
 * -1 with errno (EINVAL: the file does not hold a valid key name).
 */
int cg_note_origin_load_or_create(const char *state_dir, const char *key_fp, bool may_create,
				  char *out, size_t cap);

/*
 * Parse p[0..len) as a signed note with a checkpoint body. 0, or -1 with a
 * sentence in why. Signatures are parsed, not verified.
 */
int cg_note_parse(const char *p, size_t len, struct cg_note *out, char *why, size_t why_len)
    __attribute__((warn_unused_result));

/*
 * True when the note (text p, parsed as n) carries a signature by the key
 * named name (NULL: the note's origin) whose key ID is that of (name, k) and
 * whose Ed25519 signature over the text verifies with k.
 */
bool cg_note_verify(const struct cg_note *n, const char *p, const char *name, EVP_PKEY *k)
    __attribute__((warn_unused_result));

#endif
