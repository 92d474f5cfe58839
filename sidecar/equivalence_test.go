package sidecar

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/schemachange"
)

const eqSchema = `
CREATE TABLE t1 (id int PRIMARY KEY, v text, n numeric(10,2), ts timestamptz, f float8, b bytea, j jsonb, arr int[], d date);
CREATE TABLE t2 (id bigserial PRIMARY KEY, t1_id int, note varchar(20));
CREATE TABLE tfull (id int, v text);
ALTER TABLE tfull REPLICA IDENTITY FULL;
CREATE TABLE ttoast (id int PRIMARY KEY, big text, small int);
ALTER TABLE ttoast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE tidx (a int NOT NULL, b int NOT NULL, v text);
CREATE UNIQUE INDEX tidx_ab ON tidx (a, b);
ALTER TABLE tidx REPLICA IDENTITY USING INDEX tidx_ab;
CREATE TABLE tparent (id int PRIMARY KEY);
CREATE TABLE tchild (id serial PRIMARY KEY, pid int REFERENCES tparent (id));
CREATE TABLE tgen (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 2) STORED);
CREATE TABLE "MixedCase" ("Id" int PRIMARY KEY, "Val" text);
CREATE PUBLICATION pub FOR ALL TABLES;
`

// eqWorkload commits a history that reaches every decoding callback and
// every assembly path: all row kinds and value kinds, multi-table
// transactions, key changes, REPLICA IDENTITY FULL and USING INDEX, a
// >64 KiB value (one frame over several socket chunks), unchanged TOAST,
// TRUNCATE with flags, transactional messages, a 5 000-row transaction
// (spilled by the server, CHUNK units here), savepoints, rollbacks,
// prepared transactions, and a schema change.
var eqWorkload = []string{
	`INSERT INTO t1 VALUES (1, 'one', 1.5, '2024-01-02 03:04:05.123456+00', 1.25, '\x0102', '{"a": [1, "x"]}', '{1,2}', '2024-01-02'),
		(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (3, '', 0, 'infinity', 'NaN', '\x', '{}', '{}', '2000-01-01')`,
	`UPDATE t1 SET v = 'uno', f = 0.1 WHERE id = 1`,
	`UPDATE t1 SET id = 10 WHERE id = 1`,
	`DELETE FROM t1 WHERE id = 2`,
	`BEGIN; INSERT INTO t2 (t1_id, note) VALUES (3, 'x'); UPDATE t1 SET n = 2 WHERE id = 3; INSERT INTO tfull VALUES (1, 'a'), (2, NULL); COMMIT`,
	`UPDATE tfull SET v = 'b' WHERE id = 1`,
	`DELETE FROM tfull WHERE id = 2`,
	`INSERT INTO ttoast VALUES (1, repeat('0123456789abcdef', 20000), 1)`,
	`UPDATE ttoast SET small = 2 WHERE id = 1`,
	`UPDATE ttoast SET big = big || 'tail', small = 3 WHERE id = 1`,
	`INSERT INTO tidx VALUES (1, 1, 'x'), (1, 2, 'y')`,
	`UPDATE tidx SET v = 'z' WHERE a = 1 AND b = 1`,
	`UPDATE tidx SET b = 3 WHERE a = 1 AND b = 2`,
	`DELETE FROM tidx WHERE a = 1 AND b = 1`,
	`INSERT INTO tparent VALUES (1), (2); INSERT INTO tchild (pid) VALUES (1), (2)`,
	`TRUNCATE tparent, tchild RESTART IDENTITY CASCADE`,
	`TRUNCATE t2`,
	`BEGIN; SELECT pg_logical_emit_message(true, 'app.prefix', 'hello'); INSERT INTO t1 (id, v) VALUES (20, 'with message'); COMMIT`,
	`SELECT pg_logical_emit_message(false, 'app.nontx', 'not in any transaction')`,
	`SELECT pg_logical_emit_message(true, 'app.only', '\x00ff'::bytea)`,
	`INSERT INTO t2 (t1_id, note) SELECT g, 'row ' || g FROM generate_series(1, 5000) g`,
	`BEGIN; INSERT INTO t1 (id) VALUES (100); SAVEPOINT s; INSERT INTO t1 (id) VALUES (101); ROLLBACK TO s; INSERT INTO t1 (id) VALUES (102); COMMIT`,
	`BEGIN; INSERT INTO t1 (id) VALUES (200); ROLLBACK`,
	`BEGIN; INSERT INTO t1 (id, v) VALUES (300, 'prepared'); PREPARE TRANSACTION 'p1'`,
	`COMMIT PREPARED 'p1'`,
	`BEGIN; INSERT INTO t1 (id, v) VALUES (301, 'prepared, rolled back'); PREPARE TRANSACTION 'p2'`,
	`ROLLBACK PREPARED 'p2'`,
	`INSERT INTO tgen (id, a) VALUES (1, 21)`,
	`INSERT INTO "MixedCase" VALUES (1, 'Mixed')`,
	`ALTER TABLE t1 ADD COLUMN extra int`, // add_nullable_column: compatible, a DDL barrier
	`UPDATE t1 SET extra = 8 WHERE id = 3`,
	`INSERT INTO t1 (id, v) VALUES (400, 'after ddl')`,
}

