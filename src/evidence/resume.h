/* SPDX-License-Identifier: MIT */
/*
 * resume — the journal's resume point: what the writer needs to go on
 * appending after the last signed checkpoint, so that a start verifies only
 * the checkpoint and the events after it instead of the whole journal
 * (issue 14; docs/evidence.md, "Start-up").
 *
 * The file (state_dir/journal.resume, replaced atomically) is one header
 * line followed by the exact journal lines of the traces open at the
 * checkpoint:
 *   {"resume":1,"seq":C,"head":H,"root":R,"ckpt_off":O,"segment":S,
 *    "end":E,"line_len":L,"journal_tseq":J,"journal_hash":JH,
 *    "frontier":[hex…],"lines":K}\n  <K journal lines>
 *
 * It is a cache, never an authority: every member is checked against the
 * signed checkpoint line at O (signature, seq, head, Merkle root), the
 * journal line that ends at E in segment S (seq C, hash H) and the Merkle
 * frontier's root; the open traces' lines are re-hashed and re-linked by the
 * writer. Anything that does not hold sends the start to full verification.
 *
 * Invariants:
 *  - A resume point MUST name a checkpoint whose packages (every trace
 *    sealed at or before it) are already written: the package thread writes
 *    it after the packages of its batch.
 *  - cg_resume_parse MUST NOT trust the file: bounds and hex are checked and
 *    the frontier must be exactly the one of a tree of seq leaves.
 */
#ifndef CG_RESUME_H
#define CG_RESUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#include "merkle.h"

#define CG_RESUME_FILE "journal.resume"

struct cg_resume {
	uint64_t seq;	       /* the checkpoint's seq: the last event it covers */
	char head[65];	       /* the chain head at seq */
	char root[65];	       /* the Merkle root of events 1..seq */
	uint64_t ckpt_off;     /* the checkpoint line's offset in checkpoints.ndjson */
	char segment[32];      /* the segment holding event seq */
	uint64_t end;	       /* offset just past event seq's line in that segment */
	uint64_t line_len;     /* length of event seq's line */
	uint64_t journal_tseq; /* the journal trace's own chain at seq */
	char journal_hash[65];
	struct cg_merkle_range mr; /* the frontier of the tree of seq leaves */
	const char *lines;	   /* borrowed: the open traces' lines, verbatim */
	size_t lines_len;
	size_t n_lines;
	bool at_stop; /* set by cg_resume_check: event seq is a clean stop's */
};

/*
 * Format r's header line (lines/lines_len are not read) into a new buffer
 * of *len bytes with room for extra more bytes after it. NULL on ENOMEM.
 */
char *cg_resume_header(const struct cg_resume *r, size_t extra, size_t *len);

/*
 * Parse a resume file's bytes: the header into r, r->lines pointing into
 * buf. 0, or -1 with why.
 */
int cg_resume_parse(const char *buf, size_t len, struct cg_resume *r, char *why, size_t why_len);

/*
 * Check r against the files: the checkpoint line at r->ckpt_off names seq,
 * head and root and carries a valid signature by key; the line ending at
 * r->end in r->segment is event seq with hash head; the frontier's root is
 * root; at_stop says whether that event is the journal trace's `stopped`.
 * 0, or -1 with why.
 */
int cg_resume_check(const char *state_dir, struct cg_resume *r, EVP_PKEY *key, const char *key_fp,
		    char *why, size_t why_len);

#endif
