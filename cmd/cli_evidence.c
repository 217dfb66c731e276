/* SPDX-License-Identifier: MIT */
/*
 * cli_evidence — the evidence tools: `callgate replay`, `verdict`, `log`,
 * `evidence rebuild` and `key show` (docs/evidence.md, callgate-evidence(1)).
 *
 * They read the daemon's state directory directly (no socket): evidence
 * must stay verifiable when the daemon is stopped or gone. A state
 * directory that is not there (or holds no journal) is said in a sentence
 * naming the directory and where its name came from, exit 66, never a
 * report of an empty journal.
 *
 * Invariants:
 *  - replay exits 0 only on PASS; every failure is printed by name.
 *  - Text from the journal MUST NOT reach the terminal raw: control
 *    characters (escape sequences) are replaced before printing.
 *  - Nothing here writes the journal or the checkpoints.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "callgate.h"
#include "cli.h"
#include "evidence.h"
#include "journal.h"
#include "replay.h"
#include "retention.h"
#include "key.h"
#include "util.h"
#include "verdict.h"

#define EXIT_FAIL 1 /* replay FAIL, or the trace asked for does not exist */

static const struct cg_cli_opt replay_opts[] = {
	{ "--all", NULL, "verify the whole journal and every trace" },
	{ "--pubkey", "FILE", "a trusted copy of the evidence public key" },
	{ "--json", NULL, "print the full report as JSON" },
	{ "--no-write", NULL, "do not rewrite replay.json and diff.json" },
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ 0 },
};

static const struct cg_cli_opt verdict_opts[] = {
	{ "--json", NULL, "print verdict.json instead of the text verdict" },
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ 0 },
};

static const struct cg_cli_opt log_opts[] = {
	{ "--since", "T", "since an RFC 3339 time or an age: 90s, 15m, 2h, 7d" },
	{ "--trace", "ID", "only this trace" },
	{ "--decision", "D",
	  "only calls decided D (BLOCK, ...), with outcome D (failed, ...), or let through D "
	  "(approved, granted)" },
	{ "--rule", "R", "only calls decided by rule R" },
	{ "--peer", "UID", "only calls from this peer uid" },
	{ "--session", "S", "only calls of this agent session" },
	{ "--json", NULL, "one JSON object per call (with --events: the lines as stored)" },
	{ "--events", NULL, "print every journal event, one per line, instead of calls" },
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ 0 },
};

static const struct cg_cli_opt rebuild_opts[] = {
	{ "--all", NULL, "rebuild every trace's package" },
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ 0 },
};

static const struct cg_cli_opt key_show_opts[] = {
	{ "--state-dir", "DIR", "the daemon's state directory" },
	{ 0 },
};

/* Where the state directory in use came from, and checked before reading it. */
struct state {
	const char *dir;
	const char *from;
	const char *socket; /* the daemon's agent socket: it reads a peer's own traces */
};

/* A word where an option was expected ("callgate replay a b"): a usage error. */
static int extra_arg(const char *sub, const char *arg)
{
	fprintf(stderr, "callgate %s: unexpected argument '%s' (see 'callgate %s --help')\n", sub,
		arg, sub);
	return CG_EXIT_USAGE;
}

/* Print s for a terminal: controls as ?, what a person cannot see as <U+XXXX> (cg_unicode_hidden). */
static void put_safe(FILE *f, const char *s, size_t n)
{
	bool lines = memchr(s, '\n', strnlen(s, n)) != NULL;
	for (size_t i = 0; i < n && s[i];) {
		uint32_t c;
		size_t k = cg_utf8_next((const unsigned char *)s + i, n - i, &c);
		const char *cls = k ? cg_unicode_hidden(c) : "invalid";
		/* Paths come from the file system, which the wire's check never saw. */
		if (k && (c == '\n' || (c == '\\' && lines))) /* as the approval screens do */
			fputs(c == '\n' ? "\\n" : "\\\\", f);
		else if (k == 0 || (cls && c < 0x80))
			fputc('?', f);
		else if (cls)
			fprintf(f, "<U+%04X>", (unsigned)c);
		else
			fwrite(s + i, 1, k, f);
		i += k ? k : 1;
	}
}

static const char *str_of(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static void print_failure(const json_t *f)
{
	json_int_t line = json_integer_value(json_object_get(f, "line"));
	json_int_t seq = json_integer_value(json_object_get(f, "seq"));
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "  %-22s %s", str_of(f, "check"), str_of(f, "file"));
	if (line)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, ":%lld", (long long)line);
	if (seq && (size_t)n < sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, " (seq %lld)", (long long)seq);
	if (json_object_get(f, "expected") && (size_t)n < sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, " expected %s found %s",
			      str_of(f, "expected"), str_of(f, "found"));
	if ((size_t)n < sizeof(buf))
		snprintf(buf + n, sizeof(buf) - (size_t)n, ": %s", str_of(f, "detail"));
	put_safe(stdout, buf, sizeof(buf));
	fputc('\n', stdout);
}

/*
 * The report's only failure is that the trace asked for has no event: the
 * journal itself verified, so the id is wrong, not the evidence (a trace
 * cut out of a journal breaks its chain, which is a failure of its own).
 */
static bool only_unknown_trace(const json_t *rep)
{
	const json_t *fails = json_object_get(rep, "failures");
	size_t i;
	json_t *f;
	json_array_foreach(fails, i, f)
	{
		if (strcmp(str_of(f, "check"), "trace_unknown") != 0)
			return false;
	}
	return json_array_size(fails) > 0;
}

/*
 * A replay report as text (or as it is, with json): the journal's line,
 * when the report has one (the socket's report has it for an approver
 * only), then the trace's or every trace's, then each failure by name.
 */
