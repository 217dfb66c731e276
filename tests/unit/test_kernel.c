/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the kernel, in process: cg_kernel_handle over a small
 * policy (ping, an invalid line, a BLOCK, an ALLOW of /bin/true with its
 * evidence in a temporary state dir, a gate dry run, defaults.cwd), the
 * public error struct of cg_kernel_new and cg_kernel_reload, the one
 * gate (cg_gate_decide) called directly, as the CLI and benchmarks do, and
 * the per-call log hook (cg_kernel_config.on_call): one record per answered
 * call, whatever path answered it, with the facts of its response.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "callgate.h"
#include "evidence.h"
#include "gate.h"
#include "policy.h"
#include "retention.h"
#include "util.h"
#include "world.h"

static const char policy_yaml[] = "version: 1\n"
				  "defaults:\n"
				  "  cwd: \"${workspace}/sub\"\n"
				  "rules:\n"
				  "  - id: true-ok\n"
				  "    decision: allow\n"
				  "    match: { exe: [true] }\n"
				  "  - id: rm-in-sub\n"
				  "    decision: allow\n"
				  "    match:\n"
				  "      exe: [rm]\n"
				  "      min_args: 1\n"
				  "      args_all:\n"
				  "        - within: \"${workspace}/sub\"\n";

static char tmp[256], ws[320], state[320], policy_path[320];
static struct cg_kernel *k;
static struct cg_peer peer;

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	fclose(f);
}

static void make_dirs(void)
{
	char t[] = "/tmp/cg-kernel-XXXXXX";
	cr_assert_not_null(mkdtemp(t));
	char *canon = realpath(t, NULL);
	cr_assert_not_null(canon);
	snprintf(tmp, sizeof(tmp), "%s", canon);
	free(canon);
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	snprintf(policy_path, sizeof(policy_path), "%s/policy.yaml", tmp);
	cr_assert_eq(mkdir(ws, 0755), 0);
	char sub[PATH_MAX + 8];
	snprintf(sub, sizeof(sub), "%s/sub", ws);
	cr_assert_eq(mkdir(sub, 0755), 0);
	write_file(policy_path, policy_yaml);
	peer = (struct cg_peer){ .pid = getpid(), .uid = getuid(), .gid = getgid() };
	signal(SIGPIPE, SIG_IGN);
}

