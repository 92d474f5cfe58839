package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The messages in these tests are assembled byte by byte from the layouts in
// doc.go, independently of encode.go, so that the decoder and the encoder
// are each checked against the specification and not only against each
// other.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func b(bs ...byte) []byte        { return bs }
func be16(v uint16) []byte       { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte       { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte       { return binary.BigEndian.AppendUint64(nil, v) }
func cstr(s string) []byte       { return append([]byte(s), 0) }
func text(s string) []byte       { return cat(b('t'), be32(uint32(len(s))), []byte(s)) }

// testLSN is the WAL position every test message is decoded at.
const testLSN LSN = 0x16B3748

const (
	testXid  = 0x2fb
	testSub  = 0x2fc
	testTime = 757_479_845_000_000 // 2024-01-02 03:04:05 UTC
)

type decodeCase struct {
	name     string
	data     []byte
	inStream bool
	want     Message
}

// decodeCases covers every message type and every variant the protocol
// allows: with and without the streaming xid, each tuple and column kind,
// each flag.
var decodeCases = []decodeCase{
	{"begin", cat(b('B'), be64(0x16B3748), be64(testTime), be32(750)), false,
		&Begin{FinalLSN: 0x16B3748, CommitTime: testTime, Xid: 750}},
	{"commit", cat(b('C', 0), be64(0x16B3748), be64(0x16B3778), be64(testTime)), false,
		&Commit{CommitLSN: 0x16B3748, EndLSN: 0x16B3778, CommitTime: testTime}},
	{"origin", cat(b('O'), be64(0xABCDEF0), cstr("upstream")), false,
		&Origin{CommitLSN: 0xABCDEF0, Name: "upstream"}},
	{"origin in stream", cat(b('O'), be64(0), cstr("")), true,
		&Origin{}},
	{"relation", cat(b('R'), be32(16394), cstr("public"), cstr("items"), b('d'), be16(2),
		b(1), cstr("id"), be32(23), be32(0xFFFFFFFF),
		b(0), cstr("name"), be32(1043), be32(36)), false,
		&Relation{RelationID: 16394, Namespace: "public", Name: "items", ReplicaIdentity: ReplicaIdentityDefault,
			Columns: []RelationColumn{
				{Key: true, Name: "id", TypeOID: 23, TypeModifier: -1},
				{Name: "name", TypeOID: 1043, TypeModifier: 36},
			}}},
	{"relation in stream, pg_catalog, no columns", cat(b('R'), be32(testXid), be32(16400), cstr(""), cstr("empty"), b('n'), be16(0)), true,
		&Relation{Xid: testXid, RelationID: 16400, Name: "empty", ReplicaIdentity: ReplicaIdentityNothing, Columns: []RelationColumn{}}},
	{"relation full", cat(b('R'), be32(1), cstr("s"), cstr("f"), b('f'), be16(1), b(1), cstr(""), be32(25), be32(0xFFFFFFFF)), false,
		&Relation{RelationID: 1, Namespace: "s", Name: "f", ReplicaIdentity: ReplicaIdentityFull,
			Columns: []RelationColumn{{Key: true, TypeOID: 25, TypeModifier: -1}}}},
	{"relation index", cat(b('R'), be32(2), cstr("s"), cstr("i"), b('i'), be16(0)), false,
		&Relation{RelationID: 2, Namespace: "s", Name: "i", ReplicaIdentity: ReplicaIdentityIndex, Columns: []RelationColumn{}}},
	{"type", cat(b('Y'), be32(16385), cstr("public"), cstr("mood")), false,
		&Type{TypeOID: 16385, Namespace: "public", Name: "mood"}},
	{"type in stream", cat(b('Y'), be32(testXid), be32(16392), cstr(""), cstr("int4")), true,
		&Type{Xid: testXid, TypeOID: 16392, Name: "int4"}},
	{"insert every column kind", cat(b('I'), be32(16394), b('N'), be16(5),
		b('n'), b('u'), text("abc"), b('b'), be32(2), b(0, 1), text("")), false,
		&Insert{RelationID: 16394, New: []Column{
			{Kind: ColumnNull}, {Kind: ColumnUnchangedToast},
			{Kind: ColumnText, Data: []byte("abc")}, {Kind: ColumnBinary, Data: []byte{0, 1}},
			{Kind: ColumnText, Data: []byte{}},
		}}},
	{"insert in stream", cat(b('I'), be32(testSub), be32(16394), b('N'), be16(1), text("1")), true,
		&Insert{Xid: testSub, RelationID: 16394, New: []Column{{Kind: ColumnText, Data: []byte("1")}}}},
	{"insert zero columns", cat(b('I'), be32(7), b('N'), be16(0)), false,
		&Insert{RelationID: 7, New: []Column{}}},
	{"update new only", cat(b('U'), be32(16394), b('N'), be16(2), text("1"), b('u')), false,
		&Update{RelationID: 16394, New: []Column{{Kind: ColumnText, Data: []byte("1")}, {Kind: ColumnUnchangedToast}}}},
	{"update old key", cat(b('U'), be32(16394), b('K'), be16(2), text("2"), b('n'), b('N'), be16(2), text("20"), text("x")), false,
		&Update{RelationID: 16394, OldKind: TupleKey,
			Old: []Column{{Kind: ColumnText, Data: []byte("2")}, {Kind: ColumnNull}},
			New: []Column{{Kind: ColumnText, Data: []byte("20")}, {Kind: ColumnText, Data: []byte("x")}}}},
	{"update old tuple in stream", cat(b('U'), be32(testXid), be32(16402), b('O'), be16(1), text("a"), b('N'), be16(1), text("b")), true,
		&Update{Xid: testXid, RelationID: 16402, OldKind: TupleOld,
			Old: []Column{{Kind: ColumnText, Data: []byte("a")}},
			New: []Column{{Kind: ColumnText, Data: []byte("b")}}}},
	{"delete old key", cat(b('D'), be32(16394), b('K'), be16(1), text("20")), false,
		&Delete{RelationID: 16394, OldKind: TupleKey, Old: []Column{{Kind: ColumnText, Data: []byte("20")}}}},
	{"delete old tuple in stream", cat(b('D'), be32(testXid), be32(16402), b('O'), be16(2), text("2"), b('n')), true,
		&Delete{Xid: testXid, RelationID: 16402, OldKind: TupleOld, Old: []Column{{Kind: ColumnText, Data: []byte("2")}, {Kind: ColumnNull}}}},
	{"truncate cascade restart identity", cat(b('T'), be32(2), b(3), be32(16410), be32(16416)), false,
		&Truncate{Cascade: true, RestartIdentity: true, RelationIDs: []OID{16410, 16416}}},
	{"truncate restart identity in stream", cat(b('T'), be32(testXid), be32(1), b(2), be32(16408)), true,
		&Truncate{Xid: testXid, RestartIdentity: true, RelationIDs: []OID{16408}}},
	{"truncate no relations", cat(b('T'), be32(0), b(1)), false,
		&Truncate{Cascade: true, RelationIDs: []OID{}}},
	{"message transactional", cat(b('M', 1), be64(0x1566F00), cstr("trellara.tx"), be32(5), []byte("hello")), false,
		&LogicalMessage{Transactional: true, LSN: 0x1566F00, Prefix: "trellara.tx", Content: []byte("hello")}},
	{"message non-transactional empty", cat(b('M', 0), be64(0x1566E00), cstr(""), be32(0)), false,
		&LogicalMessage{LSN: 0x1566E00, Content: []byte{}}},
	{"message in stream", cat(b('M'), be32(testXid), b(1), be64(0x1600000), cstr("p"), be32(1), b(0)), true,
		&LogicalMessage{Xid: testXid, Transactional: true, LSN: 0x1600000, Prefix: "p", Content: []byte{0}}},
	{"stream start first", cat(b('S'), be32(testXid), b(1)), false,
		&StreamStart{Xid: testXid, FirstSegment: true}},
	{"stream start later", cat(b('S'), be32(testXid), b(0)), false,
		&StreamStart{Xid: testXid}},
	{"stream stop", b('E'), true, &StreamStop{}},
	{"stream commit", cat(b('c'), be32(testXid), b(0), be64(0x16B3748), be64(0x16B3778), be64(testTime)), false,
		&StreamCommit{Xid: testXid, CommitLSN: 0x16B3748, EndLSN: 0x16B3778, CommitTime: testTime}},
	{"stream abort subtransaction", cat(b('A'), be32(testXid), be32(testSub)), false,
		&StreamAbort{Xid: testXid, SubXid: testSub}},
	{"stream abort whole transaction", cat(b('A'), be32(testXid), be32(testXid)), false,
		&StreamAbort{Xid: testXid, SubXid: testXid}},
}

func TestDecode(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.data, testLSN, tc.inStream)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decode:\n got %#v\nwant %#v", got, tc.want)
			}
			if got.MessageType() != MessageType(tc.data[0]) {
				t.Errorf("MessageType() = %v, want %q", got.MessageType(), tc.data[0])
			}
		})
	}
}

