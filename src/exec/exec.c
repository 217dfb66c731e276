/* SPDX-License-Identifier: MIT */
/*
 * exec — the pipeline runner: forks and execs the resolved stages of a call
 * joined by pipes (never a shell), captures their output with a hard cap,
 * enforces the deadline and cancellation on the whole process tree, and
 * reaps everything before it returns.
 *
 * Shape of one run: the parent opens every pipe (O_CLOEXEC), pins the
 * working directory with an O_PATH fd checked against the resolved path,
 * creates the call's process tree, then starts one child per stage (a fork,
 * or for a view a child that shares memory until it execs). Each
 * child joins the tree, restores default signal handling, wires its stdio,
 * marks every other fd close-on-exec, enters the cwd, applies confinement
 * and execs; a failure on the way is reported through a close-on-exec error
 * pipe (one per stage) that the parent reads before it forks the next stage.
 * The parent then polls output pipes, one pidfd per stage, the cancel fd and
 * the deadline until every stage is reaped, every pipe is at EOF and the tree
 * is empty.
 *
 * Invariants:
 *  - Children MUST inherit no fd but 0, 1 and 2 (fds are CLOEXEC, and the
 *    child marks all others CLOEXEC before exec): a leaked daemon socket or
 *    journal fd would be the agent's to write.
 *  - Between fork and exec the child MUST only make async-signal-safe calls:
 *    the daemon is multi-threaded and another thread may hold malloc's lock.
 *    A stage in a view may share the daemon's memory until it execs
 *    (cg_confine_spawn): it writes to nothing but its own stack.
 *  - Children MUST start with default dispositions and an empty signal mask
 *    (the daemon blocks signals for signalfd and ignores SIGPIPE); otherwise
 *    `yes | head -1` never ends and TERM could be blocked.
 *  - Output past the cap MUST still be read (and dropped): a child blocked on
 *    a full pipe would otherwise hold the call until its deadline.
 *  - cg_exec_run MUST NOT return while a stage or a known descendant still
 *    runs: deadline, cancel and escaped grandchildren all end in TERM, a
 *    grace period, then KILL; the wait on pipes held by processes the tree
 *    cannot reach is bounded too.
 */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/close_range.h>

/* After KILL, how long to wait for pipes held by processes we cannot reach. */
#define EXEC_REAP_LIMIT_MS 2000
/* Without pidfds, how often to look for exited stages. */
#define EXEC_TICK_MS 10
/* Bytes read from one pipe per poll round (keeps one fast stream from starving others). */
#define EXEC_READ_CHUNK	     (64 * 1024)
#define EXEC_READS_PER_ROUND 8

#define NS_PER_MS 1000000LL

/* Where a child failed before exec, reported with the errno through the error pipe. */
enum child_step {
	STEP_JOIN = 1,
	STEP_FDS,
	STEP_CHDIR,
	STEP_CONFINE,
	STEP_EXEC,
	STEP_READY, /* not a failure: the command is at its execve (child_ready) */
};

static const char *step_name(int step)
{
	switch (step) {
	case STEP_JOIN:
		return "join";
	case STEP_FDS:
		return "fds";
	case STEP_CHDIR:
		return "chdir";
	case STEP_CONFINE:
		return "confine";
	case STEP_EXEC:
		return "exec";
	default:
		return "fork";
	}
}

/* Everything one child needs, prepared by the parent before fork. */
struct child_args {
	const struct cg_tree *tree;
	pid_t leader;  /* 0 for the first stage, else the first stage's pid */
	int in_fd;     /* becomes 0 */
	int out_fd;    /* becomes 1 */
	int err_fd;    /* becomes 2 */
	int dir_fd;    /* O_PATH fd of the verified cwd */
	int report_fd; /* error pipe, write end (CLOEXEC: closes on successful exec) */
	const char *exe;
	char *const *argv;
	char *const *envp;
	const struct cg_confine_plan *plan;
};

