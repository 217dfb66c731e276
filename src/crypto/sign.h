/* SPDX-License-Identifier: MIT */
/*
 * sign — detached Ed25519 signatures over policy files (and any bytes),
 * through OpenSSL's EVP interface; no cryptography is written here.
 *
 * Files:
 *  - private key: PKCS#8 PEM, created with mode 0600 and never overwritten;
 *  - public key:  SubjectPublicKeyInfo PEM;
 *  - signature:   the base64 text of the 64-byte Ed25519 signature over the
 *                 exact file bytes, one line, conventionally POLICY.sig.
 *
 * Invariants:
 *  - Verification MUST fail closed: a missing, unreadable, malformed or
 *    non-matching signature, or a key that is not Ed25519, is an error reply
 *    with its own code, never a pass.
 *  - Private key bytes (PEM text and raw seeds) MUST be wiped from memory
 *    after use (OPENSSL_cleanse); only OpenSSL's EVP_PKEY holds them while a
 *    signature is made.
 *  - Every fd is opened O_CLOEXEC; files are read with a hard size cap.
 */
#ifndef CG_SIGN_H
#define CG_SIGN_H

#include <stdbool.h>
#include <stddef.h>

#include "reply.h"

#define CG_SIGN_SIG_LEN	   64		      /* Ed25519 signature bytes */
#define CG_SIGN_KEY_LEN	   32		      /* Ed25519 raw public key / seed bytes */
#define CG_SIGN_FILE_MAX   (64 * 1024 * 1024) /* largest file signed or verified */
#define CG_SIGN_KEY_ID_LEN 17		      /* 16 hex chars + NUL */

/*
 * Generate a key pair: the private key to priv_path (created O_EXCL, mode
 * 0600; an existing file is an error, never overwritten) and the public key
 * to pub_path (mode 0644, replaced if present). 0, or -1 with *err
 * (MCP-CFG-E KEY_WRITE_FAILED; caller frees). On failure nothing is left
 * behind.
 */
int cg_sign_keygen(const char *priv_path, const char *pub_path, struct cg_reply **err)
    __attribute__((warn_unused_result));

/*
 * Sign the file at path with the private key at priv_path and write the
 * detached signature to sig_path (NULL: path + ".sig"), replacing it
 * atomically. key_id (>= CG_SIGN_KEY_ID_LEN bytes, may be NULL) receives the
 * signing key's id. 0, or -1 with *err (caller frees).
 */
int cg_sign_file(const char *path, const char *sig_path, const char *priv_path, char *key_id,
		 struct cg_reply **err) __attribute__((warn_unused_result));

/*
 * Verify the detached signature sig_path (NULL: policy_path + ".sig") over
 * the bytes of policy_path with the public key at pubkey_path.
 * Returns 0 when it verifies; otherwise -1 and *err, one of
 * POLICY_SIGNATURE_MISSING (no signature file), POLICY_SIGNATURE_INVALID
 * (malformed or not matching), POLICY_KEY_UNREADABLE (key missing, bad PEM
 * or not Ed25519) or POLICY_FILE_UNREADABLE (the policy itself). Caller frees.
 *
 * Note the daemon should load the policy from the same bytes it verified
 * (cg_sign_verify_buffer), or verify before loading and treat a later change
 * as a reload; see docs/policy-testing.md.
 */
int cg_sign_verify_policy(const char *policy_path, const char *sig_path, const char *pubkey_path,
			  struct cg_reply **err) __attribute__((warn_unused_result));

/*
 * Verify a signature file against bytes already in memory (so that what is
 * verified is exactly what gets loaded, with no window to swap the file).
 * policy_name only labels replies. Same results as cg_sign_verify_policy.
 */
int cg_sign_verify_buffer(const char *policy_name, const void *buf, size_t len,
			  const char *sig_path, const char *pubkey_path, struct cg_reply **err)
    __attribute__((warn_unused_result));

/*
 * Read a whole regular file (at most CG_SIGN_FILE_MAX bytes) into a malloc'd
 * buffer with a NUL appended (not counted in *len). 0, or -1 with errno
 * (EFBIG when too large). Caller frees.
 */
int cg_sign_read_file(const char *path, char **buf, size_t *len)
    __attribute__((warn_unused_result));

/* The key id of a PEM key file (public or private). 0, or -1 with *err. */
int cg_sign_key_file_id(const char *key_path, bool private_key, char key_id[CG_SIGN_KEY_ID_LEN],
			struct cg_reply **err) __attribute__((warn_unused_result));

/* ---- raw-key helpers (usable for evidence checkpoints) ----------------- */

/* A fresh Ed25519 key: the 32-byte seed and its public key. 0 or -1. */
int cg_sign_ed25519_generate(unsigned char seed[CG_SIGN_KEY_LEN],
			     unsigned char pub[CG_SIGN_KEY_LEN])
    __attribute__((warn_unused_result));

/* Sign msg with a raw 32-byte seed into sig. 0 or -1. The caller wipes seed. */
int cg_sign_ed25519(const unsigned char seed[CG_SIGN_KEY_LEN], const void *msg, size_t len,
		    unsigned char sig[CG_SIGN_SIG_LEN]) __attribute__((warn_unused_result));

/* true only when sig is a valid Ed25519 signature of msg under pub. */
bool cg_sign_ed25519_verify(const unsigned char pub[CG_SIGN_KEY_LEN], const void *msg, size_t len,
			    const unsigned char sig[CG_SIGN_SIG_LEN])
    __attribute__((warn_unused_result));

/* The key id: the first 16 hex chars of SHA-256 over the raw public key. */
void cg_sign_key_id(const unsigned char pub[CG_SIGN_KEY_LEN], char out[CG_SIGN_KEY_ID_LEN]);

#endif
