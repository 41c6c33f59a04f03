#!/usr/bin/env bash
# A local 3-site fedgate federation on loopback:
#   cn-beijing  (1 node x 8 A100-80GB)
#   cn-shanghai (1 node x 4 A100-80GB, 1 node x 4 H100), on a real Slurm the
#               demo starts (as root; else on the process executor)
#   cn-shenzhen (2 nodes x 8 H100)
# peered as a partial mesh (beijing - shanghai - shenzhen; beijing and shenzhen
# never talk directly). Shows every site's view of the federation, then stops.
# Installs what is missing and builds first. Honours FEDGATE_BUILD_DIR.
# FEDGATE_DEMO_CONSOLE=1 serves `fedctl console` at the end, until Ctrl-C.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${FEDGATE_BUILD_DIR:-$REPO/build}"
WORK="${FEDGATE_DEMO_DIR:-$(mktemp -d /tmp/fedgate-demo.XXXXXX)}"
BASE_PORT="${FEDGATE_DEMO_PORT:-17400}"
KEEP="${FEDGATE_DEMO_KEEP:-0}"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "Checking packages and building (build dir: $BUILD)"
"$REPO/deploy/deps.sh"
export CCACHE_BASEDIR="$REPO" CCACHE_NOHASHDIR=1
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" -j2 --target fedgate fedctl fedgate-allreduce | grep -vE '^\[|^ninja: (Entering|no work)' || true
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
ALLREDUCE="$BUILD/deploy/workload/fedgate-allreduce"

. "$REPO/deploy/local/federation.sh"
SITES=("${FED_SITES[@]}")

