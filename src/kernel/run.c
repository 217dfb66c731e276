/* SPDX-License-Identifier: MIT */
/*
 * run — a permitted call on a worker thread: who it runs as, its
 * environment, its confinement, the durable permit, the run itself, result
 * screening, and the one answer.
 *
 * Invariants:
 *  - No command MUST exec unless the confinement was prepared and, with
 *    evidence on, the permit is durable (write-ahead): the stages may be
 *    prepared while it syncs, but each command waits at the permit's gate
 *    right before execve. A failure of either is answered and nothing runs.
 *  - Unscreened output MUST NOT pass: if screening fails, the streams are
 *    withheld and the call answers an E.
 *  - run_job answers exactly once on every path and leaves the job's
 *    request as it found it (sudo wrapping undone).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "confine.h"
#include "egress.h"
#include "kernel_priv.h"
#include "util.h"

/* Everything a run acquires, released once in answer_run. */
struct run {
	bool root, priv; /* the daemon is root; the call is privileged */
	uid_t uid;	 /* who the stages run as */
	gid_t gid;
	bool umask_set; /* the caller's umask could be read (call_umask) */
	mode_t umask;
	char **envp;
	struct cg_confine_plan *plan;
	json_t *confinement; /* the plan's report, rendered once (owned) */
	struct cg_exec_result res;
	bool ran;
	size_t execd;	   /* stages that started, also when the pipeline did not start whole */
	json_t *screening; /* the screen's findings (owned), or NULL */
	int screen_errno;  /* non-zero: screening failed and the output was withheld */
	struct cg_egress *egress; /* the call's proxy (net: a host list), or NULL */
	json_t *connections;	  /* its records, once stopped */
	/* The permit's gate (write-ahead across the spawn); gated: it was queued with it. */
	_Atomic uint32_t permit;
	bool gated;
	json_t
	    *set_aside; /* protected names the call made, set aside after it (cg_confine_sweep) */
	json_t *hooks_not_run; /* the hooks git said it did not run (hooks_not_run) */
};

/* Append NAME=value to a malloc'd envp. 0, or -1 on OOM (envp unchanged). */
static int add_env(char ***envp, const char *name, const char *value)
{
	size_t n = 0;
	while ((*envp)[n])
		n++;
	size_t l = strlen(name) + strlen(value) + 2;
	char *kv = malloc(l);
	char **grown = kv ? realloc(*envp, (n + 2) * sizeof(**envp)) : NULL;
	if (!grown) {
		free(kv);
		return -1;
	}
	snprintf(kv, l, "%s=%s", name, value);
	grown[n] = kv;
	grown[n + 1] = NULL;
	*envp = grown;
	return 0;
}

/*
 * The command's umask (ux-s39 M12: a fixed 077 made every file a call
 * created private, unlike what the developer's own shell makes): the
 * caller's, from /proc/PID/status, with the world-writable bit always set
 * (| 002) and, for a privileged call, the group's too (| 022, as sudo
 * does). false when it cannot be read (the caller is gone): the plan then
 * keeps 077.
 */
static bool call_umask(pid_t pid, bool priv, mode_t *out)
{
	char path[64], buf[2048];
	if (pid <= 0)
		return false;
	(void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1); /* Umask: is the second line */
	(void)close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *l = strstr(buf, "\nUmask:\t");
	if (!l)
		return false;
	char *end;
	unsigned long m = strtoul(l + 8, &end, 8);
	if (end == l + 8 || *end != '\n' || m > 0777)
		return false;
	*out = (mode_t)m | (priv ? 022 : 002);
	return true;
}

/*
 * Who the stages run as, and their environment. A privileged call only
 * reaches here approved by a human, a grant, or a rule that allows
 * privileged use explicitly: as root it runs as root; otherwise through
 * sudo -n. Everything else runs as the peer when we are root, or as
 * ourselves. 0, or -1 with *reply.
 */
