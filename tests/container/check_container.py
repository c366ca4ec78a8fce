#!/usr/bin/env python3
"""The container image's files and entry point, without building the image (a test helper).

  check_container.py SRC WEIR_BINARY PLUGIN_DIR

Building the image needs Debian's apt mirror and minutes (scripts/build-image.sh does it
with podman from a locally debootstrapped base); this test needs neither, and checks what it
can on the host:
  * the Dockerfile: every COPY source exists and is not excluded by .dockerignore, the
    default model is the trained one, the user is not root, weir binds 0.0.0.0 inside, the
    HEALTHCHECK runs the health check script that the image copies, EXPOSE is WEIR_PORT;
  * the runtime stage installs a Debian package for every shared library that weir and its
    CPU plugins link (ldd, then dpkg -S), besides libc6 and libgcc-s1;
  * the real entry point script (etc/container/entrypoint.sh) starting the real weir: with no
    arguments it serves the default model on 0.0.0.0:WEIR_PORT; the health check script
    exits 1 before the server answers and 0 once /health is 200; a positional model replaces
    the default; `serve --help` and `version` pass through; SIGTERM drains and exits 0.
"""
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BASE_PACKAGES = {"libc6", "libgcc-s1"}


def fail(msg):
    print("container:", msg)
    sys.exit(1)


def dockerfile_instructions(text):
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def ignored(path, patterns):
    for p in patterns:
        p = p.rstrip("/")
        if fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p + "/*") or \
                fnmatch.fnmatch(os.path.basename(path), p):
            return True
    return False


