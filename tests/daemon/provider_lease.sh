#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The verbs provider and metaroced over loopback (no root): three provider
# processes lease disjoint home ports and source-port blocks and really bind
# them; a device whose [devices.NAME] sets progress_threads = 2 holds two
# leases, one per progress thread; kill -9 returns a process's lease;
# without a daemon a program gets one warning however many contexts it
# opens, and still works.
#
# Environment (tests/daemon/meson.build): METAROCED, METAROCE_CLI, METAROCE_RUN.
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -euo pipefail
DAEMON=${METAROCED:?} CLI=${METAROCE_CLI:?} RUN=${METAROCE_RUN:?}
command -v ib_write_bw >/dev/null 2>&1 || skip "perftest not installed"
command -v ss >/dev/null 2>&1 || skip "ss (iproute2) not installed"

SOCK=$WORK/d.sock
daemon_answers() { "$CLI" --socket "$SOCK" status; }
# contexts: how many provider contexts report to the daemon.
contexts() { "$CLI" --socket "$SOCK" --json stats | json - 'len(d["contexts"])'; }

# 3 paths a context: the provider takes the daemon's number when the user sets none.
# mr0's busy polling comes from the daemon unless the environment sets it.
# Home ports from 8600: runtimes without a daemon (other tests') take the
# first free one from 4792, so the holder of a port there may come and go.
HOME_FIRST=8600
printf '[ports]\nhome_first = %d\nhome_count = 64\nsource_first = 23000\nsource_count = 1280\npaths_per_connection = 3\n[devices.mr0]\nbusy_poll_us = 77\n[devices.mr2]\nprogress_threads = 2\n' \
    "$HOME_FIRST" >"$WORK/d.toml"
"$DAEMON" --config "$WORK/d.toml" --socket "$SOCK" 2>"$WORK/daemon.log" &
DPID=$!
wait_until 10 daemon_answers || fail "metaroced did not start: $(cat "$WORK/daemon.log")"

# Processes holding leases. A process may hold more than one: when a leased
# port turns out to be taken by a program that bypasses the daemon (other
# tests on this machine use loopback), the context keeps that lease, so the
# port is not handed to anyone else, and leases again.
leases() { "$CLI" --socket "$SOCK" --json status | json - 'len({l["pid"] for l in d["leases"]})'; }
leased_by() { [[ $(leases) == "$1" ]]; }

# A program outside the daemon holds the first home port (or something else
# on this machine already does): the context leased it must lease again.
python3 -c 'import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.bind(("127.0.0.1", '"$HOME_FIRST"'))
except OSError:
    pass  # taken already, which is as good
time.sleep(120)' &
wait_udp_listener "$HOME_FIRST" || fail "nothing bound 127.0.0.1:$HOME_FIRST"

# Three ib_write_bw servers, each waiting for a client that never comes.
for n in 0 1 2; do
    busy=(); ((n == 2)) && busy=(METAROCE_BUSY_POLL_US=5)
    env ${busy[@]+"${busy[@]}"} METAROCE_DAEMON_SOCKET="$SOCK" timeout 60 "$RUN" --dev mr0=lo ib_write_bw -d mr0 -x 0 -p $((19600 + n + RANDOM % 200 * 3)) \
        >"$WORK/server$n" 2>&1 &
done
wait_until 10 leased_by 3 || fail "expected 3 processes with leases, have $(leases): $(cat "$WORK"/server*)"
"$CLI" --socket "$SOCK" --json status >"$WORK/status.json"
python3 - "$WORK/status.json" "$HOME_FIRST" <<'PY' || fail "leases overlap or are not bound as leased"
import json, subprocess, sys
s = json.load(open(sys.argv[1]))
homes, ports = set(), set()
bound = subprocess.run(["ss", "-uanpH"], capture_output=True, text=True).stdout
by_pid = {}
for l in s["leases"]:
    assert l["home_port"] not in homes, "home port leased twice"
    homes.add(l["home_port"])
    block = set(range(l["block_first"], l["block_first"] + l["block_size"]))
    assert not (block & ports), "source ports leased twice"
    ports |= block
    by_pid.setdefault(l["pid"], []).append((l["home_port"], block))
