/* SPDX-License-Identifier: MIT */
/*
 * cli_evidence — the evidence tools: `callgate replay`, `verdict`, `log`,
 * `evidence rebuild` and `key show` (docs/evidence.md, callgate-evidence(1)).
 *
 * They read the daemon's state directory directly (no socket): evidence
 * must stay verifiable when the daemon is stopped or gone.
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

#include "cli.h"
#include "evidence.h"
#include "journal.h"
#include "replay.h"
#include "key.h"
#include "util.h"

#define EXIT_FAIL 1 /* replay FAIL, or the trace asked for does not exist */

/* Print s with control characters replaced (terminal-escape injection). */
static void put_safe(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n && s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
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

static int cmd_replay(const char *state_dir, int argc, char **argv)
{
	struct cg_replay_opts o = { .state_dir = state_dir, .write_files = true };
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--all") == 0)
			o.all = true;
		else if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--no-write") == 0)
			o.write_files = false;
		else if (strcmp(argv[i], "--pubkey") == 0 && i + 1 < argc)
			o.pubkey_file = argv[++i];
		else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			o.state_dir = argv[++i];
		else if (argv[i][0] != '-' && !o.trace_id)
			o.trace_id = argv[i];
		else
			goto usage;
	}
	if (o.all == (o.trace_id != NULL))
		goto usage;
	if (o.trace_id && !cg_trace_id_valid(o.trace_id)) {
		fprintf(stderr, "callgate replay: '%s' is not a trace id\n", o.trace_id);
		return CG_EXIT_USAGE;
	}
	json_t *rep = NULL;
	int rc = cg_replay_run(&o, &rep);
	if (rc < 0) {
		fprintf(stderr, "callgate replay: %s\n", strerror(errno));
		json_decref(rep);
		return CG_EXIT_ERROR;
	}
	if (json) {
		json_dumpf(rep, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
	} else {
		json_t *j = json_object_get(rep, "journal");
		json_t *s = json_object_get(rep, "summary");
		printf("%s  journal: %lld events, head %.16s…, signed up to seq %lld%s\n",
		       str_of(rep, "status"),
		       (long long)json_integer_value(json_object_get(j, "events")),
		       str_of(j, "head"),
		       (long long)json_integer_value(json_object_get(j, "checkpoint_seq")),
		       json_is_true(json_object_get(j, "live")) ? " (daemon running)" : "");
		if (o.all)
			printf("traces: %lld pass, %lld fail, %lld incomplete, %lld open\n",
			       (long long)json_integer_value(json_object_get(s, "pass")),
			       (long long)json_integer_value(json_object_get(s, "fail")),
			       (long long)json_integer_value(json_object_get(s, "incomplete")),
			       (long long)json_integer_value(json_object_get(s, "open")));
		else {
			json_t *t = json_array_get(json_object_get(rep, "traces"), 0);
			printf("trace %s: %s (%s, %lld events)\n", o.trace_id, str_of(t, "status"),
			       str_of(t, "state"),
			       (long long)json_integer_value(json_object_get(t, "events")));
		}
		size_t i;
		json_t *f;
		json_array_foreach(json_object_get(rep, "failures"), i, f)
		{
			print_failure(f);
		}
	}
	json_decref(rep);
	return rc == 0 ? CG_EXIT_OK : EXIT_FAIL;
usage:
	fprintf(stderr, "usage: callgate replay [--state-dir DIR] [--pubkey FILE] [--json] "
			"[--no-write] TRACE_ID | --all\n");
	return CG_EXIT_USAGE;
}

static int cmd_verdict(const char *state_dir, int argc, char **argv)
{
	const char *id = NULL;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			state_dir = argv[++i];
		else if (argv[i][0] != '-' && !id)
			id = argv[i];
		else
			id = NULL, i = argc;
	}
	if (!id || !cg_trace_id_valid(id)) {
		fprintf(stderr, "usage: callgate verdict [--state-dir DIR] TRACE_ID [--json]\n");
		return CG_EXIT_USAGE;
	}
	char path[4300];
	snprintf(path, sizeof(path), "%s/traces/%s/%s", state_dir, id,
		 json ? "verdict.json" : "verdict.md");
	char *p = NULL;
	size_t n = 0;
	if (cg_file_read(path, 16u << 20, &p, &n) < 0) {
		fprintf(stderr,
			"callgate verdict: no verdict for trace %s (%s); if the journal holds it, "
			"`callgate evidence rebuild %s` recreates the package\n",
			id, strerror(errno), id);
		return EXIT_FAIL;
	}
	if (json)
		fwrite(p, 1, n, stdout);
	else
		for (size_t i = 0; i < n; i++) /* newlines kept, other controls replaced */
			fputc(p[i] == '\n' || !((unsigned char)p[i] < 0x20 || p[i] == 0x7f) ? p[i]
											    : '?',
			      stdout);
	free(p);
	return CG_EXIT_OK;
}

/* --since: RFC 3339, or a age like 90s, 15m, 2h, 7d. */
static int parse_since(const char *s, int64_t *out)
{
	if (cg_parse_time(s, out) == 0)
		return 0;
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v < 0 || strlen(end) != 1)
		return -1;
	int64_t unit = *end == 's'   ? 1
		       : *end == 'm' ? 60
		       : *end == 'h' ? 3600
		       : *end == 'd' ? 86400
				     : 0;
	if (!unit || v > INT64_MAX / unit / 1000000000)
		return -1;
	*out = cg_now_wall_ns() - (int64_t)v * unit * 1000000000;
	return 0;
}

