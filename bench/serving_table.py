#!/usr/bin/env python3
"""Tables for bench/RESULTS.md from bench_serving's JSON output (one run).

  bench/serving_table.py RESULT.json [--ours tuned_packed] [--baseline default_packed]
      [--libs onednn_matmul,openblas]
  bench/serving_table.py RESULT.json --by-class   (the libraries against the built-in default)

Per-call keys (B passed with every call) compare with the libraries' per-call rows:
  bench/serving_table.py RESULT.json --ours tuned --baseline default --libs onednn_sgemm,openblas

Per group, layout and thread count: the geometric mean and the minimum, over the
group's shapes, of our row's GFLOP/s against the better of oneDNN (matmul with the
weights reordered once; --libs names other rows) and OpenBLAS; our row against the built-in default; m = 1
rows as a fraction of the measured read bandwidth (weights bytes / time); large nn
rows (m, n, k >= 1000) as a fraction of the measured FMA peak. A --warm run's m = 1
rows are not set against the read bound (their weights come from cache). With
repetitions, the median of each row is used. From a --paired run, each row's median over the
rounds (its <row>_us counter), and the bounds measured in the same rounds as the
shape where the run has them (read_bandwidth_GBps, fma_peak_GFLOPS).
"""
import argparse
import collections
import json
import math
import re
import statistics
import sys

ROW = re.compile(r"^(?P<who>[a-z_]+)/(?P<group>[a-z0-9_]+)/(?P<layout>n[nt])/m=(?P<m>\d+)/n=(?P<n>\d+)/k=(?P<k>\d+)"
                 r"/threads:(?P<t>\d+)")
LIBS = ("onednn_matmul", "openblas")  # --libs


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = collections.defaultdict(list)
    bounds = collections.defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        name = b["name"]
        if name.startswith("BM_read_bandwidth/"):
            bounds[("GBps", int(name.split("/")[1]))].append(b["GBps"])
            continue
        if name.startswith("BM_fma_peak/"):
            bounds[("GFLOPS", int(name.split("/")[1]))].append(b["GFLOPS"])
            continue
        m = ROW.match(name)
        if not m:
            continue
        key = (m["group"], m["layout"], int(m["m"]), int(m["n"]), int(m["k"]), int(m["t"]))
        if m["who"] == "paired":  # one benchmark, a <row>_us counter per row
            labels = dict(x.split("=", 1) for x in b.get("label", "").split("; ") if "=" in x)
            for c, unit in (("read_bandwidth_GBps", "GBps"), ("fma_peak_GFLOPS", "GFLOPS")):
                if c in b:  # the bound measured in the same rounds as this shape
                    bounds[(unit, key)].append(b[c])
            for c, us in b.items():
                if c.endswith("_us"):
                    who, mnk, nk = c[:-3], key[2] * key[3] * key[4], key[3] * key[4]
                    rows[(who, key)].append((2e-3 * mnk / us, 4e-3 * nk / us, labels.get(who, "")))
            continue
        rows[(m["who"], key)].append((b["GFLOPS"], b["weight_GBps"], b.get("label", "")))
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), v[0][2])
           for k, v in rows.items()}
    warm = data.get("context", {}).get("operands") == "warm"
    return med, {k: statistics.median(v) for k, v in bounds.items()}, warm


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def shape_class(m, n, k):  # runtime/include/cliffguard/op_key.h
    return "skinny" if min(m, n) <= 16 else "small" if m * n * k <= 2 ** 21 else "large"


def by_class(med, baseline, libs):
    keys = sorted({k for (who, k) in med if who == baseline})
    print(f"| class | threads | layout | shapes | " + "".join(f"{l} / {baseline} | " for l in libs)
          + f"better library / {baseline} |")
    print("|---|---|---|---|" + "---|" * (len(libs) + 1))
    cells = collections.defaultdict(list)
    for k in keys:
        cells[(shape_class(k[2], k[3], k[4]), k[5], k[1])].append(k)
    for (c, t, lay), ks in sorted(cells.items()):
        r = {l: geomean([med[(l, k)][0] / med[(baseline, k)][0] for k in ks if (l, k) in med]) for l in libs}
        best = geomean([max(med[(l, k)][0] for l in libs if (l, k) in med) / med[(baseline, k)][0]
                        for k in ks if any((l, k) in med for l in libs)])
        print(f"| {c} | {t} | {lay} | {len(ks)} | " + "".join(f"{r[l]:.2f}x | " for l in libs) + f"{best:.2f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--ours", default="tuned_packed")
    ap.add_argument("--baseline", default="default_packed")
    ap.add_argument("--libs", default=",".join(LIBS), help="the library rows to compare with, comma-separated")
    ap.add_argument("--by-class", action="store_true")
    a = ap.parse_args()
    libs = tuple(a.libs.split(","))
    med, bounds, warm = load(a.json)
    if a.by_class:
        return by_class(med, a.baseline, libs)
    keys = sorted({k for (who, k) in med if who == a.ours})
    if not keys:
        sys.exit(f"no '{a.ours}' rows in {a.json}")
    groups = collections.defaultdict(list)
    for k in keys:
        groups[(k[0], k[1], k[5])].append(k)
    print(f"| group | layout | threads | shapes | {a.ours} / best library, geomean | min (shape) "
          f"| {a.ours} / {a.baseline}, geomean |")
    print("|---|---|---|---|---|---|---|")
    worst = []
    for (g, lay, t), ks in sorted(groups.items()):
        r_lib, r_def, lows = [], [], []
        for k in ks:
            ours = med[(a.ours, k)][0]
            times = [med[(l, k)][0] for l in libs if (l, k) in med]
            if times:
                r = ours / max(times)
                r_lib.append(r)
                lows.append((r, f"m={k[2]} n={k[3]} k={k[4]}"))
            if (a.baseline, k) in med:
                r_def.append(ours / med[(a.baseline, k)][0])
        low = min(lows) if lows else (float("nan"), "-")
        worst.extend((r, f"{g} {lay} {s} t{t}") for r, s in lows)
        print(f"| {g} | {lay} | {t} | {len(ks)} | {geomean(r_lib):.3f}x | {low[0]:.3f}x ({low[1]}) "
              f"| {geomean(r_def):.3f}x |")
    print()
    below = sorted(x for x in worst if x[0] < 0.9)
    print(f"shapes below 0.9x the best library: {len(below)} of {len(worst)}"
          + ("".join(f"\n  {r:.2f}x {s}" for r, s in below)))
    print()
    if warm:
        print("operands reused by every call (--warm): weights in cache, so no decode row against the read bound")
    print("| decode row (m <= 16) | threads | weights GB/s | read bandwidth GB/s | fraction |")
    print("|---|---|---|---|---|")
    for k in keys:
        if k[2] > 16 or warm:
            continue
        bw = bounds.get(("GBps", k), bounds.get(("GBps", k[5])))
        gbps = med[(a.ours, k)][1]
        if bw:
            print(f"| {k[1]} m={k[2]} n={k[3]} k={k[4]} | {k[5]} | {gbps:.1f} | {bw:.1f} | {gbps / bw:.0%} |")
    print()
    print("| large nn row | threads | GFLOP/s | FMA peak GFLOP/s | fraction |")
    print("|---|---|---|---|---|")
    for k in keys:
        if k[1] != "nn" or min(k[2], k[3], k[4]) < 1000:
            continue
        peak = bounds.get(("GFLOPS", k), bounds.get(("GFLOPS", k[5])))
        g = med[(a.ours, k)][0]
        if peak:
            print(f"| m={k[2]} n={k[3]} k={k[4]} | {k[5]} | {g:.1f} | {peak:.1f} | {g / peak:.0%} |")


if __name__ == "__main__":
    main()
