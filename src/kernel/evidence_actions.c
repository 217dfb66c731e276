/* SPDX-License-Identifier: MIT */
/*
 * evidence_actions — the protocol's evidence reads: `verdict` (a trace's
 * sealed verdict.json), `replay` (verify one trace against the journal and
 * the signed checkpoints) and `log` (journal events, and the per-call summary
 * `callgate log` prints, made from those events), answered by the
 * daemon so that an agent that holds only the socket can check its calls.
 *
 * A read decides nothing and runs nothing; it is still a request with a
 * trace of its own (who read what is evidence too). The reading itself
 * (the journal can be large) runs on a worker, never on the event loop.
 *
 * Invariants:
 *  - A peer MUST see only the traces whose request the kernel recorded with
 *    its own uid (SO_PEERCRED); a configured approver (peer->approver, set
 *    by the server from --approver-uid/--approver-group) sees all.
 *  - Another uid's trace MUST be answered exactly like a missing one
 *    (TRACE_NOT_FOUND): not one byte of it comes back, not even that it
 *    exists.
 *  - Every path answers exactly once (answer_sealed).
 *  - Reads hold at most CG_EV_READS_PER_UID workers per uid and
 *    CG_EV_READS_MAX in all (a read past either is refused, not queued), and
 *    run at nice 10: a flood of reads from one uid once held every worker,
 *    and another uid's /bin/true waited a minute (found by a review).
 */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "access.h"
#include "kernel_priv.h"
#include "replay.h"
#include "util.h"
#include "verdict.h"

static const char *action_name(enum cg_action a)
{
	return a == CG_ACTION_VERDICT ? "verdict" : a == CG_ACTION_REPLAY ? "replay" : "log";
}

/* The refusal for a failed read: not found (the same for "not yours"), or a system error. */
static struct cg_reply *read_failed(int e, const char *trace_id, const char *doing)
{
	if (e == ENOENT || e == EINVAL || e == ENOTDIR)
		return cg_reply_new(CG_R_TRACE_NOT_FOUND, "{s:s}", "trace_id",
				    trace_id ? trace_id : "");
	return cg_reply_new(CG_R_EVIDENCE_READ_FAILED, "{s:s,s:s}", "doing", doing, "detail",
			    cg_errno_name(e));
}

/* Wait for this reader's turn at the journal; journal_turn_give() after. */
static void journal_turn_take(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->journal_read_lock);
	uint64_t mine = k->journal_read_next++;
	while (k->journal_read_serving != mine)
		pthread_cond_wait(&k->journal_read_turn, &k->journal_read_lock);
	pthread_mutex_unlock(&k->journal_read_lock);
}

static void journal_turn_give(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->journal_read_lock);
	k->journal_read_serving++;
	pthread_cond_broadcast(&k->journal_read_turn);
	pthread_mutex_unlock(&k->journal_read_lock);
}

static struct cg_reply *do_verdict(struct cg_kernel *k, const struct cg_request *req,
				   const struct cg_reader *rd)
{
	json_t *v = NULL;
	if (cg_trace_verdict_read(k->state_dir, req->trace_id, rd, &v) != 0)
		return read_failed(errno, req->trace_id, "reading the verdict");
	const char *d = json_string_value(json_object_get(v, "decision"));
	struct cg_reply *r = cg_reply_new(CG_R_VERDICT_SHOWN, "{s:s,s:s}", "trace_id",
					  req->trace_id, "decision", d ? d : "");
	cg_reply_set_data(r, json_pack("{s:s,s:o}", "trace_id", req->trace_id, "verdict", v));
	return r;
}

static struct cg_reply *do_replay(struct cg_kernel *k, const struct cg_request *req,
				  const struct cg_reader *rd)
{
	if (cg_trace_readable(k->state_dir, req->trace_id, rd) != 0)
		return read_failed(errno, req->trace_id, "finding the trace");
	struct cg_replay_opts o = { .state_dir = k->state_dir, .trace_id = req->trace_id };
	json_t *rep = NULL;
	journal_turn_take(k);
	int rc = cg_replay_run(&o, &rep);
	int e = errno;
	journal_turn_give(k);
	if (rc < 0) {
		json_decref(rep);
		return cg_reply_new(CG_R_EVIDENCE_READ_FAILED, "{s:s,s:s}", "doing", "replaying",
				    "detail", cg_errno_name(e));
	}
	/* The journal's own head and size are the operator's to see. */
	if (!rd->all)
		json_object_del(rep, "journal");
	const char *st = json_string_value(json_object_get(rep, "status"));
	struct cg_reply *r = cg_reply_new(CG_R_REPLAY_DONE, "{s:s,s:s}", "trace_id", req->trace_id,
					  "status", st ? st : (rc ? "FAIL" : "PASS"));
	json_object_set_new(rep, "trace_id", json_string(req->trace_id));
	cg_reply_set_data(r, rep);
	return r;
}

