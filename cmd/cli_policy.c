/* SPDX-License-Identifier: MIT */
/*
 * cli_policy — `callgate policy check|explain|test|dump|keygen|sign|verify|diff`:
 * the policy author's tools. They work without a daemon.
 *
 * explain and test decide exactly as the daemon does, through the library's
 * one gate (cg_gate_decide: decode with the policy's rules, the policy's
 * defaults such as defaults.cwd, resolution over the --workspace
 * directories, the chain of cg_policy_register_rungs). The request is built
 * as a JSON object and encoded as the line a client would send. So an
 * invalid request (a dangerous env name, a command that does not resolve)
 * shows up as the I reply it would get.
 *
 * Exit codes (documented in callgate-policy(1)):
 *   explain: 0 ALLOW/DEGRADE, 75 UNKNOWN (deferred to a human), 77 BLOCK,
 *            65 the request is invalid (an I reply), 70 a system error (E).
 *   test:    0 every case passed and every rule was exercised, 1 otherwise,
 *            65 the policy or the case file does not load.
 *   check:   0 loads and lints clean, 1 loads with lint findings, 65 does
 *            not load (or its signature does not verify, with --pubkey).
 *   dump:    0, or 65 when the policy does not load.
 *   keygen/sign: 0, or 70. verify: 0 verified, 1 signature missing or
 *            invalid, 70 key or policy unreadable.
 *   diff:    0 no recorded call would change, 1 some would, 65 the
 *            candidate does not load, 66 no journal.
 *   64 for a bad command line, everywhere.
 *
 * Invariants:
 *  - Nothing is ever executed: these tools only decide.
 *  - No parallel implementation of any decision step: every step is the
 *    library's own function, so the tools cannot drift from the daemon.
 *  - The privileged default is the protocol's (true) unless the command
 *    line or the case says otherwise.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#include "chain.h"
#include "cli.h"
#include "gate.h"
#include "policy.h"
#include "replay.h"
#include "sign.h"
#include "util.h"
#include "verdict.h"
#include "wire.h"
#include "world.h"

/* test/check: the policy loads but something is wrong with it. */
#define EXIT_FINDINGS 1

#define MAX_WORKSPACES 16
#define MAX_YAML_DEPTH 32
#define MAX_CASES      100000

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("callgate policy: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nusage: callgate policy check FILE [--json] [--pubkey KEY [--sig SIG]]\n"
	      "       callgate policy explain [--policy FILE] [--json] [--workspace DIR]... "
	      "[--cwd DIR]\n"
	      "               [--privileged|--no-privileged] [--env NAME=VALUE]... "
	      "[--session S] [--host H]\n"
	      "               [--uid N] [--gid N] [--actions FILE|JSON] [-- CMD ARGS [| CMD "
	      "ARGS]...]\n"
	      "       callgate policy test FILE CASES.yaml [--workspace DIR]... [--json] "
	      "[--verbose]\n"
	      "       callgate policy dump [FILE]\n"
	      "       callgate policy keygen PRIVATE_KEY PUBLIC_KEY\n"
	      "       callgate policy sign --key PRIVATE_KEY [--out SIG] FILE\n"
	      "       callgate policy verify --pubkey PUBLIC_KEY [--sig SIG] FILE\n"
	      "       callgate policy diff --journal [OPTIONS] CANDIDATE.yaml\n"
	      "See callgate-policy(1).\n",
	      stderr);
	return CG_EXIT_USAGE;
}

/* Print a reply as one line: "callgate policy: E MCP-CFG-E-102: message". */
static void print_reply(FILE *f, const struct cg_reply *r)
{
	const struct cg_reply_def *d = cg_reply_def_of(r);
	char *msg = cg_reply_message(r);
	fprintf(f, "callgate policy: %c %s: %s\n", cg_rtype_char(d->type), d->code,
		msg ? msg : d->key);
	free(msg);
}

static void print_json(const json_t *j, size_t flags)
{
	char *s = json_dumps(j, flags | JSON_ENSURE_ASCII);
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
	}
	free(s);
}

/* Load FILE, or the embedded default for NULL. Prints the reply on failure. */
static struct cg_policy *load_policy(const char *path)
{
	struct cg_policy *p = NULL;
	struct cg_reply *err = NULL;
	int rc = path ? cg_policy_load_file(path, &p, &err) : cg_policy_load_default(&p, &err);
	if (rc != 0) {
		if (err)
			print_reply(stderr, err);
		else
			fprintf(stderr, "callgate policy: the policy could not be loaded\n");
		cg_reply_free(err);
		return NULL;
	}
	return p;
}

/* ---- options and help (one table per subcommand) ------------------------ */

static const struct cg_cli_opt explain_opts[] = {
	{ "--policy", "FILE", "decide with this policy (default: the embedded one)" },
	{ "--json", NULL, "print the decision as JSON" },
	{ "--workspace", "DIR", "a workspace the call may work in (repeatable; default: .)" },
	{ "--cwd", "DIR", "the request's working directory" },
	{ "--privileged", NULL, "ask as a privileged call (the protocol's default)" },
	{ "--no-privileged", NULL, "ask as an unprivileged call (or CALLGATE_PRIVILEGED=0)" },
	{ "--env", "NAME=VALUE", "an environment variable of the request (repeatable)" },
	{ "--session", "S", "the request's session" },
	{ "--host", "H", "the request's host" },
	{ "--reason", "TEXT", "the request's reason" },
	{ "--uid", "N", "decide as this peer uid" },
	{ "--gid", "N", "decide as this peer gid" },
	{ "--actions", "FILE|JSON",
	  "abstract actions instead of a pipeline: a JSON array, inline or in FILE (- stdin)" },
	{ 0 },
};

static const struct cg_cli_opt test_opts[] = {
	{ "--workspace", "DIR", "a workspace the cases may work in (repeatable; default: .)" },
	{ "--json", NULL, "print the results as JSON" },
	{ "--verbose", NULL, "print passing cases too (also -v)" },
	{ "--rules", "ID,...", "require only these rules to be exercised (default: every rule)" },
	{ 0 },
};

static const struct cg_cli_opt check_opts[] = {
	{ "--json", NULL, "print the findings as JSON" },
	{ "--pubkey", "KEY", "require a valid signature by this public key" },
	{ "--sig", "SIG", "the signature file (default: FILE.sig)" },
	{ 0 },
};

static const struct cg_cli_opt no_opts[] = { { 0 } };

static const struct cg_cli_opt sign_opts[] = {
	{ "--key", "PRIVATE_KEY", "the Ed25519 private key to sign with" },
	{ "--out", "SIG", "where to write the signature (default: FILE.sig)" },
	{ 0 },
};

static const struct cg_cli_opt verify_opts[] = {
	{ "--pubkey", "PUBLIC_KEY", "the public key the signature must verify against" },
	{ "--sig", "SIG", "the signature file (default: FILE.sig)" },
	{ 0 },
};

/* ---- the decision harness shared by explain and test -------------------- */

/* Everything a decision needs that does not change between requests. */
struct harness {
	struct cg_policy *policy;
	struct cg_world world;
	struct cg_chain chain;
	struct cg_gate_ctx ctx; /* the gate's view of the three above */
};

static int harness_init(struct harness *h, struct cg_policy *p, const char *const *ws, size_t n_ws)
{
	memset(h, 0, sizeof(*h));
	h->policy = p;
	char cwd[PATH_MAX];
	const char *here[1] = { cwd };
	if (n_ws == 0) {
		if (!getcwd(cwd, sizeof(cwd))) {
			fprintf(stderr, "callgate policy: getcwd: %s\n", strerror(errno));
			return -1;
		}
		ws = here;
		n_ws = 1;
	}
	struct cg_reply *err = NULL;
	if (cg_world_init(&h->world, ws, n_ws, &err) != 0) {
		print_reply(stderr, err);
		cg_reply_free(err);
		return -1;
	}
	if (cg_policy_register_rungs(&h->chain, p) != 0) {
		fprintf(stderr, "callgate policy: the policy's rungs could not be registered\n");
		cg_world_fini(&h->world);
		return -1;
	}
	h->ctx = (struct cg_gate_ctx){ .policy = p, .chain = &h->chain, .world = &h->world };
	return 0;
}

static void harness_fini(struct harness *h)
{
	cg_world_fini(&h->world);
}

/* The outcome of one request: either a refusal before the chain, or a fold. */
struct outcome {
	struct cg_gate gate;	  /* the gate's result (owned) */
	struct cg_reply *refusal; /* I or E reply from decode/resolve (in gate), or NULL */
	struct cg_folded folded;  /* valid when refusal is NULL */
	json_t *stages;		  /* [{argv0, exe, via_symlink}] as resolved, or NULL */
};

static void outcome_fini(struct outcome *o)
{
	cg_gate_fini(&o->gate);
	json_decref(o->stages);
	memset(o, 0, sizeof(*o));
}

