package verify

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/internal/shell"
)

// Verdict is the whole answer, one of three. Anything that keeps Verify
// from deciding is an error, never a verdict. decide is the only place one
// is made.
type Verdict string

const (
	// Converged: every compared table has the same rows on both sides, and
	// the target had applied everything the compared source snapshot saw
	// (or no applier checkpoint was given).
	Converged Verdict = "CONVERGED"
	// Diverged: at a common watermark (the target had applied everything
	// the compared source snapshot saw), at least one table differs, is
	// missing, or has another shape at the target.
	Diverged Verdict = "DIVERGED"
	// Behind: the target had not applied everything the compared source
	// snapshot saw, within the wait. Rows that differ may only be waiting
	// to be applied and rows that match prove nothing yet, so neither
	// CONVERGED nor DIVERGED can be claimed. The fix is to start or catch
	// up the pipeline and verify again (CatchUpCommand).
	Behind Verdict = "BEHIND"
	// Held: every compared table matches, but a table is held at a
	// blocked schema change (schema.on_blocked: hold_table): capture no
	// longer publishes its rows, so it is not compared and cannot be
	// CONVERGED; its recovery (a reseed of it) is named. Not success.
	Held Verdict = "HELD"
)

// decide makes every verdict, for each table and for the whole result, from
// the watermark and whether the compared snapshots differ. A target behind
// the watermark is BEHIND whatever the rows say, so CONVERGED can never
// stand beside "not caught up", and DIVERGED only ever describes a
// difference at a common watermark. Without a watermark (no applier
// checkpoint given) the rows are compared as found.
//
//	watermark   rows differ   verdict
//	none        no            CONVERGED
//	none        yes           DIVERGED
//	caught up   no            CONVERGED
//	caught up   yes           DIVERGED
//	behind      either        BEHIND
func decide(wm *Watermark, differ bool) Verdict {
	switch {
	case wm != nil && !wm.CaughtUp():
		return Behind
	case differ:
		return Diverged
	default:
		return Converged
	}
}

// CatchUpCommand is the command that brings a stopped flow's target up to
// the source and verifies it at a common watermark: a bounded run applies
// everything the source committed before it started, then verifies while
// its applier still runs, so the verify's own fence is applied too.
func CatchUpCommand(configPath string) string {
	return shell.Trellara("run", configPath, "--local", "--verify")
}

// CatchUpAdvice is the one sentence, shared by verify and repair-plan, that
// says how to clear BEHIND.
func CatchUpAdvice(configPath string) string {
	return "start or catch up the pipeline: " + CatchUpCommand(configPath) +
		" (applies what the target is missing, then verifies while still running); where the flow runs as the service (" +
		shell.Trellara("run", configPath) + "), let it catch up (" + shell.Trellara("status", configPath) +
		" shows its lag) and run " + shell.Trellara("verify", configPath) + " again"
}

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
const FormatVersion = 2

