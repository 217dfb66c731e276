/* SPDX-License-Identifier: MIT */
/*
 * callgated — the daemon: parse flags, build the kernel, serve the socket.
 *
 * A thin main over libcallgate (cg_kernel_*) and the transport (server.c).
 * It runs in the foreground (systemd style) and logs to stderr; the
 * per-call record goes to --log journal|syslog|stderr (log.c; the journal
 * by default under systemd). Listening sockets passed by systemd
 * (sd_listen_fds, FileDescriptorName=agent / admin) are served instead of
 * binding; whatever is not passed is bound as without systemd.
 *
 * Invariants:
 *  - SIGTERM, SIGINT and SIGHUP MUST be blocked before cg_kernel_new starts
 *    any thread, so that they reach only the loop's signalfd and never kill
 *    a worker mid-write.
 *  - Every startup failure prints one line saying what failed and exits 1;
 *    a clean stop exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "callgate.h"
#include "cli.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define EXIT_STARTUP   1
#define EXIT_USAGE     64 /* a bad command line (EX_USAGE): a restart will not mend it */
#define MAX_WORKSPACES 64

/* The synopsis: what --help prints first, and where a bad option's near names come from. */
static const char SYNOPSIS[] =
    "usage: callgated [--socket PATH] [--admin-socket PATH] [--socket-group GROUP]\n"
    "                 [--state-dir DIR] [--policy FILE] [--policy-pubkey FILE]\n"
    "                 [--workspace DIR]... [--max-conns N] [--read-timeout MS|DURATION]\n"
    "                 [--approval] [--approval-timeout MS|DURATION] [--admin-group GROUP]\n"
    "                 [--verify-journal] [--resign-journal] [--disk-reserve BYTES|PCT%]\n"
    "                 [--approver-uid UID]... [--approver-group GROUP]...\n"
    "                 [--approval-notify PROGRAM [--approval-notify-arg ARG]...]\n"
    "                 [--max-conns-per-uid N] [--write-idle-ms MS]\n"
    "                 [--max-reply-bytes N] [--output-budget N] [--admit-queue N]\n"
    "                 [--log journal|syslog|stderr] [--syslog-socket PATH]\n"
    "                 [--help] [--version]\n";

static void usage(FILE *f)
{
	fputs(SYNOPSIS, f);
	fprintf(f,
		"\n"
		"Serves the callgate protocol on a Unix socket in the foreground.\n"
		"Defaults: socket %s (root) or $XDG_RUNTIME_DIR/callgate/callgate.sock;\n"
		"admin socket next to it (%s); state dir %s (root) or\n"
		"$XDG_STATE_HOME/callgate; workspace the current directory (never / or\n"
		"a system directory such as /home, /etc or /tmp: the daemon will not start);\n"
		"--max-conns 1024; --read-timeout 10000; --max-conns-per-uid 256;\n"
		"--write-idle-ms 30000; --max-reply-bytes 268435456; --output-budget\n"
		"1073741824; --admit-queue 512; --disk-reserve 5%% of the state's file\n"
		"system, at most 1G (with less free, new calls are turned away); --log\n"
		"journal under systemd ($JOURNAL_STREAM or $NOTIFY_SOCKET set), else\n"
		"stderr; --syslog-socket /dev/log. Sockets passed by systemd\n"
		"(FileDescriptorName=agent, admin) are served instead of binding. A start\n"
		"verifies the events after the last signed checkpoint; --verify-journal\n"
		"verifies the whole journal. A journal with events and no signed\n"
		"checkpoint, or events after a clean stop's, is refused unless\n"
		"--resign-journal says to sign them.\n"
		"See callgated(8).\n",
		CG_DEFAULT_SOCKET, CG_DEFAULT_ADMIN_SOCKET_NAME, CG_DEFAULT_STATE_DIR);
}

/*
 * A bad option: named, with the nearest one of the synopsis (cli_help),
 * whose "--name" words are the valid options. Returns EXIT_USAGE.
 */
