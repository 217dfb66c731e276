# SPDX-License-Identifier: MIT
"""The journal heals: a full disk stops it (fail closed), and once space is
back it reopens by itself, without a restart, recording the gap.

Judged by effect: while the disk is full an allowed command does not run (its
marker file is never created); after the space is freed the same command runs;
the journal holds a recovery event that counts what was refused meanwhile; and
`callgate replay --all` of the stopped daemon's state passes.
"""
import glob
import json
import os
import subprocess
import time
import unittest

import cgtest

POLICY = """
version: 1
rules:
  - id: touch-and-true
    decision: allow
    why: the test's only commands
    match:
      exe: [touch, "true"]
"""


def call(d, argv):
    return d.request(cgtest.make_request([argv], privileged=False))


@unittest.skipUnless(os.geteuid() == 0, "mounting a small tmpfs needs root")
class JournalHeals(unittest.TestCase):
    def test_full_disk_refuses_then_heals_without_restart(self):
        # No disk reserve: this is the path past it, the disk full to the last byte.
        d = cgtest.Daemon(policy_text=POLICY, flags=["--disk-reserve", "0"])
        os.makedirs(d.state_dir)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "cg-heal",
                        d.state_dir], check=True)
        try:
            self._run(d)
        finally:
            if d.proc and d.proc.poll() is None:
                d.stop()
            subprocess.run(["umount", "-l", d.state_dir])
            d.close()

    def _run(self, d):
        d.start()
        r = call(d, ["/bin/true"])
        self.assertEqual(r["status"], "ok", d.log)

        # Fill the state directory's file system to the last byte.
        filler = os.path.join(d.state_dir, "filler")
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
            try:
                while True:
                    f.write(b"\0")
            except OSError:
                pass

        # The journal's last page may still hold a few events: a call whose
        # permit fits there is durable and may run (its marker must then
        # exist). Call until the first refusal, then every call is refused
        # and none of them runs.
        refused = 0
        full_markers = []
        for i in range(64):
            marker = os.path.join(d.workspace, "call-%d" % i)
            r = call(d, ["/usr/bin/touch", marker])
            if r["status"] == "ok":
                self.assertEqual(refused, 0, "a call ran after the journal closed: %s" % r)
                self.assertTrue(os.path.exists(marker), r)
                continue
            self.assertEqual(r["reply"]["type"], "E", r)
            self.assertFalse(os.path.exists(marker), "a refused call ran: %s" % r)
            full_markers.append(marker)
            refused += 1
            if refused == 3:
                break
        self.assertEqual(refused, 3, "the journal never closed on a full disk")
        # While it is closed nothing is answered that it could not record: a
        # refusal and a dry run (answered before they are recorded) are turned
        # away too, not denied under a trace id the journal never holds (s39b);
        # still after a reopening that failed (one is tried every second).
        time.sleep(1.5)
        for req in (cgtest.make_request([["rm", "-rf", "/"]]),
                    cgtest.make_request([["ls"]], action="gate")):
            r = d.request(req)
            self.assertEqual(r["reply"]["code"], "MCP-LOG-E-007", r)
            self.assertEqual(r["reply"]["params"]["errno_name"], "ENOSPC", r)
        # Nor a grant or an answer on the admin socket (s39d: a grant opened
        # while closed later ran a call, with no record of its opening).
        r = d.admin("grant_open", grant={"pipeline": [{"exe": "/usr/bin/true", "argv": ["true"]}],
                                         "uses": 1, "ttl_s": 60})
        self.assertEqual(r["reply"]["code"], "MCP-LOG-E-007", r)
        r = d.admin("deny", trace_id="00000000-0000-4000-8000-000000000000")
        self.assertEqual(r["reply"]["code"], "MCP-LOG-E-007", r)
        self.assertEqual(d.admin("grant_list")["reply"]["data"]["grants"], [])
        self.assertEqual(d.admin("ping")["reply"]["type"], "S")  # reading still answers

        os.unlink(filler)
        healed_marker = os.path.join(d.workspace, "ran-after-heal")
        deadline = time.monotonic() + cgtest.DEFAULT_TIMEOUT
        while True:
            r = call(d, ["/usr/bin/touch", healed_marker])
            if r["status"] == "ok" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(r["status"], "ok", "the journal did not reopen: %s\n%s" % (r, d.log))
        self.assertTrue(os.path.exists(healed_marker))
        for m in full_markers:
            self.assertFalse(os.path.exists(m), m)
        self.assertTrue(d.proc.poll() is None, "the daemon died")

        d.stop()
        recovery = []
        for seg in sorted(glob.glob(os.path.join(d.state_dir, "journal", "*.ndjson"))):
            with open(seg) as f:
                for line in f:
                    ev = json.loads(line)
                    if ev["type"] == "recovery":
                        recovery.append(ev["payload"])
        reopened = [p for p in recovery if p.get("what") == "journal reopened after a write failure"]
        self.assertEqual(len(reopened), 1, recovery)
        self.assertEqual(reopened[0]["error"], "ENOSPC")
        self.assertGreaterEqual(reopened[0]["refused"], refused - 1, reopened[0])
        p = subprocess.run([cgtest.CALLGATE, "--state-dir", d.state_dir, "replay", "--all",
                            "--json"], capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout[-4000:] + p.stderr[-2000:])
        self.assertEqual(json.loads(p.stdout)["status"], "PASS")


if __name__ == "__main__":
    unittest.main()
