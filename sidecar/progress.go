package sidecar

import (
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/relay"
)

// ProgressStore durably remembers the highest position acknowledged
// without a published unit covering it (a 'P' frame, or a transaction
// without rows). SaveProgress must be durable before it returns: the
// acknowledgement follows it.
type ProgressStore interface {
	LoadProgress() (uint64, error)
	SaveProgress(lsn uint64) error
}

// FileProgress is a ProgressStore in one small text file ("0/16B3748\n"),
// replaced durably (write, fsync, rename, fsync directory) on every save.
// Saves happen at most about once a second: the extension sends progress
// frames only when idle, at most once a second.
type FileProgress struct {
	Path string
}

// LoadProgress returns 0 when the file does not exist yet.
func (f FileProgress) LoadProgress() (uint64, error) {
	b, err := os.ReadFile(f.Path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sidecar: read progress %s: %w", f.Path, err)
	}
	lsn, err := pglogrepl.ParseLSN(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("sidecar: progress file %s is damaged (%q); remove it to skip the gap check once: %w", f.Path, b, err)
	}
	return uint64(lsn), nil
}

// SaveProgress records lsn durably.
func (f FileProgress) SaveProgress(lsn uint64) error {
	if err := relay.WriteFileDurable(f.Path, []byte(envelope.FormatLSN(lsn)+"\n")); err != nil {
		return fmt.Errorf("sidecar: save progress %s: %w", envelope.FormatLSN(lsn), err)
	}
	return nil
}
