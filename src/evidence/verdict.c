/* SPDX-License-Identifier: MIT */
/*
 * verdict — a call's verdict (seed 004, docs/evidence.md "verdict.json"):
 * rendered once from the typed facts the kernel hands over
 * (cg_verdict_render), normalised from a caller's free-form JSON
 * (cg_verdict_normalize, for integrators and older journals), and written
 * for a terminal (cg_verdict_render_md).
 *
 * Invariants:
 *  - An unreadable or missing decision MUST render as UNKNOWN, never ALLOW
 *    (fail closed), with the given value kept beside it.
 *  - verdict.md MUST be terminal-safe: every control character (ANSI escapes
 *    included) becomes '?'.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "evidence.h"
#include "journal.h"
#include "util.h"

static const char *const decisions[] = { "ALLOW", "DEGRADE", "UNKNOWN", "BLOCK" };

static json_t *as_list(json_t *v)
{
	if (!v || json_is_null(v))
		return json_array();
	if (json_is_array(v))
		return json_deep_copy(v);
	json_t *a = json_array();
	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach(v, k, x)
		{
			json_array_append_new(a,
					      json_pack("{s:s, s:O}", "constraint", k, "value", x));
		}
	} else {
		json_array_append_new(a, json_deep_copy(v));
	}
	return a;
}

/*
 * The layer of a verdict given as JSON by a caller without typed facts: the
 * registry's, for a registry code; by its prefix only for a code the
 * registry does not know (a foreign or older journal).
 */
static const char *layer_of(const char *code)
{
	if (!code)
		return "MCP";
	const struct cg_reply_def *d = cg_reply_find_code(code);
	if (d)
		return cg_layer_name(d->layer);
	if (strncmp(code, "WA-", 3) == 0)
		return "WA";
	if (strncmp(code, "EN-", 3) == 0)
		return "EN";
	if (strncmp(code, "CT-", 3) == 0)
		return "CT";
	return "MCP";
}

/* The next step an agent should take, by reply type and decision (e: scratch). */
static const char *default_step(char rtype, const char *decision, const char *trace_id, char *e,
				size_t e_len)
{
	const char *step;
	switch (rtype) {
	case 'S':
		step = strcmp(decision, "DEGRADE") == 0
			   ? "Continue: the call ran within the constraints listed; stay "
			     "within them."
			   : "Continue: the call completed; use its result.";
		break;
	case 'I':
		step = "Fix the request as the reply message says, then retry.";
		break;
	case 'D':
		step = strcmp(decision, "UNKNOWN") == 0
			   ? "Do not retry unchanged: provide the missing information, then "
			     "gate again."
			   : "Do not retry unchanged: ask for approval, obtain a grant, or "
			     "make "
			     "a narrower request.";
		break;
	default:
		snprintf(e, e_len,
			 "Stop and report trace %s to the operator; the failure was not "
			 "caused by the request.",
			 trace_id);
		step = e;
		break;
	}
	return step;
}

