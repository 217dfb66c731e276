/* SPDX-License-Identifier: MIT */
/*
 * key — Ed25519 key files and the operations on them, for every key callgate
 * holds: the policy signing keys (sign.c) and the evidence key (evidence/).
 *
 * Invariants:
 *  - A private key file MUST be created with its final mode (0600) and
 *    written atomically: never briefly readable by others, never half written.
 *  - Key files are read like every other file (base/file.c): no FIFO can
 *    block the reader, only regular files are parsed, and secret bytes are
 *    wiped from memory after parsing.
 *  - Only Ed25519 keys are accepted; anything else is refused, not converted.
 */
#ifndef CG_KEY_H
#define CG_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <openssl/evp.h>

#define CG_KEY_SIG_LEN 64 /* Ed25519 signature bytes */

/* What a key file must hold. */
enum cg_key_kind {
	CG_KEY_PRIVATE,		  /* an unencrypted private key */
	CG_KEY_PUBLIC,		  /* a public key, and nothing else */
	CG_KEY_PUBLIC_OR_PRIVATE, /* either; a private key's public half is used */
};

/*
 * Load a PEM Ed25519 key of the given kind. owner_only: refuse a file that
 * group or others may read (a key others can read proves nothing). Returns
 * the key (free with EVP_PKEY_free), or NULL with the reason in why, without
 * the path: an errno name ("ENOENT") when the file could not be read, else a
 * phrase ("not an Ed25519 key").
 */
EVP_PKEY *cg_key_load(const char *path, enum cg_key_kind kind, bool owner_only, char *why,
		      size_t why_len);

/* A new Ed25519 key (free with EVP_PKEY_free), or NULL. */
EVP_PKEY *cg_key_generate(void);

/*
 * Write k's private (mode 0600) or public (0644) half to path as PEM,
 * atomically (fsync, then rename; exclusive: fail with EEXIST rather than
 * replace an existing file). 0, or -1 with errno and a sentence in why.
 */
int cg_key_write(const char *path, EVP_PKEY *k, bool private_key, bool exclusive, char *why,
		 size_t why_len);

/* SHA-256 hex of the raw 32-byte public key into hex[65]. 0 or -1. */
int cg_key_fingerprint(EVP_PKEY *k, char hex[65]);

/* Sign msg (Ed25519 is one-shot: no digest first). 0 or -1. */
int cg_key_sign(EVP_PKEY *k, const void *msg, size_t len, unsigned char sig[CG_KEY_SIG_LEN]);

/* True when sig (sig_len bytes) is k's signature of msg. */
bool cg_key_verify(EVP_PKEY *k, const void *msg, size_t len, const unsigned char *sig,
		   size_t sig_len);

#endif
