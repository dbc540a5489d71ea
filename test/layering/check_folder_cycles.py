#!/usr/bin/env python3
"""Fails when the folders of a library include each other in a cycle.

  check_folder_cycles.py --root DIR [--allow FILE]

Every immediate subfolder of DIR is a floor. A file in floor A that includes
"B/..." (B another floor of DIR: the library's own include root) makes A
depend on B. Each strongly connected set of two or more floors is a cycle,
reported with the include lines that close it. The allow-list has one
stated exception per line, `FLOOR,FLOOR[,...] REASON` (the floors of the
cycle, sorted, comma-separated); `#` starts a comment. An entry that matches
no cycle is an error too, so that an exception goes with the fix that ends
it.
"""

import argparse
import collections
import os
import re
import sys

SOURCE_SUFFIXES = ('.c', '.cc', '.cpp', '.h', '.hpp', '.cu', '.cuh', '.inc', '.def')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def floor_graph(root):
    """{floor: {floor it includes: [the include lines]}}"""
    floors = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    edges = {f: collections.defaultdict(list) for f in floors}
    for floor in floors:
        for dirpath, _, filenames in os.walk(os.path.join(root, floor)):
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, '/')
                with open(path, encoding='utf-8', errors='replace') as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1).split('/')[0]
                        if target in edges and target != floor and '/' in m.group(1):
                            edges[floor][target].append(f'{rel}:{number}: #include "{m.group(1)}"')
    return edges


def cycles(edges):
    """The strongly connected sets of two or more floors (Tarjan), each
    sorted, in sorted order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def read_allow_list(path):
    allowed, errors = {}, []
    if not path:
        return allowed, errors
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            key, _, reason = line.partition(' ')
            key = ','.join(sorted(key.split(',')))
            if not reason.strip():
                errors.append(f'{path}:{number}: {key} has no reason')
            allowed[key] = reason.strip()
    return allowed, errors


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--root', required=True)
    parser.add_argument('--allow', default='')
    args = parser.parse_args(argv)
    edges = floor_graph(args.root)
    allowed, errors = read_allow_list(args.allow)
    found = cycles(edges)
    keys = set()
    for component in found:
        key = ','.join(component)
        keys.add(key)
        if key in allowed:
            continue
        lines = [f'{a} -> {b}: {edges[a][b][0]}' for a in component for b in component
                 if b in edges[a]]
        errors.append(f'{args.root}: the folders {" and ".join(component)} include each other:\n  ' +
                      '\n  '.join(lines))
    for key in sorted(set(allowed) - keys):
        errors.append(f'{args.allow}: {key} is allowed but is no cycle (remove the entry)')
    for e in errors:
        print(f'error: {e}', file=sys.stderr)
    if errors:
        return 1
    print(f'folders of {args.root}: no cycle' +
          (f' beyond {len(keys)} stated exception(s)' if keys else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
