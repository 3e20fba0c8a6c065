# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# The shell test harness, sourced by every shell test (bash): what a test
# reports and what its exit status is, the clean-up at exit, background
# processes, and (from wait.sh and json.sh beside it) bounded waits on
# conditions and JSON queries.
#
#   pass MSG                 "ok - MSG"
#   not_ok MSG               "not ok - MSG": the test carries on, and fails at exit
#   fail MSG                 "FAIL <test>: MSG" on stderr; exits 1 now
#   fail_with_logs MSG       the tail of every $WORK/*.log on stderr, then fail MSG
#   skip MSG                 "SKIP <test>: MSG"; exits 77 now (a skip for meson)
#   note MSG                 "# MSG"
#   expect DESC CMD...       pass DESC if CMD succeeds, else not_ok with CMD's output
#   expect_not DESC CMD...   pass DESC if CMD fails
#   expect_fail DESC PATTERN CMD...
#                            pass if CMD fails and its output matches PATTERN (grep -E)
#   watchdog SECONDS FILE PID...
#                            in the background: after SECONDS, the thread stacks
#                            (gdb) of each PID still running and of its
#                            descendants go to FILE, and they are killed (wait
#                            reports 137). Prints the watcher, for stop_watchdog
#                            once the PIDs are done: a hang shows where it stopped.
#
# The exit status is fail's 1 or skip's 77, else 1 when anything was not_ok,
# else the script's own. At exit, whatever the reason: every background job
# still running gets SIGTERM (SIGKILL 5 s later), the commands given to
# `at_exit` run (the last given first), and $WORK, a fresh directory, is
# removed.
#
# TEST_NAME (default: the script's name without .sh) names the test in FAIL
# and SKIP lines.

TEST_NAME=${TEST_NAME:-$(basename "$0" .sh)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/metaroce-test.XXXXXX")
HARNESS_PASSED=0
HARNESS_FAILED=0
HARNESS_HOOKS=()

source "$(dirname "${BASH_SOURCE[0]}")/wait.sh" || exit 1
source "$(dirname "${BASH_SOURCE[0]}")/json.sh" || exit 1

pass() { echo "ok - $*"; HARNESS_PASSED=$((HARNESS_PASSED + 1)); }
not_ok() { echo "not ok - $*"; HARNESS_FAILED=$((HARNESS_FAILED + 1)); }
fail() { echo "FAIL $TEST_NAME: $*" >&2; exit 1; }
skip() { echo "SKIP $TEST_NAME: $*"; exit 77; }
note() { echo "# $*"; }
fail_with_logs() {
  local f
  for f in "$WORK"/*.log; do
    [[ -f "$f" ]] || continue
    echo "---- $f" >&2
    tail -n 40 "$f" >&2
  done
  fail "$*"
}

# The last lines of what the last expect* ran.
show_output() { sed 's/^/#   /' "$WORK/expect.out" | tail -n "${1:-30}"; }
expect() {
    local desc=$1 rc=0; shift
    "$@" >"$WORK/expect.out" 2>&1 || rc=$?
    if ((rc == 0)); then pass "$desc"; else not_ok "$desc (status $rc)"; show_output; fi
}
expect_not() {
    local desc=$1; shift
    if "$@" >"$WORK/expect.out" 2>&1; then not_ok "$desc"; show_output; else pass "$desc"; fi
}
expect_fail() {
    local desc=$1 pattern=$2; shift 2
    if "$@" >"$WORK/expect.out" 2>&1; then
        not_ok "$desc (succeeded)"; show_output
    elif grep -Eq "$pattern" "$WORK/expect.out"; then
        pass "$desc: $(head -n1 "$WORK/expect.out")"
    else
        not_ok "$desc (no '$pattern' in the error)"; show_output
    fi
}

# at_exit CMD...: runs CMD (eval'd) at exit. Use it rather than `trap ... EXIT`,
# which would replace the harness's own.
at_exit() { HARNESS_HOOKS+=("$*"); }

harness_process_tree() {
    local child
    echo "$1"
    for child in $(pgrep -P "$1"); do harness_process_tree "$child"; done
}
watchdog() {
    local secs=$1 file=$2
    shift 2
    (
        trap 'kill "$timer" 2>/dev/null; exit 0' TERM
        sleep "$secs" &
        timer=$!
        wait "$timer"
        for pid in "$@"; do
            kill -0 "$pid" 2>/dev/null || continue
            tree=$(harness_process_tree "$pid")
            for p in $tree; do
                {
                    echo "pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
                    if command -v gdb >/dev/null; then
                        gdb -p "$p" -batch -nx -ex "thread apply all bt 25" 2>&1 | grep -E '^(#|Thread)'
                    fi
                } >>"$file"
            done
            # shellcheck disable=SC2086
            kill -9 $tree 2>/dev/null
        done
    ) >/dev/null 2>&1 &
    echo $!
}
stop_watchdog() { kill "$1" 2>/dev/null || true; }

harness_exit() {
    local rc=$? i pid jobs
    set +e
    jobs=$(jobs -p)
    for pid in $jobs; do kill -TERM "$pid" 2>/dev/null; done
    for pid in $jobs; do
        wait_until 5 process_gone "$pid" || kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    for ((i = ${#HARNESS_HOOKS[@]} - 1; i >= 0; i--)); do eval "${HARNESS_HOOKS[i]}" || true; done
    rm -rf "$WORK"
    ((HARNESS_PASSED + HARNESS_FAILED == 0)) || echo "# $HARNESS_PASSED passed, $HARNESS_FAILED failed"
    if ((rc == 0 && HARNESS_FAILED > 0)); then rc=1; fi
    exit "$rc"
}
trap harness_exit EXIT
trap 'exit 130' INT TERM
