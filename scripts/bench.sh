#!/usr/bin/env bash
# make bench: measured comparisons against the physical baselines, printed
# side by side. Results with machine and date go into docs/EVIDENCE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(date -u +%F)"
echo "== envelope encode/decode"
go test -run '^$' -bench . -benchtime 2s ./envelope
