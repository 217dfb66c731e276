/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the evidence trail: the journal writer (evidence.c), the
 * verifier (replay.c), recovery after a crash, and one test per tamper
 * class of design/EVIDENCE.md, each asserting the failure's documented name.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "evidence.h"
#include "journal.h"
#include "replay.h"
#include "retention.h"
#include "verdict.h"
#include "util.h"

static char state[256];

static void setup(void)
{
	snprintf(state, sizeof(state), "/tmp/cg-evtest-XXXXXX");
	cr_assert_not_null(mkdtemp(state));
}

static void rmrf(const char *p)
{
	/* Test scaffolding only: a fork/exec of rm keeps the tree free of recursion code. */
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/rm", "rm", "-rf", p, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
}

static void teardown(void)
{
	rmrf(state);
}

TestSuite(evidence, .init = setup, .fini = teardown);

/* Evidence with packages as directories; 0 for either setting: its default. */
static struct cg_evidence *open_ev_with(uint64_t segment_bytes, int64_t checkpoint_ms)
{
	struct cg_evidence_config c = { .state_dir = state,
					.segment_bytes = segment_bytes,
					.write_traces = true,
					.checkpoint_ms = checkpoint_ms };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	int rc = cg_evidence_open(&c, &ev, &err);
	cr_assert_eq(rc, 0, "open failed: %s", err ? cg_reply_def_of(err)->key : "(no reply)");
	return ev;
}

static struct cg_evidence *open_ev(uint64_t segment_bytes)
{
	return open_ev_with(segment_bytes, 0);
}

/* One governed call's events, the order the kernel emits them. */
static void emit_call(struct cg_evidence *ev, const char *id, const char *decision, bool permit,
		      bool run)
{
	cr_assert_eq(cg_evidence_append(
			 ev, id, CG_EV_REQUEST,
			 json_pack("{s:[[s]], s:s}", "pipeline", "/bin/true", "session", "s1"),
			 false),
		     0);
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_RESOLVED,
					json_pack("{s:[s]}", "exes", "/usr/bin/true"), false),
		     0);
	cr_assert_eq(cg_evidence_append(
			 ev, id, CG_EV_RUNG,
			 json_pack("{s:s, s:s}", "rung", "policy", "decision", decision), false),
		     0);
	cr_assert_eq(cg_evidence_append(
			 ev, id, CG_EV_DECISION,
			 json_pack("{s:s, s:s}", "decision", decision, "rule_id", "r1"), false),
		     0);
	if (permit)
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_PERMIT,
						json_pack("{s:s}", "request_sha256", "00"), true),
			     0);
	if (run) {
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_EXEC_START, json_object(), false), 0);
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_EXEC_END,
						json_pack("{s:[i]}", "exit_codes", 0), false),
			     0);
	}
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_VERDICT,
					json_pack("{s:s}", "code", "MCP-EXEC-S-001"), false),
		     0);
	cr_assert_eq(cg_evidence_seal(ev, id,
				      json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:s}}", "decision",
						decision, "rule_id", "r1", "reason", "allowed",
						"reply", "type", run ? "S" : "D", "code",
						run ? "MCP-EXEC-S-001" : "EN-EXEC-D-001", "message",
						"done")),
		     0);
}

static int replay(const char *id, json_t **rep)
{
	struct cg_replay_opts o = {
		.state_dir = state, .trace_id = id, .all = id == NULL, .write_files = true
	};
	return cg_replay_run(&o, rep);
}

static bool has_failure(const json_t *rep, const char *check)
{
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(rep, "failures"), i, f)
	{
		if (strcmp(json_string_value(json_object_get(f, "check")), check) == 0)
			return true;
	}
	return false;
}

static char *failures_text(const json_t *rep)
{
	return json_dumps(json_object_get(rep, "failures"), JSON_COMPACT);
}

#define ASSERT_FAILS_WITH(id, check)                                                               \
	do {                                                                                       \
		json_t *rep_ = NULL;                                                               \
		int rc_ = replay(id, &rep_);                                                       \
		char *t_ = failures_text(rep_);                                                    \
		cr_assert_eq(rc_, 1, "replay should FAIL (%s)", t_);                               \
		cr_assert(has_failure(rep_, check), "expected failure '%s' in %s", check, t_);     \
		free(t_);                                                                          \
		json_decref(rep_);                                                                 \
	} while (0)

#define ASSERT_PASSES(id)                                                                          \
	do {                                                                                       \
		json_t *rep_ = NULL;                                                               \
		int rc_ = replay(id, &rep_);                                                       \
		char *t_ = failures_text(rep_);                                                    \
		cr_assert_eq(rc_, 0, "replay should PASS: %s", t_);                                \
		free(t_);                                                                          \
		json_decref(rep_);                                                                 \
	} while (0)

static void path_of(char *buf, size_t n, const char *rel)
{
	snprintf(buf, n, "%s/%s", state, rel);
}

/* The JSON file at rel under the state dir (asserted to parse). */
static json_t *load_json(const char *rel)
{
	char p[512];
	path_of(p, sizeof(p), rel);
	json_t *v = json_load_file(p, 0, NULL);
	cr_assert_not_null(v, "%s does not parse", rel);
	return v;
}

static char *slurp(const char *rel, size_t *len)
{
	char p[512];
	path_of(p, sizeof(p), rel);
	char *b = NULL;
	cr_assert_eq(cg_file_read(p, 1u << 30, &b, len), 0, "read %s", p);
	return b;
}

static void spit(const char *rel, const char *b, size_t len)
{
	char p[512];
	path_of(p, sizeof(p), rel);
	FILE *f = fopen(p, "we");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(b, 1, len, f), len);
	fclose(f);
}

/* Lines of a file: offsets of each line start, n lines. */
static size_t line_starts(const char *b, size_t len, size_t *starts, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n < cap; i++)
		if (i == 0 || b[i - 1] == '\n')
			starts[n++] = i;
	return n;
}

static void two_calls(void)
{
	struct cg_evidence *ev = open_ev(0);
	emit_call(ev, "t1", "ALLOW", true, true);
	emit_call(ev, "t2", "BLOCK", false, false);
	cg_evidence_close(ev);
}

#define TRACE_EVENTS "traces/t1/events.ndjson"

Test(evidence, genesis_is_documented_value)
{
	char h[65];
	cg_sha256_hex("callgate-genesis-v1", 19, h);
	cr_assert_str_eq(cg_journal_genesis(), h);
}

Test(evidence, sealed_calls_verify_and_package_has_five_files)
{
	two_calls();
	ASSERT_PASSES("t1");
	ASSERT_PASSES("t2");
	ASSERT_PASSES(NULL);
	const char *files[] = { "events.ndjson", "verdict.json", "verdict.md", "replay.json",
				"diff.json" };
	for (size_t i = 0; i < 5; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "traces/t1/%s", files[i]);
		size_t n;
		free(slurp(rel, &n));
	}
	json_t *v = load_json("traces/t2/verdict.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "decision")), "BLOCK");
	cr_assert_eq(json_real_value(json_object_get(v, "confidence")), 1.0);
	cr_assert_str_eq(json_string_value(json_array_get(json_object_get(v, "blocked"), 0)),
			 "the whole request: nothing was run");
	/* A BLOCK's next step never points at approval or a grant (issue 15). */
	cr_assert(strstr(json_string_value(json_array_get(json_object_get(v, "next_steps"), 0)),
			 "no approval or grant overrides"));
	cr_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(v, "why"), 0), "rule_id")),
			 "r1");
	json_decref(v);
	v = load_json("traces/t1/replay.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "status")), "PASS");
	json_decref(v);
	size_t n;
	char *d = slurp("traces/t1/diff.json", &n);
	cr_assert_eq(strncmp(d, "[]", 2), 0, "diff.json of a PASS is empty: %s", d);
	free(d);
}

Test(evidence, hash_covers_exact_bytes_before_hash_member)
{
	two_calls();
	size_t len;
	char *b = slurp(TRACE_EVENTS, &len);
	const char *nl = memchr(b, '\n', len);
	size_t ll = (size_t)(nl - b) + 1;
	char h[65];
	cg_sha256_hex(b, ll - CG_LINE_TAIL_LEN, h);
	cr_assert_eq(memcmp(b + ll - 67, h, 64), 0);
	cr_assert(strstr(b, cg_journal_genesis()) != NULL, "first tprev is the genesis");
	free(b);
}

Test(evidence, edited_byte_is_named_hash)
{
	two_calls();
	size_t len;
	char *b = slurp(TRACE_EVENTS, &len);
	char *p = strstr(b, "/bin/true");
	cr_assert_not_null(p);
	p[1] = 'x';
	spit(TRACE_EVENTS, b, len);
	free(b);
	ASSERT_FAILS_WITH("t1", "hash");
	ASSERT_FAILS_WITH("t1", "trace_line_mismatch");
}

