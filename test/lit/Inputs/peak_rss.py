#!/usr/bin/env python3
"""Runs a command and prints its exit status and whether its peak resident
memory stayed under a limit, for the lit tests of what a tool touches.

Usage: peak_rss.py LIMIT_MB CMD [ARGS...]
"""
import resource
import subprocess
import sys

limit_mb = int(sys.argv[1])
status = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode
peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024  # KiB on Linux
print("exit status:", status)
print("peak RSS %s %d MB" % ("under" if peak_mb < limit_mb else "over", limit_mb),
      "(%d MB)" % peak_mb)
