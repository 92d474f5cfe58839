package pgoutput

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestAppendMatchesSpec checks the encoders against the hand-assembled bytes
// of decodeCases.
func TestAppendMatchesSpec(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("keep")
			got := Append(append([]byte(nil), prefix...), tc.want)
			if !bytes.HasPrefix(got, prefix) {
				t.Fatal("Append overwrote dst")
			}
			if got = got[len(prefix):]; !bytes.Equal(got, tc.data) {
				t.Fatalf("Append:\n got %x\nwant %x", got, tc.data)
			}
		})
	}
}

var randomSeed = flag.Uint64("seed", 0, "seed for randomized tests; 0 picks one from the clock")

// TestRoundTripRandom encodes and decodes seeded random messages. The seed
// is printed so that a failure can be replayed with -seed.
func TestRoundTripRandom(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 2000; i++ {
		m, inStream := randomMessage(rng)
		data := Append(nil, m)
		got, err := Decode(data, testLSN, inStream)
		if err != nil {
			t.Fatalf("message %d %#v: %v", i, m, err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(m)) {
			t.Fatalf("message %d:\n got %#v\nwant %#v", i, got, m)
		}
	}
}

// normalize maps nil and empty slices to the decoder's form, because a
// hand-built message may use either.
func normalize(m Message) Message {
	cols := func(cs []Column) []Column {
		if cs == nil {
			return nil
		}
		out := make([]Column, len(cs))
		for i, c := range cs {
			out[i] = c
			switch c.Kind {
			case ColumnText, ColumnBinary:
				if c.Data == nil {
					out[i].Data = []byte{}
				}
			default:
				out[i].Data = nil
			}
		}
		return out
	}
	switch m := m.(type) {
	case *Insert:
		c := *m
		c.New = cols(c.New)
		return &c
	case *Update:
		c := *m
		c.Old, c.New = cols(c.Old), cols(c.New)
		return &c
	case *Delete:
		c := *m
		c.Old = cols(c.Old)
		return &c
	case *LogicalMessage:
		c := *m
		if c.Content == nil {
			c.Content = []byte{}
		}
		return &c
	}
	return m
}

func randomMessage(rng *rand.Rand) (Message, bool) {
	inStream := rng.IntN(2) == 0
	xid := func() XID {
		if inStream {
			return XID(1 + rng.Uint32N(1<<31))
		}
		return 0
	}
	validXid := func() XID { return XID(1 + rng.Uint32N(1<<31)) }
	str := func() string {
		const alphabet = "abcXYZ _.\"'é日"
		var sb strings.Builder
		for n := rng.IntN(12); n > 0; n-- {
			sb.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	blob := func() []byte {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tuple := func() []Column {
		cols := make([]Column, rng.IntN(8))
		for i := range cols {
			switch rng.IntN(4) {
			case 0:
				cols[i] = Column{Kind: ColumnNull}
			case 1:
				cols[i] = Column{Kind: ColumnUnchangedToast}
			case 2:
				cols[i] = Column{Kind: ColumnText, Data: []byte(str())}
			default:
				cols[i] = Column{Kind: ColumnBinary, Data: blob()}
			}
		}
		return cols
	}
	lsn := func() LSN { return LSN(1 + rng.Uint64N(1<<40)) }
	ts := func() Timestamp { return Timestamp(rng.Int64()) }
	identities := []ReplicaIdentity{ReplicaIdentityDefault, ReplicaIdentityNothing, ReplicaIdentityFull, ReplicaIdentityIndex}
	switch rng.IntN(14) {
	case 0:
		return &Begin{FinalLSN: lsn(), CommitTime: ts(), Xid: validXid()}, false
	case 1:
		return &Commit{CommitLSN: lsn(), EndLSN: lsn(), CommitTime: ts()}, false
	case 2:
		return &Origin{CommitLSN: lsn(), Name: str()}, inStream
	case 3:
		r := &Relation{Xid: xid(), RelationID: OID(rng.Uint32()), Namespace: str(), Name: str(),
			ReplicaIdentity: identities[rng.IntN(len(identities))], Columns: make([]RelationColumn, rng.IntN(6))}
		for i := range r.Columns {
			r.Columns[i] = RelationColumn{Key: rng.IntN(2) == 0, Name: str(), TypeOID: OID(rng.Uint32()), TypeModifier: rng.Int32() - 1<<30}
		}
		return r, inStream
	case 4:
		return &Type{Xid: xid(), TypeOID: OID(rng.Uint32()), Namespace: str(), Name: str()}, inStream
	case 5:
		return &Insert{Xid: xid(), RelationID: OID(rng.Uint32()), New: tuple()}, inStream
	case 6:
		u := &Update{Xid: xid(), RelationID: OID(rng.Uint32()), New: tuple()}
		switch rng.IntN(3) {
		case 1:
			u.OldKind, u.Old = TupleKey, tuple()
		case 2:
			u.OldKind, u.Old = TupleOld, tuple()
		}
		return u, inStream
	case 7:
		kind := TupleKey
		if rng.IntN(2) == 0 {
			kind = TupleOld
		}
		return &Delete{Xid: xid(), RelationID: OID(rng.Uint32()), OldKind: kind, Old: tuple()}, inStream
	case 8:
		tr := &Truncate{Xid: xid(), Cascade: rng.IntN(2) == 0, RestartIdentity: rng.IntN(2) == 0, RelationIDs: make([]OID, rng.IntN(5))}
		for i := range tr.RelationIDs {
			tr.RelationIDs[i] = OID(rng.Uint32())
		}
		return tr, inStream
	case 9:
		return &LogicalMessage{Xid: xid(), Transactional: rng.IntN(2) == 0, LSN: lsn(), Prefix: str(), Content: blob()}, inStream
	case 10:
		return &StreamStart{Xid: validXid(), FirstSegment: rng.IntN(2) == 0}, false
	case 11:
		return &StreamStop{}, true
	case 12:
		return &StreamCommit{Xid: validXid(), CommitLSN: lsn(), EndLSN: lsn(), CommitTime: ts()}, false
	default:
		return &StreamAbort{Xid: validXid(), SubXid: validXid()}, false
	}
}

// TestAppendPanics pins that messages without a valid encoding are refused
// loudly instead of producing bytes that decode differently.
func TestAppendPanics(t *testing.T) {
	for name, m := range map[string]Message{
		"NUL in relation name":    &Relation{Name: "a\x00b", ReplicaIdentity: ReplicaIdentityDefault},
		"unknown replica ident":   &Relation{Name: "t", ReplicaIdentity: 'x'},
		"too many columns":        &Relation{Name: "t", ReplicaIdentity: ReplicaIdentityDefault, Columns: make([]RelationColumn, 1<<16)},
		"unknown column kind":     &Insert{New: []Column{{Kind: 'x'}}},
		"zero column kind":        &Insert{New: []Column{{}}},
		"too many tuple columns":  &Insert{New: make([]Column, 1<<16)},
		"update unknown old kind": &Update{OldKind: TupleNew},
		"delete without old kind": &Delete{},
		"NUL in message prefix":   &LogicalMessage{Prefix: "\x00"},
		"NUL in origin":           &Origin{Name: "x\x00"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("Append did not panic")
				}
				if !strings.HasPrefix(fmt.Sprint(r), "pgoutput: ") {
					t.Fatalf("panic %q lacks the package prefix", r)
				}
			}()
			Append(nil, m)
		})
	}
}