// Result is Verify's answer. Its JSON form (MarshalJSON) is a stable
// interface for scripts and for `trellara status`; field names never change
// within a FormatVersion:
//
//	{
//	  "format_version": 2,
//	  "verdict": "CONVERGED" | "DIVERGED" | "BEHIND",
//	  "started_at": RFC 3339 time,
//	  "duration_seconds": float,
//	  "source_rows_per_second": float,   // rows hashed per second of source scan time
//	  "target_rows_per_second": float,
//	  "row_hash": "typed" | "text",       // how rows were hashed (see Hashing)
//	  "watermark_lsn": null | "X/X",      // = watermark.source_lsn
//	  "target_checkpoint_lsn": null | "X/X", // = watermark.target_checkpoint
//	  "lag_bytes": null | int,            // watermark_lsn - target_checkpoint_lsn; 0 when caught up
//	  "lag_age_seconds": null | float,           // when BEHIND: how long before the check the target last applied a transaction
//	  "recovery": string,                 // command to run: repair-plan when DIVERGED, CatchUpCommand when BEHIND, "" when CONVERGED
//	  "watermark": null | {
//	    "source_lsn": "X/X",              // source WAL position of the compared snapshot (the last round's)
//	    "target_checkpoint": "X/X",       // applier checkpoint read before the compared target snapshot
//	    "caught_up": bool,                // target_checkpoint >= source_lsn
//	    "waited_seconds": float,                 // time spent waiting for the target
//	    "checked_at": RFC 3339 time,      // when target_checkpoint was read (this host's clock)
//	    "target_applied_at": null | RFC 3339 time // the target's last apply (its clock), when known
//	  },
//	  "notes": [string],
//	  "tables": [{
//	    "table": "schema.name",           // source
//	    "target_table": "schema.name",
//	    "verdict": "CONVERGED" | "DIVERGED" | "BEHIND", // BEHIND for every table when the result is
//	    "reasons": [string],              // why it differs, in words
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
// most bucketsListedMax buckets; the count is exact. The lag fields are
// null without a watermark; they are computed from it, so they cannot
// disagree with it.
//
// The CLI maps the answer to its exit status with ExitCode: 0 CONVERGED,
// 1 DIVERGED, 3 BEHIND, 2 error.
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
	// Recovery is the command to run next: repair-plan when DIVERGED,
	// CatchUpCommand when BEHIND, "" when CONVERGED.
	Recovery string `json:"recovery"`
	// advice is the sentence around Recovery for the text form
	// (CatchUpAdvice when BEHIND); a result read back from JSON has none
	// and shows Recovery alone.
	advice string
	// native counts the tables the source ([0]) and the target ([1])
	// hashed with the extension's C row hash, over all rounds.
	native [2]int
}

// Watermark records where the comparison stood in the replication stream:
// SourceLSN is the position of the source snapshot the verdict comes from
// (the last re-check round's, the "watermark"), TargetCheckpoint the
// applier's checkpoint read just before that round's target snapshot was
// taken. The target snapshot therefore holds everything up to at least
// TargetCheckpoint, and CaughtUp says whether that covers SourceLSN.
type Watermark struct {
	SourceLSN        lsn.LSN
	TargetCheckpoint lsn.LSN
	Waited           time.Duration
	// CheckedAt is when TargetCheckpoint was read, on this host's clock.
	CheckedAt time.Time
	// TargetAppliedAt is when the target last applied a transaction, on
	// the target's clock; zero when unknown.
	TargetAppliedAt time.Time
	// Pending is set when no pipeline held the flow: instead of waiting
	// at a fence nobody would apply, the caller counted the committed
	// transactions the target has not applied (SourceLSN is then the end
	// of the newest of them, or the checkpoint when there is none).
	Pending *Pending
}

// Pending is what a verify of a flow at rest counted after its source
// snapshot: committed source transactions that touch the flow's tables
// and that the target has not applied. BEHIND at rest means Transactions
// > 0, never that the source's WAL position moved.
type Pending struct {
	// Transactions is InLog + InSlot.
	Transactions int64 `json:"transactions"`
	// InLog are transactions in the flow's log past the target's
	// checkpoint; InSlot those committed at the source and not yet in the
	// log (read from the slot without moving it).
	InLog  int64 `json:"in_log"`
	InSlot int64 `json:"in_slot"`
	// AtLeast: a count stopped at its bound, so there may be more.
	AtLeast bool `json:"at_least"`
	// NotCounted names what could not be counted ("" when everything was).
	NotCounted string `json:"not_counted,omitempty"`
}

// text is the count in words: "1 committed transaction", "at least 10000
// committed transactions".
func (p *Pending) text() string {
	s := fmt.Sprintf("%d committed transaction", p.Transactions)
	if p.Transactions != 1 {
		s += "s"
	}
	if p.AtLeast {
		s = "at least " + s
	}
	return s
}

// CaughtUp says whether the target had applied everything the compared
// source snapshot saw. It is computed, never stored, so it cannot disagree
// with the LSNs.
func (w *Watermark) CaughtUp() bool { return w.TargetCheckpoint >= w.SourceLSN }

// LagBytes is how far the target checkpoint was behind the watermark, in
// bytes of source WAL; 0 when caught up.
func (w *Watermark) LagBytes() uint64 {
	if w.CaughtUp() {
		return 0
	}
	return uint64(w.SourceLSN - w.TargetCheckpoint)
}

