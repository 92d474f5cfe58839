package pgoutput

import "fmt"

// Decode decodes one pgoutput message into a newly allocated Message.
//
// walStart is the WAL start of the XLogData that carried the message; it is
// used only to name the position in errors. inStream must be true between a
// StreamStart and its StreamStop, where the changes carry an xid (see the
// package documentation); Decoder tracks this for a whole session.
//
// Decode does not copy: Column.Data and LogicalMessage.Content alias data.
// pgconn reuses its receive buffer, so a caller that keeps the message past
// the next receive must decode from (or copy to) memory it owns.
//
// Any input that is not exactly one valid message returns a *DecodeError
// (matching ErrMalformed) and a nil Message; Decode never panics.
func Decode(data []byte, walStart LSN, inStream bool) (Message, error) {
	return decode(data, walStart, inStream, nil)
}

// reused holds a Decoder's message structs and tuple slices, which
// Decoder.Decode fills in place of allocating new ones: the row changes and
// transaction boundaries that make up almost every message of a session.
// Relation, Type, Origin, Truncate and LogicalMessage are rare and are
// still allocated per message.
type reused struct {
	begin        Begin
	commit       Commit
	insert       Insert
	update       Update
	delete       Delete
	streamStart  StreamStart
	streamStop   StreamStop
	streamCommit StreamCommit
	streamAbort  StreamAbort
	// tuples are the backing arrays of the old and the new tuple; an
	// Update holds one of each at the same time.
	tuples [2][]Column
}

// dst is the struct decode fills: into's own (field picks it), or a new
// one when into is nil.
func dst[T any](into *reused, field func(*reused) *T) *T {
	if into == nil {
		return new(T)
	}
	return field(into)
}

// decode decodes one message, into into's structs and tuple slices if into
// is not nil, otherwise into new ones.
func decode(data []byte, walStart LSN, inStream bool, into *reused) (Message, error) {
	if len(data) == 0 {
		return nil, &DecodeError{LSN: walStart, Reason: "empty message"}
	}
	var tuples *[2][]Column // old, new
	if into != nil {
		tuples = &into.tuples
	} else {
		tuples = new([2][]Column)
	}
	r := reader{buf: data, off: 1}
	t := MessageType(data[0])
	var m Message
	switch t {
	case MsgBegin:
		m = decodeBegin(&r, dst(into, func(u *reused) *Begin { return &u.begin }))
	case MsgCommit:
		m = decodeCommit(&r, dst(into, func(u *reused) *Commit { return &u.commit }))
	case MsgOrigin:
		m = decodeOrigin(&r)
	case MsgRelation:
		m = decodeRelation(&r, inStream)
	case MsgType:
		m = decodeType(&r, inStream)
	case MsgInsert:
		m = decodeInsert(&r, inStream, dst(into, func(u *reused) *Insert { return &u.insert }), tuples)
	case MsgUpdate:
		m = decodeUpdate(&r, inStream, dst(into, func(u *reused) *Update { return &u.update }), tuples)
	case MsgDelete:
		m = decodeDelete(&r, inStream, dst(into, func(u *reused) *Delete { return &u.delete }), tuples)
	case MsgTruncate:
		m = decodeTruncate(&r, inStream)
	case MsgLogicalMessage:
		m = decodeLogicalMessage(&r, inStream)
	case MsgStreamStart:
		m = decodeStreamStart(&r, dst(into, func(u *reused) *StreamStart { return &u.streamStart }))
	case MsgStreamStop:
		m = dst(into, func(u *reused) *StreamStop { return &u.streamStop })
	case MsgStreamCommit:
		m = decodeStreamCommit(&r, dst(into, func(u *reused) *StreamCommit { return &u.streamCommit }))
	case MsgStreamAbort:
		m = decodeStreamAbort(&r, dst(into, func(u *reused) *StreamAbort { return &u.streamAbort }))
	default:
		return nil, &DecodeError{LSN: walStart, Type: byte(t), Reason: "unknown message type " + t.String()}
	}
	if !r.failed() && r.remaining() != 0 {
		r.fail("%d trailing bytes after the message%s", r.remaining(), trailingHint(t, r.remaining(), inStream))
	}
	if r.failed() {
		return nil, &DecodeError{LSN: walStart, Type: byte(t), Offset: r.errOff, Reason: r.reason}
	}
	return m, nil
}

