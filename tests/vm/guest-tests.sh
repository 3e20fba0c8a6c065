#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The kernel-device tests, run inside the test VM (tests/vm/vm-run.sh) as
# root on a throw-away overlay of the host's root:
#   module loading by alias, `rdma link add/show/del`, clear errors for a
#   duplicate and a bad netdev, ibv_devices/ibv_devinfo through the provider,
#   perftest (write, send, read) between two network namespaces over veth
#   with and without nftables loss, beside rxe running the same commands;
#   a netdev deleted under an open context, a killed process's objects,
#   rmmod with and without devices, and a clean kernel log throughout.
# Prints "ok - ..." / "not ok - ..." lines; exits 0 only if all passed.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh" || exit 1
OUT=$WORK/guest-test.out
has_dev() { [ -e "/sys/class/infiniband/$1" ]; }
no_dev() { [ ! -e "/sys/class/infiniband/$1" ]; }
module_gone() { ! grep -q "^$1 " /proc/modules; }

echo "# guest: $(uname -r), $(nproc) CPUs"

# --- the provider, installed as a package would install it ------------------
provider_dir=$(pkg-config --variable=libdir libibverbs 2>/dev/null)/libibverbs
[ -d "$provider_dir" ] || provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
cp "$MROCE_STAGE/provider/libmetaroce-rdmav34.so" "$provider_dir/"
echo "driver metaroce" >/etc/libibverbs.d/metaroce.driver

# --- two namespaces per transport, joined by veth -----------------------------
# ns0 (mra 10.0.0.1) <-> ns1 (mrb 10.0.0.2): metaroce
make_pair ns0 ns1 mra mrb 10.0.0
# rxe in this kernel (6.1) has its UDP socket in the initial namespace only:
# its reference runs both ends on one device there (rxe's own loopback).
ip link add rxa type veth peer name rxb
ip addr add 10.0.1.1/24 dev rxa
ip link set rxa up; ip link set rxb up

# --- module and link -----------------------------------------------------------
if module_loaded metaroce; then not_ok "metaroce is not loaded before the first link add"; else pass "metaroce is not loaded before the first link add"; fi
expect "rdma link add mr0 type metaroce netdev mra" in_ns ns0 rdma link add mr0 type metaroce netdev mra
if module_loaded metaroce; then pass "link add loaded metaroce.ko by its alias rdma-link-metaroce"; else not_ok "link add loaded metaroce.ko by its alias"; fi
expect "rdma link add mr1 type metaroce netdev mrb" in_ns ns1 rdma link add mr1 type metaroce netdev mrb
expect "ib_uverbs is loaded (softdep)" module_loaded ib_uverbs
# The netdev is shown to callers in its own network namespace.
expect "rdma link show lists mr0 on mra, ACTIVE" sh -c "ip netns exec ns0 rdma link show mr0/1 | grep -E 'link mr0/1 state ACTIVE .*netdev mra'"
in_ns ns0 rdma link show | sed 's/^/# ns0: /'
expect_fail "duplicate name is refused" "File exists" in_ns ns0 rdma link add mr0 type metaroce netdev mra
expect_fail "second device on one netdev is refused" "File exists" in_ns ns0 rdma link add mr9 type metaroce netdev mra
expect_fail "unknown netdev is refused" "No such device|not found|Unknown|No such" in_ns ns0 rdma link add mr9 type metaroce netdev nosuch0
expect_fail "non-Ethernet netdev (lo) is refused" "Invalid argument" in_ns ns0 rdma link add mr9 type metaroce netdev lo
expect "no stray device after the refusals" no_dev mr9

# --- rxe beside it -------------------------------------------------------------
expect "rdma link add rxe0 type rxe netdev rxa" rdma link add rxe0 type rxe netdev rxa

# --- the provider binds to the kernel devices ---------------------------------
expect "ibv_devices lists mr0 and mr1" sh -c "ibv_devices | grep -qw mr0 && ibv_devices | grep -qw mr1"
ibv_devices | sed 's/^/# /'
expect "ibv_devinfo -d mr0: Ethernet port, active, metaroce firmware" sh -c \
  "ip netns exec ns0 ibv_devinfo -d mr0 >$OUT.devinfo 2>&1 && grep -q 'hca_id:.*mr0' $OUT.devinfo &&
   grep -q 'link_layer:.*Ethernet' $OUT.devinfo && grep -q 'state:.*PORT_ACTIVE' $OUT.devinfo &&
   grep -q 'fw_ver:.*metaroce' $OUT.devinfo"
