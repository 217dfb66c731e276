/* SPDX-License-Identifier: MIT */
/*
 * journal — the evidence journal's format: the line parser, the chain and
 * structure checks, checkpoint lines, the Ed25519 evidence key and a small
 * string map. Shared by the writer (evidence.c) and the verifier (replay.c),
 * so that what the daemon checks at seal time and what `callgate replay`
 * checks later are the same code.
 *
 * Invariants:
 *  - Every byte of a line is treated as hostile: lengths are bounded before
 *    copying, the hash is recomputed over the bytes as found, and the parser
 *    MUST NOT allocate in proportion to anything but the line it was given.
 *  - A check MUST report each failure by its documented name (diff.json);
 *    one failure never hides another of a different kind.
 *  - The private key file MUST be created 0600 (O_EXCL, never widened later).
 */
#include "journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "evidence.h"
#include "key.h"
#include "util.h"

static const char hexd[] = "0123456789abcdef";

const char *cg_journal_genesis(void)
{
	/* Computed once; a constant string keeps it thread-safe without locks. */
	static char g[65];
	static int done;
	if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
		char tmp[65];
		cg_sha256_hex(CG_GENESIS_TEXT, strlen(CG_GENESIS_TEXT), tmp);
		memcpy(g, tmp, sizeof(g));
		__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
	}
	return g;
}

bool cg_trace_id_valid(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n > CG_TRACE_ID_MAX || id[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static const char *const type_names[] = {
#define CG_EVENT_NAME(e, s) s,
	CG_EVENT_LIST(CG_EVENT_NAME)
#undef CG_EVENT_NAME
};

int cg_event_type_from_name(const char *name, size_t len)
{
	for (int i = 0; i < CG_EV__COUNT; i++)
		if (strlen(type_names[i]) == len && memcmp(type_names[i], name, len) == 0)
			return i;
	return -1;
}

/* ---- a JSON validator that allocates nothing (payloads are checked at replay speed) ---- */

/*
 * The one place the tree does not use jansson for JSON, and why: replay and
 * start-up check every journal line, and only need to know that a payload is
 * exactly one well-formed object (the line's members are matched byte by byte
 * above it, the hash covers the bytes). json_loadb builds a tree per line, a
 * malloc per value, and ran at under half of sha256sum's speed; this checker
 * allocates nothing and runs at memory speed. Where a payload's content is
 * needed (verdicts, the log), it is parsed with jansson.
 */

/* Objects whose keys are compared for repeats: this deep, this many keys each. */
#define JV_KEYS_DEPTH 16
#define JV_KEYS_MAX   48

/* The keys read so far in each open object, when repeats are looked for. */
struct jv_keys {
	const char *at[JV_KEYS_DEPTH][JV_KEYS_MAX];
	size_t len[JV_KEYS_DEPTH][JV_KEYS_MAX];
	size_t n[JV_KEYS_DEPTH];
	bool dup;    /* a key repeated within one object */
	bool unsure; /* a key spelled with an escape, or past what is tracked */
};

struct jv {
	const char *p, *end;
	int depth;
	struct jv_keys *keys; /* NULL: no key check */
};

/*
 * The key just read (its quotes at k and j->p - 1) against its object's
 * earlier ones. Raw bytes compare exactly when no key has an escape, so an
 * escaped key (the daemon writes none) is left to jansson, as is an object
 * deeper or wider than tracked.
 */
static void jv_key(struct jv *j, const char *k)
{
	struct jv_keys *t = j->keys;
	size_t len = (size_t)(j->p - 1 - (k + 1)), d = (size_t)j->depth - 1;
	if (t->unsure || d >= JV_KEYS_DEPTH || t->n[d] == JV_KEYS_MAX || memchr(k + 1, '\\', len)) {
		t->unsure = true;
		return;
	}
	for (size_t i = 0; i < t->n[d]; i++)
		if (t->len[d][i] == len && memcmp(t->at[d][i], k + 1, len) == 0)
			t->dup = true;
	t->at[d][t->n[d]] = k + 1;
	t->len[d][t->n[d]++] = len;
}

static void jv_ws(struct jv *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool jv_value(struct jv *j);

static bool jv_string(struct jv *j)
{
	if (j->p >= j->end || *j->p != '"')
		return false;
	j->p++;
	while (j->p < j->end) {
		unsigned char c = (unsigned char)*j->p++;
		if (c == '"')
			return true;
		if (c < 0x20)
			return false;
		if (c >= 0x80 && j->keys)
			j->keys->unsure = true; /* UTF-8 validity is jansson's to judge */
		if (c == '\\') {
			if (j->p >= j->end)
				return false;
			c = (unsigned char)*j->p++;
			if (c == 'u' && j->keys)
				j->keys->unsure = true; /* \u0000 and lone surrogates too */
			if (c == 'u') {
				for (int k = 0; k < 4; k++, j->p++)
					if (j->p >= j->end || !strchr(hexd, (*j->p | 0x20)) ||
					    *j->p == '\0')
						return false;
			} else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
				return false;
			}
		}
	}
	return false;
}

static bool jv_number(struct jv *j)
{
	const char *s = j->p;
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end)
		return false;
	if (*j->p == '0') {
		j->p++;
	} else if (*j->p >= '1' && *j->p <= '9') {
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	} else {
		return false;
	}
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		const char *d = j->p;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
		if (j->p == d)
			return false;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		const char *d = j->p;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
		if (j->p == d)
			return false;
		if (j->keys)
			j->keys->unsure = true; /* a real that may overflow */
	}
	if (j->keys && j->p - s > 18)
		j->keys->unsure = true; /* an integer that may not fit */
	return j->p > s;
}

