/* SPDX-License-Identifier: MIT */
/*
 * log — the per-call log: journal fields, RFC 5424 syslog, or a stderr
 * line. See log.h for the contract and its invariants.
 */
#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "util.h"

/* The journal's MESSAGE_ID of a call record (journalctl MESSAGE_ID=...). */
#define CG_CALL_MESSAGE_ID "5b1d0c6a3e8f4f0e9a7c2d41e6b3f9a1"

#define SYSLOG_FACILITY_DAEMON 3
#define SYSLOG_MAX	       2048

struct cg_calllog {
	enum cg_log_sink sink;
	int fd; /* syslog: an unconnected datagram socket */
	struct sockaddr_un addr;
	socklen_t addr_len;
	char hostname[256];
	atomic_ulong dropped;
};

int cg_calllog_sink_parse(const char *name, enum cg_log_sink *out)
{
	if (strcmp(name, "journal") == 0)
		*out = CG_LOG_JOURNAL;
	else if (strcmp(name, "syslog") == 0)
		*out = CG_LOG_SYSLOG;
	else if (strcmp(name, "stderr") == 0)
		*out = CG_LOG_STDERR;
	else
		return -1;
	return 0;
}

enum cg_log_sink cg_calllog_default_sink(void)
{
	const char *js = getenv("JOURNAL_STREAM"), *ns = getenv("NOTIFY_SOCKET");
	return (js && *js) || (ns && *ns) ? CG_LOG_JOURNAL : CG_LOG_STDERR;
}

struct cg_calllog *cg_calllog_open(enum cg_log_sink sink, const char *syslog_path, char *why,
				   size_t why_len)
{
	struct cg_calllog *l = calloc(1, sizeof(*l));
	if (!l) {
		snprintf(why, why_len, "out of memory");
		return NULL;
	}
	l->sink = sink;
	l->fd = -1;
	if (gethostname(l->hostname, sizeof(l->hostname) - 1) != 0 || !l->hostname[0])
		snprintf(l->hostname, sizeof(l->hostname), "-");
	for (char *p = l->hostname; *p; p++)
		if (*p <= ' ' || *p > '~')
			*p = '_';
	if (sink != CG_LOG_SYSLOG)
		return l;
	const char *path = syslog_path ? syslog_path : CG_SYSLOG_SOCKET;
	struct stat st;
	if (strlen(path) >= sizeof(l->addr.sun_path)) {
		snprintf(why, why_len, "syslog socket path %s is too long", path);
		goto fail;
	}
	if (stat(path, &st) != 0) {
		snprintf(why, why_len, "syslog socket %s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(why, why_len, "syslog socket %s: not a socket", path);
		goto fail;
	}
	l->addr.sun_family = AF_UNIX;
	memcpy(l->addr.sun_path, path, strlen(path) + 1);
	l->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);
	l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		snprintf(why, why_len, "syslog socket: %s", strerror(errno));
		goto fail;
	}
	return l;
fail:
	free(l);
	return NULL;
}

void cg_calllog_close(struct cg_calllog *l)
{
	if (!l)
		return;
	if (l->fd >= 0)
		close(l->fd);
	unsigned long dropped = atomic_load(&l->dropped);
	if (dropped)
		cg_log("warn", NULL, "%lu call records could not be sent to syslog", dropped);
	free(l);
}

/* syslog severity of a reply type: success info, refusal notice, error err. */
static int severity_of(char type)
{
	return type == 'S' ? 6 : type == 'E' ? 3 : 5;
}

/* Append s to buf at *off as an RFC 5424 PARAM-VALUE body. 0, or -1 if full. */
static int sd_value(char *buf, size_t len, size_t *off, const char *s)
{
	for (; *s; s++) {
		bool esc = *s == '"' || *s == '\\' || *s == ']';
		if (*off + (esc ? 2 : 1) >= len)
			return -1;
		if (esc)
			buf[(*off)++] = '\\';
		buf[(*off)++] = *s;
	}
	buf[*off] = '\0';
	return 0;
}

/* Append text verbatim. 0, or -1 if full. */
static int put(char *buf, size_t len, size_t *off, const char *text)
{
	size_t n = strlen(text);
	if (*off + n >= len)
		return -1;
	memcpy(buf + *off, text, n + 1);
	*off += n;
	return 0;
}

