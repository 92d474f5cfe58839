package config

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Redact returns a shareable copy of a YAML configuration: safe to paste
// into a ticket or a pilot package. It works on any well-formed YAML, valid
// configuration or not, because a broken file is exactly what gets shared.
//
// What it removes, and why each rule exists:
//
//   - The value of any key in a credential position (credential.go: named
//     like a credential — password, passwd, pwd, passphrase, secret, token,
//     key, api_key, private_key, credential — or like a connection string —
//     database_url, url, uri, dsn) becomes "<redacted>", unless the value
//     is a well-formed reference ({env: NAME} or {file: /absolute/path}):
//     references name where a secret lives, not the secret, and keeping
//     them keeps the copy useful. A connection string under a connection
//     key is scrubbed by its structure (below). A malformed reference
//     ({env: "Pw-7rX9!q"}, {file: {x: ...}}) is redacted whole. Keys ending
//     in _file, _path or _dir (tls.key_file) hold paths and are kept.
//   - A PostgreSQL URL anywhere in a value keeps only scheme, host, port and
//     database name: postgres://<redacted>@db.internal:5432/sales. User and
//     password are removed; query parameters other than connection options
//     that carry no credential (sslmode, connect_timeout, ...) are redacted.
//     The host stays because support needs to know which database; a URL
//     without its user and password is not a complete connection string.
//   - A keyword/value connection string ("host=db user=app password=x")
//     keeps host, hostaddr, port, dbname and the same harmless options; every
//     other value, user included, becomes <redacted>.
//   - Any other URL keeps scheme and host only; its user info, path, query
//     and fragment are redacted (webhook and API URLs carry tokens in paths).
//   - "name: value" or "name=value" text inside a value, where name looks
//     like a credential, has its value redacted.
//   - Every comment is dropped: comments are free text, often an old
//     credential commented out, and cannot be vetted.
//   - Binary scalars (!!binary) are redacted: they cannot be read to vet.
//
// Anchors are kept; a credential key whose value is an alias has the
// anchored value redacted at its definition too.
func Redact(raw []byte) ([]byte, error) {
	if len(raw) > maxConfigBytes {
		return nil, &ValidationError{Errors: []FieldError{{Message: "input larger than 1 MiB; this is not a Trellara configuration",
			Fix: "pass the path of a trellara.yml"}}}
	}
	docs, err := parseDocuments(raw)
	if err != nil {
		_, fe := parseYAML(raw) // same message and line as Load gives
		if fe == nil {
			fe = &FieldError{Message: "invalid YAML"}
		}
		return nil, &ValidationError{Errors: []FieldError{*fe}}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for i, d := range docs {
		redactNode(d)
		if i == 0 {
			d.HeadComment = "Redacted copy (trellara config redact): credentials, tokens, keys and connection-string\n" +
				"credentials removed; {env: ...} and {file: ...} references kept; comments dropped."
		}
		if err := encodeNode(enc, d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: redact: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeNode encodes one document, turning an encoder panic into an error
// for the same reason parseDocuments does.
func encodeNode(enc *yaml.Encoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("config: redact: YAML encoder failed: %v", r)
		}
	}()
	if err := enc.Encode(n); err != nil {
		return fmt.Errorf("config: redact: %w", err)
	}
	return nil
}

func redactNode(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			redactNode(k)
			if k.Kind == yaml.ScalarNode && IsCredentialKey(k.Value) {
				redactCredential(k.Value, v) // the one rule (credential.go)
				continue
			}
			redactNode(v)
		}
	case yaml.ScalarNode:
		if n.ShortTag() == "!!binary" {
			setRedacted(n)
			return
		}
		if s := scrubScalar(n.Value); s != n.Value {
			n.Value, n.Tag, n.Style = s, "!!str", 0
		}
	case yaml.AliasNode:
		// The anchored node is redacted where it is defined.
	}
}

// redactAll replaces a credential's value, whatever its shape, with the
// placeholder. An alias is followed so the anchored value goes too.
func redactAll(n *yaml.Node) {
	if n.Kind == yaml.AliasNode {
		if n.Alias != nil && !isRefNode(n.Alias) {
			setRedacted(n.Alias)
		}
		return
	}
	setRedacted(n)
}

func setRedacted(n *yaml.Node) {
	n.Kind, n.Tag, n.Style, n.Value, n.Content = yaml.ScalarNode, "!!str", 0, redacted, nil
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
}

// isRefNode reports whether n is a credential reference: {env: NAME} with a
// variable-shaped name, or {file: /absolute/path}. Anything else under a
// credential key — a password typed as {env: hunter2!} — is redacted.
func isRefNode(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		return false
	}
	k, v := n.Content[0], n.Content[1]
	if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
		return false
	}
	switch k.Value {
	case "env":
		return ValidEnvName(v.Value)
	case "file":
		return ValidFilePath(v.Value)
	}
	return false
}