static int bad_option(const char *a, const char *why)
{
	static char names[sizeof(SYNOPSIS)];
	struct cg_cli_opt opts[64] = { { 0 } };
	size_t n = 0;
	memcpy(names, SYNOPSIS, sizeof(SYNOPSIS));
	for (char *p = strstr(names, "[--"); p && n + 1 < CG_ARRAY_LEN(opts);
	     p = strstr(p, "[--")) {
		char *name = p + 1;
		size_t len = strspn(name, "-abcdefghijklmnopqrstuvwxyz");
		p = name + len;
		bool end = *p == '\0';
		*p = '\0';
		bool seen = false;
		for (size_t k = 0; k < n && !seen; k++)
			seen = strcmp(opts[k].name, name) == 0;
		if (!seen)
			opts[n++] = (struct cg_cli_opt){ name, NULL, "" };
		if (end)
			break;
		p++;
	}
	(void)cg_cli_bad_option_of("callgated", "", a, why, opts);
	return EXIT_USAGE;
}

/* Parse a positive decimal integer no larger than max. 0, or -1. */
static int parse_pos(const char *s, long long max, long long *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v <= 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

/*
 * --disk-reserve: N bytes, N with K, M or G (binary multiples), N% of the
 * file system (1..90), or 0 for none. 0, or -1.
 */
static int parse_reserve(const char *s, struct cg_kernel_config *kc)
{
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || s[0] == '-' || s[0] == '+')
		return -1;
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = { { "", 0 }, { "K", 10 }, { "M", 20 }, { "G", 30 } };
	if (strcmp(end, "%") == 0) {
		if (v < 1 || v > 90)
			return -1;
		kc->disk_reserve_pct = (unsigned)v;
		return 0;
	}
	for (size_t i = 0; i < CG_ARRAY_LEN(units); i++)
		if (strcmp(end, units[i].suffix) == 0) {
			if (v > (1ULL << 50) >> units[i].shift)
				return -1;
			kc->disk_reserve = (uint64_t)v << units[i].shift;
			kc->no_disk_reserve = v == 0;
			return 0;
		}
	return -1;
}

/* A group name or number to a gid. 0, or -1 after printing why. */
static int lookup_group(const char *name, gid_t *out)
{
	struct group *gr = getgrnam(name);
	long long g;
	if (gr)
		*out = gr->gr_gid;
	else if (parse_pos(name, INT32_MAX, &g) == 0)
		*out = (gid_t)g;
	else {
		fprintf(stderr, "callgated: unknown group '%s'\n", name);
		return -1;
	}
	return 0;
}

/* The path a passed Unix socket is bound to, into buf. 0, or -1 if it has none. */
static int sock_path(int fd, char *buf, size_t len)
{
	struct sockaddr_un sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sun_family != AF_UNIX ||
	    sl <= offsetof(struct sockaddr_un, sun_path) || sa.sun_path[0] != '/')
		return -1;
	size_t n = strnlen(sa.sun_path, sl - offsetof(struct sockaddr_un, sun_path));
	if (n >= len)
		return -1;
	memcpy(buf, sa.sun_path, n);
	buf[n] = '\0';
	return 0;
}

/*
 * Socket activation: take the listening sockets systemd passed. Named ones
 * go by name (agent, admin); unnamed ones by position (first agent, then
 * admin). The environment is cleared so that calls do not inherit it.
 * 0 (with what was passed stored in sc and its paths in the buffers), or -1
 * after printing why.
 */
static int take_passed_fds(struct cg_server_config *sc, char *agent_path, char *admin_path,
			   size_t len)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);
	if (n < 0) {
		fprintf(stderr, "callgated: sd_listen_fds: %s\n", strerror(-n));
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *name = names && names[i] ? names[i] : "unknown";
		bool admin =
		    strcmp(name, "admin") == 0 || (strcmp(name, "agent") != 0 && sc->has_passed_fd);
		char *path = admin ? admin_path : agent_path;
		if ((admin ? sc->has_passed_admin_fd : sc->has_passed_fd) ||
		    sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0 ||
		    sock_path(fd, path, len) < 0) {
			fprintf(stderr,
				"callgated: passed fd %d (%s) is not a listening Unix stream "
				"socket bound to a path, or a second one of its kind\n",
				fd, name);
			rc = -1;
		} else if (admin) {
			sc->has_passed_admin_fd = true;
			sc->passed_admin_fd = fd;
		} else {
			sc->has_passed_fd = true;
			sc->passed_fd = fd;
		}
	}
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/*
 * Is path's lock held by another callgated? Says so, naming what to change,
 * and returns true. A lock file that cannot be opened (no directory yet)
 * holds nothing: the listener reports its own errors.
 */