/* Child only: report (step, errno) to the parent and die. Async-signal-safe. */
__attribute__((noreturn)) static void child_fail(int report_fd, int step, int err)
{
	int msg[2] = { step, err };
	/* A short write cannot happen for 8 bytes into an empty pipe. */
	ssize_t w = write(report_fd, msg, sizeof(msg));
	(void)w;
	_exit(127);
}

/* Child only: how cg_confine_exec reports, in our steps. */
__attribute__((noreturn)) static void confine_failed(int report_fd, int step, int err)
{
	child_fail(report_fd,
		   step == CG_CONFINE_STEP_EXEC	 ? STEP_EXEC
		   : step == CG_CONFINE_STEP_CWD ? STEP_CHDIR
						 : STEP_CONFINE,
		   err);
}

/* Child only: the command is at its execve, its permit and confinement in place. */
static void child_ready(int report_fd)
{
	int msg[2] = { STEP_READY, 0 };
	ssize_t w = write(report_fd, msg, sizeof(msg));
	(void)w; /* the parent reads EOF alone then: a death, never a run it did not see */
}

/* Child only: dup fd to a number >= 3 so that dup2 onto 0..2 cannot clobber it. */
static int child_lift(int fd, int report_fd)
{
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (hi < 0)
		child_fail(report_fd, STEP_FDS, errno);
	return hi;
}

/*
 * Child only, between fork and exec: async-signal-safe calls exclusively.
 * The order matters: join the tree first so a deadline can reach the child
 * from the start; restore signals before anything can block; wire fds
 * before confinement (which may need its own fds until exec).
 */
__attribute__((noreturn)) static void child_run(const struct child_args *a)
{
	/* The error pipe may itself sit on 0..2 if the daemon closed its stdio. */
	int report_fd = fcntl(a->report_fd, F_DUPFD_CLOEXEC, 3);
	if (report_fd < 0)
		_exit(127);

	int e = cg_tree_child_join(a->tree, a->leader);
	if (e != 0)
		child_fail(report_fd, STEP_JOIN, e);

	/* Defaults first, then unblock: a parent handler must never run here. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL); /* SIGKILL/SIGSTOP and RT slots may refuse */
	sigset_t none;
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);

	int in_hi = child_lift(a->in_fd, report_fd);
	int out_hi = child_lift(a->out_fd, report_fd);
	int err_hi = child_lift(a->err_fd, report_fd);
	int dir_hi = child_lift(a->dir_fd, report_fd);
	if (dup2(in_hi, 0) < 0 || dup2(out_hi, 1) < 0 || dup2(err_hi, 2) < 0)
		child_fail(report_fd, STEP_FDS, errno);

	/*
	 * Mark every fd >= 3 close-on-exec rather than closing it: the error
	 * pipe, the cwd fd and whatever the confinement plan opened must stay
	 * usable until execve, and nothing of it may survive execve.
	 */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
		/* Older kernels: close all but the fds still needed. */
		int keep_lo = report_fd < dir_hi ? report_fd : dir_hi;
		int keep_hi = report_fd < dir_hi ? dir_hi : report_fd;
		if ((keep_lo > 3 && close_range(3, (unsigned)keep_lo - 1, 0) != 0) ||
		    (keep_hi > keep_lo + 1 &&
		     close_range((unsigned)keep_lo + 1, (unsigned)keep_hi - 1, 0) != 0) ||
		    close_range((unsigned)keep_hi + 1, ~0U, 0) != 0)
			child_fail(report_fd, STEP_FDS, errno);
	}

	if (fchdir(dir_hi) != 0)
		child_fail(report_fd, STEP_CHDIR, errno);
	/* Never returns: a failure is reported by whichever process met it. */
	cg_confine_exec(a->plan, a->exe, a->argv, a->envp, confine_failed, child_ready, report_fd);
}

static int child_main(void *arg)
{
	child_run(arg);
}

/* Per-run bookkeeping of the parent. */
struct proc {
	pid_t pid;
	int pidfd; /* -1: poll by waitpid(WNOHANG) every tick */
	bool reaped;
};

