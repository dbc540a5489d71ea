#!/usr/bin/env python3
"""The folder-cycle check's own tests (ctest folder_cycles_self_test): a
three-folder cycle fails and names the include lines that close it, floors
that only include downward pass, and a stated exception passes while a
stale one fails."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, 'check_folder_cycles.py')
FIXTURES = os.path.join(HERE, 'fixtures')


def check(root, *args):
    run = subprocess.run([sys.executable, CHECK, '--root', os.path.join(FIXTURES, root), *args],
                         capture_output=True, text=True, check=False)
    return run.returncode, run.stdout, run.stderr


def allow_list(tmp, text):
    path = os.path.join(tmp, 'allowed.txt')
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
    return path


class FolderCycleTest(unittest.TestCase):
    def test_a_cycle_fails_with_its_includes(self):
        rc, _, err = check('cycle')
        self.assertEqual(rc, 1)
        self.assertIn('the folders a and b and c include each other', err)
        self.assertIn('a -> b: a/A.h:1: #include "b/B.h"', err)
        self.assertIn('c -> a: c/C.h:1: #include "a/A.h"', err)

    def test_floors_that_include_downward_pass(self):
        rc, out, err = check('floors')
        self.assertEqual(rc, 0, err)
        self.assertIn('no cycle', out)

    def test_a_stated_reason_allows_a_cycle(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, out, err = check('cycle', '--allow', allow_list(tmp, 'c,a,b its reason\n'))
            self.assertEqual(rc, 0, err)
            self.assertIn('1 stated exception(s)', out)

    def test_a_stale_or_unreasoned_exception_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, _, err = check('floors', '--allow', allow_list(tmp, 'base,mid was a cycle\n'))
            self.assertEqual(rc, 1)
            self.assertIn('base,mid is allowed but is no cycle', err)
            rc, _, err = check('cycle', '--allow', allow_list(tmp, 'a,b,c\n'))
            self.assertEqual(rc, 1)
            self.assertIn('a,b,c has no reason', err)


if __name__ == '__main__':
    unittest.main()
