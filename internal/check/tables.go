package check

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is one user table (partitions are folded into their root).
type Table struct {
	Schema          string `json:"schema"`
	Name            string `json:"name"`
	Kind            string `json:"kind"` // table | partitioned
	Partitions      int    `json:"partitions"`
	Unlogged        bool   `json:"unlogged"`
	ReplicaIdentity string `json:"replica_identity"` // default | full | index | nothing
	PrimaryKey      bool   `json:"primary_key"`
	CandidateIndex  string `json:"candidate_index,omitempty"`
	// Estimates from pg_class; null until the table was first vacuumed or
	// analyzed (reltuples = -1 on 14+).
	EstimatedBytes *int64   `json:"estimated_bytes"`
	EstimatedRows  *int64   `json:"estimated_rows"`
	ToastColumns   []string `json:"toast_columns"`
	Readable       bool     `json:"readable"`
	// Ready means inserts, updates and deletes would all be captured as is.
	Ready    bool     `json:"ready"`
	Problems []string `json:"problems"`
}

func (t Table) qualified() string { return qualified(t.Schema, t.Name) }

// hasIdentity reports whether UPDATE and DELETE can name the row.
func (t Table) hasIdentity() bool {
	for _, p := range t.Problems {
		if p == "no_replica_identity" {
			return false
		}
	}
	return true
}

// tableQuery reads every user table without locking any: sizes are the
// planner's estimates (relpages), not pg_relation_size, which would take an
// AccessShareLock per table and could queue behind a running ALTER. The
// lateral subquery lists the columns that rules 1 and 2 of toast.go allow,
// with base type and typmod for rule 3.
const tableQuery = `
SELECT n.nspname::text, c.relname::text, c.relkind::text, c.relpersistence::text, c.relreplident::text,
  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisreplident),
  coalesce((SELECT ci.relname::text FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
    WHERE i.indrelid = c.oid AND i.indisunique AND i.indimmediate AND i.indisvalid
      AND i.indpred IS NULL AND i.indexprs IS NULL
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum = ANY (i.indkey) AND NOT a.attnotnull)
    ORDER BY ci.relname LIMIT 1), ''),
  ((greatest(c.relpages, 0)::bigint + coalesce(greatest(t.relpages, 0), 0)) * current_setting('block_size')::bigint),
  c.reltuples::float8,
  coalesce(v.names, '{}'), coalesce(v.types, '{}'), coalesce(v.mods, '{}'),
  has_table_privilege(c.oid, 'SELECT'),
  (SELECT count(*) FROM pg_catalog.pg_inherits h WHERE h.inhparent = c.oid)::int
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_class t ON t.oid = c.reltoastrelid
LEFT JOIN LATERAL (SELECT array_agg(a.attname::text ORDER BY a.attnum) AS names,
    array_agg((CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END)::int8 ORDER BY a.attnum) AS types,
    array_agg(CASE WHEN ty.typtype = 'd' AND a.atttypmod < 0 THEN ty.typtypmod ELSE a.atttypmod END ORDER BY a.attnum) AS mods
  FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attlen = -1 AND a.attstorage <> 'p') v ON true
WHERE ` + userTables + ` AND ($2::text[] IS NULL OR ` + inScope + `)
ORDER BY 1, 2
LIMIT $1`

// userTables selects the user tables the grader lists (c: pg_class, n:
// its pg_namespace): plain and partitioned roots, not temporary, not in a
// system schema, not an extension's.
const userTables = `c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
    WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')`

// inScope is true for a table of the flow: named by $2 (schemas) and $3
// (names), compared as stored, or in a schema of $4 (source.schemas).
const inScope = `(EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS f(s, r) WHERE f.s = n.nspname AND f.r = c.relname)
    OR n.nspname = ANY ($4::text[]))`

// otherTablesQuery counts the user tables outside the flow's scope ($1,
// $2, $3 are inScope's $2, $3, $4).
var otherTablesQuery = `SELECT count(*)::int FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE ` + userTables + ` AND NOT ` + strings.NewReplacer("$2", "$1", "$3", "$2", "$4", "$3").Replace(inScope)

