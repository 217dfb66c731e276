/* SPDX-License-Identifier: MIT */
/*
 * util — the few helpers every module shares: EINTR/short-write retry (one
 * helper each, never at call sites), clocks, UUIDs, base64 and SHA-256 via
 * OpenSSL, and a bounded byte buffer.
 *
 * Invariants:
 *  - cg_write_all/cg_read_some MUST retry EINTR and short writes themselves.
 *  - struct cg_buf MUST NOT grow past its cap; cg_buf_add reports the cut.
 */
#ifndef CG_UTIL_H
#define CG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Write all n bytes, retrying EINTR and short writes. 0, or -1 with errno. */
int cg_write_all(int fd, const void *p, size_t n);

/* read(2) that retries EINTR. Returns bytes read, 0 at EOF, -1 with errno. */
ssize_t cg_read_some(int fd, void *p, size_t n);

/* Monotonic and wall clocks. */
int64_t cg_now_mono_ns(void);
int64_t cg_now_wall_ns(void);

/* RFC 3339 UTC with milliseconds into buf (>= 32 bytes): 2026-02-13T14:30:00.123Z */
void cg_format_time(int64_t wall_ns, char *buf, size_t len);

/*
 * Parse an RFC 3339 / ISO 8601 timestamp ("2026-02-13T14:30:00Z",
 * fractional seconds and numeric offsets allowed). Returns 0 and the time in
 * ns since the epoch, or -1 when it does not parse.
 */
int cg_parse_time(const char *s, int64_t *out_ns);

/*
 * A duration: a whole number with a unit (s, m, h, d; ms when ms_unit), or
 * bare, counting bare_ms each. *out in ms; 0, or -1 when malformed, not
 * positive, or past max_ms. The CLI and the daemon read durations alike.
 */
int cg_parse_duration_ms(const char *s, int64_t bare_ms, bool ms_unit, int64_t max_ms,
			 int64_t *out);

/*
 * Edit distance (insert, delete, substitute, swap two neighbours: "--cdw" is
 * one step from "--cwd"), capped at 64-byte inputs: for "did you mean".
 */
size_t cg_edit_distance(const char *a, const char *b);

/*
 * A user's own daemon paths, where callgated puts them when it does not run
 * as root: the agent socket $XDG_RUNTIME_DIR/callgate/callgate.sock, the
 * state directory $XDG_STATE_HOME/callgate (else ~/.local/state/callgate).
 * 0, or -1 when the variables are unset or the path does not fit.
 */
int cg_user_socket_path(char *out, size_t len);
int cg_user_state_dir(char *out, size_t len);

/* A fresh UUIDv4 from OpenSSL's RAND_bytes (through a per-thread pool) into
 * out (>= 37 bytes). 0 or -1. */
int cg_uuid4(char *out, size_t len);

/* Base64 (standard alphabet, padded). Returns malloc'd NUL-terminated text. */
char *cg_base64_encode(const unsigned char *p, size_t n);
/* Decode; returns malloc'd bytes and *out_len, or NULL on bad input. */
unsigned char *cg_base64_decode(const char *s, size_t len, size_t *out_len);

/* SHA-256 of p[0..n) as 64 lower-case hex chars plus NUL into hex (>= 65). */
void cg_sha256_hex(const void *p, size_t n, char hex[65]);

/* Encode n bytes as 2n lower-case hex digits plus NUL into out (>= 2n + 1). */
void cg_hex_encode(const unsigned char *b, size_t n, char *out);
/*
 * The decimal digits of v into buf (at least 20 bytes; no NUL written), for
 * children between fork and exec: async-signal-safe. Returns the length.
 */
size_t cg_fmt_u64(char *buf, uint64_t v);

/*
 * Decode one UTF-8 sequence at s[0..n): its length and code point, or 0 for
 * an invalid one (overlong forms and surrogates included: they hide text).
 */
size_t cg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/*
 * The class of a code point a person cannot see as it is, or NULL: "control"
 * (C0, DEL, C1), "bidi" (reorders the text around it: Trojan Source,
 * CVE-2021-42574), "separator" (U+2028/2029), "tag" (ASCII smuggling),
 * "variation" (variation selectors: they change a glyph, emoji need them),
 * "zero-width" (the rest of Unicode's Default_Ignorable_Code_Point, the
 * Hangul fillers and interlinear annotation marks). Two words that differ
 * by one of these look the same on a screen. Tab is a control here.
 */