Test(evidence, edited_byte_in_journal_is_named_hash)
{
	two_calls();
	size_t len;
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	char *p = strstr(b, "/usr/bin/true");
	p[5] = 'X';
	spit("journal/0000000000000001.ndjson", b, len);
	free(b);
	ASSERT_FAILS_WITH("t1", "hash");
	ASSERT_FAILS_WITH(NULL, "hash");
}

Test(evidence, deleted_line_is_named_line_deleted)
{
	two_calls();
	size_t len, st[64];
	char *b = slurp(TRACE_EVENTS, &len);
	size_t n = line_starts(b, len, st, 64);
	cr_assert_gt(n, 4);
	/* drop line 3 */
	memmove(b + st[2], b + st[3], len - st[3]);
	spit(TRACE_EVENTS, b, len - (st[3] - st[2]));
	free(b);
	ASSERT_FAILS_WITH("t1", "line_deleted");
}

Test(evidence, duplicated_line_is_named_line_duplicated)
{
	two_calls();
	size_t len, st[64];
	char *b = slurp(TRACE_EVENTS, &len);
	line_starts(b, len, st, 64);
	size_t ll = st[3] - st[2];
	char *nb = malloc(len + ll);
	memcpy(nb, b, st[3]);
	memcpy(nb + st[3], b + st[2], ll);
	memcpy(nb + st[3] + ll, b + st[3], len - st[3]);
	spit(TRACE_EVENTS, nb, len + ll);
	free(nb);
	free(b);
	ASSERT_FAILS_WITH("t1", "line_duplicated");
}

Test(evidence, inserted_line_is_named_line_inserted)
{
	two_calls();
	size_t len, st[64], len2, st2[64];
	char *b = slurp(TRACE_EVENTS, &len);
	char *o = slurp("traces/t2/events.ndjson", &len2);
	line_starts(b, len, st, 64);
	line_starts(o, len2, st2, 64);
	size_t ll = st2[2] - st2[1]; /* t2's second line (tseq 2) goes in after t1's second */
	char *nb = malloc(len + ll);
	memcpy(nb, b, st[2]);
	memcpy(nb + st[2], o + st2[1], ll);
	memcpy(nb + st[2] + ll, b + st[2], len - st[2]);
	spit(TRACE_EVENTS, nb, len + ll);
	free(nb);
	free(b);
	free(o);
	ASSERT_FAILS_WITH("t1", "line_inserted");
	ASSERT_FAILS_WITH("t1", "trace_extra_event");
}

Test(evidence, reordered_lines_are_named_line_reordered)
{
	two_calls();
	size_t len, st[64];
	char *b = slurp(TRACE_EVENTS, &len);
	line_starts(b, len, st, 64);
	size_t l2 = st[3] - st[2], l3 = st[4] - st[3];
	char *nb = malloc(len);
	memcpy(nb, b, len);
	memcpy(nb + st[2], b + st[3], l3);
	memcpy(nb + st[2] + l3, b + st[2], l2);
	spit(TRACE_EVENTS, nb, len);
	free(nb);
	free(b);
	ASSERT_FAILS_WITH("t1", "line_reordered");
}

Test(evidence, truncated_file_is_named_truncated)
{
	two_calls();
	size_t len, st[64];
	char *b = slurp(TRACE_EVENTS, &len);
	size_t n = line_starts(b, len, st, 64);
	spit(TRACE_EVENTS, b, st[n - 1] + 10); /* mid-line */
	ASSERT_FAILS_WITH("t1", "truncated");
	spit(TRACE_EVENTS, b, st[n - 2]); /* whole lines gone from the end */
	ASSERT_FAILS_WITH("t1", "truncated");
	free(b);
}

Test(evidence, removed_trace_directory_is_named)
{
	two_calls();
	char p[512];
	path_of(p, sizeof(p), "traces/t2");
	rmrf(p);
	ASSERT_FAILS_WITH("t2", "trace_dir_missing");
	ASSERT_FAILS_WITH(NULL, "trace_dir_missing");
	/* The view is rebuildable from the journal. */
	int failed = -1;
	cr_assert_eq(cg_evidence_rebuild(state, "t2", &failed), 1);
	cr_assert_eq(failed, 0);
	ASSERT_PASSES("t2");
}

Test(evidence, forged_trace_directory_is_named)
{
	two_calls();
	char p[512];
	path_of(p, sizeof(p), "traces/t9");
	cr_assert_eq(mkdir(p, 0755), 0);
	ASSERT_FAILS_WITH(NULL, "trace_not_in_journal");
}

Test(evidence, unknown_type_is_named_type_unknown)
{
	two_calls();
	size_t len;
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	char *p = strstr(b, "\"type\":\"resolved\"");
	memcpy(p + 8, "resolvex", 8);
	spit("journal/0000000000000001.ndjson", b, len);
	free(b);
	ASSERT_FAILS_WITH(NULL, "type_unknown");
}

/* Rewrite every line from seq `from` on with valid hashes and links, as an attacker without the key could. */
static void rewrite_journal_from(uint64_t from)
{
	size_t len;
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	struct cg_buf out;
	cg_buf_init(&out, 1u << 26);
	char head[65], th[16][65], tn[16][65];
	size_t nt = 0;
	memcpy(head, cg_journal_genesis(), 65);
	size_t pos = 0;
	while (pos < len) {
		const char *nl = memchr(b + pos, '\n', len - pos);
		size_t ll = (size_t)(nl - (b + pos)) + 1;
		struct cg_evline o;
		const char *check;
		char why[200];
		cr_assert_eq(cg_evline_parse(b + pos, ll, &o, &check, why, sizeof(why)), 0);
		size_t ti = 0;
		while (ti < nt && strcmp(tn[ti], o.trace) != 0)
			ti++;
		if (ti == nt) {
			memcpy(tn[nt], o.trace, strlen(o.trace) + 1);
			memcpy(th[nt++], cg_journal_genesis(), 65);
		}
		char line[8192];
		int n = snprintf(line, sizeof(line),
				 "{\"seq\":%llu,\"trace\":\"%s\",\"tseq\":%llu,\"type\":\"%s\","
				 "\"ts\":\"%s\",\"prev\":\"%s\",\"tprev\":\"%s\",\"payload\":%.*s",
				 (unsigned long long)o.seq, o.trace, (unsigned long long)o.tseq,
				 o.type_name, o.ts, head, th[ti], (int)o.payload_len,
				 o.seq == from ? "{\"forged\":true}" : b + pos + o.payload_off);
		if (o.seq < from) {
			cg_buf_add(&out, b + pos, ll);
			memcpy(head, o.hash, 65);
			memcpy(th[ti], o.hash, 65);
		} else {
			if (o.seq == from)
				n = snprintf(
				    line, sizeof(line),
				    "{\"seq\":%llu,\"trace\":\"%s\",\"tseq\":%llu,\"type\":"
				    "\"%s\",\"ts\":\"%s\",\"prev\":\"%s\",\"tprev\":\"%s\","
				    "\"payload\":{\"forged\":true}",
				    (unsigned long long)o.seq, o.trace, (unsigned long long)o.tseq,
				    o.type_name, o.ts, head, th[ti]);
			char h[65];
			cg_sha256_hex(line, (size_t)n, h);
			cg_buf_add(&out, line, (size_t)n);
			cg_buf_add(&out, ",\"hash\":\"", 9);
			cg_buf_add(&out, h, 64);
			cg_buf_add(&out, "\"}\n", 3);
			memcpy(head, h, 65);
			memcpy(th[ti], h, 65);
		}
		pos += ll;
	}
	spit("journal/0000000000000001.ndjson", (const char *)out.p, out.len);
	cg_buf_free(&out);
	free(b);
}

Test(evidence, journal_rewritten_with_recomputed_hashes_is_named_checkpoint_mismatch)
{
	two_calls();
	rewrite_journal_from(3);
	json_t *rep = NULL;
	int rc = replay(NULL, &rep);
	char *t = failures_text(rep);
	cr_assert_eq(rc, 1, "%s", t);
	cr_assert(has_failure(rep, "checkpoint_mismatch"), "%s", t);
	/* The chains themselves verify: only the signature catches this. */
	cr_assert(!has_failure(rep, "hash") && !has_failure(rep, "link"), "%s", t);
	free(t);
	json_decref(rep);
}

Test(evidence, checkpoint_signature_tamper_is_named)
{
	two_calls();
	size_t len;
	char *b = slurp("checkpoints.ndjson", &len);
	char *p = strstr(b, "\"sig\":\"");
	p[8] = p[8] == 'A' ? 'B' : 'A';
	spit("checkpoints.ndjson", b, len);
	free(b);
	ASSERT_FAILS_WITH(NULL, "checkpoint_signature");
}

Test(evidence, journal_tail_removed_is_named_journal_truncated)
{
	two_calls();
	size_t len, st[256];
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	size_t n = line_starts(b, len, st, 256);
	spit("journal/0000000000000001.ndjson", b, st[n - 1]);
	free(b);
	ASSERT_FAILS_WITH(NULL, "journal_truncated");
}

