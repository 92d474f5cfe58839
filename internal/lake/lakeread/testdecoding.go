package lakeread

import (
	"fmt"
	"strconv"
	"strings"
)

// test_decoding is PostgreSQL's example output plugin (contrib). Read with
// pg_logical_slot_get_changes(slot, NULL, NULL, 'include-xids', '1',
// 'skip-empty-xacts', '1'), each row (lsn, xid, data) is one line:
//
//	BEGIN 741
//	table public.items: INSERT: id[bigint]:1001 v[text]:'row 1' n[integer]:0
//	table public.items: UPDATE: id[bigint]:7 v[text]:'seed 7+' n[integer]:1
//	table public.items: UPDATE: old-key: id[bigint]:996 new-tuple: id[bigint]:100996 ...
//	table public.items: DELETE: id[bigint]:998
//	COMMIT 741
//
// A value is a single-quoted literal ('' inside is one quote), or bare
// (numbers, booleans, null, unchanged-toast-datum); a column is
// name[type]:value, the name and the table's parts quoted like SQL
// identifiers when they need it. The COMMIT row's lsn is the end of the
// commit record, so it orders transactions by commit as commit LSNs do.

// TDLine is one parsed test_decoding line.
type TDLine struct {
	Kind  string // BEGIN, COMMIT, INSERT, UPDATE, DELETE, TRUNCATE, MESSAGE
	Xid   int64  // BEGIN and COMMIT
	Table string // schema.name, unquoted
	// Cols is the new tuple (INSERT, UPDATE) or the old one (DELETE); OldKey
	// the old-key of an UPDATE that carried one. nil values are NULL.
	Cols, OldKey []TDCol
	NoData       bool // "(no-tuple-data)"
}

// TDCol is one column value.
type TDCol struct {
	Name, Type string
	Value      *string
	Unchanged  bool // unchanged-toast-datum: the value was not sent
}

// tdLineBytesMax bounds one line: a row's text form.
const tdLineBytesMax = 64 << 20

// ParseTestDecoding parses one line of test_decoding output.
func ParseTestDecoding(s string) (TDLine, error) {
	if len(s) > tdLineBytesMax {
		return TDLine{}, fmt.Errorf("test_decoding: a line of %d bytes, over %d", len(s), tdLineBytesMax)
	}
	for _, k := range []string{"BEGIN", "COMMIT"} {
		if rest, ok := strings.CutPrefix(s, k+" "); ok {
			x, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return TDLine{}, fmt.Errorf("test_decoding: %q: xid: %v (include-xids must be on)", s, err)
			}
			return TDLine{Kind: k, Xid: x}, nil
		}
	}
	if strings.HasPrefix(s, "message:") {
		return TDLine{Kind: "MESSAGE"}, nil
	}
	rest, ok := strings.CutPrefix(s, "table ")
	if !ok {
		return TDLine{}, fmt.Errorf("test_decoding: %q: not a BEGIN, COMMIT, table or message line", trunc(s))
	}
	schema, rest, err := tdIdent(rest)
	if err != nil || !strings.HasPrefix(rest, ".") {
		return TDLine{}, fmt.Errorf("test_decoding: %q: table name", trunc(s))
	}
	name, rest, err := tdIdent(rest[1:])
	if err != nil || !strings.HasPrefix(rest, ": ") {
		return TDLine{}, fmt.Errorf("test_decoding: %q: table name", trunc(s))
	}
	l := TDLine{Table: schema + "." + name}
	kind, rest, ok := strings.Cut(rest[2:], ":")
	if !ok {
		return TDLine{}, fmt.Errorf("test_decoding: %q: no action", trunc(s))
	}
	l.Kind = kind
	rest = strings.TrimPrefix(rest, " ")
	switch kind {
	case "TRUNCATE":
		return l, nil
	case "INSERT", "UPDATE", "DELETE":
	default:
		return TDLine{}, fmt.Errorf("test_decoding: %q: action %q", trunc(s), kind)
	}
	if rest == "(no-tuple-data)" {
		l.NoData = true
		return l, nil
	}
	if kind == "UPDATE" {
		if r, ok := strings.CutPrefix(rest, "old-key: "); ok {
			if l.OldKey, rest, err = tdCols(r, "new-tuple: "); err != nil {
				return TDLine{}, fmt.Errorf("test_decoding: %q: old-key: %v", trunc(s), err)
			}
			if r, ok = strings.CutPrefix(rest, "new-tuple: "); !ok {
				return TDLine{}, fmt.Errorf("test_decoding: %q: old-key without new-tuple", trunc(s))
			}
			rest = r
		}
	}
	if l.Cols, rest, err = tdCols(rest, ""); err != nil {
		return TDLine{}, fmt.Errorf("test_decoding: %q: %v", trunc(s), err)
	}
	if rest != "" {
		return TDLine{}, fmt.Errorf("test_decoding: %q: trailing %q", trunc(s), trunc(rest))
	}
	return l, nil
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// tdIdent reads an identifier, quoted ("a""b") or bare (up to . : [ or
// space).
func tdIdent(s string) (string, string, error) {
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				return b.String(), s[i+1:], nil
			}
			b.WriteByte(s[i])
		}
		return "", "", fmt.Errorf("unterminated quoted identifier")
	}
	i := strings.IndexAny(s, ".:[ ")
	if i <= 0 {
		return "", "", fmt.Errorf("no identifier")
	}
	return s[:i], s[i:], nil
}

// tdCols reads name[type]:value columns separated by spaces until the end
// of s or a column list that starts with stop.
func tdCols(s, stop string) ([]TDCol, string, error) {
	var out []TDCol
	for s != "" {
		if stop != "" && strings.HasPrefix(s, stop) {
			break
		}
		name, rest, err := tdIdent(s)
		if err != nil || !strings.HasPrefix(rest, "[") {
			return nil, "", fmt.Errorf("column %d: name", len(out)+1)
		}
		end := strings.Index(rest, "]:")
		if end < 0 {
			return nil, "", fmt.Errorf("column %s: type", name)
		}
		c := TDCol{Name: name, Type: rest[1:end]}
		rest = rest[end+2:]
		switch {
		case strings.HasPrefix(rest, "'"):
			v, r, err := tdQuoted(rest)
			if err != nil {
				return nil, "", fmt.Errorf("column %s: %v", name, err)
			}
			c.Value, rest = &v, r
		default:
			v := rest
			if i := strings.IndexByte(rest, ' '); i >= 0 {
				v, rest = rest[:i], rest[i:]
			} else {
				rest = ""
			}
			switch v {
			case "null":
			case "unchanged-toast-datum":
				c.Unchanged = true
			default:
				if len(v) > 1 && (v[0] == 'B' || v[0] == 'X') && v[1] == '\'' {
					// bit strings: B'0101'; the text form is the digits
					v = strings.Trim(v[1:], "'")
				}
				c.Value = &v
			}
		}
		out = append(out, c)
		if rest == "" {
			s = ""
			break
		}
		if rest[0] != ' ' {
			return nil, "", fmt.Errorf("column %s: no space after the value", name)
		}
		rest = rest[1:]
		s = rest
	}
	return out, s, nil
}

func tdQuoted(s string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] == '\'' {
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			return b.String(), s[i+1:], nil
		}
		b.WriteByte(s[i])
	}
	return "", "", fmt.Errorf("unterminated quoted value")
}
