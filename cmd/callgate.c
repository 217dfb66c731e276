/* SPDX-License-Identifier: MIT */
/*
 * callgate — the command line. A thin dispatcher: global options, then one
 * subcommand handled by its own file (see cli.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "callgate.h"
#include "cli.h"
#include "util.h"

static const struct {
	const char *name;
	int (*fn)(const struct cg_cli *, int, char **);
	const char *help;
} commands[] = {
	{ "run", cg_cli_run, "run a governed pipeline: run [opts] -- CMD ARGS [| CMD ARGS]..." },
	{ "ping", cg_cli_ping, "check the daemon is alive" },
	{ "gate", cg_cli_gate, "decide without running: gate [--json] -- CMD ARGS | --actions F" },
	{ "policy", cg_cli_policy, "policy check|explain|test|dump|diff|keygen|sign|verify" },
	{ "sandbox", cg_cli_sandbox, "run a command confined: sandbox [--read P]... -- CMD ARGS" },
	{ "replay", cg_cli_evidence, "verify evidence: replay TRACE_ID | --all" },
	{ "verdict", cg_cli_evidence, "print a trace's verdict: verdict TRACE_ID [--json]" },
	{ "log", cg_cli_evidence, "read the journal: log [--since T] [--trace ID] ..." },
	{ "evidence", cg_cli_evidence,
	  "evidence rebuild|checkpoint|prove|...|ship|verify (ship/verify: PostgreSQL)" },
	{ "key", cg_cli_evidence, "key show: print the evidence signing public key" },
	{ "approve", cg_cli_approve, "approve [ID]: the approver (TUI without ID)" },
	{ "pending", cg_cli_approve, "list calls waiting for approval" },
	{ "deny", cg_cli_approve, "deny ID [--why TEXT]" },
	{ "grant", cg_cli_approve, "grant open|list|close" },
	{ "mcp", cg_cli_mcp, "serve MCP on stdio for an agent" },
	{ "hook", cg_cli_hook, "agent hook adapters: hook claude-code" },
	{ "connect", cg_cli_connect,
	  "relay stdio to the agent socket (what --host runs over ssh)" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

#define USAGE                                                                                      \
	"callgate [--socket PATH] [--admin-socket PATH] [--state-dir DIR] [--host NAME\n"          \
	"                [--ssh-option OPT]... [--remote-socket PATH]] COMMAND [ARGS]"

/* The command list and the global options on stdout (--help). */
static int help(void)
{
	char about[4096];
	size_t n = (size_t)snprintf(about, sizeof(about), "commands:\n");
	for (size_t i = 0; i < N_COMMANDS && n < sizeof(about); i++)
		n += (size_t)snprintf(about + n, sizeof(about) - n, "  %-9s %s\n", commands[i].name,
				      commands[i].help);
	if (n < sizeof(about))
		(void)snprintf(about + n, sizeof(about) - n,
			       "\n'callgate COMMAND --help' (or 'callgate help COMMAND') shows"
			       " a command's\nown options.");
	(void)cg_cli_help(USAGE, about, cg_cli_global_opts);
	printf("\nSee callgate(1). Exit codes: the command's own, or 64 usage, 65 invalid,\n"
	       "66 no state directory, 69 unavailable, 70 error, 75 a human would decide (gate,\n"
	       "policy explain), 77 denied, 124 timeout.\n");
	return CG_EXIT_OK;
}

/*
 * An unknown command, named with the closest one; a few words a new user
 * reaches for first are pointed at the command that does it.
 */
static int bad_command(const char *name)
{
	static const char *const meant[][2] = {
		{ "explain", "policy explain" },
		{ "check", "policy check" },
		{ "status", "ping" },
		{ "list", "pending" },
		{ "show", "verdict" },
		{ "verify", "replay" },
		{ "audit", "replay --all" },
		{ "exec", "run" },
	};
	for (size_t i = 0; i < CG_ARRAY_LEN(meant); i++)
		if (strcmp(name, meant[i][0]) == 0) {
			fprintf(stderr,
				"callgate: unknown command '%s'; did you mean 'callgate %s'? (see "
				"'callgate --help')\n",
				name, meant[i][1]);
			return CG_EXIT_USAGE;
		}
	struct cg_cli_opt names[N_COMMANDS + 1];
	for (size_t i = 0; i < N_COMMANDS; i++)
		names[i] = (struct cg_cli_opt){ commands[i].name, NULL, commands[i].help };
	names[N_COMMANDS] = (struct cg_cli_opt){ 0 };
	return cg_cli_bad_option("", name, "unknown command", names);
}

