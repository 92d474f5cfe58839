package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/config"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file (run go test -update and review the diff):\n%s", path, got)
	}
}

// sampleResult is one of each thing the report can say.
func sampleResult() *Result {
	return &Result{
		FormatVersion:       FormatVersion,
		Verdict:             Diverged,
		StartedAt:           time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Duration:            1234 * time.Millisecond,
		SourceRowsPerSecond: 1_250_000.4,
		TargetRowsPerSecond: 1_190_000,
		RowHash:             HashingTyped,
		Watermark:           &Watermark{SourceLSN: 0x1_6B374D48, TargetCheckpoint: 0x1_6B374E00, Waited: 250 * time.Millisecond},
		Recovery:            "trellara repair-plan --config trellara.yml",
		Tables: []TableResult{
			{
				Table: "public.customers", TargetTable: "public.customers", Verdict: Converged,
				KeyBasis: BasisPrimaryKey, KeyColumns: []string{"id"},
				SourceRows: 1_000_000, TargetRows: 1_000_000,
				SourceChecksum: "9f1c2a0b77d3e415", TargetChecksum: "9f1c2a0b77d3e415",
			},
			{
				Table: "public.line_items", TargetTable: `archive."Line Items"`, Verdict: Diverged,
				Reasons:  []string{"rows differ in 3 of 64 buckets"},
				KeyBasis: BasisPrimaryKey, KeyColumns: []string{"order_id", "Line"},
				SourceRows: 5000, TargetRows: 4999,
				SourceChecksum: "0123456789abcdef", TargetChecksum: "fedcba9876543210",
				Buckets: 64, MismatchingBucketCount: 3,
				MismatchingBuckets: []BucketDiff{{7, 80, 80}, {19, 75, 74}, {40, 81, 82}},
				SampleKeys: []SampleKey{
					{Key: "(42,1)", Kind: KindMissing},
					{Key: "(900,3)", Kind: KindExtra},
					{Key: `(12,"a b")`, Kind: KindChanged},
				},
				Rechecks: 1,
				Recovery: "trellara repair-plan --config trellara.yml --table public.line_items",
			},
			{
				Table: "public.events", TargetTable: "public.events", Verdict: Diverged,
				Reasons:    []string{"target table public.events does not exist"},
				KeyBasis:   BasisWholeRow,
				Notes:      []string{"no primary key or replica identity index: rows are identified by their whole content, so a changed row shows as one missing and one extra"},
				SourceRows: 12,
				Recovery:   "trellara repair-plan --config trellara.yml --table public.events",
			},
		},
	}
}

// behindResult is a target short of the watermark, one table differing
// meanwhile: the lag, the age and the fix, no divergence.
func behindResult() *Result {
	checked := time.Date(2026, 3, 1, 12, 0, 31, 0, time.UTC)
	r := sampleResult()
	r.Verdict = Behind
	r.Watermark = &Watermark{SourceLSN: 0x1_6B374D48, TargetCheckpoint: 0x1_6B2F0000, Waited: 30 * time.Second,
		CheckedAt: checked, TargetAppliedAt: checked.Add(-4*time.Minute - 12*time.Second)}
	r.Recovery, r.advice = CatchUpCommand("trellara.yml"), CatchUpAdvice("trellara.yml")
	r.Tables = r.Tables[:2]
	for i := range r.Tables {
		r.Tables[i].Verdict, r.Tables[i].Recovery = Behind, ""
	}
	r.Tables[1].Notes = []string{"the target is behind the watermark: these keys may only be waiting to be applied"}
	return r
}

func TestRenderTextGolden(t *testing.T) {
	var b bytes.Buffer
	if err := sampleResult().RenderText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "diverged.txt", b.Bytes())

	conv := &Result{FormatVersion: FormatVersion, Verdict: Converged, Duration: 80 * time.Millisecond,
		Tables: []TableResult{sampleResult().Tables[0]}}
	b.Reset()
	if err := conv.RenderText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "converged.txt", b.Bytes())

	b.Reset()
	if err := behindResult().RenderText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "behind.txt", b.Bytes())
}