var identityNames = map[string]string{"d": "default", "f": "full", "i": "index", "n": "nothing"}

// ReplicaIdentityName is the word for a pg_class.relreplident code
// ("d" → "default", "f" → "full", "i" → "index", "n" → "nothing"), so
// output never shows the catalog letter.
func ReplicaIdentityName(code string) string {
	if n, ok := identityNames[code]; ok {
		return n
	}
	return "unknown (" + code + ")"
}

// maxActionLines bounds a grouped action; JSON's tables[] has the rest.
const maxActionLines = 20

func (in *inspector) tables() error {
	// The longest character of the database encoding bounds varchar(n).
	if err := in.q.QueryRow(in.ctx, `SELECT pg_encoding_max_length(encoding) FROM pg_catalog.pg_database
		WHERE datname = current_database()`).Scan(&in.charBytes); err != nil {
		return &QueryError{What: "database encoding", Err: err}
	}
	in.toastThreshold = toastThreshold(8192)
	if bs, ok := in.intSetting("block_size"); ok {
		in.toastThreshold = toastThreshold(int64(bs))
	}
	// Unscoped, $2 is NULL and every user table is listed.
	var scopeSchemas, scopeNames, scopeWhole []string
	if sc := in.opts.Scope; sc != nil {
		scopeSchemas, scopeNames, scopeWhole = []string{}, []string{}, append([]string{}, sc.Schemas...)
		for _, t := range in.opts.Tables {
			scopeSchemas, scopeNames = append(scopeSchemas, t.Schema), append(scopeNames, t.Name)
		}
		if err := in.q.QueryRow(in.ctx, otherTablesQuery, scopeSchemas, scopeNames, scopeWhole).Scan(&in.r.Scope.OtherTables); err != nil {
			return &QueryError{What: "pg_class (tables outside the flow)", Err: err}
		}
	}
	rows, err := in.q.Query(in.ctx, tableQuery, in.opts.MaxTables+1, scopeSchemas, scopeNames, scopeWhole)
	if err != nil {
		return &QueryError{What: "pg_class (tables)", Err: err}
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Table, error) {
		var t Table
		var kind, persistence, ident string
		var hasRIIndex bool
		var estBytes int64
		var estRows float64
		var colNames []string
		var colTypes []int64
		var colMods []int32
		err := row.Scan(&t.Schema, &t.Name, &kind, &persistence, &ident, &t.PrimaryKey, &hasRIIndex,
			&t.CandidateIndex, &estBytes, &estRows, &colNames, &colTypes, &colMods, &t.Readable, &t.Partitions)
		t.ToastColumns = []string{}
		for i, name := range colNames {
			if i < len(colTypes) && i < len(colMods) &&
				mayToast(toastColumn{name: name, typ: colTypes[i], typmod: colMods[i]}, in.toastThreshold, in.charBytes) {
				t.ToastColumns = append(t.ToastColumns, name)
			}
		}
		if estRows >= 0 {
			rows := int64(estRows)
			t.EstimatedBytes, t.EstimatedRows = &estBytes, &rows
		}
		if t.PrimaryKey {
			t.CandidateIndex = "" // only interesting as a fallback for a missing key
		}
		t.Kind = "table"
		if kind == "p" {
			t.Kind = "partitioned"
		}
		t.Unlogged = persistence == "u"
		t.ReplicaIdentity = ReplicaIdentityName(ident)
		identityOK := (ident == "d" && t.PrimaryKey) || (ident == "i" && hasRIIndex) || ident == "f"
		t.Problems = []string{}
		if !identityOK {
			t.Problems = append(t.Problems, "no_replica_identity")
		}
		if t.Unlogged {
			t.Problems = append(t.Problems, "unlogged")
		}
		if !t.Readable {
			t.Problems = append(t.Problems, "not_readable")
		}
		t.Ready = len(t.Problems) == 0
		return t, err
	})
	if err != nil {
		return &QueryError{What: "pg_class (tables)", Err: err}
	}
	if len(list) > in.opts.MaxTables {
		list = list[:in.opts.MaxTables]
		in.r.TablesTruncated = true
		in.r.note("tables: listed the first %d by name; the rest were not graded", in.opts.MaxTables)
	}
	in.r.Tables = list

	pubLine, err := in.publications()
	if err != nil {
		return err
	}
	in.tableRules(pubLine)
	return nil
}

