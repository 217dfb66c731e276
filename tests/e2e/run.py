#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs every tests/e2e/test_*.py against the built daemon and CLI."""
import os, sys, unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
result = unittest.TextTestRunner(verbosity=2).run(suite)
if result.testsRun == 0:
    print("e2e: no tests ran")
    sys.exit(1)
sys.exit(0 if result.wasSuccessful() else 1)
