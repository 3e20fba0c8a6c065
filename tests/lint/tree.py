# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The files of the tree that the lint checks look at: git's tracked files
and the new ones it does not ignore, as they are in the working tree."""

import re
import subprocess
from pathlib import Path

SHEBANG = re.compile(r"#!\s*/(usr/)?bin/(env\s+)?(ba|da)?sh\b")
C_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".hpp")


class NotACheckout(Exception):
    pass


def files(root):
    """Paths relative to root."""
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise NotACheckout(f"{root} is not a git checkout (the file list comes from git ls-files)")
    return sorted({Path(p) for p in r.stdout.split("\0") if p and (root / p).is_file()})


def is_shell_script(root, path):
    """A .sh file, or one whose first line runs sh, bash or dash."""
    if path.suffix == ".sh":
        return True
    with open(root / path, "rb") as f:
        first = f.readline(200).decode("utf-8", "replace")
    return bool(SHEBANG.match(first))


def is_c_source(path):
    return path.suffix in C_SUFFIXES