// TestDecodeAliases pins the documented zero-copy behaviour and that the
// aliased slices cannot be appended into the following bytes.
func TestDecodeAliases(t *testing.T) {
	data := cat(b('I'), be32(1), b('N'), be16(2), text("ab"), text("cd"))
	m, err := Decode(data, testLSN, false)
	if err != nil {
		t.Fatal(err)
	}
	first := m.(*Insert).New[0].Data
	if &first[0] != &data[13] {
		t.Fatal("column data does not alias the input")
	}
	if cap(first) != len(first) {
		t.Fatalf("cap %d != len %d: appending would overwrite the next column", cap(first), len(first))
	}
}

// errorCases are malformed messages with the reason and offset the decoder
// must report.
var errorCases = []struct {
	name     string
	data     []byte
	inStream bool
	offset   int
	reason   string
}{
	{"empty", nil, false, 0, "empty message"},
	{"unknown type", b('z', 1, 2), false, 0, "unknown message type 'z' (0x7a)"},
	{"begin truncated", cat(b('B'), be32(1)), false, 1, "truncated: final LSN needs 8 bytes, 4 remain"},
	{"begin final LSN 0", cat(b('B'), be64(0), be64(0), be32(1)), false, 1, "final LSN is 0/0"},
	{"begin xid 0", cat(b('B'), be64(1), be64(0), be32(0)), false, 17, "xid is 0 (InvalidTransactionId)"},
	{"commit flags", cat(b('C', 1), be64(1), be64(2), be64(3)), false, 1, "commit flags 0x01 has unknown bits 0x01"},
	{"origin name without NUL", cat(b('O'), be64(1), []byte("up")), false, 9, "truncated: origin name has no terminating NUL in the 2 remaining bytes"},
	{"relation unknown replica identity", cat(b('R'), be32(1), cstr("s"), cstr("t"), b('x'), be16(0)), false, 9, "unknown replica identity 'x'"},
	{"relation column count exceeds bytes", cat(b('R'), be32(1), cstr("s"), cstr("t"), b('d'), be16(5000), b(1), cstr("id"), be32(23), be32(0)), false, 10,
		"column count 5000 exceeds remaining bytes (12, at least 10 per column)"},
	{"relation column flags", cat(b('R'), be32(1), cstr(""), cstr("t"), b('d'), be16(1), b(2), cstr("id"), be32(23), be32(0)), false, 11,
		"column flags 0x02 has unknown bits 0x02"},
	{"insert wrong tuple kind", cat(b('I'), be32(1), b('K'), be16(0)), false, 5, `tuple kind 'K', want one of "N"`},
	{"insert column count exceeds bytes", cat(b('I'), be32(1), b('N'), be16(5), b('n', 'n', 'n')), false, 6,
		"new tuple column count 5 exceeds remaining bytes (3)"},
	{"insert unknown column kind", cat(b('I'), be32(1), b('N'), be16(2), b('n', 'x')), false, 9, "new tuple column 1 has unknown kind 'x'"},
	{"insert negative column length", cat(b('I'), be32(1), b('N'), be16(1), b('t'), be32(0xFFFFFFFF)), false, 9, "new tuple column 0 length -1 is negative"},
	{"insert column length exceeds bytes", cat(b('I'), be32(1), b('N'), be16(1), b('b'), be32(9), []byte("abc")), false, 9,
		"new tuple column 0 length 9 exceeds remaining bytes (3)"},
	{"update second old tuple", cat(b('U'), be32(1), b('K'), be16(0), b('K'), be16(0)), false, 8, `tuple kind 'K', want one of "N"`},
	{"update old tuple truncated", cat(b('U'), be32(1), b('O'), be16(1), b('t'), be32(4), []byte("ab")), false, 9,
		"old tuple column 0 length 4 exceeds remaining bytes (2)"},
	{"delete new tuple", cat(b('D'), be32(1), b('N'), be16(0)), false, 5, `tuple kind 'N', want one of "KO"`},
	{"truncate count exceeds bytes", cat(b('T'), be32(0xFFFFFFFF), b(0), be32(1)), false, 1,
		"relation count 4294967295 exceeds remaining bytes (4, 4 per relation)"},
	{"truncate options", cat(b('T'), be32(0), b(4)), false, 5, "truncate options 0x04 has unknown bits 0x04"},
	{"message flags", cat(b('M', 2), be64(1), cstr("p"), be32(0)), false, 1, "message flags 0x02 has unknown bits 0x02"},
	{"message negative length", cat(b('M', 0), be64(1), cstr("p"), be32(0x80000000)), false, 12, "content length -2147483648 is negative"},
	{"message length exceeds bytes", cat(b('M', 0), be64(1), cstr("p"), be32(3), b(1)), false, 12, "content length 3 exceeds remaining bytes (1)"},
	{"stream start flag", cat(b('S'), be32(1), b(2)), false, 5, "first segment flag 0x02 has unknown bits 0x02"},
	{"stream start xid 0", cat(b('S'), be32(0), b(1)), false, 1, "xid is 0 (InvalidTransactionId)"},
	{"stream commit flags", cat(b('c'), be32(1), b(1), be64(1), be64(2), be64(3)), false, 5, "commit flags 0x01 has unknown bits 0x01"},
	{"stream abort protocol 4", cat(b('A'), be32(1), be32(1), be64(1), be64(2)), false, 9,
		"16 trailing bytes after the message (abort LSN and time: protocol version 4 parallel apply, which is not supported)"},
	{"stream abort subxid 0", cat(b('A'), be32(1), be32(0)), false, 5, "subtransaction xid is 0 (InvalidTransactionId)"},
	{"stream stop trailing", b('E', 0), false, 1, "1 trailing bytes after the message"},
	{"streamed insert xid 0", cat(b('I'), be32(0), be32(1), b('N'), be16(0)), true, 1, "xid is 0 (InvalidTransactionId)"},
	{"streamed insert read outside stream", cat(b('I'), be32(testXid), be32(1), b('N'), be16(0)), false, 5, `tuple kind '\x00', want one of "N"`},
	{"streamed type read outside stream", cat(b('Y'), be32(testXid), be32(1), cstr("s"), cstr("t")), false, 7,
		"6 trailing bytes after the message (an xid inside a stream block decoded as outside one?)"},
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.data, testLSN, tc.inStream)
			if err == nil {
				t.Fatalf("Decode succeeded with %#v", m)
			}
			if m != nil {
				t.Errorf("Decode returned a message with its error: %#v", m)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is %T, not *DecodeError", err, err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Error("errors.Is(err, ErrMalformed) is false")
			}
			if de.Reason != tc.reason || de.Offset != tc.offset {
				t.Errorf("got byte %d: %s\nwant byte %d: %s", de.Offset, de.Reason, tc.offset, tc.reason)
			}
			if de.LSN != testLSN {
				t.Errorf("LSN %s, want %s", de.LSN, testLSN)
			}
			if len(tc.data) > 0 && de.Type != tc.data[0] {
				t.Errorf("Type %q, want %q", de.Type, tc.data[0])
			}
		})
	}
}

