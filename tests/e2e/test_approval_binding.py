# SPDX-License-Identifier: MIT
"""Approvals and grants bind what runs; the admin plane trusts only people
(issue 12). Every test judges by effect (a file that must not appear, a
counter that must not grow, a call that stays pending) next to a control
that succeeds.
"""
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import cgtest
from test_approval import WAIT, b64, call_async, pending, wait_pending

# The agent's interpreter runs confined (an opaque launcher must); the
# deferred shape is `touch` in the workspace.
POLICY = """version: 1
rules:
  - id: agent-python
    decision: degrade
    match: { exe: [python3], privileged: false }
    constraints:
      read: [/]
      write: ["${workspace}"]
      exec: [/usr, /bin, /sbin, /lib, /lib64]
      net: none
      # The admin socket lives under the daemon's /tmp directory: shared,
      # so the call reaches it and the admin plane's own check is what
      # refuses (the default private /tmp hides it: test_view.py).
      tmp: shared
  - id: touch-needs-a-person
    decision: defer
    match: { exe: [touch] }
    constraints:
      read: [/]
      write: ["${workspace}"]
      exec: [/usr, /bin, /sbin, /lib, /lib64]
      net: none
  - id: curl-needs-a-person
    decision: defer
    match: { exe: [curl] }
  - id: count
    decision: defer
    match: { exe: [sh] }
"""

# Run inside a call: use the admin socket as an agent would, with what it
# learnt (trace id and hash), and print every reply code it got.
ATTACK = r"""
import json, socket, sys
adm, tid, sha = sys.argv[1], sys.argv[2], sys.argv[3]
def call(req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    data = b""
    try:
        s.connect(adm)
        try:
            s.sendall((json.dumps(req) + "\n").encode())
        except OSError:
            pass  # refused peers are answered and closed at once
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        if not data:
            return "oserror:%s" % e.errno
    finally:
        s.close()
    try:
        return json.loads(data)["reply"]["code"]
    except Exception:
        return "unreadable:%r" % data[:200]
out = {
    "pending": call({"action": "pending"}),
    "approve": call({"action": "approve", "trace_id": tid, "request_sha256": sha}),
    "grant_open": call({"action": "grant_open", "trace_id": tid, "request_sha256": sha,
                        "grant": {"pipeline": [{"exe": "/usr/bin/touch", "argv": ["**"]}],
                                  "uses": 5, "ttl_s": 600}}),
    "stop": call({"action": "stop"}),
}
print(json.dumps(out))
"""


def daemon(flags=(), **kw):
    return cgtest.Daemon(policy_text=POLICY,
                         flags=["--approval", "--approval-timeout", "20000"] + list(flags), **kw)


class AdminPeersArePeople(unittest.TestCase):
    """Item 1: a process launched through the daemon cannot answer for itself."""

    def test_a_call_cannot_approve_its_own_deferred_call(self):
        with daemon() as d:
            marker = os.path.join(d.workspace, "self-approved")
            t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False))
            p = wait_pending(d, 1)[0]
            script = os.path.join(d.workspace, "attack.py")
            with open(script, "w") as f:
                f.write(ATTACK)
            resp = d.request(cgtest.make_request(
                [["python3", script, d.admin_socket, p["trace_id"], p["request_sha256"]]],
                privileged=False), timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            got = json.loads(b64(resp["stdout"]))
            # Every admin verb fails for a peer inside a call, stop included:
            # the call's view hides the admin socket (EACCES, test_view.py),
            # and were it reachable the admin plane refuses the peer
            # (MCP-IO-E-004; tested alone in the pid-namespace test below).
            self.assertTrue(all(v in ("oserror:13", "MCP-IO-E-004") for v in got.values()),
                            got)
            # By effect: nothing ran, nothing opened, the daemon still serves.
            time.sleep(0.3)
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(len(pending(d)), 1, "the call is still waiting")
            self.assertEqual(d.admin("grant_list")["reply"]["data"]["grants"], [])
            self.assertIsNone(d.proc.poll(), "stop from inside a call was refused")
            # Control: the person at the test's own pid approves, and it runs.
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            self.assertTrue(os.path.exists(marker))

    @unittest.skipUnless(shutil.which("unshare") and os.getuid() == 0, "root and util-linux")
    def test_a_peer_in_another_pid_namespace_is_refused(self):
        # Calls will run in their own pid namespace; a peer there is not a person.
        with daemon() as d:
            probe = "\n".join([
                "import socket, sys",
                "s = socket.socket(socket.AF_UNIX)",
                "s.connect(sys.argv[1])",
                "try:",
                "    s.sendall(b'{\"action\":\"ping\"}\\n')",
                "except OSError:",
                "    pass  # a refused peer is answered and closed at once",
                "d = b''",
                "while True:",
                "    b = s.recv(65536)",
                "    if not b:",
                "        break",
                "    d += b",
                "sys.stdout.write(d.decode())"])
            r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                                "-c", probe, d.admin_socket],
                               capture_output=True, text=True, timeout=WAIT)
            resp = json.loads(r.stdout or "{}")
            self.assertEqual(resp.get("reply", {}).get("code"), "MCP-IO-E-004",
                             (r.stdout, r.stderr))
            self.assertIn("pid namespace", resp["reply"]["message"])
            # Control: the same probe from the test's own namespace is served.
            ok = subprocess.run([sys.executable, "-c", probe, d.admin_socket],
                                capture_output=True, text=True, timeout=WAIT)
            self.assertEqual(json.loads(ok.stdout)["reply"]["code"], "MCP-SYS-S-001", ok)

    def test_only_configured_approvers_answer(self):
        # nobody may use the admin socket (admin group) but is not an approver.
        with daemon(flags=["--admin-group", "nogroup"]) as d:
            os.chmod(d.tmp, 0o755)
            marker = os.path.join(d.workspace, "not-an-approver")
            t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False))
            p = wait_pending(d, 1)[0]

            def as_nobody(action):
                req = {"action": action, "trace_id": p["trace_id"],
                       "request_sha256": p["request_sha256"], "id": "x"}
                return cgtest.as_uid(65534, lambda: cgtest.parse_response(
                    cgtest.send_recv(d.admin_socket, cgtest.encode(req))))

            gid = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/id",
                                                             "argv": ["id"]}],
                                               "uses": 1, "ttl_s": 60})["reply"]["data"]["grant_id"]
            for action in ("approve", "deny", "grant_open", "stop", "reload"):
                r = as_nobody(action)
                self.assertEqual(r["reply"]["code"], "MCP-IO-E-005", (action, r))
            r = cgtest.as_uid(65534, lambda: cgtest.parse_response(cgtest.send_recv(
                d.admin_socket, cgtest.encode({"action": "grant_close", "grant_id": gid}))))
            self.assertEqual(r["reply"]["code"], "MCP-IO-E-005", r)
            # By effect: the daemon still serves, the grant is still open.
            self.assertIsNone(d.proc.poll(), "a mere admin peer stopped the daemon")
            self.assertEqual([g["grant_id"] for g in
                              d.admin("grant_list")["reply"]["data"]["grants"]], [gid])
            # Reading the queue is not answering it.
            self.assertEqual(as_nobody("pending")["reply"]["code"], "MCP-APPR-S-003")
            time.sleep(0.3)
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(len(pending(d)), 1)
            # Control: the daemon's owner (the default approver) answers.
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            # Named by the trace that recorded it (it had named a fresh id with no evidence).
            self.assertEqual(r["reply"]["trace_id"], p["trace_id"], r)
            t.join(WAIT)
            self.assertTrue(os.path.exists(marker))

    @unittest.skipUnless(shutil.which("setpriv") and os.getuid() == 0, "root and util-linux")
    def test_the_cli_says_who_may_not_answer(self):
        # A person refused by the admin socket is not allowed (77), not a failure (70, 69).
        with daemon(flags=["--admin-group", "nogroup"]) as d:
            os.chmod(d.tmp, 0o755)
            marker = os.path.join(d.workspace, "answered-by-whom")
            t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False))
            p = wait_pending(d, 1)[0]

            def cli_as(uid, gid, *args):
                return subprocess.run(
                    ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups",
                     cgtest.CALLGATE, "--socket", d.socket, "--admin-socket", d.admin_socket]
                    + list(args), capture_output=True, text=True, timeout=WAIT)
            # In the admin group, not an approver: the daemon's E-005, exit 77.
            r = cli_as(65534, 65534, "approve", p["trace_id"])
            self.assertEqual(r.returncode, 77, r)
            self.assertIn("MCP-IO-E-005", r.stderr)
            # Not in the admin group: the socket itself refuses; the message says who it serves.
            r = cli_as(65533, 65533, "approve", p["trace_id"])
            self.assertEqual(r.returncode, 77, r)
            self.assertIn("group nogroup", r.stderr)
            r = cli_as(65533, 65533, "pending")
            self.assertEqual(r.returncode, 77, r)
            # By effect: nothing was answered.
            time.sleep(0.3)
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(len(pending(d)), 1)
            r = d.admin("deny", trace_id=p["trace_id"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-002", r)
            self.assertEqual(r["reply"]["trace_id"], p["trace_id"], r)
            t.join(WAIT)

    def test_gate_says_what_an_unknown_would_meet(self):
        # A dry run names the next step: a person, an open grant (not used up), or a refusal.
        with daemon() as d:
            marker = os.path.join(d.workspace, "gated")
            r = d.cli("gate", "--no-privileged", "--", "touch", marker)
            self.assertEqual(r.returncode, 75, r)
            self.assertIn(b"next:        it would wait for a person's approval", r.stdout)
            gid = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/touch",
                                                             "argv": ["touch", "**"]}],
                                               "uses": 2, "ttl_s": 60})["reply"]["data"]["grant_id"]
            r = d.cli("gate", "--no-privileged", "--", "touch", marker)
            self.assertIn(("next:        open grant %s would run it without asking (2 uses left"
                           % gid).encode(), r.stdout)
            self.assertEqual(r.returncode, 0, r)
            data = json.loads(d.cli("gate", "--json", "--no-privileged", "--", "touch",
                                    marker).stdout)["reply"]["data"]
            self.assertEqual(data["approval"]["grant"]["grant_id"], gid, data)
            # By effect: the dry runs used nothing and ran nothing.
            grants = d.admin("grant_list")["reply"]["data"]["grants"]
            self.assertEqual(grants[0]["uses_left"], 2, grants)
            self.assertFalse(os.path.exists(marker))
        with cgtest.Daemon(policy_text=POLICY) as d:
            r = d.cli("gate", "--no-privileged", "--", "touch", "x")
            self.assertIn(b"it would be refused: approval is off on this daemon", r.stdout)
            self.assertEqual(r.returncode, 77, r)

    def test_configured_approver_uid_answers(self):
        with daemon(flags=["--admin-group", "nogroup", "--approver-uid", "65534"]) as d:
            os.chmod(d.tmp, 0o755)
            marker = os.path.join(d.workspace, "approved-by-nobody")
            t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False))
            p = wait_pending(d, 1)[0]
            # The owner is no longer an approver once approvers are configured.
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-IO-E-005", r)
            self.assertFalse(os.path.exists(marker))
            req = {"action": "approve", "trace_id": p["trace_id"],
                   "request_sha256": p["request_sha256"], "id": "x"}
            r = cgtest.as_uid(65534, lambda: cgtest.parse_response(
                cgtest.send_recv(d.admin_socket, cgtest.encode(req))))
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertTrue(os.path.exists(marker))


