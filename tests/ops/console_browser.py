#!/usr/bin/python3
"""Drives `fedctl console` in headless Chromium (tests/ops/console_browser.sh
starts the federation, the job and the consoles). Checks that the page shows
what `fedctl -o json` says, that a cancel from the page ends the job, that the
browser logs no error, and the console's guards: 401, 403, 405, CSP, no inline
script, one tenant never sees another's jobs."""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ap = argparse.ArgumentParser()
for a in ("job", "pending", "shots", "alice", "alice-tls", "admin", "bob", "nochart", "web", "silent-pid", "ad-ttl"):
    ap.add_argument("--" + a, required=True)
args = ap.parse_args()
FEDCTL = os.environ["FEDCTL"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def fedctl(*argv):
    out = subprocess.run([FEDCTL, "--tls-dir", args.alice_tls, "-o", "json", *argv],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)


def eventually(fn, timeout=20.0):
    """fn() -> (ok, detail); retried until ok or the timeout; the last result."""
    deadline = time.time() + timeout
    while True:
        try:
            ok, detail = fn()
        except WebDriverException as e:  # the page redrew under us
            ok, detail = False, str(e).splitlines()[0]
        if ok or time.time() > deadline:
            return ok, detail
        time.sleep(0.3)


# --- the guards, over plain HTTP ---------------------------------------------

def split(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port, urllib.parse.parse_qs(u.query)["token"][0]


def request(url, path, method="GET", host=None, cookie=None, origin=None):
    h, p, _ = split(url)
    c = http.client.HTTPConnection(h, p, timeout=15)
    headers = {"Host": host or f"{h}:{p}"}
    if cookie:
        headers["Cookie"] = f"fedgate_console={cookie}"
    if origin:
        headers["Origin"] = origin
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    return r.status, dict(r.getheaders()), body


_, _, alice_token = split(args.alice)
_, _, bob_token = split(args.bob)
h, p, _ = split(args.alice)
responses = [
    ("no token", request(args.alice, "/"), 401),
    ("no token on the API", request(args.alice, "/v1/jobs"), 401),
    ("wrong token", request(args.alice, "/?token=" + "0" * 64), 401),
    ("another console's token", request(args.alice, "/v1/jobs", cookie=bob_token), 401),
    ("foreign Host with the right token", request(args.alice, "/?token=" + alice_token, host="evil.example"), 403),
    ("foreign Host with the cookie", request(args.alice, "/v1/jobs", host=f"rebound.example:{p}", cookie=alice_token), 403),
    ("a submit", request(args.alice, "/v1/jobs", "POST", cookie=alice_token), 405),
    ("a DELETE", request(args.alice, "/v1/jobs/" + args.job, "DELETE", cookie=alice_token), 405),
    ("a cancel from another origin", request(args.alice, f"/v1/jobs/{args.job}:cancel", "POST", cookie=alice_token,
                                            origin="http://evil.example"), 403),
    ("the page", request(args.alice, "/", cookie=alice_token), 200),
    ("the token URL", request(args.alice, "/?token=" + alice_token), 303),
    ("the API", request(args.alice, "/v1/sites", cookie=alice_token), 200),
]
for what, (status, headers, _), want in responses:
    check(status == want, f"guard: {what} -> {status} (want {want})")
    csp = headers.get("Content-Security-Policy", "")
    check("script-src 'self'" in csp and "unsafe-inline" not in csp, f"guard: {what} carries a strict CSP")
status, headers, _ = request(args.alice, "/?token=" + alice_token)
cookie = headers.get("Set-Cookie", "")
check("HttpOnly" in cookie and "SameSite=Strict" in cookie, f"token sets an HttpOnly, SameSite=Strict cookie: {cookie[:40]}…")

for name in sorted(os.listdir(args.web)):
    text = open(os.path.join(args.web, name), encoding="utf-8").read()
    if name.endswith(".html"):
        scripts = re.findall(r"<script\b[^>]*>", text, re.I)
        check(all("src=" in s for s in scripts) and not re.search(r"<script\b[^>]*>(?!\s*</script>)", text, re.I),
              f"{name}: no inline script")
        check(not re.search(r"\son[a-z]+\s*=", text, re.I) and "javascript:" not in text,
              f"{name}: no inline event handler or javascript: URL")
        check(not re.search(r"\sstyle\s*=", text, re.I), f"{name}: no inline style")
    if name.endswith(".js"):
        check("innerHTML" not in text and "eval(" not in text, f"{name}: no innerHTML or eval")

_, _, bob_jobs = request(args.bob, "/v1/jobs", cookie=bob_token)
check(args.job not in bob_jobs, "another tenant's console lists none of alice's jobs")
status, _, _ = request(args.bob, f"/v1/jobs/{args.job}", cookie=bob_token)
check(status == 404, f"another tenant's console cannot read alice's job ({status})")
status, _, _ = request(args.bob, "/v1/nodes", cookie=bob_token)
check(status == 403, f"a tenant's console gets 403 for this site's nodes ({status})")

# --- the page, in Chromium -----------------------------------------------------

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1280,1000", "--force-prefers-reduced-motion"):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
driver.set_page_load_timeout(30)
browser_errors = []


def collect_log():
    for e in driver.get_log("browser"):
        if e["level"] in ("SEVERE", "ERROR"):
            browser_errors.append(e["message"])


def text_of(css):
    els = driver.find_elements(By.CSS_SELECTOR, css)
    return els[0].text.strip() if els else None


def shot(name):
    """The whole page: the window grows to the page's height for the shot."""
    height = min(3000, max(1000, driver.execute_script("return document.documentElement.scrollHeight")))
    driver.set_window_size(1280, height)
    time.sleep(0.7)  # charts redraw for the new size on the next frames
    driver.save_screenshot(os.path.join(args.shots, f"{name}.png"))
    driver.set_window_size(1280, 1000)


def go(url_or_fragment, view):
    if url_or_fragment.startswith("http"):
        driver.get(url_or_fragment)
    else:
        driver.execute_script("location.hash = arguments[0]", url_or_fragment)
    ok, _ = eventually(lambda: (driver.execute_script("return document.body.dataset.view") == view
                                and not driver.find_element(By.ID, "error").is_displayed(), None))
    check(ok, f"view {view} rendered without an error ({text_of('#error')})")


try:
    go(args.alice, "sites")
    check("token=" not in driver.current_url, "the token left the address bar after login")

    def sites_match():
        cap = fedctl("capacity")["sites"]
        bad = [s["site"] for s in cap
               if text_of(f'#sites-table tr[data-site="{s["site"]}"] td[data-field="free_gpus"]') != str(s["free_gpus"])
               or text_of(f'#sites-table tr[data-site="{s["site"]}"] td[data-field="total_gpus"]') != str(s["total_gpus"])]
        return not bad and len(cap) == 3, f"differ: {bad}"
    ok, detail = eventually(sites_match)
    check(ok, f"sites: free and total GPUs per site equal fedctl capacity ({detail})")
    check(len(driver.find_elements(By.CSS_SELECTOR, ".cards .card")) == 3, "sites: a card per site")
    check(len(driver.find_elements(By.CSS_SELECTOR, "main canvas")) >= 1, "sites: a Chart.js chart beside the table")
    shot("sites")

    # A site that stops advertising (its gateway SIGSTOPped) turns grey.
    t0 = time.time()
    os.kill(int(args.silent_pid), signal.SIGSTOP)
    try:
        ok, _ = eventually(lambda: (bool(driver.find_elements(
            By.CSS_SELECTOR, '.card.down[data-site="cn-shenzhen"], .card.gone[data-site="cn-shenzhen"]')), None), 20)
        grey_after = time.time() - t0
    finally:
        os.kill(int(args.silent_pid), signal.SIGCONT)
    ttl = float(args.ad_ttl)
    print(f"info the silent site's card turned grey {grey_after:.1f} s after it stopped (ad TTL {ttl:.0f} s)")
    # The TTL plus slack for a loaded two-core CI machine (the note gives the measured time).
    check(ok and grey_after <= ttl + 3, f"sites: a silent site turns grey ({grey_after:.1f} s)")
    ok, _ = eventually(lambda: (bool(driver.find_elements(By.CSS_SELECTOR, '.card.up[data-site="cn-shenzhen"]')), None), 20)
    check(ok, "sites: it turns back when it advertises again")

    go("#/links", "links")

    def links_match():
        links = fedctl("links")["links"]
        bad = [f'{l["from"]}->{l["to"]}' for l in links
               if text_of(f'#links-table tr[data-from="{l["from"]}"][data-to="{l["to"]}"] td[data-field="gbps"]')
               != f'{l["gbps"]:.3f}']
        cells = len(driver.find_elements(By.CSS_SELECTOR, "#links-matrix td.cell:not(.unmeasured)"))
        return not bad and len(links) >= 4 and cells == len(links), f"differ: {bad}, {cells} cells for {len(links)} links"
    ok, detail = eventually(links_match)
    check(ok, f"links: the measured Gbit/s equal fedctl links ({detail})")
    shot("links")

    go("#/jobs", "jobs")
    ok, _ = eventually(lambda: (text_of(f'#jobs-table tr[data-id="{args.job}"] td[data-field="state"]') == "RUNNING", None))
    check(ok, "jobs: the running job is listed as RUNNING")
    box = driver.find_element(By.ID, "job-filter")
    box.send_keys("no-such-job")
    check(text_of(f'#jobs-table tr[data-id="{args.job}"]') in ("", None), "jobs: the filter hides what does not match")
    box.clear()
    box.send_keys(args.job[:8])
    ok, _ = eventually(lambda: (driver.find_element(By.CSS_SELECTOR, f'#jobs-table tr[data-id="{args.job}"]').is_displayed(), None))
    check(ok, "jobs: the filter shows what matches")
    shot("jobs")

    go(f"#/jobs/{args.job}", "job")
    vc = fedctl("vc", "get", args.job)

    def world_matches():
        bad = [s["site"] for s in vc["sites"]
               if len(driver.find_elements(By.CSS_SELECTOR, f'#ranks-table tr[data-site="{s["site"]}"]')) != len(s["ranks"])]
        return not bad and len(vc["sites"]) == 2, f"differ: {bad}"
    ok, detail = eventually(world_matches)
    check(ok, f"job: ranks per site equal fedctl vc get ({detail}; {[(s['site'], len(s['ranks'])) for s in vc['sites']]})")
    check(text_of("#job-state") == fedctl("jobs", "get", args.job)["job"]["state"], "job: the state equals fedctl jobs get")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#world-bars .bar")) == 2, "job: a bar per site")
    shot("job")

    go("#/queue", "queue")
    check(driver.find_element(By.ID, "quotas-table").is_displayed(), "queue: quotas shown")
    reason = text_of(f'#queue-table tr[data-id="{args.pending}"] td[data-field="reason"]') or ""
    check("waiting" in reason, f"queue: the waiting job is listed with why it waits: {reason!r}")
    check(not driver.find_elements(By.CSS_SELECTOR, f'#queue-table tr[data-id="{args.job}"]'),
          "queue: the running job is not in the queue")
    shot("queue")
    go("#/usage", "usage")
    shot("usage")

    # Cancel from the page: the button asks with confirm(), then the job ends.
    go(f"#/jobs/{args.job}", "job")
    driver.find_element(By.ID, "cancel-job").click()
    try:
        alert = driver.switch_to.alert
        check("Cancel job" in alert.text, f"cancel asks first: {alert.text!r}")
        alert.accept()
    except NoAlertPresentException:
        check(False, "cancel asks with confirm()")
    ok, _ = eventually(lambda: (fedctl("jobs", "get", args.job)["job"]["state"] == "CANCELLED", None), 30)
    check(ok, "the cancel from the page ended the job (fedctl jobs get: CANCELLED)")
    ok, _ = eventually(lambda: (text_of("#job-state") == "CANCELLED", None))
    check(ok, "the page shows CANCELLED")

    # Usage: the page's GPU-seconds equal fedctl usage's, by tenant and by site.
    go("#/usage", "usage")

    def usage_matches():
        rows = fedctl("usage", "--since", "24h", "--by", "site")["usage"]
        tenant = fedctl("usage", "--since", "24h")["usage"]
        driver.execute_script("location.hash = '#/usage'")
        bad = [r["site"] for r in rows
               if text_of(f'#usage-site tr[data-site="{r["site"]}"] td[data-field="gpu_seconds"]') != f'{r["gpu_seconds"]:.1f}']
        bad += [r["tenant"] for r in tenant
                if text_of(f'#usage-tenant tr[data-tenant="{r["tenant"]}"] td[data-field="gpu_seconds"]') != f'{r["gpu_seconds"]:.1f}']
        return not bad and len(rows) >= 1, f"differ: {bad}"
    ok, detail = eventually(usage_matches, 30)
    check(ok, f"usage: GPU-seconds by tenant and by site equal fedctl usage ({detail})")
    shot("usage")
    collect_log()

    # An admin's console shows this site's nodes; a tenant's has no such view.
    go(args.admin, "sites")
    check(driver.find_element(By.ID, "nav-nodes").is_displayed(), "admin: the Nodes view is offered")
    go("#/nodes", "nodes")
    check(text_of('#nodes-table tr[data-node="bj-1"] td[data-field="gpus"]') == "8", "admin: node bj-1 with its 8 GPUs")
    shot("nodes")
    collect_log()

    go(args.bob, "sites")
    check(not driver.find_element(By.ID, "nav-nodes").is_displayed(), "tenant: no Nodes view offered")
    go("#/jobs", "jobs")
    check(not driver.find_elements(By.CSS_SELECTOR, f'#jobs-table tr[data-id="{args.job}"]'),
          "another tenant's page shows none of alice's jobs")
    collect_log()

    # Without Chart.js: every number still in tables, and the page says why.
    go(args.nochart, "sites")
    note = text_of("#notice") or ""
    check("libjs-chart.js" in note, f"without Chart.js the page says what is missing: {note!r}")
    check(not driver.find_elements(By.CSS_SELECTOR, "main canvas") and
          driver.find_element(By.ID, "sites-table").is_displayed(), "without Chart.js: tables, no canvas")
    collect_log()
finally:
    try:
        collect_log()
    finally:
        driver.quit()

check(not browser_errors, f"the browser's console logged no error: {browser_errors[:3]}")
print(f"{len(failures)} failure(s); screenshots in {args.shots}")
sys.exit(1 if failures else 0)
