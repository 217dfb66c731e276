#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The build must refuse an illegal registry entry: compile reply.c against a
copy of replies.def with one bad entry appended, and expect a compile error."""
import os, shutil, subprocess, sys, tempfile

SRC = os.environ["CG_SRCDIR"]
BAD = {
    "WA may not deny": 'CG_REPLY(WA, RES, D, 901, DENIED, T_BAD_A, "x")',
    "CT may not deny": 'CG_REPLY(CT, OPEN, D, 901, DENIED, T_BAD_B, "x")',
    "MCP may not deny": 'CG_REPLY(MCP, SYS, D, 901, DENIED, T_BAD_C, "x")',
    "EN may not say invalid": 'CG_REPLY(EN, EXEC, I, 901, ERROR, T_BAD_D, "x")',
    "area outside the closed set": 'CG_REPLY(MCP, FILE, E, 901, ERROR, T_BAD_E, "x")',
    "layer outside the closed set": 'CG_REPLY(XX, SYS, E, 901, ERROR, T_BAD_F, "x")',
    "duplicate code": 'CG_REPLY(MCP, SYS, E, 001, ERROR, T_BAD_G, "x")',
    "duplicate key": 'CG_REPLY(MCP, SYS, E, 902, ERROR, SYS_CRASH, "x")',
    "status does not fit type": 'CG_REPLY(MCP, SYS, S, 903, DENIED, T_BAD_H, "x")',
}
GOOD = 'CG_REPLY(MCP, SYS, E, 904, ERROR, T_GOOD, "fine {x}")'
cc = os.environ.get("CC", "cc")
fails = 0

def compiles(extra):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "replies.def"), "w") as f:
            f.write(open(os.path.join(SRC, "src/reply/replies.def")).read() + "\n" + extra + "\n")
        for h in ("reply.c", "reply.h"):
            shutil.copy(os.path.join(SRC, "src", "reply", h), d)
        r = subprocess.run([cc, "-std=c17", "-D_GNU_SOURCE", "-c", "-I" + d,
                            "-I" + os.path.join(SRC, "include"), "-I" + os.path.join(SRC, "src", "base"),
                            os.path.join(d, "reply.c"),
                            "-o", os.path.join(d, "reply.o")], capture_output=True)
        return r.returncode == 0

if not compiles(GOOD):
    print("FAIL: a legal entry did not compile"); fails += 1
for why, entry in BAD.items():
    if compiles(entry):
        print(f"FAIL: accepted an illegal entry ({why}): {entry}"); fails += 1
    else:
        print(f"ok: refused ({why})")
sys.exit(1 if fails else 0)
