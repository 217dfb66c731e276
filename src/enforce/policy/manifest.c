/* SPDX-License-Identifier: MIT */
/*
 * manifest — loading: the policy YAML (libyaml document API) compiled into
 * an immutable generation (manifest.h), and the generation's lifetime.
 *
 * Loading does all the work that can be done once: names are resolved to
 * uids/gids and canonical executable paths, globs are compiled to small
 * automata, argument patterns to one vectorscan database, rules are indexed
 * by executable. docs/policy.md is the format.
 *
 * Invariants:
 *  - Unknown or duplicate keys, wrong types, bad values, globs that do not
 *    parse and patterns that do not compile MUST be load errors naming the
 *    line; nothing is ignored, and a failed load leaves nothing behind.
 *  - A rule that could let an opaque launcher (shell, interpreter, wrapper)
 *    run MUST be refused unless it degrades with filesystem constraints (or
 *    defers/denies): argv cannot show what such a program will do, so only
 *    the kernel's confinement can bound it.
 *  - References are atomic: workers may hold a generation across a reload.
 */
#include "manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "egress_rule.h"
#include "util.h"
#include "wire.h"

static void *ar_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (!a->head || a->head->cap - a->head->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		/* Aliases can make a small file expand: bound what it compiles to. */
		if (cap > MAX_COMPILED_BYTES || a->total > MAX_COMPILED_BYTES - cap)
			return NULL;
		struct chunk *c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = a->head;
		c->used = 0;
		c->cap = cap;
		a->head = c;
		a->total += cap;
	}
	void *p = a->head->data + a->head->used;
	a->head->used += n;
	memset(p, 0, n);
	return p;
}

static char *ar_strndup(struct arena *a, const char *s, size_t n)
{
	char *d = ar_alloc(a, n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static char *ar_strdup(struct arena *a, const char *s)
{
	return ar_strndup(a, s, strlen(s));
}

static void ar_free(struct arena *a)
{
	struct chunk *c = a->head;
	while (c) {
		struct chunk *n = c->next;
		free(c);
		c = n;
	}
	a->head = NULL;
}

/* ---- globs (compiling; matching is in policy.c) ------------------------- */

/* What a load that ran out of its arena says (MAX_COMPILED_BYTES). */
#define POLICY_OOM "out of memory, or the compiled policy exceeds 64 MiB"

static int glob_compile(struct arena *a, const char *src, struct glob *g, char *err, size_t err_len)
{
	size_t len = strlen(src), n_open = 0;
	if (len > MAX_GLOB_BYTES) {
		snprintf(err, err_len, "glob is longer than %d bytes", MAX_GLOB_BYTES);
		return -1;
	}
	for (size_t i = 0; i < len; i++)
		n_open += src[i] == '[';
	struct gtok *t = ar_alloc(a, sizeof(*t) * (len + 1));
	uint8_t(*cls)[32] = ar_alloc(a, 32 * (n_open + 1));
	if (!t || !cls) {
		snprintf(err, err_len, POLICY_OOM);
		return -1;
	}
	size_t n = 0, nc = 0;
	for (size_t i = 0; i < len;) {
		if (n >= MAX_GLOB_TOKENS) {
			snprintf(err, err_len, "glob '%s' is longer than %d elements", src,
				 MAX_GLOB_TOKENS);
			return -1;
		}
		unsigned char c = (unsigned char)src[i];
		if (c == '*') {
			if (i + 1 < len && src[i + 1] == '*') {
				t[n++] = (struct gtok){ .type = G_GLOBSTAR };
				i += 2;
				while (i < len && src[i] == '*')
					i++;
			} else {
				t[n++] = (struct gtok){ .type = G_STAR };
				i++;
			}
		} else if (c == '?') {
			t[n++] = (struct gtok){ .type = G_ANY1 };
			i++;
		} else if (c == '[') {
			size_t j = i + 1;
			bool neg = false;
			if (j < len && (src[j] == '!' || src[j] == '^')) {
				neg = true;
				j++;
			}
			uint8_t *b = cls[nc];
			bool first = true, closed = false;
			while (j < len) {
				unsigned char lo = (unsigned char)src[j];
				if (lo == ']' && !first) {
					closed = true;
					j++;
					break;
				}
				first = false;
				if (lo == '\\' && j + 1 < len)
					lo = (unsigned char)src[++j];
				unsigned char hi = lo;
				if (j + 2 < len && src[j + 1] == '-' && src[j + 2] != ']') {
					hi = (unsigned char)src[j + 2];
					if (hi == '\\' && j + 3 < len) {
						hi = (unsigned char)src[j + 3];
						j++;
					}
					j += 2;
					if (hi < lo) {
						snprintf(err, err_len, "glob '%s': reversed range",
							 src);
						return -1;
					}
				}
				for (unsigned v = lo; v <= hi; v++)
					b[v / 8] |= (uint8_t)(1u << (v % 8));
				j++;
			}
			if (!closed) {
				snprintf(err, err_len, "glob '%s': unterminated '['", src);
				return -1;
			}
			if (neg)
				for (int k = 0; k < 32; k++)
					b[k] = (uint8_t)~b[k];
			/* A class never matches '/', like a shell's pathname glob. */
			b['/' / 8] &= (uint8_t) ~(1u << ('/' % 8));
			t[n++] = (struct gtok){ .type = G_CLASS, .cls = (uint16_t)nc++ };
			i = j;
		} else if (c == '\\') {
			if (i + 1 >= len) {
				snprintf(err, err_len, "glob '%s': trailing backslash", src);
				return -1;
			}
			t[n++] = (struct gtok){ .type = G_LIT, .c = (uint8_t)src[i + 1] };
			i += 2;
		} else {
			t[n++] = (struct gtok){ .type = G_LIT, .c = c };
			i++;
		}
	}
	uint16_t *reach = ar_alloc(a, sizeof(*reach) * (n + 1));
	if (!reach) {
		snprintf(err, err_len, POLICY_OOM);
		return -1;
	}
	reach[n] = (uint16_t)n;
	for (size_t k = n; k-- > 0;)
		reach[k] =
		    (t[k].type == G_STAR || t[k].type == G_GLOBSTAR) ? reach[k + 1] : (uint16_t)k;
	g->min_len = 0;
	for (size_t k = 0; k < n; k++)
		if (t[k].type != G_STAR && t[k].type != G_GLOBSTAR)
			g->min_len++;
	g->prefix_len = 0;
	while (g->prefix_len < n && t[g->prefix_len].type == G_LIT)
		g->prefix_len++;
	g->literal = g->prefix_len == n;
	g->suffix_len = 0;
	if (!g->literal)
		while (g->suffix_len < n && t[n - 1 - g->suffix_len].type == G_LIT)
			g->suffix_len++;
	size_t best = 0, best_at = 0;
	for (size_t k = 0; k < n;) {
		size_t e = k;
		while (e < n && t[e].type == G_LIT)
			e++;
		if (e - k > best) {
			best = e - k;
			best_at = k;
		}
		k = e + 1;
	}
	char *must = ar_alloc(a, best + 1);
	if (!must) {
		snprintf(err, err_len, POLICY_OOM);
		return -1;
	}
	for (size_t k = 0; k < best; k++)
		must[k] = (char)t[best_at + k].c;
	g->must = must;
	g->must_len = best;
	size_t n_star = 0, n_other = 0;
	for (size_t k = 0; k < n; k++) {
		if (t[k].type == G_GLOBSTAR)
			n_star++;
		else if (t[k].type != G_LIT)
			n_other++;
	}
	g->by_checks =
	    n_other == 0 && (n_star == 1 || (n_star == 2 && n > 2 && t[0].type == G_GLOBSTAR &&
					     t[n - 1].type == G_GLOBSTAR));
	g->src = ar_strdup(a, src);
	g->n = n;
	g->t = t;
	g->classes = (const uint8_t(*)[32])cls;
	g->reach = reach;
	return g->src ? 0 : -1;
}

/* Make state k live, and every state reachable from it through stars. */
static bool has_glob_chars(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

/* ---- the executable index (built at load, read by policy.c) -------------- */

static int idx_push(struct idxlist *l, uint32_t v)
{
	if (l->n > 0 && l->v[l->n - 1] == v)
		return 0; /* same rule named twice (e.g. a path and its target) */
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 8;
		uint32_t *nv = realloc(l->v, nc * sizeof(*nv));
		if (!nv)
			return -1;
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = v;
	return 0;
}

/* ---- opaque launchers ------------------------------------------------------ */

/*
 * Programs whose argv does not say what they will run: shells, interpreters,
 * wrappers that exec their arguments, privilege tools, and programs that run
 * commands from their own config or options. docs/policy.md says why.
 */
const char *const cg_opaque_builtin[] = {
	"sh",	   "bash",	 "dash",      "zsh",	      "ksh",	    "ksh93",  "mksh",
	"pdksh",   "yash",	 "fish",      "csh",	      "tcsh",	    "ash",    "rbash",
	"busybox", "toybox",	 "python",    "python[0-9]*", "pypy*",	    "perl",   "perl[0-9]*",
	"ruby",	   "ruby[0-9]*", "irb",	      "node",	      "nodejs",	    "deno",   "bun",
	"php",	   "php[0-9]*",	 "lua",	      "lua[0-9]*",    "luajit",	    "tclsh*", "wish*",
	"expect",  "awk",	 "gawk",      "mawk",	      "nawk",	    "sed",    "gsed",
	"ed",	   "ex",	 "vi",	      "vim",	      "nvim",	    "emacs",  "nano",
	"less",	   "more",	 "most",      "man",	      "env",	    "xargs",  "parallel",
	"find",	   "nohup",	 "timeout",   "nice",	      "ionice",	    "stdbuf", "setsid",
	"flock",   "watch",	 "time",      "chrt",	      "taskset",    "script", "strace",
	"ltrace",  "gdb",	 "valgrind",  "sudo",	      "su",	    "doas",   "pkexec",
	"runuser", "setpriv",	 "chroot",    "nsenter",      "unshare",    "capsh",  "ssh",
	"git",	   "make",	 "gmake",     "ninja",	      "cmake",	    "meson",  "npm",
	"npx",	   "yarn",	 "pnpm",      "pip",	      "pip[0-9]*",  "pipx",   "cargo",
	"go",	   "gem",	 "bundle",    "tar",	      "rsync",	    "zip",    "dpkg",
	"apt",	   "apt-get",	 "run-parts", "systemd-run",  "cc",	    "gcc",    "g++",
	"clang",   "clang++",	 "ld",	      "pytest",	      "ctest",	    "R",      "Rscript",
	"julia",   "osascript",	 "java",      "jshell",	      "scala",	    "kotlin", "guile",
	"racket",  "sbcl",	 "clisp",     "ghci",	      "runghc",	    "erl",    "elixir",
	"iex",	   "swift",	 "dotnet",    "pwsh",	      "powershell",
};
const size_t cg_opaque_builtin_n = CG_ARRAY_LEN(cg_opaque_builtin);

/* Names to try an exe_glob against (globs above reduced to an example). */
static const char *const opaque_samples[] = { "python3",  "python3.12", "python2", "perl5.36",
					      "ruby3.1",  "php8.2",	"lua5.4",  "pip3",
					      "tclsh8.6", "wish8.6",	"pypy3" };

static struct globs opaque_g; /* compiled cg_opaque_builtin */
static struct arena opaque_ar;
static pthread_once_t opaque_once = PTHREAD_ONCE_INIT;
static bool opaque_ok;

static void statics_init(void)
{
	size_t n = CG_ARRAY_LEN(cg_opaque_builtin);
	opaque_g.v = ar_alloc(&opaque_ar, n * sizeof(struct glob));
	if (!opaque_g.v)
		return;
	char err[128];
	for (size_t i = 0; i < n; i++)
		if (glob_compile(&opaque_ar, cg_opaque_builtin[i], &opaque_g.v[i], err,
				 sizeof(err)) != 0)
			return;
	opaque_g.n = n;
	opaque_ok = true;
}

/* Is this basename an opaque launcher (built-in class or the policy's extra)? */
static const char *opaque_name(const struct cg_policy *p, const char *base)
{
	for (size_t i = 0; i < opaque_g.n; i++)
		if (cg_glob_match_str(&opaque_g.v[i], base))
			return opaque_g.v[i].src;
	for (size_t i = 0; i < p->opaque_extra_g.n; i++)
		if (cg_glob_match_str(&p->opaque_extra_g.v[i], base))
			return p->opaque_extra_g.v[i].src;
	return NULL;
}

/* ---- loading ------------------------------------------------------------------ */

struct ld {
	const char *source;
	yaml_document_t doc;
	struct cg_policy *p;
	char err[512];
	size_t err_line, err_column; /* of the first error; 0: none */
	/* patterns collected across rules, compiled once at the end */
	size_t n_pats, cap_pats;
	const char **pats;
	uint32_t *pat_rule;
	/* constraints already compiled per YAML node (aliases share one set) */
	size_t n_cc, cap_cc;
	struct cg_smap *ids; /* rule id -> struct rule *, for duplicates */
	size_t scalars;	     /* values read so far, aliases counted each time */
	struct cg_smap *rp;  /* exe path -> its realpath ("" when none), once per load */
	struct {
		yaml_node_t *node;
		const struct cg_constraints *c;
	} * cc;
};

static size_t line_of(const yaml_node_t *n)
{
	return n ? n->start_mark.line + 1 : 0;
}

static int fail(struct ld *l, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct ld *l, const yaml_node_t *n, const char *fmt, ...)
{
	if (l->err[0])
		return -1; /* keep the first error */
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	l->err_line = line_of(n);
	l->err_column = n ? n->start_mark.column + 1 : 0;
	if (n)
		snprintf(l->err, sizeof(l->err), "line %zu, column %zu: %s", l->err_line,
			 n->start_mark.column + 1, msg);
	else
		snprintf(l->err, sizeof(l->err), "%s", msg);
	return -1;
}

static int oom(struct ld *l)
{
	return fail(l, NULL, POLICY_OOM);
}

static yaml_node_t *node_at(struct ld *l, int i)
{
	return yaml_document_get_node(&l->doc, i);
}

/* The scalar text of n (NUL-terminated, no embedded NUL), or NULL with an error. */
static const char *scalar(struct ld *l, yaml_node_t *n, const char *what)
{
	if (!n || n->type != YAML_SCALAR_NODE) {
		fail(l, n, "%s must be a scalar", what);
		return NULL;
	}
	/* Aliases let a short file name a value many times: bound the work. */
	if (++l->scalars > 1000000) {
		fail(l, n, "the policy has more than 1000000 values (counting aliases)");
		return NULL;
	}
	const char *s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length) {
		fail(l, n, "%s contains a NUL byte", what);
		return NULL;
	}
	return s;
}

static const char *nonempty(struct ld *l, yaml_node_t *n, const char *what)
{
	const char *s = scalar(l, n, what);
	if (s && !s[0]) {
		fail(l, n, "%s must not be empty", what);
		return NULL;
	}
	return s;
}

static int get_int(struct ld *l, yaml_node_t *n, const char *what, int64_t min, int64_t max,
		   int64_t *out)
{
	const char *s = scalar(l, n, what);
	if (!s)
		return -1;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || !s[0])
		return fail(l, n, "%s must be an integer", what);
	errno = 0;
	char *end = NULL;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return fail(l, n, "%s must be an integer, not '%s'", what, s);
	if ((v < min || v > max) && min == max)
		return fail(l, n, "%s must be %lld, not %lld", what, (long long)min, v);
	if (v < min || v > max)
		return fail(l, n, "%s must be between %lld and %lld, not %lld", what,
			    (long long)min, (long long)max, v);
	*out = v;
	return 0;
}

static int get_bool(struct ld *l, yaml_node_t *n, const char *what, bool *out)
{
	const char *s = scalar(l, n, what);
	if (!s)
		return -1;
	if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(s, "true") == 0)
		*out = true;
	else if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(s, "false") == 0)
		*out = false;
	else
		return fail(l, n, "%s must be true or false, not '%s'", what, s);
	return 0;
}

