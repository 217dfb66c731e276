#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Policy case tables and the policy tools, through the real `callgate policy`.

Every tests/policy/*.yaml is a case table (callgate-policy(1)); default.yaml
tests etc/callgate/policy.yaml, any other NAME.yaml tests
tests/policy/policies/NAME.yaml. Each must pass with every rule exercised.
The rest checks the tools themselves: that a wrong expectation and an
unexercised rule fail the run, explain's exit codes, check/dump, and
keygen/sign/verify with the specific reply codes.

Environment (set by meson): CALLGATE (the CLI), CG_SRCDIR.
Fixtures: a temporary workspace ${WS} (also the cwd) and a directory outside
it ${TMP} holding a symlink to rm and an executable script.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

CALLGATE = os.environ.get("CALLGATE", "")
SRC = os.environ.get("CG_SRCDIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HERE = os.path.join(SRC, "tests", "policy")
DEFAULT_POLICY = os.path.join(SRC, "etc", "callgate", "policy.yaml")
WORLD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

FIX = {}


def setUpModule():
    root = os.path.realpath(tempfile.mkdtemp(prefix="cg-policy-"))
    ws, other = os.path.join(root, "ws"), os.path.join(root, "other")
    for d in (ws, other, os.path.join(ws, "build"), os.path.join(ws, "sub", "deeper")):
        os.makedirs(d, exist_ok=True)
    for name in ("file.txt", "script.sh"):  # script.sh stays non-executable
        open(os.path.join(ws, name), "w").close()
    shutil.copy2(shutil.which("ls", path=WORLD_PATH), os.path.join(ws, "ls"))
    os.symlink(shutil.which("rm", path=WORLD_PATH), os.path.join(other, "rm"))
    tool = os.path.join(other, "tool")
    with open(tool, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(tool, 0o755)
    FIX.update(root=root, ws=ws, tmp=other)


def tearDownModule():
    shutil.rmtree(FIX["root"], ignore_errors=True)


def cg(*args, check=None):
    """Run callgate in the workspace with ${WS}/${TMP} set; returns CompletedProcess."""
    env = dict(os.environ, WS=FIX["ws"], TMP=FIX["tmp"])
    r = subprocess.run([CALLGATE, *args], cwd=FIX["ws"], env=env, capture_output=True,
                       text=True, timeout=300)
    if check is not None and r.returncode != check:
        raise AssertionError(f"callgate {' '.join(args)}: exit {r.returncode}, want {check}\n"
                             f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


def tables():
    for fn in sorted(os.listdir(HERE)):
        if fn.endswith(".yaml"):
            pol = DEFAULT_POLICY if fn == "default.yaml" else os.path.join(HERE, "policies", fn)
            yield fn, pol, os.path.join(HERE, fn)


def summary(out):
    m = re.search(r"^(PASS|FAIL): (\d+) case\(s\), (\d+) passed, (\d+) failed, (\d+) skipped; "
                  r"(\d+) of (\d+) rule\(s\) exercised$", out, re.M)
    assert m, f"no summary line in:\n{out[-2000:]}"
    return m.group(1), [int(x) for x in m.groups()[1:]]


class Tables(unittest.TestCase):
    def test_every_table_passes_with_full_rule_coverage(self):
        names = []
        for name, pol, table in tables():
            names.append(name)
            with self.subTest(table=name):
                self.assertTrue(os.path.exists(pol), f"{name}: no policy {pol}")
                r = cg("policy", "test", pol, table, "--workspace", FIX["ws"])
                self.assertEqual(r.returncode, 0, r.stdout[-6000:] + r.stderr[-2000:])
                verdict, (cases, passed, failed, skipped, hit, rules) = summary(r.stdout)
                self.assertEqual((verdict, failed, hit), ("PASS", 0, rules))
        self.assertIn("default.yaml", names)
        self.assertGreaterEqual(len(names), 2)

    def test_default_table_has_at_least_150_cases_run(self):
        r = cg("policy", "test", DEFAULT_POLICY, os.path.join(HERE, "default.yaml"),
               "--workspace", FIX["ws"])
        _, (cases, passed, failed, skipped, _, _) = summary(r.stdout)
        self.assertGreaterEqual(passed, 150)

    def test_json_report(self):
        r = cg("policy", "test", DEFAULT_POLICY, os.path.join(HERE, "default.yaml"),
               "--workspace", FIX["ws"], "--json", check=0)
        j = json.loads(r.stdout)
        self.assertEqual(j["failed"], 0)
        self.assertEqual(j["unexercised"], [])
        with open(DEFAULT_POLICY, "rb") as f:
            import hashlib
            self.assertEqual(j["policy"], DEFAULT_POLICY)
            self.assertEqual(j["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertTrue(all("decision" in x and "code" in x for x in j["results"]))


class TestCommandFails(unittest.TestCase):
    """The table runner must be able to fail: wrong expectations, gaps, typos."""

    def write(self, name, text):
        p = os.path.join(FIX["root"], name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_wrong_decision_fails_and_names_the_case(self):
        t = self.write("wrong.yaml", "- { name: rm root, pipeline: [[rm, -rf, /]], "
                       "privileged: false, expect: ALLOW }\n")
        r = cg("policy", "test", DEFAULT_POLICY, t, "--workspace", FIX["ws"], check=1)
        self.assertIn("FAIL #1 rm root: expected ALLOW, got BLOCK rule rm-recursive-elsewhere "
                      "(EN-EXEC-D-001)", r.stdout)

    def test_wrong_rule_or_code_fails(self):
        t = self.write("wrongrule.yaml", "defaults: { privileged: false }\ncases:\n"
                       "- { pipeline: [[rm, -rf, /]], expect: BLOCK, rule: rm-elsewhere }\n"
                       "- { pipeline: [[rm, -rf, /]], expect: BLOCK, code: EN-EXEC-D-002 }\n")
        r = cg("policy", "test", DEFAULT_POLICY, t, "--workspace", FIX["ws"], check=1)
        _, (cases, passed, failed, _, _, _) = summary(r.stdout)
        self.assertEqual((cases, failed), (2, 2))

    def test_unexercised_rule_fails(self):
        with open(os.path.join(HERE, "policies", "features.yaml")) as f:
            pol = f.read()
        pol += ("  - id: never-reached\n    decision: deny\n    why: nothing asks\n"
                "    match: { exe: [tac] }\n")
        p = self.write("features-plus.yaml", pol)
        r = cg("policy", "test", p, os.path.join(HERE, "features.yaml"), "--workspace",
               FIX["ws"], check=1)
        self.assertIn("UNEXERCISED 1 of 30 rule(s) no case reaches: never-reached", r.stdout)
        verdict, (_, _, failed, _, hit, rules) = summary(r.stdout)
        self.assertEqual((verdict, failed, hit, rules), ("FAIL", 0, 29, 30))

    def test_rules_narrows_the_coverage_asked_for(self):
        # s44c L10: a copy of the default policy with one rule added needed a
        # case for all 60 rules. --rules asks coverage of the named ones; a
        # name the policy does not have is a usage error, not a pass.
        pol = os.path.join(HERE, "..", "..", "etc", "callgate", "policy.yaml")
        cases = self.write("few.yaml", "cases:\n  - { name: ls, pipeline: [[ls]], "
                           "privileged: false, expect: ALLOW, rule: read-only-tools }\n")
        cg("policy", "test", pol, cases, "--workspace", FIX["ws"], check=1)
        r = cg("policy", "test", pol, cases, "--workspace", FIX["ws"], "--rules",
               "read-only-tools", check=0)
        self.assertIn("1 of 1 rule(s) exercised", r.stdout)
        cg("policy", "test", pol, cases, "--workspace", FIX["ws"], "--rules",
           "read-only-tools,tools-confined", check=1)
        r = cg("policy", "test", pol, cases, "--workspace", FIX["ws"], "--rules",
               "read-only-tool", check=64)
        self.assertIn("has no rule of", r.stderr)

    def test_a_rule_for_a_later_stage_is_exercised(self):
        # docs/policy.md's grep-filter allows grep as a filter; a pipeline's
        # verdict names its most restrictive stage's rule (ls's), and the
        # table could never pass (s36 walk).
        pol = self.write("filter.yaml", "version: 1\nrules:\n"
                         "  - id: ls\n    decision: degrade\n    match: { exe: [ls] }\n"
                         "    constraints: { read: [/], net: none }\n"
                         "  - id: grep-filter\n    decision: allow\n"
                         "    match: { exe: [grep], position: [filter] }\n")
        t = self.write("filter-cases.yaml", "defaults: { privileged: false }\ncases:\n"
                       "- { pipeline: [[ls], [grep, a]], expect: DEGRADE, rule: ls }\n"
                       "- { pipeline: [[grep, a]], expect: BLOCK, rule: default-deny }\n")
        r = cg("policy", "test", pol, t, "--workspace", FIX["ws"], check=0)
        verdict, (_, _, failed, _, hit, rules) = summary(r.stdout)
        self.assertEqual((verdict, failed, hit, rules), ("PASS", 0, 2, 2), r.stdout)

    def test_malformed_tables_are_refused_before_deciding(self):
        bad = {
            "unknown key": "- { pipeline: [[ls]], expect: ALLOW, expext: BLOCK }\n",
            "bad expect": "- { pipeline: [[ls]], expect: PERMIT }\n",
            "no pipeline": "- { expect: ALLOW }\n",
            "unset var": "- { pipeline: [[\"${NO_SUCH_VAR_X}\"]], expect: ALLOW }\n",
            "empty": "[]\n",
            "peer type": "- { pipeline: [[ls]], expect: ALLOW, peer: { uid: root } }\n",
            "yaml error": "- { pipeline: [[ls], expect: ALLOW\n",
            "duplicate key": "- { pipeline: [[ls]], expect: ALLOW, expect: BLOCK }\n",
        }
        for what, text in bad.items():
            with self.subTest(what):
                t = self.write("bad.yaml", text)
                r = cg("policy", "test", DEFAULT_POLICY, t, "--workspace", FIX["ws"])
                self.assertEqual(r.returncode, 65, r.stdout + r.stderr)
                self.assertIn("callgate policy: cases:", r.stderr)

    def test_policy_that_does_not_load(self):
        p = self.write("broken-policy.yaml", "version: 1\nrules:\n  - id: x\n    decisoin: allow\n")
        r = cg("policy", "test", p, os.path.join(HERE, "features.yaml"), "--workspace", FIX["ws"])
        self.assertEqual(r.returncode, 65)
        self.assertIn("MCP-CFG-E-001", r.stderr)


class Explain(unittest.TestCase):
    def test_exit_codes(self):
        cases = [
            (["--no-privileged", "--", "ls", "-la"], 0),
            (["--no-privileged", "--", "cp", "a", "b"], 0),       # DEGRADE
            (["--no-privileged", "--", "rm", "-rf", "/"], 77),
            (["--", "ls"], 75),                                     # protocol default: privileged
            (["--privileged", "--", "ls"], 75),
            (["--no-privileged", "--", "git", "push"], 75),
            (["--no-privileged", "--env", "LD_PRELOAD=/x.so", "--", "ls"], 65),
            (["--no-privileged", "--", "no-such-command-xyz"], 65),
            (["--no-privileged", "--cwd", "/etc", "--", "ls"], 65),
            (["--no-privileged", "--", "ls", "|", "sh"], 77),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                r = cg("policy", "explain", *args)
                self.assertEqual(r.returncode, want, r.stdout + r.stderr)

    def test_human_output_names_rungs_rules_and_resolution(self):
        r = cg("policy", "explain", "--no-privileged", "--", os.path.join(FIX["tmp"], "rm"),
               "-rf", "/", check=77)
        self.assertRegex(r.stdout, r"stage 1: +.*/rm -> /usr/bin/rm \(resolved from .*/other/rm\)")
        self.assertRegex(r.stdout, r"decision: +BLOCK")
        self.assertRegex(r.stdout, r"rule: +rm-recursive-elsewhere")
        self.assertRegex(r.stdout, r"privilege +rank 10 +ALLOW")
        self.assertRegex(r.stdout, r"policy +rank 100 +BLOCK +rule rm-recursive-elsewhere")

    def test_json_output(self):
        r = cg("policy", "explain", "--json", "--no-privileged", "--", "cp", "a", "b", check=0)
        j = json.loads(r.stdout)
        self.assertEqual(j["decision"], "DEGRADE")
        self.assertEqual(j["rule_id"], "workspace-writers")
        self.assertEqual(j["reason"], "EN-EXEC-S-002")
        self.assertEqual([x["rung"] for x in j["rungs"]], ["privilege", "policy"])
        self.assertEqual(j["constraints"][0]["write"], ["${workspace}", "/tmp"])
        self.assertEqual(j["constraints"][0]["net"], "none")
        self.assertEqual(j["policy"]["source"], "<embedded>")
        r = cg("policy", "explain", "--json", "--no-privileged", "--env", "PATH=/tmp", "--",
               "ls", check=65)
        j = json.loads(r.stdout)
        self.assertEqual(j["decision"], "INVALID")
        self.assertEqual(j["reply"]["code"], "MCP-VAL-I-011")

    def test_policy_file_uid_and_actions(self):
        pol = os.path.join(HERE, "policies", "features.yaml")
        cg("policy", "explain", "--policy", pol, "--no-privileged", "--uid", "0", "--", "date",
           check=0)
        cg("policy", "explain", "--policy", pol, "--no-privileged", "--uid", "1000", "--",
           "date", check=77)
        acts = json.dumps([{"action_type": "read", "tool": "fs.read", "resource": "/etc/hosts"}])
        cg("policy", "explain", "--policy", pol, "--no-privileged", "--actions", acts, check=0)

    def test_explain_applies_defaults_cwd(self):
        # Issue 10's drift bug: explain judged `rm foo` from the workspace root.
        pol = os.path.join(HERE, "policies", "default_cwd.yaml")
        r = cg("policy", "explain", "--policy", pol, "--no-privileged", "--", "rm", "foo",
               check=0)
        self.assertRegex(r.stdout, r"decision: +ALLOW")
        self.assertRegex(r.stdout, r"rule: +rm-in-sub")
        cg("policy", "explain", "--policy", pol, "--no-privileged", "--cwd", FIX["ws"], "--",
           "rm", "foo", check=77)

    def test_help(self):
        for sub in ("explain", "test", "check", "dump", "keygen", "sign", "verify"):
            with self.subTest(sub=sub):
                r = cg("policy", sub, "--help", check=0)
                self.assertIn(f"usage: callgate policy {sub}", r.stdout)
        r = cg("policy", "explain", "--polcy", "x", "--", "ls", check=64)
        self.assertIn("did you mean '--policy'", r.stderr)

    def test_usage_errors(self):
        for args in (["explain"], ["explain", "--bogus"], ["explain", "--", "ls", "|"],
                     ["nope"], ["test", "only-one.yaml"], ["keygen", "a"]):
            with self.subTest(args=args):
                self.assertEqual(cg("policy", *args).returncode, 64)