// LagAge is, for a target behind the watermark, how long before the check
// it last applied a transaction: how stale its rows may be at most. ok is
// false when caught up or when either time is unknown. The two clocks are
// different hosts'; a negative difference (skew) counts as zero.
func (w *Watermark) LagAge() (age time.Duration, ok bool) {
	if w.CaughtUp() || w.TargetAppliedAt.IsZero() || w.CheckedAt.IsZero() {
		return 0, false
	}
	return max(0, w.CheckedAt.Sub(w.TargetAppliedAt)), true
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

// ExitCode maps Verify's return values to the CLI exit status (docs/CLI.md):
// 0 CONVERGED, 1 DIVERGED, 3 BEHIND, 2 error (including a nil Result). A
// verdict this version does not know counts as DIVERGED: never success.
func ExitCode(r *Result, err error) int {
	switch {
	case err != nil || r == nil:
		return 2
	case r.Verdict == Converged:
		return 0
	case r.Verdict == Behind:
		return 3
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
	out := struct {
		*plain
		DurationSeconds     float64  `json:"duration_seconds"`
		WatermarkLSN        *string  `json:"watermark_lsn"`
		TargetCheckpointLSN *string  `json:"target_checkpoint_lsn"`
		LagBytes            *uint64  `json:"lag_bytes"`
		LagAgeSeconds       *float64 `json:"lag_age_seconds"`
	}{plain: (*plain)(&c), DurationSeconds: r.Duration.Seconds()}
	if wm := r.Watermark; wm != nil {
		w, t, lag := wm.SourceLSN.String(), wm.TargetCheckpoint.String(), wm.LagBytes()
		out.WatermarkLSN, out.TargetCheckpointLSN, out.LagBytes = &w, &t, &lag
		if age, ok := wm.LagAge(); ok {
			secs := age.Seconds()
			out.LagAgeSeconds = &secs
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote, so a stored result (the
// last verify, shown by `trellara status`) keeps its duration; a result
// stored in format 1 (milliseconds) reads the same.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	var j struct {
		*plain
		DurationSeconds *float64 `json:"duration_seconds"`
		DurationMS      int64    `json:"duration_ms"` // format 1
	}
	j.plain = (*plain)(r)
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r.Duration = time.Duration(j.DurationMS) * time.Millisecond
	if j.DurationSeconds != nil {
		r.Duration = seconds(*j.DurationSeconds)
	}
	return nil
}

// watermarkJSON is Watermark's JSON form: LSNs in PostgreSQL's X/X notation.
type watermarkJSON struct {
	SourceLSN        string     `json:"source_lsn"`
	TargetCheckpoint string     `json:"target_checkpoint"`
	CaughtUp         bool       `json:"caught_up"`
	WaitedSeconds    float64    `json:"waited_seconds"`
	WaitedMS         int64      `json:"waited_ms,omitempty"` // format 1, read only
	CheckedAt        *time.Time `json:"checked_at"`
	TargetAppliedAt  *time.Time `json:"target_applied_at"`
	Pending          *Pending   `json:"pending,omitempty"`
}

// MarshalJSON renders LSNs as "X/X" and unknown times as null.
func (w Watermark) MarshalJSON() ([]byte, error) {
	return json.Marshal(watermarkJSON{SourceLSN: w.SourceLSN.String(), TargetCheckpoint: w.TargetCheckpoint.String(), CaughtUp: w.CaughtUp(),
		WaitedSeconds: w.Waited.Seconds(), CheckedAt: timeOrNil(w.CheckedAt), TargetAppliedAt: timeOrNil(w.TargetAppliedAt), Pending: w.Pending})
}

// UnmarshalJSON reads what MarshalJSON wrote, so a stored result can be
// shown again. caught_up is recomputed from the LSNs.
func (w *Watermark) UnmarshalJSON(b []byte) error {
	var j watermarkJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	src, err := lsn.Parse(j.SourceLSN)
	if err != nil {
		return fmt.Errorf("verify: watermark source_lsn: %w", err)
	}
	dst, err := lsn.Parse(j.TargetCheckpoint)
	if err != nil {
		return fmt.Errorf("verify: watermark target_checkpoint: %w", err)
	}
	*w = Watermark{SourceLSN: src, TargetCheckpoint: dst, Waited: time.Duration(j.WaitedMS) * time.Millisecond, Pending: j.Pending}
	if j.WaitedSeconds != 0 {
		w.Waited = seconds(j.WaitedSeconds)
	}
	if j.CheckedAt != nil {
		w.CheckedAt = *j.CheckedAt
	}
	if j.TargetAppliedAt != nil {
		w.TargetAppliedAt = *j.TargetAppliedAt
	}
	return nil
}

// seconds is the duration of s seconds, to the microsecond.
func seconds(s float64) time.Duration { return time.Duration(s*1e6) * time.Microsecond }

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// RenderText writes the human form: the verdict first (for BEHIND, the lag
// and the fix), then the watermark and speed, then one block per table. A
// DIVERGED table ends with the command that plans its repair.
func (r *Result) RenderText(w io.Writer) error {
	var b strings.Builder
	b.WriteString(r.Headline())
	b.WriteString("\n")
	if r.Verdict == Behind {
		if fix := cmp.Or(r.advice, r.Recovery); fix != "" {
			fmt.Fprintf(&b, "fix: %s\n", fix)
		}
	}
	if wm := r.Watermark; wm != nil {
		state := "caught up"
		if !wm.CaughtUp() {
			state = "NOT caught up: the target had not applied everything the compared source snapshot had committed"
		}
		fmt.Fprintf(&b, "watermark: source LSN %s compared, target checkpoint %s before the target snapshot; %s", wm.SourceLSN, wm.TargetCheckpoint, state)
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

// Headline is the verdict in one line, as the text form starts and as
// `trellara status` shows the last verify: which tables differ, or for
// BEHIND how far the target was behind the watermark.
func (r *Result) Headline() string {
	var differ []string
	for _, t := range r.Tables {
		if len(t.Reasons) > 0 {
			differ = append(differ, t.Table)
		}
	}
	switch r.Verdict {
	case Converged:
		return fmt.Sprintf("CONVERGED: %d of %d tables match", len(r.Tables), len(r.Tables))
	case Held:
		var held []string
		for _, t := range r.Tables {
			if t.Verdict == Held {
				held = append(held, t.Table)
			}
		}
		return fmt.Sprintf("HELD: %d of %d tables held at a blocked schema change (%s); the others match", len(held), len(r.Tables), strings.Join(held, ", "))
	case Behind:
		s := "BEHIND: the target has not reached the watermark"
		if wm := r.Watermark; wm != nil && wm.Pending != nil {
			s = fmt.Sprintf("BEHIND: %s to the flow's tables not applied on the target (%d in the log, %d at the source; the flow is at rest, target checkpoint %s)",
				wm.Pending.text(), wm.Pending.InLog, wm.Pending.InSlot, wm.TargetCheckpoint)
		} else if wm != nil {
			s = fmt.Sprintf("BEHIND: target checkpoint %s has not reached the watermark %s: %s behind", wm.TargetCheckpoint, wm.SourceLSN, bytesText(wm.LagBytes()))
			if age, ok := wm.LagAge(); ok {
				s += fmt.Sprintf(", last applied %s before the check", age.Round(time.Second))
			}
		}
		if len(differ) > 0 {
			s += fmt.Sprintf("; %d of %d tables differ meanwhile (%s)", len(differ), len(r.Tables), strings.Join(differ, ", "))
		}
		return s
	default:
		return fmt.Sprintf("%s: %d of %d tables differ (%s)", r.Verdict, len(differ), len(r.Tables), strings.Join(differ, ", "))
	}
}

// bytesText renders a WAL distance: "4,352 bytes (4.3 KiB)".
func bytesText(n uint64) string {
	s := grouped(int64(n)) + " bytes"
	switch {
	case n >= 1<<30:
		s += fmt.Sprintf(" (%.1f GiB)", float64(n)/(1<<30))
	case n >= 1<<20:
		s += fmt.Sprintf(" (%.1f MiB)", float64(n)/(1<<20))
	case n >= 1<<10:
		s += fmt.Sprintf(" (%.1f KiB)", float64(n)/(1<<10))
	}
	return s
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