static void setup(void)
{
	make_dirs();
	const char *wss[] = { ws };
	struct cg_kernel_config cfg = { .policy_file = policy_path,
					.state_dir = state,
					.workspaces = wss,
					.n_workspaces = 1,
					.n_workers = 2 };
	struct cg_result why;
	int rc = cg_kernel_new(&cfg, &k, &why);
	cr_assert_eq(rc, 0, "cg_kernel_new: %c %s %s", why.type, why.code, why.message);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

static void rm_rf(const char *path)
{
	(void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void teardown(void)
{
	cg_kernel_free(k);
	k = NULL;
	rm_rf(tmp);
}

/* A request line: {"time": now, <fields>}. Caller frees. */
static char *request(const char *fields)
{
	char t[40];
	cg_format_time(cg_now_wall_ns(), t, sizeof(t));
	size_t n = strlen(fields) + 64;
	char *line = malloc(n);
	cr_assert_not_null(line);
	snprintf(line, n, "{\"time\":\"%s\",%s}", t, fields);
	return line;
}

/* Handle a line in the kernel and parse the response (caller decrefs). */
static json_t *handle(const char *line)
{
	size_t len = 0;
	char *resp = cg_kernel_handle(k, line, strlen(line), true, &peer, &len);
	cr_assert_not_null(resp);
	cr_assert(len > 0 && resp[len - 1] == '\n', "one line, newline-terminated");
	json_error_t e;
	json_t *j = json_loadb(resp, len, 0, &e);
	cr_assert_not_null(j, "response is JSON: %s: %s", e.text, resp);
	free(resp);
	return j;
}

static json_t *handle_fields(const char *fields)
{
	char *line = request(fields);
	json_t *j = handle(line);
	free(line);
	return j;
}

static const char *reply_str(const json_t *resp, const char *key)
{
	return json_string_value(json_object_get(json_object_get(resp, "reply"), key));
}

static const char *data_str(const json_t *resp, const char *key)
{
	json_t *data = json_object_get(json_object_get(resp, "reply"), "data");
	return json_string_value(json_object_get(data, key));
}

TestSuite(kernel, .init = setup, .fini = teardown, .timeout = 60);

Test(kernel, ping_answers_pong_with_the_policy)
{
	json_t *r = handle_fields("\"action\":\"ping\"");
	cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "ok");
	cr_assert_str_eq(reply_str(r, "type"), "S");
	cr_assert_str_eq(reply_str(r, "code"), "MCP-SYS-S-001");
	cr_assert_eq(strlen(reply_str(r, "trace_id")), 36);
	json_t *pol =
	    json_object_get(json_object_get(json_object_get(r, "reply"), "data"), "policy");
	cr_assert_eq(json_integer_value(json_object_get(pol, "generation")), 1);
	json_decref(r);
}

Test(kernel, an_invalid_line_is_an_I_reply)
{
	json_t *r = handle("{\"pipeline\": [[\"ls\"]");
	cr_assert_str_eq(reply_str(r, "type"), "I");
	cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "error");
	cr_assert_null(json_object_get(r, "stdout"), "nothing ran");
	json_decref(r);
	/* A dangerous env name is refused by the codec, before any rule. */
	r = handle_fields("\"pipeline\":[[\"true\"]],\"privileged\":false,"
			  "\"env\":{\"LD_PRELOAD\":\"/x.so\"}");
	cr_assert_str_eq(reply_str(r, "type"), "I");
	json_decref(r);
}

Test(kernel, no_rule_is_a_block_by_default_deny)
{
	json_t *r = handle_fields("\"pipeline\":[[\"ls\"]],\"privileged\":false");
	cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "denied");
	cr_assert_str_eq(reply_str(r, "type"), "D");
	cr_assert_eq(strncmp(reply_str(r, "code"), "EN-", 3), 0, "an EN refusal");
	cr_assert_str_eq(data_str(r, "decision"), "BLOCK");
	cr_assert_str_eq(data_str(r, "rule_id"), "default-deny");
	cr_assert_null(json_object_get(r, "stdout"), "nothing ran");
	json_decref(r);
}

/* Does path exist (any type)? */
static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

Test(kernel, an_allowed_true_runs_and_leaves_evidence)
{
	json_t *r = handle_fields("\"pipeline\":[[\"true\"]],\"privileged\":false");
	cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "ok", "%s",
			 reply_str(r, "message"));
	cr_assert_str_eq(reply_str(r, "code"), "MCP-EXEC-S-001");
	cr_assert_str_eq(data_str(r, "decision"), "ALLOW");
	cr_assert_str_eq(data_str(r, "rule_id"), "true-ok");
	json_t *params = json_object_get(json_object_get(r, "reply"), "params");
	cr_assert_eq(json_integer_value(json_object_get(params, "exit_code")), 0);
	char trace[40];
	snprintf(trace, sizeof(trace), "%s", reply_str(r, "trace_id"));
	json_decref(r);

	/* Closing the kernel flushes the journal and the trace package. */
	cg_kernel_free(k);
	k = NULL;
	char p[PATH_MAX * 2];
	snprintf(p, sizeof(p), "%s/journal", state);
	cr_assert(exists(p), "the journal exists");
	/* The package as the default writes it: appended to its segment's archive. */
	snprintf(p, sizeof(p), "%s/traces/%s", state, trace);
	cr_assert(!exists(p), "no directory per call by default: %s", p);
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(cg_package_read(state, trace, "verdict.json", 1 << 20, &text, &len), 0,
		     "the trace package has its verdict: %s", strerror(errno));
	json_error_t e;
	json_t *v = json_loadb(text, len, 0, &e);
	free(text);
	cr_assert_not_null(v, "%s", e.text);
	cr_assert_str_eq(json_string_value(json_object_get(v, "decision")), "ALLOW");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "reply"), "code")),
			 "MCP-EXEC-S-001");
	json_decref(v);
}

