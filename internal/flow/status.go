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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/pgcatalog"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/sidecar"
)

// Status is `trellara status`: what the source, the local log and the
// target say about a flow. Parts that cannot be read become notes, never a
// failure of the whole report. Problems are what makes status exit 1
// (StatusProblems documents the rules).
type Status struct {
	Flow     string      `json:"flow"`
	SourceID string      `json:"source_id"`
	Slot     *SlotStatus `json:"slot"`
	// Extension is the native extension's side of a source.capture:
	// extension flow: its decoder worker, its slot and its socket.
	Extension  *ExtensionStatus  `json:"extension,omitempty"`
	Tables     []TableStatus     `json:"tables"`
	Log        *LogStatus        `json:"log"`
	Kafka      *BrokerStatus     `json:"kafka,omitempty"` // a transport.kafka flow's cluster
	Checkpoint *CheckpointState  `json:"checkpoint"`
	Snapshots  []SnapshotStatus  `json:"snapshots"`
	Quarantine *QuarantineState  `json:"quarantine"`
	Pins       map[string]string `json:"schema_pins,omitempty"`
	// Barriers are the recent DDL barriers' propagation contracts
	// (--view diagnostics), oldest first.
	Barriers []BarrierContract `json:"barriers,omitempty"`
	// Held are the tables held at a blocked schema change
	// (schema.on_blocked: hold_table), each with its recovery.
	Held       []HeldStatus   `json:"held_tables,omitempty"`
	LastVerify *verify.Result `json:"last_verify"`
	// Sinks has every sink; Checkpoint, Snapshots, Quarantine and
	// LastVerify above repeat the first one's (a single-target flow's).
	Sinks    []SinkStatus    `json:"sinks"`
	Problems []StatusProblem `json:"problems"`
	Notes    []string        `json:"notes"`
}

// SinkStatus is one sink: its log cursor and what its target records.
type SinkStatus struct {
	Sink       string           `json:"sink"`
	Cursor     string           `json:"cursor"`
	LogCursor  *CursorStatus    `json:"log_cursor"` // nil while the log is not readable here
	Checkpoint *CheckpointState `json:"checkpoint"`
	Snapshots  []SnapshotStatus `json:"snapshots"`
	Quarantine *QuarantineState `json:"quarantine"`
	LastVerify *verify.Result   `json:"last_verify"`
	Notes      []string         `json:"notes"`

	barriers *sinkBarriers // --view diagnostics
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
	// SafeWALBytes is pg_replication_slots.safe_wal_size: how much more
	// WAL can be written before the slot is lost to
	// max_slot_wal_keep_size; nil when that is unlimited (-1).
	SafeWALBytes *int64 `json:"safe_wal_bytes"`
	// MaxSlotWALKeepBytes is max_slot_wal_keep_size in bytes, -1 unlimited.
	MaxSlotWALKeepBytes int64 `json:"max_slot_wal_keep_bytes"`
}

// LogStatus is the local segment log.
type LogStatus struct {
	Dir           string         `json:"dir"`
	Exists        bool           `json:"exists"`
	Held          bool           `json:"held"` // locked by the process running the flow: the figures are on its /metrics
	RetainedBytes int64          `json:"retained_bytes"`
	Segments      int            `json:"segments"`
	FirstOffset   uint64         `json:"first_offset"`
	NextOffset    uint64         `json:"next_offset"`
	Cursors       []CursorStatus `json:"cursors"`
	// LastAppendAt, DiskFreeBytes and StalledAfterSeconds are the log-wide
	// inputs of the stalled-consumer rule (stall.go).
	LastAppendAt        *time.Time `json:"last_append_at"`
	DiskFreeBytes       *int64     `json:"disk_free_bytes"`
	StalledAfterSeconds float64    `json:"stalled_consumer_after_seconds"`
}

