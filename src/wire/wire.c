/* SPDX-License-Identifier: MIT */
/*
 * wire — the seed-002 / PROTOCOL.md request codec and the replay window.
 *
 * cg_wire_decode turns one request line into a struct cg_request, checking
 * it in the order documented in docs/protocol.md ("Validation order"); the
 * first failing step answers with its own MCP-*-I reply. The order is part
 * of the contract: tests pin it, so a request with several faults always
 * gets the same refusal.
 *
 * Invariants:
 *  - The codec MUST NOT execute, open or resolve anything; it only reads
 *    bytes and builds values.
 *  - It MUST NOT abort on any input; every allocation failure is answered
 *    with OUT_OF_MEMORY.
 *  - Every string an approver or log reader will see (id, host, session,
 *    reason, time, cwd, argv, env names and values, gate action strings)
 *    MUST be free of NUL, control, zero-width, bidi, separator and tag
 *    characters, so that what is shown is what runs.
 *  - A dangerous env name MUST be refused with its own code, before the
 *    allow-list is consulted; it is never silently stripped.
 *  - Text echoed from a request into a reply MUST be sanitised (valid
 *    UTF-8, no forbidden characters, bounded), because replies are logged.
 *  - The replay window MUST fail closed: when it is full and nothing has
 *    expired, cg_replay_remember fails and the caller refuses the request.
 */
#include "wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "util.h"

/* Requests dated before this are refused (cg_wire_set_not_before); 0: none. */
static _Atomic int64_t not_before_ns;

void cg_wire_set_not_before(int64_t wall_ns)
{
	atomic_store(&not_before_ns, wall_ns);
}

/* Marks a request time ahead of the clock (cg_wire_set_mark_ahead); NULL: none. */
static _Atomic(cg_wire_mark_fn) mark_ahead;

void cg_wire_set_mark_ahead(cg_wire_mark_fn fn)
{
	atomic_store(&mark_ahead, fn);
}

/* Per-field byte limits beyond the 1 MiB line cap (docs/protocol.md). */
#define MAX_HOST       255
#define MAX_SESSION    256
#define MAX_REASON     16384
#define MAX_TIME       64
#define MAX_CWD	       4096
#define MAX_ACTIONS    256
#define ECHO_MAX       64 /* bytes of request text quoted back in a reply */
#define MAX_ARGS_DEPTH 64 /* levels inside a gate action's args (scan_any) */
#define STR_(x)	       #x
#define STR(x)	       STR_(x)

/* ---- small helpers ------------------------------------------------------- */

static struct cg_reply *oom(const char *doing)
{
	return cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", doing);
}

/*
 * The class of a code point that must not appear in text a human reads, or
 * NULL when it may. Each class hides or reorders text: controls rewrite a
 * terminal, zero-width and tag characters smuggle invisible content (tags
 * are the "ASCII smuggling" trick against LLM readers), bidi overrides make
 * `rm -rf /tmp/x` display as something else (Trojan Source, CVE-2021-42574).
 */
/* What a field may hold besides printable text. */
enum text_kind {
	TEXT_LINE,  /* an id, a name, a path: nothing but printable text */
	TEXT_TAB,   /* a reason, an env value: TAB too */
	TEXT_LINES, /* a command's argument: TAB and LF (a script, a message of lines) */
};

static const char *forbidden_class(uint32_t cp, enum text_kind kind)
{
	if (cp == '\t')
		return kind != TEXT_LINE ? NULL : "control";
	/*
	 * A newline in an argument (sh -c with a heredoc, a commit message of
	 * several lines: ux-s41b H2) is a row of its own on the approval
	 * screens and $'...' in command texts (cg_shell_word_lines), and never
	 * ends a line of the evidence or a log; a carriage return still could
	 * rewrite one, and stays refused.
	 */
	if (cp == '\n')
		return kind == TEXT_LINES ? NULL : "control";
	const char *cls = cg_unicode_hidden(cp);
	/* Variation selectors belong to the text (emoji); every screen shows them escaped. */
	return cls && strcmp(cls, "variation") != 0 ? cls : NULL;
}

/*
 * Copy request text for quoting in a reply: at most ECHO_MAX bytes, cut on a
 * character boundary, invalid or forbidden characters replaced by '?', and
 * "..." appended when cut. Returns malloc'd text or NULL on OOM.
 */
static char *echo(const char *s, size_t n)
{
	char *out = malloc(ECHO_MAX + 4);
	size_t o = 0, i = 0;

	if (!out)
		return NULL;
	while (i < n) {
		uint32_t cp;
		size_t k = cg_utf8_next((const unsigned char *)s + i, n - i, &cp);
		bool bad = k == 0 || cp == 0 || forbidden_class(cp, TEXT_LINE);
		if (k == 0)
			k = 1;
		size_t w = bad ? 1 : k;
		if (o + w > ECHO_MAX) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		if (bad)
			out[o] = '?';
		else
			memcpy(out + o, s + i, k);
		o += w;
		i += k;
	}
	out[o] = '\0';
	return out;
}

/* A reply whose params quote request text under one name, sanitised. */
static struct cg_reply *reply_echo(enum cg_reply_id id, const char *name, const char *s, size_t n)
{
	char *e = echo(s, n);
	if (!e)
		return oom("quoting a request field");
	struct cg_reply *r = cg_reply_build(id, "{s:s}", name, e);
	free(e);
	return r;
}

static struct cg_reply *field_type(const char *field, const char *expected)
{
	return cg_reply_new(CG_R_FIELD_TYPE, "{s:s,s:s}", "field", field, "expected", expected);
}

/*
 * Scan one string for NUL and forbidden characters. Returns NULL when clean,
 * or the refusal (ARG_NUL or TEXT_FORBIDDEN_CHAR naming the field, the code
 * point, its class and its byte offset inside the field's value).
 */
static struct cg_reply *scan_text(const char *field, const json_t *str, enum text_kind kind)
{
	const unsigned char *s = (const unsigned char *)json_string_value(str);
	size_t n = json_string_length(str);

	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = cg_utf8_next(s + i, n - i, &cp);
		if (k == 0) /* jansson validated it; treat the impossible as hostile */
			return cg_reply_new(CG_R_UTF8_INVALID, "{s:I}", "offset", (json_int_t)i);
		if (cp == 0)
			return cg_reply_new(CG_R_ARG_NUL, "{s:s}", "field", field);
		const char *cls = forbidden_class(cp, kind);
		if (cls) {
			char hex[16];
			snprintf(hex, sizeof(hex), "%04X", (unsigned)cp);
			return cg_reply_new(CG_R_TEXT_FORBIDDEN_CHAR, "{s:s,s:s,s:s,s:I}", "field",
					    field, "codepoint", hex, "class", cls, "offset",
					    (json_int_t)i);
		}
		i += k;
	}
	return NULL;
}

static char *dup_json_string(const json_t *s)
{
	return strdup(json_string_value(s));
}

/* ---- environment names ---------------------------------------------------- */

struct danger {
	const char *name; /* exact name, or a prefix when prefix is true */
	bool prefix;
	const char *why;
};

/*
 * Names that make a program run code, load code, or act on data the caller
 * chose, whatever program is started. The list is a floor under the policy's
 * allow-list: an operator cannot allow these by accident.
 */
