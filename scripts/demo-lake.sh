#!/usr/bin/env bash
# make demo-lake: three throwaway sources fanned into one Iceberg changelog
# (SQL catalog in SQLite, file:// warehouse) by trellara-full fleet run,
# under a small write workload. One source is taken offline: the next
# epoch reads complete_with_gaps naming it and `lake epoch` refuses it;
# back up, a later epoch is complete; fanin verify ends on CONVERGED, and
# dev lake-read reads the changelog again with the independent reader
# (internal/lake/lakeread) and finds no change twice.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/pgcluster.sh
. scripts/lakedemo.sh
demo=demo-lake

bin=$(pg_bin)
[ -x "$bin/postgres" ] || { echo "demo-lake: no PostgreSQL server binaries found (install postgresql-15 or set TRELLARA_PG_BIN)" >&2; exit 2; }
T=$root/bin/trellara-full
[ -x "$T" ] || { echo "demo-lake: $T is missing (make build)" >&2; exit 2; }
work=$(mktemp -d /tmp/trellara-demo-lake.XXXXXX)
chmod 755 "$work"
fleet_pid=
load_pids=
cleanup() {
	for p in $load_pids; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	if [ -n "$fleet_pid" ]; then kill -TERM "$fleet_pid" 2>/dev/null; wait "$fleet_pid" 2>/dev/null; fi
	for i in 1 2 3; do stop_cluster "$work/db$i"; done
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

for i in 1 2 3; do
	lake_source "$i"
	rp=$(free_port); ap=$(free_port)
	cat > "$work/db$i.yml" <<YML
version: 2
flow: db$i
source:
  id: db$i
  database_url: "${url[$i]}"
  owns_slot: true
  tables: [public.accounts, public.transfers]
transport:
  local: {dir: db$i-data, fsync: always}
run:
  listen: {relay: "127.0.0.1:$rp", applier: "127.0.0.1:$ap"}
YML
done
cd "$work"
lake_fleet_init
cat fleet.yml

step "trellara-full fleet run --config fleet.yml   (three relays and one lake committer, one process)"
"$T" fleet run --config fleet.yml --verbose 2>fleet.log &
fleet_pid=$!

for i in 1 2 3; do workload "$i" 6 & load_pids="$load_pids $!"; done
step "an epoch with every source: complete"
wait_status complete

step "db2 goes offline (pg_ctl stop -m immediate)"
stop_cluster "$work/db2"
lake_gap_refused

step "db2 comes back; its relay reconnects and catches up in order"
p=${port[2]}
start_cluster_again() { as_pg "$bin/pg_ctl" -D "$work/db2/data" -l "$work/db2/server.log" -w -t 60 \
	-o "-c wal_level=logical -c port=$p -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/db2 -c max_replication_slots=10 -c max_wal_senders=10" start >/dev/null; }
start_cluster_again
workload 2 4
wait $load_pids 2>/dev/null || true; load_pids=
sleep 3
wait_status complete

lake_checks
