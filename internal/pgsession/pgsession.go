// Package pgsession holds the session settings every Trellara connection to
// PostgreSQL runs under, so that a value has one text form end to end.
//
// Values cross Trellara as text: the walsender renders pgoutput columns with
// each type's output function, the snapshot reads COPY text, the applier
// hands that text to the target's input functions, and verify hashes text.
// Several settings change that text, and a database or role can set them
// (ALTER DATABASE ... SET DateStyle = 'SQL, DMY'). Left alone, a source in
// DMY order sends 02/01/2024 and a target in MDY order stores February 1st;
// extra_float_digits 0 drops the last digit of 1/3; sql_standard intervals
// lose the sign of the time part when read back in the postgres style.
//
// PostgreSQL's own subscriber pins DateStyle, IntervalStyle and
// extra_float_digits (and the client encoding) on its replication connection
// (libpqwalreceiver). Trellara pins those and every other setting that
// changes how a value is rendered or read, on every connection: replication,
// snapshot, applier, verify, sidecar and trellara-check. They are sent in
// the startup packet, which outranks ALTER DATABASE/ROLE SET and the
// -c switches of a connection string's options parameter; Confirm then reads
// them back, because a connection pooler may drop startup parameters.
//
// Considered and not pinned: search_path changes the text of reg* values
// and of type names, but user trigger code on the target runs under it, and
// Trellara names every table schema-qualified (verify pins its own);
// timezone_abbreviations only affects input of abbreviations (ISO output
// carries numeric offsets); lc_numeric and lc_time only affect to_char;
// xmlbinary only affects the XML functions.
package pgsession

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Setting is one pinned session setting.
type Setting struct {
	Name  string // as PostgreSQL spells it
	Value string // exactly as current_setting reports it once set
	Why   string // what would change without it
}

// pinned is the list; Pinned hands out copies so nobody can change it.
var pinned = []Setting{
	{"client_encoding", "UTF8",
		"text in any other encoding is not what Go strings (and pgx) carry"},
	{"DateStyle", "ISO, YMD",
		"date and timestamp output (SQL, DMY renders 2024-01-02 as 02/01/2024) and the field order of date input; ISO is year first, so it reads back the same in any order"},
	{"IntervalStyle", "postgres",
		"interval output, and input: sql_standard renders -1 day -02:00:00 as -1 2:00:00 and applies a leading sign to every field"},
	{"extra_float_digits", "3",
		"float4, float8 and geometric output: anything less rounds (1/3 loses a digit); 3 is the shortest exact form on 12+"},
	{"TimeZone", "UTC",
		"timestamptz output carries the session's offset, and timestamp/timestamptz conversions use it"},
	{"bytea_output", "hex",
		"bytea output (escape is another text for the same bytes)"},
	{"lc_monetary", "C",
		"money output and input: the locale's currency symbol, separators and fraction digits"},
	{"xmloption", "content",
		"xml input: document refuses the fragments that content accepts (pg_dump pins it the same way)"},
	{"array_nulls", "on",
		"array input: off reads an unquoted NULL element as the string NULL"},
	{"standard_conforming_strings", "on",
		"string literals: off makes backslashes escapes; pgx's simple protocol (trellara-check) requires on"},
}

// Pinned returns the settings every connection runs under.
func Pinned() []Setting { return append([]Setting(nil), pinned...) }

// Pin makes every connection opened from cfg run under the pinned settings:
// they go into the startup packet, replacing whatever the connection string
// or the libpq environment put there under any spelling (setting names are
// case-insensitive, and two spellings in one packet would leave the winner to
// map order), and Confirm runs once the connection is up, after any
// AfterConnect already set. For a pgx.ConnConfig pass &cfg.Config.
func Pin(cfg *pgconn.Config) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k := range cfg.RuntimeParams {
		for _, s := range pinned {
			if strings.EqualFold(k, s.Name) {
				delete(cfg.RuntimeParams, k)
			}
		}
	}
	for _, s := range pinned {
		cfg.RuntimeParams[s.Name] = s.Value
	}
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		return Confirm(ctx, conn)
	}
}

// confirmSQL reads every pinned setting back in one row.
func confirmSQL() string {
	cols := make([]string, len(pinned))
	for i, s := range pinned {
		cols[i] = "pg_catalog.current_setting('" + s.Name + "')"
	}
	return "SELECT " + strings.Join(cols, ", ")
}

// Confirm checks that conn runs under every pinned setting. It works on
// ordinary and on replication=database connections (one simple query). A
// mismatch means something between Trellara and PostgreSQL dropped the
// startup parameters, and values would be read or written in another text
// form, so the connection must not be used.
func Confirm(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, confirmSQL()).ReadAll()
	if err != nil {
		return fmt.Errorf("pgsession: read back the pinned session settings: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != len(pinned) {
		return fmt.Errorf("pgsession: read back the pinned session settings: unexpected result shape")
	}
	var bad []string
	for i, s := range pinned {
		if got := string(res[0].Rows[0][i]); !strings.EqualFold(got, s.Value) {
			bad = append(bad, fmt.Sprintf("%s is %q, not %q", s.Name, got, s.Value))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("pgsession: the server ignored session settings Trellara sent at connect (%s); "+
			"values would be rendered or read in another text form. A connection pooler or proxy likely dropped "+
			"the startup parameters: connect to PostgreSQL itself, not through the pooler", strings.Join(bad, "; "))
	}
	return nil
}
