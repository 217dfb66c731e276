/* SPDX-License-Identifier: MIT */
/*
 * policy — the manifest (YAML, libyaml document API) compiled into an
 * immutable, reference-counted generation, and the rungs it contributes:
 * privilege (rank 10) and policy (rank 100). docs/policy.md is the format.
 *
 * Loading does all the work that can be done once: names are resolved to
 * uids/gids and canonical executable paths, globs are compiled to small
 * automata, argument patterns to one vectorscan database, rules are indexed
 * by executable. Deciding then only reads: it walks the candidate rules for
 * each stage's executable in file order and stops at the first match.
 *
 * Invariants:
 *  - Unknown or duplicate keys, wrong types, bad values, globs that do not
 *    parse and patterns that do not compile MUST be load errors naming the
 *    line; nothing is ignored.
 *  - A rule that could let an opaque launcher (shell, interpreter, wrapper)
 *    run MUST be refused at load unless it degrades with filesystem
 *    constraints (or defers/denies): argv cannot show what such a program
 *    will do, so only the kernel's confinement can bound it.
 *  - Nothing matches -> BLOCK "default-deny". Any internal failure while
 *    deciding returns non-zero, which the chain folds to BLOCK.
 *  - cg_policy_rung and cg_privilege_rung MUST NOT make syscalls, and MUST
 *    NOT allocate once a thread has decided with this generation (the only
 *    allocation is the per-thread vectorscan scratch, made once).
 *  - Argument paths are canonicalised lexically in fixed buffers; symlinks
 *    inside arguments are the kernel confinement's job, not the matcher's.
 *  - A generation is immutable after load; references are atomic so workers
 *    may hold one across a reload.
 */
#include "policy.h"

#include <errno.h>
#include <pthread.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "matcher.h"
#include "util.h"
#include "wire.h"

#define MAX_POLICY_BYTES      (4u * 1024 * 1024)
#define MAX_GLOB_TOKENS	      256
#define GLOB_WORDS	      (MAX_GLOB_TOKENS / 64 + 1)
#define PATH_BUF	      4096
#define MAX_STAGE_POSITIONALS CG_WIRE_MAX_ARGS

/* ---- arena: every string and array of a generation lives here ---------- */

