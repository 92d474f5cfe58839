#!/usr/bin/env bash
# make bench-e2e: the end-to-end part of make bench (scripts/bench.sh):
# catch-up of a TPC-B backlog on the relay and the extension path, and
# commit-to-apply at steady rates, each against native logical replication
# in ABBA order, then the one table. Sizes and the other parts: bench.sh.
export BENCH_PARTS="${BENCH_PARTS:-e2e ext latency}"
exec "$(dirname "$0")/bench.sh"
