/* SPDX-License-Identifier: MIT */
/*
 * bench_core — callgate's core costs, side by side in one run:
 *
 *   1. in-process decide latency (ns/op) of the adjudicator chain over the
 *      default policy, for an allowed and a denied call;
 *   2. socket round trip to a real callgated of a refused call (`ls`,
 *      privileged by the protocol's default, with no approver configured:
 *      refused at once) and of ping (median and p99);
 *   3. a governed /bin/true (the whole call: decode, resolve, decide,
 *      evidence, confine, spawn, wait, encode) against a bare posix_spawn +
 *      waitpid of /bin/true, with the ratio.
 *
 * Each daemon phase starts once the daemon is idle (no CPU for 200 ms), so
 * the trace packages of one phase are not timed in the next. The refused
 * call, ping and the echo floor alternate in five blocks each, so that the
 * machine's quiet and busy spells fall on all three alike.
 *
 * Usage: bench_core [PATH/TO/callgated] [--quick] [--json FILE]
 * With --json, the medians (ns) are also written to FILE as one object.
 * Without a path, callgated is looked for next to this program, then in
 * ../ (a Meson build dir). The daemon runs on a temporary socket and state
 * directory that are removed afterwards.
 *
 * This is a measuring tool, not a test: it prints numbers and the targets
 * (decide <= 200 ns median, refused round trip <= 20 us median, governed
 * /bin/true <= 1.5x bare spawn) and exits 0 unless something failed to run.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "callgate.h"
#include "floor.h"
#include "chain.h"
#include "gate.h"
#include "policy.h"
#include "util.h"
#include "wire.h"
#include "world.h"

extern char **environ;

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

struct stats {
	double median_ns, p99_ns;
	size_t n;
};

static struct stats summarize(int64_t *v, size_t n)
{
	struct stats s = { 0, 0, n };
	if (n == 0)
		return s;
	qsort(v, n, sizeof(*v), cmp_i64);
	s.median_ns = (double)v[n / 2];
	size_t i99 = (n * 99) / 100;
	s.p99_ns = (double)v[i99 < n ? i99 : n - 1];
	return s;
}

/* ---- 1. decide latency -------------------------------------------------- */

struct decide_case {
	const char *name;
	const char *line;
	struct cg_gate gate; /* decoded and resolved once, through the library's gate */
	enum cg_decision got;
};

/* Take the case through the one gate (as the daemon does), outside the timed loop. */
static int prepare_case(struct decide_case *c, const struct cg_gate_ctx *ctx)
{
	char line[1024], ts[40];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	int n = snprintf(line, sizeof(line), "{\"time\":\"%s\",%s", ts, c->line);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	struct cg_peer peer = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	if (cg_gate_decide(ctx, line, (size_t)n, true, false, &peer, NULL, NULL, &c->gate) != 0) {
		char *m = c->gate.refusal ? cg_reply_message(c->gate.refusal) : NULL;
		fprintf(stderr, "bench_core: gate (%s): %s\n", c->name, m ? m : "?");
		free(m);
		return -1;
	}
	return 0;
}

/* Median of batches: ns per decide, over `batches` batches of `per` calls. */
static struct stats time_decide(const struct cg_chain *ch, struct decide_case *c, size_t batches,
				size_t per)
{
	int64_t *v = calloc(batches, sizeof(*v));
	struct cg_folded f;
	for (size_t i = 0; i < per; i++) /* warm up */
		cg_chain_decide(ch, &c->gate.call, &f);
	for (size_t b = 0; b < batches; b++) {
		int64_t t0 = cg_now_mono_ns();
		for (size_t i = 0; i < per; i++)
			cg_chain_decide(ch, &c->gate.call, &f);
		v[b] = (cg_now_mono_ns() - t0) / (int64_t)per;
	}
	c->got = f.decision;
	struct stats s = summarize(v, batches);
	s.n = batches * per;
	free(v);
	return s;
}

/* ---- 2/3. the daemon ------------------------------------------------------ */

static char tmpdir[200]; /* under $TMPDIR (default /tmp); sockets must fit sun_path */
static char sock_path[PATH_MAX], admin_path[PATH_MAX];
static const char *target_path = sock_path; /* where round_trip() connects */
static pid_t daemon_pid = -1;

