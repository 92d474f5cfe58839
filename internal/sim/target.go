package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/mutation"
	"github.com/trellara/trellara/schemachange"
)

// The simulated target: a small transactional database the real applier
// (apply.NewWithTarget) writes to. A transaction's changes live in an
// overlay that only Commit folds into the committed state, so a reader —
// the checker, after every commit — sees whole transactions or nothing;
// Rollback or a lost connection discards the overlay. It enforces the
// tables' keys and two target-only constraints that make some source rows
// incompatible: orders.status may not start with "incompatible-" (a CHECK
// constraint, SQLSTATE 23514) and accounts.note is varchar(40) (22001).
// An UPDATE or DELETE that matches no row is refused like the PostgreSQL
// target refuses it. The target's columns are the pinned shape: a column
// the source added is unknown here (42703).

// errConnLost is what every call returns once the harness has killed the
// applier's connection; the applier classifies it as transient.
var errConnLost = errors.New("sim: connection to the target lost")

// simDB is the target server.
type simDB struct {
	data       *state
	checkpoint apply.Checkpoint
	hasCP      bool
	progress   map[string]apply.SnapshotProgress
	quarantine []*quarRow
	// allowed holds values the operator made acceptable (a widened
	// column, a relaxed constraint) while repairing a quarantined unit.
	allowed  map[string]bool
	lockedBy *simConn
	clock    func() time.Time
	// point is the harness's fault hook: the action to take at op.
	point func(op string) string
	// onCommit runs after every commit and every lost connection: the
	// checker reads committed state.
	onCommit func()
	commits  int
	// defs are the target's tables as committed DDL left them: target DDL
	// is transactional, so a transaction's changes land only at its
	// commit.
	defs     map[string]*tableDef
	barriers int // committed transactions that ran a DDL barrier
	// reseeds are the reseeds recorded on the target, by table.
	reseeds map[string]*simReseed
	// wrongShape, when set, hears of every row the target refused because
	// of its shape (a column it does not have, a value its column type
	// cannot hold): the checker counts it as applied under the wrong shape.
	wrongShape func(detail string)
	// ddlApart is the DDLApart mutation: target DDL commits at once.
	ddlApart bool
	// detect, when set, hears of what the target observed (the harness's
	// detections).
	detect func(what string)
}

// simReseed is a reseed that took over a blocked schema change of its
// table (apply/reseed.go): from its barrier on the table's rows go to the
// shadow table only, until the handoff replaces the table.
type simReseed struct {
	active    bool // its barrier committed
	handedOff bool
	shadowed  int // rows written to the shadow table
}

type quarRow struct {
	id       int64
	rec      apply.QuarantineRecord
	attempts int
	replayed bool
}

func newSimDB(clock func() time.Time) *simDB {
	db := &simDB{progress: map[string]apply.SnapshotProgress{}, allowed: map[string]bool{}, clock: clock,
		reseeds: map[string]*simReseed{}}
	db.useTables(simTables)
	return db
}

// useTables starts the target empty with the tables defs.
func (db *simDB) useTables(defs []*tableDef) {
	db.data = newStateOf(defs)
	db.defs = map[string]*tableDef{}
	for _, d := range defs {
		db.defs[d.name] = d
	}
}

// recordReseed records a reseed of table that replaces it (reseed
// --table T on a blocked change).
func (db *simDB) recordReseed(table string) {
	if db.reseeds[table] == nil {
		db.reseeds[table] = &simReseed{}
	}
}

// reseeding reports whether a reseed of table is active (past its
// barrier) and not handed off.
func (db *simDB) reseeding(table string) bool {
	rs := db.reseeds[table]
	return rs != nil && rs.active && !rs.handedOff
}

func (db *simDB) handedOff(table string) bool {
	rs := db.reseeds[table]
	return rs != nil && rs.handedOff
}

// handoff is the reseed's handoff transaction: the table becomes def with
// rows (the reseed's copy); a reader sees the old table or the new one.
func (db *simDB) handoff(def *tableDef, rows map[string][]val) {
	db.data.truncate(def.name)
	for _, r := range rows {
		r := slices.Clone(r)
		db.data.put(def.name, keyOf(def, r), r)
	}
	db.defs[def.name] = def
	db.reseeds[def.name].handedOff = true
	db.commits++
	if db.onCommit != nil {
		db.onCommit()
	}
}

