/* SPDX-License-Identifier: MIT */
/*
 * screen — secret redaction and injection flagging over command output
 * (see screen.h for the contract).
 *
 * How a scan works: the secret database reports (start, end, kind) for each
 * match, leftmost start; matches are folded into non-overlapping spans
 * (consecutive reports of one growing token collapse into one span as they
 * arrive, so a long token costs one entry, not one per byte); a private-key
 * BEGIN line is extended to the end of its END line; then the copy is built
 * by replacing each span with its marker.
 *
 * Invariants:
 *  - The span list has a hard cap (CG_SCREEN_MAX_SPANS); past it the scan
 *    fails (E2BIG) rather than returning output with secrets left in.
 *  - Scratch space is taken from a mutex-guarded pool per screen and given
 *    back after each scan; two threads never share one.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs/hs.h>

#include "exec.h"
#include "screen.h"
#include "util.h"

#define CG_SCREEN_MAX_SPANS (1u << 21)
#define CG_SCREEN_POOL_MAX  16

/*
 * Secret shapes. Unbounded tails are written "{N}[…]*" rather than "{N,}"
 * because bounded repeats with start-of-match tracking make the database
 * much larger for no gain. Kinds appear in the reply's counts.
 */
enum secret_kind {
	K_PRIVATE_KEY,
	K_AWS_ACCESS_KEY,
	K_AWS_SECRET_KEY,
	K_GITHUB_TOKEN,
	K_SLACK_TOKEN,
	K_ANTHROPIC_KEY,
	K_OPENAI_KEY,
	K_STRIPE_KEY,
	K_GOOGLE_API_KEY,
	K_JWT,
	K_URL_CREDENTIALS,
	K_PASSWORD_PARAM,
	K_GITLAB_TOKEN,
	K_NPM_TOKEN,
	K_BEARER_TOKEN,
	K__COUNT
};

const char *const cg_screen_secret_kinds[] = {
	"private_key",	"aws_access_key",  "aws_secret_key",
	"github_token", "slack_token",	   "anthropic_key",
	"openai_key",	"stripe_key",	   "google_api_key",
	"jwt",		"url_credentials", "password_param",
	"gitlab_token", "npm_token",	   "bearer_token",
	NULL,
};

struct pattern {
	const char *re;
	unsigned int flags;
	unsigned int id;
};

static const struct pattern secret_patterns[] = {
	/* The BEGIN line only; the block is cut to its END line in C below. */
	{ "-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----", 0, K_PRIVATE_KEY },
	{ "\\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\\b", 0, K_AWS_ACCESS_KEY },
	{ "aws_?secret_?access_?key[\"']?\\s*[:=]\\s*[\"']?[A-Za-z0-9/+=]{40}", HS_FLAG_CASELESS,
	  K_AWS_SECRET_KEY },
	{ "\\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}", 0, K_GITHUB_TOKEN },
	{ "\\bgithub_pat_[A-Za-z0-9_]{22}[A-Za-z0-9_]*", 0, K_GITHUB_TOKEN },
	{ "\\bxox[abposr]-[A-Za-z0-9-]{10}[A-Za-z0-9-]*", 0, K_SLACK_TOKEN },
	{ "\\bsk-ant-[A-Za-z0-9_-]{20}[A-Za-z0-9_-]*", 0, K_ANTHROPIC_KEY },
	{ "\\bsk-(proj-|svcacct-)?[A-Za-z0-9_-]{20}[A-Za-z0-9_-]*", 0, K_OPENAI_KEY },
	{ "\\b[sr]k_(live|test)_[A-Za-z0-9]{16}[A-Za-z0-9]*", 0, K_STRIPE_KEY },
	{ "\\bAIza[0-9A-Za-z_-]{35}", 0, K_GOOGLE_API_KEY },
	{ "\\beyJ[A-Za-z0-9_-]{8}[A-Za-z0-9_-]*\\.eyJ[A-Za-z0-9_-]{8}[A-Za-z0-9_-]*\\.[A-Za-z0-9_-]"
	  "*",
	  0, K_JWT },
	/* scheme://user:password@host — the span starts after "//" (see below). */
	{ "[A-Za-z][A-Za-z0-9+.-]*://[^\\s/:@]+:[^\\s/@]+@", 0, K_URL_CREDENTIALS },
	{ "[?&;](password|passwd|pwd|secret|token|api_key|apikey)=[^&\\s\"'#]+", HS_FLAG_CASELESS,
	  K_PASSWORD_PARAM },
	/* s41b F5: tokens both screens missed. */
	{ "\\bglpat-[A-Za-z0-9_-]{20}[A-Za-z0-9_-]*", 0, K_GITLAB_TOKEN },
	{ "\\bnpm_[A-Za-z0-9]{36}", 0, K_NPM_TOKEN },
	/* Spaces and tabs, never a newline: a token on a line of its own is a command word. */
	{ "authorization:[ \\t]*bearer[ \\t]+[A-Za-z0-9._~+/-]{20}[A-Za-z0-9._~+/-]*=*",
	  HS_FLAG_CASELESS, K_BEARER_TOKEN },
};

