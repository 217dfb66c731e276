/* SPDX-License-Identifier: MIT */
/*
 * journal — the on-disk format of the evidence journal, shared by the writer
 * (evidence.c), the verifier (replay.c) and the CLI: line layout, genesis,
 * the line parser, the chain and structure checks, checkpoint lines, and
 * the Ed25519 evidence key.
 *
 * A journal line is exactly (one line, members in this order):
 *   {"seq":N,"trace":"ID","tseq":K,"type":"T","ts":"TS","prev":"H","tprev":"H",
 *    "payload":{...},"hash":"H"}\n
 * and "hash" is SHA-256 (lower-case hex) over every byte of the line before
 * the 9 bytes `,"hash":"` — the line's last CG_LINE_TAIL_LEN bytes are
 * `,"hash":"<64 hex>"}\n`. See docs/evidence.md.
 *
 * Invariants:
 *  - The parser MUST NOT trust a line: every member is checked, bounded and
 *    the hash recomputed over the bytes as they are, never re-serialised.
 *  - Checks MUST name each failure (docs/evidence.md lists the names) and
 *    never stop at the first one silently.
 */
#ifndef CG_JOURNAL_H
#define CG_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <openssl/evp.h>

#define CG_GENESIS_TEXT	 "callgate-genesis-v1"
#define CG_LINE_TAIL_LEN 76 /* ,"hash":"<64 hex>"}\n */
#define CG_TRACE_ID_MAX	 64
#define CG_LINE_MAX	 (4u << 20) /* a journal line longer than this is refused */
#define CG_JOURNAL_TRACE "journal"  /* the trace of the journal's own events */
#define CG_CKPT_SIG_MARK ",\"sig\":\""
#define CG_EVIDENCE_LOCK "journal/LOCK"

/* A decision's name (ALLOW, BLOCK, ...) with its NUL fits in this many bytes. */
#define CG_DECISION_CAP 16

/* One parsed event line. Strings are copies; line points into the caller's buffer. */
struct cg_evline {
	uint64_t seq;			    /* journal-wide, from 1 */
	uint64_t tseq;			    /* per trace, from 1 */
	int type;			    /* enum cg_event_type, or -1 when unknown */
	char type_name[32];		    /* as written */
	char trace[CG_TRACE_ID_MAX + 1];    /* trace id */
	char ts[40];			    /* timestamp as written */
	char prev[65], tprev[65], hash[65]; /* hex */
	char decision[CG_DECISION_CAP];	    /* decision events: payload.decision */
	uint64_t seal_events;		    /* seal events: payload.events */
	char seal_head[65];		    /* seal events: payload.head */
	bool lets_run;	  /* approval.answered: a grant, or the last approval needed */
	const char *line; /* borrowed: the line, including '\n' */
	size_t line_len;  /* bytes of line */
	size_t payload_off, payload_len; /* the payload's bytes inside line */
	size_t lineno;			 /* 1-based line number in its file */
	bool hash_ok;			 /* recomputed hash equals "hash" */
};

/* The genesis value: SHA-256 hex of CG_GENESIS_TEXT. */
const char *cg_journal_genesis(void);

/* A trace id is 1..64 of [A-Za-z0-9._-], not starting with '.'. */
bool cg_trace_id_valid(const char *id);

/* Event type by name; -1 when not in the closed set. */
int cg_event_type_from_name(const char *name, size_t len);

/*
 * Parse one line (len includes the '\n' if present) into *out and recompute
 * its hash. Returns 0, or -1 with the failure's name ("truncated", "schema",
 * "type_unknown") and a detail in why. hash_ok is set on success only.
 */
int cg_evline_parse(const char *line, size_t len, struct cg_evline *out, const char **check,
		    char *why, size_t why_len);

/*
 * The same, for chain checks only: the decision/seal payload members are not
 * extracted (the payload is still checked to be one JSON object).
 */
