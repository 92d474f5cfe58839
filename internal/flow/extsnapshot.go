package flow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/internal/verify"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/sidecar"
)

// The extension path's initial snapshot (docs/EXTENSION.md, "The initial
// snapshot").
//
// The extension's decoder owns its slot and exports no snapshot, so a new
// extension flow copies its tables with the reseed mechanism (apply.Reseed,
// DBLog-style watermarked primary-key chunks) through its own stream:
//
//  1. before the flow's first applier starts, a Replace reseed of every
//     table is recorded on the target (apply.PrepareReseed), so from the
//     log's first transaction on the applier writes each table's changes
//     to the table's shadow and never to the table;
//  2. a marker file in the flow's state directory (extensionSnapshotPath)
//     lets capture start on the empty log, from the decoder slot's
//     confirmed position: every change after it reaches the shadows
//     through the stream;
//  3. beside the stream, each table is read in chunks between watermarks
//     (transactional logical messages with the prefix trellara.reseed,
//     which the extension always forwards), merged into the shadow at the
//     chunk's high watermark except the keys the stream touched, and the
//     shadow is swapped in at the handoff; the table is then verified.
//
// A chunk is read after the stream began, so a change committed before the
// log's first transaction is in the chunk, and one after it is in the
// stream; the merge rule (apply/reseed.go) resolves the overlap. A restart
// resumes each table from its last merged chunk: the reseeds stay recorded
// on the target until their verify, and `run --local` continues them.

// extensionSnapshotPath is the marker that an initial snapshot was
// recorded on the flow's targets: capture may start on an empty log.
func (f *Flow) extensionSnapshotPath() string { return filepath.Join(f.dir, "extension-snapshot") }

// extensionSnapshotRecorded reports whether the marker exists.
func (f *Flow) extensionSnapshotRecorded() (bool, error) {
	_, err := os.Stat(f.extensionSnapshotPath())
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// extensionSnapshotCommand is the command that takes, and resumes, an
// extension flow's initial snapshot; its reseeds record it as theirs.
func (f *Flow) extensionSnapshotCommand() string {
	return shell.Trellara("run", f.ConfigPath, "--local")
}

// ExtensionSnapshotError: an extension flow's initial snapshot cannot be
// taken as the flow is configured. Nothing was recorded.
type ExtensionSnapshotError struct {
	Flow   string
	Reason string
}

func (e *ExtensionSnapshotError) Error() string {
	return fmt.Sprintf("flow %s: the initial snapshot on the extension path %s", e.Flow, e.Reason)
}

// prepareExtensionSnapshot is step 1 of the initial snapshot, run before
// the appliers start: on an extension flow whose transport holds nothing
// yet, it records a Replace reseed of every table on each target and then
// the marker. It reports whether a snapshot is (now, or still) recorded.
// Recording is idempotent: a run that died before capture began finds its
// reseeds and records nothing twice.
func (f *Flow) prepareExtensionSnapshot(ctx context.Context, tgts map[string]*pgx.Conn) (bool, error) {
	if f.Cfg.Source.Capture != config.CaptureExtension {
		return false, nil
	}
	tr, closeTr, err := f.publisher(ctx)
	if err != nil {
		return false, err
	}
	res, err := relay.ResumeFrom(ctx, tr)
	closeTr()
	if err != nil {
		return false, fmt.Errorf("flow %s: read the transport's newest unit: %w", f.Cfg.Flow, err)
	}
	if !res.Empty {
		return false, nil // the stream has begun: copies left to do are resumed (resumeExtensionSnapshot)
	}
	sinks := f.Sinks()
	if len(sinks) > 1 {
		return false, &ExtensionSnapshotError{Flow: f.Cfg.Flow, Reason: fmt.Sprintf(
			"copies into one sink, and this flow has %d: a reseed's watermarks name no sink, so two appliers would each merge the other's chunks; "+
				"start the flow with one sink, then add the others with `%s` once it is CONVERGED", len(sinks), shell.Trellara("reseed", f.ConfigPath, "--all-tables", "--sink", "<name>"))}
	}
	src, err := f.ConnectSource(ctx)
	if err != nil {
		return false, err
	}
	defer src.Close(context.Background())
	tables := f.Tables()
	if len(tables) == 0 {
		return false, &ExtensionSnapshotError{Flow: f.Cfg.Flow, Reason: "has no table to copy: name them in source.tables (and in the server's trellara.tables)"}
	}
	if keyless, err := keylessTables(ctx, src, tables); err != nil {
		return false, err
	} else if len(keyless) > 0 {
		info, err := sidecar.CheckServer(ctx, src)
		if err != nil {
			return false, fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
		}
		verb := "have"
		if len(keyless) == 1 {
			verb = "has"
		}
		return false, f.extensionSnapshotRecipe(info, fmt.Sprintf("%s %s no primary key on the source, and the initial snapshot on the extension path "+
			"copies primary-key ranges: add one (ALTER TABLE ... ADD PRIMARY KEY) and run again", strings.Join(keyless, ", "), verb))
	}
	for _, sk := range sinks {
		tgt := tgts[sk.Name]
		for _, t := range tables {
			if _, err := apply.PrepareReseed(ctx, src, tgt, apply.ReseedOptions{
				Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Schema: sk.Target.Schema,
				Table: t, Target: t, Replace: true, Command: f.extensionSnapshotCommand(), ConfigPath: f.ConfigPath,
			}); err != nil {
				return false, fmt.Errorf("flow %s: sink %s: record the initial snapshot of %s: %w", f.Cfg.Flow, sk.Name, t, err)
			}
		}
	}
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return false, fmt.Errorf("flow %s: create %s: %w", f.Cfg.Flow, f.dir, err)
	}
	if err := capture.WriteFileDurable(f.extensionSnapshotPath(), []byte(f.extensionSnapshotCommand()+"\n")); err != nil {
		return false, fmt.Errorf("flow %s: record the initial snapshot in %s: %w", f.Cfg.Flow, f.extensionSnapshotPath(), err)
	}
	f.Logger.Info("initial snapshot on the extension path recorded: every table is copied in watermarked chunks beside the stream",
		"flow", f.Cfg.Flow, "tables", len(tables))
	return true, nil
}

// keylessTables lists the tables without a primary key on the source.
func keylessTables(ctx context.Context, src *pgx.Conn, tables []config.TableName) ([]string, error) {
	var out []string
	for _, t := range tables {
		var has bool
		err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary)`, t.Schema, t.Name).Scan(&has)
		if err != nil {
			return nil, fmt.Errorf("read the primary key of %s on the source: %w", t, err)
		}
		if !has {
			out = append(out, t.String())
		}
	}
	return out, nil
}

// resumeExtensionSnapshot is step 3 of the initial snapshot, run while the
// flow's capture and applier run: it copies, hands off and verifies every
// table whose initial reseed is unfinished on sk's target (copying, or
// handed off and not yet verified), then removes the marker. It does nothing on a flow whose snapshot
// is done.
func (f *Flow) resumeExtensionSnapshot(ctx context.Context, sk config.Sink, progress func(apply.ReseedProgress)) (*ReseedResult, error) {
	if f.Cfg.Source.Capture != config.CaptureExtension {
		return nil, nil
	}
	tgt, err := f.ConnectSink(ctx, sk)
	if err != nil {
		return nil, err
	}
	rs, err := apply.ListReseeds(ctx, tgt, sk.Target.Schema, f.Cfg.Flow, f.Cfg.Source.ID)
	tgt.Close(context.Background())
	if err != nil {
		return nil, err
	}
	var tables []config.TableName
	for _, r := range rs {
		if r.Command != f.extensionSnapshotCommand() {
			continue // a reseed the user started: resumed by its own command
		}
		t, err := config.ParseTableName(r.Relation)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	res := &ReseedResult{Flow: f.Cfg.Flow, Sink: sk.Name, Tables: []ReseedTable{}}
	if len(tables) > 0 {
		// The copies verify each table in motion: the pipeline is this
		// process's own.
		f.moving.Add(1)
		err = f.reseed(ctx, ReseedOptions{Tables: tableStrings(tables), Progress: progress}, sk, tables, nil, nil, res)
		f.moving.Add(-1)
		if err != nil {
			return res, err
		}
		for _, t := range res.Tables {
			if t.Verdict != verify.Converged {
				return res, fmt.Errorf("flow %s: the initial snapshot of %s handed off, but its verify says %s: %s; see `%s`",
					f.Cfg.Flow, t.Relation, t.Verdict, strings.Join(t.Reasons, "; "), shell.Trellara("verify", f.ConfigPath, "--table", t.Relation))
			}
		}
	}
	if err := os.Remove(f.extensionSnapshotPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("flow %s: remove %s: %w", f.Cfg.Flow, f.extensionSnapshotPath(), err)
	}
	return res, nil
}
