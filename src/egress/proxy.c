/* SPDX-License-Identifier: MIT */
/*
 * proxy — the gate's egress proxy for one call (see egress.h): a thread that
 * collects the stages' listeners and accepts, and a thread per connection
 * that reads the request head, has egress_rule judge it, and relays.
 */
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress_rule.h"
#include "netns.h"
#include "util.h"
#include "tls.h"

#define MAX_SETS      64
#define MAX_LISTENERS 64
#define HEAD_MAX      16384
#define STEP_MS	      10000	    /* reading a head, connecting, a TLS hello */
#define IDLE_MS	      300000	    /* a relayed connection with no traffic */
#define RELAY_CHUNK   (1024 * 1024) /* bytes per splice, and the pipes' size */

#define PROXY_URL "http://127.0.0.1:3128"
const char *const cg_egress_env[] = {
	"HTTP_PROXY=" PROXY_URL,
	"HTTPS_PROXY=" PROXY_URL,
	"ALL_PROXY=" PROXY_URL,
	"http_proxy=" PROXY_URL,
	"https_proxy=" PROXY_URL,
	"all_proxy=" PROXY_URL,
	"NO_PROXY=",
	"no_proxy=",
	NULL,
};

struct cg_egress {
	const struct cg_constraints *sets[MAX_SETS];
	size_t n_sets;
	char *rule_id;
	struct cg_confine_plan *plan;
	int ctl[2]; /* [0] ours, [1] the children's */
	int stop_fd;
	int listeners[MAX_LISTENERS];
	size_t n_listeners;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned active;
	json_t *records;
	size_t over_cap; /* refused unserved past CG_EGRESS_MAX_RECORDS */
};

/* One connection and what its record will say. */
struct conn {
	struct cg_egress *e;
	int client, upstream;
	int stage;
	char host[CG_HOST_NAME_MAX + 1];
	uint16_t port;
	char address[INET6_ADDRSTRLEN];
	char sni[CG_HOST_NAME_MAX + 1];
	bool allowed;
	struct cg_reply *reply; /* the answer: allowed, refused or failed */
	uint64_t bytes_out, bytes_in;
	int64_t started_ns;
	char head[HEAD_MAX + 1];
	size_t len, head_len; /* bytes read; of them, the head */
};

/* Wait for fd to be ready for events; 1 ready, 0 timed out or stopped, -1 error. */
static int wait_fd(const struct cg_egress *e, int fd, short events, int timeout_ms)
{
	struct pollfd p[2] = { { fd, events, 0 }, { e->stop_fd, POLLIN, 0 } };
	int r;
	do
		r = poll(p, 2, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -1;
	if (r == 0 || p[1].revents)
		return 0;
	return 1;
}

static int write_all(const struct cg_egress *e, int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (wait_fd(e, fd, POLLOUT, STEP_MS) != 1)
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

/* Read until the end of the request head. 0, or -1 with a reason in *why. */
static int read_head(struct conn *c, const char **why)
{
	while (c->len < HEAD_MAX) {
		c->head[c->len] = '\0';
		char *end = strstr(c->head, "\r\n\r\n");
		if (end) {
			c->head_len = (size_t)(end - c->head) + 4;
			return 0;
		}
		if (wait_fd(c->e, c->client, POLLIN, STEP_MS) != 1) {
			*why = "no complete request head in time";
			return -1;
		}
		ssize_t r = recv(c->client, c->head + c->len, HEAD_MAX - c->len, 0);
		if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) {
			*why = "the client closed before a request head";
			return -1;
		}
		if (r > 0) {
			if (memchr(c->head + c->len, '\0', (size_t)r)) {
				*why = "a NUL byte in the request head";
				return -1;
			}
			c->len += (size_t)r;
		}
	}
	*why = "the request head is larger than 16 KiB";
	return -1;
}

/*
 * How many times header name appears in the head (after the request line);
 * *val and *len get the first one's value.
 */
static int header(const struct conn *c, const char *name, const char **val, size_t *len)
{
	size_t nl = strlen(name);
	int count = 0;
	const char *p = strstr(c->head, "\r\n");
	while (p && p + 2 < c->head + c->head_len - 2) {
		p += 2;
		const char *eol = strstr(p, "\r\n");
		if (!eol)
			break;
		if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':' &&
		    count++ == 0) {
			const char *v = p + nl + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			const char *ve = eol;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			*val = v;
			*len = (size_t)(ve - v);
		}
		p = eol;
	}
	return count;
}

