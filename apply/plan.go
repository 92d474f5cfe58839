package apply

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/pgname"
)

// Replica identity settings as pgoutput sends them (pg_class.relreplident).
const (
	identityDefault = 'd'
	identityNothing = 'n'
	identityFull    = 'f'
	identityIndex   = 'i'
)

// relPlan is everything the applier derives once per relation shape: the
// quoted target names and the INSERT statement. Plans are cached by the
// relation fingerprint, which covers schema, name, columns, types, key flags
// and replica identity, so a changed shape gets a new plan.
type relPlan struct {
	source string // the source relation in pgname.Name form, for messages and quarantine
	// target is the quoted, schema-qualified target table.
	target       string
	targetSchema string
	targetName   string
	names        []string // column names as the source sends them
	cols         []string // the same, quoted
	key          []int    // replica identity key columns (DEFAULT/INDEX identity)
	full         bool     // REPLICA IDENTITY FULL: the old tuple carries every column
	insertSQL    string
	copySQL      string

	// For FULL identity only, loaded from the target on first use.
	targetLoaded bool
	targetPK     []int  // relation column indexes of the target's primary key; nil if none usable
	textCompare  []bool // compare as text: the type has no equality operator (json, xml, geometry)
}

func (t *pgTarget) plan(rel *pb.Relation) *relPlan {
	if p, ok := t.plans[rel.Fingerprint]; ok {
		return p
	}
	if len(t.plans) >= planCountMax {
		// Bounded: a long-lived applier that sees many schema versions
		// forgets old plans rather than growing without limit.
		clear(t.plans)
	}
	ts, tn := rel.Schema, rel.Name
	if t.cfg.Mapping != nil {
		ts, tn = t.cfg.Mapping(ts, tn)
	}
	p := &relPlan{
		source:       relationName(rel),
		target:       pgx.Identifier{ts, tn}.Sanitize(),
		targetSchema: ts,
		targetName:   tn,
		full:         rel.ReplicaIdentity == identityFull,
	}
	for i, c := range rel.Columns {
		p.names = append(p.names, c.Name)
		p.cols = append(p.cols, pgx.Identifier{c.Name}.Sanitize())
		if c.Key {
			p.key = append(p.key, i)
		}
	}
	collist := strings.Join(p.cols, ", ")
	var b strings.Builder
	// OVERRIDING SYSTEM VALUE: a target column declared GENERATED ALWAYS AS
	// IDENTITY must still take the source's value; on other tables the
	// clause is a no-op.
	fmt.Fprintf(&b, "INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE VALUES (", p.target, collist)
	for i := range p.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	b.WriteString(")")
	p.insertSQL = b.String()
	p.copySQL = fmt.Sprintf("COPY %s (%s) FROM STDIN", p.target, collist)
	t.plans[rel.Fingerprint] = p
	return p
}

// noEqualityTypes have no default equality operator (json, xml), or one that
// is not identity (box and circle compare areas). Their values are matched
// by text form when a REPLICA IDENTITY FULL row has to be found.
var noEqualityTypes = map[string]bool{
	"json": true, "xml": true, "point": true, "line": true, "lseg": true,
	"box": true, "path": true, "polygon": true, "circle": true,
}

