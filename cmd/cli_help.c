/* SPDX-License-Identifier: MIT */
/*
 * cli_help — help and usage errors, one way for every subcommand (cli.h):
 * each subcommand keeps a table of its options, and its --help and its
 * usage errors are both made from it, so the two cannot disagree.
 *
 * Pure: no socket, no state directory, so that any command file (and the
 * unit tests that compile one in) can use it on its own.
 *
 * Invariants:
 *  - --help prints to stdout and exits 0; a usage error prints one line to
 *    stderr naming the offending option and, when one is near, the closest
 *    valid one (else all of them), and exits CG_EXIT_USAGE.
 *  - The user's text is echoed with control characters replaced.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

bool cg_cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return false;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return true;
	}
	return false;
}

int cg_cli_help(const char *usage, const char *about, const struct cg_cli_opt *opts)
{
	printf("usage: %s\n", usage);
	if (about)
		printf("\n%s\n", about);
	printf("\noptions:\n");
	if (opts) {
		for (const struct cg_cli_opt *o = opts; o->name; o++) {
			char left[64];
			(void)snprintf(left, sizeof(left), "%s%s%s", o->name, o->arg ? " " : "",
				       o->arg ? o->arg : "");
			printf("  %-26s %s\n", left, o->help);
		}
	}
	printf("  %-26s %s\n", "-h, --help", "show this help and exit");
	return CG_EXIT_OK;
}

/* The one entry of opts that starts with name ("--priv"), or NULL. */
static const char *unique_prefix(const char *name, const struct cg_cli_opt *opts)
{
	const char *found = NULL;
	size_t n = strlen(name);
	if (n < 3)
		return NULL;
	for (const struct cg_cli_opt *o = opts; o && o->name; o++) {
		if (strncmp(o->name, name, n) != 0)
			continue;
		if (found)
			return NULL;
		found = o->name;
	}
	return found;
}

const char *cg_cli_typo_of(const char *word, const struct cg_cli_opt *opts)
{
	if (strncmp(word, "--", 2) != 0)
		return NULL;
	for (const struct cg_cli_opt *o = opts; o && o->name; o++)
		if (strcmp(o->name, word) != 0 && cg_edit_distance(word, o->name) == 1)
			return o->name;
	return NULL;
}

/* callgate's own options, before the command (callgate.c parses them). */
const struct cg_cli_opt cg_cli_global_opts[] = {
	{ "--socket", "PATH", "the daemon's agent socket ($CALLGATE_SOCKET)" },
	{ "--admin-socket", "PATH", "the daemon's admin socket ($CALLGATE_ADMIN_SOCKET)" },
	{ "--state-dir", "DIR", "the daemon's state directory ($CALLGATE_STATE_DIR)" },
	{ "--host", "NAME",
	  "send run/gate/ping/mcp calls to NAME's daemon over ssh ($CALLGATE_HOST)" },
	{ "--ssh-option", "OPT",
	  "pass -o OPT to ssh for --host; repeatable ($CALLGATE_SSH: ssh command)" },
	{ "--remote-socket", "PATH",
	  "the agent socket on the --host machine ($CALLGATE_REMOTE_SOCKET)" },
	{ "--version", NULL, "print the version and exit" },
	{ 0 },
};

int cg_cli_bad_option(const char *sub, const char *bad, const char *why,
		      const struct cg_cli_opt *opts)
{
	return cg_cli_bad_option_of("callgate", sub, bad, why, opts);
}

int cg_cli_bad_option_of(const char *prog, const char *sub, const char *bad, const char *why,
			 const struct cg_cli_opt *opts)
{
	char name[64];
	/* "--paths=x" is judged by its name. */
	size_t n = strcspn(bad, "=");
	(void)snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1),
		       bad);
	const char *prefix = unique_prefix(name, opts), *closest = prefix;
	size_t best = prefix ? 0 : (size_t)-1;
	for (const struct cg_cli_opt *o = opts; !prefix && o && o->name; o++) {
		size_t d = cg_edit_distance(name, o->name);
		if (d < best) {
			best = d;
			closest = o->name;
		}
	}
	/* The name is the user's text: no terminal escapes reach stderr. */
	for (char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	/*
	 * callgate's own option after its command (ux-s39 L1): say where it
	 * goes rather than list the command's options. A command that has an
	 * option of the same name (run --host) took it before we got here.
	 */
	for (const struct cg_cli_opt *o = cg_cli_global_opts; !why && *sub && o->name; o++) {
		if (strcmp(prog, "callgate") != 0 || strcmp(o->name, name) != 0)
			continue;
		if (!o->arg) { /* --version: nothing to put before a command */
			fprintf(stderr,
				"callgate %s: '%s' is an option of callgate itself: callgate %s\n",
				sub, name, name);
			return CG_EXIT_USAGE;
		}
		fprintf(stderr,
			"callgate %s: '%s' is an option of callgate itself: give it before the "
			"command (callgate %s%s%s %s ...)\n",
			sub, name, name, o->arg ? " " : "", o->arg ? o->arg : "", sub);
		return CG_EXIT_USAGE;
	}
	fprintf(stderr, "%s%s%s: %s '%s'", prog, *sub ? " " : "", sub, why ? why : "unknown option",
		name);
	/* Close means a few edits, and fewer than half the name: "--frob" is not "--json". */
	size_t core = strlen(name + strspn(name, "-")), near = core / 2 < 3 ? core / 2 : 3;
	if (closest && best <= (near ? near : 1) && strcmp(closest, name) != 0) {
		fprintf(stderr, "; did you mean '%s'?", closest);
	} else if (closest && strcmp(closest, name) != 0) {
		/* Nothing is close: name them all, so the line still says what is valid. */
		fprintf(stderr, "; valid:");
		for (const struct cg_cli_opt *o = opts; o && o->name; o++)
			fprintf(stderr, "%s %s", o == opts ? "" : ",", o->name);
	}
	fprintf(stderr, " (see '%s%s%s --help')\n", prog, *sub ? " " : "", sub);
	return CG_EXIT_USAGE;
}

const struct cg_cli_opt *cg_cli_opt_take(const char *sub, const struct cg_cli_opt *opts, int argc,
					 char **argv, int *i, const char **val)
{
	const char *a = argv[*i];
	const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL;
	size_t n = eq ? (size_t)(eq - a) : strlen(a);
	char why[96];

	*val = NULL;
	for (const struct cg_cli_opt *o = opts; o && o->name; o++) {
		if (strlen(o->name) != n || strncmp(o->name, a, n) != 0)
			continue;
		if (!o->arg) {
			if (!eq)
				return o;
			(void)cg_cli_bad_option(sub, a, "no value is taken by", opts);
			return NULL;
		}
		if (eq) {
			*val = eq + 1;
			return o;
		}
		if (*i + 1 >= argc) {
			(void)snprintf(why, sizeof(why), "missing %s after", o->arg);
			(void)cg_cli_bad_option(sub, a, why, opts);
			return NULL;
		}
		*val = argv[++*i];
		return o;
	}
	(void)cg_cli_bad_option(sub, a, NULL, opts);
	return NULL;
}