struct stream {
	int fd; /* read end, O_NONBLOCK; -1 once at EOF */
	struct cg_buf *buf;
};

struct run {
	const struct cg_exec_spec *spec;
	struct cg_exec_result *res;
	struct cg_tree *tree;
	size_t n;
	struct proc *procs;	/* n */
	struct stream *streams; /* n + 1: stdout of the last stage, then each stderr */
	size_t budget;		/* bytes the call's streams may still keep, all together */
	int *child_fds;		/* fds only children use: closed by the parent after forking */
	size_t n_child_fds;
	int dir_fd;
	size_t started; /* stages forked */
};

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		(void)close(*fd);
		*fd = -1;
	}
}

static void close_child_fds(struct run *r)
{
	for (size_t i = 0; i < r->n_child_fds; i++)
		close_fd(&r->child_fds[i]);
	close_fd(&r->dir_fd);
}

static void record_status(struct run *r, size_t i, int status)
{
	struct cg_stage_result *sr = &r->res->stages[i];
	r->procs[i].reaped = true;
	close_fd(&r->procs[i].pidfd);
	sr->raw_status = status;
	if (WIFEXITED(status))
		sr->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		sr->exit_code = 128 + WTERMSIG(status);
	else
		sr->exit_code = -1;
}

/* Reap stage i if it has exited (or wait for it when block). */
static void try_reap(struct run *r, size_t i, bool block)
{
	int status;
	if (r->procs[i].reaped || r->procs[i].pid <= 0)
		return;
	pid_t p = waitpid(r->procs[i].pid, &status, block ? 0 : WNOHANG);
	while (p < 0 && errno == EINTR)
		p = waitpid(r->procs[i].pid, &status, block ? 0 : WNOHANG);
	if (p == r->procs[i].pid)
		record_status(r, i, status);
	else if (p < 0) {
		/*
		 * ECHILD: the status is lost (SIGCHLD set to SIG_IGN auto-reaps).
		 * Report -1, never a made-up success.
		 */
		r->procs[i].reaped = true;
		close_fd(&r->procs[i].pidfd);
		r->res->stages[i].raw_status = -1;
		r->res->stages[i].exit_code = -1;
	}
}

static size_t count_unreaped(const struct run *r)
{
	size_t k = 0;
	for (size_t i = 0; i < r->started; i++)
		k += !r->procs[i].reaped;
	return k;
}

static size_t count_open(const struct run *r)
{
	size_t k = 0;
	for (size_t i = 0; i < r->n + 1; i++)
		k += r->streams[i].fd >= 0;
	return k;
}

/* Signal the tree and, by pid, every unreaped stage (a stage is our child: its pid is stable). */
static void signal_all(struct run *r, int sig)
{
	cg_tree_kill(r->tree, sig);
	for (size_t i = 0; i < r->started; i++)
		if (!r->procs[i].reaped)
			(void)kill(r->procs[i].pid, sig);
}

/* Failure before the pipeline ran: kill and reap what started, release everything. */
static void abort_started(struct run *r)
{
	signal_all(r, SIGKILL);
	for (size_t i = 0; i < r->started; i++)
		try_reap(r, i, true);
}

/*
 * Read what one stream has now; EOF closes it. Bytes past the stream's cap,
 * or past the call's total (*budget, shared by every stream), are dropped
 * and counted; the stream is then marked cut.
 */
static void drain(struct stream *s, size_t *budget)
{
	unsigned char chunk[EXEC_READ_CHUNK];
	for (int k = 0; k < EXEC_READS_PER_ROUND && s->fd >= 0; k++) {
		ssize_t got = cg_read_some(s->fd, chunk, sizeof(chunk));
		if (got > 0) {
			size_t keep = (size_t)got < *budget ? (size_t)got : *budget;
			size_t before = s->buf->len;
			/* Out of memory keeps draining; the output is then marked cut. */
			if (cg_buf_add(s->buf, chunk, keep) != 0)
				s->buf->truncated = true;
			*budget -= s->buf->len - before;
			if (keep < (size_t)got) {
				s->buf->seen += (uint64_t)got - keep;
				s->buf->truncated = true;
			}
			continue;
		}
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		close_fd(&s->fd); /* EOF, or an error that will not get better */
	}
}

