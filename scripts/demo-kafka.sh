#!/usr/bin/env bash
# make demo-kafka: the public loop over Kafka on a laptop, with no broker
# install. Starts a three-broker in-process Kafka cluster
# (trellara-full dev kafka-cluster, franz-go kfake, memory only), a
# throwaway source and target, writes a flow config with transport.kafka
# (development profile) pointing at those brokers, then:
#   init → preflight → run --local (under a workload) → run --local --verify
# and ends on CONVERGED (exit 0) or says why not. README.md ("Kafka") shows
# the same config pointed at a real cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/pgcluster.sh
. scripts/devkafka.sh
demo=demo-kafka

T=$root/bin/trellara-full
[ -x "$T" ] || { echo "demo-kafka: $T is missing; run make build" >&2; exit 2; }
bin=$(pg_bin)
[ -x "$bin/postgres" ] || { echo "demo-kafka: no PostgreSQL server binaries found (install postgresql-15 or set TRELLARA_PG_BIN)" >&2; exit 2; }
work=$(mktemp -d /tmp/trellara-demo-kafka.XXXXXX)
chmod 755 "$work"
kc=
cleanup() {
	if [ -n "$kc" ]; then kill -TERM "$kc" 2>/dev/null; wait "$kc" 2>/dev/null; fi
	stop_cluster "$work/source"; stop_cluster "$work/target"
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

"$T" --version

start_dev_kafka

sport=$(free_port); tport=$(free_port)
while [ "$tport" = "$sport" ]; do tport=$(free_port); done
step "starting throwaway source (port $sport) and target (port $tport) from $bin"
start_cluster "$work/source" "$sport"
start_cluster "$work/target" "$tport"
SRC="postgres://postgres@127.0.0.1:$sport/postgres?sslmode=disable"
DST="postgres://postgres@127.0.0.1:$tport/postgres?sslmode=disable"
psql_src() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 "$SRC" "$@"; }

step "commerce schema: orders, line items, inventory"
psql_src <<'SQL'
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric(12,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE line_items (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders, item_id int NOT NULL, qty int NOT NULL, amount numeric(12,2) NOT NULL);
CREATE TABLE inventory (item_id int PRIMARY KEY, on_hand int NOT NULL, sold int NOT NULL DEFAULT 0);
INSERT INTO inventory SELECT g, 1000000, 0 FROM generate_series(1, 100) g;
INSERT INTO orders (customer, total) SELECT 'seed-' || g, 10 FROM generate_series(1, 2000) g;
INSERT INTO line_items (order_id, item_id, qty, amount) SELECT id, 1 + id % 100, 1, 10 FROM orders;
SQL
cat > "$work/workload.sql" <<'SQL'
\set item random(1, 100)
\set qty random(1, 5)
BEGIN;
INSERT INTO orders (customer, total) VALUES ('c' || :item, :qty * 9.99);
INSERT INTO line_items (order_id, item_id, qty, amount) VALUES (currval('orders_id_seq'), :item, :qty, :qty * 9.99);
UPDATE inventory SET on_hand = on_hand - :qty, sold = sold + :qty WHERE item_id = :item;
END;
SQL

cd "$work"
step "trellara-full init --evaluate, then transport.kafka (profile development) at the dev brokers"
"$T" init --source-database-url "$SRC" --target-database-url "$DST" \
	--table public.orders --table public.line_items --table public.inventory \
	--flow commerce --evaluate
# Replace the transport section init wrote (local) with transport.kafka.
awk -v brokers="$brokers" '
	/^transport:/ { print "transport:"; print "  kafka:"; print "    brokers: [" brokers "]"; print "    profile: development"; print "    state_dir: trellara-data/commerce"; skip = 1; next }
	skip && /^[^ #]/ { skip = 0 }
	!skip { print }
' trellara.yml >trellara.kafka.yml && mv trellara.kafka.yml trellara.yml
sed -n '/^transport:/,/^[a-z]/p' trellara.yml | sed '$d'
"$T" config validate --config trellara.yml

step "trellara-full preflight --config trellara.yml"
"$T" preflight --config trellara.yml

step "concurrent workload (pgbench, 4 clients, 6 s) while trellara-full run --local captures through Kafka"
"$bin/pgbench" -n -c 4 -j 2 -T 6 -f "$work/workload.sql" "$SRC" >"$work/pgbench.log" 2>&1 &
wl=$!
sleep 1
"$T" run --config trellara.yml --local --format text
wait "$wl" || { echo "demo-kafka: workload failed:"; cat "$work/pgbench.log"; exit 1; }
grep -E "number of transactions actually processed" "$work/pgbench.log" || true

step "trellara-full run --config trellara.yml --local --verify --format text   (workload finished)"
"$T" run --config trellara.yml --local --verify --format text
echo
echo "CONVERGED"