static void print_replay(const json_t *rep, const struct cg_replay_opts *o, bool json, bool unknown,
			 const char *state_dir)
{
	if (json) {
		json_dumpf(rep, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	} else if (unknown) {
		const json_t *j = json_object_get(rep, "journal");
		printf("PASS  journal: %lld events, head %.16s…, signed up to seq %lld%s\n",
		       (long long)json_integer_value(json_object_get(j, "events")),
		       str_of(j, "head"),
		       (long long)json_integer_value(json_object_get(j, "checkpoint_seq")),
		       json_is_true(json_object_get(j, "live")) ? " (daemon running)" : "");
		fprintf(stderr,
			"callgate replay: no trace %s in the journal of %s (a mistyped id? "
			"'callgate log' lists the traces)\n",
			o->trace_id, state_dir);
	} else {
		json_t *j = json_object_get(rep, "journal");
		json_t *s = json_object_get(rep, "summary");
		/*
		 * One trace's PASS is that trace's (ux-s40 M2: it read as the whole
		 * journal's, which a changed line elsewhere had broken).
		 */
		if (!j)
			printf("%s  as the daemon replayed it (its journal is not yours to read)\n",
			       str_of(rep, "status"));
		else
			printf(
			    "%s  journal: %lld events, head %.16s…, signed up to seq %lld%s%s\n",
			    str_of(rep, "status"),
			    (long long)json_integer_value(json_object_get(j, "events")),
			    str_of(j, "head"),
			    (long long)json_integer_value(json_object_get(j, "checkpoint_seq")),
			    json_is_true(json_object_get(j, "live")) ? " (daemon running)" : "",
			    o->all
				? ""
				: "; checked as far as this trace needs: replay --all checks every "
				  "line");
		if (o->all)
			printf("traces: %lld pass, %lld fail, %lld incomplete, %lld open\n",
			       (long long)json_integer_value(json_object_get(s, "pass")),
			       (long long)json_integer_value(json_object_get(s, "fail")),
			       (long long)json_integer_value(json_object_get(s, "incomplete")),
			       (long long)json_integer_value(json_object_get(s, "open")));
		else {
			json_t *t = json_array_get(json_object_get(rep, "traces"), 0);
			long long ev = (long long)json_integer_value(json_object_get(t, "events"));
			printf("trace %s: %s (%s, %lld event%s)\n", o->trace_id,
			       str_of(t, "status"), str_of(t, "state"), ev, ev == 1 ? "" : "s");
		}
		size_t i;
		json_t *f;
		json_array_foreach(json_object_get(rep, "failures"), i, f)
		{
			print_failure(f);
		}
	}
}

/*
 * An agent cannot read the daemon's state, or there is none where no one
 * said to look (a daemon started with --state-dir elsewhere, root's too:
 * ux-s39): then the daemon reads a peer its own traces over the socket.
 */
static bool ask_the_daemon(const struct state *st)
{
	char journal[4200];
	(void)snprintf(journal, sizeof(journal), "%s/journal", st->dir);
	return st->socket && access(journal, X_OK) != 0 &&
	       ((errno == EACCES && geteuid() != 0) ||
		(errno == ENOENT && strcmp(st->from, "the default") == 0));
}

/*
 * Send req (stolen) to the daemon for a peer that may not read the state
 * directory; its response in *resp. 0, or the exit code after saying why.
 */
static int ask_daemon(const char *cmd, const char *socket, json_t *req, int timeout_ms,
		      json_t **resp)
{
	char err[512];
	int rc = req ? cg_client_call(socket, req, timeout_ms, resp, err, sizeof(err)) : -1;
	json_decref(req);
	if (rc == 0)
		return 0;
	fprintf(stderr,
		"callgate %s: the state directory is not yours to read, and the daemon could not "
		"be asked either: %s\n",
		cmd, req ? err : "out of memory");
	return CG_EXIT_UNAVAILABLE;
}

/*
 * Replay one trace as the daemon does it for this peer (the socket's replay
 * action, ux-s40 L16): nothing is written, and the journal's own line is
 * there for an approver only.
 */
static int replay_from_daemon(const char *socket, const struct cg_replay_opts *o, bool json)
{
	json_t *resp = NULL;
	int asked = ask_daemon("replay", socket,
			       json_pack("{s:s,s:s}", "action", "replay", "trace_id", o->trace_id),
			       120000, &resp);
	if (asked != 0)
		return asked;
	const json_t *rep = json_object_get(json_object_get(resp, "reply"), "data");
	int ret;
	if (!json_is_object(rep)) {
		ret = cg_cli_print_refusal("replay", resp);
	} else {
		print_replay(rep, o, json, false, NULL);
		ret = strcmp(str_of(rep, "status"), "PASS") == 0 ? CG_EXIT_OK : EXIT_FAIL;
	}
	json_decref(resp);
	return ret;
}

static int cmd_replay(struct state st, int argc, char **argv)
{
	struct cg_replay_opts o = { .write_files = true };
	bool json = false;
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate replay [OPTIONS] TRACE_ID | --all",
		    "Verify a trace's evidence, or with --all the whole journal and "
		    "every trace.\nExit 0 on PASS, 1 on FAIL (each failure named), 66 "
		    "when the journal holds no such trace.",
		    replay_opts);
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-') {
			if (o.trace_id)
				return extra_arg("replay", argv[i]);
			o.trace_id = argv[i];
			continue;
		}
		const struct cg_cli_opt *opt =
		    cg_cli_opt_take("replay", replay_opts, argc, argv, &i, &v);
		if (!opt)
			return CG_EXIT_USAGE;
		if (strcmp(opt->name, "--all") == 0)
			o.all = true;
		else if (strcmp(opt->name, "--json") == 0)
			json = true;
		else if (strcmp(opt->name, "--no-write") == 0)
			o.write_files = false;
		else if (strcmp(opt->name, "--pubkey") == 0)
			o.pubkey_file = v;
		else if (strcmp(opt->name, "--state-dir") == 0)
			st = (struct state){ v, "--state-dir" };
	}
	if (o.all == (o.trace_id != NULL)) {
		fprintf(stderr, "callgate replay: give one TRACE_ID or --all (see 'callgate replay "
				"--help')\n");
		return CG_EXIT_USAGE;
	}
	if (o.trace_id && !cg_trace_id_valid(o.trace_id)) {
		fprintf(stderr, "callgate replay: '%s' is not a trace id\n", o.trace_id);
		return CG_EXIT_USAGE;
	}
	/* Your own key is checked where you can read the journal, not by the daemon. */
	if (o.trace_id && !o.pubkey_file && ask_the_daemon(&st))
		return replay_from_daemon(st.socket, &o, json);
	if (cg_cli_state_dir_check("replay", st.dir, st.from) < 0)
		return CG_EXIT_NOINPUT;
	o.state_dir = st.dir;
	json_t *rep = NULL;
	int rc = cg_replay_run(&o, &rep);
	if (rc < 0) {
		fprintf(stderr, "callgate replay: %s\n", strerror(errno));
		json_decref(rep);
		return CG_EXIT_ERROR;
	}
	bool unknown = o.trace_id && only_unknown_trace(rep);
	print_replay(rep, &o, json, unknown, st.dir);
	json_decref(rep);
	return rc == 0 ? CG_EXIT_OK : unknown ? CG_EXIT_NOINPUT : EXIT_FAIL;
}

