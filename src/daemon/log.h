/* SPDX-License-Identifier: MIT */
/*
 * log — the daemon's per-call log, where operators look: the systemd journal
 * (structured fields through sd_journal_send), syslog (RFC 5424 with
 * structured data, one datagram to /dev/log or a configured socket), or
 * stderr (one line through cg_log).
 *
 * The kernel calls cg_calllog_record once per answered call
 * (cg_kernel_config.on_call); the library itself has no log policy.
 *
 * Invariants:
 *  - One record per call, never split: one journal entry, one datagram, or
 *    one write.
 *  - A record MUST NOT block a worker: syslog datagrams are sent with
 *    MSG_DONTWAIT and a full or absent listener drops the record (counted,
 *    and said once on stderr).
 *  - Syslog structured-data values are escaped as RFC 5424 requires
 *    ('"', '\' and ']'), so a peer-chosen host cannot forge parameters.
 */
#ifndef CG_DAEMON_LOG_H
#define CG_DAEMON_LOG_H

#include <stddef.h>

#include "callgate.h"

enum cg_log_sink { CG_LOG_STDERR, CG_LOG_JOURNAL, CG_LOG_SYSLOG };

/* The default syslog socket. */
#define CG_SYSLOG_SOCKET "/dev/log"

/* The structured-data id of a call record (32473: RFC 5612's example number). */
#define CG_SYSLOG_SD_ID "call@32473"

struct cg_calllog;

/* "journal", "syslog" or "stderr" to a sink. 0, or -1 for another name. */
int cg_calllog_sink_parse(const char *name, enum cg_log_sink *out);

/*
 * The default sink: the journal when running under systemd ($JOURNAL_STREAM
 * or $NOTIFY_SOCKET set), stderr otherwise.
 */
enum cg_log_sink cg_calllog_default_sink(void);

/*
 * Open a per-call log on sink. syslog_path (syslog only; NULL: /dev/log)
 * must name a Unix datagram socket that exists now. Returns the log (free
 * with cg_calllog_close), or NULL with a message in why.
 */
struct cg_calllog *cg_calllog_open(enum cg_log_sink sink, const char *syslog_path, char *why,
				   size_t why_len);

/* Close the log; safe on NULL. No record may be written during or after. */
void cg_calllog_close(struct cg_calllog *l);

/*
 * Write one call record (a cg_call_log_fn: arg is the struct cg_calllog).
 * Thread-safe; never blocks on the listener.
 */
void cg_calllog_record(void *arg, const struct cg_call_record *rec);

/*
 * Render rec as one RFC 5424 message (no trailing newline) into buf, with
 * the given timestamp text, host name and pid. Returns its length, or -1 if
 * it does not fit. For tests and the syslog sink.
 */
int cg_calllog_rfc5424(const struct cg_call_record *rec, const char *timestamp,
		       const char *hostname, int pid, char *buf, size_t len);

#endif
