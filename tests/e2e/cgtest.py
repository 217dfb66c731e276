# SPDX-License-Identifier: MIT
"""Shared helpers for callgate's end-to-end tests.

Every e2e test talks to a real callgated on a temporary socket. This module
starts one, waits until it accepts connections, gives raw and JSON clients,
runs the CLI against it, and stops it with SIGTERM, keeping its stderr log.

Typical use::

    import cgtest

    class T(unittest.TestCase):
        def test_x(self):
            with cgtest.Daemon(policy_text=POLICY, read_timeout=1500) as d:
                resp = d.request(cgtest.make_request([["ls"]], privileged=False))
                self.assertEqual(resp["status"], "ok", d.log)

    # or once per class (faster):
        @classmethod
        def setUpClass(cls):
            cls.d = cgtest.Daemon().start()
        @classmethod
        def tearDownClass(cls):
            cls.d.close()

Environment: CALLGATED and CALLGATE name the built binaries (set by meson
test); otherwise they are looked up in $CG_BUILDDIR or ./build. The daemon's
own files (socket, admin socket, state dir, log, workspace) all live in one
temporary directory that close() removes.

Rules these helpers follow so tests do not flake: deadlines are generous
(DEFAULT_TIMEOUT); nothing asserts on speed; every wait polls with a bound
and, on failure, raises with the daemon's log attached.
"""
import datetime
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("CG_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILDDIR = os.environ.get("CG_BUILDDIR") or os.path.join(SRCDIR, "build")
CALLGATED = os.environ.get("CALLGATED") or os.path.join(BUILDDIR, "callgated")
CALLGATE = os.environ.get("CALLGATE") or os.path.join(BUILDDIR, "callgate")

DEFAULT_TIMEOUT = 30.0  # seconds; generous on purpose (ASan builds are slow)
MAX_LINE = 1024 * 1024  # CG_WIRE_MAX_LINE: bytes per request, newline included


# Lines a sanitizer writes when it finds something (see Daemon.close).
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "WARNING: ThreadSanitizer")


class DaemonError(Exception):
    """The daemon did not start, or did not behave; carries its log."""


def now_rfc3339(offset_s=0.0):
    """The current UTC time (plus offset_s) as RFC 3339 with milliseconds."""
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def make_request(pipeline=None, **fields):
    """A fresh request: a new UUIDv4 id and the current time, plus fields.

    pipeline is a list of argv lists ([["ls", "-l"]]); pass None for
    requests without one (ping, gate with actions). Fields override the
    defaults, so make_request(..., time=None) removes "time".
    """
    req = {"id": str(uuid.uuid4()), "time": now_rfc3339()}
    if pipeline is not None:
        req["pipeline"] = pipeline
    for k, v in fields.items():
        if v is None:
            req.pop(k, None)
        else:
            req[k] = v
    return req


def encode(req):
    """A request object (or str/bytes) as one line of bytes with its newline."""
    if isinstance(req, bytes):
        return req
    if isinstance(req, str):
        return req.encode()
    return (json.dumps(req, separators=(",", ":")) + "\n").encode()