// trailingHint explains the two ways real servers produce trailing bytes
// that are not corruption, so the error points at the configuration.
func trailingHint(t MessageType, n int, inStream bool) string {
	switch {
	case t == MsgStreamAbort && n == 16:
		return " (abort LSN and time: protocol version 4 parallel apply, which is not supported)"
	case !inStream && n >= 4 && xidInStream(t):
		return " (an xid inside a stream block decoded as outside one?)"
	}
	return ""
}

// xidInStream reports whether messages of type t carry an xid inside a
// stream block.
func xidInStream(t MessageType) bool {
	switch t {
	case MsgRelation, MsgType, MsgInsert, MsgUpdate, MsgDelete, MsgTruncate, MsgLogicalMessage:
		return true
	}
	return false
}

// Decoder decodes the messages of one replication session in order. It
// tracks stream blocks, so it knows where changes carry an xid, and it
// rejects messages that cannot occur where they appear (a Begin inside a
// stream block, a StreamStop outside one): those mean bytes were lost or
// reordered, and decoding on would misread every following change.
//
// Decoder reuses its message structs and tuple slices from one message to
// the next (see Decode), so that decoding a row change allocates nothing.
//
// The zero Decoder is ready to use at the start of a session.
type Decoder struct {
	inStream  bool
	streamXid XID
	reused    reused
}

// InStream reports whether a stream block is open.
func (d *Decoder) InStream() bool { return d.inStream }

// Decode decodes the next message of the session; see the package-level
// Decode for walStart and errors. The stream state changes only when a
// message is returned.
//
// The returned message is valid only until the next call of Decode on d:
// a Begin, Commit, Insert, Update, Delete, StreamStart, StreamStop,
// StreamCommit or StreamAbort is one of d's own structs, and the next
// message of its type overwrites it, its Column slices included. As with
// the package-level Decode, Column.Data and LogicalMessage.Content alias
// data. A caller that keeps anything of a message past the next Decode
// copies it (capture's Assembler copies every value it keeps); one that
// keeps whole messages uses the package-level Decode, which allocates each
// one.
func (d *Decoder) Decode(data []byte, walStart LSN) (Message, error) {
	m, err := decode(data, walStart, d.inStream, &d.reused)
	if err != nil {
		return nil, err
	}
	seqErr := func(format string, args ...any) error {
		return &DecodeError{LSN: walStart, Type: data[0], Reason: "out of sequence: " + fmt.Sprintf(format, args...)}
	}
	switch m := m.(type) {
	case *StreamStart:
		if d.inStream {
			return nil, seqErr("StreamStart of xid %d while the stream block of xid %d is open", m.Xid, d.streamXid)
		}
		d.inStream, d.streamXid = true, m.Xid
	case *StreamStop:
		if !d.inStream {
			return nil, seqErr("StreamStop without an open stream block")
		}
		d.inStream, d.streamXid = false, 0
	case *Begin, *Commit, *StreamCommit, *StreamAbort:
		if d.inStream {
			return nil, seqErr("%s inside the open stream block of xid %d", m.MessageType(), d.streamXid)
		}
	}
	return m, nil
}

// validXid reads an Int32 xid that the protocol requires to be a valid
// transaction id.
func (r *reader) validXid(field string) XID {
	off := r.off
	x := XID(r.u32(field))
	if !r.failed() && x == 0 {
		r.failAt(off, "%s is 0 (InvalidTransactionId)", field)
	}
	return x
}

// streamXid reads the xid that changes carry inside a stream block. PostgreSQL
// writes it only when it is valid, so 0 here means the caller's stream state
// is wrong or the bytes are corrupt.
func (r *reader) streamXid(inStream bool) XID {
	if !inStream {
		return 0
	}
	return r.validXid("xid")
}

// flags reads a flag byte and rejects bits outside allowed: an unknown bit
// means a protocol this decoder does not speak, and guessing its meaning
// could silently change data.
func (r *reader) flags(field string, allowed uint8) uint8 {
	off := r.off
	f := r.u8(field)
	if !r.failed() && f&^allowed != 0 {
		r.failAt(off, "%s 0x%02x has unknown bits 0x%02x", field, f, f&^allowed)
	}
	return f
}

func (r *reader) lsn(field string) LSN { return LSN(r.u64(field)) }

func (r *reader) timestamp(field string) Timestamp { return Timestamp(r.u64(field)) }

func decodeBegin(r *reader, m *Begin) *Begin {
	off := r.off
	*m = Begin{FinalLSN: r.lsn("final LSN")}
	if !r.failed() && m.FinalLSN == 0 {
		r.failAt(off, "final LSN is 0/0")
	}
	m.CommitTime = r.timestamp("commit time")
	m.Xid = r.validXid("xid")
	return m
}

