# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# shellcheck shell=bash
# Bounded waits on conditions (sourced by harness.sh). A test never sleeps
# in the hope that something is ready: it waits until it is, for at most a
# given time, and fails or reports when it is not.
#
#   wait_until SECONDS CMD...        runs CMD (output discarded) until it
#                                    succeeds; 1 when SECONDS pass first
#   listening tcp|udp PORT [NETNS]   something listens on TCP PORT / is bound
#                                    to UDP PORT (any address), in NETNS if given
#   wait_tcp_listener [-n NETNS] [-p PID] [-t SECONDS] PORT
#   wait_udp_listener [-n NETNS] [-p PID] [-t SECONDS] PORT
#                                    waits until `listening`; 1 when SECONDS
#                                    (default 30) pass or process PID exits first
#   stop_process PID [SECONDS]       SIGTERM, SIGKILL after SECONDS (default 5)
#                                    if it is still there; reaps it

# Microseconds of the wall clock (bash 5: EPOCHREALTIME).
harness_now_us() { echo "${EPOCHREALTIME//[^0-9]/}"; }
# SECONDS (an integer or a decimal) in microseconds.
harness_us() {
    local whole=${1%%.*} frac
    frac=${1#"$whole"}; frac=${frac#.}000000
    echo $((10#${whole:-0} * 1000000 + 10#${frac:0:6}))
}

wait_until() {
    local deadline
    deadline=$(($(harness_now_us) + $(harness_us "$1"))); shift
    until "$@" >/dev/null 2>&1; do
        (($(harness_now_us) < deadline)) || return 1
        sleep 0.05
    done
}

listening() {
    local proto=$1 port=$2 ns=${3:-} flags=-Hltn
    [[ $proto == tcp ]] || flags=-Hlun
    [[ -n $(ss ${ns:+-N "$ns"} "$flags" "sport = :$port" 2>/dev/null) ]]
}

process_gone() { ! kill -0 "$1" 2>/dev/null; }

# listening, or PID (if any) gone.
harness_listener_or_exit() { listening "$1" "$2" "$3" || { [[ -n $4 ]] && process_gone "$4"; }; }

harness_wait_listener() {
    local proto=$1 ns="" pid="" seconds=30 OPTIND=1 opt; shift
    while getopts n:p:t: opt; do
        case $opt in
            n) ns=$OPTARG ;;
            p) pid=$OPTARG ;;
            t) seconds=$OPTARG ;;
            *) return 2 ;;
        esac
    done
    shift $((OPTIND - 1))
    local port=${1:?port}
    wait_until "$seconds" harness_listener_or_exit "$proto" "$port" "$ns" "$pid"
    listening "$proto" "$port" "$ns"
}
wait_tcp_listener() { harness_wait_listener tcp "$@"; }
wait_udp_listener() { harness_wait_listener udp "$@"; }

stop_process() {
    local pid=$1 seconds=${2:-5}
    if kill -TERM "$pid" 2>/dev/null && ! wait_until "$seconds" process_gone "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
