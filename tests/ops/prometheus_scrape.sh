#!/usr/bin/env bash
# A real Prometheus (Debian's `prometheus`) scrapes a local three-site
# federation, with fedgate's alert rules loaded; the test asks its HTTP API:
# every gateway up == 1, the free-GPU gauges equal `fedctl capacity`, the
# scheduling-delay histogram counts the jobs that ran, and the rules loaded.
# Usage: prometheus_scrape.sh BUILD_DIR
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$REPO/build}" && pwd)"
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
PY=/usr/bin/python3
WORK="$(mktemp -d /tmp/fedgate-prom.XXXXXX)"
PROM_PID=""
. "$REPO/deploy/local/federation.sh"

cleanup() {
  local code=$?
  [ -n "$PROM_PID" ] && kill -TERM "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  fed_stop >/dev/null
  if [ $code -ne 0 ]; then
    echo "--- prometheus log (tail)"; tail -20 "$WORK/prometheus.log" 2>/dev/null || true
  fi
  rm -rf "$WORK"
  exit $code
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
fed_start
fed_wait_converged 60

# Two jobs coordinated by cn-beijing, one of them across two sites.
for gpus in 2 10; do
  printf 'name: p%s\ngpus: %s\ngpu_models: [A100-80GB]\ncommand: [true]\n' "$gpus" "$gpus" >"$WORK/job.yaml"
  id=$(fed_alice -o json jobs submit -f "$WORK/job.yaml" | $PY -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
  timeout 60 "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" jobs watch "$id" >/dev/null \
    || fail "job $id did not succeed"
done

declare -A OPS
targets=""
for s in "${FED_SITES[@]}"; do
  OPS[$s]=$(fed_port "$s" ops)
  targets="$targets\"127.0.0.1:${OPS[$s]}\", "
done
PROM_PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cp "$REPO/deploy/prometheus/fedgate.rules.yml" "$WORK/"
cat >"$WORK/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [fedgate.rules.yml]
scrape_configs:
  - job_name: fedgate
    static_configs:
      - targets: [${targets%, }]
YAML
promtool check config "$WORK/prometheus.yml" >/dev/null || fail "promtool rejects the test's config"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

query() {  # query PROMQL: prints "labels-json value" per series
  curl -sfG "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" | $PY -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success", r
for s in r["data"]["result"]:
    print(json.dumps(s["metric"], sort_keys=True), s["value"][1])'
}
eventually() {  # eventually SECONDS DESCRIPTION COMMAND...
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@"; do
    [ "$(date +%s)" -lt $deadline ] || fail "$what"
    sleep 0.5
  done
}

all_up() { [ "$(query 'up{job="fedgate"} == 1' 2>/dev/null | wc -l)" = 3 ]; }
eventually 60 "not every gateway is up in Prometheus: $(query 'up' 2>&1 || true)" all_up
echo "ok: up == 1 for all 3 gateways"

# Free GPUs per site in each gateway's view, Prometheus against fedctl.
gauges_match() {
  local s want got
  for s in "${FED_SITES[@]}"; do
    want=$(fed_admin "$s" -o json capacity | $PY -c '
import json, sys
for x in sorted(json.load(sys.stdin)["sites"], key=lambda x: x["site"]):
    print(x["site"], x["free_gpus"])')
    got=$(query "sum by (site) (fedgate_site_gpus{state=\"free\",instance=\"127.0.0.1:${OPS[$s]}\"})" | $PY -c '
import json, sys
rows = [l.rsplit(" ", 1) for l in sys.stdin.read().splitlines()]
for labels, v in sorted(rows):
    print(json.loads(labels)["site"], int(float(v)))')
    [ -n "$want" ] && [ "$want" = "$got" ] || { echo "  $s: fedctl says [$want], prometheus [$got]"; return 1; }
  done
}
eventually 30 "free-GPU gauges differ from fedctl capacity" gauges_match
echo "ok: fedgate_site_gpus{state=free} equals fedctl capacity in all 3 views"

ran() { [ "$(query "sum(fedgate_job_scheduling_delay_seconds_count{instance=\"127.0.0.1:${OPS[cn-beijing]}\"})" | awk '{print $2}')" = 2 ]; }
eventually 30 "the scheduling-delay histogram does not count the 2 jobs: $(query 'fedgate_job_scheduling_delay_seconds_count')" ran
echo "ok: fedgate_job_scheduling_delay_seconds counts the 2 jobs that ran"

rules_ok() {
  curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/rules" | $PY -c '
import json, sys
groups = json.load(sys.stdin)["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = [r["name"] for r in rules if r.get("health") != "ok"]
assert rules and not bad, bad
print(len(rules))'
}
eventually 30 "alert rules did not load and evaluate" rules_ok >/dev/null
echo "ok: $(rules_ok) alert rules loaded and evaluated without errors"
firing=$(curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/alerts" | $PY -c '
import json, sys
print(" ".join(a["labels"]["alertname"] for a in json.load(sys.stdin)["data"]["alerts"] if a["state"] == "firing"))')
[ -z "$firing" ] || fail "alerts firing on a healthy federation: $firing"
echo "ok: no alert fires on a healthy federation"

# Every query of the Grafana dashboard parses and runs (the $instance
# variable as "all").
n=0
while IFS= read -r expr; do
  curl -sfG "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$expr" >/dev/null \
    || fail "dashboard query refused by Prometheus: $expr"
  n=$((n + 1))
done < <($PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p["targets"]:
        print(t["expr"].replace("$instance", ".*"))' "$REPO/deploy/grafana/fedgate-dashboard.json")
[ $n -gt 10 ] || fail "only $n dashboard queries found"
echo "ok: all $n Grafana dashboard queries run on Prometheus"
