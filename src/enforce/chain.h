/* SPDX-License-Identifier: MIT */
/*
 * chain — the adjudicator chain (seed 003), the enforcement (EN) core.
 *
 * A rung is (rank, name, decide). The chain walks its registry in rank
 * order and folds the verdicts to the most restrictive on the lattice
 * ALLOW < DEGRADE < UNKNOWN < BLOCK. It imports no rung: rungs register
 * through cg_chain_register().
 *
 * Invariants:
 *  - An empty chain, a rung that fails (returns non-zero) or a rung that
 *    leaves its verdict undecided MUST fold to BLOCK (fail closed).
 *  - Adding a rung can only tighten the result, never loosen it.
 *  - cg_chain_decide MUST NOT make syscalls or allocate: the result lives in
 *    caller storage and points into policy-owned memory.
 */
#ifndef CG_CHAIN_H
#define CG_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "reply.h"
#include "world.h"

#define CG_VERDICT_MAX_CONS 8

enum cg_decision {
	CG_DECISION_NONE = -1, /* a rung that did not decide; folds to BLOCK */
	CG_ALLOW = 0,
	CG_DEGRADE = 1,
	CG_UNKNOWN = 2,
	CG_BLOCK = 3,
};

const char *cg_decision_name(enum cg_decision d); /* "ALLOW", …; "NONE" */

enum cg_tmp {
	CG_TMP_UNSET = 0, /* the default: private */
	CG_TMP_PRIVATE,	  /* a tmpfs of the call's own */
	CG_TMP_SHARED,	  /* the host's /tmp (read-only unless in the write set) */
};

enum cg_net {
	CG_NET_UNSET = 0, /* no network constraint from this rule */
	CG_NET_NONE,	  /* a fresh network namespace: no route to any outside socket */
	CG_NET_LOOPBACK,  /* loopback only */
	CG_NET_TCP,	  /* TCP connect/bind only to ports[] (Landlock net, ABI >= 4) */
	CG_NET_HOSTS,	  /* a fresh namespace whose only way out is the gate's proxy */
};

/* One entry of a host list: "name", "*.suffix" or an address, and a port. */
struct cg_host_entry {
	const char *name; /* lower case; "*.example.org" matches below example.org */
	uint16_t port;	  /* 0: the default ports 80 and 443 */
};

/* A name pinned to an address (policy resolve:, sandbox --resolve). */
struct cg_host_pin {
	const char *name;    /* lower case */
	const char *address; /* an IPv4 or IPv6 literal */
};

#define CG_LIMIT_UNSET (-1LL)

/* Resource limits; CG_LIMIT_UNSET where a rule sets none. */
struct cg_limits {
	int64_t cpu_s;
	int64_t as_bytes;
	int64_t nproc;
	int64_t fsize_bytes;
	int64_t nofile;
};

/*
 * The exec trees a filesystem-confined set gets when it lists none: the
 * system's program and library directories (missing ones are skipped).
 */
extern const char *const cg_exec_default[9];

/*
 * What a DEGRADE (or constrained ALLOW) grants. Path lists may contain the
 * tokens "${workspace}" (the call's workspace), "${cwd}" and "${home}",
 * expanded at confinement time. All memory is owned by the policy generation.
 */
struct cg_constraints {
	bool fs; /* filesystem confinement requested */
	size_t n_read, n_write, n_exec;
	const char *const *read;  /* read-only trees */
	const char *const *write; /* read-write trees */
	const char *const *exec;  /* trees whose files may be executed (none: cg_exec_default) */
	enum cg_net net;
	size_t n_ports;
	const uint16_t *ports; /* for CG_NET_TCP */
	/* CG_NET_HOSTS (docs/egress.md): deny wins over allow. */
	size_t n_allow_hosts, n_deny_hosts, n_pins;
	const struct cg_host_entry *allow_hosts;
	const struct cg_host_entry *deny_hosts;
	const struct cg_host_pin *pins;
	struct cg_limits limits;
	int64_t timeout_ms; /* CG_LIMIT_UNSET: policy default */
	bool best_effort;   /* run even if the kernel cannot enforce all of it */
	/* The view (docs/confinement.md): beyond the built-in hidden/protected sets. */
	size_t n_hide, n_protect, n_scratch;
	const char *const *hide; /* paths or globs with nothing there in the view */
	/* writable, empty and the call's own: a tmpfs over the host's directory */
	const char *const *scratch;
	const char *const *protect; /* read-only inside write trees (relative: in each) */
	enum cg_tmp tmp;	    /* the call's /tmp */
	/*
	 * git: write: the repository's .git in each write tree stays writable
	 * (pinned; its hooks and config still read-only). Otherwise .git is
	 * read-only as a whole. It holds only when every set of the stage says so.
	 */
	bool git_write;
};