/*
 * Decide one request object (borrowed; "time" is added to a copy) through
 * the library's one gate, as the daemon does. Always fills *o; returns 0, or
 * -1 on a local failure (OOM).
 */
static int harness_decide(struct harness *h, const json_t *request, const struct cg_peer *peer,
			  struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	json_t *req = json_deep_copy(request);
	if (!req)
		return -1;
	if (!json_object_get(req, "time")) {
		char t[40];
		cg_format_time(cg_now_wall_ns(), t, sizeof(t));
		json_object_set_new(req, "time", json_string(t));
	}
	/* The request as the daemon would receive it: one line, through the codec. */
	char *line = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!line)
		return -1;
	int rc =
	    cg_gate_decide(&h->ctx, line, strlen(line), true, false, peer, NULL, NULL, &o->gate);
	free(line);
	if (rc != 0) {
		o->refusal = o->gate.refusal;
		return 0;
	}
	o->folded = o->gate.folded;
	const struct cg_call *call = &o->gate.call;
	o->stages = json_array();
	for (size_t i = 0; o->gate.resolved && o->stages && i < call->n_stages; i++)
		json_array_append_new(
		    o->stages,
		    json_pack("{s:s,s:s,s:s,s:b}", "argv0", o->gate.req->stages[i].argv[0], "found",
			      call->stages[i].found ? call->stages[i].found : "", "exe",
			      call->stages[i].exe, "via_symlink", call->stages[i].via_symlink));
	return 0;
}

/* "ALLOW" … "BLOCK", or "INVALID" (an I reply) / "ERROR" (an E reply). */
static const char *outcome_name(const struct outcome *o)
{
	if (o->refusal)
		return cg_reply_def_of(o->refusal)->type == CG_RTYPE_I ? "INVALID" : "ERROR";
	return cg_decision_name(o->folded.decision);
}

static const char *outcome_code(const struct outcome *o)
{
	if (o->refusal)
		return cg_reply_def_of(o->refusal)->code;
	return cg_reply_registry[o->folded.reason].code;
}

static json_t *outcome_to_json(const struct outcome *o)
{
	json_t *j;
	if (o->refusal) {
		j = json_pack("{s:s,s:o}", "decision", outcome_name(o), "reply",
			      cg_reply_to_json(o->refusal));
	} else {
		j = cg_folded_to_json(&o->folded);
	}
	if (j && o->stages)
		json_object_set(j, "stages", o->stages);
	return j;
}

/* ---- explain ------------------------------------------------------------ */

static void explain_print(const struct cg_policy *p, const struct outcome *o, bool ws_given)
{
	printf("policy:    %s (sha256 %s)\n", cg_policy_source(p), cg_policy_sha256(p));
	/*
	 * Where the call was judged: rules read the workspace (rm -rf . is
	 * another call in a project than at its root: ux-s41 M4), and without
	 * --workspace it is the current directory, not the daemon's.
	 */
	if (o->gate.resolved)
		printf("workspace: %s%s\ncwd:       %s%s\n", o->gate.call.workspace,
		       ws_given ? ""
				: " (the current directory: give the daemon's with --workspace)",
		       o->gate.call.cwd,
		       o->gate.req && o->gate.req->cwd
			   ? ""
			   : " (the request names none, as the daemon would judge it; run and gate "
			     "send theirs: --cwd DIR)");
	if (o->refusal) {
		char *msg = cg_reply_message(o->refusal);
		printf("decision:  %s\nreply:     %s %s\nmessage:   %s\n", outcome_name(o),
		       outcome_code(o), cg_reply_def_of(o->refusal)->key, msg ? msg : "");
		free(msg);
		return;
	}
	size_t i;
	json_t *st;
	json_array_foreach(o->stages, i, st)
	{
		const char *found = json_string_value(json_object_get(st, "found"));
		printf("stage %zu:   %s -> %s", i + 1,
		       json_string_value(json_object_get(st, "argv0")),
		       json_string_value(json_object_get(st, "exe")));
		if (json_is_true(json_object_get(st, "via_symlink")))
			printf(" (resolved from %s)", found ? found : "?");
		putchar('\n');
	}
	const struct cg_folded *f = &o->folded;
	printf("decision:  %s\nrule:      %s\nreason:    %s %s\n", cg_decision_name(f->decision),
	       f->rule_id ? f->rule_id : "-", cg_reply_registry[f->reason].code,
	       cg_reply_registry[f->reason].key);
	if (f->why)
		printf("why:       %s\n", f->why);
	if (f->decision == CG_UNKNOWN)
		printf("approvers: %d\n", (int)f->approvers);
	printf("rungs:\n");
	for (size_t k = 0; k < f->n_rungs; k++) {
		const struct cg_verdict *v = &f->rungs[k].v;
		printf("  %-10s rank %-4d %-8s rule %-28s %s%s\n", f->rungs[k].rung,
		       f->rungs[k].rank, cg_decision_name(v->decision),
		       v->rule_id ? v->rule_id : "-", cg_reply_registry[v->reason].code,
		       f->rungs[k].rc ? " (failed)" : "");
	}
	json_t *cons = json_array(), *per_stage = json_array(), *names = json_array();
	for (size_t k = 0; k < f->n_constraints; k++)
		json_array_append_new(cons, cg_constraints_to_json(f->constraints[k]));
	json_array_foreach(o->stages, i, st)
	{
		json_array_append_new(per_stage, cg_folded_stage_sets(f, i));
		json_array_append(names, json_object_get(st, "argv0"));
	}
	/* In words, as gate prints them (ux-s39 L3: text output never holds JSON). */
	printf("constraints:");
	cg_cli_print_constraints(stdout, "          ", cons, per_stage, names,
				 o->gate.req && o->gate.req->privileged);
	json_decref(cons);
	json_decref(per_stage);
	json_decref(names);
}

static int outcome_exit(const struct outcome *o)
{
	if (o->refusal)
		return cg_reply_def_of(o->refusal)->type == CG_RTYPE_I ? CG_EXIT_INVALID
								       : CG_EXIT_ERROR;
	switch (o->folded.decision) {
	case CG_ALLOW:
	case CG_DEGRADE:
		return CG_EXIT_OK;
	case CG_UNKNOWN:
		return CG_EXIT_DEFERRED;
	default:
		return CG_EXIT_DENIED;
	}
}

/* Parse a non-negative id (uid/gid). 0 or -1. */
static int parse_id(const char *s, unsigned *out)
{
	char *end = NULL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > 0x7fffffffUL)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* explain's command line: the request being built, and where to decide it. */
struct explain_args {
	const char *policy_path; /* NULL: the embedded default */
	const char *ws[MAX_WORKSPACES];
	size_t n_ws;
	bool as_json;
	struct cg_peer peer;
	json_t *req; /* the request object (owned) */
	json_t *env; /* its env (owned) */
};

/* --env NAME=VALUE into e->env. 0, or the usage exit code. */
static int explain_env(struct explain_args *e, const char *v)
{
	const char *eq = strchr(v, '=');
	if (!eq || eq == v)
		return usage_error("--env needs NAME=VALUE, not '%s'", v);
	char name[256];
	size_t nl = (size_t)(eq - v);
	if (nl >= sizeof(name))
		return usage_error("--env name too long: '%s'", v);
	memcpy(name, v, nl);
	name[nl] = '\0';
	json_object_set_new(e->env, name, json_string(eq + 1));
	return 0;
}

/* One option that takes value v. 0, or the usage exit code. */
static int explain_option(struct explain_args *e, const char *a, const char *v)
{
	if (strcmp(a, "--policy") == 0) {
		e->policy_path = v;
	} else if (strcmp(a, "--workspace") == 0) {
		if (e->n_ws == MAX_WORKSPACES)
			return usage_error("too many --workspace options%s", "");
		e->ws[e->n_ws++] = v;
	} else if (strcmp(a, "--cwd") == 0 || strcmp(a, "--session") == 0 ||
		   strcmp(a, "--host") == 0 || strcmp(a, "--reason") == 0) {
		json_object_set_new(e->req, a + 2, json_string(v));
	} else if (strcmp(a, "--env") == 0) {
		return explain_env(e, v);
	} else if (strcmp(a, "--uid") == 0 || strcmp(a, "--gid") == 0) {
		unsigned id;
		if (parse_id(v, &id) != 0)
			return usage_error("not a uid/gid: '%s'", v);
		if (a[2] == 'u')
			e->peer.uid = id;
		else
			e->peer.gid = id;
	} else if (strcmp(a, "--actions") == 0) {
		char why[256];
		json_t *acts = cg_cli_actions(v, why, sizeof(why));
		if (!acts)
			return usage_error("%s", why);
		json_object_set_new(e->req, "actions", acts);
		json_object_set_new(e->req, "action", json_string("gate"));
	} else {
		return cg_cli_bad_option("policy explain", a, NULL, explain_opts);
	}
	return 0;
}

