#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The software stacks users run, over the kernel device, inside the test VM
# (tests/vm/vm-run.sh): two network namespaces joined by veth (1500-byte
# MTU), mr0 on one end and mr1 on the other; Debian's ucx-utils: ucx_info
# lists the devices, ucx_perftest runs over rc_verbs (tag_bw, put_bw,
# am_lat) and ud_verbs (tag_bw, am_lat) without and with 1% nftables loss,
# beside UCX's tcp transport on the same links, and perftest's ib_write_bw
# and ib_send_lat beside put_bw and am_lat. Open MPI over the same setup:
# guest-mpi.sh.
# Prints "ok - ..." / "not ok - ..." lines and a results table; exits 0
# only if all passed.
# Under emulation the figures are functional, not performance.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh" || exit 1
. "$(dirname "$0")/guest-stacks-lib.sh" || exit 1

# --- UCX ---------------------------------------------------------------------
expect "ucx_info -d lists mr0:1 with rc_verbs and ud_verbs" sh -c \
  "ip netns exec ns0 ucx_info -d >/tmp/ucx_info 2>&1; grep -q 'Device: mr0:1' /tmp/ucx_info &&
   grep -q 'Transport: rc_verbs' /tmp/ucx_info && grep -q 'Transport: ud_verbs' /tmp/ucx_info"
grep -E "Device: mr|Transport: (rc|ud)_verbs" /tmp/ucx_info | sed 's/^/# /' | head -8

declare -A RESULT
PORT=13337
# perftest NAME TLS LOSS ARGS...: one ucx_perftest server (ns1) and client
# (ns0); records its final figure.
perftest() {
  local name=$1 tls=$2 pct=$3; shift 3
  local log=/tmp/ucx.$name.$tls.$pct
  local sdev=mr1:1 cdev=mr0:1 list=$tls,self
  [ "$tls" = tcp ] && { sdev=mrb; cdev=mra; }
  # rc_verbs connects its endpoints through an auxiliary transport: UCX's
  # "rc" is rc_verbs with ud_verbs for that.
  [ "$tls" = rc_verbs ] && list=rc,self
  loss "$pct"
  rm -f "$log.stacks"
  ip netns exec ns1 env UCX_NET_DEVICES=$sdev UCX_TLS="$list" ucx_perftest "$@" -p $PORT >"$log.server" 2>&1 &
  local server=$!
  if ! wait_tcp_listener -n ns1 -p "$server" -t 60 $PORT; then
    not_ok "ucx_perftest $name over $tls, loss $pct%: server did not listen"; sed 's/^/#   /' "$log.server" | tail -20
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; RESULT[$name,$tls,$pct]=fail; return
  fi
  local status=0 sstatus=0
  # UCX_LOG_LEVEL=info prints the lanes each endpoint uses.
  ip netns exec ns0 env UCX_NET_DEVICES=$cdev UCX_TLS="$list" UCX_LOG_LEVEL=info ucx_perftest 10.0.0.2 "$@" -p $PORT >"$log.client" 2>&1 &
  local client=$!
  # A run takes seconds; one side still running after 120 s has hung.
  local watch; watch=$(watchdog 120 "$log.stacks" "$client" "$server")
  wait "$client" || status=$?
  wait "$server" || sstatus=$?
  stop_watchdog "$watch"
  # The "Final:" line: iterations, then latency (typical, avg, overall) and
  # bandwidth (average, overall) and message rate.
  local final; final=$(grep -E '^ *Final:' "$log.client" | tail -1)
  local lanes; lanes=$(grep -aoE '(tag|am|rma_bw#0|rma|amo|wireup)\([a-z_]+/[a-z0-9:]+\)' "$log.client" | sort -u | tr '\n' ' ')
  echo "# $name over $tls: lanes $lanes"
  if [ $status -eq 0 ] && [ $sstatus -eq 0 ] && [ -n "$final" ] && [[ "$lanes" == *"$tls/"* ]]; then
    RESULT[$name,$tls,$pct]=$(echo "$final" | awk '{ print $3 " us, " $6 " MB/s" }')
    pass "ucx_perftest $name over $tls, loss $pct%: ${RESULT[$name,$tls,$pct]}"
  else
    not_ok "ucx_perftest $name over $tls, loss $pct% (client $status, server $sstatus)"
    local side
    for side in client server; do
      grep -aE 'UCX +(ERROR|FATAL|WARN)|Fatal|Assertion|Caught signal|failed|completion' "$log.$side" | grep -av 'metaroced' | head -n 8 |
        sed "s/^/#   $side: /"
      # and, for a side the watchdog killed, where it stopped
      local code=$status
      [ "$side" = server ] && code=$sstatus
      if [ "$code" -eq 137 ]; then tail -n 6 "$log.$side" | sed "s/^/#   $side (last lines): /"; fi
    done
    if [ -s "$log.stacks" ]; then head -n 80 "$log.stacks" | sed 's/^/#   stacks: /'; fi
    RESULT[$name,$tls,$pct]=fail
  fi
}

