# A local 3-site fedgate federation on loopback, as a bash library (sourced by
# deploy/local/demo.sh, bench/load.sh and tests/ops/*.sh):
#   cn-beijing  (1 node x 8 A100-80GB)
#   cn-shanghai (1 node x 4 A100-80GB, 1 node x 4 H100)
#   cn-shenzhen (2 nodes x 8 H100)
# peered as a partial mesh (beijing - shanghai - shenzhen). gRPC ports are
# BASE, BASE+10, BASE+20 (peers' configs name them); REST and ops bind port
# 0 and are read back from each gateway's data/ports file.
#
#   fed_reserve_base                        reserves free gRPC ports, sets FED_BASE
#   fed_init WORK BASE_PORT [EXTRA_YAML]   certificates and configs; with
#                                           FED_SLURM_CONF set, cn-shanghai runs on
#                                           that Slurm (deploy/local/slurm.sh)
#   fed_start                               starts the three gateways
#   fed_wait_converged [SECONDS]            until every site sees all three
#   fed_port SITE grpc|http|ops             a port of a running gateway
#   fed_admin SITE ARGS...                  fedctl as that site's admin
#   fed_alice ARGS...                       fedctl as tenant user alice (to cn-beijing)
#   fed_stop                                SIGTERM to the gateways it started, by pid;
#                                           then ends the ranks they left running and
#                                           removes their slice cgroups and work folders
# Needs FEDGATE and FEDCTL (binary paths) set by the caller.

FED_SITES=(cn-beijing cn-shanghai cn-shenzhen)
declare -A FED_GRPC FED_PIDS

fed_init() {
  FED_WORK=$1
  # The ranks' folders (executor.work_dir): ranks run as fedgate-rank and
  # cannot enter FED_WORK (mktemp -d, 0700).
  FED_RANK_WORK=/var/tmp/fedgate-local-work/$(basename "$FED_WORK")
  local base=$2 extra=${3:-} i=0 s
  for s in "${FED_SITES[@]}"; do FED_GRPC[$s]=$((base + i * 10)); i=$((i + 1)); done
  "$FEDCTL" certs init-ca --dir "$FED_WORK/ca" --federation aidc 2>/dev/null
  for s in "${FED_SITES[@]}"; do
    "$FEDCTL" certs issue --ca-dir "$FED_WORK/ca" --out "$FED_WORK/$s/tls" --site "$s" \
      --role gateway --dns localhost --ip 127.0.0.1 2>/dev/null
    "$FEDCTL" certs issue --ca-dir "$FED_WORK/ca" --out "$FED_WORK/$s/admin" --site "$s" \
      --role admin --name ops 2>/dev/null
  done
  "$FEDCTL" certs issue --ca-dir "$FED_WORK/ca" --out "$FED_WORK/alice" --tenant vision \
    --user alice 2>/dev/null
  _fed_config cn-beijing \
"    - {name: bj-1, address: 127.0.0.1, gpu_model: A100-80GB, gpu_memory_gib: 80, gpus: 8, rdma: true, nic_gbps: 200}" \
"$(_fed_peer cn-shanghai)" "$extra"
  if [ -n "${FED_SLURM_CONF:-}" ]; then
    # cn-shanghai on Slurm (deploy/local/slurm.sh: sh-1 a100 x 4, sh-2 h100 x 4).
    FED_SLURM_SITE=cn-shanghai _fed_config cn-shanghai "" \
"$(_fed_peer cn-beijing)
$(_fed_peer cn-shenzhen)" "$extra
slurm: {partition: gpu, conf: $FED_SLURM_CONF, gpu_models: {a100: A100-80GB, h100: H100}}"
  else
    _fed_config cn-shanghai \
"    - {name: sh-1, address: 127.0.0.1, gpu_model: A100-80GB, gpu_memory_gib: 80, gpus: 4, nic_gbps: 100}
    - {name: sh-2, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 4, nic_gbps: 100}" \
"$(_fed_peer cn-beijing)
$(_fed_peer cn-shenzhen)" "$extra"
  fi
  _fed_config cn-shenzhen \
"    - {name: sz-1, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 8, rdma: true, nic_gbps: 400}
    - {name: sz-2, address: 127.0.0.1, gpu_model: H100, gpu_memory_gib: 80, gpus: 8, rdma: true, nic_gbps: 400}" \
"$(_fed_peer cn-shanghai)" "$extra
accept_jobs_from: federation"
}

_fed_peer() { echo "  - {site: $1, endpoint: 127.0.0.1:${FED_GRPC[$1]}}"; }

_fed_config() {
  local site=$1 nodes=$2 peers=$3 extra=$4 kind=process
  local inventory
  inventory=$(printf 'inventory:\n  source: static\n  nodes:\n%s' "$nodes")
  if [ -n "${FED_SLURM_SITE:-}" ]; then kind=slurm; inventory="inventory: {source: slurm}"; fi
  cat >"$FED_WORK/$site/fedgate.yaml" <<YAML
site: $site
federation: aidc
listen:
  grpc: 127.0.0.1:${FED_GRPC[$site]}
  http: 127.0.0.1:0
  ops: 127.0.0.1:0
tls: {ca: tls/ca.pem, cert: tls/cert.pem, key: tls/key.pem}
data_dir: data
$inventory
peers:
$peers
advertise: {interval: 1s, ttl: 5s}
bench: {probe_interval: 10m, probe_duration: 1s}
executor: {kind: $kind, work_dir: $FED_RANK_WORK/$site}
$extra
YAML
}

