package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/lsn"
)

// A verify hold makes a verify exact while the flow keeps applying: the
// target is compared at the very LSN its source snapshot is exact at, not
// at whatever the applier has reached when the target snapshot is taken
// (under writes to the same keys that is always later, and every bucket
// touched meanwhile would differ).
//
//  1. verify inserts a row (id, expires_at) into <schema>.verify_holds on
//     the target, and writes a fence whose token is HoldToken(id);
//  2. the applier ends its batch at that fence, commits it, marks the row
//     held and waits, applying nothing more;
//  3. verify creates a temporary slot on the source: its exported snapshot
//     is exact at the slot's consistent point C. It writes C into the row
//     (at_lsn) and a plain fence after it;
//  4. the applier applies every transaction whose commit LSN is below C
//     and, at the first unit at or past C (the plain fence at the latest),
//     marks the row reached and waits again;
//  5. verify takes its source snapshot (the exported one) and its target
//     snapshot, and deletes the row; the applier goes on.
//
// Every wait ends when the row is gone or expired, and after holdMax
// whatever the row says, so a verify that dies never stalls the flow for
// longer. An applier that predates holds ignores the token: verify then
// finds the row never held and compares as before, with its rechecks.
const holdTableDDL = `
CREATE TABLE IF NOT EXISTS %[1]s.verify_holds (
    id          text        PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    at_lsn      pg_lsn,
    held        boolean     NOT NULL DEFAULT false,
    reached     boolean     NOT NULL DEFAULT false
);
`

// holdTokenPrefix starts the token of a fence that asks the applier to
// hold (envelope.FencePrefix is the message prefix of every fence).
const holdTokenPrefix = "hold:"

// holdMax bounds one hold, whatever the row says: a flow never stalls
// longer than this for a verify.
const holdMax = 30 * time.Second

// holdPoll is how often a holding applier looks at the row.
const holdPoll = 10 * time.Millisecond

// HoldToken is the fence token that asks the applier to hold at the fence
// while verify hold id is open.
func HoldToken(id string) string { return holdTokenPrefix + id }

// holdID returns the hold id a unit's fence asks for, or "".
func holdID(env *pb.Envelope) string {
	for _, r := range env.GetRows() {
		if r.GetOp() == pb.Op_OP_MESSAGE && r.GetMessagePrefix() == envelope.FencePrefix {
			if id, ok := strings.CutPrefix(string(r.GetMessageContent()), holdTokenPrefix); ok {
				return id
			}
		}
	}
	return ""
}

// holder is a target that keeps verify holds.
type holder interface {
	// holdState reads hold id: open (present and not expired) and, once
	// verify has set it, the LSN to hold before.
	holdState(ctx context.Context, id string) (open bool, at uint64, err error)
	// markHold sets the row's held or reached flag.
	markHold(ctx context.Context, id, flag string) error
}

func (t *pgTarget) holdState(ctx context.Context, id string) (bool, uint64, error) {
	var at *string
	var open bool
	err := t.conn.QueryRow(ctx, fmt.Sprintf(`SELECT expires_at > now(), at_lsn::text FROM %s.verify_holds WHERE id = $1`,
		pgx.Identifier{t.cfg.Schema}.Sanitize()), id).Scan(&open, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, nil
	}
	if err != nil || at == nil {
		return open, 0, err
	}
	pos, err := lsn.Parse(*at)
	return open, uint64(pos), err
}

func (t *pgTarget) markHold(ctx context.Context, id, flag string) error {
	_, err := t.conn.Exec(ctx, fmt.Sprintf(`UPDATE %s.verify_holds SET %s = true WHERE id = $1`,
		pgx.Identifier{t.cfg.Schema}.Sanitize(), flag), id)
	return err
}

// activeHold is the hold the applier is in: before its LSN is known it
// applies nothing; after, it applies what commits below it.
type activeHold struct {
	id       string
	at       uint64 // 0 until verify sets it
	deadline time.Time
}

// batchHold is the hold id the batch's last unit asks for, or "".
func batchHold(batch []*unit) string {
	if len(batch) == 0 {
		return ""
	}
	return holdID(batch[len(batch)-1].env)
}

