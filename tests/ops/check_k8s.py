#!/usr/bin/python3
"""Checks deploy/k8s: every overlay renders (with `kubectl kustomize` where
kubectl is on the machine, else with a small built-in renderer of the
features these kustomizations use), every object has the fields its kind
requires, image, ports, paths and identity agree with the fedgate.yaml the
StatefulSet mounts, the NetworkPolicies deny by default and let in only what
they should, RBAC is least-privilege, and the PrometheusRule equals the
promtool-tested rule file. Exits 1 naming every problem found."""
import copy
import os
import shutil
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
K8S = os.path.join(REPO, "deploy/k8s")
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)
    return cond


def render_builtin(path):
    """resources (files and folders), namespace, labels, images,
    configMapGenerator, and JSON-patch `replace` ops."""
    k = yaml.safe_load(open(os.path.join(path, "kustomization.yaml")))
    docs = []
    for r in k.get("resources", []):
        p = os.path.join(path, r)
        if os.path.isdir(p):
            docs += render_builtin(p)
        else:
            docs += [d for d in yaml.safe_load_all(open(p)) if d]
    for g in k.get("configMapGenerator", []):
        data = {os.path.basename(f): open(os.path.join(path, f)).read() for f in g.get("files", [])}
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]}, "data": data}
        if "namespace" in g:
            cm["metadata"]["namespace"] = g["namespace"]
        docs.append(cm)
    for d in docs:
        if "namespace" in k and d["kind"] not in CLUSTER_SCOPED:
            d["metadata"]["namespace"] = k["namespace"]
        for l in k.get("labels", []):
            d["metadata"].setdefault("labels", {}).update(l["pairs"])
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for img in k.get("images", []):
                if c["image"] == img["name"]:
                    c["image"] = f'{img.get("newName", img["name"])}:{img["newTag"]}'
    for p in k.get("patches", []):
        t = p["target"]
        for d in docs:
            if d["kind"] != t["kind"] or d["metadata"]["name"] != t["name"]:
                continue
            for op in yaml.safe_load(p["patch"]):
                assert op["op"] == "replace", op
                keys = op["path"].strip("/").split("/")
                node = d
                for key in keys[:-1]:
                    node = node[int(key)] if isinstance(node, list) else node[key]
                last = keys[-1]
                node[int(last) if isinstance(node, list) else last] = op["value"]
    return docs


def render(path):
    kubectl = None if os.environ.get("FEDGATE_K8S_BUILTIN") == "1" else shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
        if not check(out.returncode == 0, f"{path}: kubectl kustomize failed: {out.stderr.strip()}"):
            return [], "kubectl"
        return [d for d in yaml.safe_load_all(out.stdout) if d], "kubectl kustomize"
    why = "forced" if os.environ.get("FEDGATE_K8S_BUILTIN") == "1" else "kubectl not on this machine"
    return render_builtin(path), f"the built-in renderer ({why})"


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}

REQUIRED = {
    "Namespace": [], "ServiceAccount": [], "ConfigMap": ["data"],
    "Role": ["rules"], "RoleBinding": ["roleRef", "subjects"],
    "ClusterRole": ["rules"], "ClusterRoleBinding": ["roleRef", "subjects"],
    "StatefulSet": ["spec.selector", "spec.serviceName", "spec.template.spec.containers",
                    "spec.volumeClaimTemplates"],
    "Service": ["spec.selector", "spec.ports"],
    "NetworkPolicy": ["spec.podSelector", "spec.policyTypes"],
    "Certificate": ["spec.secretName", "spec.issuerRef", "spec.uris"],
    "ServiceMonitor": ["spec.selector", "spec.endpoints"],
    "PrometheusRule": ["spec.groups"], "ResourceQuota": ["spec.hard"],
}


