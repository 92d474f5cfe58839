package check

import (
	"fmt"
	"strings"
)

// Conflicts covers recovery conflicts (standbys) and subscription errors.
type Conflicts struct {
	Standby bool `json:"standby"`
	// DatabaseConflicts sums pg_stat_database_conflicts for this database;
	// null on a primary or when not visible.
	DatabaseConflicts    *int64              `json:"database_conflicts"`
	LogicalSlotConflicts *int64              `json:"logical_slot_conflicts"` // 16+
	SubscriptionErrors   []SubscriptionError `json:"subscription_errors"`
}

// SubscriptionError is a subscription on this server with errors (15+).
type SubscriptionError struct {
	Name        string `json:"name"`
	ApplyErrors int64  `json:"apply_errors"`
	SyncErrors  int64  `json:"sync_errors"`
}

func (in *inspector) conflicts() error {
	c := &in.r.Conflicts
	c.Standby = in.r.Server.InRecovery
	c.SubscriptionErrors = []SubscriptionError{}
	sec := in.r.section(SectionConflicts)
	var summary []string

	if c.Standby {
		cols, err := in.columns("pg_catalog.pg_stat_database_conflicts")
		if err != nil {
			return err
		}
		logical := "NULL::bigint"
		if cols["confl_active_logicalslot"] {
			logical = "confl_active_logicalslot"
		}
		var total, slotConfl *int64
		if _, err := in.optional("pg_stat_database_conflicts", func() error {
			return in.q.QueryRow(in.ctx, `SELECT (confl_tablespace + confl_lock + confl_snapshot + confl_bufferpin + confl_deadlock)::bigint, `+
				logical+` FROM pg_catalog.pg_stat_database_conflicts WHERE datname = current_database()`).Scan(&total, &slotConfl)
		}); err != nil {
			return err
		}
		c.DatabaseConflicts, c.LogicalSlotConflicts = total, slotConfl
		if total != nil {
			summary = append(summary, fmt.Sprintf("%d recovery conflicts in %s", *total, in.r.Server.Database))
		}
		if slotConfl != nil {
			sec.Lines = append(sec.Lines, fmt.Sprintf("logical slot conflicts: %d", *slotConfl))
		}
		hsf, _ := in.setting("hot_standby_feedback")
		if hsf.Value != "on" && ((total != nil && *total > 0) || (slotConfl != nil && *slotConfl > 0) || len(in.r.Slots) > 0) {
			in.r.add(Finding{Severity: Warning, Code: "hot_standby_feedback_off", Section: SectionConflicts,
				Title:  "hot_standby_feedback is off on a standby that decodes or sees conflicts",
				Detail: "Without it, VACUUM on the primary removes rows a logical slot on this standby still needs, and the slot is invalidated by a recovery conflict.",
				Action: in.setAction("hot_standby_feedback", "on")})
		}
	} else {
		summary = append(summary, "not a standby")
	}

	ok, err := in.exists("pg_catalog.pg_stat_subscription_stats")
	if err != nil {
		return err
	}
	if ok {
		var subs []SubscriptionError
		if _, err := in.optional("pg_stat_subscription_stats", func() error {
			rows, err := in.q.Query(in.ctx, `SELECT subname::text, apply_error_count, sync_error_count
				FROM pg_catalog.pg_stat_subscription_stats WHERE apply_error_count + sync_error_count > 0 ORDER BY 1 LIMIT 100`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var s SubscriptionError
				if err := rows.Scan(&s.Name, &s.ApplyErrors, &s.SyncErrors); err != nil {
					return err
				}
				subs = append(subs, s)
			}
			return rows.Err()
		}); err != nil {
			return err
		}
		if len(subs) > 0 && in.opts.Scope != nil {
			// Subscriptions are not the flow's: a count, no names.
			summary = append(summary, plural(len(subs), "subscription")+" with errors (not listed: not the flow's)")
		} else if len(subs) > 0 {
			c.SubscriptionErrors = subs
			var objs []string
			for _, s := range subs {
				objs = append(objs, s.Name)
				sec.Lines = append(sec.Lines, fmt.Sprintf("subscription %s: %d apply errors, %d sync errors", s.Name, s.ApplyErrors, s.SyncErrors))
			}
			summary = append(summary, plural(len(subs), "subscription")+" with errors")
			in.r.add(Finding{Severity: Info, Code: "subscription_errors", Section: SectionConflicts,
				Title:   plural(len(subs), "subscription") + " on this server report apply or sync errors",
				Detail:  "This server is itself a logical replication subscriber and some of its subscriptions have failed; the server log has each error.",
				Objects: objs})
		} else {
			summary = append(summary, "no subscription errors")
		}
	}
	sec.Summary = strings.Join(summary, " · ")
	return nil
}
