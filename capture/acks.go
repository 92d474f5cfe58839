package capture

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/trellara/trellara/lsn"

	"github.com/trellara/trellara/envelope"
)

// AckStore durably remembers the highest position acknowledged to the
// source although no unit in the transport ends there (a transaction
// without rows, an idle keepalive, an extension progress frame). CheckResume
// counts it, so a restart tells such an advance from a gap.
type AckStore interface {
	// Load returns the recorded position, 0 when none is.
	Load() (uint64, error)
	// Record must be durable before it returns: the acknowledgement
	// follows it.
	Record(lsn uint64) error
}

// basisStore is an AckStore that also keeps, with each position, the
// transport's durable end when it was recorded (its basis): the record
// says "every transaction before lsn is in the transport", and that holds
// only while the transport still reaches the basis.
type basisStore interface {
	RecordOver(lsn, basis uint64) error
	LoadBasis() (lsn, basis uint64, err error)
}

// recordAck records lsn in store, with the transport's durable end when
// the store keeps one.
func recordAck(store AckStore, lsn, durable uint64) error {
	if b, ok := store.(basisStore); ok {
		return b.RecordOver(lsn, durable)
	}
	return store.Record(lsn)
}

// AckedFor is the acknowledged position CheckResume may count for a
// resume from res: the store's record, unless the transport now ends
// before the durable end the record was made over. Then transactions the
// record stood on are gone from the transport (a log that lost its tail),
// and counting the record would hide that gap, so it counts nothing.
func AckedFor(store AckStore, res Resume) (acked uint64, lost bool, err error) {
	b, ok := store.(basisStore)
	if !ok {
		acked, err = store.Load()
		return acked, false, err
	}
	acked, basis, err := b.LoadBasis()
	if err != nil {
		return 0, false, err
	}
	if acked > 0 && (res.Empty || basis > res.DurableEnd) && basis > 0 {
		return 0, true, nil
	}
	return acked, false, nil
}

// AckFile is the name of a flow's acknowledgement store in its state
// directory, AckBasisFile of its basis.
const (
	AckFile      = "acks"
	AckBasisFile = "acks.basis"
)

// Files that held acknowledgements before AckFile, in their formats:
// "idle-ack" (the relay's, a decimal LSN) and "extension-progress" (the
// extension sidecar's, X/X). OpenFileAcks migrates them.
const (
	legacyIdleAck  = "idle-ack"
	legacyProgress = "extension-progress"
)

// FileAcks is the AckStore in a flow's state directory: one small text
// file holding one LSN as X/X ("0/16B3748\n"), replaced durably (write,
// fsync, rename, fsync directory) on every Record. Records come at most
// about once a second (idle keepalives, progress frames), so the cost does
// not matter.
//
// The record means "every transaction the flow captures that committed
// before this position is in the log", a statement about the source's WAL,
// so one store serves both capture paths.
//
// Beside it, AckBasisFile holds the record's basis (AckedFor) as
// "<lsn> <basis>" ("0/16B3748 0/16B3700\n"): the transport's durable end
// the record at <lsn> was made over. It is its own file so that the
// store's format stays the one older releases read; a basis whose <lsn>
// is not the store's (written by a release without it) is unknown.
type FileAcks struct {
	path, basisPath string
	mu              sync.Mutex
	lsn             uint64
	basis           uint64
}

