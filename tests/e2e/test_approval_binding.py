# SPDX-License-Identifier: MIT
"""Approvals and grants bind what runs; the admin plane trusts only people
(issue 12). Every test judges by effect (a file that must not appear, a
counter that must not grow, a call that stays pending) next to a control
that succeeds.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import unittest

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
            # Every admin verb is refused to a peer inside a call, stop included.
            self.assertEqual(got, {k: "MCP-IO-E-004" for k in got}, got)
            # By effect: nothing ran, nothing opened, the daemon still serves.
            time.sleep(0.3)
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(len(pending(d)), 1, "the call is still waiting")
            self.assertEqual(d.admin("grant_list")["reply"]["data"]["grants"], [])
            self.assertIsNone(d.proc.poll(), "stop from inside a call was refused")
            self.assertIn("inside a call", d.log)
            # Control: the person at the test's own pid approves, and it runs.
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            self.assertTrue(os.path.exists(marker))

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

            for action in ("approve", "deny", "grant_open"):
                r = as_nobody(action)
                self.assertEqual(r["reply"]["code"], "MCP-IO-E-005", r)
            # Reading the queue is not answering it.
            self.assertEqual(as_nobody("pending")["reply"]["code"], "MCP-APPR-S-003")
            time.sleep(0.3)
            self.assertFalse(os.path.exists(marker))
            self.assertEqual(len(pending(d)), 1)
            # Control: the daemon's owner (the default approver) answers.
            r = d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
            t.join(WAIT)
            self.assertTrue(os.path.exists(marker))

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


if __name__ == "__main__":
    unittest.main()
