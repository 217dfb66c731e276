/* SPDX-License-Identifier: MIT */
/*
 * cli_run — `callgate run`, `callgate ping` and `callgate gate`: build one
 * request from the command line, send it, and render the response.
 *
 * run writes the last stage's stdout bytes to stdout and every stage's
 * stderr to stderr, in stage order, and exits with the last stage's exit
 * code; a refusal prints one line "callgate run: <code>: <message>
 * (trace <id>)" and exits with the code cli.h documents. Human output is
 * text; --json prints the response line and nothing else on stdout.
 *
 * Invariants:
 *  - Nothing is run locally: the CLI only talks to the daemon.
 *  - The privileged default is the protocol's (true): the CLI sends
 *    "privileged" only when --privileged, --no-privileged or
 *    $CALLGATE_PRIVILEGED says so.
 *  - A response the CLI cannot read is an error (70), never success.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "approval.h"
#include "cli.h"
#include "util.h"

/* Ping and gate answer at once; a dead daemon should not hang the CLI. */
#define QUICK_TIMEOUT_MS 30000

/*
 * The protocol's default is privileged; a person who did not choose it is
 * told how not to. On a terminal only: scripts keep the one refusal line
 * (which names --no-privileged itself).
 */
static void privileged_hint(const json_t *req, const json_t *resp)
{
	if (!isatty(STDERR_FILENO))
		return;
	const char *code =
	    json_string_value(json_object_get(json_object_get(resp, "reply"), "code"));
	if (!json_object_get(req, "privileged") && code &&
	    strcmp(code, cg_reply_registry[CG_R_PRIVILEGED_NEEDS_APPROVAL].code) == 0)
		fprintf(stderr,
			"callgate run: a call is privileged (root, after a human's approval) "
			"unless it says otherwise; add --no-privileged to run as yourself, "
			"or set CALLGATE_PRIVILEGED=0 for every call\n");
}

/*
 * A program not found that is a shell's mistake, not a missing program
 * (ux-s40 L4): a whole pipeline quoted as one word, or a shell builtin. On
 * a terminal only, as privileged_hint: scripts keep the one refusal line.
 */
static void shell_hint(const json_t *req, const json_t *resp)
{
	if (!isatty(STDERR_FILENO))
		return;
	const char *code =
	    json_string_value(json_object_get(json_object_get(resp, "reply"), "code"));
	if (!code || strcmp(code, cg_reply_registry[CG_R_EXE_NOT_FOUND].code) != 0)
		return;
	static const char *const builtins[] = { "cd", "export", "source", ".", "alias", "set" };
	size_t i;
	json_t *st;
	json_array_foreach(json_object_get(req, "pipeline"), i, st)
	{
		const char *w = json_string_value(json_array_get(st, 0));
		if (!w)
			continue;
		if (strpbrk(w, " |;&<>")) {
			fprintf(stderr,
				"callgate run: stage %zu's program is '%s', one word with "
				"spaces or shell syntax: there is no shell; give each word "
				"apart, and '|' between stages (-- ls -l '|' wc -l)\n",
				i + 1, w);
			return;
		}
		for (size_t b = 0; b < CG_ARRAY_LEN(builtins); b++)
			if (strcmp(w, builtins[b]) == 0) {
				fprintf(stderr,
					"callgate run: '%s' is a shell builtin, not a program%s\n",
					w,
					strcmp(w, "cd") == 0 ? ": give the directory with --cwd DIR"
							     : "");
				return;
			}
	}
}

static void print_json(const json_t *resp)
{
	char *s = json_dumps(resp, JSON_COMPACT);
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
	}
	free(s);
}

/*
 * The daemon could not be asked (69), or answered something unreadable
 * (70): its registry reply (MCP-IO-E-100, E-103 over ssh, E-101) on stderr
 * as "CODE: message", and with --json the same reply on stdout.
 */
