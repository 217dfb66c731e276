/* SPDX-License-Identifier: MIT */
/*
 * callgate — the command line. A thin dispatcher: global options, then one
 * subcommand handled by its own file (see cli.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callgate.h"
#include "cli.h"

static const struct {
	const char *name;
	int (*fn)(const struct cg_cli *, int, char **);
	const char *help;
} commands[] = {
	{ "run", cg_cli_run, "run a governed pipeline: run [opts] -- CMD ARGS [| CMD ARGS]..." },
	{ "ping", cg_cli_ping, "check the daemon is alive" },
	{ "gate", cg_cli_gate, "decide without running: gate [--json] -- CMD ARGS | --actions F" },
	{ "policy", cg_cli_policy, "policy check|explain|test|dump|keygen|sign|verify" },
	{ "sandbox", cg_cli_sandbox, "run a command confined: sandbox [--read P]... -- CMD ARGS" },
	{ "replay", cg_cli_evidence, "verify evidence: replay TRACE_ID | --all" },
	{ "verdict", cg_cli_evidence, "print a trace's verdict: verdict TRACE_ID [--json]" },
	{ "log", cg_cli_evidence, "read the journal: log [--since T] [--trace ID] ..." },
	{ "evidence", cg_cli_evidence, "evidence rebuild" },
	{ "key", cg_cli_evidence, "key show: print the evidence signing public key" },
	{ "approve", cg_cli_approve, "approve [ID]: the approver (TUI without ID)" },
	{ "pending", cg_cli_approve, "list calls waiting for approval" },
	{ "deny", cg_cli_approve, "deny ID [--why TEXT]" },
	{ "grant", cg_cli_approve, "grant open|list|close" },
	{ "mcp", cg_cli_mcp, "serve MCP on stdio for an agent" },
	{ "hook", cg_cli_hook, "agent hook adapters: hook claude-code" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: callgate [--socket PATH] [--admin-socket PATH] [--state-dir DIR] "
		   "COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\nSee callgate(1). Exit codes: the command's own, or 64 usage, 65 invalid, "
		   "69 unavailable,\n70 error, 77 denied, 124 timeout.\n");
}

int main(int argc, char **argv)
{
	struct cg_cli g = { 0 };
	g.socket_path = getenv("CALLGATE_SOCKET");
	g.state_dir = getenv("CALLGATE_STATE_DIR");
	g.admin_socket_path = getenv("CALLGATE_ADMIN_SOCKET");
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(a, "--version") == 0) {
			printf("callgate %s\n", CALLGATE_VERSION);
			return 0;
		} else if (strcmp(a, "--socket") == 0 && i + 1 < argc) {
			g.socket_path = argv[++i];
		} else if (strcmp(a, "--admin-socket") == 0 && i + 1 < argc) {
			g.admin_socket_path = argv[++i];
		} else if (strcmp(a, "--state-dir") == 0 && i + 1 < argc) {
			g.state_dir = argv[++i];
		} else {
			fprintf(stderr, "callgate: unknown option '%s'\n", a);
			usage(stderr);
			return CG_EXIT_USAGE;
		}
	}
	if (!g.socket_path)
		g.socket_path = CG_DEFAULT_SOCKET;
	if (!g.state_dir)
		g.state_dir = CG_DEFAULT_STATE_DIR;
	if (i >= argc) {
		usage(stderr);
		return CG_EXIT_USAGE;
	}
	for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
		if (strcmp(argv[i], commands[c].name) == 0)
			return commands[c].fn(&g, argc - i, argv + i);
	fprintf(stderr, "callgate: unknown command '%s'\n", argv[i]);
	usage(stderr);
	return CG_EXIT_USAGE;
}
