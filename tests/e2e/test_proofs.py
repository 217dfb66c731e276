# SPDX-License-Identifier: MIT
"""End-to-end tests of the proofs a third party checks offline
(docs/evidence.md, "The Merkle tree", "Checkpoint notes", "Proofs"):
`callgate evidence prove`, `evidence consistency` and `evidence checkpoint`
against a real daemon, each result checked by the independent verifier
docs/verify_proof.py, which must also reject every tampered copy; replay
must catch a tampered checkpoint note; and checkpoints of two different
histories (even under one shared key) must not pass as consistent."""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import cgtest

VERIFIER = os.path.join(cgtest.SRCDIR, "docs", "verify_proof.py")


def cli(state, *args, timeout=cgtest.DEFAULT_TIMEOUT):
    return subprocess.run([cgtest.CALLGATE, "--state-dir", state] + list(args),
                          capture_output=True, timeout=timeout, text=True)


def verify(pub, kind, path, *extra):
    return subprocess.run([sys.executable, VERIFIER, "--pubkey", pub] + list(extra) +
                          [kind, path], capture_output=True, timeout=cgtest.DEFAULT_TIMEOUT,
                          text=True)


def call(d, argv):
    r = d.request(cgtest.make_request([argv], privileged=False))
    return r["reply"]["trace_id"]


def prove(state, tid, out):
    """Prove tid, waiting (bounded) for a checkpoint to cover its seal."""
    deadline = time.monotonic() + cgtest.DEFAULT_TIMEOUT
    while True:
        p = cli(state, "evidence", "prove", "--out", out, tid)
        if p.returncode == 0:
            return p
        if time.monotonic() > deadline or "not under a signed checkpoint" not in p.stderr:
            raise AssertionError("prove failed: %s" % p.stderr)
        time.sleep(0.1)


def settled_note(state, out, min_size):
    """The latest checkpoint note once it covers at least min_size events."""
    deadline = time.monotonic() + cgtest.DEFAULT_TIMEOUT
    while True:
        p = cli(state, "evidence", "checkpoint", "--out", out)
        if p.returncode == 0:
            with open(out) as f:
                size = int(f.read().split("\n")[1])
            if size >= min_size:
                return size
        if time.monotonic() > deadline:
            raise AssertionError("no checkpoint of size >= %d: %s" % (min_size, p.stderr))
        time.sleep(0.1)


