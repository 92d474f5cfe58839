package lakeread

import (
	"errors"
	"fmt"
)

// ErrUnsupported is the class of every refusal: a file or feature the
// reader does not read (delete files, a format other than Parquet, a
// format version 1 snapshot without a manifest list, nested columns).
// Reading around it would make the rows silently incomplete.
var ErrUnsupported = errors.New("lakeread: not supported by the independent reader")

// ErrCorrupt is the class of a file that does not parse as its format
// says it should.
var ErrCorrupt = errors.New("lakeread: corrupt or unexpected file")

// FileError is an error about one file of the table (metadata JSON,
// manifest list, manifest or data file), naming it.
type FileError struct {
	Kind string // "metadata", "manifest list", "manifest", "data file"
	Path string
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("lakeread: %s %s: %v", e.Kind, e.Path, e.Err) }

func (e *FileError) Unwrap() error { return e.Err }

func fileErr(kind, path string, err error) error {
	if err == nil {
		return nil
	}
	return &FileError{Kind: kind, Path: path, Err: err}
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
