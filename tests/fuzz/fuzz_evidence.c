/* SPDX-License-Identifier: MIT */
/*
 * fuzz_evidence — libFuzzer target for the evidence parsers that read
 * untrusted bytes (a journal or trace file anyone may have edited): the
 * event-line parser, the allocation-free JSON validator, the checkpoint and
 * resume-point parsers, and the chain and structure checks over whatever
 * lines parse.
 * They must never crash, leak, read out of bounds or hang.
 *
 * Build and run:
 *   CC=clang meson setup /tmp/build-fuzze -Dfuzz=true \
 *       -Db_sanitize=address,undefined -Db_lundef=false
 *   ninja -C /tmp/build-fuzze fuzz_evidence
 *   /tmp/build-fuzze/fuzz_evidence -max_total_time=20
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	(void)cg_json_object_valid(p, size);
	struct cg_ckpt c;
	char why[200];
	(void)cg_ckpt_parse(p, size, &c, why, sizeof(why));
	/* The resume point's file (state_dir/journal.resume) is read at every start. */
	struct cg_resume r;
	if (cg_resume_parse(p, size, &r, why, sizeof(why)) == 0 &&
	    (r.lines < p || r.lines + r.lines_len != p + size || r.mr.n > 64))
		__builtin_trap(); /* the open lines are exactly the rest of the input */
	/* Split into lines as replay does; check whatever parses. */
	struct cg_evline *v = calloc(size / 2 + 1, sizeof(*v));
	if (!v)
		return 0;
	size_t n = 0, pos = 0, lineno = 0;
	while (pos < size) {
		const char *nl = memchr(p + pos, '\n', size - pos);
		size_t ll = nl ? (size_t)(nl - (p + pos)) + 1 : size - pos;
		const char *check;
		if (cg_evline_parse(p + pos, ll, &v[n], &check, why, sizeof(why)) == 0) {
			v[n].lineno = ++lineno;
			n++;
		} else if (!check) {
			__builtin_trap(); /* a refusal always names its check */
		}
		pos += ll;
	}
	json_t *diff = json_array();
	cg_evlines_check_chain(v, n, true, "fuzz", diff);
	cg_evlines_check_chain(v, n, false, "fuzz", diff);
	(void)cg_trace_check_structure(v, n, false, "fuzz", diff);
	json_decref(diff);
	free(v);
	return 0;
}
