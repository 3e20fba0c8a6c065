#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The software stacks users run, over the kernel device, inside the test VM
# (tests/vm/vm-run.sh): two network namespaces joined by veth (1500-byte
# MTU), mr0 on one end and mr1 on the other; Debian's ucx-utils: ucx_info
# lists the devices, ucx_perftest runs over rc_verbs (tag_bw, put_bw,
# am_lat) and ud_verbs (tag_bw, am_lat) without and with 1% nftables loss,
# beside UCX's tcp transport on the same links.
# Prints PASS/FAIL lines and a results table; exits 0 only if all passed.
# Under emulation the figures are functional, not performance.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh"

echo "# guest: $(uname -r), $(nproc) CPUs"
provider_dir=$(pkg-config --variable=libdir libibverbs 2>/dev/null)/libibverbs
[ -d "$provider_dir" ] || provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
cp "$MROCE_STAGE/provider/libmetaroce-rdmav34.so" "$provider_dir/"
echo "driver metaroce" >/etc/libibverbs.d/metaroce.driver

make_pair ns0 ns1 mra mrb 10.0.0
check "rdma link add mr0 (ns0) and mr1 (ns1)" sh -c \
  "ip netns exec ns0 rdma link add mr0 type metaroce netdev mra && ip netns exec ns1 rdma link add mr1 type metaroce netdev mrb"
check "GID tables hold the addresses" wait_until 20 sh -c ". $(dirname "$0")/guest-lib.sh; gid_index mr0 10.0.0.1 && gid_index mr1 10.0.0.2"
check "ibv_devinfo -d mr0: active MTU 1024 on the 1500-byte veth" sh -c \
  "ip netns exec ns0 ibv_devinfo -d mr0 | grep -Eq 'active_mtu:[[:space:]]+1024 '"

# loss PERCENT: random loss on both veth ends (nftables), 0 clears it.
loss() {
  local ns
  for ns in ns0 ns1; do
    ip netns exec $ns nft delete table inet mrloss 2>/dev/null || true
    [ "$1" = 0 ] && continue
    ip netns exec $ns nft -f - <<NFT
table inet mrloss {
  chain in { type filter hook input priority 0; policy accept; udp dport != 13337 numgen random mod 1000 < $(( $1 * 10 )) drop; }
}
NFT
  done
}

# --- UCX ---------------------------------------------------------------------
check "ucx_info -d lists mr0:1 with rc_verbs and ud_verbs" sh -c \
  "ip netns exec ns0 ucx_info -d >/tmp/ucx_info 2>&1; grep -q 'Device: mr0:1' /tmp/ucx_info &&
   grep -q 'Transport: rc_verbs' /tmp/ucx_info && grep -q 'Transport: ud_verbs' /tmp/ucx_info"
grep -E "Device: mr|Transport: (rc|ud)_verbs" /tmp/ucx_info | sed 's/^/# /' | head -8

declare -A RESULT
PORT=13337
# perftest NAME TLS LOSS ARGS...: one ucx_perftest server (ns1) and client
# (ns0); records its final figure.
perftest() {
  local name=$1 tls=$2 pct=$3; shift 3
  local log=/tmp/ucx.$name.$tls.$pct
  local sdev=mr1:1 cdev=mr0:1 list=$tls,self
  [ "$tls" = tcp ] && { sdev=mrb; cdev=mra; }
  # rc_verbs connects its endpoints through an auxiliary transport: UCX's
  # "rc" is rc_verbs with ud_verbs for that.
  [ "$tls" = rc_verbs ] && list=rc,self
  loss "$pct"
  ip netns exec ns1 env UCX_NET_DEVICES=$sdev UCX_TLS=$list timeout 300 ucx_perftest "$@" -p $PORT >"$log.server" 2>&1 &
  local server=$!
  if ! wait_until 60 listening ns1 $PORT; then
    fail "ucx_perftest $name over $tls, loss $pct%: server did not listen"; sed 's/^/#   /' "$log.server" | tail -20
    kill $server 2>/dev/null; wait $server 2>/dev/null; RESULT[$name,$tls,$pct]=fail; return
  fi
  local status=0 sstatus=0
  # UCX_LOG_LEVEL=info prints the lanes each endpoint uses.
  ip netns exec ns0 env UCX_NET_DEVICES=$cdev UCX_TLS=$list UCX_LOG_LEVEL=info timeout 300 ucx_perftest 10.0.0.2 "$@" -p $PORT >"$log.client" 2>&1 || status=$?
  wait $server || sstatus=$?
  # The "Final:" line: iterations, then latency (typical, avg, overall) and
  # bandwidth (average, overall) and message rate.
  local final; final=$(grep -E '^ *Final:' "$log.client" | tail -1)
  local lanes; lanes=$(grep -aoE '(tag|am|rma_bw#0|rma|amo|wireup)\([a-z_]+/[a-z0-9:]+\)' "$log.client" | sort -u | tr '\n' ' ')
  echo "# $name over $tls: lanes $lanes"
  if [ $status -eq 0 ] && [ $sstatus -eq 0 ] && [ -n "$final" ] && [[ "$lanes" == *"$tls/"* ]]; then
    RESULT[$name,$tls,$pct]=$(echo "$final" | awk '{ print $3 " us, " $6 " MB/s" }')
    pass "ucx_perftest $name over $tls, loss $pct%: ${RESULT[$name,$tls,$pct]}"
  else
    fail "ucx_perftest $name over $tls, loss $pct% (client $status, server $sstatus)"
    local side
    for side in client server; do
      grep -aE 'UCX +(ERROR|FATAL|WARN)|Fatal|Assertion|Caught signal|failed|completion' "$log.$side" | grep -av 'metaroced' | head -n 8 |
        sed "s/^/#   $side: /"
    done
    RESULT[$name,$tls,$pct]=fail
  fi
}

