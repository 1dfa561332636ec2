#!/usr/bin/env python3
"""Side-by-side table of bench_conv's JSON output (one run).

  build/bench/bench_conv --benchmark_out=conv.json --benchmark_out_format=json \\
      [--benchmark_repetitions=5 --benchmark_enable_random_interleaving=true]
  bench/conv_table.py conv.json [--markdown]

Per thread count and ResNet-18 layer: GFLOP/s of default, tuned and onednn, the
ratios tuned/onednn and default/onednn, and onednn as a fraction of the FMA peak
measured at the start of the run (context fma_peak_gflops_<t>t); then the geometric
mean of each ratio over the layers that have both rows. With repetitions, the median
of each row is used. A missing row (skipped: no built-in default, no tuned entry, a
build without oneDNN) shows as '-'.
"""
import argparse
import collections
import json
import math
import re
import statistics
import sys

ROW = re.compile(r"^(?P<who>default|tuned|onednn)/(?P<layer>C\d+)/h=(?P<h>\d+)/ic=(?P<ic>\d+)/oc=(?P<oc>\d+)"
                 r"/k=(?P<k>\d+)/s=(?P<s>\d+)/threads:(?P<t>\d+)")
WHO = ("default", "tuned", "onednn")


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = collections.defaultdict(list)
    labels, shapes = {}, {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        m = ROW.match(b["name"])
        if not m or "GFLOPS" not in b:
            continue
        key = (m["who"], int(m["t"]), m["layer"])
        runs[key].append(b["GFLOPS"])
        labels[key] = b.get("label", "")
        shapes[m["layer"]] = f"{m['h']}x{m['h']} {m['ic']}->{m['oc']} k{m['k']} s{m['s']}"
    peaks = {}
    for name, value in data.get("context", {}).items():
        pm = re.fullmatch(r"fma_peak_gflops_(\d+)t", name)
        if pm:
            peaks[int(pm[1])] = float(value)
    return {k: statistics.median(v) for k, v in runs.items()}, labels, shapes, peaks


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def layer_order(name):
    return int(name[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--markdown", action="store_true", help="markdown tables (for bench/RESULTS.md)")
    ap.add_argument("--labels", action="store_true", help="also list each row's schedule or oneDNN implementation")
    a = ap.parse_args()
    med, labels, shapes, peaks = load(a.json)
    if not med:
        sys.exit(f"no bench_conv rows in {a.json}")
    threads = sorted({t for (_, t, _) in med})
    head = ["layer", "shape", "default", "tuned", "onednn", "tuned/onednn", "default/onednn", "onednn/peak"]
    for t in threads:
        peak = peaks.get(t)
        print(f"threads={t}  (GFLOP/s; FMA peak {f'{peak:.1f}' if peak else 'not measured'} GFLOP/s)")
        rows, r_tuned, r_default = [], [], []
        for layer in sorted({l for (_, tt, l) in med if tt == t}, key=layer_order):
            g = {w: med.get((w, t, layer)) for w in WHO}
            one = g["onednn"]
            rt = g["tuned"] / one if g["tuned"] and one else None
            rd = g["default"] / one if g["default"] and one else None
            if rt:
                r_tuned.append(rt)
            if rd:
                r_default.append(rd)
            rows.append([layer, shapes[layer]] + [f"{g[w]:.1f}" if g[w] else "-" for w in WHO] +
                        [f"{rt:.2f}x" if rt else "-", f"{rd:.2f}x" if rd else "-",
                         f"{one / peak:.0%}" if one and peak else "-"])
        rows.append(["geomean", f"{len(r_tuned)}/{len(r_default)} layers", "", "", "",
                     f"{geomean(r_tuned):.2f}x" if r_tuned else "-",
                     f"{geomean(r_default):.2f}x" if r_default else "-", ""])
        if a.markdown:
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
            for r in rows:
                print("| " + " | ".join(r) + " |")
        else:
            width = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
            print("  ".join(h.rjust(w) if i > 1 else h.ljust(w) for i, (h, w) in enumerate(zip(head, width))))
            for r in rows:
                print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, width))))
        if a.labels:
            for layer in sorted({l for (_, tt, l) in med if tt == t}, key=layer_order):
                for w in WHO:
                    if (w, t, layer) in labels:
                        print(f"  {layer} {w}: {labels[(w, t, layer)]}")
        print()


if __name__ == "__main__":
    main()
