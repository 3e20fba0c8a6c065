#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# rdma_cm over metaroce.ko's QP1, run inside the test VM (tests/vm/vm-run.sh)
# as root on a throw-away overlay of the host's root: unmodified librdmacm
# programs between two network namespaces joined by veth (mr0 in ns0, mr1
# in ns1), without and with 1% nftables loss on every UDP datagram (the CM's
# MADs included; every program but udaddy under loss), beside rxe running
# the same programs in the initial namespace (its own loopback: rxe in 6.1
# has no namespace support, and rxe delivers to a local address without
# the network stack, so no loss reaches it); then the failure paths: no listener, a peer killed
# mid-connection, the port going down and up, `rdma link del` and rmmod with
# rdma_cm ids open, and a clean kernel log.
# Prints "ok - ..." / "not ok - ..." lines (and "REFERENCE ...:" for rxe,
# not counted); exits 0 only if nothing failed.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
. "$(dirname "$0")/guest-lib.sh" || exit 1

reference_ok() { echo "REFERENCE ok: $*"; }
reference_failed() { echo "REFERENCE failed: $*"; }
echo "# guest: $(uname -r), $(nproc) CPUs"
suite_start=$(date +%s)

provider_dir=$(pkg-config --variable=libdir libibverbs 2>/dev/null)/libibverbs
[ -d "$provider_dir" ] || provider_dir=/usr/lib/x86_64-linux-gnu/libibverbs
cp "$MROCE_STAGE/provider/libmetaroce-rdmav34.so" "$provider_dir/"
echo "driver metaroce" >/etc/libibverbs.d/metaroce.driver

make_pair ns0 ns1 mra mrb 10.0.0
# An IPv6-only pair (the provider's device address is the netdev's).
make_pair ns2 ns3 mrc mrd 10.0.9
in_ns ns2 ip addr flush dev mrc scope global; in_ns ns3 ip addr flush dev mrd scope global
in_ns ns2 ip addr add fd00:6::1/64 dev mrc nodad; in_ns ns3 ip addr add fd00:6::2/64 dev mrd nodad
ip link add rxa type veth peer name rxb
ip addr add 10.0.1.1/24 dev rxa
ip link set rxa up; ip link set rxb up

expect "rdma link add mr0 type metaroce netdev mra (ns0)" in_ns ns0 rdma link add mr0 type metaroce netdev mra
expect "rdma link add mr1 type metaroce netdev mrb (ns1)" in_ns ns1 rdma link add mr1 type metaroce netdev mrb
expect "rdma link add mr2, mr3 on the IPv6 pair" sh -c "ip netns exec ns2 rdma link add mr2 type metaroce netdev mrc && ip netns exec ns3 rdma link add mr3 type metaroce netdev mrd"
expect "rdma link add rxe0 type rxe netdev rxa" rdma link add rxe0 type rxe netdev rxa
expect "rdma_ucm is loaded (metaroce's soft dependency)" module_loaded rdma_ucm
expect "/dev/infiniband/rdma_cm exists" test -c /dev/infiniband/rdma_cm
gsi_qp() { rdma resource show qp link "$1/1" 2>/dev/null | grep -q 'lqpn 1 .*type GSI'; }
expect "the MAD layer created QP1 on mr0 (rdma resource: lqpn 1, type GSI)" gsi_qp mr0
rdma resource show qp link mr0/1 | sed 's/^/# /'
expect "port capabilities: CM supported (sysfs cap_mask)" sh -c "[ \$(( \$(cat /sys/class/infiniband/mr0/ports/1/cap_mask) & 0x10000 )) -ne 0 ]"
for d in "mr0 10.0.0.1" "mr1 10.0.0.2" "rxe0 10.0.1.1"; do wait_until 20 gid_index "${d% *}" "${d#* }"; done