for pct in 0 1; do
  perftest tag_bw rc_verbs $pct -t tag_bw -s 65536 -n 100
  perftest put_bw rc_verbs $pct -t ucp_put_bw -s 65536 -n 100
  perftest am_lat rc_verbs $pct -t ucp_am_lat -s 8 -n 300
  perftest tag_bw ud_verbs $pct -t tag_bw -s 65536 -n 100
  perftest am_lat ud_verbs $pct -t ucp_am_lat -s 8 -n 300
  perftest tag_bw tcp $pct -t tag_bw -s 65536 -n 100
done
loss 0

# --- Open MPI over UCX -----------------------------------------------------------
# mpirun in ns0 starts the second host's daemon through an "rsh" that enters
# ns1 (and names that side's devices); rank 0 runs in ns0, rank 1 in ns1.
MPI_CHECK=$MROCE_STAGE/bin/mpi_check
AGENT=/tmp/netns-rsh
cat >$AGENT <<'AGENT'
#!/bin/sh
host=$1; shift
case $host in
  10.0.0.2) exec ip netns exec ns1 env UCX_NET_DEVICES="$NS1_DEVICES" sh -c "$*" ;;
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
       mpirun --allow-run-as-root -np 2 --host 10.0.0.1,10.0.0.2 --mca plm_rsh_agent $AGENT \
       --mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any --mca btl self \
       "$MPI_CHECK" 200 32 64 >"$log" 2>&1 && grep -q '"verified":true' "$log"; then
    MPI_RESULT[$tls,$pct]=$(grep -o '{.*}' "$log" | tail -1)
    pass "MPI over UCX $tls, loss $pct%: ${MPI_RESULT[$tls,$pct]}"
  else
    fail "MPI over UCX $tls, loss $pct%"; tail -n 20 "$log" | sed 's/^/#   /'
    MPI_RESULT[$tls,$pct]=fail
  fi
}
if [ -x "$MPI_CHECK" ] && command -v mpirun >/dev/null; then
  for pct in 0 1; do
    mpi rc,self mr0:1 mr1:1 $pct
    mpi tcp,self mra mrb $pct
  done
  loss 0
else
  echo "# no mpi_check or mpirun: Open MPI not tried"
fi

echo "# results (ucx_perftest Final: typical latency, average bandwidth; emulated, functional only)"
printf '# %-8s %-9s %-24s %-24s\n' test tls "loss 0%" "loss 1%"
for t in "tag_bw rc_verbs" "put_bw rc_verbs" "am_lat rc_verbs" "tag_bw ud_verbs" "am_lat ud_verbs" "tag_bw tcp"; do
  set -- $t
  printf '# %-8s %-9s %-24s %-24s\n' "$1" "$2" "${RESULT[$1,$2,0]:-}" "${RESULT[$1,$2,1]:-}"
done

for t in rc,self tcp,self; do
  printf '# MPI %-9s loss 0%%: %s\n# MPI %-9s loss 1%%: %s\n' "$t" "${MPI_RESULT[$t,0]:-}" "$t" "${MPI_RESULT[$t,1]:-}"
done
echo "# passed $PASSED, failed $FAILED"
[ "$FAILED" -eq 0 ]
