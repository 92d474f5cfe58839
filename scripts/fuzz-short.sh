#!/usr/bin/env bash
# make fuzz-short: every Fuzz target in the repository (found, not listed),
# each for FUZZTIME (default 5s). go test -fuzz takes one package and one
# target at a time. A failing input is written to the package's
# testdata/fuzz/ and reruns as a seed in every go test after that.
#
# Go 1.26's fuzzing coordinator can fail a run exactly at the -fuzztime
# deadline with a bare "context deadline exceeded" and no failing input: a
# race between its deadline and a worker's shutdown (go.dev/issue/75804,
# fixed in Go 1.27). On a 2-core machine it hit about one run in sixteen,
# once in every clean-clone make test, so a target would meet it twice in
# a row in about one make test in sixteen. Such a run is run again, up to
# reruns_max times. Any other failure fails, and so does a run that wrote
# a failing input, and the race reruns_max + 1 times in a row.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-5s}"
read -r -a flags <<<"${FUZZFLAGS:-}"
reruns_max=3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
n=0
for f in $(grep -rl --include='*_test.go' --exclude-dir=.git '^func Fuzz' . | sort); do
	pkg=$(dirname "$f")
	for t in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		n=$((n + 1))
		for ((attempt = 0; ; attempt++)); do
			echo "fuzz $pkg $t ($FUZZTIME)"
			if "$GO" test "$pkg" -run='^$' -fuzz="^$t\$" -fuzztime="$FUZZTIME" "${flags[@]}" 2>&1 | tee "$log"; then
				break
			fi
			if [ "$attempt" -lt "$reruns_max" ] && grep -qx '    context deadline exceeded' "$log" &&
				! grep -q -e 'Failing input written' -e '^panic:' "$log"; then
				echo "fuzz $pkg $t: the fuzzing coordinator's deadline race (go.dev/issue/75804), no failing input written: run again ($((attempt + 1)) of $reruns_max)"
				continue
			fi
			exit 1
		done
	done
done
if [ "$n" -eq 0 ]; then
	echo "fuzz-short: no Fuzz targets found"
	exit 1
fi
echo "fuzz-short: $n targets"
