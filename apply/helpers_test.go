package apply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
)

const (
	testFlow   = "flow1"
	testSource = "src1"
)

// target starts a throwaway cluster with a "target" database and returns
// the cluster and a connection to that database.
func target(t testing.TB, opts pgtest.Options) (*pgtest.Cluster, *pgx.Conn) {
	t.Helper()
	pgtest.Require(t)
	c := pgtest.Start(t, opts)
	c.CreateDB(t, "target")
	return c, connect(t, c.URL("target"))
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t testing.TB, conn *pgx.Conn, sql ...string) {
	t.Helper()
	for _, s := range sql {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
	}
}

func queryString(t testing.TB, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s *string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	if s == nil {
		return "<NULL>"
	}
	return *s
}

func queryInt(t testing.TB, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	return n
}

func newApplier(t testing.TB, conn *pgx.Conn, mod func(*Config)) *Applier {
	t.Helper()
	cfg := Config{Flow: testFlow, SourceID: testSource, ConfigPath: "test.yml",
		Logger: slog.New(slog.NewTextHandler(testLogOut, nil))}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Values.
func tv(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }

func null() *pb.Value  { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_NULL} }
func toast() *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST} }

func vals(ss ...string) []*pb.Value {
	out := make([]*pb.Value, len(ss))
	for i, s := range ss {
		out[i] = tv(s)
	}
	return out
}

// relation builds relation metadata; a column name ending in "*" is a key
// column.
func relation(schema, name string, identity byte, cols ...string) *pb.Relation {
	r := &pb.Relation{Oid: 16384, Schema: schema, Name: name, ReplicaIdentity: uint32(identity)}
	for _, c := range cols {
		key := strings.HasSuffix(c, "*")
		r.Columns = append(r.Columns, &pb.RelationColumn{Name: strings.TrimSuffix(c, "*"), TypeOid: 25, TypeModifier: -1, Key: key})
	}
	r.Fingerprint = envelope.RelationFingerprint(r)
	return r
}

// txn builds a TRANSACTION envelope.
type txn struct{ e *pb.Envelope }

func newTxn(lsn uint64) *txn {
	return &txn{e: &pb.Envelope{
		ProtocolVersion: envelope.ProtocolVersion, SourceId: testSource, Xid: uint32(lsn),
		CommitLsn: lsn, EndLsn: lsn + 40, CommitTimeUnixMicros: 1_700_000_000_000_000 + int64(lsn),
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION},
	}}
}

func (t *txn) rel(r *pb.Relation) uint32 {
	for i, x := range t.e.Relations {
		if x == r {
			return uint32(i)
		}
	}
	t.e.Relations = append(t.e.Relations, r)
	return uint32(len(t.e.Relations) - 1)
}

func (t *txn) add(r *pb.Row) *txn {
	r.Seq = uint64(len(t.e.Rows))
	t.e.Rows = append(t.e.Rows, r)
	return t
}

func (t *txn) insert(r *pb.Relation, v ...*pb.Value) *txn {
	return t.add(&pb.Row{Op: pb.Op_OP_INSERT, RelationIndex: t.rel(r), NewTuple: v})
}

// update: old may be nil (key unchanged, OLD_TUPLE_NONE).
func (t *txn) update(r *pb.Relation, kind pb.OldTuple, old, new []*pb.Value) *txn {
	return t.add(&pb.Row{Op: pb.Op_OP_UPDATE, RelationIndex: t.rel(r), OldKind: kind, OldTuple: old, NewTuple: new})
}

func (t *txn) delete(r *pb.Relation, kind pb.OldTuple, old []*pb.Value) *txn {
	return t.add(&pb.Row{Op: pb.Op_OP_DELETE, RelationIndex: t.rel(r), OldKind: kind, OldTuple: old})
}