func TestDecodeErrorString(t *testing.T) {
	data := cat(b('I'), be32(testXid), be32(16394), b('N'), be16(5), b('n', 'n', 'n'))
	_, err := Decode(data, testLSN, true)
	const want = "pgoutput: malformed Insert message at LSN 0/16B3748, byte 10: new tuple column count 5 exceeds remaining bytes (3)"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	_, err = Decode([]byte{0xff}, testLSN, false)
	const wantUnknown = "pgoutput: malformed message at LSN 0/16B3748, byte 0: unknown message type 'ÿ' (0xff)"
	if err == nil || err.Error() != wantUnknown {
		t.Fatalf("got  %v\nwant %s", err, wantUnknown)
	}
}

// TestDecodeTruncated cuts every valid hand-built message at every byte
// offset: each prefix must fail cleanly, as must the message with one byte
// appended. Captured messages get the same treatment in capture_test.go.
func TestDecodeTruncated(t *testing.T) {
	for _, tc := range decodeCases {
		checkTruncations(t, tc.name, tc.data, tc.inStream)
	}
}

func checkTruncations(t *testing.T, name string, data []byte, inStream bool) {
	t.Helper()
	for n := 0; n < len(data); n++ {
		// A fresh copy with no spare capacity, so the race detector and
		// bounds checks catch any read past the prefix.
		prefix := append([]byte(nil), data[:n]...)
		m, err := Decode(prefix, testLSN, inStream)
		var de *DecodeError
		if !errors.As(err, &de) || m != nil {
			t.Fatalf("%s cut to %d of %d bytes: got %#v, %v; want nil, *DecodeError", name, n, len(data), m, err)
		}
		if de.Offset < 0 || de.Offset > n {
			t.Fatalf("%s cut to %d bytes: error offset %d outside the message", name, n, de.Offset)
		}
	}
	long := append(append([]byte(nil), data...), 0)
	if _, err := Decode(long, testLSN, inStream); err == nil || !strings.Contains(err.Error(), "trailing") {
		t.Fatalf("%s with a trailing byte: got %v, want a trailing-bytes error", name, err)
	}
}

