/* SPDX-License-Identifier: MIT */
/*
 * sign — detached Ed25519 signatures for policy files, and raw-key helpers.
 *
 * All cryptography is OpenSSL EVP (EVP_PKEY_ED25519, EVP_DigestSign and
 * EVP_DigestVerify with a NULL digest, as Ed25519 hashes internally).
 * Keys are PEM files; signatures are one line of base64.
 *
 * MUST: fail closed (every failure to verify is an error with its own
 *       code); wipe private key text and seeds after use; O_CLOEXEC on every
 *       fd; cap every read.
 * MUST NOT: overwrite an existing private key; prompt for a passphrase (a
 *       daemon has no terminal: encrypted keys are refused).
 */
#include "sign.h"

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
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "key.h"
#include "util.h"

/* A signature file is one base64 line; anything much longer is not one. */
#define SIG_FILE_MAX 4096

int cg_sign_read_file(const char *path, char **buf, size_t *len)
{
	return cg_file_read(path, CG_SIGN_FILE_MAX, buf, len);
}

/* Never prompt: a passphrase-protected key is simply not readable here. */
/* "path" + ".sig", malloc'd, or NULL on OOM. */
static char *default_sig_path(const char *path)
{
	size_t n = strlen(path) + sizeof(".sig");
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s.sig", path);
	return s;
}

/*
 * Write data to path atomically: a temporary file in the same directory,
 * fsync'd, then renamed over path, so a reader never sees half a key or
 * signature. exclusive: fail with EEXIST if path exists (link(2) semantics
 * instead of rename, which would replace it).
 */
static const char *ossl_detail(const char *fallback)
{
	/* The last OpenSSL error's reason, if any; the queue is cleared either way. */
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	ERR_clear_error();
	return r ? r : fallback;
}

void cg_sign_key_id(const unsigned char pub[CG_SIGN_KEY_LEN], char out[CG_SIGN_KEY_ID_LEN])
{
	char hex[65];
	cg_sha256_hex(pub, CG_SIGN_KEY_LEN, hex);
	memcpy(out, hex, CG_SIGN_KEY_ID_LEN - 1);
	out[CG_SIGN_KEY_ID_LEN - 1] = '\0';
}

static int pkey_key_id(EVP_PKEY *k, char *key_id)
{
	unsigned char pub[CG_SIGN_KEY_LEN];
	size_t n = sizeof(pub);
	if (EVP_PKEY_get_raw_public_key(k, pub, &n) != 1 || n != sizeof(pub)) {
		ERR_clear_error();
		return -1;
	}
	cg_sign_key_id(pub, key_id);
	return 0;
}

/* Load a PEM Ed25519 key (private or public). NULL with *err. */
static EVP_PKEY *load_key(const char *path, bool private_key, struct cg_reply **err)
{
	char why[512];
	EVP_PKEY *k = cg_key_load(path, private_key ? CG_KEY_PRIVATE : CG_KEY_PUBLIC, false, why,
				  sizeof(why));
	if (!k)
		*err = cg_reply_new(CG_R_POLICY_KEY_UNREADABLE, "{s:s,s:s}", "key", path, "detail",
				    why);
	return k;
}

int cg_sign_key_file_id(const char *key_path, bool private_key, char key_id[CG_SIGN_KEY_ID_LEN],
			struct cg_reply **err)
{
	EVP_PKEY *k = load_key(key_path, private_key, err);
	if (!k)
		return -1;
	int rc = pkey_key_id(k, key_id);
	EVP_PKEY_free(k);
	if (rc != 0)
		*err = cg_reply_new(CG_R_POLICY_KEY_UNREADABLE, "{s:s,s:s}", "key", key_path,
				    "detail", "its public half cannot be read");
	return rc;
}

