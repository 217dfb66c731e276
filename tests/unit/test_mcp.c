/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the agent bridges' pure parts (cmd/cli_mcp.c and
 * cmd/cli_hook.c are compiled in here; the daemon client is a stub): the
 * hook's strict shell-word splitter (table: command -> stages, or opaque),
 * its URL host parser, the MCP bridge's UTF-8 repair of command output, the
 * execute/gate argument checks, and protocol version negotiation. The
 * end-to-end behaviour is in tests/e2e/test_mcp.py and test_hook.py.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#define str_or mcp_str_or
#define usage  mcp_usage
#include "../../cmd/cli_mcp.c"
#undef str_or
#undef usage
#define str_or hook_str_or
#define usage  hook_usage
#include "../../cmd/cli_hook.c"
#undef str_or
#undef usage
#include "../../cmd/cli_help.c" /* the option tables' --help and usage errors */

/* cli_common.c's, which this test does not link: no hints (the e2e tests see them). */
char *cg_cli_gate_next(const json_t *approval)
{
	(void)approval;
	return NULL;
}

char *cg_cli_stage_hint(const json_t *resp, const json_t *pipeline)
{
	(void)resp;
	(void)pipeline;
	return NULL;
}

int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len)
{
	(void)socket_path;
	(void)request;
	(void)timeout_ms;
	*response = NULL;
	snprintf(err, err_len, "unit test: no daemon");
	errno = ECONNREFUSED;
	return -1;
}

int cg_client_call_wait(const char *socket_path, json_t *request, int64_t timeout_ms,
			const struct cg_client_wait *w, json_t **response, char *err,
			size_t err_len)
{
	(void)w;
	return cg_client_call(socket_path, request, timeout_ms, response, err, err_len);
}

/* The real one also knows this machine's name; "localhost" and "" stand for it here. */
bool cg_client_host_is_remote(const char *host)
{
	return host && *host && strcmp(host, "localhost") != 0;
}

struct split_case {
	const char *cmd;
	const char *want; /* the pipeline as compact JSON, or NULL: opaque */
};

static const struct split_case split_cases[] = {
	{ "ls", "[[\"ls\"]]" },
	{ "ls -la /tmp", "[[\"ls\",\"-la\",\"/tmp\"]]" },
	{ "  ls\t-la  ", "[[\"ls\",\"-la\"]]" },
	{ "ls -la | wc -l", "[[\"ls\",\"-la\"],[\"wc\",\"-l\"]]" },
	{ "a|b|c", "[[\"a\"],[\"b\"],[\"c\"]]" },
	{ "echo 'a b' \"c d\"", "[[\"echo\",\"a b\",\"c d\"]]" },
	{ "echo 'it''s'", "[[\"echo\",\"its\"]]" },
	{ "echo '$HOME; `id`'", "[[\"echo\",\"$HOME; `id`\"]]" },
	{ "git commit -m \"fix: a, b\"", "[[\"git\",\"commit\",\"-m\",\"fix: a, b\"]]" },
	{ "grep -e 'a|b' f", "[[\"grep\",\"-e\",\"a|b\",\"f\"]]" },
	{ "ls --color=auto", "[[\"ls\",\"--color=auto\"]]" },
	/* Everything below is shell syntax: judged as the opaque sh -c. */
	{ "", NULL },
	{ "   ", NULL },
	{ "ls; id", NULL },
	{ "ls && id", NULL },
	{ "ls || id", NULL },
	{ "ls &", NULL },
	{ "ls > out", NULL },
	{ "ls < in", NULL },
	{ "ls 2>&1", NULL },
	{ "echo $HOME", NULL },
	{ "echo ${HOME}", NULL },
	{ "echo \"$HOME\"", NULL },
	{ "echo \"`id`\"", NULL },
	{ "echo \"a\\\"b\"", NULL },
	{ "echo `id`", NULL },
	{ "echo $(id)", NULL },
	{ "(ls)", NULL },
	{ "ls *.c", NULL },
	{ "ls ?", NULL },
	{ "ls [ab]", NULL },
	{ "echo {a,b}", NULL },
	{ "ls ~", NULL },
	{ "ls # comment", NULL },
	{ "!!", NULL },
	{ "echo a\\ b", NULL },
	{ "ls\nid", NULL },
	{ "echo 'a\nb'", NULL },
	{ "FOO=1 ls", NULL },
	{ "ls |", NULL },
	{ "| ls", NULL },
	{ "ls | | wc", NULL },
	{ "echo 'unterminated", NULL },
	{ "echo \"unterminated", NULL },
	{ "ls\x01", NULL },
};

