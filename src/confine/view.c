/* SPDX-License-Identifier: MIT */
/*
 * view — build, per stage, the world a confined call sees (see view.h and
 * docs/confinement.md, "The view").
 *
 * The stage's process is cloned into new mount, pid, UTS and IPC
 * namespaces (cg_view_clone_flags). As pid 1 of them it builds the view
 * with the new mount API, each step for a reason:
 *
 *   1. / made private recursively: nothing we mount propagates to the host.
 *   2. A recursive clone of / (open_tree), read-only, nosuid, nodev, stacked
 *      on / and entered with fchdir: every later target is a path relative
 *      to the new root, opened with RESOLVE_NO_SYMLINKS, because the agent
 *      writes these trees and a symlink swapped in must not move a mount.
 *   3. The private /tmp: a tmpfs of the stage's own, made here (a mount the
 *      parent made would cost the parent an RCU grace period to release).
 *   4. The write set: host trees cloned read-write (nosuid, nodev).
 *   5. Protected paths inside them: clones made read-only again (EROFS for
 *      .git/hooks, .git/config, shell start-up files).
 *   6. Hidden paths: covered by an empty directory or file of mode 0000 from
 *      a read-only tmpfs: nothing to read, list or connect to.
 *   7. /dev: a tmpfs with null, zero, full, random, urandom, tty bound from
 *      the host (nodev must not apply to them), a private devpts and shm;
 *      then the tmpfs itself read-only.
 *   8. A fresh /proc of the stage's pid namespace (the daemon and every
 *      other process are absent), /proc/sys, irq, bus and fs read-only,
 *      kcore, keys, kpage*, iomem and the like masked by /dev/null.
 *   9. pivot_root, the old root detached; the cwd re-entered by path and
 *      checked to be the same directory the parent pinned.
 *
 * Pid 1 then splits off the command (cg_view_spawn): pid 1 of a namespace
 * ignores every signal it has no handler for (SIGPIPE on `yes | head -1`,
 * SIGTERM at the deadline), so the command runs as pid 2 while pid 1
 * waits, forwards signals and exits with the command's status; when it
 * exits the kernel kills whatever is left in the namespace. Pid 1 does
 * that as callgate-init (cmd/callgate_init.c), which it execs before the
 * command does anything at all (the command waits for EOF on a pipe that
 * the exec closes, after the exec has let go of pid 1's old memory), so
 * that the call never sees a pid 1 holding the daemon's memory: pid 1
 * either shares the daemon's memory until then
 * (cg_confine_spawn, no page tables copied) or is a fork of it. Without
 * callgate-init, a forked pid 1 stays as the init, non-dumpable.
 *
 * Invariants:
 *  - The child side (cg_view_enter, cg_view_spawn, cg_caps_drop_all) MUST
 *    only make async-signal-safe calls: raw syscalls on prepared data.
 *  - Every step MUST fail closed: an error is returned, nothing execs.
 *  - A forked pid 1 MUST be non-dumpable: it is a copy of the daemon's
 *    memory. A pid 1 that shares the daemon's memory MUST NOT write to any
 *    of it but its own stack and the command's (which holds the command's
 *    start record), and the command MUST NOT run before pid 1 is
 *    callgate-init.
 *  - Host state MUST NOT change, except that a missing `.git/hooks` under an
 *    existing `.git` of a write tree is created empty (what `git init`
 *    creates) so that it can be covered read-only, and a missing scratch
 *    directory is created empty, owned by the call's uid, in a directory of
 *    that uid's, so that it can be covered by the call's own tmpfs.
 */
#include "view_parts.h"
#include "watch.h"

#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/securebits.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netns.h"
#include "util.h"

#define VIEW_MAX_PATHS	2048	    /* per list */
#define VIEW_STACK	(64 * 1024) /* the command's stack until it execs */
#define VIEW_HOSTNAME	"callgate"
#define GITMODULES_CAP	((size_t)1 << 20) /* the most of a .gitmodules read */
#define VIEW_MNT_DETACH 2 /* <sys/mount.h> clashes with <linux/mount.h> in glibc 2.36 */

/* Credential stores under the call's home: hidden in every view. */
static const char *const home_secrets[] = {
	".ssh",
	".gnupg",
	".aws",
	".config/gcloud",
	".azure",
	".kube",
	".docker",
	".netrc",
	".git-credentials",
	".config/git/credentials",
	".npmrc",
	".pypirc",
	".config/gh",
	".config/hub",
	".vault-token",
	".password-store",
	".local/share/keyrings",
	".pgpass",
	".cargo/credentials",
	".cargo/credentials.toml",
	".gem/credentials",
	".terraform.d/credentials.tfrc.json",
	".config/rclone",
	".config/op",
	".mozilla",
	".config/google-chrome",
	".config/chromium",
	/* agents' and tools' own logins and tokens */
	".claude/.credentials.json",
	".claude.json", /* Claude Code's MCP server tokens, an API key login */
	".codex/auth.json",
	".config/github-copilot",
	".cache/huggingface/token",
	".huggingface/token",
	".m2/settings.xml",
	".gradle/gradle.properties",
	".config/gcloud/credentials.db",
	".config/doctl",
	".fly",
	".config/heroku",
	".netlify/config.json",
	".wrangler/config",
	/* shell and REPL histories: tokens typed on a command line end up here */
	".bash_history",
	".zsh_history",
	".python_history",
	".psql_history",
	".mysql_history",
	".node_repl_history",
	/* s44a F2: stores a confined call read and sent back, and more of their kind */
	".config/containers/auth.json",
	".my.cnf",
	".mylogin.cnf",
	".s3cfg",
	".config/glab-cli",
	".dbt/profiles.yml",
	".config/sops",
	".pulumi/credentials.json",
	".kaggle/kaggle.json",
	".terraformrc",
	".boto",
	".composer/auth.json",
	".config/composer/auth.json",
	".ivy2/.credentials",
	".sbt/.credentials",
	".m2/settings-security.xml",
	".tsh",
	".oci",
	".databrickscfg",
	".config/hcloud",
	".config/configstore",
	".ngrok2",
	".config/ngrok",
	".cloudflared",
	".config/pypoetry/auth.toml",
	".local/share/python_keyring",
	".config/Bitwarden CLI",
	".local/share/gopass",
	".local/share/kwalletd",
	".pki",
	".keychain",
	".minikube",
	".talos",
	".config/openstack",
	".config/linode-cli",
	".config/scw",
	".aliyun",
	".ibmcloud",
	".config/stripe",
	".sentryclirc",
	".circleci/cli.yml",
	".travis/config.yml",
	".config/netlify",
	".local/share/com.vercel.cli",
	".supabase/access-token",
	".railway",
	".expo/state.json",
	".config/.wrangler",
	".snowsql/config",
	".snowflake/connections.toml",
	".influxdbv2/configs",
	".nuget/NuGet/NuGet.Config",
	".config/NuGet/NuGet.Config",
	".config/helm/repositories.yaml",
	".msmtprc",
	".fetchmailrc",
	".config/discord",
	".config/Slack",
	".config/Code/User/globalStorage",
	".config/BraveSoftware",
	".config/microsoft-edge",
	".thunderbird",
	".ethereum",
	".bitcoin",
	".electrum",
	".config/solana",
	/* git's credential cache: a socket that answers with the cached passwords */
	".git-credential-cache",
	".cache/git/credential",
	/* more histories */
	".local/share/fish/fish_history",
	".sh_history",
	".zhistory",
	".histfile",
	".sqlite_history",
	".rediscli_history",
	".dbshell",
	".irb_history",
	".pry_history",
	".Rhistory",
	".lesshst",
	".local/share/atuin",
	".histdb",
};
/*
 * A call's own /tmp and /dev/shm hold at most this much each (a tmpfs's
 * default is half the machine's memory: s43b F2 filled one until the OOM
 * killer ran), as scratch directories do.
 */
#define CG_VIEW_TMPFS_SIZE "size=2g"

/*
 * System secrets, other services' sockets, the daemon's default state.
 * A root caller's command runs as uid 0 without capabilities, so it still
 * owns every root-owned file: the common root-only key stores are here.
 */
static const char *const system_hidden[] = {
	"/etc/shadow",
	"/etc/gshadow",
	"/etc/shadow-",
	"/etc/gshadow-",
	"/etc/sudoers",
	"/etc/sudoers.d",
	"/etc/security/opasswd",
	"/etc/ssh/ssh_host_*_key",
	"/etc/ssl/private",
	"/etc/krb5.keytab",
	"/etc/wireguard",
	"/etc/NetworkManager/system-connections",
	"/etc/letsencrypt",
	"/etc/kubernetes",
	"/etc/rancher",
	"/etc/ipsec.secrets",
	"/etc/ppp/chap-secrets",
	"/etc/ppp/pap-secrets",
	"/run",
	"/var/run",
	"/var/lib/callgate",
	/*
	 * Group-gated sockets outside /run that are the host's root to whoever
	 * reaches them: LXD's and Incus's (a privileged container with / mounted),
	 * Docker's when it lives under /var/lib. A per-user daemon's calls keep
	 * the user's supplementary groups (s43a F4).
	 */
	"/var/snap/lxd/common/lxd",
	"/var/lib/lxd",
	"/var/lib/incus",
	"/var/lib/docker",
};
/*
 * Inside each write tree and the call's home: read-only, because the
 * developer's tools run them (an agent's own settings name its hooks and
 * MCP servers; an editor's tasks run commands).
 */
static const char *const protected_rel[] = {
	".bashrc",
	".bash_profile",
	".bash_login",
	".profile",
	".zshrc",
	".zshenv",
	".zprofile",
	".gitconfig",
	".claude",
	".mcp.json",
	".vscode",
	".envrc",
	".gitmodules",
	/* hook managers: the developer's git commit runs what these name (core.hooksPath) */
	".husky",
	".githooks",
	".pre-commit-config.yaml",
	"lefthook.yml",
	".lefthook.yml",
	"lefthook.yaml",
	".lefthook.yaml",
	"lefthook.toml",
	".lefthook.toml",
	"lefthook.json",
	".lefthook.json",
	"lefthook-local.yml",
	".lefthook-local.yml",
	"lefthook-local.yaml",
	".lefthook-local.yaml",
	"lefthook-local.toml",
	".lefthook-local.toml",
	"lefthook-local.json",
	".lefthook-local.json",
	".config/lefthook.yml",
	".config/lefthook.yaml",
	".config/lefthook.toml",
	".config/lefthook.json",
	".config/lefthook-local.yml",
	".config/lefthook-local.yaml",
	".config/lefthook-local.toml",
	".config/lefthook-local.json",
	/* lefthook's source_dir and source_dir_local: scripts a hook runs (s41a F2) */
	".lefthook",
	".lefthook-local",
	/*
	 * What other tools run on a benign action (s37 attack): Mercurial's and
	 * Jujutsu's repositories (hg status loads .hg/hgrc's hooks and
	 * extensions), pdb's start-up commands, direnv's local file, mise's
	 * configuration (trusted by path, not content), and other agents' and
	 * editors' project settings (hooks, MCP servers, language servers).
	 */
	".hg",
	".jj",
	".pdbrc",
	".envrc.local",
	"mise.toml",
	".mise.toml",
	"mise.local.toml",
	".mise.local.toml",
	".mise",
	".config/mise.toml",
	".config/mise",
	".gemini",
	".cursor",
	".codex",
	".zed",
	".devcontainer",
	/*
	 * What a developer's tools run on opening the project, before anyone
	 * builds anything (s39a): cargo metadata, as rust-analyzer runs it, took
	 * .cargo/config.toml's build.rustc-wrapper and ran it as the developer;
	 * JetBrains' startup tasks, yarn's yarnPath (any yarn command), and
	 * (neo)vim's project exrc files likewise.
	 */
	".cargo/config.toml",
	".cargo/config",
	".idea",
	".yarnrc.yml",
	/*
	 * yarn 1's yarn-path, which any yarn command hands itself to (s41a F4);
	 * rustup's toolchain path, which any cargo runs; Maven's extensions and
	 * JVM options, which an IDE loads on opening the project; Helix's
	 * language servers.
	 */
	".yarnrc",
	"rust-toolchain.toml",
	"rust-toolchain",
	".mvn",
	".helix",
	".nvim.lua",
	".nvimrc",
	".exrc",
	/*
	 * Other agents' project settings, which start MCP servers, plugins,
	 * linters or test commands when the project is opened or edited
	 * (s43a F5): opencode's, Roo's, Amazon Q's, Kiro's, Continue's, Crush's,
	 * Junie's, Windsurf's and aider's.
	 */
	"opencode.json",
	"opencode.jsonc",
	".opencode",
	".roo",
	".amazonq",
	".kiro",
	".continue",
	"crush.json",
	".crush.json",
	".junie",
	".windsurf",
	".aider.conf.yml",
};
_Static_assert(CG_ARRAY_LEN(protected_rel) <= 128, "a nested root's mask holds 128 names");
const char *const *const cg_view_protected_rel = protected_rel;
const size_t cg_view_n_protected_rel = CG_ARRAY_LEN(protected_rel);

