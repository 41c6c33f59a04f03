#!/usr/bin/env bash
# fedbench tcp against iperf3 on the same link and for the same duration:
# loopback, and tbf-shaped veth pairs (100 Mbit/s and 1 Gbit/s) between two
# network namespaces. Median of 5 runs each; prints fedbench / iperf3 and each
# tool's run-to-run spread ((max - min) / median). Needs root for the veths.
# Honours FEDGATE_BUILD_DIR; RUNS and DURATION override the defaults.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FEDGATE_BUILD_DIR:-$REPO/build}"
FEDBENCH="$BUILD/bench/fedbench"
RUNS="${RUNS:-5}"
DURATION="${DURATION:-3}"
NS="fgcmp$$"
PORT_FB=15201
PORT_IP=15301

"$REPO/deploy/deps.sh"
[ -x "$FEDBENCH" ] || cmake --build "$BUILD" -j2 --target fedbench >/dev/null

# The servers this script started, by pid: never anyone else's process.
SERVERS=()
stop_servers() {
  local pid
  for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVERS[@]}"; do wait "$pid" 2>/dev/null || true; done
  SERVERS=()
}
cleanup() {
  stop_servers
  ip netns del "${NS}s" 2>/dev/null || true
  ip netns del "${NS}c" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { sort -g | awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); printf "%.1f%%", (a[NR]-a[1])/m*100}'; }

# measure LABEL CLIENT_PREFIX SERVER_PREFIX ADDR
measure() {
  local label=$1 cpre=$2 spre=$3 addr=$4
  # `ip netns exec` execs the server itself, so $! is the server's pid.
  $spre "$FEDBENCH" server --listen "$addr:$PORT_FB" 2>/dev/null &
  SERVERS+=($!)
  $spre iperf3 -s -p "$PORT_IP" >/dev/null 2>&1 &
  SERVERS+=($!)
  sleep 0.5
  local fb=() ip=()
  for i in $(seq "$RUNS"); do
    # iperf3 writes 128 KiB by default: fedbench uses the same message size.
    fb+=("$($cpre "$FEDBENCH" run --target "$addr:$PORT_FB" --sizes 128K --duration "$DURATION" 2>/dev/null \
             --warmup 0.5 -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])')")
    ip+=("$($cpre iperf3 -c "$addr" -p "$PORT_IP" -t "$DURATION" -O 1 -J |
             python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')")
  done
  local fbm ipm
  fbm=$(printf '%s\n' "${fb[@]}" | median)
  ipm=$(printf '%s\n' "${ip[@]}" | median)
  printf '%-22s fedbench %9.4f Gbit/s (spread %s)  iperf3 %9.4f Gbit/s (spread %s)  ratio %.3f\n' \
    "$label" "$fbm" "$(printf '%s\n' "${fb[@]}" | spread)" "$ipm" \
    "$(printf '%s\n' "${ip[@]}" | spread)" "$(python3 -c "print($fbm/$ipm)")"
  stop_servers
}

echo "# fedbench vs iperf3: median of $RUNS runs of ${DURATION}s each, single stream, 128K writes"
measure "loopback" "" "" 127.0.0.1

ip netns add "${NS}s"
ip netns add "${NS}c"
ip link add "${NS}a" type veth peer name "${NS}b"
ip link set "${NS}a" netns "${NS}s"
ip link set "${NS}b" netns "${NS}c"
ip -n "${NS}s" addr add 10.202.0.1/30 dev "${NS}a"
ip -n "${NS}c" addr add 10.202.0.2/30 dev "${NS}b"
for n in s c; do ip -n "${NS}$n" link set lo up; done
ip -n "${NS}s" link set "${NS}a" up
ip -n "${NS}c" link set "${NS}b" up

for rate in 100 1000; do
  burst=$(( rate * 1000000 / 8 / 200 )); [ $burst -lt 32768 ] && burst=32768
  verb=add; [ "$rate" != 100 ] && verb=change
  ip netns exec "${NS}s" tc qdisc $verb dev "${NS}a" root tbf rate ${rate}mbit burst $burst latency 100ms
  ip netns exec "${NS}c" tc qdisc $verb dev "${NS}b" root tbf rate ${rate}mbit burst $burst latency 100ms
  measure "veth tbf ${rate} Mbit/s" "ip netns exec ${NS}c" "ip netns exec ${NS}s" 10.202.0.1
done
