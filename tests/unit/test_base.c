/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/base: the one file reader (a planted FIFO or device is
 * refused at once, never read; the cap holds), the atomic writer, and the
 * one string map (insert, replace, delete with back-shifting, growth).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
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
