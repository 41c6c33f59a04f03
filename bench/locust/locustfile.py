"""Locust load test of fedgate's REST API with client certificates.

A tenant user's realistic mix: mostly reads (get, list), some submits of
short jobs, cancels of its own queued jobs and log reads of jobs that ran.
Run by bench/load.sh; the gateway (host), CA and client certificate come
from the environment: FEDGATE_TLS_DIR holds ca.pem, cert.pem, key.pem.
"""
import itertools
import os
import random
import uuid

from locust import HttpUser, between, task

TLS = os.environ.get("FEDGATE_TLS_DIR", "")
_names = itertools.count()


class Tenant(HttpUser):
    wait_time = between(0.05, 0.3)

    def on_start(self):
        self.client.cert = (os.path.join(TLS, "cert.pem"), os.path.join(TLS, "key.pem"))
        self.client.verify = os.path.join(TLS, "ca.pem")
        self.jobs = []  # ids this user submitted
        self.ran = []   # ids seen past PENDING (they have logs)
        # A session starts by listing its jobs. This first request carries the
        # TLS handshake of the user's keep-alive connection, reported as its
        # own type so the handshake shows instead of hiding in another's p99.
        with self.client.get("/v1/jobs?page_size=20", name="connect+list", catch_response=True) as r:
            self._ok(r, "connect+list")

    def _ok(self, resp, what):
        if resp.status_code != 200:
            resp.failure(f"{what}: HTTP {resp.status_code}: {resp.text[:200]}")
            return None
        try:
            return resp.json()
        except ValueError:
            resp.failure(f"{what}: body is not JSON")
            return None

    @task(2)
    def submit(self):
        # One GPU, a command that ends at once: jobs flow through the queue
        # instead of piling up on the small local federation.
        body = {
            "spec": {"name": f"load-{next(_names)}", "gpus": 1, "command": ["true"],
                     "estimated_duration": "10s"},
            "idempotency_key": uuid.uuid4().hex,
        }
        with self.client.post("/v1/jobs", json=body, name="submit", catch_response=True) as r:
            doc = self._ok(r, "submit")
            if doc is not None:
                self.jobs.append(doc["job"]["id"])
                self.jobs = self.jobs[-50:]

    @task(6)
    def get(self):
        if not self.jobs:
            return
        job = random.choice(self.jobs)
        with self.client.get(f"/v1/jobs/{job}", name="get", catch_response=True) as r:
            doc = self._ok(r, "get")
            if doc is not None and doc["job"]["state"] in ("RUNNING", "SUCCEEDED", "FAILED"):
                if job not in self.ran:
                    self.ran = (self.ran + [job])[-50:]

    @task(3)
    def list(self):
        with self.client.get("/v1/jobs?page_size=20", name="list", catch_response=True) as r:
            self._ok(r, "list")

    @task(1)
    def cancel(self):
        if not self.jobs:
            return
        job = self.jobs.pop(random.randrange(len(self.jobs)))
        # A job that already ended answers 409 "already ended": the API's
        # contract, counted as a correct answer; anything else is a failure.
        with self.client.post(f"/v1/jobs/{job}:cancel", name="cancel", catch_response=True) as r:
            if r.status_code == 409 and "already ended" in r.text:
                r.success()
            else:
                self._ok(r, "cancel")

    @task(2)
    def logs(self):
        if not self.ran:
            return
        job = random.choice(self.ran)
        with self.client.get(f"/v1/jobs/{job}/logs?rank=0", name="logs", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"logs: HTTP {r.status_code}: {r.text[:200]}")
