# SPDX-License-Identifier: MIT
"""`callgate log` prints one line per call (issue 15, item 2): time, trace,
peer, host, decision, rule, exit and the command, built from the journal's
events grouped by trace; filters; --json; --events keeps the raw events; a
progress line on a terminal; and the daemon's `log` action answers the same
per-call summary.
"""
import json
import time
import os
import pty
import subprocess
import unittest

import cgtest
from test_verdict_table import package

POLICY = """version: 1
rules:
  - id: echo-ok
    decision: allow
    match: { exe: [echo, "false"], privileged: false }
  - id: no-mkfs
    decision: deny
    match: { exe: [mkfs.ext4] }
  - id: ask-a-person
    decision: defer
    match: { exe: [touch] }
"""


class Log(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(policy_text=POLICY).start()
        cls.t = {}
        for name, pipe, extra in (("echo", [["echo", "it's here"]], {"host": "build-1"}),
                                  ("false", [["false"]], {}),
                                  ("mkfs", [["mkfs.ext4", "/dev/null"]], {}),
                                  ("touch", [["touch", "x"]], {"session": "s-9"}),
                                  # refused before any policy decision (a relative path)
                                  ("invalid", [["./run.sh"]], {})):
            r = cls.d.request(cgtest.make_request(pipe, privileged=False, **extra))
            cls.t[name] = r["reply"]["trace_id"]
        # A package on disk means the journal holds all of its trace's events.
        for tid in cls.t.values():
            package(cls.d, tid)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def log(self, *args):
        r = self.d.cli("log", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode()

    def calls(self, *args):
        return [json.loads(l) for l in self.log("--json", *args).splitlines()]

    def test_one_line_per_call(self):
        out = self.log()
        for name, tid in self.t.items():
            lines = [l for l in out.splitlines() if tid in l]
            self.assertEqual(len(lines), 1, (name, out))
        echo = [l for l in out.splitlines() if self.t["echo"] in l][0]
        self.assertIn("%d/" % os.getuid(), echo)
        self.assertIn(" build-1 ALLOW allowed echo-ok exit=0 ", echo)
        self.assertTrue(echo.endswith("echo 'it'\\''s here'"), echo)
        mkfs = [l for l in out.splitlines() if self.t["mkfs"] in l][0]
        self.assertIn(" BLOCK blocked no-mkfs exit=- mkfs.ext4 /dev/null", mkfs)
        false = [l for l in out.splitlines() if self.t["false"] in l][0]
        self.assertIn(" ALLOW failed echo-ok exit=1 false", false)
        # No policy decision was taken: not "BLOCK" (s36 walk); the reply's
        # code stands where a rule would (s44c L8).
        invalid = [l for l in out.splitlines() if self.t["invalid"] in l][0]
        self.assertIn(" - - invalid WA-RES-I-003 exit=- ./run.sh", invalid)

    def test_json_one_object_per_call(self):
        by = {c["trace_id"]: c for c in self.calls()}
        c = by[self.t["echo"]]
        self.assertEqual((c["decision"], c["rule_id"], c["exit"], c["outcome"]),
                         ("ALLOW", "echo-ok", 0, "allowed"))
        self.assertEqual(c["command"], "echo 'it'\\''s here'")
        self.assertEqual(c["peer"]["uid"], os.getuid())
        self.assertTrue(c["executed"])
        t = by[self.t["touch"]]
        self.assertEqual((t["decision"], t["outcome"], t["exit"], t["executed"]),
                         ("UNKNOWN", "refused", None, False))

    def test_an_approved_call_that_failed_is_still_approved(self):
        # --decision approved left out a call a person approved once it
        # exited non-zero: the outcome column says failed (s36 walk).
        import threading
        with cgtest.Daemon(policy_text=POLICY, flags=["--approval"]) as d:
            box = {}
            req = cgtest.make_request([["touch", "/nonexistent/dir/x"]], privileged=False)
            th = threading.Thread(target=lambda: box.update(r=d.request(req, timeout=30)))
            th.start()
            for _ in range(100):
                p = d.admin("pending")["reply"]["data"]["pending"]
                if p:
                    break
                time.sleep(0.05)
            d.admin("approve", trace_id=p[0]["trace_id"], request_sha256=p[0]["request_sha256"])
            th.join(30)
            tid = box["r"]["reply"]["trace_id"]
            package(d, tid)
            r = d.cli("log", "--json", "--decision", "approved")
            calls = [json.loads(l) for l in r.stdout.decode().splitlines()]
            self.assertEqual([(c["trace_id"], c["outcome"], c["via"]) for c in calls],
                             [(tid, "failed", "approved")])

    def test_filters(self):
        ids = lambda *a: {c["trace_id"] for c in self.calls(*a)}
        self.assertEqual(ids("--decision", "block"), {self.t["mkfs"]})
        self.assertEqual(ids("--decision", "failed"), {self.t["false"]})
        self.assertEqual(ids("--rule", "echo-ok"), {self.t["echo"], self.t["false"]})
        self.assertEqual(ids("--session", "s-9"), {self.t["touch"]})
        self.assertEqual(ids("--trace", self.t["mkfs"]), {self.t["mkfs"]})
        self.assertTrue(set(self.t.values()) <= ids("--peer", str(os.getuid())))
        self.assertEqual(ids("--peer", "4242424"), set())
        self.assertTrue(set(self.t.values()) <= ids("--since", "1h"))
        self.assertEqual(ids("--since", cgtest.now_rfc3339(120)), set())
        self.assertEqual(self.d.cli("log", "--since", "soon").returncode, 64)
        self.assertEqual(self.d.cli("log", "--peer", "x").returncode, 64)

    def test_a_file_action_prefixes_and_empty_filters_read_plainly(self):
        # ux-s43c M5: a file tool's path was in the raw journal only ("[gate]");
        # L3: the first characters of an id find the call, and a filter that
        # matches nothing says so. (A daemon of its own: the class's counts stay.)
        with cgtest.Daemon(policy_text=POLICY) as d:
            path = os.path.join(d.workspace, "notes.txt")
            r = d.request(cgtest.make_request(None, action="gate", privileged=False,
                                              actions=[{"action_type": "write",
                                                        "resource": path, "tool": "Write"}]))
            tid = r["reply"]["trace_id"]
            package(d, tid)
            out = d.cli("log").stdout.decode()
            line = [l for l in out.splitlines() if tid in l][0]
            self.assertTrue(line.endswith("write %s (Write)" % path), line)
            self.assertIn(tid, d.cli("log", "--trace", tid[:8]).stdout.decode())
            r = d.cli("log", "--rule", "no-such-rule")
            self.assertEqual((r.returncode, r.stdout), (0, b""), r)
            self.assertIn(b"no call in the journal matches", r.stderr)
            r = d.cli("verdict", tid[:8])
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(b"a trace id is 36 characters", r.stderr)

    def test_events_keeps_the_raw_events(self):
        out = self.log("--events", "--trace", self.t["echo"])
        types = [l.split()[3] for l in out.splitlines()]
        self.assertEqual(types[0], "request")
        self.assertIn("exec.finished", types)
        self.assertEqual(types[-1], "seal")
        raw = self.log("--events", "--json", "--trace", self.t["echo"]).splitlines()
        self.assertEqual(len(raw), len(types))
        self.assertEqual(json.loads(raw[0])["trace"], self.t["echo"])

    def test_progress_line_only_on_a_terminal(self):
        r = self.d.cli("log")
        self.assertNotIn(b"traces read", r.stderr)
        master, slave = pty.openpty()
        try:
            p = subprocess.run([cgtest.CALLGATE, "--state-dir", self.d.state_dir, "log"],
                               stdout=subprocess.PIPE, stderr=slave, timeout=60)
            os.close(slave)
            slave = None
            err = b""
            try:
                while True:
                    chunk = os.read(master, 4096)
                    if not chunk:
                        break
                    err += chunk
            except OSError:
                pass
        finally:
            if slave is not None:
                os.close(slave)
            os.close(master)
        self.assertEqual(p.returncode, 0)
        self.assertIn(b"traces read", err)
        self.assertIn(self.t["echo"].encode(), p.stdout)

    def test_daemon_log_action_answers_per_call(self):
        r = self.d.request({"action": "log", "limit": 5000})
        self.assertEqual(r["reply"]["code"], "MCP-LOG-S-103", r)
        by = {c["trace_id"]: c for c in r["reply"]["data"]["calls"]}
        self.assertEqual(by[self.t["mkfs"]]["decision"], "BLOCK")
        self.assertEqual(by[self.t["mkfs"]]["rule_id"], "no-mkfs")
        self.assertEqual(by[self.t["echo"]]["exit"], 0)
        self.assertEqual(by[self.t["echo"]]["command"], "echo 'it'\\''s here'")


if __name__ == "__main__":
    unittest.main()