func TestDecoderStreamState(t *testing.T) {
	start := cat(b('S'), be32(testXid), b(1))
	stop := b('E')
	insert := cat(b('I'), be32(testXid), be32(1), b('N'), be16(0))
	begin := cat(b('B'), be64(1), be64(0), be32(9))

	var d Decoder
	steps := []struct {
		data     []byte
		wantErr  string
		inStream bool
	}{
		{stop, "out of sequence: StreamStop without an open stream block", false},
		{start, "", true},
		{start, "out of sequence: StreamStart of xid 763 while the stream block of xid 763 is open", true},
		{begin, "out of sequence: Begin inside the open stream block of xid 763", true},
		{cat(b('A'), be32(testXid), be32(testXid)), "out of sequence: StreamAbort inside the open stream block of xid 763", true},
		{insert, "", true},
		{b('I'), "truncated: xid needs 4 bytes, 0 remain", true},
		{stop, "", false},
		{insert, "tuple kind '\\x00'", false}, // the xid is not expected outside a block
		{begin, "", false},
	}
	for i, s := range steps {
		m, err := d.Decode(s.data, testLSN)
		switch {
		case s.wantErr == "" && err != nil:
			t.Fatalf("step %d: %v", i, err)
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Fatalf("step %d: got %v, %v; want error containing %q", i, m, err, s.wantErr)
		case s.wantErr != "" && !errors.Is(err, ErrMalformed):
			t.Fatalf("step %d: %v does not match ErrMalformed", i, err)
		}
		if d.InStream() != s.inStream {
			t.Fatalf("step %d: InStream() = %v, want %v", i, d.InStream(), s.inStream)
		}
	}
}

