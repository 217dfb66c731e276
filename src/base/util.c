/* SPDX-License-Identifier: MIT */
/*
 * util — shared helpers: retrying I/O, clocks, RFC 3339, UUIDv4, base64 and
 * SHA-256 through OpenSSL (never hand-written), and the capped buffer.
 */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

int cg_write_all(int fd, const void *p, size_t n)
{
	const unsigned char *b = p;
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

ssize_t cg_read_some(int fd, void *p, size_t n)
{
	for (;;) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		return r;
	}
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t cg_now_mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

int64_t cg_now_wall_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

void cg_format_time(int64_t wall_ns, char *buf, size_t len)
{
	time_t s = (time_t)(wall_ns / 1000000000LL);
	int ms = (int)((wall_ns % 1000000000LL) / 1000000LL);
	struct tm tm;
	gmtime_r(&s, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/* Read exactly n digits as a number; NULL when they are not all digits. */
static const char *digits(const char *s, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return NULL;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return s + n;
}

int cg_parse_time(const char *s, int64_t *out_ns)
{
	int y, mo, d, h, mi, sec;
	const char *p = s;
	if (!(p = digits(p, 4, &y)) || *p++ != '-' || !(p = digits(p, 2, &mo)) || *p++ != '-' ||
	    !(p = digits(p, 2, &d)))
		return -1;
	if (*p != 'T' && *p != 't' && *p != ' ')
		return -1;
	p++;
	if (!(p = digits(p, 2, &h)) || *p++ != ':' || !(p = digits(p, 2, &mi)) || *p++ != ':' ||
	    !(p = digits(p, 2, &sec)))
		return -1;
	if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -1;
	/* Nanoseconds since 1970 fit an int64 only between 1678 and 2261. */
	if (y < 1678 || y > 2261)
		return -1;
	int64_t frac_ns = 0;
	if (*p == '.') {
		p++;
		int nd = 0;
		int64_t scale = 100000000;
		while (*p >= '0' && *p <= '9') {
			if (nd < 9) {
				frac_ns += (*p - '0') * scale;
				scale /= 10;
			}
			nd++;
			p++;
		}
		if (nd == 0)
			return -1;
	}
	int64_t off_s = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, oh, om;
		p++;
		if (!(p = digits(p, 2, &oh)) || *p++ != ':' || !(p = digits(p, 2, &om)))
			return -1;
		if (oh > 23 || om > 59)
			return -1;
		off_s = sign * (oh * 3600 + om * 60);
	} else {
		return -1;
	}
	if (*p != '\0')
		return -1;
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (d > mdays[mo - 1] || (mo == 2 && !leap && d > 28))
		return -1;
	struct tm tm = { .tm_year = y - 1900,
			 .tm_mon = mo - 1,
			 .tm_mday = d,
			 .tm_hour = h,
			 .tm_min = mi,
			 .tm_sec = sec > 59 ? 59 : sec };
	time_t t = timegm(&tm);
	if (t == (time_t)-1 && !(y == 1969 && mo == 12 && d == 31))
		return -1;
	*out_ns = ((int64_t)t - off_s) * 1000000000LL + frac_ns;
	return 0;
}

static int path_join(char *out, size_t len, const char *dir, const char *name)
{
	int n = dir && *dir ? snprintf(out, len, "%s/%s", dir, name) : -1;
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int cg_user_socket_path(char *out, size_t len)
{
	return path_join(out, len, getenv("XDG_RUNTIME_DIR"), "callgate/callgate.sock");
}

int cg_user_state_dir(char *out, size_t len)
{
	if (path_join(out, len, getenv("XDG_STATE_HOME"), "callgate") == 0)
		return 0;
	return path_join(out, len, getenv("HOME"), ".local/state/callgate");
}

/*
 * Random bytes for ids, drawn from RAND_bytes 512 at a time: one call per
 * 32 ids instead of one each (a call costs about as much as the rest of an
 * id). The pool is per thread and remembers the process it was filled in,
 * so a forked child never hands out its parent's bytes.
 */
static int id_random(unsigned char *out, size_t n)
{
	static _Thread_local unsigned char pool[512];
	static _Thread_local size_t left;
	static _Thread_local pid_t filled_by;
	pid_t self = getpid();
	if (n > sizeof(pool))
		return -1;
	if (left < n || filled_by != self) {
		if (RAND_bytes(pool, (int)sizeof(pool)) != 1) {
			left = 0;
			return -1;
		}
		left = sizeof(pool);
		filled_by = self;
	}
	left -= n;
	memcpy(out, pool + left, n);
	explicit_bzero(pool + left, n); /* handed out once */
	return 0;
}

int cg_uuid4(char *out, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[16];
	if (len < 37 || id_random(b, sizeof(b)) != 0)
		return -1;
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	char *o = out;
	for (size_t i = 0; i < sizeof(b); i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*o++ = '-';
		*o++ = hex[b[i] >> 4];
		*o++ = hex[b[i] & 0x0f];
	}
	*o = '\0';
	return 0;
}

char *cg_base64_encode(const unsigned char *p, size_t n)
{
	/* EVP_EncodeBlock takes an int length; outputs are capped well below. */
	if (n > (size_t)1 << 30)
		return NULL;
	char *out = malloc(4 * ((n + 2) / 3) + 1);
	if (!out)
		return NULL;
	EVP_EncodeBlock((unsigned char *)out, p, (int)n);
	return out;
}

unsigned char *cg_base64_decode(const char *s, size_t len, size_t *out_len)
{
	if (len % 4 != 0 || len > (size_t)1 << 30)
		return NULL;
	unsigned char *out = malloc(len / 4 * 3 + 1);
	if (!out)
		return NULL;
	int n = EVP_DecodeBlock(out, (const unsigned char *)s, (int)len);
	if (n < 0) {
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts padding bytes as output; take them back off. */
	if (len >= 1 && s[len - 1] == '=')
		n--;
	if (len >= 2 && s[len - 2] == '=')
		n--;
	*out_len = (size_t)n;
	return out;
}

static const char hexd[] = "0123456789abcdef";

/* One fetched SHA-256 and one context per thread: OpenSSL's one-shot SHA256()
 * fetches the algorithm (taking locks) on every call, which dominated replay. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static pthread_key_t sha256_key; /* per-thread EVP_MD_CTX, freed at thread exit */

static void sha256_ctx_free(void *p)
{
	EVP_MD_CTX_free(p);
}

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (pthread_key_create(&sha256_key, sha256_ctx_free) != 0) {
		EVP_MD_free(sha256_md);
		sha256_md = NULL;
	}
}

size_t cg_fmt_u64(char *buf, uint64_t v)
{
	char tmp[20];
	size_t n = 0, len = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		buf[len++] = tmp[--n];
	return len;
}

size_t cg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len = s[0] < 0x80	     ? 1
		     : (s[0] & 0xe0) == 0xc0 ? 2
		     : (s[0] & 0xf0) == 0xe0 ? 3
		     : (s[0] & 0xf8) == 0xf0 ? 4
					     : 0;
	if (len == 0 || len > n)
		return 0;
	uint32_t v = len == 1 ? s[0] : s[0] & (0x7fu >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

const char *cg_unicode_hidden(uint32_t c)
{
	if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f))
		return "control";
	if (c == 0x061c || c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) ||
	    (c >= 0x2066 && c <= 0x2069))
		return "bidi";
	if (c == 0x2028 || c == 0x2029)
		return "separator";
	if (c >= 0xe0000 && c <= 0xe007f)
		return "tag";
	if ((c >= 0x180b && c <= 0x180d) || c == 0x180f || (c >= 0xfe00 && c <= 0xfe0f) ||
	    (c >= 0xe0100 && c <= 0xe01ef))
		return "variation";
	/* Default_Ignorable_Code_Point (DerivedCoreProperties), the Hangul fillers, U+FFF9-FFFB. */
	if (c == 0x00ad || c == 0x034f || c == 0x115f || c == 0x1160 || c == 0x17b4 ||
	    c == 0x17b5 || c == 0x180e || (c >= 0x200b && c <= 0x200d) ||
	    (c >= 0x2060 && c <= 0x206f) || c == 0x3164 || c == 0xfeff || c == 0xffa0 ||
	    (c >= 0xfff0 && c <= 0xfffb) || (c >= 0x1bca0 && c <= 0x1bca3) ||
	    (c >= 0x1d173 && c <= 0x1d17a) || (c >= 0xe0000 && c <= 0xe0fff))
		return "zero-width";
	return NULL;
}

void cg_gate_open(_Atomic uint32_t *g, uint32_t to)
{
	atomic_store(g, to);
	(void)syscall(SYS_futex, g, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int cg_gate_wait(_Atomic uint32_t *g, int64_t timeout_ms)
{
	int64_t waited_ms = 0;
	for (;;) {
		uint32_t v = atomic_load(g);
		if (v == CG_GATE_GO)
			return 0;
		if (v != CG_GATE_PENDING)
			return EIO;
		if (timeout_ms >= 0 && waited_ms >= timeout_ms)
			return ETIMEDOUT;
		/* A second at most: the limit is counted in whole waits. */
		struct timespec one = { 1, 0 };
		if (syscall(SYS_futex, g, FUTEX_WAIT_PRIVATE, CG_GATE_PENDING, &one, NULL, 0) !=
			0 &&
		    errno == ETIMEDOUT)
			waited_ms += 1000;
	}
}

void cg_hex_encode(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hexd[b[i] >> 4];
		out[2 * i + 1] = hexd[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int cg_hex_decode(const char *hex, unsigned char *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v = 0;
		for (int j = 0; j < 2; j++) {
			char ch = hex[2 * i + j];
			unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
				     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
							      : 16;
			if (d == 16)
				return -1; /* also stops at the NUL of a short string */
			v = v << 4 | d;
		}
		out[i] = (unsigned char)v;
	}
	return 0;
}

void cg_sha256_hex(const void *p, size_t n, char hex[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	unsigned int ml = 0;
	pthread_once(&sha256_once, sha256_fetch);
	EVP_MD_CTX *ctx = sha256_md ? pthread_getspecific(sha256_key) : NULL;
	if (sha256_md && !ctx && (ctx = EVP_MD_CTX_new()) &&
	    pthread_setspecific(sha256_key, ctx) != 0) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	if (!ctx || EVP_DigestInit_ex2(ctx, sha256_md, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, p, n) != 1 || EVP_DigestFinal_ex(ctx, md, &ml) != 1)
		SHA256(p, n, md); /* the slow path still gives the right answer */
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
		hex[2 * i] = hexd[md[i] >> 4];
		hex[2 * i + 1] = hexd[md[i] & 15];
	}
	hex[64] = '\0';
}

void cg_buf_init(struct cg_buf *b, size_t cap)
{
	memset(b, 0, sizeof(*b));
	b->cap = cap;
}

int cg_buf_add(struct cg_buf *b, const void *p, size_t n)
{
	b->seen += n;
	if (b->len + n > b->cap) {
		b->truncated = true;
		n = b->cap - b->len;
	}
	if (n == 0)
		return 0;
	if (b->len + n > b->alloc) {
		size_t a = b->alloc ? b->alloc : 4096;
		while (a < b->len + n)
			a *= 2;
		if (a > b->cap)
			a = b->cap;
		unsigned char *q = realloc(b->p, a);
		if (!q)
			return -1;
		b->p = q;
		b->alloc = a;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

char *cg_buf_cstr(struct cg_buf *b)
{
	char *s = realloc(b->p, b->len + 1);
	if (!s) {
		cg_buf_free(b);
		return NULL;
	}
	s[b->len] = '\0';
	b->p = NULL;
	b->len = b->alloc = 0;
	return s;
}

void cg_buf_free(struct cg_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->alloc = 0;
}

long cg_test_knob(const char *name, long def, long max)
{
	const char *v = getenv(name);
	char *end = NULL;
	long n = v ? strtol(v, &end, 10) : 0;
	if (!v || end == v || *end || n <= 0 || n > max)
		return def;
	cg_log("warn", NULL, "test-only %s=%ld in force", name, n);
	return n;
}

void cg_log(const char *level, const char *trace_id, const char *fmt, ...)
{
	char ts[40], msg[1024];
	cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* One write per line so concurrent threads do not interleave mid-line. */
	char line[1200];
	int n = snprintf(line, sizeof(line), "%s callgated %s%s%s %s\n", ts, level,
			 trace_id && *trace_id ? " trace=" : "", trace_id ? trace_id : "", msg);
	if (n > 0)
		(void)cg_write_all(2, line,
				   (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* ---- work spread over CPUs ------------------------------------------------ */

#define PAR_THREADS_MAX 8

struct par {
	size_t n, next; /* next: the next item to take (atomic) */
	void (*fn)(size_t i, void *arg);
	void *arg;
};

static void *par_run(void *p)
{
	struct par *w = p;
	for (size_t i; (i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED)) < w->n;)
		w->fn(i, w->arg);
	return NULL;
}

void cg_parallel_for(size_t n, size_t grain, void (*fn)(size_t i, void *arg), void *arg)
{
	struct par w = { n, 0, fn, arg };
	cpu_set_t set;
	size_t cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? (size_t)CPU_COUNT(&set) : 1;
	size_t want = cpus < PAR_THREADS_MAX ? cpus : PAR_THREADS_MAX;
	size_t by_work = n / (grain ? grain : 1) + 1;
	if (want > by_work)
		want = by_work;
	pthread_t th[PAR_THREADS_MAX];
	size_t started = 0;
	while (started + 1 < want && pthread_create(&th[started], NULL, par_run, &w) == 0)
		started++;
	(void)par_run(&w);
	for (size_t i = 0; i < started; i++)
		(void)pthread_join(th[i], NULL);
}

int cg_parse_duration_ms(const char *s, int64_t bare_ms, bool ms_unit, int64_t max_ms, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v <= 0)
		return -1;
	int64_t unit = !*end				   ? bare_ms
		       : ms_unit && strcmp(end, "ms") == 0 ? 1
		       : strcmp(end, "s") == 0		   ? 1000
		       : strcmp(end, "m") == 0		   ? 60000
		       : strcmp(end, "h") == 0		   ? 3600000
		       : strcmp(end, "d") == 0		   ? 86400000
							   : 0;
	if (unit == 0 || v > max_ms / unit)
		return -1;
	*out = v * unit;
	return 0;
}

/*
 * Edit distance (insert, delete, substitute, swap two neighbours: "--cdw" is
 * one step from "--cwd"), capped at 64-byte inputs.
 */
size_t cg_edit_distance(const char *a, const char *b)
{
	size_t la = strnlen(a, 64), lb = strnlen(b, 64);
	size_t d[65][65];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb];
}