Test(evidence, exec_without_permit_is_critical_and_recorded_at_seal)
{
	struct cg_evidence *ev = open_ev(0);
	emit_call(ev, "t3", "ALLOW", false, true);
	cg_evidence_close(ev);
	ASSERT_FAILS_WITH("t3", "exec_without_permit");
	json_t *v = load_json("traces/t3/replay.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "status")), "FAIL");
	json_decref(v);
}

Test(evidence, exec_after_block_is_critical)
{
	struct cg_evidence *ev = open_ev(0);
	emit_call(ev, "t4", "BLOCK", true, true);
	cg_evidence_close(ev);
	ASSERT_FAILS_WITH("t4", "exec_despite_block");
}

Test(evidence, tampered_verdict_json_is_named)
{
	two_calls();
	json_t *v = load_json("traces/t2/verdict.json");
	json_object_set_new(v, "decision", json_string("ALLOW"));
	char p[512];
	path_of(p, sizeof(p), "traces/t2/verdict.json");
	json_dump_file(v, p, 0);
	json_decref(v);
	ASSERT_FAILS_WITH("t2", "verdict_mismatch");
}

Test(evidence, appends_refuse_bad_input)
{
	struct cg_evidence *ev = open_ev(0);
	errno = 0;
	cr_assert_eq(cg_evidence_append(ev, "../x", CG_EV_REQUEST, json_object(), false), -1);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(cg_evidence_append(ev, "t", CG_EV_SEAL, json_object(), false), -1);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(cg_evidence_append(ev, "journal", CG_EV_REQUEST, json_object(), false), -1);
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_eq(cg_evidence_append(ev, "t", CG_EV_REQUEST, json_string("x"), false), -1);
	cr_assert_eq(errno, EINVAL);
	cg_evidence_close(ev);
}

Test(evidence, second_writer_is_refused)
{
	struct cg_evidence *ev = open_ev(0);
	struct cg_evidence_config c = { .state_dir = state };
	struct cg_evidence *ev2 = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev2, &err), -1);
	cr_assert_eq(err->id, CG_R_EVIDENCE_LOCKED);
	cg_reply_free(err);
	cg_evidence_close(ev);
}

Test(evidence, key_is_private_and_stable)
{
	two_calls();
	char p[512];
	struct stat st;
	path_of(p, sizeof(p), "keys/evidence.key");
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	size_t n1, n2;
	char *a = slurp("keys/evidence.pub", &n1);
	struct cg_evidence *ev = open_ev(0);
	cg_evidence_close(ev);
	char *b = slurp("keys/evidence.pub", &n2);
	cr_assert(n1 == n2 && memcmp(a, b, n1) == 0, "the key survives restarts");
	free(a);
	free(b);
	/* A key others can read is refused, not used. */
	cr_assert_eq(chmod(p, 0644), 0);
	struct cg_evidence_config c = { .state_dir = state };
	struct cg_evidence *ev2 = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev2, &err), -1);
	cr_assert_eq(err->id, CG_R_EVIDENCE_OPEN_FAILED);
	cg_reply_free(err);
}

Test(evidence, torn_tail_is_set_aside_and_recorded)
{
	two_calls();
	char p[512];
	path_of(p, sizeof(p), "journal/0000000000000001.ndjson");
	int fd = open(p, O_WRONLY | O_APPEND | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "{\"seq\":99,\"trace\":\"t", 20), 20);
	close(fd);
	struct cg_evidence *ev = open_ev(0);
	cg_evidence_close(ev);
	path_of(p, sizeof(p), "journal");
	size_t len;
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	cr_assert(strstr(b, "\"type\":\"recovery\"") != NULL, "a recovery event records it");
	cr_assert(strstr(b, "torn-journal-") != NULL);
	free(b);
	/* The torn bytes are preserved, byte for byte. */
	char *t = NULL;
	size_t tl = 0;
	char tp[600];
	/* named after the last whole event: two calls and the stop */
	snprintf(tp, sizeof(tp), "%s/journal/torn-journal-%016llu.bin", state, 19ull);
	cr_assert_eq(cg_file_read(tp, 4096, &t, &tl), 0, "%s", tp);
	cr_assert_eq(tl, 20);
	cr_assert_eq(memcmp(t, "{\"seq\":99,\"trace\":\"t", 20), 0);
	free(t);
	ASSERT_PASSES(NULL);
}

Test(evidence, crash_leaves_trace_incomplete_not_sealed)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct cg_evidence_config c = { .state_dir = state, .write_traces = true };
		struct cg_evidence *ev = NULL;
		struct cg_reply *err = NULL;
		if (cg_evidence_open(&c, &ev, &err) < 0)
			_exit(2);
		if (cg_evidence_append(ev, "t5", CG_EV_REQUEST, json_object(), false) < 0 ||
		    cg_evidence_append(ev, "t5", CG_EV_DECISION,
				       json_pack("{s:s}", "decision", "ALLOW"), false) < 0 ||
		    cg_evidence_append(ev, "t5", CG_EV_PERMIT, json_object(), true) < 0)
			_exit(3);
		_exit(0); /* no close: as if killed */
	}
	int st;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct cg_evidence *ev = open_ev(0);
	cg_evidence_close(ev);
	json_t *rep = NULL;
	cr_assert_eq(replay("t5", &rep), 1, "an incomplete trace is not PASS");
	json_t *t = json_array_get(json_object_get(rep, "traces"), 0);
	cr_assert_str_eq(json_string_value(json_object_get(t, "status")), "INCOMPLETE");
	json_decref(rep);
	ASSERT_PASSES(NULL);
	json_t *v = load_json("traces/t5/verdict.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "status")), "incomplete");
	json_decref(v);
}

Test(evidence, corrupt_journal_refuses_to_open)
{
	two_calls();
	size_t len;
	char *b = slurp("journal/0000000000000001.ndjson", &len);
	char *p = strstr(b, "/usr/bin/true");
	p[5] = 'X';
	spit("journal/0000000000000001.ndjson", b, len);
	free(b);
	/* The changed event is before the last checkpoint: a full verification finds it… */
	struct cg_evidence_config c = { .state_dir = state, .verify_all = true };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev, &err), -1);
	cr_assert_eq(err->id, CG_R_EVIDENCE_JOURNAL_CORRUPT);
	cg_reply_free(err);
	/* … and so does a start with no resume point to go on from. */
	char p2[512];
	snprintf(p2, sizeof(p2), "%s/journal.resume", state);
	cr_assert_eq(unlink(p2), 0);
	c.verify_all = false;
	err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev, &err), -1);
	cr_assert_eq(err->id, CG_R_EVIDENCE_JOURNAL_CORRUPT);
	cg_reply_free(err);
}

Test(evidence, segments_rotate_and_a_removed_segment_is_named)
{
	struct cg_evidence *ev = open_ev(4096);
	char id[16];
	for (int i = 0; i < 20; i++) {
		snprintf(id, sizeof(id), "r%d", i);
		emit_call(ev, id, "ALLOW", true, true);
	}
	cg_evidence_close(ev);
	char **names;
	size_t n;
	cr_assert_eq(cg_journal_segments(state, &names, &n), 0);
	cr_assert_gt(n, 3);
	ASSERT_PASSES(NULL);
	char p[512];
	snprintf(p, sizeof(p), "%s/journal/%s", state, names[1]);
	cr_assert_eq(unlink(p), 0);
	cg_strv_free(names, n);
	ASSERT_FAILS_WITH(NULL, "line_deleted");
}

/* replay --all of the state, with the test pinned to the given CPUs meanwhile. */
static json_t *replay_all_on(const cpu_set_t *cpus)
{
	cpu_set_t was;
	cr_assert_eq(sched_getaffinity(0, sizeof(was), &was), 0);
	cr_assert_eq(sched_setaffinity(0, sizeof(*cpus), cpus), 0);
	struct cg_replay_opts o = { .state_dir = state, .all = true };
	json_t *rep = NULL;
	int rc = cg_replay_run(&o, &rep);
	cr_assert_eq(sched_setaffinity(0, sizeof(was), &was), 0);
	cr_assert_eq(rc, 1, "the tampered state must not verify");
	/* When each trace was checked is the one thing two runs may differ in. */
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(rep, "traces"), i, t) json_object_del(t, "checked_at");
	return rep;
}

/*
 * replay --all parses the journal and checks the traces on every CPU it may
 * use. Over a journal large enough to be split (thousands of lines, hundreds
 * of traces, many segments), with a line spoilt in a middle segment, a
 * package's verdict edited and another package removed, the report must be
 * the one a single CPU gives, failure for failure and trace for trace, and
 * must name the spoilt line by its segment and line number.
 */
