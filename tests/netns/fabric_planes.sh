#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# up --planes 2: every host has eth1 on plane 1 at the documented address,
# plane-1 traffic crosses plane 1's paths only, impairments on plane 1 and a
# host's plane-1 link going down leave plane 0 alone, up restores, and down
# removes every plane.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-pl

ns_list() { ip netns list | awk '{print $1}' | grep -E "^${PREFIX}-" | sort | tr '\n' ' ' || true; }

# offered PLANE: packets routed left->right onto plane PLANE's paths, all paths together.
offered() {
    fab status --json |
        json - "sum(p['left_to_right']['offered_packets'] for p in ([d] + d['extra_planes'])[$1]['paths'])"
}

# reach PLANE: how many packets of a short h0 burst h1 receives on its plane-PLANE
# address (0 too when h0 has no route there and the sender fails).
reach() {
    local BLAST_PLANE=$1
    start_blaster_receiver h1 5001 3 "$WORK/reach.json" --idle 0.5
    fab exec h0 "$BLASTER" send --to "$(fab addr h1 --plane "$1"):5001" --seconds 0.3 --rate 50 --ports 4 \
        >/dev/null 2>&1 || true
    wait "$BLASTER_RECV" || fail "receiver failed"
    json "$WORK/reach.json" 'd["packets"]'
}

fab up --planes 2 >/dev/null || fail "up --planes 2 failed"
want="${PREFIX}-h0 ${PREFIX}-h1 ${PREFIX}-swl ${PREFIX}-swl1 ${PREFIX}-swr ${PREFIX}-swr1 "
[[ $(ns_list) == "$want" ]] || fail "namespaces after up: '$(ns_list)' want '$want'"
for i in 0 1; do
    ns="${PREFIX}-h$i"
    [[ $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}') == "10.77.1$i.2/24" ]] || fail "h$i eth0 address"
    [[ $(ip -n "$ns" -4 -o addr show dev eth1 | awk '{print $4}') == "10.78.1$i.2/24" ]] || fail "h$i eth1 address"
    [[ $(ip -n "$ns" route show 10.78.0.0/16) == "10.78.0.0/16 via 10.78.1$i.1 dev eth1"* ]] ||
        fail "h$i route to plane 1: $(ip -n "$ns" route show 10.78.0.0/16)"
    [[ $(fab addr "h$i" --plane 1) == "10.78.1$i.2" ]] || fail "addr h$i --plane 1: $(fab addr "h$i" --plane 1)"
done
fab status --json >"$WORK/s.json"
json "$WORK/s.json" "(d['planes_count'] == 2 and len(d['extra_planes']) == 1
    and d['extra_planes'][0]['switches'] == {'left': '${PREFIX}-swl1', 'right': '${PREFIX}-swr1'}
    and [(h['dev'], h['ip'], h['gateway']) for h in d['extra_planes'][0]['hosts']]
        == [('eth1', '10.78.10.2', '10.78.10.1'), ('eth1', '10.78.11.2', '10.78.11.1')]
    and [h['ip'] for h in d['hosts']] == ['10.77.10.2', '10.77.11.2'])" | grep -qx true ||
    fail "status --json does not describe plane 1: $(json "$WORK/s.json" 'd["extra_planes"]')"
pass "up --planes 2: eth1 on 10.78.<10+i>.2/24 in every host, switches swl1/swr1"

# Plane-1 traffic crosses plane 1's switches only.
before0=$(offered 0); before1=$(offered 1)
BLAST_PLANE=1 blast 1 --ports 16 --payload 1400 --rate 200
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
on0=$(($(offered 0) - before0)); on1=$(($(offered 1) - before1))
note "plane 1 blast: sent $sent received $recv; offered on plane 0 paths $on0, plane 1 paths $on1"
(( sent > 1000 && recv >= sent * 99 / 100 )) || fail "h0 -> h1 on plane 1: received $recv of $sent"
(( on1 >= recv )) || fail "plane 1 paths carried $on1 packets, $recv arrived"
(( on0 == 0 )) || fail "$on0 packets of plane 1 traffic crossed plane 0"
pass "h0 -> h1 on plane 1 crosses plane 1's paths ($on1 packets), none on plane 0's"

