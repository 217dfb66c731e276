/* SPDX-License-Identifier: MIT */
/*
 * approval — the pending queue and the canonical view an approval binds to.
 *
 * MUST: the view carries every fact that decides what runs; the hash is over
 *       its compact, key-sorted serialisation, so any difference changes it.
 * MUST NOT: lock (the kernel's lock guards the queue).
 */
#include "approval.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

json_t *cg_approval_view(const struct cg_call *call, const struct cg_folded *f,
			 const char *trace_id, const char *peer_exe, char sha256_hex[65])
{
	const struct cg_request *req = call->req;
	json_t *stages = json_array();
	json_t *env = json_object();
	json_t *cons = json_array();
	if (!stages || !env || !cons)
		goto fail;
	for (size_t i = 0; i < call->n_stages; i++) {
		json_t *argv = json_array();
		for (size_t j = 0; argv && j < req->stages[i].argc; j++)
			json_array_append_new(argv, json_string(req->stages[i].argv[j]));
		/*
		 * Which constraint sets bind this stage (indexes into "constraints"):
		 * a set may govern some stages only, and a stage no set governs
		 * runs unconfined when privileged (an attack's second stage read
		 * /etc/shadow as root under a screen that showed one set).
		 */
		json_t *bound = cg_folded_stage_sets(f, i);
		/*
		 * The name it is started under when that is not argv[0] as sent (a
		 * workspace link runs under the program's own name: s43b F4, shown
		 * as ./xzcat, it ran as xz and compressed the file in place).
		 */
		json_array_append_new(
		    stages, json_pack("{s:o?,s:s,s:s,s:b,s:o?,s:s?}", "argv", argv, "exe",
				      call->stages[i].exe, "found", call->stages[i].found,
				      "via_symlink", call->stages[i].via_symlink, "constraint_sets",
				      bound, "argv0", call->stages[i].argv0));
	}
	for (size_t i = 0; i < req->n_env; i++)
		json_object_set_new(env, req->env[i].name, json_string(req->env[i].value));
	for (size_t i = 0; f && i < f->n_constraints; i++)
		json_array_append_new(cons, cg_constraints_to_json(f->constraints[i]));

	json_t *view = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:{s:i,s:i,s:i,s:s},s:o,s:o,s:s?,s:b,s:o,s:s,s:s,s:s}",
	    "trace_id", trace_id, "id", req->id, "session", req->session, "host", req->host, "time",
	    req->time_str ? req->time_str : "", "reason", req->reason, "peer", "uid",
	    (int)call->peer.uid, "gid", (int)call->peer.gid, "pid", (int)call->peer.pid, "exe",
	    peer_exe ? peer_exe : "", "pipeline", stages, "env", env, "cwd", call->cwd,
	    "privileged", req->privileged, "constraints", cons, "rule_id",
	    f && f->rule_id ? f->rule_id : "", "rung",
	    f && f->deciding_rung ? f->deciding_rung : "", "code",
	    f ? cg_reply_registry[f->reason].code : "");
	if (!view)
		return NULL;
	if (req->actions)
		json_object_set_new(view, "actions", json_incref(req->actions));
	/*
	 * What else changes what runs, so it is shown and bound too: the
	 * daemon's ssh agent handed to the call (an attack had it used by a
	 * call shown as plain `ssh-add -l`), and the call's own deadline: the
	 * one it will run under (the request's, capped by the policy, or the
	 * policy's default), as decided; the request's when not yet decided.
	 */
	json_object_set_new(view, "forward_agent", json_boolean(req->forward_agent));
	int64_t deadline = call->timeout_ms > 0 ? call->timeout_ms : req->timeout_ms;
	json_object_set_new(view, "timeout_ms",
			    deadline >= 0 ? json_integer(deadline) : json_null());
	char *canon = json_dumps(view, JSON_COMPACT | JSON_SORT_KEYS);
	if (!canon) {
		json_decref(view);
		return NULL;
	}
	cg_sha256_hex(canon, strlen(canon), sha256_hex);
	free(canon);
	return view;
fail:
	json_decref(stages);
	json_decref(env);
	json_decref(cons);
	return NULL;
}

