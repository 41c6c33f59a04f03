#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test twice: a Release build,
# then an AddressSanitizer + UBSan build in its own folder (all but the netns
# and Slurm tests; FEDGATE_ASAN_ALL=1 runs them too). Prints both ctest
# summaries. Honours FEDGATE_BUILD_DIR (default build/ in the repo); the
# sanitizer build goes to FEDGATE_ASAN_BUILD_DIR (default <build>-asan).
# FEDGATE_SKIP_ASAN=1 runs the Release pass only (for quick local loops).
# Then the libFuzzer targets (clang, ASan+UBSan) in <build>-fuzz, each for
# FEDGATE_FUZZ_SECONDS (default 20) from its seed corpus; FEDGATE_SKIP_FUZZ=1
# skips them. Fails too when the run leaves slice cgroups or ranks' work
# folders behind.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FEDGATE_BUILD_DIR:-$REPO/build}"
ASAN_BUILD="${FEDGATE_ASAN_BUILD_DIR:-${BUILD%/}-asan}"
FUZZ_BUILD="${FEDGATE_FUZZ_BUILD_DIR:-${BUILD%/}-fuzz}"
JOBS="${FEDGATE_JOBS:-2}"

# Seconds per phase, printed at the end: CI has 90 minutes for all of it.
timings=()
phase_start=$SECONDS
phase_done() { timings+=("$1 $((SECONDS - phase_start))s"); phase_start=$SECONDS; }

"$REPO/deploy/deps.sh"
phase_done deps

export CCACHE_BASEDIR="$REPO" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

configure_and_build() {  # DIR CMAKE_ARGS...
  local dir=$1; shift
  mkdir -p "$dir"
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$REPO" -B "$dir" -G Ninja "$@" >"$dir/configure.log" 2>&1 ||
      { cat "$dir/configure.log"; exit 1; }
  fi
  echo "== building in $dir"
  cmake --build "$dir" -j"$JOBS" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
  # grep above hides progress; the exit status of the build is checked here.
  cmake --build "$dir" -j"$JOBS" >/dev/null
}

run_ctest() {  # DIR LOGFILE [LABELS LEFT OUT OF THE REST]
  local dir=$1 log=$2 skip=${3:-unit} rc=0
  # Unit tests in parallel; integration and netns tests one at a time: they
  # run real processes whose timing the two cores share.
  ( cd "$dir" && ctest -L unit -j"$JOBS" --output-on-failure --timeout 300 ) >"$log.unit" 2>&1 || rc=1
  ( cd "$dir" && ctest -LE "$skip" --output-on-failure --timeout 600 ) >"$log.rest" 2>&1 || rc=1
  cat "$log.unit" "$log.rest" >"$log"
  return $rc
}

summary() {  # NAME LOG
  echo "== $1: ctest summary"
  grep -E '^[0-9]+% tests passed|tests failed out of|^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess|Not Run|Exception)' "$2" || true
  # Where the time went: the slowest tests of the pass.
  echo "slowest: $(grep -aE 'Test +#[0-9]+: ' "$2" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/' |
    sort -rn | head -5 | awk '{ printf "%s%s %.0fs", (NR > 1 ? ", " : ""), $2, $1 }')"
}

# Slice cgroups (<job>-<epoch> under fedgate-<site>) in every cgroup2 mount:
# a run that leaves more than it found leaks them, and a host that runs
# tests all day would fill with them.
slice_cgroups() {
  local m
  for m in $(awk '$3 == "cgroup2" { print $2 }' /proc/self/mounts); do
    find "$m" -mindepth 2 -maxdepth 2 -type d -path "$m/fedgate-*" 2>/dev/null || true
  done | sort
}

# Ranks' work folders: the default executor.work_dir's, the local
# federation's (deploy/local/federation.sh) and the test harness's.
rank_work_dirs() {
  {
    find /var/tmp/fedgate-work -mindepth 2 -maxdepth 2 2>/dev/null || true
    find /var/tmp/fedgate-local-work /var/tmp/fedgate-test-work -mindepth 1 -maxdepth 1 2>/dev/null || true
  } | sort
}

# What LIST_FN lists now that was not in BEFORE (LIST_FN BEFORE WHAT).
report_left() {
  local left
  left=$(comm -13 <(echo "$2") <($1) | sed '/^$/d')
  echo "$3 left behind by this run: $(printf '%s' "$left" | grep -c . || true)"
  [ -z "$left" ] && return 0
  echo "$left" | head -20 >&2
  return 1
}

