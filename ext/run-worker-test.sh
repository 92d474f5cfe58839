#!/usr/bin/env bash
# Live test of the trellara background workers on a throwaway cluster:
# socket mode and ownership, peer-uid refusal, one sidecar at a time,
# frames (including chunked ones and a transaction far larger than the
# 16 x 64 KiB queue) delivered in full under backpressure, the slot
# advancing only on acknowledgements, and replay after a sidecar dies, after
# the decoder is terminated and after a server restart, values rendered
# with pinned output settings under hostile database defaults, and a
# refused acknowledgement that never splits a message in flight.
#
# Run as root on Debian 12 with postgresql-15 and postgresql-server-dev-15
# (like run-regress.sh; it installs the extension into the system server).
# Prints "N passed, M failed" and exits non-zero on any failure.
#
# Another server build (e.g. a 17 or 18 with trellara.so already installed
# in its pkglibdir): SERVER_BINDIR=/path/to/bin SKIP_INSTALL=1 (psql still
# comes from PG_CONFIG's bindir; any client version works).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in make gcc runuser; do
	command -v "$tool" >/dev/null || {
		echo "$0: $tool not found; install it (apt-get install -y make gcc util-linux)" >&2
		exit 1
	}
done
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$PG_CONFIG" --bindir)
server_bindir=${SERVER_BINDIR:-$bindir}
port=${PGPORT_WORKER_TEST:-54339}

if [ "$(id -u)" != 0 ]; then
	echo "run-worker-test.sh needs root (it tests a connection from another uid)" >&2
	exit 1
fi

passed=0
failed=0
check() {	# check NAME CONDITION-COMMAND...
	local name=$1
	shift
	if "$@"; then
		echo "ok   - $name"
		passed=$((passed + 1))
	else
		echo "FAIL - $name"
		# the last probe output, if any, says why
		[ -n "${out:-}" ] && head -n 8 <<<"$out" | sed 's/^/       | /'
		failed=$((failed + 1))
	fi
}

set -e
if [ -z "${SKIP_INSTALL:-}" ]; then
	make -s -C "$here" PG_CONFIG="$PG_CONFIG"
	make -s -C "$here" PG_CONFIG="$PG_CONFIG" install
fi
work=$(mktemp -d /tmp/trellara-worker.XXXXXX)
chmod 755 "$work"
chown postgres: "$work"
gcc -Wall -Werror -O2 -o "$work/probe" "$here/tools/trellara_probe.c"
data="$work/data"
sock="$work/trellara.sock"
set +e