// connect opens a session for one applier.
func (db *simDB) connect() *simConn { return &simConn{db: db} }

// openQuarantine lists the keys of open quarantine rows.
func (db *simDB) openQuarantine() []string {
	var out []string
	for _, q := range db.quarantine {
		if !q.replayed {
			out = append(out, q.rec.Key)
		}
	}
	return out
}

// snapshotsDone reports whether every relation with snapshot progress has
// completed its copy: before that the copied tables are not ready to read.
func (db *simDB) snapshotsDone(want int) bool {
	n := 0
	for _, p := range db.progress {
		if !p.Done {
			return false
		}
		n++
	}
	return n >= want
}

// simConn is one applier's connection: an apply.Target.
type simConn struct {
	db   *simDB
	dead bool
	tx   *simTx
	// mutations are the protections the applier on this connection runs
	// without (Options.Mutations.Apply).
	mutations mutation.Set
}

var (
	_ apply.Target     = (*simConn)(nil)
	_ mutation.Carrier = (*simConn)(nil)
)

// ApplierMutations implements mutation.Carrier.
func (c *simConn) ApplierMutations() mutation.Set { return c.mutations }

// kill ends the connection: its open transaction rolls back and its lock
// goes, as when the server notices the client died.
func (c *simConn) kill() {
	c.dead = true
	c.tx = nil
	if c.db.lockedBy == c {
		c.db.lockedBy = nil
	}
	// A reader may look now too: what committed is all it sees.
	if c.db.onCommit != nil {
		c.db.onCommit()
	}
}

// op runs the fault hook for op; "crash" kills the connection first.
func (c *simConn) op(op string) error {
	if c.dead {
		return errConnLost
	}
	if c.db.point != nil && c.db.point("target."+op) == actCrash {
		c.kill()
		return errConnLost
	}
	return nil
}

// Start implements apply.Target.
func (c *simConn) Start(context.Context) (apply.State, error) {
	if err := c.op("start"); err != nil {
		return apply.State{}, err
	}
	db := c.db
	if db.lockedBy != nil && db.lockedBy != c && !db.lockedBy.dead {
		return apply.State{}, apply.ErrBusy
	}
	db.lockedBy = c
	st := apply.State{Checkpoint: db.checkpoint, Snapshots: map[string]apply.SnapshotProgress{}, OpenQuarantine: map[string]int64{}}
	for k, v := range db.progress {
		st.Snapshots[k] = v
	}
	for _, q := range db.quarantine {
		if !q.replayed {
			st.OpenQuarantine[q.rec.Key] = q.id
		}
	}
	return st, nil
}

// Stop implements apply.Target.
func (c *simConn) Stop(context.Context) {
	if c.db.lockedBy == c {
		c.db.lockedBy = nil
	}
}

// Quarantine implements apply.Target.
func (c *simConn) Quarantine(_ context.Context, q apply.QuarantineRecord) (int64, error) {
	if err := c.op("quarantine"); err != nil {
		return 0, err
	}
	db := c.db
	for _, r := range db.quarantine {
		if !r.replayed && r.rec.Key == q.Key {
			r.rec, r.attempts = q, r.attempts+1
			return r.id, nil
		}
	}
	r := &quarRow{id: int64(len(db.quarantine) + 1), rec: q, attempts: 1}
	db.quarantine = append(db.quarantine, r)
	return r.id, nil
}

// CountSkipped implements apply.Target.
func (c *simConn) CountSkipped(_ context.Context, n int64) error {
	if err := c.op("skip"); err != nil {
		return err
	}
	c.db.checkpoint.TxnsSkipped += n
	return nil
}

// Begin implements apply.Target.
func (c *simConn) Begin(context.Context) (apply.TargetTx, error) {
	if err := c.op("begin"); err != nil {
		return nil, err
	}
	cp := c.db.checkpoint
	c.tx = &simTx{c: c, tables: map[string]*overlay{}, checkpoint: cp, progress: map[string]apply.SnapshotProgress{}}
	return c.tx, nil
}