static int start_daemon(const char *callgated)
{
	char state[PATH_MAX], exe[PATH_MAX];
	char *admin = admin_path;
	snprintf(exe, sizeof(exe), "%s", callgated);
	const char *tmp = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/cg-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(sock_path, sizeof(sock_path), "%s/cg.sock", tmpdir);
	snprintf(admin_path, sizeof(admin_path), "%s/admin.sock", tmpdir);
	snprintf(state, sizeof(state), "%s/state", tmpdir);
	char *argv[] = { exe,		"--socket", sock_path,	   "--admin-socket", admin,
			 "--state-dir", state,	    "--workspace", tmpdir,	     NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	/* The daemon logs a line per event; keep the table readable. */
	char logp[PATH_MAX];
	snprintf(logp, sizeof(logp), "%s/daemon.log", tmpdir);
	posix_spawn_file_actions_addopen(&fa, 2, logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int rc = posix_spawn(&daemon_pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		errno = rc;
		return -1;
	}
	for (int i = 0; i < 500; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			return 0;
		}
		if (fd >= 0)
			close(fd);
		if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			fprintf(stderr, "bench_core: callgated exited; see %s\n", logp);
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

static void stop_daemon(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, NULL, 0);
	}
	/* Remove the temporary tree (sockets, state, log) without a shell. */
	(void)nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* One round trip; returns elapsed ns or -1. The response is checked for want. */
static int64_t round_trip(const char *body, const char *want)
{
	char ts[40], id[40], line[1024], buf[1 << 16];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	if (cg_uuid4(id, sizeof(id)) != 0)
		return -1;
	int n = snprintf(line, sizeof(line), "{\"id\":\"%s\",\"time\":\"%s\",%s\n", id, ts, body);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, target_path, strlen(target_path) + 1);
	int64_t t0 = cg_now_mono_ns();
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    cg_write_all(fd, line, (size_t)n) < 0) {
		close(fd);
		return -1;
	}
	size_t have = 0;
	for (;;) {
		ssize_t r = cg_read_some(fd, buf + have, sizeof(buf) - 1 - have);
		if (r <= 0)
			break;
		have += (size_t)r;
		if (memchr(buf, '\n', have) || have == sizeof(buf) - 1)
			break;
	}
	int64_t dt = cg_now_mono_ns() - t0;
	close(fd);
	buf[have] = '\0';
	if (!strstr(buf, want)) {
		fprintf(stderr, "bench_core: unexpected response: %.300s\n", buf);
		return -1;
	}
	return dt;
}

/* The daemon's CPU time so far (utime + stime, clock ticks), or -1. */
static long daemon_ticks(void)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)daemon_pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the name may hold spaces */
	unsigned long ut = 0, st = 0;
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

/*
 * Each phase starts with the daemon idle: the previous phase's trace
 * packages (written after the replies) would otherwise be timed as part
 * of the next one. Idle = no CPU used for 200 ms; at most 60 s.
 */
static void wait_idle(void)
{
	long last = daemon_ticks();
	int quiet = 0;
	for (int i = 0; i < 1200 && last >= 0 && quiet < 4; i++) {
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		long now = daemon_ticks();
		quiet = now == last ? quiet + 1 : 0;
		last = now;
	}
}

/* Samples of one kind of round trip, gathered over several blocks. */
struct samples {
	int64_t *v;
	size_t k, cap;
};

/* One block of n round trips (after a short warm-up), added to out. */
static void time_rt_block(const char *body, const char *want, size_t n, struct samples *out)
{
	for (size_t i = 0; i < n / 10 + 1; i++) /* warm up */
		(void)round_trip(body, want);
	for (size_t i = 0; i < n && out->k < out->cap; i++) {
		int64_t dt = round_trip(body, want);
		if (dt < 0)
			break;
		out->v[out->k++] = dt;
	}
}

static struct stats time_rt(const char *body, const char *want, size_t n)
{
	struct samples sm = { .v = calloc(n, sizeof(int64_t)), .cap = n };
	if (sm.v)
		time_rt_block(body, want, n, &sm);
	struct stats s = summarize(sm.v, sm.k);
	free(sm.v);
	return s;
}

/*
 * The machine's floor for a round trip: a forked child that accepts, reads,
 * echoes and closes, blocking, with no JSON and no event loop. The daemon's
 * numbers are best read against this one.
 */