/*
 * Injection shapes: phrases that address the model rather than the user,
 * chat-template control tokens, and tool-call-looking markup or JSON. A
 * match only flags the output; it is easy to phrase around (documented).
 */
#define EARLIER	    "(previous|prior|above|earlier|preceding)"
#define IGNORE_WHAT "ignore\\s+(all\\s+)?(of\\s+)?(the\\s+|your\\s+|any\\s+)?" EARLIER "\\s+"
static const char *const injection_patterns[] = {
	/* Parenthesised: one pattern built from pieces, not two array elements. */
	(IGNORE_WHAT "(instructions|prompts?|directions|messages|rules)"),
	("disregard\\s+(all\\s+)?(of\\s+)?(the\\s+|your\\s+|any\\s+)?" EARLIER),
	"forget\\s+(all\\s+)?(your|the|previous)\\s+(previous\\s+)?instructions",
	"\\byou\\s+are\\s+now\\s+(a|an|the|DAN|in\\s+developer\\s+mode)\\b",
	"\\bsystem\\s+prompt\\b",
	"\\bnew\\s+instructions\\s*:",
	"<\\|(im_start|im_end|system|endoftext)\\|>",
	"\\[/?INST\\]",
	"<</?SYS>>",
	"</?(system|tool_call|tool_use|function_calls?|invoke)\\b[^>]*>",
	"\"(tool_calls|function_call|tool_use)\"\\s*:",
	"\"type\"\\s*:\\s*\"(tool_use|function)\"",
	"do\\s+not\\s+(tell|inform|alert)\\s+the\\s+user",
};

struct cg_screen {
	hs_database_t *secrets;
	hs_database_t *injection;
	hs_scratch_t *proto; /* allocated for both databases; cloned into the pool */
	pthread_mutex_t lock;
	hs_scratch_t *pool[CG_SCREEN_POOL_MAX];
	unsigned int n_pool;
};

struct span {
	size_t from, to;
	unsigned int kind;
};

struct scan {
	struct span *v;
	size_t n, alloc;
	bool overflow;
	bool oom;
};

static int compile(const char *const *res, const unsigned int *flags, const unsigned int *ids,
		   unsigned int n, hs_database_t **db, char *detail, size_t detail_len)
{
	hs_compile_error_t *cerr = NULL;

	if (hs_compile_multi(res, flags, ids, n, HS_MODE_BLOCK, NULL, db, &cerr) != HS_SUCCESS) {
		snprintf(detail, detail_len, "pattern %d: %s", cerr ? cerr->expression : -1,
			 cerr ? cerr->message : "unknown error");
		hs_free_compile_error(cerr);
		return -1;
	}
	return 0;
}

