/* SPDX-License-Identifier: MIT */
/*
 * test_sign — detached Ed25519 policy signatures: key generation, signing,
 * verification and every way verification must fail (each with its code).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "sign.h"
#include "util.h"

static char dir[] = "/tmp/cg-test-sign-XXXXXX";
static char priv[256], pub[256], policy[256], sig[256];

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
	snprintf(priv, sizeof(priv), "%s/policy.key", dir);
	snprintf(pub, sizeof(pub), "%s/policy.pub", dir);
	snprintf(policy, sizeof(policy), "%s/policy.yaml", dir);
	snprintf(sig, sizeof(sig), "%s/policy.yaml.sig", dir);
	FILE *f = fopen(policy, "w");
	cr_assert_not_null(f);
	fputs("version: 1\nrules: []\n", f);
	fclose(f);
}

static void teardown(void)
{
	const char *names[] = { "policy.key", "policy.pub",    "policy.yaml", "policy.yaml.sig",
				"other.key",  "other.pub",     "rsa.pem",     "other.sig",
				"fifo",	      "nokey.yaml.sig" };
	char p[512];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

TestSuite(sign, .init = setup, .fini = teardown);

static const char *code_of(const struct cg_reply *r)
{
	return r ? cg_reply_def_of(r)->code : "(none)";
}

static const char *param(const struct cg_reply *r, const char *k)
{
	return json_string_value(json_object_get(r->params, k));
}

static void keygen_ok(const char *k, const char *p)
{
	struct cg_reply *err = NULL;
	int rc = cg_sign_keygen(k, p, &err);
	cr_assert_eq(rc, 0, "keygen failed: %s", code_of(err));
	cr_assert_null(err);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

Test(sign, keygen_writes_private_key_0600_and_refuses_to_overwrite)
{
	keygen_ok(priv, pub);
	struct stat st;
	cr_assert_eq(stat(priv, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600, "private key mode %o", st.st_mode & 0777);
	cr_assert_eq(stat(pub, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0644);

	char *before = NULL;
	size_t blen = 0;
	cr_assert_eq(cg_sign_read_file(priv, &before, &blen), 0);
	cr_assert(strstr(before, "-----BEGIN PRIVATE KEY-----") != NULL);

	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_keygen(priv, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-105");
	cr_assert_str_eq(param(err, "detail"), "EEXIST");
	cr_assert_str_eq(param(err, "path"), priv);
	cg_reply_free(err);

	/* The existing key is untouched. */
	char *after = NULL;
	size_t alen = 0;
	cr_assert_eq(cg_sign_read_file(priv, &after, &alen), 0);
	cr_assert_eq(alen, blen);
	cr_assert_eq(memcmp(before, after, blen), 0);
	free(before);
	free(after);
}

Test(sign, sign_then_verify_with_default_signature_path)
{
	keygen_ok(priv, pub);
	struct cg_reply *err = NULL;
	char id[CG_SIGN_KEY_ID_LEN] = "";
	cr_assert_eq(cg_sign_file(policy, NULL, priv, id, &err), 0, "%s", code_of(err));
	cr_assert_eq(strlen(id), 16);
	cr_assert_eq(access(sig, R_OK), 0, "signature not at POLICY.sig");

	/* The file is one line of base64 holding 64 bytes. */
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(cg_sign_read_file(sig, &text, &len), 0);
	cr_assert_eq(len, 89); /* 88 base64 chars + newline */
	cr_assert_eq(text[88], '\n');
	free(text);

	cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), 0, "%s", code_of(err));
	cr_assert_eq(cg_sign_verify_policy(policy, sig, pub, &err), 0, "%s", code_of(err));

	char pid[CG_SIGN_KEY_ID_LEN], kid[CG_SIGN_KEY_ID_LEN];
	cr_assert_eq(cg_sign_key_file_id(pub, false, pid, &err), 0);
	cr_assert_eq(cg_sign_key_file_id(priv, true, kid, &err), 0);
	cr_assert_str_eq(pid, id);
	cr_assert_str_eq(kid, id);
}

Test(sign, flipped_policy_byte_is_invalid)
{
	keygen_ok(priv, pub);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_file(policy, NULL, priv, NULL, &err), 0);
	/* "version: 1" -> "version: 2": one byte, a different policy. */
	int fd = open(policy, O_WRONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "2", 1, 9), 1);
	close(fd);
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-102");
	cr_assert_str_eq(param(err, "signature"), sig);
	cr_assert_str_eq(param(err, "policy"), policy);
	cg_reply_free(err);
}

