package chaoslive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/internal/config"
)

// Evidence files: the last live chaos run and the last qualification of a
// flow, kept in its state directory (transport.local.dir/evidence) for
// trellara pilot-package.
const (
	EvidenceChaosJSON         = "chaos-live.json"
	EvidenceChaosHTML         = "chaos-live.html"
	EvidenceQualificationJSON = "qualification.json"
	EvidenceQualificationHTML = "qualification.html"
)

// EvidenceDir is where a flow's live evidence is kept; "" for a flow
// without a local transport.
func EvidenceDir(cfg *config.Config) string {
	if cfg.Transport.Local == nil {
		return ""
	}
	return filepath.Join(cfg.Transport.Local.Dir, "evidence")
}

// EvidenceSemantics is the last `trellara semantics` result, kept in the
// evidence directory for pilot-package (claim 2's live attempt).
const EvidenceSemantics = "semantics.json"

// SaveJSON writes v as name in the flow's evidence directory (nothing for
// a flow without one).
func SaveJSON(cfg *config.Config, name string, v any) error {
	dir := EvidenceDir(cfg)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("evidence directory %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(js, '\n'), 0o600)
}

// SaveEvidence writes q's JSON and HTML into the flow's evidence
// directory under the given names.
func SaveEvidence(cfg *config.Config, jsonName, htmlName string, q *Qualification) error {
	dir := EvidenceDir(cfg)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chaos live: evidence directory %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(q, "", "  ")
	if err != nil {
		return err
	}
	var h bytes.Buffer
	if err := WriteHTML(&h, q); err != nil {
		return err
	}
	for name, data := range map[string][]byte{jsonName: append(js, '\n'), htmlName: h.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("chaos live: write %s: %w", filepath.Join(dir, name), err)
		}
	}
	return nil
}

// CollectEnvironment describes the machine and the flow's servers.
// Binaries are filled by the caller.
func CollectEnvironment(ctx context.Context, cfg *config.Config) *Environment {
	e := &Environment{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	e.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = "Linux " + strings.TrimSpace(string(b))
	} else {
		e.Kernel = runtime.GOOS + " (kernel release not readable: " + err.Error() + ")"
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				e.OS = strings.Trim(v, `"`)
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				e.MemoryBytes = kb * 1024
			}
		}
	}
	e.SourceVersion = serverVersion(ctx, cfg.Source.DatabaseURL)
	if len(cfg.Sinks) > 0 {
		e.TargetVersion = serverVersion(ctx, cfg.Sinks[0].Target.DatabaseURL)
	}
	return e
}

func serverVersion(ctx context.Context, ref config.SecretRef) string {
	u, err := ref.Resolve()
	if err != nil {
		return "unknown: " + err.Error()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, u.Reveal())
	if err != nil {
		return "unknown: " + config.ScrubConnError(err, u.Reveal()).Error()
	}
	defer conn.Close(cctx)
	var v string
	if err := conn.QueryRow(cctx, "SELECT version()").Scan(&v); err != nil {
		return "unknown: " + err.Error()
	}
	return v
}
