/* SPDX-License-Identifier: MIT */
/* placeholder: not yet written */
#include <stdio.h>
#include "cli.h"
int cg_cli_evidence(const struct cg_cli *g, int argc, char **argv)
{
	fprintf(stderr, "callgate: %s: not available in this build\n", argv[0]);
	return CG_EXIT_ERROR;
}