static int unreachable(const struct cg_cli *g, const char *sub, const char *err, bool json)
{
	int e = errno;
	bool unreadable = e == EPROTO || e == EMSGSIZE;
	bool remote = cg_client_host_is_remote(g->host);
	struct cg_reply *r =
	    unreadable ? cg_reply_new(CG_R_DAEMON_REPLY_INVALID, "{s:s}", "detail", err)
	    : remote
		? cg_reply_new(CG_R_HOST_UNREACHABLE, "{s:s,s:s}", "host", g->host, "detail", err)
		: cg_reply_new(CG_R_DAEMON_UNREACHABLE, "{s:s,s:s}", "socket", g->socket_path,
			       "detail", err);
	char *msg = r ? cg_reply_message(r) : NULL;
	if (json && r) {
		json_t *o = json_pack("{s:s,s:s,s:o}", "id", "", "status", "error", "reply",
				      cg_reply_to_json(r));
		print_json(o);
		json_decref(o);
	}
	fprintf(stderr, "callgate %s: %s: %s\n", sub, r ? cg_reply_def_of(r)->code : "",
		msg ? msg : err);
	free(msg);
	cg_reply_free(r);
	if ((e == ENOENT || e == ECONNREFUSED) && !remote && isatty(STDERR_FILENO))
		fprintf(stderr,
			"callgate %s: is callgated running? Give its socket with --socket "
			"PATH or $CALLGATE_SOCKET\n",
			sub);
	if (e == EACCES && !remote)
		fprintf(stderr,
			"callgate %s: the daemon runs, but this user may not use its socket: the "
			"operator gives it the daemon's --socket-group (and you log in again), or "
			"you use the daemon that runs as you\n",
			sub);
	return unreadable ? CG_EXIT_ERROR : CG_EXIT_UNAVAILABLE;
}

/*
 * For a terminal: a command's bytes as they are, but for the escape
 * sequences a terminal acts on beyond drawing. OSC, DCS, APC, PM and SOS
 * strings (the title, the clipboard through OSC 52, links) and CSI window
 * operations (final byte t: some report text back as if typed) are dropped,
 * and so are C1 controls written as UTF-8 (U+0080 to U+009F: U+009D is OSC
 * too) and a sequence cut by the end of the output (stdout's lone ESC and
 * stderr's `]52;…` made one OSC on the terminal); colours and cursor
 * movement stay. An allowed call's output set the user's clipboard through
 * callgate run (s37 attack). Returns the new length.
 */
static size_t tty_clean(unsigned char *p, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		if (p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) {
			i += 2;
			continue;
		}
		if (p[i] != 0x1b) {
			p[o++] = p[i++];
			continue;
		}
		if (i + 1 >= n)
			break; /* a lone ESC at the end */
		unsigned char k = p[i + 1];
		if (k == ']' || k == 'P' || k == '_' || k == '^' || k == 'X') {
			/* A string: to BEL (OSC's other end) or ESC \, or the end of the output. */
			size_t j = i + 2;
			while (j < n && p[j] != 0x07 &&
			       !(p[j] == 0x1b && j + 1 < n && p[j + 1] == '\\'))
				j++;
			i = j >= n ? n : p[j] == 0x07 ? j + 1 : j + 2;
			continue;
		}
		if (k == '[') {
			size_t j = i + 2;
			while (j < n && p[j] >= 0x20 && p[j] <= 0x3f)
				j++;
			if (j >= n)
				break; /* cut by the end */
			if (p[j] == 't') {
				i = j + 1;
				continue;
			}
		}
		p[o++] = p[i++];
	}
	return o;
}

/* Decode a base64 field and write it to f. 0, or -1 if it does not decode. */
static int write_b64(const json_t *v, FILE *f)
{
	const char *s = json_string_value(v);
	if (!s || !*s)
		return 0;
	size_t n = 0;
	unsigned char *p = cg_base64_decode(s, strlen(s), &n);
	if (!p)
		return -1;
	if (isatty(fileno(f)))
		n = tty_clean(p, n);
	size_t w = fwrite(p, 1, n, f);
	free(p);
	return w == n ? 0 : -1;
}

/*
 * A call that ended otherwise (its deadline, a cancel) may still have had
 * names set aside (the reply's data lists them): one line each.
 */
static void set_aside_note(const json_t *resp)
{
	const json_t *data = json_object_get(json_object_get(resp, "reply"), "data");
	size_t i;
	const json_t *sa;
	json_array_foreach(json_object_get(data, "set_aside"), i, sa)
	{
		char *p = cg_sanitize_for_terminal(json_string_value(json_object_get(sa, "path")));
		const char *err = json_string_value(json_object_get(sa, "error"));
		if (err && strcmp(err, "E2BIG") == 0)
			fprintf(stderr,
				"callgate run: %s was NOT looked at in full after this call (too "
				"many directories): a repository the call made or wrote there was "
				"not checked; before running git there, read its .git/config and "
				"hooks (docs/confinement.md)\n",
				p ? p : "?");
		else if (err)
			fprintf(
			    stderr,
			    "callgate run: %s, made or changed by the call where it may run "
			    "later, could NOT be set aside (%s): read it before the developer's "
			    "tools do\n",
			    p ? p : "?", err);
		else
			fprintf(
			    stderr,
			    "callgate run: %s, a protected name made or replaced while the call "
			    "ran (by it, or by the developer meanwhile), was set aside after it, "
			    "renamed beside itself; a call may not make it, the developer can "
			    "(and renames their own back)\n",
			    p ? p : "?");
		free(p);
	}
}

