#!/usr/bin/env python3
"""Measures /health latency and a light stream's inter-token latency (ITL) with hostile load
running (issue 28, docs/reliability.md). Loopback only; every client is bounded in count and
time.

    scripts/hostile-load.py [--weir build/bin/weir] [--model models/default.gguf]
                            [--seconds 20] [--scenarios idle,bodies,grammars,sockets,nonreaders]
                            [--rounds 2] [--json FILE]

Starts its own `weir serve` (server.max_connections 1,400 for the idle sockets; 256 KiB of
unsent output per connection before its streams are paused, so that the non-readers pause
within their 480 tokens), then for
each scenario in turn, alternating with an unloaded baseline run (A B A B ...) so that the
ratios stay fair on a shared machine:

  idle        no hostile load: the baseline
  bodies      8 clients (127.0.0.10-17) posting 0.9 MB chat bodies, back to back
  grammars    6 clients (127.0.0.30-35) compiling ~0.9 MB constraints (60,000-way guided_choice,
              a different one each time, so the cache never answers)
  sockets     1,100 idle sockets (127.0.0.50), opened at once and held
  nonreaders  16 streams (127.0.0.70) that never read their output

The hostile clients run in a child process at nice 19 (they stand for remote machines and
must not take the server's CPU on this one); meanwhile a prober (127.0.0.2) asks GET /health on a fresh connection every 20 ms, and a light
client (127.0.0.3) streams 48-token completions one after another; each token's arrival time
is recorded. Prints a Markdown table: /health p50/p99/max, ITL p50/p99, ITL p99 against
the baseline's, and the server's own view: the p99 and max of weir_event_loop_lag_seconds
over the run (bucket upper bounds, from /metrics before and after), and the time per second
the loop thread spent waiting for a CPU (/proc schedstat). Per run it also prints each
thread group's CPU and run-queue wait per second (loop, weir-engine, weir-cpu, the pools).
Loop lag does not include the measuring clients' own scheduling, so it is the fairer figure
on a shared machine.

A/B against another build: run it again with --weir PATH (alternate the two).
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def conn(port, host_ip, timeout=60, rcvbuf=0):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.bind((host_ip, 0))
    s.connect(("127.0.0.1", port))
    return s


def post(port, host_ip, path, body, timeout=120):
    s = conn(port, host_ip, timeout)
    b = body if isinstance(body, bytes) else body.encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    return int(data[9:12]) if data.startswith(b"HTTP/1.1 ") else 0


def get(port, path, timeout=10):
    s = conn(port, "127.0.0.1", timeout)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    return data.partition(b"\r\n\r\n")[2].decode(errors="replace")


LAG = "weir_event_loop_lag_seconds"


def lag_buckets(port):
    """The loop-lag histogram's cumulative bucket counts {le: count} from /metrics."""
    out = {}
    for line in get(port, "/metrics").splitlines():
        if line.startswith(LAG + "_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def lag_pct(before, after, p):
    """The upper bound of the bucket holding the p-th percentile of the ticks between two
    scrapes (inf: past the last bound)."""
    les = sorted(after)
    d = [after[le] - before.get(le, 0) for le in les]
    if not d or d[-1] <= 0:
        return float("nan")
    for le, c in zip(les, d):
        if c >= p / 100.0 * d[-1]:
            return le
    return float("inf")


def thread_stats(pid):
    """Per thread group: (CPU seconds, seconds waiting for a CPU), from schedstat. The loop is
    the main thread; the others are told apart by name."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
            run, wait = [int(x) for x in open("/proc/%d/task/%s/schedstat" % (pid, tid))
                         .read().split()[:2]]
        except (OSError, ValueError):
            continue
        group = "loop" if int(tid) == pid else comm
        a, b = out.get(group, (0.0, 0.0))
        out[group] = (a + run / 1e9, b + wait / 1e9)
    return out


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


class Run:
    def __init__(self, port, seconds):
        self.port, self.end = port, time.time() + seconds
        self.health, self.itl, self.health_fail, self.statuses = [], [], 0, {}
        self.lock = threading.Lock()

    def live(self):
        return time.time() < self.end

    def count(self, st):
        with self.lock:
            self.statuses[st] = self.statuses.get(st, 0) + 1


def prober(run):
    while run.live():
        t0 = time.perf_counter()
        try:
            s = conn(run.port, "127.0.0.2", timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            d = s.recv(4096)
            s.close()
            if not d.startswith(b"HTTP/1.1 200"):
                run.health_fail += 1
            else:
                run.health.append((time.perf_counter() - t0) * 1000)
        except OSError:
            run.health_fail += 1
        time.sleep(0.02)


def light_stream(run):
    body = json.dumps({"prompt": "In the beginning", "max_tokens": 48, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    while run.live():
        s = conn(run.port, "127.0.0.3", timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        buf, last, first = b"", None, True
        while True:
            d = s.recv(65536)
            if not d:
                break
            now = time.perf_counter()
            buf += d
            n = buf.count(b"\ndata: {")
            if n:
                buf = buf[buf.rfind(b"\ndata: {") + 1:]
                # every event in this read arrived now; only the first counts a gap
                if last is not None and not first:
                    run.itl.append((now - last) * 1000)
                first = False
                last = now
            if b"data: [DONE]" in buf:
                break
        s.close()


# The hostile bodies are built once (a fresh prefix makes each one different): building
# megabytes of JSON per request would spend the client's CPU, which on one machine is the
# server's CPU too.
TEXT = ("lorem ipsum dolor sit amet " * 34000)[:900000]
BODY_TAIL = json.dumps(TEXT)[1:] + '}], "max_tokens": 2}'
CHOICES_TAIL = "".join(',"x%d"' % j for j in range(1, 60000)) + "]}"


def bodies(run, i):
    k = 0
    while run.live():
        body = '{"messages": [{"role": "user", "content": "%d %d ' % (i, k) + BODY_TAIL
        run.count(post(run.port, "127.0.0.%d" % (10 + i), "/v1/chat/completions", body))
        k += 1


def grammars(run, i):
    k = 0
    while run.live():
        # each choice set differs from the others by its first choice: a fresh compile
        body = '{"prompt": "a", "max_tokens": 1, "guided_choice": ["c%dk%d"' % (i, k) + CHOICES_TAIL
        run.count(post(run.port, "127.0.0.%d" % (30 + i), "/v1/completions", body))
        k += 1


def sockets(run, held):
    # 1,100 silent sockets, held: the server closes each after server.header_timeout_ms (its
    # defence), and each closed one is opened again at once, so 1,100 stay open.
    import select
    while len(held) < 1100:
        try:
            held.append(conn(run.port, "127.0.0.50", timeout=5))
        except OSError:
            run.count("connect-failed")
            break
    while run.live():
        # poll, not select: the descriptors pass FD_SETSIZE (1,024)
        pl = select.poll()
        by_fd = {s.fileno(): s for s in held}
        for fd in by_fd:
            pl.register(fd, select.POLLIN)
        for fd, _ in pl.poll(200):
            s = by_fd[fd]
            held.remove(s)
            s.close()
            try:
                held.append(conn(run.port, "127.0.0.50", timeout=5))
                run.count("reopened")
            except OSError:
                run.count("connect-failed")


def nonreaders(run, held):
    body = json.dumps({"prompt": "flood", "max_tokens": 480, "ignore_eos": True,
                       "logprobs": 20, "stream": True}).encode()
    while run.live():
        # (runs are shorter than the 30 s stall timeout: the 16 stay open throughout)
        while len(held) < 16 and run.live():
            s = conn(run.port, "127.0.0.70", timeout=5, rcvbuf=4096)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            held.append(s)
        time.sleep(0.2)


def hostile_proc(port, scenario, seconds):
    # A separate process at nice 19: the hostile clients stand for remote machines; here
    # they must not take the measuring threads' GIL or the server's CPU.
    os.nice(19)
    run = Run(port, seconds)
    held = []
    hostile = []
    if scenario == "bodies":
        hostile = [threading.Thread(target=bodies, args=(run, i)) for i in range(8)]
    elif scenario == "grammars":
        hostile = [threading.Thread(target=grammars, args=(run, i)) for i in range(6)]
    elif scenario == "sockets":
        hostile = [threading.Thread(target=sockets, args=(run, held))]
    elif scenario == "nonreaders":
        hostile = [threading.Thread(target=nonreaders, args=(run, held))]
    for t in hostile:
        t.start()
    for t in hostile:
        t.join()
    for s in held:
        s.close()
    print(json.dumps(run.statuses, default=str), flush=True)


def one_run(port, scenario, seconds, pid=0):
    run = Run(port, seconds)
    proc = None
    if scenario != "idle":
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hostile",
                                 scenario, "--port", str(port), "--seconds",
                                 str(seconds + 1.0)], stdout=subprocess.PIPE)
        time.sleep(1.0)  # the load is on before measuring
    run.end = time.time() + seconds
    lag0, th0, t0 = lag_buckets(port), thread_stats(pid), time.time()
    meas = [threading.Thread(target=prober, args=(run,)),
            threading.Thread(target=light_stream, args=(run,))]
    for t in meas:
        t.start()
    for t in meas:
        t.join()
    lag1, th1, dt = lag_buckets(port), thread_stats(pid), time.time() - t0
    run.lag = (lag0, lag1)
    # per second of the run: each thread group's CPU and time spent waiting for a CPU
    run.threads = {g: ((v[0] - th0.get(g, (0, 0))[0]) / dt, (v[1] - th0.get(g, (0, 0))[1]) / dt)
                   for g, v in th1.items()}
    if proc:
        out, _ = proc.communicate()
        try:
            run.statuses = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            run.statuses = {"?": 0}
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", default=os.path.join(HERE, "..", "build", "bin", "weir"))
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models", "default.gguf"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scenarios", default="bodies,grammars,sockets,nonreaders")
    ap.add_argument("--json")
    ap.add_argument("--hostile", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    if a.hostile:
        hostile_proc(a.port, a.hostile, a.seconds)
        return 0
    port = free_port()
    log = open(os.path.join("/tmp", "hostile-load-%d.log" % port), "w")
    srv = subprocess.Popen([a.weir, "serve", "--model", a.model, "--port", str(port), "--host",
                            "127.0.0.1", "--set", "server.max_connections=1400",
                            "--set", "server.max_pending_output_bytes=262144",
                            "--set", "log.requests=false"], stdout=log, stderr=log)
    try:
        for _ in range(300):
            try:
                if post(port, "127.0.0.1", "/tokenize", '{"prompt":"a"}', timeout=2) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        results = {}
        for sc in a.scenarios.split(","):
            for r in range(a.rounds):  # A B A B: a baseline right before each loaded run
                for name in ("idle", sc):
                    run = one_run(port, name if name == "idle" else sc, a.seconds, srv.pid)
                    key = ("idle-before-" + sc) if name == "idle" else sc
                    res = results.setdefault(key, {"health": [], "itl": [], "health_fail": 0,
                                                   "statuses": {}, "lag": [], "threads": []})
                    res["lag"].append(run.lag)
                    res["threads"].append(run.threads)
                    res["health"] += run.health
                    res["itl"] += run.itl
                    res["health_fail"] += run.health_fail
                    for k, v in run.statuses.items():
                        res["statuses"][str(k)] = res["statuses"].get(str(k), 0) + v
                    print("%-22s round %d: /health p99 %.1f ms, ITL p99 %.1f ms (%d tokens), "
                          "loop lag p99 <= %.1f ms; per s: %s" % (
                              key, r, pct(run.health, 99), pct(run.itl, 99), len(run.itl),
                              lag_pct(run.lag[0], run.lag[1], 99) * 1000,
                              ", ".join("%s cpu %.2f wait %.2f" % (g, v[0], v[1])
                                        for g, v in sorted(run.threads.items()) if v[0] > 0.005)),
                          file=sys.stderr, flush=True)
        print("| load | /health p50 | /health p99 | /health max | /health failed | ITL p50 | "
              "ITL p99 | ITL p99 / unloaded | loop lag p99 | loop lag max | loop waiting for a CPU | hostile answers |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        summary = {}
        for sc in a.scenarios.split(","):
            base, res = results["idle-before-" + sc], results[sc]
            for label, r in (("unloaded (before %s)" % sc, base), (sc, res)):
                ratio = pct(r["itl"], 99) / pct(base["itl"], 99)
                # the rounds' loop-lag histograms, summed
                b0 = {}
                b1 = {}
                for l0, l1 in r["lag"]:
                    for le in l1:
                        b0[le] = b0.get(le, 0) + l0.get(le, 0)
                        b1[le] = b1.get(le, 0) + l1[le]
                lag99, lagmax = lag_pct(b0, b1, 99), lag_pct(b0, b1, 100)
                wait = sum(t.get("loop", (0, 0))[1] for t in r["threads"]) / max(1, len(r["threads"]))
                print("| %s | %.1f ms | %.1f ms | %.1f ms | %d | %.1f ms | %.1f ms | %.2fx | "
                      "<= %g ms | <= %g ms | %.1f ms/s | %s |" % (
                    label, pct(r["health"], 50), pct(r["health"], 99), max(r["health"] or [0]),
                    r["health_fail"], pct(r["itl"], 50), pct(r["itl"], 99), ratio,
                    lag99 * 1000, lagmax * 1000, wait * 1000,
                    ", ".join("%s: %d" % kv for kv in sorted(r["statuses"].items())) or "-"))
                summary[label] = {"health_p50": pct(r["health"], 50),
                                  "health_p99": pct(r["health"], 99),
                                  "itl_p50": pct(r["itl"], 50), "itl_p99": pct(r["itl"], 99),
                                  "itl_p99_ratio": ratio, "loop_lag_p99_le": lag99,
                                  "loop_lag_max_le": lagmax, "threads": r["threads"],
                                  "statuses": r["statuses"]}
        if a.json:
            json.dump(summary, open(a.json, "w"), indent=1)
    finally:
        srv.terminate()
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
