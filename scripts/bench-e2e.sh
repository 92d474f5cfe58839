#!/usr/bin/env bash
# make bench-e2e: end-to-end comparison with native logical replication on
# throwaway clusters, in ABBA order (native, trellara, trellara, native per
# round), every run printed with the range and the per-pair ratio:
#   1. catch-up of a pgbench TPC-B backlog (BenchmarkApplyVsNativeReplication)
#   2. the same with source.capture: extension (BenchmarkApplyVsNativeExtension)
#   3. commit-to-apply p50/p99 under a steady source rate (BenchmarkSteadyLatency)
# Every catch-up run also reports the CPU seconds it cost per 100k
# transactions (source cluster, target cluster, trellara process), which a
# loaded machine distorts far less than the wall-clock rate.
# Sizes (environment, defaults are the published configuration):
#   TRELLARA_BENCH_TXNS=100000   backlog transactions
#   TRELLARA_BENCH_SCALE=10      pgbench scale (100,000 accounts per unit)
#   TRELLARA_BENCH_ROUNDS=1      ABBA rounds (4 runs each)
#   TRELLARA_BENCH_RATE=500      steady-rate txn/s
#   TRELLARA_BENCH_SECONDS=30    steady-rate duration per run
#   TRELLARA_BENCH_TIMELINE=1    sample each catch-up run's CPU every 100 ms and
#                                print where its wall time went (cores busy,
#                                the tail after the source stopped decoding)
#   TRELLARA_BENCH_PERF=<dir>    record a perf profile (and the output) of each
#                                trellara catch-up run into <dir>; build with
#                                symbols (go build -o <bin> ./cmd/trellara)
# Method: docs/EVIDENCE.md ("Method"). Needs bin/trellara (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export TRELLARA_BENCH_TXNS="${TRELLARA_BENCH_TXNS:-100000}"
export TRELLARA_BENCH_SCALE="${TRELLARA_BENCH_SCALE:-10}"
export TRELLARA_BENCH_ROUNDS="${TRELLARA_BENCH_ROUNDS:-1}"
export TRELLARA_BENCH_RATE="${TRELLARA_BENCH_RATE:-500}"
export TRELLARA_BENCH_SECONDS="${TRELLARA_BENCH_SECONDS:-30}"
export TRELLARA_BIN="${TRELLARA_BIN:-$PWD/bin/trellara}"
[ -x "$TRELLARA_BIN" ] || { echo "bench-e2e: $TRELLARA_BIN missing: run make build" >&2; exit 1; }
machine="$(nproc) cores · $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) · $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') · kernel $(uname -r) · $(date -u +%F)"
echo "== machine: $machine"
echo "== $("$TRELLARA_BIN" --version 2>/dev/null | head -n1) ($TRELLARA_BIN) · $(go version | cut -d' ' -f3)"
echo "== sizes: txns=$TRELLARA_BENCH_TXNS scale=$TRELLARA_BENCH_SCALE rounds=$TRELLARA_BENCH_ROUNDS rate=$TRELLARA_BENCH_RATE/s for ${TRELLARA_BENCH_SECONDS}s"
run() {
	echo "== load before: $(uptime)"
	echo "== $*"
	go test -run '^$' -count=1 -benchtime 1x -v -timeout 60m "$@" 2>&1 |
		grep -E '^(Benchmark|ok|FAIL|---|panic|\s+bench_(ext_)?test)' | sed -E 's/^\s*bench_(ext_)?test\.go:[0-9]*: /   /' | tee -a "$out"
	echo "== load after: $(uptime)"
}
run -bench 'ApplyVsNativeReplication$' ./internal/flow
# The same catch-up with source.capture: extension (the trellara extension's
# in-server decoder and the sidecar instead of the walsender and the relay);
# needs the server's pg_config to build the extension.
run -bench 'ApplyVsNativeExtension$' ./internal/flow
run -bench 'SteadyLatency$' ./internal/flow
# The table of issue 16 (scripts/bench-table.awk): the rows this target
# measures filled in, the others naming the target that does.
echo "== machine: $machine"
awk -f scripts/bench-table.awk "$out"
