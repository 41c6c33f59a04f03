#!/usr/bin/env bash
# fifo / sjf / fedgate on loaded windows of the Philly trace
# (../shared/data/traces/philly_normalized.csv), estimates with noise 0.5,
# and the whole trace timed. Honours FEDGATE_BUILD_DIR and FEDSIM_TRACE.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FEDGATE_BUILD_DIR:-$REPO/build}"
TRACE="${FEDSIM_TRACE:-$REPO/../shared/data/traces/philly_normalized.csv}"
FEDSIM="$BUILD/bench/fedsim"
[ -f "$TRACE" ] || { echo "fedsim_philly: no trace at $TRACE (set FEDSIM_TRACE)" >&2; exit 2; }
# window: start hour, jobs, GPUs per site (3 sites: 2 x A100, 1 x H100)
WINDOWS=("0 10000 112" "1500 10000 128")
for w in "${WINDOWS[@]}"; do
  set -- $w
  sites="cn-beijing=A100:$3,cn-shanghai=A100:$3,cn-shenzhen=H100:$3"
  echo "== Philly from hour $1, $2 jobs, $((3 * $3)) GPUs on 3 sites, --estimate-noise 0.5"
  "$FEDSIM" --trace "$TRACE" --sites "$sites" --policy fifo --start-hour "$1" --limit "$2" \
    --estimate-noise 0.5 2>/dev/null | head -2
  printf "%-8s %12s %12s %14s %14s %8s %12s %12s %10s\n" policy avg_jct_s p50_jct_s p99_queue_s \
    makespan_s util idle_gpus_w sim_jobs/s vs_fifo
  fifo=""
  for p in fifo sjf fedgate; do
    line=$("$FEDSIM" --trace "$TRACE" --sites "$sites" --policy "$p" --start-hour "$1" --limit "$2" \
      --estimate-noise 0.5 2>/dev/null | tail -1)
    jct=$(echo "$line" | awk '{print $2}')
    [ -z "$fifo" ] && fifo=$jct
    echo "$line $(awk -v a="$fifo" -v b="$jct" 'BEGIN { printf "%9.2fx", a / b }')"
  done
done
echo "== the whole trace (82 247 jobs), 3 x 256 GPUs, fedgate, one core"
/usr/bin/time -f "wall %e s, max RSS %M KB" "$FEDSIM" --trace "$TRACE" \
  --sites cn-beijing=A100:256,cn-shanghai=A100:256,cn-shenzhen=H100:256 --policy fedgate \
  --estimate-noise 0.5 2>&1 | tail -2
