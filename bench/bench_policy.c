/* SPDX-License-Identifier: MIT */
/*
 * bench_policy — how long a decision takes: cg_chain_decide over calls that
 * were decoded and resolved once beforehand (the daemon does that per
 * request anyway; this measures the adjudicator chain alone).
 *
 * Scenarios:
 *  - the embedded default policy: an allow path (ls -la), deny paths
 *    (rm -rf /, a protected path), a degrade path (git status), default deny;
 *  - generated policies of N rules (N = 10 … 10,000; one rule in five carries
 *    a regular expression, so 1,000 rules hold 200 patterns) over N/2
 *    executables, to show how the cost grows with the rule count (rules are
 *    indexed by executable, so it should not).
 *
 * Each figure is the median and the 99th percentile over BATCHES batches of
 * PER_BATCH decisions, each batch timed with CLOCK_MONOTONIC.
 *
 * Then, if bench/cedar/node_modules is installed (npm ci in bench/cedar), it
 * runs bench/cedar/bench_cedar.mjs under node (posix_spawn, no shell) on an
 * equivalent Cedar policy for the same calls and prints the ratios; if not,
 * it says why Cedar was skipped.
 *
 * Usage: bench_policy [--quick] [--no-cedar] [--srcdir DIR]
 *   (DIR holds bench/cedar; default $CG_SRCDIR, else the source tree this
 *   was built from.)
 *
 * Invariants: nothing is executed but node; the temporary workspace and its
 * stand-in executables are removed on exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chain.h"
#include "gate.h"
#include "policy.h"
#include "util.h"
#include "wire.h"
#include "world.h"

extern char **environ;

static size_t batches = 400, per_batch = 2000;

struct bcall {
	const char *name;
	const char *const *argv; /* NULL-terminated, argv[0] as sent */
	const char *expect;	 /* decision name */
	struct cg_gate gate;	 /* decoded and resolved once, through the library's gate */
	double median_ns, p99_ns;
	const char *decision, *rule;
};

struct scenario {
	const char *name;
	struct cg_policy *policy;
	struct cg_world world;
	struct cg_chain chain;
	size_t n_rules, n_patterns;
	struct bcall *calls;
	size_t n_calls;
};

static char ws_dir[] = "/tmp/cg-bench-policy-XXXXXX";
static char bin_dir[256];
static size_t n_bins;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static volatile int sink;