// holdAt starts hold id (batchHold of the batch just committed, which
// ends at the hold's fence) and waits for its LSN (step 2 of the
// protocol).
func (a *Applier) holdAt(ctx context.Context, id string) {
	h, ok := a.t.(holder)
	if id == "" || !ok {
		return
	}
	hd := &activeHold{id: id, deadline: time.Now().Add(holdMax)}
	if err := h.markHold(ctx, id, "held"); err != nil {
		a.log.Warn("apply: verify hold: could not mark it held; applying on", "hold", id, "err", err)
		return
	}
	for {
		open, at, err := h.holdState(ctx, id)
		if err != nil || !open || !a.holdWait(ctx, hd) {
			return
		}
		if at != 0 {
			hd.at = at
			a.hold = hd
			return
		}
	}
}

// holdCut splits batch at the active hold's LSN: what may be applied now,
// and what waits. With the hold reached (something at or past its LSN is
// next) it marks the row and waits there until verify is done (step 4).
func (a *Applier) holdCut(ctx context.Context, batch []*unit) []*unit {
	hd := a.hold
	if hd == nil {
		return batch
	}
	if time.Now().After(hd.deadline) {
		a.hold = nil
		return batch
	}
	for i, u := range batch {
		if u.env.GetCommitLsn() >= hd.at {
			if i > 0 {
				a.held = append(batch[i:], a.held...) // applied after the hold, in order
				return batch[:i]
			}
			a.holdReached(ctx, hd)
			return batch
		}
	}
	return batch
}

func (a *Applier) holdReached(ctx context.Context, hd *activeHold) {
	a.hold = nil
	h := a.t.(holder)
	if err := h.markHold(ctx, hd.id, "reached"); err != nil {
		a.log.Warn("apply: verify hold: could not mark it reached; applying on", "hold", hd.id, "err", err)
		return
	}
	for {
		open, _, err := h.holdState(ctx, hd.id)
		if err != nil || !open || !a.holdWait(ctx, hd) {
			return
		}
	}
}

// holdWait sleeps one poll, false when the hold's time is up or ctx ended.
func (a *Applier) holdWait(ctx context.Context, hd *activeHold) bool {
	if time.Now().After(hd.deadline) {
		a.log.Warn("apply: verify hold still open after its limit; applying on", "hold", hd.id, "limit", holdMax)
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(holdPoll):
		return true
	}
}

// OpenHold opens verify hold id on the target (db is a connection of its
// own, outside any transaction) for at most holdMax; CloseHold ends it.
func OpenHold(ctx context.Context, db DB, schema, id string) error {
	_, err := db.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.verify_holds (id, expires_at) VALUES ($1, now() + $2::interval)`,
		pgx.Identifier{schemaOrDefault(schema)}.Sanitize()), id, fmt.Sprintf("%d milliseconds", holdMax.Milliseconds()))
	return err
}

// HoldState is what the applier has said of hold id: held (it stopped at
// the hold's fence) and reached (it applied everything below the hold's
// LSN and stopped there).
func HoldState(ctx context.Context, db DB, schema, id string) (held, reached bool, err error) {
	err = db.QueryRow(ctx, fmt.Sprintf(`SELECT held, reached FROM %s.verify_holds WHERE id = $1`,
		pgx.Identifier{schemaOrDefault(schema)}.Sanitize()), id).Scan(&held, &reached)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return held, reached, err
}

// SetHoldLSN tells the holding applier to apply what commits below at.
func SetHoldLSN(ctx context.Context, db DB, schema, id string, at uint64) error {
	_, err := db.Exec(ctx, fmt.Sprintf(`UPDATE %s.verify_holds SET at_lsn = $2::pg_lsn WHERE id = $1`,
		pgx.Identifier{schemaOrDefault(schema)}.Sanitize()), id, lsn.LSN(at).String())
	return err
}

// CloseHold ends verify hold id (and any expired ones).
func CloseHold(ctx context.Context, db DB, schema, id string) error {
	_, err := db.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.verify_holds WHERE id = $1 OR expires_at <= now()`,
		pgx.Identifier{schemaOrDefault(schema)}.Sanitize()), id)
	return err
}

func schemaOrDefault(s string) string {
	if s == "" {
		return defaultSchema
	}
	return s
}
