#!/usr/bin/env bash
# Convergence of the search strategies: best GFLOP/s found vs trials measured.
#
# For every shape, strategy and seed, one `cliffguard tune` run on that shape alone
# (a fresh cost model each time, so no transfer between shapes), logging every
# measurement. analyze.py then turns the logs into curves (curves_*.dat), the
# trials-to-95% table (table.md) and plot.gp draws convergence.png.
#
# Usage: bench/convergence/run.sh [CLI] [OUT_DIR]
#   CLI      cliffguard binary (default: build-tune/tools/cliffguard, then build/tools/cliffguard)
#   OUT_DIR  where logs and results go (default: bench/convergence/data-$TRIALS)
# Environment: TRIALS (200), SEEDS ("1 2 3 4 5"), STRATEGIES ("xgb random ga grid"),
#   MIN_TIME_MS (5), BATCH (8), THREADS (1: one core, so the second absorbs other load),
#   SHAPES ("16,3072,768 128,768,768 128,768,3072 256,256,256").
# Committed results: data-200/ (the default settings) and data/ (an earlier run with
# TRIALS=120, same other settings). Raw logs are in logs.tar.gz there.
# A killed run is continued with --resume on the next invocation; finished runs are skipped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cli="${1:-}"
if [[ -z "$cli" ]]; then
  for c in "$root/build-tune/tools/cliffguard" "$root/build/tools/cliffguard"; do
    [[ -x "$c" ]] && cli="$c" && break
  done
fi
[[ -x "$cli" ]] || { echo "run.sh: cliffguard binary not found; pass it as the first argument" >&2; exit 2; }
TRIALS="${TRIALS:-200}"
out="${2:-$here/data-$TRIALS}"
SEEDS="${SEEDS:-1 2 3 4 5}"
STRATEGIES="${STRATEGIES:-xgb random ga grid}"
MIN_TIME_MS="${MIN_TIME_MS:-5}"
BATCH="${BATCH:-8}"
THREADS="${THREADS:-1}"
SHAPES="${SHAPES:-16,3072,768 128,768,768 128,768,3072 256,256,256}"
mkdir -p "$out/logs" "$out/bundles"
"$cli" device > "$out/device.txt" 2>&1 || true
echo "cli=$cli trials=$TRIALS seeds=[$SEEDS] strategies=[$STRATEGIES] min_time_ms=$MIN_TIME_MS batch=$BATCH threads=$THREADS shapes=[$SHAPES]" | tee "$out/settings.txt"
start=$(date +%s)
for shape in $SHAPES; do
  for strategy in $STRATEGIES; do
    for seed in $SEEDS; do
      name="${shape//,/x}_${strategy}_s${seed}"
      log="$out/logs/$name.jsonl"
      done_trials=0
      [[ -f "$log" ]] && done_trials=$(grep -c '"kind":"trial"' "$log" || true)
      if [[ -f "$out/bundles/$name.cgb" && "$done_trials" -ge "$TRIALS" ]]; then continue; fi
      resume=()
      [[ -s "$log" ]] && resume=(--resume)
      t0=$(date +%s)
      "$cli" tune --op gemm --shape "$shape" --trials "$TRIALS" --strategy "$strategy" --seed "$seed" \
        --batch "$BATCH" --threads "$THREADS" --min-time-ms "$MIN_TIME_MS" --no-bundle-default \
        --log "$log" --out "$out/bundles/$name.cgb" "${resume[@]}" > "$out/logs/$name.summary.txt" 2>/dev/null
      echo "$name: $(( $(date +%s) - t0 )) s (total $(( $(date +%s) - start )) s)"
    done
  done
done
python3 "$here/analyze.py" "$out" --trials "$TRIALS"
if command -v gnuplot > /dev/null; then
  (cd "$out" && gnuplot "$here/plot.gp")
  echo "plot: $out/convergence.png"
fi
