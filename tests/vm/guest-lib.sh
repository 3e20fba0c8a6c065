# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# What the guest test scripts share (sourced, bash): the test harness
# (tests/lib/harness.sh: reporting, expect/expect_not/expect_fail, wait_until,
# wait_tcp_listener), and a pair of network namespaces joined by veth with
# the GID index of an address.

source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh" || exit 1

# in_ns NS CMD...: CMD in namespace NS ("init": the initial one).
in_ns() { local ns=$1; shift; if [ "$ns" = init ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
# exec_in_ns NS CMD...: in_ns in place of the shell. Started in the
# background it makes $! the command's own PID, so a kill reaches it; a
# backgrounded in_ns is a subshell, whose death leaves the command running.
exec_in_ns() { local ns=$1; shift; if [ "$ns" = init ]; then exec "$@"; else exec ip netns exec "$ns" "$@"; fi; }
# ns_opt NS: wait_tcp_listener's option for namespace NS (none for "init").
ns_opt() { [ "$1" = init ] || echo "-n $1"; }
module_loaded() { grep -q "^$1 " /proc/modules; }
# make_pair NS_A NS_B DEV_A DEV_B SUBNET: NS_A has SUBNET.1 on DEV_A, NS_B
# SUBNET.2 on DEV_B, joined by veth.
make_pair() {
  ip netns add "$1"; ip netns add "$2"
  ip link add "$3" type veth peer name "$4"
  ip link set "$3" netns "$1"; ip link set "$4" netns "$2"
  in_ns "$1" ip addr add "$5.1/24" dev "$3"; in_ns "$2" ip addr add "$5.2/24" dev "$4"
  for ns in "$1" "$2"; do in_ns "$ns" ip link set lo up; done
  in_ns "$1" ip link set "$3" up; in_ns "$2" ip link set "$4" up
}
# gid_index DEV IPV4: the RoCE v2 GID index of an IPv4 address, from sysfs.
gid_index() {
  local dev=$1 ip=$2 f i want
  # shellcheck disable=SC2046,SC2183  # the address's four octets
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$ip" | tr . ' '))
  for f in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
    i=${f##*/}
    [ "$(cat "$f" 2>/dev/null)" = "$want" ] || continue
    [ "$(cat /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/"$i" 2>/dev/null)" = "RoCE v2" ] && { echo "$i"; return 0; }
  done
  return 1
}
# elapsed START: seconds since START (date +%s), for the log.
elapsed() { echo $(( $(date +%s) - $1 )); }

# set_loss PERCENT [NFT_MATCH]: random loss of PERCENT% (an integer; 0
# removes it) on the UDP datagrams the namespaces of LOSS_NAMESPACES
# (default: ns0 and ns1; "init" is the initial one) receive that match
# NFT_MATCH (an nftables expression; default: every UDP datagram), counted
# for `dropped`, which prints how many were dropped so far in them.
LOSS_NAMESPACES=${LOSS_NAMESPACES:-ns0 ns1}
set_loss() {
  local ns match=${2:-meta l4proto udp}
  for ns in $LOSS_NAMESPACES; do
    in_ns "$ns" nft delete table inet mrloss 2>/dev/null || true
    [ "$1" = 0 ] && continue
    in_ns "$ns" nft -f - <<NFT
table inet mrloss {
  chain input {
    type filter hook input priority 0;
    $match numgen random mod 100 < $1 counter drop
  }
}
NFT
  done
}
dropped() {
  local n=0 ns c
  for ns in $LOSS_NAMESPACES; do
    c=$(in_ns "$ns" nft list table inet mrloss 2>/dev/null | awk '/counter/ { for (i = 1; i <= NF; i++) if ($i == "packets") print $(i + 1) }')
    n=$((n + ${c:-0}))
  done
  echo "$n"
}

# check_kernel_log: one test, that the kernel log has no warning, oops or
# leak report (metaroce itself reports port slots or devices left over at
# unload); what it has is shown. A user program's fault ("traps: PROG[PID]
# general protection fault ...") is its own: its exit status reports it.
check_kernel_log() {
  local bad='WARNING:|BUG:|Oops|general protection|Call Trace|kmemleak|unreferenced object|refcount_t|use-after-free|list_del corruption|hung_task|INFO: task|still in use at unload|left at unload'
  if dmesg | grep -v '] traps: ' | grep -Eq "$bad"; then
    not_ok "kernel log is free of warnings, oopses and leak reports"
    dmesg | grep -v '] traps: ' | grep -E -B2 -A25 "$bad" | head -n 80 | sed 's/^/#   /'
  else
    pass "kernel log is free of warnings, oopses and leak reports"
  fi
}
