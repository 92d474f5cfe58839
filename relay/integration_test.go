package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/pgname"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/relay/pgoutput"
	"github.com/trellara/trellara/transport"
)

// memTransport is the in-memory transport with a decoding helper.
type memTransport struct{ transport.Memory }

func (m *memTransport) envelopes(t *testing.T) []*pb.Envelope {
	units := m.Units()
	out := make([]*pb.Envelope, len(units))
	for i, b := range units {
		e, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		out[i] = e
	}
	return out
}

const schemaSQL = `
CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(12,2) NOT NULL, note text);
CREATE TABLE line_items (id bigserial PRIMARY KEY, order_id bigint NOT NULL, amount numeric(12,2) NOT NULL, tags text[]);
CREATE TABLE docs (id int PRIMARY KEY, body text, n int, meta jsonb);
CREATE TABLE ledger (txn int PRIMARY KEY);
CREATE TABLE fullrow (a int, b text);
ALTER TABLE fullrow REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE orders, line_items, docs, ledger, fullrow;
`

// workload commits a history that exercises every assembly path: multi-table
// transactions, a transaction larger than logical_decoding_work_mem (so the
// server streams it) with rolled-back savepoints inside, TRUNCATE, TOAST
// values updated with and without touching them, and REPLICA IDENTITY FULL.
func workload(t *testing.T, c *pgtest.Cluster) {
	big := strings.Repeat("toast-me ", 40000) // ~360 kB: stored out of line
	c.Exec(t,
		`BEGIN; INSERT INTO orders VALUES (1, 30.00, 'first'); INSERT INTO line_items (order_id, amount, tags) VALUES (1, 10, '{a,b}'), (1, 20, NULL); INSERT INTO ledger VALUES (1); COMMIT`,
		`INSERT INTO docs VALUES (1, '`+big+`', 0, '{"k": [1, 2, "x"]}')`,
		`UPDATE docs SET n = n + 1 WHERE id = 1`, // body unchanged: unchanged-TOAST marker
		`UPDATE docs SET body = body || 'more', n = n + 1 WHERE id = 1`,
		`INSERT INTO fullrow VALUES (1, 'x'), (2, '')`,
		`UPDATE fullrow SET b = NULL WHERE a = 2`,
		`DELETE FROM fullrow WHERE a = 1`,
		// streamed: far beyond 64kB, with two rolled-back savepoints
		`BEGIN;
		 INSERT INTO orders SELECT g, g, repeat('n', 50) FROM generate_series(100, 2100) g;
		 SAVEPOINT s1; INSERT INTO orders SELECT g, g, 'rolled back' FROM generate_series(5000, 6000) g; ROLLBACK TO s1;
		 SAVEPOINT s2; INSERT INTO ledger VALUES (2); RELEASE s2;
		 SAVEPOINT s3; UPDATE orders SET note = 'gone' WHERE id < 500; SAVEPOINT s4; DELETE FROM orders WHERE id < 200; ROLLBACK TO s3;
		 INSERT INTO ledger VALUES (3);
		 COMMIT`,
		`BEGIN; INSERT INTO orders SELECT g, g, 'aborted' FROM generate_series(7000, 9000) g; ROLLBACK`,
		`UPDATE orders SET total = total + 1 WHERE id BETWEEN 100 AND 110`,
		`TRUNCATE line_items`,
		`DELETE FROM orders WHERE id = 1`,
		`SELECT pg_logical_emit_message(true, 'app', 'hello')`,
	)
}

func startCluster(t *testing.T) *pgtest.Cluster {
	pgtest.Require(t)
	return pgtest.Start(t, pgtest.Options{Settings: map[string]string{"logical_decoding_work_mem": "64kB"}})
}

