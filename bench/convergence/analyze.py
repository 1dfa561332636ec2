#!/usr/bin/env python3
"""Convergence curves and the trials-to-95% table from tuning logs (run.sh).

For each shape the reference ("the best schedule any strategy found") is the
highest, over strategies, of the median over seeds of the run's final best GFLOP/s.
The single highest measurement of any run ("peak") is printed too, but not used:
on a loaded 2-core machine single measurements vary by 10-25%, so the peak is
mostly the luckiest measurement, which 95% of other runs rarely reach. For each run, best-so-far GFLOP/s after t trials (trial
records in trial-index order; failed trials add nothing). Trials to 95%: the first
t where best-so-far >= 0.95 * reference, or "> TRIALS" when never reached (counted as
TRIALS + 1 in the median, and reported with ">"). Medians are over seeds.
"""
import argparse, glob, json, os, re, statistics, sys
from collections import defaultdict

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--trials", type=int, default=120)
args = ap.parse_args()

runs = defaultdict(dict)  # (shape) -> {(strategy, seed): [gflops per trial index]}
keys = {}
for path in sorted(glob.glob(os.path.join(args.out, "logs", "*.jsonl"))):
    m = re.match(r"(.+)_([a-z]+)_s(\d+)\.jsonl$", os.path.basename(path))
    if not m:
        continue
    shape, strategy, seed = m.group(1), m.group(2), int(m.group(3))
    trials = {}
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a partial last line of a killed run
            if r.get("kind") != "trial":
                continue
            mm = re.search(r"m=(\d+) n=(\d+) k=(\d+)", r["key"])
            flops = 2.0 * int(mm.group(1)) * int(mm.group(2)) * int(mm.group(3))
            keys[shape] = r["key"]
            trials[r["trial"]] = flops / (r["median_us"] * 1e3) if "median_us" in r else 0.0
    runs[shape][(strategy, seed)] = [trials[i] for i in sorted(trials)][: args.trials]

strategies = ["xgb", "random", "ga", "grid"]
table = []
for shape in sorted(runs):
    peak = max(max(v) for v in runs[shape].values() if v)
    finals = defaultdict(list)
    for (st, seed), v in runs[shape].items():
        if v:
            finals[st].append(max(v))
    ref = max(statistics.median(v) for v in finals.values())
    curves = {}
    row = {"shape": keys[shape], "ref": ref, "peak": peak}
    for s in strategies:
        seeds = sorted(seed for (st, seed) in runs[shape] if st == s)
        if not seeds:
            continue
        need, per_seed_best = [], []
        bsf_all = []
        for seed in seeds:
            g = runs[shape][(s, seed)]
            bsf, best = [], 0.0
            for x in g:
                best = max(best, x)
                bsf.append(best)
            bsf_all.append(bsf)
            per_seed_best.append(best)
            hit = next((i + 1 for i, b in enumerate(bsf) if b >= 0.95 * ref), None)
            need.append(hit if hit is not None else args.trials + 1)
        n = min(len(b) for b in bsf_all)
        curves[s] = [statistics.median(b[t] for b in bsf_all) for t in range(n)]
        med = statistics.median(need)
        row[s] = (med, sum(1 for x in need if x <= args.trials), len(need), statistics.median(per_seed_best))
    table.append(row)
    with open(os.path.join(args.out, f"curves_{shape}.dat"), "w") as f:
        f.write(f"# {keys[shape]}: median over seeds of best-so-far GFLOP/s; reference (best strategy's median final best) {ref:.1f}, peak single measurement {peak:.1f}\n")
        f.write("# trial " + " ".join(s for s in strategies if s in curves) + "\n")
        n = max(len(c) for c in curves.values())
        for t in range(n):
            f.write(f"{t + 1} " + " ".join(f"{curves[s][t]:.2f}" if t < len(curves[s]) else "nan"
                                           for s in strategies if s in curves) + "\n")

def fmt_need(v):
    med, reached, total, _ = v
    txt = f"{med:g}" if med <= args.trials else f">{args.trials}"
    return f"{txt} ({reached}/{total})"

