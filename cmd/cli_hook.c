/* SPDX-License-Identifier: MIT */
/*
 * cli_hook — `callgate hook claude-code`: a Claude Code PreToolUse hook that
 * asks the daemon's gate verb whether a tool call may proceed.
 *
 * It reads the hook payload (session_id, cwd, tool_name, tool_input, …) on
 * stdin, maps the tool call to a gate request, and prints
 * {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":
 * "allow"|"deny"|"ask","permissionDecisionReason":…}} naming the rule.
 *
 * Mapping (docs/agents.md has the table):
 *  - Bash: a command that is plain words (and simple '|' between stages)
 *    becomes a pipeline; a list of such commands joined by && (; || after a
 *    command, and cd DIR before a &&) is gated part by part (hook_chain);
 *    anything else with shell syntax becomes the opaque
 *    [["/bin/bash","-c",CMD]] (hook_shell), which policy judges as an opaque
 *    launcher.
 *  - Write/Edit/MultiEdit/NotebookEdit: a write action on the path;
 *    Read/Glob/Grep/LS: a read action on the path (or the cwd).
 *  - WebFetch: a net action on the host; WebSearch: a net action on
 *    "web-search" with the query and domain lists as arguments.
 *  - mcp__<server>__<tool>: an "mcp" action; calls to callgate's own MCP
 *    server are allowed here because that server gates them itself.
 *  - Any other tool: "ask" (the hook cannot judge it; a human does).
 *
 * Decisions for Bash: the hook governs what runs. On ALLOW or DEGRADE it
 * answers allow with updatedInput whose command is `callgate --socket S
 * run --no-privileged --cwd CWD [--session ID] -- ARGV…`, the very argv the
 * gate judged, each word single-quoted: the daemon decides again, runs it
 * confined in its view and records it, and run passes stdout, stderr and
 * the exit status through to Claude Code. UNKNOWN is rewritten the same
 * way when the daemon holds calls for approval (the run waits for a human
 * in callgate's queue), else answered ask. BLOCK is deny with the refusal's
 * code and message. Other tools: BLOCK -> deny; UNKNOWN -> ask; ALLOW ->
 * allow; DEGRADE (or ALLOW with constraints) -> allow for file tools (the
 * decided path is the tool's whole effect), otherwise ask (or deny with
 * --degrade deny), because Claude Code would run them unconfined.
 *
 * Invariants:
 *  - Fail closed: an unreadable payload, an unreachable daemon, an answer
 *    that is not a decision, or any internal failure exits 2 with the reason
 *    on stderr (Claude Code blocks the call). This program never prints
 *    "allow" except for an S reply whose decision allows.
 *  - The splitter refuses rather than guesses: a command it cannot split
 *    with certainty is judged as the opaque shell command it is.
 *  - A Bash command is never allowed as written: only rewritten to run
 *    through callgate with exactly the argv that was judged.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* What the hook says when the daemon cannot be reached (ux-s42e L2: no next step). */
#define HOOK_UNREACHABLE                                                                           \
	"the callgate daemon at %s cannot be reached (%s); is callgated running there? The "       \
	"hook's command in .claude/settings.json gives its socket with --socket (or "              \
	"$CALLGATE_SOCKET)"
#define HOOK_PAYLOAD_MAX (64u << 20) /* Write payloads carry file contents */
#define HOOK_TIMEOUT_MS	 30000	     /* inside Claude Code's own hook timeout */
#define HOOK_EXIT_BLOCK	 2	     /* Claude Code: block the call, stderr to Claude */

enum degrade_mode { DEGRADE_ASK, DEGRADE_DENY };