/* An RFC 9110 token character: what a header field's name is made of. */
static bool tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/*
 * A head the proxy can judge the same way as the server: every line ends in
 * CRLF (no bare LF or CR), none is folded onto the one before (a line
 * starting with a space or tab), and every header line is a field name of
 * token characters, then ':' at once ("Host :" is not a Host header to
 * header(), but some servers take it for one). So no header hides from
 * header().
 */
static bool head_plain(const struct conn *c)
{
	for (size_t i = 0; i + 2 < c->head_len; i++) {
		char ch = c->head[i];
		if ((ch == '\n' && (i == 0 || c->head[i - 1] != '\r')) ||
		    (ch == '\r' && c->head[i + 1] != '\n'))
			return false;
		if (ch == '\n' && (c->head[i + 1] == ' ' || c->head[i + 1] == '\t'))
			return false;
	}
	/* The header lines: after the request line, before the empty line that ends the head. */
	const char *p = strstr(c->head, "\r\n");
	const char *end = c->head + c->head_len - 2;
	while (p && p + 2 < end) {
		p += 2;
		size_t name = 0;
		while (p + name < end && tchar((unsigned char)p[name]))
			name++;
		if (name == 0 || p[name] != ':')
			return false;
		p = strstr(p, "\r\n");
	}
	return true;
}

/* The class of an address the policy must name to reach, or NULL (public). */
static const char *v4_class(const unsigned char *a)
{
	if (a[0] == 0)
		return "unspecified";
	if (a[0] == 127)
		return "loopback";
	if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168))
		return "private";
	if (a[0] == 100 && (a[1] & 0xc0) == 64)
		return "shared (CGNAT)";
	if (a[0] == 169 && a[1] == 254)
		return a[2] == 169 && a[3] == 254 ? "cloud metadata" : "link-local";
	if (a[0] >= 224)
		return a[0] < 240 ? "multicast" : "reserved";
	if (a[0] == 192 && a[1] == 0 && a[2] == 0)
		return "reserved"; /* IETF protocol assignments */
	if (a[0] == 198 && (a[1] & 0xfe) == 18)
		return "benchmarking (fake-IP resolvers hand these out)";
	if ((a[0] == 192 && a[1] == 0 && a[2] == 2) || (a[0] == 198 && a[1] == 51 && a[2] == 100) ||
	    (a[0] == 203 && a[1] == 0 && a[2] == 113))
		return "documentation";
	return NULL;
}

/*
 * The IPv4 address an IPv6 address carries, where a translator or tunnel
 * would deliver to it: IPv4-mapped (::ffff:0:0/96), IPv4-translated
 * (::ffff:0:0:0/96), the NAT64 well-known prefix (64:ff9b::/96) and 6to4
 * (2002::/16). NULL when it carries none.
 */
static const unsigned char *embedded_v4(const unsigned char a[16])
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const unsigned char translated[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0 };
	static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	if (memcmp(a, mapped, 12) == 0 || memcmp(a, translated, 12) == 0 ||
	    memcmp(a, nat64, 12) == 0)
		return a + 12;
	if (a[0] == 0x20 && a[1] == 0x02)
		return a + 2;
	return NULL;
}

static const char *address_class(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return v4_class((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
	const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	static const unsigned char zero[16] = { 0 };
	static const unsigned char metadata[16] = { 0xfd, 0, 0, 0xec, 2, 0, 0, 0,
						    0,	  0, 0, 0,    0, 0, 2, 0x54 };
	const unsigned char *v4 = embedded_v4(a);
	if (v4)
		return v4_class(v4);
	if (memcmp(a, zero, 16) == 0)
		return "unspecified";
	if (memcmp(a, zero, 15) == 0 && a[15] == 1)
		return "loopback";
	if (memcmp(a, zero, 12) == 0)
		return "reserved"; /* IPv4-compatible (::/96), long deprecated */
	if (a[0] == 0 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 && a[5] == 1)
		return "NAT64 (local use)";
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0)
		return "tunnelled (Teredo)";
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
		return "documentation";
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 2 && a[4] == 0 && a[5] == 0)
		return "benchmarking";
	if (a[0] == 0x01 && a[1] == 0 && memcmp(a + 2, zero, 6) == 0)
		return "discard";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
		return "site-local";
	if (memcmp(a, metadata, 16) == 0)
		return "cloud metadata";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return "link-local";
	if ((a[0] & 0xfe) == 0xfc)
		return "private";
	if (a[0] == 0xff)
		return "multicast";
	return NULL;
}