int cg_sign_keygen(const char *priv_path, const char *pub_path, struct cg_reply **err)
{
	char why[512];
	EVP_PKEY *k = cg_key_generate();
	if (!k) {
		*err = cg_reply_new(CG_R_KEY_WRITE_FAILED, "{s:s,s:s}", "path", priv_path, "detail",
				    ossl_detail("key generation failed"));
		return -1;
	}
	int rc = -1;
	if (cg_key_write(priv_path, k, true, true, why, sizeof(why)) != 0) {
		*err = cg_reply_new(CG_R_KEY_WRITE_FAILED, "{s:s,s:s}", "path", priv_path, "detail",
				    cg_errno_name(errno));
		goto free_key;
	}
	if (cg_key_write(pub_path, k, false, false, why, sizeof(why)) != 0) {
		*err = cg_reply_new(CG_R_KEY_WRITE_FAILED, "{s:s,s:s}", "path", pub_path, "detail",
				    cg_errno_name(errno));
		/* Half a key pair is useless and the private half is a liability. */
		unlink(priv_path);
		goto free_key;
	}
	rc = 0;
free_key:
	EVP_PKEY_free(k);
	return rc;
}

int cg_sign_file(const char *path, const char *sig_path, const char *priv_path, char *key_id,
		 struct cg_reply **err)
{
	int rc = -1;
	char *buf = NULL, *own_sig = NULL, *b64 = NULL;
	size_t len = 0;
	EVP_PKEY *k = NULL;
	if (!sig_path) {
		sig_path = own_sig = default_sig_path(path);
		if (!own_sig) {
			*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "signing");
			return -1;
		}
	}
	k = load_key(priv_path, true, err);
	if (!k)
		goto free_sig_path;
	if (cg_sign_read_file(path, &buf, &len) != 0) {
		*err = cg_reply_new(CG_R_POLICY_FILE_UNREADABLE, "{s:s,s:s}", "path", path,
				    "detail", cg_errno_name(errno));
		goto free_key;
	}
	unsigned char sig[CG_SIGN_SIG_LEN];
	if (cg_key_sign(k, buf, len, sig) != 0) {
		*err = cg_reply_new(CG_R_POLICY_KEY_UNREADABLE, "{s:s,s:s}", "key", priv_path,
				    "detail", "signing with it failed");
		goto free_buf;
	}
	b64 = cg_base64_encode(sig, sizeof(sig));
	if (!b64) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "signing");
		goto free_buf;
	}
	size_t bl = strlen(b64);
	char line[2 * CG_SIGN_SIG_LEN + 2];
	memcpy(line, b64, bl);
	line[bl] = '\n';
	if (cg_file_write_atomic(sig_path, line, bl + 1, 0644, false) != 0) {
		*err = cg_reply_new(CG_R_KEY_WRITE_FAILED, "{s:s,s:s}", "path", sig_path, "detail",
				    cg_errno_name(errno));
		goto free_b64;
	}
	if (key_id && pkey_key_id(k, key_id) != 0)
		key_id[0] = '\0';
	rc = 0;
free_b64:
	free(b64);
free_buf:
	free(buf);
free_key:
	EVP_PKEY_free(k); /* OpenSSL clears Ed25519 private key bytes on free */
free_sig_path:
	free(own_sig);
	return rc;
}

/* Read and decode a signature file. 0, or -1 with *err (MISSING or INVALID). */
static int read_sig(const char *policy_name, const char *sig_path, const char *key_path,
		    unsigned char sig[CG_SIGN_SIG_LEN], struct cg_reply **err)
{
	char *text = NULL;
	size_t len = 0;
	if (cg_sign_read_file(sig_path, &text, &len) != 0) {
		*err = cg_reply_new(CG_R_POLICY_SIGNATURE_MISSING, "{s:s,s:s,s:s}", "policy",
				    policy_name, "signature", sig_path, "errno_name",
				    cg_errno_name(errno));
		return -1;
	}
	int rc = -1;
	/* One base64 line; trailing whitespace (an editor's newline) is tolerated. */
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
			   text[len - 1] == '\t'))
		len--;
	size_t n = 0;
	unsigned char *raw = len <= SIG_FILE_MAX ? cg_base64_decode(text, len, &n) : NULL;
	if (!raw || n != CG_SIGN_SIG_LEN) {
		*err = cg_reply_new(CG_R_POLICY_SIGNATURE_INVALID, "{s:s,s:s,s:s,s:s}", "signature",
				    sig_path, "policy", policy_name, "key", key_path, "detail",
				    "the file is not a base64 Ed25519 signature");
		goto free_raw;
	}
	memcpy(sig, raw, CG_SIGN_SIG_LEN);
	rc = 0;
