#!/usr/bin/env bash
# run_fuzz.sh BINARY SEED_DIR WORK_DIR SECONDS
# Runs one libFuzzer target for SECONDS from the committed seeds; new inputs
# go to WORK_DIR (never into the repository). Exits non-zero on any crash,
# leak, timeout or sanitizer report; the reproducer is left in WORK_DIR.
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work"
exec "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work" "$seeds"
