#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Gloo (Debian's libgloo, its ibverbs transport) over MetaRoCE: two ranks of
# tests/verbs/gloo_allreduce, two processes through tools/metaroce-run on
# loopback, meeting through gloo's FileStore in a fresh directory. Every rank
# checks every element of every ring allreduce, barrier and broadcast, and
# exits 0 only if all were right.
#
#   gloo_test.sh METAROCE_RUN GLOO_ALLREDUCE CASE
#
# CASE: repeat  GLOO_RUNS (default 20) jobs at metaroce-run's defaults: each
#               must pass (issue 12: 2 runs in 3 ended in IBV_WC_RETRY_EXC_ERR,
#               a lost send completion or a hang)
#       loss    GLOO_LOSS_RUNS (default 2) jobs at --loss 0.01
# GLOO_ALLREDUCE is empty when meson found no libgloo: the test skips.
# Every program runs under `timeout -k 5`; the ranks wait for each other
# through gloo's store (bounded by its own timeout), not by sleeping here.
TEST_NAME="gloo_${3:-}"
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -uo pipefail

run=${1:?metaroce-run path}
prog=${2-}
case_name=${3:?case}
LIMIT=${GLOO_TIMEOUT:-180}
RANKS=2
JOB_SECONDS=0
work=$WORK

[[ -n $prog ]] || skip "libgloo-dev not installed when the build was configured (gloo_allreduce not built)"
[[ -x $prog ]] || fail "$prog is not an executable"

# job NAME "RUN_OPTIONS": the ranks at once; 0 when every rank exited 0.
# Leaves NAME-rankR.log; prints the job's wall time.
job() {
  local name=$1 run_opts=$2 store="$work/$1.store" r pids=() rc=0 t0
  mkdir "$store" || return 1
  rm -f "$work"/*.log
  t0=$(harness_now_us)
  for ((r = 0; r < RANKS; r++)); do
    # shellcheck disable=SC2086
    timeout -k 5 "$LIMIT" "$run" $run_opts "$prog" --rank "$r" --size "$RANKS" --store "$store" \
      --device mr0 --port 1 --gid-index 0 >"$work/$name-rank$r.log" 2>&1 &
    pids+=($!)
  done
  # A job takes seconds; one still running after 45 s has hung (gloo's own
  # timeout would end it at 60): where each rank's threads stopped is kept.
  local watch
  watch=$(watchdog 45 "$work/$name.stacks" "${pids[@]}")
  for ((r = 0; r < RANKS; r++)); do
    wait "${pids[r]}" || { rc=$?; echo "$name: rank $r exit $rc" >>"$work/$name-rank$r.log"; }
  done
  stop_watchdog "$watch"
  JOB_SECONDS=$(awk -v us=$(($(harness_now_us) - t0)) 'BEGIN { printf "%.1f", us / 1e6 }')
  ((rc == 0)) || return 1
  for ((r = 0; r < RANKS; r++)); do
    grep -q "^rank $r: all checked" "$work/$name-rank$r.log" || return 1
  done
}

# jobs COUNT LABEL "RUN_OPTIONS": COUNT jobs, stopping at the first failure.
jobs_pass() {
  local count=$1 label=$2 run_opts=$3 i times=""
  for ((i = 1; i <= count; i++)); do
    if ! job "$label$i" "$run_opts"; then
      if [[ -s "$work/$label$i.stacks" ]]; then sed 's/^/# stacks: /' "$work/$label$i.stacks" >&2; fi
      fail_with_logs "$label run $i of $count failed after $JOB_SECONDS s"
    fi
    times+=" $JOB_SECONDS"
    if ((i == 1)); then sed "s/^/# /" "$work/${label}1-rank0.log"; fi
  done
  pass "$count of $count gloo jobs ($RANKS ranks${run_opts:+, $run_opts}) checked every element; seconds:$times"
}

case "$case_name" in
  repeat) jobs_pass "${GLOO_RUNS:-20}" run "" ;;
  loss) jobs_pass "${GLOO_LOSS_RUNS:-2}" loss "--loss 0.01" ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
