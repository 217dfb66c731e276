# SPDX-License-Identifier: MIT
"""End-to-end tests of callgated as a service: socket activation, readiness,
and the per-call log where operators look.

  * Socket activation: the daemon runs under `systemd-socket-activate`
    (Debian's systemd package) with the agent and admin sockets passed as
    FileDescriptorName=agent:admin; the connection that starts it is served
    (its request was written before the daemon existed), the admin socket
    answers, the sockets are neither replaced nor unlinked, and a successor
    refuses a replay of a request its predecessor served.
  * sd_notify: with $NOTIFY_SOCKET pointing at a test datagram socket the
    daemon says READY=1 once listening, RELOADING=1 then READY=1 around a
    SIGHUP reload, and STOPPING=1 on SIGTERM; its default call log is then
    the journal.
  * The per-call record: `--log syslog --syslog-socket PATH` sends one
    RFC 5424 message with structured data per call to a test listener
    (journald is absent in this container), read back and checked field by
    field against the responses; `--log stderr` writes one line per call.
"""
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import unittest

import cgtest

ACTIVATE = shutil.which("systemd-socket-activate") or "/lib/systemd/systemd-socket-activate"


def dgram_listener(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(cgtest.DEFAULT_TIMEOUT)
    return s


class Activated(cgtest.Daemon):
    """A daemon that systemd-socket-activate starts on the first connection,
    with the agent and admin sockets passed by name."""

    def argv(self):
        inner = [self.binary, "--state-dir", self.state_dir, "--log", "stderr"]
        for w in self.workspaces:
            inner += ["--workspace", w]
        return [ACTIVATE, "-l", self.socket, "-l", self.admin_socket,
                "--fdname=agent:admin"] + inner + self.extra_flags

    def wait_listening(self, start=0):
        # systemd-socket-activate prints this once both sockets are bound;
        # the daemon itself starts only when a connection arrives.
        self.wait_log("Listening on " + self.admin_socket, start=start)
        return self


@unittest.skipUnless(os.path.exists(ACTIVATE), "systemd-socket-activate missing "
                     "(Debian package systemd; scripts/setup installs it)")
class SocketActivation(unittest.TestCase):
    def test_first_connection_starts_and_is_served_then_admin(self):
        d = Activated()
        try:
            d.spawn()
            d.wait_listening()
            self.assertNotIn("starting:", d.log, "the daemon must not run before a connection")
            # Written before the daemon exists: served once it starts.
            resp = d.request(cgtest.make_request([["echo", "activated"]], privileged=False))
            self.assertEqual(resp["status"], "ok", (resp, d.log))
            self.assertIn("(socket activated)", d.log)
            ping = d.admin("ping")
            self.assertEqual(ping["status"], "ok", (ping, d.log))
            self.assertIn("call peer_uid=%d" % os.getuid(), d.log)
            self.assertEqual(d.stop(), 0, d.log)
            # The passed sockets belong to systemd: not unlinked at stop.
            self.assertTrue(os.path.exists(d.socket))
            self.assertTrue(os.path.exists(d.admin_socket))
        finally:
            d.close()

    def test_successor_refuses_a_replayed_request(self):
        d = Activated()
        try:
            d.spawn()
            d.wait_listening()
            req = cgtest.make_request([["echo", "once"]], privileged=False)
            resp = d.request(req)
            self.assertEqual(resp["status"], "ok", (resp, d.log))
            d.stop()
            for p in (d.socket, d.admin_socket):
                os.unlink(p)
            d._logf.close()
            offset = len(d.log)
            d.spawn()
            d.wait_listening(start=offset)
            fresh = d.request(cgtest.make_request([["echo", "fresh"]], privileged=False))
            self.assertEqual(fresh["status"], "ok", (fresh, d.log))
            replay = d.request(req)
            self.assertEqual(replay["reply"]["code"], "MCP-VAL-I-024", (replay, d.log))
            d.stop()
        finally:
            d.close()

    def test_successor_refuses_a_replayed_request_dated_ahead(self):
        # Dated 4 s ahead, the request is still dated after the restart: the
        # daemon that took it moved the lock's mark past its time first.
        d = Activated()
        try:
            d.spawn()
            d.wait_listening()
            req = cgtest.make_request([["echo", "ahead"]], privileged=False,
                                      time=cgtest.now_rfc3339(4))
            resp = d.request(req)
            self.assertEqual(resp["status"], "ok", (resp, d.log))
            d.stop()
            for p in (d.socket, d.admin_socket):
                os.unlink(p)
            d._logf.close()
            offset = len(d.log)
            d.spawn()
            d.wait_listening(start=offset)
            replay = d.request(req)
            self.assertEqual(replay["reply"]["code"], "MCP-VAL-I-024", (replay, d.log))
            d.stop()
        finally:
            d.close()


class Notify(unittest.TestCase):
    def test_ready_reloading_stopping(self):
        tmp = tempfile.mkdtemp(prefix="cg-notify-", dir="/tmp")
        path = os.path.join(tmp, "notify.sock")
        lst = dgram_listener(path)
        d = cgtest.Daemon(env={"NOTIFY_SOCKET": path})
        try:
            d.start()

            def expect(word):
                while True:
                    msg = lst.recv(4096).decode()
                    if word in msg.split("\n"):
                        return msg

            expect("READY=1")
            self.assertIn("call log journal", d.log, "journal is the default under systemd")
            d.send_signal(signal.SIGHUP)
            msg = expect("RELOADING=1")
            self.assertRegex(msg, r"MONOTONIC_USEC=\d+")
            expect("READY=1")
            self.assertEqual(d.stop(), 0, d.log)
            expect("STOPPING=1")
        finally:
            lst.close()
            d.close()
            shutil.rmtree(tmp, ignore_errors=True)


SD = re.compile(r'^<(\d+)>1 (\S+) (\S+) callgated (\d+) call \[call@32473((?: \w+="(?:[^"\\\]]|\\.)*")*)\] (.*)$')
PARAM = re.compile(r' (\w+)="((?:[^"\\\]]|\\.)*)"')


def parse_5424(msg):
    m = SD.match(msg)
    if not m:
        raise AssertionError("not an RFC 5424 call record: %r" % msg)
    params = {k: re.sub(r"\\(.)", r"\1", v) for k, v in PARAM.findall(m.group(5))}
    return int(m.group(1)), int(m.group(4)), params, m.group(6)


class CallLog(unittest.TestCase):
    def test_syslog_records_read_back(self):
        d = cgtest.Daemon()
        path = os.path.join(d.tmp, "syslog.sock")
        lst = dgram_listener(path)
        d.extra_flags += ["--log", "syslog", "--syslog-socket", path]
        try:
            d.start()
            ok = d.request(cgtest.make_request([["echo", "hi"]], privileged=False,
                                               host='evil"] host="x'))
            denied = d.request(cgtest.make_request([["rm", "-rf", "/"]], privileged=False))
            failed = d.request(cgtest.make_request([["ls", "/no/such/dir"]],
                                                   privileged=False))
            got = {}
            while len(got) < 3:
                pri, pid, params, text = parse_5424(lst.recv(65536).decode())
                self.assertEqual(pid, d.proc.pid)
                got[params["trace_id"]] = (pri, params, text)
            for resp, decision, rtype, exit_code in [(ok, "ALLOW", "S", "0"),
                                                     (denied, "BLOCK", "D", None),
                                                     (failed, "ALLOW", "S", "2")]:
                trace = resp["reply"]["trace_id"]
                pri, p, text = got[trace]
                self.assertEqual(p["peer_uid"], str(os.getuid()))
                self.assertEqual(p["peer_pid"], str(os.getpid()))
                self.assertEqual(p["decision"], decision, (p, resp))
                self.assertEqual(p["reply_type"], rtype)
                self.assertEqual(p["reply_code"], resp["reply"]["code"])
                self.assertEqual(p["rule"], resp["reply"]["data"].get("rule_id", ""))
                self.assertEqual(p.get("exit"), exit_code, (p, resp))
                self.assertEqual(pri, 3 * 8 + (6 if rtype == "S" else 5))
                self.assertIn(trace, text)
            # A peer-chosen host cannot forge a parameter: escaped, one value.
            self.assertEqual(got[ok["reply"]["trace_id"]][1]["host"], 'evil"] host="x')
            self.assertEqual(got[denied["reply"]["trace_id"]][1]["host"], "")
        finally:
            lst.close()
            d.close()

    def test_syslog_socket_missing_fails_startup(self):
        d = cgtest.Daemon(flags=["--log", "syslog", "--syslog-socket", "/nonexistent/log"])
        try:
            p = d.spawn()
            self.assertEqual(p.wait(cgtest.DEFAULT_TIMEOUT), 1)
            self.assertIn("syslog socket /nonexistent/log", d.log)
        finally:
            d.close()

    def test_bad_log_name(self):
        d = cgtest.Daemon(flags=["--log", "file"])
        try:
            self.assertEqual(d.spawn().wait(cgtest.DEFAULT_TIMEOUT), 64)  # EX_USAGE
            self.assertIn("--log needs journal, syslog or stderr", d.log)
        finally:
            d.close()

    def test_stderr_is_the_default_outside_systemd(self):
        env = {k: "" for k in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
        with cgtest.Daemon(env=env) as d:
            resp = d.request(cgtest.make_request([["echo", "x"]], privileged=False))
            trace = resp["reply"]["trace_id"]
            log = d.wait_log("trace=%s call " % trace)
            line = [l for l in log.splitlines() if "trace=%s call " % trace in l][0]
            self.assertIn("peer_uid=%d peer_pid=%d host=- decision=ALLOW" %
                          (os.getuid(), os.getpid()), line)
            self.assertIn("reply=S %s exit=0" % resp["reply"]["code"], line)

    def test_an_evidence_read_is_logged_with_its_own_reply(self):
        # A log read's data holds journal events, each with a reply of its
        # own; the call log named the last of those (a refusal's) instead.
        with cgtest.Daemon() as d:
            d.request(cgtest.make_request([["rm", "-rf", "/"]]))
            resp = d.request(cgtest.make_request(None, action="log", limit=5, time=None))
            self.assertEqual(resp["reply"]["code"], "MCP-LOG-S-103", resp)
            self.assertIn('"reply"', json.dumps(resp["reply"]["data"]["events"]))
            trace = resp["reply"]["trace_id"]
            log = d.wait_log("trace=%s call " % trace)
            line = [l for l in log.splitlines() if "trace=%s call " % trace in l][0]
            self.assertIn("reply=S MCP-LOG-S-103 ", line)


if __name__ == "__main__":
    unittest.main()