static pid_t echo_floor_start(char *path, size_t len)
{
	snprintf(path, len, "%s/echo.sock", tmpdir);
	return floor_echo_start(path);
}

static void echo_floor_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/*
 * The refused call, ping and the echo floor, in ROUNDS alternating blocks
 * of n / ROUNDS each: a quiet or a busy spell of this shared machine falls
 * on all three alike, so their ratios hold from run to run better than
 * three long blocks one after another did. Every block starts on an idle
 * daemon (the trace packages of the one before are written, not timed).
 */
#define ROUNDS 5

static void time_round_trips(size_t n, struct stats *refused, struct stats *ping,
			     struct stats *echo)
{
	struct samples r = { .v = calloc(n, sizeof(int64_t)), .cap = n };
	struct samples p = { .v = calloc(n, sizeof(int64_t)), .cap = n };
	struct samples e = { .v = calloc(n, sizeof(int64_t)), .cap = n };
	char path[PATH_MAX];
	pid_t echo_pid = echo_floor_start(path, sizeof(path));
	for (int round = 0; r.v && p.v && e.v && round < ROUNDS; round++) {
		wait_idle();
		time_rt_block("\"pipeline\":[[\"ls\"]]}", "\"status\":\"denied\"", n / ROUNDS, &r);
		wait_idle();
		time_rt_block("\"action\":\"ping\"}", "\"status\":\"ok\"", n / ROUNDS, &p);
		wait_idle();
		if (echo_pid > 0) {
			const char *saved = target_path;
			target_path = path;
			time_rt_block("\"action\":\"ping\"}", "ping", n / ROUNDS, &e);
			target_path = saved;
		}
	}
	echo_floor_stop(echo_pid);
	*refused = summarize(r.v, r.k);
	*ping = summarize(p.v, p.k);
	*echo = summarize(e.v, e.k);
	free(r.v);
	free(p.v);
	free(e.v);
}

static struct stats time_bare_spawn(size_t n)
{
	int64_t *v = calloc(n, sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < n; i++) {
		int64_t dt = floor_spawn_true();
		if (dt < 0)
			break;
		v[k++] = dt;
	}
	struct stats s = summarize(v, k);
	free(v);
	return s;
}

/* ---- main ------------------------------------------------------------------ */

static void row(const char *what, struct stats s, const char *unit_note, const char *target)
{
	if (s.n == 0) {
		printf("  %-42s %12s %12s   %s\n", what, "n/a", "n/a", target);
		return;
	}
	printf("  %-42s %10.0f ns %10.0f ns   %-9zu %s%s\n", what, s.median_ns, s.p99_ns, s.n,
	       target, unit_note);
}

/* The medians, for bench/run (ns; -1 when not measured). */
static void write_json(const char *path, const struct stats *s)
{
	static const char *const keys[] = { "decide_allow_ns",	"decide_deny_ns",   "refused_rt_ns",
					    "ping_rt_ns",	"admin_ping_rt_ns", "echo_rt_ns",
					    "governed_true_ns", "bare_spawn_ns" };
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		return;
	}
	for (size_t i = 0; i < CG_ARRAY_LEN(keys); i++)
		fprintf(f, "%s\n  \"%s\": %.0f", i ? "," : "{", keys[i],
			s[i].n ? s[i].median_ns : -1.0);
	fprintf(f, "\n}\n");
	fclose(f);
}

static const char *find_daemon(const char *self, char *buf, size_t len)
{
	char dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		return NULL;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	const char *cands[] = { "callgated", "../callgated" };
	for (size_t i = 0; i < CG_ARRAY_LEN(cands); i++) {
		int w = snprintf(buf, len, "%s/%s", dir, cands[i]);
		if (w > 0 && (size_t)w < len && access(buf, X_OK) == 0)
			return buf;
	}
	(void)self;
	return NULL;
}

