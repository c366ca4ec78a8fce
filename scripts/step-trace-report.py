#!/usr/bin/python3
"""Summarises step traces (WEIR_STEP_TRACE, docs/engine.md) case by case.

    scripts/step-trace-report.py DIR [CASE_FILTER]

DIR holds what `STEP_TRACE=1 IN_SERVICE=1 scripts/bench-speculative-serve.sh` wrote:
marks.txt (when each case began, on the engine's clock) and steps-CFG.txt per server. For each
case and each server that ran steps in it, steps are split into decode-only steps and steps
that carry a prompt chunk; for each class: the count, wall time (median, p90, p99, max), the
engine thread's CPU time (median, p99), how much wall time was off the CPU (sum of wall - CPU
over the class, as a share of its wall time), and the mean sequences, tokens and drafts.
The idle gap between one step's end and the next step's start (the engine waiting for work or
for its lock) is summarised too. CASE_FILTER (a substring such as "t0.8 c16") limits the cases.
"""
import sys
from pathlib import Path


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    i = min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))
    return v[i]


def load(path):
    rows = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        rows.append({"t": float(f[0]), "wall": float(f[1]), "cpu": float(f[2]),
                     "seqs": int(f[3]), "tokens": int(f[4]), "prefill": int(f[5]),
                     "k": int(f[6]), "drafts": int(f[7]), "out": int(f[8]),
                     "preempted": int(f[9]),
                     # CPU time by phase (absent from older traces)
                     "sched": float(f[11]) if len(f) > 14 else 0.0,
                     "draft": float(f[12]) if len(f) > 14 else 0.0,
                     "forward": float(f[13]) if len(f) > 14 else 0.0,
                     "sample": float(f[14]) if len(f) > 14 else 0.0})
    return rows


def summary(label, steps):
    if not steps:
        return
    wall = [s["wall"] for s in steps]
    cpu = [s["cpu"] for s in steps]
    off = sum(s["wall"] - s["cpu"] for s in steps) / max(1e-9, sum(wall))
    n = len(steps)
    print(f"    {label:<14} {n:6d} steps  wall us p50 {pct(wall, .5):7.0f} p90 {pct(wall, .9):7.0f}"
          f" p99 {pct(wall, .99):7.0f} max {max(wall):7.0f} | cpu p50 {pct(cpu, .5):7.0f}"
          f" p99 {pct(cpu, .99):7.0f} | off-cpu {100 * off:4.1f}% | seqs {sum(s['seqs'] for s in steps) / n:5.1f}"
          f" tokens {sum(s['tokens'] for s in steps) / n:6.1f} prefill {sum(s['prefill'] for s in steps) / n:6.1f}"
          f" drafts {sum(s['drafts'] for s in steps) / n:4.2f} out {sum(s['out'] for s in steps) / n:5.1f}")
    slow = sorted(steps, key=lambda s: -s["wall"])[:3]
    print("      slowest: " + "; ".join(
        f"{s['wall']:.0f} us wall = {s['sched']:.0f} propose+schedule, {s['draft']:.0f} draft, "
        f"{s['forward']:.0f} forward, {s['sample']:.0f} sample ({s['seqs']} seqs, {s['tokens']} tokens)"
        for s in slow))


def main():
    d = Path(sys.argv[1])
    filt = sys.argv[2] if len(sys.argv) > 2 else ""
    marks = []
    for line in open(d / "marks.txt"):
        t, *name = line.split()
        marks.append((float(t), " ".join(name)))
    traces = {p.stem[len("steps-"):]: load(p) for p in sorted(d.glob("steps-*.txt"))}
    for i, (t0, name) in enumerate(marks):
        if filt not in name:
            continue
        t1 = marks[i + 1][0] if i + 1 < len(marks) else float("inf")
        print(f"## {name}")
        for cfg, rows in traces.items():
            steps = [s for s in rows if t0 <= s["t"] < t1]
            if not steps:
                continue
            print(f"  {cfg}:")
            summary("decode only", [s for s in steps if s["prefill"] == 0])
            summary("prompt chunk", [s for s in steps if s["prefill"] > 0])
            summary("all", steps)
            gaps = [b["t"] - (a["t"] + a["wall"] * 1e-6) for a, b in zip(steps, steps[1:])]
            busy = [g * 1e6 for g in gaps if g < 0.05]  # a longer gap: between rounds
            if busy:
                print(f"    gap between steps (under 50 ms): p50 {pct(busy, .5):.0f} us, p99 "
                      f"{pct(busy, .99):.0f} us, sum {sum(busy) / 1e3:.1f} ms over {len(busy)}")


if __name__ == "__main__":
    main()