Test(sign, verify_buffer_checks_the_bytes_given)
{
	keygen_ok(priv, pub);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_file(policy, NULL, priv, NULL, &err), 0);
	const char good[] = "version: 1\nrules: []\n";
	const char bad[] = "version: 1\nrules: [] \n";
	cr_assert_eq(cg_sign_verify_buffer(policy, good, strlen(good), NULL, pub, &err), 0);
	cr_assert_eq(cg_sign_verify_buffer(policy, bad, strlen(bad), NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-102");
	cg_reply_free(err);
}

Test(sign, missing_signature_is_its_own_code)
{
	keygen_ok(priv, pub);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-101");
	cr_assert_str_eq(param(err, "errno_name"), "ENOENT");
	cr_assert_str_eq(param(err, "signature"), sig);
	cg_reply_free(err);
}

Test(sign, malformed_signature_is_invalid)
{
	keygen_ok(priv, pub);
	/* Valid base64 of 65 bytes: one byte too many for an Ed25519 signature. */
	unsigned char many[65] = { 0 };
	char *long_b64 = cg_base64_encode(many, sizeof(many));
	cr_assert_not_null(long_b64);
	const char *bad[] = { "", "not base64 at all\n", "AAAA\n" /* decodes, but 3 bytes */,
			      long_b64 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_text(sig, bad[i]);
		struct cg_reply *err = NULL;
		cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), -1, "case %zu", i);
		cr_assert_str_eq(code_of(err), "MCP-CFG-E-102", "case %zu", i);
		cg_reply_free(err);
	}
	free(long_b64);
	/* 64 zero bytes: the right shape, the wrong signature. */
	unsigned char zero[64] = { 0 };
	char *b64 = cg_base64_encode(zero, sizeof(zero));
	write_text(sig, b64);
	free(b64);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-102");
	cg_reply_free(err);
}

Test(sign, another_key_does_not_verify)
{
	char k2[512], p2[512];
	snprintf(k2, sizeof(k2), "%s/other.key", dir);
	snprintf(p2, sizeof(p2), "%s/other.pub", dir);
	keygen_ok(priv, pub);
	keygen_ok(k2, p2);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_file(policy, NULL, k2, NULL, &err), 0);
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-102");
	cg_reply_free(err);
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, p2, &err), 0);
}

Test(sign, unusable_keys_are_key_unreadable)
{
	keygen_ok(priv, pub);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_file(policy, NULL, priv, NULL, &err), 0);

	char missing[512];
	snprintf(missing, sizeof(missing), "%s/no-such.pub", dir);
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, missing, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-103");
	cr_assert_str_eq(param(err, "detail"), "ENOENT");
	cg_reply_free(err);

	/* A private key where a public key belongs is not accepted as one. */
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, priv, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-103");
	cr_assert_str_eq(param(err, "detail"), "not a PEM public key");
	cg_reply_free(err);

	/* A real key of another algorithm. */
	char rsa[512];
	snprintf(rsa, sizeof(rsa), "%s/rsa.pem", dir);
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	cr_assert_not_null(k);
	FILE *f = fopen(rsa, "w");
	cr_assert_not_null(f);
	cr_assert_eq(PEM_write_PUBKEY(f, k), 1);
	fclose(f);
	EVP_PKEY_free(k);
	cr_assert_eq(cg_sign_verify_policy(policy, NULL, rsa, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-103");
	cr_assert_str_eq(param(err, "detail"), "not an Ed25519 key");
	cg_reply_free(err);

	/* Signing with a public key is refused the same way. */
	cr_assert_eq(cg_sign_file(policy, NULL, pub, NULL, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-103");
	cg_reply_free(err);
}

Test(sign, unreadable_policy_is_file_unreadable)
{
	keygen_ok(priv, pub);
	char fifo[512], missing[512];
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(missing, sizeof(missing), "%s/nokey.yaml", dir);
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_sign_verify_policy(missing, NULL, pub, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-104");
	cr_assert_str_eq(param(err, "detail"), "ENOENT");
	cg_reply_free(err);
	/* A FIFO would block a reader forever: refused, not read. */
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(cg_sign_file(fifo, NULL, priv, NULL, &err), -1);
	cr_assert_str_eq(code_of(err), "MCP-CFG-E-104");
	cr_assert_str_eq(param(err, "detail"), "EINVAL");
	cg_reply_free(err);
	cr_assert_eq(cg_sign_verify_policy(dir, NULL, pub, &err), -1);
	cr_assert_str_eq(param(err, "detail"), "EISDIR");
	cg_reply_free(err);
}

static void unhex(const char *h, unsigned char *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v = 0;
		cr_assert_eq(sscanf(h + 2 * i, "%2x", &v), 1);
		out[i] = (unsigned char)v;
	}
}

Test(sign, raw_helpers_match_rfc8032_test_1)
{
	/* RFC 8032 section 7.1, TEST 1: the empty message. */
	unsigned char seed[32], pubk[32], want[64], got[64];
	unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", seed, 32);
	unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", pubk, 32);
	unhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
	      "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
	      want, 64);
	cr_assert_eq(cg_sign_ed25519(seed, "", 0, got), 0);
	cr_assert_eq(memcmp(got, want, 64), 0, "signature differs from RFC 8032");
	cr_assert(cg_sign_ed25519_verify(pubk, "", 0, got));
	got[0] ^= 1;
	cr_assert_not(cg_sign_ed25519_verify(pubk, "", 0, got));
	cr_assert_not(cg_sign_ed25519_verify(pubk, "x", 1, want));
}

Test(sign, raw_generate_sign_verify)
{
	unsigned char seed[32], pubk[32], s[64];
	cr_assert_eq(cg_sign_ed25519_generate(seed, pubk), 0);
	cr_assert_eq(cg_sign_ed25519(seed, "checkpoint", 10, s), 0);
	cr_assert(cg_sign_ed25519_verify(pubk, "checkpoint", 10, s));
	cr_assert_not(cg_sign_ed25519_verify(pubk, "checkpoinT", 10, s));
	char id[CG_SIGN_KEY_ID_LEN];
	cg_sign_key_id(pubk, id);
	cr_assert_eq(strlen(id), 16);
}