# --- programs ------------------------------------------------------------------
# (fio's rdma engine: the rw=read job listens, the rw=write job connects,
# and verb is the operation the connecting side does: verb=read RDMA-reads
# the server's buffers, unverified; with verb=send the client fills its
# buffers with --buffer_pattern and the server verifies what it receives.
# The server listens on the wildcard address: fio 3.33 takes --bindname's
# first byte for the address.)
# cm_listening PORT: an rdma_cm id listens on PORT (rdma resource; on the
# server's address or, as perftest and fio bind, the wildcard address).
cm_listening() { rdma resource show cm_id 2>/dev/null | grep 'state LISTEN' | grep -qE "src-addr [^ ]*:$1( |\$)"; }
no_cm_listener() { ! cm_listening "$1"; }
declare -A RESULT
PORT=7000
# run_pair NAME TR LOSS WAIT CHECK -- SERVER... -- CLIENT...
#   TR: metaroce (server ns0 on 10.0.0.1, client ns1) or rxe (both in the
#   initial namespace on 10.0.1.1); SADDR and PORT are set for the
#   commands. WAIT: cm (an rdma_cm listener on SADDR:PORT) or tcp:N (a TCP
#   listener on port N). CHECK: a function given the client's and the
#   server's log files that prints the success line or fails.
run_pair() {
  local name=$1 tr=$2 loss=$3 wait=$4 checkfn=$5; shift 5
  [ "$1" = -- ] && shift
  local server=() client=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  if [ "$loss" != 0 ] && [[ " $NOT_UNDER_LOSS " == *" $name "* ]]; then
    RESULT[$name,$tr,$loss]="not run"; return
  fi
  [ "$tr" = metaroce ] && loss_for "$name" "$loss"
  local sns=ns0 cns=ns1 log=/tmp/cm.$name.$tr.$loss limit=90
  # rxe takes 1 to 4 s for each; a program that hangs over it is cut short.
  [ "$tr" = rxe ] && sns=init cns=init limit=15
  # -k: a program that ignores SIGTERM at its limit (fio over rxe, stuck in
  # its event loop) is killed; one left running holds its device open, and
  # rxe's removal waits for every user to close it.
  local attempt spid ok start cstatus sstatus
  for attempt in 1 2 3; do
    exec_in_ns $sns timeout -k 5 $limit "${server[@]}" >"$log.server" 2>&1 &
    spid=$! ok=1
    # shellcheck disable=SC2046  # ns_opt: nothing or "-n NS"
    case $wait in
      cm) wait_until 60 cm_listening "$PORT" || ok=0 ;;
      tcp:*) wait_tcp_listener $(ns_opt $sns) -p $spid -t 60 "${wait#tcp:}" || ok=0 ;;
    esac
    if [ $ok = 0 ]; then
      not_ok "$name over $tr, loss $loss: the server did not listen"
      sed 's/^/#   server: /' "$log.server" | tail -n 15
      kill $spid 2>/dev/null; wait $spid 2>/dev/null; RESULT[$name,$tr,$loss]=fail; return
    fi
    cstatus=0 sstatus=0
    start=$(date +%s.%N)
    in_ns $cns timeout -k 5 $limit "${client[@]}" >"$log.client" 2>&1 || cstatus=$?
    # A failed client leaves nothing for its server to wait for.
    [ $cstatus -eq 0 ] || kill $spid 2>/dev/null
    wait $spid || sstatus=$?
    # perftest -R connects twice, and its client's second REQ can reach the
    # server before the server listens again (perftest retries that only
    # for iWARP): a REJ for no listener (reason 8) is run again.
    if [ $cstatus -ne 0 ] && [ $attempt -lt 3 ] && [[ " $RETRIED_WITHOUT_LISTENER " == *" $name "* ]] &&
       grep -q 'RDMA_CM_EVENT_REJECTED; error: 8' "$log.client"; then
      echo "# $name over $tr, loss $loss: its second connect met no listener (REJ reason 8; perftest then crashed: status $cstatus), run again"
      # The killed server's listener must be gone, or the next server
      # cannot bind the port and the next client meets the old one.
      wait_until 30 no_cm_listener "$PORT" || echo "# $name: the killed server still listens on $PORT"
      continue
    fi
    break
  done
  local secs; secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local line
  # rxe is the reference: its results are shown, not counted.
  local ok_=pass fail_=not_ok
  [ "$tr" = rxe ] && ok_=reference_ok fail_=reference_failed
  if [ $cstatus -eq 0 ] && [ $sstatus -eq 0 ] && line=$($checkfn "$log.client" "$log.server"); then
    $ok_ "$name over $tr, loss $loss in ${secs}s: $line"
    RESULT[$name,$tr,$loss]="ok ${secs}s"
  else
    $fail_ "$name over $tr, loss $loss (client $cstatus, server $sstatus)"
    sed 's/^/#   client: /' "$log.client" | tail -n 15; sed 's/^/#   server: /' "$log.server" | tail -n 10
    RESULT[$name,$tr,$loss]=fail
  fi
}
addr_of() { [ "$1" = rxe ] && echo 10.0.1.1 || echo 10.0.0.1; }
dev_of() { [ "$1" = rxe ] && echo rxe0 || echo mr1; }
sdev_of() { [ "$1" = rxe ] && echo rxe0 || echo mr0; }

RPING_COUNT=20
rping_ok() {  # every ping's data came back and was checked (-V)
  local n; n=$(grep -c '^ping data: ' "$1")
  [ "$n" -eq $RPING_COUNT ] && ! grep -q 'data mismatch' "$1" && echo "$n pings, data validated (-V)"
}
ucmatose_ok() { grep -q 'return status 0' "$1" && echo "$(grep -c 'completion' "$1") completion lines, $(grep 'return status' "$1")"; }
udaddy_ok() { grep -q 'return status 0' "$1" && grep 'return status' "$1"; }
rdma_client_ok() { grep -q 'rdma_client: end 0' "$1" && grep -q 'rdma_server: end 0' "$2" && echo "rdma_client: end 0, rdma_server: end 0"; }
PERFTEST_BW_ITERS=50 PERFTEST_LAT_ITERS=100
perftest_bw_ok() { local l; l=$(awk '$1 == 65536 && NF >= 4 { print; exit }' "$1"); [ "$(echo "$l" | awk '{print $2}')" = $PERFTEST_BW_ITERS ] && echo "perftest: $l"; }
perftest_lat_ok() { local l; l=$(awk '$1 == 2 && NF >= 5 { print; exit }' "$1"); [ "$(echo "$l" | awk '{print $2}')" = $PERFTEST_LAT_ITERS ] && echo "perftest: $l"; }
# The result line: name bytes xfers iters total time Gb/sec usec/xfer.
rstream_ok() { local l; l=$(grep -E '^custom +4k +100 ' "$1" | tail -n 1); [ -n "$l" ] && echo "$l"; }
fi_pingpong_ok() { local l; l=$(grep -E '^[0-9]+' "$1" | tail -n 1); [ -n "$l" ] && echo "fi_pingpong: $l"; }
fio_ok() { grep -q 'err= 0' "$1" && ! grep -qi 'verify: bad\|bad magic\|verify failed' "$1" "$2" && grep -E '^ *(read|write):' "$1" | head -n 1 | sed 's/^ *//'; }

