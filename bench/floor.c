/* SPDX-License-Identifier: MIT */
/* floor — see floor.h. */
#include "floor.h"

#include <errno.h>
#include <spawn.h>
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
