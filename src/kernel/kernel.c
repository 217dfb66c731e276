/* SPDX-License-Identifier: MIT */
/*
 * kernel — the call gate's lifecycle: building a kernel (policy, world,
 * replay window, evidence, screen, workers, the deadline thread), stopping
 * it, and freeing it. The request path starts in dispatch.c; the module
 * map is in kernel_priv.h.
 *
 * Invariants:
 *  - cg_kernel_new MUST either return a kernel whose workers and deadline
 *    thread all run, or release everything it acquired and say why.
 *  - Shutdown MUST answer every call: waiting ones are settled
 *    (SHUTTING_DOWN), running ones cancelled (children killed), and it
 *    returns only once every thread has been joined.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "kernel_priv.h"
#include "netns.h"

/* The locks and conditions; the deadline thread's runs on CLOCK_MONOTONIC. */
static void init_sync(struct cg_kernel *k)
{
	pthread_mutex_init(&k->gen_lock, NULL);
	pthread_mutex_init(&k->replay_lock, NULL);
	pthread_mutex_init(&k->journal_read_lock, NULL);
	pthread_cond_init(&k->journal_read_turn, NULL);
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cond, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->timer_cond, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * The daemon's own files, which no call may see: its state directory (the
 * evidence key, the journal) and the paths the caller names (its sockets).
 * Kept as absolute paths; 0, or -1 (out of memory or too many).
 */
static int take_own_paths(struct cg_kernel *k, const struct cg_kernel_config *cfg)
{
	const char *all[KERNEL_MAX_OWN_PATHS];
	size_t n = 0;
	if (cfg->state_dir)
		all[n++] = cfg->state_dir;
	for (size_t i = 0; i < cfg->n_own_paths; i++) {
		if (n == KERNEL_MAX_OWN_PATHS)
			return -1;
		all[n++] = cfg->own_paths[i];
	}
	for (size_t i = 0; i < n; i++) {
		char *abs = realpath(all[i], NULL);
		if (!abs) /* not there yet (a socket bound later): as given, made absolute */
			abs = all[i][0] == '/' ? strdup(all[i]) : NULL;
		if (!abs && all[i][0] != '/') {
			char cwd[4096];
			size_t len =
			    getcwd(cwd, sizeof(cwd)) ? strlen(cwd) + strlen(all[i]) + 2 : 0;
			if (len && (abs = malloc(len)))
				snprintf(abs, len, "%s/%s", cwd, all[i]);
		}
		if (!abs)
			return -1;
		k->own_paths[k->n_own_paths++] = abs;
	}
	return 0;
}

/* Copy what the kernel keeps of cfg. 0, or -1 with *err. */
static int take_config(struct cg_kernel *k, const struct cg_kernel_config *cfg,
		       struct cg_reply **err)
{
	k->approval = cfg->approval;
	k->approval_timeout_ms = cfg->approval_timeout_ms;
	k->on_call = cfg->on_call;
	k->on_call_arg = cfg->on_call_arg;
	/*
	 * Absolute (views hide it where it lives; a relative one is taken from
	 * here). One that cannot be made absolute is kept as given: every view
	 * then refuses to start rather than leave it reachable (agent_hiding).
	 */
	const char *agent = getenv("SSH_AUTH_SOCK");
	char here[4096];
	if (agent && *agent &&
	    (agent[0] == '/' || !getcwd(here, sizeof(here)) ||
	     asprintf(&k->ssh_auth_sock, "%s/%s", here, agent) < 0))
		k->ssh_auth_sock = strdup(agent);
	k->freshness_s = cfg->freshness_s > 0 ? cfg->freshness_s : CG_WIRE_FRESHNESS_S;
	if ((cfg->policy_file && !(k->policy_file = strdup(cfg->policy_file))) ||
	    (cfg->policy_pubkey_file && !(k->pubkey_file = strdup(cfg->policy_pubkey_file))) ||
	    (cfg->state_dir && !(k->state_dir = strdup(cfg->state_dir))) ||
	    take_own_paths(k, cfg) != 0) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating the kernel");
		return -1;
	}
	return 0;
}

/* Twice the freshness window, so a replayed id is refused whatever its time. */
static int open_replay_window(struct cg_kernel *k, struct cg_reply **err)
{
	int64_t window = cg_policy_defaults(k->gen->policy)->freshness_s;
	if (window <= 0)
		window = k->freshness_s;
	k->replay = cg_replay_new(2 * window * 1000000000LL);
	if (!k->replay) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
				    "creating the replay window");
		return -1;
	}
	return 0;
}

