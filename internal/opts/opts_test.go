package opts

import (
	"errors"
	"testing"
)

func TestCheckNamesTheFirstBrokenRule(t *testing.T) {
	if err := Check("p", Rule{"A", false, "fine"}); err != nil {
		t.Fatalf("no rule broken: %v", err)
	}
	err := Check("p", Rule{"A", false, "fine"}, Rule{"B", true, "is 0; allowed 1..9"}, Rule{"C", true, "also bad"})
	var e *Error
	if !errors.As(err, &e) || e.Field != "B" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
	if got, want := err.Error(), "p: invalid options: B is 0; allowed 1..9"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