static struct cg_reply *do_log(struct cg_kernel *k, const struct cg_request *req,
			       const struct cg_reader *rd)
{
	struct cg_log_query q = { .trace_id = req->trace_id,
				  .since_ns = req->since_ns,
				  .limit = req->limit > 0 ? (size_t)req->limit : CG_WIRE_LOG_LIMIT,
				  .max_bytes =
				      (size_t)cg_test_knob("CALLGATE_TEST_LOG_READ_BYTES",
							   CG_LOG_READ_BYTES, CG_LOG_READ_BYTES) };
	json_t *events = NULL;
	size_t matched = 0;
	journal_turn_take(k);
	int rc = cg_journal_query(k->state_dir, rd, &q, &events, &matched);
	int e = errno;
	journal_turn_give(k);
	if (rc != 0)
		return cg_reply_new(CG_R_EVIDENCE_READ_FAILED, "{s:s,s:s}", "doing",
				    "reading the journal", "detail", cg_errno_name(e));
	size_t n = json_array_size(events);
	/* The same per-call lines as `callgate log`, from the events returned. */
	json_t *calls = cg_calls_from_events(events);
	struct cg_reply *r = cg_reply_new(CG_R_LOG_SHOWN, "{s:I}", "count", (json_int_t)n);
	cg_reply_set_data(r, json_pack("{s:o,s:o,s:I,s:b}", "events", events, "calls",
				       calls ? calls : json_array(), "matched", (json_int_t)matched,
				       "truncated", matched > n));
	return r;
}

/* k->lock held: take a read slot for uid; NULL, or the refusal. */
static struct cg_reply *read_slot_take(struct cg_kernel *k, uid_t uid)
{
	unsigned mine = 0;
	for (unsigned i = 0; i < k->n_ev_reads; i++)
		mine += k->ev_reads[i] == uid;
	if (mine >= CG_EV_READS_PER_UID)
		return cg_reply_new(CG_R_EVIDENCE_READS_BUSY, "{s:i,s:i,s:s}", "reading", (int)mine,
				    "limit", CG_EV_READS_PER_UID, "whose", "for one uid");
	if (k->n_ev_reads >= CG_EV_READS_MAX)
		return cg_reply_new(CG_R_EVIDENCE_READS_BUSY, "{s:i,s:i,s:s}", "reading",
				    (int)k->n_ev_reads, "limit", CG_EV_READS_MAX, "whose",
				    "in the daemon");
	k->ev_reads[k->n_ev_reads++] = uid;
	return NULL;
}

static void read_slot_give(struct cg_kernel *k, uid_t uid)
{
	pthread_mutex_lock(&k->lock);
	for (unsigned i = 0; i < k->n_ev_reads; i++)
		if (k->ev_reads[i] == uid) {
			k->ev_reads[i] = k->ev_reads[--k->n_ev_reads];
			break;
		}
	pthread_mutex_unlock(&k->lock);
}

/* On a worker: read, then answer. */
static void evidence_work(struct cg_kernel *k, struct cg_job *j)
{
	const struct cg_request *req = j->gate.req;
	struct cg_reader rd = { .uid = j->peer.uid, .all = j->peer.approver };
	struct cg_reply *r;
	/*
	 * The calls being answered and run come first (this thread only,
	 * restored below). Only where the restore can succeed: without
	 * CAP_SYS_NICE the worker, and every call it forks later, would stay
	 * at nice 10 (found by a review).
	 */
	pid_t tid = gettid();
	int prio = getpriority(PRIO_PROCESS, (id_t)tid);
	bool renice = geteuid() == 0;
	if (renice)
		(void)setpriority(PRIO_PROCESS, (id_t)tid, 10);
	long stall = cg_test_knob("CALLGATE_TEST_READ_STALL_MS", 0, 60000);
	if (stall > 0)
		(void)nanosleep(&(struct timespec){ stall / 1000, (stall % 1000) * 1000000 }, NULL);
	/* What was sealed before this read asked is on disk before it is read. */
	if (cg_evidence_flush(k->ev) != 0)
		r = cg_reply_new(CG_R_EVIDENCE_READ_FAILED, "{s:s,s:s}", "doing",
				 "flushing the journal", "detail", cg_errno_name(errno));
	else if (req->action == CG_ACTION_VERDICT)
		r = do_verdict(k, req, &rd);
	else if (req->action == CG_ACTION_REPLAY)
		r = do_replay(k, req, &rd);
	else
		r = do_log(k, req, &rd);
	if (renice && setpriority(PRIO_PROCESS, (id_t)tid, prio) != 0)
		cg_log("warn", j->trace_id, "evidence read: worker priority not restored: %s",
		       strerror(errno));
	read_slot_give(k, j->peer.uid);
	answer_sealed(k, j->respond, j->cookie, req->id, j->trace_id, r, NULL, NULL, j->gen);
}

void read_evidence(struct cg_kernel *k, struct cg_job *j, bool claimed, struct cg_job **job_out)
{
	(void)claimed; /* a read keeps its id: the same bytes never read twice */
	if (!k->ev || !k->state_dir) {
		answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id,
			      cg_reply_new(CG_R_EVIDENCE_OFF, "{s:s}", "action",
					   action_name(j->gate.req->action)),
			      NULL, NULL, j->gen);
		job_put(j);
		return;
	}
	j->work = evidence_work;
	pthread_mutex_lock(&k->lock);
	if (k->stopping) {
		pthread_mutex_unlock(&k->lock);
		answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id,
			      cg_reply_new(CG_R_SHUTTING_DOWN, NULL), NULL, NULL, j->gen);
		job_put(j);
		return;
	}
	struct cg_reply *busy = read_slot_take(k, j->peer.uid);
	if (busy) {
		pthread_mutex_unlock(&k->lock);
		answer_sealed(k, j->respond, j->cookie, j->gate.req->id, j->trace_id, busy, NULL,
			      NULL, j->gen);
		job_put(j);
		return;
	}
	job_lend(j, job_out);
	enqueue_locked(k, j);
	pthread_mutex_unlock(&k->lock);
}
