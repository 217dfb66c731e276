# SPDX-License-Identifier: MIT
"""verdict.json and verdict.md tell the truth on every path (issue 15, item 1).

One real daemon (with --approval) and one without; each path is driven over
the agent socket (approvals and grants over the admin socket / the CLI), and
both files of the trace's package are read: the decision and who made it,
whether anything ran, its argv and resolved executable, exit codes and output
hashes, and a next step that can succeed. Every package then replays PASS,
with callgate and with the independent verifier.
"""
import json
import os
import subprocess
import sys
import unittest

import cgtest
from test_approval import WAIT, call_async, wait_pending

# Packages as directories: test_a_changed_verdict_fails_both_verifiers edits one.
POLICY = """version: 1
evidence:
  packages: directories
rules:
  - id: plain-ok
    decision: allow
    match: { exe: [echo, "false", sleep], privileged: false }
  - id: cat-confined
    decision: degrade
    match: { exe: [cat], privileged: false }
    constraints: { read: [/], write: ["${workspace}"], net: none }
  - id: no-mkfs
    decision: deny
    match: { exe: [mkfs.ext4] }
  - id: ask-a-person
    decision: defer
    match: { exe: [touch, id] }
"""


def package(d, tid):
    """(verdict.json, verdict.md) of trace tid, once its package is written."""
    md = cgtest.wait_package_file(d.state_dir, tid, "verdict.md", WAIT).decode()
    return json.loads(cgtest.package_file(d.state_dir, tid, "verdict.json")), md


class VerdictTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A person answers within 15 s on a loaded machine; the row that waits
        # for no answer has a daemon of its own with a short deadline.
        cls.d = cgtest.Daemon(policy_text=POLICY,
                              flags=["--approval", "--approval-timeout", "15000"])
        # A script the policy allows whose interpreter does not exist: permitted,
        # but it cannot be started.
        cls.unstartable = os.path.join(cls.d.workspace, "unstartable.sh")
        with open(cls.unstartable, "w") as f:
            f.write("#!/nonexistent/interpreter\n")
        os.chmod(cls.unstartable, 0o755)
        with open(cls.d.policy_path, "a") as f:
            f.write("  - id: script-ok\n    decision: degrade\n"
                    "    match: { exe: [\"%s\"], privileged: false }\n"
                    "    constraints: { read: [/], write: [\"${workspace}\"] }\n"
                    % cls.unstartable)
        cls.plain = cls.quick = None
        try:
            cls.d.start()
            cls.plain = cgtest.Daemon(policy_text=POLICY).start()
            cls.quick = cgtest.Daemon(policy_text=POLICY, flags=[
                "--approval", "--approval-timeout", "1500"]).start()
            cls.rows = {}
            cls.drive()
        except BaseException:
            cls.tearDownClass()  # no daemon outlives a failed set-up
            raise

    @classmethod
    def tearDownClass(cls):
        for d in (cls.d, cls.plain, cls.quick):
            if d:
                d.close()

    @classmethod
    def call(cls, name, pipeline, d=None, **fields):
        d = d or cls.d
        fields.setdefault("privileged", False)
        r = d.request(cgtest.make_request(pipeline, **fields), timeout=WAIT)
        cls.rows[name] = (d, r)

    @classmethod
    def through_a_person(cls, name, pipeline, verb):
        t, box = call_async(cls.d, cgtest.make_request(pipeline, privileged=False))
        p = wait_pending(cls.d, 1)[0]
        args = [verb, p["trace_id"]] + (["--why", "not this one"] if verb == "deny" else [])
        r = cls.d.cli(*args)
        assert r.returncode == 0, r.stderr
        t.join(WAIT)
        cls.rows[name] = (cls.d, box["resp"])

    @classmethod
    def drive(cls):
        ws = cls.d.workspace
        cls.call("allowed", [["echo", "hello"]])
        cls.call("degraded", [["cat", "/etc/hostname"]])
        cls.call("blocked", [["mkfs.ext4", "/dev/null"]])
        cls.call("failed", [["false"]])
        cls.call("not_started", [[cls.unstartable]])
        cls.call("run_timeout", [["sleep", "5"]], timeout_ms=300)
        cls.call("approval_timeout", [["touch", os.path.join(cls.quick.workspace, "never")]],
                 d=cls.quick)
        cls.call("refused", [["touch", os.path.join(ws, "never2")]], d=cls.plain)
        cls.call("dry_run", [["echo", "dry"]], action="gate")
        cls.call("dry_run_block", [["mkfs.ext4", "/dev/null"]], action="gate")
        r = cls.d.request({"id": "bad-1", "time": cgtest.now_rfc3339(), "pipeline": "ls"})
        cls.rows["invalid"] = (cls.d, r)
        cls.through_a_person("approved", [["id", "-u"]], "approve")
        cls.through_a_person("denied", [["id", "-g"]], "deny")
        g = cls.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/bin/id", "argv": ["id", "-un"]}],
            "privileged": False, "uses": 1, "ttl_s": 60})
        assert g["reply"]["code"] == "CT-OPEN-S-001", g
        cls.grant_id = g["reply"]["data"]["grant_id"]
        cls.call("granted", [["id", "-un"]])

    def row(self, name):
        d, r = self.rows[name]
        tid = r["reply"]["trace_id"]
        v, md = package(d, tid)
        self.assertEqual(v["trace_id"], tid)
        return r, v, md

    def check_ran(self, v, md, argv, exe, codes):
        self.assertTrue(v["executed"])
        self.assertIn("Executed:   yes", md)
        self.assertEqual(v["exit_codes"], codes)
        self.assertEqual(v["call"]["stages"][0]["argv"], argv)
        self.assertEqual(v["call"]["stages"][0]["exe"], exe)
        self.assertIn(exe, md)
        self.assertIn(" ".join(argv), md)
        self.assertEqual(v["blocked"], [])
        self.assertEqual(len(v["outputs"]["stdout"]["sha256"]), 64)
        self.assertEqual(v["call"]["peer"]["uid"], os.getuid())
        self.assertIn("uid", v["run"])
        self.assertIn("## Run", md)

    def check_not_run(self, v, md):
        self.assertFalse(v["executed"])
        self.assertIn("Executed:   no", md)
        self.assertNotIn("exit_codes", v)
        self.assertNotIn("run", v)

    def step(self, v, md):
        s = v["next_steps"][0]
        self.assertIn(s[:40], md.replace("\n", " "))
        return s

    def test_allowed(self):
        r, v, md = self.row("allowed")
        self.assertEqual((v["decision"], v["outcome"]), ("ALLOW", "allowed"))
        self.check_ran(v, md, ["echo", "hello"], "/usr/bin/echo", [0])
        self.assertEqual(v["outputs"]["stdout"]["bytes"], 6)
        self.assertEqual(v["decided_by"]["rule_id"], "plain-ok")
        self.assertIn("# Verdict: ALLOW", md)
        self.assertIn("Continue", self.step(v, md))

    def test_degraded(self):
        r, v, md = self.row("degraded")
        self.assertEqual((v["decision"], v["outcome"]), ("DEGRADE", "degraded"))
        self.check_ran(v, md, ["cat", "/etc/hostname"], "/usr/bin/cat", [0])
        self.assertEqual(v["run"]["network"]["mode"], "none")
        self.assertEqual(v["run"]["constraints"][0]["net"], "none")
        self.assertIn("constraints", self.step(v, md))

    def test_blocked_never_points_at_approval(self):
        r, v, md = self.row("blocked")
        self.assertEqual((v["decision"], v["outcome"]), ("BLOCK", "blocked"))
        self.check_not_run(v, md)
        self.assertEqual(v["decided_by"]["rule_id"], "no-mkfs")
        self.assertEqual(v["call"]["stages"][0]["exe"], "/usr/sbin/mke2fs")
        s = self.step(v, md)
        self.assertIn("no approval or grant overrides", s)
        self.assertNotIn("ask for approval", s)
        self.assertIn("no-mkfs", s)
        self.assertIn("# Verdict: BLOCK", md)

    def test_failed_run_points_at_stderr(self):
        r, v, md = self.row("failed")
        self.assertEqual((v["decision"], v["outcome"]), ("ALLOW", "failed"))
        self.check_ran(v, md, ["false"], "/usr/bin/false", [1])
        self.assertIn("stderr", self.step(v, md))
        self.assertIn("# Verdict: FAILED", md)

    def test_exec_failure_did_not_run(self):
        r, v, md = self.row("not_started")
        # The script lies outside its rule's exec trees: EACCES, the request's to
        # change (MCP-EXEC-I-001), not a fault (E-001; ux-s41 H2).
        self.assertEqual(r["reply"]["code"], "MCP-EXEC-I-001")
        self.assertEqual((v["decision"], v["outcome"]), ("DEGRADE", "failed"))
        self.assertFalse(v["executed"])
        self.assertIn("Executed:   no", md)
        self.assertNotIn("exit_codes", v)
        self.assertIn("run", v, "it was permitted and confined; exec failed")
        self.assertEqual(v["call"]["stages"][0]["exe"], self.unstartable)
        self.assertIn("could not be started", self.step(v, md))

    def test_run_timeout(self):
        r, v, md = self.row("run_timeout")
        self.assertEqual(r["status"], "timeout")
        self.assertEqual(v["outcome"], "run_timeout")
        self.assertTrue(v["executed"])
        self.assertTrue(v["timed_out"])
        self.assertIn("timeout_ms", self.step(v, md))

    def test_approval_timeout(self):
        r, v, md = self.row("approval_timeout")
        self.assertEqual((v["decision"], v["outcome"]), ("UNKNOWN", "approval_timeout"))
        self.check_not_run(v, md)
        self.assertEqual(v["decided_by"]["approval"]["outcome"], "timeout")
        self.assertIn("approver", self.step(v, md))
        self.assertFalse(os.path.exists(os.path.join(self.quick.workspace, "never")))

    def test_unknown_without_approval_may_ask_for_it(self):
        r, v, md = self.row("refused")
        self.assertEqual((v["decision"], v["outcome"]), ("UNKNOWN", "refused"))
        self.check_not_run(v, md)
        self.assertIn("approval", self.step(v, md))

    def test_gate_dry_runs_record_nothing_ran(self):
        for name, decision in (("dry_run", "ALLOW"), ("dry_run_block", "BLOCK")):
            r, v, md = self.row(name)
            self.assertEqual((v["decision"], v["outcome"]), (decision, "dry_run"))
            self.check_not_run(v, md)
            self.assertIn("DRY RUN", md)
            s = self.step(v, md)
            self.assertIn("dry run", s)
            if decision == "BLOCK":
                self.assertIn("do not send this as exec", s)

    def test_invalid(self):
        r, v, md = self.row("invalid")
        self.assertEqual(v["reply"]["type"], "I")
        self.assertEqual(v["outcome"], "invalid")
        self.check_not_run(v, md)
        self.assertIn("Fix the request", self.step(v, md))

    def test_approved_names_the_approver_and_ran(self):
        r, v, md = self.row("approved")
        self.assertEqual((v["decision"], v["outcome"]), ("UNKNOWN", "approved"))
        self.check_ran(v, md, ["id", "-u"], "/usr/bin/id", [0])
        self.assertEqual(v["decided_by"]["approval"]["approvers"], [os.getuid()])
        self.assertIn("approved by uid %d" % os.getuid(), md)
        self.assertIn("# Verdict: APPROVED", md)
        self.assertIn("Continue", self.step(v, md))

    def test_denied_names_the_person(self):
        r, v, md = self.row("denied")
        self.assertEqual((v["decision"], v["outcome"]), ("UNKNOWN", "denied"))
        self.check_not_run(v, md)
        self.assertEqual(v["decided_by"]["approval"]["by"], os.getuid())
        self.assertEqual(v["decided_by"]["approval"]["why"], "not this one")
        self.assertIn("denied by uid", md)
        self.assertIn("denied", self.step(v, md))

    def test_granted_names_the_grant(self):
        r, v, md = self.row("granted")
        self.assertEqual(v["outcome"], "granted")
        self.check_ran(v, md, ["id", "-un"], "/usr/bin/id", [0])
        self.assertEqual(v["decided_by"]["grant_id"], self.grant_id)
        self.assertIn(self.grant_id, md)
        self.assertIn(self.grant_id, self.step(v, md))

    def test_every_package_replays_and_verifies(self):
        for name, (d, r) in sorted(self.rows.items()):
            tid = r["reply"]["trace_id"]
            package(d, tid)
            rp = d.cli("replay", tid)
            self.assertEqual(rp.returncode, 0, (name, rp.stdout + rp.stderr))
        for d in (self.d, self.plain):
            vf = subprocess.run([sys.executable, os.path.join(cgtest.SRCDIR, "docs",
                                                              "verify_trace.py"), d.state_dir, "--all"],
                                capture_output=True, text=True)
            self.assertEqual(vf.returncode, 0, vf.stdout + vf.stderr)

    def test_a_changed_verdict_fails_both_verifiers(self):
        d, r = self.rows["approved"]
        tid = r["reply"]["trace_id"]
        package(d, tid)  # written by the package thread after the reply
        path = os.path.join(d.state_dir, "traces", tid, "verdict.json")
        with open(path) as f:
            orig = f.read()
        edits = (lambda v: v.update(executed=False),
                 lambda v: v.update(exit_codes=[3]),
                 lambda v: v["call"]["stages"][0].update(argv=["id", "-g"]),
                 lambda v: v["decided_by"].update(rule_id="someone-else"),
                 lambda v: v["run"].update(uid=12345))
        try:
            for edit in edits:
                v = json.loads(orig)
                edit(v)
                with open(path, "w") as f:
                    json.dump(v, f, indent=2)
                rp = d.cli("replay", "--no-write", tid)
                self.assertNotEqual(rp.returncode, 0, rp.stdout)
                vf = subprocess.run([sys.executable, os.path.join(
                    cgtest.SRCDIR, "docs", "verify_trace.py"), d.state_dir, tid],
                    capture_output=True, text=True)
                self.assertEqual(vf.returncode, 1, vf.stdout)
                self.assertIn("verdict_mismatch", vf.stdout)
        finally:
            with open(path, "w") as f:
                f.write(orig)


if __name__ == "__main__":
    unittest.main()
