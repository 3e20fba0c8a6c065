#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# --rate caps a path's throughput near the limit (tbf), and --rate off lifts it.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-rate

K=2
fab up --hosts 2 --paths "$K" >/dev/null

# Wire bytes per packet on the veth (what tbf meters): payload + UDP + IPv4 + Ethernet.
payload=1400
wire=$((payload + 8 + 20 + 14))

# All paths at 100 Mbit/s; offer twice that (paced, so the rig itself is not
# the bottleneck): the receiver should see close to K x 100 Mbit/s.
fab set all --rate 100mbit
tc -n "${PREFIX}-swl" qdisc show dev p0 | grep -q tbf || fail "no tbf on p0"
tc -n "${PREFIX}-swr" qdisc show dev p0 | grep -q tbf || fail "no tbf on the right side of p0"
blast 2 --ports 64 --sport-base 49000 --payload "$payload" --rate 400
got=$(json "$WORK/recv.json" 'd["goodput_gbps"]')
limit=$(awk -v k="$K" -v p="$payload" -v w="$wire" 'BEGIN { printf "%.4f", k * 0.1 * p / w }')
note "limit $K x 100mbit = $limit Gb/s of payload; received $got Gb/s"
between "$got" "$(awk -v l="$limit" 'BEGIN { print l * 0.85 }')" "$(awk -v l="$limit" 'BEGIN { print l * 1.05 }')" ||
    fail "goodput $got Gb/s not within 0.85..1.05 of the limit $limit Gb/s"
pass "2 x 100mbit caps goodput at $got Gb/s (limit $limit)"

# One path limited to 50 Mbit/s, one flow pinned to it offering 4x that
# (an unpaced blast would starve the 2-core rig of the CPU that tbf needs).
fab set all --rate off
sport=
for s in $(seq 49500 49600); do
    if [[ $(fab path h0 h1 --sport "$s" --dport 5000) == 0 ]]; then sport=$s; break; fi
done
[[ -n $sport ]] || fail "no source port maps to p0"
fab set 0 --rate 50mbit
blast 1.5 --ports 1 --sport-base "$sport" --payload "$payload" --rate 200
got=$(json "$WORK/recv.json" 'd["goodput_gbps"]')
limit=$(awk -v p="$payload" -v w="$wire" 'BEGIN { printf "%.4f", 0.05 * p / w }')
note "one flow on p0 at 50mbit: received $got Gb/s (limit $limit)"
between "$got" "$(awk -v l="$limit" 'BEGIN { print l * 0.85 }')" "$(awk -v l="$limit" 'BEGIN { print l * 1.05 }')" ||
    fail "a 200 Mbit/s flow on a 50mbit path got $got Gb/s, limit $limit"
pass "50mbit on p0 caps a 200 Mbit/s flow at $got Gb/s"

# Off: the same flow gets all it offers.
fab set 0 --rate off
! tc -n "${PREFIX}-swl" qdisc show dev p0 | grep -q tbf || fail "tbf left on p0 after --rate off"
blast 1 --ports 1 --sport-base "$sport" --payload "$payload" --rate 200
got=$(json "$WORK/recv.json" 'd["goodput_gbps"]')
between "$got" 0.18 0.21 || fail "after --rate off only $got Gb/s of the 0.2 offered"
pass "rate off lifts the cap ($got Gb/s)"

! fab set 0 --rate fast 2>/dev/null || fail "--rate fast accepted"
pass "bad rate refused"
