package check

import (
	"reflect"
	"strings"
	"testing"
)

// TestToastRule pins which columns the unchanged-TOAST note lists: a value
// must be able to exceed the TOAST threshold on its own.
func TestToastRule(t *testing.T) {
	for bs, want := range map[int64]int64{8192: 2032, 16384: 4080, 32768: 8176} {
		if got := toastThreshold(bs); got != want {
			t.Errorf("toastThreshold(%d) = %d, want %d", bs, got, want)
		}
	}
	const threshold, utf8 = 2032, 4
	varchar := func(n int32) toastColumn { return toastColumn{name: "v", typ: oidVarchar, typmod: n + 4} }
	for _, tc := range []struct {
		what string
		col  toastColumn
		want bool
	}{
		{"numeric", toastColumn{typ: oidNumeric, typmod: -1}, false},
		{"numeric(12,2)", toastColumn{typ: oidNumeric, typmod: 12<<16 | 2 + 4}, false},
		{"inet", toastColumn{typ: oidInet, typmod: -1}, false},
		{"cidr", toastColumn{typ: oidCidr, typmod: -1}, false},
		{"varchar(10)", varchar(10), false},
		{"varchar(507)", varchar(507), false}, // 507 × 4 + 4 = 2032: fits
		{"varchar(508)", varchar(508), true},  // 2036 > 2032
		{"varchar", toastColumn{typ: oidVarchar, typmod: -1}, true},
		{"char(600)", toastColumn{typ: oidBpchar, typmod: 604}, true},
		{"bit(16192)", toastColumn{typ: oidBit, typmod: 16192}, false},
		{"varbit(16200)", toastColumn{typ: oidVarbit, typmod: 16200}, true},
		{"varbit", toastColumn{typ: oidVarbit, typmod: -1}, true},
		{"text", toastColumn{typ: 25, typmod: -1}, true},
		{"jsonb", toastColumn{typ: 3802, typmod: -1}, true},
		{"bytea", toastColumn{typ: 17, typmod: -1}, true},
		{"numeric[]", toastColumn{typ: 1231, typmod: -1}, true},
	} {
		if got := mayToast(tc.col, threshold, utf8); got != tc.want {
			t.Errorf("%s: mayToast = %v, want %v", tc.what, got, tc.want)
		}
	}
	// A single-byte encoding allows four times the characters.
	if mayToast(varchar(2028), threshold, 1) || !mayToast(varchar(2029), threshold, 1) {
		t.Error("varchar(n) bound ignores the encoding's character width")
	}
	rule := toastRule(threshold, utf8)
	for _, want := range []string{"2032 bytes", "numeric", "n = 507", "not plain"} {
		if !strings.Contains(rule, want) {
			t.Errorf("the note's rule does not say %q: %s", want, rule)
		}
	}
}

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }
func keepTerms(a KeepSizeAdvice) []string {
	var out []string
	for _, t := range a.Terms {
		out = append(out, t.Name)
	}
	return out
}

// TestKeepSizeAdvice: the suggested max_slot_wal_keep_size is a function of
// slow inputs only, rounded to a coarse step, and says how it was derived.
func TestKeepSizeAdvice(t *testing.T) {
	const gib = int64(1 << 30)
	mb := func(n int64) int64 { return n << 20 }
	base := keepSizeInputs{MaxWALSize: i64(mb(1024)), Retained: mb(35)}
	a := adviseKeepSize(base)
	if a.Value != "4GB" || a.Bytes != 4*gib {
		t.Errorf("defaults: %s (%d), want 4GB", a.Value, a.Bytes)
	}
	if !reflect.DeepEqual(a, adviseKeepSize(base)) {
		t.Error("the same inputs gave different advice")
	}
	if got := keepTerms(a); !reflect.DeepEqual(got, []string{"floor", "max_wal_size", "retained"}) {
		t.Errorf("terms %v", got)
	}
	if len(a.Omitted) != 1 || !strings.Contains(a.Omitted[0], "long_run_rate") {
		t.Errorf("omitted %v", a.Omitted)
	}
	for _, want := range []string{"floor 4.0 GB", "2 × max_wal_size 1.0 GB = 2.0 GB", "2 × most WAL one slot retains 35 MB = 70 MB",
		"rounded up to a power of two GB", "left out: long_run_rate"} {
		if !strings.Contains(a.Derivation, want) {
			t.Errorf("derivation lacks %q: %s", want, a.Derivation)
		}
	}

	// 1 GiB/h over a day: 48 GiB → 64GB. Half an hour of history is not
	// enough to use the average at all.
	rate := float64(gib) / 3600
	withRate := base
	withRate.LongRunRate, withRate.LongRunSeconds = f64(rate), f64(86400)
	if got := adviseKeepSize(withRate); got.Value != "64GB" || !strings.Contains(got.Derivation, "48h × pg_stat_wal average 1.0 GB/h over 24h = 48 GB") {
		t.Errorf("with a day of history: %s, %s", got.Value, got.Derivation)
	}
	short := withRate
	short.LongRunSeconds = f64(1800)
	if got := adviseKeepSize(short); got.Value != "4GB" || !strings.Contains(got.Derivation, "covers 30m since its stats_reset, under the 1h needed") {
		t.Errorf("with 30m of history: %s, %s", got.Value, got.Derivation)
	}
	// The average drifting by a few percent between runs keeps the value.
	drift := withRate
	drift.LongRunRate, drift.LongRunSeconds = f64(rate*1.05), f64(86460)
	if got := adviseKeepSize(drift); got.Value != "64GB" {
		t.Errorf("a 5%% drift moved the advice to %s", got.Value)
	}
	// Each term can decide.
	for _, tc := range []struct {
		in   keepSizeInputs
		want string
	}{
		{keepSizeInputs{MaxWALSize: i64(5 * gib)}, "16GB"},                // 2 × 5 GiB = 10 → 16
		{keepSizeInputs{Retained: 20 * gib}, "64GB"},                      // 40 → 64
		{keepSizeInputs{Retained: 100 << 20, CurrentCap: 3 * gib}, "8GB"}, // 2 × 3 = 6 → 8
		{keepSizeInputs{}, "4GB"},
	} {
		if got := adviseKeepSize(tc.in); got.Value != tc.want {
			t.Errorf("%+v: %s, want %s (%s)", tc.in, got.Value, tc.want, got.Derivation)
		}
	}
}