# A blackhole on every plane-1 path leaves plane 0 alone.
fab set all --plane 1 --blackhole on
fab status --json >"$WORK/s.json"
[[ $(json "$WORK/s.json" '[[p["blackhole"] for p in plane["paths"]] for plane in [d] + d["extra_planes"]]') \
    == '[[false, false, false, false], [true, true, true, true]]' ]] || fail "status does not show the blackhole on plane 1 only"
blast 1 --ports 16 --payload 1400 --rate 200
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
(( sent > 1000 && recv >= sent * 99 / 100 )) || fail "plane 0 with plane 1 blackholed: received $recv of $sent"
(( $(reach 1) == 0 )) || fail "packets crossed the blackholed plane 1"
fab set all --plane 1 --blackhole off
pass "blackhole on plane 1 cuts plane 1 only (plane 0: $recv of $sent)"

# h0's link to plane 1 down: h1's plane-1 address unreachable from h0, plane 0 fine.
fab set-plane 1 --host h0 --state down
ip -n "${PREFIX}-h0" link show eth1 | grep -q 'state DOWN' || fail "h0 eth1 not down"
ip -n "${PREFIX}-h1" link show eth1 | grep -q 'state UP' || fail "h1 eth1 went down too"
[[ $(fab status --json | json - '[h["link"] for h in d["hosts"] + d["extra_planes"][0]["hosts"]]') \
    == '["up", "up", "down", "up"]' ]] || fail "status does not show h0's plane-1 link down"
got=$(reach 1)
(( got == 0 )) || fail "h0 reached h1 on plane 1 ($got packets) with its plane-1 link down"
got=$(reach 0)
(( got > 1000 )) || fail "h0 -> h1 on plane 0: only $got packets with h0's plane-1 link down"
pass "h0's plane-1 link down: plane 1 unreachable, plane 0 carries $got packets"

fab set-plane 1 --host h0 --state up
got=$(reach 1)
(( got > 1000 )) || fail "h0 -> h1 on plane 1 after set-plane up: only $got packets"
pass "set-plane up restores plane 1 ($got packets)"

# Every host's plane-1 link down; up with the same shape brings them back.
fab set-plane 1 --state down
for i in 0 1; do
    ip -n "${PREFIX}-h$i" link show eth1 | grep -q 'state DOWN' || fail "h$i eth1 not down"
done
fab up --planes 2 >/dev/null || fail "second up failed"
[[ $(ns_list) == "$want" ]] || fail "namespaces after second up: '$(ns_list)'"
got=$(reach 1)
(( got > 1000 )) || fail "h0 -> h1 on plane 1 after up: only $got packets"
pass "up on a fabric with plane 1 down brings its links back ($got packets)"

# Another plane count rebuilds.
fab up >/dev/null || fail "up with one plane failed"
[[ $(ns_list) == "${PREFIX}-h0 ${PREFIX}-h1 ${PREFIX}-swl ${PREFIX}-swr " ]] || fail "one-plane up left: '$(ns_list)'"
! ip -n "${PREFIX}-h0" link show eth1 >/dev/null 2>&1 || fail "h0 still has eth1"
[[ $(fab status --json | json - '[d["planes_count"], d["extra_planes"]]') == '[1, []]' ]] || fail "status planes"
fab up --planes 2 >/dev/null || fail "up --planes 2 again failed"
[[ $(ns_list) == "$want" ]] || fail "namespaces after up --planes 2 again: '$(ns_list)'"
pass "up with another plane count rebuilds"

fab down || fail "down failed"
[[ -z $(ns_list) ]] || fail "namespaces left after down: $(ns_list)"
pass "down removes every plane"
