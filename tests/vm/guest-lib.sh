# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Helpers for guest test scripts (sourced, bash): PASS/FAIL checks, waiting
# for a condition, and a pair of network namespaces joined by veth with the
# GID index of an address.

PASSED=0
FAILED=0
OUT=/tmp/guest-check.out
pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
show_output() { sed 's/^/#   /' "$OUT" | tail -n "${1:-30}"; }
# check DESC CMD...: CMD must succeed; its output is shown when it does not.
check() {
  local desc=$1; shift
  if "$@" >"$OUT" 2>&1; then pass "$desc"; else fail "$desc (status $?)"; show_output; fi
}
# check_not DESC CMD...: CMD must fail.
check_not() {
  local desc=$1; shift
  if "$@" >"$OUT" 2>&1; then fail "$desc"; show_output; else pass "$desc"; fi
}
# wait_until SECONDS CMD...: polls CMD every 0.2 s until it succeeds.
wait_until() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
in_ns() { local ns=$1; shift; if [ "$ns" = init ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
listening() { in_ns "$1" ss -Hltn "sport = :$2" | grep -q LISTEN; }
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
