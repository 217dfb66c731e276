/* SPDX-License-Identifier: MIT */
/*
 * bench_egress — what the gate's egress proxy (src/egress/) adds, in one run,
 * side by side, both to loopback servers:
 *
 *   set-up: connect + one small HTTP exchange, direct vs through the proxy
 *           (CONNECT to a pinned, allowed name, then the same exchange);
 *   bulk:   a 100 MiB download, direct vs through the proxy.
 *
 * The proxy runs as for a call: cg_egress_start on a plan whose constraint
 * set is a host list. Instead of a stage's namespace, the benchmark makes
 * the listener itself and hands it over the plan's fd, as a child would.
 *
 * Usage: bench_egress [--quick] [--json FILE]   (as root: a host-list plan
 * needs to be able to make network namespaces)
 * Targets (issue 13): <= 1 ms added per connection; >= 0.8x direct throughput.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "confine.h"
#include "egress.h"
#include "util.h"

#define BULK_BYTES (100ull << 20)

static const char small_reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

struct server {
	int fd;
	uint16_t port;
	bool bulk;
};

static int listen_loopback(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
		perror("bench_egress: listen");
		exit(1);
	}
	*port = ntohs(a.sin_port);
	return fd;
}

/* Read a request head, answer it (small, or BULK_BYTES of zeros), close. */
static void *serve(void *arg)
{
	struct server *s = arg;
	static char zeros[1 << 16];
	for (;;) {
		int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		char head[4096];
		size_t n = 0;
		while (n < sizeof(head) - 1) {
			ssize_t r = read(c, head + n, sizeof(head) - 1 - n);
			if (r <= 0)
				break;
			n += (size_t)r;
			head[n] = '\0';
			if (strstr(head, "\r\n\r\n"))
				break;
		}
		if (!s->bulk) {
			(void)!write(c, small_reply, sizeof(small_reply) - 1);
		} else {
			for (uint64_t left = BULK_BYTES; left;) {
				ssize_t w =
				    write(c, zeros, left < sizeof(zeros) ? left : sizeof(zeros));
				if (w <= 0)
					break;
				left -= (uint64_t)w;
			}
		}
		close(c);
	}
	return NULL;
}

static int dial(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("bench_egress: connect");
		exit(1);
	}
	return fd;
}

static void send_all(int fd, const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t w = write(fd, s, n);
		if (w <= 0) {
			perror("bench_egress: write");
			exit(1);
		}
		s += w;
		n -= (size_t)w;
	}
}

/* Read the proxy's answer to CONNECT, exactly up to its blank line. */
static void read_established(int fd)
{
	char buf[256];
	size_t n = 0;
	while (n < sizeof(buf) - 1) {
		if (read(fd, buf + n, 1) != 1)
			break;
		buf[++n] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0) {
		fprintf(stderr, "bench_egress: the proxy refused: %s\n", buf);
		exit(1);
	}
}

