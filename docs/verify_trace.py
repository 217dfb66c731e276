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
and must hold only packages of traces the journal holds, each once, and
every entry of traces/ but archive must be the package of a trace the
journal holds. Run it on a stopped daemon's state (or a copy): a running
daemon appends while it reads, and its unsigned tail would fail.

Checks: every line's hash over its exact bytes, both chains from the genesis,
contiguous sequence numbers, the closed set of event types, the structure of
each trace (request first, no execution without a permit or after BLOCK or
UNKNOWN, verdict, replay, seal with the right count and head; or one refusal
event alone), that a package's events are byte-for-byte the journal's, that
every checkpoint's head is the journal's event at that seq and the last
checkpoint is the journal's last event (head_unsigned), and that the file
names are the ones callgate reads (journal/<16 digits>.ndjson,
traces/archive/<name>.tar and .idx) -- any other *.ndjson, *.tar or *.idx
there is a failure, not ignored.

verify_trace.py vouches for all of verdict.json of a sealed or refused
trace: it derives the verdict the way src/evidence/verdict.c does (the seal's
verdict, or a refusal's, with what the events add: outcome, executed,
decided_by, call, run, results, screening, connections, blocked,
next_steps) and compares the whole file with it, member by member, type by
type (1, 1.0 and true differ), or with the seal's verdict alone (a package
written before verdicts read the events). A verdict.json with a member
twice is a failure.

