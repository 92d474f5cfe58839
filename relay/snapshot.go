package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/pgname"
)

// DefaultSnapshotBatchRows bounds the rows of one snapshot batch, and
// DefaultSnapshotBatchBytes their COPY text; a batch ends at whichever
// comes first. Each batch is one envelope in the log. Larger batches
// cost more than they save: with 50,000-row batches of pgbench_accounts
// the decoded batches in flight held about four times the live heap, the
// collector's marking took a fifth of the process's CPU and the process's
// CPU doubled (2026-12-04). The applier instead commits consecutive
// batches together (apply, processSnapshot).
const (
	DefaultSnapshotBatchRows  = 5000
	DefaultSnapshotBatchBytes = 4 << 20
)

// SnapshotOptions configure the initial copy of a new flow.
type SnapshotOptions struct {
	SourceID        string
	Tables          []pgname.Name
	SnapshotName    string // exported by slot creation
	ConsistentPoint uint64
	BatchRows       int
	BatchBytes      int
	Pins            capture.Pins
	Progress        func(SnapshotProgress)
}

// SnapshotProgress is reported after each published batch.
type SnapshotProgress struct {
	Table         string  `json:"table"`
	Rows          uint64  `json:"rows"`
	Bytes         uint64  `json:"bytes"`
	EstimatedRows uint64  `json:"estimated_rows"`
	RowsPerSecond float64 `json:"rows_per_second"`
	ETASeconds    float64 `json:"eta_seconds"`
	Done          bool    `json:"done"`
}

