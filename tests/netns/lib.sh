# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# Shared helpers for the 'netns' test suite (sourced, not run).
#
# Environment (set by tests/netns/meson.build):
#   METAROCE_FABRIC  path of tools/metaroce-fabric
#   UDP_BLASTER      path of the udp-blaster executable

set -euo pipefail

FABRIC=${METAROCE_FABRIC:?METAROCE_FABRIC not set}
BLASTER=${UDP_BLASTER:-}
TEST_NAME=$(basename "$0" .sh)

skip() { echo "SKIP $TEST_NAME: $*"; exit 77; }
fail() { echo "FAIL $TEST_NAME: $*" >&2; exit 1; }
note() { echo "# $*"; }
pass() { echo "ok - $*"; }

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

PREFIX=
RECV_PID=
WORK=$(mktemp -d /tmp/metaroce-netns-test.XXXXXX)
EXIT_HOOKS=()
# at_exit CMD...: run CMD (eval'd) at exit, before the fabric is torn down.
# Use this rather than `trap ... EXIT`, which would replace the cleanup below.
at_exit() { EXIT_HOOKS+=("$*"); }
cleanup() {
    local rc=$? hook
    for hook in ${EXIT_HOOKS[@]+"${EXIT_HOOKS[@]}"}; do eval "$hook" || true; done
    if [[ -n $RECV_PID ]]; then kill "$RECV_PID" 2>/dev/null || true; wait "$RECV_PID" 2>/dev/null || true; fi
    if [[ -n $PREFIX ]]; then "$FABRIC" --prefix "$PREFIX" down >/dev/null 2>&1 || true; fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Every test uses its own prefix and always tears it down.
use_prefix() {
    PREFIX=$1
    "$FABRIC" --prefix "$PREFIX" down >/dev/null 2>&1 || true
}

fab() { "$FABRIC" --prefix "$PREFIX" "$@"; }

# json FILE_OR_- EXPR: evaluates a python expression over the parsed JSON `d`.
json() {
    local src=$1 expr=$2
    python3 -c 'import json, sys
src, expr = sys.argv[1], sys.argv[2]
d = json.load(sys.stdin if src == "-" else open(src))
r = eval(expr)
print(json.dumps(r) if isinstance(r, (dict, list, bool)) else r)' "$src" "$expr"
}

# Per-path "offered" packets left->right, as a space-separated list.
offered_l2r() { fab status --json | json - '" ".join(str(p["left_to_right"]["offered_packets"]) for p in d["paths"])'; }

# blast SECONDS SENDER_ARGS... : runs a receiver on h1 and a sender on h0;
# leaves the JSON lines in $WORK/send.json and $WORK/recv.json.
blast() {
    local seconds=$1; shift
    local dst port=5000
    dst=$(fab addr h1)
    ip netns exec "${PREFIX}-h1" "$BLASTER" recv --bind "$dst:$port" --seconds "$(awk -v s="$seconds" 'BEGIN { print s + 5 }')" \
        --idle "${BLAST_IDLE:-0.5}" >"$WORK/recv.json" &
    RECV_PID=$!
    sleep 0.3
    fab exec h0 "$BLASTER" send --to "$dst:$port" --seconds "$seconds" "$@" >"$WORK/send.json"
    wait "$RECV_PID" || fail "receiver failed"
    RECV_PID=
}

# approx_between VALUE LOW HIGH -> success when LOW <= VALUE <= HIGH (floats).
between() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }
