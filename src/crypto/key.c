/* SPDX-License-Identifier: MIT */
/*
 * key — Ed25519 key files (see key.h for the invariants).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/buffer.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#include "key.h"
#include "reply.h"
#include "util.h"

/* The file may hold a passphrase-protected key: never prompt for one. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return 0;
}

static EVP_PKEY *parse_pem(const char *pem, size_t len, enum cg_key_kind kind)
{
	bool private_key = kind == CG_KEY_PRIVATE;
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	if (!bio)
		return NULL;
	EVP_PKEY *k = private_key ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL)
				  : PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
	if (!k && kind == CG_KEY_PUBLIC_OR_PRIVATE) {
		/* A public key may be read from its private key file. */
		(void)BIO_reset(bio);
		k = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
	}
	BIO_free(bio);
	ERR_clear_error();
	return k;
}

EVP_PKEY *cg_key_load(const char *path, enum cg_key_kind kind, bool owner_only, char *why,
		      size_t why_len)
{
	struct stat st;
	if (owner_only && stat(path, &st) != 0) {
		snprintf(why, why_len, "%s", cg_errno_name(errno));
		return NULL;
	}
	if (owner_only && (st.st_mode & 077) != 0) {
		snprintf(why, why_len, "readable by others (mode %o)",
			 (unsigned)(st.st_mode & 0777));
		return NULL;
	}
	/* A key of another user's making is theirs: they can sign with it too. */
	if (owner_only && st.st_uid != geteuid()) {
		snprintf(why, why_len, "owned by uid %u, not by this process's uid %u",
			 (unsigned)st.st_uid, (unsigned)geteuid());
		return NULL;
	}
	char *pem = NULL;
	size_t len = 0;
	if (cg_file_read(path, 64 * 1024, &pem, &len) != 0) {
		snprintf(why, why_len, "%s", cg_errno_name(errno));
		return NULL;
	}
	EVP_PKEY *k = parse_pem(pem, len, kind);
	OPENSSL_cleanse(pem, len);
	free(pem);
	if (!k) {
		snprintf(why, why_len, "%s",
			 kind == CG_KEY_PRIVATE ? "not an unencrypted PEM private key"
						: "not a PEM public key");
		return NULL;
	}
	if (EVP_PKEY_get_base_id(k) != EVP_PKEY_ED25519) {
		EVP_PKEY_free(k);
		snprintf(why, why_len, "not an Ed25519 key");
		return NULL;
	}
	return k;
}

EVP_PKEY *cg_key_generate(void)
{
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	ERR_clear_error();
	return k;
}

int cg_key_write(const char *path, EVP_PKEY *k, bool private_key, bool exclusive, char *why,
		 size_t why_len)
{
	int rc = -1;
	/* Secure-heap memory BIO for the private half: freed with a clear. */
	BIO *bio = BIO_new(private_key ? BIO_s_secmem() : BIO_s_mem());
	if (!bio) {
		snprintf(why, why_len, "out of memory writing %.300s", path);
		errno = ENOMEM;
		return -1;
	}
	int ok = private_key ? PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL, NULL)
			     : PEM_write_bio_PUBKEY(bio, k);
	BUF_MEM *m = NULL;
	BIO_get_mem_ptr(bio, &m);
	if (ok != 1 || !m) {
		ERR_clear_error();
		snprintf(why, why_len, "cannot encode the key for %.300s", path);
		errno = EINVAL;
		goto free_bio;
	}
	if (cg_file_write_atomic(path, m->data, m->length, private_key ? 0600 : 0644, exclusive) !=
	    0) {
		snprintf(why, why_len, "cannot write %.300s: %s", path, strerror(errno));
		goto wipe;
	}
	rc = 0;
wipe:
	OPENSSL_cleanse(m->data, m->length);
free_bio:
	BIO_free(bio);
	return rc;
}

int cg_key_fingerprint(EVP_PKEY *k, char hex[65])
{
	unsigned char raw[32];
	size_t n = sizeof(raw);
	if (EVP_PKEY_get_raw_public_key(k, raw, &n) != 1 || n != sizeof(raw)) {
		ERR_clear_error();
		return -1;
	}
	cg_sha256_hex(raw, n, hex);
	return 0;
}

int cg_key_sign(EVP_PKEY *k, const void *msg, size_t len, unsigned char sig[CG_KEY_SIG_LEN])
{
	int rc = -1;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t siglen = CG_KEY_SIG_LEN;
	/* Ed25519 is "pure": no separate digest, so md is NULL and one-shot only. */
	if (ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k) == 1 &&
	    EVP_DigestSign(ctx, sig, &siglen, msg, len) == 1 && siglen == CG_KEY_SIG_LEN)
		rc = 0;
	ERR_clear_error();
	EVP_MD_CTX_free(ctx);
	return rc;
}

bool cg_key_verify(EVP_PKEY *k, const void *msg, size_t len, const unsigned char *sig,
		   size_t sig_len)
{
	bool ok = false;
	if (sig_len != CG_KEY_SIG_LEN)
		return false;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k) == 1 &&
	    EVP_DigestVerify(ctx, sig, sig_len, msg, len) == 1)
		ok = true;
	ERR_clear_error();
	EVP_MD_CTX_free(ctx);
	return ok;
}
