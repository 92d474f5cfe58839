package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/lake"
)

// The fleet fan-in family: a deterministic model of N sources, their
// relays' logs and the lake committer, run over internal/lake's own
// decision code (lake.Changes, lake.Dedup, lake.EndsGroup, lake.Decide,
// lake.CloseEpoch, lake.NetState). Sources, logs, the changelog, its
// per-table marks and the epoch records are in memory; what the real
// committer keeps durably (changelog rows with their marks, committed
// cursors, epochs) survives a committer crash here, and what it keeps in
// memory does not.

// FamilyFanIn is the fleet fan-in family.
const FamilyFanIn = "fleet-fanin"

// InvEpochHonest: an epoch's claims hold.
const InvEpochHonest = "epoch-honest"

// FanIn shapes a fan-in simulation.
type FanIn struct {
	Sources    int // number of sources
	Txns       int // transactions per source
	CloseEvery int // steps between epoch closes
}

// Fan-in fault actions.
const (
	actOffline   = "offline"   // the source is down for Arg steps from the Nth epoch close
	actDuplicate = "duplicate" // the relay republishes its last Arg transactions on reconnect
	actExpire    = "expire"    // the log expires past the committer's cursor
)

// fanSource is one source with its relay and log.
type fanSource struct {
	id       string
	online   bool
	downTill int
	txns     []*pb.Envelope // committed at the source, in commit order
	state    map[string]string
	wal      uint64 // WAL insert position
	log      []*pb.Envelope
	first    int // the log's first retained offset
	relayPos int // next txn the relay publishes
	// confirmed is the slot's confirmed position: the end of the last
	// transaction durable in the log, or the WAL position when idle.
	confirmed uint64
}

// fanLake is the committer's durable state.
type fanLake struct {
	rows    []lake.Change
	marks   map[string]map[string]uint64
	cursors map[string]int
	epochs  []lake.Epoch
	// rowsAt[i] is len(rows) when epochs[i] was written.
	rowsAt []int
}

// fanCommitter is the committer's memory.
type fanCommitter struct {
	dedup      *lake.Dedup
	read       map[string]int // next offset to read, per source
	held       map[string][]*pb.Envelope
	pastRetain map[string]bool
	lastIn     map[string]time.Time
	prev       map[string]lake.SourceEpoch
}

type fanRun struct {
	sc      *Scenario
	fi      *FanIn
	rng     *rand.Rand
	src     []*fanSource
	lk      *fanLake
	c       *fanCommitter
	step    int
	now     time.Time
	closes  int
	crashes int
	chk     checker
	faults  []*faultState
	trace   strings.Builder
}

// runFanIn runs scenario sc of fan-in simulation sim.
func runFanIn(sc *Scenario, sim *Simulation, opts Options) *Result {
	fi := sim.FanIn
	r := &fanRun{sc: sc, fi: fi, rng: rand.New(rand.NewPCG(sc.Seed, 0xfa41)), now: time.Unix(1_700_000_000, 0).UTC(),
		lk:  &fanLake{marks: map[string]map[string]uint64{}, cursors: map[string]int{}},
		chk: checker{seen: map[string]bool{}}}
	for _, f := range sc.Faults {
		r.faults = append(r.faults, &faultState{Fault: f})
	}
	for i := range fi.Sources {
		r.src = append(r.src, &fanSource{id: fmt.Sprintf("db%d", i+1), online: true, state: map[string]string{}, wal: 0x1000})
	}
	r.restartCommitter()
	res := &Result{Scenario: sc}
	r.run(opts)
	res.Violations = r.chk.violations
	res.Fired = true
	for _, f := range r.faults {
		res.Fired = res.Fired && f.fired
	}
	res.Pass = len(res.Violations) == 0 && res.Fired
	res.Steps = r.step
	res.Stats = RunStats{Txns: fi.Sources * fi.Txns, Delivered: fi.Sources * fi.Txns, TargetCommits: len(r.lk.epochs), RelayRestarts: 0, ApplierRestarts: r.crashes}
	res.Outcome = "converged"
	for _, s := range r.src {
		if r.c.pastRetain[s.id] {
			res.Outcome = "lake stopped for " + s.id + ": past-retention"
		}
	}
	if opts.Trace {
		res.Trace = []byte(r.trace.String())
	}
	return res
}

func (r *fanRun) tracef(format string, args ...any) {
	fmt.Fprintf(&r.trace, "%5d ", r.step)
	fmt.Fprintf(&r.trace, format, args...)
	r.trace.WriteByte('\n')
}

// at fires fault point point; it returns the firing fault.
func (r *fanRun) at(point string) *Fault {
	for _, f := range r.faults {
		if f.Point != point {
			continue
		}
		f.hits++
		if f.hits >= f.Nth && f.hits < f.Nth+max(f.Times, 1) {
			f.fired = true
			return &f.Fault
		}
	}
	return nil
}

