#!/usr/bin/env bash
# make bench: every performance claim measured beside its physical, peer or
# native baseline in the same run, on throwaway clusters, in ABBA order
# where two sides take turns (docs/EVIDENCE.md, "Method"); every run is
# printed, and at the end ONE table (scripts/bench-table.awk, issue 33):
# Trellara's figure, the baseline's, the ratio, the goal and the verdict
# per row, with the machine, the commit and the load before and after.
#
# Parts (BENCH_PARTS, a space-separated subset; default all, in this order):
#   micro     envelope encode/decode, segment log vs raw fdatasync, apply
#   relay     relay vs pg_recvlogical, ABBA (BenchmarkRelayVsRecvlogical)
#   sidecar   extension + sidecar vs the relay, both orders
#   verify    verify vs count(*) at 1M and 10M rows (BenchmarkVerify)
#   e2e       catch-up of a TPC-B backlog vs native logical replication
#   ext       the same with source.capture: extension (needs pg_config)
#   latency   commit-to-apply at steady rates vs native (BenchmarkSteadyLatency)
#   snapshot  initial snapshot vs native tablesync (BenchmarkSnapshotVsTablesync)
#   large     one large transaction vs a native streaming subscription
#             (BenchmarkLargeTxnVsNativeStreaming), with Trellara's peak RSS
#   mem       peak RSS of run --local --verify for one 4.5M-row transaction (bench-mem.sh)
# Sizes (environment; the defaults are the published configuration):
#   TRELLARA_BENCH_TXNS=100000           backlog transactions (e2e, ext, relay, sidecar)
#   TRELLARA_BENCH_SCALE=10              pgbench scale of the backlog and the steady load
#   TRELLARA_BENCH_ROUNDS=3              ABBA rounds (4 runs each) of e2e and ext
#   TRELLARA_BENCH_RATE=500,2000         steady rates, txn/s (latency)
#   TRELLARA_BENCH_SECONDS=30            steady-rate duration per run
#   TRELLARA_BENCH_LATENCY_ROUNDS=1      ABBA rounds of latency
#   TRELLARA_BENCH_SNAPSHOT_SCALE=50     pgbench scale of the snapshot (5M accounts)
#   TRELLARA_BENCH_LARGE_ROWS=4500000    rows of the one large transaction
#   TRELLARA_BENCH_VERIFY_ROWS="1000000 10000000"  verify table sizes
#   TRELLARA_BENCH_OUT=<file>            also keep the raw output (appended), so
#                                        parts run apart can be tabled together:
#                                        awk -f scripts/bench-table.awk <file>
#   TRELLARA_BENCH_TIMELINE=1, TRELLARA_BENCH_PERF=<dir>: see internal/flow/bench_test.go
# Needs bin/trellara (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
parts=" ${BENCH_PARTS:-micro relay sidecar verify e2e ext latency snapshot large mem} "
want() { [[ "$parts" == *" $1 "* ]]; }
export TRELLARA_BENCH_TXNS="${TRELLARA_BENCH_TXNS:-100000}"
export TRELLARA_BENCH_SCALE="${TRELLARA_BENCH_SCALE:-10}"
export TRELLARA_BENCH_SECONDS="${TRELLARA_BENCH_SECONDS:-30}"
export TRELLARA_BIN="${TRELLARA_BIN:-$PWD/bin/trellara}"
[ -x "$TRELLARA_BIN" ] || { echo "bench: $TRELLARA_BIN missing: run make build" >&2; exit 1; }
say() { echo "$*" | tee -a "$out"; }
machine="$(nproc) cores · $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) · $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') · kernel $(uname -r) · $(date -u +%F)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
say "== machine: $machine"
say "== commit: $commit · $("$TRELLARA_BIN" --version 2>/dev/null | head -n1) · $(go version | cut -d' ' -f3) · PostgreSQL $(pg_config --version 2>/dev/null | cut -d' ' -f2 || echo '?')"
say "== parts:$parts"
say "== load before: $(uptime)"
run() {
	say "== $(date -u +%T) $*"
	go test -run '^$' -count=1 "$@" 2>&1 |
		grep -E '^(Benchmark|ok|FAIL|---|panic|\s+(bench|bench_[a-z]+|mem_bench)_test)' |
		sed -E 's/^\s*(bench|bench_[a-z]+|mem_bench)_test\.go:[0-9]*: /   /' | tee -a "$out"
}
if want micro; then
	run -bench 'Encode|Decode' -benchtime 2s ./envelope
	run -bench . -benchtime 3s ./segmentlog
	run -bench Apply -benchtime 1x ./apply
fi
# Relay vs pg_recvlogical: ABBA on copies of one slot, >= 100k transactions
# (at 20k a run lasts about a second and is mostly noise).
want relay && run -bench RelayVsRecvlogical -benchtime 1x -v -timeout 30m ./internal/flow
# Extension + sidecar vs the external relay, both orders (ABBA over the two
# runs); needs the server's pg_config to build the extension.
if want sidecar; then
	for order in relay-first sidecar-first; do
		TRELLARA_BENCH_ORDER=$order run -bench SidecarVsRelay -benchtime 1x -v -timeout 30m ./sidecar
	done
fi
if want verify; then
	for rows in ${TRELLARA_BENCH_VERIFY_ROWS:-1000000 10000000}; do
		say "== verify rows $rows"
		TRELLARA_BENCH_ROWS=$rows run -bench Verify -benchtime 1x -v -timeout 60m ./internal/verify
	done
fi
e2e() { TRELLARA_BENCH_ROUNDS="${TRELLARA_BENCH_ROUNDS:-3}" run -benchtime 1x -v -timeout 120m "$@" ./internal/flow; }
want e2e && e2e -bench 'ApplyVsNativeReplication$'
# The same catch-up with source.capture: extension (the trellara extension's
# in-server decoder and the sidecar instead of the walsender and the relay).
want ext && e2e -bench 'ApplyVsNativeExtension$'
want latency && TRELLARA_BENCH_RATE="${TRELLARA_BENCH_RATE:-500,2000}" TRELLARA_BENCH_ROUNDS="${TRELLARA_BENCH_LATENCY_ROUNDS:-1}" \
	run -bench 'SteadyLatency$' -benchtime 1x -v -timeout 60m ./internal/flow
want snapshot && TRELLARA_BENCH_ROUNDS="${TRELLARA_BENCH_SNAPSHOT_ROUNDS:-1}" \
	run -bench 'SnapshotVsTablesync$' -benchtime 1x -v -timeout 120m ./internal/flow
want large && TRELLARA_BENCH_ROUNDS="${TRELLARA_BENCH_LARGE_ROUNDS:-1}" \
	run -bench 'LargeTxnVsNativeStreaming$' -benchtime 1x -v -timeout 120m ./internal/flow
want mem && TRELLARA_MEM_ROWS="${TRELLARA_MEM_ROWS:-4500000}" ./scripts/bench-mem.sh 2>&1 | tee -a "$out"
say "== load after: $(uptime)"
[ -n "${TRELLARA_BENCH_OUT:-}" ] && cat "$out" >>"$TRELLARA_BENCH_OUT"
awk -f scripts/bench-table.awk "$out"
