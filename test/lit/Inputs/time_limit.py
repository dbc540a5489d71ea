#!/usr/bin/env python3
"""Runs a command and prints its exit status and whether it finished within
a time limit (it is killed at twice the limit), for the lit tests of what an
input's size costs.

Usage: time_limit.py LIMIT_S CMD [ARGS...]
"""
import subprocess
import sys
import time

limit_s = float(sys.argv[1])
start = time.monotonic()
try:
    status = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL,
                            timeout=2 * limit_s).returncode
except subprocess.TimeoutExpired:
    status = "killed"
elapsed = time.monotonic() - start
print("exit status:", status)
print("time %s %g s" % ("under" if elapsed < limit_s else "over", limit_s),
      "(%.2f s)" % elapsed)
