/* SPDX-License-Identifier: MIT */
/*
 * seccomp — compile the deny-list once (libseccomp, in the parent), export
 * it as classic BPF into memory, and load it in the child with one prctl.
 *
 * The list is a deny-list on purpose: an allow-list of the syscalls every
 * tool an agent may run could need is unbounded, and a wrong guess breaks
 * the command rather than the attacker. The entries below are the ones
 * container runtimes and bubblewrap also refuse, each with the attack it
 * stops. Landlock and the namespaces carry the access control; seccomp
 * shrinks the kernel attack surface and closes the exits from them.
 */
#include "seccomp_filter.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Syscalls denied with EPERM outright, and why. */
static const char *const denied[] = {
	/* Reading or steering another process's memory: the classic escape to
     * an unconfined sibling (and the daemon, when uids match). */
	"ptrace",
	/*
	 * fanotify: the daemon's record of what a call changes is a group of
	 * its own, and a root-uid call that took the uid's groups (128) left
	 * the next call with none (s43e F1). inotify has its own limits.
	 */
	"fanotify_init",
	"fanotify_mark",
	"process_vm_readv",
	"process_vm_writev",
	"kcmp",
	"pidfd_getfd",
	/* Mounts would let a root command remount a confined tree elsewhere or
     * hide one; Landlock's rules bind to the inodes it saw. */
	"mount",
	"umount2",
	"pivot_root",
	"chroot",
	"move_mount",
	"open_tree",
	"fsopen",
	"fsconfig",
	"fsmount",
	"fspick",
	"mount_setattr",
	/* Joining another namespace (e.g. /proc/1/ns/net) undoes net: none. */
	"setns",
	/* Kernel keyrings hold other sessions' credentials and have a long
     * CVE history. */
	"keyctl",
	"add_key",
	"request_key",
	/* eBPF and perf: large kernel attack surface, side channels. */
	"bpf",
	"perf_event_open",
	/* Replacing the kernel or loading code into it. */
	"kexec_load",
	"kexec_file_load",
	"init_module",
	"finit_module",
	"delete_module",
	/* Whole-machine state an agent's command never changes. */
	"reboot",
	"swapon",
	"swapoff",
	"acct",
	"quotactl",
	"syslog",
	"settimeofday",
	"clock_settime",
	"clock_adjtime",
	"adjtimex",
	"iopl",
	"ioperm",
	/* open_by_handle_at walks around every path-based check ("shocker"). */
	"name_to_handle_at",
	"open_by_handle_at",
	/* userfaultfd stretches kernel race windows for exploits. */
	"userfaultfd",
	/* io_uring runs file and network operations from kernel workers, a
     * frequent source of privilege-escalation bugs. */
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
	/* Obsolete interfaces with bug history. */
	"uselib",
	"vhangup",
	"lookup_dcookie",
	"nfsservctl",
};

/*
 * Syscalls that set a file's mode, with the index of the mode argument. A
 * set-user-ID or set-group-ID bit made here outlives the call: a root
 * caller's command (uid 0, no capabilities, but the owner of what it makes)
 * left a set-uid-root program in the workspace that any host user could
 * run as root (found by an attack review). No agent task needs to make one.
 */
static const struct {
	const char *name;
	unsigned arg;
} mode_setters[] = {
	{ "chmod", 1 },	 { "fchmod", 1 }, { "fchmodat", 2 }, { "fchmodat2", 2 }, { "open", 2 },
	{ "openat", 3 }, { "creat", 1 },  { "mknod", 1 },    { "mknodat", 2 },
};

static int deny_setid_modes(scmp_filter_ctx ctx)
{
	static const unsigned long bits[] = { S_ISUID, S_ISGID };
	for (size_t i = 0; i < sizeof(mode_setters) / sizeof(mode_setters[0]); i++) {
		int nr = seccomp_syscall_resolve_name(mode_setters[i].name);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		for (size_t b = 0; b < 2; b++) {
			struct scmp_arg_cmp cmp = { .arg = mode_setters[i].arg,
						    .op = SCMP_CMP_MASKED_EQ,
						    .datum_a = bits[b],
						    .datum_b = bits[b] };
			if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, cmp) != 0)
				return -1;
		}
	}
	/*
	 * Device nodes: a root caller's approved `tar -xf` made a 0666 node of
	 * the host's disk in the workspace, owned by the agent, which the agent
	 * then opened outside any call (s37 attack). No agent task makes one.
	 */
	static const struct {
		const char *name;
		unsigned arg;
	} mknods[] = { { "mknod", 1 }, { "mknodat", 2 } };
	static const unsigned long types[] = { S_IFCHR, S_IFBLK };
	for (size_t i = 0; i < sizeof(mknods) / sizeof(mknods[0]); i++) {
		int nr = seccomp_syscall_resolve_name(mknods[i].name);
		if (nr == __NR_SCMP_ERROR)
			continue;
		for (size_t t = 0; t < 2; t++) {
			struct scmp_arg_cmp cmp = { .arg = mknods[i].arg,
						    .op = SCMP_CMP_MASKED_EQ,
						    .datum_a = S_IFMT,
						    .datum_b = types[t] };
			if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, cmp) != 0)
				return -1;
		}
	}
	/* openat2 passes its mode in memory, which seccomp cannot read: libc falls back. */
	int nr = seccomp_syscall_resolve_name("openat2");
	if (nr != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0) != 0)
		return -1;
	return 0;
}