static int pipe_pair(int fds[2])
{
	return pipe2(fds, O_CLOEXEC);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/*
 * Open the cwd as an O_PATH fd and check that it is still the directory the
 * world adapter resolved: the child enters it with fchdir, so a symlink
 * swapped into the path after resolution cannot move the command elsewhere,
 * nor another directory made at that path (while an approval waited) stand
 * in for the one resolved (and shown).
 */
static int pin_cwd(const struct cg_call *call, int *dir_fd, struct cg_reply **err)
{
	const char *cwd = call->cwd;
	char link[64], now[PATH_MAX];
	int fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int e = errno;
		*err = cg_reply_new(CG_R_EXEC_CWD_CHANGED, "{s:s,s:s}", "cwd", cwd, "now",
				    cg_errno_name(e));
		return -1;
	}
	(void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, now, sizeof(now) - 1);
	if (n < 0 || (size_t)n >= sizeof(now) - 1) {
		int e = n < 0 ? errno : ENAMETOOLONG;
		*err = cg_reply_new(CG_R_EXEC_CWD_CHANGED, "{s:s,s:s}", "cwd", cwd, "now",
				    cg_errno_name(e));
		(void)close(fd);
		return -1;
	}
	now[n] = '\0';
	struct stat st;
	if (strcmp(now, cwd) != 0 || fstat(fd, &st) != 0 ||
	    ((call->cwd_dev || call->cwd_ino) &&
	     (st.st_dev != call->cwd_dev || st.st_ino != call->cwd_ino ||
	      cg_dir_btime_ns(fd, "") != call->cwd_btime_ns))) {
		*err = cg_reply_new(CG_R_EXEC_CWD_CHANGED, "{s:s,s:s}", "cwd", cwd, "now",
				    strcmp(now, cwd) != 0 ? now : "another directory at that path");
		(void)close(fd);
		return -1;
	}
	*dir_fd = fd;
	return 0;
}

static struct cg_reply *spawn_failed(size_t stage, const char *exe, int step, int e)
{
	/* Confinement that could not be applied is the confinement's reply, not a spawn bug. */
	if (step == STEP_CONFINE)
		return cg_reply_new(CG_R_CONFINE_CHILD_FAILED, "{s:s,s:I,s:s}", "errno_name",
				    cg_errno_name(e), "stage", (json_int_t)stage, "exe",
				    exe ? exe : "");
	/* The peer's own permissions (s42a F1), as its shell would meet them. */
	if (step == STEP_CHDIR && (e == EACCES || e == ENOENT || e == ENOTDIR || e == ESTALE))
		return cg_reply_new(CG_R_EXEC_CWD_NOT_REACHABLE, "{s:I,s:s,s:s}", "stage",
				    (json_int_t)stage, "exe", exe ? exe : "", "errno_name",
				    cg_errno_name(e));
	/* The request's terms, not a fault (ux-s41 H2: "E, report it" for `time git add`). */
	if (step == STEP_EXEC && e == EACCES)
		return cg_reply_new(CG_R_EXEC_NOT_PERMITTED, "{s:I,s:s}", "stage",
				    (json_int_t)stage, "exe", exe ? exe : "");
	return cg_reply_new(CG_R_EXEC_SPAWN_FAILED, "{s:I,s:s,s:s,s:s}", "stage", (json_int_t)stage,
			    "exe", exe ? exe : "", "errno_name", cg_errno_name(e), "step",
			    step_name(step));
}

/*
 * What a stage's error pipe says, read to its EOF (every holder exec'd or
 * died: the pipe is close-on-exec). READY then EOF: the command exec'd.
 * (step, errno), after READY or alone: it failed there. EOF alone: it died
 * before its execve (its pid 1 killed while the view was built, or the
 * command while it waited for its permit), so nothing of the stage ran,
 * even if it is later reaped with a signal. 0, or -1 with *err.
 */
