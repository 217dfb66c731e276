/* SPDX-License-Identifier: MIT */
/*
 * access — reading evidence for a peer (access.h): a trace's owner from its
 * sealed package, its verdict, and the journal events of the traces a peer
 * may see. Used by the daemon's verdict, replay and log actions.
 *
 * Invariants:
 *  - The owner is the "peer.uid" of the trace's request event, which the
 *    kernel wrote from SO_PEERCRED; a request cannot name another owner.
 *  - A trace that is not the reader's is ENOENT, exactly like a missing one,
 *    so a peer cannot even learn which trace ids exist.
 *  - Read-only: nothing here writes under the state directory.
 */
#include "access.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evidence.h"
#include "journal.h"
#include "replay.h"
#include "retention.h"
#include "util.h"

#define PACKAGE_MAX (64u << 20) /* events.ndjson of one trace */
#define VERDICT_MAX (16u << 20) /* verdict.json */
#define LOG_DEFAULT 200

/* The peer uid of a request event's payload bytes. 0, or -1 (EBADMSG). */
static int payload_uid(const char *p, size_t n, uid_t *uid)
{
	json_t *pl = json_loadb(p, n, 0, NULL);
	json_t *u = json_object_get(json_object_get(pl, "peer"), "uid");
	int rc = -1;
	if (json_is_integer(u) && json_integer_value(u) >= 0 &&
	    json_integer_value(u) <= (json_int_t)UINT_MAX) {
		*uid = (uid_t)json_integer_value(u);
		rc = 0;
	}
	json_decref(pl);
	if (rc != 0)
		errno = EBADMSG;
	return rc;
}

int cg_trace_owner(const char *state_dir, const char *trace_id, uid_t *uid)
{
	char *buf = NULL;
	size_t len = 0;
	if (!cg_trace_id_valid(trace_id)) {
		errno = EINVAL;
		return -1;
	}
	/* The package's directory, or the archive retention packed it into. */
	if (cg_package_read(state_dir, trace_id, "events.ndjson", PACKAGE_MAX, &buf, &len) < 0)
		return -1;
	int rc = -1;
	errno = ENOENT;
	for (size_t off = 0; off < len;) {
		const char *nl = memchr(buf + off, '\n', len - off);
		size_t n = nl ? (size_t)(nl - (buf + off)) + 1 : len - off;
		struct cg_evline ev;
		const char *check = NULL;
		char why[128];
		if (cg_evline_parse(buf + off, n, &ev, &check, why, sizeof(why)) == 0 &&
		    (ev.type == CG_EV_REQUEST || ev.type == CG_EV_REFUSAL) &&
		    strcmp(ev.trace, trace_id) == 0) {
			rc = payload_uid(ev.line + ev.payload_off, ev.payload_len, uid);
			break;
		}
		off += n;
	}
	free(buf);
	return rc;
}

int cg_trace_readable(const char *state_dir, const char *trace_id, const struct cg_reader *reader)
{
	uid_t owner;
	if (cg_trace_owner(state_dir, trace_id, &owner) != 0)
		return -1;
	if (!reader->all && owner != reader->uid) {
		errno = ENOENT; /* not told apart from a trace that does not exist */
		return -1;
	}
	return 0;
}

int cg_trace_verdict_read(const char *state_dir, const char *trace_id,
			  const struct cg_reader *reader, json_t **verdict)
{
	char *buf = NULL;
	size_t len = 0;
	*verdict = NULL;
	if (cg_trace_readable(state_dir, trace_id, reader) != 0)
		return -1;
	if (cg_package_read(state_dir, trace_id, "verdict.json", VERDICT_MAX, &buf, &len) < 0)
		return -1;
	*verdict = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
	free(buf);
	if (!json_is_object(*verdict)) {
		json_decref(*verdict);
		*verdict = NULL;
		errno = EBADMSG;
		return -1;
	}
	return 0;
}

/* uid + 1 as a map value, so that uid 0 is not NULL. */
static void *uid_value(uid_t uid)
{
	return (void *)((uintptr_t)uid + 1);
}

int cg_journal_query(const char *state_dir, const struct cg_reader *reader,
		     const struct cg_log_query *q, json_t **events, size_t *n_matched)
{
	struct cg_journal_view jv;
	*events = NULL;
	*n_matched = 0;
	if (cg_journal_load(state_dir, &jv, NULL) < 0)
		return -1;
	int rc = -1;
	struct cg_smap *owners = cg_smap_new();
	bool *keep = calloc(jv.n ? jv.n : 1, sizeof(bool));
	json_t *out = json_array();
	if (!owners || !keep || !out) {
		errno = ENOMEM;
		goto release;
	}
	/* First pass: each trace's owner, from its request (or refusal) event. */
	for (size_t i = 0; i < jv.n; i++) {
		const struct cg_evline *o = &jv.v[i];
		uid_t uid;
		if ((o->type != CG_EV_REQUEST && o->type != CG_EV_REFUSAL) ||
		    cg_smap_get(owners, o->trace) ||
		    payload_uid(o->line + o->payload_off, o->payload_len, &uid) != 0)
			continue;
		if (cg_smap_put(owners, o->trace, uid_value(uid)) != 0) {
			errno = ENOMEM;
			goto release;
		}
	}
	/* Second pass: what the reader may see and asked for. */
	size_t n = 0;
	for (size_t i = 0; i < jv.n; i++) {
		const struct cg_evline *o = &jv.v[i];
		void *owner = cg_smap_get(owners, o->trace);
		int64_t ts;
		if (!owner || (!reader->all && owner != uid_value(reader->uid)))
			continue; /* another uid's, or no request recorded (journal-wide) */
		if (q->trace_id && strcmp(o->trace, q->trace_id) != 0)
			continue;
		if (q->since_ns && (cg_parse_time(o->ts, &ts) < 0 || ts < q->since_ns))
			continue;
		keep[i] = true;
		n++;
	}
	*n_matched = n;
	size_t limit = q->limit ? q->limit : LOG_DEFAULT;
	/* From the newest back: at most limit, and no more bytes than max_bytes. */
	size_t take = 0, bytes = 0;
	for (size_t i = jv.n; i-- > 0 && take < limit;) {
		if (!keep[i])
			continue;
		if (q->max_bytes && bytes + jv.v[i].line_len > q->max_bytes)
			break;
		bytes += jv.v[i].line_len;
		take++;
	}
	size_t skip = n - take;
	for (size_t i = 0; i < jv.n; i++) {
		if (!keep[i])
			continue;
		if (skip) {
			skip--;
			continue;
		}
		json_t *line = json_loadb(jv.v[i].line, jv.v[i].line_len, 0, NULL);
		if (!line || json_array_append_new(out, line) != 0) {
			errno = ENOMEM;
			goto release;
		}
	}
	*events = out;
	out = NULL;
	rc = 0;
release:
	json_decref(out);
	free(keep);
	cg_smap_free(owners, NULL);
	cg_journal_view_free(&jv);
	return rc;
}