// overlay is one table's uncommitted changes.
type overlay struct {
	truncated bool
	rows      map[string][]val // nil value: deleted
	keyless   int64            // rows inserted into a table without a key
	order     []string         // keys in first-write order, for a deterministic commit
}

// simTx is an open transaction.
type simTx struct {
	c          *simConn
	tables     map[string]*overlay
	checkpoint apply.Checkpoint
	progress   map[string]apply.SnapshotProgress
	replayed   []int64
	done       bool
	chunked    bool                 // holds a chunk sequence
	defs       map[string]*tableDef // tables this transaction's DDL changed
	barrier    bool                 // ran a DDL barrier
	reseeding  map[string]bool      // reseeds whose barrier this transaction carries
}

func (x *simTx) live() error {
	if x.done || x.c.tx != x {
		return errConnLost
	}
	return nil
}

func (x *simTx) ov(table string) *overlay {
	o := x.tables[table]
	if o == nil {
		o = &overlay{rows: map[string][]val{}}
		x.tables[table] = o
	}
	return o
}

// get reads key as this transaction sees it.
func (x *simTx) get(table, key string) ([]val, bool) {
	if o := x.tables[table]; o != nil {
		if r, ok := o.rows[key]; ok {
			return r, r != nil
		}
		if o.truncated {
			return nil, false
		}
	}
	r, ok := x.c.db.data.tables[table].rows[key]
	return r, ok
}

func (x *simTx) set(table, key string, row []val) {
	o := x.ov(table)
	if _, ok := o.rows[key]; !ok {
		o.order = append(o.order, key)
	}
	o.rows[key] = row
}

func pgErr(code, msg string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: msg}
}

// table is name as this transaction sees it: as committed DDL left it,
// or as this transaction's DDL did.
func (x *simTx) table(name string) *tableDef {
	if d := x.defs[name]; d != nil {
		return d
	}
	return x.c.db.defs[name]
}

// shadowed reports whether name's rows go to a reseed's shadow table.
func (x *simTx) shadowed(name string) bool {
	return x.reseeding[name] || x.c.db.reseeding(name)
}

// ddl runs a DDL barrier in the transaction: for a change that flows (a
// compatible one, a mapped rename) the statement Trellara runs
// (schemachange.Statement, as the applier builds it), executed by the
// simulated target; for a blocked change a reseed took over
// (capture.ReseedKind), the reseed recorded on the target starts taking
// the table's rows.
func (x *simTx) ddl(unit int, env *pb.Envelope) error {
	x.barrier = true
	for _, d := range env.DdlEvents {
		if d.Kind == capture.ReseedKind {
			if x.c.db.reseeds[d.Relation] == nil {
				return fmt.Errorf("apply: DDL barrier at commit LSN %s: a reseed of %s took over its schema change, but no reseed of it is recorded on this target",
					envelope.FormatLSN(env.CommitLsn), d.Relation)
			}
			if x.reseeding == nil {
				x.reseeding = map[string]bool{}
			}
			x.reseeding[d.Relation] = true
			continue
		}
		if d.Column == "" {
			continue
		}
		def := x.table(d.Relation)
		stmt := ""
		if def != nil {
			stmt = schemachange.Statement(quotedName(def), schemachange.Kind(d.Kind), d.OldColumn, d.Column, d.ColumnType)
		}
		if err := x.exec(stmt); err != nil {
			return &apply.Refusal{Unit: unit, Relation: d.Relation, SQLState: err.(*pgconn.PgError).Code, Err: err}
		}
	}
	// Between the target DDL and the unit's rows.
	return x.c.op("after-ddl")
}

