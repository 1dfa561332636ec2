#!/bin/sh
# One shard of a sharded tuning run: `cliffguard tune --shard I/N` over a workload,
# writing shard-I.cgb and shard-I.jsonl (the tuning log) into a shared directory,
# then shard-I.done. A restarted shard resumes its log without repeating a
# measurement. Engines start N copies with an index (deploy/kubernetes, deploy/slurm);
# merge-shards.sh then combines them.
#
#   shard index  CG_SHARD_INDEX, else JOB_COMPLETION_INDEX (Kubernetes Indexed Job),
#                else SLURM_ARRAY_TASK_ID (Slurm array job)
#   shard count  CG_SHARDS, else SLURM_ARRAY_TASK_COUNT
#   CG_WORKLOAD  the workload file (op keys, one per line), required
#   CG_OUT_DIR   the shared directory, required
#   CG_TUNE_ARGS more `tune` options (e.g. "--trials 64 --threads 2")
#   CLIFFGUARD   the cliffguard binary (default: cliffguard on PATH)
set -eu
i=${CG_SHARD_INDEX:-${JOB_COMPLETION_INDEX:-${SLURM_ARRAY_TASK_ID:-}}}
n=${CG_SHARDS:-${SLURM_ARRAY_TASK_COUNT:-}}
[ -n "$i" ] || { echo "tune-shard.sh: no shard index (CG_SHARD_INDEX, JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID)" >&2; exit 2; }
[ -n "$n" ] || { echo "tune-shard.sh: no shard count (CG_SHARDS or SLURM_ARRAY_TASK_COUNT)" >&2; exit 2; }
: "${CG_WORKLOAD:?tune-shard.sh: CG_WORKLOAD (the workload file) is required}"
: "${CG_OUT_DIR:?tune-shard.sh: CG_OUT_DIR (the shared directory) is required}"
cg=${CLIFFGUARD:-cliffguard}
log=$CG_OUT_DIR/shard-$i.jsonl
resume=
[ -f "$log" ] && resume=--resume
rm -f "$CG_OUT_DIR/shard-$i.done"
# shellcheck disable=SC2086
"$cg" tune --workload "$CG_WORKLOAD" --shard "$i/$n" --log "$log" --out "$CG_OUT_DIR/shard-$i.cgb" $resume ${CG_TUNE_ARGS:-}
echo "$n" > "$CG_OUT_DIR/shard-$i.done"
