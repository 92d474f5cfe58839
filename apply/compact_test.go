package apply

import (
	"strings"
	"testing"

	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
)

func ctext(s string) *pb.Value { return &pb.Value{Kind: pb.ValueKind_VALUE_KIND_TEXT, Data: []byte(s)} }

var ctoast = &pb.Value{Kind: pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST}

func crel(identity byte) *pb.Relation {
	r := &pb.Relation{Schema: "public", Name: "t", ReplicaIdentity: uint32(identity), Columns: []*pb.RelationColumn{
		{Name: "id", TypeOid: 23, TypeModifier: -1, Key: identity != 'n'}, {Name: "v", TypeOid: 25, TypeModifier: -1}, {Name: "doc", TypeOid: 25, TypeModifier: -1}}}
	if identity == 'f' {
		for _, c := range r.Columns {
			c.Key = true
		}
	}
	r.Fingerprint = envelope.RelationFingerprint(r)
	return r
}

// ctxn builds one transaction from a compact script: "I1a" insert id 1 v a,
// "U1b" update id 1 to v b (doc unchanged TOAST), "D1" delete id 1,
// "K12" update moving id 1 to 2, "T" truncate.
func ctxn(rel *pb.Relation, script string) *pb.Envelope {
	e := &pb.Envelope{Relations: []*pb.Relation{rel}}
	for _, op := range strings.Fields(script) {
		r := &pb.Row{}
		switch op[0] {
		case 'I':
			r.Op, r.NewTuple = pb.Op_OP_INSERT, []*pb.Value{ctext(op[1:2]), ctext(op[2:]), ctext("doc" + op[1:2])}
		case 'U':
			r.Op, r.NewTuple = pb.Op_OP_UPDATE, []*pb.Value{ctext(op[1:2]), ctext(op[2:]), ctoast}
		case 'D':
			r.Op, r.OldKind, r.OldTuple = pb.Op_OP_DELETE, pb.OldTuple_OLD_TUPLE_KEY, []*pb.Value{ctext(op[1:2]), {Kind: pb.ValueKind_VALUE_KIND_NULL}, {Kind: pb.ValueKind_VALUE_KIND_NULL}}
		case 'K':
			r.Op, r.OldKind = pb.Op_OP_UPDATE, pb.OldTuple_OLD_TUPLE_KEY
			r.OldTuple = []*pb.Value{ctext(op[1:2]), {Kind: pb.ValueKind_VALUE_KIND_NULL}, {Kind: pb.ValueKind_VALUE_KIND_NULL}}
			r.NewTuple = []*pb.Value{ctext(op[2:3]), ctext("moved"), ctoast}
		case 'T':
			r.Op = pb.Op_OP_TRUNCATE
		}
		e.Rows = append(e.Rows, r)
	}
	return e
}

func describe(b *netBatch) string {
	var parts []string
	for _, t := range b.tables {
		for _, k := range t.order {
			r := t.rows[k]
			s := string(r.op) + k
			for _, v := range r.vals {
				switch v.GetKind() {
				case pb.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
					s += ":~"
				default:
					s += ":" + string(v.Data)
				}
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " ")
}

func TestCompact(t *testing.T) {
	rel := crel('d')
	cases := []struct {
		txns []string
		want string // "" = refused
	}{
		{[]string{"I1a", "U1b"}, "I1:1:b:doc1"},           // insert then update: one insert, TOAST from the insert
		{[]string{"U1a", "U1b U2c"}, "U1:1:b:~ U2:2:c:~"}, // updates fold, unchanged TOAST stays unchanged
		{[]string{"U1a", "D1"}, "D1"},                     // update then delete: the delete
		{[]string{"D1", "I1z"}, "R1:1:z:doc1"},            // delete then insert: replace
		{[]string{"D1 I1z", "U1y"}, "R1:1:y:doc1"},        // ... then update: replace with the last values
		{[]string{"D1 I1z", "D1"}, "D1"},                  // ... then delete: the first delete
		{[]string{"I1a I2b", "I3c"}, "I1:1:a:doc1 I2:2:b:doc2 I3:3:c:doc3"},
		{[]string{"I1a", "D1"}, ""},  // insert then delete: row by row
		{[]string{"I1a", "I1b"}, ""}, // duplicate insert: an error row by row
		{[]string{"U1a", "I1b"}, ""}, // insert over an updated row: an error row by row
		{[]string{"D1", "U1a"}, ""},  // update of a deleted row: an error row by row
		{[]string{"D1", "D1"}, ""},   // double delete
		{[]string{"K12"}, ""},        // key change
		{[]string{"I1a", "T"}, ""},   // truncate
	}
	for _, c := range cases {
		var envs []*pb.Envelope
		for _, s := range c.txns {
			envs = append(envs, ctxn(rel, s))
		}
		b, ok := compact(envs)
		got := ""
		if ok {
			got = describe(b)
		}
		if got != c.want {
			t.Errorf("%q: got %q, want %q", c.txns, got, c.want)
		}
	}
	if _, ok := compact([]*pb.Envelope{ctxn(crel('f'), "U1a")}); ok {
		t.Error("REPLICA IDENTITY FULL folded")
	}
	if _, ok := compact([]*pb.Envelope{ctxn(crel('n'), "I1a")}); ok {
		t.Error("a relation without a key folded")
	}
}
