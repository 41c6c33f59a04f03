#!/usr/bin/env bash
# deploy/local/federation.sh's fed_stop on a federation with a job running:
# the gateways exit, and then the job's ranks on both sites are gone, with
# their slice cgroups and the ranks' work folders (a gateway's SIGTERM alone
# leaves ranks running, by design). A cgroup of the same site name that is
# not this federation's is kept.
# Usage: local_teardown.sh BUILD_DIR
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$REPO/build}" && pwd)"
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
PY=/usr/bin/python3
WORK="$(mktemp -d /tmp/fedgate-teardown.XXXXXX)"
FOREIGN=""
. "$REPO/deploy/local/federation.sh"

cleanup() {
  local code=$?
  fed_stop >/dev/null
  [ -z "$FOREIGN" ] || rmdir "$FOREIGN" 2>/dev/null || true
  rm -rf "$WORK"
  exit $code
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

CG=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$CG" ] || fail "no cgroup2 mount: the process executor needs one here"

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
fed_start
fed_wait_converged 60

# 10 A100s: 8 in cn-beijing and 2 in cn-shanghai, ranks that sleep.
printf 'name: sleeper\ngpus: 10\ngpu_models: [A100-80GB]\ncommand: [sleep, "300"]\n' >"$WORK/job.yaml"
id=$(fed_alice -o json jobs submit -f "$WORK/job.yaml" | $PY -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
for i in $(seq 300); do
  state=$(fed_alice -o json jobs get "$id" | $PY -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])')
  [ "$state" = RUNNING ] && break
  case "$state" in SUCCEEDED|FAILED|CANCELLED) fail "job $id ended as $state before it ran" ;; esac
  sleep 0.1
done
[ "$state" = RUNNING ] || fail "job $id is $state after 30 s, not RUNNING"

# The ranks' processes, read from their slice cgroups (10 sleeps in all).
pids=()
for s in cn-beijing cn-shanghai; do
  for i in $(seq 100); do
    n=$(cat "$CG/fedgate-$s/$id"-*/cgroup.procs 2>/dev/null | wc -l)
    [ "$n" -gt 0 ] && break
    sleep 0.1
  done
  pids+=($(cat "$CG/fedgate-$s/$id"-*/cgroup.procs))
done
sleeps=0
for p in "${pids[@]}"; do [ "$(cat /proc/$p/comm 2>/dev/null)" = sleep ] && sleeps=$((sleeps + 1)); done
[ "$sleeps" = 10 ] || fail "expected 10 sleeping ranks in the slice cgroups, found $sleeps (pids ${pids[*]})"
[ -d "$FED_RANK_WORK/cn-beijing/$id" ] || fail "no work folder $FED_RANK_WORK/cn-beijing/$id"
FOREIGN="$CG/fedgate-cn-beijing/j-0000000000000000-1"  # not a job of this federation
mkdir "$FOREIGN"

rank_work=$FED_RANK_WORK
fed_stop >/dev/null
for p in "${pids[@]}"; do
  for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$p" 2>/dev/null || fail "rank process $p ($(cat /proc/$p/comm)) outlived fed_stop"
done
left=$(ls -d "$CG/fedgate-cn-beijing/$id"-* "$CG/fedgate-cn-shanghai/$id"-* 2>/dev/null || true)
[ -z "$left" ] || fail "slice cgroups left after fed_stop: $left"
[ ! -e "$rank_work" ] || fail "rank work folders left after fed_stop: $rank_work"
[ -d "$FOREIGN" ] || fail "fed_stop removed $FOREIGN, which is not its federation's"
echo "fed_stop ended ${#pids[@]} rank processes on two sites and removed their cgroups and work folders"
