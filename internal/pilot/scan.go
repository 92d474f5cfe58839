package pilot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellara/trellara/internal/config"
)

// ErrSecret is what Build returns when a file would carry a credential.
var ErrSecret = errors.New("a package file contains a credential of the config")

// ErrDataCollision is what Build returns when a password of the config is
// also a name in the data the package reports (a table called like the
// password): not a leak by the package, but the package cannot tell the
// two apart, and the password is guessable from the database's catalog.
var ErrDataCollision = errors.New("a password of the config is also a name in the data")

// shortSecretBytes: a credential shorter than this is looked for only in
// credential contexts (after "password=", between ":" and "@", as a JSON
// or YAML password value). Anywhere else a 1–3 character string matches
// ordinary text ("a", "id") and would refuse every package, revealing the
// password by which files it refused.
const shortSecretBytes = 4

// needle is one credential to look for, named by its position.
type needle struct {
	what  string // "the password of source.database_url"
	value string
	// password: the value is a password (not a whole URL); a hit bounded
	// like a name is then a collision with data.
	password bool
}

func needles(sec config.Secrets) []needle {
	var out []needle
	add := func(what string, s config.Secret) {
		v := s.Reveal()
		if v == "" {
			return
		}
		out = append(out, needle{what: what, value: v})
		if c, err := pgconn.ParseConfig(v); err == nil && c.Password != "" {
			out = append(out, needle{what: "the password of " + what, value: c.Password, password: true})
		}
	}
	add("source.database_url", sec.SourceDatabaseURL)
	add("the target's database_url", sec.TargetDatabaseURL)
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range sec.SinkDatabaseURLs {
			if !yield(n) {
				return
			}
		}
	}) {
		add("sink "+n+"'s database_url", sec.SinkDatabaseURLs[n])
	}
	if v := sec.KafkaSASLPassword.Reveal(); v != "" {
		out = append(out, needle{what: "transport.kafka.sasl.password", value: v, password: true})
	}
	return out
}

// encodings are the forms a value takes in the package's files: as it is,
// JSON-escaped (with and without Go's HTML-safe escapes), HTML-escaped
// (both quote spellings) and percent-encoded (query and path forms).
func encodings(v string) []string {
	forms := []string{v}
	add := func(s string) {
		if !slices.Contains(forms, s) {
			forms = append(forms, s)
		}
	}
	if b, err := json.Marshal(v); err == nil {
		add(string(b[1 : len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		add(string(b[1 : len(b)-1]))
	}
	h := html.EscapeString(v)
	add(h)
	add(strings.NewReplacer("&#34;", "&quot;", "&#39;", "&apos;").Replace(h))
	add(url.QueryEscape(v))
	add(url.PathEscape(v))
	add(strings.ReplaceAll(url.QueryEscape(v), "+", "%20"))
	return forms
}

// credentialContexts are the places a short credential is looked for: f is
// one encoded form.
func credentialContexts(f string) []string {
	return []string{":" + f + "@", "password=" + f + " ", "password=" + f + "&", "password=" + f + "'", "password='" + f + "'",
		`"password":"` + f + `"`, `"password": "` + f + `"`, "password: " + f + "\n", "password: " + f + " "}
}

// scanSecrets refuses a package in which any file holds a credential the
// config resolves to, or the password inside a connection string, in any
// of its encodings. The message names the file and the credential's
// position, never the value. A password found bounded like a name (a whole
// JSON string, or a schema.table part) is a collision with data, and said
// so with what to do; anything else is a leak, a bug.
func scanSecrets(p *Package, sec config.Secrets) error {
	ns := needles(sec)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range p.Files {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		data := p.Files[name]
		for _, n := range ns {
			found, asNameOnly := false, true
			for _, f := range encodings(n.value) {
				if len(n.value) < shortSecretBytes {
					for _, c := range credentialContexts(f) {
						if bytes.Contains(data, []byte(c)) {
							return leak(name, n)
						}
					}
					continue
				}
				if bytes.Contains(data, []byte(f)) {
					// Every form is looked at before deciding: a name in one
					// place does not excuse the password in a URL elsewhere.
					found = true
					asNameOnly = asNameOnly && n.password && onlyAsName(data, f)
				}
			}
			switch {
			case found && asNameOnly:
				return fmt.Errorf("pilot: %s: %s is also a name in the data this file reports (a table, schema, column or other identifier spelled the same): %w. "+
					"Nothing was written: the package cannot tell that name from a leaked credential, and a password that is a name in the database is guessable from its catalog. "+
					"Change the password (ALTER ROLE ... PASSWORD ...), update the secret its reference names, and run trellara pilot-package again",
					name, n.what, ErrDataCollision)
			case found:
				return leak(name, n)
			}
		}
	}
	return nil
}

func leak(file string, n needle) error {
	return fmt.Errorf("pilot: %s: holds %s: %w; nothing was written (report this as a bug: every file is built from redacted sources)", file, n.what, ErrSecret)
}

// onlyAsName reports whether every occurrence of f in data is bounded like
// a name in JSON: by quotes or a dot (a whole string, or a part of
// "schema.table"), and not the value of a key in a credential position
// ("password": "...").
func onlyAsName(data []byte, f string) bool {
	bound := func(c byte) bool { return c == '"' || c == '.' || c == '\\' } // \" is a quoted identifier's quote in JSON
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(f))
		if j < 0 {
			return true
		}
		at := i + j
		end := at + len(f)
		if at == 0 || end >= len(data) || !bound(data[at-1]) || !bound(data[end]) {
			return false
		}
		if key := jsonKeyBefore(data[:at-1]); key != "" && config.IsCredentialKey(key) {
			return false
		}
		i = at + 1
	}
}

// jsonKeyBefore returns KEY when b ends with `"KEY": ` (a JSON member's
// key just before its string value), or "".
func jsonKeyBefore(b []byte) string {
	b = bytes.TrimRight(b, " \t\n")
	if !bytes.HasSuffix(b, []byte(":")) {
		return ""
	}
	b = bytes.TrimRight(b[:len(b)-1], " \t\n")
	if !bytes.HasSuffix(b, []byte(`"`)) {
		return ""
	}
	b = b[:len(b)-1]
	k := bytes.LastIndexByte(b, '"')
	if k < 0 {
		return ""
	}
	return string(b[k+1:])
}
