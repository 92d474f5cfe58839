package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// FieldError is one problem with one configuration key. Message always names
// the key path, so a FieldError printed alone still tells the operator where
// to look; Fix says what to change.
type FieldError struct {
	Path    string `json:"path"`    // dotted key path, e.g. "source.database_url"; "" for file-level problems
	Line    int    `json:"line"`    // 1-based line in the YAML file; 0 when unknown (e.g. a Config built in code)
	Message string `json:"message"` // what is wrong, naming Path
	Fix     string `json:"fix"`     // what to change; may be empty
	Err     error  `json:"-"`       // underlying cause (e.g. an *fs.PathError), if any
}

// Problems returns every problem of an invalid or unreadable configuration
// that err carries (a *ValidationError or a problem with the file itself),
// one {path, line, message, fix} each; ok is false when err is not a
// configuration problem.
func Problems(err error) (problems []FieldError, ok bool) {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return append([]FieldError{}, ve.Errors...), true
	}
	var fe *fileError
	if errors.As(err, &fe) {
		return []FieldError{{Message: fe.path + ": " + fe.msg, Fix: fe.fix, Err: fe.err}}, true
	}
	return nil, false
}

// Error renders "line N: message; fix: ...".
func (e FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	b.WriteString(e.Message)
	if e.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns the underlying cause, if any.
func (e FieldError) Unwrap() error { return e.Err }

// ValidationError collects every problem found in one configuration, so an
// operator fixes a file in one pass instead of one error per run.
type ValidationError struct {
	File   string // path the configuration was loaded from; "" when parsed from bytes
	Errors []FieldError
}

// Error prints one problem per line, prefixed by "config: " and the file.
func (e *ValidationError) Error() string {
	prefix := "config: "
	if e.File != "" {
		prefix += e.File + ": "
	}
	switch len(e.Errors) {
	case 0:
		return prefix + "invalid configuration"
	case 1:
		return prefix + e.Errors[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d problems:", prefix, len(e.Errors))
	for _, fe := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap exposes each FieldError (and through it each cause) to errors.Is/As.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, len(e.Errors))
	for i, fe := range e.Errors {
		out[i] = fe
	}
	return out
}

// newValidationError returns nil when errs is empty, so callers can return
// its result directly. Errors are ordered by line, the order an operator
// reads the file in; errors without a line keep their order at the end.
func newValidationError(file string, errs []FieldError) error {
	if len(errs) == 0 {
		return nil
	}
	sorted := append([]FieldError(nil), errs...)
	sort.SliceStable(sorted, func(i, j int) bool {
		li, lj := sorted[i].Line, sorted[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	return &ValidationError{File: file, Errors: sorted}
}

// fileError is a problem with the configuration file itself (missing,
// unreadable, too large), as opposed to its contents.
type fileError struct {
	path string
	msg  string
	fix  string
	err  error
}

func (e *fileError) Error() string {
	s := "config: " + e.path + ": " + e.msg
	if e.fix != "" {
		s += "; fix: " + e.fix
	}
	return s
}

func (e *fileError) Unwrap() error { return e.err }
