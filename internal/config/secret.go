package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
)

const redacted = "<redacted>"

// maxSecretFileBytes bounds what a {file: ...} reference may hold. A
// connection string or password is far smaller; a larger file is almost
// certainly the wrong path, and reading it whole would be unbounded.
const maxSecretFileBytes = 64 << 10

// Secret holds a resolved credential. Every way of printing or encoding it
// yields "<redacted>"; Reveal is the only way to read the value, so a leak
// needs an explicit call that shows up in review.
//
// The value is captured in a closure rather than stored in a field: fmt
// prints an unexported Secret field by reflection, bypassing the methods
// below, and for verbs like %s it dereferences pointers — a closure is the
// one Go value that reflection-based printers can only show as an address.
type Secret struct {
	v func() string
}

// NewSecret wraps a value. Intended for tests and for callers that obtain a
// credential outside the configuration file.
func NewSecret(value string) Secret { return Secret{v: func() string { return value }} }

// Reveal returns the credential. Call it only where the value is handed to a
// driver (pgx, franz-go), never where it could reach a log or a report.
func (s Secret) Reveal() string {
	if s.v == nil {
		return ""
	}
	return s.v()
}

// IsZero reports whether the secret holds no value.
func (s Secret) IsZero() bool { return s.Reveal() == "" }

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v).
func (Secret) GoString() string { return redacted }

// Format implements fmt.Formatter so every verb (%v %+v %#v %s %q %x %d ...)
// prints the same placeholder; without it %x and %q would format the struct.
func (Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON implements json.Marshaler.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler (map keys, XML, slog text).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalYAML implements yaml.Marshaler.
func (Secret) MarshalYAML() (any, error) { return redacted, nil }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// SecretRef is how a credential appears in the configuration file: the name
// of an environment variable, an absolute file path, or — outside production
// only — the value itself ("inline"). References are not secrets and print as
// written; an inline value prints as "<redacted: inline>".
type SecretRef struct {
	Env  string // environment variable holding the value
	File string // absolute path of a file holding the value
	// inline is the literal value written in the file. Unexported so that it
	// can only be reached through Resolve.
	inline Secret

	path string // key path, for error messages ("source.database_url")
	line int    // line of the key in the file, 0 if unknown
}

// EnvRef refers to an environment variable.
func EnvRef(name string) SecretRef { return SecretRef{Env: name} }

// FileRef refers to a file; path must be absolute to pass validation.
func FileRef(path string) SecretRef { return SecretRef{File: path} }

// InlineRef holds a literal value. Validation refuses it when environment is
// production.
func InlineRef(value string) SecretRef { return SecretRef{inline: NewSecret(value)} }

// IsZero reports whether the reference names nothing.
func (r SecretRef) IsZero() bool { return r.Env == "" && r.File == "" && r.inline.IsZero() }

// IsInline reports whether the value is written in the file itself.
func (r SecretRef) IsInline() bool { return !r.inline.IsZero() }

// notShown stands in for an env name or file path that does not have the
// shape of one: it may be the credential itself, typed where its name
// belongs ({env: "Hunter2!"}), so it is never printed.
const notShown = "<not a name: not shown>"

// envShown and fileShown are the reference's env name and file path as they
// may be printed: as written when they have the shape of a variable name or
// an absolute path, notShown otherwise. Every message and rendering of a
// reference goes through them.
func (r SecretRef) envShown() string {
	if ValidEnvName(r.Env) {
		return r.Env
	}
	return notShown
}

func (r SecretRef) fileShown() string {
	if ValidFilePath(r.File) {
		return r.File
	}
	return notShown
}

// shapeError is the one message for an env name or file path that does not
// have the shape of one (sub is "env" or "file"; "" when the shape is
// fine). It never echoes the value, and says how to fix the reference.
func (r SecretRef) shapeError(path string) (sub, msg, fix string) {
	env, file := refExamples(path)
	switch {
	case r.Env != "" && !ValidEnvName(r.Env):
		return "env", "is not an environment variable name (the value is not shown: it may be the credential itself)",
			fmt.Sprintf("write the NAME of the variable that holds the credential, e.g. %s: {env: %s}, and put the credential into that variable (export %s=...)",
				lastSegment(path), env, env)
	case r.File != "" && !ValidFilePath(r.File):
		return "file", "is not an absolute path without spaces (the value is not shown: it may be the credential itself; a relative path would also depend on the directory the service starts in)",
			fmt.Sprintf("write the absolute path of a file that holds the credential, e.g. %s: {file: %s}", lastSegment(path), file)
	}
	return "", "", ""
}

// refExamples names a variable and a file for the credential at path, so a
// fix is concrete.
func refExamples(path string) (env, file string) {
	switch path {
	case "source.database_url":
		return "TRELLARA_SOURCE_URL", "/etc/trellara/source-url"
	case "target.database_url":
		return "TRELLARA_TARGET_URL", "/etc/trellara/target-url"
	}
	if name, ok := strings.CutPrefix(path, "sinks."); ok {
		name, _, _ = strings.Cut(name, ".")
		up := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		return "TRELLARA_" + up + "_URL", "/etc/trellara/" + name + "-url"
	}
	switch path {
	case "transport.kafka.sasl.password":
		return "TRELLARA_KAFKA_PASSWORD", "/etc/trellara/kafka-password"
	}
	return "TRELLARA_SECRET", "/etc/trellara/secret"
}

// String renders the reference in its YAML flow form; inline values, and
// names or paths that may be a credential (notShown), are never rendered.
func (r SecretRef) String() string {
	switch {
	case r.Env != "" && r.File != "":
		return fmt.Sprintf("{env: %s, file: %s}", r.envShown(), r.fileShown())
	case r.Env != "":
		return "{env: " + r.envShown() + "}"
	case r.File != "":
		return "{file: " + r.fileShown() + "}"
	case r.IsInline():
		return "<redacted: inline>"
	}
	return "<unset>"
}

// GoString implements fmt.GoStringer.
func (r SecretRef) GoString() string { return r.String() }

// Format implements fmt.Formatter: every verb prints String.
func (r SecretRef) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }

// MarshalJSON emits {"env": NAME} or {"file": PATH}; an inline value is
// emitted as "<redacted>".
func (r SecretRef) MarshalJSON() ([]byte, error) {
	switch {
	case r.Env != "":
		return fmt.Appendf(nil, `{"env":%q}`, r.envShown()), nil
	case r.File != "":
		return fmt.Appendf(nil, `{"file":%q}`, r.fileShown()), nil
	case r.IsInline():
		return []byte(`"` + redacted + `"`), nil
	}
	return []byte("null"), nil
}

// MarshalYAML mirrors MarshalJSON. Marshal (the config writer) does not use
// it: it writes inline values deliberately, into a 0600 file.
func (r SecretRef) MarshalYAML() (any, error) {
	switch {
	case r.Env != "":
		return map[string]string{"env": r.envShown()}, nil
	case r.File != "":
		return map[string]string{"file": r.fileShown()}, nil
	case r.IsInline():
		return redacted, nil
	}
	return nil, nil
}

// LogValue implements slog.LogValuer.
func (r SecretRef) LogValue() slog.Value { return slog.StringValue(r.String()) }

// Resolver supplies environment variables and files to reference resolution.
// Injected so tests and the simulation do not depend on process state.
type Resolver interface {
	LookupEnv(name string) (string, bool)
	ReadFile(path string) ([]byte, error)
}

// OSResolver resolves against the process environment and filesystem.
func OSResolver() Resolver { return osResolver{} }

type osResolver struct{}

func (osResolver) LookupEnv(name string) (string, bool) { return os.LookupEnv(name) }

// ReadFile reads at most maxSecretFileBytes+1 bytes so an oversized file is
// detected without reading it all.
func (osResolver) ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
}

// Resolve reads the referenced value from the process environment or
// filesystem.
func (r SecretRef) Resolve() (Secret, error) { return r.ResolveWith(osResolver{}) }

// ResolveWith reads the referenced value through res. Errors name the key
// path and the variable or file, never the value or file content. A file's
// trailing newlines are trimmed (editors and `echo` add one).
func (r SecretRef) ResolveWith(res Resolver) (Secret, error) {
	s, fe := r.resolve(res)
	if fe != nil {
		return Secret{}, &ValidationError{Errors: []FieldError{*fe}}
	}
	return s, nil
}