Test(kernel, gate_is_a_dry_run_under_defaults_cwd)
{
	/* rm foo from ${workspace}/sub (the policy's defaults.cwd): allowed. */
	json_t *r = handle_fields("\"action\":\"gate\",\"pipeline\":[[\"rm\",\"foo\"]],"
				  "\"privileged\":false");
	cr_assert_str_eq(reply_str(r, "code"), "MCP-GATE-S-001");
	json_t *params = json_object_get(json_object_get(r, "reply"), "params");
	cr_assert_str_eq(json_string_value(json_object_get(params, "decision")), "ALLOW");
	cr_assert_str_eq(json_string_value(json_object_get(params, "rule_id")), "rm-in-sub");
	cr_assert_null(json_object_get(r, "stdout"), "a gate request runs nothing");
	json_decref(r);

	/* The request's own cwd wins: from the workspace root, foo is outside sub. */
	char fields[PATH_MAX + 128];
	snprintf(fields, sizeof(fields),
		 "\"action\":\"gate\",\"pipeline\":[[\"rm\",\"foo\"]],\"privileged\":false,"
		 "\"cwd\":\"%s\"",
		 ws);
	r = handle_fields(fields);
	params = json_object_get(json_object_get(r, "reply"), "params");
	cr_assert_str_eq(json_string_value(json_object_get(params, "decision")), "BLOCK");
	json_decref(r);
}

Test(kernel, a_replayed_id_is_refused_and_an_invalid_one_is_not_consumed)
{
	json_t *r = handle_fields("\"id\":\"unit-1\",\"action\":\"gate\",\"pipeline\":[[\"true\"]],"
				  "\"privileged\":false");
	cr_assert_str_eq(reply_str(r, "code"), "MCP-GATE-S-001");
	json_decref(r);
	r = handle_fields("\"id\":\"unit-1\",\"action\":\"gate\",\"pipeline\":[[\"true\"]],"
			  "\"privileged\":false");
	cr_assert_str_eq(reply_str(r, "type"), "I");
	cr_assert_str_eq(reply_str(r, "code"), "MCP-VAL-I-013");
	json_decref(r);
	/* Refused at resolution (no such command): the id is given back. */
	r = handle_fields("\"id\":\"unit-2\",\"pipeline\":[[\"no-such-command-cg\"]],"
			  "\"privileged\":false");
	cr_assert_str_eq(reply_str(r, "type"), "I");
	json_decref(r);
	r = handle_fields("\"id\":\"unit-2\",\"action\":\"gate\",\"pipeline\":[[\"true\"]],"
			  "\"privileged\":false");
	cr_assert_str_eq(reply_str(r, "code"), "MCP-GATE-S-001");
	json_decref(r);
}

Test(kernel, reload_reports_a_result_struct)
{
	struct cg_result res;
	cr_assert_eq(cg_kernel_reload(k, &res), 0);
	cr_assert_eq(res.type, 'S');
	cr_assert_str_eq(res.code, "MCP-CFG-S-001");
	write_file(policy_path, "version: 1\nrules: [ not yaml\n");
	cr_assert_eq(cg_kernel_reload(k, &res), -1);
	cr_assert_eq(res.type, 'E');
	cr_assert_str_eq(res.code, "MCP-CFG-E-001");
	cr_assert(strlen(res.message) > 0);
	/* The old generation (2) stays in force. */
	char sha[65];
	uint64_t gen = 0;
	cg_kernel_policy_identity(k, sha, &gen);
	cr_assert_eq(gen, 2);
}

Test(kernel_new, a_missing_policy_fails_with_a_result_struct)
{
	make_dirs();
	char missing[PATH_MAX + 16];
	snprintf(missing, sizeof(missing), "%s/nope.yaml", tmp);
	const char *wss[] = { ws };
	struct cg_kernel_config cfg = { .policy_file = missing,
					.workspaces = wss,
					.n_workspaces = 1 };
	struct cg_kernel *k2 = NULL;
	struct cg_result why;
	cr_assert_eq(cg_kernel_new(&cfg, &k2, &why), -1);
	cr_assert_null(k2);
	cr_assert_eq(why.type, 'E');
	cr_assert_str_eq(why.code, "MCP-CFG-E-001");
	cr_assert_not_null(strstr(why.message, "nope.yaml"), "%s", why.message);
	rm_rf(tmp);
}

