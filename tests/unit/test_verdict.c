/* SPDX-License-Identifier: MIT */
/*
 * The verdict rendered from a sealed verdict and a trace's events
 * (src/evidence/verdict.c): outcome, executed, connections, next steps, and
 * terminal safety of verdict.md.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "evidence.h"
#include "verdict.h"

static const char *const EVENTS =
    "{\"type\":\"request\",\"ts\":\"2026-01-01T00:00:00.000Z\",\"payload\":{\"request\":"
    "{\"action\":\"exec\",\"host\":\"h1\",\"pipeline\":[[\"curl\",\"https://example.org/a b\"]]},"
    "\"peer\":{\"pid\":7,\"uid\":1000,\"gid\":1000}}}\n"
    "{\"type\":\"resolved\",\"payload\":{\"stages\":[{\"exe\":\"/usr/bin/curl\"}],\"cwd\":\"/"
    "w\"}}\n"
    "{\"type\":\"decision\",\"payload\":{\"decision\":\"DEGRADE\",\"rule_id\":\"net-proxy\","
    "\"rung\":\"policy\",\"constraints\":[{\"net\":\"proxy\"}]}}\n"
    "{\"type\":\"permit\",\"payload\":{\"run_uid\":1000,\"run_gid\":1000,\"timeout_ms\":5000,"
    "\"confinement\":{\"confined\":true,\"network\":{\"mode\":\"proxy\"}}}}\n"
    "{\"type\":\"exec.started\",\"payload\":{\"stages\":1}}\n"
    "{\"type\":\"net.connection\",\"payload\":{\"stage\":0,\"host\":\"example.org\",\"port\":443,"
    "\"address\":\"93.184.215.14\",\"rule\":\"net-proxy\",\"allowed\":true,\"code\":null,"
    "\"reason\":null,\"sni\":\"example.org\",\"bytes_out\":517,\"bytes_in\":4096,"
    "\"duration_ms\":12}}\n"
    "{\"type\":\"net.connection\",\"payload\":{\"stage\":0,\"host\":\"evil\\u001b[31m|x\","
    "\"port\":80,\"allowed\":false,\"code\":\"EN-NET-D-001\",\"reason\":\"not listed\"}}\n"
    "{\"type\":\"exec.finished\",\"payload\":{\"started\":true,\"exit_codes\":[0],"
    "\"stdout\":{\"bytes\":4096,\"sha256\":\"ab\",\"truncated\":false},\"stderr\":[]}}\n";

static json_t *sealed(const char *decision, const char *type)
{
	return json_pack("{s:s, s:s, s:s, s:[], s:[], s:[], s:[s], s:f, s:{s:s, s:s, s:s}, s:b}",
			 "trace_id", "t1", "decision", decision, "summary", "s", "why",
			 "constrained", "blocked", "next_steps", "x", "confidence", 1.0, "reply",
			 "type", type, "code", "MCP-EXEC-S-001", "message", "m", "executed", 0);
}

Test(verdict, connections_become_an_array_and_a_table)
{
	json_t *s = sealed("DEGRADE", "S");
	json_t *v = cg_verdict_with_events(s, EVENTS, strlen(EVENTS));
	cr_assert_not_null(v);
	cr_assert(json_is_true(json_object_get(v, "executed")), "exec.started makes it true");
	cr_assert_str_eq(json_string_value(json_object_get(v, "outcome")), "degraded");
	json_t *c = json_object_get(v, "connections");
	cr_assert_eq(json_array_size(c), 2);
	cr_assert_eq(json_integer_value(json_object_get(json_array_get(c, 0), "bytes_in")), 4096);
	cr_assert_eq(json_integer_value(json_object_get(
			 json_object_get(json_object_get(v, "call"), "peer"), "pid")),
		     7);
	char *md = cg_verdict_render_md(v);
	cr_assert_not_null(md);
	cr_assert(strstr(md, "## Network connections"));
	cr_assert(strstr(md, "| 0 | example.org | 443 | 93.184.215.14 | example.org | yes | "
			     "net-proxy | - | 517 | 4096 | 12 | - |"),
		  "%s", md);
	cr_assert(strstr(md, "| EN-NET-D-001 |"));
	cr_assert(strchr(md, '\033') == NULL, "no escape reaches the terminal");
	cr_assert(strstr(md, "evil?[31m/x"), "a '|' in a cell cannot open a new column");
	cr_assert(strstr(md, "curl 'https://example.org/a b'  ->  /usr/bin/curl"), "%s", md);
	free(md);
	json_decref(v);
	json_decref(s);
}

Test(verdict, refusal_and_dry_run_never_executed_and_block_never_asks_for_approval)
{
	const char *ev = "{\"type\":\"request\",\"payload\":{\"request\":{\"action\":\"gate\","
			 "\"pipeline\":[[\"rm\",\"-rf\",\"/\"]]}}}\n"
			 "{\"type\":\"decision\",\"payload\":{\"decision\":\"BLOCK\","
			 "\"rule_id\":\"no-rm\"}}\n";
	json_t *s = sealed("BLOCK", "S");
	json_object_set_new(s, "executed", json_true()); /* a wrong seal is corrected */
	json_t *v = cg_verdict_with_events(s, ev, strlen(ev));
	cr_assert(json_is_false(json_object_get(v, "executed")));
	cr_assert_str_eq(json_string_value(json_object_get(v, "outcome")), "dry_run");
	json_decref(v);
	json_decref(s);
	const char *ex = "{\"type\":\"request\",\"payload\":{\"request\":{\"action\":\"exec\"}}}\n"
			 "{\"type\":\"decision\",\"payload\":{\"decision\":\"BLOCK\","
			 "\"rule_id\":\"no-rm\"}}\n";
	s = sealed("BLOCK", "D");
	v = cg_verdict_with_events(s, ex, strlen(ex));
	const char *step = json_string_value(json_array_get(json_object_get(v, "next_steps"), 0));
	cr_assert_str_eq(json_string_value(json_object_get(v, "outcome")), "blocked");
	cr_assert(strstr(step, "no approval or grant overrides"), "%s", step);
	cr_assert(strstr(step, "no-rm"));
	cr_assert(!strstr(step, "ask for approval"));
	json_decref(v);
	json_decref(s);
}

Test(verdict, command_text_quotes_and_cuts)
{
	json_t *p = json_pack("[[s,s],[s,s]]", "echo", "it's", "wc", "-l");
	char *t = cg_command_text(p, 0);
	cr_assert_str_eq(t, "echo 'it'\\''s' | wc -l");
	free(t);
	t = cg_command_text(p, 10);
	cr_assert_eq(strlen(t), 10);
	cr_assert(strstr(t, "..."));
	free(t);
	json_decref(p);
}
