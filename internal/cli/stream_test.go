package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
	"github.com/trellara/trellara/segmentlog"
)

// tailFlow writes a config whose local log holds n random envelopes and
// returns the config path, the open writer and the envelopes.
func tailFlow(t *testing.T, n int) (string, *segmentlog.Log, []*pb.Envelope) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	body := fmt.Sprintf("version: 2\nflow: tail\nsource:\n  id: src1\n  database_url: \"postgres://127.0.0.1:1/src\"\n  tables: [public.t]\ntransport:\n  local: {dir: %s}\n", filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	l, _, err := segmentlog.Open(filepath.Join(dir, "data", "log"), segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rng := rand.New(rand.NewPCG(17, 1))
	var envs []*pb.Envelope
	for i := range n {
		e := envelopetest.Random(rng, "src1", uint64(0x1000000+i*0x100))
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	return cfg, l, envs
}

// cursorOnDisk reads a cursor the way another process sees it.
func cursorOnDisk(t *testing.T, l *segmentlog.Log, cfg, name string) (uint64, bool) {
	t.Helper()
	dir := filepath.Join(filepath.Dir(cfg), "data", "log")
	ro, err := segmentlog.OpenReadOnly(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	off, ok, err := ro.CursorOffset(name)
	if err != nil {
		t.Fatal(err)
	}
	return off, ok
}

func parseTail(t *testing.T, out string) []tailLine {
	t.Helper()
	var lines []tailLine
	for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
		if s == "" {
			continue
		}
		var l tailLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("stream tail printed %q: %v", s, err)
		}
		lines = append(lines, l)
	}
	return lines
}

func TestStreamTailMatchesEnvelopes(t *testing.T) {
	cfg, l, envs := tailFlow(t, 12)
	out, errOut, code := run(t, "stream", "tail", "--config", cfg, "--consumer", "inspect", "--rows")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := parseTail(t, out)
	if len(lines) != len(envs) {
		t.Fatalf("printed %d lines, the log holds %d envelopes", len(lines), len(envs))
	}
	for i, e := range envs {
		got := lines[i]
		if got.Offset != uint64(i) || got.CommitLSN != envelope.FormatLSN(e.CommitLsn) ||
			got.Checksum != fmt.Sprintf("%016x", e.Checksum) || got.Kind != "TRANSACTION" ||
			got.RowCount != e.RowCount || len(got.Rows) != len(e.Rows) || got.Xid != e.Xid {
			t.Fatalf("line %d: %+v\nwant offset %d, LSN %s, checksum %016x, %d rows", i, got, i, envelope.FormatLSN(e.CommitLsn), e.Checksum, e.RowCount)
		}
		for j, r := range e.Rows {
			if g := got.Rows[j]; g.Seq != r.Seq || g.Op != strings.TrimPrefix(r.Op.String(), "OP_") || len(g.New) != len(r.NewTuple) {
				t.Fatalf("line %d row %d: %+v, want seq %d op %s with %d values", i, j, g, r.Seq, r.Op, len(r.NewTuple))
			}
		}
	}
	if _, ok := cursorOnDisk(t, l, cfg, "inspect"); ok {
		t.Fatal("stream tail without --commit registered its cursor")
	}

	// --from an LSN starts at the first unit committed at or after it.
	out, errOut, code = run(t, "stream", "tail", "--config", cfg, "--consumer", "inspect", "--from", envelope.FormatLSN(envs[7].CommitLsn))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if lines := parseTail(t, out); len(lines) != 5 || lines[0].Offset != 7 {
		t.Fatalf("--from %s printed %d lines from offset %d, want 5 from 7", envelope.FormatLSN(envs[7].CommitLsn), len(lines), lines[0].Offset)
	}
}

func TestStreamTailCommitMovesCursor(t *testing.T) {
	cfg, l, envs := tailFlow(t, 6)
	out, errOut, code := run(t, "stream", "tail", "--config", cfg, "--consumer", "sub", "--commit")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := len(parseTail(t, out)); n != len(envs) {
		t.Fatalf("printed %d lines, want %d", n, len(envs))
	}
	if off, ok := cursorOnDisk(t, l, cfg, "sub"); !ok || off != uint64(len(envs)) {
		t.Fatalf("cursor sub at %d (registered %v) after tail --commit, want %d", off, ok, len(envs))
	}
	// The next tail of the same consumer starts after what it committed.
	e := envelopetest.Random(rand.New(rand.NewPCG(17, 2)), "src1", 0x2000000)
	b, _ := envelope.Encode(e)
	if _, err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = run(t, "stream", "tail", "--config", cfg, "--consumer", "sub")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := parseTail(t, out)
	if len(lines) != 1 || lines[0].Offset != uint64(len(envs)) || lines[0].Checksum != fmt.Sprintf("%016x", e.Checksum) {
		t.Fatalf("second tail printed %+v, want only the new unit at offset %d", lines, len(envs))
	}
	if off, _ := cursorOnDisk(t, l, cfg, "sub"); off != uint64(len(envs)) {
		t.Fatalf("tail without --commit moved cursor sub to %d", off)
	}
}
