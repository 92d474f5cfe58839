package flow_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
)

// statusBarriers is the part of `status --view diagnostics --format json`
// the barrier contract tests read.
type statusBarriers struct {
	Barriers []struct {
		ID        string   `json:"id"`
		Relation  string   `json:"relation"`
		CommitLSN string   `json:"commit_lsn"`
		Kinds     []string `json:"kinds"`
		Sinks     []string `json:"sinks"`
		Phases    []struct {
			Phase string  `json:"phase"`
			Sink  string  `json:"sink"`
			Done  bool    `json:"done"`
			At    *string `json:"at"`
		} `json:"phases"`
		Acks []struct {
			Sink         string   `json:"sink"`
			Acknowledged bool     `json:"acknowledged"`
			Pause        *float64 `json:"visibility_pause_ms"`
		} `json:"acks"`
		Complete bool `json:"complete"`
	} `json:"barriers"`
}

// checkBarrierContract requires status to show relation's barrier with
// its propagation contract — id, the flow's one sink, the phases in
// order (published, pin moved, applied on the sink), each done, the
// sink's acknowledgement with its visibility pause — and the target's
// acknowledgement row to have been written by the barrier's own target
// transaction: the one that added column and wrote the row whose key is
// firstKey (the same xid as the column's catalog row and that data row).
func checkBarrierContract(t *testing.T, f *schemaFlow, dst *pgtest.Cluster, relation, kind, table, column string, firstKey int) {
	t.Helper()
	out, code := f.run("status", "--view", "diagnostics", "--format", "json")
	var st statusBarriers
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json (exit %d): %v\n%s", code, err, out)
	}
	var found bool
	for _, b := range st.Barriers {
		if b.Relation != relation {
			continue
		}
		found = true
		if b.ID != relation+"@"+b.CommitLSN || len(b.Kinds) != 1 || b.Kinds[0] != kind || strings.Join(b.Sinks, ",") != "default" {
			t.Fatalf("barrier %+v: want id %s@<commit LSN>, kind %s, sinks [default]", b, relation, kind)
		}
		var phases []string
		for _, p := range b.Phases {
			phases = append(phases, p.Phase+"/"+p.Sink)
			if !p.Done || p.At == nil {
				t.Fatalf("barrier %s: phase %s not done: %+v", b.ID, p.Phase, b.Phases)
			}
		}
		if strings.Join(phases, " ") != "published/ pin_moved/ applied/default" {
			t.Fatalf("barrier %s: phases %v, want published, pin_moved, applied on default in that order", b.ID, phases)
		}
		if len(b.Acks) != 1 || !b.Acks[0].Acknowledged || b.Acks[0].Pause == nil || *b.Acks[0].Pause < 0 || !b.Complete {
			t.Fatalf("barrier %s: acks %+v complete %v, want the default sink's acknowledgement with its visibility pause", b.ID, b.Acks, b.Complete)
		}
		tc := dst.Connect(context.Background())
		defer tc.Close(context.Background())
		var ackXid, colXid, rowXid string
		if err := tc.QueryRow(context.Background(), `SELECT
			(SELECT xmin::text FROM trellara.barriers WHERE id = $1),
			(SELECT xmin::text FROM pg_attribute WHERE attrelid = $2::regclass AND attname = $3),
			(SELECT xmin::text FROM `+table+` WHERE id = $4)`, b.ID, table, column, firstKey).Scan(&ackXid, &colXid, &rowXid); err != nil {
			t.Fatal(err)
		}
		if ackXid != colXid || ackXid != rowXid {
			t.Fatalf("barrier %s: acknowledged by target transaction %s, its DDL by %s and its first row by %s: want one transaction",
				b.ID, ackXid, colXid, rowXid)
		}
	}
	if !found {
		t.Fatalf("status shows no barrier of %s\n%s", relation, out)
	}
	text, _ := f.run("status", "--view", "diagnostics")
	if !strings.Contains(text, "barrier       "+relation+"@") || !strings.Contains(text, "3. sink default applied") {
		t.Fatalf("status text shows no barrier contract of %s\n%s", relation, text)
	}
}
