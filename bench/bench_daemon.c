/* SPDX-License-Identifier: MIT */
/*
 * bench_daemon — issue 14's figures that need a running callgated under
 * load, measured in one run and written as one JSON object:
 *
 *   rss_idle_kib          daemon RSS after start-up (VmRSS)
 *   allowed_idle_*_ms     governed /bin/true, one caller, idle daemon
 *   allowed_flood_*_ms    the same while 64 callers flood refused calls
 *   spawn_idle_median_ms, spawn_flood_*_ms  the probe's own posix_spawn of
 *                         /bin/true after each of its calls: what the load
 *                         alone does to starting a process (the floor)
 *   refused_per_s         refused calls answered per second (64 callers),
 *                         with the probe's allowed calls running beside them
 *   refused_alone_per_s   the same flood with nothing else running: the
 *                         daemon's throughput for refusals
 *   allowed_per_s         durable governed /bin/true per second (64 callers)
 *   floor_spawn_per_s     bare posix_spawn+wait of /bin/true per second, 64
 *                         threads: the most allowed calls/s could reach here
 *   floor_netns_cpu_us, floor_netns_per_s  CPU time (all CPUs, until the
 *                         kernel's teardowns settle) to make and let go of
 *                         a network namespace, as every call under net: none
 *                         has one, and the rate all CPUs would allow for it
 *   floor_echo_per_s      a trivial echo server (floor.h) under the same
 *                         64-caller load: the most refused calls/s could
 *                         reach here
 *   journal_bytes_per_refused, trace_bytes_per_refused (disk, st_blocks)
 *                         over the flood without the probe's allowed calls
 *   rss_warm_kib, rss_after_kib, rss_settled_kib  around N mixed requests
 *   startup_empty_ms                             start-up on an empty state
 *   startup_ms, journal_bytes                    restart on the grown state
 *   replay_all_s          callgate replay --all --no-write on the stopped state
 *   sha256_s              sha256sum over the journal's segments alone
 *   sha256_all_s, replay_read_bytes  sha256sum over the bytes replay --all
 *                         checks: the journal's segments and every file under
 *                         traces/ (package directories, archives and their
 *                         indexes), in batches of 4,000 names
 *   fs_package_dirs_per_s  the filesystem's own floor for trace packages:
 *                          mkdir + five small files + rename per second, in
 *                          the same directory as the daemon's state
 *
 * Usage: bench_daemon CALLGATED CALLGATE --json FILE [--requests N]
 *                     [--flood-secs S] [--quick] [--policy FILE] [--flood-only]
 * --policy: the daemon's policy (default: its embedded one); --flood-only:
 * only the idle and flood figures, disk per refusal and replay (bench/run's
 * second run, with evidence.packages: directories).
 * The state goes under $TMPDIR (default /tmp). On ext4, a directory where
 * many files were deleted in the last minutes allocates inodes slowly (it
 * skips recently deleted ones); fs_package_dirs_per_s shows it.
 * Nothing here judges a figure; bench/run prints them beside their targets.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "callgate.h"
#include "floor.h"
#include "journal.h"
#include "util.h"

extern char **environ;

static char tmpdir[200]; /* socket paths must fit sun_path */
static char sock_path[PATH_MAX], state_dir[PATH_MAX], log_path[PATH_MAX];
static const char *target = sock_path; /* where round_trip() connects */
static char *daemon_exe, *cli_exe, *policy_file;
static pid_t daemon_pid = -1;

static const char *REFUSED = "\"pipeline\":[[\"rm\",\"-rf\",\"/\"]]}";
static const char *ALLOWED = "\"privileged\":false,\"pipeline\":[[\"true\"]]}";
static const char *PING = "\"action\":\"ping\"}";

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct_ms(int64_t *v, size_t n, int pct)
{
	if (n == 0)
		return -1;
	qsort(v, n, sizeof(*v), cmp_i64);
	size_t i = (n * (size_t)pct) / 100;
	return (double)v[i < n ? i : n - 1] / 1e6;
}

/* ---- the daemon ----------------------------------------------------------- */

