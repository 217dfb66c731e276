/* SPDX-License-Identifier: MIT */
/*
 * evidence — the journal, trace packages and signed checkpoints
 * (seed 004, design/EVIDENCE.md, docs/evidence.md).
 *
 * Every event of every call is appended to one append-only, segmented
 * journal, chained twice (to the previous event of its trace and to the
 * previous event of the journal) by SHA-256 over the exact bytes written.
 * A trace is sealed by a final event; its package (traces/<id>/) is a view
 * that can be rebuilt from the journal.
 *
 * Invariants:
 *  - A durable append MUST NOT return 0 before the event is fdatasync'd.
 *    The event that permits an execution is appended durably, and if that
 *    fails the call MUST NOT run.
 *  - Appends are thread-safe; non-durable appends never block on disk (the
 *    event loop uses them).
 *  - Event types form a closed set; an unknown type is refused here and
 *    fails replay.
 */
#ifndef CG_EVIDENCE_H
#define CG_EVIDENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "reply.h"

/* The closed set of event types (documented in docs/evidence.md). */
#define CG_EVENT_LIST(X)                                                                           \
	X(REQUEST, "request")	/* request received: redacted request, peer creds */               \
	X(RESOLVED, "resolved") /* world adapter: exes, symlink hops, cwd */                       \
	X(RUNG, "rung")		/* one adjudicator's verdict */                                    \
	X(DECISION, "decision") /* the folded decision, rule id, constraints */                    \
	X(APPROVAL_REQ, "approval.requested")                                                      \
	X(APPROVAL_ANS, "approval.answered")                                                       \
	X(PERMIT, "permit") /* durable before exec: what may run, request hash */                  \
	X(EXEC_START, "exec.started")                                                              \
	X(EXEC_END, "exec.finished") /* exit codes, output sizes and hashes, timings */            \
	X(SCREEN, "screening")                                                                     \
	X(VERDICT, "verdict") /* the reply code and the verdict summary */                         \
	X(REPLAY, "replay")                                                                        \
	X(SEAL, "seal")		    /* event count and head: the trace is complete */              \
	X(INCOMPLETE, "incomplete") /* recovery: the trace was cut short by a crash */             \
	X(RECOVERY, "recovery")	    /* trace "journal": a torn tail was set aside at open */       \
	X(NET_CONNECTION, "net.connection") /* one connection through the egress proxy */          \
	X(REFUSAL, "refusal") /* a call refused before anything ran: the whole trace, sealed */    \
	X(STOPPED, "stopped") /* trace "journal": the daemon stopped; its last checkpoint follows */

enum cg_event_type {
#define CG_EVENT_ENUM(e, s) CG_EV_##e,
	CG_EVENT_LIST(CG_EVENT_ENUM)
#undef CG_EVENT_ENUM
	    CG_EV__COUNT
};

const char *cg_event_name(enum cg_event_type t);

struct cg_evidence_config {
	const char *state_dir;	   /* journal/, traces/, keys/ live here */
	uint64_t segment_bytes;	   /* rotate segments past this size; 0: default */
	uint32_t checkpoint_every; /* sign a checkpoint every N events; 0: default */
	int64_t checkpoint_ms;	   /* … or every T ms; 0: default */
	bool write_traces;	   /* write traces/<id>/ packages at seal */
	bool verify_all;     /* start-up verifies the whole journal, not from the resume point */
	bool resign;	     /* a journal with events and no checkpoint may be signed */
	int64_t retention_s; /* pack packages of segments older than this (s); 0: never */
	bool archive;	     /* packages go to their segment's archive as they are sealed */
	/*
	 * The disk reserve: the space the evidence leaves free on the state's
	 * file system (cg_evidence_disk_low). reserve_bytes, or reserve_pct
	 * percent of the file system; both 0: 5% of it, at most 1 GiB;
	 * no_reserve: none.
	 */
	uint64_t reserve_bytes;
	unsigned reserve_pct;
	bool no_reserve;
};

struct cg_evidence;

/* Open (creating the state dir, key and journal as needed). 0 or -1 with *err. */
int cg_evidence_open(const struct cg_evidence_config *cfg, struct cg_evidence **out,
		     struct cg_reply **err) __attribute__((warn_unused_result));

