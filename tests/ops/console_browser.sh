#!/usr/bin/env bash
# fedctl console in headless Chromium (Debian's chromium, chromium-driver,
# python3-selenium) against a local three-site federation with a job
# running across two sites: the page shows the numbers `fedctl -o json`
# gives, a cancel from the page ends the job, the browser logs no error,
# and the console's guards hold (tests/ops/console_browser.py). Screenshots
# of each view go to FEDGATE_CONSOLE_SHOTS (default BUILD/console-shots).
# Usage: console_browser.sh BUILD_DIR
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$REPO/build}" && pwd)"
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
PY=/usr/bin/python3
WORK="$(mktemp -d /tmp/fedgate-console.XXXXXX)"
SHOTS="${FEDGATE_CONSOLE_SHOTS:-$BUILD/console-shots}"
CONSOLE_PIDS=()
. "$REPO/deploy/local/federation.sh"

cleanup() {
  local code=$? p
  for p in "${FED_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
  for p in "${CONSOLE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${CONSOLE_PIDS[@]}"; do
    wait "$p" 2>/dev/null || { echo "console $p exited with $? on SIGTERM" >&2; code=1; }
  done
  fed_stop >/dev/null
  if [ $code -ne 0 ]; then
    for f in "$WORK"/console-*.err; do echo "--- $f"; tail -5 "$f"; done 2>/dev/null || true
  fi
  rm -rf "$WORK"
  exit $code
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
"$FEDCTL" certs issue --ca-dir "$WORK/ca" --out "$WORK/bob" --tenant speech --user bob 2>/dev/null
fed_start
fed_wait_converged 60
deadline=$(( $(date +%s) + 60 ))
until [ "$(fed_alice -o json links 2>/dev/null | grep -o '"from"' | wc -l)" -ge 4 ]; do
  [ "$(date +%s)" -lt $deadline ] || fail "links not measured after 60 s"
  sleep 0.5
done

# 10 A100s: 8 at cn-beijing and 2 at cn-shanghai, one world across two sites.
printf 'name: console-demo\ngpus: 10\ngpu_models: [A100-80GB]\ncommand: [sleep, "600"]\n' >"$WORK/job.yaml"
JOB=$(fed_alice -o json jobs submit -f "$WORK/job.yaml" | $PY -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
deadline=$(( $(date +%s) + 60 ))
until fed_alice -o json jobs get "$JOB" | grep -q '"state":"RUNNING"'; do
  [ "$(date +%s)" -lt $deadline ] || fail "job $JOB not RUNNING after 60 s: $(fed_alice jobs get "$JOB")"
  sleep 0.5
done

# 64 GPUs: more than the federation has, so it waits in the queue.
printf 'name: too-big\ngpus: 64\ncommand: [sleep, "600"]\n' >"$WORK/big.yaml"
PENDING=$(fed_alice -o json jobs submit -f "$WORK/big.yaml" | $PY -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')

# console NAME TLS_DIR [ENV...]: starts one (in this shell, so that cleanup
# stops it) and sets URL to the first line it prints.
console() {
  local name=$1 tls=$2; shift 2
  env "$@" "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$tls" console \
    >"$WORK/console-$name.out" 2>"$WORK/console-$name.err" &
  CONSOLE_PIDS+=($!)
  local i
  for i in $(seq 100); do
    if [ -s "$WORK/console-$name.out" ]; then URL=$(head -1 "$WORK/console-$name.out"); return 0; fi
    sleep 0.1
  done
  fail "console $name printed no URL: $(cat "$WORK/console-$name.err")"
}
# Refused at start, with the reason: a wildcard address, a gateway's identity.
if out=$("$FEDCTL" --tls-dir "$WORK/alice" console --listen 0.0.0.0:0 2>&1); then fail "a wildcard --listen was accepted"; fi
echo "$out" | grep -q "not a wildcard" || fail "wildcard --listen: unclear error: $out"
if out=$("$FEDCTL" --tls-dir "$WORK/cn-beijing/tls" console 2>&1); then fail "a gateway's identity was accepted"; fi
echo "$out" | grep -q "not a console identity" || fail "gateway identity: unclear error: $out"
echo "ok   console refuses a wildcard address and a gateway's identity, naming why"

console alice "$WORK/alice"; ALICE_URL=$URL
console admin "$WORK/cn-beijing/admin"; ADMIN_URL=$URL
console bob "$WORK/bob"; BOB_URL=$URL
console nochart "$WORK/alice" FEDGATE_CONSOLE_CHARTJS=; NOCHART_URL=$URL
case "$ALICE_URL" in http://127.0.0.1:*/\?token=*) ;; *) fail "first line is not the URL: $ALICE_URL" ;; esac

mkdir -p "$SHOTS"
FEDCTL_GATEWAY="127.0.0.1:${FED_GRPC[cn-beijing]}" FEDCTL="$FEDCTL" \
  $PY "$REPO/tests/ops/console_browser.py" --job "$JOB" --pending "$PENDING" --shots "$SHOTS" \
  --alice "$ALICE_URL" --alice-tls "$WORK/alice" --admin "$ADMIN_URL" --bob "$BOB_URL" \
  --nochart "$NOCHART_URL" --web "$BUILD/gateway/cli/console" \
  --silent-pid "${FED_PIDS[cn-shenzhen]}" --ad-ttl 5