/*
 * verdict.md for a terminal: newlines kept, other control characters
 * replaced, and a list item that is a structured value (a constraint such as
 * {"read":["/"],"net":"none"}, which the sealed file holds as JSON) written as
 * text, "read /; net none": human output never shows JSON. The file itself is
 * left as sealed (replay compares it with the seal).
 */
static void print_verdict_md(const char *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (p + i)) : n - i;
		json_t *v = NULL;
		if (len > 2 && p[i] == '-' && p[i + 1] == ' ' &&
		    (p[i + 2] == '{' || p[i + 2] == '['))
			v = json_loadb(p + i + 2, len - 2, 0, NULL);
		if (json_is_object(v) || json_is_array(v)) {
			fputs("- ", stdout);
			cg_cli_print_value(stdout, v);
		} else {
			put_safe(stdout, p + i, len);
		}
		json_decref(v);
		if (nl)
			fputc('\n', stdout);
		i += len + (nl ? 1 : 0);
	}
}

/*
 * A verdict as JSON, every character outside ASCII as a \u escape (a path
 * from the file system can hold C1 controls or a right-to-left override).
 */
static void print_json_for_terminal(const json_t *v)
{
	char *t = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
	if (t)
		printf("%s\n", t);
	free(t);
}

/*
 * The verdict of trace id as the daemon reads it for this peer (the socket's
 * verdict action: a peer reads the traces of its own uid), printed as the
 * state's verdict.md or verdict.json would be.
 */
static int verdict_from_daemon(const char *socket, const char *id, bool json)
{
	json_t *resp = NULL;
	int asked =
	    ask_daemon("verdict", socket,
		       json_pack("{s:s,s:s}", "action", "verdict", "trace_id", id), 30000, &resp);
	if (asked != 0)
		return asked;
	const json_t *v =
	    json_object_get(json_object_get(json_object_get(resp, "reply"), "data"), "verdict");
	int ret = CG_EXIT_OK;
	if (!json_is_object(v)) {
		ret = cg_cli_print_refusal("verdict", resp);
	} else if (json) {
		print_json_for_terminal(v);
	} else {
		char *md = cg_verdict_render_md(v);
		if (md)
			print_verdict_md(md, strlen(md));
		free(md);
	}
	json_decref(resp);
	return ret;
}

