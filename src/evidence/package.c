/* SPDX-License-Identifier: MIT */
/*
 * package — a trace's package under traces/<id>/ (events.ndjson,
 * verdict.json, verdict.md, replay.json, diff.json): written by the
 * evidence writer's package thread after the trace is sealed, and rebuilt
 * from the journal by recovery and `callgate evidence rebuild`.
 *
 * Invariants:
 *  - A package is written into a temporary directory and renamed into
 *    place, so a reader never sees half a package.
 *  - The package is a view of the journal, never the other way round: the
 *    journal's bytes are the evidence, and replay compares the two.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "evidence.h"
#include "journal.h"
#include "util.h"
#include "verdict.h"

json_t *cg_replay_doc(const char *trace, const char *status, size_t events, const json_t *diff,
		      const char *scope)
{
	char ts[40];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:[sssss], s:I}", "trace_id", trace, "status",
			 status, "checked_at", ts, "scope", scope, "events", (json_int_t)events,
			 "checks", "schema", "hash", "link", "sequence", "structure", "failures",
			 (json_int_t)json_array_size(diff));
}

static int write_file_at(int dfd, const char *name, const char *p, size_t n)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	int rc = cg_write_all(fd, p, n);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

char *cg_package_json(const json_t *j, size_t *len)
{
	char *s = json_dumps(j, CG_PACKAGE_JSON_FLAGS);
	if (!s)
		return NULL;
	*len = strlen(s);
	s[*len] = '\n'; /* replaces the NUL; the length is kept apart */
	(*len)++;
	return s;
}

const char *const cg_package_names[CG_PACKAGE_N] = { "events.ndjson", "verdict.json", "verdict.md",
						     "replay.json", "diff.json" };

json_t *cg_incomplete_verdict_of(const struct cg_evline *v, size_t n, const char *trace_id,
				 bool legacy)
{
	char decision[CG_DECISION_CAP] = "UNKNOWN", why[512] = CG_INCOMPLETE_WHY;
	for (size_t i = 0; !legacy && i < n; i++) {
		if (v[i].type == CG_EV_DECISION && v[i].decision[0])
			snprintf(decision, sizeof(decision), "%s", v[i].decision);
		if (v[i].type != CG_EV_INCOMPLETE)
			continue;
		json_t *pl = json_loadb(v[i].line + v[i].payload_off, v[i].payload_len,
					JSON_REJECT_DUPLICATES, NULL);
		const char *r = json_string_value(json_object_get(pl, "reason"));
		if (r)
			snprintf(why, sizeof(why), "%s", r);
		json_decref(pl);
	}
	return cg_verdict_incomplete(decision, why, trace_id);
}

int cg_package_render(const char *events, size_t events_len, const json_t *verdict,
		      const json_t *facts, const json_t *replay, const json_t *diff,
		      struct cg_package *out)
{
	memset(out, 0, sizeof(*out));
	/* verdict.json: the sealed verdict with what the trace's events show. */
	json_t *full = facts ? cg_verdict_of_facts(verdict, facts)
			     : cg_verdict_with_events(verdict, events, events_len);
	char *md = full ? cg_verdict_render_md(full) : NULL;
	if (!full) {
		free(md);
		errno = EINVAL; /* nothing seals the events (or no memory) */
		return -1;
	}
	out->data[0] = malloc(events_len ? events_len : 1);
	if (out->data[0])
		memcpy(out->data[0], events, events_len);
	out->len[0] = events_len;
	out->data[1] = cg_package_json(full, &out->len[1]);
	out->data[2] = md;
	out->len[2] = md ? strlen(md) : 0;
	out->data[3] = cg_package_json(replay, &out->len[3]);
	out->data[4] = cg_package_json(diff, &out->len[4]);
	json_decref(full);
	for (size_t i = 0; i < CG_PACKAGE_N; i++)
		if (!out->data[i]) {
			cg_package_free(out);
			errno = ENOMEM;
			return -1;
		}
	return 0;
}

void cg_package_free(struct cg_package *p)
{
	for (size_t i = 0; i < CG_PACKAGE_N; i++) {
		free(p->data[i]);
		p->data[i] = NULL;
	}
}

static int rm_tree_flat(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			(void)unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	return rmdir(dir);
}

int cg_trace_write_package(const char *state_dir, const char *trace_id, const char *events,
			   size_t events_len, const json_t *verdict, const json_t *facts,
			   const json_t *replay, const json_t *diff)
{
	if (!cg_trace_id_valid(trace_id) || strcmp(trace_id, CG_JOURNAL_TRACE) == 0) {
		errno = EINVAL;
		return -1;
	}
	char tmp[4300], dst[4300], old[4300];
	snprintf(tmp, sizeof(tmp), "%s/traces/.%s.tmp", state_dir, trace_id);
	snprintf(dst, sizeof(dst), "%s/traces/%s", state_dir, trace_id);
	snprintf(old, sizeof(old), "%s/traces/.%s.old", state_dir, trace_id);
	(void)rm_tree_flat(tmp);
	if (mkdir(tmp, 0755) != 0)
		return -1;
	int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	struct cg_package pk;
	int rc = cg_package_render(events, events_len, verdict, facts, replay, diff, &pk);
	for (size_t i = 0; rc == 0 && i < CG_PACKAGE_N; i++)
		rc = write_file_at(dfd, cg_package_names[i], pk.data[i], pk.len[i]);
	int e = errno;
	cg_package_free(&pk);
	close(dfd);
	if (rc == 0) {
		/* Readers see the old package or the new one, never half of one. */
		if (rename(tmp, dst) != 0) {
			(void)rm_tree_flat(old);
			if (rename(dst, old) != 0 || rename(tmp, dst) != 0)
				rc = -1;
			e = errno;
			(void)rm_tree_flat(old);
		}
	}
	if (rc < 0) {
		(void)rm_tree_flat(tmp);
		errno = e;
	}
	return rc;
}

