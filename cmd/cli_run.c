/* SPDX-License-Identifier: MIT */
/*
 * cli_run — `callgate run`, `callgate ping` and `callgate gate`: build one
 * request from the command line, send it, and render the response.
 *
 * run writes the last stage's stdout bytes to stdout and every stage's
 * stderr to stderr, in stage order, and exits with the last stage's exit
 * code; a refusal prints one line "callgate: <type> <code>: <message>
 * (trace <id>)" and exits with the code cli.h documents.
 *
 * Invariants:
 *  - Nothing is run locally: the CLI only talks to the daemon.
 *  - The privileged default is the protocol's (true): the CLI sends
 *    "privileged" only when --privileged or --no-privileged is given.
 *  - A response the CLI cannot read is an error (70), never success.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* Ping and gate answer at once; a dead daemon should not hang the CLI. */
#define QUICK_TIMEOUT_MS 30000

static int refused(const json_t *resp)
{
	const json_t *r = json_object_get(resp, "reply");
	const char *type = json_string_value(json_object_get(r, "type"));
	const char *code = json_string_value(json_object_get(r, "code"));
	const char *msg = json_string_value(json_object_get(r, "message"));
	const char *trace = json_string_value(json_object_get(r, "trace_id"));
	if (!msg)
		msg = json_string_value(json_object_get(resp, "message"));
	fprintf(stderr, "callgate: %s %s: %s (trace %s)\n", type ? type : "?", code ? code : "?",
		msg ? msg : "(no message)", trace ? trace : "-");
	return cg_client_exit_code(resp);
}

/* The daemon could not be asked (69), or answered something unreadable (70). */
static int unreachable(const char *err)
{
	int e = errno;
	fprintf(stderr, "callgate: %s\n", err);
	return e == EPROTO || e == EMSGSIZE ? CG_EXIT_ERROR : CG_EXIT_UNAVAILABLE;
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
	size_t w = fwrite(p, 1, n, f);
	free(p);
	return w == n ? 0 : -1;
}

/* Shared request-building options of run and gate. */
struct req_opts {
	json_t *req;
	bool json;
	const char *actions_file;
	int64_t timeout_ms;
};

/*
 * Parse options up to "--" (or the first non-option). Returns the index of
 * the first pipeline word, or -1 after printing a usage error.
 */
