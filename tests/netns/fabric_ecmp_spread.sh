#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# ECMP really spreads: 64 UDP flows (source ports) from h0 to h1 cross all K
# paths, and every path carries at least half of its fair share of packets.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-ecmp

for K in 2 4; do
    fab up --hosts 2 --paths "$K" >/dev/null
    read -ra before <<<"$(offered_l2r)"
    # Paced well below the rig's capacity, so that counts are not shaped by
    # the rig's own drops; fixed source ports => reproducible with the fixed seed.
    blast 2 --ports 64 --sport-base 41000 --payload 1400 --rate 800
    read -ra after <<<"$(offered_l2r)"
    sent=$(json "$WORK/send.json" 'd["packets"]')
    total=0; deltas=()
    for ((k = 0; k < K; k++)); do
        deltas+=($((after[k] - before[k])))
        total=$((total + after[k] - before[k]))
    done
    note "K=$K sent $sent packets; per path: ${deltas[*]}"
    (( total >= sent * 95 / 100 )) || fail "K=$K: paths counted $total of $sent packets sent"
    for ((k = 0; k < K; k++)); do
        (( deltas[k] * 2 * K >= total )) || fail "K=$K: path $k got ${deltas[k]} of $total packets (< half of the fair share $((total / K)))"
    done
    recv=$(json "$WORK/recv.json" 'd["packets"]')
    (( recv >= sent * 95 / 100 )) || fail "K=$K: received $recv of $sent packets"
    pass "K=$K: 64 flows spread over all paths (${deltas[*]})"

    # Random ephemeral ports spread too (more lenient, as the ports are random: >= 1/4).
    read -ra before <<<"$(offered_l2r)"
    blast 1 --ports 64 --payload 1400 --rate 800
    read -ra after <<<"$(offered_l2r)"
    total=0; deltas=()
    for ((k = 0; k < K; k++)); do
        deltas+=($((after[k] - before[k]))); total=$((total + after[k] - before[k]))
    done
    for ((k = 0; k < K; k++)); do
        (( deltas[k] * 4 * K >= total )) || fail "K=$K ephemeral ports: path $k got ${deltas[k]} of $total"
    done
    pass "K=$K: ephemeral source ports spread too (${deltas[*]})"
done
