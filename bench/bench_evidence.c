/* SPDX-License-Identifier: MIT */
/*
 * bench_evidence — throughput of the evidence trail (issue 5):
 *   1. events appended per second, buffered and durable, with 1, 8 and 64
 *      concurrent callers (durable = each append waits for fdatasync; group
 *      commit shares syncs between callers);
 *   2. governed calls per second as the kernel records them (9 events with
 *      one durable permit, then a seal with its replay step, checkpoint and
 *      trace package), 64 callers;
 *   3. governed calls per second through cg_kernel_handle() with evidence
 *      on versus off (real /bin/true runs);
 *   4. replay verification throughput (MB/s of journal) beside sha256sum
 *      over the same segment files, in the same run;
 *   5. start-up (cg_evidence_open) on a journal of MB megabytes: from the
 *      last signed checkpoint, and verifying the whole journal.
 *
 * Usage: bench_evidence [DIR [kernel | calls [nopkg] | replay STATE | startup [MB]]]
 *        (DIR: where state dirs are made; default /tmp)
 * Nothing here asserts a speed; it prints numbers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "callgate.h"
#include "evidence.h"
#include "journal.h"
#include "replay.h"
#include "util.h"

extern char **environ;

static const char *base = "/tmp";

static double now_s(void)
{
	return (double)cg_now_mono_ns() / 1e9;
}

static void rmrf(const char *p)
{
	pid_t pid;
	char path[4096];
	snprintf(path, sizeof(path), "%s", p);
	char *argv[] = { "rm", "-rf", path, NULL };
	if (posix_spawn(&pid, "/bin/rm", NULL, NULL, argv, environ) == 0)
		waitpid(pid, NULL, 0);
}

static struct cg_evidence *open_state(char *dir, size_t n, bool traces)
{
	snprintf(dir, n, "%s/cg-bench-ev-XXXXXX", base);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	struct cg_evidence_config c = { .state_dir = dir, .write_traces = traces };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	if (cg_evidence_open(&c, &ev, &err) != 0) {
		fprintf(stderr, "open: %s\n", cg_reply_def_of(err)->key);
		exit(1);
	}
	return ev;
}

struct worker {
	struct cg_evidence *ev;
	int idx, n;
	bool durable;
	int mode; /* 0: single events, 1: governed calls */
	int fails;
};

static void call_events(struct worker *w, const char *id)
{
	static const enum cg_event_type seq[] = { CG_EV_REQUEST,    CG_EV_RESOLVED, CG_EV_RUNG,
						  CG_EV_RUNG,	    CG_EV_DECISION, CG_EV_PERMIT,
						  CG_EV_EXEC_START, CG_EV_EXEC_END, CG_EV_VERDICT };
	for (size_t i = 0; i < CG_ARRAY_LEN(seq); i++) {
		json_t *p = seq[i] == CG_EV_DECISION
				? json_pack("{s:s, s:s}", "decision", "ALLOW", "rule_id", "bench")
				: json_pack("{s:s, s:[[s]]}", "note", "benchmark payload",
					    "pipeline", "/bin/true");
		if (cg_evidence_append(w->ev, id, seq[i], p, seq[i] == CG_EV_PERMIT) != 0)
			w->fails++;
	}
	if (cg_evidence_seal(w->ev, id,
			     json_pack("{s:s, s:s, s:{s:s, s:s, s:s}}", "decision", "ALLOW",
				       "rule_id", "bench", "reply", "type", "S", "code",
				       "MCP-EXEC-S-001", "message", "ran")) != 0)
		w->fails++;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	char id[48];
	for (int i = 0; i < w->n; i++) {
		/* Calls have about ten events each: ten events per trace. */
		if (w->mode == 1)
			snprintf(id, sizeof(id), "b%d-%d", w->idx, i);
		else
			snprintf(id, sizeof(id), "b%d-%d", w->idx, i / 10);
		if (w->mode == 1) {
			call_events(w, id);
		} else if (cg_evidence_append(w->ev, id, CG_EV_REQUEST,
					      json_pack("{s:s}", "note", "benchmark payload"),
					      w->durable) != 0) {
			w->fails++;
		}
	}
	return NULL;
}

static double last_join_s; /* callers done (events appended, permits durable) */

static double run_threads(struct cg_evidence *ev, int nthreads, int per, bool durable, int mode)
{
	pthread_t th[64];
	struct worker w[64];
	double t0 = now_s();
	for (int i = 0; i < nthreads; i++) {
		w[i] = (struct worker){ ev, i, per, durable, mode, 0 };
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	int fails = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		fails += w[i].fails;
	}
	last_join_s = now_s() - t0;
	if (cg_evidence_flush(ev) != 0)
		fails++;
	double dt = now_s() - t0;
	if (fails)
		fprintf(stderr, "  (%d failures)\n", fails);
	return dt;
}

