#!/usr/bin/env bash
# phase.sh NAME COMMAND...: runs COMMAND, then prints how long phase NAME
# took and whether it passed (make test and .ci/run print every phase's
# time, so a slow phase is visible in every CI log).
name=$1; shift
start=$SECONDS
echo "== phase $name"
"$@"
rc=$?
echo "== phase $name: $((SECONDS - start))s, exit $rc"
exit $rc