// exec runs one of the statements schemachange.Statement writes, and
// refuses (0A000) any other text:
//
//	ALTER TABLE t ADD COLUMN IF NOT EXISTS c type
//	ALTER TABLE t ALTER COLUMN c TYPE type
//	DO $tag$ BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE
//	  attrelid = 't'::regclass AND attname = 'old' AND attnum > 0 AND
//	  NOT attisdropped) THEN ALTER TABLE t RENAME COLUMN "old" TO "new";
//	  END IF; END $tag$
//
// with t and the columns quoted identifiers, as Statement writes them. The
// rename renames only while the old column is there: run again after it,
// it changes nothing; on a table that has both names it fails (42701) as
// PostgreSQL's ALTER does.
func (x *simTx) exec(stmt string) error {
	unsupported := pgErr("0A000", fmt.Sprintf("the simulated target cannot run %q", stmt))
	if strings.HasPrefix(stmt, "DO ") {
		return x.execRename(stmt, unsupported)
	}
	p := &sqlText{s: stmt}
	p.word("ALTER TABLE ")
	name := p.table()
	var column string
	add := false
	switch {
	case p.cut(" ADD COLUMN IF NOT EXISTS "):
		add = true
		column = p.ident()
		p.word(" ")
	case p.cut(" ALTER COLUMN "):
		column = p.ident()
		p.word(" TYPE ")
	default:
		return unsupported
	}
	typ := p.rest()
	oid, mod, ok := typeOf(typ)
	def := x.table(name)
	if p.bad || !ok || def == nil {
		return unsupported
	}
	nd := &tableDef{name: def.name, oid: def.oid, cols: slices.Clone(def.cols)}
	i := nd.col(column)
	switch {
	case add && i >= 0: // IF NOT EXISTS
		return nil
	case add:
		nd.cols = append(nd.cols, colDef{name: column, typeOID: oid, mod: mod})
	case i < 0:
		return pgErr("42703", fmt.Sprintf("column %q of relation %q does not exist", column, name))
	default:
		nd.cols[i].typeOID, nd.cols[i].mod = oid, mod
		// Every value already there must fit the new type.
		for _, r := range x.c.db.data.tables[name].rows {
			if i < len(r) {
				if err := fits(nd.cols[i], r[i]); err != nil {
					return err
				}
			}
		}
	}
	x.alter(nd)
	return nil
}

// execRename runs the DO block of a rename (exec).
func (x *simTx) execRename(stmt string, unsupported error) error {
	rest, _ := strings.CutPrefix(stmt, "DO $")
	tagName, rest, ok := strings.Cut(rest, "$ ")
	digits, isTrellara := strings.CutPrefix(tagName, "trellara")
	if !ok || !isTrellara || strings.Trim(digits, "0123456789") != "" {
		return unsupported
	}
	tag := "$" + tagName + "$"
	body, ok := strings.CutSuffix(rest, " "+tag)
	if !ok || strings.Contains(body, tag) {
		return unsupported
	}
	p := &sqlText{s: body}
	p.word("BEGIN IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = ")
	reg := &sqlText{s: p.literal()}
	p.word("::regclass AND attname = ")
	attname := p.literal()
	p.word(" AND attnum > 0 AND NOT attisdropped) THEN ALTER TABLE ")
	name := p.table()
	p.word(" RENAME COLUMN ")
	from := p.ident()
	p.word(" TO ")
	to := p.ident()
	p.word("; END IF; END")
	// The guard must ask about the very table and column the ALTER
	// renames.
	if regName := reg.table(); !p.done() || !reg.done() || regName != name || attname != from {
		return unsupported
	}
	def := x.table(name)
	if def == nil {
		return pgErr("42P01", fmt.Sprintf("relation %q does not exist", name))
	}
	i := def.col(from)
	switch {
	case i < 0: // renamed already: nothing to do
		if x.c.db.detect != nil {
			x.c.db.detect("rename-again")
		}
		return nil
	case def.col(to) >= 0:
		return pgErr("42701", fmt.Sprintf("column %q of relation %q already exists", to, def.rel()))
	}
	nd := &tableDef{name: def.name, oid: def.oid, cols: slices.Clone(def.cols)}
	nd.cols[i].name = to
	x.alter(nd)
	return nil
}

