/* SPDX-License-Identifier: MIT */
/*
 * world — the world adapter (WA): how the world is laid out.
 *
 * Resolves each stage's argv[0] to an absolute, canonical, existing,
 * executable path through a controlled PATH (never the request's), records
 * any symlink hop, and resolves the working directory inside a configured
 * workspace. It answers S, I or E, never D: it does not govern.
 *
 * Invariants:
 *  - A resolved exe MUST be canonical (realpath: no "..", no symlink), so
 *    that policy sees /usr/bin/rm for "/bin/../bin/rm" and for a symlink to rm.
 *  - The cwd MUST resolve inside one of the workspaces after canonicalisation.
 *  - The environment passed to a command is built here from the allow-list
 *    plus PATH/HOME/USER/LOGNAME from the password database, nothing else.
 */
#ifndef CG_WORLD_H
#define CG_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "callgate.h"
#include "reply.h"
#include "wire.h"

#define CG_WORLD_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct cg_resolved_stage {
	char *exe;	  /* canonical absolute path that will be executed */
	char *found;	  /* the path found before canonicalisation (PATH hit or given) */
	bool via_symlink; /* found != exe: a symlink (or ..) hop was resolved */
	/*
	 * The program is started under its own name: argv[0] is the name as
	 * sent with its last component replaced by exe's (/ws/.venv/bin/python
	 * becomes /ws/.venv/bin/python3.11, so the directory a venv's python
	 * finds itself by stays), when the name differs from exe's own and is a
	 * link root did not make (one in a directory root does not own, or others
	 * may write). Multi-call programs act on the name (git-log runs `git
	 * log`), which the policy never read. argv0 holds it (owned).
	 */
	bool argv0_is_exe;
	char *argv0;
	const char *base; /* basename of exe (points into exe) */
};

/* A request after resolution: what the adjudicator chain decides on. */
struct cg_call {
	const struct cg_request *req; /* borrowed */
	struct cg_peer peer;
	size_t n_stages;
	struct cg_resolved_stage *stages; /* n_stages entries, owned */
	char *cwd;			  /* canonical working directory, owned */
	char *workspace;		  /* the canonical workspace that contains cwd, owned */
	/*
	 * The directory cwd named when it was resolved (device, inode, birth
	 * time in ns, 0 when the file system keeps none): the runner refuses
	 * another one made at that path, even on a reused inode number.
	 */
	dev_t cwd_dev;
	ino_t cwd_ino;
	int64_t cwd_btime_ns;
	/*
	 * The request's actions with each file resource (read, write, delete,
	 * exec) where it really lies: symlinks of its existing part followed,
	 * the asked path kept as resource_given when it differs. Owned; NULL
	 * when the request has none. What the policy judges.
	 */
	json_t *actions;
	char *trace_id; /* borrowed from the caller */
	/* The command's deadline as decided (ms; cg_gate_timeout), 0 before it is. */
	int64_t timeout_ms;
};

struct cg_world {
	const char *path; /* controlled search PATH */
	size_t n_workspaces;
	char **workspaces; /* canonical absolute directories, owned */
};

/*
 * Where uid can write, canonical and each once: every workspace, its home
 * when it owns it, and each directory one level under the usual places
 * (/tmp, /var/tmp, /dev/shm, /run/lock, /run/user/UID, ...) that it may
 * write: world-writable, its own, or its group's (for uid 0 only the
 * world-writable ones). *dirs (free with cg_strv_free). 0, or -1 on OOM.
 */
int cg_world_writable_by(const struct cg_world *w, uid_t uid, char ***dirs, size_t *n)
    __attribute__((warn_unused_result));

/* Build a world from workspace dirs (canonicalised here). 0, or -1 with *err. */
int cg_world_init(struct cg_world *w, const char *const *workspaces, size_t n,
		  struct cg_reply **err) __attribute__((warn_unused_result));
void cg_world_fini(struct cg_world *w);

/*
 * Resolve every stage and the cwd of req. On success fills *call (free its
 * contents with cg_call_fini) and returns 0; otherwise returns -1 and *err
 * (a WA I or E reply). call->req points at req, which must outlive call.
 */
int cg_world_resolve(const struct cg_world *w, const struct cg_request *req,
		     const struct cg_peer *peer, struct cg_call *call, struct cg_reply **err)
    __attribute__((warn_unused_result));

/*
 * A privileged call's programs: each, and every directory above it, owned by
 * root and writable by no group or other (a sticky directory excepted), and
 * none in a workspace; an approval names a program by path, so its bytes must
 * be root's alone. 0, or -1 with *err (EXE_NOT_ROOT_ONLY). Syscalls: asked
 * only of a call that may run (not of one the chain blocks).
 */
int cg_world_root_only(const struct cg_world *w, const struct cg_call *call, struct cg_reply **err)
    __attribute__((warn_unused_result));

void cg_call_fini(struct cg_call *call);

/*
 * Build the command environment: names on allow that the request set (values
 * from the request), plus PATH (the controlled path), HOME, USER and LOGNAME
 * for run_uid from the password database. Returns a malloc'd NULL-terminated
 * envp (free with cg_envp_free), or NULL with *err.
 */
char **cg_world_envp(const struct cg_world *w, const struct cg_request *req, uid_t run_uid,
		     struct cg_reply **err);
void cg_envp_free(char **envp);

#endif
