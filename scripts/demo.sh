#!/usr/bin/env bash
# make demo: the public loop on a laptop. Starts a throwaway source and
# target, creates a small commerce schema, runs a concurrent workload of
# multi-table transactions, then:
#   trellara-check → init → check → preflight → run --local → run --local --verify
#   → run (the service) with verify beside it → status
#   → one source feeding two targets: a flow with two sinks, its relay and
#     each sink's applier as separate processes, verify beside them
# and ends on CONVERGED (exit 0) or says why not. A standalone verify needs
# the pipeline running: the applier must apply the fence verify writes
# (with the pipeline stopped the answer is BEHIND, exit 3).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/pgcluster.sh

bin=$(pg_bin)
[ -x "$bin/postgres" ] || { echo "demo: no PostgreSQL server binaries found (install postgresql-15 or set TRELLARA_PG_BIN)" >&2; exit 2; }
work=$(mktemp -d /tmp/trellara-demo.XXXXXX)
chmod 755 "$work"
svc=
fanout_pids=
cleanup() {
	if [ -n "$svc" ]; then kill -TERM "$svc" 2>/dev/null; wait "$svc" 2>/dev/null; fi
	for p in $fanout_pids; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	stop_cluster "$work/source"; stop_cluster "$work/target"
	rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

sport=$(free_port); tport=$(free_port)
while [ "$tport" = "$sport" ]; do tport=$(free_port); done
step "starting throwaway source (port $sport) and target (port $tport) from $bin"
start_cluster "$work/source" "$sport"
start_cluster "$work/target" "$tport"
SRC="postgres://postgres@127.0.0.1:$sport/postgres?sslmode=disable"
DST="postgres://postgres@127.0.0.1:$tport/postgres?sslmode=disable"
psql_src() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 "$SRC" "$@"; }

step "commerce schema: orders, line items, payments, inventory"
psql_src <<'SQL'
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric(12,2) NOT NULL, note text, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE line_items (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders, item_id int NOT NULL, qty int NOT NULL, amount numeric(12,2) NOT NULL);
CREATE TABLE payments (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders, amount numeric(12,2) NOT NULL, method text NOT NULL);
CREATE TABLE inventory (item_id int PRIMARY KEY, on_hand int NOT NULL, sold int NOT NULL DEFAULT 0, details jsonb);
INSERT INTO inventory SELECT g, 1000000, 0, jsonb_build_object('sku', 'SKU-' || g) FROM generate_series(1, 100) g;
INSERT INTO orders (customer, total, note) SELECT 'seed-' || g, 10, repeat('x', g % 50) FROM generate_series(1, 2000) g;
INSERT INTO line_items (order_id, item_id, qty, amount) SELECT id, 1 + id % 100, 1, 10 FROM orders;
INSERT INTO payments (order_id, amount, method) SELECT id, 10, 'card' FROM orders;
SQL
cat > "$work/workload.sql" <<'SQL'
\set item random(1, 100)
\set qty random(1, 5)
BEGIN;
INSERT INTO orders (customer, total) VALUES ('c' || :item, :qty * 9.99);
INSERT INTO line_items (order_id, item_id, qty, amount) VALUES (currval('orders_id_seq'), :item, :qty, :qty * 9.99);
INSERT INTO payments (order_id, amount, method) VALUES (currval('orders_id_seq'), :qty * 9.99, 'card');
UPDATE inventory SET on_hand = on_hand - :qty, sold = sold + :qty WHERE item_id = :item;
END;
SQL

cd "$work"
T=$root/bin/trellara

step "trellara-check \$SOURCE --format text   (read-only: creates nothing)"
"$root/bin/trellara-check" "$SRC" --format text || true

step "trellara init --evaluate"
"$T" init --source-database-url "$SRC" --target-database-url "$DST" \
	--table public.orders --table public.line_items --table public.payments --table public.inventory \
	--flow commerce --evaluate

step "trellara check --config trellara.yml --format text"
"$T" check --config trellara.yml --format text || true

step "trellara preflight --config trellara.yml"
"$T" preflight --config trellara.yml

step "concurrent workload (pgbench, 4 clients, 8 s) while trellara run --local captures; mid-way, ALTER TABLE orders ADD COLUMN gift_note text"
"$bin/pgbench" -n -c 4 -j 2 -T 8 -f "$work/workload.sql" "$SRC" >"$work/pgbench.log" 2>&1 &
wl=$!
# A schema change while the flow runs: a nullable column is compatible, so
# it reaches the target through a DDL barrier (docs/SCHEMA.md), together
# with its first rows, and capture never stops.
( sleep 3
  psql_src -c "ALTER TABLE orders ADD COLUMN gift_note text"
  psql_src -c "INSERT INTO orders (customer, total, gift_note) SELECT 'gift-' || g, 5, 'ribbon ' || g FROM generate_series(1, 50) g"
) >"$work/ddl.log" 2>&1 &
ddl=$!
sleep 1
"$T" run --config trellara.yml --local --format text
wait "$wl" || { echo "demo: workload failed:"; cat "$work/pgbench.log"; exit 1; }
wait "$ddl" || { echo "demo: the schema change failed:"; cat "$work/ddl.log"; exit 1; }
grep -E "number of transactions actually processed|tps" "$work/pgbench.log" || true

