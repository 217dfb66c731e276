/* SPDX-License-Identifier: MIT */
/*
 * cli_sandbox — `callgate sandbox`: run one command under the same kernel
 * confinement the daemon applies to a DEGRADE verdict (bubblewrap-style),
 * for users and for the tests that prove the confinement.
 *
 * The flags build one struct cg_constraints; the command then goes through
 * exactly the daemon's calls: cg_confine_prepare, cg_tree_new,
 * cg_confine_fork, cg_tree_child_join, cg_confine_exec. Like every
 * unprivileged call of the daemon, it runs in a view of its own (mount,
 * pid, UTS, IPC namespaces; see docs/confinement.md) unless --no-view. Stdio is inherited, so the
 * command talks to the terminal; no other fd is (cg_confine_exec closes
 * them: a writable one would get past Landlock); the exit code is the command's (128+N for
 * signal N), 124 at the deadline, CG_EXIT_USAGE for a bad command line,
 * CG_EXIT_ERROR when confinement could not be set up (nothing ran),
 * 126/127 when the command could not be executed (as the shell reports).
 *
 * Invariants:
 *  - Nothing is exec'd unless every confinement step succeeded in the child.
 *  - When the command exits or the deadline passes, every process of its
 *    tree (setsid/double-forked descendants included) is killed before
 *    sandbox exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "confine.h"
#include "egress.h"
#include "egress_rule.h"
#include "util.h"

#define SANDBOX_MAX_PATHS 64
#define SANDBOX_MAX_PORTS 64
#define SANDBOX_GRACE_MS  200

extern char **environ;

/* Every option, for --help and for usage errors (cli_help.c). */
static const struct cg_cli_opt sandbox_opts[] = {
	{ "--read", "P", "allow reading the tree P (default with any path option: /)" },
	{ "--write", "P", "allow writing the tree P (in the view: bound read-write)" },
	{ "--exec", "P",
	  "allow executing files under P (repeatable; replaces the default, the system's program "
	  "dirs)" },
	{ "--net", "none|loopback|tcp:PORT[,PORT]...",
	  "network: none, loopback only, or TCP ports" },
	{ "--allow-host", "HOST[:PORT]",
	  "network only through the gate's proxy, to HOST (*.suffix too; default ports 80, 443)" },
	{ "--deny-host", "HOST[:PORT]", "never HOST, whatever --allow-host says (no port: any)" },
	{ "--resolve", "HOST:ADDR", "the proxy connects HOST to ADDR (and may: it is named)" },
	{ "--limit", "NAME=V", "cpu=S as=BYTES nproc=N fsize=BYTES nofile=N timeout=MS" },
	{ "--timeout", "MS", "kill the whole tree after MS milliseconds (exit 124)" },
	{ "--best-effort", NULL, "run even if the kernel cannot enforce a constraint" },
	{ "--hide", "P", "hide the path or glob P too (nothing there to read, list or connect)" },
	{ "--protect", "P", "keep P read-only inside the write trees (relative: in each)" },
	{ "--tmp", "private|shared", "the command's /tmp: its own tmpfs (default) or the host's" },
	{ "--git-write", NULL,
	  "a write tree's .git stays writable (pinned; hooks, config read-only); else read-only" },
	{ "--no-view", NULL, "debugging: no view (Landlock, seccomp and limits alone)" },
	{ "--no-landlock", NULL, "debugging: the view without Landlock" },
	{ "--user", "USER", "run as USER and its primary group (root only)" },
	{ "--report", "FILE|-", "write the confinement report (JSON) to FILE or stderr" },
	{ 0 },
};

#define SANDBOX_ABOUT                                                                              \
	"Run CMD confined exactly as the daemon confines an unprivileged call: in a view of\n"     \
	"its own (read-only root, the --write trees writable, private /tmp, minimal /dev,\n"       \
	"own /proc, pid, UTS and IPC namespaces, no capabilities, credential stores and\n"         \
	"service sockets hidden), under Landlock, seccomp and the limits. See\n"                   \
	"callgate-sandbox(1) and docs/confinement.md."