struct chunk {
	struct chunk *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

struct arena {
	struct chunk *head;
};

static void *ar_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n == 0)
		n = 16;
	if (!a->head || a->head->cap - a->head->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		struct chunk *c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = a->head;
		c->used = 0;
		c->cap = cap;
		a->head = c;
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

/* ---- globs: compiled to tokens, matched by NFA simulation ---------------- */

/*
 * A glob is matched by simulating its automaton over the input with a bit
 * set of live states, so the cost is O(input x pattern) whatever the input
 * (an agent controls the input; backtracking matchers can be made to take
 * exponential time).
 */
enum gtype { G_LIT, G_ANY1, G_CLASS, G_STAR, G_GLOBSTAR };

struct gtok {
	uint8_t type;
	uint8_t c;
	uint16_t cls; /* index into classes for G_CLASS */
};

struct glob {
	const char *src;
	size_t n;
	const struct gtok *t;
	const uint8_t (*classes)[32];
	const uint16_t *reach; /* reach[k]: last state live when k is (through stars) */
	/* Cheap rejections before the automaton runs (most inputs stop here). */
	size_t min_len;	   /* tokens that consume exactly one character */
	size_t prefix_len; /* leading literal tokens */
	size_t suffix_len; /* trailing literal tokens (0 when the glob is all literal) */
	bool literal;	   /* no wildcard at all: a string compare */
	const char *must;  /* the longest literal run: any match contains it */
	size_t must_len;
};

static bool cls_has(const uint8_t *cls, unsigned char c)
{
	return (cls[c / 8] >> (c % 8)) & 1;
}

/* Compile src into g (arena memory). 0, or -1 with a message in err. */
static int glob_compile(struct arena *a, const char *src, struct glob *g, char *err, size_t err_len)
{
	size_t len = strlen(src);
	struct gtok *t = ar_alloc(a, sizeof(*t) * (len + 1));
	uint8_t(*cls)[32] = ar_alloc(a, 32 * (len + 1));
	if (!t || !cls) {
		snprintf(err, err_len, "out of memory");
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
		snprintf(err, err_len, "out of memory");
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
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	for (size_t k = 0; k < best; k++)
		must[k] = (char)t[best_at + k].c;
	g->must = must;
	g->must_len = best;
	g->src = ar_strdup(a, src);
	g->n = n;
	g->t = t;
	g->classes = (const uint8_t(*)[32])cls;
	g->reach = reach;
	return g->src ? 0 : -1;
}

/* Make state k live, and every state reachable from it through stars. */
static void glive(const struct glob *g, uint64_t *s, size_t k)
{
	for (size_t e = g->reach[k]; k <= e; k++)
		s[k / 64] |= UINT64_C(1) << (k % 64);
}

static bool glob_match_n(const struct glob *g, const char *s, size_t len)
{
	if (len < g->min_len)
		return false;
	if (g->literal) {
		if (len != g->n)
			return false;
		for (size_t k = 0; k < g->n; k++)
			if ((unsigned char)s[k] != g->t[k].c)
				return false;
		return true;
	}
	for (size_t k = 0; k < g->prefix_len; k++)
		if ((unsigned char)s[k] != g->t[k].c)
			return false;
	for (size_t k = 0; k < g->suffix_len; k++)
		if ((unsigned char)s[len - 1 - k] != g->t[g->n - 1 - k].c)
			return false;
	if (g->must_len > 0 && !memmem(s, len, g->must, g->must_len))
		return false;
	size_t words = g->n / 64 + 1;
	uint64_t cur[GLOB_WORDS] = { 0 }, nxt[GLOB_WORDS];
	glive(g, cur, g->prefix_len);
	for (size_t i = g->prefix_len; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		memset(nxt, 0, words * sizeof(uint64_t));
		bool any = false;
		for (size_t w = 0; w < words; w++) {
			for (uint64_t bits = cur[w]; bits; bits &= bits - 1) {
				size_t k = w * 64 + (size_t)__builtin_ctzll(bits);
				if (k >= g->n)
					continue; /* the accepting state consumes nothing */
				const struct gtok *t = &g->t[k];
				bool adv = false, stay = false;
				switch (t->type) {
				case G_LIT:
					adv = c == t->c;
					break;
				case G_ANY1:
					adv = c != '/';
					break;
				case G_CLASS:
					adv = cls_has(g->classes[t->cls], c);
					break;
				case G_STAR:
					stay = c != '/';
					break;
				case G_GLOBSTAR:
					stay = true;
					break;
				}
				if (adv)
					glive(g, nxt, k + 1);
				if (stay)
					glive(g, nxt, k);
				any |= adv || stay;
			}
		}
		if (!any)
			return false;
		memcpy(cur, nxt, words * sizeof(uint64_t));
	}
	return (cur[g->n / 64] >> (g->n % 64)) & 1;
}

static bool glob_match(const struct glob *g, const char *s)
{
	return glob_match_n(g, s, strlen(s));
}

static bool has_glob_chars(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

/* ---- lexical path canonicalisation (no syscalls) --------------------------- */

/* Append the components of s to out (absolute, no trailing '/'). false if too long. */
static bool lex_walk(char *out, size_t *len, size_t cap, const char *s)
{
	const char *p = s;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 1 && p[0] == '.') {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (*len > 0 && out[*len - 1] != '/')
				(*len)--;
			if (*len > 0)
				(*len)--; /* the '/' itself; ".." at "/" stays at "/" */
		} else {
			if (*len + 1 + n + 1 > cap)
				return false;
			out[(*len)++] = '/';
			memcpy(out + *len, p, n);
			*len += n;
		}
		p = e;
	}
	return true;
}

/*
 * Canonicalise path lexically against base (an absolute directory): resolve
 * ".", "..", "//". Symlinks are NOT followed (no syscalls on the decide
 * path); the kernel's confinement judges the real object. false when base is
 * missing for a relative path, or the result does not fit.
 */
static bool lex_canon(const char *base, const char *path, char *out, size_t cap)
{
	size_t len = 0;
	if (path[0] != '/') {
		if (!base || base[0] != '/')
			return false;
		if (!lex_walk(out, &len, cap, base))
			return false;
	}
	if (!lex_walk(out, &len, cap, path))
		return false;
	if (len == 0)
		out[len++] = '/';
	out[len] = '\0';
	return true;
}

/* Is path (canonical) dir or below it (below: strictly)? dir canonical. */
static bool path_within(const char *path, const char *dir, bool strictly)
{
	size_t dl = strlen(dir);
	if (dl == 1 && dir[0] == '/')
		return strictly ? path[1] != '\0' : true;
	if (strncmp(path, dir, dl) != 0)
		return false;
	if (path[dl] == '\0')
		return !strictly;
	return path[dl] == '/';
}

/* ---- the compiled generation ------------------------------------------------ */

enum pred_kind { P_GLOB, P_PATH, P_WITHIN, P_BELOW, P_OUTSIDE, P_PATTERN };
enum dir_base { D_ABS, D_WORKSPACE, D_CWD };

struct pred {
	enum pred_kind kind;
	struct glob g;	    /* P_GLOB, P_PATH */
	enum dir_base base; /* P_WITHIN/BELOW/OUTSIDE */
	const char *dir;    /* absolute dir, or suffix ("" or "/x") after base */
	uint32_t pat;	    /* P_PATTERN: matcher id */
	const char *src;    /* as written, for dump */
};

struct preds {
	size_t n;
	struct pred *v;
};

struct strs {
	size_t n;
	const char **v;
};

struct globs {
	size_t n;
	struct glob *v;
};

struct ids {
	size_t n;
	uint32_t *v;
};

struct action_arg {
	const char *name;
	struct preds preds;
};

enum { POS_FIRST = 1, POS_MIDDLE = 2, POS_LAST = 4, POS_ONLY = 8, POS_FILTER = 16 };
enum rdec { RD_ALLOW = 0, RD_DEGRADE = 1, RD_DEFER = 2, RD_DENY = 3 };
enum rkind { RK_CONTEXT = 0, RK_COMMAND = 1, RK_ACTION = 2 };

struct rule {
	const char *id;
	size_t index; /* file order */
	size_t line;
	enum rdec decision;
	enum rkind kind;
	const char *why;
	int32_t approvers;
	bool empty_match; /* no match keys at all */
	/* command keys */
	struct strs exe;     /* expanded absolute paths */
	struct strs exe_src; /* as written */
	struct globs exe_glob;
	struct globs argv0; /* basename of argv[0] as sent (multi-call binaries) */
	size_t n_sub;
	struct strs *sub; /* word sequences */
	struct strs flags_any, flags_all, flags_none, flags_only;
	bool has_flags_only;
	struct preds args_any, args_all, args_none;
	int64_t min_args, max_args; /* -1 unset */
	unsigned position;	    /* 0: any */
	bool uses_patterns;
	/* context keys */
	struct ids uid, gid, user_uid, group_gid;
	struct strs user_src, group_src;
	struct globs session, host;
	int privileged; /* -1 unset */
	struct strs env_any;
	/* action keys */
	struct strs action_type;
	struct globs tool;
	struct preds resource;
	bool has_resource;
	size_t n_aargs;
	struct action_arg *aargs;
	/* result */
	const struct cg_constraints *cons;
};

struct cmdspec {
	const char *name;
	bool bundling;
	size_t n_alias;
	const char **alias; /* alias[i] -> canon[i] */
	const char **canon;
	struct strs value_flags;
	size_t n_groups;
	struct strs *groups;
};

struct hent {
	const char *key;
	void *val;
};

struct htab {
	size_t cap; /* power of two, or 0 */
	size_t n;
	struct hent *e;
};

struct idxlist {
	size_t n, cap;
	uint32_t *v;
};

/*
 * A rate limit as GCRA (a token bucket kept as one "theoretical arrival
 * time" per slot, updated with compare-and-swap: no lock, no allocation).
 * Keys hash into a fixed table; two keys sharing a slot share a budget,
 * which can only make the limit stricter, never looser.
 */
#define RATE_SLOTS 1024

struct rate {
	bool on;
	int64_t calls;
	int64_t per_s;
	int64_t interval_ns;  /* per_s / calls */
	int64_t tolerance_ns; /* interval * (calls - 1): the burst */
	const char *why;
	_Atomic int64_t tat[RATE_SLOTS];
};

struct cg_policy {
	atomic_long refs;
	char *source;
	char sha256[65];
	struct arena ar;
	struct cg_policy_defaults defaults;
	size_t n_rules;
	struct rule *rules;
	size_t n_specs;
	struct cmdspec *specs;
	struct htab spec_by_name; /* basename -> struct cmdspec * */
	struct htab exe_index;	  /* canonical path -> struct idxlist * (heap) */
	struct idxlist generic;	  /* command/context rules not indexed by exe */
	struct idxlist actions;	  /* action and context rules */
	struct strs opaque_extra;
	struct globs opaque_extra_g;
	struct cg_matcher *matcher;
	size_t n_patterns;
	struct rate per_peer, per_session;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static void *htab_get(const struct htab *t, const char *key)
{
	if (t->cap == 0)
		return NULL;
	for (size_t i = hash_str(key) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
		if (!t->e[i].key)
			return NULL;
		if (strcmp(t->e[i].key, key) == 0)
			return t->e[i].val;
	}
}

/* Insert (key must outlive the table). 0, or -1 on OOM. */
static int htab_put(struct htab *t, const char *key, void *val)
{
	if ((t->n + 1) * 2 > t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		struct hent *ne = calloc(ncap, sizeof(*ne));
		if (!ne)
			return -1;
		for (size_t i = 0; i < t->cap; i++) {
			if (!t->e[i].key)
				continue;
			size_t j = hash_str(t->e[i].key) & (ncap - 1);
			while (ne[j].key)
				j = (j + 1) & (ncap - 1);
			ne[j] = t->e[i];
		}
		free(t->e);
		t->e = ne;
		t->cap = ncap;
	}
	size_t i = hash_str(key) & (t->cap - 1);
	while (t->e[i].key) {
		if (strcmp(t->e[i].key, key) == 0) {
			t->e[i].val = val;
			return 0;
		}
		i = (i + 1) & (t->cap - 1);
	}
	t->e[i].key = key;
	t->e[i].val = val;
	t->n++;
	return 0;
}

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
static const char *const opaque_builtin[] = {
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

/* Names to try an exe_glob against (globs above reduced to an example). */
static const char *const opaque_samples[] = { "python3",  "python3.12", "python2", "perl5.36",
					      "ruby3.1",  "php8.2",	"lua5.4",  "pip3",
					      "tclsh8.6", "wish8.6",	"pypy3" };

static struct globs opaque_g; /* compiled opaque_builtin */
static struct arena opaque_ar;
static pthread_once_t opaque_once = PTHREAD_ONCE_INIT;
static bool opaque_ok;
static char short_names[256][3]; /* "-c" for every byte c */

static void statics_init(void)
{
	for (int c = 0; c < 256; c++) {
		short_names[c][0] = '-';
		short_names[c][1] = (char)c;
		short_names[c][2] = '\0';
	}
	size_t n = CG_ARRAY_LEN(opaque_builtin);
	opaque_g.v = ar_alloc(&opaque_ar, n * sizeof(struct glob));
	if (!opaque_g.v)
		return;
	char err[128];
	for (size_t i = 0; i < n; i++)
		if (glob_compile(&opaque_ar, opaque_builtin[i], &opaque_g.v[i], err, sizeof(err)) !=
		    0)
			return;
	opaque_g.n = n;
	opaque_ok = true;
}

static const char *base_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Is this basename an opaque launcher (built-in class or the policy's extra)? */
static const char *opaque_name(const struct cg_policy *p, const char *base)
{
	for (size_t i = 0; i < opaque_g.n; i++)
		if (glob_match(&opaque_g.v[i], base))
			return opaque_g.v[i].src;
	for (size_t i = 0; i < p->opaque_extra_g.n; i++)
		if (glob_match(&p->opaque_extra_g.v[i], base))
			return p->opaque_extra_g.v[i].src;
	return NULL;
}

/* ---- loading ------------------------------------------------------------------ */

struct ld {
	const char *source;
	yaml_document_t doc;
	struct cg_policy *p;
	char err[512];
	size_t err_line;
	/* patterns collected across rules, compiled once at the end */
	size_t n_pats, cap_pats;
	const char **pats;
	uint32_t *pat_rule;
	/* constraints already compiled per YAML node (aliases share one set) */
	size_t n_cc, cap_cc;
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
	if (n)
		snprintf(l->err, sizeof(l->err), "line %zu: %s", l->err_line, msg);
	else
		snprintf(l->err, sizeof(l->err), "%s", msg);
	return -1;
}

static int oom(struct ld *l)
{
	return fail(l, NULL, "out of memory");
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
		if (!known)
			return fail(l, k, "%s: unknown key '%s'", what, ks);
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
	static const char *const keys[] = { "timeout_ms",	    "max_timeout_ms",
					    "output_cap",	    "env_allow",
					    "approval_timeout_ms",  "freshness_s",
					    "screen_secrets",	    "screen_injection",
					    "evidence_keep_output", NULL };
	if (check_keys(l, n, "defaults", keys) != 0)
		return -1;
	yaml_node_t *v;
	int64_t x;
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
		if (htab_get(&p->spec_by_name, name))
			return fail(l, k, "commands: duplicate key '%s'", name);
		struct cmdspec *s = &p->specs[i];
		char what[160];
		snprintf(what, sizeof(what), "commands.%s", name);
		static const char *const keys[] = { "flags", "value_flags", "bundling", NULL };
		if (check_keys(l, v, what, keys) != 0)
			return -1;
		s->name = ar_strdup(&p->ar, name);
		s->bundling = true;
		yaml_node_t *x;
		if ((x = get(l, v, "bundling")) && get_bool(l, x, what, &s->bundling) != 0)
			return -1;
		if ((x = get(l, v, "value_flags"))) {
			if (get_strs(l, x, what, &s->value_flags) != 0)
				return -1;
			for (size_t j = 0; j < s->value_flags.n; j++)
				if (s->value_flags.v[j][0] != '-' || !s->value_flags.v[j][1])
					return fail(l, seq_item(l, x, j),
						    "%s.value_flags: '%s' is not a flag", name,
						    s->value_flags.v[j]);
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
		if (!s->name || htab_put(&p->spec_by_name, s->name, s) != 0)
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
	if (!lex_canon("/", rest[0] ? rest : "/", buf, sizeof(buf)))
		return fail(l, n, "'%s' is too long", s);
	/* For a variable base keep the suffix only ("" for the variable itself). */
	const char *keep = (pr->base != D_ABS && strcmp(buf, "/") == 0) ? "" : buf;
	if (!(pr->dir = ar_strdup(&l->p->ar, keep)))
		return oom(l);
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

static int load_constraints(struct ld *l, yaml_node_t *n, const char *rid,
			    const struct cg_constraints **out)
{
	for (size_t i = 0; i < l->n_cc; i++)
		if (l->cc[i].node == n) {
			*out = l->cc[i].c; /* a YAML alias: one shared set */
			return 0;
		}
	static const char *const keys[] = { "read",   "write",	    "exec",	   "net", "ports",
					    "limits", "timeout_ms", "best_effort", NULL };
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
	if ((v = get(l, n, "net"))) {
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
			return fail(l, v, "constraints.net must be none, loopback or tcp, not '%s'",
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
			int64_t x;
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
			if (!realpath(path, rbuf))
				return 0;
			s = rbuf;
		}
		bool dup = false;
		for (size_t i = 0; i < acc->n; i++)
			if (strcmp(acc->v[i], s) == 0)
				dup = true;
		if (dup)
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
			if (!lex_canon("/", e, buf, sizeof(buf)) || strcmp(buf, e) != 0)
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
		int64_t x;
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
		"exe",	      "exe_glob",    "argv0",	   "subcommand", "flags_any",	"flags_all",
		"flags_none", "flags_only",  "args_any",   "args_all",	 "args_none",	"min_args",
		"max_args",   "position",    "uid",	   "gid",	 "user",	"group",
		"session",    "host",	     "privileged", "env_any",	 "action_type", "tool",
		"resource",   "action_args", NULL
	};
	static const char *const command_keys[] = { "exe",	  "exe_glob",	"argv0",
						    "subcommand", "flags_any",	"flags_all",
						    "flags_none", "flags_only", "args_any",
						    "args_all",	  "args_none",	"min_args",
						    "max_args",	  "position",	NULL };
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
		bool b;
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
		const char *o = opaque_name(p, base_of(r->exe.v[i]));
		if (o)
			return r->exe.v[i];
	}
	const char *dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
			       "/sbin",		  "/bin",	    "/opt/bin",	 "/usr/libexec" };
	for (size_t g = 0; g < r->exe_glob.n; g++)
		for (size_t d = 0; d < CG_ARRAY_LEN(dirs); d++) {
			char buf[PATH_BUF];
			for (size_t i = 0; i < CG_ARRAY_LEN(opaque_builtin); i++) {
				if (has_glob_chars(opaque_builtin[i]))
					continue;
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], opaque_builtin[i]);
				if (glob_match(&r->exe_glob.v[g], buf))
					return r->exe_glob.v[g].src;
			}
			for (size_t i = 0; i < CG_ARRAY_LEN(opaque_samples); i++) {
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], opaque_samples[i]);
				if (glob_match(&r->exe_glob.v[g], buf))
					return r->exe_glob.v[g].src;
			}
			for (size_t i = 0; i < p->opaque_extra.n; i++) {
				snprintf(buf, sizeof(buf), "%s/%s", dirs[d], p->opaque_extra.v[i]);
				if (glob_match(&r->exe_glob.v[g], buf))
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
	for (size_t i = 0; i < index; i++)
		if (strcmp(p->rules[i].id, id) == 0)
			return fail(l, v, "duplicate rule id '%s' (first at line %zu)", id,
				    p->rules[i].line);
	if (!(r->id = ar_strdup(&p->ar, id)))
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
		int64_t a;
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
		if (r->exe.n > 0 && r->exe_glob.n == 0) {
			for (size_t e = 0; e < r->exe.n; e++) {
				struct idxlist *il = htab_get(&p->exe_index, r->exe.v[e]);
				if (!il) {
					il = calloc(1, sizeof(*il));
					if (!il || htab_put(&p->exe_index, r->exe.v[e], il) != 0) {
						free(il);
						return oom(l);
					}
				}
				if (idx_push(il, ri) != 0)
					return oom(l);
			}
		} else if (idx_push(&p->generic, ri) != 0) {
			return oom(l);
		}
	}
	return 0;
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
	static const char *const keys[] = {
		"version", "defaults", "commands", "opaque_launchers", "rules", "rate_limits", NULL
	};
	if (check_keys(l, root, "the policy", keys) != 0)
		return -1;
	yaml_node_t *v = get(l, root, "version");
	if (!v)
		return fail(l, root, "version is required");
	int64_t ver;
	if (get_int(l, v, "version", 1, 1, &ver) != 0)
		return -1;
	if (load_defaults(l, get(l, root, "defaults")) != 0)
		return -1;
	if (load_rate_limits(l, get(l, root, "rate_limits")) != 0)
		return -1;
	if (load_commands(l, get(l, root, "commands")) != 0)
		return -1;
	if ((v = get(l, root, "opaque_launchers"))) {
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
	if (compile_patterns(l) != 0)
		return -1;
	return build_index(l);
}

static void policy_free(struct cg_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->exe_index.cap; i++)
		if (p->exe_index.e[i].key) {
			struct idxlist *il = p->exe_index.e[i].val;
			free(il->v);
			free(il);
		}
	free(p->exe_index.e);
	free(p->spec_by_name.e);
	free(p->generic.v);
	free(p->actions.v);
	cg_matcher_free(p->matcher);
	ar_free(&p->ar);
	free(p->source);
	free(p);
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
	if (!l.p || !(l.p->source = strdup(source))) {
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
		fail(&l, NULL, "line %zu: YAML: %s%s%s", parser.problem_mark.line + 1,
		     parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
		     parser.context ? parser.context : "");
		l.err_line = parser.problem_mark.line + 1;
		goto fail_reply;
	}
	doc_ok = true;
	if (load_doc(&l) != 0)
		goto fail_reply;
	/* A second document would be ignored by the loader: refuse it instead. */
	yaml_document_t extra;
	if (!yaml_parser_load(&parser, &extra)) {
		fail(&l, NULL, "line %zu: YAML: %s", parser.problem_mark.line + 1,
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
		cg_reply_set_data(*err, json_pack("{s:I}", "line", (json_int_t)l.err_line));
release_doc:
	if (doc_ok)
		yaml_document_delete(&l.doc);
	if (parser_ok)
		yaml_parser_delete(&parser);
	free(l.pats);
	free(l.pat_rule);
	free(l.cc);
	policy_free(l.p);
	return rc;
}

int cg_policy_load_file(const char *path, struct cg_policy **out, struct cg_reply **err)
{
	*out = NULL;
	*err = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		char d[300];
		snprintf(d, sizeof(d), "cannot open: %s", cg_errno_name(e));
		*err =
		    cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", path, "detail", d);
		return -1;
	}
	struct cg_buf b;
	cg_buf_init(&b, MAX_POLICY_BYTES + 1);
	const char *why = NULL;
	int e = 0;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		why = "not a regular file";
		goto close_fd;
	}
	for (;;) {
		char chunk[65536];
		ssize_t n = cg_read_some(fd, chunk, sizeof(chunk));
		if (n < 0) {
			e = errno;
			why = "read failed";
			goto close_fd;
		}
		if (n == 0)
			break;
		if (cg_buf_add(&b, chunk, (size_t)n) != 0) {
			e = ENOMEM;
			why = "read failed";
			goto close_fd;
		}
		if (b.truncated || b.len > MAX_POLICY_BYTES) {
			why = "file too large (over 4 MiB)";
			goto close_fd;
		}
	}
close_fd:
	close(fd);
	int rc;
	if (why) {
		char d[300];
		snprintf(d, sizeof(d), "%s%s%s", why, e ? ": " : "", e ? cg_errno_name(e) : "");
		*err =
		    cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", path, "detail", d);
		rc = -1;
	} else {
		rc = cg_policy_load_buffer(path, b.p ? (const char *)b.p : "", b.len, out, err);
	}
	cg_buf_free(&b);
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

/* ---- deciding ------------------------------------------------------------------- */

/* One normalised argv token: a flag (canonical name, optional value) or a positional. */
struct tok {
	bool flag;
	const char *name; /* flag name, or the positional's text */
	size_t name_len;
	bool has_val;
	const char *val;
};

/* Walks argv[1..] producing normalised tokens without copying (docs/policy.md). */
struct argit {
	const struct cmdspec *spec;
	char *const *argv;
	size_t argc;
	size_t i; /* next argv index */
	size_t j; /* position inside a short-option bundle, 0 when not in one */
	bool opts_done;
};

static bool spec_value_flag(const struct cmdspec *s, const char *name, size_t len)
{
	if (!s)
		return false;
	for (size_t i = 0; i < s->value_flags.n; i++)
		if (strlen(s->value_flags.v[i]) == len &&
		    memcmp(s->value_flags.v[i], name, len) == 0)
			return true;
	return false;
}

/* The canonical name of a flag under spec (its group's first member), or itself. */
static void spec_canon(const struct cmdspec *s, const char **name, size_t *len)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_alias; i++)
		if (strlen(s->alias[i]) == *len && memcmp(s->alias[i], *name, *len) == 0) {
			*name = s->canon[i];
			*len = strlen(s->canon[i]);
			return;
		}
}