programs() {  # programs TR LOSS
  local tr=$1 loss=$2 cdev sdev
  SADDR=$(addr_of "$tr"); cdev=$(dev_of "$tr"); sdev=$(sdev_of "$tr")
  PORT=$((PORT + 1))
  run_pair rping "$tr" "$loss" cm rping_ok -- rping -s -a "$SADDR" -p $PORT -C $RPING_COUNT -- rping -c -a "$SADDR" -p $PORT -C $RPING_COUNT -v -V
  PORT=$((PORT + 1))
  run_pair ucmatose "$tr" "$loss" cm ucmatose_ok -- ucmatose -b "$SADDR" -p $PORT -- ucmatose -s "$SADDR" -p $PORT
  PORT=$((PORT + 1))
  run_pair rdma_client "$tr" "$loss" cm rdma_client_ok -- rdma_server -s "$SADDR" -p $PORT -- rdma_client -s "$SADDR" -p $PORT
  PORT=$((PORT + 1))
  run_pair ib_write_bw_R "$tr" "$loss" cm perftest_bw_ok -- ib_write_bw -R -d "$sdev" -n $PERFTEST_BW_ITERS -s 65536 -F -p $PORT -- ib_write_bw -R -d "$cdev" -n $PERFTEST_BW_ITERS -s 65536 -F -p $PORT "$SADDR"
  PORT=$((PORT + 1))
  run_pair ib_send_lat_R "$tr" "$loss" cm perftest_lat_ok -- ib_send_lat -R -d "$sdev" -n $PERFTEST_LAT_ITERS -F -p $PORT -- ib_send_lat -R -d "$cdev" -n $PERFTEST_LAT_ITERS -F -p $PORT "$SADDR"
  PORT=$((PORT + 1))
  run_pair rstream "$tr" "$loss" cm rstream_ok -- rstream -b "$SADDR" -p $PORT -S 4096 -C 100 -T v -- rstream -s "$SADDR" -p $PORT -S 4096 -C 100 -T v
  PORT=$((PORT + 1))
  run_pair riostream "$tr" "$loss" cm rstream_ok -- riostream -b "$SADDR" -p $PORT -S 4096 -C 100 -T v -- riostream -s "$SADDR" -p $PORT -S 4096 -C 100 -T v
  PORT=$((PORT + 1))
  run_pair fio_read "$tr" "$loss" cm fio_ok -- \
    fio --name=server --ioengine=rdma --port=$PORT --rw=read --verb=read --bs=64k --size=2m --iodepth=4 -- \
    fio --name=client --ioengine=rdma --hostname="$SADDR" --port=$PORT --verb=read --rw=write --bs=64k --size=2m --iodepth=4
  PORT=$((PORT + 1))
  # The receiving side has the deeper queue, as fio's rdma engine advises:
  # its client sets no RNR retries, so a SEND that finds the server between
  # a completion and its repost fails with RNR_RETRY_EXC_ERR (over any RC
  # transport; MetaRoCE's ACK, which leaves before the completion is seen,
  # makes the window easy to hit).
  run_pair fio_write "$tr" "$loss" cm fio_ok -- \
    fio --name=server --ioengine=rdma --port=$PORT --rw=read --bs=64k --size=2m --iodepth=16 --verb=send --verify=pattern --verify_pattern=0x3cc35aa5 -- \
    fio --name=client --ioengine=rdma --hostname="$SADDR" --port=$PORT --verb=send --rw=write --bs=64k --size=2m --iodepth=4 --buffer_pattern=0x3cc35aa5
  PORT=$((PORT + 1))
  run_pair fi_pingpong "$tr" "$loss" tcp:$PORT fi_pingpong_ok -- fi_pingpong -p "verbs;ofi_rxm" -e rdm -d "$sdev" -B $PORT -I 10 -S 4096 -c -- fi_pingpong -p "verbs;ofi_rxm" -e rdm -d "$cdev" -P $PORT -I 10 -S 4096 -c "$SADDR"
  # udaddy's -p is the port space: it always uses port 7174.
  local port=$PORT
  PORT=7174
  run_pair udaddy "$tr" "$loss" cm udaddy_ok -- udaddy -b "$SADDR" -- udaddy -s "$SADDR"
  PORT=$port
}
# Every program runs under loss but udaddy: its datagrams are UD, unreliable
# over any transport, and it waits for every one it was promised, with no
# retry; one lost in the 1% leaves it waiting.
NOT_UNDER_LOSS="udaddy"
# perftest's -R makes two rdma_cm connections in turn: its client connects
# the data QPs as soon as its control connection is established, and its
# server listens again only once it has seen that connection established
# too, which a lost RTU delays. The client's REQ then finds no listener
# (REJ, invalid service ID) and perftest 4.5 crashes in its error path. So
# perftest's loss spares the CM's MADs (metaroce.ko's QP1 port, 4788).
RETRIED_WITHOUT_LISTENER="ib_write_bw_R ib_send_lat_R"
declare -A LOSS_MATCH=([ib_write_bw_R]="udp dport != 4788" [ib_send_lat_R]="udp dport != 4788")
DROPPED=0
loss_for() {  # loss_for NAME LOSS: sets the loss NAME runs under, counting what the last one dropped
  DROPPED=$((DROPPED + $(dropped)))
  set_loss "$2" "${LOSS_MATCH[$1]:-}"
}
PROGRAMS="rping ucmatose rdma_client ib_write_bw_R ib_send_lat_R rstream riostream fio_read fio_write fi_pingpong udaddy"


# --- discovery: libfabric and UCX see the devices through librdmacm ------------
fi_info_ok() { in_ns ns0 fi_info -p verbs >/tmp/fi_info.out 2>&1 && grep -q 'domain: mr0' /tmp/fi_info.out; }
expect "fi_info -p verbs (ns0) lists a domain on mr0" fi_info_ok
grep -E 'provider|fabric|domain' /tmp/fi_info.out | sort | uniq | head -n 8 | sed 's/^/#   /'
ucx_cm_ok() { in_ns ns0 ucx_info -d >/tmp/ucx_info.out 2>&1; grep -q 'Connection manager: rdmacm' /tmp/ucx_info.out && ! grep -q 'failed to open connection manager' /tmp/ucx_info.out; }
expect "ucx_info -d (ns0) lists the rdmacm connection manager" ucx_cm_ok
grep -A3 'Connection manager' /tmp/ucx_info.out | sed 's/^/#   /' | head -n 6
grep -i 'failed' /tmp/ucx_info.out | sed 's/^/#   /' | head -n 4

