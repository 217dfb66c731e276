/* SPDX-License-Identifier: MIT */
/*
 * fuzz_note — libFuzzer target for the checkpoint-note parser (notes and
 * cosigned notes arrive from other machines and from files anyone may edit)
 * and for the signature checks over whatever parses. They must never crash,
 * leak, read out of bounds or hang.
 *
 * Build and run:
 *   CC=clang meson setup /tmp/build-fuzzn -Dfuzz=true \
 *       -Db_sanitize=address,undefined -Db_lundef=false
 *   ninja -C /tmp/build-fuzzn fuzz_note
 *   /tmp/build-fuzzn/fuzz_note -max_total_time=20
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "key.h"
#include "note.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static EVP_PKEY *k;
	if (!k)
		k = cg_key_generate();
	const char *p = (const char *)data;
	struct cg_note n;
	char why[200];
	if (cg_note_parse(p, size, &n, why, sizeof(why)) == 0 && k) {
		(void)cg_note_verify(&n, p, NULL, k);
		(void)cg_note_cosig_verify(&n, p, n.origin, k, NULL);
	}
	return 0;
}
