package pgoutput

import (
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"

	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// capture is one line of testdata/captured.txt; the format is described at
// the top of that file.
type capture struct {
	line     int
	typ      byte
	session  string // "<proto> <format>", e.g. "2 t"
	inStream bool
	lsn      LSN
	data     []byte
}

func loadCaptures(t testing.TB) map[string][]capture {
	t.Helper()
	f, err := os.Open("testdata/captured.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sessions := map[string][]capture{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, " ")
		if len(fields) != 6 || len(fields[0]) != 1 {
			t.Fatalf("captured.txt:%d: want 6 fields, got %q", n, line)
		}
		lsn, err := pglogrepl.ParseLSN(fields[4])
		if err != nil {
			t.Fatalf("captured.txt:%d: %v", n, err)
		}
		data, err := hex.DecodeString(fields[5])
		if err != nil || len(data) == 0 || data[0] != fields[0][0] {
			t.Fatalf("captured.txt:%d: bad hex or type mismatch (%v)", n, err)
		}
		c := capture{line: n, typ: fields[0][0], session: fields[1] + " " + fields[2], inStream: fields[3] == "1", lsn: lsn, data: data}
		sessions[c.session] = append(sessions[c.session], c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"2 t", "2 b", "1 t"} {
		if len(sessions[s]) == 0 {
			t.Fatalf("captured.txt has no session %q", s)
		}
	}
	return sessions
}

// decodeSession decodes one captured session with a Decoder, checking on
// the way that the decoder's stream state matches the capture and that
// every message re-encodes to its exact bytes.
func decodeSession(t *testing.T, caps []capture) []Message {
	t.Helper()
	var d Decoder
	msgs := make([]Message, 0, len(caps))
	for _, c := range caps {
		if c.typ != 'S' && c.typ != 'E' && d.InStream() != c.inStream {
			t.Fatalf("captured.txt:%d: decoder in stream %v, capture says %v", c.line, d.InStream(), c.inStream)
		}
		in := d.InStream()
		m, err := d.Decode(c.data, c.lsn)
		if err != nil {
			t.Fatalf("captured.txt:%d: %v", c.line, err)
		}
		if enc := Append(nil, m); !bytes.Equal(enc, c.data) {
			t.Fatalf("captured.txt:%d: re-encoded\n got %x\nwant %x", c.line, enc, c.data)
		}
		// The Decoder's message lives until its next Decode; keep one of
		// the package-level Decode, which must be the same.
		kept, err := Decode(c.data, c.lsn, in)
		if err != nil || !reflect.DeepEqual(kept, m) {
			t.Fatalf("captured.txt:%d: Decode gives %#v, %v; the Decoder %#v", c.line, kept, err, m)
		}
		msgs = append(msgs, kept)
	}
	if d.InStream() {
		t.Fatal("session ends inside a stream block")
	}
	return msgs
}

func TestCapturedDecode(t *testing.T) {
	for name, caps := range loadCaptures(t) {
		t.Run(name, func(t *testing.T) {
			msgs := decodeSession(t, caps)
			seen := map[MessageType]int{}
			for _, m := range msgs {
				seen[m.MessageType()]++
			}
			want := []MessageType{MsgBegin, MsgCommit, MsgOrigin, MsgRelation, MsgType, MsgInsert, MsgUpdate, MsgDelete, MsgTruncate, MsgLogicalMessage}
			if strings.HasPrefix(name, "2") {
				want = append(want, MsgStreamStart, MsgStreamStop, MsgStreamCommit, MsgStreamAbort)
			}
			for _, mt := range want {
				if seen[mt] == 0 {
					t.Errorf("no %s message captured", mt)
				}
			}
			t.Logf("%d messages: %v", len(msgs), seen)
		})
	}
}

// TestCapturedTruncated applies the truncation sweep to every captured
// message.
func TestCapturedTruncated(t *testing.T) {
	for _, caps := range loadCaptures(t) {
		for _, c := range caps {
			checkTruncations(t, fmt.Sprintf("captured.txt:%d", c.line), c.data, c.inStream)
		}
	}
}

// session is a decoded capture with lookups for the content checks.
type session struct {
	t         *testing.T
	msgs      []Message
	relations map[string]*Relation // by name, first (non-streamed) sighting
	binary    bool
}

func newSession(t *testing.T, caps []capture, binary bool) *session {
	s := &session{t: t, msgs: decodeSession(t, caps), relations: map[string]*Relation{}, binary: binary}
	for _, m := range s.msgs {
		if r, ok := m.(*Relation); ok && s.relations[r.Name] == nil {
			s.relations[r.Name] = r
		}
	}
	return s
}

func (s *session) rel(name string) *Relation {
	r := s.relations[name]
	if r == nil {
		s.t.Fatalf("no Relation message for %q", name)
	}
	return r
}

// value renders a column for comparison: text as is, NULL as "NULL",
// unchanged TOAST as "TOAST". Binary values of 4 bytes are int4 in this
// workload and render as decimals; other binary values are text, varchar or
// bytea, whose binary form is their raw bytes.
func (s *session) value(c Column) string {
	switch c.Kind {
	case ColumnNull:
		return "NULL"
	case ColumnUnchangedToast:
		return "TOAST"
	case ColumnBinary:
		if len(c.Data) == 4 {
			return fmt.Sprint(int32(uint32(c.Data[0])<<24 | uint32(c.Data[1])<<16 | uint32(c.Data[2])<<8 | uint32(c.Data[3])))
		}
	}
	return string(c.Data)
}

func (s *session) values(cols []Column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = s.value(c)
	}
	return out
}

// find returns the messages of type T that satisfy keep.
func find[T Message](s *session, keep func(T) bool) []T {
	var out []T
	for _, m := range s.msgs {
		if v, ok := m.(T); ok && (keep == nil || keep(v)) {
			out = append(out, v)
		}
	}
	return out
}

func one[T Message](s *session, what string, keep func(T) bool) T {
	s.t.Helper()
	all := find(s, keep)
	if len(all) == 0 {
		var zero T
		s.t.Fatalf("no %s", what)
		return zero
	}
	return all[0]
}

func TestCapturedContents(t *testing.T) {
	sessions := loadCaptures(t)
	for _, name := range []string{"2 t", "2 b", "1 t"} {
		t.Run(name, func(t *testing.T) {
			s := newSession(t, sessions[name], name == "2 b")
			checkSchema(t, s)
			checkRows(t, s)
			checkTransactions(t, s)
			if strings.HasPrefix(name, "2") {
				checkStreams(t, s)
			} else {
				checkNoStreaming(t, s)
			}
		})
	}
}

func checkSchema(t *testing.T, s *session) {
	items := s.rel("items")
	var names []string
	var keys []bool
	for _, c := range items.Columns {
		names = append(names, c.Name)
		keys = append(keys, c.Key)
	}
	if want := []string{"id", "name", "mood", "qty", "payload", "amount", "tags", "created", "flag", "raw", "vc"}; !slices.Equal(names, want) {
		t.Errorf("items columns %v, want %v", names, want)
	}
	if items.Namespace != "public" || items.ReplicaIdentity != ReplicaIdentityDefault || !keys[0] || slices.Contains(keys[1:], true) {
		t.Errorf("items: %+v", items)
	}
	builtin := map[string]OID{"id": 23, "name": 25, "payload": 25, "amount": 1700, "tags": 1009, "created": 1184, "flag": 16, "raw": 17, "vc": 1043}
	for _, c := range items.Columns {
		if oid, ok := builtin[c.Name]; ok && c.TypeOID != oid {
			t.Errorf("items.%s type OID %d, want %d", c.Name, c.TypeOID, oid)
		}
		want := int32(-1)
		switch c.Name {
		case "amount":
			want = 10<<16 | 2 + 4 // numeric(10,2)
		case "vc":
			want = 12 + 4 // varchar(12)
		}
		if c.TypeModifier != want {
			t.Errorf("items.%s type modifier %d, want %d", c.Name, c.TypeModifier, want)
		}
	}
	// Non-built-in types are described by a Type message before the
	// Relation: the enum by itself, the domain by its base type.
	mood := one(s, "Type mood", func(y *Type) bool { return y.TypeOID == items.Columns[2].TypeOID })
	if mood.Namespace != "public" || mood.Name != "mood" {
		t.Errorf("enum Type message %+v", mood)
	}
	dom := one(s, "Type for the domain", func(y *Type) bool { return y.TypeOID == items.Columns[3].TypeOID })
	if dom.Namespace != "" || dom.Name != "int4" {
		t.Errorf("domain Type message %+v, want pg_catalog base type int4", dom)
	}

	idents := map[string]ReplicaIdentity{"full_t": ReplicaIdentityFull, "idx_t": ReplicaIdentityIndex, "nothing_t": ReplicaIdentityNothing}
	for name, want := range idents {
		if got := s.rel(name).ReplicaIdentity; got != want {
			t.Errorf("%s replica identity %s, want %s", name, got, want)
		}
	}
	keyFlags := func(r *Relation) []bool {
		var out []bool
		for _, c := range r.Columns {
			out = append(out, c.Key)
		}
		return out
	}
	for name, want := range map[string][]bool{"full_t": {true, true}, "idx_t": {true, true, false}, "nothing_t": {false, false}} {
		if got := keyFlags(s.rel(name)); !slices.Equal(got, want) {
			t.Errorf("%s key flags %v, want %v", name, got, want)
		}
	}
	odd := s.rel("Mixed Name")
	if odd.Namespace != "Odd Schema" || len(odd.Columns) != 2 || odd.Columns[1].Name != "two words" {
		t.Errorf("quoted names: %+v", odd)
	}
	if shapeFingerprint(s.rel("items")) == shapeFingerprint(s.rel("full_t")) {
		t.Error("different relations share a fingerprint")
	}
}

func checkRows(t *testing.T, s *session) {
	items, full, idx := s.rel("items").RelationID, s.rel("full_t").RelationID, s.rel("idx_t").RelationID
	insertOf := func(rel OID, id string) *Insert {
		return one(s, "Insert "+id, func(m *Insert) bool { return m.RelationID == rel && s.value(m.New[0]) == id })
	}
	row1 := s.values(insertOf(items, "1").New)
	wantRaw := `\x00ff10`
	if s.binary {
		wantRaw = "\x00\xff\x10"
	}
	if row1[1] != "one" || row1[2] != "happy" || row1[9] != wantRaw || (!s.binary && row1[6] != `{a,"b c"}`) {
		t.Errorf("items row 1: %q", row1)
	}
	if k := insertOf(items, "1").New[0].Kind; (k == ColumnBinary) != s.binary {
		t.Errorf("int4 column kind %q with binary=%v", k, s.binary)
	}
	// NULL and the empty string stay distinct.
	row2 := insertOf(items, "2").New
	if row2[1].Kind != ColumnNull || row2[10].Data == nil || len(row2[10].Data) != 0 {
		t.Errorf("items row 2 NULL vs empty: %+v", row2)
	}
	if n := len(insertOf(items, "3").New[4].Data); n != 300*32 {
		t.Errorf("TOASTed payload is %d bytes, want %d", n, 300*32)
	}

	toast := one(s, "Update of the TOAST row", func(m *Update) bool { return m.RelationID == items && s.value(m.New[0]) == "3" })
	if toast.OldKind != TupleNone || toast.New[4].Kind != ColumnUnchangedToast || s.value(toast.New[1]) != "toasty-2" {
		t.Errorf("unchanged TOAST update: %+v", toast)
	}
	key := one(s, "Update with old key", func(m *Update) bool { return m.RelationID == items && m.OldKind == TupleKey })
	if old := s.values(key.Old); old[0] != "2" || slices.ContainsFunc(old[1:], func(v string) bool { return v != "NULL" }) || s.value(key.New[0]) != "20" {
		t.Errorf("key change: old %q new %q", old, s.values(key.New))
	}
	del := one(s, "Delete from items", func(m *Delete) bool { return m.RelationID == items })
	if del.OldKind != TupleKey || s.value(del.Old[0]) != "20" {
		t.Errorf("delete by key: %+v", del)
	}

	fullUpd := one(s, "Update of full_t", func(m *Update) bool { return m.RelationID == full && m.Xid == 0 })
	if fullUpd.OldKind != TupleOld || !slices.Equal(s.values(fullUpd.Old), []string{"1", "a"}) || !slices.Equal(s.values(fullUpd.New), []string{"1", "b"}) {
		t.Errorf("REPLICA IDENTITY FULL update: old %q new %q", s.values(fullUpd.Old), s.values(fullUpd.New))
	}
	fullDel := one(s, "Delete from full_t", func(m *Delete) bool { return m.RelationID == full })
	if fullDel.OldKind != TupleOld || !slices.Equal(s.values(fullDel.Old), []string{"2", "NULL"}) {
		t.Errorf("REPLICA IDENTITY FULL delete: %+v", fullDel)
	}
	idxUpd := one(s, "Update of idx_t", func(m *Update) bool { return m.RelationID == idx })
	if idxUpd.OldKind != TupleKey || !slices.Equal(s.values(idxUpd.Old), []string{"1", "2", "NULL"}) {
		t.Errorf("REPLICA IDENTITY USING INDEX update: old %q", s.values(idxUpd.Old))
	}

	parentChild := []OID{s.rel("parent").RelationID, s.rel("child").RelationID}
	slices.Sort(parentChild)
	truncs := find[*Truncate](s, func(m *Truncate) bool { return m.Xid == 0 && len(m.RelationIDs) == 2 })
	if len(truncs) != 2 {
		t.Fatalf("%d two-table Truncates, want 2", len(truncs))
	}
	for i, want := range []struct{ cascade, restart bool }{{false, true}, {true, false}} {
		ids := slices.Sorted(slices.Values(truncs[i].RelationIDs))
		if truncs[i].Cascade != want.cascade || truncs[i].RestartIdentity != want.restart || !slices.Equal(ids, parentChild) {
			t.Errorf("Truncate %d: %+v, want %+v on %v", i, truncs[i], want, parentChild)
		}
	}

	msg := func(prefix string) *LogicalMessage {
		return one(s, "Message "+prefix, func(m *LogicalMessage) bool { return m.Prefix == prefix })
	}
	if m := msg("trellara.nontx"); m.Transactional || !bytes.Equal(m.Content, []byte{0, 0xff}) || m.LSN == 0 {
		t.Errorf("non-transactional message %+v", m)
	}
	if m := msg("trellara.tx"); !m.Transactional || string(m.Content) != "hello" {
		t.Errorf("transactional message %+v", m)
	}
	if m := msg(""); !m.Transactional || len(m.Content) != 0 {
		t.Errorf("empty message %+v", m)
	}
	origin := one[*Origin](s, "Origin", nil)
	if origin.Name != "upstream" || origin.CommitLSN != 0xABCDEF0 {
		t.Errorf("origin %+v", origin)
	}
}

// checkTransactions checks Begin/Commit pairing and what sits outside
// transactions.
func checkTransactions(t *testing.T, s *session) {
	var open *Begin
	for i, m := range s.msgs {
		switch m := m.(type) {
		case *Begin:
			if open != nil {
				t.Fatalf("message %d: Begin inside the transaction of xid %d", i, open.Xid)
			}
			if m.CommitTime.Time().Year() < 2024 {
				t.Errorf("Begin commit time %s", m.CommitTime)
			}
			open = m
		case *Commit:
			if open == nil {
				t.Fatalf("message %d: Commit without Begin", i)
			}
			if m.CommitLSN != open.FinalLSN || m.CommitTime != open.CommitTime || m.EndLSN <= m.CommitLSN {
				t.Errorf("Commit %+v does not match Begin %+v", m, open)
			}
			open = nil
		case *Origin:
			if _, ok := s.msgs[i-1].(*Begin); !ok {
				t.Errorf("Origin follows %T, not Begin", s.msgs[i-1])
			}
		case *LogicalMessage:
			if open == nil && m.Xid == 0 && m.Transactional {
				t.Errorf("transactional message outside a transaction: %+v", m)
			}
		}
	}
}

func checkStreams(t *testing.T, s *session) {
	starts := find[*StreamStart](s, nil)
	top := starts[0].Xid
	if !starts[0].FirstSegment || starts[1].Xid != top || starts[1].FirstSegment {
		t.Fatalf("stream starts %+v %+v", starts[0], starts[1])
	}
	aborts := find[*StreamAbort](s, nil)
	if len(aborts) != 2 {
		t.Fatalf("%d StreamAborts, want 2", len(aborts))
	}
	sub := aborts[0]
	if sub.Xid != top || sub.SubXid == top {
		t.Errorf("subtransaction abort %+v, want Xid %d and another SubXid", sub, top)
	}
	if whole := aborts[1]; whole.Xid != whole.SubXid || whole.Xid == top {
		t.Errorf("whole-transaction abort %+v", whole)
	}
	commit := one[*StreamCommit](s, "StreamCommit", nil)
	if commit.Xid != top || commit.EndLSN <= commit.CommitLSN {
		t.Errorf("StreamCommit %+v", commit)
	}

	// Collect the changes streamed for the committed transaction, by the
	// xid of the stream block they arrived in.
	var block XID
	var changes []Message
	for _, m := range s.msgs {
		switch m := m.(type) {
		case *StreamStart:
			block = m.Xid
		case *StreamStop:
			block = 0
		default:
			if block == top {
				changes = append(changes, m)
			}
		}
	}
	xidOf := func(m Message) XID {
		return XID(reflect.ValueOf(m).Elem().FieldByName("Xid").Uint())
	}
	// Changes carry the xid of the subtransaction that made them: the rows
	// of the rolled-back savepoint ('y' values) exactly the aborted SubXid,
	// the rest the top-level xid or the subtransaction that followed the
	// ROLLBACK TO (the savepoint stays open, so later work gets a new one).
	big := s.rel("big").RelationID
	xids := map[XID]bool{}
	var rolledBack int
	counts := map[MessageType]int{}
	for _, m := range changes {
		x := xidOf(m)
		if x == 0 {
			t.Errorf("streamed %T without an xid", m)
		}
		xids[x] = true
		counts[m.MessageType()]++
		ins, ok := m.(*Insert)
		if ok && ins.RelationID == big && strings.HasPrefix(s.value(ins.New[1]), "yyy") {
			rolledBack++
			if x != sub.SubXid {
				t.Errorf("rolled-back row with xid %d, want %d", x, sub.SubXid)
			}
		} else if x == sub.SubXid {
			t.Errorf("%T of a committed subtransaction carries the aborted xid %d", m, x)
		}
	}
	if rolledBack == 0 || !xids[top] || len(xids) != 3 {
		t.Errorf("rolled-back rows %d, xids %v: want rows, the top-level xid %d and two subtransactions", rolledBack, xids, top)
	}
	// Every kind of message that carries an xid was streamed.
	for _, mt := range []MessageType{MsgRelation, MsgType, MsgInsert, MsgUpdate, MsgDelete, MsgLogicalMessage, MsgTruncate} {
		if counts[mt] == 0 {
			t.Errorf("no streamed %s message", mt)
		}
	}
	streamedRel := one(s, "streamed Relation items", func(r *Relation) bool { return r.Name == "items" && r.Xid != 0 })
	if shapeFingerprint(streamedRel) != shapeFingerprint(s.rel("items")) {
		t.Errorf("streamed Relation %+v differs from the first one", streamedRel)
	}
	if m := one(s, "streamed Message", func(m *LogicalMessage) bool { return m.Xid != 0 }); m.Prefix != "trellara.stream" || !m.Transactional {
		t.Errorf("streamed Message %+v", m)
	}
	tr := one(s, "streamed Truncate", func(m *Truncate) bool { return m.Xid != 0 })
	if !reflect.DeepEqual(tr.RelationIDs, []OID{s.rel("nothing_t").RelationID}) {
		t.Errorf("streamed Truncate %+v", tr)
	}
	full := one(s, "streamed Update", func(m *Update) bool { return m.Xid != 0 && m.OldKind == TupleOld })
	if s.value(full.New[1]) != "streamed" {
		t.Errorf("streamed REPLICA IDENTITY FULL update %+v", full)
	}
}

// checkNoStreaming checks the protocol version 1 session: the same workload
// arrives as plain transactions, without the rolled-back rows.
func checkNoStreaming(t *testing.T, s *session) {
	for _, m := range s.msgs {
		switch m.MessageType() {
		case MsgStreamStart, MsgStreamStop, MsgStreamCommit, MsgStreamAbort:
			t.Fatalf("stream message %T in a protocol version 1 session", m)
		}
		if v := reflect.ValueOf(m).Elem().FieldByName("Xid"); v.IsValid() && v.Uint() != 0 {
			if _, ok := m.(*Begin); !ok {
				t.Errorf("%T carries xid %d outside streaming", m, v.Uint())
			}
		}
	}
	for _, ins := range find[*Insert](s, nil) {
		if len(ins.New) == 2 && strings.HasPrefix(s.value(ins.New[1]), "yyy") {
			t.Error("a rolled-back row was sent without streaming")
		}
	}
}

// shapeFingerprint hashes a Relation message with the envelope's canonical
// relation fingerprint.
func shapeFingerprint(r *Relation) uint64 {
	rel := &pb.Relation{Schema: r.Namespace, Name: r.Name, ReplicaIdentity: uint32(r.ReplicaIdentity)}
	for _, c := range r.Columns {
		rel.Columns = append(rel.Columns, &pb.RelationColumn{Name: c.Name, TypeOid: uint32(c.TypeOID), TypeModifier: c.TypeModifier, Key: c.Key})
	}
	return envelope.RelationFingerprint(rel)
}
