#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The engine stays sans-I/O (provider/transport/endpoint.h): no file in
provider/transport/ includes, directly or through the project's own headers,
anything for threads, clocks, sockets or system calls, nor anything from
provider/io/ or provider/verbs/. Time, packets and operations come in as
arguments; the runtime (provider/io/) owns the clock, the sockets and the
threads.

  engine_includes.py SOURCE_ROOT [FILE...]

checks provider/transport/ (or just FILEs, for a test of this check) and
prints one line per forbidden include; exit status 1 if there is any.
"""

import re
import sys
from pathlib import Path

ENGINE = Path("provider/transport")
PROJECT_INCLUDE = Path("include")
FORBIDDEN_DIRS = (Path("provider/io"), Path("provider/verbs"))

# <header> -> why it is not the engine's.
THREADS = {"thread", "mutex", "shared_mutex", "condition_variable", "future", "semaphore", "latch", "barrier",
           "stop_token", "atomic", "pthread.h", "threads.h", "stdatomic.h"}
CLOCKS = {"chrono", "ctime", "time.h", "sys/time.h", "sys/timerfd.h"}
SOCKETS = {"sys/socket.h", "netdb.h", "ifaddrs.h", "liburing.h", "poll.h", "sys/epoll.h", "sys/un.h"}
SYSCALLS = {"unistd.h", "fcntl.h", "signal.h", "csignal", "dlfcn.h", "sched.h", "sys/mman.h", "sys/ioctl.h",
            "sys/syscall.h", "sys/types.h", "sys/stat.h", "sys/uio.h", "sys/eventfd.h", "iostream", "fstream",
            "filesystem", "cstdio", "stdio.h"}
FORBIDDEN_PREFIXES = {"sys/": "system calls", "netinet/": "sockets", "arpa/": "sockets", "net/": "sockets",
                      "linux/": "system calls", "infiniband/": "verbs"}

# Types only: the headers shared with the kernel (abi.h, qp_rules.h) take
# their fixed-width types (__u32) from it.
ALLOWED = {"linux/types.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def why_forbidden(header):
    if header in ALLOWED:
        return None
    for names, why in ((THREADS, "threads"), (CLOCKS, "clocks"), (SOCKETS, "sockets"), (SYSCALLS, "system calls")):
        if header in names:
            return why
    for prefix, why in FORBIDDEN_PREFIXES.items():
        if header.startswith(prefix):
            return why
    return None


def resolve(root, including, header):
    """A quoted include as the compiler finds it: beside the including file, else in include/."""
    for base in (including.parent, root / PROJECT_INCLUDE):
        candidate = (base / header).resolve()
        if candidate.is_file():
            return candidate
    return None


def check(root, files):
    problems, seen = [], set()
    pending = [f.resolve() for f in files]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        rel = path.relative_to(root)
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            kind, header = m.groups()
            where = f"{rel}:{lineno}: #include {kind}{header}{'>' if kind == '<' else chr(34)}"
            why = why_forbidden(header)
            target = resolve(root, path, header) if kind == '"' else None
            if why:
                problems.append(f"{where}: {why}, not the engine's (the runtime in provider/io/ owns them)")
            elif kind == '"' and target is None:
                problems.append(f"{where}: not found beside the file or in include/")
            elif target is not None:
                target_rel = target.relative_to(root)
                if any(target_rel.is_relative_to(d) for d in FORBIDDEN_DIRS):
                    problems.append(f"{where}: {target_rel.parts[1]}/ is not the engine's")
                elif target_rel.is_relative_to(ENGINE) or target_rel.is_relative_to(PROJECT_INCLUDE):
                    pending.append(target)  # its own includes count too
                else:
                    problems.append(f"{where}: outside provider/transport/ and include/")
    return problems, len(seen)


def main():
    root = Path(sys.argv[1]).resolve()
    files = [Path(f) for f in sys.argv[2:]] or sorted(
        p for p in (root / ENGINE).rglob("*") if p.suffix in (".h", ".hpp", ".c", ".cc", ".cpp"))
    problems, count = check(root, [f if f.is_absolute() else root / f for f in files])
    for p in problems:
        print(p)
    if problems:
        print(f"FAIL lint_engine_includes: {len(problems)} forbidden include(s) in the sans-I/O engine")
        return 1
    print(f"ok - {count} files of the engine and the headers it includes: no threads, clocks, sockets, "
          "system calls, io/ or verbs/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