const char *cg_unicode_hidden(uint32_t cp);
/*
 * A one-shot gate between threads, or processes that share memory
 * (CLONE_VM): a word that starts CG_GATE_PENDING and is opened once, to GO
 * or REFUSED, by cg_gate_open, which wakes every waiter.
 */
#define CG_GATE_PENDING 0u
#define CG_GATE_GO	1u
#define CG_GATE_REFUSED 2u
void cg_gate_open(_Atomic uint32_t *g, uint32_t to);
/*
 * Wait until g is opened: 0 for GO, EIO for REFUSED, ETIMEDOUT after
 * timeout_ms (< 0: no limit). Async-signal-safe: atomics and futex(2).
 */
int cg_gate_wait(_Atomic uint32_t *g, int64_t timeout_ms);
/* Decode 2n lower-case hex digits into n bytes. 0, or -1 on any other character. */
int cg_hex_decode(const char *hex, unsigned char *out, size_t n);

/* A byte buffer with a hard cap; bytes past the cap are dropped and counted. */
struct cg_buf {
	unsigned char *p;
	size_t len;	/* bytes kept */
	size_t cap;	/* hard limit on len */
	size_t alloc;	/* bytes allocated */
	bool truncated; /* some bytes were dropped at the cap */
	uint64_t seen;	/* bytes offered, kept or not */
};

void cg_buf_init(struct cg_buf *b, size_t cap);
/* Append; bytes over the cap set truncated. 0, or -1 (ENOMEM). */
int cg_buf_add(struct cg_buf *b, const void *p, size_t n);
void cg_buf_free(struct cg_buf *b);

/*
 * Hand over the buffer's bytes as a NUL-terminated string (the terminator is
 * not content: it may go one byte past the cap) and reset the buffer. NULL
 * on allocation failure (the buffer is freed); the caller frees the string.
 */
char *cg_buf_cstr(struct cg_buf *b);

/*
 * A test-only knob: the environment variable name as a number from 1 to max,
 * logged as a warning when set; def when it is unset or not such a number.
 */
long cg_test_knob(const char *name, long def, long max);