/* Parse explain's command line into e (whose req and env exist). 0, or the exit code. */
static int explain_parse(int argc, char **argv, struct explain_args *e)
{
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		} else if (strcmp(a, "--json") == 0) {
			e->as_json = true;
		} else if (strcmp(a, "--privileged") == 0) {
			json_object_set_new(e->req, "privileged", json_true());
		} else if (strcmp(a, "--no-privileged") == 0) {
			json_object_set_new(e->req, "privileged", json_false());
		} else if (!v) {
			return cg_cli_bad_option(
			    "policy explain", a,
			    a[0] == '-' && a[1] == '-' ? "unknown option or no value after" : NULL,
			    explain_opts);
		} else if ((rc = explain_option(e, a, v)) != 0) {
			return rc;
		} else {
			i++;
		}
	}
	if (i < argc) {
		json_t *pipe = cg_cli_pipeline(argc - i, argv + i);
		if (!pipe)
			return usage_error("bad pipeline after --%s (empty stage or not UTF-8)",
					   "");
		json_object_set_new(e->req, "pipeline", pipe);
	} else if (!json_object_get(e->req, "actions")) {
		return usage_error("nothing to explain: give -- CMD ARGS or --actions%s", "");
	}
	if (json_object_size(e->env) > 0)
		json_object_set(e->req, "env", e->env);
	/* As gate does (ux-s40 M3: the two disagreed with it exported). */
	if (!json_object_get(e->req, "privileged") &&
	    cg_cli_privileged_from_env("policy explain", e->req) != 0)
		return CG_EXIT_USAGE;
	return 0;
}

/* Decide e's request through the gate and print it. Returns the exit code. */
static int explain_run(const struct explain_args *e)
{
	int rc;
	struct cg_policy *p = load_policy(e->policy_path);
	if (!p)
		return CG_EXIT_INVALID;
	struct harness h;
	if (harness_init(&h, p, e->ws, e->n_ws) != 0) {
		rc = CG_EXIT_ERROR;
		goto unref_policy;
	}
	struct outcome o;
	if (harness_decide(&h, e->req, &e->peer, &o) != 0) {
		fprintf(stderr, "callgate policy: out of memory\n");
		rc = CG_EXIT_ERROR;
		goto fini_harness;
	}
	if (e->as_json) {
		json_t *j = outcome_to_json(&o);
		if (j) {
			json_object_set_new(j, "policy",
					    json_pack("{s:s,s:s}", "source", cg_policy_source(p),
						      "sha256", cg_policy_sha256(p)));
			print_json(j, JSON_INDENT(2) | JSON_SORT_KEYS);
		}
		json_decref(j);
	} else {
		explain_print(p, &o, e->n_ws > 0);
	}
	rc = outcome_exit(&o);
	outcome_fini(&o);
fini_harness:
	harness_fini(&h);
unref_policy:
	cg_policy_unref(p);
	return rc;
}

static int cmd_explain(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate policy explain [OPTIONS] [-- CMD ARGS [| CMD ARGS]...]",
		    "Decide one request as the daemon would, without running it.\n"
		    "Exit: 0 ALLOW/DEGRADE, 75 UNKNOWN, 77 BLOCK, 65 invalid, 70 "
		    "error.",
		    explain_opts);
	struct explain_args e = { .peer = { .pid = getpid(), .uid = getuid(), .gid = getgid() },
				  .req = json_object(),
				  .env = json_object() };
	int rc = !e.req || !e.env ? CG_EXIT_ERROR : explain_parse(argc, argv, &e);
	if (rc == 0)
		rc = explain_run(&e);
	json_decref(e.env);
	json_decref(e.req);
	return rc;
}

/* ---- YAML case tables --------------------------------------------------- */

/* Expand ${NAME} (upper-case names only) from the environment into a new string. */
static char *expand_vars(const char *s, char *err, size_t err_len)
{
	size_t cap = strlen(s) + 1, n = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	for (const char *q = s; *q;) {
		const char *val = NULL;
		size_t skip = 1, vl = 1;
		if (q[0] == '$' && q[1] == '{') {
			size_t k = 2;
			while ((q[k] >= 'A' && q[k] <= 'Z') || (q[k] >= '0' && q[k] <= '9') ||
			       q[k] == '_')
				k++;
			if (k > 2 && q[k] == '}') {
				char name[128];
				if (k - 2 >= sizeof(name)) {
					snprintf(err, err_len, "variable name too long in '%s'", s);
					free(out);
					return NULL;
				}
				memcpy(name, q + 2, k - 2);
				name[k - 2] = '\0';
				val = getenv(name);
				if (!val) {
					snprintf(err, err_len,
						 "${%s} is not set in the environment", name);
					free(out);
					return NULL;
				}
				skip = k + 1;
				vl = strlen(val);
			}
		}
		if (!val) {
			val = q;
			vl = 1;
		}
		if (n + vl + 1 > cap) {
			cap = (n + vl + 1) * 2;
			char *t = realloc(out, cap);
			if (!t) {
				free(out);
				return NULL;
			}
			out = t;
		}
		memcpy(out + n, val, vl);
		n += vl;
		q += skip;
	}
	out[n] = '\0';
	return out;
}

/*
 * A YAML node as JSON. Plain scalars true/false/null and canonical decimal
 * integers become JSON booleans, null and integers; everything else is a
 * string (with ${NAME} expanded). Duplicate mapping keys are refused.
 */
static json_t *yaml_to_json(yaml_document_t *doc, yaml_node_t *n, int depth, char *err,
			    size_t err_len)
{
	if (!n || depth > MAX_YAML_DEPTH) {
		snprintf(err, err_len, "nesting deeper than %d", MAX_YAML_DEPTH);
		return NULL;
	}
	switch (n->type) {
	case YAML_SCALAR_NODE: {
		const char *s = (const char *)n->data.scalar.value;
		if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
			if (strcmp(s, "true") == 0)
				return json_true();
			if (strcmp(s, "false") == 0)
				return json_false();
			if (strcmp(s, "null") == 0 || strcmp(s, "~") == 0)
				return json_null();
			char *end = NULL;
			errno = 0;
			long long v = strtoll(s, &end, 10);
			char back[32];
			snprintf(back, sizeof(back), "%lld", v);
			if (*s && !errno && end && !*end && strcmp(back, s) == 0)
				return json_integer(v);
		}
		char *x = expand_vars(s, err, err_len);
		if (!x)
			return NULL;
		json_t *j = json_string(x);
		if (!j)
			snprintf(err, err_len, "line %zu: not valid UTF-8",
				 (size_t)n->start_mark.line + 1);
		free(x);
		return j;
	}
	case YAML_SEQUENCE_NODE: {
		json_t *a = json_array();
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     a && it < n->data.sequence.items.top; it++) {
			json_t *v = yaml_to_json(doc, yaml_document_get_node(doc, *it), depth + 1,
						 err, err_len);
			if (!v) {
				json_decref(a);
				return NULL;
			}
			json_array_append_new(a, v);
		}
		return a;
	}
	case YAML_MAPPING_NODE: {
		json_t *o = json_object();
		for (yaml_node_pair_t *pr = n->data.mapping.pairs.start;
		     o && pr < n->data.mapping.pairs.top; pr++) {
			yaml_node_t *k = yaml_document_get_node(doc, pr->key);
			if (!k || k->type != YAML_SCALAR_NODE) {
				snprintf(err, err_len, "line %zu: a key must be a scalar",
					 k ? (size_t)k->start_mark.line + 1 : 0);
				json_decref(o);
				return NULL;
			}
			const char *key = (const char *)k->data.scalar.value;
			if (json_object_get(o, key)) {
				snprintf(err, err_len, "line %zu: duplicate key '%s'",
					 (size_t)k->start_mark.line + 1, key);
				json_decref(o);
				return NULL;
			}
			json_t *v = yaml_to_json(doc, yaml_document_get_node(doc, pr->value),
						 depth + 1, err, err_len);
			if (!v) {
				json_decref(o);
				return NULL;
			}
			json_object_set_new(o, key, v);
		}
		return o;
	}
	default:
		snprintf(err, err_len, "empty YAML node");
		return NULL;
	}
}

/* Load a YAML file as JSON. NULL with a message in err. */
static json_t *load_yaml(const char *path, char *err, size_t err_len)
{
	char *buf = NULL;
	size_t len = 0;
	if (cg_sign_read_file(path, &buf, &len) != 0) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return NULL;
	}
	json_t *out = NULL;
	yaml_parser_t parser;
	yaml_document_t doc;
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err, err_len, "out of memory");
		goto free_buf;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, err_len, "%s: line %zu: %s", path,
			 (size_t)parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "YAML error");
		goto free_parser;
	}
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	if (!root)
		snprintf(err, err_len, "%s: empty document", path);
	else
		out = yaml_to_json(&doc, root, 0, err, err_len);
	yaml_document_delete(&doc);
