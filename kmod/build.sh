#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Builds metaroce.ko out of the source tree, as meson's custom target:
#   build.sh KDIR SRCDIR(kmod/) INCLUDEDIR(include/) WORKDIR OUTPUT
# Kbuild writes its objects beside the sources, so they are copied first.
set -eu
kdir=$1 src=$2 inc=$3 work=$4 out=$5
rm -rf "$work"
mkdir -p "$work/kmod" "$work/include/metaroce"
cp "$src"/Kbuild "$src"/Makefile "$src"/*.c "$src"/*.h "$work/kmod/"
cp "$inc"/metaroce/abi.h "$inc"/metaroce/qp_rules.h "$work/include/metaroce/"
make -s -C "$kdir" M="$work/kmod" modules >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
# Kbuild's warnings are not fatal by default; ours are.
if grep -E 'warning:' "$work/build.log" | grep -v 'Skipping BTF' >&2; then exit 1; fi
cp "$work/kmod/metaroce.ko" "$out"
