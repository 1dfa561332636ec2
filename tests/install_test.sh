#!/usr/bin/env bash
# Installs cliffguard into a temporary prefix and builds and runs examples/serve
# against the installed package (find_package(cliffguard)).
set -euo pipefail
build_dir=$1
src_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir/examples/serve" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j2 >/dev/null
out=$("$work/build/serve")
echo "$out" | head -8
grep -q "60 calls, 0 hits, 60 misses" <<<"$out"
grep -q '"kind": "device_miss"' <<<"$out"
echo "install test: ok"