def view_sha256(item):
    """The binding hash recomputed from what `pending --json` shows (ASCII views)."""
    import hashlib
    v = {k: x for k, x in item.items()
         if k not in ("request_sha256", "approvers_needed", "approved_by", "deadline_ms_left")}
    return hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


class WhatWasApprovedIsWhatRuns(unittest.TestCase):
    """Item 4: the agent swaps a directory named in the approved command for a
    symlink to a tree outside the workspace after the person looked; the
    approved call runs in its view, where only the workspace is writable, so
    the write never lands outside."""

    def test_a_directory_remade_at_the_cwd_path_is_not_the_one_approved(self):
        # The person approved a call to run in <ws>/sub; another directory
        # made at that path while it waited is not that one (found by a review).
        with daemon() as d:
            sub = os.path.join(d.workspace, "sub")
            os.mkdir(sub)
            req = cgtest.make_request([["touch", "made"]], privileged=False)
            req["cwd"] = sub
            t, box = call_async(d, req)
            p = wait_pending(d, 1)[0]
            os.rmdir(sub)
            os.mkdir(sub)
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "MCP-EXEC-E-006", box)
            self.assertFalse(os.path.exists(os.path.join(sub, "made")))

    def test_symlink_swap_after_approval_cannot_write_outside(self):
        outside = tempfile.mkdtemp(prefix="cg-toctou-", dir="/var/tmp")
        try:
            with daemon() as d:
                sub = os.path.join(d.workspace, "sub")
                os.mkdir(sub)
                target = os.path.join(sub, "out")
                t, box = call_async(d, cgtest.make_request([["touch", target]],
                                                           privileged=False))
                p = wait_pending(d, 1)[0]
                # After the person saw "touch <ws>/sub/out": swap sub for a symlink.
                os.rmdir(sub)
                os.symlink(outside, sub)
                r = d.admin("approve", trace_id=p["trace_id"],
                            request_sha256=p["request_sha256"])
                self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
                t.join(WAIT)
                self.assertIn("resp", box, box)
                self.assertFalse(os.path.exists(os.path.join(outside, "out")),
                                 "the approved call wrote outside the workspace")
                self.assertNotEqual(box["resp"].get("exit_code"), 0, box["resp"])
                # Control: the same approval with the directory left alone writes.
                os.unlink(sub)
                os.mkdir(sub)
                t, box = call_async(d, cgtest.make_request([["touch", target]],
                                                           privileged=False))
                p = wait_pending(d, 1)[0]
                r = d.admin("approve", trace_id=p["trace_id"],
                            request_sha256=p["request_sha256"])
                t.join(WAIT)
                self.assertEqual(box["resp"]["status"], "ok", box)
                self.assertTrue(os.path.exists(target))
        finally:
            shutil.rmtree(outside, ignore_errors=True)


