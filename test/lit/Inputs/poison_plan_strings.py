#!/usr/bin/env python3
"""Poisons every string a plan.bin stores, one at a time, and checks that
dmuon-plan refuses each poisoned plan naming the bad byte, and prints nothing.

Usage: poison_plan_strings.py DMUON_PLAN PLAN.bin SCRATCH_DIR

A FlatBuffers string is a 4-aligned little-endian length L, L bytes and a
NUL. Every such run of 2 to 4096 printable ASCII bytes in the buffer is taken
for a string (the test's plan holds no data that looks like one); for each,
one byte is replaced (in turn a newline, an escape, a NUL, 0xff and the C1
control U+0085's first byte 0xc2) and the fingerprint restamped
(patch_plan.py). Prints "refused STRING: ERROR" for each, then "poisoned N
strings: all refused", or each one dmuon-plan accepted, then exits 1.
"""
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plan", "Inputs"))
import patch_plan  # noqa: E402

POISONS = [b"\n", b"\x1b", b"\0", b"\xff", b"\xc2"]


def strings(buf):
    for off in range(0, len(buf) - 5, 4):
        n = struct.unpack_from("<I", buf, off)[0]
        end = off + 4 + n
        if 2 <= n <= 4096 and end < len(buf) and buf[end] == 0 and \
                all(0x20 <= b < 0x7F for b in buf[off + 4:end]):
            yield off + 4, n


def main():
    tool, plan, scratch = sys.argv[1:4]
    buf = bytearray(open(plan, "rb").read())
    found = list(strings(buf))
    accepted = []
    for k, (start, n) in enumerate(found):
        text = bytes(buf[start:start + n])
        poisoned = bytearray(buf)
        # The last byte: a newline there would forge a line after the field.
        poisoned[start + n - 1:start + n] = POISONS[k % len(POISONS)]
        patch_plan.restamp(poisoned)
        path = os.path.join(scratch, "poisoned.bin")
        open(path, "wb").write(poisoned)
        r = subprocess.run([tool, path], capture_output=True)
        refused = r.returncode != 0 and not r.stdout and (
            b"control character" in r.stderr or b"not valid UTF-8" in r.stderr)
        if refused:
            print(f"refused {text.decode()}: {r.stderr.decode().splitlines()[0]}")
        else:
            accepted.append(f"{text!r} at {start}: exit {r.returncode}, "
                            f"stderr {r.stderr[:300]!r}, stdout {r.stdout[:100]!r}")
    for a in accepted:
        print("accepted:", a)
    if accepted or not found:
        sys.exit(1)
    print(f"poisoned {len(found)} strings: all refused")


if __name__ == "__main__":
    main()
