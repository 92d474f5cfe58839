package flow_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/segmentlog"
)

// TestTargetRestoredFromCopyConverges: the target loses commits that the
// applier's log cursor has already passed (its data directory is restored
// from a copy, as after a restore from backup or a failover to an
// asynchronous standby). The next run applies the lost transactions again
// from the local log, each exactly once, and ends CONVERGED.
func TestTargetRestoredFromCopyConverges(t *testing.T) {
	pgtest.Require(t)
	bin := buildCLI(t)
	src := pgtest.Start(t, pgtest.Options{NoFsync: true})
	dst := pgtest.Start(t, pgtest.Options{NoFsync: true})
	src.Exec(t, crashSchema)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "trellara.yml")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("trellara %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	ctx := context.Background()
	srcConn := src.Connect(ctx)
	rng := rand.New(rand.NewPCG(12, 34))
	committed := 0
	commit := func(n int) {
		t.Helper()
		for range n {
			committed++
			if err := workloadTxn(ctx, srcConn, committed, rng); err != nil {
				t.Fatal(err)
			}
		}
	}

	mustRun("init", "--source-database-url", src.URL("postgres"), "--target-database-url", dst.URL("postgres"),
		"--table", "public.orders", "--table", "public.line_items", "--table", "public.counters", "--flow", "restore", "--evaluate",
		"--output", cfgPath)
	mustRun("run", "--config", cfgPath, "--local")
	commit(100)
	mustRun("run", "--config", cfgPath, "--local")

	// The copy the target will be restored from.
	dst.Stop()
	saved := dst.CopyData(t)
	dst.Restart()

	// The flow keeps running: the cursor moves past transactions the
	// restored target will not have.
	commit(150)
	mustRun("run", "--config", cfgPath, "--local")

	dst.Stop()
	dst.RestoreData(t, saved)
	dst.Restart()
	commit(50)

	out, err := run("run", "--config", cfgPath, "--local", "--verify", "--format", "text")
	if err != nil || !strings.Contains(out, "CONVERGED") || strings.Contains(out, "DIVERGED") {
		t.Fatalf("run after the target was restored: %v\n%s", err, out)
	}
	t.Logf("run after the target was restored:\n%s", out)

	// Exactly once: every counter and row count equals the source's.
	dstConn := dst.Connect(ctx)
	for _, q := range []string{`SELECT sum(n) FROM counters`, `SELECT count(*) FROM orders`, `SELECT count(*) FROM line_items`,
		`SELECT count(*) FROM orders WHERE note LIKE '%updated%'`} {
		var s, d int64
		if err := srcConn.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if err := dstConn.QueryRow(ctx, q).Scan(&d); err != nil {
			t.Fatal(err)
		}
		if s != d {
			t.Errorf("%s: source %d, target %d", q, s, d)
		}
	}
	var sum int64
	if err := dstConn.QueryRow(ctx, `SELECT sum(n) FROM counters`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != int64(committed) {
		t.Errorf("target counters sum to %d, %d transactions committed", sum, committed)
	}

	// The checkpoint counts every transaction of the log applied once, ends
	// at the log's last unit, and the cursor stands right after it.
	var applied, skipped int64
	var offset int64 = -1
	if err := dstConn.QueryRow(ctx, `SELECT txns_applied, txns_skipped, coalesce(log_offset, -1) FROM trellara.checkpoints WHERE flow = 'restore'`).
		Scan(&applied, &skipped, &offset); err != nil {
		t.Fatal(err)
	}
	lg, _, err := segmentlog.Open(filepath.Join(dir, "trellara-data", "restore", "log"), segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	var txns int64
	rd := lg.NewReader(lg.FirstOffset())
	defer rd.Close()
	for rd.Offset() < lg.NextOffset() {
		off, payload, err := rd.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		env, err := envelope.Decode(payload)
		if err != nil {
			t.Fatalf("log offset %d: %v", off, err)
		}
		if b := env.GetBoundary(); b.GetKind() == pb.UnitKind_UNIT_KIND_TRANSACTION ||
			(b.GetKind() == pb.UnitKind_UNIT_KIND_CHUNK && b.ChunkIndex+1 == b.ChunkCount) {
			txns++
		}
	}
	cur, _, err := lg.CursorOffset("applier")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log: %d units, %d transactions; checkpoint: %d applied, %d skipped, offset %d; cursor %d",
		lg.NextOffset(), txns, applied, skipped, offset, cur)
	if applied != txns {
		t.Errorf("the target's checkpoint counts %d transactions applied; the log holds %d", applied, txns)
	}
	if offset != int64(lg.NextOffset())-1 || cur != lg.NextOffset() {
		t.Errorf("checkpoint offset %v, cursor %d: want %d and %d", offset, cur, lg.NextOffset()-1, lg.NextOffset())
	}
}
