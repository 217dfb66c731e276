/* SPDX-License-Identifier: MIT */
/*
 * manifest — the compiled form of a policy generation, shared by the loader
 * (manifest.c: YAML to this form) and the adjudicator (policy.c: deciding,
 * dump, lint). Internal to libcallgate; the contract is policy.h.
 *
 * Invariants:
 *  - Everything reachable from struct cg_policy is immutable after
 *    cg_policy_load_* returns, except the atomic reference count and the
 *    rate-limit slots.
 *  - All strings and arrays live in the generation's arena (or, for the
 *    executable index, its own heap blocks) and die with it.
 *  - cg_glob_match, cg_path_canon and cg_smap_get are on the decide path:
 *    they MUST NOT allocate or make system calls.
 */
#ifndef CG_MANIFEST_H
#define CG_MANIFEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "matcher.h"
#include "util.h"
#include "policy.h"

#define MAX_POLICY_BYTES      (4u * 1024 * 1024)
#define MAX_GLOB_TOKENS	      256
#define GLOB_WORDS	      (MAX_GLOB_TOKENS / 64 + 1)
#define MAX_COMPILED_BYTES    (64u * 1024 * 1024) /* a generation's arena */
#define MAX_GLOB_BYTES	      1024
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
	size_t total; /* bytes taken from malloc, capped (see MAX_COMPILED_BYTES) */
};

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
	/*
	 * The cheap checks decide the match on their own: literals around one
	 * "**" (LIT**, **LIT, LIT**LIT) or one literal run between two
	 * ("**LIT**"), the shapes of most path globs ("**" + "/.ssh/" + "**").
	 * (Kept beside literal, in padding: a glob's size bounds big policies.)
	 */
	bool by_checks;
	const char *must; /* the longest literal run: any match contains it */
	size_t must_len;
};

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
	/*
	 * When every predicate is a `path` glob: a literal all their literal
	 * runs share (protected paths all contain "/."). A canonical path
	 * without it satisfies none of them, so the globs are skipped.
	 */
	const char *path_must;
	size_t path_must_len;
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

/* A rule's flag list renamed to canonical names under one spec (by length). */
struct cflist {
	size_t n;
	const char **v;
	size_t *len;
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
	struct preds exe_within; /* P_WITHIN directories the resolved program lies in */
	struct globs argv0;	 /* basename of argv[0] as sent (multi-call binaries) */
	size_t n_sub;
	struct strs *sub; /* word sequences */
	struct strs flags_any, flags_all, flags_none, flags_only;
	/* flags_any, but only among the flags before the first positional */
	struct strs global_flags_any;
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
	/*
	 * The flag lists canonicalised at load under cf_spec (the spec of the
	 * rule's first executable), so that a stage of that program does not
	 * redo it per rule; other stages canonicalise on the stack.
	 */
	bool has_context; /* any context key: uid … env_any (precomputed) */
	bool cf_set;
	const struct cmdspec *cf_spec;
	struct cflist cf_any, cf_all, cf_none, cf_only, cf_gany;
};

struct cmdspec {
	const char *name;
	bool bundling;
	size_t n_alias;
	const char **alias; /* alias[i] -> canon[i] */
	const char **canon;
	struct strs value_flags;
	/*
	 * Value flags only before the first positional argument (git's -c and
	 * -C): after the subcommand the same letters are its own flags
	 * (git switch -c NAME), which take no value of the program's.
	 */
	struct strs global_value_flags;
	size_t n_groups;
	struct strs *groups;
	/*
	 * A transparent wrapper (env, nohup, timeout, …): its argv carries the
	 * command it runs, which is decided too (docs/policy.md, "wrappers").
	 * The wrapped argv starts at the first positional argument after
	 * wrap_operands positionals (and, with wrap_assign, NAME=VALUE words).
	 */
	bool wraps;
	bool wrap_assign;
	int64_t wrap_operands;
	/*
	 * Lookup tables built at load so that normalising argv on the decide
	 * path costs a table read per flag, not a string scan per spec entry:
	 * short options ("-c") by byte, the rest compared by length first.
	 */
	/*
	 * Long flags the policy's rules name for this program (flags_any, _all,
	 * _none, _only): an abbreviation expands to them as to the spec's own,
	 * since the program accepts any unique prefix. A program a rule names
	 * flags for gets a spec for this alone when it has none (not dumped).
	 */
	struct strs longs;
	size_t longs_cap;
	uint8_t short_vf[32];	  /* bit c: "-c" is a value flag */
	uint8_t short_gvf[32];	  /* bit c: "-c" is a global value flag */
	int16_t short_alias[256]; /* "-c" -> index into alias/canon, or -1 */
	size_t *alias_len;	  /* strlen(alias[i]) */
	size_t *canon_len;	  /* strlen(canon[i]) */
	size_t *vf_len;		  /* strlen(value_flags.v[i]) */
	size_t *gvf_len;	  /* strlen(global_value_flags.v[i]) */
};

struct idxlist {
	size_t n, cap;
	uint32_t *v;
	/*
	 * exe_index entries only: every rule a stage of this path can meet, in
	 * file order — the indexed rules, the generic rules with no executable
	 * key, and the generic rules whose exe_glob matches this path (decided
	 * once at load, so deciding skips those globs). Heap, like v.
	 */
	size_t n_all;
	uint32_t *all;
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
	int64_t serial; /* top-level serial: a signed policy's order (0: none given) */
	struct arena ar;
	struct cg_policy_defaults defaults;
	size_t n_rules;
	struct rule *rules;
	size_t n_specs;
	struct cmdspec *specs;
	struct cg_smap *spec_by_name; /* basename -> struct cmdspec * */
	struct cg_smap *exe_index;    /* canonical path -> struct idxlist * (heap) */
	struct idxlist generic;	      /* command/context rules not indexed by exe */
	struct idxlist actions;	      /* action and context rules */
	struct strs opaque_extra;
	struct globs opaque_extra_g;
	struct cg_matcher *matcher;
	size_t n_patterns;
	struct rate per_peer, per_session;
};

/* Does g match s[0..len)? Linear in len; no allocation. (policy.c) */
bool cg_glob_match(const struct glob *g, const char *s, size_t len);

static inline bool cg_glob_match_str(const struct glob *g, const char *s)
{
	return cg_glob_match(g, s, strlen(s));
}

/*
 * Canonicalise path lexically against base (an absolute directory): resolve
 * ".", "..", "//" without following symlinks. false when base is missing for
 * a relative path, or the result does not fit in cap. (policy.c)
 */
bool cg_path_canon(const char *base, const char *path, char *out, size_t cap);

extern const char *const cg_opaque_builtin[]; /* the built-in opaque launcher class */
extern const size_t cg_opaque_builtin_n;

static inline const char *cg_base_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

#endif
