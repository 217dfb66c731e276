/* SPDX-License-Identifier: MIT */
/*
 * sudo — privileged stages from a daemon that is not root run as
 *   sudo -n NAME=value… -- /resolved/exe args…
 * an argv, never a shell.
 *
 * The job's stages are swapped for the wrapped ones by sudo_wrap() and
 * restored by sudo_unwrap(), so the request and the call the evidence and
 * the approver saw are unchanged once the run is over.
 *
 * Invariants:
 *  - Only a call the fold, a human or a grant let through as privileged
 *    reaches here; sudo's own policy is the second check, never the first.
 *  - -n MUST be passed: sudo fails instead of prompting on a terminal no one
 *    watches (the failure is reported as SUDO_NEEDS_PASSWORD).
 *  - Every allow-listed variable is passed explicitly (sudo resets the
 *    environment), or the stage does not run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel_priv.h"

static const char sudo_path[] = "/usr/bin/sudo";

/* Free what wrap_stage allocated in argv[2..a) and the arrays. */
static void free_wrapped(char **argv, size_t a, char *exe)
{
	for (size_t e = 2; argv && e < a; e++)
		free(argv[e]);
	free(argv);
	free(exe);
}

/* Wrap stage i of j. 0, or -1 on OOM (nothing of this stage changed). */
static int wrap_stage(struct cg_job *j, size_t i)
{
	struct cg_request *req = j->gate.req;
	struct cg_stage *st = &req->stages[i];
	char **argv = calloc(3 + req->n_env + st->argc + 1, sizeof(char *));
	char *exe = strdup(sudo_path);
	size_t a = 0;
	if (!argv || !exe) {
		free_wrapped(argv, a, exe);
		return -1;
	}
	argv[a++] = "sudo";
	argv[a++] = "-n";
	for (size_t e = 0; e < req->n_env; e++) {
		size_t l = strlen(req->env[e].name) + strlen(req->env[e].value) + 2;
		if (!(argv[a] = malloc(l))) {
			free_wrapped(argv, a, exe);
			return -1;
		}
		snprintf(argv[a++], l, "%s=%s", req->env[e].name, req->env[e].value);
	}
	argv[a++] = "--";
	argv[a++] = j->gate.call.stages[i].exe;
	for (size_t k = 1; k < st->argc; k++)
		argv[a++] = st->argv[k];
	argv[a] = NULL;
	j->sudo_argv_saved[i] = st->argv;
	j->sudo_argc_saved[i] = st->argc;
	j->sudo_exe_saved[i] = j->gate.call.stages[i].exe;
	st->argv = argv;
	st->argc = a;
	j->gate.call.stages[i].exe = exe;
	return 0;
}

/*
 * Wrap every stage of j. 0, or -1 with *err (an E reply; the stages wrapped
 * so far are restored).
 */
int sudo_wrap(struct cg_job *j, struct cg_reply **err)
{
	if (access(sudo_path, X_OK) != 0) {
		*err = cg_reply_new(CG_R_EXEC_SPAWN_FAILED, "{s:i,s:s,s:s,s:s}", "stage", 0, "exe",
				    sudo_path, "errno_name", cg_errno_name(errno), "step", "sudo");
		return -1;
	}
	for (size_t i = 0; i < j->gate.call.n_stages; i++) {
		if (wrap_stage(j, i) != 0) {
			sudo_unwrap(j);
			*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					    "wrapping with sudo");
			return -1;
		}
		j->sudo_wrapped = i + 1;
	}
	return 0;
}

/* Restore the stages sudo_wrap swapped. Safe when nothing was wrapped. */
void sudo_unwrap(struct cg_job *j)
{
	for (size_t i = 0; i < j->sudo_wrapped; i++) {
		struct cg_stage *st = &j->gate.req->stages[i];
		for (size_t e = 0; e < j->gate.req->n_env; e++)
			free(st->argv[2 + e]);
		free(st->argv);
		free(j->gate.call.stages[i].exe);
		st->argv = j->sudo_argv_saved[i];
		st->argc = j->sudo_argc_saved[i];
		j->gate.call.stages[i].exe = j->sudo_exe_saved[i];
	}
	j->sudo_wrapped = 0;
}

/* Did sudo refuse for want of a password? Returns the wrapped exe, or NULL. */
const char *sudo_password_needed(const struct cg_job *j, const struct cg_exec_result *res)
{
	static const char needle[] = "a password is required";
	for (size_t i = 0; i < res->n_stages && i < j->gate.call.n_stages; i++) {
		const struct cg_buf *b = &res->stages[i].err;
		if (res->stages[i].exit_code != 1 || !b->p)
			continue;
		if (memmem(b->p, b->len, needle, sizeof(needle) - 1))
			return j->sudo_wrapped ? j->sudo_exe_saved[i] : j->gate.call.stages[i].exe;
	}
	return NULL;
}