static int cmd_verdict(struct state st, int argc, char **argv)
{
	const char *id = NULL;
	bool json = false;
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate verdict [OPTIONS] TRACE_ID",
		    "Print a trace's verdict: decision, summary, each reason with its "
		    "rung and rule,\nwhat was constrained and blocked, next steps. "
		    "Exit 1 when the trace has none.",
		    verdict_opts);
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-') {
			if (id)
				return extra_arg("verdict", argv[i]);
			id = argv[i];
			continue;
		}
		const struct cg_cli_opt *opt =
		    cg_cli_opt_take("verdict", verdict_opts, argc, argv, &i, &v);
		if (!opt)
			return CG_EXIT_USAGE;
		if (strcmp(opt->name, "--json") == 0)
			json = true;
		else if (strcmp(opt->name, "--state-dir") == 0)
			st = (struct state){ v, "--state-dir" };
	}
	if (!id || !cg_trace_id_valid(id)) {
		fprintf(stderr, "callgate verdict: %s%s%s (see 'callgate verdict --help')\n",
			id ? "'" : "give a TRACE_ID", id ? id : "",
			id ? "' is not a trace id" : "");
		return CG_EXIT_USAGE;
	}
	if (ask_the_daemon(&st))
		return verdict_from_daemon(st.socket, id, json);
	if (cg_cli_state_dir_check("verdict", st.dir, st.from) < 0)
		return CG_EXIT_NOINPUT;
	const char *state_dir = st.dir;
	char *p = NULL;
	size_t n = 0;
	/* From traces/ID/, or from the archive retention packed it into. */
	if (cg_package_read(state_dir, id, json ? "verdict.json" : "verdict.md", 16u << 20, &p,
			    &n) < 0) {
		if (errno == ENOENT && strlen(id) < 36)
			fprintf(stderr,
				"callgate verdict: no trace package %s in %s: a trace id is 36 "
				"characters; 'callgate log --trace %s' lists the calls whose id "
				"starts with it (ux-s43c L3)\n",
				id, state_dir, id);
		else if (errno == ENOENT)
			fprintf(stderr,
				"callgate verdict: no trace package %s in %s (a mistyped id? "
				"'callgate log' lists the traces; if 'callgate replay %s' finds it "
				"in the journal, 'callgate evidence rebuild %s' writes it again)\n",
				id, state_dir, id, id);
		else
			fprintf(stderr, "callgate verdict: trace %s's verdict cannot be read: %s\n",
				id, strerror(errno));
		return EXIT_FAIL;
	}
	if (json) {
		/* As the socket's verdict action reads it: one object, no member twice. */
		json_t *v = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
		bool whole = json_is_object(v);
		if (whole && isatty(STDOUT_FILENO)) {
			/* A name from the file system may hold a terminal's controls: escaped. */
			print_json_for_terminal(v);
			json_decref(v);
			free(p);
			return CG_EXIT_OK;
		}
		json_decref(v);
		if (!whole) {
			fprintf(stderr,
				"callgate verdict: trace %s's verdict.json is not one JSON object "
				"with each member once (%s); `callgate replay %s` names what is "
				"wrong\n",
				id, strerror(EBADMSG), id);
			free(p);
			return EXIT_FAIL;
		}
		fwrite(p, 1, n, stdout);
	} else {
		print_verdict_md(p, n);
	}
	free(p);
	return CG_EXIT_OK;
}

/*
 * The text form of a journal payload: key=value pairs, nested keys joined
 * with '.', arrays of plain values joined with ',', strings quoted when they
 * hold a space, '"' or '=', control characters replaced. At most LOG_TEXT_MAX
 * bytes, then "…": a line per event, not the event (--json has it whole).
 */
#define LOG_TEXT_MAX 200
/* Bytes of a command on a `callgate log` line. */
#define LOG_CMD_MAX 120

struct textbuf {
	char b[LOG_TEXT_MAX + 8];
	size_t n;
	bool full;
};

static void tb_put(struct textbuf *t, const char *s, size_t len)
{
	for (size_t i = 0; i < len && !t->full; i++) {
		if (t->n >= LOG_TEXT_MAX) {
			/* Cut at a character boundary, not inside a UTF-8 sequence. */
			while (t->n > 0 && ((unsigned char)t->b[t->n] & 0xc0) == 0x80)
				t->n--;
			t->full = true;
			break;
		}
		unsigned char c = (unsigned char)s[i];
		t->b[t->n++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
}

static void tb_str(struct textbuf *t, const char *s)
{
	tb_put(t, s, strlen(s));
}

static void tb_scalar(struct textbuf *t, const json_t *v)
{
	char num[64];
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		bool quote = !*s || strpbrk(s, " \"=,") != NULL;
		if (quote)
			tb_str(t, "\"");
		for (; *s; s++)
			tb_put(t, *s == '"' ? "'" : s, 1);
		if (quote)
			tb_str(t, "\"");
		return;
	}
	if (json_is_integer(v))
		snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(num, sizeof(num), "%g", json_real_value(v));
	else if (json_is_boolean(v))
		snprintf(num, sizeof(num), "%s", json_is_true(v) ? "true" : "false");
	else
		snprintf(num, sizeof(num), "-");
	tb_str(t, num);
}

static void tb_value(struct textbuf *t, const char *key, json_t *v, int depth)
{
	const char *k;
	json_t *x;
	size_t i;
	char sub[256];
	bool plain = json_is_array(v);
	json_array_foreach(v, i, x)
	{
		plain = plain && !json_is_object(x) && !json_is_array(x);
	}
	if (json_is_object(v) && depth < 8) {
		json_object_foreach(v, k, x)
		{
			snprintf(sub, sizeof(sub), "%s%s%s", key, *key ? "." : "", k);
			tb_value(t, sub, x, depth + 1);
		}
	} else if (json_is_array(v) && !plain && depth < 8) {
		json_array_foreach(v, i, x)
		{
			snprintf(sub, sizeof(sub), "%s%s%zu", key, *key ? "." : "", i);
			tb_value(t, sub, x, depth + 1);
		}
	} else {
		if (t->n)
			tb_str(t, " ");
		if (*key) {
			tb_str(t, key);
			tb_str(t, "=");
		}
		if (json_is_array(v)) {
			json_array_foreach(v, i, x)
			{
				if (i)
					tb_str(t, ",");
				tb_scalar(t, x);
			}
		} else if (json_is_object(v) || json_is_array(v)) {
			tb_str(t, "…");
		} else {
			tb_scalar(t, v);
		}
	}
}

static void put_payload(const char *p, size_t len)
{
	struct textbuf t = { .n = 0 };
	json_t *v = json_loadb(p, len, 0, NULL);
	if (!v) {
		fputs("(payload is not JSON)", stdout);
		return;
	}
	tb_value(&t, "", v, 0);
	json_decref(v);
	put_safe(stdout, t.b, t.n);
	if (t.full)
		fputs("…", stdout);
}

/* What `callgate log` was asked for. */
struct log_args {
	const char *trace, *decision, *session, *rule;
	long long peer; /* -1: any */
	int64_t since;
	bool json, events;
	size_t shown;
	bool progress; /* stderr is a terminal: show how far a long scan is */
};

static int log_parse(struct state *st, int argc, char **argv, struct log_args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-')
			return extra_arg("log", argv[i]);
		const struct cg_cli_opt *opt = cg_cli_opt_take("log", log_opts, argc, argv, &i, &v);
		if (!opt)
			return CG_EXIT_USAGE;
		const char *name = opt->name;
		char *end = NULL;
		if (strcmp(name, "--json") == 0)
			a->json = true;
		else if (strcmp(name, "--events") == 0)
			a->events = true;
		else if (strcmp(name, "--trace") == 0 && !cg_trace_id_valid(v)) {
			fprintf(stderr, "callgate log: --trace wants a trace id, got '%.40s'\n", v);
			return CG_EXIT_USAGE;
		} else if (strcmp(name, "--trace") == 0)
			a->trace = v;
		else if (strcmp(name, "--decision") == 0) {
			/* A decision or an outcome that exists: a typo is not "no matches". */
			static const char *const decisions[] = { "ALLOW", "DEGRADE", "UNKNOWN",
								 "BLOCK" };
			bool ok = false;
			for (size_t k = 0; k < CG_ARRAY_LEN(decisions) && !ok; k++)
				ok = strcasecmp(v, decisions[k]) == 0;
			for (size_t k = 0; cg_verdict_outcomes[k] && !ok; k++)
				ok = strcasecmp(v, cg_verdict_outcomes[k]) == 0;
			if (!ok) {
				fprintf(
				    stderr,
				    "callgate log: --decision wants ALLOW, DEGRADE, UNKNOWN, BLOCK "
				    "or an outcome (");
				for (size_t k = 0; cg_verdict_outcomes[k]; k++)
					fprintf(stderr, "%s%s", k ? ", " : "",
						cg_verdict_outcomes[k]);
				fprintf(stderr, "); got '%.40s' (see 'callgate log --help')\n", v);
				return CG_EXIT_USAGE;
			}
			a->decision = v;
		} else if (strcmp(name, "--rule") == 0)
			a->rule = v;
		else if (strcmp(name, "--session") == 0)
			a->session = v;
		else if (strcmp(name, "--state-dir") == 0)
			*st = (struct state){ v, "--state-dir" };
		else if (strcmp(name, "--peer") == 0 &&
			 ((a->peer = strtoll(v, &end, 10)) < 0 || !*v || *end)) {
			fprintf(stderr, "callgate log: --peer wants a uid, got '%s'\n", v);
			return CG_EXIT_USAGE;
		} else if (strcmp(name, "--since") == 0 && cg_cli_parse_since(v, &a->since) < 0) {
			fprintf(stderr,
				"callgate log: --since wants RFC 3339 or NUMBER[smhd], got "
				"'%s'\n",
				v);
			return CG_EXIT_USAGE;
		}
	}
	if (a->events && (a->rule || a->peer >= 0)) {
		fprintf(stderr, "callgate log: --rule and --peer filter calls, not --events\n");
		return CG_EXIT_USAGE;
	}
	return 0;
}

