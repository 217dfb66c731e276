/* SPDX-License-Identifier: MIT */
/*
 * netns — private network namespace with loopback up (see netns.h).
 *
 * Loopback is raised with one SIOCSIFFLAGS ioctl rather than netlink: it is
 * a single async-signal-safe call and needs no buffer management.
 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

static int write_file(const char *path, const char *s, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	int rc = write(fd, s, len) == (ssize_t)len ? 0 : (errno ? errno : EIO);
	(void)close(fd);
	return rc;
}

/* "ID ID 1\n": map only our own id; everything else stays unmapped (nobody). */
static int write_map(const char *path, unsigned long id)
{
	char line[64];
	size_t n = cg_fmt_u64(line, id);
	line[n++] = ' ';
	n += cg_fmt_u64(line + n, id);
	memcpy(line + n, " 1\n", 3);
	return write_file(path, line, n + 3);
}

int cg_userns_map_self(uid_t outer_uid, gid_t outer_gid)
{
	/* setgroups must be denied before an unprivileged gid_map write;
	 * it also stops dropping a group that a file's ACL denies. */
	int rc;
	if ((rc = write_file("/proc/self/setgroups", "deny", 4)) != 0 ||
	    (rc = write_map("/proc/self/uid_map", outer_uid)) != 0)
		return rc;
	return write_map("/proc/self/gid_map", outer_gid);
}

int cg_netns_enter(bool with_userns, uid_t outer_uid, gid_t outer_gid)
{
	int rc;
	if (unshare(CLONE_NEWNET | (with_userns ? CLONE_NEWUSER : 0)) != 0)
		return errno;
	if (with_userns && (rc = cg_userns_map_self(outer_uid, outer_gid)) != 0)
		return rc;
	int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	rc = 0;
	if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) {
		rc = errno;
		goto close_sock;
	}
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0)
		rc = errno;
close_sock:
	(void)close(sock);
	return rc;
}

int cg_netns_send_listener(int ctl_fd)
{
	if (ctl_fd < 0)
		return EBADF;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0)
		return errno;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(CG_NETNS_PROXY_PORT);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1, rc = 0;
	if (setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 64) != 0) {
		rc = errno;
		(void)close(ls);
		return rc;
	}
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
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &ls, sizeof(int));
	if (sendmsg(ctl_fd, &m, MSG_NOSIGNAL) != 1)
		rc = errno ? errno : EIO;
	(void)close(ls);
	return rc;
}

bool cg_netns_possible(bool *with_userns)
{
	if (geteuid() == 0) {
		*with_userns = false;
		return true;
	}
	*with_userns = true;
	/* Debian's switch; absent elsewhere (then user namespaces are on). */
	char c = '1';
	int fd = open("/proc/sys/kernel/unprivileged_userns_clone", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (cg_read_some(fd, &c, 1) != 1)
			c = '0';
		(void)close(fd);
	}
	if (c != '1')
		return false;
	fd = open("/proc/sys/user/max_user_namespaces", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char b[4] = { 0 };
		ssize_t n = cg_read_some(fd, b, sizeof(b) - 1);
		(void)close(fd);
		if (n <= 0 || (b[0] == '0' && (b[1] == '\n' || b[1] == 0)))
			return false;
	}
	return true;
}
