/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/base: the one file reader (a planted FIFO or device is
 * refused at once, never read; the cap holds), the atomic writer, and the
 * one string map (insert, replace, delete with back-shifting, growth).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static char dir[] = "/tmp/cg-test-base-XXXXXX";

static void setup(void)
{
	snprintf(dir, sizeof(dir), "%s", "/tmp/cg-test-base-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

TestSuite(base, .init = setup);

static void path_in(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

Test(base, fifo_is_refused_without_blocking, .timeout = 5)
{
	char p[256];
	path_in(p, sizeof(p), "fifo");
	cr_assert_eq(mkfifo(p, 0600), 0);
	char *buf = NULL;
	size_t len = 0;
	/* Without O_NONBLOCK this open would wait for a writer until the timeout. */
	cr_assert_eq(cg_file_read(p, 1024, &buf, &len), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(buf);
	cr_assert_eq(cg_file_open_regular(AT_FDCWD, "/dev/zero", NULL), -1);
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(cg_file_open_regular(AT_FDCWD, dir, NULL), -1);
	cr_assert_eq(errno, EISDIR);
}

Test(base, read_caps_and_reads_whole)
{
	char p[256];
	path_in(p, sizeof(p), "f");
	cr_assert_eq(cg_file_write_atomic(p, "hello", 5, 0640, false), 0);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0640);
	char *buf = NULL;
	size_t len = 0;
	cr_assert_eq(cg_file_read(p, 5, &buf, &len), 0);
	cr_assert_eq(len, 5);
	cr_assert_str_eq(buf, "hello");
	free(buf);
	cr_assert_eq(cg_file_read(p, 4, &buf, &len), -1);
	cr_assert_eq(errno, EFBIG);
	/* exclusive never replaces an existing file */
	cr_assert_eq(cg_file_write_atomic(p, "x", 1, 0600, true), -1);
	cr_assert_eq(errno, EEXIST);
	cr_assert_eq(cg_file_read(p, 100, &buf, &len), 0);
	cr_assert_str_eq(buf, "hello");
	free(buf);
}

/* One duration reader for the CLI and the daemon (callgated --approval-timeout 5s). */
Test(base, durations)
{
	int64_t ms = 0;
	cr_assert_eq(cg_parse_duration_ms("1500", 1, true, 86400000, &ms), 0);
	cr_assert_eq(ms, 1500);
	cr_assert_eq(cg_parse_duration_ms("5s", 1, true, 86400000, &ms), 0);
	cr_assert_eq(ms, 5000);
	cr_assert_eq(cg_parse_duration_ms("2m", 1, true, 86400000, &ms), 0);
	cr_assert_eq(ms, 120000);
	cr_assert_eq(cg_parse_duration_ms("250ms", 1, true, 86400000, &ms), 0);
	cr_assert_eq(ms, 250);
	cr_assert_eq(cg_parse_duration_ms("30", 1000, false, 86400000, &ms), 0);
	cr_assert_eq(ms, 30000);
	cr_assert_eq(cg_parse_duration_ms("250ms", 1000, false, 86400000, &ms), -1);
	cr_assert_eq(cg_parse_duration_ms("2d", 1, true, 86400000, &ms), -1); /* past max */
	cr_assert_eq(cg_parse_duration_ms("0s", 1, true, 86400000, &ms), -1);
	cr_assert_eq(cg_parse_duration_ms("-5", 1, true, 86400000, &ms), -1);
	cr_assert_eq(cg_parse_duration_ms("5x", 1, true, 86400000, &ms), -1);
	cr_assert_eq(cg_parse_duration_ms("", 1, true, 86400000, &ms), -1);
}

Test(base, map_put_get_del_and_grow)
{
	struct cg_smap *m = cg_smap_new();
	cr_assert_not_null(m);
	char key[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		cr_assert_eq(cg_smap_put(m, key, (void *)(intptr_t)(i + 1)), 0);
	}
	cr_assert_eq(cg_smap_count(m), 1000);
	/* Delete every other key: the survivors must all still be found. */
	for (int i = 0; i < 1000; i += 2) {
		snprintf(key, sizeof(key), "k%d", i);
		cr_assert_eq((intptr_t)cg_smap_del(m, key), i + 1);
	}
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		intptr_t want = i % 2 ? i + 1 : 0;
		cr_assert_eq((intptr_t)cg_smap_get(m, key), want, "key %s", key);
	}
	cr_assert_eq(cg_smap_count(m), 500);
	cr_assert_eq(cg_smap_put(m, "k1", (void *)7), 0); /* replace */
	cr_assert_eq((intptr_t)cg_smap_get(m, "k1"), 7);
	cr_assert_eq(cg_smap_count(m), 500);
	cr_assert_null(cg_smap_del(m, "absent"));
	cg_smap_free(m, NULL);
}

struct par_count {
	unsigned *hits;
	pthread_t *by;
	pthread_t caller;
	int other; /* an item ran on another thread (atomic) */
	bool wait_for_other;
};

static void par_hit(size_t i, void *arg)
{
	struct par_count *c = arg;
	__atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
	c->by[i] = pthread_self();
	if (!pthread_equal(c->by[i], c->caller)) {
		__atomic_store_n(&c->other, 1, __ATOMIC_RELEASE);
		return;
	}
	/* The caller's first item waits (up to 10 s) for another thread to take one. */
	for (int ms = 0; c->wait_for_other && ms < 10000; ms++) {
		if (__atomic_load_n(&c->other, __ATOMIC_ACQUIRE))
			break;
		usleep(1000);
	}
	c->wait_for_other = false;
}

/*
 * cg_parallel_for runs every item exactly once, for counts around its grain
 * and with no item at all. With more than one CPU, another thread takes items
 * while the caller's first one waits for it; pinned to one CPU, only the
 * caller runs them.
 */
Test(base, parallel_for_runs_each_item_once)
{
	static const size_t counts[] = { 0, 1, 2, 255, 256, 257, 1000, 100000 };
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		size_t n = counts[k];
		struct par_count c = { calloc(n + 1, sizeof(unsigned)),
				       calloc(n + 1, sizeof(pthread_t)), pthread_self(), 0, false };
		cr_assert(c.hits && c.by);
		cg_parallel_for(n, 256, par_hit, &c);
		for (size_t i = 0; i < n; i++)
			cr_assert_eq(c.hits[i], 1, "n %zu: item %zu ran %u times", n, i, c.hits[i]);
		cr_assert_eq(c.hits[n], 0, "n %zu: an item past the end ran", n);
		free(c.hits);
		free(c.by);
	}
	cpu_set_t all, one;
	cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	size_t n = 1000;
	struct par_count c = { calloc(n, sizeof(unsigned)), calloc(n, sizeof(pthread_t)),
			       pthread_self(), 0, true };
	cr_assert(c.hits && c.by);
	if (CPU_COUNT(&all) > 1) {
		cg_parallel_for(n, 256, par_hit, &c);
		cr_assert(__atomic_load_n(&c.other, __ATOMIC_ACQUIRE),
			  "%d CPUs, and no other thread took an item", CPU_COUNT(&all));
	}
	CPU_ZERO(&one);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &all)) {
			CPU_SET(cpu, &one);
			break;
		}
	c.other = 0;
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	cg_parallel_for(n, 256, par_hit, &c);
	cr_assert_eq(sched_setaffinity(0, sizeof(all), &all), 0);
	for (size_t i = 0; i < n; i++)
		cr_assert(pthread_equal(c.by[i], pthread_self()),
			  "pinned to one CPU, item %zu ran on another thread", i);
	free(c.hits);
	free(c.by);
}