/*
 * Set the request's cwd: dir made absolute against the caller's working
 * directory (the daemon resolves it, so it must mean what it meant in the
 * user's shell), or with dir NULL the caller's working directory itself.
 * 0, or -1 after saying why on stderr; never drops it, since the call would
 * then run somewhere else.
 */
static int set_cwd(const char *sub, json_t *req, const char *dir)
{
	char here[PATH_MAX], abs[PATH_MAX];
	if (dir && dir[0] == '/') {
		if ((size_t)snprintf(abs, sizeof(abs), "%s", dir) >= sizeof(abs)) {
			fprintf(stderr, "callgate %s: --cwd: path too long\n", sub);
			return -1;
		}
	} else if (!getcwd(here, sizeof(here))) {
		fprintf(stderr,
			"callgate %s: cannot tell the current directory (%s); give --cwd with an "
			"absolute path\n",
			sub, strerror(errno));
		return -1;
	} else if (!dir) {
		memcpy(abs, here, strlen(here) + 1);
	} else if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", here, dir) >= sizeof(abs)) {
		fprintf(stderr, "callgate %s: --cwd: path too long\n", sub);
		return -1;
	}
	if (json_object_set_new(req, "cwd", json_string(abs)) != 0) {
		fprintf(stderr, "callgate %s: %s must be UTF-8\n", sub,
			dir ? "--cwd" : "the current directory (give --cwd)");
		return -1;
	}
	return 0;
}

/* The options of run and gate (gate adds --actions): one table for --help and errors. */
/* clang-format off */
#define REQUEST_OPTS \
	{ "--no-privileged", NULL, "run as yourself (what most calls want; CALLGATE_PRIVILEGED=0 for every call)" }, \
	{ "--privileged", NULL, "run as root after a human's approval (the default)" }, \
	{ "--cwd", "DIR", "working directory in a workspace (default: here)" }, \
	{ "--env", "NAME=VALUE", "set a variable the policy allows; repeatable" }, \
	{ "--timeout", "MS", "the command's deadline: ms, or 30s, 5m, 1h (capped by policy)" }, \
	{ "--reason", "TEXT", "why: shown to the approver and kept in evidence" }, \
	{ "--session", "NAME", "the agent session the call belongs to" }, \
	{ "--forward-agent", NULL, "let the call use the daemon's ssh-agent (unprivileged; a human decides, or a grant)" }, \
	{ "--host", "NAME", "send the call to NAME's daemon over ssh (default: this host)" }, \
	{ "--id", "ID", "the request id (default: a fresh UUIDv4)" }
/* clang-format on */

static const struct cg_cli_opt run_opts[] = {
	REQUEST_OPTS,
	{ "--json", NULL,
	  "print the response as one JSON line, not the output (stdout, stderr base64)" },
	{ 0 },
};

static const struct cg_cli_opt gate_opts[] = {
	REQUEST_OPTS,
	{ "--actions", "FILE|JSON",
	  "decide abstract actions: a JSON array, inline or in FILE (- stdin)" },
	{ "--json", NULL, "print the response as one JSON line" },
	{ 0 },
};

static const struct cg_cli_opt ping_opts[] = {
	{ "--json", NULL, "print the response as one JSON line" },
	{ 0 },
};

#define RUN_USAGE "callgate run [OPTIONS] [--] CMD [ARG]... ['|' CMD [ARG]...]..."
#define RUN_ABOUT                                                                                  \
	"Run a pipeline through the gate: the daemon decides, default-deny, and runs\n"            \
	"what its policy allows, confined, in the current directory (or --cwd). A\n"               \
	"literal '|' argument separates stages; no shell is involved. The last\n"                  \
	"stage's stdout and every stage's stderr are passed on, and the exit status\n"             \
	"is the last stage's. The command's stdin is /dev/null: the protocol carries\n"            \
	"no input, so pass data in a file. Output arrives when the command ends;\n"                \
	"give a long one --timeout (default 30 s in the default policy). A refusal prints\n"       \
	"'callgate run: CODE: message (trace ID)'\n"                                               \
	"and exits 65 (invalid), 69 (no daemon), 70 (error), 77 (denied) or 124\n"                 \
	"(deadline)."
#define GATE_USAGE                                                                                 \
	"callgate gate [OPTIONS] [--] CMD [ARG]... ['|' CMD [ARG]...]...\n"                        \
	"       callgate gate [OPTIONS] --actions FILE|JSON"
#define GATE_ABOUT                                                                                 \
	"Decide without running anything: print the decision (ALLOW, DEGRADE,\n"                   \
	"UNKNOWN, BLOCK), the rule, each adjudicator's verdict, the constraints and\n"             \
	"the trace id. Exits 0 when the call would run (ALLOW, DEGRADE, or an\n"                   \
	"UNKNOWN an open grant covers), 75 when a human would decide (UNKNOWN), 77\n"              \
	"when it would be refused (BLOCK, or an UNKNOWN on a daemon with approval\n"               \
	"off and no grant for it)."