# verbs NAME LOSS ARGS...: one perftest program (NAME) between the same
# devices and namespaces, server ns1 and client ns0 as for ucx_perftest, so
# that put_bw stands beside ib_write_bw and am_lat beside ib_send_lat on one
# setup; records "typical latency us, average bandwidth MB/s" as ucx_perftest's.
verbs() {
  local name=$1 pct=$2; shift 2
  local log=/tmp/verbs.$name.$pct gid0 gid1
  gid0=$(gid_index mr0 10.0.0.1); gid1=$(gid_index mr1 10.0.0.2)
  loss "$pct"
  rm -f "$log.stacks"
  ip netns exec ns1 "$name" -d mr1 -x "$gid1" -F -p $PORT "$@" >"$log.server" 2>&1 &
  local server=$!
  if ! wait_tcp_listener -n ns1 -p "$server" -t 60 $PORT; then
    not_ok "$name, loss $pct%: server did not listen"; tail -n 8 "$log.server" | sed 's/^/#   /'
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; RESULT[$name,verbs,$pct]=fail; return
  fi
  local status=0 sstatus=0
  ip netns exec ns0 "$name" -d mr0 -x "$gid0" -F -p $PORT "$@" 10.0.0.2 >"$log.client" 2>&1 &
  local client=$!
  local watch; watch=$(watchdog 120 "$log.stacks" "$client" "$server")
  wait "$client" || status=$?
  wait "$server" || sstatus=$?
  stop_watchdog "$watch"
  # The figures' line follows the "#bytes" header: ib_write_bw gives BW
  # average (MB/s) in its 4th column, ib_send_lat t_typical (us) in its 5th.
  local figures; figures=$(grep -A1 -E '^ *#bytes' "$log.client" | tail -1)
  if [ $status -eq 0 ] && [ $sstatus -eq 0 ] && [ -n "$figures" ]; then
    case $name in
      ib_write_bw) RESULT[$name,verbs,$pct]=$(echo "$figures" | awk '{ print "-, " $4 " MB/s" }') ;;
      *) RESULT[$name,verbs,$pct]=$(echo "$figures" | awk '{ print $5 " us, -" }') ;;
    esac
    pass "$name over mr0/mr1, loss $pct%: ${RESULT[$name,verbs,$pct]}"
  else
    not_ok "$name over mr0/mr1, loss $pct% (client $status, server $sstatus)"; tail -n 8 "$log.client" | sed 's/^/#   /'
    if [ -s "$log.stacks" ]; then head -n 80 "$log.stacks" | sed 's/^/#   stacks: /'; fi
    RESULT[$name,verbs,$pct]=fail
  fi
}

for pct in 0 1; do
  perftest tag_bw rc_verbs $pct -t tag_bw -s 65536 -n 100
  perftest put_bw rc_verbs $pct -t ucp_put_bw -s 65536 -n 100
  verbs ib_write_bw $pct -s 65536 -n 100
  perftest am_lat rc_verbs $pct -t ucp_am_lat -s 8 -n 300
  verbs ib_send_lat $pct -s 8 -n 300
  perftest tag_bw ud_verbs $pct -t tag_bw -s 65536 -n 100
  perftest am_lat ud_verbs $pct -t ucp_am_lat -s 8 -n 300
  perftest tag_bw tcp $pct -t tag_bw -s 65536 -n 100
done
loss 0

echo "# results (ucx_perftest Final: typical latency, average bandwidth; emulated, functional only)"
printf '# %-11s %-9s %-24s %-24s\n' test tls "loss 0%" "loss 1%"
for t in "tag_bw rc_verbs" "put_bw rc_verbs" "ib_write_bw verbs" "am_lat rc_verbs" "ib_send_lat verbs" "tag_bw ud_verbs" "am_lat ud_verbs" "tag_bw tcp"; do
  read -r name tls <<<"$t"
  printf '# %-11s %-9s %-24s %-24s\n' "$name" "$tls" "${RESULT[$name,$tls,0]:-}" "${RESULT[$name,$tls,1]:-}"
done