static bool str_is(const json_t *o, const char *k, const char *want, bool nocase)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s && (nocase ? strcasecmp(s, want) == 0 : strcmp(s, want) == 0);
}

/* Does call summary c (with its facts f) pass the filters? */
static bool log_wanted(const struct log_args *a, const json_t *c)
{
	int64_t ts;
	const char *t = json_string_value(json_object_get(c, "time"));
	if (a->since != INT64_MIN && (!t || cg_parse_time(t, &ts) < 0 || ts < a->since))
		return false;
	if (a->decision && !str_is(c, "decision", a->decision, true) &&
	    !str_is(c, "outcome", a->decision, true) && !str_is(c, "via", a->decision, true))
		return false;
	if (a->rule && !str_is(c, "rule_id", a->rule, false))
		return false;
	if (a->session && !str_is(c, "session", a->session, false))
		return false;
	json_t *uid = json_object_get(json_object_get(c, "peer"), "uid");
	return a->peer < 0 || (json_is_integer(uid) && json_integer_value(uid) == a->peer);
}

/* time trace uid/pid host DECISION outcome rule exit=N command */
static void log_line(const json_t *c)
{
	const json_t *p = json_object_get(c, "peer");
	const json_t *x = json_object_get(c, "exit");
	const char *host = str_of(c, "host");
	const char *rule = str_of(c, "rule_id");
	/* A request refused before any rule (invalid, unresolved): its reply code (s44c L8). */
	if (!*rule)
		rule = str_of(c, "code");
	char exit_s[24] = "-", pid_s[24] = "-", head[400], outcome[96];
	/* How it was let through, with how it ended (ux-s43c L4): failed(granted). */
	const char *via = str_of(c, "via");
	snprintf(outcome, sizeof(outcome), *via ? "%s(%s)" : "%s", str_of(c, "outcome"), via);
	/* Done without the repository's hooks, as git said (s44c H1). */
	if (json_array_size(json_object_get(c, "hooks_not_run")))
		snprintf(outcome + strlen(outcome), sizeof(outcome) - strlen(outcome),
			 ",hooks-not-run");
	if (json_is_integer(x))
		snprintf(exit_s, sizeof(exit_s), "%lld", (long long)json_integer_value(x));
	if (json_is_integer(json_object_get(p, "pid"))) /* an admin's grant opening has none */
		snprintf(pid_s, sizeof(pid_s), "%lld",
			 (long long)json_integer_value(json_object_get(p, "pid")));
	snprintf(head, sizeof(head), "%s %s %lld/%s %s %s %s %s exit=%s ", str_of(c, "time"),
		 str_of(c, "trace_id"), (long long)json_integer_value(json_object_get(p, "uid")),
		 pid_s, *host ? host : "-", *str_of(c, "decision") ? str_of(c, "decision") : "-",
		 outcome, *rule ? rule : "-", exit_s);
	put_safe(stdout, head, strlen(head));
	const char *cmd = str_of(c, "command");
	if (!*cmd) {
		char act[80];
		snprintf(act, sizeof(act), "[%s]", str_of(c, "action"));
		put_safe(stdout, act, strlen(act));
	} else {
		/* Sanely short: the verdict has the whole command. */
		size_t n = strlen(cmd);
		put_safe(stdout, cmd, n > LOG_CMD_MAX ? LOG_CMD_MAX : n);
		if (n > LOG_CMD_MAX)
			fputs("...", stdout);
	}
	fputc('\n', stdout);
}

