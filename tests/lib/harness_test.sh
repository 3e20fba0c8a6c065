#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The shell test harness does what tests rely on: the exit status of fail,
# skip and not_ok; at exit the background jobs are stopped, at_exit hooks
# run and $WORK is removed; wait_until gives up after its bound and
# returns as soon as its condition holds; the watchdog records and kills a
# hung process tree, and stops when told; the listener waits see a TCP
# listener and a bound UDP socket, and give up when the process exits.
source "$(dirname "$0")/harness.sh" || exit 1
set -euo pipefail
lib="$(cd "$(dirname "$0")" && pwd)/harness.sh"

# run_case SCRIPT: runs SCRIPT (after sourcing the harness) in a child bash;
# prints its exit status and output.
run_case() { bash -c "source '$lib'; $1" >"$WORK/case.out" 2>&1 && echo 0 || echo $?; }

[[ $(run_case 'pass fine') == 0 ]] || fail "pass alone exits 0"
[[ $(run_case 'fail bad; echo after') == 1 ]] && ! grep -q after "$WORK/case.out" || fail "fail exits 1 at once"
[[ $(run_case 'skip why') == 77 ]] || fail "skip exits 77"
[[ $(run_case 'not_ok one; pass two') == 1 ]] && grep -q '^# 1 passed, 1 failed$' "$WORK/case.out" ||
    fail "not_ok fails the test at exit ($(cat "$WORK/case.out"))"
[[ $(run_case 'expect_fail "refused" "No such" ls /nonexistent') == 0 ]] || fail "expect_fail with the pattern passes"
[[ $(run_case 'expect "true" false') == 1 ]] || fail "a failed expect fails the test"
pass "exit status: pass 0, fail 1 at once, skip 77, a not_ok or failed expect* 1 at exit"

[[ $(run_case "sleep 300 & echo \$! >'$WORK/job'; at_exit 'echo hook ran'; echo \$WORK >'$WORK/work'") == 0 ]] ||
    fail "the clean-up case failed: $(cat "$WORK/case.out")"
grep -q 'hook ran' "$WORK/case.out" || fail "at_exit hook did not run"
process_gone "$(cat "$WORK/job")" || fail "a background job outlived its test"
[[ ! -e $(cat "$WORK/work") ]] || fail "WORK was left behind"
pass "at exit: background jobs stopped, hooks run, WORK removed"

start=$(harness_now_us)
! wait_until 0.3 false || fail "wait_until false succeeded"
took=$(($(harness_now_us) - start))
((took >= 300000)) || fail "wait_until gave up after $took us, before its 0.3 s"
touch "$WORK/flag"
wait_until 5 test -e "$WORK/flag" || fail "wait_until missed a condition that holds"
pass "wait_until: bounded, and returns when the condition holds"

# A hung process: its child blocks opening a FIFO that nobody opens.
mkfifo "$WORK/never"
bash -c "cat '$WORK/never'; true" &
hung=$!
watch=$(watchdog 1 "$WORK/stacks" "$hung")
status=0
wait "$hung" || status=$?
stop_watchdog "$watch"
((status == 137)) || fail "the watchdog did not kill a hung process (status $status)"
grep -q "^pid $hung: bash -c cat " "$WORK/stacks" && grep -q "^pid [0-9]*: cat $WORK/never" "$WORK/stacks" ||
    fail "the watchdog did not record the hung process and its child: $(cat "$WORK/stacks")"
child=$(sed -n 's/^pid \([0-9]*\): cat .*/\1/p' "$WORK/stacks")
wait_until 5 process_gone "$child" || fail "the hung process's child $child outlived the watchdog"
true &
watch=$(watchdog 300 "$WORK/stacks2" $!)
wait_until 5 pgrep -P "$watch" >/dev/null || fail "the watchdog's timer did not start"
timer=$(pgrep -P "$watch")
stop_watchdog "$watch"
wait_until 5 process_gone "$watch" && wait_until 5 process_gone "$timer" || fail "stop_watchdog left its watcher or timer"
pass "watchdog: a process still running at its limit is recorded with its children and killed; stop_watchdog ends it"

command -v ss >/dev/null || skip "ss (iproute2) not installed"
python3 -c 'import socket, sys, time
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
print(t.getsockname()[1], u.getsockname()[1], flush=True)
time.sleep(60)' >"$WORK/ports" &
holder=$!
wait_until 10 test -s "$WORK/ports" || fail "the listener did not start"
read -r tcp udp <"$WORK/ports"
wait_tcp_listener -p "$holder" -t 5 "$tcp" || fail "wait_tcp_listener missed TCP port $tcp"
wait_udp_listener -p "$holder" -t 5 "$udp" || fail "wait_udp_listener missed UDP port $udp"
! listening tcp "$udp" || note "(TCP port $udp is in use by someone else too)"
stop_process "$holder"
# Its bound is longer than the test's own timeout: only the exit can end it.
sleep 0.1 &
! wait_tcp_listener -p $! -t 3600 "$tcp" || fail "wait_tcp_listener found a listener that is gone"
pass "listener waits: TCP and UDP seen; a wait ends when the process exits"
