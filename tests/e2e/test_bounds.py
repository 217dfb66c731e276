# SPDX-License-Identifier: MIT
"""Bounds and fairness (issue 14), judged by effect: counts, never times.

Per-uid connection caps, the per-response and daemon-wide output limits, the
idle (not total) write deadline with a cut the client can see, one uid's
flood not holding another uid's call, and evidence back-pressure that turns
calls away instead of dropping events (with the test-only knobs of
docs/limits.md).
"""
import base64
import grp
import json
import os
import random
import re
import signal
import shutil
import socket
import stat
import subprocess
import threading
import time
import unittest
import uuid

import cgtest

NOBODY = 65534
BIG = [["seq", "1", "150000"]]  # about 1.3 MB of response


def line(req):
    return cgtest.encode(req)


def code_of(resp):
    return resp.get("reply", {}).get("code")


# One request over the socket from a child process of its own, exec'd (not
# cgtest.as_uid's bare fork, whose result pipe every other thread's fork would
# also hold open, so a quick answer would wait for the slow ones): argv[1] the
# socket, argv[2] the request line; prints the reply code.
CLIENT = ("import json, socket, sys\n"
          "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
          "s.sendall(sys.argv[2].encode()); b = b''\n"
          "while not b.endswith(b'\\n'):\n"
          "    c = s.recv(65536)\n"
          "    if not c: break\n"
          "    b += c\n"
          "print(json.loads(b)['reply']['code'])\n")


def nobody_flags():
    return ["--socket-group", grp.getgrgid(NOBODY).gr_name]


def backlog_burst(d, n_root):
    """With the daemon stopped (SIGSTOP), root connects n_root times and then
    nobody once, each sending a refused call, so that all of them wait in the
    listening socket's backlog; then the daemon resumes. Returns root's
    responses (in connection order) and nobody's, parsed."""
    ready_r, ready_w = os.pipe()
    out = []

    def refused():
        return line(cgtest.make_request([["rm", "-rf", "/"]]))

    def nobody_call():
        s = cgtest.connect(d.socket, 60)
        s.sendall(refused())
        os.write(ready_w, b"x")  # in the backlog, behind root's
        return cgtest.parse_response(cgtest.recv_all(s))
    d.proc.send_signal(signal.SIGSTOP)
    socks = []
    try:
        for _ in range(n_root):
            s = cgtest.connect(d.socket, 60)
            s.sendall(refused())
            socks.append(s)
        t = threading.Thread(target=lambda: out.append(cgtest.as_uid(NOBODY, nobody_call)))
        t.start()
        if os.read(ready_r, 1) != b"x":
            raise cgtest.DaemonError("nobody's call was not sent")
    finally:
        d.proc.send_signal(signal.SIGCONT)
    root = []
    for s in socks:
        root.append(cgtest.parse_response(cgtest.recv_all(s)))
        s.close()
    t.join(60)
    os.close(ready_r)
    os.close(ready_w)
    return root, out[0] if out else None


PY_POLICY = """
version: 1
rules:
  - id: py
    decision: degrade
    why: the output-total test
    match:
      exe: [python3]
    constraints:
      read: [/]
      write: ["${workspace}"]
"""


