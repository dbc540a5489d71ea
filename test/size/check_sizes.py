#!/usr/bin/env python3
"""Fails on a C/C++ function over --max-function-lines or a source file over
--max-file-lines that has no stated reason in the allow-list.

  check_sizes.py --root DIR --allow FILE [--dirs d1,d2,...]
                 [--max-function-lines 150] [--max-file-lines 600]

A function's length counts the lines from the first line of its signature to
its closing brace, both included. Functions are found by brace matching over
the source with its comments, string and character literals and preprocessor
lines blanked out: a `{` opens a function body when the text before it (since
the last `;`, `{` or `}` of the same scope) holds a parameter list and is not
a class, enum or initializer. A lambda or local class inside a function is
part of that function.

The allow-list has one exception per line, `PATH REASON` for a file or
`PATH:FUNCTION REASON` for a function (FUNCTION as this script names it in its
report, e.g. `Class::method`); `#` starts a comment. An entry that no longer
matches anything over the limit is an error too, so that exceptions do not
outlive their reason.
"""

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = ('.c', '.cc', '.cpp', '.cxx', '.h', '.hh', '.hpp', '.cu',
                   '.cuh', '.def', '.inc')
DEFAULT_DIRS = ('compiler', 'runtime', 'plan', 'kernels', 'sim', 'tools',
                'common', 'support', 'hosts', 'include', 'examples', 'bench',
                'test')
# The checker's own fixtures are too long on purpose.
EXCLUDED_DIRS = ('test/size/fixtures',)

CLASS_KEYWORDS = ('class', 'struct', 'union')


def blank(text, start, end):
    """`text[start:end]` with everything but newlines turned into spaces."""
    return re.sub(r'[^\n]', ' ', text[start:end])


def starts_number(text, pos):
    """Whether the token that ends just before `pos` is a number (so a `'` at
    `pos` is a digit separator, as in 1'000)."""
    i = pos
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in '_.'):
        i -= 1
    return i < pos and text[i].isdigit()


def strip_source(text):
    """The source with comments, literals and preprocessor lines replaced by
    spaces; newlines stay where they were, so offsets map to the same lines."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in ' \t':
            out.append(c)
            i += 1
            continue
        if line_start and c == '#':
            # A preprocessor line, with its continuations.
            j = i
            while j < n and text[j] != '\n':
                if text[j] == '\\' and j + 1 < n and text[j + 1] == '\n':
                    j += 2
                    continue
                if text.startswith('/*', j):
                    k = text.find('*/', j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            out.append(blank(text, i, j))
            i = j
            continue
        line_start = False
        if c == '\n':
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(blank(text, i, j))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(text, i, j))
            i = j
        elif c == '"' and i > 0 and text[i - 1] == 'R' and \
                (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == '_') or
                 text[max(0, i - 4):i - 1] in ('u8', 'u', 'U', 'L')):
            # A raw string: R"delim( ... )delim".
            open_paren = text.find('(', i)
            delim = text[i + 1:open_paren]
            close = text.find(')' + delim + '"', open_paren)
            j = n if close < 0 else close + len(delim) + 2
            out.append('"' + blank(text, i + 1, j - 1) + '"')
            i = j
        elif c == '"' or (c == "'" and not starts_number(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(c + blank(text, i + 1, j - 1) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def matching(code, pos, opener, closer):
    """The offset of the bracket closing the one at `pos`."""
    depth = 0
    for i in range(pos, len(code)):
        if code[i] == opener:
            depth += 1
        elif code[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    return len(code) - 1


def top_level(header):
    """`header` with every bracketed group's inside blanked: what is left is
    at the header's own level."""
    out = list(header)
    depth = 0
    for i, c in enumerate(header):
        if c in '([{':
            if depth > 0:
                out[i] = ' '
            depth += 1
        elif c in ')]}':
            depth -= 1
            if depth > 0:
                out[i] = ' '
        elif depth > 0:
            out[i] = ' '
    return ''.join(out)


def drop_template_prefix(flat):
    """`flat` without a leading `template <...>` (angle brackets matched)."""
    m = re.match(r'\s*template\s*<', flat)
    if not m:
        return flat
    depth, i = 0, m.end() - 1
    while i < len(flat):
        if flat[i] == '<':
            depth += 1
        elif flat[i] == '>':
            depth -= 1
            if depth == 0:
                return drop_template_prefix(flat[i + 1:])
        i += 1
    return flat


FUNCTION_NAME = re.compile(
    r'((?:[A-Za-z_~][\w]*\s*(?:<[^<>()]*>)?\s*::\s*)*'
    r'(?:operator\s*(?:\(\s*\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*\($')


def function_name(header):
    """The name a function's header declares: the identifier before its
    parameter list (a macro's arguments too, as TEST(Suite, Name))."""
    flat = top_level(header)
    paren = flat.find('(')
    if re.search(r'\boperator\s*$', flat[:paren]) and flat.startswith('()', paren):
        paren = flat.find('(', paren + 2)  # operator()(...): the second list
    m = FUNCTION_NAME.search(flat[:paren + 1])
    if not m:
        return '<lambda>' if ']' in flat[:paren] else '<function>'
    # One word, so that an allow-list line can name it: `operator bool` is
    # operator_bool, a macro's arguments lose their spaces.
    name = re.sub(r'\boperator\s+(?=\w)', 'operator_', m.group(1))
    name = re.sub(r'\s+', '', name)
    if re.fullmatch(r'[A-Z][A-Z0-9_]*', name):
        close = matching(header, paren, '(', ')')
        name += re.sub(r'\s+', '', header[paren:close + 1])
    return name


