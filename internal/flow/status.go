package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
)

// Status is `trellara status`: what the source, the local log and the
// target say about a flow. Parts that cannot be read become notes, never a
// failure of the whole report.
type Status struct {
	Flow       string                   `json:"flow"`
	SourceID   string                   `json:"source_id"`
	Slot       *SlotStatus              `json:"slot"`
	Tables     []TableStatus            `json:"tables"`
	Log        *LogStatus               `json:"log"`
	Checkpoint *CheckpointState         `json:"checkpoint"`
	Snapshots  []apply.SnapshotProgress `json:"snapshots,omitempty"`
	Quarantine *QuarantineState         `json:"quarantine"`
	Pins       map[string]string        `json:"schema_pins,omitempty"`
	LastVerify *verify.Result           `json:"last_verify,omitempty"`
	Notes      []string                 `json:"notes"`
}

// TableStatus is one configured source table and how the source
// identifies its rows in updates and deletes (the identity gate run and
// preflight apply).
type TableStatus struct {
	Table string `json:"table"`
	// ReplicaIdentity is the table's setting: default, nothing, full or index.
	ReplicaIdentity string `json:"replica_identity"`
	// Key lists the columns that identify a row (primary key or replica
	// identity index); empty for full, where every column does.
	Key        []string `json:"key"`
	Identified bool     `json:"identified"`
	Detail     string   `json:"detail"`
	Fix        string   `json:"fix,omitempty"`
}

// SlotStatus is the source slot as pg_replication_slots reports it.
type SlotStatus struct {
	Name              string `json:"name"`
	Exists            bool   `json:"exists"`
	Active            bool   `json:"active"`
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn"`
	RestartLSN        string `json:"restart_lsn"`
	WALStatus         string `json:"wal_status"`
	CurrentLSN        string `json:"current_wal_lsn"`
	RetainedWALBytes  int64  `json:"retained_wal_bytes"`
	LagBytes          int64  `json:"lag_bytes"`
}

// LogStatus is the local segment log.
type LogStatus struct {
	Dir           string                   `json:"dir"`
	RetainedBytes int64                    `json:"retained_bytes"`
	Segments      int                      `json:"segments"`
	FirstOffset   uint64                   `json:"first_offset"`
	NextOffset    uint64                   `json:"next_offset"`
	Cursors       []segmentlog.CursorStats `json:"cursors"`
}

// CheckpointState is the target checkpoint.
type CheckpointState struct {
	CommitLSN   string    `json:"commit_lsn"`
	EndLSN      string    `json:"end_lsn"`
	AppliedAt   time.Time `json:"applied_at"`
	LagSeconds  float64   `json:"seconds_since_last_apply"`
	TxnsApplied int64     `json:"transactions_applied"`
	TxnsSkipped int64     `json:"transactions_skipped"`
	RowsApplied int64     `json:"rows_applied"`
}

// QuarantineState counts and lists quarantined units.
type QuarantineState struct {
	Open    int64                   `json:"open"`
	Total   int64                   `json:"total"`
	Entries []apply.QuarantineEntry `json:"entries"`
	Show    string                  `json:"show_command"`
	Replay  string                  `json:"replay_command"`
}

func (f *Flow) lastVerifyPath() string { return filepath.Join(f.dir, "last-verify.json") }

// RecordVerify keeps the last verify result for status.
func (f *Flow) RecordVerify(r *verify.Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return relay.WriteFileDurable(f.lastVerifyPath(), b)
}

