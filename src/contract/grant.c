/* SPDX-License-Identifier: MIT */
/*
 * grant — open, validate, match, use and close grants (the CT layer).
 *
 * MUST: refuse a malformed or unbounded grant (no uses or ttl, relative or
 *       globbed executables, relative paths) with a CT-OPEN-I reply.
 * MUST NOT: match an expired or used-up grant; be consulted for BLOCK.
 */
#include "grant.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct gstage {
	char *exe;
	size_t n_args;
	char **args;   /* fnmatch patterns */
	bool rest_any; /* the spec ended with "**" */
};

struct cg_grant {
	char id[40];
	size_t n_stages;
	struct gstage *stages;
	char *session; /* glob, or NULL for any */
	bool any_uid;
	uid_t uid;
	size_t n_paths;
	char **paths;
	int64_t uses_left;
	int64_t expires_wall_ns;
	int64_t opened_wall_ns;
	uid_t opened_by;
	uint64_t used;
	/* What else changes what runs; any difference is no match (issue 12, item 2). */
	bool privileged;     /* the call's "privileged" MUST equal this (default false) */
	bool forward_agent;  /* the call's "forward_agent" MUST equal this (default false) */
	size_t n_env;	     /* the call MUST set exactly these env names */
	char **env;	     /* sorted */
	json_t *env_values;  /* {name: value}: the call MUST set these values too; or NULL */
	char *cwd;	     /* exact canonical cwd, or NULL for any */
	char *host;	     /* exact host, or NULL for any */
	int64_t timeout_ms;  /* the call's deadline MUST be at most this (ms), or 0 for any */
	json_t *constraints; /* the call's folded constraints, exactly, or NULL for any */
	struct cg_grant *next;
};

void cg_grant_free(struct cg_grant *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_stages; i++) {
		free(g->stages[i].exe);
		for (size_t j = 0; j < g->stages[i].n_args; j++)
			free(g->stages[i].args[j]);
		free(g->stages[i].args);
	}
	free(g->stages);
	free(g->session);
	for (size_t i = 0; i < g->n_paths; i++)
		free(g->paths[i]);
	free(g->paths);
	for (size_t i = 0; i < g->n_env; i++)
		free(g->env[i]);
	free(g->env);
	json_decref(g->env_values);
	free(g->cwd);
	free(g->host);
	json_decref(g->constraints);
	free(g);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int invalid(struct cg_reply **err, const char *detail)
{
	*err = cg_reply_new(CG_R_GRANT_REQUEST_INVALID, "{s:s}", "detail", detail);
	return -1;
}

