#!/usr/bin/env python3
"""Runs a command whose reader closes stdout after one byte (`cmd | head -c1`)
and prints its exit status and stderr, for the write-error lit tests.

Usage: closed_pipe.py CMD [ARGS...]
"""
import subprocess
import sys

proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
proc.stdout.read(1)
proc.stdout.close()
err = proc.stderr.read().decode(errors="replace")
print("exit status:", proc.wait())
sys.stdout.write(err)
