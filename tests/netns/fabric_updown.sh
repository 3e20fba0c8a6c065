#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# up/down are idempotent, the fabric is what it claims to be, and down leaves
# nothing behind (namespaces, nft tables, state, raised sysctls).
source "$(dirname "$0")/lib.sh" || exit 1
require_netns noblaster
use_prefix mrt-ud

other_fabrics=0
if compgen -G "/run/metaroce-fabric/*.state" >/dev/null; then
    other_fabrics=1
    note "another fabric is up ($(cd /run/metaroce-fabric && echo *.state)); the sysctl restore is not checked"
fi
rmem0=$(cat /proc/sys/net/core/rmem_max)
wmem0=$(cat /proc/sys/net/core/wmem_max)

ns_list() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-" | sort | tr '\n' ' ' || true; }

# down with nothing up succeeds, twice.
fab down || fail "down with nothing up failed"
fab down || fail "second down with nothing up failed"
[[ -z $(ns_list) ]] || fail "namespaces exist before up: $(ns_list)"
pass "down when nothing is up"

fab up --hosts 3 --paths 3 >/dev/null || fail "up failed"
want="${PREFIX}-h0 ${PREFIX}-h1 ${PREFIX}-h2 ${PREFIX}-swl ${PREFIX}-swr "
[[ $(ns_list) == "$want" ]] || fail "namespaces after up: '$(ns_list)' want '$want'"
fab status --json >"$WORK/s1.json" || fail "status --json failed"
json "$WORK/s1.json" 'd["hosts_count"] == 3 and d["paths_count"] == 3' | grep -qx true || fail "status shape"
json "$WORK/s1.json" '[h["switch"] for h in d["hosts"]]' | grep -qx '\["left", "right", "left"\]' || fail "hosts do not alternate"
[[ $(json "$WORK/s1.json" '[h["ip"] for h in d["hosts"]]') == '["10.77.10.2", "10.77.11.2", "10.77.12.2"]' ]] || fail "host addresses"
for sw in swl swr; do
    ip netns exec "${PREFIX}-$sw" nft list table inet metaroce_fabric >/dev/null || fail "no nft table in $sw"
    [[ $(ip netns exec "${PREFIX}-$sw" cat /proc/sys/net/ipv4/fib_multipath_hash_policy) == 3 ]] || fail "hash policy in $sw"
    (( $(ip netns exec "${PREFIX}-$sw" cat /proc/sys/net/ipv4/fib_multipath_hash_fields) == 0x37 )) || fail "hash fields in $sw"
    (( $(ip netns exec "${PREFIX}-$sw" cat /proc/sys/net/ipv4/fib_multipath_hash_seed) != 0 )) || fail "hash seed not fixed in $sw"
done
nh=$(ip -n "${PREFIX}-swl" route show 10.77.11.0/24 | grep -c nexthop || true)
[[ $nh == 3 ]] || fail "left switch has $nh nexthops to h1, want 3"
(( $(cat /proc/sys/net/core/rmem_max) >= 67108864 )) || fail "rmem_max not raised"
pass "up builds 3 hosts, 3 paths, ECMP routes, counters"

# Connectivity both ways across the fabric and on one switch (h0 <-> h2).
if [[ -n $BLASTER && -x $BLASTER ]]; then
    for pair in "0 1" "1 0" "0 2"; do
        read -r from to <<<"$pair"
        start_blaster_receiver "h$to" 5001 4 "$WORK/r.json" --idle 0.5
        fab exec "h$from" "$BLASTER" send --to "$(fab addr "h$to"):5001" --seconds 0.3 --rate 50 --ports 4 >/dev/null
        wait "$BLASTER_RECV"
        got=$(json "$WORK/r.json" 'd["packets"]')
        (( got > 100 )) || fail "h$from -> h$to: only $got packets arrived"
    done
    pass "h0->h1, h1->h0, h0->h2 carry traffic"
fi

# up again with the same shape: same fabric, impairments cleared.
fab set all --loss 0.05 --rate 50mbit
fab up --hosts 3 --paths 3 >/dev/null || fail "second up failed"
fab status --json >"$WORK/s2.json"
strip='{k: v for k, v in d.items() if k != "paths"} | {"paths": [{k: v for k, v in p.items() if k not in ("left_to_right", "right_to_left")} for p in d["paths"]]}'
[[ $(json "$WORK/s1.json" "$strip") == "$(json "$WORK/s2.json" "$strip")" ]] || fail "second up differs from the first: $(diff <(json "$WORK/s1.json" "$strip") <(json "$WORK/s2.json" "$strip"))"
[[ $(ns_list) == "$want" ]] || fail "namespaces after second up: '$(ns_list)'"
[[ -z $(tc -n "${PREFIX}-swl" qdisc show dev p0 | grep tbf || true) ]] || fail "rate limit survived up"
pass "up twice gives the same fabric"

# A different shape rebuilds.
fab up --hosts 2 --paths 2 >/dev/null || fail "reshape up failed"
[[ $(ns_list) == "${PREFIX}-h0 ${PREFIX}-h1 ${PREFIX}-swl ${PREFIX}-swr " ]] || fail "reshape left: '$(ns_list)'"
[[ $(fab status --json | json - 'd["paths_count"]') == 2 ]] || fail "reshape paths"
pass "up with another shape rebuilds"

fab down || fail "down failed"
[[ -z $(ns_list) ]] || fail "namespaces left after down: $(ns_list)"
[[ ! -e /run/metaroce-fabric/${PREFIX}.state ]] || fail "state file left"
if ((other_fabrics == 0)); then
    [[ $(cat /proc/sys/net/core/rmem_max) == "$rmem0" ]] || fail "rmem_max $(cat /proc/sys/net/core/rmem_max) not restored to $rmem0"
    [[ $(cat /proc/sys/net/core/wmem_max) == "$wmem0" ]] || fail "wmem_max not restored to $wmem0"
    [[ ! -e /run/metaroce-fabric/sysctl.saved ]] || fail "saved sysctl file left"
fi
! ip netns exec "${PREFIX}-swl" true 2>/dev/null || fail "switch namespace still usable"
[[ $(fab status) == *down* ]] || fail "status after down"
fab down || fail "second down failed"
pass "down removes namespaces, tables, state; sysctls restored"