static void argit_init(struct argit *it, const struct cmdspec *spec, const struct cg_stage *st)
{
	*it = (struct argit){ .spec = spec, .argv = st->argv, .argc = st->argc, .i = 1 };
}

static bool argit_next(struct argit *it, struct tok *t)
{
	*t = (struct tok){ 0 };
	for (;;) {
		if (it->j > 0) {
			const char *a = it->argv[it->i];
			unsigned char c = (unsigned char)a[it->j];
			t->flag = true;
			t->name = short_names[c];
			t->name_len = 2;
			bool takes = spec_value_flag(it->spec, t->name, 2);
			it->j++;
			if (takes) {
				t->has_val = true;
				if (a[it->j]) {
					t->val = a + it->j; /* -n5 */
				} else if (it->i + 1 < it->argc) {
					t->val = it->argv[++it->i]; /* -n 5 */
				} else {
					t->val = "";
				}
				it->j = 0;
				it->i++;
			} else if (!a[it->j]) {
				it->j = 0;
				it->i++;
			}
			spec_canon(it->spec, &t->name, &t->name_len);
			return true;
		}
		if (it->i >= it->argc)
			return false;
		const char *a = it->argv[it->i];
		if (it->opts_done || a[0] != '-' || a[1] == '\0') {
			t->name = a;
			t->name_len = strlen(a);
			it->i++;
			return true;
		}
		if (a[1] == '-' && a[2] == '\0') {
			it->opts_done = true; /* "--" ends options */
			it->i++;
			continue;
		}
		if (a[1] == '-' || !(it->spec ? it->spec->bundling : true)) {
			const char *eq = strchr(a, '=');
			t->flag = true;
			t->name = a;
			t->name_len = eq ? (size_t)(eq - a) : strlen(a);
			it->i++;
			if (eq) {
				t->has_val = true;
				t->val = eq + 1;
			} else if (spec_value_flag(it->spec, t->name, t->name_len)) {
				t->has_val = true;
				t->val = it->i < it->argc ? it->argv[it->i++] : "";
			}
			spec_canon(it->spec, &t->name, &t->name_len);
			return true;
		}
		it->j = 1; /* a short-option bundle: -abc */
	}
}