/* Workers and the deadline thread. 0, or -1 with *err (the started ones stopped). */
static int start_threads(struct cg_kernel *k, unsigned n_workers, struct cg_reply **err)
{
	k->n_threads = n_workers ? n_workers : CG_KERNEL_DEFAULT_WORKERS;
	if (k->n_threads > CG_KERNEL_MAX_WORKERS)
		k->n_threads = CG_KERNEL_MAX_WORKERS;
	k->threads = calloc(k->n_threads, sizeof(*k->threads));
	if (!k->threads) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting workers");
		return -1;
	}
	for (unsigned i = 0; i < k->n_threads; i++) {
		if (pthread_create(&k->threads[i], NULL, worker_main, k) != 0) {
			k->n_threads = i;
			cg_kernel_shutdown(k);
			*err =
			    cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting workers");
			return -1;
		}
		(void)pthread_setname_np(k->threads[i], "cg-worker");
	}
	if (pthread_create(&k->timer, NULL, timer_main, k) != 0) {
		cg_kernel_shutdown(k);
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing",
				    "starting the deadline thread");
		return -1;
	}
	k->timer_started = true;
	(void)pthread_setname_np(k->timer, "cg-deadline");
	return 0;
}

int cg_kernel_workspaces_check(const char *const *workspaces, size_t n, struct cg_result *why)
{
	const char *here[1] = { "." };
	struct cg_world w;
	struct cg_reply *err = NULL;
	if (cg_world_init(&w, n ? workspaces : here, n ? n : 1, &err) != 0) {
		result_from_reply(err, why);
		cg_reply_free(err);
		return -1;
	}
	cg_world_fini(&w);
	return 0;
}

/*
 * The calls a crash cut short while they ran (the daemon killed, out of
 * memory, the host reset: s43a F3): their processes were killed with their
 * cgroups (cg_confine_sweep_gone), and what they left in their write trees
 * is swept now, before any call, as their own end would have swept it:
 * judged by what changed since each one's permit, the write trees read from
 * it. What was set aside is logged and recorded (a `recovery` event).
 * 0, or -1 with errno (the record could not be made: the daemon does not
 * start).
 */
#define CUT_MARGIN_NS (50 * 1000000LL) /* a permit's ms time against coarse file times */

static int sweep_cut_runs(struct cg_kernel *k)
{
	json_t *runs = cg_evidence_cut_runs(k->ev), *calls = json_array();
	size_t i;
	const json_t *r;
	int rc = runs && calls ? 0 : -1;
	json_array_foreach(rc == 0 ? runs : NULL, i, r)
	{
		const char *trace = json_string_value(json_object_get(r, "trace"));
		const char *ts = json_string_value(json_object_get(r, "ts"));
		int64_t since = 0; /* a time that does not read: everything is judged */
		if (ts && cg_parse_time(ts, &since) == 0)
			since -= CUT_MARGIN_NS;
		char tag[9];
		(void)snprintf(tag, sizeof(tag), "%.8s", trace ? trace : "");
		json_t *trees = NULL;
		json_t *aside = cg_confine_sweep_cut(
		    json_object_get(json_object_get(r, "permit"), "confinement"), since, tag,
		    &trees);
		if (!aside) {
			rc = -1;
			break;
		}
		if (json_array_size(trees)) {
			cg_log("warn", trace,
			       "a call a crash cut short while it ran: its write trees were swept "
			       "(%zu set aside)",
			       json_array_size(aside));
			log_set_aside(trace, aside, "by a call a crash cut short");
			if (json_array_append_new(calls, json_pack("{s:s,s:s,s:o,s:o}", "trace",
								   trace, "since", ts, "trees",
								   trees, "set_aside", aside)) != 0)
				rc = -1;
		} else {
			json_decref(trees);
			json_decref(aside);
		}
	}
	json_decref(runs);
	if (rc == 0 && json_array_size(calls))
		return cg_evidence_note_swept(k->ev, calls);
	json_decref(calls);
	if (rc != 0)
		errno = ENOMEM;
	return rc;
}