// CursorStatus is one consumer's position in the local log.
type CursorStatus struct {
	Name string `json:"name"`
	// Kind is "sink" for a sink's applier (Sink names it) and "consumer"
	// for anything else that registered a cursor (stream tail --commit, a
	// program on package consumer).
	Kind          string `json:"kind"`
	Sink          string `json:"sink,omitempty"`
	Offset        uint64 `json:"offset"`
	LagEntries    uint64 `json:"lag_entries"`
	LagBytes      int64  `json:"lag_bytes"`
	PastRetention bool   `json:"past_retention"`
	// LagSeconds is how old the oldest entry the consumer has not
	// processed is (now minus its source commit time); 0 when it is
	// caught up, nil when that entry could not be read.
	LagSeconds *float64 `json:"lag_seconds"`
	// LastCommitAt is when the consumer last committed its cursor.
	LastCommitAt *time.Time `json:"last_commit_at"`
	// Stalled is set when the consumer has not moved while the log's end
	// did, for at least transport.local.stalled_consumer_after (stall.go).
	Stalled *ConsumerStall `json:"stalled"`
}

// CheckpointState is the target checkpoint. The counts are the flow's
// totals since its first run. AppliedAt and SecondsSinceApply are nil
// until the applier has applied a transaction.
type CheckpointState struct {
	CommitLSN         string     `json:"commit_lsn"`
	EndLSN            string     `json:"end_lsn"`
	AppliedAt         *time.Time `json:"applied_at"`
	SecondsSinceApply *float64   `json:"seconds_since_last_apply"`
	TxnsApplied       int64      `json:"transactions_applied_total"`
	TxnsSkipped       int64      `json:"transactions_skipped_total"`
	RowsApplied       int64      `json:"rows_applied_total"`
}

// SnapshotStatus is one table's initial copy.
type SnapshotStatus struct {
	Relation    string `json:"relation"`
	NextBatch   uint32 `json:"next_batch"`
	Done        bool   `json:"done"`
	BoundaryLSN string `json:"boundary_lsn"`
	Rows        int64  `json:"rows"`
	Ready       bool   `json:"ready"`
}

// QuarantineState counts and lists quarantined units.
type QuarantineState struct {
	Open    int64             `json:"open"`
	Total   int64             `json:"total"`
	Entries []QuarantineEntry `json:"entries"`
	Show    string            `json:"show_command"`
	Replay  string            `json:"replay_command"`
}

// QuarantineEntry is one open quarantined unit.
type QuarantineEntry struct {
	ID            int64     `json:"id"`
	Unit          string    `json:"unit"`
	CommitLSN     string    `json:"commit_lsn"`
	EndLSN        string    `json:"end_lsn"`
	Offset        uint64    `json:"offset"`
	Relation      string    `json:"relation"`
	Error         string    `json:"error"`
	SQLState      string    `json:"sqlstate"`
	Attempts      int       `json:"attempts"`
	QuarantinedAt time.Time `json:"quarantined_at"`
}

// HeldStatus is one held table.
type HeldStatus struct {
	Table   string   `json:"table"`
	LSN     string   `json:"lsn"`
	Kinds   []string `json:"kinds"`
	Command string   `json:"command"`
}

// StatusProblem is one reason status exits 1.
type StatusProblem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// Status problem codes.
const (
	ProblemQuarantineOpen      = "quarantine_open"
	ProblemSlotRetainingWAL    = "slot_inactive_retaining_wal"
	ProblemSlotLost            = "slot_lost"
	ProblemCursorPastRetention = "consumer_past_retention"
	ProblemTableHeld           = "table_held"
	// ProblemConsumerStalled is in stall.go, with its rule.
)

// slotWALUnlimitedMax is the WAL an inactive slot may retain on a server
// without max_slot_wal_keep_size (no cap, so the disk is the limit, and
// SQL does not show the disk) before status calls it a problem.
const slotWALUnlimitedMax = 1 << 30

