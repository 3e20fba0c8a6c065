#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# fabric-bench end to end, briefly: every row it prints is well formed, the
# metaroce-perf rows verified their data, at 10% loss on every path
# MetaRoCE moves more than twice what the RoCEv2 profile does, and the
# latency rows measured every ping-pong.
source "$(dirname "$0")/lib.sh" || exit 1
require_netns
use_prefix mrt-fbench
RUN=${METAROCE_RUN:?METAROCE_RUN not set}
PERF=${METAROCE_PERF:?METAROCE_PERF not set}
command -v ib_write_bw >/dev/null 2>&1 || skip "ib_write_bw not installed (apt-get install perftest)"

"$(dirname "$0")/../../tools/bench/fabric-bench" --seconds 1 --prefix "$PREFIX" \
    --metaroce-run "$RUN" --metaroce-perf "$PERF" --blaster "$BLASTER" \
    --systems udp,metaroce,rocev2 --tools ib_write_bw,metaroce-perf \
    --scenarios baseline,loss0.1,latency >"$WORK/rows.json" 2>"$WORK/bench.err" ||
    { cat "$WORK/rows.json" "$WORK/bench.err" >&2; fail "fabric-bench failed"; }
cat "$WORK/rows.json"

if ! python3 - "$WORK/rows.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
latency = [r for r in rows if r["scenario"] == "latency"]
rows = [r for r in rows if r["scenario"] != "latency"]
assert {(r["system"], r["tool"]) for r in latency} == {
    ("udp", "udp_lat"), ("metaroce", "ib_write_lat"), ("metaroce", "ib_send_lat"),
    ("rocev2", "ib_write_lat"), ("rocev2", "ib_send_lat")}, f"latency rows: {latency}"
for r in latency:
    assert r.get("latency_us", 0) > 0 and r.get("vs_udp", 0) > 0, r
need = {"system", "loss", "scenario", "goodput_gbps", "retained", "cpu_sender_pct", "cpu_receiver_pct",
        "cpu_s_per_gib"}
want = {("udp", None), ("metaroce", "ib_write_bw"), ("metaroce", "metaroce-perf"),
        ("rocev2", "ib_write_bw"), ("rocev2", "metaroce-perf")}
seen = {(r["system"], r.get("tool")) for r in rows}
assert seen == want, f"systems measured: {seen}"
assert len(rows) == 2 * len(want), f"{len(rows)} rows"
for r in rows:
    assert need <= r.keys(), f"row lacks {need - r.keys()}: {r}"
    if r["scenario"] == "baseline":
        assert r["goodput_gbps"] > 0 and r["retained"] == 1.0 and r["cpu_s_per_gib"] > 0, r
    if r.get("tool") == "metaroce-perf" and not r.get("stalled"):
        assert r.get("verified") is True, r
def goodput(system, tool):
    return next(r["goodput_gbps"] for r in rows if r["loss"] == 0.1 and r["system"] == system and r.get("tool") == tool)
# Goodput, not retained: on a loaded 2-core machine one short baseline run is
# noisy, while go-back-N at 10% loss is always near zero.
for tool in ("ib_write_bw", "metaroce-perf"):
    m, v = goodput("metaroce", tool), goodput("rocev2", tool)
    print(f"# {tool} at 10% loss: metaroce {m} Gb/s, rocev2 {v} Gb/s")
    assert m > 2 * v and m > 0.05, f"{tool}: metaroce {m} Gb/s, rocev2 {v} Gb/s"
PY
then
  cat "$WORK/bench.err" >&2  # with the threads of any run that hung
  fail "fabric-bench rows do not hold up (above)"
fi
pass "fabric-bench rows complete; metaroce beats rocev2 at 10% loss"
