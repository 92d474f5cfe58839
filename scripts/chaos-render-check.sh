#!/usr/bin/env bash
# chaos-render-check.sh [report.html...]
#
# Renders the chaos correctness report in headless Chromium and checks that
# it renders: the screenshot is a non-empty PNG with more than one colour,
# and the browser logged no console message or uncaught error (the report
# has no scripts, so any console output is a fault). Without an argument it
# writes a fresh report with bin/trellara (TRELLARA overrides the binary)
# and also renders the published qualification reports
# (docs/qualification/*.html, written by trellara qualify / chaos live).
# CHROMIUM names the browser binary; default: chromium on PATH.
#
# Exit codes: 0 rendered cleanly, 1 it did not, 2 could not run.
set -euo pipefail

chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$chromium" ]; then
	echo "chaos-render-check: no Chromium found; install it (apt-get install chromium) or set CHROMIUM" >&2
	exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

reports=("$@")
if [ ${#reports[@]} -eq 0 ]; then
	trellara=${TRELLARA:-bin/trellara}
	if [ ! -x "$trellara" ]; then
		echo "chaos-render-check: $trellara not found; run make build or set TRELLARA" >&2
		exit 2
	fi
	"$trellara" chaos report --output "$tmp/report.html"
	reports=("$tmp/report.html")
	for q in "$(dirname "$0")"/../docs/qualification/*.html; do
		[ -f "$q" ] && reports+=("$q")
	done
fi

overall=0
for report in "${reports[@]}"; do
rm -rf "$tmp/profile" "$tmp/report.png"
url="file://$(realpath "$report")"

# --no-sandbox: Chromium refuses to run its sandbox as root (CI containers).
# A private profile directory keeps the run from touching the user's.
set +e
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
	--user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 \
	--window-size=1280,2400 --screenshot="$tmp/report.png" "$url" >"$tmp/chromium.out" 2>"$tmp/chromium.log"
rc=$?
set -e
if [ $rc -ne 0 ]; then
	echo "chaos-render-check: chromium exited $rc" >&2
	cat "$tmp/chromium.log" >&2
	exit 1
fi

fail=0
if [ ! -s "$tmp/report.png" ]; then
	echo "chaos-render-check: no screenshot written" >&2
	exit 1
fi
size=$(stat -c %s "$tmp/report.png")
magic=$(head -c 8 "$tmp/report.png" | od -An -tx1 | tr -d ' \n')
if [ "$magic" != "89504e470d0a1a0a" ]; then
	echo "chaos-render-check: the screenshot is not a PNG" >&2
	fail=1
fi
# A blank page compresses to a few hundred bytes; the report is text,
# tables and a chart.
if [ "$size" -lt 20000 ]; then
	echo "chaos-render-check: the screenshot is only $size bytes: the page looks blank" >&2
	fail=1
fi
if grep -E "Uncaught|ERROR:CONSOLE|:CONSOLE\(|Failed to load resource|net::ERR_" "$tmp/chromium.log" >&2; then
	echo "chaos-render-check: the browser reported the errors above" >&2
	fail=1
fi
if [ $fail -ne 0 ]; then
	overall=1
	continue
fi
echo "chaos-render-check: $report rendered: ${size}-byte PNG screenshot, no console errors"
done
exit $overall
