/* SPDX-License-Identifier: MIT */
/*
 * note — C2SP signed notes with a tlog-checkpoint body (see note.h and
 * docs/evidence.md, "Checkpoint notes").
 *
 * Invariants:
 *  - Every line is checked for its shape before it is used; base64 that
 *    does not decode to exactly the expected bytes is refused.
 *  - Verification checks the key name, the key ID and the signature, over
 *    the note's exact text bytes (never a re-serialisation).
 */
#include "note.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/sha.h>

#include "key.h"
#include "util.h"

#define EM_DASH "\xe2\x80\x94"

bool cg_note_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > CG_NOTE_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c <= 0x20 || c >= 0x7f || c == '+')
			return false;
	}
	return true;
}

/* SHA-256(name || 0x0A || type || raw Ed25519 public key)[:4]. */
static int key_id(const char *name, EVP_PKEY *k, unsigned char type, unsigned char id[4])
{
	unsigned char raw[32], md[SHA256_DIGEST_LENGTH];
	size_t rl = sizeof(raw);
	if (!k || EVP_PKEY_get_raw_public_key(k, raw, &rl) != 1 || rl != sizeof(raw))
		return -1;
	size_t nl = strlen(name);
	unsigned char *buf = malloc(nl + 2 + sizeof(raw));
	if (!buf)
		return -1;
	memcpy(buf, name, nl);
	buf[nl] = 0x0a;
	buf[nl + 1] = type;
	memcpy(buf + nl + 2, raw, sizeof(raw));
	SHA256(buf, nl + 2 + sizeof(raw), md);
	free(buf);
	memcpy(id, md, 4);
	return 0;
}

int cg_note_key_id(const char *name, EVP_PKEY *k, unsigned char id[4])
{
	return key_id(name, k, 0x01, id); /* 0x01: an Ed25519 note signature */
}

/* "cosignature/v1\ntime <ts>\n" || text, malloc'd; NULL on ENOMEM. */
static char *cosig_message(const char *text, size_t len, uint64_t ts, size_t *out_len)
{
	char head[64];
	int hn = snprintf(head, sizeof(head), "cosignature/v1\ntime %" PRIu64 "\n", ts);
	char *m = hn > 0 ? malloc((size_t)hn + len) : NULL;
	if (!m)
		return NULL;
	memcpy(m, head, (size_t)hn);
	memcpy(m + hn, text, len);
	*out_len = (size_t)hn + len;
	return m;
}

int cg_note_cosign(const char *text, size_t len, const char *name, EVP_PKEY *k, uint64_t ts,
		   unsigned char out[CG_COSIG_LEN])
{
	size_t ml = 0;
	if (ts == 0 || ts > INT64_MAX || !cg_note_name_valid(name) ||
	    key_id(name, k, 0x04, out) < 0)
		return -1;
	for (int i = 0; i < 8; i++)
		out[4 + i] = (unsigned char)(ts >> (56 - 8 * i));
	char *m = cosig_message(text, len, ts, &ml);
	int rc = m ? cg_key_sign(k, m, ml, out + 12) : -1;
	free(m);
	return rc;
}

bool cg_note_cosig_verify(const struct cg_note *n, const char *p, const char *name, EVP_PKEY *k,
			  uint64_t *ts)
{
	unsigned char id[4];
	if (key_id(name, k, 0x04, id) < 0)
		return false;
	for (size_t i = 0; i < n->n_sigs; i++) {
		const struct cg_note_sig *s = &n->sigs[i];
		if (strcmp(s->name, name) != 0 || memcmp(s->key_id, id, 4) != 0 ||
		    s->sig_len != 8 + CG_KEY_SIG_LEN)
			continue;
		uint64_t t = 0;
		for (int j = 0; j < 8; j++)
			t = t << 8 | s->sig[j];
		size_t ml = 0;
		char *m = t && t <= INT64_MAX ? cosig_message(p, n->text_len, t, &ml) : NULL;
		bool ok = m && cg_key_verify(k, m, ml, s->sig + 8, CG_KEY_SIG_LEN);
		free(m);
		if (ok) {
			if (ts)
				*ts = t;
			return true;
		}
	}
	return false;
}