static bool socket_in_use(const char *path, const char *what, bool defaulted)
{
	char lock[PATH_MAX + 8];
	if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
		return false;
	int fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	(void)close(fd); /* releases it: the listener takes it for good */
	if (held)
		fprintf(stderr,
			"callgated: the %s %s is in use by another callgated, already running (it "
			"holds %s)%s; "
			"nothing was started\n",
			what, path, lock,
			defaulted ? ": it is the default, next to --socket; give this daemon "
				    "--admin-socket PATH, or put its --socket in a directory of "
				    "its own"
				  : "");
	return held;
}

int main(int argc, char **argv)
{
	static char sock_buf[PATH_MAX], admin_buf[PATH_MAX], state_buf[PATH_MAX];
	const char *socket_path = NULL, *admin_path = NULL, *state_dir = NULL;
	const char *policy = NULL, *pubkey = NULL, *group = NULL, *admin_group = NULL;
	const char *workspaces[MAX_WORKSPACES];
	size_t n_ws = 0;
	long long max_conns = 0;
	int64_t read_ms = 0, approval_ms = 0;
	bool approval = false, verify_journal = false, resign_journal = false;
	struct cg_kernel_config reserve = { 0 }; /* --disk-reserve, parsed */
	bool root = geteuid() == 0;
	static struct cg_server_config sc; /* the server's own options fill it as they come */
	static char passed_buf[PATH_MAX], passed_admin_buf[PATH_MAX];
	const char *log_name = NULL, *syslog_socket = NULL;
	/*
	 * A log reader (stderr, a syslog socket) or a peer that went away is
	 * EPIPE, never a signal that ends the daemon. Children start with every
	 * disposition at its default again (exec.c).
	 */
	signal(SIGPIPE, SIG_IGN);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(a, "--approval") == 0) {
			approval = true;
			continue;
		}
		if (strcmp(a, "--verify-journal") == 0) {
			verify_journal = true;
			continue;
		}
		if (strcmp(a, "--resign-journal") == 0) {
			resign_journal = true;
			continue;
		}
		if (strcmp(a, "--version") == 0) {
			printf("callgated %s (protocol %d)\n", CALLGATE_VERSION, CALLGATE_PROTOCOL);
			return 0;
		}
		if (!v) {
			bool known = a[0] == '-' && a[1] == '-' && strstr(SYNOPSIS, a) &&
				     strchr(" ]", strstr(SYNOPSIS, a)[strlen(a)]);
			return bad_option(a, known ? "a value is needed after" : NULL);
		}
		if (strcmp(a, "--socket") == 0)
			socket_path = v;
		else if (strcmp(a, "--log") == 0)
			log_name = v;
		else if (strcmp(a, "--syslog-socket") == 0)
			syslog_socket = v;
		else if (strcmp(a, "--admin-socket") == 0)
			admin_path = v;
		else if (strcmp(a, "--socket-group") == 0)
			group = v;
		else if (strcmp(a, "--admin-group") == 0)
			admin_group = v;
		else if (strcmp(a, "--state-dir") == 0)
			state_dir = v;
		else if (strcmp(a, "--policy") == 0)
			policy = v;
		else if (strcmp(a, "--policy-pubkey") == 0)
			pubkey = v;
		else if (strcmp(a, "--workspace") == 0) {
			if (n_ws == MAX_WORKSPACES) {
				fprintf(stderr, "callgated: at most %d --workspace flags\n",
					MAX_WORKSPACES);
				return EXIT_USAGE;
			}
			workspaces[n_ws++] = v;
		} else if (strcmp(a, "--max-conns") == 0) {
			if (parse_pos(v, 1000000, &max_conns) < 0) {
				fprintf(stderr,
					"callgated: --max-conns needs 1..1000000, got '%s'\n", v);
				return EXIT_USAGE;
			}
		} else if (strcmp(a, "--approval-timeout") == 0) {
			if (cg_parse_duration_ms(v, 1, true, 24LL * 3600 * 1000, &approval_ms) <
			    0) {
				fprintf(stderr,
					"callgated: --approval-timeout needs 1..86400000 ms, or a "
					"duration (30s, 5m, 1h), got '%s'\n",
					v);
				return EXIT_USAGE;
			}
		} else if (strcmp(a, "--disk-reserve") == 0) {
			if (parse_reserve(v, &reserve) < 0) {
				fprintf(stderr,
					"callgated: --disk-reserve needs bytes (N, or N with K, M "
					"or G), a percentage of the file system (1%%..90%%), or 0 "
					"for none, got '%s'\n",
					v);
				return EXIT_USAGE;
			}
		} else if (strcmp(a, "--read-timeout") == 0) {
			if (cg_parse_duration_ms(v, 1, true, 3600000, &read_ms) < 0) {
				fprintf(
				    stderr,
				    "callgated: --read-timeout needs 1..3600000 ms, or a duration "
				    "(10s, 1m), got '%s'\n",
				    v);
				return EXIT_USAGE;
			}
		} else {
			char why[160] = "";
			int taken = cg_server_option(&sc, a, v, why, sizeof(why));
			if (taken < 0) {
				fprintf(stderr, "callgated: %s\n", why);
				return EXIT_USAGE;
			}
			if (taken == 0)
				return bad_option(a, NULL);
		}
		i++;
	}

	enum cg_log_sink sink = cg_calllog_default_sink();
	if (log_name && cg_calllog_sink_parse(log_name, &sink) < 0) {
		fprintf(stderr, "callgated: --log needs journal, syslog or stderr, got '%s'\n",
			log_name);
		return EXIT_USAGE;
	}
	if (syslog_socket && sink != CG_LOG_SYSLOG) {
		fprintf(stderr, "callgated: --syslog-socket needs --log syslog\n");
		return EXIT_USAGE;
	}
	/* Passed sockets are served where they are: their paths win. */
	if (take_passed_fds(&sc, passed_buf, passed_admin_buf, sizeof(passed_buf)) < 0)
		return EXIT_STARTUP;
	if (sc.has_passed_fd)
		socket_path = passed_buf;
	if (sc.has_passed_admin_fd)
		admin_path = passed_admin_buf;

	/* Defaults: system paths as root, per-user XDG paths otherwise. */
	if (!socket_path) {
		if (root) {
			socket_path = CG_DEFAULT_SOCKET;
		} else if (cg_user_socket_path(sock_buf, sizeof(sock_buf)) == 0) {
			socket_path = sock_buf;
		} else {
			/* ux-s40 L17: su - and sudo -i sessions have none. */
			fprintf(stderr,
				"callgated: no --socket given and XDG_RUNTIME_DIR is not set (a "
				"session from su or sudo has none): give --socket PATH in a "
				"directory only you can write (for example --socket "
				"$HOME/.callgate/callgate.sock), and give callgate the same path "
				"(--socket or $CALLGATE_SOCKET)\n");
			return EXIT_STARTUP;
		}
	}
	bool admin_defaulted = !admin_path;
	if (!admin_path) {
		const char *slash = strrchr(socket_path, '/');
		size_t dl = slash ? (size_t)(slash - socket_path) : 0;
		int n = slash ? snprintf(admin_buf, sizeof(admin_buf), "%.*s/%s", (int)dl,
					 socket_path, CG_DEFAULT_ADMIN_SOCKET_NAME)
			      : snprintf(admin_buf, sizeof(admin_buf), "%s",
					 CG_DEFAULT_ADMIN_SOCKET_NAME);
		if (n < 0 || (size_t)n >= sizeof(admin_buf)) {
			fprintf(stderr, "callgated: socket path too long\n");
			return EXIT_STARTUP;
		}
		admin_path = admin_buf;
	}
	if (strcmp(admin_path, socket_path) == 0) {
		fprintf(stderr, "callgated: --admin-socket must differ from --socket\n");
		return EXIT_STARTUP;
	}
	/*
	 * Before any state is made (a state directory and a signing key for a
	 * daemon that would then stop at its socket, ux-s40 M7). The listener
	 * takes the locks for good later; this only says it early and clearly.
	 */
	if ((!sc.has_passed_fd && socket_in_use(socket_path, "socket", false)) ||
	    (!sc.has_passed_admin_fd && socket_in_use(admin_path, "admin socket", admin_defaulted)))
		return EXIT_STARTUP;
	if (!state_dir) {
		if (root)
			state_dir = CG_DEFAULT_STATE_DIR;
		else if (cg_user_state_dir(state_buf, sizeof(state_buf)) == 0)
			state_dir = state_buf;
		else {
			fprintf(stderr,
				"callgated: no --state-dir given and neither XDG_STATE_HOME "
				"nor HOME is set\n");
			return EXIT_STARTUP;
		}
	}
	/* A workspace it would refuse is said before any state is made (ux-s41b L11). */
	struct cg_result wwhy;
	if (cg_kernel_workspaces_check(workspaces, n_ws, &wwhy) != 0) {
		fprintf(stderr, "callgated: cannot start: %c %s: %s\n", wwhy.type, wwhy.code,
			wwhy.message);
		return EXIT_STARTUP;
	}
	char untrusted[400];
	if (cg_mkdirs_trusted(state_dir, 0755, 0700, false, untrusted, sizeof(untrusted)) < 0) {
		fprintf(stderr,
			"callgated: state dir %s: %s (choose one only the daemon's user and root "
			"can write, on every step from /)\n",
			state_dir, untrusted);
		return EXIT_STARTUP;
	}
	gid_t gid = (gid_t)-1, admin_gid = (gid_t)-1;
	if ((group && lookup_group(group, &gid) < 0) ||
	    (admin_group && lookup_group(admin_group, &admin_gid) < 0))
		return EXIT_STARTUP;
	if (group && !root) {
		/* It cannot switch uid: another uid's calls would run as this one. */
		fprintf(stderr,
			"callgated: --socket-group needs a daemon run as root: this one runs "
			"every call as its own uid (%u), so a member of %s would act as you. "
			"Run the agent as this user, or the daemon as root (each call then runs "
			"as its caller)\n",
			(unsigned)geteuid(), group);
		return EXIT_USAGE;
	}

	/* Before any thread exists (see the invariant above). */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
		fprintf(stderr, "callgated: sigprocmask: %s\n", strerror(errno));
		return EXIT_STARTUP;
	}

	/*
	 * No controlling terminal: a call could otherwise open /dev/tty (the
	 * view binds the device) and read, or draw on, the terminal of whoever
	 * started the daemon from a shell, approval screen included. Nothing
	 * started from here on has one either. (A session leader's SIGHUP is
	 * blocked here: at most a policy reload.)
	 */
	int tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (tty >= 0) {
		int rc = ioctl(tty, TIOCNOTTY);
		int e = errno;
		close(tty);
		if (rc != 0) {
			fprintf(stderr, "callgated: cannot give up the controlling terminal: %s\n",
				strerror(e));
			return EXIT_STARTUP;
		}
	}

	char why_log[256] = "";
	struct cg_calllog *calllog = cg_calllog_open(sink, syslog_socket, why_log, sizeof(why_log));
	if (!calllog) {
		fprintf(stderr, "callgated: --log %s: %s\n", log_name ? log_name : "", why_log);
		return EXIT_STARTUP;
	}

	/*
	 * A call may fill its workspace's file system: when the journal lives on
	 * it, every uid's calls are refused until someone frees space (fail
	 * closed, but a denial of service by one agent; s36 attack). Said once.
	 */
	struct stat st_state, st_ws;
	for (size_t w = 0; w < (n_ws ? n_ws : 1) && stat(state_dir, &st_state) == 0; w++)
		if (stat(n_ws ? workspaces[w] : ".", &st_ws) == 0 &&
		    st_ws.st_dev == st_state.st_dev) {
			cg_log("warn", NULL,
			       "state dir %s is on the same file system as workspace %s: a call "
			       "that fills it past the disk reserve turns every call away until "
			       "space is freed; give the state dir a file system of its own",
			       state_dir, n_ws ? workspaces[w] : "(the current directory)");
			break;
		}

	struct cg_kernel_config kc = { 0 };
	kc.on_call = cg_calllog_record;
	kc.on_call_arg = calllog;
	kc.policy_file = policy;
	kc.state_dir = state_dir;
	kc.workspaces = n_ws ? workspaces : NULL;
	kc.n_workspaces = n_ws;
	kc.policy_pubkey_file = pubkey;
	kc.approval = approval;
	kc.verify_journal = verify_journal;
	kc.resign_journal = resign_journal;
	kc.disk_reserve = reserve.disk_reserve;
	kc.disk_reserve_pct = reserve.disk_reserve_pct;
	kc.no_disk_reserve = reserve.no_disk_reserve;
	kc.approval_timeout_ms = approval_ms;
	/*
	 * Hidden from every call: the sockets and their lock files, whose mtime
	 * is the replay mark a successor starts from (a call that could touch
	 * one could replay a request across a restart, or refuse all).
	 */
	static char sock_lock[PATH_MAX + 8], admin_lock[PATH_MAX + 8];
	(void)snprintf(sock_lock, sizeof(sock_lock), "%s.lock", socket_path);
	(void)snprintf(admin_lock, sizeof(admin_lock), "%s.lock", admin_path);
	const char *own[] = { socket_path, admin_path, sock_lock, admin_lock };
	kc.own_paths = own;
	kc.n_own_paths = CG_ARRAY_LEN(own);
	struct cg_kernel *k = NULL;
	struct cg_result why;
	if (cg_kernel_new(&kc, &k, &why) < 0) {
		fprintf(stderr, "callgated: cannot start: %c %s: %s\n", why.type, why.code,
			why.message);
		cg_calllog_close(calllog);
		return EXIT_STARTUP;
	}
	char sha[65] = "";
	uint64_t gen = 0;
	cg_kernel_policy_identity(k, sha, &gen);
	cg_log("info", NULL,
	       "callgated %s starting: policy %s (sha256 %s, generation %llu), state %s, "
	       "call log %s",
	       CALLGATE_VERSION, policy ? policy : "<embedded>", sha, (unsigned long long)gen,
	       state_dir,
	       sink == CG_LOG_JOURNAL  ? "journal"
	       : sink == CG_LOG_SYSLOG ? (syslog_socket ? syslog_socket : CG_SYSLOG_SOCKET)
				       : "stderr");
	/* ux-s41 L6: said once at start, not found call by call. */
	if (!root)
		cg_log("info", NULL,
		       "privileged calls: this daemon runs as uid %u, not root: a privileged "
		       "call runs through sudo -n where sudo lets this user run it without a "
		       "password and its rule's confinement can be kept, and is refused "
		       "otherwise (MCP-CONF-I-001, MCP-EXEC-E-020); agents send privileged "
		       "false (CALLGATE_PRIVILEGED=0)",
		       (unsigned)geteuid());

	sc.socket_path = socket_path;
	sc.admin_socket_path = admin_path;
	sc.socket_group = gid;
	sc.has_admin_group = admin_group != NULL;
	sc.admin_group = admin_gid;
	sc.max_conns = (unsigned)max_conns;
	sc.read_deadline_ms = read_ms;
	int rc = cg_server_run(k, &sc);
	if (rc < 0)
		cg_kernel_shutdown(k);
	cg_kernel_free(k);
	cg_calllog_close(calllog);
	return rc == 0 ? 0 : EXIT_STARTUP;
}
