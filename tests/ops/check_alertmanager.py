#!/usr/bin/python3
"""Checks deploy/prometheus/alertmanager.yml against the rules it routes:
every receiver a route or the root names exists, every alertname a matcher
or inhibit rule names is an alert of fedgate.rules.yml, and every severity
a matcher names is one the rules use. (amtool is not in the project's
packages; this catches the drift that matters.)"""
import os
import re
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
am = yaml.safe_load(open(os.path.join(REPO, "deploy/prometheus/alertmanager.yml")))
rules = yaml.safe_load(open(os.path.join(REPO, "deploy/prometheus/fedgate.rules.yml")))
alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
severities = {r.get("labels", {}).get("severity") for g in rules["groups"] for r in g["rules"]}
receivers = {r["name"] for r in am["receivers"]}
problems = []


def matchers_ok(ms, where):
    for m in ms:
        key, op, value = re.match(r'^\s*(\w+)\s*(=~|!~|!=|=)\s*"(.*)"\s*$', m).groups()
        if key == "alertname":
            names = value.split("|") if op == "=~" else [value]
            problems.extend(f"{where}: no alert {n} in fedgate.rules.yml" for n in names if n not in alerts)
        if key == "severity" and value not in severities:
            problems.append(f"{where}: no rule has severity {value}")


def walk(route, where):
    if "receiver" in route and route["receiver"] not in receivers:
        problems.append(f"{where}: unknown receiver {route['receiver']}")
    matchers_ok(route.get("matchers", []), where)
    for i, r in enumerate(route.get("routes", [])):
        walk(r, f"{where}.routes[{i}]")


if "receiver" not in am["route"]:
    problems.append("route: the root route needs a receiver")
walk(am["route"], "route")
for i, inh in enumerate(am.get("inhibit_rules", [])):
    matchers_ok(inh.get("source_matchers", []) + inh.get("target_matchers", []), f"inhibit_rules[{i}]")
for p in problems:
    print("problem:", p, file=sys.stderr)
print(f"alertmanager.yml: {len(receivers)} receivers, routes for {len(alerts)} alerts: "
      f"{'ok' if not problems else 'PROBLEMS'}")
sys.exit(1 if problems else 0)
