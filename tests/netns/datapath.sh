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
#   datapath.sh no-grh        ibv_rc_pingpong with a GID (-g 0) works between hosts; without one
#                             (LIDs only) both ends are refused at once, as rxe refuses them
#   datapath.sh planes        one device over both planes of a two-plane fabric: a verified
#                             transfer uses both NICs and survives one going down mid-transfer
#
# Environment (from tests/netns/meson.build): METAROCE_FABRIC, METAROCE_RUN,
# METAROCE_PERF, METAROCED, UDP_BLASTER.
source "$(dirname "$0")/lib.sh" || exit 1
RUN=${METAROCE_RUN:?METAROCE_RUN not set}
PERF=${METAROCE_PERF:?METAROCE_PERF not set}
scenario=${1:?usage: datapath.sh SCENARIO}
TEST_NAME="datapath-$scenario"

require_netns
command -v ib_write_bw >/dev/null 2>&1 || skip "perftest not installed"
use_prefix "mrd-${scenario:0:6}"

# daemon_env HOST: the environment that points HOST's programs at its
# metaroced, once start_daemons has started one there (else none: the
# provider then picks its source ports itself).
daemon_env() {
    local sock=$WORK/metaroced-$1.sock
    if [[ -S $sock ]]; then echo "METAROCE_DAEMON_SOCKET=$sock"; else echo "METAROCE_DAEMON=0"; fi
}

# start_daemons HOST...: metaroced in each HOST's namespace, every setting at
# its default (an empty config file, or DAEMON_CONFIG's text), as a host with
# the package runs it.
start_daemons() {
    local host
    printf '%s' "${DAEMON_CONFIG:-}" >"$WORK/metaroced.toml"
    for host in "$@"; do
        timeout 600 ip netns exec "${PREFIX}-$host" "${METAROCED:?METAROCED not set}" --config "$WORK/metaroced.toml" \
            --socket "$WORK/metaroced-$host.sock" 2>"$WORK/metaroced-$host.log" &
        wait_until 10 test -S "$WORK/metaroced-$host.sock" ||
            { cat "$WORK/metaroced-$host.log" >&2; fail "metaroced did not start on $host"; }
    done
}

# The device the programs use: mr0 on each host's eth0 (the planes scenario
# sets it over eth0 and eth1).
DEV=mr0=eth0

# on HOST TIMEOUT PROGRAM ARGS...: PROGRAM in host HOST's namespace through
# the launcher, device $DEV, under `timeout`. (In the
# background as `on ... &` its PID would be a subshell's: start_server and
# the scenarios that kill a process start it themselves.)
on() {
    local host=$1 limit=$2; shift 2
    timeout "$limit" ip netns exec "${PREFIX}-$host" env "$(daemon_env "$host")" "$RUN" --dev "$DEV" "$@"
}

# start_server HOST TIMEOUT PORT OUT PROGRAM ARGS...: the server side of a
# pair in the background, returning once it listens on TCP PORT (its
# exchange socket); SERVER is the PID of its `timeout`, whose child is the
# program.
start_server() {
    local host=$1 limit=$2 port=$3 out=$4; shift 4
    timeout "$limit" ip netns exec "${PREFIX}-$host" env "$(daemon_env "$host")" "$RUN" --dev "$DEV" "$@" -p "$port" \
        >"$out" 2>&1 &
    SERVER=$!
    wait_tcp_listener -n "${PREFIX}-$host" -p "$SERVER" "$port" || { cat "$out" >&2; fail "server of $* did not listen"; }
}