fed_start() {
  local s
  for s in "${FED_SITES[@]}"; do
    rm -f "$FED_WORK/$s/data/ports"
    "$FEDGATE" --config "$FED_WORK/$s/fedgate.yaml" 2>"$FED_WORK/$s/fedgate.log" &
    FED_PIDS[$s]=$!
  done
}

fed_port() {  # fed_port SITE grpc|http|ops: waits up to 20 s for the gateway to listen
  local s=$1 kind=$2 i
  for i in $(seq 200); do
    if [ -s "$FED_WORK/$s/data/ports" ]; then
      awk -v k="$kind" '$1 == k { print $2 }' "$FED_WORK/$s/data/ports"
      return 0
    fi
    kill -0 "${FED_PIDS[$s]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "fed_port: $s is not listening; its log:" >&2
  tail -20 "$FED_WORK/$s/fedgate.log" >&2
  return 1
}

fed_admin() {
  local s=$1; shift
  "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[$s]}" --tls-dir "$FED_WORK/$s/admin" "$@"
}

fed_alice() { "$FEDCTL" --gateway "127.0.0.1:${FED_GRPC[cn-beijing]}" --tls-dir "$FED_WORK/alice" "$@"; }

fed_wait_converged() {
  local deadline=$(( $(date +%s) + ${1:-60} )) s n converged
  while :; do
    converged=1
    for s in "${FED_SITES[@]}"; do
      if ! kill -0 "${FED_PIDS[$s]}" 2>/dev/null; then
        echo "gateway $s died; its log:" >&2; tail -20 "$FED_WORK/$s/fedgate.log" >&2; return 1
      fi
      n=$(fed_admin "$s" -o json capacity 2>/dev/null | grep -o '"state":"\(up\|local\)"' | wc -l || true)
      [ "$n" = 3 ] || converged=0
    done
    [ $converged = 1 ] && return 0
    if [ "$(date +%s)" -ge $deadline ]; then echo "not converged after ${1:-60}s" >&2; return 1; fi
    sleep 0.2
  done
}

fed_stop() {
  local s
  [ ${#FED_PIDS[@]} -gt 0 ] || return 0
  for s in "${!FED_PIDS[@]}"; do kill -TERM "${FED_PIDS[$s]}" 2>/dev/null || true; done
  for s in "${!FED_PIDS[@]}"; do
    if wait "${FED_PIDS[$s]}" 2>/dev/null; then echo "  $s exited cleanly"; else echo "  $s exited with $?"; fi
  done
  FED_PIDS=()
  _fed_end_slices
  [ -z "${FED_RANK_WORK:-}" ] || rm -rf "$FED_RANK_WORK"
}

# Ranks outlive their gateway by design (a restarted gateway re-attaches
# them), so a federation torn down for good ends them itself: every slice
# cgroup (<job>-<epoch> under fedgate-<site>) of a job in this federation's
# data dirs is killed and removed. Other federations' cgroups are not
# touched: they may use the same site names.
_fed_end_slices() {
  local m s cg name i
  for m in $(awk '$3 == "cgroup2" { print $2 }' /proc/self/mounts); do
    for s in "${FED_SITES[@]}"; do
      for cg in "$m/fedgate-$s"/*/; do
        cg=${cg%/}
        name=$(basename "$cg")
        [ -d "$FED_WORK/$s/data/jobs/${name%-*}" ] || continue
        if [ -e "$cg/cgroup.kill" ]; then
          echo 1 >"$cg/cgroup.kill" 2>/dev/null || true
        else  # kernels before 5.14
          xargs -r kill -KILL <"$cg/cgroup.procs" 2>/dev/null || true
        fi
        for i in $(seq 100); do rmdir "$cg" 2>/dev/null && break; sleep 0.05; done
        if [ -d "$cg" ]; then echo "fed_stop: cannot remove $cg" >&2; fi
      done
    done
  done
}

# Reserves the gRPC ports (BASE, BASE+10, BASE+20; they must be known before
# start, since peers' configs name them) and sets FED_BASE. Like the C++ tests'
# ports: below the kernel's ephemeral range, so no outgoing connection takes
# one before the gateway binds it, and each held by a lock file under
# /tmp/fedgate-test-ports for as long as this shell lives, so scripts and
# tests running side by side never pick the same one. Not in a subshell:
# the locks would go with it.
fed_reserve_base() {
  local eph lo hi base p fd i dir=/tmp/fedgate-test-ports
  local -a fds
  read -r eph _ </proc/sys/net/ipv4/ip_local_port_range
  hi=$((eph - 21)); lo=$((hi - 12000 > 1025 ? hi - 12000 : 1025))
  if [ ! -d "$dir" ]; then mkdir -p "$dir" && chmod 1777 "$dir"; fi
  for i in $(seq 200); do
    base=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
    fds=()
    for p in "$base" $((base + 10)) $((base + 20)); do
      [ -e "$dir/$p" ] || : 2>/dev/null >>"$dir/$p"
      exec {fd}<"$dir/$p" || break
      if ! flock -n "$fd" || ! _fed_bindable "$p"; then exec {fd}>&-; break; fi
      fds+=("$fd")
    done
    if [ ${#fds[@]} = 3 ]; then FED_BASE=$base; return 0; fi
    for fd in "${fds[@]}"; do exec {fd}>&-; done
  done
  echo "fed_reserve_base: no free base port in $lo-$hi" >&2
  return 1
}

_fed_bindable() {
  /usr/bin/python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}
