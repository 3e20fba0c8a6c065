#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The authenticate and encrypt modes end to end over loopback (no root):
# metaroced reads a cluster secret (owner-only file), leases the mode to each
# provider and hands each its pair key; metaroce-perf then runs verified
# write, read and send between two processes. A provider without the daemon
# (integrity mode) cannot talk to them: its datagrams are counted as of
# another mode and its transfer fails.
#
# Environment (tests/daemon/meson.build): METAROCED, METAROCE_RUN, METAROCE_PERF.
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -euo pipefail
DAEMON=${METAROCED:?} RUN=${METAROCE_RUN:?} PERF=${METAROCE_PERF:?}

# start_server PORT PERF_ARGS...: metaroce-perf's server over loopback,
# returning once it listens; SPID is its PID.
start_server() {
    local port=$1; shift
    timeout 60 "$RUN" --dev mr0=lo "$PERF" -d mr0 "$@" -p "$port" >"$WORK/server" 2>&1 &
    SPID=$!
    wait_tcp_listener -p "$SPID" "$port" || { cat "$WORK/server" >&2; fail "metaroce-perf's server did not listen"; }
}

export METAROCE_STATS=1
export METAROCE_DAEMON_SOCKET=$WORK/d.sock
python3 -c 'import os; print(os.urandom(32).hex())' >"$WORK/cluster.key"
chmod 600 "$WORK/cluster.key"

for mode in authenticate encrypt; do
    printf '[ports]\nsource_first = 24000\nsource_count = 640\n[discovery]\nenabled = false\n[security]\nmode = "%s"\nsecret_file = "%s"\n' \
        "$mode" "$WORK/cluster.key" >"$WORK/d.toml"
    "$DAEMON" --config "$WORK/d.toml" --socket "$METAROCE_DAEMON_SOCKET" 2>"$WORK/daemon.log" &
    DPID=$!
    wait_until 10 test -S "$METAROCE_DAEMON_SOCKET" || fail "metaroced did not start: $(cat "$WORK/daemon.log")"
    for t in write read send; do
        port=$((19900 + RANDOM % 90))
        start_server "$port" --test "$t" -s 65536 -n 300
        timeout 60 "$RUN" --dev mr0=lo "$PERF" -d mr0 --test "$t" -s 65536 -n 300 -p "$port" 127.0.0.1 \
            >"$WORK/client" 2>&1 || { cat "$WORK/client" "$WORK/server" >&2; fail "$mode $t failed"; }
        wait "$SPID" || { cat "$WORK/server" >&2; fail "$mode $t: server failed"; }
        grep -q '"verified":true' "$WORK/client" || fail "$mode $t: not verified"
        for side in client server; do
            grep -q "\"security\":\"$mode\"" "$WORK/$side" || { cat "$WORK/$side" >&2; fail "$mode $t: the $side did not run in $mode mode"; }
        done
        pass "metaroce-perf $t in $mode mode with keys from metaroced: verified"
    done

    # A provider without the daemon runs in integrity mode: an authenticated
    # server drops everything it sends (another mode), and its QP fails.
    port=$((19990 + RANDOM % 9))
    start_server "$port" --test write -s 65536 -n 50
    if METAROCE_DAEMON_SOCKET=$WORK/none.sock timeout 30 "$RUN" --dev mr0=lo "$PERF" -d mr0 --test write -s 65536 -n 50 -p "$port" \
        127.0.0.1 >"$WORK/client" 2>&1; then
        fail "$mode: an integrity-mode client completed a transfer with an authenticated server"
    fi
    grep -q "integrity mode" "$WORK/client" || { cat "$WORK/client" >&2; fail "the daemon-less provider did not say it runs in integrity mode"; }
    stop_process "$SPID"
    dropped=$(grep -ho '"rx_drop_security_mode":[0-9]*' "$WORK/server" | tr -dc 0-9)
    (( ${dropped:-0} > 0 )) || { cat "$WORK/server" >&2; fail "$mode: the server counted no datagram of another mode"; }
    pass "$mode: a provider without the daemon (integrity mode) gets nothing through: $dropped datagrams dropped"

    stop_process "$DPID"
done