static bool has_glob(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/*
 * The env a grant binds: an array of names, or an object of names and the
 * exact values (the approver's g: "this exact call"). Into g->env (sorted)
 * and g->env_values. 0, -1 with *err, or -2 out of memory.
 */
static int parse_env(struct cg_grant *g, json_t *env, struct cg_reply **err)
{
	bool values = json_is_object(env);
	size_t n = values ? json_object_size(env) : json_array_size(env);
	if ((!values && !json_is_array(env)) || n > 256)
		return invalid(err, "'env' must be an array of up to 256 variable names, or an "
				    "object of names and their exact values");
	if (!(g->env = calloc(n + 1, sizeof(char *))))
		return -2;
	const char *k;
	json_t *v;
	void *it = values ? json_object_iter(env) : NULL;
	for (size_t i = 0; i < n; i++) {
		k = values ? json_object_iter_key(it) : json_string_value(json_array_get(env, i));
		v = values ? json_object_iter_value(it) : NULL;
		if (values && !json_is_string(v))
			return invalid(err, "'env' values must be strings");
		if (!k || !*k || strchr(k, '='))
			return invalid(err, "'env' entries must be variable names");
		if (!(g->env[i] = strdup(k)))
			return -2;
		g->n_env++;
		it = values ? json_object_iter_next(env, it) : NULL;
	}
	qsort(g->env, g->n_env, sizeof(char *), cmp_str);
	for (size_t i = 1; i < g->n_env; i++)
		if (strcmp(g->env[i - 1], g->env[i]) == 0)
			return invalid(err, "'env' names a variable twice");
	if (values)
		g->env_values = json_incref(env);
	return 0;
}

int cg_grant_parse(json_t *spec, uid_t opened_by, int64_t now_wall_ns, struct cg_grant **out,
		   struct cg_reply **err)
{
	static const char *const known[] = { "pipeline",  "session", "uid",	    "paths",
					     "uses",	  "ttl_s",   "privileged",  "env",
					     "cwd",	  "host",    "constraints", "forward_agent",
					     "timeout_ms" };
	if (!json_is_object(spec))
		return invalid(err, "the grant must be a JSON object");
	const char *key;
	json_t *val;
	json_object_foreach(spec, key, val)
	{
		bool ok = false;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok |= strcmp(key, known[i]) == 0;
		if (!ok)
			return invalid(err, "unknown key (allowed: pipeline, session, uid, paths, "
					    "uses, ttl_s, privileged, env, cwd, host, constraints, "
					    "forward_agent, timeout_ms)");
	}
	json_t *pipe = json_object_get(spec, "pipeline");
	json_t *uses = json_object_get(spec, "uses");
	json_t *ttl = json_object_get(spec, "ttl_s");
	if (!json_is_array(pipe) || json_array_size(pipe) == 0 || json_array_size(pipe) > 64)
		return invalid(err, "'pipeline' must be an array of 1 to 64 stages");
	if (!json_is_integer(uses) || json_integer_value(uses) < 1 ||
	    json_integer_value(uses) > CG_GRANT_MAX_USES)
		return invalid(err, "'uses' must be an integer from 1 to 100000");
	if (!json_is_integer(ttl) || json_integer_value(ttl) < 1 ||
	    json_integer_value(ttl) > CG_GRANT_MAX_TTL_S)
		return invalid(err, "'ttl_s' must be an integer from 1 to 604800 (7 days)");

	struct cg_grant *g = calloc(1, sizeof(*g));
	if (!g || cg_uuid4(g->id, sizeof(g->id)) != 0) {
		free(g);
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "opening a grant");
		return -1;
	}
	g->any_uid = true;
	g->uses_left = json_integer_value(uses);
	g->opened_wall_ns = now_wall_ns;
	g->expires_wall_ns = now_wall_ns + json_integer_value(ttl) * 1000000000LL;
	g->opened_by = opened_by;
	g->n_stages = json_array_size(pipe);
	g->stages = calloc(g->n_stages, sizeof(*g->stages));
	if (!g->stages)
		goto oom;
	for (size_t i = 0; i < g->n_stages; i++) {
		json_t *st = json_array_get(pipe, i);
		json_t *exe = json_object_get(st, "exe");
		json_t *argv = json_object_get(st, "argv");
		const char *e = json_string_value(exe);
		if (!e || e[0] != '/' || has_glob(e) || strstr(e, "/../") || strstr(e, "/./")) {
			cg_grant_free(g);
			return invalid(err, "each stage needs 'exe', an exact absolute path");
		}
		if (!json_is_array(argv) || json_array_size(argv) == 0 ||
		    json_array_size(argv) > 4096) {
			cg_grant_free(g);
			return invalid(err,
				       "each stage needs 'argv', an array of 1 to 4096 patterns");
		}
		struct gstage *s = &g->stages[i];
		/*
		 * A call is matched by the program it resolves to (links followed),
		 * so the grant names that too: one opened for /usr/bin/npm, a link
		 * to npm-cli.js, had opened and never matched (ux-s39). The reply
		 * names the program the grant holds.
		 */
		char real[PATH_MAX];
		if (!(s->exe = strdup(realpath(e, real) ? real : e)))
			goto oom;
		size_t n = json_array_size(argv);
		const char *last = json_string_value(json_array_get(argv, n - 1));
		if (last && strcmp(last, "**") == 0) {
			s->rest_any = true;
			n--;
		}
		s->args = calloc(n ? n : 1, sizeof(char *));
		if (!s->args)
			goto oom;
		for (size_t j = 0; j < n; j++) {
			const char *a = json_string_value(json_array_get(argv, j));
			if (!a) {
				cg_grant_free(g);
				return invalid(err, "argv patterns must be strings");
			}
			if (!(s->args[j] = strdup(a)))
				goto oom;
			s->n_args++;
		}
	}
	json_t *sess = json_object_get(spec, "session");
	if (sess) {
		if (!json_is_string(sess)) {
			cg_grant_free(g);
			return invalid(err, "'session' must be a string (glob)");
		}
		if (!(g->session = strdup(json_string_value(sess))))
			goto oom;
	}
	json_t *uid = json_object_get(spec, "uid");
	if (uid) {
		if (!json_is_integer(uid) || json_integer_value(uid) < 0 ||
		    json_integer_value(uid) > 0x7fffffff) {
			cg_grant_free(g);
			return invalid(err, "'uid' must be a non-negative integer");
		}
		g->any_uid = false;
		g->uid = (uid_t)json_integer_value(uid);
	}
	json_t *paths = json_object_get(spec, "paths");
	if (paths) {
		if (!json_is_array(paths) || json_array_size(paths) > 64) {
			cg_grant_free(g);
			return invalid(err, "'paths' must be an array of up to 64 absolute paths");
		}
		g->paths = calloc(json_array_size(paths) + 1, sizeof(char *));
		if (!g->paths)
			goto oom;
		for (size_t i = 0; i < json_array_size(paths); i++) {
			const char *p = json_string_value(json_array_get(paths, i));
			if (!p || p[0] != '/' || strstr(p, "..")) {
				cg_grant_free(g);
				return invalid(err,
					       "'paths' entries must be absolute, without '..'");
			}
			if (!(g->paths[i] = strdup(p)))
				goto oom;
			g->n_paths++;
		}
	}
	json_t *priv = json_object_get(spec, "privileged");
	if (priv && !json_is_boolean(priv)) {
		cg_grant_free(g);
		return invalid(err, "'privileged' must be true or false");
	}
	g->privileged = json_is_true(priv);
	json_t *fwd = json_object_get(spec, "forward_agent");
	if (fwd && !json_is_boolean(fwd)) {
		cg_grant_free(g);
		return invalid(err, "'forward_agent' must be true or false");
	}
	g->forward_agent = json_is_true(fwd);
	json_t *env = json_object_get(spec, "env");
	int env_rc = env ? parse_env(g, env, err) : 0;
	if (env_rc == -2)
		goto oom;
	if (env_rc != 0) {
		cg_grant_free(g);
		return -1;
	}
	json_t *cwd = json_object_get(spec, "cwd");
	if (cwd) {
		const char *c = json_string_value(cwd);
		if (!c || c[0] != '/' || strstr(c, "/../") || strstr(c, "/./")) {
			cg_grant_free(g);
			return invalid(err, "'cwd' must be an exact absolute directory");
		}
		if (!(g->cwd = strdup(c)))
			goto oom;
	}
	json_t *tmo = json_object_get(spec, "timeout_ms");
	if (tmo && (!json_is_integer(tmo) || json_integer_value(tmo) < 1 ||
		    json_integer_value(tmo) > CG_GRANT_MAX_TTL_S * 1000)) {
		cg_grant_free(g);
		return invalid(err, "'timeout_ms' must be an integer from 1 to 604800000 (the "
				    "longest deadline a call under the grant may have)");
	}
	g->timeout_ms = tmo ? json_integer_value(tmo) : 0;
	json_t *host = json_object_get(spec, "host");
	if (host) {
		if (!json_is_string(host)) {
			cg_grant_free(g);
			return invalid(err, "'host' must be a string (matched exactly)");
		}
		if (!(g->host = strdup(json_string_value(host))))
			goto oom;
	}
	json_t *cons = json_object_get(spec, "constraints");
	if (cons) {
		if (!json_is_array(cons)) {
			cg_grant_free(g);
			return invalid(err,
				       "'constraints' must be the array the approval view shows");
		}
		if (!(g->constraints = json_deep_copy(cons)))
			goto oom;
	}
	*out = g;
	return 0;
oom:
	cg_grant_free(g);
	*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "opening a grant");
	return -1;
}