Test(hook, splitter_table)
{
	for (size_t i = 0; i < sizeof(split_cases) / sizeof(split_cases[0]); i++) {
		json_t *pl = split_command(split_cases[i].cmd);
		char *got = pl ? json_dumps(pl, JSON_COMPACT) : NULL;

		if (split_cases[i].want)
			cr_expect(got && strcmp(got, split_cases[i].want) == 0,
				  "%zu: '%s' -> %s, want %s", i, split_cases[i].cmd,
				  got ? got : "opaque", split_cases[i].want);
		else
			cr_expect_null(got, "%zu: '%s' must be opaque, got %s", i,
				       split_cases[i].cmd, got);
		free(got);
		json_decref(pl);
	}
}

Test(hook, url_host)
{
	static const struct {
		const char *url, *host;
	} cases[] = {
		{ "https://Docs.Example.com/a?b#c", "docs.example.com" },
		{ "http://user:pw@example.org:8080/", "example.org" },
		{ "https://[2001:db8::1]:443/x", "[2001:db8::1]" },
		{ "https://example.com", "example.com" },
		{ "example.com/path", NULL },
		{ "https:///path", NULL },
		{ "https://[::1/x", NULL },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char host[64];
		int rc = url_host(cases[i].url, host, sizeof(host));

		if (cases[i].host) {
			cr_expect_eq(rc, 0, "%s", cases[i].url);
			if (rc == 0)
				cr_expect_str_eq(host, cases[i].host);
		} else {
			cr_expect_eq(rc, -1, "%s must have no host", cases[i].url);
		}
	}
}

Test(mcp, utf8_repair)
{
	static const struct {
		const char *in;
		size_t len;
		const char *want;
		bool lossy;
	} cases[] = {
		{ "plain\n", 6, "plain\n", false },
		{ "caf\xc3\xa9", 5, "caf\xc3\xa9", false },
		{ "\xf0\x9f\x99\x82", 4, "\xf0\x9f\x99\x82", false },
		{ "a\xff"
		  "b",
		  3,
		  "a\xef\xbf\xbd"
		  "b",
		  true },
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", true }, /* overlong '/' */
		{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", true }, /* surrogate */
		{ "\xe2\x82", 2, "\xef\xbf\xbd\xef\xbf\xbd", true },		     /* cut short */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool lossy = false;
		json_t *s = utf8_text((const unsigned char *)cases[i].in, cases[i].len, &lossy);

		cr_assert_not_null(s, "case %zu must always yield a JSON string", i);
		cr_expect_str_eq(json_string_value(s), cases[i].want, "case %zu", i);
		cr_expect_eq(lossy, cases[i].lossy, "case %zu", i);
		json_decref(s);
	}
	/* NUL bytes in output survive as U+0000 in the JSON string. */
	bool lossy = false;
	json_t *s = utf8_text((const unsigned char *)"a\0b", 3, &lossy);
	cr_expect_eq(json_string_length(s), 3);
	cr_expect_not(lossy);
	json_decref(s);
}

static json_t *request_for(const char *args_json, bool actions, const char **why)
{
	static struct cg_cli g = { .socket_path = "/nonexistent" };
	struct server srv = { .g = &g, .session = "sess" };
	json_t *args = json_loads(args_json, 0, NULL);
	json_t *req;

	cr_assert_not_null(args, "bad test JSON: %s", args_json);
	req = build_request(&srv, "t", args, actions, why);
	json_decref(args);
	return req;
}

Test(mcp, execute_arguments)
{
	const char *why = NULL;
	json_t *req = request_for("{\"argv\":[\"ls\",\"-l\"],\"description\":\"list\","
				  "\"privileged\":false,\"env\":{\"LANG\":\"C\"},"
				  "\"timeout_ms\":5000,\"cwd\":\"/w\"}",
				  false, &why);
	char *got = json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS);

	cr_expect_str_eq(got,
			 "{\"cwd\":\"/w\",\"env\":{\"LANG\":\"C\"},\"pipeline\":[[\"ls\",\"-l\"]],"
			 "\"privileged\":false,\"reason\":\"list\",\"session\":\"sess\","
			 "\"timeout_ms\":5000}");
	free(got);
	json_decref(req);

	static const char *const bad[] = {
		"{}",
		"{\"argv\":[]}",
		"{\"argv\":\"ls\"}",
		"{\"argv\":[\"ls\",1]}",
		"{\"argv\":[\"ls\"],\"pipeline\":[[\"ls\"]]}",
		"{\"pipeline\":\"ls\"}",
		"{\"argv\":[\"ls\"],\"privileged\":\"no\"}",
		"{\"argv\":[\"ls\"],\"env\":[]}",
		"{\"argv\":[\"ls\"],\"env\":{\"A\":1}}",
		"{\"argv\":[\"ls\"],\"timeout_ms\":0}",
		"{\"argv\":[\"ls\"],\"timeout_ms\":\"5\"}",
		"{\"argv\":[\"ls\"],\"cwd\":1}",
		"{\"argv\":[\"ls\"],\"description\":[]}",
		"{\"actions\":[{\"action_type\":\"read\"}]}", /* execute takes no actions */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		req = request_for(bad[i], false, &why);
		cr_expect_null(req, "%s must be refused", bad[i]);
		cr_expect_not_null(why, "%s must say why", bad[i]);
		json_decref(req);
	}
	/* The daemon judges stage contents: an empty stage passes through. */
	req = request_for("{\"pipeline\":[[]]}", false, &why);
	cr_expect_not_null(req);
	json_decref(req);
}

