package check

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/trellara/trellara/internal/shell"
)

// Slot is one replication slot. Pointer fields are null where the server
// version has no such column (or the value is NULL).
type Slot struct {
	Name               string `json:"name"`
	Plugin             string `json:"plugin"`
	Type               string `json:"type"` // logical | physical
	Database           string `json:"database"`
	Active             bool   `json:"active"`
	Temporary          bool   `json:"temporary"`
	RestartLSN         string `json:"restart_lsn"`
	ConfirmedFlushLSN  string `json:"confirmed_flush_lsn"`
	WALStatus          string `json:"wal_status"`    // 13+: reserved | extended | unreserved | lost
	SafeWALSize        *int64 `json:"safe_wal_size"` // 13+: bytes until invalidation; null when unlimited
	RetainedBytes      *int64 `json:"retained_bytes"`
	LagBytes           *int64 `json:"lag_bytes"`           // current LSN minus confirmed_flush_lsn
	TwoPhase           *bool  `json:"two_phase"`           // 14+
	Conflicting        *bool  `json:"conflicting"`         // 16+
	InvalidationReason string `json:"invalidation_reason"` // 17+
	Failover           *bool  `json:"failover"`            // 17+
	Synced             *bool  `json:"synced"`              // 17+
	InactiveSeconds    *int64 `json:"inactive_seconds"`    // 17+: now() - inactive_since
	StalledSeconds     *int64 `json:"stalled_seconds"`
	StalledBasis       string `json:"stalled_basis"` // inactive_since | wal_rate_estimate
	ActivePID          *int64 `json:"active_pid"`
	Invalidated        bool   `json:"invalidated"`
	// TrellaraFlow names the Trellara flow whose slot this is (scope.go,
	// trellaraFlow); empty for any other consumer's.
	TrellaraFlow  string  `json:"trellara_flow,omitempty"`
	retainedHours float64 // retained WAL expressed in hours at the current rate
}

// optionalSlotColumns maps pg_replication_slots columns added after 10 to a
// text expression. Absent columns are selected as NULL, so the query never
// names a column this server lacks.
var optionalSlotColumns = []struct{ col, expr string }{
	{"temporary", "temporary::text"},
	{"wal_status", "wal_status::text"},
	{"safe_wal_size", "safe_wal_size::text"},
	{"two_phase", "two_phase::text"},
	{"conflicting", "conflicting::text"},
	{"invalidation_reason", "invalidation_reason::text"},
	{"failover", "failover::text"},
	{"synced", "synced::text"},
	{"inactive_since", "extract(epoch FROM now() - inactive_since)::bigint::text"},
}

// maxSlots bounds the listing; max_replication_slots is rarely above a few
// dozen.
const maxSlots = 1000

