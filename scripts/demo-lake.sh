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

declare -A url port
used=""
for i in 1 2 3; do
	p=$(free_port); while [[ " $used " == *" $p "* ]]; do p=$(free_port); done; used="$used $p"
	step "source db$i on port $p"
	start_cluster "$work/db$i" "$p"
	url[$i]="postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"
	port[$i]=$p
	"$bin/psql" -X -q -v ON_ERROR_STOP=1 "${url[$i]}" <<'SQL'
CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL);
CREATE TABLE transfers (id bigserial PRIMARY KEY, from_id bigint NOT NULL, to_id bigint NOT NULL, amount numeric(12,2) NOT NULL);
INSERT INTO accounts SELECT g, 'owner ' || g, 1000 FROM generate_series(1, 200) g;
SQL
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
cat > "$work/workload.sql" <<'SQL'
\set a random(1, 200)
\set b random(1, 200)
\set amt random(1, 50)
BEGIN;
UPDATE accounts SET balance = balance - :amt WHERE id = :a;
UPDATE accounts SET balance = balance + :amt WHERE id = :b;
INSERT INTO transfers (from_id, to_id, amount) VALUES (:a, :b, :amt);
END;
SQL
cd "$work"

step "trellara-full fleet init --source db1.yml --source db2.yml --source db3.yml"
"$T" fleet init --config fleet.yml --source db1.yml --source db2.yml --source db3.yml \
	--catalog sql-sqlite --catalog-uri lake/catalog.db --warehouse file://lake/warehouse --name demo
mkdir -p lake
# A demo closes epochs every 2 seconds; max_lag bounds how long a lagging
# source still counts as included.
sed -i 's/close_interval: .*/close_interval: 2s/; s/max_lag: .*/max_lag: 10s/' fleet.yml
cat fleet.yml

workload() { # workload I SECONDS
	"$bin/pgbench" -n -c 1 -j 1 -T "$2" -R 20 -f workload.sql -h 127.0.0.1 -p "${port[$1]}" -U postgres postgres >>"pgbench-db$1.log" 2>&1 || true
}

step "trellara-full fleet run --config fleet.yml   (three relays and one lake committer, one process)"
"$T" fleet run --config fleet.yml --verbose 2>fleet.log &
fleet_pid=$!

wait_status() { # wait_status STATUS [--allow-gaps]: until lake epoch shows STATUS
	for _ in $(seq 1 90); do
		if out=$("$T" lake epoch --config fleet.yml --allow-gaps 2>/dev/null) && grep -q "^epoch [0-9]*: $1 " <<<"$out"; then
			echo "$out"; return 0
		fi
		sleep 1
	done
	echo "demo-lake: no $1 epoch within 90s; fleet log tail:" >&2; tail -n 30 fleet.log >&2; return 1
}

for i in 1 2 3; do workload "$i" 6 & load_pids="$load_pids $!"; done
step "an epoch with every source: complete"
wait_status complete

step "db2 goes offline (pg_ctl stop -m immediate)"
stop_cluster "$work/db2"
wait_status complete_with_gaps
step "trellara-full lake epoch --config fleet.yml   (no --allow-gaps: a gapped epoch is refused, exit 1)"
set +e
"$T" lake epoch --config fleet.yml; rc=$?
set -e
echo "exit $rc"
[ "$rc" = 1 ] || { echo "demo-lake: lake epoch accepted a gapped epoch" >&2; exit 1; }

step "db2 comes back; its relay reconnects and catches up in order"
p=${port[2]}
start_cluster_again() { as_pg "$bin/pg_ctl" -D "$work/db2/data" -l "$work/db2/server.log" -w -t 60 \
	-o "-c wal_level=logical -c port=$p -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/db2 -c max_replication_slots=10 -c max_wal_senders=10" start >/dev/null; }
start_cluster_again
workload 2 4
wait $load_pids 2>/dev/null || true; load_pids=
sleep 3
wait_status complete

step "trellara-full lake plan --config fleet.yml"
"$T" lake plan --config fleet.yml
step "trellara-full fleet report --config fleet.yml"
"$T" fleet report --config fleet.yml
step "trellara-full fanin verify --config fleet.yml"
"$T" fanin verify --config fleet.yml --wait 60s
step "trellara-full dev lake-read --config fleet.yml   (a second reader, no iceberg-go code: exit 1 on a change there twice)"
"$T" dev lake-read --config fleet.yml
step "trellara-full fleet scorecard --config fleet.yml"
"$T" fleet scorecard --config fleet.yml || true