// OpenFileAcks opens the store AckFile in dir. The older files, when any
// is there, are read too (the highest position of all is kept) and the
// store is written durably; only once it is are the older files removed.
func OpenFileAcks(dir string) (*FileAcks, error) {
	a := &FileAcks{path: filepath.Join(dir, AckFile), basisPath: filepath.Join(dir, AckBasisFile)}
	legacy := []struct {
		name  string
		parse func(string) (uint64, error)
	}{{legacyIdleAck, parseDecimal}, {legacyProgress, parseXX}}
	lsn, ok, err := readLSNFile(a.path, parseXX)
	if err != nil {
		return nil, err
	}
	a.lsn = lsn
	if ok {
		if a.basis, err = readBasis(a.basisPath, lsn); err != nil {
			return nil, err
		}
	}
	// The older files are read even beside the store: a previous release
	// run on this directory after the store was written (a downgrade, then
	// the upgrade again) recorded its acknowledgements there only, and the
	// slot has them. A file a crash left behind after migrating holds no
	// more than the store, so the higher position is right in both cases.
	found := false
	for _, l := range legacy {
		v, present, err := readLSNFile(filepath.Join(dir, l.name), l.parse)
		if err != nil {
			return nil, err
		}
		if present {
			found = true
			a.lsn = max(a.lsn, v)
		}
	}
	if !found {
		return a, nil
	}
	if !ok || a.lsn > lsn {
		a.basis = 0 // a legacy record's basis is unknown
		if err := a.write(a.lsn); err != nil {
			return nil, err
		}
	}
	// The store is durable: the older files (also any a crash left behind
	// after the store was written) say nothing more.
	for _, l := range legacy {
		p := filepath.Join(dir, l.name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("capture: remove %s after migrating it to %s: %w", p, a.path, err)
		}
	}
	return a, nil
}

// Path is the store's file.
func (a *FileAcks) Path() string { return a.path }

// Load returns the recorded position, 0 when none is.
func (a *FileAcks) Load() (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lsn, nil
}

// Record writes lsn durably, with no basis.
func (a *FileAcks) Record(lsn uint64) error { return a.RecordOver(lsn, 0) }

// RecordOver writes lsn durably with the transport's durable end basis.
// The basis is written first: a crash between the two leaves a basis for
// a record that is not the store's, which reads as unknown.
func (a *FileAcks) RecordOver(lsn, basis uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if basis > 0 {
		line := envelope.FormatLSN(lsn) + " " + envelope.FormatLSN(basis) + "\n"
		if err := WriteFileDurable(a.basisPath, []byte(line)); err != nil {
			return fmt.Errorf("capture: record the basis of acknowledged position %s in %s: %w", envelope.FormatLSN(lsn), a.basisPath, err)
		}
	}
	if err := a.write(lsn); err != nil {
		return err
	}
	a.lsn, a.basis = lsn, basis
	return nil
}

// LoadBasis returns the recorded position and its basis (0: unknown).
func (a *FileAcks) LoadBasis() (uint64, uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lsn, a.basis, nil
}

func (a *FileAcks) write(lsn uint64) error {
	if err := WriteFileDurable(a.path, []byte(envelope.FormatLSN(lsn)+"\n")); err != nil {
		return fmt.Errorf("capture: record acknowledged position %s in %s: %w", envelope.FormatLSN(lsn), a.path, err)
	}
	return nil
}

func parseXX(s string) (uint64, error) {
	v, err := lsn.Parse(s)
	return uint64(v), err
}

// readBasis reads the basis of the record at lsn, 0 when none is known.
func readBasis(path string, at uint64) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("capture: read %s: %w", path, err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("capture: %s is damaged (%q); removing it makes the gap check trust the acknowledged position as older releases did", path, b)
	}
	rec, err1 := lsn.Parse(f[0])
	basis, err2 := lsn.Parse(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("capture: %s is damaged (%q): %w; removing it makes the gap check trust the acknowledged position as older releases did", path, b, err)
	}
	if uint64(rec) != at {
		return 0, nil // the basis of an older record: unknown
	}
	return uint64(basis), nil
}

func parseDecimal(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// readLSNFile reads one LSN from path; ok is false when the file does not
// exist.
func readLSNFile(path string, parse func(string) (uint64, error)) (lsn uint64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("capture: read acknowledged position %s: %w", path, err)
	}
	v, err := parse(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false, fmt.Errorf("capture: %s is damaged (%q): %w; removing it skips the gap check once, "+
			"so do that only when the slot's confirmed position is known to be covered by the log", path, b, err)
	}
	return v, true, nil
}

// MemoryAcks is an AckStore in memory, safe for concurrent use: for tests
// and for the simulator, whose model decides what survives a crash.
type MemoryAcks struct {
	mu  sync.Mutex
	lsn uint64
}

// Load returns the last recorded position.
func (m *MemoryAcks) Load() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lsn, nil
}

// Record keeps lsn.
func (m *MemoryAcks) Record(lsn uint64) error {
	m.mu.Lock()
	m.lsn = lsn
	m.mu.Unlock()
	return nil
}
