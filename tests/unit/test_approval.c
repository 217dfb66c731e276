/* SPDX-License-Identifier: MIT */
/* Tests for the approval queue, the request binding and the terminal sanitiser. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "approval.h"

static char *argv0[] = { "apt", "install", "nginx", NULL };
static struct cg_stage stage0 = { .argc = 3, .argv = argv0 };
static struct cg_env_var env0 = { .name = "DEBIAN_FRONTEND", .value = "noninteractive" };

static void make_call(struct cg_request *req, struct cg_call *call, struct cg_resolved_stage *rs)
{
	memset(req, 0, sizeof(*req));
	req->id = "req-1";
	req->host = "host";
	req->session = "s1";
	req->reason = "install nginx";
	req->time_str = "2026-11-22T06:00:00Z";
	req->n_stages = 1;
	req->stages = &stage0;
	req->n_env = 1;
	req->env = &env0;
	req->privileged = true;
	memset(rs, 0, sizeof(*rs));
	rs->exe = "/usr/bin/apt";
	rs->found = "/usr/bin/apt";
	rs->via_symlink = false;
	memset(call, 0, sizeof(*call));
	call->req = req;
	call->peer = (struct cg_peer){ .pid = 42, .uid = 1000, .gid = 1000 };
	call->n_stages = 1;
	call->stages = rs;
	call->cwd = "/ws";
	call->workspace = "/ws";
}

Test(approval, view_hash_binds_every_fact_that_decides_what_runs)
{
	struct cg_request req;
	struct cg_call call;
	struct cg_resolved_stage rs;
	make_call(&req, &call, &rs);
	char a[65], b[65];
	json_t *v1 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", a);
	json_t *v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_not_null(v1);
	cr_assert_str_eq(a, b, "same request, same hash");
	json_decref(v2);

	/* Any change to what would run changes the hash. */
	struct cg_env_var env1 = { .name = "DEBIAN_FRONTEND", .value = "readline" };
	req.env = &env1;
	v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_str_neq(a, b, "env value is bound");
	json_decref(v2);
	req.env = &env0;
	rs.exe = "/usr/bin/apt-get";
	v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_str_neq(a, b, "resolved exe is bound");
	json_decref(v2);
	rs.exe = "/usr/bin/apt";
	rs.argv0 = "./apt-get"; /* started under another name than argv[0] (s43b F4) */
	v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_str_neq(a, b, "the name it runs under is bound");
	json_decref(v2);
	rs.argv0 = NULL;
	call.cwd = "/elsewhere";
	v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_str_neq(a, b, "cwd is bound");
	json_decref(v2);
	call.cwd = "/ws";
	req.privileged = false;
	v2 = cg_approval_view(&call, NULL, "t1", "/usr/bin/agent", b);
	cr_assert_str_neq(a, b, "privileged is bound");
	json_decref(v2);

	cr_assert_str_eq(json_string_value(json_object_get(v1, "reason")), "install nginx");
	cr_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(v1, "env"), "DEBIAN_FRONTEND")),
	    "noninteractive");
	json_decref(v1);
}

Test(approval, queue_is_fifo_bounded_and_tracks_deadlines)
{
	struct cg_approvals q = { 0 };
	struct cg_pending *p1 = calloc(1, sizeof(*p1)), *p2 = calloc(1, sizeof(*p2));
	snprintf(p1->trace_id, sizeof(p1->trace_id), "a");
	snprintf(p2->trace_id, sizeof(p2->trace_id), "b");
	p1->deadline_mono_ns = 200;
	p2->deadline_mono_ns = 100;
	cr_assert_eq(cg_approvals_next_deadline(&q), INT64_MAX);
	cr_assert_eq(cg_approvals_push(&q, p1), 0);
	cr_assert_eq(cg_approvals_push(&q, p2), 0);
	cr_assert_eq(q.head, p1);
	cr_assert_eq(cg_approvals_next_deadline(&q), 100);
	cr_assert_eq(cg_approvals_find(&q, "b"), p2);
	cr_assert_null(cg_approvals_find(&q, "c"));
	cg_approvals_remove(&q, p2);
	cr_assert_null(cg_approvals_find(&q, "b"));
	cr_assert_eq(q.n, 1);
	cr_assert_eq(q.tail, p1);
	cg_approvals_remove(&q, p1);
	cr_assert_eq(q.n, 0);
	cr_assert_null(q.head);
	cg_pending_free(p1);
	cg_pending_free(p2);

	struct cg_approvals full = { 0 };
	struct cg_pending *items = calloc(CG_APPROVAL_QUEUE_MAX + 1, sizeof(*items));
	for (int i = 0; i < CG_APPROVAL_QUEUE_MAX; i++)
		cr_assert_eq(cg_approvals_push(&full, &items[i]), 0);
	cr_assert_eq(cg_approvals_push(&full, &items[CG_APPROVAL_QUEUE_MAX]), -1);
	free(items);
}

Test(approval, distinct_approvers)
{
	struct cg_pending p = { .needed = 2 };
	cr_assert_not(cg_pending_has_approver(&p, 0));
	p.approvers[p.n_approvals++] = 0;
	cr_assert(cg_pending_has_approver(&p, 0));
	cr_assert_not(cg_pending_has_approver(&p, 65534));
}

static void sanitized(const char *in, const char *want)
{
	char *s = cg_sanitize_for_terminal(in);
	cr_assert_str_eq(s, want, "in=%s", in);
	free(s);
}

Test(sanitize, escapes_are_rendered_inert)
{
	sanitized("plain text", "plain text");
	sanitized("\x1b[2J\x1b[Happroved", "\\x1b[2J\\x1b[Happroved");
	sanitized("a\rb\nc\td", "a\\x0db\\nc\\td");
	sanitized("\x7f", "\\x7f");
	sanitized("\xc2\x9b"
		  "31m",
		  "<U+009B>31m");
	sanitized("rm\xe2\x80\xae"
		  "fdp.exe",
		  "rm<U+202E>fdp.exe");
	sanitized("l\xe2\x80\x8bs", "l<U+200B>s");
	sanitized("\xef\xbb\xbfhi", "<U+FEFF>hi");
	sanitized("\xff\xfe", "\\xff\\xfe");
	sanitized("\xc0\xaf", "\\xc0\\xaf"); /* overlong '/' */
	sanitized("caf\xc3\xa9 \xe2\x9c\x93", "caf\xc3\xa9 \xe2\x9c\x93");
	sanitized(NULL, "");
}
