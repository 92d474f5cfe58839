package config

import (
	"net/url"
	"path/filepath"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The one rule of what is secret. Validate, Redact, the decoder's errors,
// the Secret and SecretRef printers and the evidence package's scan all
// decide by the functions of this file:
//
//   - A credential position is a mapping key named like a credential
//     (password, token, key, secret, ...: isSecretKey) or like a connection
//     string (database_url, url, uri, dsn, conninfo: isConnKey). That
//     covers source.database_url, target.database_url,
//     sinks.NAME.target.database_url, transport.kafka.sasl.password and
//     fleet.yml's lake.catalog.uri, and any such key in any YAML.
//   - A value in a credential position is shown only when it is a
//     well-formed reference (ValidEnvName, ValidFilePath): {env: NAME} or
//     {file: /absolute/path}. A connection string there is shown with its
//     credentials removed by its structure (host, port, database and
//     harmless options stay). Everything else — a bare value, a malformed
//     reference ({env: "Pw-7rX9!q"}, {file: relative}, {env: [..]},
//     {file: {..}}), a list, a mapping — is secret, shown nowhere.

// ValidEnvName reports whether s has the shape of an environment variable
// name: a value that does not may be the credential itself.
func ValidEnvName(s string) bool { return envVarRE.MatchString(s) }

// ValidFilePath reports whether s has the shape of a reference's file: an
// absolute path without whitespace or control characters. A value that
// does not may be the credential itself.
func ValidFilePath(s string) bool {
	return filepath.IsAbs(s) && !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// IsCredentialKey reports whether a mapping key is a credential position.
func IsCredentialKey(name string) bool { return isSecretKey(name) || isConnKey(name) }

// connWords are last words that make a key a connection string.
var connWords = map[string]bool{"url": true, "uri": true, "dsn": true, "conninfo": true, "connstr": true}

// isConnKey reports whether a key names a connection string: database_url,
// uri, catalog_dsn, connection_string.
func isConnKey(name string) bool {
	words := splitWords(name)
	if len(words) == 0 {
		return false
	}
	last := words[len(words)-1]
	if connWords[last] {
		return true
	}
	return len(words) >= 2 && words[len(words)-2] == "connection" && last == "string"
}

// isConnString reports whether s is, whole, a connection string whose
// structure Redact can scrub: a URL with a scheme and a host, or a libpq
// keyword/value string. Anything else in a credential position is treated
// as the credential itself.
func isConnString(s string) bool {
	s = strings.TrimSpace(s)
	if schemeRE.MatchString(s) {
		u, err := url.Parse(s)
		if err == nil && u.Host != "" {
			return true
		}
		// A password with characters url.Parse refuses still leaves a host
		// after the last '@'.
		_, rest, _ := strings.Cut(s, "://")
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			rest = rest[i+1:]
		}
		host, _, _ := strings.Cut(rest, "/")
		return host != "" && !strings.ContainsAny(host, " \t")
	}
	_, ok := parseConninfo(s)
	return ok
}

// redactCredential rewrites the value n of credential key k in place, by
// the rule above.
func redactCredential(key string, n *yaml.Node) {
	switch {
	case isRefNode(n):
		redactNode(n) // drop comments; the reference itself stays
	case n.Kind == yaml.ScalarNode && isConnKey(key) && n.ShortTag() == "!!str" && isConnString(n.Value):
		n.HeadComment, n.LineComment, n.FootComment = "", "", ""
		if s := scrubScalar(n.Value); s != n.Value {
			n.Value, n.Tag, n.Style = s, "!!str", 0
		}
	default:
		redactAll(n)
	}
}

// DecodeSecretRef decodes a credential reference in another YAML file of
// Trellara's (fleet.yml's lake.catalog.uri) by the same rule as
// trellara.yml's: {env: NAME}, {file: /absolute/path} or an inline string,
// whose errors never show the value. path is the key's path for messages.
func DecodeSecretRef(path string, n *yaml.Node) (SecretRef, []FieldError) {
	d := &decoder{m: &meta{lines: map[string]int{}, bad: map[string]bool{}}}
	var r SecretRef
	d.secretRef(&r)(path, n)
	if len(d.errs) == 0 {
		if sub, msg, fix := r.shapeError(path); sub != "" {
			d.errs = append(d.errs, NodeError(path+"."+sub, n, fix, "%s", msg))
		}
	}
	r.path = path
	return r, d.errs
}