static int read_report(int fd, size_t stage, const char *exe, struct cg_reply **err)
{
	int msg[4];
	size_t have = 0;
	ssize_t got = 0;
	while (have < sizeof(msg) &&
	       (got = cg_read_some(fd, (char *)msg + have, sizeof(msg) - have)) > 0)
		have += (size_t)got;
	if (have < sizeof(msg) && got < 0) {
		*err = spawn_failed(stage, exe, 0, errno);
		return -1;
	}
	if (have % (2 * sizeof(msg[0])) != 0) {
		*err = spawn_failed(stage, exe, 0, EIO);
		return -1;
	}
	for (size_t k = 0; k + 1 < have / sizeof(msg[0]); k += 2)
		if (msg[k] != STEP_READY) {
			*err = spawn_failed(stage, exe, msg[k], msg[k + 1]);
			return -1;
		}
	if (have == 0) {
		*err = cg_reply_new(CG_R_EXEC_ENDED_BEFORE_START, "{s:I,s:s}", "stage",
				    (json_int_t)stage, "exe", exe ? exe : "");
		return -1;
	}
	return 0;
}

/*
 * Stage n_execd failed to start after the stages before it had (each is
 * spawned once the one before it has exec'd): they ran, and were killed.
 * *err (the failure) becomes the reply that says so, its message kept.
 */
static void partly_started(size_t n_execd, struct cg_reply **err)
{
	if (n_execd == 0 || !*err)
		return;
	const struct cg_reply_def *d = cg_reply_def_of(*err);
	char *detail = cg_reply_message(*err);
	struct cg_reply *r = cg_reply_new(CG_R_EXEC_PARTLY_STARTED, "{s:I,s:I,s:s,s:s}", "stage",
					  (json_int_t)n_execd, "started", (json_int_t)n_execd,
					  "cause", d->code, "detail", detail ? detail : d->key);
	free(detail);
	if (r) {
		cg_reply_free(*err);
		*err = r;
	}
}

/*
 * Open pipes, fork every stage. 0, or -1 with *err after killing and reaping
 * whatever had started.
 */
