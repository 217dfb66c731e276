/* SPDX-License-Identifier: MIT */
/*
 * notifier — the program (--approval-notify) the daemon starts for each new
 * pending approval, so that it reaches a person where they are. At most
 * MAX_NOTIFIERS run at once; each is reaped through its pidfd. Loop thread
 * only.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reply.h"
#include "server_priv.h"
#include "util.h"

/* A notifier exited (its pidfd is readable): reap it and free its slot. */
void notifier_reap(struct server *s, struct notifier *n, bool wait_for_it)
{
	(void)s;
	int st = 0;
	pid_t r = waitpid(n->pid, &st, wait_for_it ? 0 : WNOHANG);
	if (r == 0)
		return;
	if (r == n->pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		cg_log("warn", NULL, "approval notifier pid %d ended with %s %d", (int)n->pid,
		       WIFEXITED(st) ? "exit code" : "signal",
		       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	if (n->pidfd >= 0)
		close(n->pidfd); /* also leaves the epoll set */
	n->pidfd = -1;
	n->pid = 0;
}

/* Append "NAME=value" to envp at *n (malloc'd). 0, or -1 on OOM. */
static int env_add(char **envp, size_t *n, const char *name, const char *value)
{
	size_t l = strlen(name) + strlen(value) + 2;
	char *e = malloc(l);
	if (!e)
		return -1;
	(void)snprintf(e, l, "%s=%s", name, value);
	envp[(*n)++] = e;
	return 0;
}

/*
 * Start the configured notifier for one pending call: its approval view (the
 * pending entry, with trace_id and request_sha256) as JSON on stdin, through
 * a memfd so that no write can block the loop; stdout and stderr go to the
 * daemon's log. It runs as the daemon, outside every call; its environment
 * adds CALLGATE_ADMIN_SOCKET, CALLGATE_TRACE_ID and CALLGATE_REQUEST_SHA256
 * so that it can answer through `callgate approve ID --hash SHA`, bound to
 * the view it was given. 0, or -1 (logged).
 */
static int notifier_spawn(struct server *s, const json_t *view)
{
	struct notifier *slot = NULL;
	for (size_t i = 0; i < MAX_NOTIFIERS && !slot; i++) {
		if (s->notifiers[i].pid && s->notifiers[i].pidfd < 0)
			notifier_reap(s, &s->notifiers[i], false);
		if (!s->notifiers[i].pid)
			slot = &s->notifiers[i];
	}
	const char *tid = json_string_value(json_object_get(view, "trace_id"));
	const char *sha = json_string_value(json_object_get(view, "request_sha256"));
	if (!slot || !tid || !sha) {
		cg_log("warn", tid, "approval notifier not started: %s",
		       slot ? "the view has no trace id or hash" : "too many notifiers running");
		return -1;
	}
	int rc = -1, mfd = -1;
	size_t n_env = 0, n_base = 0;
	char **envp = NULL;
	char *argv[CG_SERVER_MAX_NOTIFY_ARGS + 1] = { 0 };
	char *text = json_dumps(view, JSON_COMPACT | JSON_SORT_KEYS);
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	bool have_fa = false, have_attr = false;
	if (!text)
		goto release;
	mfd = memfd_create("callgate-approval-view", MFD_CLOEXEC);
	if (mfd < 0 || cg_write_all(mfd, text, strlen(text)) < 0 ||
	    cg_write_all(mfd, "\n", 1) < 0 || lseek(mfd, 0, SEEK_SET) != 0)
		goto release;
	while (environ[n_base])
		n_base++;
	envp = calloc(n_base + 4, sizeof(char *));
	if (!envp)
		goto release;
	for (size_t i = 0; i < n_base; i++) {
		/* Ours are set below; an inherited one must not shadow them. */
		if (strncmp(environ[i], "CALLGATE_ADMIN_SOCKET=", 22) == 0 ||
		    strncmp(environ[i], "CALLGATE_TRACE_ID=", 18) == 0 ||
		    strncmp(environ[i], "CALLGATE_REQUEST_SHA256=", 24) == 0)
			continue;
		if (!(envp[n_env] = strdup(environ[i])))
			goto release;
		n_env++;
	}
	if (env_add(envp, &n_env, "CALLGATE_ADMIN_SOCKET",
		    s->cfg->admin_socket_path ? s->cfg->admin_socket_path : "") != 0 ||
	    env_add(envp, &n_env, "CALLGATE_TRACE_ID", tid) != 0 ||
	    env_add(envp, &n_env, "CALLGATE_REQUEST_SHA256", sha) != 0)
		goto release;
	if (posix_spawn_file_actions_init(&fa) != 0)
		goto release;
	have_fa = true;
	if (posix_spawnattr_init(&attr) != 0)
		goto release;
	have_attr = true;
	sigset_t none, dfl;
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGINT);
	sigaddset(&dfl, SIGHUP);
	sigaddset(&dfl, SIGPIPE);
	if (posix_spawn_file_actions_adddup2(&fa, mfd, 0) != 0 ||
	    posix_spawn_file_actions_adddup2(&fa, 2, 1) != 0 ||
	    posix_spawnattr_setsigmask(&attr, &none) != 0 ||
	    posix_spawnattr_setsigdefault(&attr, &dfl) != 0 ||
	    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) != 0)
		goto release;
	for (size_t i = 0; i < s->cfg->n_notify_args; i++)
		if (!(argv[i] = strdup(s->cfg->notify_argv[i])))
			goto release;
	pid_t pid = 0;
	int e = posix_spawn(&pid, argv[0], &fa, &attr, argv, envp);
	if (e != 0) {
		cg_log("warn", tid, "approval notifier %s could not start: %s",
		       s->cfg->notify_argv[0], cg_errno_name(e));
		goto release;
	}
	slot->src.kind = SRC_NOTIFIER;
	slot->pid = pid;
	slot->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (slot->pidfd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &slot->src };
		if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, slot->pidfd, &ev) < 0) {
			close(slot->pidfd);
			slot->pidfd = -1; /* reaped lazily when a slot is needed, or at stop */
		}
	}
	cg_log("info", tid, "approval notifier pid %d started", (int)pid);
	rc = 0;