static int prepare_identity(struct cg_kernel *k, struct cg_job *j, struct run *r,
			    struct cg_reply **reply)
{
	const struct cg_request *req = j->gate.req;
	r->root = geteuid() == 0;
	r->priv = req->privileged;
	r->uid = r->root ? (r->priv ? 0 : j->peer.uid) : geteuid();
	r->gid = r->root ? (r->priv ? 0 : j->peer.gid) : getegid();
	r->umask_set = call_umask(j->peer.pid, r->priv, &r->umask);
	r->envp = cg_world_envp(&k->world, req, r->uid, reply);
	if (!r->envp)
		return -1;
	if (req->forward_agent && !r->priv && k->ssh_auth_sock &&
	    add_env(&r->envp, "SSH_AUTH_SOCK", k->ssh_auth_sock) != 0) {
		/* The socket path is the daemon's own, never the request's. */
		*reply = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "forwarding the agent");
		return -1;
	}
	if (r->priv && !r->root && sudo_wrap(j, reply) != 0)
		return -1;
	return 0;
}

/* The view the fold's constraints grant, built before anything starts. */
static int prepare_confinement(struct cg_job *j, struct run *r, struct cg_reply **reply)
{
	char home[4096] = "";
	const char *agent = NULL; /* set by prepare_identity, from the daemon, with forward_agent */
	for (char **e = r->envp; *e; e++)
		if (strncmp(*e, "HOME=", 5) == 0)
			snprintf(home, sizeof(home), "%s", *e + 5);
		else if (strncmp(*e, "SSH_AUTH_SOCK=", 14) == 0)
			agent = *e + 14;
	struct cg_confine_ctx cctx = { .workspace = j->gate.call.workspace,
				       .cwd = j->gate.call.cwd,
				       .home = home,
				       .set_ids = r->root && r->uid != 0,
				       .allow_setuid = r->priv && !r->root,
				       .view = !r->priv, /* approved too; privileged: none */
				       .agent_socket = agent,
				       .daemon_agent = j->k->ssh_auth_sock,
				       .own_paths = (const char *const *)j->k->own_paths,
				       .n_own_paths = j->k->n_own_paths,
				       .uid = r->uid,
				       .gid = r->gid,
				       .umask_set = r->umask_set,
				       .umask = r->umask };
	char **nosym = NULL;
	size_t n_nosym = 0;
	if (r->priv && r->root) {
		/* Root follows no symlink the agent could have planted (cg_view_nosymfollow). */
		if (cg_world_writable_by(&j->k->world, j->peer.uid, &nosym, &n_nosym) != 0) {
			*reply = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					      "preparing confinement");
			return -1;
		}
		cctx.n_nosymfollow = n_nosym;
		cctx.nosymfollow = (const char *const *)nosym;
		/* Every stage: a `mount | curl` took the links away from curl too (s37 attack). */
		cctx.host_mounts = j->gate.call.n_stages > 0;
		for (size_t i = 0; i < j->gate.call.n_stages; i++) {
			const char *b = j->gate.call.stages[i].base;
			cctx.host_mounts &=
			    b && (strcmp(b, "mount") == 0 || strcmp(b, "umount") == 0);
		}
	}
	const struct cg_folded *f = &j->gate.folded;
	int rc = cg_confine_prepare_stages(f->constraints, f->stages, f->n_constraints,
					   j->gate.call.n_stages, &cctx, &r->plan, reply);
	cg_strv_free(nosym, n_nosym);
	if (rc != 0) {
		if (r->priv && !r->root)
			*reply = sudo_unenforceable(*reply);
		return -1;
	}
	r->confinement = cg_confine_report(r->plan);
	return 0;
}

static json_t *approvers_json(const struct cg_job *j)
{
	json_t *by = json_array();
	for (size_t i = 0; by && i < j->n_approved; i++)
		json_array_append_new(by, json_integer(j->approved_by[i]));
	return by;
}

/*
 * Write-ahead: the permit is durable before anything starts, or nothing
 * starts. With a plan, the permit is queued with a gate and the stages are
 * prepared meanwhile: each command waits for the gate right before execve
 * (cg_confine_set_gate), so the view is built while the disk syncs.
 * Without one, this waits for the sync.
 */