/* Log a line to stderr with a level and optional trace id (daemon log). */
void cg_log(const char *level, const char *trace_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- files (file.c) ------------------------------------------------------ */

/*
 * Open path (relative to dir_fd, or AT_FDCWD) for reading without blocking,
 * and only if it is a regular file: a FIFO, socket or device gives EINVAL, a
 * directory EISDIR. Returns the fd (O_CLOEXEC; the caller closes) and its
 * size in *size when size is not NULL, or -1 with errno.
 */
int cg_file_open_regular(int dir_fd, const char *path, off_t *size);

/*
 * Read a whole regular file of at most cap bytes (else EFBIG), opened as
 * cg_file_open_regular does. 0 with *p (NUL-terminated, caller frees) and
 * *len, or -1 with errno.
 */
int cg_file_read(const char *path, size_t cap, char **p, size_t *len);
/* The same with path relative to the directory dir_fd (openat), one path walk per directory. */
int cg_file_read_at(int dir_fd, const char *path, size_t cap, char **p, size_t *len);
/*
 * mkdir -p: every missing directory of path, those above the last with mode
 * parents, the last with mode (umask applies; existing ones are left as
 * they are). 0, or -1 with errno (ENAMETOOLONG past PATH_MAX).
 */
int cg_mkdirs(const char *path, mode_t parents, mode_t mode);

/*
 * May nobody but this process's euid (and root) change what path names?
 * Every step from / to path, as written and once resolved, must be owned by
 * root or the euid and writable by nobody else: a directory with the sticky
 * bit (/tmp) may be writable by others on the way, since they cannot rename
 * what is not theirs there, and as the last step too when sticky_last; a
 * daemon that is not root also takes a step writable by its own egid (a
 * private user group). 0; or -1 with errno (EPERM: why names the step, its
 * owner and mode; else what the walk met).
 */
int cg_dir_trusted(const char *path, bool sticky_last, char *why, size_t why_len);

/*
 * cg_mkdirs for a directory the daemon will trust: the deepest part of path
 * that exists must be trusted first (cg_dir_trusted, a sticky one such as
 * /tmp allowed), so that nothing is made through another user's link; then
 * path itself once made (sticky_last as given). 0, or -1 with errno and why.
 */
int cg_mkdirs_trusted(const char *path, mode_t parents, mode_t mode, bool sticky_last, char *why,
		      size_t why_len);

/*
 * The birth time of path (relative to dirfd; "" for dirfd itself, which may
 * be an O_PATH descriptor), in ns since the epoch, from statx; 0 when the
 * file system keeps none or statx fails. Tells a directory from another
 * one made later at the same path on a reused inode number.
 */
int64_t cg_dir_btime_ns(int dirfd, const char *path);
/* Is absolute path p the tree t or below it (as written: no link is followed)? */
bool cg_path_under(const char *p, const char *t);
/* Are the bytes [from, to) of fd all zero (and all readable)? */
bool cg_file_zeros(int fd, uint64_t from, uint64_t to);
/*
 * Space held past the end of an append-only file: with end + need about to be
 * written, keep [end, end + need + ahead) allocated (FALLOC_FL_KEEP_SIZE: the
 * size, so every reader, is unchanged), renewed once less than half of ahead
 * is left; *held is where the allocation reaches. Appends there cannot fail
 * for want of space when something else fills the file system. Best effort:
 * a file system that cannot allocate ahead, or is full, changes nothing.
 * cg_file_release_ahead gives back what lies past the file's real size (a
 * truncate to that size: only the file's one writer may call it).
 */
void cg_file_hold_ahead(int fd, uint64_t end, size_t need, uint64_t ahead, uint64_t *held);
void cg_file_release_ahead(int fd, uint64_t *held);
/* More than any hold reaches past a file's end: with *held = size + this, a release
 * gives back what a run killed before its own release held. */
#define CG_FILE_HOLD_SWEEP ((uint64_t)128 << 20)
/* The same from byte offset from on (ERANGE when the file is shorter than from). */
int cg_file_read_from(const char *path, uint64_t from, size_t cap, char **p, size_t *len);

/*
 * Write path atomically: the bytes go to a temporary file created 0600 (so
 * secret bytes are never readable by others), are fsynced, get mode, and
 * then replace path (rename), or, when exclusive, are linked to path only if
 * it does not exist (EEXIST). 0, or -1 with errno; no temporary file is left.
 */
int cg_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
			 bool exclusive);

/* ---- a string-keyed map (map.c); values are owned by the caller ---------- */

struct cg_smap;
/* A new empty map (free with cg_smap_free), or NULL on ENOMEM. */
struct cg_smap *cg_smap_new(void);
/* Free the map and its key copies; free_value (may be NULL) is called on each value. */
void cg_smap_free(struct cg_smap *m, void (*free_value)(void *));
/* The value stored under key, or NULL. */
void *cg_smap_get(struct cg_smap *m, const char *key);
/* Insert or replace (the key is copied); 0 or -1 (ENOMEM). */
int cg_smap_put(struct cg_smap *m, const char *key, void *value);
/* Remove and return the value (NULL when absent). */
void *cg_smap_del(struct cg_smap *m, const char *key);
/* Call fn for every entry, in no particular order. */
void cg_smap_each(struct cg_smap *m, void (*fn)(const char *key, void *value, void *arg),
		  void *arg);
size_t cg_smap_count(const struct cg_smap *m);
/* FNV-1a over a NUL-terminated string: the one string hash of the tree. */
uint64_t cg_hash_str(const char *s);

/* Free the first n strings of v, then v. */
void cg_strv_free(char **v, size_t n);

/* ---- work spread over CPUs (util.c) -------------------------------------- */

/*
 * fn(i, arg) once for each i in [0, n), on one thread per CPU this process
 * may run on (at most 8) with at least grain items per thread. fn must only
 * write what item i owns. The calling thread takes items too, so all n run
 * even when no thread can be started. Returns when every item is done.
 */
void cg_parallel_for(size_t n, size_t grain, void (*fn)(size_t i, void *arg), void *arg);

#endif
