/* SPDX-License-Identifier: MIT */
/* floor — see floor.h. */
#include "floor.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

int64_t floor_spawn_true(void)
{
	char *argv[] = { "/bin/true", NULL };
	int64_t t0 = cg_now_mono_ns();
	pid_t pid;
	int st;
	if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) != 0 ||
	    waitpid(pid, &st, 0) != pid)
		return -1;
	return cg_now_mono_ns() - t0;
}

/* Busy clock ticks of every CPU so far (all of /proc/stat's cpu line but idle and iowait). */
static long long busy_ticks(void)
{
	FILE *f = fopen("/proc/stat", "re");
	long long v[8] = { 0 };
	int n = f ? fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7])
		  : 0;
	if (f)
		fclose(f);
	return n == 8 ? v[0] + v[1] + v[2] + v[5] + v[6] + v[7] : -1;
}

struct churn {
	atomic_bool stop;
	atomic_long made;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	while (home >= 0 && !atomic_load(&c->stop)) {
		if (unshare(CLONE_NEWNET) != 0)
			break;
		if (setns(home, CLONE_NEWNET) != 0)
			break; /* this thread stays in the last one; it only churns */
		atomic_fetch_add(&c->made, 1);
	}
	if (home >= 0)
		close(home);
	return NULL;
}

double floor_netns_cpu_us(double secs, int threads, long *count)
{
	struct churn c = { .stop = false, .made = 0 };
	pthread_t th[64];
	int n = threads < 64 ? threads : 64, started = 0;
	long long b0 = busy_ticks();
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, churn_main, &c) == 0)
			started++;
	usleep((useconds_t)(secs * 1e6));
	atomic_store(&c.stop, true);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	/* The teardowns run after the last setns: wait until the CPUs are
	 * nearly idle again (under a tenth of one CPU over 200 ms), 20 s at most. */
	long hz = sysconf(_SC_CLK_TCK);
	for (int i = 0; i < 100; i++) {
		long long a = busy_ticks();
		usleep(200000);
		if (busy_ticks() - a < hz / 50)
			break;
	}
	long long b1 = busy_ticks();
	*count = atomic_load(&c.made);
	if (b0 < 0 || b1 < 0 || *count == 0 || hz <= 0)
		return -1;
	return (double)(b1 - b0) * 1e6 / (double)hz / (double)*count;
}

pid_t floor_echo_start(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 4096) < 0) {
		if (l >= 0)
			close(l);
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		char b[4096];
		for (;;) {
			int c = accept(l, NULL, NULL);
			if (c < 0 && (errno == ECONNABORTED || errno == EINTR))
				continue; /* a peer that left before it was taken */
			if (c < 0)
				_exit(0);
			ssize_t r = read(c, b, sizeof(b));
			if (r > 0)
				(void)!write(c, b, (size_t)r);
			close(c);
		}
	}
	close(l);
	return pid;
}
