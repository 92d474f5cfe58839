package schemachange

// Planned is one change with its classification and the target DDL
// Trellara runs for it ("" when it runs none).
type Planned struct {
	Change
	Classification Classification `json:"classification"`
	TargetDDL      string         `json:"target_ddl,omitempty"`
}

// Plan is a relation's schema change as seen at a point of the stream:
// both shapes, every classified change and what to do about it. A blocked
// plan is what `trellara schema ddl-plan` shows.
type Plan struct {
	Relation string    `json:"relation"`
	LSN      string    `json:"lsn"` // commit LSN of the first transaction under the new shape
	Xid      uint32    `json:"xid,omitempty"`
	Pinned   Shape     `json:"pinned"`
	Live     Shape     `json:"live"`
	Changes  []Planned `json:"changes"`
	// Blocked is true when capture stops at the change.
	Blocked bool `json:"blocked"`
	// Holds says what stops: in either mode today, the whole flow.
	Holds string `json:"holds,omitempty"`
	// Commands are the recovery commands, in order of preference: the
	// schema.renames entry an unmapped rename needs, a reseed of the table,
	// the full re-snapshot.
	Commands []string `json:"commands,omitempty"`
}

// NewPlan classifies the change from pinned to live under p. The target
// DDL names target, the target table's quoted name.
func NewPlan(target string, pinned, live Shape, p Policy) *Plan {
	pl := &Plan{Relation: live.Relation, Pinned: pinned, Live: live}
	if pl.Relation == "" {
		pl.Relation = pinned.Relation
	}
	for _, c := range Diff(pinned, live) {
		pc := Planned{Change: c, Classification: ClassifyChange(c, p)}
		if pc.Classification.Decision == AutoApply {
			pc.TargetDDL = TargetDDL(target, c, live)
		}
		pl.Changes = append(pl.Changes, pc)
	}
	pl.Blocked = !pl.AutoApplies()
	return pl
}

// NewTablePlan is the plan of a table the flow does not know, seen in the
// stream with shape live: one add_table change, classified under p. The
// target DDL of an admitted table is built by the applier from the source
// definition the barrier carries, so TargetDDL names it in words. refused,
// when not empty, says why the table cannot join as it is (rows that may
// predate the stream, no replica identity, ...): the change then blocks
// whatever the policy, with refused as its reason.
func NewTablePlan(live Shape, p Policy, refused string) *Plan {
	pc := Planned{Change: Change{Kind: AddTable, To: live.Relation}, Classification: Classify(AddTable, p)}
	if refused != "" && pc.Classification.Compatibility == Compatible {
		pc.Classification.Compatibility, pc.Classification.Decision = BlockedByPolicy, Block
		pc.Classification.Why = refused
	}
	if pc.Classification.Decision == AutoApply {
		pc.TargetDDL = "CREATE TABLE " + live.Relation + " from the source's definition"
	}
	pl := &Plan{Relation: live.Relation, Live: live, Changes: []Planned{pc}}
	pl.Blocked = !pl.AutoApplies()
	return pl
}

// AutoApplies reports whether every change of the plan flows through a DDL
// barrier by itself: each is auto-apply and has its target DDL.
func (pl *Plan) AutoApplies() bool {
	if len(pl.Changes) == 0 {
		return false
	}
	for _, c := range pl.Changes {
		if c.Classification.Decision != AutoApply || c.TargetDDL == "" {
			return false
		}
	}
	return true
}

// Kinds names the plan's change kinds ("unclassified" when the pinned
// shape was not kept, so nothing could be compared).
func (pl *Plan) Kinds() string {
	cs := make([]Change, len(pl.Changes))
	for i, c := range pl.Changes {
		cs[i] = c.Change
	}
	if s := Summary(cs); s != "" {
		return s
	}
	return "unclassified"
}

// Destructive reports whether any change is destructive or ambiguous, or
// nothing could be classified: the table then has to be copied again.
func (pl *Plan) Destructive() bool {
	if len(pl.Changes) == 0 {
		return true
	}
	for _, c := range pl.Changes {
		if c.Classification.Compatibility == DestructiveOrAmbiguous {
			return true
		}
	}
	return false
}