/*
 * Retention (policy evidence.retention): the packages of every journal
 * segment last written more than keep_s seconds ago are packed into one
 * archive per segment by the package thread (retention.h). 0: never.
 */
void cg_evidence_set_retention(struct cg_evidence *ev, int64_t keep_s);

/*
 * Packages (policy evidence.packages): false, a directory traces/<id>/ per
 * trace; true, appended to the archive of the journal segment the trace was
 * sealed in as it is sealed (retention.h, cg_live_archive_append). Applies
 * to traces sealed from now on.
 */
void cg_evidence_set_packages(struct cg_evidence *ev, bool archive);

/*
 * The calls the last run left open after their permit (a crash, a kill, the
 * host's reset cut them short: they may have run, and nothing swept their
 * write trees after them), read at open: an array of {trace, ts (the
 * permit's), permit (its payload)}, the caller's; the next call returns an
 * empty array. NULL on ENOMEM.
 */
json_t *cg_evidence_cut_runs(struct cg_evidence *ev);

/*
 * Record, durably, what a start's sweep of those calls set aside: a
 * `recovery` event of the journal trace with calls (stolen; an array of
 * {trace, since, trees, set_aside}). 0, or -1 with errno.
 */
int cg_evidence_note_swept(struct cg_evidence *ev, json_t *calls)
    __attribute__((warn_unused_result));

/* Final checkpoint, flush, close. Safe on NULL. */
void cg_evidence_close(struct cg_evidence *ev);

/*
 * Append one event of trace_id. Takes ownership of payload (an object).
 * durable: return only once the event is on disk (group commit with other
 * callers). Returns 0, or -1 with errno (the event may not be on disk).
 */
int cg_evidence_append(struct cg_evidence *ev, const char *trace_id, enum cg_event_type type,
		       json_t *payload, bool durable) __attribute__((warn_unused_result));
/*
 * Append one durable event without waiting for it: gate (CG_GATE_PENDING)
 * is opened GO once the event is on disk, or REFUSED if it cannot be. The
 * gate MUST outlive that: wait for it (cg_gate_wait) before freeing it.
 * Returns 0 (the gate will be opened), or -1 with errno (the event was not
 * queued; the gate is left pending).
 */
int cg_evidence_append_gated(struct cg_evidence *ev, const char *trace_id, enum cg_event_type type,
			     json_t *payload, _Atomic uint32_t *gate);

/*
 * Seal trace_id: verify it (the call's own replay step), append the replay
 * and seal events, and write traces/<trace_id>/ (events.ndjson,
 * verdict.json, verdict.md, replay.json, diff.json). verdict (stolen) is
 * the structured verdict of docs/evidence.md. Non-blocking for the caller
 * when durable is false. Returns 0 or -1 with errno.
 */
int cg_evidence_seal(struct cg_evidence *ev, const char *trace_id, json_t *verdict)
    __attribute__((warn_unused_result));

/*
 * Is the state's file system below the disk reserve? Then new calls are
 * turned away before anything is recorded (dispatch.c), and what already
 * runs records into the reserve: the evidence never fills the disk, and no
 * answered call goes unrecorded for want of space. *avail (free space less
 * what admitted calls may still write), *promised (that) and *reserve get
 * the figures (bytes). A file system that cannot be asked counts as low.
 * Logs each change of state once. Any thread.
 */
bool cg_evidence_disk_low(struct cg_evidence *ev, uint64_t *avail, uint64_t *promised,
			  uint64_t *reserve);

/*
 * What an admitted call may still write (an estimate from its request's
 * size) is counted with the reserve: from its admission
 * (cg_evidence_promise) until everything queued by the time it ended is on
 * disk, packages included (cg_evidence_promise_end, the same bytes). So a
 * burst of large calls admitted together cannot write past the reserve.
 */
void cg_evidence_promise(struct cg_evidence *ev, uint64_t bytes);
void cg_evidence_promise_end(struct cg_evidence *ev, uint64_t bytes);

/*
 * Is the writer so far behind that new calls should be turned away (back-
 * pressure instead of an unbounded queue)? *pending (when not NULL) gets the
 * number of items waiting. Never blocks on disk.
 */