def classify(header):
    """What a `{` after `header` opens: 'function', 'class' (a scope that may
    hold functions: class, struct, namespace, extern "C"), or 'other'
    (enums, initializers)."""
    flat = drop_template_prefix(top_level(header)).strip()
    words = re.findall(r'[A-Za-z_]\w*', flat)
    first = words[0] if words else ''
    if first == 'enum':
        return 'other'
    if first in CLASS_KEYWORDS or first == 'namespace':
        return 'class'
    if first == 'extern' and '(' not in flat:
        return 'class'  # extern "C" { ... }
    stripped = flat.rstrip()
    if '(' in flat:
        before_params = flat[:flat.find('(')]
        if '=' in before_params.replace('==', '').replace('operator=', ''):
            # An initializer, unless the brace follows a lambda's parameters.
            return 'function' if stripped.endswith(')') or \
                stripped.endswith('mutable') else 'other'
        return 'function'
    if stripped.endswith('=') or '=' in flat:
        return 'other'
    return 'class' if stripped == '' or words else 'other'


def class_name(header):
    """The name of the class a header declares ('' for a namespace)."""
    flat = drop_template_prefix(top_level(header)).strip()
    m = re.match(r'(?:class|struct|union)\b(?:\s*\[\[[^\]]*\]\])?\s*'
                 r'(?:alignas\s*\(\s*\)\s*)?([A-Za-z_]\w*)', flat)
    return m.group(1) if m else ''


def in_init_list(header):
    """Whether `header` (a function's, up to a `{`) is inside a constructor's
    member-initializer list: a lone `:` after the parameter list."""
    flat = top_level(header)
    paren = flat.find('(')
    if paren < 0:
        return False
    rest = flat[paren:].replace('::', '  ')
    return ':' in rest


def find_functions(code):
    """Every function body at namespace or class scope in the stripped
    source: a list of (name, first line, last line), 1-based."""
    functions = []
    line_of = LineIndex(code)

    def scan(start, end, prefix):
        header_start = start
        i = start
        while i < end:
            c = code[i]
            if c in ';}':
                header_start = i + 1
            elif c == '(':
                i = matching(code, i, '(', ')')
            elif c == '{':
                header = code[header_start:i]
                kind = classify(header)
                close = matching(code, i, '{', '}')
                if kind == 'function' and in_init_list(header) and \
                        re.search(r'[\w>]\s*$', header):
                    # A member's brace initializer: `: member_{x}`.
                    i = close + 1
                    continue
                if kind == 'function':
                    first = header_start + len(header) - len(header.lstrip())
                    name = function_name(header)
                    functions.append((prefix + name, line_of(first),
                                      line_of(close)))
                elif kind == 'class':
                    name = class_name(header)
                    scan(i + 1, close, prefix + name + '::' if name else prefix)
                i = close
                header_start = close + 1
            i += 1

    scan(0, len(code), '')
    return functions


class LineIndex:
    def __init__(self, text):
        self.starts = [0] + [m.end() for m in re.finditer('\n', text)]

    def __call__(self, offset):
        lo, hi = 0, len(self.starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid
        return lo + 1


def read_allow_list(path):
    """{key: reason} from the allow-list; a missing reason is an error."""
    allowed, errors = {}, []
    if not path:
        return allowed, errors
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            key, _, reason = line.partition(' ')
            if not reason.strip():
                errors.append(f'{path}:{number}: {key} has no reason')
            allowed[key] = reason.strip()
    return allowed, errors


def source_files(root, dirs):
    for d in dirs:
        top = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(top):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(
                x for x in dirnames
                if os.path.join(rel_dir, x).replace(os.sep, '/')
                not in EXCLUDED_DIRS)
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.normpath(os.path.join(rel_dir, name)).replace(
                        os.sep, '/')


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--root', required=True)
    parser.add_argument('--allow', default='')
    parser.add_argument('--dirs', default=','.join(DEFAULT_DIRS))
    parser.add_argument('--max-function-lines', type=int, default=150)
    parser.add_argument('--max-file-lines', type=int, default=600)
    parser.add_argument('--list', action='store_true',
                        help='print every function and its length')
    args = parser.parse_args(argv)

    allowed, errors = read_allow_list(args.allow)
    used = set()
    over = []
    for path in source_files(args.root, [d for d in args.dirs.split(',') if d]):
        with open(os.path.join(args.root, path), encoding='utf-8',
                  errors='replace') as f:
            text = f.read()
        lines = text.count('\n') + (0 if text.endswith('\n') or not text else 1)
        if lines > args.max_file_lines:
            over.append((path, f'{path}: file is {lines} lines '
                               f'(limit {args.max_file_lines})'))
        for name, first, last in find_functions(strip_source(text)):
            length = last - first + 1
            if args.list:
                print(f'{length:5d} {path}:{first} {name}')
            if length > args.max_function_lines:
                over.append((f'{path}:{name}',
                             f'{path}:{first}: function {name} is {length} '
                             f'lines (limit {args.max_function_lines})'))
    for key, message in over:
        if key in allowed:
            used.add(key)
        else:
            errors.append(message)
    for key in sorted(set(allowed) - used):
        errors.append(f'{args.allow}: {key} is allowed but is not over the '
                      'limit (remove the entry)')
    for e in errors:
        print(f'error: {e}', file=sys.stderr)
    if errors:
        print(f'{len(errors)} size error(s): split the function or file, or '
              f'state a reason in {args.allow or "an allow-list"} '
              '(docs/testing.md)', file=sys.stderr)
        return 1
    print(f'sizes: every function within {args.max_function_lines} lines and '
          f'every file within {args.max_file_lines} lines, '
          f'{len(used)} stated exception(s)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