// alter makes nd the table as this transaction sees it; with the
// DDLApart mutation the change commits at once, apart from the rest of
// the transaction.
func (x *simTx) alter(nd *tableDef) {
	if x.defs == nil {
		x.defs = map[string]*tableDef{}
	}
	x.defs[nd.name] = nd
	if db := x.c.db; db.ddlApart {
		db.defs[nd.name] = nd
		db.commits++
		if db.onCommit != nil {
			db.onCommit()
		}
	}
}

// sqlText reads a statement's text piece by piece: any piece that is not
// there marks it bad.
type sqlText struct {
	s   string
	bad bool
}

// cut consumes prefix if the text starts with it.
func (p *sqlText) cut(prefix string) bool {
	if p.bad {
		return false
	}
	r, ok := strings.CutPrefix(p.s, prefix)
	if ok {
		p.s = r
	}
	return ok
}

// word consumes w, which must come next.
func (p *sqlText) word(w string) {
	if !p.cut(w) {
		p.bad = true
	}
}

// quoted consumes text between q and q, a doubled q standing for one.
func (p *sqlText) quoted(q byte) string {
	if p.bad || len(p.s) == 0 || p.s[0] != q {
		p.bad = true
		return ""
	}
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		if p.s[i] != q {
			b.WriteByte(p.s[i])
			continue
		}
		if i+1 < len(p.s) && p.s[i+1] == q {
			b.WriteByte(q)
			i++
			continue
		}
		p.s = p.s[i+1:]
		return b.String()
	}
	p.bad = true
	return ""
}

// ident consumes a quoted identifier.
func (p *sqlText) ident() string { return p.quoted('"') }

// literal consumes a string literal.
func (p *sqlText) literal() string { return p.quoted('\'') }

// table consumes a schema-qualified table name, "schema"."name", and
// returns it as schema.name.
func (p *sqlText) table() string {
	schema := p.ident()
	p.word(".")
	return schema + "." + p.ident()
}

// rest consumes what is left.
func (p *sqlText) rest() string {
	r := p.s
	p.s = ""
	return r
}

// done reports whether the whole text was read as expected.
func (p *sqlText) done() bool { return !p.bad && p.s == "" }

// fits checks a value against its column's type: integer ranges and
// varchar lengths.
func fits(c colDef, v val) error {
	if v.null {
		return nil
	}
	var lo, hi int64
	switch c.typeOID {
	case 21:
		lo, hi = -1<<15, 1<<15-1
	case 23:
		lo, hi = -1<<31, 1<<31-1
	case 1043:
		if n := int(c.typmod()) - 4; c.typmod() >= 0 && len(v.s) > n {
			return pgErr("22001", fmt.Sprintf("value too long for type character varying(%d)", n))
		}
		return nil
	default:
		return nil
	}
	if n, err := strconv.ParseInt(v.s, 10, 64); err != nil || n < lo || n > hi {
		return pgErr("22003", fmt.Sprintf("value %q is out of range for type %s", v.s, schemachange.TypeName(c.typeOID, -1)))
	}
	return nil
}

// target maps a source relation to a target table and its column
// positions.
func (x *simTx) target(rel *pb.Relation) (*tableDef, []int, error) {
	name := rel.Schema + "." + rel.Name
	def := x.table(name)
	if def == nil {
		return nil, nil, pgErr("42P01", fmt.Sprintf("relation %q does not exist", name))
	}
	pos := make([]int, len(rel.Columns))
	for i, c := range rel.Columns {
		pos[i] = slices.IndexFunc(def.cols, func(d colDef) bool { return d.name == c.Name })
		if pos[i] < 0 {
			err := pgErr("42703", fmt.Sprintf("column %q of relation %q does not exist", c.Name, name))
			x.c.db.refusedShape(err)
			return nil, nil, err
		}
	}
	return def, pos, nil
}

// refusedShape reports a row refused for the target's shape.
func (db *simDB) refusedShape(err error) {
	if db.wrongShape != nil {
		db.wrongShape(err.Error())
	}
}

