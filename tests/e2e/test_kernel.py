# SPDX-License-Identifier: MIT
"""Kernel behaviours that span modules, through a real daemon."""
import base64
import os
import unittest

import cgtest

POLICY = """version: 1
defaults:
  cwd: "${workspace}/sub"
rules:
  - id: pwd
    decision: allow
    match:
      exe: [pwd]
"""

ESCAPE = POLICY.replace("${workspace}/sub", "/etc")


class DefaultCwd(unittest.TestCase):
    def test_policy_default_cwd_applies_when_the_request_names_none(self):
        with cgtest.Daemon(policy_text=POLICY) as d:
            os.mkdir(os.path.join(d.workspace, "sub"))
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False))
            self.assertEqual(resp["status"], "ok", resp)
            got = base64.b64decode(resp["stdout"]).decode().strip()
            self.assertEqual(got, os.path.realpath(os.path.join(d.workspace, "sub")))
            # A cwd in the request wins over the default.
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False,
                                                 cwd=d.workspace))
            self.assertEqual(base64.b64decode(resp["stdout"]).decode().strip(),
                             os.path.realpath(d.workspace))

    def test_a_default_cwd_outside_every_workspace_is_refused(self):
        with cgtest.Daemon(policy_text=ESCAPE) as d:
            resp = d.request(cgtest.make_request([["pwd"]], privileged=False))
            self.assertEqual(resp["reply"]["code"], "WA-RES-I-004", resp)
            self.assertNotIn("stdout", resp)


if __name__ == "__main__":
    unittest.main()
