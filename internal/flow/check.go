package flow

import (
	"context"
	"log/slog"

	"github.com/trellara/trellara/internal/check"
	"github.com/trellara/trellara/internal/config"
)

// CheckSource grades the flow's source as `trellara check --config` reports it
// and as the evidence package's check.json holds it: the read-only grader
// (internal/check) scoped to the flow (its tables and its slot; anything
// else on the server only counted). It changes nothing.
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
	return r, nil
}