class PrivilegedProgramsAreRootOnly(unittest.TestCase):
    """An approval names the program by path: only root may be able to change it.

    A program the agent owned was approved, then rewritten before the run,
    and the new bytes ran as root (found by an attack review).
    """

    def test_a_program_someone_else_can_change_never_waits_or_runs_as_root(self):
        policy = POLICY + ("  - id: ws-tool\n    decision: defer\n"
                           "    match: { exe_glob: [\"/tmp/cg-e2e-*/ws/tool\", "
                           "\"/var/tmp/cg-rootonly-*/tool\"] }\n")
        with cgtest.Daemon(policy_text=policy,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            tool = os.path.join(d.workspace, "tool")
            marker = os.path.join(d.workspace, "ran-as-root")
            with open(tool, "w") as f:
                f.write("#!/bin/sh\necho approved > %s\n" % marker)
            os.chmod(tool, 0o755)
            os.chown(tool, 65534, 65534)  # the agent's, as an agent's own script is
            t, box = call_async(d, cgtest.make_request([[tool]], privileged=True))
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "WA-RES-I-007", box)
            self.assertIn("not owned by root", box["resp"]["reply"]["message"])
            self.assertEqual(pending(d), [])
            # Root's, but writable by its group: the same.
            os.chown(tool, 0, 0)
            os.chmod(tool, 0o775)
            resp = d.request(cgtest.make_request([[tool]], privileged=True), timeout=WAIT)
            self.assertEqual(resp["reply"]["code"], "WA-RES-I-007", resp)
            self.assertEqual(pending(d), [])
            self.assertFalse(os.path.exists(marker))
            # Root's alone but in the workspace, which calls write (a root
            # caller's calls own what they make there): the same.
            os.chmod(tool, 0o755)
            resp = d.request(cgtest.make_request([[tool]], privileged=True), timeout=WAIT)
            self.assertEqual(resp["reply"]["code"], "WA-RES-I-007", resp)
            self.assertIn("workspace", resp["reply"]["message"])
            self.assertEqual(pending(d), [])
            # Control: root's alone and outside the workspace, it waits for a person.
            outside = tempfile.mkdtemp(prefix="cg-rootonly-", dir="/var/tmp")
            os.chmod(outside, 0o755)
            self.addCleanup(shutil.rmtree, outside, True)
            tool = os.path.join(outside, "tool")
            with open(tool, "w") as f:
                f.write("#!/bin/sh\necho approved > %s\n" % marker)
            os.chmod(tool, 0o755)
            t, box = call_async(d, cgtest.make_request([[tool]], privileged=True))
            p = wait_pending(d, 1)[0]
            r = d.admin("deny", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"][:8], "MCP-APPR", r)
            t.join(WAIT)
            self.assertFalse(os.path.exists(marker))


class ReloadOverrulesAWaitingApproval(unittest.TestCase):
    """BLOCK is final: a deny reloaded while a call waits reaches it.

    An operator's emergency deny did not stop a call already waiting: the
    approval ran it under the policy it was deferred by (found by a review).
    """

    def test_an_approval_after_a_reload_that_denies_runs_nothing(self):
        with daemon() as d:
            target = os.path.join(d.workspace, "made-by-touch")
            t, box = call_async(d, cgtest.make_request([["touch", target]],
                                                       privileged=False))
            p = wait_pending(d, 1)[0]
            with open(d.policy_path) as f:
                text = f.read()
            deny = text.replace("rules:\n", "rules:\n  - id: touch-stopped\n"
                                "    decision: deny\n    match: { exe: [touch] }\n", 1)
            self.assertNotEqual(deny, text)
            with open(d.policy_path, "w") as f:
                f.write(deny)
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-004", r)
            self.assertEqual(r["reply"]["params"]["rule_id"], "touch-stopped")
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "EN-EXEC-D-001", box)
            self.assertFalse(os.path.exists(target))
            v = cgtest.wait_package_file(d.state_dir, p["trace_id"], "verdict.json")
            self.assertEqual(json.loads(v)["outcome"], "blocked")
            # The approver's g (a grant opened for the call shown) is overruled the same.
            with open(d.policy_path, "w") as f:
                f.write(text)
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            t, box = call_async(d, cgtest.make_request([["touch", target]],
                                                       privileged=False))
            p = wait_pending(d, 1)[0]
            with open(d.policy_path, "w") as f:
                f.write(deny.replace("touch-stopped", "touch-stopped-again", 1))
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            d.admin("grant_open", trace_id=p["trace_id"], request_sha256=p["request_sha256"],
                    grant={"pipeline": [{"exe": "/usr/bin/touch", "argv": ["**"]}],
                           "uses": 1, "ttl_s": 600})
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "EN-EXEC-D-001", box)
            self.assertFalse(os.path.exists(target))
            # Control: under a policy that still defers, the call runs (the grant
            # opened above, which a BLOCK never overrides, now covers it).
            with open(d.policy_path, "w") as f:
                f.write(text)
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            resp = d.request(cgtest.make_request([["touch", target]], privileged=False),
                             timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertTrue(os.path.exists(target))

    def test_a_reload_that_decides_otherwise_runs_nothing_on_the_old_approval(self):
        """A rule raised to two approvers, or given other constraints, while a
        call waits: one approval of what the old policy showed ran the call
        with the old constraints (found by attack, s34)."""
        with daemon() as d:
            target = os.path.join(d.workspace, "made-by-touch")
            with open(d.policy_path) as f:
                text = f.read()
            old_rule = "  - id: touch-needs-a-person\n    decision: defer\n"
            self.assertIn(old_rule, text)
            for change in (old_rule + "    approvers: 2\n",
                           old_rule.replace("touch-needs-a-person", "touch-renamed")):
                with self.subTest(change=change):
                    with open(d.policy_path, "w") as f:
                        f.write(text)
                    self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
                    t, box = call_async(d, cgtest.make_request([["touch", target]],
                                                               privileged=False))
                    p = wait_pending(d, 1)[0]
                    with open(d.policy_path, "w") as f:
                        f.write(text.replace(old_rule, change, 1))
                    self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
                    r = d.admin("approve", trace_id=p["trace_id"],
                                request_sha256=p["request_sha256"])
                    self.assertEqual(r["reply"]["code"], "MCP-APPR-S-005", r)
                    t.join(WAIT)
                    self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-005", box)
                    self.assertFalse(os.path.exists(target))
                    self.assertEqual(pending(d), [])
                    # Its verdict says to send it again, not that a rule forbids it.
                    v = json.loads(cgtest.wait_package_file(d.state_dir, p["trace_id"],
                                                            "verdict.json"))
                    self.assertEqual(v["outcome"], "refused", v)
                    vf = cgtest.verify_live([sys.executable, os.path.join(
                        cgtest.SRCDIR, "docs", "verify_trace.py"), d.state_dir, p["trace_id"]])
                    self.assertEqual(vf.returncode, 0, vf.stdout)
            # Control: the same reload with nothing about the call changed lets it run.
            with open(d.policy_path, "w") as f:
                f.write(text)
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            t, box = call_async(d, cgtest.make_request([["touch", target]], privileged=False))
            p = wait_pending(d, 1)[0]
            with open(d.policy_path, "w") as f:
                f.write(text + "\n# a comment: another generation, the same decision\n")
            self.assertEqual(d.admin("reload")["reply"]["code"], "MCP-CFG-S-001")
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            self.assertTrue(os.path.exists(target))


class GrantsBindWhatRuns(unittest.TestCase):
    """Item 2: a grant covers one exact shape; any difference is no match."""

    def test_an_unprivileged_grant_does_not_cover_the_privileged_shape(self):
        with daemon() as d:
            out = os.path.join(d.workspace, "fetched")
            argv = ["curl", "-s", "-o", out, "file:///etc/hostname"]
            r = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/curl", "argv": argv}],
                                             "uses": 5, "ttl_s": 60})
            self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
            self.assertFalse(r["reply"]["data"]["privileged"])
            # The same shape as root: not covered, so it waits for a person.
            t, box = call_async(d, cgtest.make_request([argv], privileged=True))
            p = wait_pending(d, 1)[0]
            self.assertTrue(p["privileged"])
            time.sleep(0.3)
            self.assertFalse(os.path.exists(out), "ran as root under an unprivileged grant")
            d.admin("deny", trace_id=p["trace_id"])
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-001")
            self.assertFalse(os.path.exists(out))
            # Control: the unprivileged shape runs under the grant, unprompted.
            resp = d.request(cgtest.make_request([argv], privileged=False), timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertIn("grant_id", resp["reply"]["data"])
            self.assertTrue(os.path.exists(out))

    def test_env_names_and_cwd_bind(self):
        # No approval configured: a call no grant covers is refused at once.
        with cgtest.Daemon(policy_text=POLICY) as d:
            out = os.path.join(d.workspace, "env-out")
            argv = ["curl", "-s", "-o", out, "file:///etc/hostname"]
            sub = os.path.join(d.workspace, "sub")
            os.mkdir(sub)
            r = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/curl", "argv": argv}],
                                             "cwd": os.path.realpath(d.workspace),
                                             "uses": 5, "ttl_s": 60})
            self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
            for fields in ({"cwd": sub}, {"env": {"DEBIAN_FRONTEND": "noninteractive"}}):
                resp = d.request(cgtest.make_request([argv], privileged=False, **fields),
                                 timeout=WAIT)
                self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-004", (fields, resp))
                self.assertFalse(os.path.exists(out), fields)
            resp = d.request(cgtest.make_request([argv], privileged=False), timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertTrue(os.path.exists(out))

    def test_paths_read_option_values_and_bare_words(self):
        """A curl grant scoped to the workspace with paths: -o given as
        --output=/elsewhere or attached (-o/elsewhere) was never checked
        (found by attack, s34, with tar --directory=/etc as root)."""
        with cgtest.Daemon(policy_text=POLICY) as d:
            ws = os.path.realpath(d.workspace)
            outside = tempfile.mkdtemp(prefix="cg-paths-", dir="/var/tmp")
            try:
                r = d.admin("grant_open", grant={
                    "pipeline": [{"exe": "/usr/bin/curl", "argv": ["curl", "**"]}],
                    "paths": [ws], "uses": 9, "ttl_s": 60})
                self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
                for word in ("--output=" + outside + "/x", "-o" + outside + "/x"):
                    resp = d.request(cgtest.make_request(
                        [["curl", "-s", word, "file://" + ws + "/in"]], privileged=False),
                        timeout=WAIT)
                    self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-004", (word, resp))
                self.assertEqual(os.listdir(outside), [])
                # Control: values inside the paths are covered.
                with open(os.path.join(ws, "in"), "w") as f:
                    f.write("hi")
                resp = d.request(cgtest.make_request(
                    [["curl", "-s", "-o" + ws + "/x", "file://" + ws + "/in"]],
                    privileged=False), timeout=WAIT)
                self.assertEqual(resp["status"], "ok", resp)
                self.assertTrue(os.path.exists(os.path.join(ws, "x")))
            finally:
                shutil.rmtree(outside, ignore_errors=True)


class GrantsNeverStandInForSeveralApprovers(unittest.TestCase):
    """A grant is one person's: it never covers a call whose rule needs two
    approvers. One approver's `g` (or grant open, or an agent's grant
    request answered by one) ran such a call, and then ran it again and
    again without asking anyone (found by attack, s34)."""

    def test_a_grant_does_not_cover_a_two_person_call(self):
        two = POLICY.replace("  - id: touch-needs-a-person\n    decision: defer\n",
                             "  - id: touch-needs-a-person\n    decision: defer\n"
                             "    approvers: 2\n", 1)
        self.assertNotEqual(two, POLICY)
        with cgtest.Daemon(policy_text=two, flags=["--approval", "--approval-timeout", "20000",
                                                   "--approver-uid", "0",
                                                   "--approver-uid", "65534"]) as d:
            made = os.path.join(d.workspace, "two-person")
            t, box = call_async(d, cgtest.make_request([["touch", made]], privileged=False))
            p = wait_pending(d, 1)[0]
            self.assertEqual(p["approvers_needed"], 2)
            # The approver's g: a grant for exactly the call shown.
            r = d.admin("grant_open", trace_id=p["trace_id"], request_sha256=p["request_sha256"],
                        grant={"pipeline": [{"exe": "/usr/bin/touch", "argv": ["**"]}],
                               "uses": 10, "ttl_s": 600})
            self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
            time.sleep(0.3)
            self.assertFalse(os.path.exists(made), "one person's grant ran a two-person call")
            self.assertEqual([x["trace_id"] for x in pending(d)], [p["trace_id"]])
            # A new call is not covered by that open grant either: it waits.
            made2 = os.path.join(d.workspace, "two-person-again")
            t2, box2 = call_async(d, cgtest.make_request([["touch", made2]], privileged=False))
            wait_pending(d, 2)
            self.assertFalse(os.path.exists(made2))
            for x in pending(d):
                d.admin("deny", trace_id=x["trace_id"])
            t.join(WAIT)
            t2.join(WAIT)
            self.assertFalse(os.path.exists(made) or os.path.exists(made2))
        # Control: under a one-person rule the same grant covers the call.
        with daemon() as d:
            made = os.path.join(d.workspace, "one-person")
            r = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/touch",
                                                           "argv": ["**"]}],
                                             "uses": 10, "ttl_s": 600})
            self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
            resp = d.request(cgtest.make_request([["touch", made]], privileged=False),
                             timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertTrue(os.path.exists(made))


class EachStagesConfinementIsSaid(unittest.TestCase):
    """A constraint set may bind some stages of a pipeline only. The approval
    screen showed one set for a privileged `ls ws | cat /etc/shadow` whose
    second stage no set bound (it ran as root, unconfined), and the verdict
    said the pipeline was confined, one confinement for every stage (found
    by attack, s34c)."""

    def test_an_unbound_stage_is_shown_and_the_verdict_says_so(self):
        with cgtest.Daemon(flags=["--approval", "--approval-timeout", "20000"],
                           policy_text="""version: 1
rules:
  - id: ls-confined
    decision: defer
    match: { exe: [ls] }
    constraints:
      read: ["${workspace}", /usr, /lib, /lib64, /etc/ld.so.cache]
      exec: [/usr, /bin, /lib, /lib64]
      net: none
  - id: cat-ok
    decision: allow
    match: { exe: [cat] }
""") as d:
            secret = os.path.join(d.tmp, "secret")
            with open(secret, "w") as f:
                f.write("not for the agent\n")
            t, box = call_async(d, cgtest.make_request([["ls", d.workspace], ["cat", secret]],
                                                       privileged=True))
            p = wait_pending(d, 1)[0]
            self.assertEqual([st["constraint_sets"] for st in p["pipeline"]], [[0], []])
            out = d.cli("pending").stdout.decode()
            self.assertIn("A STAGE BELOW", out)  # in the privileged row (wrapped)
            # The answer lines reach the same admin socket when pasted (ux-s39).
            self.assertIn("callgate --admin-socket %s approve %s --hash %s" % (
                d.admin_socket, p["trace_id"], p["request_sha256"]), out)
            self.assertRegex(out, r"stage 2 runs +/usr/bin/cat\n +bound by +NO constraint set: "
                                  r"runs as root, unconfined")
            self.assertRegex(out, r"stage 1 runs +/usr/bin/ls\n +bound by +constraint set 1\n")
            d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            v = json.loads(cgtest.wait_package_file(d.state_dir, p["trace_id"],
                                                    "verdict.json"))
            self.assertIs(v["run"]["confined"], False, v["run"])
            self.assertEqual([x["confined"] for x in v["run"]["stages"]], [True, False],
                             v["run"])
            # Each stage's own network: the first is namespaced, the second the host's.
            self.assertEqual([x["network"]["mode"] for x in v["run"]["stages"]],
                             ["none", "host"], v["run"])
            self.assertNotIn("network", v["run"])  # no stage-1 summary passed off as all
            md = cgtest.package_file(d.state_dir, p["trace_id"], "verdict.md").decode()
            self.assertIn("Stage 1:    confined: yes", md)
            self.assertIn("Stage 2:    confined: NO", md)
            self.assertNotIn("one confinement applies to every stage", md)
            d.stop()
            r = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write",
                                "--state-dir", d.state_dir], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:])
            r = subprocess.run([sys.executable, os.path.join(cgtest.SRCDIR, "docs",
                                                             "verify_trace.py"),
                                d.state_dir, "--all"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:])