# pair TIMEOUT SERVER_HOST CLIENT_HOST PORT PROGRAM ARGS...: server in the
# background, client in the foreground; both must exit 0. Output in $WORK.
pair() {
    local timeout=$1 server=$2 client=$3 port=$4; shift 4
    local tag spid
    tag=$(basename "$1")-$port
    start_server "$server" "$timeout" "$port" "$WORK/$tag.server" "$@"
    spid=$SERVER
    if ! on "$client" "$timeout" "$@" -p "$port" "$(fab addr "$server")" >"$WORK/$tag.client" 2>&1; then
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
planes)
    # One device over each host's two NICs, one per plane (docs/verbs.md,
    # "Planes"). Mid-transfer, once it runs on both planes, h0's plane-1 NIC
    # goes down: the plane is drained at once and plane 0 carries on; then
    # the NIC comes back and plane 1 carries data again, in the same transfer.
    fab up --planes 2 >/dev/null
    DEV=mr0=eth0,eth1
    export METAROCE_STATS=1  # the endpoints print their counters when they close
    # A counter read that stays quick on a machine the transfer keeps busy
    # (no python to start), so the watcher acts well before the transfer ends.
    tx_packets() { ip netns exec "${PREFIX}-h0" cat "/sys/class/net/$1/statistics/tx_packets"; }
    grown() { (( $(tx_packets "$1") >= $2 + 3000 )); }
    ( wait_until 60 grown eth1 "$(tx_packets eth1)" || exit 1
      fab set-plane 1 --host h0 --state down
      tx_packets eth1 >"$WORK/eth1-at-down"
      wait_until 60 grown eth0 "$(tx_packets eth0)" || exit 1
      fab set-plane 1 --host h0 --state up  # its addresses and routes back, as a host's network setup does
      tx_packets eth1 >"$WORK/eth1-at-up" ) &
    watcher=$!
    pair 180 h1 h0 19800 "$PERF" -d mr0 --test write -s 65536 -n 40000
    wait "$watcher" || fail "the transfer ended before plane 1 went down and came back"
    client=$(echo "$WORK"/metaroce-perf-*.client)
    grep -q '"verified":true' "$client" || fail "not verified"
    drains=$(grep -o '"plane_drains":[0-9]*' "$client" | head -1 | cut -d: -f2)
    (( ${drains:-0} >= 2 )) || fail "plane 1's 2 paths were not drained when its NIC went down (plane_drains ${drains:-none})"
    again=$(( $(tx_packets eth1) - $(cat "$WORK/eth1-at-up") ))
    (( again > 1000 )) || fail "plane 1 sent only $again packets once its NIC was up again"
    pass "plane 1 down and up mid-transfer ($(cat "$WORK/eth1-at-down") packets on it before, $again after): verified, $drains paths drained"
    rm -f "$WORK"/metaroce-perf-*

    # A device given one netdev, whose planes metaroced's config names.
    DEV=mr0=eth0
    DAEMON_CONFIG=$'[devices.mr0]\nplanes = ["eth0", "eth1"]\n'
    start_daemons h0 h1
    eth1_start=$(tx_packets eth1)
    pair 180 h1 h0 19801 "$PERF" -d mr0 --test write -s 65536 -n 3000
    grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "not verified over metaroced's planes"
    used=$(( $(tx_packets eth1) - eth1_start ))
    (( used > 1000 )) || fail "metaroced's [devices.mr0] planes: plane 1 sent only $used packets"
    pass "planes from metaroced's config: $used packets on plane 1, verified"
    ;;
blackhole)
    # Each host runs metaroced, as installed hosts do: its path discovery
    # gives the connection source ports that cover the 4 links. Without it
    # the kernel's random ports put all 4 paths on one link about once in
    # 64 runs (seen twice in 25 here), and that link's blackhole then cuts
    # the connection as a dead peer would (docs/spec.md, 8.8).
    start_daemons h0 h1
    # Path 0 fails mid-transfer: once 4 MB of the transfer have crossed it in
    # a direction (--blackhole after: a point in the traffic, not in time,
    # which a busy machine would race). The TCP side channel is exempt.
    fab set 0 --blackhole after:4000000 --exempt-port 19500
    pair 180 h1 h0 19500 "$PERF" -d mr0 --test write -s 65536 -n 10000
    grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "not verified"
    links=$(fab status --json | json - 'sum(p["left_to_right"]["offered_packets"] > 100 for p in d["paths"])')
    (( links == 4 )) || fail "the data crossed $links of the 4 links, not all: discovery did not spread it"
    k=0
    drops=$(fab status --json | json - "d[\"paths\"][$k][\"left_to_right\"][\"blackhole_drops\"]")
    (( drops > 0 )) || fail "the blackhole on path $k dropped nothing: the transfer ended before it"
    pass "path $k blackholed mid-transfer ($drops packets dropped): completed and verified"
    ;;