static int parse_opts(int argc, char **argv, struct req_opts *o, bool gate)
{
	json_t *env = NULL;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-')
			break;
		if (strcmp(a, "--json") == 0) {
			o->json = true;
			continue;
		}
		if (strcmp(a, "--privileged") == 0 || strcmp(a, "--no-privileged") == 0) {
			json_object_set_new(o->req, "privileged", json_boolean(a[2] == 'p'));
			continue;
		}
		if (!v) {
			fprintf(stderr, "callgate %s: unknown option or missing value: '%s'\n",
				argv[0], a);
			return -1;
		}
		const char *field = NULL;
		if (strcmp(a, "--reason") == 0)
			field = "reason";
		else if (strcmp(a, "--session") == 0)
			field = "session";
		else if (strcmp(a, "--host") == 0)
			field = "host";
		else if (strcmp(a, "--id") == 0)
			field = "id";
		if (field) {
			json_t *s = json_string(v);
			if (!s) {
				fprintf(stderr, "callgate %s: %s must be UTF-8\n", argv[0], a);
				return -1;
			}
			json_object_set_new(o->req, field, s);
		} else if (strcmp(a, "--cwd") == 0) {
			/* The daemon resolves it; send an absolute path so it
			 * means what it meant in the user's shell. */
			char abs[PATH_MAX];
			if (v[0] != '/') {
				if (!getcwd(abs, sizeof(abs)) ||
				    strlen(abs) + 1 + strlen(v) + 1 > sizeof(abs)) {
					fprintf(stderr, "callgate %s: --cwd: path too long\n",
						argv[0]);
					return -1;
				}
				size_t n = strlen(abs);
				abs[n] = '/';
				memcpy(abs + n + 1, v, strlen(v) + 1);
				v = abs;
			}
			if (json_object_set_new(o->req, "cwd", json_string(v)) != 0) {
				/* Never drop it: the call would run in the default directory. */
				fprintf(stderr, "callgate %s: --cwd must be UTF-8\n", argv[0]);
				return -1;
			}
		} else if (strcmp(a, "--env") == 0) {
			const char *eq = strchr(v, '=');
			if (!eq || eq == v) {
				fprintf(stderr, "callgate %s: --env needs NAME=VALUE, got '%s'\n",
					argv[0], v);
				return -1;
			}
			if (!env) {
				env = json_object();
				json_object_set_new(o->req, "env", env);
			}
			char name[256];
			size_t nl = (size_t)(eq - v);
			if (nl >= sizeof(name)) {
				fprintf(stderr, "callgate %s: --env name too long\n", argv[0]);
				return -1;
			}
			memcpy(name, v, nl);
			name[nl] = '\0';
			if (json_object_set_new(env, name, json_string(eq + 1)) != 0) {
				/* Never drop it: the command would run without the variable. */
				fprintf(stderr, "callgate %s: --env must be UTF-8\n", argv[0]);
				return -1;
			}
		} else if (strcmp(a, "--timeout") == 0) {
			char *end = NULL;
			errno = 0;
			long long ms = strtoll(v, &end, 10);
			if (errno || end == v || *end || ms <= 0) {
				fprintf(stderr, "callgate %s: --timeout needs milliseconds > 0\n",
					argv[0]);
				return -1;
			}
			o->timeout_ms = ms;
			json_object_set_new(o->req, "timeout_ms", json_integer(ms));
		} else if (gate && strcmp(a, "--actions") == 0) {
			o->actions_file = v;
		} else {
			fprintf(stderr, "callgate %s: unknown option '%s'\n", argv[0], a);
			return -1;
		}
		i++;
	}
	return i;
}