/* ---- the one gate, directly ---------------------------------------------- */

struct gate_fixture {
	struct cg_policy *policy;
	struct cg_world world;
	struct cg_chain chain;
	struct cg_gate_ctx ctx;
};

static void gate_fixture_init(struct gate_fixture *f)
{
	make_dirs();
	struct cg_reply *err = NULL;
	memset(f, 0, sizeof(*f));
	cr_assert_eq(
	    cg_policy_load_buffer("unit", policy_yaml, strlen(policy_yaml), &f->policy, &err), 0);
	const char *wss[] = { ws };
	cr_assert_eq(cg_world_init(&f->world, wss, 1, &err), 0);
	cr_assert_eq(cg_policy_register_rungs(&f->chain, f->policy), 0);
	f->ctx =
	    (struct cg_gate_ctx){ .policy = f->policy, .chain = &f->chain, .world = &f->world };
}

static void gate_fixture_fini(struct gate_fixture *f)
{
	cg_world_fini(&f->world);
	cg_policy_unref(f->policy);
	rm_rf(tmp);
}

static int gate_line(struct gate_fixture *f, const char *fields, struct cg_gate *g)
{
	char *line = request(fields);
	int rc = cg_gate_decide(&f->ctx, line, strlen(line), true, false, &peer, NULL, NULL, g);
	free(line);
	return rc;
}

Test(gate, decides_with_the_policys_defaults)
{
	struct gate_fixture f;
	gate_fixture_init(&f);
	struct cg_gate g;
	cr_assert_eq(gate_line(&f, "\"pipeline\":[[\"rm\",\"foo\"]],\"privileged\":false", &g), 0);
	cr_assert_eq(g.step, CG_GATE_DECIDED);
	cr_assert(g.resolved);
	cr_assert_eq(g.folded.decision, CG_ALLOW);
	cr_assert_str_eq(g.folded.rule_id, "rm-in-sub");
	char want[PATH_MAX + 8];
	snprintf(want, sizeof(want), "%s/sub", ws);
	cr_assert_str_eq(g.call.cwd, want, "defaults.cwd applied");
	cr_assert_null(g.refusal, "an allowed call carries no refusal");
	cr_assert_eq(g.timeout_ms, 30000, "the policy's default deadline");
	cg_gate_fini(&g);
	gate_fixture_fini(&f);
}

Test(gate, says_which_step_refused)
{
	struct gate_fixture f;
	gate_fixture_init(&f);
	struct cg_gate g;
	/* Decode. */
	cr_assert_eq(cg_gate_decide(&f.ctx, "{", 1, true, false, &peer, NULL, NULL, &g), -1);
	cr_assert_eq(g.step, CG_GATE_DECODE);
	cr_assert_eq(cg_reply_def_of(g.refusal)->type, CG_RTYPE_I);
	cg_gate_fini(&g);
	/* Resolve. */
	cr_assert_eq(gate_line(&f, "\"pipeline\":[[\"no-such-command-cg\"]]", &g), -1);
	cr_assert_eq(g.step, CG_GATE_RESOLVE);
	cr_assert_eq(cg_reply_def_of(g.refusal)->layer, CG_LAYER_WA);
	cg_gate_fini(&g);
	/* Decided, but refused: the EN refusal is built from the fold. */
	cr_assert_eq(gate_line(&f, "\"pipeline\":[[\"ls\"]],\"privileged\":false", &g), 0);
	cr_assert_eq(g.step, CG_GATE_DECIDED);
	cr_assert_eq(g.folded.decision, CG_BLOCK);
	cr_assert_not_null(g.refusal);
	cr_assert_eq(cg_reply_def_of(g.refusal)->type, CG_RTYPE_D);
	cr_assert_eq(cg_reply_def_of(g.refusal)->layer, CG_LAYER_EN);
	cg_gate_fini(&g);
	/* Ping is decoded, not resolved. */
	cr_assert_eq(gate_line(&f, "\"action\":\"ping\"", &g), 0);
	cr_assert_eq(g.step, CG_GATE_ACTION);
	cr_assert(!g.resolved);
	cg_gate_fini(&g);
	gate_fixture_fini(&f);
}