def connect(path, timeout=DEFAULT_TIMEOUT):
    """A connected AF_UNIX stream socket with a timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except BaseException:
        s.close()
        raise
    return s


def recv_all(sock, limit=64 * 1024 * 1024):
    """Read until EOF (the daemon closes after its one response line)."""
    chunks, n = [], 0
    while True:
        try:
            b = sock.recv(1 << 20)
        except ConnectionResetError:
            break
        if not b:
            break
        chunks.append(b)
        n += len(b)
        if n > limit:
            raise DaemonError("response larger than %d bytes" % limit)
    return b"".join(chunks)


def send_recv(path, data, timeout=DEFAULT_TIMEOUT, shut_wr=False):
    """Connect, send raw bytes, optionally half-close, read to EOF. Bytes."""
    with connect(path, timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon may answer and close before taking everything
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        return recv_all(s)


def parse_response(raw):
    """Check a raw response is exactly one JSON line and return it as a dict."""
    if not raw.endswith(b"\n") or raw.count(b"\n") != 1:
        raise DaemonError("not exactly one response line: %r" % raw[:300])
    return json.loads(raw)


class Daemon:
    """A callgated on a temporary socket. Use as a context manager, or
    start()/close().

    Arguments (all optional):
      policy       path of a policy file (--policy)
      policy_text  policy YAML written to <tmp>/policy.yaml and used as --policy
      workspaces   list of workspace dirs (--workspace each); default: a fresh
                   <tmp>/ws directory, also the daemon's cwd
      read_timeout --read-timeout MS
      max_conns    --max-conns N
      admin        also serve <tmp>/admin.sock (default True)
      flags        extra command-line arguments (list)
      socket_path  use this socket path instead of <tmp>/callgate.sock
      env          extra environment for the daemon
    Attributes: tmp, socket, admin_socket, state_dir, workspace, log_path,
    proc, policy_path.
    """

    def __init__(self, policy=None, policy_text=None, workspaces=None, read_timeout=None,
                 max_conns=None, admin=True, flags=(), socket_path=None, env=None,
                 binary=None):
        # A short base path: sun_path is 108 bytes.
        self.tmp = tempfile.mkdtemp(prefix="cg-e2e-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.socket = socket_path or os.path.join(self.tmp, "callgate.sock")
        self.admin_socket = os.path.join(self.tmp, "admin.sock") if admin else None
        self.state_dir = os.path.join(self.tmp, "state")
        self.workspace = os.path.join(self.tmp, "ws")
        os.makedirs(self.workspace, exist_ok=True)
        self.log_path = os.path.join(self.tmp, "daemon.log")
        self.policy_path = policy
        if policy_text is not None:
            self.policy_path = os.path.join(self.tmp, "policy.yaml")
            with open(self.policy_path, "w") as f:
                f.write(policy_text)
        self.workspaces = list(workspaces) if workspaces else [self.workspace]
        self.read_timeout = read_timeout
        self.max_conns = max_conns
        self.extra_flags = list(flags)
        self.extra_env = dict(env or {})
        self.binary = binary or CALLGATED
        self.proc = None
        self._logf = None

    # -- lifecycle ---------------------------------------------------------

    def argv(self):
        a = [self.binary, "--socket", self.socket, "--state-dir", self.state_dir]
        if self.admin_socket:
            a += ["--admin-socket", self.admin_socket]
        if self.policy_path:
            a += ["--policy", self.policy_path]
        for w in self.workspaces:
            a += ["--workspace", w]
        if self.read_timeout is not None:
            a += ["--read-timeout", str(self.read_timeout)]
        if self.max_conns is not None:
            a += ["--max-conns", str(self.max_conns)]
        return a + self.extra_flags

    def spawn(self):
        """Start the process without waiting for the socket (for tests of
        startup failures). Returns the Popen."""
        env = dict(os.environ)
        env.update(self.extra_env)
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=self._logf, stderr=self._logf,
                                     cwd=self.workspace, env=env)
        return self.proc

    def start(self, timeout=DEFAULT_TIMEOUT):
        """Start and wait until the socket accepts connections. Returns self."""
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def wait_ready(self, timeout=DEFAULT_TIMEOUT):
        """Poll until a connect() succeeds (an empty connection is ignored by
        the daemon) or the process exits."""
        deadline = time.monotonic() + timeout
        paths = [self.socket] + ([self.admin_socket] if self.admin_socket else [])
        while True:
            if self.proc.poll() is not None:
                raise DaemonError("callgated exited with %s during startup; log:\n%s"
                                  % (self.proc.returncode, self.log))
            ok = True
            for p in paths:
                try:
                    connect(p, 1.0).close()
                except OSError:
                    ok = False
                    break
            if ok:
                return
            if time.monotonic() > deadline:
                raise DaemonError("callgated did not listen within %ss; log:\n%s"
                                  % (timeout, self.log))
            time.sleep(0.02)

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=DEFAULT_TIMEOUT):
        """Send sig (default SIGTERM) and wait for exit. Returns the exit
        status. Kills with SIGKILL (and raises) if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise DaemonError("callgated ignored %s for %ss; log:\n%s"
                                  % (sig, timeout, self.log))
        return self.proc.returncode

    def close(self, check_sanitizers=True):
        """Stop (if running) and remove the temporary directory.

        Under an ASan/UBSan build the daemon reports memory errors and leaks
        to its log; if it did, close() raises DaemonError with the report
        (after cleaning up), so that such a run cannot pass silently."""
        report = None
        try:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.stop()
                except DaemonError:
                    pass
            log = self.log
            if any(m in log for m in SANITIZER_MARKS):
                report = log
        finally:
            if self._logf:
                self._logf.close()
                self._logf = None
            shutil.rmtree(self.tmp, ignore_errors=True)
        if report and check_sanitizers:
            raise DaemonError("sanitizer report in the daemon log:\n" + report[-6000:])

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        # Do not mask the test's own failure with a sanitizer report.
        self.close(check_sanitizers=exc_type is None)
        return False

    # -- log ---------------------------------------------------------------

    @property
    def log(self):
        """Everything the daemon has written to stderr/stdout so far."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_log(self, needle, timeout=DEFAULT_TIMEOUT, start=0):
        """Wait until needle appears in the log (after byte offset start).
        Returns the log; raises DaemonError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log
            if needle in text[start:]:
                return text
            if time.monotonic() > deadline:
                raise DaemonError("%r not in the log within %ss; log:\n%s"
                                  % (needle, timeout, text))
            time.sleep(0.05)

    # -- clients -----------------------------------------------------------

    def connect(self, admin=False, timeout=DEFAULT_TIMEOUT):
        return connect(self.admin_socket if admin else self.socket, timeout)

    def raw(self, data, admin=False, timeout=DEFAULT_TIMEOUT, shut_wr=False):
        """Send raw bytes on a fresh connection; return the raw reply bytes."""
        return send_recv(self.admin_socket if admin else self.socket, data, timeout, shut_wr)

    def request(self, req, admin=False, timeout=DEFAULT_TIMEOUT):
        """Send one request (dict, str or bytes) and return the parsed
        response; asserts it was exactly one line."""
        return parse_response(self.raw(encode(req), admin=admin, timeout=timeout))

    def admin(self, action, **fields):
        """An admin request ({"action": action, ...}) on the admin socket."""
        req = {"action": action, "id": str(uuid.uuid4()), "time": now_rfc3339()}
        req.update(fields)
        return self.request(req, admin=True)

    def cli(self, *args, input=None, timeout=DEFAULT_TIMEOUT, env=None):
        """Run `callgate --socket <ours> args...`; returns CompletedProcess
        with bytes stdout/stderr."""
        e = dict(os.environ)
        e.update(env or {})
        argv = [CALLGATE, "--socket", self.socket]
        if self.admin_socket:
            argv += ["--admin-socket", self.admin_socket]
        argv += ["--state-dir", self.state_dir] + list(args)
        return subprocess.run(argv, input=input, capture_output=True, timeout=timeout,
                              cwd=self.workspace, env=e)


