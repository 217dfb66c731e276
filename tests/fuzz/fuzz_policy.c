/* SPDX-License-Identifier: MIT */
/*
 * fuzz_policy — libFuzzer target for the policy manifest loader.
 *
 * Feeds arbitrary bytes to cg_policy_load_buffer. A load either succeeds
 * (then the generation is dumped, linted and released, exercising the
 * compiled structures) or fails with a reply; it must never crash, leak,
 * read out of bounds or hang, whatever the bytes.
 *
 * Build and run:
 *   CC=clang meson setup /tmp/build-fuzzp -Dfuzz=true \
 *       -Db_sanitize=address,undefined -Db_lundef=false
 *   ninja -C /tmp/build-fuzzp fuzz_policy
 *   /tmp/build-fuzzp/fuzz_policy -max_total_time=20
 */
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cg_policy *p = NULL;
	struct cg_reply *err = NULL;
	if (cg_policy_load_buffer("<fuzz>", (const char *)data, size, &p, &err) != 0) {
		/* A failed load must explain itself. */
		if (!err)
			__builtin_trap();
		cg_reply_free(err);
		return 0;
	}
	if (!p || err)
		__builtin_trap();
	json_decref(cg_policy_dump(p));
	json_decref(cg_policy_lint(p));
	(void)cg_policy_sha256(p);
	cg_policy_unref(p);
	return 0;
}
