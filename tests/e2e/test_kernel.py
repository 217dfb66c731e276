# SPDX-License-Identifier: MIT
"""Kernel behaviours that span modules, through a real daemon."""
import base64
import json
import os
import unittest

import cgtest

POLICY = """version: 1
defaults:
  cwd: "${workspace}/sub"
rules:
  - id: pwd
    decision: allow
    match:
      exe: [pwd]
"""

ESCAPE = POLICY.replace("${workspace}/sub", "/etc")


class DefaultCwd(unittest.TestCase):
    def test_policy_default_cwd_applies_when_the_request_names_none(self):
        with cgtest.Daemon(policy_text=POLICY) as d:
            os.mkdir(os.path.join(d.workspace, "sub"))
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False))
            self.assertEqual(resp["status"], "ok", resp)
            got = base64.b64decode(resp["stdout"]).decode().strip()
            self.assertEqual(got, os.path.realpath(os.path.join(d.workspace, "sub")))
            # A cwd in the request wins over the default.
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False,
                                                 cwd=d.workspace))
            self.assertEqual(base64.b64decode(resp["stdout"]).decode().strip(),
                             os.path.realpath(d.workspace))

    def test_a_default_cwd_outside_every_workspace_is_refused(self):
        with cgtest.Daemon(policy_text=ESCAPE) as d:
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False))
            self.assertEqual(resp["reply"]["code"], "WA-RES-I-004", resp)
            self.assertNotIn("stdout", resp)
            # It names the workspace, so that the agent can send a cwd in it (ux-s39).
            self.assertIn(os.path.realpath(d.workspace), resp["reply"]["message"])


# The drift bug of issue 10: `policy explain` skipped defaults.cwd, so it
# judged `rm foo` in the workspace root (BLOCK) while the daemon judged it in
# ${workspace}/sub (ALLOW). Both go through the one gate now.
DRIFT_POLICY = """version: 1
defaults:
  cwd: "${workspace}/sub"
rules:
  - id: rm-in-sub
    decision: allow
    match:
      exe: [rm]
      min_args: 1
      args_all:
        - within: "${workspace}/sub"
"""


class WorkspacePrograms(unittest.TestCase):
    """A program the project built runs as `./prog`, confined to the workspace
    (ux-s39 H2: refused as a relative path, with advice that ran an ELF file
    through sh). Judged by effect: it ran, and its write outside did not land."""

    def test_a_workspace_program_runs_by_its_relative_name_and_only_confined(self):
        outside = "/var/tmp/cg-wsprog-%d" % os.getpid()
        with cgtest.Daemon() as d:
            sub = os.path.join(d.workspace, "bin")
            os.mkdir(sub)
            prog = os.path.join(sub, "prog")
            with open(prog, "w") as f:
                f.write("#!/bin/sh\ntouch ran; touch %s; echo done\n" % outside)
            os.chmod(prog, 0o755)
            r = d.cli("run", "--no-privileged", "--", "./bin/prog")
            self.assertEqual(r.stdout.decode().strip(), "done", r)
            self.assertTrue(os.path.exists(os.path.join(d.workspace, "ran")))
            self.assertFalse(os.path.exists(outside), "a workspace program wrote outside")
            g = d.cli("gate", "--no-privileged", "--", "./bin/prog")
            self.assertIn("workspace-programs-confined", g.stdout.decode())
            # From a sub directory too; and ../ out of the workspace is judged where it lies.
            r = d.request(cgtest.make_request([["./prog"]], privileged=False, cwd=sub))
            self.assertEqual(r["status"], "ok", r)
            r = d.request(cgtest.make_request([["../../../../../../../usr/bin/rm", "-rf", "/"]],
                                              privileged=False, cwd=sub))
            self.assertEqual(r["reply"]["code"], "EN-EXEC-D-001", r)


class OneGate(unittest.TestCase):
    def test_policy_explain_and_the_daemon_agree_on_defaults_cwd(self):
        with cgtest.Daemon(policy_text=DRIFT_POLICY) as d:
            os.mkdir(os.path.join(d.workspace, "sub"))
            gate = cgtest.make_request([["rm", "foo"]], privileged=False, action="gate")
            resp = d.request(gate)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertEqual(resp["reply"]["params"]["decision"], "ALLOW", resp)
            self.assertEqual(resp["reply"]["params"]["rule_id"], "rm-in-sub", resp)
            r = d.cli("policy", "explain", "--json", "--policy", d.policy_path,
                      "--workspace", d.workspace, "--no-privileged", "--", "rm", "foo")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual(j["decision"], resp["reply"]["params"]["decision"])
            self.assertEqual(j["rule_id"], resp["reply"]["params"]["rule_id"])
            # An explicit cwd still wins over the default, in both.
            gate = cgtest.make_request([["rm", "foo"]], privileged=False, action="gate",
                                       cwd=d.workspace)
            resp = d.request(gate)
            self.assertEqual(resp["reply"]["params"]["decision"], "BLOCK", resp)
            r = d.cli("policy", "explain", "--policy", d.policy_path, "--workspace",
                      d.workspace, "--cwd", d.workspace, "--no-privileged", "--", "rm", "foo")
            self.assertEqual(r.returncode, 77, r.stdout + r.stderr)


DEADLINE_POLICY = """version: 1
defaults:
  timeout_ms: 500
rules:
  - id: slow-builds
    decision: degrade
    match:
      exe: [sleep]
    constraints:
      read: [/]
      write: ["${workspace}"]
      timeout_ms: 3000
"""


class RuleDeadline(unittest.TestCase):
    def test_a_rules_timeout_is_the_calls_deadline_and_requests_can_only_shorten_it(self):
        with cgtest.Daemon(policy_text=DEADLINE_POLICY) as d:
            # Longer than the policy default (500 ms), within the rule's 3 s: runs.
            ok = d.request(cgtest.make_request([["sleep", "1"]], privileged=False))
            self.assertEqual(ok["status"], "ok", ok)
            # Past the rule's deadline: killed at it, not at the request's 60 s.
            late = d.request(cgtest.make_request([["sleep", "10"]], privileged=False,
                                                 timeout_ms=60000), timeout=30)
            self.assertEqual(late["reply"]["code"], "MCP-EXEC-E-002", late)
            self.assertEqual(late["reply"]["params"]["timeout_ms"], 3000)
            # A request may ask for less.
            short = d.request(cgtest.make_request([["sleep", "2"]], privileged=False,
                                                  timeout_ms=300))
            self.assertEqual(short["reply"]["params"]["timeout_ms"], 300)
            self.assertEqual(short["status"], "timeout")


if __name__ == "__main__":
    unittest.main()