static void put_json_line(const json_t *x)
{
	char *s = json_dumps(x, JSON_COMPACT);
	if (s)
		puts(s);
	free(s);
}

/* One call of the log, as the options ask: its line, or its JSON object. */
static void show_call(struct log_args *a, const json_t *c)
{
	a->shown++;
	if (a->json)
		put_json_line(c);
	else
		log_line(c);
}

static int log_call(const char *trace, const json_t *f, size_t i, size_t n, void *arg)
{
	struct log_args *a = arg;
	if (a->progress && (i % 1000 == 0 || i + 1 == n)) {
		fprintf(stderr, "\rcallgate log: %zu of %zu traces read", i + 1, n);
		if (i + 1 == n)
			fputs("\r\033[K", stderr);
	}
	/* A trace's id, or the start of one (ux-s43c L3: the 8 characters people copy). */
	if (a->trace && strncmp(trace, a->trace, strlen(a->trace)) != 0)
		return 0;
	json_t *c = cg_call_summary(trace, f);
	if (!c)
		return -1;
	if (log_wanted(a, c)) {
		show_call(a, c);
	}
	json_decref(c);
	return 0;
}

/* A filtered listing that lists nothing says so, on stderr (ux-s43c L3: it was silent). */
static void no_match_note(const struct log_args *a)
{
	if (a->trace || a->decision || a->rule || a->session || a->peer >= 0 ||
	    a->since != INT64_MIN)
		fprintf(stderr, "callgate log: no call in the journal matches the filters given\n");
}

static int log_events(const struct log_args *a, struct cg_journal_view *jv)
{
	const char *trace = a->trace, *decision = a->decision, *session = a->session;
	int64_t since = a->since;
	bool json = a->json;
	/* Trace-level filters need a first pass: which traces match. */
	struct cg_smap *match = NULL;
	static int yes = 1;
	if (decision || session) {
		struct cg_smap *dec = cg_smap_new(), *ses = cg_smap_new();
		match = cg_smap_new();
		for (size_t i = 0; match && dec && ses && i < jv->n; i++) {
			const struct cg_evline *o = &jv->v[i];
			if (decision && (o->type == CG_EV_DECISION || o->type == CG_EV_REFUSAL) &&
			    strcasecmp(o->decision, decision) == 0)
				(void)cg_smap_put(dec, o->trace, &yes);
			if (session && (o->type == CG_EV_REQUEST || o->type == CG_EV_REFUSAL)) {
				json_t *pl =
				    json_loadb(o->line + o->payload_off, o->payload_len, 0, NULL);
				json_t *rq = json_object_get(pl, "request");
				const char *s = json_string_value(json_object_get(pl, "session"));
				if (!s)
					s = json_string_value(json_object_get(rq, "session"));
				if (s && strcmp(s, session) == 0)
					(void)cg_smap_put(ses, o->trace, &yes);
				json_decref(pl);
			}
		}
		for (size_t i = 0; match && dec && ses && i < jv->n; i++) {
			const char *t = jv->v[i].trace;
			if ((!decision || cg_smap_get(dec, t)) && (!session || cg_smap_get(ses, t)))
				(void)cg_smap_put(match, t, &yes);
		}
		cg_smap_free(dec, NULL);
		cg_smap_free(ses, NULL);
	}
	size_t shown = 0;
	for (size_t i = 0; i < jv->n; i++) {
		const struct cg_evline *o = &jv->v[i];
		if (trace && strncmp(o->trace, trace, strlen(trace)) != 0)
			continue;
		if (match && !cg_smap_get(match, o->trace))
			continue;
		int64_t ts;
		if (since != INT64_MIN && (cg_parse_time(o->ts, &ts) < 0 || ts < since))
			continue;
		shown++;
		if (json) {
			fwrite(o->line, 1, o->line_len, stdout);
			continue;
		}
		char head[200];
		snprintf(head, sizeof(head), "%s %8llu %s %-18s ", o->ts,
			 (unsigned long long)o->seq, o->trace, o->type_name);
		put_safe(stdout, head, sizeof(head));
		put_payload(o->line + o->payload_off, o->payload_len);
		fputc('\n', stdout);
	}
	cg_smap_free(match, NULL);
	if (!shown)
		no_match_note(a);
	return CG_EXIT_OK;
}

/*
 * The peer's own calls as the daemon reads them over the socket (its log
 * action: a peer reads the traces of its own uid, the newest first kept):
 * for a developer who may not read the state directory (s44c L9: log said
 * only that the journal could not be read). The filters the daemon does
 * not take are applied here, as for the journal.
 */