static int write_permit(struct cg_kernel *k, struct cg_job *j, struct run *r,
			struct cg_reply **reply)
{
	if (!k->ev)
		return 0;
	const struct cg_request *req = j->gate.req;
	const struct cg_folded *f = &j->gate.folded;
	char hex[65];
	char *canon = json_dumps(req->raw, JSON_COMPACT | JSON_SORT_KEYS);
	cg_sha256_hex(canon ? canon : "", canon ? strlen(canon) : 0, hex);
	free(canon);
	json_t *permit =
	    json_pack("{s:s,s:s,s:s,s:I,s:i,s:i,s:o?,s:o?,s:s,s:s}", "decision",
		      cg_decision_name(f->decision), "rule_id", f->rule_id ? f->rule_id : "",
		      "request_sha256", hex, "timeout_ms", (json_int_t)j->gate.timeout_ms,
		      "run_uid", (int)r->uid, "run_gid", (int)r->gid, "confinement",
		      ev_screened_copy(k, r->confinement), "approved_by", approvers_json(j),
		      "approval_sha256", j->request_sha256, "grant_id", j->grant_id);
	int rc;
	if (r->plan) {
		atomic_store(&r->permit, CG_GATE_PENDING);
		rc = cg_evidence_append_gated(k->ev, j->trace_id, CG_EV_PERMIT, permit, &r->permit);
		if (rc == 0) {
			r->gated = true;
			cg_confine_set_gate(r->plan, &r->permit);
		}
	} else {
		rc = cg_evidence_append(k->ev, j->trace_id, CG_EV_PERMIT, permit, true);
	}
	if (rc != 0) {
		int e = errno;
		cg_log("error", j->trace_id, "permit not durable: %s", cg_errno_name(e));
		*reply = cg_reply_new(CG_R_EVIDENCE_WRITE_FAILED, "{s:s}", "errno_name",
				      cg_errno_name(e));
		return -1;
	}
	return 0;
}

/* Run the pipeline. 0 when it ran (r->res filled), or -1 with *reply. */
/* A host list: start the call's proxy and point the stages at it. 0, or -1 with *reply. */
static int start_egress(struct cg_job *j, struct run *r, struct cg_reply **reply)
{
	if (cg_egress_start(r->plan, j->gate.folded.rule_id, &r->egress, reply) != 0)
		return -1;
	for (size_t i = 0; r->egress && cg_egress_env[i]; i++) {
		char name[32];
		const char *eq = strchr(cg_egress_env[i], '=');
		snprintf(name, sizeof(name), "%.*s", (int)(eq - cg_egress_env[i]),
			 cg_egress_env[i]);
		if (add_env(&r->envp, name, eq + 1) != 0) {
			*reply = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
					      "setting the proxy variables");
			return -1;
		}
	}
	return 0;
}

/* Stop the proxy; every connection it carried becomes an event of the trace. */
static void stop_egress(struct cg_kernel *k, struct cg_job *j, struct run *r)
{
	if (!r->egress)
		return;
	r->connections = cg_egress_stop(r->egress);
	r->egress = NULL;
	size_t i;
	json_t *rec;
	json_array_foreach(r->connections, i, rec)
	    ev_note(k, j->trace_id, CG_EV_NET_CONNECTION, json_incref(rec));
}

