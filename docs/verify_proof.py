#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Independent verifier for callgate's proofs (docs/evidence.md, "Proofs").

Written from the format documentation alone: the Python standard library,
plus the `openssl` command (3.0 or later) for the Ed25519 signatures.

    verify_proof.py --pubkey PUB proof FILE         `callgate evidence prove` output
    verify_proof.py --pubkey PUB consistency FILE   `callgate evidence consistency` output
    verify_proof.py --pubkey PUB note FILE          one checkpoint note

PUB is the log's Ed25519 public key (PEM), a copy you trust: not one that
came with the proof. --origin NAME additionally requires the log's name.
--witness NAME WPUB (repeatable) names a witness you trust and --quorum K
requires K of them to have cosigned the checkpoint (C2SP tlog-cosignature,
cosignature/v1); with witnesses and no --quorum, all of them must have.

proof: the checkpoint note is signed by PUB under its origin (C2SP
signed-note), every event line hashes to its leaf and its inclusion proof
(RFC 9162 2.1.3.2) leads to the note's root at the note's tree size; the
lines are the trace's, with their own hashes and the trace chain intact; a
sealed trace's seal counts them all.
consistency: both notes are signed by PUB under the same origin, and the
consistency proof (RFC 9162 2.1.4.2) shows the new tree extends the old.

Exit status: 0 when everything verifies, 1 otherwise (each problem printed),
2 on a usage error.
"""
import base64
import binascii
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

GENESIS = hashlib.sha256(b"callgate-genesis-v1").hexdigest()
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
DASH = "\u2014 ".encode()


class Fail(Exception):
    pass


def b64(s, n=None):
    try:
        b = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise Fail("not base64: %r" % (s,))
    if n is not None and len(b) != n:
        raise Fail("expected %d bytes of base64, got %d" % (n, len(b)))
    return b


def raw_public_key(pem_path):
    with open(pem_path, "rb") as f:
        pem = f.read().decode("ascii", "replace")
    body = "".join(l for l in pem.splitlines()
                   if l and not l.startswith("-----"))
    der = b64(body)
    if len(der) != 44 or not der.startswith(ED25519_SPKI_PREFIX):
        raise Fail("%s is not an Ed25519 public key" % pem_path)
    return der[12:]


def openssl_verify(pem_path, msg, sig):
    tmp = tempfile.mkdtemp()
    try:
        m, s = os.path.join(tmp, "msg"), os.path.join(tmp, "sig")
        with open(m, "wb") as f:
            f.write(msg)
        with open(s, "wb") as f:
            f.write(sig)
        p = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pem_path,
                            "-rawin", "-in", m, "-sigfile", s], capture_output=True)
        return p.returncode == 0
    finally:
        shutil.rmtree(tmp)


def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def check_cosignatures(note, witnesses, quorum):
    """Count the trusted witnesses whose cosignature on the note verifies."""
    if isinstance(note, str):
        note = note.encode("utf-8")
    cut = note.find(b"\n\n")
    text, sigs = note[:cut + 1], note[cut + 2:]
    good = set()
    for line in sigs.split(b"\n"):
        if not line.startswith(DASH):
            continue
        parts = line[len(DASH):].split(b" ")
        if len(parts) != 2:
            continue
        name = parts[0].decode("utf-8", "replace")
        for wname, wpem, wraw in witnesses:
            if wname != name or wname in good:
                continue
            key_id = hashlib.sha256(name.encode() + b"\n" + b"\x04" + wraw).digest()[:4]
            try:
                blob = base64.b64decode(parts[1], validate=True)
            except (binascii.Error, ValueError):
                continue
            if len(blob) != 76 or blob[:4] != key_id:
                continue
            ts = int.from_bytes(blob[4:12], "big")
            msg = b"cosignature/v1\ntime %d\n" % ts + text
            if 0 < ts < 2 ** 63 and openssl_verify(wpem, msg, blob[12:]):
                good.add(wname)
    if len(good) < quorum:
        raise Fail("only %d of the %d required witness cosignatures verify (%s)"
                   % (len(good), quorum, ", ".join(sorted(good)) or "none"))
    return good


def check_note(note, pem_path, raw_key, origin=None):
    """Parse a signed checkpoint note and verify PUB's signature. (origin, size, root)."""
    if isinstance(note, str):
        note = note.encode("utf-8")
    cut = note.find(b"\n\n")
    if cut < 0:
        raise Fail("note: no blank line before the signatures")
    text, sigs = note[:cut + 1], note[cut + 2:]
    lines = text.decode("utf-8").split("\n")[:-1]
    if len(lines) < 3:
        raise Fail("note: the body needs an origin, a tree size and a root hash")
    name, size_s, root_s = lines[0], lines[1], lines[2]
    if not size_s.isdigit() or (len(size_s) > 1 and size_s[0] == "0"):
        raise Fail("note: the tree size is not a decimal number")
    size, root = int(size_s), b64(root_s, 32)
    if origin is not None and name != origin:
        raise Fail("note: origin %r, expected %r" % (name, origin))
    key_id = hashlib.sha256(name.encode() + b"\n" + b"\x01" + raw_key).digest()[:4]
    if not sigs.endswith(b"\n"):
        raise Fail("note: the last signature line has no newline")
    for line in sigs[:-1].split(b"\n"):
        if not line.startswith(DASH):
            raise Fail("note: a malformed signature line")
        parts = line[len(DASH):].split(b" ")
        if len(parts) != 2:
            raise Fail("note: a malformed signature line")
        if parts[0].decode("utf-8", "replace") != name:
            continue  # another signer (a witness, say): not ours to check
        blob = b64(parts[1].decode("ascii", "replace"))
        if len(blob) == 68 and blob[:4] == key_id and openssl_verify(pem_path, text, blob[4:]):
            return name, size, root
    raise Fail("note: no signature by this key under the name %r verifies" % name)