static int spawn_all(struct run *r, struct cg_reply **err)
{
	const struct cg_call *call = r->spec->call;
	int devnull = -1, prev_read = -1;
	int fds[2];

	/* Worst case: /dev/null, n-1 inter-stage pipes, stdout pipe, n stderr pipes. */
	r->child_fds = calloc(3 * r->n + 2, sizeof(*r->child_fds));
	if (!r->child_fds) {
		*err =
		    cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "setting up the pipeline");
		return -1;
	}
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		goto pipe_failed;
	r->child_fds[r->n_child_fds++] = devnull;
	prev_read = devnull;

	for (size_t i = 0; i < r->n; i++) {
		struct child_args a = {
			.tree = r->tree,
			.leader = i == 0 ? 0 : r->procs[0].pid,
			.in_fd = prev_read,
			.dir_fd = r->dir_fd,
			.exe = call->stages[i].exe,
			.argv = call->req->stages[i].argv,
			.envp = r->spec->envp,
			.plan = cg_confine_stage_plan(r->spec->plan, i),
		};
		/* stdout: into the next stage, or captured from the last one. */
		if (pipe_pair(fds) != 0)
			goto pipe_failed;
		r->child_fds[r->n_child_fds++] = fds[1];
		a.out_fd = fds[1];
		if (i + 1 < r->n) {
			r->child_fds[r->n_child_fds++] = fds[0];
			prev_read = fds[0];
		} else {
			r->streams[0].fd = fds[0];
			if (set_nonblock(fds[0]) != 0)
				goto pipe_failed;
		}
		if (pipe_pair(fds) != 0)
			goto pipe_failed;
		r->child_fds[r->n_child_fds++] = fds[1];
		a.err_fd = fds[1];
		r->streams[1 + i].fd = fds[0];
		if (set_nonblock(fds[0]) != 0)
			goto pipe_failed;

		/* A name root did not make is not passed on (world.h, argv0_is_exe). */
		char **renamed = NULL;
		if (call->stages[i].argv0_is_exe) {
			size_t argc = call->req->stages[i].argc;
			renamed =
			    malloc((argc + 1) * sizeof(char *) + strlen(call->stages[i].argv0) + 1);
			if (!renamed) {
				*err = spawn_failed(i, a.exe, 0, ENOMEM);
				goto abort;
			}
			memcpy(renamed, call->req->stages[i].argv, (argc + 1) * sizeof(char *));
			renamed[0] = (char *)(renamed + argc + 1);
			memcpy(renamed[0], call->stages[i].argv0,
			       strlen(call->stages[i].argv0) + 1);
			a.argv = renamed;
		}
		int report[2];
		if (pipe_pair(report) != 0) {
			free(renamed);
			goto pipe_failed;
		}
		a.report_fd = report[1];
		/* Born inside the call's cgroup where possible, in the view's namespaces. */
		pid_t pid = cg_confine_spawn(r->tree, a.plan, child_main, &a);
		int fork_errno = errno;
		(void)close(report[1]);
		if (pid < 0) {
			(void)close(report[0]);
			free(renamed);
			*err = spawn_failed(i, a.exe, 0, fork_errno);
			goto abort;
		}
		r->procs[i].pid = pid;
		r->res->stages[i].pid = pid;
		r->started = i + 1;
		cg_tree_add(r->tree, pid);

		/* The report ends at the child's execve or its failure: argv is no longer read. */
		int reported = read_report(report[0], i, a.exe, err);
		(void)close(report[0]);
		free(renamed);
		if (reported != 0)
			goto abort;
		r->res->n_execd = i + 1;
		/* A child of ours is not reaped yet, so its pid cannot be reused here. */
		r->procs[i].pidfd = pidfd_open(pid, 0);
	}
	close_child_fds(r);
	return 0;

pipe_failed:
	*err = cg_reply_new(CG_R_EXEC_PIPE_FAILED, "{s:s}", "errno_name", cg_errno_name(errno));
abort:
	abort_started(r);
	partly_started(r->res->n_execd, err);
	return -1;
}

enum kill_phase { PHASE_RUN, PHASE_TERM, PHASE_KILL };

static int64_t ms_until(int64_t at_ns, int64_t now_ns)
{
	if (at_ns <= now_ns)
		return 0;
	return (at_ns - now_ns + NS_PER_MS - 1) / NS_PER_MS;
}