static int execute(struct cg_kernel *k, struct cg_job *j, struct run *r, struct cg_reply **reply)
{
	if (start_egress(j, r, reply) != 0) {
		ev_note(
		    k, j->trace_id, CG_EV_EXEC_END,
		    json_pack("{s:b,s:s}", "started", 0, "code", cg_reply_def_of(*reply)->code));
		stop_egress(k, j, r);
		return -1;
	}
	struct cg_exec_spec spec = { .call = &j->gate.call,
				     .envp = r->envp,
				     .timeout_ms = j->gate.timeout_ms,
				     .cap = cg_policy_defaults(j->gen->policy)->output_cap,
				     .plan = r->plan,
				     .cancel_fd = j->cancel_fd,
				     .trace_id = j->trace_id };
	ev_note(k, j->trace_id, CG_EV_EXEC_START,
		json_pack("{s:I,s:I}", "stages", (json_int_t)j->gate.call.n_stages, "timeout_ms",
			  (json_int_t)j->gate.timeout_ms));
	struct cg_watch *watch = cg_confine_watch(r->plan);
	int rc = cg_exec_run(&spec, &r->res, reply);
	stop_egress(k, j, r);
	/* Its processes are gone: what it made where a protected name was missing is set aside. */
	char tag[9];
	(void)snprintf(tag, sizeof(tag), "%.8s", j->trace_id);
	r->set_aside = cg_confine_sweep(r->plan, watch, tag);
	log_set_aside(j->trace_id, r->set_aside, "while the call ran");
	if (r->gated && cg_gate_wait(&r->permit, -1) != 0) {
		/* Refused at the gate: nothing exec'd; say why, not how the stage failed. */
		cg_log("error", j->trace_id, "permit not durable; nothing ran");
		if (rc == 0) /* cannot happen: every command waits for the gate */
			cg_exec_result_fini(&r->res);
		cg_reply_free(*reply);
		*reply = cg_reply_new(CG_R_EVIDENCE_WRITE_FAILED, "{s:s}", "errno_name", "EIO");
		rc = -1;
	}
	if (rc != 0) {
		/*
		 * Stages before the one that failed may have run: their exit codes,
		 * null for the stages that never started (so the last stage's,
		 * what a log shows, is none).
		 */
		r->execd = r->res.n_execd;
		json_t *fin = json_pack("{s:b,s:s}", "started", r->execd > 0, "code",
					cg_reply_def_of(*reply)->code);
		json_t *codes = r->execd && fin ? json_array() : NULL;
		for (size_t i = 0; codes && i < r->res.n_stages; i++)
			json_array_append_new(codes, i < r->execd
							 ? json_integer(r->res.stages[i].exit_code)
							 : json_null());
		if (codes) {
			json_object_set_new(fin, "stages_started",
					    json_integer((json_int_t)r->execd));
			json_object_set_new(fin, "exit_codes", codes);
		}
		cg_exec_result_fini(&r->res);
		if (fin && json_array_size(r->set_aside))
			json_object_set_new(fin, "set_aside", ev_screened_copy(k, r->set_aside));
		ev_note(k, j->trace_id, CG_EV_EXEC_END, fin);
		return -1;
	}
	r->ran = true;
	return 0;
}

/*
 * Screen the output before anyone sees it: the reply and the evidence both
 * get the redacted bytes. If screening fails, the streams are emptied and
 * r->screen_errno says why.
 */
static void screen_output(struct cg_kernel *k, struct cg_job *j, struct run *r)
{
	const struct cg_policy_defaults *pd = cg_policy_defaults(j->gen->policy);
	if (!pd->screen_secrets && !pd->screen_injection)
		return;
	if (cg_screen_exec_result(k->screen, pd->screen_secrets, pd->screen_injection, &r->res,
				  &r->screening) != 0) {
		r->screen_errno = errno ? errno : EIO;
		cg_log("error", j->trace_id, "screening failed: %s",
		       cg_errno_name(r->screen_errno));
		ev_note(k, j->trace_id, CG_EV_SCREEN,
			json_pack("{s:b,s:s}", "ok", 0, "errno", cg_errno_name(r->screen_errno)));
	} else {
		ev_note(k, j->trace_id, CG_EV_SCREEN, json_incref(r->screening));
	}
}

static json_t *hash_json(const struct cg_buf *b)
{
	char hex[65];
	cg_sha256_hex(b->p ? (const void *)b->p : (const void *)"", b->len, hex);
	return json_pack("{s:I,s:I,s:b,s:s}", "bytes", (json_int_t)b->len, "seen",
			 (json_int_t)b->seen, "truncated", b->truncated, "sha256", hex);
}

/*
 * The hooks git said it did not run: inside a call git may start only git's
 * own programs, so a repository's hook meets a mount it may not execute
 * from, and git prints "hint: The 'PATH' hook was ignored because it's not
 * set as executable." (ux-s43c H1, s44c H1: the developer's pre-commit did
 * not stop the agent's commit, and the evidence did not say so). Read from
 * the stages' stderr as git wrote it: a command that silences git's advice
 * (advice.ignoredHook) or prints the line itself is believed, so this is a
 * record of what git said, not a guarantee. Each PATH once; NULL when none.
 */