/*
 * A path of the user's own daemon is trusted only if the user owns it and
 * its directory, and nobody else may write that directory: a socket
 * planted by another uid (a shared or careless $XDG_RUNTIME_DIR) would
 * otherwise receive the user's calls and answer them as it liked.
 */
static bool users_own(const char *path, mode_t type)
{
	struct stat st, dst;
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return false;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	uid_t me = geteuid();
	return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == type && st.st_uid == me &&
	       lstat(dir, &dst) == 0 && S_ISDIR(dst.st_mode) && dst.st_uid == me &&
	       !(dst.st_mode & (S_IWGRP | S_IWOTH));
}

/*
 * Where the daemon is when nothing says: as root, the system daemon's
 * paths. Otherwise the user's own daemon's (callgated's defaults when not
 * root) if it made them (users_own), else the system daemon's, which a
 * user in its socket group talks to.
 */
static void default_paths(struct cg_cli *g)
{
	static char sock[PATH_MAX], state[PATH_MAX];
	bool root = geteuid() == 0;
	if (!g->socket_path)
		g->socket_path = !root && cg_user_socket_path(sock, sizeof(sock)) == 0 &&
					 users_own(sock, S_IFSOCK)
				     ? sock
				     : CG_DEFAULT_SOCKET;
	if (!g->state_dir) {
		g->state_dir = !root && cg_user_state_dir(state, sizeof(state)) == 0 &&
				       users_own(state, S_IFDIR)
				   ? state
				   : CG_DEFAULT_STATE_DIR;
		g->state_dir_from = "the default";
	}
}

int main(int argc, char **argv)
{
	struct cg_cli g = { 0 };
	g.socket_path = getenv("CALLGATE_SOCKET");
	g.state_dir = getenv("CALLGATE_STATE_DIR");
	g.state_dir_from = g.state_dir ? "$CALLGATE_STATE_DIR" : NULL;
	g.admin_socket_path = getenv("CALLGATE_ADMIN_SOCKET");
	g.host = getenv("CALLGATE_HOST");
	g.remote_socket = getenv("CALLGATE_REMOTE_SOCKET");
	const char *ssh_opts[64];
	g.ssh_opts = ssh_opts;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i], *v = NULL;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
			return help();
		const struct cg_cli_opt *o =
		    cg_cli_opt_take("", cg_cli_global_opts, argc, argv, &i, &v);
		if (!o)
			return CG_EXIT_USAGE;
		if (strcmp(o->name, "--version") == 0) {
			printf("callgate %s\n", CALLGATE_VERSION);
			return CG_EXIT_OK;
		} else if (strcmp(o->name, "--socket") == 0) {
			g.socket_path = v;
		} else if (strcmp(o->name, "--admin-socket") == 0) {
			g.admin_socket_path = v;
		} else if (strcmp(o->name, "--state-dir") == 0) {
			g.state_dir = v;
			g.state_dir_from = "--state-dir";
		} else if (strcmp(o->name, "--host") == 0) {
			g.host = v;
		} else if (strcmp(o->name, "--remote-socket") == 0) {
			g.remote_socket = v;
		} else if (strcmp(o->name, "--ssh-option") == 0) {
			if (g.n_ssh_opts == sizeof(ssh_opts) / sizeof(ssh_opts[0]))
				return cg_cli_bad_option("", "--ssh-option",
							 "given too often:", cg_cli_global_opts);
			ssh_opts[g.n_ssh_opts++] = v;
		}
	}
	cg_client_remote_setup(&g);
	default_paths(&g);
	if (i >= argc) {
		fprintf(stderr, "callgate: no command given (see 'callgate --help')\n");
		return CG_EXIT_USAGE;
	}
	/* "callgate help run" is "callgate run --help". */
	if (strcmp(argv[i], "help") == 0) {
		if (i + 1 >= argc || cg_cli_wants_help(argc - i, argv + i))
			return help();
		char *hargv[] = { argv[i + 1], "--help", NULL };
		for (size_t c = 0; c < N_COMMANDS; c++)
			if (strcmp(argv[i + 1], commands[c].name) == 0)
				return commands[c].fn(&g, 2, hargv);
		return bad_command(argv[i + 1]);
	}
	for (size_t c = 0; c < N_COMMANDS; c++)
		if (strcmp(argv[i], commands[c].name) == 0)
			return commands[c].fn(&g, argc - i, argv + i);
	return bad_command(argv[i]);
}