/* The parent's loop: output, exits, deadline, cancel, escapees. */
static void supervise(struct run *r)
{
	const struct cg_exec_spec *spec = r->spec;
	struct cg_exec_result *res = r->res;
	const int64_t grace_ns = CG_EXEC_KILL_GRACE_MS * NS_PER_MS;
	int64_t deadline =
	    spec->timeout_ms > 0 ? res->started_ns + spec->timeout_ms * NS_PER_MS : INT64_MAX;
	int64_t phase_at = 0, linger_until = 0;
	enum kill_phase phase = PHASE_RUN;
	bool watch_cancel = spec->cancel_fd >= 0;
	size_t n_pfd = (r->n + 1) + r->n + 1;
	struct pollfd *pfd = calloc(n_pfd, sizeof(*pfd));
	size_t *owner = calloc(n_pfd, sizeof(*owner));

	if (!pfd || !owner) {
		/* Cannot watch the pipeline: fail safe by ending it now. */
		cg_log("error", spec->trace_id,
		       "exec: out of memory supervising; killing the call");
		signal_all(r, SIGKILL);
		for (size_t i = 0; i < r->n + 1; i++)
			close_fd(&r->streams[i].fd);
		for (size_t i = 0; i < r->started; i++)
			try_reap(r, i, true);
		res->tree_escapees_killed = cg_tree_alive(r->tree);
		goto free_pfd;
	}

	for (;;) {
		int64_t now = cg_now_mono_ns();
		size_t unreaped = count_unreaped(r), open_streams = count_open(r);
		int64_t wake = INT64_MAX;

		if (phase == PHASE_RUN) {
			bool start_kill = false;
			if (now >= deadline) {
				res->timed_out = true;
				start_kill = true;
			} else if (unreaped == 0) {
				/*
				 * Every stage exited. Anything left in the tree is a
				 * descendant that outlived its stage (`sleep 100 &`):
				 * it is killed, never waited for.
				 */
				if (cg_tree_alive(r->tree)) {
					res->tree_escapees_killed = true;
					start_kill = true;
				} else if (open_streams == 0) {
					break;
				} else if (linger_until == 0) {
					/* Drain what is buffered; a holder outside the tree gets a grace. */
					linger_until = now + grace_ns;
				} else if (now >= linger_until) {
					res->tree_escapees_killed = true;
					start_kill = true;
				}
			}
			if (start_kill) {
				signal_all(r, SIGTERM);
				phase = PHASE_TERM;
				phase_at = now;
			} else {
				wake = deadline;
				if (linger_until && linger_until < wake)
					wake = linger_until;
			}
		}
		if (phase == PHASE_TERM) {
			if (unreaped == 0 && open_streams == 0 && !cg_tree_alive(r->tree))
				break;
			if (now >= phase_at + grace_ns) {
				signal_all(r, SIGKILL);
				phase = PHASE_KILL;
				phase_at = now;
			} else {
				wake = phase_at + grace_ns;
			}
		}
		if (phase == PHASE_KILL) {
			/* Killed processes close their pipes as they die; zombies are not waited for. */
			if (unreaped == 0 && open_streams == 0)
				break;
			if (now >= phase_at + EXEC_REAP_LIMIT_MS * NS_PER_MS) {
				cg_log(
				    "warn", spec->trace_id,
				    "exec: %zu pipe(s) still held after SIGKILL; giving up on them",
				    open_streams);
				for (size_t i = 0; i < r->n + 1; i++)
					close_fd(&r->streams[i].fd);
				for (size_t i = 0; i < r->started; i++)
					try_reap(r, i, true);
				break;
			}
			wake = phase_at + EXEC_REAP_LIMIT_MS * NS_PER_MS;
		}

		size_t k = 0;
		bool need_tick = false;
		for (size_t i = 0; i < r->n + 1; i++)
			if (r->streams[i].fd >= 0) {
				pfd[k] =
				    (struct pollfd){ .fd = r->streams[i].fd, .events = POLLIN };
				owner[k++] = i;
			}
		size_t first_proc = k;
		for (size_t i = 0; i < r->started; i++) {
			if (r->procs[i].reaped)
				continue;
			if (r->procs[i].pidfd < 0) {
				need_tick = true;
				continue;
			}
			pfd[k] = (struct pollfd){ .fd = r->procs[i].pidfd, .events = POLLIN };
			owner[k++] = i;
		}
		size_t cancel_slot = SIZE_MAX;
		if (watch_cancel && phase == PHASE_RUN) {
			cancel_slot = k;
			pfd[k++] = (struct pollfd){ .fd = spec->cancel_fd, .events = POLLIN };
		}
		int64_t timeout = wake == INT64_MAX ? -1 : ms_until(wake, now);
		if (need_tick && (timeout < 0 || timeout > EXEC_TICK_MS))
			timeout = EXEC_TICK_MS;
		if (timeout > INT_MAX)
			timeout = INT_MAX;

		int ready = poll(pfd, k, (int)timeout);
		if (ready < 0 && errno != EINTR) {
			/* Cannot wait any more: fail safe by ending the tree now. */
			cg_log("error", spec->trace_id, "exec: poll: %s", cg_errno_name(errno));
			signal_all(r, SIGKILL);
			for (size_t i = 0; i < r->n + 1; i++)
				close_fd(&r->streams[i].fd);
			for (size_t i = 0; i < r->started; i++)
				try_reap(r, i, true);
			break;
		}
		for (size_t j = 0; ready > 0 && j < first_proc; j++)
			if (pfd[j].revents)
				drain(&r->streams[owner[j]], &r->budget);
		for (size_t j = first_proc; ready > 0 && j < k; j++) {
			if (j == cancel_slot) {
				if (pfd[j].revents) {
					res->cancelled = true;
					watch_cancel = false;
					signal_all(r, SIGTERM);
					phase = PHASE_TERM;
					phase_at = cg_now_mono_ns();
				}
				continue;
			}
			if (pfd[j].revents)
				try_reap(r, owner[j], false);
		}
		if (need_tick)
			for (size_t i = 0; i < r->started; i++)
				if (r->procs[i].pidfd < 0)
					try_reap(r, i, false);
	}
free_pfd:
	free(owner);
	free(pfd);
}