static int log_from_daemon(const char *socket, struct log_args *a)
{
	json_t *req = json_pack("{s:s,s:i}", "action", "log", "limit", CG_WIRE_LOG_MAX);
	json_t *resp = NULL;
	char since[40];
	if (req && a->since != INT64_MIN) {
		cg_format_time(a->since, since, sizeof(since));
		json_object_set_new(req, "since", json_string(since));
	}
	int asked = ask_daemon("log", socket, req, 120000, &resp);
	if (asked != 0)
		return asked;
	const json_t *data = json_object_get(json_object_get(resp, "reply"), "data");
	if (!json_is_object(data)) {
		int ret = cg_cli_print_refusal("log", resp);
		json_decref(resp);
		return ret;
	}
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(data, a->events ? "events" : "calls"), i, x)
	{
		const char *t =
		    json_string_value(json_object_get(x, a->events ? "trace" : "trace_id"));
		if (a->trace && (!t || strncmp(t, a->trace, strlen(a->trace)) != 0))
			continue;
		if (a->events) {
			a->shown++;
			put_json_line(x);
		} else if (log_wanted(a, x)) {
			show_call(a, x);
		}
	}
	if (json_is_true(json_object_get(data, "truncated")))
		fprintf(stderr,
			"callgate log: the daemon answered with the newest %zu of your %lld "
			"event(s) it holds (as the daemon reads them for you; root reads the "
			"whole journal with --state-dir)\n",
			json_array_size(json_object_get(data, "events")),
			(long long)json_integer_value(json_object_get(data, "matched")));
	if (!a->shown)
		no_match_note(a);
	json_decref(resp);
	return CG_EXIT_OK;
}

static int cmd_log(struct state st, int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate log [OPTIONS]",
		    "List the journal's calls, one line each: time, trace, peer uid/pid, host,\n"
		    "decision, outcome, rule, exit code of the last stage, and the command as\n"
		    "shell words (cut at 120 bytes). --json: one JSON object per call. --events:\n"
		    "every event, one per line, the payload as key=value text (--events --json:\n"
		    "the journal lines as stored). On a terminal, a long scan shows its progress\n"
		    "on stderr. Without the right to read the state directory, your own calls\n"
		    "as the daemon reads them for you over its socket.",
		    log_opts);
	struct log_args a = { .peer = -1, .since = INT64_MIN, .progress = isatty(2) };
	int rc = log_parse(&st, argc, argv, &a);
	if (rc != 0)
		return rc;
	if (ask_the_daemon(&st))
		return log_from_daemon(st.socket, &a);
	if (cg_cli_state_dir_check("log", st.dir, st.from) < 0)
		return CG_EXIT_NOINPUT;
	struct cg_journal_view jv;
	if (cg_journal_load(st.dir, &jv, NULL) < 0) {
		fprintf(stderr, "callgate log: cannot read the journal under %s: %s\n", st.dir,
			strerror(errno));
		return CG_EXIT_ERROR;
	}
	if (a.events) {
		rc = log_events(&a, &jv);
	} else {
		rc = cg_journal_calls(&jv, log_call, &a) == 0 ? CG_EXIT_OK : CG_EXIT_ERROR;
		if (rc != CG_EXIT_OK)
			fprintf(stderr, "callgate log: out of memory\n");
		else if (!a.shown)
			no_match_note(&a);
	}
	cg_journal_view_free(&jv);
	return rc;
}

#define EVIDENCE_USAGE "callgate evidence COMMAND [OPTIONS] ..."
#define EVIDENCE_ABOUT                                                                             \
	"commands:\n"                                                                              \
	"  rebuild          recreate trace packages (traces/ID/) from the journal\n"               \
	"  checkpoint       print a signed checkpoint (C2SP note) of the journal\n"                \
	"  prove            write a trace's events with their inclusion proofs\n"                  \
	"  consistency      prove one checkpoint extends another\n"                                \
	"  witness-request  write a tlog-witness request for a checkpoint\n"                       \
	"  witness          cosign another log's checkpoint if it is consistent\n"                 \
	"  witnessed        keep a checkpoint cosigned by witnesses\n"                             \
	"  ship             copy the journal to PostgreSQL: ship --to postgresql://...\n"          \
	"  verify           re-verify every host's evidence from PostgreSQL: verify --from URL"