class CheckAndDump(unittest.TestCase):
    def write(self, text):
        p = os.path.join(FIX["root"], "check.yaml")
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_default_policy_checks_clean(self):
        r = cg("policy", "check", DEFAULT_POLICY, check=0)
        self.assertIn("OK", r.stdout)

    def test_shadowed_rule_is_a_finding(self):
        p = self.write("version: 1\nrules:\n"
                       "  - { id: all-ls, decision: allow, match: { exe: [ls] } }\n"
                       "  - { id: ls-la, decision: deny, why: x, "
                       "match: { exe: [ls], flags_any: [-a] } }\n")
        r = cg("policy", "check", p, check=1)
        self.assertRegex(r.stdout, r"rule ls-la: shadowed: rule all-ls")
        j = json.loads(cg("policy", "check", "--json", p, check=1).stdout)
        self.assertIn({"rule": "ls-la", "kind": "shadowed"},
                      [{"rule": f["rule"], "kind": f["kind"]} for f in j["findings"]])

    def test_load_errors_exit_65_with_the_reply(self):
        for text in ("version: 1\nrulez: []\n",
                     "version: 1\nrules:\n  - { id: x, decision: allow, "
                     "match: { exe: [ls], args_any: [{ pattern: \"(\" }] } }\n"):
            with self.subTest(text=text):
                r = cg("policy", "check", self.write(text))
                self.assertEqual(r.returncode, 65)
                self.assertIn("MCP-CFG-E-001", r.stderr)

    def test_load_errors_say_what_was_meant(self):
        # s36 walk: a typo named no alternative, and a tab read as a token error.
        r = cg("policy", "check", self.write(
            "version: 1\nrules:\n  - { id: x, decision: allow, match: { exe_globs: [ls] } }\n"),
            check=65)
        self.assertIn("unknown key 'exe_globs' (did you mean 'exe_glob'?)", r.stderr)
        r = cg("policy", "check", self.write("version: 1\nrulez: []\n"), check=65)
        self.assertIn("did you mean 'rules'?", r.stderr)
        r = cg("policy", "check", self.write("version: 1\nrules:\n\t- id: x\n"), check=65)
        self.assertIn("a tab: YAML indents with spaces only", r.stderr)
        # ux-s40 L13: an unquoted ${workspace} in a flow list.
        r = cg("policy", "check", self.write(
            "version: 1\nrules:\n  - id: x\n    decision: degrade\n    match: { exe: [ls] }\n"
            "    constraints:\n      write: [${workspace}]\n"), check=65)
        self.assertIn('quote it, ["${workspace}"]', r.stderr)

    def test_dump_is_json_with_the_file_sha256(self):
        import hashlib
        r = cg("policy", "dump", DEFAULT_POLICY, check=0)
        j = json.loads(r.stdout)
        with open(DEFAULT_POLICY, "rb") as f:
            self.assertEqual(j["sha256"], hashlib.sha256(f.read()).hexdigest())
        ids = [x["id"] for x in j["rules"]]
        self.assertIn("rm-recursive-elsewhere", ids)
        # The embedded default is the same bytes.
        self.assertEqual(json.loads(cg("policy", "dump", check=0).stdout)["sha256"], j["sha256"])

    def test_explain_takes_callgate_privileged_as_gate_does(self):
        # ux-s40 M3: with CALLGATE_PRIVILEGED=0 exported, gate said ALLOW and
        # explain UNKNOWN (privileged).
        env = dict(os.environ, CALLGATE_PRIVILEGED="0")
        r = subprocess.run([CALLGATE, "policy", "explain", "--json", "--", "ls"], env=env,
                           cwd=FIX["ws"], capture_output=True, text=True, timeout=60)
        self.assertEqual(json.loads(r.stdout)["decision"], "ALLOW", r.stdout + r.stderr)
        r = subprocess.run([CALLGATE, "policy", "explain", "--privileged", "--json", "--", "ls"],
                           env=env, cwd=FIX["ws"], capture_output=True, text=True, timeout=60)
        self.assertEqual(json.loads(r.stdout)["decision"], "UNKNOWN", r.stdout)  # the flag wins
        env["CALLGATE_PRIVILEGED"] = "maybe"
        r = subprocess.run([CALLGATE, "policy", "explain", "--", "ls"], env=env,
                           cwd=FIX["ws"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 64, r.stderr)

    def test_dump_yaml_is_the_embedded_policy_to_start_from(self):
        # ux-s39 M10: a policy file replaces the default whole; --yaml gives
        # the default, comments and all, to copy and change.
        r = cg("policy", "dump", "--yaml", check=0)
        with open(DEFAULT_POLICY) as f:
            self.assertEqual(r.stdout, f.read())
        self.assertIn("# ", r.stdout)
        # docs/policy.md's recipe: a rule before package-fetch wins over it.
        # The rule as docs/policy.md gives it (ux-s43c M6: the doc's copy had
        # made ~/.npm a write tree again), so the doc's example is what loads.
        with open(os.path.join(SRC, "docs", "policy.md")) as f:
            doc = f.read()
        start = doc.index("  - id: npm-from-the-registry\n")
        rule = doc[start:doc.index("```", start)] + "\n"
        self.assertIn('scratch: ["${home}/.npm"]', rule)
        self.assertNotIn(".npm", rule.split("scratch:")[0])
        at = r.stdout.index("  - id: package-fetch")
        path = os.path.join(tempfile.mkdtemp(dir=FIX["root"]), "mine.yaml")
        with open(path, "w") as f:
            f.write(r.stdout[:at] + rule + r.stdout[at:])
        cg("policy", "check", path, check=0)
        if shutil.which("npm"):
            out = cg("policy", "explain", "--policy", path, "--no-privileged", "--json", "--",
                     "npm", "ci", check=0).stdout
            self.assertEqual(json.loads(out)["rule_id"], "npm-from-the-registry", out)


class Signing(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(dir=FIX["root"])
        self.key, self.pub = os.path.join(self.d, "k.pem"), os.path.join(self.d, "k.pub")
        self.pol = os.path.join(self.d, "policy.yaml")
        shutil.copy(DEFAULT_POLICY, self.pol)
        cg("policy", "keygen", self.key, self.pub, check=0)

    def test_keygen_modes_and_no_overwrite(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.key).st_mode), 0o600)
        with open(self.key) as f:
            self.assertIn("BEGIN PRIVATE KEY", f.read())
        r = cg("policy", "keygen", self.key, self.pub, check=70)
        self.assertIn("MCP-CFG-E-105", r.stderr)
        self.assertIn("EEXIST", r.stderr)

    def test_sign_verify_flip_missing_wrong_key(self):
        cg("policy", "sign", "--key", self.key, self.pol, check=0)
        self.assertTrue(os.path.exists(self.pol + ".sig"))
        r = cg("policy", "verify", "--pubkey", self.pub, self.pol, check=0)
        self.assertIn("MCP-CFG-S-101", r.stdout)
        cg("policy", "check", "--pubkey", self.pub, self.pol, check=0)

        # Flip one byte of the policy: the signature no longer verifies.
        with open(self.pol, "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0x01]))
        r = cg("policy", "verify", "--pubkey", self.pub, self.pol, check=1)
        self.assertIn("MCP-CFG-E-102", r.stderr)
        r = cg("policy", "check", "--pubkey", self.pub, self.pol, check=65)
        self.assertIn("MCP-CFG-E-102", r.stderr)

        # Another key's signature over the same bytes does not verify either.
        shutil.copy(DEFAULT_POLICY, self.pol)
        k2, p2 = os.path.join(self.d, "k2.pem"), os.path.join(self.d, "k2.pub")
        cg("policy", "keygen", k2, p2, check=0)
        cg("policy", "sign", "--key", k2, self.pol, check=0)
        self.assertIn("MCP-CFG-E-102",
                      cg("policy", "verify", "--pubkey", self.pub, self.pol, check=1).stderr)

        os.unlink(self.pol + ".sig")
        r = cg("policy", "verify", "--pubkey", self.pub, self.pol, check=1)
        self.assertIn("MCP-CFG-E-101", r.stderr)
        self.assertIn("ENOENT", r.stderr)

        r = cg("policy", "verify", "--pubkey", os.path.join(self.d, "none.pub"), self.pol,
               check=70)
        self.assertIn("MCP-CFG-E-103", r.stderr)

    def test_daemon_refuses_unsigned_or_wrongly_signed_policy(self):
        daemon = os.environ.get("CALLGATED")
        if not daemon or not os.access(daemon, os.X_OK):
            self.skipTest("CALLGATED not set")
        sock, state = os.path.join(self.d, "s.sock"), os.path.join(self.d, "state")

        def start():
            return subprocess.Popen([daemon, "--socket", sock, "--admin-socket",
                                     os.path.join(self.d, "a.sock"), "--state-dir", state,
                                     "--workspace", FIX["ws"], "--policy", self.pol,
                                     "--policy-pubkey", self.pub],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # Unsigned: refuses to start, saying why.
        p = start()
        out, err = p.communicate(timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("MCP-CFG-E-101", err)
        # Signed, then changed by one byte: refuses with the invalid-signature code.
        cg("policy", "sign", "--key", self.key, self.pol, check=0)
        with open(self.pol, "a") as f:
            f.write("\n")
        p = start()
        out, err = p.communicate(timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("MCP-CFG-E-102", err)
        # Signed as is: it starts (and is stopped again).
        cg("policy", "sign", "--key", self.key, self.pol, check=0)
        p = start()
        try:
            for _ in range(200):
                if os.path.exists(sock) or p.poll() is not None:
                    break
                import time
                time.sleep(0.05)
            self.assertIsNone(p.poll(), p.stderr.read() if p.poll() is not None else "")
            self.assertTrue(os.path.exists(sock))
        finally:
            p.terminate()
            p.communicate(timeout=60)

    def test_explicit_signature_path_and_openssl_interop(self):
        sig = os.path.join(self.d, "detached.sig")
        cg("policy", "sign", "--key", self.key, "--out", sig, self.pol, check=0)
        cg("policy", "verify", "--pubkey", self.pub, "--sig", sig, self.pol, check=0)
        openssl = shutil.which("openssl")
        if not openssl:
            self.skipTest("no openssl(1) for the interoperability check")
        import base64
        raw = os.path.join(self.d, "sig.bin")
        with open(sig) as f, open(raw, "wb") as g:
            g.write(base64.b64decode(f.read().strip()))
        r = subprocess.run([openssl, "pkeyutl", "-verify", "-pubin", "-inkey", self.pub,
                            "-rawin", "-in", self.pol, "-sigfile", raw],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    if not CALLGATE or not os.access(CALLGATE, os.X_OK):
        sys.exit("run.py: set CALLGATE to the callgate binary")
    unittest.main(verbosity=2)