peer-killed)
    port=19600
    start_server h1 120 "$port" "$WORK/server" "$PERF" -d mr0 --test write -s 65536 -n 10000000
    spid=$SERVER
    timeout 120 ip netns exec "${PREFIX}-h0" "$RUN" --dev mr0=eth0 "$PERF" -d mr0 --test write -s 65536 \
        -n 10000000 -p "$port" "$(fab addr h1)" >"$WORK/client" 2>&1 &
    cpid=$!
    # Killed mid-transfer: once 5000 data packets have crossed.
    under_way() { (( $(fab status --json | json - 'sum(p["left_to_right"]["offered_packets"] for p in d["paths"])') >= 5000 )); }
    wait_until 60 under_way || { cat "$WORK/client" >&2; fail "the transfer did not get under way"; }
    pkill -9 -P "$spid" 2>/dev/null || true
    kill -9 "$spid" 2>/dev/null || true
    killed=$EPOCHREALTIME
    rc=0
    wait "$cpid" || rc=$?
    ended=$EPOCHREALTIME
    grep -q "transport retry counter exceeded" "$WORK/client" || { cat "$WORK/client" >&2; fail "client did not report RETRY_EXC_ERR (rc $rc)"; }
    (( rc == 1 )) || fail "client exit status $rc"
    # metaroce-perf sets timeout 14 (67 ms) and retry_cnt 7: 8 intervals,
    # ~0.54 s. A figure, not a check (a client that never noticed would have
    # been stopped by its timeout, with another status).
    pass "peer killed: client got RETRY_EXC_ERR $(awk -v a="$killed" -v b="$ended" 'BEGIN { printf "%.2f", b - a }') s after the kill"
    ;;
stray)
    dst=$(fab addr h1)
    # Garbage at the server's home port (the first, 4792) once it is bound.
    ( wait_udp_listener -n "${PREFIX}-h1" 4792 || exit 1
      for _ in 1 2 3; do
          timeout 5 ip netns exec "${PREFIX}-h0" "$BLASTER" send --to "$dst:4792" --seconds 1 --ports 8 \
              --payload 300 --rate 50 >/dev/null 2>&1 || true
      done ) &
    export METAROCE_STATS=1  # the endpoints print their drop counters when they close
    pair 180 h1 h0 19700 "$PERF" -d mr0 --test write -s 65536 -n 8000
    grep -q '"verified":true' "$WORK"/metaroce-perf-*.client || fail "not verified"
    drops=$(grep -h '"metaroce_stats"' "$WORK"/metaroce-perf-*.server | json - 'sum(d["metaroce_stats"][k] for k in
        ("unknown_sender_drops", "truncated_drops", "rx_drop_malformed"))')
    (( ${drops:-0} > 0 )) || { cat "$WORK"/metaroce-perf-*.server >&2; fail "the garbage was not counted as dropped"; }
    pass "garbage at the home port during a transfer: $drops datagrams counted as dropped; transfer completed and verified"
    ;;
no-grh)
    command -v ibv_rc_pingpong >/dev/null 2>&1 || skip "ibv_rc_pingpong not installed (ibverbs-utils)"
    pair 60 h1 h0 18960 ibv_rc_pingpong -d mr0 -g 0
    grep -q "iters in" "$WORK/ibv_rc_pingpong-18960.client" || fail "ibv_rc_pingpong -g 0 printed no result"
    # Without -g the address vector has no GRH: modify_qp to RTR fails (a
    # clear error at once), where it used to send to its own host and time out.
    start_server h1 60 18961 "$WORK/nogrh.server" ibv_rc_pingpong -d mr0
    nogrh_server=$SERVER
    rc=0
    on h0 60 ibv_rc_pingpong -d mr0 -p 18961 "$(fab addr h1)" >"$WORK/nogrh.client" 2>&1 || rc=$?
    src=0
    wait "$nogrh_server" || src=$?
    cat "$WORK/nogrh.client" "$WORK/nogrh.server"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "client without a GID: exit $rc, not a refusal"
    [ "$src" -ne 0 ] && [ "$src" -ne 124 ] || fail "server without a GID: exit $src, not a refusal"
    grep -q "Couldn't connect to remote QP\|Failed to modify QP" "$WORK/nogrh.server" "$WORK/nogrh.client" ||
        fail "no modify_qp refusal in ibv_rc_pingpong's output"
    pass "ibv_rc_pingpong: works with -g 0; refused at once without a GID"
    ;;
*)
    fail "unknown scenario $scenario"
    ;;
esac
