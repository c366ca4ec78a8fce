#!/usr/bin/env python3
"""Checks etc/examples/kubernetes/weir.yaml against what weir does (a test helper).

  check_kubernetes.py SRC WEIR_BINARY PLUGIN_DIR

The Deployment's readiness probe asks /health on the container's port; the grace period
outlasts the preStop pause plus the drain timeout of the config it mounts
(etc/examples/production.toml); CPU and memory requests are set; the Service selects the
pods and targets the named port; and `weir config check` accepts the container's arguments
with that config (so a flag weir does not know fails here, not in a cluster).
"""
import re
import subprocess
import sys

import yaml


def fail(msg):
    print("kubernetes example:", msg)
    sys.exit(1)


def main(src, weir, plugin_dir):
    docs = list(yaml.safe_load_all(open(f"{src}/etc/examples/kubernetes/weir.yaml")))
    dep = next(d for d in docs if d["kind"] == "Deployment")
    svc = next(d for d in docs if d["kind"] == "Service")
    pod = dep["spec"]["template"]
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probe = c["readinessProbe"]["httpGet"]
    if probe["path"] != "/health":
        fail(f"readiness probe asks {probe['path']}, not /health")
    port = ports.get(probe["port"], probe["port"])
    args = c["args"]
    if args[0] != "serve":
        fail("the container does not run `weir serve`")
    if str(port) != args[args.index("--port") + 1]:
        fail(f"the probe asks port {port}, weir listens on {args[args.index('--port') + 1]}")
    pause = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    toml = open(f"{src}/etc/examples/production.toml").read()
    drain_ms = int(re.search(r"^drain_timeout_ms\s*=\s*(\d+)", toml, re.M).group(1))
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    if grace <= pause + drain_ms / 1000:
        fail(f"terminationGracePeriodSeconds {grace} <= preStop {pause} s + drain {drain_ms} ms")
    req = c["resources"]["requests"]
    if "cpu" not in req or "memory" not in req:
        fail("resources.requests lacks cpu or memory")
    if svc["spec"]["selector"] != pod["metadata"]["labels"]:
        fail("the Service does not select the pods")
    if svc["spec"]["ports"][0]["targetPort"] not in ports:
        fail("the Service targets a port the container does not name")
    # The flags, checked by weir itself, with the config the ConfigMap holds.
    flags = [a if a != "/etc/weir/server.toml" else f"{src}/etc/examples/production.toml"
             for a in args[1:]]
    cfg = flags.index("--config")
    cmd = [weir, "config", "check", flags[cfg + 1]] + flags[:cfg] + flags[cfg + 2:] + \
          ["--plugin-dir", plugin_dir]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        fail(f"`{' '.join(cmd)}` refused the container's arguments:\n{res.stderr}")
    if "path = \"/srv/models/model.gguf\"" not in res.stdout:
        fail("the container's --model did not reach model.path")
    print("kubernetes example: ok")


if __name__ == "__main__":
    main(*sys.argv[1:4])
