package flow

import (
	"context"
	"log/slog"
	"os"

	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/segmentlog"
)

// CodeConsumerStalled is the check finding for a stalled consumer of the
// flow's local log (stall.go).
const CodeConsumerStalled = "consumer_stalled"

// CheckSource grades the flow's source as `trellara check --config` reports it
// and as the evidence package's check.json holds it: the read-only grader
// (internal/check) scoped to the flow (its tables and its slot; anything
// else on the server only counted), plus the flow's own local log, whose
// stalled consumers are graded warning, high under 6 h of retention
// headroom. It changes nothing: the log is read as status reads it.
func CheckSource(ctx context.Context, configPath string, cfg *config.Config, sec config.Secrets, logger *slog.Logger) (*check.Report, error) {
	s, err := check.Connect(ctx, sec.SourceDatabaseURL.Reveal(), check.ConnectOptions{})
	if err != nil {
		return nil, err
	}
	defer s.Close(context.Background())
	r, err := s.Inspect(ctx, check.Options{Tables: cfg.Source.Tables, Scope: &check.Scope{
		Flow: cfg.Flow, Slot: cfg.Source.Slot, Publication: cfg.Source.Publication,
		Schemas: cfg.Source.Schemas, ConfigPath: configPath,
	}})
	if err != nil {
		return nil, err
	}
	if cfg.Transport.Local == nil {
		return r, nil // a broker flow's consumers are its consumer groups (status)
	}
	// The log is opened read-only, beside a running relay or not: the
	// grader writes no byte (a writer's open would republish the durable
	// end and may repair the tail).
	f, err := OpenConfig(configPath, logger)
	if err != nil {
		r.AddFlowLog("not read: "+err.Error(), nil, nil)
		return r, nil
	}
	ls := &LogStatus{Dir: f.dir, Cursors: []CursorStatus{}}
	if _, err := os.Stat(f.logDir()); err == nil {
		loc := cfg.Transport.Local
		l, err := segmentlog.OpenReadOnly(f.logDir(), segmentlog.Options{SegmentBytesMax: int64(loc.SegmentBytesMax), Logger: f.Logger})
		if err != nil {
			r.AddFlowLog("not readable: "+err.Error(), nil, nil)
			return r, nil
		}
		defer l.Close()
		ls.Exists = true
		f.logStatus(ctx, l, ls)
	}
	summary, lines, stalled := StalledConsumerFindings(&Status{Flow: cfg.Flow, Log: ls}, configPath)
	var fs []check.Finding
	for _, s := range stalled {
		sev := check.Warning
		if s.High {
			sev = check.High
		}
		fs = append(fs, check.Finding{Severity: sev, Code: CodeConsumerStalled, Title: s.Title, Detail: s.Message,
			Action: s.Fix, Objects: []string{s.Consumer}})
	}
	r.AddFlowLog(summary, lines, fs)
	return r, nil
}
