# Helpers to start throwaway PostgreSQL clusters from installed server
# binaries; sourced by the demo scripts. PostgreSQL refuses to run as
# root, so as root the server runs as the postgres user.

pg_bin() {
	if [ -n "${TRELLARA_PG_BIN:-}" ]; then echo "$TRELLARA_PG_BIN"; return; fi
	ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$(( (RANDOM % 20000) + 30000 ))
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo "$p"; return; fi
	done
	echo "no free port" >&2; return 1
}

# start_cluster DIR PORT [extra postgres -c settings...]
start_cluster() {
	local dir=$1 port=$2; shift 2
	local bin; bin=$(pg_bin)
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres: "$dir"
	as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-instructions >"$dir/initdb.log" 2>&1
	local args=(-c wal_level=logical -c "port=$port" -c listen_addresses=127.0.0.1 -c "unix_socket_directories=$dir"
		-c max_replication_slots=10 -c max_wal_senders=10 -c logical_decoding_work_mem=1MB)
	for s in "$@"; do args+=(-c "$s"); done
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "${args[*]}" start >/dev/null
}

stop_cluster() {
	local dir=$1
	as_pg "$(pg_bin)/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
}