/* Is a (n bytes) inside the network of address x with netmask m (NULL: x alone)? */
static bool in_network(const unsigned char *a, const unsigned char *x, const unsigned char *m,
		       size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((a[i] ^ x[i]) & (m ? m[i] : 0xff))
			return false;
	return true;
}

/*
 * NULL; "this host's own" when an interface of this machine has the address
 * (or the IPv4 address it carries, embedded_v4); "this host's network" when
 * it lies on the network of one of them (a neighbour, the gateway).
 */
static const char *own_class(const struct sockaddr *sa)
{
	const unsigned char *a6 = NULL, *a4 = NULL;
	if (sa->sa_family == AF_INET) {
		a4 = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else {
		a6 = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		a4 = embedded_v4(a6);
	}
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) != 0)
		return "this host's own (interfaces unreadable)"; /* fail closed */
	const char *cls = NULL;
	for (struct ifaddrs *i = ifs; i && !cls; i = i->ifa_next) {
		const struct sockaddr *x = i->ifa_addr, *m = i->ifa_netmask;
		const unsigned char *xa = NULL, *ma = NULL, *aa = NULL;
		size_t n = 0;
		if (x && x->sa_family == AF_INET && a4) {
			xa = (const unsigned char *)&((const struct sockaddr_in *)x)->sin_addr;
			ma = m && m->sa_family == AF_INET
				 ? (const unsigned char *)&((const struct sockaddr_in *)m)->sin_addr
				 : NULL;
			aa = a4;
			n = 4;
		} else if (x && x->sa_family == AF_INET6 && a6) {
			xa = ((const struct sockaddr_in6 *)x)->sin6_addr.s6_addr;
			ma = m && m->sa_family == AF_INET6
				 ? ((const struct sockaddr_in6 *)m)->sin6_addr.s6_addr
				 : NULL;
			aa = a6;
			n = 16;
		}
		if (!aa)
			continue;
		if (in_network(aa, xa, NULL, n))
			cls = "this host's own";
		else if (ma && in_network(aa, xa, ma, n))
			cls = "this host's network";
	}
	freeifaddrs(ifs);
	return cls;
}

/*
 * sa as the proxy judges and connects to it: an IPv4-mapped IPv6 address
 * becomes the IPv4 address it is, so that every check (the host's own
 * addresses included) and the connection see one family. Its length.
 */
static socklen_t plain_address(const struct sockaddr *sa, socklen_t len,
			       struct sockaddr_storage *out)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		if (memcmp(s6->sin6_addr.s6_addr, mapped, 12) == 0) {
			struct sockaddr_in *s4 = (struct sockaddr_in *)out;
			s4->sin_family = AF_INET;
			s4->sin_port = s6->sin6_port;
			memcpy(&s4->sin_addr, s6->sin6_addr.s6_addr + 12, 4);
			return sizeof(*s4);
		}
	}
	if (len > (socklen_t)sizeof(*out))
		len = sizeof(*out);
	memcpy(out, sa, (size_t)len);
	return len;
}

/* A 403 (or 502) whose body names the code, its layer and the rule. */
static void answer(struct conn *c, int status, const char *text)
{
	const struct cg_reply_def *d = cg_reply_def_of(c->reply);
	char *msg = cg_reply_message(c->reply);
	char body[1024], head[512];
	int bl = snprintf(body, sizeof(body), "callgate: %s (%s layer): %s\n", d->code,
			  cg_layer_name(d->layer), msg ? msg : d->key);
	free(msg);
	if (bl < 0 || (size_t)bl >= sizeof(body))
		bl = (int)sizeof(body) - 1;
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
			  "Content-Length: %d\r\nConnection: close\r\nX-Callgate-Code: %s\r\n\r\n",
			  status, text, bl, d->code);
	if (hl > 0 && (size_t)hl < sizeof(head) &&
	    write_all(c->e, c->client, head, (size_t)hl) == 0)
		(void)write_all(c->e, c->client, body, (size_t)bl);
}

static void refuse(struct conn *c, struct cg_reply *r)
{
	cg_reply_free(c->reply);
	c->reply = r;
	c->allowed = false;
	answer(c, 403, "Forbidden");
}

/* The name and port asked for, judged; a refusal is answered here. */
static bool name_refused(struct conn *c)
{
	struct cg_reply *r =
	    cg_egress_judge_name(c->e->sets, c->e->n_sets, c->host, c->port, c->e->rule_id);
	if (r)
		refuse(c, r);
	return r != NULL;
}

