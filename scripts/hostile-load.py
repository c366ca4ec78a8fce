#!/usr/bin/env python3
"""Measures /health latency and a light stream's inter-token latency (ITL) with hostile load
running (issue 28, docs/reliability.md). Loopback only; every client is bounded in count and
time.

    scripts/hostile-load.py [--weir build/bin/weir] [--model models/default.gguf]
                            [--seconds 20] [--scenarios bodies,grammars,sockets,nonreaders]
                            [--clients normal,idle] [--rounds 2] [--json FILE]

Starts its own `weir serve` (server.max_connections 1,400 for the idle sockets; 256 KiB of
unsent output per connection before its streams are paused, so that the non-readers pause
within their 480 tokens), then for each scenario in turn, alternating with an unloaded
baseline run (A B A B ...) so that the ratios stay fair on a shared machine:

  idle        no hostile load: the baseline
  bodies      8 clients (127.0.0.10-17) posting 0.9 MB chat bodies, back to back
  grammars    6 clients (127.0.0.30-35) compiling ~0.9 MB constraints (60,000-way guided_choice,
              a different one each time, so the cache never answers)
  sockets     1,100 idle sockets (127.0.0.50), opened at once and held
  nonreaders  16 streams (127.0.0.70) that never read their output

The hostile clients run in a child process, once per --clients mode after each baseline:

  normal  an ordinary process (nice 0): the clients compete for this machine's CPUs like
          any process. On a small machine this charges the clients' own CPU (Python building
          and sending megabytes, the kernel's loopback TCP on their side) to the server.
  idle    SCHED_IDLE (every thread of the client process): the clients run only on CPU time
          nothing else wants. This models the threat model's remote clients, whose CPU is not
          the server's; the server's own work for them (reading, parsing, templating,
          tokenizing, compiling) is unchanged, because it runs in the server's threads.
  nice    nice 19 (what this script did before --clients): in between; under autogroup
          scheduling the clients share the session's group with the server.

Meanwhile a prober (127.0.0.2) asks GET /health on a fresh connection every 20 ms, and a
light client (127.0.0.3) streams 48-token completions one after another; each token's
arrival time is recorded. Prints two Markdown tables.

Latency: /health p50/p99/max, ITL p50/p99, ITL p99 against the baseline's, the server's own
ITL p99 (weir_inter_token_latency_seconds between two /metrics scrapes, as an upper bucket
bound: the gaps the server saw between its events, without the client's scheduling), the p99
and max of weir_event_loop_lag_seconds (bucket upper bounds), and the time per second the loop
thread waited for a CPU (/proc schedstat).

CPU, per second of the run (cores busy): the server's engine threads (weir-engine and the
weir-cpu compute pool), its heavy pools (weir-prep-big, weir-compile-big), the rest of the
server, the hostile clients, the measuring clients (this process), softirq time (/proc/stat:
loopback TCP is mostly processed there), and the rest of the machine (everything else: other
sessions on a shared machine, about 0 on a quiet one), then the engine threads' run-queue
wait. Per run it also prints each thread group's CPU and run-queue wait (stderr).

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


def buckets(port, names=(LAG, "weir_inter_token_latency_seconds")):
    """Histograms' cumulative bucket counts {name: {le: count}} from /metrics (summed over
    labels)."""
    out = {n: {} for n in names}
    for line in get(port, "/metrics").splitlines():
        for n in names:
            if line.startswith(n + "_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                le = float("inf") if le == "+Inf" else float(le)
                out[n][le] = out[n].get(le, 0) + float(line.rsplit(" ", 1)[1])
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
    """Per thread: {tid: (group, CPU seconds, seconds waiting for a CPU)}, from schedstat. The
    loop is the main thread; the others are told apart by name."""
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
        out[tid] = ("loop" if int(tid) == pid else comm, run / 1e9, wait / 1e9)
    return out


def thread_deltas(th0, th1, dt):
    """Per thread group, CPU and run-queue wait per second between two thread_stats. A thread
    that ended in between is left out (pool threads stop when idle): a floor."""
    out = {}
    for tid, (g, run, wait) in th1.items():
        if tid not in th0 and run + wait > dt * 1.5:
            continue  # not new: its first read failed; its lifetime is not this run's
        r0, w0 = th0.get(tid, (g, 0.0, 0.0))[1:]
        a, b = out.get(g, (0.0, 0.0))
        out[g] = (a + (run - r0) / dt, b + (wait - w0) / dt)
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


def set_client_mode(mode):
    """The hostile process's CPU priority (see --clients). Threads started later inherit it."""
    if mode == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif mode == "nice":
        os.nice(19)