/*
 * A repository's .git under git: write (pinned, so that it cannot be renamed
 * away with them): what names programs the developer's git runs, or another
 * directory to take them from. Globs; only those that exist are mounted over,
 * and hooks is created first (as git init would) so that it can be.
 */
static const char *const git_protected[] = {
	"hooks",
	"config",
	"commondir",
	"config.worktree",
	"modules/*/hooks",
	"modules/*/config",
	"worktrees/*/commondir",
	"worktrees/*/config.worktree",
	"worktrees/*/gitdir",
};

/* ---- raw syscalls (glibc 2.36 has no wrappers for all of them) ---------- */

static int sys_open_tree(int dfd, const char *p, unsigned fl)
{
	return (int)syscall(SYS_open_tree, dfd, p, fl);
}

static int sys_move_mount(int fd, int tfd)
{
	return (int)syscall(SYS_move_mount, fd, "", tfd, "",
			    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
}

static int sys_setattr(int fd, unsigned fl, uint64_t set, uint64_t clr)
{
	struct mount_attr a = { .attr_set = set, .attr_clr = clr };
	return (int)syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | fl, &a, sizeof(a));
}

static int sys_mount(const char *src, const char *tgt, const char *type, unsigned long fl,
		     const char *data)
{
	return (int)syscall(SYS_mount, src, tgt, type, fl, data);
}

