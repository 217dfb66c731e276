/* SPDX-License-Identifier: MIT */
/*
 * cli_common — the CLI's socket client and the helpers every subcommand
 * shares: one request, one response line, and the mapping from a response
 * to the documented exit codes (cli.h).
 *
 * Invariants:
 *  - The client MUST read at most CLIENT_MAX_RESPONSE bytes (every stream at
 *    its cap, base64-encoded, fits: cli.h) and fail rather than grow
 *    without bound on a misbehaving peer.
 *  - A deadline, when given, bounds the whole exchange (connect, write,
 *    read); every wait is a poll() with the time that is left.
 *  - The caller's request object is never modified (time/id are added to a
 *    copy).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

#define CLIENT_MAX_RESPONSE CG_CLI_MAX_RESPONSE

/* Milliseconds left until deadline_ns (monotonic), or -1 for "no deadline". */
static int ms_left(int64_t deadline_ns)
{
	if (deadline_ns == 0)
		return -1;
	int64_t left = deadline_ns - cg_now_mono_ns();
	if (left <= 0)
		return 0;
	int64_t ms = (left + 999999) / 1000000;
	return ms > 1000000000 ? 1000000000 : (int)ms;
}

/* Wait for events on fd until the deadline. 0 ready, -1 with errno (ETIMEDOUT). */
static int wait_fd(int fd, short events, int64_t deadline_ns)
{
	struct pollfd p = { .fd = fd, .events = events };
	int rc = poll(&p, 1, ms_left(deadline_ns));
	if (rc == 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	return rc < 0 ? -1 : 0;
}

/* "<what> <subject>: <strerror>" into err, when the caller wants it. */
static void set_err(char *err, size_t err_len, const char *what, const char *subject, int e)
{
	if (err && err_len)
		snprintf(err, err_len, "%s%s: %s", what, subject, strerror(e));
}

/* A copy of request with "time" and "id" filled in when absent. */
static json_t *complete_request(json_t *request)
{
	json_t *req = json_copy(request);
	if (!req)
		return NULL;
	if (!json_object_get(req, "time")) {
		char ts[40];
		cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
		json_object_set_new(req, "time", json_string(ts));
	}
	if (!json_object_get(req, "id")) {
		char id[40];
		if (cg_uuid4(id, sizeof(id)) != 0) {
			json_decref(req);
			return NULL;
		}
		json_object_set_new(req, "id", json_string(id));
	}
	return req;
}

int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len)
{
	int ret = -1, fd = -1, saved = 0;
	char *line = NULL, *buf = NULL;
	size_t len = 0, have = 0, alloc = 0;
	int64_t deadline = timeout_ms > 0 ? cg_now_mono_ns() + timeout_ms * 1000000 : 0;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	*response = NULL;
	if (strlen(socket_path) >= sizeof(sa.sun_path)) {
		saved = ENAMETOOLONG;
		set_err(err, err_len, "socket path ", socket_path, saved);
		goto fail;
	}
	memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
	json_t *req = complete_request(request);
	if (req)
		line = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!line) {
		saved = ENOMEM;
		set_err(err, err_len, "cannot encode the request", "", saved);
		goto fail;
	}
	len = strlen(line);
	char *nl = realloc(line, len + 2);
	if (!nl) {
		saved = ENOMEM;
		set_err(err, err_len, "cannot encode the request", "", saved);
		goto free_line;
	}
	line = nl;
	line[len++] = '\n';
	line[len] = '\0';

	/*
	 * Non-blocking from the start, so the deadline covers connect too: a
	 * Unix socket whose listen queue is full answers EAGAIN, retried until
	 * the deadline rather than blocking without limit (a hook must time out
	 * and block, not hang).
	 */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int crc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (crc < 0 && fd >= 0 && (errno == EAGAIN || errno == EINTR) &&
	       ms_left(deadline) != 0) {
		(void)poll(NULL, 0, 10);
		crc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	if (crc < 0) {
		saved = errno == EAGAIN ? ETIMEDOUT : errno;
		set_err(err, err_len, "cannot connect to ", socket_path, saved);
		goto close_fd;
	}
	/*
	 * Send the line. A daemon at its connection cap answers "busy" and
	 * closes without reading, so EPIPE here is not fatal: the answer may
	 * already be waiting to be read.
	 */
	for (size_t off = 0; off < len;) {
		ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wait_fd(fd, POLLOUT, deadline) < 0) {
				saved = errno;
				set_err(err, err_len, "sending to ", socket_path, saved);
				goto close_fd;
			}
			continue;
		}
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			break;
		saved = errno;
		set_err(err, err_len, "sending to ", socket_path, saved);
		goto close_fd;
	}
	for (;;) {
		if (have == alloc) {
			if (alloc >= CLIENT_MAX_RESPONSE) {
				saved = EMSGSIZE;
				set_err(err, err_len, "response too large from ", socket_path,
					saved);
				goto free_buf;
			}
			size_t na = alloc ? alloc * 2 : 65536;
			if (na > CLIENT_MAX_RESPONSE)
				na = CLIENT_MAX_RESPONSE;
			char *nb = realloc(buf, na);
			if (!nb) {
				saved = ENOMEM;
				set_err(err, err_len, "reading from ", socket_path, saved);
				goto free_buf;
			}
			buf = nb;
			alloc = na;
		}
		ssize_t n = recv(fd, buf + have, alloc - have, 0);
		if (n > 0) {
			have += (size_t)n;
			if (memchr(buf + have - (size_t)n, '\n', (size_t)n))
				break;
			continue;
		}
		if (n == 0)
			break;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (wait_fd(fd, POLLIN, deadline) < 0) {
				saved = errno;
				set_err(err, err_len, "waiting for a response from ", socket_path,
					saved);
				goto free_buf;
			}
			continue;
		}
		saved = errno;
		set_err(err, err_len, "reading from ", socket_path, saved);
		goto free_buf;
	}
	char *end = have ? memchr(buf, '\n', have) : NULL;
	if (!end) {
		saved = EPROTO;
		if (err && err_len)
			snprintf(err, err_len, "%s closed the connection without a response line",
				 socket_path);
		goto free_buf;
	}
	json_error_t jerr;
	*response = json_loadb(buf, (size_t)(end - buf), 0, &jerr);
	if (!json_is_object(*response)) {
		json_decref(*response);
		*response = NULL;
		saved = EPROTO;
		if (err && err_len)
			snprintf(err, err_len, "%s sent a response that is not a JSON object: %s",
				 socket_path, jerr.text);
		goto free_buf;
	}
	ret = 0;
