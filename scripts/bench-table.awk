# bench-table.awk: the performance table of issue 33, filled from the raw
# output of `make bench` (go test -bench lines, the benchmarks' "range"
# log lines, and the "== " lines the script writes: machine, commit, load
# before and after, the verify table size). Every row names Trellara's
# figure, the baseline's, measured in the same run, the ratio, the goal
# and the verdict; a row the run did not measure says so and names the
# target that does.
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
function row(what, trel, base, ratio, goal, verdict) {
	printf "| %s | %s | %s | %s | %s | %s |\n", what, trel, base, ratio, goal, verdict
}
function unmeasured(what, goal, target) { row(what, "not measured in this run", "", "", goal, "run " target) }
/^== machine: / && machine == "" { machine = substr($0, 13) }
/^== commit: / && commit == "" { commit = substr($0, 12) }
/^== load before: / && loadb == "" { loadb = substr($0, 17) }
/^== load after: / { loada = substr($0, 16) }
/^== verify rows / { vrows = $4 }
# Catch-up ratios are native seconds over Trellara seconds per ABBA pair
# (above 1: Trellara faster); every run's rate is in the run lines.
/^BenchmarkApplyVsNativeReplication/ {
	e2elo = lo(e2elo, metric($0, "ratio_min")); e2ehi = hi(e2ehi, metric($0, "ratio_max"))
	tcpu = hi(tcpu, metric($0, "trellara_cpu_s_per_100k_max")); ncpu = hi(ncpu, metric($0, "native_cpu_s_per_100k_max"))
	e2et = lo(e2et, metric($0, "trellara_min_txn/s")); e2en = lo(e2en, metric($0, "native_min_txn/s"))
}
/^BenchmarkApplyVsNativeExtension/ {
	xlo = lo(xlo, metric($0, "ratio_min")); xhi = hi(xhi, metric($0, "ratio_max"))
	xcpu = hi(xcpu, metric($0, "extension_cpu_s_per_100k_max")); xncpu = hi(xncpu, metric($0, "native_cpu_s_per_100k_max"))
	xt = lo(xt, metric($0, "extension_min_txn/s")); xn = lo(xn, metric($0, "native_min_txn/s"))
}
# Latency ratios are Trellara over native per pair (above 1: slower).
/^BenchmarkSteadyLatency\/rate-[0-9]+/ {
	split($1, f, /[-\/]/); r = f[3] + 0
	if (!(r in seenrate)) { seenrate[r] = 1; rates[++nrates] = r }
	lt50[r] = hi(lt50[r], metric($0, "trellara_p50_max_ms")); ln50[r] = hi(ln50[r], metric($0, "native_p50_max_ms"))
	lt99[r] = hi(lt99[r], metric($0, "trellara_p99_max_ms")); ln99[r] = hi(ln99[r], metric($0, "native_p99_max_ms"))
	lr50[r] = hi(lr50[r], metric($0, "p50_ratio_max")); lr99[r] = hi(lr99[r], metric($0, "p99_ratio_max"))
}
/^BenchmarkSnapshotVsTablesync/ {
	slo = lo(slo, metric($0, "ratio_min")); shi = hi(shi, metric($0, "ratio_max"))
	st = lo(st, metric($0, "trellara_min_rows/s")); sn = lo(sn, metric($0, "native_min_rows/s"))
}
/^BenchmarkLargeTxnVsNativeStreaming/ {
	glo = lo(glo, metric($0, "ratio_min")); ghi = hi(ghi, metric($0, "ratio_max"))
	grss = hi(grss, metric($0, "peak_RSS_MiB_max"))
	gt = lo(gt, metric($0, "trellara_min_rows/s")); gn = lo(gn, metric($0, "native_min_rows/s"))
}
/^BenchmarkRunLocalMemory/ {
	n = split($0, f, /[ \t]+/)
	for (i = 2; i <= n; i++) if (f[i] ~ /^peak_RSS_MiB\//) mrss = hi(mrss, f[i-1])
}
/^BenchmarkRelayVsRecvlogical/ { rlo = lo(rlo, metric($0, "ratio_min")); rhi = hi(rhi, metric($0, "ratio_max")) }
/^BenchmarkSidecarVsRelay/ { v = metric($0, "sidecar/relay"); sclo = lo(sclo, v); schi = hi(schi, v) }
# verify: the default configuration (verify opens min(4, CPUs)
# connections per side: 2 on two cores) with the C row hash, its worst
# run per table size; wall against count(*)'s, and the source's CPU
# against count(*)'s from the one-connection run (the only one that
# measures it: c-one-core).
/^BenchmarkVerify\/c-connections-2/ {
	k = (vrows == "") ? "1000000" : vrows
	if (!(k in seenv)) { seenv[k] = 1; vsizes[++nv] = k }
	vw[k] = hi(vw[k], metric($0, "verify/count")); vb[k] = hi(vb[k], metric($0, "verify/count-both"))
	vs[k] = hi(vs[k], metric($0, "verify-s")); vcs[k] = hi(vcs[k], metric($0, "count-s"))
	vbs[k] = hi(vbs[k], metric($0, "count-both-s"))
}
/^BenchmarkVerify\/c-one-core/ {
	k = (vrows == "") ? "1000000" : vrows
	vc[k] = hi(vc[k], metric($0, "src-cpu/count-cpu"))
}
function verdict(ok) { return ok ? "met" : "not met" }
END {
	print ""
	print "== issue 33 table"
	print "machine: " machine
	print "commit: " commit
	print "load before: " loadb
	print "load after: " loada
	print ""
	print "| measurement | trellara | baseline (same run) | ratio | goal | verdict |"
	print "|---|---|---|---|---|---|"
	w = "catch-up, 100k TPC-B, relay path (ABBA)"
	if (e2elo != "") {
		row(w, "≥ " e2et " txn/s; CPU ≤ " tcpu " s/100k", "native ≥ " e2en " txn/s; CPU ≤ " ncpu " s/100k",
			span(e2elo, e2ehi, "× per pair"), "≥ 1.5× every pair; CPU ≤ native", verdict(e2elo >= 1.5 && tcpu + 0 <= ncpu + 0))
	} else unmeasured(w, "≥ 1.5× every pair; CPU ≤ native", "make bench")
	w = "catch-up, 100k TPC-B, extension path (ABBA)"
	if (xlo != "") {
		row(w, "≥ " xt " txn/s; CPU ≤ " xcpu " s/100k", "native ≥ " xn " txn/s; CPU ≤ " xncpu " s/100k",
			span(xlo, xhi, "× per pair"), "≥ 2× every pair", verdict(xlo >= 2))
	} else unmeasured(w, "≥ 2× every pair", "make bench (needs pg_config)")
	for (i = 1; i <= nrates; i++) {
		r = rates[i]
		row("commit-to-apply at " r " txn/s (ABBA)", "p50 ≤ " lt50[r] " ms, p99 ≤ " lt99[r] " ms", "native p50 ≤ " ln50[r] " ms, p99 ≤ " ln99[r] " ms",
			sprintf("p50 ≤ %.2f×, p99 ≤ %.2f× (worst pair)", lr50[r], lr99[r]), "p50 and p99 ≤ 2× native", verdict(lr50[r] <= 2 && lr99[r] <= 2))
	}
	if (nrates == 0) unmeasured("commit-to-apply at 500 and 2000 txn/s", "p50 and p99 ≤ 2× native", "make bench")
	w = "initial snapshot, pgbench scale 50 (ABBA)"
	if (slo != "")
		row(w, "≥ " st " rows/s", "native tablesync ≥ " sn " rows/s", span(slo, shi, "× per pair"), "≥ 1.0× every pair", verdict(slo >= 1))
	else unmeasured(w, "≥ 1.0× every pair", "BENCH_PARTS=snapshot make bench")
	w = "one 4.5M-row transaction (ABBA)"
	if (glo != "")
		row(w, "≥ " gt " rows/s; peak RSS " grss " MiB", "native streaming ≥ " gn " rows/s", span(glo, ghi, "× per pair"), "≥ 1.0× every pair; RSS ≤ 256 MiB", verdict(glo >= 1 && grss + 0 <= 256))
	else if (mrss != "")
		row(w, "peak RSS " mrss " MiB (run --local --verify); speed not measured in this run", "", "", "≥ 1.0× every pair; RSS ≤ 256 MiB", "RSS " verdict(mrss + 0 <= 256) "; run BENCH_PARTS=large make bench")
	else unmeasured(w, "≥ 1.0× every pair; RSS ≤ 256 MiB", "BENCH_PARTS=large make bench")
	for (i = 1; i <= nv; i++) {
		k = vsizes[i]
		# The goal is count(*)'s wall on both sides (both at once, on the
		# same cores as verify); runs from before that metric existed are
		# judged against the source's count(*) alone.
		both = (vb[k] != "")
		row(sprintf("verify vs count(*), %gM rows", k / 1e6), vs[k] " s",
			(both ? "count(*) on both sides " vbs[k] " s; source alone " : "count(*) ") vcs[k] " s",
			(both ? sprintf("%.2f× both sides, ", vb[k]) : "") sprintf("%.2f× source alone", vw[k]) (vc[k] != "" ? sprintf(", %.2f× CPU (one connection)", vc[k]) : ""),
			"≤ 3× count(*) wall on both sides", verdict((both ? vb[k] : vw[k]) + 0 <= 3))
	}
	if (nv == 0) unmeasured("verify vs count(*), 1M and 10M rows", "≤ 3×", "make bench")
	if (rlo != "") row("relay vs pg_recvlogical, 100k (ABBA)", "", "", span(rlo, rhi, "× per pair"), "≥ 0.9×", verdict(rlo >= 0.9))
	if (sclo != "") row("extension + sidecar vs relay, 100k", "", "", span(sclo, schi, "×"), "≥ 1.5×", verdict(sclo >= 1.5))
}
