#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The package install test, run inside the test VM (tests/vm/vm-run.sh
# --debs) as root on a throw-away overlay of the host's root, whose dpkg
# database it changes: install the built .debs with apt (offline: every
# dependency is installed on the host), let DKMS build metaroce.ko for this
# kernel, `rdma link add` without insmod, start the installed metaroced as
# its systemd unit would, run ib_write_bw between two network namespaces,
# then purge the packages and check that nothing of them is left.
# Prints "ok - ..." / "not ok - ..." lines; exits 0 only if all passed.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive
. "$(dirname "$0")/guest-lib.sh" || exit 1

PACKAGES=(metaroce-dkms libmetaroce1 libmetaroce-dev metaroced metaroce-tools)
kver=$(uname -r)
debs=$MROCE_STAGE/debs
# The overlay's upper layer, where every file this guest writes lands
# (initramfs-init binds it here read-only).
upper=/vm-overlay-upper
echo "# guest: $kver, $(nproc) CPUs; packages from $debs"
printf '#   %s\n' "$debs"/*.deb

installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
known_to_dpkg() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qv '^not-installed$'; }
dkms_has_metaroce() { dkms status 2>/dev/null | grep -q '^metaroce[/,]'; }
module_file() { modinfo -k "$kver" -F filename metaroce 2>/dev/null; }

# --- before: nothing of ours -------------------------------------------------
for p in "${PACKAGES[@]}"; do expect_not "$p is not installed before the test" known_to_dpkg "$p"; done
expect_not "no metaroce module for $kver before the test" module_file
expect_not "dkms knows no metaroce before the test" dkms_has_metaroce
expect "kernel headers for $kver are installed (linux-headers-amd64)" test -e "/lib/modules/$kver/build/Makefile"
# Every path the packages hold, and whether it existed before (a shared
# directory such as /usr/bin must stay; everything else must go at purge).
: >/tmp/pkg-paths
for deb in "$debs"/*.deb; do
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|; s|/$||' | grep -v '^\.\?$' >>/tmp/pkg-paths
done
sort -u -o /tmp/pkg-paths /tmp/pkg-paths
while read -r p; do [ -e "$p" ] && echo "$p"; done </tmp/pkg-paths >/tmp/pkg-paths-before
echo "# the packages hold $(wc -l </tmp/pkg-paths) paths, $(wc -l </tmp/pkg-paths-before) of which exist before"

# --- install -------------------------------------------------------------------
# man-db's trigger re-indexes every manual page directory, over 9p for
# minutes; without this flag file it skips that (as in Debian's containers).
rm -f /var/lib/man-db/auto-update
start=$(date +%s)
# apt's and DKMS's output goes to the console as it comes, time-stamped.
stamp() { while IFS= read -r line; do echo "#   [$(elapsed "$start")s] $1: $line"; done; }
if apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "$debs"/*.deb 2>&1 |
     tee /tmp/apt-install.log | stamp apt; [ "${PIPESTATUS[0]}" -eq 0 ]; then
  pass "apt-get install ./*.deb (offline) in $(elapsed "$start")s"
else
  not_ok "apt-get install ./*.deb (after $(elapsed "$start")s)"
fi
# DKMS's build log ends with its exit code and elapsed time.
tail -n 3 /var/lib/dkms/metaroce/*/build/make.log 2>/dev/null | sed 's/^/#   dkms make.log: /'
for p in "${PACKAGES[@]}"; do expect "$p is installed" installed "$p"; done
expect "dkms status: metaroce is installed for $kver" sh -c "dkms status -k $kver | grep -E '^metaroce[/,].*$kver.*: installed'"
dkms status | sed 's/^/#   dkms: /'
module_file_exists() { local f; f=$(module_file) && [ -f "$f" ]; }
expect "DKMS installed metaroce.ko for $kver where modprobe finds it" module_file_exists
echo "#   module: $(module_file)"
expect "modprobe resolves the alias rdma-link-metaroce to metaroce" sh -c "modprobe -S $kver --resolve-alias rdma-link-metaroce | grep -qx metaroce"
expect "libibverbs driver file installed" grep -qx 'driver metaroce' /etc/libibverbs.d/metaroce.driver
expect "provider installed by libmetaroce1" sh -c "dpkg -L libmetaroce1 | grep -q '/libibverbs/libmetaroce-rdmav34.so$'"
expect "libibverbs' provider is a link to libmetaroce.so.1" sh -c \
  "[ \"\$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs/libmetaroce-rdmav34.so)\" = \"\$(readlink -f /usr/lib/x86_64-linux-gnu/libmetaroce.so.1)\" ]"