func (r *fanRun) restartCommitter() {
	c := &fanCommitter{dedup: lake.NewDedup(), read: map[string]int{}, held: map[string][]*pb.Envelope{},
		pastRetain: map[string]bool{}, lastIn: map[string]time.Time{}, prev: map[string]lake.SourceEpoch{}}
	for t, m := range r.lk.marks {
		for s, v := range m {
			c.dedup.Observe(t, s, v)
		}
	}
	for _, s := range r.src {
		c.read[s.id] = r.lk.cursors[s.id]
	}
	if n := len(r.lk.epochs); n > 0 {
		for _, se := range r.lk.epochs[n-1].Sources {
			c.prev[se.SourceID] = se
			if se.Included {
				c.lastIn[se.SourceID] = r.lk.epochs[n-1].ClosedAt
			}
		}
	}
	r.c = c
}

var fanRel = &pb.Relation{Schema: "public", Name: "items", Columns: []*pb.RelationColumn{{Name: "id", Key: true}, {Name: "v"}}}

// commitTxn commits one transaction at source s: an insert, an update of
// an existing key, sometimes a delete.
func (r *fanRun) commitTxn(s *fanSource) {
	n := len(s.txns)
	txt := func(v string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(v)} }
	rows := []*pb.Row{{Seq: 0, Op: pb.Op_OP_INSERT, NewTuple: []*pb.Value{txt(fmt.Sprint(n)), txt("v0")}}}
	s.state[fmt.Sprint(n)] = "v0"
	if n > 0 {
		k := fmt.Sprint(r.rng.IntN(n))
		if _, ok := s.state[k]; ok {
			v := fmt.Sprintf("v%d", n)
			rows = append(rows, &pb.Row{Seq: 1, Op: pb.Op_OP_UPDATE, NewTuple: []*pb.Value{txt(k), txt(v)}})
			s.state[k] = v
		}
	}
	if n > 2 && n%5 == 0 {
		k := fmt.Sprint(n - 2)
		if _, ok := s.state[k]; ok {
			rows = append(rows, &pb.Row{Seq: 2, Op: pb.Op_OP_DELETE, OldTuple: []*pb.Value{txt(k)}})
			delete(s.state, k)
		}
	}
	s.wal += 0x100
	e := &pb.Envelope{SourceId: s.id, CommitLsn: s.wal, EndLsn: s.wal + 0x20, Relations: []*pb.Relation{fanRel}, Rows: rows,
		Boundary: &pb.Boundary{Kind: pb.UnitKind_UNIT_KIND_TRANSACTION}}
	s.wal += 0x40
	s.txns = append(s.txns, e)
}

// relayStep publishes the source's next transaction, or confirms an idle
// position.
func (r *fanRun) relayStep(s *fanSource) {
	if !s.online {
		return
	}
	if s.relayPos < len(s.txns) {
		e := s.txns[s.relayPos]
		s.log = append(s.log, e)
		s.relayPos++
		s.confirmed = e.EndLsn
		return
	}
	s.confirmed = s.wal // idle: the keepalive position
}

// drain reads source s's log into the batch (table → changes, marks).
func (r *fanRun) drain(s *fanSource, batch map[string][]lake.Change, marks map[string]map[string]uint64) {
	c := r.c
	if c.pastRetain[s.id] {
		return
	}
	if c.read[s.id] < s.first {
		c.pastRetain[s.id] = true
		r.tracef("committer: %s past retention (cursor %d, log starts at %d)", s.id, c.read[s.id], s.first)
		return
	}
	for c.read[s.id] < len(s.log) {
		e := s.log[c.read[s.id]]
		c.read[s.id]++
		c.held[s.id] = append(c.held[s.id], e)
		if !lake.EndsGroup(e) {
			continue
		}
		var lsn uint64
		per := map[string][]lake.Change{}
		for _, u := range c.held[s.id] {
			lsn = max(lsn, u.CommitLsn)
			tcs, err := lake.Changes(u)
			if err != nil {
				r.chk.fail(InvLiveness, "changes: %v", err)
				return
			}
			for _, tc := range tcs {
				per[tc.Table.LakeName()] = append(per[tc.Table.LakeName()], tc.Changes...)
			}
		}
		c.held[s.id] = nil
		for t, chs := range per {
			if c.dedup.Accept(t, s.id, lsn) {
				batch[t] = append(batch[t], chs...)
				if marks[t] == nil {
					marks[t] = map[string]uint64{}
				}
				marks[t][s.id] = max(marks[t][s.id], lsn)
			}
		}
	}
}