static json_t *hooks_not_run(const struct cg_exec_result *res)
{
	static const char head[] = "hint: The '", tail[] = "' hook was ignored because it's not "
							   "set as executable.";
	json_t *out = NULL;
	for (size_t i = 0; i < res->n_stages; i++) {
		const char *p = (const char *)res->stages[i].err.p;
		size_t len = res->stages[i].err.len;
		for (const char *at = p; at && (size_t)(at - p) < len;) {
			const char *h = memmem(at, len - (size_t)(at - p), head, sizeof(head) - 1);
			if (!h)
				break;
			const char *name = h + sizeof(head) - 1;
			const char *end = memchr(name, '\n', len - (size_t)(name - p));
			size_t nl = end ? (size_t)(end - name) : len - (size_t)(name - p);
			const char *t =
			    nl >= sizeof(tail) - 1 ? name + nl - (sizeof(tail) - 1) : NULL;
			at = end ? end + 1 : NULL;
			if (!t || t == name || memcmp(t, tail, sizeof(tail) - 1) != 0 ||
			    (size_t)(t - name) > 200)
				continue;
			/*
			 * Printable UTF-8 only: a NUL kept by json_stringn is \u0000 in
			 * the line, which no C reader of the journal parses (s44e F1:
			 * the call's exec.finished was read as missing, its verdict
			 * "could not be started"), and a control character is a
			 * terminal's.
			 */
			bool printable = true;
			for (const char *c = name; c < t && printable; c++)
				printable = (unsigned char)*c >= 0x20 && *c != 0x7f;
			json_t *hook = printable ? json_stringn(name, (size_t)(t - name)) : NULL;
			if (!hook)
				continue;
			bool have = false;
			size_t k;
			const json_t *x;
			json_array_foreach(out, k, x) have |= json_equal(x, hook);
			if (!out)
				out = json_array();
			if (have || !out || json_array_size(out) >= 16)
				json_decref(hook);
			else
				json_array_append_new(out, hook);
		}
	}
	return out;
}

/* The exec.finished event: exit codes, output sizes and hashes, timings. */
static void note_exec_end(struct cg_kernel *k, struct cg_job *j, const struct run *r)
{
	const struct cg_exec_result *res = &r->res;
	json_t *codes = json_array();
	json_t *errs = json_array();
	for (size_t i = 0; i < res->n_stages; i++) {
		json_array_append_new(codes, json_integer(res->stages[i].exit_code));
		json_array_append_new(errs, hash_json(&res->stages[i].err));
	}
	json_t *fin =
	    json_pack("{s:b,s:o,s:o,s:o,s:b,s:b,s:b,s:I}", "started", 1, "exit_codes", codes,
		      "stdout", hash_json(&res->out), "stderr", errs, "timed_out", res->timed_out,
		      "cancelled", res->cancelled, "escapees_killed", res->tree_escapees_killed,
		      "duration_us", (json_int_t)((res->ended_ns - res->started_ns) / 1000));
	if (fin && json_array_size(r->set_aside))
		json_object_set_new(fin, "set_aside", ev_screened_copy(k, r->set_aside));
	if (fin && json_array_size(r->hooks_not_run))
		json_object_set_new(fin, "hooks_not_run", ev_screened_copy(k, r->hooks_not_run));
	ev_note(k, j->trace_id, CG_EV_EXEC_END, fin);
}