static void bench_appends(void)
{
	const int threads[] = { 1, 8, 64 };
	for (int d = 0; d < 2; d++) {
		for (size_t t = 0; t < CG_ARRAY_LEN(threads); t++) {
			char dir[256];
			struct cg_evidence *ev = open_state(dir, sizeof(dir), false);
			int total = d ? (threads[t] == 1 ? 2000 : 20000) : 200000;
			int per = total / threads[t];
			double dt = run_threads(ev, threads[t], per, d == 1, 0);
			printf("append %-8s %2d callers: %9.0f events/s  (%d events, %.2f s)\n",
			       d ? "durable" : "buffered", threads[t], per * threads[t] / dt,
			       per * threads[t], dt);
			cg_evidence_close(ev);
			rmrf(dir);
		}
	}
}

static void bench_calls(char *keep_dir, size_t keep_len, bool packages)
{
	struct cg_evidence *ev = open_state(keep_dir, keep_len, packages);
	int n = 64, per = 200;
	double dt = run_threads(ev, n, per, true, 1);
	printf("governed calls (evidence only: 9 events, durable permit, seal%s), 64 callers: "
	       "%.0f calls/s answered, %.0f calls/s with packages on disk (%d calls)\n",
	       packages ? ", package" : ", no package", n * per / last_join_s, n * per / dt,
	       n * per);
	/* More volume for the replay measurement, without packages. */
	cg_evidence_close(ev);
}

/* ---- through the kernel ---------------------------------------------------------- */

struct kworker {
	struct cg_kernel *k;
	int n, ok;
};

static void *kwork(void *arg)
{
	struct kworker *w = arg;
	struct cg_peer peer = { getpid(), getuid(), getgid() };
	for (int i = 0; i < w->n; i++) {
		char ts[40], id[40], line[512];
		cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
		cg_uuid4(id, sizeof(id));
		int len = snprintf(line, sizeof(line),
				   "{\"id\":\"%s\",\"time\":\"%s\",\"pipeline\":[[\"/bin/true\"]],"
				   "\"privileged\":false}",
				   id, ts);
		size_t rl = 0;
		char *resp = cg_kernel_handle(w->k, line, (size_t)len, true, &peer, &rl);
		if (resp && strstr(resp, "\"status\":\"ok\""))
			w->ok++;
		free(resp);
	}
	return NULL;
}

static void bench_kernel(void)
{
	for (int on = 0; on < 2; on++) {
		char dir[256];
		snprintf(dir, sizeof(dir), "%s/cg-bench-k-XXXXXX", base);
		if (!mkdtemp(dir))
			return;
		struct cg_kernel_config c = { .state_dir = on ? dir : NULL };
		struct cg_kernel *k = NULL;
		struct cg_result why;
		if (cg_kernel_new(&c, &k, &why) != 0) {
			printf("kernel: not available (%s %s)\n", why.code, why.message);
			rmrf(dir);
			return;
		}
		enum { NT = 8, PER = 150 };
		pthread_t th[NT];
		struct kworker w[NT];
		double t0 = now_s();
		for (int i = 0; i < NT; i++) {
			w[i] = (struct kworker){ k, PER, 0 };
			pthread_create(&th[i], NULL, kwork, &w[i]);
		}
		int ok = 0;
		for (int i = 0; i < NT; i++) {
			pthread_join(th[i], NULL);
			ok += w[i].ok;
		}
		double dt = now_s() - t0;
		printf(
		    "governed calls via cg_kernel_handle (/bin/true), evidence %-3s: %6.0f calls/s "
		    "(%d/%d ok, %d callers)\n",
		    on ? "on" : "off", NT * PER / dt, ok, NT * PER, NT);
		cg_kernel_shutdown(k);
		cg_kernel_free(k);
		rmrf(dir);
	}
}

/* ---- replay versus sha256sum ------------------------------------------------------ */

static void bench_replay(const char *dir)
{
	char **names;
	size_t n;
	if (cg_journal_segments(dir, &names, &n) != 0 || n == 0)
		return;
	char **argv = calloc(n + 2, sizeof(char *));
	argv[0] = "sha256sum";
	uint64_t bytes = 0;
	for (size_t i = 0; i < n; i++) {
		char p[4300];
		snprintf(p, sizeof(p), "%s/journal/%s", dir, names[i]);
		argv[i + 1] = strdup(p);
		struct stat st;
		if (stat(p, &st) == 0)
			bytes += (uint64_t)st.st_size;
	}
	double mb = (double)bytes / 1e6;
	/* Warm the page cache so both read from memory. */
	struct cg_journal_view jv;
	if (cg_journal_load(dir, &jv, NULL) == 0)
		cg_journal_view_free(&jv);

	double t0 = now_s();
	pid_t pid;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (posix_spawnp(&pid, "sha256sum", &fa, NULL, argv, environ) == 0)
		waitpid(pid, NULL, 0);
	double t_sha = now_s() - t0;
	posix_spawn_file_actions_destroy(&fa);

	t0 = now_s();
	struct cg_replay_opts o = { .state_dir = dir, .all = true, .write_files = false };
	json_t *rep = NULL;
	int rc = cg_replay_run(&o, &rep);
	double t_all = now_s() - t0;
	json_decref(rep);

	printf("replay over %.1f MB of journal (%zu segment(s)):\n", mb, n);
	printf("  sha256sum                    %8.1f MB/s\n", mb / t_sha);
	printf("  replay --all (with packages) %8.1f MB/s  (%.2fx sha256sum, %s)\n", mb / t_all,
	       t_sha / t_all, rc == 0 ? "PASS" : "FAIL");
	for (size_t i = 1; i <= n; i++)
		free(argv[i]);
	free(argv);
	cg_strv_free(names, n);
}