// Snapshot copies every table as of the slot's consistent point into the
// transport: SNAPSHOT batches, then a SNAPSHOT_END marker per table — the
// table's visibility boundary. conn is an ordinary (non-replication)
// connection; the whole copy runs in one transaction that imports the
// exported snapshot, so every table is read at exactly the point the
// stream continues from: no row missed, none twice.
func Snapshot(ctx context.Context, conn *pgx.Conn, tr Transport, opts SnapshotOptions) error {
	if opts.BatchRows <= 0 {
		opts.BatchRows = DefaultSnapshotBatchRows
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultSnapshotBatchBytes
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("relay: snapshot: begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(opts.SnapshotName)); err != nil {
		return fmt.Errorf("relay: snapshot: import snapshot %s: %w", opts.SnapshotName, err)
	}
	for _, table := range opts.Tables {
		if err := snapshotTable(ctx, tx, tr, table, opts); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// RelationFromCatalog reads a relation's metadata the way pgoutput
// describes it: published columns in attribute order (dropped and
// generated columns excluded), the type OID and modifier, and the replica
// identity key flag. Its fingerprint therefore equals the one computed from
// the stream's Relation message for the same table.
func RelationFromCatalog(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, table pgname.Name) (*pb.Relation, error) {
	rel := &pb.Relation{}
	var ident string
	err := q.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, c.relreplident::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, table.Schema, table.Name).
		Scan(&rel.Oid, &rel.Schema, &rel.Name, &ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("relay: table %s does not exist at the source (check source.tables; quote mixed-case names: public.\"Sales\")", table)
	}
	if err != nil {
		return nil, fmt.Errorf("relay: table %s: %w", table, err)
	}
	rel.ReplicaIdentity = uint32(ident[0])
	rows, err := q.Query(ctx, `
		SELECT a.attname, a.atttypid, a.atttypmod,
		       CASE c.relreplident
		         WHEN 'f' THEN true
		         WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY (i.indkey))
		         WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident AND a.attnum = ANY (i.indkey))
		         ELSE false END
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, rel.Oid)
	if err != nil {
		return nil, fmt.Errorf("relay: table %s columns: %w", table, err)
	}
	for rows.Next() {
		c := &pb.RelationColumn{}
		if err := rows.Scan(&c.Name, &c.TypeOid, &c.TypeModifier, &c.Key); err != nil {
			rows.Close()
			return nil, fmt.Errorf("relay: table %s columns: %w", table, err)
		}
		rel.Columns = append(rel.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("relay: table %s columns: %w", table, err)
	}
	rel.Fingerprint = envelope.RelationFingerprint(rel)
	return rel, nil
}

// CopySQL is the statement that copies table's published columns. A
// partitioned table ('p') is copied through its root with COPY (SELECT
// ...): the rows of every partition, attached to the root's relation, as
// the publication (publish_via_partition_root) streams their changes.
// COPY of a plain table reads that table alone, as its publication does.
func CopySQL(table pgname.Name, rel *pb.Relation, relkind string) string {
	cols := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	if relkind == "p" {
		return fmt.Sprintf("COPY (SELECT %s FROM %s) TO STDOUT", strings.Join(cols, ", "), table.Sanitize())
	}
	return fmt.Sprintf("COPY %s (%s) TO STDOUT", table.Sanitize(), strings.Join(cols, ", "))
}

func snapshotTable(ctx context.Context, tx pgx.Tx, tr Transport, table pgname.Name, opts SnapshotOptions) error {
	rel, err := RelationFromCatalog(ctx, tx, table)
	if err != nil {
		return err
	}
	name := capture.RelationName(rel)
	if opts.Pins != nil {
		if pinned, ok := opts.Pins.Pinned(name); ok && pinned != rel.Fingerprint {
			return &capture.SchemaDriftError{Relation: name, Pinned: pinned, Live: rel.Fingerprint, LSN: opts.ConsistentPoint,
				LiveColumns: capture.DescribeColumns(rel), PinnedColumns: "see pins", InspectCommand: "trellara status --view diagnostics"}
		} else if sp, shapes := opts.Pins.(capture.ShapePins); shapes {
			// Pin (or fill in) the shape too, so the first change after
			// the snapshot is classified against it.
			if _, kept := sp.PinnedShape(name); !ok || !kept {
				if err := sp.PinShape(name, rel.Fingerprint, capture.ShapeOf(name, rel, nil)); err != nil {
					return err
				}
			}
		} else if !ok {
			if err := opts.Pins.Pin(name, rel.Fingerprint); err != nil {
				return err
			}
		}
	}
	var (
		estimate float64
		relkind  string
	)
	// A partitioned table holds no rows itself: its estimate is the sum of
	// its leaf partitions'.
	if err := tx.QueryRow(ctx, `SELECT c.relkind::text, CASE WHEN c.relkind = 'p'
		  THEN (SELECT coalesce(sum(greatest(l.reltuples, 0)), 0) FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid WHERE t.isleaf)
		  ELSE greatest(c.reltuples, 0) END
		FROM pg_class c WHERE c.oid = $1`, rel.Oid).Scan(&relkind, &estimate); err != nil {
		return fmt.Errorf("relay: snapshot %s: read pg_class: %w", name, err)
	}
	started := time.Now()
	prog := SnapshotProgress{Table: name, EstimatedRows: uint64(estimate)}
	var (
		batch      uint32
		batchBytes int
		publishErr error
		cr         *copyRows
	)
	publish := func(kind pb.UnitKind) error {
		e := &pb.Envelope{
			ProtocolVersion: envelope.ProtocolVersion, SourceId: opts.SourceID,
			CommitLsn: opts.ConsistentPoint, EndLsn: opts.ConsistentPoint,
			CommitTimeUnixMicros: time.Now().UnixMicro(),
			Relations:            []*pb.Relation{rel},
			Boundary:             &pb.Boundary{Kind: kind, ChunkIndex: batch, SnapshotRelation: name},
		}
		var b []byte
		var err error
		if kind == pb.UnitKind_UNIT_KIND_SNAPSHOT {
			b, err = envelope.EncodeInserts(e, cr.rows)
		} else {
			envelope.Seal(e)
			b, err = envelope.Encode(e)
		}
		if err != nil {
			return fmt.Errorf("relay: snapshot %s batch %d: %w", name, batch, err)
		}
		if _, err := tr.Publish(ctx, b); err != nil {
			return fmt.Errorf("relay: snapshot %s batch %d: publish: %w", name, batch, err)
		}
		if kind == pb.UnitKind_UNIT_KIND_SNAPSHOT {
			batch++
		}
		cr.rows.Reset()
		batchBytes = 0
		if opts.Progress != nil {
			el := time.Since(started).Seconds()
			if el > 0 {
				prog.RowsPerSecond = float64(prog.Rows) / el
			}
			if prog.RowsPerSecond > 0 && prog.EstimatedRows > prog.Rows {
				prog.ETASeconds = float64(prog.EstimatedRows-prog.Rows) / prog.RowsPerSecond
			} else {
				prog.ETASeconds = 0
			}
			prog.Done = kind == pb.UnitKind_UNIT_KIND_SNAPSHOT_END
			opts.Progress(prog)
		}
		return nil
	}
	// Rows are parsed as the COPY stream arrives (copyRows is CopyTo's
	// writer), straight into the batch's wire form, and published as each
	// batch fills.
	cr = newCopyRows(len(rel.Columns), func(size int) error {
		batchBytes += size
		prog.Rows++
		prog.Bytes += uint64(size)
		if cr.rows.Rows() >= opts.BatchRows || batchBytes >= opts.BatchBytes {
			if err := publish(pb.UnitKind_UNIT_KIND_SNAPSHOT); err != nil {
				publishErr = err
				return err
			}
		}
		return nil
	})
	_, err = tx.Conn().PgConn().CopyTo(ctx, cr, CopySQL(table, rel, relkind))
	if err == nil {
		err = cr.Close()
	}
	switch {
	case publishErr != nil:
		return publishErr
	case err != nil:
		return fmt.Errorf("relay: snapshot %s: COPY: %w", name, err)
	}
	if cr.rows.Rows() > 0 {
		if err := publish(pb.UnitKind_UNIT_KIND_SNAPSHOT); err != nil {
			return err
		}
	}
	return publish(pb.UnitKind_UNIT_KIND_SNAPSHOT_END)
}