release:
	if (rc != 0 && !envp)
		cg_log("warn", tid, "approval notifier not started: %s", cg_errno_name(errno));
	if (have_attr)
		posix_spawnattr_destroy(&attr);
	if (have_fa)
		posix_spawn_file_actions_destroy(&fa);
	for (size_t i = 0; envp && i < n_env; i++)
		free(envp[i]);
	for (size_t i = 0; i < CG_SERVER_MAX_NOTIFY_ARGS; i++)
		free(argv[i]);
	free(envp);
	if (mfd >= 0)
		close(mfd);
	free(text);
	return rc;
}

/*
 * After a call was submitted and is waiting or running: push every pending
 * call not yet pushed to the notifier. The kernel queues a deferred call
 * inside cg_kernel_submit, so this sees it at once, without polling.
 */
void notify_new_pending(struct server *s)
{
	if (!s->cfg->n_notify_args)
		return;
	static const char line[] = "{\"action\":\"pending\"}";
	struct cg_peer self = { .pid = s->self_pid, .uid = s->euid, .gid = getegid() };
	struct admin_box box = { 0 };
	cg_kernel_admin(s->k, line, sizeof(line) - 1, &self, admin_respond, &box);
	json_t *resp = box.line ? json_loadb(box.line, box.len, 0, NULL) : NULL;
	free(box.line);
	json_t *list =
	    json_object_get(json_object_get(json_object_get(resp, "reply"), "data"), "pending");
	json_t *seen = json_object();
	size_t i;
	json_t *p;
	if (!seen || !json_is_array(list))
		goto release;
	json_array_foreach(list, i, p)
	{
		const char *tid = json_string_value(json_object_get(p, "trace_id"));
		if (!tid)
			continue;
		/* Pushed once, whether or not the notifier started: no retry storm. */
		if (!json_object_get(s->notified, tid))
			(void)notifier_spawn(s, p);
		json_object_set_new(seen, tid, json_true());
	}
	/* Answered calls drop out, so the set stays as small as the queue. */
	json_decref(s->notified);
	s->notified = seen;
	seen = NULL;
release:
	json_decref(seen);
	json_decref(resp);
}