/*
 * --help among run's or gate's options, not in the pipeline: "run ls --help"
 * runs ls --help, so the scan stops at the first word that is not an option
 * (or an option's value), as parse_opts does.
 */
static bool wants_help(int argc, char **argv, const struct cg_cli_opt *opts)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0 || a[0] != '-')
			return false;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			return true;
		for (const struct cg_cli_opt *o = opts; o->name; o++)
			if (o->arg && strcmp(a, o->name) == 0)
				i++; /* its value, whatever it looks like */
	}
	return false;
}

/* Shared request-building options of run and gate. */
struct req_opts {
	json_t *req;
	bool json;
	const char *actions_file;
	const char *cwd; /* --cwd as given */
	int64_t timeout_ms;
};

/*
 * The host the call is for (--host of the command, else callgate's global
 * --host) goes into the request, where the client routes on it. A call for
 * another machine takes no working directory from this one: it runs where
 * that daemon's policy puts it, or in --cwd, which must then be absolute
 * (a path of that machine). 0, or -1 after saying why.
 */
static int set_host_and_cwd(const struct cg_cli *g, const char *sub, struct req_opts *o)
{
	if (!json_object_get(o->req, "host") && g->host && *g->host) {
		json_t *s = json_string(g->host);
		if (!s) {
			fprintf(stderr, "callgate %s: --host must be UTF-8\n", sub);
			return -1;
		}
		json_object_set_new(o->req, "host", s);
	}
	if (!cg_client_host_is_remote(json_string_value(json_object_get(o->req, "host"))))
		return set_cwd(sub, o->req, o->cwd);
	if (!o->cwd)
		return 0;
	json_t *s = o->cwd[0] == '/' ? json_string(o->cwd) : NULL;
	if (!s) {
		fprintf(stderr,
			"callgate %s: --cwd for another host must be an absolute UTF-8 path\n",
			sub);
		return -1;
	}
	json_object_set_new(o->req, "cwd", s);
	return 0;
}

/*
 * Parse options up to "--" (or the first non-option). Returns the index of
 * the first pipeline word, or -1 after printing a usage error. When --cwd is
 * not given, the caller's working directory is sent: a call made from
 * work/sub runs in work/sub, as it would in the user's shell (and is refused
 * by the daemon when that is outside every workspace).
 */
static int parse_opts(const struct cg_cli *g, int argc, char **argv, struct req_opts *o,
		      const struct cg_cli_opt *opts)
{
	const char *sub = argv[0];
	json_t *env = NULL;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-')
			break;
		const struct cg_cli_opt *opt = cg_cli_opt_take(sub, opts, argc, argv, &i, &v);
		if (!opt)
			return -1;
		const char *name = opt->name;
		if (strcmp(name, "--json") == 0) {
			o->json = true;
		} else if (strcmp(name, "--forward-agent") == 0) {
			json_object_set_new(o->req, "forward_agent", json_true());
		} else if (strcmp(name, "--privileged") == 0 ||
			   strcmp(name, "--no-privileged") == 0) {
			json_object_set_new(o->req, "privileged", json_boolean(name[2] == 'p'));
		} else if (strcmp(name, "--reason") == 0 || strcmp(name, "--session") == 0 ||
			   strcmp(name, "--host") == 0 || strcmp(name, "--id") == 0) {
			json_t *s = json_string(v);
			if (!s) {
				fprintf(stderr, "callgate %s: %s must be UTF-8\n", sub, name);
				return -1;
			}
			json_object_set_new(o->req, name + 2, s);
		} else if (strcmp(name, "--cwd") == 0) {
			o->cwd = v;
		} else if (strcmp(name, "--env") == 0) {
			const char *eq = strchr(v, '=');
			if (!eq || eq == v) {
				fprintf(stderr, "callgate %s: --env needs NAME=VALUE, got '%s'\n",
					sub, v);
				return -1;
			}
			if (!env) {
				env = json_object();
				json_object_set_new(o->req, "env", env);
			}
			char name_buf[256];
			size_t nl = (size_t)(eq - v);
			if (nl >= sizeof(name_buf)) {
				fprintf(stderr, "callgate %s: --env name too long\n", sub);
				return -1;
			}
			memcpy(name_buf, v, nl);
			name_buf[nl] = '\0';
			if (json_object_set_new(env, name_buf, json_string(eq + 1)) != 0) {
				/* Never drop it: the command would run without the variable. */
				fprintf(stderr, "callgate %s: --env must be UTF-8\n", sub);
				return -1;
			}
		} else if (strcmp(name, "--timeout") == 0) {
			/* Milliseconds, or a duration with its unit (5s, 2m, 1h), as --ttl takes. */
			int64_t ms;
			/* The range is the daemon's to judge (VAL-I-016); only overflow is ours. */
			if (cg_parse_duration_ms(v, 1, true, INT64_MAX, &ms) != 0) {
				fprintf(stderr,
					"callgate %s: --timeout needs milliseconds > 0, or a "
					"duration such as 30s, 5m or 1h\n",
					sub);
				return -1;
			}
			/* "--timeout 30" meant seconds (ux-s40 L5): a bare number that small needs its unit. */
			if (ms < 100 && v[strspn(v, "0123456789")] == '\0') {
				fprintf(
				    stderr,
				    "callgate %s: --timeout %s is %s milliseconds; write %ss for "
				    "seconds, or %sms if you mean milliseconds\n",
				    sub, v, v, v, v);
				return -1;
			}
			o->timeout_ms = ms;
			json_object_set_new(o->req, "timeout_ms", json_integer(ms));
		} else if (strcmp(name, "--actions") == 0) {
			o->actions_file = v;
		}
	}
	if (!json_object_get(o->req, "privileged") && cg_cli_privileged_from_env(sub, o->req) < 0)
		return -1;
	if (set_host_and_cwd(g, sub, o) < 0)
		return -1;
	return i;
}