/* An admit hook that refuses everything, to show it runs before resolution. */
static int refuse_all(void *arg, const struct cg_request *req, int64_t now_ns,
		      struct cg_reply **refusal)
{
	(void)req;
	(void)now_ns;
	(*(int *)arg)++;
	*refusal = cg_reply_new(CG_R_ID_REPLAYED, "{s:s}", "id", "x");
	return -1;
}

Test(gate, the_admit_hook_runs_between_decode_and_resolve)
{
	struct gate_fixture f;
	gate_fixture_init(&f);
	struct cg_gate g;
	int calls = 0;
	char *line = request("\"pipeline\":[[\"no-such-command-cg\"]]");
	cr_assert_eq(
	    cg_gate_decide(&f.ctx, line, strlen(line), true, false, &peer, refuse_all, &calls, &g),
	    -1);
	free(line);
	cr_assert_eq(calls, 1);
	cr_assert_eq(g.step, CG_GATE_ADMIT, "refused before resolution could fail");
	cr_assert_eq(g.refusal->id, CG_R_ID_REPLAYED);
	cg_gate_fini(&g);
	gate_fixture_fini(&f);
}

/* ---- the typed verdict ---------------------------------------------------- */

/*
 * verdict.json from typed facts must equal what normalising the same facts
 * as JSON gave before (behaviour unchanged), for a refusal with rungs and
 * for a success with no fold (the why[] made from the reply).
 */
Test(verdict, rendering_facts_equals_normalising_their_json)
{
	json_t *why =
	    json_pack("[{s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s}]", "rung", "privilege", "decision",
		      "ALLOW", "layer", "EN", "code", "EN-EXEC-S-001", "rung", "policy", "decision",
		      "BLOCK", "rule_id", "default-deny", "layer", "EN", "code", "EN-EXEC-D-002");
	json_t *cons = json_pack("[{s:[s]}]", "write", "${workspace}");
	json_t *extra = json_pack("{s:{s:s,s:i}}", "policy", "sha256", "ab", "generation", 3);
	struct cg_verdict_facts f = { .decision = "BLOCK",
				      .rule_id = "default-deny",
				      .summary = "Denied.",
				      .reply_type = 'D',
				      .reply_code = "EN-EXEC-D-002",
				      .layer = CG_LAYER_EN,
				      .message = "Denied.",
				      .why = why,
				      .constrained = cons,
				      .next_step = "escalate",
				      .confidence = 1.0,
				      .extra = extra };
	json_t *in = json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s},s:O,s:O,s:s,s:f,s:O}", "decision",
			       "BLOCK", "rule_id", "default-deny", "summary", "Denied.", "reply",
			       "type", "D", "code", "EN-EXEC-D-002", "message_key", "K", "message",
			       "Denied.", "why", why, "constrained", cons, "next_steps", "escalate",
			       "confidence", 1.0, "policy", json_object_get(extra, "policy"));
	json_t *a = cg_verdict_render(&f, "t1"), *b = cg_verdict_normalize(in, "t1");
	cr_assert(json_equal(a, b), "render and normalize differ");
	json_decref(a);
	json_decref(b);
	json_decref(in);

	/* A success with no fold: why[] is made from the reply and its layer. */
	struct cg_verdict_facts s = { .decision = "ALLOW",
				      .rule_id = "",
				      .summary = "callgate is alive.",
				      .reply_type = 'S',
				      .reply_code = "MCP-SYS-S-001",
				      .layer = CG_LAYER_MCP,
				      .message = "callgate is alive.",
				      .next_step = "continue",
				      .confidence = 1.0,
				      .extra = extra };
	in = json_pack("{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s},s:[],s:[],s:s,s:f,s:O}", "decision",
		       "ALLOW", "rule_id", "", "summary", "callgate is alive.", "reply", "type",
		       "S", "code", "MCP-SYS-S-001", "message_key", "PONG", "message",
		       "callgate is alive.", "why", "constrained", "next_steps", "continue",
		       "confidence", 1.0, "policy", json_object_get(extra, "policy"));
	a = cg_verdict_render(&s, "t2");
	b = cg_verdict_normalize(in, "t2");
	cr_assert(json_equal(a, b), "render and normalize differ (no fold)");
	cr_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(a, "why"), 0), "layer")),
			 "MCP");
	json_decref(a);
	json_decref(b);
	json_decref(in);
	json_decref(why);
	json_decref(cons);
	json_decref(extra);
}

