/* SPDX-License-Identifier: MIT */
/*
 * gen — policy generations: the policy in force and the chain built over it.
 *
 * A generation is loaded whole (file read once, signature checked over the
 * same bytes, rungs registered) before it replaces the one in force, under
 * gen_lock, by a pointer swap.
 *
 * Invariants:
 *  - A policy that fails to load MUST leave the old generation in force.
 *  - A call MUST keep the generation it started with: each holds a
 *    reference, and a generation is freed only when its last one is dropped.
 *  - A signed policy is required whenever a public key is configured; the
 *    embedded default cannot satisfy that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_priv.h"
#include "sign.h"
#include "util.h"

struct gen *gen_get(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->gen_lock);
	struct gen *g = k->gen;
	atomic_fetch_add(&g->refs, 1);
	pthread_mutex_unlock(&k->gen_lock);
	return g;
}

void gen_put(struct gen *g)
{
	if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
		cg_policy_unref(g->policy);
		free(g);
	}
}

/*
 * Read the policy file once, check its detached signature over exactly those
 * bytes (when a key is configured), and load the same bytes: a file swapped
 * between the check and the load cannot get in.
 */
static int load_policy_file(const char *path, const char *pubkey, struct cg_policy **p,
			    struct cg_reply **err)
{
	char *buf = NULL;
	size_t len = 0;
	if (cg_sign_read_file(path, &buf, &len) != 0) {
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", path, "detail",
				    strerror(errno));
		return -1;
	}
	int rc = 0;
	if (pubkey)
		rc = cg_sign_verify_buffer(path, buf, len, NULL, pubkey, err);
	if (rc == 0)
		rc = cg_policy_load_buffer(path, buf, len, p, err);
	free(buf);
	return rc;
}

/*
 * A signed policy only goes forward: an older signed file and its .sig,
 * copied back over the current one, verified and reloaded (s36 attack). The
 * highest serial accepted, and the sha256 of the policy that carried it, are
 * kept in STATE/policy.serial; a policy with a lower serial, or the same
 * serial with other bytes, is refused. 0, or -1 with *err.
 */
static int serial_forward(const struct cg_kernel *k, const struct cg_policy *p,
			  struct cg_reply **err)
{
	char path[4096], have[128] = "", sha[65] = "";
	long long seen = 0;
	if (!k->state_dir ||
	    snprintf(path, sizeof(path), "%s/policy.serial", k->state_dir) >= (int)sizeof(path))
		return 0;
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(have, sizeof(have), f) || sscanf(have, "%lld %64s", &seen, sha) != 2)
			seen = -1; /* unreadable: refuse rather than forget */
		fclose(f);
	} else if (errno != ENOENT) {
		seen = -1;
	}
	const char *why = NULL;
	char detail[256];
	int64_t serial = cg_policy_serial(p);
	if (seen < 0)
		why = "the highest serial accepted so far (STATE/policy.serial) cannot be read";
	else if (serial < seen)
		why = "its serial is lower than one already accepted: an older signed policy";
	else if (serial > 0 && serial == seen && strcmp(sha, cg_policy_sha256(p)) != 0)
		why = "its serial is the one already accepted, with other bytes: raise the serial";
	if (why) {
		(void)snprintf(detail, sizeof(detail), "%s (serial %lld, accepted %lld)", why,
			       (long long)serial, seen);
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source",
				    cg_policy_source(p), "detail", detail);
		return -1;
	}
	if (serial <= seen) /* the same policy again, or none ordered yet (no serial) */
		return 0;
	/* Written whole, then renamed: a crash leaves the old or the new. */
	char line[128];
	int n = snprintf(line, sizeof(line), "%lld %s\n", (long long)serial, cg_policy_sha256(p));
	if (cg_file_write_atomic(path, line, (size_t)n, 0600, false) != 0) {
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source",
				    cg_policy_source(p), "detail",
				    "the accepted serial could not be kept (STATE/policy.serial)");
		return -1;
	}
	return 0;
}