for loss in 0 1; do
  programs metaroce $loss
  [ $loss = 0 ] && programs rxe $loss
  if [ $loss != 0 ]; then
    d=$((DROPPED + $(dropped)))
    if [ "$d" -gt 0 ]; then pass "1% loss was applied ($d datagrams dropped in ns0 and ns1)"; else not_ok "1% loss was applied"; fi
  fi
done
set_loss 0

# IPv6: rping between the IPv6-only pair.
SADDR=fd00:6::1 PORT=$((PORT + 1))
v6_rping() {
  ip netns exec ns2 timeout 120 rping -s -a fd00:6::1 -p $PORT -C $RPING_COUNT >/tmp/cm.rping6.server 2>&1 &
  local s=$!
  wait_until 60 cm_listening $PORT
  ip netns exec ns3 timeout 120 rping -c -a fd00:6::1 -p $PORT -C $RPING_COUNT -v -V >/tmp/cm.rping6.client 2>&1
  local c=$?
  wait $s && [ $c -eq 0 ] && rping_ok /tmp/cm.rping6.client
}
if line=$(v6_rping); then pass "rping over IPv6 (fd00:6::2 -> fd00:6::1): $line"; else
  not_ok "rping over IPv6"; sed 's/^/#   client: /' /tmp/cm.rping6.client | tail; sed 's/^/#   server: /' /tmp/cm.rping6.server | tail; fi

# --- the GSI counters --------------------------------------------------------------
hw() { cat /sys/class/infiniband/"$1"/ports/1/hw_counters/"$2" 2>/dev/null || echo 0; }
expect "mr0 received and sent MADs (hw_counters gsi_rx_mads, gsi_tx_mads)" sh -c "[ $(hw mr0 gsi_rx_mads) -gt 0 ] && [ $(hw mr0 gsi_tx_mads) -gt 0 ]"
rdma statistic show link mr0/1 2>/dev/null | sed 's/^/# /'

# --- failure paths ---------------------------------------------------------------
# A connect to an address with no listener is rejected by the peer's CM.
nolisten() { in_ns ns1 timeout 60 rping -c -a 10.0.0.1 -p 6999 -C 1 >/tmp/cm.nolisten 2>&1; }
if nolisten; then not_ok "rping to a port with no listener fails"; else
  s=$?
  if [ $s -ne 124 ] && grep -qiE 'reject|unreachable|error|fail' /tmp/cm.nolisten; then
    pass "rping to a port with no listener fails promptly (status $s): $(grep -iE 'reject|unreachable|error|fail' /tmp/cm.nolisten | head -n 1)"
  else
    not_ok "rping to a port with no listener: status $s (124 = hung)"; sed 's/^/#   /' /tmp/cm.nolisten
  fi
fi
# A host that does not answer: no route to it, address resolution times out.
noaddr() { in_ns ns1 timeout 60 rping -c -a 10.0.0.77 -p 6999 -C 1 >/tmp/cm.noaddr 2>&1; }
if noaddr; then not_ok "rping to an address nobody has fails"; else
  s=$?; if [ $s -ne 124 ]; then pass "rping to an address nobody has fails within rdma_cm's timeout (status $s): $(head -n 1 /tmp/cm.noaddr)"; else not_ok "rping to an address nobody has hung"; fi