func TestJSONGolden(t *testing.T) {
	js, err := json.MarshalIndent(sampleResult(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "diverged.json", append(js, '\n'))
	js, err = json.MarshalIndent(behindResult(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "behind.json", append(js, '\n'))

	// A result without a watermark or lists still has every field.
	js, err = json.Marshal(&Result{FormatVersion: FormatVersion, Verdict: Converged, Tables: []TableResult{{Table: "public.a"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"watermark":null`, `"watermark_lsn":null`, `"target_checkpoint_lsn":null`, `"lag_bytes":null`, `"lag_age_seconds":null`, `"notes":[]`, `"sample_keys":[]`, `"mismatching_buckets":[]`, `"reasons":[]`, `"duration_seconds":0`} {
		if !strings.Contains(string(js), field) {
			t.Errorf("JSON lacks %s: %s", field, js)
		}
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	in := sampleResult()
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Result
	if err := json.Unmarshal(js, &out); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(&out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js, again) || out.Duration != in.Duration || *out.Watermark != *in.Watermark {
		t.Errorf("round trip changed the result:\n%s\n%s", js, again)
	}
}

func TestWatermarkJSONRoundTrip(t *testing.T) {
	in := Watermark{SourceLSN: 0x2_00000010, TargetCheckpoint: 0x1_FFFFFFFF, Waited: 1500 * time.Millisecond}
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"source_lsn":"2/10","target_checkpoint":"1/FFFFFFFF","caught_up":false,"waited_seconds":1.5,"checked_at":null,"target_applied_at":null}`; string(js) != want {
		t.Errorf("got %s, want %s", js, want)
	}
	var out Watermark
	if err := json.Unmarshal(js, &out); err != nil || out != in {
		t.Errorf("round trip %+v, %v; want %+v", out, err, in)
	}
	in.CheckedAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in.TargetAppliedAt = in.CheckedAt.Add(-time.Minute)
	js, _ = json.Marshal(in)
	if err := json.Unmarshal(js, &out); err != nil || out != in {
		t.Errorf("round trip %+v, %v; want %+v", out, err, in)
	}
	// caught_up is computed from the LSNs, whatever a stored file says.
	if err := json.Unmarshal([]byte(`{"source_lsn":"2/10","target_checkpoint":"1/0","caught_up":true}`), &out); err != nil || out.CaughtUp() {
		t.Errorf("stored caught_up:true beside a checkpoint short of the watermark read as caught up (%v)", err)
	}
	if err := json.Unmarshal([]byte(`{"source_lsn":"nope"}`), &out); err == nil {
		t.Error("bad LSN accepted")
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		r    *Result
		err  error
		want int
	}{
		{&Result{Verdict: Converged}, nil, 0},
		{&Result{Verdict: Diverged}, nil, 1},
		{&Result{Verdict: Behind}, nil, 3},
		{&Result{Verdict: "SOMETHING NEW"}, nil, 1},
		{&Result{Verdict: Behind}, errors.New("boom"), 2},
		{nil, errors.New("boom"), 2},
		{&Result{Verdict: Converged}, errors.New("boom"), 2},
		{nil, nil, 2},
	} {
		if got := ExitCode(tc.r, tc.err); got != tc.want {
			t.Errorf("ExitCode(%v, %v) = %d, want %d", tc.r, tc.err, got, tc.want)
		}
	}
}

func TestOptionsWithDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // substring of the error; "" for success
	}{
		{"ok", Options{Tables: []string{"public.a"}}, ""},
		{"no tables", Options{}, "no tables"},
		{"unqualified", Options{Tables: []string{"a"}}, "schema-qualified"},
		{"twice", Options{Tables: []string{"public.a", "PUBLIC.A"}}, "names table public.a twice"},
		{"buckets", Options{Tables: []string{"public.a"}, Buckets: bucketsMax + 1}, "Buckets is 65537"},
		{"negative samples", Options{Tables: []string{"public.a"}, SampleKeysMax: -1}, "SampleKeysMax"},
		{"drill", Options{Tables: []string{"public.a"}, DrillRowsMax: drillRowsMax + 1}, "DrillRowsMax"},
		{"rechecks", Options{Tables: []string{"public.a"}, RechecksMax: -2}, "RechecksMax"},
		{"workers", Options{Tables: []string{"public.a"}, ParallelWorkers: 65}, "ParallelWorkers"},
		{"workers off", Options{Tables: []string{"public.a"}, ParallelWorkers: -2}, "allowed -1..64"},
		{"wait", Options{Tables: []string{"public.a"}, WaitCaughtUp: -time.Second}, "WaitCaughtUp"},
	} {
		o, specs, err := tc.o.withDefaults()
		if tc.name == "ok" {
			if o2, _, err2 := (Options{Tables: []string{"public.a"}, WaitCaughtUp: NoWait}).withDefaults(); err2 != nil || o2.WaitCaughtUp != NoWait {
				t.Errorf("NoWait: %v, wait %s", err2, o2.WaitCaughtUp)
			}
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "":
			if o.SampleKeysMax != defaultSampleKeysMax || o.DrillRowsMax != defaultDrillRowsMax || o.WaitCaughtUp != defaultWaitCaughtUp ||
				o.RechecksMax != defaultRechecksMax || o.ConfigPath != defaultConfigPath || len(specs) != 1 || specs[0].dst != specs[0].src {
				t.Errorf("%s: defaults not applied: %+v %v", tc.name, o, specs)
			}
		case err == nil || !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: err %v, want ErrOptions containing %q", tc.name, err, tc.want)
		}
	}
}

func TestAutoBuckets(t *testing.T) {
	for _, tc := range []struct {
		rows float64
		want int64
	}{{-1, 64}, {0, 64}, {1000, 64}, {64 * 8192, 64}, {64*8192 + 1, 128}, {1e6, 128}, {1e7, 2048}, {1e12, bucketsMax}} {
		if got := autoBuckets(tc.rows); got != tc.want {
			t.Errorf("autoBuckets(%g) = %d, want %d", tc.rows, got, tc.want)
		}
	}
}

func TestPick(t *testing.T) {
	sizes := map[int64]int64{1: 50, 2: 10, 3: 30, 4: 10, 5: 500}
	size := func(id int64) int64 { return sizes[id] }
	for _, tc := range []struct {
		n      int
		budget int64
		want   []int64
		rows   int64
	}{
		{10, 1000, []int64{1, 2, 3, 4, 5}, 600},
		{2, 1000, []int64{2, 4}, 20},        // smallest first, ties by id
		{10, 55, []int64{2, 3, 4}, 50},      // stops before the budget
		{10, 5, []int64{2}, 10},             // always at least one
		{1, 1000, []int64{2}, 10},           // n bounds it
		{10, 100, []int64{1, 2, 3, 4}, 100}, // exactly at the budget
	} {
		got, rows := pick([]int64{5, 4, 3, 2, 1}, size, tc.n, tc.budget)
		if !equalInts(got, tc.want) || rows != tc.rows {
			t.Errorf("pick(n=%d, budget=%d) = %v, %d; want %v, %d", tc.n, tc.budget, got, rows, tc.want, tc.rows)
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSubBuckets(t *testing.T) {
	for _, tc := range []struct {
		rows, budget int64
		n            int
		want         int64
	}{{1000, 40, 3, 256}, {10, 100, 10, 2}, {1 << 40, 10, 1, bucketsMax}} {
		if got := subBuckets(tc.rows, tc.budget, tc.n); got != tc.want {
			t.Errorf("subBuckets(%d, %d, %d) = %d, want %d", tc.rows, tc.budget, tc.n, got, tc.want)
		}
	}
}

func TestDiffRows(t *testing.T) {
	src := []keyHash{{"1", 10}, {"2", 20}, {"3", 30}, {"dup", 5}, {"dup", 5}, {"same", 1}}
	dst := []keyHash{{"1", 10}, {"2", 21}, {"4", 40}, {"dup", 5}, {"same", 1}}
	got := diffRows(src, dst)
	want := []SampleKey{{"3", KindMissing}, {"dup", KindMissing}, {"4", KindExtra}, {"2", KindChanged}}
	if len(got) != len(want) {
		t.Fatalf("diffRows = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("diffRows[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	long := strings.Repeat("é", keyTextMax) // 2 bytes each
	if s := shorten(long); len(s) > keyTextMax+len("…") || !strings.HasSuffix(s, "…") || !strings.HasPrefix(long, strings.TrimSuffix(s, "…")) {
		t.Errorf("shorten cut badly: %d bytes", len(s))
	}
}

func TestChecksum(t *testing.T) {
	for _, tc := range []struct {
		sum  string
		want string
	}{
		{"0", "0000000000000000"},
		{"-1", "ffffffffffffffff"},
		{"18446744073709551617", "0000000000000001"}, // 2^64 + 1
		{"-5771168059591418190629", ""},
	} {
		v, _ := new(big.Int).SetString(tc.sum, 10)
		got := checksum(v)
		if tc.want != "" && got != tc.want {
			t.Errorf("checksum(%s) = %s, want %s", tc.sum, got, tc.want)
		}
		if len(got) != 16 {
			t.Errorf("checksum(%s) = %q, want 16 hex digits", tc.sum, got)
		}
	}
}

func TestGrouped(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := grouped(in); got != want {
			t.Errorf("grouped(%d) = %s, want %s", in, got, want)
		}
	}
}

func TestShapeProblems(t *testing.T) {
	spec := tableSpec{}
	spec.src.Schema, spec.src.Name = "public", "t"
	spec.dst = spec.src
	src := &shape{exists: true, relkind: "r", cols: []column{{"id", "integer", oidInt4}, {"A", "text", oidText}}, basis: BasisPrimaryKey, key: []string{"id"}}
	same := &shape{exists: true, relkind: "r", cols: []column{{"A", "text", oidText}, {"id", "integer", oidInt4}}}
	if p := shapeProblems(spec, src, same); len(p) != 0 {
		t.Errorf("reordered columns reported: %q", p)
	}
	if p := shapeProblems(spec, src, &shape{exists: true, relkind: "v"}); len(p) != 1 || !strings.Contains(p[0], "not a table") {
		t.Errorf("view target: %q", p)
	}
	if got := quoteName("A"); got != `"A"` {
		t.Errorf("quoteName(A) = %s", got)
	}
	if got := quoteName("a_1$"); got != "a_1$" {
		t.Errorf("quoteName(a_1$) = %s", got)
	}
}

// TestQueriesGolden pins the SQL Verify sends, for review: a change to it
// changes every checksum, so it should be deliberate.
func TestQueriesGolden(t *testing.T) {
	cols := []column{{"id", "bigint", oidInt8}, {"Region", "text", oidText}, {"amount", "numeric(12,2)", 1700}, {"at", "timestamp with time zone", oidTimestamptz}}
	cases := []struct {
		name    string
		relkind string
		key     []column
	}{
		{"single bigint key", "r", cols[:1]},
		{"composite key", "p", cols[:2]},
		{"numeric key", "r", cols[2:3]},
		{"whole row", "r", nil},
	}
	var b strings.Builder
	b.WriteString("-- Generated by TestQueriesGolden; go test -update rewrites it.\n")
	for _, h := range []Hashing{HashingTyped, HashingText} {
		for _, c := range cases {
			p := newPlan(`"public"."t"`, c.relkind, 16384, cols, c.key, h)
			fmt.Fprintf(&b, "\n-- %s hashing, %s: bucket pass\n", h, c.name)
			q, _ := p.bucketQuery(nil, 0, 64, wholeTable)
			b.WriteString(q + ";\n")
			fmt.Fprintf(&b, "-- %s hashing, %s: drill-down fetch after one split\n", h, c.name)
			q, _ = p.rowsQuery([]level{{0, 64, nil}, {1, 256, nil}}, 101)
			b.WriteString(q + ";\n")
			if h == HashingTyped {
				fmt.Fprintf(&b, "-- %s hashing, %s: totals over a middle range of pages (parallel hashing)\n", h, c.name)
				q, _ = p.totalQuery(tidRange{1024, 2048})
				b.WriteString(q + ";\n")
				fmt.Fprintf(&b, "-- %s hashing, %s: bucket pass over the last range of pages\n", h, c.name)
				q, _ = p.bucketQuery(nil, 0, 64, tidRange{2048, -1})
				b.WriteString(q + ";\n")
				// The same passes with the extension's C row hash: the
				// modes are what the SQL above hashes, so they pin it too.
				p.native = "public.trellara_verify_buckets"
				fmt.Fprintf(&b, "-- %s hashing, %s, C row hash: totals over a middle range of pages\n", h, c.name)
				q, args := p.totalQuery(tidRange{1024, 2048})
				fmt.Fprintf(&b, "%s; -- %v\n", q, args)
				fmt.Fprintf(&b, "-- %s hashing, %s, C row hash: bucket pass over the last range of pages\n", h, c.name)
				q, args = p.bucketQuery(nil, 0, 64, tidRange{2048, -1})
				fmt.Fprintf(&b, "%s; -- %v\n", q, args)
			}
		}
	}
	b.WriteString("\n-- session settings, first statement of every snapshot\n" + settingsSQL(0) + ";\n")
	b.WriteString("\n-- parallel hashing: a table's size in pages, then the snapshot shared with the other connections\n" +
		sqlPages + ";\n" + sqlExportSnapshot + ";\n" + sqlImportSnapshot + "'00000003-0000001B-1';\n")
	golden(t, "queries.sql", []byte(b.String()))
}

func TestBothReportsTheRealFailure(t *testing.T) {
	boom := errors.New("boom")
	fail := func(context.Context) error { return boom }
	waitCancel := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		a, b func(context.Context) error
		want error
	}{
		{"both fine", ok, ok, nil},
		{"a fails, b cancelled", fail, waitCancel, boom},
		{"b fails, a cancelled", waitCancel, fail, boom},
		{"b fails", ok, fail, boom},
	} {
		if got := both(context.Background(), tc.a, tc.b); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestVerdictTable walks decide's table, then the same cases through the
// result a real run assembles: every table's verdict and the result's come
// from decide, CONVERGED never stands beside a target short of the
// watermark, and DIVERGED only ever at a common one.
func TestVerdictTable(t *testing.T) {
	var (
		none   *Watermark
		at     = &Watermark{SourceLSN: 0x1_00000100, TargetCheckpoint: 0x1_00000100}
		ahead  = &Watermark{SourceLSN: 0x1_00000100, TargetCheckpoint: 0x2_00000000}
		behind = &Watermark{SourceLSN: 0x1_00000100, TargetCheckpoint: 0x1_000000FF}
	)
	for _, tc := range []struct {
		name   string
		wm     *Watermark
		differ bool
		want   Verdict
	}{
		{"no watermark, equal", none, false, Converged},
		{"no watermark, differ", none, true, Diverged},
		{"at the watermark, equal", at, false, Converged},
		{"at the watermark, differ", at, true, Diverged},
		{"past the watermark, equal", ahead, false, Converged},
		{"past the watermark, differ", ahead, true, Diverged},
		{"behind by one byte, equal", behind, false, Behind},
		{"behind by one byte, differ", behind, true, Behind},
		{"behind from zero, equal", &Watermark{SourceLSN: 0x1_00000100}, false, Behind},
	} {
		if got := decide(tc.wm, tc.differ); got != tc.want {
			t.Errorf("%s: decide = %s, want %s", tc.name, got, tc.want)
		}
	}

	table := func(name string, differ string) *tableState {
		tn := config.TableName{Schema: "public", Name: name}
		ts := &tableState{
			spec:       tableSpec{src: tn, dst: tn},
			srcShape:   &shape{exists: true, relkind: "r", basis: BasisPrimaryKey, key: []string{"id"}},
			comparable: true,
			srcTotal:   bucketStat{rows: 10, sum: big.NewInt(55)},
			dstTotal:   bucketStat{rows: 10, sum: big.NewInt(55)},
		}
		switch differ {
		case "rows":
			ts.dstTotal = bucketStat{rows: 9, sum: big.NewInt(45)}
			ts.split, ts.buckets, ts.mismatched = true, 64, []int64{3}
			ts.src = map[int64]bucketStat{3: {rows: 1, sum: big.NewInt(10)}}
			ts.dst = map[int64]bucketStat{}
		case "shape":
			ts.comparable, ts.reasons = false, []string{"target table public." + name + " does not exist"}
		}
		return ts
	}
	for _, wm := range []*Watermark{none, at, ahead, behind} {
		for _, set := range [][]string{{""}, {"", "rows"}, {"", "shape"}, {"rows", "shape"}} {
			v := &verifier{o: Options{ConfigPath: "flow.yml"}, src: &side{}, dst: &side{}}
			differ := false
			for i, d := range set {
				v.tables = append(v.tables, table(fmt.Sprintf("t%d", i), d))
				differ = differ || d != ""
			}
			r := v.result(time.Now(), wm)
			name := fmt.Sprintf("watermark %+v, tables %q", wm, set)
			want := decide(wm, differ)
			if r.Verdict != want {
				t.Errorf("%s: verdict %s, want %s", name, r.Verdict, want)
			}
			for i, tr := range r.Tables {
				if w := decide(wm, set[i] != ""); tr.Verdict != w {
					t.Errorf("%s: %s verdict %s, want %s", name, tr.Table, tr.Verdict, w)
				}
				if (tr.Recovery != "") != (tr.Verdict == Diverged) {
					t.Errorf("%s: %s verdict %s with recovery %q", name, tr.Table, tr.Verdict, tr.Recovery)
				}
			}
			wantRecovery := map[Verdict]string{Converged: "", Diverged: "trellara repair-plan --config flow.yml", Behind: "trellara run --config flow.yml --local --verify"}[want]
			if r.Recovery != wantRecovery {
				t.Errorf("%s: recovery %q, want %q", name, r.Recovery, wantRecovery)
			}
			if code, wantCode := ExitCode(r, nil), map[Verdict]int{Converged: 0, Diverged: 1, Behind: 3}[want]; code != wantCode {
				t.Errorf("%s: exit code %d, want %d", name, code, wantCode)
			}
			var b strings.Builder
			if err := r.RenderText(&b); err != nil {
				t.Fatal(err)
			}
			text := b.String()
			caughtUp := wm == nil || wm.CaughtUp()
			if !caughtUp && (strings.Contains(text, "CONVERGED") || strings.Contains(text, "DIVERGED")) {
				t.Errorf("%s: a target behind the watermark is called converged or diverged:\n%s", name, text)
			}
			if strings.Contains(text, "CONVERGED") && strings.Contains(text, "NOT caught up") {
				t.Errorf("%s: CONVERGED beside NOT caught up:\n%s", name, text)
			}
			if !caughtUp && !strings.Contains(text, "fix: start or catch up the pipeline: trellara run --config flow.yml --local --verify") {
				t.Errorf("%s: BEHIND without the catch-up command:\n%s", name, text)
			}
			if !strings.HasPrefix(text, string(want)+":") {
				t.Errorf("%s: text does not start with %s:\n%s", name, want, text)
			}
		}
	}
}

// TestWatermarkLag: the lag in bytes and its age, and nothing of either
// when caught up.
func TestWatermarkLag(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		w       Watermark
		bytes   uint64
		age     time.Duration
		ageKnow bool
	}{
		{Watermark{SourceLSN: 0x2_00000010, TargetCheckpoint: 0x1_FFFFFFF0}, 0x20, 0, false},
		{Watermark{SourceLSN: 0x2_00000010, TargetCheckpoint: 0x1_FFFFFFF0, CheckedAt: at, TargetAppliedAt: at.Add(-90 * time.Second)}, 0x20, 90 * time.Second, true},
		{Watermark{SourceLSN: 0x10, TargetCheckpoint: 0x8, CheckedAt: at, TargetAppliedAt: at.Add(time.Second)}, 8, 0, true}, // clock skew
		{Watermark{SourceLSN: 0x10, TargetCheckpoint: 0x10, CheckedAt: at, TargetAppliedAt: at.Add(-time.Hour)}, 0, 0, false},
		{Watermark{SourceLSN: 0x10, TargetCheckpoint: 0x20}, 0, 0, false},
	} {
		age, ok := tc.w.LagAge()
		if got := tc.w.LagBytes(); got != tc.bytes || age != tc.age || ok != tc.ageKnow {
			t.Errorf("%+v: lag %d bytes, age %s %v; want %d, %s %v", tc.w, got, age, ok, tc.bytes, tc.age, tc.ageKnow)
		}
	}
}

// TestSplitPages: the ranges start at page 0, follow each other without gap
// or overlap, the last is open, and small tables stay whole.
func TestSplitPages(t *testing.T) {
	for _, tc := range []struct {
		pages   int64
		n, min  int
		wantLen int
	}{
		{0, 4, 1, 1}, {3, 4, 1, 3}, {10, 4, 1, 4},
		{10_000, 4, 1024, 4}, {2047, 4, 1024, 1}, {5000, 4, 1024, 4}, {10, 1, 1, 1},
	} {
		got := splitPages(tc.pages, tc.n, tc.min)
		if len(got) != tc.wantLen {
			t.Errorf("splitPages(%d, %d, %d) = %v, want %d ranges", tc.pages, tc.n, tc.min, got, tc.wantLen)
			continue
		}
		if got[0].lo != 0 || got[len(got)-1].hi != -1 {
			t.Errorf("splitPages(%d, %d, %d) = %v: must start at 0 and end open", tc.pages, tc.n, tc.min, got)
		}
		for i := 1; i < len(got); i++ {
			if got[i].lo != got[i-1].hi || got[i].lo <= got[i-1].lo {
				t.Errorf("splitPages(%d, %d, %d) = %v: range %d does not follow %d", tc.pages, tc.n, tc.min, got, i, i-1)
			}
		}
	}
}

// A last verify stored by format 1 (milliseconds) reads back with the same
// durations as one stored by format 2 (seconds).
func TestResultReadsFormatOne(t *testing.T) {
	for _, tc := range []struct{ name, js string }{
		{"format 1", `{"format_version":1,"duration_ms":1500,"watermark":{"source_lsn":"0/10","target_checkpoint":"0/10","caught_up":true,"waited_ms":250}}`},
		{"format 2", `{"format_version":2,"duration_seconds":1.5,"watermark":{"source_lsn":"0/10","target_checkpoint":"0/10","caught_up":true,"waited_seconds":0.25}}`},
	} {
		var r Result
		if err := json.Unmarshal([]byte(tc.js), &r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Duration != 1500*time.Millisecond || r.Watermark == nil || r.Watermark.Waited != 250*time.Millisecond {
			t.Errorf("%s: duration %s, watermark %+v; want 1.5s and waited 250ms", tc.name, r.Duration, r.Watermark)
		}
	}
}
