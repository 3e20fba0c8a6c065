#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Boots Debian's kernel (linux-image-amd64) under qemu (TCG: software
# emulation) with the host's root shared read-only over 9p under a tmpfs
# overlay, runs a guest test script and exits with its status.
#
#   vm-run.sh --ko PATH/metaroce.ko --provider PATH/libmetaroce.so.1.0.0
#             --work DIR --test GUEST_SCRIPT [--probe PATH]... [--timeout SECONDS]
#   vm-run.sh --debs DIR --work DIR --test GUEST_SCRIPT [--timeout SECONDS]
#
# Each --probe program is copied to the guest's $MROCE_STAGE/bin.
# With --pair two guests run the script, each with its role (a or b), joined
# by an Ethernet link of their own (below); both must pass.
# With --debs the guest gets the .debs of DIR (scripts/build-debs) instead
# of a built module, and a module tree of its own on tmpfs that holds only
# the modules the install test loads (see stage_install_modules).
#
# Exit 0 only when the guest printed "METAROCE-VM-RESULT: PASS" and wrote 0
# to qemu's isa-debug-exit device; a timeout, a panic, a reboot or anything
# else is a failure. 77 (skip, one line) when this machine cannot run it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ko="" provider="" work="" test="" probes=() debs="" pair="" timeout=720
while [ $# -gt 0 ]; do
  case $1 in
    --debs) debs=$2; shift 2 ;;
    --ko) ko=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --probe) probes+=("$2"); shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --pair) pair=1; shift ;;
    *) echo "vm-run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
skip() { echo "SKIP vm: $*"; exit 77; }
[ -z "$debs" ] || debs=${METAROCE_DEBS:-$debs}

kver=$("$here/kernel-version.sh")
[ "$(id -u)" -eq 0 ] || skip "needs root (the guest shares the host's root file system)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed (qemu-system-x86)"
[ -n "$kver" ] || skip "linux-image-amd64 not installed"
[ -r "/boot/vmlinuz-$kver" ] || skip "no /boot/vmlinuz-$kver"
[ -d "/usr/src/linux-headers-$kver" ] || skip "no headers for $kver (linux-headers-amd64)"
# Not grep -q: busybox writes its list a name at a time, and once grep -q
# has found switch_root and quit, a later write kills busybox with SIGPIPE,
# which pipefail turns into a skip.
[ -x /bin/busybox ] && /bin/busybox --list | grep -x switch_root >/dev/null ||
  skip "no static busybox (busybox-static)"