/* Per-stage state shared by the rules tried on it. */
struct sctx {
	const struct cg_policy *p;
	const struct cg_call *call;
	const struct cg_stage *st;
	const struct cmdspec *spec;
	const char *exe;
	unsigned pos;
	size_t n_pos;	/* positional count */
	uint64_t *bits; /* n_pos rows of words, when scanned */
	size_t words;
	bool scanned;
	bool failed; /* an internal failure: fail closed */
};

/* Does flag f (as written in the rule) occur, after canonicalising both sides? */
static bool has_flag(const struct sctx *sc, const char *f)
{
	const char *fn = f;
	size_t fl = strlen(f);
	spec_canon(sc->spec, &fn, &fl);
	struct argit it;
	struct tok t;
	argit_init(&it, sc->spec, sc->st);
	while (argit_next(&it, &t))
		if (t.flag && t.name_len == fl && memcmp(t.name, fn, fl) == 0)
			return true;
	return false;
}

static bool flag_in(const struct sctx *sc, const struct tok *t, const struct strs *set)
{
	for (size_t i = 0; i < set->n; i++) {
		const char *fn = set->v[i];
		size_t fl = strlen(fn);
		spec_canon(sc->spec, &fn, &fl);
		if (t->name_len == fl && memcmp(t->name, fn, fl) == 0)
			return true;
	}
	return false;
}

/* Scan every positional once with the generation's pattern database. */
static bool stage_scan(struct sctx *sc)
{
	if (sc->scanned)
		return !sc->failed;
	sc->scanned = true;
	const struct cg_matcher *m = sc->p->matcher;
	if (!m)
		return true;
	sc->words = cg_matcher_words(m);
	if (sc->n_pos > MAX_STAGE_POSITIONALS || cg_matcher_thread_prepare(m) != 0) {
		sc->failed = true;
		return false;
	}
	sc->bits = cg_matcher_thread_rows(m);
	if (!sc->bits) {
		sc->failed = true;
		return false;
	}
	memset(sc->bits, 0, sc->n_pos * sc->words * sizeof(uint64_t));
	struct argit it;
	struct tok t;
	size_t k = 0;
	argit_init(&it, sc->spec, sc->st);
	while (argit_next(&it, &t)) {
		if (t.flag)
			continue;
		if (cg_matcher_scan(m, t.name, t.name_len, sc->bits + k * sc->words) != 0) {
			sc->failed = true;
			return false;
		}
		k++;
	}
	return true;
}

