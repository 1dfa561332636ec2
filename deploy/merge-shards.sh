#!/bin/sh
# Merges the bundles of a sharded tuning run (tune-shard.sh) into one, once every
# shard has finished: refuses, naming them, while any of the N shards has not.
#
#   CG_SHARDS   the shard count, required
#   CG_OUT_DIR  the shared directory, required
#   CG_BUNDLE   the merged bundle (default: $CG_OUT_DIR/tuned.cgb)
#   CLIFFGUARD  the cliffguard binary (default: cliffguard on PATH)
set -eu
: "${CG_SHARDS:?merge-shards.sh: CG_SHARDS (the shard count) is required}"
: "${CG_OUT_DIR:?merge-shards.sh: CG_OUT_DIR (the shared directory) is required}"
cg=${CLIFFGUARD:-cliffguard}
missing=
bundles=
i=0
while [ "$i" -lt "$CG_SHARDS" ]; do
  [ -f "$CG_OUT_DIR/shard-$i.done" ] || missing="$missing $i"
  [ -f "$CG_OUT_DIR/shard-$i.cgb" ] && bundles="$bundles $CG_OUT_DIR/shard-$i.cgb"
  i=$((i + 1))
done
[ -z "$missing" ] || { echo "merge-shards.sh: shards not finished:$missing (of $CG_SHARDS)" >&2; exit 1; }
[ -n "$bundles" ] || { echo "merge-shards.sh: no shard wrote a bundle" >&2; exit 1; }
# shellcheck disable=SC2086
exec "$cg" merge $bundles -o "${CG_BUNDLE:-$CG_OUT_DIR/tuned.cgb}"