/* O_PATH fd of rel (relative to dfd), never through a symlink. */
static int open_nofollow(int dfd, const char *rel)
{
	struct open_how h = { .flags = O_PATH | O_CLOEXEC | O_NOFOLLOW,
			      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	return (int)syscall(SYS_openat2, dfd, rel, &h, sizeof(h));
}

/* ---- child: mounting ------------------------------------------------------ */

static int detached_tmpfs(const char *mode, bool holes);

/* The filesystems a view mounts: the parent's, or (user namespace) the child's own. */
struct view_fds {
	int holes; /* the read-only tmpfs of holes hidden paths are covered with */
};

/*
 * Clone the mount at src (dfd + path, no symlinks; "" for dfd itself), set
 * its attributes, and move it over dst (relative to the cwd, the new root).
 * 0, or an errno value.
 */
static int bind_clone(int dfd, const char *src, bool rec, uint64_t set, uint64_t clr,
		      const char *dst)
{
	int rc = 0, s = -1, m = -1, t = -1;
	unsigned rfl = rec ? AT_RECURSIVE : 0;
	if (src[0] && (s = open_nofollow(dfd, src)) < 0)
		return errno;
	m = sys_open_tree(src[0] ? s : dfd, "",
			  OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | rfl);
	if (m < 0 || ((set || clr) && sys_setattr(m, rfl, set, clr) != 0) ||
	    (t = open_nofollow(AT_FDCWD, dst)) < 0 || sys_move_mount(m, t) != 0)
		rc = errno ? errno : EIO;
	if (t >= 0)
		(void)close(t);
	if (m >= 0)
		(void)close(m);
	if (s >= 0)
		(void)close(s);
	return rc;
}

/* An empty regular file at rel to mount a device over. */
static int make_point(const char *rel)
{
	int fd = open(rel, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return errno;
	(void)close(fd);
	return 0;
}

/* /dev: a read-only tmpfs of six host devices, a private pts and shm. */
static int build_dev(const struct cg_view *v, const struct view_fds *f)
{
	static const char *const devs[][2] = {
		{ "dev/null", "/dev/null" },	   { "dev/zero", "/dev/zero" },
		{ "dev/full", "/dev/full" },	   { "dev/random", "/dev/random" },
		{ "dev/urandom", "/dev/urandom" }, { "dev/tty", "/dev/tty" }
	};
	static const char *const links[][2] = { { "pts/ptmx", "dev/ptmx" },
						{ "/proc/self/fd", "dev/fd" },
						{ "/proc/self/fd/0", "dev/stdin" },
						{ "/proc/self/fd/1", "dev/stdout" },
						{ "/proc/self/fd/2", "dev/stderr" } };
	int rc;
	if (sys_mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") != 0)
		return errno;
	for (size_t i = 0; i < CG_ARRAY_LEN(devs); i++)
		if ((rc = make_point(devs[i][0])) != 0 ||
		    (rc = bind_clone(AT_FDCWD, devs[i][1], false,
				     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NODEV,
				     devs[i][0])) != 0)
			return rc;
	if (mkdir("dev/pts", 0755) != 0 || mkdir("dev/shm", 01777) != 0)
		return errno;
	/* A new devpts instance: the host's terminals are not reachable. */
	if (sys_mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		      "newinstance,ptmxmode=0666,mode=0620") != 0)
		return errno;
	if (sys_mount("tmpfs", "dev/shm", "tmpfs",
		      MS_NOSUID | MS_NODEV | (v->noexec_writes ? MS_NOEXEC : 0),
		      "mode=1777," CG_VIEW_TMPFS_SIZE) != 0)
		return errno;
	for (size_t i = 0; i < CG_ARRAY_LEN(links); i++)
		if (symlink(links[i][0], links[i][1]) != 0)
			return errno;
	/* Nothing new can appear in /dev (a FIFO or file squatting a name). */
	int d = open_nofollow(AT_FDCWD, "dev");
	if (d < 0)
		return errno;
	rc = sys_setattr(d, 0, MOUNT_ATTR_RDONLY, 0) == 0 ? 0 : errno;
	(void)close(d);
	return rc;
}

/*
 * /proc of this pid namespace. What uid 0 owns there and the host shares is
 * read-only: sysctls, SysRq, IRQ affinity, buses and filesystems (an
 * attack wrote /proc/irq from a view with no Landlock file rules). What
 * reads the host's memory, keys or layout is replaced by /dev/null (as the
 * container runtimes do). A kernel without one of them has nothing to cover.
 */
static int build_proc(void)
{
	static const char *const read_only[] = { "proc/sys", "proc/sysrq-trigger", "proc/irq",
						 "proc/bus", "proc/fs" };
	static const char *const masked[] = {
		"proc/kcore",	   "proc/keys",	       "proc/key-users", "proc/kpageflags",
		"proc/kpagecount", "proc/kpagecgroup", "proc/iomem",	 "proc/ioports",
		"proc/timer_list", "proc/sched_debug", "proc/slabinfo",	 "proc/vmallocinfo"
	};
	int rc;
	if (sys_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		return errno;
	for (size_t i = 0; i < CG_ARRAY_LEN(read_only); i++)
		if ((rc = bind_clone(AT_FDCWD, read_only[i], false, MOUNT_ATTR_RDONLY, 0,
				     read_only[i])) != 0 &&
		    rc != ENOENT)
			return rc;
	for (size_t i = 0; i < CG_ARRAY_LEN(masked); i++)
		if ((rc = bind_clone(AT_FDCWD, "dev/null", false, MOUNT_ATTR_RDONLY, 0,
				     masked[i])) != 0 &&
		    rc != ENOENT)
			return rc;
	return 0;
}

/*
 * mkdir -p of a write tree's path inside the private /tmp (relative,
 * "tmp/…"), each directory with the owner and mode of the host's at the same
 * path (read through the absolute path, which still names the host's /tmp
 * here): the search permission above a workspace is the host's, not root's
 * 0755 (s42a F1: another uid's 0700 home under /tmp was open in the call's
 * /tmp). Where an owner cannot be set (a user namespace: one uid anyway) or
 * the host's directory is gone, 0755, whatever the umask.
 */
static int make_tmp_dirs(const char *rel)
{
	char buf[PATH_MAX + 1];
	size_t n = strlen(rel);
	if (n + 1 >= sizeof(buf))
		return ENAMETOOLONG;
	buf[0] = '/';
	memcpy(buf + 1, rel, n + 1);
	char *d = buf + 1; /* the relative path; buf is the host's absolute one */
	for (size_t i = 4; i <= n; i++) {
		if (d[i] != '/' && d[i] != 0)
			continue;
		char c = d[i];
		d[i] = 0;
		struct stat host;
		bool mirror = stat(buf, &host) == 0 && S_ISDIR(host.st_mode);
		if (mkdir(d, 0700) != 0 && errno != EEXIST)
			return errno;
		if (mirror && lchown(d, host.st_uid, host.st_gid) == 0) {
			if (chmod(d, host.st_mode & 07777) != 0)
				return errno;
			/*
			 * An access ACL narrows what the mode says (user:peer:---):
			 * copied too, or, where it cannot be, the directory is
			 * closed to all but its owner (s42d F3: the mode alone let
			 * a peer the ACL shut out in).
			 */
			char acl[4096];
			ssize_t an = getxattr(buf, "system.posix_acl_access", acl, sizeof(acl));
			if ((an > 0 &&
			     setxattr(d, "system.posix_acl_access", acl, (size_t)an, 0) != 0) ||
			    (an < 0 && errno != ENODATA && errno != ENOTSUP))
				if (chmod(d, host.st_mode & 07700) != 0)
					return errno;
		} else if (chmod(d, 0755) != 0) {
			return errno;
		}
		d[i] = c;
	}
	return 0;
}

/* mkdir -p of rel's parent directories (the first component exists). */
static int make_parents(const char *rel)
{
	char buf[PATH_MAX];
	size_t n = strlen(rel);
	if (n >= sizeof(buf))
		return ENAMETOOLONG;
	memcpy(buf, rel, n + 1);
	for (char *p = strchr(buf, '/'); p && (p = strchr(p + 1, '/'));) {
		*p = 0;
		if ((mkdir(buf, 0755) != 0 && errno != EEXIST) || chmod(buf, 0755) != 0)
			return errno;
		*p = '/';
	}
	return 0;
}

/*
 * A granted socket (forward_agent) stays reachable where it lives: a mount
 * point is made in the private /tmp or in the tmpfs that stands for its
 * hidden directory, the socket is bound over it, and that tmpfs is then
 * made read-only. Everything else there stays hidden.
 */
static int reveal(const struct cg_view *v)
{
	int rc, d;
	if (!v->reveal)
		return 0;
	if ((rc = make_parents(v->reveal + 1)) != 0 || (rc = make_point(v->reveal + 1)) != 0 ||
	    (rc = bind_clone(AT_FDCWD, v->reveal, false, 0, 0, v->reveal + 1)) != 0)
		return rc;
	if (v->reveal_under == SIZE_MAX)
		return 0;
	if ((d = open_nofollow(AT_FDCWD, v->hide[v->reveal_under] + 1)) < 0)
		return errno;
	rc = sys_setattr(d, 0, MOUNT_ATTR_RDONLY, 0) == 0 ? 0 : errno;
	(void)close(d);
	return rc;
}

/* Steps 1-2: a read-only copy of / entered as the cwd. */
static int enter_copy(void)
{
	if (sys_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return errno;
	int root = sys_open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (root < 0)
		return errno;
	int rc = 0;
	if (sys_setattr(root, AT_RECURSIVE,
			MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0) != 0 ||
	    syscall(SYS_move_mount, root, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0 ||
	    fchdir(root) != 0)
		rc = errno;
	(void)close(root);
	return rc;
}

/* Steps 3-6: /tmp, write trees, protected and hidden paths. */
static int place_trees(const struct cg_view *v, const struct view_fds *f)
{
	int rc;
	unsigned long nx = v->noexec_writes ? MS_NOEXEC : 0;
	uint64_t nx_attr = v->noexec_writes ? MOUNT_ATTR_NOEXEC : 0;
	if (v->private_tmp && sys_mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV | nx,
					"mode=1777," CG_VIEW_TMPFS_SIZE) != 0)
		return errno;
	for (size_t i = 0; i < v->n_tmp_dirs; i++)
		if ((rc = make_tmp_dirs(v->tmp_dirs[i] + 1)) != 0)
			return rc;
	for (size_t i = 0; i < v->n_keep; i++)
		if ((rc = bind_clone(AT_FDCWD, v->keep[i], true,
				     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0,
				     v->keep[i] + 1)) != 0)
			return rc;
	/*
	 * Write trees and pins keep the host's own read-only flags: a read-only
	 * mount below the workspace (a vendored tree, a mounted image) stays so.
	 */
	for (size_t i = 0; i < v->n_write; i++)
		if ((rc = bind_clone(AT_FDCWD, v->write[i], true,
				     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | nx_attr, 0,
				     v->write[i] + 1)) != 0)
			return rc;
	for (size_t i = 0; i < v->n_pin; i++)
		if ((rc = bind_clone(AT_FDCWD, v->pin[i] + 1, false,
				     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | nx_attr, 0,
				     v->pin[i] + 1)) != 0)
			return rc;
	/* Outermost first, with what is mounted below each: an anchor covers nothing. */
	for (size_t i = 0; i < v->n_anchor; i++)
		if ((rc = bind_clone(AT_FDCWD, v->anchor[i] + 1, true, 0, 0, v->anchor[i] + 1)) !=
		    0)
			return rc;
	/* The call's own caches: written, never the host's, gone with the view. */
	for (size_t i = 0; i < v->n_scratch; i++)
		if (sys_mount("tmpfs", v->scratch[i] + 1, "tmpfs", MS_NOSUID | MS_NODEV | nx,
			      v->scratch_opts) != 0)
			return errno;
	for (size_t i = 0; i < v->n_protect; i++)
		if ((rc = bind_clone(AT_FDCWD, v->protect[i] + 1, false, MOUNT_ATTR_RDONLY, 0,
				     v->protect[i] + 1)) != 0)
			return rc;
	for (size_t i = 0; i < v->n_hide; i++) {
		if (i == v->reveal_under)
			rc = sys_mount("tmpfs", v->hide[i] + 1, "tmpfs",
				       MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=16k") == 0
				 ? 0
				 : errno;
		else
			rc = bind_clone(f->holes, v->hide_dir[i] ? "d" : "f", false, 0, 0,
					v->hide[i] + 1);
		if (rc != 0 && rc != ENOENT) /* gone since prepare: nothing to hide */
			return rc;
	}
	return reveal(v);
}

/*
 * The call's /tmp and /dev/shm are mounted by the child itself, in place
 * (place_trees, build_dev): a detached filesystem costs an RCU grace period
 * (~0.6 ms measured) when its last fd closes. In a user namespace the holes
 * are made here too (the parent lacks CAP_SYS_ADMIN for them); that fd is
 * close-on-exec, gone with pid 1's and the command's execs.
 */
static int child_filesystems(const struct cg_view *v, struct view_fds *f)
{
	*f = (struct view_fds){ v->empty_fd };
	if (v->userns && (f->holes = detached_tmpfs("0755", true)) < 0)
		return errno;
	return 0;
}

int cg_view_fd(const struct cg_view *v)
{
	return v->empty_fd;
}

int cg_view_enter(const struct cg_view *v)
{
	const char *cwd = v->cwd;
	struct stat before, after;
	struct view_fds f;
	int rc;
	if (v->userns && (rc = cg_userns_map_self(v->outer_uid, v->outer_gid)) != 0)
		return rc;
	if ((rc = child_filesystems(v, &f)) != 0)
		return rc;
	/* The pinned cwd (an fd of the daemon's namespace): its identity only. */
	if (stat(".", &before) != 0)
		return errno;
	if ((rc = enter_copy()) != 0 || (rc = place_trees(v, &f)) != 0 ||
	    (rc = build_dev(v, &f)) != 0 || (rc = build_proc()) != 0)
		return rc;
	if (sethostname(VIEW_HOSTNAME, sizeof(VIEW_HOSTNAME) - 1) != 0 ||
	    syscall(SYS_pivot_root, ".", ".") != 0 ||
	    syscall(SYS_umount2, ".", VIEW_MNT_DETACH) != 0 || chdir("/") != 0)
		return errno;
	/* The same directory the parent pinned, or the call does not run. */
	int d = cwd[1] ? open_nofollow(AT_FDCWD, cwd + 1) : open_nofollow(AT_FDCWD, ".");
	if (d < 0)
		return errno;
	rc = fstat(d, &after) != 0	     ? errno
	     : after.st_dev != before.st_dev ? EXDEV
	     : after.st_ino != before.st_ino ? EXDEV
	     : fchdir(d) != 0		     ? errno
					     : 0;
	(void)close(d);
	return rc;
}

/* ---- child: pid 1 and the command --------------------------------------- */

/*
 * The command's start record. Pid 1 writes it at the top of the command's
 * own stack, with a copy of fn's argument: when pid 1 shares the daemon's
 * memory, its own stack is unmapped once it execs callgate-init, and the
 * command must need nothing from it by then.
 */
struct cmd_start {
	void (*fn)(void *);
	int hold_fd; /* read end: EOF once pid 1 has exec'd callgate-init (or died); -1: none */
	int hold_wr; /* the write end: only pid 1 may hold it */
	_Alignas(max_align_t) unsigned char arg[CG_VIEW_ARG_MAX];
};

static int cmd_main(void *p)
{
	struct cmd_start *c = p;
	if (c->hold_fd >= 0) {
		/*
		 * Nothing of the command runs until pid 1's exec has let go of
		 * its old memory: a command that looks at /proc/1 at once sees
		 * callgate-init (or, for an instant, an exec still loading it),
		 * never a process that shares the daemon's memory. EOF also
		 * comes if pid 1 dies instead; the kernel then kills the
		 * namespace, this process with it, as that exit completes, and
		 * until then the command can reach no further than its
		 * permit's wait.
		 */
		char b;
		(void)close(c->hold_wr);
		while (read(c->hold_fd, &b, 1) < 0 && errno == EINTR)
			;
		(void)close(c->hold_fd);
	}
	c->fn(c->arg); /* execs, or reports its failure and exits */
	_exit(127);
}

/*
 * Pid 1 becomes callgate-init (cmd/callgate_init.c). Every fd is marked
 * close-on-exec first, the command's pipes on 0..2 included: the daemon
 * sees EOF when the command closes them, and the command sees EOF on its
 * hold pipe once the exec succeeded. Returns only on failure, after
 * killing the command: a pid 1 that cannot become the init does not stay
 * behind, and the command never ran.
 */
static int exec_init(int init_fd, pid_t cmd)
{
	char name[] = "callgate-init", num[24];
	num[cg_fmt_u64(num, cmd > 0 ? (uint64_t)cmd : 0)] = '\0';
	char *const argv[] = { name, num, NULL };
	char *const envp[] = { NULL };
	(void)syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_CLOEXEC);
	(void)syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
	int e = errno;
	(void)kill(cmd, SIGKILL);
	return e;
}

static volatile pid_t cmd_pid; /* pid 1's copy (no callgate-init): whom to forward to */

static void forward(int sig)
{
	if (cmd_pid > 0)
		(void)kill(cmd_pid, sig);
}

/* Pid 1 without callgate-init: forward signals, reap, exit with the command's status. */
__attribute__((noreturn)) static void wait_as_init(pid_t pid)
{
	cmd_pid = pid;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward;
	const int fwd[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	for (size_t i = 0; i < CG_ARRAY_LEN(fwd); i++)
		(void)sigaction(fwd[i], &sa, NULL);
	/* Pid 1 holds no pipe: the daemon sees EOF when the command closes them. */
	(void)syscall(SYS_close_range, 0U, ~0U, 0U);
	int st = 0;
	for (;;) {
		int s;
		pid_t w = waitpid(-1, &s, 0);
		if (w == pid) {
			st = s;
			break;
		}
		if (w < 0 && errno != EINTR)
			break;
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0));
}

__thread bool cg_oom_deferred;

/* One pass over the cgroup's processes; how many it raised. */
static int oom_first_pass(int cg_fd)
{
	char buf[4096], path[64], now[8];
	int fd = openat(cg_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	int raised = 0;
	if (fd >= 0)
		(void)close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (char *p = buf, *end; *p; p = end) {
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		end += *end == '\n';
		(void)snprintf(path, sizeof(path), "/proc/%ld/oom_score_adj", pid);
		int w = open(path, O_RDWR | O_CLOEXEC);
		if (w < 0)
			continue;
		ssize_t k = read(w, now, sizeof(now) - 1);
		if (k < 4 || strncmp(now, "1000", 4) != 0) {
			(void)!pwrite(w, "1000", 4, 0);
			raised++;
		}
		(void)close(w);
	}
	return raised;
}

void cg_oom_first_procs(int cg_fd)
{
	/* Again while a pass raised one: a child forked during it kept the old score (s43e F6). */
	for (int pass = 0; cg_fd >= 0 && pass < 4 && oom_first_pass(cg_fd) > 0; pass++)
		;
}

void cg_oom_first(void)
{
	if (cg_oom_deferred)
		return; /* this memory is the daemon's until exec: raised after it */
	/*
	 * oom_score_adj 1000: the kernel's OOM killer takes a call's processes
	 * (its pid 1 too, which holds its tmpfs) before the daemon, whatever
	 * their sizes: 1000 adds the whole of the memory in question to their
	 * score, more than any process in it can hold. A call that filled its
	 * private /tmp killed callgated (s36), and with it every running call,
	 * waiting approval and grant (500 was not enough for a daemon built with
	 * ASan). Raising is always allowed; lowering again needs privilege. Best
	 * effort, async-signal-safe.
	 */
	static const char adj[] = "1000";
	int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t w = write(fd, adj, sizeof(adj) - 1);
		(void)w;
		(void)close(fd);
	}
}

int cg_view_spawn(const struct cg_view *v, void (*fn)(void *), const void *arg, size_t arg_len,
		  int init_fd, pid_t *exec_word)
{
	cg_oom_first();
	/*
	 * A forked pid 1 is a copy of the daemon's memory: no ptrace, no
	 * /proc/1/mem. A shared one is the daemon itself until it execs
	 * callgate-init, which makes itself non-dumpable.
	 */
	if (!exec_word && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return errno;
	if (exec_word && init_fd < 0)
		return ENOEXEC; /* cg_confine_spawn shares only with the init at hand */
	if (arg_len > CG_VIEW_ARG_MAX)
		return E2BIG;
	cg_stack_unpoison(v->stack, VIEW_STACK); /* a stage before this one ran on it */
	struct cmd_start *c = (struct cmd_start *)((char *)v->stack + VIEW_STACK) - 1;
	c->fn = fn;
	c->hold_fd = c->hold_wr = -1;
	memcpy(c->arg, arg, arg_len);
	int hold[2];
	if (init_fd >= 0) {
		if (syscall(SYS_pipe2, hold, O_CLOEXEC) != 0)
			return errno;
		c->hold_fd = hold[0];
		c->hold_wr = hold[1];
	}
	/*
	 * CLONE_VM: no copy of pid 1's page tables. With callgate-init, pid 1
	 * goes on at once and execs it while the command waits on its hold
	 * pipe; a daemon's thread whose memory we share waits on exec_word
	 * (set here by the kernel, cleared by it when the command execs or
	 * exits), because until then the command runs on that thread's TLS.
	 * Without it, CLONE_VFORK: pid 1 resumes once the command has exec'd
	 * or failed, and stays as the init.
	 */
	int flags = CLONE_VM | SIGCHLD;
	if (exec_word)
		flags |= CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
	if (init_fd < 0)
		flags |= CLONE_VFORK;
	/* The stack below the record, 16-byte aligned as the ABI wants. */
	char *sp = (char *)((uintptr_t)c & ~(uintptr_t)15);
	pid_t pid = clone(cmd_main, sp, flags, c, exec_word, NULL, exec_word);
	int e = errno;
	if (init_fd >= 0)
		(void)close(hold[0]);
	if (pid < 0) {
		if (init_fd >= 0)
			(void)close(hold[1]);
		return e;
	}
	if (init_fd >= 0)
		return exec_init(init_fd, pid);
	/* No callgate-init: pid 1 stays, a copy of the daemon, as the init. */
	wait_as_init(pid);
}

int cg_caps_lock(void)
{
	/*
	 * NOROOT: uid 0 gains nothing at execve; NO_SETUID_FIXUP: changing ids
	 * neither keeps nor restores anything behind our back; all locked.
	 */
	if (prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP |
					 SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT |
					 SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
					 SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
		return errno;
	/* Capabilities are numbered from 0 without gaps: EINVAL is past the
	 * kernel's last one, so the rest would be EINVAL too. */
	for (int c = 0; c <= 63; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
			if (errno != EINVAL)
				return errno;
			break;
		}
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0 ? 0 : errno;
}

int cg_view_read_only_but(const char *const *rw, size_t n_rw, const char *cwd)
{
	int keep[CG_VIEW_RW_MAX];
	size_t k = 0;
	int rc = 0;
	struct stat before, after;
	if (n_rw > CG_VIEW_RW_MAX)
		return E2BIG;
	if (stat(".", &before) != 0)
		return errno;
	for (; k < n_rw; k++) {
		int s = open_nofollow(AT_FDCWD, rw[k]);
		keep[k] = s < 0 ? -1
				: sys_open_tree(s, "",
						OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
						    AT_EMPTY_PATH | AT_RECURSIVE);
		rc = keep[k] < 0 ? errno : 0;
		if (s >= 0)
			(void)close(s);
		if (rc)
			break;
	}
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	if (!rc && syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) != 0)
		rc = errno;
	for (size_t done = 0; !rc && done < n_rw; done++) {
		size_t best = SIZE_MAX;
		for (size_t i = 0; i < n_rw; i++)
			if (keep[i] >= 0 && (best == SIZE_MAX || strlen(rw[i]) < strlen(rw[best])))
				best = i;
		int t = open_nofollow(AT_FDCWD, rw[best]);
		if (t < 0 || sys_move_mount(keep[best], t) != 0)
			rc = errno ? errno : EIO;
		if (t >= 0)
			(void)close(t);
		(void)close(keep[best]);
		keep[best] = -1;
	}
	for (size_t i = 0; i < k && i < n_rw; i++)
		if (keep[i] >= 0)
			(void)close(keep[i]);
	if (rc)
		return rc;
	/* The cwd lies under the new mounts now (or under a read-only one). */
	if (chdir(cwd) != 0 || stat(".", &after) != 0)
		return errno;
	return after.st_dev == before.st_dev && after.st_ino == before.st_ino ? 0 : ESTALE;
}

int cg_view_nosymfollow(const char *const *dirs, size_t n, const char *cwd)
{
	struct stat before, after;
	struct mount_attr slave = { .propagation = MS_SLAVE };
	if (stat(".", &before) != 0 || unshare(CLONE_NEWNS) != 0 ||
	    syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &slave, sizeof(slave)) != 0)
		return errno;

	for (size_t i = 0; i < n; i++) {
		/* Each was there when the call was prepared: one gone since fails the call. */
		int rc = bind_clone(AT_FDCWD, dirs[i], true, MOUNT_ATTR_NOSYMFOLLOW, 0, dirs[i]);
		if (rc != 0)
			return rc;
	}
	/* The old cwd lies under the new mounts: lookups from it would not see them. */
	if (chdir(cwd) != 0 || stat(".", &after) != 0)
		return errno;
	return after.st_dev == before.st_dev && after.st_ino == before.st_ino ? 0 : ESTALE;
}

/* Drop caps[] from every set; the ambient set is cleared. 0 or errno. */
static int caps_drop(const int *caps, size_t n)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	for (size_t i = 0; i < n; i++)
		if (prctl(PR_CAPBSET_DROP, caps[i], 0, 0, 0) != 0 && errno != EINVAL)
			return errno;
	if (syscall(SYS_capget, &h, d) != 0)
		return errno;
	for (size_t i = 0; i < n; i++) {
		uint32_t bit = 1u << (caps[i] % 32);
		d[caps[i] / 32].effective &= ~bit;
		d[caps[i] / 32].permitted &= ~bit;
		d[caps[i] / 32].inheritable &= ~bit;
	}
	if (syscall(SYS_capset, &h, d) != 0)
		return errno;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0 ? 0 : errno;
}

int cg_caps_drop_root(bool net)
{
	/* Devices, the kernel and file capabilities; and the network's namespace and setns(). */
	static const int always[] = { CAP_MKNOD,    CAP_SYS_MODULE,	 CAP_SYS_RAWIO,
				      CAP_SETFCAP,  CAP_LINUX_IMMUTABLE, CAP_SYS_BOOT,
				      CAP_SYS_TIME, CAP_MAC_ADMIN,	 CAP_MAC_OVERRIDE };
	static const int with_net[] = { CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN };
	int rc = caps_drop(always, CG_ARRAY_LEN(always));
	return rc || !net ? rc : caps_drop(with_net, CG_ARRAY_LEN(with_net));
}

int cg_caps_clear(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	return syscall(SYS_capset, &h, d) == 0 ? 0 : errno;
}

/* ---- parent: preparing --------------------------------------------------- */

unsigned long cg_view_clone_flags(const struct cg_view *v)
{
	if (!v)
		return 0;
	return CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC |
	       (v->userns ? CLONE_NEWUSER : 0);
}

const char *cg_view_tmp_rule_path(const struct cg_view *v)
{
	return v && v->private_tmp && v->tmp_rule[0] ? v->tmp_rule : NULL;
}

const char *cg_view_shm_rule_path(const struct cg_view *v)
{
	return v && v->shm_rule[0] ? v->shm_rule : NULL;
}

bool cg_view_rules_in_child(const struct cg_view *v)
{
	return v != NULL;
}

/* Append a copy of s to a list (cap VIEW_MAX_PATHS). 0, or -1 (ENOMEM/E2BIG). */
static int list_add(char ***list, size_t *n, const char *s)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*list)[i], s) == 0)
			return 0;
	if (*n >= VIEW_MAX_PATHS) {
		errno = E2BIG;
		return -1;
	}
	char **g = realloc(*list, (*n + 1) * sizeof(**list));
	if (!g)
		return -1;
	*list = g;
	if (!(g[*n] = strdup(s)))
		return -1;
	(*n)++;
	return 0;
}