/* The reply of a call that ran: how it ended, most serious first. */
static struct cg_reply *ran_reply(const struct cg_job *j, const struct run *r)
{
	const struct cg_exec_result *res = &r->res;
	int last = res->n_stages ? res->stages[res->n_stages - 1].exit_code : 0;
	const char *sudo_exe = r->priv && !r->root ? sudo_password_needed(j, res) : NULL;
	if (r->screen_errno)
		return cg_reply_new(CG_R_SCREEN_FAILED, "{s:s}", "errno_name",
				    cg_errno_name(r->screen_errno));
	if (sudo_exe)
		return cg_reply_new(CG_R_SUDO_NEEDS_PASSWORD, "{s:s}", "exe", sudo_exe);
	if (res->timed_out) {
		/* Which deadline: asked for, the default, or a cap the request met (ux-s42c). */
		int64_t asked = j->gate.req ? j->gate.req->timeout_ms : -1;
		char why[200];
		if (asked > j->gate.timeout_ms)
			(void)snprintf(why, sizeof(why),
				       "the request asked for %lld ms, more than its rule and the "
				       "policy allow",
				       (long long)asked);
		else if (asked <= 0 && j->gate.timeout_cap_ms > j->gate.timeout_ms)
			(void)snprintf(why, sizeof(why),
				       "the default; a request may ask for up to %lld ms "
				       "(timeout_ms; callgate run --timeout)",
				       (long long)j->gate.timeout_cap_ms);
		else
			(void)snprintf(why, sizeof(why), "%s",
				       asked > 0 ? "as the request asked"
						 : "the most its rule and the policy allow");
		return cg_reply_new(CG_R_EXEC_DEADLINE, "{s:I,s:s}", "timeout_ms",
				    (json_int_t)j->gate.timeout_ms, "why", why);
	}
	if (res->cancelled)
		return cg_reply_new(CG_R_EXEC_CANCELLED, NULL);
	if (json_array_size(r->set_aside)) {
		/* The agent is told, or its next git call fails with no reason given. */
		char names[512] = "";
		size_t o = 0, i;
		const json_t *sa;
		json_array_foreach(r->set_aside, i, sa)
		{
			/* One that failed says so (s42d F1: E2BIG read as "set aside"). */
			const char *err = json_string_value(json_object_get(sa, "error"));
			char what[128] = "";
			if (err && strcmp(err, "E2BIG") == 0)
				(void)snprintf(what, sizeof(what),
					       " (NOT looked at in full: too many entries; a "
					       "repository made there was not checked)");
			else if (err)
				(void)snprintf(what, sizeof(what), " (NOT set aside: %s)", err);
			int m = snprintf(names + o, sizeof(names) - o, "%s%s%s", i ? ", " : "",
					 json_string_value(json_object_get(sa, "path")), what);
			if (m < 0 || (size_t)m + 32 >= sizeof(names) - o) {
				/* The rest by count: every one is in the reply's set_aside. */
				names[o] = '\0';
				(void)snprintf(names + o, sizeof(names) - o, "%s%zu more",
					       o ? " and " : "", json_array_size(r->set_aside) - i);
				break;
			}
			o += (size_t)m;
		}
		return cg_reply_new(CG_R_EXEC_DONE_SET_ASIDE, "{s:I,s:i,s:s,s:O}", "stages",
				    (json_int_t)res->n_stages, "exit_code", last, "names", names,
				    "set_aside", r->set_aside);
	}
	return cg_reply_new(CG_R_EXEC_DONE, "{s:I,s:i}", "stages", (json_int_t)res->n_stages,
			    "exit_code", last);
}

/* Everything up to and including the run. Returns the reply to answer with. */
static struct cg_reply *run_call(struct cg_kernel *k, struct cg_job *j, struct run *r)
{
	struct cg_reply *reply = NULL;
	if (prepare_identity(k, j, r, &reply) != 0 || prepare_confinement(j, r, &reply) != 0 ||
	    write_permit(k, j, r, &reply) != 0 || execute(k, j, r, &reply) != 0)
		return reply;
	screen_output(k, j, r);
	r->hooks_not_run = hooks_not_run(&r->res);
	note_exec_end(k, j, r);
	return ran_reply(j, r);
}

