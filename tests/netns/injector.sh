#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# An adversary on each host of a live transfer (docs/spec.md section 9): a
# packet-injector in both hosts' namespaces sniffs the transfer's own
# datagrams (AF_PACKET) and sends mutated copies of some of them to the peer
# from other source ports (bit flips, truncations, extensions, 4- and 8-byte
# overwrites, exact replays, garbage) while metaroce-perf runs verified write,
# read and send in the default integrity mode. Every transfer must complete
# verified, and every injected datagram must be counted by its receiver as a
# drop (corrupted ones fail the CRC; replays carry a packet number already
# seen): the receivers' drop counters grow by exactly what was injected.
#
# Environment (from tests/netns/meson.build): METAROCE_FABRIC, METAROCE_RUN,
# METAROCE_PERF, PACKET_INJECTOR.
source "$(dirname "$0")/lib.sh" || exit 1
RUN=${METAROCE_RUN:?METAROCE_RUN not set}
PERF=${METAROCE_PERF:?METAROCE_PERF not set}
INJECTOR=${PACKET_INJECTOR:?PACKET_INJECTOR not set}
TEST_NAME="injector"

require_netns
use_prefix "mrinj"

fab up --hosts 2 --paths 4 >/dev/null
export METAROCE_STATS=1  # each endpoint prints its counters when it closes
# No daemon: these contexts choose their ports and run in integrity mode.
export METAROCE_DAEMON=0

# The drops a receiver counted (runtime and engine), from its stats line.
drops_of() {
    grep -h '"metaroce_stats"' "$1" | json - 'sum(d["metaroce_stats"][k] for k in (
        "unknown_sender_drops", "truncated_drops", "rx_drop_malformed", "rx_drop_unknown_peer",
        "rx_drop_integrity", "rx_drop_security_mode", "rx_drop_stale_epoch", "rx_drop_replay"))'
}
field_of() { grep -h '"metaroce_stats"' "$1" | json - "d[\"metaroce_stats\"][\"$2\"]"; }
injected_of() { grep -h '"injector"' "$1" | json - "d[\"injector\"][\"$2\"]"; }
# Datagrams that reached HOST but no runtime read: its UDP NoPorts (they came
# after the receiver had closed and printed its counters) and InErrors (a full
# receive buffer, while a progress thread waits for a core), and the backlog
# drops of every CPU (softnet_stat is not per namespace; nothing else runs
# during the test).
never_read() {
    local udp backlog=0 dropped
    udp=$(ip netns exec "${PREFIX}-$1" cat /proc/net/snmp | awk '/^Udp:/ { if (seen) print $3 + $4; seen = 1 }')
    while read -r _ dropped _; do backlog=$((backlog + 16#$dropped)); done </proc/net/softnet_stat
    echo $((udp + backlog))
}
# sniffing HOST: a packet socket is open in HOST's namespace (the injector's:
# nothing else there opens one), which sees the traffic from then on.
sniffing() { [[ $(ip netns exec "${PREFIX}-$1" cat /proc/net/packet | wc -l) -gt 1 ]]; }

h0=$(fab addr h0)
h1=$(fab addr h1)
port=19800
for t in write read send; do
    port=$((port + 1))
    # The injectors start first and stop when the transfer is over.
    ip netns exec "${PREFIX}-h0" "$INJECTOR" --dest "$h1" --every 8 --max 20000 --seconds 100 --seed 1 \
        >"$WORK/inj-h0" 2>&1 &
    inj0=$!
    ip netns exec "${PREFIX}-h1" "$INJECTOR" --dest "$h0" --every 8 --max 20000 --seconds 100 --seed 2 \
        >"$WORK/inj-h1" 2>&1 &
    inj1=$!
    read -r -a unread0 <<<"$(never_read h0) $(never_read h1)"
    wait_until 30 sniffing h0 && wait_until 30 sniffing h1 ||
        { cat "$WORK/inj-h0" "$WORK/inj-h1" >&2; fail "$t: the injectors did not start"; }
    timeout 120 ip netns exec "${PREFIX}-h1" "$RUN" --dev mr0=eth0 \
        "$PERF" -d mr0 --test "$t" -s 65536 -n 1500 -p "$port" >"$WORK/server" 2>&1 &
    spid=$!
    wait_tcp_listener -n "${PREFIX}-h1" -p "$spid" "$port" || { cat "$WORK/server" >&2; fail "$t: the server did not listen"; }
    timeout 120 ip netns exec "${PREFIX}-h0" "$RUN" --dev mr0=eth0 \
        "$PERF" -d mr0 --test "$t" -s 65536 -n 1500 -p "$port" "$h1" >"$WORK/client" 2>&1 ||
        { cat "$WORK/client" "$WORK/server" >&2; fail "$t: the client failed under injection"; }
    wait "$spid" || { cat "$WORK/server" >&2; fail "$t: the server failed under injection"; }
    kill -TERM "$inj0" "$inj1" 2>/dev/null || true
    wait "$inj0" "$inj1" || true
    grep -q '"verified":true' "$WORK/client" || { cat "$WORK/client" >&2; fail "$t: data not verified"; }

    read -r -a unread1 <<<"$(never_read h0) $(never_read h1)"

    # Injected at each host = counted as dropped by its peer.
    for pair in "h0 client server h1 1" "h1 server client h0 0"; do
        read -r -a pair_args <<<"$pair"
        set -- "${pair_args[@]}"
        # What the peer's runtime never read (genuine datagrams among them)
        # bounds how many injected ones it could not count.
        unread=$((unread1[$5] - unread0[$5]))
        inj=$(injected_of "$WORK/inj-$1" injected)
        replays=$(injected_of "$WORK/inj-$1" replay)
        dropped=$(drops_of "$WORK/$3")
        replay_drops=$(field_of "$WORK/$3" rx_drop_replay)
        (( inj > 0 )) || { cat "$WORK/inj-$1" >&2; fail "$t: the injector on $1 sent nothing"; }
        for k in bit_flip truncate extend overwrite4 overwrite8 replay garbage; do
            (( $(injected_of "$WORK/inj-$1" "$k") > 0 )) || fail "$t: no $k injected from $1"
        done
        # Allow for those and for 1% + 2 more, nothing else.
        (( dropped <= inj && dropped >= inj - inj / 100 - 2 - unread )) || { grep -h metaroce_stats "$WORK/$3" >&2;
            cat "$WORK/inj-$1" >&2
            fail "$t: $inj datagrams injected from $1, but its peer counted $dropped drops ($unread never read at $4)"; }
        (( replay_drops >= replays - replays / 100 - 2 - unread )) ||
            fail "$t: $replays exact replays from $1 but $replay_drops replay drops ($unread never read at $4)"
        note "$t: $inj injected from $1 ($replays exact replays), $dropped counted as dropped by the $3 ($unread never read at $4)"
    done
    pass "metaroce-perf $t verified with mutated and replayed copies injected both ways; every one counted as dropped"
done