static const struct danger dangers[] = {
	{ "LD_", true, "dynamic loader control: preloads or redirects shared libraries" },
	{ "BASH_ENV", false, "a file every non-interactive bash runs first" },
	{ "ENV", false, "a file every POSIX sh runs first" },
	{ "BASH_FUNC_", true, "an exported bash function (Shellshock-style code injection)" },
	{ "SHELLOPTS", false, "turns on shell options such as xtrace in every script" },
	{ "BASHOPTS", false, "turns on bash options in every script" },
	{ "PS4", false, "expanded by bash xtrace; command substitution runs code" },
	{ "PROMPT_COMMAND", false, "a command bash runs before each prompt" },
	{ "IFS", false, "changes word splitting in every shell script" },
	{ "CDPATH", false, "changes where cd goes in every shell script" },
	{ "PATH", false, "decides which program a bare name runs; only the daemon sets it" },
	{ "GCONV_PATH", false, "loads iconv modules (code) from a chosen directory" },
	{ "LOCPATH", false, "loads locale data from a chosen directory" },
	{ "NLSPATH", false, "loads message catalogs from a chosen path (format-string attacks)" },
	{ "HOSTALIASES", false, "redirects host name resolution" },
	{ "RES_OPTIONS", false, "changes resolver behaviour" },
	{ "MALLOC_", true, "glibc allocator tuning, used to exploit privileged programs" },
	{ "GLIBC_TUNABLES", false, "glibc tunables (CVE-2023-4911, Looney Tunables)" },
	{ "PYTHONPATH", false, "decides which Python modules are imported (code)" },
	{ "PYTHONSTARTUP", false, "a Python file run at interpreter start" },
	{ "PYTHONHOME", false, "moves the Python standard library (code)" },
	{ "PERL5LIB", false, "decides which Perl modules load (code)" },
	{ "PERLLIB", false, "decides which Perl modules load (code)" },
	{ "PERL5OPT", false, "injects perl options; -M loads code" },
	{ "PERL5DB", false, "perl debugger code" },
	{ "RUBYOPT", false, "injects ruby options; -r loads code" },
	{ "RUBYLIB", false, "decides which Ruby libraries load (code)" },
	{ "NODE_OPTIONS", false, "injects node options; --require loads code" },
	{ "NODE_PATH", false, "decides which Node.js modules load (code)" },
	{ "JAVA_TOOL_OPTIONS", false, "injects JVM options; -javaagent loads code" },
	{ "_JAVA_OPTIONS", false, "injects JVM options; -javaagent loads code" },
	{ "GIT_SSH", false, "a program git runs for ssh transport" },
	{ "GIT_SSH_COMMAND", false, "a command git runs for ssh transport" },
	{ "GIT_EXEC_PATH", false, "decides which git helper programs run" },
	{ "GIT_CONFIG", true, "injects git configuration (aliases, pagers, hooks run code)" },
	{ "GIT_TEMPLATE_DIR", false, "installs hooks into new repositories" },
	{ "GIT_ASKPASS", false, "a program git runs to ask for credentials" },
	{ "SSH_ASKPASS", false, "a program ssh runs to ask for credentials" },
	{ "EDITOR", false, "a program tools run to edit text" },
	{ "VISUAL", false, "a program tools run to edit text" },
	{ "PAGER", false, "a program tools run to page output" },
	{ "GIT_PAGER", false, "a program git runs to page output" },
	{ "LESSOPEN", false, "an input preprocessor less runs" },
	{ "LESSCLOSE", false, "a postprocessor less runs" },
	{ "TMPDIR", false, "redirects temporary files (symlink and race attacks)" },
	{ "SSH_AUTH_SOCK", false, "the agent socket; only the daemon sets it, for forward_agent" },
};

bool cg_wire_env_dangerous(const char *name, const char **why)
{
	for (size_t i = 0; i < CG_ARRAY_LEN(dangers); i++) {
		const struct danger *d = &dangers[i];
		bool hit = d->prefix ? strncmp(name, d->name, strlen(d->name)) == 0
				     : strcmp(name, d->name) == 0;
		if (hit) {
			if (why)
				*why = d->why;
			return true;
		}
	}
	if (why)
		*why = NULL;
	return false;
}