if [ -n "$debs" ]; then
  ls "$debs"/*.deb >/dev/null 2>&1 || skip "no packages in $debs (build them with scripts/build-debs $debs)"
  command -v dkms >/dev/null || skip "dkms not installed (scripts/install-deps)"
else
  [ -n "$ko" ] && [ -f "$ko" ] || skip "metaroce.ko was not built"
  [ -n "$provider" ] && [ -f "$provider" ] || { echo "vm-run.sh: provider '$provider' missing" >&2; exit 1; }
fi
[ -n "$work" ] && [ -n "$test" ] || { echo "vm-run.sh: --work and --test are required" >&2; exit 2; }
test=$(cd "$(dirname "$test")" && pwd)/$(basename "$test")

rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

stage=$work/stage
mods=$stage/lib/modules/$kver
if [ -z "$debs" ]; then
  # --- the guest's module tree: the host's modules (symlinked) + metaroce.ko,
  # depmod'ed here: in the guest depmod takes minutes over 9p.
  mkdir -p "$mods/extra"
  cp -rs "/lib/modules/$kver/kernel" "$mods/kernel"
  cp "/lib/modules/$kver"/modules.builtin* "/lib/modules/$kver/modules.order" "$mods/"
  cp "$ko" "$mods/extra/metaroce.ko"
  depmod -b "$stage" "$kver"
  grep -q '^alias rdma-link-metaroce metaroce$' "$mods/modules.alias" ||
    { echo "vm-run.sh: depmod did not record the rdma-link-metaroce alias" >&2; exit 1; }
  # What the guest installs into its overlay: the provider and its driver file.
  mkdir -p "$stage/provider" "$stage/bin"
  cp "$provider" "$stage/provider/libmetaroce-rdmav34.so"  # as libibverbs' provider directory names it
  [ ${#probes[@]} -eq 0 ] || cp "${probes[@]}" "$stage/bin/"
else
  # --- the install test's module tree, which guest-boot.sh mounts (tmpfs)
  # as /lib/modules/$kver: DKMS installs metaroce.ko into it and runs depmod
  # there, for real. depmod reads every module of the tree, which over 9p
  # under emulation takes minutes for the ~4000 modules of the kernel; this
  # tree holds copies of the modules the test loads (and their
  # dependencies), plus the kernel's own module lists.
  mkdir -p "$mods"
  cp -a "/lib/modules/$kver"/modules.builtin* "/lib/modules/$kver/modules.order" "$mods/"
  for link in build source; do
    [ ! -L "/lib/modules/$kver/$link" ] || cp -a "/lib/modules/$kver/$link" "$mods/"
  done
  # ib_uverbs/ib_core/udp_tunnel/ip6_udp_tunnel/libcrc32c (with crc32c_generic,
  # its crc32c): what metaroce.ko needs
  # (rdma_ucm: its soft dependency, for rdma_cm); veth: the test's links;
  # tcp_diag/udp_diag: ss; nf_tables: nft.
  for m in ib_uverbs ib_core udp_tunnel ip6_udp_tunnel libcrc32c crc32c_generic rdma_ucm veth tcp_diag udp_diag nf_tables; do
    modprobe -S "$kver" --show-depends "$m" | while read -r verb path _; do
      [ "$verb" = insmod ] || continue
      rel=${path#/lib/modules/"$kver"/}
      mkdir -p "$mods/$(dirname "$rel")"
      cp "$path" "$mods/$rel"
    done
  done
  depmod -b "$stage" "$kver"
  # The kernel headers DKMS builds against, as one tar file that the guest
  # unpacks onto its overlay: compiling against them over 9p costs a
  # round trip per header lookup (gcc tries each include directory), which
  # made the guest's module build take several minutes.
  hdr_build=$(readlink -f "/lib/modules/$kver/build")
  hdr_source=$(readlink -f "/lib/modules/$kver/source")
  hdr_kbuild=$(readlink -f "$hdr_build/scripts/..")
  tar -C / -cf "$stage/headers.tar" "${hdr_build#/}" "${hdr_source#/}" "${hdr_kbuild#/}"
  mkdir -p "$stage/debs"
  cp "$debs"/*.deb "$stage/debs/"
fi

# --- initramfs: static busybox and the modules that mount the root.
initrd=$work/initramfs
mkdir -p "$initrd/bin" "$initrd/modules"
cp /bin/busybox "$initrd/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$initrd/bin/$applet"
done
: >"$initrd/modules/order"
for m in virtio virtio_ring virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -S "$kver" --show-depends "$m" | while read -r verb path _; do
    [ "$verb" = insmod ] || continue
    name=$(basename "$path")
    case $name in
      *.ko.xz) xz -dc "$path" >"$initrd/modules/${name%.xz}"; name=${name%.xz} ;;
      *.ko.zst) zstd -qdc "$path" >"$initrd/modules/${name%.zst}"; name=${name%.zst} ;;
      *) cp "$path" "$initrd/modules/$name" ;;
    esac
    grep -qx "$name" "$initrd/modules/order" || echo "$name" >>"$initrd/modules/order"
  done
done
cp "$here/initramfs-init" "$initrd/init"
chmod +x "$initrd/init"
(cd "$initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.cpio.gz"

# --- boot. The console goes to our stdout (the test log) and a file.
# boot NAME APPEND QEMU_ARGS...: one guest, its console also in
# $work/NAME.log; returns qemu's status.
boot() {
  local name=$1 extra=$2; shift 2
  local append="console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init mroce.boot=$here/guest-boot.sh"
  append+=" mroce.stage=$stage mroce.test=$test $extra"
  timeout --kill-after=10 "$timeout" qemu-system-x86_64 \
    -machine pc -accel tcg,thread=multi -cpu max -m 2048 \
    -nodefaults -display none -no-reboot \
    -kernel "/boot/vmlinuz-$kver" -initrd "$work/initramfs.cpio.gz" -append "$append" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    "$@" -serial stdio -monitor none </dev/null | tee "$work/$name.log"
  return "${PIPESTATUS[0]}"
}
# verdict NAME STATUS: the guest's result, from qemu's status and its console.
verdict() {
  local log=$work/$1.log
  if [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then
    echo "FAIL vm $1: timeout after ${timeout}s"; return 1
  fi
  if grep -q 'Kernel panic' "$log"; then echo "FAIL vm $1: guest kernel panic"; return 1; fi
  # isa-debug-exit with 0 -> qemu exit status 1.
  if [ "$2" -eq 1 ] && grep -q '^METAROCE-VM-RESULT: PASS' "$log"; then
    echo "PASS vm $1"; return 0
  fi
  echo "FAIL vm $1: guest did not report success (qemu status $2)"
  return 1
}
echo "# vm: booting $kver under qemu (TCG), test $(basename "$test"), timeout ${timeout}s"
start=$(date +%s)
if [ -z "$pair" ]; then
  rc=0
  boot console "" -smp 2 || rc=$?
  echo "# vm: qemu exited with $rc after $(( $(date +%s) - start ))s"
  verdict console "$rc"
  exit
fi
# --pair: guests a and b, one vCPU each, joined by one Ethernet link (each
# qemu's virtio-net NIC sends its frames as UDP datagrams to the other's
# port on the host's loopback); a guest learns its role from mroce.role=.
# Guest a's console is shown once both are done, b's as it runs.
port_a=$((20000 + RANDOM % 20000)) port_b=$((port_a + 1))
link() { echo "-netdev socket,id=link,localaddr=127.0.0.1:$1,udp=127.0.0.1:$2 -device virtio-net-pci,netdev=link,mac=$3"; }
# shellcheck disable=SC2046  # link's words are qemu arguments
boot a mroce.role=a -smp 1 $(link $port_a $port_b 52:54:00:4d:52:0a) >/dev/null &
pid_a=$!
set +e
# shellcheck disable=SC2046
boot b mroce.role=b -smp 1 $(link $port_b $port_a 52:54:00:4d:52:0b) | sed 's/^/b: /'
rc_b=${PIPESTATUS[0]}
wait $pid_a
rc_a=$?
set -e
sed 's/^/a: /' "$work/a.log"
echo "# vm: both guests done after $(( $(date +%s) - start ))s"
status=0
verdict a "$rc_a" || status=1
verdict b "$rc_b" || status=1
exit $status