def check_dockerfile(src):
    text = open(f"{src}/Dockerfile").read()
    ins = dockerfile_instructions(text)
    patterns = [l.strip() for l in open(f"{src}/.dockerignore")
                if l.strip() and not l.startswith("#")]
    stages = [a for w, a in ins if w == "FROM"]
    if len(stages) < 2:
        fail("the Dockerfile is not multi-stage")
    runtime = ins[[i for i, (w, _) in enumerate(ins) if w == "FROM"][-1]:]
    copies = {}
    for w, a in ins:
        if w != "COPY" or a.startswith("--from"):
            continue
        parts = shlex.split(a)
        for s in parts[:-1]:
            if not os.path.exists(f"{src}/{s}"):
                fail(f"COPY source {s} does not exist")
            if ignored(s, patterns):
                fail(f"COPY source {s} is excluded by .dockerignore")
            copies[parts[-1]] = s
    if copies.get("/opt/weir/share/weir/models/default.gguf") != "models/kjv-target.gguf":
        fail("the image's default model is not the trained models/kjv-target.gguf")
    env = {}
    for w, a in runtime:
        if w == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", a):
                env[k] = v
    if env.get("WEIR_HOST") != "0.0.0.0":
        fail(f"WEIR_HOST is {env.get('WEIR_HOST')}, not 0.0.0.0")
    if env.get("WEIR_MODEL") != "/opt/weir/share/weir/models/default.gguf":
        fail("WEIR_MODEL is not the model the image copies")
    users = [a for w, a in runtime if w == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        fail("the image runs as root")
    hc = [a for w, a in runtime if w == "HEALTHCHECK"]
    if not hc:
        fail("no HEALTHCHECK")
    hc_cmd = json.loads(hc[0].split("CMD", 1)[1].strip())
    if hc_cmd[0] not in copies or not copies[hc_cmd[0]].endswith("healthcheck.sh"):
        fail(f"HEALTHCHECK runs {hc_cmd[0]}, which the image does not copy")
    if "/health" not in open(f"{src}/{copies[hc_cmd[0]]}").read():
        fail("the health check script does not ask /health")
    ep = json.loads([a for w, a in runtime if w == "ENTRYPOINT"][-1])
    if copies.get(ep[0]) != "etc/container/entrypoint.sh":
        fail(f"ENTRYPOINT {ep[0]} is not the copied etc/container/entrypoint.sh")
    expose = [a for w, a in runtime if w == "EXPOSE"]
    if expose != [env.get("WEIR_PORT")]:
        fail(f"EXPOSE {expose} is not WEIR_PORT {env.get('WEIR_PORT')}")
    m = re.search(r"FROM \$\{BASE_IMAGE\} AS runtime.*?install -y -q --no-install-recommends"
                  r"([^\\&]*)", text, re.S)
    if not m:
        fail("cannot find the runtime stage's apt-get install")
    return set(m.group(1).split())


def check_libraries(weir, plugin_dir, runtime_pkgs):
    if not shutil.which("dpkg") or not shutil.which("ldd"):
        print("container: library check skipped (no dpkg or ldd: not a Debian host)")
        return
    files = [weir] + [os.path.join(plugin_dir, f) for f in sorted(os.listdir(plugin_dir))
                      if f.endswith(".so") and "cuda" not in f]
    libs = set()
    for f in files:
        out = subprocess.run(["ldd", f], capture_output=True, text=True).stdout
        libs |= set(re.findall(r"=> (/\S+)", out))
    for lib in sorted(libs):
        # A sanitizer build's runtimes: the image is built without sanitizers.
        if re.match(r"lib(asan|ubsan|lsan|tsan)\.so", os.path.basename(lib)):
            continue
        real = os.path.realpath(lib)
        cands = {lib, real, "/usr" + lib if not lib.startswith("/usr") else lib[4:],
                 "/usr" + real if not real.startswith("/usr") else real[4:]}
        pkg = None
        for c in cands:
            r = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
            if r.returncode == 0:
                pkg = r.stdout.split(":")[0]
                break
        if pkg is None:
            fail(f"{lib}: no Debian package provides it (dpkg -S); the image could not have it")
        if pkg not in runtime_pkgs and pkg not in BASE_PACKAGES:
            fail(f"weir links {lib} from package {pkg}, which the runtime stage does not install")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def listens_on_any(port):
    """Whether a socket listens on 0.0.0.0:port (/proc/net/tcp, state 0A)."""
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        addr, st = f[1], f[3]
        if st == "0A" and addr == "00000000:%04X" % port:
            return True
    return False


def run_entrypoint(src, env, args, log):
    return subprocess.Popen(["sh", f"{src}/etc/container/entrypoint.sh"] + args, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_health(port, hc, env, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        if subprocess.run(["sh", hc], env=env).returncode == 0:
            return True
        time.sleep(0.2)
    return False


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -1


def check_entrypoint(src, weir, tmp):
    hc = f"{src}/etc/container/healthcheck.sh"
    port = free_port()
    env = dict(os.environ, WEIR_BIN=weir, WEIR_PORT=str(port),
               WEIR_MODEL=f"{src}/models/kjv-target.gguf", WEIR_DEVICE="cpu")
    env.pop("WEIR_HOST", None)
    env.pop("WEIR_API_KEY", None)
    # Pass-through commands.
    r = subprocess.run(["sh", f"{src}/etc/container/entrypoint.sh", "version"], env=env,
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.startswith("weir "):
        fail(f"entrypoint version: {r.returncode} {r.stdout}{r.stderr}")
    r = subprocess.run(["sh", f"{src}/etc/container/entrypoint.sh", "serve", "--help"], env=env,
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or "/v1/chat/completions" not in r.stdout:
        fail(f"entrypoint serve --help: {r.returncode} {r.stdout}{r.stderr}")
    # Nothing listens yet: the health check says so.
    if subprocess.run(["sh", hc], env=env).returncode == 0:
        fail("the health check passes with no server")
    # No arguments but two server flags: the default model on 0.0.0.0.
    with open(f"{tmp}/default.log", "w") as log:
        p = run_entrypoint(src, env, ["--threads", "1", "--set", "cache.memory_bytes=16MiB"], log)
        try:
            if not wait_health(port, hc, env, p):
                fail("the entry point's server did not become healthy: " +
                     open(f"{tmp}/default.log").read()[-2000:])
            if not listens_on_any(port):
                fail(f"weir does not listen on 0.0.0.0:{port} (WEIR_HOST default)")
            st, body = get(port, "/v1/models")
            if st != 200 or "kjv" not in body:
                fail(f"/v1/models does not serve the default model: {st} {body}")
            st, body = get(port, "/health")
            if st != 200 or json.loads(body).get("status") != "ok":
                fail(f"/health: {st} {body}")
        finally:
            rc = stop(p)
        if rc != 0:
            fail(f"weir did not drain and exit 0 on SIGTERM through the entry point: {rc}")
    if subprocess.run(["sh", hc], env=env).returncode == 0:
        fail("the health check passes after the server stopped")
    # A positional model replaces the default one.
    other = f"{tmp}/other.gguf"
    r = subprocess.run([weir, "mkmodel", "--preset", "tiny", "--out", other],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("mkmodel: " + r.stdout + r.stderr)
    with open(f"{tmp}/other.log", "w") as log:
        p = run_entrypoint(src, env, [other, "--served-model-name", "other-model",
                                      "--threads", "1", "--set", "cache.memory_bytes=16MiB"],
                           log)
        try:
            if not wait_health(port, hc, env, p):
                fail("the entry point did not serve a given model: " +
                     open(f"{tmp}/other.log").read()[-2000:])
            st, body = get(port, "/v1/models")
            if "other-model" not in body:
                fail(f"/v1/models with a given model: {body}")
            log_text = open(f"{tmp}/other.log").read()
            if "kjv-target" in log_text:
                fail("the default model was loaded although a model was given")
        finally:
            stop(p)


def main(src, weir, plugin_dir):
    pkgs = check_dockerfile(src)
    check_libraries(weir, plugin_dir, pkgs)
    with tempfile.TemporaryDirectory() as tmp:
        check_entrypoint(src, weir, tmp)
    print("container: Dockerfile, runtime libraries and entry point OK")


if __name__ == "__main__":
    main(*sys.argv[1:4])
