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
. scripts/lakedemo.sh
. scripts/devkafka.sh
demo=demo-lake-kafka

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

start_dev_kafka

for i in 1 2 3; do
	lake_source "$i"
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
cd "$work"
lake_fleet_init
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

start_fleet() {
	"$T" fleet run --config fleet.yml --verbose 2>>fleet.log &
	fleet_pid=$!
}
step "trellara-full fleet run --config fleet.yml   (the lake committer alone: reads the three topics)"
start_fleet

for i in 1 2 3; do workload "$i" 6 & load_pids="$load_pids $!"; done
step "an epoch with every source: complete"
wait_status complete

step "db2's relay is SIGKILLed and stays down past max_lag (10s)"
kill -KILL "${relay_pid[2]}"; wait "${relay_pid[2]}" 2>/dev/null || true
lake_gap_refused

step "the lake committer is SIGKILLed mid-run and restarted (its position is in the Iceberg commits)"
kill -KILL "$fleet_pid"; wait "$fleet_pid" 2>/dev/null || true
start_fleet

step "db2's relay comes back; it resumes from its slot and the committer catches db2 up in order"
start_relay 2
workload 2 4
wait $load_pids 2>/dev/null || true; load_pids=
sleep 3
wait_status complete

lake_checks