free_raw:
	free(raw);
	free(text);
	return rc;
}

int cg_sign_verify_buffer(const char *policy_name, const void *buf, size_t len,
			  const char *sig_path, const char *pubkey_path, struct cg_reply **err)
{
	int rc = -1;
	char *own_sig = NULL;
	if (!sig_path) {
		sig_path = own_sig = default_sig_path(policy_name);
		if (!own_sig) {
			*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "verifying");
			return -1;
		}
	}
	/* The key first: an operator's misconfiguration is reported as such. */
	EVP_PKEY *k = load_key(pubkey_path, false, err);
	if (!k)
		goto free_sig_path;
	unsigned char sig[CG_SIGN_SIG_LEN];
	if (read_sig(policy_name, sig_path, pubkey_path, sig, err) != 0)
		goto free_key;
	if (!cg_key_verify(k, buf, len, sig, CG_SIGN_SIG_LEN)) {
		*err = cg_reply_new(
		    CG_R_POLICY_SIGNATURE_INVALID, "{s:s,s:s,s:s,s:s}", "signature", sig_path,
		    "policy", policy_name, "key", pubkey_path, "detail",
		    "it does not match (the policy changed, or another key signed it)");
		goto free_key;
	}
	rc = 0;
free_key:
	EVP_PKEY_free(k);
free_sig_path:
	free(own_sig);
	return rc;
}

int cg_sign_verify_policy(const char *policy_path, const char *sig_path, const char *pubkey_path,
			  struct cg_reply **err)
{
	char *buf = NULL;
	size_t len = 0;
	if (cg_sign_read_file(policy_path, &buf, &len) != 0) {
		*err = cg_reply_new(CG_R_POLICY_FILE_UNREADABLE, "{s:s,s:s}", "path", policy_path,
				    "detail", cg_errno_name(errno));
		return -1;
	}
	int rc = cg_sign_verify_buffer(policy_path, buf, len, sig_path, pubkey_path, err);
	free(buf);
	return rc;
}

int cg_sign_ed25519_generate(unsigned char seed[CG_SIGN_KEY_LEN],
			     unsigned char pub[CG_SIGN_KEY_LEN])
{
	int rc = -1;
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!k) {
		ERR_clear_error();
		return -1;
	}
	size_t sn = CG_SIGN_KEY_LEN, pn = CG_SIGN_KEY_LEN;
	if (EVP_PKEY_get_raw_private_key(k, seed, &sn) == 1 && sn == CG_SIGN_KEY_LEN &&
	    EVP_PKEY_get_raw_public_key(k, pub, &pn) == 1 && pn == CG_SIGN_KEY_LEN)
		rc = 0;
	else {
		OPENSSL_cleanse(seed, CG_SIGN_KEY_LEN);
		ERR_clear_error();
	}
	EVP_PKEY_free(k);
	return rc;
}

int cg_sign_ed25519(const unsigned char seed[CG_SIGN_KEY_LEN], const void *msg, size_t len,
		    unsigned char sig[CG_SIGN_SIG_LEN])
{
	EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, CG_SIGN_KEY_LEN);
	if (!k) {
		ERR_clear_error();
		return -1;
	}
	int rc = cg_key_sign(k, msg, len, sig);
	EVP_PKEY_free(k);
	return rc;
}

bool cg_sign_ed25519_verify(const unsigned char pub[CG_SIGN_KEY_LEN], const void *msg, size_t len,
			    const unsigned char sig[CG_SIGN_SIG_LEN])
{
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, CG_SIGN_KEY_LEN);
	if (!k) {
		ERR_clear_error();
		return false;
	}
	bool ok = cg_key_verify(k, msg, len, sig, CG_SIGN_SIG_LEN);
	EVP_PKEY_free(k);
	return ok;
}
