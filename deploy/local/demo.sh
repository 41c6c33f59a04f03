#!/usr/bin/env bash
# A local 3-site fedgate federation on loopback:
#   cn-beijing  (1 node x 8 A100-80GB)
#   cn-shanghai (1 node x 4 A100-80GB, 1 node x 4 H100), on a real Slurm the
#               demo starts (as root; else on the process executor)
#   cn-shenzhen (2 nodes x 8 H100)
# peered as a partial mesh (beijing - shanghai - shenzhen; beijing and shenzhen
# never talk directly). Shows every site's view of the federation, runs jobs
# stitched across sites, then adds a Kubernetes site (cn-hangzhou) on
# fake-kube-apiserver and runs a job across it and cn-beijing, then stops.
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
cmake --build "$BUILD" -j2 --target fedgate fedctl fedgate-allreduce fake-kube-apiserver | grep -vE '^\[|^ninja: (Entering|no work)' || true
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
  if [ -n "${KUBE_PID:-}" ]; then kill -TERM "$KUBE_PID" 2>/dev/null; wait "$KUBE_PID" 2>/dev/null || true; fi
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

say "A Kubernetes site: cn-hangzhou on fake-kube-apiserver (no API server is packaged for Debian)"
# Two nodes of 4 A100s lent to the federation (label fedgate.io/pool), one
# GPU already held by a pod of the cluster's own users. Its pods run as local
# processes (as fedgate-rank when root), so the ranks really run.
KUBE_DIR="$FED_RANK_WORK/cn-hangzhou-cluster"
mkdir -p "$KUBE_DIR" && chmod 755 "$FED_RANK_WORK" "$KUBE_DIR"
KUBE_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
run_as=(); [ "$(id -u)" = 0 ] && run_as=(--run-as fedgate-rank)
"$BUILD/tests/support/fake_kube/fake-kube-apiserver" --listen 127.0.0.1:0 --token "$KUBE_TOKEN" \
  --log-dir "$KUBE_DIR" "${run_as[@]}" >"$WORK/kube-api.log" 2>&1 &
KUBE_PID=$!
for i in $(seq 100); do grep -q 'listening on' "$WORK/kube-api.log" && break; sleep 0.1; done
KUBE_URL=$(grep -o 'https://[0-9.:]*' "$WORK/kube-api.log")
kube() { curl -sk -H "Authorization: Bearer $KUBE_TOKEN" -H 'Content-Type: application/json' "$@"; }
kube -X POST "$KUBE_URL/api/v1/namespaces" -d '{"metadata":{"name":"fedgate-jobs"}}' >/dev/null
kube -X POST "$KUBE_URL/api/v1/namespaces" -d '{"metadata":{"name":"team-x"}}' >/dev/null
for n in hz-1 hz-2; do
  kube -X POST "$KUBE_URL/api/v1/nodes" -d '{"metadata":{"name":"'$n'","labels":{"fedgate.io/pool":"true",
    "nvidia.com/gpu.product":"A100-80GB"}},"status":{"allocatable":{"nvidia.com/gpu":"4"},
    "addresses":[{"type":"InternalIP","address":"127.0.0.1"}],"conditions":[{"type":"Ready","status":"True"}]}}' >/dev/null
