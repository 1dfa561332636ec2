#!/usr/bin/env bash
# Tunes a whole network (ResNet-18's 12 convolutions, bench/workloads/resnet18.txt, and
# BERT-base's 4 layer GEMMs, bench/workloads/bert_base_layers.txt) within a wall-time budget, then again with 10x that
# budget, and measures both bundles' schedules side by side (`cliffguard compare`):
# how close the short run gets to what ten times the time finds, per key.
#   bench/network.sh THREADS BUDGET_S       e.g. bench/network.sh 1 900
# Files in out/network/t<THREADS>/. Environment: CG_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:?usage: bench/network.sh THREADS BUDGET_S}
budget=${2:?usage: bench/network.sh THREADS BUDGET_S}
build=${CG_BUILD_DIR:-build}
cg=$build/tools/cliffguard
out=out/network/t$threads
mkdir -p "$out"
rm -f "$out"/short.jsonl "$out"/long.jsonl
cat bench/workloads/resnet18.txt bench/workloads/bert_base_layers.txt > "$out"/network.txt
common=(--workload "$out"/network.txt --constant-weights --threads "$threads" --strategy xgb
        --trials 100000 --seed 1)
run() {  # NAME BUDGET
  local start end
  start=$(date +%s)
  "$cg" tune "${common[@]}" --time-budget "$2" --log "$out/$1.jsonl" --out "$out/$1.cgb" > "$out/$1.txt"
  end=$(date +%s)
  echo "$1: budget $2 s, wall $((end - start)) s" | tee -a "$out"/summary.txt
}
: > "$out"/summary.txt
run short "$budget"
run long "$((budget * 10))"
"$cg" compare "$out"/short.cgb "$out"/long.cgb --rounds 8 | tee "$out"/compare.txt
