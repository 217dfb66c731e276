/* SPDX-License-Identifier: MIT */
/*
 * reply — the canonical reply value (seed 001) and its registry.
 *
 * Every answer that crosses a boundary is a reply: a type (S/I/D/E), a
 * registry code LAYER-AREA-TYPE-NNN, a message key, named params, optional
 * machine-readable data and a trace id. Callers branch on type and code,
 * never on message text.
 *
 * Invariants:
 *  - A reply MUST carry a code from replies.def; there is no way to build
 *    one from a free-form string.
 *  - The layer/type ownership rule (WA/CT/MCP never D, EN never I) MUST hold
 *    for every entry; the build fails otherwise (see reply.c).
 *  - cg_reply_* functions MUST NOT abort on bad input; allocation failure
 *    yields the static out-of-memory reply, never NULL.
 */
#ifndef CG_REPLY_H
#define CG_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

/* The closed set of areas (seed 001 section 3.2, extended by registry update). */
#define CG_AREA_LIST(X)                                                                            \
	X(SYS)                                                                                     \
	X(RES)                                                                                     \
	X(VIS)                                                                                     \
	X(IO)                                                                                      \
	X(READ)                                                                                    \
	X(WRITE)                                                                                   \
	X(EXEC)                                                                                    \
	X(DB)                                                                                      \
	X(PARSE)                                                                                   \
	X(VAL)                                                                                     \
	X(GATE)                                                                                    \
	X(LOG)                                                                                     \
	X(CFG)                                                                                     \
	X(OPEN)                                                                                    \
	X(CLOSE)                                                                                   \
	X(APPR)                                                                                    \
	X(POL)                                                                                     \
	X(NET)                                                                                     \
	X(SCRN)                                                                                    \
	X(CONF)

enum cg_area {
#define CG_AREA_ENUM(a) CG_AREA_##a,
	CG_AREA_LIST(CG_AREA_ENUM)
#undef CG_AREA_ENUM
	    CG_AREA__COUNT
};

enum cg_layer { CG_LAYER_WA, CG_LAYER_EN, CG_LAYER_CT, CG_LAYER_MCP };
enum cg_rtype { CG_RTYPE_S, CG_RTYPE_I, CG_RTYPE_D, CG_RTYPE_E };
enum cg_status { CG_STATUS_OK, CG_STATUS_DENIED, CG_STATUS_TIMEOUT, CG_STATUS_ERROR };

/* One constant per registry entry: CG_R_<KEY>. */
enum cg_reply_id {
#define CG_REPLY(L, A, T, N, ST, KEY, TPL) CG_R_##KEY,
#include "replies.def"
#undef CG_REPLY
	CG_R__COUNT
};

/* A registry entry, as compiled in. */
struct cg_reply_def {
	enum cg_reply_id id;
	enum cg_layer layer;
	enum cg_area area;
	enum cg_rtype type;
	enum cg_status status;
	const char *code;     /* "LAYER-AREA-TYPE-NNN" */
	const char *nnn;      /* "001" */
	const char *key;      /* message key, e.g. "PATH_NOT_FOUND" */
	const char *template; /* message template with {named} params */
};

extern const struct cg_reply_def cg_reply_registry[CG_R__COUNT];

const char *cg_layer_name(enum cg_layer layer);
const char *cg_area_name(enum cg_area area);
char cg_rtype_char(enum cg_rtype type);
const char *cg_status_name(enum cg_status status);

/*
 * The reply value. Owned by whoever holds the pointer; free with
 * cg_reply_free(). params is always a JSON object; data may be NULL.
 */
struct cg_reply {
	enum cg_reply_id id;
	json_t *params;	   /* owned; object of named template parameters */
	json_t *data;	   /* owned; optional machine-readable payload, or NULL */
	char trace_id[40]; /* UUIDv4 text, or "" until set */
};

/*
 * The layer of each registry entry as a compile-time constant,
 * CG_R_<KEY>_LAYER, so that ownership can be checked where a code is used.
 */
enum cg_reply_layer_of {
#define CG_REPLY(L, A, T, N, ST, KEY, TPL) CG_R_##KEY##_LAYER = CG_LAYER_##L,
#include "replies.def"
#undef CG_REPLY
	CG_R__LAYER_UNUSED
};

/*
 * The layers the code being compiled may speak for, a bit per layer (WA 1,
 * EN 2, CT 4, MCP 8). The build sets it for every folder of src/ (see
 * src/meson.build); programs and tests, which may say anything, get all four.
 */
#ifndef CG_FOLDER_LAYERS
#define CG_FOLDER_LAYERS 0xFu
#endif

/*
 * CG_REPLY_OWNED(CG_R_KEY) is CG_R_KEY, but fails to compile where the
 * folder's layer may not construct that code: a world-adapter file cannot
 * emit an EN denial, an enforcement file cannot emit a WA "invalid". It
 * takes the constant's name (it pastes _LAYER onto it), so a run-time id
 * does not compile here: pass those through cg_reply_build().
 */
#define CG_REPLY_OWNED(ID)                                                                         \
	((void)sizeof(struct {                                                                     \
		 _Static_assert(CG_FOLDER_LAYERS & (1u << ID##_LAYER),                             \
				"this folder's layer may not construct " #ID);                     \
		 int ok_;                                                                          \
	 }),                                                                                       \
	 (ID))

/*
 * Build a reply. fmt/... follow jansson's json_pack() and must yield an
 * object (or fmt may be NULL for no params). Never returns NULL: on
 * allocation failure it returns a reply for CG_R_OUT_OF_MEMORY.
 * The caller frees with cg_reply_free().
 *
 * cg_reply_new(CG_R_KEY, …) is the form for code that decides which reply to
 * give: it checks ownership at compile time. cg_reply_build(id, …) takes an id
 * decided elsewhere (a verdict's reason, a table) and passes it on; lint
 * refuses it with a literal CG_R_ constant.
 */
struct cg_reply *cg_reply_build(enum cg_reply_id id, const char *fmt, ...);
#define cg_reply_new(ID, ...) cg_reply_build(CG_REPLY_OWNED(ID), __VA_ARGS__)

/* Same, taking ownership of an already built params object (may be NULL). */
struct cg_reply *cg_reply_build_params(enum cg_reply_id id, json_t *params);
#define cg_reply_new_params(ID, P) cg_reply_build_params(CG_REPLY_OWNED(ID), P)

/* Attach (and take ownership of) a data object, replacing any previous one. */
void cg_reply_set_data(struct cg_reply *r, json_t *data);

/* Set the trace id (copied; truncated to the field size). */
void cg_reply_set_trace(struct cg_reply *r, const char *trace_id);

void cg_reply_free(struct cg_reply *r);

static inline const struct cg_reply_def *cg_reply_def_of(const struct cg_reply *r)
{
	return &cg_reply_registry[r->id];
}

/*
 * Render the message template with the reply's params. Unknown params render
 * as "{name}". Returns a malloc'd string (caller frees) or NULL on OOM.
 */
char *cg_reply_message(const struct cg_reply *r);

/*
 * The `reply` object of PROTOCOL.md: type, code, message_key, message,
 * params, data (only when present), trace_id. New reference; NULL on OOM.
 */
json_t *cg_reply_to_json(const struct cg_reply *r);

/* Look up a registry entry by its code string; NULL when unknown. */
const struct cg_reply_def *cg_reply_find_code(const char *code);

/* errno as its symbolic name ("ENOENT"), for reply params; never NULL. */
const char *cg_errno_name(int err);

#endif
