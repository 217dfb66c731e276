# SPDX-License-Identifier: MIT
"""DEGRADE through the real daemon: a policy's constraints reach the kernel.

The structural checks of test_sandbox.py again, but the constraint sets come
from a policy file and every command is a request on callgated's socket,
decided DEGRADE by a rule and run confined by the daemon. Each refusal is
checked by its errno (a python3 probe prints errno names; coreutils and sh
print strerror) next to the same operation inside, which must succeed, so a
test cannot pass because the command merely failed.

The policy picks the constraint set by the request's `session` (a context
key): "fs" confines writes to the workspace, "netnone" adds `net: none`,
"tcp" allows one TCP port, "nproc"/"mem" set limits. Requests with no
session fall through to the last two rules (the original checks: writes and
network together, and a short deadline for sh).

Invariants: every request is privileged:false (the protocol's default, true,
would wait for a human); each test works in its own inside/outside trees.
"""
import base64
import errno
import os
import signal
import socket
import threading
import time
import unittest

import cgtest

PY = os.path.realpath("/usr/bin/python3") if os.path.exists("/usr/bin/python3") else None
SH = os.path.realpath("/bin/sh")

# Runs the python statements given as argv[2..] ("NAME=expression") and
# prints "NAME OK" or "NAME ERRNO" for each.
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

# Forks argv[1] children that wait to be killed; prints "OK n" or the errno
# of the failed fork and how many it made. It kills and reaps its children
# itself, so the test does not depend on the daemon's tree kill here.
FORKER = r"""
import errno, os, signal, sys, time
kids = []
try:
    for i in range(int(sys.argv[1])):
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(60)
            finally:
                os._exit(0)
        kids.append(pid)
    print("OK", len(kids), flush=True)
except OSError as e:
    print(errno.errorcode[e.errno], len(kids), flush=True)
finally:
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
    for pid in kids:
        os.waitpid(pid, 0)
"""

# Maps argv[1] bytes twice: with mmap (OSError) and as a bytearray
# (MemoryError); prints what each did.
HOG = r"""
import errno, mmap, sys
n = int(sys.argv[1])
try:
    m = mmap.mmap(-1, n)
    m[n - 1] = 1
    print("mmap OK", flush=True)
    m.close()
except OSError as e:
    print("mmap", errno.errorcode[e.errno], flush=True)
try:
    b = bytearray(n)
    print("bytearray OK", flush=True)
    del b
except MemoryError:
    print("bytearray MemoryError", flush=True)
"""

# "hold NAME READY DONE": bind the abstract Unix name NAME, create READY,
# wait for DONE; "try NAME": connect to it. Both print the inode of their
# network namespace, then "bound OK" / "connect OK" or an errno name.
ABSTRACT = r"""
import errno, os, socket, sys, time
print("netns", os.stat("/proc/self/ns/net").st_ino, flush=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    if sys.argv[1] == "hold":
        s.bind("\0" + sys.argv[2])
        s.listen(1)
        open(sys.argv[3], "w").close()
        print("bound OK", flush=True)
        for _ in range(400):
            if os.path.exists(sys.argv[4]):
                break
            time.sleep(0.05)
    else:
        s.connect("\0" + sys.argv[2])
        print("connect OK", flush=True)
except OSError as e:
    print(sys.argv[1], errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"""

GIB = 1 << 30
AS_LIMIT = 256 << 20
NPROC_LIMIT = 30
# tmp: shared — the fixtures live in the daemon's temporary directory under
# /tmp, outside the workspace; a private /tmp (the default) would hide them.
FS = '{ read: [/], write: ["${workspace}"], tmp: shared }'


