// Package pgname is PostgreSQL identifiers: one parsed, schema-qualified
// table name, the quoting rules for messages and for SQL, and the parse
// errors. It is a leaf: it imports nothing from this module, so the config
// file, the data path and the tools all share one name type.
package pgname

import (
	"errors"
	"fmt"
	"strings"
)

// MaxIdentifierBytes is PostgreSQL's NAMEDATALEN-1: longer names are
// silently truncated by the server, so two configured names could collide.
const MaxIdentifierBytes = 63

// Name is a schema-qualified table.
type Name struct {
	Schema string
	Name   string
}

// Parse parses "schema.name" with PostgreSQL identifier rules:
// unquoted parts fold to lower case; double-quoted parts keep their case and
// may contain dots ("" is an escaped quote). The schema is required, because
// search_path differs between source, target and Trellara's own sessions.
func Parse(s string) (Name, error) {
	schema, rest, err := parseIdent(s)
	if err != nil {
		return Name{}, err
	}
	if !strings.HasPrefix(rest, ".") {
		return Name{}, errors.New("must be schema-qualified, e.g. public.sales")
	}
	name, rest, err := parseIdent(rest[1:])
	if err != nil {
		return Name{}, err
	}
	if rest != "" {
		return Name{}, errors.New("must be schema.name; quote names that contain dots (\"my.table\")")
	}
	return Name{Schema: schema, Name: name}, nil
}

// ParseSchema parses one schema name with the rules of
// Parse's parts: unquoted folds to lower case, double-quoted keeps
// its case.
func ParseSchema(s string) (string, error) {
	name, rest, err := parseIdent(s)
	if err != nil {
		return "", err
	}
	if rest != "" {
		return "", errors.New("must be one schema name; quote names that contain dots or other characters (\"My.Schema\")")
	}
	return name, nil
}

func parseIdent(s string) (ident, rest string, err error) {
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '"' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			if b.Len() == 0 {
				return "", "", errors.New("has an empty quoted name")
			}
			if b.Len() > MaxIdentifierBytes {
				return "", "", fmt.Errorf("has a name longer than %d bytes", MaxIdentifierBytes)
			}
			return b.String(), s[i+1:], nil
		}
		return "", "", errors.New("has an unterminated quoted name")
	}
	end := 0
	for end < len(s) && isIdentByte(s[end], end == 0) {
		end++
	}
	if end == 0 {
		return "", "", errors.New("must be schema.name with letters, digits, _ and $ (quote other names)")
	}
	if end > MaxIdentifierBytes {
		return "", "", fmt.Errorf("has a name longer than %d bytes", MaxIdentifierBytes)
	}
	return strings.ToLower(s[:end]), s[end:], nil
}

func isIdentByte(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		return true
	case c >= '0' && c <= '9', c == '$':
		return !first
	}
	return false
}

// String renders the name the way a person writes it in a config file, on
// the command line or in a message: parts quoted only when PostgreSQL would
// need it. Parse(t.String()) == t for every valid name, so this is
// the one text form Trellara prints, stores (snapshot progress, quarantine)
// and reads back. SQL uses Sanitize.
func (t Name) String() string { return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name) }

// Sanitize renders the name for SQL: both parts always double-quoted, as
// pgx.Identifier{schema, name}.Sanitize() does, so no name can change the
// statement it is put into.
func (t Name) Sanitize() string { return sanitizeIdent(t.Schema) + "." + sanitizeIdent(t.Name) }

func sanitizeIdent(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, string([]byte{0}), ""), `"`, `""`) + `"`
}

// QuoteIdent quotes an SQL identifier only when PostgreSQL would need it:
// anything but lower-case letters, digits, _ and $ (not first), and the
// reserved keywords most likely to be used as names. Quoting a few extra
// names costs nothing, missing one breaks the statement.
func QuoteIdent(s string) string {
	plain := s != "" && !reservedWords[s]
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && ((c >= '0' && c <= '9') || c == '$'))
	}
	if plain {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// reservedWords are PostgreSQL's reserved keywords (those that cannot be a
// column or table name unquoted).
var reservedWords = map[string]bool{
	"all": true, "analyse": true, "analyze": true, "and": true, "any": true, "array": true, "as": true,
	"asc": true, "asymmetric": true, "both": true, "case": true, "cast": true, "check": true, "collate": true,
	"column": true, "constraint": true, "create": true, "current_catalog": true, "current_date": true,
	"current_role": true, "current_time": true, "current_timestamp": true, "current_user": true,
	"default": true, "deferrable": true, "desc": true, "distinct": true, "do": true, "else": true,
	"end": true, "except": true, "false": true, "fetch": true, "for": true, "foreign": true, "from": true,
	"grant": true, "group": true, "having": true, "in": true, "initially": true, "intersect": true,
	"into": true, "lateral": true, "leading": true, "limit": true, "localtime": true, "localtimestamp": true,
	"not": true, "null": true, "offset": true, "on": true, "only": true, "or": true, "order": true,
	"placing": true, "primary": true, "references": true, "returning": true, "select": true,
	"session_user": true, "some": true, "symmetric": true, "system_user": true, "table": true, "then": true,
	"to": true, "trailing": true, "true": true, "union": true, "unique": true, "user": true, "using": true,
	"variadic": true, "when": true, "where": true, "window": true, "with": true,
}
