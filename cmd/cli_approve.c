/* SPDX-License-Identifier: MIT */
/*
 * cli_approve — the human side: `callgate approve` (a terminal UI on
 * /dev/tty), `pending`, `approve ID`, `deny ID`, and `grant open|list|close`,
 * all over the owner-only admin socket.
 *
 * MUST: show every string sanitised (control, ANSI escape, zero-width, bidi
 *       made visible), so an agent cannot make the approver see something
 *       other than what will run.
 * MUST: bind each answer to the request hash that was displayed; flush
 *       typeahead before every prompt so a key pressed earlier (or injected
 *       by a pasted string) cannot answer a request not yet shown.
 * MUST: treat any key but y/g as a denial; Ctrl-C leaves without answering
 *       (the call stays pending and is refused at its deadline).
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "approval.h"
#include "cli.h"
#include "util.h"

/* The admin socket: explicit, or admin.sock beside the agent socket. */
static const char *admin_path(const struct cg_cli *g, char *buf, size_t len)
{
	if (g->admin_socket_path)
		return g->admin_socket_path;
	char copy[PATH_MAX];
	snprintf(copy, sizeof(copy), "%s", g->socket_path);
	snprintf(buf, len, "%s/admin.sock", dirname(copy));
	return buf;
}

/* One admin round trip. Returns the response (caller decrefs) or NULL after printing why. */
static json_t *admin_call(const struct cg_cli *g, json_t *req)
{
	char buf[PATH_MAX + 16], err[256] = "";
	json_t *resp = NULL;
	if (cg_client_call(admin_path(g, buf, sizeof(buf)), req, 10000, &resp, err, sizeof(err)) !=
	    0) {
		fprintf(stderr, "callgate: cannot reach the admin socket %s: %s\n",
			admin_path(g, buf, sizeof(buf)), err[0] ? err : strerror(errno));
		return NULL;
	}
	return resp;
}

static const json_t *reply_of(const json_t *resp)
{
	return json_object_get(resp, "reply");
}

/* Print the reply line of a response; return the exit code it maps to. */
static int report(const json_t *resp, bool json)
{
	const json_t *r = reply_of(resp);
	if (json) {
		char *s = json_dumps(resp, JSON_COMPACT);
		if (s)
			puts(s);
		free(s);
	} else {
		char *m =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(r, "message")));
		fprintf(stderr, "callgate: %s %s: %s\n",
			json_string_value(json_object_get(r, "type")),
			json_string_value(json_object_get(r, "code")), m ? m : "");
		free(m);
	}
	const char *type = json_string_value(json_object_get(r, "type"));
	return type && strcmp(type, "S") == 0 ? CG_EXIT_OK : cg_client_exit_code(resp);
}

static json_t *fetch_pending(const struct cg_cli *g)
{
	json_t *req = json_pack("{s:s}", "action", "pending");
	json_t *resp = admin_call(g, req);
	json_decref(req);
	return resp;
}

static const json_t *pending_list(const json_t *resp)
{
	return json_object_get(json_object_get(reply_of(resp), "data"), "pending");
}

/* Find a pending call by trace id or request id (exact). Borrowed reference. */
static const json_t *find_pending(const json_t *list, const char *id)
{
	size_t i;
	const json_t *p;
	json_array_foreach(list, i, p)
	{
		const char *t = json_string_value(json_object_get(p, "trace_id"));
		const char *r = json_string_value(json_object_get(p, "id"));
		if ((t && strcmp(t, id) == 0) || (r && strcmp(r, id) == 0))
			return p;
	}
	return NULL;
}

static void put_field(FILE *f, const char *label, const char *value)
{
	char *s = cg_sanitize_for_terminal(value ? value : "");
	fprintf(f, "  %-12s %s\r\n", label, s ? s : "?");
	free(s);
}

