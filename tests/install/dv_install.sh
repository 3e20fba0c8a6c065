#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# metaroce_dv.h is usable outside the tree: the build is installed into a
# scratch DESTDIR, and a program (dv_program.c) is compiled and linked there
# with nothing but `pkg-config metaroce` (PKG_CONFIG_SYSROOT_DIR points it at
# the DESTDIR): it finds the header and the library, needs libmetaroce.so.1
# with no RUNPATH, and runs (a kernel-less device on loopback, its verbs
# objects). The installed provider symlink and the man pages are checked
# too. No root.
#
#   dv_install.sh BUILD_DIR
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -euo pipefail
build=${1:?build directory}
here=$(cd "$(dirname "$0")" && pwd)
unset LD_LIBRARY_PATH  # meson's, to the build tree: only the installed tree counts here
for tool in pkg-config cc readelf; do command -v "$tool" >/dev/null || skip "$tool not installed"; done

root=$WORK/root
meson install -C "$build" --no-rebuild --quiet --destdir "$root" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "meson install failed"; }
pc=$(find "$root" -name metaroce.pc -path '*/pkgconfig/*')
[[ -n $pc ]] || fail "no metaroce.pc installed"
export PKG_CONFIG_PATH=${pc%/*} PKG_CONFIG_SYSROOT_DIR=$root
libdir=$(pkg-config --variable=libdir metaroce)  # the sysroot included
pass "installed: $(pkg-config --modversion metaroce) ($(pkg-config --cflags --libs metaroce))"

# shellcheck disable=SC2046  # pkg-config's flags are words
cc -o "$WORK/dv_program" "$here/dv_program.c" $(pkg-config --cflags --libs metaroce) ||
    fail "dv_program.c does not build with pkg-config metaroce"
readelf -d "$WORK/dv_program" >"$WORK/dynamic"
grep -q 'NEEDED.*\[libmetaroce\.so\.1\]' "$WORK/dynamic" || fail "the program does not need libmetaroce.so.1: $(cat "$WORK/dynamic")"
! grep -Eq 'RUNPATH|RPATH' "$WORK/dynamic" || fail "the program has a search path: $(grep -E 'RUNPATH|RPATH' "$WORK/dynamic")"
pass "a program builds with pkg-config metaroce alone and needs libmetaroce.so.1 (no RUNPATH)"

# libibverbs loads the same file as its provider (the link is relative when
# both share a directory tree, as in the packages; absolute otherwise).
provider=$(find "$root" -path '*/libibverbs/libmetaroce-rdmav34.so')
[[ -L $provider ]] || fail "no link libibverbs/libmetaroce-rdmav34.so installed (${provider:-missing})"
target=$(readlink "$provider")
[[ $target == /* ]] && target=$root$target || target=$(dirname "$provider")/$target
[[ $(readlink -f "$target") == $(readlink -f "$libdir/libmetaroce.so.1") ]] ||
    fail "libibverbs/libmetaroce-rdmav34.so links to $(readlink "$provider"), not libmetaroce.so.1"
pass "libibverbs' provider ${provider#"$root"} is a link to libmetaroce.so.1"

LD_LIBRARY_PATH=$libdir "$WORK/dv_program" || fail "the installed program failed"
pass "the program opened a kernel-less device on loopback and made its verbs objects"

if [[ -f $build/docs/man/metaroce_dv.7 ]]; then
    mandir=$(dirname "$(find "$root" -name metaroce_dv.7 -path '*/man7/*')")/..
    for page in man7/metaroce_dv.7 man3/metaroce_dv_get_device_list.3 man3/metaroce_dv_free_device_list.3 \
        man3/metaroce_dv_open_device.3 man3/metaroce_dv_open.3 man3/metaroce_dv_is_metaroce_device.3 \
        man3/metaroce_dv_is_metaroce_context.3 man3/metaroce_dv_home_port.3; do
        [[ -s $mandir/$page ]] || fail "man page $page not installed"
    done
    pass "man pages of every metaroce_dv_* function installed"
else
    note "man pages not built (no scdoc): not checked"
fi
