#!/usr/bin/env bash
# make bench-mem: peak resident memory of `trellara run --local --verify`
# applying one large transaction (BenchmarkRunLocalMemory, ./internal/flow),
# on throwaway source and target clusters, each size on fresh clusters.
# Sizes (environment):
#   TRELLARA_MEM_ROWS=1500000,4500000   rows of the one transaction, comma list
#                                       (≈ 60 bytes of row data per row; 15000000
#                                       takes about 10 minutes on 2 cores)
#   TRELLARA_MEM_SOURCE_MEMORY=64MiB    the flow's source.memory_bytes_max
#   TRELLARA_MEM_OUT=1                  print the child's output
# GOMEMLIMIT in the environment reaches the child and overrides the limit
# the run derives from its configuration. Needs bin/trellara (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
export TRELLARA_MEM_ROWS="${TRELLARA_MEM_ROWS:-1500000,4500000}"
export TRELLARA_BIN="${TRELLARA_BIN:-$PWD/bin/trellara}"
[ -x "$TRELLARA_BIN" ] || { echo "bench-mem: $TRELLARA_BIN missing: run make build" >&2; exit 1; }
echo "== machine: $(nproc) cores · $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) · $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') · kernel $(uname -r) · $(date -u +%F)"
echo "== $("$TRELLARA_BIN" --version 2>/dev/null | head -n1) ($TRELLARA_BIN) · $(go version | cut -d' ' -f3)"
echo "== rows: $TRELLARA_MEM_ROWS · load before: $(uptime)"
go test -run '^$' -bench 'RunLocalMemory$' -count=1 -benchtime 1x -v -timeout 120m ./internal/flow 2>&1 |
	grep -E '^(Benchmark|ok|FAIL|---|panic|\s+mem_bench_test)' | sed 's/^\s*mem_bench_test.go:[0-9]*: /   /'
echo "== load after: $(uptime)"
