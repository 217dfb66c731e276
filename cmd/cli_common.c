/* SPDX-License-Identifier: MIT */
/*
 * cli_common — the CLI's client and the helpers every subcommand shares:
 * one request, one response line, and the mapping from a response to the
 * documented exit codes (cli.h). A request whose "host" names another
 * machine goes to that machine's callgated over ssh, through `callgate
 * connect` there (docs/fleet.md); run, gate, ping and the MCP server all
 * send through cg_client_call_wait, so they route alike.
 *
 * Invariants:
 *  - The client MUST read at most CLIENT_MAX_RESPONSE bytes (every stream at
 *    its cap, base64-encoded, fits: cli.h) and fail rather than grow
 *    without bound on a misbehaving peer.
 *  - A deadline, when given, bounds the whole exchange (connect, write,
 *    read); every wait is a poll() with the time that is left.
 *  - The caller's request object is never modified (time/id are added to a
 *    copy).
 *  - A host name and a remote socket path reach ssh's argv and the remote
 *    shell only when they are plain words that cannot start an option;
 *    ssh runs with BatchMode=yes unless the user says otherwise, so it can
 *    never stop to prompt on a stream that carries the protocol.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "approval.h"
#include "cli.h"
#include "confine.h"
#include "reply.h"
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

/*
 * "<what> <subject>: <strerror>" into err, when the caller wants it. The
 * reentrant strerror: the MCP server calls from several threads.
 */
static void set_err(char *err, size_t err_len, const char *what, const char *subject, int e)
{
	char b[128];
	if (err && err_len)
		snprintf(err, err_len, "%s%s: %s", what, subject, strerror_r(e, b, sizeof(b)));
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

/* ---- where a call goes: this host's socket, or another host's over ssh ---------- */

/* Set once by main (cg_client_remote_setup) before any call; read-only after. */
static struct {
	const char *ssh;	 /* the ssh command: words separated by spaces */
	const char *const *opts; /* --ssh-option values, each passed as -o VALUE */
	size_t n_opts;
	const char *remote_socket; /* the agent socket on the remote host */
} remote = { "ssh", NULL, 0, CG_DEFAULT_SOCKET };

void cg_client_remote_setup(const struct cg_cli *g)
{
	const char *ssh = getenv("CALLGATE_SSH");
	remote.ssh = ssh && *ssh ? ssh : "ssh";
	remote.opts = g->ssh_opts;
	remote.n_opts = g->n_ssh_opts;
	remote.remote_socket = g->remote_socket ? g->remote_socket : CG_DEFAULT_SOCKET;
}

bool cg_client_host_is_remote(const char *host)
{
	char me[256];
	if (!host || !*host || strcmp(host, "localhost") == 0)
		return false;
	if (gethostname(me, sizeof(me) - 1) == 0) {
		me[sizeof(me) - 1] = '\0';
		size_t n = strcspn(me, ".");
		if (strcmp(host, me) == 0 || (strlen(host) == n && strncmp(host, me, n) == 0))
			return false;
	}
	return true;
}

/*
 * A host name or a remote socket path reaches ssh's command line and the
 * remote shell: only plain characters, and never a leading '-' (which ssh
 * would take for an option: CVE-2017-1000117-style option injection).
 */
static bool plain_word(const char *s, const char *extra)
{
	if (!s || !*s || s[0] == '-' || strlen(s) > 255)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr("._-", *p) || strchr(extra, *p)))
			return false;
	return true;
}

/* One exchange's two directions: a socket (both the same fd) or ssh's pipes. */
struct chan {
	int wfd, rfd; /* write the request to wfd, read the response from rfd */
	pid_t pid;    /* the ssh process, or -1 */
	const char *peer;
	bool is_socket;
	int status; /* ssh's wait status once it ended (-1: killed by us, or unknown) */
};

/*
 * Close both directions. ssh, when there is one, is given a moment to end
 * by itself after a whole exchange (graceful), and is ended at once after a
 * failure or a cancel: closing its session closes the remote `callgate
 * connect`'s output, which then hangs up on the daemon, which cancels the
 * call as it would for a local client that went away.
 */
static void chan_close(struct chan *c, bool graceful)
{
	if (c->wfd >= 0 && c->wfd != c->rfd)
		close(c->wfd);
	if (c->rfd >= 0)
		close(c->rfd);
	c->wfd = c->rfd = -1;
	if (c->pid <= 0)
		return;
	for (int i = 0; graceful && i < 200; i++) {
		if (waitpid(c->pid, &c->status, WNOHANG) == c->pid) {
			c->pid = -1;
			return;
		}
		(void)poll(NULL, 0, 10);
	}
	(void)kill(c->pid, SIGTERM);
	while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
		;
	c->status = -1;
	c->pid = -1;
}

int cg_cli_peer_check(int fd, const char *path, char *err, size_t err_len)
{
	struct ucred cred = { .uid = (uid_t)-1 };
	socklen_t cl = sizeof(cred);
	uid_t me = geteuid();
	if (me == 0 || (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 &&
			(cred.uid == 0 || cred.uid == me)))
		return 0;
	if (err && err_len)
		(void)snprintf(
		    err, err_len,
		    "%s is served by uid %u, neither root nor you: not sending it a call", path,
		    (unsigned)cred.uid);
	return -1;
}