/* `--write P` alone reads everything (exec: see cg_exec_default). */
static const char *const default_read[] = { "/" };
static void usage(FILE *f)
{
	fputs("usage: callgate sandbox [--read P]... [--write P]... [--exec P]...\n"
	      "                        [--net none|loopback|tcp:PORT[,PORT]...]\n"
	      "                        [--allow-host H[:P]]... [--deny-host H[:P]]...\n"
	      "                        [--resolve HOST:ADDR]...\n"
	      "                        [--limit NAME=V]... [--timeout MS] [--best-effort]\n"
	      "                        [--hide P]... [--protect P]... [--tmp private|shared]\n"
	      "                        [--git-write]\n"
	      "                        [--no-view] [--no-landlock]\n"
	      "                        [--user USER] [--report FILE|-] -- CMD [ARGS]...\n"
	      "limits: cpu=SECONDS as=BYTES nproc=N fsize=BYTES nofile=N timeout=MS\n"
	      "        (BYTES may end in K, M or G)\n",
	      f);
}

/* Parse a non-negative integer with an optional K/M/G suffix. 0 or -1. */
static int parse_num(const char *s, bool suffix, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v < 0)
		return -1;
	int64_t mul = 1;
	if (suffix && *end) {
		mul = *end == 'K' || *end == 'k'   ? 1024LL
		      : *end == 'M' || *end == 'm' ? 1024LL * 1024
		      : *end == 'G' || *end == 'g' ? 1024LL * 1024 * 1024
						   : 0;
		if (!mul)
			return -1;
		end++;
	}
	if (*end || v > INT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

static int parse_limit(const char *arg, struct cg_limits *l, int64_t *timeout_ms)
{
	const char *eq = strchr(arg, '=');
	if (!eq)
		return -1;
	size_t n = (size_t)(eq - arg);
	const char *v = eq + 1;
	static const struct {
		const char *name, *alias;
		size_t off;
		bool suffix;
	} names[] = {
		{ "cpu", "cpu_s", offsetof(struct cg_limits, cpu_s), false },
		{ "as", "as_bytes", offsetof(struct cg_limits, as_bytes), true },
		{ "nproc", "nproc", offsetof(struct cg_limits, nproc), false },
		{ "fsize", "fsize_bytes", offsetof(struct cg_limits, fsize_bytes), true },
		{ "nofile", "nofile", offsetof(struct cg_limits, nofile), false },
	};
	if ((n == 7 && strncmp(arg, "timeout", 7) == 0) ||
	    (n == 10 && strncmp(arg, "timeout_ms", 10) == 0))
		return parse_num(v, false, timeout_ms) == 0 && *timeout_ms > 0 ? 0 : -1;
	for (size_t i = 0; i < CG_ARRAY_LEN(names); i++) {
		if ((strlen(names[i].name) == n && strncmp(arg, names[i].name, n) == 0) ||
		    (strlen(names[i].alias) == n && strncmp(arg, names[i].alias, n) == 0))
			return parse_num(v, names[i].suffix, (int64_t *)((char *)l + names[i].off));
	}
	return -1;
}

static int parse_ports(const char *s, uint16_t *ports, size_t *n)
{
	char buf[512];
	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
		return -1;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int64_t v;
		if (parse_num(tok, false, &v) != 0 || v < 1 || v > 65535 || *n >= SANDBOX_MAX_PORTS)
			return -1;
		ports[(*n)++] = (uint16_t)v;
	}
	return 0;
}

/* Resolve CMD against PATH in the parent, so the child only calls execve. */
static int resolve(const char *cmd, char *out, size_t len)
{
	if (strchr(cmd, '/'))
		return snprintf(out, len, "%s", cmd) < (int)len ? 0 : -1;
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p;) {
		size_t dl = strcspn(p, ":");
		if (dl > 0 && snprintf(out, len, "%.*s/%s", (int)dl, p, cmd) < (int)len &&
		    access(out, X_OK) == 0)
			return 0;
		p += dl;
		if (*p == ':')
			p++;
	}
	return -1;
}

/* What the child reports on the error pipe when it does not reach exec. */
struct child_failure {
	int step; /* 0 join, 1 confine, 2 exec; STEP_READY is not a failure */
	int err;
};

