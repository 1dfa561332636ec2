#!/usr/bin/env python3
"""torch.matmul beside cliffguard's cuBLAS default and tuned pick, one row per key.

usage: device_check_torch.py WORKLOAD BUNDLE_JSON

WORKLOAD: canonical gemm keys (layout nt: x is m x k, the weights n x k), one per line.
BUNDLE_JSON: `cliffguard inspect --json` of the tuned bundle; its entries carry the
tuner's interleaved confirmation medians of the tuned schedule and of the default.
torch.matmul(x, w.t()) is timed the way the tuner times: the L2 flushed (a write of
twice its size) before each call, CUDA events around the call, the median of 50.
"""
import json
import re
import sys

import torch


def parse_key(line):
    m = re.match(r"gemm (\w+) nt m=(\d+) n=(\d+) k=(\d+)", line.strip())
    if not m:
        raise SystemExit(f"workload line '{line.strip()}' is not a 'gemm <dtype> nt m= n= k=' key")
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))


def time_torch(dtype, m, n, k, flush, reps=50):
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    x = torch.rand(m, k, device="cuda", dtype=tdt) * 2 - 1
    w = torch.rand(n, k, device="cuda", dtype=tdt) * 2 - 1
    for _ in range(5):
        torch.matmul(x, w.t())
    times = []
    for _ in range(reps):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(x, w.t())
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    keys = [parse_key(l) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
    bundle = json.load(open(sys.argv[2]))
    entries = {}
    for e in bundle["entries"]:
        entries[e["key"]] = e
    # PyTorch's default: full f32 matmul (TF32 off), as the f32 keys are tuned.
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * max(props.L2_cache_size, 8 << 20), dtype=torch.uint8, device="cuda")
    print(f"device: {props.name}, torch {torch.__version__}; times in us (median), TFLOP/s in parentheses\n")
    print("| key | cuBLAS default | tuned | torch.matmul | tuned / default | tuned / torch | tuned pick |")
    print("|---|---|---|---|---|---|---|")
    small = []
    for dtype, m, n, k in keys:
        key = f"gemm {dtype} nt m={m} n={n} k={k}"
        flop = 2.0 * m * n * k
        t_torch = time_torch(dtype, m, n, k, flush)
        e = entries.get(key)
        if e is None:
            print(f"| {key} | - | - | {t_torch:.1f} ({flop / t_torch / 1e6:.1f}) | - | - | not tuned |")
            continue
        d, t = e["default_us"], e["tuned_us"]
        params = " ".join(f"{p}={v}" for p, v in e["schedule"]["params"].items() if p != "cublas")
        pick = f"{e['schedule']['variant']} {params}".strip()
        print(f"| {key} | {d:.1f} ({flop / d / 1e6:.1f}) | {t:.1f} ({flop / t / 1e6:.1f}) | "
              f"{t_torch:.1f} ({flop / t_torch / 1e6:.1f}) | {d / t:.3f} | {t_torch / t:.3f} | {pick} |")
        if m <= 16:
            small.append(d / t)
    if small:
        g = 1.0
        for s in small:
            g *= s
        print(f"\ngeomean tuned / default over m <= 16: {g ** (1 / len(small)):.3f} ({len(small)} keys)")


if __name__ == "__main__":
    main()
