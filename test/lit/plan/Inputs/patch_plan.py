#!/usr/bin/env python3
"""Edits a dmuon plan.bin in place for the plan tests, without flatbuffers.

  patch_plan.py FILE flip OFFSET        xor the byte at OFFSET (negative: from the end,
                                        'mid' for the middle) with 0xff
  patch_plan.py FILE ident XXXX         overwrite the file identifier
  patch_plan.py FILE major N [--restamp]    set Plan.format_major
  patch_plan.py FILE stage N [--restamp]    set Plan.stage
  patch_plan.py FILE restamp            recompute the fingerprint

The fingerprint is FNV-1a 64 of the buffer with the fingerprint field at 0
(docs/plan-format.md).
"""
import struct
import sys

# Field indices in table Plan (plan.fbs): vtable slot = 4 + 2 * index.
FORMAT_MAJOR, FINGERPRINT, STAGE = 0, 3, 4


def field_pos(buf, index):
    root = struct.unpack_from("<I", buf, 0)[0]
    vtable = root - struct.unpack_from("<i", buf, root)[0]
    vt_size = struct.unpack_from("<H", buf, vtable)[0]
    slot = 4 + 2 * index
    if slot >= vt_size:
        sys.exit("field %d not present" % index)
    off = struct.unpack_from("<H", buf, vtable + slot)[0]
    if off == 0:
        sys.exit("field %d not present" % index)
    return root + off


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def restamp(buf):
    pos = field_pos(buf, FINGERPRINT)
    buf[pos:pos + 8] = b"\0" * 8
    struct.pack_into("<Q", buf, pos, fnv1a64(buf))


def main():
    path, cmd = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    buf = bytearray(open(path, "rb").read())
    if cmd == "flip":
        off = len(buf) // 2 if args[0] == "mid" else int(args[0])
        buf[off] ^= 0xFF
    elif cmd == "ident":
        buf[4:8] = args[0].encode()[:4]
    elif cmd == "major":
        struct.pack_into("<H", buf, field_pos(buf, FORMAT_MAJOR), int(args[0]))
    elif cmd == "stage":
        struct.pack_into("<b", buf, field_pos(buf, STAGE), int(args[0]))
    elif cmd != "restamp":
        sys.exit("unknown command " + cmd)
    if cmd == "restamp" or "--restamp" in args:
        restamp(buf)
    open(path, "wb").write(buf)


if __name__ == "__main__":
    main()