Test(evidence, replay_on_every_cpu_reports_what_one_cpu_does)
{
	cpu_set_t all, one;
	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	if (CPU_COUNT(&all) < 2)
		cr_skip_test("one CPU: nothing runs in parallel to compare");
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			break;
		}
	struct cg_evidence *ev = open_ev(64 * 1024);
	char id[16];
	for (int i = 0; i < 400; i++) {
		snprintf(id, sizeof(id), "c%d", i);
		emit_call(ev, id, i % 10 ? "BLOCK" : "ALLOW", i % 10 == 0, i % 10 == 0);
	}
	cg_evidence_close(ev);
	char **names;
	size_t n;
	cr_assert_eq(cg_journal_segments(state, &names, &n), 0);
	cr_assert_gt(n, 6);
	char rel[128], file[128];
	snprintf(rel, sizeof(rel), "journal/%s", names[5]);
	snprintf(file, sizeof(file), "journal/%s", names[5]);
	cg_strv_free(names, n);
	size_t len = 0, starts[4096];
	char *b = slurp(rel, &len);
	cr_assert_gt(line_starts(b, len, starts, 4096), 8);
	b[starts[6]] = '['; /* line 7 no longer starts an event */
	spit(rel, b, len);
	free(b);
	spit("traces/c123/verdict.json", "{}\n", 3);
	char p[512];
	path_of(p, sizeof(p), "traces/c300");
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
	cr_assert_eq(system(cmd), 0);

	json_t *many = replay_all_on(&all), *single = replay_all_on(&one);
	char *a = json_dumps(many, JSON_COMPACT), *s = json_dumps(single, JSON_COMPACT);
	cr_assert(json_equal(many, single), "on every CPU:\n%.3000s\non one:\n%.3000s", a, s);
	cr_assert_eq(json_array_size(json_object_get(many, "traces")), 400, "%.2000s", a);
	bool line = false, verdict = false, gone = false;
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(many, "failures"), i, f)
	{
		const char *check = json_string_value(json_object_get(f, "check"));
		const char *where = json_string_value(json_object_get(f, "file"));
		const char *trace = json_string_value(json_object_get(f, "trace_id"));
		line |= strcmp(check, "schema") == 0 && where && strcmp(where, file) == 0 &&
			json_integer_value(json_object_get(f, "line")) == 7;
		verdict |=
		    strcmp(check, "verdict_mismatch") == 0 && trace && strcmp(trace, "c123") == 0;
		gone |=
		    strcmp(check, "trace_dir_missing") == 0 && trace && strcmp(trace, "c300") == 0;
	}
	cr_assert(line && verdict && gone, "line %d verdict %d gone %d in %.3000s", line, verdict,
		  gone, a);
	free(a);
	free(s);
	json_decref(many);
	json_decref(single);
}

struct dur_arg {
	struct cg_evidence *ev;
	int idx;
	int fails;
};

static void *durable_worker(void *p)
{
	struct dur_arg *a = p;
	for (int i = 0; i < 50; i++) {
		char id[32];
		snprintf(id, sizeof(id), "d%d-%d", a->idx, i);
		if (cg_evidence_append(a->ev, id, CG_EV_REQUEST, json_object(), false) < 0 ||
		    cg_evidence_append(a->ev, id, CG_EV_PERMIT, json_object(), true) < 0)
			a->fails++;
	}
	return NULL;
}

Test(evidence, concurrent_durable_appends_all_land_in_order)
{
	struct cg_evidence *ev = open_ev(0);
	pthread_t th[8];
	struct dur_arg a[8];
	for (int i = 0; i < 8; i++) {
		a[i] = (struct dur_arg){ ev, i, 0 };
		pthread_create(&th[i], NULL, durable_worker, &a[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(a[i].fails, 0);
	}
	cg_evidence_close(ev);
	struct cg_journal_view jv;
	json_t *diff = json_array();
	cr_assert_eq(cg_journal_load(state, &jv, diff), 0);
	/* 800 events + one incomplete marker per trace (never sealed) + the stop */
	cr_assert_eq(jv.n, 800 + 400 + 1);
	cr_assert_eq(jv.v[jv.n - 1].type, CG_EV_STOPPED);
	cg_evlines_check_chain(jv.v, jv.n, true, "journal", diff);
	cr_assert_eq(json_array_size(diff), 0);
	cg_journal_view_free(&jv);
	json_decref(diff);
}

Test(evidence, verdict_normalisation_fails_closed_and_derives_next_steps)
{
	json_t *in = json_pack("{s:s, s:{s:s, s:s, s:s}}", "decision", "maybe", "reply", "type",
			       "I", "code", "MCP-VAL-I-001", "message", "bad");
	json_t *v = cg_verdict_normalize(in, "tx");
	cr_assert_str_eq(json_string_value(json_object_get(v, "decision")), "UNKNOWN");
	cr_assert(strstr(json_string_value(json_array_get(json_object_get(v, "next_steps"), 0)),
			 "Fix the request"));
	json_decref(v);
	json_decref(in);
	in = json_pack("{s:s, s:{s:s}, s:{s:s, s:s, s:s}}", "decision", "DEGRADE", "constraints",
		       "net", "none", "reply", "type", "E", "code", "MCP-SYS-E-001", "message",
		       "x\033[31m");
	v = cg_verdict_normalize(in, "ty");
	cr_assert(strstr(json_string_value(json_array_get(json_object_get(v, "next_steps"), 0)),
			 "report trace ty"));
	cr_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(v, "constrained"), 0), "constraint")),
			 "net");
	char *md = cg_verdict_render_md(v);
	cr_assert(strchr(md, '\033') == NULL, "no escape sequences reach the terminal");
	free(md);
	json_decref(v);
	json_decref(in);
}

Test(evidence, missing_key_with_existing_journal_refuses_to_start)
{
	two_calls();
	char p[512];
	path_of(p, sizeof(p), "keys/evidence.key");
	cr_assert_eq(unlink(p), 0);
	struct cg_evidence_config c = { .state_dir = state };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev, &err), -1);
	cr_assert_eq(err->id, CG_R_EVIDENCE_OPEN_FAILED);
	cr_assert(access(p, F_OK) != 0, "no new key was made");
	cg_reply_free(err);
}

/*
 * An UNKNOWN call's events, as the kernel emits them when a human answers:
 * approval.requested, then one approval.answered per answer, then (only if
 * let through) permit and execution.
 */
static void emit_deferred(struct cg_evidence *ev, const char *id, json_t *answer, bool run)
{
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_REQUEST,
					json_pack("{s:[[s]]}", "pipeline", "/usr/bin/id"), false),
		     0);
	cr_assert_eq(cg_evidence_append(
			 ev, id, CG_EV_DECISION,
			 json_pack("{s:s, s:s}", "decision", "UNKNOWN", "rule_id", "privileged"),
			 false),
		     0);
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_APPROVAL_REQ,
					json_pack("{s:i}", "approvers_needed", 2), false),
		     0);
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_APPROVAL_ANS, answer, false), 0);
	if (run) {
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_PERMIT, json_object(), true), 0);
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_EXEC_START, json_object(), false), 0);
		cr_assert_eq(cg_evidence_append(ev, id, CG_EV_EXEC_END, json_object(), false), 0);
	}
	cr_assert_eq(cg_evidence_append(ev, id, CG_EV_VERDICT, json_object(), false), 0);
	cr_assert_eq(
	    cg_evidence_seal(ev, id,
			     json_pack("{s:s,s:{s:s,s:s,s:s}}", "decision", "UNKNOWN", "reply",
				       "type", "S", "code", "MCP-EXEC-S-001", "message", "done")),
	    0);
}

Test(evidence, approved_unknown_may_run_only_after_the_last_approval)
{
	struct cg_evidence *ev = open_ev(0);
	emit_deferred(
	    ev, "ok2of2",
	    json_pack("{s:s,s:i,s:i,s:i}", "outcome", "approved", "uid", 0, "have", 2, "need", 2),
	    true);
	emit_deferred(ev, "grant1", json_pack("{s:s,s:s}", "outcome", "grant", "grant_id", "g"),
		      true);
	emit_deferred(
	    ev, "half",
	    json_pack("{s:s,s:i,s:i,s:i}", "outcome", "approved", "uid", 0, "have", 1, "need", 2),
	    true);
	emit_deferred(ev, "denied", json_pack("{s:s,s:i}", "outcome", "denied", "uid", 0), true);
	emit_deferred(ev, "timeout", json_pack("{s:s}", "outcome", "timeout"), false);
	cg_evidence_close(ev);
	ASSERT_PASSES("ok2of2");
	ASSERT_PASSES("grant1");
	ASSERT_PASSES("timeout");
	ASSERT_FAILS_WITH("half", "exec_despite_block");
	ASSERT_FAILS_WITH("denied", "exec_despite_block");
}

/*
 * Write-ahead: when the journal cannot be written, a durable append (the
 * permit that lets a command run) MUST fail, never report success.
 */
Test(evidence, durable_append_fails_when_the_journal_cannot_be_written)
{
	struct cg_evidence *ev = open_ev(0);
	/* Writes past 1 byte now fail with EFBIG (Criterion runs each test in its own process). */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit rl = { 1, 1 };
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	int rc = cg_evidence_append(ev, "wf", CG_EV_REQUEST, json_object(), true);
	cr_assert_neq(rc, 0, "a durable append that was not written reported success");
	rc = cg_evidence_append(ev, "wf", CG_EV_PERMIT, json_object(), true);
	cr_assert_neq(rc, 0, "later durable appends fail too (the journal is failed)");
	cg_evidence_close(ev);
}