/* ---- start-up from the last signed checkpoint ------------------------------------- */

struct fill {
	struct cg_evidence *ev;
	int idx;
	uint64_t target, *written; /* bytes of journal to reach, shared estimate */
	pthread_mutex_t *mu;
};

/* Sealed calls of ten ~700-byte events, buffered (no fsync each), until the journal is big. */
static void *fill_work(void *arg)
{
	struct fill *f = arg;
	char note[600];
	memset(note, 'n', sizeof(note) - 1);
	note[sizeof(note) - 1] = '\0';
	for (int i = 0;; i++) {
		pthread_mutex_lock(f->mu);
		bool done = *f->written >= f->target;
		*f->written += 10 * 900;
		pthread_mutex_unlock(f->mu);
		if (done)
			break;
		char id[48];
		snprintf(id, sizeof(id), "s%d-%d", f->idx, i);
		int fails = 0;
		for (int e = 0; e < 9; e++)
			fails += cg_evidence_append(f->ev, id, e == 4 ? CG_EV_DECISION : CG_EV_RUNG,
						    e == 4 ? json_pack("{s:s, s:s}", "decision",
								       "BLOCK", "rule_id", "bench")
							   : json_pack("{s:s}", "note", note),
						    false) != 0;
		fails += cg_evidence_seal(
			     f->ev, id,
			     json_pack("{s:s, s:s}", "decision", "BLOCK", "rule_id", "bench")) != 0;
		if (fails) {
			fprintf(stderr, "bench_startup: an append failed\n");
			exit(1);
		}
	}
	return NULL;
}

static double open_ms(const char *dir, bool verify_all)
{
	struct cg_evidence_config c = { .state_dir = dir, .verify_all = verify_all };
	struct cg_evidence *ev = NULL;
	struct cg_reply *err = NULL;
	double t0 = now_s();
	if (cg_evidence_open(&c, &ev, &err) != 0) {
		fprintf(stderr, "open: %s\n", cg_reply_def_of(err)->key);
		exit(1);
	}
	double ms = (now_s() - t0) * 1e3;
	cg_evidence_close(ev);
	return ms;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void bench_startup(uint64_t mb)
{
	char dir[256];
	struct cg_evidence *ev = open_state(dir, sizeof(dir), false);
	uint64_t written = 0;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_t th[2];
	struct fill f[2];
	double t0 = now_s();
	for (int i = 0; i < 2; i++) {
		f[i] = (struct fill){ ev, i, mb << 20, &written, &mu };
		pthread_create(&th[i], NULL, fill_work, &f[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cg_evidence_close(ev);
	double fill_s = now_s() - t0;
	char **names;
	size_t n;
	uint64_t bytes = 0;
	if (cg_journal_segments(dir, &names, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			char p[4300];
			struct stat st;
			snprintf(p, sizeof(p), "%s/journal/%s", dir, names[i]);
			if (stat(p, &st) == 0)
				bytes += (uint64_t)st.st_size;
		}
		cg_strv_free(names, n);
	}
	double full = open_ms(dir, true); /* also warms the page cache for both */
	double v[5];
	for (int i = 0; i < 5; i++)
		v[i] = open_ms(dir, false);
	qsort(v, 5, sizeof(v[0]), cmp_double);
	printf("start-up with a %.0f MB journal (%zu segments, written in %.1f s): "
	       "%.1f ms from the last checkpoint (median of 5), %.1f ms verifying all (%.4fx)\n",
	       (double)bytes / 1e6, n, fill_s, v[2], full, v[2] / full);
	rmrf(dir);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		base = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	bool only_kernel = argc > 2 && strcmp(argv[2], "kernel") == 0;
	if (only_kernel) {
		bench_kernel();
		return 0;
	}
	if (argc > 2 && strcmp(argv[2], "startup") == 0) {
		bench_startup(argc > 3 ? strtoull(argv[3], NULL, 10) : 1024);
		return 0;
	}
	if (argc > 3 && strcmp(argv[2], "replay") == 0) {
		bench_replay(argv[3]);
		return 0;
	}
	if (argc > 2 && strcmp(argv[2], "calls") == 0) {
		char d[256];
		bench_calls(d, sizeof(d), argc <= 3 || strcmp(argv[3], "nopkg") != 0);
		bench_replay(d);
		if (argc > 4)
			printf("kept %s\n", d);
		else
			rmrf(d);
		return 0;
	}
	bench_appends();
	char dir[256];
	bench_calls(dir, sizeof(dir), false);
	rmrf(dir);
	bench_calls(dir, sizeof(dir), true);
	bench_replay(dir);
	rmrf(dir);
	bench_kernel();
	return 0;
}