status=0
cgroups_before=$(slice_cgroups)
work_before=$(rank_work_dirs)

configure_and_build "$BUILD" -DCMAKE_BUILD_TYPE=Release
phase_done "Release build"
run_ctest "$BUILD" "$BUILD/ctest.log" || status=1
phase_done "Release tests"

if [ "${FEDGATE_SKIP_ASAN:-0}" != 1 ]; then
  mkdir -p "$ASAN_BUILD"
  configure_and_build "$ASAN_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDGATE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
  phase_done "ASan build"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export LSAN_OPTIONS="suppressions=$REPO/tests/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # The netns and Slurm tests run the gateway code the integration tests
  # run, over real namespaces and daemons, and mostly wait on leases: under
  # ASan they add ~300 s to CI's 90 minutes and no code path
  # (FEDGATE_ASAN_ALL=1 runs them too).
  asan_skip="unit|netns|slurm"
  [ "${FEDGATE_ASAN_ALL:-0}" = 1 ] && asan_skip=unit
  run_ctest "$ASAN_BUILD" "$ASAN_BUILD/ctest.log" "$asan_skip" || status=1
  phase_done "ASan tests"
fi

if [ "${FEDGATE_SKIP_FUZZ:-0}" != 1 ]; then
  CC=clang CXX=clang++ configure_and_build "$FUZZ_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFEDGATE_SANITIZE=ON -DFEDGATE_FUZZ=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DFEDGATE_FUZZ_SECONDS="${FEDGATE_FUZZ_SECONDS:-20}"
  phase_done "fuzz build"
  ( cd "$FUZZ_BUILD" && ctest -L fuzz -j"$JOBS" --output-on-failure ) >"$FUZZ_BUILD/ctest.log" 2>&1 ||
    status=1
  phase_done "fuzz runs"
fi

echo
summary "Release" "$BUILD/ctest.log"
[ "${FEDGATE_SKIP_ASAN:-0}" != 1 ] && summary "ASan+UBSan" "$ASAN_BUILD/ctest.log"
[ "${FEDGATE_SKIP_FUZZ:-0}" != 1 ] && summary "libFuzzer" "$FUZZ_BUILD/ctest.log"
# One plain closing line over every pass.
logs=("$BUILD/ctest.log")
[ "${FEDGATE_SKIP_ASAN:-0}" != 1 ] && logs+=("$ASAN_BUILD/ctest.log")
[ "${FEDGATE_SKIP_FUZZ:-0}" != 1 ] && logs+=("$FUZZ_BUILD/ctest.log")
report_left slice_cgroups "$cgroups_before" "slice cgroups" || status=1
report_left rank_work_dirs "$work_before" "rank work folders" || status=1
cat "${logs[@]}" | awk '/tests failed out of/ { f += $4; t += $NF }
  END { printf "tests: %d passed, %d failed\n", t - f, f }'
echo "== seconds per phase: $(IFS=,; echo "${timings[*]}" | sed 's/,/, /g') (total ${SECONDS}s)"
if [ $status -ne 0 ]; then
  echo "== FAILED: details above and in $BUILD/ctest.log, $ASAN_BUILD/ctest.log, $FUZZ_BUILD/ctest.log" >&2
  # The failed assertions first, a few lines each (a test's whole log
  # follows in the ctest log and may be long); "Failure" alone would match
  # test names.
  for l in "${logs[@]}"; do
    grep -a -A6 -E '^[^ ]+:[0-9]+: Failure$|^\[  FAILED  \]' "$l" | cut -c1-300 | head -80 >&2 || true
  done
  grep -a -A40 -E ':[0-9]+: Failure$' "$BUILD/ctest.log" | head -150 >&2 || true
  [ -f "$FUZZ_BUILD/ctest.log" ] && grep -a -B5 -A40 -E 'ERROR: (libFuzzer|Address|Leak)Sanitizer|deadly signal|runtime error' "$FUZZ_BUILD/ctest.log" | head -120 >&2 || true
  [ -f "$ASAN_BUILD/ctest.log" ] && grep -a -A40 -E ':[0-9]+: Failure$|ERROR: (Address|Leak)Sanitizer|runtime error' "$ASAN_BUILD/ctest.log" | head -200 >&2 || true
fi
exit $status