int cg_approvals_push(struct cg_approvals *q, struct cg_pending *p)
{
	if (q->n >= CG_APPROVAL_QUEUE_MAX)
		return -1;
	p->next = NULL;
	if (q->tail)
		q->tail->next = p;
	else
		q->head = p;
	q->tail = p;
	q->n++;
	return 0;
}

struct cg_pending *cg_approvals_find(struct cg_approvals *q, const char *trace_id)
{
	for (struct cg_pending *p = q->head; p; p = p->next)
		if (strcmp(p->trace_id, trace_id) == 0)
			return p;
	return NULL;
}

void cg_approvals_remove(struct cg_approvals *q, struct cg_pending *p)
{
	struct cg_pending *prev = NULL;
	for (struct cg_pending *it = q->head; it; prev = it, it = it->next) {
		if (it != p)
			continue;
		if (prev)
			prev->next = it->next;
		else
			q->head = it->next;
		if (q->tail == it)
			q->tail = prev;
		q->n--;
		it->next = NULL;
		return;
	}
}

int64_t cg_approvals_next_deadline(const struct cg_approvals *q)
{
	int64_t d = INT64_MAX;
	for (const struct cg_pending *p = q->head; p; p = p->next)
		if (p->deadline_mono_ns < d)
			d = p->deadline_mono_ns;
	return d;
}

bool cg_pending_has_approver(const struct cg_pending *p, uid_t uid)
{
	for (size_t i = 0; i < p->n_approvals; i++)
		if (p->approvers[i] == uid)
			return true;
	return false;
}

json_t *cg_approvals_list(const struct cg_approvals *q, int64_t now_mono_ns)
{
	json_t *a = json_array();
	for (const struct cg_pending *p = q->head; a && p; p = p->next) {
		json_t *item = json_deep_copy(p->view);
		json_t *by = json_array();
		for (size_t i = 0; by && i < p->n_approvals; i++)
			json_array_append_new(by, json_integer(p->approvers[i]));
		int64_t left = (p->deadline_mono_ns - now_mono_ns) / 1000000;
		if (!item)
			continue;
		json_object_set_new(item, "request_sha256", json_string(p->request_sha256));
		json_object_set_new(item, "approvers_needed", json_integer(p->needed));
		json_object_set_new(item, "approved_by", by ? by : json_array());
		json_object_set_new(item, "deadline_ms_left", json_integer(left > 0 ? left : 0));
		json_array_append_new(a, item);
	}
	return a;
}

void cg_pending_free(struct cg_pending *p)
{
	if (!p)
		return;
	json_decref(p->view);
	free(p);
}

char *cg_sanitize_for_terminal(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t len = strlen((const char *)p);
	/* Worst case every byte becomes "<U+XXXXXX>" (10 bytes). */
	char *out = malloc(len * 10 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	const unsigned char *end = p + len;
	/*
	 * Any character shown as a backslash escape (a line break, a tab, any
	 * other control, a byte that is not UTF-8) makes every backslash shown
	 * doubled, so that "\t" is the tab and "\\t" the two characters: a tab
	 * and a typed backslash-t had read the same, and root chmodded the
	 * second word of what looked like one path (s42b F1; s41d F2 for "\n").
	 */
	bool escapes = false;
	for (const unsigned char *q = p; q < end && !escapes;) {
		uint32_t c;
		size_t n = cg_utf8_next(q, (size_t)(end - q), &c);
		escapes = n == 0 || c < 0x20 || c == 0x7f;
		q += n ? n : 1;
	}
	while (*p) {
		uint32_t c;
		size_t n = cg_utf8_next(p, (size_t)(end - p), &c);
		if (n == 0) {
			o += (size_t)snprintf(out + o, 11, "\\x%02x", *p);
			p++;
			continue;
		}
		/* Other texts show their backslashes as they are. */
		if (c == '\\' && escapes)
			o += (size_t)snprintf(out + o, 11, "\\\\");
		else if (c == '\n')
			o += (size_t)snprintf(out + o, 11, "\\n");
		else if (c == '\t')
			o += (size_t)snprintf(out + o, 11, "\\t");
		else if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(out + o, 11, "\\x%02x", (unsigned)c);
		else if (cg_unicode_hidden(c))
			o += (size_t)snprintf(out + o, 11, "<U+%04X>", (unsigned)c);
		else {
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
	}
	out[o] = '\0';
	return out;
}
