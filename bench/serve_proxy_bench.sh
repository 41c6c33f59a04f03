#!/usr/bin/env bash
# The service proxy's own cost (issue 28): on a local federation
# (deploy/local/federation.sh), a one-replica service of
# deploy/workload/model_server.py with no compute time; then, on this host,
#  - p50 / p99 of N sequential POST /predict straight to the replica (plain
#    HTTP, keep-alive) and through cn-beijing's /v1/services/chat/ (HTTPS
#    with the tenant's certificate, keep-alive), alternating, and the p50
#    the gateway adds (target < 1 ms);
#  - a 1 GiB response streamed through the gateway (curl), with the
#    gateway's resident memory before and after (target: growth < 64 MiB).
#   bench/serve_proxy_bench.sh [--requests 2000] [--json FILE]
# Honours FEDGATE_BUILD_DIR. Exits 1 when a target is missed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${FEDGATE_BUILD_DIR:-$REPO/build}" && pwd)"
N=2000 JSON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) N=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "serve_proxy_bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
FEDGATE="$BUILD/gateway/fedgate"
FEDCTL="$BUILD/gateway/cli/fedctl"
for b in "$FEDGATE" "$FEDCTL"; do
  [ -x "$b" ] || { echo "serve_proxy_bench.sh: $b not built (cmake --build $BUILD)" >&2; exit 2; }
done
WORK="$(mktemp -d /tmp/fedgate-proxy.XXXXXX)"
SHARE="$(mktemp -d /var/tmp/fedgate-proxy-bench.XXXXXX)"
chmod 755 "$SHARE"
install -m 0644 "$REPO/deploy/workload/model_server.py" "$SHARE/model_server.py"
. "$REPO/deploy/local/federation.sh"
cleanup() { local code=$?; fed_stop >/dev/null 2>&1 || true; rm -rf "$WORK" "$SHARE"; exit $code; }
trap cleanup EXIT

fed_reserve_base
fed_init "$WORK" "$FED_BASE"
fed_start
fed_wait_converged 60
HTTP=$(fed_port cn-beijing http)
ALICE="$WORK/alice"
cat >"$WORK/svc.yaml" <<YAML
kind: service
name: chat
gpus: 1
allowed_sites: [cn-beijing]
readiness: {period: 1s}
command: [python3, $SHARE/model_server.py, --compute-ms, "0", --slots, "4"]
YAML
fed_alice jobs submit -f "$WORK/svc.yaml" >/dev/null
services() {
  curl -s --cacert "$ALICE/ca.pem" --cert "$ALICE/cert.pem" --key "$ALICE/key.pem" \
    "https://127.0.0.1:$HTTP/v1/services?name=chat"
}
for _ in $(seq 300); do
  services | grep -q '"ready":1' && break
  sleep 0.2
done
ADDR=$(services | grep -o '"address":"[^"]*"' | head -1 | cut -d'"' -f4)
[ -n "$ADDR" ] || { echo "serve_proxy_bench: the service never became ready" >&2; exit 1; }
GW_PID=${FED_PIDS[cn-beijing]}

/usr/bin/python3 - "$ADDR" "$HTTP" "$ALICE" "$N" "$GW_PID" "$JSON" <<'PY'
import http.client, json, socket, ssl, statistics, subprocess, sys, time
addr, http_port, tls, n, gw_pid, out = sys.argv[1:7]
n, gw_pid = int(n), int(gw_pid)
host, port = addr.rsplit(":", 1)
ctx = ssl.create_default_context(cafile=f"{tls}/ca.pem")
ctx.load_cert_chain(f"{tls}/cert.pem", f"{tls}/key.pem")
ctx.check_hostname = False
direct = http.client.HTTPConnection(host, int(port))
proxy = http.client.HTTPSConnection("127.0.0.1", int(http_port), context=ctx)
for c in (direct, proxy):  # http.client writes header and body apart: no Nagle stalls
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def call(c, path):
    t = time.perf_counter()
    c.request("POST", path, body=b'{"prompt": "hi"}')
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
    return (time.perf_counter() - t) * 1000
for _ in range(100):  # warm both connections
    call(direct, "/predict"); call(proxy, "/v1/services/chat/predict")
d, p = [], []
for _ in range(n):  # alternating, so drift hits both alike
    d.append(call(direct, "/predict"))
    p.append(call(proxy, "/v1/services/chat/predict"))
def q(xs, f): xs = sorted(xs); return xs[min(len(xs) - 1, int(f * len(xs)))]
def rss_kib(pid, key="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"): return int(line.split()[1])
added = statistics.median(p) - statistics.median(d)
before = rss_kib(gw_pid)
t = time.perf_counter()
res = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{http_code}",
                      "--cacert", f"{tls}/ca.pem", "--cert", f"{tls}/cert.pem", "--key", f"{tls}/key.pem",
                      f"https://127.0.0.1:{http_port}/v1/services/chat/stream?bytes={1 << 30}"],
                     capture_output=True, text=True, check=True)
secs = time.perf_counter() - t
size, code = res.stdout.split()
# A stream that failed or came back short is a failure, not a fast result.
if code != "200" or int(size) != 1 << 30:
    sys.exit(f"serve_proxy_bench: the 1 GiB stream failed: HTTP {code}, {size} bytes")
after, peak = rss_kib(gw_pid), rss_kib(gw_pid, "VmHWM")
growth_mib = (after - before) / 1024
doc = {"requests": n,
       "direct_ms": {"p50": round(q(d, .5), 3), "p99": round(q(d, .99), 3)},
       "proxy_ms": {"p50": round(q(p, .5), 3), "p99": round(q(p, .99), 3)},
       "added_p50_ms": round(added, 3), "ratio_p50_proxy_to_direct": round(q(p, .5) / q(d, .5), 2),
       "stream_1gib": {"bytes": int(size), "http": int(code), "seconds": round(secs, 2),
                       "gbit_s": round(int(size) * 8 / secs / 1e9, 2),
                       "rss_before_mib": round(before / 1024, 1), "rss_after_mib": round(after / 1024, 1),
                       "rss_growth_mib": round(growth_mib, 1), "rss_peak_mib": round(peak / 1024, 1)}}
print(f"{n} requests each way, same host, keep-alive: direct p50 {doc['direct_ms']['p50']} ms "
      f"p99 {doc['direct_ms']['p99']} ms; through the gateway p50 {doc['proxy_ms']['p50']} ms "
      f"p99 {doc['proxy_ms']['p99']} ms; added p50 {doc['added_p50_ms']} ms (target < 1 ms)")
s = doc["stream_1gib"]
print(f"1 GiB streamed through the gateway: {s['bytes']} bytes, HTTP {s['http']}, {s['seconds']} s "
      f"({s['gbit_s']} Gbit/s); gateway RSS {s['rss_before_mib']} -> {s['rss_after_mib']} MiB "
      f"(growth {s['rss_growth_mib']} MiB, target < 64; peak {s['rss_peak_mib']} MiB)")
if out: json.dump(doc, open(out, "w"), indent=2)
ok = added < 1.0 and growth_mib < 64 and int(size) == 1 << 30
sys.exit(0 if ok else 1)
PY