/* [A-Za-z_][A-Za-z0-9_]*: anything else cannot be set portably, or is a trick. */
static bool env_name_valid(const char *s, size_t n)
{
	if (n == 0 ||
	    !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++) {
		char c = s[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return false;
	}
	return true;
}

/*
 * Allowed names whose values programs interpret: each value must have the
 * form a value of that name has, whatever the policy's env_allow says. An
 * attack set DEBIAN_FRONTEND to "noninteractive;BEGIN{do q(ws/x)}#": debconf
 * puts the name in a Perl string eval, so an approved root apt-get ran the
 * agent's file. A locale or TZ value that is a path loads data from where
 * the agent wrote it.
 */
struct value_rule {
	const char *name;  /* exact, or a prefix when it ends with '_' */
	const char *chars; /* every byte of the value is one of these */
	bool relative;	   /* a path under a data directory: never absolute */
	const char *expected;
	const char *risk;
};

#define LETTERS	     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#define LOCALE_CHARS LETTERS "0123456789_.@+-"

static const struct value_rule value_rules[] = {
	{ "DEBIAN_FRONTEND", LETTERS, false,
	  "a frontend name of letters (noninteractive, readline, ...)",
	  "Perl code (debconf evaluates it)" },
	{ "LANG", LOCALE_CHARS, false, "a locale name such as C.UTF-8 (letters, digits, _.@+-)",
	  "a path to locale data" },
	{ "LANGUAGE", LOCALE_CHARS ":", false,
	  "locale names (letters, digits, _.@+-), ':'-separated", "a path to locale data" },
	{ "LC_", LOCALE_CHARS, false, "a locale name such as C.UTF-8 (letters, digits, _.@+-)",
	  "a path to locale data" },
	{ "TERM", LOCALE_CHARS, false, "a terminal name such as xterm-256color",
	  "a path to terminfo data" },
	{ "TZ", LOCALE_CHARS "/:,<>", true,
	  "a zone name such as UTC or Europe/Berlin, or a POSIX TZ rule", "a path to a zone file" },
};

/* NULL, or the rule value breaks (its expected form): never "..", never absolute where relative. */
static const struct value_rule *env_value_bad(const char *name, const char *v)
{
	for (size_t i = 0; i < CG_ARRAY_LEN(value_rules); i++) {
		const struct value_rule *r = &value_rules[i];
		size_t rl = strlen(r->name);
		if (r->name[rl - 1] == '_' ? strncmp(name, r->name, rl) != 0
					   : strcmp(name, r->name) != 0)
			continue;
		bool absolute = v[0] == '/' || strncmp(v, ":/", 2) == 0; /* TZ=":/path" too */
		return v[strspn(v, r->chars)] || strstr(v, "..") || (r->relative && absolute)
			   ? r
			   : NULL;
	}
	return NULL;
}

static bool env_allowed(const struct cg_wire_rules *rules, const char *name)
{
	for (size_t i = 0; rules->env_allow && i < rules->n_env_allow; i++)
		if (rules->env_allow[i] && strcmp(rules->env_allow[i], name) == 0)
			return true;
	return false;
}

/* ---- decode steps ------------------------------------------------------------ */

/* Step 3: parse; jansson's error code tells the specific failure apart. */
static struct cg_reply *parse_line(const char *line, size_t len, json_t **root)
{
	json_error_t jerr;

	/* ALLOW_NUL so that "\u0000" in a value reaches scan_text and gets ARG_NUL
	 * with its field, instead of a generic syntax error; DECODE_ANY so that a
	 * bare scalar gets JSON_NOT_OBJECT rather than a misleading syntax error. */
	*root =
	    json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
	if (*root)
		return NULL;
	switch (json_error_code(&jerr)) {
	case json_error_out_of_memory:
		return oom("parsing the request");
	case json_error_invalid_utf8:
		return cg_reply_new(CG_R_UTF8_INVALID, "{s:I}", "offset",
				    (json_int_t)jerr.position);
	case json_error_duplicate_key:
		return reply_echo(CG_R_JSON_DUPLICATE_KEY, "detail", jerr.text, strlen(jerr.text));
	case json_error_null_byte_in_key:
		return cg_reply_new(CG_R_ARG_NUL, "{s:s}", "field", "(an object key)");
	default: {
		char *e = echo(jerr.text, strlen(jerr.text));
		if (!e)
			return oom("describing a JSON error");
		struct cg_reply *r = cg_reply_new(CG_R_JSON_INVALID, "{s:s,s:i,s:i}", "detail", e,
						  "line", jerr.line, "column", jerr.column);
		free(e);
		return r;
	}
	}
}

/* An id is 1..CG_WIRE_MAX_ID visible ASCII bytes: it lands in logs and paths. */
static bool id_printable(const char *s, size_t n)
{
	if (n == 0 || n > CG_WIRE_MAX_ID)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/* Step 5. On success req->id is set and *id_out holds a copy. */
static struct cg_reply *take_id(json_t *root, struct cg_request *req, char **id_out)
{
	json_t *v = json_object_get(root, "id");

	if (!v) {
		char uuid[40];
		if (cg_uuid4(uuid, sizeof(uuid)) != 0)
			return cg_reply_new(CG_R_SYS_CRASH, NULL);
		req->id = strdup(uuid);
		req->id_given = false;
	} else {
		if (!json_is_string(v))
			return field_type("id", "a string");
		struct cg_reply *r = scan_text("id", v, TEXT_LINE);
		if (r)
			return r;
		if (!id_printable(json_string_value(v), json_string_length(v)))
			return cg_reply_new(CG_R_ID_INVALID, "{s:i}", "limit", CG_WIRE_MAX_ID);
		req->id = dup_json_string(v);
		req->id_given = true;
	}
	if (!req->id || !(*id_out = strdup(req->id)))
		return oom("copying the request id");
	return NULL;
}

/* Step 6: every known field present has its JSON type, and strings their limit. */
static struct cg_reply *check_types(json_t *root)
{
	static const struct {
		const char *name;
		json_type type; /* JSON_TRUE stands for "a boolean" */
		const char *expected;
		size_t limit; /* strings only; 0 = the line cap */
	} fields[] = {
		{ "host", JSON_STRING, "a string", MAX_HOST },
		{ "session", JSON_STRING, "a string", MAX_SESSION },
		{ "reason", JSON_STRING, "a string", MAX_REASON },
		{ "time", JSON_STRING, "a string", MAX_TIME },
		{ "pipeline", JSON_ARRAY, "an array of arrays of strings", 0 },
		{ "env", JSON_OBJECT, "an object of strings", 0 },
		{ "privileged", JSON_TRUE, "a boolean", 0 },
		{ "forward_agent", JSON_TRUE, "a boolean", 0 },
		{ "action", JSON_STRING, "a string", 0 },
		{ "timeout_ms", JSON_INTEGER, "an integer", 0 },
		{ "cwd", JSON_STRING, "a string", MAX_CWD },
		{ "actions", JSON_ARRAY, "an array of objects", 0 },
		{ "grant", JSON_OBJECT, "an object", 0 },
		{ "trace_id", JSON_STRING, "a string", CG_WIRE_MAX_TRACE_ID },
		{ "limit", JSON_INTEGER, "an integer", 0 },
		{ "since", JSON_STRING, "a string", MAX_TIME },
	};

	for (size_t i = 0; i < CG_ARRAY_LEN(fields); i++) {
		json_t *v = json_object_get(root, fields[i].name);
		if (!v)
			continue;
		bool ok = fields[i].type == JSON_TRUE ? json_is_boolean(v)
						      : json_typeof(v) == fields[i].type;
		if (!ok)
			return field_type(fields[i].name, fields[i].expected);
		if (fields[i].limit && json_string_length(v) > fields[i].limit)
			return cg_reply_new(CG_R_FIELD_TOO_LONG, "{s:s,s:I}", "field",
					    fields[i].name, "limit", (json_int_t)fields[i].limit);
	}
	return NULL;
}

/* Step 7. */
static struct cg_reply *take_action(json_t *root, struct cg_request *req)
{
	json_t *v = json_object_get(root, "action");

	req->action = CG_ACTION_EXEC;
	if (!v)
		return NULL;
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n == 4 && memcmp(s, "exec", 4) == 0)
		req->action = CG_ACTION_EXEC;
	else if (n == 4 && memcmp(s, "gate", 4) == 0)
		req->action = CG_ACTION_GATE;
	else if (n == 4 && memcmp(s, "ping", 4) == 0)
		req->action = CG_ACTION_PING;
	else if (n == 5 && memcmp(s, "grant", 5) == 0)
		req->action = CG_ACTION_GRANT;
	else if (n == 7 && memcmp(s, "verdict", 7) == 0)
		req->action = CG_ACTION_VERDICT;
	else if (n == 6 && memcmp(s, "replay", 6) == 0)
		req->action = CG_ACTION_REPLAY;
	else if (n == 3 && memcmp(s, "log", 3) == 0)
		req->action = CG_ACTION_LOG;
	else
		return reply_echo(CG_R_ACTION_UNKNOWN, "action", s, n);
	return NULL;
}

/* A string longer than the kernel passes to a program (MAX_ARG_STRLEN). */
static struct cg_reply *arg_too_big(const char *field, size_t bytes)
{
	return cg_reply_new(CG_R_ARG_TOO_BIG, "{s:s,s:I,s:I}", "field", field, "bytes",
			    (json_int_t)bytes, "limit", (json_int_t)CG_WIRE_MAX_ARG_STRLEN);
}

/* Step 8a: pipeline shape, copying argv as it goes. */
static struct cg_reply *take_pipeline(json_t *pl, struct cg_request *req)
{
	char field[64];
	size_t n = json_array_size(pl);

	if (n == 0)
		return cg_reply_new(CG_R_PIPELINE_EMPTY, NULL);
	if (n > CG_WIRE_MAX_STAGES)
		return cg_reply_new(CG_R_TOO_MANY, "{s:s,s:i}", "field", "pipeline", "limit",
				    CG_WIRE_MAX_STAGES);
	req->stages = calloc(n, sizeof(*req->stages));
	if (!req->stages)
		return oom("copying the pipeline");
	req->n_stages = n;
	for (size_t i = 0; i < n; i++) {
		json_t *st = json_array_get(pl, i);
		snprintf(field, sizeof(field), "pipeline[%zu]", i);
		if (!json_is_array(st))
			return field_type(field, "an array of strings");
		size_t argc = json_array_size(st);
		if (argc == 0)
			return cg_reply_new(CG_R_STAGE_EMPTY, "{s:I}", "stage", (json_int_t)i);
		if (argc > CG_WIRE_MAX_ARGS)
			return cg_reply_new(CG_R_TOO_MANY, "{s:s,s:i}", "field", field, "limit",
					    CG_WIRE_MAX_ARGS);
		struct cg_stage *stage = &req->stages[i];
		stage->argv = calloc(argc + 1, sizeof(char *));
		if (!stage->argv)
			return oom("copying the pipeline");
		for (size_t j = 0; j < argc; j++) {
			json_t *a = json_array_get(st, j);
			if (!json_is_string(a)) {
				snprintf(field, sizeof(field), "pipeline[%zu][%zu]", i, j);
				return field_type(field, "a string");
			}
			/* An empty command name is an empty stage in all but form. */
			if (j == 0 && json_string_length(a) == 0)
				return cg_reply_new(CG_R_STAGE_EMPTY, "{s:I}", "stage",
						    (json_int_t)i);
			/* Longer than execve takes: it could never start (E2BIG). */
			if (json_string_length(a) > CG_WIRE_MAX_ARG_STRLEN) {
				snprintf(field, sizeof(field), "pipeline[%zu][%zu]", i, j);
				return arg_too_big(field, json_string_length(a));
			}
			stage->argv[j] = dup_json_string(a);
			if (!stage->argv[j])
				return oom("copying the pipeline");
			stage->argc = j + 1;
		}
	}
	return NULL;
}

static struct cg_reply *action_invalid(size_t i, const char *detail)
{
	return cg_reply_new(CG_R_ACTIONS_INVALID, "{s:I,s:s}", "index", (json_int_t)i, "detail",
			    detail);
}

/* Step 8b: the gate's abstract actions (seed 004's proposed-action shape). */
static struct cg_reply *check_actions(json_t *acts)
{
	size_t n = json_array_size(acts);

	if (n == 0)
		return action_invalid(0, "'actions' is empty");
	if (n > MAX_ACTIONS)
		return cg_reply_new(CG_R_TOO_MANY, "{s:s,s:i}", "field", "actions", "limit",
				    MAX_ACTIONS);
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(acts, i);
		if (!json_is_object(a))
			return action_invalid(i, "an action must be an object");
		json_t *t = json_object_get(a, "action_type");
		if (!t)
			return action_invalid(i, "'action_type' is required");
		if (!json_is_string(t) || json_string_length(t) == 0)
			return action_invalid(i, "'action_type' must be a non-empty string");
		json_t *tool = json_object_get(a, "tool");
		if (tool && !json_is_string(tool))
			return action_invalid(i, "'tool' must be a string");
		json_t *res = json_object_get(a, "resource");
		if (res && !json_is_string(res))
			return action_invalid(i, "'resource' must be a string");
		json_t *args = json_object_get(a, "args");
		if (args && !json_is_object(args))
			return action_invalid(i, "'args' must be an object");
	}
	return NULL;
}