/* The reply's data: the decision, and what the run adds to it. New reference or NULL. */
static json_t *run_data(const struct cg_job *j, const struct run *r)
{
	json_t *data = decision_data(j);
	if (!data)
		return NULL;
	if (r->screening)
		json_object_set(data, "screening", r->screening);
	if (r->confinement)
		json_object_set(data, "confinement", r->confinement);
	if (r->connections)
		json_object_set(data, "connections", r->connections);
	if (r->ran && r->res.tree_escapees_killed)
		json_object_set_new(data, "escapees_killed", json_true());
	if (j->n_approved)
		json_object_set_new(data, "approved_by", approvers_json(j));
	if (j->grant_id[0])
		json_object_set_new(data, "grant_id", json_string(j->grant_id));
	/* Whatever the reply's code (a deadline, a cancel): what was set aside is said. */
	if (json_array_size(r->set_aside))
		json_object_set(data, "set_aside", r->set_aside);
	if (data && json_array_size(r->hooks_not_run))
		json_object_set(data, "hooks_not_run", r->hooks_not_run);
	return data;
}

/* Answer (streams included when it ran), seal, release the run. Consumes reply. */
static void answer_run(struct cg_kernel *k, struct cg_job *j, struct cg_reply *reply, struct run *r)
{
	/* The writer opens the permit's gate, which lives in r: not before that. */
	if (r->gated)
		(void)cg_gate_wait(&r->permit, -1);
	cg_reply_set_data(reply, run_data(j, r));
	cg_reply_set_trace(reply, j->trace_id);
	const struct cg_exec_result *res = &r->res;
	struct cg_stage_out *outs = NULL;
	size_t n_out = 0;
	if (r->ran && (outs = calloc(res->n_stages ? res->n_stages : 1, sizeof(*outs)))) {
		n_out = res->n_stages;
		for (size_t i = 0; i < n_out; i++)
			outs[i] =
			    (struct cg_stage_out){ .exit_code = res->stages[i].exit_code,
						   .err = res->stages[i].err.p,
						   .err_len = res->stages[i].err.len,
						   .err_truncated = res->stages[i].err.truncated };
	}
	struct cg_response resp = { .id = j->gate.req->id,
				    .status = cg_reply_def_of(reply)->status,
				    .n_stages = n_out,
				    .stages = outs,
				    .out = r->ran ? res->out.p : NULL,
				    .out_len = r->ran ? res->out.len : 0,
				    .out_truncated = r->ran && res->out.truncated,
				    .reply = reply };
	size_t len = 0;
	char *line = encode_response(&resp, j->trace_id, &len);
	free(outs);
	ev_seal(k, j->trace_id, reply, &j->gate.folded, j->decision, j->gen,
		r->ran || r->execd > 0);
	cg_reply_free(reply);
	if (r->ran)
		cg_exec_result_fini(&r->res);
	json_decref(r->screening);
	json_decref(r->confinement);
	json_decref(r->connections);
	json_decref(r->set_aside);
	json_decref(r->hooks_not_run);
	cg_confine_plan_free(r->plan);
	cg_envp_free(r->envp);
	sudo_unwrap(j);
	j->respond(j->cookie, line, len);
}

void run_job(struct cg_kernel *k, struct cg_job *j)
{
	struct run r = { 0 };
	struct cg_reply *reply;
	if (j->final) {
		/* Decided without running: denied by a human, or no answer in time. */
		reply = j->final;
		j->final = NULL;
	} else if (atomic_load(&j->cancelled)) {
		pthread_mutex_lock(&k->lock);
		bool stopping = k->stopping;
		pthread_mutex_unlock(&k->lock);
		reply = stopping ? cg_reply_new(CG_R_SHUTTING_DOWN, NULL)
				 : cg_reply_new(CG_R_EXEC_CANCELLED, NULL);
	} else {
		reply = run_call(k, j, &r);
	}
	answer_run(k, j, reply, &r);
}

void log_set_aside(const char *trace, const json_t *set_aside, const char *when)
{
	size_t i;
	const json_t *sa;
	json_array_foreach(set_aside, i, sa)
	{
		bool err = json_object_get(sa, "error") != NULL;
		cg_log("warn", trace, "protected name made or replaced %s: %s %s %s", when,
		       json_string_value(json_object_get(sa, "path")),
		       err ? "could not be set aside:" : "set aside as",
		       json_string_value(json_object_get(sa, err ? "error" : "set_aside_as")));
	}
}
