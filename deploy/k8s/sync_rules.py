#!/usr/bin/python3
"""Writes base/prometheusrule.yaml from deploy/prometheus/fedgate.rules.yml,
so the PrometheusRule and the promtool-tested rule file never differ
(tests/ops/check_k8s.py fails when they do)."""
import os
import yaml

here = os.path.dirname(os.path.abspath(__file__))
rules = yaml.safe_load(open(os.path.join(here, "../prometheus/fedgate.rules.yml")))
doc = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": "fedgate", "labels": {"release": "prometheus"}},
    "spec": {"groups": rules["groups"]},
}
with open(os.path.join(here, "base/prometheusrule.yaml"), "w") as f:
    f.write("# Generated from deploy/prometheus/fedgate.rules.yml by deploy/k8s/sync_rules.py.\n")
    yaml.safe_dump(doc, f, sort_keys=False, width=100)