/*
 * Syscalls numbered after the last one this list was reviewed against
 * answer ENOSYS, as a kernel without them would, until they are reviewed
 * (s44a F1: open_tree_attr, 467, new in Linux 6.15, cloned a read-only mount
 * and made it writable for a root call that kept CAP_SYS_ADMIN; open_tree
 * was denied, its successor was not). A deny-list cannot name what did not
 * exist when it was written: this ceiling is what keeps it whole. Only
 * where new syscalls take the shared numbers (every architecture but alpha,
 * ia64 and mips since 5.1) and the old ones lie below them.
 */
#define SECCOMP_REVIEWED_MAX 466 /* removexattrat, Linux 6.13 */

#if defined(__x86_64__) || defined(__aarch64__) || defined(__riscv)
#define SECCOMP_CEILING 1
#else
#define SECCOMP_CEILING 0
#endif

/*
 * prog with the ceiling in front: for the native architecture, a syscall
 * numbered above SECCOMP_REVIEWED_MAX returns ENOSYS; anything else goes on
 * to prog (jumps are relative and forward, so prepending moves none).
 */
static struct sock_filter *with_ceiling(const struct sock_filter *prog, size_t *len)
{
	const struct sock_filter head[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, seccomp_arch_native(), 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, SECCOMP_REVIEWED_MAX, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
	};
	size_t n = sizeof(head) / sizeof(head[0]);
	if (*len + n > BPF_MAXINSNS) {
		errno = E2BIG;
		return NULL;
	}
	struct sock_filter *out = malloc((*len + n) * sizeof(*out));
	if (!out)
		return NULL;
	memcpy(out, head, sizeof(head));
	memcpy(out + n, prog, *len * sizeof(*out));
	*len += n;
	return out;
}

/* A filter compiled once per process. */
struct compiled {
	pthread_once_t once;
	struct sock_fprog prog;
	int err;
	bool ceiling; /* the ceiling in front (the base filter's) */
};
static struct compiled base = { .once = PTHREAD_ONCE_INIT, .ceiling = SECCOMP_CEILING },
		       root_extra = { .once = PTHREAD_ONCE_INIT };

static int add_rules(scmp_filter_ctx ctx)
{
	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture: nothing to deny */
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0)
			return -1;
	}
	/*
	 * New user namespaces give an unprivileged process every capability
	 * over a fresh namespace: the door to most recent local root exploits
	 * and a way out of no_new_privs-based reasoning.
	 */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
			     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) != 0)
		return -1;
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__arm__)
	/* clone's flags are argument 0 on these architectures (not on s390). */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
			     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) != 0)
		return -1;
#endif
	/*
	 * clone3 passes its flags in memory, which seccomp cannot read, so it
	 * cannot be filtered for CLONE_NEWUSER. ENOSYS (not EPERM) makes libc
	 * fall back to clone(), whose flags the rule above checks.
	 */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0)
		return -1;
	/* TIOCSTI/TIOCLINUX push keystrokes into the controlling terminal:
	 * a command could type into the user's shell after it exits. */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)) != 0)
		return -1;
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
			     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX)) != 0)
		return -1;
	/*
	 * vsock is not divided by network namespaces: a call with net: none
	 * could still reach the hypervisor's (or a guest's) vsock services.
	 * The family is an int: the kernel reads the register's low 32 bits,
	 * so the rule compares those only (AF_VSOCK with any upper bits set
	 * passed a comparison of all 64).
	 */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
			     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_VSOCK)) != 0)
		return -1;
	/*
	 * A hard link gives a file another name, and a write through that name
	 * is reported under it alone: the sweep after a call never learnt that
	 * a repository's config had changed (s43d F1). EXDEV, the answer
	 * across mounts, is the one every tool that links already falls back
	 * from (git, cargo and pnpm copy or rename instead).
	 */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EXDEV), SCMP_SYS(link), 0) != 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EXDEV), SCMP_SYS(linkat), 0) != 0)
		return -1;
	return deny_setid_modes(ctx);
}