int cg_exec_run(const struct cg_exec_spec *spec, struct cg_exec_result *res, struct cg_reply **err)
{
	const struct cg_call *call = spec->call;
	size_t cap = spec->cap ? spec->cap : CG_EXEC_OUTPUT_CAP;
	struct run r = { .spec = spec, .res = res, .dir_fd = -1 };
	int rc = -1;

	memset(res, 0, sizeof(*res));
	if (!call || call->n_stages == 0 || !call->cwd || !spec->envp) {
		*err =
		    spawn_failed(0, call && call->n_stages ? call->stages[0].exe : "", 0, EINVAL);
		return -1;
	}
	res->stages = calloc(call->n_stages, sizeof(*res->stages));
	r.procs = calloc(call->n_stages, sizeof(*r.procs));
	r.streams = calloc(call->n_stages + 1, sizeof(*r.streams));
	if (!res->stages || !r.procs || !r.streams) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting the pipeline");
		goto free_run;
	}
	/* From here on r.n > 0 means every fd slot holds a real fd or -1. */
	r.n = call->n_stages;
	res->n_stages = r.n;
	cg_buf_init(&res->out, cap);
	r.budget = spec->total_cap ? spec->total_cap : CG_EXEC_TOTAL_CAP;
	r.streams[0] = (struct stream){ .fd = -1, .buf = &res->out };
	for (size_t i = 0; i < r.n; i++) {
		cg_buf_init(&res->stages[i].err, cap);
		r.streams[1 + i] = (struct stream){ .fd = -1, .buf = &res->stages[i].err };
		r.procs[i] = (struct proc){ .pid = -1, .pidfd = -1 };
		res->stages[i].pid = -1;
		res->stages[i].exit_code = -1;
	}
	if (pin_cwd(call, &r.dir_fd, err) != 0)
		goto free_run;
	if (cg_tree_new(spec->trace_id, &r.tree, err) != 0)
		goto free_run;

	res->started_ns = cg_now_mono_ns();
	if (spawn_all(&r, err) != 0)
		goto free_tree;
	supervise(&r);
	res->ended_ns = cg_now_mono_ns();
	rc = 0;

free_tree:
	cg_tree_free(r.tree);
free_run:
	close_child_fds(&r);
	free(r.child_fds);
	for (size_t i = 0; r.n > 0 && i < r.n + 1; i++)
		close_fd(&r.streams[i].fd);
	for (size_t i = 0; i < r.n; i++)
		close_fd(&r.procs[i].pidfd);
	free(r.streams);
	free(r.procs);
	if (rc != 0 && res->n_execd == 0)
		cg_exec_result_fini(res);
	return rc;
}

void cg_exec_result_fini(struct cg_exec_result *res)
{
	if (!res)
		return;
	for (size_t i = 0; i < res->n_stages; i++)
		cg_buf_free(&res->stages[i].err);
	free(res->stages);
	cg_buf_free(&res->out);
	memset(res, 0, sizeof(*res));
}
