/* SPDX-License-Identifier: MIT */
/*
 * verdict — what a trace's package says about its call, rendered from the
 * one typed verdict the seal recorded and the trace's own events
 * (docs/evidence.md "verdict.json"). Also the one-line summary of a call
 * that `callgate log` and the daemon's `log` action print.
 *
 * Invariants:
 *  - "executed" is true exactly when the trace holds an exec.started event
 *    and no exec.finished saying nothing started: a gate dry-run, a refusal
 *    and a run that could not start never say yes.
 *  - The next step can succeed: a BLOCK never points at approval or a grant.
 *  - Events of a type this build does not know (net.connection from a newer
 *    writer) are read by name, never refused here: replay judges the set.
 */
#ifndef CG_VERDICT_H
#define CG_VERDICT_H

#include <stddef.h>
#include <jansson.h>

/*
 * The facts of one trace, gathered from its event lines (the exact bytes,
 * one per line): request, peer, resolved, decision, approvals[], permit,
 * started, finished, screening[], connections[], verdict_event, seal
 * verdict, first ts. Lines that do not parse are skipped. New reference, or
 * NULL on allocation failure.
 */
json_t *cg_trace_facts(const char *events, size_t len);

/*
 * The same for a trace that is one refusal event, from its payload as the
 * writer serialised it into the line (borrowed), its trace id and ts: what
 * cg_trace_facts of that line gives, without parsing it again.
 */
json_t *cg_refusal_facts(const char *trace, const char *ts, json_t *payload);

/*
 * verdict.json for a trace: the sealed verdict (borrowed) with what the
 * events show added — outcome, decided_by, call, run, exit codes, outputs,
 * screening, connections — and executed, blocked and next_steps made true to
 * them. facts is cg_trace_facts of the trace's events. New reference, or
 * NULL on allocation failure.
 */
json_t *cg_verdict_with_facts(const json_t *sealed, const json_t *facts);

/* The same; sealed NULL: the verdict the facts seal with (a seal's, or a refusal's). */
json_t *cg_verdict_of_facts(const json_t *sealed, const json_t *facts);

/* The same, from the events' bytes. */
json_t *cg_verdict_with_events(const json_t *sealed, const char *events, size_t len);
/*
 * The same, derived as before 2026-11-27: a grant's opening read "answered",
 * with the whole request blocked. replay accepts it for the packages written
 * then (the journal is the same; only the view of it changed).
 */
json_t *cg_verdict_with_events_legacy(const json_t *sealed, const char *events, size_t len);

/*
 * One call as `callgate log` prints it: {time, trace_id, peer{uid,pid},
 * host, command, action, decision, rule_id, outcome, exit, executed, code}.
 * facts as above. New reference, or NULL.
 */
json_t *cg_call_summary(const char *trace_id, const json_t *facts);

/*
 * One word as shell text, appended to b: as is when every character is in
 * plain (NULL: letters, digits and @%+=:,./_-), as $'...' when it holds a
 * line break or a tab (each written \n, \t, a backslash and a quote
 * escaped), else single-quoted. What a word reads as on every screen and in
 * the evidence's texts, so that a line break or a tab cannot pass for the
 * two characters a backslash and a letter are (s41d F2, s42b F1).
 */
struct cg_buf;
void cg_shell_word(struct cg_buf *b, const char *w, const char *plain);

/*
 * A pipeline ([[argv...], ...]) as shell words: each word single-quoted
 * when it needs it, stages joined by " | ", cut to at most max bytes with
 * "..." when longer (max 0: no limit). Caller frees; NULL on OOM.
 */
char *cg_command_text(const json_t *pipeline, size_t max);

/*
 * The calls of a list of journal events given as objects ({trace, type, ts,
 * payload}, as the daemon's log action returns them): one cg_call_summary
 * per trace, in the order of each trace's first event. New reference, or
 * NULL on OOM.
 */
json_t *cg_calls_from_events(const json_t *events);

struct cg_journal_view;

/*
 * Each trace of a loaded journal (replay.h), in the order of its first
 * event, except the journal's own: fn(trace, facts (cg_trace_facts of its
 * lines), i, n, arg) with i of n traces. fn returns 0 to go on, or stops the
 * walk with its non-zero value, which is returned. -1 with errno on OOM.
 */
typedef int (*cg_journal_call_fn)(const char *trace, const json_t *facts, size_t i, size_t n,
				  void *arg);
int cg_journal_calls(const struct cg_journal_view *jv, cg_journal_call_fn fn, void *arg);

/*
 * Every outcome a verdict can have (outcome_of, and "open" for a trace not
 * yet sealed), NULL-terminated: what `callgate log --decision` may name.
 */
extern const char *const cg_verdict_outcomes[];

#endif
