#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""engine_includes.py catches what it is for: in a scratch tree, an engine
file that includes <thread>, <chrono>, <sys/socket.h> or a header of io/ or
verbs/ (directly or through an engine header) fails the check, and the same
tree without them passes."""

import subprocess
import sys
import tempfile
from pathlib import Path

CHECK = Path(__file__).with_name("engine_includes.py")


def run(root):
    r = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout


def main():
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("provider/transport", "provider/io", "provider/verbs", "include/metaroce"):
            (root / d).mkdir(parents=True)
        (root / "include/metaroce/wire.h").write_text("#include <cstdint>\n")
        (root / "provider/io/runtime.h").write_text("#include <thread>\n")
        (root / "provider/verbs/provider.h").write_text("\n")
        (root / "provider/transport/clean.h").write_text('#include <vector>\n#include "metaroce/wire.h"\n')
        engine = root / "provider/transport/endpoint.cpp"
        engine.write_text('#include "clean.h"\n#include <algorithm>\n')
        rc, out = run(root)
        if rc != 0:
            print(f"FAIL: a clean engine was refused:\n{out}")
            return 1
        cases = {
            "#include <thread>": "threads",
            "#include <chrono>": "clocks",
            "#include <sys/socket.h>": "sockets",
            "#include <unistd.h>": "system calls",
            '#include "../io/runtime.h"': "io/ is not the engine's",
            '#include "../verbs/provider.h"': "verbs/ is not the engine's",
        }
        for line, why in cases.items():
            for where in (engine, root / "provider/transport/clean.h"):  # direct, and through an engine header
                saved = where.read_text()
                where.write_text(saved + line + "\n")
                rc, out = run(root)
                where.write_text(saved)
                if rc != 1 or why not in out:
                    print(f"FAIL: {line} in {where.name} not caught (exit {rc}):\n{out}")
                    return 1
                print(f"ok - {line} in {where.name}: {out.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
