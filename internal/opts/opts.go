// Package opts is how Trellara's packages check their Options, in one
// way: each package's Options has a withDefaults method that fills the
// zero fields with defaults and then returns Check's verdict over its
// range checks, an *Error naming the package, the field and what is
// allowed. Packages re-export the type (segmentlog.OptionsError,
// relay.OptionsError, ...) so callers outside the module can match it
// with errors.As, and every one of them wraps ErrInvalid.
package opts

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("invalid options")

// Error names the option that failed validation and what is allowed.
type Error struct {
	Package string // the package whose Options these are
	Field   string // the field, as spelled in Go (Retention.MaxAge)
	Reason  string // what it is and what is allowed: the message is the fix
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: invalid options: %s %s", e.Package, e.Field, e.Reason)
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Rule is one range check: Bad true means Field breaks it.
type Rule struct {
	Field  string
	Bad    bool
	Reason string
}

// Check returns an *Error for the first rule that is Bad, nil when none is.
func Check(pkg string, rules ...Rule) error {
	for _, r := range rules {
		if r.Bad {
			return &Error{Package: pkg, Field: r.Field, Reason: r.Reason}
		}
	}
	return nil
}