/* The command reached its execve (cg_confine_exec's ready function). */
#define STEP_READY 3

__attribute__((noreturn)) static void child_fail(int fd, int step, int err)
{
	struct child_failure f = { step, err };
	(void)!write(fd, &f, sizeof(f));
	_exit(step == 2 ? (err == ENOENT ? 127 : 126) : CG_EXIT_ERROR);
}

/* The command is at its execve: an EOF without this is a death on the way. */
static void command_ready(int fd)
{
	struct child_failure f = { STEP_READY, 0 };
	(void)!write(fd, &f, sizeof(f));
}

/* How cg_confine_exec reports, in our steps. */
__attribute__((noreturn)) static void confine_failed(int fd, int step, int err)
{
	child_fail(fd, step == CG_CONFINE_STEP_EXEC ? 2 : 1, err);
}

/* Wait for pid with a deadline; signals to the sandbox are forwarded to the tree. */
static int supervise(pid_t pid, struct cg_tree *tree, int64_t timeout_ms, int sig_fd,
		     bool *timed_out)
{
	int pid_fd = (int)syscall(SYS_pidfd_open, pid, 0);
	int64_t deadline = timeout_ms > 0 ? cg_now_mono_ns() + timeout_ms * 1000000 : 0;
	bool term_sent = false;
	int status = 0;
	for (;;) {
		int wait_ms = -1;
		if (deadline) {
			int64_t left = (deadline - cg_now_mono_ns()) / 1000000;
			wait_ms = left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
		}
		struct pollfd pf[2] = { { pid_fd, POLLIN, 0 }, { sig_fd, POLLIN, 0 } };
		int r = pid_fd >= 0 ? poll(pf, 2, wait_ms) : 0;
		if (pid_fd < 0) {
			/* No pidfd (old kernel): block; the deadline is then not enforced. */
			if (waitpid(pid, &status, 0) == pid)
				break;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && deadline) {
			*timed_out = true;
			if (!term_sent) {
				cg_tree_kill(tree, SIGTERM);
				term_sent = true;
				deadline = cg_now_mono_ns() + SANDBOX_GRACE_MS * 1000000LL;
			} else {
				cg_tree_kill(tree, SIGKILL);
				deadline = 0;
			}
			continue;
		}
		if (pf[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (cg_read_some(sig_fd, &si, sizeof(si)) == sizeof(si))
				cg_tree_kill(tree, (int)si.ssi_signo);
		}
		if (pf[0].revents & POLLIN) {
			if (waitpid(pid, &status, 0) == pid)
				break;
		}
	}
	if (pid_fd >= 0)
		(void)close(pid_fd);
	return status;
}

/* The host options: entries and pins with their own name storage. */
struct sandbox_hosts {
	struct cg_host_entry allow[SANDBOX_MAX_PATHS], deny[SANDBOX_MAX_PATHS];
	struct cg_host_pin pins[SANDBOX_MAX_PATHS];
	char names[3][SANDBOX_MAX_PATHS][CG_HOST_NAME_MAX + 1];
	char addrs[SANDBOX_MAX_PATHS][64];
	size_t n_allow, n_deny, n_pins;
};

/* --allow-host, --deny-host, --resolve. 0, or -1 after saying why. */
static int sandbox_host_option(struct sandbox_hosts *h, const char *opt, const char *v)
{
	const char *why = "too many";
	int kind = opt[2] == 'a' ? 0 : opt[2] == 'd' ? 1 : 2;
	size_t *n = kind == 0 ? &h->n_allow : kind == 1 ? &h->n_deny : &h->n_pins;
	char *name = h->names[kind][*n];
	if (*n >= SANDBOX_MAX_PATHS)
		goto bad;
	if (kind < 2) {
		struct cg_host_entry *e = kind == 0 ? &h->allow[*n] : &h->deny[*n];
		if (cg_host_entry_parse(v, name, CG_HOST_NAME_MAX + 1, &e->port, &why) != 0)
			goto bad;
		e->name = name;
	} else {
		const char *colon = strchr(v, ':');
		uint16_t port = 0;
		char host[CG_HOST_NAME_MAX + 1];
		why = "HOST:ADDR with a plain host name and an IP address";
		if (!colon || (size_t)(colon - v) > CG_HOST_NAME_MAX ||
		    strlen(colon + 1) >= sizeof(h->addrs[0]) || !cg_host_is_address(colon + 1))
			goto bad;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - v), v);
		if (cg_host_entry_parse(host, name, CG_HOST_NAME_MAX + 1, &port, &why) != 0 ||
		    strchr(name, '*'))
			goto bad;
		snprintf(h->addrs[*n], sizeof(h->addrs[0]), "%s", colon + 1);
		h->pins[*n] = (struct cg_host_pin){ name, h->addrs[*n] };
	}
	(*n)++;
	return 0;
