"""Lines of Python files that would run what the GPU machine must not run:
a string literal that starts with a package installer or an MPI launcher
(["pip", "install", ...], "apt-get install ...", "mpirun -n 2 ..."), or an
import of an installer or a downloader. Messages that name mpirun to the
user ("launch with mpirun -n 2") are words, not calls. Prints
"PATH:LINE: text" per hit; test/gpu/check-bundle.sh fails on any.

    python3 bundle-python-calls.py FILE.py...
"""

import io
import re
import sys
import tokenize

COMMAND = re.compile(r"^(apt|apt-get|aptitude|pip3?|mpirun|mpiexec)(\s|$|[\"'])")
PREFIX = re.compile(r"^[rbuf]*(\"\"\"|'''|\"|')", re.I)
FETCH = re.compile(r"^\s*(import|from)\s+(pip|urllib\.request|requests|http\.client)\b")


def hits(path):
    text = open(path, encoding="utf-8").read()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and COMMAND.match(PREFIX.sub("", tok.string)):
            yield tok.start[0], tok.string[:60]
    for n, line in enumerate(text.splitlines(), 1):
        if FETCH.match(line):
            yield n, line.strip()


if __name__ == "__main__":
    for path in sys.argv[1:]:
        for line, text in hits(path):
            print(f"{path}:{line}: {text}")