Test(mcp, gate_arguments)
{
	const char *why = NULL;
	json_t *req = request_for("{\"actions\":[{\"action_type\":\"read\",\"resource\":\"/x\"}]}",
				  true, &why);

	cr_expect_not_null(req);
	cr_expect(json_is_array(json_object_get(req, "actions")));
	cr_expect_null(json_object_get(req, "pipeline"));
	json_decref(req);
	req = request_for("{\"actions\":{}}", true, &why);
	cr_expect_null(req);
	json_decref(req);
}

/* A tool's "host" is a network capability: only what the operator allowed. */
Test(mcp, host_needs_the_operators_allowance)
{
	static const char *const allow[] = { "build1", "build2" };
	struct cg_cli g = { .socket_path = "/run/x.sock" };
	struct server none = { .g = &g },
		      some = { .g = &g, .allow_hosts = allow, .n_allow_hosts = 2 };

	cr_expect(host_allowed(&none, "localhost"), "this machine needs no allowance");
	cr_expect(host_allowed(&none, ""));
	cr_expect_not(host_allowed(&none, "127.0.0.2"));
	cr_expect_not(host_allowed(&none, "build1"));
	cr_expect(host_allowed(&some, "build1"));
	cr_expect(host_allowed(&some, "build2"));
	cr_expect_not(host_allowed(&some, "build3"));
	cr_expect_not(host_allowed(&some, "BUILD1"), "compared exactly as given");
	cr_expect_not(host_allowed(&some, "build1.evil.example"));
	g.host = "gw";
	cr_expect(host_allowed(&none, "gw"), "the server's own --host is the operator's choice");

	json_t *r = host_refused(&some, "execute", "evil\x01host");
	json_t *reply = json_object_get(json_object_get(r, "structuredContent"), "reply");
	const char *msg = json_string_value(json_object_get(reply, "message"));
	cr_expect_str_eq(json_string_value(json_object_get(reply, "code")), "MCP-VAL-I-102");
	cr_expect(json_is_true(json_object_get(r, "isError")));
	cr_expect(strstr(msg, "'host' may not be 'evil?host'") != NULL, "%s", msg);
	cr_expect(strstr(msg, "this machine, gw, build1, build2") != NULL, "%s", msg);
	cr_expect(strstr(msg, "the server's host gw") != NULL, "%s", msg);
	cr_expect(strchr(msg, '{') == NULL, "no unrendered placeholder: %s", msg);
	json_decref(r);
}