/*
 * A detached tmpfs (fsopen/fsmount), mode given; with holes, also d/ and f
 * of mode 0000 inside and the whole mount read-only. -1 with errno.
 */
static int detached_tmpfs(const char *mode, bool holes)
{
	int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), m = -1, e;
	if (fs < 0)
		return -1;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", mode, 0) != 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0 ||
	    (m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)) < 0)
		goto fail;
	(void)close(fs);
	fs = -1;
	if (!holes)
		return m;
	int f = openat(m, "f", O_CREAT | O_WRONLY | O_CLOEXEC, 0);
	if (f < 0 || mkdirat(m, "d", 0) != 0)
		goto fail;
	(void)close(f);
	if (sys_setattr(m, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC, 0) != 0)
		goto fail;
	return m;
fail:
	e = errno;
	if (m >= 0)
		(void)close(m);
	if (fs >= 0)
		(void)close(fs);
	errno = e;
	return -1;
}

/*
 * A hidden path is hidden by name when the next call's view is built. In a
 * write tree its parent directories could be renamed by this call (a
 * rename of ~/.config moves ~/.config/gh out of the next view's reach), so
 * each of them, up to the write tree's own mount, is bound onto itself: a
 * mount point, which rename refuses (EBUSY). Listed outermost first.
 */
static int anchor_parents(struct cg_view *v, const char *real)
{
	/* From the outermost write tree holding it: an inner tree's own mount
	 * point is no anchor for the directories between the two. */
	const char *root = NULL;
	for (size_t i = 0; i < v->n_write; i++)
		if (cg_path_under(real, v->write[i]) && strcmp(real, v->write[i]) != 0 &&
		    (!root || strlen(v->write[i]) < strlen(root)))
			root = v->write[i];
	if (!root)
		return 0;
	size_t rl = strlen(root);
	for (const char *p = real + rl + 1; (p = strchr(p, '/')); p++) {
		char dir[PATH_MAX];
		size_t n = (size_t)(p - real);
		if (n >= sizeof(dir))
			break;
		memcpy(dir, real, n);
		dir[n] = '\0';
		if (list_add(&v->anchor, &v->n_anchor, dir) != 0)
			return -1;
	}
	return 0;
}