step "trellara run --config trellara.yml --local --verify --format text   (workload finished)"
"$T" run --config trellara.yml --local --verify --format text
n=$("$bin/psql" -X -At "$DST" -c "SELECT count(*) FROM orders WHERE gift_note LIKE 'ribbon %'")
[ "$n" = 50 ] || { echo "demo: the added column's rows did not reach the target ($n of 50)"; exit 1; }
echo "the added column gift_note and its 50 rows are at the target"

step "trellara run --config trellara.yml   (the service, in the background) and trellara verify --config trellara.yml --wait 60s beside it"
rport=$(free_port); aport=$(free_port)
while [ "$aport" = "$rport" ]; do aport=$(free_port); done
sed -i -e "s/^    relay: .*/    relay: 127.0.0.1:$rport/" -e "s/^    applier: .*/    applier: 127.0.0.1:$aport/" trellara.yml
"$T" run --config trellara.yml >"$work/service.log" 2>&1 &
svc=$!
"$T" verify --config trellara.yml --wait 60s || { rc=$?; echo "demo: verify beside the service exited $rc; service log:"; cat "$work/service.log"; exit 1; }
kill -TERM "$svc"; wait "$svc" || { echo "demo: the service did not stop cleanly:"; cat "$work/service.log"; exit 1; }
svc=

step "trellara status --config trellara.yml --view report --format text"
# status exits 1 when it reports a problem (docs/CLI.md): verify's fence is WAL the stopped
# flow has not consumed yet.
"$T" status --config trellara.yml --view report --format text || echo "(status exit $?: the problems above)"

step "cleanup: trellara run --config trellara.yml --cleanup"
"$T" run --config trellara.yml --cleanup

step "one source, two targets: flow fanout with sinks reporting and search (one slot)"
for db in reporting search; do "$bin/psql" -X -q -v ON_ERROR_STOP=1 "$DST" -c "CREATE DATABASE $db"; done
fport=$(free_port); rep_port=$(free_port); search_port=$(free_port)
cat > fanout.yml <<YAML
version: 2
flow: fanout
source:
  id: demo
  database_url: "$SRC"
  owns_slot: true
  tables: [public.orders, public.line_items, public.payments, public.inventory]
transport:
  local: {dir: trellara-data/fanout}
sinks:
  reporting:
    target: {database_url: "postgres://postgres@127.0.0.1:$tport/reporting?sslmode=disable", create_tables: true}
    listen: 127.0.0.1:$rep_port
  search:
    target: {database_url: "postgres://postgres@127.0.0.1:$tport/search?sslmode=disable", create_tables: true}
    listen: 127.0.0.1:$search_port
run:
  evaluate: true
  listen: {relay: 127.0.0.1:$fport}
YAML
"$T" config validate --config fanout.yml

step "trellara run --config fanout.yml --role relay, and --role applier --sink reporting / --sink search: three processes, a workload meanwhile"
"$T" run --config fanout.yml --role relay >"$work/relay.log" 2>&1 &
fanout_pids="$!"
for s in reporting search; do
	"$T" run --config fanout.yml --role applier --sink "$s" >"$work/applier-$s.log" 2>&1 &
	fanout_pids="$fanout_pids $!"
done
"$bin/pgbench" -n -c 2 -j 2 -T 4 -f "$work/workload.sql" "$SRC" >"$work/pgbench2.log" 2>&1 ||
	{ echo "demo: workload failed:"; cat "$work/pgbench2.log"; exit 1; }
grep -E "number of transactions actually processed" "$work/pgbench2.log" || true

step "trellara verify --config fanout.yml --wait 60s   (every sink, beside the services)"
"$T" verify --config fanout.yml --wait 60s || {
	rc=$?; echo "demo: verify of the two sinks exited $rc; service logs:"
	cat "$work/relay.log" "$work/applier-reporting.log" "$work/applier-search.log"; exit 1; }
slots=$(psql_src -At -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara_fanout'")
echo "replication slots for flow fanout on the source: $slots"
for p in $fanout_pids; do kill -TERM "$p"; wait "$p" || { echo "demo: a fanout service did not stop cleanly"; exit 1; }; done
fanout_pids=
"$T" status --config fanout.yml --format text || echo "(status exit $?: the problems above)"
"$T" run --config fanout.yml --cleanup
echo
echo "CONVERGED"