/* Render one pending call for a human. Every string goes through the sanitiser. */
static void show_pending(FILE *f, const json_t *p, size_t waiting)
{
	char line[512];
	const json_t *peer = json_object_get(p, "peer");
	fprintf(f, "\r\n  \033[1mcallgate: a call is waiting for your decision\033[0m\r\n\r\n");
	put_field(f, "trace", json_string_value(json_object_get(p, "trace_id")));
	put_field(f, "request id", json_string_value(json_object_get(p, "id")));
	snprintf(line, sizeof(line), "%s @ %s", json_string_value(json_object_get(p, "session")),
		 json_string_value(json_object_get(p, "host")));
	put_field(f, "session", line);
	snprintf(line, sizeof(line), "uid %lld  gid %lld  pid %lld  exe %s",
		 (long long)json_integer_value(json_object_get(peer, "uid")),
		 (long long)json_integer_value(json_object_get(peer, "gid")),
		 (long long)json_integer_value(json_object_get(peer, "pid")),
		 json_string_value(json_object_get(peer, "exe")));
	put_field(f, "peer", line);
	put_field(f, "time", json_string_value(json_object_get(p, "time")));
	put_field(f, "reason", json_string_value(json_object_get(p, "reason")));
	/* Say what the approval changes: a privileged call leaves every confinement. */
	put_field(f, "privileged",
		  json_is_true(json_object_get(p, "privileged"))
		      ? "YES - runs as root, UNCONFINED (no view, no Landlock, no seccomp)"
		      : "no - runs in its view (read-only root, no capabilities)");
	put_field(f, "cwd", json_string_value(json_object_get(p, "cwd")));
	size_t i;
	const json_t *st;
	json_array_foreach(json_object_get(p, "pipeline"), i, st)
	{
		char argv[2048] = "";
		size_t o = 0, k;
		const json_t *a;
		json_array_foreach(json_object_get(st, "argv"), k, a)
		{
			int n = snprintf(argv + o, sizeof(argv) - o, "%s[%s]", k ? " " : "",
					 json_string_value(a));
			if (n < 0 || (size_t)n >= sizeof(argv) - o)
				break;
			o += (size_t)n;
		}
		snprintf(line, sizeof(line), "stage %zu", i + 1);
		put_field(f, line, argv);
		const char *exe = json_string_value(json_object_get(st, "exe"));
		const char *found = json_string_value(json_object_get(st, "found"));
		char runs[1024];
		if (json_is_true(json_object_get(st, "via_symlink")))
			snprintf(runs, sizeof(runs), "%s  (via %s)", exe, found);
		else
			snprintf(runs, sizeof(runs), "%s", exe);
		put_field(f, "  runs", runs);
	}
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)json_object_get(p, "env"), key, v)
	{
		snprintf(line, sizeof(line), "%s=%s", key, json_string_value(v));
		put_field(f, "env", line);
	}
	const json_t *grant = json_object_get(p, "grant");
	if (grant) {
		/* The agent asks for a grant: what it would let run, unprompted, for how long. */
		char *g = json_dumps(grant, JSON_COMPACT | JSON_SORT_KEYS);
		put_field(f, "ASKS GRANT", g);
		free(g);
	}
	char *cons = json_dumps(json_object_get(p, "constraints"), JSON_COMPACT);
	put_field(f, "constraints", cons);
	free(cons);
	snprintf(line, sizeof(line), "%s (%s, rung %s)",
		 json_string_value(json_object_get(p, "rule_id")),
		 json_string_value(json_object_get(p, "code")),
		 json_string_value(json_object_get(p, "rung")));
	put_field(f, "sent by rule", line);
	snprintf(line, sizeof(line), "%lld of %lld distinct approvers; %lld s left",
		 (long long)json_array_size(json_object_get(p, "approved_by")),
		 (long long)json_integer_value(json_object_get(p, "approvers_needed")),
		 (long long)json_integer_value(json_object_get(p, "deadline_ms_left")) / 1000);
	put_field(f, "approval", line);
	snprintf(line, sizeof(line), "%zu more waiting", waiting ? waiting - 1 : 0);
	put_field(f, "queue", line);
	if (grant)
		fprintf(f,
			"\r\n  [y] open this grant   [any other key] deny   (Ctrl-C leaves)\r\n");
	else
		fprintf(f, "\r\n  [y] approve once   [g] grant this shape   [any other key] deny   "
			   "(Ctrl-C leaves)\r\n");
	fflush(f);
}