/* Block the call: the reason goes to stderr, which Claude Code shows to the model. */
static int block(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int block(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "callgate: blocked: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return HOOK_EXIT_BLOCK;
}

/* Print the decision; updated (stolen, may be NULL) replaces the tool's input. */
static int decide_input(const char *decision, const char *reason, json_t *updated)
{
	json_t *out = json_pack("{s:{s:s,s:s,s:s,s:o*}}", "hookSpecificOutput", "hookEventName",
				"PreToolUse", "permissionDecision", decision,
				"permissionDecisionReason", reason, "updatedInput", updated);
	char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;

	json_decref(out);
	if (!s || printf("%s\n", s) < 0 || fflush(stdout) != 0) {
		free(s);
		return block("could not write the decision");
	}
	free(s);
	return CG_EXIT_OK;
}

static int decide(const char *decision, const char *reason)
{
	return decide_input(decision, reason, NULL);
}

/* Append word to t (cap bytes) single-quoted for sh: ' becomes '\''. -1 when full. */
static int put_quoted(char *t, size_t cap, size_t *len, const char *word)
{
	size_t n = *len;
	if (n + 3 > cap)
		return -1;
	if (n > 0)
		t[n++] = ' ';
	t[n++] = '\'';
	for (const char *p = word; *p; p++) {
		if (*p == '\'') {
			if (n + 4 >= cap)
				return -1;
			memcpy(t + n, "'\\''", 4);
			n += 4;
		} else {
			if (n + 1 >= cap)
				return -1;
			t[n++] = *p;
		}
	}
	if (n + 2 > cap)
		return -1;
	t[n++] = '\'';
	t[n] = '\0';
	*len = n;
	return 0;
}

/*
 * The Bash command that runs the judged pipeline through callgate: this
 * very binary (by absolute path, so PATH cannot swap it), the hook's socket,
 * run --no-privileged (Claude Code's tools run as the user), the payload's
 * cwd and session, then the argv with '|' between stages. NULL when it
 * cannot be built exactly: a word that is itself "|" would be read by run as
 * a stage separator, so such a command is never rewritten.
 */
static char *run_command(const char *socket_path, const json_t *pipeline, const char *cwd,
			 const char *session, const json_t *tool_input)
{
	/*
	 * The Bash tool's own deadline (ms; Claude Code's default 120 s when
	 * absent), not the daemon's 30 s default, which killed every longer
	 * build (ux-s42e H4); and its description, the approver's reason (M1).
	 */
	const json_t *tj = json_object_get(tool_input, "timeout");
	json_int_t tms =
	    json_is_integer(tj) && json_integer_value(tj) > 0 ? json_integer_value(tj) : 120000;
	char timeout[32];
	(void)snprintf(timeout, sizeof(timeout), "%llds", (long long)((tms + 999) / 1000));
	const char *desc = json_string_value(json_object_get(tool_input, "description"));
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t cap = 4096, len = 0;
	const json_t *stage, *w;
	size_t i, k;

	if (sl <= 0 || (size_t)sl >= sizeof(self) - 1)
		return NULL;
	self[sl] = '\0';
	json_array_foreach(pipeline, i, stage) json_array_foreach(stage, k, w)
	{
		const char *word = json_string_value(w);
		if (!word || strcmp(word, "|") == 0)
			return NULL;
		cap += 4 * strlen(word) + 3;
	}
	cap += 4 * (strlen(socket_path) + (cwd ? strlen(cwd) : 0) +
		    (session ? strlen(session) : 0) + (desc ? strlen(desc) : 0) + strlen(self)) +
	       64;
	char *t = malloc(cap);
	if (!t)
		return NULL;
	t[0] = '\0';
	bool ok =
	    put_quoted(t, cap, &len, self) == 0 && put_quoted(t, cap, &len, "--socket") == 0 &&
	    put_quoted(t, cap, &len, socket_path) == 0 && put_quoted(t, cap, &len, "run") == 0 &&
	    put_quoted(t, cap, &len, "--no-privileged") == 0;
	if (ok && cwd)
		ok = put_quoted(t, cap, &len, "--cwd") == 0 && put_quoted(t, cap, &len, cwd) == 0;
	if (ok && session && *session)
		ok = put_quoted(t, cap, &len, "--session") == 0 &&
		     put_quoted(t, cap, &len, session) == 0;
	if (ok)
		ok = put_quoted(t, cap, &len, "--timeout") == 0 &&
		     put_quoted(t, cap, &len, timeout) == 0;
	if (ok && desc && *desc && !strchr(desc, '\n'))
		ok = put_quoted(t, cap, &len, "--reason") == 0 &&
		     put_quoted(t, cap, &len, desc) == 0;
	if (ok)
		ok = put_quoted(t, cap, &len, "--") == 0;
	json_array_foreach(pipeline, i, stage)
	{
		if (ok && i > 0)
			ok = put_quoted(t, cap, &len, "|") == 0;
		json_array_foreach(stage, k, w) if (ok) ok =
		    put_quoted(t, cap, &len, json_string_value(w)) == 0;
	}
	if (!ok) {
		free(t);
		return NULL;
	}
	return t;
}

/*
 * A command ending in redirections that write nothing anywhere, as agents
 * write them constantly: 2>&1, and >, 1>, 2>, &> or >> to /dev/null. The
 * length of what comes before them, or 0. The rewrite runs the rest through
 * callgate with the same redirections after it, so that callgate run's
 * stdout and stderr (the stages') go where the shell would have sent them
 * (ux-s42e H1: such a commit ran as a shell, where .git is read-only;
 * ux-s43c M4: so did git add -A > /dev/null).
 */
static size_t redirect_tail(const char *cmd)
{
	size_t n = strlen(cmd), head = 0;
	for (;;) {
		while (n && strchr(" \t", cmd[n - 1]))
			n--;
		size_t m = n;
		static const char null[] = "/dev/null";
		if (m >= 4 && strncmp(cmd + m - 4, "2>&1", 4) == 0) {
			m -= 4;
		} else if (m >= sizeof(null) - 1 &&
			   strncmp(cmd + m - (sizeof(null) - 1), null, sizeof(null) - 1) == 0) {
			m -= sizeof(null) - 1;
			while (m && strchr(" \t", cmd[m - 1]))
				m--;
			if (!m || cmd[m - 1] != '>')
				break;
			m -= m >= 2 && cmd[m - 2] == '>' ? 2 : 1;
			if (m && strchr("12&", cmd[m - 1]))
				m--;
		} else {
			break;
		}
		if (!m || !strchr(" \t", cmd[m - 1]))
			break; /* part of a word (a>/dev/null): not a redirection of the command's */
		n = m - 1;
		head = n;
	}
	while (head && strchr(" \t", cmd[head - 1]))
		head--;
	return head;
}

/*
 * Is pipeline a command that only a shell has: a bash builtin or keyword
 * with no program of that name (command -v node, type python3, ulimit -n,
 * umask)? Judged as the shell's then, as in a list (ux-s43c M2: alone, the
 * gate answered that no such program was on the controlled PATH).
 */
static bool shell_builtin(const json_t *pipeline)
{
	static const char *const only_bash[] = {
		"alias",     "bind",	 "builtin", "caller",  "command", "compgen", "complete",
		"compopt",   "declare",	 "dirs",    "disown",  "enable",  "eval",    "exec",
		"exit",	     "export",	 "fc",	    "hash",    "help",	  "history", "jobs",
		"let",	     "local",	 "logout",  "mapfile", "popd",	  "pushd",   "read",
		"readarray", "readonly", "return",  "set",     "shift",	  "shopt",   "source",
		"suspend",   "times",	 "trap",    "type",    "typeset", "ulimit",  "umask",
		"unalias",   "unset",	 "wait",    "."
	};
	const char *w0 = json_string_value(json_array_get(json_array_get(pipeline, 0), 0));
	for (size_t i = 0; w0 && i < CG_ARRAY_LEN(only_bash); i++)
		if (strcmp(w0, only_bash[i]) == 0)
			return true;
	return false;
}

/* Does a stage of pipeline hold a word that is a lone "|"? */
static bool has_pipe_word(const json_t *pipeline)
{
	const json_t *stage, *w;
	size_t i, k;
	json_array_foreach(pipeline, i, stage)
	    json_array_foreach(stage, k, w) if (strcmp(json_string_value(w), "|") == 0) return true;
	return false;
}

/*
 * The shell a command with shell syntax runs under: Claude Code's tool is
 * Bash, and dash (Debian's /bin/sh) fails bash's source, [[ ]], <(...),
 * pipefail and, silently, {a,b} (ux-s42e H2). /bin/sh where bash is absent.
 */
static const char *hook_shell(void)
{
	return access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
}

/*
 * A here-document read by cat in a command substitution, as the whole of a
 * double-quoted word: "$(cat <<'EOF' ... EOF\n)", how Claude Code writes a
 * commit message of several lines. s points just past the opening quote.
 * The word's text is the document's lines with its trailing line breaks cut
 * (as $(...) cuts them), into out when out is not NULL (room for strlen(s)
 * bytes). Only the quoted delimiter forms ('EOF', "EOF", \EOF, with <<- cutting
 * leading tabs), or an unquoted one whose document holds no $ ` or \,
 * where the shell expands nothing. Returns the closing quote, or NULL when
 * it is not exactly that (the command is then judged opaque). ux-s42c H1:
 * under sh -c, where .git is read-only, every such commit failed.
 */
static const char *heredoc_word(const char *s, char *out, size_t *out_len)
{
	static const char head[] = "$(cat <<";
	if (strncmp(s, head, sizeof(head) - 1) != 0)
		return NULL;
	const char *p = s + sizeof(head) - 1;
	bool tabs = *p == '-';
	p += tabs;
	p += strspn(p, " \t");
	char delim[64];
	size_t dl = 0;
	bool quoted = *p == '\'' || *p == '"' || *p == '\\';
	char q = *p == '\\' ? 0 : quoted ? *p : 0;
	p += quoted;
	while (dl < sizeof(delim) - 1 && (isalnum((unsigned char)*p) || *p == '_'))
		delim[dl++] = *p++;
	delim[dl] = '\0';
	if (dl == 0 || (q && *p++ != q))
		return NULL;
	p += strspn(p, " \t");
	if (*p++ != '\n')
		return NULL;
	size_t n = 0;
	for (;;) {
		const char *nl = strchr(p, '\n');
		const char *line = p;
		if (tabs)
			line += strspn(line, "\t");
		size_t ll = nl ? (size_t)(nl - line) : strlen(line);
		if (ll == dl && strncmp(line, delim, dl) == 0) {
			p = nl ? nl + 1 : line + ll;
			break;
		}
		if (!nl)
			return NULL; /* no delimiter line */
		for (const char *c = line; c <= nl; c++) {
			if (!quoted && strchr("$`\\", *c))
				return NULL;
			if ((unsigned char)*c < 0x20 && *c != '\n' && *c != '\t')
				return NULL;
			if (out)
				out[n] = *c;
			n++;
		}
		p = nl + 1;
	}
	p += strspn(p, " \t\n");
	if (*p++ != ')' || *p != '"')
		return NULL;
	while (out && n > 0 && out[n - 1] == '\n')
		n--; /* $(...) cuts the trailing line breaks */
	if (out_len)
		*out_len = n;
	return p;
}

/*
 * Split a Bash command into a pipeline when it is plain words: bytes other
 * than shell syntax, single-quoted text, double-quoted text without $ ` \ ",
 * and a '|' between stages. Returns NULL (judge it opaque) on anything else:
 * $ ` ; & > < ( ) * ? [ ] { } ~ # ! \ newline, control bytes, an assignment
 * prefix (FOO=bar cmd), "||", or an empty stage.
 */
static json_t *split_command(const char *cmd)
{
	json_t *pipeline = json_array(), *stage = json_array();
	size_t n = strlen(cmd), wl = 0;
	char *word = malloc(n + 1);
	bool in_word = false;

	if (!pipeline || !stage || !word)
		goto fail;
	for (size_t i = 0; i <= n; i++) {
		unsigned char c = i < n ? (unsigned char)cmd[i] : ' ';
		bool end_stage = i == n || c == '|';

		size_t hl = 0; /* a failed try writes past wl only: nothing taken */
		const char *hd_end = c == '"' ? heredoc_word(cmd + i + 1, word + wl, &hl) : NULL;
		if (hd_end) {
			wl += hl;
			in_word = true;
			i = (size_t)(hd_end - cmd);
			continue;
		}
		if (c == '\'' || c == '"') {
			const char *close = strchr(cmd + i + 1, c);
			if (!close)
				goto fail;
			for (const char *p = cmd + i + 1; p < close; p++) {
				/* A ! is text to a shell that keeps no history (bash -c). */
				if (c == '"' && strchr("$`\\", *p))
					goto fail;
				if ((unsigned char)*p < 0x20 && *p != '\t')
					goto fail;
				word[wl++] = *p;
			}
			in_word = true;
			i = (size_t)(close - cmd);
			continue;
		}
		if (c == ' ' || c == '\t' || end_stage) {
			if (in_word) {
				word[wl] = '\0';
				/* "FOO=bar cmd": an assignment, not a command name. */
				if (json_array_size(stage) == 0 && strchr(word, '='))
					goto fail;
				json_array_append_new(stage, json_string(word));
				wl = 0;
				in_word = false;
			}
			if (end_stage) {
				if (json_array_size(stage) == 0)
					goto fail; /* "a || b", "| a", "a |" */
				json_array_append_new(pipeline, stage);
				stage = json_array();
				if (!stage)
					goto fail;
			}
			continue;
		}
		/*
		 * ~ and # mean something at a word's start only (and ~ after = or
		 * :): HEAD~1 and a#b are text (ux-s42e H1: git reset --soft HEAD~1
		 * ran as a shell, where .git is read-only).
		 */
		bool starts = !in_word || (wl > 0 && (word[wl - 1] == '=' || word[wl - 1] == ':'));
		if ((c == '~' || c == '#') && !starts) {
			word[wl++] = (char)c;
			continue;
		}
		if (c < 0x20 || c == 0x7f || strchr("$`;&><()*?[]{}~#!\\", c))
			goto fail;
		word[wl++] = (char)c;
		in_word = true;
	}
	json_decref(stage);
	free(word);
	if (json_array_size(pipeline) == 0) {
		json_decref(pipeline);
		return NULL;
	}
	return pipeline;
fail:
	json_decref(stage);
	json_decref(pipeline);
	free(word);
	return NULL;
}

/*
 * A Bash command that is a list of plain commands joined by && (and, after
 * a command, ; or ||): its parts, each {"pipeline": [...]} or, before a &&,
 * {"cd": DIR}, and {"sep": "&&"|";"|"||"} after each part but the last.
 * NULL unless there are two parts or more and every part is plain words
 * (split_command) or cd DIR with one plain DIR: anything else is judged as
 * the opaque shell command it is. Agents chain constantly (ux-s39: `git add
 * -A && git commit` ran as sh -c, where .git is read-only to a shell, and
 * failed after it was allowed); each part is gated and run on its own.
 */
static json_t *split_chain(const char *cmd)
{
	json_t *parts = json_array();
	size_t n = strlen(cmd), start = 0;
	char quote = 0;
	/*
	 * A cd moves the parts after it only when the shell would run them there:
	 * no || before it (`ls || cd sub && pwd` runs pwd where it was), and only
	 * && after it (`false && cd sub && true || pwd` too: review-s39).
	 */
	bool or_before = false, after_cd = false;
	if (!parts)
		return NULL;
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? cmd[i] : '\0';
		if (quote) {
			quote = c == quote ? 0 : quote;
			if (c)
				continue;
			goto fail; /* an unclosed quote */
		}
		const char *hd_end = c == '"' ? heredoc_word(cmd + i + 1, NULL, NULL) : NULL;
		if (hd_end) {
			i = (size_t)(hd_end - cmd);
			continue; /* its closing quote */
		}
		if (c == '\'' || c == '"') {
			quote = c;
			continue;
		}
		const char *sep = c == '\0'			  ? ""
				  : c == '&' && cmd[i + 1] == '&' ? "&&"
				  : c == '|' && cmd[i + 1] == '|' ? "||"
				  : c == ';'			  ? ";"
								  : NULL;
		if (!sep)
			continue;
		char *text = strndup(cmd + start, i - start);
		if (!text)
			goto fail;
		/* A part's own final redirections (2>/dev/null ||): kept on its rewrite. */
		size_t keep = redirect_tail(text);
		char *redir = keep ? strdup(text + keep) : NULL;
		if (keep)
			text[keep] = '\0';
		/* cd DIR: the following parts' cwd (only before &&: it must have worked). */
		json_t *w = split_command(text), *part = NULL;
		const char *w0 = json_string_value(json_array_get(json_array_get(w, 0), 0));
		if (w && json_array_size(w) == 1 && w0 && strcmp(w0, "cd") == 0) {
			const json_t *args = json_array_get(w, 0);
			const char *dir = json_string_value(json_array_get(args, 1));
			if (json_array_size(args) == 2 && dir && *dir && strcmp(dir, "-") != 0 &&
			    strcmp(sep, "&&") == 0)
				part = json_pack("{s:s}", "cd", dir);
		} else if (w) {
			part = json_pack("{s:O,s:s?}", "pipeline", w, "redir", redir);
		}
		json_decref(w);
		free(text);
		bool lost_redir = redir && part && json_object_get(part, "cd");
		free(redir);
		if (!part || lost_redir)
			goto fail; /* a cd with a redirection: judged whole */
		bool cd = json_object_get(part, "cd") != NULL;
		after_cd |= cd;
		if ((cd && or_before) || (after_cd && *sep && strcmp(sep, "&&") != 0)) {
			json_decref(part);
			goto fail; /* judged whole */
		}
		or_before |= strcmp(sep, "||") == 0;
		json_array_append_new(parts, part);
		if (*sep)
			json_object_set_new(part, "sep", json_string(sep));
		i += strlen(sep) ? strlen(sep) - 1 : 0;
		start = i + 1;
	}
	if (json_array_size(parts) < 2 ||
	    json_object_get(json_array_get(parts, json_array_size(parts) - 1), "cd"))
		goto fail;
	return parts;
fail:
	json_decref(parts);
	return NULL;
}

