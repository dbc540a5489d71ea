"""python3 -m dmuon --version: the library's version and the plan format it
reads, and where the library was loaded from."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m dmuon",
                                     description="dmuon's Python package over libdmuon")
    parser.add_argument("--version", action="store_true",
                        help="print the library and plan-format versions")
    args = parser.parse_args(argv)
    try:
        import dmuon
    except ImportError as e:
        print(f"python3 -m dmuon: error: {e}", file=sys.stderr)
        return 1
    if args.version:
        print(dmuon.version_string())
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
