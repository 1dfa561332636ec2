#!/usr/bin/env python3
"""Markdown table from bench_tuned_gemm --benchmark_out JSON: GFLOP/s of tuned,
default and OpenBLAS per shape and thread count, and the ratios."""
import json, re, sys
from collections import defaultdict

data = json.load(open(sys.argv[1]))
rows = defaultdict(dict)
for b in data["benchmarks"]:
    m = re.match(r"(tuned|default|openblas)/m=(\d+)/n=(\d+)/k=(\d+)/threads=(\d+)", b["name"])
    if m and "GFLOPS" in b:
        rows[(int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))][m.group(1)] = b["GFLOPS"]
ctx = data.get("context", {})
print(f"OpenBLAS core: {ctx.get('openblas_core', '?')}; buffers: {ctx.get('buffers', 'warm (one set)')}; "
      f"load average at start: {ctx.get('load_avg', '?')}\n")
print("| m | n | k | threads | tuned GFLOP/s | default GFLOP/s | OpenBLAS GFLOP/s | tuned/default | tuned/OpenBLAS |")
print("|---|---|---|---|---|---|---|---|---|")
for key in sorted(rows, key=lambda k: (k[3], k[0], k[1], k[2])):
    r = rows[key]
    t, d, o = r.get("tuned"), r.get("default"), r.get("openblas")
    f = lambda x: f"{x:.1f}" if x else "-"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {f(t)} | {f(d)} | {f(o)} | {ratio(t, d)} | {ratio(t, o)} |")

# Geometric means over the shapes, per thread count (the issue's "at least 1.0x
# OpenBLAS in geometric mean over the inference shapes").
import math
print()
print("| threads | shapes | geomean tuned/default | geomean tuned/OpenBLAS |")
print("|---|---|---|---|")
for threads in sorted({k[3] for k in rows}):
    rs = [rows[k] for k in rows if k[3] == threads and all(rows[k].get(x) for x in ("tuned", "default", "openblas"))]
    if not rs:
        continue
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print(f"| {threads} | {len(rs)} | {gm([r['tuned'] / r['default'] for r in rs]):.2f} | "
          f"{gm([r['tuned'] / r['openblas'] for r in rs]):.2f} |")