bool cg_evidence_backlogged(struct cg_evidence *ev, size_t *pending);
/*
 * The errno that closed the journal, or 0 while it takes events. A closed
 * journal takes nothing until it heals: the daemon turns calls away meanwhile,
 * so that no answer it gives goes unrecorded (s39b).
 */
int cg_evidence_failed(struct cg_evidence *ev);

/*
 * Work not yet done: queued items plus waiting trace packages, each package
 * counted as PKG_WEIGHT items (writing one costs about as much as that many
 * journal events). For admission control; no lock held after return.
 */
size_t cg_evidence_pending(struct cg_evidence *ev);

/*
 * Write 1 (a uint64_t) to the eventfd fd once cg_evidence_pending() is below
 * level: at once if it already is, else from the thread whose work brings it
 * there. One request at a time; a new one replaces the last (fd -1 cancels).
 */
void cg_evidence_wake_below(struct cg_evidence *ev, size_t level, int fd);

/*
 * Block until every event and seal enqueued before this call has been
 * written (and its trace package, if any, is on disk). For callers that
 * answer a client only once `callgate verdict` would find the package.
 * Returns 0, or -1 with errno when the journal has failed.
 */
int cg_evidence_flush(struct cg_evidence *ev) __attribute__((warn_unused_result));

/*
 * Record a call refused before anything ran as one event that is its whole
 * trace: a "refusal" (tseq 1) whose payload (stolen) holds what the request,
 * resolved, decision and verdict events would (request or raw, peer,
 * resolved, decision, reply {type, code, message_key, message}). It seals
 * the trace: no replay or seal event follows, and the package's verdict is
 * cg_refusal_verdict of the payload. Non-blocking. 0, or -1 with errno.
 */
int cg_evidence_refuse(struct cg_evidence *ev, const char *trace_id, json_t *payload)
    __attribute__((warn_unused_result));

/*
 * The sealed verdict of a refusal event, from its payload (borrowed): what a
 * seal event would have recorded for the same call. The writer, replay, a
 * rebuild and `verdict` all use this one function. New reference, or NULL
 * when the payload lacks its reply (or on OOM).
 */
json_t *cg_refusal_verdict(const json_t *payload, const char *trace_id);

/*
 * Normalise a caller's verdict (borrowed) into the verdict.json shape of
 * docs/evidence.md: decision, summary, why[], constrained[], blocked[],
 * next_steps[], confidence, reply{type,code,message}. Never NULL except on
 * allocation failure; caller decrefs.
 */
json_t *cg_verdict_normalize(const json_t *in, const char *trace_id);

/*
 * The facts of one verdict, typed: what the kernel knows when it seals a
 * trace. verdict.json is rendered from them directly (cg_verdict_render), so
 * nothing the process built as JSON is read back to find them.
 */
struct cg_verdict_facts {
	const char *decision;	/* "ALLOW", "DEGRADE", "UNKNOWN" or "BLOCK" */
	const char *rule_id;	/* the deciding rule, or NULL */
	const char *summary;	/* one line; NULL: made from decision, rule and message */
	char reply_type;	/* 'S', 'I', 'D' or 'E' of the answer given */
	const char *reply_code; /* its registry code */
	enum cg_layer layer;	/* its layer (for a why[] made from the reply alone) */
	const char *message;	/* its rendered message, or NULL */
	json_t *why;	     /* [{rung, decision, rule_id, layer, code, why}] (borrowed) or NULL */
	json_t *constrained; /* the constraint sets that applied (borrowed) or NULL */
	const char *next_step; /* for the agent; NULL: the default for the reply type */
	double confidence;
	json_t *extra; /* further keys kept as given, e.g. policy (borrowed) or NULL */
};

/*
 * The extra members of a compact seal's verdict (facts.extra): policy
 * {sha256, generation}, executed, and the marks that tell cg_verdict_render
 * what the trace's events hold instead (compact, why_in_decision). The one
 * shape the kernel's seals and cg_refusal_verdict share. New reference, or
 * NULL on OOM.
 */
json_t *cg_verdict_seal_extra(const char *policy_sha256, int64_t generation, bool executed,
			      bool why_in_decision);