static bool jv_lit(struct jv *j, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
		return false;
	j->p += n;
	return true;
}

static bool jv_container(struct jv *j, char close, bool object)
{
	if (++j->depth > 256)
		return false;
	if (object && j->keys && j->depth <= JV_KEYS_DEPTH)
		j->keys->n[j->depth - 1] = 0;
	j->p++;
	jv_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		j->depth--;
		return true;
	}
	for (;;) {
		jv_ws(j);
		if (object) {
			const char *k = j->p;
			if (!jv_string(j))
				return false;
			if (j->keys)
				jv_key(j, k);
			jv_ws(j);
			if (j->p >= j->end || *j->p != ':')
				return false;
			j->p++;
			jv_ws(j);
		}
		if (!jv_value(j))
			return false;
		jv_ws(j);
		if (j->p >= j->end)
			return false;
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == close) {
			j->p++;
			j->depth--;
			return true;
		}
		return false;
	}
}

static bool jv_value(struct jv *j)
{
	if (j->p >= j->end)
		return false;
	switch (*j->p) {
	case '{':
		return jv_container(j, '}', true);
	case '[':
		return jv_container(j, ']', false);
	case '"':
		return jv_string(j);
	case 't':
		return jv_lit(j, "true");
	case 'f':
		return jv_lit(j, "false");
	case 'n':
		return jv_lit(j, "null");
	default:
		return jv_number(j);
	}
}

static bool jv_object(const char *p, size_t n, struct jv_keys *keys)
{
	struct jv j = { p, p + n, 0, keys };
	if (n == 0 || *p != '{')
		return false;
	if (!jv_value(&j))
		return false;
	jv_ws(&j);
	return j.p == j.end;
}

bool cg_json_object_valid(const char *p, size_t n)
{
	return jv_object(p, n, NULL);
}

/*
 * The value of member key of the object at p (checked by jv_object, with
 * no repeated or escaped key: the first match is the only one): its first
 * byte, *vend past its last. NULL when absent.
 */
static const char *jv_get(const char *p, const char *end, const char *key, const char **vend)
{
	struct jv j = { p + 1, end, 0, NULL };
	size_t kl = strlen(key);
	for (;;) {
		jv_ws(&j);
		const char *k = j.p;
		if (!jv_string(&j))
			return NULL; /* the closing brace: absent */
		bool hit = (size_t)(j.p - k) == kl + 2 && memcmp(k + 1, key, kl) == 0;
		jv_ws(&j);
		j.p++; /* the colon */
		jv_ws(&j);
		const char *v = j.p;
		if (!jv_value(&j))
			return NULL;
		if (hit) {
			*vend = j.p;
			return v;
		}
		jv_ws(&j);
		if (j.p >= j.end || *j.p != ',')
			return NULL;
		j.p++;
	}
}

/* Member key as a string without escapes into out (cap incl. NUL): 1; 0 absent or not a string; -1 escaped or too long. */
static int jv_get_plain(const char *p, const char *end, const char *key, char *out, size_t cap)
{
	const char *ve = NULL, *v = jv_get(p, end, key, &ve);
	if (!v || *v != '"')
		return 0;
	size_t n = (size_t)(ve - v) - 2;
	if (memchr(v + 1, '\\', n) || n + 1 > cap)
		return -1;
	memcpy(out, v + 1, n);
	out[n] = '\0';
	return 1;
}

/* Member key as an integer (jansson's: no fraction, no exponent): 1; 0 absent or not one. */
static int jv_get_int(const char *p, const char *end, const char *key, long long *out)
{
	const char *ve = NULL, *v = jv_get(p, end, key, &ve);
	if (!v || !(*v == '-' || (*v >= '0' && *v <= '9')) || memchr(v, '.', (size_t)(ve - v)) ||
	    memchr(v, 'e', (size_t)(ve - v)) || memchr(v, 'E', (size_t)(ve - v)))
		return 0;
	char num[24];
	size_t n = (size_t)(ve - v);
	if (n >= sizeof(num))
		return 0; /* not reached: a longer number made the key check unsure */
	memcpy(num, v, n);
	num[n] = '\0';
	*out = strtoll(num, NULL, 10);
	return 1;
}

/* ---- the line parser ----------------------------------------------------- */

struct cur {
	const char *p, *end;
};

static bool expect(struct cur *c, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return false;
	c->p += n;
	return true;
}