/* Fill addr/port for one candidate; its judgment, NULL when it may be reached. */
static struct cg_reply *judge_candidate(struct conn *c, const struct sockaddr *sa)
{
	const void *raw = sa->sa_family == AF_INET
			      ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
			      : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, raw, c->address, sizeof(c->address)))
		snprintf(c->address, sizeof(c->address), "?");
	const char *cls = address_class(sa);
	if (!cls)
		cls = own_class(sa);
	return cg_egress_judge_address(c->e->sets, c->e->n_sets, c->host, c->port, c->address, cls,
				       c->e->rule_id);
}

/*
 * The address to connect to: the host's own literal, its pin, or what the
 * resolver says, the first candidate the rules let through. 0 with *out
 * filled; -1 with c->reply set (refused or not resolvable).
 */
static int resolve(struct conn *c, struct sockaddr_storage *out, socklen_t *out_len)
{
	const char *pin = cg_egress_pin(c->e->sets, c->e->n_sets, c->host);
	const char *name = pin ? pin : c->host;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = cg_host_is_address(name) ? AI_NUMERICHOST : 0 };
	struct addrinfo *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%u", (unsigned)c->port);
	int gr = getaddrinfo(name, port, &hints, &res);
	if (gr != 0) {
		c->reply =
		    cg_reply_new(CG_R_EGRESS_UPSTREAM_FAILED, "{s:s,s:i,s:s,s:s}", "host", c->host,
				 "port", (int)c->port, "address", "-", "detail", gai_strerror(gr));
		return -1;
	}
	struct cg_reply *first = NULL;
	char first_address[sizeof(c->address)] = "";
	int rc = -1;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		struct sockaddr_storage plain;
		socklen_t plen = plain_address(a->ai_addr, a->ai_addrlen, &plain);
		struct cg_reply *r = judge_candidate(c, (const struct sockaddr *)&plain);
		if (!r) {
			memcpy(out, &plain, plen);
			*out_len = plen;
			rc = 0;
			break;
		}
		if (!first) {
			first = r;
			memcpy(first_address, c->address, sizeof(first_address));
		} else {
			cg_reply_free(r);
		}
	}
	freeaddrinfo(res);
	if (rc == 0) {
		cg_reply_free(first);
		return 0;
	}
	/* The record names the address its refusal names, not the last one tried. */
	if (first)
		memcpy(c->address, first_address, sizeof(c->address));
	c->reply = first ? first
			 : cg_reply_new(CG_R_EGRESS_UPSTREAM_FAILED, "{s:s,s:i,s:s,s:s}", "host",
					c->host, "port", (int)c->port, "address", "-", "detail",
					"no IPv4 or IPv6 address");
	return -1;
}

/* Connect to the judged address. 0, or -1 with c->reply (a failure). */
static int connect_upstream(struct conn *c, const struct sockaddr_storage *sa, socklen_t len)
{
	int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int err = fd < 0 ? errno : 0;
	if (fd >= 0 && connect(fd, (const struct sockaddr *)sa, len) != 0) {
		err = errno;
		if (err == EINPROGRESS) {
			socklen_t el = sizeof(err);
			err = wait_fd(c->e, fd, POLLOUT, STEP_MS) != 1		     ? ETIMEDOUT
			      : getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 ? errno
										     : err;
		}
	}
	if (err == 0) {
		c->upstream = fd;
		return 0;
	}
	if (fd >= 0)
		(void)close(fd);
	cg_reply_free(c->reply);
	c->reply =
	    cg_reply_new(CG_R_EGRESS_UPSTREAM_FAILED, "{s:s,s:i,s:s,s:s}", "host", c->host, "port",
			 (int)c->port, "address", c->address, "detail", cg_errno_name(err));
	return -1;
}

/*
 * Move what one side has now to the other, through a pipe with splice(2)
 * (no copy through user space). Returns bytes moved, 0 at end of stream, -1
 * on an error (or a peer that stopped taking bytes).
 */
