#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# --loss 0.1 on one path drops 10% +- 2% of that path's packets (nft counters)
# and nothing elsewhere; on all paths, 10% +- 2% of the packets fail to arrive
# (receiver counts); loss applies in both directions; --loss 0 restores.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-loss

K=4
fab up --hosts 2 --paths "$K" >/dev/null
path_stat() {  # path_stat K DIRECTION FIELD
    fab status --json | json - "d[\"paths\"][$1][\"$2\"][\"$3\"]"
}

# One path, left->right.
fab set 2 --loss 0.1
[[ $(fab status --json | json - 'd["paths"][2]["loss"]') == 0.1 ]] || fail "status does not show loss 0.1 on p2"
blast 2 --ports 64 --sport-base 43000 --payload 1400 --rate 500
offered=$(path_stat 2 left_to_right offered_packets)
dropped=$(path_stat 2 left_to_right loss_drops)
ratio=$(awk -v d="$dropped" -v o="$offered" 'BEGIN { printf "%.4f", d / o }')
note "p2: offered $offered, dropped $dropped (ratio $ratio)"
(( offered > 10000 )) || fail "too few packets on p2 ($offered) to judge"
between "$ratio" 0.08 0.12 || fail "p2 dropped $ratio of its packets, want 0.10 +- 0.02"
for k in 0 1 3; do
    [[ $(path_stat $k left_to_right loss_drops) == 0 ]] || fail "p$k dropped packets without loss set"
done
pass "loss 0.1 on p2 drops $ratio of p2's packets and nothing on other paths"

# Both directions: h1 -> h0 on the same path.
start_blaster_receiver h0 5002 6 "$WORK/r2.json" --idle 0.5
fab exec h1 "$BLASTER" send --to "$(fab addr h0):5002" --seconds 1.5 --ports 64 --sport-base 44000 --rate 500 >/dev/null
wait "$BLASTER_RECV"
offered=$(path_stat 2 right_to_left offered_packets)
dropped=$(path_stat 2 right_to_left loss_drops)
ratio=$(awk -v d="$dropped" -v o="$offered" 'BEGIN { printf "%.4f", d / o }')
(( offered > 5000 )) || fail "too few packets on p2 right->left ($offered)"
between "$ratio" 0.08 0.12 || fail "p2 right->left dropped $ratio, want 0.10 +- 0.02"
pass "loss applies right->left too ($ratio)"

# All paths: end to end, from the receiver's count.
fab set all --loss 0.1
blast 2 --ports 64 --sport-base 45000 --payload 1400 --rate 500
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
lost=$(awk -v s="$sent" -v r="$recv" 'BEGIN { printf "%.4f", 1 - r / s }')
note "all paths: sent $sent received $recv (lost $lost)"
between "$lost" 0.08 0.12 || fail "end to end loss $lost, want 0.10 +- 0.02"
pass "loss 0.1 on all paths loses $lost end to end"

# 0.01 as a percentage string, then back to 0.
fab set all --loss 1%
[[ $(fab status --json | json - '[p["loss"] for p in d["paths"]]') == "[0.01, 0.01, 0.01, 0.01]" ]] || fail "1% not parsed as 0.01"
fab set all --loss 0
blast 1 --ports 64 --sport-base 46000 --payload 1400 --rate 500
sent=$(json "$WORK/send.json" 'd["packets"]')
recv=$(json "$WORK/recv.json" 'd["packets"]')
(( recv >= sent * 99 / 100 )) || fail "after --loss 0: received $recv of $sent"
pass "loss 0 restores delivery ($recv of $sent)"

# Nonsense is refused.
! fab set all --loss 1.5 2>/dev/null || fail "--loss 1.5 accepted"
! fab set 9 --loss 0.1 2>/dev/null || fail "path 9 of 4 accepted"
pass "bad values refused"