/* One rung's answer. All pointers are into policy-owned, immutable memory. */
struct cg_verdict {
	enum cg_decision decision;
	const char *rule_id;	 /* stable id of the rule that decided, or NULL */
	enum cg_reply_id reason; /* registry code explaining the verdict */
	const char *why;	 /* short human text from the rule, or NULL */
	/*
	 * For ALLOW/DEGRADE: the constraint sets to intersect (e.g. one per
	 * pipeline stage that had some). A rung with more distinct sets than
	 * fit MUST return BLOCK rather than drop one.
	 */
	size_t n_constraints;
	const struct cg_constraints *constraints[CG_VERDICT_MAX_CONS];
	/* Per set, the stages it governs (bit i: stage i, 63: 63 and later); 0: all. */
	uint64_t stages[CG_VERDICT_MAX_CONS];
	int32_t approvers; /* UNKNOWN: distinct approvers required (>= 1) */
};

typedef int (*cg_rung_fn)(void *ctx, const struct cg_call *call, struct cg_verdict *out);

#define CG_CHAIN_MAX_RUNGS 16

struct cg_rung {
	int rank;
	const char *name;
	cg_rung_fn decide;
	void *ctx;
};

/* The registry of rungs. Plain value; build with cg_chain_register. */
struct cg_chain {
	size_t n;
	struct cg_rung rungs[CG_CHAIN_MAX_RUNGS]; /* kept sorted by rank */
};

/* Register a rung; rungs run in ascending rank. 0, or -1 when full. */
int cg_chain_register(struct cg_chain *c, int rank, const char *name, cg_rung_fn fn, void *ctx)
    __attribute__((warn_unused_result));

/* The folded result of one decision. */
struct cg_folded {
	enum cg_decision decision;
	const char *rule_id; /* the rule of the most restrictive verdict */
	enum cg_reply_id reason;
	const char *why;
	const char *deciding_rung;
	int32_t approvers; /* max over UNKNOWN verdicts */
	size_t n_rungs;
	struct {
		const char *rung;
		int rank;
		int rc; /* the rung's return code; non-zero = failed */
		struct cg_verdict v;
	} rungs[CG_CHAIN_MAX_RUNGS];
	/* Every constraint set of every ALLOW/DEGRADE verdict: all apply (intersection). */
	size_t n_constraints;
	const struct cg_constraints *constraints[CG_CHAIN_MAX_RUNGS * CG_VERDICT_MAX_CONS];
	uint64_t stages[CG_CHAIN_MAX_RUNGS * CG_VERDICT_MAX_CONS]; /* as in cg_verdict */
};

/* A constraint set as JSON (for replies, evidence, explain). New reference or NULL. */
json_t *cg_constraints_to_json(const struct cg_constraints *c);

/* A host list as ["name", "name:port", …]. */
json_t *cg_host_entries_json(const struct cg_host_entry *e, size_t n);

/*
 * The constraint sets that bind stage (0-based) of a pipeline: indexes into
 * the fold's constraints, every one of which applies. New reference or NULL.
 */
json_t *cg_folded_stage_sets(const struct cg_folded *f, size_t stage);

/* The folded decision as JSON: decision, rule_id, reason code, rungs, constraints. */
json_t *cg_folded_to_json(const struct cg_folded *f);

/* Walk the chain over call and fold. Never fails: errors fold to BLOCK. */
void cg_chain_decide(const struct cg_chain *c, const struct cg_call *call, struct cg_folded *out);

#endif