bad:
	fprintf(stderr, "callgate sandbox: bad %s '%s': %s\n", opt, v, why);
	return -1;
}

/* The command's environment: ours, with the proxy's variables in place of any others. */
static char **proxy_environ(void)
{
	size_t n = 0, k = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 16, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool ours = false;
		for (size_t j = 0; cg_egress_env[j]; j++) {
			size_t len = (size_t)(strchr(cg_egress_env[j], '=') - cg_egress_env[j]) + 1;
			ours |= strncmp(environ[i], cg_egress_env[j], len) == 0;
		}
		if (!ours)
			env[k++] = environ[i];
	}
	for (size_t j = 0; cg_egress_env[j]; j++)
		if (!(env[k++] = strdup(cg_egress_env[j])))
			return NULL; /* the process is about to fail: not worth freeing */
	return env;
}

/* Free what proxy_environ made (its own strings, not environ's). */
static void proxy_environ_free(char **env)
{
	for (size_t i = 0; env[i]; i++) {
		bool inherited = false;
		for (size_t j = 0; environ[j] && !inherited; j++)
			inherited = environ[j] == env[i];
		if (!inherited)
			free(env[i]);
	}
	free(env);
}

/* One line per connection the proxy carried, on stderr. */
static void print_connections(json_t *records)
{
	size_t i;
	json_t *r;
	json_array_foreach(records, i, r)
	{
		/* Refused by the host list (a D code), or allowed but failed upstream (E). */
		const char *code = json_string_value(json_object_get(r, "code"));
		const char *dash = code ? strchr(code, '-') : NULL;
		dash = dash ? strchr(dash + 1, '-') : NULL;
		bool failed = dash && dash[1] == 'E';
		fprintf(stderr, "callgate sandbox: net: %s:%d (%s) %s %s\n",
			json_string_value(json_object_get(r, "host")),
			(int)json_integer_value(json_object_get(r, "port")),
			json_is_string(json_object_get(r, "address"))
			    ? json_string_value(json_object_get(r, "address"))
			    : "-",
			json_is_true(json_object_get(r, "allowed")) ? "allowed"
			: failed				    ? "failed upstream"
								    : "refused",
			code ? code : "-");
	}
}

