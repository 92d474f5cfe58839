package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// Verdict is the whole answer. There is no third one: anything that keeps
// Verify from deciding is an error.
type Verdict string

const (
	// Converged: every compared table has the same rows on both sides.
	Converged Verdict = "CONVERGED"
	// Diverged: at least one table differs, is missing, or has another
	// shape at the target.
	Diverged Verdict = "DIVERGED"
)

// KeyBasis says which columns identify a row for bucketing and for naming
// example keys.
type KeyBasis string

const (
	BasisPrimaryKey      KeyBasis = "primary_key"
	BasisReplicaIdentity KeyBasis = "replica_identity"
	// BasisWholeRow: the table has neither a primary key nor a replica
	// identity index, so a row is identified by its whole content. Counts and
	// checksums are as strong as with a key, but a changed row is named as
	// one missing and one extra row.
	BasisWholeRow KeyBasis = "whole_row"
)

// DiffKind classifies one example key.
type DiffKind string

const (
	KindMissing DiffKind = "missing" // at source, not at target
	KindExtra   DiffKind = "extra"   // at target, not at source
	KindChanged DiffKind = "changed" // at both, with different values
)

// FormatVersion is the "format_version" of the JSON form. Bump it when a
// field is removed or changes meaning; adding a field does not.
const FormatVersion = 1

// Result is Verify's answer. Its JSON form (MarshalJSON) is a stable
// interface for scripts and for `trellara status`; field names never change
// within a FormatVersion:
//
//	{
//	  "format_version": 1,
//	  "verdict": "CONVERGED" | "DIVERGED",
//	  "started_at": RFC 3339 time,
//	  "duration_ms": int,
//	  "source_rows_per_second": float,   // rows hashed per second of source scan time
//	  "target_rows_per_second": float,
//	  "row_hash": "typed" | "text",       // how rows were hashed (see Hashing)
//	  "watermark": null | {
//	    "source_lsn": "X/X",              // source WAL position of the compared snapshot (the last round's)
//	    "target_checkpoint": "X/X",       // applier checkpoint read at the end
//	    "caught_up": bool,                // target_checkpoint >= source_lsn
//	    "waited_ms": int                  // time spent waiting for the target
//	  },
//	  "notes": [string],
//	  "tables": [{
//	    "table": "schema.name",           // source
//	    "target_table": "schema.name",
//	    "verdict": "CONVERGED" | "DIVERGED",
//	    "reasons": [string],              // why it diverged, in words
//	    "key_basis": "primary_key" | "replica_identity" | "whole_row",
//	    "key_columns": [string],
//	    "source_rows": int, "target_rows": int,
//	    "source_checksum": "16 hex digits", "target_checksum": "16 hex digits",
//	    "buckets": int,                   // buckets compared; 0 when the totals matched
//	    "mismatching_bucket_count": int,
//	    "mismatching_buckets": [{"bucket": int, "source_rows": int, "target_rows": int}],
//	    "sample_keys": [{"key": string, "kind": "missing" | "extra" | "changed"}],
//	    "rechecks": int,                  // re-check rounds this table took part in
//	    "notes": [string],
//	    "recovery": string                // command to run when DIVERGED; "" otherwise
//	  }]
//	}
//
// A checksum is the low 64 bits of the sum of the 64-bit hashes of the
// table's rows (two's complement, big-endian hex); equal tables have equal
// checksums and counts. Lists are never null. mismatching_buckets lists at
// most bucketsListedMax buckets; the count is exact.
//
// The CLI maps the answer to its exit status with ExitCode: 0 CONVERGED,
// 1 DIVERGED, 2 error.
type Result struct {
	FormatVersion       int           `json:"format_version"`
	Verdict             Verdict       `json:"verdict"`
	StartedAt           time.Time     `json:"started_at"`
	Duration            time.Duration `json:"-"`
	SourceRowsPerSecond float64       `json:"source_rows_per_second"`
	TargetRowsPerSecond float64       `json:"target_rows_per_second"`
	Watermark           *Watermark    `json:"watermark"`
	RowHash             Hashing       `json:"row_hash"`
	Notes               []string      `json:"notes"`
	Tables              []TableResult `json:"tables"`
}

// Watermark records where the comparison stood in the replication stream:
// SourceLSN is the position of the source snapshot the verdict comes from
// (the last re-check round's), TargetCheckpoint the applier's checkpoint
// read after the comparison, CaughtUp whether it had passed SourceLSN.
type Watermark struct {
	SourceLSN        pglogrepl.LSN
	TargetCheckpoint pglogrepl.LSN
	CaughtUp         bool
	Waited           time.Duration
}

