#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Debian's unmodified ibverbs-utils and perftest binaries over MetaRoCE
# devices through tools/metaroce-run, two processes on loopback.
#
#   perftest_test.sh METAROCE_RUN CASE
#
# CASE: devices | write_bw | read_bw | send_bw | write_lat | loss | rocev2 | two_pairs | variants
# Every wait is bounded: programs run under `timeout`, and a client starts
# once its server listens (wait_tcp_listener).
TEST_NAME="perftest_${2:-}"
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -uo pipefail

run=${1:?metaroce-run path}
case_name=${2:?case}
LIMIT=${PERFTEST_TIMEOUT:-120}
DEVARGS="-d mr0 -x 0"  # device and GID index given to every perftest
work=$WORK

for tool in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_atomic_bw ibv_devices ibv_devinfo; do
  command -v "$tool" >/dev/null || skip "$tool not installed"
done

# A TCP port nobody listens on (perftest's -p).
free_port() {
  local port
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % 40000))
    if ! listening tcp "$port"; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# perf_pair NAME TOOL "RUN_OPTIONS" "TOOL_ARGS": server and client, both must exit 0.
perf_pair() {
  local name=$1 tool=$2 run_opts=$3 args=$4 port
  port=$(free_port) || fail_with_logs "no free TCP port"
  # shellcheck disable=SC2086
  timeout "$LIMIT" "$run" $run_opts "$tool" $DEVARGS $args -p "$port" >"$work/$name-server.log" 2>&1 &
  local server=$!
  wait_tcp_listener -p "$server" -t 20 "$port" || fail_with_logs "$name: server did not listen on $port"
  # shellcheck disable=SC2086
  timeout "$LIMIT" "$run" $run_opts "$tool" $DEVARGS $args -p "$port" 127.0.0.1 >"$work/$name-client.log" 2>&1
  local client_rc=$?
  wait "$server"
  local server_rc=$?
  [[ $client_rc -eq 0 ]] || fail_with_logs "$name: client exit $client_rc"
  [[ $server_rc -eq 0 ]] || fail_with_logs "$name: server exit $server_rc"
}

# The data line after the "#bytes" header: prints it, fails unless field $2 > 0.
check_result() {
  local log=$1 field=$2 label=$3
  local line
  line=$(awk '/#bytes/ { getline; print; exit }' "$log")
  [[ -n "$line" ]] || fail_with_logs "$label: no result line in $log"
  local value
  value=$(echo "$line" | awk -v f="$field" '{ print $f }')
  awk -v v="$value" 'BEGIN { exit !(v + 0 > 0) }' || fail_with_logs "$label: value '$value' in: $line"
  echo "RESULT $label: $line"
}

bw() {  # bw NAME TOOL "RUN_OPTIONS"
  perf_pair "$1" "$2" "$3" "-n 2000 -s 65536"
  check_result "$work/$1-client.log" 4 "$1 (MB/s avg in column 4)"
}

lat() {  # lat NAME "RUN_OPTIONS"
  perf_pair "$1" ib_write_lat "$2" "-n 2000"
  check_result "$work/$1-client.log" 6 "$1 (usec: min max typical avg ...)"
}