// StatusProblems judges one sample of the report. It is a problem when:
// a quarantined unit is open; the slot is lost (wal_status lost) or about
// to be (unreserved); the slot exists, is inactive (no process streams
// from it: the flow is at rest) and retains WAL that puts it at risk:
// more than half of max_slot_wal_keep_size (safe_wal_size is below what
// it retains), or, with no cap, more than slotWALUnlimitedMax. A flow at
// rest whose slot retains a little WAL (autovacuum, checkpoints, a
// verify) is the state after `run --local`, not a problem; a consumer of
// the local log is past retention; a consumer of the local log is stalled
// (stall.go).
func StatusProblems(st *Status, configPath string) []StatusProblem {
	out := stalledConsumerProblems(st, configPath)
	for _, sk := range st.Sinks {
		if q := sk.Quarantine; q != nil && q.Open > 0 {
			where := ""
			if len(st.Sinks) > 1 {
				where = "sink " + sk.Sink + ": "
			}
			out = append(out, StatusProblem{Code: ProblemQuarantineOpen,
				Message: where + Plural(int(q.Open), "quarantined transaction") + " open: the applier stops at the first until it applies",
				Fix:     shell.Trellara("repair-plan", configPath)})
		}
	}
	start := "start the flow: " + shell.Trellara("run", configPath) + " (or " + shell.Trellara("run", configPath, "--local") + "); to stop for good, " + shell.Trellara("run", configPath, "--cleanup")
	if s := st.Slot; s != nil && s.Exists {
		switch {
		case s.WALStatus == "lost" || s.WALStatus == "unreserved":
			out = append(out, StatusProblem{Code: ProblemSlotLost,
				Message: fmt.Sprintf("slot %s is %s: the source removed (or is about to remove) WAL it had not streamed, past max_slot_wal_keep_size; "+
					"the changes in it are gone for this flow", s.Name, s.WALStatus),
				Fix: shell.Resnapshot(configPath)})
		case !s.Active && s.LagBytes > 0 && slotAtRisk(s):
			out = append(out, StatusProblem{Code: ProblemSlotRetainingWAL,
				Message: fmt.Sprintf("slot %s is inactive with %s of WAL not yet consumed (%s retained on the source, %s), growing with every write until the flow runs",
					s.Name, bytesString(s.LagBytes), bytesString(s.RetainedWALBytes), slotLimitText(s)),
				Fix: start})
		}
	}
	for _, h := range st.Held {
		out = append(out, StatusProblem{Code: ProblemTableHeld,
			Message: fmt.Sprintf("table %s is HELD at a blocked schema change at LSN %s (%s): its rows are not captured; the other tables keep flowing", h.Table, h.LSN, strings.Join(h.Kinds, ", ")),
			Fix:     h.Command})
	}
	if l := st.Log; l != nil {
		for _, c := range l.Cursors {
			if c.PastRetention {
				out = append(out, StatusProblem{Code: ProblemCursorPastRetention,
					Message: fmt.Sprintf("consumer %s is past the local log's retention at offset %d", c.Name, c.Offset),
					Fix: "a sink's applier: with the flow running, copy every table of that sink again (" + shell.Trellara("repair-plan", configPath) +
						" names the command); or " + shell.Resnapshot(configPath)})
			}
		}
	}
	return out
}

// slotAtRisk: the WAL the slot retains is more than half of what the
// server lets it keep (safe_wal_size below the retained amount), or more
// than slotWALUnlimitedMax with no cap.
func slotAtRisk(s *SlotStatus) bool {
	if s.SafeWALBytes != nil && s.MaxSlotWALKeepBytes >= 0 {
		return *s.SafeWALBytes < s.RetainedWALBytes
	}
	return s.RetainedWALBytes > slotWALUnlimitedMax
}

func slotLimitText(s *SlotStatus) string {
	if s.SafeWALBytes != nil && s.MaxSlotWALKeepBytes >= 0 {
		return fmt.Sprintf("%s more before max_slot_wal_keep_size (%s) loses the slot", bytesString(max(0, *s.SafeWALBytes)), bytesString(s.MaxSlotWALKeepBytes))
	}
	return fmt.Sprintf("over %s with no max_slot_wal_keep_size: only the source's disk bounds it", bytesString(slotWALUnlimitedMax))
}

// lastVerifyPath is where sink s's last verify result is kept:
// last-verify.json for the default sink (where flows have always kept
// it), last-verify.NAME.json for the others.
func (f *Flow) lastVerifyPath(s config.Sink) string {
	if s.Name == config.DefaultSinkName {
		return filepath.Join(f.dir, "last-verify.json")
	}
	return filepath.Join(f.dir, "last-verify."+s.Name+".json")
}