@unittest.skipUnless(os.geteuid() == 0, "root")
class PrivilegedMakesNoDeviceNode(unittest.TestCase):
    """An approved root `tar -xf` of the agent's archive made 0666 device
    nodes in the workspace, owned by the agent (the host's disk among them),
    which the agent then opened outside any call (s37 attack)."""

    POLICY = """version: 1
rules:
  - id: tar-in-workspace
    decision: defer
    match: { exe: [tar, python3, sh] }
    constraints: { read: [/], write: ["${workspace}"], net: none }
"""

    def run_approved(self, d, argv):
        t, box = call_async(d, cgtest.make_request([argv], privileged=True))
        p = wait_pending(d, 1)[0]
        d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
        t.join(WAIT)
        return box["resp"]

    def test_no_device_node_comes_out_of_an_approved_call(self):
        import tarfile
        with cgtest.Daemon(policy_text=self.POLICY,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            archive = os.path.join(d.workspace, "assets.tar")
            with tarfile.open(archive, "w") as t:
                for name, typ in (("assets/null", tarfile.CHRTYPE),
                                  ("assets/loop", tarfile.BLKTYPE)):
                    m = tarfile.TarInfo(name)
                    m.type, m.mode = typ, 0o666
                    m.devmajor, m.devminor = (1, 3) if typ == tarfile.CHRTYPE else (7, 0)
                    t.addfile(m)
                m = tarfile.TarInfo("assets/readme")
                m.size = 3
                t.addfile(m, io.BytesIO(b"hi\n"))
            r = self.run_approved(d, ["tar", "-xf", archive, "-C", d.workspace])
            self.assertEqual(r["status"], "ok", r)
            # The plain file came out; no device node did, by any route.
            self.assertTrue(os.path.isfile(os.path.join(d.workspace, "assets", "readme")))
            for name in ("null", "loop"):
                self.assertFalse(os.path.lexists(os.path.join(d.workspace, "assets", name)),
                                 b64(r["stages"][0].get("stderr", "")))
            node = os.path.join(d.workspace, "direct")
            r = self.run_approved(d, ["python3", "-c", "import os, stat, sys; os.mknod("
                                      "sys.argv[1], 0o666 | stat.S_IFCHR, os.makedev(1, 3))",
                                      node])
            self.assertFalse(os.path.lexists(node), r)
            # The host's own /dev/null is still there to write (attack s37e U1:
            # a make install step's `2>/dev/null` failed).
            r = self.run_approved(d, ["sh", "-c", "echo x >/dev/null 2>/dev/null && echo ok"])
            self.assertEqual(b64(r.get("stdout", "")), b"ok\n", r)


    def test_no_metadata_changes_outside_the_write_trees(self):
        # s37 attack: an approved root `make install`, confined to writing the
        # workspace, chowned a file in /etc to the agent, who then rewrote it:
        # Landlock binds what a file holds, not its owner or mode.
        with cgtest.Daemon(policy_text=self.POLICY,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            outside = os.path.join(d.tmp, "system-file")
            inside = os.path.join(d.workspace, "built")
            for path in (outside, inside):
                with open(path, "w") as f:
                    f.write("x\n")
                os.chmod(path, 0o644)
            code = ("import os, sys\n"
                    "for p in sys.argv[1:]:\n"
                    "    for f in (lambda: os.chmod(p, 0o666), lambda: os.chown(p, 65534, -1),\n"
                    "              lambda: os.utime(p, (1, 1))):\n"
                    "        try:\n"
                    "            f()\n"
                    "        except OSError as e:\n"
                    "            print(p, e.errno)\n")
            script = os.path.join(d.workspace, "meta.py")
            with open(script, "w") as f:
                f.write(code)
            r = self.run_approved(d, ["python3", script, outside, inside])
            self.assertEqual(r["status"], "ok", r)
            st = os.stat(outside)
            self.assertEqual((st.st_mode & 0o777, st.st_uid), (0o644, 0), b64(r.get("stdout", "")))
            self.assertNotEqual(st.st_mtime, 1)
            st = os.stat(inside)  # the write tree's own files: root may
            self.assertEqual((st.st_mode & 0o777, st.st_uid, st.st_mtime), (0o666, 65534, 1))
            self.assertIn(d.workspace, r["reply"]["data"]["confinement"]
                          ["writable_mounts_only"])


    def test_no_descriptor_from_outside_reaches_the_host_mounts(self):
        # s37 attack on the read-only mounts: a process of the agent's outside
        # any call passed an /etc directory descriptor over a socket in the
        # workspace, and the approved root code chowned and chmodded a file
        # there through it (the descriptor is on the host's mount).
        import socket as so
        with cgtest.Daemon(policy_text=self.POLICY,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            outside = os.path.join(d.tmp, "sys")
            os.makedirs(outside)
            victim = os.path.join(outside, "victim")
            with open(victim, "w") as f:
                f.write("x\n")
            os.chmod(victim, 0o600)
            path = os.path.join(d.workspace, "fd.sock")
            lst = so.socket(so.AF_UNIX)
            lst.bind(path)
            lst.listen(1)
            dfd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)

            def serve():
                lst.settimeout(20)
                try:
                    c, _ = lst.accept()
                    so.send_fds(c, [b"x"], [dfd])
                    c.close()
                except OSError:
                    pass
            th = threading.Thread(target=serve)
            th.start()
            script = os.path.join(d.workspace, "take.py")
            with open(script, "w") as f:
                f.write("import os, socket, sys\n"
                        "try:\n"
                        "    s = socket.socket(socket.AF_UNIX)\n"
                        "    s.connect(sys.argv[1])\n"
                        "    _, fds, _, _ = socket.recv_fds(s, 1, 1)\n"
                        "    os.chmod('victim', 0o666, dir_fd=fds[0])\n"
                        "    print('changed')\n"
                        "except OSError as e:\n"
                        "    print('refused', e.errno)\n")
            r = self.run_approved(d, ["python3", script, path])
            with so.socket(so.AF_UNIX) as wake:  # the call never came: let serve() end
                try:
                    wake.connect(path)
                except OSError:
                    pass
                th.join(30)
            lst.close()
            os.close(dfd)
            self.assertEqual(os.stat(victim).st_mode & 0o777, 0o600, r)
            self.assertIn(b"refused", b64(r.get("stdout", "")), r)


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("ip"), "root and iproute2")
class PrivilegedFollowsNoPlantedSymlink(unittest.TestCase):
    """An approved privileged `cat ws/notes.txt` read /etc/shadow: the agent
    made notes.txt a symlink, before the screen or after the approval (found
    by attack, s35). A privileged call follows no symlink under the
    workspaces, the peer's home or the shared temporary directories."""

    POLICY = """version: 1
rules:
  - id: cat-as-root
    decision: defer
    match: { exe: [cat] }
    constraints: { read: [/], write: [], net: none }
"""

    def cat(self, d, path):
        t, box = call_async(d, cgtest.make_request([["cat", path]], privileged=True))
        p = wait_pending(d, 1)[0]
        d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
        t.join(WAIT)
        r = box["resp"]
        return r, b64(r.get("stdout", "")), b64(r["stages"][0].get("stderr", ""))

    def test_a_planted_symlink_is_not_followed(self):
        with cgtest.Daemon(policy_text=self.POLICY,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            secret = os.path.join(d.tmp, "secret")  # outside the workspace, root's alone
            with open(secret, "w") as f:
                f.write("TOP-SECRET-BYTES\n")
            os.chmod(secret, 0o600)
            planted = os.path.join(d.workspace, "notes.txt")
            os.symlink(secret, planted)
            in_tmp = tempfile.mktemp(prefix="cg-planted-", dir="/tmp")
            os.symlink(secret, in_tmp)
            # Any directory one level under the usual places that all may write (attack: /run/lock).
            lock = "/run/lock" if os.path.isdir("/run/lock") and os.stat(
                "/run/lock").st_mode & 0o002 else "/var/tmp"
            in_lock = tempfile.mktemp(prefix="cg-planted-", dir=lock)
            os.symlink(secret, in_lock)
            try:
                for path in (planted, in_tmp, in_lock,
                             os.path.join(d.workspace, "..", os.path.basename(d.workspace),
                                          "notes.txt")):
                    r, out, err = self.cat(d, path)
                    self.assertNotIn(b"TOP-SECRET", out, path)
                    self.assertIn(b"Too many levels of symbolic links", err, (path, r))
                self.assertIn(d.workspace, r["reply"]["data"]["confinement"]
                              ["symlinks_not_followed"])
            finally:
                os.unlink(in_tmp)
                os.unlink(in_lock)
            # Control: a regular file there is read, as root.
            os.unlink(planted)
            with open(planted, "w") as f:
                f.write("build notes\n")
            os.chmod(planted, 0o600)
            r, out, err = self.cat(d, planted)
            self.assertEqual(out, b"build notes\n", (r, err))
            # The call's mounts stayed its own: the host's table does not name them.
            with open("/proc/self/mountinfo") as f:
                self.assertNotIn(d.workspace, f.read())

    def test_an_unconfined_call_follows_no_planted_symlink_either(self):
        # s37 attack: an approved root `curl -o data.json URL` (a rule with no
        # constraint set: "no confinement at all") wrote /etc/cron.d through
        # data.json, a link the agent made after the screen was shown.
        policy = """version: 1
rules:
  - id: tee-as-root
    decision: defer
    match: { exe: [tee, mount] }
"""
        with cgtest.Daemon(policy_text=policy,
                           flags=["--approval", "--approval-timeout", "20000"]) as d:
            target = os.path.join(d.tmp, "cron-like")  # outside the workspace
            planted = os.path.join(d.workspace, "data.json")
            os.symlink(target, planted)
            t, box = call_async(d, cgtest.make_request([["tee", "data.json"]],
                                                       privileged=True))
            p = wait_pending(d, 1)[0]
            self.assertIn("no confinement at all", d.cli("pending").stdout.decode())
            d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            t.join(WAIT)
            r = box["resp"]
            self.assertFalse(os.path.exists(target), r)
            self.assertIn(b"Too many levels of symbolic links",
                          b64(r["stages"][0].get("stderr", "")), r)
            with open("/proc/self/mountinfo") as f:
                self.assertNotIn(d.workspace, f.read())
            # A mount stage in the pipeline does not take the others out of it
            # (s37 attack: `mount | curl -o data.json` wrote /etc).
            t, box = call_async(d, cgtest.make_request([["mount"], ["tee", "data.json"]],
                                                       privileged=True))
            p = wait_pending(d, 1)[0]
            d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            t.join(WAIT)
            self.assertFalse(os.path.exists(target), box["resp"])


class PrivilegedWithoutTheHostsNetwork(unittest.TestCase):
    """A privileged call whose network is a namespace of its own keeps root's
    capabilities but CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN: with them
    it made a veth pair in the host's namespace (`ip link add … netns 1`),
    which stayed after the call (found by attack, s34d)."""

    POLICY = """version: 1
rules:
  - id: ip-offline
    decision: defer
    match: { exe: [ip] }
    constraints: { read: [/], write: ["${workspace}"], net: none }
"""

    def run_ip(self, d, argv):
        t, box = call_async(d, cgtest.make_request([argv], privileged=True))
        p = wait_pending(d, 1)[0]
        # Its set names no exec trees: the screen says which apply (not "none").
        shown = d.cli("pending").stdout.decode()
        self.assertIn("exec the default program directories (/usr", shown)
        # The sets read as words, not JSON.
        self.assertIn("set 1: read /; write ", shown)
        self.assertNotIn('"read":', shown)
        d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
        t.join(WAIT)
        return box["resp"]

    def test_no_veth_in_the_hosts_namespace(self):
        name = "cgt%d" % (os.getpid() % 100000)
        try:
            with cgtest.Daemon(policy_text=self.POLICY,
                               flags=["--approval", "--approval-timeout", "20000"]) as d:
                r = self.run_ip(d, ["ip", "link", "add", name, "netns", "1", "type", "veth",
                                    "peer", "name", name + "p", "netns", "1"])
                self.assertNotEqual(r["stages"][0]["exit_code"], 0, r)
                host = subprocess.run(["ip", "link", "show", name], capture_output=True)
                self.assertNotEqual(host.returncode, 0, "a veth pair appeared on the host")
                # Control: the call ran, as root (it reads its own namespace).
                r = self.run_ip(d, ["ip", "-o", "link", "show", "lo"])
                self.assertEqual((r["status"], r["stages"][0]["exit_code"]), ("ok", 0), r)
        finally:
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@unittest.skipUnless(shutil.which("tmux"), "tmux is installed by scripts/setup")
class ApproverScreen(unittest.TestCase):
    """Items 2 and 3 at the terminal, driven through tmux."""

    def setUp(self):
        self.d = daemon(flags=["--approval-timeout", "30000"]).start()
        self.session = "cgbind%d" % os.getpid()
        cmd = "%s --socket %s --admin-socket %s approve --grant-uses 5" % (
            cgtest.CALLGATE, self.d.socket, self.d.admin_socket)
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", "160", "-y",
                        "50", cmd], check=True)

    def tearDown(self):
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)
        self.d.close()

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.session],
                              capture_output=True, text=True).stdout

    def keys(self, *k):
        subprocess.run(["tmux", "send-keys", "-t", self.session] + list(k), check=True)

    def wait_screen(self, needle, old=None):
        end = time.time() + WAIT
        while time.time() < end:
            s = self.screen()
            # A screen still being drawn (a loaded machine) is read again.
            if needle in s and s != old:
                time.sleep(0.05)
                if self.screen() == s:
                    return s
                continue
            time.sleep(0.1)
        raise AssertionError("screen never showed %r:\n%s\nlog:\n%s" % (needle, self.screen(),
                                                                       self.d.log))

    def test_rows_break_between_words_and_the_countdown_ticks(self):
        self.wait_screen("no calls are waiting")
        words = ["word%02d" % i for i in range(60)]  # 419 bytes: three rows of the reason
        marker = os.path.join(self.d.workspace, "counted")
        t, box = call_async(self.d, cgtest.make_request([["touch", marker]], privileged=False,
                                                        reason=" ".join(words)))
        s = self.wait_screen("s left")
        for w in words:
            self.assertIn(w, s, "a word was cut across two rows")
        left = lambda text: int(text.split(" s left", 1)[0].rsplit(" ", 1)[1])  # noqa: E731
        first = left(s)
        time.sleep(2.5)
        self.assertLess(left(self.screen()), first, "the time left did not move")
        self.keys("n")
        t.join(WAIT)
        self.assertFalse(os.path.exists(marker))

    def test_a_10k_argument_is_shown_whole_and_the_rest_after_it(self):
        self.wait_screen("no calls are waiting")
        big = "".join("%05d-" % i for i in range(1707))  # 10,242 bytes, every piece distinct
        outside = os.path.join(self.d.tmp, "outside")
        argv = ["curl", "-s", "-H", big, "-o", outside, "file:///etc/hostname"]
        t, box = call_async(self.d, cgtest.make_request([argv], privileged=False))
        first = self.wait_screen("page 1 of")
        pages = [first]
        total = int(first.split("page 1 of ", 1)[1].split(")", 1)[0])
        self.assertGreater(total, 1, "10 KiB does not fit one 50-row page")
        # Not approvable before the end: y on page 1 answers nothing.
        self.keys("y")
        self.wait_screen("page to the end first")
        self.assertEqual(len(pending(self.d)), 1)
        for n in range(2, total + 1):
            self.keys("Space")
            pages.append(self.wait_screen("page %d of %d" % (n, total)))
        rows = []
        for page in pages:  # the rows of each page: after its title, up to the blank line
            lines = page.splitlines()
            body = lines[2:]
            rows += body[:body.index("")] if "" in body else body
        # Reassemble argv[3] from its wrapped rows: every byte, in order.
        start = next(i for i, r in enumerate(rows) if r.lstrip().startswith("argv[3]"))
        text = rows[start][17:]
        for r in rows[start + 1:]:
            if not r.startswith(" " * 17) or not r.strip():
                break
            text += r[17:]
        self.assertEqual(text.rstrip(), big)
        last = pages[-1]
        shown = [r.split(None, 1) for r in rows if r.lstrip().startswith("argv[")]
        self.assertEqual([v for _, v in shown][4:], ["-o", outside, "file:///etc/hostname"])
        self.assertIn("[y] approve once", last)
        self.assertNotIn("[y] approve once", first)
        # The bytes pending --json shows are the bytes the hash covers.
        item = pending(self.d)[0]
        self.assertEqual(item["pipeline"][0]["argv"], argv)
        self.assertEqual(view_sha256(item), item["request_sha256"])
        self.assertIn(item["request_sha256"], "".join(rows).replace(" ", ""))
        self.keys("n")
        t.join(WAIT)
        self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-001", box)
        self.assertFalse(os.path.exists(outside))

    def test_g_grants_the_literal_argument_only_after_a_second_key(self):
        self.wait_screen("no calls are waiting")
        lit = os.path.join(self.d.workspace, "items")
        os.mkdir(lit)
        star = os.path.join(lit, "*")
        t, box = call_async(self.d, cgtest.make_request([["touch", star]], privileged=False))
        self.wait_screen("[g] grant this exact call")
        self.keys("g")
        s = self.wait_screen("open exactly this grant")
        self.assertIn(lit + "/\\*", s, "the star is shown escaped in the grant")
        # In words, every binding on a row of its own (it was JSON).
        self.assertRegex(s, r"OPENS GRANT +as the caller, \d+ uses over 1800 s")
        self.assertRegex(s, r"  session +none given")
        self.assertRegex(s, r"  uid +%d" % os.getuid())
        self.assertRegex(s, r"  cwd +/")
        self.assertRegex(s, r"  timeout_ms +30000 ms at most")
        self.assertRegex(s, r"  constraints +(none|set 1: )")
        self.assertNotIn('"privileged"', s)
        # Space on its last page pages nothing and opens nothing (it cancelled: s36).
        self.keys("Space")
        self.wait_screen("this is the last page")
        self.assertEqual(self.d.admin("grant_list")["reply"]["data"]["grants"], [],
                         "nothing is open before the second key")
        self.keys("g")
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "ok", box)
        self.assertEqual(os.listdir(lit), ["*"])
        grants = self.d.admin("grant_list")["reply"]["data"]["grants"]
        self.assertEqual(len(grants), 1)
        self.assertEqual(grants[0]["pipeline"][0]["argv"], ["touch", lit + "/\\*"])
        listed = self.d.cli("grant", "list").stdout.decode()
        self.assertIn("; env none;", listed, "an empty binding reads as none, not blank")
        self.assertNotRegex(listed, r"; (env|host) ;")
        # A different argument is not covered: it waits for a person, nothing is made.
        other = os.path.join(lit, "delete-all")
        t2, box2 = call_async(self.d, cgtest.make_request([["touch", other]], privileged=False))
        p = wait_pending(self.d, 1)[0]
        self.assertEqual(p["pipeline"][0]["argv"][1], other)
        self.assertFalse(os.path.exists(other))
        self.d.admin("deny", trace_id=p["trace_id"])
        t2.join(WAIT)
        self.assertFalse(os.path.exists(other))
        # The deadline shown is bound as the longest: the same call asking for longer waits.
        self.assertEqual(grants[0]["timeout_ms"], 30000, grants)
        os.unlink(star)
        t3, box3 = call_async(self.d, cgtest.make_request([["touch", star]], privileged=False,
                                                          timeout_ms=120000))
        p = wait_pending(self.d, 1)[0]
        self.assertEqual(p["timeout_ms"], 120000)
        self.d.admin("deny", trace_id=p["trace_id"])
        t3.join(WAIT)
        self.assertFalse(os.path.exists(star))
        # Control: the literal shape runs again under the grant, unprompted.
        resp = self.d.request(cgtest.make_request([["touch", star]], privileged=False,
                                                  timeout_ms=20000), timeout=WAIT)
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(resp["reply"]["data"]["grant_id"], grants[0]["grant_id"])
        self.assertTrue(os.path.exists(star))


