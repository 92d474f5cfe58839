// Package hoptrace records when each transaction passes each hop of the
// data path, for the latency breakdown of the steady-rate benchmark
// (BenchmarkSteadyLatency). It is off unless TRELLARA_HOPTRACE names a
// file when the process starts; then every Stamp appends one line
// "hop commit_lsn unix_nanos" to it, and Close (at the process's exit)
// flushes them. Off, a Stamp is one atomic load.
package hoptrace

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Hop names a point on the path of one transaction.
type Hop string

// The hops, in the order a transaction passes them.
const (
	// Commit is the source's commit timestamp (the envelope's, from the
	// source's clock; one machine, one clock in the benchmark).
	Commit Hop = "commit"
	// Received: capture has the whole transaction assembled.
	Received Hop = "received"
	// Durable: the transport has made it durable.
	Durable Hop = "durable"
	// Read: the applier has read and decoded it.
	Read Hop = "read"
	// Applying: the applier starts its target transaction.
	Applying Hop = "applying"
	// Committed: the target transaction holding it has committed.
	Committed Hop = "committed"
)

// Hops are every hop, in path order.
var Hops = []Hop{Commit, Received, Durable, Read, Applying, Committed}

var (
	on atomic.Bool
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
)

func init() {
	if p := os.Getenv("TRELLARA_HOPTRACE"); p != "" {
		if err := Open(p); err != nil {
			fmt.Fprintf(os.Stderr, "hoptrace: TRELLARA_HOPTRACE=%s: %v\n", p, err)
		}
	}
}

// Open starts recording to path (appended to).
func Open(path string) error {
	mu.Lock()
	defer mu.Unlock()
	file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	f, w = file, bufio.NewWriterSize(file, 1<<20)
	on.Store(true)
	return nil
}

// On reports whether stamps are recorded.
func On() bool { return on.Load() }

// Stamp records that the transaction committed at lsn passed hop now.
func Stamp(hop Hop, lsn uint64) {
	if !on.Load() {
		return
	}
	At(hop, lsn, time.Now())
}

// At records that the transaction committed at lsn passed hop at t.
func At(hop Hop, lsn uint64, t time.Time) {
	if !on.Load() {
		return
	}
	mu.Lock()
	if w != nil {
		fmt.Fprintf(w, "%s %d %d\n", hop, lsn, t.UnixNano())
	}
	mu.Unlock()
}

// Close flushes and closes the file; later stamps are dropped.
func Close() error {
	on.Store(false)
	mu.Lock()
	defer mu.Unlock()
	if w == nil {
		return nil
	}
	err := w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	f, w = nil, nil
	return err
}
