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
// exported snapshot: the extension's decoder worker owns its slot. A new
// flow's tables are copied beside the stream instead (extsnapshot.go):
// on an empty log capture starts only once that initial snapshot is
// recorded, from the slot's confirmed position. On a log that holds
// transactions the worker's slot must not be confirmed past the log's
// newest one; otherwise the sidecar reports a gap (relay.GapError) instead
// of skipping what lies between. o.Session and o.Snapshot are not used.
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
		// The initial snapshot (extsnapshot.go): streaming starts at the
		// decoder slot's confirmed position once a Replace reseed of every
		// table is recorded on the targets, which `run --local` does.
		recorded, err := f.extensionSnapshotRecorded()
		if err != nil {
			return fmt.Errorf("flow %s: %w", f.Cfg.Flow, err)
		}
		if !recorded {
			return fmt.Errorf("flow %s: the local log is empty and no initial snapshot is recorded: take it with `%s` "+
				"(it copies every table in watermarked chunks through the extension's stream, then verifies each), then start the service",
				f.Cfg.Flow, shell.Trellara("run", f.ConfigPath, "--local", "--verify"))
		}
		f.Logger.Info("initial snapshot: capture starts on the empty log at the decoder slot's confirmed position", "flow", f.Cfg.Flow,
			"slot", info.SlotName, "slot_confirmed", envelope.FormatLSN(info.SlotConfirmed))
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

// extensionSnapshotRecipe is the initial snapshot's refusal when the
// extension path cannot copy a table (why): it prints, step by step, the
// switch that takes the snapshot on the pgoutput path instead (the one
// TestExtensionSnapshotOnPgoutputForKeylessTables runs): snapshot on the
// pgoutput path while the decoder's slot already exists, switch back,
// catch up and verify, then drop the pgoutput slot and publication, which
// would otherwise hold WAL.
func (f *Flow) extensionSnapshotRecipe(info sidecar.ServerInfo, why string) error {
	src := f.Cfg.Source
	slotNote := fmt.Sprintf("the decoder's slot %s exists already, so it holds every change from before the snapshot", info.SlotName)
	if !info.SlotExists {
		slotNote = fmt.Sprintf("first start the decoder so that its slot %s exists before this step (trellara.database set, server restarted; "+
			"see trellara preflight)", info.SlotName)
	}
	return fmt.Errorf("flow %s: %s; or take the initial snapshot on the pgoutput path once "+
		"(the extension's decoder owns slot %s and exports no snapshot), then switch back:\n"+
		"  1. in %s set source.capture: pgoutput and source.owns_slot: true, and remove source.socket\n"+
		"  2. %s   (creates slot %s and publication %s and copies the tables; %s)\n"+
		"  3. in %s set source.capture: extension and source.socket: %s again, and remove source.owns_slot\n"+
		"  4. %s   (after at least one transaction committed on the source since step 2; ends CONVERGED)\n"+
		"  5. on the source: SELECT pg_drop_replication_slot(%s); DROP PUBLICATION %s;   (the pgoutput slot would hold WAL)",
		f.Cfg.Flow, why, info.SlotName,
		f.ConfigPath, shell.Trellara("run", f.ConfigPath, "--local"), src.Slot, src.Publication, slotNote,
		f.ConfigPath, src.Socket, shell.Trellara("run", f.ConfigPath, "--local", "--verify"),
		quoteLiteral(src.Slot), config.QuoteIdent(src.Publication))
}
