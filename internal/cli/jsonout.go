package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/trellara/trellara/internal/buildinfo"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
)

// SchemaVersion is the "schema_version" of every JSON output of trellara
// (and of trellara-check). Fields are only ever added within a version;
// removing or changing one bumps it. docs/json/ holds one JSON Schema per
// command.
const SchemaVersion = 1

// Error codes of the JSON envelope's error object.
const (
	codeConfigInvalid  = "config_invalid"
	codeUsage          = "usage"
	codeNotImplemented = "not_implemented"
	codeFailed         = "failed"
)

// jsonError is the envelope's error object: what stopped the command and
// the fix.
type jsonError struct {
	Code     string              `json:"code"`
	Message  string              `json:"message"`
	Fix      string              `json:"fix"`
	Problems []config.FieldError `json:"problems,omitempty"`
}

// writeEnvelope writes one JSON output: {schema_version, command, ok,
// <body's fields>..., error}. body is a struct or map marshalling to an
// object, or nil.
func writeEnvelope(w io.Writer, command string, ok bool, body any, jerr *jsonError) error {
	version := json.RawMessage(fmt.Sprint(SchemaVersion))
	var fields bytes.Buffer
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		// The body's fields follow the envelope's, in their order. A body
		// with a schema_version of its own (the chaos report's) keeps it.
		dec := json.NewDecoder(bytes.NewReader(raw))
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return fmt.Errorf("json output of %s is not an object", command)
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := t.(string)
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return err
			}
			switch key {
			case "schema_version":
				version = v
				continue
			case "command", "ok", "error":
				continue
			}
			k, _ := json.Marshal(key)
			fields.WriteByte(',')
			fields.Write(k)
			fields.WriteByte(':')
			fields.Write(v)
		}
	}
	var b bytes.Buffer
	cmd, _ := json.Marshal(command)
	fmt.Fprintf(&b, `{"schema_version":%s,"command":%s,"ok":%t`, version, cmd, ok)
	b.Write(fields.Bytes())
	if jerr != nil {
		e, err := json.Marshal(jerr)
		if err != nil {
			return err
		}
		b.WriteString(`,"error":`)
		b.Write(e)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// commandName is the full name of the running command, e.g. "config
// validate" or "run".
func commandName(c *cli.Context) string {
	var parts []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name { // not the root: the app itself
			parts = append([]string{l.Command.Name}, parts...)
		}
	}
	return strings.Join(parts, " ")
}

// classify turns a failure into the envelope's error object.
func classify(err error, configPath string) *jsonError {
	msg := strings.TrimPrefix(err.Error(), "trellara: ")
	je := &jsonError{Code: codeFailed, Message: msg}
	var ue *usageErr
	switch probs, isConfig := config.Problems(err); {
	case isConfig:
		je.Code = codeConfigInvalid
		je.Problems = probs
		je.Fix = "correct the config: " + shell.Trellara("config validate", configPath) + " lists every problem with its line and fix"
		return je
	case errors.As(err, &ue):
		je.Code = codeUsage
		je.Fix = "see " + "trellara <command> --help" + " and docs/CLI.md for the command's flags"
		return je
	case errors.Is(err, buildinfo.ErrNotImplemented):
		je.Code = codeNotImplemented
		je.Fix = "the feature has not landed; docs/CLI.md lists what works today"
		return je
	}
	if i := strings.LastIndex(msg, "; fix: "); i >= 0 {
		je.Message, je.Fix = msg[:i], msg[i+len("; fix: "):]
	} else if i := strings.LastIndex(msg, "; run "); i >= 0 {
		je.Fix = msg[i+2:]
	}
	return je
}

// exitErr is a failure with its exit status; errors.As reaches the cause.
type exitErr struct {
	err  error
	code int
}

func (e *exitErr) Error() string { return "trellara: " + e.err.Error() }
func (e *exitErr) ExitCode() int { return e.code }
func (e *exitErr) Unwrap() error { return e.err }

// usageErr is bad flags or arguments: exit 2, error code "usage".
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &exitErr{err: &usageErr{fmt.Sprintf(format, args...)}, code: ExitError}
}

// countingWriter remembers whether anything was written, so Main knows a
// failed JSON command still owes its envelope.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// wantsJSON reports whether the command line asked for --format json;
// Main uses it when a failure came before the command read its flags.
func wantsJSON(args []string) bool {
	for i, a := range args {
		if a == "--" {
			return false
		}
		if a == "--format=json" || a == "-format=json" || ((a == "--format" || a == "-format") && i+1 < len(args) && args[i+1] == "json") {
			return true
		}
	}
	return false
}
