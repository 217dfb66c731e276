# SPDX-License-Identifier: MIT
"""End-to-end tests of the evidence trail (docs/evidence.md): trace packages
from a real daemon, the verdict/replay/log/key tools, tamper detection by
`callgate replay` and by the independent verifier docs/verify_trace.py, and
crash safety under SIGKILL during governed calls."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import cgtest

VERIFIER = os.path.join(cgtest.SRCDIR, "docs", "verify_trace.py")
# These tests read and tamper with packages as directories (traces/ID/); the
# default, packages appended to archives, is tried in test_retention.py.
with open(os.path.join(cgtest.SRCDIR, "etc", "callgate", "policy.yaml")) as f:
    DIRS = f.read() + "\nevidence:\n  packages: directories\n"
FIVE = ["diff.json", "events.ndjson", "replay.json", "verdict.json", "verdict.md"]


def wait_package(state, tid, timeout=cgtest.DEFAULT_TIMEOUT):
    """The package is written by the daemon's writer thread just after the reply."""
    d = os.path.join(state, "traces", tid)
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(d, "verdict.md")):
        if time.monotonic() > deadline:
            raise AssertionError("no package for trace %s" % tid)
        time.sleep(0.02)
    return d


def cli(state, *args, timeout=cgtest.DEFAULT_TIMEOUT):
    return subprocess.run([cgtest.CALLGATE, "--state-dir", state] + list(args),
                          capture_output=True, timeout=timeout)


def verifier(*args):
    return subprocess.run([sys.executable, VERIFIER] + list(args), capture_output=True,
                          timeout=cgtest.DEFAULT_TIMEOUT)


def verifier_live(*args):
    """The verifier against a running daemon's state (cgtest.verify_live)."""
    return cgtest.verify_live([sys.executable, VERIFIER] + list(args))


class EvidenceTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(policy_text=DIRS).start()
        ok = cls.d.request(cgtest.make_request([["/bin/true"]], privileged=False,
                                               session="sess-a"))
        assert ok["status"] == "ok", ok
        cls.allowed = ok["reply"]["trace_id"]
        no = cls.d.request(cgtest.make_request([["/bin/rm", "-rf", "/"]], privileged=False,
                                               session="sess-b"))
        assert no["status"] == "denied", no
        cls.denied = no["reply"]["trace_id"]
        cls.state = cls.d.state_dir
        wait_package(cls.state, cls.allowed)
        wait_package(cls.state, cls.denied)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def test_package_has_exactly_five_files(self):
        for tid in (self.allowed, self.denied):
            self.assertEqual(sorted(os.listdir(os.path.join(self.state, "traces", tid))), FIVE)

    def test_verdict_prints_markdown_and_json(self):
        p = cli(self.state, "verdict", self.denied)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"# Verdict: BLOCK", p.stdout)
        self.assertIn(b"rm-recursive", p.stdout)
        p = cli(self.state, "verdict", self.allowed, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        v = json.loads(p.stdout)
        self.assertEqual(v["decision"], "ALLOW")
        self.assertEqual(v["reply"]["type"], "S")
        self.assertTrue(v["executed"])
        for k in ("summary", "why", "constrained", "blocked", "next_steps", "confidence"):
            self.assertIn(k, v)
        self.assertEqual(cli(self.state, "verdict", "no-such-trace").returncode, 1)

    def test_replay_of_an_unknown_trace_is_not_found_not_a_broken_journal(self):
        # A mistyped id is not tampering: the journal line says PASS, the exit
        # status is 66 (no such input), and the message says what is missing.
        # A known trace still replays PASS beside it.
        p = cli(self.state, "replay", "00000000-0000-4000-8000-000000000000")
        self.assertEqual(p.returncode, 66, p.stdout + p.stderr)
        self.assertTrue(p.stdout.startswith(b"PASS  journal:"), p.stdout)
        self.assertIn(b"no trace 00000000-0000-4000-8000-000000000000", p.stderr)
        j = cli(self.state, "replay", "00000000-0000-4000-8000-000000000000", "--json")
        self.assertEqual(j.returncode, 66, j.stderr)
        self.assertEqual([f["check"] for f in json.loads(j.stdout)["failures"]],
                         ["trace_unknown"])
        self.assertEqual(cli(self.state, "replay", self.denied).returncode, 0)

    def test_denied_call_is_one_refusal_event(self):
        # A call refused at once is one event holding request, resolution,
        # decision and reply (docs/evidence.md "Refusals"); nothing was permitted.
        with open(os.path.join(self.state, "traces", self.denied, "events.ndjson")) as f:
            events = [json.loads(l) for l in f]
        self.assertEqual([e["type"] for e in events], ["refusal"])
        p = events[0]["payload"]
        self.assertEqual(p["request"]["pipeline"], [["/bin/rm", "-rf", "/"]])
        self.assertEqual(p["request"]["session"], "sess-b")
        self.assertEqual(p["peer"]["uid"], os.getuid())
        self.assertEqual(p["resolved"]["stages"][0]["exe"], os.path.realpath("/bin/rm"))
        self.assertEqual(p["decision"]["decision"], "BLOCK")
        self.assertEqual(p["decision"]["rule_id"], "rm-recursive-elsewhere")
        self.assertEqual((p["reply"]["type"], p["reply"]["code"]), ("D", "EN-EXEC-D-001"))
        self.assertEqual(len(p["decision"]["policy"]["sha256"]), 64)
        with open(os.path.join(self.state, "traces", self.denied, "verdict.json")) as f:
            v = json.load(f)
        self.assertEqual((v["decision"], v["outcome"], v["executed"]),
                         ("BLOCK", "blocked", False))
        self.assertEqual(v["reply"]["message"], p["reply"]["message"])

    def test_unknown_with_nobody_to_ask_is_one_refusal_event(self):
        # Approval off and no grant open: a privileged call (the protocol's
        # default) cannot reach a person, so it is refused at once, as one
        # event, with the decision it had: UNKNOWN.
        made = os.path.join(self.d.workspace, "made-without-a-person")
        no = self.d.request(cgtest.make_request([["touch", made]]))
        self.assertEqual((no["status"], no["reply"]["code"]), ("denied", "EN-EXEC-D-003"), no)
        self.assertFalse(os.path.exists(made), "the refused call ran")
        tid = no["reply"]["trace_id"]
        wait_package(self.state, tid)
        with open(os.path.join(self.state, "traces", tid, "events.ndjson")) as f:
            events = [json.loads(l) for l in f]
        self.assertEqual([e["type"] for e in events], ["refusal"])
        p = events[0]["payload"]
        self.assertEqual((p["decision"]["decision"], p["decision"]["rung"]),
                         ("UNKNOWN", "privilege"))
        with open(os.path.join(self.state, "traces", tid, "verdict.json")) as f:
            v = json.load(f)
        self.assertEqual((v["decision"], v["executed"], v["reply"]["code"]),
                         ("UNKNOWN", False, "EN-EXEC-D-003"))
        r = verifier_live(self.state, tid)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # Control: the same command, not privileged, runs and makes the file.
        ok = self.d.request(cgtest.make_request([["touch", made]], privileged=False))
        self.assertEqual(ok["status"], "ok", ok)
        self.assertTrue(os.path.exists(made))

    def test_replay_passes_and_writes_replay_json(self):
        p = cli(self.state, "replay", self.allowed)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(b"PASS", p.stdout)
        # One trace's PASS does not claim the whole journal (ux-s40 M2).
        self.assertIn(b"replay --all checks every line", p.stdout)
        with open(os.path.join(self.state, "traces", self.allowed, "replay.json")) as f:
            self.assertEqual(json.load(f)["status"], "PASS")
        p = cli(self.state, "replay", "--all", "--json")
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertEqual(json.loads(p.stdout)["status"], "PASS")

    def test_replay_all_while_calls_are_running(self):
        stop = threading.Event()

        def load():
            while not stop.is_set():
                self.d.request(cgtest.make_request([["/bin/true"]], privileged=False))

        threads = [threading.Thread(target=load) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for _ in range(3):
                p = cli(self.state, "replay", "--all", "--json", "--no-write")
                self.assertEqual(p.returncode, 0, p.stdout[-3000:])
                self.assertTrue(json.loads(p.stdout)["journal"]["live"])
        finally:
            stop.set()
            for t in threads:
                t.join(30)

    def test_independent_verifier_passes_real_traces(self):
        for tid in (self.allowed, self.denied):
            p = verifier_live(self.state, tid)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = verifier(os.path.join(self.state, "traces", tid))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_log_filters(self):
        # --events: the journal's events (per-call lines: test_log.py).
        p = cli(self.state, "log", "--events", "--decision", "BLOCK", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        traces = {json.loads(l)["trace"] for l in p.stdout.splitlines()}
        self.assertEqual(traces, {self.denied})
        p = cli(self.state, "log", "--events", "--session", "sess-a", "--json")
        traces = {json.loads(l)["trace"] for l in p.stdout.splitlines()}
        self.assertEqual(traces, {self.allowed})
        p = cli(self.state, "log", "--events", "--trace", self.allowed)
        self.assertIn(b"permit", p.stdout)
        p = cli(self.state, "log", "--events", "--since", "1d", "--trace", self.allowed,
                "--json")
        self.assertGreater(len(p.stdout.splitlines()), 5)
        self.assertEqual(cli(self.state, "log", "--since", "yesterday").returncode, 64)

    def test_key_show_prints_the_public_key(self):
        p = cli(self.state, "key", "show")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"BEGIN PUBLIC KEY", p.stdout)
        self.assertIn(b"fingerprint: sha256:", p.stdout)
        st = os.stat(os.path.join(self.state, "keys", "evidence.key"))
        self.assertEqual(st.st_mode & 0o777, 0o600)

    def test_checkpoint_verifies_with_openssl(self):
        if not shutil.which("openssl"):
            self.skipTest("no openssl binary")
        with open(os.path.join(self.state, "checkpoints.ndjson"), "rb") as f:
            line = f.read().splitlines()[-1]
        cut = line.rindex(b',"sig":"')
        sig = json.loads(line)["sig"]
        tmp = tempfile.mkdtemp()
        try:
            import base64
            with open(os.path.join(tmp, "msg"), "wb") as f:
                f.write(line[:cut])
            with open(os.path.join(tmp, "sig"), "wb") as f:
                f.write(base64.b64decode(sig))
            p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey",
                                os.path.join(self.state, "keys", "evidence.pub"), "-rawin",
                                "-in", os.path.join(tmp, "msg"), "-sigfile",
                                os.path.join(tmp, "sig")], capture_output=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        finally:
            shutil.rmtree(tmp)


class EvidenceTamper(cgtest.TamperCase):
    """Mutations on a copy of a stopped daemon's state: each caught by replay and the verifier."""

    @classmethod
    def setUpClass(cls):
        with cgtest.Daemon(policy_text=DIRS) as d:
            r = d.request(cgtest.make_request([["/bin/true"]], privileged=False))
            cls.tid = r["reply"]["trace_id"]
            wait_package(d.state_dir, cls.tid)
            d.stop()
            cls.keep(d.state_dir)

    def setUp(self):
        super().setUp()
        self.events = os.path.join(self.state, "traces", self.tid, "events.ndjson")

    def assertCaught(self, check, trace=None):
        p = cli(self.state, "replay", trace or self.tid, "--json")
        self.assertEqual(p.returncode, 1, p.stdout)
        names = {f["check"] for f in json.loads(p.stdout)["failures"]}
        self.assertIn(check, names)
        p = verifier(self.state, trace or self.tid)
        self.assertEqual(p.returncode, 1, p.stdout)

    def test_untouched_copy_passes(self):
        self.assertEqual(cli(self.state, "replay", "--all").returncode, 0)
        self.assertEqual(verifier(self.state, "--all").returncode, 0)

    def test_edited_byte(self):
        with open(self.events, "rb") as f:
            data = bytearray(f.read())
        i = data.index(b"/bin/true")
        data[i + 1] ^= 0x01
        with open(self.events, "wb") as f:
            f.write(data)
        self.assertCaught("hash")

    def test_deleted_line(self):
        with open(self.events, "rb") as f:
            lines = f.readlines()
        del lines[2]
        with open(self.events, "wb") as f:
            f.writelines(lines)
        self.assertCaught("line_deleted")

    def test_reordered_lines(self):
        with open(self.events, "rb") as f:
            lines = f.readlines()
        lines[2], lines[3] = lines[3], lines[2]
        with open(self.events, "wb") as f:
            f.writelines(lines)
        self.assertCaught("line_reordered")

    def test_removed_trace_directory_then_rebuilt(self):
        shutil.rmtree(os.path.join(self.state, "traces", self.tid))
        self.assertCaught("trace_dir_missing")
        p = cli(self.state, "evidence", "rebuild", self.tid)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(cli(self.state, "replay", self.tid).returncode, 0)

    def test_forged_verdict(self):
        path = os.path.join(self.state, "traces", self.tid, "verdict.json")
        with open(path) as f:
            v = json.load(f)
        v["decision"] = "BLOCK"
        with open(path, "w") as f:
            json.dump(v, f)
        self.assertCaught("verdict_mismatch")


def restart(d):
    """Start the same daemon (same state dir) again after it died."""
    if d._logf:
        d._logf.close()
        d._logf = None
    d.start()


class WriteAheadAcrossTheSpawn(unittest.TestCase):
    """The view is built while the permit syncs, but the command itself waits
    for it: with the evidence writer stalled 1.5 s per batch, the command's
    first instruction comes at least that long after the request, although
    its view was ready long before."""

    def test_command_starts_only_after_its_permit_is_written(self):
        env = {"CALLGATE_TEST_EVIDENCE_STALL_MS": "1500"}
        with cgtest.Daemon(policy_text=DIRS, env=env) as d:
            marker = os.path.join(d.workspace, "started")
            t0 = time.time()
            r = d.request(cgtest.make_request([["sh", "-c", f"date +%s.%N > {marker}"]],
                                              privileged=False), timeout=60)
            self.assertEqual(r["status"], "ok", r)
            with open(marker) as f:
                started = float(f.read())
            self.assertGreaterEqual(started - t0, 1.4, "the command ran before its permit")
            # The answer does not wait for the call's last events to reach the
            # disk (and each batch stalls 1.5 s here): read once it is sealed.
            deadline = time.monotonic() + cgtest.DEFAULT_TIMEOUT
            while True:
                types = [json.loads(l)["type"] for l in
                         cli(d.state_dir, "log", "--events", "--json").stdout.splitlines()
                         if json.loads(l)["trace"] == r["reply"]["trace_id"]]
                if "seal" in types or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertIn("seal", types)
            self.assertLess(types.index("permit"), types.index("exec.started"), types)


class CallsDoNotWaitForEachOthersPermits(unittest.TestCase):
    """A call started while another call's command waited for its permit
    must not wait for that permit too. With the writer stalled 1 s per
    batch, A's permit goes in one batch and B's, sent while A's command
    waits, in a later one. B's command was started while the daemon held
    A's pipes; until it closed them before its own permit's wait, A's answer
    came only when B's command exec'd, a whole batch after A's own command
    had run."""

    def test_an_earlier_call_is_answered_before_a_later_permit(self):
        env = {"CALLGATE_TEST_EVIDENCE_STALL_MS": "1000"}
        with cgtest.Daemon(policy_text=DIRS, env=env) as d:
            # On a loaded machine A's request may be written a batch ahead
            # of its permit, and a B sent 0.3 s after A then shares A's
            # permit's batch: then send B half a second before A's command
            # started the last time.
            delay = 0.3
            for attempt in range(4):
                sent, started, answered = self.race(d, attempt, delay)
                # The premise: B came while A's command waited, and its
                # permit was a batch (1 s) after A's.
                if sent["B"] < started["A"] - 0.1 and started["B"] - started["A"] >= 0.8:
                    break
                delay = max(0.3, started["A"] - sent["A"] - 0.5)
            else:
                # Batches kept falling otherwise (a heavily loaded machine):
                # the race this test needs did not happen; nothing was judged.
                self.skipTest("A's and B's permits never fell in successive batches: "
                              "%r %r" % (sent, started))
        self.assertLess(answered["A"] - started["A"], 0.5,
                        "A's answer waited for B's permit: %r %r" % (started, answered))

    def race(self, d, attempt, delay):
        """A, then B delay s later: when each was sent, its command started, it was answered."""
        sent, answered = {}, {}

        def call(name, after):
            time.sleep(after)
            mark = os.path.join(d.workspace, "%s-%d" % (name, attempt))
            req = cgtest.make_request([["sh", "-c", f"date +%s.%N > {mark}; ls / >/dev/null"]],
                                      privileged=False)
            sent[name] = time.time()
            r = d.request(req, timeout=60)
            answered[name] = time.time()
            self.assertEqual(r["status"], "ok", r)
        time.sleep(1.5)  # whatever came before has left the stalled writer
        ts = [threading.Thread(target=call, args=("A", 0)),
              threading.Thread(target=call, args=("B", delay))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        started = {}
        for name in "AB":
            with open(os.path.join(d.workspace, "%s-%d" % (name, attempt))) as f:
                started[name] = float(f.read())
        return sent, started, answered


class EvidenceCrash(unittest.TestCase):
    """SIGKILL at random moments during governed calls; restart; verify."""

    CALLS = int(os.environ.get("CG_CRASH_CALLS", "2000"))

    def test_sigkill_during_governed_calls(self):
        rnd = random.Random(int(os.environ.get("CG_CRASH_SEED", "5")))
        d = cgtest.Daemon(policy_text=DIRS)
        d.start()
        lock = threading.Lock()
        ran, answered, stop = [], [0], threading.Event()
        up = threading.Event()
        up.set()

        def client():
            while not stop.is_set():
                with lock:
                    if answered[0] >= self.CALLS:
                        return
                up.wait(60)
                try:
                    r = d.request(cgtest.make_request([["/bin/true"]], privileged=False),
                                  timeout=20)
                except Exception:
                    time.sleep(0.01)  # the daemon is down or was killed mid-call
                    continue
                with lock:
                    answered[0] += 1
                    if r.get("status") == "ok":
                        ran.append(r["reply"]["trace_id"])

        threads = [threading.Thread(target=client) for _ in range(8)]
        kills = 0
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                time.sleep(rnd.uniform(0.3, 2.0))
                with lock:
                    if answered[0] >= self.CALLS:
                        break
                if kills < 6:
                    up.clear()
                    d.proc.send_signal(signal.SIGKILL)
                    d.proc.wait()
                    kills += 1
                    restart(d)
                    up.set()
            stop.set()
            for t in threads:
                t.join(60)
            # A write cut by the crash: the torn tail must be set aside and recorded.
            d.stop(signal.SIGKILL)
            segs = sorted(f for f in os.listdir(os.path.join(d.state_dir, "journal"))
                          if f.endswith(".ndjson"))
            with open(os.path.join(d.state_dir, "journal", segs[-1]), "ab") as f:
                f.write(b'{"seq":1,"trace":"torn')
            restart(d)
            d.stop()
            state = d.state_dir

            jdir = os.path.join(state, "journal")
            self.assertTrue(any(f.startswith("torn-journal-") for f in os.listdir(jdir)))
            p = cli(state, "replay", "--all", "--json", timeout=600)
            rep = json.loads(p.stdout)
            self.assertEqual(p.returncode, 0, json.dumps(rep["failures"][:20]))
            self.assertEqual(rep["summary"]["open"], 0)
            self.assertGreater(rep["summary"]["pass"], 0)
            p = verifier(state, "--all")
            self.assertEqual(p.returncode, 0, p.stdout[-2000:])

            types_by_trace = {}
            recovery = 0
            p = cli(state, "log", "--events", "--json", timeout=600)
            for line in p.stdout.splitlines():
                e = json.loads(line)
                types_by_trace.setdefault(e["trace"], []).append(e["type"])
                recovery += e["type"] == "recovery"
            self.assertGreaterEqual(recovery, 1, "the torn tail is recorded")
            # Every command that ran has its durable permit.
            for tid in ran:
                self.assertIn("permit", types_by_trace.get(tid, []), tid)
            # Traces cut short are marked incomplete, never sealed as whole.
            for tid, types in types_by_trace.items():
                if tid == "journal":
                    continue
                self.assertIn(types[-1], ("seal", "incomplete"), (tid, types))
                self.assertFalse("seal" in types and "incomplete" in types, tid)
                if "exec.started" in types:
                    self.assertIn("permit", types[:types.index("exec.started")], tid)
            self.assertGreaterEqual(len(ran), self.CALLS // 2)
            self.assertGreaterEqual(kills, 1)
        finally:
            stop.set()
            up.set()
            d.close()


if __name__ == "__main__":
    unittest.main()


class DeeplyNestedArgs(unittest.TestCase):
    """A gate action's args are recorded in the call's events, and every
    journal reader stops at 256 levels: args nested deeper than the wire
    allows (64) are an I reply, and what is accepted still replays. Once, one
    request nested 2,000 levels made replay --all fail for good."""

    def test_nesting_past_the_limit_is_refused_and_the_journal_still_replays(self):
        with cgtest.Daemon() as d:
            def gate(depth):
                line = ('{"v":1,"id":"%s","action":"gate","time":"%s","actions":'
                        '[{"action_type":"x","args":{"a":%s}}]}\n'
                        % (uuid.uuid4(), cgtest.now_rfc3339(),
                           "[" * depth + "]" * depth))
                return cgtest.parse_response(d.raw(line.encode()))
            deep = gate(250)
            self.assertEqual((deep["reply"]["type"], deep["reply"]["code"]),
                             ("I", "MCP-VAL-I-001"), deep)
            ok = gate(60)
            self.assertNotEqual(ok["reply"]["type"], "I", ok)
            tid = ok["reply"]["trace_id"]
            v = d.request({"id": str(uuid.uuid4()), "time": cgtest.now_rfc3339(),
                           "action": "verdict", "trace_id": tid}, timeout=30)
            self.assertEqual(v["status"], "ok", v)
            d.stop()
            p = cli(d.state_dir, "replay", "--all", "--no-write")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class AVerdictTooLongForItsMarkdown(unittest.TestCase):
    """s41b F1: one allowed call whose verdict.md would pass 1 MiB (80
    arguments of 4,000 quotes, each quoted as four characters) got no trace
    package at all: its verdict was unreadable, replay --all failed for good,
    and evidence rebuild could not mend it. Its package is written, with each
    long text cut in verdict.md and whole in verdict.json."""

    def test_the_package_is_written_and_everything_replays(self):
        with cgtest.Daemon() as d:
            argv = ["true"] + ["'" * 4000] * 80
            r = d.request(cgtest.make_request([argv], privileged=False), timeout=60)
            self.assertEqual(r["reply"]["code"], "MCP-EXEC-S-001", r)
            tid = r["reply"]["trace_id"]
            md = cgtest.wait_package_file(d.state_dir, tid, "verdict.md", 60)
            self.assertIn(b"bytes more: verdict.json holds them", md)
            self.assertLess(len(md), 1 << 20)
            v = json.loads(cgtest.package_file(d.state_dir, tid, "verdict.json"))
            self.assertEqual(v["call"]["stages"][0]["argv"], argv)
            d.stop()
            p = cli(d.state_dir, "replay", "--all", "--no-write")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = cli(d.state_dir, "evidence", "rebuild", "--all")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class APackageLostIsRebuiltAtTheNextStart(unittest.TestCase):
    """s41b F1: when a package could not be written, the resume point still
    moved past its trace, and no start looked at it again: replay --all
    failed for good. A package given up (here: the archive made immutable,
    EPERM even for root) freezes the resume point, and the next start
    rebuilds it."""

    def test_the_next_start_rebuilds_it(self):
        with cgtest.Daemon() as d:
            r = d.request(cgtest.make_request([["true"]], privileged=False), timeout=60)
            tid0 = r["reply"]["trace_id"]
            cgtest.wait_package_file(d.state_dir, tid0, "verdict.json", 60)
            arch = os.path.join(d.state_dir, "traces", "archive")
            files = [os.path.join(arch, n) for n in os.listdir(arch)]
            if subprocess.run(["chattr", "+i", *files], capture_output=True).returncode != 0:
                self.skipTest("chattr +i is not available here")
            try:
                r = d.request(cgtest.make_request([["true"]], privileged=False), timeout=60)
                tid = r["reply"]["trace_id"]
                deadline = time.monotonic() + 60
                while "package not written" not in d.log and time.monotonic() < deadline:
                    time.sleep(0.1)
                self.assertIn("package not written", d.log)
                for i in range(3):  # later checkpoints: none may vouch for the lost package
                    d.request(cgtest.make_request([["rm", "-rf", "/"]]), timeout=60)
                d.stop()
            finally:
                subprocess.run(["chattr", "-i", *files], capture_output=True)
            d.start()
            cgtest.wait_package_file(d.state_dir, tid, "verdict.json", 60)
            d.stop()
            p = cli(d.state_dir, "replay", "--all", "--no-write")
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)