static int try_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, target, strlen(target) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Start callgated on the bench's state; returns ms until its socket answered, or -1. */
static double start_daemon(void)
{
	char ws[PATH_MAX * 2];
	snprintf(ws, sizeof(ws), "%s", tmpdir);
	/* The probe runs as another uid (nobody) when we are root: let it in. */
	char *argv[] = { daemon_exe, "--socket",
			 sock_path,  "--state-dir",
			 state_dir,  "--workspace",
			 ws,	     "--admin-socket",
			 NULL,	     "--socket-group",
			 "65534",    NULL,
			 NULL,	     NULL };
	size_t at = getuid() != 0 ? 9 : 11; /* the probe runs as nobody only when we are root */
	if (policy_file) {
		argv[at++] = "--policy";
		argv[at++] = policy_file;
	}
	argv[at] = NULL;
	char admin[PATH_MAX * 2];
	snprintf(admin, sizeof(admin), "%s/admin.sock", tmpdir);
	argv[8] = admin;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	int64_t t0 = cg_now_mono_ns();
	int rc = posix_spawn(&daemon_pid, daemon_exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -1;
	for (int i = 0; i < 60000; i++) {
		int fd = try_connect();
		if (fd >= 0) {
			double ms = (double)(cg_now_mono_ns() - t0) / 1e6;
			close(fd);
			return ms;
		}
		if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			fprintf(stderr, "bench_daemon: callgated exited; see %s\n", log_path);
			return -1;
		}
		usleep(500);
	}
	return -1;
}

static void stop_daemon(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, NULL, 0);
	}
	daemon_pid = -1;
}

static long rss_kib(void)
{
	char p[64], line[256];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)daemon_pid);
	FILE *f = fopen(p, "r");
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* One request; elapsed ns, or -1 when it failed or the answer lacked want. */
static int64_t round_trip(const char *body, const char *want)
{
	char ts[40], id[40], line[1024], buf[1 << 14];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	if (cg_uuid4(id, sizeof(id)) != 0)
		return -1;
	int n = snprintf(line, sizeof(line), "{\"id\":\"%s\",\"time\":\"%s\",%s\n", id, ts, body);
	int64_t t0 = cg_now_mono_ns();
	int fd = try_connect();
	if (fd < 0)
		return -1;
	if (cg_write_all(fd, line, (size_t)n) < 0) {
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
	return strstr(buf, want) ? dt : -1;
}

/* ---- load -------------------------------------------------------------------- */

struct load {
	const char *body, *want;
	atomic_bool stop;
	atomic_long ok, bad;
	long limit; /* stop after this many in total (0: until stop) */
	int mix;    /* 1: refused/ping/allowed mixed */
	bool spawn; /* a bare posix_spawn of /bin/true instead of a request */
};

static void *load_main(void *arg)
{
	struct load *l = arg;
	unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)cg_now_mono_ns();
	while (!atomic_load(&l->stop)) {
		const char *body = l->body, *want = l->want;
		if (l->mix) {
			int r = (int)(rand_r(&seed) % 10);
			body = r < 7 ? REFUSED : r < 9 ? PING : ALLOWED;
			want = r < 7   ? "\"status\":\"denied\""
			       : r < 9 ? "\"status\":\"ok\""
				       : "\"exit_code\":0";
		}
		if ((l->spawn ? floor_spawn_true() : round_trip(body, want)) >= 0) {
			atomic_fetch_add(&l->ok, 1);
		} else {
			atomic_fetch_add(&l->bad, 1);
			usleep(1000); /* turned away (back-pressure): a client backs off */
		}
		if (l->limit && atomic_load(&l->ok) + atomic_load(&l->bad) >= l->limit)
			break;
	}
	return NULL;
}

/*
 * Allowed calls, each followed by a bare posix_spawn of /bin/true: the
 * machine's own latency for starting a process under the same load, the
 * floor the governed call's ratio is read against.
 */
struct probe {
	int n;
	int64_t *v, *sv; /* governed calls; bare spawns */
	size_t k, sk;
	long failed;
	int64_t until_ns; /* give up probing past this (a starved daemon) */
	atomic_bool done;
};

static void probe_calls(struct probe *p)
{
	for (int i = 0; i < p->n && (i == 0 || cg_now_mono_ns() < p->until_ns); i++) {
		int64_t dt = round_trip(ALLOWED, "\"exit_code\":0");
		if (dt < 0)
			p->failed++;
		else
			p->v[p->k++] = dt;
		dt = floor_spawn_true();
		if (dt >= 0)
			p->sv[p->sk++] = dt;
	}
}

