#!/usr/bin/env bash
# make demo-lake-kafka: the fleet beyond one process. Three throwaway
# sources publish to a three-broker in-process Kafka cluster
# (trellara-full dev kafka-cluster, franz-go kfake, memory only), db2's
# topic partitioned; each source's relay is its own
# `trellara-full run --role relay` process, as it would be on the source's
# machine, and `fleet run` (run.relays: external) is the lake committer
# alone, reading the topics. Under a small write workload: an epoch with
# every source complete; db2's relay SIGKILLed and kept down past max_lag
# gives complete_with_gaps naming db2 and `lake epoch` refuses it; the
# committer SIGKILLed and restarted; db2's relay back, a later epoch is
# complete; fanin verify ends on CONVERGED, and dev lake-read reads the
# changelog again with the independent reader (internal/lake/lakeread)
# and finds every change once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/pgcluster.sh

bin=$(pg_bin)
[ -x "$bin/postgres" ] || { echo "demo-lake-kafka: no PostgreSQL server binaries found (install postgresql-15 or set TRELLARA_PG_BIN)" >&2; exit 2; }
T=$root/bin/trellara-full
[ -x "$T" ] || { echo "demo-lake-kafka: $T is missing (make build)" >&2; exit 2; }
work=$(mktemp -d /tmp/trellara-demo-lake-kafka.XXXXXX)
chmod 755 "$work"
fleet_pid=
load_pids=
kc=
declare -A relay_pid
cleanup() {
	for p in $load_pids; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	if [ -n "$fleet_pid" ]; then kill -TERM "$fleet_pid" 2>/dev/null; wait "$fleet_pid" 2>/dev/null; fi
	for p in "${relay_pid[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	if [ -n "$kc" ]; then kill -TERM "$kc" 2>/dev/null; wait "$kc" 2>/dev/null; fi
	for i in 1 2 3; do stop_cluster "$work/db$i"; done
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "trellara-full dev kafka-cluster --brokers 3   (in-process kfake, in the background)"
"$T" dev kafka-cluster --brokers 3 >"$work/kafka.log" 2>&1 &
kc=$!
for _ in $(seq 1 100); do
	grep -q '^ready:' "$work/kafka.log" && break
	kill -0 "$kc" 2>/dev/null || { echo "demo-lake-kafka: the dev cluster exited:"; cat "$work/kafka.log"; exit 1; }
	sleep 0.1
done
grep -q '^ready:' "$work/kafka.log" || { echo "demo-lake-kafka: the dev cluster did not become ready:"; cat "$work/kafka.log"; exit 1; }
cat "$work/kafka.log"
brokers=$(sed -n 's/^brokers //p' "$work/kafka.log")

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
	mode=""
	# db2's topic is partitioned (rows by key over 3 partitions, a manifest
	# per transaction); db1's and db3's are strict (one partition).
	[ "$i" = 2 ] && mode=$'    mode: partitioned\n    partitions: 3'
	cat > "$work/db$i.yml" <<YML
version: 2
environment: development
flow: db$i
source:
  id: db$i
  database_url: "${url[$i]}"
  owns_slot: true
  tables: [public.accounts, public.transfers]
transport:
  kafka:
    brokers: [$brokers]
    profile: development
    state_dir: db$i-state
$mode
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
# The relays run elsewhere (here: their own processes); fleet run is the
# lake committer only.
if grep -q '^run:' fleet.yml; then
	sed -i '/^run:/a\  relays: external' fleet.yml
else
	printf 'run:\n  relays: external\n' >>fleet.yml
fi
cat fleet.yml

start_relay() { # start_relay I: source I's relay, its own process
	"$T" run --config "db$1.yml" --role relay >>"relay-db$1.log" 2>&1 &
	relay_pid[$1]=$!
}
for i in 1 2 3; do
	step "trellara-full run --config db$i.yml --role relay   (db$i's relay: its own process, publishing to Kafka)"
	start_relay "$i"
done

workload() { # workload I SECONDS
	"$bin/pgbench" -n -c 1 -j 1 -T "$2" -R 20 -f workload.sql -h 127.0.0.1 -p "${port[$1]}" -U postgres postgres >>"pgbench-db$1.log" 2>&1 || true
}

start_fleet() {
	"$T" fleet run --config fleet.yml --verbose 2>>fleet.log &
	fleet_pid=$!
}
step "trellara-full fleet run --config fleet.yml   (the lake committer alone: reads the three topics)"
start_fleet

wait_status() { # wait_status STATUS [--allow-gaps]: until lake epoch shows STATUS
	for _ in $(seq 1 90); do
		if out=$("$T" lake epoch --config fleet.yml --allow-gaps 2>/dev/null) && grep -q "^epoch [0-9]*: $1 " <<<"$out"; then
			echo "$out"; return 0
		fi
		sleep 1
	done
	echo "demo-lake-kafka: no $1 epoch within 90s; fleet log tail:" >&2; tail -n 30 fleet.log >&2; return 1
}

for i in 1 2 3; do workload "$i" 6 & load_pids="$load_pids $!"; done
step "an epoch with every source: complete"
wait_status complete

step "db2's relay is SIGKILLed and stays down past max_lag (10s)"
kill -KILL "${relay_pid[2]}"; wait "${relay_pid[2]}" 2>/dev/null || true
wait_status complete_with_gaps
step "trellara-full lake epoch --config fleet.yml   (no --allow-gaps: a gapped epoch is refused, exit 1)"
set +e
"$T" lake epoch --config fleet.yml; rc=$?
set -e
echo "exit $rc"
[ "$rc" = 1 ] || { echo "demo-lake-kafka: lake epoch accepted a gapped epoch" >&2; exit 1; }

step "the lake committer is SIGKILLed mid-run and restarted (its position is in the Iceberg commits)"
kill -KILL "$fleet_pid"; wait "$fleet_pid" 2>/dev/null || true
start_fleet

step "db2's relay comes back; it resumes from its slot and the committer catches db2 up in order"
start_relay 2
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
