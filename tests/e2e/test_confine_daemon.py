# SPDX-License-Identifier: MIT
"""DEGRADE through the real daemon: a policy's constraints reach the kernel.

The same structural checks as test_sandbox.py, but the constraint sets come
from a policy file and the command is run by callgated: writes outside the
workspace fail with EACCES, net: none cannot reach the daemon's loopback,
the deadline kills a setsid grandchild, and the reply data carries the
confinement report (Landlock ABI, paths, downgrades).
"""
import base64
import os
import socket
import time
import unittest

import cgtest

PY = os.path.realpath("/usr/bin/python3") if os.path.exists("/usr/bin/python3") else None
SH = os.path.realpath("/bin/sh")

PROBE = r"""
import errno, os, socket, sys
for arg in sys.argv[1:]:
    name, expr = arg.split("=", 1)
    try:
        exec(expr)
        print(name, "OK", flush=True)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"""

POLICY = f"""
version: 1
rules:
  - id: py-confined
    decision: degrade
    why: python runs confined to the workspace, without network
    match: {{ exe: ["{PY}"] }}
    constraints:
      read: [/]
      write: ["${{workspace}}"]
      net: none
      limits: {{ nproc: 64 }}
  - id: sh-short-deadline
    decision: degrade
    why: shell with a short deadline
    match: {{ exe: ["{SH}"] }}
    constraints: {{ read: [/], write: ["${{workspace}}"], timeout_ms: 1500 }}
"""


def pid_running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@unittest.skipUnless(PY, "needs /usr/bin/python3")
class ConfinedByPolicy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(policy_text=POLICY).start()
        cls.outside = os.path.join(cls.d.tmp, "outside")
        os.makedirs(cls.outside, exist_ok=True)
        cls.listener = socket.socket()
        cls.listener.bind(("127.0.0.1", 0))
        cls.listener.listen(8)
        # Arguments may not hold newlines (MCP-VAL-I-012): the probe is a file.
        cls.probe = os.path.join(cls.d.tmp, "probe.py")
        with open(cls.probe, "w") as f:
            f.write(PROBE)

    @classmethod
    def tearDownClass(cls):
        cls.listener.close()
        cls.d.close()

    def run_probe(self, **ops):
        argv = [PY, self.probe] + [f"{k}={v}" for k, v in ops.items()]
        resp = self.d.request(cgtest.make_request([argv], privileged=False), timeout=60)
        self.assertEqual(resp["status"], "ok", resp)
        out = base64.b64decode(resp.get("stdout", "")).decode()
        res = dict(line.split(" ", 1) for line in out.splitlines())
        return resp, res

    def test_degrade_confines_writes_and_network(self):
        port = self.listener.getsockname()[1]
        resp, res = self.run_probe(
            inside=f"open({os.path.join(self.d.workspace, 'made-inside')!r}, 'w')",
            outside=f"open({os.path.join(self.outside, 'x')!r}, 'w')",
            connect=f"socket.create_connection(('127.0.0.1', {port}), timeout=5)")
        self.assertEqual(res, {"inside": "OK", "outside": "EACCES", "connect": "ECONNREFUSED"},
                         resp)
        self.assertTrue(os.path.exists(os.path.join(self.d.workspace, "made-inside")))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "x")))

    def test_reply_data_carries_the_confinement_report(self):
        resp, _ = self.run_probe(nothing="None")
        conf = resp["reply"].get("data", {}).get("confinement")
        self.assertIsNotNone(conf, resp["reply"])
        self.assertTrue(conf["confined"])
        self.assertGreaterEqual(conf["landlock"]["abi"], 1)
        self.assertTrue(conf["landlock"]["fs"])
        self.assertEqual(conf["network"]["mode"], "none")
        self.assertEqual(conf["limits"], {"nproc": 64})
        self.assertEqual(conf["downgraded"], [])
        self.assertIn({"path": os.path.realpath(self.d.workspace), "access": "write", "set": 0},
                      [dict(p, path=os.path.realpath(p["path"])) for p in conf["paths"]])

    def test_deadline_from_constraints_kills_setsid_grandchild(self):
        pidfile = os.path.join(self.d.workspace, "gc.pid")
        t0 = time.monotonic()
        resp = self.d.request(cgtest.make_request(
            [[SH, "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & sleep 60"]],
            privileged=False), timeout=60)
        self.assertEqual(resp["status"], "timeout", resp)
        self.assertLess(time.monotonic() - t0, 30)
        with open(pidfile) as f:
            pid = int(f.read())
        for _ in range(200):
            if not pid_running(pid):
                break
            time.sleep(0.05)
        self.assertFalse(pid_running(pid), "setsid grandchild outlived the deadline")


if __name__ == "__main__":
    unittest.main()
