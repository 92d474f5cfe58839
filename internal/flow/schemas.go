package flow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/pgcatalog"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/schemachange"
)

// Whole-schema capture (source.schemas). The flow's tables are
// source.tables, then the tables of the listed schemas it knows: before the
// initial snapshot, those the source catalog lists (resolveTables); after
// it, those pinned — every table the snapshot copied and every table that
// joined through an add_table barrier (docs/SCHEMA.md). Verify, status,
// reseed and the target-table checks all read Tables, so a table that
// joined is covered as soon as its pin moves.

// captures reports whether schema is captured whole.
func (f *Flow) captures(schema string) bool { return slices.Contains(f.Cfg.Source.Schemas, schema) }

// schemaTablesKnown lists the tables of source.schemas the flow knows:
// resolved for the initial snapshot, or pinned.
func (f *Flow) schemaTablesKnown() []config.TableName {
	if len(f.Cfg.Source.Schemas) == 0 {
		return nil
	}
	var out []config.TableName
	seen := map[config.TableName]bool{}
	add := func(t config.TableName) {
		if f.captures(t.Schema) && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	f.resolvedMu.Lock()
	for _, t := range f.resolved {
		add(t)
	}
	f.resolvedMu.Unlock()
	pins := f.Pins
	if pins == nil {
		// Opened without the local state (OpenConfig): read the pins as
		// the process running the flow last wrote them.
		p, err := capture.OpenPins(filepath.Join(f.dir, "pins.json"))
		if err != nil {
			f.Logger.Warn("schema pins unreadable; the tables that joined source.schemas are not listed", "error", err)
		} else {
			pins = p
		}
	}
	if pins != nil {
		for rel := range pins.All() {
			if t, err := config.ParseTableName(rel); err == nil {
				add(t)
			}
		}
	}
	slices.SortFunc(out, func(a, b config.TableName) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// resolveTables lists, before the initial snapshot, every table the
// source catalog holds in source.schemas (plain and partitioned tables; a
// partition is published through its root). After the snapshot the pins
// name the flow's tables and nothing is read: a table created since joins
// only through the stream (add_table).
func (f *Flow) resolveTables(ctx context.Context, src pgxQuerier) error {
	if len(f.Cfg.Source.Schemas) == 0 {
		return nil
	}
	if _, err := os.Stat(f.snapshotDonePath()); err == nil {
		return nil
	}
	rows, err := src.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1, 2`, f.Cfg.Source.Schemas)
	if err != nil {
		return fmt.Errorf("flow %s: list the tables of source.schemas (%s): %w", f.Cfg.Flow, strings.Join(f.Cfg.Source.Schemas, ", "), err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (config.TableName, error) {
		var t config.TableName
		err := r.Scan(&t.Schema, &t.Name)
		return t, err
	})
	if err != nil {
		return fmt.Errorf("flow %s: list the tables of source.schemas: %w", f.Cfg.Flow, err)
	}
	f.resolvedMu.Lock()
	f.resolved = tables
	f.resolvedMu.Unlock()
	return nil
}

// schemasPublicationSQL is the statement that creates a whole-schema
// flow's publication (PostgreSQL 15+), with source.tables beside the
// schemas.
func (f *Flow) schemasPublicationSQL() string {
	src := f.Cfg.Source
	q := make([]string, len(src.Schemas))
	for i, s := range src.Schemas {
		q[i] = pgx.Identifier{s}.Sanitize()
	}
	sql := "CREATE PUBLICATION " + pgx.Identifier{src.Publication}.Sanitize() + " FOR TABLES IN SCHEMA " + strings.Join(q, ", ")
	if len(src.Tables) > 0 {
		sql += ", TABLE " + sanitizedList(src.Tables)
	}
	return sql + " WITH (publish_via_partition_root = true)"
}

// publicationSQL is the statement that creates the flow's publication.
func (f *Flow) publicationSQL() string {
	if len(f.Cfg.Source.Schemas) > 0 {
		return f.schemasPublicationSQL()
	}
	return relay.CreatePublicationSQL(f.Cfg.Source.Publication, f.Tables())
}

// needs15 refuses source.schemas on a server without
// FOR TABLES IN SCHEMA.
func (f *Flow) needs15(ctx context.Context, conn *pgx.Conn) error {
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		return fmt.Errorf("flow %s: read the source's version: %w", f.Cfg.Flow, err)
	}
	if num < 150000 {
		return fmt.Errorf("flow %s: source.schemas needs PostgreSQL 15 or later (FOR TABLES IN SCHEMA); the source is version %d. "+
			"Fix: list the tables in source.tables instead of source.schemas in %s", f.Cfg.Flow, num, f.ConfigPath)
	}
	return nil
}

// missingSchemas says which listed schemas an existing publication does
// not publish whole (problem, "" when none) and the command that adds them.
func (f *Flow) missingSchemas(ctx context.Context, conn *pgx.Conn) (problem, fix string, err error) {
	src := f.Cfg.Source
	rows, err := conn.Query(ctx, `SELECT n.nspname::text FROM pg_publication_namespace pn
		JOIN pg_publication p ON p.oid = pn.pnpubid JOIN pg_namespace n ON n.oid = pn.pnnspid WHERE p.pubname = $1`, src.Publication)
	if err != nil {
		return "", "", fmt.Errorf("flow %s: read the schemas of publication %s: %w", f.Cfg.Flow, src.Publication, err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", "", fmt.Errorf("flow %s: read the schemas of publication %s: %w", f.Cfg.Flow, src.Publication, err)
	}
	var missing, quoted []string
	for _, s := range src.Schemas {
		if !slices.Contains(have, s) {
			missing = append(missing, config.QuoteIdent(s))
			quoted = append(quoted, pgx.Identifier{s}.Sanitize())
		}
	}
	if len(missing) == 0 {
		return "", "", nil
	}
	return fmt.Sprintf("publication %s does not publish schema %s whole, and source.schemas captures it; "+
			"a table created there later would never reach the stream", src.Publication, strings.Join(missing, ", ")),
		fmt.Sprintf("ALTER PUBLICATION %s ADD TABLES IN SCHEMA %s", pgx.Identifier{src.Publication}.Sanitize(), strings.Join(quoted, ", ")), nil
}

// ensurePublication creates the flow's publication unless it exists; an
// existing one must publish every listed schema whole and every table
// (it is reported with the ALTER PUBLICATION to run, not altered).
func (f *Flow) ensurePublication(ctx context.Context, conn *pgx.Conn) error {
	src := f.Cfg.Source
	if len(src.Schemas) == 0 {
		_, err := relay.EnsurePublication(ctx, conn, src.Publication, f.Tables())
		return err
	}
	if err := f.needs15(ctx, conn); err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, src.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("flow %s: look up publication %s: %w", f.Cfg.Flow, src.Publication, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, f.schemasPublicationSQL()); err != nil {
			return fmt.Errorf("flow %s: create publication %s: %w", f.Cfg.Flow, src.Publication, err)
		}
		return nil
	}
	problem, fix, err := f.missingSchemas(ctx, conn)
	if err != nil {
		return err
	}
	if problem != "" {
		return fmt.Errorf("flow %s: %s; nothing was created on the source. Fix on the source: %s, then run again", f.Cfg.Flow, problem, fix)
	}
	_, err = relay.EnsurePublication(ctx, conn, src.Publication, f.Tables())
	return err
}

// admitsTable reports whether relation, new to the flow, may join it
// (add_table): only under unknown_table_policy: allow_compatible, in a
// schema of source.schemas.
func (f *Flow) admitsTable(relation string) bool {
	if f.Cfg.Schema.UnknownTablePolicy != config.PolicyAllowCompatible {
		return false
	}
	t, err := config.ParseTableName(relation)
	return err == nil && f.captures(t.Schema)
}

// streamHorizonPath holds a whole-schema flow's stream horizon: the xmax
// (xid8) of the snapshot its initial copy read. Every transaction whose
// xid is at or past it began after that snapshot, so it commits after the
// slot's consistent point and the stream carries it whole.
func (f *Flow) streamHorizonPath() string { return filepath.Join(f.dir, "stream-horizon") }

// recordStreamHorizon reads the stream horizon of the snapshot the slot
// exported (its xmax, in a transaction importing that snapshot, as the
// copy's own transaction does) and keeps it durably. Only a whole-schema
// flow (PostgreSQL 15+) reads it, so only such a flow records it.
func (f *Flow) recordStreamHorizon(ctx context.Context, conn *pgx.Conn, snapshot string) error {
	if len(f.Cfg.Source.Schemas) == 0 {
		return nil
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("flow %s: read the stream horizon: %w", f.Cfg.Flow, err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshot, "'", "''")+"'"); err != nil {
		return fmt.Errorf("flow %s: read the stream horizon: import snapshot %s: %w", f.Cfg.Flow, snapshot, err)
	}
	var h string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&h); err != nil {
		return fmt.Errorf("flow %s: read the stream horizon of snapshot %s: %w", f.Cfg.Flow, snapshot, err)
	}
	if _, err := strconv.ParseUint(h, 10, 64); err != nil {
		return fmt.Errorf("flow %s: stream horizon %q of snapshot %s: %w", f.Cfg.Flow, h, snapshot, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("flow %s: read the stream horizon: %w", f.Cfg.Flow, err)
	}
	return capture.WriteFileDurable(f.streamHorizonPath(), []byte(h+"\n"))
}

// streamHorizon is the recorded stream horizon; ok is false for a flow
// whose snapshot an earlier version took (no file).
func (f *Flow) streamHorizon() (h uint64, ok bool, err error) {
	b, err := os.ReadFile(f.streamHorizonPath())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("flow %s: read the stream horizon: %w", f.Cfg.Flow, err)
	}
	h, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("flow %s: stream horizon %s: %w; recover: %s", f.Cfg.Flow, f.streamHorizonPath(), err, f.resnapshot())
	}
	return h, true, nil
}

// widenXid places a 32-bit xid read from the catalog in the 64-bit xid
// space (xid8) of next, the source's next xid: the latest value at or
// before next with the same low 32 bits. It is exact while xid is less
// than 2^32 transactions behind next. A catalog row's raw xmin stays as
// written after freezing, so an older one would alias; that needs a
// table untouched and unwritten for over four billion transactions, far
// past autovacuum's anti-wraparound limits, and is not a concern here.
func widenXid(xid uint32, next uint64) uint64 {
	w := next&^0xffffffff | uint64(xid)
	if w > next {
		if next < 1<<32 {
			return 0 // no earlier epoch: older than anything
		}
		w -= 1 << 32
	}
	return w
}

// newTableFacts answers capture's question about a table new to the flow
// (capture.AssemblerOptions.NewTable): the xid C that created it (the
// pg_attribute rows of its system columns are written by CREATE TABLE
// alone, where its pg_class row changes with every ALTER and SET SCHEMA),
// whether the stream carried it whole when C is earlier than the
// transaction that first writes it (newTableCatalog.notCarried), and its source
// definition for the target. It refuses a table that is not as CREATE
// TABLE made it in ways that can hide rows from the stream (moved or
// renamed in the creating transaction, rewritten since), a table the
// identity gate refuses (the rule every table of the flow passes) and a
// definition that no longer has the stream's columns.
func (f *Flow) newTableFacts(ctx context.Context, src *pgx.Conn, oid uint32, live schemachange.Shape) (capture.NewTableFacts, error) {
	var out capture.NewTableFacts
	var c newTableCatalog
	err := src.QueryRow(ctx, `SELECT a.xmin::text, c.xmin::text, c.relkind::text, c.relfilenode = c.oid,
			t.xmin = a.xmin AND t.cmin = a.cmin,
			(SELECT pn.xmin::text FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid
				WHERE p.pubname = $2 AND pn.pnnspid = c.relnamespace),
			pg_snapshot_xmax(pg_current_snapshot())::text
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = -1 JOIN pg_type t ON t.oid = c.reltype
		WHERE c.oid = $1`, oid, f.Cfg.Source.Publication).
		Scan(&c.created, &c.classXmin, &c.relkind, &c.neverRewritten, &c.rowTypeAsCreated, &c.published, &c.next)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil // gone already: blocks, and the plan names the recovery
	}
	if err != nil {
		return out, err
	}
	created, err := strconv.ParseUint(c.created, 10, 32)
	if err != nil {
		return out, fmt.Errorf("creating xid %q of relation oid %d: %w", c.created, oid, err)
	}
	out.CreatedXid = uint32(created)
	h, ok, err := f.streamHorizon()
	if err != nil {
		return out, err
	}
	if out.NotCarried, err = c.notCarried(h, ok); err != nil {
		return out, fmt.Errorf("relation oid %d: %w", oid, err)
	}
	out.EarlierCarried = out.NotCarried == ""
	switch {
	case !c.rowTypeAsCreated:
		out.Refused = "the table was moved into its schema or renamed by the transaction that created it, " +
			"so it may hold rows the stream never carried"
		return out, nil
	case !c.neverRewritten:
		out.Refused = "the table was rewritten since its creation (ALTER TABLE … SET LOGGED, TRUNCATE, a column type change), " +
			"so it may hold rows the stream never carried"
		return out, nil
	}
	t, err := config.ParseTableName(live.Relation)
	if err != nil {
		return out, err
	}
	defs, err := pgcatalog.ReadTables(ctx, src, []config.TableName{t})
	if err != nil {
		return out, err
	}
	if e := defs[0].IdentityGate(); e != nil {
		out.Refused = fmt.Sprintf("the table %s, so its updates and deletes cannot reach the target; fix on the source: %s", e.Problem, e.Fix)
		return out, nil
	}
	var cols []string
	for _, c := range defs[0].Columns {
		if c.Generated == "" {
			cols = append(cols, c.Name)
		}
	}
	var want []string
	for _, c := range live.Columns {
		want = append(want, c.Name)
	}
	if !slices.Equal(cols, want) {
		// Changed again since the transaction being read: the definition
		// would not fit its rows.
		out.Refused = fmt.Sprintf("the table's definition changed after the transaction being read (columns now %s, then %s)",
			strings.Join(cols, ", "), strings.Join(want, ", "))
		return out, nil
	}
	out.Definition, err = apply.AddTableDetail(defs[0])
	return out, err
}

// newTableCatalog is what the source catalog says about a table new to
// the flow, as newTableFacts reads it.
type newTableCatalog struct {
	created, classXmin string  // the xmin of its system columns' pg_attribute rows (its creation) and of its pg_class row
	relkind            string  // 'r' plain, 'p' partitioned
	neverRewritten     bool    // relfilenode = oid: no rewrite since CREATE TABLE
	rowTypeAsCreated   bool    // its row type's pg_type row is the one CREATE TABLE wrote (same xmin and command)
	published          *string // the xmin of the flow's publication's pg_publication_namespace row for its schema
	next               string  // the source's next xid (xid8)
}

// notCarried says which condition fails for a table created by an earlier
// transaction than the one that first writes it ("" when all hold, so the
// stream carried every row it ever held), against horizon h (ok false:
// none recorded):
//
//	(a) it was created at or after the flow's stream horizon: its
//	    creation, so every write to it, commits after the slot's
//	    consistent point;
//	(b) its pg_class row is still the one its creating transaction
//	    wrote (SET SCHEMA, RENAME, a later index or ALTER all write a new
//	    one: conservatively, any of them blocks);
//	(c) its schema's row in the flow's publication is older than its
//	    creation, so every transaction that wrote it was decoded with the
//	    schema published;
//
// and it is a plain table (a partitioned table's partitions may have been
// attached with rows). The 32-bit xids are widened against the source's
// next xid (widenXid) and compared as xid8. (c) orders transactions by
// their xids, which is the order they began: an ALTER PUBLICATION … ADD
// TABLES IN SCHEMA that began before the table's creation and stayed open
// across it and its first writes would pass.
func (c newTableCatalog) notCarried(h uint64, ok bool) (string, error) {
	next, err := strconv.ParseUint(c.next, 10, 64)
	if err != nil {
		return "", fmt.Errorf("next xid %q: %w", c.next, err)
	}
	created, err := strconv.ParseUint(c.created, 10, 32)
	if err != nil {
		return "", fmt.Errorf("creating xid %q: %w", c.created, err)
	}
	created8 := widenXid(uint32(created), next)
	switch {
	case !ok:
		return "the flow's state records no stream horizon (its snapshot was taken by an earlier version), " +
			"so nothing proves the table was created after the stream began", nil
	case created8 < h:
		return fmt.Sprintf("(a) it was created before the flow's stream horizon (xid %d < %d)", created8, h), nil
	case c.classXmin != c.created:
		return fmt.Sprintf("(b) its pg_class row was rewritten after its creation by xid %s (moved into the schema with SET SCHEMA, "+
			"renamed, indexed or altered)", c.classXmin), nil
	case c.published == nil:
		return "(c) its schema is not in the flow's publication", nil
	}
	pub, err := strconv.ParseUint(*c.published, 10, 32)
	if err != nil {
		return "", fmt.Errorf("publication schema xid %q: %w", *c.published, err)
	}
	switch {
	case widenXid(uint32(pub), next) >= created8:
		return fmt.Sprintf("(c) its schema joined the publication (xid %s) after the table was created", *c.published), nil
	case c.relkind != "r":
		return "it is a partitioned table, whose partitions may have been attached holding rows", nil
	}
	return "", nil
}