free_parser:
	yaml_parser_delete(&parser);
free_buf:
	free(buf);
	return out;
}

static const char *const case_keys[] = { "name", "pipeline", "env",    "privileged", "session",
					 "host", "peer",     "cwd",    "actions",    "expect",
					 "rule", "code",     "reason", "approvers",  "requires" };
static const char *const expectations[] = { "ALLOW", "DEGRADE", "UNKNOWN",
					    "BLOCK", "INVALID", "ERROR" };

/* Check a case's shape. 0, or -1 with a message in err. */
static int case_check(json_t *c, char *err, size_t err_len)
{
	if (!json_is_object(c)) {
		snprintf(err, err_len, "a case must be a mapping");
		return -1;
	}
	const char *k;
	json_t *v;
	json_object_foreach(c, k, v)
	{
		bool known = false;
		for (size_t i = 0; i < CG_ARRAY_LEN(case_keys); i++)
			known = known || strcmp(k, case_keys[i]) == 0;
		if (!known) {
			snprintf(err, err_len, "unknown key '%s'", k);
			return -1;
		}
	}
	const char *exp = json_string_value(json_object_get(c, "expect"));
	bool ok = false;
	for (size_t i = 0; exp && i < CG_ARRAY_LEN(expectations); i++)
		ok = ok || strcmp(exp, expectations[i]) == 0;
	if (!ok) {
		snprintf(err, err_len,
			 "'expect' must be ALLOW, DEGRADE, UNKNOWN, BLOCK or INVALID");
		return -1;
	}
	if (!json_object_get(c, "pipeline") && !json_object_get(c, "actions")) {
		snprintf(err, err_len, "a case needs 'pipeline' or 'actions'");
		return -1;
	}
	json_t *peer = json_object_get(c, "peer");
	if (peer) {
		const char *pk;
		json_t *pv;
		if (!json_is_object(peer)) {
			snprintf(err, err_len, "'peer' must be {uid, gid}");
			return -1;
		}
		json_object_foreach(peer, pk, pv)
		{
			if ((strcmp(pk, "uid") != 0 && strcmp(pk, "gid") != 0) ||
			    !json_is_integer(pv) || json_integer_value(pv) < 0) {
				snprintf(err, err_len, "'peer' must be {uid, gid} with integers");
				return -1;
			}
		}
	}
	json_t *reqs = json_object_get(c, "requires");
	if (reqs && !json_is_array(reqs)) {
		snprintf(err, err_len, "'requires' must be a list of command names");
		return -1;
	}
	const char *sk[] = { "name", "rule", "code", "session", "host", "cwd", "reason" };
	for (size_t i = 0; i < CG_ARRAY_LEN(sk); i++) {
		const json_t *sv = json_object_get(c, sk[i]);
		if (sv && !json_is_string(sv)) {
			snprintf(err, err_len, "'%s' must be a string", sk[i]);
			return -1;
		}
	}
	return 0;
}

/*
 * A case may list commands it needs ("requires: [busybox]"): when one is not
 * an executable on the controlled PATH of this machine, the case is skipped
 * (and reported), since the request would only show that it is missing.
 */
static bool case_requirements_met(const json_t *c, const char **missing)
{
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(c, "requires"), i, v)
	{
		const char *name = json_string_value(v);
		bool found = false;
		if (!name || strchr(name, '/'))
			found = false;
		else {
			const char *dir = CG_WORLD_PATH;
			while (!found && *dir) {
				size_t dl = strcspn(dir, ":");
				char path[PATH_MAX];
				int w = snprintf(path, sizeof(path), "%.*s/%s", (int)dl, dir, name);
				found =
				    w > 0 && (size_t)w < sizeof(path) && access(path, X_OK) == 0;
				dir += dl + (dir[dl] == ':');
			}
		}
		if (!found) {
			*missing = name ? name : "?";
			return false;
		}
	}
	return true;
}

/* An argv element that YAML typed as a number or bool, back to its text. */
static json_t *as_text(json_t *v)
{
	char b[32];
	if (json_is_integer(v)) {
		snprintf(b, sizeof(b), "%lld", (long long)json_integer_value(v));
		return json_string(b);
	}
	if (json_is_boolean(v))
		return json_string(json_is_true(v) ? "true" : "false");
	return json_incref(v);
}

/*
 * The wire request for a case: the fields a request has, passed through as
 * written (so the wire codec judges their types), except that argv and env
 * values YAML read as numbers or booleans are turned back into text.
 */
static json_t *case_request(const json_t *c)
{
	json_t *req = json_object();
	if (!req)
		return NULL;
	const char *pass[] = { "privileged", "session", "host", "cwd", "reason", "actions" };
	for (size_t i = 0; i < CG_ARRAY_LEN(pass); i++) {
		json_t *v = json_object_get(c, pass[i]);
		if (v)
			json_object_set(req, pass[i], v);
	}
	json_t *pipe = json_object_get(c, "pipeline");
	if (json_is_array(pipe)) {
		json_t *np = json_array();
		size_t i, j;
		json_t *st, *a;
		json_array_foreach(pipe, i, st)
		{
			if (!json_is_array(st)) {
				json_array_append(np, st);
				continue;
			}
			json_t *ns = json_array();
			json_array_foreach(st, j, a) json_array_append_new(ns, as_text(a));
			json_array_append_new(np, ns);
		}
		json_object_set_new(req, "pipeline", np);
	} else if (pipe) {
		json_object_set(req, "pipeline", pipe);
	}
	json_t *env = json_object_get(c, "env");
	if (json_is_object(env)) {
		json_t *ne = json_object();
		const char *k;
		json_t *v;
		json_object_foreach(env, k, v) json_object_set_new(ne, k, as_text(v));
		json_object_set_new(req, "env", ne);
	} else if (env) {
		json_object_set(req, "env", env);
	}
	if (json_object_get(c, "actions"))
		json_object_set_new(req, "action", json_string("gate"));
	return req;
}

/* A short one-line rendering of a case's pipeline, for messages. */
static void case_label(const json_t *c, size_t idx, char *out, size_t len)
{
	const char *name = json_string_value(json_object_get(c, "name"));
	if (name) {
		snprintf(out, len, "#%zu %s", idx + 1, name);
		return;
	}
	char *s = json_dumps(json_object_get(c, "pipeline") ? json_object_get(c, "pipeline")
							    : json_object_get(c, "actions"),
			     JSON_COMPACT | JSON_ENSURE_ASCII);
	snprintf(out, len, "#%zu %s", idx + 1, s ? s : "?");
	free(s);
}

/* Merge defaults under a case (the case's own keys win). New reference. */
static json_t *case_with_defaults(json_t *c, const json_t *defaults)
{
	json_t *m = json_deep_copy(defaults ? defaults : c);
	if (!m || !defaults)
		return m;
	json_object_update(m, c);
	return m;
}

/*
 * Does want name a rule that gave the folded decision? The fold keeps the
 * earliest rung on a tie (for ALLOW that is the privilege rung's
 * "unprivileged"), so any rung whose verdict equals the folded decision
 * counts: a case can name the policy rule that allowed it.
 */
static bool rule_matches(const struct outcome *o, const char *want)
{
	if (o->refusal)
		return false;
	if (o->folded.rule_id && strcmp(o->folded.rule_id, want) == 0)
		return true;
	for (size_t i = 0; i < o->folded.n_rungs; i++) {
		const struct cg_verdict *v = &o->folded.rungs[i].v;
		if (v->decision == o->folded.decision && v->rule_id &&
		    strcmp(v->rule_id, want) == 0)
			return true;
	}
	return false;
}