done
kube -X POST "$KUBE_URL/api/v1/namespaces/team-x/pods" -d '{"metadata":{"name":"their-own"},"spec":{"nodeName":"hz-2",
  "containers":[{"name":"c","image":"i","command":["sleep","3600"],"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}' >/dev/null
echo "  API server $KUBE_URL: nodes hz-1, hz-2 (4 GPUs each); team-x/their-own holds 1 GPU on hz-2"
mkdir -p "$WORK/cn-hangzhou"
"$FEDCTL" certs issue --ca-dir "$WORK/ca" --out "$WORK/cn-hangzhou/tls" --site cn-hangzhou --role gateway \
  --dns localhost --ip 127.0.0.1 2>/dev/null
"$FEDCTL" certs issue --ca-dir "$WORK/ca" --out "$WORK/cn-hangzhou/admin" --site cn-hangzhou --role admin \
  --name ops 2>/dev/null
cat >"$WORK/cn-hangzhou/kubeconfig" <<YAML
apiVersion: v1
kind: Config
current-context: fake
contexts: [{name: fake, context: {cluster: fake, user: fedgate}}]
clusters: [{name: fake, cluster: {server: "$KUBE_URL", insecure-skip-tls-verify: true}}]
users: [{name: fedgate, user: {token: $KUBE_TOKEN}}]
YAML
HZ_GRPC=$((BASE_PORT + 30))
FED_GRPC[cn-hangzhou]=$HZ_GRPC
cat >"$WORK/cn-hangzhou/fedgate.yaml" <<YAML
site: cn-hangzhou
federation: aidc
listen: {grpc: 127.0.0.1:$HZ_GRPC, http: 127.0.0.1:0, ops: 127.0.0.1:0}
tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}
data_dir: data
inventory: {source: kubernetes}
executor: {kind: kubernetes, work_dir: $FED_RANK_WORK/cn-hangzhou}
kubernetes: {kubeconfig: kubeconfig, namespace: fedgate-jobs, node_selector: {fedgate.io/pool: "true"}}
peers:
  - {site: cn-beijing, endpoint: 127.0.0.1:${FED_GRPC[cn-beijing]}}
advertise: {interval: 1s, ttl: 5s}
jobs: {lease: 10s}
YAML
"$FEDGATE" --config "$WORK/cn-hangzhou/fedgate.yaml" 2>"$WORK/cn-hangzhou/fedgate.log" &
FED_PIDS[cn-hangzhou]=$!
fed_admin cn-beijing peers add --site cn-hangzhou --endpoint "127.0.0.1:$HZ_GRPC" >/dev/null
deadline=$(( $(date +%s) + 60 ))
until fed_admin cn-beijing -o json capacity 2>/dev/null | python3 -c '
import json, sys
sites = {s["site"]: s for s in json.load(sys.stdin)["sites"]}
sys.exit(0 if sites.get("cn-hangzhou", {}).get("free_gpus") == 7 else 1)'; do
  if [ "$(date +%s)" -ge $deadline ]; then
    echo "cn-hangzhou does not offer 7 GPUs; its log:" >&2; tail -20 "$WORK/cn-hangzhou/fedgate.log" >&2; exit 1
  fi
  sleep 0.3
done
fed_admin cn-beijing capacity
cat >"$WORK/kube.yaml" <<YAML
name: allreduce-k8s
gpus: 16
gpu_models: [A100-80GB]
allowed_sites: [cn-beijing, cn-shanghai, cn-hangzhou]
command: [$ALLREDUCE]
YAML
say "A 16-GPU world across three kinds of site: cn-beijing (8, processes), cn-shanghai (4, Slurm steps when root) and cn-hangzhou (4, pods)"
KJOB=$(alice -o json jobs submit -f "$WORK/kube.yaml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["id"])')
if ! timeout 120 "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" jobs watch "$KJOB"; then
  echo "the Kubernetes job did not succeed: $(alice jobs get "$KJOB")" >&2
  tail -30 "$WORK/cn-hangzhou/fedgate.log" >&2
  exit 1
fi
alice vc get "$KJOB"
alice -o json jobs get "$KJOB" | python3 -c '
import json, sys
sites = [s["site"] for s in json.load(sys.stdin)["job"]["run"]["sites"]]
print("  sites of the world:", ", ".join(sites))
sys.exit(0 if set(sites) == {"cn-beijing", "cn-shanghai", "cn-hangzhou"} else 1)'
for r in $(seq 0 15); do alice jobs logs "$KJOB" --rank "$r" | grep 'allreduce'; done

if [ "${FEDGATE_DEMO_CONSOLE:-0}" = 1 ]; then
  say "The browser console as alice (open the URL below; Ctrl-C ends the demo)"
  "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$WORK/alice" console || true
fi

say "Demo done"