COUNTER = r"""
import sys
with open(sys.argv[1], "a") as f:
    f.write("ran\n")
"""


class ReplayAfterRestart(unittest.TestCase):
    """Item 5: the same request bytes after a restart do not run again."""

    def test_replayed_bytes_are_refused_after_a_restart(self):
        d = daemon().start()
        try:
            script = os.path.join(d.workspace, "count.py")
            counter = os.path.join(d.workspace, "counter")
            with open(script, "w") as f:
                f.write(COUNTER)
            line = cgtest.encode(cgtest.make_request([["python3", script, counter]],
                                                     privileged=False))
            first = cgtest.parse_response(d.raw(line))
            self.assertEqual(first["status"], "ok", first)
            self.assertEqual(open(counter).read(), "ran\n")
            # Same daemon: the seen-id window refuses it.
            again = cgtest.parse_response(d.raw(line))
            self.assertEqual(again["reply"]["code"], "MCP-VAL-I-013", again)
            d.stop()
            d.start()
            replay = cgtest.parse_response(d.raw(line))
            self.assertEqual(replay["reply"]["code"], "MCP-VAL-I-024", replay)
            self.assertEqual(replay["reply"]["type"], "I")
            time.sleep(0.3)
            self.assertEqual(open(counter).read(), "ran\n", "ran a second time")
            # Control: a fresh request after the restart runs.
            fresh = d.request(cgtest.make_request([["python3", script, counter]],
                                                  privileged=False), timeout=WAIT)
            self.assertEqual(fresh["status"], "ok", fresh)
            self.assertEqual(open(counter).read(), "ran\nran\n")
        finally:
            d.close()


    def test_bytes_dated_ahead_of_the_clock_are_refused_after_a_restart(self):
        # Dated 4 s ahead (inside the 5 s taken), the request is still
        # dated after the restart: the daemon that took it marked its time in
        # the socket's lock, and its successor starts from the mark.
        d = daemon().start()
        try:
            script = os.path.join(d.workspace, "count.py")
            counter = os.path.join(d.workspace, "counter")
            with open(script, "w") as f:
                f.write(COUNTER)
            line = cgtest.encode(cgtest.make_request([["python3", script, counter]],
                                                     privileged=False,
                                                     time=cgtest.now_rfc3339(4)))
            first = cgtest.parse_response(d.raw(line))
            self.assertEqual(first["status"], "ok", first)
            d.stop()
            d.start()
            replay = cgtest.parse_response(d.raw(line))
            self.assertEqual(replay["reply"]["code"], "MCP-VAL-I-024", replay)
            time.sleep(0.3)
            self.assertEqual(open(counter).read(), "ran\n", "ran a second time")
        finally:
            d.close()


    def test_one_request_dated_far_ahead_locks_nobody_out_after_a_restart(self):
        # s36 attack: one request dated 55 s ahead (inside the 60 s window),
        # even one the policy refuses, moved the restart mark 55 s ahead, and
        # every caller was refused for that long after the next restart.
        d = daemon().start()
        try:
            far = d.request(cgtest.make_request([["rm", "-rf", "/"]], privileged=False,
                                                time=cgtest.now_rfc3339(30)))
            self.assertEqual(far["reply"]["code"], "MCP-VAL-I-008", far)
            d.stop()
            d.start()
            fresh = d.request(cgtest.make_request([["true"]], privileged=False))
            # Decided by the policy, not refused as dated before the mark.
            self.assertIn("decision", fresh["reply"].get("data", {}), fresh)
        finally:
            d.close()


