#!/usr/bin/env bash
# verify.sh FEDGATE_BINARY: systemd-analyze verify of fedgate.service, with
# ExecStart pointed at a built binary (verify checks that it exists).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/fedgate|$1|" "$here/fedgate.service" >"$dir/fedgate.service"
out=$(systemd-analyze verify --man=no "$dir/fedgate.service" 2>&1) || { echo "$out"; exit 1; }
# verify exits 0 on some warnings: treat any line about our unit as a failure.
if echo "$out" | grep -q "fedgate.service"; then echo "$out"; exit 1; fi
echo "fedgate.service: OK"
