# SPDX-License-Identifier: MIT
"""Remote hosts over OpenSSH (issue 16, item 6): `callgate --host NAME …`
reaches the callgated on NAME through `ssh NAME -- callgate connect`.

A throwaway sshd from Debian's openssh-server listens on 127.0.0.1 with its
own host key; a second daemon stands in for the remote host. The client key
is installed the recommended way (docs/fleet.md): `restrict` and a forced
`command="callgate connect --socket …"`. A second key without a forced
command shows --remote-socket choosing the socket. Tests judge by effect:
the file appears in the remote daemon's workspace only, the remote journal
holds the trace and the local one does not, and both journals replay PASS.
`Connect` tests `callgate connect` alone (it needs no sshd): one exchange
relayed with its half-close, and a caller that hangs up cancels the call.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import cgtest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
WAIT = 20.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
    with open(path + ".pub") as f:
        return f.read().strip()


class Sshd:
    """sshd -D on 127.0.0.1:PORT with a throwaway host key and two client keys."""

    def __init__(self, remote_socket):
        self.dir = tempfile.mkdtemp(prefix="cg-ssh-", dir="/tmp")
        self.port = free_port()
        self.proc = None
        d = self.dir
        host_pub = keygen(os.path.join(d, "hostkey"))
        forced = keygen(os.path.join(d, "forced"))
        free = keygen(os.path.join(d, "free"))
        build = os.path.dirname(os.path.abspath(cgtest.CALLGATE))
        with open(os.path.join(d, "authorized_keys"), "w") as f:
            # The recommended entry: the key can do nothing but reach the daemon.
            f.write('command="%s connect --socket %s",restrict %s\n'
                    % (cgtest.CALLGATE, remote_socket, forced))
            # No forced command: the client's own `callgate connect --socket …` runs.
            f.write('environment="PATH=%s:/usr/bin:/bin",restrict %s\n' % (build, free))
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write("Port %d\nListenAddress 127.0.0.1\nHostKey %s/hostkey\n"
                    "AuthorizedKeysFile %s/authorized_keys\nPermitRootLogin prohibit-password\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                    "StrictModes no\nPermitUserEnvironment PATH\nPidFile %s/sshd.pid\n"
                    % (self.port, d, d, d))
        with open(os.path.join(d, "known_hosts"), "w") as f:
            f.write("callgate-remote %s\n" % " ".join(host_pub.split()[:2]))
        user = os.environ.get("USER") or "root"
        with open(os.path.join(d, "ssh_config"), "w") as f:
            for alias, key, port in (("remote", "forced", self.port),
                                     ("remote-free", "free", self.port),
                                     ("remote-down", "forced", free_port())):
                f.write("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n"
                        "  IdentityFile %s/%s\n  IdentitiesOnly yes\n"
                        "  UserKnownHostsFile %s/known_hosts\n  GlobalKnownHostsFile /dev/null\n"
                        "  StrictHostKeyChecking yes\n  HostKeyAlias callgate-remote\n"
                        "  ConnectTimeout 5\n" % (alias, port, user, d, key, d))
        self.ssh = "ssh -F %s/ssh_config" % d

    def start(self):
        try:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        except OSError:
            return False  # not root: sshd cannot run here
        self.log = open(os.path.join(self.dir, "sshd.log"), "w+")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f",
                                      os.path.join(self.dir, "sshd_config")],
                                     stdout=self.log, stderr=self.log)
        end = time.time() + 10
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        if getattr(self, "log", None):
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def trace_ids(d):
    """Every trace id of a daemon's journal."""
    r = d.cli("log", "--events", "--json")
    assert r.returncode == 0, r.stderr
    return {json.loads(l)["trace"] for l in r.stdout.decode().splitlines() if l.strip()}


@unittest.skipUnless(os.path.exists(SSHD) and shutil.which("ssh"),
                     "openssh-server/openssh-client are not installed (scripts/setup)")
