#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Without root, every command that touches the system refuses with a one-line
# message and exit status 2 (and --help still works).
source "$(dirname "$0")/lib.sh" || exit 1

# A copy readable by anyone (the program and its fabric module): the source
# tree may not be.
mkdir "$WORK/fabric"
cp "$FABRIC" "$WORK/metaroce-fabric"
cp "$(dirname "$FABRIC")/fabric/metaroce_fabric.py" "$WORK/fabric/"
chmod 755 "$WORK" "$WORK/fabric" "$WORK/metaroce-fabric"
chmod 644 "$WORK/fabric/metaroce_fabric.py"

if [[ $(id -u) -eq 0 ]]; then
    if command -v setpriv >/dev/null 2>&1; then
        as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    elif command -v runuser >/dev/null 2>&1; then
        as_user() { runuser -u nobody -- "$@"; }
    else
        skip "neither setpriv nor runuser available to drop root"
    fi
else
    as_user() { "$@"; }
fi

for cmd in "up" "up --hosts 4 --paths 2" "down" "set all --loss 0.1" "status" "status --json" "exec h0 true" "addr h1"; do
    rc=0
    # shellcheck disable=SC2086
    as_user "$WORK/metaroce-fabric" --prefix mrt-nr $cmd >"$WORK/out" 2>"$WORK/err" || rc=$?
    [[ $rc == 2 ]] || fail "'$cmd' as non-root exited $rc, want 2 (stderr: $(cat "$WORK/err"))"
    [[ ! -s $WORK/out ]] || fail "'$cmd' as non-root printed on stdout: $(cat "$WORK/out")"
    [[ $(wc -l <"$WORK/err") == 1 ]] || fail "'$cmd' as non-root: want a one-line message, got: $(cat "$WORK/err")"
    grep -qi root "$WORK/err" || fail "'$cmd': message does not mention root: $(cat "$WORK/err")"
done
pass "refuses without root: $(cat "$WORK/err")"

as_user "$WORK/metaroce-fabric" --help >/dev/null || fail "--help as non-root failed"
pass "--help works without root"
if [[ $(id -u) -eq 0 ]]; then
    ! ip netns list | grep -q '^mrt-nr-' || fail "a namespace was created"
fi
