# SPDX-License-Identifier: MIT
"""End-to-end tests of callgated's transport and lifecycle, with raw clients.

Each test talks to a real daemon on a temporary socket (cgtest.Daemon):
partial lines, oversize lines, trickling peers, the connection cap, 200
concurrent clients, the seed's example request, socket safety (modes, live
and stale sockets, the admin socket's owner check), and signals (SIGTERM
during a running call, SIGHUP with broken and changed policies).
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import cgtest

# The example request of seed 002, verbatim except "time", which must be
# fresh (the daemon refuses stale requests).
SEED_REQUEST = {
    "id": "550e8400-e29b-41d4-a716-446655440000",
    "host": "workstation.local",
    "session": "claude-code-project-alpha",
    "time": "2026-02-13T14:30:00Z",
    "pipeline": [["apt", "install", "nginx"]],
    "env": {"DEBIAN_FRONTEND": "noninteractive"},
    "reason": "Install nginx to set up a web server",
    "privileged": True,
    "forward_agent": False,
}

DEFAULT_POLICY = os.path.join(cgtest.SRCDIR, "etc", "callgate", "policy.yaml")


def reply_of(test, resp):
    """Every response carries a reply with a trace id: check and return it."""
    test.assertIn("reply", resp, resp)
    r = resp["reply"]
    test.assertTrue(r.get("trace_id"), "reply without trace_id: %r" % resp)
    return r


def wait_for(pred, timeout=cgtest.DEFAULT_TIMEOUT, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


class SharedDaemon(unittest.TestCase):
    """Tests that can share one daemon (short read deadline, default policy)."""

    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(read_timeout=1500).start()
        with open(os.path.join(cls.d.workspace, "hello.txt"), "w") as f:
            f.write("hi\n")

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def test_partial_line_then_close_is_missing_newline(self):
        raw = self.d.raw(b'{"pipeline":[["ls"]]', shut_wr=True)
        resp = cgtest.parse_response(raw)
        r = reply_of(self, resp)
        self.assertEqual(r["code"], "MCP-IO-I-001", resp)
        self.assertEqual(resp["status"], "error")
        self.assertEqual(resp["id"], "")

    def test_line_over_one_mib_is_too_long(self):
        raw = self.d.raw(b"x" * (cgtest.MAX_LINE + 1))
        resp = cgtest.parse_response(raw)
        self.assertEqual(reply_of(self, resp)["code"], "MCP-IO-I-002", resp)
        self.assertEqual(resp["status"], "error")

    def test_line_of_exactly_one_mib_is_read(self):
        # 1 MiB including the newline is the limit, not past it: the line is
        # decoded (and fails later for its content, not its length).
        req = cgtest.encode(cgtest.make_request([["ls"]], privileged=False))[:-1]
        pad = cgtest.MAX_LINE - 1 - len(req)
        line = req[:-1] + b" " * pad + b"}\n"
        self.assertEqual(len(line), cgtest.MAX_LINE)
        resp = cgtest.parse_response(self.d.raw(line))
        self.assertNotEqual(reply_of(self, resp)["code"], "MCP-IO-I-002", resp)
        self.assertEqual(resp["status"], "ok", resp)

    def test_an_unknown_action_lists_every_action_the_socket_takes(self):
        resp = self.d.request(cgtest.make_request([["ls"]], action="approve"))
        r = reply_of(self, resp)
        self.assertEqual(r["code"], "MCP-VAL-I-015", r)
        listed = re.search(r"expected (.*)\.$", r["message"]).group(1)
        actions = re.split(r", | or ", listed)
        self.assertEqual(set(actions), {"exec", "gate", "ping", "grant", "verdict", "replay",
                                        "log"}, r["message"])
        # Every one of them is an action the agent socket accepts.
        for a in actions:
            resp = self.d.request(cgtest.make_request([["ls"]], action=a))
            self.assertNotEqual(reply_of(self, resp)["code"], "MCP-VAL-I-015", (a, resp))

    def test_argument_too_long_to_judge_is_refused_by_name(self):
        # An argument a rule must judge as a path, longer than the policy's
        # path buffer: refused with its own code (not "adjudicator failed"),
        # and nothing runs: the file it would have created is absent.
        target = os.path.join(self.d.workspace, "made-by-long-arg")
        for n in (5000, 100000):
            arg = "a" * n
            resp = self.d.request(cgtest.make_request(
                [["touch", target, arg]], privileged=False))
            r = reply_of(self, resp)
            self.assertEqual((resp["status"], r["code"]), ("denied", "EN-GATE-D-005"), r)
            self.assertIn("argument-too-long", r["message"])
            self.assertNotIn("{", r["message"])
            self.assertFalse(os.path.exists(target))
        # Longer than execve takes (MAX_ARG_STRLEN): it could never start, so
        # the codec refuses it first, as a request to fix (not an E2BIG E reply).
        resp = self.d.request(cgtest.make_request(
            [["touch", target, "a" * 900000]], privileged=False))
        r = reply_of(self, resp)
        self.assertEqual((r["type"], r["code"]), ("I", "MCP-VAL-I-025"), r)
        self.assertEqual(r["params"]["field"], "pipeline[0][2]")
        self.assertFalse(os.path.exists(target))
        # Control: the same call with a short argument runs and makes it.
        resp = self.d.request(cgtest.make_request([["touch", target, "short"]],
                                                  privileged=False))
        self.assertEqual(resp["status"], "ok", resp)
        self.assertTrue(os.path.exists(target))

    def test_trickling_peer_hits_read_deadline(self):
        with self.d.connect() as s:
            start = time.monotonic()
            got = b""
            s.settimeout(1.0)
            for b in b'{"pipeline":[["ls"]],"privileged":false}\n':
                try:
                    s.sendall(bytes([b]))
                except (BrokenPipeError, ConnectionResetError):
                    break
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                got = chunk
                break
            s.settimeout(cgtest.DEFAULT_TIMEOUT)
            got += cgtest.recv_all(s)
            elapsed = time.monotonic() - start
        resp = cgtest.parse_response(got)
        self.assertEqual(reply_of(self, resp)["code"], "MCP-IO-E-001", resp)
        self.assertEqual(resp["reply"]["params"]["deadline_ms"], 1500)
        # The deadline is 1.5 s; the line would have taken ~40 s.
        self.assertLess(elapsed, 20)

    def test_200_concurrent_clients_each_get_one_line(self):
        # Its own daemon: the shared one's 1.5 s read deadline is for the
        # trickle test, and 200 client threads on a loaded 2-core machine
        # (ASan builds) can take longer than that between connect and send.
        with cgtest.Daemon(read_timeout=60000) as d:
            self._two_hundred(d)

    def _two_hundred(self, d):
        results, errors = [], []
        lock = threading.Lock()
        barrier = threading.Barrier(200)

        def client(i):
            try:
                if i % 2:
                    req = cgtest.make_request(None, action="ping")
                else:  # a refused call: privileged without an approver
                    req = cgtest.make_request([["ls"]])
                s = d.connect()
                barrier.wait(cgtest.DEFAULT_TIMEOUT)
                with s:
                    s.sendall(cgtest.encode(req))
                    raw = cgtest.recv_all(s)
                resp = cgtest.parse_response(raw)
                with lock:
                    results.append((i, req["id"], resp))
            except Exception as e:  # collected and reported below
                with lock:
                    errors.append("%d: %r" % (i, e))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [], d.log[-2000:])
        self.assertEqual(len(results), 200)
        for i, rid, resp in results:
            reply_of(self, resp)
            self.assertEqual(resp["id"], rid)
            if i % 2:
                self.assertEqual(resp["status"], "ok", resp)
            else:
                self.assertEqual(resp["status"], "denied", resp)

    def test_seed_example_request_is_denied_with_seed_shape(self):
        req = dict(SEED_REQUEST, time=cgtest.now_rfc3339())
        resp = self.d.request(req, timeout=120)
        r = reply_of(self, resp)
        self.assertEqual(resp["id"], SEED_REQUEST["id"])
        self.assertEqual(resp["status"], "denied", resp)
        self.assertEqual(r["type"], "D", resp)
        # Privileged by the seed's own default: a human must approve, and
        # none is configured, so the privilege rung refuses it.
        self.assertEqual(r["code"], "EN-EXEC-D-003", resp)
        self.assertEqual(r["message_key"], "PRIVILEGED_NEEDS_APPROVAL")
        self.assertIn('"privileged": false', r["message"])
        self.assertNotIn("stdout", resp)
        self.assertNotIn("stages", resp)

    def test_unprivileged_ls_runs_and_returns_base64_stdout(self):
        resp = self.d.request(cgtest.make_request([["ls"]], privileged=False))
        r = reply_of(self, resp)
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(r["type"], "S")
        self.assertEqual(len(resp["stages"]), 1)
        self.assertEqual(resp["stages"][0]["exit_code"], 0)
        self.assertIn(b"hello.txt", base64.b64decode(resp["stdout"]))

    def test_large_response_is_written_whole(self):
        # ~22 MiB of base64: far more than a socket buffer, so the daemon
        # must finish it across many EPOLLOUT wake-ups.
        req = cgtest.make_request([["head", "-c", "17000000", "/dev/zero"]], privileged=False)
        resp = self.d.request(req, timeout=120)
        self.assertEqual(resp["status"], "ok", resp.get("reply"))
        out = base64.b64decode(resp["stdout"])
        self.assertEqual(len(out), 16 * 1024 * 1024)
        self.assertEqual(out.count(b"\0"), len(out))
        self.assertIs(resp.get("stdout_truncated"), True)
        # ux-s41 L4: callgate run says so, with the cap, whatever the exit code.
        r = self.d.cli("run", "--no-privileged", "--", "head", "-c", "17000000", "/dev/zero")
        self.assertEqual(r.returncode, 0, r.stderr[-500:])
        self.assertEqual(len(r.stdout), 16 * 1024 * 1024)
        self.assertIn(b"stdout was cut at the runner's cap (16 MiB a stream", r.stderr)

    def test_half_close_after_the_line_still_gets_the_answer(self):
        # Shutting down the write side after the request is not withdrawal.
        raw = self.d.raw(cgtest.encode(cgtest.make_request([["ls"]], privileged=False)),
                         shut_wr=True)
        resp = cgtest.parse_response(raw)
        self.assertEqual(resp["status"], "ok", resp)

    def test_empty_connection_is_ignored_and_daemon_keeps_serving(self):
        for _ in range(5):
            self.d.connect().close()
        resp = self.d.request(cgtest.make_request(None, action="ping"))
        self.assertEqual(resp["status"], "ok")

    def test_a_ping_writes_no_evidence_but_an_invalid_one_is_recorded(self):
        # A ping is not a call (docs/protocol.md): a flood of them costs no
        # disk. A refused call after the pings shows the writer has caught up.
        pings = set()
        for _ in range(20):
            resp = self.d.request(cgtest.make_request(None, action="ping"))
            self.assertEqual(resp["status"], "ok")
            pings.add(resp["reply"]["trace_id"])
        stale = self.d.request(cgtest.make_request(None, action="ping",
                                                   time="2000-01-01T00:00:00Z"))
        self.assertEqual(reply_of(self, stale)["code"], "MCP-VAL-I-007", stale)
        last = self.d.request(cgtest.make_request([["rm", "-rf", "/"]], privileged=False))
        want = {stale["reply"]["trace_id"], last["reply"]["trace_id"]}
        deadline = time.monotonic() + 30
        while True:
            traces = [json.loads(l)["trace"] for l in cgtest.journal_lines(self.d.state_dir)]
            if want <= set(traces) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertLessEqual(want, set(traces))
        self.assertEqual(len(pings), 20)
        self.assertFalse(pings & set(traces))

    def test_socket_modes_are_owner_only(self):
        for p in (self.d.socket, self.d.admin_socket):
            st = os.stat(p)
            self.assertTrue(stat.S_ISSOCK(st.st_mode))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o600, p)

    def test_admin_ping_reports_policy_identity(self):
        resp = self.d.admin("ping")
        r = reply_of(self, resp)
        self.assertEqual(resp["status"], "ok")
        self.assertRegex(r["data"]["policy"]["sha256"], r"^[0-9a-f]{64}$")
        self.assertGreaterEqual(r["data"]["policy"]["generation"], 1)

    def test_threads_are_named_for_the_operator(self):
        task = "/proc/%d/task" % self.d.proc.pid
        names = {open(os.path.join(task, t, "comm")).read().strip()
                 for t in os.listdir(task)}
        for want in ("callgated", "cg-worker", "cg-deadline", "cg-writer", "cg-package"):
            self.assertIn(want, names)

    def test_admin_unknown_action_is_invalid(self):
        resp = self.d.admin("frobnicate")
        self.assertEqual(reply_of(self, resp)["code"], "MCP-APPR-I-004", resp)
        self.assertEqual(resp["status"], "error")

    def test_admin_socket_refuses_nobody_by_mode(self):
        def attempt():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.d.admin_socket)
            return "connected"
        with self.assertRaises(cgtest.DaemonError) as cm:
            cgtest.as_uid(65534, attempt)
        self.assertIn("PermissionError", str(cm.exception))

    def test_agent_socket_refuses_nobody_by_mode(self):
        def attempt():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(self.d.socket)
            return "connected"
        with self.assertRaises(cgtest.DaemonError) as cm:
            cgtest.as_uid(65534, attempt)
        self.assertIn("PermissionError", str(cm.exception))


class OwnDaemon(unittest.TestCase):
    """Tests that need their own daemon (flags, signals, sockets)."""

    def test_busy_at_the_connection_cap(self):
        with cgtest.Daemon(max_conns=2) as d:
            # A round trip first, so the startup probes are long closed.
            self.assertEqual(d.request(cgtest.make_request(None, action="ping"))["status"],
                             "ok")
            held = [d.connect(), d.connect()]
            time.sleep(0.2)
            try:
                resp = cgtest.parse_response(d.raw(b""))
                self.assertEqual(reply_of(self, resp)["code"], "MCP-IO-E-002", resp)
                self.assertEqual(resp["status"], "error")
                self.assertEqual(resp["reply"]["params"]["limit"], 2)
            finally:
                for h in held:
                    h.close()
            # Slots free up once the held connections close.
            wait_for(lambda: cgtest.parse_response(d.raw(cgtest.encode(
                cgtest.make_request(None, action="ping"))))["status"] == "ok",
                what="a free slot")

    def test_sigterm_during_running_call_answers_it_and_kills_child(self):
        with cgtest.Daemon() as d:
            marker = "30.%d" % os.getpid()  # a distinctive argv for pgrep
            req = cgtest.make_request([["sleep", marker]], privileged=False,
                                      timeout_ms=120000)
            box = {}

            def call():
                try:
                    box["raw"] = d.raw(cgtest.encode(req), timeout=60)
                except Exception as e:
                    box["err"] = e
            t = threading.Thread(target=call)
            t.start()
            wait_for(lambda: cgtest.pids_running("sleep", marker) or "raw" in box,
                     what="sleep to start")
            self.assertNotIn("raw", box, "answered before it ran: %r" % box.get("raw"))
            pids = cgtest.pids_running("sleep", marker)
            rc = d.stop(signal.SIGTERM)
            t.join(60)
            self.assertEqual(rc, 0, d.log)
            self.assertNotIn("err", box)
            resp = cgtest.parse_response(box["raw"])
            reply_of(self, resp)
            self.assertNotEqual(resp["status"], "ok", resp)
            for p in pids:
                wait_for(lambda: not cgtest.pid_alive(p), 10, "sleep to die")
            self.assertFalse(os.path.exists(d.socket), "socket left behind")
            self.assertFalse(os.path.exists(d.admin_socket), "admin socket left behind")

    def test_sigint_stops_cleanly_and_removes_sockets(self):
        with cgtest.Daemon() as d:
            self.assertEqual(d.stop(signal.SIGINT), 0, d.log)
            self.assertIn("SIGINT", d.log)
            self.assertFalse(os.path.exists(d.socket))
            self.assertFalse(os.path.exists(d.admin_socket))

    def test_client_disconnect_cancels_running_call(self):
        with cgtest.Daemon() as d:
            marker = "31.%d" % os.getpid()
            req = cgtest.make_request([["sleep", marker]], privileged=False,
                                      timeout_ms=120000)
            s = d.connect()
            s.sendall(cgtest.encode(req))
            wait_for(lambda: cgtest.pids_running("sleep", marker), what="sleep to start")
            pids = cgtest.pids_running("sleep", marker)
            s.close()
            for p in pids:
                wait_for(lambda: not cgtest.pid_alive(p), 15, "sleep to be cancelled")
            self.assertEqual(d.request(cgtest.make_request(None, action="ping"))["status"],
                             "ok")

    def test_sighup_broken_policy_keeps_old_and_says_why(self):
        with open(DEFAULT_POLICY) as f:
            good = f.read()
        with cgtest.Daemon(policy_text=good) as d:
            before = d.admin("ping")["reply"]["data"]["policy"]
            with open(d.policy_path, "w") as f:
                f.write("version: 1\nrules: [ this is not yaml\n")
            mark = len(d.log)
            d.send_signal(signal.SIGHUP)
            log = d.wait_log("SIGHUP reload", start=mark)
            self.assertIn("failed", log[mark:])
            self.assertIn("MCP-CFG-E-001", log[mark:])
            after = d.admin("ping")["reply"]["data"]["policy"]
            self.assertEqual(after["sha256"], before["sha256"])
            self.assertEqual(after["generation"], before["generation"])
            # And the old policy still decides.
            resp = d.request(cgtest.make_request([["ls"]], privileged=False))
            self.assertEqual(resp["status"], "ok", resp)
            # ping says the edit did not load (it showed only the old policy: s36 walk) ...
            out = d.cli("ping").stdout.decode()
            self.assertIn("LAST RELOAD FAILED", out)
            self.assertIn("MCP-CFG-E-001", out)
            self.assertEqual(d.admin("ping")["reply"]["data"]["reload_failed"]["code"],
                             "MCP-CFG-E-001")
            # ... until a reload succeeds.
            with open(d.policy_path, "w") as f:
                f.write(good)
            mark = len(d.log)
            d.send_signal(signal.SIGHUP)
            d.wait_log("SIGHUP reload", start=mark)
            self.assertNotIn("LAST RELOAD FAILED", d.cli("ping").stdout.decode())

    def test_a_signed_policy_is_not_rolled_back(self):
        # An older signed policy and its .sig, copied back and reloaded,
        # re-allowed what the newer one denied (s36 attack): signed policies
        # carry a serial, and the daemon only goes forward.
        tmp = tempfile.mkdtemp(prefix="cg-sig-", dir="/tmp")
        key, pub = os.path.join(tmp, "k.pem"), os.path.join(tmp, "k.pub")
        subprocess.run([cgtest.CALLGATE, "policy", "keygen", key, pub], check=True,
                       capture_output=True)

        def signed(name, serial, date_decision):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write("version: 1\nserial: %d\nrules:\n"
                        "  - { id: date, decision: %s, why: test, match: { exe: [date] } }\n"
                        % (serial, date_decision))
            subprocess.run([cgtest.CALLGATE, "policy", "sign", "--key", key, path],
                           check=True, capture_output=True)
            return path

        old = signed("old.yaml", 1, "allow")
        new = signed("new.yaml", 2, "deny")
        same = signed("same.yaml", 2, "allow")
        live = os.path.join(tmp, "policy.yaml")

        def put(src):
            shutil.copy(src, live)
            shutil.copy(src + ".sig", live + ".sig")

        def date_status(d):
            return d.request(cgtest.make_request([["date"]], privileged=False))["status"]

        def reload(d, want):
            mark = len(d.log)
            d.send_signal(signal.SIGHUP)
            log = d.wait_log("SIGHUP reload", start=mark)
            self.assertIn(want, log[mark:])

        try:
            put(old)
            state = os.path.join(tmp, "state")
            d = cgtest.Daemon(policy=live, flags=["--policy-pubkey", pub])
            d.state_dir = state
            d.start()
            try:
                self.assertEqual(date_status(d), "ok")
                put(new)
                reload(d, "succeeded")
                self.assertEqual(date_status(d), "denied")
                for back in (old, same):  # an older serial; the same serial, other bytes
                    put(back)
                    reload(d, "failed")
                    self.assertEqual(date_status(d), "denied", back)
                self.assertIn("serial", d.log)
            finally:
                d.close()
            # Nor across a restart: the accepted serial is kept in the state dir.
            put(old)
            d2 = cgtest.Daemon(policy=live, flags=["--policy-pubkey", pub])
            d2.state_dir = state
            p = d2.spawn()
            p.wait(timeout=30)
            self.assertNotEqual(p.returncode, 0, d2.log)
            self.assertIn("lower than one already accepted", d2.log)
            d2.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_sighup_changed_policy_changes_identity(self):
        with open(DEFAULT_POLICY) as f:
            good = f.read()
        with cgtest.Daemon(policy_text=good) as d:
            before = d.admin("ping")["reply"]["data"]["policy"]
            # A call in flight across the reload keeps its generation.
            marker = "2.%d" % os.getpid()
            box = {}

            def call():
                req = cgtest.make_request([["sleep", marker]], privileged=False)
                box["resp"] = d.request(req, timeout=60)
            t = threading.Thread(target=call)
            t.start()
            wait_for(lambda: cgtest.pids_running("sleep", marker) or "resp" in box,
                     what="sleep to start")
            with open(d.policy_path + ".new", "w") as f:
                f.write(good + "\n# changed\n")
            os.rename(d.policy_path + ".new", d.policy_path)
            mark = len(d.log)
            d.send_signal(signal.SIGHUP)
            log = d.wait_log("SIGHUP reload", start=mark)
            self.assertIn("succeeded", log[mark:])
            after = d.admin("ping")["reply"]["data"]["policy"]
            self.assertNotEqual(after["sha256"], before["sha256"])
            self.assertGreater(after["generation"], before["generation"])
            t.join(60)
            resp = box["resp"]
            self.assertEqual(resp["status"], "ok", resp)
            self.assertEqual(resp["reply"]["data"]["policy"]["sha256"], before["sha256"])
            resp = d.request(cgtest.make_request([["true"]], privileged=False))
            self.assertEqual(resp["reply"]["data"]["policy"]["sha256"], after["sha256"])

    def test_admin_reload_and_stop(self):
        d = cgtest.Daemon().start()
        try:
            resp = d.admin("reload")
            self.assertEqual(resp["status"], "ok", resp)
            self.assertEqual(reply_of(self, resp)["code"], "MCP-CFG-S-001")
            resp = d.admin("stop")
            self.assertEqual(resp["status"], "ok", resp)
            d.proc.wait(cgtest.DEFAULT_TIMEOUT)
            self.assertEqual(d.proc.returncode, 0, d.log)
        finally:
            d.close()

    def test_admin_socket_checks_peer_uid(self):
        # Even if the mode were loosened, SO_PEERCRED keeps other uids out.
        with cgtest.Daemon() as d:
            os.chmod(d.admin_socket, 0o666)

            def attempt():
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(10)
                    s.connect(d.admin_socket)
                    try:  # the daemon may refuse before reading anything
                        s.sendall(b'{"action":"stop"}\n')
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return cgtest.recv_all(s).decode()
            raw = cgtest.as_uid(65534, attempt)
            resp = cgtest.parse_response(raw.encode())
            self.assertEqual(reply_of(self, resp)["code"], "MCP-IO-E-003", resp)
            self.assertIsNone(d.proc.poll(), "the daemon stopped for another uid")

    def test_socket_group_lets_members_connect(self):
        import grp
        group = grp.getgrgid(65534).gr_name
        with cgtest.Daemon(flags=["--socket-group", group]) as d:
            st = os.stat(d.socket)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
            self.assertEqual(st.st_gid, 65534)
            self.assertEqual(stat.S_IMODE(os.stat(d.admin_socket).st_mode), 0o600)
            line = cgtest.encode(cgtest.make_request(None, action="ping"))

            def attempt():
                return cgtest.send_recv(d.socket, line, 10).decode()
            resp = cgtest.parse_response(cgtest.as_uid(65534, attempt).encode())
            self.assertEqual(resp["status"], "ok", resp)

    def test_live_socket_is_not_clobbered(self):
        with cgtest.Daemon() as d:
            second = cgtest.Daemon(socket_path=d.socket, admin=False)
            try:
                second.spawn()
                rc = second.proc.wait(cgtest.DEFAULT_TIMEOUT)
                self.assertEqual(rc, 1)
                self.assertIn("already running", second.log)
            finally:
                second.close()
            self.assertEqual(d.request(cgtest.make_request(None, action="ping"))["status"],
                             "ok")

    def test_a_second_daemon_beside_the_first_says_which_socket_and_makes_no_state(self):
        # ux-s40 M7: a second daemon with its own --socket in the same
        # directory stopped at the default admin.sock, after it had made a
        # state directory (and a signing key before that).
        with cgtest.Daemon(admin=True) as d:
            second = cgtest.Daemon(socket_path=os.path.join(os.path.dirname(d.admin_socket),
                                                            "second.sock"), admin=False)
            try:
                second.spawn()
                self.assertEqual(second.proc.wait(cgtest.DEFAULT_TIMEOUT), 1)
                self.assertIn("admin socket %s is in use" % d.admin_socket, second.log)
                self.assertIn("give this daemon --admin-socket PATH", second.log)
                self.assertFalse(os.path.exists(second.state_dir))
            finally:
                second.close()
            self.assertEqual(d.request(cgtest.make_request(None, action="ping"))["status"],
                             "ok")

    def test_socket_of_another_listener_is_not_clobbered(self):
        d = cgtest.Daemon(admin=False)
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            other.bind(d.socket)
            other.listen(4)
            d.spawn()
            self.assertEqual(d.proc.wait(cgtest.DEFAULT_TIMEOUT), 1)
            self.assertIn("already", d.log)
            self.assertTrue(stat.S_ISSOCK(os.lstat(d.socket).st_mode))
        finally:
            other.close()
            d.close()

    def test_stale_socket_is_replaced(self):
        d = cgtest.Daemon(admin=False)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(d.socket)
            s.close()  # the file stays; nobody listens: stale
            d.start()
            self.assertIn("stale", d.log)
            self.assertEqual(d.request(cgtest.make_request(None, action="ping"))["status"],
                             "ok")
        finally:
            d.close()

    def test_regular_file_at_socket_path_is_refused(self):
        d = cgtest.Daemon(admin=False)
        try:
            with open(d.socket, "w") as f:
                f.write("precious\n")
            d.spawn()
            self.assertEqual(d.proc.wait(cgtest.DEFAULT_TIMEOUT), 1)
            self.assertIn("not a socket", d.log)
            with open(d.socket) as f:
                self.assertEqual(f.read(), "precious\n")
        finally:
            d.close()

    def test_bad_flags_exit_64_with_one_line(self):
        # EX_USAGE: the unit does not restart the daemon for it (exit 1 is a
        # start-up failure a restart may mend).
        d = cgtest.Daemon(flags=["--max-conns", "zero"])
        try:
            d.spawn()
            self.assertEqual(d.proc.wait(cgtest.DEFAULT_TIMEOUT), 64)
            self.assertIn("--max-conns", d.log)
        finally:
            d.close()

    def test_version_and_help(self):
        import subprocess
        r = subprocess.run([cgtest.CALLGATED, "--version"], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"callgated", r.stdout)
        r = subprocess.run([cgtest.CALLGATED, "--help"], capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--read-timeout", r.stdout)


if __name__ == "__main__":
    unittest.main()


class WorkspaceRequired(unittest.TestCase):
    """The root or a system directory is never a workspace: every path below
    a workspace is the agent's (its own file tools are judged by it)."""

    def start(self, cwd, *flags):
        import subprocess
        import tempfile
        tmp = tempfile.mkdtemp(prefix="cg-ws-")
        self.addCleanup(__import__("shutil").rmtree, tmp, True)
        sock = os.path.join(tmp, "cg.sock")
        p = subprocess.run([cgtest.CALLGATED, "--socket", sock, "--admin-socket",
                            os.path.join(tmp, "admin.sock"), "--state-dir",
                            os.path.join(tmp, "state"), "--log", "stderr", *flags],
                           cwd=cwd, capture_output=True, text=True, timeout=30)
        return p, sock

    def test_a_daemon_started_in_the_root_without_a_workspace_does_not_start(self):
        # As the systemd unit starts it (cwd /) when no drop-in names one.
        p, sock = self.start("/")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("WA-RES-E-002", p.stderr)
        self.assertIn("Workspace '/'", p.stderr)
        self.assertFalse(os.path.exists(sock))

    def test_system_directories_are_refused(self):
        for ws in ("/", "/home", "/etc", "/usr", "/tmp", "/root", "/usr/local", "/var/lib",
                   "/etc/cron.d", "/srv", "/home/.."):
            p, sock = self.start("/", "--workspace", ws)
            self.assertNotEqual(p.returncode, 0, ws)
            self.assertIn("WA-RES-E-002", p.stderr, ws)
            self.assertFalse(os.path.exists(sock), ws)
            # ux-s41b L11: said before any state was made.
            self.assertFalse(os.path.exists(os.path.join(os.path.dirname(sock), "state")), ws)

    def test_a_directory_that_holds_a_home_is_refused(self):
        # s42a F2: --workspace /data with homes in /data/users: a call wrote
        # the home's ~/.config/git/config and ~/.bash_aliases, and the
        # developer's git status and bash ran them.
        base = tempfile.mkdtemp(prefix="cg-homes-")
        self.addCleanup(shutil.rmtree, base, True)
        home = os.path.join(base, "users", "dev")
        os.makedirs(home)
        user = "cgabove%d" % os.getpid()
        subprocess.run(["useradd", "-M", "-d", home, user], check=True)
        self.addCleanup(subprocess.run, ["userdel", user], capture_output=True)
        for ws in (base, os.path.join(base, "users")):
            p, sock = self.start("/", "--workspace", ws)
            self.assertNotEqual(p.returncode, 0, ws)
            self.assertIn("holds a user's home", p.stderr, ws)
            self.assertFalse(os.path.exists(sock), ws)

    def test_a_homes_dot_directories_are_refused(self):
        home = tempfile.mkdtemp(prefix="cg-home-")
        self.addCleanup(shutil.rmtree, home, True)
        for sub in (".config", ".local/bin", ".config/systemd/user"):
            os.makedirs(os.path.join(home, sub), exist_ok=True)
        os.makedirs(os.path.join(home, "src/.hidden"))
        user = "cgdot%d" % os.getpid()
        subprocess.run(["useradd", "-M", "-d", home, user], check=True)
        self.addCleanup(subprocess.run, ["userdel", user], capture_output=True)
        for ws in (".config", ".local/bin", ".config/systemd/user"):
            p, sock = self.start("/", "--workspace", os.path.join(home, ws))
            self.assertNotEqual(p.returncode, 0, ws)
            self.assertIn("dot-directories", p.stderr, ws)
            self.assertFalse(os.path.exists(sock), ws)
        # A project below the home, even a dotted one inside it, is a workspace.
        sock = os.path.join(home, "cg.sock")
        p = subprocess.Popen([cgtest.CALLGATED, "--socket", sock, "--state-dir",
                              os.path.join(home, "state"), "--log", "stderr",
                              "--workspace", os.path.join(home, "src/.hidden")],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            cgtest.wait_listening(sock, 30, p)
        finally:
            p.terminate()
            p.wait(timeout=30)


class StateAndSocketOwnership(unittest.TestCase):
    """A state directory or a socket directory another user made or can change
    is refused before the daemon writes anything there: links planted in it
    would take root's writes, a key planted in it would sign the evidence, a
    socket swapped for a link would have root chmod the link's target
    (attack s38b F1, F2)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cg-own-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.ws = os.path.join(self.tmp, "ws")
        os.mkdir(self.ws)
        self.canary = os.path.join("/etc", "cg-own-canary-%d" % os.getpid())
        with open(self.canary, "w") as f:
            f.write("ORIGINAL\n")
        os.chmod(self.canary, 0o600)
        self.addCleanup(os.unlink, self.canary)

    def start(self, state, sock, *flags):
        p = subprocess.Popen([cgtest.CALLGATED, "--socket", sock, "--state-dir", state,
                              "--workspace", self.ws, "--log", "stderr", *flags],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.terminate()
            out, err = p.communicate(timeout=30)
            self.fail("the daemon started: " + err[-2000:])
        return p.returncode, err

    def as_nobody(self, path, *argv):
        os.makedirs(path)
        os.chown(path, cgtest.NOBODY if hasattr(cgtest, "NOBODY") else 65534, -1)
        for a in argv:
            subprocess.run(["runuser", "-u", "nobody", "--", *a], check=True)

    def test_a_state_directory_another_user_made_is_refused(self):
        state = os.path.join(self.tmp, "state")
        self.as_nobody(state, ["ln", "-s", self.canary, os.path.join(state,
                                                                     "checkpoint.note.tmp")],
                       ["ln", "-s", self.canary, os.path.join(state, "checkpoints.ndjson")],
                       ["mkdir", "-m", "0755", os.path.join(state, "keys")])
        rc, err = self.start(state, os.path.join(self.tmp, "cg.sock"))
        self.assertNotEqual(rc, 0)
        self.assertIn("owned by another user", err)
        with open(self.canary) as f:
            self.assertEqual(f.read(), "ORIGINAL\n")
        self.assertEqual(os.stat(self.canary).st_mode & 0o777, 0o600)
        self.assertFalse(os.path.exists(os.path.join(state, "journal")))

    def test_nothing_is_made_through_another_users_link(self):
        # review-s38 L8: the state directory was made before it was checked,
        # so root made directories wherever a user's link pointed.
        target = tempfile.mkdtemp(prefix="cg-own-target-", dir="/root")
        self.addCleanup(shutil.rmtree, target, True)
        udir = os.path.join(self.tmp, "u")
        self.as_nobody(udir, ["ln", "-s", target, os.path.join(udir, "l")])
        rc, err = self.start(os.path.join(udir, "l", "state"), os.path.join(self.tmp, "cg.sock"))
        self.assertNotEqual(rc, 0)
        self.assertIn("owned by another user", err)
        self.assertEqual(os.listdir(target), [])

    def test_a_state_directory_below_one_others_can_write_is_refused(self):
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)  # no sticky bit: anyone renames anything here
        rc, err = self.start(os.path.join(shared, "state"), os.path.join(self.tmp, "cg.sock"))
        self.assertNotEqual(rc, 0)
        self.assertIn("writable by other users", err)

    def test_a_socket_directory_another_user_owns_is_refused(self):
        sockdir = os.path.join(self.tmp, "run")
        self.as_nobody(sockdir)
        rc, err = self.start(os.path.join(self.tmp, "state"), os.path.join(sockdir, "cg.sock"),
                             "--socket-group", "nogroup")
        self.assertNotEqual(rc, 0)
        self.assertIn("refusing the socket", err)
        self.assertFalse(os.path.exists(os.path.join(sockdir, "cg.sock")))

    def test_a_key_of_another_users_making_is_refused(self):
        state = os.path.join(self.tmp, "state")
        os.makedirs(os.path.join(state, "keys"))
        os.chmod(state, 0o700)
        key = os.path.join(state, "keys", "evidence.key")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key],
                       check=True, capture_output=True)
        os.chmod(key, 0o600)
        os.chown(key, 65534, -1)
        rc, err = self.start(state, os.path.join(self.tmp, "cg.sock"))
        self.assertNotEqual(rc, 0)
        self.assertIn("owned by uid 65534", err)

    def test_the_cli_sends_no_call_to_another_users_socket(self):
        # s38c: a user who took a socket path in /tmp first would read the
        # calls of everyone who uses it, and answer them as it liked.
        sq = os.path.join(self.tmp, "sq")
        self.as_nobody(sq)
        os.chmod(sq, 0o777)
        sock = os.path.join(sq, "cg.sock")
        srv = subprocess.Popen(["runuser", "-u", "nobody", "--", "python3", "-c",
                                "import socket, os, sys\n"
                                "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])\n"
                                "os.chmod(sys.argv[1], 0o777); s.listen(4); print('up', flush=True)\n"
                                "c, _ = s.accept(); d = c.recv(65536)\n"
                                "print('GOT', len(d), flush=True)\n", sock],
                               stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(srv.stdout.readline().strip(), "up")
            r = subprocess.run(["runuser", "-u", "daemon", "--", cgtest.CALLGATE, "--socket",
                                sock, "run", "--", "true"], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 69, r.stderr)
            self.assertIn("is served by uid 65534, neither root nor you", r.stderr)
        finally:
            srv.kill()
            out, _ = srv.communicate(timeout=30)
        self.assertNotRegex(out, r"GOT [1-9]")  # the connection carried no call

    def test_a_non_root_daemon_takes_no_socket_group(self):
        sockdir = os.path.join(self.tmp, "nb")
        self.as_nobody(sockdir)
        r = subprocess.run(["runuser", "-u", "nobody", "--", cgtest.CALLGATED, "--socket",
                            os.path.join(sockdir, "cg.sock"), "--state-dir",
                            os.path.join(sockdir, "state"), "--workspace", sockdir,
                            "--socket-group", "nogroup"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn("--socket-group needs a daemon run as root", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(sockdir, "cg.sock")))


class LogReaderGone(unittest.TestCase):
    """The daemon's stderr reader going away (a log pipe closed) makes the
    next per-call log line EPIPE, not a SIGPIPE that ends the daemon: any
    client can cause a log line."""

    def test_daemon_outlives_its_log_reader(self):
        import shutil
        import subprocess
        import tempfile
        tmp = tempfile.mkdtemp(prefix="cg-logpipe-", dir="/tmp")
        self.addCleanup(shutil.rmtree, tmp, True)
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        sock = os.path.join(tmp, "cg.sock")
        p = subprocess.Popen([cgtest.CALLGATED, "--socket", sock, "--state-dir",
                              os.path.join(tmp, "state"), "--workspace", ws, "--log", "stderr"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            cgtest.wait_listening(sock, 30, p)
            p.stderr.close()  # the log's reader is gone
            for _ in range(3):
                s = cgtest.connect(sock, 30)
                s.sendall(cgtest.encode(cgtest.make_request(action="ping")))
                resp = cgtest.parse_response(cgtest.recv_all(s))
                s.close()
                self.assertEqual(resp["status"], "ok", resp)
            time.sleep(0.2)
            self.assertIsNone(p.poll(), "the daemon died writing its log")
        finally:
            p.terminate()
            p.wait(timeout=30)