int cg_cli_sandbox(const struct cg_cli *g, int argc, char **argv)
{
	const char *reads[SANDBOX_MAX_PATHS], *writes[SANDBOX_MAX_PATHS], *execs[SANDBOX_MAX_PATHS];
	const char *hides[SANDBOX_MAX_PATHS], *protects[SANDBOX_MAX_PATHS];
	size_t n_read = 0, n_write = 0, n_exec = 0, n_ports = 0, n_hide = 0, n_protect = 0;
	bool view = true, landlock = true;
	uint16_t ports[SANDBOX_MAX_PORTS];
	struct cg_constraints c = { 0 };
	c.limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
				       CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	c.timeout_ms = CG_LIMIT_UNSET;
	const char *report_path = NULL, *user = NULL;
	static struct sandbox_hosts hosts;
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			return cg_cli_help("callgate sandbox [OPTIONS] -- CMD [ARGS]...",
					   SANDBOX_ABOUT, sandbox_opts);
		}
		if (strcmp(a, "--best-effort") == 0) {
			c.best_effort = true;
			continue;
		}
		if (strcmp(a, "--git-write") == 0) {
			c.git_write = true;
			continue;
		}
		/* Debugging: one layer alone, to see what each stops. */
		if (strcmp(a, "--no-view") == 0 || strcmp(a, "--no-landlock") == 0) {
			*(a[5] == 'v' ? &view : &landlock) = false;
			continue;
		}
		if (!v || a[0] != '-') {
			usage(stderr);
			return CG_EXIT_USAGE;
		}
		i++;
		if (strcmp(a, "--read") == 0 || strcmp(a, "--write") == 0 ||
		    strcmp(a, "--exec") == 0) {
			const char **list = a[2] == 'r' ? reads : a[2] == 'w' ? writes : execs;
			size_t *n = a[2] == 'r' ? &n_read : a[2] == 'w' ? &n_write : &n_exec;
			if (*n >= SANDBOX_MAX_PATHS) {
				fprintf(stderr, "callgate sandbox: too many %s paths\n", a);
				return CG_EXIT_USAGE;
			}
			list[(*n)++] = v;
			c.fs = true;
		} else if (strcmp(a, "--hide") == 0 || strcmp(a, "--protect") == 0) {
			const char **list = a[2] == 'h' ? hides : protects;
			size_t *n = a[2] == 'h' ? &n_hide : &n_protect;
			if (*n >= SANDBOX_MAX_PATHS) {
				fprintf(stderr, "callgate sandbox: too many %s paths\n", a);
				return CG_EXIT_USAGE;
			}
			list[(*n)++] = v;
		} else if (strcmp(a, "--tmp") == 0) {
			c.tmp = strcmp(v, "private") == 0  ? CG_TMP_PRIVATE
				: strcmp(v, "shared") == 0 ? CG_TMP_SHARED
							   : CG_TMP_UNSET;
			if (c.tmp == CG_TMP_UNSET) {
				fprintf(stderr, "callgate sandbox: bad --tmp '%s'\n", v);
				return CG_EXIT_USAGE;
			}
		} else if (strcmp(a, "--net") == 0) {
			enum cg_net want = strcmp(v, "none") == 0	? CG_NET_NONE
					   : strcmp(v, "loopback") == 0 ? CG_NET_LOOPBACK
					   : strncmp(v, "tcp:", 4) == 0 ? CG_NET_TCP
									: CG_NET_UNSET;
			if (want == CG_NET_UNSET || (c.net != CG_NET_UNSET && c.net != want) ||
			    (want == CG_NET_TCP && parse_ports(v + 4, ports, &n_ports) != 0)) {
				fprintf(stderr, "callgate sandbox: bad or conflicting --net '%s'\n",
					v);
				return CG_EXIT_USAGE;
			}
			c.net = want;
		} else if (strcmp(a, "--allow-host") == 0 || strcmp(a, "--deny-host") == 0 ||
			   strcmp(a, "--resolve") == 0) {
			if (sandbox_host_option(&hosts, a, v) != 0)
				return CG_EXIT_USAGE;
		} else if (strcmp(a, "--limit") == 0) {
			if (parse_limit(v, &c.limits, &c.timeout_ms) != 0) {
				fprintf(stderr, "callgate sandbox: bad --limit '%s'\n", v);
				return CG_EXIT_USAGE;
			}
		} else if (strcmp(a, "--timeout") == 0) {
			if (parse_num(v, false, &c.timeout_ms) != 0 || c.timeout_ms <= 0) {
				fprintf(stderr, "callgate sandbox: bad --timeout '%s'\n", v);
				return CG_EXIT_USAGE;
			}
		} else if (strcmp(a, "--report") == 0) {
			report_path = v;
		} else if (strcmp(a, "--user") == 0) {
			user = v;
		} else {
			return cg_cli_bad_option("sandbox", a, NULL, sandbox_opts);
		}
	}
	if (i >= argc) {
		usage(stderr);
		return CG_EXIT_USAGE;
	}
	char **cmd = argv + i;
	if (hosts.n_allow || hosts.n_deny || hosts.n_pins) {
		if (!hosts.n_allow || c.net != CG_NET_UNSET) {
			fprintf(stderr, "callgate sandbox: --deny-host and --resolve need "
					"--allow-host, which does not go with --net\n");
			return CG_EXIT_USAGE;
		}
		c.net = CG_NET_HOSTS;
		c.allow_hosts = hosts.allow;
		c.n_allow_hosts = hosts.n_allow;
		c.deny_hosts = hosts.deny;
		c.n_deny_hosts = hosts.n_deny;
		c.pins = hosts.pins;
		c.n_pins = hosts.n_pins;
	}
	if (c.fs) {
		c.read = n_read ? reads : default_read;
		c.n_read = n_read ? n_read : CG_ARRAY_LEN(default_read);
		/* No --exec: confine's default, the system program directories. */
		c.exec = execs;
		c.n_exec = n_exec;
		c.write = writes;
		c.n_write = n_write;
	}
	c.ports = ports;
	c.n_ports = n_ports;
	c.hide = hides;
	c.n_hide = n_hide;
	c.protect = protects;
	c.n_protect = n_protect;

	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd))) {
		perror("callgate sandbox: getcwd");
		return CG_EXIT_ERROR;
	}
	struct cg_confine_ctx ctx = { .workspace = cwd,
				      .cwd = cwd,
				      .home = getenv("HOME"),
				      .view = view,
				      .no_landlock = !landlock };
	if (user) {
		struct passwd *pw = getpwnam(user);
		char *end;
		long uid = strtol(user, &end, 10);
		if (!pw && *end == 0 && end != user && uid >= 0)
			pw = getpwuid((uid_t)uid);
		if (!pw) {
			fprintf(stderr, "callgate sandbox: unknown user '%s'\n", user);
			return CG_EXIT_USAGE;
		}
		ctx.set_ids = true;
		ctx.uid = pw->pw_uid;
		ctx.gid = pw->pw_gid;
	}
	char exe[PATH_MAX];
	if (resolve(cmd[0], exe, sizeof(exe)) != 0) {
		fprintf(stderr, "callgate sandbox: %s: command not found\n", cmd[0]);
		return 127;
	}

	int rc = CG_EXIT_ERROR;
	struct cg_reply *err = NULL;
	struct cg_confine_plan *plan = NULL;
	struct cg_tree *tree = NULL;
	const struct cg_constraints *sets[1] = { &c };
	if (cg_confine_prepare(sets, 1, &ctx, &plan, &err) != 0) {
		char *msg = cg_reply_message(err);
		fprintf(stderr, "callgate sandbox: %s: %s\n", cg_reply_def_of(err)->code,
			msg ? msg : "confinement refused");
		free(msg);
		cg_reply_free(err);
		return CG_EXIT_ERROR;
	}
	if (report_path) {
		json_t *rep = cg_confine_report(plan);
		FILE *f = strcmp(report_path, "-") == 0 ? stderr : fopen(report_path, "we");
		if (!f || !rep) {
			perror("callgate sandbox: report");
			json_decref(rep);
			goto free_plan;
		}
		(void)json_dumpf(rep, f, JSON_COMPACT | JSON_SORT_KEYS);
		fputc('\n', f);
		if (f != stderr)
			(void)fclose(f);
		else
			(void)fflush(f);
		json_decref(rep);
	}
	if (cg_tree_new(NULL, &tree, &err) != 0) {
		char *msg = cg_reply_message(err);
		fprintf(stderr, "callgate sandbox: %s\n", msg ? msg : "process tree failed");
		free(msg);
		cg_reply_free(err);
		goto free_plan;
	}

	struct cg_egress *egress = NULL;
	char **env = environ;
	if (cg_egress_start(plan, "sandbox", &egress, &err) != 0 ||
	    (egress && !(env = proxy_environ()))) {
		fprintf(stderr, "callgate sandbox: the egress proxy could not start\n");
		cg_reply_free(err);
		json_decref(cg_egress_stop(egress));
		cg_tree_free(tree);
		goto free_plan;
	}

	/* Signals to sandbox go to the tree, not to us (a ^C kills the command). */
	sigset_t mask, old;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	(void)sigprocmask(SIG_BLOCK, &mask, &old);
	int sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	int pfd[2];
	if (sig_fd < 0 || pipe2(pfd, O_CLOEXEC) != 0) {
		perror("callgate sandbox: setup");
		goto restore_mask;
	}
	int64_t timeout = cg_confine_timeout_ms(plan);
	fflush(NULL);
	pid_t pid = cg_confine_fork(tree, plan);
	if (pid < 0) {
		perror("callgate sandbox: fork");
		(void)close(pfd[0]);
		(void)close(pfd[1]);
		goto restore_mask;
	}
	if (pid == 0) {
		(void)close(pfd[0]);
		int e = cg_tree_child_join(tree, 0);
		if (e)
			child_fail(pfd[1], 0, e);
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
		cg_confine_exec(plan, exe, cmd, env, confine_failed, command_ready, pfd[1]);
	}
	cg_tree_add(tree, pid);
	(void)close(pfd[1]);
	/* Interactive use: hand the terminal to the command's process group. */
	bool fg = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
	if (fg) {
		(void)signal(SIGTTOU, SIG_IGN);
		(void)tcsetpgrp(STDIN_FILENO, pid);
	}
	/* Read to EOF: READY then EOF is an exec; a (step, errno) a failure; EOF alone a death. */
	struct child_failure msg[2], fail = { -1, 0 };
	size_t have = 0;
	ssize_t got;
	while (have < sizeof(msg) &&
	       (got = cg_read_some(pfd[0], (char *)msg + have, sizeof(msg) - have)) > 0)
		have += (size_t)got;
	(void)close(pfd[0]);
	bool ready = false;
	for (size_t m = 0; m < have / sizeof(msg[0]) && fail.step < 0; m++) {
		if (msg[m].step == STEP_READY)
			ready = true;
		else
			fail = msg[m];
	}
	bool timed_out = false;
	int status = supervise(pid, tree, timeout, sig_fd, &timed_out);
	if (fg)
		(void)tcsetpgrp(STDIN_FILENO, getpgrp());
	/* Descendants that outlived the command (setsid, double fork) go too. */
	if (cg_tree_alive(tree))
		cg_tree_kill(tree, SIGKILL);
	if (fail.step >= 0) {
		static const char *const steps[] = { "joining the process tree",
						     "applying confinement", "executing" };
		fprintf(stderr, "callgate sandbox: %s %s: %s\n", steps[fail.step % 3],
			fail.step == 2 ? cmd[0] : "failed", cg_errno_name(fail.err));
		if (fail.step == 2 && fail.err == EACCES) {
			fprintf(stderr,
				"callgate sandbox: %s resolves to %s; with a path option only "
				"files under the --exec trees may run, a script's interpreter "
				"too. --exec replaces the default trees, so name those you need "
				"as well (--exec /usr --exec DIR); the defaults:",
				cmd[0], exe);
			for (size_t d = 0; d < CG_ARRAY_LEN(cg_exec_default); d++)
				fprintf(stderr, " %s", cg_exec_default[d]);
			fputc('\n', stderr);
		}
		rc = fail.step == 2 ? (fail.err == ENOENT ? 127 : 126) : CG_EXIT_ERROR;
	} else if (!ready) {
		fprintf(stderr,
			"callgate sandbox: %s never started: its process ended before exec "
			"(%s %d)\n",
			cmd[0], WIFSIGNALED(status) ? "signal" : "exit status",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		rc = CG_EXIT_ERROR;
	} else if (timed_out) {
		fprintf(stderr, "callgate sandbox: deadline of %lld ms passed; killed\n",
			(long long)timeout);
		rc = CG_EXIT_TIMEOUT;
	} else if (WIFEXITED(status)) {
		rc = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		rc = 128 + WTERMSIG(status);
	}
restore_mask:
	if (egress) {
		json_t *records = cg_egress_stop(egress);
		print_connections(records);
		json_decref(records);
		proxy_environ_free(env);
	}
	if (sig_fd >= 0)
		(void)close(sig_fd);
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
	cg_tree_free(tree);
free_plan:
	cg_confine_plan_free(plan);
	return rc;
}
