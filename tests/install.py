#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What `meson install` installs is usable by a C user who has only it.

Installs the build into a temporary DESTDIR, then builds a small program
against the installed header and callgate.pc (pkg-config, nothing from the
source tree), links it to the installed shared library, and runs it: it
creates a kernel with the embedded default policy and no evidence, asks it a
ping and a refused call, and checks the answers. Also checks that the shared
library exports only the public API, and that the programs and man pages
were installed; that the default policy, the systemd units and the
tmpfiles.d / sysusers.d entries were, that a reinstall keeps an edited
policy, and that `systemd-analyze verify` accepts the units.
"""
import glob, json, os, shutil, subprocess, sys, tempfile

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
    for want in ["bin/callgate", "sbin/callgated", "include/callgate.h",
                 "callgate/callgate-init"] + pages:
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

    # The default policy, the systemd units and the tmpfiles/sysusers entries.
    want = {"policy": "etc/callgate/policy.yaml", "service": "systemd/system/callgated.service",
            "socket": "systemd/system/callgated.socket",
            "admin socket": "systemd/system/callgated-admin.socket",
            "tmpfiles": "tmpfiles.d/callgate.conf", "sysusers": "sysusers.d/callgate.conf"}
    found = {}
    for what, tail in want.items():
        hits = glob.glob(dest + "/**/" + tail, recursive=True)
        if len(hits) != 1:
            print(f"FAIL: {what}: expected one {tail}, found {hits}"); sys.exit(1)
        found[what] = hits[0]
    policy_src = open(os.path.join(srcdir, "etc/callgate/policy.yaml")).read()
    if open(found["policy"]).read() != policy_src:
        print("FAIL: the installed policy is not etc/callgate/policy.yaml"); sys.exit(1)
    # An edited policy survives a reinstall.
    with open(found["policy"], "a") as f:
        f.write("# edited by the operator\n")
    run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"])
    if not open(found["policy"]).read().endswith("# edited by the operator\n"):
        print("FAIL: meson install overwrote an edited policy"); sys.exit(1)
    tmpfiles = open(found["tmpfiles"]).read()
    for line in ["d /var/lib/callgate 0700 root root", "d /run/callgate 0755 root root"]:
        if line not in tmpfiles:
            print(f"FAIL: tmpfiles.d lacks '{line}'"); sys.exit(1)
    if "g callgate" not in open(found["sysusers"]).read():
        print("FAIL: sysusers.d does not create the callgate group"); sys.exit(1)
    service = open(found["service"]).read()
    for line in ["Type=notify", "ExecReload=", "Delegate=yes", "KillMode=mixed"]:
        if line not in service:
            print(f"FAIL: callgated.service lacks {line}"); sys.exit(1)
    if "@SBINDIR@" in service or "@SYSCONFDIR@" in service:
        print("FAIL: callgated.service was not configured"); sys.exit(1)
    for sock, name in [("socket", "agent"), ("admin socket", "admin")]:
        if f"FileDescriptorName={name}" not in open(found[sock]).read():
            print(f"FAIL: {sock} unit does not name its fd {name}"); sys.exit(1)
    # systemd-analyze verify: ExecStart must exist, so point it into DESTDIR.
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("FAIL: systemd-analyze is missing (scripts/setup installs systemd)"); sys.exit(1)
    units = os.path.join(d, "units")
    os.mkdir(units)
    for what in ["service", "socket", "admin socket"]:
        text = open(found[what]).read().replace("ExecStart=/", "ExecStart=" + dest + "/")
        open(os.path.join(units, os.path.basename(found[what])), "w").write(text)
    r = subprocess.run([analyze, "verify", "--man=no"] +
                       sorted(glob.glob(units + "/*")), capture_output=True, text=True)
    if r.returncode != 0 or r.stderr.strip():
        print(f"FAIL: systemd-analyze verify:\n{r.stdout}{r.stderr}"); sys.exit(1)
    print(f"ok: installed, built against callgate.pc, ran; exports {len(exported)} symbols; "
          "policy kept when edited; units verify")