int gen_load(struct cg_kernel *k, struct gen **out, struct cg_reply **err)
{
	struct cg_policy *p = NULL;
	int rc;
	if (k->policy_file) {
		rc = load_policy_file(k->policy_file, k->pubkey_file, &p, err);
	} else {
		if (k->pubkey_file) {
			*err = cg_reply_new(
			    CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source", "<embedded>", "detail",
			    "a signed policy is required but no policy file was given");
			return -1;
		}
		rc = cg_policy_load_default(&p, err);
	}
	if (rc == 0 && k->pubkey_file && serial_forward(k, p, err) != 0) {
		cg_policy_unref(p);
		return -1;
	}
	if (rc != 0)
		return -1;
	struct gen *g = calloc(1, sizeof(*g));
	if (!g) {
		cg_policy_unref(p);
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "loading the policy");
		return -1;
	}
	atomic_init(&g->refs, 1);
	g->policy = p;
	if (cg_policy_register_rungs(&g->chain, p) != 0) {
		gen_put(g);
		*err = cg_reply_new(CG_R_POLICY_LOAD_FAILED, "{s:s,s:s}", "source",
				    cg_policy_source(p), "detail",
				    "its rungs could not be registered");
		return -1;
	}
	*out = g;
	return 0;
}

struct cg_gate_ctx gen_gate_ctx(const struct cg_kernel *k, const struct gen *g)
{
	return (struct cg_gate_ctx){ .policy = g->policy,
				     .chain = &g->chain,
				     .world = &k->world,
				     .freshness_s = k->freshness_s };
}

json_t *gen_policy_json(const struct gen *g)
{
	return json_pack("{s:s,s:I,s:s}", "sha256", cg_policy_sha256(g->policy), "generation",
			 (json_int_t)g->number, "source", cg_policy_source(g->policy));
}

json_t *gen_reload_failed(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->gen_lock);
	json_t *f = json_incref(k->reload_failed);
	pthread_mutex_unlock(&k->gen_lock);
	return f;
}

struct cg_reply *gen_reload(struct cg_kernel *k, bool *ok)
{
	struct cg_reply *r = NULL;
	struct gen *g = NULL;
	*ok = false;
	if (gen_load(k, &g, &r) != 0) {
		/* Kept for ping: an edit that did not load must not look live (s36 walk). */
		char at[32];
		cg_format_time(cg_now_wall_ns(), at, sizeof(at));
		char *msg = cg_reply_message(r);
		json_t *f = json_pack("{s:s,s:s,s:s}", "at", at, "code", cg_reply_def_of(r)->code,
				      "message", msg ? msg : "");
		free(msg);
		pthread_mutex_lock(&k->gen_lock);
		json_decref(k->reload_failed);
		k->reload_failed = f;
		pthread_mutex_unlock(&k->gen_lock);
		return r;
	}
	pthread_mutex_lock(&k->gen_lock);
	json_decref(k->reload_failed);
	k->reload_failed = NULL;
	g->number = ++k->gen_seq;
	struct gen *old = k->gen;
	k->gen = g;
	pthread_mutex_unlock(&k->gen_lock);
	cg_evidence_set_retention(k->ev, cg_policy_defaults(g->policy)->evidence_retention_s);
	cg_evidence_set_packages(k->ev, cg_policy_defaults(g->policy)->evidence_archive);
	/* In-flight calls hold their own references; this drops only ours. */
	gen_put(old);
	*ok = true;
	return cg_reply_new(CG_R_POLICY_RELOADED, "{s:I,s:s}", "generation", (json_int_t)g->number,
			    "sha256", cg_policy_sha256(g->policy));
}

int cg_kernel_reload(struct cg_kernel *k, struct cg_result *result)
{
	bool ok;
	struct cg_reply *r = gen_reload(k, &ok);
	if (result)
		result_from_reply(r, result);
	cg_reply_free(r);
	return ok ? 0 : -1;
}

void cg_kernel_policy_identity(struct cg_kernel *k, char sha256_hex[65], uint64_t *generation)
{
	struct gen *g = gen_get(k);
	snprintf(sha256_hex, 65, "%s", cg_policy_sha256(g->policy));
	if (generation)
		*generation = g->number;
	gen_put(g);
}