/*
 * Data piped into callgate run would be lost without a word: the command's
 * stdin is /dev/null. Say so when input is waiting (a pipe or socket with
 * bytes to read, a non-empty file); an idle or closed stdin says nothing.
 */
static void stdin_note(void)
{
	struct stat st;
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	if (fstat(STDIN_FILENO, &st) != 0)
		return;
	bool waiting = (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))
			   ? poll(&p, 1, 0) == 1 && (p.revents & POLLIN)
			   : S_ISREG(st.st_mode) && st.st_size > 0;
	if (waiting)
		fprintf(stderr, "callgate run: standard input is not passed on (the command "
				"reads /dev/null); pass data in a file\n");
}

/*
 * A call with no answer after a few seconds says why it may be waiting,
 * once, on stderr: a person must approve it (or a rule deferred it), and
 * how to find it and withdraw it. Off a terminal too (ux-s39: an agent's
 * call sat a minute in silence); not with --json.
 */
struct wait_note {
	char id[64];
	bool said;
	const char *socket; /* asked whether a person could be holding it */
};

static void wait_tick(void *arg)
{
	struct wait_note *n = arg;
	if (n->said)
		return;
	n->said = true;
	/*
	 * A daemon without approval holds no call for a person: the long
	 * build's output then said approvals existed (ux-s42e L1).
	 */
	json_t *ping = json_pack("{s:s}", "action", "ping"), *pong = NULL;
	char err[256];
	bool nobody = ping && cg_client_call(n->socket, ping, 2000, &pong, err, sizeof(err)) == 0 &&
		      json_is_false(json_object_get(
			  json_object_get(json_object_get(pong, "reply"), "data"), "approval"));
	json_decref(ping);
	json_decref(pong);
	if (nobody) {
		fprintf(stderr, "callgate run: no answer yet: the command is still running "
				"(Ctrl-C withdraws it; run --timeout sets its deadline)\n");
		return;
	}
	fprintf(stderr,
		"callgate run: no answer yet: the command may still be running, or the call "
		"may be waiting for a person to approve it ('callgate pending' lists it under "
		"'request id %s'; a person answers it by its trace id there); Ctrl-C withdraws "
		"it\n",
		n->id);
}

/*
 * The call's output as the response carries it: stdout, then each stage's
 * stderr, with a line for each stream cut at the runner's cap. Also for a
 * call killed at its deadline or cancelled (ux-s43c H2: what a hung test
 * printed before it hung was dropped). 0, or -1 when some was lost.
 */
static int write_output(const json_t *resp)
{
	const json_t *stages = json_object_get(resp, "stages");
	size_t n = json_array_size(stages);
	bool lost = false;
	if (write_b64(json_object_get(resp, "stdout"), stdout) < 0) {
		fprintf(stderr, "callgate run: stdout could not be decoded or written\n");
		lost = true;
	}
	if (fflush(stdout) != 0)
		lost = true;
	for (size_t i = 0; i < n; i++) {
		const json_t *st = json_array_get(stages, i);
		if (write_b64(json_object_get(st, "stderr"), stderr) < 0) {
			fprintf(stderr, "callgate run: stage %zu stderr could not be decoded\n",
				i + 1);
			lost = true;
		}
		if (json_is_true(json_object_get(st, "stderr_truncated")))
			fprintf(stderr,
				"callgate run: stage %zu's stderr was cut at the runner's "
				"cap (16 MiB a stream, 64 MiB a call; docs/limits.md): "
				"what came after was dropped\n",
				i + 1);
	}
	/* ux-s41 L4: an exit code of 0 over output that is not whole. */
	if (json_is_true(json_object_get(resp, "stdout_truncated")))
		fprintf(stderr, "callgate run: stdout was cut at the runner's cap (16 MiB a "
				"stream, 64 MiB a call; docs/limits.md): what came after was "
				"dropped, whatever the exit code says; write large output to a "
				"file in the workspace and read it in parts\n");
	return lost ? -1 : 0;
}