// TableResult is the answer for one table.
type TableResult struct {
	Table                  string       `json:"table"`
	TargetTable            string       `json:"target_table"`
	Verdict                Verdict      `json:"verdict"`
	Reasons                []string     `json:"reasons"`
	KeyBasis               KeyBasis     `json:"key_basis"`
	KeyColumns             []string     `json:"key_columns"`
	SourceRows             int64        `json:"source_rows"`
	TargetRows             int64        `json:"target_rows"`
	SourceChecksum         string       `json:"source_checksum"`
	TargetChecksum         string       `json:"target_checksum"`
	Buckets                int64        `json:"buckets"`
	MismatchingBucketCount int          `json:"mismatching_bucket_count"`
	MismatchingBuckets     []BucketDiff `json:"mismatching_buckets"`
	SampleKeys             []SampleKey  `json:"sample_keys"`
	Rechecks               int          `json:"rechecks"`
	Notes                  []string     `json:"notes"`
	Recovery               string       `json:"recovery"`
}

// BucketDiff is one bucket whose count or checksum differs.
type BucketDiff struct {
	Bucket     int64 `json:"bucket"`
	SourceRows int64 `json:"source_rows"`
	TargetRows int64 `json:"target_rows"`
}

// SampleKey is one example row that differs. Key is the key columns' text
// ("42", or "(7,north)" for a composite key); for whole-row tables it is the
// row's text. Long keys are cut at keyTextMax bytes and end in "…".
type SampleKey struct {
	Key  string   `json:"key"`
	Kind DiffKind `json:"kind"`
}

// bucketsListedMax bounds mismatching_buckets; the report stays readable
// when a whole table is missing its rows.
const bucketsListedMax = 20

// ExitCode maps Verify's return values to the CLI exit status:
// 0 CONVERGED, 1 DIVERGED, 2 error (including a nil Result).
func ExitCode(r *Result, err error) int {
	switch {
	case err != nil || r == nil:
		return 2
	case r.Verdict == Converged:
		return 0
	default:
		return 1
	}
}