func TestTimestamp(t *testing.T) {
	ts := Timestamp(testTime)
	if got := ts.Time().Format("2006-01-02 15:04:05Z07:00"); got != "2024-01-02 03:04:05Z" {
		t.Fatalf("Time() = %s", got)
	}
	if TimestampOf(ts.Time()) != ts {
		t.Fatal("TimestampOf(Time()) does not round-trip")
	}
	if Timestamp(0).Time().Year() != 2000 {
		t.Fatal("the epoch is not 2000-01-01")
	}
	// Saturates rather than overflowing.
	if Timestamp(1<<63 - 1).Time().Before(ts.Time()) {
		t.Fatal("the largest timestamp wrapped around")
	}
}

// reuseSession is a session of decodeCases in which every reused struct
// and tuple slice is decoded into again with fewer fields set: an Update
// without old values after one with, a column turning from text to NULL or
// unchanged TOAST, a later stream segment after a first one.
var reuseSession = []string{
	"begin", "update old key", "update new only", "insert every column kind", "insert zero columns",
	"delete old key", "commit",
	"stream start first", "insert in stream", "update old tuple in stream", "delete old tuple in stream", "stream stop",
	"stream start later", "stream stop", "stream commit", "stream abort subtransaction", "stream abort whole transaction",
}