def verify_inclusion(index, size, leaf, proof, root):
    """RFC 9162 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first, second, first_hash, second_hash, proof):
    """RFC 9162 2.1.4.2."""
    if first > second:
        return False
    if first == second:
        return not proof and first_hash == second_hash
    if first == 0:
        return not proof
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_hash)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_hash and sr == second_hash


def check_event_line(line, trace, tseq, tprev):
    """The line's own hash and the trace chain. Returns the parsed event."""
    if not line.endswith(b'"}\n') or line[-76:-67] != b',"hash":"':
        raise Fail("seq ?: not an event line")
    try:
        e = json.loads(line)
    except ValueError:
        raise Fail("an event line is not JSON")
    if hashlib.sha256(line[:-76]).hexdigest() != e.get("hash"):
        raise Fail("seq %s: the line does not hash to its hash" % e.get("seq"))
    if e.get("trace") != trace:
        raise Fail("seq %s: another trace's event" % e.get("seq"))
    if e.get("tseq") != tseq or e.get("tprev") != tprev:
        raise Fail("seq %s: the trace chain is broken (tseq/tprev)" % e.get("seq"))
    return e


WITNESSES, QUORUM = [], 0


def check_proof(doc, pem, raw, origin):
    if doc.get("format") != "callgate-proof/1":
        raise Fail("not a callgate proof file")
    name, size, root = check_note(doc["checkpoint"], pem, raw, origin)
    if QUORUM:
        check_cosignatures(doc["checkpoint"], WITNESSES, QUORUM)
    trace, events = doc.get("trace"), doc.get("events")
    if not isinstance(events, list) or not events:
        raise Fail("the proof holds no events")
    prev, last = GENESIS, None
    for k, ev in enumerate(events, 1):
        index, proof = ev.get("index"), ev.get("proof")
        if not isinstance(index, int) or not isinstance(proof, list):
            raise Fail("event %d: index or proof missing" % k)
        try:
            line = ev["line"].encode("ascii")
        except (KeyError, AttributeError, UnicodeEncodeError):
            raise Fail("event %d: the line is missing or not ASCII" % k)
        path = [b64(p, 32) for p in proof]
        if not verify_inclusion(index, size, leaf_hash(line), path, root):
            raise Fail("event %d (index %d): the inclusion proof does not lead to the "
                       "signed root" % (k, index))
        e = check_event_line(line, trace, k, prev)
        if e.get("seq") != index + 1:
            raise Fail("event %d: seq %s is not leaf index %d + 1" % (k, e.get("seq"), index))
        prev, last = e["hash"], e
    state = last.get("type")
    if state == "seal":
        pl = last.get("payload", {})
        if pl.get("events") != len(events) - 1 or pl.get("head") != last.get("tprev"):
            raise Fail("the seal does not count the events shown: some are missing")
    print("OK: %d event(s) of trace %s are in %s at tree size %d (trace %s)"
          % (len(events), trace, name, size, "sealed" if state == "seal" else
             "ends with " + str(state) + ": not sealed"))


