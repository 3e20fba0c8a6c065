#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The real data path on the namespace fabric: unmodified perftest and
# metaroce-perf through metaroce-run between two hosts joined by 4 ECMP paths.
#
#   datapath.sh perftest      ib_write_bw/ib_read_bw/ib_send_bw/ib_write_lat at 0 and 1% loss
#   datapath.sh verified      metaroce-perf write/read/send checked byte for byte at 5% loss
#   datapath.sh two-pairs     two pairs of processes at once (4 hosts)
#   datapath.sh blackhole     a path blackholed mid-transfer
#   datapath.sh peer-killed   the server killed mid-transfer: the client gets RETRY_EXC_ERR
#   datapath.sh stray         garbage thrown at a live endpoint during a transfer
#   datapath.sh mtu           the defaults fit the links (1500 bytes, then jumbo frames): active
#                             MTU, whole-frame packets, no IP fragment; a smaller path_mtu per QP
#
# Environment (from tests/netns/meson.build): METAROCE_FABRIC, METAROCE_RUN,
# METAROCE_PERF, UDP_BLASTER.
source "$(dirname "$0")/lib.sh"
RUN=${METAROCE_RUN:?METAROCE_RUN not set}
PERF=${METAROCE_PERF:?METAROCE_PERF not set}
scenario=${1:?usage: datapath.sh SCENARIO}
TEST_NAME="datapath-$scenario"

require_netns
command -v ib_write_bw >/dev/null 2>&1 || skip "perftest not installed"
use_prefix "mrd-${scenario:0:6}"

PIDS=()
stop_all() { for p in ${PIDS[@]+"${PIDS[@]}"}; do kill -9 "$p" 2>/dev/null || true; done; }
at_exit stop_all


# pair TIMEOUT SERVER_HOST CLIENT_HOST PORT PROGRAM ARGS...: server in the
# background, client in the foreground; both must exit 0. Output in $WORK.
pair() {
    local timeout=$1 server=$2 client=$3 port=$4; shift 4
    local tag
    tag=$(basename "$1")-$port
    timeout "$timeout" ip netns exec "${PREFIX}-$server" "$RUN" --dev mr0=eth0 \
        "$@" -p "$port" >"$WORK/$tag.server" 2>&1 &
    local spid=$!
    sleep 0.5
    if ! timeout "$timeout" ip netns exec "${PREFIX}-$client" "$RUN" --dev mr0=eth0 \
        "$@" -p "$port" "$(fab addr "$server")" >"$WORK/$tag.client" 2>&1; then
        cat "$WORK/$tag.client" "$WORK/$tag.server" >&2
        wait "$spid" || true
        fail "client of $* failed"
    fi
    wait "$spid" || { cat "$WORK/$tag.server" >&2; fail "server of $* failed"; }
}

# perftest_bw FILE: the "BW average[MB/sec]" column of perftest's report.
perftest_bw() { awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $4 }' "$1" | tail -1; }

fab up --hosts 2 --paths 4 >/dev/null

case $scenario in
mtu)
    # l2r_bytes_per_packet: average size of the packets offered left->right
    # (the client's data) since the counters read into $WORK/l2r.
    l2r_counts() { fab status --json | json - 'str(sum(p["left_to_right"]["offered_bytes"] for p in d["paths"])) + " " + str(sum(p["left_to_right"]["offered_packets"] for p in d["paths"]))'; }
    fragments() { fab status --json | json - 'd["fragments"]'; }
    check_frames() {  # LINK_MTU IB_MTU MIN_AVG MAX_AVG [PERFTEST_ARGS...]
        local link=$1 ib=$2 lo=$3 hi=$4 b0 p0 b1 p1 avg frag0; shift 4
        ip netns exec "${PREFIX}-h0" "$RUN" --dev mr0=eth0 ibv_devinfo -d mr0 >"$WORK/devinfo" 2>&1 ||
            { cat "$WORK/devinfo" >&2; fail "ibv_devinfo failed"; }
        grep -Eq "active_mtu:[[:space:]]+$ib " "$WORK/devinfo" ||
            fail "MTU $link: the port reports $(grep active_mtu "$WORK/devinfo"), not $ib"
        read -r b0 p0 < <(l2r_counts)
        frag0=$(fragments)
        pair 120 h1 h0 $((18600 + RANDOM % 300)) ib_write_bw -d mr0 -x 0 -s 65536 -n 2000 -F "$@"
        rm -f "$WORK"/ib_write_bw-*
        read -r b1 p1 < <(l2r_counts)
        avg=$(( (b1 - b0) / (p1 - p0) ))
        (( $(fragments) == frag0 )) || fail "MTU $link $*: $(( $(fragments) - frag0 )) IP fragments crossed the fabric"
        between "$avg" "$lo" "$hi" || fail "MTU $link $*: data packets average $avg bytes, not $lo..$hi"
        pass "MTU $link $*: port MTU $ib, data packets of $avg bytes on average, no IP fragment"
    }
    check_frames 1500 1024 1400 1500
    # A QP whose path_mtu is below the port's sends packets of that MTU.
    check_frames 1500 1024 540 620 -m 512
    fab up --hosts 2 --paths 4 --jumbo >/dev/null
    check_frames 9000 4096 8000 9000
    ;;