static int cmd_evidence(struct state st, int argc, char **argv)
{
	static const struct cg_cli_opt commands[] = {
		{ "rebuild", NULL, "recreate trace packages from the journal" },
		{ "checkpoint", NULL, "print a signed checkpoint" },
		{ "prove", NULL, "a trace's inclusion proofs" },
		{ "consistency", NULL, "prove one checkpoint extends another" },
		{ "witness-request", NULL, "a tlog-witness request" },
		{ "witness", NULL, "cosign a consistent checkpoint" },
		{ "witnessed", NULL, "keep a cosigned checkpoint" },
		{ "ship", NULL, "copy the journal to PostgreSQL" },
		{ "verify", NULL, "verify fleet evidence from PostgreSQL" },
		{ 0 },
	};
	const char *id = NULL;
	bool all = false;
	if (argc < 2 || argv[1][0] == '-') {
		if (cg_cli_wants_help(argc, argv))
			return cg_cli_help(EVIDENCE_USAGE, EVIDENCE_ABOUT, NULL);
		fprintf(stderr,
			"callgate evidence: give a command: rebuild, checkpoint, prove, "
			"consistency, witness-request, witness, witnessed, ship, verify (see "
			"'callgate evidence "
			"--help')\n");
		return CG_EXIT_USAGE;
	}
	if (strcmp(argv[1], "rebuild") != 0)
		return cg_cli_bad_option("evidence", argv[1], "unknown command", commands);
	if (cg_cli_wants_help(argc - 1, argv + 1))
		return cg_cli_help(
		    EVIDENCE_USAGE,
		    "Recreate a trace's package (events.ndjson, verdict.json, "
		    "verdict.md,\nreplay.json, diff.json) from the journal, or every "
		    "trace's with --all.",
		    rebuild_opts);
	for (int i = 2; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-') {
			if (id || !cg_trace_id_valid(argv[i]))
				return extra_arg("evidence rebuild", argv[i]);
			id = argv[i];
			continue;
		}
		const struct cg_cli_opt *opt =
		    cg_cli_opt_take("evidence rebuild", rebuild_opts, argc, argv, &i, &v);
		if (!opt)
			return CG_EXIT_USAGE;
		if (strcmp(opt->name, "--all") == 0)
			all = true;
		else if (strcmp(opt->name, "--state-dir") == 0)
			st = (struct state){ v, "--state-dir" };
	}
	if (all == (id != NULL)) {
		fprintf(stderr, "callgate evidence rebuild: give one TRACE_ID or --all (see "
				"'callgate evidence rebuild --help')\n");
		return CG_EXIT_USAGE;
	}
	if (cg_cli_state_dir_check("evidence rebuild", st.dir, st.from) < 0)
		return CG_EXIT_NOINPUT;
	const char *state_dir = st.dir;
	int failed = 0;
	int n = cg_evidence_rebuild(state_dir, id, &failed);
	if (n < 0) {
		fprintf(stderr, "callgate evidence rebuild: %s\n",
			errno == ENOENT ? "the journal holds no such trace" : strerror(errno));
		return errno == ENOENT ? EXIT_FAIL : CG_EXIT_ERROR;
	}
	printf("rebuilt %d trace package(s) from the journal\n", n);
	/* s41b F1: --all said it had rebuilt them while some were not written. */
	if (failed) {
		fprintf(stderr,
			"callgate evidence rebuild: %d trace package(s) could not be written; "
			"'callgate replay --all' names each\n",
			failed);
		return CG_EXIT_ERROR;
	}
	return CG_EXIT_OK;
}

#define KEY_USAGE "callgate key show [OPTIONS]"

static int cmd_key(struct state st, int argc, char **argv)
{
	static const struct cg_cli_opt commands[] = {
		{ "show", NULL, "print the evidence signing public key and its fingerprint" },
		{ 0 },
	};
	if (argc < 2 || argv[1][0] == '-') {
		if (cg_cli_wants_help(argc, argv))
			return cg_cli_help(KEY_USAGE,
					   "commands:\n  show      print the evidence signing "
					   "public key (PEM) and its fingerprint",
					   NULL);
		fprintf(stderr, "callgate key: give a command: show (see 'callgate key --help')\n");
		return CG_EXIT_USAGE;
	}
	if (strcmp(argv[1], "show") != 0)
		return cg_cli_bad_option("key", argv[1], "unknown command", commands);
	if (cg_cli_wants_help(argc - 1, argv + 1))
		return cg_cli_help(
		    KEY_USAGE,
		    "Print the public key the daemon signs checkpoints with (PEM) and "
		    "its SHA-256\nfingerprint, to keep a trusted copy for "
		    "'callgate replay --pubkey'.",
		    key_show_opts);
	for (int i = 2; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-')
			return extra_arg("key show", argv[i]);
		if (!cg_cli_opt_take("key show", key_show_opts, argc, argv, &i, &v))
			return CG_EXIT_USAGE;
		st = (struct state){ v, "--state-dir" }; /* its only option */
	}
	if (cg_cli_state_dir_check("key show", st.dir, st.from) < 0)
		return CG_EXIT_NOINPUT;
	const char *state_dir = st.dir;
	char path[4200], why[200], fp[65];
	snprintf(path, sizeof(path), "%s/keys/evidence.pub", state_dir);
	EVP_PKEY *k = cg_key_load(path, CG_KEY_PUBLIC_OR_PRIVATE, false, why, sizeof(why));
	if (!k || cg_key_fingerprint(k, fp) < 0) {
		fprintf(stderr,
			"callgate key show: %s: %s (the daemon creates the key at first start)\n",
			path, k ? "no raw public key" : why);
		EVP_PKEY_free(k);
		return CG_EXIT_ERROR;
	}
	char *pem = NULL;
	size_t n = 0;
	if (cg_file_read(path, 65536, &pem, &n) == 0)
		fwrite(pem, 1, n, stdout);
	free(pem);
	printf("fingerprint: sha256:%s\n", fp);
	EVP_PKEY_free(k);
	return CG_EXIT_OK;
}

int cg_cli_evidence(const struct cg_cli *g, int argc, char **argv)
{
	struct state st = { g->state_dir ? g->state_dir : CG_DEFAULT_STATE_DIR,
			    g->state_dir_from ? g->state_dir_from : "the default",
			    cg_client_host_is_remote(g->host) ? NULL : g->socket_path };
	if (strcmp(argv[0], "replay") == 0)
		return cmd_replay(st, argc, argv);
	if (strcmp(argv[0], "verdict") == 0)
		return cmd_verdict(st, argc, argv);
	if (strcmp(argv[0], "log") == 0)
		return cmd_log(st, argc, argv);
	if (strcmp(argv[0], "evidence") == 0 && argc > 1 && cg_cli_proof_handles(argv[1]))
		return cg_cli_proof(g, argc - 1, argv + 1);
	if (strcmp(argv[0], "evidence") == 0)
		return cmd_evidence(st, argc, argv);
	if (strcmp(argv[0], "key") == 0)
		return cmd_key(st, argc, argv);
	fprintf(stderr, "callgate: %s: not an evidence command\n", argv[0]);
	return CG_EXIT_USAGE;
}