json_t *cg_verdict_normalize(const json_t *in, const char *trace_id)
{
	json_t *v = json_object();
	if (!v)
		return NULL;
	const char *d = json_string_value(json_object_get(in, "decision"));
	const char *decision = "UNKNOWN"; /* fail closed: an unreadable decision is not ALLOW */
	for (size_t i = 0; d && i < CG_ARRAY_LEN(decisions); i++)
		if (strcasecmp(d, decisions[i]) == 0)
			decision = decisions[i];
	json_t *reply = json_object_get(in, "reply");
	const char *rtype = json_string_value(json_object_get(reply, "type"));
	const char *rcode = json_string_value(json_object_get(reply, "code"));
	const char *rmsg = json_string_value(json_object_get(reply, "message"));
	if (!rtype || strlen(rtype) != 1 || !strchr("SIDE", rtype[0]))
		rtype = "E";
	const char *rule = json_string_value(json_object_get(in, "rule_id"));
	const char *reason = json_string_value(json_object_get(in, "reason"));
	const char *layer = json_string_value(json_object_get(in, "layer"));
	json_object_set_new(v, "trace_id", json_string(trace_id));
	json_object_set_new(v, "decision", json_string(decision));
	if (d && strcmp(d, decision) != 0)
		json_object_set_new(v, "decision_given", json_string(d));
	const char *summary = json_string_value(json_object_get(in, "summary"));
	char sbuf[600];
	if (!summary) {
		snprintf(sbuf, sizeof(sbuf), "%s%s%s: %s", decision, rule ? " by rule " : "",
			 rule ? rule : "", rmsg ? rmsg : "no message");
		summary = sbuf;
	}
	json_object_set_new(v, "summary", json_string(summary));
	json_t *why = json_object_get(in, "why");
	if (json_is_array(why) && json_array_size(why)) {
		json_t *w = json_array(), *x;
		size_t i;
		json_array_foreach(why, i, x)
		{
			json_t *c =
			    json_is_object(x) ? json_deep_copy(x) : json_pack("{s:O}", "reason", x);
			if (c && !json_object_get(c, "layer"))
				json_object_set_new(c, "layer",
						    json_string(layer ? layer : layer_of(rcode)));
			if (c && !json_object_get(c, "rule_id"))
				json_object_set_new(c, "rule_id",
						    rule ? json_string(rule) : json_null());
			json_array_append_new(w, c);
		}
		json_object_set_new(v, "why", w);
	} else {
		json_t *w =
		    json_pack("[{s:s?, s:s, s:s?}]", "rule_id", rule, "layer",
			      layer ? layer : layer_of(rcode), "reason", reason ? reason : rmsg);
		json_object_set_new(v, "why", w ? w : json_array());
	}
	json_t *con = json_object_get(in, "constrained");
	json_object_set_new(v, "constrained",
			    as_list(con ? con : json_object_get(in, "constraints")));
	json_t *blk = json_object_get(in, "blocked");
	bool stops = strcmp(decision, "ALLOW") != 0 && strcmp(decision, "DEGRADE") != 0;
	if (blk)
		json_object_set_new(v, "blocked", as_list(blk));
	else if (stops)
		json_object_set_new(v, "blocked",
				    json_pack("[s]", "the whole request: nothing was run"));
	else
		json_object_set_new(v, "blocked", json_array());
	json_t *next = json_object_get(in, "next_steps");
	if (json_is_array(next) && json_array_size(next)) {
		json_object_set_new(v, "next_steps", json_deep_copy(next));
	} else if (json_is_string(next) && json_string_length(next)) {
		json_object_set_new(v, "next_steps", json_pack("[O]", next));
	} else {
		char e[200];
		json_object_set_new(
		    v, "next_steps",
		    json_pack("[s]", default_step(rtype[0], decision, trace_id, e, sizeof(e))));
	}
	json_t *conf = json_object_get(in, "confidence");
	json_object_set_new(v, "confidence",
			    json_is_number(conf) ? json_real(json_number_value(conf))
						 : json_real(1.0));
	json_object_set_new(v, "reply",
			    json_pack("{s:s, s:s, s:s}", "type", rtype, "code", rcode ? rcode : "",
				      "message", rmsg ? rmsg : ""));
	json_t *x = json_object_get(in, "executed");
	if (json_is_boolean(x))
		json_object_set(v, "executed", x);
	else
		json_object_set_new(v, "executed", json_boolean(!stops && rtype[0] == 'S'));
	/* Anything else the caller recorded (policy identity, …) is kept as given. */
	const char *key;
	json_object_foreach((json_t *)(uintptr_t)in, key, x)
	{
		if (!json_object_get(v, key) && strcmp(key, "constraints") != 0 &&
		    strcmp(key, "rule_id") != 0 && strcmp(key, "reason") != 0 &&
		    strcmp(key, "layer") != 0)
			json_object_set_new(v, key, json_deep_copy(x));
	}
	return v;
}