class RemoteHost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.remote = cls.local = cls.sshd = None
        try:
            cls.remote = cgtest.Daemon().start()
            cls.local = cgtest.Daemon().start()
            cls.sshd = Sshd(cls.remote.socket)
            started = cls.sshd.start()
        except BaseException:
            cls.tearDownClass()  # no daemon may outlive a failed set-up
            raise
        if not started:
            with open(os.path.join(cls.sshd.dir, "sshd.log")) as f:
                log = f.read()
            cls.tearDownClass()
            raise unittest.SkipTest("sshd cannot start here: " + log[-500:])

    @classmethod
    def tearDownClass(cls):
        for x in (cls.sshd, cls.remote, cls.local):
            if x:
                x.close()

    def cg(self, *args, host="remote", timeout=60, input=None):
        """callgate against the local daemon, with --host when given."""
        argv = [cgtest.CALLGATE, "--socket", self.local.socket]
        if host:
            argv += ["--host", host]
        env = dict(os.environ, CALLGATE_SSH=self.sshd.ssh)
        return subprocess.run(argv + list(args), capture_output=True, timeout=timeout,
                              cwd=self.local.workspace, env=env, input=input)

    def test_a_call_runs_on_the_remote_host_and_is_recorded_there_only(self):
        r = self.cg("run", "--no-privileged", "--json", "--", "touch", "made-by-ssh")
        self.assertEqual(r.returncode, 0, r.stderr)
        resp = json.loads(r.stdout)
        tid = resp["reply"]["trace_id"]
        self.assertTrue(os.path.exists(os.path.join(self.remote.workspace, "made-by-ssh")))
        self.assertFalse(os.path.exists(os.path.join(self.local.workspace, "made-by-ssh")))
        # A local call too, so that both journals have something to verify.
        loc = self.cg("run", "--no-privileged", "--", "true", host=None)
        self.assertEqual(loc.returncode, 0, loc.stderr)
        self.assertIn(tid, trace_ids(self.remote))
        self.assertNotIn(tid, trace_ids(self.local))
        # The remote daemon saw the ssh login's uid, and the host the call was sent to.
        req = [json.loads(l) for l in self.remote.cli("log", "--events", "--json", "--trace", tid)
               .stdout.decode().splitlines() if '"type":"request"' in l][0]
        self.assertEqual(req["payload"]["peer"]["uid"], os.getuid())
        self.assertEqual(req["payload"]["request"]["host"], "remote")
        for d in (self.remote, self.local):
            rp = d.cli("replay", "--all")
            self.assertEqual(rp.returncode, 0, rp.stdout + rp.stderr)

    def test_the_remote_policy_refuses_and_nothing_runs(self):
        victim = os.path.join(self.remote.workspace, "keep")
        open(victim, "w").close()
        r = self.cg("run", "--no-privileged", "--", "rm", "-rf", "/")
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertIn(b"EN-EXEC-D-001", r.stderr)
        self.assertTrue(os.path.exists(victim))
        g = self.cg("gate", "--", "ls")
        self.assertIn(b"decision:", g.stdout, g.stderr)

    def test_output_and_exit_codes_come_back(self):
        with open(os.path.join(self.remote.workspace, "greeting"), "w") as f:
            f.write("hello from the remote host\n")
        r = self.cg("run", "--no-privileged", "--", "cat", "greeting")
        self.assertEqual((r.returncode, r.stdout), (0, b"hello from the remote host\n"), r.stderr)
        r = self.cg("run", "--no-privileged", "--", "ls", "no-such-file")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(b"no-such-file", r.stderr)
        p = self.cg("ping")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"alive", p.stdout)

    def test_remote_socket_without_a_forced_command(self):
        r = self.cg("--remote-socket", self.remote.socket, "run", "--no-privileged", "--",
                    "touch", "via-remote-socket", host="remote-free")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.remote.workspace,
                                                    "via-remote-socket")))
        # A wrong remote socket: the remote `callgate connect` says so, the client fails.
        r = self.cg("--remote-socket", "/nonexistent/x.sock", "ping", host="remote-free")
        self.assertEqual(r.returncode, 69, r.stderr)
        self.assertIn(b"/nonexistent/x.sock", r.stderr)

    def test_unreachable_host_and_unsafe_names(self):
        r = self.cg("ping", host="remote-down", timeout=30)
        self.assertEqual(r.returncode, 69, r.stderr)
        r = self.cg("ping", host="-oProxyCommand=touch /tmp/cg-pwned")
        self.assertEqual(r.returncode, 69, r.stderr)
        self.assertFalse(os.path.exists("/tmp/cg-pwned"))
        r = self.cg("--remote-socket", "/tmp/x;touch /tmp/cg-pwned", "ping")
        self.assertEqual(r.returncode, 69, r.stderr)
        self.assertFalse(os.path.exists("/tmp/cg-pwned"))

    def test_mcp_host_field_routes_the_call(self):
        env = dict(os.environ, CALLGATE_SSH=self.sshd.ssh)
        # The agent's "host" is a network capability: the operator grants it.
        p = subprocess.Popen([cgtest.CALLGATE, "--socket", self.local.socket, "mcp",
                              "--allow-host", "remote"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=self.local.workspace)
        msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "e2e", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "execute",
                            "arguments": {"argv": ["touch", "made-by-mcp"],
                                          "privileged": False, "host": "remote"}}}]
        out, err = p.communicate("".join(json.dumps(m) + "\n" for m in msgs).encode(),
                                 timeout=60)
        res = [json.loads(l) for l in out.decode().splitlines() if '"id":2' in l]
        self.assertTrue(res, out + err)
        sc = res[0]["result"]["structuredContent"]
        self.assertEqual(sc["reply"]["type"], "S", sc)
        self.assertTrue(os.path.exists(os.path.join(self.remote.workspace, "made-by-mcp")))
        self.assertFalse(os.path.exists(os.path.join(self.local.workspace, "made-by-mcp")))
        self.assertIn(sc["reply"]["trace_id"], trace_ids(self.remote))

    def test_a_cancelled_mcp_call_is_cancelled_on_the_remote_host(self):
        """Closing the ssh session closes `callgate connect`'s output; it hangs
        up on the remote daemon, which cancels the call as for a local client."""
        env = dict(os.environ, CALLGATE_SSH=self.sshd.ssh)
        p = subprocess.Popen([cgtest.CALLGATE, "--socket", self.local.socket, "--host",
                              "remote", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=self.local.workspace)
        try:
            for m in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "e2e", "version": "1"}}},
                      {"jsonrpc": "2.0", "method": "notifications/initialized"},
                      {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "execute",
                                  "arguments": {"argv": ["sleep", "61.5"],
                                                "privileged": False}}}):
                p.stdin.write((json.dumps(m) + "\n").encode())
                p.stdin.flush()
            end = time.time() + WAIT
            while time.time() < end and not cgtest.pids_running("sleep", "61.5"):
                time.sleep(0.05)
            self.assertTrue(cgtest.pids_running("sleep", "61.5"), "the call did not start")
            p.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                       "params": {"requestId": 2}}) + "\n").encode())
            p.stdin.flush()
            end = time.time() + WAIT
            while time.time() < end and cgtest.pids_running("sleep", "61.5"):
                time.sleep(0.05)
            self.assertFalse(cgtest.pids_running("sleep", "61.5"),
                             "the remote call still runs; log:\n" + self.remote.log)
        finally:
            p.kill()
            p.communicate()


