/* SPDX-License-Identifier: MIT */
/*
 * netns — a fresh network namespace for a confined command (net: none or
 * loopback): no interface but its own loopback, so no route to any socket
 * of the host, the daemon's loopback services included.
 *
 * Invariants:
 *  - cg_netns_enter MUST be async-signal-safe: it runs between fork and
 *    exec (unshare, open/write of /proc/self maps, socket, ioctl, close).
 *  - On any failure it MUST return an errno value so that the child exits
 *    instead of running with the host's network (fail closed).
 */
#ifndef CG_NETNS_H
#define CG_NETNS_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * In the child: unshare the network namespace and bring its loopback up.
 * With with_userns (the caller lacks CAP_SYS_ADMIN), a user namespace is
 * created with it that maps only outer_uid/outer_gid to themselves, which
 * lets an unprivileged process own the new network namespace.
 * Returns 0 or an errno value.
 */
int cg_netns_enter(bool with_userns, uid_t outer_uid, gid_t outer_gid);

/*
 * In a process that just entered a new user namespace (async-signal-safe):
 * deny setgroups, then map only the daemon's own uid and gid (everything
 * else stays unmapped, i.e. nobody). 0, or an errno value.
 */
int cg_userns_map_self(uid_t outer_uid, gid_t outer_gid);

/*
 * In the child, inside its new network namespace: listen on 127.0.0.1:3128
 * (CG_NETNS_PROXY_PORT) and send that socket over ctl_fd with SCM_RIGHTS, then
 * close it. The gate's proxy accepts on it from outside the namespace.
 * Async-signal-safe. 0, or an errno value.
 */
#define CG_NETNS_PROXY_PORT 3128
int cg_netns_send_listener(int ctl_fd);

/*
 * The pool (daemon side, root only): fresh network namespaces with loopback
 * up, made ahead by a thread at nice 10, each handed out once.
 *
 * cg_netns_pool_start keeps up to size (at most CG_NETNS_POOL_MAX) ready;
 * calls nest (the pool stops at the last cg_netns_pool_stop). It returns 0,
 * or an errno value (EPERM when not root): then there is no pool and every
 * child makes its own namespace as before.
 *
 * cg_netns_pool_enter moves the calling thread into a pooled namespace and
 * returns 0, or -1 when none is ready (the caller goes on without). A
 * child cloned before cg_netns_pool_leave is born in that namespace and
 * must not make another. cg_netns_pool_leave returns the thread to the
 * daemon's namespace; the pooled one lives on only through that child.
 * cg_netns_pool_stop MUST NOT run while a thread is between the two.
 */
#define CG_NETNS_POOL_MAX  16
#define CG_NETNS_POOL_SIZE 4
int cg_netns_pool_start(unsigned size);
void cg_netns_pool_stop(void);
int cg_netns_pool_enter(void);
/* How many pooled namespaces are ready now (for tests and benchmarks). */
unsigned cg_netns_pool_ready(void);
void cg_netns_pool_leave(void);

/* Can this process create a network namespace (root, or user namespaces allowed)? */
bool cg_netns_possible(bool *with_userns);

#endif
