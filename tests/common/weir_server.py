"""The real `weir serve` for Python integration tests: started on a free loopback port with
the built plugins, a 64 MiB KV cache and one device thread, waited for until /health answers,
and driven over HTTP. Streams come back as the raw SSE bytes unless the caller passes a
`join` function (e.g. one folding the chunks into the non-streaming shape)."""
import http.client
import json
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, weir, plugins, model, log, extra=(), join=None):
        self.join = join
        self.port = free_port()
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [weir, "serve", "--set", "server.host=127.0.0.1", "--port", str(self.port),
             "--model", model, "--set", 'plugins.dirs=["%s"]' % plugins,
             "--set", "device.threads=1", "--set", "cache.memory_bytes=67108864"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                st, _ = self.get("/health")
                if st == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("server did not become ready; see " + log)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if body.get("stream") and r.status == 200:
            return r.status, self.join(data) if self.join else data
        return r.status, json.loads(data)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        return self.proc.returncode


# Checks that record a failure and go on, so that one run reports every broken case.
FAILURES = []


def expect(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL " + msg[:800], flush=True)


def finish(ok_line="ok"):
    """Exits 1 after reporting the failures, or prints ok_line."""
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        raise SystemExit(1)
    print(ok_line)


def run_suite(log_name, checks, join=None):
    """The suites' main: argv is WEIR_BINARY PLUGIN_DIR MODEL WORK_DIR; starts the server
    (its log WORK_DIR/log_name), runs each check(server), stops it, reports."""
    import os
    import sys
    weir, plugins, model, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    s = Server(weir, plugins, model, os.path.join(work, log_name), join=join)
    try:
        for check in checks:
            check(s)
    finally:
        s.stop()
    finish("ok")
