#!/usr/bin/env bash
# The objects a Kubernetes site creates (kube-objects-dump) and the
# kubernetes-site overlay of deploy/k8s, validated against the published
# Kubernetes schemas with the npm package kubernetes-models, installed here
# into the build folder (never needed to build or run the gateway).
# Usage: schemas.sh BUILD_DIR KUBE_OBJECTS_DUMP [MORE.json...]
# (MORE: objects read back from an API server by a test, validated too.)
set -euo pipefail
build=$1 dump=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix="$build/node"
# One install at a time: tests may call this side by side.
exec 9>"$build/.kubernetes-models.lock"
flock 9
if [ ! -d "$prefix/node_modules/kubernetes-models" ]; then
  echo "schemas: installing kubernetes-models into $prefix (npm registry)"
  npm install --no-audit --no-fund --silent --prefix "$prefix" kubernetes-models@5 >/dev/null
fi
flock -u 9
if [ $# -gt 0 ]; then
  exec node "$here/validate_objects.js" "$prefix/node_modules" "$@"
fi
out="$build/kube-objects"
rm -rf "$out" && mkdir -p "$out"
"$dump" "$out"
# The overlay, rendered (kubectl kustomize where present, else the checker's
# own renderer), one object per file.
python3 - "$repo" "$out" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/tests/ops")
import check_k8s
docs, how = check_k8s.render(sys.argv[1] + "/deploy/k8s/overlays/kubernetes-site")
for i, d in enumerate(docs):
    json.dump(d, open(f"{sys.argv[2]}/overlay-{i:02d}-{d['kind']}.json", "w"))
print(f"schemas: overlays/kubernetes-site: {len(docs)} objects rendered with {how}")
PY
node "$here/validate_objects.js" "$prefix/node_modules" "$out"/*.json