/*
 * Check that n is a mapping whose keys are unique scalars from allowed
 * (NULL-terminated). Unknown keys are errors: a typo must never silently
 * weaken a rule.
 */
static int check_keys(struct ld *l, yaml_node_t *n, const char *what, const char *const *allowed)
{
	if (!n || n->type != YAML_MAPPING_NODE)
		return fail(l, n, "%s must be a mapping", what);
	for (yaml_node_pair_t *a = n->data.mapping.pairs.start; a < n->data.mapping.pairs.top;
	     a++) {
		yaml_node_t *k = node_at(l, a->key);
		const char *ks = scalar(l, k, "a key");
		if (!ks)
			return -1;
		bool known = false;
		for (size_t i = 0; allowed[i]; i++)
			if (strcmp(allowed[i], ks) == 0)
				known = true;
		if (!known) {
			/* The key meant, when one is a typo away ("exe_globs"). */
			const char *near = NULL;
			for (size_t i = 0; allowed[i] && !near; i++)
				if (cg_edit_distance(ks, allowed[i]) <= 2)
					near = allowed[i];
			if (near)
				return fail(l, k, "%s: unknown key '%s' (did you mean '%s'?)", what,
					    ks, near);
			return fail(l, k, "%s: unknown key '%s'", what, ks);
		}
		for (yaml_node_pair_t *b = n->data.mapping.pairs.start; b < a; b++) {
			yaml_node_t *kb = node_at(l, b->key);
			if (kb && kb->type == YAML_SCALAR_NODE &&
			    strcmp((const char *)kb->data.scalar.value, ks) == 0)
				return fail(l, k, "%s: duplicate key '%s'", what, ks);
		}
	}
	return 0;
}

static yaml_node_t *get(struct ld *l, yaml_node_t *map, const char *key)
{
	for (yaml_node_pair_t *a = map->data.mapping.pairs.start; a < map->data.mapping.pairs.top;
	     a++) {
		yaml_node_t *k = node_at(l, a->key);
		if (k && k->type == YAML_SCALAR_NODE &&
		    strcmp((const char *)k->data.scalar.value, key) == 0)
			return node_at(l, a->value);
	}
	return NULL;
}

static int seq_check(struct ld *l, yaml_node_t *n, const char *what)
{
	if (!n || n->type != YAML_SEQUENCE_NODE)
		return fail(l, n, "%s must be a list", what);
	return 0;
}

static size_t seq_len(yaml_node_t *n)
{
	return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

static yaml_node_t *seq_item(struct ld *l, yaml_node_t *n, size_t i)
{
	return node_at(l, n->data.sequence.items.start[i]);
}

/* A list of non-empty strings into the arena. */
static int get_strs(struct ld *l, yaml_node_t *n, const char *what, struct strs *out)
{
	if (seq_check(l, n, what) != 0)
		return -1;
	size_t cnt = seq_len(n);
	out->v = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(char *));
	if (!out->v)
		return oom(l);
	for (size_t i = 0; i < cnt; i++) {
		const char *s = nonempty(l, seq_item(l, n, i), what);
		if (!s)
			return -1;
		if (!(out->v[i] = ar_strdup(&l->p->ar, s)))
			return oom(l);
	}
	out->n = cnt;
	return 0;
}

static int get_globs(struct ld *l, yaml_node_t *n, const char *what, bool absolute,
		     struct globs *out)
{
	if (seq_check(l, n, what) != 0)
		return -1;
	size_t cnt = seq_len(n);
	out->v = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(struct glob));
	if (!out->v)
		return oom(l);
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = seq_item(l, n, i);
		const char *s = nonempty(l, it, what);
		if (!s)
			return -1;
		if (absolute && s[0] != '/')
			return fail(l, it, "%s: '%s' must be an absolute path glob", what, s);
		char err[300];
		if (glob_compile(&l->p->ar, s, &out->v[i], err, sizeof(err)) != 0)
			return fail(l, it, "%s: %s", what, err);
	}
	out->n = cnt;
	return 0;
}

