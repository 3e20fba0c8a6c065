# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# What the namespace fabric tests share (sourced, after tests/lib/harness.sh
# which this sources): the machine check, the fabric of the test's own
# prefix, and a paced udp-blaster transfer across it.
#
# Environment (set by tests/netns/meson.build):
#   METAROCE_FABRIC  path of tools/metaroce-fabric
#   UDP_BLASTER      path of the udp-blaster executable

source "$(dirname "${BASH_SOURCE[0]}")/../lib/harness.sh" || exit 1
set -euo pipefail

FABRIC=${METAROCE_FABRIC:?METAROCE_FABRIC not set}
BLASTER=${UDP_BLASTER:-}

# Skips (exit 77) unless this machine can run namespace tests.
require_netns() {
    [[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
    command -v ip >/dev/null 2>&1 || skip "ip (iproute2) not installed"
    command -v nft >/dev/null 2>&1 || skip "nft (nftables) not installed"
    command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
    local probe="mrt-probe-$$"
    if ! ip netns add "$probe" >/dev/null 2>&1; then
        skip "ip netns unavailable (cannot create a network namespace)"
    fi
    ip netns del "$probe" >/dev/null 2>&1 || true
    [[ -n $BLASTER && -x $BLASTER ]] || [[ ${1:-} == noblaster ]] || fail "UDP_BLASTER not set or not executable"
}

# use_prefix P: this test's fabric is P (torn down now, and at exit).
PREFIX=
use_prefix() {
    PREFIX=$1
    fab down >/dev/null 2>&1 || true
    at_exit 'fab down >/dev/null 2>&1'
}

fab() { "$FABRIC" --prefix "$PREFIX" "$@"; }

# Per-path "offered" packets left->right, as a space-separated list.
offered_l2r() { fab status --json | json - '" ".join(str(p["left_to_right"]["offered_packets"]) for p in d["paths"])'; }

# start_blaster_receiver HOST PORT SECONDS OUT [RECV_ARGS...]: a udp-blaster
# receiver on HOST's address on plane $BLAST_PLANE (default 0) and PORT,
# writing its JSON line to OUT; returns once it is bound (BLASTER_RECV is its PID).
start_blaster_receiver() {
    local host=$1 port=$2 seconds=$3 out=$4 addr; shift 4
    addr=$(fab addr "$host" --plane "${BLAST_PLANE:-0}")
    ip netns exec "${PREFIX}-$host" "$BLASTER" recv --bind "$addr:$port" --seconds "$seconds" "$@" >"$out" &
    BLASTER_RECV=$!
    wait_udp_listener -n "${PREFIX}-$host" -p "$BLASTER_RECV" "$port" ||
        fail "udp-blaster receiver on $host:$port did not bind"
}

# blast SECONDS SENDER_ARGS... : a receiver on h1, a sender on h0 (to h1's
# address on plane $BLAST_PLANE, default 0); leaves the JSON lines in
# $WORK/send.json and $WORK/recv.json.
blast() {
    local seconds=$1; shift
    start_blaster_receiver h1 5000 "$(awk -v s="$seconds" 'BEGIN { print s + 5 }')" "$WORK/recv.json" \
        --idle "${BLAST_IDLE:-0.5}"
    fab exec h0 "$BLASTER" send --to "$(fab addr h1 --plane "${BLAST_PLANE:-0}"):5000" --seconds "$seconds" "$@" \
        >"$WORK/send.json"
    wait "$BLASTER_RECV" || fail "receiver failed"
}

# between VALUE LOW HIGH -> success when LOW <= VALUE <= HIGH (floats).
between() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }
