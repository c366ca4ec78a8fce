#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel GPU time by kernel name.

    ncu --metrics gpu__time_duration.sum --csv ... > log;  scripts/ncu-summary.py log

Reads the CSV rows ncu prints (other lines, the program's own output, are skipped) and
prints one line per kernel name, largest total first: launches, total and mean microseconds
and share of the total; with the number of decode steps the window held, estimated from the
RMSNorm launches (two per layer and one final per step, --layers, default 22), the time per
step as well."""
import csv
import re
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    layers = 22
    if "--layers" in sys.argv:
        layers = int(sys.argv[sys.argv.index("--layers") + 1])
    rows = [l for l in open(path, errors="replace") if l.startswith('"')]
    if not rows:
        print("no ncu CSV rows in", path)
        return 1
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*", "", r["Kernel Name"])[:70]
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(unit, 1e-3)
        tot[name] += v
        cnt[name] += 1
    total = sum(tot.values())
    norms = sum(c for n, c in cnt.items() if "rms_norm" in n)
    steps = norms / (2 * layers + 1) if norms else 0
    print(f"ncu: {sum(cnt.values())} kernels, {total:.1f} us of GPU time"
          + (f", ~{steps:.2f} decode steps: {total / steps:.1f} us per step" if steps else ""))
    print(f"{'kernel':70} {'launches':>8} {'total us':>10} {'mean us':>9} {'share':>6}")
    for n in sorted(tot, key=tot.get, reverse=True):
        print(f"{n:70} {cnt[n]:8d} {tot[n]:10.1f} {tot[n] / cnt[n]:9.2f} "
              f"{100 * tot[n] / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