/* Each line of events[0..len) as an evline (parse failures in diff); *n gets the count. */
static struct cg_evline *parse_events(const char *events, size_t len, size_t *n, json_t *diff)
{
	size_t cap = 8;
	struct cg_evline *v = malloc(cap * sizeof(*v));
	*n = 0;
	for (size_t pos = 0; v && pos < len;) {
		const char *nl = memchr(events + pos, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - (events + pos)) + 1 : len - pos;
		if (*n == cap) {
			struct cg_evline *q = realloc(v, 2 * cap * sizeof(*v));
			if (!q) {
				free(v);
				return NULL;
			}
			v = q;
			cap *= 2;
		}
		const char *check;
		char why[200];
		if (cg_evline_parse(events + pos, ll, &v[*n], &check, why, sizeof(why)) < 0) {
			cg_diff_add(diff, check, "events.ndjson", *n + 1, v[*n].seq, NULL, NULL,
				    why);
			v[*n].type = -1; /* read as nothing below */
		}
		v[*n].lineno = *n + 1;
		(*n)++;
		pos += ll;
	}
	return v;
}

int cg_trace_rebuild_package(const char *state_dir, const char *trace_id, const char *events,
			     size_t events_len)
{
	/*
	 * The view comes from the trace's last events: seal (verdict, replay),
	 * refusal (its verdict; checked here, as it has no replay event) or
	 * incomplete.
	 */
	json_t *verdict = NULL, *replay = NULL, *diff = NULL, *rp = NULL;
	const char *status = NULL;
	size_t n = 0;
	int rc = -1;
	char rts[40] = "";
	json_t *parse_diff = json_array();
	struct cg_evline *v = parse_diff ? parse_events(events, events_len, &n, parse_diff) : NULL;
	if (!v) {
		errno = ENOMEM;
		goto free_docs;
	}
	for (size_t i = 0; i < n; i++) {
		const struct cg_evline *o = &v[i];
		if (o->type < 0)
			continue; /* did not parse */
		json_t *pl = json_loadb(o->line + o->payload_off, o->payload_len, 0, NULL);
		if (o->type == CG_EV_REPLAY) {
			json_decref(rp);
			rp = json_incref(pl);
			memcpy(rts, o->ts, sizeof(rts));
		} else if (o->type == CG_EV_SEAL) {
			json_decref(verdict);
			verdict = json_incref(json_object_get(pl, "verdict"));
			status = "sealed";
		} else if (o->type == CG_EV_REFUSAL) {
			json_decref(verdict);
			verdict = cg_refusal_verdict(pl, trace_id);
			status = "refusal";
		} else if (o->type == CG_EV_INCOMPLETE) {
			status = "incomplete";
		}
		json_decref(pl);
	}
	if (!status) {
		errno = EINVAL;
		goto free_docs;
	}
	if (strcmp(status, "incomplete") == 0) {
		json_decref(verdict);
		verdict = cg_incomplete_verdict_of(v, n, trace_id, false);
		diff = json_array();
		replay = cg_replay_doc(trace_id, "INCOMPLETE", n, diff, "trace (rebuilt)");
	} else if (strcmp(status, "refusal") == 0) {
		diff = json_incref(parse_diff);
		cg_evlines_check_chain(v, n, false, "events.ndjson", diff);
		(void)cg_trace_check_structure(v, n, false, "events.ndjson", diff);
		replay = cg_replay_doc(trace_id, json_array_size(diff) ? "FAIL" : "PASS", n, diff,
				       "trace (rebuilt)");
	} else {
		json_t *f = json_object_get(rp, "failures");
		diff = json_is_array(f) ? json_deep_copy(f) : json_array();
		const char *st = json_string_value(json_object_get(rp, "status"));
		replay = cg_replay_doc(trace_id, st ? st : "FAIL", n, diff, "trace (rebuilt)");
		if (replay && rts[0])
			json_object_set_new(replay, "checked_at", json_string(rts));
	}
	if (!verdict || !replay || !diff) {
		errno = EINVAL;
		goto free_docs;
	}
	rc = cg_trace_write_package(state_dir, trace_id, events, events_len, verdict, NULL, replay,
				    diff);
free_docs:
	free(v);
	json_decref(parse_diff);
	json_decref(rp);
	json_decref(verdict);
	json_decref(replay);
	json_decref(diff);
	return rc;
}
