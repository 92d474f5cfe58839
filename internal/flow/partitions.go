package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/capture"
	"github.com/trellara/trellara/internal/shell"
	"github.com/trellara/trellara/pgcatalog"
)

// A partitioned table is published, copied and streamed through its root
// (publish_via_partition_root), so partitions come and go without the
// flow's knowledge: ATTACH PARTITION makes a table's existing rows part
// of the root without a replicated insert, and DETACH PARTITION takes a
// partition's rows out of the root without a replicated delete. The
// target then misses the attached rows (a later UPDATE or DELETE of one
// is quarantined) or keeps the detached ones, and verify reports the
// table DIVERGED. The flow records each configured partitioned table's
// leaf partitions when it takes the snapshot (and again when verify finds
// the table converged); run warns and repair-plan names the change and
// the recovery when the source's partitions differ from that record.

// partitionRecord maps a configured partitioned table (config.TableName's
// text form) to its leaf partitions, sorted.
type partitionRecord map[string][]string

func (f *Flow) partitionsPath() string { return filepath.Join(f.dir, "partitions.json") }

// leafRecord is the record of defs as the source has them now.
func leafRecord(defs []pgcatalog.TableDef) partitionRecord {
	rec := partitionRecord{}
	for _, d := range defs {
		if d.Partitions == nil {
			continue
		}
		leaves := make([]string, 0, len(d.Partitions))
		for _, p := range d.Partitions {
			leaves = append(leaves, p.String())
		}
		slices.Sort(leaves)
		rec[d.String()] = leaves
	}
	return rec
}

// readPartitions reads the record; ok is false when there is none (no
// snapshot yet, or one taken before the flow kept the record).
func (f *Flow) readPartitions() (rec partitionRecord, ok bool, err error) {
	b, err := os.ReadFile(f.partitionsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("flow %s: read %s: %w", f.Cfg.Flow, f.partitionsPath(), err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, false, fmt.Errorf("flow %s: %s is not a partition record: %w", f.Cfg.Flow, f.partitionsPath(), err)
	}
	return rec, true, nil
}

func (f *Flow) writePartitions(rec partitionRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return capture.WriteFileDurable(f.partitionsPath(), append(b, '\n'))
}

// partitionChange is a configured partitioned table whose leaf partitions
// differ from the record.
type partitionChange struct {
	Table              string
	Attached, Detached []string
}

func (c partitionChange) String() string {
	var parts []string
	if len(c.Attached) > 0 {
		parts = append(parts, "attached "+strings.Join(c.Attached, ", ")+" (rows it held when attached were not replicated: the target misses them)")
	}
	if len(c.Detached) > 0 {
		parts = append(parts, "detached "+strings.Join(c.Detached, ", ")+" (its rows left "+c.Table+" at the source without replicated deletes: the target keeps them)")
	}
	return fmt.Sprintf("the partitions of %s changed since the snapshot: %s", c.Table, strings.Join(parts, "; "))
}

// partitionChanges compares the source's partitions now (defs) with the
// record; without a record there is nothing to compare.
func (f *Flow) partitionChanges(defs []pgcatalog.TableDef) ([]partitionChange, error) {
	rec, ok, err := f.readPartitions()
	if err != nil || !ok {
		return nil, err
	}
	var out []partitionChange
	for _, d := range defs {
		was, known := rec[d.String()]
		if !known {
			continue
		}
		now := leafRecord([]pgcatalog.TableDef{d})[d.String()]
		c := partitionChange{Table: d.String()}
		for _, p := range now {
			if !slices.Contains(was, p) {
				c.Attached = append(c.Attached, p)
			}
		}
		for _, p := range was {
			if !slices.Contains(now, p) {
				c.Detached = append(c.Detached, p)
			}
		}
		if len(c.Attached)+len(c.Detached) > 0 {
			out = append(out, c)
		}
	}
	return out, nil
}

// partitionRepairSteps are repair-plan's steps for partition changes.
func (f *Flow) partitionRepairSteps(ctx context.Context) ([]RepairStep, error) {
	src, err := f.ConnectSource(ctx)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.Background())
	defs, err := pgcatalog.ReadTables(ctx, src, f.Tables())
	if err != nil {
		return nil, err
	}
	changes, err := f.partitionChanges(defs)
	if err != nil {
		return nil, err
	}
	steps := make([]RepairStep, 0, len(changes))
	for _, c := range changes {
		steps = append(steps, RepairStep{
			Problem: c.String() + "; ATTACH and DETACH PARTITION are not replicated",
			Fix:     "re-copy the table: " + shell.Resnapshot(f.ConfigPath),
			Then:    verifyAfterRun(f.ConfigPath),
		})
	}
	return steps, nil
}

// refreshPartitions records the source's partitions of the tables verify
// found converged: their target matches the source as partitioned now.
func (f *Flow) refreshPartitions(ctx context.Context, src *pgx.Conn, converged []string) error {
	rec, ok, err := f.readPartitions()
	if err != nil || !ok || len(converged) == 0 {
		return err
	}
	defs, err := pgcatalog.ReadTables(ctx, src, f.Tables())
	if err != nil {
		return err
	}
	now := leafRecord(defs)
	changed := false
	for _, t := range converged {
		if leaves, ok := now[t]; ok && !slices.Equal(leaves, rec[t]) {
			rec[t] = leaves
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return f.writePartitions(rec)
}
