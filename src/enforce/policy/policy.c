/* SPDX-License-Identifier: MIT */
/*
 * policy — the adjudicator over a compiled generation (manifest.h; loading
 * is in manifest.c): the policy rung, the privilege rung, the rate-limit
 * rung, and the generation's dump and lint. docs/policy.md is the format.
 *
 * Deciding only reads: for each stage it walks the candidate rules for the
 * stage's executable (an index on the canonical path, plus the rules that
 * need a glob) in file order and stops at the first match; each abstract
 * action is decided by the action and context rules the same way; the
 * stages fold to the most restrictive verdict.
 *
 * Invariants:
 *  - Nothing matches -> BLOCK "default-deny". Any internal failure while
 *    deciding returns non-zero, which the chain folds to BLOCK.
 *  - cg_policy_rung and cg_privilege_rung MUST NOT make syscalls, and MUST
 *    NOT allocate once a thread has decided with this generation (the only
 *    allocation is the per-thread vectorscan scratch, made once).
 *  - Argument paths are canonicalised lexically in fixed buffers; symlinks
 *    inside arguments are the kernel confinement's job, not the matcher's.
 *  - A verdict's pointers point into the generation: they are valid while
 *    the caller holds its reference.
 */
#include "policy.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "matcher.h"
#include "util.h"
#include "wire.h"

/* "-c" for every byte c: the names of short options split out of a bundle. */
#define SN1(n)                                                                                     \
	{                                                                                          \
		'-', (char)(n), '\0'                                                               \
	}
#define SN4(n)	SN1(n), SN1((n) + 1), SN1((n) + 2), SN1((n) + 3)
#define SN16(n) SN4(n), SN4((n) + 4), SN4((n) + 8), SN4((n) + 12)
#define SN64(n) SN16(n), SN16((n) + 16), SN16((n) + 32), SN16((n) + 48)
static const char short_names[256][3] = { SN64(0), SN64(64), SN64(128), SN64(192) };

/* ---- globs: matched by NFA simulation ------------------------------------ */

static bool cls_has(const uint8_t *cls, unsigned char c)
{
	return (cls[c / 8] >> (c % 8)) & 1;
}

/* Compile src into g (arena memory). 0, or -1 with a message in err. */
static void glive(const struct glob *g, uint64_t *s, size_t k)
{
	for (size_t e = g->reach[k]; k <= e; k++)
		s[k / 64] |= UINT64_C(1) << (k % 64);
}

/*
 * Does s[0..len) contain n[0..nl)? For the short literals of path globs
 * ("/.ssh/") a plain loop beats memmem's set-up; it is O(len x nl) with nl
 * at most 16, so still linear in the input. Longer needles use memmem.
 */
static bool find_lit(const char *s, size_t len, const char *n, size_t nl)
{
	if (nl > 16)
		return memmem(s, len, n, nl) != NULL;
	if (nl > len)
		return false;
	if (nl == 1)
		return memchr(s, n[0], len) != NULL;
	for (size_t i = 0; i + nl <= len; i++)
		if (s[i] == n[0] && s[i + 1] == n[1] && memcmp(s + i + 2, n + 2, nl - 2) == 0)
			return true;
	return false;
}

bool cg_glob_match(const struct glob *g, const char *s, size_t len)
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
	if (g->must_len > 0 && !find_lit(s, len, g->must, g->must_len))
		return false;
	if (g->by_checks)
		return true;
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
bool cg_path_canon(const char *base, const char *path, char *out, size_t cap)
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

/* ---- deciding ------------------------------------------------------------------- */

/* One normalised argv token: a flag (canonical name, optional value) or a positional. */
struct tok {
	bool flag;
	bool global;	  /* a flag before the first positional argument */
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
	bool seen_pos; /* a positional argument has been read */
};

/*
 * Is name[0..len) a value flag of s, where global says whether it comes
 * before the first positional argument? A table read for "-c", else by
 * length first.
 */
static bool spec_value_flag(const struct cmdspec *s, const char *name, size_t len, bool global)
{
	if (!s)
		return false;
	if (len == 2 && name[0] == '-') {
		unsigned char c = (unsigned char)name[1];
		return ((s->short_vf[c / 8] >> (c % 8)) & 1) ||
		       (global && ((s->short_gvf[c / 8] >> (c % 8)) & 1));
	}
	for (size_t i = 0; i < s->value_flags.n; i++)
		if (s->vf_len[i] == len && memcmp(s->value_flags.v[i], name, len) == 0)
			return true;
	for (size_t i = 0; global && i < s->global_value_flags.n; i++)
		if (s->gvf_len[i] == len && memcmp(s->global_value_flags.v[i], name, len) == 0)
			return true;
	return false;
}

