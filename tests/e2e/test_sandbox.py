# SPDX-License-Identifier: MIT
"""`callgate sandbox`: the kernel confinement proven by behaviour.

Every refusal is checked by its errno (a python3 helper inside the sandbox
prints errno names) next to the same operation that must succeed, so a test
cannot pass because the command merely failed.
"""
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CALLGATE = os.environ.get("CALLGATE", "build/callgate")
# A python3 outside any per-user tree, so the default exec set covers it.
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Runs the python statements given as argv[1..] and prints "NAME OK" or
# "NAME ERRNO" for each; argv entries are "NAME=expression".
PROBE = r"""
import errno, os, shutil, socket, sys
for arg in sys.argv[1:]:
    name, expr = arg.split("=", 1)
    try:
        exec(expr)
        print(name, "OK", flush=True)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"""


def sandbox(*args, timeout=60, **kw):
    """The sandbox with Landlock, seccomp, rlimits and the tree but no view:
    these tests prove those layers alone (test_view.py proves the view)."""
    return subprocess.run([CALLGATE, "sandbox", "--no-view", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


def probe(flags, **ops):
    """Run the probe under flags; return {name: 'OK' | errno name}."""
    r = sandbox(*flags, "--", PY, "-c", PROBE, *[f"{k}={v}" for k, v in ops.items()])
    out = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        out[k] = v
    if set(out) != set(ops):
        raise AssertionError(f"probe incomplete: rc={r.returncode} out={r.stdout!r} "
                             f"err={r.stderr!r}")
    return out


def pid_running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


class FsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cg-sandbox-")
        self.inside = os.path.join(self.tmp, "in")
        self.outside = os.path.join(self.tmp, "out")
        os.mkdir(self.inside)
        os.mkdir(self.outside)
        with open(os.path.join(self.outside, "victim"), "w") as f:
            f.write("keep")
        with open(os.path.join(self.inside, "mine"), "w") as f:
            f.write("mine")
        os.symlink(os.path.join(self.outside, "victim"), os.path.join(self.inside, "link"))
        self.flags = ["--write", self.inside]

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_program_outside_the_exec_trees_is_named_with_the_fix(self):
        # A program found outside the --exec trees (pyenv shims, venvs,
        # ~/.local/bin) cannot run under a path option: the message names
        # where it resolved and the flag that allows it, and adding it works.
        prog = os.path.join(self.inside, "tool")
        with open(prog, "w") as f:
            f.write("#!/bin/sh\necho tool ran\n")
        os.chmod(prog, 0o755)
        r = sandbox(*self.flags, "--", prog)
        self.assertEqual(r.returncode, 126, r.stderr)
        self.assertIn("resolves to " + prog, r.stderr)
        self.assertIn("--exec", r.stderr)
        ok = sandbox(*self.flags, "--exec", "/usr", "--exec", self.inside, "--", prog)
        self.assertEqual((ok.returncode, ok.stdout), (0, "tool ran\n"), ok.stderr)

    def test_shell_redirect(self):
        out_p = os.path.join(self.outside, "x")
        in_p = os.path.join(self.inside, "x")
        r = sandbox(*self.flags, "--", "sh", "-c", f"echo x > {out_p}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(os.strerror(errno.EACCES), r.stderr)
        self.assertFalse(os.path.exists(out_p))
        r = sandbox(*self.flags, "--", "sh", "-c", f"echo x > {in_p}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(in_p) as f:
            self.assertEqual(f.read(), "x\n")

    def test_python_open_write(self):
        res = probe(self.flags,
                    outside=f"open({os.path.join(self.outside, 'y')!r}, 'w')",
                    inside=f"open({os.path.join(self.inside, 'y')!r}, 'w')",
                    read_outside=f"open({os.path.join(self.outside, 'victim')!r}).read()")
        self.assertEqual(res, {"outside": "EACCES", "inside": "OK", "read_outside": "OK"})

    def test_cp_and_mv_out_of_tree(self):
        mine = os.path.join(self.inside, "mine")
        r = sandbox(*self.flags, "--", "cp", mine, os.path.join(self.outside, "copy"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(os.strerror(errno.EACCES), r.stderr)
        r = sandbox(*self.flags, "--", "mv", mine, os.path.join(self.outside, "moved"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(os.strerror(errno.EACCES), r.stderr)
        self.assertTrue(os.path.exists(mine))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "moved")))
        res = probe(self.flags,
                    rename_out=f"os.rename({mine!r}, {os.path.join(self.outside, 'r')!r})",
                    rename_in=f"os.rename({mine!r}, {os.path.join(self.inside, 'r')!r})",
                    cp_in=f"shutil.copy({os.path.join(self.inside, 'r')!r}, "
                          f"{os.path.join(self.inside, 'c')!r})")
        self.assertEqual(res, {"rename_out": "EACCES", "rename_in": "OK", "cp_in": "OK"})

    def test_symlink_pointing_outside(self):
        res = probe(self.flags, through_link=f"open({os.path.join(self.inside, 'link')!r}, 'w')")
        self.assertEqual(res, {"through_link": "EACCES"})
        with open(os.path.join(self.outside, "victim")) as f:
            self.assertEqual(f.read(), "keep")

    def test_rm_rf_outside_dir(self):
        r = sandbox(*self.flags, "--", "rm", "-rf", self.outside)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(os.strerror(errno.EACCES), r.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.outside, "victim")))
        sub = os.path.join(self.inside, "sub")
        os.makedirs(os.path.join(sub, "deep"))
        r = sandbox(*self.flags, "--", "rm", "-rf", sub)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(sub))

    def test_hard_link_to_outside_file(self):
        # No confined command makes a hard link at all (seccomp answers
        # EXDEV, as Landlock does for an inode from outside): a write through
        # another name of a file is reported under that name alone, and the
        # sweep after a call missed a repository's config so (s43d F1).
        victim = os.path.join(self.outside, "victim")
        res = probe(self.flags,
                    link_outside=f"os.link({victim!r}, {os.path.join(self.inside, 'hl')!r})",
                    link_to_outside=f"os.link({os.path.join(self.inside, 'mine')!r}, "
                                    f"{os.path.join(self.outside, 'hl')!r})",
                    link_inside=f"os.link({os.path.join(self.inside, 'mine')!r}, "
                                f"{os.path.join(self.inside, 'hl2')!r})")
        self.assertEqual(res, {"link_outside": "EXDEV", "link_to_outside": "EXDEV",
                               "link_inside": "EXDEV"})
        self.assertFalse(os.path.exists(os.path.join(self.inside, "hl2")))

    def test_truncate_outside(self):
        victim = os.path.join(self.outside, "victim")
        res = probe(self.flags, trunc=f"os.truncate({victim!r}, 0)")
        self.assertEqual(res, {"trunc": "EACCES"})
        self.assertEqual(os.path.getsize(victim), 4)

    def test_report_names_abi_and_paths(self):
        rep = os.path.join(self.tmp, "report.json")
        r = sandbox(*self.flags, "--report", rep, "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(rep) as f:
            j = json.load(f)
        self.assertTrue(j["confined"])
        self.assertGreaterEqual(j["landlock"]["abi"], 1)
        self.assertTrue(j["landlock"]["fs"])
        self.assertTrue(j["no_new_privs"])
        self.assertTrue(j["seccomp"]["enforced"])
        self.assertIn({"path": self.inside, "access": "write", "set": 0}, j["paths"])
        self.assertEqual(j["downgraded"], [])


class InheritedFdsTest(unittest.TestCase):
    def test_only_stdio_reaches_the_command(self):
        # An fd the caller left open (here 7, writable, outside the write set)
        # would get past Landlock: the command must not have it, with or
        # without a view.
        outside = tempfile.mkdtemp(prefix="cg-sbx-fd-", dir="/var/tmp")
        victim = os.path.join(outside, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        fd = os.open(victim, os.O_WRONLY | os.O_APPEND)
        try:
            os.dup2(fd, 7, inheritable=True)
            for flags in (["--no-view"], []):
                r = subprocess.run([CALLGATE, "sandbox", *flags, "--", "sh", "-c",
                                    "echo gotcha >&7 && echo wrote"], capture_output=True,
                                   text=True, timeout=60, pass_fds=(7,))
                self.assertNotIn("wrote", r.stdout, (flags, r.stderr))
                self.assertIn("Bad file descriptor", r.stderr, flags)
            with open(victim) as f:
                self.assertEqual(f.read(), "keep")
        finally:
            os.close(fd)
            os.close(7)
            shutil.rmtree(outside)


class SeccompTest(unittest.TestCase):
    def test_denied_syscalls_eperm(self):
        res = probe([], unshare_user="os.unshare(os.CLONE_NEWUSER)"
                    if hasattr(os, "unshare") else "raise PermissionError(1, 'x')",
                    keyctl="import ctypes; l=ctypes.CDLL(None, use_errno=True); "
                           "r=l.syscall(250, 0, 0, 0, 0, 0); "
                           "(_ for _ in ()).throw(OSError(ctypes.get_errno(), 'k')) if r else None")
        self.assertEqual(res["unshare_user"], "EPERM")
        self.assertEqual(res["keyctl"], "EPERM")


class NetTest(unittest.TestCase):
    def listen(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self.addCleanup(s.close)
        return s.getsockname()[1]

    def connect_expr(self, port):
        return f"socket.create_connection(('127.0.0.1', {port}), timeout=5).close()"

    def test_net_none(self):
        port = self.listen()
        self.assertEqual(probe([], c=self.connect_expr(port)), {"c": "OK"})
        self.assertEqual(probe(["--net", "none"], c=self.connect_expr(port)),
                         {"c": "ECONNREFUSED"})
        # Its own loopback is up: a server inside the sandbox is reachable.
        own = ("s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
               "socket.create_connection(s.getsockname(), timeout=5).close()")
        self.assertEqual(probe(["--net", "none"], own=own), {"own": "OK"})

    def test_tcp_allow_list(self):
        a, b = self.listen(), self.listen()
        res = probe(["--net", f"tcp:{a}"], a=self.connect_expr(a), b=self.connect_expr(b))
        self.assertEqual(res, {"a": "OK", "b": "EACCES"})


class LimitTest(unittest.TestCase):
    def test_fork_bomb(self):
        bomb = ("import os, errno, time\n"
                "try:\n"
                "    for i in range(500):\n"
                "        if os.fork() == 0:\n"
                "            time.sleep(30); os._exit(0)\n"
                "    print('NOLIMIT')\n"
                "except OSError as e:\n"
                "    print(errno.errorcode[e.errno])\n")
        r = sandbox("--limit", "nproc=30", "--", PY, "-c", bomb)
        self.assertEqual(r.stdout.strip(), "EAGAIN", r.stderr)

    def test_memory_hog(self):
        hog = ("import mmap, errno\n"
               "try:\n"
               "    m = mmap.mmap(-1, 1 << 30)\n"
               "    print('NOLIMIT')\n"
               "except OSError as e:\n"
               "    print(errno.errorcode[e.errno])\n"
               "try:\n"
               "    b = bytearray(1 << 30)\n"
               "    print('NOLIMIT')\n"
               "except MemoryError:\n"
               "    print('MemoryError')\n")
        r = sandbox("--limit", "as=256M", "--", PY, "-c", hog)
        self.assertEqual(r.stdout.split(), ["ENOMEM", "MemoryError"], r.stderr)
        r = sandbox("--", PY, "-c", "import mmap; mmap.mmap(-1, 1 << 30); print('fine')")
        self.assertEqual(r.stdout.strip(), "fine")

    def test_file_size(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "big")
            r = sandbox("--limit", "fsize=1K", "--", PY, "-c",
                        "import signal, errno\n"
                        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                        f"f = open({p!r}, 'wb', buffering=0)\n"
                        "try:\n"
                        "    n = f.write(b'x' * 4096)  # short: stops at the limit\n"
                        "    f.write(b'x'); print('NOLIMIT', n)\n"
                        "except OSError as e:\n"
                        "    print(errno.errorcode[e.errno])\n")
            self.assertEqual(r.stdout.strip(), "EFBIG", r.stderr)


class BaselineTest(unittest.TestCase):
    def test_cpu_seconds(self):
        r = sandbox("--limit", "cpu=1", "--", PY, "-c", "while True: pass", timeout=120)
        self.assertEqual(r.returncode, 128 + signal.SIGXCPU, r.stderr)

    def test_umask_and_groups(self):
        r = sandbox("--", "sh", "-c", "umask; id -G")
        self.assertEqual(r.returncode, 0, r.stderr)
        umask, groups = r.stdout.split("\n")[:2]
        self.assertEqual(umask, "0077")
        # Only the primary group is left (root runs this suite).
        self.assertEqual(groups.split(), [str(os.getgid())])

    @unittest.skipUnless(os.geteuid() == 0, "needs root")
    def test_user_drop(self):
        r = sandbox("--user", "nobody", "--", "sh", "-c", "id -u; id -G")
        self.assertEqual(r.returncode, 0, r.stderr)
        uid, groups = r.stdout.split("\n")[:2]
        self.assertEqual(uid, "65534")
        self.assertEqual(groups.split(), ["65534"])


class TreeTest(unittest.TestCase):
    def test_setsid_grandchild_killed_at_deadline(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "pid")
            t0 = time.monotonic()
            r = sandbox("--timeout", "1500", "--", "sh", "-c",
                        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & sleep 60",
                        timeout=60)
            self.assertEqual(r.returncode, 124, r.stderr)
            self.assertLess(time.monotonic() - t0, 30)
            with open(pidfile) as f:
                pid = int(f.read())
            for _ in range(200):
                if not pid_running(pid):
                    break
                time.sleep(0.05)
            self.assertFalse(pid_running(pid), "setsid grandchild outlived the deadline")

    def test_escapee_killed_when_command_exits(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "pid")
            r = sandbox("--", "sh", "-c",
                        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & "
                        f"while [ ! -s {pidfile} ]; do sleep 0.05; done; exit 3")
            self.assertEqual(r.returncode, 3, r.stderr)
            with open(pidfile) as f:
                pid = int(f.read())
            for _ in range(200):
                if not pid_running(pid):
                    break
                time.sleep(0.05)
            self.assertFalse(pid_running(pid))


class ExecSetTest(unittest.TestCase):
    def test_exec_set_of_one_file(self):
        true, ls = shutil.which("true"), shutil.which("ls")
        flags = ["--read", "/", "--exec", os.path.realpath(true)]
        for d in ("/lib", "/lib64", "/usr/lib"):
            if os.path.isdir(d):
                flags += ["--exec", d]
        self.assertEqual(sandbox(*flags, "--", true).returncode, 0)
        r = sandbox(*flags, "--", ls)
        self.assertEqual(r.returncode, 126)
        self.assertIn("EACCES", r.stderr)


class CliTest(unittest.TestCase):
    def test_exit_code_passes_through(self):
        self.assertEqual(sandbox("--", "sh", "-c", "exit 7").returncode, 7)
        self.assertEqual(sandbox("--", "sh", "-c", "kill -TERM $$").returncode,
                         128 + signal.SIGTERM)

    def test_usage_errors(self):
        self.assertEqual(sandbox("--net", "bogus", "--", "true").returncode, 64)
        self.assertEqual(sandbox("--limit", "nope=1", "--", "true").returncode, 64)
        self.assertEqual(sandbox("--read", "/").returncode, 64)

    def test_missing_command(self):
        self.assertEqual(sandbox("--", "/nonexistent/cmd").returncode, 127)

    def test_relative_token_path_refused(self):
        r = sandbox("--write", "${nothing}", "--", "true")
        self.assertEqual(r.returncode, 70)
        self.assertIn("MCP-CONF-E-003", r.stderr)


if __name__ == "__main__":
    unittest.main()
