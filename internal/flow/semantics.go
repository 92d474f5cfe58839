package flow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/lsn"
	"github.com/trellara/trellara/relay"
)

// SemanticsOptions are `trellara semantics`'s.
type SemanticsOptions struct {
	// Sink names the target read ("" for the flow's only sink).
	Sink string
	// Duration is how long transactions are committed at the source.
	Duration time.Duration
	// Wait bounds each wait for the flow's applier (the service's, or the
	// one Semantics runs on a flow at rest): for the last transaction, and
	// before the tables are removed.
	Wait time.Duration
}

// SemanticsResult is what `trellara semantics` saw.
type SemanticsResult struct {
	Flow string `json:"flow"`
	Sink string `json:"sink"`
	// Transactions committed at the source, each writing both tables.
	Transactions int64 `json:"transactions"`
	// Observations: target snapshots read while they were applied; each
	// compares the two tables in one statement.
	Observations int64 `json:"observations"`
	// Violations: observations in which one table held a transaction's
	// rows and the other did not (a half-applied transaction).
	Violations int64    `json:"violations"`
	Examples   []string `json:"examples"`
	// Applied reports whether the target held every transaction at the end.
	Applied bool `json:"applied"`
}

// OK reports no violation, observations made, everything applied.
func (r *SemanticsResult) OK() bool { return r.Violations == 0 && r.Observations > 0 && r.Applied }