def get(d, dotted):
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def check_overlay(name, docs):
    where = f"overlays/{name}"
    by_kind = {}
    for d in docs:
        ok = all(check(d.get(f), f"{where}: an object lacks {f}") for f in ("apiVersion", "kind"))
        if not ok or not check(get(d, "metadata.name"), f"{where}: a {d.get('kind')} has no name"):
            continue
        by_kind.setdefault(d["kind"], []).append(d)
        for f in REQUIRED.get(d["kind"], ["__unknown_kind__"]):
            check(get(d, f) is not None, f"{where}: {d['kind']} {d['metadata']['name']} lacks {f}")
    one = lambda kind: (by_kind.get(kind) or [None])[0]
    sts, svc, cm = one("StatefulSet"), one("Service"), one("ConfigMap")
    if not (check(sts, f"{where}: no StatefulSet") and check(svc, f"{where}: no Service")
            and check(cm, f"{where}: no ConfigMap")):
        return
    pod = sts["spec"]["template"]
    check(all(pod["metadata"]["labels"].get(k) == v for k, v in sts["spec"]["selector"]["matchLabels"].items()),
          f"{where}: the StatefulSet's selector does not match its pod labels")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(c["image"].startswith("registry.example/fedgate:"), f"{where}: image is {c['image']}")
    res = c.get("resources", {})
    check(res.get("requests") and res.get("requests") == res.get("limits"),
          f"{where}: resource requests must equal limits (Guaranteed QoS)")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        port = get(c, f"{probe}.httpGet.port")
        check(port == "ops", f"{where}: {probe} must use the ops port, uses {port}")
    check(get(c, "readinessProbe.httpGet.path") == "/readyz", f"{where}: readiness must ask /readyz")
    check(get(c, "livenessProbe.httpGet.path") == "/healthz", f"{where}: liveness must ask /healthz")
    sc = c.get("securityContext", {})
    check(sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"],
          f"{where}: the container must drop all capabilities and privilege escalation")
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    # The mounted config: the generated ConfigMap (kustomize renames it).
    check(get(vols.get("config", {}), "configMap.name") == cm["metadata"]["name"],
          f"{where}: the config volume names {get(vols.get('config', {}), 'configMap.name')}, "
          f"the ConfigMap is {cm['metadata']['name']}")
    args = c.get("args", [])
    cfg_path = args[args.index("--config") + 1] if "--config" in args else ""
    check(cfg_path == os.path.join(mounts.get("config", "?"), "fedgate.yaml"),
          f"{where}: --config {cfg_path} is not the mounted fedgate.yaml")
    cfg = yaml.safe_load(cm["data"]["fedgate.yaml"])
    for kind in ("grpc", "http", "ops"):
        listen = str(cfg["listen"].get(kind, ""))
        check(listen.startswith("0.0.0.0:"), f"{where}: listen.{kind} must bind all addresses in a pod")
        check(listen.rsplit(":", 1)[-1] == str(ports.get(kind)),
              f"{where}: listen.{kind} is {listen}, containerPort {kind} is {ports.get(kind)}")
    for key in ("ca", "cert", "key"):
        check(cfg["tls"][key].startswith(mounts.get("tls", "?") + "/"),
              f"{where}: tls.{key} {cfg['tls'][key]} is not in the mounted secret")
    check(cfg.get("data_dir") == mounts.get("data"), f"{where}: data_dir is not the PVC mount")
    check(any(t["metadata"]["name"] == "data" for t in sts["spec"]["volumeClaimTemplates"]),
          f"{where}: no PVC named data")
    # Service and ServiceMonitor.
    check(all(pod["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items()),
          f"{where}: the Service does not select the gateway pod")
    for p in svc["spec"]["ports"]:
        check(p["targetPort"] in ports, f"{where}: Service port {p['name']} targets unknown {p['targetPort']}")
    sm = one("ServiceMonitor")
    if check(sm, f"{where}: no ServiceMonitor"):
        check(all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()),
              f"{where}: the ServiceMonitor does not select the Service")
        check([e["port"] for e in sm["spec"]["endpoints"]] == ["ops"], f"{where}: ServiceMonitor must scrape ops")
    # Identity: the certificate's SPIFFE URI is this site's gateway.
    cert = one("Certificate")
    if check(cert, f"{where}: no Certificate"):
        want = f"spiffe://{cfg['federation']}/site/{cfg['site']}/gateway"
        check(cert["spec"]["uris"] == [want], f"{where}: Certificate URIs {cert['spec']['uris']}, want [{want}]")
        check(get(vols.get("tls", {}), "secret.secretName") == cert["spec"]["secretName"],
              f"{where}: the tls volume is not the Certificate's secret")
    # NetworkPolicies: default deny, then exactly the allowed ports.
    nps = {n["metadata"]["name"]: n for n in by_kind.get("NetworkPolicy", [])}
    deny = [n for n in nps.values() if n["spec"]["podSelector"] == {} and "Ingress" in n["spec"]["policyTypes"]
            and not n["spec"].get("ingress")]
    check(deny, f"{where}: no default-deny NetworkPolicy (empty podSelector, no ingress rules)")
    allowed = {"allow-peer-gateways": {"grpc"}, "allow-tenants": {"grpc", "http"}, "allow-monitoring": {"ops"}}
    for np_name, want in allowed.items():
        np = nps.get(np_name)
        if not check(np, f"{where}: no NetworkPolicy {np_name}"):
            continue
        got = {p["port"] for rule in np["spec"].get("ingress", []) for p in rule.get("ports", [])}
        check(got == want, f"{where}: {np_name} opens {sorted(got)}, want {sorted(want)}")
        check(all(rule.get("from") for rule in np["spec"].get("ingress", [])),
              f"{where}: {np_name} has a rule without 'from' (open to everyone)")
    # RBAC: in the gateway's namespace read-only, named objects only; a
    # Kubernetes site adds, in its ranks' namespace, its holds' pods and
    # ConfigMaps, and cluster-wide read-only nodes and pods. No Secrets but
    # the named certificate, no wildcards anywhere.
    kube = cfg.get("inventory", {}).get("source") == "kubernetes"
    ranks_ns = cfg.get("kubernetes", {}).get("namespace", "fedgate-jobs") if kube else None
    for role in by_kind.get("Role", []):
        name, ns = role["metadata"]["name"], role["metadata"].get("namespace")
        for rule in role["rules"]:
            check("*" not in rule["resources"] and "*" not in rule["verbs"], f"{where}: Role {name} has a wildcard")
            if ns == ranks_ns:
                check(set(rule["resources"]) <= {"pods", "pods/log", "configmaps"},
                      f"{where}: Role {name} reaches {rule['resources']} (pods, pods/log, configmaps only)")
                check(set(rule["verbs"]) <= {"get", "list", "watch", "create", "patch", "delete"},
                      f"{where}: Role {name} may {rule['verbs']}")
            else:
                check(set(rule["verbs"]) <= {"get", "list", "watch"}, f"{where}: Role {name} may write")
                check(rule.get("resourceNames"), f"{where}: Role rules must name their objects")
    cluster_roles = by_kind.get("ClusterRole", [])
    check(bool(cluster_roles) == kube, f"{where}: a ClusterRole only for a Kubernetes site")
    for role in cluster_roles:
        for rule in role["rules"]:
            check(set(rule["resources"]) <= {"nodes", "pods"} and set(rule["verbs"]) <= {"get", "list", "watch"},
                  f"{where}: ClusterRole {role['metadata']['name']} grants {rule['verbs']} on {rule['resources']}")
    if kube:
        check(any(r["metadata"].get("namespace") == ranks_ns for r in by_kind.get("Role", [])),
              f"{where}: no Role in the ranks' namespace {ranks_ns}")
        ns_obj = [n for n in by_kind.get("Namespace", []) if n["metadata"]["name"] == ranks_ns]
        check(ns_obj and ns_obj[0]["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
              == "restricted", f"{where}: namespace {ranks_ns} must enforce the restricted Pod Security level")
        check(not cfg.get("kubernetes", {}).get("host_network"),
              f"{where}: host_network cannot pass the restricted level")
    sa = one("ServiceAccount")
    check(sa and sa.get("automountServiceAccountToken") is False, f"{where}: the account mounts no token by default")
    check(pod["spec"].get("automountServiceAccountToken") is kube,
          f"{where}: the gateway pod mounts an API token only on a Kubernetes site (in-cluster access)")
    # Alerts: the same rules promtool tests.
    pr = one("PrometheusRule")
    rules = yaml.safe_load(open(os.path.join(REPO, "deploy/prometheus/fedgate.rules.yml")))
    check(pr and pr["spec"]["groups"] == rules["groups"],
          f"{where}: PrometheusRule differs from deploy/prometheus/fedgate.rules.yml "
          "(run deploy/k8s/sync_rules.py)")
    quotas = by_kind.get("ResourceQuota", [])
    check(any("requests.nvidia.com/gpu" in q["spec"]["hard"] for q in quotas),
          f"{where}: no ResourceQuota on requests.nvidia.com/gpu")


def main():
    overlays = sorted(os.listdir(os.path.join(K8S, "overlays")))
    check(len(overlays) >= 2, "fewer than two example overlays")
    sites = set()
    for name in overlays:
        docs, how = render(os.path.join(K8S, "overlays", name))
        before = len(problems)
        check_overlay(name, copy.deepcopy(docs))
        cm = [d for d in docs if d.get("kind") == "ConfigMap"]
        if cm:
            sites.add(yaml.safe_load(cm[0]["data"]["fedgate.yaml"])["site"])
        print(f"overlays/{name}: {len(docs)} objects rendered with {how}: "
              f"{'ok' if len(problems) == before else 'PROBLEMS'}")
    check(len(sites) == len(overlays), f"overlays do not configure distinct sites: {sorted(sites)}")
    for p in problems:
        print("problem:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