/*
 * cg_parse_time works in int64 nanoseconds, which only reach years
 * 1678..2261; outside that its multiplication would overflow. Such a time is
 * centuries stale or ahead either way, so refuse it by direction here.
 * Returns 0 when the year is in range, -1 (past) or +1 (future) otherwise,
 * and 0 for text without a 4-digit year (cg_parse_time rejects it).
 */
static int year_out_of_range(const char *s, size_t n)
{
	int y = 0;
	if (n < 4)
		return 0;
	for (int i = 0; i < 4; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		y = y * 10 + (s[i] - '0');
	}
	return y < 1700 ? -1 : y > 2200 ? 1 : 0;
}

/* Step 9. */
static struct cg_reply *take_time(json_t *root, const struct cg_wire_rules *rules,
				  struct cg_request *req)
{
	json_t *v = json_object_get(root, "time");

	if (!v) {
		/* Reads run nothing, so an old capture replayed shows only what it showed. */
		if (req->action == CG_ACTION_PING || cg_action_reads_evidence(req->action))
			return NULL;
		return cg_reply_new(CG_R_TIME_MISSING, NULL);
	}
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	int64_t t_ns = 0;
	/* strlen != n: an embedded NUL would let the parser see only a prefix. */
	int dir = year_out_of_range(s, n);
	bool parsed = false;
	if (strlen(s) == n && n > 0) {
		if (dir == 0) {
			parsed = cg_parse_time(s, &t_ns) == 0;
		} else {
			/* Check the rest of the shape with an in-range year. */
			char *copy = strdup(s);
			int64_t ignored;
			if (!copy)
				return oom("checking the request time");
			memcpy(copy, "2000", 4);
			parsed = cg_parse_time(copy, &ignored) == 0;
			free(copy);
		}
	}
	if (!parsed)
		return reply_echo(CG_R_TIME_UNPARSEABLE, "time", s, n);

	/* Clamp the window so that its nanoseconds cannot overflow. */
	int64_t window_s = rules->freshness_s > 0 ? rules->freshness_s : CG_WIRE_FRESHNESS_S;
	if (window_s > 1000000000LL)
		window_s = 1000000000LL;
	int64_t ahead_s = window_s < CG_WIRE_AHEAD_S ? window_s : CG_WIRE_AHEAD_S;
	int64_t window_ns = window_s * 1000000000LL, diff_ns;
	if (dir < 0)
		diff_ns = INT64_MIN;
	else if (dir > 0)
		diff_ns = INT64_MAX;
	else if (__builtin_sub_overflow(t_ns, rules->now_ns, &diff_ns))
		diff_ns = t_ns < rules->now_ns ? INT64_MIN : INT64_MAX;
	bool stale = diff_ns<-window_ns, future = diff_ns> ahead_s * 1000000000LL;
	if (stale || future) {
		char *e = echo(s, n);
		if (!e)
			return oom("quoting the request time");
		json_int_t off_s = (json_int_t)(diff_ns / 1000000000LL);
		enum cg_reply_id id =
		    stale ? CG_REPLY_OWNED(CG_R_TIME_STALE) : CG_REPLY_OWNED(CG_R_TIME_FUTURE);
		struct cg_reply *r = cg_reply_build(
		    id, "{s:s,s:I,s:I}", "time", e, stale ? "age_s" : "ahead_s",
		    stale ? -off_s : off_s, "window_s", (json_int_t)(stale ? window_s : ahead_s));
		free(e);
		return r;
	}
	/*
	 * Replay across a restart: the seen-id window is memory only, so a
	 * request dated before this daemon started is refused outright. A
	 * captured request was dated before the old daemon accepted it, which
	 * is before this one started; only someone who can make any request
	 * can date one later, and they need no replay. Except a request the
	 * old daemon took dated ahead of its clock: that one it marked (below),
	 * and the daemon's not-before is past the mark.
	 */
	int64_t not_before = atomic_load(&not_before_ns);
	if (not_before > 0 && t_ns < not_before) {
		char *e = echo(s, n);
		char started[40];
		if (!e)
			return oom("quoting the request time");
		cg_format_time(not_before, started, sizeof(started));
		struct cg_reply *r = cg_reply_build(CG_REPLY_OWNED(CG_R_TIME_BEFORE_START),
						    "{s:s,s:s}", "time", e, "started", started);
		free(e);
		return r;
	}
	/*
	 * A request dated ahead of the clock (inside the window) would still be
	 * dated after a restart, past the successor's start: its time is marked
	 * first where the successor reads its not-before, or it is refused.
	 */
	cg_wire_mark_fn mark = atomic_load(&mark_ahead);
	if (mark && t_ns > rules->now_ns && mark(t_ns) != 0) {
		int err = errno;
		char *e = echo(s, n);
		if (!e)
			return oom("quoting the request time");
		struct cg_reply *r =
		    cg_reply_build(CG_REPLY_OWNED(CG_R_TIME_AHEAD_UNMARKED), "{s:s,s:s}", "time", e,
				   "errno_name", cg_errno_name(err));
		free(e);
		return r;
	}
	req->time_ns = t_ns;
	req->time_str = dup_json_string(v);
	if (!req->time_str)
		return oom("copying the request time");
	return NULL;
}