/* A gated append does not wait; its gate opens GO once the event is on disk. */
Test(evidence, gated_append_opens_its_gate_once_on_disk)
{
	struct cg_evidence *ev = open_ev(0);
	_Atomic uint32_t gate = CG_GATE_PENDING;
	cr_assert_eq(
	    cg_evidence_append(ev, "g1", CG_EV_REQUEST, json_pack("{s:s}", "x", "y"), false), 0);
	cr_assert_eq(cg_evidence_append_gated(ev, "g1", CG_EV_PERMIT,
					      json_pack("{s:s}", "decision", "ALLOW"), &gate),
		     0);
	cr_assert_eq(cg_gate_wait(&gate, 10000), 0);
	/* On disk when GO: a reader of the journal finds the permit now. */
	size_t n;
	char *j = slurp("journal/0000000000000001.ndjson", &n);
	cr_assert(strstr(j, "\"type\":\"permit\""), "no permit in the journal");
	free(j);
	/* Refused at once (the writer's event types are not a caller's): the gate stays shut. */
	_Atomic uint32_t bad = CG_GATE_PENDING;
	cr_assert_eq(cg_evidence_append_gated(ev, "g1", CG_EV_SEAL, json_object(), &bad), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(atomic_load(&bad), CG_GATE_PENDING);
	cg_evidence_close(ev);
}

/* A journal that cannot write opens the gate REFUSED: the waiter never hears GO. */
Test(evidence, gated_append_on_a_failed_journal_is_refused)
{
	struct cg_evidence *ev = open_ev(0);
	/* No file may grow (RLIMIT_FSIZE 0, SIGXFSZ ignored): the next batch fails. */
	_Atomic uint32_t gate = CG_GATE_PENDING;
	struct rlimit old;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	struct rlimit small = { 0, old.rlim_max };
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = cg_evidence_append_gated(ev, "g2", CG_EV_PERMIT,
					  json_pack("{s:s}", "decision", "ALLOW"), &gate);
	int waited = rc == 0 ? cg_gate_wait(&gate, 10000) : -1;
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	cr_assert_eq(rc, 0);
	cr_assert_eq(waited, EIO, "the gate opened %u", (unsigned)atomic_load(&gate));
	cg_evidence_close(ev);
}

/* n refused calls, traces PREFIX0 .. PREFIX(n-1). */
static void emit_refusals(struct cg_evidence *ev, const char *prefix, int n)
{
	for (int i = 0; i < n; i++) {
		char id[16];
		snprintf(id, sizeof(id), "%s%d", prefix, i);
		emit_call(ev, id, "BLOCK", false, false);
	}
}

/*
 * cg_evidence_wake_below (the server's admission waits on it): written at
 * once when evidence is already below the level, written by the evidence
 * threads once their work brings it there, never while it is not below, and
 * never again after a cancel.
 */
Test(evidence, wake_below_writes_the_eventfd_only_below_the_level)
{
	struct cg_evidence *ev = open_ev(0);
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	cr_assert_geq(efd, 0);
	uint64_t v = 0;
	/* Idle: below any positive level, so at once. */
	cg_evidence_wake_below(ev, 1, efd);
	cr_assert_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	/* Once only: more work and its completion write nothing more. */
	emit_refusals(ev, "w", 20);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	cr_assert_eq(read(efd, &v, sizeof(v)), -1);
	cr_assert_eq(errno, EAGAIN);
	/* Level 0: pending is never below it, whatever the threads do. */
	cg_evidence_wake_below(ev, 0, efd);
	emit_refusals(ev, "x", 200);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	cr_assert_eq(read(efd, &v, sizeof(v)), -1);
	cr_assert_eq(cg_evidence_pending(ev), 0);
	cg_evidence_close(ev);
	/* Asked while work is pending (the writer sleeps 300 ms per batch): not
	 * yet, then written once that work is done. */
	setenv("CALLGATE_TEST_EVIDENCE_STALL_MS", "300", 1);
	ev = open_ev(0);
	unsetenv("CALLGATE_TEST_EVIDENCE_STALL_MS");
	emit_call(ev, "z1", "BLOCK", false, false);
	cg_evidence_wake_below(ev, 1, efd);
	cr_assert_eq(read(efd, &v, sizeof(v)), -1, "woken while %zu was pending",
		     cg_evidence_pending(ev));
	struct pollfd pf = { .fd = efd, .events = POLLIN };
	cr_assert_eq(poll(&pf, 1, 20000), 1, "never woken");
	cr_assert_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	cr_assert_eq(cg_evidence_pending(ev), 0);
	/* Armed while work is pending, then cancelled: its completion writes nothing. */
	emit_call(ev, "y1", "BLOCK", false, false);
	cg_evidence_wake_below(ev, 1, efd);
	cg_evidence_wake_below(ev, 1, -1);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	cr_assert_eq(read(efd, &v, sizeof(v)), -1);
	cg_evidence_close(ev);
	close(efd);
}

/* A refusal as the kernel records it: the request, resolution, decision and reply in one. */
static json_t *refusal_payload(const char *decision, const char *message)
{
	return json_pack("{s:{s:s,s:s,s:[[sss]]}, s:{s:i,s:i,s:i}, s:{s:[{s:s}],s:s,s:s},"
			 " s:{s:s,s:s,s:s,s:[{s:s,s:s,s:s,s:s,s:s}],s:[],s:{s:s,s:i}},"
			 " s:{s:s,s:s,s:s,s:s}}",
			 "request", "id", "r1", "action", "exec", "pipeline", "rm", "-rf", "/",
			 "peer", "pid", 1, "uid", 1000, "gid", 1000, "resolved", "stages", "exe",
			 "/usr/bin/rm", "cwd", "/w", "workspace", "/w", "decision", "decision",
			 decision, "rule_id", "rm-rf", "rung", "policy", "rungs", "rung", "policy",
			 "decision", decision, "rule_id", "rm-rf", "reason", "EN-EXEC-D-001", "why",
			 "no recursive delete", "constraints", "policy", "sha256",
			 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			 "generation", 3, "reply", "type", "D", "code", "EN-EXEC-D-001",
			 "message_key", "DENIED_BY_RULE", "message", message);
}

/*
 * A refusal is one event that seals its trace: nothing else is written for
 * it, its package verifies, its verdict is what the event says, and a
 * changed verdict.json, an event after it or one before it fails replay.
 */
Test(evidence, refusal_is_one_event_that_seals_its_trace)
{
	struct cg_evidence *ev = open_ev(0);
	cr_assert_eq(cg_evidence_refuse(ev, "r1", refusal_payload("BLOCK", "Denied by rm-rf.")), 0);
	emit_call(ev, "t1", "ALLOW", true, true);
	cg_evidence_close(ev);
	size_t len = 0;
	char *b = slurp("traces/r1/events.ndjson", &len);
	cr_assert_eq(memchr(b, '\n', len), b + len - 1, "one line: %.*s", (int)len, b);
	cr_assert_not_null(strstr(b, "\"tseq\":1,\"type\":\"refusal\""));
	free(b);
	ASSERT_PASSES(NULL);
	json_t *v = load_json("traces/r1/verdict.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "decision")), "BLOCK");
	cr_assert_str_eq(json_string_value(json_object_get(v, "outcome")), "blocked");
	cr_assert(json_is_false(json_object_get(v, "executed")));
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "reply"), "message")),
			 "Denied by rm-rf.");
	cr_assert_str_eq(
	    json_string_value(json_object_get(
		json_object_get(json_object_get(v, "decided_by"), "policy"), "sha256")),
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	/* Spelled otherwise (compact, keys sorted), the same verdict still passes. */
	char p[512];
	path_of(p, sizeof(p), "traces/r1/verdict.json");
	cr_assert_eq(json_dump_file(v, p, JSON_COMPACT | JSON_SORT_KEYS), 0);
	ASSERT_PASSES("r1");
	/* The package may not say more than the event: a changed message is named. */
	json_object_set_new(json_object_get(v, "reply"), "message", json_string("fine"));
	json_dump_file(v, p, 0);
	json_decref(v);
	ASSERT_FAILS_WITH("r1", "verdict_mismatch");
}

/*
 * A refusal's package is rendered from the payload the writer serialised
 * into its line, not from the line parsed again: every file must be what
 * the line's own bytes give, byte for byte, text that needs escaping too.
 */