static json_t *answer(const struct cg_cli *g, const char *action, const json_t *p, const char *why,
		      int64_t grant_uses, int64_t grant_ttl)
{
	json_t *req =
	    json_pack("{s:s,s:O,s:O}", "action", action, "trace_id", json_object_get(p, "trace_id"),
		      "request_sha256", json_object_get(p, "request_sha256"));
	if (why)
		json_object_set_new(req, "why", json_string(why));
	if (strcmp(action, "grant_open") == 0) {
		/* The grant is this request's exact shape: same exes, argv, session, uid. */
		json_t *pipe = json_array();
		size_t i;
		const json_t *st;
		json_array_foreach(json_object_get(p, "pipeline"), i, st) json_array_append_new(
		    pipe, json_pack("{s:O,s:O}", "exe", json_object_get(st, "exe"), "argv",
				    json_object_get(st, "argv")));
		json_object_set_new(req, "grant",
				    json_pack("{s:o,s:O,s:O,s:I,s:I}", "pipeline", pipe, "session",
					      json_object_get(p, "session"), "uid",
					      json_object_get(json_object_get(p, "peer"), "uid"),
					      "uses", (json_int_t)grant_uses, "ttl_s",
					      (json_int_t)grant_ttl));
	}
	json_t *resp = admin_call(g, req);
	json_decref(req);
	return resp;
}

/* ---- the terminal UI --------------------------------------------------------- */

static struct termios saved_tio;
static int tty_fd = -1;
static volatile sig_atomic_t interrupted;

static void restore_tty(void)
{
	if (tty_fd >= 0)
		tcsetattr(tty_fd, TCSAFLUSH, &saved_tio);
}

static void on_signal(int sig)
{
	interrupted = sig;
}

/* Wait up to ms for one key. Returns the byte, 0 on timeout, -1 on error/EOF. */
static int read_key(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);
	if (n <= 0)
		return n == 0 ? 0 : (errno == EINTR ? 0 : -1);
	unsigned char c;
	ssize_t r = read(fd, &c, 1);
	if (r != 1)
		return -1;
	return c;
}

static int tui(const struct cg_cli *g, int64_t grant_uses, int64_t grant_ttl)
{
	tty_fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (tty_fd < 0) {
		fprintf(stderr,
			"callgate: approve needs a terminal (/dev/tty): %s; "
			"use `callgate pending` and `callgate approve ID` instead\n",
			strerror(errno));
		return CG_EXIT_USAGE;
	}
	FILE *tty = fdopen(dup(tty_fd), "w");
	if (!tty || tcgetattr(tty_fd, &saved_tio) != 0) {
		fprintf(stderr, "callgate: cannot use the terminal: %s\n", strerror(errno));
		return CG_EXIT_ERROR;
	}
	struct termios raw = saved_tio;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG | IEXTEN);
	raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	atexit(restore_tty);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (tcsetattr(tty_fd, TCSAFLUSH, &raw) != 0) {
		fprintf(stderr, "callgate: cannot set raw mode: %s\n", strerror(errno));
		return CG_EXIT_ERROR;
	}

	char shown[80] = "";
	int rc = CG_EXIT_OK;
	while (!interrupted) {
		json_t *resp = fetch_pending(g);
		if (!resp) {
			rc = CG_EXIT_UNAVAILABLE;
			break;
		}
		const json_t *list = pending_list(resp);
		const json_t *head = json_array_get(list, 0);
		if (!head) {
			if (strcmp(shown, "-") != 0) {
				fprintf(tty, "\033[2J\033[H\r\n  callgate: no calls are waiting. "
					     "(q quits)\r\n");
				fflush(tty);
				snprintf(shown, sizeof(shown), "-");
			}
			json_decref(resp);
			int c = read_key(tty_fd, 1000);
			if (c == 'q' || c == 3 || c < 0)
				break;
			continue;
		}
		const char *sha = json_string_value(json_object_get(head, "request_sha256"));
		if (strcmp(shown, sha ? sha : "") != 0) {
			fprintf(tty, "\033[2J\033[H");
			show_pending(tty, head, json_array_size(list));
			snprintf(shown, sizeof(shown), "%s", sha ? sha : "");
			/* Keys typed before this request was on screen must not answer it. */
			tcflush(tty_fd, TCIFLUSH);
		}
		int c = read_key(tty_fd, 1000);
		if (c == 0) {
			json_decref(resp);
			continue; /* refresh: it may have been answered elsewhere or timed out */
		}
		if (c == 3 || c < 0) {
			json_decref(resp);
			break; /* leave without answering: the call stays pending */
		}
		/* A grant request is answered y (open it) or not at all: no `g` on a grant. */
		bool asks_grant = json_object_get(head, "grant") != NULL;
		json_t *ans = c == 'y' ? answer(g, "approve", head, NULL, 0, 0)
			      : c == 'g' && !asks_grant
				  ? answer(g, "grant_open", head, NULL, grant_uses, grant_ttl)
				  : answer(g, "deny", head, "denied at the terminal", 0, 0);
		const json_t *r = reply_of(ans);
		char *m =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(r, "message")));
		fprintf(tty, "\r\n  -> %s %s: %s\r\n",
			json_string_value(json_object_get(r, "type")),
			json_string_value(json_object_get(r, "code")), m ? m : "");
		fflush(tty);
		free(m);
		json_decref(ans);
		json_decref(resp);
		shown[0] = '\0';
		sleep(1);
	}
	restore_tty();
	fclose(tty);
	close(tty_fd);
	tty_fd = -1;
	return rc;
}

