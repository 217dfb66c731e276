/* SPDX-License-Identifier: MIT */
/*
 * test_wire — the request codec, the response encoder and the replay window.
 *
 * The heart is an accept/reject table: one line per refusal code (and per
 * interesting variant), asserting the exact code, the params a client would
 * read, and whether the refusal carries the request id. Further tests pin
 * the validation order, the defaults, the seed's example and response shape.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "wire.h"

#define T   "2026-02-13T14:30:00Z"
#define IDT "\"id\":\"r1\",\"time\":\"" T "\""

static const char *const allow[] = { "DEBIAN_FRONTEND", "LANG", "LC_ALL", "TZ", "FOO",
				     "LD_PRELOAD",	"PATH" };
static struct cg_wire_rules rules;

static void setup(void)
{
	int64_t now;
	cr_assert_eq(cg_parse_time(T, &now), 0);
	rules = (struct cg_wire_rules){ .now_ns = now,
					.freshness_s = 60,
					.env_allow = allow,
					.n_env_allow = CG_ARRAY_LEN(allow) };
}

TestSuite(wire, .init = setup);

/* Decode s (newline assumed); returns the refusal or NULL with *out set. */
static struct cg_reply *decode(const char *s, struct cg_request **out, char **id)
{
	struct cg_reply *err = NULL;
	char *idbuf = NULL;
	int rc = cg_wire_decode(s, strlen(s), true, false, &rules, out, &err, &idbuf);
	if (id)
		*id = idbuf;
	else
		free(idbuf);
	cr_assert_eq(rc == 0, err == NULL, "rc %d must agree with err %p", rc, (void *)err);
	return err;
}

struct row {
	const char *name;
	const char *line;
	size_t len; /* 0: strlen(line) */
	bool no_newline;
	bool too_long;
	enum cg_reply_id code; /* CG_R__COUNT: accepted */
	const char *id;	       /* expected *id_out, NULL for none */
	const char *pkey;      /* a param to check, or NULL */
	const char *pstr;      /* its string value, or NULL for pint */
	long long pint;
};

#define OK CG_R__COUNT

