# SPDX-License-Identifier: MIT
"""A CLI that explains itself (issue 17, item 5), tested as a user meets it.

- Every subcommand listed by `callgate --help` answers `--help` (and `-h`)
  with "usage:" and its options on stdout, exit 0, without a daemon.
- Every usage error names the offending option and the closest valid one,
  exit 64 (2 for the hook, where anything else would let the call through).
- `callgate run`/`gate` send the caller's working directory; outside every
  workspace the daemon refuses it (WA-RES-I-004) and nothing runs.
- Human output is text, --json is JSON, never JSON inside text.
- The evidence tools without a state directory say which directory they
  looked for (exit 66), never "FAIL".
"""
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import cgtest

EXIT_USAGE, EXIT_INVALID, EXIT_NOINPUT, EXIT_DENIED = 64, 65, 66, 77
HOOK_BLOCK = 2


# What `callgate --help` must list, whoever owns it.
EVERY_SUBCOMMAND = {"run", "ping", "gate", "policy", "sandbox", "replay", "verdict", "log",
                    "evidence", "key", "approve", "pending", "deny", "grant", "mcp", "hook",
                    "connect"}

TIMEOUT = cgtest.DEFAULT_TIMEOUT


def callgate(*args, cwd=None, env=None, input=None):
    """Run the CLI with no daemon behind it (help and usage errors need none)."""
    e = dict(os.environ)
    for k in ("CALLGATE_SOCKET", "CALLGATE_ADMIN_SOCKET", "CALLGATE_STATE_DIR"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([cgtest.CALLGATE, "--socket", "/nonexistent/callgate.sock"]
                          + list(args), capture_output=True, timeout=TIMEOUT, cwd=cwd,
                          env=e, input=input)


def listed_commands(help_text):
    """The names in the "commands:" section of a help text, in order."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line.strip() == "commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s", line)
            if not m:
                break
            names.append(m.group(1))
    return names


class HelpWalk(unittest.TestCase):

    def test_top_level_help_lists_every_subcommand(self):
        r = callgate("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertTrue(out.startswith("usage: callgate "), out)
        self.assertEqual(set(listed_commands(out)), EVERY_SUBCOMMAND, out)
        for opt in ("--socket", "--admin-socket", "--state-dir", "--version", "--help"):
            self.assertIn(opt, out)
        self.assertEqual(r.stderr, b"")
        self.assertEqual(callgate("-h").stdout, r.stdout)

    def test_every_subcommand_answers_help(self):
        top = listed_commands(callgate("--help").stdout.decode())
        self.assertTrue(top)
        walked = 0
        for sub in top:
            for flag in ("--help", "-h"):
                with self.subTest(sub=sub, flag=flag):
                    r = callgate(sub, flag)
                    self.assertEqual(r.returncode, 0, (sub, r.stderr))
                    out = r.stdout.decode()
                    self.assertIn("usage:", out)
                    self.assertIn("-h, --help", out)
                    self.assertEqual(r.stderr, b"", sub)
            walked += 1
            # A family ("evidence rebuild", "key show", "hook claude-code")
            # lists its commands; each answers --help too.
            for second in listed_commands(callgate(sub, "--help").stdout.decode()):
                with self.subTest(sub=sub, second=second):
                    r = callgate(sub, second, "--help")
                    self.assertEqual(r.returncode, 0, (sub, second, r.stderr))
                    self.assertIn("usage:", r.stdout.decode())
                    self.assertIn("options:", r.stdout.decode())
        self.assertGreaterEqual(walked, len(EVERY_SUBCOMMAND))

    def test_help_lists_each_commands_options(self):
        cases = {
            ("run",): ["--cwd DIR", "--no-privileged", "--env NAME=VALUE", "--timeout MS",
                       "--json"],
            ("gate",): ["--actions FILE", "--cwd DIR", "--json"],
            ("ping",): ["--json"],
            ("replay",): ["--all", "--pubkey FILE", "--no-write", "--state-dir DIR"],
            ("verdict",): ["--json", "--state-dir DIR"],
            ("log",): ["--since T", "--trace ID", "--decision D", "--session S", "--rule R",
                       "--peer UID", "--events"],
            ("evidence", "rebuild"): ["--all", "--state-dir DIR"],
            ("key", "show"): ["--state-dir DIR"],
            ("hook", "claude-code"): ["--degrade ask|deny", "--mcp-server NAME"],
        }
        for args, opts in cases.items():
            out = callgate(*args, "--help").stdout.decode()
            for o in opts:
                self.assertIn(o, out, args)

    def test_help_command_is_the_same_help(self):
        self.assertEqual(callgate("help", "run").stdout, callgate("run", "--help").stdout)
        self.assertEqual(callgate("help").stdout, callgate("--help").stdout)

    def test_help_after_double_dash_is_the_commands_argument(self):
        # "run -- grep --help" runs grep --help: a usage error here would mean
        # the CLI ate the command's own argument. No daemon: 69, not 0 or 64.
        for args in (("run", "--no-privileged", "--", "grep", "--help"),
                     ("run", "--no-privileged", "grep", "--help"),
                     ("run", "--reason", "why", "grep", "-h"),
                     ("gate", "--", "grep", "--help")):
            with self.subTest(args=args):
                r = callgate(*args)
                self.assertEqual(r.returncode, 69, r.stderr)
                self.assertNotIn(b"usage:", r.stdout)
        r = callgate("run", "--reason", "--help")  # an option's value, not a request for help
        self.assertEqual(r.returncode, 64, r.stderr)


class UsageErrors(unittest.TestCase):

    def assert_names(self, r, bad, closest, code=EXIT_USAGE):
        err = r.stderr.decode()
        self.assertEqual(r.returncode, code, err)
        self.assertIn("'%s'" % bad, err)
        if closest:
            self.assertIn("did you mean '%s'?" % closest, err)
        self.assertEqual(r.stdout, b"")
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_unknown_option_names_the_closest_valid_one(self):
        cases = [
            (("run", "--cdw", "sub", "--", "ls"), "--cdw", "--cwd"),
            (("run", "--no-privilged", "--", "ls"), "--no-privilged", "--no-privileged"),
            (("run", "--priv", "--", "ls"), "--priv", "--privileged"),
            (("gate", "--actoins", "f.json"), "--actoins", "--actions"),
            (("ping", "--jsno"), "--jsno", "--json"),
            (("replay", "--al"), "--al", "--all"),
            (("verdict", "--jsn", "x"), "--jsn", "--json"),
            (("log", "--tarce", "x"), "--tarce", "--trace"),
            (("evidence", "rebuild", "--al"), "--al", "--all"),
            (("key", "show", "--state-dri", "x"), "--state-dri", "--state-dir"),
            (("--sokcet", "x", "ping"), "--sokcet", "--socket"),
            (("rnu",), "rnu", "run"),
            (("evidence", "rebiuld"), "rebiuld", "rebuild"),
            (("key", "shwo"), "shwo", "show"),
            (("grant", "opn"), "opn", "open"),
            (("policy", "explian"), "explian", "explain"),
        ]
        for args, bad, closest in cases:
            with self.subTest(args=args):
                self.assert_names(callgate(*args), bad, closest)

    def test_option_far_from_every_valid_one_lists_them(self):
        r = callgate("run", "--frobnicate", "--", "ls")
        self.assert_names(r, "--frobnicate", None)
        self.assertIn("--cwd", r.stderr.decode())
        self.assertIn("--no-privileged", r.stderr.decode())

    def test_callgates_own_option_after_the_command_says_where_it_goes(self):
        # ux-s39 L1: `run --socket S` listed run's options, none of them it.
        for args, opt in ((("run", "--socket", "/x.sock", "--no-privileged", "--", "ls"),
                           "--socket"),
                          (("pending", "--admin-socket=/x.sock"), "--admin-socket"),
                          (("ping", "--remote-socket", "/x"), "--remote-socket")):
            with self.subTest(args=args):
                r = callgate(*args)
                self.assert_names(r, opt, None)
                self.assertIn("give it before the command (callgate %s" % opt,
                              r.stderr.decode())
        # A command's own option of that name is still the command's.
        r = callgate("verdict", "--state-dir", "/nonexistent-cg", "x")
        self.assertNotIn(b"option of callgate itself", r.stderr)
        r = callgate("run", "--version")  # ux-s40 L2: nothing to put before a command
        self.assert_names(r, "--version", None)
        self.assertIn(b"callgate --version\n", r.stderr)

    def test_a_bare_timeout_below_100_asks_for_its_unit(self):
        # ux-s40 L5: `--timeout 30`, meant as seconds, killed the call at 30 ms.
        r = callgate("run", "--no-privileged", "--timeout", "30", "--", "true")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"write 30s for seconds, or 30ms", r.stderr)

    def test_missing_value_names_the_option(self):
        for args, opt in ((("run", "--cwd"), "--cwd"), (("log", "--since"), "--since"),
                          (("replay", "--pubkey"), "--pubkey")):
            with self.subTest(args=args):
                r = callgate(*args)
                self.assert_names(r, opt, None)
                self.assertIn("missing", r.stderr.decode())

    def test_flags_a_call_cannot_go_without_are_named_as_typed(self):
        # Named as the user wrote them, not as the wire's fields, and before
        # any daemon is asked (none runs here).
        cases = [
            (("grant", "open", "--exe", "/usr/bin/git", "--argv", "git", "push", "--uses", "1"),
             "--ttl DURATION is required"),
            # A bare name is the controlled PATH's (test_approval); a relative path is not.
            (("grant", "open", "--exe", "bin/git", "--argv", "git", "--uses", "1", "--ttl",
              "1h"), "--exe needs an absolute path"),
            (("grant", "open", "--exe", "no-such-prog-cg", "--argv", "x", "--uses", "1",
              "--ttl", "1h"), "not found on the controlled PATH"),
            (("run", "--forward-agent", "--", "ls"), "--forward-agent needs --no-privileged"),
        ]
        for args, says in cases:
            with self.subTest(args=args):
                r = callgate(*args)
                self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
                self.assertIn(says, r.stderr.decode())

    def test_flag_given_a_value_is_named(self):
        self.assert_names(callgate("run", "--json=yes", "--", "ls"), "--json", None)

    def test_values_are_checked_where_typed(self):
        r = callgate("log", "--decision", "aproved", "--state-dir", "/nonexistent")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"approval_timeout", r.stderr)  # the valid ones are named
        r = callgate("deny", "x", "--why")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"a value is needed after '--why'", r.stderr)
        r = callgate("approve", "--grant-ttl", "8d")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"at most 7d", r.stderr)
        # A view hash is 64 hex digits, and binds one call (s36 walk).
        r = callgate("approve", "x", "--hash", "deadbeef")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"64 lower-case hex digits", r.stderr)
        self.assertIn(b"callgate pending", r.stderr)
        r = callgate("approve", "--hash", "a" * 64)
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
        self.assertIn(b"give the call's trace id too", r.stderr)

    def test_first_guesses_point_at_the_command(self):
        for guess, meant in (("explain", "policy explain"), ("status", "ping"),
                             ("check", "policy check"), ("list", "pending")):
            r = callgate(guess)
            self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)
            self.assertIn("did you mean 'callgate %s'?" % meant, r.stderr.decode())
        self.assert_names(callgate("pign"), "pign", "ping")

    def test_daemon_usage_errors_name_the_option(self):
        """callgated's bad command line is one line naming the option and the
        nearest valid one, exit 64 (the unit does not restart it), not the
        whole usage text and exit 1."""
        def daemon(*args):
            return subprocess.run([cgtest.CALLGATED] + list(args), capture_output=True,
                                  timeout=30, stdin=subprocess.DEVNULL)
        self.assert_names(daemon("--polcy", "x"), "--polcy", "--policy")
        self.assert_names(daemon("--max-conns-per-ui", "3"), "--max-conns-per-ui",
                          "--max-conns-per-uid")
        self.assert_names(daemon("--policy"), "--policy", None)
        self.assertIn(b"a value is needed", daemon("--policy").stderr)
        r = daemon("--max-conns", "0")
        self.assertEqual(r.returncode, EXIT_USAGE, r.stderr)

    def test_hook_usage_errors_name_the_option_and_still_block(self):
        # Exit 2, not 64: Claude Code runs the tool on any other failure.
        cases = [(("hook", "claude-cod"), "claude-cod", "claude-code"),
                 (("hook", "claude-code", "--degrad", "ask"), "--degrad", "--degrade")]
        for args, bad, closest in cases:
            with self.subTest(args=args):
                self.assert_names(callgate(*args, input=b"{}"), bad, closest, HOOK_BLOCK)


class CallerCwd(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon().start()
        cls.sub = os.path.join(cls.d.workspace, "work", "sub")
        os.makedirs(cls.sub)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def cli_in(self, cwd, *args):
        return subprocess.run([cgtest.CALLGATE, "--socket", self.d.socket] + list(args),
                              capture_output=True, timeout=TIMEOUT, cwd=cwd)

    def test_run_from_a_subdirectory_runs_there(self):
        r = self.cli_in(self.sub, "run", "--no-privileged", "--", "pwd")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().strip(), os.path.realpath(self.sub))
        # By effect: a relative path written by the call lands where the user is.
        r = self.cli_in(self.sub, "run", "--no-privileged", "--", "touch", "made-here")
        self.assertEqual(r.returncode, 0, r.stderr + self.d.log.encode())
        self.assertTrue(os.path.exists(os.path.join(self.sub, "made-here")))
        self.assertFalse(os.path.exists(os.path.join(self.d.workspace, "made-here")))

    def test_relative_cwd_is_taken_from_where_the_user_is(self):
        r = self.cli_in(os.path.join(self.d.workspace, "work"), "run", "--no-privileged",
                        "--cwd", "sub", "--", "pwd")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().strip(), os.path.realpath(self.sub))

    def test_run_outside_every_workspace_is_refused_and_nothing_runs(self):
        outside = tempfile.mkdtemp(prefix="cg-outside-", dir=self.d.tmp)
        os.chmod(outside, 0o755)
        r = self.cli_in(outside, "run", "--no-privileged", "--", "touch", "escaped")
        self.assertEqual(r.returncode, EXIT_INVALID, r.stderr)
        self.assertRegex(r.stderr.decode(), r"^callgate run: WA-RES-I-004: .*%s.* \(trace "
                         r"[0-9a-f-]{36}\)\n$" % re.escape(outside))
        self.assertEqual(r.stdout, b"")
        self.assertFalse(os.path.exists(os.path.join(outside, "escaped")))
        self.assertFalse(os.path.exists(os.path.join(self.d.workspace, "escaped")))

    def test_gate_judges_the_callers_directory_too(self):
        outside = tempfile.mkdtemp(prefix="cg-outside-", dir=self.d.tmp)
        r = self.cli_in(outside, "gate", "--no-privileged", "--", "ls")
        self.assertEqual(r.returncode, EXIT_INVALID, r.stderr)
        self.assertIn(b"WA-RES-I-004", r.stderr)
        r = self.cli_in(self.sub, "gate", "--no-privileged", "--", "ls")
        self.assertEqual(r.returncode, 0, r.stderr)


class TextNotJson(unittest.TestCase):
    """Human output is text; --json is JSON; never JSON inside text."""

    @classmethod
    def setUpClass(cls):
        cls.d = cgtest.Daemon().start()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def assert_no_json(self, text, what):
        self.assertNotRegex(text, r'[{\[]\s*"', "%s has JSON in it:\n%s" % (what, text))

    def test_refusal_is_one_line_of_text(self):
        r = self.d.cli("run", "--", "ls")  # privileged by default: denied
        self.assertEqual(r.returncode, EXIT_DENIED, r.stderr)
        err = r.stderr.decode()
        self.assertRegex(err, r"^callgate run: EN-EXEC-D-\d{3}: .+ \(trace [0-9a-f-]{36}\)\n$")
        self.assert_no_json(err, "refusal")
        r = self.d.cli("run", "--no-privileged", "--timeout", "999999999", "--", "ls")
        self.assertEqual(r.returncode, EXIT_INVALID, r.stderr)
        self.assertRegex(r.stderr.decode(), r"^callgate run: MCP-VAL-I-\d{3}: .+ \(trace ")

    def test_refusal_with_json_is_only_json(self):
        r = self.d.cli("run", "--json", "--", "ls")
        self.assertEqual(r.returncode, EXIT_DENIED, r.stderr)
        self.assertEqual(json.loads(r.stdout)["reply"]["type"], "D")
        self.assertEqual(r.stderr, b"")

    def test_gate_constraints_are_text(self):
        r = self.d.cli("gate", "--no-privileged", "--", "touch", "x")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn("decision:    DEGRADE", out)
        self.assertRegex(out, r"constraints: .*write \S+")
        self.assert_no_json(out, "gate")
        r = self.d.cli("gate", "--json", "--no-privileged", "--", "touch", "x")
        self.assertTrue(json.loads(r.stdout)["reply"]["data"]["constraints"])

    def test_policy_explain_constraints_are_text_as_gate_prints_them(self):
        # ux-s39 L3: explain printed {"read":["/"],...} under "constraints".
        r = callgate("policy", "explain", "--no-privileged", "--", "git", "commit", "-m", "x",
                     cwd=self.d.workspace)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertRegex(out, r"constraints: read /; write \S+")
        self.assert_no_json(out, "policy explain")
        self.assertNotIn("git read-only", out)  # git commit: git write
        # ux-s42c L2: where .git stays read-only, the set says so.
        r = callgate("policy", "explain", "--no-privileged", "--", "git", "gc",
                     cwd=self.d.workspace)
        self.assertRegex(r.stdout.decode(), r"constraints: read /; write .*; git read-only\n")

    def test_policy_explain_says_which_workspace_it_judged_in(self):
        # ux-s41 M4: explain took the current directory for the workspace
        # without a word, and rm -rf . there was BLOCK while gate said DEGRADE.
        sub = os.path.join(self.d.workspace, "explain-sub")
        os.makedirs(sub, exist_ok=True)
        out = callgate("policy", "explain", "--no-privileged", "--", "ls",
                       cwd=sub).stdout.decode()
        self.assertIn("workspace: %s (the current directory: give the daemon's with "
                      "--workspace)" % os.path.realpath(sub), out)
        out = callgate("policy", "explain", "--no-privileged", "--workspace", self.d.workspace,
                       "--", "ls", cwd=sub).stdout.decode()
        self.assertIn("workspace: %s\n" % os.path.realpath(self.d.workspace), out)
        # No --cwd: the request names none, as the daemon would judge it (defaults.cwd).
        self.assertIn("(the request names none, as the daemon would judge it; run and gate "
                      "send theirs: --cwd DIR)", out)
        out = callgate("policy", "explain", "--no-privileged", "--workspace", self.d.workspace,
                       "--cwd", sub, "--", "ls", cwd=sub).stdout.decode()
        self.assertIn("cwd:       %s\n" % os.path.realpath(sub), out)

    def test_gate_and_explain_say_which_set_binds_which_stage(self):
        # ux-s40 M5: "constraints (all apply)" listed each stage's set as if
        # both bound both stages; the first stage here may write nothing.
        argv = ["--no-privileged", "--", "cat", "notes", "|", "tee", "out"]
        g = self.d.cli("gate", *argv)
        e = callgate("policy", "explain", *argv, cwd=self.d.workspace)
        for r, name in ((g, "gate"), (e, "policy explain")):
            self.assertEqual(r.returncode, 0, r.stderr)
            out = r.stdout.decode()
            self.assertIn("constraints: by stage", out, name)
            self.assertRegex(out, r"\n +stage 1 \(cat\): read /; write nothing;", name)
            self.assertRegex(out, r"\n +stage 2 \(tee\): read /; write \S+", name)
            self.assert_no_json(out, name)
        data = json.loads(self.d.cli("gate", "--json", *argv).stdout)["reply"]["data"]
        self.assertEqual(len(data["stage_sets"]), 2)
        self.assertNotEqual(data["stage_sets"][0], data["stage_sets"][1])

    def test_gate_and_explain_say_a_privileged_call_has_no_view(self):
        # ux-s40 L9: hide, protect and tmp were shown for a privileged call,
        # which runs on the host's own files (docs/confinement.md).
        for r in (self.d.cli("gate", "--privileged", "--", "touch", "x"),
                  callgate("policy", "explain", "--privileged", "--", "touch", "x",
                           cwd=self.d.workspace)):
            out = r.stdout.decode()
            self.assertIn("protect ", out)
            self.assertIn("(privileged: no view, so hide, protect, tmp, git and scratch do not apply)",
                          out)
        out = self.d.cli("gate", "--no-privileged", "--", "touch", "x").stdout.decode()
        self.assertNotIn("no view", out)

    def test_log_is_text_and_json_is_the_journal(self):
        r = self.d.cli("run", "--json", "--no-privileged", "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        # Its seal reaches the journal after the reply; a package means it has.
        cgtest.wait_package_file(self.d.state_dir, json.loads(r.stdout)["reply"]["trace_id"],
                                 "verdict.md", TIMEOUT)
        r = self.d.cli("log", "--events")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn("decision=ALLOW", out)
        self.assert_no_json(out, "log")
        r = self.d.cli("log")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn(" ALLOW allowed ", out)
        self.assert_no_json(out, "log")
        r = self.d.cli("log", "--json")
        lines = r.stdout.decode().splitlines()
        self.assertTrue(lines)
        for line in lines:
            json.loads(line)

    def test_verdict_text_writes_constraints_as_text(self):
        r = self.d.cli("run", "--json", "--no-privileged", "--", "touch", "v")
        self.assertEqual(r.returncode, 0, r.stderr)
        tid = json.loads(r.stdout)["reply"]["trace_id"]
        cgtest.wait_package_file(self.d.state_dir, tid, "verdict.md", TIMEOUT)
        r = self.d.cli("verdict", tid)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout.decode()
        self.assertIn("# Verdict: DEGRADE", out)
        self.assertRegex(out, r"\n## Constrained\n\n- .*write \S+")
        self.assert_no_json(out, "verdict")
        r = self.d.cli("verdict", "--json", tid)
        self.assertTrue(json.loads(r.stdout)["constrained"])

    def test_a_reply_without_the_usual_shape_is_still_text(self):
        # A daemon (or an impostor) answering an error object without a
        # reply: the CLI says so in a sentence, never by dumping the object.
        path = os.path.join(self.d.tmp, "odd.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(4)

        def serve():
            for _ in range(2):
                c, _ = srv.accept()
                with c:
                    c.recv(65536)
                    c.sendall(b'{"status":"error","message":"store is full"}\n')

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            for sub in (["run", "--no-privileged", "--", "true"], ["ping"]):
                r = subprocess.run([cgtest.CALLGATE, "--socket", path] + sub,
                                   capture_output=True, timeout=TIMEOUT, cwd=self.d.workspace)
                err = r.stderr.decode()
                self.assertEqual(r.returncode, 70, err)
                self.assertRegex(err, r"^callgate %s: error: store is full \(trace -\)\n$"
                                 % sub[0])
        finally:
            t.join(TIMEOUT)
            srv.close()


class NoStateDirectory(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cg-nostate-", dir="/tmp")

    def tearDown(self):
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    CASES = (("replay", "--all"), ("log",), ("verdict", "0b7c1b7e-3c1f-4f55-9a2c-1b7e3c1f4f55"),
             ("evidence", "rebuild", "--all"), ("key", "show"))

    def test_missing_state_dir_is_named_not_failed(self):
        missing = os.path.join(self.tmp, "no-such-state")
        for args in self.CASES:
            with self.subTest(args=args):
                r = callgate("--state-dir", missing, *args)
                err = r.stderr.decode()
                self.assertEqual(r.returncode, EXIT_NOINPUT, err)
                self.assertIn("no state directory", err)
                self.assertIn("looked for %s (from --state-dir)" % missing, err)
                self.assertNotIn("FAIL", r.stdout.decode() + err)
                self.assertEqual(r.stdout, b"")

    def test_the_source_of_the_name_is_said(self):
        missing = os.path.join(self.tmp, "from-env")
        r = callgate("replay", "--all", env={"CALLGATE_STATE_DIR": missing})
        self.assertEqual(r.returncode, EXIT_NOINPUT, r.stderr)
        self.assertIn("looked for %s (from $CALLGATE_STATE_DIR)" % missing, r.stderr.decode())
        r = callgate("replay", "--all", "--state-dir", missing)
        self.assertIn("(from --state-dir)", r.stderr.decode())

    def test_directory_without_a_journal_is_named(self):
        r = callgate("--state-dir", self.tmp, "replay", "--all")
        err = r.stderr.decode()
        self.assertEqual(r.returncode, EXIT_NOINPUT, err)
        self.assertIn("no evidence journal", err)
        self.assertIn(os.path.join(self.tmp, "journal"), err)
        self.assertEqual(r.stdout, b"")


class ApproverOutputIsText(unittest.TestCase):
    """`grant list` and `pending` print text for people (issue 17: grant list
    printed JSON with \\n escapes); --json stays JSON."""

    def test_grant_list_and_pending_are_text(self):
        with cgtest.Daemon(flags=["--approval", "--approval-timeout", "20000"]) as d:
            g = d.cli("grant", "open", "--exe", "/usr/bin/id", "--argv", "id", "-u",
                      "--uses", "2", "--ttl", "1d", "--uid", "65534", "--path", d.workspace)
            self.assertEqual(g.returncode, 0, g.stderr)
            out = d.cli("grant", "list").stdout.decode()
            self.assertIn("/usr/bin/id", out)
            self.assertIn("uid 65534", out)  # what it is bound to, not only --json
            self.assertIn("paths " + d.workspace, out)
            self.assertIn("uses left 2", out)
            self.assertNotIn("{", out)
            self.assertNotIn("\\n", out)
            self.assertIn("grants", json.loads(d.cli("grant", "list", "--json").stdout)
                          ["reply"]["data"])
            # ux-s42e M3: argv[0] left out, a grant no call meets: said.
            g = d.cli("grant", "open", "--exe", "/usr/bin/id", "--argv", "-u", "--uses", "1",
                      "--ttl", "1m")
            self.assertIn(b"the first --argv pattern, '-u', is matched against argv[0]",
                          g.stderr)
            self.assertIn(b"--argv id -u...", g.stderr)
            box = {}
            t = threading.Thread(target=lambda: box.setdefault(
                "r", d.request(cgtest.make_request([["ls", "-l", "a b"]]), timeout=60)))
            t.start()
            end = time.time() + TIMEOUT
            while time.time() < end and not d.admin("pending")["reply"]["data"]["pending"]:
                time.sleep(0.05)
            out = d.cli("pending").stdout.decode()
            self.assertIn("ls -l 'a b'", out)
            self.assertNotIn("[", out.split("\n", 2)[1])
            d.cli("deny", json.loads(d.cli("pending", "--json").stdout)["reply"]["data"]
                  ["pending"][0]["trace_id"])
            t.join(TIMEOUT)


class ForwardAgent(unittest.TestCase):
    """`callgate run --forward-agent` asks for the daemon's ssh-agent socket
    (issue 17: it could not be set from the CLI): the call sees
    SSH_AUTH_SOCK only when the flag is given."""

    def test_forward_agent_from_the_command_line(self):
        d = cgtest.Daemon()
        sock = os.path.join(d.tmp, "agent.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(sock)
        listener.listen(1)
        d.extra_env["SSH_AUTH_SOCK"] = sock
        try:
            d.start()
            p = d.cli("run", "--no-privileged", "--", "printenv", "SSH_AUTH_SOCK")
            self.assertEqual(p.returncode, 1, p)  # control: not forwarded
            self.assertEqual(p.stdout, b"")
            p = d.cli("run", "--no-privileged", "--forward-agent", "--", "printenv",
                      "SSH_AUTH_SOCK")
            self.assertEqual(p.returncode, 77, p)  # a human decides, or a grant (s39a)
            self.assertIn(b"forward-agent", p.stderr)
            p = d.cli("grant", "open", "--exe", "/usr/bin/printenv", "--argv", "printenv",
                      "SSH_AUTH_SOCK", "--forward-agent", "--uses", "1", "--ttl", "60")
            self.assertEqual(p.returncode, 0, p)
            p = d.cli("run", "--no-privileged", "--forward-agent", "--", "printenv",
                      "SSH_AUTH_SOCK")
            self.assertEqual(p.returncode, 0, p)
            self.assertEqual(p.stdout.decode().strip(), sock)
        finally:
            listener.close()
            d.close()


if __name__ == "__main__":
    unittest.main()
