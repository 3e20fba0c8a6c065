#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# rxe and MetaRoCE on the same wire under the same loss, run in each of two
# test VMs joined by one Ethernet link (tests/vm/vm-run.sh --pair; the role
# a or b is MROCE_ROLE). rxe in the 6.1 kernel binds its UDP socket in the
# initial namespace only, so two namespaces of one guest cannot run it; two
# guests can. Guest a (10.0.5.1) runs perftest's ib_write_bw servers and
# drops PERCENT% of the UDP datagrams it receives (nftables), guest b
# (10.0.5.2) the clients: 64 KiB WRITEs for a fixed time at 0, 1 and 10%
# loss, first over rxe (RoCEv2: go-back-N), then over metaroce.ko's device
# on the same link. Guest b prints the table: perftest's average MB/s and
# the fraction of its loss-free figure each transport keeps. Under TCG the
# figures are functional, not performance: compare the fractions.
# Prints "ok - ..." / "not ok - ..." lines ("REFERENCE ...:" for rxe, not
# counted); exits 0 only if nothing failed.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh" || exit 1
LOSS_NAMESPACES=init

role=${MROCE_ROLE:?vm-run.sh --pair sets the role}
declare -A IP=([a]=10.0.5.1 [b]=10.0.5.2) MAC=([a]=52:54:00:4d:52:0a [b]=52:54:00:4d:52:0b)
other=a; [ "$role" = a ] && other=b
echo "# guest $role: $(uname -r), $(nproc) CPU, ${IP[$role]}"

provider_dir=$(pkg-config --variable=libdir libibverbs 2>/dev/null)/libibverbs
[ -d "$provider_dir" ] || provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
cp "$MROCE_STAGE/provider/libmetaroce-rdmav34.so" "$provider_dir/"
echo "driver metaroce" >/etc/libibverbs.d/metaroce.driver

modprobe virtio_net
expect "the link to guest $other (eth0)" wait_until 20 ip link show eth0
ip addr add "${IP[$role]}/24" dev eth0
ip link set eth0 up
# The link carries only what the test sends; no ARP to lose or wait for.
ip neigh replace "${IP[$other]}" lladdr "${MAC[$other]}" dev eth0 nud permanent

LOSSES="0 1 10"
SECONDS_PER_RUN=5  # perftest -D; it measures the middle (less 1 s at each end, -f 1)
SIZE=65536
PORT=18600
# perftest's average MB/s, from its result line: bytes iterations peak average rate.
average() { awk -v s=$SIZE '$1 == s && NF >= 4 { print $4; exit }' "$1"; }
declare -A BW

# run TRANSPORT DEV LOSS: one timed ib_write_bw, b writing to a.
run() {
  local tr=$1 dev=$2 loss=$3 gid log=/tmp/pair.$1.$3
  gid=$(gid_index "$dev" "${IP[$role]}")
  PORT=$((PORT + 1))
  local opts=(-d "$dev" -x "$gid" -s "$SIZE" -D "$SECONDS_PER_RUN" -f 1 -p "$PORT" -F)
  if [ "$role" = a ]; then
    set_loss "$loss"
    local status=0
    timeout 120 ib_write_bw "${opts[@]}" >"$log" 2>&1 || status=$?
    if [ "$tr" = metaroce ]; then
      if [ $status -eq 0 ]; then pass "ib_write_bw server over $tr, loss $loss%"; else
        not_ok "ib_write_bw server over $tr, loss $loss% (status $status)"; tail -n 5 "$log" | sed 's/^/#   /'; fi
    fi
    if [ "$loss" != 0 ]; then
      local d; d=$(dropped)
      if [ "$d" -gt 0 ]; then pass "$loss% loss was applied to $tr ($d datagrams dropped)"; else not_ok "$loss% loss was applied to $tr"; fi
    fi
    set_loss 0
    return
  fi
  # b: the server is up once its TCP port answers; until then perftest
  # says "Couldn't connect" at once.
  local status deadline=$(($(date +%s) + 150))
  while :; do
    status=0
    timeout 120 ib_write_bw "${opts[@]}" "${IP[a]}" >"$log" 2>&1 || status=$?
    grep -q "Couldn't connect" "$log" && [ "$(date +%s)" -lt $deadline ] || break
    sleep 0.5
  done
  local bw; bw=$(average "$log")
  local ok_=pass fail_=not_ok
  [ "$tr" = rxe ] && ok_=reference_ok fail_=reference_failed
  if [ $status -eq 0 ] && [ -n "$bw" ]; then
    $ok_ "ib_write_bw over $tr, loss $loss%: $bw MB/s"
    BW[$tr,$loss]=$bw
  else
    $fail_ "ib_write_bw over $tr, loss $loss% (status $status)"; tail -n 8 "$log" | sed 's/^/#   /'
    BW[$tr,$loss]=failed
  fi
}
reference_ok() { echo "REFERENCE ok: $*"; }
reference_failed() { echo "REFERENCE failed: $*"; }

# transport TR DEV TYPE: the device on eth0, the runs, the device removed.
transport() {
  local tr=$1 dev=$2 type=$3 loss
  expect "rdma link add $dev type $type netdev eth0" rdma link add "$dev" type "$type" netdev eth0
  expect "$dev has a RoCE v2 GID for ${IP[$role]}" wait_until 20 gid_index "$dev" "${IP[$role]}"
  for loss in $LOSSES; do run "$tr" "$dev" "$loss"; done
  expect "rdma link del $dev" rdma link del "$dev"
}
transport rxe rxe0 rxe
transport metaroce mr0 metaroce

if [ "$role" = b ]; then
  echo "# ib_write_bw, 64 KiB WRITEs for ${SECONDS_PER_RUN}s, guest b to guest a over one link; a drops the"
  echo "# loss's share of the UDP datagrams it receives. MB/s (perftest's average) and the"
  echo "# fraction of the transport's loss-free figure. Functional under TCG: compare fractions."
  printf '# %-9s' transport; for loss in $LOSSES; do printf ' %20s' "loss $loss%"; done; echo
  for tr in rxe metaroce; do
    printf '# %-9s' $tr
    for loss in $LOSSES; do
      bw=${BW[$tr,$loss]:-n/a} base=${BW[$tr,0]:-}
      cell=$bw
      if [[ $bw =~ ^[0-9.]+$ && $base =~ ^[0-9.]+$ ]]; then
        cell=$(awk -v b="$bw" -v z="$base" 'BEGIN { printf "%.2f (%.2f)", b, (z > 0 ? b / z : 0) }')
      fi
      printf ' %20s' "$cell"
    done
    echo
  done
fi
check_kernel_log
