#!/usr/bin/env bash
# make bench: every performance claim measured beside its physical or peer
# baseline in the same run, on throwaway clusters. Prints one table of
# ratios, then the table of issue 16 (scripts/bench-table.awk: each
# measurement as filed, as measured now, and its goal); copy both, with the
# machine line, into docs/EVIDENCE.md. The end-to-end comparison with native
# logical replication is `make bench-e2e` (its own table).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
machine="$(nproc) cores · $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) · $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') · kernel $(uname -r) · $(date -u +%F)"
echo "== machine: $machine"
echo "== load: $(uptime)"
run() { echo "== $*"; go test -run '^$' -count=1 "$@" 2>&1 | grep -E '^(Benchmark|ok|FAIL|---|\s+bench_test)' | tee -a "$out"; }
run -bench 'Encode|Decode' -benchtime 2s ./envelope
run -bench . -benchtime 3s ./segmentlog
# Relay vs pg_recvlogical: ABBA on copies of one slot, >= 100k transactions
# (at 20k a run lasts about a second and is mostly noise).
TRELLARA_BENCH_TXNS="${TRELLARA_BENCH_TXNS:-100000}" run -bench RelayVsRecvlogical -benchtime 1x -v -timeout 30m ./internal/flow
run -bench Verify -benchtime 1x -v ./internal/verify
run -bench Apply -benchtime 1x ./apply
# Extension + sidecar vs the external relay, both orders (ABBA over the two
# runs); needs the server's pg_config to build the extension.
for order in relay-first sidecar-first; do
	TRELLARA_BENCH_ORDER=$order TRELLARA_BENCH_TXNS="${TRELLARA_BENCH_TXNS:-100000}" \
		run -bench SidecarVsRelay -benchtime 1x -v -timeout 30m ./sidecar
done
# Peak RSS of run --local for one large transaction, at two sizes.
./scripts/bench-mem.sh 2>&1 | tee -a "$out"

echo
echo "== summary ($machine)"
awk '
/BenchmarkAppendGroupCommit8Writers1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") gc=$(i-1)}
/BenchmarkRawWriteFdatasyncPer8x1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") rgc=$(i-1)}
/BenchmarkAppendSingleWriter1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") sw=$(i-1)}
/BenchmarkRawWriteFdatasync1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") rsw=$(i-1)}
/BenchmarkReadSequential1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") rd=$(i-1)}
/BenchmarkRawReadSequential1KiB/ {for(i=1;i<=NF;i++) if($(i)=="MB/s") rrd=$(i-1)}
/BenchmarkRelayVsRecvlogical/ {for(i=1;i<=NF;i++) {if($(i)=="ratio_min") rlo=$(i-1); if($(i)=="ratio_max") rhi=$(i-1)}}
END {
  printf "%-44s %12s %12s %8s\n", "measurement", "trellara", "baseline", "ratio"
  if (gc && rgc) printf "%-44s %9s MB/s %9s MB/s %8.2f\n", "log group commit, 8 writers, 1 KiB", gc, rgc, gc/rgc
  if (sw && rsw) printf "%-44s %9s MB/s %9s MB/s %8.2f\n", "log fsync always, 1 writer, 1 KiB", sw, rsw, sw/rsw
  if (rd && rrd) printf "%-44s %9s MB/s %9s MB/s %8.2f\n", "log sequential read", rd, rrd, rd/rrd
  if (rlo) printf "%-44s %12s %12s %8s\n", "relay vs pg_recvlogical, ABBA, per-pair range", "", "", rlo "-" rhi
  printf "%-44s %s\n", "apply vs native logical replication", "make bench-e2e"
}' "$out"
awk -f scripts/bench-table.awk "$out"