/* ---- non-interactive commands ------------------------------------------------ */

static int cmd_pending(const struct cg_cli *g, bool json)
{
	json_t *resp = fetch_pending(g);
	if (!resp)
		return CG_EXIT_UNAVAILABLE;
	const json_t *list = pending_list(resp);
	if (json) {
		char *s = json_dumps(resp, JSON_COMPACT);
		puts(s ? s : "{}");
		free(s);
	} else if (json_array_size(list) == 0) {
		puts("no calls are waiting");
	} else {
		size_t i;
		const json_t *p;
		json_array_foreach(list, i, p)
		{
			char *t = cg_sanitize_for_terminal(
			    json_string_value(json_object_get(p, "trace_id")));
			char *r = cg_sanitize_for_terminal(
			    json_string_value(json_object_get(p, "reason")));
			char *cmd = json_dumps(json_object_get(p, "pipeline"), JSON_COMPACT);
			char *c = cg_sanitize_for_terminal(cmd);
			printf(
			    "%s  %s  rule=%s  left=%llds\n    %s\n", t, r,
			    json_string_value(json_object_get(p, "rule_id")),
			    (long long)json_integer_value(json_object_get(p, "deadline_ms_left")) /
				1000,
			    c);
			free(t);
			free(r);
			free(cmd);
			free(c);
		}
	}
	json_decref(resp);
	return CG_EXIT_OK;
}

static int cmd_answer(const struct cg_cli *g, const char *action, const char *id, const char *why,
		      bool json)
{
	json_t *resp = fetch_pending(g);
	if (!resp)
		return CG_EXIT_UNAVAILABLE;
	const json_t *p = find_pending(pending_list(resp), id);
	int rc;
	if (!p) {
		/* Let the daemon say it, with its code, rather than guessing here. */
		json_t *req = json_pack("{s:s,s:s,s:s}", "action", action, "trace_id", id,
					"request_sha256", "");
		json_t *ans = admin_call(g, req);
		json_decref(req);
		rc = ans ? report(ans, json) : CG_EXIT_UNAVAILABLE;
		json_decref(ans);
	} else {
		json_t *ans = answer(g, action, p, why, 0, 0);
		rc = ans ? report(ans, json) : CG_EXIT_UNAVAILABLE;
		json_decref(ans);
	}
	json_decref(resp);
	return rc;
}

static int parse_duration(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v <= 0)
		return -1;
	int64_t mult = 1;
	if (*end == 'm')
		mult = 60, end++;
	else if (*end == 'h')
		mult = 3600, end++;
	else if (*end == 's')
		end++;
	if (*end)
		return -1;
	*out = v * mult;
	return 0;
}

/* A non-negative decimal integer, nothing else. */
static int parse_count(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 0)
		return -1;
	*out = v;
	return 0;
}