// check enforces the column types and the target-only constraints.
func (x *simTx) check(def *tableDef, row []val) error {
	for i, c := range def.cols {
		if i < len(row) {
			if err := fits(c, row[i]); err != nil {
				x.c.db.refusedShape(fmt.Errorf("%s.%s: %w", def.name, c.name, err))
				return err
			}
		}
	}
	allowed := x.c.db.allowed
	switch def.name {
	case tOrders.name:
		if s := row[1].s; strings.HasPrefix(s, "incompatible-") && !allowed[s] {
			return pgErr("23514", `new row for relation "orders" violates check constraint "orders_status_check"`)
		}
	case tAccounts.name:
		if i := def.col("note"); i >= 0 && def.cols[i].typeOID == 25 && len(row[i].s) > 40 && !allowed[row[i].s] {
			return pgErr("22001", "value too long for type character varying(40)")
		}
	}
	return nil
}

func toVal(v *pb.Value) val {
	if v.GetKind() == pb.ValueKind_VALUE_KIND_NULL {
		return val{null: true}
	}
	return val{s: string(v.GetData())}
}

// Apply implements apply.TargetTx.
func (x *simTx) Apply(_ context.Context, unit int, env *pb.Envelope) (int, int, error) {
	if err := x.live(); err != nil {
		return 0, 0, err
	}
	op := "apply"
	if b := env.GetBoundary(); b.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK {
		x.chunked = true
		if b.GetChunkIndex() > 0 {
			op = "apply-chunk"
		}
	}
	if err := x.c.op(op); err != nil {
		return 0, 0, err
	}
	if len(env.DdlEvents) > 0 {
		if err := x.ddl(unit, env); err != nil {
			return 0, 0, err
		}
	}
	rows, msgs := 0, 0
	for _, r := range env.Rows {
		if r.Op == pb.Op_OP_MESSAGE {
			msgs++
			continue
		}
		rel := env.Relations[r.RelationIndex]
		relName := rel.Schema + "." + rel.Name
		if x.shadowed(relName) {
			// A reseed took over this table's blocked change: its rows go
			// to the shadow table, which the handoff puts in place.
			x.c.db.reseeds[relName].shadowed++
			rows++
			continue
		}
		def, pos, err := x.target(rel)
		if err != nil {
			return 0, 0, &apply.Refusal{Unit: unit, Relation: relName, SQLState: err.(*pgconn.PgError).Code, Err: err}
		}
		refuse := func(err error) (int, int, error) {
			code := ""
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				code = pe.Code
			}
			return 0, 0, &apply.Refusal{Unit: unit, Relation: relName, SQLState: code, Err: err}
		}
		switch r.Op {
		case pb.Op_OP_TRUNCATE:
			o := x.ov(def.name)
			o.truncated, o.rows, o.order = true, map[string][]val{}, nil
			continue
		case pb.Op_OP_INSERT:
			row := make([]val, len(def.cols))
			for i := range row {
				row[i] = val{null: true}
			}
			for i, v := range r.NewTuple {
				row[pos[i]] = toVal(v)
			}
			if err := x.check(def, row); err != nil {
				return refuse(err)
			}
			key := keyOf(def, row)
			if !def.keyed() {
				o := x.ov(def.name)
				o.keyless++
				base := x.c.db.data.tables[def.name].rowID
				key = "#" + strconv.FormatInt(base+o.keyless, 10)
			} else if _, ok := x.get(def.name, key); ok {
				return refuse(pgErr("23505", fmt.Sprintf("duplicate key value violates unique constraint \"%s_pkey\"", def.rel())))
			}
			x.set(def.name, key, row)
		case pb.Op_OP_UPDATE, pb.Op_OP_DELETE:
			from := r.NewTuple
			if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
				from = r.OldTuple
			}
			keyRow := make([]val, len(def.cols))
			for i, v := range from {
				keyRow[pos[i]] = toVal(v)
			}
			key := keyOf(def, keyRow)
			old, ok := x.get(def.name, key)
			if !ok {
				return refuse(fmt.Errorf("%s matched 0 target rows where exactly 1 was expected: the target has diverged from the source for this row", r.Op))
			}
			if r.Op == pb.Op_OP_DELETE {
				x.set(def.name, key, nil)
				break
			}
			row := slices.Clone(old)
			for len(row) < len(def.cols) { // written before a column was added
				row = append(row, val{null: true})
			}
			for i, v := range r.NewTuple {
				if v.GetKind() != pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
					row[pos[i]] = toVal(v)
				}
			}
			if err := x.check(def, row); err != nil {
				return refuse(err)
			}
			if nk := keyOf(def, row); nk != key {
				x.set(def.name, key, nil)
				key = nk
			}
			x.set(def.name, key, row)
		}
		rows++
	}
	return rows, msgs, nil
}