fi
# A peer killed mid-connection: the other side sees the disconnect (or its
# own error) and exits; nothing hangs, nothing leaks.
PORT=$((PORT + 1))
# ip netns exec directly, without timeout: $! must be rping's own PID (a
# kill -9 of `timeout` leaves its child running). The VM's limit bounds them.
ip netns exec ns0 rping -s -a 10.0.0.1 -p $PORT -C 100000 >/tmp/cm.kill.server 2>&1 &
kserver=$!
wait_until 60 cm_listening $PORT
ip netns exec ns1 rping -c -a 10.0.0.1 -p $PORT -C 100000 -v >/tmp/cm.kill.client 2>&1 &
kclient=$!
connected() { [ "$(grep -c '^ping data' /tmp/cm.kill.client)" -ge 3 ]; }
if wait_until 60 connected; then
  # What rdma_cm chose reached both ends: the kernel's state of record
  # (set by the provider's modify_qp from rdma_init_qp_attr) pairs the QP
  # numbers and PSNs of the two QPs.
  # rping's QP: a process an earlier case left behind (a forked fio job of
  # a known failure) may still hold another RC QP on the device.
  res_of() { rdma resource show qp link "$1/1" 2>/dev/null | grep 'type RC' | grep 'comm rping' | head -n 1 | grep -o "$2 [0-9]*" | awk '{ print $2 }'; }
  c_lqpn=$(res_of mr1 lqpn) c_rqpn=$(res_of mr1 rqpn) s_lqpn=$(res_of mr0 lqpn) s_rqpn=$(res_of mr0 rqpn)
  c_sq=$(res_of mr1 sq-psn) c_rq=$(res_of mr1 rq-psn) s_sq=$(res_of mr0 sq-psn) s_rq=$(res_of mr0 rq-psn)
  echo "# client QP $c_lqpn -> $c_rqpn (sq-psn $c_sq, rq-psn $c_rq); server QP $s_lqpn -> $s_rqpn (sq-psn $s_sq, rq-psn $s_rq)"
  expect "rdma_cm's QP numbers reached both QPs (each one's remote QP is the other)" \
    sh -c "[ -n '$c_lqpn' ] && [ '$c_rqpn' = '$s_lqpn' ] && [ '$s_rqpn' = '$c_lqpn' ]"
  expect "rdma_cm's PSNs reached both QPs (each sq-psn is the other's rq-psn)" \
    sh -c "[ -n '$c_sq' ] && [ '$c_sq' = '$s_rq' ] && [ '$s_sq' = '$c_rq' ] && [ '$c_sq$s_sq' != 00 ]"
  kill -9 $kclient; wait $kclient 2>/dev/null
  # The server finds out from the client's CM disconnect (its ids are
  # destroyed with its rdma_cm file) or from its next failed operation.
  if wait_until 30 sh -c "! kill -0 $kserver 2>/dev/null"; then
    wait $kserver; s=$?
    pass "the server of a client killed mid-connection exits by itself (status $s)"
  else
    not_ok "the server of a client killed mid-connection is still running after 30 s"
    sed 's/^/#   /' /tmp/cm.kill.server | tail -n 5
    kill -9 $kserver
  fi
else
  not_ok "rping connected before the kill"; sed 's/^/#   /' /tmp/cm.kill.client | tail; kill -9 $kclient $kserver 2>/dev/null
fi
wait $kserver $kclient 2>/dev/null
no_user_cm_ids() { ! rdma resource show cm_id 2>/dev/null | grep -q 'comm rping'; }
# A killed process's connected ids go once the CM's disconnect and
# time-wait are over.
if wait_until 90 no_user_cm_ids; then
  pass "no rping cm_id left behind"
else
  not_ok "no rping cm_id left behind"; rdma resource show cm_id 2>/dev/null | grep 'comm rping' | sed 's/^/#   /'
fi

# Port state: the netdev going down reaches the device's users as a port
# event, and rdma_cm connects again once it is up.
ip netns exec ns1 timeout 60 ibv_asyncwatch -d mr1 >/tmp/cm.async 2>&1 &
watch=$!
# ibv_asyncwatch prints its event file's number once it listens.
wait_until 30 grep -q 'async event FD' /tmp/cm.async
in_ns ns1 ip link set mrb down
expect "port of mr1 DOWN in sysfs after ip link set mrb down" wait_until 20 grep -q DOWN /sys/class/infiniband/mr1/ports/1/state
expect "ibv_asyncwatch -d mr1 got IBV_EVENT_PORT_ERR" wait_until 20 grep -q 'PORT_ERR' /tmp/cm.async
in_ns ns1 ip link set mrb up
expect "port of mr1 ACTIVE again" wait_until 20 grep -q ACTIVE /sys/class/infiniband/mr1/ports/1/state
expect "ibv_asyncwatch -d mr1 got IBV_EVENT_PORT_ACTIVE" wait_until 20 grep -q 'PORT_ACTIVE' /tmp/cm.async
kill $watch 2>/dev/null; wait $watch 2>/dev/null
sed 's/^/#   asyncwatch: /' /tmp/cm.async | head -n 6
wait_until 20 gid_index mr1 10.0.0.2
SADDR=10.0.0.1 PORT=$((PORT + 1))
run_pair rping_after_up metaroce 0 cm rping_ok -- rping -s -a $SADDR -p $PORT -C $RPING_COUNT -- rping -c -a $SADDR -p $PORT -C $RPING_COUNT -v -V