static bool dir_of(const struct pred *pr, const struct cg_call *call, char *buf, size_t cap)
{
	const char *base = pr->base == D_WORKSPACE ? call->workspace
			   : pr->base == D_CWD	   ? call->cwd
						   : "";
	if (!base)
		return false;
	size_t bl = strlen(base), sl = strlen(pr->dir);
	if (bl + sl + 1 > cap)
		return false;
	memcpy(buf, base, bl);
	memcpy(buf + bl, pr->dir, sl + 1);
	if (buf[0] == '\0' || (bl == 1 && sl > 0)) { /* base "/" + "/x" */
		if (!lex_canon("/", buf[0] ? buf : "/", buf, cap))
			return false;
	}
	return true;
}

/* Evaluate one predicate on text (positional k, or k == SIZE_MAX for a resource). */
/* An argument being judged, with its canonical path computed at most once. */
struct argtext {
	const char *s;
	size_t len;
	size_t k;  /* positional index, or SIZE_MAX for a resource or action argument */
	int canon; /* 0 not yet, 1 done, -1 cannot be canonicalised */
	size_t plen;
	char path[PATH_BUF];
};

static void argtext_init(struct argtext *a, const char *s, size_t k)
{
	a->s = s;
	a->len = strlen(s);
	a->k = k;
	a->canon = 0;
}

static bool argtext_path(struct argtext *a, const struct cg_call *call)
{
	if (a->canon == 0) {
		a->canon = lex_canon(call->cwd, a->s, a->path, sizeof(a->path)) ? 1 : -1;
		a->plen = a->canon > 0 ? strlen(a->path) : 0;
	}
	return a->canon > 0;
}

/* Evaluate one predicate on an argument. */
static bool pred_holds(struct sctx *sc, const struct pred *pr, struct argtext *a)
{
	char dir[PATH_BUF];
	switch (pr->kind) {
	case P_GLOB:
		return glob_match_n(&pr->g, a->s, a->len);
	case P_PATH:
		return argtext_path(a, sc->call) && glob_match_n(&pr->g, a->path, a->plen);
	case P_WITHIN:
	case P_BELOW:
	case P_OUTSIDE: {
		bool in = argtext_path(a, sc->call) && dir_of(pr, sc->call, dir, sizeof(dir)) &&
			  path_within(a->path, dir, pr->kind == P_BELOW);
		return pr->kind == P_OUTSIDE ? !in : in;
	}
	case P_PATTERN:
		if (a->k == SIZE_MAX) {
			/* A resource or action argument: scanned on its own, once. */
			const struct cg_matcher *m = sc->p->matcher;
			uint64_t row[64];
			size_t w = cg_matcher_words(m);
			if (!m || w > CG_ARRAY_LEN(row) || cg_matcher_thread_prepare(m) != 0) {
				sc->failed = true;
				return false;
			}
			memset(row, 0, w * sizeof(uint64_t));
			if (cg_matcher_scan(m, a->s, a->len, row) != 0) {
				sc->failed = true;
				return false;
			}
			return (row[pr->pat / 64] >> (pr->pat % 64)) & 1;
		}
		if (!stage_scan(sc))
			return false;
		return (sc->bits[a->k * sc->words + pr->pat / 64] >> (pr->pat % 64)) & 1;
	}
	return false;
}

static bool any_pred(struct sctx *sc, const struct preds *ps, struct argtext *a)
{
	for (size_t i = 0; i < ps->n; i++)
		if (pred_holds(sc, &ps->v[i], a))
			return true;
	return false;
}

static bool id_in(const struct ids *s, uint32_t v)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == v)
			return true;
	return false;
}

static bool glob_any(const struct globs *g, const char *s)
{
	for (size_t i = 0; i < g->n; i++)
		if (glob_match(&g->v[i], s))
			return true;
	return false;
}

/* The request and peer conditions every kind of rule may use. */
static bool context_holds(const struct rule *r, const struct cg_call *call)
{
	const struct cg_request *req = call->req;
	if (r->uid.n && !id_in(&r->uid, (uint32_t)call->peer.uid))
		return false;
	if (r->user_uid.n && !id_in(&r->user_uid, (uint32_t)call->peer.uid))
		return false;
	if (r->gid.n && !id_in(&r->gid, (uint32_t)call->peer.gid))
		return false;
	if (r->group_gid.n && !id_in(&r->group_gid, (uint32_t)call->peer.gid))
		return false;
	if (r->session.n && !glob_any(&r->session, req->session ? req->session : ""))
		return false;
	if (r->host.n && !glob_any(&r->host, req->host ? req->host : ""))
		return false;
	if (r->privileged >= 0 && (bool)r->privileged != req->privileged)
		return false;
	if (r->env_any.n) {
		bool hit = false;
		for (size_t i = 0; i < req->n_env && !hit; i++)
			for (size_t j = 0; j < r->env_any.n && !hit; j++)
				hit = strcmp(req->env[i].name, r->env_any.v[j]) == 0;
		if (!hit)
			return false;
	}
	return true;
}

static bool command_holds(const struct rule *r, struct sctx *sc, bool exe_known)
{
	if (!exe_known && (r->exe.n || r->exe_glob.n)) {
		bool hit = false;
		for (size_t i = 0; i < r->exe.n && !hit; i++)
			hit = strcmp(r->exe.v[i], sc->exe) == 0;
		if (!hit && !glob_any(&r->exe_glob, sc->exe))
			return false;
	}
	if (r->position && !(r->position & sc->pos))
		return false;
	if (r->argv0.n && !glob_any(&r->argv0, base_of(sc->st->argv[0])))
		return false;
	if (!context_holds(r, sc->call))
		return false;
	if (r->min_args >= 0 && sc->n_pos < (size_t)r->min_args)
		return false;
	if (r->max_args >= 0 && sc->n_pos > (size_t)r->max_args)
		return false;
	for (size_t i = 0; i < r->flags_all.n; i++)
		if (!has_flag(sc, r->flags_all.v[i]))
			return false;
	if (r->flags_any.n) {
		bool hit = false;
		for (size_t i = 0; i < r->flags_any.n && !hit; i++)
			hit = has_flag(sc, r->flags_any.v[i]);
		if (!hit)
			return false;
	}
	for (size_t i = 0; i < r->flags_none.n; i++)
		if (has_flag(sc, r->flags_none.v[i]))
			return false;
	if (r->n_sub || r->has_flags_only || r->args_any.n || r->args_all.n || r->args_none.n) {
		bool sub_ok = r->n_sub == 0;
		bool any_ok = r->args_any.n == 0;
		for (size_t s = 0; s < r->n_sub && !sub_ok; s++) {
			const struct strs *w = &r->sub[s];
			struct argit it;
			struct tok t;
			size_t k = 0;
			argit_init(&it, sc->spec, sc->st);
			while (k < w->n && argit_next(&it, &t)) {
				if (t.flag)
					continue;
				if (strcmp(t.name, w->v[k]) != 0)
					break;
				k++;
			}
			sub_ok = k == w->n;
		}
		if (!sub_ok)
			return false;
		struct argit it;
		struct tok t;
		size_t k = 0;
		argit_init(&it, sc->spec, sc->st);
		while (argit_next(&it, &t)) {
			if (t.flag) {
				if (r->has_flags_only && !flag_in(sc, &t, &r->flags_only))
					return false;
				continue;
			}
			struct argtext at;
			argtext_init(&at, t.name, k);
			if (!any_ok && any_pred(sc, &r->args_any, &at))
				any_ok = true;
			if (r->args_all.n && !any_pred(sc, &r->args_all, &at))
				return false;
			if (r->args_none.n && any_pred(sc, &r->args_none, &at))
				return false;
			k++;
		}
		if (!any_ok)
			return false;
	}
	return !sc->failed;
}

static unsigned stage_position(size_t i, size_t n)
{
	unsigned m = 0;
	if (i == 0)
		m |= POS_FIRST;
	if (i + 1 == n)
		m |= POS_LAST;
	if (n == 1)
		m |= POS_ONLY;
	if (i > 0)
		m |= POS_FILTER;
	if (i > 0 && i + 1 < n)
		m |= POS_MIDDLE;
	return m;
}

/*
 * Decide one stage: the first rule in file order among the exe-indexed rules
 * for this path and the generic ones. *r is NULL for default deny. -1 on an
 * internal failure (the caller fails closed).
 */
