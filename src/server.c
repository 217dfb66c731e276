/* SPDX-License-Identifier: MIT */
/* src/server.c — placeholder; being written. */
#include "server.h"
int cg_server_run(struct cg_kernel *k, const struct cg_server_config *cfg)
{
	return -1;
}