pg() { runuser -u postgres -- "$@"; }
psqlc() { pg "$bindir/psql" -h "$work" -p "$port" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
probe() { pg "$work/probe" "$sock" "$@"; }

cleanup() {
	pg "$server_bindir/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1
	if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

pg "$server_bindir/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$work/initdb.log" 2>&1 || { cat "$work/initdb.log"; exit 1; }
{
	echo "shared_preload_libraries = 'trellara'"
	echo "wal_level = logical"
	echo "listen_addresses = ''"
	echo "unix_socket_directories = '$work'"
	echo "port = $port"
	echo "fsync = off"
	echo "logical_decoding_work_mem = 64kB"
	echo "trellara.database = 'postgres'"
	echo "trellara.socket_path = '$sock'"
	echo "trellara.queue_wait_timeout = 500"
	if "$server_bindir/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
		echo "output_plugin_libraries = 'pgoutput, test_decoding, trellara'"
	fi
} | pg tee -a "$data/postgresql.conf" >/dev/null

start() { pg "$server_bindir/pg_ctl" -D "$data" -l "$work/server.log" -w -t 60 start >/dev/null || { tail -n 30 "$work/server.log"; exit 1; }; }
wait_for() {	# wait_for SECONDS CONDITION-COMMAND...
	local t=$(( $1 * 10 ))
	shift
	while [ $t -gt 0 ]; do "$@" && return 0; sleep 0.1; t=$((t - 1)); done
	return 1
}
slot_exists() { [ "$(psqlc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'trellara'")" = 1 ]; }
confirmed() { psqlc "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'trellara'"; }
decoder_pid() { psqlc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'trellara decoder'"; }
decoder_running() { [ -n "$(decoder_pid)" ]; }
decoder_replaced() { local p; p=$(decoder_pid); [ -n "$p" ] && [ "$p" != "$1" ]; }
lsn_ge() { [ "$(psqlc "SELECT '$1'::pg_lsn >= '$2'::pg_lsn")" = t ]; }

start
check "socket file appears" wait_for 20 test -S "$sock"
check "slot created by the decoder with plugin trellara" wait_for 20 slot_exists
check "slot plugin is trellara" [ "$(psqlc "SELECT plugin FROM pg_replication_slots WHERE slot_name = 'trellara'")" = trellara ]
check "socket mode is 0600" [ "$(stat -c %a "$sock")" = 600 ]
check "socket owned by postgres" [ "$(stat -c %U "$sock")" = postgres ]

out=$(runuser -u nobody -- "$work/probe" "$sock" --seconds 2 2>&1)
check "another uid cannot even connect (mode 0600)" grep -q "Permission denied" <<<"$out"
out=$("$work/probe" "$sock" --seconds 2 2>&1)
check "root (other uid, bypasses file mode) is refused by the peer-uid check" grep -q "peer uid does not match" <<<"$out"
out=$(probe --bad-version --seconds 2 2>&1)
check "unknown protocol version is refused" grep -q "unsupported protocol version" <<<"$out"

start_lsn=$(confirmed)
psqlc "CREATE TABLE w (id int PRIMARY KEY, v text)"
psqlc "ALTER TABLE w ALTER COLUMN v SET STORAGE EXTERNAL"
psqlc "INSERT INTO w VALUES (1, 'one')"
psqlc "INSERT INTO w VALUES (2, repeat('z', 300000))"     # one frame over 4 queue slots
psqlc "INSERT INTO w SELECT g, 'row ' || g FROM generate_series(3, 3002) g"   # 3000 frames > 16 slots
end_lsn=$(psqlc "SELECT pg_current_wal_lsn()")

# a sidecar that never acknowledges: gets everything, the slot does not move
out=$(probe --commits 3 --seconds 20)
check "all 3 transactions delivered without acks" grep -q "done commits=3" <<<"$out"
check "large transaction delivered whole through the bounded queue" [ "$(grep -c '^frame I' <<<"$out")" = 3002 ]
check "chunked 300 kB frame reassembled" grep -q "^frame I len=3000[0-9][0-9]" <<<"$out"
sleep 1
check "confirmed_flush_lsn did not move without acks" [ "$(confirmed)" = "$start_lsn" ]

# while one sidecar is connected, a second is refused
probe --seconds 4 >"$work/first.out" 2>&1 &
first=$!
sleep 1
out=$(probe --seconds 2 2>&1)
check "second concurrent sidecar refused" grep -q "another sidecar is connected" <<<"$out"
wait $first

# the sidecar died unacknowledged: the next one gets everything again, acks it
out=$(probe --ack --commits 3 --seconds 20)
check "replayed after sidecar death" grep -q "done commits=3" <<<"$out"
check "replay is complete" [ "$(grep -c '^frame I' <<<"$out")" = 3002 ]
check "slot advances to the acknowledged end" wait_for 10 lsn_ge "$(confirmed)" "$end_lsn"
acked=$(confirmed)

# trellara_queue() (0.3) reads the live queue: the socket worker's pid, the
# sidecar's durable position, every published slot taken once idle.
psqlc "CREATE EXTENSION IF NOT EXISTS trellara" >/dev/null
queue() { psqlc "SELECT $1 FROM trellara_queue()"; }
queue_is() { [ "$(queue "$1")" = t ]; } # re-read on each try of wait_for
# (the socket worker has no database connection, so no pg_stat_activity
# row: its process title names it)
check "trellara_queue(): the socket worker's pid" grep -q "trellara socket server" "/proc/$(queue socket_pid)/cmdline"
check "trellara_queue(): the sidecar's durable position is the slot's" lsn_ge "$(queue acked_lsn)" "$acked"
check "trellara_queue(): slots published and taken, none filled when idle" wait_for 10 queue_is "published > 0 AND published = taken AND filled = 0"
epoch=$(queue decoder_epoch)

# terminate the decoder: it restarts, nothing acknowledged is replayed
check "decoder running" wait_for 20 decoder_running
pid=$(decoder_pid)
psqlc "SELECT pg_terminate_backend($pid)" >/dev/null
check "decoder restarted after termination" wait_for 20 decoder_replaced "$pid"
check "trellara_queue(): the decoder's restart counted" wait_for 10 queue_is "decoder_epoch > $epoch"
psqlc "INSERT INTO w VALUES (5000, 'after restart')"
out=$(probe --ack --commits 1 --seconds 20)
check "only the new transaction is delivered after a decoder restart" [ "$(grep -c '^frame I' <<<"$out")" = 1 ]

# unacknowledged at server restart: replayed after it
psqlc "INSERT INTO w VALUES (5001, 'before server restart')"
out=$(probe --commits 1 --seconds 20)
check "delivered before restart (not acked)" grep -q "done commits=1" <<<"$out"
pg "$server_bindir/pg_ctl" -D "$data" -w -m fast stop >/dev/null
start
check "socket back after server restart" wait_for 20 test -S "$sock"
out=$(probe --ack --commits 1 --seconds 20)
check "unacknowledged transaction replayed after server restart" grep -q "^frame I" <<<"$out"
check "acknowledged position survived the clean restart" lsn_ge "$(confirmed)" "$acked"

# WAL that is no transaction of ours (a checkpoint) is still acknowledgeable
# through a progress frame, so the slot never pins WAL for nothing
check "decoder running" wait_for 20 decoder_running
before=$(confirmed)
psqlc "CHECKPOINT"
out=$(probe --ack --seconds 5)
check "progress frame offered when idle" grep -q "^frame P" <<<"$out"
check "progress acknowledgement moves the slot" wait_for 10 bash -c "[ \"\$(runuser -u postgres -- $bindir/psql -h $work -p $port -U postgres -d postgres -XAtqc \"SELECT confirmed_flush_lsn > '$before' FROM pg_replication_slots WHERE slot_name = 'trellara'\")\" = t ]"

# Values are rendered with pinned output settings, whatever the database's
# own defaults say: a DMY date style, another interval style, fewer float
# digits, another time zone or bytea_output would otherwise change the text.
psqlc "CREATE TABLE typed (id int PRIMARY KEY, d date, i interval, f float8, tz timestamptz, b bytea, m money)"
for setting in "datestyle = 'SQL, DMY'" "intervalstyle = 'sql_standard'" "extra_float_digits = 0" \
	"timezone = 'Asia/Kolkata'" "bytea_output = 'escape'"; do
	psqlc "ALTER DATABASE postgres SET $setting"
done
check "decoder running" wait_for 20 decoder_running
pid=$(decoder_pid)   # it reads the database's settings when it connects: restart it
psqlc "SELECT pg_terminate_backend($pid)" >/dev/null
check "decoder restarted under the hostile database settings" wait_for 20 decoder_replaced "$pid"
psqlc "INSERT INTO typed VALUES (1, '2024-01-02', '-1 day -02:00:00', 1::float8 / 3, '2024-01-02 03:04:05+00', '\\x00ff', 1234.5)"
out=$(probe --ack --values --commits 1 --seconds 20)
check "date rendered ISO (not SQL, DMY)" grep -qx "value 1=2024-01-02" <<<"$out"
check "interval rendered in the postgres style" grep -qx "value 2=-1 days -02:00:00" <<<"$out"
check "float8 rendered with every digit (extra_float_digits 3)" grep -qx "value 3=0.3333333333333333" <<<"$out"
check "timestamptz rendered in UTC" grep -qx "value 4=2024-01-02 03:04:05+00" <<<"$out"
check "bytea rendered hex" grep -qx 'value 5=\\x00ff' <<<"$out"
check "money rendered with lc_monetary C" grep -qx 'value 6=\$1,234.50' <<<"$out"

# Many small transactions, queued while no sidecar is connected: each queue
# slot packs hundreds of them and the server writes several slots per send,
# so the probe reads commits from slots whose rest is still being written,
# and acknowledges each at once.  Every such ack must be accepted.
psqlc "CREATE TABLE small (id int PRIMARY KEY, v text)"
psqlc "DO \$\$ BEGIN FOR i IN 1..20000 LOOP INSERT INTO small VALUES (i, repeat('s', 600)); COMMIT; END LOOP; END \$\$"
small_end=$(psqlc "SELECT pg_current_wal_lsn()")
out=$(probe --ack --commits 20000 --seconds 60 2>&1)
check "20000 packed transactions delivered, each acknowledged as soon as read" grep -q "done commits=20000" <<<"$out"
no_error() { ! grep -q "^error" <<<"$out"; }
check "no acknowledgement of a delivered commit refused" no_error
check "slot advances through the packed transactions" wait_for 10 lsn_ge "$(confirmed)" "$small_end"

# A refused acknowledgement while a frame chunk is half sent: the server
# finishes the message in flight and then sends its 'E'; it must never
# splice the 'E' into the half-sent chunk, which would complete that frame
# with foreign bytes.
psqlc "INSERT INTO w VALUES (6000, repeat('m', 4000000))"   # 62 chunks of 64 KiB
out=$(probe --bad-ack-mid-message --seconds 60 2>&1)
check "probe caught the server blocked in the middle of a message" grep -q "server blocked mid-message" <<<"$out"
check "refused ack: the message in flight completes, then the error" grep -q "^error: invalid acknowledgement" <<<"$out"
out=$(probe --ack --commits 1 --seconds 30)
check "the refused sidecar's transaction is replayed whole to the next" grep -q "^frame I len=4000[0-9][0-9][0-9]" <<<"$out"

echo
echo "server log: $(grep -c 'trellara' "$work/server.log") trellara lines"
grep -E "ERROR|PANIC|TRAP" "$work/server.log" | grep -v "pg_terminate_backend" | head -5
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
