#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Two processes that exchange a SEND each way and exit at once, 200 times,
# across the namespace fabric (4 ECMP paths, 1500-byte links): the test of
# tests/verbs/exit_together_test.cpp with side 0 on host h0 and side 1 on
# h1. Each side sees every completion only if the ACK it owes leaves before
# it exits, whatever the fabric does with it.
#
# Environment (from tests/verbs/meson.build): METAROCE_FABRIC,
# EXIT_TOGETHER_TEST (the verbs_exit_together_test executable).
source "$(dirname "$0")/lib.sh" || exit 1
TEST=${EXIT_TOGETHER_TEST:?EXIT_TOGETHER_TEST not set}

require_netns noblaster
use_prefix mrt-exit
fab up >/dev/null  # the defaults: 2 hosts, 4 paths

EXIT_TOGETHER_HOSTS="${PREFIX}-h0=$(fab addr h0) ${PREFIX}-h1=$(fab addr h1)" \
    METAROCE_DAEMON=0 timeout 280 "$TEST" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; fail "exit_together across the fabric failed"; }
grep -q '^\[  PASSED  \] 1 test' "$WORK/out" || { cat "$WORK/out" >&2; fail "the test did not run"; }
# Both ways across the fabric, not over some other route: each repetition
# sends 4 KiB each way (3 packets at a 1500-byte MTU) and ACKs back.
for dir in left_to_right right_to_left; do
    n=$(fab status --json | json - "sum(p[\"$dir\"][\"offered_packets\"] for p in d[\"paths\"])")
    (( n >= 600 )) || fail "only $n packets crossed the fabric $dir for 200 repetitions"
done
pass "exit together across the fabric: every completion on both sides, 200 repetitions"
