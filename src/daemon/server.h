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
 *  - Every connection gets exactly one response line, or is closed because
 *    the peer went away.
 */
#ifndef CG_SERVER_H
#define CG_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "callgate.h"

struct cg_server_config {
	const char *socket_path;       /* agent socket */
	const char *admin_socket_path; /* owner-only admin socket, or NULL */
	gid_t socket_group;	       /* (gid_t)-1: owner-only (0600); else 0660 with this group */
	bool has_admin_group;	       /* admin socket also serves admin_group (0660) */
	gid_t admin_group;	       /* members (primary or supplementary gid) may use it */
	unsigned max_conns;	       /* total connections; 0: default 1024 */
	int64_t read_deadline_ms;      /* 0: default 10000 */
	const char *ready_fd_env;      /* unused for now */
};

/*
 * Serve until SIGTERM/SIGINT (or cg_server_stop). Returns 0 on a clean stop,
 * -1 if the sockets could not be set up (message already logged).
 */
int cg_server_run(struct cg_kernel *k, const struct cg_server_config *cfg)
    __attribute__((warn_unused_result));

#endif
