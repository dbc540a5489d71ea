#!/usr/bin/env python3
"""The size check's own tests (ctest size_limits_self_test): it fails on a
long function and a long file, measures what brace matching over comments,
literals and initializers should, honours a stated reason and refuses a
stale one. The negative controls: without them a checker that found nothing
would pass the real tree too."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, 'check_sizes.py')
FIXTURES = os.path.join(HERE, 'fixtures')


def check(root, *args):
    """(exit status, stdout, stderr) of the check over `root`."""
    run = subprocess.run([sys.executable, CHECK, '--root', root, '--dirs', '.', *args],
                         capture_output=True, text=True, check=False)
    return run.returncode, run.stdout, run.stderr


def write(path, text):
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def function_of(lines):
    """A C++ function whose signature and closing brace are `lines` lines
    apart, both included."""
    body = ''.join(f'  x += {i};\n' for i in range(lines - 3))
    return 'int f(int x) {\n' + body + '  return x;\n}\n'


class FixtureTest(unittest.TestCase):
    def test_lists_each_function_with_its_length(self):
        rc, out, _ = check(FIXTURES, '--list', '--max-function-lines', '100')
        self.assertEqual(rc, 0)
        listed = [line.split() for line in out.splitlines() if line.split()[0].isdigit()]
        # Braces in comments, strings, a raw string, a character literal and
        # macros are not code; an enum and an array initializer are not
        # functions; a member's brace initializer does not open the body; the
        # lambda is part of tooLong.
        self.assertEqual(listed, [['8', 'tricky.cpp:19', 'shortFunction'],
                                  ['11', 'tricky.cpp:29', 'tooLong'],
                                  ['4', 'tricky.cpp:42', 'Widget::Widget'],
                                  ['1', 'tricky.cpp:46', 'Widget::count']])

    def test_fails_on_a_function_over_the_limit(self):
        rc, _, err = check(FIXTURES, '--max-function-lines', '10')
        self.assertEqual(rc, 1)
        self.assertIn('tricky.cpp:29: function tooLong is 11 lines (limit 10)', err)
        self.assertNotIn('shortFunction', err)

    def test_a_function_at_the_limit_passes(self):
        rc, _, err = check(FIXTURES, '--max-function-lines', '11')
        self.assertEqual(rc, 0, err)

    def test_fails_on_a_file_over_the_limit(self):
        rc, _, err = check(FIXTURES, '--max-file-lines', '40')
        self.assertEqual(rc, 1)
        self.assertRegex(err, r'tricky\.cpp: file is \d+ lines \(limit 40\)')

    def test_a_stated_reason_allows_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            allow = os.path.join(tmp, 'allowed.txt')
            write(allow, '# comment\ntricky.cpp:tooLong its reason\n'
                         'tricky.cpp a reason for the file\n')
            rc, out, err = check(FIXTURES, '--allow', allow, '--max-function-lines', '10',
                                 '--max-file-lines', '40')
            self.assertEqual(rc, 0, err)
            self.assertIn('2 stated exception(s)', out)

    def test_an_exception_needs_a_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            allow = os.path.join(tmp, 'allowed.txt')
            write(allow, 'tricky.cpp:tooLong\n')
            rc, _, err = check(FIXTURES, '--allow', allow, '--max-function-lines', '10')
            self.assertEqual(rc, 1)
            self.assertIn('tricky.cpp:tooLong has no reason', err)

    def test_a_stale_exception_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            allow = os.path.join(tmp, 'allowed.txt')
            write(allow, 'tricky.cpp:shortFunction was long once\n')
            rc, _, err = check(FIXTURES, '--allow', allow)
            self.assertEqual(rc, 1)
            self.assertIn('tricky.cpp:shortFunction is allowed but is not over the limit', err)


class DefaultLimitTest(unittest.TestCase):
    """The limits the tree is held to: 150 lines a function, 600 a file."""

    def test_151_lines_fail_and_150_pass(self):
        with tempfile.TemporaryDirectory() as tmp:
            write(os.path.join(tmp, 'long.cpp'), function_of(151))
            rc, _, err = check(tmp)
            self.assertEqual(rc, 1)
            self.assertIn('long.cpp:1: function f is 151 lines (limit 150)', err)
            write(os.path.join(tmp, 'long.cpp'), function_of(150))
            rc, _, err = check(tmp)
            self.assertEqual(rc, 0, err)

    def test_601_lines_fail_and_600_pass(self):
        with tempfile.TemporaryDirectory() as tmp:
            write(os.path.join(tmp, 'long.h'), '// x\n' * 601)
            rc, _, err = check(tmp)
            self.assertEqual(rc, 1)
            self.assertIn('long.h: file is 601 lines (limit 600)', err)
            write(os.path.join(tmp, 'long.h'), '// x\n' * 600)
            rc, _, err = check(tmp)
            self.assertEqual(rc, 0, err)


if __name__ == '__main__':
    unittest.main()
