"""Locust users of an inference service through a fedgate gateway.

Each user POSTs /v1/services/$SERVICE/predict with the tenant's client
certificate (FEDGATE_TLS_DIR: ca.pem, cert.pem, key.pem) on a keep-alive
connection, waiting USER_WAIT seconds between requests ("0.3,0.7" unless
set: about 2 requests a second per user; less saturates the replicas). Run
by bench/serve_load.sh.
"""
import os

from locust import HttpUser, between, task

TLS = os.environ.get("FEDGATE_TLS_DIR", "")
SERVICE = os.environ.get("SERVICE", "chat")
WAIT = [float(x) for x in os.environ.get("USER_WAIT", "0.3,0.7").split(",")]


class Client(HttpUser):
    wait_time = between(WAIT[0], WAIT[-1])

    def on_start(self):
        self.client.cert = (os.path.join(TLS, "cert.pem"), os.path.join(TLS, "key.pem"))
        self.client.verify = os.path.join(TLS, "ca.pem")

    @task
    def predict(self):
        with self.client.post(f"/v1/services/{SERVICE}/predict", data=b'{"prompt": "hello"}',
                              name="predict", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