free_buf:
	free(buf);
close_fd:
	if (fd >= 0)
		close(fd);
free_line:
	free(line);
fail:
	if (ret < 0)
		errno = saved;
	return ret;
}

int cg_client_exit_code(const json_t *response)
{
	const char *status = json_string_value(json_object_get(response, "status"));
	const char *type =
	    json_string_value(json_object_get(json_object_get(response, "reply"), "type"));
	/* The deadline statuses first: a command deadline is an E with status timeout. */
	if (status && strcmp(status, "timeout") == 0)
		return CG_EXIT_TIMEOUT;
	if (type && type[0] && !type[1]) {
		switch (type[0]) {
		case 'I':
			return CG_EXIT_INVALID;
		case 'D':
			return CG_EXIT_DENIED;
		case 'E':
			return CG_EXIT_ERROR;
		case 'S':
			return CG_EXIT_OK;
		default:
			break;
		}
	}
	if (status && strcmp(status, "denied") == 0)
		return CG_EXIT_DENIED;
	if (status && strcmp(status, "ok") == 0)
		return CG_EXIT_OK;
	return CG_EXIT_ERROR;
}

json_t *cg_cli_pipeline(int argc, char **argv)
{
	json_t *pipe = json_array();
	json_t *stage = json_array();
	if (!pipe || !stage)
		goto fail;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "|") == 0) {
			if (json_array_size(stage) == 0)
				goto fail;
			json_array_append_new(pipe, stage);
			stage = json_array();
			if (!stage)
				goto fail;
			continue;
		}
		if (json_array_append_new(stage, json_string(argv[i])) < 0)
			goto fail; /* not UTF-8: jansson refuses it */
	}
	if (json_array_size(stage) == 0)
		goto fail;
	json_array_append_new(pipe, stage);
	return pipe;