int cg_kernel_new(const struct cg_kernel_config *cfg, struct cg_kernel **out, struct cg_result *why)
{
	struct cg_reply *err = NULL;
	struct cg_kernel *k = calloc(1, sizeof(*k));
	if (!k) {
		err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "creating the kernel");
		goto fail;
	}
	init_sync(k);
	if (take_config(k, cfg, &err) != 0)
		goto fail_kernel;
	const char *here[1] = { "." };
	const char *const *ws = cfg->n_workspaces ? cfg->workspaces : here;
	size_t n_ws = cfg->n_workspaces ? cfg->n_workspaces : 1;
	if (cg_world_init(&k->world, ws, n_ws, &err) != 0)
		goto fail_kernel;
	if (gen_load(k, &k->gen, &err) != 0)
		goto fail_world;
	k->gen->number = ++k->gen_seq;
	if (open_replay_window(k, &err) != 0)
		goto fail_gen;
	if (cfg->state_dir) {
		struct cg_evidence_config ec = {
			.state_dir = cfg->state_dir,
			.write_traces = true,
			.verify_all = cfg->verify_journal,
			.resign = cfg->resign_journal,
			.retention_s = cg_policy_defaults(k->gen->policy)->evidence_retention_s,
			.archive = cg_policy_defaults(k->gen->policy)->evidence_archive,
			.reserve_bytes = cfg->disk_reserve,
			.reserve_pct = cfg->disk_reserve_pct,
			.no_reserve = cfg->no_disk_reserve,
		};
		if (cg_evidence_open(&ec, &k->ev, &err) != 0)
			goto fail_replay;
	}
	if (cg_screen_new(&k->screen, &err) != 0)
		goto fail_evidence;
	char init[PATH_MAX + 64];
	if (cg_confine_init_open(init, sizeof(init)) == 0)
		cg_log("info", NULL, "views: pid 1 becomes %s once the command runs", init);
	else
		cg_log("warn", NULL, "views: %s; pid 1 stays a copy of the daemon", init);
	size_t gone = cg_confine_sweep_gone();
	if (gone)
		cg_log("warn", NULL,
		       "killed %zu call(s) a callgated that is gone left running: no deadline or "
		       "record covered them any more (their traces are marked incomplete)",
		       gone);
	if (k->ev && sweep_cut_runs(k) != 0) {
		err = cg_reply_new(CG_R_EVIDENCE_WRITE_FAILED, "{s:s}", "errno_name",
				   cg_errno_name(errno ? errno : EIO));
		goto fail_evidence;
	}
	const char *pids = cg_confine_pids_note();
	if (pids)
		cg_log("info", NULL, "confinement: %s", pids);
	/* Network namespaces made ahead of the calls that need one (root only). */
	k->netns_pool = cg_netns_pool_start(CG_NETNS_POOL_SIZE) == 0;
	if (start_threads(k, cfg->n_workers, &err) != 0)
		goto fail_threads;
	*out = k;
	if (why)
		memset(why, 0, sizeof(*why));
	return 0;

fail_threads:
	if (k->netns_pool)
		cg_netns_pool_stop();
	free(k->threads);
fail_evidence:
	cg_screen_free(k->screen);
	cg_evidence_close(k->ev);
fail_replay:
	cg_replay_free(k->replay);
fail_gen:
	gen_put(k->gen);
fail_world:
	cg_world_fini(&k->world);
fail_kernel:
	free(k->policy_file);
	free(k->pubkey_file);
	free(k->state_dir);
	for (size_t i = 0; i < k->n_own_paths; i++)
		free(k->own_paths[i]);
	free(k->ssh_auth_sock);
	free(k);
fail:
	if (why)
		result_from_reply(err, why);
	cg_reply_free(err);
	return -1;
}

void cg_kernel_shutdown(struct cg_kernel *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->stopping = true;
	/* Calls waiting for a human are answered: the daemon is going away. */
	while (k->approvals.head)
		settle_locked(k, k->approvals.head->job, cg_reply_new(CG_R_SHUTTING_DOWN, NULL));
	/* Cancel everything running or queued: children are killed, calls answered. */
	for (struct cg_job *j = k->active; j; j = j->next_active) {
		atomic_store(&j->cancelled, true);
		job_signal_cancel(j);
	}
	/* Held jobs go to the workers too, to be answered as cancelled. */
	release_all_held_locked(k);
	pthread_cond_broadcast(&k->timer_cond);
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
	for (unsigned i = 0; i < k->n_threads; i++)
		pthread_join(k->threads[i], NULL);
	k->n_threads = 0;
	if (k->timer_started) {
		pthread_join(k->timer, NULL);
		k->timer_started = false;
	}
}

void cg_kernel_free(struct cg_kernel *k)
{
	if (!k)
		return;
	cg_kernel_shutdown(k);
	if (k->netns_pool)
		cg_netns_pool_stop();
	free(k->threads);
	cg_screen_free(k->screen);
	cg_evidence_close(k->ev);
	cg_replay_free(k->replay);
	gen_put(k->gen);
	json_decref(k->reload_failed);
	cg_world_fini(&k->world);
	free(k->policy_file);
	free(k->pubkey_file);
	free(k->state_dir);
	for (size_t i = 0; i < k->n_own_paths; i++)
		free(k->own_paths[i]);
	free(k->ssh_auth_sock);
	cg_grants_clear(&k->grants);
	pthread_cond_destroy(&k->timer_cond);
	pthread_mutex_destroy(&k->gen_lock);
	pthread_mutex_destroy(&k->replay_lock);
	pthread_mutex_destroy(&k->journal_read_lock);
	pthread_cond_destroy(&k->journal_read_turn);
	pthread_mutex_destroy(&k->lock);
	pthread_cond_destroy(&k->cond);
	free(k);
}

size_t cg_kernel_evidence_pending(struct cg_kernel *k)
{
	return k->ev ? cg_evidence_pending(k->ev) : 0;
}

void cg_kernel_evidence_wake_below(struct cg_kernel *k, size_t level, int fd)
{
	if (k->ev)
		cg_evidence_wake_below(k->ev, level, fd);
}
