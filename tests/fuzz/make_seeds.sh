#!/usr/bin/env bash
# Writes the committed seed corpus (corpus/<target>/): readable inputs for the
# text decoders, and protobuf messages encoded by protoc from text format for
# the binary ones. Rerun after a message changes; the fuzzers only read them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
proto="$here/../../proto"
c="$here/corpus"
rm -rf "$c"
mkdir -p "$c"/{job_spec_fuzz,config_fuzz,rest_fuzz,control_fuzz,peer_fuzz,ad_verify_fuzz,checkpoint_fuzz}

enc() {  # MESSAGE (text format on stdin) -> binary on stdout
  protoc -I"$proto" --encode="fedgate.v1.$1" "$proto"/fedgate/v1/*.proto
}
frame() {  # binary on stdin -> 4-byte big-endian length + bytes
  python3 -c 'import sys; b = sys.stdin.buffer.read(); sys.stdout.buffer.write(len(b).to_bytes(4, "big") + b)'
}

# Job specs: YAML and JSON, the fields of DESIGN.md.
cat >"$c/job_spec_fuzz/yaml" <<'Y'
name: llama-ft
gpus: 12
gpu_model: A100-80GB
command: [python3, train.py, --epochs, "3"]
env: {NCCL_DEBUG: INFO}
estimated_duration: 2h
priority: normal
min_gbps_between_sites: 5
Y
printf '{"name": "j", "gpus": 2, "command": ["true"], "estimated_duration": "90s"}' \
  >"$c/job_spec_fuzz/json"
printf 'name: x\ngpus: 0\ncommand: []\n' >"$c/job_spec_fuzz/bad"

# Configs.
cat >"$c/config_fuzz/full" <<'Y'
site: cn-beijing
federation: aidc
listen: {grpc: 0.0.0.0:7443, http: 127.0.0.1:8443, ops: 127.0.0.1:9443}
tls: {ca: ca.pem, cert: cert.pem, key: key.pem, reload_interval: 30s}
data_dir: data
inventory:
  nodes:
    - {name: bj-1, address: 10.0.0.11, gpu_model: A100-80GB, gpus: 8, rdma: true, nic_gbps: 200}
peers:
  - {site: cn-shanghai, endpoint: sh.example:7443}
advertise: {interval: 2s, ttl: 10s}
bench: {probe_duration: 1s, probe_on_peer_up: true}
jobs: {lease: 10s}
api: {max_streams_per_caller: 16}
Y
printf 'site: a\nfederation: f\n' >"$c/config_fuzz/minimal"

# REST requests.
crlf() { sed 's/$/\r/'; }
body='{"spec": {"name": "j", "gpus": 2, "command": ["true"]}, "idempotency_key": "k1"}'
printf 'POST /v1/jobs HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Length: %d\n\n' \
  "${#body}" | crlf >"$c/rest_fuzz/submit"
printf '%s' "$body" >>"$c/rest_fuzz/submit"
printf 'GET /v1/jobs?state=RUNNING&page_size=10&page_token=j-0 HTTP/1.1\nHost: x\n\n' | crlf \
  >"$c/rest_fuzz/list"
printf 'POST /v1/jobs/j-0123456789abcdef:cancel HTTP/1.1\nHost: x\nContent-Length: 0\n\n' | crlf \
  >"$c/rest_fuzz/cancel"
printf 'GET /v1/jobs/j-0123456789abcdef/logs?rank=1&offset=1048576 HTTP/1.1\nHost: x\n\n' | crlf \
  >"$c/rest_fuzz/logs"
printf 'GET /v1/jobs/j-0123456789abcdef HTTP/1.1\nHost: x\n\n' | crlf >"$c/rest_fuzz/get"

# Bench control: a hello, rounds, then done.
{
  echo 'token: "0123456789abcdef" transport: "tcp" streams: 4' | enc BenchHello | frame
  echo 'size_bytes: 1048576 warmup_ms: 100 duration_ms: 1000' | enc BenchRound | frame
  echo 'size_bytes: 8 latency_iterations: 100' | enc BenchRound | frame
  echo 'done: true' | enc BenchRound | frame
} >"$c/control_fuzz/session"
echo 'size_bytes: 4294967295 latency_iterations: 4294967295' | enc BenchRound | frame \
  >"$c/control_fuzz/huge_round"

# Peer calls: the first byte picks the handler (see peer_fuzz.cc).
peer() {  # NAME SELECTOR MESSAGE (text on stdin)
  { printf "\\x$2"; enc "$3"; } >"$c/peer_fuzz/$1"
}
echo 'site: "site-b" version: "0.1.0" capabilities: "ads.v1"' | peer handshake 00 HandshakeRequest
cat <<'T' | peer advertise 01 AdvertiseRequest
site: "site-b"
ads { origin: "site-b" seq: 3 issued_at_unix_ms: 1700000000000 ttl_ms: 10000 interval_ms: 2000
      nodes { name: "b-n1" gpu_model: "A100-80GB" free_gpus: 4 total_gpus: 8 address: "10.0.0.2" } }
T
K='key { job_id: "j-00000000000000aa" attempt: 1 epoch: 5 }'
echo "site: \"site-b\" $K nodes { node: \"a-n1\" gpus: 2 } hold_ttl_ms: 1000 tenant: \"vision\"" |
  peer prepare 02 PrepareRequest
cat <<T | peer commit 03 CommitRequest
site: "site-b" $K world_size: 2 master_addr: "127.0.0.1" master_port: 29500 lease_ms: 3000
ranks { rank: 0 local_rank: 0 local_world_size: 2 node: "a-n1" }
ranks { rank: 1 local_rank: 1 local_world_size: 2 node: "a-n1" }
command: "x"
T
echo "site: \"site-b\" $K reason: \"cancelled\"" | peer abort 04 AbortRequest
echo "site: \"site-b\" $K" | peer status 05 SliceStatusRequest
echo 'site: "site-b" job_id: "j-00000000000000aa" rank: 0 offset: 0 max_bytes: 65536' |
  peer readlog 06 ReadLogRequest
echo "site: \"site-c\" $K" | peer abort_other_site 84 AbortRequest
echo 'site: "site-b" transport: "tcp" streams: 4' | peer open_bench 7d OpenBenchRequest
echo 'site: "site-b" since_unix_ms: 0 until_unix_ms: 1800000000000 tenant: "vision"' |
  peer list_usage 7e ListUsageRequest
K2='key { job_id: "j-00000000000000bb" attempt: 1 epoch: 9 }'
echo "site: \"site-b\" $K2 quota_gpus { key: \"A100-80GB\" value: 2 } tenant: \"vision\" hold_ttl_ms: 1000" |
  peer prepare_quota_only 02 PrepareRequest
echo "site: \"site-b\" $K2 nodes { node: \"a-n1\" gpus: 8 } preempt: true tenant: \"vision\"" |
  peer prepare_preempt 02 PrepareRequest
echo "site: \"site-b\" $K lease_ms: 3000 preemptible: true command: \"x\" world_size: 1 master_port: 1" |
  peer commit_quota_only 03 CommitRequest
cat <<'T' | peer advertise_tenants 01 AdvertiseRequest
site: "site-b"
ads { origin: "site-b" seq: 4 issued_at_unix_ms: 1700000000000 ttl_ms: 10000 interval_ms: 2000
      nodes { name: "b-n1" gpu_model: "A100-80GB" free_gpus: 0 total_gpus: 8 preemptible_gpus: 4
              kept_for { key: "j-00000000000000cc" value: 4 } }
      tenants { tenant: "vision" gpus: 8 borrow: 2 used_gpus: 3 } }
T
# Signed ads: a SignedAd whose `ad` is the CapacityAd given in text format;
# the target fills in a genuine certificate and signature (ad_verify_fuzz.cc).
signed_ad() {  # NAME (CapacityAd text format on stdin)
  field1 CapacityAd "$1"
}
field1() {  # MESSAGE NAME (text format on stdin): the message as field 1 of another
  enc "$1" | python3 -c '
import sys
b = sys.stdin.buffer.read()
n, v = len(b), bytearray()
while True:
    v.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
    n >>= 7
    if not n:
        break
sys.stdout.buffer.write(b"\x0a" + bytes(v) + b)' >"$c/ad_verify_fuzz/$2"
}
echo 'origin: "site-b" seq: 4 incarnation: 1700000000000 issued_at_unix_ms: 1700000000000 ttl_ms: 10000 interval_ms: 2000 endpoint: "10.0.0.2:7443" nodes { name: "b-n1" address: "10.0.0.2" gpu_model: "A100-80GB" free_gpus: 8 total_gpus: 8 }' |
  signed_ad plain
echo 'origin: "site-b" seq: 5 issued_at_unix_ms: 1700000000000 ttl_ms: 10000 links { from: "site-b" to: "site-a" gbps: 9.5 measured_at_unix_ms: 1700000000000 } tenants { tenant: "vision" gpus: 8 }' |
  signed_ad links
echo 'origin: "site-c" seq: 1 issued_at_unix_ms: 1700000000000 ttl_ms: 10000' | signed_ad other_origin
echo 'origin: "site-b" seq: 6 issued_at_unix_ms: 1700000000000 ttl_ms: 10000 withdrawn: true' |
  signed_ad withdrawn
# Takeover grants: a SignedGrant whose `grant` is the Grant given; the target
# signs it as site-b (a grant naming another granter must be refused).
echo 'job_id: "j-00000000000000b7" term: 2 candidate: "site-c" granter: "site-b"' |
  field1 Grant grant_site_b
echo 'job_id: "j-00000000000000b7" term: 3 candidate: "site-b" granter: "site-x"' |
  field1 Grant grant_other_granter
echo "wrote $(find "$c" -type f | wc -l) seeds under $c"

# Checkpoint copies: a selector byte (even: site-b, of the job's world; odd:
# site-c), then framed CheckpointChunk messages (see checkpoint_fuzz.cc).
J='job_id: "j-00000000000000cc"'
sha=$(printf 'weights' | sha256sum | cut -d' ' -f1)
{
  printf '\x00'
  echo "site: \"site-b\" $J step: 8" | enc CheckpointChunk | frame
  echo 'path: "" offset: 0 data: "weights"' | enc CheckpointChunk | frame
  echo "last: true manifest { path: \"\" size_bytes: 7 sha256: \"$sha\" }" | enc CheckpointChunk | frame
} >"$c/checkpoint_fuzz/file"
{
  printf '\x00'
  echo "site: \"site-b\" $J step: 9" | enc CheckpointChunk | frame
  echo 'path: "w/a.bin" offset: 0 data: "weights"' | enc CheckpointChunk | frame
  echo "last: true manifest { path: \"w/a.bin\" size_bytes: 7 sha256: \"$sha\" }" | enc CheckpointChunk | frame
} >"$c/checkpoint_fuzz/folder"
{
  printf '\x00'
  echo "site: \"site-b\" $J step: 10" | enc CheckpointChunk | frame
  echo 'path: "../escape" offset: 0 data: "x"' | enc CheckpointChunk | frame
} >"$c/checkpoint_fuzz/escape"
{
  printf '\x01'
  echo "site: \"site-c\" $J step: 8" | enc CheckpointChunk | frame
} >"$c/checkpoint_fuzz/outsider"
