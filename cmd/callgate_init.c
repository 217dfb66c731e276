/* SPDX-License-Identifier: MIT */
/*
 * callgate-init — pid 1 of a confined call's namespaces, once the command
 * has started (src/confine/view.c, "Pid 1").
 *
 * The daemon builds a call's view in a process that shares the daemon's
 * memory (no copy of its page tables), starts the command as pid 2, and
 * then execs this program in that same process: from here on pid 1 holds
 * nothing of the daemon. Its only work is an init's: forward the signals
 * a supervisor sends (pid 1 of a namespace ignores every signal it has no
 * handler for), reap whatever is re-parented to it, and exit with the
 * command's status, or 128 + the signal that ended it. When it exits the
 * kernel kills whatever is left in the namespace.
 *
 * Usage (by the daemon only): callgate-init PID, PID being the command's
 * pid in the namespace. Exit 127 on a usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t command;

static void forward(int sig)
{
	if (command > 0)
		(void)kill(command, sig);
}

int main(int argc, char **argv)
{
	/* Nothing here is worth a debugger's attention; keep it that way. */
	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* Started: the call lives on if the daemon dies, as a forked one does. */
	(void)prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
	if (argc != 2)
		return 127;
	char *end = NULL;
	errno = 0;
	long pid = strtol(argv[1], &end, 10);
	if (errno || !end || *end || pid <= 1 || pid > 4194304)
		return 127;
	command = (pid_t)pid;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward;
	sigemptyset(&sa.sa_mask);
	const int fwd[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	for (size_t i = 0; i < sizeof(fwd) / sizeof(fwd[0]); i++)
		(void)sigaction(fwd[i], &sa, NULL);
	sigset_t none;
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);

	int st = 0;
	for (;;) {
		int s;
		pid_t w = waitpid(-1, &s, 0);
		if (w == command) {
			st = s;
			break;
		}
		if (w < 0 && errno != EINTR)
			return 127; /* the command is not our child: never expected */
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
}
