#!/usr/bin/env bash
# A real Prometheus server scrapes examples/serve's /metrics on 127.0.0.1; the miss
# counter it stored (read back through its HTTP API) must equal the runtime's own
# count, and promtool must accept the exposition text.
#   prometheus_test.sh SERVE_BINARY
# Exit 77 (skipped) when prometheus is not installed (Debian: prometheus).
set -euo pipefail
serve=$1
command -v prometheus >/dev/null && command -v promtool >/dev/null || { echo "prometheus not installed: skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/cg_prom.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
await() {  # await SECONDS COMMAND...: until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

CLIFFGUARD_LOG_LEVEL=error "$serve" --metrics-port 0 --hold-seconds 300 >"$work/serve.log" 2>&1 &
pids+=($!)
await 60 grep -q '^[0-9]* calls, [0-9]* hits, [0-9]* misses' "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
port=$(sed -n 's|^metrics: http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$work/serve.log")
misses=$(sed -n 's/^[0-9]* calls, [0-9]* hits, \([0-9]*\) misses$/\1/p' "$work/serve.log")
[[ -n $port && $misses -gt 0 ]] || { echo "serve printed no port or no misses"; cat "$work/serve.log"; exit 1; }

get "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
promtool check metrics <"$work/metrics.txt"
own=$(awk '/^cliffguard_misses_total\{/ {s += $2} END {print s}' "$work/metrics.txt")
[[ $own == "$misses" ]] || { echo "exposition says $own misses, the runtime $misses"; exit 1; }

prom_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: cliffguard_serve
    static_configs: [{targets: ["127.0.0.1:$port"]}]
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)
query() {
  get "http://127.0.0.1:$prom_port/api/v1/query?query=sum(cliffguard_misses_total)" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
stored_equals() { [[ $(query) == "$misses" ]]; }
if ! await 90 stored_equals; then
  echo "Prometheus stored '$(query 2>/dev/null || true)' misses, the runtime counted $misses"
  tail -n 20 "$work/prometheus.log"
  exit 1
fi
echo "Prometheus scraped cliffguard_misses_total = $misses, the runtime's own count"