/* Read n bytes, or fewer at EOF; what was read. */
static size_t read_full(int fd, void *buf, size_t n)
{
	size_t have = 0;
	while (have < n) {
		ssize_t r = read(fd, (char *)buf + have, n - have);
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	return have;
}

/*
 * n sequential allowed calls from the caller that is not flooding: as
 * another uid (nobody, in a child) when we are root, since fairness is
 * between peers; else from this process.
 */
static void *probe_main(void *arg)
{
	struct probe *p = arg;
	usleep(300000); /* let the flood build up first */
	int fds[2];
	pid_t pid = getuid() == 0 && pipe(fds) == 0 ? fork() : -2;
	if (pid == 0) {
		close(fds[0]);
		if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
			_exit(1);
		probe_calls(p);
		(void)!write(fds[1], p, sizeof(*p));
		(void)!write(fds[1], p->v, p->k * sizeof(int64_t));
		(void)!write(fds[1], p->sv, p->sk * sizeof(int64_t));
		_exit(0);
	}
	if (pid > 0) {
		close(fds[1]);
		struct probe got;
		if (read_full(fds[0], &got, sizeof(got)) == sizeof(got) && got.k <= (size_t)p->n &&
		    got.sk <= (size_t)p->n) {
			p->failed = got.failed;
			p->k = read_full(fds[0], p->v, got.k * sizeof(int64_t)) / sizeof(int64_t);
			if (p->k == got.k)
				p->sk = read_full(fds[0], p->sv, got.sk * sizeof(int64_t)) /
					sizeof(int64_t);
		} else {
			p->failed = p->n;
		}
		close(fds[0]);
		waitpid(pid, NULL, 0);
	} else {
		probe_calls(p);
	}
	atomic_store(&p->done, true);
	return NULL;
}

/*
 * Run n callers; with secs > 0 for that long (and, with a probe, until the
 * probe is done), else until l->limit requests.
 */
static double run_load(struct load *l, int n, double secs, struct probe *p)
{
	pthread_t th[64], pt;
	atomic_store(&l->stop, false);
	int64_t t0 = cg_now_mono_ns();
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, load_main, l);
	if (p)
		pthread_create(&pt, NULL, probe_main, p);
	if (secs > 0) {
		while ((double)(cg_now_mono_ns() - t0) / 1e9 < secs ||
		       (p && !atomic_load(&p->done)))
			usleep(20000);
		atomic_store(&l->stop, true);
	}
	double dt = (double)(cg_now_mono_ns() - t0) / 1e9; /* the flood's span */
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	if (secs <= 0)
		dt = (double)(cg_now_mono_ns() - t0) / 1e9;
	if (p)
		pthread_join(pt, NULL);
	return dt;
}

/* ---- disk ------------------------------------------------------------------------ */

static uint64_t du_bytes;
static int du_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (flag == FTW_F)
		du_bytes += (uint64_t)st->st_blocks * 512;
	return 0;
}

static uint64_t du(const char *sub)
{
	char p[PATH_MAX * 2];
	snprintf(p, sizeof(p), "%s/%s", state_dir, sub);
	du_bytes = 0;
	(void)nftw(p, du_entry, 32, FTW_PHYS);
	return du_bytes;
}

static uint64_t journal_size(void)
{
	char **names = NULL;
	size_t n = 0;
	uint64_t bytes = 0;
	if (cg_journal_segments(state_dir, &names, &n) != 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char f[PATH_MAX * 2];
		struct stat st;
		snprintf(f, sizeof(f), "%s/journal/%s", state_dir, names[i]);
		if (stat(f, &st) == 0)
			bytes += (uint64_t)st.st_size;
		free(names[i]);
	}
	free(names);
	return bytes;
}

/* Wait until the journal stops growing (the writer and package thread caught up). */
static void settle(void)
{
	uint64_t last = 0;
	for (int i = 0; i < 600; i++) {
		usleep(250000);
		uint64_t now = du("traces") + journal_size();
		if (i > 2 && now == last)
			return;
		last = now;
	}
}

static double run_timed(char *const argv[])
{
	pid_t pid;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	int64_t t0 = cg_now_mono_ns();
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	int st = 0;
	if (rc != 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	double s = (double)(cg_now_mono_ns() - t0) / 1e9;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? s : -s;
}

/* Every regular file under a directory (nftw has no argument for its callback). */
static char **tree_files;
static size_t tree_n, tree_cap;
static uint64_t tree_bytes;

static int tree_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	if (tree_n == tree_cap) {
		size_t nc = tree_cap ? tree_cap * 2 : 4096;
		char **q = realloc(tree_files, nc * sizeof(*q));
		if (!q)
			return -1;
		tree_files = q;
		tree_cap = nc;
	}
	if (!(tree_files[tree_n] = strdup(path)))
		return -1;
	tree_n++;
	tree_bytes += (uint64_t)st->st_size;
	return 0;
}