fail:
	json_decref(stage);
	json_decref(pipe);
	return NULL;
}

/*
 * One JSON value as text, never as JSON: a string as it is (control
 * characters replaced), an array's items separated by spaces, an object as
 * "key value; key value" ("(key value, …)" when nested), so that
 * {"read":["/"],"net":"none"} reads "read /; net none".
 */
static void print_value(FILE *f, json_t *v, int depth)
{
	const char *k;
	json_t *x;
	size_t i;
	if (json_is_string(v)) {
		for (const char *p = json_string_value(v); *p; p++)
			fputc((unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p, f);
	} else if (json_is_integer(v)) {
		fprintf(f, "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		fprintf(f, "%g", json_real_value(v));
	} else if (json_is_boolean(v)) {
		fputs(json_is_true(v) ? "yes" : "no", f);
	} else if (json_is_array(v)) {
		if (json_array_size(v) == 0)
			fputs("nothing", f);
		json_array_foreach(v, i, x)
		{
			if (i)
				fputc(' ', f);
			print_value(f, x, depth + 1);
		}
	} else if (json_is_object(v)) {
		bool first = true;
		if (depth)
			fputc('(', f);
		json_object_foreach(v, k, x)
		{
			fprintf(f, "%s%s ", first ? "" : depth ? ", " : "; ", k);
			print_value(f, x, depth + 1);
			first = false;
		}
		if (depth)
			fputc(')', f);
	} else {
		fputc('-', f);
	}
}

void cg_cli_print_value(FILE *f, json_t *v)
{
	print_value(f, v, 0);
}

/* s on f with control characters replaced: a reply carries the caller's text. */
static void put_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
	}
}

int cg_cli_print_refusal(const char *sub, const json_t *response)
{
	const json_t *r = json_object_get(response, "reply");
	const char *code = json_string_value(json_object_get(r, "code"));
	const char *msg = json_string_value(json_object_get(r, "message"));
	const char *trace = json_string_value(json_object_get(r, "trace_id"));
	const char *status = json_string_value(json_object_get(response, "status"));

	if (!msg)
		msg = json_string_value(json_object_get(response, "message"));
	if (!code)
		code = status ? status : "no reply code";
	fprintf(stderr, "callgate %s: ", sub);
	put_text(stderr, code);
	fputs(": ", stderr);
	put_text(stderr, msg ? msg : "the daemon gave no message");
	fputs(" (trace ", stderr);
	put_text(stderr, trace ? trace : "-");
	fputs(")\n", stderr);
	return cg_client_exit_code(response);
}

int cg_cli_state_dir_check(const char *sub, const char *state_dir, const char *from)
{
	struct stat st;
	char journal[4200];
	const char *hint = "Give the daemon's state directory with --state-dir DIR or "
			   "$CALLGATE_STATE_DIR.";

	if (!from)
		from = "--state-dir";
	int rc = stat(state_dir, &st);
	if (rc != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"callgate %s: no state directory to read: looked for %s (from %s), which "
			"%s. %s\n",
			sub, state_dir, from,
			rc == 0		  ? "is not a directory"
			: errno == ENOENT ? "does not exist"
					  : "cannot be read",
			hint);
		return -1;
	}
	(void)snprintf(journal, sizeof(journal), "%s/journal", state_dir);
	rc = stat(journal, &st);
	if (rc != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"callgate %s: no evidence journal to read: looked for %s in the state "
			"directory %s (from %s), which %s; is it the directory callgated was "
			"started with? %s\n",
			sub, journal, state_dir, from,
			rc == 0		  ? "is not a directory"
			: errno == ENOENT ? "does not have it"
					  : "cannot be read",
			hint);
		return -1;
	}
	return 0;
}