/* The rules that gave the folded decision, "a,b", for messages. */
static void deciding_rules(const struct outcome *o, char *out, size_t len)
{
	out[0] = '\0';
	if (o->refusal) {
		snprintf(out, len, "-");
		return;
	}
	size_t n = 0;
	for (size_t i = 0; i < o->folded.n_rungs && n < len; i++) {
		const struct cg_verdict *v = &o->folded.rungs[i].v;
		if (v->decision != o->folded.decision || !v->rule_id)
			continue;
		int w = snprintf(out + n, len - n, "%s%s", n ? "," : "", v->rule_id);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	if (!out[0])
		snprintf(out, len, "%s", o->folded.rule_id ? o->folded.rule_id : "-");
}

/* Remember every rule id that some rung's verdict named. */
static void seen_rule(const char *rule_id, void *arg)
{
	json_object_set_new((json_t *)arg, rule_id, json_true());
}

/*
 * The rules a case exercised: each rung's, and every rule that decided a
 * stage of it, not only the one the pipeline's verdict names (an allow rule
 * for a later stage, such as docs/policy.md's grep-filter, was never counted).
 */
static void note_rules(json_t *seen, const struct cg_policy *p, const struct outcome *o)
{
	if (o->refusal)
		return;
	if (o->gate.resolved)
		(void)cg_policy_rules_met(p, &o->gate.call, seen_rule, seen);
	for (size_t i = 0; i < o->folded.n_rungs; i++) {
		const char *id = o->folded.rungs[i].v.rule_id;
		if (id)
			json_object_set_new(seen, id, json_true());
	}
	if (o->folded.rule_id)
		json_object_set_new(seen, o->folded.rule_id, json_true());
}

/* test's command line. */
struct test_args {
	const char *files[2]; /* the policy and the case table */
	const char *ws[MAX_WORKSPACES];
	size_t n_ws;
	bool as_json, verbose;
	const char *rules; /* --rules: the ids coverage asks for, comma-separated; NULL: all */
};

/* 0, or the usage exit code. */
static int test_parse(int argc, char **argv, struct test_args *t)
{
	size_t n_files = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--json") == 0) {
			t->as_json = true;
		} else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
			t->verbose = true;
		} else if (strcmp(a, "--rules") == 0 && i + 1 < argc) {
			t->rules = argv[++i];
		} else if (strcmp(a, "--workspace") == 0 && i + 1 < argc) {
			if (t->n_ws == MAX_WORKSPACES)
				return usage_error("too many --workspace options%s", "");
			t->ws[t->n_ws++] = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			return cg_cli_bad_option("policy test", a, NULL, test_opts);
		} else if (n_files < 2) {
			t->files[n_files++] = a;
		} else {
			return usage_error("unexpected argument '%s'", a);
		}
	}
	if (n_files != 2)
		return usage_error("test needs FILE and CASES.yaml%s", "");
	return 0;
}

/*
 * Load the case table at path: a list of cases, or {defaults, cases}. Every
 * case is checked before any is decided (a typo is not a failing case).
 * Returns the document (caller decrefs) with *cases and *defaults pointing
 * into it, or NULL after printing why.
 */
static json_t *load_cases(const char *path, json_t **cases, json_t **defaults)
{
	char err[512] = "";
	json_t *doc = load_yaml(path, err, sizeof(err));
	if (!doc) {
		fprintf(stderr, "callgate policy: cases: %s\n", err);
		return NULL;
	}
	*cases = doc;
	*defaults = NULL;
	if (json_is_object(doc)) {
		const char *k;
		json_t *v;
		json_object_foreach(doc, k, v)
		{
			if (strcmp(k, "cases") != 0 && strcmp(k, "defaults") != 0) {
				fprintf(stderr,
					"callgate policy: cases: unknown top-level key '%s'\n", k);
				goto free_doc;
			}
		}
		*cases = json_object_get(doc, "cases");
		*defaults = json_object_get(doc, "defaults");
		if (*defaults && !json_is_object(*defaults)) {
			fprintf(stderr, "callgate policy: cases: 'defaults' must be a mapping\n");
			goto free_doc;
		}
	}
	if (!json_is_array(*cases) || json_array_size(*cases) == 0 ||
	    json_array_size(*cases) > MAX_CASES) {
		fprintf(stderr, "callgate policy: cases: expected a non-empty list of cases (or "
				"{defaults, cases})\n");
		goto free_doc;
	}
	size_t idx;
	json_t *c;
	json_array_foreach(*cases, idx, c)
	{
		json_t *m = case_with_defaults(c, *defaults);
		int bad = m ? case_check(m, err, sizeof(err)) : -1;
		json_decref(m);
		if (bad) {
			char label[200];
			case_label(c, idx, label, sizeof(label));
			fprintf(stderr, "callgate policy: cases: %s: %s\n", label, err);
			goto free_doc;
		}
	}
	return doc;
free_doc:
	json_decref(doc);
	return NULL;
}

/* The running totals of a table. */
struct tally {
	json_t *seen;	 /* rule ids some verdict named */
	json_t *results; /* --json: one object per case */
	size_t n_fail, n_skip;
};

/* Does the outcome meet the case m's expectations? */
static bool case_passes(const json_t *m, const struct outcome *o)
{
	const char *want = json_string_value(json_object_get(m, "expect"));
	const char *want_rule = json_string_value(json_object_get(m, "rule"));
	const char *want_code = json_string_value(json_object_get(m, "code"));
	const json_t *want_appr = json_object_get(m, "approvers");
	if (strcmp(want, outcome_name(o)) != 0)
		return false;
	if (want_rule && !rule_matches(o, want_rule))
		return false;
	if (want_code && strcmp(want_code, outcome_code(o)) != 0)
		return false;
	if (want_appr && (o->refusal || o->folded.decision != CG_UNKNOWN ||
			  json_integer_value(want_appr) != o->folded.approvers))
		return false;
	return true;
}

/* Report one decided case. */
static void case_report(const struct test_args *t, const json_t *m, const char *label,
			const struct outcome *o, bool pass, struct tally *ty)
{
	char rules[256];
	deciding_rules(o, rules, sizeof(rules));
	if (t->as_json) {
		json_array_append_new(ty->results,
				      json_pack("{s:s,s:b,s:s,s:s,s:s}", "case", label, "pass",
						pass, "decision", outcome_name(o), "rules", rules,
						"code", outcome_code(o)));
	} else if (!pass) {
		const char *want = json_string_value(json_object_get(m, "expect"));
		const char *want_rule = json_string_value(json_object_get(m, "rule"));
		const char *want_code = json_string_value(json_object_get(m, "code"));
		char *msg = o->refusal ? cg_reply_message(o->refusal) : NULL;
		printf("FAIL %s: expected %s%s%s%s%s, got %s rule %s (%s)%s%s\n", label, want,
		       want_rule ? " rule " : "", want_rule ? want_rule : "",
		       want_code ? " code " : "", want_code ? want_code : "", outcome_name(o),
		       rules, outcome_code(o), msg ? ": " : "", msg ? msg : "");
		free(msg);
	} else if (t->verbose) {
		printf("ok   %s: %s rule %s (%s)\n", label, outcome_name(o), rules,
		       outcome_code(o));
	}
}

/* Decide case c (index idx) through the gate and tally it. 0, or -1 on OOM. */
static int run_case(struct harness *h, const struct test_args *t, json_t *c, size_t idx,
		    json_t *defaults, struct tally *ty)
{
	char label[200];
	case_label(c, idx, label, sizeof(label));
	json_t *m = case_with_defaults(c, defaults);
	const char *missing = NULL;
	if (m && !case_requirements_met(m, &missing)) {
		if (!t->as_json)
			printf("skip %s: needs '%s', which is not on the controlled PATH\n", label,
			       missing);
		ty->n_skip++;
		json_decref(m);
		return 0;
	}
	json_t *req = m ? case_request(m) : NULL;
	const json_t *pj = json_object_get(m, "peer");
	struct cg_peer peer = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	if (json_object_get(pj, "uid"))
		peer.uid = (uid_t)json_integer_value(json_object_get(pj, "uid"));
	if (json_object_get(pj, "gid"))
		peer.gid = (gid_t)json_integer_value(json_object_get(pj, "gid"));
	struct outcome o;
	int rc = -1;
	if (req && harness_decide(h, req, &peer, &o) == 0) {
		note_rules(ty->seen, h->policy, &o);
		bool pass = case_passes(m, &o);
		ty->n_fail += !pass;
		case_report(t, m, label, &o, pass, ty);
		outcome_fini(&o);
		rc = 0;
	}
	json_decref(req);
	json_decref(m);
	return rc;
}

/* Is id one of the comma-separated list's? */
static bool id_listed(const char *list, const char *id)
{
	size_t n = strlen(id);
	for (const char *at = list; *at;) {
		size_t l = strcspn(at, ",");
		if (l == n && strncmp(at, id, n) == 0)
			return true;
		at += l + (at[l] == ',');
	}
	return false;
}