def pid_alive(pid):
    """True if a process with this pid exists (and is not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids_running(argv0, arg=None):
    """Pids whose cmdline starts with argv0 (basename match) and contains arg."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                parts = f.read().split(b"\0")
        except OSError:
            continue
        if not parts or not parts[0]:
            continue
        if os.path.basename(parts[0].decode("utf-8", "replace")) != argv0:
            continue
        if arg is not None and arg.encode() not in parts:
            continue
        if pid_alive(int(d)):
            out.append(int(d))
    return out


def journal_lines(state_dir):
    """Every journal line of state_dir, in order, each with its newline (bytes)."""
    jdir = os.path.join(state_dir, "journal")
    names = sorted(n for n in os.listdir(jdir) if n.endswith(".ndjson")) \
        if os.path.isdir(jdir) else []
    out = []
    for name in names:
        with open(os.path.join(jdir, name), "rb") as f:
            out += f.read().splitlines(keepends=True)
    return out


def package_file(state_dir, tid, name):
    """The bytes of one file of trace tid's package, wherever it is: its
    directory (traces/ID/), or the segment archive it was appended to
    (evidence.packages: archive, the default; docs/evidence.md). Raises
    FileNotFoundError when neither holds it."""
    path = os.path.join(state_dir, "traces", tid, name)
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    adir = os.path.join(state_dir, "traces", "archive")
    for tar in sorted(os.listdir(adir)) if os.path.isdir(adir) else []:
        if not tar.endswith(".tar") or tar.startswith("."):
            continue
        try:
            # A running daemon may have just made the tar (empty) or be
            # appending to it: what cannot be read yet is not there yet.
            with tarfile.open(os.path.join(adir, tar), "r:") as tf:
                return tf.extractfile(tf.getmember(tid + "/" + name)).read()
        except (KeyError, tarfile.ReadError):
            continue
    raise FileNotFoundError("no package file %s of trace %s in %s" % (name, tid, state_dir))