def flip_b64(s):
    """Change one byte of base64-encoded data, keeping it valid base64."""
    b = bytearray(base64.b64decode(s))
    b[len(b) // 2] ^= 0x01
    return base64.b64encode(bytes(b)).decode()


class Proofs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cg-proofs-")
        cls.d = cgtest.Daemon().start()
        cls.state = cls.d.state_dir
        cls.pub = os.path.join(cls.state, "keys", "evidence.pub")
        cls.allowed = call(cls.d, ["/bin/true"])
        cls.denied = call(cls.d, ["/bin/rm", "-rf", "/"])
        cls.proof = os.path.join(cls.tmp, "allowed.proof")
        prove(cls.state, cls.allowed, cls.proof)
        cls.early = os.path.join(cls.tmp, "early.note")
        cls.early_size = settled_note(cls.state, cls.early, 1)
        cls.later_tid = call(cls.d, ["/bin/echo", "later"])
        prove(cls.state, cls.later_tid, os.path.join(cls.tmp, "later.proof"))
        cls.later = os.path.join(cls.tmp, "later.note")
        cls.later_size = settled_note(cls.state, cls.later, cls.early_size + 1)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load(self, path):
        with open(path) as f:
            return json.load(f)

    def write(self, doc, name):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    # -- the note -------------------------------------------------------------

    def test_checkpoint_is_a_c2sp_note_signed_by_the_evidence_key(self):
        with open(self.later, "rb") as f:
            note = f.read()
        lines = note.split(b"\n")
        with open(os.path.join(self.state, "keys", "evidence.origin"), "rb") as f:
            origin = f.read().strip()
        self.assertEqual(lines[0], origin)
        self.assertTrue(origin.startswith(b"callgate/"), origin)
        self.assertEqual(int(lines[1]), self.later_size)
        self.assertEqual(len(base64.b64decode(lines[2])), 32)
        self.assertEqual(lines[3], b"")
        self.assertTrue(lines[4].startswith("\u2014 ".encode() + origin + b" "), lines[4])
        self.assertEqual(len(base64.b64decode(lines[4].split(b" ")[-1])), 68)
        p = verify(self.pub, "note", self.later)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # checkpoint.note is the latest note, byte for byte as the tool rebuilds it.
        with open(os.path.join(self.state, "checkpoint.note"), "rb") as f:
            latest = f.read()
        self.assertEqual(verify(self.pub, "note", os.path.join(self.state, "checkpoint.note"))
                         .returncode, 0)
        self.assertTrue(latest.startswith(origin + b"\n"))

    def test_note_root_is_the_rfc6962_root_of_the_journal(self):
        # An independent recomputation straight from the journal segments.
        size = self.early_size
        leaves = []
        jdir = os.path.join(self.state, "journal")
        for name in sorted(os.listdir(jdir)):
            if name.endswith(".ndjson"):
                with open(os.path.join(jdir, name), "rb") as f:
                    leaves += [hashlib.sha256(b"\x00" + l + b"\n").digest()
                               for l in f.read().split(b"\n")[:-1]]

        def mth(v):
            if len(v) == 1:
                return v[0]
            k = 1
            while k * 2 < len(v):
                k *= 2
            return hashlib.sha256(b"\x01" + mth(v[:k]) + mth(v[k:])).digest()

        with open(self.early) as f:
            root = base64.b64decode(f.read().split("\n")[2])
        self.assertEqual(mth(leaves[:size]), root)

    # -- inclusion proofs ---------------------------------------------------------

    def test_prove_verifies_with_the_independent_verifier(self):
        p = verify(self.pub, "proof", self.proof)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("sealed", p.stdout)
        doc = self.load(self.proof)
        self.assertEqual(doc["trace"], self.allowed)
        # Every event of the trace, exactly the journal's bytes.
        events = cgtest.wait_package_file(self.state, self.allowed, "events.ndjson").decode()
        self.assertEqual("".join(e["line"] for e in doc["events"]), events)
        with open(os.path.join(self.state, "keys", "evidence.origin")) as f:
            origin = f.read().strip()
        p = verify(self.pub, "proof", self.proof, "--origin", origin)
        self.assertEqual(p.returncode, 0, p.stdout)
        p = verify(self.pub, "proof", self.proof, "--origin", "callgate/elsewhere")
        self.assertEqual(p.returncode, 1, p.stdout)

    def test_denied_call_is_provable_too(self):
        out = os.path.join(self.tmp, "denied.proof")
        prove(self.state, self.denied, out)
        p = verify(self.pub, "proof", out)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_tampered_proofs_fail(self):
        doc = self.load(self.proof)

        def event_byte(d):
            line = d["events"][1]["line"]
            i = line.index('"ts":"') + 8
            d["events"][1]["line"] = line[:i] + ("0" if line[i] != "0" else "1") + line[i + 1:]

        def proof_hash(d):
            d["events"][0]["proof"][0] = flip_b64(d["events"][0]["proof"][0])

        def root(d):
            lines = d["checkpoint"].split("\n")
            lines[2] = flip_b64(lines[2])
            d["checkpoint"] = "\n".join(lines)

        def signature(d):
            lines = d["checkpoint"].split("\n")
            head, sig = lines[4].rsplit(" ", 1)
            lines[4] = head + " " + flip_b64(sig)
            d["checkpoint"] = "\n".join(lines)

        def size(d):
            lines = d["checkpoint"].split("\n")
            lines[1] = str(int(lines[1]) + 1)
            d["checkpoint"] = "\n".join(lines)

        def index(d):
            d["events"][0]["index"] += 1

        def dropped_event(d):
            del d["events"][2]

        def dropped_proof_hash(d):
            d["events"][0]["proof"].pop()

        for name, mutate in [("event_byte", event_byte), ("proof_hash", proof_hash),
                             ("root", root), ("signature", signature), ("size", size),
                             ("index", index), ("dropped_event", dropped_event),
                             ("dropped_proof_hash", dropped_proof_hash)]:
            with self.subTest(name):
                d = json.loads(json.dumps(doc))
                mutate(d)
                p = verify(self.pub, "proof", self.write(d, name + ".proof"))
                self.assertEqual(p.returncode, 1, name + ": " + p.stdout + p.stderr)
                self.assertIn("FAIL", p.stdout)
        # Untouched, the same document still passes (the mutations made the difference).
        self.assertEqual(verify(self.pub, "proof", self.write(doc, "clean.proof")).returncode, 0)

    def test_proof_fails_under_another_key(self):
        other = os.path.join(self.tmp, "other.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out",
                        os.path.join(self.tmp, "other.key")], check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", os.path.join(self.tmp, "other.key"),
                        "-pubout", "-out", other], check=True, capture_output=True)
        p = verify(other, "proof", self.proof)
        self.assertEqual(p.returncode, 1, p.stdout)

    def test_prove_unknown_trace_and_usage(self):
        p = cli(self.state, "evidence", "prove", "no-such-trace")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no trace", p.stderr)
        p = cli(self.state, "evidence", "prove")
        self.assertEqual(p.returncode, 64, p.stderr)
        p = cli(self.state, "evidence", "prove", "--bogus", self.allowed)
        self.assertEqual(p.returncode, 64, p.stderr)
        p = cli(self.state, "evidence", "prove", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("usage: callgate evidence prove", p.stdout)
        p = cli(self.state, "evidence", "consistency", "--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("usage: callgate evidence consistency", p.stdout)

    # -- consistency ----------------------------------------------------------------

    def consistency(self, old, new, name):
        out = os.path.join(self.tmp, name)
        p = cli(self.state, "evidence", "consistency", "--out", out, old, new)
        return p, out

    def test_consistency_early_to_later_verifies(self):
        p, out = self.consistency(self.early, self.later, "c.json")
        self.assertEqual(p.returncode, 0, p.stderr)
        v = verify(self.pub, "consistency", out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        self.assertIn("extends tree size %d" % self.early_size, v.stdout)
        # Sizes of this journal's checkpoints work as well as note files.
        p, out = self.consistency(str(self.early_size), str(self.later_size), "c2.json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(verify(self.pub, "consistency", out).returncode, 0)

    def test_tampered_consistency_fails(self):
        p, out = self.consistency(self.early, self.later, "c3.json")
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = self.load(out)
        self.assertTrue(doc["proof"], "sizes %d -> %d need a non-empty proof"
                        % (self.early_size, self.later_size))

        def proof_hash(d):
            d["proof"][-1] = flip_b64(d["proof"][-1])

        def swapped(d):
            d["old"], d["new"] = d["new"], d["old"]

        def old_root(d):
            lines = d["old"].split("\n")
            lines[2] = flip_b64(lines[2])
            d["old"] = "\n".join(lines)

        def new_signature(d):
            lines = d["new"].split("\n")
            head, sig = lines[4].rsplit(" ", 1)
            lines[4] = head + " " + flip_b64(sig)
            d["new"] = "\n".join(lines)

        def short_proof(d):
            d["proof"].pop()

        for name, mutate in [("proof_hash", proof_hash), ("swapped", swapped),
                             ("old_root", old_root), ("new_signature", new_signature),
                             ("short_proof", short_proof)]:
            with self.subTest(name):
                d = json.loads(json.dumps(doc))
                mutate(d)
                v = verify(self.pub, "consistency", self.write(d, name + ".cons"))
                self.assertEqual(v.returncode, 1, name + ": " + v.stdout + v.stderr)
        # The CLI itself refuses OLD newer than NEW.
        p, _ = self.consistency(self.later, self.early, "c4.json")
        self.assertEqual(p.returncode, 1, p.stderr)

    # -- replay checks the notes and the roots ----------------------------------------

    def test_replay_catches_a_tampered_checkpoint_note(self):
        copy = os.path.join(self.tmp, "state-copy")
        shutil.copytree(self.state, copy, ignore=shutil.ignore_patterns("LOCK", "*.sock"))
        try:
            p = cli(copy, "replay", "--all", "--no-write", "--json")
            self.assertEqual(p.returncode, 0, p.stdout[-3000:])
            path = os.path.join(copy, "checkpoint.note")
            with open(path) as f:
                lines = f.read().split("\n")
            lines[2] = flip_b64(lines[2])
            with open(path, "w") as f:
                f.write("\n".join(lines))
            p = cli(copy, "replay", "--all", "--no-write", "--json")
            self.assertEqual(p.returncode, 1, p.stdout[-3000:])
            self.assertIn("note_signature", p.stdout)
            self.assertIn("merkle_root_mismatch", p.stdout)
        finally:
            shutil.rmtree(copy, ignore_errors=True)


class DifferentHistories(unittest.TestCase):
    """Two daemons with one shared key and log name but different journals: a
    split view. Each checkpoint verifies alone; consistency between them must
    not."""

    def test_consistency_across_two_histories_fails(self):
        tmp = tempfile.mkdtemp(prefix="cg-proofs-")
        a = cgtest.Daemon().start()
        b = None
        try:
            call(a, ["/bin/true"])
            a_note = os.path.join(tmp, "a.note")
            a_size = settled_note(a.state_dir, a_note, 1)
            # B starts from A's keys and origin, with an empty journal of its own.
            b = cgtest.Daemon()
            keys = os.path.join(b.state_dir, "keys")
            os.makedirs(keys, mode=0o755)
            for name in ("evidence.key", "evidence.pub", "evidence.origin"):
                shutil.copy2(os.path.join(a.state_dir, "keys", name), os.path.join(keys, name))
            os.chmod(os.path.join(keys, "evidence.key"), 0o600)
            b.start()
            for argv in (["/bin/echo", "b1"], ["/bin/echo", "b2"], ["/bin/echo", "b3"]):
                call(b, argv)
            b_first = os.path.join(tmp, "b1.note")
            settled_note(b.state_dir, b_first, 1)
            call(b, ["/bin/echo", "b4"])
            b_note = os.path.join(tmp, "b.note")
            b_size = settled_note(b.state_dir, b_note, a_size + 1)
            pub = os.path.join(b.state_dir, "keys", "evidence.pub")
            # Each note alone verifies under the shared key: the split is invisible...
            self.assertEqual(verify(pub, "note", a_note).returncode, 0)
            self.assertEqual(verify(pub, "note", b_note).returncode, 0)
            # ...until one is asked to extend the other.
            p = cli(b.state_dir, "evidence", "consistency", a_note, b_note)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("INCONSISTENT", p.stderr)
            # A valid proof of B's own history, offered for A's checkpoint, fails.
            out = os.path.join(tmp, "b.cons")
            p = cli(b.state_dir, "evidence", "consistency", "--out", out, b_first, b_note)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(verify(pub, "consistency", out).returncode, 0)
            with open(out) as f:
                doc = json.load(f)
            with open(a_note) as f:
                doc["old"] = f.read()
            forged = os.path.join(tmp, "forged.cons")
            with open(forged, "w") as f:
                json.dump(doc, f)
            v = verify(pub, "consistency", forged)
            self.assertEqual(v.returncode, 1, v.stdout)
            self.assertLess(a_size, b_size)
        finally:
            a.close()
            if b:
                b.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_checkpoint_of_another_log_is_refused(self):
        tmp = tempfile.mkdtemp(prefix="cg-proofs-")
        a, c = cgtest.Daemon().start(), cgtest.Daemon().start()
        try:
            call(a, ["/bin/true"])
            call(c, ["/bin/true"])
            a_note, c_note = os.path.join(tmp, "a.note"), os.path.join(tmp, "c.note")
            settled_note(a.state_dir, a_note, 1)
            settled_note(c.state_dir, c_note, 1)
            p = cli(c.state_dir, "evidence", "consistency", a_note, c_note)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("not a checkpoint signed by this log", p.stderr)
            v = verify(os.path.join(c.state_dir, "keys", "evidence.pub"), "note", a_note)
            self.assertEqual(v.returncode, 1, v.stdout)
        finally:
            a.close()
            c.close()
            shutil.rmtree(tmp, ignore_errors=True)


class Witnessing(unittest.TestCase):
    """C2SP tlog-witness semantics with `callgate evidence witness`: a witness
    (here the state directory of a second daemon, and one more directory)
    cosigns a log's checkpoint only when it is consistent with the last one it
    cosigned; a split view is refused; a quorum of cosignatures is checked by
    the independent verifier."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cg-witness-")
        cls.log = cgtest.Daemon().start()      # the log being witnessed
        cls.peer = cgtest.Daemon().start()     # another callgated, acting as a witness
        cls.w1 = os.path.join(cls.peer.state_dir, "witness")
        cls.w2 = os.path.join(cls.tmp, "w2")
        cls.pub = os.path.join(cls.log.state_dir, "keys", "evidence.pub")
        with open(os.path.join(cls.log.state_dir, "keys", "evidence.origin")) as f:
            cls.origin = f.read().strip()

    @classmethod
    def tearDownClass(cls):
        cls.log.close()
        cls.peer.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def request(self, state, old, name):
        out = os.path.join(self.tmp, name)
        p = cli(state, "evidence", "witness-request", "--old", str(old), "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        return out

    def witness(self, req, wdir=None, wname=None, key=None):
        args = ["evidence", "witness", "--origin", self.origin, "--log-key", key or self.pub]
        if wdir:
            args += ["--witness-dir", wdir]
        if wname:
            args += ["--name", wname]
        return cli(self.peer.state_dir, *(args + [req]))

    def test_witness_cosigns_only_consistent_checkpoints(self):
        tid = call(self.log, ["/bin/true"])
        prove(self.log.state_dir, tid, os.path.join(self.tmp, "p0"))
        size1 = settled_note(self.log.state_dir, os.path.join(self.tmp, "n1.note"), 1)
        req1 = self.request(self.log.state_dir, 0, "req1")
        with open(req1) as f:
            self.assertTrue(f.read().startswith("old 0\n\n" + self.origin + "\n"))
        p = self.witness(req1, wname="witness.test/w1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("\u2014 witness.test/w1 "), p.stdout)
        self.assertEqual(len(base64.b64decode(p.stdout.split()[-1])), 76)
        # The same request again: the witness has moved on (409 in tlog-witness).
        p = self.witness(req1)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("conflict", p.stderr)
        self.assertEqual(p.stdout.strip(), str(size1))
        # The log grows; a request from the witnessed size with its proof is cosigned.
        tid = call(self.log, ["/bin/echo", "more"])
        prove(self.log.state_dir, tid, os.path.join(self.tmp, "p1"))
        size2 = settled_note(self.log.state_dir, os.path.join(self.tmp, "n2.note"), size1 + 1)
        req2 = self.request(self.log.state_dir, size1, "req2")
        # ...but not with a tampered proof (422),
        with open(req2) as f:
            lines = f.read().split("\n")
        bad = list(lines)
        bad[1] = flip_b64(bad[1])
        badp = os.path.join(self.tmp, "req2.bad")
        with open(badp, "w") as f:
            f.write("\n".join(bad))
        p = self.witness(badp)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not consistent", p.stderr)
        # ...nor under another log key (403),
        p = self.witness(req2, key=os.path.join(self.peer.state_dir, "keys", "evidence.pub"))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("forbidden", p.stderr)
        p = self.witness(req2)
        self.assertEqual(p.returncode, 0, p.stderr)
        cosig1 = p.stdout
        # A second witness cosigns the same checkpoint from first contact.
        req2b = self.request(self.log.state_dir, 0, "req2b")
        p = self.witness(req2b, wdir=self.w2, wname="witness.test/w2")
        self.assertEqual(p.returncode, 0, p.stderr)
        cosig2 = p.stdout
        # The cosigned note: the log's note plus both cosignature lines.
        with open(req2) as f:
            note = f.read().split("\n\n", 1)[1]
        self.assertEqual(int(note.split("\n")[1]), size2)
        both = os.path.join(self.tmp, "both.note")
        with open(both, "w") as f:
            f.write(note + cosig1 + cosig2)
        only1 = os.path.join(self.tmp, "only1.note")
        with open(only1, "w") as f:
            f.write(note + cosig1)
        wargs = ["--witness", "witness.test/w1", os.path.join(self.w1, "witness.pub"),
                 "--witness", "witness.test/w2", os.path.join(self.w2, "witness.pub")]
        self.assertEqual(verify(self.pub, "note", both, *wargs).returncode, 0)
        self.assertEqual(verify(self.pub, "note", both, *(wargs + ["--quorum", "2"]))
                         .returncode, 0)
        p = verify(self.pub, "note", only1, *(wargs + ["--quorum", "2"]))
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertEqual(verify(self.pub, "note", only1, *(wargs + ["--quorum", "1"]))
                         .returncode, 0)
        # A tampered cosignature does not count.
        head, sig = cosig2.rstrip("\n").rsplit(" ", 1)
        forged = os.path.join(self.tmp, "forged.note")
        with open(forged, "w") as f:
            f.write(note + cosig1 + head + " " + flip_b64(sig) + "\n")
        p = verify(self.pub, "note", forged, *(wargs + ["--quorum", "2"]))
        self.assertEqual(p.returncode, 1, p.stdout)
        # A proof against the cosigned checkpoint carries the quorum to a third party.
        out = os.path.join(self.tmp, "witnessed.proof")
        p = cli(self.log.state_dir, "evidence", "prove", "--checkpoint", both, "--out", out, tid)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = verify(self.pub, "proof", out, *(wargs + ["--quorum", "2"]))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out1 = os.path.join(self.tmp, "witnessed1.proof")
        p = cli(self.log.state_dir, "evidence", "prove", "--checkpoint", only1, "--out", out1,
                tid)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = verify(self.pub, "proof", out1, *(wargs + ["--quorum", "2"]))
        self.assertEqual(p.returncode, 1, p.stdout)

    def test_witness_policy_makes_a_checkpoint_count_only_with_a_quorum(self):
        log = cgtest.Daemon().start()
        try:
            tid = call(log, ["/bin/true"])
            prove(log.state_dir, tid, os.path.join(self.tmp, "q0"))
            with open(os.path.join(log.state_dir, "keys", "evidence.origin")) as f:
                origin = f.read().strip()
            pub = os.path.join(log.state_dir, "keys", "evidence.pub")
            req = self.request(log.state_dir, 0, "qreq")
            with open(req) as f:
                note = f.read().split("\n\n", 1)[1]
            cosigs = []
            for w in ("qa", "qb"):
                p = cli(self.peer.state_dir, "evidence", "witness", "--witness-dir",
                        os.path.join(self.tmp, w), "--name", "witness.test/" + w,
                        "--origin", origin, "--log-key", pub, req)
                self.assertEqual(p.returncode, 0, p.stderr)
                cosigs.append(p.stdout)
            with open(os.path.join(log.state_dir, "witness-policy"), "w") as f:
                f.write("# two of two\nquorum 2\n")
                for w in ("qa", "qb"):
                    f.write("witness witness.test/%s %s\n"
                            % (w, os.path.join(self.tmp, w, "witness.pub")))
            out = os.path.join(self.tmp, "q.proof")
            p = cli(log.state_dir, "evidence", "prove", "--out", out, tid)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("witness cosignatures", p.stderr)
            for i, cs in enumerate(cosigs):
                f1 = os.path.join(self.tmp, "q%d.note" % i)
                with open(f1, "w") as f:
                    f.write(note + cs)
                p = cli(log.state_dir, "evidence", "witnessed", f1)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("%d of the 2" % (i + 1), p.stdout)
                p = cli(log.state_dir, "evidence", "prove", "--out", out, tid)
                self.assertEqual(p.returncode, 1 if i == 0 else 0, p.stderr)
            wargs = []
            for w in ("qa", "qb"):
                wargs += ["--witness", "witness.test/" + w,
                          os.path.join(self.tmp, w, "witness.pub")]
            v = verify(pub, "proof", out, *(wargs + ["--quorum", "2"]))
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            # A note that is not this log's is not kept.
            other = os.path.join(self.tmp, "other.note")
            call(self.peer, ["/bin/true"])
            settled_note(self.peer.state_dir, other, 1)
            p = cli(log.state_dir, "evidence", "witnessed", other)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("not a checkpoint of this journal", p.stderr)
        finally:
            log.close()

    def test_witness_refuses_a_split_view(self):
        """A fork of the log (same key and origin, another history) is refused by a
        witness that has cosigned the original."""
        wdir = os.path.join(self.tmp, "w3")
        tid = call(self.log, ["/bin/echo", "w3"])
        # Once a checkpoint covers the call's seal, nothing more is signed: the
        # note read here is the one the witness is asked to cosign just below.
        prove(self.log.state_dir, tid, os.path.join(self.tmp, "w3.proof"))
        size = settled_note(self.log.state_dir, os.path.join(self.tmp, "w3.note"), 1)
        p = self.witness(self.request(self.log.state_dir, 0, "w3req"), wdir=wdir)
        self.assertEqual(p.returncode, 0, p.stderr)
        fork = cgtest.Daemon()
        try:
            keys = os.path.join(fork.state_dir, "keys")
            os.makedirs(keys, mode=0o755)
            for name in ("evidence.key", "evidence.pub", "evidence.origin"):
                shutil.copy2(os.path.join(self.log.state_dir, "keys", name),
                             os.path.join(keys, name))
            os.chmod(os.path.join(keys, "evidence.key"), 0o600)
            fork.start()
            fsize = 0
            while fsize <= size:
                call(fork, ["/bin/echo", "fork"])
                fsize = settled_note(fork.state_dir, os.path.join(self.tmp, "f.note"), 1)
            req = self.request(fork.state_dir, size, "forkreq")
            p = self.witness(req, wdir=wdir)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("NOT cosigned", p.stderr)
            # Asking again changes nothing: the witness keeps the original's size and root.
            p = self.witness(req, wdir=wdir)
            self.assertEqual(p.returncode, 1, p.stderr)
        finally:
            fork.close()


if __name__ == "__main__":
    unittest.main()