/* Coverage and the summary: every rule (or every one --rules names) must be exercised. Returns the exit code. */
static int test_summary(const struct test_args *t, const struct cg_policy *p, size_t n_cases,
			const struct tally *ty)
{
	json_t *dump = cg_policy_dump(p), *unexercised = json_array(), *r;
	size_t n_rules = 0, idx;
	json_array_foreach(json_object_get(dump, "rules"), idx, r)
	{
		const char *id = json_string_value(json_object_get(r, "id"));
		if (!id || (t->rules && !id_listed(t->rules, id)))
			continue; /* --rules: only those (s44c L10: a copy of the default with
				     one rule added had to test all 60) */
		n_rules++;
		if (!json_object_get(ty->seen, id))
			json_array_append_new(unexercised, json_string(id));
	}
	/* A --rules id the policy does not have is a typo, not a rule covered. */
	for (const char *at = t->rules; at && *at;) {
		size_t l = strcspn(at, ",");
		bool found = false;
		json_array_foreach(json_object_get(dump, "rules"), idx, r)
		{
			const char *id = json_string_value(json_object_get(r, "id"));
			found |= id && strlen(id) == l && strncmp(id, at, l) == 0;
		}
		if (!found) {
			fprintf(stderr,
				"callgate policy test: --rules names '%.*s', which %s has no "
				"rule of\n",
				(int)l, at, cg_policy_source(p));
			json_decref(dump);
			json_decref(unexercised);
			return CG_EXIT_USAGE;
		}
		at += l + (at[l] == ',');
	}
	json_decref(dump);
	size_t n_unex = json_array_size(unexercised);
	if (t->as_json) {
		json_t *j =
		    json_pack("{s:s,s:s,s:I,s:I,s:I,s:O,s:O}", "policy", cg_policy_source(p),
			      "sha256", cg_policy_sha256(p), "cases", (json_int_t)n_cases, "failed",
			      (json_int_t)ty->n_fail, "rules", (json_int_t)n_rules, "unexercised",
			      unexercised, "results", ty->results);
		print_json(j, JSON_INDENT(2));
		json_decref(j);
	} else {
		if (n_unex > 0) {
			printf("UNEXERCISED %zu of %zu rule(s) no case reaches:", n_unex, n_rules);
			json_t *u;
			json_array_foreach(unexercised, idx, u) printf(" %s", json_string_value(u));
			putchar('\n');
		}
		printf("%s: %zu case(s), %zu passed, %zu failed, %zu skipped; %zu of %zu rule(s) "
		       "exercised\n",
		       ty->n_fail == 0 && n_unex == 0 ? "PASS" : "FAIL", n_cases,
		       n_cases - ty->n_fail - ty->n_skip, ty->n_fail, ty->n_skip, n_rules - n_unex,
		       n_rules);
	}
	json_decref(unexercised);
	return ty->n_fail == 0 && n_unex == 0 ? CG_EXIT_OK : EXIT_FINDINGS;
}

static int cmd_test(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate policy test FILE CASES.yaml [OPTIONS]",
		    "Run a case table against a policy; every rule must be exercised.\n"
		    "Exit: 0 all passed, 1 failures or unexercised rules, 65 does not "
		    "load.",
		    test_opts);
	struct test_args t = { 0 };
	int rc = test_parse(argc, argv, &t);
	if (rc != 0)
		return rc;
	json_t *cases, *defaults;
	json_t *doc = load_cases(t.files[1], &cases, &defaults);
	if (!doc)
		return CG_EXIT_INVALID;
	rc = CG_EXIT_INVALID;
	struct cg_policy *p = load_policy(t.files[0]);
	if (!p)
		goto free_doc;
	struct harness h;
	if (harness_init(&h, p, t.ws, t.n_ws) != 0) {
		rc = CG_EXIT_ERROR;
		goto unref_policy;
	}
	struct tally ty = { .seen = json_object(), .results = json_array() };
	size_t idx;
	json_t *c;
	rc = CG_EXIT_OK;
	json_array_foreach(cases, idx, c)
	{
		if (run_case(&h, &t, c, idx, defaults, &ty) != 0) {
			fprintf(stderr, "callgate policy: out of memory\n");
			rc = CG_EXIT_ERROR;
			break;
		}
	}
	if (rc == CG_EXIT_OK)
		rc = test_summary(&t, p, json_array_size(cases), &ty);
	json_decref(ty.results);
	json_decref(ty.seen);
	harness_fini(&h);
unref_policy:
	cg_policy_unref(p);
free_doc:
	json_decref(doc);
	return rc;
}

/* ---- check and dump ----------------------------------------------------- */

static int cmd_check(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help("callgate policy check FILE [OPTIONS]",
				   "Load and lint a policy. Exit: 0 clean, 1 findings, 65 does not "
				   "load or verify.",
				   check_opts);
	const char *file = NULL, *pubkey = NULL, *sig = NULL;
	bool as_json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			as_json = true;
		else if (strcmp(argv[i], "--pubkey") == 0 && i + 1 < argc)
			pubkey = argv[++i];
		else if (strcmp(argv[i], "--sig") == 0 && i + 1 < argc)
			sig = argv[++i];
		else if (argv[i][0] == '-')
			return cg_cli_bad_option("policy check", argv[i], NULL, check_opts);
		else if (!file)
			file = argv[i];
		else
			return usage_error("unexpected argument '%s'", argv[i]);
	}
	if (!file)
		return usage_error("check needs FILE%s", "");
	if (sig && !pubkey)
		return usage_error("--sig needs --pubkey%s", "");
	if (pubkey) {
		struct cg_reply *err = NULL;
		if (cg_sign_verify_policy(file, sig, pubkey, &err) != 0) {
			print_reply(stderr, err);
			cg_reply_free(err);
			return CG_EXIT_INVALID;
		}
	}
	struct cg_policy *p = load_policy(file);
	if (!p)
		return CG_EXIT_INVALID;
	json_t *findings = cg_policy_lint(p);
	int rc = CG_EXIT_OK;
	if (!findings) {
		fprintf(stderr, "callgate policy: lint failed (out of memory)\n");
		rc = CG_EXIT_ERROR;
		goto unref_policy;
	}
	size_t n = json_array_size(findings);
	if (as_json) {
		json_t *j = json_pack("{s:s,s:s,s:O}", "policy", cg_policy_source(p), "sha256",
				      cg_policy_sha256(p), "findings", findings);
		print_json(j, JSON_INDENT(2));
		json_decref(j);
	} else {
		size_t i;
		json_t *f;
		json_array_foreach(findings, i, f)
		{
			printf("%s: rule %s: %s: %s\n", cg_policy_source(p),
			       json_string_value(json_object_get(f, "rule")),
			       json_string_value(json_object_get(f, "kind")),
			       json_string_value(json_object_get(f, "detail")));
		}
		printf("%s: %s, sha256 %s, %zu finding(s)%s\n", cg_policy_source(p),
		       n ? "loads with findings" : "OK", cg_policy_sha256(p), n,
		       pubkey ? ", signature verified" : "");
	}
	rc = n ? EXIT_FINDINGS : CG_EXIT_OK;
	json_decref(findings);
unref_policy:
	cg_policy_unref(p);
	return rc;
}

static const struct cg_cli_opt dump_opts[] = {
	{ "--yaml", NULL, "print the embedded policy's YAML, comments and all (a starting point)" },
	{ 0 },
};

static int cmd_dump(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate policy dump [FILE]\n       callgate policy dump --yaml",
		    "Print the normalised policy (default: the embedded one) as JSON;\n"
		    "with --yaml, the embedded policy as the daemon reads it, to copy\n"
		    "and change (docs/policy.md, Writing your own).",
		    dump_opts);
	if (argc == 2 && strcmp(argv[1], "--yaml") == 0) {
		/* What the daemon loads when no --policy is given, byte for byte. */
		return fwrite(cg_default_policy_yaml, 1, cg_default_policy_yaml_len, stdout) ==
				   cg_default_policy_yaml_len &&
			       fflush(stdout) == 0
			   ? CG_EXIT_OK
			   : CG_EXIT_ERROR;
	}
	if (argc > 2)
		return usage_error("dump takes one FILE, or --yaml%s", "");
	if (argc == 2 && argv[1][0] == '-')
		return cg_cli_bad_option("policy dump", argv[1], NULL, dump_opts);
	struct cg_policy *p = load_policy(argc == 2 ? argv[1] : NULL);
	if (!p)
		return CG_EXIT_INVALID;
	json_t *d = cg_policy_dump(p);
	int rc = CG_EXIT_OK;
	if (d)
		print_json(d, JSON_INDENT(2));
	else
		rc = CG_EXIT_ERROR;
	json_decref(d);
	cg_policy_unref(p);
	return rc;
}

/* ---- keys and signatures ------------------------------------------------ */

static int cmd_keygen(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate policy keygen PRIVATE_KEY PUBLIC_KEY",
		    "Make an Ed25519 key pair for signing policies (private key mode "
		    "0600; never overwritten).",
		    no_opts);
	if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-')
		return usage_error("keygen needs PRIVATE_KEY PUBLIC_KEY%s", "");
	struct cg_reply *err = NULL;
	if (cg_sign_keygen(argv[1], argv[2], &err) != 0) {
		print_reply(stderr, err);
		cg_reply_free(err);
		return CG_EXIT_ERROR;
	}
	char id[CG_SIGN_KEY_ID_LEN] = "?";
	if (cg_sign_key_file_id(argv[2], false, id, &err) != 0) {
		cg_reply_free(err);
		err = NULL;
	}
	printf("private key %s (mode 0600), public key %s, key id %s\n", argv[1], argv[2], id);
	return CG_EXIT_OK;
}

