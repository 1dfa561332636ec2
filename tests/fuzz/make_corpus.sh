#!/usr/bin/env bash
# Regenerates the seed corpora under tests/fuzz/corpus/ from real files written by
# the `cliffguard` command line (pack, run --miss-report) on this host.
#   tests/fuzz/make_corpus.sh path/to/cliffguard
# Seeds are committed; rerun only when the formats change.
set -euo pipefail
cli=${1:?usage: make_corpus.sh path/to/cliffguard}
here=$(cd "$(dirname "$0")" && pwd)
c=$here/corpus
mkdir -p "$c"/{fuzz_bundle_load,fuzz_bundle_json,fuzz_miss_report,fuzz_workload,fuzz_tuning_log}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

dev=$("$cli" device --threads 2 --json)
python3 - "$dev" "$c/fuzz_bundle_json" <<'PY'
import json, sys, copy, os
dev = json.loads(sys.argv[1]); out = sys.argv[2]
def sched(variant, **p): return {"variant": variant, "params": p}
def entry(key, s, tuned=10.0, default=20.0, trials=8):
    return {"key": key, "schedule": s, "tuned_us": tuned, "default_us": default, "trials": trials,
            "tuned_at": 1764489600, "provenance": "make_corpus.sh"}
isa = dev["arch"]
v = {"avx512": "cpu_f32_gemm_14x32__avx512", "avx2": "cpu_f32_gemm_6x16__avx2"}.get(isa, "cpu_f32_gemm_4x4__scalar")
base = {"schema_version": 1, "producer": "cliffguard", "producer_version": "0.1.0", "created_at": 1764489600,
        "device": dev, "entries": [], "defaults": []}
specs = {}
b = copy.deepcopy(base)
b["entries"] = [
  entry("gemm f32 nn m=1 n=1 k=1", sched("cpu_f32_gemm_4x4__scalar")),
  entry("gemm f32 nn m=16 n=32 k=24", sched(v, mc=14 if "14x32" in v else 8, kc=16, nc=32 if "14x32" in v else 16, threads=2, par=2)),
  entry("gemm f32 nt m=7 n=9 k=33", sched("cpu_f32_gemm_4x4__scalar", mc=4, kc=32, nc=4, pack_a=0, pack_b=1, unroll_k=8, prefetch=0)),
  entry("gemm f32 tn m=40 n=17 k=5", sched("cpu_f32_gemm_4x4__scalar", mc=8, kc=16, nc=8, par=1, threads=2, pack_a=0, pack_b=0)),
  entry("gemm f32 tt m=3 n=48 k=48", sched("cpu_f32_gemm_4x4__scalar", unroll_k=2, prefetch=16)),
  entry("gemm f32 nn m=128 n=768 k=768", sched(v), 800.0, 1200.0, 64),
]
b["defaults"] = [{"op": "gemm", "dtype": "f32", "schedule": sched("cpu_f32_gemm_4x4__scalar", mc=16, kc=64)}]
b["cost_model"] = {"format": "xgboost-json", "base64": "eyJ2ZXJzaW9uIjogWzEsIDcsIDRdfQ=="}
specs["host_mixed"] = b
b = copy.deepcopy(base)
b["entries"] = [
  entry("gemm f32 nn m=8 n=8 k=8", sched("cpu_f32_gemm_does_not_exist")),
  entry("gemm f32 nn m=9 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar", mc=5)),
  entry("gemm f32 nn m=10 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar", bogus=1)),
  entry("gemm f32 nn m=11 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar", threads=64)),
  entry("gemm f32 nt m=12 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar", pack_b=0)),
  entry("gemm f32 nn m=8 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar")),
  entry("gemm f16 nn m=8 n=8 k=8", sched("cpu_f32_gemm_4x4__scalar")),
  entry("conv2d f32 nhwc n=1 h=8 w=8 ic=4 oc=4 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1", sched("cpu_f32_gemm_4x4__scalar")),
]
b["defaults"] = [{"op": "gemm", "dtype": "f32", "schedule": sched("cpu_f32_gemm_4x4__scalar", threads=64)}]
specs["host_rejected"] = b
b = copy.deepcopy(base)
specs["host_empty"] = b
b = copy.deepcopy(base)
b["device"] = {"backend": "cuda", "name": "NVIDIA H100", "vendor": "NVIDIA", "arch": "sm_90",
               "properties": {"sms": 132, "memory_bytes": 85899345920}, "fingerprint": "cuda-sm_90-0123456789abcdef"}
b["entries"] = [entry("gemm f32 nn m=16 n=3072 k=768", sched("cuda_f16_gemm_128x128x32_s3__sm80", stages=3))]
specs["other_device"] = b
b = copy.deepcopy(base)
b["entries"] = [entry("gemm f32 nn m=%d n=768 k=768" % m, sched(v), 10.0 + m, 20.0 + m) for m in (1, 2, 4, 16, 64, 384)]
specs["host_bert"] = b
# conv2d entries: the host's direct variant with every parameter set, the portable
# reference, a constant-weights key, an op default, and one bad parameter.
cv = {"avx512": ("cpu_f32_conv2d_direct_64x6__avx512", 64), "avx2": ("cpu_f32_conv2d_direct_16x6__avx2", 16)}.get(
    isa, ("cpu_f32_conv2d_ref__scalar", 0))