/*
 * Is real inside a tree bound into the private /tmp (a write tree or the
 * workspace there, collect_write and collect_kept)? Then it is visible in
 * the view and a store in it must be hidden like any other: skipping every
 * path under /tmp showed a state dir kept in such a workspace, signing key
 * and all.
 */
static bool in_tmp_dirs(const struct cg_view *v, const char *real)
{
	for (size_t i = 0; i < v->n_tmp_dirs; i++)
		if (cg_path_under(real, v->tmp_dirs[i]))
			return true;
	return false;
}

/* Add every existing match of pattern (a path or a glob) to the hidden list. */
static int add_hidden(struct cg_view *v, const char *pattern)
{
	glob_t g;
	int rc = 0;
	struct stat st;
	/* Most stores do not exist: one lstat says so without glob's work. */
	if (!strpbrk(pattern, "*?[") && lstat(pattern, &st) != 0)
		return 0;
	if (glob(pattern, GLOB_NOSORT | GLOB_NOESCAPE, NULL, &g) != 0)
		return 0; /* nothing matches: nothing to hide */
	for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
		char real[PATH_MAX];
		/* A symlinked store (~/.ssh -> /data/ssh) is hidden where it lives. */
		if (!realpath(g.gl_pathv[i], real) || stat(real, &st) != 0 ||
		    strcmp(real, "/") == 0)
			continue;
		if (v->private_tmp && cg_path_under(real, "/tmp") && !in_tmp_dirs(v, real))
			continue; /* under the private /tmp and not bound into it: invisible */
		size_t before = v->n_hide;
		if (list_add(&v->hide, &v->n_hide, real) != 0) {
			rc = -1;
			break;
		}
		if (anchor_parents(v, real) != 0) {
			rc = -1;
			break;
		}
		if (v->n_hide > before) {
			unsigned char *d = realloc(v->hide_dir, v->n_hide);
			if (!d) {
				rc = -1;
				break;
			}
			v->hide_dir = d;
			d[v->n_hide - 1] = S_ISDIR(st.st_mode);
		}
	}
	globfree(&g);
	return rc;
}

/*
 * A missing .git/hooks under an existing .git cannot be mounted over:
 * create it empty (as git init would), owned like .git, so that it can.
 */
static void make_hooks_dir(const char *path)
{
	char git[PATH_MAX];
	struct stat st;
	size_t n = strlen(path);
	if (n < 11 || strcmp(path + n - 11, "/.git/hooks") != 0 || n - 6 >= sizeof(git))
		return;
	memcpy(git, path, n - 6);
	git[n - 6] = 0;
	/*
	 * One lookup, through no link, and the owner of what it opened (s43a
	 * F8: a stat and an open by path could meet two directories, if a call
	 * swapped one above .git for a link between them).
	 */
	struct open_how h = { .flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
			      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, git, &h, sizeof(h));
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && mkdirat(fd, "hooks", 0755) == 0)
		(void)fchownat(fd, "hooks", st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
	(void)close(fd);
}

/* The file at dfd + name as a file_id; false if it is not there. */
bool cg_view_file_id(int dfd, const char *name, struct file_id *id)
{
	struct statx sx;
	if (statx(dfd, name, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME, &sx) != 0)
		return false;
	bool dir = S_ISDIR(sx.stx_mode), born = sx.stx_mask & STATX_BTIME;
	*id = (struct file_id){
		.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor),
		.ino = sx.stx_ino,
		.type = sx.stx_mode & S_IFMT,
		.ctime = { dir ? 0 : (time_t)sx.stx_ctime.tv_sec,
			   dir ? 0 : (long)sx.stx_ctime.tv_nsec },
		.btime = { born ? (time_t)sx.stx_btime.tv_sec : 0,
			   born ? (long)sx.stx_btime.tv_nsec : 0 },
	};
	return true;
}

/* path on a list with the file it is now (st), checked at the sweep when suspect. */
static int held_add(char ***list, size_t *n, struct file_id **ids, const char *path,
		    const struct stat *st, bool suspect)
{
	size_t had = *n;
	if (list_add(list, n, path) != 0)
		return -1;
	if (*n == had)
		return 0; /* already there */
	struct file_id *g = realloc(*ids, *n * sizeof(*g));
	if (!g)
		return -1;
	*ids = g;
	if (!cg_view_file_id(AT_FDCWD, path, &g[had]))
		/* Gone since it was looked at: taken for another file at the sweep. */
		g[had] = (struct file_id){ .dev = st->st_dev, .ino = st->st_ino, .type = 1 };
	g[had].suspect = suspect;
	return 0;
}

/* A protected path (absolute) inside some write tree that exists. */
static int add_protected(struct cg_view *v, const char *path)
{
	struct stat st;
	bool inside = false;
	for (size_t i = 0; i < v->n_write; i++)
		inside |= cg_path_under(path, v->write[i]) && strcmp(path, v->write[i]) != 0;
	for (size_t i = 0; i < v->n_protect; i++)
		inside &= !cg_path_under(path, v->protect[i]);
	if (!inside)
		return 0; /* read-only already */
	if (lstat(path, &st) != 0)
		make_hooks_dir(path);
	if (lstat(path, &st) != 0)
		return list_add(&v->missing, &v->n_missing, path); /* no mount covers it */
	if (S_ISLNK(st.st_mode)) {
		/*
		 * No mount covers a link: where it points is made read-only (when
		 * that lies in a write tree), so nothing is written through it, and
		 * the link itself is set aside after the call if it is another file
		 * then (replaced by the call). One a running call may have made is
		 * set aside whatever it is: a dangling one that call made held
		 * nothing, and an overlapping call wrote the name (s37 attack).
		 */
		if (file_changed_since(&st, v->suspect_from_ns)
			? list_add(&v->missing, &v->n_missing, path)
			: held_add(&v->link, &v->n_link, &v->link_id, path, &st, true))
			return -1;
		char *real = realpath(path, NULL);
		int rc = real && strcmp(real, path) != 0 ? add_protected(v, real) : 0;
		free(real);
		return rc;
	}
	/*
	 * Its parents are anchored too, like a hidden path's: renaming
	 * sub/ carried sub/Makefile's read-only mount away, and a new
	 * sub/Makefile (or ~/.bashrc) was written in its place (found by
	 * attack).
	 */
	if (anchor_parents(v, path) != 0)
		return -1;
	return held_add(&v->protect, &v->n_protect, &v->protect_id, path, &st,
			file_changed_since(&st, v->suspect_from_ns));
}

/*
 * The first line of a small regular file, without its newline, in out ("" when
 * there is none: 0). Read as every file a call may have made is read here
 * (cg_file_read): never a FIFO or device, which had held a worker for good
 * (s39a), nor past cap; such a file is -1.
 */
static int first_line(const char *path, char *out, size_t cap)
{
	char *text = NULL;
	size_t len = 0;
	out[0] = '\0';
	if (cg_file_read(path, cap - 1, &text, &len) != 0)
		return errno == ENOENT ? 0 : -1;
	snprintf(out, cap, "%.*s", (int)strcspn(text, "\r\n"), text);
	free(text);
	return 0;
}

/*
 * The value of `key = value` on a git config line, as git reads it (the key
 * in any case; quotes, backslash escapes, a comment after # or ; outside
 * quotes, blanks around it dropped): 0, or -1 when the line is not that key
 * (s37 attack: `path = "a#b"`, which git itself writes, and `Path =` were
 * skipped, and those submodules' .git files stayed writable).
 */
static int config_value(const char *line, const char *key, char *out, size_t cap)
{
	const char *p = line + strspn(line, " \t");
	size_t kl = strlen(key);
	if (strncasecmp(p, key, kl) != 0)
		return -1;
	p += kl;
	p += strspn(p, " \t");
	if (*p++ != '=')
		return -1;
	p += strspn(p, " \t");
	size_t o = 0, end = 0;
	bool quoted = false;
	for (; *p && *p != '\n' && *p != '\r' && o + 1 < cap; p++) {
		if (*p == '"') {
			quoted = !quoted;
			continue;
		}
		if (!quoted && (*p == '#' || *p == ';'))
			break;
		char c = *p;
		if (c == '\\') {
			c = *++p;
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'b' ? '\b' : c;
			if (!c)
				break;
		} else if (!quoted && (c == ' ' || c == '\t')) {
			out[o++] = c;
			continue;
		}
		out[o++] = c;
		end = o;
	}
	out[end] = '\0';
	return 0;
}

/*
 * The .git files of the repository's checkouts inside the write trees: a
 * linked worktree's (.git/worktrees/NAME/gitdir names it) and each
 * submodule's (a `path = ` of .gitmodules). A call re-pointed one at a
 * repository of its own with core.fsmonitor set, which the developer's
 * git status at the root then ran (s37 attack): read-only, like the root's.
 * Only those that exist: a submodule the call checks out is its own.
 */
static int protect_checkouts(struct cg_view *v, const char *tree, const char *git)
{
	char buf[PATH_MAX], line[PATH_MAX];
	glob_t g;
	if (snprintf(buf, sizeof(buf), "%s/worktrees/*/gitdir", git) < (int)sizeof(buf) &&
	    glob(buf, GLOB_NOSORT | GLOB_NOESCAPE, NULL, &g) == 0) {
		int rc = 0;
		for (size_t k = 0; rc == 0 && k < g.gl_pathc; k++) {
			/* As .gitmodules: anything but a small regular file refuses the stage. */
			if (first_line(g.gl_pathv[k], line, sizeof(line)) != 0) {
				snprintf(v->failed_at, sizeof(v->failed_at), "%s", g.gl_pathv[k]);
				rc = -1;
				break;
			}
			if (line[0] == '/' && !strstr(line, "/../") && access(line, F_OK) == 0)
				rc = add_protected(v, line);
		}
		globfree(&g);
		if (rc != 0)
			return -1;
	}
	if (snprintf(buf, sizeof(buf), "%s/.gitmodules", tree) >= (int)sizeof(buf))
		return 0;
	/*
	 * A regular file of at most GITMODULES_CAP, opened without blocking: a
	 * call had made .gitmodules a FIFO (or a link to /dev/zero), and every
	 * later view build of its uid hung reading it (s39a). Anything else
	 * there, or more, and the stage does not run; the name itself, made by
	 * a call, is set aside after it.
	 */
	char *text = NULL;
	size_t len = 0;
	if (cg_file_read(buf, GITMODULES_CAP, &text, &len) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		snprintf(v->failed_at, sizeof(v->failed_at), "%s", buf);
		return -1;
	}
	int rc = 0;
	char val[PATH_MAX];
	for (char *next = text, *at; rc == 0 && (at = strsep(&next, "\n"));) {
		snprintf(line, sizeof(line), "%s", at);
		/* A section header may share the line with a key: [submodule "s"] path = s */
		const char *kv = line + strspn(line, " \t");
		if (*kv == '[' && strchr(kv, ']'))
			kv = strchr(kv, ']') + 1;
		if (config_value(kv, "path", val, sizeof(val)) != 0)
			continue;
		/* A relative path below the tree; anything else is not a checkout here. */
		if (!val[0] || val[0] == '/' || strstr(val, "..") ||
		    snprintf(buf, sizeof(buf), "%s/%s/.git", tree, val) >= (int)sizeof(buf))
			continue;
		struct stat st;
		if (lstat(buf, &st) == 0)
			rc = add_protected(v, buf);
	}
	free(text);
	return rc;
}