static bool valid_id(const char *s)
{
	if (!s[0] || strlen(s) > 128)
		return false;
	for (const char *c = s; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-'))
			return false;
	return true;
}

static bool valid_env_name(const char *s)
{
	if (!s[0] || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (const char *c = s; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_'))
			return false;
	return true;
}

/* ---- defaults ---- */

static const char *const default_env_allow[] = {
	"LANG",
	"LC_ALL",
	"LC_CTYPE",
	"TERM",
	"TZ",
	"NO_COLOR",
	"DEBIAN_FRONTEND",
	"GIT_AUTHOR_NAME",
	"GIT_AUTHOR_EMAIL",
	"GIT_COMMITTER_NAME",
	"GIT_COMMITTER_EMAIL",
	"CI",
};

static int load_defaults(struct ld *l, yaml_node_t *n)
{
	struct cg_policy_defaults *d = &l->p->defaults;
	if (!n)
		return 0;
	static const char *const keys[] = { "timeout_ms",
					    "max_timeout_ms",
					    "output_cap",
					    "env_allow",
					    "approval_timeout_ms",
					    "freshness_s",
					    "screen_secrets",
					    "screen_injection",
					    "evidence_keep_output",
					    "cwd",
					    NULL };
	if (check_keys(l, n, "defaults", keys) != 0)
		return -1;
	yaml_node_t *v;
	int64_t x = 0;
	if ((v = get(l, n, "max_timeout_ms"))) {
		if (get_int(l, v, "defaults.max_timeout_ms", 1, CG_WIRE_MAX_TIMEOUTMS, &x) != 0)
			return -1;
		d->max_timeout_ms = x;
	}
	if ((v = get(l, n, "timeout_ms"))) {
		if (get_int(l, v, "defaults.timeout_ms", 1, CG_WIRE_MAX_TIMEOUTMS, &x) != 0)
			return -1;
		d->timeout_ms = x;
	}
	if (d->timeout_ms > d->max_timeout_ms)
		return fail(l, get(l, n, "timeout_ms") ? get(l, n, "timeout_ms") : n,
			    "defaults.timeout_ms (%lld) exceeds max_timeout_ms (%lld)",
			    (long long)d->timeout_ms, (long long)d->max_timeout_ms);
	if ((v = get(l, n, "output_cap"))) {
		if (get_int(l, v, "defaults.output_cap", 1, INT64_C(1) << 40, &x) != 0)
			return -1;
		d->output_cap = (size_t)x;
	}
	if ((v = get(l, n, "approval_timeout_ms"))) {
		if (get_int(l, v, "defaults.approval_timeout_ms", 1, CG_WIRE_MAX_TIMEOUTMS, &x) !=
		    0)
			return -1;
		d->approval_timeout_ms = x;
	}
	if ((v = get(l, n, "freshness_s"))) {
		if (get_int(l, v, "defaults.freshness_s", 1, 86400, &x) != 0)
			return -1;
		d->freshness_s = x;
	}
	if ((v = get(l, n, "cwd"))) {
		const char *c = nonempty(l, v, "defaults.cwd");
		if (!c)
			return -1;
		/*
		 * Shape only (no syscalls at load for a path that may not exist
		 * yet): absolute, or ${workspace} and a sub-path; no "." or ".."
		 * components, so what is written is what the world adapter checks.
		 */
		const char *rest = c;
		if (strncmp(c, "${workspace}", 12) == 0)
			rest = c + 12;
		else if (c[0] != '/')
			return fail(
			    l, v, "defaults.cwd: '%s' must be absolute or start with ${workspace}",
			    c);
		if (rest[0] != '\0' && rest[0] != '/')
			return fail(l, v, "defaults.cwd: '%s': a '/' must follow ${workspace}", c);
		for (const char *q = rest; *q; q++)
			if (q[0] == '/' && q[1] == '.' &&
			    (q[2] == '/' || q[2] == '\0' ||
			     (q[2] == '.' && (q[3] == '/' || q[3] == '\0'))))
				return fail(l, v, "defaults.cwd: '%s' has a '.' or '..' component",
					    c);
		if (strstr(rest, "${"))
			return fail(
			    l, v, "defaults.cwd: '%s': only a leading ${workspace} is expanded", c);
		if (!(d->default_cwd = ar_strdup(&l->p->ar, c)))
			return oom(l);
	}
	if ((v = get(l, n, "screen_secrets")) &&
	    get_bool(l, v, "defaults.screen_secrets", &d->screen_secrets) != 0)
		return -1;
	if ((v = get(l, n, "screen_injection")) &&
	    get_bool(l, v, "defaults.screen_injection", &d->screen_injection) != 0)
		return -1;
	if ((v = get(l, n, "evidence_keep_output")) &&
	    get_bool(l, v, "defaults.evidence_keep_output", &d->evidence_keep_output) != 0)
		return -1;
	if ((v = get(l, n, "env_allow"))) {
		struct strs s = { 0 };
		if (get_strs(l, v, "defaults.env_allow", &s) != 0)
			return -1;
		for (size_t i = 0; i < s.n; i++)
			if (!valid_env_name(s.v[i]))
				return fail(l, seq_item(l, v, i),
					    "defaults.env_allow: '%s' is not an environment name",
					    s.v[i]);
		d->env_allow = s.v;
		d->n_env_allow = s.n;
	}
	return 0;
}

/* ---- evidence ---- */

/*
 * evidence.packages: "archive" (the default: each package appended to its
 * journal segment's archive as it is sealed) or "directories" (traces/ID/).
 */
static int load_packages(struct ld *l, yaml_node_t *v)
{
	const char *s = nonempty(l, v, "evidence.packages");
	if (!s)
		return -1;
	if (strcmp(s, "directories") != 0 && strcmp(s, "archive") != 0)
		return fail(l, v, "evidence.packages: '%s' is neither directories nor archive", s);
	l->p->defaults.evidence_archive = strcmp(s, "archive") == 0;
	return 0;
}

/*
 * evidence.retention: how long trace packages stay as directories before
 * the daemon packs them into one archive per journal segment. A number of
 * seconds, or a number followed by s, m, h or d; 0 or "never": never.
 */
static int load_evidence(struct ld *l, yaml_node_t *n)
{
	static const char *const keys[] = { "retention", "packages", NULL };
	if (!n)
		return 0;
	if (check_keys(l, n, "evidence", keys) != 0)
		return -1;
	yaml_node_t *pk = get(l, n, "packages");
	if (pk && load_packages(l, pk) != 0)
		return -1;
	yaml_node_t *v = get(l, n, "retention");
	if (!v)
		return 0;
	const char *s = nonempty(l, v, "evidence.retention");
	if (!s)
		return -1;
	if (strcmp(s, "never") == 0) {
		l->p->defaults.evidence_retention_s = 0;
		return 0;
	}
	char *end = NULL;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	int64_t unit = !end || !*end	       ? 1
		       : strcmp(end, "s") == 0 ? 1
		       : strcmp(end, "m") == 0 ? 60
		       : strcmp(end, "h") == 0 ? 3600
		       : strcmp(end, "d") == 0 ? 86400
					       : -1;
	if (errno || end == s || !(s[0] >= '0' && s[0] <= '9') || x < 0 || unit < 0 ||
	    x > INT64_C(3650) * 86400 / unit)
		return fail(l, v,
			    "evidence.retention: '%s' is not a duration (a number of seconds, "
			    "or a number followed by s, m, h or d, at most 3650d; or never)",
			    s);
	l->p->defaults.evidence_retention_s = (int64_t)x * unit;
	return 0;
}

/* ---- rate limits ---- */

static int load_rate(struct ld *l, yaml_node_t *n, const char *what, bool peer, struct rate *r)
{
	static const char *const keys[] = { "calls", "per_s", NULL };
	if (check_keys(l, n, what, keys) != 0)
		return -1;
	yaml_node_t *c = get(l, n, "calls"), *s = get(l, n, "per_s");
	if (!c || !s)
		return fail(l, n, "%s needs calls and per_s", what);
	if (get_int(l, c, "calls", 1, 1000000, &r->calls) != 0 ||
	    get_int(l, s, "per_s", 1, 86400, &r->per_s) != 0)
		return -1;
	r->interval_ns = r->per_s * 1000000000LL / r->calls;
	if (r->interval_ns < 1)
		r->interval_ns = 1;
	r->tolerance_ns = r->interval_ns * (r->calls - 1);
	char why[128];
	snprintf(why, sizeof(why), "more than %lld calls in %lld s %s", (long long)r->calls,
		 (long long)r->per_s, peer ? "from this peer" : "in this session");
	if (!(r->why = ar_strdup(&l->p->ar, why)))
		return oom(l);
	r->on = true;
	return 0;
}

static int load_rate_limits(struct ld *l, yaml_node_t *n)
{
	if (!n)
		return 0;
	static const char *const keys[] = { "per_peer", "per_session", NULL };
	if (check_keys(l, n, "rate_limits", keys) != 0)
		return -1;
	yaml_node_t *v;
	if ((v = get(l, n, "per_peer")) &&
	    load_rate(l, v, "rate_limits.per_peer", true, &l->p->per_peer) != 0)
		return -1;
	if ((v = get(l, n, "per_session")) &&
	    load_rate(l, v, "rate_limits.per_session", false, &l->p->per_session) != 0)
		return -1;
	return 0;
}

/* ---- commands ---- */

/* The decide path's lookup tables for one spec (manifest.h, struct cmdspec). */
static int spec_tables(struct ld *l, struct cmdspec *s)
{
	memset(s->short_vf, 0, sizeof(s->short_vf));
	memset(s->short_gvf, 0, sizeof(s->short_gvf));
	for (size_t c = 0; c < 256; c++)
		s->short_alias[c] = -1;
	s->alias_len = ar_alloc(&l->p->ar, (s->n_alias + 1) * sizeof(size_t));
	s->canon_len = ar_alloc(&l->p->ar, (s->n_alias + 1) * sizeof(size_t));
	s->vf_len = ar_alloc(&l->p->ar, (s->value_flags.n + 1) * sizeof(size_t));
	s->gvf_len = ar_alloc(&l->p->ar, (s->global_value_flags.n + 1) * sizeof(size_t));
	if (!s->alias_len || !s->canon_len || !s->vf_len || !s->gvf_len)
		return oom(l);
	for (size_t i = 0; i < s->n_alias; i++) {
		s->alias_len[i] = strlen(s->alias[i]);
		s->canon_len[i] = strlen(s->canon[i]);
		unsigned char c = (unsigned char)s->alias[i][1];
		if (s->alias_len[i] == 2 && s->short_alias[c] < 0)
			s->short_alias[c] = (int16_t)i;
	}
	for (size_t i = 0; i < s->value_flags.n; i++) {
		s->vf_len[i] = strlen(s->value_flags.v[i]);
		unsigned char c = (unsigned char)s->value_flags.v[i][1];
		if (s->vf_len[i] == 2)
			s->short_vf[c / 8] |= (uint8_t)(1u << (c % 8));
	}
	for (size_t i = 0; i < s->global_value_flags.n; i++) {
		s->gvf_len[i] = strlen(s->global_value_flags.v[i]);
		unsigned char c = (unsigned char)s->global_value_flags.v[i][1];
		if (s->gvf_len[i] == 2)
			s->short_gvf[c / 8] |= (uint8_t)(1u << (c % 8));
	}
	return 0;
}

static int load_commands(struct ld *l, yaml_node_t *n)
{
	struct cg_policy *p = l->p;
	if (!n)
		return 0;
	if (n->type != YAML_MAPPING_NODE)
		return fail(l, n, "commands must be a mapping of program name to flag syntax");
	size_t cnt = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	p->specs = ar_alloc(&p->ar, (cnt + 1) * sizeof(*p->specs));
	if (!p->specs)
		return oom(l);
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_pair_t *pr = &n->data.mapping.pairs.start[i];
		yaml_node_t *k = node_at(l, pr->key), *v = node_at(l, pr->value);
		const char *name = nonempty(l, k, "a command name");
		if (!name)
			return -1;
		if (strchr(name, '/'))
			return fail(l, k, "commands: '%s' must be a basename, not a path", name);
		if (cg_smap_get(p->spec_by_name, name))
			return fail(l, k, "commands: duplicate key '%s'", name);
		struct cmdspec *s = &p->specs[i];
		char what[160];
		snprintf(what, sizeof(what), "commands.%s", name);
		static const char *const keys[] = { "flags",	"value_flags", "global_value_flags",
						    "bundling", "wraps",       NULL };
		if (check_keys(l, v, what, keys) != 0)
			return -1;
		s->name = ar_strdup(&p->ar, name);
		s->bundling = true;
		yaml_node_t *x;
		if ((x = get(l, v, "bundling")) && get_bool(l, x, what, &s->bundling) != 0)
			return -1;
		if ((x = get(l, v, "wraps"))) {
			char wwhat[192];
			snprintf(wwhat, sizeof(wwhat), "%s.wraps", what);
			static const char *const wkeys[] = { "operands", "assignments", NULL };
			if (check_keys(l, x, wwhat, wkeys) != 0)
				return -1;
			yaml_node_t *y;
			s->wraps = true;
			if ((y = get(l, x, "operands")) &&
			    get_int(l, y, "wraps.operands", 0, 8, &s->wrap_operands) != 0)
				return -1;
			if ((y = get(l, x, "assignments")) &&
			    get_bool(l, y, "wraps.assignments", &s->wrap_assign) != 0)
				return -1;
		}
		static const char *const vkeys[] = { "value_flags", "global_value_flags" };
		struct strs *vlists[] = { &s->value_flags, &s->global_value_flags };
		for (size_t q = 0; q < CG_ARRAY_LEN(vkeys); q++) {
			if (!(x = get(l, v, vkeys[q])))
				continue;
			struct strs *vl = vlists[q];
			if (get_strs(l, x, what, vl) != 0)
				return -1;
			for (size_t j = 0; j < vl->n; j++)
				if (vl->v[j][0] != '-' || !vl->v[j][1])
					return fail(l, seq_item(l, x, j),
						    "%s.%s: '%s' is not a flag", name, vkeys[q],
						    vl->v[j]);
		}
		if ((x = get(l, v, "flags"))) {
			if (seq_check(l, x, "flags") != 0)
				return -1;
			size_t ng = seq_len(x), total = 0;
			s->groups = ar_alloc(&p->ar, (ng + 1) * sizeof(*s->groups));
			if (!s->groups)
				return oom(l);
			for (size_t g = 0; g < ng; g++) {
				yaml_node_t *gi = seq_item(l, x, g);
				if (get_strs(l, gi, "commands flags group", &s->groups[g]) != 0)
					return -1;
				if (s->groups[g].n < 1)
					return fail(l, gi, "%s.flags: an empty group", name);
				total += s->groups[g].n;
			}
			s->n_groups = ng;
			s->alias = ar_alloc(&p->ar, (total + 1) * sizeof(char *));
			s->canon = ar_alloc(&p->ar, (total + 1) * sizeof(char *));
			if (!s->alias || !s->canon)
				return oom(l);
			for (size_t g = 0; g < ng; g++)
				for (size_t j = 0; j < s->groups[g].n; j++) {
					const char *f = s->groups[g].v[j];
					if (f[0] != '-' || !f[1] || strchr(f, '='))
						return fail(l, seq_item(l, x, g),
							    "%s.flags: '%s' is not a flag", name,
							    f);
					for (size_t q = 0; q < s->n_alias; q++)
						if (strcmp(s->alias[q], f) == 0)
							return fail(
							    l, seq_item(l, x, g),
							    "%s.flags: '%s' is in two groups", name,
							    f);
					s->alias[s->n_alias] = f;
					s->canon[s->n_alias++] = s->groups[g].v[0];
				}
		}
		if (spec_tables(l, s) != 0)
			return -1;
		if (!s->name || cg_smap_put(p->spec_by_name, s->name, s) != 0)
			return oom(l);
		p->n_specs++;
	}
	return 0;
}

/* ---- rules ---- */

static int add_pattern(struct ld *l, const char *pat, uint32_t rule, uint32_t *id)
{
	if (l->n_pats == l->cap_pats) {
		size_t nc = l->cap_pats ? l->cap_pats * 2 : 16;
		const char **np = realloc(l->pats, nc * sizeof(*np));
		if (!np)
			return oom(l);
		l->pats = np;
		uint32_t *nr = realloc(l->pat_rule, nc * sizeof(*nr));
		if (!nr)
			return oom(l);
		l->pat_rule = nr;
		l->cap_pats = nc;
	}
	l->pats[l->n_pats] = pat;
	l->pat_rule[l->n_pats] = rule;
	*id = (uint32_t)l->n_pats++;
	return 0;
}

/* A directory for within/below/outside: absolute, or ${workspace}/${cwd} + suffix. */
static int get_dir(struct ld *l, yaml_node_t *n, const char *s, struct pred *pr)
{
	const char *rest = s;
	if (strncmp(s, "${workspace}", 12) == 0) {
		pr->base = D_WORKSPACE;
		rest = s + 12;
	} else if (strncmp(s, "${cwd}", 6) == 0) {
		pr->base = D_CWD;
		rest = s + 6;
	} else if (s[0] == '/') {
		pr->base = D_ABS;
	} else {
		return fail(l, n,
			    "'%s' must be an absolute directory or start with ${workspace} or "
			    "${cwd} (${home} is not known while deciding)",
			    s);
	}
	if (pr->base != D_ABS && rest[0] && rest[0] != '/')
		return fail(l, n, "'%s': a '/' must follow the variable", s);
	if (strstr(rest, "${"))
		return fail(l, n, "'%s': unknown variable", s);
	char buf[PATH_BUF];
	if (!cg_path_canon("/", rest[0] ? rest : "/", buf, sizeof(buf)))
		return fail(l, n, "'%s' is too long", s);
	/* For a variable base keep the suffix only ("" for the variable itself). */
	const char *keep = (pr->base != D_ABS && strcmp(buf, "/") == 0) ? "" : buf;
	if (!(pr->dir = ar_strdup(&l->p->ar, keep)))
		return oom(l);
	return 0;
}

/*
 * Set ps->path_must (manifest.h) to the longest literal contained in every
 * path glob's must, when all predicates are path globs and there are at
 * least two. Load time only; quadratic in a must's length (capped at 64).
 */
static int preds_prefilter(struct ld *l, struct preds *ps)
{
	ps->path_must = NULL;
	ps->path_must_len = 0;
	if (ps->n < 2)
		return 0;
	for (size_t i = 0; i < ps->n; i++)
		if (ps->v[i].kind != P_PATH || ps->v[i].g.must_len == 0)
			return 0;
	const char *m0 = ps->v[0].g.must;
	size_t l0 = ps->v[0].g.must_len < 64 ? ps->v[0].g.must_len : 64;
	for (size_t len = l0; len >= 2; len--)
		for (size_t at = 0; at + len <= l0; at++) {
			bool all = true;
			for (size_t i = 1; i < ps->n && all; i++)
				all = memmem(ps->v[i].g.must, ps->v[i].g.must_len, m0 + at, len) !=
				      NULL;
			if (!all)
				continue;
			char *c = ar_alloc(&l->p->ar, len + 1);
			if (!c)
				return oom(l);
			memcpy(c, m0 + at, len);
			c[len] = '\0';
			ps->path_must = c;
			ps->path_must_len = len;
			return 0;
		}
	return 0;
}

static int get_preds(struct ld *l, yaml_node_t *n, const char *what, uint32_t rule,
		     struct preds *out, bool *uses_patterns)
{
	if (seq_check(l, n, what) != 0)
		return -1;
	size_t cnt = seq_len(n);
	out->v = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(struct pred));
	if (!out->v)
		return oom(l);
	static const char *const keys[] = { "glob",    "path",	  "within", "below",
					    "outside", "pattern", NULL };
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = seq_item(l, n, i);
		if (check_keys(l, it, what, keys) != 0)
			return -1;
		if (it->data.mapping.pairs.top - it->data.mapping.pairs.start != 1)
			return fail(l, it,
				    "%s: a predicate has exactly one of glob, path, within, "
				    "below, outside, pattern",
				    what);
		yaml_node_t *k = node_at(l, it->data.mapping.pairs.start[0].key);
		yaml_node_t *v = node_at(l, it->data.mapping.pairs.start[0].value);
		const char *key = (const char *)k->data.scalar.value;
		const char *s = nonempty(l, v, what);
		if (!s)
			return -1;
		struct pred *pr = &out->v[i];
		if (!(pr->src = ar_strdup(&l->p->ar, s)))
			return oom(l);
		char err[300];
		if (strcmp(key, "glob") == 0 || strcmp(key, "path") == 0) {
			pr->kind = key[0] == 'g' ? P_GLOB : P_PATH;
			if (glob_compile(&l->p->ar, s, &pr->g, err, sizeof(err)) != 0)
				return fail(l, v, "%s: %s", what, err);
		} else if (strcmp(key, "pattern") == 0) {
			pr->kind = P_PATTERN;
			if (add_pattern(l, pr->src, rule, &pr->pat) != 0)
				return -1;
			*uses_patterns = true;
		} else {
			pr->kind = key[0] == 'w' ? P_WITHIN : key[0] == 'b' ? P_BELOW : P_OUTSIDE;
			if (get_dir(l, v, s, pr) != 0)
				return -1;
		}
	}
	out->n = cnt;
	return preds_prefilter(l, out);
}

