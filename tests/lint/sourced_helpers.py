#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Every shell script of the tree that sources a helper of the tree
(`source X` or `. X` at the start of a line) stops when that fails:
the line ends with `|| exit 1`.

Why: a test script whose harness did not load runs on with "command not
found" for every `pass` and `not_ok`, ends with the status of its last
command, and so can pass without having tested anything.

  sourced_helpers.py SOURCE_ROOT

Exit status 1 with the offending lines, 77 (skip) outside a git checkout.
"""

import re
import sys
from pathlib import Path

import tree

SOURCE = re.compile(r"^\s*(source|\.)\s+\S")
GUARDED = re.compile(r"\|\|\s*exit\s+1\s*(#.*)?$")


def unguarded(lines):
    """(line number, text) of each source line without the guard."""
    return [(n, l.rstrip()) for n, l in enumerate(lines, 1) if SOURCE.match(l) and not GUARDED.search(l.rstrip())]


def main():
    # The check itself: one bad and two good lines.
    sample = ['. "$(dirname "$0")/lib.sh"\n', 'source x.sh || exit 1\n', 'source y.sh || exit 1  # why\n']
    if [n for n, _ in unguarded(sample)] != [1]:
        print("FAIL lint_sourced_helpers: the check does not tell a guarded line from an unguarded one")
        return 1
    root = Path(sys.argv[1]).resolve()
    try:
        scripts = [p for p in tree.files(root) if tree.is_shell_script(root, p)]
    except tree.NotACheckout as e:
        print(f"SKIP lint_sourced_helpers: {e}")
        return 77
    bad = []
    for p in scripts:
        with open(root / p, errors="replace") as f:
            bad += [f"{p}:{n}: {text}" for n, text in unguarded(f)]
    if bad:
        print("\n".join(bad))
        print(f"FAIL lint_sourced_helpers: {len(bad)} source line(s) without '|| exit 1'")
        return 1
    print(f"ok - sourced helpers: every source line of {len(scripts)} shell scripts stops on failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