// Copy implements apply.TargetTx.
func (x *simTx) Copy(ctx context.Context, unit int, env *pb.Envelope) error {
	_, _, err := x.Apply(ctx, unit, env)
	return err
}

// SetProgress implements apply.TargetTx.
func (x *simTx) SetProgress(_ context.Context, p apply.SnapshotProgress) error {
	if err := x.live(); err != nil {
		return err
	}
	x.progress[p.Relation] = p
	return nil
}

// SetCheckpoint implements apply.TargetTx.
func (x *simTx) SetCheckpoint(_ context.Context, u apply.CheckpointUpdate) error {
	if err := x.live(); err != nil {
		return err
	}
	cp := &x.checkpoint
	if u.MovesPosition {
		if u.MovesLSN {
			cp.CommitLSN, cp.EndLSN = u.CommitLSN, u.EndLSN
		}
		cp.Offset, cp.HasOffset = u.Offset, true
	}
	cp.TxnsApplied += u.TxnsApplied
	cp.TxnsSkipped += u.TxnsSkipped
	cp.RowsApplied += u.RowsApplied
	return nil
}

// MarkReplayed implements apply.TargetTx.
func (x *simTx) MarkReplayed(_ context.Context, id int64) error {
	if err := x.live(); err != nil {
		return err
	}
	x.replayed = append(x.replayed, id)
	return nil
}

// Flush implements apply.TargetTx: this target checks every row at once.
func (x *simTx) Flush(context.Context) error { return x.live() }

// Commit implements apply.TargetTx. Fault actions: actCrash loses the
// connection before the commit (nothing committed), actCrashAfter commits
// and then loses the connection before the reply (committed, but the
// applier sees an error).
func (x *simTx) Commit(context.Context) (time.Time, error) {
	if err := x.live(); err != nil {
		return time.Time{}, err
	}
	c := x.c
	act := ""
	if c.db.point != nil {
		act = c.db.point("target.commit")
		if x.chunked {
			if a := c.db.point("target.commit-chunked"); a != "" {
				act = a
			}
		}
		if x.barrier {
			if a := c.db.point("target.commit-barrier"); a != "" {
				act = a
			}
		}
	}
	if act == actCrash {
		c.kill()
		return time.Time{}, errConnLost
	}
	db := c.db
	names := make([]string, 0, len(x.tables))
	for name := range x.tables {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		o := x.tables[name]
		if o.truncated {
			db.data.truncate(name)
		}
		for _, k := range o.order {
			if r := o.rows[k]; r == nil {
				db.data.del(name, k)
			} else {
				db.data.put(name, k, r)
			}
		}
		db.data.tables[name].rowID += o.keyless
	}
	for name, d := range x.defs {
		db.defs[name] = d
	}
	for name := range x.reseeding {
		db.reseeds[name].active = true
	}
	if x.barrier {
		db.barriers++
	}
	db.checkpoint, db.hasCP = x.checkpoint, true
	for k, p := range x.progress {
		db.progress[k] = p
	}
	for _, id := range x.replayed {
		for _, q := range db.quarantine {
			if q.id == id {
				q.replayed = true
			}
		}
	}
	x.done = true
	c.tx = nil
	db.commits++
	at := db.clock()
	db.checkpoint.AppliedAt = at
	if db.onCommit != nil {
		db.onCommit()
	}
	if act == actCrashAfter {
		c.kill()
		return time.Time{}, errConnLost
	}
	return at, nil
}

// Rollback implements apply.TargetTx.
func (x *simTx) Rollback(context.Context) {
	if !x.done && x.c.tx == x {
		x.c.tx = nil
	}
	x.done = true
}