func (in *inspector) slots() error {
	cols, err := in.columns("pg_catalog.pg_replication_slots")
	if err != nil {
		return err
	}
	in.slotCols = cols
	exprs := make([]string, len(optionalSlotColumns))
	for i, c := range optionalSlotColumns {
		if cols[c.col] {
			exprs[i] = c.expr
		} else {
			exprs[i] = "NULL::text"
		}
	}
	// Retained WAL and lag are measured against the LSN of the sample start.
	cur := "NULL::pg_lsn"
	if in.haveLSN {
		cur = quoteLiteral(in.walStart.String()) + "::pg_lsn"
	}
	q := `SELECT slot_name::text, coalesce(plugin::text, ''), slot_type::text, coalesce(database::text, ''), active,
		active_pid::bigint, coalesce(restart_lsn::text, ''), coalesce(confirmed_flush_lsn::text, ''),
		pg_wal_lsn_diff(` + cur + `, restart_lsn)::bigint, pg_wal_lsn_diff(` + cur + `, confirmed_flush_lsn)::bigint, ` +
		strings.Join(exprs, ", ") + `
		FROM pg_catalog.pg_replication_slots ORDER BY slot_name LIMIT ` + strconv.Itoa(maxSlots)
	rows, err := in.q.Query(in.ctx, q)
	if err != nil {
		return &QueryError{What: "pg_replication_slots", Err: err}
	}
	defer rows.Close()
	for rows.Next() {
		var s Slot
		opt := make([]*string, len(optionalSlotColumns))
		dest := []any{&s.Name, &s.Plugin, &s.Type, &s.Database, &s.Active, &s.ActivePID, &s.RestartLSN,
			&s.ConfirmedFlushLSN, &s.RetainedBytes, &s.LagBytes}
		for i := range opt {
			dest = append(dest, &opt[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return &QueryError{What: "pg_replication_slots", Err: err}
		}
		get := func(col string) *string {
			for i, c := range optionalSlotColumns {
				if c.col == col {
					return opt[i]
				}
			}
			return nil
		}
		s.Temporary = boolPtr(get("temporary")) != nil && *boolPtr(get("temporary"))
		if v := get("wal_status"); v != nil {
			s.WALStatus = *v
		}
		s.SafeWALSize = intPtr(get("safe_wal_size"))
		s.TwoPhase = boolPtr(get("two_phase"))
		s.Conflicting = boolPtr(get("conflicting"))
		if v := get("invalidation_reason"); v != nil {
			s.InvalidationReason = *v
		}
		s.Failover = boolPtr(get("failover"))
		s.Synced = boolPtr(get("synced"))
		s.InactiveSeconds = intPtr(get("inactive_since"))
		s.Invalidated = s.WALStatus == "lost" || s.InvalidationReason != "" || (s.Conflicting != nil && *s.Conflicting)
		if sc := in.opts.Scope; sc != nil && s.Name != sc.Slot {
			// Another flow's or application's: counted, never named or graded.
			in.r.Scope.OtherSlots++
			continue
		}
		in.r.Slots = append(in.r.Slots, s)
	}
	if err := rows.Err(); err != nil {
		return &QueryError{What: "pg_replication_slots", Err: err}
	}
	// pg_stat_replication rows (not their details) are visible to any role.
	if err := in.q.QueryRow(in.ctx, "SELECT count(*)::int FROM pg_catalog.pg_stat_replication").Scan(&in.walSenders); err != nil {
		return &QueryError{What: "pg_stat_replication", Err: err}
	}
	return nil
}

func boolPtr(s *string) *bool {
	if s == nil {
		return nil
	}
	b := *s == "true"
	return &b
}

func intPtr(s *string) *int64 {
	if s == nil {
		return nil
	}
	v, err := strconv.ParseInt(*s, 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

func slotRef(s Slot) string { return "'" + s.Name + "'" }

// slotRules grades each slot once the WAL rate is known.
func (in *inspector) slotRules(rate float64, maxKeep int64, known bool, capAction string) {
	sec := in.r.section(SectionSlots)
	var active, stalled, invalid, temp, atRest int
	var longest int64
	for i := range in.r.Slots {
		s := &in.r.Slots[i]
		if flow, ok := in.trellaraFlow(*s); ok && !s.Temporary {
			s.TrellaraFlow = flow
		}
		if s.RetainedBytes != nil && rate > 0 {
			s.retainedHours = float64(*s.RetainedBytes) / rate / 3600
		}
		switch {
		case s.Temporary:
			temp++
		case s.Invalidated:
			invalid++
		case s.Active:
			active++
		default:
			if s.TrellaraFlow != "" {
				atRest++
			} else {
				stalled++
			}
			if s.InactiveSeconds != nil {
				s.StalledSeconds, s.StalledBasis = s.InactiveSeconds, "inactive_since"
			} else if s.RetainedBytes != nil && rate > 0 {
				// Without inactive_since (before 17) the best estimate is how
				// long the server took to write the WAL the slot still holds.
				v := int64(float64(*s.RetainedBytes) / rate)
				s.StalledSeconds, s.StalledBasis = &v, "wal_rate_estimate"
			}
			if s.StalledSeconds != nil && *s.StalledSeconds > longest && s.TrellaraFlow == "" {
				longest = *s.StalledSeconds
			}
		}
		sec.Lines = append(sec.Lines, describeSlot(*s))
	}

	var summary []string
	if sc := in.opts.Scope; len(in.r.Slots) == 0 && sc != nil {
		summary = append(summary, "slot "+sc.Slot+" does not exist yet (Trellara creates it when the flow first runs)")
	} else if len(in.r.Slots) == 0 {
		summary = append(summary, "none")
	}
	if active > 0 {
		summary = append(summary, fmt.Sprintf("%d active", active))
	}
	if stalled > 0 {
		st := fmt.Sprintf("%d stalled", stalled)
		if longest > 0 {
			st += " " + fmtDuration(secs(longest))
		}
		summary = append(summary, st)
	}
	if atRest > 0 {
		summary = append(summary, fmt.Sprintf("%d Trellara %s at rest", atRest, map[bool]string{true: "flow", false: "flows"}[atRest == 1]))
	}
	if invalid > 0 {
		summary = append(summary, fmt.Sprintf("%d invalidated", invalid))
	}
	if temp > 0 {
		summary = append(summary, fmt.Sprintf("%d temporary", temp))
	}
	sec.Summary = strings.Join(summary, " · ")

	for _, s := range in.r.Slots {
		if s.Temporary {
			continue
		}
		if s.TrellaraFlow != "" && (!s.Active || s.Invalidated || s.WALStatus == "unreserved") {
			in.trellaraSlotFinding(s, s.TrellaraFlow, rate, maxKeep, known)
			continue
		}
		drop := fmt.Sprintf("SELECT pg_drop_replication_slot(%s);", quoteLiteral(s.Name))
		switch {
		case s.Invalidated:
			why := s.InvalidationReason
			if why == "" {
				why = "wal_status=" + s.WALStatus
			}
			in.r.add(Finding{Severity: High, Code: "slot_invalidated", Section: SectionSlots,
				Title:   fmt.Sprintf("slot %s is invalidated (%s); its consumer cannot resume", slotRef(s), why),
				Detail:  "The WAL the consumer still needed is gone. Resuming would skip changes; the consumer must be re-seeded from a fresh snapshot.",
				Action:  drop + "   -- then re-seed its consumer",
				Objects: []string{s.Name}})
		case s.WALStatus == "unreserved":
			in.r.add(Finding{Severity: High, Code: "slot_wal_unreserved", Section: SectionSlots,
				Title:   fmt.Sprintf("slot %s is past max_slot_wal_keep_size and will be invalidated at the next checkpoint", slotRef(s)),
				Detail:  "Its consumer must catch up now or lose its position.",
				Action:  fmt.Sprintf("start the consumer of slot %s now; if it is gone for good:\n%s", slotRef(s), drop),
				Objects: []string{s.Name}})
		case !s.Active:
			in.stalledSlotFinding(s, rate, maxKeep, capAction, drop)
		case s.RetainedBytes != nil && (*s.RetainedBytes > 1<<30 || s.retainedHours > 6):
			pid := "its walsender"
			if s.ActivePID != nil {
				pid = fmt.Sprintf("walsender pid %d", *s.ActivePID)
			}
			act := fmt.Sprintf("check the consumer of slot %s (%s): it is connected but does not confirm progress", slotRef(s), pid)
			if s.TrellaraFlow != "" {
				act = fmt.Sprintf("check Trellara flow %s's relay (%s): %s shows where it waits", s.TrellaraFlow, pid, shell.Trellara("status", in.configPath(s.TrellaraFlow)))
			}
			if s.ActivePID != nil {
				act += fmt.Sprintf("\nSELECT pg_terminate_backend(%d);   -- makes it reconnect, if restarting the consumer is not possible", *s.ActivePID)
			}
			in.r.add(Finding{Severity: Warning, Code: "slot_lagging", Section: SectionSlots,
				Title:   fmt.Sprintf("active slot %s holds %s of WAL (%s at the current rate)", slotRef(s), fmtBytes(*s.RetainedBytes), hoursText(s.retainedHours)),
				Detail:  "Its consumer is connected but restart_lsn is far behind: WAL accumulates as if it were stalled.",
				Action:  act,
				Objects: []string{s.Name}})
		}
	}
}

func (in *inspector) stalledSlotFinding(s Slot, rate float64, maxKeep int64, capAction, drop string) {
	retained := int64(0)
	if s.RetainedBytes != nil {
		retained = *s.RetainedBytes
	}
	stall := ""
	if s.StalledSeconds != nil {
		stall = " (stalled " + fmtDuration(secs(*s.StalledSeconds)) + ")"
		if s.StalledBasis == "wal_rate_estimate" {
			stall = " (stalled ~" + fmtDuration(secs(*s.StalledSeconds)) + ", estimated from the WAL it holds)"
		}
	}
	action := drop + "   -- if its consumer is gone for good; otherwise restart the consumer"
	if maxKeep < 0 {
		title := fmt.Sprintf("inactive slot %s holds %s of WAL with no cap", slotRef(s), fmtBytes(retained))
		detail := "No consumer is connected to the slot" + stall + ". max_slot_wal_keep_size = -1, so PostgreSQL keeps every WAL segment from the slot's restart_lsn on until the disk is full, and a full pg_wal stops the primary."
		if rate > 0 {
			perGiB := float64(1<<30) / rate / 3600
			title += fmt.Sprintf("; each GB of free disk lasts ~%s at %s", hoursText(perGiB), fmtRate(rate))
			detail += fmt.Sprintf(" WAL is being written at %s, so every 1 GB of free disk in pg_wal buys ~%s.", fmtRate(rate), hoursText(perGiB))
		}
		in.r.add(Finding{Severity: High, Code: "slot_stalled_unbounded", Section: SectionSlots,
			Title: title, Detail: detail,
			Action:  action + "\nand cap what any slot may retain:\n" + capAction,
			Objects: []string{s.Name}})
		return
	}
	sev := Warning
	title := fmt.Sprintf("inactive slot %s holds %s of WAL", slotRef(s), fmtBytes(retained))
	detail := "No consumer is connected to the slot" + stall + "; it holds WAL until its consumer returns."
	if s.SafeWALSize != nil && rate > 0 {
		hours := float64(*s.SafeWALSize) / rate / 3600
		title += fmt.Sprintf("; invalidated in ~%s at the current rate", hoursText(hours))
		detail += fmt.Sprintf(" At max_slot_wal_keep_size it will be invalidated after %s more WAL, and its consumer would need a re-seed.", fmtBytes(*s.SafeWALSize))
		if hours < 6 {
			sev = High
		}
	}
	in.r.add(Finding{Severity: sev, Code: "slot_inactive", Section: SectionSlots,
		Title: title, Detail: detail, Action: action, Objects: []string{s.Name}})
}

func describeSlot(s Slot) string {
	var parts []string
	kind := s.Type
	if s.Plugin != "" {
		kind += " " + s.Plugin
	}
	if s.Database != "" {
		kind += " on " + s.Database
	}
	parts = append(parts, kind)
	if s.TrellaraFlow != "" {
		parts = append(parts, "Trellara flow "+s.TrellaraFlow)
	}
	state := "inactive"
	if s.Active {
		state = "active"
	}
	if s.Temporary {
		state += " temporary"
	}
	if s.Invalidated {
		state = "INVALIDATED"
	}
	parts = append(parts, state)
	if s.WALStatus != "" {
		parts = append(parts, "wal_status "+s.WALStatus)
	}
	if s.RetainedBytes != nil {
		parts = append(parts, "retains "+fmtBytes(*s.RetainedBytes))
	}
	if s.LagBytes != nil {
		parts = append(parts, "lag "+fmtBytes(*s.LagBytes))
	}
	if s.SafeWALSize != nil {
		parts = append(parts, "safe_wal_size "+fmtBytes(*s.SafeWALSize))
	}
	if s.StalledSeconds != nil && s.TrellaraFlow != "" {
		parts = append(parts, "at rest "+fmtDuration(secs(*s.StalledSeconds)))
	} else if s.StalledSeconds != nil {
		parts = append(parts, "stalled "+fmtDuration(secs(*s.StalledSeconds)))
	}
	if s.InvalidationReason != "" {
		parts = append(parts, "invalidation_reason "+s.InvalidationReason)
	}
	if s.TwoPhase != nil && *s.TwoPhase {
		parts = append(parts, "two_phase")
	}
	if s.Failover != nil && *s.Failover {
		parts = append(parts, "failover")
	}
	if s.Synced != nil && *s.Synced {
		parts = append(parts, "synced")
	}
	return fmt.Sprintf("%-24s %s", s.Name, strings.Join(parts, " · "))
}
