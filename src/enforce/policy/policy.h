/* SPDX-License-Identifier: MIT */
/*
 * policy — the policy manifest (YAML) compiled into an immutable generation,
 * and the policy adjudicator rung.
 *
 * A generation is loaded once, compiled (rules indexed by executable,
 * argument patterns into one linear-time matcher database), and then only
 * read. It is reference-counted so that a reload can swap generations while
 * in-flight calls keep the one they started with.
 *
 * Invariants:
 *  - Unknown keys, bad values and patterns that do not compile MUST be load
 *    errors, never ignored.
 *  - Nothing matches -> BLOCK with rule id "default-deny". An empty policy
 *    permits nothing.
 *  - cg_policy_rung MUST NOT make syscalls or allocate in steady state.
 *  - Every verdict names the rule id that produced it.
 */
#ifndef CG_POLICY_H
#define CG_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chain.h"
#include "reply.h"

struct cg_policy;

/* Defaults the rest of callgate reads from the policy in force. */
struct cg_policy_defaults {
	int64_t timeout_ms;	/* default command deadline */
	int64_t max_timeout_ms; /* cap on a request's timeout_ms */
	size_t output_cap;	/* per stream, bytes (16 MiB by the protocol) */
	size_t n_env_allow;
	const char *const *env_allow; /* names a request may set */
	int64_t approval_timeout_ms;  /* how long a deferred call waits */
	int64_t freshness_s;	      /* request time window */
	bool screen_secrets;	      /* redact secrets in output (reply and evidence) */
	bool screen_injection;	      /* flag injection-shaped output as quarantined */
	bool evidence_keep_output;    /* keep command output itself in evidence */
	int64_t evidence_retention_s; /* evidence.retention: pack older packages; 0: never */
	bool evidence_archive;	      /* evidence.packages: archive (packed as they are sealed) */
	/*
	 * defaults.cwd: the cwd of a request that names none, as written — an
	 * absolute path, or "${workspace}" optionally followed by "/sub/dir"
	 * (expand it with the daemon's workspace). NULL when unset (then the
	 * request's cwd rules apply unchanged). The loader checks only its
	 * shape; the world adapter MUST still resolve it and refuse it unless
	 * it lies inside a configured workspace, like any request cwd.
	 */
	const char *default_cwd;
};

/*
 * Load a policy from bytes. source names it in errors ("<embedded>" or a path).
 * On success returns 0 and *out with one reference; on failure -1 and *err
 * (MCP-CFG-E reply naming the line and the problem).
 */
int cg_policy_load_buffer(const char *source, const char *buf, size_t len, struct cg_policy **out,
			  struct cg_reply **err) __attribute__((warn_unused_result));
int cg_policy_load_file(const char *path, struct cg_policy **out, struct cg_reply **err)
    __attribute__((warn_unused_result));
/* The embedded default policy (etc/callgate/policy.yaml compiled in). */
int cg_policy_load_default(struct cg_policy **out, struct cg_reply **err)
    __attribute__((warn_unused_result));

/* The embedded default policy's bytes. */
extern const char cg_default_policy_yaml[];
extern const size_t cg_default_policy_yaml_len;

struct cg_policy *cg_policy_ref(struct cg_policy *p);
void cg_policy_unref(struct cg_policy *p);

const struct cg_policy_defaults *cg_policy_defaults(const struct cg_policy *p);
const char *cg_policy_sha256(const struct cg_policy *p); /* hex of the exact bytes */
const char *cg_policy_source(const struct cg_policy *p);
/* The policy's top-level serial (0 when it gives none): signed policies only go forward. */
int64_t cg_policy_serial(const struct cg_policy *p);

/*
 * The policy rung: decides a resolved call (every stage, and every abstract
 * action of a gate request) against ctx, a struct cg_policy *. Returns 0 with
 * *out filled; non-zero means the rung failed (the chain folds it to BLOCK).
 */
int cg_policy_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out);

/*
 * Register the rungs a generation contributes (privilege, policy, …) on c,
 * in their ranks. The daemon, `callgate policy explain` and tests all build
 * their chain through this one function. 0, or -1 when the chain is full.
 */
int cg_policy_register_rungs(struct cg_chain *c, struct cg_policy *p)
    __attribute__((warn_unused_result));

/*
 * Every rule that decides some stage (or wrapped command, or action) of call,
 * as the policy rung meets them, given to fn one by one ("default-deny" when
 * none matched). A pipeline's verdict names only its most restrictive stage's
 * rule; `callgate policy test` counts these as exercised. 0, or -1.
 */
int cg_policy_rules_met(const struct cg_policy *p, const struct cg_call *call,
			void (*fn)(const char *rule_id, void *arg), void *arg);

/* The normalised policy as JSON (`callgate policy dump`). New reference or NULL. */
json_t *cg_policy_dump(const struct cg_policy *p);

/*
 * Lint findings, an array of {"rule": id, "kind": "shadowed"|"unreachable"|…,
 * "detail": text} (`callgate policy check`). New reference or NULL.
 */
json_t *cg_policy_lint(const struct cg_policy *p);

/* The privilege rung: privileged calls need approval (until approval exists). */
int cg_privilege_rung(void *ctx, const struct cg_call *call, struct cg_verdict *out);

#endif