class AnEventPastTheLineBound(unittest.TestCase):
    """s44b F1: one gate request of 240 file actions on 4 KB emoji paths
    through a workspace link (each action copied as given and resolved, each
    emoji six bytes as a \\u pair) made one journal line past the 4 MiB bound;
    the writer took it for a failed disk and refused every uid's calls while
    it healed, dropping the answered refusals of its batch. The largest
    members of such an event are now stand-ins with their size and hash."""

    def test_it_is_recorded_in_bounds_and_nothing_else_fails(self):
        with cgtest.Daemon() as d:
            ws = d.workspace
            deep = os.path.join(ws, "e", *(["\U0001F600" * 63] * 15))
            os.makedirs(deep)
            os.symlink("e", os.path.join(ws, "L"))
            through = os.path.join(ws, "L", *(["\U0001F600" * 63] * 15))
            acts = [{"action_type": "write", "tool": "Write", "resource": "%s/f%d" % (through, i)}
                    for i in range(240)]
            req = cgtest.make_request(None, action="gate", privileged=False, actions=acts)
            raw = json.dumps(req, ensure_ascii=False).encode() + b"\n"  # under 1 MiB as UTF-8
            r = cgtest.parse_response(d.raw(raw, timeout=120))
            self.assertEqual(code_of(r), "MCP-GATE-S-001", r)
            trace = r["reply"]["trace_id"]
            # Another call right after is answered, not refused by a closed journal.
            r2 = d.request(cgtest.make_request([["true"]], privileged=False))
            self.assertEqual(r2["status"], "ok", r2)
            d.stop()
            self.assertNotIn("journal failed", d.log)
            lines = [json.loads(l) for l in cgtest.journal_lines(d.state_dir)]
            mine = [e for e in lines if e["trace"] == trace]
            self.assertEqual(mine[-1]["type"], "seal", [e["type"] for e in mine])
            stand = [k for e in mine for k, v in e["payload"].items()
                     if isinstance(v, dict) and "oversize" in v]
            self.assertTrue(stand, [e["type"] for e in mine])
            p = subprocess.run([cgtest.CALLGATE, "--state-dir", d.state_dir, "replay", "--all"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class DeadlinesSayWhichTheyWere(unittest.TestCase):
    """ux-s42c: asked for 10 minutes, a call was killed at the rule's 5, and
    the reply named the deadline alone; a call killed at the 30 s default
    did not say a request may ask for more."""

    def test_a_deadline_says_whether_it_was_asked_for_capped_or_the_default(self):
        policy = ("version: 1\ndefaults: {timeout_ms: 1000, max_timeout_ms: 5000}\n"
                  "rules:\n  - id: s\n    decision: allow\n    match: {exe: [sleep]}\n"
                  "    constraints: {timeout_ms: 1500}\n"
                  "  - id: t\n    decision: allow\n    match: {exe: [tail]}\n")
        with cgtest.Daemon(policy_text=policy) as d:
            for argv, asked, want in (
                    (["sleep", "5"], 4000, "the request asked for 4000 ms, more than"),
                    (["sleep", "5"], 500, "500 ms (as the request asked)"),
                    (["tail", "-f", "/dev/null"], None, "the default; a request may ask for "
                     "up to 5000 ms")):
                fields = {"privileged": False}
                if asked:
                    fields["timeout_ms"] = asked
                r = d.request(cgtest.make_request([argv], **fields), timeout=30)
                self.assertEqual(r["reply"]["code"], "MCP-EXEC-E-002", r["reply"])
                self.assertIn(want, r["reply"]["message"])


class CallOutputTotal(unittest.TestCase):
    def test_all_streams_of_a_call_together_stay_under_the_total(self):
        # Five stages each write 16 MiB to stderr: 80 MiB offered, the call keeps 64 MiB.
        stage = ["python3", "-c", "import sys; sys.stderr.write('x' * (16 << 20))"]
        with cgtest.Daemon(policy_text=PY_POLICY) as d:
            sock = d.connect(timeout=120)
            try:
                sock.sendall(line(cgtest.make_request([stage] * 5, privileged=False)))
                resp = cgtest.parse_response(cgtest.recv_all(sock, limit=200 << 20))
            finally:
                sock.close()
            self.assertEqual(resp["status"], "ok", str(resp)[:2000])
            kept = sum(len(base64.b64decode(s.get("stderr", ""))) for s in resp["stages"])
            self.assertLessEqual(kept, 64 << 20)
            self.assertGreaterEqual(kept, 48 << 20)
            self.assertTrue(any(s.get("stderr_truncated") for s in resp["stages"]), resp["stages"])
            self.assertTrue(d.proc.poll() is None)


class ConnectionCaps(unittest.TestCase):
    def test_uid_over_its_cap_gets_the_code_and_another_uid_connects(self):
        with cgtest.Daemon(flags=["--max-conns-per-uid", "3"] + nobody_flags()) as d:
            held = [d.connect() for _ in range(3)]
            try:
                time.sleep(0.2)  # the daemon has accepted them
                raw = d.raw(line(cgtest.make_request(action="ping")))
                capped = cgtest.parse_response(raw)
                self.assertEqual(code_of(capped), "MCP-IO-E-020")
                ping = line(cgtest.make_request(action="ping"))
                got = cgtest.as_uid(NOBODY, lambda: cgtest.send_recv(d.socket, ping).decode())
                self.assertEqual(cgtest.parse_response(got.encode())["status"], "ok")
            finally:
                for s in held:
                    s.close()
            # Never admitted, but recorded: its trace id has a verdict.
            time.sleep(0.2)
            v = d.request({"id": str(uuid.uuid4()), "time": cgtest.now_rfc3339(),
                           "action": "verdict", "trace_id": capped["reply"]["trace_id"]},
                          timeout=30)
            self.assertEqual(v["status"], "ok", v)
            # The share is given back: the uid connects again.
            for _ in range(50):
                resp = d.request(cgtest.make_request(action="ping"))
                if resp["status"] == "ok":
                    break
                time.sleep(0.1)
            self.assertEqual(resp["status"], "ok", resp)


class CapRefusalsAreRecordedOnceASecond(unittest.TestCase):
    """A uid at its connection cap that reconnects in a loop: each refusal
    once made a trace of its own, with nothing holding it back (the daemon
    grew by hundreds of MB). Now one trace a second per uid, repeats
    answered with it; judged by the journal's growth."""

    def test_a_reconnect_loop_adds_a_few_events_not_one_per_connection(self):
        with cgtest.Daemon(flags=["--max-conns-per-uid", "2"]) as d:
            held = [d.connect() for _ in range(2)]
            try:
                time.sleep(0.2)
                before = len(cgtest.journal_lines(d.state_dir))
                start, traces = time.monotonic(), set()
                for _ in range(300):
                    resp = cgtest.parse_response(d.raw(line(cgtest.make_request(
                        action="ping"))))
                    self.assertEqual(code_of(resp), "MCP-IO-E-020", resp)
                    traces.add(resp["reply"]["trace_id"])
                seconds = time.monotonic() - start
            finally:
                for s in held:
                    s.close()
            time.sleep(0.5)
            added = len(cgtest.journal_lines(d.state_dir)) - before
            # Two events (request, seal) per trace, one trace per started second.
            self.assertLessEqual(len(traces), int(seconds) + 2, (len(traces), seconds))
            self.assertLessEqual(added, 2 * (int(seconds) + 2), (added, seconds))
            self.assertGreaterEqual(added, 2)  # recorded at all
            self.assertIsNone(d.proc.poll())


class OutputBounds(unittest.TestCase):
    def test_response_over_the_limit_is_replaced_by_the_error(self):
        with cgtest.Daemon(flags=["--max-reply-bytes", "100000"]) as d:
            rid = 'big"one\\x'  # escapes in the id: the stand-in keeps it whole
            resp = d.request(cgtest.make_request(BIG, privileged=False, id=rid))
            self.assertEqual(code_of(resp), "MCP-IO-E-021", resp)
            self.assertTrue(resp["reply"].get("trace_id"))
            self.assertEqual(resp["id"], rid)
            small = d.request(cgtest.make_request([["seq", "1", "100"]], privileged=False))
            self.assertEqual(small["status"], "ok", small)

    def held_big(self, d):
        """A connection of root's whose large response waits for its reader."""
        first = d.connect()
        first.sendall(line(cgtest.make_request(BIG, privileged=False)))
        time.sleep(2)  # its call has run; the response waits for its reader
        return first

    def request_until(self, d, want, uid=None):
        deadline = time.monotonic() + 30
        req = line(cgtest.make_request(BIG, privileged=False))
        resp = None
        while time.monotonic() < deadline:
            if uid is None:
                resp = d.request(cgtest.make_request(BIG, privileged=False))
            else:
                got = cgtest.as_uid(uid, lambda: cgtest.send_recv(d.socket, req, 60).decode())
                resp = cgtest.parse_response(got.encode())
            if code_of(resp) == want:
                break
            time.sleep(0.2)
            req = line(cgtest.make_request(BIG, privileged=False))
        return resp

    def test_daemon_wide_budget(self):
        with cgtest.Daemon(flags=nobody_flags() + ["--output-budget", "2000000"]) as d:
            os.chmod(d.workspace, 0o777)
            # Root's slow reader holds a large response; another uid's does not fit.
            first = self.held_big(d)
            try:
                resp = self.request_until(d, "MCP-IO-E-022", uid=NOBODY)
                self.assertEqual(code_of(resp), "MCP-IO-E-022", resp)
                data = cgtest.recv_all(first)
                self.assertEqual(cgtest.parse_response(data)["status"], "ok")
            finally:
                first.close()

    def test_one_uid_holds_at_most_half_of_the_budget(self):
        # Root holding responses for slow readers once made every other uid's
        # large response fail (found by a review): past its first, a uid holds
        # at most half the budget, and the other half stays for the rest.
        with cgtest.Daemon(flags=nobody_flags() + ["--output-budget", "3000000"]) as d:
            os.chmod(d.workspace, 0o777)
            first = self.held_big(d)
            try:
                resp = self.request_until(d, "MCP-IO-E-024")
                self.assertEqual(code_of(resp), "MCP-IO-E-024", resp)
                self.assertEqual(resp["reply"]["params"]["uid"], 0)
                resp = self.request_until(d, "MCP-EXEC-S-001", uid=NOBODY)
                self.assertEqual(resp["status"], "ok", resp)
                self.assertGreater(len(base64.b64decode(resp["stdout"])), 900000)
                data = cgtest.recv_all(first)
                self.assertEqual(cgtest.parse_response(data)["status"], "ok")
            finally:
                first.close()


class IdleWriteDeadline(unittest.TestCase):
    def test_slow_steady_reader_gets_the_whole_response(self):
        # Idle deadline 1 s; the reader takes ~4 s in total, never idle for 1 s.
        with cgtest.Daemon(flags=["--write-idle-ms", "1000"]) as d:
            s = d.connect(timeout=60)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            s.sendall(line(cgtest.make_request(BIG, privileged=False)))
            data = b""
            while True:
                chunk = s.recv(16384)
                if not chunk:
                    break
                data += chunk
                time.sleep(0.05)
            s.close()
            self.assertTrue(data.endswith(b"\n"))
            resp = cgtest.parse_response(data)
            self.assertEqual(resp["status"], "ok", str(resp)[:300])
            out = base64.b64decode(resp["stdout"])
            self.assertEqual(out.count(b"\n"), 150000)
            self.assertTrue(out.endswith(b"150000\n"))

    def test_stalled_reader_is_cut_with_an_error_line_and_others_are_served(self):
        with cgtest.Daemon(flags=["--write-idle-ms", "1500"]) as d:
            s = d.connect(timeout=60)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            s.sendall(line(cgtest.make_request(BIG, privileged=False)))
            # While it stalls, others are served.
            self.assertEqual(d.request(cgtest.make_request(action="ping"))["status"], "ok")
            d.wait_log("response cut", timeout=60)
            data = cgtest.recv_all(s)
            s.close()
            lines = data.split(b"\n")
            self.assertGreaterEqual(len(lines), 2)
            with self.assertRaises(ValueError):
                json.loads(lines[0])  # the cut line is visibly unfinished
            last = json.loads([x for x in lines if x.strip()][-1])
            self.assertEqual(code_of(last), "MCP-IO-E-023", last)
            self.assertIsNone(d.proc.poll())
            self.assertEqual(d.request(cgtest.make_request(action="ping"))["status"], "ok")

    def test_a_signal_during_the_stop_flush_does_not_spin(self):
        # A peer that does not read its large reply keeps the stopping
        # daemon's final flush waiting (up to 5 s). A second signal in that
        # wait (here SIGHUP) once left the signalfd readable, and the flush
        # spun at 100% CPU until it timed out. Judged by the daemon's CPU
        # time over a second of that wait: a spin takes about 100 ticks.
        with cgtest.Daemon(flags=nobody_flags()) as d:
            os.chmod(d.workspace, 0o777)
            req = line(cgtest.make_request([["seq", "1", "300000"]], privileged=False))

            def stall():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(d.socket)
                s.sendall(req)
                time.sleep(6)  # never reads
                s.close()
                return True
            t = threading.Thread(target=lambda: cgtest.as_uid(NOBODY, stall))
            t.start()
            time.sleep(2)  # the call has run; its reply waits for the reader
            d.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            d.proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)

            def ticks():
                with open("/proc/%d/stat" % d.proc.pid) as f:
                    v = f.read().rsplit(")", 1)[1].split()
                return int(v[11]) + int(v[12])
            t0 = ticks()
            time.sleep(1.0)
            used = ticks() - t0
            t.join(30)
            d.proc.wait(30)
            self.assertLess(used, 30, "the stopping daemon used %d ticks in 1 s" % used)
            self.assertIn("ignored: already stopping", d.log)

    def test_reader_that_never_reads_is_closed(self):
        with cgtest.Daemon(flags=["--write-idle-ms", "500"]) as d:
            s = d.connect(timeout=60)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            s.sendall(line(cgtest.make_request(BIG, privileged=False)))
            d.wait_log("closed", timeout=60)
            self.assertEqual(d.request(cgtest.make_request(action="ping"))["status"], "ok")
            s.close()


class Fairness(unittest.TestCase):
    def test_allowed_call_of_another_uid_completes_during_a_flood(self):
        env = {"CALLGATE_TEST_EVIDENCE_STALL_MS": "20"}
        with cgtest.Daemon(flags=nobody_flags() + ["--admit-queue", "64"], env=env) as d:
            os.chmod(d.workspace, 0o777)
            stop = threading.Event()
            answered = []

            def flood():
                while not stop.is_set():
                    try:
                        r = d.request(cgtest.make_request([["rm", "-rf", "/"]]), timeout=60)
                        answered.append(r["status"])
                    except (OSError, ValueError):
                        pass
            threads = [threading.Thread(target=flood) for _ in range(16)]
            for t in threads:
                t.start()
            try:
                time.sleep(1.0)
                req = line(cgtest.make_request([["true"]], privileged=False))
                got = cgtest.as_uid(NOBODY,
                                    lambda: cgtest.send_recv(d.socket, req, 30).decode())
                resp = cgtest.parse_response(got.encode())
            finally:
                stop.set()
                for t in threads:
                    t.join()
            self.assertEqual(resp["status"], "ok", resp)
            self.assertGreater(len(answered), 16)  # the flood was being served meanwhile
            self.assertIn("denied", answered)


    def test_another_uid_is_not_held_behind_a_backlog_it_did_not_make(self):
        # The journal writer sleeps 4 s before each batch, so evidence work
        # piles up: root's refused calls fill --admit-queue (150) and the rest
        # of root's wait. Nobody, below its share of recent admissions, is
        # admitted from the reserve kept above the mark: its call is answered
        # while the journal has not taken a line yet and root's held requests
        # still wait. (Without the reserve it waits for the writer.)
        stall = 8.0  # the writer's first stall: the premise must fit inside it
        env = {"CALLGATE_TEST_EVIDENCE_STALL_MS": str(int(stall * 1000))}
        with cgtest.Daemon(flags=nobody_flags() + ["--admit-queue", "150"], env=env) as d:
            lines_before = len(cgtest.journal_lines(d.state_dir))
            t0 = time.monotonic()
            socks = []
            for _ in range(200):
                s = cgtest.connect(d.socket, 120)
                s.sendall(line(cgtest.make_request([["rm", "-rf", "/"]])))
                socks.append(s)
            answered = []

            def collect(s):
                try:
                    answered.append(cgtest.parse_response(cgtest.recv_all(s))["status"])
                except (OSError, ValueError, cgtest.DaemonError):
                    pass
                finally:
                    s.close()
            threads = [threading.Thread(target=collect, args=(s,)) for s in socks]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while len(answered) < 140 and time.monotonic() < deadline:
                time.sleep(0.02)
            req = line(cgtest.make_request(action="ping"))
            got = cgtest.as_uid(NOBODY, lambda: cgtest.send_recv(d.socket, req, 120).decode())
            lines_then = len(cgtest.journal_lines(d.state_dir))
            answered_then = len(answered)
            took = time.monotonic() - t0
            for t in threads:
                t.join()
            if took > stall * 0.9 and lines_then != lines_before:
                self.skipTest("the premise took %.1f s, past the writer's stall" % took)
            resp = cgtest.parse_response(got.encode())
            self.assertEqual(resp["status"], "ok", resp)
            self.assertGreaterEqual(answered_then, 140)  # root's share was admitted
            self.assertLess(answered_then, 200)  # and root's held requests still waited
            self.assertEqual(lines_then, lines_before, "nobody's call waited for the writer")
            self.assertEqual(answered, ["denied"] * 200)  # every held request was answered
            d.stop()
            p = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write",
                                "--state-dir", d.state_dir], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])

    def test_requests_that_arrive_together_are_decided_round_robin_over_uids(self):
        # Root's 40 refused calls and then nobody's one wait in the backlog
        # (backlog_burst). When the daemon resumes, it takes them in one
        # turn and decides them round robin over uids, so nobody's refusal
        # is among the first journal lines of the 41, not the last.
        # (Decided in the backlog's order, it came 41st.) Judged by the
        # journal's order, not by time.
        with cgtest.Daemon(flags=nobody_flags()) as d:
            lines_before = len(cgtest.journal_lines(d.state_dir))
            root, nobody = backlog_burst(d, 40)
            self.assertEqual([r["status"] for r in root], ["denied"] * 40)
            self.assertEqual(nobody["status"], "denied", nobody)
            d.stop()  # the journal writer has written every line
            uids = [json.loads(x)["payload"]["peer"]["uid"]
                    for x in cgtest.journal_lines(d.state_dir)[lines_before:]
                    if json.loads(x)["type"] == "refusal"]
            self.assertEqual(len(uids), 41, uids)
            self.assertIn(NOBODY, uids[:3], "nobody's call was decided in backlog order: %s"
                          % uids)

    def test_a_burst_waiting_for_admission_is_not_turned_away_by_the_caps(self):
        # 300 refused calls from root wait in the backlog, then one from
        # nobody (backlog_burst), with --max-conns 256: when the daemon
        # resumes, a turn queues no more than it admits soon, so every call
        # is decided (denied by the rule), none is answered SERVER_BUSY or
        # PEER_CONN_CAP. (Accepting 64 a turn while admitting 8 once turned
        # 11 of root's and nobody's call away.)
        with cgtest.Daemon(flags=nobody_flags() + ["--max-conns", "256"]) as d:
            root, nobody = backlog_burst(d, 300)
            self.assertEqual({code_of(r) for r in root}, {"EN-EXEC-D-001"},
                             [code_of(r) for r in root])
            self.assertEqual(code_of(nobody), "EN-EXEC-D-001", nobody)

    def test_peers_leaving_as_their_answers_arrive_do_not_crash_the_daemon(self):
        # Allowed calls whose peers close at random moments around their
        # answer, while a refused flood keeps every epoll batch full: an
        # answer handed out between two events of a batch can free a
        # connection whose hang-up is a later event of the same batch. That
        # event once read the freed connection (ASan: heap-use-after-free;
        # the release build aborted in 2 of 6 runs of 40-60 s). Judged by
        # effect: the daemon still answers, and the sanitizers (in the ASan
        # build) report nothing when it stops.
        with cgtest.Daemon() as d:
            end = time.monotonic() + 6
            racers = [0]

            def flood():
                while time.monotonic() < end:
                    try:
                        d.raw(line(cgtest.make_request([["rm", "-rf", "/"]])), timeout=10)
                    except (OSError, cgtest.DaemonError):
                        pass

            def racer():
                rnd = random.Random()
                while time.monotonic() < end:
                    try:
                        s = cgtest.connect(d.socket, 10)
                        s.sendall(line(cgtest.make_request([["sleep", "0.02"]],
                                                           privileged=False)))
                        time.sleep(rnd.uniform(0.0, 0.08))
                        s.close()
                        racers[0] += 1
                    except OSError:
                        pass
            threads = [threading.Thread(target=flood) for _ in range(12)]
            threads += [threading.Thread(target=racer) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertIsNone(d.proc.poll(), "the daemon died:\n" + d.log[-3000:])
            self.assertGreater(racers[0], 50)
            resp = d.request(cgtest.make_request(action="ping"))
            self.assertEqual(resp["status"], "ok", resp)



def children(pid):
    """Every child of pid, whichever of its threads made it."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def view_pid1(d):
    """A call's pid 1 that has not exec'd callgate-init yet: a child of the
    daemon (the stall knob keeps it there)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid1 = next((c for c in children(d.proc.pid)
                     if comm(c) not in (None, "callgate-init")), None)
        if pid1 is not None:
            return pid1
        time.sleep(0.02)
    raise AssertionError("no pid 1 for the call")


class EvidenceReadsShareWorkers(unittest.TestCase):
    """Reads of the journal run on the workers that run calls: bounded per uid and in all.

    One uid's burst of `log` requests once held every worker, and another
    uid's /bin/true waited a minute. Each read here holds its worker 8 s
    (CALLGATE_TEST_READ_STALL_MS), so which reads ran, which were refused and
    what was answered while they held their workers is plain.
    """

    def test_a_burst_of_reads_takes_two_slots_and_calls_still_run(self):
        env = {"CALLGATE_TEST_READ_STALL_MS": "8000"}
        with cgtest.Daemon(flags=nobody_flags(), env=env) as d:
            os.chmod(d.workspace, 0o777)
            replies = []
            order = []


            def read_log(uid):
                req = line(cgtest.make_request(None, action="log", limit=1, time=None))

                r = subprocess.run(["/usr/bin/python3", "-c", CLIENT, d.socket, req.decode()],
                                   capture_output=True, text=True, timeout=60, user=uid,
                                   group=uid, extra_groups=[])
                replies.append((uid, r.stdout.strip() or r.stderr[-300:]))
                order.append("read")

            def busy(uid):
                return sum(1 for u, c in replies if u == uid and c == "MCP-LOG-E-103")

            def wait_for(cond):
                deadline = time.monotonic() + 6  # well inside the reads' 8 s
                while not cond() and time.monotonic() < deadline:
                    time.sleep(0.05)

            threads = [threading.Thread(target=read_log, args=(NOBODY,)) for _ in range(8)]
            for t in threads:
                t.start()
            wait_for(lambda: busy(NOBODY) == 6)
            self.assertEqual(busy(NOBODY), 6, replies)  # two of nobody's eight run
            # Root's reads take the two slots left in the daemon; a third is refused.
            more = [threading.Thread(target=read_log, args=(0,)) for _ in range(3)]
            for t in more:
                t.start()
            wait_for(lambda: busy(0) == 1)
            self.assertEqual(busy(0), 1, replies)
            # Meanwhile a call runs on a worker the reads do not hold.
            resp = d.request(cgtest.make_request([["true"]], privileged=False), timeout=30)
            order.append("call")
            self.assertEqual(resp["status"], "ok", resp)
            for t in threads + more:
                t.join(60)
            self.assertEqual(order.index("call"), 7, order)  # before any read that ran
            ok = [c for u, c in replies if c == "MCP-LOG-S-103"]
            self.assertEqual(len(ok), 4, replies)
            # Slots come back: a read after them runs.
            read_log(NOBODY)
            self.assertEqual(replies[-1][1], "MCP-LOG-S-103", replies)


class OneUidHoldsAShareOfTheWorkers(unittest.TestCase):
    """A running call holds its worker. One uid's 40 long calls once held all
    32 workers, and another uid's /bin/true waited for them to end (116 s in
    the attack that found it). One uid runs at most a quarter of them at once;
    its other calls wait their turn, none is refused."""

    def test_another_uids_call_runs_while_one_uid_floods_with_sleeps(self):
        with cgtest.Daemon(flags=nobody_flags()) as d:
            os.chmod(d.workspace, 0o777)
            codes = []
            def sleeper():
                req = line(cgtest.make_request([["sleep", "4"]], privileged=False,
                                               cwd=d.workspace)).decode()
                r = subprocess.run(["/usr/bin/python3", "-c", CLIENT, d.socket, req],
                                   capture_output=True, text=True, timeout=120, user=NOBODY,
                                   group=NOBODY, extra_groups=[])
                codes.append(r.stdout.strip() or r.stderr[-300:])

            def count_sleeps():
                # The calls' commands: `sleep 4`, whatever uid the view runs them as.
                out = subprocess.run(["pgrep", "-c", "-f", "-x", "sleep 4"],
                                     capture_output=True, text=True).stdout.strip()
                return int(out or 0)

            threads = [threading.Thread(target=sleeper) for _ in range(40)]
            for t in threads:
                t.start()
            # Wait until nobody's sleeps run: as many as the share allows.
            deadline = time.monotonic() + 20
            running = 0
            while time.monotonic() < deadline:
                running = count_sleeps()
                if running >= 8:
                    break
                time.sleep(0.1)
            time.sleep(0.5)
            running = count_sleeps()
            self.assertEqual(running, 8, ("a quarter of the 32 workers", codes))
            t0 = time.monotonic()
            resp = d.request(cgtest.make_request([["true"]], privileged=False), timeout=60)
            took = time.monotonic() - t0
            self.assertEqual(resp["status"], "ok", resp)
            self.assertLess(took, 5, "root's call waited for nobody's sleeps")
            for t in threads:
                t.join(120)
            # None of nobody's calls was refused: they ran in turns.
            self.assertEqual(codes.count("MCP-EXEC-S-001"), 40, codes)


def _has_entry(pwd, uid):
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


class TheLastShareOfWorkersIsKept(unittest.TestCase):
    """Four uids at their share (8 each) once held all 32 workers. The last
    quarter is kept for uids with nothing running, and evidence reads are
    never held behind their uid's calls (a held read kept its read slot)."""

    def test_four_busy_uids_leave_workers_for_a_fifth(self):
        with cgtest.Daemon(flags=nobody_flags()) as d:
            os.chmod(d.workspace, 0o777)
            # Four uids with password entries (the daemon runs a call as its peer).
            import pwd
            uids = [NOBODY] + [u for u in range(1, 20) if _has_entry(pwd, u)][:3]
            self.assertEqual(len(uids), 4, uids)

            def sleeper(uid):
                req = line(cgtest.make_request([["sleep", "4"]], privileged=False,
                                               cwd=d.workspace)).decode()
                subprocess.run(["/usr/bin/python3", "-c", CLIENT, d.socket, req],
                               capture_output=True, text=True, timeout=120, user=uid,
                               group=NOBODY, extra_groups=[])

            def running():
                out = subprocess.run(["pgrep", "-c", "-f", "-x", "sleep 4"],
                                     capture_output=True, text=True).stdout.strip()
                return int(out or 0)

            threads = [threading.Thread(target=sleeper, args=(u,)) for u in uids
                       for _ in range(9)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 20
            while running() < 24 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            n = running()
            self.assertGreaterEqual(n, 24)
            self.assertLessEqual(n, 25, "the last quarter is kept for uids with nothing running")
            t0 = time.monotonic()
            resp = d.request(cgtest.make_request([["true"]], privileged=False), timeout=60)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertLess(time.monotonic() - t0, 3, "root's call waited for the sleeps")
            # A busy uid's evidence read is answered now, not held behind its calls.
            req = line(cgtest.make_request(None, action="log", limit=1, time=None)).decode()
            t0 = time.monotonic()
            r = subprocess.run(["/usr/bin/python3", "-c", CLIENT, d.socket, req],
                               capture_output=True, text=True, timeout=60, user=uids[0],
                               group=NOBODY, extra_groups=[])
            self.assertEqual(r.stdout.strip(), "MCP-LOG-S-103", r.stderr[-300:])
            self.assertLess(time.monotonic() - t0, 3, "the read waited for its uid's sleeps")
            for t in threads:
                t.join(120)


class ViewsHoldNoOtherCallsSockets(unittest.TestCase):
    """A call's pid 1 builds its view before it execs callgate-init; it lets
    go of the daemon's other descriptors first (docs/confinement.md). Judged
    by a peer's EOF while another call's pid 1 is still building its view
    (a test-only stall keeps it there)."""

    def test_a_peer_gets_eof_while_another_calls_view_is_built(self):
        env = {"CALLGATE_TEST_VIEW_STALL_MS": "4000"}
        with cgtest.Daemon(env=env) as d:
            ping = line(cgtest.make_request(action="ping"))
            a = d.connect(timeout=60)
            a.sendall(ping[:10])  # half a line: the daemon holds a's socket
            time.sleep(0.3)
            out = []
            req = line(cgtest.make_request([["true"]], privileged=False))
            t = threading.Thread(target=lambda: out.append(cgtest.send_recv(d.socket, req, 60)))
            t.start()
            pid1 = view_pid1(d)  # b's
            time.sleep(0.3)  # cloned with a's socket in the daemon's table
            a.sendall(ping[10:])
            got = cgtest.recv_all(a)  # the answer, then EOF once nobody holds the socket
            a.close()
            self.assertEqual(cgtest.parse_response(got)["status"], "ok")
            self.assertNotIn(comm(pid1), (None, "callgate-init"),
                             "a's EOF came only once b's pid 1 let go of its descriptors")
            t.join(60)
            self.assertEqual(cgtest.parse_response(out[0])["status"], "ok", out)


class KilledBeforeItsCommandStarts(unittest.TestCase):
    """A stage whose pid 1 dies while it builds the view never ran its
    command. The reply, the journal's exec.finished and the sealed verdict
    must say so, not report a command that ran and died of a signal; and a
    call that did run must not be sealed as one that did not. Judged by
    effect too: the command would have made a file."""

    def test_pid1_killed_while_the_view_is_built(self):
        env = {"CALLGATE_TEST_VIEW_STALL_MS": "4000"}
        with cgtest.Daemon(env=env) as d:
            made = os.path.join(d.workspace, "ran")
            req = line(cgtest.make_request([["touch", made]], privileged=False,
                                           cwd=d.workspace))
            out = []
            t = threading.Thread(target=lambda: out.append(cgtest.send_recv(d.socket, req, 60)))
            t.start()
            os.kill(view_pid1(d), signal.SIGKILL)
            t.join(60)
            resp = cgtest.parse_response(out[0])
            self.assertEqual(resp["status"], "error", resp)
            self.assertEqual(resp["reply"]["message_key"], "EXEC_ENDED_BEFORE_START", resp)
            self.assertFalse(os.path.exists(made))
            tid = resp["reply"]["trace_id"]
            mine = self.sealed_events(d, tid)
            finished = [e for e in mine if e["type"] == "exec.finished"]
            self.assertEqual(len(finished), 1, mine)
            self.assertFalse(finished[0]["payload"]["started"], finished)
            seal = [e for e in mine if e["type"] == "seal"]
            self.assertEqual(len(seal), 1, mine)
            self.assertFalse(seal[0]["payload"]["verdict"]["executed"], seal)
            self.assertEqual(d.request(cgtest.make_request(action="ping"))["status"], "ok")

    def sealed_events(self, d, tid):
        deadline = time.monotonic() + 10  # the trace is sealed after the answer
        while True:
            mine = [e for e in map(json.loads, cgtest.journal_lines(d.state_dir))
                    if e["trace"] == tid]
            if any(e["type"] == "seal" for e in mine) or time.monotonic() > deadline:
                return mine
            time.sleep(0.05)

    def test_a_call_cancelled_while_it_runs_ran(self):
        # The client leaves while the command runs: the seal must say it
        # ran, as exec.finished does (the reply code alone cannot tell a
        # cancel during the run from one before it).
        with cgtest.Daemon() as d:
            s = d.connect(timeout=30)
            s.sendall(line(cgtest.make_request([["sleep", "3"]], privileged=False)))
            deadline = time.monotonic() + 10
            while not any(comm(c) == "callgate-init" for c in children(d.proc.pid)):
                self.assertLess(time.monotonic(), deadline, "the call never started")
                time.sleep(0.02)
            time.sleep(0.3)
            s.close()
            deadline = time.monotonic() + 20
            tid = None
            while tid is None:
                self.assertLess(time.monotonic(), deadline, "no sealed trace")
                events = [json.loads(x) for x in cgtest.journal_lines(d.state_dir)]
                tid = next((e["trace"] for e in events if e["type"] == "seal"), None)
                time.sleep(0.05)
            mine = self.sealed_events(d, tid)
            fin = [e["payload"] for e in mine if e["type"] == "exec.finished"]
            self.assertTrue(fin and fin[0]["started"], mine)
            verdict = [e["payload"]["verdict"] for e in mine if e["type"] == "seal"][0]
            self.assertEqual(verdict["reply"]["code"], "MCP-EXEC-E-004", verdict)
            self.assertTrue(verdict["executed"], verdict)

    def test_a_later_stage_killed_after_an_earlier_one_ran(self):
        # Stage 0 runs (each stage is spawned once the one before it exec'd);
        # stage 1's pid 1 is killed while it builds its view. The call ran in
        # part: the evidence must say so, not "nothing ran".
        env = {"CALLGATE_TEST_VIEW_STALL_MS": "4000"}  # room to find and kill it when loaded
        with cgtest.Daemon(env=env) as d:
            made = os.path.join(d.workspace, "ran")
            req = line(cgtest.make_request([["touch", made], ["cat"]], privileged=False,
                                           cwd=d.workspace))
            out = []
            t = threading.Thread(target=lambda: out.append(cgtest.send_recv(d.socket, req, 60)))
            t.start()
            deadline = time.monotonic() + 20
            while not os.path.exists(made):
                self.assertLess(time.monotonic(), deadline, "stage 0 never ran")
                time.sleep(0.02)
            os.kill(view_pid1(d), signal.SIGKILL)  # stage 1's: stage 0's is callgate-init now
            t.join(60)
            resp = cgtest.parse_response(out[0])
            self.assertEqual(resp["reply"]["message_key"], "EXEC_PARTLY_STARTED", resp)
            tid = resp["reply"]["trace_id"]
            mine = self.sealed_events(d, tid)
            fin = [e["payload"] for e in mine if e["type"] == "exec.finished"]
            self.assertEqual(len(fin), 1, mine)
            self.assertTrue(fin[0]["started"], fin)
            self.assertEqual(fin[0]["stages_started"], 1, fin)
            codes = fin[0]["exit_codes"]  # stage 0's (0, or 137 if still running); none for 1
            self.assertEqual(len(codes), 2, fin)
            self.assertIn(codes[0], (0, 137), fin)
            self.assertIsNone(codes[1], fin)
            verdict = [e["payload"]["verdict"] for e in mine if e["type"] == "seal"][0]
            self.assertTrue(verdict["executed"], verdict)
            deadline = time.monotonic() + 10  # the package is written after the seal
            while True:
                try:
                    full = json.loads(cgtest.package_file(d.state_dir, tid, "verdict.json"))
                    break
                except FileNotFoundError:
                    self.assertLess(time.monotonic(), deadline, "no package")
                    time.sleep(0.05)
            self.assertEqual(full["outcome"], "failed", full)
            self.assertTrue(full["executed"], full)


class LoopBudget(unittest.TestCase):
    """While another uid's call runs, a uid gets at most half of the event
    loop (docs/limits.md, "The loop's budget"). Judged by order and by the
    daemon's own count, never by time."""

    REFUSED = [["rm", "-rf", "/"]]

    def refuse(self, d):
        resp = d.request(cgtest.make_request(self.REFUSED))
        self.assertEqual(code_of(resp), "EN-EXEC-D-001", resp)

    def log_after(self, d):
        """The log once the loop is past every request made so far: a spell
        is logged after its request's answer, but before the next one's."""
        self.assertEqual(d.request(cgtest.make_request(action="ping"))["status"], "ok")
        return d.log

    def test_a_uid_alone_is_never_held(self):
        with cgtest.Daemon(flags=nobody_flags()) as d:
            for _ in range(60):
                self.refuse(d)
            self.assertNotIn("the loop's budget", self.log_after(d))

    def test_a_held_uid_is_answered_while_another_uids_call_runs(self):
        # root refuses one call at a time while nobody's `sleep 10` runs: each
        # refusal holds root for as long as it took, and only the loop's timer
        # ends that hold (nothing else happens meanwhile). All of root's
        # answers must come while the sleep still runs; a hold that waited
        # for another event would wait for the sleep's end.
        with cgtest.Daemon(flags=nobody_flags()) as d:
            os.chmod(d.workspace, 0o777)
            # Long enough that 40 refusals fit in it on a loaded machine.
            req = line(cgtest.make_request([["sleep", "10"]], privileged=False))
            out = []
            t = threading.Thread(target=lambda: out.append(cgtest.as_uid(
                NOBODY, lambda: cgtest.send_recv(d.socket, req, 60).decode())))
            t.start()
            deadline = time.monotonic() + 30
            while not any(b'"type":"exec.started"' in x for x in cgtest.journal_lines(d.state_dir)):
                self.assertLess(time.monotonic(), deadline, "nobody's call did not start")
                time.sleep(0.02)
            for _ in range(40):
                self.refuse(d)
            self.assertTrue(t.is_alive(), "root's refusals were answered only after the sleep")
            t.join(60)
            self.assertEqual(cgtest.parse_response(out[0].encode())["status"], "ok", out)
            self.refuse(d)  # nobody's call is over: the spell ends and is logged
            log = self.log_after(d)
            m = re.search(r"uid 0: held to half of the loop for \d+ ms \((\d+) request", log)
            self.assertIsNotNone(m, log[-3000:])
            self.assertGreaterEqual(int(m.group(1)), 30)
            self.assertIsNone(d.proc.poll())

    def test_a_call_running_past_its_second_holds_nobody(self):
        # nobody's `sleep 12` has run for more than 1 s; a quick `true` of
        # nobody's has come and gone since. Neither may hold root now.
        with cgtest.Daemon(flags=nobody_flags()) as d:
            os.chmod(d.workspace, 0o777)

            def nobody(pipeline):
                req = line(cgtest.make_request(pipeline, privileged=False))
                return cgtest.as_uid(NOBODY, lambda: cgtest.send_recv(d.socket, req, 60).decode())
            out = []
            t = threading.Thread(target=lambda: out.append(nobody([["sleep", "12"]])))
            t.start()
            # Past its second from when it started (a confined start can be slow).
            deadline = time.monotonic() + 30
            while not any(b'"type":"exec.started"' in x
                          for x in cgtest.journal_lines(d.state_dir)):
                self.assertLess(time.monotonic(), deadline, "nobody's sleep did not start")
                time.sleep(0.02)
            time.sleep(1.5)
            self.assertEqual(cgtest.parse_response(nobody([["true"]]).encode())["status"], "ok")
            time.sleep(0.2)
            for _ in range(40):
                self.refuse(d)
            self.assertTrue(t.is_alive())
            t.join(60)
            self.refuse(d)
            self.assertNotIn("the loop's budget", self.log_after(d))

class ScreenCost(unittest.TestCase):
    """Output screening costs one pass: a stream of key BEGIN lines with no END
    had made the screen search to the end once per line (quadratic): 160,000
    lines (4.3 MB) held a worker for 66 s of CPU, and the 16 MiB cap about 15
    minutes (attack s39a F3). Judged by the reply arriving well inside the
    request's timeout, the lines still cut."""

    def test_key_begin_lines_without_end_cost_one_pass(self):
        with cgtest.Daemon() as d:
            code = "import sys; sys.stdout.write('-----BEGIN PRIVATE KEY-----\\n' * 160000)"
            r = d.request(cgtest.make_request([["python3", "-c", code]], privileged=False,
                                              cwd=d.workspace), timeout=30)
            self.assertEqual(r["status"], "ok", str(r)[:2000])
            out = base64.b64decode(r["stdout"])
            self.assertNotIn(b"BEGIN PRIVATE KEY", out)
            self.assertIn(b"[REDACTED:", out)


class ResolveBudget(unittest.TestCase):
    """A file action's path is walked name by name, each name once, against a
    budget per request (world.c RESOLVE_STEPS): before, one gate request of
    240 paths like /usr/../usr/../... held the daemon's one loop thread for
    122 s, and one path through a 2,000-level directory for 164 s, admin
    socket included (attack s38a F1)."""

    def gate(self, d, resources, timeout=60):
        acts = [{"action_type": "read", "tool": "Read", "resource": r} for r in resources]
        return d.request(cgtest.make_request(action="gate", actions=acts, privileged=False,
                                             cwd=d.workspace), timeout=timeout)

    def test_paths_that_cost_a_walk_each_do_not_hold_the_loop(self):
        with cgtest.Daemon() as d:
            deep = os.path.join(d.workspace, "deep")
            try:
                self.walks(d, deep)
            finally:  # rm, not shutil.rmtree: 2,000 levels are past Python's recursion limit
                subprocess.run(["rm", "-rf", deep])

    def walks(self, d, deep):
        os.mkdir(deep)
        fd = os.open(deep, os.O_RDONLY)
        for _ in range(2000):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(fd)
        pinged = []

        def ping():
            time.sleep(0.5)
            pinged.append(d.request(cgtest.make_request(action="ping"), timeout=60))
        t = threading.Thread(target=ping)
        t.start()
        # Every name exists: the old walk did a realpath of each prefix.
        r = self.gate(d, ["/" + "usr/../" * 580 + "etc/hostname"] * 240, timeout=100)
        self.assertEqual(code_of(r), "WA-RES-I-009", r)
        self.assertIn("more than 8192 path names", r["reply"]["message"])
        t.join(100)
        self.assertEqual(code_of(pinged[0]), "MCP-SYS-S-001", pinged)
        # Within the budget, the same paths are judged where they lead.
        r = self.gate(d, ["/" + "usr/../" * 20 + "etc/hostname"] * 4)
        self.assertEqual(code_of(r), "MCP-GATE-S-001", r)
        r = self.gate(d, ["deep/" + "d/" * 2000 + "x"])
        self.assertEqual(code_of(r), "MCP-GATE-S-001", r)
        r = self.gate(d, ["deep/" + "d/" * 1500 + "../" * 1510 + "etc/shadow"])
        self.assertEqual(r["reply"]["params"]["rule_id"], "action-secrets", r)


class KernelFileInTheWorkspace(unittest.TestCase):
    """A /proc or /sys file mounted where a workspace file would be is not
    judged as that file: the agent's own Write would set the kernel's
    value (s38d: a bind mount of /proc/sys/kernel/domainname as notes.txt
    was judged a workspace write, and the domain name changed)."""

    def test_a_mounted_kernel_file_is_not_judged_a_workspace_file(self):
        with cgtest.Daemon() as d:
            target = os.path.join(d.workspace, "notes.txt")
            open(target, "w").close()
            r = subprocess.run(["mount", "--bind", "/proc/sys/kernel/domainname", target],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.skipTest("no bind mount here: " + r.stderr.strip())
            try:
                acts = [{"action_type": "write", "tool": "Write", "resource": "notes.txt"}]
                r = d.request(cgtest.make_request(action="gate", privileged=False,
                                                  cwd=d.workspace, actions=acts))
                self.assertEqual(code_of(r), "WA-RES-I-008", r)
                self.assertIn("EXDEV", r["reply"]["message"])
            finally:
                subprocess.run(["umount", target])
            # The same name as a plain file is the workspace's.
            r = d.request(cgtest.make_request(action="gate", privileged=False,
                                              cwd=d.workspace, actions=acts))
            self.assertEqual(code_of(r), "MCP-GATE-S-001", r)


class KernelDirsAndDevicesInTheWorkspace(unittest.TestCase):
    """A write into a sysfs or cgroup directory, or to a device node, is no
    workspace write wherever it is mounted (s38e: the agent's Write through a
    sysfs mounted in the workspace changed a kernel parameter)."""

    def test_writes_into_kernel_interfaces_are_not_judged_as_the_workspace(self):
        with cgtest.Daemon() as d:
            mnt = os.path.join(d.workspace, "sy")
            os.mkdir(mnt)
            r = subprocess.run(["mount", "--bind", "/sys/module", mnt], capture_output=True,
                               text=True)
            if r.returncode != 0:
                self.skipTest("no bind mount here: " + r.stderr.strip())
            node = os.path.join(d.workspace, "null-dev")
            os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))

            def code(action, res):
                acts = [{"action_type": action, "tool": "Write", "resource": res}]
                return code_of(d.request(cgtest.make_request(
                    action="gate", privileged=False, cwd=d.workspace, actions=acts)))
            try:
                for res in ("sy/printk/parameters/time", "null-dev"):
                    self.assertEqual(code("write", res), "WA-RES-I-008", res)
                    self.assertEqual(code("delete", res), "WA-RES-I-008", res)
                # Reading them is inspection, as before.
                self.assertEqual(code("read", "sy/printk/parameters/time"), "MCP-GATE-S-001")
            finally:
                subprocess.run(["umount", mnt])
                os.unlink(node)


class DeleteTakesTheLink(unittest.TestCase):
    """A delete removes a link, not what it points at: judged where the link
    is (s38c: a delete of a link outside the workspace that pointed inside
    was judged inside and allowed; rm then removed the outside link)."""

    def test_a_delete_is_judged_where_the_link_is(self):
        with cgtest.Daemon() as d:
            inside = os.path.join(d.workspace, "f.txt")
            open(inside, "w").close()
            outside_link = os.path.join(d.tmp, "victim-link")
            os.symlink(inside, outside_link)
            inside_link = os.path.join(d.workspace, "to-etc")
            os.symlink("/etc/hostname", inside_link)

            def allowed(action, res):  # let through: ALLOW, or DEGRADE (with constraints)
                r = d.request(cgtest.make_request(action="gate", privileged=False,
                                                  cwd=d.workspace, actions=[
                                                      {"action_type": action, "tool": "Bash",
                                                       "resource": res}]))
                return r["reply"]["params"]["decision"] in ("ALLOW", "DEGRADE")

            self.assertFalse(allowed("delete", outside_link))
            # The link in the workspace is the workspace's to delete.
            self.assertTrue(allowed("delete", inside_link))
            # Writing through either still lands where it points.
            self.assertTrue(allowed("write", outside_link))
            self.assertFalse(allowed("write", inside_link))
            # With a '/' after it, a delete goes through the link.
            os.symlink(d.tmp, os.path.join(d.workspace, "up"))
            self.assertFalse(allowed("delete", os.path.join(d.workspace, "up") + "/"))


def small_tmpfs(test, path, size):
    """A tmpfs of size at path for test's life (0700: a state directory others
    may write is refused; tmpfs's own default is 1777), or skip the test."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs",
                        path], capture_output=True, text=True)
    if r.returncode != 0:
        test.skipTest("no tmpfs mount here: " + r.stderr.strip())
    test.addCleanup(subprocess.run, ["umount", "-l", path], capture_output=True)


def stop_quietly(d):
    try:
        d.stop()
    except cgtest.DaemonError:
        pass


class DiskReserve(unittest.TestCase):
    """The evidence never fills its disk: below --disk-reserve new calls are
    turned away before anything is recorded (MCP-LOG-E-006), what was
    answered is whole in the journal, and calls are taken again once there
    is room. Judged on a tmpfs of its own under the state directory."""

    MIB = 1 << 20

    def setUp(self):
        self.d = cgtest.Daemon(flags=["--disk-reserve", "12M"])
        self.addCleanup(self.d.close)
        os.makedirs(self.d.state_dir)
        small_tmpfs(self, self.d.state_dir, "40m")
        self.addCleanup(stop_quietly, self.d)
        self.d.start()

    def free(self):
        st = os.statvfs(self.d.state_dir)
        return st.f_bavail * st.f_frsize

    def refuse(self):
        return self.d.request(cgtest.make_request([["rm", "-rf", "/"]]), timeout=60)

    def replay_all(self):
        p = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write", "--state-dir",
                            self.d.state_dir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])

    def test_below_the_reserve_calls_are_turned_away_and_taken_again_after(self):
        d = self.d
        self.assertEqual(code_of(self.refuse()), "EN-EXEC-D-001")
        filler = os.path.join(d.state_dir, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (self.free() - 8 * self.MIB))
        r = self.refuse()
        self.assertEqual(code_of(r), "MCP-LOG-E-006", r)
        self.assertIn("disk reserve", r["reply"]["message"])
        # Nothing ran: an allowed call is turned away the same way.
        marker = os.path.join(d.workspace, "ran")
        r = d.request(cgtest.make_request([["touch", marker]], cwd=d.workspace,
                                          privileged=False), timeout=60)
        self.assertEqual(code_of(r), "MCP-LOG-E-006", r)
        self.assertFalse(os.path.exists(marker))
        self.assertIsNone(d.proc.poll())
        self.assertIn("below the disk reserve", d.log)
        os.unlink(filler)
        r = self.refuse()
        self.assertEqual(code_of(r), "EN-EXEC-D-001", r)
        self.assertIn("again: calls are taken", d.log)

    def test_a_bad_reserve_is_refused_by_name(self):
        for bad in ["5x", "-1", "0%", "91%", "2000000000G", "", "1.5G"]:
            r = subprocess.run([cgtest.CALLGATED, "--disk-reserve", bad], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 64, (bad, r.stderr))
            self.assertIn("--disk-reserve needs", r.stderr)

    def test_a_flood_of_refusals_stops_short_of_a_full_disk(self):
        d = self.d
        codes, denied, lock = [], [], threading.Lock()

        def flood():  # about 40 MiB of evidence at most: more than the tmpfs holds
            for _ in range(250):
                r = self.refuse()
                with lock:
                    codes.append(code_of(r))
                    if r.get("status") == "denied":
                        denied.append(r["reply"]["trace_id"])
                if code_of(r) == "MCP-LOG-E-006":
                    return
        threads = [threading.Thread(target=flood) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(set(codes), {"EN-EXEC-D-001", "MCP-LOG-E-006"}, set(codes))
        self.assertGreater(len(denied), 100)
        # The reserve took what was in flight: the disk never filled.
        self.assertGreater(self.free(), 4 * self.MIB)
        self.assertNotIn("journal failed", d.log)
        self.assertNotIn("not recorded", d.log)
        self.assertNotIn("not written", d.log)
        d.stop()
        self.replay_all()
        events = subprocess.run([cgtest.CALLGATE, "log", "--state-dir", d.state_dir,
                                 "--json"], capture_output=True, text=True)
        for trace in random.sample(denied, 20):
            self.assertIn(trace, events.stdout)


@unittest.skipUnless(os.geteuid() == 0, "mounting a small tmpfs needs root")
class SharedDisk(unittest.TestCase):
    """A call that fills the file system its workspace shares with the state
    (admitted while there was room) is still finished, verdicted and sealed:
    the journal holds space past its end. Then calls are turned away below
    the reserve, and taken again once the operator frees space (s38c)."""

    POLICY = """
version: 1
rules:
  - id: fill-and-true
    decision: allow
    why: the test's own commands
    match:
      exe: [dd, "true"]
  - id: fill-by-python
    decision: degrade
    why: the test's own commands
    match:
      exe: [python3]
    constraints:
      read: [/]
      write: ["${workspace}"]
"""

    def setUp(self):
        self.d = cgtest.Daemon(policy_text=self.POLICY)
        self.addCleanup(self.d.close)
        self.fs = os.path.join(self.d.tmp, "fs")
        os.makedirs(self.fs)
        small_tmpfs(self, self.fs, "24m")
        self.d.state_dir = os.path.join(self.fs, "state")
        self.d.workspace = os.path.join(self.fs, "ws")
        os.makedirs(self.d.workspace)
        self.d.workspaces = [self.d.workspace]
        self.addCleanup(stop_quietly, self.d)
        self.d.start()

    def call(self, argv):
        return self.d.request(cgtest.make_request([argv], cwd=self.d.workspace,
                                                  privileged=False), timeout=120)

    def test_a_call_that_fills_the_disk_is_still_sealed(self):
        d = self.d
        # Two calls at once, each writing more than the file system holds.
        bigs = [os.path.join(d.workspace, "big%d" % i) for i in range(2)]
        replies = []
        threads = [threading.Thread(target=lambda b=b: replies.append(self.call(
            ["dd", "if=/dev/zero", "of=" + b, "bs=64k", "count=1024"]))) for b in bigs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in replies:  # dd ran; it stopped at ENOSPC itself
            self.assertEqual(r["status"], "ok", r)
        st = os.statvfs(self.fs)  # full but for what the evidence let go since
        self.assertLess(st.f_bavail * st.f_frsize, 256 << 10, "the calls did not fill the disk")
        # Turned away below the reserve; nothing unrecorded, the journal never closed.
        r = self.call(["true"])
        self.assertEqual(code_of(r), "MCP-LOG-E-006", r)
        self.assertNotIn("journal failed", d.log)
        self.assertIsNone(d.proc.poll())
        for r in replies:
            p = subprocess.run([cgtest.CALLGATE, "verdict", "--state-dir", d.state_dir,
                                "--json", r["reply"]["trace_id"]], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:] + d.log[-3000:])
            self.assertTrue(json.loads(p.stdout)["executed"], p.stdout[-2000:])
        for b in bigs:  # the operator frees space: calls are taken again
            os.unlink(b)
        r = self.call(["true"])
        self.assertEqual(r["status"], "ok", r)
        d.stop()
        p = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write", "--state-dir",
                            d.state_dir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        # It starts again on the same file system (a torn tail once kept it down).
        d.start()
        self.assertEqual(self.call(["true"])["status"], "ok")

    def test_many_calls_that_fill_the_disk_are_all_sealed_and_packaged(self):
        # s39d: 64 such calls, or 20 with 100 KB requests, outgrew a fixed hold:
        # a checkpoint line tore, packages were lost, answered calls ended
        # incomplete. What is held now grows with what admitted calls are promised.
        d = self.d
        replies, lock = [], threading.Lock()

        def one(i):
            # A 100 KB command (recorded in its events and package) every other call.
            body = ("f = open(%r, 'wb')\ntry:\n    while True: f.write(b'x' * 65536); f.flush()\n"
                    "except OSError as e: print('stop', e)\n" % os.path.join(d.workspace,
                                                                         "big%d" % i))
            code = "exec(%r) #%s" % (body, "A" * (100000 if i % 2 else 0))  # one line
            r = d.request(cgtest.make_request([["python3", "-c", code]], cwd=d.workspace,
                                              privileged=False), timeout=120)
            with lock:
                replies.append(r)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = {code_of(r) for r in replies}
        self.assertLessEqual(codes, {"MCP-EXEC-S-001", "MCP-LOG-E-006"}, replies)
        self.assertIn("MCP-EXEC-S-001", codes)
        self.assertNotIn("journal failed", d.log)
        # The operator frees space; a package that found none waited for it.
        for n in os.listdir(d.workspace):
            os.unlink(os.path.join(d.workspace, n))
        r = self.call(["true"])  # taken again, and its package follows the others'
        self.assertEqual(r["status"], "ok", r)
        d.stop()
        self.assertNotIn("package not written", d.log)  # a resume point is a cache: it may be
        p = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write", "--state-dir",
                            d.state_dir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-2000:])
        self.assertIn(" 0 incomplete", p.stdout)


class BackPressure(unittest.TestCase):
    def test_backlog_turns_calls_away_and_drops_no_event(self):
        env = {"CALLGATE_TEST_EVIDENCE_HIGH_WATER": "16",
               "CALLGATE_TEST_EVIDENCE_STALL_MS": "300"}
        with cgtest.Daemon(flags=["--admit-queue", "1000000"], env=env) as d:
            results = []

            def one():
                r = d.request(cgtest.make_request([["rm", "-rf", "/"]]), timeout=60)
                results.append(r)
            threads = [threading.Thread(target=one) for _ in range(40)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(len(results), 40)  # every request was answered
            codes = [code_of(r) for r in results]
            self.assertIn("MCP-LOG-E-005", codes)
            denied = [r["reply"]["trace_id"] for r in results if r["status"] == "denied"]
            self.assertGreater(len(denied), 0)
            d.stop()
            # Every refusal that was answered is whole in the journal.
            for trace in denied:
                p = subprocess.run([cgtest.CALLGATE, "replay", "--no-write", "--state-dir",
                                    d.state_dir, trace], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = subprocess.run([cgtest.CALLGATE, "replay", "--all", "--no-write",
                                "--state-dir", d.state_dir], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])



def memory_cgroup(limit):
    """A memory cgroup of limit bytes below this process's own: (procs path,
    directory), or None when neither cgroup v1's memory controller nor v2's
    is ours to use."""
    name = "cg-e2e-oom-%d" % os.getpid()
    with open("/proc/self/cgroup") as f:
        lines = f.read().split("\n")
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            d = os.path.join("/sys/fs/cgroup/memory" + parts[2], name)
            knob = "memory.limit_in_bytes"
            break
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            base = "/sys/fs/cgroup" + parts[2]
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    if "memory" not in f.read().split():
                        continue
            except OSError:
                continue
            d = os.path.join(base, name)
            knob = "memory.max"
            break
    else:
        return None
    try:
        os.mkdir(d)
        with open(os.path.join(d, knob), "w") as f:
            f.write(str(limit))
    except OSError:
        return None
    return os.path.join(d, "cgroup.procs"), d


class DaemonInCgroup(cgtest.Daemon):
    """A daemon started inside the cgroup whose cgroup.procs is procs."""

    def __init__(self, procs, **kw):
        super().__init__(**kw)
        self.procs = procs

    def argv(self):
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs] + super().argv()


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("python3"), "needs root and python3")
class OutOfMemoryTakesTheCall(unittest.TestCase):
    """A call that filled its private /tmp inside the daemon's memory limit
    (systemd MemoryMax=, a container) had the kernel's OOM killer take
    callgated, whose RSS was the largest: every running call, waiting
    approval and grant went with it (attack, s36). Judged by the daemon's
    process after the call, and by the call's own end."""

    def test_a_calls_own_tmp_is_bounded_and_nothing_sharing_the_daemon_goes_first(self):
        # s43b F2: a call's private /tmp had a tmpfs's default size (half the
        # memory), and the view's builder, which shares the daemon's memory
        # until it execs, was marked for the OOM killer first: its kill took
        # the daemon. /tmp and /dev/shm hold at most 2 GiB; the mark comes
        # after exec. Judged by the call's own view of its /tmp and marks.
        with cgtest.Daemon() as d:
            size = ("import os; print(*(os.statvfs(p).f_blocks * os.statvfs(p).f_frsize "
                    "for p in ('/tmp', '/dev/shm')))")
            resp = d.request(cgtest.make_request([["python3", "-c", size]], privileged=False),
                             timeout=30)
            out = base64.b64decode(resp.get("stdout", "")).decode().split()
            self.assertEqual(len(out), 2, resp)
            self.assertTrue(all(int(n) <= 2 << 30 for n in out), out)
            # The mark is set by the daemon just after the exec: a command that
            # reads it at once may be quicker (a moment later it is there).
            look = "sleep 0.5; cat /proc/self/oom_score_adj /proc/1/oom_score_adj"
            resp = d.request(cgtest.make_request([["sh", "-c", look]], privileged=False),
                             timeout=30)
            self.assertEqual(base64.b64decode(resp["stdout"]).decode().split(),
                             ["1000", "1000"], resp)
            with open("/proc/%d/oom_score_adj" % d.proc.pid) as f:
                self.assertEqual(f.read().strip(), "0")

    def test_the_daemon_outlives_a_call_that_fills_memory(self):
        cg = memory_cgroup(256 << 20)
        if not cg:
            self.skipTest("no memory cgroup of ours to limit")
        procs, cgdir = cg
        d = DaemonInCgroup(procs)
        try:
            d.start()
            fill = "f = open('/tmp/fill', 'wb'); [f.write(b'x' * (1 << 20)) for _ in iter(int, 1)]"
            resp = d.request(cgtest.make_request([["python3", "-c", fill]], privileged=False,
                                                 timeout_ms=60000), timeout=90)
            self.assertIsNone(d.proc.poll(), "callgated was killed; log:\n" + d.log)
            # The call ended (killed), and says so; the daemon answers the next one.
            self.assertEqual(resp["status"], "ok", resp)
            self.assertNotEqual(resp["stages"][0]["exit_code"], 0, resp)
            ping = d.request(cgtest.make_request(None, action="ping"), timeout=10)
            self.assertEqual(ping["status"], "ok", ping)
            # Its commands and pid 1 were the OOM killer's first choice.
            look = "sleep 0.5; cat /proc/self/oom_score_adj /proc/1/oom_score_adj"
            resp = d.request(cgtest.make_request([["sh", "-c", look]], privileged=False),
                             timeout=30)
            out = base64.b64decode(resp.get("stdout", "")).decode()
            self.assertEqual(out.split(), ["1000", "1000"], resp)
            with open("/proc/%d/oom_score_adj" % d.proc.pid) as f:
                self.assertEqual(f.read().strip(), "0")
        finally:
            d.close()
            for _ in range(50):
                try:
                    os.rmdir(cgdir)
                    break
                except OSError:
                    time.sleep(0.1)