// RecordVerify keeps sink s's last verify result for status.
func (f *Flow) RecordVerify(s config.Sink, r *verify.Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return capture.WriteFileDurable(f.lastVerifyPath(s), b)
}

// lastVerify reads sink s's last verify result; nil when there is none.
func (f *Flow) lastVerify(s config.Sink) *verify.Result {
	b, err := os.ReadFile(f.lastVerifyPath(s))
	if err != nil {
		return nil
	}
	var r verify.Result
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	return &r
}

// Status gathers the report. view selects detail: report, diagnostics
// (adds schema pins) or quarantine (lists entries).
func (f *Flow) Status(ctx context.Context, view string) (*Status, error) {
	st := &Status{Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Tables: []TableStatus{}, Snapshots: []SnapshotStatus{}, Notes: []string{}}
	st.Log = &LogStatus{Dir: f.dir, Cursors: []CursorStatus{}}
	if n := listenNote(f.Cfg); n != "" {
		st.Notes = append(st.Notes, n)
	}
	switch {
	case f.logHeld && f.Log != nil:
		st.Log.Exists, st.Log.Held = true, true
		f.logStatus(ctx, f.Log, st.Log)
	case f.Log == nil && f.Cfg.Transport.Local != nil && dirExists(f.logDir()):
		st.Log.Exists, st.Log.Held = true, f.logHeld
		st.Notes = append(st.Notes, fmt.Sprintf("the local log at %s has no published durable end yet: its writer has not opened it with this release (`%s` publishes it)",
			f.dir, shell.Trellara("run", f.ConfigPath, "--local")))
	case f.Log == nil:
		st.Notes = append(st.Notes, fmt.Sprintf("no local log at %s: the flow has not run here, or was cleaned up", f.dir))
	default:
		st.Log.Exists = true
		f.logStatus(ctx, f.Log, st.Log)
	}

	if src, err := f.ConnectSource(ctx); err != nil {
		st.Notes = append(st.Notes, "source not reachable: "+err.Error())
	} else {
		defer src.Close(context.Background())
		slot := f.Cfg.Source.Slot
		if f.Cfg.Source.Capture == config.CaptureExtension {
			// The decoder's slot is the server's trellara.slot_name.
			if es, err := f.extensionStatus(ctx, src); err != nil {
				st.Notes = append(st.Notes, err.Error())
			} else {
				st.Extension, slot = es, es.Slot
			}
		}
		si, err := relay.LookupSlot(ctx, src, slot)
		if err != nil {
			st.Notes = append(st.Notes, err.Error())
		} else {
			ss := &SlotStatus{Name: slot, Exists: si.Exists, Active: si.Active, WALStatus: si.WALStatus,
				ConfirmedFlushLSN: lsn.Format(si.ConfirmedFlush), RestartLSN: lsn.Format(si.RestartLSN)}
			var cur string
			if err := src.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END::text`).Scan(&cur); err == nil {
				ss.CurrentLSN = cur
				if l, err := lsn.Parse(cur); err == nil && si.Exists {
					ss.RetainedWALBytes = int64(uint64(l) - min(uint64(l), si.RestartLSN))
					ss.LagBytes = int64(uint64(l) - min(uint64(l), si.ConfirmedFlush))
				}
			}
			ss.MaxSlotWALKeepBytes = -1
			if si.Exists {
				if err := src.QueryRow(ctx, `SELECT pg_size_bytes(current_setting('max_slot_wal_keep_size')), safe_wal_size
					FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&ss.MaxSlotWALKeepBytes, &ss.SafeWALBytes); err != nil {
					st.Notes = append(st.Notes, fmt.Sprintf("slot %s: read max_slot_wal_keep_size and safe_wal_size: %v", slot, err))
				}
			}
			st.Slot = ss
		}
		if defs, err := pgcatalog.ReadTables(ctx, src, f.Tables()); err != nil {
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

	if bs, ok := f.broker.(brokerStatuser); ok {
		if k, err := bs.Status(ctx, f.Sinks()); err != nil {
			st.Notes = append(st.Notes, "kafka: "+err.Error())
		} else {
			if st.Slot != nil {
				k.SlotConfirmedFlushLSN = st.Slot.ConfirmedFlushLSN
			}
			st.Kafka = k
		}
	}

	st.Sinks = []SinkStatus{}
	for i, sk := range f.Sinks() {
		ss := f.sinkStatus(ctx, sk, st.Log.Cursors, view)
		st.Sinks = append(st.Sinks, ss)
		if i == 0 {
			st.Checkpoint, st.Snapshots, st.Quarantine, st.LastVerify = ss.Checkpoint, ss.Snapshots, ss.Quarantine, ss.LastVerify
			if len(f.Sinks()) == 1 {
				st.Notes = append(st.Notes, ss.Notes...)
			}
		}
	}
	if view == "diagnostics" {
		st.Pins = map[string]string{}
		for k, v := range f.Pins.All() {
			st.Pins[k] = fmt.Sprintf("%016x", v)
		}
		var sbs []sinkBarriers
		for _, ss := range st.Sinks {
			if ss.barriers != nil {
				sbs = append(sbs, *ss.barriers)
			} else {
				sbs = append(sbs, sinkBarriers{sink: ss.Sink})
			}
		}
		var notes []string
		st.Barriers, notes = f.barrierContracts(sbs)
		st.Notes = append(st.Notes, notes...)
	}
	if pending, err := f.PendingSchemaChanges(); err != nil {
		st.Notes = append(st.Notes, "pending schema changes: "+err.Error())
	} else {
		for _, p := range pending {
			if !p.Held {
				continue
			}
			h := HeldStatus{Table: p.Plan.Relation, LSN: p.Plan.LSN, Kinds: []string{}, Command: ReseedCommand(f.ConfigPath, p.Plan.Relation)}
			for _, c := range p.Plan.Changes {
				h.Kinds = append(h.Kinds, string(c.Kind))
			}
			st.Held = append(st.Held, h)
		}
	}
	st.Problems = StatusProblems(st, f.ConfigPath)
	return st, nil
}