static int decide_stage(const struct cg_policy *p, const struct cg_call *call, size_t i,
			const struct rule **out)
{
	*out = NULL;
	const struct cg_resolved_stage *rs = &call->stages[i];
	const struct cg_stage *st = &call->req->stages[i];
	if (!rs->exe || !st->argv || st->argc < 1)
		return -1;
	struct sctx sc = {
		.p = p,
		.call = call,
		.st = st,
		.exe = rs->exe,
		.spec = htab_get(&p->spec_by_name, base_of(rs->exe)),
		.pos = stage_position(i, call->n_stages),
	};
	struct argit it;
	struct tok t;
	argit_init(&it, sc.spec, st);
	while (argit_next(&it, &t))
		if (!t.flag)
			sc.n_pos++;
	const struct idxlist *il = htab_get(&p->exe_index, rs->exe);
	size_t a = 0, b = 0, na = il ? il->n : 0, nb = p->generic.n;
	while (a < na || b < nb) {
		bool from_index = b >= nb || (a < na && il->v[a] < p->generic.v[b]);
		uint32_t ri = from_index ? il->v[a++] : p->generic.v[b++];
		const struct rule *r = &p->rules[ri];
		if (command_holds(r, &sc, from_index)) {
			*out = r;
			return 0;
		}
		if (sc.failed)
			return -1;
	}
	return 0;
}

static const char *json_str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static bool action_holds(const struct rule *r, struct sctx *sc, json_t *a)
{
	if (!context_holds(r, sc->call))
		return false;
	if (r->kind == RK_CONTEXT)
		return true;
	if (r->action_type.n) {
		const char *ty = json_str(a, "action_type");
		bool hit = false;
		for (size_t i = 0; ty && i < r->action_type.n && !hit; i++)
			hit = strcmp(ty, r->action_type.v[i]) == 0;
		if (!hit)
			return false;
	}
	if (r->tool.n) {
		const char *tool = json_str(a, "tool");
		if (!tool || !glob_any(&r->tool, tool))
			return false;
	}
	if (r->has_resource) {
		const char *res = json_str(a, "resource");
		if (!res)
			return false;
		struct argtext at;
		argtext_init(&at, res, SIZE_MAX);
		if (!any_pred(sc, &r->resource, &at))
			return false;
	}
	for (size_t i = 0; i < r->n_aargs; i++) {
		const char *v = json_str(json_object_get(a, "args"), r->aargs[i].name);
		if (!v)
			return false;
		struct argtext at;
		argtext_init(&at, v, SIZE_MAX);
		if (!any_pred(sc, &r->aargs[i].preds, &at))
			return false;
	}
	return !sc->failed;
}

static int decide_action(const struct cg_policy *p, const struct cg_call *call, json_t *a,
			 const struct rule **out)
{
	*out = NULL;
	if (!json_is_object(a))
		return 0; /* not an action: nothing allows it */
	struct sctx sc = { .p = p, .call = call };
	for (size_t i = 0; i < p->actions.n; i++) {
		const struct rule *r = &p->rules[p->actions.v[i]];
		if (action_holds(r, &sc, a)) {
			*out = r;
			return 0;
		}
		if (sc.failed)
			return -1;
	}
	return 0;
}

struct fold {
	int rank; /* -1: nothing yet */
	const struct rule *rule;
	bool is_default;
	int32_t approvers;
	size_t n_cons;
	const struct cg_constraints *cons[CG_VERDICT_MAX_CONS];
	bool cons_overflow;
};

static void fold_add(struct fold *f, const struct rule *r)
{
	int rank = r ? (int)r->decision : RD_DENY;
	if (rank > f->rank) {
		f->rank = rank;
		f->rule = r;
		f->is_default = r == NULL;
	}
	if (r && r->decision == RD_DEFER && r->approvers > f->approvers)
		f->approvers = r->approvers;
	if (r && r->cons && r->decision != RD_DENY) {
		for (size_t i = 0; i < f->n_cons; i++)
			if (f->cons[i] == r->cons)
				return;
		if (f->n_cons == CG_VERDICT_MAX_CONS)
			f->cons_overflow = true;
		else
			f->cons[f->n_cons++] = r->cons;
	}
}

/* Decide every stage and every action. -1 on an internal failure. */
static int decide_all(const struct cg_policy *p, const struct cg_call *call, struct fold *f,
		      bool (*each)(const struct rule *r, void *arg), void *arg)
{
	*f = (struct fold){ .rank = -1 };
	if (!call || !call->req || (call->n_stages && !call->stages) ||
	    call->n_stages != call->req->n_stages)
		return -1;
	for (size_t i = 0; i < call->n_stages; i++) {
		const struct rule *r;
		if (decide_stage(p, call, i, &r) != 0)
			return -1;
		fold_add(f, r);
		if (each)
			each(r, arg);
	}
	json_t *acts = call->req->actions;
	if (acts) {
		if (!json_is_array(acts))
			return -1;
		for (size_t i = 0; i < json_array_size(acts); i++) {
			const struct rule *r;
			if (decide_action(p, call, json_array_get(acts, i), &r) != 0)
				return -1;
			fold_add(f, r);
			if (each)
				each(r, arg);
		}
	}
	if (f->rank < 0) { /* nothing to decide on: nothing is allowed */
		f->rank = RD_DENY;
		f->is_default = true;
	}
	return 0;
}

int cg_policy_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	const struct cg_policy *p = ctx;
	*out = (struct cg_verdict){ .decision = CG_DECISION_NONE };
	struct fold f;
	if (!p || decide_all(p, call, &f, NULL, NULL) != 0)
		return -1;
	static const enum cg_decision dmap[] = { CG_ALLOW, CG_DEGRADE, CG_UNKNOWN, CG_BLOCK };
	static const enum cg_reply_id rmap[] = { CG_R_ALLOWED, CG_R_DEGRADED, CG_R_NEEDS_HUMAN,
						 CG_R_DENIED_BY_RULE };
	if (f.is_default) {
		out->decision = CG_BLOCK;
		out->rule_id = "default-deny";
		out->reason = CG_R_DEFAULT_DENY;
		out->why = "no rule matched";
		return 0;
	}
	out->decision = dmap[f.rank];
	out->rule_id = f.rule->id;
	out->reason = rmap[f.rank];
	out->why = f.rule->why;
	if (f.rank == RD_DEFER)
		out->approvers = f.approvers > 0 ? f.approvers : 1;
	if (f.rank != RD_DENY) {
		if (f.cons_overflow) {
			/* Dropping a set would widen the grant: refuse instead. */
			*out = (struct cg_verdict){ .decision = CG_BLOCK,
						    .rule_id = "too-many-constraints",
						    .reason = CG_R_CONSTRAINTS_TOO_MANY,
						    .why = "more distinct constraint sets than a "
							   "verdict carries" };
			return 0;
		}
		out->n_constraints = f.n_cons;
		memcpy(out->constraints, f.cons, f.n_cons * sizeof(f.cons[0]));
	}
	return 0;
}

struct priv_scan {
	bool all_explicit;
	const char *first_id;
};

static bool priv_each(const struct rule *r, void *arg)
{
	struct priv_scan *ps = arg;
	if (!r || r->privileged != 1 || (r->decision != RD_ALLOW && r->decision != RD_DEGRADE))
		ps->all_explicit = false;
	else if (!ps->first_id)
		ps->first_id = r->id;
	return true;
}

int cg_privilege_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	const struct cg_policy *p = ctx;
	*out = (struct cg_verdict){ .decision = CG_DECISION_NONE };
	if (!call || !call->req)
		return -1;
	if (!call->req->privileged) {
		out->decision = CG_ALLOW;
		out->rule_id = "unprivileged";
		out->reason = CG_R_ALLOWED;
		return 0;
	}
	/*
	 * Privileged runs as root: a human decides, unless the policy names
	 * privileged use explicitly for every stage (match privileged: true with
	 * allow or degrade). The policy rung still decides the call itself.
	 */
	if (p) {
		struct fold f;
		struct priv_scan ps = { .all_explicit = true };
		if (decide_all(p, call, &f, priv_each, &ps) != 0)
			return -1;
		if (ps.all_explicit && ps.first_id && !f.is_default) {
			out->decision = CG_ALLOW;
			out->rule_id = ps.first_id;
			out->reason = CG_R_ALLOWED;
			out->why = "the policy allows privileged use explicitly";
			return 0;
		}
	}
	out->decision = CG_UNKNOWN;
	out->rule_id = "privileged";
	out->reason = CG_R_PRIVILEGED_NEEDS_APPROVAL;
	out->why = "privileged calls need a human";
	out->approvers = 1;
	return 0;
}