class Connect(unittest.TestCase):
    """`callgate connect` on its own (no ssh): what the remote end runs."""

    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon().start()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def test_relays_one_exchange_and_passes_the_half_close_on(self):
        req = cgtest.encode(cgtest.make_request(action="ping"))
        r = subprocess.run([cgtest.CALLGATE, "connect", "--socket", self.d.socket], input=req,
                           capture_output=True, timeout=WAIT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(cgtest.parse_response(r.stdout)["status"], "ok")

    def test_no_daemon_is_69(self):
        r = subprocess.run([cgtest.CALLGATE, "connect", "--socket", "/nonexistent/cg.sock"],
                           input=b"", capture_output=True, timeout=WAIT)
        self.assertEqual(r.returncode, 69)
        self.assertIn(b"/nonexistent/cg.sock", r.stderr)

    def test_a_caller_that_hangs_up_cancels_the_call(self):
        p = subprocess.Popen([cgtest.CALLGATE, "connect", "--socket", self.d.socket],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            p.stdin.write(cgtest.encode(cgtest.make_request([["sleep", "61.7"]],
                                                            privileged=False)))
            p.stdin.close()  # the request is whole: a half-close, not a withdrawal
            end = time.time() + WAIT
            while time.time() < end and not cgtest.pids_running("sleep", "61.7"):
                time.sleep(0.05)
            self.assertTrue(cgtest.pids_running("sleep", "61.7"), self.d.log)
            time.sleep(0.3)
            self.assertIsNone(p.poll(), "the relay ended while the call ran")
            p.stdout.close()  # the caller goes away
            end = time.time() + WAIT
            while time.time() < end and cgtest.pids_running("sleep", "61.7"):
                time.sleep(0.05)
            self.assertFalse(cgtest.pids_running("sleep", "61.7"), self.d.log)
            self.assertEqual(p.wait(WAIT), 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    unittest.main()