def policy(allowed_port):
    return f"""
version: 1
rules:
  - id: fs-workspace
    decision: degrade
    why: writes confined to the workspace
    match: {{ exe: ["{PY}", "{SH}", cp, mv, rm, ln], session: [fs] }}
    constraints: {FS}
  - id: net-none
    decision: degrade
    why: no network
    match: {{ exe: ["{PY}"], session: [netnone] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], net: none, tmp: shared }}
  - id: net-tcp-port
    decision: degrade
    why: one TCP port
    match: {{ exe: ["{PY}"], session: [tcp] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], net: tcp, ports: [{allowed_port}], tmp: shared }}
  - id: nproc-limit
    decision: degrade
    why: few processes
    match: {{ exe: ["{PY}"], session: [nproc] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], limits: {{ nproc: {NPROC_LIMIT} }}, tmp: shared }}
  - id: memory-limit
    decision: degrade
    why: little address space
    match: {{ exe: ["{PY}"], session: [mem] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], limits: {{ as_bytes: {AS_LIMIT} }}, tmp: shared }}
  - id: py-confined
    decision: degrade
    why: python runs confined to the workspace, without network
    match: {{ exe: ["{PY}"] }}
    constraints:
      read: [/]
      write: ["${{workspace}}"]
      net: none
      tmp: shared
      limits: {{ nproc: 64 }}
  - id: sh-short-deadline
    decision: degrade
    why: shell with a short deadline
    match: {{ exe: ["{SH}"] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], timeout_ms: 1500, tmp: shared }}
"""


def pid_running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def connect_expr(port):
    return f"socket.create_connection(('127.0.0.1', {port}), timeout=5).close()"


EACCES_TEXT = os.strerror(errno.EACCES)  # "Permission denied"
# A write outside the workspace meets the view first: the root is a
# read-only mount. Landlock (EACCES) alone is proven by test_sandbox.py
# (--no-view) and test_view.py.
EROFS_TEXT = os.strerror(errno.EROFS)


