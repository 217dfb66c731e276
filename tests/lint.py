#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Style checks run by the test suite: clang-format is enforced, banned calls absent."""
import os, re, subprocess, sys

SRC = os.environ.get("CG_SRCDIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRS = ["include", "src", "cmd", "tools", "tests/unit", "tests/fuzz", "bench"]

def c_files():
    for d in DIRS:
        root = os.path.join(SRC, d)
        for dp, _, fns in os.walk(root):
            for fn in sorted(fns):
                if fn.endswith((".c", ".h")):
                    yield os.path.join(dp, fn)

def check_format():
    files = list(c_files())
    r = subprocess.run(["clang-format", "--dry-run", "--Werror", "--style=file"] + files,
                       cwd=SRC, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[:20000])
        print("format: FAIL (run: clang-format -i on the files above)")
        return 1
    print(f"format: {len(files)} files clean")
    return 0

# cg_reply_build() passes on an id decided elsewhere; with a literal code it
# would skip the compile-time ownership check of cg_reply_new().
PASS_THROUGH = re.compile(r"\bcg_reply_build(_params)?\(\s*CG_R_")

BANNED = re.compile(r"\b(system|popen|sprintf|vsprintf|strcpy|strcat|atoi|atol|gets)\s*\(")

def check_banned():
    bad = 0
    for f in c_files():
        if "/tests/" in f:
            continue
        for i, line in enumerate(open(f, encoding="utf-8"), 1):
            code = re.sub(r'"(\\.|[^"\\])*"', '""', line).split("//")[0]
            if code.lstrip().startswith(("*", "/*")):
                continue
            if PASS_THROUGH.search(code):
                print(f"{f}:{i}: cg_reply_build with a literal code (use cg_reply_new): "
                      f"{line.strip()}")
                bad += 1
            m = BANNED.search(code)
            if m and not re.search(r"\b(sn|vsn)printf\s*\(", code[m.start()-2:m.end()]):
                print(f"{f}:{i}: banned call {m.group(1)}(): {line.strip()}")
                bad += 1
    print(f"banned-calls: {bad} found")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit({"format": check_format, "banned": check_banned}[sys.argv[1]]())
