/* SPDX-License-Identifier: MIT */
/*
 * matcher — vectorscan wrapper for the policy's argument patterns (see
 * matcher.h for the contract).
 *
 * Scratch space: vectorscan needs a scratch region per concurrent scan. Each
 * thread keeps one (a __thread pointer), grown with hs_alloc_scratch the
 * first time the thread scans with a given matcher (matchers carry a unique
 * serial, so a reloaded policy is noticed). A pthread key frees it when the
 * thread exits. In steady state a scan is one compare and hs_scan.
 *
 * Invariants:
 *  - Compile failures MUST name the pattern index; nothing partial is kept.
 *  - Scans MUST NOT allocate after this thread prepared for this matcher.
 */
#include "matcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs/hs.h>

struct cg_matcher {
	hs_database_t *db;
	size_t n;
	uint64_t serial; /* unique per compiled matcher, never reused */
};

static atomic_uint_fast64_t matcher_serial = 1;

/* What one thread keeps: scratch and result rows, freed at thread exit. */
struct tl_state {
	hs_scratch_t *scratch;
	uint64_t *rows;
	size_t rows_words; /* words per row that rows was sized for */
};

static __thread struct tl_state *tl;
static __thread uint64_t tl_serial; /* serial of the last matcher prepared for */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_destroy(void *p)
{
	struct tl_state *s = p;
	hs_free_scratch(s->scratch);
	free(s->rows);
	free(s);
}

static void scratch_key_init(void)
{
	scratch_key_ok = pthread_key_create(&scratch_key, scratch_destroy) == 0;
}

static char *dup_msg(const char *s)
{
	size_t n = strlen(s);
	char *d = malloc(n + 1);
	if (d)
		memcpy(d, s, n + 1);
	return d;
}

int cg_matcher_compile(const char *const *patterns, size_t n, struct cg_matcher **out,
		       size_t *bad_index, char **msg)
{
	*out = NULL;
	*bad_index = n;
	*msg = NULL;
	if (n == 0 || n > UINT32_MAX) {
		*msg = dup_msg("no patterns to compile");
		return -1;
	}
	unsigned *flags = calloc(n, sizeof(*flags));
	unsigned *ids = calloc(n, sizeof(*ids));
	struct cg_matcher *m = calloc(1, sizeof(*m));
	int rc = -1;
	if (!flags || !ids || !m) {
		*msg = dup_msg("out of memory");
		goto free_tmp;
	}
	for (size_t i = 0; i < n; i++) {
		/* SINGLEMATCH: we only need "did it match", once per argument. */
		flags[i] = HS_FLAG_SINGLEMATCH;
		ids[i] = (unsigned)i;
	}
	hs_compile_error_t *ce = NULL;
	if (hs_compile_multi((const char *const *)patterns, flags, ids, (unsigned)n, HS_MODE_BLOCK,
			     NULL, &m->db, &ce) != HS_SUCCESS) {
		if (ce) {
			if (ce->expression >= 0)
				*bad_index = (size_t)ce->expression;
			*msg = dup_msg(ce->message ? ce->message : "compile error");
			hs_free_compile_error(ce);
		} else {
			*msg = dup_msg("compile error");
		}
		goto free_tmp;
	}
	m->n = n;
	m->serial = atomic_fetch_add(&matcher_serial, 1);
	*out = m;
	m = NULL;
	rc = 0;
free_tmp:
	free(m);
	free(ids);
	free(flags);
	return rc;
}

void cg_matcher_free(struct cg_matcher *m)
{
	if (!m)
		return;
	hs_free_database(m->db);
	free(m);
}

size_t cg_matcher_count(const struct cg_matcher *m)
{
	return m ? m->n : 0;
}

size_t cg_matcher_words(const struct cg_matcher *m)
{
	return m ? (m->n + 63) / 64 : 0;
}

int cg_matcher_thread_prepare(const struct cg_matcher *m)
{
	if (tl && tl_serial == m->serial)
		return 0;
	pthread_once(&scratch_once, scratch_key_init);
	if (!tl) {
		tl = calloc(1, sizeof(*tl));
		if (!tl)
			return -1;
		if (scratch_key_ok)
			(void)pthread_setspecific(scratch_key, tl);
	}
	/* hs_alloc_scratch grows an existing scratch to fit another database. */
	if (hs_alloc_scratch(m->db, &tl->scratch) != HS_SUCCESS)
		return -1;
	size_t words = cg_matcher_words(m);
	if (tl->rows_words < words) {
		uint64_t *r = realloc(tl->rows, CG_MATCHER_MAX_ROWS * words * sizeof(uint64_t));
		if (!r)
			return -1;
		tl->rows = r;
		tl->rows_words = words;
	}
	tl_serial = m->serial;
	return 0;
}

uint64_t *cg_matcher_thread_rows(const struct cg_matcher *m)
{
	return tl && tl_serial == m->serial ? tl->rows : NULL;
}

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
		    void *ctx)
{
	uint64_t *bits = ctx;
	bits[id / 64] |= UINT64_C(1) << (id % 64);
	return 0;
}

int cg_matcher_scan(const struct cg_matcher *m, const char *s, size_t len, uint64_t *bits)
{
	if (!tl || tl_serial != m->serial || len > UINT32_MAX)
		return -1;
	hs_error_t rc = hs_scan(m->db, s, (unsigned)len, 0, tl->scratch, on_match, bits);
	return rc == HS_SUCCESS ? 0 : -1;
}