// sinkStatus reads sink sk's cursor from cursors and its state from its
// target; what cannot be read becomes a note.
func (f *Flow) sinkStatus(ctx context.Context, sk config.Sink, cursors []CursorStatus, view string) SinkStatus {
	st := &SinkStatus{Sink: sk.Name, Cursor: sk.Cursor(), Snapshots: []SnapshotStatus{}, Notes: []string{}, LastVerify: f.lastVerify(sk)}
	for i := range cursors {
		if cursors[i].Name == sk.Cursor() {
			c := cursors[i]
			st.LogCursor = &c
		}
	}
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		st.Notes = append(st.Notes, "target not reachable: "+err.Error())
		return *st
	}
	defer tgt.Close(context.Background())
	as, err := apply.ReadStatus(ctx, tgt, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
	st.Notes = append(st.Notes, f.reseedNotes(ctx, tgt, sk)...)
	switch {
	case err != nil:
		st.Notes = append(st.Notes, err.Error())
	case !as.Found:
		st.Notes = append(st.Notes, "the applier has not run against this target yet")
	default:
		cp := as.Checkpoint
		st.Checkpoint = &CheckpointState{CommitLSN: lsn.Format(cp.CommitLSN), EndLSN: lsn.Format(cp.EndLSN),
			TxnsApplied: cp.TxnsApplied, TxnsSkipped: cp.TxnsSkipped, RowsApplied: cp.RowsApplied}
		if !cp.AppliedAt.IsZero() {
			at, since := cp.AppliedAt.UTC(), time.Since(cp.AppliedAt).Seconds()
			st.Checkpoint.AppliedAt, st.Checkpoint.SecondsSinceApply = &at, &since
		}
		for _, sp := range as.Snapshots {
			st.Snapshots = append(st.Snapshots, SnapshotStatus{Relation: sp.Relation, NextBatch: sp.NextBatch, Done: sp.Done,
				BoundaryLSN: lsn.Format(sp.BoundaryLSN), Rows: sp.Rows, Ready: sp.Ready})
		}
		if view == "diagnostics" {
			sb := f.readSinkBarriers(ctx, tgt, sk.Name, sk.Target.Schema, cp.CommitLSN)
			st.barriers = &sb
		}
		st.Quarantine = &QuarantineState{Open: as.QuarantineOpen, Total: as.QuarantineTotal, Entries: []QuarantineEntry{},
			Show:   shell.Trellara("status", f.ConfigPath, "--view", "quarantine"),
			Replay: shell.Trellara("repair-plan", f.ConfigPath)}
		if view == "quarantine" {
			for _, e := range as.Quarantine {
				st.Quarantine.Entries = append(st.Quarantine.Entries, QuarantineEntry{ID: e.ID, Unit: e.Unit,
					CommitLSN: lsn.Format(e.CommitLSN), EndLSN: lsn.Format(e.EndLSN), Offset: e.Offset, Relation: e.Relation,
					Error: e.Error, SQLState: e.SQLState, Attempts: e.Attempts, QuarantinedAt: e.QuarantinedAt.UTC()})
			}
		}
	}
	return *st
}