func decodeCaseNamed(t testing.TB, name string) decodeCase {
	t.Helper()
	for _, tc := range decodeCases {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no decode case %q", name)
	return decodeCase{}
}

// TestDecoderReuse decodes a session twice with one Decoder: every message
// must equal what the package-level Decode gives (nothing of an earlier
// message of its type survives in the reused struct), the second pass must
// return the first pass's structs (the reuse is real), and the values of a
// message, which alias its own bytes, must not change when the next one is
// decoded.
func TestDecoderReuse(t *testing.T) {
	var d Decoder
	first := map[string]Message{}
	var prevName string
	var prevVals, prevCopies [][]byte
	for pass := 0; pass < 2; pass++ {
		for _, name := range reuseSession {
			tc := decodeCaseNamed(t, name)
			if d.InStream() != tc.inStream {
				t.Fatalf("%s: decoder in stream %v, the case %v", name, d.InStream(), tc.inStream)
			}
			data := append([]byte(nil), tc.data...)
			m, err := d.Decode(data, testLSN)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Fatalf("pass %d, %s:\n got %#v\nwant %#v", pass, name, m, tc.want)
			}
			for i, v := range prevVals {
				if !bytes.Equal(v, prevCopies[i]) {
					t.Fatalf("decoding %s changed value %d of %s from %q to %q", name, i, prevName, prevCopies[i], v)
				}
			}
			prevName, prevVals, prevCopies = name, nil, nil
			for _, c := range tupleColumns(m) {
				prevVals = append(prevVals, c.Data)
				prevCopies = append(prevCopies, bytes.Clone(c.Data))
			}
			if pass == 0 {
				first[name] = m
			} else if reused := first[name]; m != reused && m.MessageType() != MsgStreamStop {
				t.Errorf("%s: the second pass returned a new %T, not the reused one", name, m)
			}
		}
	}
}

// tupleColumns is every column of m's tuples.
func tupleColumns(m Message) []Column {
	switch m := m.(type) {
	case *Insert:
		return m.New
	case *Update:
		return append(append([]Column(nil), m.Old...), m.New...)
	case *Delete:
		return m.Old
	}
	return nil
}

// TestDecoderAllocations pins the point of the reuse: once a Decoder has
// seen each kind of row change and boundary, decoding them allocates
// nothing.
func TestDecoderAllocations(t *testing.T) {
	var msgs [][]byte
	for _, name := range reuseSession {
		msgs = append(msgs, decodeCaseNamed(t, name).data)
	}
	var d Decoder
	allocs := testing.AllocsPerRun(20, func() {
		for _, data := range msgs {
			if _, err := d.Decode(data, testLSN); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("a session of %d row changes and boundaries allocates %.1f times per pass", len(msgs), allocs)
	}
}