// assemblyOptions are shared by both capture paths so that both cut large
// transactions into the same CHUNK units; small, so the 5 000-row
// transaction spills and chunks. Each path gets its own schema pins (in a
// fresh file) and, as a flow configures both paths, the source catalog
// read over conn and every table configured in strict mode, so the ADD
// COLUMN flows through a DDL barrier on both.
func assemblyOptions(t *testing.T, conn *pgx.Conn) (capture.AssemblerOptions, *capture.FilePins) {
	pins, err := capture.OpenPins(filepath.Join(t.TempDir(), "pins.json"))
	if err != nil {
		t.Fatal(err)
	}
	return capture.AssemblerOptions{SourceID: "eq", MemoryBytesMax: 256 << 10, ChunkBytesMax: 64 << 10, SpillDir: t.TempDir(),
		Pins: pins,
		Catalog: func(relation string) (map[string]schemachange.Facts, error) {
			return capture.CatalogFacts(context.Background(), conn, relation)
		},
		Policy: func(string) schemachange.Policy {
			return schemachange.Policy{Mode: schemachange.ModeStrict, Configured: true}
		},
	}, pins
}

// TestEquivalence captures one history twice on one server, with the
// external relay from a pgoutput slot and with the extension's worker and
// this sidecar, and requires byte-identical envelope sequences: rows,
// values and TOAST markers, relations and fingerprints, xids, commit and
// end LSNs, commit times, unit boundaries and checksums.
func TestEquivalence(t *testing.T) {
	t.Parallel()
	l := startLive(t, "postgres", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l.c.Exec(t, eqSchema)
	// The worker's slot exists (startLive waited); the pgoutput slot is
	// created after it, and both before the first transaction.
	l.c.Exec(t, `SELECT pg_create_logical_replication_slot('relay', 'pgoutput')`)
	l.c.Exec(t, eqWorkload...)
	fenceLSN := l.fence(t, "equivalence")

	// The relay, as `trellara run` uses it (protocol 2, streaming on).
	relayTr := &memTransport{}
	rc, err := pgconn.Connect(ctx, l.c.ReplicationURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(context.Background())
	var relayDurable uint64
	catalog := l.c.Connect(ctx)
	defer catalog.Close(context.Background())
	opts, relayPins := assemblyOptions(t, catalog)
	rs, err := relay.NewSession(rc, relayTr, relay.Resume{}, relay.Options{SourceID: "eq", Slot: "relay", Publication: "pub",
		Streaming: true, Assembler: opts,
		OnDurable: func(e uint64) { relayDurable = e },
		Stop:      func() bool { return relayDurable > fenceLSN }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := rs.Run(ctx); err != nil {
		t.Fatalf("relay: %v", err)
	}
	relayTime := time.Since(t0)

	// The sidecar.
	sideTr := &memTransport{}
	var acked atomic.Uint64
	var frames [][]byte
	sideOpts, sidePins := assemblyOptions(t, catalog)
	s, err := New(Options{Dial: l.dialer(t), ServerUID: l.uid, SocketPath: l.sock, Transport: sideTr, SourceID: "eq",
		Assembler: sideOpts,
		OnDurable: func(e uint64) { acked.Store(e) },
		Stop:      func() bool { return acked.Load() > fenceLSN },
		onFrame:   func(f []byte) { frames = append(frames, append([]byte(nil), f...)) }})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	sctx, scancel := context.WithTimeout(ctx, 45*time.Second)
	defer scancel()
	if err := s.Run(sctx); err != nil {
		t.Fatalf("sidecar: %v (%+v, fence %X)", err, s.Stats(), fenceLSN)
	}
	t.Logf("relay %s (%+v); sidecar %s (%+v)", relayTime, rs.Stats(), time.Since(t1), s.Stats())

	want, got := relayTr.snapshot(), sideTr.snapshot()
	for i := 0; i < min(len(want), len(got)); i++ {
		if !bytes.Equal(want[i], got[i]) {
			w, _ := envelope.Decode(want[i])
			g, _ := envelope.Decode(got[i])
			t.Fatalf("unit %d differs:\nrelay:\n%s\nsidecar:\n%s", i, prototext.Format(w), prototext.Format(g))
		}
	}
	if len(want) != len(got) {
		t.Fatalf("relay published %d units, sidecar %d", len(want), len(got))
	}
	envs := decodeAll(t, got)
	t.Logf("%d identical units from %d frames", len(envs), len(frames))
	checkCoverage(t, envs)
	// Both paths moved t1's pin past its barrier once the barrier was
	// durable, to the same fingerprint and a shape with the new column.
	rp, _ := relayPins.Pinned("public.t1")
	sp, _ := sidePins.Pinned("public.t1")
	shape, _ := sidePins.PinnedShape("public.t1")
	if rp != sp || !slices.ContainsFunc(shape.Columns, func(c schemachange.Column) bool { return c.Name == "extra" }) {
		t.Errorf("pins of public.t1 after the barrier: relay %016x, sidecar %016x, sidecar shape %+v", rp, sp, shape)
	}

	l.waitFor(t, "trellara slot confirmed past the fence", 10*time.Second, func() bool { return l.confirmed(t, "trellara") > fenceLSN })
	if os.Getenv("TRELLARA_UPDATE_FRAMES") == "1" {
		writeFrames(t, frames)
	}
}

// checkCoverage asserts the workload reached what it is meant to reach, so
// that equivalence is not trivially true for a history missing a case.
func checkCoverage(t *testing.T, envs []*pb.Envelope) {
	t.Helper()
	ops := map[pb.Op]int{}
	var (
		unchangedToast, oldKey, oldFull, truncFlags3, bigValue, multiRel, chunks, barrier bool
		ids                                                                               = map[string]bool{}
	)
	for _, e := range envs {
		barrier = barrier || len(e.DdlEvents) > 0
		if len(e.Relations) > 1 {
			multiRel = true
		}
		if e.Boundary.Kind == pb.UnitKind_UNIT_KIND_CHUNK {
			chunks = true
		}
		for _, r := range e.Rows {
			ops[r.Op]++
			if r.Op == pb.Op_OP_MESSAGE {
				continue
			}
			rel := e.Relations[r.RelationIndex]
			for _, v := range r.NewTuple {
				if v.Kind == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
					unchangedToast = true
				}
				if len(v.Data) > 64<<10 {
					bigValue = true
				}
			}
			oldKey = oldKey || r.OldKind == pb.OldTuple_OLD_TUPLE_KEY
			oldFull = oldFull || r.OldKind == pb.OldTuple_OLD_TUPLE_FULL
			truncFlags3 = truncFlags3 || (r.Op == pb.Op_OP_TRUNCATE && r.TruncateFlags == 3)
			if rel.Name == "t1" && len(r.NewTuple) > 0 {
				ids[string(r.NewTuple[0].Data)] = true
			}
		}
	}
	for _, c := range []struct {
		ok   bool
		what string
	}{
		{ops[pb.Op_OP_INSERT] > 5000, "5 000+ inserts"}, {ops[pb.Op_OP_UPDATE] > 0, "updates"},
		{ops[pb.Op_OP_DELETE] > 0, "deletes"}, {ops[pb.Op_OP_TRUNCATE] >= 3, "truncates"},
		{ops[pb.Op_OP_MESSAGE] >= 2, "messages"}, {unchangedToast, "an unchanged-TOAST marker"},
		{oldKey, "an old key"}, {oldFull, "a full old row"}, {truncFlags3, "TRUNCATE CASCADE RESTART IDENTITY"},
		{bigValue, "a value over 64 KiB"}, {multiRel, "a multi-table transaction"}, {chunks, "CHUNK units"},
		{barrier, "a DDL barrier (the ADD COLUMN)"},
		{ids["300"] && ids["102"] && ids["400"], "committed prepared, savepoint and post-DDL rows"},
		{!ids["301"] && !ids["101"] && !ids["200"], "no rolled-back rows"},
	} {
		if !c.ok {
			t.Errorf("workload did not produce %s (ops %v)", c.what, ops)
		}
	}
}

// writeFrames stores captured frames as the frame decoder's test and fuzz
// seeds (testdata/frames.txt): one of every variant (type, old tuple kind,
// unchanged TOAST, replica identity, truncate flags), small ones only.
func writeFrames(t *testing.T, frames [][]byte) {
	seen := map[string]bool{}
	var lines []string
	for _, f := range frames {
		m, err := DecodeFrame(f, 0)
		if err != nil || len(f) > 4096 {
			continue
		}
		sig := string(f[1])
		switch m := m.(type) {
		case *pgoutput.Update:
			sig += fmt.Sprint(m.OldKind, hasUnchanged(m.New))
		case *pgoutput.Delete:
			sig += fmt.Sprint(m.OldKind)
		case *pgoutput.Relation:
			sig += fmt.Sprint(m.ReplicaIdentity, m.Namespace, m.Name)
		case *pgoutput.Truncate:
			sig += fmt.Sprint(m.Cascade, m.RestartIdentity, len(m.RelationIDs))
		case *pgoutput.Insert:
			sig += fmt.Sprint(len(m.New))
		}
		if seen[sig] {
			continue
		}
		seen[sig] = true
		lines = append(lines, fmt.Sprintf("%c %s", f[1], hex.EncodeToString(f)))
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i][0] < lines[j][0] })
	head := "# Frames captured from the trellara extension's decoder worker (PostgreSQL 15) by\n" +
		"# TestEquivalence with TRELLARA_UPDATE_FRAMES=1: \"<type> <hex frame>\", one per variant.\n"
	if err := os.WriteFile("testdata/frames.txt", []byte(head+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d frames to testdata/frames.txt", len(lines))
}

func hasUnchanged(cols []pgoutput.Column) bool {
	for _, c := range cols {
		if c.Kind == pgoutput.ColumnUnchangedToast {
			return true
		}
	}
	return false
}