var (
	// Substrings that mark a key as a credential wherever they appear.
	secretSubstrings = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "privatekey", "credential"}
	// Whole words that mark a key as a credential ("key", but not "keyspace").
	secretWords = map[string]bool{"key": true, "keys": true, "pwd": true, "pass": true, "pw": true}
	// A last word that makes the key a location, not a value (tls.key_file).
	pathWords = map[string]bool{"file": true, "path": true, "dir": true, "env": true}
)

// isSecretKey reports whether a mapping key names a credential. Names are
// split on punctuation and camelCase: "sasl_password", "apiKey", "ssl-key".
func isSecretKey(name string) bool {
	words := splitWords(name)
	if len(words) == 0 {
		return false
	}
	if len(words) > 1 && pathWords[words[len(words)-1]] {
		return false
	}
	joined := strings.Join(words, "")
	for _, s := range secretSubstrings {
		if strings.Contains(joined, s) {
			return true
		}
	}
	for _, w := range words {
		if secretWords[w] {
			return true
		}
	}
	return false
}

func splitWords(s string) []string {
	var words []string
	var cur []rune
	prevLower := false
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && prevLower {
				flush()
			}
			cur = append(cur, r)
			prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
		default:
			flush()
			prevLower = false
		}
	}
	flush()
	return words
}

var (
	urlRE    = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://\S*`)
	schemeRE = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*://`)
	// userinfoRE catches "user:password@host" without a scheme.
	userinfoRE = regexp.MustCompile(`(^|[\s,;=(])[^\s:@/,;=(]+:[^\s@/][^\s@]*@`)
	// secretAssignRE catches "password=..." or "token: ..." inside free text.
	secretAssignRE = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|pwd|passphrase|secret|token|api_?key|private_?key|credential)[A-Za-z0-9_.-]*)(\s*[=:]\s*)('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|\S+)`)
)

// scrubScalar removes credentials from one YAML value (see Redact). Values
// without a credential come back unchanged.
func scrubScalar(s string) string {
	var out string
	if schemeRE.MatchString(s) {
		// The whole value is one URL: scrub it whole, so a password with a
		// raw space in it ("postgres://u:pa ss@h/db") is still user info.
		out = scrubURL(strings.TrimSpace(s))
	} else {
		out = urlRE.ReplaceAllStringFunc(s, scrubURL)
	}
	if kvs, ok := parseConninfo(out); ok {
		out = renderConninfo(kvs)
	}
	return scrubAssignments(out)
}

// scrubAssignments redacts "user:password@" and "password=..." shapes in
// text whose URLs are already scrubbed.
func scrubAssignments(out string) string {
	out = userinfoRE.ReplaceAllString(out, "${1}"+redacted+"@")
	return secretAssignRE.ReplaceAllStringFunc(out, func(m string) string {
		sub := secretAssignRE.FindStringSubmatch(m)
		if strings.HasPrefix(sub[3], redacted) {
			return m // already scrubbed above; the rest of the match is scrubbed output too
		}
		return sub[1] + sub[2] + redacted
	})
}

// RedactConnString returns a connection string (URL or keyword/value) with
// its credentials removed by its structure: the URL's user info, the
// password and every other non-harmless parameter become <redacted>; host,
// port and database stay, so the message still says where it connected.
func RedactConnString(conn string) string { return scrubScalar(conn) }

// ScrubConnText removes credentials from text that may quote connection
// strings, such as a driver's or server's error. It is the one scrubber for
// such text; nothing else searches text for a password.
//
// Each occurrence of one of conns (the connection strings in use) is
// replaced whole by RedactConnString of it, and any other URL or
// "password=..." in the text is redacted by its structure. The password is
// never searched for as a substring: a short one ("a") or a common word
// ("failed") would be cut out of ordinary words, mangling the message and
// revealing the password by where the cuts fall.
func ScrubConnText(text string, conns ...string) string {
	// Whole connection strings first, set aside behind placeholders so the
	// structural pass neither re-scrubs their redacted form nor misses a
	// password its patterns cannot see (a raw space inside a URL's).
	var kept []string
	for _, c := range conns {
		r := RedactConnString(c)
		if r == c || !strings.Contains(text, c) {
			continue // nothing to hide in it, or not quoted
		}
		text = strings.ReplaceAll(text, c, fmt.Sprintf("\x00%d\x00", len(kept)))
		kept = append(kept, r)
	}
	text = scrubAssignments(urlRE.ReplaceAllStringFunc(text, scrubURL))
	for i, r := range kept {
		text = strings.ReplaceAll(text, fmt.Sprintf("\x00%d\x00", i), r)
	}
	return text
}

