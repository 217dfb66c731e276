/* SPDX-License-Identifier: MIT */
/*
 * landlock — ABI detection and ruleset construction (see landlock.h for
 * the invariants).
 *
 * Each ruleset is built once per call in the parent and inherited by the
 * stages through fork; a child then needs one syscall, which matters here:
 * in a freshly forked child every first touch of a page is a copy-on-write
 * fault, and building the ruleset there cost ~0.13 ms per exec against
 * ~0.01 ms for landlock_restrict_self alone. The runner marks fds
 * close-on-exec rather than closing them, so the fd survives until exec;
 * if it is gone anyway, the child rebuilds the same ruleset from the paths
 * with async-signal-safe calls only.
 */
#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static long ll_create_ruleset(const struct cg_landlock_ruleset_attr *attr, size_t size,
			      uint32_t flags)
{
	return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

static long ll_add_rule(int ruleset_fd, int type, const void *attr)
{
	return syscall(SYS_landlock_add_rule, ruleset_fd, type, attr, 0U);
}

static long ll_restrict_self(int ruleset_fd, uint32_t flags)
{
	return syscall(SYS_landlock_restrict_self, ruleset_fd, flags);
}

static int detected_abi;
static pthread_once_t abi_once = PTHREAD_ONCE_INIT;
static _Atomic int override_abi = -1;

static void detect_abi(void)
{
	long v = ll_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	detected_abi = v < 0 ? 0 : (int)v;
}

int cg_landlock_abi(void)
{
	(void)pthread_once(&abi_once, detect_abi);
	int o = override_abi;
	return o >= 0 && o < detected_abi ? o : detected_abi;
}

void cg_landlock_abi_override(int abi)
{
	override_abi = abi;
}

uint64_t cg_landlock_fs_mask(int abi)
{
	if (abi < 1)
		return 0;
	/* Handled, and so denied, though no class grants them: device nodes. */
	uint64_t m = CG_LL_FS_WRITE | LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
		     LANDLOCK_ACCESS_FS_MAKE_BLOCK;
	/* Case by case, as the kernel documents each ABI: */
	if (abi < 2) /* REFER (cross-directory link/rename) came with ABI 2 */
		m &= ~LANDLOCK_ACCESS_FS_REFER;
	if (abi < 3) /* TRUNCATE came with ABI 3 */
		m &= ~LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi < 5) /* IOCTL_DEV came with ABI 5 */
		m &= ~LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return m;
}

uint64_t cg_landlock_net_mask(int abi)
{
	return abi >= 4 ? (LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP) : 0;
}

uint64_t cg_landlock_scope_mask(int abi)
{
	return abi >= 6 ? (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL) : 0;
}

/*
 * Build the ruleset: a new fd (>= 0), or -errno. In the child the O_PATH
 * fds are left to close-on-exec (every syscall there is paid per exec); in
 * the parent, which lives on, each is closed at once.
 */
static long build(const struct cg_landlock_ruleset *rs, bool in_child)
{
	struct cg_landlock_ruleset_attr attr = {
		.handled_access_fs = rs->handled_fs,
		.handled_access_net = rs->handled_net,
		.scoped = rs->scoped,
	};
	int rc = 0;
	long ruleset_fd = ll_create_ruleset(&attr, sizeof(attr), 0);
	if (ruleset_fd < 0)
		return -errno;
	for (size_t i = 0; i < rs->n_paths; i++) {
		/*
		 * O_PATH: a handle on the inode, not the right to read it. The
		 * rule binds to the inode, so a rename or symlink swap after
		 * this point cannot redirect the grant to another tree.
		 */
		int fd = open(rs->paths[i].path, O_PATH | O_CLOEXEC);
		if (fd < 0 &&
		    (errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP))
			continue; /* gone or invisible: grants nothing, denies more */
		if (fd < 0) {
			rc = errno; /* e.g. EMFILE: fail closed rather than guess */
			goto close_ruleset;
		}
		/*
		 * The parent already narrowed a non-directory's rights to file
		 * rights. If the path became a file since, the kernel refuses
		 * directory rights on it with EINVAL and we fail closed.
		 */
		struct landlock_path_beneath_attr pb = {
			.allowed_access = rs->paths[i].access,
			.parent_fd = fd,
		};
		long r = pb.allowed_access
			     ? ll_add_rule((int)ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &pb)
			     : 0;
		if (r != 0)
			rc = errno;
		if (!in_child)
			(void)close(fd);
		if (rc != 0)
			goto close_ruleset;
	}
	for (size_t i = 0; i < rs->n_ports; i++) {
		struct cg_landlock_net_port_attr np = {
			.allowed_access = rs->handled_net,
			.port = rs->ports[i],
		};
		if (ll_add_rule((int)ruleset_fd, CG_LANDLOCK_RULE_NET_PORT, &np) != 0) {
			rc = errno;
			goto close_ruleset;
		}
	}
	return ruleset_fd;
close_ruleset:
	(void)close((int)ruleset_fd);
	return -rc;
}

int cg_landlock_prepare(struct cg_landlock_ruleset *rs)
{
	rs->ruleset_fd = -1;
	long fd = build(rs, false);
	if (fd < 0)
		return (int)-fd;
	/*
	 * Never on 0-2: a daemon that closed its stdio would get the ruleset
	 * there, and the runner's dup2 onto 0-2 in the child would replace it.
	 */
	if (fd < 3) {
		int hi = fcntl((int)fd, F_DUPFD_CLOEXEC, 3);
		int e = errno;
		(void)close((int)fd);
		if (hi < 0)
			return e;
		fd = hi;
	}
	rs->ruleset_fd = (int)fd;
	return 0;
}

void cg_landlock_release(struct cg_landlock_ruleset *rs)
{
	if (rs->ruleset_fd >= 0)
		(void)close(rs->ruleset_fd);
	rs->ruleset_fd = -1;
}

int cg_landlock_apply(const struct cg_landlock_ruleset *rs)
{
	/*
	 * The parent's ruleset, inherited through fork: one syscall. The
	 * runner marks fds close-on-exec rather than closing them, and every
	 * kernel with Landlock has CLOSE_RANGE_CLOEXEC; if the fd is gone
	 * anyway (EBADF/EBADFD), build the same ruleset here.
	 */
	if (rs->ruleset_fd >= 0) {
		if (ll_restrict_self(rs->ruleset_fd, rs->restrict_flags) == 0)
			return 0;
		if (errno != EBADF && errno != EBADFD)
			return errno;
	}
	long fd = build(rs, true);
	if (fd < 0)
		return (int)-fd;
	int rc = ll_restrict_self((int)fd, rs->restrict_flags) == 0 ? 0 : errno;
	(void)close((int)fd);
	return rc;
}