// logStatus fills ls from l: its size and, per consumer, its cursor, lag
// and when it last committed.
func (f *Flow) logStatus(ctx context.Context, l *segmentlog.Log, ls *LogStatus) {
	s := l.Stats()
	ls.RetainedBytes, ls.Segments, ls.FirstOffset, ls.NextOffset = s.RetainedBytes, s.Segments, s.FirstOffset, s.NextOffset
	sinks := map[string]string{}
	for _, sk := range f.Cfg.Sinks {
		sinks[sk.Cursor()] = sk.Name
	}
	now := time.Now()
	lt := f.readLogTimes(l, ls, now)
	ls.Cursors = make([]CursorStatus, 0, len(s.Cursors))
	for _, c := range s.Cursors {
		cs := CursorStatus{Name: c.Name, Kind: "consumer", Offset: c.Offset, LagEntries: c.LagOffsets, LagBytes: c.LagBytes, PastRetention: c.PastRetention}
		if name, ok := sinks[c.Name]; ok {
			cs.Kind, cs.Sink = "sink", name
		}
		if at, ok, err := l.CursorCommittedAt(c.Name); err == nil && ok {
			at = at.UTC()
			cs.LastCommitAt = &at
		}
		oldest, lag, ok := cursorLag(ctx, l, c, now)
		if ok {
			cs.LagSeconds = &lag
		}
		cs.Stalled = f.consumerStall(&cs, ls, oldest, lt)
		ls.Cursors = append(ls.Cursors, cs)
	}
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
	if e := st.Extension; e != nil {
		decoder := "not running (the server restarts it every 2 s; see its log)"
		if e.DecoderPID != 0 {
			decoder = fmt.Sprintf("pid %d", e.DecoderPID)
		}
		fmt.Fprintf(w, "decoder       trellara decoder worker %s · slot %s · database %s\n", decoder, e.Slot, e.Database)
		if e.Queue != nil {
			fmt.Fprintf(w, "queue         %s\n", e.Queue)
		} else {
			fmt.Fprintf(w, "queue         %s\n", e.QueueState)
		}
		fmt.Fprintf(w, "socket        %s · %s\n", e.Socket, e.SocketState)
		if e.InitialSnapshot != "" {
			fmt.Fprintf(w, "              initial snapshot %s\n", e.InitialSnapshot)
		}
	}
	for _, t := range st.Tables {
		fmt.Fprintf(w, "table         %s · %s\n", t.Table, t.Detail)
		if t.Fix != "" {
			fmt.Fprintf(w, "              fix on the source: %s\n", t.Fix)
		}
	}
	if l := st.Log; l != nil {
		held := ""
		if l.Held {
			held = " · held by the process running the flow"
		}
		switch {
		case l.Exists && l.Segments > 0:
			fmt.Fprintf(w, "local log     %s · %s · %s retained · offsets %d..%d%s\n", l.Dir, Plural(l.Segments, "segment"), bytesString(l.RetainedBytes), l.FirstOffset, l.NextOffset, held)
		case l.Held:
			fmt.Fprintf(w, "local log     %s%s\n", l.Dir, held)
		}
		for _, c := range l.Cursors {
			extra := ""
			if c.PastRetention {
				extra = " · PAST RETENTION: its tables must be copied again (trellara repair-plan says how)"
			}
			if c.Stalled != nil {
				extra += " · STALLED " + durationText(time.Duration(c.Stalled.Seconds*float64(time.Second)))
			}
			lag := ""
			if c.LagSeconds != nil {
				lag = fmt.Sprintf(", %.1f s", *c.LagSeconds)
			}
			last := ""
			if c.LastCommitAt != nil {
				last = " · last commit " + c.LastCommitAt.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "  cursor %-10s %s at %d · lag %d entries, %s%s%s%s\n", c.Name, c.Kind, c.Offset, c.LagEntries, bytesString(c.LagBytes), lag, last, extra)
		}
	}
	if k := st.Kafka; k != nil {
		fmt.Fprintf(w, "kafka         topic %s · %s mode · produce acknowledged through commit LSN %s", k.Topic, k.Mode, orNone(k.ProduceAckedCommitLSN))
		if k.SlotConfirmedFlushLSN != "" {
			fmt.Fprintf(w, " · slot confirmed %s", k.SlotConfirmedFlushLSN)
		}
		fmt.Fprintln(w)
		for _, p := range k.Partitions {
			fmt.Fprintf(w, "  partition %-3d %-8s offsets %d..%d\n", p.Partition, p.Role, p.StartOffset, p.HighWatermark)
		}
		for _, g := range k.Groups {
			fmt.Fprintf(w, "  group %s (sink %s) lag:", g.Group, g.Sink)
			for _, p := range g.Partitions {
				fmt.Fprintf(w, " p%d=%d", p.Partition, p.Lag)
			}
			fmt.Fprintln(w)
		}
	}
	if len(st.Sinks) > 1 {
		for _, ss := range st.Sinks {
			fmt.Fprintf(w, "sink          %s · cursor %s", ss.Sink, ss.Cursor)
			if c := ss.LogCursor; c != nil {
				fmt.Fprintf(w, " at %d · lag %d entries, %s", c.Offset, c.LagEntries, bytesString(c.LagBytes))
			}
			fmt.Fprintln(w)
			renderSinkState(w, ss.Checkpoint, ss.Snapshots, ss.Quarantine)
			renderLastVerify(w, ss.LastVerify)
			for _, n := range ss.Notes {
				fmt.Fprintf(w, "  note: %s\n", n)
			}
		}
	} else {
		renderSinkState(w, st.Checkpoint, st.Snapshots, st.Quarantine)
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
	renderBarriers(w, st.Barriers)
	if len(st.Sinks) <= 1 {
		renderLastVerify(w, st.LastVerify)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n  fix: %s\n", p.Message, p.Fix)
	}
	for _, n := range st.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// renderSinkState prints a sink's checkpoint, snapshots and quarantine.
func renderSinkState(w io.Writer, cp *CheckpointState, snapshots []SnapshotStatus, quarantine *QuarantineState) {
	if c := cp; c != nil {
		applied := "applied never"
		if c.AppliedAt != nil && c.SecondsSinceApply != nil {
			applied = fmt.Sprintf("applied %s (%.0fs ago)", c.AppliedAt.Format(time.RFC3339), *c.SecondsSinceApply)
		}
		fmt.Fprintf(w, "checkpoint    commit %s · end %s · %s\n", c.CommitLSN, c.EndLSN, applied)
		fmt.Fprintf(w, "              totals: %s applied · %d redelivered and skipped · %s\n", Plural(int(c.TxnsApplied), "transaction"), c.TxnsSkipped, Plural(int(c.RowsApplied), "row"))
	}
	for _, s := range snapshots {
		state := "copying"
		if s.Ready {
			state = "ready"
		} else if s.Done {
			state = "copied, waiting for the stream to pass its boundary"
		}
		fmt.Fprintf(w, "snapshot      %s · %s · %s\n", s.Relation, Plural(int(s.Rows), "row"), state)
	}
	if q := quarantine; q != nil {
		fmt.Fprintf(w, "quarantine    %d open (%d total)", q.Open, q.Total)
		if q.Open > 0 {
			fmt.Fprintf(w, " · show: %s · replay: %s", q.Show, q.Replay)
		}
		fmt.Fprintln(w)
		for _, e := range q.Entries {
			fmt.Fprintf(w, "  #%d %s commit %s %s: %s\n", e.ID, e.Unit, e.CommitLSN, e.Relation, withSQLState(e.Error, e.SQLState))
		}
	}
}

// renderLastVerify prints a sink's last verify.
func renderLastVerify(w io.Writer, lastVerify *verify.Result) {
	if v := lastVerify; v != nil {
		fmt.Fprintf(w, "last verify   %s (at %s)\n", v.Headline(), v.StartedAt.Format(time.RFC3339))
		if v.Recovery != "" {
			fmt.Fprintf(w, "              next: %s\n", v.Recovery)
		}
	}
}

// Plural renders a count with its noun: "1 segment", "2 segments".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// withSQLState appends "(SQLSTATE x)" to an error text unless the text
// already carries it (pgx's errors do).
func withSQLState(msg, state string) string {
	if state == "" || strings.Contains(msg, "SQLSTATE "+state) {
		return msg
	}
	return fmt.Sprintf("%s (SQLSTATE %s)", msg, state)
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// listenNote states the flow's endpoints beyond loopback: they have no
// authentication, so status says so, with the run.listen_public opt-in and
// its reason when given (config.validator.listeners).
func listenNote(c *config.Config) string {
	pub := c.PublicListeners()
	if len(pub) == 0 {
		return ""
	}
	var addrs []string
	for _, l := range pub {
		addrs = append(addrs, l.Key+" "+l.Addr)
	}
	n := "endpoints beyond loopback, without authentication: " + strings.Join(addrs, ", ")
	if c.Run.ListenPublic {
		return n + "; run.listen_public: true, reason: " + c.Run.ListenPublicReason
	}
	return n + "; environment production would refuse them without run.listen_public (docs/SECURITY.md)"
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// ExtensionStatus is what status reports of the trellara extension on a
// source.capture: extension flow: the decoder, its shared-memory queue (the
// extension's trellara_queue(), 0.3) and the socket.
type ExtensionStatus struct {
	DecoderPID int    `json:"decoder_pid"` // 0: not running right now
	Slot       string `json:"slot"`
	Database   string `json:"database"`
	Socket     string `json:"socket"`
	// SocketState is "present, owner uid N, mode 0600", or why not.
	SocketState string `json:"socket_state"`
	// InitialSnapshot is "recorded (resume: CMD)" while the extension
	// path's initial snapshot is unfinished, else empty.
	InitialSnapshot string `json:"initial_snapshot,omitempty"`
	// Queue is the decoder's queue; QueueState says why it is missing.
	Queue      *sidecar.Queue `json:"queue,omitempty"`
	QueueState string         `json:"queue_state,omitempty"`
}

// extensionStatus reads the extension's settings and decoder over src.
func (f *Flow) extensionStatus(ctx context.Context, src *pgx.Conn) (*ExtensionStatus, error) {
	info, err := sidecar.CheckServer(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("the trellara extension: %w", err)
	}
	es := &ExtensionStatus{DecoderPID: info.DecoderPID, Slot: info.SlotName, Database: info.Database, Socket: f.Cfg.Source.Socket}
	if es.Socket == "" {
		es.Socket = info.SocketPath
	}
	if fi, err := os.Stat(es.Socket); err != nil {
		es.SocketState = "not here: " + err.Error()
	} else if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		es.SocketState = fmt.Sprintf("present, owner uid %d, mode %04o", sys.Uid, fi.Mode().Perm())
	}
	if q, err := sidecar.ReadQueue(ctx, src); err != nil {
		es.QueueState = "not readable: " + err.Error()
	} else {
		es.Queue = &q
	}
	if ok, err := f.extensionSnapshotRecorded(); err == nil && ok {
		es.InitialSnapshot = "recorded and not finished (resume: " + f.extensionSnapshotCommand() + ")"
	}
	return es, nil
}