/*
 * match.exe_within: directories (absolute, or ${workspace}/${cwd} and a
 * sub-path) the resolved program must lie in: a program the project built
 * (./hello, .venv/bin/python), which no exe or exe_glob can name ahead of
 * the workspace. Held when the program is within any of them.
 */
static int get_exe_within(struct ld *l, yaml_node_t *n, struct rule *r)
{
	struct strs s = { 0 };
	if (get_strs(l, n, "match.exe_within", &s) != 0)
		return -1;
	r->exe_within.v = ar_alloc(&l->p->ar, (s.n + 1) * sizeof(struct pred));
	if (!r->exe_within.v)
		return oom(l);
	for (size_t i = 0; i < s.n; i++) {
		struct pred *pr = &r->exe_within.v[i];
		pr->kind = P_WITHIN;
		pr->src = s.v[i];
		if (get_dir(l, seq_item(l, n, i), s.v[i], pr) != 0)
			return -1;
	}
	r->exe_within.n = s.n;
	return 0;
}

static int get_pathlist(struct ld *l, yaml_node_t *n, const char *what, size_t *count,
			const char *const **out)
{
	struct strs s = { 0 };
	if (get_strs(l, n, what, &s) != 0)
		return -1;
	for (size_t i = 0; i < s.n; i++) {
		const char *v = s.v[i];
		if (!(v[0] == '/' || strncmp(v, "${workspace}", 12) == 0 ||
		      strncmp(v, "${cwd}", 6) == 0 || strncmp(v, "${home}", 7) == 0))
			return fail(
			    l, seq_item(l, n, i),
			    "%s: '%s' must be absolute or start with ${workspace}, ${cwd} or "
			    "${home}",
			    what, v);
	}
	*count = s.n;
	*out = s.v;
	return 0;
}

/* One host list (net.allow, net.deny): "name[:port]", "*.suffix[:port]", addresses. */
static int get_hostlist(struct ld *l, yaml_node_t *n, const char *what, size_t *count,
			const struct cg_host_entry **out)
{
	struct strs s = { 0 };
	if (get_strs(l, n, what, &s) != 0)
		return -1;
	struct cg_host_entry *v = ar_alloc(&l->p->ar, (s.n + 1) * sizeof(*v));
	if (!v)
		return oom(l);
	for (size_t i = 0; i < s.n; i++) {
		char name[CG_HOST_NAME_MAX + 1];
		const char *why = NULL;
		if (cg_host_entry_parse(s.v[i], name, sizeof(name), &v[i].port, &why) != 0)
			return fail(l, seq_item(l, n, i), "%s: '%s': %s", what, s.v[i], why);
		if (!(v[i].name = ar_strdup(&l->p->ar, name)))
			return oom(l);
	}
	*count = s.n;
	*out = v;
	return 0;
}

/* net: {allow: [...], deny: [...], resolve: {name: address}} (docs/egress.md). */
static int load_net_hosts(struct ld *l, yaml_node_t *n, struct cg_constraints *c)
{
	static const char *const keys[] = { "allow", "deny", "resolve", NULL };
	if (check_keys(l, n, "constraints.net", keys) != 0)
		return -1;
	c->net = CG_NET_HOSTS;
	yaml_node_t *v;
	if (!(v = get(l, n, "allow")))
		return fail(l, n, "constraints.net needs an allow list (use net: none for none)");
	if (get_hostlist(l, v, "constraints.net.allow", &c->n_allow_hosts, &c->allow_hosts) != 0)
		return -1;
	if ((v = get(l, n, "deny")) &&
	    get_hostlist(l, v, "constraints.net.deny", &c->n_deny_hosts, &c->deny_hosts) != 0)
		return -1;
	if (!(v = get(l, n, "resolve")))
		return 0;
	if (v->type != YAML_MAPPING_NODE)
		return fail(l, v, "constraints.net.resolve must be a mapping of name to address");
	size_t cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	struct cg_host_pin *pins = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(*pins));
	if (!pins)
		return oom(l);
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
		yaml_node_t *k = node_at(l, pr->key), *a = node_at(l, pr->value);
		const char *name = nonempty(l, k, "a name in constraints.net.resolve");
		const char *addr = name ? nonempty(l, a, "an address") : NULL;
		if (!addr)
			return -1;
		char norm[CG_HOST_NAME_MAX + 1];
		uint16_t port = 0;
		const char *why = NULL;
		if (cg_host_entry_parse(name, norm, sizeof(norm), &port, &why) != 0 || port ||
		    strchr(norm, '*'))
			return fail(l, k, "constraints.net.resolve: '%s' must be a plain host name",
				    name);
		if (!cg_host_is_address(addr))
			return fail(l, a, "constraints.net.resolve.%s: '%s' is not an IP address",
				    name, addr);
		if (!(pins[i].name = ar_strdup(&l->p->ar, norm)) ||
		    !(pins[i].address = ar_strdup(&l->p->ar, addr)))
			return oom(l);
	}
	c->pins = pins;
	c->n_pins = cnt;
	return 0;
}

