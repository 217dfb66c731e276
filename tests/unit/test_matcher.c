/* SPDX-License-Identifier: MIT */
/* Tests for the vectorscan argument matcher (src/matcher.c). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matcher.h"

static struct cg_matcher *compile_ok(const char *const *pats, size_t n)
{
	struct cg_matcher *m = NULL;
	size_t bad = 99;
	char *msg = NULL;
	int rc = cg_matcher_compile(pats, n, &m, &bad, &msg);
	cr_assert_eq(rc, 0, "compile failed at %zu: %s", bad, msg ? msg : "");
	cr_assert_not_null(m);
	cr_assert_null(msg);
	return m;
}

static uint64_t scan1(struct cg_matcher *m, const char *s)
{
	uint64_t bits[4] = { 0 };
	cr_assert_leq(cg_matcher_words(m), 4);
	cr_assert_eq(cg_matcher_thread_prepare(m), 0);
	cr_assert_eq(cg_matcher_scan(m, s, strlen(s), bits), 0);
	return bits[0];
}

Test(matcher, reports_every_matching_pattern_once)
{
	const char *pats[] = { "^--force$", "secret", "(?i)PASSWORD", "^/dev/sd[a-z]$" };
	struct cg_matcher *m = compile_ok(pats, 4);
	cr_assert_eq(cg_matcher_count(m), 4);
	cr_assert_eq(cg_matcher_words(m), 1);
	cr_assert_eq(scan1(m, "--force"), 1u);
	cr_assert_eq(scan1(m, "--forced"), 0u);
	cr_assert_eq(scan1(m, "my secret password"), 2u | 4u);
	cr_assert_eq(scan1(m, "secretsecretsecret"), 2u);
	cr_assert_eq(scan1(m, "/dev/sda"), 8u);
	cr_assert_eq(scan1(m, "/dev/sda1"), 0u);
	cr_assert_eq(scan1(m, ""), 0u);
	cg_matcher_free(m);
}

Test(matcher, arguments_with_nul_bytes_are_scanned_whole)
{
	const char *pats[] = { "b$" };
	struct cg_matcher *m = compile_ok(pats, 1);
	uint64_t bits = 0;
	cr_assert_eq(cg_matcher_thread_prepare(m), 0);
	cr_assert_eq(cg_matcher_scan(m, "a\0b", 3, &bits), 0);
	cr_assert_eq(bits, 1u);
	cg_matcher_free(m);
}

Test(matcher, many_patterns_use_many_words)
{
	char *owned[130];
	const char *pats[130];
	for (int i = 0; i < 130; i++) {
		owned[i] = malloc(16);
		snprintf(owned[i], 16, "^w%d$", i);
		pats[i] = owned[i];
	}
	struct cg_matcher *m = compile_ok(pats, 130);
	cr_assert_eq(cg_matcher_words(m), 3);
	uint64_t bits[3] = { 0 };
	cr_assert_eq(cg_matcher_thread_prepare(m), 0);
	cr_assert_eq(cg_matcher_scan(m, "w129", 4, bits), 0);
	cr_assert_eq(bits[0], 0u);
	cr_assert_eq(bits[1], 0u);
	cr_assert_eq(bits[2], 2u); /* 129 = 2*64 + 1 */
	uint64_t *rows = cg_matcher_thread_rows(m);
	cr_assert_not_null(rows);
	rows[CG_MATCHER_MAX_ROWS * 3 - 1] = 7; /* the whole row area is ours */
	cg_matcher_free(m);
	for (int i = 0; i < 130; i++)
		free(owned[i]);
}

Test(matcher, compile_errors_name_the_pattern)
{
	const char *pats[] = { "^ok$", "(unclosed", "fine" };
	struct cg_matcher *m = NULL;
	size_t bad = 99;
	char *msg = NULL;
	cr_assert_eq(cg_matcher_compile(pats, 3, &m, &bad, &msg), -1);
	cr_assert_null(m);
	cr_assert_eq(bad, 1);
	cr_assert_not_null(msg);
	free(msg);
	/* a pattern that matches the empty string is refused too */
	const char *empty[] = { "x*" };
	cr_assert_eq(cg_matcher_compile(empty, 1, &m, &bad, &msg), -1);
	cr_assert_eq(bad, 0);
	free(msg);
	/* backreferences need backtracking: not supported, not silently dropped */
	const char *backref[] = { "(a)\\1" };
	cr_assert_eq(cg_matcher_compile(backref, 1, &m, &bad, &msg), -1);
	cr_assert_eq(bad, 0);
	free(msg);
	cr_assert_eq(cg_matcher_compile(pats, 0, &m, &bad, &msg), -1);
	free(msg);
}

Test(matcher, scan_without_prepare_fails_closed)
{
	const char *a[] = { "a" }, *b[] = { "b" };
	struct cg_matcher *ma = compile_ok(a, 1), *mb = compile_ok(b, 1);
	uint64_t bits = 0;
	cr_assert_eq(cg_matcher_thread_prepare(ma), 0);
	cr_assert_eq(cg_matcher_scan(ma, "a", 1, &bits), 0);
	/* this thread prepared for ma, not mb: refuse rather than use the wrong scratch */
	cr_assert_eq(cg_matcher_scan(mb, "b", 1, &bits), -1);
	cr_assert_null(cg_matcher_thread_rows(mb));
	cr_assert_eq(cg_matcher_thread_prepare(mb), 0);
	bits = 0;
	cr_assert_eq(cg_matcher_scan(mb, "b", 1, &bits), 0);
	cr_assert_eq(bits, 1u);
	cg_matcher_free(ma);
	cg_matcher_free(mb);
}

Test(matcher, hostile_input_is_linear)
{
	/* (a+)+$ is the classic catastrophic-backtracking shape; an automaton does not care */
	const char *pats[] = { "^(a+)+$" };
	struct cg_matcher *m = compile_ok(pats, 1);
	size_t n = 1 << 20;
	char *s = malloc(n + 1);
	memset(s, 'a', n);
	s[n] = '!';
	uint64_t bits = 0;
	cr_assert_eq(cg_matcher_thread_prepare(m), 0);
	cr_assert_eq(cg_matcher_scan(m, s, n + 1, &bits), 0);
	cr_assert_eq(bits, 0u);
	bits = 0;
	cr_assert_eq(cg_matcher_scan(m, s, n, &bits), 0);
	cr_assert_eq(bits, 1u);
	free(s);
	cg_matcher_free(m);
}

static void *scan_worker(void *arg)
{
	struct cg_matcher *m = arg;
	if (cg_matcher_thread_prepare(m) != 0)
		return (void *)1;
	for (int i = 0; i < 2000; i++) {
		uint64_t bits = 0;
		if (cg_matcher_scan(m, "xx--force", 9, &bits) != 0 || bits != 2u)
			return (void *)1;
	}
	return NULL;
}

Test(matcher, threads_scan_concurrently_with_their_own_scratch)
{
	const char *pats[] = { "^nomatch$", "--force$" };
	struct cg_matcher *m = compile_ok(pats, 2);
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, scan_worker, m), 0);
	for (int i = 0; i < 4; i++) {
		void *rv;
		pthread_join(th[i], &rv);
		cr_assert_null(rv);
	}
	cg_matcher_free(m);
}
