/* SPDX-License-Identifier: MIT */
/*
 * reply — the registry compiled from replies.def, and the reply value.
 *
 * The registry is checked by the compiler, so an illegal entry does not
 * build:
 *  - a duplicate code is a duplicate enumerator CG_CODE_<L>_<A>_<T>_<NNN>;
 *  - a duplicate key is a duplicate enumerator CG_R_<KEY> (reply.h);
 *  - an area outside CG_AREA_LIST is an undeclared CG_AREA_<A>;
 *  - a layer outside WA/EN/CT/MCP is an undeclared CG_LAYER_<L>;
 *  - a type the layer may not produce fails a _Static_assert;
 *  - a status that does not fit the type fails a _Static_assert.
 * The NNN shape (exactly three digits, not 000) is checked by replygen,
 * which runs as part of the build and writes docs/replies.md.
 */
#include "reply.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Duplicate codes: each code becomes an enumerator, so a repeat won't compile. */
enum cg_code_uniqueness {
#define CG_REPLY(L, A, T, N, ST, KEY, TPL) CG_CODE_##L##_##A##_##T##_##N,
#include "replies.def"
#undef CG_REPLY
	CG_CODE__COUNT
};

/* The ownership rule of seed 001: who may say what. */
#define LAYER_MAY(L, T)                                                                            \
	(!((CG_LAYER_##L != CG_LAYER_EN) && (CG_RTYPE_##T == CG_RTYPE_D)) &&                       \
	 !((CG_LAYER_##L == CG_LAYER_EN) && (CG_RTYPE_##T == CG_RTYPE_I)))
#define STATUS_FITS(T, ST)                                                                         \
	((CG_RTYPE_##T == CG_RTYPE_S && CG_STATUS_##ST == CG_STATUS_OK) ||                         \
	 (CG_RTYPE_##T == CG_RTYPE_I && CG_STATUS_##ST == CG_STATUS_ERROR) ||                      \
	 (CG_RTYPE_##T == CG_RTYPE_D &&                                                            \
	  (CG_STATUS_##ST == CG_STATUS_DENIED || CG_STATUS_##ST == CG_STATUS_TIMEOUT)) ||          \
	 (CG_RTYPE_##T == CG_RTYPE_E &&                                                            \
	  (CG_STATUS_##ST == CG_STATUS_ERROR || CG_STATUS_##ST == CG_STATUS_TIMEOUT)))

#define CG_REPLY(L, A, T, N, ST, KEY, TPL)                                                         \
	_Static_assert(LAYER_MAY(L, T),                                                            \
		       #L "-" #A "-" #T "-" #N ": layer " #L " may not reply " #T);                \
	_Static_assert(STATUS_FITS(T, ST),                                                         \
		       #L "-" #A "-" #T "-" #N ": status " #ST " does not fit type " #T);
#include "replies.def"
#undef CG_REPLY

const struct cg_reply_def cg_reply_registry[CG_R__COUNT] = {
#define CG_REPLY(L, A, T, N, ST, KEY, TPL)                                                         \
	[CG_R_##KEY] = { CG_R_##KEY,   CG_LAYER_##L,   CG_AREA_##A,                                \
			 CG_RTYPE_##T, CG_STATUS_##ST, #L "-" #A "-" #T "-" #N,                    \
			 #N,	       #KEY,	       TPL },
#include "replies.def"
#undef CG_REPLY
};

const char *cg_layer_name(enum cg_layer layer)
{
	static const char *const names[] = { "WA", "EN", "CT", "MCP" };
	return (unsigned)layer < 4 ? names[layer] : "?";
}

const char *cg_area_name(enum cg_area area)
{
	static const char *const names[] = {
#define CG_AREA_NAME(a) #a,
		CG_AREA_LIST(CG_AREA_NAME)
#undef CG_AREA_NAME
	};
	return (unsigned)area < CG_AREA__COUNT ? names[area] : "?";
}

char cg_rtype_char(enum cg_rtype type)
{
	return (unsigned)type < 4 ? "SIDE"[type] : '?';
}

const char *cg_status_name(enum cg_status status)
{
	static const char *const names[] = { "ok", "denied", "timeout", "error" };
	return (unsigned)status < 4 ? names[status] : "error";
}

/*
 * The reply handed out when memory runs out. It is static so that building it
 * cannot fail; cg_reply_free() recognises and never frees it.
 */
static struct cg_reply oom_reply = { .id = CG_R_OUT_OF_MEMORY };

struct cg_reply *cg_reply_build_params(enum cg_reply_id id, json_t *params)
{
	if ((unsigned)id >= CG_R__COUNT)
		id = CG_R_SYS_CRASH;
	struct cg_reply *r = calloc(1, sizeof(*r));
	if (!params)
		params = json_object();
	if (!r || !params || !json_is_object(params)) {
		free(r);
		json_decref(params);
		return &oom_reply;
	}
	r->id = id;
	r->params = params;
	return r;
}

struct cg_reply *cg_reply_build(enum cg_reply_id id, const char *fmt, ...)
{
	json_t *params = NULL;
	if (fmt) {
		json_error_t jerr;
		va_list ap;
		va_start(ap, fmt);
		params = json_vpack_ex(&jerr, 0, fmt, ap);
		va_end(ap);
		if (!params)
			return &oom_reply;
	}
	return cg_reply_build_params(id, params);
}

void cg_reply_set_data(struct cg_reply *r, json_t *data)
{
	if (!r || r == &oom_reply) {
		json_decref(data);
		return;
	}
	json_decref(r->data);
	r->data = data;
}

void cg_reply_set_trace(struct cg_reply *r, const char *trace_id)
{
	if (!r || !trace_id)
		return;
	/* The static OOM reply may carry a trace id too; it is overwritten per use. */
	snprintf(r->trace_id, sizeof(r->trace_id), "%s", trace_id);
}

void cg_reply_free(struct cg_reply *r)
{
	if (!r || r == &oom_reply)
		return;
	json_decref(r->params);
	json_decref(r->data);
	free(r);
}

/* A rendered message is capped (documented truncation): a hostile param stays bounded. */
#define MESSAGE_CAP (64 * 1024 - 1)

/* Append to the message; an allocation failure is remembered in *failed. */
static void sb_add(struct cg_buf *b, const char *s, size_t n, bool *failed)
{
	if (cg_buf_add(b, s, n) != 0)
		*failed = true;
}

static void sb_add_value(struct cg_buf *b, const json_t *v, bool *failed)
{
	char num[64];
	switch (json_typeof(v)) {
	case JSON_STRING:
		sb_add(b, json_string_value(v), json_string_length(v), failed);
		break;
	case JSON_INTEGER:
		snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		sb_add(b, num, strlen(num), failed);
		break;
	case JSON_REAL:
		snprintf(num, sizeof(num), "%g", json_real_value(v));
		sb_add(b, num, strlen(num), failed);
		break;
	case JSON_TRUE:
		sb_add(b, "true", 4, failed);
		break;
	case JSON_FALSE:
		sb_add(b, "false", 5, failed);
		break;
	default: {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		if (s) {
			sb_add(b, s, strlen(s), failed);
			free(s);
		}
	}
	}
}

char *cg_reply_message(const struct cg_reply *r)
{
	const char *t = cg_reply_registry[r->id].template;
	struct cg_buf b;
	bool failed = false;
	cg_buf_init(&b, MESSAGE_CAP);
	while (*t) {
		const char *open = strchr(t, '{');
		const char *close = open ? strchr(open, '}') : NULL;
		if (!open || !close) {
			sb_add(&b, t, strlen(t), &failed);
			break;
		}
		sb_add(&b, t, (size_t)(open - t), &failed);
		char name[64];
		size_t n = (size_t)(close - open - 1);
		const json_t *v = NULL;
		bool ordinal = false; /* {stage+1}: a 0-based index, counted from 1 for people */
		if (n < sizeof(name)) {
			memcpy(name, open + 1, n);
			name[n] = '\0';
			ordinal = n > 2 && strcmp(name + n - 2, "+1") == 0;
			if (ordinal)
				name[n - 2] = '\0';
			v = json_object_get(r->params, name);
		}
		/* The trace id is known only late; templates may name it as a param. */
		if (v && ordinal && json_is_integer(v) && json_integer_value(v) >= 0 &&
		    json_integer_value(v) < LLONG_MAX) {
			char num[32];
			snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
				 json_integer_value(v) + 1);
			sb_add(&b, num, strlen(num), &failed);
		} else if (v && !ordinal)
			sb_add_value(&b, v, &failed);
		else if (n < sizeof(name) && strcmp(name, "trace_id") == 0 && r->trace_id[0])
			sb_add(&b, r->trace_id, strlen(r->trace_id), &failed);
		else
			sb_add(&b, open, (size_t)(close - open + 1), &failed);
		t = close + 1;
	}
	if (failed) {
		cg_buf_free(&b);
		return NULL;
	}
	return cg_buf_cstr(&b);
}

json_t *cg_reply_to_json(const struct cg_reply *r)
{
	const struct cg_reply_def *d = &cg_reply_registry[r->id];
	char type[2] = { cg_rtype_char(d->type), '\0' };
	char *msg = cg_reply_message(r);
	json_t *o = json_object();
	if (!o) {
		free(msg);
		return NULL;
	}
	int rc = 0;
	rc |= json_object_set_new(o, "type", json_string(type));
	rc |= json_object_set_new(o, "code", json_string(d->code));
	rc |= json_object_set_new(o, "message_key", json_string(d->key));
	rc |= json_object_set_new(o, "message", json_string(msg ? msg : d->template));
	rc |= json_object_set_new(o, "params", r->params ? json_incref(r->params) : json_object());
	if (r->data)
		rc |= json_object_set_new(o, "data", json_incref(r->data));
	rc |= json_object_set_new(o, "trace_id", json_string(r->trace_id));
	free(msg);
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}

const struct cg_reply_def *cg_reply_find_code(const char *code)
{
	if (!code)
		return NULL;
	for (size_t i = 0; i < CG_R__COUNT; i++)
		if (strcmp(cg_reply_registry[i].code, code) == 0)
			return &cg_reply_registry[i];
	return NULL;
}

const char *cg_errno_name(int err)
{
	const char *name = strerrorname_np(err);
	return name ? name : "EUNKNOWN";
}