for pid, held in by_pid.items():
    # The process bound the home port and 3 source ports of one of its
    # leases, and nothing outside them.
    mine = [line for line in bound.splitlines() if f"pid={pid}," in line]
    local = {int(line.split()[3].rsplit(":", 1)[1]) for line in mine}
    used = [(h, b) for h, b in held if h in local]
    assert len(used) == 1, f"pid {pid} bound {sorted(local)}, leases {[(h, min(b)) for h, b in held]}"
    home, block = used[0]
    assert len(local & block) == 3, f"pid {pid} bound {sorted(local & block)} of its block"
    assert not (local - block - {home}), f"pid {pid} bound ports outside its lease: {local}"
# The daemon's first home port was taken: its lessee leased again and kept it.
assert any(h == int(sys.argv[2]) for held in by_pid.values() for h, _ in held), f"nobody was leased {sys.argv[2]}"
assert any(len(held) >= 2 for held in by_pid.values()), "no context leased again"
print(f"{len(s['leases'])} leases of 3 processes disjoint; each process bound one lease's ports")
PY
pass "three provider processes: disjoint leases, each bound exactly its home port and the 3 ports (paths_per_connection) of its block; a taken home port was leased again"

# The tables say the same as the JSON.
table=$("$CLI" --socket "$SOCK" status)
for pid in $(python3 -c 'import json, sys; print(" ".join(str(l["pid"]) for l in json.load(open(sys.argv[1]))["leases"]))' "$WORK/status.json"); do
    grep -qE "^$pid +[0-9]+ +default +[0-9]+ +[0-9]+-[0-9]+$" <<<"$table" || fail "status table lacks pid $pid: $table"
done
reporting() { [[ $(contexts) == "$1" ]]; }
wait_until 5 reporting 3 || true
stats=$("$CLI" --socket "$SOCK" stats)
[[ $(grep -cE "^[0-9]+ +mr0 +[0-9]+ " <<<"$stats") == 3 ]] || fail "stats table does not list the 3 contexts: $stats"
# A report carries every counter `metaroce counters` lists, under its name, and no other.
"$CLI" counters --json >"$WORK/counters.json"
"$CLI" --socket "$SOCK" --json stats >"$WORK/stats.json"
python3 - "$WORK/counters.json" "$WORK/stats.json" <<'PY' || fail "the reported counters are not the listed ones"
import json, sys
listed = {c["name"] for c in json.load(open(sys.argv[1]))}
for c in json.load(open(sys.argv[2]))["contexts"]:
    reported = set(c["counters"])
    assert reported == listed, f"not listed: {reported - listed}, not reported: {listed - reported}"
PY
python3 - "$WORK/stats.json" <<'PY' || fail "busy polling is not [devices.mr0]'s, or the environment's where set"
import json, sys
busy = sorted(c["busy_poll_us"] for c in json.load(open(sys.argv[1]))["contexts"])
assert busy == [5, 77, 77], busy
PY
# Bad command lines: a message and a nonzero status, never a crash.
for args in "paths 999.1.1.1" "" "config" "status --bogus" "paths 10.0.0.1 --dport 0"; do
    read -ra argv <<<"$args"
    set +e; out=$("$CLI" --socket "$SOCK" ${argv[@]+"${argv[@]}"} 2>&1); rc=$?; set -e
    ((rc != 0 && rc < 128)) || fail "metaroce $args: exit $rc"
    [[ -n $out ]] || fail "metaroce $args: no message"
done
set +e; out=$("$CLI" --socket "$WORK/none.sock" status 2>&1); rc=$?; set -e
[[ $rc == 1 && $out == "metaroce: cannot reach metaroced at $WORK/none.sock: No such file or directory" ]] ||
    fail "no daemon: exit $rc, '$out'"
pass "metaroce status/stats tables list the leases and contexts, reports carry the listed counters and [devices.mr0]'s busy polling (METAROCE_BUSY_POLL_US overriding it); bad command lines get a message"

victim=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["leases"][-1]["pid"])' "$WORK/status.json")
kill -KILL "$victim"
wait_until 10 leased_by 2 || fail "kill -9 of $victim did not release its lease"
"$CLI" --socket "$SOCK" --json status | grep -q "\"pid\": $victim," && fail "lease of killed pid $victim still listed"
pass "kill -9 of pid $victim returned its lease"