Test(evidence, refusal_package_is_what_its_line_gives)
{
	struct cg_evidence *ev = open_ev(0);
	json_t *p = refusal_payload("BLOCK", "Denied: \"quoted\", a\ttab, \xc3\xa9, \xe2\x80\xa8, "
					     "\\ and / too.");
	json_object_set_new(json_object_get(p, "peer"), "pid",
			    json_integer(INT64_C(9007199254740993)));
	cr_assert_eq(cg_evidence_refuse(ev, "r9", p), 0);
	cg_evidence_close(ev);
	size_t elen = 0;
	char *events = slurp("traces/r9/events.ndjson", &elen);
	json_t *rdoc = load_json("traces/r9/replay.json");
	json_t *diff = load_json("traces/r9/diff.json");
	struct cg_package want;
	cr_assert_eq(cg_package_render(events, elen, NULL, NULL, rdoc, diff, &want), 0);
	for (size_t i = 0; i < CG_PACKAGE_N; i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "traces/r9/%s", cg_package_names[i]);
		size_t n = 0;
		char *got = slurp(rel, &n);
		cr_assert(n == want.len[i] && memcmp(got, want.data[i], n) == 0,
			  "%s differs from its line's:\n%.*s\n---\n%.*s", cg_package_names[i],
			  (int)n, got, (int)want.len[i], want.data[i]);
		free(got);
	}
	cg_package_free(&want);
	json_decref(rdoc);
	json_decref(diff);
	free(events);
	ASSERT_PASSES("r9");
}

Test(evidence, events_around_a_refusal_fail_its_structure)
{
	struct cg_evidence *ev = open_ev(0);
	/* After it: the trace was already sealed. */
	cr_assert_eq(cg_evidence_refuse(ev, "r2", refusal_payload("BLOCK", "no")), 0);
	cr_assert_eq(cg_evidence_append(ev, "r2", CG_EV_EXEC_START, json_object(), false), 0);
	/* Before it: a refusal is the whole trace. */
	cr_assert_eq(cg_evidence_append(ev, "r3", CG_EV_REQUEST, json_object(), false), 0);
	cr_assert_eq(cg_evidence_refuse(ev, "r3", refusal_payload("BLOCK", "no")), 0);
	cg_evidence_close(ev);
	ASSERT_FAILS_WITH("r2", "event_after_seal");
	ASSERT_FAILS_WITH("r3", "structure");
}

Test(evidence, refusal_appends_refuse_bad_input)
{
	struct cg_evidence *ev = open_ev(0);
	/* A refusal without its reply says nothing: refused, never written. */
	errno = 0;
	cr_assert_eq(cg_evidence_refuse(ev, "r4", json_pack("{s:{}}", "request")), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(cg_evidence_refuse(ev, "journal", refusal_payload("BLOCK", "no")), -1);
	/* Nor one whose decision replay could not read (the writer's check trusts it). */
	cr_assert_eq(cg_evidence_refuse(ev, "r4", refusal_payload("BLOCK-AND-THEN-SOME", "no")),
		     -1);
	json_t *bad = refusal_payload("BLOCK", "no");
	json_object_set_new(json_object_get(bad, "decision"), "decision", json_integer(1));
	cr_assert_eq(cg_evidence_refuse(ev, "r4", bad), -1);
	/* Nor can a caller append one as a plain event (it would seal without the check). */
	cr_assert_eq(
	    cg_evidence_append(ev, "r4", CG_EV_REFUSAL, refusal_payload("BLOCK", "no"), false), -1);
	cg_evidence_close(ev);
	char p[512];
	path_of(p, sizeof(p), "traces/r4");
	cr_assert_neq(access(p, F_OK), 0, "nothing was written for r4");
}

/* The package of a refusal is rebuilt from the journal alone, verdict and replay included. */
Test(evidence, refusal_package_is_rebuilt_from_the_journal)
{
	struct cg_evidence *ev = open_ev(0);
	cr_assert_eq(cg_evidence_refuse(ev, "r5", refusal_payload("BLOCK", "Denied.")), 0);
	cg_evidence_close(ev);
	size_t len = 0, vlen = 0;
	char *events = slurp("traces/r5/events.ndjson", &len);
	char *before = slurp("traces/r5/verdict.json", &vlen);
	char p[512];
	path_of(p, sizeof(p), "traces/r5");
	rmrf(p);
	cr_assert_eq(cg_trace_rebuild_package(state, "r5", events, len), 0);
	size_t alen = 0;
	char *after = slurp("traces/r5/verdict.json", &alen);
	cr_assert_eq(alen, vlen);
	cr_assert_eq(memcmp(before, after, vlen), 0, "the same verdict.json");
	free(after);
	char *rp = slurp("traces/r5/replay.json", &alen);
	cr_assert_not_null(strstr(rp, "\"PASS\""), "%s", rp);
	free(rp);
	free(before);
	free(events);
	ASSERT_PASSES("r5");
}

/* Journal events past the last signed checkpoint, as replay reports them (without writing). */
static json_int_t unsigned_tail(void)
{
	struct cg_replay_opts o = { .state_dir = state, .all = true };
	json_t *rep = NULL;
	cr_assert_eq(cg_replay_run(&o, &rep), 0, "the journal does not verify");
	json_t *n = json_object_get(json_object_get(rep, "journal"), "unsigned_tail");
	cr_assert(json_is_integer(n), "replay reported no unsigned_tail");
	json_int_t v = json_integer_value(n);
	json_decref(rep);
	return v;
}

/* Checkpoints signed so far: one line each in checkpoints.ndjson. */
static size_t checkpoints_signed(void)
{
	char p[512], *b = NULL;
	size_t len = 0, n = 0;
	path_of(p, sizeof(p), "checkpoints.ndjson");
	if (cg_file_read(p, 1u << 24, &b, &len) == 0)
		for (size_t i = 0; i < len; i++)
			n += b[i] == '\n';
	free(b);
	return n;
}

/*
 * Seals close together share a checkpoint (one is signed at most every
 * 10 ms for them), and none is left unsigned: once a seal was seen waiting
 * for the next checkpoint (two sealed right after one another, the second
 * signing nothing), with no further work and the interval checkpoint a
 * minute away, the writer still signs it by itself. Seeing the wait is a
 * count of lines, not a replay, so that a loaded machine still sees it.
 */
Test(evidence, every_seal_is_signed_soon_without_more_work)
{
	struct cg_evidence *ev = open_ev_with(0, 60000);
	size_t before = 0;
	bool waited = false;
	for (int i = 0; i < 500 && !waited; i++) {
		char a[16], b[16];
		snprintf(a, sizeof(a), "a%d", i);
		snprintf(b, sizeof(b), "b%d", i);
		cr_assert_eq(cg_evidence_refuse(ev, a, refusal_payload("BLOCK", "no")), 0);
		cr_assert_eq(cg_evidence_flush(ev), 0);
		before = checkpoints_signed();
		cr_assert_eq(cg_evidence_refuse(ev, b, refusal_payload("BLOCK", "no")), 0);
		cr_assert_eq(cg_evidence_flush(ev), 0);
		waited = checkpoints_signed() == before;
	}
	cr_assert(waited, "no seal of 500 close pairs waited for a shared checkpoint");
	for (int i = 0; i < 500 && checkpoints_signed() == before; i++)
		usleep(10000);
	cr_assert_gt(checkpoints_signed(), before, "the waiting seal was not signed within 5 s");
	cr_assert_eq(unsigned_tail(), 0, "events are still unsigned");
	cg_evidence_close(ev);
	ASSERT_PASSES(NULL);
}

/*
 * A refusal does not wake the writer at once (it waits up to 1 ms for
 * company), but it is never left behind: queued alone to a writer asleep
 * with nothing due, it still reaches the journal and its package, with no
 * further work from anyone.
 */
Test(evidence, a_lone_refusal_is_written_without_more_work)
{
	struct cg_evidence *ev = open_ev_with(0, 50);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	usleep(300000); /* everything checkpointed: the writer sleeps with nothing due */
	cr_assert_eq(cg_evidence_refuse(ev, "alone", refusal_payload("BLOCK", "no")), 0);
	bool seen = false;
	for (int i = 0; i < 200 && !seen; i++) {
		usleep(10000);
		char jp[512], vp[512], *b = NULL, *v = NULL;
		size_t len = 0;
		path_of(jp, sizeof(jp), "journal/0000000000000001.ndjson");
		path_of(vp, sizeof(vp), "traces/alone/verdict.json");
		seen = cg_file_read(jp, 1u << 30, &b, &len) == 0 &&
		       cg_file_read(vp, 1u << 30, &v, &len) == 0 &&
		       strstr(b, "\"trace\":\"alone\"");
		free(b);
		free(v);
	}
	cr_assert(seen, "the refusal was not written within 2 s");
	cg_evidence_close(ev);
	ASSERT_PASSES(NULL);
}

static struct cg_evidence *open_ev_archive(void)
{
	struct cg_evidence_config c = { .state_dir = state, .write_traces = true, .archive = true };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev, &err), 0, "open failed");
	return ev;
}

/* A start that verifies the whole journal, so recovery repairs every segment's archive. */
static struct cg_evidence *open_ev_archive_verifying_all(void)
{
	struct cg_evidence_config c = {
		.state_dir = state, .write_traces = true, .archive = true, .verify_all = true
	};
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	cr_assert_eq(cg_evidence_open(&c, &ev, &err), 0, "open failed");
	return ev;
}

