package sidecar

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/trellara/trellara/lsn"
)

// ServerInfo is what CheckServer found about the extension on a server.
type ServerInfo struct {
	// SocketPath is trellara.socket_path, or <data_directory>/trellara.sock
	// when that is empty (the extension's default).
	SocketPath string
	SlotName   string
	Database   string
	// IncludeMessages is trellara.include_messages: informational only, as
	// the extension forwards Trellara's own messages (prefix trellara.:
	// fences, reseed watermarks) whatever it says; it governs other prefixes.
	IncludeMessages bool
	SlotExists      bool
	SlotConfirmed   uint64
	DecoderPID      int // 0: no decoder worker running right now
}

// CheckServer inspects the extension's settings and slot over an ordinary
// connection. The decoder worker reports its refusals only in the server
// log and restarts every 2 s, so a sidecar would otherwise see nothing but
// silence; this names the problem and the fix instead. It returns a
// *SlotError for a slot the worker refuses (two-phase, another plugin or
// database) and a plain error when the extension is not set up.
func CheckServer(ctx context.Context, conn *pgx.Conn) (ServerInfo, error) {
	var (
		info                     ServerInfo
		preload, sock, dataDir   string
		db, slot, includeMessage *string
	)
	err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries'), current_setting('data_directory'),
		current_setting('trellara.database', true), current_setting('trellara.slot_name', true),
		coalesce(current_setting('trellara.socket_path', true), ''), current_setting('trellara.include_messages', true)`).
		Scan(&preload, &dataDir, &db, &slot, &sock, &includeMessage)
	if err != nil {
		return info, fmt.Errorf("sidecar: read trellara settings: %w", err)
	}
	if !listHas(preload, "trellara") || slot == nil {
		return info, errors.New("sidecar: the server does not preload the trellara extension (shared_preload_libraries = '" + preload +
			"'); fix: install it, ALTER SYSTEM SET shared_preload_libraries = 'trellara' (keeping any others) and restart the server")
	}
	info.SlotName = *slot
	if db != nil {
		info.Database = *db
	}
	info.IncludeMessages = includeMessage != nil && *includeMessage == "on"
	info.SocketPath = sock
	if sock == "" {
		info.SocketPath = filepath.Join(dataDir, "trellara.sock")
	}
	if info.Database == "" {
		return info, errors.New("sidecar: trellara.database is empty, so the extension starts no decoder and no socket; " +
			"fix: ALTER SYSTEM SET trellara.database = '<database>' and restart the server")
	}

	var (
		plugin, slotDB *string
		twoPhase       bool
		confirmed      *string
	)
	err = conn.QueryRow(ctx, `SELECT plugin, database, two_phase, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		info.SlotName).Scan(&plugin, &slotDB, &twoPhase, &confirmed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The decoder creates it at start; nothing to refuse yet.
	case err != nil:
		return info, fmt.Errorf("sidecar: look up slot %s: %w", info.SlotName, err)
	default:
		info.SlotExists = true
		if confirmed != nil {
			pos, err := lsn.Parse(*confirmed)
			if err != nil {
				return info, fmt.Errorf("sidecar: slot %s confirmed_flush_lsn %q: %w", info.SlotName, *confirmed, err)
			}
			info.SlotConfirmed = uint64(pos)
		}
		drop := fmt.Sprintf("SELECT pg_drop_replication_slot('%s'); the decoder re-creates it (a flow that captured from the old slot then stops with a gap and must start over with a full snapshot)",
			strings.ReplaceAll(info.SlotName, "'", "''"))
		switch {
		case plugin == nil || *plugin != "trellara":
			return info, &SlotError{Slot: info.SlotName, Reason: "does not use output plugin trellara",
				Fix: "set trellara.slot_name to another name, or " + drop}
		case twoPhase:
			return info, &SlotError{Slot: info.SlotName,
				Reason: "was created with two_phase = true: trellara does not decode prepared transactions at PREPARE time and the decoder refuses the slot",
				Fix:    drop}
		case slotDB == nil || *slotDB != info.Database:
			return info, &SlotError{Slot: info.SlotName, Reason: "belongs to another database than trellara.database " + info.Database,
				Fix: "set trellara.slot_name to another name, or " + drop}
		}
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE backend_type = 'trellara decoder'`).Scan(&info.DecoderPID)
	if err != nil {
		return info, fmt.Errorf("sidecar: look up the decoder worker: %w", err)
	}
	return info, nil
}

// listHas reports whether the comma-separated setting list holds name.
func listHas(list, name string) bool {
	for _, e := range strings.Split(list, ",") {
		e = strings.Trim(strings.TrimSpace(e), `"`)
		if e == name || strings.HasSuffix(e, "/"+name) {
			return true
		}
	}
	return false
}
