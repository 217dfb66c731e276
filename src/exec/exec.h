/* SPDX-License-Identifier: MIT */
/*
 * exec — the pipeline runner.
 *
 * Runs the resolved stages of a call joined by pipes, never through a shell:
 * stdin /dev/null, stdout of stage i into stdin of stage i+1, the last
 * stage's stdout and every stage's stderr captured with a hard cap (16 MiB
 * by default per stream, 64 MiB for all of a call's streams together) and
 * drained past it so that no child blocks; one process group
 * (and the confinement tree) per call; a deadline that kills the whole tree,
 * TERM then KILL; per-stage exit code or 128+signal.
 *
 * Invariants:
 *  - Children MUST inherit no fd but 0, 1 and 2.
 *  - Between fork and exec the child MUST only call async-signal-safe
 *    functions (the daemon is multi-threaded).
 *  - When the deadline passes or the call is cancelled, every process of the
 *    tree MUST be killed before cg_exec_run returns.
 */
#ifndef CG_EXEC_H
#define CG_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "confine.h"
#include "reply.h"
#include "util.h"
#include "world.h"

#define CG_EXEC_OUTPUT_CAP    (16u * 1024 * 1024)
#define CG_EXEC_TOTAL_CAP     (64u * 1024 * 1024) /* all streams of one call together */
#define CG_EXEC_KILL_GRACE_MS 200

struct cg_exec_spec {
	const struct cg_call *call;	    /* resolved stages and cwd */
	char *const *envp;		    /* the command environment */
	int64_t timeout_ms;		    /* deadline for the whole pipeline */
	size_t cap;			    /* per stream; 0 -> CG_EXEC_OUTPUT_CAP */
	size_t total_cap;		    /* all streams together; 0 -> CG_EXEC_TOTAL_CAP */
	const struct cg_confine_plan *plan; /* applied in every child; NULL: none */
	int cancel_fd;			    /* readable -> cancel (eventfd), or -1 */
	const char *trace_id;
};

struct cg_stage_result {
	pid_t pid;
	int exit_code;	/* exit status, or 128+signal */
	int raw_status; /* as waitpid returned it */
	struct cg_buf err;
};

struct cg_exec_result {
	size_t n_stages;
	struct cg_stage_result *stages;
	struct cg_buf out;
	bool timed_out;
	bool cancelled;
	bool tree_escapees_killed;    /* descendants outlived the stages and were killed */
	int64_t started_ns, ended_ns; /* monotonic */
	size_t n_execd; /* stages whose command reached its execve (kept on failure too) */
};

/*
 * Run the pipeline. Returns 0 when it ran (whatever the exit codes, even if
 * timed out or cancelled: see the flags) with *res filled (free with
 * cg_exec_result_fini); -1 with *err (an MCP-EXEC-E reply) when it could
 * not be started whole. Then, if n_execd is not 0, the stages before the
 * one that failed had started (*err is EXEC_PARTLY_STARTED; any still
 * running were killed), and *res keeps their exit codes (stages[i] for i <
 * n_execd; free with cg_exec_result_fini); else *res is empty. Nothing is
 * left running either way.
 */
int cg_exec_run(const struct cg_exec_spec *spec, struct cg_exec_result *res, struct cg_reply **err)
    __attribute__((warn_unused_result));

void cg_exec_result_fini(struct cg_exec_result *res);

#endif