lines = ["| shape | reference GFLOP/s | peak | " + " | ".join(f"{s}: trials to 95%" for s in strategies) +
         " | " + " | ".join(f"{s}: final best" for s in strategies) + " |",
         "|" + "---|" * (3 + 2 * len(strategies))]
for row in table:
    lines.append(f"| {row['shape']} | {row['ref']:.1f} | {row['peak']:.1f} | " +
                 " | ".join(fmt_need(row[s]) if s in row else "-" for s in strategies) + " | " +
                 " | ".join(f"{row[s][3]:.1f}" if s in row else "-" for s in strategies) + " |")
ratio = []
def rel(a, b):
    """xgb's trials over another strategy's, as a bound when either is censored."""
    if a > args.trials and b > args.trials:
        return "n/a (neither reached 95%)"
    if b > args.trials:
        return f"< {a / b:.2f} (the other did not reach 95% in the median seed)"
    if a > args.trials:
        return f"> {a / b:.2f} (xgb did not reach 95% in the median seed)"
    return f"{a / b:.2f}"
for row in table:
    if "xgb" in row:
        ratio.append(f"{row['shape']}: " + ", ".join(f"xgb/{s} = {rel(row['xgb'][0], row[s][0])}"
                                                     for s in strategies[1:] if s in row))
# Random search draws independent points (uniform over the space, without
# replacement from a space of millions: independent for these budgets), so its
# trials to 95% are geometric with p = the chance that one draw reaches 95% of the
# reference. All its draws over all seeds estimate p far better than a median that
# is censored at the budget; the median of the geometric is ln 2 / -ln(1 - p). The
# bound uses the one-sided 95% upper confidence limit of p (exact binomial).
import math
def binom_cdf(k, n, p):
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) +
                        (n - i) * math.log1p(-p)) for i in range(k + 1))
def p_upper(k, n, alpha=0.05):
    lo, hi = k / n, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binom_cdf(k, n, mid) > alpha else (lo, mid)
    return hi
def geo_median(p):
    return math.inf if p <= 0 else max(1.0, math.log(2) / -math.log1p(-p))
draws = ["", "Random search as independent draws (all seeds pooled): draws reaching 95% of the reference, the "
         "median trials to 95% that this implies, the same at the 95% upper confidence limit of p (a lower bound "
         "on random's median), and xgb's median over that bound.", "",
         "| shape | draws | reaching 95% | random median trials (estimate) | random median trials (95% lower bound) | xgb median / estimate | xgb median / bound |",
         "|---|---|---|---|---|---|---|"]
for row in table:
    shape = next(sh for sh in runs if keys[sh] == row["shape"])
    pooled = [x for (st, seed), v in runs[shape].items() if st == "random" for x in v]
    if not pooled or "xgb" not in row:
        continue
    k = sum(1 for x in pooled if x >= 0.95 * row["ref"])
    est, bound = geo_median(k / len(pooled)), geo_median(p_upper(k, len(pooled)))
    xgb_med = row["xgb"][0]
    over = lambda d: ("0 (no draw reached it)" if math.isinf(d) else
                      f"{xgb_med / d:.2f}" if xgb_med <= args.trials else f"> {xgb_med / d:.2f}")
    est_txt = "unbounded (no draw reached it)" if math.isinf(est) else f"{est:.0f}"
    draws.append(f"| {row['shape']} | {len(pooled)} | {k} | {est_txt} | {bound:.0f} | {over(est)} | {over(bound)} |")

text = ("Trials to reach 95% of the reference (the best strategy's median-over-seeds final best GFLOP/s; "
        "peak = the single highest measurement of any run, for comparison): median over seeds "
        "(in parentheses: seeds that reached it within the budget; a seed that never reached it counts as "
        f"{args.trials + 1}). Final best: median over seeds of the best GFLOP/s after {args.trials} trials.\n\n"
        + "\n".join(lines) + "\n\n" + "\n".join(ratio) + "\n" + "\n".join(draws) + "\n")
with open(os.path.join(args.out, "table.md"), "w") as f:
    f.write(text)
print(text)