b = copy.deepcopy(base)
direct = sched(cv[0], oc_block=cv[1] * 2, ic_block=32, rows=4, loop=1, pad_copy=1, par=1, threads=2) if cv[1] else sched(cv[0])
b["entries"] = [
  entry("conv2d f32 nhwc n=1 h=56 w=56 ic=64 oc=64 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1", direct, 900.0, 1100.0, 32),
  entry("conv2d f32 nhwc n=1 h=56 w=56 ic=64 oc=128 kh=1 kw=1 sh=2 sw=2 ph=0 pw=0 weights=constant",
        sched(cv[0], ic_block=64) if cv[1] else sched(cv[0])),
  entry("conv2d f32 nhwc n=3 h=7 w=9 ic=5 oc=17 kh=5 kw=3 sh=3 sw=1 ph=2 pw=1", sched("cpu_f32_conv2d_ref__scalar")),
  entry("conv2d f32 nhwc n=1 h=8 w=8 ic=4 oc=4 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1", sched(cv[0], threads=3)),
  entry("gemm f32 nn m=16 n=32 k=24", sched(v)),
]
b["defaults"] = [{"op": "conv2d", "dtype": "f32", "schedule": sched("cpu_f32_conv2d_ref__scalar")}]
specs["host_conv"] = b
for name, s in specs.items():
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(s, f, indent=2); f.write("\n")
PY
for f in "$c"/fuzz_bundle_json/*.json; do
  # --no-validate: some seeds hold entries this build rejects, on purpose.
  "$cli" pack --no-validate "$f" -o "$c/fuzz_bundle_load/$(basename "$f" .json).cgb" >/dev/null
done
# An older-schema-compatible minimum and a truncated file (verification must refuse it).
head -c 100 "$c/fuzz_bundle_load/host_mixed.cgb" > "$c/fuzz_bundle_load/truncated.cgb"

"$cli" run --threads 2 --bundle "$c/fuzz_bundle_load/host_mixed.cgb" --shape 1,1,1 --shape 16,32,24 --shape 5,6,7,nt \
  --shape 33,17,9,tt --iters 3 --miss-report "$c/fuzz_miss_report/mixed.json" >/dev/null 2>&1
"$cli" run --threads 2 --shape 4,4,4 --iters 2 --miss-report "$c/fuzz_miss_report/device_miss.json" >/dev/null 2>&1
"$cli" run --threads 2 --bundle "$c/fuzz_bundle_load/host_rejected.cgb" --shape 8,8,8 --shape 9,8,8 --iters 2 \
  --miss-report "$c/fuzz_miss_report/rejected.json" >/dev/null 2>&1
"$cli" run --threads 2 --bundle "$c/fuzz_bundle_load/host_mixed.cgb" --shape 1,1,1 --iters 2 \
  --miss-report "$c/fuzz_miss_report/no_misses.json" >/dev/null 2>&1
"$cli" run --threads 2 --bundle "$c/fuzz_bundle_load/host_conv.cgb" --shape 1,8,8,4,4,3,1 --shape 2,9,7,3,5,3,2 \
  --shape 1,6,6,8,8,1,1,0 --iters 2 --miss-report "$c/fuzz_miss_report/conv.json" >/dev/null 2>&1

cat > "$c/fuzz_workload/plain.txt" <<'W'
# BERT-base FFN
gemm f32 nn m=128 n=3072 k=768

gemm f32 nt m=16 n=768 k=768
gemm f32 nn m=128 n=3072 k=768
conv2d f32 nhwc n=1 h=56 w=56 ic=64 oc=64 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1
W
printf '["gemm f32 nn m=128 n=3072 k=768", "gemm f32 tt m=1 n=2 k=3"]\n' > "$c/fuzz_workload/array.json"
printf '16,3072,768,nt' > "$c/fuzz_workload/shape.txt"
cat > "$c/fuzz_workload/conv.txt" <<'W'
# ResNet-18 C1, C5 (N,H,W,IC,OC,K,S[,P]) and a canonical conv2d key with constant weights
1,224,224,3,64,7,2
1,56,56,64,128,1,2,0
conv2d f32 nhwc n=1 h=7 w=7 ic=512 oc=512 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1 weights=constant
W

python3 - "$c/fuzz_tuning_log" "$(echo "$dev" | python3 -c 'import json,sys; print(json.load(sys.stdin)["fingerprint"])')" <<'PY'
import json, sys, os
out, fp = sys.argv[1], sys.argv[2]
def rec(kind, trial, ok=True, **extra):
    r = {"v": 1, "kind": kind, "key": "gemm f32 nn m=16 n=32 k=24", "device": fp,
         "schedule": {"variant": "cpu_f32_gemm_4x4__scalar", "params": {"mc": 8, "kc": 16, "nc": 8, "threads": 1}},
         "strategy": "default" if kind == "default" else "xgb", "seed": 1, "trial": trial, "ts": 1764489600.25 + trial}
    if ok: r["median_us"] = 12.5 + trial
    else: r["error"] = "wrong result: max rel error 3.0e-01 > tol 1.0e-05"
    r.update(extra); return json.dumps(r)
lines = [rec("default", -1), rec("trial", 0), rec("trial", 1, ok=False), rec("remeasure", -1), rec("cross", -1)]
open(os.path.join(out, "log.jsonl"), "w").write("\n".join(lines) + "\n")
open(os.path.join(out, "partial_last.jsonl"), "w").write("\n".join(lines) + "\n" + lines[1][:40])
open(os.path.join(out, "one.jsonl"), "w").write(lines[1] + "\n")
conv = rec("trial", 2, key="conv2d f32 nhwc n=1 h=14 w=14 ic=32 oc=32 kh=3 kw=3 sh=1 sw=1 ph=1 pw=1 weights=constant",
           schedule={"variant": "cpu_f32_conv2d_ref__scalar", "params": {"threads": 1}})
open(os.path.join(out, "conv.jsonl"), "w").write(conv + "\n" + lines[0] + "\n")
PY
echo "seed corpora written under $c"