expect "config /etc/metaroce/metaroced.toml is a conffile of metaroced" sh -c "dpkg-query -W -f='\${Conffiles}' metaroced | grep -q '/etc/metaroce/metaroced.toml'"
# The leftover scan at the end looks at the overlay's upper layer: it must
# show what the install wrote.
expect "the overlay's upper layer shows the installed files" test -f "$upper/usr/src/metaroce-$(dpkg-query -W -f='${Version}' metaroce-dkms | sed 's/-[^-]*$//')/dkms.conf"
expect "man pages installed" sh -c "for m in metaroce.1 metaroce-perf.1 metaroce-run.1 metaroced.8 metaroced.toml.5 metaroce_dv.7 metaroce_dv_open_device.3 metaroce_dv_home_port.3; do ls /usr/share/man/man*/\$m.gz >/dev/null || exit 1; done"
# libmetaroce-dev: a program outside the tree builds with pkg-config metaroce
# alone, and runs (tests/install/dv_program.c).
# shellcheck disable=SC2016  # expanded by the inner sh
expect "a program builds against the installed metaroce_dv.h with pkg-config metaroce" \
  sh -c 'cc -o /tmp/dv_program "$1" $(pkg-config --cflags --libs metaroce)' sh "$(dirname "$0")/../install/dv_program.c"
expect "and runs: a kernel-less device on loopback, its verbs objects" /tmp/dv_program

# --- rdma link add, with no insmod ---------------------------------------------
make_pair ns0 ns1 mra mrb 10.0.0
expect_not "metaroce is not loaded before rdma link add" module_loaded metaroce
expect "rdma link add mr0 type metaroce netdev mra" in_ns ns0 rdma link add mr0 type metaroce netdev mra
expect "rdma link add loaded the DKMS-built metaroce.ko by its alias" module_loaded metaroce
expect "rdma link add mr1 type metaroce netdev mrb" in_ns ns1 rdma link add mr1 type metaroce netdev mrb
expect "ibv_devices (installed provider) lists mr0 and mr1" sh -c "ibv_devices | grep -qw mr0 && ibv_devices | grep -qw mr1"

# --- metaroced, as the unit's ExecStartPre and ExecStart run it (no systemd here)
unit=/lib/systemd/system/metaroced.service
expect "the unit's ExecStartPre (--check-config) passes" \
  sh -c "$(sed -n 's/^ExecStartPre=//p' $unit)"
daemon_cmd=$(sed -n 's/^ExecStart=//p' $unit)
echo "# starting: $daemon_cmd"
$daemon_cmd >/tmp/metaroced.log 2>&1 &
daemon=$!
expect "metaroced serves /run/metaroce/metaroced.sock" wait_until 60 test -S /run/metaroce/metaroced.sock
expect "metaroce status (installed CLI) answers" metaroce status
show_output 12
# metaroce-run (metaroce-tools) opens a device without the kernel module;
# its provider context leases its ports from the daemon.
expect "metaroce-run --dev mr9=lo ibv_devinfo -d mr9 (installed preload library)" \
  sh -c "metaroce-run --dev mr9=lo ibv_devinfo -d mr9 | grep -q 'hca_id:.*mr9'"
expect "that context leased its ports from the installed metaroced" grep -q ': home port ' /tmp/metaroced.log
grep ': home port \|released' /tmp/metaroced.log | sed 's/^/#   metaroced: /' | head -n 4

