#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""clang-format --dry-run --Werror against the tree's .clang-format, over
the C and C++ files that tests/lint/clang-format-checked names (a path, a
folder ending in /, or "/" for the whole tree), except the files written in
the kernel's style: kmod/, the headers it shares with user space, and the
mock kernel its unit tests build against.

  clang_format.py SOURCE_ROOT

Exit status 1 listing the files that are not formatted, 77 (skip) without
clang-format or outside a git checkout.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import tree

CHECKED_LIST = Path(__file__).with_name("clang-format-checked")
# Built by kbuild, or shared with code that is: checked by the kernel's
# scripts/checkpatch.pl conventions, not by .clang-format.
KERNEL_STYLE = ("kmod/", "tests/kmod/", "include/metaroce/abi.h", "include/metaroce/qp_rules.h")


def checked(entries, path):
    text = path.as_posix()
    if text.startswith(KERNEL_STYLE):
        return False
    return any(e == "/" or (text.startswith(e) if e.endswith("/") else text == e) for e in entries)


def main():
    root = Path(sys.argv[1]).resolve()
    clang_format = shutil.which("clang-format")
    if not clang_format:
        print("SKIP lint_clang_format: clang-format not installed (scripts/install-deps)")
        return 77
    entries = [line.strip() for line in CHECKED_LIST.read_text().splitlines()
               if line.strip() and not line.lstrip().startswith("#")]
    try:
        sources = [p for p in tree.files(root) if tree.is_c_source(p)]
    except tree.NotACheckout as e:
        print(f"SKIP lint_clang_format: {e}")
        return 77
    to_check = [p for p in sources if checked(entries, p)]
    bad = []
    for p in to_check:
        r = subprocess.run([clang_format, "--dry-run", "--Werror", str(p)], cwd=root, capture_output=True, text=True)
        if r.returncode != 0:
            bad.append(p)
            print("\n".join(r.stderr.splitlines()[:6]))
    if bad:
        print("FAIL lint_clang_format: not formatted (clang-format -i FILE):")
        for p in bad:
            print(f"  {p}")
        return 1
    print(f"ok - clang-format: {len(to_check)} files formatted ({CHECKED_LIST.name}); "
          f"{len(sources) - len(to_check)} in the kernel's style not checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
