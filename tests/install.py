#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What `meson install` installs is usable by a C user who has only it.

Installs the build into a temporary DESTDIR, then builds a small program
against the installed header and callgate.pc (pkg-config, nothing from the
source tree), links it to the installed shared library, and runs it: it
creates a kernel with the embedded default policy and no evidence, asks it a
ping and a refused call, and checks the answers. Also checks that the shared
library exports only the public API, and that the programs and man pages
were installed.
"""
import glob, json, os, subprocess, sys, tempfile

BUILD = os.environ["CG_BUILDDIR"]

PROGRAM = r'''
#include <callgate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	struct cg_kernel_config cfg = { 0 };
	struct cg_kernel *k = NULL;
	struct cg_result why;
	if (cg_kernel_new(&cfg, &k, &why) != 0) {
		fprintf(stderr, "cg_kernel_new failed: %c %s: %s\n", why.type, why.code, why.message);
		return 1;
	}
	struct cg_peer peer = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	char now[32], gate[256];
	time_t t = time(NULL);
	strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	snprintf(gate, sizeof(gate),
		 "{\"action\":\"gate\",\"time\":\"%s\",\"privileged\":false,"
		 "\"pipeline\":[[\"rm\",\"-rf\",\"/\"]]}",
		 now);
	const char *lines[] = { "{\"action\":\"ping\"}", gate };
	for (size_t i = 0; i < 2; i++) {
		size_t n = 0;
		char *resp = cg_kernel_handle(k, lines[i], strlen(lines[i]), true, &peer, &n);
		if (!resp)
			return 1;
		fwrite(resp, 1, n, stdout);
		free(resp);
	}
	cg_kernel_shutdown(k);
	cg_kernel_free(k);
	return 0;
}
'''

def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        print(f"FAIL: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        sys.exit(1)
    return r

with tempfile.TemporaryDirectory() as d:
    dest = os.path.join(d, "root")
    run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"])
    pcs = glob.glob(dest + "/**/pkgconfig/callgate.pc", recursive=True)
    if len(pcs) != 1:
        print(f"FAIL: expected one installed callgate.pc, found {pcs}"); sys.exit(1)
    srcdir = os.environ["CG_SRCDIR"]
    pages = ["share/man/man%s/%s" % (p.rsplit(".", 1)[1], p)
             for p in sorted(os.listdir(os.path.join(srcdir, "man")))]
    for want in ["bin/callgate", "sbin/callgated", "include/callgate.h"] + pages:
        if not glob.glob(dest + "/**/" + want, recursive=True):
            print(f"FAIL: {want} was not installed"); sys.exit(1)
    # pkg-config with the DESTDIR as sysroot: the .pc file's paths point into it.
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]),
               PKG_CONFIG_SYSROOT_DIR=dest)
    flags = run(["pkg-config", "--cflags", "--libs", "callgate"], env=env).stdout.split()
    src = os.path.join(d, "user.c")
    open(src, "w").write(PROGRAM)
    exe = os.path.join(d, "user")
    run(["cc", "-std=c17", "-Wall", "-Werror", src, "-o", exe] + flags)
    libdir = [f[2:] for f in flags if f.startswith("-L")]
    out = run([exe], env=dict(os.environ, LD_LIBRARY_PATH=":".join(libdir))).stdout
    ldd = run(["ldd", exe], env=dict(os.environ, LD_LIBRARY_PATH=":".join(libdir))).stdout
    if dest not in ldd:
        print(f"FAIL: the program did not link the installed libcallgate.so:\n{ldd}"); sys.exit(1)
    resp = [json.loads(l) for l in out.splitlines()]
    if resp[0]["reply"]["code"] != "MCP-SYS-S-002" and resp[0]["status"] != "ok":
        print(f"FAIL: ping: {resp[0]}"); sys.exit(1)
    if resp[1]["reply"]["type"] != "S" or resp[1]["reply"]["data"]["decision"] != "BLOCK":
        print(f"FAIL: gate rm -rf /: {resp[1]}"); sys.exit(1)
    so = glob.glob(dest + "/**/libcallgate.so.0*", recursive=True)
    syms = run(["nm", "-D", "--defined-only", so[0]]).stdout.split("\n")
    exported = sorted(l.split()[-1] for l in syms if l.strip() and l.split()[1] in "TDBR")
    leaked = [s for s in exported if not s.startswith(("cg_kernel_", "cg_job_"))]
    if leaked or not exported:
        print(f"FAIL: the shared library exports more than the public API: {leaked[:20]}")
        sys.exit(1)
    print(f"ok: installed, built against callgate.pc, ran; exports {len(exported)} symbols")