case "$case_name" in
  devices)
    "$run" --help >/dev/null || fail_with_logs "metaroce-run --help"
    "$run" --profile bogus true 2>/dev/null && fail_with_logs "metaroce-run accepted --profile bogus"
    "$run" --dev nonsense true 2>/dev/null && fail_with_logs "metaroce-run accepted --dev nonsense"
    # shellcheck disable=SC2016  # expanded by the inner bash
    "$run" --paths 2 --profile rocev2 --loss 0.5 --mtu 1024 --dev mrx=127.0.0.1 \
      bash -c '[[ $METAROCE_DEVICES == mrx=127.0.0.1 && $METAROCE_PATHS == 2 && $METAROCE_PROFILE == rocev2 &&
                 $METAROCE_TEST_LOSS == 0.5 && $METAROCE_MTU == 1024 && $LD_PRELOAD == *libmetaroce-preload.so* ]]' ||
      fail_with_logs "metaroce-run did not set the environment"
    timeout "$LIMIT" "$run" ibv_devices >"$work/devices.log" 2>&1 || fail_with_logs "ibv_devices exit $?"
    grep -Eq '^\s+mr0\s+[0-9a-f]{16}' "$work/devices.log" || fail_with_logs "ibv_devices does not list mr0"
    timeout "$LIMIT" "$run" --dev mr0=lo --dev mr1=127.0.0.1 ibv_devices >"$work/devices2.log" 2>&1 ||
      fail_with_logs "ibv_devices (two devices) exit $?"
    grep -q mr1 "$work/devices2.log" || fail_with_logs "second device missing"
    timeout "$LIMIT" "$run" ibv_devinfo -v -d mr0 >"$work/devinfo.log" 2>&1 || fail_with_logs "ibv_devinfo exit $?"
    grep -q 'PORT_ACTIVE' "$work/devinfo.log" || fail_with_logs "port not active"
    grep -q 'link_layer:.*Ethernet' "$work/devinfo.log" || fail_with_logs "link layer not Ethernet"
    grep -q 'GID\[  0\]:.*::ffff:127.0.0.1, RoCE v2' "$work/devinfo.log" || fail_with_logs "GID 0 missing"
    cat "$work/devices.log" "$work/devinfo.log"
    ;;
  write_bw) bw write_bw ib_write_bw "" ;;
  read_bw) bw read_bw ib_read_bw "" ;;
  send_bw) bw send_bw ib_send_bw "" ;;
  write_lat) lat write_lat "" ;;
  loss)
    bw write_bw_loss ib_write_bw "--loss 0.01"
    bw read_bw_loss ib_read_bw "--loss 0.01"
    bw send_bw_loss ib_send_bw "--loss 0.01"
    lat write_lat_loss "--loss 0.01"
    ;;
  rocev2)
    bw write_bw_rocev2 ib_write_bw "--profile rocev2"
    bw write_bw_rocev2_loss ib_write_bw "--profile rocev2 --loss 0.01"
    ;;
  two_pairs)
    bw pair1_warmup ib_write_bw "" >/dev/null
    ( bw pair1 ib_write_bw "" ) >"$work/pair1.out" 2>&1 &
    p1=$!
    ( bw pair2 ib_send_bw "" ) >"$work/pair2.out" 2>&1 &
    p2=$!
    wait "$p1"; r1=$?
    wait "$p2"; r2=$?
    cat "$work/pair1.out" "$work/pair2.out"
    [[ $r1 -eq 0 && $r2 -eq 0 ]] || fail_with_logs "concurrent pairs: $r1 $r2"
    ;;
  variants)
    # Without -x: perftest picks the GID itself (ibv_query_gid_ex: RoCE v2).
    DEVARGS="-d mr0" bw write_bw_no_gid_index ib_write_bw ""
    # Completion channel events (-e), bidirectional (-b), several QPs (-q), atomics.
    perf_pair send_bw_events ib_send_bw "" "-n 1000 -s 65536 -e"
    check_result "$work/send_bw_events-client.log" 4 "send_bw -e (MB/s avg in column 4)"
    perf_pair write_bw_bidir ib_write_bw "" "-n 1000 -s 65536 -b"
    check_result "$work/write_bw_bidir-client.log" 4 "write_bw -b (MB/s avg in column 4)"
    perf_pair write_bw_4qps ib_write_bw "" "-n 1000 -s 65536 -q 4"
    check_result "$work/write_bw_4qps-client.log" 4 "write_bw -q 4 (MB/s avg in column 4)"
    perf_pair atomic_bw ib_atomic_bw "" "-n 1000"
    check_result "$work/atomic_bw-client.log" 4 "atomic_bw (MB/s avg in column 4)"
    # Two progress threads on each side: the four QPs alternate between them.
    (
      export METAROCE_PROGRESS_THREADS=2
      perf_pair write_bw_4qps_2threads ib_write_bw "" "-n 1000 -s 65536 -q 4"
    ) || exit 1
    check_result "$work/write_bw_4qps_2threads-client.log" 4 "write_bw -q 4, 2 progress threads (MB/s avg in column 4)"
    ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
pass "$case_name"