func (r SecretRef) resolve(res Resolver) (Secret, *FieldError) {
	path := r.path
	if path == "" {
		path = "secret reference"
	}
	fail := func(sub, fix string, cause error, format string, args ...any) *FieldError {
		p := path
		if sub != "" && r.path != "" {
			p = r.path + "." + sub
		}
		return &FieldError{Path: p, Line: r.line, Message: p + ": " + fmt.Sprintf(format, args...), Fix: fix, Err: cause}
	}
	if sub, msg, fix := r.shapeError(r.path); sub != "" {
		return Secret{}, fail(sub, fix, nil, "%s", msg)
	}
	switch {
	case r.Env != "" && r.File != "":
		return Secret{}, fail("", "keep only one of env or file", nil, "names both an environment variable and a file")
	case r.Env != "":
		v, ok := res.LookupEnv(r.Env)
		if !ok {
			return Secret{}, fail("env", fmt.Sprintf("set %s in the service's environment (shell: export %s=...; systemd: Environment= or EnvironmentFile=)", r.Env, r.Env),
				nil, "environment variable %s is not set", r.Env)
		}
		if v == "" {
			return Secret{}, fail("env", fmt.Sprintf("give %s a value, or point the reference at a variable that has one", r.Env),
				nil, "environment variable %s is empty", r.Env)
		}
		return NewSecret(v), nil
	case r.File != "":
		b, err := res.ReadFile(r.File)
		if err != nil {
			fix := "create the file, or correct the path"
			if errors.Is(err, fs.ErrPermission) {
				fix = "make the file readable by the user Trellara runs as (e.g. chown trellara and chmod 0400)"
			}
			return Secret{}, fail("file", fix, err, "cannot read secret file %s: %s", r.File, errReason(err))
		}
		if len(b) > maxSecretFileBytes {
			return Secret{}, fail("file", "point the reference at a file holding only the credential", nil,
				"secret file %s is larger than %d bytes", r.File, maxSecretFileBytes)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return Secret{}, fail("file", "write the credential into the file", nil, "secret file %s is empty", r.File)
		}
		return NewSecret(v), nil
	case r.IsInline():
		return r.inline, nil
	}
	return Secret{}, fail("", "set it to {env: NAME} or {file: /absolute/path}", nil, "no value: the reference names neither an environment variable nor a file")
}

// errReason drops the "open /path: " prefix of a *fs.PathError, because the
// message already names the path.
func errReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Secrets holds every credential of a configuration, resolved.
type Secrets struct {
	SourceDatabaseURL Secret
	TargetDatabaseURL Secret // the first sink's; zero when the flow has no target
	// SinkDatabaseURLs holds each sink's target database_url by sink name.
	SinkDatabaseURLs  map[string]Secret
	KafkaSASLPassword Secret // zero unless transport.kafka.sasl is set
}

// ResolveSecrets resolves every credential reference from the process
// environment and filesystem. It is separate from Load so `config validate`
// can check a file on a machine that lacks the credentials, and then say
// which references would not resolve — never printing a value.
func (c *Config) ResolveSecrets() (Secrets, error) { return c.ResolveSecretsWith(osResolver{}) }

// ResolveSecretsWith is ResolveSecrets through res. Every unresolvable
// reference is reported in one *ValidationError.
func (c *Config) ResolveSecretsWith(res Resolver) (Secrets, error) {
	var out Secrets
	var errs []FieldError
	one := func(path string, ref SecretRef, dst *Secret) {
		ref.path = path
		if ref.line == 0 {
			ref.line = c.line(path)
		}
		s, fe := ref.resolve(res)
		if fe != nil {
			errs = append(errs, *fe)
			return
		}
		*dst = s
	}
	one("source.database_url", c.Source.DatabaseURL, &out.SourceDatabaseURL)
	for i, s := range c.Sinks {
		if s.Target == nil {
			continue
		}
		var sec Secret
		one(c.targetPath(s)+".database_url", s.Target.DatabaseURL, &sec)
		if out.SinkDatabaseURLs == nil {
			out.SinkDatabaseURLs = map[string]Secret{}
		}
		out.SinkDatabaseURLs[s.Name] = sec
		if i == 0 {
			out.TargetDatabaseURL = sec
		}
	}
	if k := c.Transport.Kafka; k != nil && k.SASL != nil {
		one("transport.kafka.sasl.password", k.SASL.Password, &out.KafkaSASLPassword)
	}
	// The production TLS rule (tls.go) reads the resolved strings: here,
	// so config validate, preflight and run refuse before connecting.
	errs = append(errs, c.checkTLS(out)...)
	if err := newValidationError(c.file(), errs); err != nil {
		return Secrets{}, err
	}
	return out, nil
}