static int cmd_log(const char *state_dir, int argc, char **argv)
{
	const char *trace = NULL, *decision = NULL, *session = NULL;
	int64_t since = INT64_MIN;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (strcmp(a, "--json") == 0)
			json = true;
		else if (strcmp(a, "--trace") == 0 && has)
			trace = argv[++i];
		else if (strcmp(a, "--decision") == 0 && has)
			decision = argv[++i];
		else if (strcmp(a, "--session") == 0 && has)
			session = argv[++i];
		else if (strcmp(a, "--state-dir") == 0 && has)
			state_dir = argv[++i];
		else if (strcmp(a, "--since") == 0 && has) {
			if (parse_since(argv[++i], &since) < 0) {
				fprintf(stderr,
					"callgate log: --since wants RFC 3339 or NUMBER[smhd]\n");
				return CG_EXIT_USAGE;
			}
		} else {
			fprintf(stderr,
				"usage: callgate log [--since T] [--trace ID] [--decision D] "
				"[--session S] [--json] [--state-dir DIR]\n");
			return CG_EXIT_USAGE;
		}
	}
	struct cg_journal_view jv;
	if (cg_journal_load(state_dir, &jv, NULL) < 0) {
		fprintf(stderr, "callgate log: cannot read the journal under %s: %s\n", state_dir,
			strerror(errno));
		return CG_EXIT_ERROR;
	}
	/* Trace-level filters need a first pass: which traces match. */
	struct cg_smap *match = NULL;
	static int yes = 1;
	if (decision || session) {
		struct cg_smap *dec = cg_smap_new(), *ses = cg_smap_new();
		match = cg_smap_new();
		for (size_t i = 0; match && dec && ses && i < jv.n; i++) {
			const struct cg_evline *o = &jv.v[i];
			if (decision && o->type == CG_EV_DECISION &&
			    strcasecmp(o->decision, decision) == 0)
				(void)cg_smap_put(dec, o->trace, &yes);
			if (session && o->type == CG_EV_REQUEST) {
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
		for (size_t i = 0; match && dec && ses && i < jv.n; i++) {
			const char *t = jv.v[i].trace;
			if ((!decision || cg_smap_get(dec, t)) && (!session || cg_smap_get(ses, t)))
				(void)cg_smap_put(match, t, &yes);
		}
		cg_smap_free(dec, NULL);
		cg_smap_free(ses, NULL);
	}
	for (size_t i = 0; i < jv.n; i++) {
		const struct cg_evline *o = &jv.v[i];
		if (trace && strcmp(o->trace, trace) != 0)
			continue;
		if (match && !cg_smap_get(match, o->trace))
			continue;
		int64_t ts;
		if (since != INT64_MIN && (cg_parse_time(o->ts, &ts) < 0 || ts < since))
			continue;
		if (json) {
			fwrite(o->line, 1, o->line_len, stdout);
			continue;
		}
		char head[200];
		snprintf(head, sizeof(head), "%s %8llu %s %-18s ", o->ts,
			 (unsigned long long)o->seq, o->trace, o->type_name);
		put_safe(stdout, head, sizeof(head));
		size_t n = o->payload_len > 160 ? 160 : o->payload_len;
		put_safe(stdout, o->line + o->payload_off, n);
		fputs(n < o->payload_len ? "…\n" : "\n", stdout);
	}
	cg_smap_free(match, NULL);
	cg_journal_view_free(&jv);
	return CG_EXIT_OK;
}

static int cmd_evidence(const char *state_dir, int argc, char **argv)
{
	const char *id = NULL;
	bool all = false;
	int i = 1;
	if (i >= argc || strcmp(argv[i], "rebuild") != 0)
		goto usage;
	for (i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--all") == 0)
			all = true;
		else if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			state_dir = argv[++i];
		else if (argv[i][0] != '-' && !id && cg_trace_id_valid(argv[i]))
			id = argv[i];
		else
			goto usage;
	}
	if (all == (id != NULL))
		goto usage;
	int n = cg_evidence_rebuild(state_dir, id);
	if (n < 0) {
		fprintf(stderr, "callgate evidence rebuild: %s\n",
			errno == ENOENT ? "the journal holds no such trace" : strerror(errno));
		return errno == ENOENT ? EXIT_FAIL : CG_EXIT_ERROR;
	}
	printf("rebuilt %d trace package(s) from the journal\n", n);
	return CG_EXIT_OK;
usage:
	fprintf(stderr, "usage: callgate evidence rebuild [--state-dir DIR] TRACE_ID | --all\n");
	return CG_EXIT_USAGE;
}

static int cmd_key(const char *state_dir, int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "show") != 0)
		goto usage;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < argc)
			state_dir = argv[++i];
		else
			goto usage;
	}
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
usage:
	fprintf(stderr, "usage: callgate key show [--state-dir DIR]\n");
	return CG_EXIT_USAGE;
}

int cg_cli_evidence(const struct cg_cli *g, int argc, char **argv)
{
	const char *sd = g->state_dir;
	if (strcmp(argv[0], "replay") == 0)
		return cmd_replay(sd, argc, argv);
	if (strcmp(argv[0], "verdict") == 0)
		return cmd_verdict(sd, argc, argv);
	if (strcmp(argv[0], "log") == 0)
		return cmd_log(sd, argc, argv);
	if (strcmp(argv[0], "evidence") == 0 && argc > 1 && cg_cli_proof_handles(argv[1]))
		return cg_cli_proof(g, argc - 1, argv + 1);
	if (strcmp(argv[0], "evidence") == 0)
		return cmd_evidence(sd, argc, argv);
	if (strcmp(argv[0], "key") == 0)
		return cmd_key(sd, argc, argv);
	fprintf(stderr, "callgate: %s: not an evidence command\n", argv[0]);
	return CG_EXIT_USAGE;
}