static bool take_u64(struct cur *c, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = c->p;
	if (c->p < c->end && *c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
		return false; /* no leading zeros: one spelling per number */
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*c->p - '0');
		c->p++;
	}
	*out = v;
	return c->p > s && c->p - s <= 19;
}

/* A string without escapes into out (cap bytes incl. NUL); the quotes are consumed. */
static bool take_plain(struct cur *c, char *out, size_t cap)
{
	if (!expect(c, "\""))
		return false;
	size_t n = 0;
	while (c->p < c->end && *c->p != '"') {
		unsigned char ch = (unsigned char)*c->p;
		if (ch < 0x20 || ch == '\\' || ch >= 0x7f || n + 1 >= cap)
			return false;
		out[n++] = (char)ch;
		c->p++;
	}
	out[n] = '\0';
	return expect(c, "\"");
}

static bool is_hex64(const char *s)
{
	/* Lower-case hex only: one spelling per hash. */
	static const unsigned char ok[256] = {
		['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
		['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1,
		['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
	};
	/* Length first: a short string must not be read past its NUL (found by fuzz_evidence). */
	if (!s || strnlen(s, 65) != 64)
		return false;
	unsigned bad = 0;
	for (int i = 0; i < 64; i++)
		bad |= ok[(unsigned char)s[i]] ^ 1u;
	return bad == 0;
}

static bool fields_needed(int type)
{
	return type == CG_EV_DECISION || type == CG_EV_SEAL || type == CG_EV_APPROVAL_ANS ||
	       type == CG_EV_REFUSAL;
}

/*
 * parse_payload_fields read without building a tree, from a payload that
 * jv_object found to be what jansson reads alike: no key repeated in any
 * object, none escaped, no \u escape, no byte above 0x7f, no number that
 * might overflow. 0, -1 (the same answers as jansson's), or 1 when a value
 * read here is escaped or too long (jansson reads it instead).
 */
static int payload_fields_fast(struct cg_evline *o, const char *p, size_t n)
{
	const char *end = p + n;
	if (o->type == CG_EV_APPROVAL_ANS) {
		char out[32];
		long long have = 0, need = 0;
		int ro = jv_get_plain(p, end, "outcome", out, sizeof(out));
		int rh = jv_get_int(p, end, "have", &have), rn = jv_get_int(p, end, "need", &need);
		if (ro < 0)
			return 1;
		o->lets_run =
		    ro == 1 && (strcmp(out, "grant") == 0 || (strcmp(out, "approved") == 0 &&
							      rh == 1 && rn == 1 && have >= need));
		return 0;
	}
	if (o->type == CG_EV_DECISION || o->type == CG_EV_REFUSAL) {
		const char *dj = p, *dend = end;
		if (o->type == CG_EV_REFUSAL)
			dj = jv_get(p, end, "decision", &dend);
		char d[sizeof(o->decision)];
		int rd = dj && *dj == '{' ? jv_get_plain(dj, dend, "decision", d, sizeof(d)) : 0;
		if (rd < 0)
			return 1;
		if (dj && rd != 1)
			return -1;
		if (rd == 1)
			memcpy(o->decision, d, strlen(d) + 1);
		if (o->type == CG_EV_DECISION)
			return 0;
		const char *re = NULL, *r = jv_get(p, end, "reply", &re);
		return r && *r == '{' ? 0 : -1; /* a refusal says what was answered */
	}
	long long ev = 0;
	char h[65];
	int re = jv_get_int(p, end, "events", &ev), rh = jv_get_plain(p, end, "head", h, sizeof(h));
	if (rh < 0)
		return 1;
	if (re != 1 || ev < 0 || rh != 1 || !is_hex64(h))
		return -1;
	o->seal_events = (uint64_t)ev;
	memcpy(o->seal_head, h, 65);
	return 0;
}

/* Decision, refusal and seal payloads carry what the structure check (and log) need. */
static int parse_payload_fields(struct cg_evline *o, const char *p, size_t n)
{
	if (!fields_needed(o->type))
		return 0;
	json_t *pl = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
	if (!pl)
		return -1;
	int rc = 0;
	if (o->type == CG_EV_APPROVAL_ANS) {
		/*
		 * An UNKNOWN call may run only after a human let it: a grant's use,
		 * or the approval that completed the count of distinct approvers.
		 */
		const char *out = json_string_value(json_object_get(pl, "outcome"));
		json_t *have = json_object_get(pl, "have"), *need = json_object_get(pl, "need");
		o->lets_run = out && (strcmp(out, "grant") == 0 ||
				      (strcmp(out, "approved") == 0 && json_is_integer(have) &&
				       json_is_integer(need) &&
				       json_integer_value(have) >= json_integer_value(need)));
	} else if (o->type == CG_EV_DECISION || o->type == CG_EV_REFUSAL) {
		/* A refusal before the chain has no decision: it is left empty. */
		const json_t *dj = o->type == CG_EV_DECISION ? pl : json_object_get(pl, "decision");
		const char *d = json_string_value(json_object_get(dj, "decision"));
		if ((dj || o->type == CG_EV_DECISION) && (!d || strlen(d) >= sizeof(o->decision)))
			rc = -1;
		else if (d)
			memcpy(o->decision, d, strlen(d) + 1);
		if (o->type == CG_EV_REFUSAL && !json_is_object(json_object_get(pl, "reply")))
			rc = -1; /* a refusal says what was answered */
	} else {
		json_t *e = json_object_get(pl, "events");
		const char *h = json_string_value(json_object_get(pl, "head"));
		if (!json_is_integer(e) || json_integer_value(e) < 0 || !h || !is_hex64(h))
			rc = -1;
		else {
			o->seal_events = (uint64_t)json_integer_value(e);
			memcpy(o->seal_head, h, 65);
		}
	}
	json_decref(pl);
	return rc;
}

static int evline_parse(const char *line, size_t len, struct cg_evline *o, const char **check,
			char *why, size_t why_len, bool fields);

int cg_evline_parse(const char *line, size_t len, struct cg_evline *o, const char **check,
		    char *why, size_t why_len)
{
	return evline_parse(line, len, o, check, why, why_len, true);
}

int cg_evline_parse_chain(const char *line, size_t len, struct cg_evline *o, const char **check,
			  char *why, size_t why_len)
{
	return evline_parse(line, len, o, check, why, why_len, false);
}

static int evline_parse(const char *line, size_t len, struct cg_evline *o, const char **check,
			char *why, size_t why_len, bool fields)
{
	memset(o, 0, sizeof(*o));
	o->line = line;
	o->line_len = len;
	o->type = -1;
	*check = "schema";
	if (len == 0 || line[len - 1] != '\n') {
		*check = "truncated";
		snprintf(why, why_len, "the line does not end with a newline (%zu bytes)", len);
		return -1;
	}
	if (len > CG_LINE_MAX || len < CG_LINE_TAIL_LEN + 2) {
		snprintf(why, why_len, "line length %zu out of range", len);
		return -1;
	}
	const char *tail = line + len - CG_LINE_TAIL_LEN;
	if (memcmp(tail, ",\"hash\":\"", 9) != 0 || memcmp(line + len - 3, "\"}\n", 3) != 0) {
		snprintf(why, why_len, "the line does not end with ,\"hash\":\"<64 hex>\"}");
		return -1;
	}
	memcpy(o->hash, tail + 9, 64);
	o->hash[64] = '\0';
	if (!is_hex64(o->hash)) {
		snprintf(why, why_len, "hash is not 64 lower-case hex digits");
		return -1;
	}
	struct cur c = { line, tail };
	char type[32];
	if (!expect(&c, "{\"seq\":") || !take_u64(&c, &o->seq) || o->seq == 0 ||
	    !expect(&c, ",\"trace\":") || !take_plain(&c, o->trace, sizeof(o->trace)) ||
	    !cg_trace_id_valid(o->trace) || !expect(&c, ",\"tseq\":") || !take_u64(&c, &o->tseq) ||
	    o->tseq == 0 || !expect(&c, ",\"type\":") || !take_plain(&c, type, sizeof(type)) ||
	    !expect(&c, ",\"ts\":") || !take_plain(&c, o->ts, sizeof(o->ts)) ||
	    !expect(&c, ",\"prev\":") || !take_plain(&c, o->prev, sizeof(o->prev)) ||
	    !is_hex64(o->prev) || !expect(&c, ",\"tprev\":") ||
	    !take_plain(&c, o->tprev, sizeof(o->tprev)) || !is_hex64(o->tprev) ||
	    !expect(&c, ",\"payload\":")) {
		snprintf(why, why_len, "members missing, out of order or malformed near byte %zu",
			 (size_t)(c.p - line));
		return -1;
	}
	o->payload_off = (size_t)(c.p - line);
	o->payload_len = (size_t)(tail - c.p);
	int type_id = cg_event_type_from_name(type, strlen(type));
	/* The payload's fields are read without jansson when it would read them alike. */
	struct jv_keys keys;
	bool with_keys = fields && fields_needed(type_id);
	if (with_keys) {
		keys.dup = false;
		keys.unsure = false;
	}
	if (!jv_object(c.p, o->payload_len, with_keys ? &keys : NULL)) {
		snprintf(why, why_len, "payload is not one JSON object");
		return -1;
	}
	memcpy(o->type_name, type, sizeof(type));
	o->type = type_id;
	if (o->type < 0) {
		*check = "type_unknown";
		snprintf(why, why_len, "event type '%s' is not in the closed set", type);
		return -1;
	}
	int fast = !with_keys	 ? 0
		   : keys.dup	 ? -1
		   : keys.unsure ? 1
				 : payload_fields_fast(o, c.p, o->payload_len);
	if (fast == 1)
		fast = parse_payload_fields(o, c.p, o->payload_len);
	if (fast < 0) {
		snprintf(why, why_len, "%s payload lacks its required members", type);
		return -1;
	}
	char h[65];
	cg_sha256_hex(line, len - CG_LINE_TAIL_LEN, h);
	o->hash_ok = memcmp(h, o->hash, 64) == 0;
	return 0;
}

/* ---- diffs and checks ----------------------------------------------------- */

void cg_diff_add(json_t *diff, const char *check, const char *file, size_t line, uint64_t seq,
		 const char *expected, const char *found, const char *detail)
{
	json_t *d = json_object();
	if (!d)
		return;
	json_object_set_new(d, "check", json_string(check));
	if (file)
		json_object_set_new(d, "file", json_string(file));
	if (line)
		json_object_set_new(d, "line", json_integer((json_int_t)line));
	if (seq)
		json_object_set_new(d, "seq", json_integer((json_int_t)seq));
	if (expected)
		json_object_set_new(d, "expected", json_string(expected));
	if (found)
		json_object_set_new(d, "found", json_string(found));
	if (detail)
		json_object_set_new(d, "detail", json_string(detail));
	json_array_append_new(diff, d);
}

struct keyed {
	uint64_t key;
	size_t idx;
};

static int keyed_cmp(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

struct tlast {
	uint64_t tseq;
	char hash[65];
};

void cg_evlines_check_chain(const struct cg_evline *v, size_t n, bool journal, const char *file,
			    json_t *diff)
{
	if (n == 0)
		return;
	struct keyed *k = calloc(n, sizeof(*k));
	bool *skip = calloc(n, sizeof(*skip));
	const struct cg_evline **bykey = calloc(n, sizeof(*bykey));
	if (!k || !skip || !bykey) {
		cg_diff_add(diff, "internal", file, 0, 0, NULL, NULL, "out of memory");
		goto free_arrays;
	}
	for (size_t i = 0; i < n; i++) {
		k[i].key = journal ? v[i].seq : v[i].tseq;
		k[i].idx = i;
	}
	qsort(k, n, sizeof(*k), keyed_cmp);
	char a[32], b[32];
	/* Repeated keys: an exact copy is a duplicate; anything else was inserted. */
	size_t nu = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && k[i].key == k[i - 1].key) {
			const struct cg_evline *o = &v[k[i].idx], *first = bykey[nu - 1];
			bool same = o->line_len == first->line_len &&
				    memcmp(o->line, first->line, o->line_len) == 0;
			snprintf(a, sizeof(a), "%" PRIu64, k[i].key);
			cg_diff_add(diff, same ? "line_duplicated" : "line_inserted", file,
				    o->lineno, o->seq, NULL, a,
				    same ? "this line repeats an earlier line"
					 : "a second, different line claims this position");
			skip[k[i].idx] = true;
			continue;
		}
		bykey[nu++] = &v[k[i].idx];
	}
	/* Gaps in the keys: lines were deleted (a missing tail is the caller's "truncated"). */
	uint64_t want = 1;
	for (size_t i = 0; i < nu; i++) {
		uint64_t got = journal ? bykey[i]->seq : bykey[i]->tseq;
		if (got != want) {
			snprintf(a, sizeof(a), "%" PRIu64, want);
			snprintf(b, sizeof(b), "%" PRIu64, got);
			cg_diff_add(diff, "line_deleted", file, bykey[i]->lineno, bykey[i]->seq, a,
				    b,
				    journal ? "sequence numbers are not contiguous"
					    : "trace sequence numbers are not contiguous");
		}
		want = got + 1;
	}
	/* Order: in the file, each line's key must exceed every key before it. */
	uint64_t max = 0;
	for (size_t i = 0; i < n; i++) {
		if (skip[i])
			continue;
		uint64_t key = journal ? v[i].seq : v[i].tseq;
		if (key < max) {
			snprintf(a, sizeof(a), "> %" PRIu64, max);
			snprintf(b, sizeof(b), "%" PRIu64, key);
			cg_diff_add(diff, "line_reordered", file, v[i].lineno, v[i].seq, a, b,
				    "this line comes after a line that should follow it");
		} else {
			max = key;
		}
	}
	/* Hashes, then links to the predecessor by key (so a reorder is named once). */
	for (size_t i = 0; i < nu; i++) {
		const struct cg_evline *o = bykey[i];
		if (!o->hash_ok) {
			char h[65];
			cg_sha256_hex(o->line, o->line_len - CG_LINE_TAIL_LEN, h);
			cg_diff_add(diff, "hash", file, o->lineno, o->seq, h, o->hash,
				    "the line's bytes do not hash to its hash member");
		}
		uint64_t key = journal ? o->seq : o->tseq;
		const char *link = journal ? o->prev : o->tprev;
		const char *want_link = NULL;
		if (key == 1)
			want_link = cg_journal_genesis();
		else if (i > 0 && (journal ? bykey[i - 1]->seq : bykey[i - 1]->tseq) == key - 1)
			want_link = bykey[i - 1]->hash;
		if (want_link && strcmp(want_link, link) != 0)
			cg_diff_add(diff, "link", file, o->lineno, o->seq, want_link, link,
				    journal
					? "prev does not name the previous journal event"
					: "tprev does not name the previous event of the trace");
		if (!journal && strcmp(o->trace, v[0].trace) != 0)
			cg_diff_add(diff, "trace_mismatch", file, o->lineno, o->seq, v[0].trace,
				    o->trace, "an event of another trace");
	}
	/* Journal mode: every trace's own chain, in journal order. */
	if (journal) {
		struct cg_smap *m = cg_smap_new();
		if (!m) {
			cg_diff_add(diff, "internal", file, 0, 0, NULL, NULL, "out of memory");
			goto free_arrays;
		}
		for (size_t i = 0; i < nu; i++) {
			const struct cg_evline *o = bykey[i];
			struct tlast *t = cg_smap_get(m, o->trace);
			const char *want_h = t ? t->hash : cg_journal_genesis();
			uint64_t want_t = t ? t->tseq + 1 : 1;
			if (o->tseq != want_t || strcmp(o->tprev, want_h) != 0) {
				snprintf(a, sizeof(a), "%" PRIu64, want_t);
				snprintf(b, sizeof(b), "%" PRIu64, o->tseq);
				cg_diff_add(diff, "trace_link", file, o->lineno, o->seq, want_h,
					    o->tprev,
					    o->tseq != want_t ? "tseq does not follow the trace's "
								"previous event"
							      : "tprev does not name the trace's "
								"previous event");
			}
			if (!t) {
				t = calloc(1, sizeof(*t));
				if (!t || cg_smap_put(m, o->trace, t) < 0) {
					free(t);
					cg_diff_add(diff, "internal", file, 0, 0, NULL, NULL,
						    "out of memory");
					break;
				}
			}
			t->tseq = o->tseq;
			memcpy(t->hash, o->hash, 65);
		}
		cg_smap_free(m, free);
	}
free_arrays:
	free(bykey);
	free(skip);
	free(k);
}

static bool blocks(const char *d)
{
	return strcmp(d, "ALLOW") != 0 && strcmp(d, "DEGRADE") != 0;
}

/* UNKNOWN runs only once a human (or a grant) let it; BLOCK never runs. */
static bool may_run_unknown(const struct cg_evline *decision, bool human_ok)
{
	return human_ok && strcmp(decision->decision, "UNKNOWN") == 0;
}

bool cg_event_ends_trace(int type)
{
	return type == CG_EV_SEAL || type == CG_EV_INCOMPLETE || type == CG_EV_REFUSAL;
}

enum cg_trace_state cg_trace_check_structure(const struct cg_evline *v, size_t n, bool presealed,
					     const char *file, json_t *diff)
{
	if (n == 0) {
		cg_diff_add(diff, "structure", file, 0, 0, "request", "nothing",
			    "the trace has no events");
		return CG_TRACE_OPEN;
	}
	const struct cg_evline *decision = NULL;
	bool permit = false, exec = false, appr_req = false, human_ok = false;
	size_t verdicts = 0;
	int last = -1;
	enum cg_trace_state st = CG_TRACE_OPEN;
	if (v[0].type != CG_EV_REQUEST && v[0].type != CG_EV_REFUSAL)
		cg_diff_add(diff, "structure", file, v[0].lineno, v[0].seq, "request",
			    v[0].type_name, "a trace begins with its request (or is one refusal)");
	for (size_t i = 0; i < n; i++) {
		const struct cg_evline *o = &v[i];
		if (st != CG_TRACE_OPEN) {
			cg_diff_add(diff, "event_after_seal", file, o->lineno, o->seq, NULL,
				    o->type_name, "nothing may follow a seal or incomplete marker");
			continue;
		}
		switch (o->type) {
		case CG_EV_REQUEST:
			if (i > 0)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, NULL,
					    "request", "a second request in one trace");
			break;
		case CG_EV_DECISION:
			if (decision)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, NULL,
					    "decision", "a second decision in one trace");
			else
				decision = o;
			break;
		case CG_EV_APPROVAL_REQ:
			appr_req = true;
			break;
		case CG_EV_APPROVAL_ANS:
			/* A grant's use needs no request: it answers at decision time. */
			if (!appr_req &&
			    !(o->lets_run && strcmp(o->type_name, "approval.answered") == 0 &&
			      decision))
				cg_diff_add(diff, "structure", file, o->lineno, o->seq,
					    "approval.requested", "approval.answered",
					    "an answer to an approval nobody requested");
			if (o->lets_run && decision)
				human_ok = true;
			break;
		case CG_EV_PERMIT:
			if (!decision)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, "decision",
					    "permit", "a permit before any decision");
			else if (blocks(decision->decision) && !may_run_unknown(decision, human_ok))
				cg_diff_add(diff, "exec_despite_block", file, o->lineno, o->seq,
					    "no permit", decision->decision,
					    "critical: a permit after a decision that forbids "
					    "execution");
			permit = true;
			break;
		case CG_EV_EXEC_START:
			if (!permit)
				cg_diff_add(diff, "exec_without_permit", file, o->lineno, o->seq,
					    "permit", "exec.started",
					    "critical: execution without a preceding permit");
			else if (decision && blocks(decision->decision) &&
				 !may_run_unknown(decision, human_ok))
				cg_diff_add(diff, "exec_despite_block", file, o->lineno, o->seq,
					    "no execution", decision->decision,
					    "critical: execution after a decision that forbids it");
			exec = true;
			break;
		case CG_EV_EXEC_END:
			if (!exec)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq,
					    "exec.started", "exec.finished",
					    "an execution finished that never started");
			break;
		case CG_EV_VERDICT:
			if (++verdicts > 1)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, NULL,
					    "verdict", "a second verdict in one trace");
			break;
		case CG_EV_REPLAY:
			if (verdicts == 0)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, "verdict",
					    "replay", "a replay before the verdict");
			break;
		case CG_EV_SEAL:
			if (last != CG_EV_REPLAY)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, "replay",
					    last >= 0 ? type_names[last] : "nothing",
					    "a seal follows the trace's replay event");
			if (o->seal_events != o->tseq - 1 || strcmp(o->seal_head, o->tprev) != 0)
				cg_diff_add(diff, "seal_mismatch", file, o->lineno, o->seq,
					    o->tprev, o->seal_head,
					    "the seal's event count or head is not the trace's");
			st = CG_TRACE_SEALED;
			break;
		case CG_EV_INCOMPLETE:
			st = CG_TRACE_INCOMPLETE;
			break;
		case CG_EV_REFUSAL:
			/* Request, decision and verdict in one: nothing else in its trace. */
			if (i > 0)
				cg_diff_add(diff, "structure", file, o->lineno, o->seq, NULL,
					    "refusal",
					    "a refusal is a whole trace: it comes alone");
			verdicts++;
			st = CG_TRACE_SEALED;
			break;
		case CG_EV_RECOVERY:
		case CG_EV_STOPPED:
			cg_diff_add(diff, "structure", file, o->lineno, o->seq, NULL, o->type_name,
				    "recovery and stopped events belong to the journal trace");
			break;
		default:
			break;
		}
		if (verdicts > 0 && o->type != CG_EV_VERDICT && o->type != CG_EV_REPLAY &&
		    o->type != CG_EV_SEAL && o->type != CG_EV_INCOMPLETE &&
		    o->type != CG_EV_REFUSAL)
			cg_diff_add(diff, "structure", file, o->lineno, o->seq,
				    "replay, seal or incomplete", o->type_name,
				    "only replay and seal follow the verdict");
		last = o->type;
	}
	if (st == CG_TRACE_SEALED && verdicts == 0)
		cg_diff_add(diff, "structure", file, v[n - 1].lineno, v[n - 1].seq, "verdict",
			    "none", "a sealed trace has a verdict");
	if (presealed && verdicts == 0)
		cg_diff_add(diff, "structure", file, v[n - 1].lineno, v[n - 1].seq, "verdict",
			    "none", "the verdict event comes before the seal");
	if (!presealed && st == CG_TRACE_OPEN)
		cg_diff_add(diff, "not_sealed", file, v[n - 1].lineno, v[n - 1].seq, "seal",
			    v[n - 1].type_name, "the trace has no seal and no incomplete marker");
	return st;
}