/*
 * A write tree with no .git: one the call makes is set aside, and so is a
 * HEAD, without which git does not take the directory itself for a
 * repository (a call made HEAD, objects/, refs/ and a config with
 * core.worktree and core.fsmonitor there, and the developer's git status in
 * the workspace ran it, s37 attack). A tree that is a bare repository
 * already keeps its HEAD, config, hooks and commondir read-only.
 */
static int protect_bare(struct cg_view *v, const char *tree, const char *git)
{
	/*
	 * What names programs or where git finds them: a linked worktree's
	 * commondir and config.worktree are under worktrees/ (s43a F1: one
	 * pointed the developer's worktree, outside every workspace, at a config
	 * the call wrote), a submodule's config under modules/.
	 */
	static const char *const names[] = { "HEAD",	  "config",  "hooks",	       "commondir",
					     "worktrees", "modules", "config.worktree" };
	char buf[PATH_MAX];
	struct stat st;
	if (add_protected(v, git) != 0)
		return -1;
	if (snprintf(buf, sizeof(buf), "%s/HEAD", tree) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	bool bare = lstat(buf, &st) == 0 && S_ISREG(st.st_mode);
	for (size_t i = 0; i < (bare ? CG_ARRAY_LEN(names) : 1); i++)
		if (snprintf(buf, sizeof(buf), "%s/%s", tree, names[i]) >= (int)sizeof(buf) ||
		    add_protected(v, buf) != 0)
			return -1;
	return 0;
}

static bool gitfile_dir(const struct cg_view *v, const char *tree, const char *git, char *dir,
			size_t cap);
static int protect_gitdir(struct cg_view *v, const char *git, bool git_write);

/*
 * The repository at the root of write tree `tree`. Its .git names the programs
 * the developer's own git runs later, outside any call: hooks, config, and
 * where to take them from (commondir, a .git file's gitdir). Read-only as a
 * whole, and so also a mount point that cannot be renamed away; under
 * git: write, pinned in place read-write with those parts read-only. A .git
 * file is read-only, and the git directory it names too when a write tree
 * holds it (s38f: its config and hooks were the call's to write). With no
 * .git there, one the call makes is set aside after it (a separate git
 * dir's .git file had re-pointed the developer's git, s37 attack).
 */
static int protect_git(struct cg_view *v, const char *tree, bool git_write)
{
	char git[PATH_MAX];
	struct stat st;
	if (snprintf(git, sizeof(git), "%s/.git", tree) >= (int)sizeof(git)) {
		errno = ENAMETOOLONG; /* unprotected is not an option: the stage does not run */
		return -1;
	}
	if (lstat(git, &st) != 0)
		return errno == ENOENT ? protect_bare(v, tree, git) : -1;
	if (S_ISLNK(st.st_mode)) {
		/*
		 * A link can be swapped for a fresh .git (it is in a writable tree),
		 * and no mount can cover a link: the stage does not run.
		 */
		errno = ELOOP;
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		/* A .git file: its gitdir, when a write tree holds it, is the repository. */
		char dir[PATH_MAX];
		if (add_protected(v, git) != 0)
			return -1;
		return gitfile_dir(v, tree, git, dir, sizeof(dir))
			   ? protect_gitdir(v, dir, git_write)
			   : 0;
	}
	if (protect_checkouts(v, tree, git) != 0)
		return -1;
	return protect_gitdir(v, git, git_write);
}

/*
 * The directory a .git file at git names (gitdir: PATH, relative to tree),
 * when it exists and some write tree of v holds it: true with it in dir.
 * (One outside every write tree is read-only to the call anyway.)
 */
static bool gitfile_dir(const struct cg_view *v, const char *tree, const char *git, char *dir,
			size_t cap)
{
	char *text = NULL, named[PATH_MAX];
	size_t len = 0;
	if (cg_file_read(git, 4096, &text, &len) != 0)
		return false;
	const char *p = strncmp(text, "gitdir:", 7) == 0 ? text + 7 : NULL;
	while (p && (*p == ' ' || *p == '\t'))
		p++;
	size_t n = p ? strcspn(p, "\r\n") : 0;
	bool ok = n > 0 && snprintf(named, sizeof(named), "%s%s%.*s", p[0] == '/' ? "" : tree,
				    p[0] == '/' ? "" : "/", (int)n, p) < (int)sizeof(named);
	free(text);
	char *real = ok ? realpath(named, NULL) : NULL;
	bool held = false;
	for (size_t w = 0; real && !held && w < v->n_write; w++) {
		size_t wl = strlen(v->write[w]);
		held = strncmp(real, v->write[w], wl) == 0 && (real[wl] == '/' || !real[wl]);
	}
	if (held)
		held = snprintf(dir, cap, "%s", real) < (int)cap;
	free(real);
	return held;
}

/*
 * A repository's git directory in a write tree: read-only as a whole; under
 * git: write, pinned in place read-write with the parts that name programs
 * read-only (git_protected).
 */
static int protect_gitdir(struct cg_view *v, const char *git, bool git_write)
{
	char buf[PATH_MAX];
	if (!git_write)
		return add_protected(v, git);
	if (list_add(&v->pin, &v->n_pin, git) != 0)
		return -1;
	for (size_t i = 0; i < CG_ARRAY_LEN(git_protected); i++) {
		if (snprintf(buf, sizeof(buf), "%s/%s", git, git_protected[i]) >=
		    (int)sizeof(buf)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (!strchr(buf, '*')) {
			if (add_protected(v, buf) != 0)
				return -1;
			continue;
		}
		glob_t g;
		if (glob(buf, GLOB_NOSORT | GLOB_NOESCAPE, NULL, &g) != 0)
			continue;
		int rc = 0;
		for (size_t k = 0; rc == 0 && k < g.gl_pathc; k++)
			rc = add_protected(v, g.gl_pathv[k]);
		globfree(&g);
		if (rc != 0)
			return -1;
	}
	return 0;
}

/*
 * Repositories below a write tree's root (ux-s40 H1: with the workspace
 * ~/src and the repository at ~/src/proj, a confined call wrote
 * proj/.git/config's core.fsmonitor and the developer's next git status ran
 * it). Their .git is protected as the root's is: read-only, or under git:
 * write pinned with what names programs read-only (git -C sub fetch still
 * writes sub's objects and refs); a bare one (remote.git: HEAD, objects,
 * refs) keeps its HEAD, config, hooks and commondir read-only; a .git that
 * is a link is made read-only where it points, as a protected name is; and
 * the names that make the developer's tools run files at a project's root
 * (.husky, .envrc, lefthook-local.yml, .cargo/config.toml, ...) are
 * read-only where they exist and set aside after the call where it made
 * them (s40b F1, F2; s41a F3), as at the root.
 *
 * Found by looking at every directory one to NESTED_LEVELS levels below
 * the root (hidden ones too), reading those above the last, except
 * node_modules, hidden directories and links, for the next; and at every
 * directory from the call's cwd up (protect_cwd_repos). Nothing a call can do
 * decides what is looked at (s41a F1: a walk with a budget of directories,
 * read in the order the file system lists them, stopped where a call's
 * mkdir loop wanted it to, and the next call wrote a repository's .git):
 * every directory there is looked at, or the call does not run. A tree with
 * more than NESTED_ENTRIES entries to read, or more repositories than the
 * view's lists hold, refuses the call (docs/confinement.md).
 */
#define NESTED_LEVELS  3 /* ~/src/proj, ~/src/org/proj, ~/src/github.com/org/proj */
#define NESTED_ENTRIES 65536

/* The prepare's walk of one write tree: which, and how its .git is kept. */
struct nested_walk {
	const char *tree;
	bool git_write;
};

/*
 * A directory found below a tree: protect it as the repository it is, if it
 * is one. A bare one is protect_bare's, as at a root.
 */
static int nested_repo(struct cg_view *v, const char *dir, bool dotgit, bool bare, bool git_write)
{
	char git[PATH_MAX], buf[PATH_MAX];
	struct stat st;
	if (!dotgit && !bare)
		return 0;
	if (snprintf(git, sizeof(git), "%s/.git", dir) >= (int)sizeof(git)) {
		errno = ENAMETOOLONG; /* unprotected is not an option: the stage does not run */
		return -1;
	}
	if (!dotgit)
		return protect_bare(v, dir, git);
	if (lstat(git, &st) != 0)
		return 0; /* gone since it was looked at */
	/* A link: read-only where it points, and set aside if replaced (add_protected). */
	if (S_ISLNK(st.st_mode) ? add_protected(v, git) : protect_git(v, dir, git_write))
		return -1;
	/*
	 * What the developer's tools run at a project's root: read-only where
	 * it exists, set aside after the call where it does not.
	 */
	struct nested_root root = { 0 };
	for (size_t i = 0; i < CG_ARRAY_LEN(protected_rel); i++) {
		if (snprintf(buf, sizeof(buf), "%s/%s", dir, protected_rel[i]) >=
		    (int)sizeof(buf)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (lstat(buf, &st) != 0)
			root.missing[i / 64] |= 1ULL << (i % 64);
		else if (add_protected(v, buf) != 0)
			return -1;
	}
	if (!root.missing[0] && !root.missing[1])
		return 0;
	struct nested_root *g = realloc(v->nested, (v->n_nested + 1) * sizeof(*g));
	if (!g)
		return -1;
	v->nested = g;
	if (!(root.dir = strdup(dir)))
		return -1;
	g[v->n_nested++] = root;
	return 0;
}

/*
 * Does NAME in dfd hold a git directory's parts, as git's discovery takes
 * one: HEAD, and objects and refs or a commondir naming where they are
 * (s42d F1: a repository moved up out of its .git; s43a F2: HEAD and a
 * commondir dropped into an existing directory made it, and all below it, a
 * repository whose config the call wrote elsewhere)?
 */
bool cg_view_git_dir_at(int dfd, const char *name)
{
	char rel[NAME_MAX + 16];
	struct stat st;
	bool parts = true;
	static const char *const own[] = { "objects", "refs" };
	(void)snprintf(rel, sizeof(rel), "%s/HEAD", name);
	if (fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return false;
	for (size_t i = 0; parts && i < CG_ARRAY_LEN(own); i++) {
		(void)snprintf(rel, sizeof(rel), "%s/%s", name, own[i]);
		parts = fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
	}
	(void)snprintf(rel, sizeof(rel), "%s/commondir", name);
	return parts || fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/*
 * Directory name in pfd (path its path): is it a repository (a .git, or
 * HEAD with objects and refs or a commondir), and then protect it. One the daemon may not
 * search (a non-root daemon; a call's chmod 000) could hide a repository,
 * and the call could open it again and write its .git (review-s40):
 * read-only as a whole, so its mode cannot change either.
 */
static int nested_probe(struct cg_view *v, const struct nested_walk *w, int pfd, const char *name,
			const char *path)
{
	/* Relative to pfd, two calls for most directories: what every writing call costs. */
	char rel[NAME_MAX + 16];
	struct stat st;
	(void)snprintf(rel, sizeof(rel), "%s/.git", name);
	bool dotgit = fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
	int e = dotgit ? 0 : errno;
	bool bare = !dotgit && e == ENOENT && cg_view_git_dir_at(pfd, name);
	if (e == EACCES)
		return add_protected(v, path);
	if (nested_repo(v, path, dotgit, bare, w->git_write) == 0)
		return 0;
	if (errno == E2BIG && !v->failed_why[0])
		(void)snprintf(v->failed_why, sizeof(v->failed_why),
			       "more repositories and protected names below %s than a view "
			       "holds (%d a list): give a narrower workspace",
			       w->tree, VIEW_MAX_PATHS);
	else if (!v->failed_at[0])
		(void)snprintf(v->failed_at, sizeof(v->failed_at), "%s", path);
	return -1;
}

static int walk_read(struct level_walk *w, const char *dir, bool top, char ***queue,
		     size_t *n_queue)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int e_open = errno;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			(void)close(fd);
		return fd < 0 && !top && w->unreadable ? w->unreadable(w->arg, dir, e_open) : 0;
	}
	char buf[PATH_MAX];
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		/* A .git is its parent's: the root's protect_git's, a nested one's visit's. */
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    strcmp(e->d_name, ".git") == 0)
			continue;
		/* The levels' walk counts entries; the whole tree's, directories (walk_all). */
		if (!w->every && ++w->entries > w->cap) {
			errno = E2BIG;
			rc = -1;
			break;
		}
		struct stat st;
		bool is_dir =
		    e->d_type == DT_DIR ||
		    (e->d_type == DT_UNKNOWN &&
		     fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode));
		if (!is_dir)
			continue;
		if (w->every && ++w->entries > w->cap) {
			errno = E2BIG;
			rc = -1;
			break;
		}
		if (snprintf(buf, sizeof(buf), "%s/%s", dir, e->d_name) >= (int)sizeof(buf)) {
			errno = ENAMETOOLONG;
			rc = -1;
			break;
		}
		rc = w->visit(w->arg, fd, e->d_name, buf);
		if (rc != 0 || !queue ||
		    (!w->every && (e->d_name[0] == '.' || strcmp(e->d_name, "node_modules") == 0)))
			continue;
		char **q = realloc(*queue, (*n_queue + 1) * sizeof(**queue));
		if (!q || !(q[*n_queue] = strdup(buf))) {
			if (q)
				*queue = q;
			rc = -1;
			break;
		}
		*queue = q;
		(*n_queue)++;
	}
	(void)closedir(d);
	return rc;
}