int cg_calllog_rfc5424(const struct cg_call_record *rec, const char *timestamp,
		       const char *hostname, int pid, char *buf, size_t len)
{
	char head[512], num[32];
	int n = snprintf(head, sizeof(head), "<%d>1 %s %s callgated %d call [" CG_SYSLOG_SD_ID,
			 SYSLOG_FACILITY_DAEMON * 8 + severity_of(rec->reply_type), timestamp,
			 hostname && *hostname ? hostname : "-", pid);
	if (n < 0 || (size_t)n >= sizeof(head) || len == 0)
		return -1;
	size_t off = 0;
	buf[0] = '\0';
	char type[2] = { rec->reply_type, 0 };
	snprintf(num, sizeof(num), "%u", (unsigned)rec->peer_uid);
	const char *fields[][2] = {
		{ "trace_id", rec->trace_id },
		{ "peer_uid", num },
		{ "peer_pid", NULL },
		{ "host", rec->host },
		{ "decision", rec->decision },
		{ "rule", rec->rule_id },
		{ "reply_type", type },
		{ "reply_code", rec->reply_code },
		{ "exit", NULL },
	};
	char pidnum[32], exitnum[32];
	snprintf(pidnum, sizeof(pidnum), "%d", (int)rec->peer_pid);
	snprintf(exitnum, sizeof(exitnum), "%d", rec->exit_code);
	if (put(buf, len, &off, head) < 0)
		return -1;
	for (size_t i = 0; i < CG_ARRAY_LEN(fields); i++) {
		const char *v = fields[i][1];
		if (strcmp(fields[i][0], "peer_pid") == 0)
			v = pidnum;
		else if (strcmp(fields[i][0], "exit") == 0) {
			if (!rec->ran)
				continue;
			v = exitnum;
		}
		if (put(buf, len, &off, " ") < 0 || put(buf, len, &off, fields[i][0]) < 0 ||
		    put(buf, len, &off, "=\"") < 0 || sd_value(buf, len, &off, v ? v : "") < 0 ||
		    put(buf, len, &off, "\"") < 0)
			return -1;
	}
	char msg[160];
	snprintf(msg, sizeof(msg), "] call %s %s %c %s", rec->trace_id, rec->decision,
		 rec->reply_type, rec->reply_code);
	if (put(buf, len, &off, msg) < 0)
		return -1;
	return (int)off;
}

void cg_calllog_record(void *arg, const struct cg_call_record *rec)
{
	struct cg_calllog *l = arg;
	char exitnum[32] = "-";
	if (rec->ran)
		snprintf(exitnum, sizeof(exitnum), "%d", rec->exit_code);
	switch (l->sink) {
	case CG_LOG_JOURNAL: {
		int rc = sd_journal_send(
		    "MESSAGE=call %s %s %c %s", rec->trace_id, rec->decision, rec->reply_type,
		    rec->reply_code, "MESSAGE_ID=" CG_CALL_MESSAGE_ID, "PRIORITY=%d",
		    severity_of(rec->reply_type), "SYSLOG_IDENTIFIER=callgated",
		    "CALLGATE_TRACE_ID=%s", rec->trace_id, "CALLGATE_PEER_UID=%u",
		    (unsigned)rec->peer_uid, "CALLGATE_PEER_PID=%d", (int)rec->peer_pid,
		    "CALLGATE_HOST=%s", rec->host, "CALLGATE_DECISION=%s", rec->decision,
		    "CALLGATE_RULE=%s", rec->rule_id, "CALLGATE_REPLY_TYPE=%c", rec->reply_type,
		    "CALLGATE_REPLY_CODE=%s", rec->reply_code, "CALLGATE_EXIT=%s", exitnum, NULL);
		if (rc < 0 && atomic_fetch_add(&l->dropped, 1) == 0)
			cg_log("warn", rec->trace_id, "journal: %s; call records are being lost",
			       strerror(-rc));
		break;
	}
	case CG_LOG_SYSLOG: {
		char ts[40], buf[SYSLOG_MAX];
		cg_format_time(cg_now_wall_ns(), ts, sizeof(ts));
		int n = cg_calllog_rfc5424(rec, ts, l->hostname, (int)getpid(), buf, sizeof(buf));
		if (n < 0 || sendto(l->fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL,
				    (struct sockaddr *)&l->addr, l->addr_len) != n) {
			if (atomic_fetch_add(&l->dropped, 1) == 0)
				cg_log("warn", rec->trace_id,
				       "syslog %s: %s; call records are being lost",
				       l->addr.sun_path,
				       n < 0 ? "record too long" : strerror(errno));
		}
		break;
	}
	case CG_LOG_STDERR: {
		/* One line: a peer-chosen host must not break it or forge another. */
		char host[128];
		snprintf(host, sizeof(host), "%s", rec->host[0] ? rec->host : "-");
		for (char *p = host; *p; p++)
			if (*p <= ' ' || *p == 0x7f)
				*p = '_';
		cg_log("info", rec->trace_id,
		       "call peer_uid=%u peer_pid=%d host=%s decision=%s rule=%s reply=%c %s "
		       "exit=%s",
		       (unsigned)rec->peer_uid, (int)rec->peer_pid, host, rec->decision,
		       rec->rule_id[0] ? rec->rule_id : "-", rec->reply_type, rec->reply_code,
		       exitnum);
		break;
	}
	}
}
