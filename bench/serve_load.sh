#!/usr/bin/env bash
# Inference service under load (issue 28's judge): a local 3-site federation
# (deploy/local/federation.sh), a service of deploy/workload/model_server.py
# replicas (min 1, max 6, autoscaled at TARGET requests/s per replica), and
# Locust (-u 100 -r 10) against cn-beijing's /v1/services/chat/predict.
# cn-beijing's GPUs are mostly held by a filler job, so replicas spill to the
# other sites; DURATION_KILL seconds in, the gateway of a site running a
# replica (not the coordinator) is killed -9. After the load stops it waits
# for the scale-in. Prints RPS, p50/p99 and failures per phase, one
# replica's measured RPS (calibrated first, directly, same host), and the
# replica count over time.
#   bench/serve_load.sh [--duration 150] [--kill-at 90] [--compute-ms 20] [--target 40]
#                       [--scale-down-after 30s] [--user-wait 0.3,0.7] [--json FILE]
# --user-wait LO,HI: each Locust user's pause between requests; 0.3,0.7 offers
# about 190 requests/s (under the 6 replicas' capacity: the throughput ratio
# then measures the load, not the proxy), 0.05,0.15 saturates them.
# Honours FEDGATE_BUILD_DIR. Exits 1 when any request failed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${FEDGATE_BUILD_DIR:-$REPO/build}" && pwd)"
DURATION=150 KILL_AT=90 COMPUTE_MS=20 TARGET=40 DOWN_AFTER=30s JSON="" USER_WAIT=0.3,0.7
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --kill-at) KILL_AT=$2; shift 2 ;;
    --compute-ms) COMPUTE_MS=$2; shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    --scale-down-after) DOWN_AFTER=$2; shift 2 ;;
    --user-wait) USER_WAIT=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "serve_load.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
for b in "$FEDGATE" "$FEDCTL"; do
  [ -x "$b" ] || { echo "serve_load.sh: $b not built (cmake --build $BUILD)" >&2; exit 2; }
done
LOCUST=/usr/bin/locust  # Debian's python3-locust (deploy/deps.sh)
[ -x "$LOCUST" ] || { echo "serve_load.sh: $LOCUST missing: run deploy/deps.sh" >&2; exit 2; }
WORK="$(mktemp -d /tmp/fedgate-serve.XXXXXX)"
# The ranks run as fedgate-rank: the server must be readable to them.
SHARE="$(mktemp -d /var/tmp/fedgate-serve-bench.XXXXXX)"
chmod 755 "$SHARE"
install -m 0644 "$REPO/deploy/workload/model_server.py" "$SHARE/model_server.py"
. "$REPO/deploy/local/federation.sh"
SAMPLER=""
cleanup() {
  local code=$?
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null || true
  fed_stop >/dev/null 2>&1 || true
  rm -rf "$WORK" "$SHARE"
  exit $code
}
trap cleanup EXIT

