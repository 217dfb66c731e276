/* SPDX-License-Identifier: MIT */
/*
 * cli — the callgate command line: shared options, exit codes, the socket
 * client, and one entry point per subcommand family (one file each).
 *
 * Exit codes of `callgate run` (and of other subcommands where they apply):
 * the last stage's exit code (0-125, or 128+N for signal N, as the shell
 * reports it) when the pipeline ran; otherwise one of CG_EXIT_* below.
 */
#ifndef CG_CLI_H
#define CG_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "exec.h"
#include "wire.h"

/*
 * The largest response line a client accepts: every stream at its cap
 * (stdout and 64 stages' stderr, 16 MiB each), base64-encoded, plus room
 * for the rest. Anything the daemon may legitimately send fits.
 */
#define CG_CLI_MAX_RESPONSE                                                                        \
	((size_t)(CG_WIRE_MAX_STAGES + 1) * 4 * ((CG_EXEC_OUTPUT_CAP + 2) / 3) + (1u << 20))

#define CG_EXIT_OK	    0
#define CG_EXIT_USAGE	    64	/* bad command line (EX_USAGE) */
#define CG_EXIT_INVALID	    65	/* the daemon said I: fix the request (EX_DATAERR) */
#define CG_EXIT_UNAVAILABLE 69	/* the daemon could not be reached (EX_UNAVAILABLE) */
#define CG_EXIT_ERROR	    70	/* the daemon said E, or the CLI failed (EX_SOFTWARE) */
#define CG_EXIT_DENIED	    77	/* the daemon said D: refused by policy/approver (EX_NOPERM) */
#define CG_EXIT_TIMEOUT	    124 /* approval or command deadline passed (as timeout(1)) */

/* Options that come before the subcommand. */
struct cg_cli {
	const char *socket_path;       /* --socket, $CALLGATE_SOCKET, or the default */
	const char *admin_socket_path; /* --admin-socket, or next to the state dir */
	const char *state_dir;	       /* --state-dir, $CALLGATE_STATE_DIR, or the default */
};

/*
 * Send one request (borrowed; "time" and "id" are added when absent) to the
 * socket and read the one response line. timeout_ms bounds the whole
 * exchange (0: none). Returns 0 with *response (caller decrefs), or -1 with
 * errno set and a message in err (when err is not NULL).
 */
int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len);

/* Map a response's reply/status to the documented exit code (not for status ok). */
int cg_client_exit_code(const json_t *response);

/* Parse "CMD ARGS [| CMD ARGS]…" (argv after "--") into a pipeline array. NULL on error. */
json_t *cg_cli_pipeline(int argc, char **argv);

/*
 * Help and usage errors, one way for every subcommand. Each subcommand keeps
 * a table of its options (terminated by a zero entry) that both its --help
 * and its usage errors are made from, so the two cannot disagree.
 */
struct cg_cli_opt {
	const char *name; /* "--cwd" */
	const char *arg;  /* "DIR", or NULL for a flag */
	const char *help; /* one line */
};

/* True when --help or -h appears before any "--" in argv[1..]. */
bool cg_cli_wants_help(int argc, char **argv);

/* Print usage, an optional paragraph and the option table to stdout; returns CG_EXIT_OK. */
int cg_cli_help(const char *usage, const char *about, const struct cg_cli_opt *opts);

/*
 * Report a bad option on stderr, naming it, why (NULL: "unknown option"), and
 * the closest valid option of opts; returns CG_EXIT_USAGE.
 */
int cg_cli_bad_option(const char *sub, const char *bad, const char *why,
		      const struct cg_cli_opt *opts);

/* Subcommand families; argv[0] is the subcommand name. Return the exit code. */
int cg_cli_run(const struct cg_cli *g, int argc, char **argv);	   /* run */
int cg_cli_ping(const struct cg_cli *g, int argc, char **argv);	   /* ping */
int cg_cli_gate(const struct cg_cli *g, int argc, char **argv);	   /* gate */
int cg_cli_policy(const struct cg_cli *g, int argc, char **argv);  /* policy … */
int cg_cli_sandbox(const struct cg_cli *g, int argc, char **argv); /* sandbox */
int cg_cli_evidence(const struct cg_cli *g, int argc,
		    char **argv); /* replay, verdict, log, evidence, key */
int cg_cli_approve(const struct cg_cli *g, int argc,
		   char **argv);				/* approve, pending, deny, grant */
int cg_cli_mcp(const struct cg_cli *g, int argc, char **argv);	/* mcp */
int cg_cli_hook(const struct cg_cli *g, int argc, char **argv); /* hook */
/* evidence prove | consistency | checkpoint (cli_proof.c); argv[0] is the verb. */
bool cg_cli_proof_handles(const char *verb);
int cg_cli_proof(const struct cg_cli *g, int argc, char **argv);

#endif
