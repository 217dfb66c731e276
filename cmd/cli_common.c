/* SPDX-License-Identifier: MIT */
/* placeholder: not yet written */
#include "cli.h"
int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len)
{
	return -1;
}
int cg_client_exit_code(const json_t *response)
{
	return CG_EXIT_ERROR;
}
json_t *cg_cli_pipeline(int argc, char **argv)
{
	return NULL;
}