/* A why[] entry as verdict.json has it: its layer and rule filled in when absent. */
static json_t *why_entry(const json_t *x, const char *layer, const char *rule)
{
	json_t *c = json_is_object(x) ? json_deep_copy(x) : json_pack("{s:O}", "reason", x);
	if (c && !json_object_get(c, "layer"))
		json_object_set_new(c, "layer", json_string(layer));
	if (c && !json_object_get(c, "rule_id"))
		json_object_set_new(c, "rule_id", rule ? json_string(rule) : json_null());
	return c;
}

json_t *cg_verdict_render(const struct cg_verdict_facts *f, const char *trace_id)
{
	json_t *v = json_object();
	if (!v)
		return NULL;
	const char *decision = "UNKNOWN"; /* fail closed: an unknown decision is not ALLOW */
	for (size_t i = 0; f->decision && i < CG_ARRAY_LEN(decisions); i++)
		if (strcasecmp(f->decision, decisions[i]) == 0)
			decision = decisions[i];
	const char *layer = cg_layer_name(f->layer);
	const char *rmsg = f->message;
	char rtype[2] = { strchr("SIDE", f->reply_type) && f->reply_type ? f->reply_type : 'E', 0 };
	json_object_set_new(v, "trace_id", json_string(trace_id));
	json_object_set_new(v, "decision", json_string(decision));
	if (f->decision && strcmp(f->decision, decision) != 0)
		json_object_set_new(v, "decision_given", json_string(f->decision));
	char sbuf[600];
	const char *summary = f->summary;
	if (!summary) {
		snprintf(sbuf, sizeof(sbuf), "%s%s%s: %s", decision, f->rule_id ? " by rule " : "",
			 f->rule_id ? f->rule_id : "", rmsg ? rmsg : "no message");
		summary = sbuf;
	}
	json_object_set_new(v, "summary", json_string(summary));
	json_t *why = json_array(), *x;
	size_t i;
	json_array_foreach(f->why, i, x)
	    json_array_append_new(why, why_entry(x, layer, f->rule_id));
	if (why && json_array_size(why) == 0)
		json_array_append_new(why, json_pack("{s:s?, s:s, s:s?}", "rule_id", f->rule_id,
						     "layer", layer, "reason", rmsg));
	json_object_set_new(v, "why", why ? why : json_array());
	json_object_set_new(v, "constrained", as_list(f->constrained));
	bool stops = strcmp(decision, "ALLOW") != 0 && strcmp(decision, "DEGRADE") != 0;
	json_object_set_new(v, "blocked",
			    stops ? json_pack("[s]", "the whole request: nothing was run")
				  : json_array());
	char e[200];
	const char *step = f->next_step && *f->next_step
			       ? f->next_step
			       : default_step(rtype[0], decision, trace_id, e, sizeof(e));
	json_object_set_new(v, "next_steps", json_pack("[s]", step));
	json_object_set_new(v, "confidence", json_real(f->confidence));
	json_object_set_new(v, "reply",
			    json_pack("{s:s, s:s, s:s}", "type", rtype, "code",
				      f->reply_code ? f->reply_code : "", "message",
				      rmsg ? rmsg : ""));
	json_object_set_new(v, "executed", json_boolean(!stops && rtype[0] == 'S'));
	const char *key;
	json_object_foreach(f->extra, key, x)
	{
		if (!json_object_get(v, key))
			json_object_set_new(v, key, json_deep_copy(x));
	}
	return v;
}

/* Terminal-safe text: control characters (ANSI escapes included) become '?'. */
static void md_text(struct cg_buf *b, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		char ch = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
		(void)cg_buf_add(b, &ch, 1);
	}
}

static void md_str(struct cg_buf *b, const char *s)
{
	(void)cg_buf_add(b, s, strlen(s));
}

static void md_value(struct cg_buf *b, const json_t *x)
{
	if (json_is_string(x)) {
		md_text(b, json_string_value(x));
		return;
	}
	char *s = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
	md_text(b, s ? s : "?");
	free(s);
}

