#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# `ip route get ... ipproto udp sport S dport D` in the switch predicts the path
# a flow takes: send from one source port at a time and check that exactly the
# predicted path's counter moved. Also checks `metaroce-fabric path` agrees.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-route

K=4
fab up --hosts 2 --paths "$K" >/dev/null
src=$(fab addr h0); dst=$(fab addr h1)
dport=5000
# One receiver for all the single-port flows below.
start_blaster_receiver h1 "$dport" 60 /dev/null --idle 0
# The switch counts a packet when it forwards it, which may be after the
# sender has exited: wait until the paths counted what was sent.
counted() { local -a now; read -ra now <<<"$(offered_l2r)"; (( $(sum "${now[@]}") - $(sum "${before[@]}") >= $1 )); }
sum() { local s=0 v; for v in "$@"; do s=$((s + v)); done; echo "$s"; }
declare -A seen=()
for sport in 42000 42001 42002 42003 42004 42005 42006 42007 42008 42009; do
    route=$(ip -n "${PREFIX}-swl" route get "$dst" from "$src" iif h0 ipproto udp sport "$sport" dport "$dport")
    [[ $route =~ dev\ p([0-9]+) ]] || fail "unexpected route output: $route"
    predicted=${BASH_REMATCH[1]}
    via_tool=$(fab path h0 h1 --sport "$sport" --dport "$dport")
    [[ $via_tool == "$predicted" ]] || fail "metaroce-fabric path says $via_tool, ip route get says $predicted"

    read -ra before <<<"$(offered_l2r)"
    sent=$(fab exec h0 "$BLASTER" send --to "$dst:$dport" --seconds 1 --ports 1 --sport-base "$sport" \
        --payload 1400 --rate 200 --max-packets 2000 | json - 'd["packets"]')
    (( sent > 0 )) || fail "sport $sport: nothing sent"
    wait_until 10 counted $((sent * 99 / 100)) || note "sport $sport: the paths counted fewer than 99% of $sent packets"
    read -ra after <<<"$(offered_l2r)"
    for ((k = 0; k < K; k++)); do
        delta=$((after[k] - before[k]))
        if ((k == predicted)); then
            (( delta >= sent * 99 / 100 )) || fail "sport $sport: predicted path p$k carried $delta of $sent"
        else
            (( delta == 0 )) || fail "sport $sport: path p$k (not predicted p$predicted) carried $delta packets"
        fi
    done
    seen[$predicted]=1
    note "sport $sport -> p$predicted ($sent packets, all on p$predicted)"
done
(( ${#seen[@]} >= 2 )) || fail "10 source ports all mapped to one path: hashing ignores the port"
pass "ip route get predicted the path of 10 single-port flows (${#seen[@]} distinct paths)"
stop_process "$BLASTER_RECV"

# The map is reproducible: the hash seed is fixed, so a rebuilt fabric agrees.
p1=$(fab path h0 h1 --sport 42000 --dport "$dport")
fab down; fab up --hosts 2 --paths "$K" >/dev/null
p2=$(fab path h0 h1 --sport 42000 --dport "$dport")
[[ $p1 == "$p2" ]] || fail "port->path map changed across down/up ($p1 vs $p2)"
pass "port->path map reproducible across down/up"