NOTIFIER = """#!/bin/sh
# Record the approval view, then answer through the admin verbs, bound to its hash.
# The answer appears under its final name only once whole (the test polls for it).
cat > "%(out)s/view.json"
%(cg)s --admin-socket "$CALLGATE_ADMIN_SOCKET" approve "$CALLGATE_TRACE_ID" \\
    --hash "%(hash)s" --json > "%(out)s/answer.tmp"
mv "%(out)s/answer.tmp" "%(out)s/answer.json"
"""


class Notifier(unittest.TestCase):
    """Item 7: approvals where people are."""

    def run_with(self, hash_expr):
        out = cgtest.tempfile.mkdtemp(prefix="cg-notify-", dir="/tmp")
        self.addCleanup(shutil.rmtree, out, True)
        script = os.path.join(out, "notify.sh")
        with open(script, "w") as f:
            f.write(NOTIFIER % {"out": out, "cg": cgtest.CALLGATE, "hash": hash_expr})
        os.chmod(script, 0o755)
        d = daemon(flags=["--approval-notify", script]).start()
        self.addCleanup(d.close)
        marker = os.path.join(d.workspace, "notified")
        t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False,
                                                   reason="via the notifier"))
        end = time.time() + WAIT
        while time.time() < end and not os.path.exists(os.path.join(out, "answer.json")):
            time.sleep(0.05)
        time.sleep(0.2)
        with open(os.path.join(out, "view.json")) as f:
            view = json.load(f)
        with open(os.path.join(out, "answer.json")) as f:
            answer = json.load(f)
        return d, marker, t, box, view, answer

    def test_the_notifier_gets_the_view_and_its_answer_is_recorded(self):
        d, marker, t, box, view, answer = self.run_with("$CALLGATE_REQUEST_SHA256")
        self.assertEqual(view["reason"], "via the notifier")
        self.assertEqual(view["pipeline"][0]["argv"], ["touch", marker])
        self.assertEqual(view_sha256(view), view["request_sha256"])
        self.assertEqual(answer["reply"]["code"], "MCP-APPR-S-001", answer)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "ok", box)
        self.assertEqual(box["resp"]["reply"]["data"]["approved_by"], [os.getuid()])
        self.assertTrue(os.path.exists(marker))

    def test_an_answer_bound_to_another_hash_applies_nothing(self):
        d, marker, t, box, view, answer = self.run_with("0" * 64)
        self.assertEqual(answer["reply"]["code"], "MCP-APPR-I-002", answer)
        time.sleep(0.3)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(len(pending(d)), 1)
        # Control: the right hash from a person still approves it.
        r = d.admin("approve", trace_id=view["trace_id"], request_sha256=view["request_sha256"])
        self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
        t.join(WAIT)
        self.assertTrue(os.path.exists(marker))