int cg_evline_parse_chain(const char *line, size_t len, struct cg_evline *out, const char **check,
			  char *why, size_t why_len);

/* True when p[0..n) is exactly one well-formed JSON object (no allocation). */
bool cg_json_object_valid(const char *p, size_t n);

/* Add one named failure to diff (an array). Any string may be NULL; line/seq 0: absent. */
void cg_diff_add(json_t *diff, const char *check, const char *file, size_t line, uint64_t seq,
		 const char *expected, const char *found, const char *detail);

/*
 * The sequence and chain checks over lines of one file, in file order.
 * journal: keys are seq and links prev (journal mode) — else keys are tseq
 * and links tprev (one trace's file). Names: line_duplicated, line_inserted,
 * line_deleted, line_reordered, hash, link, trace_mismatch.
 */
void cg_evlines_check_chain(const struct cg_evline *v, size_t n, bool journal, const char *file,
			    json_t *diff);

/* What the structure check found about a trace. */
enum cg_trace_state { CG_TRACE_OPEN, CG_TRACE_SEALED, CG_TRACE_INCOMPLETE };

/*
 * Structure of one trace's events (in tseq order): request first, a decision
 * before any permit, a permit before any exec.started (else the critical
 * "exec_without_permit"), no execution after BLOCK/UNKNOWN
 * ("exec_despite_block"), one verdict, then replay and seal last; or an
 * "incomplete" marker after a crash; or a single "refusal" event, which is
 * the whole trace and seals it. presealed: the replay/seal pair is not yet
 * expected (the call's own replay step). Returns the state found.
 */
/* Does an event of this type end its trace (seal, incomplete, refusal)? */
bool cg_event_ends_trace(int type);

enum cg_trace_state cg_trace_check_structure(const struct cg_evline *v, size_t n, bool presealed,
					     const char *file, json_t *diff);

/* ---- checkpoints -------------------------------------------------------- */

/*
 * A checkpoint line:
 *   {"seq":N,"head":"H","root":"R","ts":"TS","key":"FP","sig":"B64","note_sig":"B64"}\n
 * sig signs the bytes before ,"sig":" (root included); note_sig is the
 * signature line of the same checkpoint as a C2SP note (note.h), so that the
 * note of any checkpoint can be rebuilt from this file. Lines written before
 * the Merkle tree existed have neither root nor note_sig and still parse.
 */
struct cg_ckpt {
	uint64_t seq;
	char head[65];
	char root[65]; /* the Merkle root (hex) of the first seq events; "" on old lines */
	char ts[40];
	char key[65];	/* the signer's key fingerprint (SHA-256 hex of the raw key) */
	size_t msg_len; /* signed bytes: the line up to CG_CKPT_SIG_MARK */
	unsigned char sig[64];
	size_t sig_len;
	unsigned char note_sig[4 + 64]; /* key ID || Ed25519 signature of the note */
	size_t note_sig_len;		/* 68, or 0 on old lines */
};

/*
 * Format a checkpoint's signed prefix into buf; root (hex) may be NULL for
 * the old layout. Returns its length or -1.
 */
int cg_ckpt_format_msg(char *buf, size_t cap, uint64_t seq, const char *head, const char *root,
		       const char *ts, const char *key_fp);

/* Parse a checkpoint line (with '\n'), either layout. 0, or -1 with why. */
int cg_ckpt_parse(const char *line, size_t len, struct cg_ckpt *out, char *why, size_t why_len);

/* ---- the Ed25519 evidence key (keys/evidence.key 0600, keys/evidence.pub) ---- */

/*
 * Load the private key, creating it (and the public key file) when absent and
 * may_create is true. NULL on error (why says which).
 */
EVP_PKEY *cg_evkey_load_or_create(const char *state_dir, bool may_create, char *why,
				  size_t why_len);
/* The journal's segment file names, sorted (caller frees each and the array). */
int cg_journal_segments(const char *state_dir, char ***names, size_t *n);

#endif