@unittest.skipUnless(os.geteuid() == 0 and shutil.which("tar"), "needs root and tar")
class EveryProgramRunnerHasAProcessBound(unittest.TestCase):
    """tar --checkpoint-action=exec ran 1,000 processes from a workspace
    writer's call, which set no limits, while an interpreter's was held at
    256 (attack, s36). Judged by how many of its children started."""

    def test_tar_checkpoint_action_is_held(self):
        with cgtest.Daemon() as d:
            ws = d.workspace
            with open(os.path.join(ws, "bomb.sh"), "w") as f:
                f.write("i=0; while [ $i -lt 400 ]; do sleep 2 & echo >> started; "
                        "i=$((i+1)); done\n")
            with open(os.path.join(ws, "big"), "wb") as f:
                f.write(os.urandom(2 << 20))
            resp = d.request(cgtest.make_request(
                [["tar", "-cf", "o.tar", "--checkpoint=100", "--checkpoint-action=exec=sh bomb.sh",
                  "big"]], privileged=False, timeout_ms=60000), timeout=90)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertEqual(resp["reply"]["data"]["rule_id"], "workspace-writers", resp)
            with open(os.path.join(ws, "started")) as f:
                started = len(f.read().splitlines())
            self.assertGreater(started, 10, "the control: the bomb ran")
            self.assertLessEqual(started, 256)


if __name__ == "__main__":
    unittest.main()
