#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench_mcp — an execute round trip through `callgate mcp` versus the same
call straight on the daemon's socket. Target: MCP / socket <= 1.2 (medians).

Both paths run the same request (`true`, unprivileged, so policy allows it
and it runs under the same confinement) against one real daemon on a
temporary socket, from the same Python process, alternating so that drift
on the machine hits both equally (and alternating which goes first, since
the daemon's post-reply evidence work lands on whichever call is next). The MCP server is started once and kept
(as an agent keeps it); each MCP round trip is one tools/call line out, one
result line back.

Usage: bench/bench_mcp.py [-n ROUNDS] [--gate] [--argv CMD ...]
Environment: CALLGATED, CALLGATE (or CG_BUILDDIR) as for the e2e tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))
import cgtest  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="round trips per path")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--argv", nargs="+", default=["true"])
    ap.add_argument("--gate", action="store_true",
                    help="time the gate verb (decide only) instead of execute: the bridge's "
                         "own overhead without a command's cost")
    a = ap.parse_args()

    with cgtest.Daemon() as d:
        mcp = subprocess.Popen([cgtest.CALLGATE, "--socket", d.socket, "mcp"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               cwd=d.workspace)

        def rpc(msg):
            mcp.stdin.write((json.dumps(msg) + "\n").encode())
            mcp.stdin.flush()
            while True:
                r = json.loads(mcp.stdout.readline())
                if r.get("id") == msg["id"]:
                    return r

        rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}}})
        seq = [0]

        def via_mcp():
            seq[0] += 1
            r = rpc({"jsonrpc": "2.0", "id": seq[0], "method": "tools/call",
                     "params": {"name": "gate" if a.gate else "execute",
                                "arguments": {"argv": a.argv, "privileged": False}}})
            return not r["result"]["isError"]

        def via_socket():
            extra = {"action": "gate"} if a.gate else {}
            r = d.request(cgtest.make_request([a.argv], privileged=False, **extra))
            return r["status"] == "ok"

        for _ in range(a.warmup):
            via_mcp()
            via_socket()
        t_mcp, t_sock = [], []
        bad = {"socket": 0, "mcp": 0}
        paths = [("socket", via_socket, t_sock), ("mcp", via_mcp, t_mcp)]
        for i in range(a.n):
            # Alternate which path goes first: the daemon seals a call's
            # evidence after answering it, and whichever call comes next
            # shares the machine with that work.
            for name, fn, times in (paths if i % 2 == 0 else paths[::-1]):
                t0 = time.perf_counter()
                bad[name] += not fn()
                times.append((time.perf_counter() - t0) * 1e3)
        mcp.stdin.close()
        mcp.wait(timeout=30)

    ms, mm = statistics.median(t_sock), statistics.median(t_mcp)
    print("%s %s, %d round trips each (after %d warm-up)"
          % ("gate" if a.gate else "execute", a.argv, a.n, a.warmup))
    print("  socket : median %.3f ms  p95 %.3f ms" % (ms, pct(t_sock, 95)))
    print("  mcp    : median %.3f ms  p95 %.3f ms" % (mm, pct(t_mcp, 95)))
    print("  ratio  : %.3f (median mcp / median socket; target <= 1.2)" % (mm / ms))
    print("  added  : %.3f ms per call (median difference)" % (mm - ms))
    if bad["socket"] or bad["mcp"]:
        print("  note   : non-ok answers (timed all the same): socket %d, mcp %d"
              % (bad["socket"], bad["mcp"]))


if __name__ == "__main__":
    main()