int cg_grants_add(struct cg_grants *gs, struct cg_grant *g)
{
	if (gs->n >= CG_GRANT_MAX) {
		cg_grant_free(g);
		return -1;
	}
	g->next = gs->head;
	gs->head = g;
	gs->n++;
	return 0;
}

/*
 * Lexically canonicalise an argument path against cwd into buf: resolves
 * ".", ".." and "//". Symlinks are not followed here; what a command may
 * touch is bounded by kernel confinement, this only scopes the grant.
 */
static bool canon(const char *cwd, const char *arg, char *buf, size_t len)
{
	char tmp[PATH_MAX * 2];
	int n = arg[0] == '/' ? snprintf(tmp, sizeof(tmp), "%s", arg)
			      : snprintf(tmp, sizeof(tmp), "%s/%s", cwd, arg);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return false;
	size_t o = 0;
	char *save = NULL;
	for (char *seg = strtok_r(tmp, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		if (strcmp(seg, ".") == 0)
			continue;
		if (strcmp(seg, "..") == 0) {
			while (o > 0 && buf[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
			continue;
		}
		size_t sl = strlen(seg);
		if (o + 1 + sl + 1 > len)
			return false;
		buf[o++] = '/';
		memcpy(buf + o, seg, sl);
		o += sl;
	}
	if (o == 0)
		buf[o++] = '/';
	buf[o] = '\0';
	return true;
}

static bool within(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (n == 1 && dir[0] == '/')
		return true;
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Does w name a parent directory: "..", or a path with a ".." component? */
static bool has_dotdot(const char *w)
{
	for (const char *p = strstr(w, ".."); p; p = strstr(p + 1, ".."))
		if ((p == w || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
			return true;
	return false;
}

/*
 * One argv position: the pattern (fnmatch, '*' matching '/' too) matches the
 * word; but a wildcard never matches a word with a ".." component (an attack
 * had a grant for cat '/ws/<star>' read /ws/../../etc/shadow as root), nor an
 * option word unless the pattern itself starts with '-' (apt install '<star>'
 * took -oDPkg::Pre-Invoke::=CMD, which runs CMD as root). A literal pattern
 * is unaffected (it names its word exactly).
 */
static bool arg_matches(const char *pattern, const char *word)
{
	if (fnmatch(pattern, word, 0) != 0)
		return false;
	if (!has_glob(pattern))
		return true;
	return !has_dotdot(word) && !(word[0] == '-' && pattern[0] != '-');
}

/* Does word w, read as a path from cwd, stay within one of the grant's paths? */
static bool path_within(const struct cg_grant *g, const char *cwd, const char *w)
{
	char c[PATH_MAX];
	if (!canon(cwd, w, c, sizeof(c)))
		return false;
	for (size_t k = 0; k < g->n_paths; k++)
		if (within(c, g->paths[k]))
			return true;
	return false;
}

/* w[0..n) as a path from cwd (a copy, for a piece of a word). */
static bool piece_within(const struct cg_grant *g, const char *cwd, const char *w, size_t n)
{
	char piece[PATH_MAX];
	if (n >= sizeof(piece))
		return false;
	memcpy(piece, w, n);
	piece[n] = '\0';
	return n == 0 || path_within(g, cwd, piece);
}

/*
 * A word that is not an option, as paths: itself, and what follows each '=',
 * ':', '@' and ',' in it ("if=/etc/shadow", "host:/etc", "@/etc/x"). A URL
 * (scheme://) is read as the word itself, a relative path that must not
 * climb out (cat takes "a://../../etc/shadow" as one); a file:// URL's path
 * too, after its host ("file://localhost/etc/shadow").
 */
static bool word_within(const struct cg_grant *g, const char *cwd, const char *w)
{
	if (!path_within(g, cwd, w))
		return false;
	size_t scheme = strspn(w, "abcdefghijklmnopqrstuvwxyz0123456789+.-");
	if (scheme > 0 && strncmp(w + scheme, "://", 3) == 0) {
		if (strncmp(w, "file://", 7) != 0)
			return true;
		const char *path = strchr(w + 7, '/');
		return !path || path_within(g, cwd, path);
	}
	for (const char *p = w; (p = strpbrk(p, "=:@,")); p++)
		if (!piece_within(g, cwd, p + 1, strlen(p + 1)))
			return false;
	return true;
}

/*
 * An option word. "--name=VALUE": VALUE is a word. A short option's bundle
 * ("-vC/etc", "-so/etc/x", "-C..") does not say where its value begins, so
 * every place one could begin is read: the first '/' (an absolute value
 * holds every later one), each '.' after a letter ("-vC.."), and after each
 * '=', ':', '@' or ','. This refuses some harmless bundles ("-osrc/x.c"
 * reads "/x.c"): the call then asks a person, as one no grant covers.
 */
static bool option_within(const struct cg_grant *g, const char *cwd, const char *a)
{
	if (a[1] == '-') {
		const char *eq = strchr(a, '=');
		return !eq || word_within(g, cwd, eq + 1);
	}
	const char *slash = strchr(a, '/');
	for (size_t k = 1; a[k]; k++) {
		bool start = a + k == slash ||
			     (a[k] == '.' && a[k - 1] != '.' && a[k - 1] != '/') ||
			     strchr("=:@,", a[k - 1]);
		if (start && !piece_within(g, cwd, a + k, strlen(a + k)))
			return false;
	}
	return true;
}

/*
 * paths: the call's cwd and every word that could name a file stay within
 * them, read lexically from the cwd: every word that is not an option
 * (word_within: a bare "shadow" from cwd /etc is /etc/shadow), and every
 * value an option word could hold (option_within). A screen on the words,
 * not a boundary (docs/approval.md): a symlink inside the paths, or a
 * program that takes a path from a file or its environment, still reaches
 * elsewhere; the rule's constraints are the boundary.
 */
static bool paths_ok(const struct cg_grant *g, const struct cg_call *call)
{
	if (g->n_paths == 0)
		return true;
	const char *cwd = call->cwd ? call->cwd : "/";
	if (!path_within(g, "/", cwd))
		return false;
	for (size_t i = 0; i < call->n_stages; i++) {
		const struct cg_stage *st = &call->req->stages[i];
		for (size_t j = 1; j < st->argc; j++) {
			const char *a = st->argv[j];
			bool ok =
			    a[0] == '-' && a[1] ? option_within(g, cwd, a) : word_within(g, cwd, a);
			if (!ok)
				return false;
		}
	}
	return true;
}

/* Does the call set exactly the env names g lists (and their values, when g binds them)? */
static bool env_names_equal(const struct cg_grant *g, const struct cg_request *req)
{
	if (req->n_env != g->n_env)
		return false;
	for (size_t i = 0; i < req->n_env; i++) {
		if (!bsearch(&req->env[i].name, g->env, g->n_env, sizeof(char *), cmp_str))
			return false;
		if (!g->env_values)
			continue;
		const char *want =
		    json_string_value(json_object_get(g->env_values, req->env[i].name));
		if (!want || strcmp(want, req->env[i].value) != 0)
			return false; /* values bound, and this one differs */
	}
	return true; /* the wire refuses a name set twice, so equal counts suffice */
}

static bool covers(const struct cg_grant *g, const struct cg_call *call, const json_t *constraints)
{
	const struct cg_request *req = call->req;
	if (g->n_stages != call->n_stages)
		return false;
	/*
	 * Everything else that changes what runs: privilege (and with the peer
	 * uid, the run uid), the environment's names, cwd, host and the
	 * confinement. A grant for an unprivileged shape never covers the same
	 * shape run as root.
	 */
	if (g->privileged != req->privileged || g->forward_agent != req->forward_agent ||
	    !env_names_equal(g, req))
		return false;
	if (g->cwd && (!call->cwd || strcmp(g->cwd, call->cwd) != 0))
		return false;
	if (g->host && strcmp(g->host, req->host ? req->host : "") != 0)
		return false;
	/* A deadline not yet decided is unknown: not within any bound. */
	if (g->timeout_ms && (call->timeout_ms <= 0 || call->timeout_ms > g->timeout_ms))
		return false;
	if (g->constraints) {
		json_t *none = constraints ? NULL : json_array();
		bool same = json_equal(g->constraints, constraints ? constraints : none);
		json_decref(none);
		if (!same)
			return false;
	}
	if (!g->any_uid && g->uid != call->peer.uid)
		return false;
	if (g->session && fnmatch(g->session, call->req->session, 0) != 0)
		return false;
	for (size_t i = 0; i < g->n_stages; i++) {
		const struct gstage *s = &g->stages[i];
		const struct cg_stage *st = &call->req->stages[i];
		if (strcmp(s->exe, call->stages[i].exe) != 0)
			return false;
		if (st->argc < s->n_args || (!s->rest_any && st->argc != s->n_args))
			return false;
		for (size_t j = 0; j < s->n_args; j++)
			if (!arg_matches(s->args[j], st->argv[j]))
				return false;
		/*
		 * A stage started under another name than argv[0] as sent (a
		 * workspace link runs under its program's own name) must match by
		 * that name too (s43e F3: a grant shown as xz ./xzcat notes.txt ran
		 * as ./xz and compressed the file as root).
		 */
		const char *argv0 = call->stages[i].argv0;
		if (argv0 && s->n_args && !arg_matches(s->args[0], argv0))
			return false;
	}
	return paths_ok(g, call);
}

static void unlink_grant(struct cg_grants *gs, struct cg_grant *g)
{
	for (struct cg_grant **pp = &gs->head; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			gs->n--;
			cg_grant_free(g);
			return;
		}
}

static void expire(struct cg_grants *gs, int64_t now)
{
	struct cg_grant **pp = &gs->head;
	while (*pp) {
		struct cg_grant *g = *pp;
		if (g->expires_wall_ns <= now || g->uses_left <= 0) {
			*pp = g->next;
			gs->n--;
			cg_grant_free(g);
		} else {
			pp = &g->next;
		}
	}
}

struct cg_grant *cg_grants_match(struct cg_grants *gs, const struct cg_call *call,
				 const json_t *constraints, int64_t now_wall_ns)
{
	expire(gs, now_wall_ns);
	for (struct cg_grant *g = gs->head; g; g = g->next)
		if (covers(g, call, constraints))
			return g;
	return NULL;
}

int64_t cg_grant_use(struct cg_grants *gs, struct cg_grant *g)
{
	g->used++;
	int64_t left = --g->uses_left;
	if (left <= 0)
		unlink_grant(gs, g);
	return left;
}

const char *cg_grant_id(const struct cg_grant *g)
{
	return g->id;
}

json_t *cg_grant_to_json(const struct cg_grant *g)
{
	json_t *pipe = json_array();
	for (size_t i = 0; pipe && i < g->n_stages; i++) {
		json_t *argv = json_array();
		for (size_t j = 0; argv && j < g->stages[i].n_args; j++)
			json_array_append_new(argv, json_string(g->stages[i].args[j]));
		if (argv && g->stages[i].rest_any)
			json_array_append_new(argv, json_string("**"));
		json_array_append_new(
		    pipe, json_pack("{s:s,s:o?}", "exe", g->stages[i].exe, "argv", argv));
	}
	json_t *paths = json_array();
	for (size_t i = 0; paths && i < g->n_paths; i++)
		json_array_append_new(paths, json_string(g->paths[i]));
	char exp[40], opened[40];
	cg_format_time(g->expires_wall_ns, exp, sizeof(exp));
	cg_format_time(g->opened_wall_ns, opened, sizeof(opened));
	json_t *o = json_pack("{s:s,s:o?,s:s?,s:o?,s:I,s:I,s:s,s:s,s:i}", "grant_id", g->id,
			      "pipeline", pipe, "session", g->session, "paths", paths, "uses_left",
			      (json_int_t)g->uses_left, "used", (json_int_t)g->used, "expires", exp,
			      "opened", opened, "opened_by", (int)g->opened_by);
	if (o && !g->any_uid)
		json_object_set_new(o, "uid", json_integer(g->uid));
	json_t *env = o ? json_array() : NULL;
	for (size_t i = 0; env && i < g->n_env; i++)
		json_array_append_new(env, json_string(g->env[i]));
	if (o) {
		json_object_set_new(o, "privileged", json_boolean(g->privileged));
		json_object_set_new(o, "forward_agent", json_boolean(g->forward_agent));
		if (g->timeout_ms)
			json_object_set_new(o, "timeout_ms", json_integer(g->timeout_ms));
		if (g->env_values) {
			json_decref(env);
			json_object_set(o, "env", g->env_values);
		} else {
			json_object_set_new(o, "env", env ? env : json_array());
		}
	}
	if (o && g->cwd)
		json_object_set_new(o, "cwd", json_string(g->cwd));
	if (o && g->host)
		json_object_set_new(o, "host", json_string(g->host));
	if (o && g->constraints)
		json_object_set(o, "constraints", g->constraints);
	return o;
}

json_t *cg_grants_list(struct cg_grants *gs, int64_t now_wall_ns)
{
	expire(gs, now_wall_ns);
	json_t *a = json_array();
	for (struct cg_grant *g = gs->head; a && g; g = g->next)
		json_array_append_new(a, cg_grant_to_json(g));
	return a;
}

int cg_grants_close(struct cg_grants *gs, const char *id)
{
	for (struct cg_grant *g = gs->head; g; g = g->next)
		if (strcmp(g->id, id) == 0) {
			unlink_grant(gs, g);
			return 0;
		}
	return -1;
}

void cg_grants_clear(struct cg_grants *gs)
{
	while (gs->head) {
		struct cg_grant *g = gs->head;
		gs->head = g->next;
		cg_grant_free(g);
	}
	gs->n = 0;
}
