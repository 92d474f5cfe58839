package config

import (
	"errors"
	"fmt"
	"strings"
)

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1: longer names are
// silently truncated by the server, so two configured names could collide.
const maxIdentifierBytes = 63

// TableName is a schema-qualified table.
type TableName struct {
	Schema string
	Name   string
}

// ParseTableName parses "schema.name" with PostgreSQL identifier rules:
// unquoted parts fold to lower case; double-quoted parts keep their case and
// may contain dots ("" is an escaped quote). The schema is required, because
// search_path differs between source, target and Trellara's own sessions.
func ParseTableName(s string) (TableName, error) {
	schema, rest, err := parseIdent(s)
	if err != nil {
		return TableName{}, err
	}
	if !strings.HasPrefix(rest, ".") {
		return TableName{}, errors.New("must be schema-qualified, e.g. public.sales")
	}
	name, rest, err := parseIdent(rest[1:])
	if err != nil {
		return TableName{}, err
	}
	if rest != "" {
		return TableName{}, errors.New("must be schema.name; quote names that contain dots (\"my.table\")")
	}
	return TableName{Schema: schema, Name: name}, nil
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
			if b.Len() > maxIdentifierBytes {
				return "", "", fmt.Errorf("has a name longer than %d bytes", maxIdentifierBytes)
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
	if end > maxIdentifierBytes {
		return "", "", fmt.Errorf("has a name longer than %d bytes", maxIdentifierBytes)
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

// String renders the name as SQL would need it: parts quoted only when
// folding would change them.
func (t TableName) String() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Name) }

func quoteIdent(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && ((c >= '0' && c <= '9') || c == '$'))
	}
	if plain {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
