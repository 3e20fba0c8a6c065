#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# --blackhole on drops everything on one path (in both directions) while the
# other paths keep carrying their flows; --blackhole off restores the path.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-bh

K=4
fab up --hosts 2 --paths "$K" >/dev/null
stat() { fab status --json | json - "d[\"paths\"][$1][\"$2\"][\"$3\"]"; }

fab set 1 --blackhole on
[[ $(fab status --json | json - 'd["paths"][1]["blackhole"]') == true ]] || fail "status does not show the blackhole"
delivered0=$(stat 1 left_to_right delivered_packets)
blast 2 --ports 64 --sport-base 47000 --payload 1400 --rate 500
offered=$(stat 1 left_to_right offered_packets)
dropped=$(stat 1 left_to_right blackhole_drops)
delivered=$(( $(stat 1 left_to_right delivered_packets) - delivered0 ))
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
note "p1 blackholed: offered $offered dropped $dropped delivered $delivered; sent $sent received $recv"
(( offered > 5000 )) || fail "too few packets on p1 ($offered) to judge"
(( dropped == offered )) || fail "blackhole dropped $dropped of $offered"
(( delivered == 0 )) || fail "$delivered packets crossed the blackholed path"
# What arrives is what the other paths carried.
others=0
for k in 0 2 3; do others=$((others + $(stat $k left_to_right offered_packets))); done
(( recv >= others * 98 / 100 && recv <= others )) || fail "received $recv, other paths carried $others"
(( recv < sent )) || fail "nothing was lost ($recv of $sent)"
pass "blackhole on p1 dropped all $offered of its packets; $recv of $sent arrived via p0, p2, p3"

# Right to left as well.
start_blaster_receiver h0 5003 5 /dev/null --idle 0.5
fab exec h1 "$BLASTER" send --to "$(fab addr h0):5003" --seconds 1 --ports 64 --sport-base 48000 --rate 300 >/dev/null
wait "$BLASTER_RECV"
offered=$(stat 1 right_to_left offered_packets)
dropped=$(stat 1 right_to_left blackhole_drops)
(( offered > 1000 && dropped == offered )) || fail "right->left: dropped $dropped of $offered"
pass "blackhole applies right->left too ($dropped of $offered)"

# Off again: everything arrives, and p1 carries traffic.
fab set 1 --blackhole off
[[ $(fab status --json | json - 'd["paths"][1]["blackhole"]') == false ]] || fail "status still shows the blackhole"
d0=$(stat 1 left_to_right delivered_packets)
blast 1 --ports 64 --sport-base 47000 --payload 1400 --rate 500
d1=$(stat 1 left_to_right delivered_packets)
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
(( recv >= sent * 99 / 100 )) || fail "after blackhole off: received $recv of $sent"
(( d1 - d0 > 1000 )) || fail "p1 carried only $((d1 - d0)) packets after blackhole off"
pass "blackhole off restores p1 ($((d1 - d0)) packets) and delivery ($recv of $sent)"

# after:BYTES: the path carries that many bytes (IP length) in a direction,
# then drops everything: 140 packets of 1428 (a 1400-byte payload in UDP/IPv4).
offered0=$(stat 1 left_to_right offered_packets)
dropped0=$(stat 1 left_to_right blackhole_drops)
fab set 1 --blackhole after:$((140 * 1428))
[[ $(fab status --json | json - 'd["paths"][1]["blackhole_after_bytes"]') == $((140 * 1428)) ]] ||
    fail "status does not show the after:BYTES blackhole"
blast 1 --ports 64 --sport-base 47000 --payload 1400 --rate 500
offered=$(( $(stat 1 left_to_right offered_packets) - offered0 ))
dropped=$(( $(stat 1 left_to_right blackhole_drops) - dropped0 ))
(( offered > 1000 )) || fail "too few packets on p1 ($offered) to judge after:BYTES"
(( offered - dropped == 140 )) || fail "after:$((140 * 1428)) passed $((offered - dropped)) packets of 1428 bytes, not 140"
pass "blackhole after:$((140 * 1428)) passed 140 packets on p1, then dropped $dropped"
fab set 1 --blackhole off
for bad in after:0 after:-5 after:1k sometimes; do
    rc=0
    fab set 1 --blackhole "$bad" >/dev/null 2>"$WORK/err" || rc=$?
    (( rc != 0 )) && grep -q "after:BYTES" "$WORK/err" || fail "--blackhole $bad: exit $rc, $(cat "$WORK/err")"
done
pass "--blackhole refuses after:0, after:-5, after:1k, sometimes: $(cat "$WORK/err")"

# Blackhole on all paths: nothing gets through.
fab set all --blackhole on
blast 0.5 --ports 16 --payload 1400 --rate 200
[[ $(json "$WORK/recv.json" 'd["packets"]') == 0 ]] || fail "packets crossed an all-blackholed fabric"
pass "blackhole on all paths cuts h0 from h1"
