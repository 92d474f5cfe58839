package config

import (
	"fmt"
	"net/url"
	"strings"
)

// The production TLS rule for PostgreSQL (docs/SECURITY.md). In
// environment: production every PostgreSQL connection — the source, each
// sink's target, fleet.yml's sql-postgres lake catalog — must verify the
// server it sends its password to:
//
//   - sslmode=verify-full (certificate chain and host name), or
//     sslmode=verify-ca (chain only) with a stated reason in the
//     connection's verify_ca_reason key;
//   - sslrootcert naming the CA file by absolute path (a reference, not
//     the certificate itself).
//
// Without sslmode a client tries TLS and falls back to plaintext, and
// still sends a SCRAM exchange or a password; require encrypts but any
// host in the path can present a certificate. A connection over a Unix
// socket (every host a directory path) is local and has no TLS; it passes.
// Outside production nothing is refused: evaluation flows keep working
// without TLS, and PlaintextNote says so.
//
// The rule runs on the resolved connection strings (ResolveSecrets), so
// `config validate` refuses a config before any connection is made.

// TLSMode is what a PostgreSQL connection string says about TLS.
type TLSMode struct {
	SSLMode     string // as written; "" when absent
	SSLRootCert string // as written; "" when absent
	UnixSocket  bool   // every host is a Unix socket directory
}

// Verified reports whether the connection verifies the server's
// certificate against a named CA file.
func (m TLSMode) Verified() bool {
	return m.UnixSocket || ((m.SSLMode == "verify-full" || m.SSLMode == "verify-ca") && ValidFilePath(m.SSLRootCert))
}

// ParseTLSMode reads sslmode, sslrootcert and the hosts of a libpq URL or
// keyword/value string. ok is false when conn is neither.
func ParseTLSMode(conn string) (m TLSMode, ok bool) {
	params := map[string]string{}
	var hosts []string
	if schemeRE.MatchString(conn) {
		u, err := url.Parse(strings.TrimSpace(conn))
		if err != nil {
			return m, false
		}
		for k, v := range u.Query() {
			params[k] = v[0]
		}
		for _, h := range strings.Split(u.Host, ",") {
			if h != "" {
				hosts = append(hosts, h)
			}
		}
		if h, ok := params["host"]; ok {
			hosts = strings.Split(h, ",")
		}
	} else {
		kvs, ok := parseConninfo(conn)
		if !ok {
			return m, false
		}
		for _, kv := range kvs {
			params[kv.key] = strings.Trim(kv.raw, "'")
		}
		if h, ok := params["host"]; ok {
			hosts = strings.Split(h, ",")
		}
	}
	m.SSLMode, m.SSLRootCert = params["sslmode"], params["sslrootcert"]
	m.UnixSocket = len(hosts) > 0
	for _, h := range hosts {
		if !strings.HasPrefix(h, "/") && !strings.HasPrefix(h, "%2F") && !strings.HasPrefix(h, "%2f") {
			m.UnixSocket = false
		}
	}
	return m, true
}

// CheckPostgresTLS applies the production rule to the PostgreSQL
// connection string conn found at key (source.database_url, ...).
// reasonKey is the key that may state why verify-ca is enough and reason
// its value. The message names the key and the fix, never conn.
func CheckPostgresTLS(key, conn, reasonKey, reason string) *FieldError {
	m, ok := ParseTLSMode(conn)
	fix := fmt.Sprintf("end the connection string %s names with sslmode=verify-full&sslrootcert=/etc/trellara/pg-ca.pem "+
		"(keyword form: sslmode=verify-full sslrootcert=/etc/trellara/pg-ca.pem), the CA file that signed the server's certificate (docs/SECURITY.md)", key)
	fail := func(format string, args ...any) *FieldError {
		return &FieldError{Path: key, Message: key + ": " + fmt.Sprintf(format, args...) + "; environment production requires verified TLS to PostgreSQL", Fix: fix}
	}
	switch {
	case !ok:
		return fail("is not a PostgreSQL URL or keyword/value connection string (not shown: it may be the credential itself)")
	case m.UnixSocket:
		return nil
	case m.SSLMode == "":
		return fail("has no sslmode: the client tries TLS, falls back to plaintext and still sends its password")
	case m.SSLMode == "verify-ca" && strings.TrimSpace(reason) == "":
		f := fail("has sslmode=verify-ca, which checks the CA but not the host name, and %s states no reason", reasonKey)
		f.Fix = fmt.Sprintf(`use sslmode=verify-full, or say why verify-ca is enough in %s, e.g. %s: "the server is reached by IP through a private link"`, reasonKey, lastSegment(reasonKey))
		return f
	case m.SSLMode != "verify-full" && m.SSLMode != "verify-ca":
		return fail("has sslmode=%s, which does not verify the server (anyone in the path can present a certificate)", quoteValue(m.SSLMode))
	case m.SSLRootCert == "":
		return fail("has sslmode=%s but no sslrootcert: name the CA file that signed the server's certificate", m.SSLMode)
	case !ValidFilePath(m.SSLRootCert):
		return fail("has an sslrootcert that is not an absolute path to a CA file")
	}
	return nil
}

// pgConn is one PostgreSQL connection of a config: its key, the key that
// may state why verify-ca is enough, and that reason.
type pgConn struct {
	key, reasonKey, reason string
	secret                 Secret
}

func (c *Config) pgConns(sec Secrets) []pgConn {
	out := []pgConn{{"source.database_url", "source.verify_ca_reason", c.Source.VerifyCAReason, sec.SourceDatabaseURL}}
	for _, s := range c.Sinks {
		if s.Target == nil {
			continue
		}
		tp := c.targetPath(s)
		out = append(out, pgConn{tp + ".database_url", tp + ".verify_ca_reason", s.Target.VerifyCAReason, sec.SinkDatabaseURLs[s.Name]})
	}
	return out
}

// checkTLS applies the production rule to every resolved PostgreSQL
// connection of c.
func (c *Config) checkTLS(sec Secrets) []FieldError {
	if c.Environment != Production {
		return nil
	}
	var errs []FieldError
	for _, p := range c.pgConns(sec) {
		if p.secret.IsZero() {
			continue
		}
		if fe := CheckPostgresTLS(p.key, p.secret.Reveal(), p.reasonKey, p.reason); fe != nil {
			fe.Line = c.line(p.key)
			errs = append(errs, *fe)
		}
	}
	return errs
}

// PlaintextNote is one line for `trellara check` and status outside
// production: which PostgreSQL connections do not verify TLS, and that
// production would refuse them. "" when every connection verifies.
func (c *Config) PlaintextNote(sec Secrets) string {
	var keys []string
	for _, p := range c.pgConns(sec) {
		if p.secret.IsZero() {
			continue
		}
		if m, ok := ParseTLSMode(p.secret.Reveal()); !ok || !m.Verified() {
			keys = append(keys, p.key)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf("note: %s connect without verified TLS (no sslmode=verify-full with sslrootcert): fine for environment %s, refused in production (docs/SECURITY.md)",
		strings.Join(keys, ", "), c.Environment)
}