/* One exchange: connect (through the proxy when proxy_port), GET, read to EOF. */
static uint64_t exchange(uint16_t proxy_port, uint16_t port)
{
	int fd = dial(proxy_port ? proxy_port : port);
	char req[160];
	if (proxy_port) {
		snprintf(req, sizeof(req),
			 "CONNECT bench.test:%u HTTP/1.1\r\nHost: bench.test:%u\r\n\r\n", port,
			 port);
		send_all(fd, req);
		read_established(fd);
	}
	send_all(fd, "GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n");
	static char buf[1 << 16];
	uint64_t got = 0;
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r <= 0)
			break;
		got += (uint64_t)r;
	}
	close(fd);
	return got;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	bool quick = false;
	const char *json_path = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json_path = argv[++i];
		else {
			fprintf(stderr, "usage: bench_egress [--quick] [--json FILE]\n");
			return 64;
		}
	}
	struct server small = { 0 }, bulk = { .bulk = true };
	small.fd = listen_loopback(&small.port);
	bulk.fd = listen_loopback(&bulk.port);
	pthread_t t;
	pthread_create(&t, NULL, serve, &small);
	pthread_create(&t, NULL, serve, &bulk);

	/* The plan of a call allowed bench.test on both ports, pinned to loopback. */
	char a1[32], a2[32];
	snprintf(a1, sizeof(a1), "bench.test:%u", small.port);
	snprintf(a2, sizeof(a2), "bench.test:%u", bulk.port);
	struct cg_host_entry allow[] = { { "bench.test", small.port },
					 { "bench.test", bulk.port } };
	struct cg_host_pin pin[] = { { "bench.test", "127.0.0.1" } };
	struct cg_constraints c = { .net = CG_NET_HOSTS,
				    .allow_hosts = allow,
				    .n_allow_hosts = 2,
				    .pins = pin,
				    .n_pins = 1,
				    .timeout_ms = CG_LIMIT_UNSET };
	c.limits = (struct cg_limits){ CG_LIMIT_UNSET, CG_LIMIT_UNSET, CG_LIMIT_UNSET,
				       CG_LIMIT_UNSET, CG_LIMIT_UNSET };
	const struct cg_constraints *sets[] = { &c };
	struct cg_confine_plan *plan = NULL;
	struct cg_egress *eg = NULL;
	struct cg_reply *err = NULL;
	if (cg_confine_prepare(sets, 1, NULL, &plan, &err) != 0 ||
	    cg_egress_start(plan, "bench", &eg, &err) != 0 || !eg) {
		char *m = err ? cg_reply_message(err) : NULL;
		fprintf(stderr, "bench_egress: cannot start the proxy: %s\n", m ? m : "?");
		return 1;
	}
	/* Hand the proxy a listener, as a stage's child does from its namespace. */
	uint16_t proxy_port = 0;
	int ls = listen_loopback(&proxy_port);
	char byte = 'L';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &ls, sizeof(int));
	if (sendmsg(cg_confine_egress_fd(plan), &m, 0) != 1) {
		perror("bench_egress: sendmsg");
		return 1;
	}
	close(ls);

	int n = quick ? 40 : 400;
	int64_t *direct = calloc((size_t)n, sizeof(int64_t));
	int64_t *proxied = calloc((size_t)n, sizeof(int64_t));
	(void)exchange(proxy_port, small.port); /* warm up both paths */
	(void)exchange(0, small.port);
	for (int i = 0; i < n; i++) { /* interleaved, so load hits both alike */
		int64_t t0 = cg_now_mono_ns();
		(void)exchange(0, small.port);
		int64_t t1 = cg_now_mono_ns();
		(void)exchange(proxy_port, small.port);
		int64_t t2 = cg_now_mono_ns();
		direct[i] = t1 - t0;
		proxied[i] = t2 - t1;
	}
	qsort(direct, (size_t)n, sizeof(int64_t), cmp_i64);
	qsort(proxied, (size_t)n, sizeof(int64_t), cmp_i64);
	double d_med = (double)direct[n / 2] / 1e3, p_med = (double)proxied[n / 2] / 1e3;
	double d_p99 = (double)direct[n * 99 / 100] / 1e3,
	       p_p99 = (double)proxied[n * 99 / 100] / 1e3;

	int rounds = quick ? 1 : 3;
	double best_d = 0, best_p = 0;
	for (int i = 0; i < rounds; i++) {
		int64_t t0 = cg_now_mono_ns();
		uint64_t gd = exchange(0, bulk.port);
		int64_t t1 = cg_now_mono_ns();
		uint64_t gp = exchange(proxy_port, bulk.port);
		int64_t t2 = cg_now_mono_ns();
		if (gd != BULK_BYTES || gp != BULK_BYTES) {
			fprintf(stderr, "bench_egress: short transfer (%llu, %llu bytes)\n",
				(unsigned long long)gd, (unsigned long long)gp);
			return 1;
		}
		double md = (double)BULK_BYTES / (1 << 20) / ((double)(t1 - t0) / 1e9);
		double mp = (double)BULK_BYTES / (1 << 20) / ((double)(t2 - t1) / 1e9);
		best_d = md > best_d ? md : best_d;
		best_p = mp > best_p ? mp : best_p;
	}
	json_t *records = cg_egress_stop(eg);
	size_t n_records = json_array_size(records);
	json_decref(records);
	cg_confine_plan_free(plan);

	printf("egress proxy, %d connections each way (interleaved), loopback servers\n", n);
	printf("  connect + small HTTP exchange  direct %8.1f us (p99 %8.1f)  proxied %8.1f us "
	       "(p99 %8.1f)  added %+.1f us\n",
	       d_med, d_p99, p_med, p_p99, p_med - d_med);
	printf("  100 MiB download (best of %d)   direct %8.0f MiB/s  proxied %8.0f MiB/s  "
	       "ratio %.2fx\n",
	       rounds, best_d, best_p, best_p / best_d);
	printf("  records kept by the proxy: %zu\n", n_records);
	if (json_path) {
		FILE *f = fopen(json_path, "w");
		if (!f)
			return 1;
		fprintf(f,
			"{\"connect_direct_us\": %.1f, \"connect_proxied_us\": %.1f, "
			"\"connect_added_us\": %.1f, \"connect_proxied_p99_us\": %.1f, "
			"\"bulk_direct_mib_s\": %.1f, \"bulk_proxied_mib_s\": %.1f, "
			"\"records\": %zu}\n",
			d_med, p_med, p_med - d_med, p_p99, best_d, best_p, n_records);
		fclose(f);
	}
	return 0;
}