/* ---- the per-call log hook ---------------------------------------------- */

static struct cg_call_record seen[8];
static char seen_text[8][6][64]; /* trace, host, decision, rule, code, type */
static size_t n_seen;

static void on_call(void *arg, const struct cg_call_record *rec)
{
	cr_assert_eq(arg, (void *)&n_seen);
	cr_assert_lt(n_seen, 8u);
	seen[n_seen] = *rec;
	snprintf(seen_text[n_seen][0], 64, "%s", rec->trace_id);
	snprintf(seen_text[n_seen][1], 64, "%s", rec->host);
	snprintf(seen_text[n_seen][2], 64, "%s", rec->decision);
	snprintf(seen_text[n_seen][3], 64, "%s", rec->rule_id);
	snprintf(seen_text[n_seen][4], 64, "%s", rec->reply_code);
	n_seen++;
}

static void setup_logged(void)
{
	make_dirs();
	n_seen = 0;
	const char *wss[] = { ws };
	struct cg_kernel_config cfg = { .policy_file = policy_path,
					.workspaces = wss,
					.n_workspaces = 1,
					.n_workers = 2,
					.on_call = on_call,
					.on_call_arg = &n_seen };
	struct cg_result why;
	cr_assert_eq(cg_kernel_new(&cfg, &k, &why), 0, "%s", why.message);
}

TestSuite(call_log, .init = setup_logged, .fini = teardown, .timeout = 60);

Test(call_log, one_record_per_call_with_its_facts)
{
	json_t *ran = handle_fields("\"pipeline\":[[\"true\"]],\"privileged\":false,"
				    "\"host\":\"box-1\"");
	json_t *blocked = handle_fields("\"pipeline\":[[\"ls\"]],\"privileged\":false");
	json_t *invalid = handle("{\"pipeline\": [[\"ls\"]");
	cr_assert_eq(n_seen, 3, "one record per call, got %zu", n_seen);

	cr_assert_str_eq(seen_text[0][0], reply_str(ran, "trace_id"));
	cr_assert_eq(seen[0].peer_pid, getpid());
	cr_assert_eq(seen[0].peer_uid, getuid());
	cr_assert_str_eq(seen_text[0][1], "box-1");
	cr_assert_str_eq(seen_text[0][2], "ALLOW");
	cr_assert_str_eq(seen_text[0][3], "true-ok");
	cr_assert_str_eq(seen_text[0][4], "MCP-EXEC-S-001");
	cr_assert_eq(seen[0].reply_type, 'S');
	cr_assert(seen[0].ran);
	cr_assert_eq(seen[0].exit_code, 0);

	cr_assert_str_eq(seen_text[1][0], reply_str(blocked, "trace_id"));
	cr_assert_str_eq(seen_text[1][1], "");
	cr_assert_str_eq(seen_text[1][2], "BLOCK");
	cr_assert_str_eq(seen_text[1][3], "default-deny");
	cr_assert_str_eq(seen_text[1][4], reply_str(blocked, "code"));
	cr_assert_eq(seen[1].reply_type, 'D');
	cr_assert_not(seen[1].ran);

	cr_assert_str_eq(seen_text[2][0], reply_str(invalid, "trace_id"));
	cr_assert_eq(seen[2].reply_type, 'I');
	cr_assert_str_eq(seen_text[2][2], "BLOCK", "refused before any rule");
	cr_assert_str_eq(seen_text[2][3], "");
	json_decref(ran);
	json_decref(blocked);
	json_decref(invalid);
}