static void measure(const struct cg_chain *ch, struct bcall *bc)
{
	double *ns = calloc(batches, sizeof(*ns));
	if (!ns)
		exit(70);
	struct cg_folded f;
	for (size_t i = 0; i < per_batch; i++) /* warm caches and branch predictors */
		cg_chain_decide(ch, &bc->gate.call, &f);
	for (size_t b = 0; b < batches; b++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (size_t i = 0; i < per_batch; i++) {
			cg_chain_decide(ch, &bc->gate.call, &f);
			sink += (int)f.decision;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double d =
		    (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
		ns[b] = d / (double)per_batch;
	}
	qsort(ns, batches, sizeof(*ns), cmp_double);
	bc->median_ns = ns[batches / 2];
	bc->p99_ns = ns[(size_t)((double)(batches - 1) * 0.99)];
	bc->decision = cg_decision_name(f.decision);
	/* Name the policy rule (the privilege rung's "unprivileged" ties on ALLOW). */
	bc->rule = f.rule_id;
	for (size_t r = 0; r < f.n_rungs; r++)
		if (strcmp(f.rungs[r].rung, "policy") == 0 && f.rungs[r].v.rule_id)
			bc->rule = f.rungs[r].v.rule_id;
	free(ns);
}

/* Take one call through the one gate, as the daemon does, outside the timed loop. */
static int prepare(struct scenario *s, struct bcall *bc)
{
	json_t *stage = json_array();
	for (size_t i = 0; bc->argv[i]; i++)
		json_array_append_new(stage, json_string(bc->argv[i]));
	char t[40];
	int64_t now = cg_now_wall_ns();
	cg_format_time(now, t, sizeof(t));
	json_t *req = json_pack("{s:[o],s:b,s:s}", "pipeline", stage, "privileged", 0, "time", t);
	char *line = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct cg_gate_ctx ctx = { .policy = s->policy, .chain = &s->chain, .world = &s->world };
	struct cg_peer peer = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	int rc = line ? cg_gate_decide(&ctx, line, strlen(line), true, false, &peer, NULL, NULL,
				       &bc->gate)
		      : -1;
	if (rc != 0) {
		char *msg = bc->gate.refusal ? cg_reply_message(bc->gate.refusal) : NULL;
		fprintf(stderr, "bench_policy: %s/%s: %s\n", s->name, bc->name, msg ? msg : "?");
		free(msg);
	}
	free(line);
	return rc;
}

static int scenario_init(struct scenario *s, const char *name, const char *yaml, size_t len)
{
	struct cg_reply *err = NULL;
	s->name = name;
	int rc = yaml ? cg_policy_load_buffer(name, yaml, len, &s->policy, &err)
		      : cg_policy_load_default(&s->policy, &err);
	if (rc != 0) {
		char *msg = cg_reply_message(err);
		fprintf(stderr, "bench_policy: %s: %s\n", name, msg ? msg : "?");
		free(msg);
		cg_reply_free(err);
		return -1;
	}
	const char *ws[1] = { ws_dir };
	if (cg_world_init(&s->world, ws, 1, &err) != 0 ||
	    cg_policy_register_rungs(&s->chain, s->policy) != 0) {
		fprintf(stderr, "bench_policy: %s: world/chain setup failed\n", name);
		cg_reply_free(err);
		return -1;
	}
	for (size_t i = 0; i < s->n_calls; i++)
		if (prepare(s, &s->calls[i]) != 0)
			return -1;
	return 0;
}

static void scenario_fini(struct scenario *s)
{
	for (size_t i = 0; i < s->n_calls; i++)
		cg_gate_fini(&s->calls[i].gate);
	cg_world_fini(&s->world);
	cg_policy_unref(s->policy);
}

/* A growable text buffer for generating YAML (capped: generation is ours). */
struct text {
	char *p;
	size_t len, cap;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			exit(70);
		if (t->p && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t nc = (t->cap ? t->cap * 2 : 65536) + (size_t)n;
		char *q = realloc(t->p, nc);
		if (!q)
			exit(70);
		t->p = q;
		t->cap = nc;
	}
}

/* Stand-in executables t00000 … for generated rules (never run). */
static int make_bins(size_t n)
{
	for (size_t i = n_bins; i < n; i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/t%05zu", bin_dir, i);
		int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
		if (fd < 0 || cg_write_all(fd, "#!/bin/true\n", 12) != 0) {
			perror(p);
			return -1;
		}
		close(fd);
	}
	if (n > n_bins)
		n_bins = n;
	return 0;
}

/*
 * A policy of n rules over n/2 executables: for each executable a deny rule
 * (every fifth with a regular expression on its arguments, the others with a
 * flag) and then an allow rule; the last two rules are for ls and rm.
 */
static char *gen_policy(size_t n, size_t *len, size_t *n_patterns)
{
	struct text t = { 0 };
	size_t np = 0, exes = (n - 2) / 2;
	text_add(&t, "version: 1\nrules:\n");
	for (size_t e = 0; e < exes; e++) {
		if (e % 5 < 2) {
			text_add(
			    &t,
			    "  - id: t%05zu-deny\n    decision: deny\n    why: dangerous option\n"
			    "    match:\n      exe: [\"%s/t%05zu\"]\n"
			    "      args_any: [{ pattern: \"^danger-%zu(=|$)\" }]\n",
			    e, bin_dir, e, e);
			np++;
		} else {
			text_add(&t,
				 "  - id: t%05zu-deny\n    decision: deny\n    why: forced\n"
				 "    match:\n      exe: [\"%s/t%05zu\"]\n      flags_any: "
				 "[--force-%zu]\n",
				 e, bin_dir, e, e);
		}
		text_add(&t,
			 "  - id: t%05zu-allow\n    decision: allow\n    match:\n"
			 "      exe: [\"%s/t%05zu\"]\n      max_args: 8\n",
			 e, bin_dir, e);
	}
	text_add(&t, "  - id: ls-allow\n    decision: allow\n    match: { exe: [ls] }\n"
		     "  - id: rm-recursive-deny\n    decision: deny\n    why: recursive delete\n"
		     "    match: { exe: [rm], flags_any: [-r, -R, --recursive] }\n");
	*len = t.len;
	*n_patterns = np;
	return t.p;
}

/* ---- Cedar ------------------------------------------------------------------ */

static const char *find_srcdir(const char *given)
{
	if (given)
		return given;
	const char *e = getenv("CG_SRCDIR");
	if (e)
		return e;
	/* A build directory inside the source tree (the usual build/): its parent. */
	static char dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		return NULL;
	dir[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			return NULL;
		*slash = '\0';
		char probe[PATH_MAX + 32];
		snprintf(probe, sizeof(probe), "%s/bench/cedar/package.json", dir);
		if (access(probe, R_OK) == 0)
			return dir;
	}
	return NULL;
}

/*
 * Write the spec the node script translates into Cedar: per scenario the
 * policy as `callgate policy dump` shows it, the workspace, and the calls
 * (argv and resolved exe).
 */
static int write_spec(const char *path, struct scenario *sc, size_t n_sc, size_t iters)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < n_sc; i++) {
		json_t *calls = json_array();
		for (size_t c = 0; c < sc[i].n_calls; c++) {
			struct bcall *bc = &sc[i].calls[c];
			json_t *argv = json_array();
			for (size_t a = 0; bc->argv[a]; a++)
				json_array_append_new(argv, json_string(bc->argv[a]));
			json_array_append_new(
			    calls, json_pack("{s:s,s:o,s:s,s:s,s:s}", "name", bc->name, "argv",
					     argv, "exe", bc->gate.call.stages[0].exe, "cwd",
					     bc->gate.call.cwd, "expect", bc->decision));
		}
		json_array_append_new(arr, json_pack("{s:s,s:o,s:s,s:o}", "name", sc[i].name,
						     "policy", cg_policy_dump(sc[i].policy),
						     "workspace", ws_dir, "calls", calls));
	}
	json_t *spec = json_pack("{s:I,s:o}", "iterations", (json_int_t)iters, "scenarios", arr);
	int rc = json_dump_file(spec, path, JSON_COMPACT);
	json_decref(spec);
	return rc;
}

