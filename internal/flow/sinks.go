package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/apply"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/segmentlog"
	"github.com/trellara/trellara/transport"
)

// A flow applies to its sinks (config.Sink): each one a Postgres target
// with its own applier, segment-log cursor (config.Sink.Cursor), and, on
// its target, its own checkpoint and quarantine rows. The relay and the
// source slot are shared: another sink costs a cursor, not a slot.

// Sinks returns the flow's sinks in configuration order (none for a
// capture-only flow).
func (f *Flow) Sinks() []config.Sink { return f.Cfg.Sinks }

// Sink returns the sink named name; "" names the flow's only sink.
func (f *Flow) Sink(name string) (config.Sink, error) {
	sinks := f.Sinks()
	if len(sinks) == 0 {
		return config.Sink{}, ErrNoTarget(f.Cfg.Flow)
	}
	if name == "" {
		if len(sinks) == 1 {
			return sinks[0], nil
		}
		return config.Sink{}, fmt.Errorf("flow %s has %d sinks (%s): name one with --sink", f.Cfg.Flow, len(sinks), strings.Join(f.Cfg.SinkNames(), ", "))
	}
	if s, ok := f.Cfg.Sink(name); ok {
		return s, nil
	}
	return config.Sink{}, fmt.Errorf("flow %s has no sink %q; its sinks are %s (%s)", f.Cfg.Flow, name, strings.Join(f.Cfg.SinkNames(), ", "), f.ConfigPath)
}

// SelectSinks returns the sink named name, or every sink for "".
func (f *Flow) SelectSinks(name string) ([]config.Sink, error) {
	if name == "" {
		if len(f.Sinks()) == 0 {
			return nil, ErrNoTarget(f.Cfg.Flow)
		}
		return f.Sinks(), nil
	}
	s, err := f.Sink(name)
	if err != nil {
		return nil, err
	}
	return []config.Sink{s}, nil
}

// ConnectSink opens a connection to sink s's target.
func (f *Flow) ConnectSink(ctx context.Context, s config.Sink) (*pgx.Conn, error) {
	side := "target"
	if len(f.Sinks()) > 1 || s.Name != config.DefaultSinkName {
		side = "sink " + s.Name + " target"
	}
	return connect(ctx, side, f.Secrets.SinkDatabaseURLs[s.Name].Reveal())
}

// connectBoth opens the source and sink s's target; closeBoth closes both.
func (f *Flow) connectBoth(ctx context.Context, s config.Sink) (src, tgt *pgx.Conn, closeBoth func(), err error) {
	if src, err = f.ConnectSource(ctx); err != nil {
		return nil, nil, nil, err
	}
	if tgt, err = f.ConnectSink(ctx, s); err != nil {
		src.Close(context.Background())
		return nil, nil, nil, err
	}
	return src, tgt, func() {
		src.Close(context.Background())
		tgt.Close(context.Background())
	}, nil
}

// registerCursor registers sink s's cursor at the oldest retained offset
// when it is not registered yet, so retention keeps every entry the sink
// has not read. The relay registers every sink's before it appends; an
// applier process registers its own (a sink added to a running flow).
func (f *Flow) registerCursor(s config.Sink) error {
	if f.Log == nil {
		return nil // a broker flow: each sink reads from its checkpoint (Broker.Reader)
	}
	var pr *segmentlog.PastRetentionError
	if _, ok, err := f.Log.CursorOffset(s.Cursor()); errors.As(err, &pr) {
		// Registered, and expired: the sink's applier stops on it and
		// names the recovery (sinkLogError); the other sinks run.
		return nil
	} else if err != nil {
		return err
	} else if ok {
		return nil
	}
	return f.Log.CommitCursor(s.Cursor(), f.Log.FirstOffset())
}

// Applier builds sink s's applier on conn; applied, when set, receives
// the source commit times of what each target commit applied
// (apply.Config.Applied).
func (f *Flow) Applier(conn *pgx.Conn, s config.Sink, applied func(commitTimesUnixMicros []int64)) (*apply.Applier, error) {
	return apply.New(conn, apply.Config{Flow: f.Cfg.Flow, SourceID: f.Cfg.Source.ID, Schema: s.Target.Schema,
		Mode: string(s.Target.Mode), ConfigPath: f.ConfigPath, Logger: f.Logger.With("sink", s.Name), Applied: applied,
		SynchronousCommit: s.Target.SynchronousCommit})
}

// Apply applies to sink s from its log cursor until ctx ends or stop.
func (f *Flow) Apply(ctx context.Context, conn *pgx.Conn, s config.Sink, a *apply.Applier, stop func(apply.Checkpoint) bool) error {
	if err := apply.EnsureSchema(ctx, conn, s.Target.Schema); err != nil {
		return err
	}
	if f.broker != nil {
		rd, err := f.broker.Reader(ctx, s)
		if err != nil {
			return err
		}
		defer rd.Close()
		return a.Run(ctx, rd, rd, stop)
	}
	rd, err := transport.NewCursorReader(f.Log, s.Cursor())
	if err != nil {
		return f.sinkLogError(s, err)
	}
	defer rd.Close()
	return f.sinkLogError(s, a.Run(ctx, rd, transport.LocalCursor{Log: f.Log, Name: s.Cursor()}, stop))
}

// sinkLogError adds the flow's recovery to a log error met by a sink
// (logError), and names the sink whose cursor retention expired
// (transport.local.expire_past_retention): the log no longer holds what
// that sink has not applied.
func (f *Flow) sinkLogError(s config.Sink, err error) error {
	if err == nil {
		return nil
	}
	err = f.logError(err)
	var pr *segmentlog.PastRetentionError
	var cb *apply.CheckpointBehindError
	switch {
	case errors.As(err, &pr):
		return fmt.Errorf("flow %s: sink %s (cursor %s) is past the local log's retention; the other sinks are unaffected: %w; "+
			"or keep the slot and the other sinks, and copy every table of this sink again: %s",
			f.Cfg.Flow, s.Name, s.Cursor(), err, f.reseedAllCommand(s))
	case errors.As(err, &cb):
		return fmt.Errorf("flow %s: sink %s: %w; or keep the slot and the other sinks, and copy every table of this sink again: %s",
			f.Cfg.Flow, s.Name, err, f.reseedAllCommand(s))
	}
	return err
}