// TestWALAdviceIgnoresSample: two inspections that differ only in the WAL
// sampled during their one-second window (the 380GB-then-159GB report)
// suggest the same cap, and the text shows its derivation.
func TestWALAdviceIgnoresSample(t *testing.T) {
	advise := func(sampled float64) (*KeepSizeAdvice, *Report) {
		in := &inspector{
			r: &Report{Server: ServerInfo{Major: 15}, Slots: []Slot{{Name: "s", RetainedBytes: i64(40 << 20)}}},
			settings: map[string]Setting{
				"max_slot_wal_keep_size": {Name: "max_slot_wal_keep_size", Value: "-1", Setting: "-1", Unit: "MB"},
				"max_wal_size":           {Name: "max_wal_size", Value: "1GB", Setting: "1024", Unit: "MB"},
			},
		}
		w := &in.r.WAL
		w.SampledBytesPerS, w.AverageBytesPerS, w.AverageSeconds = f64(sampled), f64(300_000), f64(3*86400)
		w.RateBytesPerS, w.RateBasis = sampled, "sampled"
		in.walRules()
		return w.SuggestedKeepSize, in.r
	}
	a, r1 := advise(2.2e6) // ~380 GB over 48h
	b, r2 := advise(0.9e6) // ~159 GB over 48h
	if a == nil || b == nil {
		t.Fatal("no advice on an unbounded server")
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("advice moved with the sampled rate: %s then %s\n%s\n%s", a.Value, b.Value, a.Derivation, b.Derivation)
	}
	if a.Value != "64GB" { // 48h × 300 kB/s = 48.3 GiB → 64
		t.Errorf("advice %s, want 64GB: %s", a.Value, a.Derivation)
	}
	for _, r := range []*Report{r1, r2} {
		lines := strings.Join(r.section(SectionWAL).Lines, "\n")
		if !strings.Contains(lines, "suggested max_slot_wal_keep_size '64GB' = max(") {
			t.Errorf("wal headroom does not show the derivation:\n%s", lines)
		}
		for _, f := range r.Findings {
			if f.Code == "slot_wal_unbounded" && !strings.Contains(f.Action, "'64GB';\nSELECT pg_reload_conf();\n-- 64GB = max(") {
				t.Errorf("action lacks the derivation:\n%s", f.Action)
			}
		}
	}
}

// TestReplicaIdentityWords: output names the replica identity in words,
// never the pg_class letter.
func TestReplicaIdentityWords(t *testing.T) {
	for code, word := range map[string]string{"d": "default", "f": "full", "i": "index", "n": "nothing"} {
		if got := ReplicaIdentityName(code); got != word {
			t.Errorf("ReplicaIdentityName(%q) = %q, want %q", code, got, word)
		}
	}
	noID := []string{"no_replica_identity"}
	for _, tc := range []struct {
		t    Table
		want string
	}{
		{Table{ReplicaIdentity: "default", PrimaryKey: true, Problems: []string{}}, "primary key"},
		{Table{ReplicaIdentity: "index", Problems: []string{}}, "replica identity index"},
		{Table{ReplicaIdentity: "full", Problems: []string{}}, "replica identity full"},
		{Table{ReplicaIdentity: "default", Problems: noID}, "NO replica identity (default, and no primary key)"},
		{Table{ReplicaIdentity: "nothing", PrimaryKey: true, Problems: noID}, "NO replica identity (nothing)"},
		{Table{ReplicaIdentity: "index", Problems: noID}, "NO replica identity (index, but the index is gone)"},
	} {
		got := describeTable(tc.t)
		if !strings.HasPrefix(got, tc.want+" ·") {
			t.Errorf("%+v: %q, want it to start with %q", tc.t, got, tc.want)
		}
		for _, letter := range []string{"'d'", "'f'", "'i'", "'n'"} {
			if strings.Contains(got, letter) {
				t.Errorf("letter form %s in %q", letter, got)
			}
		}
	}
}