int cg_note_checkpoint_text(char *buf, size_t cap, const char *origin, uint64_t size,
			    const unsigned char root[CG_MERKLE_HASH_LEN])
{
	if (!cg_note_name_valid(origin))
		return -1;
	char *r64 = cg_base64_encode(root, CG_MERKLE_HASH_LEN);
	int n = r64 ? snprintf(buf, cap, "%s\n%" PRIu64 "\n%s\n", origin, size, r64) : -1;
	free(r64);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int cg_note_sign(const char *text, size_t len, const char *name, EVP_PKEY *k,
		 unsigned char idsig[CG_NOTE_IDSIG_LEN])
{
	if (!cg_note_name_valid(name) || cg_note_key_id(name, k, idsig) < 0 ||
	    cg_key_sign(k, text, len, idsig + 4) < 0)
		return -1;
	return 0;
}

char *cg_note_assemble(const char *text, size_t len, const char *name, const unsigned char *idsig,
		       size_t idsig_len, size_t *out_len)
{
	char *s64 = cg_base64_encode(idsig, idsig_len);
	size_t cap = len + strlen(name) + 2 * idsig_len + 32;
	char *out = s64 ? malloc(cap) : NULL;
	int n =
	    out ? snprintf(out, cap, "%.*s\n" EM_DASH " %s %s\n", (int)len, text, name, s64) : -1;
	free(s64);
	if (n < 0 || (size_t)n >= cap) {
		free(out);
		return NULL;
	}
	*out_len = (size_t)n;
	return out;
}

char *cg_note_checkpoint_sign(const char *origin, uint64_t size,
			      const unsigned char root[CG_MERKLE_HASH_LEN], EVP_PKEY *k,
			      size_t *len)
{
	char text[CG_NOTE_NAME_MAX + 128];
	unsigned char idsig[CG_NOTE_IDSIG_LEN];
	int tn = cg_note_checkpoint_text(text, sizeof(text), origin, size, root);
	if (tn < 0 || cg_note_sign(text, (size_t)tn, origin, k, idsig) < 0)
		return NULL;
	return cg_note_assemble(text, (size_t)tn, origin, idsig, sizeof(idsig), len);
}

int cg_note_origin_load_or_create(const char *state_dir, const char *key_fp, bool may_create,
				  char *out, size_t cap)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/keys/evidence.origin", state_dir);
	char *p = NULL;
	size_t n = 0;
	if (cg_file_read(path, 4096, &p, &n) == 0) {
		if (n > 0 && p[n - 1] == '\n')
			p[--n] = '\0';
		int rc = n < cap && strlen(p) == n && cg_note_name_valid(p) ? 0 : -1;
		if (rc == 0)
			memcpy(out, p, n + 1);
		else
			errno = EINVAL;
		free(p);
		return rc;
	}
	if (errno != ENOENT || !may_create)
		return -1;
	/* callgate/<host>/<first 16 hex of the key fingerprint>; the host made a key name. */
	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1) != 0 || !host[0])
		snprintf(host, sizeof(host), "localhost");
	for (char *c = host; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_'))
			*c = '-';
	char line[400];
	int ln = snprintf(line, sizeof(line), "callgate/%.200s/%.16s", host, key_fp);
	if (ln < 0 || (size_t)ln >= cap || !cg_note_name_valid(line)) {
		errno = EINVAL;
		return -1;
	}
	line[ln] = '\n';
	/* Exclusive: two starts racing agree on the first one written. */
	if (cg_file_write_atomic(path, line, (size_t)ln + 1, 0644, true) < 0 && errno != EEXIST)
		return -1;
	return cg_note_origin_load_or_create(state_dir, key_fp, false, out, cap);
}

/* The next line of p[*pos..len) without its '\n'; false when there is no '\n'. */
static bool next_line(const char *p, size_t len, size_t *pos, const char **line, size_t *ll)
{
	const char *nl = *pos < len ? memchr(p + *pos, '\n', len - *pos) : NULL;
	if (!nl)
		return false;
	*line = p + *pos;
	*ll = (size_t)(nl - *line);
	*pos += *ll + 1;
	return true;
}

/* Decode base64 text l[0..ll) into exactly want bytes (want 0: at most max). */
static bool b64_exact(const char *l, size_t ll, unsigned char *out, size_t want, size_t max,
		      size_t *got)
{
	size_t n = 0;
	unsigned char *b = ll ? cg_base64_decode(l, ll, &n) : NULL;
	bool ok = b && (want ? n == want : n <= max);
	if (ok) {
		memcpy(out, b, n);
		if (got)
			*got = n;
	}
	free(b);
	return ok;
}