sed 's/^/# /' "$OUT.devinfo"

# Bad driver data straight to the character device: clear errnos, no oops.
uverbs_of() { local d; for d in /sys/class/infiniband_verbs/uverbs*; do [ "$(cat "$d/ibdev")" = "$1" ] && { echo "/dev/infiniband/${d##*/}"; return 0; }; done; return 1; }
# probe_lines: a probe's ok / not ok lines (on stdin: no pipe into it, whose
# subshell would lose the counts) as this script's own.
probe_lines() {
  local line
  while IFS= read -r line; do
    case $line in
      "ok - "*) pass "${line#ok - }" ;;
      "not ok - "*) not_ok "${line#not ok - }" ;;
      *) echo "# $line" ;;
    esac
  done
}
for probe in uverbs_abi_probe qp_destroy_events; do
  [ -x "$MROCE_STAGE/bin/$probe" ] || not_ok "$probe was not staged in the guest"
done
probe_lines < <("$MROCE_STAGE/bin/uverbs_abi_probe" "$(uverbs_of mr0)" 2>&1)
# A QP destroyed while another thread acknowledges its events (as UCX tears
# rc_verbs down): ibv_destroy_qp must return.
probe_lines < <(ip netns exec ns0 "$MROCE_STAGE/bin/qp_destroy_events" mr0 2>&1)

expect "GID table of mr0 holds 10.0.0.1 (RoCE v2)" wait_until 20 gid_index mr0 10.0.0.1
for d in "mr0 10.0.0.1" "mr1 10.0.0.2" "rxe0 10.0.1.1"; do
  read -r -a dev_ip <<<"$d"; wait_until 20 gid_index "${dev_ip[@]}"
done
GID_mr0=$(gid_index mr0 10.0.0.1); GID_mr1=$(gid_index mr1 10.0.0.2)
GID_rxe0=$(gid_index rxe0 10.0.1.1)
echo "# GID indexes: mr0 $GID_mr0, mr1 $GID_mr1, rxe0 $GID_rxe0"

# --- perftest ------------------------------------------------------------------
ITERS=200
SIZE=65536
PORT=18515
declare -A RESULT
# bw TOOL TRANSPORT LOSS: one server/client run; records the average MB/s.
bw() {
  local tool=$1 tr=$2 loss=$3 sns cns sdev cdev sgid cgid addr log=/tmp/pt.$1.$2.$3
  if [ "$tr" = metaroce ]; then sns=ns0 cns=ns1 sdev=mr0 cdev=mr1 sgid=$GID_mr0 cgid=$GID_mr1 addr=10.0.0.1
  else sns=init cns=init sdev=rxe0 cdev=rxe0 sgid=$GID_rxe0 cgid=$GID_rxe0 addr=10.0.1.1; fi
  PORT=$((PORT + 1))
  exec_in_ns "$sns" timeout 240 "$tool" -d "$sdev" -x "$sgid" -n $ITERS -s $SIZE -p $PORT -F >"$log.server" 2>&1 &
  local server=$!
  # shellcheck disable=SC2046  # ns_opt: nothing or "-n NS"
  if ! wait_tcp_listener $(ns_opt $sns) -p $server -t 60 $PORT; then
    not_ok "$tool over $tr, loss $loss: server did not listen"; sed 's/^/#   /' "$log.server"
    kill $server 2>/dev/null; wait $server 2>/dev/null; RESULT[$tool,$tr,$loss]=fail; return
  fi
  local start status=0 sstatus=0
  start=$(date +%s.%N)
  in_ns "$cns" timeout 240 "$tool" -d "$cdev" -x "$cgid" -n $ITERS -s $SIZE -p $PORT -F "$addr" >"$log.client" 2>&1 || status=$?
  wait $server || sstatus=$?
  # Wall-clock rate of the client's whole run (connection set-up included):
  # perftest's own figure comes from CPU cycle counts, which emulation
  # distorts (it often prints 0.00).
  local secs wall
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  wall=$(awk -v n=$((ITERS * SIZE)) -v t="$secs" 'BEGIN { printf "%.2f", (t > 0 ? n / t / 1e6 : 0) }')
  # The result line: #bytes #iterations BW-peak BW-average MsgRate.
  local line; line=$(awk -v s=$SIZE '$1 == s && NF >= 4 { print; exit }' "$log.client")
  local bytes iters avg; read -r bytes iters _ avg _ <<<"$line"
  if [ $status -eq 0 ] && [ $sstatus -eq 0 ] && [ "${bytes:-}" = "$SIZE" ] && [ "${iters:-}" = "$ITERS" ]; then
    pass "$tool over $tr, loss $loss: $ITERS x $SIZE bytes completed in ${secs}s ($wall MB/s wall, perftest says $avg MB/s)"
    RESULT[$tool,$tr,$loss]=$wall
  else
    not_ok "$tool over $tr, loss $loss (client $status, server $sstatus, result '$line')"
    sed 's/^/#   client: /' "$log.client" | tail -n 15; sed 's/^/#   server: /' "$log.server" | tail -n 8
    RESULT[$tool,$tr,$loss]=fail
  fi
}
# Random loss on every UDP datagram a namespace receives for the transport's
# ports (MetaRoCE's home and path ports lie above 4791). rxe's loopback
# bypasses netfilter: its "loss" runs see none, and the table says so.
loss_on_transport_ports() { set_loss "$1" "udp dport 4791-65535"; }