static void md_list(struct cg_buf *b, const char *title, const json_t *a, const char *none)
{
	md_str(b, "\n## ");
	md_str(b, title);
	md_str(b, "\n\n");
	if (!json_array_size(a)) {
		md_str(b, "- ");
		md_str(b, none);
		md_str(b, "\n");
		return;
	}
	size_t i;
	json_t *x;
	json_array_foreach(a, i, x)
	{
		md_str(b, "- ");
		md_value(b, x);
		md_str(b, "\n");
	}
}

char *cg_verdict_render_md(const json_t *vj)
{
	const json_t *v = vj;
	struct cg_buf b;
	cg_buf_init(&b, 1u << 20);
	const json_t *r = json_object_get(v, "reply");
	md_str(&b, "# Verdict: ");
	md_text(&b, json_string_value(json_object_get(v, "decision")));
	md_str(&b, "\n\nTrace:      ");
	md_text(&b, json_string_value(json_object_get(v, "trace_id")));
	md_str(&b, "\nSummary:    ");
	md_text(&b, json_string_value(json_object_get(v, "summary")));
	md_str(&b, "\nReply:      ");
	md_text(&b, json_string_value(json_object_get(r, "type")));
	md_str(&b, " ");
	md_text(&b, json_string_value(json_object_get(r, "code")));
	md_str(&b, " - ");
	md_text(&b, json_string_value(json_object_get(r, "message")));
	char conf[64];
	snprintf(conf, sizeof(conf), "\nConfidence: %.2f\nExecuted:   %s\n",
		 json_number_value(json_object_get(v, "confidence")),
		 json_is_true(json_object_get(v, "executed")) ? "yes" : "no");
	md_str(&b, conf);
	if (json_string_value(json_object_get(v, "status"))) {
		md_str(&b, "Status:     ");
		md_text(&b, json_string_value(json_object_get(v, "status")));
		md_str(&b, "\n");
	}
	md_str(&b, "\n## Why\n\n");
	size_t i;
	json_t *w;
	json_array_foreach(json_object_get(v, "why"), i, w)
	{
		md_str(&b, "- [");
		const char *rung = json_string_value(json_object_get(w, "rung"));
		if (rung) {
			md_text(&b, rung);
			md_str(&b, " ");
			md_text(&b, json_string_value(json_object_get(w, "decision")));
			md_str(&b, ", ");
		}
		md_str(&b, "rule ");
		json_t *rid = json_object_get(w, "rule_id");
		md_text(&b, json_is_string(rid) && json_string_length(rid) ? json_string_value(rid)
									   : "-");
		md_str(&b, ", layer ");
		md_text(&b, json_string_value(json_object_get(w, "layer")));
		if (json_is_string(json_object_get(w, "code"))) {
			md_str(&b, ", ");
			md_text(&b, json_string_value(json_object_get(w, "code")));
		}
		md_str(&b, "] ");
		json_t *rs = json_object_get(w, "reason");
		if (!rs)
			rs = json_object_get(w, "why");
		if (rs && !json_is_null(rs))
			md_value(&b, rs);
		md_str(&b, "\n");
	}
	md_list(&b, "Constrained", json_object_get(v, "constrained"), "nothing");
	md_list(&b, "Blocked", json_object_get(v, "blocked"), "nothing");
	md_list(&b, "Next steps", json_object_get(v, "next_steps"), "none");
	(void)cg_buf_add(&b, "", 1);
	if (!b.p || b.truncated) {
		cg_buf_free(&b);
		return NULL;
	}
	return (char *)b.p;
}

json_t *cg_verdict_incomplete(const char *decision, const char *why, const char *trace_id)
{
	struct cg_verdict_facts f = {
		.decision = decision,
		.summary =
		    "This trace was cut short (the daemon stopped before it was sealed); its "
		    "events up to that moment are intact. Whether its command started is in "
		    "events.ndjson.",
		.reply_type = 'E',
		.reply_code = "",
		.layer = CG_LAYER_MCP,
		.message = why,
		.confidence = 1.0,
	};
	json_t *v = cg_verdict_render(&f, trace_id);
	if (v)
		json_object_set_new(v, "status", json_string("incomplete"));
	return v;
}