@unittest.skipUnless(PY, "needs /usr/bin/python3")
class ConfinedByPolicy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Listeners exist before the policy is written: it names one port.
        cls.listener = listener()
        cls.other = listener()
        cls.port = cls.listener.getsockname()[1]
        cls.other_port = cls.other.getsockname()[1]
        try:
            cls.d = cgtest.Daemon(policy_text=policy(cls.port)).start()
        except BaseException:
            cls.listener.close()
            cls.other.close()
            raise
        # Arguments may not hold newlines (MCP-VAL-I-012): programs are files.
        cls.scripts = {}
        for name, text in (("probe", PROBE), ("forker", FORKER), ("hog", HOG),
                           ("abstract", ABSTRACT)):
            path = os.path.join(cls.d.tmp, name + ".py")
            with open(path, "w") as f:
                f.write(text)
            cls.scripts[name] = path

    @classmethod
    def tearDownClass(cls):
        cls.listener.close()
        cls.other.close()
        cls.d.close()

    def setUp(self):
        # A fresh pair of trees per test: "inside" in the workspace (the
        # write set), "outside" next to it, in the same filesystem.
        name = self.id().rsplit(".", 1)[1]
        self.inside = os.path.join(self.d.workspace, name)
        self.outside = os.path.join(self.d.tmp, "outside", name)
        os.makedirs(self.inside)
        os.makedirs(self.outside)
        self.victim = os.path.join(self.outside, "victim")
        with open(self.victim, "w") as f:
            f.write("keep")
        self.mine = os.path.join(self.inside, "mine")
        with open(self.mine, "w") as f:
            f.write("mine")

    # -- helpers -------------------------------------------------------------

    def run_cmd(self, argv, session, rule):
        """Run one stage through the daemon; assert it was DEGRADEd by rule
        and ran. Returns (exit_code, stdout, stderr, reply data)."""
        resp = self.d.request(cgtest.make_request([argv], privileged=False, session=session),
                              timeout=60)
        self.assertEqual(resp["status"], "ok", resp)
        data = resp["reply"].get("data", {})
        self.assertEqual((data.get("decision"), data.get("rule_id")), ("DEGRADE", rule),
                         resp["reply"])
        stage = resp["stages"][0]
        return (stage["exit_code"], base64.b64decode(resp.get("stdout", "")).decode(),
                base64.b64decode(stage.get("stderr", "")).decode(), data)

    def probe(self, session, rule, **ops):
        """Run the probe; return {name: 'OK' | errno name}."""
        argv = [PY, self.scripts["probe"]] + [f"{k}={v}" for k, v in ops.items()]
        code, out, err, _ = self.run_cmd(argv, session, rule)
        res = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(set(res), set(ops), f"probe incomplete: rc={code} err={err!r}")
        return res

    def assert_refused(self, argv, session="fs", rule="fs-workspace", text=EROFS_TEXT):
        code, _, err, _ = self.run_cmd(argv, session, rule)
        self.assertNotEqual(code, 0, err)
        self.assertIn(text, err)

    def assert_runs(self, argv, session="fs", rule="fs-workspace"):
        code, out, err, _ = self.run_cmd(argv, session, rule)
        self.assertEqual(code, 0, err)
        return out

    # -- filesystem: writes confined to the workspace ------------------------

    def test_shell_redirect_outside_eacces(self):
        out_p, in_p = os.path.join(self.outside, "x"), os.path.join(self.inside, "x")
        self.assert_refused([SH, "-c", f"echo x > {out_p}"])
        self.assertFalse(os.path.exists(out_p))
        self.assert_runs([SH, "-c", f"echo x > {in_p}"])
        with open(in_p) as f:
            self.assertEqual(f.read(), "x\n")

    def test_python_open_write_outside_eacces(self):
        res = self.probe("fs", "fs-workspace",
                         outside=f"open({os.path.join(self.outside, 'y')!r}, 'w')",
                         inside=f"open({os.path.join(self.inside, 'y')!r}, 'w')",
                         read_outside=f"open({self.victim!r}).read()",
                         trunc_outside=f"os.truncate({self.victim!r}, 0)")
        self.assertEqual(res, {"outside": "EROFS", "inside": "OK", "read_outside": "OK",
                               "trunc_outside": "EROFS"})
        self.assertFalse(os.path.exists(os.path.join(self.outside, "y")))
        self.assertTrue(os.path.exists(os.path.join(self.inside, "y")))
        self.assertEqual(os.path.getsize(self.victim), 4)

    def test_cp_and_mv_out_of_tree_eacces(self):
        copy, moved = os.path.join(self.outside, "copy"), os.path.join(self.outside, "moved")
        self.assert_refused(["cp", self.mine, copy])
        self.assert_refused(["mv", self.mine, moved])
        self.assertTrue(os.path.exists(self.mine))
        self.assertFalse(os.path.exists(copy))
        self.assertFalse(os.path.exists(moved))
        res = self.probe("fs", "fs-workspace",
                         rename_out=f"os.rename({self.mine!r}, {moved!r})")
        # Out of the workspace mount: EXDEV (the view), before Landlock could say EACCES.
        self.assertEqual(res, {"rename_out": "EXDEV"})
        # The same inside the tree.
        in_copy, in_moved = os.path.join(self.inside, "copy"), os.path.join(self.inside, "moved")
        self.assert_runs(["cp", self.mine, in_copy])
        self.assert_runs(["mv", self.mine, in_moved])
        self.assertFalse(os.path.exists(self.mine))
        for p in (in_copy, in_moved):
            with open(p) as f:
                self.assertEqual(f.read(), "mine")

    def test_write_through_symlink_pointing_outside_eacces(self):
        link_out = os.path.join(self.inside, "link-out")
        link_in = os.path.join(self.inside, "link-in")
        os.symlink(self.victim, link_out)
        os.symlink(self.mine, link_in)
        res = self.probe("fs", "fs-workspace",
                         through_out=f"open({link_out!r}, 'w')",
                         through_in=f"open({link_in!r}, 'a').write('+')")
        self.assertEqual(res, {"through_out": "EROFS", "through_in": "OK"})
        self.assert_refused([SH, "-c", f"echo x > {link_out}"])
        with open(self.victim) as f:
            self.assertEqual(f.read(), "keep")
        with open(self.mine) as f:
            self.assertEqual(f.read(), "mine+")

    def test_rm_rf_outside_dir_eacces(self):
        os.makedirs(os.path.join(self.outside, "deep", "er"))
        self.assert_refused(["rm", "-rf", self.outside])
        self.assertTrue(os.path.exists(self.victim))
        self.assertTrue(os.path.isdir(os.path.join(self.outside, "deep", "er")))
        sub = os.path.join(self.inside, "sub")
        os.makedirs(os.path.join(sub, "deep"))
        with open(os.path.join(sub, "deep", "f"), "w") as f:
            f.write("f")
        self.assert_runs(["rm", "-rf", sub])
        self.assertFalse(os.path.exists(sub))

    def test_hard_link_to_outside_file_exdev(self):
        # A confined command makes no hard link at all: seccomp answers
        # EXDEV (what Landlock answers for an inode from outside, and what
        # tools that link fall back from), inside the tree too, since a
        # write through another name of a repository's config is reported
        # under that name alone (s43d F1).
        hl = os.path.join(self.inside, "hl")
        res = self.probe("fs", "fs-workspace",
                         link_outside=f"os.link({self.victim!r}, {hl!r})",
                         link_to_outside=f"os.link({self.mine!r}, "
                                         f"{os.path.join(self.outside, 'hl')!r})",
                         link_inside=f"os.link({self.mine!r}, "
                                     f"{os.path.join(self.inside, 'hl2')!r})")
        self.assertEqual(res, {"link_outside": "EXDEV", "link_to_outside": "EXDEV",
                               "link_inside": "EXDEV"})
        self.assert_refused(["ln", self.victim, hl], text=os.strerror(errno.EXDEV))
        self.assertFalse(os.path.exists(hl))
        self.assertEqual(os.stat(self.victim).st_nlink, 1)
        self.assert_refused(["ln", self.mine, os.path.join(self.inside, "hl3")],
                            text=os.strerror(errno.EXDEV))
        self.assertEqual(os.stat(self.mine).st_nlink, 1)

    # -- network -------------------------------------------------------------

    def test_net_none_cannot_reach_daemon_loopback(self):
        # The command gets a fresh namespace: nothing listens on its
        # loopback, so the daemon's listener is ECONNREFUSED, while a server
        # the command starts on its own loopback is reachable.
        own = ("s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
               "socket.create_connection(s.getsockname(), timeout=5).close()")
        res = self.probe("netnone", "net-none", host=connect_expr(self.port), own=own)
        self.assertEqual(res, {"host": "ECONNREFUSED", "own": "OK"})
        # Control: the same connect from the host namespace (session tcp,
        # where this port is allowed) succeeds.
        res = self.probe("tcp", "net-tcp-port", host=connect_expr(self.port))
        self.assertEqual(res, {"host": "OK"})

    def test_net_none_each_call_has_a_namespace_of_its_own(self):
        # The daemon makes network namespaces ahead of the calls (a pool):
        # none may be shared. Call A holds an abstract Unix name, which is
        # scoped by network namespace, while calls B.. try to reach it; more
        # calls than the pool holds, so both the pooled and the refilled
        # ones are tried. A control connect from inside A's namespace (a
        # second stage would get its own) is the "own" probe above.
        ready = os.path.join(self.inside, "ready")
        done = os.path.join(self.inside, "done")
        name = f"cgtest-{os.getpid()}-{time.monotonic_ns()}"
        held = {}

        def hold():
            held["out"] = self.run_cmd([PY, self.scripts["abstract"], "hold", name, ready, done],
                                       "netnone", "net-none")

        t = threading.Thread(target=hold)
        t.start()
        try:
            for _ in range(400):
                if os.path.exists(ready):
                    break
                time.sleep(0.05)
            self.assertTrue(os.path.exists(ready), "call A never bound its name")
            seen = []
            for _ in range(6):
                _, out, err, _ = self.run_cmd([PY, self.scripts["abstract"], "try", name],
                                              "netnone", "net-none")
                lines = dict(line.split(" ", 1) for line in out.splitlines())
                self.assertEqual(lines.get("try"), "ECONNREFUSED", (out, err))
                seen.append(lines["netns"])
        finally:
            open(done, "w").close()
            t.join(timeout=60)
        _, out, err, _ = held["out"]
        lines = dict(line.split(" ", 1) for line in out.splitlines())
        self.assertEqual(lines.get("bound"), "OK", (out, err))
        host = str(os.stat("/proc/self/ns/net").st_ino)
        daemon = str(os.stat(f"/proc/{self.d.proc.pid}/ns/net").st_ino)
        self.assertNotIn(lines["netns"], seen + [host, daemon])
        self.assertNotIn(host, seen)
        self.assertNotIn(daemon, seen)

    def test_tcp_port_allow_list(self):
        res = self.probe("tcp", "net-tcp-port",
                         allowed=connect_expr(self.port),
                         other=connect_expr(self.other_port))
        self.assertEqual(res, {"allowed": "OK", "other": "EACCES"})
        _, _, _, data = self.run_cmd([PY, "-c", "pass"], "tcp", "net-tcp-port")
        net = data["confinement"]["network"]
        self.assertEqual((net["mode"], net["tcp_ports"]), ("tcp", [self.port]), net)
        # Control: with no port list (session fs, host network) the other
        # port connects too, so EACCES above is the allow-list's doing.
        res = self.probe("fs", "fs-workspace", other=connect_expr(self.other_port))
        self.assertEqual(res, {"other": "OK"})

    # -- limits --------------------------------------------------------------

    def test_fork_bomb_stopped_by_nproc(self):
        forker = self.scripts["forker"]
        # Control: a few processes are fine under the limit.
        _, out, err, data = self.run_cmd([PY, forker, "5"], "nproc", "nproc-limit")
        self.assertEqual(out.split(), ["OK", "5"], err)
        self.assertEqual(data["confinement"]["limits"], {"nproc": NPROC_LIMIT})
        _, out, err, _ = self.run_cmd([PY, forker, "500"], "nproc", "nproc-limit")
        name, made = out.split()
        self.assertEqual(name, "EAGAIN", err)
        self.assertLess(int(made), NPROC_LIMIT)

    def test_memory_hog_stopped_by_as_bytes(self):
        hog = self.scripts["hog"]
        _, out, err, data = self.run_cmd([PY, hog, str(GIB)], "mem", "memory-limit")
        self.assertEqual(out.splitlines(), ["mmap ENOMEM", "bytearray MemoryError"], err)
        self.assertEqual(data["confinement"]["limits"], {"as_bytes": AS_LIMIT})
        # Control: a small allocation under the limit works, and the same
        # gigabyte works without it (session fs has no limits).
        _, out, err, _ = self.run_cmd([PY, hog, str(16 << 20)], "mem", "memory-limit")
        self.assertEqual(out.splitlines(), ["mmap OK", "bytearray OK"], err)
        _, out, err, _ = self.run_cmd([PY, hog, str(GIB)], "fs", "fs-workspace")
        self.assertEqual(out.splitlines(), ["mmap OK", "bytearray OK"], err)

    # -- the original checks (no session) ------------------------------------

    def test_degrade_confines_writes_and_network(self):
        res = self.probe(
            "", "py-confined",
            inside=f"open({os.path.join(self.inside, 'made-inside')!r}, 'w')",
            outside=f"open({os.path.join(self.outside, 'x')!r}, 'w')",
            connect=connect_expr(self.port))
        self.assertEqual(res, {"inside": "OK", "outside": "EROFS", "connect": "ECONNREFUSED"})
        self.assertTrue(os.path.exists(os.path.join(self.inside, "made-inside")))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "x")))

    def test_reply_data_carries_the_confinement_report(self):
        _, _, _, data = self.run_cmd([PY, "-c", "pass"], "", "py-confined")
        conf = data.get("confinement")
        self.assertIsNotNone(conf, data)
        self.assertTrue(conf["confined"])
        self.assertGreaterEqual(conf["landlock"]["abi"], 1)
        self.assertTrue(conf["landlock"]["fs"])
        self.assertEqual(conf["network"]["mode"], "none")
        self.assertEqual(conf["limits"], {"nproc": 64})
        self.assertEqual(conf["downgraded"], [])
        self.assertIn({"path": os.path.realpath(self.d.workspace), "access": "write", "set": 0},
                      [dict(p, path=os.path.realpath(p["path"])) for p in conf["paths"]])

    def test_deadline_from_constraints_kills_setsid_grandchild(self):
        pidfile = os.path.join(self.inside, "gc.pid")
        t0 = time.monotonic()
        resp = self.d.request(cgtest.make_request(
            [[SH, "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 61.25' & sleep 60"]],
            privileged=False), timeout=60)
        self.assertEqual(resp["status"], "timeout", resp)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertTrue(os.path.exists(pidfile), "the grandchild never started")
        # The pid it wrote is its pid in the call's own pid namespace: look
        # for it on the host by its argv instead.
        for _ in range(200):
            if not cgtest.pids_running("sleep", "61.25"):
                break
            time.sleep(0.05)
        self.assertEqual(cgtest.pids_running("sleep", "61.25"), [],
                         "setsid grandchild outlived the deadline")