/* Run node on the script; its stdout (JSON) into *out. 0, or -1 with why. */
static int run_node(char *script, char *spec, json_t **out, char *why, size_t why_len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		snprintf(why, why_len, "pipe: %s", strerror(errno));
		return -1;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	char node[] = "node";
	char *argv[] = { node, script, spec, NULL };
	pid_t pid;
	int rc = posix_spawnp(&pid, node, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		snprintf(why, why_len, "node could not be started: %s", strerror(rc));
		return -1;
	}
	struct cg_buf b;
	cg_buf_init(&b, 16 * 1024 * 1024);
	char chunk[65536];
	ssize_t n;
	while ((n = cg_read_some(p[0], chunk, sizeof(chunk))) > 0)
		if (cg_buf_add(&b, chunk, (size_t)n) != 0)
			break;
	close(p[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(why, why_len, "node exited with status %d", WEXITSTATUS(status));
		cg_buf_free(&b);
		return -1;
	}
	json_error_t je;
	*out = json_loadb((const char *)b.p, b.len, 0, &je);
	cg_buf_free(&b);
	if (!*out) {
		snprintf(why, why_len, "node printed no JSON: %s", je.text);
		return -1;
	}
	return 0;
}

static const json_t *cedar_result(const json_t *res, const char *scenario, const char *call)
{
	size_t i;
	json_t *r;
	json_array_foreach(json_object_get(res, "results"), i, r)
	{
		if (strcmp(json_string_value(json_object_get(r, "scenario")), scenario) == 0 &&
		    strcmp(json_string_value(json_object_get(r, "call")), call) == 0)
			return r;
	}
	return NULL;
}

static void rm_tree(const char *dir)
{
	for (size_t i = 0; i < n_bins; i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/t%05zu", bin_dir, i);
		unlink(p);
	}
	rmdir(bin_dir);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/cedar-spec.json", dir);
	unlink(p);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	bool cedar = true;
	const char *srcdir_opt = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			batches = 50;
			per_batch = 500;
		} else if (strcmp(argv[i], "--no-cedar") == 0) {
			cedar = false;
		} else if (strcmp(argv[i], "--srcdir") == 0 && i + 1 < argc) {
			srcdir_opt = argv[++i];
		} else {
			fprintf(stderr,
				"usage: bench_policy [--quick] [--no-cedar] [--srcdir DIR]\n");
			return 64;
		}
	}
	if (!mkdtemp(ws_dir)) {
		perror("mkdtemp");
		return 70;
	}
	snprintf(bin_dir, sizeof(bin_dir), "%s/bin", ws_dir);
	if (mkdir(bin_dir, 0755) != 0) {
		perror(bin_dir);
		return 70;
	}

	static const char *const a_ls[] = { "ls", "-la", NULL };
	static const char *const a_rm[] = { "rm", "-rf", "/", NULL };
	static const char *const a_ssh[] = { "cat", "/root/.ssh/id_rsa", NULL };
	static const char *const a_git[] = { "git", "status", NULL };
	static const char *const a_vim[] = { "vim", "x", NULL };
	struct bcall def_calls[] = {
		{ .name = "allow: ls -la", .argv = a_ls },
		{ .name = "deny: rm -rf /", .argv = a_rm },
		{ .name = "deny: cat ~/.ssh key", .argv = a_ssh },
		{ .name = "degrade: git status", .argv = a_git },
		{ .name = "default deny: vim", .argv = a_vim },
	};

	static const size_t sizes[] = { 10, 100, 1000, 10000 };
	enum { N_SIZES = sizeof(sizes) / sizeof(sizes[0]) };
	struct scenario sc[1 + N_SIZES];
	memset(sc, 0, sizeof(sc));
	sc[0].calls = def_calls;
	sc[0].n_calls = CG_ARRAY_LEN(def_calls);
	int rc = 70;
	if (scenario_init(&sc[0], "default", NULL, 0) != 0)
		goto cleanup;
	json_t *dump = cg_policy_dump(sc[0].policy);
	sc[0].n_rules = json_array_size(json_object_get(dump, "rules"));
	json_decref(dump);

	static char t0[PATH_MAX];
	snprintf(t0, sizeof(t0), "%s/t00000", bin_dir);
	const char *g_allow[] = { t0, "--mode", "fast", "file", NULL };
	const char *g_deny[] = { t0, "danger-0=1", NULL };
	struct bcall gen_calls[N_SIZES][4];
	for (size_t k = 0; k < N_SIZES; k++) {
		gen_calls[k][0] =
		    (struct bcall){ .name = "allow: t00000 (pattern checked)", .argv = g_allow };
		gen_calls[k][1] =
		    (struct bcall){ .name = "deny: t00000 danger-0=1 (pattern)", .argv = g_deny };
		gen_calls[k][2] =
		    (struct bcall){ .name = "allow: ls -la (last rules)", .argv = a_ls };
		gen_calls[k][3] =
		    (struct bcall){ .name = "deny: rm -rf / (last rules)", .argv = a_rm };
		if (make_bins((sizes[k] - 2) / 2) != 0)
			goto cleanup;
		size_t len = 0, np = 0;
		char *y = gen_policy(sizes[k], &len, &np);
		static char names[N_SIZES][32];
		snprintf(names[k], sizeof(names[k]), "generated-%zu", sizes[k]);
		const char *name = names[k];
		sc[1 + k].calls = gen_calls[k];
		sc[1 + k].n_calls = 4;
		sc[1 + k].n_rules = sizes[k];
		sc[1 + k].n_patterns = np;
		int r = scenario_init(&sc[1 + k], name, y, len);
		free(y);
		if (r != 0)
			goto cleanup;
	}

	printf(
	    "callgate policy decide latency (cg_chain_decide over pre-resolved calls; %zu batches "
	    "x %zu decisions, CLOCK_MONOTONIC)\n\n",
	    batches, per_batch);
	printf("%-14s %6s %5s  %-36s %-8s %-24s %9s %9s\n", "policy", "rules", "pats", "call",
	       "decision", "rule", "median ns", "p99 ns");
	for (size_t s = 0; s < 1 + N_SIZES; s++) {
		for (size_t c = 0; c < sc[s].n_calls; c++) {
			struct bcall *bc = &sc[s].calls[c];
			measure(&sc[s].chain, bc);
			printf("%-14s %6zu %5zu  %-36s %-8s %-24s %9.1f %9.1f\n", sc[s].name,
			       sc[s].n_rules, sc[s].n_patterns, bc->name, bc->decision,
			       bc->rule ? bc->rule : "-", bc->median_ns, bc->p99_ns);
		}
	}

	/* Growth: the same calls against 10 … 10,000 rules. */
	printf("\ngrowth with rule count (median ns; ratio to the 10-rule policy)\n");
	for (size_t c = 0; c < 4; c++) {
		printf("  %-36s", gen_calls[0][c].name);
		for (size_t k = 0; k < N_SIZES; k++)
			printf("  %5zu: %6.1f (x%.2f)", sizes[k], gen_calls[k][c].median_ns,
			       gen_calls[k][c].median_ns / gen_calls[0][c].median_ns);
		putchar('\n');
	}
	double def_med = 0, k1_med = 0;
	for (size_t c = 0; c < sc[0].n_calls; c++)
		def_med = def_calls[c].median_ns > def_med ? def_calls[c].median_ns : def_med;
	for (size_t c = 0; c < 4; c++)
		k1_med = gen_calls[2][c].median_ns > k1_med ? gen_calls[2][c].median_ns : k1_med;
	printf(
	    "\ntargets: default policy <= 200 ns median: worst %.1f ns %s; 1,000 rules <= 2000 ns: "
	    "worst %.1f ns %s\n",
	    def_med, def_med <= 200 ? "MET" : "NOT MET", k1_med,
	    k1_med <= 2000 ? "MET" : "NOT MET");

	rc = 0;
	if (!cedar) {
		printf("\ncedar: skipped (--no-cedar)\n");
		goto cleanup;
	}
	const char *src = find_srcdir(srcdir_opt);
	char script[2 * PATH_MAX], mods[2 * PATH_MAX], spec[2 * PATH_MAX], why[256] = "";
	if (!src) {
		printf("\ncedar: skipped: source directory unknown (set CG_SRCDIR or --srcdir)\n");
		goto cleanup;
	}
	snprintf(script, sizeof(script), "%s/bench/cedar/bench_cedar.mjs", src);
	snprintf(mods, sizeof(mods), "%s/bench/cedar/node_modules/@cedar-policy/cedar-wasm", src);
	if (access(mods, R_OK) != 0) {
		printf("\ncedar: skipped: %s is not installed (run: cd %s/bench/cedar && npm ci)\n",
		       mods, src);
		goto cleanup;
	}
	snprintf(spec, sizeof(spec), "%s/cedar-spec.json", ws_dir);
	/* Cedar runs in the same spec: the default policy and the 1,000-rule one. */
	struct scenario both[2] = { sc[0], sc[3] };
	json_t *res = NULL;
	if (write_spec(spec, both, 2, batches * per_batch) != 0 ||
	    run_node(script, spec, &res, why, sizeof(why)) != 0) {
		printf("\ncedar: skipped: %s\n", why[0] ? why : "could not write the spec");
		goto cleanup;
	}
	printf("\ncallgate vs Cedar (%s, @cedar-policy/cedar-wasm %s via node %s; "
	       "statefulIsAuthorized on a pre-parsed policy set; median ns per decision)\n",
	       json_string_value(json_object_get(res, "cedar_version")),
	       json_string_value(json_object_get(res, "package_version")),
	       json_string_value(json_object_get(res, "node_version")));
	printf("%-16s %-36s %-8s %-8s %11s %11s %8s\n", "policy", "call", "callgate", "cedar",
	       "callgate ns", "cedar ns", "ratio");
	for (size_t s = 0; s < 2; s++) {
		for (size_t c = 0; c < both[s].n_calls; c++) {
			struct bcall *bc = &both[s].calls[c];
			const json_t *r = cedar_result(res, both[s].name, bc->name);
			if (!r)
				continue;
			double cns = json_number_value(json_object_get(r, "median_ns"));
			printf("%-16s %-36s %-8s %-8s %11.1f %11.1f %7.1fx\n", both[s].name,
			       bc->name, bc->decision,
			       json_string_value(json_object_get(r, "decision")), bc->median_ns,
			       cns, cns / bc->median_ns);
		}
	}
	printf("(ratio = cedar / callgate. Cedar's \"deny\" covers BLOCK and UNKNOWN, its "
	       "\"allow\" ALLOW and DEGRADE.\n The Cedar figure is one statefulIsAuthorized "
	       "call from node, JS<->wasm marshalling included,\n against the same rules "
	       "translated as bench/cedar/bench_cedar.mjs describes; native Cedar in Rust\n "
	       "would be faster. callgate's figure is the whole chain: privilege and policy "
	       "rungs.)\n");
	json_decref(res);
cleanup:
	for (size_t s = 0; s < 1 + N_SIZES; s++)
		if (sc[s].policy)
			scenario_fini(&sc[s]);
	rm_tree(ws_dir);
	return rc;
}
