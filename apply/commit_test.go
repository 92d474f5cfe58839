package apply

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/mutation"
	"github.com/trellara/trellara/internal/pgtest"
)

// orderTarget wraps the PostgreSQL target and writes down, one word per
// call, what the applier asks of it, of the cursor and of Config.Applied.
// At COMMIT and at the cursor it checks the applier's in-memory
// checkpoint and counters: untouched until the target commits, moved
// before the cursor does.
type orderTarget struct {
	Target
	t       *testing.T
	a       *Applier
	broken  mutation.Set
	words   []string
	commits int64 // target transactions committed
}

func (o *orderTarget) ApplierMutations() mutation.Set { return o.broken }

func (o *orderTarget) say(w string, err error) {
	if err != nil {
		w += "!"
	}
	o.words = append(o.words, w)
}

func (o *orderTarget) Begin(ctx context.Context) (TargetTx, error) {
	tx, err := o.Target.Begin(ctx)
	o.say("begin", err)
	if err != nil {
		return nil, err
	}
	return &orderTx{TargetTx: tx, o: o, before: o.a.Checkpoint()}, nil
}

func (o *orderTarget) Quarantine(ctx context.Context, q QuarantineRecord) (int64, error) {
	id, err := o.Target.Quarantine(ctx, q)
	o.say("quarantine", err)
	return id, err
}

func (o *orderTarget) CountSkipped(ctx context.Context, n int64) error {
	err := o.Target.CountSkipped(ctx, n)
	o.say("skipped", err)
	return err
}

// Commit is the cursor.
func (o *orderTarget) Commit(offset uint64) error {
	o.say("cursor", nil)
	if cp := o.a.Checkpoint(); !cp.HasOffset || cp.Offset != offset {
		o.t.Errorf("cursor moves to offset %d while the applier's checkpoint says offset %d (set %v): the checkpoint must follow the commit before the cursor moves",
			offset, cp.Offset, cp.HasOffset)
	}
	if n := o.a.Stats().TargetTxns; n != o.commits {
		o.t.Errorf("cursor moves with %d target transactions counted, %d committed", n, o.commits)
	}
	return nil
}

type orderTx struct {
	TargetTx
	o      *orderTarget
	before Checkpoint
	done   bool
}

func (x *orderTx) Apply(ctx context.Context, unit int, env *pb.Envelope) (int, int, error) {
	rows, msgs, err := x.TargetTx.Apply(ctx, unit, env)
	w := "apply"
	if env.GetBoundary().GetChunkCount() > 0 {
		w = "chunk"
	}
	x.o.say(w, err)
	return rows, msgs, err
}

func (x *orderTx) Copy(ctx context.Context, unit int, env *pb.Envelope) error {
	err := x.TargetTx.Copy(ctx, unit, env)
	x.o.say("copy", err)
	return err
}

func (x *orderTx) SetProgress(ctx context.Context, p SnapshotProgress) error {
	err := x.TargetTx.SetProgress(ctx, p)
	x.o.say("progress", err)
	return err
}

func (x *orderTx) SetCheckpoint(ctx context.Context, u CheckpointUpdate) error {
	err := x.TargetTx.SetCheckpoint(ctx, u)
	x.o.say("checkpoint", err)
	return err
}

func (x *orderTx) MarkReplayed(ctx context.Context, id int64) error {
	err := x.TargetTx.MarkReplayed(ctx, id)
	x.o.say("replayed", err)
	return err
}

func (x *orderTx) Flush(ctx context.Context) error {
	err := x.TargetTx.Flush(ctx)
	x.o.say("flush", err)
	return err
}

func (x *orderTx) Commit(ctx context.Context) (time.Time, error) {
	o := x.o
	if cp := o.a.Checkpoint(); cp != x.before {
		o.t.Errorf("the applier's checkpoint moved before COMMIT: %+v, was %+v", cp, x.before)
	}
	if n := o.a.Stats().TargetTxns; n != o.commits {
		o.t.Errorf("%d target transactions counted before COMMIT, %d committed", n, o.commits)
	}
	at, err := x.TargetTx.Commit(ctx)
	o.say("commit", err)
	if err == nil {
		x.done = true
		o.commits++
	}
	return at, err
}

