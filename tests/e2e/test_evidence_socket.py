# SPDX-License-Identifier: MIT
"""Evidence over the socket: the protocol's verdict, replay and log actions.

A peer reads the traces whose request the daemon recorded with its own uid
(SO_PEERCRED); an approver named by --approver-uid reads every trace; anyone
else's trace is answered exactly like a missing one, and not one byte of it
comes back. `callgate mcp` answers its verdict, replay and status tools from
these actions, so it needs nothing but the socket: here it runs as another
uid that cannot even list the daemon's state directory.

The tests run as root (the e2e suite does) and use uid 65534 (nobody) as the
other peer, on a socket opened to the nogroup group.
"""
import json
import os
import subprocess
import unittest
import uuid

import cgtest

NOBODY = 65534
MARK = "secret-marker-" + uuid.uuid4().hex[:8]  # only in the root peer's trace


def daemon(*flags):
    d = cgtest.Daemon(flags=["--socket-group", "nogroup", *flags])
    d.start()
    os.chmod(d.tmp, 0o755)        # nobody reaches the socket …
    os.chmod(d.state_dir, 0o700)  # … but not the state directory
    return d


def ask(d, req, uid=None):
    """One request on the agent socket, as root or as uid; (response, raw bytes)."""
    line = cgtest.encode(req)
    if uid is None:
        raw = cgtest.send_recv(d.socket, line)
    else:
        raw = cgtest.as_uid(uid, lambda: cgtest.send_recv(d.socket, line).decode()).encode()
    return cgtest.parse_response(raw), raw


def root_call(d):
    """A call made by root whose command line and output carry MARK; its trace id."""
    r, _ = ask(d, cgtest.make_request([["echo", MARK]], privileged=False))
    assert r["reply"]["code"] == "MCP-EXEC-S-001", r
    return r["reply"]["trace_id"]


def nobody_cli(d, *args):
    """callgate ARGS as nobody, who may use the socket and not read the state."""
    return subprocess.run(["runuser", "-u", "nobody", "--", cgtest.CALLGATE, "--socket", d.socket,
                           "--state-dir", d.state_dir, *args], capture_output=True, text=True,
                          timeout=60)


def nobody_gate(d):
    r, _ = ask(d, cgtest.make_request([["ls"]], action="gate", privileged=False), uid=NOBODY)
    assert r["reply"]["code"] == "MCP-GATE-S-001", r
    return r["reply"]["trace_id"]


