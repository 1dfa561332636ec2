#!/usr/bin/env bash
# Tunes the three bundles bench_dynamic compares for one thread budget, then replays
# the trace through them. Files in out/dynamic/<FAMILIES>/t<THREADS>/ (e.g. nt-768-768/t1).
#   bench/dynamic.sh THREADS [FAMILIES]     (FAMILIES as bench_dynamic --families; default nt:768:768)
# Environment: CG_BUILD_DIR (default build), CG_TRIALS (default 16 per key), CG_ROUNDS
# (replay rounds, default 5). Per-m medians of every policy go to times.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:?usage: bench/dynamic.sh THREADS [FAMILIES]}
families=${2:-nt:768:768}
build=${CG_BUILD_DIR:-build}
trials=${CG_TRIALS:-16}
out=out/dynamic/$(echo "$families" | tr ":," "-_")/t$threads
mkdir -p "$out"
bd=$build/bench/bench_dynamic
cg=$build/tools/cliffguard
"$bd" --families="$families" --print_oracle > "$out"/oracle.txt
"$bd" --families="$families" --print_top=8 > "$out"/top8.txt
# One key per family at m=1: `--buckets` tunes every range's representative.
grep ' m=1 ' "$out"/oracle.txt > "$out"/families.txt
# One log for the three runs: a key tuned by an earlier run is not measured again.
common=(--threads "$threads" --trials "$trials" --log "$out"/tune.jsonl --resume --no-bundle-default)
"$cg" tune --workload "$out"/oracle.txt "${common[@]}" --out "$out"/oracle.cgb
"$cg" tune --workload "$out"/top8.txt "${common[@]}" --out "$out"/top8.cgb
"$cg" tune --workload "$out"/families.txt --buckets m:pow2:2048 "${common[@]}" --out "$out"/buckets.cgb
rm -f "$out"/times.csv
CLIFFGUARD_THREADS=$threads "$bd" --families="$families" --threads="$threads" --rounds="${CG_ROUNDS:-5}" \
  --exact="$out"/top8.cgb --buckets="$out"/buckets.cgb --oracle="$out"/oracle.cgb --dump="$out"/times.csv |
  tee "$out"/bench_dynamic.txt