# --- ib_write_bw between the namespaces ------------------------------------------
wait_until 20 gid_index mr0 10.0.0.1; wait_until 20 gid_index mr1 10.0.0.2
gid0=$(gid_index mr0 10.0.0.1); gid1=$(gid_index mr1 10.0.0.2)
echo "# GID indexes: mr0 ${gid0:-none}, mr1 ${gid1:-none}"
ITERS=200 SIZE=65536 PORT=18515
lease_lines() { grep -c ': home port .*source ports' /tmp/metaroced.log; }
leases_before=$(lease_lines)
ip netns exec ns0 timeout 240 ib_write_bw -d mr0 -x "$gid0" -n $ITERS -s $SIZE -p $PORT -F >/tmp/bw.server 2>&1 &
server=$!
if wait_tcp_listener -n ns0 -p $server -t 60 $PORT; then
  start=$(date +%s) status=0 sstatus=0
  ip netns exec ns1 timeout 240 ib_write_bw -d mr1 -x "$gid1" -n $ITERS -s $SIZE -p $PORT -F 10.0.0.1 >/tmp/bw.client 2>&1 || status=$?
  wait $server || sstatus=$?
  # The result line: #bytes #iterations BW-peak BW-average MsgRate.
  read -r bytes iters _ <<<"$(awk -v s=$SIZE '$1 == s && NF >= 4 { print; exit }' /tmp/bw.client)"
  if [ $status -eq 0 ] && [ $sstatus -eq 0 ] && [ "${bytes:-}" = $SIZE ] && [ "${iters:-}" = $ITERS ]; then
    pass "ib_write_bw -d mr0/mr1 between ns0 and ns1: $ITERS x $SIZE bytes in $(elapsed "$start")s"
  else
    not_ok "ib_write_bw between ns0 and ns1 (client $status, server $sstatus)"
    sed 's/^/#   client: /' /tmp/bw.client | tail -n 15; sed 's/^/#   server: /' /tmp/bw.server | tail -n 8
  fi
else
  not_ok "ib_write_bw server did not listen"; sed 's/^/#   /' /tmp/bw.server
  kill $server 2>/dev/null; wait $server 2>/dev/null
fi

# Contexts on kernel devices lease their source ports from the daemon too
# (naming the home port the module gave them).
leased_both() { [ "$(lease_lines)" -ge $((leases_before + 2)) ]; }
expect "both ib_write_bw contexts (mr0, mr1) leased ports from metaroced" leased_both
grep ': home port ' /tmp/metaroced.log | tail -n 2 | sed 's/^/#   metaroced: /'

# --- stop, purge ---------------------------------------------------------------
expect "metaroced exits 0 on SIGTERM" sh -c "kill -TERM $daemon"
wait $daemon; rc=$?
[ $rc -eq 0 ] && pass "metaroced exited with 0" || not_ok "metaroced exited with $rc"
expect "rdma link del mr0 mr1" sh -c "rdma link del mr0 && rdma link del mr1"
expect "modprobe -r metaroce" modprobe -r metaroce

start=$(date +%s)
if apt-get purge -y -q -o Dpkg::Use-Pty=0 "${PACKAGES[@]}" >/tmp/apt-purge.log 2>&1; then
  pass "apt-get purge of the five packages in $(elapsed "$start")s"
else
  not_ok "apt-get purge (status $?)"; sed 's/^/#   /' /tmp/apt-purge.log | tail -n 20
fi
for p in "${PACKAGES[@]}"; do expect_not "dpkg no longer knows $p (purged, not just removed)" known_to_dpkg "$p"; done
expect_not "dkms knows no metaroce" dkms_has_metaroce
expect "no DKMS tree or source left" sh -c "! ls -d /var/lib/dkms/metaroce /usr/src/metaroce-* 2>/dev/null"
expect_not "no metaroce module for $kver left" module_file
expect "modules.dep and modules.alias no longer name metaroce" sh -c "! grep -q metaroce /lib/modules/$kver/modules.dep /lib/modules/$kver/modules.alias"
expect "no /etc/metaroce, no driver file" sh -c "! ls -d /etc/metaroce /etc/libibverbs.d/metaroce.driver 2>/dev/null"
leftover() {  # paths of the packages that did not exist before and still do
  local p
  while read -r p; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    grep -qxF "$p" /tmp/pkg-paths-before || echo "$p"
  done </tmp/pkg-paths
}
leftover >/tmp/pkg-leftover
expect "every path the packages installed is gone" test ! -s /tmp/pkg-leftover
sed 's/^/#   left: /' /tmp/pkg-leftover | head -n 20
# Whatever install, DKMS and purge wrote lives in the overlay's upper layer:
# no file or directory named after us may stay there. (/tmp holds this
# test's own files.)
if [ -d "$upper" ]; then
  find "$upper" -path "$upper/tmp" -prune -o -iname '*metaroce*' -print >/tmp/pkg-upper-left
  expect "nothing named *metaroce* left in the overlay's written files" test ! -s /tmp/pkg-upper-left
  sed "s|^$upper|#   left: |" /tmp/pkg-upper-left | head -n 20
else
  not_ok "the overlay's upper layer is not visible at $upper"
fi

# --- the kernel log ----------------------------------------------------------------
check_kernel_log

