/* SPDX-License-Identifier: MIT */
/*
 * seccomp_filter (seccomp.c) — the deny-list filter for confined commands: syscalls an agent's
 * command never needs and that an attacker uses to leave a sandbox or
 * attack the kernel (ptrace, mount, keyctl, bpf, kexec, module loading, new
 * user namespaces, …). Each answers EPERM (clone3 answers ENOSYS: see
 * seccomp.c).
 *
 * The filter is compiled once per process with libseccomp in the parent
 * and exported to memory as classic BPF; the child only loads it with
 * prctl(PR_SET_SECCOMP), so it never allocates.
 *
 * Invariants:
 *  - cg_seccomp_load MUST be async-signal-safe (one prctl).
 *  - A compile failure MUST make the caller refuse to run (fail closed).
 */
#ifndef CG_SECCOMP_FILTER_H
#define CG_SECCOMP_FILTER_H

#include <stddef.h>

#include <jansson.h>

struct sock_fprog;

/*
 * The compiled filter (process-lifetime static memory; never freed).
 * Returns NULL with errno set when it could not be compiled.
 */
const struct sock_fprog *cg_seccomp_filter(void);

/* Stacked on it for a privileged call a constraint set binds: no socket(AF_UNIX). */
const struct sock_fprog *cg_seccomp_filter_root(void);

/* In the child: load the filter (no_new_privs MUST be set). 0 or errno. */
int cg_seccomp_load(const struct sock_fprog *prog);

/* The names of the denied syscalls, as a JSON array (new reference). */
json_t *cg_seccomp_denied_json(void);

#endif
