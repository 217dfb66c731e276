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
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* Does `sudo -n -l -- exe args` say this stage may run without a password? */
static bool sudo_would_run(const char *exe, const struct cg_stage *st)
{
	char *envp[] = { "PATH=" CG_WORLD_PATH, NULL };
	char **argv = calloc(st->argc + 5, sizeof(char *));
	posix_spawn_file_actions_t fa;
	pid_t pid = -1;
	int status = 0, rc = -1;
	if (!argv || posix_spawn_file_actions_init(&fa) != 0) {
		free(argv);
		return false;
	}
	argv[0] = "/usr/bin/sudo";
	argv[1] = "-n";
	argv[2] = "-l";
	argv[3] = "--";
	argv[4] = (char *)(uintptr_t)exe;
	for (size_t a = 1; a < st->argc; a++)
		argv[4 + a] = st->argv[a];
	if (posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0 &&
	    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) == 0 &&
	    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0) == 0 &&
	    posix_spawn(&pid, argv[0], &fa, NULL, argv, envp) == 0) {
		while ((rc = (int)waitpid(pid, &status, 0)) < 0 && errno == EINTR)
			;
	}
	posix_spawn_file_actions_destroy(&fa);
	free(argv);
	return rc >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool sudo_in_play(const struct cg_job *j)
{
	return j->gate.req->privileged && geteuid() != 0;
}

struct cg_reply *sudo_unenforceable(struct cg_reply *err)
{
	if (!err || err->id != CG_R_CONSTRAINT_UNENFORCEABLE || geteuid() == 0)
		return err;
	struct cg_reply *r =
	    cg_reply_new(CG_R_PRIVILEGED_NEEDS_ROOT_DAEMON, "{s:I}", "uid", (json_int_t)geteuid());
	if (!r)
		return err;
	cg_reply_free(err);
	return r;
}

struct cg_reply *sudo_confine_dead_end(const struct cg_job *j)
{
	if (!sudo_in_play(j))
		return NULL;
	struct cg_reply *err = NULL;
	struct cg_confine_plan *plan = NULL;
	struct cg_confine_ctx cctx = { .workspace = j->gate.call.workspace,
				       .cwd = j->gate.call.cwd,
				       .home = "",
				       .allow_setuid = true,
				       .uid = geteuid(),
				       .gid = getegid() };
	if (cg_confine_prepare(j->gate.folded.constraints, j->gate.folded.n_constraints, &cctx,
			       &plan, &err) != 0) {
		/*
		 * Not this kernel's fault, nor one to report (E, 70): the daemon is
		 * not root, and the request can say privileged false (ux-s40 M1).
		 */
		return sudo_unenforceable(err);
	}
	cg_confine_plan_free(plan);
	return NULL;
}

struct cg_reply *sudo_dead_end(struct cg_job *j)
{
	struct cg_reply *err = sudo_confine_dead_end(j);
	if (err || !sudo_in_play(j))
		return err;
	for (size_t i = 0; i < j->gate.call.n_stages; i++)
		if (!sudo_would_run(j->gate.call.stages[i].exe, &j->gate.req->stages[i]))
			return cg_reply_new(CG_R_SUDO_NEEDS_PASSWORD, "{s:s}", "exe",
					    j->gate.call.stages[i].exe);
	return NULL;
}