class NoDeadEnds(unittest.TestCase):
    """Item 6: every D reply names a next step that can succeed."""

    def test_block_names_a_policy_change_and_unknown_names_approval_or_grant(self):
        with cgtest.Daemon(policy_text=POLICY + """  - id: no-rm
    decision: deny
    why: never
    match: { exe: [rm] }
""") as d:
            victim = os.path.join(d.workspace, "keep")
            open(victim, "w").close()
            block = d.request(cgtest.make_request([["rm", victim]], privileged=False))
            self.assertEqual(block["reply"]["code"], "EN-EXEC-D-001", block)
            self.assertIn("policy change", block["reply"]["message"])
            self.assertNotIn("approval or a grant", block["reply"]["message"])
            default = d.request(cgtest.make_request([["ls"]], privileged=False))
            self.assertEqual(default["reply"]["code"], "EN-EXEC-D-002", default)
            self.assertIn("policy change", default["reply"]["message"])
            # A grant cannot override the deny: the next step named is the only one.
            g = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/rm",
                                                           "argv": ["**"]}],
                                             "uses": 1, "ttl_s": 60})
            self.assertEqual(g["reply"]["code"], "CT-OPEN-S-001")
            again = d.request(cgtest.make_request([["rm", victim]], privileged=False))
            self.assertEqual(again["reply"]["code"], "EN-EXEC-D-001", again)
            self.assertTrue(os.path.exists(victim))
            # UNKNOWN without an approver names the grant that does work...
            out = os.path.join(d.workspace, "unknown-out")
            argv = ["curl", "-s", "-o", out, "file:///etc/hostname"]
            unknown = d.request(cgtest.make_request([argv], privileged=False))
            self.assertEqual(unknown["reply"]["code"], "EN-EXEC-D-004", unknown)
            self.assertIn("grant", unknown["reply"]["message"])
            self.assertFalse(os.path.exists(out))
            # ... and following it succeeds (the control).
            g = d.cli("grant", "open", "--exe", "/usr/bin/curl", "--argv", *argv,
                      "--uses", "1", "--ttl", "60")
            self.assertEqual(g.returncode, 0, g.stderr)
            ran = d.request(cgtest.make_request([argv], privileged=False), timeout=WAIT)
            self.assertEqual(ran["status"], "ok", ran)
            self.assertTrue(os.path.exists(out))


class ApproveByTraceIdOnly(unittest.TestCase):
    """`callgate approve ID` answers the call whose trace id is ID, never one
    whose agent-chosen request id is: an attack gave a new call the trace id
    of one the person had seen (then withdrawn) as its request id, and
    `approve` of that id ran the new call (found by attack, s34)."""

    def test_a_request_id_equal_to_a_seen_trace_id_is_not_approved(self):
        with daemon() as d:
            seen = os.path.join(d.workspace, "seen")
            swapped = os.path.join(d.workspace, "swapped")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(d.socket)
            sock.sendall((json.dumps(cgtest.make_request([["touch", seen]],
                                                         privileged=False)) + "\n").encode())
            ta = wait_pending(d, 1)[0]["trace_id"]
            sock.close()  # the agent withdraws the call the person saw
            end = time.time() + WAIT
            while pending(d) and time.time() < end:
                time.sleep(0.05)
            b = cgtest.make_request([["touch", swapped]], privileged=False)
            b["id"] = ta
            t, box = call_async(d, b)
            tb = wait_pending(d, 1)[0]["trace_id"]
            r = d.cli("approve", ta)
            self.assertEqual(r.returncode, 65, r.stdout + r.stderr)
            self.assertIn(b"is the request id of a waiting call", r.stderr)
            self.assertIn(tb.encode(), r.stderr)  # named, for after reading the call
            time.sleep(0.3)
            self.assertFalse(os.path.exists(swapped), "a call the person never saw ran")
            self.assertEqual([p["trace_id"] for p in pending(d)], [tb])
            # Control: approving the call by its own trace id runs it, and says what ran.
            r = d.cli("approve", tb)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(b"call: touch " + swapped.encode(), r.stdout)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            self.assertTrue(os.path.exists(swapped))


class ARequestIdThatIsAnotherCallsTraceId(unittest.TestCase):
    """s41c F3: the agent gave call B the request id of its own waiting call
    M's trace id; `approve <that id>` (B's id, as B's run had printed it)
    answered M, a call the person never read."""

    def test_it_answers_nothing_unless_bound_to_the_view_read(self):
        with daemon() as d:
            m_file = os.path.join(d.workspace, "PWNED_M")
            tm, bm = call_async(d, cgtest.make_request([["touch", m_file]], privileged=False))
            m = wait_pending(d, 1)[0]
            b = cgtest.make_request([["touch", os.path.join(d.workspace, "b")]],
                                    privileged=False)
            b["id"] = m["trace_id"]
            tb, bb = call_async(d, b)
            wait_pending(d, 2)
            for typed in (m["trace_id"], m["trace_id"][:8]):
                r = d.cli("approve", typed)
                self.assertEqual(r.returncode, 65, r.stdout + r.stderr)
                self.assertIn(b"the request id of a waiting call", r.stderr)
            time.sleep(0.3)
            self.assertFalse(os.path.exists(m_file), "a call the person never read ran")
            # Bound to the view the person read, the answer is M's.
            r = d.cli("approve", m["trace_id"], "--hash", m["request_sha256"])
            self.assertEqual(r.returncode, 0, r.stderr)
            tm.join(WAIT)
            self.assertEqual(bm["resp"]["status"], "ok", bm)
            self.assertTrue(os.path.exists(m_file))
            d.admin("deny", trace_id=[p for p in pending(d)][0]["trace_id"])
            tb.join(WAIT)


class ALineBreakIsSeen(unittest.TestCase):
    """s41d F2: "# ... \\ntouch x" with a real line break and with the two
    characters looked alike on every approval screen; root ran the touch."""

    def test_pending_shows_a_line_break_as_a_row(self):
        with daemon() as d:
            real = cgtest.make_request([["sh", "-c", "echo ok # \ntouch PWNED_real"]],
                                       privileged=False)
            literal = cgtest.make_request([["sh", "-c", "echo ok # \\ntouch PWNED_lit"]],
                                          privileged=False)
            t1, _ = call_async(d, real)
            wait_pending(d, 1)
            t2, _ = call_async(d, literal)
            wait_pending(d, 2)
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"argv\[2\] +echo ok #\s*\n\s+line 2 +touch PWNED_real")
            self.assertIn("1 line break: each line is a row of its own", out)
            self.assertIn("echo ok # \\ntouch PWNED_lit", out)  # the two characters, one row
            # The command rows: a word of lines in $'...', as a shell reads it.
            self.assertIn("sh -c $'echo ok # \\ntouch PWNED_real'", out)
            self.assertIn("sh -c 'echo ok # \\ntouch PWNED_lit'", out)
            for p in pending(d):
                d.admin("deny", trace_id=p["trace_id"])
            t1.join(WAIT)
            t2.join(WAIT)


class ATabIsSeen(unittest.TestCase):
    """s42b F1: `chmod 644 ws/x<TAB>ws/target` and the same text with a typed
    backslash-t looked alike on every approval screen (the tab shown \\t,
    the backslash as it is); approved, root chmodded ws/target."""

    def test_pending_tells_a_tab_from_a_typed_backslash_t(self):
        with daemon() as d:
            real = cgtest.make_request([["sh", "-c", "chmod 644 x\ttarget"]], privileged=False)
            literal = cgtest.make_request([["sh", "-c", "chmod 644 x\\ttarget"]],
                                          privileged=False)
            t1, _ = call_async(d, real)
            wait_pending(d, 1)
            t2, _ = call_async(d, literal)
            wait_pending(d, 2)
            out = d.cli("pending").stdout.decode()
            # The tab's argv row is followed by a row that says it holds one;
            # the typed backslash-t's is not.
            self.assertRegex(out, r"argv\[2\] +chmod 644 x\\ttarget\n +! controls +1 tab ")
            self.assertEqual(out.count("! controls"), 1)
            # The command rows: the tab in $'...', the typed one single-quoted.
            self.assertIn("sh -c $'chmod 644 x\\ttarget'", out)
            self.assertIn("sh -c 'chmod 644 x\\ttarget'", out)
            # Both in one text: the typed backslash is doubled beside the tab.
            both = cgtest.make_request([["sh", "-c", "echo a\\tb\tc"]], privileged=False)
            t3, _ = call_async(d, both)
            wait_pending(d, 3)
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"argv\[2\] +echo a\\\\tb\\tc\n")
            for p in pending(d):
                d.admin("deny", trace_id=p["trace_id"])
            t1.join(WAIT)
            t2.join(WAIT)
            t3.join(WAIT)


class OneUidsShareOfTheQueue(unittest.TestCase):
    """s41b F2: one uid queued 256 privileged calls of 1 MiB; another uid's
    call sat behind them, unseen until it timed out, and the daemon grew by
    1 GB. A uid has at most 16 calls waiting for a person."""

    def test_a_uid_past_its_share_is_refused_and_others_still_queue(self):
        with daemon(flags=["--socket-group", "nogroup"]) as d:
            os.chmod(d.tmp, 0o755)
            def req(name):
                return cgtest.make_request([["touch", os.path.join(d.workspace, name)]],
                                           privileged=False)
            held = [call_async(d, req("q%d" % i)) for i in range(16)]
            wait_pending(d, 16)
            r = d.request(req("past-the-share"), timeout=30)
            self.assertEqual(r["reply"]["code"], "EN-APPR-D-007", r)
            self.assertIn("uid 0 already has 16 calls waiting", r["reply"]["message"])
            line = cgtest.encode(req("nobodys"))
            box = {}

            def as_nobody():
                box["raw"] = cgtest.as_uid(65534, lambda: cgtest.send_recv(d.socket, line)
                                           .decode())
            t = threading.Thread(target=as_nobody, daemon=True)
            t.start()
            mine = wait_pending(d, 17)
            self.assertEqual(sum(1 for p in mine if p["peer"]["uid"] == 65534), 1)
            for p in pending(d):
                d.admin("deny", trace_id=p["trace_id"])
            t.join(WAIT)
            self.assertEqual(cgtest.parse_response(box["raw"].encode())["status"], "denied")
            for th, b in held:
                th.join(WAIT)
                self.assertEqual(b["resp"]["status"], "denied", b)