# `rdma link del` with rdma_cm ids open: a listener on mr2... (the IPv6 pair)
PORT=$((PORT + 1))
ip netns exec ns2 timeout 120 rping -s -a fd00:6::1 -p $PORT -C 5 >/tmp/cm.del.server 2>&1 &
dserver=$!
has_listener() { rdma resource show cm_id 2>/dev/null | grep -q "link mr2/1 .*state LISTEN"; }
if wait_until 60 has_listener; then
  if in_ns ns2 rdma link del mr2 && wait_until 30 sh -c "[ ! -e /sys/class/infiniband/mr2 ]"; then
    pass "rdma link del mr2 with a listening rdma_cm id removes the device"
  else
    not_ok "rdma link del mr2 with a listening rdma_cm id"
  fi
  if wait_until 60 sh -c "! kill -0 $dserver 2>/dev/null"; then
    pass "the listener on the removed device was told (it exited: $(tail -n 1 /tmp/cm.del.server))"
  else
    not_ok "the listener on the removed device is still there after 60 s"; kill -9 $dserver
  fi
else
  not_ok "an rping listener on mr2"; sed 's/^/#   /' /tmp/cm.del.server
  kill $dserver
fi
wait $dserver 2>/dev/null

# rmmod with an rdma_cm id open: the devices go, the id is told.
PORT=$((PORT + 1))
ip netns exec ns0 timeout 120 rping -s -a 10.0.0.1 -p $PORT -C 5 >/tmp/cm.rmmod.server 2>&1 &
rserver=$!
wait_until 60 cm_listening $PORT
expect "rmmod metaroce with an rdma_cm listener on mr0" rmmod metaroce
expect "the listener was told and exited" wait_until 60 sh -c "! kill -0 $rserver 2>/dev/null"
kill -9 $rserver 2>/dev/null; wait $rserver 2>/dev/null
expect "metaroce is unloaded" sh -c "! grep -q '^metaroce ' /proc/modules"
expect "modprobe metaroce, rdma link add, rdma link del, rmmod" sh -c \
  "modprobe metaroce && ip netns exec ns0 rdma link add mr0 type metaroce netdev mra && rdma link del mr0 && rmmod metaroce"
# rxe is the reference, not under test: its removal is reported, bounded,
# and a hang there (a program that still has it open) does not stop the suite.
rdma link del rxe0 >/tmp/cm.rxe.del 2>&1 &
rxe_del=$!
if wait_until 60 process_gone $rxe_del && wait $rxe_del; then
  pass "rdma link del rxe0"
else
  note "rdma link del rxe0 still waits after 60 s (a process has rxe0 open): $(rdma resource show ctx 2>/dev/null | grep rxe0 | head -n 3 | tr '\n' ' ')"
  disown "$rxe_del"  # the harness's clean-up would wait for it for ever
fi

# --- the table -----------------------------------------------------------------
echo "# rdma_cm programs under emulation (TCG): pass/fail and wall-clock time."
echo "# rxe: one device, both ends in the initial namespace (its loopback, no loss)."
printf '# %-14s %16s %16s %16s\n' program "metaroce 0%" "metaroce 1%" "rxe 0%"
for p in $PROGRAMS; do
  printf '# %-14s %16s %16s %16s\n' "$p" "${RESULT[$p,metaroce,0]:-n/a}" "${RESULT[$p,metaroce,1]:-n/a}" "${RESULT[$p,rxe,0]:-n/a}"
done

check_kernel_log
dmesg | grep -iE 'metaroce|ib_mad|cma|ib_cm' | tail -n 20 | sed 's/^/# dmesg: /'
echo "# rdma_cm suite: $(elapsed "$suite_start")s in the guest"