int main(int argc, char **argv)
{
	bool quick = false;
	const char *daemon = NULL, *json = NULL;
	char dbuf[PATH_MAX];
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else
			daemon = argv[i];
	}
	if (!daemon)
		daemon = find_daemon(argv[0], dbuf, sizeof(dbuf));
	size_t rt_n = quick ? 200 : 2000, spawn_n = quick ? 100 : 1000;
	size_t batches = quick ? 200 : 2000, per = 1000;

	/* 1. decide */
	struct cg_policy *pol = NULL;
	struct cg_reply *err = NULL;
	struct cg_world w = { 0 };
	struct cg_chain ch = { 0 };
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return 1;
	const char *ws[] = { cwd };
	if (cg_policy_load_default(&pol, &err) != 0 || cg_world_init(&w, ws, 1, &err) != 0 ||
	    cg_policy_register_rungs(&ch, pol) != 0) {
		char *m = err ? cg_reply_message(err) : NULL;
		fprintf(stderr, "bench_core: setup failed: %s\n", m ? m : "?");
		free(m);
		return 1;
	}
	struct decide_case allow = { .name = "allow",
				     .line =
					 "\"privileged\":false,\"pipeline\":[[\"ls\",\"-l\"]]}" };
	struct decide_case deny = {
		.name = "deny",
		.line = "\"privileged\":false,\"pipeline\":[[\"rm\",\"-rf\",\"/\"]]}"
	};
	printf("callgate %s core benchmark (%s)\n\n", CALLGATE_VERSION, quick ? "quick" : "full");
	printf("  %-42s %13s %13s   %-9s %s\n", "measure", "median", "p99", "n", "target");
	struct stats sa = { 0 }, sd = { 0 };
	struct cg_gate_ctx ctx = { .policy = pol, .chain = &ch, .world = &w };
	if (prepare_case(&allow, &ctx) == 0)
		sa = time_decide(&ch, &allow, batches, per);
	if (prepare_case(&deny, &ctx) == 0)
		sd = time_decide(&ch, &deny, batches, per);
	char note_a[64], note_d[64];
	snprintf(note_a, sizeof(note_a), "  [%s]", cg_decision_name(allow.got));
	snprintf(note_d, sizeof(note_d), "  [%s]", cg_decision_name(deny.got));
	row("decide, allowed call (ls -l)", sa, note_a, "<= 200 ns");
	row("decide, denied call (rm -rf /)", sd, note_d, "<= 200 ns");

	/* 2/3. the daemon */
	struct stats rr = { 0 }, rp = { 0 }, ra = { 0 }, fl = { 0 }, gt = { 0 }, bare = { 0 };
	if (!daemon || start_daemon(daemon) != 0) {
		fprintf(stderr, "bench_core: no callgated to measure against (pass its path)\n");
	} else {
		time_round_trips(rt_n, &rr, &rp, &fl);
		/* The admin socket's ping writes no evidence: the transport's
		 * own cost plus a small kernel answer, without journal I/O. */
		target_path = admin_path;
		wait_idle();
		ra = time_rt("\"action\":\"ping\"}", "\"status\":\"ok\"", rt_n);
		target_path = sock_path;
		wait_idle();
		gt = time_rt("\"privileged\":false,\"pipeline\":[[\"true\"]]}", "\"exit_code\":0",
			     spawn_n);
	}
	bare = time_bare_spawn(spawn_n);
	row("socket round trip, refused call", rr, "", "<= 20000 ns");
	row("socket round trip, ping", rp, "", "");
	row("socket round trip, admin ping (no evidence)", ra, "", "");
	row("socket round trip, trivial echo (floor)", fl, "", "");
	row("governed /bin/true (full call)", gt, "", "<= 1.5x bare");
	row("bare posix_spawn+wait /bin/true", bare, "", "");
	printf("\n  decide: per-call mean of 1000-call batches (median/p99 over batches);\n"
	       "  round trips: connect, send, read the line, close, from this process;\n"
	       "  governed /bin/true: the whole call through the daemon (decode, resolve,\n"
	       "  decide, evidence, confine, spawn, wait, encode) over the socket.\n\n");
	if (gt.n && bare.n)
		printf("  ratio governed/bare /bin/true (median): %.2fx (target <= 1.5x)\n",
		       gt.median_ns / bare.median_ns);
	if (rr.n && sd.n)
		printf("  ratio refused round trip / in-process deny (median): %.0fx\n",
		       rr.median_ns / sd.median_ns);
	stop_daemon();
	if (json)
		write_json(json, (struct stats[]){ sa, sd, rr, rp, ra, fl, gt, bare });

	cg_gate_fini(&allow.gate);
	cg_gate_fini(&deny.gate);
	cg_world_fini(&w);
	cg_policy_unref(pol);
	return 0;
}
