#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Debian package: built, checked, installed, started and purged.

Copies the source tree (what git tracks plus untracked files not ignored,
so uncommitted work is tested too) to a temporary directory, runs
`dpkg-buildpackage -us -uc -b` there (tests off: they run in this suite's
siblings), and checks the .deb:
  * its contents (dpkg-deb -c): both programs, the three systemd units, the
    tmpfiles.d and sysusers.d entries, every man page in man/, the header,
    callgate.pc, the shared library, and the policy, registered as a
    conffile;
  * its maintainer scripts create the group and directories and enable the
    units;
  * lintian reports no errors.
Then, unless this machine already has callgate installed or state in
/etc/callgate or /var/lib/callgate (never clobbered), it installs the
package with dpkg, checks the group, the directories and `systemd-analyze
verify` on the installed units, starts the installed callgated with the
installed policy and pings it with the installed client, and purges:
nothing of the package may remain but the callgate group.

Skips (exit 77) with a message only when the packaging tools are missing
after trying to install them with apt-get.
"""
import glob, os, shutil, subprocess, sys, tempfile, time

SRC = os.environ["CG_SRCDIR"]
SKIP = 77
TOOLS = {"dpkg-buildpackage": "dpkg-dev", "dh": "debhelper", "lintian": "lintian",
         "fakeroot": "fakeroot"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, timeout=600, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        fail("%s exited %d\n%s\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:],
                                        r.stderr[-3000:]))
    return r


def apt_install(pkgs):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("package: installing " + " ".join(pkgs))
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300)
    return subprocess.run(["apt-get", "install", "-y", "-qq"] + pkgs, env=env,
                          capture_output=True, text=True, timeout=600).returncode == 0


def ensure_tools(tree):
    missing = sorted({p for t, p in TOOLS.items() if not shutil.which(t)})
    if missing and (os.geteuid() != 0 or not shutil.which("apt-get") or not apt_install(missing)):
        print("SKIP: cannot build the package: missing %s and apt-get could not install them"
              % ", ".join(missing))
        sys.exit(SKIP)
    r = run(["dpkg-checkbuilddeps"], check=False, cwd=tree)
    if r.returncode != 0:
        text = r.stderr.split("Unmet build dependencies:", 1)[-1]
        deps = [w.split("(")[0].split(":")[0] for w in text.replace("|", " ").split()
                if w and w[0].isalpha()]
        if os.geteuid() != 0 or not apt_install(deps) or \
           run(["dpkg-checkbuilddeps"], check=False, cwd=tree).returncode != 0:
            print("SKIP: build dependencies unmet and not installable: " + r.stderr.strip())
            sys.exit(SKIP)


def copy_tree(dest):
    files = None
    if shutil.which("git"):
        r = subprocess.run(["git", "-C", SRC, "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True)
        if r.returncode == 0:
            files = [f for f in r.stdout.decode().split("\0") if f]
    if files is None:
        shutil.copytree(SRC, dest, ignore=shutil.ignore_patterns("build*", ".git", "obj-*"))
        return
    for f in files:
        if f.startswith(("build/", "build-")) or not os.path.isfile(os.path.join(SRC, f)):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(os.path.join(SRC, f), os.path.join(dest, f))


def check_contents(deb, work):
    listing = run(["dpkg-deb", "-c", deb]).stdout
    paths = {l.split()[5].lstrip(".") for l in listing.splitlines() if len(l.split()) >= 6}
    pages = ["/usr/share/man/man%s/%s.gz" % (p.rsplit(".", 1)[1], p)
             for p in sorted(os.listdir(os.path.join(SRC, "man")))]
    want = ["/usr/bin/callgate", "/usr/sbin/callgated", "/etc/callgate/policy.yaml",
            "/lib/systemd/system/callgated.service", "/lib/systemd/system/callgated.socket",
            "/lib/systemd/system/callgated-admin.socket", "/usr/lib/tmpfiles.d/callgate.conf",
            "/usr/lib/sysusers.d/callgate.conf", "/usr/include/callgate.h"] + pages
    for w in want:
        if w not in paths:
            fail("%s is not in the package:\n%s" % (w, listing))
    for pattern in ["/usr/lib/*/pkgconfig/callgate.pc", "/usr/lib/*/libcallgate.so.0",
                    "/usr/*/callgate/callgate-init"]:
        if not [p for p in paths if glob.fnmatch.fnmatch(p, pattern)]:
            fail("nothing matches %s in the package" % pattern)
    ctl = os.path.join(work, "control")
    run(["dpkg-deb", "-e", deb, ctl])
    conffiles = open(os.path.join(ctl, "conffiles")).read().split()
    if "/etc/callgate/policy.yaml" not in conffiles:
        fail("the policy is not a conffile: %s" % conffiles)
    postinst = open(os.path.join(ctl, "postinst")).read()
    for needle in ["systemd-sysusers", "systemd-tmpfiles", "enable 'callgated.socket'",
                   "enable 'callgated-admin.socket'", "enable 'callgated.service'"]:
        if needle not in postinst:
            fail("postinst lacks %r" % needle)
    print("package: contents ok (%d paths, policy a conffile)" % len(paths))


def check_lintian(deb):
    r = run(["lintian", "--no-tag-display-limit", deb], check=False, timeout=300)
    errors = [l for l in r.stdout.splitlines() if l.startswith("E:")]
    if errors:
        fail("lintian errors:\n" + "\n".join(errors))
    print("package: lintian: no errors (%d other lines)" % len(r.stdout.splitlines()))


def installed():
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "callgate"], capture_output=True,
                       text=True)
    return r.returncode == 0 and "installed" in r.stdout and "not-installed" not in r.stdout


def install_start_purge(deb, work):
    if installed() or any(os.path.exists(p) for p in ("/etc/callgate", "/var/lib/callgate",
                                                      "/run/callgate")):
        print("package: install/purge not tried: this machine already has callgate installed "
              "or state in /etc/callgate, /var/lib/callgate or /run/callgate")
        return
    if os.geteuid() != 0:
        print("package: install/purge not tried: not root")
        return
    try:
        run(["dpkg", "-i", deb], timeout=300)
        if run(["getent", "group", "callgate"], check=False).returncode != 0:
            fail("postinst did not create the callgate group")
        st = os.stat("/var/lib/callgate")
        if st.st_mode & 0o777 != 0o700:
            fail("/var/lib/callgate has mode %o" % (st.st_mode & 0o777))
        if not os.path.isdir("/run/callgate"):
            fail("postinst did not create /run/callgate")
        conf = run(["dpkg-query", "-W", "-f=${Conffiles}", "callgate"]).stdout
        if "/etc/callgate/policy.yaml" not in conf:
            fail("dpkg does not list the policy as a conffile: %r" % conf)
        run(["systemd-analyze", "verify", "--man=no", "/lib/systemd/system/callgated.service",
             "/lib/systemd/system/callgated.socket",
             "/lib/systemd/system/callgated-admin.socket"])
        # Where systemd runs, postinst has started it; here, start the
        # installed daemon by hand with the installed policy.
        sock = os.path.join(work, "cg.sock")
        log = open(os.path.join(work, "daemon.log"), "w+")
        d = subprocess.Popen(["/usr/sbin/callgated", "--policy", "/etc/callgate/policy.yaml",
                              "--socket", sock, "--state-dir", os.path.join(work, "state")],
                             stdout=log, stderr=log, cwd=work)
        try:
            deadline = time.monotonic() + 30
            while True:
                r = run(["/usr/bin/callgate", "--socket", sock, "ping"], check=False)
                if r.returncode == 0:
                    break
                if d.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    fail("the installed callgated did not answer a ping: %s %s\n%s"
                         % (r.stdout, r.stderr, log.read()))
                time.sleep(0.1)
        finally:
            d.terminate()
            d.wait(30)
        print("package: installed; group, directories, conffile ok; units verify; "
              "the installed daemon answered")
    finally:
        if installed() or subprocess.run(["dpkg-query", "-W", "callgate"],
                                         capture_output=True).returncode == 0:
            run(["dpkg", "--purge", "callgate"], timeout=300)
    left = [p for p in ["/etc/callgate", "/var/lib/callgate", "/run/callgate",
                        "/usr/sbin/callgated", "/usr/bin/callgate",
                        "/lib/systemd/system/callgated.service"] if os.path.exists(p)]
    if left:
        fail("left behind after purge: %s" % left)
    if subprocess.run(["dpkg-query", "-W", "callgate"], capture_output=True).returncode == 0:
        fail("dpkg still knows callgate after purge")
    print("package: purged cleanly (the callgate group stays, as Debian keeps system groups)")


def main():
    with tempfile.TemporaryDirectory(prefix="cg-pkg-") as work:
        tree = os.path.join(work, "callgate")
        copy_tree(tree)
        ensure_tools(tree)
        env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck parallel=2")
        for k in ("CG_SRCDIR", "CG_BUILDDIR", "CALLGATED", "CALLGATE", "MESON_TEST_ITERATION"):
            env.pop(k, None)
        t0 = time.monotonic()
        run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=tree, env=env, timeout=900)
        debs = glob.glob(os.path.join(work, "callgate_*.deb"))
        if len(debs) != 1:
            fail("expected one callgate_*.deb, found %s" % debs)
        print("package: built %s in %.0f s" % (os.path.basename(debs[0]), time.monotonic() - t0))
        check_contents(debs[0], work)
        check_lintian(debs[0])
        install_start_purge(debs[0], work)
    print("ok: the Debian package builds, holds what it should, passes lintian, "
          "installs and purges")


if __name__ == "__main__":
    main()