// publications lists existing publications for context; Trellara creates its
// own, so none is required.
func (in *inspector) publications() (string, error) {
	cols, err := in.columns("pg_catalog.pg_publication")
	if err != nil {
		return "", err
	}
	viaRoot := "false"
	if cols["pubviaroot"] {
		viaRoot = "pubviaroot"
	}
	rows, err := in.q.Query(in.ctx, `SELECT pubname::text, puballtables, `+viaRoot+` FROM pg_catalog.pg_publication ORDER BY 1`)
	if err != nil {
		return "", &QueryError{What: "pg_publication", Err: err}
	}
	var names []string
	in.pubNames = map[string]bool{}
	sc := in.opts.Scope
	for rows.Next() {
		var name string
		var all, root bool
		if err := rows.Scan(&name, &all, &root); err != nil {
			rows.Close()
			return "", &QueryError{What: "pg_publication", Err: err}
		}
		in.pubNames[name] = true
		if sc != nil && name != sc.Publication {
			// Another flow's or application's: counted, never named.
			in.r.Scope.OtherPublications++
			continue
		}
		if all {
			name += " (all tables)"
		}
		if root {
			name += " (via partition root)"
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return "", &QueryError{What: "pg_publication", Err: err}
	}
	if sc != nil {
		line := "publication " + sc.Publication + " does not exist yet (Trellara creates it when the flow first runs)"
		if len(names) > 0 {
			line = "publication " + names[0]
		}
		if n := in.r.Scope.OtherPublications; n > 0 {
			line += fmt.Sprintf(" · %s not listed", plural(n, "other publication"))
		}
		return line, nil
	}
	if len(names) == 0 {
		return "publications: none (Trellara creates its own)", nil
	}
	return "publications: " + strings.Join(names, ", "), nil
}

func (in *inspector) tableRules(pubLine string) {
	sec := in.r.section(SectionCapture)
	var noIdentity, fullWithPK, fullNoPK, toast, unlogged, partitioned, unreadable []Table
	ready := 0
	for _, t := range in.r.Tables {
		if t.Ready {
			ready++
		}
		switch {
		case !t.hasIdentity():
			noIdentity = append(noIdentity, t)
		case t.ReplicaIdentity == "full" && (t.PrimaryKey || t.CandidateIndex != ""):
			fullWithPK = append(fullWithPK, t)
		case t.ReplicaIdentity == "full":
			fullNoPK = append(fullNoPK, t)
		}
		if len(t.ToastColumns) > 0 && t.ReplicaIdentity != "full" {
			toast = append(toast, t)
		}
		if t.Unlogged {
			unlogged = append(unlogged, t)
		}
		if t.Kind == "partitioned" {
			partitioned = append(partitioned, t)
		}
		if !t.Readable {
			unreadable = append(unreadable, t)
		}
	}

	summary := []string{fmt.Sprintf("%d of %s ready", ready, plural(len(in.r.Tables), "table"))}
	if len(in.r.Tables) > 0 && ready == len(in.r.Tables) {
		summary = []string{plural(ready, "table") + " ready"}
	}
	if n := len(noIdentity); n > 0 {
		summary = append(summary, fmt.Sprintf("%d without primary key or replica identity", n))
	}
	if n := len(toast); n > 0 {
		summary = append(summary, plural(n, "note")+" (TOAST)")
	}
	if len(in.r.Tables) == 0 && in.opts.Scope != nil {
		summary = []string{"none of the flow's tables found in " + in.r.Server.Database}
	} else if len(in.r.Tables) == 0 {
		summary = []string{"no user tables in " + in.r.Server.Database}
		in.r.add(Finding{Severity: Info, Code: "no_tables", Section: SectionCapture,
			Title:  "database " + in.r.Server.Database + " has no user tables",
			Detail: "Nothing to capture here. Run trellara-check against the database that holds the tables to capture (slots and settings are server-wide and already shown)."})
	}
	sec.Summary = strings.Join(summary, " · ")

	for _, t := range in.r.Tables {
		line := fmt.Sprintf("%-32s %s", t.qualified(), describeTable(t))
		sec.Lines = append(sec.Lines, line)
	}
	sec.Lines = append(sec.Lines, pubLine)

	if len(noIdentity) > 0 {
		var acts []string
		for _, t := range noIdentity {
			if t.PrimaryKey { // REPLICA IDENTITY NOTHING, or INDEX on a dropped index
				acts = append(acts, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT;   -- the primary key identifies the row", t.qualified()))
			} else if t.CandidateIndex != "" {
				acts = append(acts, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY USING INDEX %s;", t.qualified(), quoteIdent(t.CandidateIndex)))
			} else {
				acts = append(acts, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL;   -- better: add a primary key", t.qualified()))
			}
		}
		in.r.add(Finding{Severity: Warning, Code: "no_replica_identity", Section: SectionCapture,
			Title: fmt.Sprintf("%s no primary key or usable replica identity", count(len(noIdentity), "table has", "tables have")),
			Detail: "Once published, UPDATE and DELETE on these tables fail on the source (\"cannot update table ... because it does not have a replica identity\"), " +
				"and a target cannot find the row to change. A primary key is best; a unique index on NOT NULL columns works; REPLICA IDENTITY FULL works but logs the whole old row on every UPDATE and DELETE.",
			Action:  capLines(acts),
			Objects: names(noIdentity)})
	}
	if len(fullWithPK) > 0 {
		var acts []string
		for _, t := range fullWithPK {
			if t.PrimaryKey {
				acts = append(acts, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT;", t.qualified()))
			} else {
				acts = append(acts, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY USING INDEX %s;", t.qualified(), quoteIdent(t.CandidateIndex)))
			}
		}
		in.r.add(Finding{Severity: Notice, Code: "replica_identity_full_unneeded", Section: SectionCapture,
			Title:   fmt.Sprintf("%s REPLICA IDENTITY FULL although a key exists", count(len(fullWithPK), "table uses", "tables use")),
			Detail:  "FULL writes the entire old row into the WAL on every UPDATE and DELETE (" + fmtBytes(sumBytes(fullWithPK)) + " of tables estimated); the key alone identifies the row.",
			Action:  capLines(acts),
			Objects: names(fullWithPK)})
	}
	if len(fullNoPK) > 0 {
		in.r.add(Finding{Severity: Info, Code: "replica_identity_full", Section: SectionCapture,
			Title:   fmt.Sprintf("%s on REPLICA IDENTITY FULL", count(len(fullNoPK), "table relies", "tables rely")),
			Detail:  "Every UPDATE and DELETE logs the whole old row (" + fmtBytes(sumBytes(fullNoPK)) + " of tables estimated), and the target matches rows on all columns. Adding a primary key makes both cheaper.",
			Objects: names(fullNoPK)})
	}
	if len(toast) > 0 {
		var objs []string
		for _, t := range toast {
			objs = append(objs, fmt.Sprintf("%s (%s)", t.qualified(), strings.Join(t.ToastColumns, ", ")))
		}
		in.r.add(Finding{Severity: Info, Code: "unchanged_toast", Section: SectionCapture,
			Title: fmt.Sprintf("%s TOAST-able columns under the default replica identity", count(len(toast), "table has", "tables have")),
			Detail: "An UPDATE that does not touch a large out-of-line value sends it as \"unchanged\", not its content. " +
				"Trellara carries an explicit unchanged-TOAST marker and never writes it as NULL; tools that lack one silently null these columns. " +
				toastRule(in.toastThreshold, in.charBytes),
			Objects: objs})
	}
	if len(unlogged) > 0 {
		var acts []string
		for _, t := range unlogged {
			acts = append(acts, fmt.Sprintf("ALTER TABLE %s SET LOGGED;", t.qualified()))
		}
		in.r.add(Finding{Severity: Notice, Code: "unlogged_table", Section: SectionCapture,
			Title:   fmt.Sprintf("%s unlogged: its changes are never captured", count(len(unlogged), "table is", "tables are")),
			Detail:  "Unlogged tables write no WAL, so logical decoding cannot see them (and they are emptied after a crash).",
			Action:  capLines(acts),
			Objects: names(unlogged)})
	}
	if len(partitioned) > 0 {
		in.r.add(Finding{Severity: Info, Code: "partitioned_table", Section: SectionCapture,
			Title:   fmt.Sprintf("%s partitioned", count(len(partitioned), "table is", "tables are")),
			Detail:  "Changes are published under the partition's own name unless the publication sets publish_via_partition_root; Trellara's publication sets it so rows arrive under the parent.",
			Action:  fmt.Sprintf("CREATE PUBLICATION trellara FOR TABLE %s WITH (publish_via_partition_root = true);   -- what Trellara runs later, not now", strings.Join(names(partitioned), ", ")),
			Objects: names(partitioned)})
	}
	if len(unreadable) > 0 {
		var acts []string
		for _, t := range unreadable {
			acts = append(acts, fmt.Sprintf("GRANT SELECT ON %s TO %s;", t.qualified(), quoteIdent(in.r.Privileges.Role)))
		}
		in.r.add(Finding{Severity: Notice, Code: "table_not_readable", Section: SectionCapture,
			Title:   fmt.Sprintf("%s not readable by %s: the initial snapshot would fail", count(len(unreadable), "table is", "tables are"), in.r.Privileges.Role),
			Detail:  "The snapshot copies each table with SELECT; if Trellara will connect as another role, check that role.",
			Action:  capLines(acts),
			Objects: names(unreadable)})
	}
}

func describeTable(t Table) string {
	var parts []string
	switch {
	case t.PrimaryKey && t.ReplicaIdentity == "default":
		parts = append(parts, "primary key")
	case t.hasIdentity():
		parts = append(parts, "replica identity "+t.ReplicaIdentity)
	case t.ReplicaIdentity == "default":
		parts = append(parts, "NO replica identity (default, and no primary key)")
	case t.ReplicaIdentity == "index":
		parts = append(parts, "NO replica identity (index, but the index is gone)")
	default:
		parts = append(parts, "NO replica identity ("+t.ReplicaIdentity+")")
	}
	if t.Kind == "partitioned" {
		parts = append(parts, plural(t.Partitions, "partition"))
	}
	if t.Unlogged {
		parts = append(parts, "UNLOGGED")
	}
	if !t.Readable {
		parts = append(parts, "not readable")
	}
	if t.EstimatedBytes != nil {
		parts = append(parts, "~"+fmtBytes(*t.EstimatedBytes))
	} else {
		parts = append(parts, "size not estimated yet")
	}
	if len(t.ToastColumns) > 0 {
		parts = append(parts, "toast: "+strings.Join(t.ToastColumns, ", "))
	}
	return strings.Join(parts, " · ")
}

func names(ts []Table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.qualified()
	}
	return out
}

func sumBytes(ts []Table) int64 {
	var n int64
	for _, t := range ts {
		if t.EstimatedBytes != nil {
			n += *t.EstimatedBytes
		}
	}
	return n
}

func capLines(lines []string) string {
	if len(lines) > maxActionLines {
		more := len(lines) - maxActionLines
		lines = append(lines[:maxActionLines:maxActionLines], fmt.Sprintf("-- … and %d more: see tables[] in --format json", more))
	}
	return strings.Join(lines, "\n")
}