int cg_cli_run(const struct cg_cli *g, int argc, char **argv)
{
	int ret = CG_EXIT_USAGE;
	struct req_opts o = { 0 };
	json_t *resp = NULL;
	if (wants_help(argc, argv, run_opts))
		return cg_cli_help(RUN_USAGE, RUN_ABOUT, run_opts);
	o.req = json_object();
	if (!o.req)
		return CG_EXIT_ERROR;
	int first = parse_opts(g, argc, argv, &o, run_opts);
	if (first < 0)
		goto usage;
	if (json_is_true(json_object_get(o.req, "forward_agent")) &&
	    !json_is_false(json_object_get(o.req, "privileged"))) {
		fprintf(stderr, "callgate run: --forward-agent needs --no-privileged (the agent "
				"is lent to unprivileged calls only)\n");
		goto usage;
	}
	json_t *pipe = cg_cli_pipeline(argc - first, argv + first);
	if (!pipe) {
		fprintf(stderr, "callgate run: need a command: run [OPTIONS] -- CMD ARGS [| CMD "
				"ARGS]... (no empty stage; arguments must be UTF-8; see 'callgate "
				"run --help')\n");
		goto usage;
	}
	json_object_set_new(o.req, "pipeline", pipe);
	stdin_note();
	struct wait_note note = { .said = false, .socket = g->socket_path };
	if (!json_object_get(o.req, "id") && cg_uuid4(note.id, sizeof(note.id)) == 0)
		json_object_set_new(o.req, "id", json_string(note.id));
	const char *rid = json_string_value(json_object_get(o.req, "id"));
	snprintf(note.id, sizeof(note.id), "%s", rid ? rid : "?");
	struct cg_client_wait w = { .cancel_fd = -1,
				    .tick = !o.json ? wait_tick : NULL,
				    .tick_arg = &note,
				    .tick_ms = 3000 };
	char err[512];
	/* No client deadline: approval may take a human's time. */
	if (cg_client_call_wait(g->socket_path, o.req, 0, &w, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(g, "run", err, o.json);
		goto release;
	}
	if (o.json) {
		print_json(resp);
		fflush(stdout);
	}
	const char *status = json_string_value(json_object_get(resp, "status"));
	if (!status || strcmp(status, "ok") != 0) {
		if (!o.json && json_is_array(json_object_get(resp, "stages")))
			(void)write_output(resp); /* what ran before the deadline or the cancel */
		ret = o.json ? cg_client_exit_code(resp) : cg_cli_print_refusal("run", resp);
		if (!o.json)
			set_aside_note(resp);
		if (!o.json) {
			privileged_hint(o.req, resp);
			shell_hint(o.req, resp);
		}
		goto release;
	}
	const json_t *stages = json_object_get(resp, "stages");
	size_t n = json_array_size(stages);
	if (!json_is_array(stages) || n == 0) {
		fprintf(stderr, "callgate run: the response has no stages\n");
		ret = CG_EXIT_ERROR;
		goto release;
	}
	bool lost = false; /* output the user did not get: not the command's exit code */
	if (!o.json) {
		/* Through the hook, this process is the harness that says so to the model. */
		const json_t *screening = json_object_get(
		    json_object_get(json_object_get(resp, "reply"), "data"), "screening");
		if (json_is_true(json_object_get(screening, "quarantined"))) {
			fprintf(stderr, "callgate run: %s\n", CG_CLI_QUARANTINE_NOTE);
			fflush(stderr);
		}
		/*
		 * Said, so that an agent editing a file from this output does not
		 * write the placeholder back (ux-s39 L8: redaction was silent).
		 */
		json_int_t redacted = json_integer_value(json_object_get(screening, "redacted"));
		if (redacted > 0) {
			fprintf(
			    stderr,
			    "callgate run: %lld secret%s in the output shown as [REDACTED:kind]; "
			    "the files it came from are unchanged\n",
			    (long long)redacted, redacted == 1 ? "" : "s");
			fflush(stderr);
		}
		lost = write_output(resp) != 0;
		char *hint = cg_cli_stage_hint(resp, json_object_get(o.req, "pipeline"));
		if (hint)
			fprintf(stderr, "callgate run: %s\n", hint);
		free(hint);
		/* Something the call made was set aside after it: say so, after its output. */
		const json_t *reply = json_object_get(resp, "reply");
		const char *rcode = json_string_value(json_object_get(reply, "code"));
		if (rcode && strcmp(rcode, "MCP-EXEC-S-002") == 0) {
			char *m = cg_sanitize_for_terminal(
			    json_string_value(json_object_get(reply, "message")));
			fprintf(stderr, "callgate run: %s: %s\n", rcode, m ? m : "");
			free(m);
		} else {
			set_aside_note(resp);
		}
	}
	json_t *ec = json_object_get(json_array_get(stages, n - 1), "exit_code");
	if (!json_is_integer(ec)) {
		fprintf(stderr, "callgate run: the response has no exit code\n");
		ret = CG_EXIT_ERROR;
		goto release;
	}
	json_int_t code = json_integer_value(ec);
	ret = lost ? CG_EXIT_ERROR : code >= 0 && code <= 255 ? (int)code : CG_EXIT_ERROR;
	goto release;
usage:
	ret = CG_EXIT_USAGE;
release:
	json_decref(resp);
	json_decref(o.req);
	return ret;
}

int cg_cli_ping(const struct cg_cli *g, int argc, char **argv)
{
	bool as_json = false;
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate ping [--json]",
		    "Check that the daemon answers on its socket; prints its version.", ping_opts);
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-') {
			fprintf(stderr,
				"callgate ping: unexpected argument '%s' (see 'callgate ping "
				"--help')\n",
				argv[i]);
			return CG_EXIT_USAGE;
		}
		if (!cg_cli_opt_take("ping", ping_opts, argc, argv, &i, &v))
			return CG_EXIT_USAGE;
		as_json = true; /* --json is ping's only option */
	}
	json_t *req = json_pack("{s:s}", "action", "ping");
	json_t *resp = NULL;
	char err[512];
	int ret;
	if (!req)
		return CG_EXIT_ERROR;
	if (g->host && *g->host)
		json_object_set_new(req, "host", json_string(g->host));
	if (cg_client_call(g->socket_path, req, QUICK_TIMEOUT_MS, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(g, "ping", err, as_json);
		goto release;
	}
	if (as_json)
		print_json(resp);
	ret = cg_client_exit_code(resp);
	if (ret != CG_EXIT_OK) {
		if (!as_json)
			(void)cg_cli_print_refusal("ping", resp);
		goto release;
	}
	if (!as_json) {
		const json_t *r = json_object_get(resp, "reply");
		const char *msg = json_string_value(json_object_get(r, "message"));
		printf("%s\n", msg ? msg : "callgate is alive.");
		/* Which policy is in force: what one wants to see after a reload. */
		const json_t *pol = json_object_get(json_object_get(r, "data"), "policy");
		const char *src = json_string_value(json_object_get(pol, "source"));
		const char *sha = json_string_value(json_object_get(pol, "sha256"));
		if (src && sha)
			printf("policy %s (sha256 %.16s…, generation %lld)\n", src, sha,
			       (long long)json_integer_value(json_object_get(pol, "generation")));
		/* An edit that did not load must not look live (s36 walk). */
		const json_t *fail = json_object_get(json_object_get(r, "data"), "reload_failed");
		if (fail) {
			printf("LAST RELOAD FAILED at %s, the policy above stays in force: %s ",
			       json_string_value(json_object_get(fail, "at")),
			       json_string_value(json_object_get(fail, "code")));
			cg_cli_print_value(stdout, json_object_get(fail, "message"));
			printf("\n");
		}
	}
release:
	json_decref(resp);
	json_decref(req);
	return ret;
}

