/* SPDX-License-Identifier: MIT */
/*
 * confine — baseline: process-group tree, and a plan that refuses any
 * constraint it cannot yet enforce (fail closed). The full kernel
 * confinement (Landlock, namespaces, rlimits, seccomp) replaces this.
 */
#include "confine.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

struct cg_confine_plan {
	size_t n;
};

int cg_confine_prepare(const struct cg_constraints *const *cons, size_t n,
		       const struct cg_confine_ctx *ctx, struct cg_confine_plan **out,
		       struct cg_reply **err)
{
	for (size_t i = 0; i < n; i++) {
		if (cons[i]->fs || cons[i]->net != CG_NET_UNSET) {
			*err = cg_reply_new(CG_R_CONSTRAINT_UNENFORCEABLE, "{s:s,s:s}",
					    "constraint", cons[i]->fs ? "fs" : "net", "detail",
					    "confinement not available");
			return -1;
		}
	}
	struct cg_confine_plan *p = calloc(1, sizeof(*p));
	if (!p) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "preparing confinement");
		return -1;
	}
	p->n = n;
	*out = p;
	return 0;
}

int cg_confine_child(const struct cg_confine_plan *plan)
{
	return 0;
}

json_t *cg_confine_report(const struct cg_confine_plan *plan)
{
	return json_pack("{s:b}", "enforced", 0);
}

int64_t cg_confine_timeout_ms(const struct cg_confine_plan *plan)
{
	return CG_LIMIT_UNSET;
}

void cg_confine_plan_free(struct cg_confine_plan *plan)
{
	free(plan);
}

struct cg_tree {
	pid_t pgid;
};

int cg_tree_new(const char *trace_id, struct cg_tree **out, struct cg_reply **err)
{
	struct cg_tree *t = calloc(1, sizeof(*t));
	if (!t) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating process tree");
		return -1;
	}
	*out = t;
	return 0;
}

int cg_tree_child_join(const struct cg_tree *t, pid_t leader_pgid)
{
	return setpgid(0, leader_pgid) == 0 ? 0 : errno;
}

void cg_tree_add(struct cg_tree *t, pid_t pid)
{
	if (t->pgid == 0) {
		t->pgid = pid;
	}
	/* Both sides call setpgid so the group exists before either proceeds. */
	(void)setpgid(pid, t->pgid);
}

void cg_tree_kill(struct cg_tree *t, int sig)
{
	if (t && t->pgid > 0)
		(void)kill(-t->pgid, sig);
}

bool cg_tree_alive(struct cg_tree *t)
{
	return t && t->pgid > 0 && kill(-t->pgid, 0) == 0;
}

void cg_tree_free(struct cg_tree *t)
{
	free(t);
}
