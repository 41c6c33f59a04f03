#!/usr/bin/env python3
"""A small inference server for fedgate services (docs/services.md).

Listens on FEDGATE_SERVICE_PORT (or --port) and answers
  GET  /healthz  -> 200 "ok" (503 while --not-ready-file exists)
  POST /predict  -> 200 JSON, after --compute-ms of work per request
  GET  /stream?bytes=N -> N bytes streamed in chunks (proxy tests)
  POST /echo     -> the request's method, path, headers and body back
Requests are served one at a time per --slots (default 1), like a GPU that
runs one batch at a time, so a replica saturates at slots * 1000 /
compute_ms requests per second.
"""
import argparse
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=int(os.environ.get("FEDGATE_SERVICE_PORT", "8000")))
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--compute-ms", type=float, default=float(os.environ.get("MODEL_COMPUTE_MS", "20")))
    ap.add_argument("--slots", type=int, default=int(os.environ.get("MODEL_SLOTS", "1")))
    ap.add_argument("--not-ready-file", default=os.environ.get("MODEL_NOT_READY_FILE", ""))
    args = ap.parse_args()
    gpu = threading.Semaphore(args.slots)
    name = f"{os.environ.get('FEDGATE_SITE', 'local')}/{os.environ.get('FEDGATE_JOB_ID', '-')}"
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per answer, sent at once: no Nagle / delayed-ACK stalls.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def reply(self, code, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return out, True
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length", "0"))
            return self.rfile.read(n), False

        def do_GET(self):
            if self.path == "/healthz":
                if args.not_ready_file and os.path.exists(args.not_ready_file):
                    return self.reply(503, "not ready", "text/plain")
                return self.reply(200, "ok", "text/plain")
            if self.path.startswith("/stream"):
                n = int(self.path.partition("bytes=")[2] or "0")
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"x" * (1 << 20)
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
                return
            return self.reply(404, json.dumps({"error": "no such path", "path": self.path}))

        def do_POST(self):
            data, chunked = self.body()
            if self.path == "/predict":
                with gpu:
                    time.sleep(args.compute_ms / 1000.0)
                served[0] += 1
                return self.reply(200, json.dumps({"replica": name, "served": served[0],
                                                   "input_bytes": len(data),
                                                   "devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}))
            if self.path.startswith("/echo"):
                return self.reply(200, json.dumps({
                    "replica": name, "method": self.command, "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body_bytes": len(data), "chunked": chunked}))
            return self.reply(404, json.dumps({"error": "no such path", "path": self.path}))

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET

    srv = Server((args.host, args.port), Handler)
    print(f"model server {name} on :{args.port}, {args.compute_ms} ms per request, "
          f"{args.slots} slot(s)", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