/* Step 11: names are checked in request order; the first bad one answers. */
static struct cg_reply *take_env(json_t *env, const struct cg_wire_rules *rules,
				 struct cg_request *req)
{
	size_t n = json_object_size(env);
	const char *name;
	json_t *val;

	if (n > CG_WIRE_MAX_ENV)
		return cg_reply_new(CG_R_TOO_MANY, "{s:s,s:i}", "field", "env", "limit",
				    CG_WIRE_MAX_ENV);
	if (n == 0)
		return NULL;
	req->env = calloc(n, sizeof(*req->env));
	if (!req->env)
		return oom("copying the environment");
	json_object_foreach(env, name, val)
	{
		size_t nlen = strlen(name); /* jansson refuses NUL in keys */
		if (!json_is_string(val))
			return field_type("env", "an object of strings");
		if (!env_name_valid(name, nlen))
			return reply_echo(CG_R_ENV_NAME_INVALID, "name", name, nlen);
		const char *why = NULL;
		if (cg_wire_env_dangerous(name, &why)) {
			struct cg_reply *r = reply_echo(CG_R_ENV_DANGEROUS, "name", name, nlen);
			if (r->id == CG_R_ENV_DANGEROUS)
				json_object_set_new(r->params, "why", json_string(why));
			return r;
		}
		if (!env_allowed(rules, name))
			return reply_echo(CG_R_ENV_NOT_ALLOWED, "name", name, nlen);
		/* The program gets NAME=value as one string: past the kernel's cap it
		 * could never start (E2BIG), which is the request's fault, not ours. */
		if (nlen + 1 + json_string_length(val) > CG_WIRE_MAX_ARG_STRLEN) {
			char field[80];
			snprintf(field, sizeof(field), "env.%.64s", name);
			return arg_too_big(field, nlen + 1 + json_string_length(val));
		}
		const struct value_rule *bad = env_value_bad(name, json_string_value(val));
		if (bad)
			return cg_reply_new(CG_R_ENV_VALUE_INVALID, "{s:s,s:s,s:s}", "name", name,
					    "expected", bad->expected, "risk", bad->risk);
		struct cg_env_var *ev = &req->env[req->n_env];
		ev->name = strdup(name);
		ev->value = dup_json_string(val);
		req->n_env++;
		if (!ev->name || !ev->value)
			return oom("copying the environment");
	}
	return NULL;
}

/* Forbidden characters anywhere in a gate action's args (keys and strings). */
static struct cg_reply *scan_any(const char *field, json_t *v, int depth)
{
	struct cg_reply *r = NULL;
	const char *key;
	json_t *x;
	size_t i;

	/*
	 * The args are recorded inside the call's events, a few levels down the
	 * line, and every reader of the journal stops at 256 levels (journal.c
	 * jv_container, which a verifier must be able to rely on): a request
	 * whose record no reader could parse would break replay for good.
	 */
	if (depth > MAX_ARGS_DEPTH)
		return cg_reply_new(CG_R_FIELD_TYPE, "{s:s,s:s}", "field", field, "expected",
				    "JSON nested at most " STR(MAX_ARGS_DEPTH) " levels deep");
	switch (json_typeof(v)) {
	case JSON_STRING:
		return scan_text(field, v, TEXT_TAB);
	case JSON_ARRAY:
		json_array_foreach(v, i, x)
		{
			if ((r = scan_any(field, x, depth + 1)))
				return r;
		}
		return NULL;
	case JSON_OBJECT:
		json_object_foreach(v, key, x)
		{
			json_t *k = json_string(key);
			if (!k)
				return oom("checking gate action args");
			r = scan_text(field, k, TEXT_LINE);
			json_decref(k);
			if (r || (r = scan_any(field, x, depth + 1)))
				return r;
		}
		return NULL;
	default:
		return NULL;
	}
}

/* Step 12: every string an approver or log reader sees, in a fixed order. */
/* Every string (and key) in a nested value; depth-limited, fails closed. */
static struct cg_reply *scan_tree(const char *field, json_t *v, int depth)
{
	struct cg_reply *r;
	if (depth > 8)
		return cg_reply_new(CG_R_FIELD_TYPE, "{s:s,s:s}", "field", field, "expected",
				    "at most 8 levels of nesting");
	if (json_is_string(v))
		return scan_text(field, v, TEXT_TAB);
	const char *key;
	json_t *val;
	size_t i;
	if (json_is_object(v)) {
		json_object_foreach(v, key, val)
		{
			json_t *k = json_string(key);
			r = k ? scan_text(field, k, TEXT_LINE) : oom("checking the grant");
			json_decref(k);
			if (r || (r = scan_tree(field, val, depth + 1)))
				return r;
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, val)
		{
			if ((r = scan_tree(field, val, depth + 1)))
				return r;
		}
	}
	return NULL;
}

static struct cg_reply *scan_all(json_t *root, const struct cg_request *req)
{
	static const struct {
		const char *name;
		enum text_kind kind;
	} plain[] = { { "host", TEXT_LINE },
		      { "session", TEXT_LINE },
		      { "reason", TEXT_TAB },
		      { "time", TEXT_LINE },
		      { "cwd", TEXT_LINE } };
	struct cg_reply *r;
	char field[300];

	for (size_t i = 0; i < CG_ARRAY_LEN(plain); i++) {
		json_t *v = json_object_get(root, plain[i].name);
		if (v && (r = scan_text(plain[i].name, v, plain[i].kind)))
			return r;
	}
	json_t *pl = json_object_get(root, "pipeline"), *st, *a;
	size_t i, j;
	json_array_foreach(pl, i, st)
	{
		json_array_foreach(st, j, a)
		{
			snprintf(field, sizeof(field), "pipeline[%zu][%zu]", i, j);
			if ((r = scan_text(field, a, j ? TEXT_LINES : TEXT_TAB)))
				return r;
		}
	}
	const char *name;
	json_t *val;
	json_object_foreach(json_object_get(root, "env"), name, val)
	{
		/* Names passed env_name_valid already, so they are safe to quote. */
		snprintf(field, sizeof(field), "env.%s", name);
		if ((r = scan_text(field, val, TEXT_TAB)))
			return r;
	}
	/* A grant request is shown to the approver: every string in it, keys too. */
	if (req->action == CG_ACTION_GRANT &&
	    (r = scan_tree("grant", json_object_get(root, "grant"), 0)))
		return r;
	/* Only a gate reads 'actions'; elsewhere it is ignored like unknown fields. */
	json_t *acts = req->action == CG_ACTION_GATE ? json_object_get(root, "actions") : NULL;
	json_t *act;
	json_array_foreach(acts, i, act)
	{
		static const char *const strs[] = { "action_type", "tool", "resource" };
		for (size_t k = 0; k < CG_ARRAY_LEN(strs); k++) {
			json_t *v = json_object_get(act, strs[k]);
			snprintf(field, sizeof(field), "actions[%zu].%s", i, strs[k]);
			if (v && (r = scan_text(field, v, TEXT_LINE)))
				return r;
		}
		json_t *args = json_object_get(act, "args");
		snprintf(field, sizeof(field), "actions[%zu].args", i);
		if (args && (r = scan_any(field, args, 0)))
			return r;
	}
	return NULL;
}