def hostile_proc(port, scenario, seconds, mode):
    set_client_mode(mode)
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
    t0 = time.time()
    for t in hostile:
        t.start()
    for t in hostile:
        t.join()
    for s in held:
        s.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # CPU per second of wall time (user + system: the kernel's send path runs in this process)
    print(json.dumps({"statuses": run.statuses,
                      "cpu": (ru.ru_utime + ru.ru_stime) / max(1e-3, time.time() - t0)},
                     default=str), flush=True)


def proc_stat():
    """(busy, softirq) seconds of the whole machine, from /proc/stat's cpu line."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait
    busy = sum(f[:8]) - f[3] - f[4]
    return busy / hz, f[6] / hz


def proc_cpu(pid):
    """utime + stime of a whole process (threads that ended included), seconds."""
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


ITL = "weir_inter_token_latency_seconds"


def one_run(port, scenario, seconds, pid=0, mode="normal"):
    run = Run(port, seconds)
    proc = None
    if scenario != "idle":
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--hostile",
                                 scenario, "--port", str(port), "--seconds",
                                 str(seconds + 1.0), "--clients", mode], stdout=subprocess.PIPE)
        time.sleep(1.0)  # the load is on before measuring
    run.end = time.time() + seconds
    h0, th0, t0 = buckets(port), thread_stats(pid), time.time()
    st0, srv0 = proc_stat(), proc_cpu(pid)
    me0 = resource.getrusage(resource.RUSAGE_SELF)
    meas = [threading.Thread(target=prober, args=(run,)),
            threading.Thread(target=light_stream, args=(run,))]
    for t in meas:
        t.start()
    for t in meas:
        t.join()
    h1, th1, dt = buckets(port), thread_stats(pid), time.time() - t0
    st1, srv1 = proc_stat(), proc_cpu(pid)
    me1 = resource.getrusage(resource.RUSAGE_SELF)
    run.lag = (h0[LAG], h1[LAG])
    run.sitl = (h0[ITL], h1[ITL])
    # per second of the run: each thread group's CPU and time spent waiting for a CPU
    run.threads = thread_deltas(th0, th1, dt)
    run.cpu = {"machine": (st1[0] - st0[0]) / dt, "softirq": (st1[1] - st0[1]) / dt,
               "server": (srv1 - srv0) / dt,
               "measuring": (me1.ru_utime + me1.ru_stime - me0.ru_utime - me0.ru_stime) / dt,
               "hostile": 0.0}
    if proc:
        try:
            out, _ = proc.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            # At SCHED_IDLE on a saturated machine the clients may not get the CPU even to
            # finish: lift them to normal priority and stop them (their answers are lost).
            try:
                tids = os.listdir("/proc/%d/task" % proc.pid)
            except OSError:
                tids = []
            for tid in tids:
                try:
                    os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
                except OSError:
                    pass
            proc.kill()
            out, _ = proc.communicate()
            out = b'{"statuses": {"clients stopped late": 1}, "cpu": 0}'
        try:
            rep = json.loads(out.decode().strip().splitlines()[-1])
            run.statuses, run.cpu["hostile"] = rep["statuses"], rep["cpu"]
        except (ValueError, IndexError, KeyError):
            run.statuses = {"?": 0}
    return run


def hist_sum(pairs):
    """Several runs' (before, after) histograms summed into one (before, after)."""
    b0, b1 = {}, {}
    for l0, l1 in pairs:
        for le in l1:
            b0[le] = b0.get(le, 0) + l0.get(le, 0)
            b1[le] = b1.get(le, 0) + l1[le]
    return b0, b1


