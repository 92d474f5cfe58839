package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/pgname"
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
		pos, err := lsn.Parse(*confirmed)
		if err != nil {
			return si, fmt.Errorf("relay: slot %s confirmed_flush_lsn %q: %w", slot, *confirmed, err)
		}
		si.ConfirmedFlush = uint64(pos)
	}
	if restart != nil {
		pos, _ := lsn.Parse(*restart)
		si.RestartLSN = uint64(pos)
	}
	return si, nil
}

// EnsurePublication creates publication for tables unless it exists; an
// existing one must publish every table (it is reported, not altered). The
// comparison is on (schema, name) pairs as pg_publication_tables holds
// them, never on rendered text, so a quoted name and its catalog form agree.
func EnsurePublication(ctx context.Context, conn *pgx.Conn, name string, tables []pgname.Name) (created bool, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("relay: look up publication %s: %w", name, err)
	}
	if exists {
		if err := CheckViaRoot(ctx, conn, name, tables); err != nil {
			return false, err
		}
		rows, err := conn.Query(ctx, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1`, name)
		if err != nil {
			return false, fmt.Errorf("relay: publication %s tables: %w", name, err)
		}
		have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgname.Name, error) {
			var t pgname.Name
			err := r.Scan(&t.Schema, &t.Name)
			return t, err
		})
		if err != nil {
			return false, fmt.Errorf("relay: publication %s tables: %w", name, err)
		}
		set := map[pgname.Name]bool{}
		for _, h := range have {
			set[h] = true
		}
		var missing []pgname.Name
		for _, t := range tables {
			if !set[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("relay: publication %s does not publish %s; fix: ALTER PUBLICATION %s ADD TABLE %s",
				name, tableList(missing, pgname.Name.String), pgx.Identifier{name}.Sanitize(), tableList(missing, pgname.Name.Sanitize))
		}
		return false, nil
	}
	if _, err := conn.Exec(ctx, CreatePublicationSQL(name, tables)); err != nil {
		return false, fmt.Errorf("relay: create publication %s: %w", name, err)
	}
	return true, nil
}

// CreatePublicationSQL is the statement that creates the flow's
// publication. publish_via_partition_root makes a partitioned table's
// changes arrive as the root's (its Relation message, its name): the
// relation the snapshot copies and the applier writes. Plain tables are
// unaffected.
func CreatePublicationSQL(name string, tables []pgname.Name) string {
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)",
		pgx.Identifier{name}.Sanitize(), tableList(tables, pgname.Name.Sanitize))
}

// ViaRootError says that an existing publication does not publish via the
// partition root while a configured table is partitioned: its changes
// would arrive under each partition's name and relation, which neither
// the snapshot (copied through the root) nor the target knows.
type ViaRootError struct {
	Publication string
	Tables      []pgname.Name // the configured partitioned tables
	Fix         string        // SQL to run on the source
}

func (e *ViaRootError) Error() string {
	return fmt.Sprintf("relay: publication %s does not publish via the partition root, and %s partitioned: "+
		"their changes would arrive under each partition's name, not the table's; fix on the source: %s",
		e.Publication, tableList(e.Tables, pgname.Name.String), e.Fix)
}

// CheckViaRoot returns a *ViaRootError when the existing publication name
// has publish_via_partition_root off and one of tables is partitioned.
// Run (EnsurePublication) refuses with it; preflight reports it.
func CheckViaRoot(ctx context.Context, conn *pgx.Conn, name string, tables []pgname.Name) error {
	var viaRoot bool
	if err := conn.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, name).Scan(&viaRoot); err != nil {
		return fmt.Errorf("relay: look up publication %s: %w", name, err)
	}
	if viaRoot {
		return nil
	}
	partitioned, err := partitionedTables(ctx, conn, tables)
	if err != nil {
		return fmt.Errorf("relay: publication %s: %w", name, err)
	}
	if len(partitioned) == 0 {
		return nil
	}
	return &ViaRootError{Publication: name, Tables: partitioned,
		Fix: fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", pgx.Identifier{name}.Sanitize())}
}

// partitionedTables returns those of tables that are partitioned.
func partitionedTables(ctx context.Context, conn *pgx.Conn, tables []pgname.Name) ([]pgname.Name, error) {
	var out []pgname.Name
	for _, t := range tables {
		var p bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'p')`, t.Schema, t.Name).Scan(&p); err != nil {
			return nil, fmt.Errorf("look up table %s: %w", t, err)
		}
		if p {
			out = append(out, t)
		}
	}
	return out, nil
}

// tableList renders tables with render, comma-separated.
func tableList(tables []pgname.Name, render func(pgname.Name) string) string {
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
	return createSlot(ctx, repl, slot, false)
}

// CreateTemporarySlot is CreateSlot for a slot that lives only as long as
// the replication connection: the way to an exported snapshot that is
// exact at an LSN (every transaction whose commit record precedes the
// consistent point is visible in it, none after), which verify compares a
// held target with.
func CreateTemporarySlot(ctx context.Context, repl *pgconn.PgConn, slot string) (CreatedSlot, error) {
	return createSlot(ctx, repl, slot, true)
}

func createSlot(ctx context.Context, repl *pgconn.PgConn, slot string, temporary bool) (CreatedSlot, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: temporary, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return CreatedSlot{}, fmt.Errorf("relay: create slot %s: %w", slot, err)
	}
	cp, err := lsn.Parse(res.ConsistentPoint)
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
	pos, err := lsn.Parse(s)
	return uint64(pos), err
}
