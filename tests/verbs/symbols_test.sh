#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#
# Symbol versions of the two libraries, checked with nm -D:
#  * libmetaroce-rdmav34.so imports libibverbs' private ABI at
#    IBVERBS_PRIVATE_34 and exports only metaroce_dv_* (METAROCE_1.0) and
#    metaroce_priv_* (METAROCE_PRIVATE_1);
#  * libmetaroce-preload.so defines each interposer at libibverbs' default
#    version of that function, and every reference Debian's ibverbs-utils and
#    perftest binaries make to one of them asks for exactly that version (a
#    versioned reference binds only to a definition of the same version).
#
#   symbols_test.sh PROVIDER_SO PRELOAD_SO
source "$(dirname "$0")/../lib/harness.sh" || exit 1
set -uo pipefail
provider=${1:?provider .so}
preload=${2:?preload .so}

imports=$(nm -D --undefined-only "$provider")
for sym in verbs_register_driver_34 _verbs_init_and_alloc_context verbs_uninit_context verbs_set_ops verbs_open_device; do
  grep -q " U $sym@IBVERBS_PRIVATE_34\$" <<<"$imports" || not_ok "provider does not import $sym@IBVERBS_PRIVATE_34"
done
exports=$(nm -D --defined-only "$provider" | awk '$2 == "T" { print $3 }')
while read -r e; do
  [[ -z "$e" ]] && continue
  [[ "$e" =~ ^metaroce_dv_[a-z_]+@@METAROCE_1\.0$ || "$e" =~ ^metaroce_priv_[a-z_]+@@METAROCE_PRIVATE_1$ ]] ||
    not_ok "provider exports $e"
done <<<"$exports"
grep -q '^metaroce_dv_open_device@@METAROCE_1.0$' <<<"$exports" || not_ok "metaroce_dv_open_device not exported"

declare -A want=(
  [ibv_get_device_list]=IBVERBS_1.1 [ibv_free_device_list]=IBVERBS_1.1 [ibv_get_device_guid]=IBVERBS_1.1
  [ibv_query_gid]=IBVERBS_1.1 [ibv_query_pkey]=IBVERBS_1.1 [ibv_get_pkey_index]=IBVERBS_1.5
  [_ibv_query_gid_ex]=IBVERBS_1.11 [_ibv_query_gid_table]=IBVERBS_1.11
  [ibv_query_gid_type]=IBVERBS_PRIVATE_34
  [ibv_create_comp_channel]=IBVERBS_1.0 [ibv_destroy_comp_channel]=IBVERBS_1.0
)
defined=$(nm -D --defined-only "$preload" | awk '$2 == "T" { print $3 }')
libibverbs=$(ldconfig -p | awk '/libibverbs\.so\.1 / { print $NF; exit }')
libdefs=$(nm -D --defined-only "$libibverbs" | awk '{ print $3 }')
for sym in "${!want[@]}"; do
  grep -qx "$sym@@${want[$sym]}" <<<"$defined" || not_ok "preload does not define $sym@@${want[$sym]}"
  grep -qx "$sym@@${want[$sym]}" <<<"$libdefs" || not_ok "libibverbs' default version of $sym is not ${want[$sym]}"
done
count=$(grep -c . <<<"$defined")
[[ $count -eq ${#want[@]} ]] || not_ok "preload defines $count functions, expected ${#want[@]}: $defined"

for prog in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ibv_devices ibv_devinfo; do
  path=$(command -v "$prog") || continue
  while read -r ref; do
    name=${ref%@*}
    version=${ref#*@}
    [[ -n "${want[$name]:-}" ]] || continue
    if [[ "$version" == "${want[$name]}" ]]; then pass "$prog $ref"; else not_ok "$prog references $ref, preload defines ${want[$name]}"; fi
  done < <(nm -D --undefined-only "$path" | awk '{ print $2 }')
done
