package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/config"
)

// SlotInfo is what pg_replication_slots says about a slot.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	Active         bool
	ConfirmedFlush uint64
	RestartLSN     uint64
	WALStatus      string
}

// LookupSlot reads the slot's row from pg_replication_slots.
func LookupSlot(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	var (
		si                 SlotInfo
		plugin, walStatus  *string
		confirmed, restart *string
	)
	err := conn.QueryRow(ctx, `SELECT plugin, active, confirmed_flush_lsn::text, restart_lsn::text, wal_status
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &si.Active, &confirmed, &restart, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("relay: look up slot %s: %w", slot, err)
	}
	si.Exists = true
	if plugin != nil {
		si.Plugin = *plugin
	}
	if walStatus != nil {
		si.WALStatus = *walStatus
	}
	if confirmed != nil {
		lsn, err := pglogrepl.ParseLSN(*confirmed)
		if err != nil {
			return si, fmt.Errorf("relay: slot %s confirmed_flush_lsn %q: %w", slot, *confirmed, err)
		}
		si.ConfirmedFlush = uint64(lsn)
	}
	if restart != nil {
		lsn, _ := pglogrepl.ParseLSN(*restart)
		si.RestartLSN = uint64(lsn)
	}
	return si, nil
}

// EnsurePublication creates publication for tables unless it exists; an
// existing one must publish every table (it is reported, not altered). The
// comparison is on (schema, name) pairs as pg_publication_tables holds
// them, never on rendered text, so a quoted name and its catalog form agree.
func EnsurePublication(ctx context.Context, conn *pgx.Conn, name string, tables []config.TableName) (created bool, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("relay: look up publication %s: %w", name, err)
	}
	if exists {
		rows, err := conn.Query(ctx, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1`, name)
		if err != nil {
			return false, fmt.Errorf("relay: publication %s tables: %w", name, err)
		}
		have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (config.TableName, error) {
			var t config.TableName
			err := r.Scan(&t.Schema, &t.Name)
			return t, err
		})
		if err != nil {
			return false, fmt.Errorf("relay: publication %s tables: %w", name, err)
		}
		set := map[config.TableName]bool{}
		for _, h := range have {
			set[h] = true
		}
		var missing []config.TableName
		for _, t := range tables {
			if !set[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("relay: publication %s does not publish %s; fix: ALTER PUBLICATION %s ADD TABLE %s",
				name, tableList(missing, config.TableName.String), pgx.Identifier{name}.Sanitize(), tableList(missing, config.TableName.Sanitize))
		}
		return false, nil
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{name}.Sanitize(), tableList(tables, config.TableName.Sanitize))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return false, fmt.Errorf("relay: create publication %s: %w", name, err)
	}
	return true, nil
}

// tableList renders tables with render, comma-separated.
func tableList(tables []config.TableName, render func(config.TableName) string) string {
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = render(t)
	}
	return strings.Join(q, ", ")
}

// CreatedSlot is a slot just created with an exported snapshot. The
// snapshot stays importable only until the replication connection that
// created it runs another command.
type CreatedSlot struct {
	Name            string
	ConsistentPoint uint64
	SnapshotName    string
}

// CreateSlot creates a pgoutput logical slot on a replication connection
// and exports its snapshot.
func CreateSlot(ctx context.Context, repl *pgconn.PgConn, slot string) (CreatedSlot, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return CreatedSlot{}, fmt.Errorf("relay: create slot %s: %w", slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return CreatedSlot{}, fmt.Errorf("relay: slot %s consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	return CreatedSlot{Name: res.SlotName, ConsistentPoint: uint64(cp), SnapshotName: res.SnapshotName}, nil
}

// DropOwned drops the slot and publication a flow created. Missing objects
// are not an error: cleanup is idempotent.
func DropOwned(ctx context.Context, conn *pgx.Conn, slot, publication string) error {
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err != nil {
		return fmt.Errorf("relay: drop slot %s: %w", slot, err)
	}
	if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
		return fmt.Errorf("relay: drop publication %s: %w", publication, err)
	}
	return nil
}

// EmitFence writes a fence through the source's WAL and returns its LSN.
// It is a transactional logical message: it reaches the transport as an
// ordinary committed transaction, behind everything committed before it.
func EmitFence(ctx context.Context, conn *pgx.Conn, token string) (uint64, error) {
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_logical_emit_message(true, $1, $2)::text`, FencePrefix, token).Scan(&s); err != nil {
		return 0, fmt.Errorf("relay: write fence: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	return uint64(lsn), err
}