/*
 * The view's keys: hide (absolute paths or globs with nothing there),
 * scratch (writable, empty, the call's own), protect (read-only inside
 * write trees; a relative path applies in each write tree), tmp (private or
 * shared).
 */
static int load_view_keys(struct ld *l, yaml_node_t *n, struct cg_constraints *c)
{
	yaml_node_t *v;
	if ((v = get(l, n, "hide")) &&
	    get_pathlist(l, v, "constraints.hide", &c->n_hide, &c->hide) != 0)
		return -1;
	if ((v = get(l, n, "scratch")) &&
	    get_pathlist(l, v, "constraints.scratch", &c->n_scratch, &c->scratch) != 0)
		return -1;
	if ((v = get(l, n, "protect"))) {
		struct strs s = { 0 };
		if (get_strs(l, v, "constraints.protect", &s) != 0)
			return -1;
		for (size_t i = 0; i < s.n; i++)
			if (!s.v[i][0] || strstr(s.v[i], ".."))
				return fail(l, seq_item(l, v, i),
					    "constraints.protect: '%s' must be a path without ..",
					    s.v[i]);
		c->n_protect = s.n;
		c->protect = s.v;
	}
	if ((v = get(l, n, "tmp"))) {
		const char *t = scalar(l, v, "constraints.tmp");
		if (!t)
			return -1;
		if (strcmp(t, "private") == 0)
			c->tmp = CG_TMP_PRIVATE;
		else if (strcmp(t, "shared") == 0)
			c->tmp = CG_TMP_SHARED;
		else
			return fail(l, v, "constraints.tmp must be private or shared, not '%s'", t);
	}
	if ((v = get(l, n, "git"))) {
		const char *t = scalar(l, v, "constraints.git");
		if (!t)
			return -1;
		if (strcmp(t, "write") == 0)
			c->git_write = true;
		else if (strcmp(t, "read-only") != 0)
			return fail(l, v, "constraints.git must be write or read-only, not '%s'",
				    t);
	}
	return 0;
}

static int load_constraints(struct ld *l, yaml_node_t *n, const char *rid,
			    const struct cg_constraints **out)
{
	for (size_t i = 0; i < l->n_cc; i++)
		if (l->cc[i].node == n) {
			*out = l->cc[i].c; /* a YAML alias: one shared set */
			return 0;
		}
	static const char *const keys[] = { "read",    "write",	  "exec",	"net",
					    "ports",   "limits",  "timeout_ms", "best_effort",
					    "hide",    "protect", "tmp",	"git",
					    "scratch", NULL };
	char what[200];
	snprintf(what, sizeof(what), "rule %s: constraints", rid);
	if (check_keys(l, n, what, keys) != 0)
		return -1;
	struct cg_constraints *c = ar_alloc(&l->p->ar, sizeof(*c));
	if (!c)
		return oom(l);
	c->limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
					CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	c->timeout_ms = CG_LIMIT_UNSET;
	yaml_node_t *v;
	if ((v = get(l, n, "read"))) {
		if (get_pathlist(l, v, "constraints.read", &c->n_read, &c->read) != 0)
			return -1;
		c->fs = true;
	}
	if ((v = get(l, n, "write"))) {
		if (get_pathlist(l, v, "constraints.write", &c->n_write, &c->write) != 0)
			return -1;
		c->fs = true;
	}
	if ((v = get(l, n, "exec"))) {
		if (get_pathlist(l, v, "constraints.exec", &c->n_exec, &c->exec) != 0)
			return -1;
		c->fs = true;
	}
	if (c->fs) {
		/* Absent lists are empty, never NULL, for the confinement code. */
		static const char *const none[] = { NULL };
		if (!c->read)
			c->read = none;
		if (!c->write)
			c->write = none;
		if (!c->exec)
			c->exec = none;
	}
	if ((v = get(l, n, "net")) && v->type == YAML_MAPPING_NODE) {
		if (load_net_hosts(l, v, c) != 0)
			return -1;
	} else if (v) {
		const char *s = scalar(l, v, "constraints.net");
		if (!s)
			return -1;
		if (strcmp(s, "none") == 0)
			c->net = CG_NET_NONE;
		else if (strcmp(s, "loopback") == 0)
			c->net = CG_NET_LOOPBACK;
		else if (strcmp(s, "tcp") == 0)
			c->net = CG_NET_TCP;
		else
			return fail(l, v,
				    "constraints.net must be none, loopback, tcp or a mapping of "
				    "allow/deny host lists, not '%s'",
				    s);
	}
	yaml_node_t *ports = get(l, n, "ports");
	if (ports) {
		if (c->net != CG_NET_TCP)
			return fail(l, ports, "constraints.ports needs net: tcp");
		if (seq_check(l, ports, "constraints.ports") != 0)
			return -1;
		size_t np = seq_len(ports);
		uint16_t *pv = ar_alloc(&l->p->ar, (np + 1) * sizeof(*pv));
		if (!pv)
			return oom(l);
		for (size_t i = 0; i < np; i++) {
			int64_t x = 0;
			if (get_int(l, seq_item(l, ports, i), "a port", 1, 65535, &x) != 0)
				return -1;
			pv[i] = (uint16_t)x;
		}
		c->ports = pv;
		c->n_ports = np;
	} else if (c->net == CG_NET_TCP) {
		return fail(l, v, "constraints.net: tcp needs ports");
	}
	if ((v = get(l, n, "limits"))) {
		static const char *const lk[] = { "cpu_s",	 "as_bytes", "nproc",
						  "fsize_bytes", "nofile",   NULL };
		if (check_keys(l, v, "constraints.limits", lk) != 0)
			return -1;
		int64_t *dst[] = { &c->limits.cpu_s, &c->limits.as_bytes, &c->limits.nproc,
				   &c->limits.fsize_bytes, &c->limits.nofile };
		for (size_t i = 0; lk[i]; i++) {
			yaml_node_t *x = get(l, v, lk[i]);
			if (x && get_int(l, x, lk[i], 1, INT64_MAX, dst[i]) != 0)
				return -1;
		}
	}
	if ((v = get(l, n, "timeout_ms")) &&
	    get_int(l, v, "constraints.timeout_ms", 1, l->p->defaults.max_timeout_ms,
		    &c->timeout_ms) != 0)
		return -1;
	if ((v = get(l, n, "best_effort")) &&
	    get_bool(l, v, "constraints.best_effort", &c->best_effort) != 0)
		return -1;
	if (load_view_keys(l, n, c) != 0)
		return -1;
	if (l->n_cc == l->cap_cc) {
		size_t nc = l->cap_cc ? l->cap_cc * 2 : 8;
		void *np = realloc(l->cc, nc * sizeof(*l->cc));
		if (!np)
			return oom(l);
		l->cc = np;
		l->cap_cc = nc;
	}
	l->cc[l->n_cc].node = n;
	l->cc[l->n_cc].c = c;
	l->n_cc++;
	*out = c;
	return 0;
}

/*
 * exe entries: an absolute path, or a bare name meaning that name in every
 * directory of the controlled PATH. Each is also resolved now (realpath, at
 * load time, never while deciding) so that a rule naming a symlink such as
 * sh -> dash matches the canonical path the world adapter will produce.
 */
static int add_exe(struct ld *l, struct rule *r, struct strs *acc, size_t *cap, const char *path)
{
	for (int pass = 0; pass < 2; pass++) {
		char rbuf[PATH_MAX];
		const char *s = path;
		if (pass == 1) {
			/* realpath once per distinct path per load: aliases repeat names. */
			const char *known = cg_smap_get(l->rp, path);
			if (!known) {
				const char *key = acc->v[acc->n - 1]; /* pass 0 stored path */
				const char *val =
				    realpath(path, rbuf) ? ar_strdup(&l->p->ar, rbuf) : "";
				if (!val || cg_smap_put(l->rp, key, (void *)(uintptr_t)val) != 0)
					return oom(l);
				known = val;
			}
			if (!known[0])
				return 0;
			s = known;
		}
		/* A path that is its own target is listed once; other repeats are
		 * harmless (the index skips a rule already filed under a path). */
		if (pass == 1 && acc->n > 0 && strcmp(acc->v[acc->n - 1], s) == 0)
			continue;
		if (acc->n + 1 >= *cap) {
			size_t nc = *cap ? *cap * 2 : 16;
			const char **nv = ar_alloc(&l->p->ar, nc * sizeof(char *));
			if (!nv)
				return oom(l);
			if (acc->n)
				memcpy(nv, acc->v, acc->n * sizeof(char *));
			acc->v = nv;
			*cap = nc;
		}
		if (!(acc->v[acc->n] = ar_strdup(&l->p->ar, s)))
			return oom(l);
		acc->n++;
	}
	(void)r;
	return 0;
}

static int load_exe(struct ld *l, struct rule *r, yaml_node_t *n)
{
	if (get_strs(l, n, "match.exe", &r->exe_src) != 0)
		return -1;
	size_t cap = 0;
	for (size_t i = 0; i < r->exe_src.n; i++) {
		const char *e = r->exe_src.v[i];
		if (e[0] == '/') {
			char buf[PATH_BUF];
			if (!cg_path_canon("/", e, buf, sizeof(buf)) || strcmp(buf, e) != 0)
				return fail(l, seq_item(l, n, i),
					    "match.exe: '%s' is not a canonical absolute path (no "
					    "'.', '..', '//' or trailing '/')",
					    e);
			if (add_exe(l, r, &r->exe, &cap, e) != 0)
				return -1;
			continue;
		}
		if (strchr(e, '/') || has_glob_chars(e) || strcmp(e, ".") == 0 ||
		    strcmp(e, "..") == 0)
			return fail(
			    l, seq_item(l, n, i),
			    "match.exe: '%s' must be an absolute path or a bare program name "
			    "(use exe_glob for globs)",
			    e);
		const char *dirs = CG_WORLD_PATH;
		while (*dirs) {
			const char *end = strchr(dirs, ':');
			size_t dl = end ? (size_t)(end - dirs) : strlen(dirs);
			char buf[PATH_BUF];
			if (dl + 1 + strlen(e) + 1 > sizeof(buf))
				return fail(l, seq_item(l, n, i), "match.exe: '%s' is too long", e);
			memcpy(buf, dirs, dl);
			buf[dl] = '/';
			memcpy(buf + dl + 1, e, strlen(e) + 1);
			if (add_exe(l, r, &r->exe, &cap, buf) != 0)
				return -1;
			dirs += dl + (end ? 1 : 0);
		}
	}
	return 0;
}

static int parse_position(struct ld *l, yaml_node_t *n, unsigned *mask)
{
	struct strs s = { 0 };
	if (get_strs(l, n, "match.position", &s) != 0)
		return -1;
	if (s.n == 0)
		return fail(l, n, "match.position must not be empty");
	for (size_t i = 0; i < s.n; i++) {
		const char *v = s.v[i];
		if (strcmp(v, "first") == 0)
			*mask |= POS_FIRST;
		else if (strcmp(v, "middle") == 0)
			*mask |= POS_MIDDLE;
		else if (strcmp(v, "last") == 0)
			*mask |= POS_LAST;
		else if (strcmp(v, "only") == 0)
			*mask |= POS_ONLY;
		else if (strcmp(v, "filter") == 0)
			*mask |= POS_FILTER;
		else
			return fail(l, seq_item(l, n, i),
				    "match.position: '%s' is not first, middle, last, only or "
				    "filter",
				    v);
	}
	return 0;
}