/* Parse "--key K | --pubkey K, [--out|--sig S], FILE" (opts: the key, then the sig). */
static int sig_args(int argc, char **argv, const char *sub, const struct cg_cli_opt *opts,
		    const char **key, const char **sig, const char **file)
{
	/* opts[0] names the key, opts[1] the signature file. */
	const char *key_opt = opts[0].name, *sig_opt = opts[1].name;
	*key = *sig = *file = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], key_opt) == 0 && i + 1 < argc)
			*key = argv[++i];
		else if (strcmp(argv[i], sig_opt) == 0 && i + 1 < argc)
			*sig = argv[++i];
		else if (argv[i][0] == '-')
			return cg_cli_bad_option(sub, argv[i], NULL, opts);
		else if (!*file)
			*file = argv[i];
		else
			return usage_error("unexpected argument '%s'", argv[i]);
	}
	if (!*key || !*file)
		return usage_error("needs %s KEY and FILE", key_opt);
	return 0;
}

static int cmd_sign(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help("callgate policy sign --key PRIVATE_KEY [--out SIG] FILE",
				   "Sign a policy file (a detached Ed25519 signature).", sign_opts);
	const char *key, *sig, *file;
	int u = sig_args(argc, argv, "policy sign", sign_opts, &key, &sig, &file);
	if (u)
		return u;
	struct cg_reply *err = NULL;
	char id[CG_SIGN_KEY_ID_LEN] = "";
	if (cg_sign_file(file, sig, key, id, &err) != 0) {
		print_reply(stderr, err);
		cg_reply_free(err);
		return CG_EXIT_ERROR;
	}
	printf("signed %s with key %s: %s%s\n", file, id, sig ? sig : file, sig ? "" : ".sig");
	return CG_EXIT_OK;
}

static int cmd_verify(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help("callgate policy verify --pubkey PUBLIC_KEY [--sig SIG] FILE",
				   "Verify a policy's signature. Exit: 0 verified, 1 missing or "
				   "invalid, 70 unreadable.",
				   verify_opts);
	const char *key, *sig, *file;
	int u = sig_args(argc, argv, "policy verify", verify_opts, &key, &sig, &file);
	if (u)
		return u;
	struct cg_reply *err = NULL;
	if (cg_sign_verify_policy(file, sig, key, &err) != 0) {
		print_reply(stderr, err);
		int rc = err->id == CG_R_POLICY_SIGNATURE_MISSING ||
				 err->id == CG_R_POLICY_SIGNATURE_INVALID
			     ? EXIT_FINDINGS
			     : CG_EXIT_ERROR;
		cg_reply_free(err);
		return rc;
	}
	char id[CG_SIGN_KEY_ID_LEN] = "?", *buf = NULL, hex[65] = "?";
	size_t len = 0;
	if (cg_sign_key_file_id(key, false, id, &err) != 0) {
		cg_reply_free(err);
		err = NULL;
	}
	if (cg_sign_read_file(file, &buf, &len) == 0)
		cg_sha256_hex(buf, len, hex);
	free(buf);
	struct cg_reply *ok = cg_reply_new(CG_R_POLICY_SIGNATURE_OK, "{s:s,s:s,s:s}", "policy",
					   file, "sha256", hex, "key_id", id);
	char *msg = cg_reply_message(ok);
	printf("%s %s\n", cg_reply_def_of(ok)->code, msg ? msg : "");
	free(msg);
	cg_reply_free(ok);
	return CG_EXIT_OK;
}

/* ---- diff --journal: what a candidate policy would change in history ---- */

static const struct cg_cli_opt diff_opts[] = {
	{ "--journal", NULL, "re-decide the calls recorded in the journal (required)" },
	{ "--since", "T", "only calls since an RFC 3339 time or an age: 90s, 15m, 2h, 7d" },
	{ "--state-dir", "DIR", "the daemon's state directory (where the journal is)" },
	{ "--workspace", "DIR",
	  "a workspace (repeatable; default: the workspaces the journal recorded)" },
	{ "--json", NULL, "print the changes as one JSON object" },
	{ 0 },
};

/* Set by cg_cli_policy: the global options (the state directory). */
static const struct cg_cli *policy_cli;

struct diff_args {
	const char *candidate, *state_dir, *state_from;
	const char *ws[MAX_WORKSPACES];
	size_t n_ws;
	int64_t since;
	bool journal, json;
};

struct diff_run {
	const struct diff_args *a;
	struct harness h;
	json_t *workspaces; /* first pass: distinct recorded workspaces */
	json_t *changes;
	size_t calls, skipped;
};

static int diff_parse(int argc, char **argv, struct diff_args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (argv[i][0] != '-' || strcmp(argv[i], "-") == 0) {
			if (a->candidate)
				return usage_error("unexpected argument '%s'", argv[i]);
			a->candidate = argv[i];
			continue;
		}
		const struct cg_cli_opt *o =
		    cg_cli_opt_take("policy diff", diff_opts, argc, argv, &i, &v);
		if (!o)
			return CG_EXIT_USAGE;
		if (strcmp(o->name, "--journal") == 0)
			a->journal = true;
		else if (strcmp(o->name, "--json") == 0)
			a->json = true;
		else if (strcmp(o->name, "--state-dir") == 0)
			a->state_dir = v, a->state_from = "--state-dir";
		else if (strcmp(o->name, "--workspace") == 0 && a->n_ws < MAX_WORKSPACES)
			a->ws[a->n_ws++] = v;
		else if (strcmp(o->name, "--workspace") == 0)
			return usage_error("at most %d --workspace", MAX_WORKSPACES);
		else if (strcmp(o->name, "--since") == 0 && cg_cli_parse_since(v, &a->since) < 0)
			return usage_error("--since wants RFC 3339 or NUMBER[smhd], got '%s'", v);
	}
	if (!a->journal)
		return usage_error("diff needs --journal (the only history it reads)%s", "");
	if (!a->candidate)
		return usage_error("diff needs CANDIDATE.yaml%s", "");
	return 0;
}

/* Is this trace a call to re-decide, and since --since? */
static bool diff_wanted(const struct diff_args *a, const json_t *f)
{
	const json_t *rq = json_object_get(f, "request");
	const char *action = json_string_value(json_object_get(rq, "action"));
	int64_t ts;
	if (!action || (strcmp(action, "exec") != 0 && strcmp(action, "gate") != 0))
		return false;
	const char *t = json_string_value(json_object_get(f, "time"));
	return a->since == INT64_MIN || (t && cg_parse_time(t, &ts) == 0 && ts >= a->since);
}

static int diff_collect_ws(const char *trace, const json_t *f, size_t i, size_t n, void *arg)
{
	(void)trace, (void)i, (void)n;
	struct diff_run *r = arg;
	json_t *w = json_object_get(json_object_get(f, "resolved"), "workspace");
	if (json_is_string(w))
		json_object_set_new(r->workspaces, json_string_value(w), json_true());
	return 0;
}

/*
 * The decision recorded for a call: the decision event's, or INVALID/ERROR
 * when a step before the chain refused it. NULL: the call was never decided.
 */
static const char *recorded(const json_t *f, const char **rule)
{
	const json_t *d = json_object_get(f, "decision");
	if (d) {
		*rule = json_string_value(json_object_get(d, "rule_id"));
		return json_string_value(json_object_get(d, "decision"));
	}
	const json_t *v = json_object_get(f, "verdict_event");
	const json_t *r = json_object_get(v, "reply");
	const char *t = json_string_value(json_object_get(r, "type"));
	*rule = json_string_value(json_object_get(r, "code"));
	return !t ? NULL : strcmp(t, "I") == 0 ? "INVALID" : strcmp(t, "E") == 0 ? "ERROR" : NULL;
}

/* The recorded request as a line the gate can read: the same fields, the time now. */
static json_t *diff_request(const json_t *rq)
{
	json_t *req = json_deep_copy(rq);
	if (!req)
		return NULL;
	json_object_del(req, "time");
	json_object_del(req, "trace_id");
	if (json_object_get(req, "actions") && !json_array_size(json_object_get(req, "pipeline")))
		json_object_del(req, "pipeline");
	/*
	 * The journal keeps an env value as its hash, which no value rule takes
	 * (LANG's is a locale name): judged as empty, which every rule takes, so
	 * a recorded call is not "changed" by the hash (s44c M6). Names are
	 * judged as they were sent.
	 */
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(req, "env"), k,
			    v) if (json_is_string(v) &&
				   strncmp(json_string_value(v), "sha256:", 7) == 0)
	    json_string_set(v, "");
	return req;
}

