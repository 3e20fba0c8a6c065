#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""shellcheck over every shell script of the tree (tests/lint/tree.py says
which files those are), with the settings of the tree's .shellcheckrc.

  shellcheck.py SOURCE_ROOT

Exit status 1 with shellcheck's report when it finds anything, 77 (skip)
without shellcheck or outside a git checkout.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import tree


def main():
    root = Path(sys.argv[1]).resolve()
    if not shutil.which("shellcheck"):
        print("SKIP lint_shellcheck: shellcheck not installed (scripts/install-deps)")
        return 77
    try:
        scripts = [p for p in tree.files(root) if tree.is_shell_script(root, p)]
    except tree.NotACheckout as e:
        print(f"SKIP lint_shellcheck: {e}")
        return 77
    r = subprocess.run(["shellcheck", *map(str, scripts)], cwd=root)
    if r.returncode != 0:
        print(f"FAIL lint_shellcheck: findings above (in {len(scripts)} scripts)")
        return 1
    print(f"ok - shellcheck: {len(scripts)} shell scripts clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