/*
 * The verdict.json object of docs/evidence.md, rendered from typed facts:
 * the same shape cg_verdict_normalize gives for the equivalent JSON. New
 * reference, or NULL on OOM.
 */
json_t *cg_verdict_render(const struct cg_verdict_facts *facts, const char *trace_id);

/*
 * cg_evidence_seal for a caller that holds typed facts: the verdict is
 * rendered from facts (borrowed) and nothing is normalised. 0, or -1 with
 * errno.
 */
int cg_evidence_seal_facts(struct cg_evidence *ev, const char *trace_id,
			   const struct cg_verdict_facts *facts)
    __attribute__((warn_unused_result));

/* Render a normalised verdict for a terminal (verdict.md). Caller frees. */
char *cg_verdict_render_md(const json_t *verdict);

/* A trace package's five files, rendered (cg_package_names, in that order). */
#define CG_PACKAGE_N 5
extern const char *const cg_package_names[CG_PACKAGE_N];
struct cg_package {
	char *data[CG_PACKAGE_N];
	size_t len[CG_PACKAGE_N];
};

/*
 * Render a package: events.ndjson (the given bytes), verdict.json (verdict
 * with what the events show; verdict NULL: the one the events seal with, a
 * refusal's), verdict.md, replay.json, diff.json. facts: the events' facts
 * (cg_refusal_facts of the payload the writer serialised into them), or
 * NULL to read them from the bytes (cg_trace_facts). 0, or -1 with errno;
 * free with cg_package_free.
 */
int cg_package_render(const char *events, size_t events_len, const json_t *verdict,
		      const json_t *facts, const json_t *replay, const json_t *diff,
		      struct cg_package *out);
void cg_package_free(struct cg_package *p);

/* j as a package's JSON files hold it: indented, with a final newline. Caller frees; NULL on OOM. */
char *cg_package_json(const json_t *j, size_t *len);
/* The jansson flags of that spelling (replay compares a file with it as it dumps). */
#define CG_PACKAGE_JSON_FLAGS (JSON_INDENT(2) | JSON_ENCODE_ANY)

/*
 * Write traces/<trace_id>/ under state_dir atomically (a temporary
 * directory renamed into place): events.ndjson (the given bytes),
 * verdict.json, verdict.md, replay.json, diff.json (facts as for
 * cg_package_render). 0 or -1 with errno.
 */
int cg_trace_write_package(const char *state_dir, const char *trace_id, const char *events,
			   size_t events_len, const json_t *verdict, const json_t *facts,
			   const json_t *replay, const json_t *diff);

/*
 * Rebuild traces/<trace_id>/ from the trace's journal lines (events, the
 * exact bytes): verdict from the seal, replay.json and diff.json from the
 * replay event (for a refusal: checked anew), or the incomplete view. 0 or
 * -1 with errno (EINVAL: the trace is neither sealed nor marked incomplete).
 */
int cg_trace_rebuild_package(const char *state_dir, const char *trace_id, const char *events,
			     size_t events_len);

/* ---- shared by the files of this folder ---------------------------------- */

/*
 * The verdict of a trace cut short (a crash, a stop, a journal failure):
 * decision as recorded, status "incomplete", why in the message. New
 * reference, or NULL on allocation failure.
 */
json_t *cg_verdict_incomplete(const char *decision, const char *why, const char *trace_id);

/* What an incomplete event says when the daemon found a trace cut short at start. */
#define CG_INCOMPLETE_WHY "the daemon restarted after a crash"

/*
 * The incomplete verdict a trace's events v[0..n) give, as the daemon's
 * recovery writes it: the last decision event's decision (UNKNOWN before
 * one), the incomplete event's reason. legacy: the form earlier rebuilds
 * wrote instead (UNKNOWN, CG_INCOMPLETE_WHY). New reference, or NULL.
 */
struct cg_evline;
json_t *cg_incomplete_verdict_of(const struct cg_evline *v, size_t n, const char *trace_id,
				 bool legacy);

/*
 * replay.json for a trace: status, scope, the checks run and how many
 * failures diff holds. New reference, or NULL.
 */
json_t *cg_replay_doc(const char *trace, const char *status, size_t events, const json_t *diff,
		      const char *scope);

#endif