# The daemon restarts (as a package upgrade does): the running contexts
# lease the same home port and block again, and report to the new daemon.
"$CLI" --socket "$SOCK" --json status >"$WORK/before.json"
stop_process "$DPID"
"$DAEMON" --config "$WORK/d.toml" --socket "$SOCK" 2>>"$WORK/daemon.log" &
DPID=$!
wait_until 10 daemon_answers || fail "metaroced did not start again: $(tail -3 "$WORK/daemon.log")"
wait_until 10 leased_by 2 || fail "after a daemon restart $(leases) processes leased again, not 2: $(tail -3 "$WORK/daemon.log")"
wait_until 5 reporting 2 || true
"$CLI" --socket "$SOCK" --json status >"$WORK/after.json"
"$CLI" --socket "$SOCK" --json stats >"$WORK/stats-after.json"
python3 - "$WORK/before.json" "$WORK/after.json" "$WORK/stats-after.json" <<'PY' || fail "leases after the restart differ"
import json, sys
before = {(l["pid"], l["home_port"], l["block_first"]) for l in json.load(open(sys.argv[1]))["leases"]}
after = [(l["pid"], l["home_port"], l["block_first"]) for l in json.load(open(sys.argv[2]))["leases"]]
assert len(after) == 2, f"{len(after)} leases after the restart: {after}"
for l in after:
    assert l in before, f"lease {l} after the restart is not one the process held: {sorted(before)}"
assert len(json.load(open(sys.argv[3]))["contexts"]) == 2, "the contexts do not report to the new daemon"
PY
pass "a daemon restart: both running contexts leased their own home port and block again and report again"

# [devices.mr2] progress_threads = 2: the context runs two progress threads,
# each on a home port and source ports of its own lease. Its process is the
# one that holds leases and did not before.
"$CLI" --socket "$SOCK" --json status >"$WORK/before-mr2.json"
METAROCE_DAEMON_SOCKET="$SOCK" timeout 60 "$RUN" --dev mr2=lo ib_write_bw -d mr2 -x 0 -p $((19600 + RANDOM % 200 * 3)) \
    >"$WORK/server-mr2" 2>&1 &
threaded=$!
new_pids() {
    "$CLI" --socket "$SOCK" --json status >"$WORK/status-mr2.json"
    python3 - "$WORK/before-mr2.json" "$WORK/status-mr2.json" <<'PY'
import json, sys
before = {l["pid"] for l in json.load(open(sys.argv[1]))["leases"]}
print(len({l["pid"] for l in json.load(open(sys.argv[2]))["leases"]} - before))
PY
}
one_new_process() { [[ $(new_pids) == 1 ]]; }
wait_until 10 one_new_process || fail "the mr2 context holds no lease: $(cat "$WORK/server-mr2")"
two_leases_bound() {
    "$CLI" --socket "$SOCK" --json status >"$WORK/status-mr2.json"
    python3 - "$WORK/before-mr2.json" "$WORK/status-mr2.json" <<'PY'
import json, subprocess, sys
before = {l["pid"] for l in json.load(open(sys.argv[1]))["leases"]}
held = [l for l in json.load(open(sys.argv[2]))["leases"] if l["pid"] not in before]
pid = held[0]["pid"]
bound = subprocess.run(["ss", "-uanpH"], capture_output=True, text=True).stdout
local = {int(line.split()[3].rsplit(":", 1)[1]) for line in bound.splitlines() if f"pid={pid}," in line}
# Two of its leases in use (a lease whose home port was taken stays held, as above).
used = [l for l in held if l["home_port"] in local]
assert len(used) == 2, f"bound {sorted(local)}, leases {held}"
for l in used:
    block = set(range(l["block_first"], l["block_first"] + l["block_size"]))
    assert len(local & block) == 3, f"{sorted(local & block)} of the block from {l['block_first']} bound"
PY
}
wait_until 10 two_leases_bound 2>/dev/null || two_leases_bound || fail "the mr2 context's two progress threads do not each bind their own lease"
kill "$threaded" 2>/dev/null || true
wait "$threaded" 2>/dev/null || true
pass "[devices.mr2] progress_threads = 2: one context holds two leases and binds each one's home port and 3 source ports"

# No daemon: one warning per process, and the program still works.
out=$(METAROCE_DAEMON_SOCKET=$WORK/none.sock "$RUN" --dev mr0=lo --dev mr1=127.0.0.1 ibv_devinfo 2>&1) ||
    fail "ibv_devinfo without a daemon failed: $out"
warnings=$(grep -c "no metaroced" <<<"$out" || true)
[[ $warnings == 1 ]] || fail "expected one warning without a daemon, got $warnings: $out"
grep -q "hca_id:	mr1" <<<"$out" || fail "second device missing: $out"
pass "without a daemon: one warning for two contexts, ports chosen locally"
kill -0 "$DPID" || fail "metaroced died"