class TestOwnTraces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def test_verdict_replay_log_of_own_trace(self):
        trace = root_call(self.d)
        v, _ = ask(self.d, {"action": "verdict", "trace_id": trace})
        self.assertEqual(v["reply"]["code"], "MCP-LOG-S-101", v)
        self.assertEqual(v["reply"]["data"]["verdict"]["decision"], "ALLOW")
        self.assertEqual(v["reply"]["data"]["verdict"]["trace_id"], trace)
        # verdict.json as sealed, byte for byte the same object.
        sealed = cgtest.package_file(self.d.state_dir, trace, "verdict.json")
        self.assertEqual(v["reply"]["data"]["verdict"], json.loads(sealed))
        rp, _ = ask(self.d, {"action": "replay", "trace_id": trace})
        self.assertEqual(rp["reply"]["code"], "MCP-LOG-S-102", rp)
        self.assertEqual(rp["reply"]["params"]["status"], "PASS")
        self.assertEqual([t["trace_id"] for t in rp["reply"]["data"]["traces"]], [trace])
        lg, _ = ask(self.d, {"action": "log", "trace_id": trace})
        self.assertEqual(lg["reply"]["code"], "MCP-LOG-S-103", lg)
        types = [e["type"] for e in lg["reply"]["data"]["events"]]
        self.assertEqual(types[0], "request")
        self.assertEqual(types[-1], "seal")
        self.assertIn("exec.finished", types)

    def test_the_cli_verdict_asks_the_daemon_when_the_state_is_not_ours(self):
        # ux-s38 #7: an agent's `callgate verdict TRACE` read only the state
        # directory, which is root's; the daemon serves its own traces.
        mine = nobody_gate(self.d)
        other = root_call(self.d)

        def cli(*args):
            return nobody_cli(self.d, "verdict", *args)
        r = cli(mine)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Trace:      " + mine, r.stdout)
        j = cli(mine, "--json")
        self.assertEqual(json.loads(j.stdout)["trace_id"], mine)
        r = cli(other)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("MCP-LOG-I-102", r.stderr)
        self.assertNotIn(MARK, r.stdout + r.stderr)

    def test_the_cli_log_asks_the_daemon_when_the_state_is_not_ours(self):
        # s44c L9: verdict and replay asked the daemon, log said only that the
        # journal could not be read: nobody but root could see what their
        # agent did.
        mine = nobody_gate(self.d)
        other = root_call(self.d)
        r = nobody_cli(self.d, "log")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(mine, r.stdout)
        self.assertNotIn(other, r.stdout)
        self.assertNotIn(MARK, r.stdout + r.stderr)
        j = nobody_cli(self.d, "log", "--json", "--trace", mine[:8])
        self.assertEqual([json.loads(l)["trace_id"] for l in j.stdout.splitlines()], [mine])

    def test_the_cli_replay_asks_the_daemon_when_the_state_is_not_ours(self):
        # ux-s40 L16: `verdict TRACE` asked the daemon, `replay TRACE` exited 66.
        mine = nobody_gate(self.d)
        other = root_call(self.d)

        def cli(*args):
            return nobody_cli(self.d, "replay", *args)
        r = cli(mine)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("PASS  as the daemon replayed it", r.stdout)
        self.assertIn("trace %s: PASS (sealed" % mine, r.stdout)
        self.assertEqual(json.loads(cli("--json", mine).stdout)["status"], "PASS")
        r = cli(other)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("MCP-LOG-I-102", r.stderr)
        self.assertNotIn(other, r.stdout)
        # --all is the journal's reader's alone: no fallback, the state's error.
        r = cli("--all")
        self.assertNotEqual(r.returncode, 0)
        self.assertNotIn("PASS", r.stdout)

    @unittest.skipIf(os.path.exists("/var/lib/callgate/journal"), "a state at the default path")
    def test_the_cli_verdict_asks_the_daemon_when_there_is_no_state_at_the_default(self):
        # ux-s39 M8: root, with the daemon's state elsewhere and no --state-dir,
        # got "no state directory to read" though the socket answers.
        other = root_call(self.d)
        env = {k: v for k, v in os.environ.items() if k != "CALLGATE_STATE_DIR"}
        r = subprocess.run([cgtest.CALLGATE, "--socket", self.d.socket, "verdict", other],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Trace:      " + other, r.stdout)

    def test_a_cwd_outside_names_only_the_peers_own_workspaces(self):
        # ux-s39 named the workspaces; s39c: every one, to any peer.
        r, _ = ask(self.d, cgtest.make_request([["ls"]], action="gate", privileged=False,
                                               cwd="/"), uid=NOBODY)
        self.assertEqual(r["reply"]["code"], "WA-RES-I-004", r)
        self.assertNotIn(self.d.workspace, r["reply"]["message"])
        r, _ = ask(self.d, cgtest.make_request([["ls"]], action="gate", privileged=False,
                                               cwd="/"))
        self.assertIn(os.path.realpath(self.d.workspace), r["reply"]["message"])  # root's

    def test_log_limit_keeps_the_newest(self):
        for _ in range(3):
            root_call(self.d)
        lg, _ = ask(self.d, {"action": "log", "limit": 5})
        data = lg["reply"]["data"]
        self.assertEqual(len(data["events"]), 5)
        self.assertTrue(data["truncated"])
        self.assertGreater(data["matched"], 5)
        seqs = [e["seq"] for e in data["events"]]
        self.assertEqual(seqs, sorted(seqs))

    def test_bad_requests_are_i_replies(self):
        for req, code in [({"action": "verdict"}, "MCP-LOG-I-101"),
                          ({"action": "replay", "trace_id": "../../etc"}, "MCP-LOG-I-101"),
                          ({"action": "verdict", "trace_id": ".x"}, "MCP-LOG-I-101"),
                          ({"action": "log", "limit": 0}, "MCP-VAL-I-001"),
                          ({"action": "log", "since": "yesterday"}, "MCP-VAL-I-001"),
                          ({"action": "verdict", "trace_id": str(uuid.uuid4())},
                           "MCP-LOG-I-102")]:
            r, _ = ask(self.d, req)
            self.assertEqual(r["reply"]["code"], code, (req, r))
            self.assertEqual(r["status"], "error")

    def test_another_uids_trace_never_comes_back(self):
        trace = root_call(self.d)
        mine = nobody_gate(self.d)
        missing = str(uuid.uuid4())
        for action in ("verdict", "replay"):
            r, raw = ask(self.d, {"action": action, "trace_id": trace}, uid=NOBODY)
            self.assertEqual(r["reply"]["code"], "MCP-LOG-I-102", r)
            self.assertNotIn(MARK.encode(), raw)
            # Indistinguishable from a trace that does not exist.
            m, _ = ask(self.d, {"action": action, "trace_id": missing}, uid=NOBODY)
            self.assertEqual(m["reply"]["code"], r["reply"]["code"])
            self.assertEqual(m["reply"]["message"].replace(missing, "ID"),
                             r["reply"]["message"].replace(trace, "ID"))
        lg, raw = ask(self.d, {"action": "log", "limit": 5000}, uid=NOBODY)
        self.assertEqual(lg["reply"]["code"], "MCP-LOG-S-103", lg)
        self.assertNotIn(MARK.encode(), raw)
        traces = {e["trace"] for e in lg["reply"]["data"]["events"]}
        self.assertNotIn(trace, traces)
        self.assertIn(mine, traces)
        lg, raw = ask(self.d, {"action": "log", "trace_id": trace}, uid=NOBODY)
        self.assertEqual(lg["reply"]["data"]["events"], [])
        # nobody reads its own; root, not an approver here, does not read nobody's.
        v, _ = ask(self.d, {"action": "verdict", "trace_id": mine}, uid=NOBODY)
        self.assertEqual(v["reply"]["code"], "MCP-LOG-S-101", v)
        v, _ = ask(self.d, {"action": "verdict", "trace_id": mine})
        self.assertEqual(v["reply"]["code"], "MCP-LOG-I-102", v)


class TestLogReadIsBounded(unittest.TestCase):
    """s44b F2: a log read built its whole answer in memory (two reads of
    one uid's large events took the daemon to 1.9 GB). It keeps the newest
    events whose lines fit a byte bound (16 MiB; a test-only knob here)."""

    def test_the_newest_that_fit_and_the_rest_counted(self):
        d = cgtest.Daemon(env={"CALLGATE_TEST_LOG_READ_BYTES": "6000"}).start()
        self.addCleanup(d.close)
        for _ in range(8):
            r, _ = ask(d, cgtest.make_request([["echo", "x" * 400]], privileged=False))
            self.assertEqual(r["reply"]["code"], "MCP-EXEC-S-001", r)
        last = r["reply"]["trace_id"]
        lg, _ = ask(d, {"action": "log", "limit": 5000})
        data = lg["reply"]["data"]
        self.assertTrue(data["truncated"], data["matched"])
        self.assertGreater(data["matched"], len(data["events"]))
        self.assertGreater(len(data["events"]), 0)
        size = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in data["events"])
        self.assertLessEqual(size, 6000 + 200 * len(data["events"]))  # key order, escapes
        seqs = [e["seq"] for e in data["events"]]
        self.assertEqual(seqs, sorted(seqs))
        # The newest are kept: the last call's events are among them.
        self.assertIn(last, {e["trace"] for e in data["events"]})


class TestApprover(unittest.TestCase):
    def test_configured_approver_reads_every_trace(self):
        d = daemon("--approver-uid", str(NOBODY))
        try:
            trace = root_call(d)
            v, raw = ask(d, {"action": "verdict", "trace_id": trace}, uid=NOBODY)
            self.assertEqual(v["reply"]["code"], "MCP-LOG-S-101", v)
            rp, _ = ask(d, {"action": "replay", "trace_id": trace}, uid=NOBODY)
            self.assertEqual(rp["reply"]["params"]["status"], "PASS", rp)
            lg, raw = ask(d, {"action": "log", "trace_id": trace}, uid=NOBODY)
            self.assertIn(MARK.encode(), raw)
            # Root is not an approver once approvers are named: its own traces only.
            mine = nobody_gate(d)
            r, _ = ask(d, {"action": "verdict", "trace_id": mine})
            self.assertEqual(r["reply"]["code"], "MCP-LOG-I-102", r)
        finally:
            d.close()


class TestMcpNeedsOnlyTheSocket(unittest.TestCase):
    def test_mcp_as_another_uid_with_only_the_socket(self):
        d = daemon()
        try:
            root_trace = root_call(d)
            msgs = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "gate", "arguments": {"argv": ["ls"],
                                                              "privileged": False}}}]
            # The bridge as nobody: it cannot read the state directory (0700 root).
            p = subprocess.Popen([cgtest.CALLGATE, "--socket", d.socket, "mcp"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, user=NOBODY, group=NOBODY,
                                 extra_groups=[], cwd="/")
            try:
                def call(i, name, args):
                    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i,
                                               "method": "tools/call",
                                               "params": {"name": name,
                                                          "arguments": args}}) + "\n").encode())
                    p.stdin.flush()
                    return json.loads(p.stdout.readline())["result"]
                g = call(1, "gate", msgs[0]["params"]["arguments"])
                trace = g["structuredContent"]["trace_id"]
                v = call(2, "verdict", {"trace_id": trace})
                self.assertFalse(v["isError"], v)
                self.assertEqual(v["structuredContent"]["decision"], "ALLOW")
                rp = call(3, "replay", {"trace_id": trace})
                self.assertFalse(rp["isError"], rp)
                self.assertEqual(rp["structuredContent"]["result"], "PASS")
                other = call(4, "verdict", {"trace_id": root_trace})
                self.assertTrue(other["isError"])
                self.assertEqual(other["structuredContent"]["reply"]["code"], "MCP-LOG-I-102")
                self.assertNotIn(MARK, json.dumps(other))
                st = call(5, "status", {})
                self.assertTrue(st["structuredContent"]["alive"], st)
                recent = st["structuredContent"]["recent"]
                self.assertEqual(recent[0]["trace_id"], trace, recent)
                self.assertNotIn(root_trace, json.dumps(recent))
            finally:
                p.stdin.close()
                p.wait(timeout=cgtest.DEFAULT_TIMEOUT)
                p.stdout.close()
                p.stderr.close()
        finally:
            d.close()


if __name__ == "__main__":
    unittest.main()