/* A trace id names a directory under traces/: a plain token, never a path. */
static bool trace_token(const char *s, size_t n)
{
	if (n == 0 || n > CG_WIRE_MAX_TRACE_ID || s[0] == '.' || strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* Step 8b, evidence reads: trace_id (required for verdict and replay), limit, since. */
static struct cg_reply *take_evidence_read(json_t *root, struct cg_request *req)
{
	static const char *const names[] = { [CG_ACTION_VERDICT] = "verdict",
					     [CG_ACTION_REPLAY] = "replay",
					     [CG_ACTION_LOG] = "log" };
	const char *action = names[req->action];
	json_t *v = json_object_get(root, "trace_id");
	if (v || req->action != CG_ACTION_LOG) {
		if (!v || !trace_token(json_string_value(v), json_string_length(v)))
			return cg_reply_new(CG_R_TRACE_ID_INVALID, "{s:s}", "action", action);
		if (!(req->trace_id = dup_json_string(v)))
			return oom("copying the request");
	}
	v = json_object_get(root, "limit");
	if (v) {
		json_int_t n = json_integer_value(v);
		if (n < 1 || n > CG_WIRE_LOG_MAX)
			return cg_reply_new(CG_R_FIELD_TYPE, "{s:s,s:s}", "field", "limit",
					    "expected", "an integer from 1 to 5000");
		req->limit = n;
	}
	v = json_object_get(root, "since");
	if (v && (cg_parse_time(json_string_value(v), &req->since_ns) < 0 ||
		  strlen(json_string_value(v)) != json_string_length(v)))
		return cg_reply_new(CG_R_FIELD_TYPE, "{s:s,s:s}", "field", "since", "expected",
				    "an RFC 3339 timestamp");
	return NULL;
}

/* Steps 6-13 against a parsed object; fills req as it goes. */
static struct cg_reply *validate(json_t *root, const struct cg_wire_rules *rules,
				 struct cg_request *req)
{
	struct cg_reply *r;
	json_t *v;

	if ((r = check_types(root)) || (r = take_action(root, req)))
		return r;

	/* Step 8: what to decide about. */
	json_t *pl = json_object_get(root, "pipeline");
	json_t *acts = req->action == CG_ACTION_GATE ? json_object_get(root, "actions") : NULL;
	if (req->action == CG_ACTION_EXEC && !pl)
		return cg_reply_new(CG_R_PIPELINE_MISSING, "{s:s}", "action", "exec");
	if (req->action == CG_ACTION_GATE && !pl && !acts)
		return cg_reply_new(CG_R_GATE_SUBJECT_MISSING, NULL);
	json_t *grant = req->action == CG_ACTION_GRANT ? json_object_get(root, "grant") : NULL;
	if (req->action == CG_ACTION_GRANT && !grant)
		return cg_reply_new(CG_R_GRANT_SPEC_MISSING, NULL);
	if (cg_action_reads_evidence(req->action) && (r = take_evidence_read(root, req)))
		return r;
	if (pl && (r = take_pipeline(pl, req)))
		return r;
	if (acts && (r = check_actions(acts)))
		return r;

	if ((r = take_time(root, rules, req)))
		return r;

	/* Step 10: the agent socket is the daemon owner's; root must not borrow it. */
	v = json_object_get(root, "privileged");
	req->privileged = v ? json_is_true(v) : true;
	v = json_object_get(root, "forward_agent");
	req->forward_agent = v ? json_is_true(v) : false;
	if (req->forward_agent && req->privileged)
		return cg_reply_new(CG_R_FORWARD_AGENT_PRIVILEGED, NULL);

	v = json_object_get(root, "env");
	if (v && (r = take_env(v, rules, req)))
		return r;

	if ((r = scan_all(root, req)))
		return r;

	/* Step 13. */
	v = json_object_get(root, "timeout_ms");
	req->timeout_ms = -1;
	if (v) {
		json_int_t t = json_integer_value(v);
		if (t < 1 || t > CG_WIRE_MAX_TIMEOUTMS)
			return cg_reply_new(CG_R_TIMEOUT_RANGE, "{s:I,s:I}", "max",
					    (json_int_t)CG_WIRE_MAX_TIMEOUTMS, "value", t);
		req->timeout_ms = t;
	}

	/* The rest cannot fail validation; copy it. */
	static const struct {
		const char *name;
		size_t off;
	} strs[] = { { "host", offsetof(struct cg_request, host) },
		     { "session", offsetof(struct cg_request, session) },
		     { "reason", offsetof(struct cg_request, reason) } };
	for (size_t i = 0; i < CG_ARRAY_LEN(strs); i++) {
		char **dst = (char **)((char *)req + strs[i].off);
		v = json_object_get(root, strs[i].name);
		*dst = strdup(v ? json_string_value(v) : "");
		if (!*dst)
			return oom("copying the request");
	}
	v = json_object_get(root, "cwd");
	if (v && !(req->cwd = dup_json_string(v)))
		return oom("copying the request");
	if (acts)
		req->actions = json_incref(acts);
	if (grant)
		req->grant = json_incref(grant);
	req->raw = json_incref(root);
	return NULL;
}

int cg_wire_decode(const char *line, size_t len, bool had_newline, bool too_long,
		   const struct cg_wire_rules *rules, struct cg_request **out,
		   struct cg_reply **err, char **id_out)
{
	static const struct cg_wire_rules no_rules = { 0 };
	struct cg_wire_rules now_rules;
	struct cg_reply *r = NULL;
	struct cg_request *req = NULL;
	json_t *root = NULL;

	*out = NULL;
	*err = NULL;
	*id_out = NULL;
	if (!rules) {
		/* No rules: the strictest reading, with the real clock. */
		now_rules = no_rules;
		now_rules.now_ns = cg_now_wall_ns();
		rules = &now_rules;
	}

	/* Steps 1-2: the transport's verdict on the line itself. */
	if (too_long || len >= CG_WIRE_MAX_LINE) {
		r = cg_reply_new(CG_R_LINE_TOO_LONG, "{s:i}", "limit", CG_WIRE_MAX_LINE);
		goto refuse;
	}
	if (!had_newline) {
		r = cg_reply_new(CG_R_LINE_NO_NEWLINE, "{s:I}", "bytes", (json_int_t)len);
		goto refuse;
	}
	/* Steps 3-4. */
	if ((r = parse_line(line ? line : "", line ? len : 0, &root)))
		goto refuse;
	if (!json_is_object(root)) {
		r = cg_reply_new(CG_R_JSON_NOT_OBJECT, NULL);
		goto refuse_root;
	}
	req = calloc(1, sizeof(*req));
	if (!req) {
		r = oom("allocating the request");
		goto refuse_root;
	}
	/* Step 5 first, so that every later refusal can carry the id. */
	if ((r = take_id(root, req, id_out)))
		goto refuse_req;
	if ((r = validate(root, rules, req)))
		goto refuse_req;
	json_decref(root);
	*out = req;
	return 0;

refuse_req:
	cg_request_free(req);
refuse_root:
	json_decref(root);
refuse:
	*err = r;
	return -1;
}

void cg_request_free(struct cg_request *req)
{
	if (!req)
		return;
	free(req->id);
	free(req->host);
	free(req->session);
	free(req->reason);
	free(req->time_str);
	for (size_t i = 0; i < req->n_stages; i++) {
		if (!req->stages[i].argv)
			continue;
		for (size_t j = 0; j < req->stages[i].argc; j++)
			free(req->stages[i].argv[j]);
		free(req->stages[i].argv);
	}
	free(req->stages);
	for (size_t i = 0; i < req->n_env; i++) {
		free(req->env[i].name);
		free(req->env[i].value);
	}
	free(req->env);
	free(req->cwd);
	free(req->trace_id);
	json_decref(req->actions);
	json_decref(req->grant);
	json_decref(req->raw);
	free(req);
}

/* ---- responses ----------------------------------------------------------------- */

/*
 * The response line is assembled from pieces: jansson serialises the small
 * members, and the base64 streams (up to 16 MiB each, and only ever
 * [A-Za-z0-9+/=], which JSON needs no escaping for) are copied in directly.
 * Serialising them through jansson cost over a second per capped stream.
 */
#define RESPONSE_CAP ((size_t)1 << 31) /* hard cap on one response line */

/*
 * The response under construction: past RESPONSE_CAP it is truncated, which
 * the encoder reports as a failure (a cut line is never sent).
 */
struct outbuf {
	struct cg_buf buf;
	bool failed; /* an allocation failed */
};

static void ob_add(struct outbuf *b, const char *s, size_t n)
{
	if (!b->failed && cg_buf_add(&b->buf, s, n) != 0)
		b->failed = true;
}

static void ob_str(struct outbuf *b, const char *s)
{
	ob_add(b, s, strlen(s));
}

/* Append `"key":"<base64 of p[0..n)>"`. */
static void ob_b64(struct outbuf *b, const char *key, const unsigned char *p, size_t n)
{
	char *enc = cg_base64_encode(p ? p : (const unsigned char *)"", p ? n : 0);
	if (!enc) {
		b->failed = true;
		return;
	}
	ob_str(b, "\"");
	ob_str(b, key);
	ob_str(b, "\":\"");
	ob_str(b, enc);
	ob_str(b, "\"");
	free(enc);
}

/* Members a caller's extras may not replace: the seed's shape is fixed. */
static bool reserved_key(const char *k)
{
	static const char *const keys[] = { "id",     "status",		  "message", "stages",
					    "stdout", "stdout_truncated", "reply" };
	for (size_t i = 0; i < CG_ARRAY_LEN(keys); i++)
		if (strcmp(k, keys[i]) == 0)
			return true;
	return false;
}

char *cg_wire_encode_response(const struct cg_response *resp, size_t *len)
{
	struct outbuf b = { .failed = false };
	cg_buf_init(&b.buf, RESPONSE_CAP);
	json_t *head = NULL, *tail = NULL;
	char *msg = NULL, *head_s = NULL, *tail_s = NULL;
	int rc = 0;

	*len = 0;
	if (!resp || !resp->reply || (resp->n_stages > 0 && !resp->stages))
		return NULL;
	head = json_object();
	tail = json_object();
	if (!head || !tail)
		goto out;
	rc |= json_object_set_new(head, "id", json_string(resp->id ? resp->id : ""));
	rc |= json_object_set_new(head, "status", json_string(cg_status_name(resp->status)));
	if (resp->status == CG_STATUS_ERROR) {
		msg = cg_reply_message(resp->reply);
		if (!msg)
			goto out;
		rc |= json_object_set_new(head, "message", json_string(msg));
	}
	if (json_is_object(resp->extra)) {
		const char *k;
		json_t *v;
		json_object_foreach(resp->extra, k, v)
		{
			if (!reserved_key(k))
				rc |= json_object_set(tail, k, v);
		}
	}
	rc |= json_object_set_new(tail, "reply", cg_reply_to_json(resp->reply));
	if (rc != 0)
		goto out;
	head_s = json_dumps(head, JSON_COMPACT);
	tail_s = json_dumps(tail, JSON_COMPACT);
	if (!head_s || !tail_s)
		goto out;

	/* head is {"id":…,"status":…}: drop its '}' and continue the object. */
	ob_add(&b, head_s, strlen(head_s) - 1);
	if (resp->n_stages > 0) {
		ob_str(&b, ",\"stages\":[");
		for (size_t i = 0; i < resp->n_stages; i++) {
			const struct cg_stage_out *s = &resp->stages[i];
			char num[48];
			snprintf(num, sizeof(num), "%s{\"exit_code\":%d,", i ? "," : "",
				 s->exit_code);
			ob_str(&b, num);
			ob_b64(&b, "stderr", s->err, s->err_len);
			if (s->err_truncated)
				ob_str(&b, ",\"stderr_truncated\":true");
			ob_str(&b, "}");
		}
		ob_str(&b, "],");
		ob_b64(&b, "stdout", resp->out, resp->out_len);
		if (resp->out_truncated)
			ob_str(&b, ",\"stdout_truncated\":true");
	}
	/* tail is {…extras…,"reply":{…}}: splice it in after a comma. */
	ob_str(&b, ",");
	ob_str(&b, tail_s + 1);
	ob_str(&b, "\n");
out:
	free(head_s);
	free(tail_s);
	free(msg);
	json_decref(head);
	json_decref(tail);
	if (b.failed || b.buf.truncated || rc != 0) {
		cg_buf_free(&b.buf);
		return NULL;
	}
	*len = b.buf.len;
	return cg_buf_cstr(&b.buf);
}

/* ---- the replay window ------------------------------------------------------------ */

#define REPLAY_DEFAULT_MAX 1000000
#define REPLAY_MIN_BUCKETS 1024

/*
 * One uid may hold at most this share of the window (1/8): a uid that filled
 * the whole table with refused requests had every other uid's calls refused
 * (s36 attack). Past its share a uid's requests are refused, not others'.
 */
#define REPLAY_UID_SHARE 8

struct replay_entry {
	struct replay_entry *hnext; /* bucket chain */
	struct replay_entry *qnext; /* insertion order, oldest first */
	int64_t t_ns;		    /* when it was remembered */
	bool forgotten;		    /* released by cg_replay_forget */
	uid_t uid;		    /* whose share it counts in */
	uint64_t hash;
	char id[]; /* NUL-terminated */
};

/* Ids held per uid (a few uids: a short array, searched linearly). */
struct replay_uid {
	uid_t uid;
	size_t n;
};

struct cg_replay {
	int64_t window_ns;
	size_t max;	  /* hard cap on entries */
	size_t n;	  /* entries held */
	size_t n_buckets; /* a power of two */
	struct replay_entry **buckets;
	struct replay_entry *head, *tail; /* expiry queue */
	uint64_t k0, k1;		  /* SipHash key */
	struct replay_uid *uids;	  /* ids held per uid */
	size_t n_uids, cap_uids;
};

static struct replay_uid *replay_uid_of(struct cg_replay *rp, uid_t uid, bool add)
{
	for (size_t i = 0; i < rp->n_uids; i++)
		if (rp->uids[i].uid == uid)
			return &rp->uids[i];
	if (!add)
		return NULL;
	if (rp->n_uids == rp->cap_uids) {
		size_t nc = rp->cap_uids ? rp->cap_uids * 2 : 8;
		struct replay_uid *g = realloc(rp->uids, nc * sizeof(*g));
		if (!g)
			return NULL;
		rp->uids = g;
		rp->cap_uids = nc;
	}
	rp->uids[rp->n_uids] = (struct replay_uid){ uid, 0 };
	return &rp->uids[rp->n_uids++];
}

/*
 * SipHash-2-4 with a random key: ids are chosen by callers, and a keyed hash
 * keeps them from forcing every id into one bucket (hash flooding).
 */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = ROTL(v1, 13);                                                                 \
		v1 ^= v0;                                                                          \
		v0 = ROTL(v0, 32);                                                                 \
		v2 += v3;                                                                          \
		v3 = ROTL(v3, 16);                                                                 \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = ROTL(v3, 21);                                                                 \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = ROTL(v1, 17);                                                                 \
		v1 ^= v2;                                                                          \
		v2 = ROTL(v2, 32);                                                                 \
	} while (0)

static uint64_t siphash(uint64_t k0, uint64_t k1, const unsigned char *p, size_t n)
{
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
	uint64_t m;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		m = 0;
		for (int b = 0; b < 8; b++)
			m |= (uint64_t)p[i + (size_t)b] << (8 * b);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	m = (uint64_t)n << 56;
	for (int b = 0; i + (size_t)b < n; b++)
		m |= (uint64_t)p[i + (size_t)b] << (8 * b);
	v3 ^= m;
	SIPROUND;
	SIPROUND;
	v0 ^= m;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

struct cg_replay *cg_replay_new(int64_t window_ns)
{
	struct cg_replay *rp = calloc(1, sizeof(*rp));
	unsigned char key[16];

	if (!rp)
		return NULL;
	rp->buckets = calloc(REPLAY_MIN_BUCKETS, sizeof(*rp->buckets));
	if (!rp->buckets || RAND_bytes(key, sizeof(key)) != 1) {
		free(rp->buckets);
		free(rp);
		return NULL;
	}
	memcpy(&rp->k0, key, 8);
	memcpy(&rp->k1, key + 8, 8);
	rp->n_buckets = REPLAY_MIN_BUCKETS;
	rp->window_ns = window_ns > 0 ? window_ns : 2LL * CG_WIRE_FRESHNESS_S * 1000000000LL;
	rp->max = REPLAY_DEFAULT_MAX;
	return rp;
}

void cg_replay_set_limit(struct cg_replay *rp, size_t max_entries)
{
	if (rp)
		rp->max = max_entries > 0 ? max_entries : 1;
}

size_t cg_replay_count(const struct cg_replay *rp)
{
	return rp ? rp->n : 0;
}

/* Has an entry remembered at t_ns aged out by now_ns? Saturating, so odd clocks fail closed. */
static bool expired(const struct cg_replay *rp, int64_t t_ns, int64_t now_ns)
{
	int64_t age;
	if (__builtin_sub_overflow(now_ns, t_ns, &age))
		return false;
	return age >= rp->window_ns;
}

/*
 * Drop entries from the oldest end while they have expired. Entries are
 * queued in arrival order; a clock step backwards only keeps some longer,
 * which errs on the side of refusing.
 */
static void replay_expire(struct cg_replay *rp, int64_t now_ns)
{
	while (rp->head && expired(rp, rp->head->t_ns, now_ns)) {
		struct replay_entry *e = rp->head;
		struct replay_entry **pp = &rp->buckets[e->hash & (rp->n_buckets - 1)];
		while (*pp && *pp != e)
			pp = &(*pp)->hnext;
		if (*pp)
			*pp = e->hnext;
		rp->head = e->qnext;
		if (!rp->head)
			rp->tail = NULL;
		rp->n--;
		struct replay_uid *u = replay_uid_of(rp, e->uid, false);
		if (u && u->n && --u->n == 0)
			*u = rp->uids[--rp->n_uids]; /* a uid with none left goes */
		free(e);
	}
}

/*
 * An id is a uid's own (s41b F4: one uid claimed the ids another would
 * send, and learnt which ids others had used): the key is (uid, id). A line
 * another uid replays runs as that uid, so nothing is lost.
 */
static uint64_t replay_hash(const struct cg_replay *rp, const char *id, uid_t uid)
{
	uint64_t h = siphash(rp->k0, rp->k1, (const unsigned char *)id, strlen(id));
	return h ^ ((uint64_t)uid + 1) * 0x9e3779b97f4a7c15ULL;
}

static struct replay_entry *replay_find(struct cg_replay *rp, const char *id, uid_t uid, uint64_t h)
{
	for (struct replay_entry *e = rp->buckets[h & (rp->n_buckets - 1)]; e; e = e->hnext)
		if (e->hash == h && e->uid == uid && strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

/* Double the table; on OOM keep the old one (slower chains, still correct). */
static void replay_grow(struct cg_replay *rp)
{
	size_t nb = rp->n_buckets * 2;
	struct replay_entry **b = calloc(nb, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < rp->n_buckets; i++) {
		struct replay_entry *e = rp->buckets[i], *next;
		for (; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->hash & (nb - 1)];
			b[e->hash & (nb - 1)] = e;
		}
	}
	free(rp->buckets);
	rp->buckets = b;
	rp->n_buckets = nb;
}

bool cg_replay_seen(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns)
{
	if (!rp || !id)
		return true; /* no window: refuse rather than risk a replay */
	replay_expire(rp, now_ns);
	struct replay_entry *e = replay_find(rp, id, uid, replay_hash(rp, id, uid));
	return e && !e->forgotten && !expired(rp, e->t_ns, now_ns);
}

int cg_replay_remember(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns)
{
	if (!rp || !id) {
		errno = EINVAL;
		return -1;
	}
	replay_expire(rp, now_ns);
	size_t n = strlen(id);
	uint64_t h = replay_hash(rp, id, uid);
	struct replay_entry *e = replay_find(rp, id, uid, h);
	if (e) {
		/* Refresh in place; the queue position only delays others' expiry. */
		e->t_ns = now_ns;
		e->forgotten = false;
		return 0;
	}
	struct replay_uid *u = replay_uid_of(rp, uid, true);
	size_t share = rp->max / REPLAY_UID_SHARE ? rp->max / REPLAY_UID_SHARE : 1;
	if (rp->n >= rp->max || (u && u->n >= share)) {
		errno = ENOSPC; /* fail closed: the caller refuses the request */
		return -1;
	}
	e = u ? malloc(sizeof(*e) + n + 1) : NULL;
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(e->id, id, n + 1);
	e->uid = uid;
	u->n++;
	e->hash = h;
	e->t_ns = now_ns;
	e->forgotten = false;
	e->qnext = NULL;
	if (rp->n >= rp->n_buckets)
		replay_grow(rp);
	struct replay_entry **b = &rp->buckets[h & (rp->n_buckets - 1)];
	e->hnext = *b;
	*b = e;
	if (rp->tail)
		rp->tail->qnext = e;
	else
		rp->head = e;
	rp->tail = e;
	rp->n++;
	return 0;
}

int cg_replay_claim(struct cg_replay *rp, const char *id, uid_t uid, int64_t now_ns)
{
	if (cg_replay_seen(rp, id, uid, now_ns))
		return 1;
	return cg_replay_remember(rp, id, uid, now_ns) == 0 ? 0 : -1;
}

void cg_replay_forget(struct cg_replay *rp, const char *id, uid_t uid)
{
	if (!rp || !id)
		return;
	struct replay_entry *e = replay_find(rp, id, uid, replay_hash(rp, id, uid));
	/* The entry stays queued (and counted) until it expires; it just stops matching. */
	if (e)
		e->forgotten = true;
}

void cg_replay_free(struct cg_replay *rp)
{
	if (!rp)
		return;
	for (struct replay_entry *e = rp->head, *next; e; e = next) {
		next = e->qnext;
		free(e);
	}
	free(rp->buckets);
	free(rp->uids);
	free(rp);
}
