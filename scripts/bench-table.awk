# bench-table.awk: the performance table of issue 16, filled from the raw
# output of `make bench` and `make bench-e2e` (go test -bench lines and the
# benchmarks' "range" log lines). Both scripts print it last, so one run
# shows each measurement as filed, as measured now, and its goal. A row the
# run did not measure names the target that does.
#
#   awk -f scripts/bench-table.awk <raw output>...
function metric(line, name,    i, n, f) {
	n = split(line, f, /[ \t]+/)
	for (i = 2; i <= n; i++) if (f[i] == name) return f[i-1]
	return ""
}
# lo and hi keep the range of the values seen; an empty value (a line
# without the metric, such as a benchmark's name line) changes nothing.
function lo(cur, v) { return (v != "" && (cur == "" || v + 0 < cur + 0)) ? v : cur }
function hi(cur, v) { return (v != "" && (cur == "" || v + 0 > cur + 0)) ? v : cur }
function span(a, b, unit) { return spanf(a, b, unit, "%.2f") }
function spanf(a, b, unit, f) {
	if (a == "") return ""
	if (sprintf(f, a) == sprintf(f, b)) return sprintf(f "%s", a, unit)
	return sprintf(f "–" f "%s", a, b, unit)
}
function row(what, filed, now, goal, verdict) {
	printf "| %s | %s | %s | %s | %s |\n", what, filed, now, goal, verdict
}
/^BenchmarkApplyVsNativeReplication/ {
	e2elo = lo(e2elo, metric($0, "ratio_min")); e2ehi = hi(e2ehi, metric($0, "ratio_max"))
	v = metric($0, "trellara_cpu_s_per_100k_max"); if (v != "") tcpu = hi(tcpu, v)
	v = metric($0, "native_cpu_s_per_100k_max"); if (v != "") ncpu = hi(ncpu, v)
}
/^BenchmarkApplyVsNativeExtension/ {
	xlo = lo(xlo, metric($0, "ratio_min")); xhi = hi(xhi, metric($0, "ratio_max"))
	v = metric($0, "extension_cpu_s_per_100k_max"); if (v != "") xcpu = hi(xcpu, v)
	v = metric($0, "native_cpu_s_per_100k_max"); if (v != "") xncpu = hi(xncpu, v)
}
/^BenchmarkRelayVsRecvlogical/ {
	rlo = lo(rlo, metric($0, "ratio_min")); rhi = hi(rhi, metric($0, "ratio_max"))
}
/^BenchmarkSidecarVsRelay/ {
	v = metric($0, "sidecar/relay"); slo = lo(slo, v); shi = hi(shi, v)
}
/^BenchmarkRunLocalMemory/ {
	n = split($0, f, /[ \t]+/)
	for (i = 2; i <= n; i++) if (f[i] ~ /^peak_RSS_MiB\//) { mlo = lo(mlo, f[i-1]); mhi = hi(mhi, f[i-1]) }
}
/^BenchmarkVerify\/c-/ {
	v = metric($0, "verify/count"); if (v != "") { clo = lo(clo, v); chi = hi(chi, v) }
	if ($0 ~ /^BenchmarkVerify\/c-connections-2/ && v != "") cdef = hi(cdef, v)
	v = metric($0, "src-cpu/count-cpu"); if (v != "") { cclo = lo(cclo, v); cchi = hi(cchi, v) }
}
/^BenchmarkVerify\/(one-core|server-default|parallel|connections)/ {
	v = metric($0, "verify/count"); if (v != "") { qlo = lo(qlo, v); qhi = hi(qhi, v) }
}
/range native +p50/ { sub(/^[ \t]*range native +/, ""); latn = $0 }
/range trellara +p50/ { sub(/^[ \t]*range trellara +/, ""); latt = $0 }
END {
	print ""
	print "== issue 16 table (\"filed\": the figures the issue was filed with; \"this run\": measured above)"
	print "| measurement | filed | this run | goal | verdict |"
	print "|---|---|---|---|---|"
	if (e2elo != "") {
		now = span(e2elo, e2ehi, "× native per pair")
		if (tcpu != "") now = now sprintf(" (CPU s per 100k, highest run: trellara %s, native %s)", tcpu, ncpu)
		v = (e2elo >= 1.5) ? "met" : (e2elo >= 1.2 ? "floor met, goal not" : "not met")
		row("end-to-end catch-up, 100k TPC-B, ABBA", "1.08–1.19× native (quiet)", now, "≥ 1.5× (floor 1.2×)", v)
	} else row("end-to-end catch-up, 100k TPC-B, ABBA", "1.08–1.19× native (quiet)", "not run here: make bench-e2e", "≥ 1.5× (floor 1.2×)", "")
	if (xlo != "") {
		now = span(xlo, xhi, "× native per pair")
		if (xcpu != "") now = now sprintf(" (CPU s per 100k, highest run: trellara %s, native %s)", xcpu, xncpu)
		v = (xlo >= 1.5) ? "met" : (xlo >= 1.2 ? "floor met, goal not" : "not met")
		row("the same, source.capture: extension", "not measured", now, "≥ 1.5× (floor 1.2×)", v)
	} else row("the same, source.capture: extension", "not measured", "not run here: make bench-e2e (needs pg_config)", "≥ 1.5× (floor 1.2×)", "")
	if (latn != "")
		row("steady 500 txn/s commit-to-apply", "not measured", "native " latn "; trellara " latt, "reported (p50/p99)", "reported")
	else row("steady 500 txn/s commit-to-apply", "not measured", "not run here: make bench-e2e", "reported (p50/p99)", "")
	if (rlo != "")
		row("relay vs pg_recvlogical, ABBA, 100k", "1.76× (biased); 0.58–0.99×", span(rlo, rhi, "×"), "≥ 0.9× fair", (rlo >= 0.9) ? "met" : "not met")
	else row("relay vs pg_recvlogical, ABBA, 100k", "1.76× (biased); 0.58–0.99×", "not run here: make bench", "≥ 0.9× fair", "")
	if (slo != "")
		row("extension + sidecar vs relay, 100k", "0.32×", span(slo, shi, "×"), "≥ 1.5×", (slo >= 1.5) ? "met" : "not met")
	else row("extension + sidecar vs relay, 100k", "0.32×", "not run here: make bench (needs pg_config)", "≥ 1.5×", "")
	if (mlo != "")
		row("peak RSS, run --local, one large transaction", "529–604 MiB", spanf(mlo, mhi, " MiB", "%.0f"), "≤ 256 MiB, flat", (mhi <= 256) ? "met" : "not met")
	else row("peak RSS, run --local, one large transaction", "529–604 MiB", "not run here: make bench-mem", "≤ 256 MiB, flat", "")
	if (clo != "") {
		now = "C row hash " span(clo, chi, "×") " wall"
		if (cclo != "") now = now ", " span(cclo, cchi, "×") " CPU"
		if (qlo != "") now = now "; SQL " span(qlo, qhi, "×")
		# The verdict is the default configuration's (verify opens
		# min(4, CPUs) connections per side: 2 here), its worst run.
		if (cdef == "") cdef = chi
		row("verify vs count(*), 1M rows", "9–17×", now, "within 3×", (cdef <= 3) ? "met" : "not met")
	} else if (qlo != "")
		row("verify vs count(*), 1M rows", "9–17×", "SQL " span(qlo, qhi, "×"), "within 3×", (qlo <= 3) ? "met" : "not met")
	else row("verify vs count(*), 1M rows", "9–17×", "not run here: make bench", "within 3×", "")
}
