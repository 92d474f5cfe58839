#!/usr/bin/env bash
# Checks scripts/fuzz-short.sh's handling of failed runs with a stand-in
# for go: it reruns a run that failed only by the fuzzing coordinator's
# deadline race, up to three times, and fails on everything else. make
# fuzz-short runs it first.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
race=$'--- FAIL: FuzzX (5.12s)\n    context deadline exceeded\nFAIL'
found=$'--- FAIL: FuzzX (0.31s)\n    fuzzing process hung or terminated unexpectedly\n    Failing input written to testdata/fuzz/FuzzX/0123\n    context deadline exceeded\nFAIL'
other=$'--- FAIL: FuzzX (0.01s)\n    x_test.go:9: decoded 3 rows, want 2\nFAIL'
# check NAME WANT_EXIT WANT_RERUNS OUTPUT...: the stand-in prints the Nth
# OUTPUT and fails on its Nth call while there is one, then passes.
check() {
	local name=$1 want=$2 reruns=$3
	shift 3
	: >"$dir/outputs"
	if [ $# -gt 0 ]; then
		printf '%s\0' "$@" >"$dir/outputs"
	fi
	echo 0 >"$dir/calls"
	cat >"$dir/go" <<'STUB'
#!/usr/bin/env bash
d=$(dirname "$0")
n=$(cat "$d/calls")
echo $((n + 1)) >"$d/calls"
mapfile -d '' outs <"$d/outputs"
if [ "$n" -lt "${#outs[@]}" ]; then
	printf '%s\n' "${outs[$n]}"
	exit 1
fi
echo ok
STUB
	chmod +x "$dir/go"
	local got=0
	GO="$dir/go" FUZZTIME=1s ./scripts/fuzz-short.sh >"$dir/out" 2>&1 || got=$?
	local seen
	seen=$(grep -c "deadline race" "$dir/out" || true)
	if [ "$got" != "$want" ] || [ "$seen" != "$reruns" ]; then
		echo "fuzz-short-check: $name: exit $got with $seen reruns, want exit $want with $reruns" >&2
		cat "$dir/out" >&2
		exit 1
	fi
}
check "the race once" 0 1 "$race"
check "the race three times in a row" 0 3 "$race" "$race" "$race"
check "the race four times in a row" 1 3 "$race" "$race" "$race" "$race"
check "a failing input written" 1 0 "$found"
check "another failure" 1 0 "$other"
check "no failure" 0 0
echo "fuzz-short-check: ok"
