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
		cr_expect(known_tool(json_string_value(json_object_get(t, "name"))));
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
	char *cmd = run_command("/run/cg.sock", pl, "/w s", "sess'1");
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	cr_assert(n > 0);
	self[n] = '\0';
	cr_assert_not_null(cmd);
	char *want = NULL;
	cr_assert(asprintf(&want,
			   "'%s' '--socket' '/run/cg.sock' 'run' '--no-privileged' '--cwd' '/w s' "
			   "'--session' 'sess'\\''1' '--' 'echo' 'it'\\''s' '$HOME `id`' '|' 'wc'",
			   self) > 0);
	cr_expect_str_eq(cmd, want);
	free(want);
	free(cmd);
	json_decref(pl);
	/* A lone '|' word would be read by run as a stage separator: never rewritten. */
	pl = json_pack("[[s,s]]", "echo", "|");
	cr_expect_null(run_command("/run/cg.sock", pl, NULL, NULL));
	json_decref(pl);
}