// ScrubConnError returns err with its message passed through ScrubConnText;
// errors.Is and errors.As still see the original chain. An error with
// nothing to scrub is returned as it is.
func ScrubConnError(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	msg := ScrubConnText(err.Error(), conns...)
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Unwrap keeps classification working; printing uses Error only.
func (e *scrubbedError) Unwrap() error { return e.err }

// Connection parameters whose values carry no credential and help support:
// the endpoint and how the connection is made.
var harmlessConnParams = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "sslmode": true,
	"connect_timeout": true, "application_name": true, "target_session_attrs": true,
	"load_balance_hosts": true, "gssencmode": true, "channel_binding": true,
}

// libpqParams is the libpq keyword set; a keyword/value string needs at
// least one of them to be treated as a connection string.
var libpqParams = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true, "password": true,
	"passfile": true, "sslmode": true, "sslcert": true, "sslkey": true, "sslpassword": true,
	"sslrootcert": true, "sslcrl": true, "sslcrldir": true, "sslsni": true, "service": true,
	"options": true, "application_name": true, "fallback_application_name": true,
	"connect_timeout": true, "client_encoding": true, "target_session_attrs": true,
	"load_balance_hosts": true, "requiressl": true, "gssencmode": true, "krbsrvname": true,
	"channel_binding": true, "require_auth": true, "sslnegotiation": true, "keepalives": true,
	"replication": true, "gsslib": true, "sslcompression": true, "ssl_min_protocol_version": true,
	"ssl_max_protocol_version": true, "requirepeer": true, "oauth_issuer": true, "oauth_client_id": true,
	"oauth_client_secret": true, "oauth_scope": true, "min_protocol_version": true, "max_protocol_version": true,
}

var paramNameRE = regexp.MustCompile(`^[a-z_]+$`)

// keepParam reports whether a connection parameter's value may be shown.
// A dbname can itself be a complete connection string in libpq, so one that
// looks like one is not kept.
func keepParam(key, value string) bool {
	if !harmlessConnParams[key] {
		return false
	}
	return !(key == "dbname" && (strings.Contains(value, "=") || strings.Contains(value, "://")))
}

// scrubURL rewrites one URL. The user info ends at the LAST '@': a password
// containing '/', '?', '#' or '@' unescaped is still entirely inside it.
func scrubURL(u string) string {
	scheme, rest, _ := strings.Cut(u, "://")
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		b.WriteString(redacted + "@")
		rest = rest[i+1:]
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	rest, query, hasQuery := strings.Cut(rest, "?")
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	b.WriteString(host)
	pg := strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")
	switch {
	case path == "" || path == "/":
		b.WriteString(path)
	case pg && !strings.ContainsAny(path, "=:"):
		b.WriteString(path) // the database name
	default:
		b.WriteString("/" + redacted)
	}
	if hasQuery {
		b.WriteString("?")
		if !pg {
			b.WriteString(redacted)
		} else {
			params := strings.Split(query, "&")
			for i, p := range params {
				if i > 0 {
					b.WriteString("&")
				}
				k, v, _ := strings.Cut(p, "=")
				if uv, err := url.QueryUnescape(v); err == nil {
					v = uv
				} else {
					v = "=" // undecodable: never kept
				}
				switch {
				case keepParam(k, v):
					b.WriteString(p)
				case libpqParams[k]:
					b.WriteString(k + "=" + redacted)
				default:
					b.WriteString(redacted)
				}
			}
		}
	}
	if hasFrag && frag != "" {
		b.WriteString("#" + redacted)
	}
	return b.String()
}

type connParam struct{ key, raw string }

// parseConninfo parses a libpq keyword/value string ("host=db port=5432
// password='a b'"). ok is false unless the whole string parses, every key is
// a plain name and at least one is a libpq keyword.
func parseConninfo(s string) (params []connParam, ok bool) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	known := false
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) || s[i] != '=' || !paramNameRE.MatchString(key) {
			return nil, false
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				if s[i] == '\\' {
					i += 2
					continue
				}
				if s[i] == '\'' {
					i++
					closed = true
					break
				}
				i++
			}
			if !closed {
				return nil, false
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		if i > len(s) {
			i = len(s)
		}
		params = append(params, connParam{key: key, raw: s[vstart:i]})
		known = known || libpqParams[key]
	}
	return params, known
}

func renderConninfo(params []connParam) string {
	parts := make([]string, len(params))
	for i, p := range params {
		if keepParam(p.key, strings.Trim(p.raw, "'")) {
			parts[i] = p.key + "=" + p.raw
		} else {
			parts[i] = p.key + "=" + redacted
		}
	}
	return strings.Join(parts, " ")
}