# Writes the time to argv[1] every 50 ms for a minute.
TICK = r"""
import sys, time
for _ in range(1200):
    with open(sys.argv[1], "w") as f:
        f.write(str(time.time()))
    time.sleep(0.05)
"""


class LeftRunningByACrash(unittest.TestCase):
    def test_a_call_a_crashed_daemon_left_running_is_killed_at_the_next_start(self):
        # s36 attack: an allowed call outlived a daemon crash with no
        # deadline, and the next daemon neither killed nor recorded it.
        d = cgtest.Daemon()
        self.addCleanup(d.close)
        d.start()
        script = os.path.join(d.workspace, "tick.py")
        tick = os.path.join(d.workspace, "tick")
        with open(script, "w") as f:
            f.write(TICK)
        req = cgtest.make_request([["python3", script, tick]], privileged=False,
                                  timeout_ms=60000)
        answered = []

        def call():
            try:
                answered.append(d.request(req, timeout=90))
            except Exception as e:  # the daemon is killed mid-call
                answered.append(e)

        t = threading.Thread(target=call)
        t.start()
        deadline = time.monotonic() + 30
        while not os.path.exists(tick) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = cgtest.pids_running("python3", script)
        self.assertTrue(pids, (answered, d.log))
        # The view's pid 1 dies with the daemon's thread until it has become
        # callgate-init (confine.c, shared_main): only then is the call on
        # its own. Under load the command may tick before that.
        def init_of(pid):
            with open("/proc/%d/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%d/cmdline" % ppid, "rb") as f:
                return f.read().split(b"\0")[0]
        deadline = time.monotonic() + 10
        while (not all(init_of(p).endswith(b"callgate-init") for p in pids)
               and time.monotonic() < deadline):
            time.sleep(0.02)
        d.stop(signal.SIGKILL)
        t.join(30)
        time.sleep(0.3)
        self.assertTrue(all(cgtest.pid_alive(p) for p in pids), "the crash alone kills it")
        d.start()
        deadline = time.monotonic() + 10
        while any(cgtest.pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse([p for p in pids if cgtest.pid_alive(p)], d.log)
        # The kill comes before its log line: under load the line may lag.
        said = "killed 1 call(s) a callgated that is gone left running"
        deadline = time.monotonic() + 10
        while said not in d.log and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(said, d.log)
        before = os.path.getmtime(tick)
        time.sleep(0.3)
        self.assertEqual(os.path.getmtime(tick), before, "the call still writes")


if __name__ == "__main__":
    unittest.main()