int cg_screen_new(struct cg_screen **out, struct cg_reply **err)
{
	enum {
		NS = sizeof(secret_patterns) / sizeof(secret_patterns[0]),
		NI = sizeof(injection_patterns) / sizeof(char *)
	};
	const char *res[NS > NI ? NS : NI];
	unsigned int flags[NS > NI ? NS : NI], ids[NS > NI ? NS : NI];
	char detail[256];
	struct cg_screen *s;

	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "compiling the screen");
		return -1;
	}
	for (unsigned int i = 0; i < NS; i++) {
		res[i] = secret_patterns[i].re;
		/*
		 * The AWS secret's span is its 40 value bytes, found from the
		 * match's end: start-of-match tracking made that one pattern's
		 * database 250 KB of the daemon's idle memory (25 KB without).
		 */
		flags[i] = secret_patterns[i].flags |
			   (secret_patterns[i].id == K_AWS_SECRET_KEY ? 0 : HS_FLAG_SOM_LEFTMOST);
		ids[i] = secret_patterns[i].id;
	}
	if (compile(res, flags, ids, NS, &s->secrets, detail, sizeof(detail)) < 0)
		goto fail_free;
	for (unsigned int i = 0; i < NI; i++) {
		res[i] = injection_patterns[i];
		/* SINGLEMATCH: one report per pattern is all a yes/no needs. */
		flags[i] = HS_FLAG_CASELESS | HS_FLAG_SINGLEMATCH;
		ids[i] = i;
	}
	if (compile(res, flags, ids, NI, &s->injection, detail, sizeof(detail)) < 0)
		goto fail_free;
	if (hs_alloc_scratch(s->secrets, &s->proto) != HS_SUCCESS ||
	    hs_alloc_scratch(s->injection, &s->proto) != HS_SUCCESS) {
		snprintf(detail, sizeof(detail), "scratch allocation failed");
		goto fail_free;
	}
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		snprintf(detail, sizeof(detail), "mutex initialisation failed");
		goto fail_free;
	}
	*out = s;
	return 0;

fail_free:
	hs_free_scratch(s->proto);
	hs_free_database(s->injection);
	hs_free_database(s->secrets);
	free(s);
	*err = cg_reply_new(CG_R_SCREEN_COMPILE_FAILED, "{s:s}", "detail", detail);
	return -1;
}

void cg_screen_free(struct cg_screen *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; i < s->n_pool; i++)
		hs_free_scratch(s->pool[i]);
	hs_free_scratch(s->proto);
	hs_free_database(s->injection);
	hs_free_database(s->secrets);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Take a scratch from the pool, or clone a new one. NULL on failure. */
static hs_scratch_t *scratch_get(struct cg_screen *s)
{
	hs_scratch_t *sc = NULL;

	pthread_mutex_lock(&s->lock);
	if (s->n_pool > 0)
		sc = s->pool[--s->n_pool];
	pthread_mutex_unlock(&s->lock);
	if (!sc && hs_clone_scratch(s->proto, &sc) != HS_SUCCESS)
		return NULL;
	return sc;
}

static void scratch_put(struct cg_screen *s, hs_scratch_t *sc)
{
	pthread_mutex_lock(&s->lock);
	if (s->n_pool < CG_SCREEN_POOL_MAX) {
		s->pool[s->n_pool++] = sc;
		sc = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	hs_free_scratch(sc);
}

/*
 * Record one match. Reports arrive in order of end offset, so a match that
 * overlaps the last span (the usual case: the same token reported again one
 * byte longer) is folded into it here; anything else is appended and sorted
 * out after the scan.
 */
static int on_secret(unsigned int id, unsigned long long from, unsigned long long to,
		     unsigned int flags, void *ctx)
{
	struct scan *sc = ctx;
	struct span *last = sc->n ? &sc->v[sc->n - 1] : NULL;

	(void)flags;
	if (id == K_AWS_SECRET_KEY)
		from = to - 40; /* compiled without start-of-match: the value's bytes */
	if (last && from <= last->to && to >= last->from) {
		/* The leftmost start names the span; on a tie the more specific
		 * shape wins (listed first: sk-ant- before sk-). */
		if (from < last->from || (from == last->from && id < last->kind)) {
			last->from = from;
			last->kind = id;
		}
		if (to > last->to)
			last->to = to;
		return 0;
	}
	if (sc->n == sc->alloc) {
		size_t na = sc->alloc ? sc->alloc * 2 : 64;
		struct span *nv;

		if (na > CG_SCREEN_MAX_SPANS) {
			sc->overflow = true;
			return 1; /* stop the scan; the caller fails closed */
		}
		nv = realloc(sc->v, na * sizeof(*nv));
		if (!nv) {
			sc->oom = true;
			return 1;
		}
		sc->v = nv;
		sc->alloc = na;
	}
	sc->v[sc->n++] = (struct span){ .from = from, .to = to, .kind = id };
	return 0;
}

static int on_injection(unsigned int id, unsigned long long from, unsigned long long to,
			unsigned int flags, void *ctx)
{
	(void)id;
	(void)from;
	(void)to;
	(void)flags;
	*(bool *)ctx = true;
	return 1; /* one is enough */
}

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->from != y->from)
		return x->from < y->from ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return 0;
}