ENGINE = ("weir-engine", "weir-cpu")
HEAVY = ("weir-prep-big", "weir-compile-bi")  # comm is 15 characters


def cpu_row(r):
    """Mean over a key's runs of the CPU breakdown (cores busy) and the engine threads' wait."""
    n = max(1, len(r["cpu"]))
    avg = lambda f: sum(f(c, t) for c, t in zip(r["cpu"], r["threads"])) / n
    eng = avg(lambda c, t: sum(t.get(g, (0, 0))[0] for g in ENGINE))
    heavy = avg(lambda c, t: sum(t.get(g, (0, 0))[0] for g in HEAVY))
    server = avg(lambda c, t: c["server"])
    hostile = avg(lambda c, t: c["hostile"])
    meas = avg(lambda c, t: c["measuring"])
    soft = avg(lambda c, t: c["softirq"])
    # softirq time is also counted in whichever process it interrupted: the rest is a floor
    rest = avg(lambda c, t: max(0.0, c["machine"] - c["server"] - c["hostile"] - c["measuring"]))
    wait = avg(lambda c, t: sum(t.get(g, (0, 0))[1] for g in ENGINE))
    return {"engine_threads": eng, "heavy_pools": heavy, "server_other": max(0.0, server - eng - heavy),
            "hostile_clients": hostile, "measuring_clients": meas, "softirq": soft,
            "rest_of_machine": rest, "engine_threads_wait": wait}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weir", default=os.path.join(HERE, "..", "build", "bin", "weir"))
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models", "default.gguf"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scenarios", default="bodies,grammars,sockets,nonreaders")
    ap.add_argument("--clients", default="normal,idle",
                    help="hostile client modes, each run after every baseline: normal "
                         "(nice 0), idle (SCHED_IDLE: models remote clients), nice (nice 19)")
    ap.add_argument("--json")
    ap.add_argument("--hostile", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    modes = [m for m in a.clients.split(",") if m]
    for m in modes:
        if m not in ("normal", "idle", "nice"):
            ap.error("--clients: unknown mode %r (normal, idle, nice)" % m)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    if a.hostile:
        hostile_proc(a.port, a.hostile, a.seconds, modes[0])
        return 0
    port = free_port()
    log = open(os.path.join("/tmp", "hostile-load-%d.log" % port), "w")
    srv = subprocess.Popen([a.weir, "serve", "--model", a.model, "--port", str(port), "--host",
                            "127.0.0.1", "--set", "server.max_connections=1400",
                            "--set", "server.max_pending_output_bytes=262144",
                            "--set", "log.requests=false"], stdout=log, stderr=log)
    try:
        up = time.time() + 180  # a loaded machine can take a while to load the model
        while True:
            try:
                if post(port, "127.0.0.1", "/tokenize", '{"prompt":"a"}', timeout=2) == 200:
                    break
            except OSError:
                pass
            if srv.poll() is not None or time.time() > up:
                sys.exit("the server did not start (log: %s)" % log.name)
            time.sleep(0.1)
        results = {}
        order = []
        for sc in a.scenarios.split(","):
            keys = [("idle-before-" + sc, "idle", "-")] + [
                ("%s/%s" % (sc, m), sc, m) for m in modes]
            order.append((sc, keys))
            for r in range(a.rounds):  # A B A B: a baseline right before each loaded run
                for key, name, mode in keys:
                    run = one_run(port, name, a.seconds, srv.pid, mode if mode != "-" else "normal")
                    res = results.setdefault(key, {"health": [], "itl": [], "health_fail": 0,
                                                   "statuses": {}, "lag": [], "sitl": [],
                                                   "threads": [], "cpu": [], "seconds": 0.0})
                    res["lag"].append(run.lag)
                    res["sitl"].append(run.sitl)
                    res["threads"].append(run.threads)
                    res["cpu"].append(run.cpu)
                    res["seconds"] += a.seconds
                    res["health"] += run.health
                    res["itl"] += run.itl
                    res["health_fail"] += run.health_fail
                    for k, v in run.statuses.items():
                        res["statuses"][str(k)] = res["statuses"].get(str(k), 0) + v
                    print("%-24s round %d: /health p99 %.1f ms, ITL p99 %.1f ms (%d tokens), "
                          "server ITL p99 <= %g ms, loop lag p99 <= %g ms; cores: hostile %.2f, "
                          "measuring %.2f, softirq %.2f, machine %.2f; per s: %s" % (
                              key, r, pct(run.health, 99), pct(run.itl, 99), len(run.itl),
                              lag_pct(run.sitl[0], run.sitl[1], 99) * 1000,
                              lag_pct(run.lag[0], run.lag[1], 99) * 1000,
                              run.cpu["hostile"], run.cpu["measuring"], run.cpu["softirq"],
                              run.cpu["machine"],
                              ", ".join("%s cpu %.2f wait %.2f" % (g, v[0], v[1])
                                        for g, v in sorted(run.threads.items()) if v[0] > 0.005)),
                          file=sys.stderr, flush=True)
        print("| load | clients | /health p50 | /health p99 | /health max | /health failed | "
              "ITL p50 | ITL p99 | ITL p99 / unloaded | server ITL p99 | loop lag p99 | "
              "loop lag max | loop waiting for a CPU | light tokens/s | hostile answers |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        summary = {}
        cpu_lines = []
        for sc, keys in order:
            base = results[keys[0][0]]
            for key, name, mode in keys:
                r = results[key]
                label = "unloaded (before %s)" % sc if name == "idle" else sc
                ratio = pct(r["itl"], 99) / pct(base["itl"], 99)
                lag99, lagmax = lag_pct(*hist_sum(r["lag"]), 99), lag_pct(*hist_sum(r["lag"]), 100)
                sitl99 = lag_pct(*hist_sum(r["sitl"]), 99)
                wait = sum(t.get("loop", (0, 0))[1] for t in r["threads"]) / max(1, len(r["threads"]))
                tps = len(r["itl"]) / max(1e-9, r["seconds"])
                print("| %s | %s | %.1f ms | %.1f ms | %.1f ms | %d | %.1f ms | %.1f ms | %.2fx | "
                      "<= %g ms | <= %g ms | <= %g ms | %.1f ms/s | %.0f | %s |" % (
                    label, mode, pct(r["health"], 50), pct(r["health"], 99), max(r["health"] or [0]),
                    r["health_fail"], pct(r["itl"], 50), pct(r["itl"], 99), ratio,
                    sitl99 * 1000, lag99 * 1000, lagmax * 1000, wait * 1000, tps,
                    ", ".join("%s: %d" % kv for kv in sorted(r["statuses"].items())) or "-"))
                c = cpu_row(r)
                cpu_lines.append("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f ms/s |" % (
                    label, mode, c["engine_threads"], c["heavy_pools"], c["server_other"],
                    c["hostile_clients"], c["measuring_clients"], c["softirq"],
                    c["rest_of_machine"], c["engine_threads_wait"] * 1000))
                summary[key] = {"clients": mode, "health_p50": pct(r["health"], 50),
                                "health_p99": pct(r["health"], 99),
                                "itl_p50": pct(r["itl"], 50), "itl_p99": pct(r["itl"], 99),
                                "itl_p99_ratio": ratio, "server_itl_p99_le": sitl99,
                                "loop_lag_p99_le": lag99, "loop_lag_max_le": lagmax,
                                "light_tokens_per_s": tps, "cpu": c, "threads": r["threads"],
                                "statuses": r["statuses"]}
        print()
        print("| load | clients | engine threads | heavy pools | rest of server | hostile clients | "
              "measuring clients | softirq | rest of machine | engine threads waiting for a CPU |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for line in cpu_lines:
            print(line)
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
