# SPDX-License-Identifier: MIT
"""The real Claude Code CLI (pinned in tests/claude/package.json) with
callgate's PreToolUse hook, against a scripted fake Anthropic API on loopback.

The fake model reads "RUN: <command>" from the prompt and answers with one
Bash tool call for that command; when Claude Code sends the tool's result
back, the fake keeps it (what the model would have seen) and ends the turn.
So each case is one `claude -p` run that makes exactly one Bash call, and the
checks are by effect:

- an allowed command ran in the daemon (its exec request is in the daemon's
  journal, and its file appears in the workspace), and the model saw the
  command's own output, errors and exit status;
- a refused command never reached the daemon's runner, and the model saw the
  refusal's code;
- with the daemon down, the hook blocks and nothing runs.

The Node package is installed with `npm ci` in tests/claude when missing.
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import unittest
import uuid

import cgtest

CLAUDE_DIR = os.path.join(cgtest.SRCDIR, "tests", "claude")
CLAUDE_BIN = os.path.join(CLAUDE_DIR, "node_modules", "@anthropic-ai", "claude-code", "bin",
                          "claude.exe")
TIMEOUT = 180


def claude_ready():
    """Install the pinned Claude Code if needed (npm ci); raise if that fails."""
    if os.access(CLAUDE_BIN, os.X_OK):
        return
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CLAUDE_DIR,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not os.access(CLAUDE_BIN, os.X_OK):
        raise AssertionError("npm ci in tests/claude failed:\n" + r.stdout + r.stderr)


def sse(events):
    return "".join("event: %s\ndata: %s\n\n" % (e["type"], json.dumps(e)) for e in events)


class FakeModel(http.server.BaseHTTPRequestHandler):
    """A scripted Anthropic Messages API: one Bash call per conversation."""

    results = []  # tool_result blocks Claude Code sent back, in order
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(200, "{}")

    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
            self.reply(200, json.dumps({"input_tokens": 10}))
            return
        msgs = body.get("messages", [])
        last = msgs[-1]["content"] if msgs else ""
        blocks = last if isinstance(last, list) else [{"type": "text", "text": last}]
        tool_results = [b for b in blocks if b.get("type") == "tool_result"]
        text = " ".join(b.get("text", "") for m in msgs if m["role"] == "user"
                        for b in (m["content"] if isinstance(m["content"], list)
                                  else [{"type": "text", "text": m["content"]}])
                        if b.get("type") == "text")
        m = re.search(r"RUN: (.*?)\s*(?:$|\n)", text)
        tools = {t.get("name") for t in body.get("tools", [])}
        if tool_results:
            with self.lock:
                FakeModel.results.extend(tool_results)
            content = [{"type": "text", "text": "done"}]
            stop = "end_turn"
        elif m and "Bash" in tools:
            content = [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:12],
                        "name": "Bash", "input": {"command": m.group(1),
                                                  "description": "scripted"}}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": "ok"}]
            stop = "end_turn"
        msg = {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant",
               "model": body.get("model", "claude-test"), "content": [], "stop_reason": None,
               "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not body.get("stream"):
            msg.update(content=content, stop_reason=stop)
            self.reply(200, json.dumps(msg))
            return
        events = [{"type": "message_start", "message": msg}]
        for i, c in enumerate(content):
            if c["type"] == "text":
                events += [{"type": "content_block_start", "index": i,
                            "content_block": {"type": "text", "text": ""}},
                           {"type": "content_block_delta", "index": i,
                            "delta": {"type": "text_delta", "text": c["text"]}}]
            else:
                events += [{"type": "content_block_start", "index": i,
                            "content_block": dict(c, input={})},
                           {"type": "content_block_delta", "index": i,
                            "delta": {"type": "input_json_delta",
                                      "partial_json": json.dumps(c["input"])}}]
            events.append({"type": "content_block_stop", "index": i})
        events += [{"type": "message_delta", "delta": {"stop_reason": stop,
                                                       "stop_sequence": None},
                    "usage": {"output_tokens": 5}},
                   {"type": "message_stop"}]
        self.reply(200, sse(events), "text/event-stream")


def result_text(block):
    c = block.get("content")
    if isinstance(c, list):
        return "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
    return str(c)


class TestClaudeCode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        claude_ready()
        cls.api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
        cls.api_thread = threading.Thread(target=cls.api.serve_forever, daemon=True)
        cls.api_thread.start()
        cls.d = cgtest.Daemon().start()
        cls.home = os.path.join(cls.d.tmp, "home")
        os.makedirs(cls.home, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()
        cls.api.shutdown()
        cls.api.server_close()

    def claude(self, command, socket_path=None):
        """One `claude -p` run whose model makes one Bash call; the tool_result it saw."""
        hook = "%s --socket %s hook claude-code" % (cgtest.CALLGATE,
                                                    socket_path or self.d.socket)
        settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": hook, "timeout": 60}]}]}}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
               "ANTHROPIC_BASE_URL": "http://127.0.0.1:%d" % self.api.server_address[1],
               "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
               "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_ERROR_REPORTING": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        with FakeModel.lock:
            FakeModel.results.clear()
        r = subprocess.run([CLAUDE_BIN, "-p", "RUN: " + command, "--settings",
                            json.dumps(settings), "--output-format", "json",
                            "--model", "claude-sonnet-4-5"],
                           cwd=self.d.workspace, env=env, capture_output=True, text=True,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        with FakeModel.lock:
            results = list(FakeModel.results)
        self.assertEqual(len(results), 1, "claude exit %d\nstdout %s\nstderr %s"
                         % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return results[0]

    def exec_requests(self):
        r = self.d.request({"action": "log", "limit": 5000})
        return [e["payload"]["request"]["pipeline"] for e in r["reply"]["data"]["events"]
                if e["type"] == "request"
                and e["payload"].get("request", {}).get("action") == "exec"]

    def test_allowed_command_runs_through_callgate(self):
        marker = "made-by-claude-" + uuid.uuid4().hex[:6]
        res = self.claude("touch " + marker)
        self.assertFalse(res.get("is_error"), res)
        self.assertTrue(os.path.exists(os.path.join(self.d.workspace, marker)))
        self.assertIn([["touch", marker]], self.exec_requests())
        # What the model sees: the command's output, its errors and its status.
        res = self.claude("ls %s no-such-file" % marker)
        text = result_text(res)
        self.assertIn(marker, text)
        self.assertIn("no-such-file", text)
        self.assertTrue(res.get("is_error"), res)  # exit status 2
        self.assertIn([["ls", marker, "no-such-file"]], self.exec_requests())

    def test_refused_command_never_runs(self):
        before = self.exec_requests()
        res = self.claude("cat /root/.ssh/id_rsa")
        text = result_text(res)
        self.assertIn("EN-EXEC-D-001", text)
        self.assertIn("protected-paths", text)
        self.assertEqual(self.exec_requests(), before)

    def test_daemon_down_blocks(self):
        marker = "never-made-" + uuid.uuid4().hex[:6]
        res = self.claude("touch " + marker,
                          socket_path=os.path.join(self.d.tmp, "no-daemon.sock"))
        self.assertIn("cannot be reached", result_text(res))
        self.assertFalse(os.path.exists(os.path.join(self.d.workspace, marker)))


if __name__ == "__main__":
    unittest.main()
