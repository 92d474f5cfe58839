# Shared by demo-lake.sh and demo-lake-kafka.sh (sourced after
# pgcluster.sh, with T, bin, work and demo set): the three sources, their
# workload, the wait for an epoch status, the gap check and the closing
# checks. Each demo writes its own flow configs (a local log or a Kafka
# topic) and runs its own fleet shape.

declare -A url port
lake_used=""

# lake_source I: source dbI, a throwaway cluster on a free port with the
# demo schema (accounts and transfers); sets url[I] and port[I].
lake_source() {
	local i=$1 p
	p=$(free_port); while [[ " $lake_used " == *" $p "* ]]; do p=$(free_port); done; lake_used="$lake_used $p"
	step "source db$i on port $p"
	start_cluster "$work/db$i" "$p"
	url[$i]="postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"
	port[$i]=$p
	"$bin/psql" -X -q -v ON_ERROR_STOP=1 "${url[$i]}" <<'SQL'
CREATE TABLE accounts (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2) NOT NULL);
CREATE TABLE transfers (id bigserial PRIMARY KEY, from_id bigint NOT NULL, to_id bigint NOT NULL, amount numeric(12,2) NOT NULL);
INSERT INTO accounts SELECT g, 'owner ' || g, 1000 FROM generate_series(1, 200) g;
SQL
}

# lake_fleet_init: fleet.yml over db1.yml..db3.yml in $work (SQLite
# catalog, file:// warehouse), epochs every 2 s, max_lag 10 s.
lake_fleet_init() {
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
	step "trellara-full fleet init --source db1.yml --source db2.yml --source db3.yml"
	"$T" fleet init --config fleet.yml --source db1.yml --source db2.yml --source db3.yml \
		--catalog sql-sqlite --catalog-uri lake/catalog.db --warehouse file://lake/warehouse --name demo
	mkdir -p lake
	# A demo closes epochs every 2 seconds; max_lag bounds how long a
	# lagging source still counts as included.
	sed -i 's/close_interval: .*/close_interval: 2s/; s/max_lag: .*/max_lag: 10s/' fleet.yml
}

# workload I SECONDS: 20 transfers a second on source I.
workload() {
	"$bin/pgbench" -n -c 1 -j 1 -T "$2" -R 20 -f workload.sql -h 127.0.0.1 -p "${port[$1]}" -U postgres postgres >>"pgbench-db$1.log" 2>&1 || true
}

# wait_status STATUS: until lake epoch shows an epoch with STATUS.
wait_status() {
	local out
	for _ in $(seq 1 90); do
		if out=$("$T" lake epoch --config fleet.yml --allow-gaps 2>/dev/null) && grep -q "^epoch [0-9]*: $1 " <<<"$out"; then
			echo "$out"; return 0
		fi
		sleep 1
	done
	echo "$demo: no $1 epoch within 90s; fleet log tail:" >&2; tail -n 30 fleet.log >&2; return 1
}

# lake_gap_refused: the gapped epoch is there, and lake epoch refuses it.
lake_gap_refused() {
	local rc
	wait_status complete_with_gaps
	step "trellara-full lake epoch --config fleet.yml   (no --allow-gaps: a gapped epoch is refused, exit 1)"
	set +e
	"$T" lake epoch --config fleet.yml; rc=$?
	set -e
	echo "exit $rc"
	[ "$rc" = 1 ] || { echo "$demo: lake epoch accepted a gapped epoch" >&2; exit 1; }
}

# lake_checks: the read-only views, fanin verify (CONVERGED or exit) and
# the independent reader.
lake_checks() {
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
}