static int get_flags(struct ld *l, yaml_node_t *n, const char *what, struct strs *out)
{
	if (n && n->type == YAML_SEQUENCE_NODE && seq_len(n) > 64)
		return fail(l, n, "%s has more than 64 flags", what);
	if (get_strs(l, n, what, out) != 0)
		return -1;
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i][0] != '-' || !out->v[i][1] || strchr(out->v[i], '='))
			return fail(l, seq_item(l, n, i),
				    "%s: '%s' is not a flag (a flag starts with '-', no '=value')",
				    what, out->v[i]);
	return 0;
}

static int get_ids(struct ld *l, yaml_node_t *n, const char *what, struct ids *out)
{
	if (seq_check(l, n, what) != 0)
		return -1;
	size_t cnt = seq_len(n);
	out->v = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(uint32_t));
	if (!out->v)
		return oom(l);
	for (size_t i = 0; i < cnt; i++) {
		int64_t x = 0;
		if (get_int(l, seq_item(l, n, i), what, 0, UINT32_MAX - 1, &x) != 0)
			return -1;
		out->v[i] = (uint32_t)x;
	}
	out->n = cnt;
	return 0;
}

/* User and group names become ids here, at load: the decide path never asks NSS. */
static int resolve_names(struct ld *l, yaml_node_t *n, bool group, struct strs *src,
			 struct ids *out)
{
	const char *what = group ? "match.group" : "match.user";
	if (get_strs(l, n, what, src) != 0)
		return -1;
	out->v = ar_alloc(&l->p->ar, (src->n + 1) * sizeof(uint32_t));
	if (!out->v)
		return oom(l);
	for (size_t i = 0; i < src->n; i++) {
		char buf[16384];
		int rc;
		if (group) {
			struct group gr, *res = NULL;
			rc = getgrnam_r(src->v[i], &gr, buf, sizeof(buf), &res);
			if (rc != 0 || !res)
				return fail(l, seq_item(l, n, i), "%s: unknown group '%s'", what,
					    src->v[i]);
			out->v[i] = res->gr_gid;
		} else {
			struct passwd pw, *res = NULL;
			rc = getpwnam_r(src->v[i], &pw, buf, sizeof(buf), &res);
			if (rc != 0 || !res)
				return fail(l, seq_item(l, n, i), "%s: unknown user '%s'", what,
					    src->v[i]);
			out->v[i] = res->pw_uid;
		}
	}
	out->n = src->n;
	return 0;
}

static int load_match(struct ld *l, struct rule *r, yaml_node_t *m)
{
	static const char *const keys[] = {
		"exe",	      "exe_glob",   "exe_within",  "argv0",
		"subcommand", "flags_any",  "flags_all",   "flags_none",
		"flags_only", "args_any",   "args_all",	   "args_none",
		"min_args",   "max_args",   "position",	   "uid",
		"gid",	      "user",	    "group",	   "session",
		"host",	      "privileged", "env_any",	   "action_type",
		"tool",	      "resource",   "action_args", "global_flags_any",
		NULL
	};
	static const char *const command_keys[] = {
		"exe",	      "exe_glob",  "exe_within", "argv0",
		"subcommand", "flags_any", "flags_all",	 "flags_none",
		"flags_only", "args_any",  "args_all",	 "args_none",
		"min_args",   "max_args",  "position",	 "global_flags_any",
		NULL
	};
	static const char *const action_keys[] = { "action_type", "tool", "resource", "action_args",
						   NULL };
	char what[200];
	snprintf(what, sizeof(what), "rule %s: match", r->id);
	if (check_keys(l, m, what, keys) != 0)
		return -1;
	bool cmd = false, act = false;
	for (size_t i = 0; command_keys[i]; i++)
		if (get(l, m, command_keys[i]))
			cmd = true;
	for (size_t i = 0; action_keys[i]; i++)
		if (get(l, m, action_keys[i]))
			act = true;
	if (cmd && act)
		return fail(l, m,
			    "rule %s: match mixes command keys and action keys; write two rules",
			    r->id);
	r->kind = cmd ? RK_COMMAND : act ? RK_ACTION : RK_CONTEXT;
	r->empty_match = m->data.mapping.pairs.top == m->data.mapping.pairs.start;
	uint32_t ri = (uint32_t)r->index;
	yaml_node_t *v;
	if ((v = get(l, m, "exe")) && load_exe(l, r, v) != 0)
		return -1;
	if ((v = get(l, m, "exe_glob")) && get_globs(l, v, "match.exe_glob", true, &r->exe_glob))
		return -1;
	if ((v = get(l, m, "exe_within")) && get_exe_within(l, v, r) != 0)
		return -1;
	if ((v = get(l, m, "argv0")) && get_globs(l, v, "match.argv0", false, &r->argv0))
		return -1;
	if ((v = get(l, m, "subcommand"))) {
		struct strs s = { 0 };
		if (get_strs(l, v, "match.subcommand", &s) != 0)
			return -1;
		r->sub = ar_alloc(&l->p->ar, (s.n + 1) * sizeof(*r->sub));
		if (!r->sub)
			return oom(l);
		for (size_t i = 0; i < s.n; i++) {
			/* "remote add" -> [remote, add]; words are positional arguments. */
			char *w = ar_strdup(&l->p->ar, s.v[i]);
			size_t nw = 0;
			const char **words = ar_alloc(&l->p->ar, (strlen(w) + 1) * sizeof(char *));
			if (!w || !words)
				return oom(l);
			char *save = NULL;
			for (char *tok = strtok_r(w, " \t", &save); tok;
			     tok = strtok_r(NULL, " \t", &save)) {
				if (tok[0] == '-')
					return fail(l, seq_item(l, v, i),
						    "match.subcommand: '%s' is a flag; use "
						    "flags_any",
						    tok);
				words[nw++] = tok;
			}
			if (nw == 0)
				return fail(l, seq_item(l, v, i), "match.subcommand: empty entry");
			r->sub[i].v = words;
			r->sub[i].n = nw;
		}
		r->n_sub = s.n;
	}
	if ((v = get(l, m, "flags_any")) && get_flags(l, v, "match.flags_any", &r->flags_any))
		return -1;
	if ((v = get(l, m, "global_flags_any")) &&
	    get_flags(l, v, "match.global_flags_any", &r->global_flags_any))
		return -1;
	if ((v = get(l, m, "flags_all")) && get_flags(l, v, "match.flags_all", &r->flags_all))
		return -1;
	if ((v = get(l, m, "flags_none")) && get_flags(l, v, "match.flags_none", &r->flags_none))
		return -1;
	if ((v = get(l, m, "flags_only"))) {
		if (get_flags(l, v, "match.flags_only", &r->flags_only))
			return -1;
		r->has_flags_only = true;
	}
	if ((v = get(l, m, "args_any")) &&
	    get_preds(l, v, "match.args_any", ri, &r->args_any, &r->uses_patterns))
		return -1;
	if ((v = get(l, m, "args_all")) &&
	    get_preds(l, v, "match.args_all", ri, &r->args_all, &r->uses_patterns))
		return -1;
	if ((v = get(l, m, "args_none")) &&
	    get_preds(l, v, "match.args_none", ri, &r->args_none, &r->uses_patterns))
		return -1;
	r->min_args = r->max_args = -1;
	if ((v = get(l, m, "min_args")) &&
	    get_int(l, v, "match.min_args", 0, CG_WIRE_MAX_ARGS, &r->min_args))
		return -1;
	if ((v = get(l, m, "max_args")) &&
	    get_int(l, v, "match.max_args", 0, CG_WIRE_MAX_ARGS, &r->max_args))
		return -1;
	if ((v = get(l, m, "position")) && parse_position(l, v, &r->position))
		return -1;
	if ((v = get(l, m, "uid")) && get_ids(l, v, "match.uid", &r->uid))
		return -1;
	if ((v = get(l, m, "gid")) && get_ids(l, v, "match.gid", &r->gid))
		return -1;
	if ((v = get(l, m, "user")) && resolve_names(l, v, false, &r->user_src, &r->user_uid))
		return -1;
	if ((v = get(l, m, "group")) && resolve_names(l, v, true, &r->group_src, &r->group_gid))
		return -1;
	if ((v = get(l, m, "session")) && get_globs(l, v, "match.session", false, &r->session))
		return -1;
	if ((v = get(l, m, "host")) && get_globs(l, v, "match.host", false, &r->host))
		return -1;
	r->privileged = -1;
	if ((v = get(l, m, "privileged"))) {
		bool b = false;
		if (get_bool(l, v, "match.privileged", &b) != 0)
			return -1;
		r->privileged = b;
	}
	if ((v = get(l, m, "env_any"))) {
		if (get_strs(l, v, "match.env_any", &r->env_any) != 0)
			return -1;
		for (size_t i = 0; i < r->env_any.n; i++)
			if (!valid_env_name(r->env_any.v[i]))
				return fail(l, seq_item(l, v, i),
					    "match.env_any: '%s' is not an environment name",
					    r->env_any.v[i]);
	}
	if ((v = get(l, m, "action_type")) && get_strs(l, v, "match.action_type", &r->action_type))
		return -1;
	if ((v = get(l, m, "tool")) && get_globs(l, v, "match.tool", false, &r->tool))
		return -1;
	if ((v = get(l, m, "resource"))) {
		if (get_preds(l, v, "match.resource", ri, &r->resource, &r->uses_patterns))
			return -1;
		r->has_resource = true;
	}
	if ((v = get(l, m, "action_args"))) {
		if (v->type != YAML_MAPPING_NODE)
			return fail(l, v, "match.action_args must be a mapping");
		size_t cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
		if (cnt > 64)
			return fail(l, v, "match.action_args has more than 64 keys");
		r->aargs = ar_alloc(&l->p->ar, (cnt + 1) * sizeof(*r->aargs));
		if (!r->aargs)
			return oom(l);
		for (size_t i = 0; i < cnt; i++) {
			yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
			const char *k = nonempty(l, node_at(l, pr->key), "an action_args key");
			if (!k)
				return -1;
			for (size_t j = 0; j < i; j++)
				if (strcmp(r->aargs[j].name, k) == 0)
					return fail(l, node_at(l, pr->key),
						    "match.action_args: duplicate key '%s'", k);
			if (!(r->aargs[i].name = ar_strdup(&l->p->ar, k)))
				return oom(l);
			if (get_preds(l, node_at(l, pr->value), "match.action_args", ri,
				      &r->aargs[i].preds, &r->uses_patterns) != 0)
				return -1;
		}
		r->n_aargs = cnt;
	}
	if (r->min_args >= 0 && r->max_args >= 0 && r->min_args > r->max_args)
		return fail(l, m, "rule %s: min_args > max_args", r->id);
	return 0;
}