/* One GCRA step on slot; true if the call fits the budget. Lock-free. */
static bool rate_take(struct rate *r, uint64_t key, int64_t now)
{
	_Atomic int64_t *slot = &r->tat[key % RATE_SLOTS];
	int64_t tat = atomic_load_explicit(slot, memory_order_relaxed);
	for (;;) {
		int64_t base = tat > now ? tat : now;
		if (base - now > r->tolerance_ns)
			return false;
		if (atomic_compare_exchange_weak_explicit(slot, &tat, base + r->interval_ns,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return true;
	}
}

/*
 * The rate-limit rung (rank 20, registered only when the policy has
 * rate_limits). Reads the monotonic clock (a vDSO call, not a system call
 * on Linux) and updates counters with atomics; it never allocates.
 */
static int rate_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	struct cg_policy *p = ctx;
	*out = (struct cg_verdict){ .decision = CG_DECISION_NONE };
	if (!p || !call || !call->req)
		return -1;
	int64_t now = cg_now_mono_ns();
	if (p->per_peer.on && !rate_take(&p->per_peer, (uint64_t)call->peer.uid, now)) {
		*out = (struct cg_verdict){ .decision = CG_BLOCK,
					    .rule_id = "rate-limit-peer",
					    .reason = CG_R_RATE_LIMITED,
					    .why = p->per_peer.why };
		return 0;
	}
	if (p->per_session.on) {
		/* Sessions are named by the client: key on the peer's uid too, so one
		 * peer cannot spend another's session budget by naming it. */
		uint64_t h = hash_str(call->req->session ? call->req->session : "") ^
			     ((uint64_t)call->peer.uid * 0x9E3779B97F4A7C15ULL);
		if (!rate_take(&p->per_session, h, now)) {
			*out = (struct cg_verdict){ .decision = CG_BLOCK,
						    .rule_id = "rate-limit-session",
						    .reason = CG_R_RATE_LIMITED,
						    .why = p->per_session.why };
			return 0;
		}
	}
	out->decision = CG_ALLOW;
	out->rule_id = "rate-limit";
	out->reason = CG_R_ALLOWED;
	return 0;
}

int cg_policy_register_rungs(struct cg_chain *c, struct cg_policy *p)
{
	if (cg_chain_register(c, 10, "privilege", cg_privilege_rung, p) != 0)
		return -1;
	if ((p->per_peer.on || p->per_session.on) &&
	    cg_chain_register(c, 20, "rate-limit", rate_rung, p) != 0)
		return -1;
	if (cg_chain_register(c, 100, "policy", cg_policy_rung, p) != 0)
		return -1;
	return 0;
}

/* ---- dump and lint ----------------------------------------------------------------- */

static json_t *strs_json(const struct strs *s)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < s->n; i++)
		json_array_append_new(a, json_string(s->v[i]));
	return a;
}

static json_t *globs_json(const struct globs *g)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < g->n; i++)
		json_array_append_new(a, json_string(g->v[i].src));
	return a;
}

static json_t *ids_json(const struct ids *s)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < s->n; i++)
		json_array_append_new(a, json_integer(s->v[i]));
	return a;
}

static json_t *preds_json(const struct preds *ps)
{
	static const char *const names[] = {
		"glob", "path", "within", "below", "outside", "pattern"
	};
	json_t *a = json_array();
	for (size_t i = 0; a && i < ps->n; i++)
		json_array_append_new(a, json_pack("{s:s}", names[ps->v[i].kind], ps->v[i].src));
	return a;
}

/*
 * A rule's flags with their equivalence classes spelled out: each entry is
 * the list of spellings that match it, under the specs of the rule's
 * programs (so a reader sees that "-r" also catches "--recursive").
 */
static json_t *flags_json(const struct cg_policy *p, const struct rule *r, const struct strs *fl)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < fl->n; i++) {
		json_t *g = json_array();
		json_array_append_new(g, json_string(fl->v[i]));
		for (size_t e = 0; e < r->exe.n; e++) {
			const struct cmdspec *s = htab_get(&p->spec_by_name, base_of(r->exe.v[e]));
			if (!s)
				continue;
			const char *cn = fl->v[i];
			size_t cl = strlen(cn);
			spec_canon(s, &cn, &cl);
			for (size_t k = 0; k < s->n_alias; k++) {
				if (strcmp(s->canon[k], cn) != 0)
					continue;
				bool seen = false;
				for (size_t q = 0; q < json_array_size(g); q++)
					if (strcmp(json_string_value(json_array_get(g, q)),
						   s->alias[k]) == 0)
						seen = true;
				if (!seen)
					json_array_append_new(g, json_string(s->alias[k]));
			}
		}
		json_array_append_new(a, g);
	}
	return a;
}

static const char *const dec_names[] = { "allow", "degrade", "defer", "deny" };

static json_t *rule_json(const struct cg_policy *p, const struct rule *r)
{
	json_t *o = json_object(), *m = json_object();
	if (!o || !m) {
		json_decref(o);
		json_decref(m);
		return NULL;
	}
	json_object_set_new(o, "id", json_string(r->id));
	json_object_set_new(o, "line", json_integer((json_int_t)r->line));
	json_object_set_new(o, "decision", json_string(dec_names[r->decision]));
	json_object_set_new(o, "kind",
			    json_string(r->kind == RK_COMMAND  ? "command"
					: r->kind == RK_ACTION ? "action"
							       : "context"));
	if (r->why)
		json_object_set_new(o, "why", json_string(r->why));
	if (r->decision == RD_DEFER)
		json_object_set_new(o, "approvers", json_integer(r->approvers));
	if (r->exe_src.n)
		json_object_set_new(m, "exe", strs_json(&r->exe_src));
	if (r->exe.n)
		json_object_set_new(m, "exe_paths", strs_json(&r->exe));
	if (r->exe_glob.n)
		json_object_set_new(m, "exe_glob", globs_json(&r->exe_glob));
	if (r->argv0.n)
		json_object_set_new(m, "argv0", globs_json(&r->argv0));
	if (r->n_sub) {
		json_t *a = json_array();
		for (size_t i = 0; a && i < r->n_sub; i++)
			json_array_append_new(a, strs_json(&r->sub[i]));
		json_object_set_new(m, "subcommand", a);
	}
	const struct {
		const char *k;
		const struct strs *s;
		bool on;
	} fl[] = { { "flags_any", &r->flags_any, r->flags_any.n > 0 },
		   { "flags_all", &r->flags_all, r->flags_all.n > 0 },
		   { "flags_none", &r->flags_none, r->flags_none.n > 0 },
		   { "flags_only", &r->flags_only, r->has_flags_only } };
	for (size_t i = 0; i < CG_ARRAY_LEN(fl); i++)
		if (fl[i].on)
			json_object_set_new(m, fl[i].k, flags_json(p, r, fl[i].s));
	if (r->args_any.n)
		json_object_set_new(m, "args_any", preds_json(&r->args_any));
	if (r->args_all.n)
		json_object_set_new(m, "args_all", preds_json(&r->args_all));
	if (r->args_none.n)
		json_object_set_new(m, "args_none", preds_json(&r->args_none));
	if (r->min_args >= 0)
		json_object_set_new(m, "min_args", json_integer(r->min_args));
	if (r->max_args >= 0)
		json_object_set_new(m, "max_args", json_integer(r->max_args));
	if (r->position) {
		json_t *a = json_array();
		static const char *const pn[] = { "first", "middle", "last", "only", "filter" };
		for (int i = 0; a && i < 5; i++)
			if (r->position & (1u << i))
				json_array_append_new(a, json_string(pn[i]));
		json_object_set_new(m, "position", a);
	}
	if (r->uid.n)
		json_object_set_new(m, "uid", ids_json(&r->uid));
	if (r->gid.n)
		json_object_set_new(m, "gid", ids_json(&r->gid));
	if (r->user_src.n)
		json_object_set_new(m, "user",
				    json_pack("{s:o,s:o}", "names", strs_json(&r->user_src), "uids",
					      ids_json(&r->user_uid)));
	if (r->group_src.n)
		json_object_set_new(m, "group",
				    json_pack("{s:o,s:o}", "names", strs_json(&r->group_src),
					      "gids", ids_json(&r->group_gid)));
	if (r->session.n)
		json_object_set_new(m, "session", globs_json(&r->session));
	if (r->host.n)
		json_object_set_new(m, "host", globs_json(&r->host));
	if (r->privileged >= 0)
		json_object_set_new(m, "privileged", json_boolean(r->privileged));
	if (r->env_any.n)
		json_object_set_new(m, "env_any", strs_json(&r->env_any));
	if (r->action_type.n)
		json_object_set_new(m, "action_type", strs_json(&r->action_type));
	if (r->tool.n)
		json_object_set_new(m, "tool", globs_json(&r->tool));
	if (r->has_resource)
		json_object_set_new(m, "resource", preds_json(&r->resource));
	if (r->n_aargs) {
		json_t *aa = json_object();
		for (size_t i = 0; aa && i < r->n_aargs; i++)
			json_object_set_new(aa, r->aargs[i].name, preds_json(&r->aargs[i].preds));
		json_object_set_new(m, "action_args", aa);
	}
	json_object_set_new(o, "match", m);
	if (r->cons)
		json_object_set_new(o, "constraints", cg_constraints_to_json(r->cons));
	return o;
}