/* The canonical name of a flag under spec (its group's first member), or itself. */
static void spec_canon(const struct cmdspec *s, const char **name, size_t *len)
{
	if (!s || s->n_alias == 0)
		return;
	if (*len == 2 && (*name)[0] == '-') {
		int16_t i = s->short_alias[(unsigned char)(*name)[1]];
		if (i >= 0) {
			*name = s->canon[i];
			*len = s->canon_len[i];
		}
		return;
	}
	for (size_t i = 0; i < s->n_alias; i++)
		if (s->alias_len[i] == *len && memcmp(s->alias[i], *name, *len) == 0) {
			*name = s->canon[i];
			*len = s->canon_len[i];
			return;
		}
}

/*
 * GNU getopt_long accepts any unique prefix of a long option ("--split-s" is
 * "--split-string"), so a rule about a flag must see it under its full name
 * or be dodged by abbreviating it. An exact name, or a prefix of several
 * different options (which getopt refuses), is left as written.
 */
static void spec_unabbrev(const struct cmdspec *s, const char **name, size_t *len)
{
	if (!s || *len < 3 || (*name)[0] != '-' || (*name)[1] != '-')
		return;
	const char *hit = NULL;
	size_t hit_len = 0;
	for (size_t g = 0; g <= s->n_groups + 2; g++) {
		const struct strs *l = g < s->n_groups	      ? &s->groups[g]
				       : g == s->n_groups     ? &s->value_flags
				       : g == s->n_groups + 1 ? &s->global_value_flags
							      : &s->longs;
		for (size_t i = 0; i < l->n; i++) {
			const char *c = l->v[i];
			size_t cl = strlen(c);
			if (cl < *len || memcmp(c, *name, *len) != 0)
				continue;
			if (cl == *len)
				return; /* exact */
			if (hit && (hit_len != cl || memcmp(hit, c, cl) != 0))
				return; /* ambiguous */
			hit = c;
			hit_len = cl;
		}
	}
	if (hit) {
		*name = hit;
		*len = hit_len;
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
			t->global = !it->seen_pos;
			t->name = short_names[c];
			t->name_len = 2;
			bool takes = spec_value_flag(it->spec, t->name, 2, t->global);
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
			it->seen_pos = true;
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
			t->global = !it->seen_pos;
			t->name = a;
			t->name_len = eq ? (size_t)(eq - a) : strlen(a);
			spec_unabbrev(it->spec, &t->name, &t->name_len);
			it->i++;
			if (eq) {
				t->has_val = true;
				t->val = eq + 1;
			} else if (spec_value_flag(it->spec, t->name, t->name_len, t->global)) {
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
#define STAGE_TOKS 32
struct sctx {
	const struct cg_policy *p;
	const struct cg_call *call;
	const struct cg_stage *st;
	const struct cmdspec *spec;
	const char *exe;
	unsigned pos;
	size_t n_pos;	       /* positional count */
	const char *first_pos; /* the first positional argument, or NULL */
	int cwd_state;	       /* 0 not yet, 1 cwd_buf holds the canonical cwd, -1 none */
	size_t cwd_len;
	char *cwd_buf;	/* PATH_BUF bytes on the decider's stack (argtext_path) */
	uint64_t *bits; /* n_pos rows of words, when scanned */
	size_t words;
	bool scanned;
	bool failed;   /* an internal failure: fail closed */
	bool too_long; /* ...because an argument is too long to judge as a path */
	/*
	 * The stage's normalised tokens, made once per stage so that the rules
	 * tried on it do not each re-parse argv; a stage with more tokens than
	 * fit is re-parsed per rule instead (same result, slower).
	 */
	bool toks_all;
	size_t n_toks;
	struct tok *toks; /* STAGE_TOKS of them, on decide_stage's stack */
};

/* Walks a stage's tokens: from the cache when it holds them all, else argv. */
struct tokit {
	const struct sctx *sc;
	size_t i;
	struct argit it;
};

static inline __attribute__((always_inline)) void tokit_init(struct tokit *ti,
							     const struct sctx *sc)
{
	ti->sc = sc;
	ti->i = 0;
	if (!sc->toks_all)
		argit_init(&ti->it, sc->spec, sc->st);
}

static inline __attribute__((always_inline)) bool tokit_next(struct tokit *ti, struct tok *t)
{
	if (!ti->sc->toks_all)
		return argit_next(&ti->it, t);
	if (ti->i >= ti->sc->n_toks)
		return false;
	*t = ti->sc->toks[ti->i++];
	return true;
}

/*
 * A rule's flag list canonicalised under the stage's spec: the one made at
 * load when the stage's program has the spec the rule was made for (the
 * usual case), else made here in buf, once per rule and stage (not once per
 * token). The loader caps flag lists at 64.
 */
struct cflags {
	size_t n;
	const char *const *v;
	const size_t *len;
};

struct cfbuf {
	const char *v[64];
	size_t len[64];
};

static inline __attribute__((always_inline)) void
cflags_init(struct cflags *cf, struct cfbuf *buf, const struct rule *r, const struct cflist *pre,
	    const struct cmdspec *spec, const struct strs *s)
{
	if (r->cf_set && r->cf_spec == spec) {
		*cf = (struct cflags){ .n = pre->n, .v = pre->v, .len = pre->len };
		return;
	}
	cf->n = s->n < 64 ? s->n : 64;
	for (size_t i = 0; i < cf->n; i++) {
		buf->v[i] = s->v[i];
		buf->len[i] = strlen(s->v[i]);
		spec_canon(spec, &buf->v[i], &buf->len[i]);
	}
	cf->v = buf->v;
	cf->len = buf->len;
}

static inline __attribute__((always_inline)) bool cflag_is(const struct cflags *cf, size_t i,
							   const struct tok *t)
{
	return t->name_len == cf->len[i] && memcmp(t->name, cf->v[i], cf->len[i]) == 0;
}

static inline __attribute__((always_inline)) bool cflags_has(const struct cflags *cf,
							     const struct tok *t)
{
	for (size_t i = 0; i < cf->n; i++)
		if (cflag_is(cf, i, t))
			return true;
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
	struct tokit it;
	struct tok t;
	size_t k = 0;
	tokit_init(&it, sc);
	while (tokit_next(&it, &t)) {
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
		if (!cg_path_canon("/", buf[0] ? buf : "/", buf, cap))
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

/*
 * The argument canonicalised as a path (cg_path_canon against the call's
 * cwd), computed once per argument; the cwd's own canonical form is
 * computed once per stage (sc->cwd_buf) rather than once per argument.
 */
static bool argtext_path(struct argtext *a, struct sctx *sc)
{
	if (a->canon != 0)
		return a->canon > 0;
	size_t len = 0;
	bool ok;
	if (a->s[0] == '/') {
		ok = lex_walk(a->path, &len, sizeof(a->path), a->s);
	} else {
		if (sc->cwd_state == 0) {
			const char *cwd = sc->call->cwd;
			size_t cl = 0;
			sc->cwd_state =
			    cwd && cwd[0] == '/' && lex_walk(sc->cwd_buf, &cl, PATH_BUF, cwd) ? 1
											      : -1;
			sc->cwd_len = cl;
		}
		ok = sc->cwd_state > 0;
		if (ok) {
			memcpy(a->path, sc->cwd_buf, sc->cwd_len);
			len = sc->cwd_len;
			ok = lex_walk(a->path, &len, sizeof(a->path), a->s);
		}
	}
	if (ok && len == 0)
		a->path[len++] = '/';
	if (ok)
		a->path[len] = '\0';
	/*
	 * A path too long to canonicalise (cwd plus a long relative argument can
	 * be) must not read as "no match": a deny rule would then miss it. It is
	 * an internal failure, and the decision fails closed.
	 */
	if (!ok) {
		sc->failed = true;
		sc->too_long = a->s[0] == '/' || sc->cwd_state > 0;
	}
	a->canon = ok ? 1 : -1;
	a->plen = ok ? len : 0;
	return ok;
}

/* Evaluate one predicate on an argument. */
static bool pred_holds(struct sctx *sc, const struct pred *pr, struct argtext *a)
{
	char dir[PATH_BUF];
	switch (pr->kind) {
	case P_GLOB:
		return cg_glob_match(&pr->g, a->s, a->len);
	case P_PATH:
		return argtext_path(a, sc) && cg_glob_match(&pr->g, a->path, a->plen);
	case P_WITHIN:
	case P_BELOW:
	case P_OUTSIDE: {
		if (!argtext_path(a, sc))
			return false; /* sc->failed is set: the stage is blocked */
		if (!dir_of(pr, sc->call, dir, sizeof(dir))) {
			sc->failed = true;
			return false;
		}
		bool in = path_within(a->path, dir, pr->kind == P_BELOW);
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
	/* No path glob can hold if the path lacks the literal they all contain. */
	if (ps->path_must_len &&
	    (!argtext_path(a, sc) || !find_lit(a->path, a->plen, ps->path_must, ps->path_must_len)))
		return false;
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
	size_t len = g->n ? strlen(s) : 0;
	for (size_t i = 0; i < g->n; i++) {
		const struct glob *gl = &g->v[i];
		/* The cheapest rejections inline (most globs of a list fail here). */
		if (len < gl->min_len || (gl->literal && len != gl->n) ||
		    (gl->prefix_len &&
		     (unsigned char)s[gl->prefix_len - 1] != gl->t[gl->prefix_len - 1].c))
			continue;
		if (cg_glob_match(gl, s, len))
			return true;
	}
	return false;
}

/* The request and peer conditions every kind of rule may use. */
static inline __attribute__((always_inline)) bool context_holds(const struct rule *r,
								const struct cg_call *call)
{
	if (!r->has_context)
		return true; /* most rules: no context key at all */
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
	if (r->position && !(r->position & sc->pos))
		return false; /* cheapest first */
	/*
	 * Met through the generic list: had an exact path matched, the index
	 * would have offered this rule (and the merge takes that first), so
	 * only the globs are left to try.
	 */
	if (!exe_known && (r->exe.n || r->exe_glob.n) && !glob_any(&r->exe_glob, sc->exe))
		return false;
	if (r->exe_within.n) {
		struct argtext a; /* the resolved program: absolute and canonical already */
		argtext_init(&a, sc->exe, SIZE_MAX);
		if (!any_pred(sc, &r->exe_within, &a))
			return false;
	}
	if (r->argv0.n && !glob_any(&r->argv0, cg_base_of(sc->st->argv[0])))
		return false;
	if (!context_holds(r, sc->call))
		return false;
	if (r->min_args >= 0 && sc->n_pos < (size_t)r->min_args)
		return false;
	if (r->max_args >= 0 && sc->n_pos > (size_t)r->max_args)
		return false;
	/* Subcommands before flags: cheaper, and they rule out most rules of a program. */
	bool sub_ok = r->n_sub == 0;
	for (size_t s = 0; s < r->n_sub && !sub_ok; s++) {
		const struct strs *w = &r->sub[s];
		/* Most sequences differ in their first word: no token walk for those. */
		if (w->n > 0 && (!sc->first_pos || sc->first_pos[0] != w->v[0][0] ||
				 strcmp(sc->first_pos, w->v[0]) != 0))
			continue;
		struct tokit it;
		struct tok t;
		size_t k = 0;
		tokit_init(&it, sc);
		while (k < w->n && tokit_next(&it, &t)) {
			if (t.flag)
				continue;
			if (t.name[0] != w->v[k][0] || strcmp(t.name, w->v[k]) != 0)
				break;
			k++;
		}
		sub_ok = k == w->n;
	}
	if (!sub_ok)
		return false;
	if (r->flags_any.n || r->flags_all.n || r->flags_none.n || r->global_flags_any.n) {
		/* One pass over the flags for all four conditions. */
		uint64_t all_seen = 0, all_want = r->flags_all.n >= 64
						      ? UINT64_MAX
						      : (UINT64_C(1) << r->flags_all.n) - 1;
		bool any_hit = r->flags_any.n == 0, gany_hit = r->global_flags_any.n == 0;
		struct cflags none, any, all, gany;
		struct cfbuf bnone, bany, ball, bgany;
		cflags_init(&none, &bnone, r, &r->cf_none, sc->spec, &r->flags_none);
		cflags_init(&any, &bany, r, &r->cf_any, sc->spec, &r->flags_any);
		cflags_init(&all, &ball, r, &r->cf_all, sc->spec, &r->flags_all);
		cflags_init(&gany, &bgany, r, &r->cf_gany, sc->spec, &r->global_flags_any);
		struct tokit it;
		struct tok t;
		tokit_init(&it, sc);
		while (tokit_next(&it, &t)) {
			if (!t.flag)
				continue;
			if (cflags_has(&none, &t))
				return false;
			if (!any_hit && cflags_has(&any, &t))
				any_hit = true;
			if (!gany_hit && t.global && cflags_has(&gany, &t))
				gany_hit = true;
			for (size_t i = 0; i < all.n; i++)
				if (cflag_is(&all, i, &t))
					all_seen |= UINT64_C(1) << i;
		}
		if (!any_hit || !gany_hit || all_seen != all_want)
			return false;
	}
	if (r->has_flags_only || r->args_any.n || r->args_all.n || r->args_none.n) {
		bool any_ok = r->args_any.n == 0;
		struct cflags only;
		struct cfbuf bonly;
		cflags_init(&only, &bonly, r, &r->cf_only, sc->spec, &r->flags_only);
		struct tokit it;
		struct tok t;
		size_t k = 0;
		tokit_init(&it, sc);
		while (tokit_next(&it, &t)) {
			if (t.flag) {
				if (r->has_flags_only && !cflags_has(&only, &t))
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
 * Decide one stage (st, resolved to exe, at pipeline position pos): the first
 * rule in file order among the exe-indexed rules for this path and the
 * generic ones. *r is NULL for default deny. -1 on an internal failure (the
 * caller fails closed).
 */
/*
 * What the deciders return: 0, -1 on an internal failure, or
 * DECIDE_TOO_LONG when an argument is too long to judge as a path (the
 * call is refused with its own reply, not as an adjudicator failure).
 */
#define DECIDE_TOO_LONG (-2)
_Static_assert(PATH_BUF == 4096, "cg_policy_rung's refusal names the limit");

static int decide_stage(const struct cg_policy *p, const struct cg_call *call,
			const struct cg_stage *st, const char *exe, unsigned pos,
			const struct rule **out, const struct cmdspec **spec_out)
{
	*out = NULL;
	*spec_out = NULL;
	if (!exe || !st->argv || st->argc < 1)
		return -1;
	char cwd_buf[PATH_BUF]; /* not zeroed: written before it is read */
	struct sctx sc = {
		.p = p,
		.call = call,
		.cwd_buf = cwd_buf,
		.st = st,
		.exe = exe,
		.spec = cg_smap_get(p->spec_by_name, cg_base_of(exe)),
		.pos = pos,
	};
	*spec_out = sc.spec;
	struct tok toks[STAGE_TOKS]; /* not zeroed: only [0, n_toks) is read */
	struct argit it;
	struct tok t;
	argit_init(&it, sc.spec, st);
	sc.toks = toks;
	sc.toks_all = true;
	while (argit_next(&it, &t)) {
		if (!t.flag && sc.n_pos++ == 0)
			sc.first_pos = t.name;
		if (sc.n_toks < STAGE_TOKS)
			sc.toks[sc.n_toks++] = t;
		else
			sc.toks_all = false;
	}
	const struct idxlist *il = cg_smap_get(p->exe_index, exe);
	if (il) {
		/* A known path: its merged list, globs on this path settled at load. */
		for (size_t k = 0; k < il->n_all; k++) {
			const struct rule *r = &p->rules[il->all[k]];
			if (command_holds(r, &sc, true)) {
				*out = r;
				return 0;
			}
			if (sc.failed)
				return sc.too_long ? DECIDE_TOO_LONG : -1;
		}
		return 0;
	}
	/* A path no rule names: only the generic rules, their globs tried here. */
	for (size_t k = 0; k < p->generic.n; k++) {
		const struct rule *r = &p->rules[p->generic.v[k]];
		if (command_holds(r, &sc, false)) {
			*out = r;
			return 0;
		}
		if (sc.failed)
			return sc.too_long ? DECIDE_TOO_LONG : -1;
	}
	return 0;
}

/* ---- transparent wrappers (env rm -rf /) ------------------------------------ */

/* How deep wrappers may nest (env nice timeout … cmd) before the call is refused. */
#define MAX_WRAP_DEPTH 8

/*
 * Where the command a wrapper runs starts in its argv: options end at the
 * first positional (these programs parse with getopt's "+", POSIX style),
 * then spec->wrap_operands positionals (timeout's DURATION, flock's FILE)
 * and, for env, NAME=VALUE words are skipped. 0 when there is no wrapped
 * command (`env` alone prints the environment).
 */
static size_t wrapped_start(const struct cmdspec *spec, const struct cg_stage *st)
{
	/* The same option walk as every rule's, so both see the same argv. */
	struct argit it;
	struct tok t;
	int64_t skip = spec->wrap_operands;
	argit_init(&it, spec, st);
	while (argit_next(&it, &t)) {
		if (t.flag)
			continue;
		/* A wrapper's options end at its first operand (getopt's "+"). */
		it.opts_done = true;
		size_t at = it.i - 1;
		if (skip > 0) {
			skip--;
			continue;
		}
		if (spec->wrap_assign && strchr(t.name, '='))
			continue;
		return at;
	}
	return 0;
}

/* The controlled PATH (docs/policy.md, `exe`), in lookup order. */
static const char *const wrap_dirs[] = { "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
					 "/usr/bin",	    "/sbin",	      "/bin" };

/*
 * The path a wrapped command name stands for, without syscalls: a name with
 * a '/' is canonicalised lexically against the call's cwd; a bare name is
 * the first controlled-PATH directory whose path some rule names, else
 * /usr/bin/NAME (which only generic rules can match). Symlinks are not
 * followed here; the wrapper's own confinement still bounds what runs.
 */
static bool wrapped_exe(const struct cg_policy *p, const struct cg_call *call, const char *name,
			char *buf, size_t cap)
{
	if (strchr(name, '/'))
		return cg_path_canon(call->cwd, name, buf, cap);
	size_t nl = strlen(name);
	for (size_t d = 0; d <= CG_ARRAY_LEN(wrap_dirs); d++) {
		/* Past the list: /usr/bin/NAME, for the generic rules alone. */
		const char *dir = d < CG_ARRAY_LEN(wrap_dirs) ? wrap_dirs[d] : "/usr/bin";
		size_t dl = strlen(dir);
		if (dl + 1 + nl + 1 > cap)
			return false;
		memcpy(buf, dir, dl);
		buf[dl] = '/';
		memcpy(buf + dl + 1, name, nl + 1);
		if (d == CG_ARRAY_LEN(wrap_dirs) || cg_smap_get(p->exe_index, buf))
			return true;
	}
	return false;
}

struct fold;
static void fold_add(struct fold *f, const struct rule *r, uint64_t stages);

/*
 * Decide pipeline stage i and, when its program is a transparent wrapper
 * (commands.X.wraps), the command it wraps, folding both: `env rm -rf /` is
 * as denied as `rm -rf /`, and `env ls` runs under env's terms and ls's.
 */
static int decide_stage_all(const struct cg_policy *p, const struct cg_call *call, size_t i,
			    struct fold *f, bool (*each)(const struct rule *r, void *arg),
			    void *arg)
{
	const struct cg_stage *st = &call->req->stages[i];
	const char *exe = call->stages[i].exe;
	unsigned pos = stage_position(i, call->n_stages);
	char buf[PATH_BUF];
	struct cg_stage sub;
	for (int depth = 0;; depth++) {
		const struct rule *r;
		const struct cmdspec *spec;
		int rc = decide_stage(p, call, st, exe, pos, &r, &spec);
		if (rc != 0)
			return rc;
		/* Stages past 64 share the last bit: they get the union's sets (stricter). */
		fold_add(f, r, 1ULL << (i < 63 ? i : 63));
		if (each)
			each(r, arg);
		size_t w = spec && spec->wraps ? wrapped_start(spec, st) : 0;
		if (w == 0)
			return 0;
		if (depth + 1 >= MAX_WRAP_DEPTH)
			return -1; /* fail closed: nesting this deep is not a real call */
		if (!wrapped_exe(p, call, st->argv[w], buf, sizeof(buf)))
			return -1;
		sub = (struct cg_stage){ .argc = st->argc - w, .argv = st->argv + w };
		st = &sub;
		exe = buf;
	}
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
	char cwd_buf[PATH_BUF];
	struct sctx sc = { .p = p, .call = call, .cwd_buf = cwd_buf };
	for (size_t i = 0; i < p->actions.n; i++) {
		const struct rule *r = &p->rules[p->actions.v[i]];
		if (action_holds(r, &sc, a)) {
			*out = r;
			return 0;
		}
		if (sc.failed)
			return sc.too_long ? DECIDE_TOO_LONG : -1;
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
	uint64_t stages[CG_VERDICT_MAX_CONS]; /* which stages each set came from */
	bool cons_overflow;
};

static void fold_add(struct fold *f, const struct rule *r, uint64_t stages)
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
			if (f->cons[i] == r->cons) {
				f->stages[i] |= stages;
				return;
			}
		if (f->n_cons == CG_VERDICT_MAX_CONS) {
			f->cons_overflow = true;
		} else {
			f->stages[f->n_cons] = stages;
			f->cons[f->n_cons++] = r->cons;
		}
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
	int rc;
	for (size_t i = 0; i < call->n_stages; i++)
		if ((rc = decide_stage_all(p, call, i, f, each, arg)) != 0)
			return rc;
	json_t *acts = call->actions ? call->actions : call->req->actions;
	if (acts) {
		if (!json_is_array(acts))
			return -1;
		for (size_t i = 0; i < json_array_size(acts); i++) {
			const struct rule *r;
			if ((rc = decide_action(p, call, json_array_get(acts, i), &r)) != 0)
				return rc;
			fold_add(f, r, UINT64_MAX); /* an action's terms apply to every stage */
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
	int rc = p ? decide_all(p, call, &f, NULL, NULL) : -1;
	if (rc == DECIDE_TOO_LONG) {
		/* Not judged is not matched: a deny rule might have named it. */
		*out = (struct cg_verdict){ .decision = CG_BLOCK,
					    .rule_id = "argument-too-long",
					    .reason = CG_R_ARG_TOO_LONG,
					    .why = "longer than 4096 bytes as a path under "
						   "the working directory" };
		return 0;
	}
	if (rc != 0)
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
		memcpy(out->stages, f.stages, f.n_cons * sizeof(f.stages[0]));
	}
	return 0;
}

struct rules_met {
	void (*fn)(const char *rule_id, void *arg);
	void *arg;
};

static bool report_rule(const struct rule *r, void *arg)
{
	struct rules_met *m = arg;
	m->fn(r ? r->id : "default-deny", m->arg);
	return true;
}

int cg_policy_rules_met(const struct cg_policy *p, const struct cg_call *call,
			void (*fn)(const char *rule_id, void *arg), void *arg)
{
	struct fold f;
	struct rules_met m = { fn, arg };
	return p && fn && decide_all(p, call, &f, report_rule, &m) == 0 ? 0 : -1;
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

/* The privilege rung's UNKNOWN: one person decides. */
static int needs_a_human(struct cg_verdict *out, const char *rule, enum cg_reply_id reason,
			 const char *why)
{
	out->decision = CG_UNKNOWN;
	out->rule_id = rule;
	out->reason = reason;
	out->why = why;
	out->approvers = 1;
	return 0;
}

int cg_privilege_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out)
{
	const struct cg_policy *p = ctx;
	*out = (struct cg_verdict){ .decision = CG_DECISION_NONE };
	if (!call || !call->req)
		return -1;
	if (!call->req->privileged && call->req->forward_agent) {
		/*
		 * The daemon's ssh agent signs with every key it holds, for
		 * whatever the call asks: any allowed call that asked had listed
		 * the keys, signed data of its choosing and wiped them (s39a).
		 * A human decides, or a grant one opened (it binds forward_agent).
		 */
		return needs_a_human(
		    out, "forward-agent", CG_R_NEEDS_HUMAN,
		    "the daemon's ssh agent would sign for the call with every key "
		    "it holds");
	}
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
		int rc = decide_all(p, call, &f, priv_each, &ps);
		/*
		 * An argument too long to judge: not explicit, and the policy
		 * rung refuses it with its own code (s41b F6: a rung failure
		 * said "report it").
		 */
		if (rc == DECIDE_TOO_LONG)
			ps.all_explicit = false;
		else if (rc != 0)
			return -1;
		if (ps.all_explicit && ps.first_id && !f.is_default) {
			out->decision = CG_ALLOW;
			out->rule_id = ps.first_id;
			out->reason = CG_R_ALLOWED;
			out->why = "the policy allows privileged use explicitly";
			return 0;
		}
	}
	return needs_a_human(out, "privileged", CG_R_PRIVILEGED_NEEDS_APPROVAL,
			     "privileged calls need a human");
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
		uint64_t h = cg_hash_str(call->req->session ? call->req->session : "") ^
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
			const struct cmdspec *s =
			    cg_smap_get(p->spec_by_name, cg_base_of(r->exe.v[e]));
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
	if (r->exe_within.n) {
		json_t *a = json_array();
		for (size_t i = 0; a && i < r->exe_within.n; i++)
			json_array_append_new(a, json_string(r->exe_within.v[i].src));
		json_object_set_new(m, "exe_within", a);
	}
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
		   { "global_flags_any", &r->global_flags_any, r->global_flags_any.n > 0 },
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
		json_t *c = json_pack("{s:b,s:o,s:o}", "bundling", s->bundling, "flags", g,
				      "value_flags", strs_json(&s->value_flags));
		if (c && s->global_value_flags.n)
			json_object_set_new(c, "global_value_flags",
					    strs_json(&s->global_value_flags));
		if (c && s->wraps)
			json_object_set_new(c, "wraps",
					    json_pack("{s:I,s:b}", "operands",
						      (json_int_t)s->wrap_operands, "assignments",
						      s->wrap_assign));
		json_object_set_new(cmds, s->name, c);
	}
	for (size_t i = 0; rules && i < p->n_rules; i++)
		json_array_append_new(rules, rule_json(p, &p->rules[i]));
	json_t *opq = json_array();
	for (size_t i = 0; opq && i < cg_opaque_builtin_n; i++)
		json_array_append_new(opq, json_string(cg_opaque_builtin[i]));
	for (size_t i = 0; opq && i < p->opaque_extra.n; i++)
		json_array_append_new(opq, json_string(p->opaque_extra.v[i]));
	json_t *defaults = json_pack(
	    "{s:I,s:I,s:I,s:o,s:I,s:I,s:b,s:b,s:b}", "timeout_ms", (json_int_t)d->timeout_ms,
	    "max_timeout_ms", (json_int_t)d->max_timeout_ms, "output_cap",
	    (json_int_t)d->output_cap, "env_allow", env ? env : json_array(), "approval_timeout_ms",
	    (json_int_t)d->approval_timeout_ms, "freshness_s", (json_int_t)d->freshness_s,
	    "screen_secrets", d->screen_secrets, "screen_injection", d->screen_injection,
	    "evidence_keep_output", d->evidence_keep_output);
	if (defaults && d->default_cwd)
		json_object_set_new(defaults, "cwd", json_string(d->default_cwd));
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
	return r->kind == RK_COMMAND && !r->exe_within.n && !r->n_sub && !r->argv0.n &&
	       !r->flags_any.n && !r->flags_all.n && !r->flags_none.n && !r->has_flags_only &&
	       !r->global_flags_any.n && !r->args_any.n && !r->args_all.n && !r->args_none.n &&
	       r->min_args < 0 && r->max_args < 0 && !r->position && !r->uid.n && !r->gid.n &&
	       !r->user_uid.n && !r->group_gid.n && !r->session.n && !r->host.n &&
	       r->privileged < 0 && !r->env_any.n;
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

/* Is where (an absolute path or ${var}/…) one of trees[0..n) or below one, as written? */
static bool under_a_tree(const char *where, const char *const *trees, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t tl = strlen(trees[i]);
		while (tl > 1 && trees[i][tl - 1] == '/')
			tl--;
		if ((tl == 1 && trees[i][0] == '/' && where[0] == '/') ||
		    (strncmp(where, trees[i], tl) == 0 && (where[tl] == '\0' || where[tl] == '/')))
			return true;
	}
	return false;
}

/*
 * A rule whose programs lie outside the trees its constraints let run: it
 * loads, and then every call it allows fails to start with EACCES (ux-s39:
 * an exe_glob under the workspace with no exec: key). Programs as the rule
 * names them: exe paths, exe_glob up to the first wildcard's directory,
 * exe_within directories.
 */
/*
 * A write tree where the developer's own tools find programs later: a
 * package manager's cache or a home's tool directories (s42a F3: an install
 * script planted a yarn in ~/.cache/node/corepack that the developer's
 * corepack ran; ux-s43c M6: the docs' own example wrote ~/.npm). scratch
 * gives the call an empty one of its own instead.
 */
static void lint_home_writes(json_t *a, const struct rule *r)
{
	static const char *const tools[] = { ".npm",   ".cache",  ".cargo",	 ".config",
					     ".local", ".yarn",	  ".pnpm-store", ".gradle",
					     ".m2",    ".rustup", "go",		 ".bun",
					     ".deno" };
	const struct cg_constraints *c = r->cons;
	static const char home[] = "${home}/";
	for (size_t i = 0; c && c->fs && r->decision != RD_DENY && i < c->n_write; i++) {
		const char *w = c->write[i];
		if (strncmp(w, home, sizeof(home) - 1) != 0)
			continue;
		const char *rest = w + sizeof(home) - 1;
		for (size_t t = 0; t < CG_ARRAY_LEN(tools); t++) {
			size_t n = strlen(tools[t]);
			if (strncmp(rest, tools[t], n) == 0 &&
			    (rest[n] == '\0' || rest[n] == '/')) {
				finding(
				    a, r->id, "home-write",
				    "writes %s, where the developer's own tools find programs "
				    "later (an install script can plant one there): give it as "
				    "scratch: (an empty directory of the call's own) unless the "
				    "host's copy must change",
				    w);
				break;
			}
		}
	}
}

static void lint_exec_trees(json_t *a, const struct rule *r)
{
	const struct cg_constraints *c = r->cons;
	if (!c || !c->fs || r->decision == RD_DENY || r->kind != RK_COMMAND)
		return;
	const char *const *trees = c->n_exec ? c->exec : cg_exec_default;
	size_t nt = c->n_exec ? c->n_exec : CG_ARRAY_LEN(cg_exec_default);
	char list[256] = "", where[PATH_BUF];
	for (size_t i = 0, at = 0; i < nt && at < sizeof(list); i++)
		at +=
		    (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", i ? " " : "", trees[i]);
	size_t n = r->exe.n + r->exe_glob.n + r->exe_within.n;
	for (size_t i = 0; i < n; i++) {
		const char *s = i < r->exe.n ? r->exe.v[i]
				: i < r->exe.n + r->exe_glob.n
				    ? r->exe_glob.v[i - r->exe.n].src
				    : r->exe_within.v[i - r->exe.n - r->exe_glob.n].src;
		size_t len =
		    i < r->exe.n || i >= r->exe.n + r->exe_glob.n ? strlen(s) : strcspn(s, "*?[{");
		if (i >= r->exe.n && i < r->exe.n + r->exe_glob.n)
			while (len > 1 && s[len - 1] != '/')
				len--; /* the literal directory before the first wildcard */
		snprintf(where, sizeof(where), "%.*s", (int)len, s);
		/* An exe that is here, where it really lies: names expand to every PATH directory. */
		char real[PATH_MAX];
		if (i < r->exe.n && !realpath(where, real))
			continue;
		if (i < r->exe.n)
			snprintf(where, sizeof(where), "%s", real);
		if (where[0] && !under_a_tree(where, trees, nt))
			finding(
			    a, r->id, "exec-missing",
			    "runs programs under %s, outside the trees its constraints let run "
			    "(exec: %s): every call it allows fails to start (EACCES); add that "
			    "directory to exec:",
			    where, list);
	}
	/*
	 * The dynamic loader: the kernel starts it for every dynamically linked
	 * program, and Landlock asks for exec rights on it too (ux-s41 M3: a
	 * list naming /usr/bin/git alone failed with EACCES on git).
	 */
	static const char *const loaders[] = { "/lib64/ld-linux-x86-64.so.2",
					       "/lib/ld-linux-aarch64.so.1",
					       "/lib/ld-linux-armhf.so.3", "/lib/ld-linux.so.2" };
	if (!c->n_exec)
		return;
	for (size_t i = 0; i < CG_ARRAY_LEN(loaders); i++) {
		char real[PATH_MAX];
		if (!realpath(loaders[i], real))
			continue;
		if (under_a_tree(loaders[i], trees, nt) || under_a_tree(real, trees, nt))
			return;
		finding(a, r->id, "exec-no-loader",
			"exec: %s holds no dynamic loader (%s): every dynamically linked program "
			"fails to start (EACCES); add %s to exec:",
			list, loaders[i], loaders[i]);
		return;
	}
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
		lint_exec_trees(a, r);
		lint_home_writes(a, r);
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
