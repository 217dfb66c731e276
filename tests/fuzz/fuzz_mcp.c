/* SPDX-License-Identifier: MIT */
/*
 * fuzz_mcp — arbitrary bytes through the agent bridges' parsers and the
 * output screen: a JSON-RPC line into `callgate mcp`'s message handler, a
 * Bash command into the hook's strict shell-word splitter, a URL into its
 * host parser, and command output into the screen.
 *
 * The bridges live in cmd/ (they are programs, not library code), so this
 * target compiles them in directly; the daemon client is replaced by a stub
 * that reports "unreachable", and tools/call (which starts a thread per call)
 * is left to the e2e tests.
 *
 * Invariants checked (by the sanitizers and the aborts below):
 *  - No input crashes, leaks or reads out of bounds.
 *  - A command the splitter accepts is a non-empty list of non-empty stages
 *    of strings, and it never accepts a command holding a newline (not even
 *    quoted: the shell would treat it as a command separator in places).
 *  - The screen returns a NUL-terminated copy whose length it reports.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define str_or mcp_str_or
#define usage  mcp_usage
#include "../../cmd/cli_mcp.c"
#undef str_or
#undef usage
#define str_or hook_str_or
#define usage  hook_usage
#include "../../cmd/cli_hook.c"
#undef str_or
#undef usage
#include "../../cmd/cli_help.c" /* the option tables' --help and usage errors */

#include "screen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len)
{
	(void)socket_path;
	(void)request;
	(void)timeout_ms;
	*response = NULL;
	snprintf(err, err_len, "fuzzing: no daemon");
	errno = ECONNREFUSED;
	return -1;
}

int cg_client_call_wait(const char *socket_path, json_t *request, int64_t timeout_ms,
			const struct cg_client_wait *w, json_t **response, char *err,
			size_t err_len)
{
	(void)w;
	return cg_client_call(socket_path, request, timeout_ms, response, err, err_len);
}

/* No other machine while fuzzing: every named host but this one is remote (and refused unless allowed). */
bool cg_client_host_is_remote(const char *host)
{
	return host && *host && strcmp(host, "localhost") != 0;
}

static struct cg_screen *scr;
static struct cg_cli cli = { .socket_path = "/nonexistent/callgate.sock" };
static struct server srv;

static void once(void)
{
	struct cg_reply *err = NULL;
	int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

	/* The handler's answers go to stdout; the fuzzer's own output must not drown. */
	if (null_fd < 0 || dup2(null_fd, STDOUT_FILENO) < 0)
		abort();
	close(null_fd);
	if (cg_screen_new(&scr, &err) != 0)
		abort();
	srv.g = &cli;
	pthread_mutex_init(&srv.lock, NULL);
	pthread_cond_init(&srv.idle, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;

	if (!scr)
		once();
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	if (!memmem(data, size, "tools/call", 10))
		handle(&srv, s, size);

	/* The hook only ever splits a JSON string, which cannot hold a NUL
	 * (jansson refuses \u0000 without JSON_ALLOW_NUL). */
	json_t *pl = strlen(s) == size ? split_command(s) : NULL;
	if (pl) {
		size_t i, j;
		json_t *stage, *w;
		if (json_array_size(pl) == 0 || strchr(s, '\n'))
			abort();
		json_array_foreach(pl, i, stage)
		{
			if (!json_is_array(stage) || json_array_size(stage) == 0)
				abort();
			json_array_foreach(stage, j, w) if (!json_is_string(w)) abort();
		}
		json_decref(pl);
	}

	char host[256];
	if (url_host(s, host, sizeof(host)) == 0 && strlen(host) >= sizeof(host))
		abort();

	unsigned char *out = NULL;
	size_t out_len = 0;
	json_t *counts = json_object();
	bool q = false;
	if (cg_screen_run(scr, true, true, data, size, &out, &out_len, counts, &q) == 0) {
		if (out[out_len] != '\0')
			abort();
		free(out);
	}
	json_decref(counts);
	free(s);
	return 0;
}