static ssize_t move(const struct cg_egress *e, int from, int to, int pipe_fds[2])
{
	ssize_t n =
	    splice(from, NULL, pipe_fds[1], NULL, RELAY_CHUNK, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -2; /* nothing after all: not an end */
	if (n <= 0)
		return n;
	for (ssize_t left = n; left > 0;) {
		ssize_t m = splice(pipe_fds[0], NULL, to, NULL, (size_t)left,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (m > 0)
			left -= m;
		else if (m < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (wait_fd(e, to, POLLOUT, STEP_MS) != 1)
				return -1;
		} else {
			return -1;
		}
	}
	return n;
}

/* Copy both ways until both sides are done, the call ends, or it idles. */
static void relay(struct conn *c)
{
	int pipes[2][2] = { { -1, -1 }, { -1, -1 } };
	bool up_open = pipe2(pipes[0], O_CLOEXEC | O_NONBLOCK) == 0 &&
		       pipe2(pipes[1], O_CLOEXEC | O_NONBLOCK) == 0;
	bool down_open = up_open; /* client->server, server->client */
	for (int i = 0; up_open && i < 2; i++)
		(void)fcntl(pipes[i][1], F_SETPIPE_SZ, RELAY_CHUNK);
	while (up_open || down_open) {
		/* A side that is done is left out (a negative fd), so a hang-up cannot spin. */
		struct pollfd p[3] = { { up_open ? c->client : -1, POLLIN, 0 },
				       { down_open ? c->upstream : -1, POLLIN, 0 },
				       { c->e->stop_fd, POLLIN, 0 } };
		int r = poll(p, 3, IDLE_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || p[2].revents)
			break;
		for (int side = 0; side < 2; side++) {
			bool *open = side == 0 ? &up_open : &down_open;
			if (!*open || !(p[side].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int from = side == 0 ? c->client : c->upstream;
			int to = side == 0 ? c->upstream : c->client;
			ssize_t n = move(c->e, from, to, pipes[side]);
			if (n == -2)
				continue;
			if (n == 0) {
				*open = false;
				(void)shutdown(to, SHUT_WR);
				continue;
			}
			if (n < 0) {
				up_open = down_open = false;
				break;
			}
			*(side == 0 ? &c->bytes_out : &c->bytes_in) += (uint64_t)n;
		}
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			if (pipes[i][k] >= 0)
				(void)close(pipes[i][k]);
}

/* Split "host:port" (CONNECT) or an absolute URI's authority. */
static int parse_authority(struct conn *c, const char *s, size_t n, uint16_t def_port)
{
	char tmp[CG_HOST_NAME_MAX + 16];
	const char *why = NULL;
	if (n == 0 || n >= sizeof(tmp) || memchr(s, '@', n))
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (cg_host_entry_parse(tmp, c->host, sizeof(c->host), &c->port, &why) != 0 ||
	    strchr(c->host, '*'))
		return -1;
	if (!c->port)
		c->port = def_port;
	return c->port ? 0 : -1;
}

/* CONNECT: judge the TLS server name before anything reaches the server. */
static void serve_connect(struct conn *c)
{
	struct sockaddr_storage sa;
	socklen_t sl = 0;
	if (resolve(c, &sa, &sl) != 0) {
		answer(c, c->reply && cg_reply_def_of(c->reply)->layer == CG_LAYER_EN ? 403 : 502,
		       "Refused");
		return;
	}
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	if (write_all(c->e, c->client, ok, sizeof(ok) - 1) != 0)
		return;
	/* Whatever followed the head is the tunnel's first bytes; wait for a hello. */
	size_t have = c->len - c->head_len;
	memmove(c->head, c->head + c->head_len, have);
	c->len = have;
	c->head_len = 0;
	for (;;) {
		enum cg_tls_hello h = cg_tls_hello_sni((const unsigned char *)c->head, c->len,
						       c->sni, sizeof(c->sni));
		if (h == CG_TLS_NOT_TLS || h == CG_TLS_SNI || h == CG_TLS_NO_SNI)
			break;
		if (h == CG_TLS_BAD || c->len >= HEAD_MAX ||
		    wait_fd(c->e, c->client, POLLIN, STEP_MS) != 1) {
			cg_reply_free(c->reply);
			c->reply = cg_egress_bad_request(
			    "the tunnel did not start with a readable TLS hello or other data in "
			    "time",
			    c->e->rule_id);
			c->allowed = false;
			return;
		}
		ssize_t r = recv(c->client, c->head + c->len, HEAD_MAX - c->len, 0);
		if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) {
			/* Closed before a byte to relay: nothing went upstream. */
			cg_reply_free(c->reply);
			c->reply = cg_egress_bad_request(
			    "the client closed the tunnel before sending anything", c->e->rule_id);
			c->allowed = false;
			return;
		}
		if (r > 0)
			c->len += (size_t)r;
	}
	if (c->sni[0] && strcasecmp(c->sni, c->host) != 0) {
		cg_reply_free(c->reply);
		c->reply = cg_egress_mismatch(c->host, c->port, "the TLS server name (SNI)", c->sni,
					      c->e->rule_id);
		c->allowed = false;
		return; /* after the 200 there is no status line to send: close */
	}
	if (connect_upstream(c, &sa, sl) != 0)
		return;
	c->allowed = true;
	if (c->len && write_all(c->e, c->upstream, c->head, c->len) != 0)
		return;
	c->bytes_out += c->len;
	relay(c);
}

/* Plain HTTP forward: one request per connection, Host must agree. */
static void serve_forward(struct conn *c, const char *method, size_t ml, const char *target,
			  size_t tl, const char *version, size_t vl)
{
	const char *auth = target + 7, *path = memchr(auth, '/', tl - 7);
	size_t al = path ? (size_t)(path - auth) : tl - 7;
	if (parse_authority(c, auth, al, 80) != 0) {
		refuse(c, cg_egress_bad_request("the request's URI has no usable host",
						c->e->rule_id));
		return;
	}
	if (name_refused(c))
		return;
	size_t hl = 0;
	const char *hv = NULL;
	const char *xv = NULL;
	size_t xl = 0;
	int n_te = header(c, "Transfer-Encoding", &xv, &xl);
	int n_cl = header(c, "Content-Length", &xv, &xl);
	/* What the server might read as a second request is never forwarded. */
	if (!head_plain(c) || header(c, "Host", &hv, &hl) > 1 || n_cl > 1 || (n_te && n_cl)) {
		refuse(c,
		       cg_egress_bad_request(
			   "a folded line, a bare LF or CR, more than one Host or Content-Length, "
			   "or Content-Length with Transfer-Encoding",
			   c->e->rule_id));
		return;
	}
	struct conn probe;
	probe.e = c->e;
	if (hv && (parse_authority(&probe, hv, hl, 80) != 0 || strcmp(probe.host, c->host) != 0 ||
		   probe.port != c->port)) {
		char shown[CG_HOST_NAME_MAX + 1];
		snprintf(shown, sizeof(shown), "%.*s", (int)(hl < 200 ? hl : 200), hv);
		refuse(c, cg_egress_mismatch(c->host, c->port, "the Host header", shown,
					     c->e->rule_id));
		return;
	}
	struct sockaddr_storage sa;
	socklen_t sl = 0;
	if (resolve(c, &sa, &sl) != 0) {
		bool en = cg_reply_def_of(c->reply)->layer == CG_LAYER_EN;
		answer(c, en ? 403 : 502, en ? "Forbidden" : "Bad Gateway");
		return;
	}
	if (connect_upstream(c, &sa, sl) != 0) {
		answer(c, 502, "Bad Gateway");
		return;
	}
	c->allowed = true;
	/* The request line in origin form, the headers but the hop-by-hop ones. */
	struct cg_buf out;
	cg_buf_init(&out, 2 * HEAD_MAX + 64);
	int rc = 0;
	rc |= cg_buf_add(&out, method, ml);
	rc |= cg_buf_add(&out, " ", 1);
	rc |= path ? cg_buf_add(&out, path, tl - 7 - al) : cg_buf_add(&out, "/", 1);
	rc |= cg_buf_add(&out, " ", 1);
	rc |= cg_buf_add(&out, version, vl);
	rc |= cg_buf_add(&out, "\r\n", 2);
	const char *p = strstr(c->head, "\r\n") + 2;
	while (p < c->head + c->head_len - 2) {
		const char *eol = strstr(p, "\r\n");
		static const char *const drop[] = { "proxy-connection:", "proxy-authorization:",
						    "connection:", "keep-alive:", NULL };
		bool keep = true;
		for (size_t i = 0; drop[i]; i++)
			keep &= strncasecmp(p, drop[i], strlen(drop[i])) != 0;
		if (keep)
			rc |= cg_buf_add(&out, p, (size_t)(eol - p) + 2);
		p = eol + 2;
	}
	static const char close_hdr[] = "Connection: close\r\n\r\n";
	rc |= cg_buf_add(&out, close_hdr, sizeof(close_hdr) - 1);
	rc |= cg_buf_add(&out, c->head + c->head_len, c->len - c->head_len);
	int w = rc || out.truncated ? -1 : write_all(c->e, c->upstream, out.p, out.len);
	c->bytes_out += out.len;
	cg_buf_free(&out);
	if (w == 0)
		relay(c);
}

/* Read the head, dispatch on the method. */
static void serve(struct conn *c)
{
	const char *why = NULL;
	if (read_head(c, &why) != 0) {
		refuse(c, cg_egress_bad_request(why, c->e->rule_id));
		return;
	}
	/* METHOD SP TARGET SP VERSION */
	const char *m = c->head, *sp1 = strchr(m, ' ');
	const char *t = sp1 ? sp1 + 1 : NULL, *sp2 = t ? strchr(t, ' ') : NULL;
	const char *v = sp2 ? sp2 + 1 : NULL, *eol = strstr(c->head, "\r\n");
	if (!sp1 || !sp2 || !eol || sp2 > eol || strncmp(v, "HTTP/1.", 7) != 0) {
		refuse(c, cg_egress_bad_request("not an HTTP/1 proxy request", c->e->rule_id));
		return;
	}
	size_t ml = (size_t)(sp1 - m), tl = (size_t)(sp2 - t), vl = (size_t)(eol - v);
	if (ml == 7 && strncmp(m, "CONNECT", 7) == 0) {
		if (parse_authority(c, t, tl, 0) != 0) {
			refuse(c, cg_egress_bad_request("CONNECT needs HOST:PORT", c->e->rule_id));
			return;
		}
		if (!name_refused(c))
			serve_connect(c);
	} else if (tl > 7 && strncasecmp(t, "http://", 7) == 0) {
		serve_forward(c, m, ml, t, tl, v, vl);
	} else {
		refuse(c, cg_egress_bad_request(
			      "only CONNECT and absolute http:// requests (use CONNECT for https)",
			      c->e->rule_id));
	}
}

static json_t *record_of(const struct conn *c)
{
	const struct cg_reply_def *d = cg_reply_def_of(c->reply);
	char *msg = cg_reply_message(c->reply);
	json_t *o =
	    json_pack("{s:i,s:s,s:i,s:s?,s:s,s:b,s:s,s:s?,s:s?,s:I,s:I,s:I}", "stage", c->stage,
		      "host", c->host[0] ? c->host : "-", "port", (int)c->port, "address",
		      c->address[0] ? c->address : NULL, "rule", c->e->rule_id, "allowed",
		      c->allowed, "code", d->code, "reason", msg, "sni", c->sni[0] ? c->sni : NULL,
		      "bytes_out", (json_int_t)c->bytes_out, "bytes_in", (json_int_t)c->bytes_in,
		      "duration_ms", (json_int_t)((cg_now_mono_ns() - c->started_ns) / 1000000));
	free(msg);
	return o;
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct cg_egress *e = c->e;
	serve(c);
	if (!c->reply)
		c->reply = cg_egress_allowed(c->host, c->port, c->address, e->rule_id);
	json_t *rec = record_of(c);
	(void)close(c->client);
	if (c->upstream >= 0)
		(void)close(c->upstream);
	cg_reply_free(c->reply);
	free(c);
	pthread_mutex_lock(&e->lock);
	if (!rec || json_array_append_new(e->records, rec) != 0)
		cg_log("error", NULL, "egress: a connection record was lost (out of memory)");
	e->active--;
	pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* A stage's listener, sent from inside its namespace. */
static void take_listener(struct cg_egress *e)
{
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	if (recvmsg(e->ctl[0], &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1)
		return;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
	    cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (e->n_listeners < MAX_LISTENERS)
		e->listeners[e->n_listeners++] = fd;
	else
		(void)close(fd);
}

static void take_connection(struct cg_egress *e, size_t li)
{
	int fd = accept4(e->listeners[li], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	struct conn *c = calloc(1, sizeof(*c));
	pthread_mutex_lock(&e->lock);
	bool room = c && e->active < CG_EGRESS_MAX_CONNS;
	bool total = json_array_size(e->records) + e->active < CG_EGRESS_MAX_RECORDS;
	if (room && !total)
		e->over_cap++; /* never served: nothing reached out unrecorded */
	room = room && total;
	if (room)
		e->active++;
	pthread_mutex_unlock(&e->lock);
	if (!room) {
		free(c);
		(void)close(fd); /* over the bound: the client sees a reset */
		return;
	}
	*c = (struct conn){ .e = e,
			    .client = fd,
			    .upstream = -1,
			    .stage = (int)li,
			    .started_ns = cg_now_mono_ns() };
	pthread_attr_t at;
	pthread_t t;
	bool ok = pthread_attr_init(&at) == 0;
	ok = ok && pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 &&
	     pthread_attr_setstacksize(&at, 256 * 1024) == 0 &&
	     pthread_create(&t, &at, conn_thread, c) == 0;
	pthread_attr_destroy(&at);
	if (ok)
		return;
	(void)close(fd);
	free(c);
	pthread_mutex_lock(&e->lock);
	e->active--;
	pthread_cond_broadcast(&e->idle);
	pthread_mutex_unlock(&e->lock);
}

static void *accept_thread(void *arg)
{
	struct cg_egress *e = arg;
	for (;;) {
		struct pollfd p[2 + MAX_LISTENERS];
		p[0] = (struct pollfd){ e->stop_fd, POLLIN, 0 };
		p[1] = (struct pollfd){ e->ctl[0], POLLIN, 0 };
		for (size_t i = 0; i < e->n_listeners; i++)
			p[2 + i] = (struct pollfd){ e->listeners[i], POLLIN, 0 };
		int r = poll(p, 2 + e->n_listeners, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || p[0].revents)
			return NULL;
		size_t n = e->n_listeners;
		if (p[1].revents & POLLIN)
			take_listener(e);
		for (size_t i = 0; i < n; i++)
			if (p[2 + i].revents & POLLIN)
				take_connection(e, i);
	}
}

static void egress_free(struct cg_egress *e)
{
	for (size_t i = 0; i < e->n_listeners; i++)
		(void)close(e->listeners[i]);
	for (int i = 0; i < 2; i++)
		if (e->ctl[i] >= 0)
			(void)close(e->ctl[i]);
	if (e->stop_fd >= 0)
		(void)close(e->stop_fd);
	json_decref(e->records);
	free(e->rule_id);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->idle);
	free(e);
}

int cg_egress_start(struct cg_confine_plan *plan, const char *rule_id, struct cg_egress **out,
		    struct cg_reply **err)
{
	*out = NULL;
	const struct cg_constraints *sets[MAX_SETS];
	size_t n = cg_confine_egress_sets(plan, sets, MAX_SETS);
	if (n == 0)
		return 0;
	struct cg_egress *e = calloc(1, sizeof(*e));
	if (!e)
		goto oom;
	e->ctl[0] = e->ctl[1] = e->stop_fd = -1;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->idle, NULL);
	memcpy(e->sets, sets, n * sizeof(*sets));
	e->n_sets = n;
	e->plan = plan;
	e->rule_id = strdup(rule_id ? rule_id : "(none)");
	e->records = json_array();
	if (!e->rule_id || !e->records)
		goto oom;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, e->ctl) != 0 ||
	    (e->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0 ||
	    pthread_create(&e->thread, NULL, accept_thread, e) != 0) {
		*err = cg_reply_new(CG_R_CONFINE_SETUP_FAILED, "{s:s,s:s}", "detail",
				    "the egress proxy could not start", "errno_name",
				    cg_errno_name(errno));
		egress_free(e);
		return -1;
	}
	(void)pthread_setname_np(e->thread, "cg-egress");
	cg_confine_set_egress_fd(plan, e->ctl[1]);
	*out = e;
	return 0;
oom:
	if (e)
		egress_free(e);
	*err = cg_reply_new(CG_R_OUT_OF_MEMORY, "{s:s}", "doing", "starting the egress proxy");
	return -1;
}

json_t *cg_egress_stop(struct cg_egress *e)
{
	if (!e)
		return NULL;
	uint64_t one = 1;
	if (write(e->stop_fd, &one, sizeof(one)) != sizeof(one))
		cg_log("error", NULL, "egress: cannot signal stop: %s", cg_errno_name(errno));
	(void)pthread_join(e->thread, NULL);
	pthread_mutex_lock(&e->lock);
	while (e->active > 0)
		pthread_cond_wait(&e->idle, &e->lock);
	pthread_mutex_unlock(&e->lock);
	cg_confine_set_egress_fd(e->plan, -1);
	json_t *records = e->records;
	e->records = NULL;
	if (e->over_cap && records) {
		/* The connections past the total, in one record that counts them. */
		struct cg_reply *r =
		    cg_egress_call_cap(e->over_cap, CG_EGRESS_MAX_RECORDS, e->rule_id);
		const struct cg_reply_def *d = r ? cg_reply_def_of(r) : NULL;
		char *msg = r ? cg_reply_message(r) : NULL;
		json_t *sum =
		    d ? json_pack("{s:i,s:s,s:i,s:s,s:b,s:s,s:s?,s:I}", "stage", -1, "host", "-",
				  "port", 0, "rule", e->rule_id, "allowed", 0, "code", d->code,
				  "reason", msg, "refused", (json_int_t)e->over_cap)
		      : NULL;
		if (!sum || json_array_append_new(records, sum) != 0)
			cg_log("error", NULL,
			       "egress: %zu connections past the cap went unrecorded", e->over_cap);
		free(msg);
		cg_reply_free(r);
	}
	egress_free(e);
	return records;
}