/* Find needle in hay[from..len); returns its offset, or len when absent. */
static size_t find(const unsigned char *hay, size_t from, size_t len, const char *needle)
{
	size_t nl = strlen(needle);
	const unsigned char *p;

	if (from >= len)
		return len;
	p = memmem(hay + from, len - from, needle, nl);
	return p ? (size_t)(p - hay) : len;
}

/* Are in[from..to) all bytes a secret's value is made of (no shell syntax, no spaces)? */
static bool secret_bytes(const unsigned char *in, size_t from, size_t to, bool lines)
{
	for (size_t i = from; i < to; i++) {
		unsigned char c = in[i];
		bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			  (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=' || c == '.' ||
			  c == '_' || c == '~' || c == '-' || c == '%' ||
			  (lines && (c == '\n' || c == '\r'));
		if (!ok)
			return false;
	}
	return true;
}

/*
 * Is the value at v its name's, and no word a shell runs? Only when joined
 * to its "=" or ":", with at most an opening quote between (KEY=v,
 * KEY="v", key:'v'): after a space or a newline it may be a command word,
 * KEY= "v" -f x and x=key: "v" run v (s41d F3), so it stays in clear.
 */
static bool value_joined(const unsigned char *in, size_t v)
{
	size_t i = v;
	if (i && (in[i - 1] == '"' || in[i - 1] == '\''))
		i--; /* an opening quote */
	return i && (in[i - 1] == '=' || in[i - 1] == ':');
}

/*
 * Where a key block's END line and its closing dashes are: the last answers,
 * reused while they still hold. Spans come in order, so a stream of BEGIN
 * lines with no END costs one pass, not one to the end per line (s39a:
 * 160,000 BEGIN lines held a worker for 66 s).
 */
struct key_ends {
	bool valid;
	size_t from, end;   /* no "-----END " starts in [from, end); end is one, or len */
	size_t body, close; /* find(body + 9, "-----") */
};

static size_t key_end(struct key_ends *k, const unsigned char *in, size_t from, size_t len)
{
	if (!k->valid || from < k->from || from > k->end) {
		k->from = from;
		k->end = find(in, from, len, "-----END ");
		k->body = SIZE_MAX;
		k->valid = true;
	}
	return k->end;
}

static size_t key_close(struct key_ends *k, const unsigned char *in, size_t body, size_t len)
{
	if (k->body != body) {
		k->body = body;
		k->close = find(in, body + 9, len, "-----");
	}
	return k->close;
}

/*
 * Apply the per-kind span fixes that the matcher alone cannot express. In a
 * record (strict: argv, a reason) a span may hold only what a secret is made
 * of, else nothing is redacted: the agent chose what the evidence hid, with
 * ";token=$(cmd)" or a "BEGIN PRIVATE KEY" with no END before "; id > f"
 * (s36 attack). Output keeps the wider cut (a key with no END line is cut to
 * the end). A dropped span is left empty (to == from).
 */
static void span_fix(struct span *sp, const unsigned char *in, size_t len, bool strict,
		     struct key_ends *k)
{
	if (sp->kind == K_URL_CREDENTIALS) {
		/* Keep "scheme://" and the "@host" readable; cut user:password. */
		size_t at = find(in, sp->from, sp->to, "://");
		if (at + 3 < sp->to)
			sp->from = at + 3;
		if (sp->to > sp->from + 1 && in[sp->to - 1] == '@')
			sp->to -= 1;
	}
	if (sp->kind == K_PRIVATE_KEY) {
		size_t body_end = key_end(k, in, sp->to, len), end = len;
		if (body_end < len) {
			size_t close = key_close(k, in, body_end, len);
			end = close < len ? close + 5 : len;
		}
		/* A record: only a whole block whose body is base64 lines. */
		bool whole = body_end < len && secret_bytes(in, sp->to, body_end, true);
		sp->to = strict && !whole ? sp->from : end;
		return;
	}
	if (sp->kind == K_BEARER_TOKEN) {
		/* The token, after "Authorization: Bearer ", in output as in a record. */
		size_t v = sp->to;
		while (v > sp->from && in[v - 1] != ' ' && in[v - 1] != '\t')
			v--;
		sp->from = v;
		if (strict && !secret_bytes(in, v, sp->to, false))
			sp->to = sp->from;
		return;
	}
	if (!strict)
		return;
	/*
	 * The AWS secret's span is its value (on_secret), its name left
	 * readable: quoted forms had been left in the record in clear (s41b
	 * F5). In a record, only a value joined to its name (value_joined):
	 * after a space it may be a command word (s41c F5, s41d F3).
	 */
	if (sp->kind == K_AWS_SECRET_KEY) {
		if (!value_joined(in, sp->from))
			sp->to = sp->from;
		return;
	}
	/* The value after "name=" or "user:", never the syntax around it. */
	const char *sep = sp->kind == K_PASSWORD_PARAM	  ? "="
			  : sp->kind == K_URL_CREDENTIALS ? ":"
							  : NULL;
	size_t at = sep ? find(in, sp->from, sp->to, sep) : sp->to;
	size_t v = at < sp->to ? at + 1 : sp->from;
	if (!secret_bytes(in, v, sp->to, false))
		sp->to = sp->from;
}

static void append(unsigned char *dst, size_t *pos, const void *p, size_t n)
{
	memcpy(dst + *pos, p, n);
	*pos += n;
}

static int count_add(json_t *counts, const char *kind)
{
	json_t *v;
	json_int_t c = 0;

	if (!counts)
		return 0;
	v = json_object_get(counts, kind);
	if (json_is_integer(v))
		c = json_integer_value(v);
	return json_object_set_new(counts, kind, json_integer(c + 1));
}

static int screen_run(const struct cg_screen *s, bool redact, bool strict, bool detect_injection,
		      const unsigned char *in, size_t len, unsigned char **out, size_t *out_len,
		      json_t *counts, bool *quarantined);

int cg_screen_run(const struct cg_screen *s, bool redact, bool detect_injection,
		  const unsigned char *in, size_t len, unsigned char **out, size_t *out_len,
		  json_t *counts, bool *quarantined)
{
	return screen_run(s, redact, false, detect_injection, in, len, out, out_len, counts,
			  quarantined);
}

int cg_screen_record(const struct cg_screen *s, const unsigned char *in, size_t len,
		     unsigned char **out, size_t *out_len)
{
	return screen_run(s, true, true, false, in, len, out, out_len, NULL, NULL);
}

/* " sha256:" and 12 hex digits: what a record's marker adds (fingerprinted). */
#define FINGERPRINT_LEN 20

/* Kinds whose values are random enough that a hash prefix gives nothing away. */
static bool fingerprinted(int kind)
{
	return kind != K_URL_CREDENTIALS && kind != K_PASSWORD_PARAM;
}

static int screen_run(const struct cg_screen *s, bool redact, bool strict, bool detect_injection,
		      const unsigned char *in, size_t len, unsigned char **out, size_t *out_len,
		      json_t *counts, bool *quarantined)
{
	struct cg_screen *ms = (struct cg_screen *)(uintptr_t)s; /* pool is interior-mutable */
	struct scan sc = { 0 };
	hs_scratch_t *scratch = NULL;
	unsigned char *buf = NULL;
	size_t need, pos = 0, cursor = 0;
	int rc = -1, saved = 0;
	bool inj = false;

	*out = NULL;
	*out_len = 0;
	if (len > UINT_MAX) {
		errno = E2BIG;
		return -1;
	}
	if ((redact || detect_injection) && len > 0) {
		scratch = scratch_get(ms);
		if (!scratch) {
			errno = ENOMEM;
			return -1;
		}
	}
	if (detect_injection && len > 0) {
		hs_error_t e = hs_scan(s->injection, (const char *)in, (unsigned int)len, 0,
				       scratch, on_injection, &inj);
		if (e != HS_SUCCESS && e != HS_SCAN_TERMINATED) {
			saved = EIO;
			goto fail_scratch;
		}
	}
	if (redact && len > 0) {
		hs_error_t e = hs_scan(s->secrets, (const char *)in, (unsigned int)len, 0, scratch,
				       on_secret, &sc);
		if (sc.overflow || sc.oom) {
			saved = sc.oom ? ENOMEM : E2BIG;
			goto fail_scratch;
		}
		if (e != HS_SUCCESS) {
			saved = EIO;
			goto fail_scratch;
		}
	}
	struct key_ends k = { 0 };
	for (size_t i = 0; i < sc.n; i++)
		span_fix(&sc.v[i], in, len, strict, &k);
	if (sc.n > 1)
		qsort(sc.v, sc.n, sizeof(*sc.v), span_cmp);

	need = len + 1;
	for (size_t i = 0; i < sc.n; i++)
		need += strlen("[REDACTED:]") + strlen(cg_screen_secret_kinds[sc.v[i].kind]) +
			(strict ? FINGERPRINT_LEN : 0);
	buf = malloc(need);
	if (!buf) {
		saved = ENOMEM;
		goto fail_scratch;
	}
	for (size_t i = 0; i < sc.n; i++) {
		const struct span *sp = &sc.v[i];
		const char *kind = cg_screen_secret_kinds[sp->kind];
		char marker[64];
		int ml;

		if (sp->to == sp->from)
			continue; /* dropped by span_fix: nothing of it is a secret's */
		if (sp->from < cursor) {
			/* Overlaps a span already cut (e.g. inside a key block): the
			 * bytes are already under that marker; widen it, count once. */
			if (sp->to > cursor)
				cursor = sp->to;
			continue;
		}
		if (sp->from > cursor)
			append(buf, &pos, in + cursor, sp->from - cursor);
		if (strict && fingerprinted(sp->kind)) {
			/*
			 * The record names which value it was (s39b F3: a file named
			 * like a token vanished from the evidence): a guess can be
			 * checked against it. Only for high-entropy kinds: a password
			 * in a URL could be found from its hash by trying words.
			 */
			char hex[65];
			cg_sha256_hex(in + sp->from, sp->to - sp->from, hex);
			ml = snprintf(marker, sizeof(marker), "[REDACTED:%s sha256:%.12s]", kind,
				      hex);
		} else {
			ml = snprintf(marker, sizeof(marker), "[REDACTED:%s]", kind);
		}
		append(buf, &pos, marker, (size_t)ml);
		cursor = sp->to;
		if (count_add(counts, kind) < 0) {
			saved = ENOMEM;
			goto fail_buf;
		}
	}
	if (cursor < len)
		append(buf, &pos, in + cursor, len - cursor);
	buf[pos] = '\0';
	*out = buf;
	*out_len = pos;
	buf = NULL;
	if (inj && quarantined)
		*quarantined = true;
	rc = 0;

fail_buf:
	free(buf);
fail_scratch:
	if (scratch)
		scratch_put(ms, scratch);
	free(sc.v);
	if (rc < 0)
		errno = saved;
	return rc;
}

/* Replace b's bytes with the screened copy; the cap and truncation flag stay. */
static int screen_buf(const struct cg_screen *s, bool redact, bool detect_injection,
		      struct cg_buf *b, json_t *counts, bool *quarantined)
{
	unsigned char *out = NULL;
	size_t out_len = 0;

	if (cg_screen_run(s, redact, detect_injection, b->p, b->len, &out, &out_len, counts,
			  quarantined) != 0)
		return -1;
	free(b->p);
	b->p = out;
	b->len = out_len;
	b->alloc = out_len + 1;
	return 0;
}

int cg_screen_exec_result(const struct cg_screen *s, bool redact, bool detect_injection,
			  struct cg_exec_result *res, json_t **screening)
{
	json_t *counts = json_object();
	bool quarantined = false;
	json_int_t total = 0;
	const char *kind;
	json_t *v;
	int saved;

	*screening = NULL;
	if (!counts) {
		saved = ENOMEM;
		goto fail_wipe;
	}
	if (screen_buf(s, redact, detect_injection, &res->out, counts, &quarantined) != 0) {
		saved = errno;
		goto fail_counts;
	}
	for (size_t i = 0; i < res->n_stages; i++)
		if (screen_buf(s, redact, detect_injection, &res->stages[i].err, counts,
			       &quarantined) != 0) {
			saved = errno;
			goto fail_counts;
		}
	json_object_foreach(counts, kind, v) total += json_integer_value(v);
	*screening = json_pack("{s:o,s:I,s:b,s:b,s:b}", "redactions", counts, "redacted", total,
			       "quarantined", quarantined, "secrets_screened", redact,
			       "injection_screened", detect_injection);
	if (!*screening) {
		saved = ENOMEM;
		goto fail_wipe;
	}
	return 0;

fail_counts:
	json_decref(counts);
fail_wipe:
	/* Fail closed: nothing unscreened may leave, whoever forgets to check. */
	if (res->out.p)
		explicit_bzero(res->out.p, res->out.len);
	res->out.len = 0;
	for (size_t i = 0; i < res->n_stages; i++) {
		if (res->stages[i].err.p)
			explicit_bzero(res->stages[i].err.p, res->stages[i].err.len);
		res->stages[i].err.len = 0;
	}
	errno = saved;
	return -1;
}