/*
 * Connect to the local socket. Non-blocking from the start, so the deadline
 * covers connect too: a Unix socket whose listen queue is full answers
 * EAGAIN, retried until the deadline rather than blocking without limit (a
 * hook must time out and block, not hang). 0, or -1 with errno and err.
 */
static int chan_open_local(struct chan *c, const char *path, int64_t deadline, char *err,
			   size_t err_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		set_err(err, err_len, "socket path ", path, ENAMETOOLONG);
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int crc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	while (crc < 0 && fd >= 0 && (errno == EAGAIN || errno == EINTR) &&
	       ms_left(deadline) != 0) {
		(void)poll(NULL, 0, 10);
		crc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	}
	if (crc < 0) {
		int e = errno == EAGAIN ? ETIMEDOUT : errno;
		struct stat st;
		/* A directory or a file there: said so, not "refused" (ux-s42e L3). */
		if ((e == ECONNREFUSED || e == ENOTSOCK) && stat(path, &st) == 0 &&
		    !S_ISSOCK(st.st_mode))
			set_err(err, err_len,
				S_ISDIR(st.st_mode) ? "not a socket but a directory: "
						    : "not a socket but a file: ",
				path, ENOTSOCK);
		else
			set_err(err, err_len, "cannot connect to ", path, e);
		if (fd >= 0)
			close(fd);
		errno = e;
		return -1;
	}
	if (cg_cli_peer_check(fd, path, err, err_len) != 0) {
		close(fd);
		errno = EPERM;
		return -1;
	}
	*c = (struct chan){ fd, fd, -1, path, true, -1 };
	return 0;
}

/*
 * The argv of the ssh that reaches host's callgated: the CALLGATE_SSH
 * words, each --ssh-option as -o VALUE (first: ssh keeps the first value it
 * is given for an option, so the user's win over ours), BatchMode=yes (never
 * prompt: stdin is the protocol), the host, and the remote command.
 * Returns a malloc'd array (strings borrowed from words and remote), or NULL.
 */
static char **ssh_argv(char *words, const char *host)
{
	size_t n = 0, cap = 16 + 2 * remote.n_opts;
	char **v = calloc(cap, sizeof(*v)), *save = NULL;
	if (!v)
		return NULL;
	for (char *w = strtok_r(words, " \t", &save); w && n + 1 < cap - 12 - 2 * remote.n_opts;
	     w = strtok_r(NULL, " \t", &save))
		v[n++] = w;
	for (size_t i = 0; i < remote.n_opts; i++) {
		v[n++] = "-o";
		v[n++] = (char *)(uintptr_t)remote.opts[i];
	}
	const char *tail[] = { "-o",	   "BatchMode=yes", host,	"--",
			       "callgate", "connect",	    "--socket", remote.remote_socket };
	for (size_t i = 0; i < sizeof(tail) / sizeof(tail[0]); i++)
		v[n++] = (char *)(uintptr_t)tail[i];
	v[n] = NULL;
	return v;
}

/*
 * Start ssh with its stdin and stdout on two pipes; its stderr is ours (its
 * own errors reach the user). 0, or -1 with errno and err.
 */
static int chan_open_remote(struct chan *c, const char *host, char *err, size_t err_len)
{
	if (!plain_word(host, "@:") || !plain_word(remote.remote_socket, "/")) {
		snprintf(err, err_len,
			 "host '%.100s' or remote socket '%.100s': only letters, digits, '.', "
			 "'_', '-' (and '@' in a host, '/' in a path), not starting with '-'",
			 host, remote.remote_socket);
		errno = EINVAL;
		return -1;
	}
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, rc = -1, e = 0;
	char *words = strdup(remote.ssh);
	char **argv = words ? ssh_argv(words, host) : NULL;
	posix_spawn_file_actions_t fa;
	bool fa_ok = false;
	if (!argv || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    posix_spawn_file_actions_init(&fa) != 0) {
		e = errno ? errno : ENOMEM;
		goto fail;
	}
	fa_ok = true;
	pid_t pid = -1;
	if ((e = posix_spawn_file_actions_adddup2(&fa, in[0], 0)) ||
	    (e = posix_spawn_file_actions_adddup2(&fa, out[1], 1)) ||
	    (e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ)))
		goto fail;
	/* A dead ssh must be EPIPE on write, not a CLI killed by SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);
	close(in[0]);
	close(out[1]);
	in[0] = out[1] = -1;
	(void)fcntl(in[1], F_SETFL, O_NONBLOCK);
	(void)fcntl(out[0], F_SETFL, O_NONBLOCK);
	*c = (struct chan){ in[1], out[0], pid, host, false, -1 };
	in[1] = out[0] = -1;
	rc = 0;
fail:
	if (rc < 0)
		snprintf(err, err_len, "cannot start %s to reach %s: %s", argv ? argv[0] : "ssh",
			 host, strerror(e));
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (out[i] >= 0)
			close(out[i]);
	}
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	free(argv);
	free(words);
	errno = e;
	return rc;
}

/*
 * Send the whole line. A daemon at its connection cap answers "busy" and
 * closes without reading, so EPIPE here is not fatal: the answer may
 * already be waiting to be read. Over ssh the write side is then closed
 * (the remote `callgate connect` half-closes the daemon's socket, which the
 * daemon reads as "request complete", not as withdrawal). 0 or -1.
 */