// loadTarget reads, for a FULL identity relation, the target's primary key
// and which columns need text comparison. The PK lets UPDATE/DELETE use an
// index instead of matching every old column.
func (t *pgTarget) loadTarget(ctx context.Context, p *relPlan) error {
	if p.targetLoaded {
		return nil
	}
	rows, err := t.conn.Query(ctx, `
		SELECT a.attname,
		       coalesce(a.attnum = ANY (i.indkey), false),
		       format_type(coalesce(nullif(t.typbasetype, 0), t.oid), NULL)
		FROM pg_attribute a
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, p.target)
	if err != nil {
		return err
	}
	type col struct {
		pk   bool
		base string
	}
	cols := map[string]col{}
	for rows.Next() {
		var name string
		var c col
		if err := rows.Scan(&name, &c.pk, &c.base); err != nil {
			rows.Close()
			return err
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(cols) == 0 {
		// Missing table: leave the plan unloaded so the statement itself
		// fails with the server's own error (42P01), which is quarantined.
		return nil
	}
	p.textCompare = make([]bool, len(p.names))
	var pk []int
	npk := 0
	for _, c := range cols {
		if c.pk {
			npk++
		}
	}
	for i, n := range p.names {
		c := cols[n]
		p.textCompare[i] = noEqualityTypes[strings.TrimSuffix(c.base, "[]")]
		if c.pk {
			pk = append(pk, i)
		}
	}
	if npk > 0 && len(pk) == npk {
		p.targetPK = pk
	}
	p.targetLoaded = true
	return nil
}

// Statement kinds in the SQL cache key.
const (
	sqlUpdate = 'U'
	sqlDelete = 'D'
	sqlSelect = 'S' // an UPDATE whose SET list is empty still has to find its row
)

// Where-clause forms.
const (
	whereKey  = 'k' // col = $n over key columns: one row by index
	whereCtid = 'c' // all old columns, IS NOT DISTINCT FROM, first match only
)

// rowStmt builds the UPDATE or DELETE for r, returning the SQL (cached by
// shape) and its text arguments. A *unitError means the row cannot be
// addressed at the target at all.
func (t *pgTarget) rowStmt(ctx context.Context, p *relPlan, rel *pb.Relation, r *pb.Row) (string, []any, error) {
	ncol := len(p.cols)
	isToast := func(v *pb.Value) bool { return v.GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST }

	// Which columns identify the row, and from which tuple.
	var (
		whereFrom []*pb.Value
		whereCols []int
		form      byte = whereKey
	)
	switch {
	case p.full:
		if r.OldKind != pb.OldTuple_OLD_TUPLE_FULL {
			return "", nil, &unitError{fmt.Sprintf("%s on %s (REPLICA IDENTITY FULL) carries no full old tuple, so the target row cannot be found",
				r.Op, p.source)}
		}
		if err := t.loadTarget(ctx, p); err != nil {
			return "", nil, err
		}
		whereFrom = r.OldTuple
		if p.targetPK != nil {
			whereCols = p.targetPK
		} else {
			form = whereCtid
			for i, v := range r.OldTuple {
				if !isToast(v) {
					whereCols = append(whereCols, i)
				}
			}
		}
	case len(p.key) == 0:
		return "", nil, &unitError{fmt.Sprintf("%s on %s cannot be applied: the relation has no replica identity key (identity %q) and is not REPLICA IDENTITY FULL; "+
			"add a primary key at the source or run ALTER TABLE %s REPLICA IDENTITY FULL", r.Op, p.source, rune(rel.ReplicaIdentity),
			pgname.Name{Schema: rel.Schema, Name: rel.Name}.Sanitize())}
	default:
		whereCols = p.key
		whereFrom = r.NewTuple
		if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
			whereFrom = r.OldTuple
		}
	}
	for _, i := range whereCols {
		if form == whereKey && (isToast(whereFrom[i]) || whereFrom[i].GetKind() == pb.ValueKind_VALUE_KIND_NULL) {
			return "", nil, &unitError{fmt.Sprintf("%s on %s: key column %s is %s, so the target row cannot be found",
				r.Op, p.source, p.names[i], whereFrom[i].GetKind())}
		}
	}

	// What an UPDATE writes: every sent column, minus unchanged TOAST (the
	// stored value must stay as it is, never become NULL) and minus columns
	// that provably did not change.
	var setCols []int
	if r.Op == pb.Op_OP_UPDATE {
		keyUnchanged := !p.full && r.OldKind == pb.OldTuple_OLD_TUPLE_NONE
		for i, v := range r.NewTuple {
			switch {
			case isToast(v):
			case keyUnchanged && containsInt(p.key, i):
				// The key did not change (no old key was sent): writing it
				// again would only touch index entries.
			case p.full && sameValue(r.OldTuple[i], v):
			default:
				setCols = append(setCols, i)
			}
		}
	}
	kind := byte(sqlDelete)
	if r.Op == pb.Op_OP_UPDATE {
		kind = sqlUpdate
		if len(setCols) == 0 {
			kind = sqlSelect
		}
	}

	// The cache key is the statement's shape: kind, form, relation and the
	// two column masks.
	key := t.keyBuf[:0]
	key = append(key, kind, form)
	key = strconv.AppendUint(key, rel.Fingerprint, 16)
	key = append(key, ':')
	key = appendMask(key, setCols, ncol)
	key = append(key, ':')
	key = appendMask(key, whereCols, ncol)
	t.keyBuf = key
	sql, ok := t.sqlCache[string(key)]
	if !ok {
		sql = buildRowSQL(p, kind, form, setCols, whereCols)
		// A FULL-identity statement built before the target table existed
		// lacks the text comparisons; do not keep it.
		if p.targetLoaded || !p.full {
			if len(t.sqlCache) >= sqlCacheMax {
				clear(t.sqlCache)
			}
			t.sqlCache[string(key)] = sql
		}
	}
	args := make([]any, 0, len(setCols)+len(whereCols))
	for _, i := range setCols {
		args = append(args, textArg(r.NewTuple[i]))
	}
	for _, i := range whereCols {
		args = append(args, textArg(whereFrom[i]))
	}
	return sql, args, nil
}

func buildRowSQL(p *relPlan, kind, form byte, setCols, whereCols []int) string {
	var b strings.Builder
	n := 0
	param := func() string { n++; return "$" + strconv.Itoa(n) }
	switch kind {
	case sqlUpdate:
		fmt.Fprintf(&b, "UPDATE %s SET ", p.target)
		for j, i := range setCols {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p.cols[i] + " = " + param())
		}
	case sqlDelete:
		fmt.Fprintf(&b, "DELETE FROM %s", p.target)
	case sqlSelect:
		fmt.Fprintf(&b, "SELECT 1 FROM %s", p.target)
	}
	var cond strings.Builder
	for j, i := range whereCols {
		if j > 0 {
			cond.WriteString(" AND ")
		}
		switch {
		case form == whereKey:
			cond.WriteString(p.cols[i] + " = " + param())
		case p.textCompare != nil && p.textCompare[i]:
			cond.WriteString(p.cols[i] + "::text IS NOT DISTINCT FROM " + param() + "::text")
		default:
			cond.WriteString(p.cols[i] + " IS NOT DISTINCT FROM " + param())
		}
	}
	if len(whereCols) == 0 {
		cond.WriteString("true")
	}
	if form == whereKey {
		b.WriteString(" WHERE " + cond.String())
		return b.String()
	}
	// Without a key several identical rows may match; exactly one of them
	// is the source's row, as in PostgreSQL's own apply worker. tableoid
	// keeps the ctid unambiguous on a partitioned target.
	fmt.Fprintf(&b, " WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM %s WHERE %s LIMIT 1)", p.target, cond.String())
	return b.String()
}

func appendMask(dst []byte, cols []int, n int) []byte {
	start := len(dst)
	for range n {
		dst = append(dst, '0')
	}
	for _, i := range cols {
		dst[start+i] = '1'
	}
	return dst
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// sameValue reports whether two values are provably equal: same kind and
// same text. Unchanged TOAST is never "same" (its content is unknown).
func sameValue(a, b *pb.Value) bool {
	if a.GetKind() != b.GetKind() || a.GetKind() == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
		return false
	}
	return string(a.GetData()) == string(b.GetData())
}

// textArg turns a value into a statement argument. A Go string is sent in
// text format for whatever type the server infers for the parameter, so
// every type's own input function parses the source's output form: arrays,
// json, numeric, bytea (hex form), timestamptz, enums, domains.
func textArg(v *pb.Value) any {
	if v.GetKind() == pb.ValueKind_VALUE_KIND_NULL {
		return nil
	}
	return valueString(v)
}

// valueString is v's bytes as a string, without a copy: the string
// aliases the decoded envelope, whose payload a unit owns and nothing
// writes after decoding (Applier.decode), so it cannot change under the
// statement that sends it.
func valueString(v *pb.Value) string {
	d := v.GetData()
	return unsafe.String(unsafe.SliceData(d), len(d))
}

// describeKey renders the key values of r for a divergence message.
func describeKey(p *relPlan, r *pb.Row) string {
	from := r.NewTuple
	if r.OldKind != pb.OldTuple_OLD_TUPLE_NONE {
		from = r.OldTuple
	}
	cols := p.key
	if p.full {
		if p.targetPK != nil {
			cols = p.targetPK
		} else {
			cols = nil
			for i := range from {
				cols = append(cols, i)
			}
		}
	}
	var b strings.Builder
	for j, i := range cols {
		if i >= len(from) {
			continue
		}
		if j > 0 {
			b.WriteString(", ")
		}
		v := from[i]
		switch v.GetKind() {
		case pb.ValueKind_VALUE_KIND_NULL:
			fmt.Fprintf(&b, "%s=NULL", p.names[i])
		case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
			fmt.Fprintf(&b, "%s=<unchanged toast>", p.names[i])
		default:
			d := v.GetData()
			if len(d) > 64 {
				d = append(d[:64:64], "..."...)
			}
			fmt.Fprintf(&b, "%s=%q", p.names[i], d)
		}
	}
	return b.String()
}