/*
 * The tree's directories, then theirs, to levels levels (0: every level).
 * 0, or -1 with errno.
 */
static int walk_to(struct level_walk *w, const char *tree, int levels)
{
	char **level = NULL, **next = NULL;
	size_t n_level = 0, n_next = 0;
	int rc = walk_read(w, tree, true, &level, &n_level);
	for (int depth = 2; rc == 0 && n_level && (!levels || depth <= levels); depth++) {
		for (size_t i = 0; rc == 0 && i < n_level; i++)
			rc = walk_read(w, level[i], false, !levels || depth < levels ? &next : NULL,
				       &n_next);
		for (size_t i = 0; i < n_level; i++)
			free(level[i]);
		free(level);
		level = next, n_level = n_next;
		next = NULL, n_next = 0;
	}
	int e = errno;
	for (size_t i = 0; i < n_level; i++)
		free(level[i]);
	free(level);
	for (size_t i = 0; i < n_next; i++)
		free(next[i]);
	free(next);
	errno = e;
	return rc;
}

/* The prepare's levels. */
static int walk_levels(struct level_walk *w, const char *tree)
{
	return walk_to(w, tree, NESTED_LEVELS);
}

/* Every directory below tree, at any depth, hidden ones too (w->every). */
int cg_view_walk_all(struct level_walk *w, const char *tree)
{
	return walk_to(w, tree, 0);
}

/*
 * The repositories the call works in, however deep (ux-s41 H1: with the
 * workspace ~/src, a call in ~/src/github.com/org/repo wrote its .git/hooks):
 * every directory from the cwd up to the tree's root below the
 * NESTED_LEVELS levels the walk looks at.
 */
static int protect_cwd_repos(struct cg_view *v, const char *tree, bool git_write)
{
	struct nested_walk w = { .tree = tree, .git_write = git_write };
	size_t tl = strcmp(tree, "/") == 0 ? 0 : strlen(tree);
	if (!cg_path_under(v->cwd, tree) || strlen(v->cwd) <= tl + 1)
		return 0;
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s", v->cwd) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (;;) {
		size_t depth = 0;
		for (const char *c = path + tl; *c; c++)
			depth += *c == '/';
		if (depth <= NESTED_LEVELS)
			return 0; /* the walk's */
		char *slash = strrchr(path, '/');
		*slash = '\0';
		int pfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
		*slash = '/';
		if (pfd < 0)
			return errno == ENOENT ? 0 : -1;
		int rc = nested_probe(v, &w, pfd, slash + 1, path);
		(void)close(pfd);
		if (rc != 0)
			return -1;
		*slash = '\0';
	}
}

/* The prepare's visit: protect a directory as the repository it is, if it is one. */
struct nested_arg {
	struct cg_view *v;
	struct nested_walk *w;
};

static int nested_visit(void *arg, int pfd, const char *name, const char *path)
{
	struct nested_arg *a = arg;
	return nested_probe(a->v, a->w, pfd, name, path);
}

/* One it may not read may hide a repository (nested_probe): read-only as a whole. */
static int nested_unreadable(void *arg, const char *dir, int err)
{
	struct nested_arg *a = arg;
	return err == EACCES ? add_protected(a->v, dir) : 0;
}

/*
 * The walk below write tree `tree` (walk_levels). Each tree has its own
 * count: ~/.cache must not use the workspace's.
 */
static int protect_nested(struct cg_view *v, const char *tree, bool git_write)
{
	struct nested_walk nw = { .tree = tree, .git_write = git_write };
	struct nested_arg a = { v, &nw };
	struct level_walk w = { .cap = NESTED_ENTRIES,
				.visit = nested_visit,
				.unreadable = nested_unreadable,
				.arg = &a };
	int rc = walk_levels(&w, tree);
	if (rc != 0 && w.entries > w.cap && !v->failed_why[0])
		(void)snprintf(v->failed_why, sizeof(v->failed_why),
			       "more than %d entries in the %d levels below %s to look "
			       "for repositories in: give a narrower workspace",
			       NESTED_ENTRIES, NESTED_LEVELS, tree);
	if (rc != 0 && w.entries > w.cap)
		errno = E2BIG;
	return rc;
}

static int collect_protected(struct cg_view *v, const struct cg_view_spec *s)
{
	char buf[PATH_MAX];
	for (size_t w = 0; w < v->n_write; w++)
		if (protect_git(v, v->write[w], s->git_write) != 0 ||
		    protect_nested(v, v->write[w], s->git_write) != 0 ||
		    protect_cwd_repos(v, v->write[w], s->git_write) != 0)
			return -1;
	for (size_t w = 0; w < v->n_write; w++) {
		for (size_t i = 0; i < CG_ARRAY_LEN(protected_rel) + s->n_protect; i++) {
			const char *rel = i < CG_ARRAY_LEN(protected_rel)
					      ? protected_rel[i]
					      : s->protect[i - CG_ARRAY_LEN(protected_rel)];
			if (rel[0] == '/')
				continue;
			if (snprintf(buf, sizeof(buf), "%s/%s", v->write[w], rel) >=
			    (int)sizeof(buf))
				continue;
			if (add_protected(v, buf) != 0)
				return -1;
		}
	}
	for (size_t i = 0; i < s->n_protect; i++)
		if (s->protect[i][0] == '/' && add_protected(v, s->protect[i]) != 0)
			return -1;
	/* Shell start-up files of the call's home, when the home is writable. */
	for (size_t i = 0; s->home && s->home[0] == '/' && i < CG_ARRAY_LEN(protected_rel); i++)
		if (snprintf(buf, sizeof(buf), "%s/%s", s->home, protected_rel[i]) <
			(int)sizeof(buf) &&
		    add_protected(v, buf) != 0)
			return -1;
	return 0;
}

/*
 * Scratch directories: existing ones (a mount needs its point), not the root,
 * and not under a private /tmp, which is the call's own already.
 */
/*
 * A scratch directory that does not exist yet (a fresh account's ~/.npm):
 * made empty, as the tool would make it on its first run, so that it can be
 * covered (s44c M2: an approved npm install failed with EROFS making it).
 * Only the last name, in a directory reached through no link and owned by
 * the call's uid: a home whose .cache is a link to /etc gets nothing made.
 */
