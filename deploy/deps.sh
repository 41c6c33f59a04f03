#!/usr/bin/env bash
# Installs every Debian 12 package fedgate needs to build, test and run its demo.
# Idempotent and quiet when everything is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libboost1.74-dev libboost-system1.74-dev libssl-dev
  libsqlite3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libibverbs-dev librdmacm-dev
  clang libfuzzer-14-dev libclang-rt-14-dev
  prometheus systemd
  iproute2 procps curl openssl python3 python3-yaml python3-locust iperf3
  python3-torch
  chromium chromium-driver python3-selenium libjs-chart.js
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The unprivileged user ranks run as (executor.run_as), when we may add it.
add_rank_user() {
  if ! getent passwd fedgate-rank >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin fedgate-rank
      echo "deps: added system user fedgate-rank (ranks run as it)" >&2
    else
      echo "deps: not root: no fedgate-rank user added (ranks run as the gateway's user)" >&2
    fi
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  add_rank_user
  exit 0
fi

echo "deps: installing ${#missing[@]} package(s): ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
add_rank_user
echo "deps: done" >&2