// commitStep drains every source and commits: tables (rows and marks
// together), then the cursors. It reports false when the committer
// crashed (the crash point fired).
func (r *fanRun) commitStep(point string) bool {
	batch := map[string][]lake.Change{}
	marks := map[string]map[string]uint64{}
	for _, s := range r.src {
		r.drain(s, batch, marks)
	}
	for t, chs := range batch {
		r.lk.rows = append(r.lk.rows, chs...)
		if r.lk.marks[t] == nil {
			r.lk.marks[t] = map[string]uint64{}
		}
		for s, v := range marks[t] {
			r.lk.marks[t][s] = max(r.lk.marks[t][s], v)
		}
	}
	if point != "" && len(batch) > 0 && r.at(point) != nil {
		r.tracef("committer: crash at %s", point)
		r.crashes++
		r.restartCommitter()
		return false
	}
	for _, s := range r.src {
		if len(r.c.held[s.id]) == 0 {
			r.lk.cursors[s.id] = r.c.read[s.id]
		}
	}
	return true
}

// closeEpoch is the committer's epoch close.
func (r *fanRun) closeEpoch() {
	r.closes++
	if f := r.at("fanin.epoch-close"); f != nil && f.Action == actOffline {
		s := r.src[len(r.src)/2]
		s.online, s.downTill = false, r.step+f.Arg
		r.tracef("%s goes offline until step %d", s.id, s.downTill)
	}
	type probe struct {
		reachable, confirmed bool
		wal                  uint64
	}
	probes := map[string]probe{}
	for _, s := range r.src {
		if !s.online {
			probes[s.id] = probe{}
			continue
		}
		r.relayStep(s) // the wait for the slot: the relay keeps going
		probes[s.id] = probe{reachable: true, wal: s.wal, confirmed: s.confirmed >= s.wal}
	}
	if !r.commitStep("fanin.before-epoch-record") {
		return
	}
	r.now = r.now.Add(time.Second)
	var lines []lake.SourceEpoch
	for _, s := range r.src {
		p := probes[s.id]
		caught := p.confirmed && len(r.c.held[s.id]) == 0 && !r.c.pastRetain[s.id]
		lines = append(lines, lake.Decide(lake.Observation{SourceID: s.id, Reachable: p.reachable, WALPos: p.wal, CaughtUp: caught,
			SlotLost: r.c.pastRetain[s.id], Prev: r.c.prev[s.id], LastIncluded: r.c.lastIn[s.id], Err: "unreachable"}, r.now, 3*time.Second))
	}
	e := lake.CloseEpoch(int64(len(r.lk.epochs)+1), r.now, lines)
	r.lk.epochs = append(r.lk.epochs, e)
	r.lk.rowsAt = append(r.lk.rowsAt, len(r.lk.rows))
	for _, se := range e.Sources {
		r.c.prev[se.SourceID] = se
		if se.Included && !se.Lagging {
			r.c.lastIn[se.SourceID] = r.now
		}
	}
	r.tracef("epoch %d %s missing %v", e.ID, e.Status, e.Missing())
}

func (r *fanRun) run(opts Options) {
	limit := opts.StepsMax
	if limit == 0 {
		limit = 200 * r.fi.Txns
	}
	for r.step = 1; r.step <= limit; r.step++ {
		for _, s := range r.src {
			if !s.online && r.step >= s.downTill {
				s.online = true
				// Reconnect: the relay resumes from the log's end; a
				// duplicate fault republishes what was already there.
				if f := r.at("fanin.relay-reconnect"); f != nil && f.Action == actDuplicate {
					s.relayPos = max(0, s.relayPos-f.Arg)
					r.tracef("%s relay republishes its last %d transactions", s.id, f.Arg)
				}
			}
		}
		switch x := r.rng.IntN(10); {
		case x < 4:
			s := r.src[r.rng.IntN(len(r.src))]
			if s.online && len(s.txns) < r.fi.Txns {
				r.commitTxn(s)
			}
		case x < 8:
			r.relayStep(r.src[r.rng.IntN(len(r.src))])
		default:
			r.commitStep("fanin.after-table-commit")
		}
		if f := r.at("fanin.step"); f != nil {
			switch f.Action {
			case actExpire:
				s := r.src[len(r.src)-1]
				if r.c.read[s.id] >= len(s.log) { // make the committer lag by one
					r.commitTxn(s)
					r.relayStep(s)
				}
				s.first = len(s.log)
				r.tracef("%s log expires everything before offset %d", s.id, s.first)
			case actOffline:
				s := r.src[len(r.src)/2]
				s.online, s.downTill = false, r.step+f.Arg
				s.relayPos = len(s.log) // the relay resumes from the log's durable end
				r.tracef("%s goes offline until step %d", s.id, s.downTill)
			}
		}
		if r.step%r.fi.CloseEvery == 0 {
			r.closeEpoch()
		}
		if r.done() {
			break
		}
	}
	r.evaluate()
}