/* Print the comma-separated rule ids of the rungs that decided something. */
static void print_rules(const json_t *data)
{
	const json_t *rungs = json_object_get(data, "rungs");
	const char *main_rule = json_string_value(json_object_get(data, "rule_id"));
	printf("rule:        %s\n", main_rule && *main_rule ? main_rule : "-");
	/* The deciding rung's reply code and why, as policy explain shows them. */
	json_t *reason = json_object_get(data, "reason"), *why = json_object_get(data, "why");
	if (json_is_string(reason)) {
		printf("reason:      ");
		cg_cli_print_value(stdout, reason);
		putchar('\n');
	}
	if (json_is_string(why) && *json_string_value(why)) {
		printf("why:         ");
		cg_cli_print_value(stdout, why);
		putchar('\n');
	}
	size_t i;
	const json_t *r;
	bool any = false;
	json_array_foreach(rungs, i, r)
	{
		const char *id = json_string_value(json_object_get(r, "rule_id"));
		const char *rung = json_string_value(json_object_get(r, "rung"));
		const char *dec = json_string_value(json_object_get(r, "decision"));
		printf("%s %s=%s (%s)", any ? "," : "rungs:      ", rung ? rung : "?",
		       dec ? dec : "?", id ? id : "-");
		any = true;
	}
	if (any)
		printf("\n");
}

