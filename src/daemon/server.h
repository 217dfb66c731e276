/* SPDX-License-Identifier: MIT */
/*
 * server — the daemon's transport: Unix sockets and a small epoll loop.
 *
 * Accepts connections on the agent socket (and the owner-only admin
 * socket), learns each peer by SO_PEERCRED, reads exactly one line with a
 * size cap and a read deadline, hands it to the kernel (cg_kernel_submit),
 * writes the one response line and closes. signalfd: SIGTERM/SIGINT stop
 * cleanly, SIGHUP reloads the policy. timerfd drives deadlines.
 *
 * Invariants:
 *  - The loop MUST NOT block: sockets are non-blocking, the decide path is
 *    pure, execution happens on worker threads.
 *  - A live socket MUST NOT be clobbered at start (connect-probe first).
 *  - Past the connection cap a peer gets the "busy" reply and is closed.
 *  - The admin socket MUST serve only the daemon's uid, root, and members of
 *    the configured admin group, checked by SO_PEERCRED/SO_PEERGROUPS.
 *  - The admin socket MUST refuse a peer that runs inside a call: its
 *    cgroup lies under the daemon's per-call cgroup parent, its pid
 *    namespace is not the daemon's, or the daemon is its ancestor (other
 *    than through a notifier the daemon started). Checked from /proc, never
 *    from anything the peer sends.
 *  - approve, deny and grant_open MUST come from a configured approver (uid
 *    or group; default: the daemon's own uid).
 *  - Every request dated before the server started is refused (the
 *    seen-id window does not survive a restart; see cg_wire_set_not_before).
 *  - Every connection gets exactly one response line, or is closed because
 *    the peer went away.
 *  - Under systemd (Type=notify) READY=1 is sent only once both sockets
 *    are listening; a SIGHUP reload is bracketed by RELOADING=1 and
 *    READY=1; STOPPING=1 precedes the clean stop. Without $NOTIFY_SOCKET
 *    these are no-ops.
 */
#ifndef CG_SERVER_H
#define CG_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "callgate.h"

#define CG_SERVER_MAX_APPROVERS	  64
#define CG_SERVER_MAX_NOTIFY_ARGS 32

struct cg_server_config {
	const char *socket_path;       /* agent socket */
	const char *admin_socket_path; /* owner-only admin socket, or NULL */
	gid_t socket_group;	       /* (gid_t)-1: owner-only (0600); else 0660 with this group */
	bool has_admin_group;	       /* admin socket also serves admin_group (0660) */
	gid_t admin_group;	       /* members (primary or supplementary gid) may use it */
	unsigned max_conns;	       /* total connections; 0: default 1024 */
	int64_t read_deadline_ms;      /* 0: default 10000 */
	const char *ready_fd_env;      /* unused for now */
	/* Bounds (issue 14); 0: the defaults in server_priv.h. */
	unsigned max_conns_per_uid; /* agent connections one uid may hold; default 256 */
	int64_t write_idle_ms;	    /* a response not taken for this long is cut; 30000 */
	uint64_t max_reply_bytes;   /* one response line at most; default 256 MiB */
	uint64_t output_budget;	    /* response bytes held across the daemon; 1 GiB */
	unsigned admit_queue;	    /* evidence items queued past which requests wait; 512 */
	/*
	 * Socket activation: listening sockets passed in (sd_listen_fds) are
	 * served as they are, not bound, chmod'ed or unlinked (systemd owns
	 * them); socket_path/admin_socket_path must then be their paths (the
	 * lock files sit next to them). -1 when not passed.
	 */
	bool has_passed_fd, has_passed_admin_fd;
	int passed_fd, passed_admin_fd;
	/* Who may answer (approve, deny, grant_open). Both empty: the daemon's euid. */
	uid_t approver_uids[CG_SERVER_MAX_APPROVERS];
	size_t n_approver_uids;
	gid_t approver_gids[CG_SERVER_MAX_APPROVERS];
	size_t n_approver_gids;
	/* Run for each new pending call, the approval view as JSON on stdin; NULL: none. */
	const char *notify_argv[CG_SERVER_MAX_NOTIFY_ARGS + 1]; /* NULL-terminated */
	size_t n_notify_args;
};

/*
 * Take one daemon option that belongs to the server: --approver-uid UID,
 * --approver-group GROUP (name or number), --approval-notify PROGRAM,
 * --approval-notify-arg ARG (each repeatable). Returns 1 when name was one
 * of them and value was stored, 0 when name is not a server option, -1 when
 * the value is bad or there are too many (a message is in why).
 */
int cg_server_option(struct cg_server_config *cfg, const char *name, const char *value, char *why,
		     size_t why_len) __attribute__((warn_unused_result));

/*
 * Serve until SIGTERM/SIGINT (or cg_server_stop). Returns 0 on a clean stop,
 * -1 if the sockets could not be set up (message already logged).
 */
int cg_server_run(struct cg_kernel *k, const struct cg_server_config *cfg)
    __attribute__((warn_unused_result));

#endif
