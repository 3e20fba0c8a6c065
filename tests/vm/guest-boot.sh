#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# PID 1 of the test VM after switch_root: basic mounts, loopback, the staged
# module tree, then the test script; its status goes back to the host as a
# serial-console line and through qemu's isa-debug-exit device.
# Kernel command line: mroce.stage=DIR (from vm-run.sh), mroce.test=SCRIPT,
# mroce.role=a|b (one of two guests, vm-run.sh --pair).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /run
# /tmp stays the overlay's (writable): the host's build tree, the staged
# modules and the test script may live under /tmp, as in a clean clone there.
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
# What udev would add: bash's <(...) (dkms uses it) needs /dev/fd.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /var/run/netns
ip link set lo up
stage="" test=""
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
    mroce.stage=*) stage=${arg#mroce.stage=} ;;
    mroce.test=*) test=${arg#mroce.test=} ;;
    mroce.role=*) export MROCE_ROLE="${arg#mroce.role=}" ;;  # vm-run.sh --pair: a or b
  esac
done

finish() {  # finish STATUS: report and power off (never returns)
  echo "METAROCE-VM-RESULT: $([ "$1" -eq 0 ] && echo PASS || echo "FAIL ($1)")"
  # isa-debug-exit: qemu exits with (value << 1) | 1.
  if [ "$1" -eq 0 ]; then printf '\000' ; else printf '\001'; fi |
    dd of=/dev/port bs=1 seek=244 count=1 conv=notrunc 2>/dev/null
  echo o >/proc/sysrq-trigger
  sleep 10
}

kver=$(uname -r)
# depmod ran on the host (in the guest it takes minutes over 9p): put its
# output and metaroce.ko into the overlay's module tree.
if [ -n "$stage" ] && [ -f "$stage/lib/modules/$kver/extra/metaroce.ko" ]; then
  mkdir -p "/lib/modules/$kver/extra"
  cp "$stage/lib/modules/$kver"/modules.* "/lib/modules/$kver/"
  cp "$stage/lib/modules/$kver/extra/metaroce.ko" "/lib/modules/$kver/extra/"
elif [ -n "$stage" ] && [ -d "$stage/debs" ] && [ -d "$stage/lib/modules/$kver" ]; then
  # The install test (vm-run.sh --debs): the staged, smaller module tree
  # on tmpfs, where DKMS installs the module and runs depmod.
  mount -t tmpfs -o size=64m tmpfs "/lib/modules/$kver"
  cp -a "$stage/lib/modules/$kver/." "/lib/modules/$kver/"
  # The same kernel headers, in memory (see vm-run.sh).
  [ ! -f "$stage/headers.tar" ] || tar -C / -xf "$stage/headers.tar"
else
  echo "guest-boot: no staged module tree for $kver in '$stage'"
  finish 1
fi
export MROCE_STAGE="$stage"
[ -n "$test" ] && [ -r "$test" ] || { echo "guest-boot: no test script '$test'"; finish 1; }
# Test scripts name their interpreter (bash).
if [ -x "$test" ]; then "$test"; else sh "$test"; fi
finish $?
