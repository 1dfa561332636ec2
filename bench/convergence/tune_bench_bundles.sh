#!/usr/bin/env bash
# Tunes the bench_tuned_gemm shapes (bench_gemm_shapes.txt) at 1 and 2 threads and
# runs bench_tuned_gemm on the two bundles, warm and --cold (a bundle holds one device, and the
# thread budget is part of the device).
#
# Usage: bench/convergence/tune_bench_bundles.sh [BUILD_DIR] [OUT_DIR]
# Environment: TRIALS (64), STRATEGY (xgb), MIN_TIME_MS (30), BENCH_MIN_TIME (0.5s).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build-tune}"
out="${2:-$here/data/tuned}"
mkdir -p "$out"
for t in 1 2; do
  args=(tune --workload "$here/bench_gemm_shapes.txt" --threads "$t" --trials "${TRIALS:-64}"
        --strategy "${STRATEGY:-xgb}" --seed 1 --min-time-ms "${MIN_TIME_MS:-30}"
        --log "$out/tune_t$t.jsonl" --out "$out/tuned_t$t.cgb")
  [[ -s "$out/tune_t$t.jsonl" ]] && args+=(--resume)
  "$build/tools/cliffguard" "${args[@]}" 2> "$out/tune_t$t.stderr" | tee "$out/tune_t$t.summary.txt"
done
# warm: one buffer set; cold: rotated copies, as the tuner measured (see the bench header).
for mode in warm cold; do
  flag=(); suffix=""
  [[ $mode == cold ]] && flag=(--cold) && suffix="_cold"
  CG_BUNDLE="$out/tuned_t1.cgb,$out/tuned_t2.cgb" "$build/bench/bench_tuned_gemm" "${flag[@]}" \
    --benchmark_min_time="${BENCH_MIN_TIME:-0.5s}" --benchmark_out="$out/bench_tuned_gemm$suffix.json" \
    --benchmark_out_format=json 2>&1 | tee "$out/bench_tuned_gemm$suffix.txt"
  python3 "$here/bench_table.py" "$out/bench_tuned_gemm$suffix.json" > "$out/bench_table$suffix.md"
done
