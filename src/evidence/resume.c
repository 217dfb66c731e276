/* SPDX-License-Identifier: MIT */
/*
 * resume — the journal's resume point (see resume.h): its header line, and
 * the checks that make it usable only when the signed checkpoint, the
 * journal and the Merkle frontier all agree with it.
 */
#include "resume.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evidence.h"
#include "journal.h"
#include "key.h"
#include "util.h"

#define HEADER_MAX 8192 /* 64 frontier hashes and the rest fit well below this */

char *cg_resume_header(const struct cg_resume *r, size_t extra, size_t *len)
{
	char *buf = malloc(HEADER_MAX + extra);
	if (!buf)
		return NULL;
	int n = snprintf(buf, HEADER_MAX,
			 "{\"resume\":1,\"seq\":%" PRIu64 ",\"head\":\"%s\",\"root\":\"%s\","
			 "\"ckpt_off\":%" PRIu64 ",\"segment\":\"%s\",\"end\":%" PRIu64
			 ",\"line_len\":%" PRIu64 ",\"journal_tseq\":%" PRIu64
			 ",\"journal_hash\":\"%s\",\"lines\":%zu,\"frontier\":[",
			 r->seq, r->head, r->root, r->ckpt_off, r->segment, r->end, r->line_len,
			 r->journal_tseq, r->journal_hash, r->n_lines);
	for (unsigned i = 0; n > 0 && i < r->mr.n; i++) {
		char hex[2 * CG_MERKLE_HASH_LEN + 1];
		cg_hex_encode(r->mr.h[i], CG_MERKLE_HASH_LEN, hex);
		n += snprintf(buf + n, HEADER_MAX - (size_t)n, "%s\"%s\"", i ? "," : "", hex);
	}
	if (n > 0)
		n += snprintf(buf + n, HEADER_MAX - (size_t)n, "]}\n");
	if (n <= 0 || n >= HEADER_MAX) {
		free(buf);
		errno = EOVERFLOW;
		return NULL;
	}
	*len = (size_t)n;
	return buf;
}

static bool hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

static bool take_u64(json_t *j, const char *k, uint64_t *out)
{
	json_t *v = json_object_get(j, k);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

static bool take_hex(json_t *j, const char *k, char out[65])
{
	const char *s = json_string_value(json_object_get(j, k));
	if (!hex64(s))
		return false;
	memcpy(out, s, 65);
	return true;
}

int cg_resume_parse(const char *buf, size_t len, struct cg_resume *r, char *why, size_t why_len)
{
	memset(r, 0, sizeof(*r));
	const char *nl = memchr(buf, '\n', len < HEADER_MAX ? len : HEADER_MAX);
	if (!nl) {
		snprintf(why, why_len, "no header line");
		return -1;
	}
	json_t *j = json_loadb(buf, (size_t)(nl - buf), JSON_REJECT_DUPLICATES, NULL);
	json_t *fr = json_object_get(j, "frontier");
	const char *seg = json_string_value(json_object_get(j, "segment"));
	uint64_t version = 0, n_lines = 0;
	int rc = -1;
	if (!j || !take_u64(j, "resume", &version) || version != 1 ||
	    !take_u64(j, "seq", &r->seq) || r->seq == 0 || !take_hex(j, "head", r->head) ||
	    !take_hex(j, "root", r->root) || !take_u64(j, "ckpt_off", &r->ckpt_off) ||
	    !take_u64(j, "end", &r->end) || !take_u64(j, "line_len", &r->line_len) ||
	    r->line_len == 0 || r->line_len > CG_LINE_MAX || r->line_len > r->end ||
	    !take_u64(j, "journal_tseq", &r->journal_tseq) ||
	    !take_hex(j, "journal_hash", r->journal_hash) || !take_u64(j, "lines", &n_lines) ||
	    !seg || strlen(seg) >= sizeof(r->segment) || strchr(seg, '/') || seg[0] == '.' ||
	    !json_is_array(fr)) {
		snprintf(why, why_len, "header members missing or malformed");
		goto out;
	}
	memcpy(r->segment, seg, strlen(seg) + 1);
	/* The frontier of a tree of seq leaves has one root per set bit of seq. */
	if (json_array_size(fr) != (size_t)__builtin_popcountll(r->seq)) {
		snprintf(why, why_len, "the Merkle frontier does not fit %" PRIu64 " events",
			 r->seq);
		goto out;
	}
	r->mr.size = r->seq;
	r->mr.n = (unsigned)json_array_size(fr);
	for (unsigned i = 0; i < r->mr.n; i++) {
		const char *h = json_string_value(json_array_get(fr, i));
		if (!hex64(h) || cg_hex_decode(h, r->mr.h[i], CG_MERKLE_HASH_LEN) < 0) {
			snprintf(why, why_len, "frontier hash %u malformed", i);
			goto out;
		}
	}
	r->lines = nl + 1;
	r->lines_len = len - (size_t)(nl + 1 - buf);
	size_t count = 0;
	for (const char *p = r->lines, *e = r->lines + r->lines_len; p < e; count++) {
		const char *q = memchr(p, '\n', (size_t)(e - p));
		if (!q) {
			snprintf(why, why_len, "the open traces' lines end mid-line");
			goto out;
		}
		p = q + 1;
	}
	if (count != n_lines) {
		snprintf(why, why_len, "%zu open-trace lines, the header says %" PRIu64, count,
			 n_lines);
		goto out;
	}
	r->n_lines = count;
	rc = 0;
out:
	json_decref(j);
	return rc;
}

/* Read [off, off + n) of path into buf (exactly n bytes). 0 or -1. */
static int read_at(const char *path, uint64_t off, char *buf, size_t n, size_t *got)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = pread(fd, buf, n, (off_t)off);
	int e = errno;
	close(fd);
	errno = e;
	if (r < 0)
		return -1;
	*got = (size_t)r;
	return 0;
}