/* Can this rule match an opaque launcher? Returns the launcher's name, or NULL. */
static const char *rule_opaque(const struct cg_policy *p, const struct rule *r)
{
	if (r->kind == RK_ACTION)
		return NULL;
	if (r->exe.n == 0 && r->exe_glob.n == 0)
		return "any program (the rule names no executable)";
	for (size_t i = 0; i < r->exe.n; i++) {
		const char *o = opaque_name(p, cg_base_of(r->exe.v[i]));
		if (!o)
			continue;
		/* Named as the policy wrote it: a bare name, not its first PATH candidate. */
		for (size_t k = 0; k < r->exe_src.n; k++)
			if (strcmp(r->exe_src.v[k], r->exe.v[i]) == 0 ||
			    (r->exe_src.v[k][0] != '/' &&
			     strcmp(r->exe_src.v[k], cg_base_of(r->exe.v[i])) == 0))
				return r->exe_src.v[k];
		return r->exe.v[i]; /* what an entry resolved to (realpath) */
	}
	const char *dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
			       "/sbin",		  "/bin",	    "/opt/bin",	 "/usr/libexec" };
	for (size_t g = 0; g < r->exe_glob.n; g++)
		for (size_t d = 0; d < CG_ARRAY_LEN(dirs); d++) {
			char buf[PATH_BUF];
			for (size_t i = 0; i < CG_ARRAY_LEN(cg_opaque_builtin); i++) {
				if (has_glob_chars(cg_opaque_builtin[i]))
					continue;
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], cg_opaque_builtin[i]);
				if (cg_glob_match_str(&r->exe_glob.v[g], buf))
					return r->exe_glob.v[g].src;
			}
			for (size_t i = 0; i < CG_ARRAY_LEN(opaque_samples); i++) {
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], opaque_samples[i]);
				if (cg_glob_match_str(&r->exe_glob.v[g], buf))
					return r->exe_glob.v[g].src;
			}
			for (size_t i = 0; i < p->opaque_extra.n; i++) {
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], p->opaque_extra.v[i]);
				if (cg_glob_match_str(&r->exe_glob.v[g], buf))
					return r->exe_glob.v[g].src;
			}
		}
	return NULL;
}

static int load_rule(struct ld *l, yaml_node_t *n, size_t index)
{
	struct cg_policy *p = l->p;
	struct rule *r = &p->rules[index];
	r->index = index;
	r->line = line_of(n);
	static const char *const keys[] = { "id",    "decision",    "why", "approvers",
					    "match", "constraints", NULL };
	char what[64];
	snprintf(what, sizeof(what), "rules[%zu]", index);
	if (check_keys(l, n, what, keys) != 0)
		return -1;
	yaml_node_t *v = get(l, n, "id");
	if (!v)
		return fail(l, n, "%s: id is required", what);
	const char *id = scalar(l, v, "rule id");
	if (!id)
		return -1;
	if (!valid_id(id) || strcmp(id, "default-deny") == 0 || strcmp(id, "privileged") == 0)
		return fail(l, v,
			    "rule id '%s' must be 1-128 of [A-Za-z0-9._-] and not a reserved id "
			    "(default-deny, privileged)",
			    id);
	const struct rule *first = cg_smap_get(l->ids, id);
	if (first)
		return fail(l, v, "duplicate rule id '%s' (first at line %zu)", id, first->line);
	if (!(r->id = ar_strdup(&p->ar, id)) || cg_smap_put(l->ids, r->id, r) != 0)
		return oom(l);
	v = get(l, n, "decision");
	if (!v)
		return fail(l, n, "rule %s: decision is required", id);
	const char *d = scalar(l, v, "decision");
	if (!d)
		return -1;
	if (strcmp(d, "allow") == 0)
		r->decision = RD_ALLOW;
	else if (strcmp(d, "degrade") == 0)
		r->decision = RD_DEGRADE;
	else if (strcmp(d, "defer") == 0)
		r->decision = RD_DEFER;
	else if (strcmp(d, "deny") == 0)
		r->decision = RD_DENY;
	else
		return fail(l, v,
			    "rule %s: decision must be allow, degrade, defer or deny, not '%s'", id,
			    d);
	if ((v = get(l, n, "why"))) {
		const char *w = nonempty(l, v, "why");
		if (!w || !(r->why = ar_strdup(&p->ar, w)))
			return w ? oom(l) : -1;
	}
	r->approvers = 0;
	if ((v = get(l, n, "approvers"))) {
		int64_t a = 0;
		if (r->decision != RD_DEFER)
			return fail(l, v, "rule %s: approvers only applies to decision defer", id);
		if (get_int(l, v, "approvers", 1, 16, &a) != 0)
			return -1;
		r->approvers = (int32_t)a;
	} else if (r->decision == RD_DEFER) {
		r->approvers = 1;
	}
	yaml_node_t *m = get(l, n, "match");
	if (m) {
		if (load_match(l, r, m) != 0)
			return -1;
	} else {
		r->kind = RK_CONTEXT;
		r->empty_match = true;
		r->min_args = r->max_args = -1;
		r->privileged = -1;
	}
	if ((v = get(l, n, "constraints"))) {
		if (r->decision == RD_DENY)
			return fail(l, v, "rule %s: a deny rule has no constraints", id);
		if (load_constraints(l, v, id, &r->cons) != 0)
			return -1;
	} else if (r->decision == RD_DEGRADE) {
		return fail(l, n, "rule %s: degrade needs constraints", id);
	}
	if (r->decision == RD_ALLOW || r->decision == RD_DEGRADE) {
		const char *o = rule_opaque(p, r);
		if (o && r->decision == RD_ALLOW)
			return fail(l, n,
				    "rule %s: allows %s, an opaque launcher (its arguments do not "
				    "show what it runs); use decision degrade with filesystem "
				    "constraints, or defer",
				    id, o);
		if (o && (!r->cons || !r->cons->fs))
			return fail(l, n,
				    "rule %s: degrades %s, an opaque launcher, without filesystem "
				    "constraints (read/write/exec); it would run unconfined",
				    id, o);
	}
	return 0;
}

/* One flag list under spec (manifest.h, struct rule cf_*); the loader caps lists at 64. */
static int cflist_make(struct ld *l, const struct cmdspec *spec, const struct strs *in,
		       struct cflist *out)
{
	size_t n = in->n < 64 ? in->n : 64;
	*out = (struct cflist){ .n = n };
	if (n == 0)
		return 0;
	out->v = ar_alloc(&l->p->ar, (n + 1) * sizeof(char *));
	out->len = ar_alloc(&l->p->ar, (n + 1) * sizeof(size_t));
	if (!out->v || !out->len)
		return oom(l);
	for (size_t i = 0; i < n; i++) {
		out->v[i] = in->v[i];
		for (size_t a = 0; spec && a < spec->n_alias; a++)
			if (strcmp(spec->alias[a], in->v[i]) == 0) {
				out->v[i] = spec->canon[a];
				break;
			}
		out->len[i] = strlen(out->v[i]);
	}
	return 0;
}

/* The spec of program name, made empty (as if the policy listed it bare) when it has none. */
static struct cmdspec *spec_of(struct ld *l, const char *name)
{
	struct cmdspec *s = cg_smap_get(l->p->spec_by_name, name);
	if (s)
		return s;
	s = ar_alloc(&l->p->ar, sizeof(*s));
	if (!s) {
		oom(l);
		return NULL;
	}
	memset(s, 0, sizeof(*s));
	s->name = ar_strdup(&l->p->ar, name);
	s->bundling = true;
	if (!s->name || spec_tables(l, s) != 0 ||
	    cg_smap_put(l->p->spec_by_name, s->name, s) != 0) {
		oom(l);
		return NULL;
	}
	return s;
}

/*
 * GNU getopt and git accept any unique prefix of a long option, so a rule
 * naming --force-with-lease must see "--force-w" under that name: each
 * program's abbreviations expand to the long flags its rules name as well as
 * to its spec's (struct cmdspec.longs). Two passes: count, then fill. A rule
 * that names its programs by exe_glob only is not attributed (docs/policy.md).
 */
static int rule_longs(struct ld *l)
{
	struct cg_policy *p = l->p;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < p->n_rules; i++) {
			struct rule *r = &p->rules[i];
			const struct strs *lists[] = { &r->flags_any, &r->flags_all, &r->flags_none,
						       &r->flags_only, &r->global_flags_any };
			for (size_t e = 0; r->kind == RK_COMMAND && e < r->exe.n; e++)
				for (size_t k = 0; k < CG_ARRAY_LEN(lists); k++)
					for (size_t f = 0; f < lists[k]->n; f++) {
						const char *flag = lists[k]->v[f];
						if (strncmp(flag, "--", 2) != 0 || !flag[2])
							continue;
						struct cmdspec *s =
						    spec_of(l, cg_base_of(r->exe.v[e]));
						if (!s)
							return -1;
						if (pass == 0) {
							s->longs_cap++;
							continue;
						}
						if (!s->longs.v &&
						    !(s->longs.v = ar_alloc(
							  &p->ar, s->longs_cap * sizeof(char *))))
							return oom(l);
						bool have = false;
						for (size_t h = 0; h < s->longs.n && !have; h++)
							have = strcmp(s->longs.v[h], flag) == 0;
						if (!have)
							s->longs.v[s->longs.n++] = flag;
					}
		}
	return 0;
}

static int precompute_flags(struct ld *l)
{
	struct cg_policy *p = l->p;
	if (rule_longs(l) != 0)
		return -1;
	for (size_t i = 0; i < p->n_rules; i++) {
		struct rule *r = &p->rules[i];
		r->has_context = r->uid.n || r->user_uid.n || r->gid.n || r->group_gid.n ||
				 r->session.n || r->host.n || r->privileged >= 0 || r->env_any.n;
		if (r->kind != RK_COMMAND)
			continue;
		r->cf_spec =
		    r->exe.n ? cg_smap_get(p->spec_by_name, cg_base_of(r->exe.v[0])) : NULL;
		if (cflist_make(l, r->cf_spec, &r->flags_any, &r->cf_any) != 0 ||
		    cflist_make(l, r->cf_spec, &r->flags_all, &r->cf_all) != 0 ||
		    cflist_make(l, r->cf_spec, &r->flags_none, &r->cf_none) != 0 ||
		    cflist_make(l, r->cf_spec, &r->flags_only, &r->cf_only) != 0 ||
		    cflist_make(l, r->cf_spec, &r->global_flags_any, &r->cf_gany) != 0)
			return -1;
		r->cf_set = true;
	}
	return 0;
}

/* Could generic rule r meet a stage whose program is path? (exe_glob, or no exe key) */
static bool generic_can_match(const struct rule *r, const char *path)
{
	if (r->exe.n == 0 && r->exe_glob.n == 0)
		return true;
	for (size_t g = 0; g < r->exe_glob.n; g++)
		if (cg_glob_match_str(&r->exe_glob.v[g], path))
			return true;
	return false;
}

/* Fill il->all (manifest.h): the index's rules merged with the generic ones, in order. */
static int index_merge(const struct cg_policy *p, const char *path, struct idxlist *il)
{
	il->all = malloc((il->n + p->generic.n + 1) * sizeof(uint32_t));
	if (!il->all)
		return -1;
	size_t a = 0, b = 0, n = 0;
	while (a < il->n || b < p->generic.n) {
		bool from_index = b >= p->generic.n || (a < il->n && il->v[a] <= p->generic.v[b]);
		uint32_t ri = from_index ? il->v[a++] : p->generic.v[b++];
		if (from_index && b < p->generic.n && p->generic.v[b] == ri)
			b++; /* in both lists: once, as indexed */
		if (from_index || generic_can_match(&p->rules[ri], path))
			il->all[n++] = ri;
	}
	il->n_all = n;
	return 0;
}

struct merge_all {
	const struct cg_policy *p;
	bool failed;
};

static void merge_each(const char *path, void *il, void *arg)
{
	struct merge_all *m = arg;
	if (!m->failed && index_merge(m->p, path, il) != 0)
		m->failed = true;
}