/*
 * sha256sum over the journal's segments and every file under traces/, as
 * xargs would run it: batches of 4,000 names, one after another. The time
 * of all batches, or < 0 when one failed; *bytes gets what was hashed.
 */
static double sha_all(char **segments, size_t n_seg, uint64_t *bytes)
{
	char p[PATH_MAX * 2];
	snprintf(p, sizeof(p), "%s/traces", state_dir);
	tree_n = 0;
	tree_bytes = 0;
	for (size_t i = 0; i < n_seg; i++) {
		struct stat st;
		if (stat(segments[i], &st) == 0 && tree_entry(segments[i], &st, FTW_F, NULL) != 0)
			return -1;
	}
	if (nftw(p, tree_entry, 32, FTW_PHYS) != 0)
		return -1;
	*bytes = tree_bytes;
	double total = 0;
	char *argv[4002] = { "sha256sum" };
	for (size_t at = 0; at < tree_n;) {
		size_t k = 1;
		while (k <= 4000 && at < tree_n)
			argv[k++] = tree_files[at++];
		argv[k] = NULL;
		double t = run_timed(argv);
		if (t < 0)
			total = -1;
		else if (total >= 0)
			total += t;
	}
	for (size_t i = 0; i < tree_n; i++)
		free(tree_files[i]);
	free(tree_files);
	tree_files = NULL;
	tree_n = tree_cap = 0;
	return total;
}

/*
 * sha256sum over the segment files alone and over all the bytes replay --all
 * checks, then callgate replay --all over the same state (after both: every
 * byte is in the page cache for each).
 */
static void replay_vs_sha(double *t_replay, double *t_sha, double *t_sha_all, uint64_t *all_bytes)
{
	char **names = NULL;
	size_t nn = 0;
	char *argv[4096] = { "sha256sum" };
	size_t n = 1;
	if (cg_journal_segments(state_dir, &names, &nn) != 0)
		nn = 0;
	for (size_t i = 0; i < nn; i++) {
		if (n < 4094) {
			char *p = malloc(PATH_MAX * 2);
			snprintf(p, PATH_MAX * 2, "%s/journal/%s", state_dir, names[i]);
			argv[n++] = p;
		}
		free(names[i]);
	}
	free(names);
	argv[n] = NULL;
	*t_sha = run_timed(argv);
	*t_sha_all = sha_all(argv + 1, n - 1, all_bytes);
	char *rargv[] = {
		cli_exe, "replay", "--all", "--no-write", "--state-dir", state_dir, NULL
	};
	*t_replay = run_timed(rargv);
	for (size_t i = 1; i < n; i++)
		free(argv[i]);
}

/*
 * What the filesystem alone allows: package-shaped writes (a directory, five
 * files of a package's typical sizes, a rename) per second for secs, in
 * tmpdir beside the state. Nothing is deleted until the run ends.
 */