perftest)
    for loss in 0 0.01; do
        fab set all --loss "$loss"
        for prog in ib_write_bw ib_read_bw ib_send_bw; do
            pair 120 h1 h0 $((18600 + RANDOM % 300)) "$prog" -d mr0 -x 0 -s 65536 -n 2000 -F
            bw=$(perftest_bw "$WORK/$prog-"*.client)
            rm -f "$WORK/$prog-"*
            between "${bw:-0}" 0.001 1e9 || fail "$prog at loss $loss reported no bandwidth"
            pass "$prog at loss $loss: $bw MB/s"
        done
        pair 120 h1 h0 $((18900 + RANDOM % 99)) ib_write_lat -d mr0 -x 0 -s 64 -n 1000 -F
        lat=$(awk '/^ *64 +1000/ { print $6 }' "$WORK"/ib_write_lat-*.client)
        rm -f "$WORK"/ib_write_lat-*
        between "${lat:-0}" 0.001 1e9 || fail "ib_write_lat at loss $loss reported no latency"
        pass "ib_write_lat at loss $loss: typical $lat usec"
    done
    ;;
verified)
    fab set all --loss 0.05
    for t in write read send; do
        pair 180 h1 h0 $((19000 + RANDOM % 300)) "$PERF" -d mr0 --test "$t" -s 65536 -n 1500
        grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "$t: data not verified"
        pass "metaroce-perf $t at 5% loss: $(grep -o '"gbps":[0-9.]*' "$WORK"/metaroce-perf-*.client), verified"
        rm -f "$WORK"/metaroce-perf-*
    done
    ;;
two-pairs)
    fab up --hosts 4 --paths 4 >/dev/null
    pair 180 h1 h0 19400 "$PERF" -d mr0 --test write -s 65536 -n 3000 &
    first=$!
    pair 180 h3 h2 19401 "$PERF" -d mr0 --test write -s 65536 -n 3000
    wait "$first" || fail "the first pair failed"
    for f in "$WORK"/metaroce-perf-*.client; do grep -q '"verified":true' "$f" || fail "$f not verified"; done
    pass "two pairs at once, both verified"
    ;;
blackhole)
    # Blackhole the busiest path once the transfer is under way (which paths
    # the 4 source ports hash onto depends on the ports the kernel gave).
    ( sleep 1; fab status --json | json - \
          'max(range(len(d["paths"])), key=lambda i: d["paths"][i]["left_to_right"]["offered_packets"])' >"$WORK/bh"
      fab set "$(cat "$WORK/bh")" --blackhole on --exempt-port 19500 ) &  # not the TCP side channel
    PIDS+=($!)
    pair 180 h1 h0 19500 "$PERF" -d mr0 --test write -s 65536 -n 20000
    grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "not verified"
    k=$(cat "$WORK/bh")
    drops=$(fab status --json | json - "d[\"paths\"][$k][\"left_to_right\"][\"blackhole_drops\"]")
    (( drops > 0 )) || fail "the blackhole on path $k dropped nothing: the transfer ended before it"
    pass "path $k blackholed mid-transfer ($drops packets dropped): completed and verified"
    ;;
peer-killed)
    port=19600
    timeout 120 ip netns exec "${PREFIX}-h1" "$RUN" --dev mr0=eth0 "$PERF" -d mr0 --test write \
        -s 65536 -n 10000000 -p "$port" >"$WORK/server" 2>&1 &
    spid=$!
    PIDS+=($spid)
    sleep 0.5
    start=$(date +%s.%N)
    timeout 120 ip netns exec "${PREFIX}-h0" "$RUN" --dev mr0=eth0 "$PERF" -d mr0 --test write \
        -s 65536 -n 10000000 -p "$port" "$(fab addr h1)" >"$WORK/client" 2>&1 &
    cpid=$!
    sleep 2
    pkill -9 -P "$spid" 2>/dev/null || true
    kill -9 "$spid" 2>/dev/null || true
    killed=$(date +%s.%N)
    rc=0
    wait "$cpid" || rc=$?
    ended=$(date +%s.%N)
    grep -q "transport retry counter exceeded" "$WORK/client" || { cat "$WORK/client" >&2; fail "client did not report RETRY_EXC_ERR (rc $rc)"; }
    (( rc == 1 )) || fail "client exit status $rc"
    # metaroce-perf sets timeout 14 (67 ms) and retry_cnt 7: 8 intervals, ~0.54 s.
    took=$(awk -v a="$killed" -v b="$ended" 'BEGIN { printf "%.2f", b - a }')
    between "$took" 0 5 || fail "the client noticed only after $took s"
    pass "peer killed: client got RETRY_EXC_ERR after $took s (started $(awk -v a="$start" -v b="$killed" 'BEGIN { printf "%.1f", b - a }') s into the transfer)"
    ;;
stray)
    dst=$(fab addr h1)
    ( for i in 1 2 3; do
          timeout 5 ip netns exec "${PREFIX}-h0" "$BLASTER" send --to "$dst:4792" --seconds 1 --ports 8 \
              --payload 300 --rate 50 >/dev/null 2>&1 || true
      done ) &
    PIDS+=($!)
    export METAROCE_STATS=1  # the endpoints print their drop counters when they close
    pair 180 h1 h0 19700 "$PERF" -d mr0 --test write -s 65536 -n 8000
    grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "not verified"
    drops=$(grep -h '"metaroce_stats"' "$WORK"/metaroce-perf-*.server | json - 'sum(d["metaroce_stats"][k] for k in
        ("unknown_sender_drops", "truncated_drops", "rx_drop_malformed"))')
    (( ${drops:-0} > 0 )) || { cat "$WORK"/metaroce-perf-*.server >&2; fail "the garbage was not counted as dropped"; }
    pass "garbage at the home port during a transfer: $drops datagrams counted as dropped; transfer completed and verified"
    ;;
*)
    fail "unknown scenario $scenario"
    ;;
esac
