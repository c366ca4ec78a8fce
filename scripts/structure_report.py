#!/usr/bin/env python3
"""Prints the shape of weir's source tree (docs/structure-report.md; issue 27):

  - the largest files, in lines;
  - the largest functions, in lines, found by a simple C function-extent parser;
  - the call circles between the files of one folder: a file-level call graph (an edge A -> B
    when a function defined in A calls a function that B defines and A does not), built per
    directory, and its strongly connected components of more than one file.

Usage: scripts/structure_report.py [ROOT] [--top N] [--dirs core,plugins,...]
       scripts/structure_report.py --selftest   (ctest structure_report_selftest)

ROOT is a source tree (default: this checkout). Python 3, standard library only. The parser
reads C (and the C-like .cpp and .cu files) as text: comments, strings, character constants
and preprocessor lines are blanked first; a function is a top-level `{ ... }` whose header
(the text since the previous top-level `;`, `}` or preprocessor line) ends in a parameter
list `(...)` and is not an initializer, a struct, union or enum, or an `extern "C"` block.
A call is an identifier followed by `(` inside a function body that is not a keyword; calls
through pointers and macros are not seen, so a circle made only of callbacks is missed.
"""
import argparse
import os
import re
import sys

SOURCE_EXT = (".c", ".cpp", ".cu", ".h", ".cuh")
BODY_EXT = (".c", ".cpp", ".cu")
DEFAULT_DIRS = ("core", "plugins", "kernels", "tools", "sdk")
KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "goto",
    "defined", "__attribute__", "__typeof__", "typeof", "_Alignof", "alignof", "_Static_assert",
    "static_assert", "offsetof", "va_arg", "__builtin_offsetof", "catch", "new", "delete",
    "throw", "decltype", "noexcept", "alignas", "_Alignas", "__asm__", "asm", "volatile",
    "_Generic", "__has_feature", "__has_include",
}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def blank(text):
    """The text with comments, string and character literals and preprocessor lines replaced
    by spaces (newlines kept, so line numbers stay right)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # a preprocessor line, with its backslash continuations
            while i < n:
                if text[i] == "\n" and (i == 0 or text[i - 1] != "\\"):
                    break
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, i, step):
    """The index of the bracket matching the one at text[i], walking forward (step 1, from an
    opening bracket) or backward (step -1, from a closing one); past the end when unmatched."""
    pairs = {"{": "}", "(": ")", "}": "{", ")": "("}
    mine, other = text[i], pairs[text[i]]
    level = 0
    while 0 <= i < len(text):
        if text[i] == mine:
            level += 1
        elif text[i] == other:
            level -= 1
            if level == 0:
                return i
        i += step
    return i


def functions(path, text):
    """(name, first line, last line, body text, is_static) of every function defined in a file."""
    src = blank(text)
    found = []
    depth = 0
    header_start = 0
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "{" and depth == 0:
            header = src[header_start:i]
            close = header.rstrip()
            name = None
            if close.endswith(")") or re.search(r"\)\s*(const|noexcept|override)?\s*$", close):
                # the parameter list: from the last ')' back to its '('
                j = matching(close, close.rfind(")"), -1)
                before = close[:j].rstrip() if j > 0 else ""
                m = re.search(r"([A-Za-z_][A-Za-z0-9_:~]*)\s*$", before)
                flat = " ".join(header.split())
                if (m and m.group(1) not in KEYWORDS and "=" not in before and
                        not re.search(r"\b(struct|union|enum)\s+\w*\s*$", before) and
                        not flat.startswith("extern \"")):
                    name = m.group(1).split("::")[-1]
            j = matching(src, i, 1)
            if name:
                first_code = header_start + (len(header) - len(header.lstrip()))
                first = src.count("\n", 0, first_code) + 1
                last = src.count("\n", 0, j) + 1
                is_static = re.search(r"\bstatic\b", header) is not None
                found.append((name, first, last, src[i:j + 1], is_static))
                i = j + 1
                header_start = i
                continue
            # not a function (struct, initializer, extern "C"): an extern "C" block is entered
            if header.strip().startswith('extern "') or header.strip().startswith("extern"):
                i += 1
                header_start = i
                continue
            i = j + 1
            header_start = i
            continue
        if c in ";}" and depth == 0:
            header_start = i + 1
        i += 1
    return found


def source_files(root, dirs):
    for d in dirs:
        base = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(x for x in dirnames if not x.startswith(".") and x != "build")
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def tarjan(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def call_circles(per_file):
    """(directory, files of one strongly connected component, edges) of every call circle
    of more than one file between the files of one folder."""
    by_dir = {}
    for rel in per_file:
        by_dir.setdefault(os.path.dirname(rel), []).append(rel)
    circles = []
    for d, rels in sorted(by_dir.items()):
        defined = {}  # name -> files defining it with external linkage
        local = {}    # file -> every name it defines
        for rel in rels:
            local[rel] = {f[0] for f in per_file[rel]}
            for name, _, _, _, is_static in per_file[rel]:
                if not is_static:
                    defined.setdefault(name, set()).add(rel)
        edges = {}
        for rel in rels:
            for name, _, _, body, _ in per_file[rel]:
                for m in CALL.finditer(body):
                    callee = m.group(1)
                    if callee in KEYWORDS or callee in local[rel]:
                        continue
                    for target in defined.get(callee, ()):
                        if target != rel:
                            edges.setdefault(rel, set()).add(target)
        for comp in tarjan(rels, edges):
            if len(comp) > 1:
                circles.append((d, comp, edges))
    return circles


def report(root, dirs, top):
    files = list(source_files(root, dirs))
    sizes = []
    funcs = []
    per_file = {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        sizes.append((text.count("\n") + (0 if text.endswith("\n") or not text else 1), rel))
        if rel.endswith(BODY_EXT):
            fs = functions(rel, text)
            per_file[rel] = fs
            for name, first, last, _, _ in fs:
                funcs.append((last - first + 1, f"{rel}:{first}", name))
    total_lines = sum(s for s, _ in sizes)
    print(f"tree: {root} ({', '.join(dirs)}): {len(files)} source files, {total_lines} lines, "
          f"{len(funcs)} functions with a body")
    print()
    print(f"largest files (lines), top {top}:")
    for lines, rel in sorted(sizes, key=lambda x: (-x[0], x[1]))[:top]:
        print(f"  {lines:6d}  {rel}")
    print()
    print(f"largest functions (lines), top {top}:")
    for lines, where, name in sorted(funcs, key=lambda x: (-x[0], x[1]))[:top]:
        print(f"  {lines:6d}  {name}  ({where})")
    print()
    circles = call_circles(per_file)
    print(f"call circles between files of one folder: {len(circles)}")
    for d, comp, edges in circles:
        names = [os.path.basename(c) for c in comp]
        links = []
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    links.append(f"{os.path.basename(a)} -> {os.path.basename(b)}")
        print(f"  {d}/: {', '.join(names)}")
        print(f"      {'; '.join(links)}")
    return 0


def selftest():
    """Proves on a small tree that the parser finds functions and their extents (not structs,
    initializers or prototypes), and that circles are found, and only real ones."""
    import tempfile
    files = {
        "a/x.c": '#include "y.h"\n/* f() { */\nstruct s { int a; };\nstatic const int t[] = {1, 2};\n'
                 'int x_one(int v) {\n  if (v) return y_two(v - 1);\n  return 0;\n}\n'
                 'static int helper(void) { return 1; }\n',
        "a/y.c": 'int y_two(int v) {\n  const char *s = "x_one(";\n  return x_one(v) + helper();\n}\n'
                 'static int helper(void) {\n  return 2;\n}\n',
        "a/z.c": 'int z_three(void) { return y_two(1); }\nint y_proto(int);\n',
        "b/p.c": 'static int only_here(void) { return 0; }\nint p(void) { return q(); }\n',
        "b/q.c": 'int q(void) { return only_here(); }\n',
    }
    with tempfile.TemporaryDirectory() as root:
        per_file = {}
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as fh:
                fh.write(text)
            per_file[rel] = functions(rel, text)
        got = {rel: [(f[0], f[1], f[2], f[4]) for f in fs] for rel, fs in per_file.items()}
        assert got["a/x.c"] == [("x_one", 5, 8, False), ("helper", 9, 9, True)], got["a/x.c"]
        assert got["a/y.c"] == [("y_two", 1, 4, False), ("helper", 5, 7, True)], got["a/y.c"]
        assert got["a/z.c"] == [("z_three", 1, 1, False)], got["a/z.c"]
        circles = [(d, c) for d, c, _ in call_circles(per_file)]
        # x <-> y is a circle (a call inside a string does not count, a static helper of the
        # same name in both files links nowhere); z only calls; in b/ q calls p's static
        # function, which it cannot reach: no circle.
        assert circles == [("a", ["a/x.c", "a/y.c"])], circles
    print("structure_report selftest: ok")
    return 0


def main():
    if sys.argv[1:] == ["--selftest"]:
        return selftest()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--dirs", default=",".join(DEFAULT_DIRS),
                    help="comma-separated folders under ROOT to read (default %(default)s)")
    a = ap.parse_args()
    root = os.path.normpath(a.root)
    dirs = [d for d in a.dirs.split(",") if d and os.path.isdir(os.path.join(root, d))]
    return report(root, dirs, a.top)


if __name__ == "__main__":
    sys.exit(main())
