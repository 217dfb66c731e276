/* SPDX-License-Identifier: MIT */
/*
 * floor — what this machine does with no callgate in the way, for the
 * benchmarks to print beside the daemon's own figures (bench_core,
 * bench_daemon). A target that the floor alone misses cannot be met here.
 */
#ifndef CG_BENCH_FLOOR_H
#define CG_BENCH_FLOOR_H

#include <stdint.h>
#include <sys/types.h>

/* One posix_spawn + waitpid of /bin/true: elapsed ns, or -1. */
int64_t floor_spawn_true(void);

/*
 * What a fresh network namespace costs the machine, as each call under
 * net: none gets one: `threads` threads each make one (unshare) and let it
 * go (setns back) for `secs` seconds; the kernel tears them down on its own
 * workers. *count gets how many were made; the result is the machine's CPU
 * time per namespace in microseconds, busy time of every CPU from the start
 * until the teardowns have settled, or -1.
 */
double floor_netns_cpu_us(double secs, int threads, long *count);

/*
 * A trivial echo server on a new Unix socket at path: a forked child that
 * accepts, reads once, echoes and closes, blocking, with no JSON and no
 * event loop. Its pid (SIGKILL it when done), or -1.
 */
pid_t floor_echo_start(const char *path);

#endif
