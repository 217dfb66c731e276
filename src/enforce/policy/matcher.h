/* SPDX-License-Identifier: MIT */
/*
 * matcher — a multi-pattern, linear-time argument matcher over vectorscan.
 *
 * All argument patterns of one policy generation are compiled once into one
 * vectorscan block-mode database; deciding scans each argument once and
 * learns, as a bit set, every pattern that matched. Vectorscan is an
 * automaton, not a backtracking engine, so a hostile argument cannot make a
 * scan slow (no ReDoS on the decide path).
 *
 * Invariants:
 *  - A pattern that does not compile MUST fail the whole compile, naming its
 *    index, so the policy loader can name the rule.
 *  - cg_matcher_scan MUST NOT allocate once cg_matcher_thread_prepare has
 *    succeeded on this thread for this matcher (scratch is per thread, made
 *    once per thread per matcher, freed when the thread exits).
 *  - A matcher is immutable after compile and may be scanned from any number
 *    of threads at once.
 */
#ifndef CG_MATCHER_H
#define CG_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cg_matcher;

/*
 * Compile n patterns (NUL-terminated, vectorscan/PCRE syntax; pattern i gets
 * id i). Patterns match anywhere in the argument unless anchored (^…$), and
 * may not match the empty string. On success returns 0 and *out (free with
 * cg_matcher_free). On failure returns -1, *bad_index (the failing pattern,
 * or n when the failure is not one pattern's) and *msg (malloc'd text, the
 * caller frees; may be NULL on OOM). n == 0 is an error (nothing to compile).
 */
int cg_matcher_compile(const char *const *patterns, size_t n, struct cg_matcher **out,
		       size_t *bad_index, char **msg) __attribute__((warn_unused_result));

void cg_matcher_free(struct cg_matcher *m);

/* The number of patterns, and of 64-bit words a result bit set needs. */
size_t cg_matcher_count(const struct cg_matcher *m);
size_t cg_matcher_words(const struct cg_matcher *m);

/*
 * Make this thread ready to scan with m: allocates (or grows) the thread's
 * scratch the first time this thread sees m. Cheap afterwards (one compare).
 * 0, or -1 on allocation failure (the caller fails closed).
 */
int cg_matcher_thread_prepare(const struct cg_matcher *m) __attribute__((warn_unused_result));

/*
 * This thread's result rows for m: CG_MATCHER_MAX_ROWS x cg_matcher_words(m)
 * words, made by cg_matcher_thread_prepare (valid until the thread next
 * prepares for another matcher). NULL if prepare has not succeeded for m.
 */
#define CG_MATCHER_MAX_ROWS 4096
uint64_t *cg_matcher_thread_rows(const struct cg_matcher *m);

/*
 * Scan s[0..len) once. Sets bit i of bits (cg_matcher_words(m) words, which
 * the caller zeroes) for every pattern i that matches. Requires a successful
 * cg_matcher_thread_prepare(m) on this thread. 0, or -1 on a scan error.
 */
int cg_matcher_scan(const struct cg_matcher *m, const char *s, size_t len, uint64_t *bits)
    __attribute__((warn_unused_result));

#endif
