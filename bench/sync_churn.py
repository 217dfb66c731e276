#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/sync_churn.py — what package churn does to the journal's fdatasync.

Usage: bench/sync_churn.py DIR [SECONDS]

Measures, on the file system holding DIR, the fdatasync latency of 300-byte
appends (a permit's journal write) while another process creates
package-shaped directories as fast as it can (a directory, five 2 KB files,
a rename: a refused call's trace package). Two ways of writing the journal,
run one after the other for SECONDS each (default 8), each over a fresh
directory:

  grow    appends to a file that grows (the journal today): each sync also
          commits the file's new size, so ext4 commits its whole running
          transaction, the packages' new inodes with it;
  zeroed  overwrites a file zero-filled ahead of time: the file's metadata
          does not change, and the sync flushes data only.

It prints each way's median, p90, p99 and largest sync, and the churn's own
rate. It measures the file system, not callgate: the figure behind
docs/limits.md, "Evidence back-pressure". DIR is left empty.
"""
import multiprocessing
import os
import shutil
import sys
import time


def churn(d, stop, made):
    blob = b"x" * 2048
    i = 0
    while not stop.is_set():
        tmp = os.path.join(d, ".p%d.tmp" % i)
        os.mkdir(tmp)
        for n in range(5):
            fd = os.open(os.path.join(tmp, "f%d" % n), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, blob)
            os.close(fd)
        os.rename(tmp, os.path.join(d, "p%d" % i))
        i += 1
    made.value = i


def run(root, mode, secs):
    d = os.path.join(root, "sync-churn-" + mode)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    fd = os.open(os.path.join(d, "journal"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if mode == "zeroed":
        zeros = b"\0" * (1 << 20)
        for _ in range(64):
            os.write(fd, zeros)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
    stop, made = multiprocessing.Event(), multiprocessing.Value("l", 0)
    p = multiprocessing.Process(target=churn, args=(d, stop, made))
    p.start()
    line = b"y" * 299 + b"\n"
    lat = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        os.write(fd, line)
        t = time.perf_counter()
        os.fdatasync(fd)
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.002)
    stop.set()
    p.join()
    os.close(fd)
    shutil.rmtree(d, ignore_errors=True)
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(len(lat) * f))]
    print("%-6s fdatasync median %.2f ms, p90 %.2f, p99 %.2f, max %.2f (%d syncs); "
          "churn %.0f package dirs/s" % (mode, q(0.5), q(0.9), q(0.99), lat[-1], len(lat),
                                         made.value / secs))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2])
    secs = float(sys.argv[2]) if len(sys.argv) == 3 else 8.0
    for mode in ("grow", "zeroed"):
        run(sys.argv[1], mode, secs)


if __name__ == "__main__":
    main()