static int diff_one(const char *trace, const json_t *f, size_t i, size_t n, void *arg)
{
	(void)i, (void)n;
	struct diff_run *r = arg;
	const char *old_rule = NULL;
	const char *old = recorded(f, &old_rule);
	if (!diff_wanted(r->a, f))
		return 0;
	if (!old) {
		r->skipped++;
		return 0;
	}
	r->calls++;
	const json_t *pe = json_object_get(f, "peer");
	struct cg_peer peer = { .pid = (pid_t)json_integer_value(json_object_get(pe, "pid")),
				.uid = (uid_t)json_integer_value(json_object_get(pe, "uid")),
				.gid = (gid_t)json_integer_value(json_object_get(pe, "gid")) };
	json_t *req = diff_request(json_object_get(f, "request"));
	struct outcome o;
	if (!req || harness_decide(&r->h, req, &peer, &o) != 0) {
		json_decref(req);
		return -1;
	}
	json_decref(req);
	const char *now = outcome_name(&o);
	const char *new_rule = o.refusal ? outcome_code(&o) : o.folded.rule_id;
	/*
	 * What changes: the decision; or, the decision the same, the rule or the
	 * constraint sets it runs under ("ALLOW, read-only" to "ALLOW, no
	 * constraints" was not listed: s36 walk).
	 */
	const char *what = strcmp(now, old) != 0 ? "decision" : NULL;
	if (!what && !o.refusal && strcmp(old_rule ? old_rule : "", new_rule ? new_rule : "") != 0)
		what = "rule";
	const json_t *old_cons = json_object_get(json_object_get(f, "decision"), "constraints");
	if (!what && !o.refusal && json_is_array(old_cons)) {
		json_t *new_cons = json_array();
		for (size_t k = 0; new_cons && k < o.folded.n_constraints; k++)
			json_array_append_new(new_cons,
					      cg_constraints_to_json(o.folded.constraints[k]));
		if (!json_equal(old_cons, new_cons))
			what = "constraints";
		json_decref(new_cons);
	}
	if (what) {
		char *cmd =
		    cg_command_text(json_object_get(json_object_get(f, "request"), "pipeline"), 0);
		json_array_append_new(
		    r->changes,
		    json_pack("{s:s, s:s?, s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s}}", "trace_id",
			      trace, "time", json_string_value(json_object_get(f, "time")),
			      "command", cmd ? cmd : "", "changed", what, "old", "decision", old,
			      "rule_id", old_rule ? old_rule : "", "new", "decision", now,
			      "rule_id", new_rule ? new_rule : "", "code", outcome_code(&o)));
		free(cmd);
	}
	outcome_fini(&o);
	return 0;
}

static void diff_print(const struct diff_run *r)
{
	if (r->a->json) {
		json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:O}", "candidate", r->a->candidate,
				      "calls", (json_int_t)r->calls, "changed",
				      (json_int_t)json_array_size(r->changes), "skipped",
				      (json_int_t)r->skipped, "changes", r->changes);
		print_json(j, JSON_INDENT(2));
		json_decref(j);
		return;
	}
	size_t i;
	json_t *c;
	json_array_foreach(r->changes, i, c)
	{
		const json_t *o = json_object_get(c, "old"), *w = json_object_get(c, "new");
		char line[512];
		const char *what = json_string_value(json_object_get(c, "changed"));
		snprintf(line, sizeof(line), "%s %s  %s (%s) -> %s (%s)%s  ",
			 json_string_value(json_object_get(c, "time")),
			 json_string_value(json_object_get(c, "trace_id")),
			 json_string_value(json_object_get(o, "decision")),
			 json_string_value(json_object_get(o, "rule_id")),
			 json_string_value(json_object_get(w, "decision")),
			 json_string_value(json_object_get(w, "rule_id")),
			 what && strcmp(what, "constraints") == 0 ? " [other constraints]" : "");
		json_t *text = json_string(line);
		cg_cli_print_value(stdout, text);
		json_decref(text);
		cg_cli_print_value(stdout, json_object_get(c, "command"));
		fputc('\n', stdout);
	}
	printf("%zu of %zu recorded call(s) would be decided otherwise (decision, rule or "
	       "constraints) under %s%s",
	       json_array_size(r->changes), r->calls, r->a->candidate, r->skipped ? "" : "\n");
	if (r->skipped)
		printf(" (%zu never decided, skipped)\n", r->skipped);
}

static int cmd_diff(int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    "callgate policy diff --journal [OPTIONS] CANDIDATE.yaml",
		    "Re-decide every call recorded in the journal (exec and gate requests) under\n"
		    "CANDIDATE through the daemon's one gate, and list the calls that would be\n"
		    "decided otherwise (decision, rule or constraint sets): time, trace, old\n"
		    "decision (rule) -> new decision (rule), command. The gate sees the request as "
		    "recorded: env values are hashes (judged as empty) and\n"
		    "secret shapes in argv are redacted, and it is judged at the current time.\n"
		    "Exit: 0 nothing would change, 1 something would, 65 CANDIDATE does not\n"
		    "load, 66 no journal, 64 bad command line.",
		    diff_opts);
	struct diff_args a = { .since = INT64_MIN };
	if (policy_cli) {
		a.state_dir = policy_cli->state_dir;
		a.state_from = policy_cli->state_dir_from;
	}
	if (!a.state_dir)
		a.state_dir = CG_DEFAULT_STATE_DIR, a.state_from = "the default";
	int rc = diff_parse(argc, argv, &a);
	if (rc != 0)
		return rc;
	if (cg_cli_state_dir_check("policy diff", a.state_dir, a.state_from) < 0)
		return CG_EXIT_NOINPUT;
	struct cg_policy *p = load_policy(a.candidate);
	if (!p)
		return CG_EXIT_INVALID;
	struct cg_journal_view jv;
	if (cg_journal_load(a.state_dir, &jv, NULL) < 0) {
		fprintf(stderr, "callgate policy diff: cannot read the journal under %s: %s\n",
			a.state_dir, strerror(errno));
		cg_policy_unref(p);
		return CG_EXIT_NOINPUT;
	}
	struct diff_run r = { .a = &a, .workspaces = json_object(), .changes = json_array() };
	rc = CG_EXIT_ERROR;
	const char *ws[MAX_WORKSPACES];
	size_t n_ws = 0;
	if (a.n_ws == 0 && cg_journal_calls(&jv, diff_collect_ws, &r) == 0) {
		const char *k;
		json_t *x;
		json_object_foreach(r.workspaces, k, x) if (n_ws < MAX_WORKSPACES) ws[n_ws++] = k;
	}
	for (size_t i = 0; i < a.n_ws; i++)
		ws[n_ws++] = a.ws[i];
	if (r.changes && harness_init(&r.h, p, ws, n_ws) == 0) {
		if (cg_journal_calls(&jv, diff_one, &r) == 0) {
			diff_print(&r);
			rc = json_array_size(r.changes) ? EXIT_FINDINGS : CG_EXIT_OK;
		} else {
			fprintf(stderr, "callgate policy diff: out of memory\n");
		}
		harness_fini(&r.h);
	}
	json_decref(r.workspaces);
	json_decref(r.changes);
	cg_journal_view_free(&jv);
	cg_policy_unref(p);
	return rc;
}
int cg_cli_policy(const struct cg_cli *g, int argc, char **argv)
{
	policy_cli = g;
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
		{ "check", cmd_check },	  { "explain", cmd_explain }, { "test", cmd_test },
		{ "dump", cmd_dump },	  { "keygen", cmd_keygen },   { "sign", cmd_sign },
		{ "verify", cmd_verify }, { "diff", cmd_diff },
	};
	if (argc < 2)
		return usage_error("missing subcommand%s", "");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return cg_cli_help(
		    "callgate policy SUBCOMMAND [OPTIONS] (SUBCOMMAND --help for more)",
		    "The policy author's tools; they work without a daemon.\n"
		    "  check    load and lint a policy\n"
		    "  explain  decide one request as the daemon would\n"
		    "  test     run a case table against a policy\n"
		    "  dump     print the normalised policy as JSON\n"
		    "  keygen   make a signing key pair\n"
		    "  sign     sign a policy file\n"
		    "  verify   verify a policy's signature\n"
		    "  diff     re-decide the journal's calls under a candidate policy\n"
		    "See callgate-policy(1).",
		    no_opts);
	for (size_t i = 0; i < CG_ARRAY_LEN(subs); i++)
		if (strcmp(argv[1], subs[i].name) == 0)
			return subs[i].fn(argc - 1, argv + 1);
	struct cg_cli_opt names[CG_ARRAY_LEN(subs) + 1] = { { 0 } };
	for (size_t i = 0; i < CG_ARRAY_LEN(subs); i++)
		names[i] = (struct cg_cli_opt){ subs[i].name, NULL, "" };
	return cg_cli_bad_option("policy", argv[1], "unknown subcommand", names);
}