json_t *cg_policy_dump(const struct cg_policy *p)
{
	if (!p)
		return NULL;
	const struct cg_policy_defaults *d = &p->defaults;
	json_t *env = json_array(), *cmds = json_object(), *rules = json_array();
	for (size_t i = 0; env && i < d->n_env_allow; i++)
		json_array_append_new(env, json_string(d->env_allow[i]));
	for (size_t i = 0; cmds && i < p->n_specs; i++) {
		const struct cmdspec *s = &p->specs[i];
		json_t *g = json_array();
		for (size_t k = 0; g && k < s->n_groups; k++)
			json_array_append_new(g, strs_json(&s->groups[k]));
		json_object_set_new(cmds, s->name,
				    json_pack("{s:b,s:o,s:o}", "bundling", s->bundling, "flags", g,
					      "value_flags", strs_json(&s->value_flags)));
	}
	for (size_t i = 0; rules && i < p->n_rules; i++)
		json_array_append_new(rules, rule_json(p, &p->rules[i]));
	json_t *opq = json_array();
	for (size_t i = 0; opq && i < CG_ARRAY_LEN(opaque_builtin); i++)
		json_array_append_new(opq, json_string(opaque_builtin[i]));
	for (size_t i = 0; opq && i < p->opaque_extra.n; i++)
		json_array_append_new(opq, json_string(p->opaque_extra.v[i]));
	json_t *defaults = json_pack(
	    "{s:I,s:I,s:I,s:o,s:I,s:I,s:b,s:b,s:b}", "timeout_ms", (json_int_t)d->timeout_ms,
	    "max_timeout_ms", (json_int_t)d->max_timeout_ms, "output_cap",
	    (json_int_t)d->output_cap, "env_allow", env ? env : json_array(), "approval_timeout_ms",
	    (json_int_t)d->approval_timeout_ms, "freshness_s", (json_int_t)d->freshness_s,
	    "screen_secrets", d->screen_secrets, "screen_injection", d->screen_injection,
	    "evidence_keep_output", d->evidence_keep_output);
	json_t *rl = json_object();
	if (rl && p->per_peer.on)
		json_object_set_new(rl, "per_peer",
				    json_pack("{s:I,s:I}", "calls", (json_int_t)p->per_peer.calls,
					      "per_s", (json_int_t)p->per_peer.per_s));
	if (rl && p->per_session.on)
		json_object_set_new(rl, "per_session",
				    json_pack("{s:I,s:I}", "calls",
					      (json_int_t)p->per_session.calls, "per_s",
					      (json_int_t)p->per_session.per_s));
	return json_pack("{s:i,s:s,s:s,s:o*,s:o*,s:o*,s:o*,s:o*}", "version", 1, "source",
			 p->source, "sha256", p->sha256, "defaults", defaults, "commands", cmds,
			 "opaque_launchers", opq, "rate_limits", rl, "rules", rules);
}

static void finding(json_t *a, const char *rule, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finding(json_t *a, const char *rule, const char *kind, const char *fmt, ...)
{
	char d[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	json_array_append_new(a,
			      json_pack("{s:s,s:s,s:s}", "rule", rule, "kind", kind, "detail", d));
}

/* Only executable conditions (nothing else narrows the match). */
static bool exe_only(const struct rule *r)
{
	return r->kind == RK_COMMAND && !r->n_sub && !r->argv0.n && !r->flags_any.n &&
	       !r->flags_all.n && !r->flags_none.n && !r->has_flags_only && !r->args_any.n &&
	       !r->args_all.n && !r->args_none.n && r->min_args < 0 && r->max_args < 0 &&
	       !r->position && !r->uid.n && !r->gid.n && !r->user_uid.n && !r->group_gid.n &&
	       !r->session.n && !r->host.n && r->privileged < 0 && !r->env_any.n;
}

/* Does rule i match every executable rule j can? (j has exact paths only.) */
static bool exe_covers(const struct rule *i, const struct rule *j)
{
	if (j->exe.n == 0 || j->exe_glob.n)
		return false;
	for (size_t e = 0; e < j->exe.n; e++) {
		bool hit = glob_any(&i->exe_glob, j->exe.v[e]);
		for (size_t k = 0; k < i->exe.n && !hit; k++)
			hit = strcmp(i->exe.v[k], j->exe.v[e]) == 0;
		if (!hit)
			return false;
	}
	return true;
}

json_t *cg_policy_lint(const struct cg_policy *p)
{
	if (!p)
		return NULL;
	json_t *a = json_array();
	if (!a)
		return NULL;
	const struct rule *catch_all = NULL;
	for (size_t j = 0; j < p->n_rules; j++) {
		const struct rule *r = &p->rules[j];
		if (catch_all) {
			finding(a, r->id, "unreachable",
				"rule %s (line %zu) matches every call first", catch_all->id,
				catch_all->line);
			continue;
		}
		for (size_t g = 0; g < r->exe_glob.n; g++) {
			const char *s = r->exe_glob.v[g].src;
			size_t n = strlen(s);
			if (strstr(s, "//") || strstr(s, "/./") || strstr(s, "/../") ||
			    (n > 1 && s[n - 1] == '/'))
				finding(a, r->id, "unreachable",
					"exe_glob '%s' cannot match a canonical path", s);
		}
		for (size_t x = 0; x < r->flags_all.n; x++)
			for (size_t y = 0; y < r->flags_none.n; y++)
				if (strcmp(r->flags_all.v[x], r->flags_none.v[y]) == 0)
					finding(a, r->id, "unreachable",
						"flag %s is both required and forbidden",
						r->flags_all.v[x]);
		for (size_t i = 0; i < j; i++) {
			const struct rule *q = &p->rules[i];
			if (exe_only(q) && r->kind == RK_COMMAND && exe_covers(q, r)) {
				finding(a, r->id, "shadowed",
					"rule %s (line %zu) matches every call this rule can",
					q->id, q->line);
				break;
			}
		}
		if (r->decision == RD_DENY && !r->why)
			finding(a, r->id, "no-why",
				"a deny rule without 'why' gives the agent no "
				"reason to show");
		if (r->decision == RD_ALLOW && r->uses_patterns)
			finding(
			    a, r->id, "pattern-allow",
			    "allows on a pattern match; patterns are evadable, prefer structural "
			    "keys or constraints");
		if (r->decision == RD_ALLOW && r->kind == RK_ACTION && !r->has_resource &&
		    !r->tool.n)
			finding(a, r->id, "broad-allow",
				"allows every action of its type, whatever the resource");
		if (r->empty_match)
			catch_all = r;
	}
	if (p->n_rules == 0)
		finding(a, "default-deny", "empty",
			"the policy has no rules: everything is denied");
	return a;
}
