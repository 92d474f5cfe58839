package check

import (
	"fmt"
	"strconv"
	"strings"
)

// StarterConfig renders a schema-v2 starting configuration for the graded
// database: its capture-ready tables, credentials by environment reference
// only. It refuses (a *BlockedError) while any critical finding exists,
// because a config for a source that cannot capture would only move the
// failure later.
//
// This is a template, deliberately plain YAML text: `trellara config
// validate` is the authority on the schema.
func StarterConfig(r *Report) ([]byte, error) {
	if b := r.Blockers(); len(b) > 0 {
		return nil, &BlockedError{Blockers: b}
	}
	name := flowName(r.Server.Database)
	var b strings.Builder
	fmt.Fprintf(&b, "# Starting configuration written by trellara-check from a read-only inspection of\n")
	fmt.Fprintf(&b, "# database %s (grade %s). Nothing was created on the server.\n", r.Server.Database, r.Grade)
	b.WriteString("# Review it, then: trellara config validate --config <this file>\n")
	b.WriteString("version: 2\n")
	b.WriteString("environment: development\n")
	fmt.Fprintf(&b, "flow: %s\n", name)
	b.WriteString("source:\n")
	fmt.Fprintf(&b, "  id: %s\n", name)
	b.WriteString("  database_url: {env: TRELLARA_SOURCE_URL}\n")
	fmt.Fprintf(&b, "  publication: trellara_%s\n", name)
	fmt.Fprintf(&b, "  slot: trellara_%s\n", name)
	var ready, skipped []Table
	for _, t := range r.Tables {
		if t.Ready {
			ready = append(ready, t)
		} else {
			skipped = append(skipped, t)
		}
	}
	if len(ready) == 0 {
		b.WriteString("  tables: []   # no capture-ready table found; see the trellara-check report\n")
	} else {
		b.WriteString("  tables:\n")
		for _, t := range ready {
			fmt.Fprintf(&b, "    - %s\n", strconv.Quote(t.qualified()))
		}
	}
	for _, t := range skipped {
		fmt.Fprintf(&b, "    # left out %s: %s\n", strconv.Quote(t.qualified()), strings.Join(t.Problems, ", "))
	}
	b.WriteString("transport:\n")
	b.WriteString("  local:\n")
	fmt.Fprintf(&b, "    dir: /var/lib/trellara/%s\n", name)
	b.WriteString("    fsync: always\n")
	b.WriteString("    retention: {max_bytes: 50GiB}\n")
	b.WriteString("target:\n")
	b.WriteString("  database_url: {env: TRELLARA_TARGET_URL}\n")
	b.WriteString("  mode: strict\n")
	b.WriteString("schema:\n")
	b.WriteString("  unknown_table_policy: block\n")
	return []byte(b.String()), nil
}

// flowName makes a config-safe identifier from a database name.
func flowName(db string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(db) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.Trim(b.String(), "_")
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "db_" + s
	}
	return s
}