def check_consistency(doc, pem, raw, origin):
    if doc.get("format") != "callgate-consistency/1":
        raise Fail("not a callgate consistency file")
    n1, s1, r1 = check_note(doc["old"], pem, raw, origin)
    n2, s2, r2 = check_note(doc["new"], pem, raw, origin)
    if QUORUM:
        check_cosignatures(doc["new"], WITNESSES, QUORUM)
    if n1 != n2:
        raise Fail("the two checkpoints name different logs (%r, %r)" % (n1, n2))
    path = [b64(p, 32) for p in doc.get("proof", [])]
    if not verify_consistency(s1, s2, r1, r2, path):
        raise Fail("the consistency proof does not show tree size %d extends tree size %d"
                   % (s2, s1))
    print("OK: %s at tree size %d extends tree size %d" % (n1, s2, s1))


def main(argv):
    global QUORUM
    args, pem, origin, quorum = list(argv[1:]), None, None, None
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt in ("--pubkey", "--origin") and args:
            val = args.pop(0)
            pem, origin = (val, origin) if opt == "--pubkey" else (pem, val)
        elif opt == "--witness" and len(args) >= 2:
            WITNESSES.append((args[0], args[1], None))
            del args[:2]
        elif opt == "--quorum" and args and args[0].isdigit():
            quorum = int(args.pop(0))
        else:
            args = []
    if not pem or len(args) != 2 or args[0] not in ("proof", "consistency", "note"):
        sys.stderr.write(__doc__)
        return 2
    try:
        raw = raw_public_key(pem)
        WITNESSES[:] = [(n, p, raw_public_key(p)) for n, p, _ in WITNESSES]
        QUORUM = len(WITNESSES) if quorum is None else quorum
        if QUORUM > len(WITNESSES):
            raise Fail("--quorum %d but only %d witness(es) named" % (QUORUM, len(WITNESSES)))
        with open(args[1], "rb") as f:
            data = f.read()
        if args[0] == "note":
            name, size, root = check_note(data, pem, raw, origin)
            if QUORUM:
                check_cosignatures(data, WITNESSES, QUORUM)
            print("OK: %s tree size %d root %s" % (name, size, base64.b64encode(root).decode()))
            return 0
        try:
            doc = json.loads(data)
        except ValueError:
            raise Fail("%s is not JSON" % args[1])
        if not isinstance(doc, dict):
            raise Fail("%s is not a JSON object" % args[1])
        (check_proof if args[0] == "proof" else check_consistency)(doc, pem, raw, origin)
        return 0
    except Fail as e:
        print("FAIL: %s" % e)
        return 1
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        print("FAIL: malformed file (%s: %s)" % (type(e).__name__, e))
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