// done: every source wrote its workload, is online, and the last epoch
// includes every source not past retention through its WAL end.
func (r *fanRun) done() bool {
	if len(r.lk.epochs) == 0 {
		return false
	}
	last := r.lk.epochs[len(r.lk.epochs)-1]
	for _, s := range r.src {
		if len(s.txns) < r.fi.Txns || !s.online {
			return false
		}
		se, _ := last.Source(s.id)
		if r.c.pastRetain[s.id] {
			continue
		}
		if !se.Included || se.ThroughLSN < s.wal {
			return false
		}
	}
	return true
}

func (r *fanRun) evaluate() {
	if !r.done() {
		r.chk.fail(InvLiveness, "the fleet did not finish within %d steps", r.step)
	}
	// Exactly once: every (source, commit LSN, position) once.
	seen := map[string]bool{}
	for _, ch := range r.lk.rows {
		k := fmt.Sprintf("%s/%d/%d", ch.SourceID, ch.CommitLSN, ch.Seq)
		if seen[k] {
			r.chk.fail(InvExactlyOnce, "row %s is in the changelog twice", k)
			break
		}
		seen[k] = true
	}
	// Epochs: the status follows the lines, and no line claims rows the
	// changelog did not have when the record was written.
	for i, e := range r.lk.epochs {
		if missing := e.Missing(); len(missing) > 0 && e.Status != lake.StatusGaps || len(missing) == 0 && e.Status != lake.StatusComplete {
			r.chk.fail(InvEpochHonest, "epoch %d reads %s with missing sources %v", e.ID, e.Status, missing)
		}
		if len(e.Sources) != len(r.src) {
			r.chk.fail(InvEpochHonest, "epoch %d has %d source lines for %d sources", e.ID, len(e.Sources), len(r.src))
		}
		had := map[string]bool{}
		for _, ch := range r.lk.rows[:r.lk.rowsAt[i]] {
			had[fmt.Sprintf("%s/%d/%d", ch.SourceID, ch.CommitLSN, ch.Seq)] = true
		}
		for _, s := range r.src {
			se, _ := e.Source(s.id)
			for _, t := range s.txns {
				if t.CommitLsn >= se.ThroughLSN {
					break
				}
				for _, row := range t.Rows {
					if !had[fmt.Sprintf("%s/%d/%d", s.id, t.CommitLsn, row.Seq)] {
						r.chk.fail(InvEpochHonest, "epoch %d claims %s through %X, but commit %X was not in the changelog", e.ID, s.id, se.ThroughLSN, t.CommitLsn)
						return
					}
				}
			}
		}
	}
	// No loss: each source's net state in the changelog is the source's.
	for _, s := range r.src {
		if r.c.pastRetain[s.id] {
			continue
		}
		var mine []lake.Change
		for _, ch := range r.lk.rows {
			if ch.SourceID == s.id {
				mine = append(mine, ch)
			}
		}
		got := map[string]string{}
		for k, row := range lake.NetState(mine, []string{"id"}, []string{"id", "v"}) {
			got[k] = *row["v"]
		}
		want := map[string]string{}
		for k, v := range s.state {
			want[fmt.Sprintf("[%q]", k)] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			r.chk.fail(InvNoLoss, "%s: the changelog's net state has %d rows, the source %d", s.id, len(got), len(want))
		}
	}
	r.expect()
}

// expect checks what the scenario's faults must have led to.
func (r *fanRun) expect() {
	var gapped, pastRet []string
	for _, e := range r.lk.epochs {
		for _, se := range e.Sources {
			if !se.Included {
				gapped = append(gapped, se.SourceID)
			}
			if se.PastRetention {
				pastRet = append(pastRet, se.SourceID)
			}
		}
	}
	if r.sc.Expect.Stop == "past-retention" && len(pastRet) == 0 {
		r.chk.fail(InvExpectedError, "no source went past retention")
	}
	for _, f := range r.faults {
		if !f.fired {
			continue
		}
		switch f.Action {
		case actOffline:
			if s := r.src[len(r.src)/2]; !slices.Contains(gapped, s.id) {
				r.chk.fail(InvExpectedError, "%s was offline at an epoch close, yet no epoch names it missing", s.id)
			}
		case actExpire:
			s := r.src[len(r.src)-1]
			last := r.lk.epochs[len(r.lk.epochs)-1]
			if se, _ := last.Source(s.id); !slices.Contains(pastRet, s.id) || se.Included || last.Status != lake.StatusGaps {
				r.chk.fail(InvExpectedError, "%s is past retention, yet the last epoch reads %s with its line %+v", s.id, last.Status, se)
			}
		}
	}
}