for loss in 0 1; do
  loss_on_transport_ports $loss
  for tool in ib_write_bw ib_send_bw ib_read_bw; do
    for tr in metaroce rxe; do bw $tool $tr $loss; done
  done
  if [ $loss != 0 ]; then
    echo "# nftables dropped $(dropped) metaroce datagrams (rxe: loopback, no loss applied)"
    d=$(dropped)
    if [ "$d" -gt 0 ]; then pass "loss was applied to metaroce traffic ($d datagrams dropped)"; else not_ok "loss was applied to metaroce traffic"; fi
  fi
done
loss_on_transport_ports 0

echo "# perftest under emulation (TCG): functional figures, not performance."
echo "# rxe: one device, both ends in the initial namespace (its loopback, no loss)."
echo "# MB/s: the client's wall-clock rate over its whole run, set-up included."
printf '# %-12s %5s %14s %14s\n' test loss "metaroce MB/s" "rxe MB/s"
for loss in 0 1; do
  for tool in ib_write_bw ib_send_bw ib_read_bw; do
    printf '# %-12s %4s%% %14s %14s\n' $tool $loss "${RESULT[$tool,metaroce,$loss]:-n/a}" "${RESULT[$tool,rxe,$loss]:-n/a}"
  done
done

# --- a killed process's kernel objects are released ---------------------------
res_count() {  # res_count DEV KIND: that device's count of KIND in `rdma resource`
  rdma resource show | grep -w "$1:" | tr ' ' '\n' | awk -v k="$2" 'prev == k { print; exit } { prev = $0 }'
}
# Every device also has the MAD layer's QP1 (type GSI), its CQ and its PD.
user_qps() { rdma resource show qp link "$1/1" 2>/dev/null | grep -c 'type RC'; }
has_qp() { [ "$(user_qps "$1")" -ge 1 ] 2>/dev/null; }
# hold_qp NS DEV GID ADDR: a perftest pair on DEV (both ends in NS, the
# client connecting to ADDR) in a timed run, so that QPs exist for a while
# (perftest creates them only after its TCP exchange). Sets HOLDER (client)
# and LISTENER (server).
hold_qp() {
  local ns=$1 dev=$2 gid=$3 addr=$4
  PORT=$((PORT + 1))
  # ip netns exec directly, not in_ns: $! must be perftest's own PID.
  ip netns exec "$ns" ib_write_bw -d "$dev" -x "$gid" -p $PORT -F -D 120 >"/tmp/holder-server.$dev.log" 2>&1 &
  LISTENER=$!
  wait_tcp_listener -n "$ns" -p "$LISTENER" -t 60 $PORT || return 1
  ip netns exec "$ns" ib_write_bw -d "$dev" -x "$gid" -p $PORT -F -D 120 "$addr" >"/tmp/holder.$dev.log" 2>&1 &
  HOLDER=$!
  wait_until 60 has_qp "$dev"
}
base_cq=$(res_count mr1 cq) base_pd=$(res_count mr1 pd)
if hold_qp ns1 mr1 "$GID_mr1" 10.0.0.2; then
  pass "a running perftest holds a kernel QP on mr1 ($(user_qps mr1) user qp, $(res_count mr1 cq) cq, $(res_count mr1 pd) pd, $(res_count mr1 ctx) ctx)"
  rdma resource show qp link mr1 | sed 's/^/# /'
  lqpn=$(rdma resource show qp link mr1 | grep 'type RC' | awk '{ for (i = 1; i < NF; i++) if ($i == "lqpn") print $(i + 1) }' | head -n1)
  if [ -n "$lqpn" ] && [ "$lqpn" -ge 4097 ] && [ $((lqpn & 4095)) -ne 0 ]; then
    pass "kernel QP number $lqpn = slot $((lqpn >> 12)) << 12 | index $((lqpn & 4095))"
  else
    not_ok "kernel QP number '$lqpn' has a port slot and a non-zero index"
  fi