static int build_index(struct ld *l)
{
	struct cg_policy *p = l->p;
	for (size_t i = 0; i < p->n_rules; i++) {
		struct rule *r = &p->rules[i];
		uint32_t ri = (uint32_t)i;
		if (r->kind == RK_ACTION || r->kind == RK_CONTEXT)
			if (idx_push(&p->actions, ri) != 0)
				return oom(l);
		if (r->kind == RK_ACTION)
			continue;
		/*
		 * Exact paths go in the index; a rule that also (or only) has
		 * globs, or names no executable, is tried for every stage too
		 * (the generic list). policy.c merges both in file order.
		 */
		if (r->exe.n > 0) {
			for (size_t e = 0; e < r->exe.n; e++) {
				struct idxlist *il = cg_smap_get(p->exe_index, r->exe.v[e]);
				if (!il) {
					il = calloc(1, sizeof(*il));
					if (!il ||
					    cg_smap_put(p->exe_index, r->exe.v[e], il) != 0) {
						free(il);
						return oom(l);
					}
				}
				if (idx_push(il, ri) != 0)
					return oom(l);
			}
		}
		if ((r->exe.n == 0 || r->exe_glob.n > 0) && idx_push(&p->generic, ri) != 0)
			return oom(l);
	}
	struct merge_all m = { .p = p };
	cg_smap_each(p->exe_index, merge_each, &m);
	return m.failed ? oom(l) : 0;
}

static int compile_patterns(struct ld *l)
{
	if (l->n_pats == 0)
		return 0;
	size_t bad = 0;
	char *msg = NULL;
	if (cg_matcher_compile(l->pats, l->n_pats, &l->p->matcher, &bad, &msg) != 0) {
		if (bad < l->n_pats) {
			const struct rule *r = &l->p->rules[l->pat_rule[bad]];
			fail(l, NULL, "line %zu: rule %s: pattern '%s' does not compile: %s",
			     r->line, r->id, l->pats[bad], msg ? msg : "error");
			l->err_line = r->line;
		} else {
			fail(l, NULL, "argument patterns do not compile: %s", msg ? msg : "error");
		}
		free(msg);
		return -1;
	}
	l->p->n_patterns = l->n_pats;
	return 0;
}

static int load_doc(struct ld *l)
{
	struct cg_policy *p = l->p;
	yaml_node_t *root = yaml_document_get_root_node(&l->doc);
	if (!root)
		return fail(l, NULL, "the policy is empty (it needs at least 'version: 1')");
	static const char *const keys[] = { "version",	   "serial",	       "defaults",
					    "commands",	   "opaque_launchers", "rules",
					    "rate_limits", "evidence",	       NULL };
	if (check_keys(l, root, "the policy", keys) != 0)
		return -1;
	yaml_node_t *v = get(l, root, "version");
	if (!v)
		return fail(l, root, "version is required");
	int64_t ver = 0;
	if (get_int(l, v, "version", 1, 1, &ver) != 0)
		return -1;
	if ((v = get(l, root, "serial")) && get_int(l, v, "serial", 1, INT64_MAX, &p->serial) != 0)
		return -1;
	if (load_defaults(l, get(l, root, "defaults")) != 0)
		return -1;
	if (load_rate_limits(l, get(l, root, "rate_limits")) != 0)
		return -1;
	if (load_evidence(l, get(l, root, "evidence")) != 0)
		return -1;
	if (load_commands(l, get(l, root, "commands")) != 0)
		return -1;
	if ((v = get(l, root, "opaque_launchers"))) {
		if (v->type == YAML_SEQUENCE_NODE && seq_len(v) > 256)
			return fail(l, v, "opaque_launchers has more than 256 entries");
		if (get_strs(l, v, "opaque_launchers", &p->opaque_extra) != 0 ||
		    get_globs(l, v, "opaque_launchers", false, &p->opaque_extra_g) != 0)
			return -1;
		for (size_t i = 0; i < p->opaque_extra.n; i++)
			if (strchr(p->opaque_extra.v[i], '/'))
				return fail(l, seq_item(l, v, i),
					    "opaque_launchers: '%s' must be a basename",
					    p->opaque_extra.v[i]);
	}
	if ((v = get(l, root, "rules"))) {
		if (seq_check(l, v, "rules") != 0)
			return -1;
		size_t cnt = seq_len(v);
		if (cnt > UINT32_MAX / 2)
			return fail(l, v, "too many rules");
		p->rules = ar_alloc(&p->ar, (cnt + 1) * sizeof(*p->rules));
		if (!p->rules)
			return oom(l);
		for (size_t i = 0; i < cnt; i++) {
			if (load_rule(l, seq_item(l, v, i), i) != 0)
				return -1;
			p->n_rules = i + 1;
		}
	}
	if (compile_patterns(l) != 0 || precompute_flags(l) != 0)
		return -1;
	return build_index(l);
}

static void idxlist_free(void *v)
{
	struct idxlist *il = v;
	free(il->v);
	free(il->all);
	free(il);
}

static void policy_free(struct cg_policy *p)
{
	if (!p)
		return;
	cg_smap_free(p->exe_index, idxlist_free);
	cg_smap_free(p->spec_by_name, NULL);
	free(p->generic.v);
	free(p->actions.v);
	cg_matcher_free(p->matcher);
	ar_free(&p->ar);
	free(p->source);
	free(p);
}

/*
 * Does the line holding buf[at] have "${" right after a '[' or ',' (spaces
 * aside)? `write: [${workspace}]` fails in libyaml with "did not find
 * expected ',' or ']'" and no word of why (ux-s40 L13).
 */
static bool unquoted_var(const char *buf, size_t len, size_t at)
{
	if (at >= len)
		at = len ? len - 1 : 0;
	size_t from = at, to = at;
	while (from > 0 && buf[from - 1] != '\n')
		from--;
	while (to < len && buf[to] != '\n')
		to++;
	for (size_t i = from; i + 1 < to; i++) {
		if (buf[i] != '$' || buf[i + 1] != '{')
			continue;
		size_t k = i;
		while (k > from && buf[k - 1] == ' ')
			k--;
		if (k > from && (buf[k - 1] == '[' || buf[k - 1] == ','))
			return true;
	}
	return false;
}

int cg_policy_load_buffer(const char *source, const char *buf, size_t len, struct cg_policy **out,
			  struct cg_reply **err)
{
	*out = NULL;
	*err = NULL;
	if (!source)
		source = "<buffer>";
	pthread_once(&opaque_once, statics_init);
	struct ld l = { .source = source };
	yaml_parser_t parser;
	bool parser_ok = false, doc_ok = false;
	int rc = -1;
	if (!opaque_ok) {
		fail(&l, NULL, "out of memory");
		goto fail_reply;
	}
	if (!buf || len > MAX_POLICY_BYTES) {
		fail(&l, NULL, "the policy is larger than %u bytes", MAX_POLICY_BYTES);
		goto fail_reply;
	}
	l.p = calloc(1, sizeof(*l.p));
	if (!l.p || !(l.p->source = strdup(source)) || !(l.ids = cg_smap_new()) ||
	    !(l.rp = cg_smap_new()) || !(l.p->exe_index = cg_smap_new()) ||
	    !(l.p->spec_by_name = cg_smap_new())) {
		fail(&l, NULL, "out of memory");
		goto fail_reply;
	}
	atomic_init(&l.p->refs, 1);
	cg_sha256_hex(buf, len, l.p->sha256);
	l.p->defaults = (struct cg_policy_defaults){
		.timeout_ms = 30000,
		.max_timeout_ms = 600000,
		.output_cap = 16u * 1024 * 1024,
		.n_env_allow = CG_ARRAY_LEN(default_env_allow),
		.env_allow = default_env_allow,
		.approval_timeout_ms = 60000,
		.freshness_s = CG_WIRE_FRESHNESS_S,
		.screen_secrets = true,
		.screen_injection = true,
		.evidence_keep_output = false,
		.evidence_archive = true, /* no directory and five inodes per call */
	};
	if (memchr(buf, '\0', len)) {
		fail(&l, NULL, "the policy contains a NUL byte");
		goto fail_reply;
	}
	if (!yaml_parser_initialize(&parser)) {
		fail(&l, NULL, "out of memory");
		goto fail_reply;
	}
	parser_ok = true;
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &l.doc)) {
		/* libyaml says "cannot start any token" of a tab: say what it is. */
		size_t at = parser.problem_mark.index;
		bool tab = at < len && buf[at] == '\t';
		fail(&l, NULL, "line %zu, column %zu: YAML: %s%s%s%s", parser.problem_mark.line + 1,
		     parser.problem_mark.column + 1,
		     parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
		     parser.context ? parser.context : "",
		     tab			  ? " (a tab: YAML indents with spaces only)"
		     : unquoted_var(buf, len, at) ? " (a ${...} inside [...] is YAML's own syntax: "
						    "quote it, [\"${workspace}\"])"
						  : "");
		l.err_line = parser.problem_mark.line + 1;
		l.err_column = parser.problem_mark.column + 1;
		goto fail_reply;
	}
	doc_ok = true;
	if (load_doc(&l) != 0)
		goto fail_reply;
	/* A second document would be ignored by the loader: refuse it instead. */
	yaml_document_t extra;
	if (!yaml_parser_load(&parser, &extra)) {
		fail(&l, NULL, "line %zu, column %zu: YAML: %s", parser.problem_mark.line + 1,
		     parser.problem_mark.column + 1,
		     parser.problem ? parser.problem : "syntax error");
		goto fail_reply;
	}
	bool more = yaml_document_get_root_node(&extra) != NULL;
	yaml_document_delete(&extra);
	if (more) {
		fail(&l, NULL, "the policy must be a single YAML document");
		goto fail_reply;
	}
	*out = l.p;
	l.p = NULL;
	rc = 0;
	goto release_doc;
fail_reply:
	*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", source, "detail",
			    l.err[0] ? l.err : "unknown error");
	if (l.err_line)
		cg_reply_set_data(*err, l.err_column
					    ? json_pack("{s:I,s:I}", "line", (json_int_t)l.err_line,
							"column", (json_int_t)l.err_column)
					    : json_pack("{s:I}", "line", (json_int_t)l.err_line));
release_doc:
	if (doc_ok)
		yaml_document_delete(&l.doc);
	if (parser_ok)
		yaml_parser_delete(&parser);
	free(l.pats);
	free(l.pat_rule);
	free(l.cc);
	cg_smap_free(l.ids, NULL);
	cg_smap_free(l.rp, NULL);
	policy_free(l.p);
	return rc;
}

int cg_policy_load_file(const char *path, struct cg_policy **out, struct cg_reply **err)
{
	*out = NULL;
	*err = NULL;
	char *buf = NULL;
	size_t len = 0;
	if (cg_file_read(path, MAX_POLICY_BYTES, &buf, &len) != 0) {
		int e = errno;
		char d[300];
		snprintf(d, sizeof(d), "%s: %s",
			 e == EFBIG    ? "file too large (over 4 MiB)"
			 : e == EINVAL ? "not a regular file"
				       : "cannot read",
			 cg_errno_name(e));
		*err =
		    cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", path, "detail", d);
		return -1;
	}
	int rc = cg_policy_load_buffer(path, buf, len, out, err);
	free(buf);
	return rc;
}

int cg_policy_load_default(struct cg_policy **out, struct cg_reply **err)
{
	return cg_policy_load_buffer("<embedded>", cg_default_policy_yaml,
				     cg_default_policy_yaml_len, out, err);
}

struct cg_policy *cg_policy_ref(struct cg_policy *p)
{
	if (p)
		atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	return p;
}

void cg_policy_unref(struct cg_policy *p)
{
	if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
		policy_free(p);
}

const struct cg_policy_defaults *cg_policy_defaults(const struct cg_policy *p)
{
	return &p->defaults;
}

const char *cg_policy_sha256(const struct cg_policy *p)
{
	return p->sha256;
}

const char *cg_policy_source(const struct cg_policy *p)
{
	return p->source;
}

int64_t cg_policy_serial(const struct cg_policy *p)
{
	return p->serial;
}