static int check_checkpoint(const char *state_dir, const struct cg_resume *r, EVP_PKEY *key,
			    const char *key_fp, char *why, size_t why_len)
{
	char path[4200], line[4097];
	size_t got = 0;
	snprintf(path, sizeof(path), "%s/checkpoints.ndjson", state_dir);
	if (read_at(path, r->ckpt_off, line, sizeof(line) - 1, &got) < 0) {
		snprintf(why, why_len, "cannot read the checkpoint: %s", strerror(errno));
		return -1;
	}
	const char *nl = memchr(line, '\n', got);
	struct cg_ckpt c;
	char w[160];
	if (!nl || cg_ckpt_parse(line, (size_t)(nl - line) + 1, &c, w, sizeof(w)) < 0) {
		snprintf(why, why_len, "no checkpoint line at offset %" PRIu64, r->ckpt_off);
		return -1;
	}
	if (c.seq != r->seq || strcmp(c.head, r->head) != 0 || strcmp(c.root, r->root) != 0) {
		snprintf(why, why_len, "the checkpoint at offset %" PRIu64 " names another state",
			 r->ckpt_off);
		return -1;
	}
	if (strcmp(c.key, key_fp) != 0 || !cg_key_verify(key, line, c.msg_len, c.sig, c.sig_len)) {
		snprintf(why, why_len, "the checkpoint's signature does not verify");
		return -1;
	}
	return 0;
}

static int check_line(const char *state_dir, struct cg_resume *r, char *why, size_t why_len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/journal/%s", state_dir, r->segment);
	char *line = malloc(r->line_len);
	size_t got = 0;
	if (!line || read_at(path, r->end - r->line_len, line, r->line_len, &got) < 0) {
		snprintf(why, why_len, "cannot read %s: %s", r->segment, strerror(errno));
		free(line);
		return -1;
	}
	struct cg_evline o;
	const char *check;
	char w[200];
	int rc = -1;
	if (got != r->line_len || line[got - 1] != '\n' ||
	    cg_evline_parse(line, got, &o, &check, w, sizeof(w)) < 0 || !o.hash_ok ||
	    o.seq != r->seq || strcmp(o.hash, r->head) != 0)
		snprintf(why, why_len, "event %" PRIu64 " is not where the resume point says",
			 r->seq);
	else
		rc = 0;
	r->at_stop = rc == 0 && o.type == CG_EV_STOPPED && strcmp(o.trace, CG_JOURNAL_TRACE) == 0;
	free(line);
	return rc;
}

int cg_resume_check(const char *state_dir, struct cg_resume *r, EVP_PKEY *key, const char *key_fp,
		    char *why, size_t why_len)
{
	unsigned char root[CG_MERKLE_HASH_LEN];
	char hex[2 * CG_MERKLE_HASH_LEN + 1];
	cg_merkle_range_root(&r->mr, root);
	cg_hex_encode(root, sizeof(root), hex);
	if (strcmp(hex, r->root) != 0) {
		snprintf(why, why_len, "the Merkle frontier's root is not the checkpoint's");
		return -1;
	}
	if (check_checkpoint(state_dir, r, key, key_fp, why, why_len) < 0)
		return -1;
	return check_line(state_dir, r, why, why_len);
}