static void make_scratch_dir(const char *path, uid_t uid, gid_t gid)
{
	const char *slash = strrchr(path, '/');
	char parent[PATH_MAX];
	struct stat st;
	if (!slash || slash == path || !slash[1] || (size_t)(slash - path) >= sizeof(parent) ||
	    strcmp(slash + 1, "..") == 0 || strcmp(slash + 1, ".") == 0)
		return;
	memcpy(parent, path, (size_t)(slash - path));
	parent[slash - path] = '\0';
	struct open_how h = { .flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
			      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, parent, &h, sizeof(h));
	if (fd < 0)
		return;
	/*
	 * Owned by what was made, through its descriptor: the caller owns the
	 * directory, and swapped a hard link to a root-owned file in between a
	 * mkdir and a chown by name (s44d F4). A directory cannot be hard
	 * linked; the one opened must be empty and ours.
	 */
	if (fstat(fd, &st) == 0 && st.st_uid == uid && mkdirat(fd, slash + 1, 0700) == 0) {
		int d = openat(fd, slash + 1, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat ds;
		if (d >= 0 && fstat(d, &ds) == 0 && S_ISDIR(ds.st_mode) && ds.st_uid == geteuid() &&
		    ds.st_nlink == 2 && (ds.st_mode & 07777) == 0700)
			(void)fchown(d, uid, gid);
		if (d >= 0)
			(void)close(d);
	}
	(void)close(fd);
}

static int collect_scratch(struct cg_view *v, const struct cg_view_spec *s)
{
	for (size_t i = 0; i < s->n_scratch; i++) {
		char real[PATH_MAX];
		struct stat st;
		if (s->scratch[i][0] == '/' && lstat(s->scratch[i], &st) != 0 && errno == ENOENT)
			make_scratch_dir(s->scratch[i], s->scratch_uid, s->scratch_gid);
		if (!realpath(s->scratch[i], real) || stat(real, &st) != 0 || !S_ISDIR(st.st_mode))
			continue; /* nothing there: the view adds nothing */
		if (strcmp(real, "/") == 0 || (v->private_tmp && cg_path_under(real, "/tmp")))
			continue;
		if (list_add(&v->scratch, &v->n_scratch, real) != 0)
			return -1;
	}
	(void)snprintf(v->scratch_opts, sizeof(v->scratch_opts), "mode=0700,uid=%u,gid=%u,size=2g",
		       (unsigned)s->scratch_uid, (unsigned)s->scratch_gid);
	return 0;
}

static int collect_hidden(struct cg_view *v, const struct cg_view_spec *s)
{
	char buf[PATH_MAX];
	for (size_t i = 0; i < CG_ARRAY_LEN(system_hidden); i++)
		if (add_hidden(v, system_hidden[i]) != 0)
			return -1;
	for (size_t i = 0; s->home && s->home[0] == '/' && i < CG_ARRAY_LEN(home_secrets); i++)
		if (snprintf(buf, sizeof(buf), "%s/%s", s->home, home_secrets[i]) <
			(int)sizeof(buf) &&
		    add_hidden(v, buf) != 0)
			return -1;
	for (size_t i = 0; i < s->n_hide; i++)
		if (add_hidden(v, s->hide[i]) != 0)
			return -1;
	return 0;
}

/* The granted socket, if it would be covered: where it lives, and by what. */
static int collect_reveal(struct cg_view *v, const struct cg_view_spec *s)
{
	char real[PATH_MAX];
	struct stat st;
	v->reveal_under = SIZE_MAX;
	if (!s->reveal || !realpath(s->reveal, real) || stat(real, &st) != 0 ||
	    !S_ISSOCK(st.st_mode))
		return 0;
	for (size_t i = 0; i < v->n_hide; i++)
		if (v->hide_dir[i] && cg_path_under(real, v->hide[i]) &&
		    strcmp(real, v->hide[i]) != 0) {
			if (v->reveal_under != SIZE_MAX) {
				errno = ENOTSUP; /* nested hidden dirs: not revealed */
				return -1;
			}
			v->reveal_under = i;
		}
	if (v->reveal_under == SIZE_MAX && !(v->private_tmp && cg_path_under(real, "/tmp")))
		return 0; /* visible anyway */
	return (v->reveal = strdup(real)) ? 0 : -1;
}

static int collect_write(struct cg_view *v, const struct cg_view_spec *s)
{
	for (size_t i = 0; i < s->n_write; i++) {
		char real[PATH_MAX];
		struct stat st;
		if (!realpath(s->write[i], real) || stat(real, &st) != 0)
			continue; /* Landlock's report names the skipped path */
		if (strcmp(real, "/") == 0) {
			errno = EINVAL; /* a writable root is not a view */
			return -1;
		}
		if (v->private_tmp && strcmp(real, "/tmp") == 0)
			continue; /* the private /tmp is writable */
		if (list_add(&v->write, &v->n_write, real) != 0)
			return -1;
		if (v->private_tmp && cg_path_under(real, "/tmp") &&
		    list_add(&v->tmp_dirs, &v->n_tmp_dirs, real) != 0)
			return -1;
	}
	return 0;
}

/*
 * The workspace and the cwd stay visible (read-only) even when a private
 * /tmp covers where they live and the call may not write them.
 */
static int collect_kept(struct cg_view *v, const struct cg_view_spec *s)
{
	const char *const want[] = { s->workspace, s->cwd };
	for (size_t i = 0; i < CG_ARRAY_LEN(want); i++) {
		char real[PATH_MAX];
		bool covered = false;
		if (!want[i] || !v->private_tmp || !realpath(want[i], real) ||
		    !cg_path_under(real, "/tmp") || strcmp(real, "/tmp") == 0)
			continue;
		for (size_t w = 0; w < v->n_write; w++)
			covered |= cg_path_under(real, v->write[w]);
		if (covered)
			continue;
		if (list_add(&v->keep, &v->n_keep, real) != 0 ||
		    list_add(&v->tmp_dirs, &v->n_tmp_dirs, real) != 0)
			return -1;
	}
	return 0;
}

static json_t *strings_json(char **list, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		(void)json_array_append_new(a, json_string(list[i]));
	return a;
}

/*
 * The holes every view covers hidden paths with: one read-only tmpfs per
 * process, made once (it never changes, so views can share it; creating
 * and releasing a filesystem per call would cost each call a superblock).
 */
static int holes_fd = -1, holes_errno;
static pthread_once_t holes_once = PTHREAD_ONCE_INIT;

static void make_holes(void)
{
	holes_fd = detached_tmpfs("0755", true);
	holes_errno = holes_fd < 0 ? errno : 0;
}

static int make_filesystems(struct cg_view *v)
{
	/*
	 * /tmp and /dev/shm exist only in the child (child_filesystems):
	 * Landlock rules name the view's own paths, and the child builds its
	 * rulesets after entering the view.
	 */
	(void)snprintf(v->tmp_rule, sizeof(v->tmp_rule), "/tmp");
	(void)snprintf(v->shm_rule, sizeof(v->shm_rule), "/dev/shm");
	if (v->userns)
		return 0;
	(void)pthread_once(&holes_once, make_holes);
	if (holes_fd < 0) {
		errno = holes_errno;
		return -1;
	}
	v->empty_fd = holes_fd;
	return 0;
}

/*
 * When each view still alive was prepared (a view lives until its call's
 * sweep is done). A protected name that changed since the oldest of them
 * began may be one a running call made (it was missing at that call's
 * start, so that call may also rename it away): a view that holds it checks
 * at its end that it holds the same file (cg_view_sweep). The margin covers
 * the coarse clock file times come from.
 */
static struct {
	pthread_mutex_t mu;
	int64_t *at;
	size_t n, cap;
} live_views = { .mu = PTHREAD_MUTEX_INITIALIZER };
#define LIVE_MARGIN_NS (20 * 1000000LL)

/* Register v; its suspect_from_ns is the oldest live view's start. 0, or -1 (ENOMEM). */
static int live_add(struct cg_view *v)
{
	int rc = 0;
	v->started_ns = cg_now_wall_ns();
	(void)pthread_mutex_lock(&live_views.mu);
	if (live_views.n == live_views.cap) {
		size_t cap = live_views.cap ? live_views.cap * 2 : 64;
		int64_t *a = realloc(live_views.at, cap * sizeof(*a));
		if (a) {
			live_views.at = a;
			live_views.cap = cap;
		}
	}
	if (live_views.n < live_views.cap) {
		live_views.at[live_views.n++] = v->started_ns;
		int64_t oldest = v->started_ns;
		for (size_t i = 0; i < live_views.n; i++)
			oldest = live_views.at[i] < oldest ? live_views.at[i] : oldest;
		v->suspect_from_ns = oldest - LIVE_MARGIN_NS;
	} else {
		v->started_ns = 0;
		errno = ENOMEM;
		rc = -1;
	}
	(void)pthread_mutex_unlock(&live_views.mu);
	return rc;
}

static void live_del(const struct cg_view *v)
{
	if (!v->started_ns)
		return;
	(void)pthread_mutex_lock(&live_views.mu);
	for (size_t i = 0; i < live_views.n; i++)
		if (live_views.at[i] == v->started_ns) {
			live_views.at[i] = live_views.at[--live_views.n];
			break;
		}
	(void)pthread_mutex_unlock(&live_views.mu);
}

int cg_view_prepare(const struct cg_view_spec *s, struct cg_view **out, struct cg_reply **err)
{
	struct cg_view *v = calloc(1, sizeof(*v));
	const char *doing = "allocating the view";
	if (!v)
		goto fail;
	v->empty_fd = -1;
	doing = "registering the view";
	if (live_add(v) != 0)
		goto fail;
	v->private_tmp = !s->shared_tmp;
	v->noexec_writes = s->git_write;
	if (!s->cwd || s->cwd[0] != '/' || !(v->cwd = strdup(s->cwd))) {
		errno = s->cwd ? ENOMEM : EINVAL;
		doing = "recording the cwd";
		goto fail;
	}
	v->userns = s->unprivileged;
	v->outer_uid = s->outer_uid;
	v->outer_gid = s->outer_gid;
	doing = "collecting the write set";
	if (collect_write(v, s) != 0)
		goto fail;
	doing = "collecting the workspace";
	if (collect_kept(v, s) != 0)
		goto fail;
	doing = "collecting protected paths";
	if (collect_protected(v, s) != 0)
		goto fail;
	doing = "collecting scratch directories";
	if (collect_scratch(v, s) != 0)
		goto fail;
	doing = "collecting hidden paths";
	if (collect_hidden(v, s) != 0)
		goto fail;
	doing = "revealing the granted socket";
	if (collect_reveal(v, s) != 0)
		goto fail;
	doing = "creating the view's filesystems";
	if (make_filesystems(v) != 0)
		goto fail;
	doing = "allocating the view";
	if (!(v->stack = malloc(VIEW_STACK)))
		goto fail;
	v->report = json_pack(
	    "{s:s,s:o,s:o,s:o,s:o,s:s,s:s,s:[s,s,s,s],s:b}", "root", "read-only", "writable",
	    strings_json(v->write, v->n_write), "pinned", strings_json(v->pin, v->n_pin),
	    "protected", strings_json(v->protect, v->n_protect), "hidden",
	    strings_json(v->hide, v->n_hide), "tmp", v->private_tmp ? "private" : "shared", "proc",
	    "own pid namespace", "namespaces", "mount", "pid", "uts", "ipc", "user_namespace",
	    v->userns);
	if (v->report && v->n_scratch)
		json_object_set_new(v->report, "scratch", strings_json(v->scratch, v->n_scratch));
	/* The host's trees under a private /tmp that the view keeps (the workspace, the cwd). */
	if (v->report && v->private_tmp && v->n_tmp_dirs)
		json_object_set_new(v->report, "tmp_kept",
				    strings_json(v->tmp_dirs, v->n_tmp_dirs));
	if (!v->report)
		goto fail;
	*out = v;
	return 0;
fail:;
	int e = errno;
	char detail[PATH_MAX + 100];
	if (v && v->failed_why[0])
		snprintf(detail, sizeof(detail), "%s (%s)", doing, v->failed_why);
	else if (v &&
		 v->failed_at[0]) /* the file, when one is to blame: it may be the call's own */
		snprintf(detail, sizeof(detail), "%s (%s is not a small regular file)", doing,
			 v->failed_at);
	else
		snprintf(detail, sizeof(detail), "%s", doing);
	*err = cg_reply_new(CG_R_CONFINE_SETUP_FAILED, "{s:s,s:s}", "detail", detail, "errno_name",
			    cg_errno_name(e ? e : ENOMEM));
	cg_view_free(v);
	return -1;
}

json_t *cg_view_report(const struct cg_view *v)
{
	return v ? json_deep_copy(v->report) : json_null();
}

static void free_list(char **list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

size_t cg_view_write_trees(const struct cg_view *v, const char **out, size_t max)
{
	size_t k = 0;
	for (size_t w = 0; v && w < v->n_write; w++)
		if (!(v->private_tmp && strcmp(v->write[w], "/tmp") == 0) && k < max)
			out[k++] = v->write[w];
	return k;
}

void cg_view_free(struct cg_view *v)
{
	if (!v)
		return;
	free_list(v->write, v->n_write);
	free_list(v->pin, v->n_pin);
	free_list(v->anchor, v->n_anchor);
	free_list(v->protect, v->n_protect);
	free(v->protect_id);
	free_list(v->link, v->n_link);
	free(v->link_id);
	for (size_t i = 0; i < v->n_nested; i++)
		free(v->nested[i].dir);
	free(v->nested);
	live_del(v);
	free_list(v->missing, v->n_missing);
	free_list(v->hide, v->n_hide);
	free_list(v->tmp_dirs, v->n_tmp_dirs);
	free_list(v->scratch, v->n_scratch);
	free_list(v->keep, v->n_keep);
	free(v->hide_dir);
	free(v->cwd);
	free(v->reveal);
	free(v->stack);
	json_decref(v->report);
	free(v);
}