func (x *orderTx) Rollback(ctx context.Context) {
	x.TargetTx.Rollback(ctx)
	if !x.done {
		x.o.say("rollback", nil)
		x.done = true
	}
}

// TestCommitOrder: every path that commits a target transaction — a batch
// of transactions (one of them replaying a quarantined unit), a chunk
// sequence, a snapshot batch, a snapshot end and, under
// mutation.DropRefused, a refused unit passed over — writes its snapshot
// progress and checkpoint with the data, closes replayed quarantine rows,
// flushes, commits, and only then moves the in-memory checkpoint, the
// counters and, last, the cursor (commit).
func TestCommitOrder(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	exec(t, conn, bigDDL,
		"CREATE TABLE items (id int PRIMARY KEY)",
		"INSERT INTO items VALUES (500)") // the source does not have it: txn 40 is refused
	items := relation("public", "items", 'd', "id*")
	payloads := cat(
		one(snapshotBatch(t, items, 5, 0, vals("1"), vals("2"))), // 0
		one(snapshotEnd(t, items, 5, 1)),                         // 1
		one(newTxn(10).insert(items, vals("11")...).encode(t)),   // 2
		one(newTxn(20).insert(items, vals("21")...).encode(t)),   // 3
		chunks(t, bigTxn(30, 1, 5), 2),                           // 4, 5, 6
		one(newTxn(40).insert(items, vals("500")...).encode(t)),  // 7
		one(newTxn(50).insert(items, vals("51")...).encode(t)),   // 8
		one(newTxn(60).insert(items, vals("600")...).encode(t)),  // 9
	)
	ctx := context.Background()
	// run steps an applier over payloads[from:to] and returns the words it
	// said and the error that stopped it.
	run := func(from, to int, broken mutation.Set) (string, error) {
		cfg := Config{Flow: testFlow, SourceID: testSource, ConfigPath: "test.yml",
			Logger: slog.New(slog.NewTextHandler(testLogOut, nil))}.withDefaults()
		o := &orderTarget{Target: newPGTarget(conn, cfg), t: t, broken: broken}
		cfg.Applied = func([]int64) { o.say("applied", nil) }
		a, err := NewWithTarget(o, cfg)
		if err != nil {
			t.Fatal(err)
		}
		o.a = a
		if err := a.Open(ctx); err != nil {
			t.Fatal(err)
		}
		defer a.Close(ctx)
		src := &sliceSource{payloads: payloads[:to], pos: from}
		for {
			ok, err := a.Step(ctx, src, o)
			if err != nil || !ok {
				return strings.Join(o.words, " "), err
			}
		}
	}
	check := func(name, got string, want ...string) {
		t.Helper()
		if w := strings.Join(want, " "); got != w {
			t.Errorf("%s:\n got  %s\n want %s", name, got, w)
		}
	}

	got, err := run(0, 8, 0)
	if !IsQuarantined(err) {
		t.Fatalf("first run = %v, want the transaction at offset 7 quarantined", err)
	}
	check("snapshot batch, snapshot end, a batch, a chunk sequence, a refused transaction", got,
		"begin copy progress checkpoint flush commit cursor",
		"begin progress checkpoint flush commit cursor",
		"begin apply apply checkpoint flush commit applied cursor",
		"begin chunk flush chunk flush chunk flush checkpoint flush commit applied cursor",
		"begin apply checkpoint flush! rollback quarantine")

	exec(t, conn, "DELETE FROM items WHERE id = 500")
	got, err = run(7, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	check("a batch replaying the quarantined transaction", got,
		"begin apply apply checkpoint replayed flush commit applied cursor")

	exec(t, conn, "INSERT INTO items VALUES (600)")
	got, err = run(9, 10, mutation.DropRefused)
	if err != nil {
		t.Fatal(err)
	}
	check("a refused transaction passed over (mutation.DropRefused)", got,
		"begin apply checkpoint flush! rollback",
		"begin checkpoint flush commit cursor")
	if cp := readStatus(t, conn).Checkpoint; cp.CommitLSN != 60 || cp.Offset != 9 {
		t.Errorf("checkpoint after the passed-over transaction = %+v, want commit LSN 60 at offset 9", cp)
	}
}
