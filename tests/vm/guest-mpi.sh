#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Open MPI 4.1 over UCX over the kernel device, inside the test VM
# (tests/vm/vm-run.sh), on the setup of guest-stacks-lib.sh: an MPI program
# of two ranks (mpi_check.c: ping-pong latency, 1 MiB bandwidth, a verified
# 64 MiB MPI_Allreduce) with `mpirun --mca pml ucx`, rank 0 in ns0 and rank
# 1 in ns1, over UCX's rc (rc_verbs on mr0/mr1) and beside it over UCX's
# tcp on the same links, with 1% nftables loss (MPI_LOSSES="0 1" adds the
# lossless run; docs/verbs.md has both). Prints "ok - ..." / "not ok - ..."
# lines and the results; exits 0 only if all passed.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh" || exit 1
. "$(dirname "$0")/guest-stacks-lib.sh" || exit 1

# --- Open MPI over UCX -----------------------------------------------------------
# Two hosts, node0 (ns0) and node1 (ns1): mpirun in ns0 starts node1's
# daemon through an "rsh" that enters ns1 with a host name of its own (ORTE
# tells nodes apart by name) and that side's devices; rank 0 runs in ns0,
# rank 1 in ns1.
MPI_CHECK=$MROCE_STAGE/bin/mpi_check
AGENT=/tmp/netns-rsh
hostname node0
printf '10.0.0.1 node0\n10.0.0.2 node1\n' >>/etc/hosts
cat >$AGENT <<'AGENT'
#!/bin/sh
host=$1; shift
case $host in
  node1) exec ip netns exec ns1 unshare --uts sh -c "hostname node1; export UCX_NET_DEVICES='$NS1_DEVICES'; $*" ;;
  *) exec ip netns exec ns0 sh -c "$*" ;;
esac
AGENT
chmod +x $AGENT
declare -A MPI_RESULT
# mpi TLS DEV0 DEV1 LOSS: the MPI program over UCX transports TLS.
mpi() {
  local tls=$1 dev0=$2 dev1=$3 pct=$4 log=/tmp/mpi.$1.$4
  loss "$pct"
  if ip netns exec ns0 env UCX_TLS="$tls" UCX_NET_DEVICES="$dev0" NS1_DEVICES="$dev1" timeout 600 \
       mpirun --allow-run-as-root -np 2 --host node0,node1 --mca plm_rsh_agent $AGENT \
       --mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any --mca btl self \
       "$MPI_CHECK" 200 32 64 >"$log" 2>&1 && grep -q '"verified":true' "$log"; then
    MPI_RESULT[$tls,$pct]=$(grep -o '{.*}' "$log" | tail -1)
    pass "MPI over UCX $tls, loss $pct%: ${MPI_RESULT[$tls,$pct]}"
  else
    not_ok "MPI over UCX $tls, loss $pct%"; tail -n 20 "$log" | sed 's/^/#   /'
    MPI_RESULT[$tls,$pct]=fail
  fi
}
if [ -x "$MPI_CHECK" ] && command -v mpirun >/dev/null; then
  for pct in ${MPI_LOSSES:-1}; do
    mpi rc,self mr0:1 mr1:1 "$pct"
    mpi tcp,self mra mrb "$pct"
  done
  loss 0
else
  not_ok "no mpi_check (libopenmpi-dev at build time) or no mpirun (openmpi-bin)"
fi

for t in rc,self tcp,self; do
  for pct in ${MPI_LOSSES:-1}; do printf '# MPI %-9s loss %s%%: %s\n' "$t" "$pct" "${MPI_RESULT[$t,$pct]:-}"; done
done
