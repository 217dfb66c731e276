/* SPDX-License-Identifier: MIT */
/*
 * cli_connect — `callgate connect [--socket PATH]`: relay standard input to
 * the local agent socket and the socket to standard output, as `nc -U`
 * would. It is what a client on another machine runs here over ssh
 * (`callgate --host NAME …`, docs/fleet.md): the daemon then sees this
 * process — the ssh login's uid — as its peer, and decides and records the
 * call with its own policy and evidence.
 *
 * Invariants:
 *  - Half-closes pass through: end of input becomes shutdown(SHUT_WR) on
 *    the socket (the daemon reads "request complete", not withdrawal), and
 *    the daemon's end of output ends the relay once all of it is written.
 *  - When the caller goes away (standard output hangs up: the ssh session
 *    closed), the socket is closed at once, so the daemon cancels the call
 *    exactly as it does for a local client that disconnects.
 *  - Nothing is interpreted: bytes are relayed as they are, in order.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

static const struct cg_cli_opt connect_opts[] = {
	{ "--socket", "PATH", "the agent socket to relay to (default: callgate's --socket)" },
	{ 0 },
};

/* Copy what fd `from` has now to `to`. 1 copied, 0 end of input, -1 error. */
static int relay_some(int from, int to)
{
	char buf[65536];
	ssize_t n = cg_read_some(from, buf, sizeof(buf));
	if (n <= 0)
		return n == 0 ? 0 : -1;
	return cg_write_all(to, buf, (size_t)n) < 0 ? -1 : 1;
}

/*
 * Relay until the daemon ends its output (0) or the caller hangs up (1);
 * -1 on an I/O error (errno).
 */
static int relay(int sock)
{
	bool in_open = true;
	for (;;) {
		struct pollfd p[3] = { { .fd = sock, .events = POLLIN },
				       { .fd = STDOUT_FILENO, .events = 0 },
				       { .fd = in_open ? STDIN_FILENO : -1, .events = POLLIN } };
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (p[1].revents & (POLLHUP | POLLERR))
			return 1;
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int r = relay_some(sock, STDOUT_FILENO);
			if (r <= 0)
				return r == 0 ? 0 : (errno == EPIPE ? 1 : -1);
		}
		if (in_open && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
			int r = relay_some(STDIN_FILENO, sock);
			if (r < 0 && errno != EPIPE && errno != ECONNRESET)
				return -1;
			if (r <= 0) {
				/* End of the request: half-close, keep reading the answer. */
				(void)shutdown(sock, SHUT_WR);
				in_open = false;
			}
		}
	}
}

int cg_cli_connect(const struct cg_cli *g, int argc, char **argv)
{
	static const char usage[] = "callgate connect [--socket PATH]";
	if (cg_cli_wants_help(argc, argv))
		return cg_cli_help(
		    usage,
		    "Relay standard input to the daemon's agent socket and its answer "
		    "to standard\noutput (like nc -U). Run over ssh by 'callgate --host "
		    "NAME ...' on another\nmachine; see docs/fleet.md. Exit: 0 relayed, "
		    "69 no daemon, 70 an I/O error.",
		    connect_opts);
	const char *path = g->socket_path;
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		if (!cg_cli_opt_take("connect", connect_opts, argc, argv, &i, &v))
			return CG_EXIT_USAGE;
		path = v;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "callgate connect: socket path too long: %s\n", path);
		return CG_EXIT_USAGE;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	signal(SIGPIPE, SIG_IGN); /* a caller gone is EPIPE, handled, not a signal */
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "callgate connect: cannot connect to %s: %s\n", path,
			strerror(errno));
		if (sock >= 0)
			close(sock);
		return CG_EXIT_UNAVAILABLE;
	}
	char why[512];
	if (cg_cli_peer_check(sock, path, why, sizeof(why)) != 0) {
		fprintf(stderr, "callgate connect: %s\n", why);
		close(sock);
		return CG_EXIT_UNAVAILABLE;
	}
	int rc = relay(sock);
	int e = errno;
	close(sock); /* after a hang-up: the daemon cancels the call */
	if (rc < 0) {
		fprintf(stderr, "callgate connect: %s: %s\n", path, strerror(e));
		return CG_EXIT_ERROR;
	}
	return CG_EXIT_OK;
}
