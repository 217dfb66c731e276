/* SPDX-License-Identifier: MIT */
/*
 * replay — verify the evidence trail offline: the journal, the signed
 * checkpoints and the trace packages (design/EVIDENCE.md, docs/evidence.md),
 * and rebuild trace packages from the journal.
 *
 * Invariants:
 *  - PASS MUST mean every check of docs/evidence.md held; anything else is
 *    FAIL with each failure named in the report (and diff.json).
 *  - Replay never modifies the journal or the checkpoints; it writes only
 *    replay.json and diff.json inside trace directories (when asked).
 */
#ifndef CG_REPLAY_H
#define CG_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "journal.h"

struct cg_replay_opts {
	const char *state_dir;
	const char *pubkey_file; /* trusted public key; NULL: state_dir/keys/evidence.pub */
	const char *trace_id;	 /* the trace to verify, or NULL with all */
	bool all;		 /* verify every trace (and look for strays under traces/) */
	bool write_files;	 /* write replay.json and diff.json into the trace dirs */
};

/*
 * Run replay. Returns 0 on PASS, 1 on FAIL (or an incomplete single trace),
 * -1 when replay itself could not run (errno; *report may still explain).
 * *report (caller decrefs) is {"status","journal":{…},"traces":[…],"failures":[…]}.
 */
int cg_replay_run(const struct cg_replay_opts *o, json_t **report)
    __attribute__((warn_unused_result));

/*
 * The whole journal in memory, in order: every line that parsed (v, n) and
 * the failures found while reading (parse errors, torn tails) in diff.
 */
struct cg_journal_view {
	char *buf; /* all segments, concatenated */
	size_t len;
	struct cg_evline *v;
	size_t n;
	bool live; /* a daemon holds the journal (its tail may be in flight) */
	/* replay: when it read the signed files, just before the journal (wall ns) */
	int64_t signed_read_ns;
	/* v[i]'s Merkle leaf hash, when replay computed them (else NULL: on demand) */
	unsigned char (*leaf)[32];
};

/* Load (and parse) the journal. 0, or -1 with errno. diff may be NULL. */
int cg_journal_load(const char *state_dir, struct cg_journal_view *jv, json_t *diff);
void cg_journal_view_free(struct cg_journal_view *jv);

/*
 * Rebuild traces/<id>/ from the journal, for one trace or all (trace_id
 * NULL). Traces neither sealed nor incomplete are skipped. Returns the
 * number rebuilt, or -1 with errno; *failed counts those (of --all) that
 * could not be written.
 */
int cg_evidence_rebuild(const char *state_dir, const char *trace_id, int *failed);

#endif
