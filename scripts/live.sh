#!/usr/bin/env bash
# live.sh soak|qualify DURATION OUTDIR [extra trellara flags...]
#
# The live evidence runs on throwaway servers: starts a source and a target
# (scripts/pgcluster.sh, pg_ctl), writes a flow config whose chaos section
# restarts each server with pg_ctl, and runs
#   soak:    trellara chaos live --soak  (workload + periodic faults +
#            periodic verify; resource samples judged for leaks)
#   qualify: trellara qualify            (the same, plus the environment)
# for DURATION, writing OUTDIR/report.html, OUTDIR/report.json and
# OUTDIR/report.txt. Exit: trellara's (0 PASS, 1 FAIL, 2 could not run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/pgcluster.sh

mode=${1:?usage: live.sh soak|qualify DURATION OUTDIR}
duration=${2:?duration}
out=${3:?output directory}
shift 3
case $mode in soak|qualify) ;; *) echo "live.sh: mode must be soak or qualify, not $mode" >&2; exit 2 ;; esac

bin=$(pg_bin)
[ -x "$bin/postgres" ] || { echo "live.sh: no PostgreSQL server binaries found (install postgresql-15 or set TRELLARA_PG_BIN)" >&2; exit 2; }
T=$root/bin/trellara
[ -x "$T" ] || { echo "live.sh: $T not found: run make build" >&2; exit 2; }
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d /tmp/trellara-live.XXXXXX)
chmod 755 "$work"
tmpfs=
cleanup() {
	stop_cluster "$work/source"; stop_cluster "$work/target"
	if [ -n "$tmpfs" ]; then umount "$tmpfs" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

sport=$(free_port); tport=$(free_port)
while [ "$tport" = "$sport" ]; do tport=$(free_port); done
rport=$(free_port); aport=$(free_port)
start_cluster "$work/source" "$sport"
start_cluster "$work/target" "$tport"
as=""
[ "$(id -u)" = 0 ] && as="runuser -u postgres -- "
# Disk full needs a size-limited filesystem under the log directory: as
# root, a 512 MiB tmpfs; otherwise the run reports the fault as not
# available.
mkdir -p "$work/data"
retention=2GiB
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=512m tmpfs "$work/data" 2>/dev/null; then
	tmpfs=$work/data
	retention=256MiB
	echo "live.sh: transport.local.dir is a 512 MiB tmpfs (the disk-full fault fills it)"
fi
restart() { echo "$as$bin/pg_ctl -D $work/$1/data -l $work/$1/server.log -m fast -w -t 60 restart"; }

cat >"$work/trellara.yml" <<YAML
version: 2
environment: development
flow: live_$mode
source:
  id: live_source
  database_url: "postgres://postgres@127.0.0.1:$sport/postgres?sslmode=disable"
  owns_slot: true
  tables: [public.trellara_chaos_accounts, public.trellara_chaos_history]
transport:
  local: {dir: $work/data, retention: {max_bytes: $retention, max_age: 1h}}
target:
  database_url: "postgres://postgres@127.0.0.1:$tport/postgres?sslmode=disable"
  create_tables: true
run:
  evaluate: true
  listen: {relay: "127.0.0.1:$rport", applier: "127.0.0.1:$aport"}
chaos:
  source_restart: "$(restart source)"
  target_restart: "$(restart target)"
YAML

if [ "$mode" = soak ]; then
	cmd=("$T" chaos live --soak)
else
	cmd=("$T" qualify)
fi
cmd+=(--config "$work/trellara.yml" --duration "$duration" --work-dir "$work/run" --output "$out/report.html" "$@")
echo "live.sh: ${cmd[*]}"
set +e
"${cmd[@]}" --format text 2>"$out/trellara.log" | tee "$out/report.txt"
rc=${PIPESTATUS[0]}
set -e
cp "$work/data/evidence/"*.json "$out/report.json" 2>/dev/null || true
[ $rc -ne 0 ] && [ -d "$work/run" ] && cp -r "$work/run" "$out/processes" 2>/dev/null || true
echo "live.sh: $mode exit $rc; report in $out"
exit $rc
