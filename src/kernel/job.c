/* SPDX-License-Identifier: MIT */
/*
 * job — one call in flight: its reference counts, cancellation, the queue
 * the workers take calls from, and the workers' loop.
 *
 * A job is created per request on the dispatch path and holds the gate's
 * result (request, resolved call, fold), the policy generation it was
 * decided under, and the submitter's respond callback.
 *
 * Invariants:
 *  - A job MUST be freed only when its last reference is dropped: the
 *    kernel's (queue, approval queue or dispatch) and the submitter's
 *    (*job_out) are independent.
 *  - The queue and the active list are guarded by k->lock; a queued or
 *    waiting job is on the active list, so that shutdown can cancel it.
 *  - Workers MUST NOT take signals (the daemon's loop owns them).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kernel_priv.h"

/*
 * The per-call log record, read back from the response line about to be
 * sent: it carries every answer's reply, decision and exit code alike,
 * whichever path produced it, so no answering path needs to know about
 * logging. Then the submitter's respond, exactly once.
 */
static void log_respond(void *cookie, char *line, size_t len)
{
	struct cg_job *j = cookie;
	struct cg_kernel *k = j->k;
	json_t *o = line ? json_loadb(line, len, 0, NULL) : NULL;
	json_t *reply = json_object_get(o, "reply");
	json_t *data = json_object_get(reply, "data");
	const char *type = json_string_value(json_object_get(reply, "type"));
	const char *decision = json_string_value(json_object_get(data, "decision"));
	const char *rule = json_string_value(json_object_get(data, "rule_id"));
	const char *code = json_string_value(json_object_get(reply, "code"));
	json_t *stages = json_object_get(o, "stages");
	size_t n_stages = json_array_size(stages);
	json_t *exit_code =
	    n_stages ? json_object_get(json_array_get(stages, n_stages - 1), "exit_code") : NULL;
	char rtype = type && type[0] ? type[0] : 'E';
	struct cg_call_record rec = {
		.trace_id = j->trace_id,
		.peer_pid = j->peer.pid,
		.peer_uid = j->peer.uid,
		.host = j->gate.req && j->gate.req->host ? j->gate.req->host : "",
		.decision = decision	   ? decision
			    : rtype == 'S' ? "ALLOW"
					   : "BLOCK",
		.rule_id = rule ? rule : "",
		.reply_type = rtype,
		.reply_code = code ? code : cg_reply_registry[CG_R_SYS_CRASH].code,
		.ran = json_is_integer(exit_code),
		.exit_code = (int)json_integer_value(exit_code),
	};
	k->on_call(k->on_call_arg, &rec);
	json_decref(o);
	j->user_respond(j->user_cookie, line, len);
}

struct cg_job *job_new(struct cg_kernel *k, const struct cg_peer *peer, cg_respond_fn respond,
		       void *cookie, const char trace[40])
{
	struct cg_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	atomic_init(&j->refs, 1);
	j->k = k;
	j->cancel_fd = -1;
	j->peer = *peer;
	j->respond = respond;
	j->cookie = cookie;
	if (k->on_call) {
		j->user_respond = respond;
		j->user_cookie = cookie;
		j->respond = log_respond;
		j->cookie = j;
	}
	memcpy(j->trace_id, trace, sizeof(j->trace_id));
	return j;
}

int job_accept(struct cg_job *j)
{
	j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return j->cancel_fd < 0 ? -1 : 0;
}

void job_hold(struct cg_job *j)
{
	atomic_fetch_add(&j->refs, 1);
}

void job_put(struct cg_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	cg_reply_free(j->final);
	cg_pending_free(j->pending);
	json_decref(j->decision);
	cg_gate_fini(&j->gate);
	gen_put(j->gen);
	if (j->cancel_fd >= 0)
		close(j->cancel_fd);
	free(j);
}

void job_lend(struct cg_job *j, struct cg_job **job_out)
{
	if (job_out) {
		job_hold(j);
		*job_out = j;
	}
}

void job_signal_cancel(struct cg_job *j)
{
	uint64_t one = 1;
	/* An eventfd write of 1 cannot block or fail short; ignore EAGAIN at the max. */
	if (j->cancel_fd >= 0)
		(void)!write(j->cancel_fd, &one, sizeof(one));
}

/*
 * Cancel a call (the client went away). A call waiting for a human is
 * withdrawn: out of the approval queue, answered by a worker.
 */
void cg_job_cancel(struct cg_job *j)
{
	if (!j)
		return;
	atomic_store(&j->cancelled, true);
	struct cg_kernel *k = j->k;
	pthread_mutex_lock(&k->lock);
	if (j->pending) {
		cg_approvals_remove(&k->approvals, j->pending);
		cg_pending_free(j->pending);
		j->pending = NULL;
		ev_note(k, j->trace_id, CG_EV_APPROVAL_ANS,
			json_pack("{s:s}", "outcome", "withdrawn"));
		enqueue_locked(k, j);
	}
	pthread_mutex_unlock(&k->lock);
	job_signal_cancel(j);
}

void cg_job_release(struct cg_job *j)
{
	job_put(j);
}

void active_add(struct cg_kernel *k, struct cg_job *j)
{
	if (j->in_active)
		return;
	j->in_active = true;
	j->prev_active = NULL;
	j->next_active = k->active;
	if (k->active)
		k->active->prev_active = j;
	k->active = j;
}

static void active_del(struct cg_kernel *k, struct cg_job *j)
{
	if (j->prev_active)
		j->prev_active->next_active = j->next_active;
	else if (k->active == j)
		k->active = j->next_active;
	if (j->next_active)
		j->next_active->prev_active = j->prev_active;
	j->prev_active = j->next_active = NULL;
	j->in_active = false;
}

void enqueue_locked(struct cg_kernel *k, struct cg_job *j)
{
	active_add(k, j);
	j->next = NULL;
	if (k->queue_tail)
		k->queue_tail->next = j;
	else
		k->queue_head = j;
	k->queue_tail = j;
	pthread_cond_signal(&k->cond);
}

/* The next queued job, or NULL once the kernel stops with nothing queued. */
static struct cg_job *dequeue(struct cg_kernel *k)
{
	pthread_mutex_lock(&k->lock);
	while (!k->queue_head && !k->stopping)
		pthread_cond_wait(&k->cond, &k->lock);
	struct cg_job *j = k->queue_head;
	if (j) {
		k->queue_head = j->next;
		if (!k->queue_head)
			k->queue_tail = NULL;
		j->next = NULL;
		/* Not cg_job_cancel: it takes k->lock, which we hold. Nothing has started. */
		if (k->stopping)
			atomic_store(&j->cancelled, true);
	}
	pthread_mutex_unlock(&k->lock);
	return j;
}

void *worker_main(void *arg)
{
	struct cg_kernel *k = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	struct cg_job *j;
	while ((j = dequeue(k))) {
		if (j->work)
			j->work(k, j);
		else
			run_job(k, j);
		/*
		 * No broadcast here: only idle workers wait on k->cond, and waking
		 * all of them after every call was a thundering herd (shutdown
		 * joins the threads instead of waiting on the condition).
		 */
		pthread_mutex_lock(&k->lock);
		active_del(k, j);
		pthread_mutex_unlock(&k->lock);
		job_put(j);
	}
	return NULL;
}
