#!/usr/bin/env bash
# Load test of the REST API: starts a local 3-site federation
# (deploy/local/federation.sh), runs Locust headless (bench/locust) against
# cn-beijing's REST API as tenant user alice with her client certificate,
# and prints RPS, p50/p99 latency and failures per request type.
#   bench/load.sh [--users N] [--spawn-rate R] [--duration 30s] [--json FILE]
# Honours FEDGATE_BUILD_DIR. Exits 1 when any request failed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${FEDGATE_BUILD_DIR:-$REPO/build}" && pwd)"
USERS=100 SPAWN=20 DURATION=30s JSON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --users) USERS=$2; shift 2 ;;
    --spawn-rate) SPAWN=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "load.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
for b in "$FEDGATE" "$FEDCTL"; do
  [ -x "$b" ] || { echo "load.sh: $b not built (cmake --build $BUILD)" >&2; exit 2; }
done
LOCUST=/usr/bin/locust  # Debian's python3-locust (deploy/deps.sh)
[ -x "$LOCUST" ] || { echo "load.sh: $LOCUST missing: run deploy/deps.sh" >&2; exit 2; }
WORK="$(mktemp -d /tmp/fedgate-load.XXXXXX)"
. "$REPO/deploy/local/federation.sh"
cleanup() { local code=$?; fed_stop >/dev/null; rm -rf "$WORK"; exit $code; }
trap cleanup EXIT

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
fed_start
fed_wait_converged 60
HTTP=$(fed_port cn-beijing http)
echo "load: $USERS users (spawn rate $SPAWN/s) for $DURATION against https://127.0.0.1:$HTTP (cn-beijing REST)" >&2
FEDGATE_TLS_DIR="$WORK/alice" "$LOCUST" -f "$REPO/bench/locust/locustfile.py" --headless \
  --host "https://127.0.0.1:$HTTP" -u "$USERS" -r "$SPAWN" -t "$DURATION" --stop-timeout 5 \
  --csv "$WORK/locust" --only-summary >"$WORK/locust.log" 2>&1 || true
[ -s "$WORK/locust_stats.csv" ] || { echo "load: locust wrote no stats; its log:" >&2; tail -30 "$WORK/locust.log" >&2; exit 1; }

/usr/bin/python3 - "$WORK/locust_stats.csv" "$WORK/locust_failures.csv" "$JSON" <<'PY'
import csv, json, sys
stats, failures_csv, out = sys.argv[1], sys.argv[2], sys.argv[3]
rows = list(csv.DictReader(open(stats)))
def num(x):
    try: return float(x)
    except (TypeError, ValueError): return 0.0
by_type, total = {}, None
for r in rows:
    entry = {"requests": int(num(r["Request Count"])), "failures": int(num(r["Failure Count"])),
             "rps": round(num(r["Requests/s"]), 1), "p50_ms": num(r["50%"]), "p99_ms": num(r["99%"])}
    if r["Name"] == "Aggregated": total = entry
    else: by_type[r["Name"]] = entry
print(f"{'type':<13} {'requests':>9} {'failures':>9} {'rps':>8} {'p50_ms':>8} {'p99_ms':>8}")
for name, e in sorted(by_type.items()) + [("all", total)]:
    print(f"{name:<13} {e['requests']:>9} {e['failures']:>9} {e['rps']:>8} {e['p50_ms']:>8.0f} {e['p99_ms']:>8.0f}")
for f in csv.DictReader(open(failures_csv)):
    print(f"failure: {f['Name']}: {f['Error'][:200]} x{f['Occurrences']}", file=sys.stderr)
doc = dict(total, by_type=by_type)
if out:
    json.dump(doc, open(out, "w"), indent=2)
sys.exit(1 if total["failures"] else 0)
PY