# One replica's capacity, measured directly (no gateway) on this host.
ONE_RPS=$(/usr/bin/python3 - "$SHARE/model_server.py" "$COMPUTE_MS" <<'PY'
import http.client, socket, subprocess, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
p = subprocess.Popen([sys.executable, sys.argv[1], "--port", str(port), "--host", "127.0.0.1",
                      "--compute-ms", sys.argv[2]], stdout=subprocess.DEVNULL)
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close(); break
    except OSError: time.sleep(0.05)
done, stop = [0], time.time() + 5
def worker():
    c = http.client.HTTPConnection("127.0.0.1", port)
    while time.time() < stop:
        c.request("POST", "/predict", body=b"x"); c.getresponse().read(); done[0] += 1
ts = [threading.Thread(target=worker) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
p.kill()
print(round(done[0] / 5.0, 1))
PY
)
echo "serve_load: one replica, measured directly: $ONE_RPS requests/s (compute ${COMPUTE_MS} ms)" >&2

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
fed_start
fed_wait_converged 60
# A full mesh (federation.sh peers beijing and shenzhen only through
# shanghai): a site killed below is then never the only way to another.
fed_admin cn-beijing peers add --site cn-shenzhen --endpoint "127.0.0.1:${FED_GRPC[cn-shenzhen]}" >/dev/null
fed_admin cn-shenzhen peers add --site cn-beijing --endpoint "127.0.0.1:${FED_GRPC[cn-beijing]}" >/dev/null
HTTP=$(fed_port cn-beijing http)
ALICE="$WORK/alice"
services() {
  curl -s --cacert "$ALICE/ca.pem" --cert "$ALICE/cert.pem" --key "$ALICE/key.pem" \
    "https://127.0.0.1:$HTTP/v1/services?name=chat"
}
# Hold 7 of cn-beijing's 8 GPUs so that replicas spread over the sites.
cat >"$WORK/filler.yaml" <<YAML
name: filler
gpus: 7
allowed_sites: [cn-beijing]
command: [sleep, "3600"]
YAML
fed_alice jobs submit -f "$WORK/filler.yaml" >/dev/null
cat >"$WORK/chat.yaml" <<YAML
kind: service
name: chat
gpus: 1
replicas: {min: 1, max: 6}
readiness: {period: 1s}
autoscale: {target_rps_per_replica: $TARGET, scale_up_after: 10s, scale_down_after: $DOWN_AFTER}
command: [python3, $SHARE/model_server.py, --compute-ms, "$COMPUTE_MS"]
YAML
fed_alice jobs submit -f "$WORK/chat.yaml" >/dev/null
for _ in $(seq 300); do
  services | grep -q '"ready":1' && break
  sleep 0.2
done
services | grep -q '"ready":1' || { echo "serve_load: the service never became ready" >&2; exit 1; }

# The replica count every 2 s, until the end.
T0=$(date +%s)
(
  while :; do
    doc=$(services || true)
    desired=$(grep -o '"desired":[0-9]*' <<<"$doc" | head -1 | cut -d: -f2)
    ready=$(grep -o '"ready":[0-9]*' <<<"$doc" | head -1 | cut -d: -f2)
    sites=$(grep -o '"site":"[a-z-]*"' <<<"$doc" | cut -d'"' -f4 | sort | uniq -c | awk '{printf "%s%s:%s", sep, $2, $1; sep=","}')
    echo "$(( $(date +%s) - T0 )) ${desired:-0} ${ready:-0} ${sites:--}"
    sleep 2
  done
) >"$WORK/replicas.txt" &
SAMPLER=$!

echo "serve_load: Locust -u 100 -r 10 for ${DURATION}s against https://127.0.0.1:$HTTP/v1/services/chat/predict" >&2
FEDGATE_TLS_DIR="$ALICE" SERVICE=chat USER_WAIT="$USER_WAIT" "$LOCUST" -f "$REPO/bench/locust/serve_locustfile.py" --headless \
  --host "https://127.0.0.1:$HTTP" -u 100 -r 10 -t "${DURATION}s" --stop-timeout 5 \
  --csv "$WORK/locust" --csv-full-history >"$WORK/locust.log" 2>&1 &
LOCUST_PID=$!
sleep "$KILL_AT"
# The site (not the coordinator) that runs the most replicas now.
VICTIM=$(services | grep -o '"site":"[a-z-]*"' | cut -d'"' -f4 | grep -v '^cn-beijing$' | sort | uniq -c |
         sort -rn | awk 'NR == 1 { print $2 }' || true)
KILLED_AT=$(( $(date +%s) - T0 ))
if [ -n "$VICTIM" ]; then
  echo "serve_load: kill -9 the gateway of $VICTIM at ${KILLED_AT}s" >&2
  kill -9 "${FED_PIDS[$VICTIM]}"
else
  echo "serve_load: no replica outside cn-beijing at ${KILLED_AT}s: nothing killed" >&2
fi
wait "$LOCUST_PID" || true
LOAD_END=$(( $(date +%s) - T0 ))
[ -s "$WORK/locust_stats_history.csv" ] || { echo "serve_load: locust wrote no stats; its log:" >&2; tail -30 "$WORK/locust.log" >&2; exit 1; }
# Scale-in after the load: two steps of scale_down_after (the first goes to
# the highest desired of the window, which still saw load) plus a margin.
down_s=$(/usr/bin/python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(ms|s|m|h)', sys.argv[1]); print(int(m[1]) * {'ms': 0.001, 's': 1, 'm': 60, 'h': 3600}[m[2]])" "$DOWN_AFTER")
sleep "$(( 2 * ${down_s%.*} + 20 ))"
kill "$SAMPLER" 2>/dev/null || true; SAMPLER=""

USER_WAIT="$USER_WAIT" /usr/bin/python3 - "$WORK" "$ONE_RPS" "$KILLED_AT" "$LOAD_END" "${VICTIM:-}" "$JSON" "$T0" <<'PY'
import csv, json, os, sys
work, one_rps, killed_at, load_end, victim, out, t0 = sys.argv[1:8]
one_rps, killed_at, load_end, t0 = float(one_rps), int(killed_at), int(load_end), int(t0)
timeline = []
for line in open(f"{work}/replicas.txt"):
    t, desired, ready, sites = line.split()
    timeline.append({"t": int(t), "desired": int(desired), "ready": int(ready), "sites": sites})
hist = [r for r in csv.DictReader(open(f"{work}/locust_stats_history.csv")) if r["Name"] == "Aggregated"]
def num(x):
    try: return float(x)
    except (TypeError, ValueError): return 0.0
rows = [{"t": int(num(r["Timestamp"])) - t0, "rps": num(r["Requests/s"]), "fail_s": num(r["Failures/s"]),
         "p50": num(r["50%"]), "p99": num(r["99%"]), "total": int(num(r["Total Request Count"])),
         "failures": int(num(r["Total Failure Count"])), "users": int(num(r["User Count"]))} for r in hist]
def phase(a, b):
    sel = [r for r in rows if a <= r["t"] < b]
    if not sel: return None
    first = [r for r in rows if r["t"] < a]
    base_n = first[-1]["total"] if first else 0
    base_f = first[-1]["failures"] if first else 0
    return {"from_s": a, "to_s": b, "requests": sel[-1]["total"] - base_n,
            "failures": sel[-1]["failures"] - base_f,
            "rps": round(sum(r["rps"] for r in sel) / len(sel), 1),
            "p50_ms": max(r["p50"] for r in sel), "p99_ms": max(r["p99"] for r in sel)}
phases = {"scale_out": phase(0, killed_at), "site_killed": phase(killed_at, load_end + 1)}
# Throughput against capacity where the count was steady: the last 20 s
# before the kill.
steady = [p for p in timeline if killed_at - 20 <= p["t"] < killed_at]
ready = min((p["ready"] for p in steady), default=0)
rps = phase(killed_at - 20, killed_at)
ratio = round(rps["rps"] / (ready * one_rps), 2) if rps and ready else None
final = rows[-1] if rows else {}
failures = [dict(name=f["Name"], error=f["Error"][:300], count=int(num(f["Occurrences"])))
            for f in csv.DictReader(open(f"{work}/locust_failures.csv"))]
for f in failures:
    print(f"failure: {f['name']}: {f['error']} x{f['count']}")
doc = {"one_replica_rps": one_rps, "failures": failures, "killed_site": victim or None, "killed_at_s": killed_at,
       "load_end_s": load_end, "phases": phases, "replicas_over_time": timeline,
       "max_ready": max((p["ready"] for p in timeline), default=0),
       "ready_after_scale_in": timeline[-1]["ready"] if timeline else None,
       "steady_before_kill": {"ready": ready, "rps": rps["rps"] if rps else None,
                              "ratio_to_ready_x_one_replica": ratio},
       "total_requests": final.get("total"), "total_failures": final.get("failures")}
print(f"one replica: {one_rps} rps (direct); max ready replicas {doc['max_ready']}; "
      f"after scale-in {doc['ready_after_scale_in']}")
for name, p in phases.items():
    if p: print(f"{name:<12} {p['requests']:>7} requests {p['failures']:>4} failed  {p['rps']:>7} rps  "
                f"p50 {p['p50_ms']:.0f} ms  p99 {p['p99_ms']:.0f} ms")
print(f"steady before the kill: {ready} ready, {doc['steady_before_kill']['rps']} rps, "
      f"ratio to ready x one replica: {ratio} (each user pauses {os.environ.get('USER_WAIT')} s between requests)")
print("replicas over time (s desired ready sites): " +
      "; ".join(f"{p['t']} {p['desired']} {p['ready']} {p['sites']}" for p in timeline))
if out: json.dump(doc, open(out, "w"), indent=2)
sys.exit(1 if final.get("failures") else 0)
PY