It does NOT check, and `callgate replay` does: Ed25519 signatures of
checkpoints and notes (the standard library has no Ed25519; the `openssl
pkeyutl -verify` command in docs/evidence.md checks one by hand), Merkle
roots, checkpoint.note, verdict.md (that would repeat callgate's renderer),
and where index lines point (each tar is read whole instead). Nor does it
check the verdict.json of a trace marked incomplete, or replay.json and
diff.json (they report, they do not vouch).

Every file it opens under the state directory must be a regular file (a FIFO
would block the read forever). Malformed input is a named failure, never a
crash.

Exit status: 0 when everything verifies, 1 otherwise (each problem printed).
"""
import copy
import hashlib
import json
import math
import os
import re
import stat
import sys
import tarfile

GENESIS = hashlib.sha256(b"callgate-genesis-v1").hexdigest()
TAIL = 76  # ,"hash":"<64 hex>"}\n
KEYS = ["seq", "trace", "tseq", "type", "ts", "prev", "tprev", "payload", "hash"]
TYPES = {"request", "resolved", "rung", "decision", "approval.requested",
         "approval.answered", "permit", "exec.started", "exec.finished", "screening",
         "verdict", "replay", "seal", "incomplete", "recovery", "net.connection",
         "refusal", "stopped"}
HEX = set("0123456789abcdef")


class Problems(list):
    def add(self, where, what):
        self.append("%s: %s" % (where, what))


def open_regular(path):
    """path opened for reading, if it is a regular file; else OSError. A FIFO
    planted in the state directory would block open() (and a read) forever:
    it is looked at before it is opened, and opened without blocking, then
    looked at again (it may have been swapped in between)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError("not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path):
    with open_regular(path) as f:
        return f.read()


def why(e):
    """An OSError as a few words."""
    return e.strerror or str(e)


def read_lines(path, probs, data=None, check="unreadable"):
    """Lines with their newline; a last line without one is reported. A file
    that cannot be read is reported as check, and has no lines."""
    if data is None:
        try:
            data = read_regular(path)
        except OSError as e:
            probs.add(path, "%s: %s" % (check, why(e)))
            return []
    lines = data.split(b"\n")
    if lines[-1]:
        probs.add(path, "truncated: the file ends mid-line")
    return [l + b"\n" for l in lines[:-1]]


def no_duplicates(pairs):
    """A JSON object whose members are unique (as callgate's own parser demands)."""
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("a member appears twice: %s"
                         % sorted({k for k in keys if keys.count(k) > 1}))
    return dict(pairs)


def finite(text):
    x = float(text)
    if not math.isfinite(x):
        raise ValueError("a number out of range: %s" % text)
    return x


def not_json(text):
    raise ValueError("%s is not JSON" % text)


def load_json(data):
    """bytes -> (value, None), or (None, why not): JSON as callgate's parser
    takes it: UTF-8, no member twice, no NaN or Infinity."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=no_duplicates,
                          parse_float=finite, parse_constant=not_json), None
    except (ValueError, RecursionError) as x:  # UnicodeDecodeError is a ValueError
        return None, str(x) or type(x).__name__


def integer(x):
    """A JSON integer (Python's bool is an int, JSON's true is not)."""
    return isinstance(x, int) and not isinstance(x, bool)


def parse(line, where, probs):
    """One event line -> dict, or None (after reporting why)."""
    if not line.endswith(b'"}\n') or line[-TAIL:-TAIL + 9] != b',"hash":"':
        probs.add(where, "schema: the line does not end with the hash member")
        return None
    e, bad = load_json(line)
    if bad:
        probs.add(where, "schema: not JSON (%s)" % bad)
        return None
    if not isinstance(e, dict) or list(e) != KEYS:
        probs.add(where, "schema: members missing or out of order")
        return None
    if not (integer(e["seq"]) and integer(e["tseq"]) and isinstance(e["type"], str)
            and isinstance(e["trace"], str) and isinstance(e["payload"], dict)
            and all(isinstance(e[k], str) and len(e[k]) == 64 and set(e[k]) <= HEX
                    for k in ("prev", "tprev", "hash"))):
        probs.add(where, "schema: a member has the wrong type")
        return None
    if e["type"] not in TYPES:
        probs.add(where, "type_unknown: %r" % e["type"])
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


# ---- verdict.json: derived as src/evidence/verdict.c derives it ----------
#
# The package's verdict.json is the sealed verdict (the seal's `verdict`, or
# for a refusal the one its event stands for) with what the trace's events
# add or make true (docs/evidence.md, "Trace packages"). What follows is
# that derivation, function by function: cg_refusal_verdict,
# cg_trace_facts, cg_verdict_with_facts. JSON null and an absent member
# read the same here (None), as they come out the same there.

DECISIONS = ("ALLOW", "DEGRADE", "UNKNOWN", "BLOCK")
NOTHING_RAN = "the whole request: nothing was run"


def get(o, k):
    """o[k] when o is an object that has k, else None."""
    return o.get(k) if isinstance(o, dict) else None


def text(o, k):
    """o[k] when it is a string, else None."""
    v = get(o, k)
    return v if isinstance(v, str) else None


def c_text(s, size):
    """s as a C buffer of size bytes holds it (snprintf cuts it), or None
    when the cut splits a character (that string is then not set at all)."""
    try:
        return s.encode("utf-8")[:size - 1].decode("utf-8")
    except UnicodeDecodeError:
        return None


def layer_of(code):
    """The layer of a reply code: its first part (WA, EN, CT), else MCP."""
    for layer in ("WA", "EN", "CT"):
        if code and code.startswith(layer + "-"):
            return layer
    return "MCP"


def as_list(x):
    """Constraints as a list: an object's members become {constraint, value}."""
    if x is None:
        return []
    if isinstance(x, list):
        return copy.deepcopy(x)
    if isinstance(x, dict):
        return [{"constraint": k, "value": copy.deepcopy(v)} for k, v in x.items()]
    return [x]


def refusal_verdict(p, trace_id):
    """What a refusal's seal would have said (cg_refusal_verdict: the
    kernel's compact seal, cg_verdict_render), or None when its reply has no
    type or code."""
    reply, has_d = get(p, "reply"), "decision" in p
    d = p.get("decision")
    rtype, code = text(reply, "type"), text(reply, "code")
    if rtype is None or code is None:
        return None
    given = text(d, "decision") if has_d else ("ALLOW" if rtype[:1] == "S" else "BLOCK")
    decision = next((x for x in DECISIONS if given and given.isascii() and given.upper() == x),
                    "UNKNOWN")
    rule = (text(d, "rule_id") or "") if has_d else ""
    msg = text(reply, "message")
    message = msg if msg is not None else ""
    summary = msg if msg is not None else text(reply, "message_key")
    if summary is None:
        summary = c_text("%s by rule %s: %s" % (decision, rule, message), 600)
    pol = get(d, "policy") if has_d else p.get("policy")
    generation = get(pol, "generation")
    v = {"trace_id": trace_id, "decision": decision}
    if given is not None and given != decision:
        v["decision_given"] = given
    if summary is not None and summary != message:
        v["summary"] = summary  # compact: a summary that is the message is not sealed
    if not has_d:  # with a decision, why[] is its rungs (restored below)
        v["why"] = [{"rung": "wire", "layer": layer_of(code), "code": code, "rule_id": rule}]
    v["constrained"] = as_list(get(d, "constraints"))
    v["confidence"] = 1.0
    v["reply"] = {"type": rtype[:1] if rtype[:1] in ("S", "I", "D", "E") else "E",
                  "code": code, "message": message}
    v["executed"] = False
    v["policy"] = {"sha256": text(pol, "sha256") or "",
                   "generation": generation if integer(generation) else 0}
    return v


def facts_add(f, t, p):
    """Keep what the verdict needs of one event (type t, payload p) in f."""
    single = {"resolved": "resolved", "decision": "decision", "permit": "permit",
              "exec.finished": "finished"}
    if t == "request":
        f["request"] = p["request"] if "request" in p else p
        if "peer" in p:
            f["peer"] = p["peer"]
    elif t in single:
        f[single[t]] = p
    elif t == "exec.started":
        f["started"] = True
    elif t == "approval.answered":
        f["approvals"].append(p)
    elif t == "screening":
        f["screening"].append(p)
    elif t == "net.connection":
        f["connections"].append(p)
    elif t == "seal" and "verdict" in p:
        f["sealed"] = p["verdict"]
    elif t == "incomplete":
        f["incomplete"] = True


def trace_facts(events):
    """What the trace's events say (cg_trace_facts). A refusal stands for a
    request, a resolution, a decision and its seal."""
    f = {"started": False, "approvals": [], "screening": [], "connections": []}
    for e in events:
        p = e["payload"]
        if e["type"] != "refusal":
            facts_add(f, e["type"], p)
            continue
        facts_add(f, "request", {k: p.get(k) for k in ("request", "raw", "peer")})
        for k in ("resolved", "decision"):
            if k in p:
                facts_add(f, k, p[k])
        sealed = refusal_verdict(p, e["trace"])
        if sealed is not None:
            f["sealed"] = sealed
    return f


def last_answer(f):
    """The last approval answer (or None), and the uids that approved."""
    answers = f["approvals"]
    uids = [a["uid"] for a in answers
            if integer(get(a, "uid")) and text(a, "outcome") == "approved"]
    return (answers[-1] if answers else None), uids


def ran(f):
    return f["started"] is True and get(f.get("finished"), "started") is not False


def failed_exit(fin):
    """The first non-zero exit code of a finished run, or 0."""
    codes = get(fin, "exit_codes")
    for c in codes if isinstance(codes, list) else []:
        if integer(c) and c != 0:
            return c
    return 0


def outcome_of(f, sealed, legacy=False):
    """What happened to the call, in one word (legacy: as derived before 2026-11-27,
    when a grant's opening read "answered")."""
    action = text(f.get("request"), "action")
    rtype = text(get(sealed, "reply"), "type")
    decision = text(sealed, "decision")
    fin = f.get("finished")
    ans = text(last_answer(f)[0], "outcome")
    if text(sealed, "status") == "incomplete" or f.get("incomplete") is True:
        return "incomplete"
    if action == "gate":
        return "dry_run"
    if f["started"] is True:
        if "finished" not in f:
            return "failed"
        if get(fin, "timed_out") is True:
            return "run_timeout"
        if get(fin, "cancelled") is True:
            return "cancelled"
        if (get(fin, "started") is False or failed_exit(fin) != 0
                or (isinstance(fin, dict) and "stages_started" in fin)):
            return "failed"
        if ans == "grant":
            return "granted"
        if ans == "approved":
            return "approved"
        return "degraded" if decision == "DEGRADE" else "allowed"
    if "permit" in f:
        return "failed"  # permitted, but it never started
    if rtype == "I":
        return "invalid"
    if ans == "overruled" and get(last_answer(f)[0], "changed") is True:
        return "refused"  # the policy reloaded meanwhile decides it otherwise: send it again
    if ans in ("denied", "overruled", "timeout"):
        return {"denied": "denied", "overruled": "blocked", "timeout": "approval_timeout"}[ans]
    if not legacy and ans == "withdrawn":
        return "cancelled"  # withdrawn while it waited: not an error
    if rtype == "E":
        return "error"
    if decision == "BLOCK":
        return "blocked"
    if not legacy and rtype == "S" and text(get(sealed, "reply"), "code") == "CT-OPEN-S-001":
        return "grant_opened"  # by a person on the admin socket, or an agent's request approved
    return "answered" if rtype == "S" else "refused"


def next_step(outcome, f, v):
    """The one next step verdict.json gives for the outcome."""
    fin = f.get("finished")
    ans = last_answer(f)[0]
    rule = text(f.get("decision"), "rule_id") or text(v, "rule_id") or "-"
    decision = text(v, "decision")
    stages = get(fin, "stages_started")
    steps = {
        "allowed": "Continue: the call ran and exited 0; use its result.",
        "degraded": "Continue: the call ran within the constraints listed; stay within "
                    "them (a request outside them is refused).",
        "approved": "Continue: a person approved this call and it ran; use its result. "
                    "The approval covered this request only.",
        "granted": "Continue: the call ran under grant %s; use its result."
                   % (text(ans, "grant_id") or "-"),
        "run_timeout": "The command was killed at its deadline: retry with a larger "
                       "timeout_ms (the policy may cap it) or split the work.",
        "cancelled": "The call was cancelled before it finished; send it again if it "
                     "is still needed.",
        "blocked": "Do not retry: rule %s refuses this and no approval or grant overrides "
                   "it. Do the task another way the policy allows, or ask the operator to "
                   "change the policy." % rule,
        "refused": "Rule %s leaves this to a person: ask for approval (a daemon run with "
                   "--approval) or a grant for this exact command, or make a narrower "
                   "request a rule allows." % rule,
        "denied": "A person denied this call: do not retry it unchanged; ask them "
                  "what would be acceptable.",
        "approval_timeout": "No approver answered in time: send the call again when an "
                            "approver is available, or ask the operator for a grant.",
        "invalid": "Fix the request as the reply message says, then retry.",
        "answered": "Continue: the request was answered; nothing was run.",
        "grant_opened": "Continue: calls of exactly the grant's shape now run without asking "
                        "until its uses or its time run out (callgate grant list shows it, "
                        "callgate grant close ends it); nothing ran now.",
    }
    if outcome == "failed" and integer(stages):
        return ("Only part of the pipeline ran: %d stage(s) started and were killed "
                "when the next could not start. Check what they changed, and that every "
                "stage's executable exists and is usable, before retrying." % stages)
    if outcome == "failed" and ran(f) and "finished" in f:
        return ("The command ran and exited with code %d: read its stderr and fix the "
                "command or its input before retrying." % failed_exit(fin))
    if outcome == "failed":
        return ("The command could not be started: check that the executable and "
                "the working directory exist and are usable, then retry.")
    if outcome == "dry_run":
        if decision in ("ALLOW", "DEGRADE"):
            return ("Nothing ran (gate is a dry run): send the same request as exec "
                    "to run it.")
        if decision == "BLOCK":
            return ("Nothing ran (gate is a dry run): do not send this as exec; rule %s "
                    "would refuse it." % rule)
        return ("Nothing ran (gate is a dry run): as exec it would need a "
                "person's approval or a grant.")
    if outcome in steps:
        return steps[outcome]
    return ("Stop and report trace %s to the operator; the failure was not caused "
            "by the request." % (text(v, "trace_id") or "-"))


def decided_by(f, sealed):
    """Who decided: the rule and rung, the policy, any person or grant."""
    d = f.get("decision")
    o = {"decision": text(d, "decision"),
         "rule_id": text(d, "rule_id") if text(d, "rule_id") is not None
         else text(sealed, "rule_id"),
         "rung": text(d, "rung"), "policy": get(d, "policy")}
    ans, uids = last_answer(f)
    if ans is not None:
        a = {"outcome": text(ans, "outcome"), "approvers": uids, "need": get(ans, "need"),
             "why": get(ans, "why")}
        if integer(get(ans, "uid")) and text(ans, "outcome") != "approved":
            a["by"] = ans["uid"]
        o["approval"] = a
    grant = text(ans, "grant_id") or text(f.get("permit"), "grant_id")
    if grant:
        o["grant_id"] = grant
    return o


def call_of(f):
    """What was asked: peer, host, each stage's argv with its resolved executable."""
    rq, rs = f.get("request"), f.get("resolved")
    pipeline, resolved = get(rq, "pipeline"), get(rs, "stages")
    stages = []
    for i, argv in enumerate(pipeline if isinstance(pipeline, list) else []):
        r = resolved[i] if isinstance(resolved, list) and i < len(resolved) else None
        found = text(r, "found")  # left out of the event when it is exe itself
        stages.append({"argv": argv, "exe": text(r, "exe"),
                       "found": found if found is not None else text(r, "exe")})
    cwd = text(rs, "cwd")
    return {"action": text(rq, "action"), "peer": f.get("peer"), "host": text(rq, "host"),
            "session": text(rq, "session"), "cwd": cwd if cwd is not None else text(rq, "cwd"),
            "workspace": text(rs, "workspace"), "privileged": get(rq, "privileged"),
            "reason": text(rq, "reason"), "stages": stages}


def run_of(f):
    """How it ran: the permit's uid, deadline and confinement, or None."""
    if "permit" not in f:
        return None
    p = f["permit"]
    c = get(p, "confinement")
    every = get(c, "pipeline_confined")
    r = {"uid": get(p, "run_uid"), "gid": get(p, "run_gid"),
         "timeout_ms": get(p, "timeout_ms"),
         "constraints": get(f.get("decision"), "constraints")}
    if every is None:  # one confinement for every stage
        r.update({"view": get(c, "view"), "network": get(c, "network"),
                  "limits": get(c, "limits"), "confined": get(c, "confined")})
        return r
    # Stages confined apart: whether every one was, and each one's own.
    r["confined"] = every
    r["stages"] = [{"confined": get(s, "confined") is True, "view": get(s, "view"),
                    "network": get(s, "network"), "limits": get(s, "limits")}
                   for s in (get(c, "stages") or [])]
    return r


def expected_verdict(sealed, f, legacy=False):
    """The sealed verdict with what the events add (cg_verdict_with_facts; legacy: as
    derived before 2026-11-27, cg_verdict_with_events_legacy)."""
    v = copy.deepcopy(sealed)
    if not isinstance(v, dict):
        return v
    f = copy.deepcopy(f)
    # What a compact seal left to the events: summary and why[].
    if "summary" not in v and text(get(v, "reply"), "message") is not None:
        v["summary"] = v["reply"]["message"]
    rungs = get(f.get("decision"), "rungs")
    if "why" not in v and isinstance(rungs, list):
        v["why"] = [{"rung": text(r, "rung"), "decision": text(r, "decision"),
                     "rule_id": text(r, "rule_id"), "layer": layer_of(text(r, "reason")),
                     "code": text(r, "reason"), "why": get(r, "why")} for r in rungs]
    outcome = outcome_of(f, sealed, legacy)
    v["outcome"] = outcome
    v["executed"] = ran(f)
    v["decided_by"] = decided_by(f, sealed)
    if "request" in f:
        v["call"] = call_of(f)
    if run_of(f) is not None:
        v["run"] = run_of(f)
    if "finished" in f:
        fin = f["finished"]
        if isinstance(fin, dict) and "exit_codes" in fin:
            v["exit_codes"] = fin["exit_codes"]
        v["outputs"] = {"stdout": get(fin, "stdout"), "stderr": get(fin, "stderr")}
        v["timed_out"] = get(fin, "timed_out") is True
        us = get(fin, "duration_us")
        if integer(us):
            v["duration_ms"] = abs(us) // 1000 * (1 if us >= 0 else -1)  # C's division
        hooks = get(fin, "hooks_not_run")
        if isinstance(hooks, list) and hooks:  # the hooks git said it did not run
            v["hooks_not_run"] = hooks
    if f["screening"]:
        v["screening"] = f["screening"][-1]
    v["connections"] = f["connections"]
    rq = f.get("request")
    if outcome == "grant_opened" and isinstance(get(rq, "admin"), str):
        # An admin's grant opening names no call: who opened it.
        v["call"] = {"action": "grant_open (admin socket)", "peer": {"uid": get(rq, "uid")}}
    if v["executed"] or outcome == "grant_opened":  # a grant opened refused nothing
        v["blocked"] = []
    elif not (isinstance(v.get("blocked"), list) and v["blocked"]):
        v["blocked"] = [NOTHING_RAN]
    if outcome != "incomplete":
        step = next_step(outcome, f, v)
        hooks = v.get("hooks_not_run")
        if isinstance(hooks, list) and hooks and step.startswith("Continue:"):
            first = hooks[0] if isinstance(hooks[0], str) else "?"
            more = " and %d more" % (len(hooks) - 1) if len(hooks) > 1 else ""
            step += (" The repository's hooks did not run inside the call (git said so "
                     "of %s%s): run them on the host before pushing." % (first, more))
        step = c_text(step, 400)
        if step is not None:
            v["next_steps"] = [step]
    return v


def same(a, b):
    """JSON equality, type by type: 1, 1.0 and true are three values."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check_verdict(vbytes, events, where, probs):
    """verdict.json (bytes) is the verdict the events derive, or the sealed one alone."""
    where += "/verdict.json"
    v, bad = load_json(vbytes)
    if bad:
        probs.add(where, "verdict_mismatch: not a verdict (%s)" % bad)
        return
    last = [e for e in events if e["type"] in ("seal", "refusal")][-1]
    f = trace_facts(events)
    alone = f.get("sealed") if last["type"] == "refusal" else last["payload"].get("verdict")
    if alone is None:
        probs.add(where, "verdict_mismatch: the trace's %s holds no verdict" % last["type"])
        return
    try:
        want = expected_verdict(alone, f)
        if same(v, want) or same(v, alone) or same(v, expected_verdict(alone, f, True)):
            return
    except RecursionError:
        probs.add(where, "verdict_mismatch: nested too deeply to compare")
        return
    if isinstance(v, dict) and isinstance(want, dict):
        differ = sorted(k for k in set(v) | set(want)
                        if k not in v or k not in want or not same(v[k], want[k]))
        probs.add(where, "verdict_mismatch: not the verdict the events derive (members "
                  "differing: %s), nor the sealed verdict alone" % ", ".join(differ))
    else:
        probs.add(where, "verdict_mismatch: not the verdict the seal recorded")


def check_package(dirpath, probs, files=None):
    """files: the package's {name: bytes} (from an archive); else read dirpath."""
    path = os.path.join(dirpath, "events.ndjson")
    lines = read_lines(path, probs, None if files is None else files.get("events.ndjson", b""),
                       check="package_files")
    events = [parse(l, "%s line %d" % (path, i), probs) for i, l in enumerate(lines, 1)]
    events = [e for e in events if e]
    check_trace(events, path, probs)
    return lines


PACKAGE = ["events.ndjson", "verdict.json", "verdict.md", "replay.json", "diff.json"]
JOURNAL_TRACE = "journal"  # the journal's own events' trace id: never a call's, no package


def segment_name(name):
    """A journal segment's name, as callgate reads it: 16 digits, .ndjson."""
    return re.fullmatch(r"[0-9]{16}\.ndjson", name) is not None


def archive_name(name, ext):
    """An archive's (or its index's) name, as callgate reads it: shorter than
    40 bytes, ending in ext, not hidden."""
    n = len(os.fsencode(name))
    return len(ext) < n < 40 and name.endswith(ext) and not name.startswith(".")


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
    whitespace in numbers, which other readers take differently; and it
    takes a header whose devmajor or devminor it cannot read as the end of
    the archive, where GNU tar reads on: those two are strict numbers or
    all NUL.)"""
    name = raw[:100].split(b"\0", 1)[0].decode("ascii", "replace")
    return (len(raw) == 512 and raw[257:265] == b"ustar\x0000" and raw[156:157] in (b"0", b"\0")
            and raw[345] == 0 and b"\0" in raw[:100] and octal(raw[124:136]) == m.size
            and all(octal(raw[a:b]) is not None for a, b in ((100, 108), (108, 116),
                                                              (116, 124), (136, 148), (148, 156)))
            and all(octal(raw[a:b]) is not None or not raw[a:b].strip(b"\0")
                    for a, b in ((329, 337), (337, 345)))
            and name == m.name)


def check_index(path, probs, known):
    """Each line of an index names a trace the journal holds: callgate's
    readers find packages through these lines, and a line for any other
    trace would show them a forged package."""
    try:
        data = read_regular(path)
    except OSError as e:
        probs.add(path, "archive_unreadable: %s" % why(e))
        return
    for line in data.splitlines(True):
        tid = line.split(b" ", 1)[0].decode("ascii", "replace")
        if not line.endswith(b"\n"):
            continue  # an unfinished line, which readers skip
        if tid == JOURNAL_TRACE:
            probs.add("%s: %s" % (path, tid), "trace_not_in_journal: an index line naming "
                      "the journal's own trace id, which has no package")
        elif tid not in known:
            probs.add("%s: %s" % (path, tid), "trace_not_in_journal: an index line naming a "
                      "trace the journal does not hold")


def archived(state, probs, known=None):
    """Packages in traces/archive/*.tar (docs/evidence.md, "Packages as
    archives" and "Retention"): for each trace id, its tar's path and its
    members as (name, data offset, size). The .idx beside each tar only speeds
    lookups (with known, each of their lines must name a trace the journal
    holds); here every tar is read whole, once, and must hold packages only:
    plain ustar members ID/FILE, FILE one of the five, none twice; one package
    per trace over all archives; with known (the journal's trace ids), only
    traces the journal holds; after the last member, nothing but zeros. A
    .tar or .idx whose name callgate does not read (archive_name) is a
    failure: tar would show what callgate never checks."""
    adir = os.path.join(state, "traces", "archive")
    out = {}
    if not os.path.isdir(adir):
        return out
    for name in sorted(os.listdir(adir)):
        path = os.path.join(adir, name)
        ext = name[-4:]
        if ext not in (".tar", ".idx"):
            continue
        if not archive_name(name, ext):
            probs.add(path, "archive_layout: callgate reads no archive by this name (under "
                      "40 bytes, not hidden)")
            continue
        if ext == ".idx":
            if known is not None:
                check_index(path, probs, known)
            continue
        try:
            raw, tfile = open_regular(path), open_regular(path)
        except OSError as e:
            probs.add(path, "archive_unreadable: %s" % why(e))
            continue
        with raw, tfile:
            size = os.fstat(raw.fileno()).st_size
            if size > 0:  # an empty one: made by a daemon stopped before its first package
                read_archive(path, raw, tfile, size, out, probs, known)
    return out


def read_archive(path, raw, tfile, size, out, probs, known):
    """One tar (archived()): raw and tfile are two handles on it, one for
    tarfile and one to read each header as it is."""
    end, last, repeat = 0, None, False
    try:
        with tarfile.open(fileobj=tfile, mode="r:") as tf:
            for m in tf:
                raw.seek(m.offset)
                if not plain_member(raw.read(512), m):
                    probs.add("%s offset %d" % (path, m.offset), "archive_layout: not a "
                              "member a package writer makes (plain ustar, a regular file)")
                    return  # tarfile's view of what follows cannot be trusted
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
                    if top == JOURNAL_TRACE:
                        probs.add(where, "trace_not_in_journal: a package named after the "
                                  "journal's own trace id, which has none")
                    elif known is not None and top not in known:
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
        return
    if end > size:
        probs.add(path, "archive_layout: the last member runs past the end of the file")
        return
    # tarfile stops quietly at a header it cannot read: what follows must be zeros.
    raw.seek(end)
    while True:
        block = raw.read(1 << 16)
        if not block:
            break
        if block.strip(b"\0"):
            probs.add(path, "archive_layout: bytes after the last member that are "
                      "not an end-of-archive marker")
            break


def archive_files(packed, probs):
    """{file name: bytes} of one trace's members, from archived()."""
    path, members = packed
    files = {}
    try:
        with open_regular(path) as f:
            for name, off, size in members:
                f.seek(off)
                files[name] = f.read(size)
    except OSError as e:
        probs.add(path, "archive_unreadable: %s" % why(e))
    return files


def load_journal(state, probs):
    """The journal's events in order, as (event, line). Every *.ndjson in
    journal/ must be a segment callgate reads: one it skips is reported."""
    jdir = os.path.join(state, "journal")
    try:
        listed = sorted(os.listdir(jdir))
    except OSError as e:
        probs.add(jdir, "unreadable: %s" % why(e))
        return []
    for n in listed:
        if n.endswith(".ndjson") and not segment_name(n):
            probs.add(os.path.join(jdir, n), "schema: not a journal segment's name (16 "
                      "digits, .ndjson): callgate does not read it")
    out, head, seq, traces = [], GENESIS, 0, {}
    for name in filter(segment_name, listed):
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
    """Each checkpoint's head is the journal's event at its seq, they never
    go backwards, and the last one is the journal's last event: events after
    it were never signed (the state is a stopped daemon's)."""
    path = os.path.join(state, "checkpoints.ndjson")
    by_seq = {e["seq"]: e["hash"] for e, _ in journal}
    head_seq = journal[-1][0]["seq"] if journal else 0
    n, last_seq = 0, 0
    lines = read_lines(path, probs, check="checkpoint_missing") if os.path.lexists(path) else []
    for i, line in enumerate(lines, 1):
        c, bad = load_json(line)
        if bad or not isinstance(c, dict) or not integer(c.get("seq")) or c["seq"] < 0 or not (
                isinstance(c.get("head"), str) and len(c["head"]) == 64 and set(c["head"]) <= HEX):
            probs.add(path, "line %d: checkpoint_schema: %s" % (
                i, bad or "no integer seq and hex head"))
            continue
        n += 1
        if c["seq"] < last_seq:
            probs.add(path, "line %d: checkpoint_order: seq %d after %d" % (i, c["seq"], last_seq))
        last_seq = c["seq"]
        want = GENESIS if c["seq"] == 0 else by_seq.get(c["seq"])
        if c["seq"] > head_seq or want is None:
            probs.add(path, "line %d: journal_truncated: no event %d" % (i, c["seq"]))
        elif want != c["head"]:
            probs.add(path, "line %d: checkpoint_mismatch at seq %d" % (i, c["seq"]))
    if journal and n == 0:
        probs.add(path, "checkpoint_missing: the journal has events but no checkpoint")
    elif n and last_seq != head_seq:
        probs.add(path, "head_unsigned: the last checkpoint is seq %d, the journal's last "
                  "event seq %d" % (last_seq, head_seq))


def check_state(state, which, probs):
    """STATE_DIR TRACE_ID or STATE_DIR --all; returns what was checked."""
    journal = load_journal(state, probs)
    check_checkpoints(state, journal, probs)
    by_trace = {}
    for e, line in journal:
        by_trace.setdefault(e["trace"], []).append((e, line))
    calls = set(by_trace) - {JOURNAL_TRACE}  # the traces that have packages
    ids = sorted(calls) if which == "--all" else [which]
    packed = archived(state, probs, calls if which == "--all" else None)
    if which == "--all":
        tdir = os.path.join(state, "traces")
        for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            if name == JOURNAL_TRACE:
                probs.add(os.path.join(tdir, name), "trace_not_in_journal: the journal's own "
                          "trace id has no package")
            elif not name.startswith(".") and name != "archive" and name not in calls:
                probs.add(os.path.join(tdir, name), "trace_not_in_journal: a package with no "
                          "events in the journal")
    for tid in ids:
        tdir = os.path.join(state, "traces", tid)
        evs = by_trace.get(tid)
        if tid == JOURNAL_TRACE:
            probs.add(tid, "trace_unknown: the journal's own trace id, not a call's")
            continue
        if not evs:
            probs.add(tid, "trace_unknown: the journal holds no event of it")
            continue
        events = [e for e, _ in evs]
        end = check_trace(events, "journal trace " + tid, probs)
        # A directory (callgate evidence rebuild writes one) and an
        # archived package of the same trace: both must verify.
        sources = []
        if os.path.isdir(tdir):
            sources.append((tdir, None))
        if tid in packed:
            sources.append(("%s:%s" % (packed[tid][0], tid), archive_files(packed[tid], probs)))
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
            if end not in ("seal", "refusal") or "verdict.json" not in files:
                continue  # an incomplete trace's verdict is not checked here
            if content is None:
                try:
                    vbytes = read_regular(os.path.join(where, "verdict.json"))
                except OSError as e:
                    probs.add(where + "/verdict.json", "package_files: %s" % why(e))
                    continue
            else:
                vbytes = content["verdict.json"]
            check_verdict(vbytes, events, where, probs)
    return "%d trace(s), %d journal events" % (len(ids), len(journal))


def main(argv):
    probs = Problems()
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        sys.stdout.write(__doc__)
        return 0
    if len(argv) == 2 and os.path.exists(os.path.join(argv[1], "events.ndjson")):
        check_package(argv[1], probs)
        checked = "package %s" % argv[1]
    elif len(argv) == 3:
        checked = check_state(argv[1], argv[2], probs)
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
