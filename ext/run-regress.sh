#!/usr/bin/env bash
# Builds and installs the trellara extension, starts a throwaway PostgreSQL
# cluster that preloads it, runs the PGXS regression tests against it, stops
# it, and exits non-zero on any failure.
#
# Works as root on a fresh Debian 12 after
#   apt-get install postgresql-15 postgresql-server-dev-15 make gcc
# (the server runs as user postgres; PostgreSQL refuses to run as root).
# Non-root users need write access to the server's pkglibdir/sharedir.
#
#   PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config ext/run-regress.sh
#   KEEP=1 ext/run-regress.sh      # keep the cluster directory for debugging
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in make gcc runuser; do
	command -v "$tool" >/dev/null || {
		echo "$0: $tool not found; install it (apt-get install -y make gcc util-linux)" >&2
		exit 1
	}
done
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$PG_CONFIG" --bindir)
port=${PGPORT_REGRESS:-54329}

as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

echo "== build and install ($("$PG_CONFIG" --version))"
make -s -C "$here" PG_CONFIG="$PG_CONFIG"
make -s -C "$here" PG_CONFIG="$PG_CONFIG" install

work=$(mktemp -d /tmp/trellara-regress.XXXXXX)
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
data="$work/data"

cleanup() {
	as_pg "$bindir/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
	if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

echo "== initdb $data"
as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust --no-sync \
	-E UTF8 --locale=C >"$work/initdb.log" 2>&1 || { cat "$work/initdb.log"; exit 1; }

{
	cat "$here/regress.conf"
	echo "listen_addresses = ''"
	echo "unix_socket_directories = '$work'"
	echo "port = $port"
	echo "fsync = off"
	# Newer minor releases refuse output plugins not listed here; older
	# ones refuse to start if it is set. Set it only where it exists, as a
	# list that keeps the defaults. (No grep -q: with pipefail, the early exit
	# would SIGPIPE postgres and make the test fail at random.)
	if "$bindir/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
		echo "output_plugin_libraries = 'pgoutput, test_decoding, trellara'"
	fi
} | as_pg tee -a "$data/postgresql.conf" >/dev/null

echo "== start server (port $port, socket dir $work)"
if ! as_pg "$bindir/pg_ctl" -D "$data" -l "$work/server.log" -w -t 60 start >/dev/null; then
	cat "$work/server.log"
	exit 1
fi

echo "== pg_regress"
status=0
make -s -C "$here" PG_CONFIG="$PG_CONFIG" installcheck \
	PGHOST="$work" PGPORT="$port" PGUSER=postgres || status=$?
if [ $status -ne 0 ]; then
	[ -f "$here/regression.diffs" ] && cat "$here/regression.diffs"
	echo "== server log (tail)"
	tail -n 50 "$work/server.log"
	exit $status
fi

# Outside shared_preload_libraries the library must refuse to load, both
# when loaded explicitly and when a slot names it as output plugin.
echo "== without shared_preload_libraries: trellara refuses to load"
as_pg "$bindir/pg_ctl" -D "$data" -w -m fast stop >/dev/null
as_pg "$bindir/pg_ctl" -D "$data" -l "$work/server.log" -w -t 60 \
	-o "-c shared_preload_libraries=''" start >/dev/null
psql_pg() { as_pg "$bindir/psql" -h "$work" -p "$port" -U postgres -d postgres -X -q "$@"; }
refusals=0
for sql in "LOAD 'trellara'" \
	"SELECT pg_create_logical_replication_slot('not_preloaded', 'trellara')"; do
	out=$(psql_pg -c "$sql" 2>&1) || true
	if grep -q 'trellara must be loaded via shared_preload_libraries' <<<"$out" &&
		grep -q 'HINT:  Add trellara to shared_preload_libraries' <<<"$out"; then
		echo "ok   - refused: $sql"
	else
		echo "FAIL - not refused: $sql"
		echo "$out"
		refusals=1
	fi
done
leftover=$(psql_pg -At -c "SELECT count(*) FROM pg_replication_slots")
if [ "$leftover" != 0 ]; then
	echo "FAIL - a refused slot creation left a slot behind"
	refusals=1
fi
exit $refusals