static int cmd_grant(const struct cg_cli *g, int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr,
			"usage: callgate grant open --exe PATH --argv PATTERN... [--session "
			"GLOB] [--uid U] [--path DIR]... --uses N --ttl DURATION\n"
			"       callgate grant list [--json]\n"
			"       callgate grant close GRANT_ID\n");
		return CG_EXIT_USAGE;
	}
	bool json = false;
	json_t *req = NULL;
	if (strcmp(argv[1], "list") == 0) {
		json = argc > 2 && strcmp(argv[2], "--json") == 0;
		req = json_pack("{s:s}", "action", "grant_list");
	} else if (strcmp(argv[1], "close") == 0 && argc == 3) {
		req = json_pack("{s:s,s:s}", "action", "grant_close", "grant_id", argv[2]);
	} else if (strcmp(argv[1], "open") == 0) {
		json_t *stage = json_object();
		json_t *args = json_array();
		json_t *spec = json_object();
		json_t *paths = json_array();
		for (int i = 2; i < argc; i++) {
			const char *a = argv[i];
			const char *v = i + 1 < argc ? argv[i + 1] : NULL;
			int64_t n;
			if (strcmp(a, "--json") == 0) {
				json = true;
				continue;
			}
			if (!v)
				goto usage;
			if (strcmp(a, "--exe") == 0)
				json_object_set_new(stage, "exe", json_string(v));
			else if (strcmp(a, "--argv") == 0) {
				/* Every following word up to the next --flag is one pattern. */
				for (i++; i < argc && strncmp(argv[i], "--", 2) != 0; i++)
					json_array_append_new(args, json_string(argv[i]));
				i--;
				continue;
			} else if (strcmp(a, "--session") == 0)
				json_object_set_new(spec, "session", json_string(v));
			else if (strcmp(a, "--uid") == 0 && parse_count(v, &n) == 0)
				json_object_set_new(spec, "uid", json_integer(n));
			else if (strcmp(a, "--path") == 0)
				json_array_append_new(paths, json_string(v));
			else if (strcmp(a, "--uses") == 0 && parse_count(v, &n) == 0)
				json_object_set_new(spec, "uses", json_integer(n));
			else if (strcmp(a, "--ttl") == 0 && parse_duration(v, &n) == 0)
				json_object_set_new(spec, "ttl_s", json_integer(n));
			else {
				json_decref(stage);
				json_decref(args);
				json_decref(spec);
				json_decref(paths);
				goto usage;
			}
			i++;
		}
		json_object_set_new(stage, "argv", args);
		json_object_set_new(spec, "pipeline", json_pack("[o]", stage));
		if (json_array_size(paths))
			json_object_set_new(spec, "paths", paths);
		else
			json_decref(paths);
		/* The daemon validates the spec and names what is wrong (CT codes). */
		req = json_pack("{s:s,s:o}", "action", "grant_open", "grant", spec);
	} else {
		goto usage;
	}
	json_t *resp = admin_call(g, req);
	json_decref(req);
	if (!resp)
		return CG_EXIT_UNAVAILABLE;
	int rc = report(resp, json);
	if (!json && rc == CG_EXIT_OK) {
		const json_t *data = json_object_get(reply_of(resp), "data");
		char *s = data ? json_dumps(data, JSON_INDENT(2)) : NULL;
		char *c = cg_sanitize_for_terminal(s);
		if (c)
			puts(c);
		free(s);
		free(c);
	}
	json_decref(resp);
	return rc;
usage:
	fprintf(stderr, "callgate grant: bad arguments (see callgate grant)\n");
	return CG_EXIT_USAGE;
}

int cg_cli_approve(const struct cg_cli *g, int argc, char **argv)
{
	const char *cmd = argv[0];
	bool json = false;
	const char *why = NULL, *id = NULL;
	int64_t uses = 10, ttl = 1800;
	if (strcmp(cmd, "grant") == 0)
		return cmd_grant(g, argc, argv);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--why") == 0 && i + 1 < argc)
			why = argv[++i];
		else if (strcmp(argv[i], "--grant-uses") == 0 && i + 1 < argc &&
			 parse_duration(argv[i + 1], &uses) == 0)
			i++;
		else if (strcmp(argv[i], "--grant-ttl") == 0 && i + 1 < argc &&
			 parse_duration(argv[i + 1], &ttl) == 0)
			i++;
		else if (argv[i][0] != '-' && !id)
			id = argv[i];
		else {
			fprintf(stderr, "callgate %s: unknown argument '%s'\n", cmd, argv[i]);
			return CG_EXIT_USAGE;
		}
	}
	if (strcmp(cmd, "pending") == 0)
		return cmd_pending(g, json);
	if (strcmp(cmd, "deny") == 0) {
		if (!id) {
			fprintf(stderr, "usage: callgate deny ID [--why TEXT]\n");
			return CG_EXIT_USAGE;
		}
		return cmd_answer(g, "deny", id, why ? why : "denied by the operator", json);
	}
	/* approve */
	if (id)
		return cmd_answer(g, "approve", id, NULL, json);
	return tui(g, uses, ttl);
}