static int chan_send(struct chan *c, const char *line, size_t len, int64_t deadline, char *err,
		     size_t err_len)
{
	for (size_t off = 0; off < len;) {
		ssize_t n = c->is_socket ? send(c->wfd, line + off, len - off, MSG_NOSIGNAL)
					 : write(c->wfd, line + off, len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wait_fd(c->wfd, POLLOUT, deadline) < 0)
				goto fail;
			continue;
		}
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			break;
		goto fail;
	}
	if (!c->is_socket) {
		close(c->wfd);
		c->wfd = -1;
	}
	return 0;
fail:;
	int e = errno;
	set_err(err, err_len, "sending to ", c->peer, e);
	errno = e;
	return -1;
}

/*
 * Wait until rfd is readable: 0 ready, 1 cancelled (w's cancel_fd became
 * readable), -1 with errno (ETIMEDOUT at the deadline). Calls w's tick
 * every tick_ms while it waits.
 */
static int chan_wait(const struct chan *c, int64_t deadline, const struct cg_client_wait *w)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = c->rfd, .events = POLLIN },
				       { .fd = w ? w->cancel_fd : -1, .events = POLLIN } };
		int left = ms_left(deadline), t = left;
		if (w && w->tick && w->tick_ms > 0 && (t < 0 || t > w->tick_ms))
			t = w->tick_ms;
		if (left == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		int n = poll(p, w && w->cancel_fd >= 0 ? 2 : 1, t);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n > 0 && (p[1].revents & (POLLIN | POLLHUP)))
			return 1;
		if (n > 0)
			return 0;
		if (w && w->tick)
			w->tick(w->tick_arg);
	}
}

/*
 * Read until the first newline or EOF, at most CLIENT_MAX_RESPONSE bytes,
 * into *buf (malloc'd; caller frees) and *have. 0, 1 cancelled, or -1 with
 * errno and err.
 */
static int chan_recv(struct chan *c, int64_t deadline, const struct cg_client_wait *w, char **buf,
		     size_t *have, char *err, size_t err_len)
{
	size_t alloc = 0;
	*buf = NULL;
	*have = 0;
	for (;;) {
		if (*have == alloc) {
			size_t na = alloc ? alloc * 2 : 65536;
			if (alloc >= CLIENT_MAX_RESPONSE) {
				set_err(err, err_len, "response too large from ", c->peer,
					EMSGSIZE);
				errno = EMSGSIZE;
				return -1;
			}
			char *nb =
			    realloc(*buf, na > CLIENT_MAX_RESPONSE ? CLIENT_MAX_RESPONSE : na);
			if (!nb) {
				set_err(err, err_len, "reading from ", c->peer, ENOMEM);
				errno = ENOMEM;
				return -1;
			}
			*buf = nb;
			alloc = na > CLIENT_MAX_RESPONSE ? CLIENT_MAX_RESPONSE : na;
		}
		ssize_t n = read(c->rfd, *buf + *have, alloc - *have);
		if (n > 0) {
			*have += (size_t)n;
			if (memchr(*buf + *have - (size_t)n, '\n', (size_t)n))
				return 0;
			continue;
		}
		if (n == 0)
			return 0;
		if (errno == EINTR)
			continue;
		int rc = errno == EAGAIN || errno == EWOULDBLOCK ? chan_wait(c, deadline, w) : -1;
		if (rc == 0)
			continue;
		if (rc < 0) {
			int e = errno;
			set_err(err, err_len, "waiting for a response from ", c->peer, e);
			errno = e;
		}
		return rc;
	}
}

/* The request as one line with its newline (malloc'd), or NULL with err. */
static char *request_line(json_t *request, size_t *len, char *err, size_t err_len)
{
	json_t *req = complete_request(request);
	char *line = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	char *nl = line ? realloc(line, strlen(line) + 2) : NULL;
	if (!nl) {
		free(line);
		set_err(err, err_len, "cannot encode the request", "", ENOMEM);
		errno = ENOMEM;
		return NULL;
	}
	*len = strlen(nl);
	nl[(*len)++] = '\n';
	nl[*len] = '\0';
	return nl;
}

/* The one response line of buf[0..have) as a JSON object, or NULL with EPROTO and err. */
static json_t *parse_response(const struct chan *c, const char *buf, size_t have, char *err,
			      size_t err_len)
{
	const char *end = have ? memchr(buf, '\n', have) : NULL;
	json_error_t jerr;
	json_t *r =
	    end ? json_loadb(buf, (size_t)(end - buf), JSON_REJECT_DUPLICATES, &jerr) : NULL;
	if (!json_is_object(r) && err && err_len) {
		if (!end)
			snprintf(err, err_len, "%s closed the connection without a response line%s",
				 c->peer,
				 c->is_socket ? ""
					      : " (ssh's own message, if any, went to stderr)");
		else
			snprintf(err, err_len, "%s sent a response that is not a JSON object: %s",
				 c->peer, jerr.text);
	}
	if (!json_is_object(r)) {
		json_decref(r);
		errno = EPROTO;
		return NULL;
	}
	return r;
}