static double fs_package_dirs(double secs)
{
	static const size_t sizes[5] = { 4096, 6144, 2048, 512, 128 };
	static const char *const names[5] = { "events.ndjson", "verdict.json", "verdict.md",
					      "replay.json", "diff.json" };
	char buf[6144], base[PATH_MAX + 16];
	memset(buf, 'x', sizeof(buf));
	snprintf(base, sizeof(base), "%s/fs-floor", tmpdir);
	if (mkdir(base, 0755) != 0)
		return -1;
	double t0 = (double)cg_now_mono_ns() / 1e9, t = t0;
	long n = 0;
	while (t - t0 < secs) {
		char tmp[PATH_MAX + 64], dst[PATH_MAX + 64];
		snprintf(tmp, sizeof(tmp), "%s/.%ld.tmp", base, n);
		snprintf(dst, sizeof(dst), "%s/%ld", base, n);
		int dfd =
		    mkdir(tmp, 0755) == 0 ? open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (dfd < 0)
			return -1;
		for (int i = 0; i < 5; i++) {
			int fd =
			    openat(dfd, names[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (fd < 0 || write(fd, buf, sizes[i]) != (ssize_t)sizes[i]) {
				if (fd >= 0)
					close(fd);
				close(dfd);
				return -1;
			}
			close(fd);
		}
		close(dfd);
		if (rename(tmp, dst) != 0)
			return -1;
		n++;
		t = (double)cg_now_mono_ns() / 1e9;
	}
	return (double)n / (t - t0);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

/* ---- main ------------------------------------------------------------------------- */

static FILE *out;
static bool first = true;
static void kv(const char *k, double v)
{
	fprintf(out, "%s\n  \"%s\": %.6g", first ? "{" : ",", k, v);
	first = false;
	fprintf(stderr, "  %-28s %.6g\n", k, v);
}

int main(int argc, char **argv)
{
	const char *json = NULL;
	long requests = 20000;
	double flood_secs = 8;
	bool quick = false, flood_only = false;
	int pos = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
			requests = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--flood-secs") == 0 && i + 1 < argc)
			flood_secs = strtod(argv[++i], NULL);
		else if (strcmp(argv[i], "--quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
			policy_file = argv[++i];
		else if (strcmp(argv[i], "--flood-only") == 0)
			flood_only = true;
		else if (pos == 0 && ++pos)
			daemon_exe = argv[i];
		else if (pos == 1 && ++pos)
			cli_exe = argv[i];
	}
	if (!daemon_exe || !cli_exe || !json) {
		fprintf(stderr, "usage: bench_daemon CALLGATED CALLGATE --json FILE [--requests N] "
				"[--flood-secs S] [--quick] [--policy FILE] [--flood-only]\n");
		return 2;
	}
	if (quick) {
		requests = requests > 300 ? 300 : requests;
		flood_secs = 1;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/cg-bench-d-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	out = fopen(json, "w");
	if (!out || !mkdtemp(tmpdir))
		return 1;
	snprintf(sock_path, sizeof(sock_path), "%s/cg.sock", tmpdir);
	snprintf(state_dir, sizeof(state_dir), "%s/state", tmpdir);
	snprintf(log_path, sizeof(log_path), "%s/daemon.log", tmpdir);
	(void)chmod(tmpdir, 0755); /* the probe's uid works in it */
	int rc = 1;
	double empty_ms = start_daemon();
	if (empty_ms < 0)
		goto done;
	usleep(200000);
	kv("rss_idle_kib", (double)rss_kib());
	kv("startup_empty_ms", empty_ms);

	/* Allowed calls, idle. */
	/*
	 * 40 idle calls give the median; the flood's probe takes 200, so that its
	 * p99 is the 198th of 200 and not, as with 40, the largest one seen.
	 */
	int pn = quick ? 5 : 40, fn = quick ? 5 : 200;
	struct probe idle = { .n = pn,
			      .v = calloc((size_t)pn, sizeof(int64_t)),
			      .sv = calloc((size_t)pn, sizeof(int64_t)),
			      .until_ns = INT64_MAX };
	if (!idle.v || !idle.sv)
		goto done;
	(void)probe_main(&idle);
	kv("allowed_idle_median_ms", pct_ms(idle.v, idle.k, 50));
	kv("spawn_idle_median_ms", pct_ms(idle.sv, idle.sk, 50));

	/* A 64-caller refused flood, with a probe of allowed calls in it. */
	struct load fl = { .body = REFUSED, .want = "\"status\":\"denied\"" };
	struct probe busy = { .n = fn,
			      .v = calloc((size_t)fn, sizeof(int64_t)),
			      .sv = calloc((size_t)fn, sizeof(int64_t)),
			      .until_ns = cg_now_mono_ns() + (int64_t)(flood_secs * 4e9) };
	if (!busy.v || !busy.sv)
		goto done;
	double dt = run_load(&fl, 64, flood_secs, &busy);
	kv("refused_per_s", (double)atomic_load(&fl.ok) / dt);
	kv("refused_turned_away", (double)atomic_load(&fl.bad));
	kv("allowed_flood_median_ms", pct_ms(busy.v, busy.k, 50));
	kv("allowed_flood_p99_ms", pct_ms(busy.v, busy.k, 99));
	kv("allowed_flood_failed", (double)busy.failed);
	kv("spawn_flood_median_ms", pct_ms(busy.sv, busy.sk, 50));
	kv("spawn_flood_p99_ms", pct_ms(busy.sv, busy.sk, 99));
	settle();

	/*
	 * The same flood with no probe in it: the loop's budget holds the
	 * flooder while another uid's call runs (docs/limits.md), so the rate
	 * above is what a flood gets beside a steady stream of allowed calls,
	 * and this one is the daemon's own throughput for refusals.
	 */
	/*
	 * Its bytes on disk are the refusals' alone: the flood above also
	 * journals its probe's allowed calls, a dozen events each.
	 */
	uint64_t j0 = journal_size(), t0 = du("traces");
	struct load fa = { .body = REFUSED, .want = "\"status\":\"denied\"" };
	dt = run_load(&fa, 64, flood_secs, NULL);
	kv("refused_alone_per_s", (double)atomic_load(&fa.ok) / dt);
	kv("refused_alone_turned_away", (double)atomic_load(&fa.bad));
	settle();
	long refused = atomic_load(&fa.ok);
	if (refused > 0) {
		kv("journal_bytes_per_refused", (double)(journal_size() - j0) / (double)refused);
		kv("trace_bytes_per_refused", (double)(du("traces") - t0) / (double)refused);
	}

	if (flood_only)
		goto replay;

	/* Durable allowed calls with 64 callers. */
	struct load al = { .body = ALLOWED, .want = "\"exit_code\":0" };
	dt = run_load(&al, 64, quick ? 1 : 5, NULL);
	kv("allowed_per_s", (double)atomic_load(&al.ok) / dt);
	kv("allowed_failed", (double)atomic_load(&al.bad));

	/* The machine's floors for the two rates: no callgate in the way. */
	struct load sp = { .spawn = true };
	dt = run_load(&sp, 64, quick ? 1 : 3, NULL);
	kv("floor_spawn_per_s", (double)atomic_load(&sp.ok) / dt);
	/* Each call under net: none (the default view) gets a fresh network
	 * namespace: what making and tearing one down costs, all CPUs busy. */
	long made = 0;
	double ns_us = floor_netns_cpu_us(quick ? 0.3 : 2, 64, &made);
	if (ns_us > 0) {
		kv("floor_netns_cpu_us", ns_us);
		kv("floor_netns_per_s", (double)sysconf(_SC_NPROCESSORS_ONLN) * 1e6 / ns_us);
	}
	char echo[PATH_MAX + 16];
	snprintf(echo, sizeof(echo), "%s/echo.sock", tmpdir);
	pid_t echo_pid = floor_echo_start(echo);
	if (echo_pid > 0) {
		struct load el = { .body = REFUSED, .want = "\"rm\"" };
		target = echo;
		dt = run_load(&el, 64, quick ? 1 : 3, NULL);
		target = sock_path;
		kill(echo_pid, SIGKILL);
		waitpid(echo_pid, NULL, 0);
		kv("floor_echo_per_s", (double)atomic_load(&el.ok) / dt);
	}

	/* Memory around N mixed requests (70% refused, 20% ping, 10% allowed). */
	settle();
	struct load warm = { .mix = 1, .limit = requests / 10 + 1 };
	run_load(&warm, 16, 0, NULL);
	settle();
	kv("rss_warm_kib", (double)rss_kib());
	struct load mix = { .mix = 1, .limit = requests };
	dt = run_load(&mix, 16, 0, NULL);
	kv("mixed_requests", (double)(atomic_load(&mix.ok) + atomic_load(&mix.bad)));
	kv("mixed_failed", (double)atomic_load(&mix.bad));
	kv("mixed_secs", dt);
	kv("rss_after_kib", (double)rss_kib());
	settle();
	kv("rss_settled_kib", (double)rss_kib());

	/* Restart on the grown journal; then full replay against sha256sum. */
	stop_daemon();
	kv("journal_bytes", (double)journal_size());
	kv("startup_ms", start_daemon());
replay:
	stop_daemon();
	double tr = 0, ts = 0, ta = 0;
	uint64_t read_bytes = 0;
	replay_vs_sha(&tr, &ts, &ta, &read_bytes);
	kv("replay_all_s", tr);
	kv("sha256_s", ts);
	kv("sha256_all_s", ta);
	kv("replay_read_bytes", (double)read_bytes);
	if (!flood_only)
		kv("fs_package_dirs_per_s", fs_package_dirs(quick ? 0.3 : 3));
	rc = 0;
done:
	stop_daemon();
	fprintf(out, "%s}\n", first ? "{" : "\n");
	fclose(out);
	if (getenv("CG_BENCH_KEEP"))
		fprintf(stderr, "kept %s\n", tmpdir);
	else
		(void)nftw(tmpdir, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
	return rc;
}