else
  not_ok "a running perftest holds a kernel QP on mr1"; sed 's/^/#   /' /tmp/holder.mr1.log; rdma resource show | sed 's/^/#   /'
fi
kill -9 "$HOLDER" "$LISTENER" 2>/dev/null; wait "$HOLDER" "$LISTENER" 2>/dev/null
released() { [ "$(user_qps mr1)" = 0 ] && [ "$(res_count mr1 cq)" = "$base_cq" ] && [ "$(res_count mr1 pd)" = "$base_pd" ] && [ "$(res_count mr1 ctx)" = 0 ]; }
expect "after kill -9 the kernel released its QP, CQ, PD and context" wait_until 30 released

# --- the netdev goes away under an open context ---------------------------------
ip netns add ns2
ip link add mrc type veth peer name mrd
ip link set mrc netns ns2
in_ns ns2 ip addr add 10.0.2.1/24 dev mrc
in_ns ns2 ip link set mrc up
in_ns ns2 ip link set lo up  # both perftest ends run here
ip link set mrd up  # carrier
expect "rdma link add mr2 type metaroce netdev mrc" in_ns ns2 rdma link add mr2 type metaroce netdev mrc
wait_until 20 gid_index mr2 10.0.2.1
GID_mr2=$(gid_index mr2 10.0.2.1)
if hold_qp ns2 mr2 "$GID_mr2" 10.0.2.1; then
  pass "a process holds a context and a QP on mr2"
else
  not_ok "a process holds a context and a QP on mr2 (GID index '$GID_mr2')"
  sed 's/^/#   client: /' /tmp/holder.mr2.log; sed 's/^/#   server: /' /tmp/holder-server.mr2.log; rdma resource show | sed 's/^/#   /'
fi
holder=$HOLDER
if in_ns ns2 ip link del mrc && wait_until 30 no_dev mr2; then
  pass "deleting mrc (context and QP still open) removes mr2"
else
  not_ok "deleting mrc (context and QP still open) removes mr2"
fi
kill "$holder" "$LISTENER" 2>/dev/null
expect "the processes holding the removed device exit when killed" wait_until 30 sh -c "! kill -0 $holder 2>/dev/null && ! kill -0 $LISTENER 2>/dev/null"
wait "$holder" "$LISTENER" 2>/dev/null

# --- rdma link del, rmmod -------------------------------------------------------
expect "rdma link del mr0" rdma link del mr0
expect "mr0 is gone" wait_until 10 no_dev mr0
expect_fail "rdma link del of a missing device fails" "." rdma link del mr0
# With disassociate_ucontext, uverbs holds no module reference for open
# contexts: rmmod removes the devices under them and the process gets EIO.
if hold_qp ns1 mr1 "$GID_mr1" 10.0.0.2; then
  pass "a process holds a context and a QP on mr1"
else
  not_ok "a process holds a context and a QP on mr1"
  sed 's/^/#   client: /' /tmp/holder.mr1.log; sed 's/^/#   server: /' /tmp/holder-server.mr1.log
fi
busy=$HOLDER
expect "rmmod metaroce with mr1 registered and a context open" rmmod metaroce
expect "mr1 went with the module" no_dev mr1
expect "metaroce is unloaded" module_gone metaroce
kill "$busy" "$LISTENER" 2>/dev/null
expect "the processes whose device was removed exit when killed" wait_until 30 sh -c "! kill -0 $busy 2>/dev/null && ! kill -0 $LISTENER 2>/dev/null"
wait "$busy" "$LISTENER" 2>/dev/null
expect "modprobe metaroce again" modprobe metaroce
expect "rdma link add after reload" in_ns ns0 rdma link add mr0 type metaroce netdev mra
expect "rdma link del, rmmod" sh -c "rdma link del mr0 && rmmod metaroce"
expect "rdma link del rxe0" rdma link del rxe0

# --- the kernel log -------------------------------------------------------------
check_kernel_log
dmesg | grep -i metaroce | sed 's/^/# dmesg: /'