static const struct row rows[] = {
	/* Transport */
	{ "no newline", "{\"id\":\"r1\"}", 0, true, false, CG_R_LINE_NO_NEWLINE, NULL, "bytes",
	  NULL, 11 },
	{ "too long", "{}", 0, false, true, CG_R_LINE_TOO_LONG, NULL, "limit", NULL,
	  CG_WIRE_MAX_LINE },
	/* Parse */
	{ "empty line", "", 0, false, false, CG_R_JSON_INVALID, NULL, "line", NULL, 1 },
	{ "syntax", "{\"id\":\"r1\",}", 0, false, false, CG_R_JSON_INVALID, NULL, NULL, NULL, 0 },
	{ "trailing garbage", "{\"id\":\"r1\"} x", 0, false, false, CG_R_JSON_INVALID, NULL,
	  "column", NULL, 13 },
	{ "lone surrogate", "{\"id\":\"\\ud800\"}", 0, false, false, CG_R_JSON_INVALID, NULL, NULL,
	  NULL, 0 },
	{ "bad utf8", "{\"a\":\"x\xff\"}", 0, false, false, CG_R_UTF8_INVALID, NULL, "offset", NULL,
	  7 },
	{ "bad utf8 after multibyte", "{\"a\":\"\xc3\xa9\xc3\"}", 0, false, false,
	  CG_R_UTF8_INVALID, NULL, "offset", NULL, 8 },
	{ "overlong utf8", "{\"a\":\"\xc0\xaf\"}", 0, false, false, CG_R_UTF8_INVALID, NULL,
	  "offset", NULL, 6 },
	{ "duplicate key", "{\"id\":\"r1\",\"pipeline\":[[\"ls\"]],\"pipeline\":[[\"rm\"]]}", 0,
	  false, false, CG_R_JSON_DUPLICATE_KEY, NULL, NULL, NULL, 0 },
	{ "NUL in key", "{\"a\\u0000b\":1}", 0, false, false, CG_R_ARG_NUL, NULL, "field",
	  "(an object key)", 0 },
	{ "array", "[1,2]", 0, false, false, CG_R_JSON_NOT_OBJECT, NULL, NULL, NULL, 0 },
	{ "scalar", "42", 0, false, false, CG_R_JSON_NOT_OBJECT, NULL, NULL, NULL, 0 },
	/* id */
	{ "id number", "{\"id\":7,\"time\":\"" T "\",\"pipeline\":[[\"ls\"]]}", 0, false, false,
	  CG_R_FIELD_TYPE, NULL, "field", "id", 0 },
	{ "id empty", "{\"id\":\"\",\"time\":\"" T "\",\"pipeline\":[[\"ls\"]]}", 0, false, false,
	  CG_R_ID_INVALID, NULL, "limit", NULL, CG_WIRE_MAX_ID },
	{ "id space", "{\"id\":\"a b\",\"time\":\"" T "\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_ID_INVALID, NULL, NULL, NULL, 0 },
	{ "id non-ascii", "{\"id\":\"caf\\u00e9\"}", 0, false, false, CG_R_ID_INVALID, NULL, NULL,
	  NULL, 0 },
	{ "id bidi", "{\"id\":\"a\\u202eb\"}", 0, false, false, CG_R_TEXT_FORBIDDEN_CHAR, NULL,
	  "field", "id", 0 },
	{ "id NUL", "{\"id\":\"a\\u0000\"}", 0, false, false, CG_R_ARG_NUL, NULL, "field", "id",
	  0 },
	/* Types (id known from here on) */
	{ "host number", "{" IDT ",\"pipeline\":[[\"ls\"]],\"host\":1}", 0, false, false,
	  CG_R_FIELD_TYPE, "r1", "field", "host", 0 },
	{ "privileged string", "{" IDT ",\"pipeline\":[[\"ls\"]],\"privileged\":\"false\"}", 0,
	  false, false, CG_R_FIELD_TYPE, "r1", "field", "privileged", 0 },
	{ "null is not absent", "{" IDT ",\"pipeline\":[[\"ls\"]],\"reason\":null}", 0, false,
	  false, CG_R_FIELD_TYPE, "r1", "field", "reason", 0 },
	{ "timeout real", "{" IDT ",\"pipeline\":[[\"ls\"]],\"timeout_ms\":1.5}", 0, false, false,
	  CG_R_FIELD_TYPE, "r1", "field", "timeout_ms", 0 },
	{ "pipeline object", "{" IDT ",\"pipeline\":{}}", 0, false, false, CG_R_FIELD_TYPE, "r1",
	  "field", "pipeline", 0 },
	{ "stage string", "{" IDT ",\"pipeline\":[\"ls\"]}", 0, false, false, CG_R_FIELD_TYPE, "r1",
	  "field", "pipeline[0]", 0 },
	{ "arg number", "{" IDT ",\"pipeline\":[[\"ls\"],[\"wc\",3]]}", 0, false, false,
	  CG_R_FIELD_TYPE, "r1", "field", "pipeline[1][1]", 0 },
	{ "env value number", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"FOO\":1}}", 0, false,
	  false, CG_R_FIELD_TYPE, "r1", "field", "env", 0 },
	{ "host too long",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"host\":\""
	  "0123456789012345678901234567890123456789012345678901234567890123456789"
	  "0123456789012345678901234567890123456789012345678901234567890123456789"
	  "0123456789012345678901234567890123456789012345678901234567890123456789"
	  "0123456789012345678901234567890123456789012345678901234567890123456789\"}",
	  0, false, false, CG_R_FIELD_TOO_LONG, "r1", "limit", NULL, 255 },
	/* Action */
	{ "action unknown", "{" IDT ",\"pipeline\":[[\"ls\"]],\"action\":\"run\"}", 0, false, false,
	  CG_R_ACTION_UNKNOWN, "r1", "action", "run", 0 },
	{ "action echo sanitised", "{" IDT ",\"pipeline\":[[\"ls\"]],\"action\":\"r\\u202eun\"}", 0,
	  false, false, CG_R_ACTION_UNKNOWN, "r1", "action", "r?un", 0 },
	/* Pipeline / actions */
	{ "pipeline missing", "{" IDT "}", 0, false, false, CG_R_PIPELINE_MISSING, "r1", "action",
	  "exec", 0 },
	{ "pipeline empty", "{" IDT ",\"pipeline\":[]}", 0, false, false, CG_R_PIPELINE_EMPTY, "r1",
	  NULL, NULL, 0 },
	{ "stage empty", "{" IDT ",\"pipeline\":[[\"ls\"],[]]}", 0, false, false, CG_R_STAGE_EMPTY,
	  "r1", "stage", NULL, 1 },
	{ "command empty", "{" IDT ",\"pipeline\":[[\"\",\"x\"]]}", 0, false, false,
	  CG_R_STAGE_EMPTY, "r1", "stage", NULL, 0 },
	{ "gate without subject", "{" IDT ",\"action\":\"gate\"}", 0, false, false,
	  CG_R_GATE_SUBJECT_MISSING, "r1", NULL, NULL, 0 },
	{ "grant without spec", "{" IDT ",\"action\":\"grant\"}", 0, false, false,
	  CG_R_GRANT_SPEC_MISSING, "r1", NULL, NULL, 0 },
	{ "grant spec not object", "{" IDT ",\"action\":\"grant\",\"grant\":[]}", 0, false, false,
	  CG_R_FIELD_TYPE, "r1", "field", NULL, 0 },
	{ "grant spec hides a bidi override",
	  "{" IDT ",\"action\":\"grant\",\"grant\":{\"session\":\"a\\u202eb\"}}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", NULL, 0 },
	{ "gate actions empty", "{" IDT ",\"action\":\"gate\",\"actions\":[]}", 0, false, false,
	  CG_R_ACTIONS_INVALID, "r1", "index", NULL, 0 },
	{ "gate action not object",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":"
	  "\"read\"},3]}",
	  0, false, false, CG_R_ACTIONS_INVALID, "r1", "index", NULL, 1 },
	{ "gate action_type missing",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"tool\":\"x\"}]}", 0, false, false,
	  CG_R_ACTIONS_INVALID, "r1", "detail", "'action_type' is required", 0 },
	{ "gate action_type empty",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"\"}]}", 0, false, false,
	  CG_R_ACTIONS_INVALID, "r1", "index", NULL, 0 },
	{ "gate args not object",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"write\",\"args\":[1]}]}", 0,
	  false, false, CG_R_ACTIONS_INVALID, "r1", "detail", "'args' must be an object", 0 },
	{ "gate resource number",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"write\",\"resource\":1}]}",
	  0, false, false, CG_R_ACTIONS_INVALID, "r1", "detail", "'resource' must be a string", 0 },
	/* Time */
	{ "time missing", "{\"id\":\"r1\",\"pipeline\":[[\"ls\"]]}", 0, false, false,
	  CG_R_TIME_MISSING, "r1", NULL, NULL, 0 },
	{ "time unparseable", "{\"id\":\"r1\",\"time\":\"yesterday\",\"pipeline\":[[\"ls\"]]}", 0,
	  false, false, CG_R_TIME_UNPARSEABLE, "r1", "time", "yesterday", 0 },
	{ "time empty", "{\"id\":\"r1\",\"time\":\"\",\"pipeline\":[[\"ls\"]]}", 0, false, false,
	  CG_R_TIME_UNPARSEABLE, "r1", NULL, NULL, 0 },
	{ "time with NUL", "{\"id\":\"r1\",\"time\":\"" T "\\u0000x\",\"pipeline\":[[\"ls\"]]}", 0,
	  false, false, CG_R_TIME_UNPARSEABLE, "r1", NULL, NULL, 0 },
	{ "time no zone",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T14:30:00\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TIME_UNPARSEABLE, "r1", NULL, NULL, 0 },
	{ "time stale", "{\"id\":\"r1\",\"time\":\"2026-02-13T14:28:59Z\",\"pipeline\":[[\"ls\"]]}",
	  0, false, false, CG_R_TIME_STALE, "r1", "age_s", NULL, 61 },
	{ "time at window edge",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T14:29:00Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	{ "time future",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T14:31:01Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TIME_FUTURE, "r1", "ahead_s", NULL, 61 },
	{ "time offset",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T15:30:00.5+01:00\",\"pipeline\":[[\"ls\"]]}", 0,
	  false, false, OK, "r1", NULL, NULL, 0 },
	{ "time far future",
	  "{\"id\":\"r1\",\"time\":\"9999-12-31T23:59:59Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TIME_FUTURE, "r1", "window_s", NULL, CG_WIRE_AHEAD_S },
	{ "time ahead at its edge",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T14:30:05Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	{ "time ahead past its edge (inside the window)",
	  "{\"id\":\"r1\",\"time\":\"2026-02-13T14:30:06Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TIME_FUTURE, "r1", "ahead_s", NULL, 6 },
	{ "time far past",
	  "{\"id\":\"r1\",\"time\":\"0001-01-01T00:00:00Z\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TIME_STALE, "r1", NULL, NULL, 0 },
	{ "time far future, bad shape",
	  "{\"id\":\"r1\",\"time\":\"9999-99\",\"pipeline\":[[\"ls\"]]}", 0, false, false,
	  CG_R_TIME_UNPARSEABLE, "r1", NULL, NULL, 0 },
	/* forward_agent */
	{ "forward_agent with default privileged",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"forward_agent\":true}", 0, false, false,
	  CG_R_FORWARD_AGENT_PRIVILEGED, "r1", NULL, NULL, 0 },
	{ "forward_agent unprivileged",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"forward_agent\":true,"
	  "\"privileged\":false}",
	  0, false, false, OK, "r1", NULL, NULL, 0 },
	/* Env */
	{ "env name invalid", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"1X\":\"v\"}}", 0, false,
	  false, CG_R_ENV_NAME_INVALID, "r1", "name", "1X", 0 },
	{ "env name with =", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"A=B\":\"v\"}}", 0, false,
	  false, CG_R_ENV_NAME_INVALID, "r1", "name", "A=B", 0 },
	{ "env name empty", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"\":\"v\"}}", 0, false,
	  false, CG_R_ENV_NAME_INVALID, "r1", "name", "", 0 },
	{ "env name bidi", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"A\\u202e\":\"v\"}}", 0,
	  false, false, CG_R_ENV_NAME_INVALID, "r1", "name", "A?", 0 },
	/* LD_PRELOAD and PATH are on the test allow-list: dangerous wins anyway. */
	{ "env LD_PRELOAD", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"LD_PRELOAD\":\"/x.so\"}}",
	  0, false, false, CG_R_ENV_DANGEROUS, "r1", "name", "LD_PRELOAD", 0 },
	{ "env PATH", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"PATH\":\"/tmp\"}}", 0, false,
	  false, CG_R_ENV_DANGEROUS, "r1", "name", "PATH", 0 },
	{ "env BASH_FUNC_", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"BASH_FUNC_ls%%\":\"v\"}}",
	  0, false, false, CG_R_ENV_NAME_INVALID, "r1", NULL, NULL, 0 },
	{ "env BASH_FUNC_x", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"BASH_FUNC_x\":\"v\"}}", 0,
	  false, false, CG_R_ENV_DANGEROUS, "r1", "name", "BASH_FUNC_x", 0 },
	{ "env not allowed",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"FOO\":\"1\",\"BAR\":\"2\"}}", 0, false,
	  false, CG_R_ENV_NOT_ALLOWED, "r1", "name", "BAR", 0 },
	/* Values programs interpret (found by attack, s35: debconf evaluates DEBIAN_FRONTEND). */
	{ "env debconf code",
	  "{" IDT
	  ",\"pipeline\":[[\"ls\"]],\"env\":{\"DEBIAN_FRONTEND\":\"noninteractive;BEGIN{1}#\"}}",
	  0, false, false, CG_R_ENV_VALUE_INVALID, "r1", "name", "DEBIAN_FRONTEND", 0 },
	{ "env debconf word",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"DEBIAN_FRONTEND\":\"noninteractive\"}}", 0,
	  false, false, OK, "r1", NULL, NULL, 0 },
	{ "env locale path",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"LC_ALL\":\"/tmp/ws/loc\"}}", 0, false, false,
	  CG_R_ENV_VALUE_INVALID, "r1", "name", "LC_ALL", 0 },
	{ "env locale name",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"LANG\":\"de_DE.UTF-8@euro\"}}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	{ "env TZ absolute", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"TZ\":\":/tmp/ws/zone\"}}",
	  0, false, false, CG_R_ENV_VALUE_INVALID, "r1", "name", "TZ", 0 },
	{ "env TZ up", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"TZ\":\"../../tmp/zone\"}}", 0,
	  false, false, CG_R_ENV_VALUE_INVALID, "r1", "name", "TZ", 0 },
	{ "env TZ rule",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"TZ\":\"EST5EDT,M3.2.0,M11.1.0\"}}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	{ "env TZ zone",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"TZ\":\"America/Argentina/Buenos_Aires\"}}",
	  0, false, false, OK, "r1", NULL, NULL, 0 },
	{ "env case matters", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"foo\":\"1\"}}", 0, false,
	  false, CG_R_ENV_NOT_ALLOWED, "r1", "name", "foo", 0 },
	/* Characters */
	{ "argv bidi escaped", "{" IDT ",\"pipeline\":[[\"echo\",\"a\\u202eb\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "202E", 0 },
	{ "argv bidi raw", "{" IDT ",\"pipeline\":[[\"echo\",\"ab\xe2\x80\xae\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "offset", NULL, 2 },
	{ "argv isolate", "{" IDT ",\"pipeline\":[[\"echo\",\"\\u2066x\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "bidi", 0 },
	{ "argv ALM", "{" IDT ",\"pipeline\":[[\"echo\",\"\\u061c\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "pipeline[0][1]", 0 },
	{ "argv tab ok", "{" IDT ",\"pipeline\":[[\"printf\",\"a\\tb\"]]}", 0, false, false, OK,
	  "r1", NULL, NULL, 0 },
	/* A newline in an argument is text (ux-s41b H2); in the command or a CR, not. */
	{ "argv newline ok", "{" IDT ",\"pipeline\":[[\"printf\",\"a\\nb\"]]}", 0, false, false, OK,
	  "r1", NULL, NULL, 0 },
	{ "command newline", "{" IDT ",\"pipeline\":[[\"print\\nf\",\"a\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "control", 0 },
	{ "argv CR", "{" IDT ",\"pipeline\":[[\"printf\",\"a\\rb\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "control", 0 },
	{ "reason newline", "{" IDT ",\"reason\":\"a\\nb\",\"pipeline\":[[\"ls\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "control", 0 },
	{ "argv escape", "{" IDT ",\"pipeline\":[[\"printf\",\"\\u001b[2J\"]]}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "001B", 0 },
	{ "argv NUL", "{" IDT ",\"pipeline\":[[\"ls\"],[\"grep\",\"a\\u0000b\"]]}", 0, false, false,
	  CG_R_ARG_NUL, "r1", "field", "pipeline[1][1]", 0 },
	{ "host zero-width", "{" IDT ",\"pipeline\":[[\"ls\"]],\"host\":\"h\\u200bost\"}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "zero-width", 0 },
	{ "host BOM", "{" IDT ",\"pipeline\":[[\"ls\"]],\"host\":\"\\ufeffh\"}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "FEFF", 0 },
	/* The rest of Default_Ignorable_Code_Point and the Hangul fillers (found by attack, s35). */
	{ "argv Hangul filler", "{" IDT ",\"pipeline\":[[\"cat\",\"n\\u3164tes\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "3164", 0 },
	{ "argv grapheme joiner", "{" IDT ",\"pipeline\":[[\"cat\",\"a\\u034fb\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "zero-width", 0 },
	{ "argv deprecated format", "{" IDT ",\"pipeline\":[[\"cat\",\"a\\u206ab\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "206A", 0 },
	{ "argv Khmer inherent", "{" IDT ",\"pipeline\":[[\"cat\",\"a\\u17b4b\"]]}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "17B4", 0 },
	{ "argv variation selector ok", "{" IDT ",\"pipeline\":[[\"echo\",\"\\u2764\\ufe0f\"]]}", 0,
	  false, false, OK, "r1", NULL, NULL, 0 },
	{ "host tab", "{" IDT ",\"pipeline\":[[\"ls\"]],\"host\":\"a\\tb\"}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "host", 0 },
	{ "session C1", "{" IDT ",\"pipeline\":[[\"ls\"]],\"session\":\"s\\u0085\"}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "0085", 0 },
	{ "session DEL", "{" IDT ",\"pipeline\":[[\"ls\"]],\"session\":\"s\\u007f\"}", 0, false,
	  false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "007F", 0 },
	{ "reason tab ok", "{" IDT ",\"pipeline\":[[\"ls\"]],\"reason\":\"a\\tb\"}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	{ "reason line separator", "{" IDT ",\"pipeline\":[[\"ls\"]],\"reason\":\"a\\u2028b\"}", 0,
	  false, false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "class", "separator", 0 },
	{ "reason tag char", "{" IDT ",\"pipeline\":[[\"ls\"]],\"reason\":\"ok\\udb40\\udc41\"}", 0,
	  false, false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "codepoint", "E0041", 0 },
	{ "reason unicode ok",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"reason\":\"caf\\u00e9 \\u4e2d\"}", 0, false, false,
	  OK, "r1", NULL, NULL, 0 },
	{ "cwd mongolian vowel separator",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"cwd\":\"/w\\u180e\"}", 0, false, false,
	  CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "cwd", 0 },
	{ "env value LRM", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"FOO\":\"C\\u200e\"}}", 0,
	  false, false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "env.FOO", 0 },
	{ "env value tab ok", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"FOO\":\"C\\t\"}}", 0,
	  false, false, OK, "r1", NULL, NULL, 0 },
	{ "env locale tab", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"LANG\":\"C\\t\"}}", 0,
	  false, false, CG_R_ENV_VALUE_INVALID, "r1", "name", "LANG", 0 },
	{ "env value NUL", "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"LANG\":\"C\\u0000\"}}", 0,
	  false, false, CG_R_ARG_NUL, "r1", "field", "env.LANG", 0 },
	{ "gate tool bidi",
	  "{" IDT
	  ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"write\",\"tool\":\"\\u202e\"}]}",
	  0, false, false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "actions[0].tool", 0 },
	{ "gate args nested bidi",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"write\",\"args\":{\"a\":[{"
	  "\"b\":\"x\\u202e\"}]}}]}",
	  0, false, false, CG_R_TEXT_FORBIDDEN_CHAR, "r1", "field", "actions[0].args", 0 },
	{ "exec ignores actions",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"actions\":[{\"tool\":\"\\u202e\"}]}", 0, false, false,
	  OK, "r1", NULL, NULL, 0 },
	/* Timeout */
	{ "timeout zero", "{" IDT ",\"pipeline\":[[\"ls\"]],\"timeout_ms\":0}", 0, false, false,
	  CG_R_TIMEOUT_RANGE, "r1", "value", NULL, 0 },
	{ "timeout too big", "{" IDT ",\"pipeline\":[[\"ls\"]],\"timeout_ms\":86400001}", 0, false,
	  false, CG_R_TIMEOUT_RANGE, "r1", "max", NULL, CG_WIRE_MAX_TIMEOUTMS },
	{ "timeout max ok", "{" IDT ",\"pipeline\":[[\"ls\"]],\"timeout_ms\":86400000}", 0, false,
	  false, OK, "r1", NULL, NULL, 0 },
	/* Accepted shapes */
	{ "ping bare", "{\"action\":\"ping\"}", 0, false, false, OK, NULL, NULL, NULL, 0 },
	{ "ping with stale time",
	  "{\"id\":\"p\",\"action\":\"ping\",\"time\":\"2001-01-01T00:00:00Z\"}", 0, false, false,
	  CG_R_TIME_STALE, "p", NULL, NULL, 0 },
	{ "gate actions only",
	  "{" IDT ",\"action\":\"gate\",\"actions\":[{\"action_type\":\"write\",\"tool\":\"fs\","
	  "\"resource\":\"/w/a\",\"args\":{\"mode\":\"0644\",\"n\":[1,\"\\tx\"]}}]}",
	  0, false, false, OK, "r1", NULL, NULL, 0 },
	{ "unknown fields ignored",
	  "{" IDT ",\"pipeline\":[[\"ls\"]],\"future\":{\"x\":[1,\"\\u202e\"]},\"v\":null}", 0,
	  false, false, OK, "r1", NULL, NULL, 0 },
	{ "CRLF tolerated", "{" IDT ",\"pipeline\":[[\"ls\"]]}\r", 0, false, false, OK, "r1", NULL,
	  NULL, 0 },
};

static void check_row(const struct row *r)
{
	struct cg_request *req = NULL;
	struct cg_reply *err = NULL;
	char *id = NULL;
	size_t len = r->len ? r->len : strlen(r->line);
	int rc = cg_wire_decode(r->line, len, !r->no_newline, r->too_long, &rules, &req, &err, &id);

	if (r->code == OK) {
		cr_expect_eq(rc, 0, "[%s] refused with %s", r->name,
			     err ? cg_reply_def_of(err)->key : "?");
		cr_expect_not_null(req, "[%s]", r->name);
		cr_expect_null(err, "[%s]", r->name);
		if (req && r->id)
			cr_expect_str_eq(req->id, r->id, "[%s]", r->name);
	} else {
		cr_expect_eq(rc, -1, "[%s] accepted", r->name);
		cr_expect_null(req, "[%s]", r->name);
		cr_assert_not_null(err, "[%s]", r->name);
		cr_expect_str_eq(cg_reply_def_of(err)->key, cg_reply_registry[r->code].key,
				 "[%s] code", r->name);
		cr_expect_eq(cg_reply_def_of(err)->type, CG_RTYPE_I, "[%s] type", r->name);
		if (r->id) {
			cr_expect_not_null(id, "[%s] id_out", r->name);
			if (id)
				cr_expect_str_eq(id, r->id, "[%s] id_out", r->name);
		} else if (strstr(r->line, "\"id\"")) {
			cr_expect_null(id, "[%s] id_out must be NULL", r->name);
		}
		if (r->pkey && cg_reply_def_of(err)->id == r->code) {
			json_t *p = json_object_get(err->params, r->pkey);
			cr_expect_not_null(p, "[%s] param %s", r->name, r->pkey);
			if (p && r->pstr)
				cr_expect_str_eq(json_string_value(p), r->pstr, "[%s] %s", r->name,
						 r->pkey);
			else if (p)
				cr_expect_eq(json_integer_value(p), r->pint, "[%s] %s=%lld",
					     r->name, r->pkey, (long long)json_integer_value(p));
		}
		/* Every refusal renders, and quotes nothing unsafe. */
		char *msg = cg_reply_message(err);
		cr_expect_not_null(msg);
		free(msg);
	}
	cg_request_free(req);
	cg_reply_free(err);
	free(id);
}

Test(wire, table)
{
	for (size_t i = 0; i < CG_ARRAY_LEN(rows); i++)
		check_row(&rows[i]);
}

/* Every code the codec owns appears in the table (ID_REPLAYED: see replay tests;
 * ARG_TOO_BIG, whose strings are too long for a row: see string_longer_than_execve_takes). */
Test(wire, table_covers_every_code)
{
	static const enum cg_reply_id codes[] = {
		CG_R_LINE_NO_NEWLINE, CG_R_LINE_TOO_LONG,	 CG_R_JSON_INVALID,
		CG_R_UTF8_INVALID,    CG_R_JSON_NOT_OBJECT,	 CG_R_JSON_DUPLICATE_KEY,
		CG_R_FIELD_TYPE,      CG_R_PIPELINE_MISSING,	 CG_R_PIPELINE_EMPTY,
		CG_R_STAGE_EMPTY,     CG_R_TIME_MISSING,	 CG_R_TIME_UNPARSEABLE,
		CG_R_TIME_STALE,      CG_R_TIME_FUTURE,		 CG_R_FORWARD_AGENT_PRIVILEGED,
		CG_R_ENV_NOT_ALLOWED, CG_R_ENV_DANGEROUS,	 CG_R_TEXT_FORBIDDEN_CHAR,
		CG_R_ID_INVALID,      CG_R_ACTION_UNKNOWN,	 CG_R_TIMEOUT_RANGE,
		CG_R_FIELD_TOO_LONG,  CG_R_ENV_NAME_INVALID,	 CG_R_ACTIONS_INVALID,
		CG_R_ARG_NUL,	      CG_R_GATE_SUBJECT_MISSING, CG_R_GRANT_SPEC_MISSING,
	};
	for (size_t c = 0; c < CG_ARRAY_LEN(codes); c++) {
		bool found = false;
		for (size_t i = 0; i < CG_ARRAY_LEN(rows) && !found; i++)
			found = rows[i].code == codes[c];
		cr_expect(found, "no table row for %s", cg_reply_registry[codes[c]].key);
	}
}

/* A multi-fault request gets the refusal of the earliest step, every time. */
Test(wire, validation_order)
{
	static const struct {
		const char *line;
		enum cg_reply_id code;
	} cases[] = {
		/* id before types */
		{ "{\"id\":\"\",\"host\":1}", CG_R_ID_INVALID },
		/* types before action */
		{ "{\"id\":\"r1\",\"action\":\"run\",\"host\":1}", CG_R_FIELD_TYPE },
		/* action before pipeline */
		{ "{\"id\":\"r1\",\"action\":\"run\"}", CG_R_ACTION_UNKNOWN },
		/* pipeline before time */
		{ "{\"id\":\"r1\"}", CG_R_PIPELINE_MISSING },
		/* time before forward_agent */
		{ "{\"id\":\"r1\",\"pipeline\":[[\"ls\"]],\"forward_agent\":true}",
		  CG_R_TIME_MISSING },
		/* forward_agent before env */
		{ "{" IDT
		  ",\"pipeline\":[[\"ls\"]],\"forward_agent\":true,\"env\":{\"LD_X\":\"\"}}",
		  CG_R_FORWARD_AGENT_PRIVILEGED },
		/* env before characters */
		{ "{" IDT ",\"pipeline\":[[\"ls\",\"\\u202e\"]],\"env\":{\"LD_X\":\"\"}}",
		  CG_R_ENV_DANGEROUS },
		/* dangerous before allow-list, in request order */
		{ "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"NOPE\":\"\",\"LD_X\":\"\"}}",
		  CG_R_ENV_NOT_ALLOWED },
		/* characters before timeout */
		{ "{" IDT ",\"pipeline\":[[\"ls\",\"\\u202e\"]],\"timeout_ms\":0}",
		  CG_R_TEXT_FORBIDDEN_CHAR },
		/* characters: host before argv */
		{ "{" IDT ",\"pipeline\":[[\"ls\",\"\\u202e\"]],\"host\":\"\\u200b\"}",
		  CG_R_TEXT_FORBIDDEN_CHAR },
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(cases); i++) {
		struct cg_request *req = NULL;
		struct cg_reply *err = decode(cases[i].line, &req, NULL);
		cr_assert_not_null(err, "case %zu accepted", i);
		cr_expect_str_eq(cg_reply_def_of(err)->key, cg_reply_registry[cases[i].code].key,
				 "case %zu", i);
		cg_reply_free(err);
	}
	/* The last case names host, the first field in scan order. */
	struct cg_request *req = NULL;
	struct cg_reply *err = decode(cases[CG_ARRAY_LEN(cases) - 1].line, &req, NULL);
	cr_expect_str_eq(json_string_value(json_object_get(err->params, "field")), "host");
	cg_reply_free(err);
}

Test(wire, seed_example_accepted)
{
	const char *line = "{\n  \"id\": \"550e8400-e29b-41d4-a716-446655440000\",\n"
			   "  \"host\": \"workstation.local\",\n"
			   "  \"session\": \"claude-code-project-alpha\",\n"
			   "  \"time\": \"2026-02-13T14:30:00Z\",\n"
			   "  \"pipeline\": [[\"apt\", \"install\", \"nginx\"]],\n"
			   "  \"env\": {\"DEBIAN_FRONTEND\": \"noninteractive\"},\n"
			   "  \"reason\": \"Install nginx to set up a web server\",\n"
			   "  \"privileged\": true,\n  \"forward_agent\": false\n}";
	struct cg_request *req = NULL;
	struct cg_reply *err = decode(line, &req, NULL);
	cr_assert_null(err, "refused: %s", err ? cg_reply_def_of(err)->key : "");
	cr_expect_str_eq(req->id, "550e8400-e29b-41d4-a716-446655440000");
	cr_expect(req->id_given);
	cr_expect_str_eq(req->host, "workstation.local");
	cr_expect_str_eq(req->session, "claude-code-project-alpha");
	cr_expect_str_eq(req->reason, "Install nginx to set up a web server");
	cr_expect_str_eq(req->time_str, T);
	cr_expect_eq(req->time_ns, rules.now_ns);
	cr_assert_eq(req->n_stages, 1);
	cr_assert_eq(req->stages[0].argc, 3);
	cr_expect_str_eq(req->stages[0].argv[0], "apt");
	cr_expect_str_eq(req->stages[0].argv[2], "nginx");
	cr_expect_null(req->stages[0].argv[3]);
	cr_assert_eq(req->n_env, 1);
	cr_expect_str_eq(req->env[0].name, "DEBIAN_FRONTEND");
	cr_expect_str_eq(req->env[0].value, "noninteractive");
	cr_expect(req->privileged);
	cr_expect_not(req->forward_agent);
	cr_expect_eq(req->action, CG_ACTION_EXEC);
	cr_expect_eq(req->timeout_ms, -1);
	cr_expect_null(req->cwd);
	cr_expect_null(req->actions);
	cr_expect(json_is_object(req->raw));
	cg_request_free(req);
}

static bool is_uuid4(const char *s)
{
	if (strlen(s) != 36 || s[14] != '4' || !strchr("89ab", s[19]))
		return false;
	for (int i = 0; i < 36; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
			return false;
	}
	return true;
}

Test(wire, defaults_when_absent)
{
	struct cg_request *req = NULL;
	char *id = NULL;
	struct cg_reply *err =
	    decode("{\"time\":\"" T "\",\"pipeline\":[[\"ls\",\"-l\"],[\"wc\"]]}", &req, &id);
	cr_assert_null(err);
	cr_expect_not(req->id_given);
	cr_expect(is_uuid4(req->id), "id %s", req->id);
	cr_expect_str_eq(id, req->id, "id_out carries the assigned id");
	cr_expect_str_eq(req->host, "");
	cr_expect_str_eq(req->session, "");
	cr_expect_str_eq(req->reason, "");
	cr_expect(req->privileged, "privileged defaults to true");
	cr_expect_not(req->forward_agent);
	cr_expect_eq(req->action, CG_ACTION_EXEC);
	cr_expect_eq(req->n_env, 0);
	cr_expect_eq(req->timeout_ms, -1);
	cr_expect_null(req->cwd);
	cr_assert_eq(req->n_stages, 2);
	cr_expect_str_eq(req->stages[1].argv[0], "wc");
	cr_expect_null(req->stages[1].argv[1]);
	free(id);

	/* A second request without an id gets a different one. */
	struct cg_request *req2 = NULL;
	err = decode("{\"time\":\"" T "\",\"pipeline\":[[\"ls\"]]}", &req2, NULL);
	cr_assert_null(err);
	cr_expect_str_neq(req->id, req2->id);
	cg_request_free(req);
	cg_request_free(req2);
}

Test(wire, optional_fields_copied)
{
	struct cg_request *req = NULL;
	struct cg_reply *err = decode(
	    "{" IDT ",\"action\":\"gate\",\"pipeline\":[[\"ls\"]],\"cwd\":\"/w/p\",\"timeout_ms\":"
	    "2500,\"privileged\":false,\"forward_agent\":true,\"actions\":[{\"action_type\":"
	    "\"net\"}]}",
	    &req, NULL);
	cr_assert_null(err, "refused: %s", err ? cg_reply_def_of(err)->key : "");
	cr_expect_eq(req->action, CG_ACTION_GATE);
	cr_expect_str_eq(req->cwd, "/w/p");
	cr_expect_eq(req->timeout_ms, 2500);
	cr_expect_not(req->privileged);
	cr_expect(req->forward_agent);
	cr_expect_eq(json_array_size(req->actions), 1);
	cg_request_free(req);

	err = decode("{\"action\":\"ping\"}", &req, NULL);
	cr_assert_null(err);
	cr_expect_eq(req->action, CG_ACTION_PING);
	cr_expect_eq(req->n_stages, 0);
	cg_request_free(req);
}

/* Build a request with n stages or n args or n env entries. */
static char *build(const char *what, size_t n)
{
	size_t cap = 64 + n * 32;
	char *s = malloc(cap);
	size_t o = (size_t)snprintf(s, cap, "{" IDT ",");
	if (strcmp(what, "stages") == 0) {
		o += (size_t)snprintf(s + o, cap - o, "\"pipeline\":[");
		for (size_t i = 0; i < n; i++)
			o += (size_t)snprintf(s + o, cap - o, "%s[\"cat\"]", i ? "," : "");
		o += (size_t)snprintf(s + o, cap - o, "]}");
	} else if (strcmp(what, "args") == 0) {
		o += (size_t)snprintf(s + o, cap - o, "\"pipeline\":[[\"echo\"");
		for (size_t i = 1; i < n; i++)
			o += (size_t)snprintf(s + o, cap - o, ",\"a\"");
		o += (size_t)snprintf(s + o, cap - o, "]]}");
	} else {
		o += (size_t)snprintf(s + o, cap - o, "\"pipeline\":[[\"env\"]],\"env\":{");
		for (size_t i = 0; i < n; i++)
			o +=
			    (size_t)snprintf(s + o, cap - o, "%s\"FOO%zu\":\"v\"", i ? "," : "", i);
		o += (size_t)snprintf(s + o, cap - o, "}}");
	}
	cr_assert_lt(o, cap);
	return s;
}

static void expect_too_many(const char *what, size_t limit, const char *field)
{
	struct cg_request *req = NULL;
	char *s = build(what, limit);
	struct cg_reply *err = decode(s, &req, NULL);
	/* At the limit: stages and args pass; env fails only the allow-list. */
	if (strcmp(what, "env") == 0) {
		cr_assert_not_null(err);
		cr_expect_eq(err->id, CG_R_ENV_NOT_ALLOWED);
	} else {
		cr_expect_null(err, "%s at the limit refused", what);
	}
	cg_reply_free(err);
	cg_request_free(req);
	free(s);

	s = build(what, limit + 1);
	err = decode(s, &req, NULL);
	cr_assert_not_null(err);
	cr_expect_eq(err->id, CG_R_TOO_MANY, "%s: %s", what, cg_reply_def_of(err)->key);
	cr_expect_str_eq(json_string_value(json_object_get(err->params, "field")), field);
	cr_expect_eq(json_integer_value(json_object_get(err->params, "limit")), (json_int_t)limit);
	cg_reply_free(err);
	free(s);
}

Test(wire, too_many)
{
	expect_too_many("stages", CG_WIRE_MAX_STAGES, "pipeline");
	expect_too_many("args", CG_WIRE_MAX_ARGS, "pipeline[0]");
	expect_too_many("env", CG_WIRE_MAX_ENV, "env");
}

/*
 * A string execve would refuse (E2BIG: longer than MAX_ARG_STRLEN, NAME=value
 * counted for a variable) is the request's fault: an I reply naming the
 * field, not an E from the spawn. One byte less is accepted.
 */
static struct cg_reply *decode_big(const char *head, size_t n, const char *tail,
				   struct cg_request **req)
{
	size_t hl = strlen(head), tl = strlen(tail);
	char *line = malloc(hl + n + tl + 1);
	cr_assert_not_null(line);
	memcpy(line, head, hl);
	memset(line + hl, 'x', n);
	memcpy(line + hl + n, tail, tl + 1);
	struct cg_reply *err = decode(line, req, NULL);
	free(line);
	return err;
}

Test(wire, string_longer_than_execve_takes)
{
	const char *argv_head = "{" IDT ",\"pipeline\":[[\"echo\",\"", *argv_tail = "\"]]}";
	const char *env_head = "{" IDT ",\"pipeline\":[[\"true\"]],\"env\":{\"LANG\":\"",
		   *env_tail = "\"}}";
	struct cg_request *req = NULL;
	struct cg_reply *err = decode_big(argv_head, CG_WIRE_MAX_ARG_STRLEN, argv_tail, &req);
	cr_expect_null(err, "an argument at the limit is accepted");
	cg_request_free(req);
	req = NULL;
	err = decode_big(argv_head, CG_WIRE_MAX_ARG_STRLEN + 1, argv_tail, &req);
	cr_assert_not_null(err);
	cr_expect_eq(err->id, CG_R_ARG_TOO_BIG);
	cr_expect_eq(cg_reply_def_of(err)->type, CG_RTYPE_I);
	cr_expect_str_eq(json_string_value(json_object_get(err->params, "field")),
			 "pipeline[0][1]");
	cr_expect_eq(json_integer_value(json_object_get(err->params, "limit")), 131071);
	cg_reply_free(err);

	/* LANG=value: the name and '=' count. */
	err = decode_big(env_head, CG_WIRE_MAX_ARG_STRLEN - 5, env_tail, &req);
	cr_expect_null(err, "LANG=value at the limit is accepted");
	cg_request_free(req);
	req = NULL;
	err = decode_big(env_head, CG_WIRE_MAX_ARG_STRLEN - 4, env_tail, &req);
	cr_assert_not_null(err);
	cr_expect_eq(err->id, CG_R_ARG_TOO_BIG);
	cr_expect_str_eq(json_string_value(json_object_get(err->params, "field")), "env.LANG");
	cr_expect_eq(json_integer_value(json_object_get(err->params, "bytes")),
		     CG_WIRE_MAX_ARG_STRLEN + 1);
	char *m = cg_reply_message(err);
	cr_expect(strstr(m, "{") == NULL, "%s", m);
	free(m);
	cg_reply_free(err);
}

Test(wire, line_length_limit)
{
	/* The transport's flag wins even for an otherwise perfect line. */
	const char *good = "{" IDT ",\"pipeline\":[[\"ls\"]]}";
	struct cg_request *req = NULL;
	struct cg_reply *err = NULL;
	char *id = NULL;
	cr_expect_eq(cg_wire_decode(good, strlen(good), true, true, &rules, &req, &err, &id), -1);
	cr_expect_eq(err->id, CG_R_LINE_TOO_LONG);
	cr_expect_null(id);
	cg_reply_free(err);

	/* A caller handing over more than the cap is refused too (no newline room). */
	char *big = malloc(CG_WIRE_MAX_LINE);
	memset(big, ' ', CG_WIRE_MAX_LINE);
	cr_expect_eq(cg_wire_decode(big, CG_WIRE_MAX_LINE, true, false, &rules, &req, &err, &id),
		     -1);
	cr_expect_eq(err->id, CG_R_LINE_TOO_LONG);
	cg_reply_free(err);

	/* Just under the cap: a long reason pads a valid request to MAX-1 bytes. */
	size_t n = CG_WIRE_MAX_LINE - 1;
	const char *head = "{" IDT ",\"pipeline\":[[\"ls\"]],\"x\":\"";
	size_t hl = strlen(head);
	memcpy(big, head, hl);
	memset(big + hl, 'a', n - hl - 2);
	memcpy(big + n - 2, "\"}", 2);
	cr_expect_eq(cg_wire_decode(big, n, true, false, &rules, &req, &err, &id), 0, "refused: %s",
		     err ? cg_reply_def_of(err)->key : "");
	cg_request_free(req);
	free(id);
	free(big);
}

Test(wire, no_newline_beats_bad_json)
{
	struct cg_request *req = NULL;
	struct cg_reply *err = NULL;
	char *id = NULL;
	cr_expect_eq(cg_wire_decode("{\"id\":\"r", 8, false, false, &rules, &req, &err, &id), -1);
	cr_expect_eq(err->id, CG_R_LINE_NO_NEWLINE);
	cr_expect_null(id);
	cg_reply_free(err);
}

Test(wire, env_dangerous_list)
{
	static const char *const bad[] = {
		"LD_PRELOAD",
		"LD_LIBRARY_PATH",
		"LD_AUDIT",
		"BASH_ENV",
		"ENV",
		"BASH_FUNC_f",
		"SHELLOPTS",
		"BASHOPTS",
		"PS4",
		"IFS",
		"PATH",
		"GCONV_PATH",
		"LOCPATH",
		"NLSPATH",
		"HOSTALIASES",
		"RES_OPTIONS",
		"MALLOC_CHECK_",
		"GLIBC_TUNABLES",
		"PYTHONPATH",
		"PYTHONSTARTUP",
		"PYTHONHOME",
		"PERL5LIB",
		"PERL5OPT",
		"PERLLIB",
		"RUBYOPT",
		"RUBYLIB",
		"NODE_OPTIONS",
		"NODE_PATH",
		"GIT_SSH",
		"GIT_SSH_COMMAND",
		"GIT_EXEC_PATH",
		"GIT_CONFIG",
		"GIT_CONFIG_COUNT",
		"GIT_ASKPASS",
		"SSH_ASKPASS",
		"EDITOR",
		"VISUAL",
		"PAGER",
		"GIT_PAGER",
		"LESSOPEN",
		"LESSCLOSE",
		"TMPDIR",
		"SSH_AUTH_SOCK",
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(bad); i++) {
		const char *why = NULL;
		cr_expect(cg_wire_env_dangerous(bad[i], &why), "%s", bad[i]);
		cr_expect(why && *why, "%s has a why", bad[i]);
	}
	static const char *const fine[] = {
		"LANG", "DEBIAN_FRONTEND", "TERM",	"HOME_X", "ENVX", "PATHX",
		"LD",	"GIT_AUTHOR_NAME", "ld_preload"
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(fine); i++) {
		const char *why = "x";
		cr_expect_not(cg_wire_env_dangerous(fine[i], &why), "%s", fine[i]);
		cr_expect_null(why);
	}
	cr_expect(cg_wire_env_dangerous("LD_PRELOAD", NULL));
}

/* ---- responses ---- */

static json_t *parse_response(const char *line, size_t len)
{
	cr_assert_gt(len, 0);
	cr_assert_eq(line[len - 1], '\n', "response ends with a newline");
	cr_assert_null(memchr(line, '\n', len - 1), "response is one line");
	cr_assert_eq(strlen(line), len);
	json_error_t jerr;
	json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	cr_assert_not_null(o, "%s", jerr.text);
	return o;
}

static unsigned char *unb64(json_t *v, size_t *n)
{
	cr_assert(json_is_string(v));
	unsigned char *p = cg_base64_decode(json_string_value(v), json_string_length(v), n);
	cr_assert_not_null(p);
	return p;
}

Test(wire, encode_ok_round_trip)
{
	const unsigned char err0[] = { 'e', 0, 0xff, '\n', '"' };
	const unsigned char out[] = { 0, 1, 2, 0xfe, 'x', '\\' };
	struct cg_stage_out st[2] = {
		{ .exit_code = 0, .err = err0, .err_len = sizeof(err0) },
		{ .exit_code = 141, .err = NULL, .err_len = 0, .err_truncated = true },
	};
	struct cg_reply *r =
	    cg_reply_new(CG_R_EXEC_DONE, "{s:i,s:i}", "stages", 2, "exit_code", 141);
	cg_reply_set_trace(r, "00000000-0000-4000-8000-000000000001");
	struct cg_response resp = { .id = "r1",
				    .status = CG_STATUS_OK,
				    .n_stages = 2,
				    .stages = st,
				    .out = out,
				    .out_len = sizeof(out),
				    .reply = r };
	size_t len = 0;
	char *line = cg_wire_encode_response(&resp, &len);
	cr_assert_not_null(line);
	cr_expect_eq(strncmp(line, "{\"id\":\"r1\",\"status\":\"ok\",\"stages\":[", 35), 0, "%s",
		     line);
	json_t *o = parse_response(line, len);
	cr_expect_null(json_object_get(o, "message"), "no message on ok");
	json_t *stages = json_object_get(o, "stages");
	cr_assert_eq(json_array_size(stages), 2);
	json_t *s0 = json_array_get(stages, 0), *s1 = json_array_get(stages, 1);
	cr_expect_eq(json_integer_value(json_object_get(s0, "exit_code")), 0);
	cr_expect_eq(json_integer_value(json_object_get(s1, "exit_code")), 141);
	size_t n;
	unsigned char *p = unb64(json_object_get(s0, "stderr"), &n);
	cr_expect_eq(n, sizeof(err0));
	cr_expect_arr_eq(p, err0, sizeof(err0));
	free(p);
	cr_expect_str_eq(json_string_value(json_object_get(s1, "stderr")), "");
	cr_expect_null(json_object_get(s0, "stderr_truncated"), "absent when false");
	cr_expect(json_is_true(json_object_get(s1, "stderr_truncated")));
	p = unb64(json_object_get(o, "stdout"), &n);
	cr_expect_eq(n, sizeof(out));
	cr_expect_arr_eq(p, out, sizeof(out));
	free(p);
	cr_expect_null(json_object_get(o, "stdout_truncated"), "absent when false");
	json_t *rj = json_object_get(o, "reply");
	cr_expect_str_eq(json_string_value(json_object_get(rj, "type")), "S");
	cr_expect_str_eq(json_string_value(json_object_get(rj, "code")), "MCP-EXEC-S-001");
	cr_expect_str_eq(json_string_value(json_object_get(rj, "trace_id")),
			 "00000000-0000-4000-8000-000000000001");
	/* Key order: id, status, stages, stdout, reply. */
	const char *keys[] = { "id", "status", "stages", "stdout", "reply" };
	size_t k = 0;
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v)
	{
		cr_assert_lt(k, CG_ARRAY_LEN(keys), "extra key %s", key);
		cr_expect_str_eq(key, keys[k], "key %zu", k);
		k++;
	}
	json_decref(o);
	free(line);

	/* Truncated stdout gets its flag, right after stdout. */
	resp.out_truncated = true;
	line = cg_wire_encode_response(&resp, &len);
	cr_assert_not_null(line);
	cr_expect_not_null(strstr(line, "\",\"stdout_truncated\":true,\"reply\":"), "%s", line);
	free(line);
	cg_reply_free(r);
}

Test(wire, encode_refusals)
{
	struct cg_reply *r = cg_reply_new(CG_R_TIME_MISSING, NULL);
	struct cg_response resp = { .id = NULL, .status = CG_STATUS_ERROR, .reply = r };
	size_t len = 0;
	char *line = cg_wire_encode_response(&resp, &len);
	cr_assert_not_null(line);
	cr_expect_eq(
	    strncmp(line, "{\"id\":\"\",\"status\":\"error\",\"message\":\"Field 'time'", 49), 0,
	    "%s", line);
	json_t *o = parse_response(line, len);
	cr_expect_null(json_object_get(o, "stages"));
	cr_expect_null(json_object_get(o, "stdout"));
	cr_expect_str_eq(
	    json_string_value(json_object_get(o, "message")),
	    json_string_value(json_object_get(json_object_get(o, "reply"), "message")));
	cr_expect_str_eq(
	    json_string_value(json_object_get(json_object_get(o, "reply"), "message_key")),
	    "TIME_MISSING");
	json_decref(o);
	free(line);
	cg_reply_free(r);

	/* denied/timeout carry no message (seed shape), extras merge but never override. */
	r = cg_reply_new(CG_R_GATE_DONE, "{s:s,s:s}", "decision", "BLOCK", "rule_id", "r9");
	json_t *extra = json_pack("{s:s,s:s,s:s}", "decision", "BLOCK", "id", "evil", "reply", "x");
	resp = (struct cg_response){
		.id = "g1", .status = CG_STATUS_DENIED, .reply = r, .extra = extra
	};
	line = cg_wire_encode_response(&resp, &len);
	cr_assert_not_null(line);
	o = parse_response(line, len);
	cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "g1");
	cr_expect_str_eq(json_string_value(json_object_get(o, "status")), "denied");
	cr_expect_null(json_object_get(o, "message"));
	cr_expect_str_eq(json_string_value(json_object_get(o, "decision")), "BLOCK");
	cr_expect(json_is_object(json_object_get(o, "reply")));
	json_decref(o);
	json_decref(extra);
	free(line);
	cg_reply_free(r);

	/* No reply: nothing to encode. */
	resp = (struct cg_response){ .id = "x", .status = CG_STATUS_OK };
	cr_expect_null(cg_wire_encode_response(&resp, &len));
}

/* A decode refusal encodes into the seed's error shape with the id it read. */
Test(wire, refusal_end_to_end)
{
	struct cg_request *req = NULL;
	char *id = NULL;
	struct cg_reply *err = decode("{\"id\":\"abc\",\"pipeline\":[[\"ls\"]]}", &req, &id);
	cr_assert_not_null(err);
	struct cg_response resp = { .id = id ? id : "",
				    .status = cg_reply_def_of(err)->status,
				    .reply = err };
	size_t len;
	char *line = cg_wire_encode_response(&resp, &len);
	json_t *o = parse_response(line, len);
	cr_expect_str_eq(json_string_value(json_object_get(o, "id")), "abc");
	cr_expect_str_eq(json_string_value(json_object_get(o, "status")), "error");
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "reply"), "type")),
			 "I");
	cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "reply"), "code")),
			 "MCP-VAL-I-005");
	json_decref(o);
	free(line);
	free(id);
	cg_reply_free(err);
}

/* ---- replay window ---- */

#define SEC 1000000000LL

Test(wire, replay_remember_seen_expire)
{
	struct cg_replay *rp = cg_replay_new(120 * SEC);
	cr_assert_not_null(rp);
	int64_t t0 = 1700000000 * SEC;
	cr_expect_not(cg_replay_seen(rp, "a", 1000, t0));
	cr_expect_eq(cg_replay_remember(rp, "a", 1000, t0), 0);
	cr_expect(cg_replay_seen(rp, "a", 1000, t0));
	cr_expect(cg_replay_seen(rp, "a", 1000, t0 + 120 * SEC - 1), "inside the window");
	cr_expect_not(cg_replay_seen(rp, "b", 1001, t0));
	cr_expect_not(cg_replay_seen(rp, "A", 1000, t0), "ids are case-sensitive");
	cr_expect_not(cg_replay_seen(rp, "a", 1000, t0 + 120 * SEC), "expired at the window");
	cr_expect_eq(cg_replay_count(rp), 0, "expired entries are dropped");
	cr_expect_eq(cg_replay_remember(rp, "a", 1000, t0 + 121 * SEC), 0,
		     "re-usable after expiry");
	cr_expect(cg_replay_seen(rp, "a", 1000, t0 + 122 * SEC));
	/* A clock step backwards keeps ids longer, never shorter. */
	cr_expect(cg_replay_seen(rp, "a", 1000, t0));
	cg_replay_free(rp);

	cr_expect(cg_replay_seen(NULL, "a", 1000, t0), "no window fails closed");
	cr_expect_eq(cg_replay_remember(NULL, "a", 1000, t0), -1);
	cg_replay_free(NULL);
}

Test(wire, replay_cap_fails_closed)
{
	struct cg_replay *rp = cg_replay_new(10 * SEC);
	cr_assert_not_null(rp);
	cg_replay_set_limit(rp, 3);
	int64_t t0 = 1700000000 * SEC;
	/* Three uids: the cap on the whole window, not one uid's share. */
	cr_expect_eq(cg_replay_remember(rp, "a", 1000, t0), 0);
	cr_expect_eq(cg_replay_remember(rp, "b", 1001, t0 + 1 * SEC), 0);
	cr_expect_eq(cg_replay_remember(rp, "c", 1002, t0 + 2 * SEC), 0);
	errno = 0;
	cr_expect_eq(cg_replay_remember(rp, "d", 1003, t0 + 3 * SEC), -1);
	cr_expect_eq(errno, ENOSPC);
	cr_expect_not(cg_replay_seen(rp, "d", 1003, t0 + 3 * SEC),
		      "a refused id is not remembered");
	cr_expect(cg_replay_seen(rp, "a", 1000, t0 + 3 * SEC), "nothing was evicted early");
	/* Once "a" expires there is room again. */
	cr_expect_eq(cg_replay_remember(rp, "d", 1003, t0 + 10 * SEC), 0);
	cr_expect_not(cg_replay_seen(rp, "a", 1000, t0 + 10 * SEC));
	cr_expect(cg_replay_seen(rp, "b", 1001, t0 + 10 * SEC));
	cr_expect_eq(cg_replay_count(rp), 3);
	cg_replay_free(rp);
}

/* One uid holds at most 1/8 of the window: its flood refuses only its own requests (s36). */
Test(wire, replay_one_uid_cannot_fill_the_window)
{
	struct cg_replay *rp = cg_replay_new(10 * SEC);
	cr_assert_not_null(rp);
	cg_replay_set_limit(rp, 80);
	int64_t t0 = 1700000000 * SEC;
	char id[32];
	for (int i = 0; i < 10; i++) {
		snprintf(id, sizeof(id), "flood-%d", i);
		cr_expect_eq(cg_replay_remember(rp, id, 1000, t0), 0);
	}
	errno = 0;
	cr_expect_eq(cg_replay_remember(rp, "flood-10", 1000, t0), -1, "past its share");
	cr_expect_eq(errno, ENOSPC);
	cr_expect_eq(cg_replay_remember(rp, "root", 0, t0), 0, "another uid is not refused");
	/* Its share frees as its ids expire. */
	cr_expect_eq(cg_replay_remember(rp, "flood-10", 1000, t0 + 10 * SEC), 0);
	cg_replay_free(rp);
}

Test(wire, replay_many_ids)
{
	struct cg_replay *rp = cg_replay_new(60 * SEC);
	cr_assert_not_null(rp);
	int64_t t0 = 1700000000 * SEC;
	char id[64];
	for (int i = 0; i < 20000; i++) {
		snprintf(id, sizeof(id), "id-%d", i);
		cr_assert_eq(cg_replay_remember(rp, id, (uid_t)(i % 64), t0 + i), 0);
	}
	cr_expect_eq(cg_replay_count(rp), 20000);
	for (int i = 0; i < 20000; i += 97) {
		snprintf(id, sizeof(id), "id-%d", i);
		cr_expect(cg_replay_seen(rp, id, (uid_t)(i % 64), t0 + 20000), "%s", id);
	}
	cr_expect_not(cg_replay_seen(rp, "id-20000", 1000, t0 + 20000));
	/* Everything expires together once the window has passed. */
	cr_expect_not(cg_replay_seen(rp, "id-19999", (uid_t)(19999 % 64), t0 + 60 * SEC + 20000));
	cr_expect_eq(cg_replay_count(rp), 0);
	cg_replay_free(rp);
}

/* s41b F4: one uid claimed the ids another would send, and learnt which were used. */
Test(wire, replay_ids_are_each_uids_own)
{
	struct cg_replay *rp = cg_replay_new(60 * SEC);
	cr_assert_not_null(rp);
	int64_t t0 = 1700000000 * SEC;
	cr_expect_eq(cg_replay_claim(rp, "req-7", 1004, t0), 0);
	cr_expect_not(cg_replay_seen(rp, "req-7", 1005, t0), "another uid's id is another id");
	cr_expect_eq(cg_replay_claim(rp, "req-7", 1005, t0 + 1), 0, "the other uid's is its own");
	cr_expect_eq(cg_replay_claim(rp, "req-7", 1004, t0 + 2), 1, "a uid's replay is refused");
	cr_expect_eq(cg_replay_claim(rp, "req-7", 1005, t0 + 3), 1);
	cg_replay_forget(rp, "req-7", 1004);
	cr_expect(cg_replay_seen(rp, "req-7", 1005, t0 + 4), "forget is the uid's own too");
	cr_expect_eq(cg_replay_claim(rp, "req-7", 1004, t0 + 5), 0);
	cg_replay_free(rp);
}

Test(wire, replay_claim_and_forget)
{
	struct cg_replay *rp = cg_replay_new(120 * SEC);
	cr_assert_not_null(rp);
	int64_t t0 = 1700000000 * SEC;
	cr_expect_eq(cg_replay_claim(rp, "a", 1000, t0), 0, "first claim remembers");
	cr_expect_eq(cg_replay_claim(rp, "a", 1000, t0 + SEC), 1, "second claim is a replay");
	/* A request refused after its claim gives the id back. */
	cg_replay_forget(rp, "a", 1000);
	cr_expect_not(cg_replay_seen(rp, "a", 1000, t0 + SEC));
	cr_expect_eq(cg_replay_claim(rp, "a", 1000, t0 + 2 * SEC), 0, "usable again after forget");
	cr_expect(cg_replay_seen(rp, "a", 1000, t0 + 2 * SEC));
	cg_replay_forget(rp, "never-claimed", 1000);
	cg_replay_set_limit(rp, 1);
	errno = 0;
	cr_expect_eq(cg_replay_claim(rp, "b", 1000, t0 + 3 * SEC), -1, "full window fails closed");
	cr_expect_eq(errno, ENOSPC);
	cg_replay_free(rp);
}

Test(wire, quoted_names_are_bounded)
{
	/* A huge dangerous-looking name is quoted cut to 64 bytes, with its why. */
	char line[2048];
	char name[1100];
	memset(name, 'X', sizeof(name) - 1);
	memcpy(name, "LD_", 3);
	name[sizeof(name) - 1] = '\0';
	snprintf(line, sizeof(line), "{" IDT ",\"pipeline\":[[\"ls\"]],\"env\":{\"%s\":\"v\"}}",
		 name);
	struct cg_request *req = NULL;
	struct cg_reply *err = decode(line, &req, NULL);
	cr_assert_not_null(err);
	cr_expect_eq(err->id, CG_R_ENV_DANGEROUS);
	const char *q = json_string_value(json_object_get(err->params, "name"));
	cr_expect_eq(strlen(q), 64 + 3, "%s", q);
	cr_expect_eq(strncmp(q, "LD_XXX", 6), 0);
	cr_expect_not_null(json_object_get(err->params, "why"));
	cg_reply_free(err);
}

/* A capped-size stream survives the trip byte for byte. */
Test(wire, encode_large_stream)
{
	size_t n = 3 * 1024 * 1024 + 1;
	unsigned char *out = malloc(n);
	cr_assert_not_null(out);
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)(i * 131 + (i >> 9));
	struct cg_stage_out st = { .exit_code = 3, .err = out + 1, .err_len = n - 1 };
	struct cg_reply *r = cg_reply_new(CG_R_EXEC_DONE, NULL);
	struct cg_response resp = { .id = "big",
				    .status = CG_STATUS_OK,
				    .n_stages = 1,
				    .stages = &st,
				    .out = out,
				    .out_len = n,
				    .out_truncated = true,
				    .reply = r };
	size_t len = 0;
	char *line = cg_wire_encode_response(&resp, &len);
	cr_assert_not_null(line);
	json_t *o = parse_response(line, len);
	size_t m;
	unsigned char *p = unb64(json_object_get(o, "stdout"), &m);
	cr_expect_eq(m, n);
	cr_expect_eq(memcmp(p, out, n), 0);
	free(p);
	p = unb64(json_object_get(json_array_get(json_object_get(o, "stages"), 0), "stderr"), &m);
	cr_expect_eq(m, n - 1);
	cr_expect_eq(memcmp(p, out + 1, n - 1), 0);
	free(p);
	cr_expect(json_is_true(json_object_get(o, "stdout_truncated")));
	json_decref(o);
	free(line);
	free(out);
	cg_reply_free(r);
}

/*
 * Replay across a restart (issue 12, item 5): with a start time set, a
 * request dated before it is refused with its own code, one dated at or
 * after it passes, and clearing it turns the check off.
 */
Test(wire, requests_dated_before_the_start_are_refused)
{
	struct cg_request *req = NULL;
	int64_t start;
	cr_assert_eq(cg_parse_time("2026-02-13T14:29:59.500Z", &start), 0);
	cg_wire_set_not_before(start);
	struct cg_reply *err =
	    decode("{\"id\":\"r1\",\"time\":\"2026-02-13T14:29:59Z\",\"pipeline\":[[\"ls\"]]}",
		   &req, NULL);
	cr_assert_not_null(err, "a request made before the start passed");
	cr_assert_eq(err->id, CG_R_TIME_BEFORE_START, "%s", cg_reply_def_of(err)->key);
	cr_assert_str_eq(cg_reply_def_of(err)->code, "MCP-VAL-I-024");
	cg_reply_free(err);
	/* The control: made after the start (and fresh). */
	err = decode("{" IDT ",\"pipeline\":[[\"ls\"]]}", &req, NULL);
	cr_assert_null(err);
	cg_request_free(req);
	cg_wire_set_not_before(0);
	err = decode("{\"id\":\"r1\",\"time\":\"2026-02-13T14:29:59Z\",\"pipeline\":[[\"ls\"]]}",
		     &req, NULL);
	cr_assert_null(err, "the check is off again");
	cg_request_free(req);
}

/* The evidence reads: trace_id required (verdict, replay) and a plain token; no time needed. */
Test(wire, evidence_reads)
{
	static const struct {
		const char *line;
		enum cg_reply_id code; /* CG_R__COUNT: accepted */
		enum cg_action action;
	} cases[] = {
		{ "{\"action\":\"verdict\",\"trace_id\":\"7d3f0c2e-9a41-4b8e\"}", OK,
		  CG_ACTION_VERDICT },
		{ "{\"action\":\"replay\",\"trace_id\":\"a.b_c-1\"}", OK, CG_ACTION_REPLAY },
		{ "{\"action\":\"log\"}", OK, CG_ACTION_LOG },
		{ "{\"action\":\"log\",\"limit\":5000,\"since\":\"2026-11-23T10:00:00Z\"}", OK,
		  CG_ACTION_LOG },
		{ "{\"action\":\"verdict\"}", CG_R_TRACE_ID_INVALID, 0 },
		{ "{\"action\":\"replay\",\"trace_id\":\"../../etc\"}", CG_R_TRACE_ID_INVALID, 0 },
		{ "{\"action\":\"verdict\",\"trace_id\":\".hidden\"}", CG_R_TRACE_ID_INVALID, 0 },
		{ "{\"action\":\"verdict\",\"trace_id\":\"\"}", CG_R_TRACE_ID_INVALID, 0 },
		{ "{\"action\":\"log\",\"trace_id\":\"a/b\"}", CG_R_TRACE_ID_INVALID, 0 },
		{ "{\"action\":\"verdict\",\"trace_id\":7}", CG_R_FIELD_TYPE, 0 },
		{ "{\"action\":\"log\",\"limit\":0}", CG_R_FIELD_TYPE, 0 },
		{ "{\"action\":\"log\",\"limit\":5001}", CG_R_FIELD_TYPE, 0 },
		{ "{\"action\":\"log\",\"since\":\"yesterday\"}", CG_R_FIELD_TYPE, 0 },
		/* A stale time is still refused: a present field is checked as for exec. */
		{ "{\"action\":\"log\",\"time\":\"2001-01-01T00:00:00Z\"}", CG_R_TIME_STALE, 0 },
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(cases); i++) {
		struct cg_request *req = NULL;
		struct cg_reply *err = decode(cases[i].line, &req, NULL);
		if (cases[i].code == OK) {
			cr_expect_null(err, "%s refused with %s", cases[i].line,
				       err ? cg_reply_def_of(err)->key : "");
			if (req)
				cr_expect_eq(req->action, cases[i].action, "%s", cases[i].line);
		} else {
			cr_expect_not_null(err, "%s accepted", cases[i].line);
			if (err)
				cr_expect_eq(cg_reply_def_of(err)->id, cases[i].code, "%s: %s",
					     cases[i].line, cg_reply_def_of(err)->key);
		}
		cg_reply_free(err);
		cg_request_free(req);
	}
}
