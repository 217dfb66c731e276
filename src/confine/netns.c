/* SPDX-License-Identifier: MIT */
/*
 * netns — private network namespace with loopback up (see netns.h), and
 * the pool of such namespaces a root daemon makes ahead of its calls.
 *
 * Loopback is raised with one SIOCSIFFLAGS ioctl rather than netlink: it is
 * a single async-signal-safe call and needs no buffer management.
 *
 * Why a pool: creating a network namespace costs the kernel ~0.4 ms (its
 * loopback device, its sysctl tables), more than a bare spawn of /bin/true.
 * A thread at nice 10 makes them while nobody waits; a call's spawning
 * thread enters one with setns(2) just for its clone, so the child is born
 * in it. Each namespace is handed out once and never comes back: no state
 * of one call's network (sockets, abstract Unix names, bound ports) can
 * reach another's.
 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reply.h"
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

/* Bring up the loopback of the calling thread's network namespace: 0 or errno. */
static int loopback_up(void)
{
	int rc;
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

int cg_netns_enter(bool with_userns, uid_t outer_uid, gid_t outer_gid)
{
	int rc;
	if (unshare(CLONE_NEWNET | (with_userns ? CLONE_NEWUSER : 0)) != 0)
		return errno;
	if (with_userns && (rc = cg_userns_map_self(outer_uid, outer_gid)) != 0)
		return rc;
	return loopback_up();
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

/* ---- the pool (daemon side) ---------------------------------------------- */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thr;
	int fds[CG_NETNS_POOL_MAX]; /* ready namespaces, each used once */
	unsigned n, want, users;
	bool running, stop;
	int home_fd; /* the daemon's own network namespace */
} pool = {
	PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, { 0 }, 0, 0, 0, false, false, -1
};
static atomic_bool pool_broken; /* a thread could not return home: no more setns */

/*
 * One fresh namespace with loopback up: its fd, or -errno. This thread
 * makes it, then goes home, so the fd is all that holds it until a stage.
 */
static int make_one(void)
{
	if (unshare(CLONE_NEWNET) != 0)
		return -errno;
	int rc = loopback_up();
	int fd = rc == 0 ? open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC) : -1;
	if (rc == 0 && fd < 0)
		rc = errno;
	if (setns(pool.home_fd, CLONE_NEWNET) != 0 && rc == 0)
		rc = errno;
	if (rc != 0 && fd >= 0)
		(void)close(fd);
	return rc != 0 ? -rc : fd;
}

static void *pool_main(void *arg)
{
	(void)arg;
	/* Made while nobody waits: calls being answered go first. */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	pthread_mutex_lock(&pool.mu);
	while (!pool.stop) {
		if (pool.n >= pool.want) {
			pthread_cond_wait(&pool.cv, &pool.mu);
			continue;
		}
		pthread_mutex_unlock(&pool.mu);
		int fd = make_one();
		pthread_mutex_lock(&pool.mu);
		if (fd < 0) {
			cg_log("warn", NULL, "network namespace pool: %s; each call makes its own",
			       cg_errno_name(-fd));
			pool.want = 0;
			break;
		}
		pool.fds[pool.n++] = fd;
	}
	pthread_mutex_unlock(&pool.mu);
	return NULL;
}

int cg_netns_pool_start(unsigned size)
{
	if (size > CG_NETNS_POOL_MAX)
		size = CG_NETNS_POOL_MAX;
	if (geteuid() != 0 || size == 0)
		return EPERM; /* setns needs CAP_SYS_ADMIN over the namespace */
	int rc = 0;
	pthread_mutex_lock(&pool.mu);
	if (pool.running) {
		pool.users++;
		goto out;
	}
	pool.home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (pool.home_fd < 0) {
		rc = errno;
		goto out;
	}
	pool.want = size;
	pool.stop = false;
	/* The thread takes no signal: the daemon's own threads handle them. */
	sigset_t all, old;
	(void)sigfillset(&all);
	(void)pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&pool.thr, NULL, pool_main, NULL);
	(void)pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		(void)close(pool.home_fd);
		pool.home_fd = -1;
		goto out;
	}
	pool.running = true;
	(void)pthread_setname_np(pool.thr, "cg-netns-pool");
	pool.users = 1;
out:
	pthread_mutex_unlock(&pool.mu);
	return rc;
}

void cg_netns_pool_stop(void)
{
	pthread_mutex_lock(&pool.mu);
	if (!pool.running || --pool.users > 0) {
		pthread_mutex_unlock(&pool.mu);
		return;
	}
	pool.stop = true;
	pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
	pthread_join(pool.thr, NULL);
	pthread_mutex_lock(&pool.mu);
	while (pool.n)
		(void)close(pool.fds[--pool.n]);
	(void)close(pool.home_fd);
	pool.home_fd = -1;
	pool.running = false;
	pthread_mutex_unlock(&pool.mu);
}

unsigned cg_netns_pool_ready(void)
{
	pthread_mutex_lock(&pool.mu);
	unsigned n = pool.running ? pool.n : 0;
	pthread_mutex_unlock(&pool.mu);
	return n;
}

int cg_netns_pool_enter(void)
{
	if (atomic_load(&pool_broken))
		return -1;
	pthread_mutex_lock(&pool.mu);
	int fd = pool.running && pool.n ? pool.fds[--pool.n] : -1;
	if (pool.running)
		pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
	if (fd < 0)
		return -1;
	int rc = setns(fd, CLONE_NEWNET);
	(void)close(fd); /* the thread holds it now; nobody else ever will */
	return rc == 0 ? 0 : -1;
}

void cg_netns_pool_leave(void)
{
	if (setns(pool.home_fd, CLONE_NEWNET) == 0)
		return;
	/*
	 * Cannot happen with CAP_SYS_ADMIN and an fd held open. If it does,
	 * this thread stays in a namespace without routes: what it starts
	 * later fails closed. Stop using the pool, and say so.
	 */
	atomic_store(&pool_broken, true);
	cg_log("error", NULL, "network namespace pool: returning home failed: %s; pool off",
	       cg_errno_name(errno));
}
