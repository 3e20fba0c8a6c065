# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# Shared by guest-stacks.sh and guest-mpi.sh (sourced, bash, after
# guest-lib.sh): installs the provider, joins ns0 (mr0 on mra, 10.0.0.1) and
# ns1 (mr1 on mrb, 10.0.0.2) by a 1500-byte veth, and loss PERCENT.
echo "# guest: $(uname -r), $(nproc) CPUs"
provider_dir=$(pkg-config --variable=libdir libibverbs 2>/dev/null)/libibverbs
[ -d "$provider_dir" ] || provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
cp "$MROCE_STAGE/provider/libmetaroce-rdmav34.so" "$provider_dir/"
echo "driver metaroce" >/etc/libibverbs.d/metaroce.driver

make_pair ns0 ns1 mra mrb 10.0.0
expect "rdma link add mr0 (ns0) and mr1 (ns1)" sh -c \
  "ip netns exec ns0 rdma link add mr0 type metaroce netdev mra && ip netns exec ns1 rdma link add mr1 type metaroce netdev mrb"
both_gids() { gid_index mr0 10.0.0.1 && gid_index mr1 10.0.0.2; }
expect "GID tables hold the addresses" wait_until 20 both_gids
expect "ibv_devinfo -d mr0: active MTU 1024 on the 1500-byte veth" sh -c \
  "ip netns exec ns0 ibv_devinfo -d mr0 | grep -Eq 'active_mtu:[[:space:]]+1024 '"

# loss PERCENT: random loss on both veth ends, but not on the side channel
# (port 13337); 0 clears it.
loss() { set_loss "$1" "udp dport != 13337"; }

