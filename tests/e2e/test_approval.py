# SPDX-License-Identifier: MIT
"""Human approval, privilege and grants (issue 6), through a real daemon.

Each test starts callgated with --approval and talks to it as an agent would
(the agent socket) and as an operator would (the admin socket, the CLI, and
the terminal approver under tmux).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import base64

import cgtest

WAIT = 20.0


def b64(text):
    return base64.b64decode(text or "")


def call_async(d, req):
    """Send req on the agent socket in a thread; returns (thread, box) where
    box["resp"] gets the parsed response."""
    box = {}

    def run():
        try:
            box["resp"] = d.request(req, timeout=60)
        except Exception as e:  # surfaced by the test
            box["err"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def pending(d):
    r = d.admin("pending")
    return r["reply"]["data"]["pending"]


def wait_pending(d, n, timeout=WAIT):
    end = time.time() + timeout
    while time.time() < end:
        p = pending(d)
        if len(p) >= n:
            return p
        time.sleep(0.05)
    raise AssertionError("expected %d pending calls; log:\n%s" % (n, d.log))


def wait_empty(d, timeout=WAIT):
    end = time.time() + timeout
    while time.time() < end:
        if not pending(d):
            return
        time.sleep(0.05)
    raise AssertionError("queue did not empty; log:\n%s" % d.log)


def marker_call(d, name, **fields):
    """A privileged request that leaves a file behind if (and only if) it runs."""
    path = os.path.join(d.workspace, name)
    return path, cgtest.make_request([["touch", path]], reason="make " + name, **fields)


class Approval(unittest.TestCase):
    def setUp(self):
        self.d = cgtest.Daemon(flags=["--approval", "--approval-timeout", "15000"]).start()

    def tearDown(self):
        self.d.close()

    def test_privileged_call_waits_then_runs_as_root_once_approved(self):
        t, box = call_async(self.d, cgtest.make_request([["id", "-u"]], reason="who am i"))
        p = wait_pending(self.d, 1)[0]
        self.assertTrue(p["privileged"])
        self.assertEqual(p["pipeline"][0]["exe"], "/usr/bin/id")
        self.assertEqual(p["reason"], "who am i")
        self.assertEqual(p["peer"]["uid"], os.getuid())
        self.assertNotIn("resp", box, "nothing may answer before the approval")
        r = self.d.cli("approve", p["trace_id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"MCP-APPR-S-", r.stdout)  # what was done: stdout, not stderr
        t.join(WAIT)
        resp = box["resp"]
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(b64(resp["stdout"]).strip(), b"0")
        self.assertEqual(resp["reply"]["data"]["approved_by"], [os.getuid()])
        # The approved run's evidence replays PASS, with callgate and with the
        # independent verifier: a permit after UNKNOWN is legitimate once approved.
        tid = resp["reply"]["trace_id"]
        cgtest.wait_package_file(self.d.state_dir, tid, "events.ndjson", WAIT)
        rp = self.d.cli("replay", tid)
        self.assertEqual(rp.returncode, 0, rp.stdout + rp.stderr)
        vf = cgtest.verify_live([sys.executable, os.path.join(cgtest.SRCDIR, "docs",
                                                              "verify_trace.py"),
                                 self.d.state_dir, tid])
        self.assertEqual(vf.returncode, 0, vf.stdout + vf.stderr)

    def test_no_execution_without_approval_and_none_after_timeout(self):
        with cgtest.Daemon(flags=["--approval", "--approval-timeout", "800"]) as d:
            path, req = marker_call(d, "never")
            resp = d.request(req, timeout=WAIT)
            self.assertEqual(resp["status"], "timeout", resp)
            self.assertEqual(resp["reply"]["code"], "EN-APPR-D-002")
            self.assertEqual(resp["reply"]["type"], "D")
            # Which rule sent it to a person, and what to do (ux-s38 #9).
            self.assertIn("Rule %s sends it to a person" % resp["reply"]["params"]["rule_id"],
                          resp["reply"]["message"])
            self.assertIn("callgate approve", resp["reply"]["message"])
            self.assertFalse(os.path.exists(path), "ran without approval")
            # An approval after the deadline finds nothing to approve.
            r = d.admin("approve", trace_id=resp["reply"]["trace_id"], request_sha256="x")
            self.assertEqual(r["reply"]["code"], "MCP-APPR-I-001")
            time.sleep(0.3)
            self.assertFalse(os.path.exists(path))

    def test_deny_refuses_and_never_runs(self):
        path, req = marker_call(self.d, "denied")
        t, box = call_async(self.d, req)
        p = wait_pending(self.d, 1)[0]
        r = self.d.cli("deny", p["trace_id"], "--why", "not today")
        self.assertEqual(r.returncode, 0, r.stderr)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "denied")
        self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-001")
        self.assertIn("not today", box["resp"]["reply"]["message"])
        self.assertFalse(os.path.exists(path))

    def test_approval_for_a_cannot_run_b(self):
        pa, ra = marker_call(self.d, "a")
        pb, rb = marker_call(self.d, "b")
        ta, boxa = call_async(self.d, ra)
        wait_pending(self.d, 1)
        tb, boxb = call_async(self.d, rb)
        items = wait_pending(self.d, 2)
        a = next(i for i in items if i["id"] == ra["id"])
        b = next(i for i in items if i["id"] == rb["id"])
        self.assertNotEqual(a["request_sha256"], b["request_sha256"])
        # A's id with B's hash: refused, nothing approved, both still waiting.
        r = self.d.admin("approve", trace_id=a["trace_id"], request_sha256=b["request_sha256"])
        self.assertEqual(r["reply"]["code"], "MCP-APPR-I-002")
        self.assertEqual(len(pending(self.d)), 2)
        self.assertFalse(os.path.exists(pa) or os.path.exists(pb))
        # Approving A runs A only.
        r = self.d.admin("approve", trace_id=a["trace_id"], request_sha256=a["request_sha256"])
        self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001")
        ta.join(WAIT)
        self.assertEqual(boxa["resp"]["status"], "ok")
        self.assertTrue(os.path.exists(pa))
        self.assertFalse(os.path.exists(pb))
        self.d.admin("deny", trace_id=b["trace_id"])
        tb.join(WAIT)

    def test_an_approval_cannot_be_replayed(self):
        path, req = marker_call(self.d, "once")
        t, box = call_async(self.d, req)
        p = wait_pending(self.d, 1)[0]
        first = self.d.admin("approve", trace_id=p["trace_id"],
                             request_sha256=p["request_sha256"])
        self.assertEqual(first["reply"]["code"], "MCP-APPR-S-001")
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "ok")
        os.unlink(path)
        again = self.d.admin("approve", trace_id=p["trace_id"],
                             request_sha256=p["request_sha256"])
        self.assertEqual(again["reply"]["code"], "MCP-APPR-I-001")
        # The same request line sent again is a replayed id: refused, not re-run.
        resp = self.d.request(req)
        self.assertEqual(resp["reply"]["code"], "MCP-VAL-I-013")
        time.sleep(0.3)
        self.assertFalse(os.path.exists(path))

    def test_concurrent_approvers_first_answer_wins(self):
        path, req = marker_call(self.d, "race")
        t, box = call_async(self.d, req)
        p = wait_pending(self.d, 1)[0]
        results = []
        barrier = threading.Barrier(6)

        def approve():
            barrier.wait()
            results.append(self.d.admin("approve", trace_id=p["trace_id"],
                                        request_sha256=p["request_sha256"])["reply"]["code"])

        threads = [threading.Thread(target=approve) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(WAIT)
        self.assertEqual(results.count("MCP-APPR-S-001"), 1, results)
        # The losers see either "already answered" or "this uid already approved".
        self.assertEqual(len(results), 6)
        self.assertTrue(all(c in ("MCP-APPR-S-001", "MCP-APPR-I-001", "MCP-APPR-I-003")
                            for c in results), results)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "ok")

    def test_client_disconnect_withdraws_the_request(self):
        path, req = marker_call(self.d, "withdrawn")
        s = self.d.connect()
        s.sendall(cgtest.encode(req))
        p = wait_pending(self.d, 1)[0]
        s.close()
        wait_empty(self.d)
        r = self.d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
        self.assertEqual(r["reply"]["code"], "MCP-APPR-I-001")
        time.sleep(0.3)
        self.assertFalse(os.path.exists(path))
        text = cgtest.wait_package_file(self.d.state_dir, p["trace_id"], "events.ndjson",
                                        WAIT).decode()
        self.assertIn('"withdrawn"', text)
        self.assertNotIn('"permit"', text)
        # Said as what it was, not an error (ux-s40 L6); replay agrees.
        v = json.loads(cgtest.wait_package_file(self.d.state_dir, p["trace_id"],
                                                "verdict.json", WAIT))
        self.assertEqual(v["outcome"], "cancelled", v)
        r = self.d.cli("replay", p["trace_id"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_agent_socket_cannot_see_or_answer_the_queue(self):
        t, box = call_async(self.d, cgtest.make_request([["id"]]))
        p = wait_pending(self.d, 1)[0]
        for action in ("pending", "approve", "deny", "grant_open"):
            resp = self.d.request(cgtest.make_request(None, action=action,
                                                      trace_id=p["trace_id"]))
            self.assertEqual(resp["reply"]["type"], "I", resp)
            self.assertEqual(resp["status"], "error")
        self.assertEqual(len(pending(self.d)), 1, "still waiting")
        self.d.admin("deny", trace_id=p["trace_id"])
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "denied")

    def test_privileged_env_is_the_allow_list_only(self):
        req = cgtest.make_request([["env"]], env={"DEBIAN_FRONTEND": "noninteractive"})
        t, box = call_async(self.d, req)
        p = wait_pending(self.d, 1)[0]
        self.assertEqual(p["env"], {"DEBIAN_FRONTEND": "noninteractive"})
        self.d.cli("approve", p["trace_id"])
        t.join(WAIT)
        out = b64(box["resp"]["stdout"]).decode().splitlines()
        names = sorted(line.split("=", 1)[0] for line in out)
        self.assertEqual(names, ["DEBIAN_FRONTEND", "HOME", "LOGNAME", "PATH", "USER"])
        self.assertIn("USER=root", out)
        # And LD_PRELOAD gets its own specific refusal, never a silent strip.
        resp = self.d.request(cgtest.make_request([["env"]], env={"LD_PRELOAD": "/x.so"}))
        self.assertEqual(resp["reply"]["code"], "MCP-VAL-I-011")
        self.assertEqual(pending(self.d), [])


class WaitingOnATerminal(unittest.TestCase):
    """A `callgate run` waiting for a person says so, once, with the request
    id `callgate pending` shows: on a terminal, and off one (an agent's call
    sat in silence, ux-s39); with --json it is quiet."""

    def test_a_waiting_call_says_why_on_a_terminal_only(self):
        import pty
        with cgtest.Daemon(flags=["--approval", "--approval-timeout", "4500"]) as d:
            argv = [cgtest.CALLGATE, "--socket", d.socket, "run", "--id", "wait-note-1",
                    "--", "id", "-u"]
            master, slave = pty.openpty()
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=slave, cwd=d.workspace)
            os.close(slave)
            p.wait(timeout=WAIT)
            said = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                said += chunk
            os.close(master)
            self.assertEqual(p.returncode, 124, said)  # the approval timed out
            self.assertEqual(said.count(b"no answer yet"), 1, said)
            self.assertIn(b"request id wait-note-1", said)
            q = subprocess.run(argv[:5] + ["wait-note-2"] + argv[6:], capture_output=True,
                               stdin=subprocess.DEVNULL, cwd=d.workspace, timeout=WAIT)
            self.assertEqual(q.returncode, 124, q.stderr)
            self.assertEqual(q.stderr.count(b"no answer yet"), 1, q.stderr)
            self.assertIn(b"request id wait-note-2", q.stderr)
            j = subprocess.run(argv[:4] + ["--json", "--id", "wait-note-3"] + argv[6:],
                               capture_output=True, stdin=subprocess.DEVNULL, cwd=d.workspace,
                               timeout=WAIT)
            self.assertNotIn(b"no answer yet", j.stderr)


class ShutdownWithWaitingCalls(unittest.TestCase):
    def test_sigterm_answers_a_waiting_call_and_the_daemon_exits(self):
        d = cgtest.Daemon(flags=["--approval", "--approval-timeout", "60000"]).start()
        try:
            path, req = marker_call(d, "never-at-shutdown")
            t, box = call_async(d, req)
            wait_pending(d, 1)
            d.proc.send_signal(signal.SIGTERM)
            # A worker answering queued calls at shutdown must not deadlock.
            d.proc.wait(timeout=WAIT)
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "MCP-SYS-E-003", box)
            self.assertFalse(os.path.exists(path))
        finally:
            d.close()


class Grants(unittest.TestCase):
    def setUp(self):
        self.d = cgtest.Daemon(flags=["--approval", "--approval-timeout", "1500"]).start()

    def tearDown(self):
        self.d.close()

    def test_a_grant_matches_the_name_a_program_runs_under(self):
        # s43e F3: a privileged grant shown as `xz ./xzcat notes.txt` covered a
        # workspace link ./xzcat, which runs under xz's own name (./xz) and so
        # compressed the file as root. The grant's argv[0] must match that name.
        xz = shutil.which("xz")
        if not xz:
            self.skipTest("no xz here")
        os.symlink(xz, os.path.join(self.d.workspace, "xzcat"))
        r = self.d.cli("grant", "open", "--exe", os.path.realpath(xz), "--privileged",
                       "--argv", "./xzcat", "notes.txt", "--uses", "1", "--ttl", "60",
                       "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        notes = os.path.join(self.d.workspace, "notes.txt")
        with open(notes, "w") as f:
            f.write("my notes\n")
        run = self.d.request(cgtest.make_request([["./xzcat", "notes.txt"]], privileged=True,
                                                 cwd=self.d.workspace, timeout_ms=5000),
                             timeout=30)
        self.assertNotIn("grant_id", run["reply"].get("data", {}), run)
        self.assertTrue(os.path.exists(notes), run)
        self.assertFalse(os.path.exists(notes + ".xz"), run)

    def test_argv_patterns_may_be_options(self):
        # `--argv dpkg --version` was cut at --version ("unknown option"); only grant
        # options end the list, and one of their names is written quoted.
        r = self.d.cli("grant", "open", "--exe", "/usr/bin/dpkg", "--argv", "dpkg", "--version",
                       "--uses", "1", "--ttl", "60", "--timeout", "20s", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        g = self.d.admin("grant_list")["reply"]["data"]["grants"][0]
        self.assertEqual(g["pipeline"][0]["argv"], ["dpkg", "--version"])
        self.assertEqual(g["timeout_ms"], 20000)
        r = self.d.cli("grant", "open", "--exe", "/usr/bin/echo", "--argv", "echo", "\\--uses",
                       "--uses", "1", "--ttl", "60", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        g = [x for x in self.d.admin("grant_list")["reply"]["data"]["grants"]
             if x["pipeline"][0]["exe"] == "/usr/bin/echo"][0]
        self.assertEqual(g["pipeline"][0]["argv"], ["echo", "\\--uses"])  # matches "--uses"

    def test_exe_by_name_is_the_controlled_paths(self):
        # ux-s40 L12: `--exe wget` needed an absolute path.
        r = self.d.cli("grant", "open", "--exe", "echo", "--argv", "echo", "hi",
                       "--uses", "1", "--ttl", "60", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"--exe echo is /usr/bin/echo", r.stderr)
        g = self.d.admin("grant_list")["reply"]["data"]["grants"][0]
        self.assertEqual(g["pipeline"][0]["exe"], os.path.realpath("/usr/bin/echo"))
        r = self.d.cli("grant", "open", "--exe", "no-such-prog-cg", "--argv", "x",
                       "--uses", "1", "--ttl", "60")
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn(b"not found on the controlled PATH", r.stderr)
        self.assertEqual(len(self.d.admin("grant_list")["reply"]["data"]["grants"]), 1)

    def test_grant_runs_its_shape_for_its_uses_then_expires_back_to_approval(self):
        r = self.d.cli("grant", "open", "--exe", "/usr/bin/id", "--argv", "id", "-u",
                       "--privileged", "--uses", "2", "--ttl", "60", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        g = json.loads(r.stdout)["reply"]
        self.assertEqual(g["code"], "CT-OPEN-S-001")
        gid = g["data"]["grant_id"]
        # The reply names the trace that recorded the opening (it named a fresh id).
        opened = cgtest.wait_package_file(self.d.state_dir, g["trace_id"], "events.ndjson")
        self.assertIn(gid, opened if isinstance(opened, str) else opened.decode())
        # Its verdict reads as a grant opened, not as a refusal of the whole request.
        shown = self.d.cli("verdict", g["trace_id"]).stdout.decode()
        self.assertIn("# Verdict: GRANT OPENED", shown)
        self.assertIn("## Blocked\n\n- nothing", shown)
        self.assertNotIn("refused before the policy", shown)
        # Its log line says what it opened and who (it read "0/0 ... []").
        line = [l for l in self.d.cli("log").stdout.decode().splitlines()
                if g["trace_id"] in l][0]
        self.assertIn(" %d/- " % os.getuid(), line)
        self.assertTrue(line.endswith("grant_open: id -u"), line)
        vf = cgtest.verify_live([sys.executable, os.path.join(cgtest.SRCDIR, "docs",
                                                              "verify_trace.py"),
                                 self.d.state_dir, g["trace_id"]])
        self.assertEqual(vf.returncode, 0, vf.stdout + vf.stderr)
        for left in (1, 0):
            resp = self.d.request(cgtest.make_request([["id", "-u"]]), timeout=WAIT)
            self.assertEqual(resp["status"], "ok", resp)
            self.assertEqual(resp["reply"]["data"]["grant_id"], gid)
        # Another shape is not covered, and the used-up grant is gone: back to a human.
        resp = self.d.request(cgtest.make_request([["id", "-u"]]), timeout=WAIT)
        self.assertEqual(resp["reply"]["code"], "EN-APPR-D-002")
        lst = self.d.admin("grant_list")
        self.assertEqual(lst["reply"]["data"]["grants"], [])
        # Each use is evidence, with the grant id: one approval.answered per use
        # in the journal (the source of truth; it is written asynchronously).
        jdir = os.path.join(self.d.state_dir, "journal")
        end, uses = time.time() + WAIT, 0
        while time.time() < end:
            uses = 0
            for seg in sorted(os.listdir(jdir)):
                if seg.endswith(".ndjson"):
                    with open(os.path.join(jdir, seg)) as f:
                        uses += sum(1 for line in f if '"approval.answered"' in line
                                    and gid in line and '"grant"' in line)
            if uses >= 2:
                break
            time.sleep(0.1)
        self.assertEqual(uses, 2)

    def test_grant_scope_session_and_argv(self):
        r = self.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/bin/id", "argv": ["id", "-u"]}],
            "session": "proj-*", "privileged": True, "uses": 5, "ttl_s": 60})
        self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001")
        ok = self.d.request(cgtest.make_request([["id", "-u"]], session="proj-a"))
        self.assertEqual(ok["status"], "ok")
        other = self.d.request(cgtest.make_request([["id", "-u"]], session="else"))
        self.assertEqual(other["reply"]["code"], "EN-APPR-D-002")
        shape = self.d.request(cgtest.make_request([["id", "-g"]], session="proj-a"))
        self.assertEqual(shape["reply"]["code"], "EN-APPR-D-002")

    def test_invalid_grant_requests_get_ct_codes_and_close_works(self):
        bad = self.d.admin("grant_open", grant={"pipeline": [{"exe": "id", "argv": ["id"]}],
                                                "uses": 1, "ttl_s": 10})
        self.assertEqual(bad["reply"]["code"], "CT-OPEN-I-001")
        bad = self.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/bin/id", "argv": ["id"]}], "uses": 1})
        self.assertEqual(bad["reply"]["code"], "CT-OPEN-I-001")
        nf = self.d.admin("grant_close", grant_id="nope")
        self.assertEqual(nf["reply"]["code"], "CT-CLOSE-I-001")
        ok = self.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/bin/id", "argv": ["id"]}], "privileged": True, "uses": 1,
            "ttl_s": 10})
        gid = ok["reply"]["data"]["grant_id"]
        closed = self.d.cli("grant", "close", gid)
        self.assertEqual(closed.returncode, 0, closed.stderr)
        resp = self.d.request(cgtest.make_request([["id"]]))
        self.assertEqual(resp["reply"]["code"], "EN-APPR-D-002")

    def test_grant_never_overrides_a_block(self):
        r = self.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/sbin/mkfs.ext4", "argv": ["**"]}],
            "uses": 5, "ttl_s": 60})
        self.assertEqual(r["reply"]["code"], "CT-OPEN-S-001")
        resp = self.d.request(cgtest.make_request([["mkfs.ext4", "/dev/null"]],
                                                  privileged=False))
        self.assertEqual(resp["status"], "denied")
        self.assertEqual(resp["reply"]["type"], "D")
        self.assertNotIn("grant_id", resp["reply"].get("data", {}))


class GrantWithoutApproval(unittest.TestCase):
    """Approval off: an UNKNOWN is refused at once (one event) only while no
    grant could cover it; with a grant open it is looked up, and runs when
    the grant covers it."""

    def setUp(self):
        self.d = cgtest.Daemon().start()

    def tearDown(self):
        self.d.close()

    def events_of(self, tid):
        text = cgtest.wait_package_file(self.d.state_dir, tid, "events.ndjson", WAIT)
        return [json.loads(line)["type"] for line in text.splitlines()]

    def test_grant_is_found_and_uncovered_calls_are_still_refused(self):
        no = self.d.request(cgtest.make_request([["id", "-u"]]))
        self.assertEqual(no["reply"]["code"], "EN-EXEC-D-003", no)
        self.assertEqual(self.events_of(no["reply"]["trace_id"]), ["refusal"])
        ok = self.d.admin("grant_open", grant={
            "pipeline": [{"exe": "/usr/bin/id", "argv": ["id", "-u"]}], "privileged": True,
            "uses": 1, "ttl_s": 60})
        self.assertEqual(ok["reply"]["code"], "CT-OPEN-S-001", ok)
        ran = self.d.request(cgtest.make_request([["id", "-u"]]), timeout=WAIT)
        self.assertEqual(ran["status"], "ok", ran)
        self.assertEqual(ran["reply"]["data"]["grant_id"], ok["reply"]["data"]["grant_id"])
        # The grant is used up, so none is open: refused at once again.
        again = self.d.request(cgtest.make_request([["id", "-u"]]))
        self.assertEqual(again["reply"]["code"], "EN-EXEC-D-003", again)
        self.assertEqual(self.events_of(again["reply"]["trace_id"]), ["refusal"])


class AgentAsksForGrant(unittest.TestCase):
    """The agent socket may ask for a grant; only a human opens it."""

    SPEC = {"pipeline": [{"exe": "/usr/bin/id", "argv": ["id", "-u"]}], "privileged": True,
            "uses": 2, "ttl_s": 60}

    def setUp(self):
        self.d = cgtest.Daemon(flags=["--approval", "--approval-timeout", "15000"]).start()

    def tearDown(self):
        self.d.close()

    def ask(self, spec, **fields):
        return cgtest.make_request(None, action="grant", grant=spec,
                                   reason="let me check my uid", **fields)

    def test_approved_request_opens_the_grant_which_then_runs_unprompted(self):
        t, box = call_async(self.d, self.ask(self.SPEC))
        p = wait_pending(self.d, 1)[0]
        self.assertEqual(p["kind"], "grant")
        self.assertEqual(p["grant"]["uid"], os.getuid(), "scoped to the asking uid")
        # Nothing is open until a human says so.
        self.assertEqual(self.d.admin("grant_list")["reply"]["data"]["grants"], [])
        self.d.cli("approve", p["trace_id"])
        t.join(WAIT)
        resp = box["resp"]
        self.assertEqual(resp["reply"]["code"], "CT-OPEN-S-001", resp)
        gid = resp["reply"]["data"]["grant_id"]
        run = self.d.request(cgtest.make_request([["id", "-u"]]))
        self.assertEqual(run["status"], "ok", run)
        self.assertEqual(run["reply"]["data"]["grant_id"], gid)
        self.assertEqual(pending(self.d), [])
        rp = self.d.cli("replay", resp["reply"]["trace_id"])
        end = time.time() + WAIT
        while rp.returncode != 0 and time.time() < end:
            time.sleep(0.1)
            rp = self.d.cli("replay", resp["reply"]["trace_id"])
        self.assertEqual(rp.returncode, 0, rp.stdout + rp.stderr)

    def test_the_program_shown_is_the_program_the_grant_opens_for(self):
        # s43b F1: the screen named a link as the agent wrote it, and the grant
        # opened for wherever it pointed at the yes: re-pointed from echo to
        # dash after display, it opened for dash and ran dash as root. Now the
        # program is resolved when the request is checked, shown with the path
        # as sent, and the grant opens for that program whatever the link
        # says later. Judged by what is open and by what the link runs.
        link = os.path.join(self.d.workspace, "tool")
        marker = os.path.join(self.d.workspace, "DASH_RAN")
        os.symlink("/usr/bin/echo", link)
        spec = {"pipeline": [{"exe": link, "argv": ["./tool", "**"]}], "privileged": True,
                "uses": 1, "ttl_s": 60}
        t, box = call_async(self.d, self.ask(spec))
        p = wait_pending(self.d, 1)[0]
        stage = p["grant"]["pipeline"][0]
        echo = os.path.realpath("/usr/bin/echo")
        self.assertEqual((stage["exe"], stage["as_sent"]), (echo, link))
        self.assertIn("a link to the program above", self.d.cli("pending").stdout.decode())
        os.remove(link)
        os.symlink(os.path.realpath("/bin/sh"), link)
        self.d.cli("approve", p["trace_id"])
        t.join(WAIT)
        self.assertEqual(box["resp"]["reply"]["code"], "CT-OPEN-S-001", box["resp"])
        grants = self.d.admin("grant_list")["reply"]["data"]["grants"]
        self.assertEqual([g["pipeline"][0]["exe"] for g in grants], [echo], grants)
        # The link now names dash: the grant (for echo) does not cover it.
        gate = self.d.request(cgtest.make_request([["./tool", "-c", "touch " + marker]],
                                                  action="gate", privileged=True,
                                                  cwd=self.d.workspace))
        self.assertNotIn("grant_id", gate["reply"].get("data", {}), gate)
        self.assertNotEqual(gate["reply"]["data"].get("decision"), "ALLOW", gate)
        self.assertFalse(os.path.exists(marker))

    def test_the_name_a_program_runs_under_is_shown(self):
        # s43b F4: shown as ./xzcat notes.txt (a workspace link to xz), the call
        # ran as xz, which reads its own name: it compressed the file in place.
        xz = shutil.which("xz")
        if not xz:
            self.skipTest("no xz here")
        os.symlink(xz, os.path.join(self.d.workspace, "xzcat"))
        t, box = call_async(self.d, cgtest.make_request([["./xzcat", "notes.txt"]],
                                                        cwd=self.d.workspace))
        p = wait_pending(self.d, 1)[0]
        self.assertEqual(p["pipeline"][0]["argv0"], "./xz", p["pipeline"][0])
        screen = self.d.cli("pending").stdout.decode()
        self.assertIn("runs as", screen)
        self.assertIn("./xz (NOT argv[0] below", screen)
        self.d.cli("deny", p["trace_id"])
        t.join(WAIT)

    def test_denied_request_opens_nothing(self):
        t, box = call_async(self.d, self.ask(self.SPEC))
        p = wait_pending(self.d, 1)[0]
        self.d.cli("deny", p["trace_id"])
        t.join(WAIT)
        self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-001")
        self.assertEqual(self.d.admin("grant_list")["reply"]["data"]["grants"], [])

    def test_invalid_or_foreign_requests_are_refused_at_once(self):
        bad = self.d.request(self.ask({"pipeline": [{"exe": "id", "argv": ["id"]}],
                                       "uses": 1, "ttl_s": 5}))
        self.assertEqual(bad["reply"]["code"], "CT-OPEN-I-001", bad)
        other = dict(self.SPEC, uid=os.getuid() + 1)
        resp = self.d.request(self.ask(other))
        self.assertEqual(resp["reply"]["code"], "CT-OPEN-I-002", resp)
        missing = self.d.request(cgtest.make_request(None, action="grant"))
        self.assertEqual(missing["reply"]["code"], "MCP-VAL-I-023")
        self.assertEqual(pending(self.d), [])

    def test_without_approval_a_grant_request_is_refused(self):
        with cgtest.Daemon() as d:
            resp = d.request(self.ask(self.SPEC))
            self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-004", resp)


class NPerson(unittest.TestCase):
    def policy(self):
        with open(os.path.join(cgtest.SRCDIR, "tests/e2e/two_person_policy.yaml")) as f:
            return f.read()

    def test_the_refusals_say_how_many_people(self):
        # A rule needing two people was refused with "an operator can open a
        # grant", which never covers it, and timed out as "No approver
        # answered" after one had (s36 walk).
        with cgtest.Daemon(policy_text=self.policy()) as d:
            path = os.path.join(d.workspace, "two")
            resp = d.request(cgtest.make_request([["touch", path]], privileged=False))
            self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-006", resp)
            self.assertIn("2 distinct approvers", resp["reply"]["message"])
            self.assertNotIn("grant open", resp["reply"]["message"])
            self.assertFalse(os.path.exists(path))
        with cgtest.Daemon(policy_text=self.policy(),
                           flags=["--approval", "--approval-timeout", "1500"]) as d:
            path = os.path.join(d.workspace, "two")
            t, box = call_async(d, cgtest.make_request([["touch", path]], privileged=False))
            p = wait_pending(d, 1)[0]
            d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
            t.join(WAIT)
            self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-006", box)
            self.assertIn("1 of the 2", box["resp"]["reply"]["message"])
            self.assertFalse(os.path.exists(path))

    def test_two_distinct_approvers_are_needed(self):
        with open(os.path.join(cgtest.SRCDIR, "tests/e2e/two_person_policy.yaml")) as f:
            policy = f.read()
        with cgtest.Daemon(policy_text=policy,
                           flags=["--approval", "--approval-timeout", "15000",
                                  "--admin-group", "nogroup", "--approver-uid", "0",
                                  "--approver-uid", "65534"]) as d:
            os.chmod(d.tmp, 0o755)
            path = os.path.join(d.workspace, "two")
            t, box = call_async(d, cgtest.make_request([["touch", path]], privileged=False))
            p = wait_pending(d, 1)[0]
            self.assertEqual(p["approvers_needed"], 2)
            first = d.admin("approve", trace_id=p["trace_id"],
                            request_sha256=p["request_sha256"])
            self.assertEqual(first["reply"]["code"], "MCP-APPR-S-001")
            self.assertEqual(first["reply"]["params"]["have"], 1)
            # The same person again does not count twice.
            again = d.admin("approve", trace_id=p["trace_id"],
                            request_sha256=p["request_sha256"])
            self.assertEqual(again["reply"]["code"], "MCP-APPR-I-003")
            time.sleep(0.3)
            self.assertFalse(os.path.exists(path), "one approval of two must not run it")
            self.assertNotIn("resp", box)

            # A second, distinct uid (nobody, in the approver group) completes it.
            req = {"action": "approve", "trace_id": p["trace_id"],
                   "request_sha256": p["request_sha256"], "id": "second"}
            second = cgtest.as_uid(65534, lambda: cgtest.parse_response(
                cgtest.send_recv(d.admin_socket, cgtest.encode(req))))
            self.assertEqual(second["reply"]["code"], "MCP-APPR-S-001", second)
            t.join(WAIT)
            self.assertEqual(box["resp"]["status"], "ok", box)
            self.assertEqual(sorted(box["resp"]["reply"]["data"]["approved_by"]),
                             [0, 65534])
            self.assertTrue(os.path.exists(path))


class NonRootDaemon(cgtest.Daemon):
    """callgated running as nobody (65534), started through setpriv."""

    def __init__(self, **kw):
        super().__init__(**kw)
        os.chown(self.tmp, 65534, 65534)
        os.chown(self.workspace, 65534, 65534)

    def argv(self):
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + super().argv()


@unittest.skipUnless(shutil.which("setpriv") and shutil.which("sudo"), "util-linux and sudo")
class PrivilegedFromNonRootDaemon(unittest.TestCase):
    """With the daemon as a normal user, privileged stages go through sudo -n."""

    def setUp(self):
        # The test runs as root: an approver once configured (default: the owner, nobody).
        self.d = NonRootDaemon(flags=["--approval", "--approval-timeout", "15000",
                                      "--approver-uid", "0"]).start()

    def tearDown(self):
        self.d.close()

    def approve_next(self):
        p = wait_pending(self.d, 1)[0]
        r = self.d.admin("approve", trace_id=p["trace_id"], request_sha256=p["request_sha256"])
        self.assertEqual(r["reply"]["code"], "MCP-APPR-S-001", r)
        return p

    def test_sudo_needing_a_password_is_a_clear_error(self):
        # No dead end (issue 12): sudo -n cannot run it, so nobody is asked.
        req = cgtest.make_request([["apt-get", "--version"]],
                                  env={"DEBIAN_FRONTEND": "noninteractive"})
        resp = self.d.request(req, timeout=WAIT)
        self.assertEqual(pending(self.d), [])
        self.assertEqual(resp["reply"]["code"], "MCP-EXEC-E-020", resp)
        self.assertEqual(resp["reply"]["type"], "E")
        self.assertEqual(resp["reply"]["params"]["exe"], "/usr/bin/apt-get")
        self.assertEqual(resp["status"], "error")

    def test_with_nobody_to_ask_the_refusal_says_so_first(self):
        # A new user's first `callgate run -- id` on a non-root daemon without
        # --approval read "cannot be enforced on this kernel" (E, exit 70),
        # where the fix was --no-privileged (s36 walk).
        with NonRootDaemon() as d:
            resp = d.request(cgtest.make_request([["id", "-u"]]), timeout=WAIT)
            self.assertEqual(resp["reply"]["code"], "EN-EXEC-D-003", resp)
            self.assertEqual(resp["status"], "denied")
            r = d.cli("run", "--", "id", "-u")
            self.assertEqual(r.returncode, 77, r.stderr)
            self.assertIn(b"EN-EXEC-D-003", r.stderr)

    def test_constraints_sudo_cannot_honour_refuse_the_call(self):
        # id is a read-only tool: allowed only under a filesystem/network
        # confinement that sudo (which needs to gain privilege) cannot run under.
        # Refused before anyone is asked: an approval could not make it run.
        # Said as what it is (ux-s40 M1): not "this kernel" with an E (report
        # it, exit 70), but an I naming the daemon's uid and the fix.
        resp = self.d.request(cgtest.make_request([["id", "-u"]]), timeout=WAIT)
        self.assertEqual(pending(self.d), [])
        self.assertEqual(resp["reply"]["code"], "MCP-CONF-I-001", resp)
        self.assertIn("runs as uid 65534", resp["reply"]["message"])
        self.assertNotIn("stdout", resp)
        r = self.d.cli("run", "--", "id", "-u")
        self.assertEqual(r.returncode, 65, r.stderr)
        # gate, the dry run, says so too, rather than promise an approval.
        r = self.d.cli("gate", "--", "id", "-u")
        self.assertEqual(r.returncode, 65, r.stdout)  # as run exits
        self.assertIn(b"next:        it would be refused at once: MCP-CONF-I-001", r.stdout)
        self.assertEqual(pending(self.d), [])

    def test_unprivileged_calls_still_run_confined_as_the_daemon_user(self):
        resp = self.d.request(cgtest.make_request([["id", "-u"]], privileged=False))
        self.assertEqual(resp["status"], "ok", resp)
        self.assertEqual(b64(resp["stdout"]).strip(), b"65534")


@unittest.skipUnless(shutil.which("tmux"), "tmux is installed by scripts/setup")
class TerminalApprover(unittest.TestCase):
    """The approver as a person uses it: tmux, send-keys, capture-pane."""

    def setUp(self):
        self.d = cgtest.Daemon(flags=["--approval", "--approval-timeout", "20000"]).start()
        self.session = "cgapprove%d" % os.getpid()
        cmd = "%s --socket %s --admin-socket %s approve" % (
            cgtest.CALLGATE, self.d.socket, self.d.admin_socket)
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", "160", "-y",
                        "50", cmd], check=True)

    def tearDown(self):
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)
        self.d.close()

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.session],
                              capture_output=True, text=True).stdout

    def wait_screen(self, needle):
        end = time.time() + WAIT
        while time.time() < end:
            s = self.screen()
            if needle in s:
                return s
            time.sleep(0.1)
        raise AssertionError("screen never showed %r:\n%s\nlog:\n%s" % (needle, self.screen(),
                                                                       self.d.log))

    def test_y_runs_the_request_shown(self):
        self.wait_screen("no calls are waiting")
        path, req = marker_call(self.d, "tui-yes")
        t, box = call_async(self.d, req)
        s = self.wait_screen("[y] approve once")
        self.assertIn("/usr/bin/touch", s)
        self.assertIn(path, s)
        self.assertIn("make tui-yes", s)
        # The row says what binds a privileged call: no view, but its rule's
        # constraint sets (touch in the workspace has some) still apply.
        self.assertIn("privileged     YES: runs as root", s)
        self.assertIn("still", s)
        self.assertIn("chown any file inside", s)  # what the terms do not reach is said too
        self.assertNotIn("outside any confinement", s)
        self.assertIn("the agent can write here", s)  # the cwd's code runs as root too
        subprocess.run(["tmux", "send-keys", "-t", self.session, "y"], check=True)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "ok", box)
        self.assertTrue(os.path.exists(path))

    def test_n_refuses(self):
        self.wait_screen("no calls are waiting")
        path, req = marker_call(self.d, "tui-no")
        t, box = call_async(self.d, req)
        self.wait_screen("[y] approve once")
        subprocess.run(["tmux", "send-keys", "-t", self.session, "n"], check=True)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "denied")
        self.assertEqual(box["resp"]["reply"]["code"], "EN-APPR-D-001")
        self.assertFalse(os.path.exists(path))

    def test_d_denies_with_the_reason_typed(self):
        self.wait_screen("no calls are waiting")
        path, req = marker_call(self.d, "tui-why")
        t, box = call_async(self.d, req)
        self.wait_screen("[d] deny, saying why")
        # Esc goes back: nothing is answered.
        subprocess.run(["tmux", "send-keys", "-t", self.session, "d"], check=True)
        self.wait_screen("reason the agent is told")
        subprocess.run(["tmux", "send-keys", "-t", self.session, "-l", "oops"], check=True)
        subprocess.run(["tmux", "send-keys", "-t", self.session, "Escape"], check=True)
        self.wait_screen("not denied: no reason was given")
        time.sleep(0.3)
        self.assertTrue(t.is_alive(), "Esc answered the call")
        self.assertEqual(len(pending(self.d)), 1)
        subprocess.run(["tmux", "send-keys", "-t", self.session, "d"], check=True)
        self.wait_screen("reason the agent is told")
        # A typo taken back with backspace is not sent.
        subprocess.run(["tmux", "send-keys", "-t", self.session, "-l", "use make checkX"],
                       check=True)
        subprocess.run(["tmux", "send-keys", "-t", self.session, "BSpace", "Enter"], check=True)
        t.join(WAIT)
        self.assertEqual(box["resp"]["status"], "denied")
        self.assertIn("use make check", box["resp"]["reply"]["message"])
        self.assertNotIn("checkX", box["resp"]["reply"]["message"])
        self.assertFalse(os.path.exists(path))

    def test_a_stray_key_answers_nothing_and_q_leaves_it_waiting(self):
        # A pager key pressed by reflex once denied a call not yet read.
        self.wait_screen("no calls are waiting")
        path, req = marker_call(self.d, "tui-stray")
        t, box = call_async(self.d, req)
        self.wait_screen("[y] approve once")
        for key in ("Down", "Enter", "PageDown", "j", "x"):  # x last: its note stays
            subprocess.run(["tmux", "send-keys", "-t", self.session, key], check=True)
        self.wait_screen("no other key answers")
        time.sleep(0.3)
        p = pending(self.d)
        self.assertEqual(len(p), 1, "a stray key answered the call")
        self.assertTrue(t.is_alive())
        subprocess.run(["tmux", "send-keys", "-t", self.session, "q"], check=True)
        end = time.time() + WAIT
        while time.time() < end and subprocess.run(
                ["tmux", "has-session", "-t", self.session], capture_output=True).returncode == 0:
            time.sleep(0.1)
        self.assertEqual([x["trace_id"] for x in pending(self.d)], [p[0]["trace_id"]],
                         "q left the call waiting")
        self.d.admin("deny", trace_id=p[0]["trace_id"])
        t.join(WAIT)
        self.assertFalse(os.path.exists(path))

    def test_hostile_reason_renders_inert(self):
        self.wait_screen("no calls are waiting")
        # The wire refuses raw control characters outright; what can reach the
        # screen is printable look-alikes, and anything else is escaped.
        hostile = "\x1b[2J\x1b[H APPROVED: ls -l"
        resp = self.d.request(cgtest.make_request([["id"]], reason=hostile), timeout=WAIT)
        self.assertEqual(resp["reply"]["code"], "MCP-VAL-I-012")
        path, req = marker_call(self.d, "tui-hostile")
        req["reason"] = "please [y] \\x1b[31m totally safe <U+202E> ls"
        t, box = call_async(self.d, req)
        s = self.wait_screen("[y] approve once")
        self.assertIn("/usr/bin/touch", s)
        self.assertIn("\\x1b[31m", s, "escape text is shown literally")
        subprocess.run(["tmux", "send-keys", "-t", self.session, "n"], check=True)
        t.join(WAIT)
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    unittest.main()
