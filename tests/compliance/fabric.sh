#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The compliance suite by address across the namespace fabric: the target
# (metaroce-compliance-target, our implementation) on host h1, the suite on
# host h0, four ECMP paths and 1500-byte links between them. The same run as
# compliance_loopback, but over real veths, switches and ECMP routes, with
# the side channel and the datagrams reaching the target by its address.
#
# Environment (from tests/compliance/meson.build): METAROCE_FABRIC,
# COMPLIANCE_SUITE, COMPLIANCE_TARGET, COMPLIANCE_SPEC; the arguments are
# passed to the suite (the known deviations).
source "$(dirname "$0")/../netns/lib.sh" || exit 1
SUITE=${COMPLIANCE_SUITE:?COMPLIANCE_SUITE not set}
TARGET=${COMPLIANCE_TARGET:?COMPLIANCE_TARGET not set}
SPEC=${COMPLIANCE_SPEC:?COMPLIANCE_SPEC not set}
TEST_NAME=compliance-fabric

require_netns noblaster
use_prefix mrcmp
fab up --hosts 2 --paths 4 >/dev/null

TARGET_PID=
stop_target() { [[ -z $TARGET_PID ]] || kill "$TARGET_PID" 2>/dev/null || true; }
at_exit stop_target

ip netns exec "${PREFIX}-h1" "$TARGET" --address "$(fab addr h1)" >"$WORK/target.out" 2>&1 &
TARGET_PID=$!
announced() { grep -qs '^control ' "$WORK/target.out"; }
announced_or_exited() { announced || process_gone "$TARGET_PID"; }
wait_until 30 announced_or_exited || fail "the target never announced its side channel (30 s)"
announced || { cat "$WORK/target.out" >&2; fail "the target exited"; }
read -r _ address port < <(grep '^control ' "$WORK/target.out") || fail "the target never announced its side channel"
note "target on $address, side channel port $port"
ip netns exec "${PREFIX}-h0" "$SUITE" --spec "$SPEC" --target "$address:$port" --local-address "$(fab addr h0)" "$@" \
    || fail "the suite failed against the target across the fabric"
pass "compliance across the fabric"