/* An UNKNOWN's exit: 0 under an open grant, 77 with nobody to ask, else 75 (a person decides). */
static int unknown_exit(const json_t *ap)
{
	if (json_object_get(ap, "refused"))
		return CG_EXIT_INVALID; /* what run exits with for that I reply */
	if (json_object_get(ap, "grant"))
		return CG_EXIT_OK;
	if (ap && !json_is_true(json_object_get(ap, "enabled")))
		return CG_EXIT_DENIED;
	return CG_EXIT_DEFERRED;
}

int cg_cli_gate(const struct cg_cli *g, int argc, char **argv)
{
	int ret = CG_EXIT_USAGE;
	struct req_opts o = { 0 };
	json_t *resp = NULL;
	if (wants_help(argc, argv, gate_opts))
		return cg_cli_help(GATE_USAGE, GATE_ABOUT, gate_opts);
	o.req = json_pack("{s:s}", "action", "gate");
	if (!o.req)
		return CG_EXIT_ERROR;
	int first = parse_opts(g, argc, argv, &o, gate_opts);
	if (first < 0)
		goto usage;
	if (o.actions_file) {
		char why[256];
		json_t *acts = cg_cli_actions(o.actions_file, why, sizeof(why));
		if (!acts) {
			fprintf(stderr, "callgate gate: %s\n", why);
			goto usage;
		}
		json_object_set_new(o.req, "actions", acts);
	}
	if (first < argc) {
		json_t *pipe = cg_cli_pipeline(argc - first, argv + first);
		if (!pipe) {
			fprintf(stderr, "callgate gate: bad pipeline (empty stage or not UTF-8)\n");
			goto usage;
		}
		json_object_set_new(o.req, "pipeline", pipe);
	} else if (!o.actions_file) {
		fprintf(stderr, "callgate gate: need a command or --actions FILE|JSON (see "
				"'callgate gate --help')\n");
		goto usage;
	}
	char err[512];
	if (cg_client_call(g->socket_path, o.req, QUICK_TIMEOUT_MS, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(g, "gate", err, o.json);
		goto release;
	}
	const json_t *r = json_object_get(resp, "reply");
	const json_t *data = json_object_get(r, "data");
	const char *decision = json_string_value(json_object_get(data, "decision"));
	if (!decision)
		decision =
		    json_string_value(json_object_get(json_object_get(r, "params"), "decision"));
	if (o.json)
		print_json(resp);
	const char *status = json_string_value(json_object_get(resp, "status"));
	if (!decision || !status || strcmp(status, "ok") != 0) {
		ret = o.json ? cg_client_exit_code(resp) : cg_cli_print_refusal("gate", resp);
		if (ret == CG_EXIT_OK)
			ret = CG_EXIT_ERROR; /* no decision is not a pass */
		goto release;
	}
	if (!o.json) {
		const char *trace = json_string_value(json_object_get(r, "trace_id"));
		printf("decision:    %s\n", decision);
		print_rules(data);
		json_t *names = json_array(), *stage;
		size_t si;
		json_array_foreach(json_object_get(o.req, "pipeline"), si, stage)
		    json_array_append(names, json_array_get(stage, 0));
		/* The protocol's default is privileged (docs/protocol.md). */
		bool priv = !json_is_false(json_object_get(o.req, "privileged"));
		printf("constraints:");
		cg_cli_print_constraints(stdout, "            ",
					 json_object_get(data, "constraints"),
					 json_object_get(data, "stage_sets"), names, priv);
		json_decref(names);
		if (strcmp(decision, "UNKNOWN") == 0) {
			char *next = cg_cli_gate_next(json_object_get(data, "approval"));
			if (next)
				printf("next:        %s\n", next);
			free(next);
		}
		printf("trace:       %s\n", trace ? trace : "-");
	}
	/* As a check mode: exit 0 only when the call would run (doas -C style). */
	ret = strcmp(decision, "ALLOW") == 0 || strcmp(decision, "DEGRADE") == 0 ? CG_EXIT_OK
	      : strcmp(decision, "UNKNOWN") == 0 ? unknown_exit(json_object_get(data, "approval"))
						 : CG_EXIT_DENIED;
	goto release;
usage:
	ret = CG_EXIT_USAGE;
release:
	json_decref(resp);
	json_decref(o.req);
	return ret;
}
