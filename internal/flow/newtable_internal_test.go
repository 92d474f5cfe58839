package flow

import (
	"strings"
	"testing"
)

// widenXid places a catalog's 32-bit xid at or before the source's next
// xid8, across an epoch boundary.
func TestWidenXid(t *testing.T) {
	const epoch = uint64(3) << 32
	for _, tc := range []struct {
		xid  uint32
		next uint64
		want uint64
	}{
		{700, 730, 700},
		{730, 730, 730},
		{0xfffffff0, epoch + 5, epoch - 0x10}, // written in the previous epoch
		{4, epoch + 5, epoch + 4},
		{0xfffffff0, 5, 0}, // no earlier epoch: older than anything
	} {
		if got := widenXid(tc.xid, tc.next); got != tc.want {
			t.Errorf("widenXid(%d, %d) = %d, want %d", tc.xid, tc.next, got, tc.want)
		}
	}
}

// notCarried names the first condition that fails for a table created
// before the transaction that first writes it, and none when all hold;
// a flow without a recorded horizon keeps the older rule (blocks).
func TestNewTableNotCarried(t *testing.T) {
	pub := func(s string) *string { return &s }
	ok := newTableCatalog{created: "725", classXmin: "725", relkind: "r", published: pub("700"), next: "730"}
	for _, tc := range []struct {
		name    string
		c       newTableCatalog
		h       uint64
		hasH    bool
		problem string // "" when carried
	}{
		{"all hold", ok, 720, true, ""},
		{"created at the horizon", ok, 725, true, ""},
		{"no horizon recorded", ok, 720, false, "records no stream horizon"},
		{"created before the horizon", ok, 726, true, "(a)"},
		{"pg_class rewritten", func() newTableCatalog { c := ok; c.classXmin = "728"; return c }(), 720, true, "(b)"},
		{"schema not published", func() newTableCatalog { c := ok; c.published = nil; return c }(), 720, true, "(c) its schema is not"},
		{"schema published later", func() newTableCatalog { c := ok; c.published = pub("725"); return c }(), 720, true, "(c) its schema joined"},
		{"partitioned", func() newTableCatalog { c := ok; c.relkind = "p"; return c }(), 720, true, "partitioned"},
		{"across an epoch", newTableCatalog{created: "4294967290", classXmin: "4294967290", relkind: "r", published: pub("4294967200"),
			next: "8589934600"}, 8589934580, true, ""},
	} {
		got, err := tc.c.notCarried(tc.h, tc.hasH)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
			t.Errorf("%s: notCarried = %q, want %q", tc.name, got, tc.problem)
		}
	}
}
