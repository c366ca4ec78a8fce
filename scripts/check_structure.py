#!/usr/bin/env python3
"""Checks the structure rules of docs/architecture.md ("Layers and names").

  check_structure.py layers SRC      the include graph of core/ and tools/
  check_structure.py names BUILD     the symbols of the built core library and weir binary
  check_structure.py selftest        proves both checks fail on a broken tree

layers: every #include "dir/file.h" of core/ and tools/ points at the same layer or a lower
one (util < config < metrics < plugin < format < kv < model < runtime < template < grammar <
engine < http < cli, tools/ being part of cli); no header include circle; core/ includes no CUDA header; the SDK includes only
itself and the C library; plugins/ and kernels/ include no core header.

names: every global symbol the core library and the weir binary define starts with weir_
(C++ symbols of the one C++ file's library code and main aside); a weir__ symbol (internal to
one subsystem) is used only inside the directory that defines it (core/cli and tools/ are one:
the binary's subcommands).

Exit status 0 when every rule holds, 1 with one line per violation otherwise.
"""
import os
import re
import subprocess
import sys
import tempfile

LAYERS = ["util", "config", "metrics", "plugin", "format", "kv", "model", "runtime", "template",
          "grammar", "engine", "http", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
SOURCE_EXT = (".c", ".h", ".cpp", ".cu", ".cuh")


def layer_of(rel):
    """The layer of a file under core/ or tools/ (tools are part of the cli layer)."""
    parts = rel.split("/")
    if parts[0] == "tools":
        return "cli"
    if parts[0] == "core" and len(parts) > 2 and parts[1] in RANK:
        return parts[1]
    return None


def files_under(src, top):
    out = []
    for root, _dirs, names in os.walk(os.path.join(src, top)):
        for n in names:
            if n.endswith(SOURCE_EXT):
                out.append(os.path.relpath(os.path.join(root, n), src))
    return sorted(out)


def check_layers(src):
    errors = []
    graph = {}
    for rel in files_under(src, "core") + files_under(src, "tools"):
        own = layer_of(rel)
        if own is None:
            continue
        text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
        deps = []
        for kind, inc in INCLUDE.findall(text):
            if kind == "<" and re.match(r"(cuda|cublas|cudnn|nccl)", inc):
                errors.append(f"{rel}: includes <{inc}>: core runs without CUDA")
            if kind != '"':
                continue
            head = inc.split("/")[0]
            if head in RANK:
                target = "core/" + inc
            elif head in ("bench", "mkmodel"):
                target = "tools/" + inc
            else:
                continue
            if RANK[layer_of(target)] > RANK[own]:
                errors.append(f"{rel}: includes \"{inc}\": {own} may not include the higher "
                              f"layer {layer_of(target)} ({' < '.join(LAYERS)})")
            if target.endswith(".h"):
                deps.append(target)
        graph[rel] = deps
    # Header circles: a depth-first walk over the header graph.
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                errors.append("include circle: " + " -> ".join(cycle))
            elif state.get(nxt) is None and nxt in graph:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node.endswith(".h") and state.get(node) is None:
            visit(node, [])
    for rel in files_under(src, "sdk/include"):
        for kind, inc in INCLUDE.findall(open(os.path.join(src, rel)).read()):
            if kind == '"' and not inc.startswith("weir/"):
                errors.append(f"{rel}: includes \"{inc}\": the SDK includes only weir/*.h")
    for top in ("plugins", "kernels"):
        for rel in files_under(src, top):
            text = open(os.path.join(src, rel), encoding="utf-8", errors="replace").read()
            for kind, inc in INCLUDE.findall(text):
                if kind == '"' and inc.split("/")[0] in RANK and "/" in inc:
                    errors.append(f"{rel}: includes core's \"{inc}\": plugins see only the SDK")
    return errors


def objects(build):
    """(source path, object path) for the core library and the weir binary's objects."""
    out = []
    for target in ("weir_core.dir", "weir.dir"):
        base = os.path.join(build, "core", "CMakeFiles", target)
        for root, _dirs, names in os.walk(base):
            for n in names:
                if n.endswith(".o"):
                    obj = os.path.join(root, n)
                    rel = os.path.relpath(obj, base)[:-2]  # drop ".o"
                    rel = rel.replace("__/", "../")
                    src = os.path.normpath(os.path.join("core", rel))
                    out.append((src, obj))
    return sorted(out)


def unit_of(src):
    """The directory a weir__ symbol is private to; the CLI and the tools are one unit."""
    d = os.path.dirname(src)
    if d == "core/cli" or d.startswith("tools/"):
        return "cli"
    return d


def check_names(build):
    errors = []
    objs = objects(build)
    if not objs:
        return [f"{build}: no object files of weir_core or weir found (build first)"]
    defined, used = {}, []
    for src, obj in objs:
        res = subprocess.run(["nm", obj], capture_output=True, text=True)
        if res.returncode != 0:
            errors.append(f"{obj}: nm failed: {res.stderr.strip()}")
            continue
        for line in res.stdout.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBRCGS":
                sym = f[2]
                if (sym.startswith("_Z") or sym.startswith("DW.") or sym == "main" or
                        sym.startswith("__odr_asan")):  # AddressSanitizer's ODR indicators
                    continue
                if not sym.startswith("weir_"):
                    errors.append(f"{src}: defines the global symbol {sym}: outside names start "
                                  f"with weir_ (or make it static)")
                defined[sym] = src
            elif len(f) == 2 and f[0] == "U" and f[1].startswith("weir__"):
                used.append((src, f[1]))
    for src, sym in used:
        home = defined.get(sym)
        if home and unit_of(home) != unit_of(src):
            errors.append(f"{src}: uses {sym}, internal to {unit_of(home)}: a symbol used across "
                          f"subsystems is weir_, not weir__")
    return errors


def selftest():
    """Builds tiny broken trees and requires each check to catch them."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        def write(rel, text):
            path = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(text)
        write("core/kv/a.h", '#include "engine/b.h"\n')          # upward
        write("core/engine/b.h", '#include "engine/c.h"\n')
        write("core/engine/c.h", '#include "engine/b.h"\n')      # circle
        write("core/util/d.c", "#include <cuda_runtime.h>\n")     # CUDA in core
        write("plugins/x/p.c", '#include "kv/kv_cache.h"\n')     # core in a plugin
        write("core/model/ok.c", '#include "util/d.h"\n')        # downward: fine
        errs = check_layers(tmp)
        for want in ("kv/a.h: includes \"engine/b.h\"", "include circle", "<cuda_runtime.h>",
                     "plugins see only the SDK"):
            if not any(want in e for e in errs):
                failures.append(f"layers did not report: {want}")
        if any("model/ok.c" in e for e in errs):
            failures.append("layers reported a downward include")
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "core", "CMakeFiles", "weir_core.dir")
        os.makedirs(os.path.join(base, "util"))
        os.makedirs(os.path.join(base, "kv"))
        def cc(rel, code):
            c = os.path.join(tmp, "x.c")
            open(c, "w").write(code)
            subprocess.run(["cc", "-c", c, "-o", os.path.join(base, rel)], check=True)
        cc("util/u.c.o", "int helper(void) { return 1; }\nint weir__priv(void) { return 2; }\n")
        cc("kv/k.c.o", "int weir__priv(void);\nint weir_kv_x(void) { return weir__priv(); }\n")
        errs = check_names(tmp)
        for want in ("global symbol helper", "uses weir__priv, internal to core/util"):
            if not any(want in e for e in errs):
                failures.append(f"names did not report: {want}")
        if any("weir_kv_x" in e for e in errs):
            failures.append("names reported a good name")
    return failures


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        errors = selftest()
    elif len(argv) == 3 and argv[1] == "layers":
        errors = check_layers(argv[2])
    elif len(argv) == 3 and argv[1] == "names":
        errors = check_names(argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print(e)
    if not errors:
        print(f"{argv[1]}: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