/* ---- checkpoints ---------------------------------------------------------- */

int cg_ckpt_format_msg(char *buf, size_t cap, uint64_t seq, const char *head, const char *root,
		       const char *ts, const char *key_fp)
{
	int n = root ? snprintf(buf, cap,
				"{\"seq\":%" PRIu64
				",\"head\":\"%s\",\"root\":\"%s\",\"ts\":\"%s\",\"key\":\"%s\"",
				seq, head, root, ts, key_fp)
		     : snprintf(buf, cap,
				"{\"seq\":%" PRIu64 ",\"head\":\"%s\",\"ts\":\"%s\",\"key\":\"%s\"",
				seq, head, ts, key_fp);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int cg_ckpt_parse(const char *line, size_t len, struct cg_ckpt *out, char *why, size_t why_len)
{
	memset(out, 0, sizeof(*out));
	if (len < 2 || line[len - 1] != '\n' || len > 4096) {
		snprintf(why, why_len, "checkpoint line truncated or too long");
		return -1;
	}
	json_t *j = json_loadb(line, len - 1, JSON_REJECT_DUPLICATES, NULL);
	json_t *seq = json_object_get(j, "seq");
	const char *head = json_string_value(json_object_get(j, "head"));
	json_t *rootj = json_object_get(j, "root");
	const char *root = json_string_value(rootj);
	const char *ts = json_string_value(json_object_get(j, "ts"));
	const char *key = json_string_value(json_object_get(j, "key"));
	const char *sig = json_string_value(json_object_get(j, "sig"));
	json_t *nsj = json_object_get(j, "note_sig");
	const char *nsig = json_string_value(nsj);
	int rc = -1;
	if (!j || !json_is_integer(seq) || json_integer_value(seq) < 0 || !head ||
	    !is_hex64(head) || !ts || strlen(ts) >= sizeof(out->ts) || !key || !is_hex64(key) ||
	    !sig || (rootj && !is_hex64(root)) || (nsj && (!nsig || !root)) || strlen(sig) > 200 ||
	    (nsig && strlen(nsig) > 200)) {
		snprintf(why, why_len, "checkpoint members missing or malformed");
		goto free_json;
	}
	out->seq = (uint64_t)json_integer_value(seq);
	memcpy(out->head, head, 65);
	if (root)
		memcpy(out->root, root, 65);
	memcpy(out->key, key, 65);
	memcpy(out->ts, ts, strlen(ts) + 1);
	/* One spelling only: the line must be exactly what the writer makes of these members. */
	char canon[1024];
	int m = cg_ckpt_format_msg(canon, sizeof(canon), out->seq, head, root, ts, key);
	int cn = m < 0 ? -1
		       : snprintf(canon + m, sizeof(canon) - (size_t)m, "%s%s\"%s%s%s}\n",
				  CG_CKPT_SIG_MARK, sig, nsig ? ",\"note_sig\":\"" : "",
				  nsig ? nsig : "", nsig ? "\"" : "");
	if (cn < 0 || (size_t)(m + cn) != len || memcmp(line, canon, len) != 0) {
		snprintf(why, why_len, "checkpoint is not in its canonical layout");
		goto free_json;
	}
	out->msg_len = (size_t)m;
	size_t sl = 0;
	unsigned char *s = cg_base64_decode(sig, strlen(sig), &sl);
	if (!s || sl != 64) {
		free(s);
		snprintf(why, why_len, "signature is not 64 bytes of base64");
		goto free_json;
	}
	memcpy(out->sig, s, 64);
	out->sig_len = 64;
	free(s);
	if (nsig) {
		s = cg_base64_decode(nsig, strlen(nsig), &sl);
		if (!s || sl != sizeof(out->note_sig)) {
			free(s);
			snprintf(why, why_len, "note_sig is not 68 bytes of base64");
			goto free_json;
		}
		memcpy(out->note_sig, s, sl);
		out->note_sig_len = sl;
		free(s);
	}
	rc = 0;
free_json:
	json_decref(j);
	return rc;
}

/* ---- the evidence key ------------------------------------------------------ */

EVP_PKEY *cg_evkey_load_or_create(const char *state_dir, bool may_create, char *why, size_t why_len)
{
	char dir[4096], priv[4200], pub[4200];
	snprintf(dir, sizeof(dir), "%s/keys", state_dir);
	snprintf(priv, sizeof(priv), "%s/evidence.key", dir);
	snprintf(pub, sizeof(pub), "%s/evidence.pub", dir);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		snprintf(why, why_len, "cannot create %.300s: %s", dir, strerror(errno));
		return NULL;
	}
	EVP_PKEY *k = NULL;
	if (access(priv, F_OK) == 0) {
		char d[200];
		k = cg_key_load(priv, CG_KEY_PRIVATE, true, d, sizeof(d));
		if (!k)
			snprintf(why, why_len, "%.300s: %s", priv, d);
		if (k && access(pub, F_OK) != 0 &&
		    cg_key_write(pub, k, false, false, why, why_len) != 0) {
			EVP_PKEY_free(k);
			return NULL;
		}
		return k;
	}
	if (errno != ENOENT) {
		snprintf(why, why_len, "cannot open %.300s: %s", priv, strerror(errno));
		return NULL;
	}
	if (!may_create) {
		snprintf(why, why_len, "%.300s is missing but the journal has events", priv);
		return NULL;
	}
	if (!(k = cg_key_generate())) {
		snprintf(why, why_len, "Ed25519 key generation failed");
		return NULL;
	}
	if (cg_key_write(priv, k, true, true, why, why_len) != 0 ||
	    cg_key_write(pub, k, false, false, why, why_len) != 0) {
		EVP_PKEY_free(k);
		return NULL;
	}
	return k;
}

/* ---- files ------------------------------------------------------------------ */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool segment_name(const char *s)
{
	size_t n = strlen(s);
	if (n != 16 + 7 || strcmp(s + 16, ".ndjson") != 0)
		return false;
	for (int i = 0; i < 16; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

int cg_journal_segments(const char *state_dir, char ***names, size_t *n)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/journal", state_dir);
	*names = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d))) {
		if (!segment_name(e->d_name))
			continue;
		if (cnt == cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **q = realloc(v, nc * sizeof(*q));
			if (!q) {
				rc = -1;
				break;
			}
			v = q;
			cap = nc;
		}
		if (!(v[cnt] = strdup(e->d_name))) {
			rc = -1;
			break;
		}
		cnt++;
	}
	closedir(d);
	if (rc < 0) {
		cg_strv_free(v, cnt);
		errno = ENOMEM;
		return -1;
	}
	if (cnt)
		qsort(v, cnt, sizeof(*v), name_cmp);
	*names = v;
	*n = cnt;
	return 0;
}