/* The host of an http(s) URL, lower-cased, into host (NUL-terminated); -1 if none. */
static int url_host(const char *url, char *host, size_t len)
{
	const char *p = strstr(url, "://"), *end, *at;
	size_t hl;

	if (!p)
		return -1;
	p += 3;
	end = p + strcspn(p, "/?#");
	/*
	 * Parsers disagree on '\\' in an authority (WHATWG ends the host there,
	 * others do not), so which host is fetched is ambiguous: refuse (block).
	 */
	if (memchr(p, '\\', (size_t)(end - p)))
		return -1;
	at = memchr(p, '@', (size_t)(end - p));
	if (at)
		p = at + 1;
	if (memchr(p, '@', (size_t)(end - p)))
		return -1; /* two userinfo separators: which host is meant is ambiguous */
	if (*p == '[') {   /* [v6]:port */
		const char *rb = memchr(p, ']', (size_t)(end - p));
		if (!rb)
			return -1;
		end = rb + 1;
	} else {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		if (colon)
			end = colon;
	}
	hl = (size_t)(end - p);
	if (hl == 0 || hl >= len)
		return -1;
	/*
	 * Only plain host characters: a percent-escape ("evil%2Ecom") or anything
	 * else the fetcher might decode into another host is refused (the hook then
	 * blocks), so the host judged is the host fetched.
	 */
	for (size_t i = 0; i < hl; i++) {
		char c = p[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == '[' ||
			  c == ']' || c == ':';
		if (!ok)
			return -1;
	}
	for (size_t i = 0; i < hl; i++)
		host[i] = (p[i] >= 'A' && p[i] <= 'Z') ? (char)(p[i] - 'A' + 'a') : p[i];
	host[hl] = '\0';
	return 0;
}

static const char *str_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

enum kind { K_COMMAND, K_FILE, K_OTHER };

/*
 * Build the gate request for the payload. Returns the request, or NULL with
 * *verdict set to "ask" (a tool the hook does not map) or to "allow" (a
 * call to callgate's own MCP server), or with *why set on a malformed
 * payload.
 */
/* Is dir the user's home, or a directory above it (/, /home)? */
static bool home_or_above(const char *dir)
{
	const char *home = getenv("HOME");
	char real[PATH_MAX], hreal[PATH_MAX];
	if (!home || home[0] != '/' || !realpath(home, hreal))
		return true; /* no home to compare with: taken as the worst case */
	if (!realpath(dir, real))
		return false; /* nothing there to search */
	size_t n = strlen(real);
	return strcmp(real, "/") == 0 ||
	       (strncmp(hreal, real, n) == 0 && (hreal[n] == '/' || hreal[n] == '\0'));
}

/*
 * The directories a Glob pattern or a Grep glob (pat, below root unless it
 * is absolute) names, added to acts as reads (s44c M5: Grep over the home
 * with the glob .aws/(anything) was judged as a read of the home alone, and
 * allowed, where a Read of ~/.aws/credentials is refused). Its literal
 * leading directories are one read; each run of literal names after a
 * wildcard that starts with a hidden one (**\/.config/gh) is another, below
 * that. -1 (a person judges it) when the pattern can spell a name other
 * than by plain names and * (a class, braces, ?, an escape: [.]aws, {.aws,x},
 * g?: s44e F3), and when it has a wildcard and searches the home or above
 * it, where * may meet a store a plain name never spelt. The tool runs in
 * Claude Code, outside callgate: this judges the names a pattern spells, not
 * every file the search then opens (docs/agents.md).
 */
static int pattern_reads(const char *root, const char *pat, const char *tool, json_t *acts)
{
	char base[PATH_MAX], run[PATH_MAX], comp[NAME_MAX + 1];
	bool literal = true;
	if (strpbrk(pat, "?[]{}\\"))
		return -1;
	int n = snprintf(base, sizeof(base), "%s", pat[0] == '/' ? "" : root);
	if (n < 0 || (size_t)n >= sizeof(base))
		return -1;
	size_t bl = (size_t)n, rl = 0;
	run[0] = '\0';
	for (const char *at = pat;;) {
		size_t cl = strcspn(at, "/");
		if (cl > NAME_MAX)
			return -1;
		memcpy(comp, at, cl);
		comp[cl] = '\0';
		bool last = !at[cl];
		at += cl + !last;
		bool meta = strchr(comp, '*') != NULL;
		if (meta && literal && home_or_above(bl ? base : "/"))
			return -1;
		if (meta || !cl || strcmp(comp, ".") == 0) {
			literal = literal && !meta;
			if (meta && rl) { /* a run of names after a wildcard ends here */
				json_array_append_new(acts, json_pack("{s:s,s:s,s:s}",
								      "action_type", "read", "tool",
								      tool, "resource", run));
				rl = 0;
			}
		} else if (literal) {
			n = snprintf(base + bl, sizeof(base) - bl, "%s%s",
				     bl && base[bl - 1] == '/' ? "" : "/", comp);
			if (n < 0 || (size_t)n >= sizeof(base) - bl)
				return -1;
			bl += (size_t)n;
		} else if (rl || comp[0] == '.') {
			/* A hidden name after a wildcard, and the plain names after it. */
			n = snprintf(run + rl, sizeof(run) - rl, "%s/%s", rl ? "" : base, comp);
			if (n < 0 || (size_t)n >= sizeof(run) - rl)
				return -1;
			rl += (size_t)n;
		}
		if (last)
			break;
	}
	if (rl)
		json_array_append_new(acts, json_pack("{s:s,s:s,s:s}", "action_type", "read",
						      "tool", tool, "resource", run));
	if (bl)
		json_array_append_new(acts, json_pack("{s:s,s:s,s:s}", "action_type", "read",
						      "tool", tool, "resource", base));
	return 0;
}

static json_t *map_call(const json_t *payload, const char *own_server, enum kind *kind,
			const char **verdict, const char **why)
{
	const char *tool = json_string_value(json_object_get(payload, "tool_name"));
	const json_t *in = json_object_get(payload, "tool_input");
	const char *cwd = json_string_value(json_object_get(payload, "cwd"));
	const char *session = json_string_value(json_object_get(payload, "session_id"));
	json_t *req;
	char reason[256];

	*kind = K_OTHER;
	if (!tool || !json_is_object(in)) {
		*why = "the payload has no tool_name/tool_input";
		return NULL;
	}
	snprintf(reason, sizeof(reason), "Claude Code %s tool (PreToolUse hook)", tool);
	/* Claude Code runs tools as the user: the gate judges an unprivileged call. */
	req = json_pack("{s:s,s:b,s:s,s:s}", "action", "gate", "privileged", false, "reason",
			reason, "session", str_or(session, ""));
	if (!req) {
		*why = "out of memory";
		return NULL;
	}
	if (cwd)
		json_object_set_new(req, "cwd", json_string(cwd));

	if (strcmp(tool, "Bash") == 0) {
		const char *cmd = json_string_value(json_object_get(in, "command"));
		const char *desc = json_string_value(json_object_get(in, "description"));
		json_t *pl;
		if (!cmd) {
			*why = "Bash tool_input has no command";
			goto fail;
		}
		pl = split_command(cmd);
		size_t keep = redirect_tail(cmd);
		if (!pl && keep) { /* cmd 2>&1: the rewrite keeps it (hook_claude_code) */
			char *head = strndup(cmd, keep);
			pl = head ? split_command(head) : NULL;
			free(head);
		}
		/*
		 * A word that is a lone | (cut -d '|') cannot be passed to callgate
		 * run, which reads it as a stage separator: the command is then the
		 * shell's, as any other it cannot rewrite word for word (ux-s42e M6:
		 * it went to a person, whose yes ran it unconfined).
		 */
		if (pl && (has_pipe_word(pl) || shell_builtin(pl))) {
			json_decref(pl);
			pl = NULL;
		}
		if (!pl)
			pl = json_pack("[[s,s,s]]", hook_shell(), "-c", cmd);
		json_object_set_new(req, "pipeline", pl);
		if (desc)
			json_object_set_new(req, "reason", json_string(desc));
		*kind = K_COMMAND;
		return req;
	}
	static const struct {
		const char *tool, *field, *type;
	} files[] = {
		{ "Write", "file_path", "write" },
		{ "Edit", "file_path", "write" },
		{ "MultiEdit", "file_path", "write" },
		{ "NotebookEdit", "notebook_path", "write" },
		{ "Read", "file_path", "read" },
		{ "Glob", "path", "read" },
		{ "Grep", "path", "read" },
		{ "LS", "path", "read" },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (strcmp(tool, files[i].tool) != 0)
			continue;
		const char *path = json_string_value(json_object_get(in, files[i].field));
		if (!path && strcmp(files[i].type, "read") == 0 && strcmp(tool, "Read") != 0)
			path = cwd; /* Glob/Grep/LS default to the working directory */
		if (!path || !*path) {
			*why = "the file tool's input has no path";
			goto fail;
		}
		json_t *acts = json_pack("[{s:s,s:s,s:s}]", "action_type", files[i].type, "tool",
					 tool, "resource", path);
		/* Glob's pattern, Grep's glob: the directories they name are read too. */
		const char *pat =
		    json_string_value(json_object_get(in, strcmp(tool, "Glob") == 0   ? "pattern"
							  : strcmp(tool, "Grep") == 0 ? "glob"
										      : ""));
		if (acts && pat && pattern_reads(path, pat, tool, acts) != 0) {
			json_decref(acts);
			*verdict =
			    "ask"; /* a hidden name it spells as a pattern: a person judges */
			goto fail;
		}
		json_object_set_new(req, "actions", acts);
		*kind = K_FILE;
		return req;
	}
	if (strcmp(tool, "WebFetch") == 0) {
		const char *url = json_string_value(json_object_get(in, "url"));
		char host[256];
		if (!url || url_host(url, host, sizeof(host)) < 0) {
			*why = "WebFetch tool_input has no usable url";
			goto fail;
		}
		json_object_set_new(req, "actions",
				    json_pack("[{s:s,s:s,s:s,s:{s:s}}]", "action_type", "net",
					      "tool", tool, "resource", host, "args", "url", url));
		return req;
	}
	if (strcmp(tool, "WebSearch") == 0) {
		const json_t *q = json_object_get(in, "query");
		if (!json_is_string(q)) {
			*why = "WebSearch tool_input has no query";
			goto fail;
		}
		json_t *args = json_pack("{s:O}", "query", q);
		static const char *const lists[] = { "allowed_domains", "blocked_domains" };
		for (size_t i = 0; i < 2; i++) {
			const json_t *l = json_object_get(in, lists[i]);
			if (json_is_array(l))
				json_object_set(args, lists[i], (json_t *)(uintptr_t)l);
		}
		json_object_set_new(req, "actions",
				    json_pack("[{s:s,s:s,s:s,s:o}]", "action_type", "net", "tool",
					      tool, "resource", "web-search", "args", args));
		return req;
	}
	if (strncmp(tool, "mcp__", 5) == 0) {
		const char *server = tool + 5, *sep = strstr(server, "__");
		size_t sl = sep ? (size_t)(sep - server) : strlen(server);
		/*
		 * Ours only when the rest is exactly one of our tools: a server
		 * named "callgate__evilsrv" gives "mcp__callgate__evilsrv__run",
		 * which an attack had allowed here as callgate's own.
		 */
		if (own_server && *own_server && strlen(own_server) == sl &&
		    strncmp(server, own_server, sl) == 0 && sep && cg_cli_mcp_tool_known(sep + 2)) {
			/* callgate's own MCP tools go through the daemon's full gate. */
			*verdict = "allow";
			goto fail;
		}
		json_object_set_new(req, "actions",
				    json_pack("[{s:s,s:s,s:s#,s:O}]", "action_type", "mcp", "tool",
					      tool, "resource", server, (int)sl, "args", in));
		return req;
	}
	*verdict = "ask";
fail:
	json_decref(req);
	return NULL;
}

static char *read_stdin(size_t *len)
{
	size_t alloc = 65536;
	char *buf = malloc(alloc + 1);

	*len = 0;
	while (buf) {
		if (*len == alloc) {
			char *nb;
			if (alloc >= HOOK_PAYLOAD_MAX) {
				free(buf);
				errno = E2BIG;
				return NULL;
			}
			alloc *= 2;
			nb = realloc(buf, alloc + 1);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t r = cg_read_some(STDIN_FILENO, buf + *len, alloc - *len);
		if (r < 0)
			break;
		if (r == 0) {
			buf[*len] = '\0';
			return buf;
		}
		*len += (size_t)r;
	}
	free(buf);
	return NULL;
}

/* The gate's answer as the hook reads it: one reading for a call and a chain's parts. */
struct answer {
	const json_t *data;
	const char *type, *code, *msg, *trace, *decision, *rule, *why, *refusal;
	bool decided; /* an S reply with a decision */
	bool permits; /* ALLOW or DEGRADE */
	bool human;   /* UNKNOWN */
	bool waits;   /* … and someone can say yes inside callgate: its queue, or an open grant */
	bool blocked; /* BLOCK */
	bool confined; /* DEGRADE, or constraints: the rule lets the call run only confined */
};

static void read_answer(const json_t *resp, struct answer *a)
{
	const json_t *reply = json_object_get(resp, "reply");
	const json_t *data = json_object_get(reply, "data");
	const json_t *appr = json_object_get(data, "approval");
	a->data = data;
	a->type = str_or(json_string_value(json_object_get(reply, "type")), "?");
	a->code = str_or(json_string_value(json_object_get(reply, "code")), "?");
	a->msg = str_or(json_string_value(json_object_get(reply, "message")), "");
	a->trace = str_or(json_string_value(json_object_get(reply, "trace_id")), "-");
	a->decision = json_string_value(json_object_get(data, "decision"));
	a->rule = str_or(json_string_value(json_object_get(data, "rule_id")), "?");
	a->why = str_or(json_string_value(json_object_get(data, "why")), a->msg);
	a->refusal = str_or(json_string_value(json_object_get(data, "reason")), a->code);
	const char *d = a->decision;
	a->decided = strcmp(a->type, "S") == 0 && d;
	a->permits = a->decided && (strcmp(d, "ALLOW") == 0 || strcmp(d, "DEGRADE") == 0);
	a->human = a->decided && strcmp(d, "UNKNOWN") == 0;
	a->waits = a->human && (json_is_true(json_object_get(appr, "enabled")) ||
				json_is_object(json_object_get(appr, "grant")));
	a->blocked = a->decided && strcmp(d, "BLOCK") == 0;
	a->confined = a->decided && (strcmp(d, "DEGRADE") == 0 ||
				     json_array_size(json_object_get(data, "constraints")) > 0);
}

/*
 * A chain's first pass: each part's cwd (after the cd parts before it) into
 * cwds, and the gate's answer for each command part into resps (null for a
 * cd). 0; 1 when the chain is to be judged whole (a cd to an option, or with
 * no cwd to take it from); -1 after blocking (*rc) when the daemon is out of
 * reach.
 */
static int gate_parts(const struct cg_cli *g, const json_t *req, const json_t *parts, json_t *resps,
		      json_t *cwds, int *rc)
{
	char *cwd = strdup(str_or(json_string_value(json_object_get(req, "cwd")), ""));
	int out = 1;
	for (size_t i = 0; cwd && i < json_array_size(parts); i++) {
		const json_t *part = json_array_get(parts, i);
		const char *dir = json_string_value(json_object_get(part, "cd"));
		json_t *resp = json_null();
		if (dir) {
			char *next = NULL;
			if (dir[0] == '-' || (dir[0] != '/' && !cwd[0]) ||
			    (dir[0] == '/' ? asprintf(&next, "%s", dir)
					   : asprintf(&next, "%s/%s", cwd, dir)) < 0)
				goto done;
			free(cwd);
			cwd = next;
		} else {
			json_t *r = json_deep_copy(req);
			char err[256] = "";
			json_object_set(r, "pipeline", json_object_get(part, "pipeline"));
			if (cwd[0])
				json_object_set_new(r, "cwd", json_string(cwd));
			int called = r ? cg_client_call(g->socket_path, r, HOOK_TIMEOUT_MS, &resp,
							err, sizeof(err))
				       : -1;
			json_decref(r);
			if (called != 0) {
				*rc = block(HOOK_UNREACHABLE, g->socket_path, err);
				out = -1;
				goto done;
			}
		}
		json_array_append_new(resps, resp);
		json_array_append_new(cwds, json_string(cwd));
	}
	out = cwd && json_array_size(resps) == json_array_size(parts) ? 0 : 1;
done:
	free(cwd);
	return out;
}

/*
 * A chain (split_chain): each command part gated on its own, in the cwd the
 * cd parts before it leave. Every part is judged before anything is
 * decided: the first that is denied, or that nobody can approve, denies the
 * whole, naming it (s39c: a part denied behind one the gate could not
 * decide had fallen back to the whole as sh -c, and run). When every part
 * may run through callgate (permits, or waits for a human or a grant there),
 * the command becomes the same list of `callgate run` commands, separators
 * kept, so the shell keeps its meaning (a part after && runs only if the one
 * before succeeded) and the daemon decides each again as it runs. The cd
 * parts are not kept: each run carries its cwd, and a cd in Claude Code's
 * own shell runs the user's cd functions and hooks unconfined (s39c: an
 * autoenv-style cd ran a file the agent wrote); the separator before a cd
 * is the command's own, the cd's && goes with it. Any other answer judges
 * the command as the opaque shell command it is (return 1: the caller goes
 * on).
 */
static int hook_chain(const struct cg_cli *g, const json_t *payload, const json_t *req,
		      const json_t *parts, int *rc)
{
	size_t n = json_array_size(parts), cap = 1, len = 0, rl = 0, runs = 0;
	char *cmd = calloc(1, 1), reason[1024], rules[512] = "";
	json_t *resps = json_array(), *cwds = json_array();
	int out = cmd && resps && cwds ? gate_parts(g, req, parts, resps, cwds, rc) : 1;
	if (out != 0) {
		out = out < 0 ? 0 : 1;
		goto done;
	}
	out = 1;
	bool undecided = false;
	for (size_t i = 0; i < n; i++) { /* a denial anywhere denies the whole */
		struct answer a;
		if (json_is_null(json_array_get(resps, i)))
			continue; /* a cd */
		read_answer(json_array_get(resps, i), &a);
		if (a.blocked || (a.human && !a.waits)) {
			snprintf(reason, sizeof(reason),
				 "callgate: command %zu of the %zu joined here %s by rule %s: %s%s "
				 "(trace %s); nothing of it ran",
				 i + 1, n, a.blocked ? "is denied" : "needs a human", a.rule, a.why,
				 a.blocked
				     ? ""
				     : "; this daemon has no approval queue and no open grant "
				       "covers it",
				 a.trace);
			*rc = decide("deny", reason);
			out = 0;
			goto done;
		}
		undecided |= !a.permits && !a.waits;
	}
	if (undecided)
		goto done;		 /* a part the gate could not decide: judged whole */
	for (size_t i = 0; i < n; i++) { /* every part may run: the rewrite */
		const json_t *part = json_array_get(parts, i);
		struct answer a;
		if (json_is_null(json_array_get(resps, i)))
			continue;
		read_answer(json_array_get(resps, i), &a);
		if (rl < sizeof(rules))
			rl += (size_t)snprintf(
			    rules + rl, sizeof(rules) - rl, "%s%s%s", rl ? ", " : "", a.rule,
			    !a.waits ? ""
			    : json_is_object(
				  json_object_get(json_object_get(a.data, "approval"), "grant"))
				? " (under an open grant)" /* ux-s42e L7: not a human */
				: " (waits for a human)");
		const char *cwd = json_string_value(json_array_get(cwds, i));
		char *text = run_command(g->socket_path, json_object_get(part, "pipeline"),
					 cwd[0] ? cwd : NULL,
					 json_string_value(json_object_get(req, "session")),
					 json_object_get(payload, "tool_input"));
		const char *sep = str_or(json_string_value(json_object_get(part, "sep")), "");
		char *grown = text ? realloc(cmd, cap += strlen(text) + strlen(sep) + 2) : NULL;
		if (!grown) {
			free(text);
			goto done;
		}
		cmd = grown;
		const char *redir = str_or(json_string_value(json_object_get(part, "redir")), "");
		grown = realloc(cmd, cap += strlen(redir));
		if (!grown) {
			free(text);
			goto done;
		}
		cmd = grown;
		len +=
		    (size_t)snprintf(cmd + len, cap - len, "%s%s%s", len ? " " : "", text, redir);
		if (i + 1 < n && *sep)
			len += (size_t)snprintf(cmd + len, cap - len, " %s", sep);
		free(text);
		runs++;
	}
	if (runs == 0)
		goto done;
	json_t *in = json_deep_copy(json_object_get(payload, "tool_input"));
	json_object_set_new(in, "command", json_string(cmd));
	snprintf(reason, sizeof(reason),
		 "callgate: %s runs through callgate on its own, confined as its rule requires "
		 "(%s)",
		 runs == 1 ? "the command after cd" : "each command joined here", rules);
	*rc = decide_input("allow", reason, in);
	out = 0;
done:
	free(cmd);
	json_decref(resps);
	json_decref(cwds);
	return out;
}

static int hook_claude_code(const struct cg_cli *g, enum degrade_mode degrade,
			    const char *own_server)
{
	json_error_t jerr;
	size_t len;
	char *raw = read_stdin(&len);
	json_t *payload = NULL, *req = NULL, *resp = NULL;
	const char *verdict = NULL, *why = NULL;
	enum kind kind;
	char err[256], reason[1024];
	int rc;

	if (!raw)
		return block("cannot read the hook payload: %s", strerror(errno));
	payload = json_loadb(raw, len, 0, &jerr);
	free(raw);
	if (!payload) {
		rc = block("the hook payload cannot be read as JSON: %s (line %d, column %d)",
			   json_error_code(&jerr) == json_error_null_character
			       ? "it contains \\u0000 (a NUL character), which callgate refuses"
			       : jerr.text,
			   jerr.line, jerr.column);
		goto out_payload;
	}
	if (!json_is_object(payload)) {
		rc = block("the hook payload is not a JSON object but a JSON %s",
			   json_is_array(payload)    ? "array"
			   : json_is_string(payload) ? "string"
						     : "scalar");
		goto out_payload;
	}
	/*
	 * Wired as another event (PostToolUse: the tool already ran), an allow
	 * with a rewrite governs nothing: said, and nothing answered as if it
	 * had (ux-s42e L5).
	 */
	const char *event = json_string_value(json_object_get(payload, "hook_event_name"));
	if (event && strcmp(event, "PreToolUse") != 0) {
		fprintf(stderr,
			"callgate hook claude-code: called for %s; it judges tools before they run "
			"and must be a PreToolUse hook (.claude/settings.json, docs/agents.md): "
			"nothing was judged\n",
			event);
		rc = 1;
		goto out_payload;
	}
	req = map_call(payload, own_server, &kind, &verdict, &why);
	if (!req) {
		if (verdict && strcmp(verdict, "allow") == 0)
			rc = decide("allow", "callgate: its own MCP tools are gated by the daemon "
					     "on every call");
		else if (verdict)
			rc = decide("ask", "callgate: this tool is not mapped to a gate action; "
					   "a human decides");
		else
			rc = block("%s", why);
		goto out_payload;
	}
	if (kind == K_COMMAND) {
		/*
		 * cd alone: no program to run, and in Claude Code's own shell it
		 * would run the user's cd hooks unconfined (s39c). Said plainly
		 * (ux-s42e H3: "command 'cd' was not found on the controlled PATH").
		 */
		const json_t *pl = json_object_get(req, "pipeline");
		const char *w0 = json_string_value(json_array_get(json_array_get(pl, 0), 0));
		if (json_array_size(pl) == 1 && w0 && strcmp(w0, "cd") == 0) {
			rc = block(
			    "a cd on its own changes nothing here: each command runs "
			    "through callgate in the session's working directory; write cd DIR "
			    "&& COMMAND (each part then runs in DIR)");
			goto out_req;
		}
		/* A chain of plain commands: each gated and run on its own. */
		const json_t *st = json_array_get(json_object_get(req, "pipeline"), 0);
		const char *sh = json_string_value(json_array_get(st, 0));
		json_t *parts = sh && strcmp(sh, hook_shell()) == 0
				    ? split_chain(json_string_value(json_array_get(st, 2)))
				    : NULL;
		int handled = parts ? hook_chain(g, payload, req, parts, &rc) : 1;
		json_decref(parts);
		if (handled == 0)
			goto out_req;
	}
	if (cg_client_call(g->socket_path, req, HOOK_TIMEOUT_MS, &resp, err, sizeof(err)) != 0) {
		rc = block(HOOK_UNREACHABLE, g->socket_path, err);
		goto out_req;
	}
	struct answer a;
	read_answer(resp, &a);
	const json_t *data = a.data;
	const char *trace = a.trace, *decision = a.decision, *rule = a.rule, *rule_why = a.why;
	if (!a.decided) {
		/* Not a decision (I: the call is malformed for callgate, e.g. a cwd
		 * outside the workspaces; E: the daemon failed): block. */
		snprintf(reason, sizeof(reason), "[%s %s] %s (trace %s)", a.type, a.code, a.msg,
			 trace);
		rc = block("%s", reason);
		goto out_resp;
	}
	/* Name every rung's rule, the policy's first: "read-only-tools (policy),
	 * unprivileged (privilege)"; the folded rule alone may be the privilege
	 * rung's, which tells a reader little. */
	char rules[512] = "";
	size_t rl = 0;
	const json_t *rungs = json_object_get(data, "rungs");
	for (size_t i = json_array_size(rungs); i-- > 0 && rl < sizeof(rules);) {
		const json_t *r = json_array_get(rungs, i);
		const char *id = json_string_value(json_object_get(r, "rule_id"));
		if (id)
			rl += (size_t)snprintf(
			    rules + rl, sizeof(rules) - rl, "%s%s (%s)", rl ? ", " : "", id,
			    str_or(json_string_value(json_object_get(r, "rung")), "?"));
	}
	if (!rules[0])
		snprintf(rules, sizeof(rules), "%s", rule);
	bool confined = a.confined, permits = a.permits, human = a.human, waits = a.waits;
	const json_t *approval = json_object_get(data, "approval");
	/* What "ask" lets happen: Claude Code runs the tool itself, outside callgate. */
	static const char outside[] = "; if you allow it here, Claude Code runs it itself, outside "
				      "callgate: unconfined and unrecorded";
	const char *refusal = a.refusal;

	if (kind == K_COMMAND && (permits || waits)) {
		/* Governed: Claude Code runs the judged argv through callgate, which
		 * decides again, confines, records and passes the output back. */
		char *cmd = run_command(g->socket_path, json_object_get(req, "pipeline"),
					json_string_value(json_object_get(req, "cwd")),
					json_string_value(json_object_get(req, "session")),
					json_object_get(payload, "tool_input"));
		const char *bash = json_string_value(
		    json_object_get(json_object_get(payload, "tool_input"), "command"));
		/* Split from what came before final redirections, not the whole as a shell's. */
		const char *w2 = json_string_value(
		    json_array_get(json_array_get(json_object_get(req, "pipeline"), 0), 2));
		size_t keep = bash ? redirect_tail(bash) : 0;
		if (cmd && keep && !(w2 && strcmp(w2, bash) == 0)) {
			char *m = NULL;
			if (asprintf(&m, "%s%s", cmd, bash + keep) < 0)
				m = NULL;
			free(cmd);
			cmd = m;
		}
		if (cmd) {
			json_t *in = json_deep_copy(json_object_get(payload, "tool_input"));
			json_object_set_new(in, "command", json_string(cmd));
			free(cmd);
			if (waits && !json_is_true(json_object_get(approval, "enabled")))
				snprintf(
				    reason, sizeof(reason),
				    "callgate: rule %s needs a human: %s; an open grant covers "
				    "it, and it runs through callgate under that grant (trace "
				    "%s)",
				    rule, rule_why, trace);
			else if (waits)
				snprintf(reason, sizeof(reason),
					 "callgate: rule %s needs a human: %s; the command runs "
					 "through callgate and waits there for approval (callgate "
					 "pending) (trace %s)",
					 rule, rule_why, trace);
			else
				snprintf(reason, sizeof(reason),
					 "callgate: allowed by rule %s; runs through callgate%s "
					 "(trace %s)",
					 rules, confined ? ", confined as the rule requires" : "",
					 trace);
			rc = decide_input("allow", reason, in);
			goto out_resp;
		}
		snprintf(reason, sizeof(reason),
			 "callgate: rule %s would allow this, but it cannot be rewritten to run "
			 "through callgate exactly as judged (a word that is a lone '|'); run it "
			 "with callgate's MCP execute tool (trace %s)%s",
			 rules, trace, degrade == DEGRADE_DENY ? "" : outside);
		rc = decide(degrade == DEGRADE_DENY ? "deny" : "ask", reason);
	} else if (permits && (!confined || kind == K_FILE)) {
		/* A file tool's whole effect is the path that was decided on, so a
		 * constraint such as "writes only inside the workspace" is exactly
		 * what the decision checked. */
		snprintf(reason, sizeof(reason), "callgate: allowed by rule %s (trace %s)", rules,
			 trace);
		rc = decide("allow", reason);
	} else if (permits) {
		/* Claude Code would run it unconfined; saying allow would drop the
		 * rule's constraints, the bypass a gate exists to close. */
		snprintf(reason, sizeof(reason),
			 "callgate: rule %s allows this only confined, and a hook cannot confine "
			 "it; run it through callgate's MCP execute tool, which applies the "
			 "constraints (trace %s)%s",
			 rules, trace, degrade == DEGRADE_DENY ? "" : outside);
		rc = decide(degrade == DEGRADE_DENY ? "deny" : "ask", reason);
	} else if (human && !waits && kind == K_COMMAND) {
		/*
		 * Nobody can say yes inside callgate (no --approval, no grant), so the
		 * daemon would refuse it; "ask" would let Claude Code run the command
		 * as written instead, unconfined and unrecorded (found in s36's walk).
		 * Other tools have no confinement to lose: they still ask, saying so.
		 */
		snprintf(reason, sizeof(reason),
			 "callgate: [D %s] rule %s needs a human: %s; this daemon has no approval "
			 "queue (it runs without --approval) and no open grant covers this, so "
			 "callgate refuses it; an operator may open a grant for it (callgate grant "
			 "open) or start the daemon with --approval (trace %s)",
			 refusal, rule, rule_why, trace);
		rc = decide("deny", reason);
	} else if (human) {
		snprintf(reason, sizeof(reason),
			 "callgate: rule %s defers this to a human: %s (trace %s)%s", rule,
			 rule_why, trace, outside);
		rc = decide("ask", reason);
	} else if (strcmp(decision, "BLOCK") == 0) {
		/* No rule at all: which program that was, as resolved (ux-s42e M2). */
		const json_t *progs = json_object_get(data, "programs");
		char named[600] = "";
		size_t nl = 0, pi;
		const json_t *pv;
		json_array_foreach(progs, pi, pv) if (nl < sizeof(named) - 1) nl +=
		    (size_t)snprintf(named + nl, sizeof(named) - nl, "%s%s", pi ? ", " : "",
				     json_string_value(pv));
		/* Where it lives decides what to say (s44c M4: /usr/bin/kill was called outside). */
		static const char *const system_dirs[] = { "/usr/bin/", "/bin/", "/usr/sbin/",
							   "/sbin/", "/usr/local/bin/" };
		bool in_system = false;
		for (size_t d = 0; d < sizeof(system_dirs) / sizeof(system_dirs[0]); d++)
			in_system |= strncmp(named, system_dirs[d], strlen(system_dirs[d])) == 0;
		if (strcmp(rule, "default-deny") == 0 && named[0] && in_system)
			snprintf(reason, sizeof(reason),
				 "callgate: [D %s] denied by rule default-deny: no rule names %s; "
				 "the operator can add it to a rule of the policy (docs/policy.md, "
				 "exe) (trace %s)",
				 refusal, named, trace);
		else if (strcmp(rule, "default-deny") == 0 && named[0])
			snprintf(
			    reason, sizeof(reason),
			    "callgate: [D %s] denied by rule default-deny: no rule allows %s "
			    "(a program outside the default program directories, a pyenv's "
			    "or a toolchain's under the home, runs only where a rule names it: "
			    "docs/policy.md, exe) (trace %s)",
			    refusal, named, trace);
		else if (strcmp(rule, "privilege-wrappers") == 0)
			/* s44c L1: the rule's way (a privileged call) is not the hook's to take. */
			snprintf(
			    reason, sizeof(reason),
			    "callgate: [D %s] denied by rule %s: privilege escalation inside a "
			    "call; through this hook every command runs as the user, so a "
			    "command that needs root is the developer's to run (or to send "
			    "with callgate run, which a person approves) (trace %s)",
			    refusal, rule, trace);
		else
			snprintf(reason, sizeof(reason),
				 "callgate: [D %s] denied by rule %s: %s (trace %s)", refusal, rule,
				 rule_why, trace);
		rc = decide("deny", reason);
	} else {
		rc = block("callgate answered an unknown decision '%s'", decision);
	}
out_resp:
	json_decref(resp);
out_req:
	json_decref(req);
out_payload:
	json_decref(payload);
	return rc;
}

static const struct cg_cli_opt hook_commands[] = {
	{ "claude-code", NULL, "a Claude Code PreToolUse hook" },
	{ 0 },
};

static const struct cg_cli_opt claude_code_opts[] = {
	{ "--degrade", "ask|deny", "answer for a confined fetch/MCP call or unrewritable command" },
	{ "--mcp-server", "NAME", "callgate's own MCP server, whose tools pass" },
	{ 0 },
};

#define HOOK_USAGE "callgate [--socket PATH] hook claude-code [OPTIONS]"
#define HOOK_ABOUT                                                                                 \
	"commands:\n"                                                                              \
	"  claude-code  a Claude Code PreToolUse hook: payload on stdin, decision on\n"            \
	"               stdout. Every usage error exits 2, which blocks the call."
#define CLAUDE_CODE_ABOUT                                                                          \
	"A Claude Code PreToolUse hook: reads the hook payload on stdin, asks the\n"               \
	"daemon's gate, prints allow, deny or ask on stdout (JSON, as Claude Code\n"               \
	"expects). An allowed Bash command is rewritten (updatedInput) to run\n"                   \
	"through 'callgate run', confined and recorded by the daemon.\n"                           \
	"Fails closed: an unreachable daemon, a bad payload or a usage\n"                          \
	"error exits 2 with the reason on stderr, which blocks the call (any other\n"              \
	"exit status would let Claude Code go ahead). See callgate-hook(1)."

int cg_cli_hook(const struct cg_cli *g, int argc, char **argv)
{
	enum degrade_mode degrade = DEGRADE_ASK;
	const char *own_server = "callgate";

	/*
	 * Usage errors exit 2, not 64: Claude Code treats any other non-zero
	 * status as "hook failed, go ahead", so a misconfigured hook would pass
	 * every call. Even a typo must block.
	 */
	if (argc < 2 || argv[1][0] == '-') {
		if (cg_cli_wants_help(argc, argv))
			return cg_cli_help(HOOK_USAGE, HOOK_ABOUT, NULL);
		fprintf(stderr, "callgate hook: give an agent: claude-code (see 'callgate hook "
				"--help')\n");
		return HOOK_EXIT_BLOCK;
	}
	if (strcmp(argv[1], "claude-code") != 0) {
		(void)cg_cli_bad_option("hook", argv[1], "unknown agent", hook_commands);
		return HOOK_EXIT_BLOCK;
	}
	if (cg_cli_wants_help(argc - 1, argv + 1))
		return cg_cli_help(HOOK_USAGE, CLAUDE_CODE_ABOUT, claude_code_opts);
	for (int i = 2; i < argc; i++) {
		const char *v = NULL;
		const struct cg_cli_opt *o =
		    cg_cli_opt_take("hook claude-code", claude_code_opts, argc, argv, &i, &v);
		if (!o)
			return HOOK_EXIT_BLOCK;
		if (strcmp(o->name, "--mcp-server") == 0) {
			own_server = v;
		} else if (strcmp(v, "ask") == 0) {
			degrade = DEGRADE_ASK;
		} else if (strcmp(v, "deny") == 0) {
			degrade = DEGRADE_DENY;
		} else {
			fprintf(
			    stderr,
			    "callgate hook claude-code: --degrade takes ask or deny, not '%s'\n",
			    v);
			return HOOK_EXIT_BLOCK;
		}
	}
	return hook_claude_code(g, degrade, own_server);
}