int cg_client_call_wait(const char *socket_path, json_t *request, int64_t timeout_ms,
			const struct cg_client_wait *w, json_t **response, char *err,
			size_t err_len)
{
	int64_t deadline = timeout_ms > 0 ? cg_now_mono_ns() + timeout_ms * 1000000 : 0;
	const char *host = json_string_value(json_object_get(request, "host"));
	struct chan c = { -1, -1, -1, socket_path, true, -1 };
	char *buf = NULL;
	size_t len = 0, have = 0;
	int rc = -1, e = 0;
	*response = NULL;
	char *line = request_line(request, &len, err, err_len);
	if (!line)
		return -1;
	if (cg_client_host_is_remote(host)
		? chan_open_remote(&c, host, err, err_len) == 0
		: chan_open_local(&c, socket_path, deadline, err, err_len) == 0) {
		rc = chan_send(&c, line, len, deadline, err, err_len);
		if (rc == 0)
			rc = chan_recv(&c, deadline, w, &buf, &have, err, err_len);
		if (rc == 0 && !(*response = parse_response(&c, buf, have, err, err_len)))
			rc = -1;
	}
	e = errno;
	chan_close(&c, rc == 0 || (rc < 0 && !c.is_socket && have == 0));
	if (rc < 0 && !c.is_socket && have == 0 && e == EPROTO) {
		/* Not a word back: ssh or the remote end could not reach a daemon. */
		char how[48] = "did not end in time";
		if (c.status >= 0 && WIFEXITED(c.status))
			snprintf(how, sizeof(how), "exited with %d", WEXITSTATUS(c.status));
		else if (c.status >= 0)
			snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(c.status));
		snprintf(
		    err, err_len,
		    "no answer from %s over ssh (ssh %s; its own message, if any, went to stderr)",
		    host, how);
		e = EHOSTUNREACH;
	}
	free(buf);
	free(line);
	errno = e;
	return rc;
}

int cg_client_call(const char *socket_path, json_t *request, int64_t timeout_ms, json_t **response,
		   char *err, size_t err_len)
{
	/* No cancel fd: never 1. */
	return cg_client_call_wait(socket_path, request, timeout_ms, NULL, response, err, err_len);
}

/* The admin socket's refusals of who the peer is: not allowed, rather than a failure. */
static bool refused_peer(const char *code)
{
	static const enum cg_reply_id ids[] = { CG_R_ADMIN_PEER_REFUSED, CG_R_ADMIN_PEER_IN_CALL,
						CG_R_APPROVER_NOT_ALLOWED };
	for (size_t i = 0; code && i < sizeof(ids) / sizeof(ids[0]); i++)
		if (strcmp(code, cg_reply_registry[ids[i]].code) == 0)
			return true;
	return false;
}