// MarshalJSON renders the documented JSON form.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result // no methods: no recursion
	c := *r
	c.Notes = nonNil(c.Notes)
	c.Tables = make([]TableResult, len(r.Tables))
	for i, t := range r.Tables {
		t.Reasons = nonNil(t.Reasons)
		t.KeyColumns = nonNil(t.KeyColumns)
		t.Notes = nonNil(t.Notes)
		t.MismatchingBuckets = nonNil(t.MismatchingBuckets)
		t.SampleKeys = nonNil(t.SampleKeys)
		c.Tables[i] = t
	}
	return json.Marshal(struct {
		*plain
		DurationMS int64 `json:"duration_ms"`
	}{(*plain)(&c), r.Duration.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON wrote, so a stored result (the
// last verify, shown by `trellara status`) keeps its duration.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	var j struct {
		*plain
		DurationMS int64 `json:"duration_ms"`
	}
	j.plain = (*plain)(r)
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r.Duration = time.Duration(j.DurationMS) * time.Millisecond
	return nil
}

// watermarkJSON is Watermark's JSON form: LSNs in PostgreSQL's X/X notation.
type watermarkJSON struct {
	SourceLSN        string `json:"source_lsn"`
	TargetCheckpoint string `json:"target_checkpoint"`
	CaughtUp         bool   `json:"caught_up"`
	WaitedMS         int64  `json:"waited_ms"`
}

// MarshalJSON renders LSNs as "X/X".
func (w Watermark) MarshalJSON() ([]byte, error) {
	return json.Marshal(watermarkJSON{w.SourceLSN.String(), w.TargetCheckpoint.String(), w.CaughtUp, w.Waited.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON wrote, so a stored result can be
// shown again.
func (w *Watermark) UnmarshalJSON(b []byte) error {
	var j watermarkJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	src, err := pglogrepl.ParseLSN(j.SourceLSN)
	if err != nil {
		return fmt.Errorf("verify: watermark source_lsn: %w", err)
	}
	dst, err := pglogrepl.ParseLSN(j.TargetCheckpoint)
	if err != nil {
		return fmt.Errorf("verify: watermark target_checkpoint: %w", err)
	}
	*w = Watermark{SourceLSN: src, TargetCheckpoint: dst, CaughtUp: j.CaughtUp, Waited: time.Duration(j.WaitedMS) * time.Millisecond}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// RenderText writes the human form: the verdict first, then the watermark
// and speed, then one block per table. A DIVERGED table ends with the
// command that plans its repair.
func (r *Result) RenderText(w io.Writer) error {
	var b strings.Builder
	var diverged []string
	for _, t := range r.Tables {
		if t.Verdict == Diverged {
			diverged = append(diverged, t.Table)
		}
	}
	if r.Verdict == Converged {
		fmt.Fprintf(&b, "CONVERGED: %d of %d tables match\n", len(r.Tables), len(r.Tables))
	} else {
		fmt.Fprintf(&b, "DIVERGED: %d of %d tables differ (%s)\n", len(diverged), len(r.Tables), strings.Join(diverged, ", "))
	}
	if wm := r.Watermark; wm != nil {
		state := "caught up"
		if !wm.CaughtUp {
			state = "NOT caught up: the target had not applied everything the compared source snapshot had committed"
		}
		fmt.Fprintf(&b, "watermark: source LSN %s compared, target checkpoint %s at end; %s", wm.SourceLSN, wm.TargetCheckpoint, state)
		if wm.Waited > 0 {
			fmt.Fprintf(&b, " (waited %s)", wm.Waited.Round(time.Millisecond))
		}
		b.WriteString("\n")
	} else {
		b.WriteString("watermark: none (no applier checkpoint given; rows compared as found)\n")
	}
	fmt.Fprintf(&b, "took %s; %s rows/s source, %s rows/s target\n",
		r.Duration.Round(time.Millisecond), grouped(int64(r.SourceRowsPerSecond)), grouped(int64(r.TargetRowsPerSecond)))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, t := range r.Tables {
		b.WriteString("\n")
		renderTable(&b, &t)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func renderTable(b *strings.Builder, t *TableResult) {
	name := t.Table
	if t.TargetTable != t.Table {
		name += " -> " + t.TargetTable
	}
	fmt.Fprintf(b, "%s  %s\n", name, t.Verdict)
	for _, r := range t.Reasons {
		fmt.Fprintf(b, "  reason    %s\n", r)
	}
	fmt.Fprintf(b, "  rows      %s source, %s target\n", grouped(t.SourceRows), grouped(t.TargetRows))
	if t.SourceChecksum != "" || t.TargetChecksum != "" {
		fmt.Fprintf(b, "  checksum  %s source, %s target\n", orDash(t.SourceChecksum), orDash(t.TargetChecksum))
	}
	fmt.Fprintf(b, "  key       %s", basisText(t.KeyBasis, t.KeyColumns))
	if t.Buckets > 0 {
		fmt.Fprintf(b, "; %d buckets compared", t.Buckets)
		if t.MismatchingBucketCount > 0 {
			fmt.Fprintf(b, ", %d differ", t.MismatchingBucketCount)
		}
	}
	b.WriteString("\n")
	if len(t.MismatchingBuckets) > 0 {
		parts := make([]string, len(t.MismatchingBuckets))
		for i, d := range t.MismatchingBuckets {
			parts[i] = fmt.Sprintf("%d (%d/%d rows)", d.Bucket, d.SourceRows, d.TargetRows)
		}
		more := ""
		if n := t.MismatchingBucketCount - len(parts); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		fmt.Fprintf(b, "  buckets   %s%s\n", strings.Join(parts, ", "), more)
	}
	label := "  keys      "
	for _, k := range t.SampleKeys {
		fmt.Fprintf(b, "%s%s: %s\n", label, kindText(k.Kind), k.Key)
		label = "            "
	}
	if t.Rechecks > 0 {
		fmt.Fprintf(b, "  rechecks  %d (compared again in fresh snapshots after waiting for the target)\n", t.Rechecks)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(b, "  note      %s\n", n)
	}
	if t.Recovery != "" {
		fmt.Fprintf(b, "  fix       %s\n", t.Recovery)
	}
}

func basisText(k KeyBasis, cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = quoteName(c)
	}
	switch k {
	case BasisPrimaryKey:
		return "primary key (" + strings.Join(quoted, ", ") + ")"
	case BasisReplicaIdentity:
		return "replica identity index (" + strings.Join(quoted, ", ") + ")"
	case BasisWholeRow:
		return "whole row (no primary key or replica identity index)"
	}
	return "unknown"
}

func kindText(k DiffKind) string {
	switch k {
	case KindMissing:
		return "missing at target"
	case KindExtra:
		return "extra at target"
	case KindChanged:
		return "changed"
	}
	return string(k)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// grouped renders n with thousands separators: 1,234,567.
func grouped(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
