/* SPDX-License-Identifier: MIT */
/*
 * access — reading evidence for a peer: whose a trace is, its sealed
 * verdict, and the journal events a peer may see. The daemon answers the
 * protocol's verdict, replay and log actions with these (a peer reads the
 * traces of its own uid; an approver reads all), so that an agent connected
 * by the socket alone can check its calls without reading the state
 * directory itself.
 *
 * Invariants:
 *  - A trace's owner is the uid the kernel recorded for its request
 *    (SO_PEERCRED, in the request event), never anything the request said.
 *  - Whether a trace exists but belongs to someone else MUST NOT be told
 *    apart from "no such trace" by these functions' results: both are
 *    ENOENT for a caller that may not see it.
 *  - Nothing here writes the journal, the checkpoints or a trace package.
 */
#ifndef CG_ACCESS_H
#define CG_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

/* Who may read: a uid, or every trace. */
struct cg_reader {
	uid_t uid;
	bool all; /* an approver: every trace */
};

/*
 * The uid recorded for trace_id's request, from its sealed package
 * (traces/<id>/events.ndjson). 0, or -1 with errno: EINVAL (not a trace
 * id), ENOENT (no sealed package, or no request event in it), EBADMSG
 * (the request event does not parse), or the read's errno.
 */
int cg_trace_owner(const char *state_dir, const char *trace_id, uid_t *uid)
    __attribute__((warn_unused_result));

/*
 * May reader see trace_id? 0 yes; -1 with errno ENOENT when the trace has
 * no sealed package or is another uid's (the two are not told apart), or
 * another errno from cg_trace_owner.
 */
int cg_trace_readable(const char *state_dir, const char *trace_id, const struct cg_reader *reader)
    __attribute__((warn_unused_result));

/*
 * The sealed verdict.json of trace_id, for reader. 0 with *verdict (caller
 * decrefs), or -1 with errno as cg_trace_readable (EBADMSG: not JSON).
 */
int cg_trace_verdict_read(const char *state_dir, const char *trace_id,
			  const struct cg_reader *reader, json_t **verdict)
    __attribute__((warn_unused_result));

/* Which journal events to return (cg_journal_query). */
struct cg_log_query {
	const char *trace_id; /* only this trace, or NULL */
	int64_t since_ns;     /* only events at or after this wall time; 0: all */
	size_t limit;	      /* the most recent this many of what matches; 0: 200 */
	size_t max_bytes;     /* and of those, the most recent whose lines fit; 0: no bound */
};

/*
 * The journal events of the traces reader may see (a trace is the reader's
 * when its request event records the reader's uid), filtered by q, in
 * journal order, at most q->limit of the most recent, and of those the
 * most recent whose lines together fit q->max_bytes. *events (caller
 * decrefs) is an array of the journal lines as parsed objects; *n_matched
 * counts every match before the limit. 0, or -1 with errno.
 */
int cg_journal_query(const char *state_dir, const struct cg_reader *reader,
		     const struct cg_log_query *q, json_t **events, size_t *n_matched)
    __attribute__((warn_unused_result));

#endif