/* The bridge's own limit is not the daemon's, and its number is filled in. */
Test(mcp, bridge_busy_names_its_own_limit)
{
	json_t *r = local_failure(CG_R_BRIDGE_BUSY, json_pack("{s:i}", "limit", MCP_MAX_JOBS));
	json_t *reply = json_object_get(json_object_get(r, "structuredContent"), "reply");
	const char *msg = json_string_value(json_object_get(reply, "message"));

	cr_expect(strstr(msg, "callgate mcp server already runs 64 tool calls") != NULL, "%s", msg);
	cr_expect(strstr(msg, "not the daemon's") != NULL, "%s", msg);
	json_decref(r);
}

/* A call routed over ssh names its host when it fails, not the local socket. */
Test(mcp, unreachable_names_the_route)
{
	struct cg_cli g = { .socket_path = "/run/local.sock" };
	struct server srv = { .g = &g };
	json_t *req = json_pack("{s:s}", "host", "build1");
	json_t *r = unreachable(&srv, req, "no answer from build1 over ssh");
	json_t *reply = json_object_get(json_object_get(r, "structuredContent"), "reply");
	const char *msg = json_string_value(json_object_get(reply, "message"));

	cr_expect_str_eq(json_string_value(json_object_get(reply, "code")), "MCP-IO-E-103");
	cr_expect(strstr(msg, "host 'build1'") != NULL, "%s", msg);
	cr_expect(strstr(msg, "/run/local.sock") == NULL, "%s", msg);
	json_decref(r);
	json_object_del(req, "host");
	r = unreachable(&srv, req, "cannot connect");
	reply = json_object_get(json_object_get(r, "structuredContent"), "reply");
	cr_expect_str_eq(json_string_value(json_object_get(reply, "code")), "MCP-IO-E-100");
	json_decref(r);
	json_decref(req);
}

Test(mcp, version_negotiation)
{
	static const struct {
		const char *asked, *answered;
	} cases[] = {
		{ "2025-06-18", "2025-06-18" },
		{ "2025-03-26", "2025-03-26" },
		{ "2024-11-05", "2025-06-18" },
		{ NULL, "2025-06-18" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *params =
		    cases[i].asked ? json_pack("{s:s}", "protocolVersion", cases[i].asked) : NULL;
		json_t *r = initialize_result(params);

		cr_expect_str_eq(json_string_value(json_object_get(r, "protocolVersion")),
				 cases[i].answered);
		json_decref(r);
		json_decref(params);
	}
}

Test(mcp, tools_list_is_well_formed)
{
	json_t *l = tools_list();
	json_t *t;
	size_t i;

	cr_assert_not_null(l, "the tools/list literal must pack");
	cr_expect_eq(json_array_size(json_object_get(l, "tools")), 5);
	json_array_foreach(json_object_get(l, "tools"), i, t)
	{
		cr_expect(cg_cli_mcp_tool_known(json_string_value(json_object_get(t, "name"))));
		cr_expect_str_eq(
		    json_string_value(json_object_get(json_object_get(t, "inputSchema"), "type")),
		    "object");
	}
	json_decref(l);
}

/* The hook's rewrite: this binary, run, the judged argv each word single-quoted. */
Test(hook, run_command_quotes_every_word)
{
	json_t *pl = json_pack("[[s,s,s],[s]]", "echo", "it's", "$HOME `id`", "wc");
	json_t *in = json_pack("{s:i,s:s}", "timeout", 90500, "description", "count it's words");
	char *cmd = run_command("/run/cg.sock", pl, "/w s", "sess'1", in);
	json_decref(in);
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	cr_assert(n > 0);
	self[n] = '\0';
	cr_assert_not_null(cmd);
	char *want = NULL;
	cr_assert(
	    asprintf(&want,
		     "'%s' '--socket' '/run/cg.sock' 'run' '--no-privileged' '--cwd' '/w s' "
		     "'--session' 'sess'\\''1' '--timeout' '91s' '--reason' 'count it'\\''s words' "
		     "'--' 'echo' 'it'\\''s' '$HOME `id`' '|' 'wc'",
		     self) > 0);
	cr_expect_str_eq(cmd, want);
	free(want);
	free(cmd);
	json_decref(pl);
	/* A lone '|' word would be read by run as a stage separator: never rewritten. */
	pl = json_pack("[[s,s]]", "echo", "|");
	cr_expect_null(run_command("/run/cg.sock", pl, NULL, NULL, NULL));
	json_decref(pl);
}