// Status gathers the report. view selects detail: report, diagnostics
// (adds schema pins) or quarantine (lists entries).
func (f *Flow) Status(ctx context.Context, view string) (*Status, error) {
	st := &Status{Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Tables: []TableStatus{}, Notes: []string{}}
	ls := f.Log.Stats()
	st.Log = &LogStatus{Dir: f.dir, RetainedBytes: ls.RetainedBytes, Segments: ls.Segments, FirstOffset: ls.FirstOffset,
		NextOffset: ls.NextOffset, Cursors: ls.Cursors}
	if st.Log.Cursors == nil {
		st.Log.Cursors = []segmentlog.CursorStats{}
	}

	if src, err := f.ConnectSource(ctx); err != nil {
		st.Notes = append(st.Notes, "source not reachable: "+err.Error())
	} else {
		defer src.Close(context.Background())
		si, err := relay.LookupSlot(ctx, src, f.Cfg.Source.Slot)
		if err != nil {
			st.Notes = append(st.Notes, err.Error())
		} else {
			ss := &SlotStatus{Name: f.Cfg.Source.Slot, Exists: si.Exists, Active: si.Active, WALStatus: si.WALStatus,
				ConfirmedFlushLSN: lsnString(si.ConfirmedFlush), RestartLSN: lsnString(si.RestartLSN)}
			var cur string
			if err := src.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END::text`).Scan(&cur); err == nil {
				ss.CurrentLSN = cur
				if l, err := pglogrepl.ParseLSN(cur); err == nil && si.Exists {
					ss.RetainedWALBytes = int64(uint64(l) - min(uint64(l), si.RestartLSN))
					ss.LagBytes = int64(uint64(l) - min(uint64(l), si.ConfirmedFlush))
				}
			}
			st.Slot = ss
		}
		if defs, err := apply.SourceTables(ctx, src, f.Tables()); err != nil {
			st.Notes = append(st.Notes, err.Error())
		} else {
			for _, d := range defs {
				ts := TableStatus{Table: d.String(), ReplicaIdentity: strings.ToLower(d.IdentityName()), Key: d.IdentityKey(),
					Identified: true, Detail: d.IdentityText()}
				if ts.Key == nil {
					ts.Key = []string{}
				}
				if e := d.IdentityGate(); e != nil {
					ts.Identified, ts.Detail, ts.Fix = false, e.Problem, e.Fix
				}
				st.Tables = append(st.Tables, ts)
			}
		}
	}

	if f.Cfg.Target != nil {
		if tgt, err := f.ConnectTarget(ctx); err != nil {
			st.Notes = append(st.Notes, "target not reachable: "+err.Error())
		} else {
			defer tgt.Close(context.Background())
			as, err := apply.ReadStatus(ctx, tgt, f.Cfg.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
			switch {
			case err != nil:
				st.Notes = append(st.Notes, err.Error())
			case !as.Found:
				st.Notes = append(st.Notes, "the applier has not run against this target yet")
			default:
				cp := as.Checkpoint
				st.Checkpoint = &CheckpointState{CommitLSN: lsnString(cp.CommitLSN), EndLSN: lsnString(cp.EndLSN), AppliedAt: cp.AppliedAt,
					LagSeconds: time.Since(cp.AppliedAt).Seconds(), TxnsApplied: cp.TxnsApplied, TxnsSkipped: cp.TxnsSkipped, RowsApplied: cp.RowsApplied}
				st.Snapshots = as.Snapshots
				st.Quarantine = &QuarantineState{Open: as.QuarantineOpen, Total: as.QuarantineTotal,
					Show:   shell.Trellara("status", f.ConfigPath, "--view", "quarantine"),
					Replay: shell.Trellara("repair-plan", f.ConfigPath)}
				if view == "quarantine" {
					st.Quarantine.Entries = as.Quarantine
				}
			}
		}
	}
	if view == "diagnostics" {
		st.Pins = map[string]string{}
		for k, v := range f.Pins.All() {
			st.Pins[k] = fmt.Sprintf("%016x", v)
		}
	}
	if b, err := os.ReadFile(f.lastVerifyPath()); err == nil {
		var r verify.Result
		if json.Unmarshal(b, &r) == nil {
			st.LastVerify = &r
		}
	}
	return st, nil
}

// RenderText prints the report for people.
func (st *Status) RenderText(w io.Writer, view string) error {
	fmt.Fprintf(w, "flow %s (source %s)\n\n", st.Flow, st.SourceID)
	if s := st.Slot; s != nil {
		fmt.Fprintf(w, "slot          %s", s.Name)
		if !s.Exists {
			fmt.Fprintf(w, " — does not exist\n")
		} else {
			state := "inactive"
			if s.Active {
				state = "active"
			}
			fmt.Fprintf(w, " · %s · wal_status %s\n", state, s.WALStatus)
			fmt.Fprintf(w, "              confirmed %s · restart %s · current %s\n", s.ConfirmedFlushLSN, s.RestartLSN, s.CurrentLSN)
			fmt.Fprintf(w, "              lag %s · retained WAL %s\n", bytesString(s.LagBytes), bytesString(s.RetainedWALBytes))
		}
	}
	for _, t := range st.Tables {
		fmt.Fprintf(w, "table         %s · %s\n", t.Table, t.Detail)
		if t.Fix != "" {
			fmt.Fprintf(w, "              fix on the source: %s\n", t.Fix)
		}
	}
	if l := st.Log; l != nil {
		fmt.Fprintf(w, "local log     %s · %d segments · %s retained · offsets %d..%d\n", l.Dir, l.Segments, bytesString(l.RetainedBytes), l.FirstOffset, l.NextOffset)
		for _, c := range l.Cursors {
			extra := ""
			if c.PastRetention {
				extra = " · PAST RETENTION: the flow must start over (trellara repair-plan says how)"
			}
			fmt.Fprintf(w, "  cursor %-10s at %d · lag %d entries, %s%s\n", c.Name, c.Offset, c.LagOffsets, bytesString(c.LagBytes), extra)
		}
	}
	if c := st.Checkpoint; c != nil {
		fmt.Fprintf(w, "checkpoint    commit %s · end %s · applied %s (%.0fs ago)\n", c.CommitLSN, c.EndLSN, c.AppliedAt.Format(time.RFC3339), c.LagSeconds)
		fmt.Fprintf(w, "              %d transactions applied · %d redelivered and skipped · %d rows\n", c.TxnsApplied, c.TxnsSkipped, c.RowsApplied)
	}
	for _, s := range st.Snapshots {
		state := "copying"
		if s.Ready {
			state = "ready"
		} else if s.Done {
			state = "copied, waiting for the stream to pass its boundary"
		}
		fmt.Fprintf(w, "snapshot      %s · %d rows · %s\n", s.Relation, s.Rows, state)
	}
	if q := st.Quarantine; q != nil {
		fmt.Fprintf(w, "quarantine    %d open (%d total)", q.Open, q.Total)
		if q.Open > 0 {
			fmt.Fprintf(w, " · show: %s · replay: %s", q.Show, q.Replay)
		}
		fmt.Fprintln(w)
		for _, e := range q.Entries {
			fmt.Fprintf(w, "  #%d %s commit %s %s: %s (SQLSTATE %s)\n", e.ID, e.Unit, lsnString(e.CommitLSN), e.Relation, e.Error, e.SQLState)
		}
	}
	if len(st.Pins) > 0 {
		keys := make([]string, 0, len(st.Pins))
		for k := range st.Pins {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "schema pins")
		for _, k := range keys {
			fmt.Fprintf(w, "  %-30s %s\n", k, st.Pins[k])
		}
	}
	if v := st.LastVerify; v != nil {
		fmt.Fprintf(w, "last verify   %s (at %s)\n", v.Headline(), v.StartedAt.Format(time.RFC3339))
		if v.Recovery != "" {
			fmt.Fprintf(w, "              next: %s\n", v.Recovery)
		}
	}
	for _, n := range st.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