/* cg_file_zeros: zeros across read windows; one byte is enough to say no; past the end is no. */
Test(base, file_zeros_finds_one_byte_and_the_end)
{
	FILE *f = tmpfile();
	cr_assert_not_null(f);
	int fd = fileno(f);
	cr_assert_eq(ftruncate(fd, 200000), 0);
	cr_assert(cg_file_zeros(fd, 0, 200000));
	cr_assert(cg_file_zeros(fd, 5, 5), "an empty range");
	cr_assert_eq(pwrite(fd, "x", 1, 131073), 1);
	cr_assert_not(cg_file_zeros(fd, 0, 200000));
	cr_assert_not(cg_file_zeros(fd, 131073, 131074));
	cr_assert(cg_file_zeros(fd, 131074, 200000));
	cr_assert_not(cg_file_zeros(fd, 199999, 200001), "bytes past the end");
	fclose(f);
}

/* cg_test_knob: only a whole number from 1 to max counts; anything else is the default. */
Test(base, test_knob_takes_only_a_number_in_range)
{
	const char *n = "CALLGATE_TEST_UNIT_KNOB";
	(void)unsetenv(n);
	cr_assert_eq(cg_test_knob(n, 7, 100), 7);
	static const struct {
		const char *v;
		long want;
	} cases[] = { { "12", 12 }, { "100", 100 }, { "101", 7 }, { "0", 7 },
		      { "-3", 7 },  { "12x", 7 },   { "", 7 },	  { "x", 7 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(setenv(n, cases[i].v, 1), 0);
		cr_assert_eq(cg_test_knob(n, 7, 100), cases[i].want, "%s", cases[i].v);
	}
	(void)unsetenv(n);
}

Test(base, mkdirs_makes_each_level_with_its_mode)
{
	char root[] = "/tmp/cg-mkdirs-XXXXXX";
	cr_assert_not_null(mkdtemp(root));
	mode_t old = umask(0);
	char deep[128], mid[128];
	snprintf(deep, sizeof(deep), "%s/a/b/c", root);
	snprintf(mid, sizeof(mid), "%s/a/b", root);
	cr_assert_eq(cg_mkdirs(deep, 0751, 0700), 0);
	cr_assert_eq(cg_mkdirs(deep, 0751, 0700), 0, "an existing path is not an error");
	umask(old);
	struct stat st;
	cr_assert_eq(stat(deep, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0700);
	cr_assert_eq(stat(mid, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0751);
	/* A file in the way is an error, not a directory made elsewhere. */
	char file[160];
	snprintf(file, sizeof(file), "%s/f", root);
	FILE *f = fopen(file, "w");
	cr_assert_not_null(f);
	fclose(f);
	char under[200];
	snprintf(under, sizeof(under), "%s/x", file);
	cr_assert_eq(cg_mkdirs(under, 0755, 0755), -1);
	cr_assert_eq(errno, ENOTDIR);
	char *longp = malloc(PATH_MAX + 8);
	cr_assert_not_null(longp);
	memset(longp, 'a', PATH_MAX + 7);
	longp[0] = '/';
	longp[PATH_MAX + 7] = '\0';
	cr_assert_eq(cg_mkdirs(longp, 0755, 0755), -1);
	cr_assert_eq(errno, ENAMETOOLONG);
	free(longp);
	(void)unlink(file);
	(void)rmdir(deep);
	(void)rmdir(mid);
	snprintf(mid, sizeof(mid), "%s/a", root);
	(void)rmdir(mid);
	(void)rmdir(root);
}

static bool uuid4_shaped(const char *s)
{
	if (strlen(s) != 36 || s[14] != '4' || !strchr("89ab", s[19]))
		return false;
	for (int i = 0; i < 36; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
			return false;
	}
	return true;
}

/*
 * Ids come from a per-thread pool of random bytes: each is a UUIDv4, none
 * repeats across several refills, and a forked child (which inherits the
 * parent's pool) draws bytes of its own, not the ids the parent draws next.
 */
Test(base, uuid4_from_the_pool_never_repeats_even_across_fork)
{
	enum { N = 2000 };
	static char ids[N][40];
	for (int i = 0; i < N; i++) {
		cr_assert_eq(cg_uuid4(ids[i], sizeof(ids[i])), 0);
		cr_assert(uuid4_shaped(ids[i]), "%s", ids[i]);
		for (int j = 0; j < i; j++)
			cr_assert_str_neq(ids[i], ids[j], "id %d repeats id %d", i, j);
	}
	char small[36];
	cr_expect_eq(cg_uuid4(small, sizeof(small)), -1, "a buffer under 37 bytes is refused");
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char child[40] = "";
		(void)cg_uuid4(child, sizeof(child));
		ssize_t w = write(fds[1], child, sizeof(child));
		_exit(w == (ssize_t)sizeof(child) ? 0 : 1);
	}
	char child[40] = "", next[40] = "";
	cr_assert_eq(read(fds[0], child, sizeof(child)), (ssize_t)sizeof(child));
	cr_assert_eq(cg_uuid4(next, sizeof(next)), 0);
	cr_expect(uuid4_shaped(child), "%s", child);
	cr_expect_str_neq(child, next, "the child handed out the parent's next id");
	close(fds[0]);
	close(fds[1]);
}

/* One decoder and one list of what a person cannot see, for the wire and every screen. */
Test(base, utf8_and_hidden_characters)
{
	uint32_t c = 0;
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xe3\x85\xa4", 3, &c), 3);
	cr_assert_eq(c, 0x3164);
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xc0\xaf", 2, &c), 0, "overlong");
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xed\xa0\x80", 3, &c), 0, "surrogate");
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xe3\x85", 2, &c), 0, "cut short");
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xf4\x90\x80\x80", 4, &c), 0, "> 10FFFF");
	cr_assert_eq(cg_utf8_next((const unsigned char *)"\xf0\x9f\x98\x80", 4, &c), 4);
	cr_assert_eq(c, 0x1f600);
	static const struct {
		uint32_t cp;
		const char *cls;
	} t[] = { { 0x1b, "control" },
		  { 0x85, "control" },
		  { 0x202e, "bidi" },
		  { 0x2067, "bidi" },
		  { 0x2028, "separator" },
		  { 0xe0041, "tag" },
		  { 0xfe0f, "variation" },
		  { 0xe0100, "variation" },
		  { 0x180b, "variation" },
		  { 0x200b, "zero-width" },
		  { 0x034f, "zero-width" },
		  { 0x3164, "zero-width" },
		  { 0x115f, "zero-width" },
		  { 0xffa0, "zero-width" },
		  { 0x206a, "zero-width" },
		  { 0x17b4, "zero-width" },
		  { 0x1d173, "zero-width" },
		  { 0xfff9, "zero-width" },
		  { 'a', NULL },
		  { 0x00e9, NULL },
		  { 0x3042, NULL },
		  { 0x1f600, NULL },
		  { 0x2764, NULL } };
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		const char *got = cg_unicode_hidden(t[i].cp);
		if (t[i].cls)
			cr_assert(got && strcmp(got, t[i].cls) == 0, "U+%04X: %s",
				  (unsigned)t[i].cp, got ? got : "visible");
		else
			cr_assert_null(got, "U+%04X: %s", (unsigned)t[i].cp, got);
	}
}