static off_t file_size(const char *rel)
{
	char p[512];
	struct stat st;
	path_of(p, sizeof(p), rel);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

#define LIVE_TAR "traces/archive/0000000000000001.tar"
#define LIVE_IDX "traces/archive/0000000000000001.idx"

/* The live archive's index is exactly "t1 0\n" and second's line at off. */
static void assert_index_t1_and(const char *second, off_t off)
{
	size_t len = 0;
	char *idx = slurp(LIVE_IDX, &len), want[64];
	snprintf(want, sizeof(want), "t1 0\n%s %lld\n", second, (long long)off);
	cr_assert_str_eq(idx, want);
	free(idx);
}

/*
 * evidence.packages: archive. Packages are appended to the segment's archive
 * as they are sealed: no directory per trace, every package readable and
 * verified from the archive, and a changed byte in it is named.
 */
Test(evidence, archive_packages_are_appended_as_they_are_sealed)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cr_assert_eq(cg_evidence_refuse(ev, "r1", refusal_payload("BLOCK", "Denied.")), 0);
	emit_call(ev, "t2", "BLOCK", false, false);
	cg_evidence_close(ev);
	char p[512];
	path_of(p, sizeof(p), "traces/t1");
	cr_assert_neq(access(p, F_OK), 0, "no directory for t1");
	path_of(p, sizeof(p), "traces/r1");
	cr_assert_neq(access(p, F_OK), 0, "no directory for r1");
	size_t len = 0;
	char *idx = slurp(LIVE_IDX, &len);
	for (const char *const *id = (const char *const[]){ "t1", "r1", "t2", NULL }; *id; id++) {
		char line[16];
		snprintf(line, sizeof(line), "%s ", *id);
		cr_assert(strncmp(idx, line, strlen(line)) == 0 ||
			      (snprintf(line, sizeof(line), "\n%s ", *id), strstr(idx, line)),
			  "%s is not in the index: %s", *id, idx);
	}
	free(idx);
	cr_assert_eq(file_size(LIVE_TAR) % 512, 0);
	char *v = NULL;
	size_t vlen = 0;
	cr_assert_eq(cg_package_read(state, "r1", "verdict.json", 1 << 20, &v, &vlen), 0);
	cr_assert_not_null(strstr(v, "\"BLOCK\""), "%s", v);
	free(v);
	ASSERT_PASSES(NULL);
	/* A byte of r1's events.ndjson member changed in the archive: named. */
	size_t tlen = 0;
	char *tar = slurp(LIVE_TAR, &tlen);
	char *at = memmem(tar, tlen, "Denied.", 7); /* events.ndjson comes first */
	cr_assert_not_null(at);
	at[0] = 'd';
	spit(LIVE_TAR, tar, tlen);
	free(tar);
	ASSERT_FAILS_WITH("r1", "hash");
}

/*
 * A crash mid-append tears the archive's tail: half a package in the tar and
 * half a line in the index. The next start cuts both off, the packages
 * written after it land whole, and everything verifies.
 */
Test(evidence, a_torn_archive_tail_is_cut_off_at_the_next_start)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cg_evidence_close(ev);
	off_t whole = file_size(LIVE_TAR);
	size_t len = 0;
	char *tar = slurp(LIVE_TAR, &len);
	/* t1's first member again, cut short, as if a second package had been torn. */
	char *torn = malloc(len + 700);
	memcpy(torn, tar, len);
	memcpy(torn + len, tar, 700);
	spit(LIVE_TAR, torn, len + 700);
	free(torn);
	free(tar);
	char p[512];
	path_of(p, sizeof(p), LIVE_IDX);
	FILE *f = fopen(p, "ae");
	fputs("t9 10", f); /* no newline: the line was never finished */
	fclose(f);
	ev = open_ev_archive();
	cr_assert_eq(file_size(LIVE_TAR), whole, "the torn tail was cut off");
	emit_call(ev, "t2", "BLOCK", false, false);
	cg_evidence_close(ev);
	assert_index_t1_and("t2", whole);
	ASSERT_PASSES(NULL);
}

/*
 * The index is derived from the tar: lost, it is rebuilt at the next start
 * from the packages the tar holds whole, and nothing whole is cut (it used
 * to cut the whole tar to nothing). No package is rebuilt as a directory.
 */
Test(evidence, a_lost_index_is_rebuilt_from_the_archive)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	off_t t1_end = file_size(LIVE_TAR);
	emit_call(ev, "t2", "BLOCK", false, false);
	cg_evidence_close(ev);
	off_t whole = file_size(LIVE_TAR);
	char p[512];
	path_of(p, sizeof(p), LIVE_IDX);
	cr_assert_eq(unlink(p), 0);
	ev = open_ev_archive_verifying_all();
	cg_evidence_close(ev);
	cr_assert_eq(file_size(LIVE_TAR), whole, "nothing whole was cut");
	assert_index_t1_and("t2", t1_end);
	path_of(p, sizeof(p), "traces/t2");
	cr_assert_neq(access(p, F_OK), 0, "t2's package is the archive's, not rebuilt");
	ASSERT_PASSES(NULL);
}

/*
 * A hole: write-back lost out of order at a power cut zeroed one package's
 * bytes, and the index lost its lines from there on. The packages after the
 * hole are whole: they stay and get their lines back (they used to be cut
 * off); the lost one is rebuilt from the journal, and replay --all names
 * the hole.
 */
Test(evidence, whole_packages_after_a_hole_are_kept)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	off_t t1_end = file_size(LIVE_TAR);
	emit_call(ev, "t2", "BLOCK", false, false);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	off_t t2_end = file_size(LIVE_TAR);
	emit_call(ev, "t3", "BLOCK", false, false);
	cg_evidence_close(ev);
	off_t whole = file_size(LIVE_TAR);
	size_t len = 0;
	char *tar = slurp(LIVE_TAR, &len);
	memset(tar + t1_end, 0, (size_t)(t2_end - t1_end));
	spit(LIVE_TAR, tar, len);
	free(tar);
	spit(LIVE_IDX, "t1 0\n", 5);
	ev = open_ev_archive_verifying_all();
	cg_evidence_close(ev);
	cr_assert_eq(file_size(LIVE_TAR), whole, "nothing after the hole was cut");
	assert_index_t1_and("t3", t2_end);
	char p[512];
	path_of(p, sizeof(p), "traces/t2/verdict.json");
	cr_assert_eq(access(p, F_OK), 0, "t2 was rebuilt from the journal");
	ASSERT_FAILS_WITH(NULL, "archive_layout");
}

/*
 * Zeros after the last package (an end-of-archive marker, as retention
 * writes) stay when a start repairs the archive, and go only before the
 * next append, which must not land after them (tar readers stop there).
 */
Test(evidence, end_of_archive_zeros_stay_until_the_next_append)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cg_evidence_close(ev);
	off_t whole = file_size(LIVE_TAR);
	char p[512], zeros[1024] = { 0 };
	path_of(p, sizeof(p), LIVE_TAR);
	FILE *f = fopen(p, "ae");
	cr_assert_eq(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
	fclose(f);
	ev = open_ev_archive_verifying_all();
	cr_assert_eq(file_size(LIVE_TAR), whole + 1024, "the start left the marker");
	ASSERT_PASSES(NULL);
	emit_call(ev, "t2", "BLOCK", false, false);
	cg_evidence_close(ev);
	assert_index_t1_and("t2", whole);
	ASSERT_PASSES(NULL);
}

/*
 * Write-back lost at a power cut: the index names packages whose bytes never
 * reached the disk. The repair drops every such line, not only the last;
 * a full verification at start then rebuilds those packages from the
 * journal, and everything verifies.
 */
Test(evidence, index_lines_naming_lost_bytes_are_dropped_and_rebuilt)
{
	struct cg_evidence *ev = open_ev_archive();
	emit_call(ev, "t1", "ALLOW", true, true);
	cr_assert_eq(cg_evidence_flush(ev), 0);
	off_t t1_end = file_size(LIVE_TAR);
	emit_call(ev, "t2", "BLOCK", false, false);
	cr_assert_eq(cg_evidence_refuse(ev, "r3", refusal_payload("BLOCK", "Denied.")), 0);
	cg_evidence_close(ev);
	char p[512];
	path_of(p, sizeof(p), LIVE_TAR);
	cr_assert_eq(truncate(p, t1_end), 0); /* t2's and r3's members never landed */
	ev = open_ev_archive_verifying_all();
	size_t len = 0;
	char *idx = slurp(LIVE_IDX, &len);
	cr_assert_str_eq(idx, "t1 0\n");
	free(idx);
	cr_assert_eq(file_size(LIVE_TAR), t1_end);
	cg_evidence_close(ev);
	path_of(p, sizeof(p), "traces/t2/verdict.json");
	cr_assert_eq(access(p, F_OK), 0, "t2 was rebuilt from the journal");
	path_of(p, sizeof(p), "traces/r3/verdict.json");
	cr_assert_eq(access(p, F_OK), 0, "r3 was rebuilt from the journal");
	ASSERT_PASSES(NULL);
}