func replConn(t *testing.T, c *pgtest.Cluster) *pgconn.PgConn {
	conn, err := pgconn.Connect(context.Background(), c.ReplicationURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// runUntilFence streams slot into tr until a fence with token is durable.
func runUntilFence(t *testing.T, c *pgtest.Cluster, conn *pgx.Conn, tr relay.Transport, slot, token string, cfg relay.Options) *relay.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	done := false
	cfg.Slot, cfg.Publication, cfg.SourceID, cfg.Streaming = slot, "pub", "src", true
	cfg.OnFence = func(tok string, _ uint64) { done = done || tok == token }
	cfg.Stop = func() bool { return done }
	rc := replConn(t, c)
	s, err := relay.NewSession(rc, tr, res, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.EmitFence(ctx, conn, token); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); err != nil {
		t.Fatalf("relay: %v", err)
	}
	rc.Close(ctx)
	// The walsender releases the slot as it exits.
	for i := 0; ; i++ {
		si, err := relay.LookupSlot(ctx, conn, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !si.Active {
			break
		}
		if i > 500 {
			t.Fatalf("slot %s still active after the session closed", slot)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// The relay's envelopes, decoded from a streaming protocol-2 session, equal
// what the server's own non-streamed decoding of the same history yields.
func TestRelayMatchesServerDecoding(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "relay_a"); err != nil {
		t.Fatal(err)
	}
	c.Exec(t, `SELECT pg_create_logical_replication_slot('peek_b', 'pgoutput')`)
	workload(t, c)

	tr := &memTransport{}
	s := runUntilFence(t, c, conn, tr, "relay_a", "end-1", relay.Options{
		Assembler: capture.AssemblerOptions{MemoryBytesMax: 32 << 10, ChunkBytesMax: 1 << 20, SpillDir: t.TempDir()}})
	got := tr.envelopes(t)
	st := s.Stats()
	if st.Assembler.Spilled == 0 || st.Assembler.AbortedSubxid == 0 {
		t.Fatalf("workload did not exercise spill and subtransaction aborts: %+v", st.Assembler)
	}

	// Second decoding: the SQL interface, protocol 1, no streaming.
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('peek_b', NULL, NULL,
		'proto_version', '1', 'publication_names', 'pub', 'messages', 'true')`)
	if err != nil {
		t.Fatal(err)
	}
	var want []*pb.Envelope
	asm := capture.NewAssembler(capture.AssemblerOptions{SourceID: "src", ChunkBytesMax: 1 << 20}, func(e *pb.Envelope, _ uint64, _ bool) error {
		if e != nil {
			want = append(want, proto.Clone(e).(*pb.Envelope))
		}
		return nil
	})
	var dec pgoutput.Decoder
	for rows.Next() {
		var lsnText string
		var data []byte
		if err := rows.Scan(&lsnText, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(lsnText)
		m, err := dec.Decode(data, lsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := asm.Handle(m, lsn); err != nil {
			t.Fatal(err)
		}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// The SQL decoding also contains the fence; compare everything.
	if len(got) != len(want) {
		t.Fatalf("relay published %d units, server decoding has %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		g.Checksum, w.Checksum = 0, 0
		g.CommitTimeUnixMicros, w.CommitTimeUnixMicros = 0, 0
		if !proto.Equal(g.Rows[0], w.Rows[0]) || g.CommitLsn != w.CommitLsn || g.EndLsn != w.EndLsn || g.RowCount != w.RowCount || g.SchemaFingerprint != w.SchemaFingerprint {
			t.Fatalf("unit %d differs (%s):\nrelay  %v\nserver %v", i, diffEnvelopes(g, w), summary(g), summary(w))
		}
		if !proto.Equal(g, w) {
			t.Fatalf("unit %d differs in detail: %s", i, diffEnvelopes(g, w))
		}
	}
	// The rolled-back savepoints' rows are absent, the released one present.
	var sawLedger2, sawRolledBack bool
	for _, e := range got {
		for _, r := range e.Rows {
			for _, v := range r.NewTuple {
				sawRolledBack = sawRolledBack || string(v.Data) == "rolled back" || string(v.Data) == "aborted" || string(v.Data) == "gone"
			}
			if r.Op == pb.Op_OP_INSERT && e.Relations[r.RelationIndex].Name == "ledger" && string(r.NewTuple[0].Data) == "2" {
				sawLedger2 = true
			}
		}
	}
	if sawRolledBack || !sawLedger2 {
		t.Fatalf("rolled-back rows present %v, released savepoint row present %v", sawRolledBack, sawLedger2)
	}
	// The unchanged-TOAST marker survived.
	var toast int
	for _, e := range got {
		for _, r := range e.Rows {
			for _, v := range r.NewTuple {
				if v.Kind == pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST {
					toast++
				}
			}
		}
	}
	if toast != 1 {
		t.Fatalf("%d unchanged-TOAST markers, want 1", toast)
	}
}

// diffEnvelopes names the first differing field, without dumping values
// that can be hundreds of kilobytes.
func diffEnvelopes(g, w *pb.Envelope) string {
	if g.Xid != w.Xid {
		return fmt.Sprintf("xid %d vs %d", g.Xid, w.Xid)
	}
	if !proto.Equal(g.Boundary, w.Boundary) {
		return fmt.Sprintf("boundary %v vs %v", g.Boundary, w.Boundary)
	}
	if len(g.Relations) != len(w.Relations) {
		return fmt.Sprintf("%d vs %d relations", len(g.Relations), len(w.Relations))
	}
	for i := range g.Relations {
		if !proto.Equal(g.Relations[i], w.Relations[i]) {
			return fmt.Sprintf("relation %d: %v vs %v", i, g.Relations[i], w.Relations[i])
		}
	}
	for i := range g.Rows {
		if !proto.Equal(g.Rows[i], w.Rows[i]) {
			return fmt.Sprintf("row %d (%s vs %s)", i, g.Rows[i].Op, w.Rows[i].Op)
		}
	}
	return "other header field"
}

func summary(e *pb.Envelope) string {
	return fmt.Sprintf("commit %s end %s xid %d rows %d kind %s", envelope.FormatLSN(e.CommitLsn), envelope.FormatLSN(e.EndLsn), e.Xid, e.RowCount, e.Boundary.GetKind())
}

// Restarting a relay session never republishes a transaction already in
// the transport, and the slot is never confirmed past it.
func TestRelayResumeDoesNotDuplicate(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "r"); err != nil {
		t.Fatal(err)
	}
	tr := &memTransport{}
	for round := 0; round < 3; round++ {
		c.Exec(t, fmt.Sprintf(`INSERT INTO ledger VALUES (%d)`, 100+round))
		runUntilFence(t, c, conn, tr, "r", fmt.Sprintf("round-%d", round), relay.Options{})
		si, err := relay.LookupSlot(ctx, conn, "r")
		if err != nil {
			t.Fatal(err)
		}
		res, _ := relay.ResumeFrom(ctx, tr)
		if si.ConfirmedFlush > res.DurableEnd {
			t.Fatalf("slot confirmed at %s beyond the transport's durable end %s", envelope.FormatLSN(si.ConfirmedFlush), envelope.FormatLSN(res.DurableEnd))
		}
	}
	seen := map[uint64]bool{}
	ledger := 0
	for _, e := range tr.envelopes(t) {
		if seen[e.CommitLsn] {
			t.Fatalf("transaction at %s published twice", envelope.FormatLSN(e.CommitLsn))
		}
		seen[e.CommitLsn] = true
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_INSERT && e.Relations[r.RelationIndex].Name == "ledger" {
				ledger++
			}
		}
	}
	if ledger != 3 {
		t.Fatalf("%d ledger inserts in the transport, want 3", ledger)
	}
}

// A schema drift stops capture at the drifting change, after publishing
// the whole transactions that came before it in the same burst.
func TestSchemaDriftPublishesWhatCameBefore(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	rel, err := relay.RelationFromCatalog(ctx, conn, pgname.Name{Schema: "public", Name: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := capture.OpenPins(t.TempDir() + "/pins.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := pins.Pin("public.ledger", rel.Fingerprint); err != nil {
		t.Fatal(err)
	}
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "drift"); err != nil {
		t.Fatal(err)
	}
	c.Exec(t, `INSERT INTO ledger VALUES (1)`, `INSERT INTO ledger VALUES (2)`, `ALTER TABLE ledger ADD COLUMN note text`)
	var before, after uint64
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	c.Exec(t, `INSERT INTO ledger VALUES (3, 'new shape')`)
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	tr := &memTransport{}
	rc := replConn(t, c)
	s, err := relay.NewSession(rc, tr, relay.Resume{}, relay.Options{SourceID: "src", Slot: "drift", Publication: "pub", Streaming: true,
		Assembler: capture.AssemblerOptions{Pins: pins}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = s.Run(rctx)
	var drift *capture.SchemaDriftError
	if !errors.As(err, &drift) {
		t.Fatalf("Run = %v, want a schema drift error", err)
	}
	if drift.LSN <= before || drift.LSN > after {
		t.Fatalf("drift at LSN %s; want the commit of the first transaction under the new shape, in (%s, %s]",
			envelope.FormatLSN(drift.LSN), envelope.FormatLSN(before), envelope.FormatLSN(after))
	}
	got := 0
	for _, e := range tr.envelopes(t) {
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_INSERT {
				got++
			}
		}
	}
	if got != 2 {
		t.Fatalf("%d inserts published before the drift, want 2", got)
	}
}

// A crash in the middle of publishing a large transaction B, committed
// back to back after a transaction A, on a real server: A's end LSN is B's
// commit LSN, the slot acknowledged through A is confirmed exactly there,
// and the resume must neither report a gap nor lose B: the server resends
// B from that position and the relay publishes it whole.
func TestResumeAfterPartialChunksAtBackToBackCommits(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	// probe finds the LSNs; bb plays the crashed relay's slot.
	for _, s := range []string{"probe", "bb"} {
		if _, err := relay.CreateSlot(ctx, replConn(t, c), s); err != nil {
			t.Fatal(err)
		}
	}
	cfg := relay.Options{Assembler: capture.AssemblerOptions{ChunkBytesMax: 4 << 10}}
	probe := &memTransport{}
	a, b := -1, -1 // indexes in probe of A and of B's first chunk
	for attempt := 0; attempt < 5 && a < 0; attempt++ {
		// B's changes are written first, then A commits and B right after:
		// nothing lies between the two commit records unless the server
		// happens to log something of its own there (then try again).
		big, small := c.Connect(ctx), c.Connect(ctx)
		for _, step := range []struct {
			conn *pgx.Conn
			sql  string
		}{
			{big, `BEGIN`},
			{big, fmt.Sprintf(`INSERT INTO orders SELECT g, g, repeat('n', 100) FROM generate_series(%d, %d) g`, 10000*(attempt+1), 10000*(attempt+1)+299)},
			{small, `BEGIN`},
			{small, fmt.Sprintf(`INSERT INTO ledger VALUES (%d)`, 1000+attempt)},
			{small, `COMMIT`},
			{big, `COMMIT`},
		} {
			if _, err := step.conn.Exec(ctx, step.sql); err != nil {
				t.Fatal(err)
			}
		}
		big.Close(ctx)
		small.Close(ctx)
		from := len(probe.Units())
		runUntilFence(t, c, conn, probe, "probe", fmt.Sprintf("probe-%d", attempt), cfg)
		envs := probe.envelopes(t)
		for i := from; i+1 < len(envs); i++ {
			first := envs[i+1].Boundary
			if envs[i].Boundary.Kind != pb.UnitKind_UNIT_KIND_CHUNK && first.Kind == pb.UnitKind_UNIT_KIND_CHUNK &&
				first.ChunkIndex == 0 && first.ChunkCount > 1 && envs[i].EndLsn == envs[i+1].CommitLsn {
				a, b = i, i+1
			}
		}
	}
	if a < 0 {
		t.Fatal("no back-to-back commits in 5 attempts: the server logged a record between them every time")
	}
	envs := probe.envelopes(t)
	endA, commitB, chunks := envs[a].EndLsn, envs[b].CommitLsn, int(envs[b].Boundary.ChunkCount)
	// The relay acknowledged A, then crashed after B's first chunk.
	var moved string
	if err := conn.QueryRow(ctx, `SELECT end_lsn::text FROM pg_replication_slot_advance('bb', $1::pg_lsn)`, envelope.FormatLSN(endA)).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	si, err := relay.LookupSlot(ctx, conn, "bb")
	if err != nil || si.ConfirmedFlush != endA {
		t.Fatalf("slot bb confirmed at %s (%v), want A's end %s", envelope.FormatLSN(si.ConfirmedFlush), err, envelope.FormatLSN(endA))
	}
	crashed := &memTransport{}
	if err := crashed.PublishBatch(ctx, probe.Units()[:b+1]); err != nil {
		t.Fatal(err)
	}
	res, err := relay.ResumeFrom(ctx, crashed)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.CheckResume("bb", res, si.ConfirmedFlush, 0, "trellara run --config trellara.yml --cleanup"); err != nil {
		t.Fatalf("A ends at %s, B commits at %s: %v", envelope.FormatLSN(endA), envelope.FormatLSN(commitB), err)
	}
	runUntilFence(t, c, conn, crashed, "bb", "after-crash", cfg)
	got := crashed.envelopes(t)
	for i := 0; i < chunks; i++ {
		e := got[b+1+i]
		if e.CommitLsn != commitB || e.Boundary.ChunkIndex != uint32(i) || !proto.Equal(e, envs[b+i]) {
			t.Fatalf("unit %d after the partial chunk is %s, want B's chunk %d of %d", b+1+i, summary(e), i, chunks)
		}
	}
	for _, e := range got[b+1+chunks:] {
		if e.CommitLsn <= commitB {
			t.Fatalf("%s published again after B", summary(e))
		}
	}
	si, err = relay.LookupSlot(ctx, conn, "bb")
	if err != nil || si.ConfirmedFlush <= envs[b].EndLsn {
		t.Fatalf("slot bb confirmed at %s (%v), want past B's end %s", envelope.FormatLSN(si.ConfirmedFlush), err, envelope.FormatLSN(envs[b].EndLsn))
	}
}

// slowTransport makes every publish take a while, as a slow disk would.
type slowTransport struct {
	*memTransport
	delay time.Duration
}

func (s slowTransport) PublishBatch(ctx context.Context, payloads [][]byte) error {
	time.Sleep(s.delay)
	return s.memTransport.PublishBatch(ctx, payloads)
}

// Publishing one large transaction's chunks can take longer than the
// server's wal_sender_timeout; the server must not hang up meanwhile: the
// session keeps sending standby status updates between chunks. (Found at
// 15M rows, where the walsender terminated the connection.)
func TestRelayStaysAliveWhilePublishingALargeTransaction(t *testing.T) {
	pgtest.Require(t)
	// Each group's publish (2 s) stays well inside the timeout (5 s) even on
	// a loaded machine (at 1.5 s against 2 s, a CI run under load saw the
	// first group take past the timeout); the whole transaction takes
	// about three times the timeout.
	c := pgtest.Start(t, pgtest.Options{Settings: map[string]string{"wal_sender_timeout": "5s"}})
	ctx := context.Background()
	conn := c.Connect(ctx)
	c.Exec(t, schemaSQL)
	if _, err := relay.CreateSlot(ctx, replConn(t, c), "big"); err != nil {
		t.Fatal(err)
	}
	// ~50 MiB of rows: published in several groups (a group is at most
	// 8 MiB), each taking 2 s: the one transaction takes several times
	// the server's timeout to publish.
	c.Exec(t, `INSERT INTO docs SELECT g, repeat('x', 2500), g FROM generate_series(1, 20000) g`)
	tr := slowTransport{memTransport: &memTransport{}, delay: 2 * time.Second}
	s := runUntilFence(t, c, conn, tr, "big", "after-big", relay.Options{StatusInterval: 200 * time.Millisecond,
		Assembler: capture.AssemblerOptions{MemoryBytesMax: 1 << 20, SpillDir: t.TempDir()}})
	rows := 0
	for _, e := range tr.envelopes(t) {
		for _, r := range e.Rows {
			if r.Op == pb.Op_OP_INSERT && e.Relations[r.RelationIndex].Name == "docs" {
				rows++
			}
		}
	}
	if rows != 20000 {
		t.Fatalf("%d of 20000 rows published (%+v)", rows, s.Stats())
	}
}