def wait_package_file(state_dir, tid, name, timeout=DEFAULT_TIMEOUT):
    """package_file(), waiting for the package thread to write it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return package_file(state_dir, tid, name)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_listening(path, timeout=DEFAULT_TIMEOUT, proc=None):
    """Wait until a Unix socket at path accepts a connection: its file exists
    from bind(), before listen(), so existence alone is not readiness."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise AssertionError("the daemon exited (status %s)" % proc.returncode)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            s.close()


def verify_live(argv, timeout=DEFAULT_TIMEOUT):
    """Run the independent verifier (argv) against a live daemon's state until
    it passes or the deadline: the last events may wait a few ms for their
    signed checkpoint (head_unsigned meanwhile). The last run is returned."""
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


class TamperCase(unittest.TestCase):
    """Tests that each change their own copy of one stopped daemon's state:
    setUpClass makes the state and calls keep(state_dir); every test then
    gets self.state, a fresh copy (fresh_state() makes another)."""

    @classmethod
    def keep(cls, state_dir):
        cls.master = tempfile.mkdtemp(prefix="cg-master-")
        shutil.copytree(state_dir, os.path.join(cls.master, "s"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.master, ignore_errors=True)

    @classmethod
    def keep_calls(cls, n_refused):
        """Keep a stopped daemon's state after n_refused refusals and one
        /bin/true run (its package written); cls.ids are their trace ids, in
        that order."""
        with Daemon() as d:
            cls.ids = [d.request(make_request([["rm", "-rf", "/"]]))["reply"]["trace_id"]
                       for _ in range(n_refused)]
            ok = d.request(make_request([["/bin/true"]], privileged=False))
            cls.ids.append(ok["reply"]["trace_id"])
            wait_package_file(d.state_dir, cls.ids[-1], "verdict.md")
            d.stop()
            cls.keep(d.state_dir)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cg-tamper-")
        self.state = os.path.join(self.tmp, "s")
        self.fresh_state()

    def fresh_state(self):
        shutil.rmtree(self.state, ignore_errors=True)
        shutil.copytree(os.path.join(self.master, "s"), self.state)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def as_uid(uid, fn):
    """Run fn() in a forked child after setgid/setuid(uid) (e.g. 65534,
    nobody). Returns what fn returned (must be JSON-serialisable) or raises
    DaemonError with the child's exception text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                res = {"ok": fn()}
            except BaseException as e:  # reported to the parent
                res = {"err": "%s: %s" % (type(e).__name__, e),
                       "errno": getattr(e, "errno", None)}
            os.write(w, json.dumps(res).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    if not data:
        raise DaemonError("child as uid %d produced nothing" % uid)
    res = json.loads(data)
    if "err" in res:
        raise DaemonError(res["err"], res.get("errno"))
    return res["ok"]


def rechain(line, seq, prev, trace_from, trace_to):
    """An event line moved to seq after prev, under another trace id, its
    hash recomputed: what someone without the key can append."""
    e = json.loads(line)
    body = line[:-76].replace(trace_from.encode(), trace_to.encode())
    body = body.replace(b'"seq":%d,' % e["seq"], b'"seq":%d,' % seq, 1)
    body = body.replace(b'"prev":"%s"' % e["prev"].encode(), b'"prev":"%s"' % prev.encode(), 1)
    return body + b',"hash":"%s"}\n' % hashlib.sha256(body).hexdigest().encode()
