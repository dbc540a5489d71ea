#!/usr/bin/env python3
"""Checks that what dmuonc / dmuon-plan printed is text a terminal and a JSON
reader take as it is: valid UTF-8 with no control character but newline (no
escape code, carriage return, NUL, C1 control).

Usage: check_printable.py FILE...   (prints "printable: N files" or the first
offending line of each file, exit 1)
"""
import sys

bad = 0
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        print(f"{path}: not UTF-8 at byte {e.start}: {data[max(0, e.start - 40):e.start + 8]!r}")
        bad += 1
        continue
    for n, line in enumerate(text.split("\n"), 1):
        hit = next((c for c in line if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F), None)
        if hit is not None:
            print(f"{path}:{n}: control character {ord(hit):#04x}: {line[:200]!r}")
            bad += 1
            break
if bad:
    sys.exit(1)
print(f"printable: {len(sys.argv) - 1} files")