class AnswerByTracePrefix(unittest.TestCase):
    """ux-s41 L2: a person copies the start of a trace id off the screen;
    `deny 19da6c71` said the call was already answered while it waited."""

    def test_a_unique_prefix_answers_that_call_and_says_which(self):
        with daemon() as d:
            made = os.path.join(d.workspace, "by-prefix")
            t, box = call_async(d, cgtest.make_request([["touch", made]], privileged=False))
            tid = wait_pending(d, 1)[0]["trace_id"]
            r = d.cli("deny", tid[:7])  # too short: not taken for a prefix
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual([p["trace_id"] for p in pending(d)], [tid])
            r = d.cli("deny", tid[:8])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(("is trace %s" % tid).encode(), r.stderr)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "denied", box)
            self.assertFalse(os.path.exists(made))


class PendingShowsTheWholeCall(unittest.TestCase):
    """`callgate pending` shows what `approve` would answer, whole: a grant
    the agent asks for (an attack hid a week-long root shell grant behind a
    reason reading "run ls once": the listing showed only the reason), and a
    call's privilege, cwd and what each stage resolved to."""

    def test_a_grant_request_is_shown_in_words(self):
        with daemon() as d:
            spec = {"pipeline": [{"exe": "/usr/bin/dash", "argv": ["**"]}],
                    "privileged": True, "uses": 100000, "ttl_s": 604800}
            t, box = call_async(d, cgtest.make_request(
                None, action="grant", grant=spec, reason="grant: run `ls` once"))
            wait_pending(d, 1)
            out = d.cli("pending").stdout.decode()
            self.assertIn("ASKS GRANT     AS ROOT (privileged), 100000 uses over 604800 s",
                          out)
            self.assertRegex(out, r"stage 1 +/usr/bin/dash")
            self.assertIn("'**'  (* ? [..] match any characters of a word, '/' too, never a "
                          "'..' part", out)
            self.assertIn("nothing runs now", out)
            p = pending(d)[0]
            self.assertIn(p["request_sha256"], out)
            d.cli("deny", p["trace_id"])
            t.join(WAIT)

    def test_the_network_a_stage_reaches_is_said(self):
        # An approved curl under a rule with no constraint set reached any
        # host; the screen said only "no constraint set" (s36 walk).
        with cgtest.Daemon(flags=["--approval", "--approval-timeout", "20000"]) as d:
            t, box = call_async(d, cgtest.make_request([["curl", "-sS", "https://example.com"]],
                                                       privileged=False))
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"network +THE HOST'S WHOLE NETWORK: any host, any port")
            d.cli("deny", p["trace_id"])
            t.join(WAIT)
            t, box = call_async(d, cgtest.make_request([["id", "-u"]]))
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"network +none")
            self.assertIn("limits nproc 256", out)
            d.cli("deny", p["trace_id"])
            t.join(WAIT)

    def test_padding_is_counted_not_shown(self):
        # 1,500 spaces had pushed an env value's payload rows below what an approver reads.
        with daemon() as d:
            marker = os.path.join(d.workspace, "padded")
            value = "Jane" + " " * 1500 + "PAYLOAD-AFTER-THE-PADDING"
            t, box = call_async(d, cgtest.make_request([["touch", marker]], privileged=False,
                                                       env={"GIT_AUTHOR_NAME": value}))
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            self.assertIn("GIT_AUTHOR_NAME=Jane<1500 spaces>PAYLOAD-AFTER-THE-PADDING", out)
            self.assertEqual(p["env"]["GIT_AUTHOR_NAME"], value, "the view keeps every byte")
            d.cli("deny", p["trace_id"])
            t.join(WAIT)
            self.assertFalse(os.path.exists(marker))

    def test_characters_that_look_like_ascii_are_named(self):
        # A Cyrillic a, a combining mark and a no-break space printed as they
        # are: the approver read `pip install pandas --index-url=...` (s38b F6).
        with daemon() as d:
            args = ["p\u0430ndas", "n\u0336umpy", "--index-url=http://evil\u00a0x"]
            t, box = call_async(d, cgtest.make_request([["touch", *args]], privileged=False))
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"argv\[1\] +p.ndas\n +! not ASCII +U\+0430 at char 2\n")
            self.assertIn("U+0336 at char 2", out)
            self.assertIn("U+00A0 at char 24", out)
            self.assertEqual(out.count("! not ASCII"), 3, out)
            d.cli("deny", p["trace_id"])
            t.join(WAIT)
            # A grant's program and words, and the call's reason, too (s38c F5).
            spec = {"pipeline": [{"exe": "/usr/bin/dash", "argv": ["dash", "p\u0430ndas"]}],
                    "uses": 1, "ttl_s": 60}
            t, box = call_async(d, cgtest.make_request(None, action="grant", grant=spec,
                                                       reason="r\u0435ason"))
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            self.assertRegex(out, r"argv +dash 'p.ndas'\n +! not ASCII +U\+0430 at char 8\n")
            self.assertIn("U+0435 at char 2", out)
            d.cli("deny", p["trace_id"])
            t.join(WAIT)

    def test_a_forwarded_ssh_agent_is_shown_bound_and_granted_apart(self):
        """forward_agent hands the call the daemon's ssh agent: it was in
        neither the view, its hash nor a grant's match, so a call shown as a
        plain command used the agent once approved (found by attack, s34)."""
        d = daemon()
        agent = os.path.join(d.tmp, "agent.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(agent)
        listener.listen(4)
        d.extra_env["SSH_AUTH_SOCK"] = agent
        try:
            d.start()
            out = os.path.join(d.workspace, "fwd")
            plain = cgtest.make_request([["touch", out]], privileged=False)
            fwd = dict(plain, forward_agent=True, id=str(uuid.uuid4()))
            t, box = call_async(d, fwd)
            p = wait_pending(d, 1)[0]
            self.assertIs(p["forward_agent"], True)
            self.assertIn("ssh agent      FORWARDED", d.cli("pending").stdout.decode())
            d.admin("deny", trace_id=p["trace_id"])
            t.join(WAIT)
            t, box = call_async(d, dict(plain, id=str(uuid.uuid4())))
            q = wait_pending(d, 1)[0]
            self.assertIs(q["forward_agent"], False)
            self.assertNotEqual(p["request_sha256"], q["request_sha256"])
            # A grant for the call shown without the agent does not cover it with one.
            r = d.admin("grant_open", trace_id=q["trace_id"], request_sha256=q["request_sha256"],
                        grant={"pipeline": [{"exe": "/usr/bin/touch", "argv": ["**"]}],
                               "uses": 5, "ttl_s": 600})
            self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001", r)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)  # control: covered
            os.unlink(out)
            t, box = call_async(d, dict(fwd, id=str(uuid.uuid4())))
            wait_pending(d, 1)
            self.assertFalse(os.path.exists(out), "a grant without the agent covered it")
            d.admin("deny", trace_id=pending(d)[0]["trace_id"])
            t.join(WAIT)
        finally:
            listener.close()
            d.close()

    def test_an_empty_queue_says_when_approval_is_off(self):
        with cgtest.Daemon(policy_text=POLICY) as d:
            out = d.cli("pending").stdout.decode()
            self.assertIn("without --approval", out)
            self.assertFalse(d.admin("pending")["reply"]["data"]["approval"])
        with daemon() as d:
            self.assertEqual(d.cli("pending").stdout.decode().strip(),
                             "no calls are waiting (admin socket %s)" % d.admin_socket)
            self.assertTrue(d.admin("pending")["reply"]["data"]["approval"])

    def test_a_call_is_shown_whole(self):
        with daemon() as d:
            sub = os.path.join(d.workspace, "sub")
            os.mkdir(sub)
            req = cgtest.make_request([["touch", "x"]], privileged=False)
            req["cwd"] = sub
            t, box = call_async(d, req)
            p = wait_pending(d, 1)[0]
            out = d.cli("pending").stdout.decode()
            for want in ("trace          " + p["trace_id"], "cwd            " + sub,
                         "privileged     no", "stage 1 runs", "/usr/bin/touch",
                         "argv[1]", "touch-needs-a-person",
                         "callgate --admin-socket %s approve %s --hash %s" % (
                             d.admin_socket, p["trace_id"], p["request_sha256"])):
                self.assertIn(want, out)
            d.cli("deny", p["trace_id"])
            t.join(WAIT)


class ApproverCommandLine(unittest.TestCase):
    """--help for approve, pending, deny and grant; a bad option is named."""

    def run_cli(self, *args):
        return subprocess.run([cgtest.CALLGATE, "--socket", "/nonexistent/cg.sock"] + list(args),
                              capture_output=True, text=True, timeout=WAIT)

    def test_help_and_named_bad_options(self):
        for sub, opt in (("approve", "--hash"), ("pending", "--json"), ("deny", "--why"),
                         ("grant", "--privileged")):
            r = self.run_cli(sub, "--help")
            self.assertEqual(r.returncode, 0, (sub, r.stderr))
            self.assertIn("usage: callgate " + sub, r.stdout)
            self.assertIn(opt, r.stdout)
        r = self.run_cli("grant", "open", "--exe", "/usr/bin/id", "--argv", "id",
                         "--paths", "/tmp", "--uses", "1", "--ttl", "60")
        self.assertEqual(r.returncode, 64)
        self.assertIn("'--paths'", r.stderr)
        # After --argv a word may be a pattern (--version); one edit from an option is a typo.
        self.assertIn("looks like '--path' mistyped", r.stderr)
        self.assertIn("written \\--paths", r.stderr)
        r = self.run_cli("grant", "open", "--exe", "/usr/bin/id", "--uses", "1", "--pahts", "x")
        self.assertEqual(r.returncode, 64)
        self.assertIn("did you mean '--path'", r.stderr)
        r = self.run_cli("pending", "--bogus")
        self.assertEqual(r.returncode, 64)
        self.assertIn("'--bogus'", r.stderr)


if __name__ == "__main__":
    unittest.main()