int cg_client_exit_code(const json_t *response)
{
	const char *status = json_string_value(json_object_get(response, "status"));
	const json_t *reply = json_object_get(response, "reply");
	const char *type = json_string_value(json_object_get(reply, "type"));
	/* The deadline statuses first: a command deadline is an E with status timeout. */
	if (status && strcmp(status, "timeout") == 0)
		return CG_EXIT_TIMEOUT;
	if (refused_peer(json_string_value(json_object_get(reply, "code"))))
		return CG_EXIT_DENIED;
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
 * $CALLGATE_PRIVILEGED: the default for --privileged/--no-privileged, so a
 * user or a script says once that its calls run as itself (ux-s39 M1: every
 * first command was refused). Unset or empty: the protocol's default. A
 * value it cannot read is a usage error, never a guess either way.
 */
int cg_cli_privileged_from_env(const char *sub, json_t *req)
{
	const char *v = getenv("CALLGATE_PRIVILEGED");
	if (!v || !*v)
		return 0;
	static const char *const no[] = { "0", "no", "false" }, *const yes[] = { "1", "yes",
										 "true" };
	for (size_t k = 0; k < 3; k++) {
		if (strcasecmp(v, no[k]) == 0 || strcasecmp(v, yes[k]) == 0) {
			json_object_set_new(req, "privileged",
					    json_boolean(strcasecmp(v, yes[k]) == 0));
			return 0;
		}
	}
	fprintf(stderr,
		"callgate %s: CALLGATE_PRIVILEGED must be 0, no or false (run as yourself) or "
		"1, yes or true (root, after a human's approval), got '%.40s'\n",
		sub, v);
	return -1;
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
			/*
			 * A constraint set's empty exec is not "nothing": the default
			 * program directories apply (confine.h), as the approver's
			 * screen says too.
			 */
			if (strcmp(k, "exec") == 0 && cg_confine_exec_defaulted(v)) {
				fputs("the default program directories (", f);
				for (size_t d = 0, m = 0; d < CG_ARRAY_LEN(cg_exec_default); d++)
					if (cg_exec_default[d])
						fprintf(f, "%s%s", m++ ? " " : "",
							cg_exec_default[d]);
				fputc(')', f);
			} else {
				print_value(f, x, depth + 1);
			}
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

/* Whether every stage is bound by every set: then a line per set says it all. */
static bool sets_bind_all(size_t n_sets, const json_t *stage_sets)
{
	size_t i;
	const json_t *b;
	json_array_foreach(stage_sets, i, b)
	{
		if (json_array_size(b) != n_sets)
			return false;
	}
	return true;
}

/*
 * One constraint set, and when it writes somewhere and says nothing of git,
 * that .git stays read-only there (ux-s42c L2: "protect .git/hooks
 * .git/config" read as if the rest of .git were writable).
 */
static void print_set(FILE *f, json_t *c)
{
	cg_cli_print_value(f, c);
	if (json_array_size(json_object_get(c, "write")) > 0 && !json_object_get(c, "git"))
		fputs("; git read-only", f);
}

static void print_set_list(FILE *f, const char *pad, json_t *cons, const json_t *which)
{
	size_t i;
	json_t *k;
	json_array_foreach(which, i, k)
	{
		if (i)
			fprintf(f, "%s  and ", pad);
		json_t *c = json_array_get(cons, (size_t)json_integer_value(k));
		if (c)
			print_set(f, c);
		else
			fputc('?', f);
		fputc('\n', f);
	}
	if (json_array_size(which) == 0)
		fputs("none: this stage is not confined by the policy\n", f);
}

void cg_cli_print_constraints(FILE *f, const char *pad, json_t *cons, const json_t *stage_sets,
			      const json_t *names, bool privileged)
{
	size_t n = json_array_size(cons), i;
	json_t *c;
	if (n == 0) {
		fputs(" none\n", f);
		return;
	}
	if (!json_is_array(stage_sets) || sets_bind_all(n, stage_sets)) {
		json_array_foreach(cons, i, c)
		{
			fprintf(f, "%s", i ? pad : " ");
			if (i)
				fputs("and ", f);
			print_set(f, c);
			fputc('\n', f);
		}
	} else {
		fputs(" by stage (a stage's sets all apply to it)\n", f);
		const json_t *b;
		json_array_foreach(stage_sets, i, b)
		{
			const char *name = json_string_value(json_array_get(names, i));
			fprintf(f, "%s stage %zu%s", pad, i + 1, name ? " (" : ":");
			if (name) {
				put_text(f, name);
				fputs("):", f);
			}
			fputc(' ', f);
			print_set_list(f, pad, cons, b);
		}
	}
	bool view_terms = false;
	json_array_foreach(cons, i, c)
	{
		static const char *const view_only[] = { "hide", "protect", "tmp", "git",
							 "scratch" };
		for (size_t t = 0; t < CG_ARRAY_LEN(view_only); t++)
			view_terms |= json_object_get(c, view_only[t]) != NULL;
	}
	if (privileged && view_terms)
		fprintf(f,
			"%s (privileged: no view, so hide, protect, tmp, git and scratch do not "
			"apply)\n",
			pad);
}

/* A hint's text, formatted (malloc'd), or NULL when there is no memory. */
static char *hint_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *hint_text(const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

/*
 * Connections the egress proxy refused, or could not make, when a stage
 * failed: the command says only what it met (npm's 403, curl's 502), not
 * whose refusal it was (ux-s42c M). The first one's own reason is given
 * (ux-s43c M7: a host on the rule's list refused for the address it
 * resolved to read like a host off the list), with the call's trace. The
 * hint, or NULL.
 */
static char *refused_connections_hint(const json_t *reply, const json_t *stages)
{
	const json_t *data = json_object_get(reply, "data");
	size_t i;
	const json_t *st, *c;
	bool failed = false;
	json_array_foreach(stages, i, st) failed |=
	    json_integer_value(json_object_get(st, "exit_code")) != 0;
	size_t n_refused = 0, n_failed = 0;
	const json_t *first = NULL;
	json_array_foreach(json_object_get(data, "connections"), i, c)
	{
		const char *code = json_string_value(json_object_get(c, "code"));
		if (json_is_true(json_object_get(c, "allowed")) || !code)
			continue;
		bool refused = strstr(code, "-D-") != NULL;
		n_refused += refused;
		n_failed += !refused;
		if (!first ||
		    (refused && !strstr(json_string_value(json_object_get(first, "code")), "-D-")))
			first = c; /* a refusal before an upstream failure */
	}
	if (!failed || !first)
		return NULL;
	const char *w = json_string_value(json_object_get(first, "reason"));
	const char *d = json_string_value(json_object_get(first, "detail"));
	char *h = cg_sanitize_for_terminal(json_string_value(json_object_get(first, "host")));
	char *why = w ? cg_sanitize_for_terminal(w) : NULL;
	size_t wl = why ? strlen(why) : 0;
	if (wl && why[wl - 1] == '.')
		why[wl - 1] = '\0'; /* the sentence goes on */
	char *detail = d ? cg_sanitize_for_terminal(d) : NULL;
	const char *trace = json_string_value(json_object_get(reply, "trace_id"));
	size_t n = n_refused ? n_refused : n_failed;
	char *out = hint_text(
	    "callgate's egress proxy %s %zu connection%s of this call; the "
	    "first, to %.200s:%lld: %s%s%.400s%s%.200s%s; `callgate verdict %s` "
	    "shows each",
	    n_refused ? "refused" : "could not make", n, n == 1 ? "" : "s", h ? h : "?",
	    (long long)json_integer_value(json_object_get(first, "port")),
	    json_string_value(json_object_get(first, "code")), why ? ": " : "", why ? why : "",
	    detail ? " (" : "", detail ? detail : "", detail ? ")" : "", trace ? trace : "TRACE");
	free(detail);
	free(h);
	free(why);
	return out;
}

/*
 * git inside a call may start only git's own programs, so the repository's
 * hooks do not run, and git says a hook "was ignored because it's not set
 * as executable" whatever its mode (ux-s43c H1: a failing pre-commit hook
 * stopped the developer's commit and not the agent's). The commit is made
 * without them: said, whatever the exit code. The hint, or NULL.
 */
static char *ignored_hook_hint(const json_t *stages)
{
	static const char said[] = "hook was ignored because it's not set as executable";
	size_t i;
	const json_t *st;
	json_array_foreach(stages, i, st)
	{
		const char *b64 = json_string_value(json_object_get(st, "stderr"));
		size_t n = 0;
		unsigned char *p = b64 && *b64 ? cg_base64_decode(b64, strlen(b64), &n) : NULL;
		bool met = p && memmem(p, n, said, strlen(said)) != NULL;
		free(p);
		if (met)
			return hint_text(
			    "stage %zu's git did not run the repository's hook: inside a call git "
			    "may start only git's own programs (the rule's exec), whatever git "
			    "says "
			    "of the hook's mode, so what git did was done WITHOUT the hook (lint, "
			    "tests, secret scanning); run the hooks on the host before pushing "
			    "(this "
			    "hint reads the stage's own output, which the command chose)",
			    i + 1);
	}
	return NULL;
}

/*
 * A stage that failed with what a view's refusal reads like ("Read-only
 * file system", "Permission denied", "Operation not permitted") may have met
 * the view, not the file's own mode: say which rule confined it and how to
 * see its terms (ux-s38: confinement read like ordinary permission errors).
 * Only a hint: the words come from the command. Also the other hints a
 * failed stage's stderr points at: no network, a /tmp of its own, git's
 * config, a wrapper in front of git, no git identity.
 */
/*
 * A call whose command names a path under /tmp (outside its write trees)
 * while its /tmp is its own: what it wrote there is gone with the call
 * (s44c L5, ux-s43c L7: cp x /tmp/f and a venv made in /tmp succeeded and
 * vanished, unsaid). Only a hint: the words are the command's.
 */
static char *private_tmp_hint(const json_t *data, const json_t *pipeline)
{
	const json_t *view = json_object_get(json_object_get(data, "confinement"), "view");
	const char *tmp = json_string_value(json_object_get(view, "tmp"));
	size_t i, k, w;
	const json_t *stage, *word, *tree;
	if (!tmp || strcmp(tmp, "private") != 0)
		return NULL;
	json_array_foreach(pipeline, i, stage) json_array_foreach(stage, k, word)
	{
		const char *s = json_string_value(word);
		for (const char *at = s ? strstr(s, "/tmp") : NULL; at;
		     at = strstr(at + 1, "/tmp")) {
			if ((at > s && !strchr(" \t'\"=>:", at[-1])) ||
			    (at[4] && at[4] != '/' && !strchr(" \t'\";", at[4])))
				continue;
			bool inside = false;
			static const char *const kept[] = { "writable", "tmp_kept" };
			for (size_t l = 0; l < 2; l++)
				json_array_foreach(json_object_get(view, kept[l]), w, tree)
				{
					const char *t = json_string_value(tree);
					size_t tl = t ? strlen(t) : 0;
					inside |= tl > 4 && strncmp(at, t, tl) == 0 &&
						  (at[tl] == '/' || at[tl] == '\0' ||
						   strchr(" \t'\";", at[tl]));
				}
			if (!inside)
				return hint_text(
				    "stage %zu's command names /tmp, and this call's /tmp was its "
				    "own "
				    "(tmp: private): what it wrote there is gone now; write what "
				    "another call or you will need into the workspace",
				    i + 1);
		}
	}
	return NULL;
}

char *cg_cli_stage_hint(const json_t *resp, const json_t *pipeline)
{
	const json_t *stages = json_object_get(resp, "stages");
	static const char *const refused[] = { "Read-only file system", "Permission denied",
					       "Operation not permitted" };
	const json_t *data = json_object_get(json_object_get(resp, "reply"), "data");
	if (!json_object_get(data, "confinement"))
		return NULL;
	size_t i;
	const json_t *st;
	char *egress = refused_connections_hint(json_object_get(resp, "reply"), stages);
	if (egress)
		return egress;
	char *hook = ignored_hook_hint(stages);
	if (hook)
		return hook;
	json_array_foreach(stages, i, st)
	{
		const json_t *ec = json_object_get(st, "exit_code");
		const char *b64 = json_string_value(json_object_get(st, "stderr"));
		if (!json_is_integer(ec) || json_integer_value(ec) == 0 || !b64 || !*b64)
			continue;
		size_t n = 0;
		unsigned char *p = cg_base64_decode(b64, strlen(b64), &n);
		bool met = false;
		for (size_t r = 0; p && !met && r < CG_ARRAY_LEN(refused); r++)
			met = memmem(p, n, refused[r], strlen(refused[r])) != NULL;
		/* A host /tmp file the call cannot see: its /tmp is its own (ux-s39). */
		const json_t *view = json_object_get(json_object_get(data, "confinement"), "view");
		const char *tmp = json_string_value(json_object_get(view, "tmp"));
		static const char enoent[] = "No such file or directory";
		bool own_tmp = p && !met && tmp && strcmp(tmp, "private") == 0 &&
			       memmem(p, n, enoent, strlen(enoent)) && memmem(p, n, "/tmp/", 5);
		/*
		 * A name lookup or a connection that failed without a network
		 * (ux-s39 M4, ux-s41: pip retried for 8 s and nothing said why).
		 */
		static const char *const offline[] = {
			"Temporary failure in name resolution", "Name or service not known",
			"Could not resolve host", "Network is unreachable", "getaddrinfo",
			"EAI_AGAIN", "ENETUNREACH", "No address associated with hostname",
			/* pip's words when every index lookup failed (ux-s43c L1) */
			"(from versions: none)", "No matching distribution found"
		};
		const char *net = json_string_value(json_object_get(
		    json_object_get(json_object_get(data, "confinement"), "network"), "mode"));
		bool no_net = false;
		for (size_t r = 0; p && !met && !no_net && net && strcmp(net, "none") == 0 &&
				   r < CG_ARRAY_LEN(offline);
		     r++)
			no_net = memmem(p, n, offline[r], strlen(offline[r])) != NULL;
		static const char refused_c[] = "Connection refused";
		static const char refused_e[] = "ECONNREFUSED";
		bool own_loopback = !no_net && !met && p && net && strcmp(net, "none") == 0 &&
				    (memmem(p, n, refused_c, strlen(refused_c)) ||
				     memmem(p, n, refused_e, strlen(refused_e)));
		/* git without an identity: .git/config is read-only, -c denied (ux-s41 M5). */
		static const char ident[] = "Please tell me who you are";
		bool no_ident = p && memmem(p, n, ident, strlen(ident)) != NULL;
		if (no_ident) {
			free(p);
			return hint_text(
			    "stage %zu's git has no identity here, and no call may "
			    "set one (.git/config is read-only to calls, git -c is denied): the "
			    "developer sets it on the host (git config user.name, user.email), "
			    "or the call passes it in its env: GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, "
			    "GIT_COMMITTER_NAME and GIT_COMMITTER_EMAIL (callgate run --env "
			    "NAME=VALUE)",
			    i + 1);
		}
		/* git's own config and hooks: no grant or rule makes them a call's (ux-s39 L5). */
		bool git_own =
		    met && (memmem(p, n, ".git/config", 11) || memmem(p, n, ".git/hooks", 10));
		bool git_dir_hit = met && memmem(p, n, ".git/", 5);
		free(p);
		if (git_own) {
			return hint_text(
			    "stage %zu could not write the repository's own config "
			    "or hooks, which are read-only to every call (they name programs "
			    "the developer's git runs later): if git itself needs that change, it "
			    "is "
			    "the developer's to make by hand, after reading what it runs (this "
			    "hint "
			    "reads the stage's own output, which the command chose)",
			    i + 1);
		}
		const char *rule = json_string_value(json_object_get(data, "rule_id"));
		/*
		 * git behind a wrapper (timeout 60 git commit): the wrapper's terms
		 * bind it too, and under them .git is read-only (ux-s41 H2).
		 */
		const char *w0 = json_string_value(json_array_get(json_array_get(pipeline, i), 0));
		const char *wb = w0 && strrchr(w0, '/') ? strrchr(w0, '/') + 1 : w0;
		static const char *const wrappers[] = { "env",	  "timeout", "nice",   "nohup",
							"setsid", "ionice",  "stdbuf", "flock",
							"xargs",  "time" };
		bool wrapped_git = false;
		for (size_t w = 0; met && wb && !wrapped_git && w < CG_ARRAY_LEN(wrappers); w++)
			wrapped_git = strcmp(wb, wrappers[w]) == 0;
		wrapped_git = wrapped_git && git_dir_hit;
		if (wrapped_git) {
			return hint_text(
			    "stage %zu runs git behind %s, whose terms bind git "
			    "too, and under them .git is read-only: run git itself (git add, "
			    "git commit), without %s in front",
			    i + 1, wb, wb);
		}
		/* git inside a shell or an interpreter: their terms, .git read-only (ux-s42c). */
		static const char *const shells[] = { "sh",   "bash", "dash",	 "zsh",
						      "ksh",  "fish", "python3", "python",
						      "make", "node", "perl" };
		bool shell_git = false;
		for (size_t w = 0; git_dir_hit && wb && !shell_git && w < CG_ARRAY_LEN(shells); w++)
			shell_git = strcmp(wb, shells[w]) == 0;
		if (shell_git) {
			return hint_text(
			    "stage %zu runs git inside %s, whose terms bind it, and under them "
			    ".git is read-only: run git itself as a command of its own (git add, "
			    "git commit -m TEXT: a message of several lines is one argument)",
			    i + 1, wb);
		}
		if (git_dir_hit && wb && strcmp(wb, "git") == 0) {
			return hint_text(
			    "stage %zu's git met a read-only .git (rule %s): only the "
			    "subcommands that record work (add, commit, checkout, switch, "
			    "restore, reset, stash, branch, tag, merge, cherry-pick, revert, mv, "
			    "rm, rebase without -i/-x) may write it; worktree, submodule, gc and "
			    "an interactive rebase are the developer's to run",
			    i + 1, rule ? rule : "?");
		}
		/*
		 * A connection refused on a loopback of the call's own (ux-s43c M8:
		 * a server another call started, or the host's, is not there).
		 */
		if (own_loopback) {
			return hint_text(
			    "stage %zu ran with a network of its own (rule %s: net none), "
			    "whose loopback holds only what this call started: the host's "
			    "127.0.0.1 and a server another call started are not there "
			    "(start the server and its client in one call, or run the server "
			    "yourself and test it outside callgate)",
			    i + 1, rule ? rule : "?");
		}
		/*
		 * A project's pip (.venv/bin/pip, python -m pip in a venv) runs as a
		 * workspace program, never with a network; the system's pip told
		 * which interpreter to install for is package-fetch's, which a person
		 * or a grant can let through (s44c M3: the hint named only a policy
		 * change, which an agent cannot make).
		 */
		const char *w1 = json_string_value(json_array_get(json_array_get(pipeline, i), 1));
		const char *w2 = json_string_value(json_array_get(json_array_get(pipeline, i), 2));
		bool venv_pip = w0 && wb && strchr(w0, '/') &&
				(strncmp(wb, "pip", 3) == 0 ||
				 (strncmp(wb, "python", 6) == 0 && w1 && w2 &&
				  strcmp(w1, "-m") == 0 && strcmp(w2, "pip") == 0));
		if (no_net && venv_pip) {
			return hint_text(
			    "stage %zu ran without a network (rule %s: net none): a project's "
			    "own pip runs as a program of the workspace, never with one; the "
			    "system's pip, told which interpreter to install for, is the "
			    "package-fetch rule's, which a person or a grant can let reach the "
			    "package index: pip --python .venv/bin/python install NAME",
			    i + 1, rule ? rule : "?");
		}
		if (no_net) {
			return hint_text(
			    "stage %zu ran without a network (rule %s: net none): "
			    "no name resolves and no connection leaves the call; a rule with "
			    "net: {allow: [HOST, ...]} gives it the hosts it needs "
			    "(docs/egress.md)",
			    i + 1, rule ? rule : "?");
		}
		if (own_tmp) {
			return hint_text(
			    "stage %zu ran with a /tmp of its own (rule %s: tmp "
			    "private): the host's /tmp is not there; pass files through the "
			    "workspace",
			    i + 1, rule ? rule : "?");
		}
		if (!met)
			continue;
		return hint_text(
		    "stage %zu ran in a view of its own (rule %s): a refusal "
		    "above may be the view's, not the file's mode. `callgate gate "
		    "--no-privileged -- CMD` shows what the rule lets it read, write and "
		    "run; a policy change or a grant widens it",
		    i + 1, rule ? rule : "?");
	}
	return private_tmp_hint(data, pipeline);
}

char *cg_cli_gate_next(const json_t *ap)
{
	const json_t *gr = json_object_get(ap, "grant");
	json_int_t people = json_integer_value(json_object_get(ap, "approvers"));
	const json_t *no = json_object_get(ap, "refused");
	if (no) {
		char *code =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(no, "code")));
		char *msg =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(no, "message")));
		char *t = hint_text("it would be refused at once: %s: %s", code ? code : "?",
				    msg ? msg : "?");
		free(code);
		free(msg);
		return t;
	}
	if (gr) {
		const char *id = json_string_value(json_object_get(gr, "grant_id"));
		const char *until = json_string_value(json_object_get(gr, "expires"));
		long long left = (long long)json_integer_value(json_object_get(gr, "uses_left"));
		return hint_text("open grant %s would run it without asking (%lld use%s left, "
				 "until %s)",
				 id ? id : "?", left, left == 1 ? "" : "s", until ? until : "?");
	}
	if (json_is_true(json_object_get(ap, "enabled")))
		return hint_text(
		    "it would wait for %s (refused if unanswered in %lld s)%s",
		    people > 1 ? "several approvers" : "a person's approval",
		    (long long)(json_integer_value(json_object_get(ap, "timeout_ms")) / 1000),
		    people > 1 ? "; that many distinct approvers must say yes" : "");
	if (ap)
		return hint_text("it would be refused: approval is off on this daemon and no open "
				 "grant covers it");
	return NULL;
}

