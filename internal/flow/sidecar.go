package flow

import (
	"context"
	"fmt"

	"github.com/trellara/trellara/envelope"
	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/relay"
	"github.com/trellara/trellara/sidecar"
)

// CaptureExtension is Capture for source.capture: extension: it streams
// committed transactions from the trellara extension's socket
// (source.socket) into the local log until ctx ends or o.Stop reports true.
// The envelopes are the ones the pgoutput path would write for the same
// history, so the log, the applier and verify cannot tell the paths apart.
//
// Unlike Capture it creates no slot and no publication and takes no
// snapshot: the extension's decoder worker owns its slot and exports no
// snapshot. A new flow therefore gets its initial snapshot from the
// pgoutput path (run it once with capture: pgoutput and owns_slot, then
// switch); on an empty log this refuses to start rather than stream
// changes to tables whose starting state the log never had.
// The worker's slot must have existed since before the log's newest
// transaction; otherwise the slot is confirmed past the log and the
// sidecar reports a gap (relay.GapError) instead of skipping what lies
// between. o.Session and o.Snapshot are not used.
func (f *Flow) CaptureExtension(ctx context.Context, o CaptureOptions) error {
	src := f.Cfg.Source
	if src.Capture != config.CaptureExtension {
		return fmt.Errorf("flow %s: source.capture is %s, not extension", f.Cfg.Flow, src.Capture)
	}
	conn, err := f.ConnectSource(ctx)
	if err != nil {
		return err
	}
	// conn stays open while capture runs: the schema policy reads the
	// source catalog over it, as on the pgoutput path.
	defer conn.Close(context.Background())
	info, err := sidecar.CheckServer(ctx, conn)
	if err != nil {
		return fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
	}
	// Fences and reseed watermarks are transactional messages with the
	// prefix trellara.: the extension forwards those whatever
	// trellara.include_messages says (that setting governs only other
	// prefixes), so it is informational here.
	if info.SocketPath != src.Socket {
		f.Logger.Warn("source.socket differs from the server's trellara.socket_path", "flow", f.Cfg.Flow,
			"socket", src.Socket, "server_socket", info.SocketPath)
	}
	if info.DecoderPID == 0 {
		f.Logger.Warn("the trellara decoder worker is not running right now; the sidecar waits for it (see the server log)",
			"flow", f.Cfg.Flow, "slot", info.SlotName)
	}

	acks, err := f.acks()
	if err != nil {
		return err
	}
	tr, closeTr, err := f.publisher(ctx)
	if err != nil {
		return err
	}
	defer closeTr()
	res, err := relay.ResumeFrom(ctx, tr)
	if err != nil {
		return err
	}
	if res.Empty {
		return fmt.Errorf("flow %s: the local log is empty and the extension cannot take the initial snapshot "+
			"(its decoder owns slot %s and exports no snapshot). Run the flow once with source.capture: pgoutput and source.owns_slot: true "+
			"(%s), which creates a slot and snapshots the tables, then switch to capture: extension",
			f.Cfg.Flow, info.SlotName, shell.Trellara("run", f.ConfigPath, "--local"))
	}
	if o.Streaming != nil {
		close(o.Streaming)
	}
	f.Logger.Info("capturing from the trellara extension", "flow", f.Cfg.Flow, "socket", src.Socket,
		"slot", info.SlotName, "slot_confirmed", envelope.FormatLSN(info.SlotConfirmed), "log_durable", envelope.FormatLSN(res.DurableEnd))
	return f.recordDrift(sidecar.Run(ctx, sidecar.Options{
		SocketPath: src.Socket, Transport: tr, SourceID: src.ID,
		Assembler:   f.assemblerOptions(ctx, conn),
		Acks:        acks,
		GapRecovery: shell.ResnapshotExtension(f.ConfigPath),
		Logger:      f.Logger, Stop: o.Stop, OnFence: o.OnFence,
	}))
}