int cg_cli_run(const struct cg_cli *g, int argc, char **argv)
{
	int ret = CG_EXIT_USAGE;
	struct req_opts o = { .req = json_object() };
	json_t *resp = NULL;
	if (!o.req)
		return CG_EXIT_ERROR;
	int first = parse_opts(argc, argv, &o, false);
	if (first < 0)
		goto usage;
	json_t *pipe = cg_cli_pipeline(argc - first, argv + first);
	if (!pipe) {
		fprintf(stderr, "callgate run: need a command: run [opts] -- CMD ARGS [| CMD "
				"ARGS]... (no empty stage; arguments must be UTF-8)\n");
		goto usage;
	}
	json_object_set_new(o.req, "pipeline", pipe);
	char err[512];
	/* No client deadline: approval may take a human's time. */
	if (cg_client_call(g->socket_path, o.req, 0, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(err);
		goto release;
	}
	if (o.json) {
		print_json(resp);
		fflush(stdout);
	}
	const char *status = json_string_value(json_object_get(resp, "status"));
	if (!status || strcmp(status, "ok") != 0) {
		ret = o.json ? cg_client_exit_code(resp) : refused(resp);
		goto release;
	}
	const json_t *stages = json_object_get(resp, "stages");
	size_t n = json_array_size(stages);
	if (!json_is_array(stages) || n == 0) {
		fprintf(stderr, "callgate: the response has no stages\n");
		ret = CG_EXIT_ERROR;
		goto release;
	}
	bool lost = false; /* output the user did not get: not the command's exit code */
	if (!o.json) {
		if (write_b64(json_object_get(resp, "stdout"), stdout) < 0) {
			fprintf(stderr, "callgate: stdout could not be decoded or written\n");
			lost = true;
		}
		if (fflush(stdout) != 0)
			lost = true;
		for (size_t i = 0; i < n; i++) {
			const json_t *st = json_array_get(stages, i);
			if (write_b64(json_object_get(st, "stderr"), stderr) < 0) {
				fprintf(stderr, "callgate: stage %zu stderr could not be decoded\n",
					i);
				lost = true;
			}
			if (json_is_true(json_object_get(st, "stderr_truncated")))
				fprintf(stderr, "callgate: stage %zu stderr was truncated\n", i);
		}
		if (json_is_true(json_object_get(resp, "stdout_truncated")))
			fprintf(stderr, "callgate: stdout was truncated at the output cap\n");
	}
	json_t *ec = json_object_get(json_array_get(stages, n - 1), "exit_code");
	if (!json_is_integer(ec)) {
		fprintf(stderr, "callgate: the response has no exit code\n");
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
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			as_json = true;
		else {
			fprintf(stderr, "usage: callgate ping [--json]\n");
			return CG_EXIT_USAGE;
		}
	}
	json_t *req = json_pack("{s:s}", "action", "ping");
	json_t *resp = NULL;
	char err[512];
	int ret;
	if (!req)
		return CG_EXIT_ERROR;
	if (cg_client_call(g->socket_path, req, QUICK_TIMEOUT_MS, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(err);
		goto release;
	}
	if (as_json)
		print_json(resp);
	ret = cg_client_exit_code(resp);
	if (ret != CG_EXIT_OK) {
		if (!as_json)
			(void)refused(resp);
		goto release;
	}
	if (!as_json) {
		const json_t *r = json_object_get(resp, "reply");
		const char *msg = json_string_value(json_object_get(r, "message"));
		printf("%s\n", msg ? msg : "callgate is alive.");
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

int cg_cli_gate(const struct cg_cli *g, int argc, char **argv)
{
	int ret = CG_EXIT_USAGE;
	struct req_opts o = { .req = json_pack("{s:s}", "action", "gate") };
	json_t *resp = NULL;
	if (!o.req)
		return CG_EXIT_ERROR;
	int first = parse_opts(argc, argv, &o, true);
	if (first < 0)
		goto usage;
	if (o.actions_file) {
		json_error_t jerr;
		json_t *acts = json_load_file(o.actions_file, JSON_REJECT_DUPLICATES, &jerr);
		if (json_is_object(acts) && json_is_array(json_object_get(acts, "actions"))) {
			json_t *inner = json_incref(json_object_get(acts, "actions"));
			json_decref(acts);
			acts = inner;
		}
		if (!json_is_array(acts)) {
			fprintf(stderr, "callgate gate: %s: %s\n", o.actions_file,
				acts ? "expected a JSON array of actions" : jerr.text);
			json_decref(acts);
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
		fprintf(stderr, "usage: callgate gate [--json] [opts] -- CMD ARGS [| CMD ARGS]...\n"
				"       callgate gate [--json] --actions FILE.json\n");
		goto usage;
	}
	char err[512];
	if (cg_client_call(g->socket_path, o.req, QUICK_TIMEOUT_MS, &resp, err, sizeof(err)) < 0) {
		ret = unreachable(err);
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
		ret = o.json ? cg_client_exit_code(resp) : refused(resp);
		if (ret == CG_EXIT_OK)
			ret = CG_EXIT_ERROR; /* no decision is not a pass */
		goto release;
	}
	if (!o.json) {
		const char *trace = json_string_value(json_object_get(r, "trace_id"));
		printf("decision:    %s\n", decision);
		print_rules(data);
		const json_t *cons = json_object_get(data, "constraints");
		char *cs = cons && json_array_size(cons) ? json_dumps(cons, JSON_COMPACT) : NULL;
		printf("constraints: %s\n", cs ? cs : "none");
		free(cs);
		printf("trace:       %s\n", trace ? trace : "-");
	}
	/* As a check mode: exit 0 only when the call would run (doas -C style). */
	ret = strcmp(decision, "ALLOW") == 0 || strcmp(decision, "DEGRADE") == 0 ? CG_EXIT_OK
										 : CG_EXIT_DENIED;
	goto release;
usage:
	ret = CG_EXIT_USAGE;
release:
	json_decref(resp);
	json_decref(o.req);
	return ret;
}