func decodeCommit(r *reader, m *Commit) *Commit {
	r.flags("commit flags", 0)
	*m = Commit{
		CommitLSN:  r.lsn("commit LSN"),
		EndLSN:     r.lsn("end LSN"),
		CommitTime: r.timestamp("commit time"),
	}
	return m
}

func decodeOrigin(r *reader) *Origin {
	return &Origin{CommitLSN: r.lsn("origin commit LSN"), Name: r.cstring("origin name")}
}

// minRelationColumnBytes is the smallest encoding of one Relation column:
// flags, an empty name's NUL, type OID and type modifier.
const minRelationColumnBytes = 1 + 1 + 4 + 4

func decodeRelation(r *reader, inStream bool) *Relation {
	m := &Relation{Xid: r.streamXid(inStream)}
	m.RelationID = OID(r.u32("relation OID"))
	m.Namespace = r.cstring("namespace")
	m.Name = r.cstring("relation name")
	identOff := r.off
	m.ReplicaIdentity = ReplicaIdentity(r.u8("replica identity"))
	if !r.failed() && !m.ReplicaIdentity.valid() {
		r.failAt(identOff, "unknown replica identity %s", m.ReplicaIdentity)
	}
	countOff := r.off
	n := int(r.u16("column count"))
	if r.failed() {
		return m
	}
	if n > r.remaining()/minRelationColumnBytes {
		r.failAt(countOff, "column count %d exceeds remaining bytes (%d, at least %d per column)", n, r.remaining(), minRelationColumnBytes)
		return m
	}
	m.Columns = make([]RelationColumn, n)
	for i := range m.Columns {
		c := &m.Columns[i]
		c.Key = r.flags("column flags", 1) == 1
		c.Name = r.cstring("column name")
		c.TypeOID = OID(r.u32("column type OID"))
		c.TypeModifier = int32(r.u32("column type modifier"))
		if r.failed() {
			break
		}
	}
	return m
}

func decodeType(r *reader, inStream bool) *Type {
	return &Type{
		Xid:       r.streamXid(inStream),
		TypeOID:   OID(r.u32("type OID")),
		Namespace: r.cstring("type namespace"),
		Name:      r.cstring("type name"),
	}
}

// tuple reads TupleData into buf's backing array when it has room,
// otherwise into a new one; *buf is left holding the larger array for the
// next tuple. what names the tuple in errors ("new tuple"); it is formatted
// only on failure, keeping the per-column path allocation-free.
func (r *reader) tuple(what string, buf *[]Column) []Column {
	countOff := r.off
	n := int(r.u16("tuple column count"))
	if r.failed() {
		return nil
	}
	// Every column takes at least its kind byte, so a count larger than
	// the remaining bytes is corrupt; checking first keeps a forged count
	// from allocating 65535 columns out of a 10-byte message.
	if n > r.remaining() {
		r.failAt(countOff, "%s column count %d exceeds remaining bytes (%d)", what, n, r.remaining())
		return nil
	}
	if *buf == nil || cap(*buf) < n {
		*buf = make([]Column, n) // non-nil even when n is 0
	}
	// Every element is assigned below, so nothing of the previous tuple
	// survives in cols.
	cols := (*buf)[:n:n]
	for i := range cols {
		kindOff := r.off
		kind := r.u8("tuple column kind")
		switch kind {
		case ColumnNull, ColumnUnchangedToast:
			cols[i] = Column{Kind: kind}
		case ColumnText, ColumnBinary:
			lenOff := r.off
			l := int32(r.u32("tuple column length"))
			switch {
			case r.failed():
			case l < 0:
				r.failAt(lenOff, "%s column %d length %d is negative", what, i, l)
			case int(l) > r.remaining():
				r.failAt(lenOff, "%s column %d length %d exceeds remaining bytes (%d)", what, i, l, r.remaining())
			default:
				cols[i] = Column{Kind: kind, Data: r.bytes(int(l), "tuple column value")}
			}
		default:
			if !r.failed() {
				r.failAt(kindOff, "%s column %d has unknown kind %q", what, i, rune(kind))
			}
		}
		if r.failed() {
			return nil
		}
	}
	return cols
}