static void compile(struct compiled *c, int (*rules)(scmp_filter_ctx))
{
	int memfd = -1;
	void *buf = NULL;
	/*
	 * Default allow; listed calls EPERM. Foreign architectures (e.g. the
	 * 32-bit syscall table from a 64-bit process) are killed by
	 * libseccomp's default bad-arch action, closing the classic bypass of
	 * a filter written for one table.
	 */
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx) {
		c->err = ENOMEM;
		return;
	}
	/* We set no_new_privs ourselves, earlier, in the child. */
	if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0 || rules(ctx) != 0) {
		c->err = EINVAL;
		goto release_ctx;
	}
	memfd = memfd_create("cg-seccomp", MFD_CLOEXEC);
	if (memfd < 0) {
		c->err = errno;
		goto release_ctx;
	}
	if (seccomp_export_bpf(ctx, memfd) != 0) {
		c->err = EIO;
		goto close_memfd;
	}
	struct stat st;
	if (fstat(memfd, &st) != 0 || st.st_size <= 0 ||
	    st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
	    st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS) {
		c->err = EIO;
		goto close_memfd;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		c->err = ENOMEM;
		goto close_memfd;
	}
	if (pread(memfd, buf, (size_t)st.st_size, 0) != st.st_size) {
		c->err = EIO;
		free(buf);
		goto close_memfd;
	}
	size_t len = (size_t)st.st_size / sizeof(struct sock_filter);
	if (c->ceiling) {
		struct sock_filter *ceiled = with_ceiling(buf, &len);
		free(buf);
		if (!(buf = ceiled)) {
			c->err = errno;
			goto close_memfd;
		}
	}
	c->prog.len = (unsigned short)len;
	c->prog.filter = buf;
close_memfd:
	(void)close(memfd);
release_ctx:
	seccomp_release(ctx);
}

/*
 * Stacked on the base filter for a privileged call a constraint set binds:
 * no Unix socket of its own. Its file system is read-only but for its write
 * trees, in its own mount namespace; a descriptor the agent opened outside
 * (of /etc) and passed over a socket in the workspace reached the host's
 * mount, and approved root code changed a file's owner and mode through it
 * (s37 attack). socketpair(2) stays: it reaches no one outside.
 */
static int add_root_rules(scmp_filter_ctx ctx)
{
	return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
				SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_UNIX));
}

static void compile_base(void)
{
	compile(&base, add_rules);
}

static void compile_root_extra(void)
{
	compile(&root_extra, add_root_rules);
}

static const struct sock_fprog *compiled(struct compiled *c, void (*fn)(void))
{
	(void)pthread_once(&c->once, fn);
	if (!c->prog.filter) {
		errno = c->err ? c->err : EINVAL;
		return NULL;
	}
	return &c->prog;
}

const struct sock_fprog *cg_seccomp_filter(void)
{
	return compiled(&base, compile_base);
}

const struct sock_fprog *cg_seccomp_filter_root(void)
{
	return compiled(&root_extra, compile_root_extra);
}

int cg_seccomp_load(const struct sock_fprog *p)
{
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p, 0, 0) == 0 ? 0 : errno;
}

json_t *cg_seccomp_denied_json(void)
{
	json_t *a = json_array();
	if (!a)
		return NULL;
	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
		(void)json_array_append_new(a, json_string(denied[i]));
	(void)json_array_append_new(a, json_string("unshare(CLONE_NEWUSER)"));
	(void)json_array_append_new(a, json_string("clone(CLONE_NEWUSER)"));
	(void)json_array_append_new(a, json_string("clone3 (ENOSYS)"));
	(void)json_array_append_new(a, json_string("ioctl(TIOCSTI)"));
	(void)json_array_append_new(a, json_string("ioctl(TIOCLINUX)"));
	(void)json_array_append_new(a,
				    json_string("chmod/open/mknod family with set-uid or set-gid "
						"mode bits"));
	(void)json_array_append_new(a, json_string("mknod of a character or block device"));
	(void)json_array_append_new(a, json_string("openat2 (ENOSYS)"));
	(void)json_array_append_new(a, json_string("socket(AF_VSOCK) (EAFNOSUPPORT)"));
	if (SECCOMP_CEILING)
		(void)json_array_append_new(
		    a, json_string("every syscall after removexattrat (466), not yet reviewed: "
				   "open_tree_attr, file_setattr, ... (ENOSYS)"));
	return a;
}