/*
 * A line of type `type` around `payload`, as cg_evline_parse reads it (the
 * hash is not checked by the parse: hash_ok is a separate fact).
 */
static int parse_payload(const char *type, const char *payload, struct cg_evline *o)
{
	char line[8192];
	snprintf(
	    line, sizeof(line),
	    "{\"seq\":1,\"trace\":\"11111111-2222-4333-8444-555555555555\",\"tseq\":1,"
	    "\"type\":\"%s\",\"ts\":\"2026-11-27T00:00:00.000Z\",\"prev\":\"%s\",\"tprev\":\"%s\","
	    "\"payload\":%s,\"hash\":\"%s\"}\n",
	    type, cg_journal_genesis(), cg_journal_genesis(), payload, cg_journal_genesis());
	const char *check;
	char why[200];
	return cg_evline_parse(line, strlen(line), o, &check, why, sizeof(why));
}

/*
 * The payload fields the structure check needs are read without building a
 * tree when jansson would read them alike, and by jansson otherwise: the
 * answers must be jansson's either way (repeated keys at any depth, escapes,
 * bytes jansson refuses, numbers that overflow, members of the wrong kind).
 */
Test(evidence, payload_fields_read_as_jansson_reads_them)
{
	struct cg_evline o;
	const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char buf[4096];
	cr_assert_eq(
	    parse_payload("refusal", "{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{}}", &o),
	    0);
	cr_assert_str_eq(o.decision, "BLOCK");
	cr_assert_eq(parse_payload("refusal", "{\"reply\":{\"code\":\"x\"}}", &o), 0);
	cr_assert_str_eq(o.decision, "");
	cr_assert_eq(parse_payload("refusal",
				   "{\"decision\":{\"decision\":\"BL\\u004fCK\"},\"reply\":{}}",
				   &o),
		     0);
	cr_assert_str_eq(o.decision, "BLOCK", "an escaped value is decoded as jansson does");
	const char *bad_refusals[] = {
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":[]}",
		"{\"decision\":null,\"reply\":{}}",
		"{\"decision\":{\"rule\":\"x\"},\"reply\":{}}",
		"{\"decision\":{\"decision\":\"BLOCK\"}}",
		"{\"decision\":{\"decision\":\"BLOCK\",\"decision\":\"ALLOW\"},\"reply\":{}}",
		"{\"decision\":{\"decision\":\"BLOCK\",\"decisio\\u006e\":\"ALLOW\"},\"reply\":{}}",
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{\"a\":{\"b\":{\"c\":1,\"c\":2}}}"
		"}",
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{\"m\":\"\\u0000\"}}",
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{\"m\":\"\xff\"}}",
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{\"n\":123456789012345678901234}"
		"}",
		"{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{\"n\":1e999}}",
	};
	for (size_t i = 0; i < sizeof(bad_refusals) / sizeof(bad_refusals[0]); i++)
		cr_assert_lt(parse_payload("refusal", bad_refusals[i], &o), 0, "accepted: %s",
			     bad_refusals[i]);
	/* Wider than the key check tracks: a repeat among 60 keys is still found. */
	size_t at = (size_t)snprintf(buf, sizeof(buf),
				     "{\"decision\":{\"decision\":\"BLOCK\"},\"reply\":{");
	for (int i = 0; i < 60; i++)
		at += (size_t)snprintf(buf + at, sizeof(buf) - at, "\"k%d\":1,", i);
	snprintf(buf + at, sizeof(buf) - at, "\"k3\":2}}");
	cr_assert_lt(parse_payload("refusal", buf, &o), 0);
	cr_assert_eq(
	    parse_payload("decision", "{\"decision\":\"ALLOW\",\"x\":[1,2.5,{\"y\":true}]}", &o),
	    0);
	cr_assert_str_eq(o.decision, "ALLOW");
	cr_assert_lt(parse_payload("decision", "{\"rule\":\"x\"}", &o), 0);
	cr_assert_lt(parse_payload("decision", "{\"decision\":7}", &o), 0);

	cr_assert_eq(parse_payload("approval.answered",
				   "{\"outcome\":\"approved\",\"have\":2,\"need\":2}", &o),
		     0);
	cr_assert(o.lets_run);
	cr_assert_eq(parse_payload("approval.answered",
				   "{\"outcome\":\"approved\",\"have\":1,\"need\":2}", &o),
		     0);
	cr_assert_not(o.lets_run);
	cr_assert_eq(parse_payload("approval.answered",
				   "{\"outcome\":\"approved\",\"have\":2.0,\"need\":2}", &o),
		     0);
	cr_assert_not(o.lets_run, "a real is not an integer to jansson");
	cr_assert_eq(parse_payload("approval.answered", "{\"outcome\":\"gr\\u0061nt\"}", &o), 0);
	cr_assert(o.lets_run);
	cr_assert_eq(parse_payload("approval.answered",
				   "{\"outcome\":\"denied\",\"have\":9,\"need\":1}", &o),
		     0);
	cr_assert_not(o.lets_run);

	snprintf(buf, sizeof(buf), "{\"events\":3,\"head\":\"%s\"}", hex);
	cr_assert_eq(parse_payload("seal", buf, &o), 0);
	cr_assert_eq(o.seal_events, 3);
	cr_assert_str_eq(o.seal_head, hex);
	const char *bad_seals[][2] = { { "{\"events\":-1,\"head\":\"", "\"}" },
				       { "{\"events\":3e0,\"head\":\"", "\"}" },
				       { "{\"events\":3,\"head\":\"x", "\"}" },
				       { "{\"events\":3,\"events\":4,\"head\":\"", "\"}" },
				       { "{\"events\":99999999999999999999,\"head\":\"", "\"}" } };
	for (size_t i = 0; i < sizeof(bad_seals) / sizeof(bad_seals[0]); i++) {
		snprintf(buf, sizeof(buf), "%s%s%s", bad_seals[i][0], hex, bad_seals[i][1]);
		cr_assert_lt(parse_payload("seal", buf, &o), 0, "accepted: %s", buf);
	}
	/* Other types' payloads are checked for form only, as before. */
	cr_assert_eq(parse_payload("rung", "{\"a\":1,\"a\":2}", &o), 0);
}

/*
 * A grant's opening reads as one (outcome grant_opened, nothing blocked)
 * since 2026-11-27; a package written before, which read "answered" with
 * the whole request blocked, still replays (the same journal, its older
 * view), and a verdict that is neither still fails.
 */
Test(evidence, a_grant_opening_replays_in_either_view)
{
	struct cg_evidence *ev = open_ev(0);
	cr_assert_eq(cg_evidence_append(ev, "g1", CG_EV_REQUEST,
					json_pack("{s:s, s:{s:s}, s:i}", "admin", "grant_open",
						  "grant", "grant_id", "G1", "uid", 0),
					false),
		     0);
	cr_assert_eq(
	    cg_evidence_append(ev, "g1", CG_EV_VERDICT,
			       json_pack("{s:s, s:s, s:{s:s, s:s}}", "decision", "ALLOW", "rule_id",
					 "", "reply", "type", "S", "code", "CT-OPEN-S-001"),
			       false),
	    0);
	cr_assert_eq(
	    cg_evidence_seal(ev, "g1",
			     json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "decision", "ALLOW",
				       "rule_id", "", "reply", "type", "S", "code", "CT-OPEN-S-001",
				       "message", "Grant G1 opened.")),
	    0);
	cg_evidence_close(ev);
	ASSERT_PASSES("g1");
	json_t *v = load_json("traces/g1/verdict.json");
	cr_assert_str_eq(json_string_value(json_object_get(v, "outcome")), "grant_opened");
	cr_assert_eq(json_array_size(json_object_get(v, "blocked")), 0);
	json_decref(v);
	size_t n;
	char *events = slurp("traces/g1/events.ndjson", &n);
	json_t *sealed = NULL; /* the seal's own, as the package writer takes it */
	json_t *old = cg_verdict_with_events_legacy(sealed, events, n);
	cr_assert_not_null(old);
	cr_assert_str_eq(json_string_value(json_object_get(old, "outcome")), "answered");
	size_t jl = 0;
	char *oj = cg_package_json(old, &jl);
	char *om = cg_verdict_render_md(old);
	spit("traces/g1/verdict.json", oj, jl);
	spit("traces/g1/verdict.md", om, strlen(om));
	ASSERT_PASSES("g1");
	/* Neither view: a verdict that says the grant was refused. */
	json_object_set_new(old, "outcome", json_string("refused"));
	free(oj);
	oj = cg_package_json(old, &jl);
	spit("traces/g1/verdict.json", oj, jl);
	ASSERT_FAILS_WITH("g1", "verdict_mismatch");
	free(oj);
	free(om);
	free(events);
	json_decref(old);
}