// tupleKind reads the byte announcing a tuple and checks it is one of want.
func (r *reader) tupleKind(want ...TupleKind) TupleKind {
	off := r.off
	k := TupleKind(r.u8("tuple kind"))
	if r.failed() {
		return 0
	}
	for _, w := range want {
		if k == w {
			return k
		}
	}
	r.failAt(off, "tuple kind %q, want one of %q", rune(k), string(tupleKindBytes(want)))
	return 0
}

func tupleKindBytes(ks []TupleKind) []byte {
	b := make([]byte, len(ks))
	for i, k := range ks {
		b[i] = byte(k)
	}
	return b
}

func decodeInsert(r *reader, inStream bool, m *Insert, tuples *[2][]Column) *Insert {
	*m = Insert{Xid: r.streamXid(inStream), RelationID: OID(r.u32("relation OID"))}
	r.tupleKind(TupleNew)
	m.New = r.tuple("new tuple", &tuples[1])
	return m
}

func decodeUpdate(r *reader, inStream bool, m *Update, tuples *[2][]Column) *Update {
	*m = Update{Xid: r.streamXid(inStream), RelationID: OID(r.u32("relation OID"))}
	switch r.tupleKind(TupleKey, TupleOld, TupleNew) {
	case TupleKey:
		m.OldKind, m.Old = TupleKey, r.tuple("old key tuple", &tuples[0])
		r.tupleKind(TupleNew)
	case TupleOld:
		m.OldKind, m.Old = TupleOld, r.tuple("old tuple", &tuples[0])
		r.tupleKind(TupleNew)
	}
	m.New = r.tuple("new tuple", &tuples[1])
	return m
}

func decodeDelete(r *reader, inStream bool, m *Delete, tuples *[2][]Column) *Delete {
	*m = Delete{Xid: r.streamXid(inStream), RelationID: OID(r.u32("relation OID"))}
	m.OldKind = r.tupleKind(TupleKey, TupleOld)
	if m.OldKind == TupleKey {
		m.Old = r.tuple("old key tuple", &tuples[0])
	} else {
		m.Old = r.tuple("old tuple", &tuples[0])
	}
	return m
}

// Truncate option bits.
const (
	truncateCascade         = 1 << 0
	truncateRestartIdentity = 1 << 1
)

func decodeTruncate(r *reader, inStream bool) *Truncate {
	m := &Truncate{Xid: r.streamXid(inStream)}
	countOff := r.off
	n := r.u32("relation count")
	opts := r.flags("truncate options", truncateCascade|truncateRestartIdentity)
	m.Cascade = opts&truncateCascade != 0
	m.RestartIdentity = opts&truncateRestartIdentity != 0
	if r.failed() {
		return m
	}
	if uint64(n) > uint64(r.remaining()/4) {
		r.failAt(countOff, "relation count %d exceeds remaining bytes (%d, 4 per relation)", n, r.remaining())
		return m
	}
	m.RelationIDs = make([]OID, n)
	for i := range m.RelationIDs {
		m.RelationIDs[i] = OID(r.u32("relation OID"))
	}
	return m
}

// messageTransactional is the only flag bit of a Message.
const messageTransactional = 1 << 0

func decodeLogicalMessage(r *reader, inStream bool) *LogicalMessage {
	m := &LogicalMessage{Xid: r.streamXid(inStream)}
	m.Transactional = r.flags("message flags", messageTransactional) == messageTransactional
	m.LSN = r.lsn("message LSN")
	m.Prefix = r.cstring("message prefix")
	lenOff := r.off
	l := int32(r.u32("content length"))
	switch {
	case r.failed():
	case l < 0:
		r.failAt(lenOff, "content length %d is negative", l)
	case int(l) > r.remaining():
		r.failAt(lenOff, "content length %d exceeds remaining bytes (%d)", l, r.remaining())
	default:
		m.Content = r.bytes(int(l), "content")
	}
	return m
}

func decodeStreamStart(r *reader, m *StreamStart) *StreamStart {
	*m = StreamStart{Xid: r.validXid("xid")}
	m.FirstSegment = r.flags("first segment flag", 1) == 1
	return m
}

func decodeStreamCommit(r *reader, m *StreamCommit) *StreamCommit {
	*m = StreamCommit{Xid: r.validXid("xid")}
	r.flags("commit flags", 0)
	m.CommitLSN = r.lsn("commit LSN")
	m.EndLSN = r.lsn("end LSN")
	m.CommitTime = r.timestamp("commit time")
	return m
}

func decodeStreamAbort(r *reader, m *StreamAbort) *StreamAbort {
	*m = StreamAbort{Xid: r.validXid("xid"), SubXid: r.validXid("subtransaction xid")}
	return m
}