/* A signature line: "— NAME BASE64" (the dash and the single spaces exactly). */
static int parse_sig(const char *l, size_t ll, struct cg_note_sig *s)
{
	size_t dl = strlen(EM_DASH " ");
	if (ll < dl || memcmp(l, EM_DASH " ", dl) != 0)
		return -1;
	const char *name = l + dl;
	const char *sp = memchr(name, ' ', ll - dl);
	if (!sp || (size_t)(sp - name) > CG_NOTE_NAME_MAX)
		return -1;
	memcpy(s->name, name, (size_t)(sp - name));
	s->name[sp - name] = '\0';
	if (!cg_note_name_valid(s->name))
		return -1;
	unsigned char buf[4 + sizeof(s->sig)];
	size_t got = 0;
	const char *b = sp + 1;
	if (!b64_exact(b, (size_t)(l + ll - b), buf, 0, sizeof(buf), &got) || got < 4)
		return -1;
	memcpy(s->key_id, buf, 4);
	s->sig_len = got - 4;
	memcpy(s->sig, buf + 4, s->sig_len);
	return 0;
}

int cg_note_parse(const char *p, size_t len, struct cg_note *out, char *why, size_t why_len)
{
	memset(out, 0, sizeof(*out));
	const char *bad = NULL;
	if (!p || len == 0 || len > CG_NOTE_MAX || memchr(p, '\0', len)) {
		bad = "empty, too long, or holds a NUL byte";
		goto fail;
	}
	/* The text ends at the first blank line; what follows are signatures. */
	const char *blank = NULL;
	for (size_t i = 0; i + 1 < len; i++)
		if (p[i] == '\n' && p[i + 1] == '\n') {
			blank = p + i;
			break;
		}
	if (!blank) {
		bad = "no blank line between the text and the signatures";
		goto fail;
	}
	out->text_len = (size_t)(blank - p) + 1;
	size_t pos = 0, ll;
	const char *l;
	char num[24];
	if (!next_line(p, out->text_len, &pos, &l, &ll) || ll == 0 || ll > CG_NOTE_NAME_MAX) {
		bad = "the origin line is missing or too long";
		goto fail;
	}
	memcpy(out->origin, l, ll);
	out->origin[ll] = '\0';
	if (!cg_note_name_valid(out->origin)) {
		bad = "the origin holds a space, '+' or a non-printable byte";
		goto fail;
	}
	if (!next_line(p, out->text_len, &pos, &l, &ll) || ll == 0 || ll >= sizeof(num) ||
	    (ll > 1 && l[0] == '0') || strspn(l, "0123456789") < ll) {
		bad = "the tree size is not a decimal number";
		goto fail;
	}
	memcpy(num, l, ll);
	num[ll] = '\0';
	char *end = NULL;
	out->size = strtoull(num, &end, 10);
	if (!end || *end || (ll == 20 && strcmp(num, "18446744073709551615") > 0)) {
		bad = "the tree size is out of range";
		goto fail;
	}
	if (!next_line(p, out->text_len, &pos, &l, &ll) ||
	    !b64_exact(l, ll, out->root, CG_MERKLE_HASH_LEN, 0, NULL)) {
		bad = "the root hash is not 32 bytes of base64";
		goto fail;
	}
	while (next_line(p, out->text_len, &pos, &l, &ll)) {
		if (ll == 0) {
			bad = "an empty extension line";
			goto fail;
		}
		out->n_ext++;
	}
	pos = out->text_len + 1;
	while (pos < len) {
		if (!next_line(p, len, &pos, &l, &ll)) {
			bad = "the last signature line has no newline";
			goto fail;
		}
		if (out->n_sigs == CG_NOTE_MAX_SIGS) {
			bad = "too many signatures";
			goto fail;
		}
		if (parse_sig(l, ll, &out->sigs[out->n_sigs]) < 0) {
			bad = "a signature line is malformed";
			goto fail;
		}
		out->n_sigs++;
	}
	if (out->n_sigs == 0) {
		bad = "no signature";
		goto fail;
	}
	return 0;
fail:
	snprintf(why, why_len, "not a signed checkpoint note: %s", bad);
	return -1;
}

bool cg_note_verify(const struct cg_note *n, const char *p, const char *name, EVP_PKEY *k)
{
	unsigned char id[4];
	if (!name)
		name = n->origin;
	if (cg_note_key_id(name, k, id) < 0)
		return false;
	for (size_t i = 0; i < n->n_sigs; i++) {
		const struct cg_note_sig *s = &n->sigs[i];
		if (strcmp(s->name, name) != 0 || memcmp(s->key_id, id, 4) != 0 ||
		    s->sig_len != CG_KEY_SIG_LEN)
			continue;
		if (cg_key_verify(k, p, n->text_len, s->sig, s->sig_len))
			return true;
	}
	return false;
}