// RenderText prints the counts and the verdict.
func (r *SemanticsResult) RenderText(w io.Writer) {
	verdict := "no half-applied transaction observed"
	switch {
	case r.Violations > 0:
		verdict = "HALF-APPLIED TRANSACTIONS OBSERVED"
	case r.Observations == 0:
		verdict = "no observation made: nothing was shown"
	case !r.Applied:
		verdict = "the target did not receive every transaction in time"
	}
	fmt.Fprintf(w, "%s: %d transactions committed, %d target observations, %d violations\n", verdict, r.Transactions, r.Observations, r.Violations)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// semanticsTables are the two tables the probe creates, in the schema of
// the flow's first table, on the source and the target.
func (f *Flow) semanticsTables() (a, b config.TableName) {
	schema := "public"
	if ts := f.Tables(); len(ts) > 0 {
		schema = ts[0].Schema
	}
	return config.TableName{Schema: schema, Name: "trellara_semantics_a"}, config.TableName{Schema: schema, Name: "trellara_semantics_b"}
}

// ErrSemanticsProduction: the probe writes to the flow's own source.
var ErrSemanticsProduction = errors.New("semantics writes test transactions to the flow's source and target, and refuses a config whose environment is production")

// Semantics tries to catch a half-applied transaction on this flow: it
// creates two tables on the source and the target and adds them to the
// flow's publication (on the extension path the decoder passes them through
// its trellara.tables filter by name, ext/output.c), commits transactions that each write a row to both
// (and move a shared counter in both), and meanwhile reads the target many
// times, each read comparing the tables in one snapshot. It then removes
// the tables and their rows again, once the target has applied every
// change to them. Beside a running service that service applies them; on
// a flow at rest Semantics runs the flow's pipeline itself meanwhile and
// leaves the flow at rest (withPipeline).
func (f *Flow) Semantics(ctx context.Context, o SemanticsOptions) (*SemanticsResult, error) {
	if f.Cfg.Environment == config.Production {
		return nil, fmt.Errorf("flow %s: %w (environment: %s in %s)", f.Cfg.Flow, ErrSemanticsProduction, f.Cfg.Environment, f.ConfigPath)
	}
	s, err := f.Sink(o.Sink)
	if err != nil {
		return nil, err
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Wait <= 0 {
		o.Wait = 2 * time.Minute
	}
	res := &SemanticsResult{Flow: f.Cfg.Flow, Sink: s.Name, Examples: []string{}}
	err = f.withPipeline(ctx, "semantics", func(ctx context.Context) error { return f.semantics(ctx, o, s, res) })
	return res, err
}

// semantics is Semantics while the flow's stream moves (withPipeline):
// the leftovers of an interrupted run go first, then the probe, then its
// tables, each removal only once the target has applied every change to
// them (retireSemantics).
func (f *Flow) semantics(ctx context.Context, o SemanticsOptions, s config.Sink, res *SemanticsResult) error {
	src, tgt, closeBoth, err := f.connectBoth(ctx, s)
	if err != nil {
		return err
	}
	defer closeBoth()
	ta, tb := f.semanticsTables()
	pub := pgx.Identifier{f.Cfg.Source.Publication}.Sanitize()
	create := fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, v bigint NOT NULL); CREATE TABLE %[2]s (id bigint PRIMARY KEY, v bigint NOT NULL);
		INSERT INTO %[1]s VALUES (0, 0); INSERT INTO %[2]s VALUES (0, 0)`, ta.Sanitize(), tb.Sanitize())
	if err := f.retireSemantics(ctx, src, tgt, s, o.Wait); err != nil {
		return fmt.Errorf("flow %s: remove the tables of an earlier semantics run: %w", f.Cfg.Flow, err)
	}
	err = f.semanticsRun(ctx, src, tgt, ta, tb, pub, create, o, res)
	if rerr := f.retireSemantics(ctx, src, tgt, s, o.Wait); rerr != nil {
		err = errors.Join(err, fmt.Errorf("flow %s: remove the semantics tables %s and %s: %w", f.Cfg.Flow, ta, tb, rerr))
	}
	return err
}

// retireSemantics removes the probe's tables without breaking the flow:
// out of the publication first (no further change to them is captured),
// then a fence, and only once the target has applied it (so every change
// to them before it) are they dropped on the source and the target. A
// target that does not get there within wait keeps its tables, and so
// does the source: the flow stays runnable, and the next semantics run
// removes them.
func (f *Flow) retireSemantics(ctx context.Context, src, tgt *pgx.Conn, s config.Sink, wait time.Duration) error {
	ctx = context.WithoutCancel(ctx) // an interrupted probe still removes what it made
	ta, tb := f.semanticsTables()
	var members []string
	var exists bool
	// On the extension path the decoder passes the probe's tables through
	// any trellara.tables filter (ext/output.c): no publication to leave.
	if f.Cfg.Source.Capture != config.CaptureExtension {
		if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(tablename::text), '{}') FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename IN ($3, $4)`,
			f.Cfg.Source.Publication, ta.Schema, ta.Name, tb.Name).Scan(&members); err != nil {
			return err
		}
	}
	if err := src.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL OR to_regclass($2) IS NOT NULL`, ta.Sanitize(), tb.Sanitize()).Scan(&exists); err != nil {
		return err
	}
	for _, name := range members {
		t := config.TableName{Schema: ta.Schema, Name: name}
		if _, err := src.Exec(ctx, fmt.Sprintf(`ALTER PUBLICATION %s DROP TABLE %s`, pgx.Identifier{f.Cfg.Source.Publication}.Sanitize(), t.Sanitize())); err != nil {
			return err
		}
	}
	member := len(members) > 0
	if member || exists {
		fence, err := relay.EmitFence(ctx, src, "semantics")
		if err != nil {
			return err
		}
		var cp uint64
		for deadline := time.Now().Add(wait); ; {
			st, err := apply.ReadStatus(ctx, tgt, s.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
			if err != nil {
				return err
			}
			if cp = st.Checkpoint.EndLSN; cp >= fence {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the target has not applied every change to %s and %s (checkpoint %s, fence %s) within %s, so both are left in place "+
					"and the flow stays runnable; once the flow runs, remove them with %s", ta, tb, lsn.Format(cp), lsn.Format(fence), wait,
					shell.Trellara("semantics", f.ConfigPath, "--duration", "1s"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var errs []error
	for _, db := range []*pgx.Conn{src, tgt} {
		if _, err := db.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s`, ta.Sanitize(), tb.Sanitize())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *Flow) semanticsRun(ctx context.Context, src, tgt *pgx.Conn, ta, tb config.TableName, pub, create string,
	o SemanticsOptions, res *SemanticsResult) error {
	createTarget := create
	if f.Cfg.Source.Capture == config.CaptureExtension {
		// The decoder streams the probe's tables from their creation on:
		// the source's first rows reach the target through the stream.
		createTarget = fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, v bigint NOT NULL); CREATE TABLE %[2]s (id bigint PRIMARY KEY, v bigint NOT NULL)`,
			ta.Sanitize(), tb.Sanitize())
	}
	if _, err := tgt.Exec(ctx, createTarget); err != nil {
		return fmt.Errorf("flow %s: create the semantics tables on the target: %w", f.Cfg.Flow, err)
	}
	if _, err := src.Exec(ctx, create); err != nil {
		return fmt.Errorf("flow %s: create the semantics tables on the source: %w", f.Cfg.Flow, err)
	}
	if f.Cfg.Source.Capture != config.CaptureExtension {
		if _, err := src.Exec(ctx, fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s, %s`, pub, ta.Sanitize(), tb.Sanitize())); err != nil {
			return fmt.Errorf("flow %s: add the semantics tables to publication %s (the flow must own it: source.owns_slot: true): %w", f.Cfg.Flow, f.Cfg.Source.Publication, err)
		}
	}
	// One statement, one snapshot: the row counts and the shared counter
	// of both tables. A transaction applied whole changes both or neither.
	read := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s), (SELECT count(*) FROM %[2]s),
		(SELECT v FROM %[1]s WHERE id = 0), (SELECT v FROM %[2]s WHERE id = 0)`, ta.Sanitize(), tb.Sanitize())
	// The reader has a connection of its own: cancelled mid-query, a
	// connection is closed.
	rd, err := f.ConnectSink(ctx, mustSink(f, res.Sink))
	if err != nil {
		return err
	}
	defer rd.Close(context.Background())
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for rctx.Err() == nil {
			var na, nb int64
			var va, vb *int64
			if err := rd.QueryRow(rctx, read).Scan(&na, &nb, &va, &vb); err != nil {
				if rctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				continue
			}
			res.Observations++
			if na != nb || (va == nil) != (vb == nil) || (va != nil && *va != *vb) {
				res.Violations++
				if len(res.Examples) < 5 {
					res.Examples = append(res.Examples, fmt.Sprintf("%s held %d rows and counter %v, %s held %d rows and counter %v in one target snapshot",
						ta, na, deref(va), tb, nb, deref(vb)))
				}
			}
		}
	}()
	insert := fmt.Sprintf(`WITH x AS (INSERT INTO %[1]s VALUES ($1, $1)), y AS (UPDATE %[1]s SET v = $1 WHERE id = 0)
		INSERT INTO %[2]s VALUES ($1, $1)`, ta.Sanitize(), tb.Sanitize())
	counter := fmt.Sprintf(`UPDATE %s SET v = $1 WHERE id = 0`, tb.Sanitize())
	var werr error
	end := time.Now().Add(o.Duration)
	for k := int64(1); time.Now().Before(end) && ctx.Err() == nil; k++ {
		// Two statements in one transaction, two tables each.
		tx, err := src.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, insert, k)
		}
		if err == nil {
			_, err = tx.Exec(ctx, counter, k)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			werr = fmt.Errorf("flow %s: commit semantics transaction %d at the source: %w", f.Cfg.Flow, k, err)
			break
		}
		res.Transactions = k
		time.Sleep(2 * time.Millisecond)
	}
	// Let the flow apply the last transaction while the reader goes on.
	deadline := time.Now().Add(o.Wait)
	for werr == nil && ctx.Err() == nil && time.Now().Before(deadline) {
		var applied int64
		err := tgt.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce((SELECT v FROM %s WHERE id = 0), 0)`, tb.Sanitize())).Scan(&applied)
		if err == nil && applied >= res.Transactions {
			res.Applied = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopReader()
	<-readerDone
	if werr == nil && !res.Applied {
		f.Logger.Warn("semantics: the target did not receive every transaction", "flow", f.Cfg.Flow, "wait", o.Wait,
			"hint", "see what holds the applier: "+shell.Trellara("status", f.ConfigPath))
	}
	return werr
}

// mustSink is sink name, which Semantics has already resolved.
func mustSink(f *Flow, name string) config.Sink {
	for _, s := range f.Sinks() {
		if s.Name == name {
			return s
		}
	}
	return config.Sink{}
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}
