#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Independent verifier for callgate evidence (docs/evidence.md).

Written from the format documentation alone, with the Python standard
library only, so that evidence can be checked without trusting callgate.

    verify_trace.py TRACE_DIR                 one package's events.ndjson alone
    verify_trace.py STATE_DIR TRACE_ID        the package against the journal
    verify_trace.py STATE_DIR --all           the journal, checkpoints, every package

Packages in traces/archive/*.tar (appended as sealed, the default, or packed
there by retention) are read from there; with --all every tar is read whole
and must hold only packages of traces the journal holds, each once. Run it
on a stopped daemon's state (or a copy): a running daemon appends while it
reads.

Checks: every line's hash over its exact bytes, both chains from the genesis,
contiguous sequence numbers, the closed set of event types, the structure of
each trace (request first, no execution without a permit or after BLOCK or
UNKNOWN, verdict, replay, seal with the right count and head; or one refusal
event alone), that a
package's events are byte-for-byte the journal's, and that every checkpoint's
head is the journal's event at that seq. verdict.json is checked against the
events; verdict.md is not (that would repeat callgate's renderer: `callgate
replay` checks it). Ed25519 signatures are NOT checked
(the standard library has no Ed25519): use `callgate replay` or the
`openssl pkeyutl -verify` command in docs/evidence.md for those.

Exit status: 0 when everything verifies, 1 otherwise (each problem printed).
"""
import hashlib
import json
import os
import sys
import tarfile

GENESIS = hashlib.sha256(b"callgate-genesis-v1").hexdigest()
TAIL = 76  # ,"hash":"<64 hex>"}\n
KEYS = ["seq", "trace", "tseq", "type", "ts", "prev", "tprev", "payload", "hash"]
TYPES = {"request", "resolved", "rung", "decision", "approval.requested",
         "approval.answered", "permit", "exec.started", "exec.finished", "screening",
         "verdict", "replay", "seal", "incomplete", "recovery", "net.connection",
         "refusal"}
HEX = set("0123456789abcdef")


class Problems(list):
    def add(self, where, what):
        self.append("%s: %s" % (where, what))


def read_lines(path, probs, data=None):
    """Lines with their newline; a last line without one is reported."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    lines = data.split(b"\n")
    if lines[-1]:
        probs.add(path, "truncated: the file ends mid-line")
    return [l + b"\n" for l in lines[:-1]]


def no_duplicates(pairs):
    """A JSON object whose members are unique (as callgate's own parser demands)."""
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate member")
    return dict(pairs)


def parse(line, where, probs):
    """One event line -> dict, or None (after reporting why)."""
    if not line.endswith(b'"}\n') or line[-TAIL:-TAIL + 9] != b',"hash":"':
        probs.add(where, "schema: the line does not end with the hash member")
        return None
    try:
        e = json.loads(line, object_pairs_hook=no_duplicates)
    except ValueError as x:
        probs.add(where, "schema: not JSON (%s)" % x)
        return None
    if not isinstance(e, dict) or list(e) != KEYS:
        probs.add(where, "schema: members missing or out of order")
        return None
    if e["type"] not in TYPES:
        probs.add(where, "type_unknown: %r" % e["type"])
    if not (isinstance(e["seq"], int) and isinstance(e["tseq"], int)
            and isinstance(e["payload"], dict)
            and all(isinstance(e[k], str) and len(e[k]) == 64 and set(e[k]) <= HEX
                    for k in ("prev", "tprev", "hash"))):
        probs.add(where, "schema: a member has the wrong type")
        return None
    if hashlib.sha256(line[:-TAIL]).hexdigest() != e["hash"]:
        probs.add(where, "hash: the bytes do not hash to %s" % e["hash"][:16])
    return e


def check_trace(events, where, probs):
    """Chain and structure of one trace's events (dicts, in file order)."""
    prev, decision, permit, started, verdicts, last, end = GENESIS, None, False, False, 0, None, None
    human_ok = False  # an UNKNOWN call runs only after a grant or the last approval needed
    asked = False  # approval.requested seen
    for n, e in enumerate(events, 1):
        at = "%s event %d" % (where, n)
        if e["tseq"] != n:
            probs.add(at, "sequence: tseq %d, expected %d" % (e["tseq"], n))
        if e["tprev"] != prev:
            probs.add(at, "link: tprev does not name the previous event")
        if e["trace"] != events[0]["trace"]:
            probs.add(at, "trace_mismatch: event of trace %s" % e["trace"])
        prev, t = e["hash"], e["type"]
        if end:
            probs.add(at, "event_after_seal: %s after %s" % (t, end))
        if n == 1 and t not in ("request", "refusal"):
            probs.add(at, "structure: a trace begins with its request")
        if t == "decision":
            decision = e["payload"].get("decision")
        if t == "approval.requested":
            asked = True
        if t == "approval.answered" and not asked and not (
                decision is not None and e["payload"].get("outcome") == "grant"):
            probs.add(at, "structure: an answer to an approval nobody requested")
        if t == "approval.answered" and decision is not None:
            p = e["payload"]
            if p.get("outcome") == "grant" or (
                    p.get("outcome") == "approved" and isinstance(p.get("have"), int)
                    and isinstance(p.get("need"), int) and p["have"] >= p["need"]):
                human_ok = True
        blocked = decision not in ("ALLOW", "DEGRADE") and not (
            decision == "UNKNOWN" and human_ok)
        if t == "permit":
            permit = True
            if decision is None or blocked:
                probs.add(at, "exec_despite_block: permit after decision %s" % decision)
        if t == "exec.started":
            started = True
            if not permit:
                probs.add(at, "exec_without_permit: execution without a permit (critical)")
            elif blocked:
                probs.add(at, "exec_despite_block: execution after %s (critical)" % decision)
        if t == "exec.finished" and not started:
            probs.add(at, "structure: exec.finished without exec.started")
        if t == "verdict":
            verdicts += 1
        elif verdicts and t not in ("replay", "seal", "incomplete", "refusal"):
            probs.add(at, "structure: %s after the verdict" % t)
        if t == "seal":
            if last != "replay":
                probs.add(at, "structure: the seal follows the replay event")
            if e["payload"].get("events") != n - 1 or e["payload"].get("head") != e["tprev"]:
                probs.add(at, "seal_mismatch: wrong event count or head")
            end = "seal"
        if t == "incomplete":
            end = "incomplete"
        if t == "refusal":  # request, decision and verdict in one: the whole trace
            if n != 1:
                probs.add(at, "structure: a refusal is a whole trace: it comes alone")
            verdicts += 1
            end = "refusal"
        last = t
    if not end:
        probs.add(where, "not_sealed: no seal and no incomplete marker")
    elif end == "seal" and verdicts != 1:
        probs.add(where, "structure: %d verdicts" % verdicts)
    return end


# verdict.json = the sealed verdict, plus what the trace's events show; these
# members are the ones the events add or make true (docs/evidence.md).
FROM_EVENTS = {"outcome", "executed", "decided_by", "call", "run", "exit_codes", "outputs",
               "timed_out", "duration_ms", "screening", "connections", "blocked", "next_steps"}


def refusal_parts(p):
    """A refusal's payload as the request, resolved and decision events it stands for,
    and what its seal would have said (docs/evidence.md, "Refusals")."""
    parts = {"request": [{k: p[k] for k in ("request", "raw", "peer") if k in p}]}
    for k in ("resolved", "decision"):
        if k in p:
            parts[k] = [p[k]]
    d, r = p.get("decision") or {}, p.get("reply") or {}
    pol = (d if "decision" in p else p).get("policy") or {}
    sealed = {"decision": d.get("decision") or ("ALLOW" if r.get("type") == "S" else "BLOCK"),
              "reply": {"type": r.get("type"), "code": r.get("code"),
                        "message": r.get("message")},
              "constrained": d.get("constraints") or [], "executed": False,
              "policy": {"sha256": pol.get("sha256", ""), "generation": pol.get("generation", 0)}}
    return parts, sealed


def check_verdict(v, events, where, probs):
    """verdict.json says what the seal says, and what it adds agrees with the events."""
    if not isinstance(v, dict):
        probs.add(where, "verdict_mismatch: verdict.json is not an object")
        return
    by_type = {}
    if events[-1]["type"] == "refusal":
        by_type, sealed = refusal_parts(events[-1]["payload"])
        for k in sealed:
            if v.get(k) != sealed[k]:
                probs.add(where, "verdict_mismatch: %s differs from the refusal" % k)
        sealed = None  # what else it says is checked against the events below
    else:
        sealed = events[-1]["payload"].get("verdict") or {}
        if v == sealed:
            return  # a package written before verdicts read the events: the seal's, exactly
    for e in events:
        by_type.setdefault(e["type"], []).append(e["payload"])
    # A compact seal leaves the summary (the reply's message) and why[] (the
    # decision's rungs) to the package; anything else must be the seal's.
    rungs = ((by_type.get("decision") or [{}])[-1]).get("rungs") or []
    rebuilt = {
        "summary": ((sealed or {}).get("reply") or {}).get("message"),
        "why": [{"rung": r.get("rung"), "decision": r.get("decision"),
                 "rule_id": r.get("rule_id"), "layer": str(r.get("reason")).split("-")[0],
                 "code": r.get("reason"), "why": r.get("why")} for r in rungs],
    }
    for k in (set(sealed) | set(v)) if sealed is not None else ():
        want = sealed[k] if k in sealed else rebuilt.get(k)
        if k not in FROM_EVENTS and want != v.get(k):
            probs.add(where, "verdict_mismatch: %s differs from the sealed verdict" % k)
    fin = by_type.get("exec.finished")
    started = "exec.started" in by_type and not (fin and fin[-1].get("started") is False)
    if v.get("executed") is not started:
        probs.add(where, "verdict_mismatch: executed is %r, but the command %s"
                  % (v.get("executed"), "ran" if started else "did not run"))
    if fin and v.get("exit_codes") != fin[-1].get("exit_codes"):
        probs.add(where, "verdict_mismatch: exit_codes differ from exec.finished")
    if not fin and "exit_codes" in v:
        probs.add(where, "verdict_mismatch: exit codes without exec.finished")
    dec = by_type.get("decision")
    if dec and (v.get("decided_by") or {}).get("rule_id") != dec[-1].get("rule_id"):
        probs.add(where, "verdict_mismatch: decided_by.rule_id differs from the decision")
    if fin and v.get("outputs") != {"stdout": fin[-1].get("stdout"),
                                    "stderr": fin[-1].get("stderr")}:
        probs.add(where, "verdict_mismatch: outputs differ from exec.finished")
    if v.get("connections", []) != by_type.get("net.connection", []):
        probs.add(where, "verdict_mismatch: connections differ from the net.connection events")
    permit = (by_type.get("permit") or [None])[-1]
    run = v.get("run")
    if (permit is None) != (run is None) or (permit and (
            run.get("uid"), run.get("gid"), run.get("timeout_ms")) != (
            permit.get("run_uid"), permit.get("run_gid"), permit.get("timeout_ms"))):
        probs.add(where, "verdict_mismatch: run differs from the permit")
    req = (by_type.get("request") or [{}])[0]
    call = v.get("call")
    if call is not None and isinstance(req.get("request"), dict):
        argv = [s.get("argv") for s in call.get("stages", [])]
        exes = [s.get("exe") for s in call.get("stages", [])]
        res = [s.get("exe") for s in ((by_type.get("resolved") or [{}])[-1].get("stages") or [])]
        if argv != req["request"].get("pipeline", []) or call.get("peer") != req.get("peer"):
            probs.add(where, "verdict_mismatch: call differs from the request")
        if res and exes != res[:len(exes)]:
            probs.add(where, "verdict_mismatch: call executables differ from resolved")
    if started and v.get("blocked") != []:
        probs.add(where, "verdict_mismatch: blocked lists something for a call that ran")


def check_package(dirpath, probs, files=None):
    """files: the package's {name: bytes} (from an archive); else read dirpath."""
    path = os.path.join(dirpath, "events.ndjson")
    lines = read_lines(path, probs, None if files is None else files.get("events.ndjson", b""))
    events = [parse(l, "%s line %d" % (path, i), probs) for i, l in enumerate(lines, 1)]
    events = [e for e in events if e]
    check_trace(events, path, probs)
    return lines


PACKAGE = ["events.ndjson", "verdict.json", "verdict.md", "replay.json", "diff.json"]


def octal(field):
    """A tar number field read strictly: leading spaces, 1 to 11 octal
    digits, then only NULs and spaces (readers disagree on anything else)."""
    digits = field.lstrip(b" ")
    k = 0
    while k < len(digits) and 0x30 <= digits[k] <= 0x37:
        k += 1
    if k == 0 or k > 11 or digits[k:].strip(b" \0"):
        return None
    return int(digits[:k], 8)


def plain_member(raw, m):
    """Is the 512-byte header raw, where tarfile found member m, a plain
    ustar header of a regular file, as callgate's writers make: magic
    "ustar\\0" version "00", no name prefix, strict numbers that say what
    tarfile read? (tarfile itself also takes pax and GNU headers, signs and
    whitespace in numbers, which other readers take differently.)"""
    name = raw[:100].split(b"\0", 1)[0].decode("ascii", "replace")
    return (len(raw) == 512 and raw[257:265] == b"ustar\x0000" and raw[156:157] in (b"0", b"\0")
            and raw[345] == 0 and b"\0" in raw[:100] and octal(raw[124:136]) == m.size
            and all(octal(raw[a:b]) is not None for a, b in ((100, 108), (108, 116),
                                                              (116, 124), (136, 148), (148, 156)))
            and name == m.name)


def archived(state, probs, known=None):
    """Packages in traces/archive/*.tar (docs/evidence.md, "Packages as
    archives" and "Retention"): for each trace id, its tar's path and its
    members as (name, data offset, size). The .idx beside each tar only speeds
    lookups (with known, each of their lines must name a trace the journal
    holds); here every tar is read whole, once, and must hold packages only:
    plain ustar members ID/FILE, FILE one of the five, none twice; one package
    per trace over all archives; with known (the journal's trace ids), only
    traces the journal holds; after the last member, nothing but zeros."""
    adir = os.path.join(state, "traces", "archive")
    out = {}
    if not os.path.isdir(adir):
        return out
    for name in sorted(os.listdir(adir)):
        if name.endswith(".idx") and not name.startswith(".") and known is not None:
            # callgate's readers find packages through these lines: a line for a
            # trace the journal does not hold would show them a forged package.
            with open(os.path.join(adir, name), "rb") as f:
                for line in f:
                    tid = line.split(b" ", 1)[0].decode("ascii", "replace")
                    if line.endswith(b"\n") and tid not in known:
                        probs.add("%s: %s" % (os.path.join(adir, name), tid),
                                  "trace_not_in_journal: an index line naming a trace the "
                                  "journal does not hold")
        if not name.endswith(".tar") or name.startswith("."):
            continue
        path = os.path.join(adir, name)
        if os.path.getsize(path) == 0:
            continue  # made by a daemon stopped before its first package
        end, last, repeat, bad = 0, None, False, False
        try:
            with open(path, "rb") as raw, tarfile.open(path, "r:") as tf:
                for m in tf:
                    raw.seek(m.offset)
                    if not plain_member(raw.read(512), m):
                        probs.add("%s offset %d" % (path, m.offset), "archive_layout: not a "
                                  "member a package writer makes (plain ustar, a regular file)")
                        bad = True
                        break  # tarfile's view of what follows cannot be trusted
                    end = m.offset_data + (m.size + 511) // 512 * 512
                    top, _, rest = m.name.partition("/")
                    where = "%s:%s" % (path, m.name)
                    if rest not in PACKAGE:
                        probs.add(where, "package_files: a member that is not part of a "
                                  "trace package")
                        continue
                    if top != last:
                        last, repeat = top, top in out
                        if repeat:
                            probs.add(where, "package_repeated: a second package of the same "
                                      "trace")
                            continue
                        out[top] = (path, [])
                        if known is not None and top not in known:
                            probs.add(where, "trace_not_in_journal: a package with no events "
                                      "in the journal")
                    if repeat:
                        continue
                    if any(n == rest for n, _, _ in out[top][1]):
                        probs.add(where, "package_files: a file that appears twice in the "
                                  "package")
                        continue
                    out[top][1].append((rest, m.offset_data, m.size))
        except (tarfile.TarError, OSError) as e:
            probs.add(path, "archive_unreadable: %s" % e)
            continue
        if bad:
            continue
        if end > os.path.getsize(path):
            probs.add(path, "archive_layout: the last member runs past the end of the file")
            continue
        # tarfile stops quietly at a header it cannot read: what follows must be zeros.
        with open(path, "rb") as f:
            f.seek(end)
            while True:
                block = f.read(1 << 16)
                if not block:
                    break
                if block.strip(b"\0"):
                    probs.add(path, "archive_layout: bytes after the last member that are "
                              "not an end-of-archive marker")
                    break
    return out


def archive_files(packed):
    """{file name: bytes} of one trace's members, from archived()."""
    path, members = packed
    files = {}
    with open(path, "rb") as f:
        for name, off, size in members:
            f.seek(off)
            files[name] = f.read(size)
    return files


def load_journal(state, probs):
    jdir = os.path.join(state, "journal")
    names = sorted(n for n in os.listdir(jdir) if n.endswith(".ndjson") and len(n) == 23)
    out, head, seq, traces = [], GENESIS, 0, {}
    for name in names:
        path = os.path.join(jdir, name)
        for i, line in enumerate(read_lines(path, probs), 1):
            e = parse(line, "%s line %d" % (path, i), probs)
            if not e:
                continue
            if e["seq"] != seq + 1:
                probs.add(path, "line %d: sequence: seq %d after %d" % (i, e["seq"], seq))
            if e["prev"] != head:
                probs.add(path, "line %d: link: prev does not name seq %d" % (i, e["seq"] - 1))
            t = traces.setdefault(e["trace"], [GENESIS, 0])
            if e["tseq"] != t[1] + 1 or e["tprev"] != t[0]:
                probs.add(path, "line %d: trace_link in trace %s" % (i, e["trace"]))
            traces[e["trace"]] = [e["hash"], e["tseq"]]
            head, seq = e["hash"], e["seq"]
            out.append((e, line))
    return out


def check_checkpoints(state, journal, probs):
    path = os.path.join(state, "checkpoints.ndjson")
    by_seq = {e["seq"]: e["hash"] for e, _ in journal}
    n = 0
    if not os.path.exists(path):
        if journal:
            probs.add(path, "checkpoint_missing")
        return
    for i, line in enumerate(read_lines(path, probs), 1):
        c = json.loads(line)
        n += 1
        want = GENESIS if c["seq"] == 0 else by_seq.get(c["seq"])
        if want is None:
            probs.add(path, "line %d: journal_truncated: no event %d" % (i, c["seq"]))
        elif want != c["head"]:
            probs.add(path, "line %d: checkpoint_mismatch at seq %d" % (i, c["seq"]))
    if journal and n == 0:
        probs.add(path, "checkpoint_missing")


def main(argv):
    probs = Problems()
    if len(argv) == 2 and os.path.exists(os.path.join(argv[1], "events.ndjson")):
        check_package(argv[1], probs)
        checked = "package %s" % argv[1]
    elif len(argv) == 3:
        state, which = argv[1], argv[2]
        journal = load_journal(state, probs)
        check_checkpoints(state, journal, probs)
        by_trace = {}
        for e, line in journal:
            by_trace.setdefault(e["trace"], []).append((e, line))
        ids = sorted(t for t in by_trace if t != "journal") if which == "--all" else [which]
        known = set(by_trace) if which == "--all" else None
        packed = archived(state, probs, known)
        for tid in ids:
            tdir = os.path.join(state, "traces", tid)
            evs = by_trace.get(tid)
            if not evs:
                probs.add(tid, "trace_unknown: the journal holds no event of it")
                continue
            end = check_trace([e for e, _ in evs], "journal trace " + tid, probs)
            # A directory (callgate evidence rebuild writes one) and an
            # archived package of the same trace: both must verify.
            sources = []
            if os.path.isdir(tdir):
                sources.append((tdir, None))
            if tid in packed:
                sources.append(("%s:%s" % (packed[tid][0], tid), archive_files(packed[tid])))
            if not sources:
                probs.add(tdir, "trace_dir_missing")
                continue
            for where, content in sources:
                if content is None:
                    files = sorted(f for f in os.listdir(where) if not f.startswith("."))
                else:
                    files = sorted(content)
                if files != sorted(PACKAGE):
                    probs.add(where, "package_files: %s" % files)
                lines = check_package(where, probs, content)
                if lines != [l for _, l in evs]:
                    probs.add(where, "trace_line_mismatch: events.ndjson is not the journal's "
                              "lines")
                if end in ("seal", "refusal"):
                    if content is None:
                        with open(os.path.join(where, "verdict.json"), "rb") as f:
                            vbytes = f.read()
                    else:
                        vbytes = content.get("verdict.json", b"null")
                    check_verdict(json.loads(vbytes), [e for e, _ in evs], where, probs)
        checked = "%d trace(s), %d journal events" % (len(ids), len(journal))
    else:
        sys.stderr.write(__doc__)
        return 64
    for p in probs:
        print("FAIL " + p)
    print("%s  %s (Ed25519 signatures not checked here)" % ("PASS" if not probs else "FAIL",
                                                           checked))
    return 0 if not probs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
