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
 * It is exec'd once per call, so its start-up is on every call's path. On
 * x86_64 it is built without a C library (CG_INIT_BARE): a libc's start-up
 * probes the CPU with cpuid, which a virtual machine traps, and that cost
 * ~280 us of the ~380 us a static libc program takes to start and exit on
 * the development VM (~100 us without). The few system calls it makes are
 * then made directly; the logic below is the same either way. It is then
 * a static PIE that nothing relocates: no pointer may live in static data
 * (every address below is taken at run time, relative to the code).
 *
 * Usage (by the daemon only): callgate-init PID, PID being the command's
 * pid in the namespace. Exit 127 on a usage error.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifdef CG_INIT_BARE
/* ---- the system calls, without a C library (x86_64 only) ----------------- */

static long sys(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return r; /* -errno on failure */
}

/* The kernel's struct sigaction (not the C library's). */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};
#define KSA_RESTORER 0x04000000UL

/* Where a handler returns to: rt_sigreturn. */
void cg_init_restore(void);
__asm__(".text\n.globl cg_init_restore\n.type cg_init_restore,@function\n"
	"cg_init_restore:\n\tmov $15, %eax\n\tsyscall\n\thlt\n");

static void init_prctl(int op, unsigned long v)
{
	(void)sys(SYS_prctl, op, (long)v, 0, 0);
}
static void init_kill(int pid, int sig)
{
	(void)sys(SYS_kill, pid, sig, 0, 0);
}
static void init_handle(int sig, void (*fn)(int))
{
	struct ksigaction sa = { fn, KSA_RESTORER, cg_init_restore, 0 };
	(void)sys(SYS_rt_sigaction, sig, (long)&sa, 0, sizeof(sa.mask));
}
static void init_unblock_all(void)
{
	unsigned long none = 0;
	(void)sys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, sizeof(none));
}
/* waitpid(-1, status, 0): the pid, or -1 with *err. */
static int init_wait(int *status, int *err)
{
	long r = sys(SYS_wait4, -1, (long)status, 0, 0);
	*err = r < 0 ? (int)-r : 0;
	return r < 0 ? -1 : (int)r;
}
static _Noreturn void init_exit(int code)
{
	for (;;)
		(void)sys(SYS_exit_group, code, 0, 0, 0);
}
#else
/* ---- the same, through the C library ------------------------------------- */
#include <string.h>
#include <unistd.h>

static void init_prctl(int op, unsigned long v)
{
	(void)prctl(op, v, 0, 0, 0);
}
static void init_kill(int pid, int sig)
{
	(void)kill(pid, sig);
}
static void init_handle(int sig, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(sig, &sa, NULL);
}
static void init_unblock_all(void)
{
	sigset_t none;
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
}
static int init_wait(int *status, int *err)
{
	pid_t w = waitpid(-1, status, 0);
	*err = w < 0 ? errno : 0;
	return (int)w;
}
static _Noreturn void init_exit(int code)
{
	_exit(code);
}
#endif

/* ---- pid 1 ------------------------------------------------------------------ */

static volatile int command;

static void forward(int sig)
{
	if (command > 0)
		init_kill(command, sig);
}

/* "PID" in 2..4194304 (pid_max's ceiling), digits only; else 0. */
static int parse_pid(const char *s)
{
	long v = 0;
	if (!s || !*s)
		return 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 4194304)
			return 0;
		v = v * 10 + (*s - '0');
	}
	return v >= 2 && v <= 4194304 ? (int)v : 0;
}

static _Noreturn void init_main(int argc, char **argv)
{
	/* Nothing here is worth a debugger's attention; keep it that way. */
	init_prctl(PR_SET_DUMPABLE, 0);
	/* Started: the call lives on if the daemon dies, as a forked one does. */
	init_prctl(PR_SET_PDEATHSIG, 0);
	int pid = argc == 2 ? parse_pid(argv[1]) : 0;
	if (!pid)
		init_exit(127);
	command = pid;
	static const int fwd[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	for (size_t i = 0; i < sizeof(fwd) / sizeof(fwd[0]); i++)
		init_handle(fwd[i], forward);
	init_unblock_all();

	int st = 0;
	for (;;) {
		int s = 0, err = 0;
		int w = init_wait(&s, &err);
		if (w == pid) {
			st = s;
			break;
		}
		if (w < 0 && err != EINTR)
			init_exit(127); /* the command is not our child: never expected */
	}
	init_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
}

#ifdef CG_INIT_BARE
void cg_init_start(long *sp);
void cg_init_start(long *sp)
{
	init_main((int)sp[0], (char **)(sp + 1));
}
/* The kernel's entry: argc at the stack pointer, argv after it. */
__asm__(".text\n.globl _start\n.type _start,@function\n"
	"_start:\n\txor %ebp, %ebp\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n"
	"\tcall cg_init_start\n\thlt\n");
#else
int main(int argc, char **argv)
{
	init_main(argc, argv);
}
#endif
