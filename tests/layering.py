#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The folder graph and reply ownership are enforced by the compiler.

Takes the real compile command of a source file in each checked folder (from
the build's compile_commands.json) and compiles small probes with it:
 - an include of a header from a folder above must fail (the header is not on
   that folder's include path);
 - constructing a reply code of another layer must fail (CG_REPLY_OWNED);
 - the controls (an include from below, a code of the folder's own layer)
   must compile, so the test can fail.
"""
import json, os, shlex, subprocess, sys, tempfile

BUILD = os.environ["CG_BUILDDIR"]
SRC = os.environ["CG_SRCDIR"]

# folder source, header that lies above it, header below it, foreign code, own code
CASES = [
    ("src/world/world.c", "chain.h", "wire.h", "CG_R_DENIED_BY_RULE", "CG_R_EXE_NOT_FOUND"),
    ("src/wire/wire.c", "world.h", "reply.h", "CG_R_EXE_NOT_FOUND", "CG_R_JSON_NOT_OBJECT"),
    ("src/enforce/chain.c", "grant.h", "world.h", "CG_R_EXE_NOT_FOUND", "CG_R_DENIED_BY_RULE"),
    ("src/contract/grant.c", "exec.h", "world.h", "CG_R_DENIED_BY_RULE", "CG_R_GRANT_REQUEST_INVALID"),
    ("src/confine/confine.c", "exec.h", "chain.h", "CG_R_DENIED_BY_RULE", "CG_R_OUT_OF_MEMORY"),
    ("src/evidence/journal.c", "policy.h", "sign.h", "CG_R_GRANT_REQUEST_INVALID", "CG_R_OUT_OF_MEMORY"),
    ("src/kernel/dispatch.c", "server.h", "exec.h", "CG_R_DENIED_BY_RULE", "CG_R_OUT_OF_MEMORY"),
    ("src/kernel/admin.c", "server.h", "grant_admin.h", "CG_R_GRANT_CLOSED", "CG_R_PONG"),
    ("src/enforce/refusal.c", "grant.h", "chain.h", "CG_R_OUT_OF_MEMORY", "CG_R_NEEDS_HUMAN"),
    ("src/contract/grant_admin.c", "exec.h", "grant.h", "CG_R_NEEDS_HUMAN", "CG_R_GRANT_LIST"),
    ("src/egress/proxy.c", "evidence.h", "egress_rule.h", "CG_R_EGRESS_DENIED",
     "CG_R_EGRESS_UPSTREAM_FAILED"),
    ("src/enforce/egress_rule.c", "confine.h", "chain.h", "CG_R_EGRESS_UPSTREAM_FAILED",
     "CG_R_EGRESS_NOT_LISTED"),
]

def command_for(src):
    db = json.load(open(os.path.join(BUILD, "compile_commands.json")))
    want = os.path.join(SRC, src)
    for e in db:
        f = e["file"] if os.path.isabs(e["file"]) else os.path.join(e["directory"], e["file"])
        if os.path.realpath(f) == os.path.realpath(want) and "cg_" in e["output"]:
            return e
    raise SystemExit(f"FAIL: no compile command for {src}")

def compiles(entry, body):
    args = shlex.split(entry["command"])
    with tempfile.TemporaryDirectory() as d:
        probe = os.path.join(d, "probe.c")
        open(probe, "w").write(body)
        out = []
        skip = False
        for a in args:  # replace the source and the output, keep every flag
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MQ"):
                skip = True
                continue
            if a.endswith(".c"):
                continue
            out.append(a)
        out += ["-fsyntax-only", probe]
        r = subprocess.run(out, cwd=entry["directory"], capture_output=True, text=True)
        return r.returncode == 0, r.stderr

fails = 0
def expect(ok, want, what, err):
    global fails
    if ok == want:
        print(f"ok: {what}")
    else:
        fails += 1
        print(f"FAIL: {what}\n{err[-800:]}")

for src, above, below, foreign, own in CASES:
    e = command_for(src)
    use = 'struct cg_reply *probe(void);\nstruct cg_reply *probe(void) { return cg_reply_new(%s, NULL); }\n'
    ok, err = compiles(e, f'#include "{below}"\n')
    expect(ok, True, f"{src}: include from below ({below}) compiles", err)
    ok, err = compiles(e, f'#include "{above}"\n')
    expect(ok, False, f"{src}: upward include ({above}) is refused", err)
    ok, err = compiles(e, '#include "reply.h"\n' + use % own)
    expect(ok, True, f"{src}: own layer's code {own} compiles", err)
    ok, err = compiles(e, '#include "reply.h"\n' + use % foreign)
    expect(ok, False, f"{src}: another layer's code {foreign} is refused", err)
sys.exit(1 if fails else 0)
