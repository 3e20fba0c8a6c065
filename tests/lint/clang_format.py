#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""clang-format --dry-run --Werror against the tree's .clang-format, over
every C and C++ file of the tree except those that tests/lint/clang-format-skip
names (a path, or a folder ending in /): the files written before the
.clang-format, until the tree is reformatted once. New files are checked.

  clang_format.py SOURCE_ROOT

Exit status 1 listing the files that are not formatted, 77 (skip) without
clang-format or outside a git checkout.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import tree

SKIP_LIST = Path(__file__).with_name("clang-format-skip")


def skipped(entries, path):
    text = path.as_posix()
    return any(text.startswith(e) if e.endswith("/") else text == e for e in entries)


def main():
    root = Path(sys.argv[1]).resolve()
    clang_format = shutil.which("clang-format")
    if not clang_format:
        print("SKIP lint_clang_format: clang-format not installed (scripts/install-deps)")
        return 77
    entries = [line.strip() for line in SKIP_LIST.read_text().splitlines()
               if line.strip() and not line.lstrip().startswith("#")]
    try:
        sources = [p for p in tree.files(root) if tree.is_c_source(p)]
    except tree.NotACheckout as e:
        print(f"SKIP lint_clang_format: {e}")
        return 77
    checked = [p for p in sources if not skipped(entries, p)]
    bad = []
    for p in checked:
        r = subprocess.run([clang_format, "--dry-run", "--Werror", str(p)], cwd=root, capture_output=True, text=True)
        if r.returncode != 0:
            bad.append(p)
            print("\n".join(r.stderr.splitlines()[:6]))
    if bad:
        print(f"FAIL lint_clang_format: not formatted (clang-format -i FILE, or list it in {SKIP_LIST.name}):")
        for p in bad:
            print(f"  {p}")
        return 1
    print(f"ok - clang-format: {len(checked)} files formatted; {len(sources) - len(checked)} skipped "
          f"({SKIP_LIST.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
