/* SPDX-License-Identifier: MIT */
/*
 * landlock — the Landlock LSM as confine.c uses it: ABI detection, the
 * access-right masks each ABI version handles, and one ruleset per
 * constraint set (built in the parent, applied in the child).
 *
 * Debian's <linux/landlock.h> is the 6.1 header (ABI 1-2 at best), so the
 * newer constants and the extended attribute structs are defined here under
 * #ifndef guards, as the kernel's samples/landlock/sandboxer.c does.
 *
 * Invariants:
 *  - cg_landlock_apply MUST only make async-signal-safe calls (open, close,
 *    raw syscalls): it runs between fork and exec.
 *  - A ruleset MUST handle every access right the running ABI knows, so
 *    that anything not granted by a rule is denied (default deny).
 *  - Rights the running ABI does not know are masked out before use, never
 *    passed to the kernel (which would refuse the whole ruleset).
 */
#ifndef CG_LANDLOCK_H
#define CG_LANDLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/landlock.h>

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#endif
#ifndef LANDLOCK_ACCESS_NET_CONNECT_TCP
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#endif
/* LANDLOCK_RULE_NET_PORT is an enumerator in newer headers; use our own. */
#define CG_LANDLOCK_RULE_NET_PORT 2

/* The newest ABI this code knows case by case; newer kernels are used as this. */
#define CG_LANDLOCK_ABI_KNOWN 7

/* struct landlock_ruleset_attr as of ABI 6 (the 6.1 header has only the first field). */
struct cg_landlock_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

/* struct landlock_net_port_attr (ABI 4). */
struct cg_landlock_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};

/* Rights of each class, for the newest known ABI (mask with cg_landlock_fs_mask). */
#define CG_LL_FS_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define CG_LL_FS_EXEC (LANDLOCK_ACCESS_FS_EXECUTE | CG_LL_FS_READ)
/* Not MAKE_CHAR or MAKE_BLOCK: a write tree takes no device node (seccomp refuses them too). */
#define CG_LL_FS_WRITE                                                                             \
	(CG_LL_FS_READ | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |           \
	 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |                            \
	 LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |                              \
	 LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER |   \
	 LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)
/* Rights that make sense on a non-directory (the kernel refuses others on files). */
#define CG_LL_FS_FILE                                                                              \
	(LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |                              \
	 LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |                              \
	 LANDLOCK_ACCESS_FS_IOCTL_DEV)

/*
 * The Landlock ABI version the running kernel offers: 0 when Landlock is
 * absent or disabled, else >= 1. Detected once and cached (thread-safe).
 */
int cg_landlock_abi(void);

/*
 * For tests of the case-by-case downgrades: make cg_landlock_abi report abi
 * (which must not exceed the real one to be applied; -1 restores detection).
 */
void cg_landlock_abi_override(int abi);

/* Filesystem rights the given ABI handles (0 for ABI 0). */
uint64_t cg_landlock_fs_mask(int abi);
/* Network rights (ABI >= 4) and scopes (ABI >= 6) the given ABI handles. */
uint64_t cg_landlock_net_mask(int abi);
uint64_t cg_landlock_scope_mask(int abi);

/* One path rule: a tree (or file) and the rights granted beneath it. */
struct cg_landlock_path {
	const char *path; /* absolute */
	uint64_t access;  /* masked for the ABI; narrowed to CG_LL_FS_FILE for a non-directory */
};

/* One ruleset: everything it handles is denied unless a rule grants it. */
struct cg_landlock_ruleset {
	uint64_t handled_fs;
	uint64_t handled_net;
	uint64_t scoped;
	size_t n_paths;
	const struct cg_landlock_path *paths;
	size_t n_ports;
	const uint16_t *ports;	 /* TCP ports allowed for bind and connect */
	uint32_t restrict_flags; /* landlock_restrict_self flags (ABI 7 logging) */
	int ruleset_fd;		 /* built by cg_landlock_prepare, or -1 */
};

/*
 * In the parent: build the ruleset once (per call, shared by all stages)
 * into rs->ruleset_fd (O_CLOEXEC, >= 3). 0 or an errno value. Release with
 * cg_landlock_release.
 */
int cg_landlock_prepare(struct cg_landlock_ruleset *rs);
void cg_landlock_release(struct cg_landlock_ruleset *rs);

/*
 * In the child: restrict the calling thread to the ruleset (no_new_privs
 * MUST already be set): with the parent's fd when it is still there, else
 * by building it here from the paths. A path that no longer resolves grants
 * nothing; any other failure is returned. Returns 0 or an errno value.
 * Async-signal-safe.
 */
int cg_landlock_apply(const struct cg_landlock_ruleset *rs);

#endif