cleanup() {
  local code=$?
  trap - EXIT INT TERM
  if [ ${#FED_PIDS[@]} -gt 0 ]; then
    say "Stopping the gateways (SIGTERM: each withdraws its ad and exits 0)"
    fed_stop
  fi
  if [ -n "${SLURM_DIR:-}" ]; then
    say "Stopping Slurm"
    slurm_stop
  fi
  if [ "$KEEP" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
  exit $code
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. "$REPO/deploy/local/slurm.sh"
if [ "$(id -u)" = 0 ] && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ]; then
  say "Starting a Slurm cluster for cn-shanghai (munged, slurmctld, slurmd sh-1 and sh-2)"
  slurm_start "$(mktemp -d /var/tmp/fedgate-demo-slurm.XXXXXX)" sh-1:a100:4 sh-2:h100:4
  export FED_SLURM_CONF="$SLURM_CONF_FILE"
  sinfo -N -o "%N %T %G"
else
  echo "  (not root, or no Slurm: cn-shanghai runs on the process executor)"
fi

say "Creating a CA for federation 'aidc' and certificates in $WORK"
fed_init "$WORK" "$BASE_PORT"
for s in "${SITES[@]}"; do
  echo "  $s: gateway spiffe://aidc/site/$s/gateway, admin spiffe://aidc/site/$s/admin/ops"
done
echo "  tenant user: spiffe://aidc/tenant/vision/user/alice"

say "Starting three gateways (partial mesh: beijing <-> shanghai <-> shenzhen)"
fed_start
for s in "${SITES[@]}"; do
  echo "  $s: pid ${FED_PIDS[$s]}, gRPC 127.0.0.1:${FED_GRPC[$s]}, ops http://127.0.0.1:$(fed_port "$s" ops)/metrics, log $WORK/$s/fedgate.log"
done
fedctl_as() { fed_admin "$@"; }

say "Waiting until every site sees all three sites"
start_ms=$(( $(date +%s%N) / 1000000 ))
fed_wait_converged 60
echo "  converged in $(( $(date +%s%N) / 1000000 - start_ms )) ms"

for s in "${SITES[@]}"; do
  say "fedctl capacity, as seen from $s"
  fedctl_as "$s" capacity
done
say "fedctl peers list, as seen from cn-shanghai"
fedctl_as cn-shanghai peers list

say "Waiting for the link probes each gateway runs when a peer comes up"
deadline=$(( $(date +%s) + 60 ))
while :; do
  done_all=1
  for s in "${SITES[@]}"; do
    n=$(fedctl_as "$s" -o json links 2>/dev/null | grep -o '"from"' | wc -l || true)
    [ "$n" -ge 4 ] || done_all=0
  done
  [ $done_all = 1 ] && break
  if [ "$(date +%s)" -ge $deadline ]; then echo "links not measured after 60s" >&2; exit 1; fi
  sleep 0.5
done
for s in "${SITES[@]}"; do
  say "fedctl links (the measured bandwidth matrix; loopback here), as seen from $s"
  fedctl_as "$s" links
done

alice() { fed_alice "$@"; }  # fedctl as the tenant user, talking to cn-beijing
cat >"$WORK/job.yaml" <<YAML
name: allreduce-12
gpus: 12
gpu_models: [A100-80GB]
estimated_duration: 5m
command: [$ALLREDUCE]
env: {DEMO: "1"}
YAML
say "A 12-GPU A100 job (8 A100 in cn-beijing, 4 in cn-shanghai, none in cn-shenzhen)"
cat "$WORK/job.yaml"
say "fedctl jobs plan (dry run)"
alice jobs plan -f "$WORK/job.yaml"

say "fedctl jobs submit, as tenant vision, to cn-beijing"
JOB=$(alice -o json jobs submit -f "$WORK/job.yaml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
echo "  job $JOB accepted (durable)"
say "fedctl jobs watch $JOB"
if ! timeout 120 "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" jobs watch "$JOB"; then
  echo "the job did not succeed; rank 0 said:" >&2
  alice jobs logs "$JOB" --rank 0 >&2 || true
  exit 1
fi
say "fedctl vc get $JOB: the virtual cluster stitched across sites"
alice vc get "$JOB"
say "Each rank's result line (fedctl jobs logs $JOB --rank N, fetched through the coordinator)"
for r in $(seq 0 11); do alice jobs logs "$JOB" --rank "$r" | grep 'allreduce'; done
if [ -n "${FED_SLURM_CONF:-}" ]; then
  say "Ranks 8-11 ran as steps of a Slurm allocation in cn-shanghai; it ended with the job"
  echo "  squeue now: $(squeue -h | wc -l) job(s)"
fi

say "Beyond direct peers: 20 GPUs of cn-beijing and cn-shenzhen, which do not peer"
echo "  (cn-shenzhen sets accept_jobs_from: federation; cn-beijing reserves on it at the"
echo "   endpoint of its signed ad, with the same ownership rules as a peer)"
cat >"$WORK/mesh.yaml" <<YAML
name: beyond-peers
gpus: 20
gpu_models: [A100-80GB, H100]
allowed_sites: [cn-beijing, cn-shenzhen]
command: [sh, -c, 'echo "rank \$RANK of \$WORLD_SIZE, master \$MASTER_ADDR:\$MASTER_PORT"']
YAML
MJOB=$(alice -o json jobs submit -f "$WORK/mesh.yaml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
if ! timeout 120 "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" jobs watch "$MJOB"; then
  echo "the job beyond peers did not succeed: $(alice jobs get "$MJOB")" >&2
  exit 1
fi
alice vc get "$MJOB"

say "A real PyTorch program: init_process_group(\"gloo\", init_method=\"env://\"), 10 A100s of two sites"
cat >"$WORK/torch.yaml" <<YAML
name: torch-gloo
gpus: 10
gpu_models: [A100-80GB]
command: [/usr/bin/python3, $REPO/deploy/workload/torch_allreduce.py]
YAML
TJOB=$(alice -o json jobs submit -f "$WORK/torch.yaml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
if timeout 180 "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" jobs watch "$TJOB"; then
  for r in $(seq 0 9); do alice jobs logs "$TJOB" --rank "$r" | grep 'torch rank'; done
else
  echo "the torch job did not succeed (rank 0 below)"; alice jobs logs "$TJOB" --rank 0 || true
fi

if [ "${FEDGATE_DEMO_CONSOLE:-0}" = 1 ]; then
  say "The browser console as alice (open the URL below; Ctrl-C ends the demo)"
  "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" console || true
fi

say "Demo done"