func (t *txn) truncate(flags uint32, rels ...*pb.Relation) *txn {
	for _, r := range rels {
		t.add(&pb.Row{Op: pb.Op_OP_TRUNCATE, RelationIndex: t.rel(r), TruncateFlags: flags})
	}
	return t
}

func (t *txn) message(prefix, content string) *txn {
	return t.add(&pb.Row{Op: pb.Op_OP_MESSAGE, MessagePrefix: prefix, MessageContent: []byte(content)})
}

func (t *txn) encode(tb testing.TB) []byte {
	tb.Helper()
	envelope.Seal(t.e)
	b, err := envelope.Encode(t.e)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// snapshotBatch builds SNAPSHOT batch n of r at the consistent point lsn.
func snapshotBatch(tb testing.TB, r *pb.Relation, lsn uint64, n uint32, rows ...[]*pb.Value) []byte {
	tb.Helper()
	e := &pb.Envelope{
		ProtocolVersion: envelope.ProtocolVersion, SourceId: testSource, CommitLsn: lsn, EndLsn: lsn,
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT, ChunkIndex: n, SnapshotRelation: r.Schema + "." + r.Name},
	}
	if len(rows) > 0 {
		e.Relations = []*pb.Relation{r}
	}
	for i, v := range rows {
		e.Rows = append(e.Rows, &pb.Row{Seq: uint64(i), Op: pb.Op_OP_INSERT, NewTuple: v})
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func snapshotEnd(tb testing.TB, r *pb.Relation, lsn uint64, batches uint32) []byte {
	tb.Helper()
	e := &pb.Envelope{
		ProtocolVersion: envelope.ProtocolVersion, SourceId: testSource, CommitLsn: lsn, EndLsn: lsn,
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_SNAPSHOT_END, ChunkIndex: batches, SnapshotRelation: r.Schema + "." + r.Name},
	}
	envelope.Seal(e)
	b, err := envelope.Encode(e)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// memSource serves payloads at offsets base, base+1, ...; at the end it
// returns errDrained, or blocks until ctx is done when block is set.
type memSource struct {
	payloads [][]byte
	base     uint64
	pos      int
	block    bool
}

var errDrained = errors.New("test source drained")

func (s *memSource) Next(ctx context.Context) (uint64, []byte, error) {
	if s.pos < len(s.payloads) {
		s.pos++
		return s.base + uint64(s.pos-1), s.payloads[s.pos-1], nil
	}
	if !s.block {
		return 0, nil, errDrained
	}
	<-ctx.Done()
	return 0, nil, ctx.Err()
}

// recCursor records committed offsets; check, if set, runs on each.
type recCursor struct {
	mu      sync.Mutex
	offsets []uint64
	check   func(uint64) error
}

func (c *recCursor) Commit(offset uint64) error {
	if c.check != nil {
		if err := c.check(offset); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offsets = append(c.offsets, offset)
	return nil
}

func (c *recCursor) last() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.offsets) == 0 {
		return 0, false
	}
	return c.offsets[len(c.offsets)-1], true
}

// drain applies payloads (offsets from base) until the source runs dry and
// returns the error that stopped Run, or nil if it was the end of input.
func drain(t testing.TB, a *Applier, cur *recCursor, base uint64, payloads [][]byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if cur == nil {
		cur = &recCursor{}
	}
	err := a.Run(ctx, &memSource{payloads: payloads, base: base}, cur, nil)
	if errors.Is(err, errDrained) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("Run returned nil before the source was drained")
	}
	return err
}

func mustDrain(t testing.TB, a *Applier, cur *recCursor, base uint64, payloads [][]byte) {
	t.Helper()
	if err := drain(t, a, cur, base, payloads); err != nil {
		t.Fatal(err)
	}
}

func readStatus(t testing.TB, conn *pgx.Conn) *Status {
	t.Helper()
	st, err := ReadStatus(context.Background(), conn, "", testFlow, testSource)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var testLogOut io.Writer = io.Discard
