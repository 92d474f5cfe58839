package check

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/pgsession"
)

// ConnectOptions bound how long the grader may wait on a sick server.
type ConnectOptions struct {
	ConnectTimeout   time.Duration // default 10s
	StatementTimeout time.Duration // default 5s, per statement, enforced by the server
	ApplicationName  string        // default "trellara-check", unless the URL sets one
}

// Session is a read-only connection plus what is safe to show about it.
type Session struct {
	Conn *pgx.Conn
	// Target is user@host:port/database — never a password.
	Target string
	redact *Redactor
}

// Close closes the connection.
func (s *Session) Close(ctx context.Context) error { return s.Conn.Close(ctx) }

// Connect opens a read-only session from a URL or key=value string, or from
// the libpq environment (PGHOST, PGUSER, PGPASSWORD, PGSSLMODE, ...) when
// connString is empty. TLS follows sslmode exactly as libpq does.
//
// default_transaction_read_only is sent in the startup packet, so the server
// enforces it from the first statement without a SET; lock_timeout keeps a
// catalog read from queueing behind DDL. Errors never contain the password.
func Connect(ctx context.Context, connString string, o ConnectOptions) (*Session, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.StatementTimeout <= 0 {
		o.StatementTimeout = 5 * time.Second
	}
	if o.ApplicationName == "" {
		o.ApplicationName = "trellara-check"
	}
	red := NewRedactor(connString)
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, red.Wrap(fmt.Errorf("check: connection string: %w", err))
	}
	cfg.ConnectTimeout = o.ConnectTimeout
	rp := cfg.RuntimeParams
	rp["default_transaction_read_only"] = "on"
	rp["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	rp["lock_timeout"] = strconv.FormatInt(min(o.StatementTimeout, time.Second).Milliseconds(), 10)
	rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds()*2, 10)
	if rp["application_name"] == "" {
		rp["application_name"] = o.ApplicationName
	}
	// The simple protocol sends one Query per statement: no named prepared
	// statements (safe behind transaction-mode poolers) and a server log with
	// exactly the statements we ran.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	// Numbers and settings are read as text; the simple protocol also
	// needs client_encoding UTF8 and standard_conforming_strings on.
	pgsession.Pin(&cfg.Config)

	target := fmt.Sprintf("%s@%s/%s", cfg.User, hostPort(cfg.Host, cfg.Port), cfg.Database)
	cctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout+time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "unsupported startup parameter") {
			err = fmt.Errorf("%w (a connection pooler refused one of the startup parameters that make the session read-only and pin how values are rendered; connect to PostgreSQL directly)", err)
		}
		return nil, red.Wrap(fmt.Errorf("check: connect to %s: %w", target, err))
	}
	return &Session{Conn: conn, Target: target, redact: red}, nil
}

// Inspect grades the source behind the session (see the package Inspect)
// and names it in the report: Target is user@host:port/database, never a
// password. Errors are scrubbed of the session's secrets.
func (s *Session) Inspect(ctx context.Context, opts Options) (*Report, error) {
	r, err := Inspect(ctx, s.Conn, opts)
	if err != nil {
		return nil, s.Redact(fmt.Errorf("inspect %s: %w", s.Target, err))
	}
	r.Target = s.Target
	return r, nil
}

// Redact removes the session's secrets from an error.
func (s *Session) Redact(err error) error { return s.redact.Wrap(err) }

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s:%d", host, port)
	}
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// Redactor scrubs a connection string's credentials from text. Driver
// errors may quote the connection string, so every error that leaves this
// package passes through one. The scrubbing is config.ScrubConnText's: by
// structure, never by searching the text for the password.
type Redactor struct {
	conns []string
}

// NewRedactor scrubs connString (URL or key=value form).
func NewRedactor(connString string) *Redactor { return &Redactor{conns: []string{connString}} }

// String scrubs s.
func (r *Redactor) String(s string) string { return config.ScrubConnText(s, r.conns...) }

// Wrap returns err with the credentials removed; errors.Is/As still see the
// original chain.
func (r *Redactor) Wrap(err error) error { return config.ScrubConnError(err, r.conns...) }