json_t *cg_cli_actions(const char *arg, char *why, size_t why_len)
{
	json_error_t je;
	const char *s = arg + strspn(arg, " \t\n");
	bool inline_json = *s == '[' || *s == '{';
	json_t *acts = inline_json	       ? json_loads(s, JSON_REJECT_DUPLICATES, &je)
		       : strcmp(arg, "-") == 0 ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &je)
					       : json_load_file(arg, JSON_REJECT_DUPLICATES, &je);
	if (json_is_object(acts) && json_is_array(json_object_get(acts, "actions"))) {
		json_t *inner = json_incref(json_object_get(acts, "actions"));
		json_decref(acts);
		acts = inner;
	}
	if (json_is_array(acts))
		return acts;
	/* The user's text: no control characters reach the terminal. */
	char name[64];
	snprintf(name, sizeof(name), "%s", inline_json ? "inline JSON" : arg);
	for (char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	snprintf(why, why_len, "--actions %s: %s", name,
		 acts ? "expected a JSON array of actions (or {\"actions\": [...]})" : je.text);
	json_decref(acts);
	return NULL;
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

/* --since T: RFC 3339, or an age like 90s, 15m, 2h, 7d, as wall-clock ns. */
int cg_cli_parse_since(const char *s, int64_t *out)
{
	if (cg_parse_time(s, out) == 0)
		return 0;
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v < 0 || strlen(end) != 1)
		return -1;
	int64_t unit = *end == 's'   ? 1
		       : *end == 'm' ? 60
		       : *end == 'h' ? 3600
		       : *end == 'd' ? 86400
				     : 0;
	if (!unit || v > INT64_MAX / unit / 1000000000)
		return -1;
	*out = cg_now_wall_ns() - (int64_t)v * unit * 1000000000;
	return 0;
}
