#!/usr/bin/python3
"""How the console's page holds up with a large federation: 100 sites and
2 000 jobs (and the full 100 x 99 link matrix), in headless Chromium.

The page's own files are served with synthetic /v1 documents in the shapes
fedctl -o json prints (the guard and the gRPC backend are not what is
measured here; tests/ops/console_browser.sh covers them). Prints, per view,
the first render (navigation start -> the view in the DOM) and the job
list's filter time, each as a median of RUNS, against a reference run of the
same page with 3 sites and 20 jobs in the same script, and against the
issue's budgets (first render < 1 s, filtering < 100 ms).

  bench/console_bench.py [--sites 100] [--jobs 2000] [--runs 5] [--json FILE]
"""
import argparse
import http.server
import json
import os
import random
import statistics
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WEB = os.path.join(REPO, "gateway/cli/console/web")
CHART = "/usr/share/javascript/chart.js/chart.min.js"
STATES = ["PENDING", "RESERVING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]


def documents(n_sites, n_jobs, seed=7):
    rnd = random.Random(seed)
    sites = [f"site-{i:03d}" for i in range(n_sites)]
    now = int(time.time() * 1000)
    cap = {"sites": []}
    for i, s in enumerate(sites):
        total = rnd.choice([8, 16, 32, 64])
        free = rnd.randint(0, total)
        cap["sites"].append({"site": s, "state": "local" if i == 0 else rnd.choice(["up"] * 9 + ["down"]),
                             "age_seconds": rnd.random() * 10, "free_gpus": free, "total_gpus": total,
                             "models": [{"model": "A100-80GB", "free_gpus": free, "total_gpus": total,
                                         "preemptible_gpus": 0}],
                             "seq": "1", "unhealthy_gpus": rnd.randint(0, 1), "cordoned_nodes": 0})
    links = {"links": [{"from": a, "to": b, "gbps": rnd.uniform(0.5, 100), "latency_ms": rnd.uniform(0.1, 40),
                        "method": "tcp", "streams": 4, "age_seconds": rnd.uniform(0, 600)}
                       for a in sites for b in sites if a != b]}
    jobs = {"jobs": []}
    for k in range(n_jobs):
        used = rnd.sample(sites, min(len(sites), rnd.randint(1, 3)))
        jobs["jobs"].append({"id": f"j-{k:016x}", "name": f"train-{k}", "tenant": f"team-{k % 17}",
                             "state": rnd.choice(STATES), "attempt": 1, "reason": "running on sites",
                             "spec": {"name": f"train-{k}", "gpus": 8 * len(used), "priority": "guaranteed"},
                             "created_at_unix_ms": str(now - rnd.randint(0, 86400000)),
                             "updated_at_unix_ms": str(now),
                             "run": {"sites": [{"site": s, "ranks": []} for s in used]}})
    return {"/v1/sites": cap, "/v1/links": links, "/v1/jobs": jobs}


def serve(docs, chart):
    session = {"identity": "spiffe://bench/site/site-000/admin/ops", "role": "user", "tenant": "", "site": "",
               "name": "ops", "gateway": "bench", "chart": chart, "chart_missing": ""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            path = self.path.split("?")[0]
            files = {"/": "index.html", "/index.html": "index.html", "/console.js": "console.js",
                     "/console.css": "console.css"}
            if path in files:
                body = open(os.path.join(WEB, files[path]), "rb").read()
                ctype = {"js": "text/javascript", "css": "text/css", "html": "text/html"}[files[path].split(".")[-1]]
            elif path == "/vendor/chart.js":
                body, ctype = open(CHART, "rb").read(), "text/javascript"
            elif path == "/console/session":
                body, ctype = json.dumps(session).encode(), "application/json"
            elif path in docs:
                body, ctype = docs[path], "application/json"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def measure(driver, base, runs):
    out = {}
    for view in ("sites", "links", "jobs"):
        times = []
        for _ in range(runs):
            driver.get("about:blank")
            driver.get(f"{base}/#/{view}")
            t0 = time.time()
            while not driver.execute_script("return document.body.dataset.rendered"):
                if time.time() - t0 > 30:
                    raise SystemExit(f"{view}: no render in 30 s")
                time.sleep(0.01)
            times.append(float(driver.execute_script("return document.body.dataset.rendered")) / 1000.0)
        out[f"first_render_{view}_s"] = statistics.median(times)
    filt = []
    for q in ["team-3", "running", "site-04", "j-00000000000001", "zzz", ""] * runs:
        filt.append(driver.execute_script("""
            const box = document.getElementById('job-filter');
            box.value = arguments[0];
            const t0 = performance.now();
            box.dispatchEvent(new Event('input'));
            void document.body.offsetHeight;  // the layout the hidden rows cost, too
            return performance.now() - t0;""", q))
    out["filter_ms_median"] = statistics.median(filt)
    out["filter_ms_max"] = max(filt)
    out["rows_shown_last"] = driver.execute_script(
        "return [...document.querySelectorAll('#jobs-table tbody tr')].filter((r) => !r.hidden).length")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    chart = os.access(CHART, os.R_OK)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    results = {}
    try:
        for name, (ns, nj) in (("reference", (3, 20)), ("large", (a.sites, a.jobs))):
            docs = {k: json.dumps(v).encode() for k, v in documents(ns, nj).items()}
            srv = serve(docs, chart)
            results[name] = measure(driver, f"http://127.0.0.1:{srv.server_address[1]}", a.runs)
            results[name].update({"sites": ns, "jobs": nj, "links": ns * (ns - 1)})
            srv.shutdown()
    finally:
        driver.quit()
    ref, big = results["reference"], results["large"]
    print(f"# console page, headless Chromium, median of {a.runs}; Chart.js {'on' if chart else 'absent'}")
    print(f"# {'measure':<26}{'reference':>12}{'large':>12}{'large/ref':>11}{'budget':>10}{'large/budget':>14}")
    ok = True
    for key, budget in (("first_render_sites_s", 1.0), ("first_render_links_s", 1.0),
                        ("first_render_jobs_s", 1.0), ("filter_ms_median", 100.0), ("filter_ms_max", 100.0)):
        r, b = ref[key], big[key]
        ok = ok and b < budget
        print(f"  {key:<26}{r:>12.3f}{b:>12.3f}{b / r if r else float('inf'):>11.2f}{budget:>10.1f}{b / budget:>14.2f}")
    print(f"# reference: {ref['sites']} sites, {ref['jobs']} jobs; large: {big['sites']} sites, {big['jobs']} jobs, "
          f"{big['links']} links; {'within' if ok else 'OVER'} budget")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
