# SPDX-License-Identifier: MIT
"""`callgate policy diff --journal` (issue 15, item 7): a daemon records calls
under policy A; after it stops, the journal is re-decided under candidate B
through the one gate, and exactly the calls whose decision changes are
listed, with the old and new rule.
"""
import json
import os
import subprocess
import unittest

import cgtest

POLICY_A = """version: 1
rules:
  - id: echo-ok
    decision: allow
    match: { exe: [echo], privileged: false }
  - id: cat-ok
    decision: allow
    match: { exe: [cat], privileged: false }
  - id: no-mkfs
    decision: deny
    match: { exe: [mkfs.ext4] }
"""

# cat is now refused, ls now allowed; echo and mkfs.ext4 keep their decisions.
POLICY_B = """version: 1
rules:
  - id: echo-ok
    decision: allow
    match: { exe: [echo], privileged: false }
  - id: no-cat
    decision: deny
    match: { exe: [cat] }
  - id: no-mkfs
    decision: deny
    match: { exe: [mkfs.ext4] }
  - id: ls-ok
    decision: allow
    match: { exe: [ls], privileged: false }
"""


class PolicyDiff(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(policy_text=POLICY_A).start()
        cls.traces = {}
        for name, pipe, extra in (("echo", [["echo", "hi"]], {}),
                                  ("cat", [["cat", "/etc/hostname"]], {}),
                                  ("mkfs", [["mkfs.ext4", "/dev/null"]], {}),
                                  ("ls", [["ls", "-l"]], {}),
                                  ("gate-cat", [["cat", "/etc/hostname"]], {"action": "gate"}),
                                  # s44c M6: a recorded LANG (kept as its hash) read
                                  # as a change under the very same policy.
                                  ("echo-lang", [["echo", "hi"]], {"env": {"LANG": "C.UTF-8"}})):
            r = cls.d.request(cgtest.make_request(pipe, privileged=False, **extra))
            cls.traces[name] = r["reply"]["trace_id"]
        # A line that never decoded is not a call to re-decide.
        cls.d.request({"id": "x", "time": cgtest.now_rfc3339(), "pipeline": "ls"})
        assert cls.d.request(cgtest.make_request([["cat", "/etc/hostname"]],
                                                 privileged=False))["status"] == "ok"
        cls.d.stop()
        cls.cand = os.path.join(cls.d.tmp, "candidate.yaml")
        with open(cls.cand, "w") as f:
            f.write(POLICY_B)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def diff(self, *args):
        return subprocess.run([cgtest.CALLGATE, "--state-dir", self.d.state_dir, "policy",
                               "diff", "--journal"] + list(args), capture_output=True,
                              text=True, timeout=60)

    def test_lists_exactly_the_changed_calls(self):
        r = self.diff("--json", self.cand)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j["calls"], 7)
        got = sorted((c["command"], c["old"]["decision"], c["old"]["rule_id"],
                      c["new"]["decision"], c["new"]["rule_id"]) for c in j["changes"])
        self.assertEqual(got, sorted([
            ("cat /etc/hostname", "ALLOW", "cat-ok", "BLOCK", "no-cat"),
            ("cat /etc/hostname", "ALLOW", "cat-ok", "BLOCK", "no-cat"),
            ("cat /etc/hostname", "ALLOW", "cat-ok", "BLOCK", "no-cat"),
            ("ls -l", "BLOCK", "default-deny", "ALLOW", "ls-ok"),
        ]))
        ids = {c["trace_id"] for c in j["changes"]}
        self.assertIn(self.traces["cat"], ids)
        self.assertIn(self.traces["gate-cat"], ids)
        self.assertIn(self.traces["ls"], ids)
        self.assertNotIn(self.traces["echo"], ids)
        self.assertNotIn(self.traces["echo-lang"], ids)
        self.assertNotIn(self.traces["mkfs"], ids)

    def test_text_names_old_and_new_rule(self):
        r = self.diff(self.cand)
        self.assertEqual(r.returncode, 1, r.stderr)
        line = [l for l in r.stdout.splitlines() if self.traces["ls"] in l]
        self.assertEqual(len(line), 1, r.stdout)
        self.assertIn("BLOCK (default-deny) -> ALLOW (ls-ok)", line[0])
        self.assertIn("ls -l", line[0])
        self.assertIn("4 of 7 recorded call(s) would be decided otherwise", r.stdout)

    def test_same_policy_changes_nothing(self):
        r = self.diff("--json", self.d.policy_path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["changes"], [])

    def test_the_same_decision_under_other_terms_is_listed(self):
        # echo stays ALLOW but gains a read-only confinement; mkfs stays BLOCK
        # by another rule: both were left out, as if nothing changed (s36 walk).
        cand = os.path.join(self.d.tmp, "terms.yaml")
        with open(cand, "w") as f:
            f.write(POLICY_A.replace(
                "    match: { exe: [echo], privileged: false }\n",
                "    match: { exe: [echo], privileged: false }\n"
                "    constraints: { read: [/], net: none }\n").replace(
                "  - id: no-mkfs\n", "  - id: no-mkfs-at-all\n"))
        r = self.diff("--json", cand)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        got = {c["trace_id"]: (c["changed"], c["new"]["rule_id"])
               for c in json.loads(r.stdout)["changes"]}
        self.assertEqual(got[self.traces["echo"]], ("constraints", "echo-ok"))
        self.assertEqual(got[self.traces["mkfs"]], ("rule", "no-mkfs-at-all"))
        self.assertNotIn(self.traces["cat"], got)
        self.assertIn("[other constraints]", self.diff(cand).stdout)

    def test_since_excludes_older_calls(self):
        r = self.diff("--json", "--since", cgtest.now_rfc3339(60), self.cand)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["calls"], 0)
        r = self.diff("--json", "--since", "1h", self.cand)
        self.assertEqual(json.loads(r.stdout)["calls"], 7)

    def test_usage_and_bad_candidate(self):
        r = subprocess.run([cgtest.CALLGATE, "--state-dir", self.d.state_dir, "policy", "diff",
                            self.cand], capture_output=True, text=True)
        self.assertEqual(r.returncode, 64)
        bad = os.path.join(self.d.tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("version: 1\nrules: [ {id: x, decision: maybe} ]\n")
        self.assertEqual(self.diff(bad).returncode, 65)
        r = subprocess.run([cgtest.CALLGATE, "--state-dir", "/nonexistent/cg", "policy", "diff",
                            "--journal", self.cand], capture_output=True, text=True)
        self.assertEqual(r.returncode, 66)


if __name__ == "__main__":
    unittest.main()
