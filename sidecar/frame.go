package sidecar

import (
	"encoding/binary"
	"fmt"

	"github.com/trellara/trellara/relay/pgoutput"
)

// Frame format constants. Part of the wire contract; do not change.
const (
	FrameVersion = 1

	frameBegin    = 'B'
	frameRelation = 'R'
	frameInsert   = 'I'
	frameUpdate   = 'U'
	frameDelete   = 'D'
	frameTruncate = 'T'
	frameMessage  = 'M'
	frameCommit   = 'C'
	frameProgress = 'P'

	oldKey  = 'K'
	oldFull = 'O'
	oldNone = '-'

	colNull      = 'n'
	colUnchanged = 'u'
	colText      = 't'

	colFlagKey       = 0x01
	truncCascade     = 0x01
	truncRestartSeqs = 0x02
)

// postgresEpochUnixMicros is 2000-01-01 UTC in Unix microseconds: frames
// carry Unix times, pgoutput carries PostgreSQL's epoch.
const postgresEpochUnixMicros = 946_684_800_000_000

// Progress is a 'P' frame: every transaction committed before LSN has
// already been delivered, so LSN may be acknowledged once they are durable.
type Progress struct {
	LSN pgoutput.LSN
}

// MessageType lets a Progress travel as a pgoutput.Message; the byte is not
// a pgoutput type and the assembler never sees one.
func (*Progress) MessageType() pgoutput.MessageType { return frameProgress }

// DecodeFrame decodes one complete frame into the pgoutput message it
// corresponds to (*pgoutput.Begin, *Relation, *Insert, *Update, *Delete,
// *Truncate, *LogicalMessage, *Commit) or a *Progress. A delete or update
// without an old tuple has OldKind pgoutput.TupleNone.
//
// at is the LSN named in errors (the open transaction's, where known).
// Column values alias b; copy them before b is reused. DecodeFrame never
// panics; every failure is a *FrameError. It is a frameDecoder used once:
// the sidecar keeps one per connection so that its frames cost no
// allocation.
func DecodeFrame(b []byte, at uint64) (pgoutput.Message, error) {
	var d frameDecoder
	return d.decode(b, at)
}

// frameDecoder decodes frames into messages and column slices it owns and
// reuses: the message decode returns, and its column slices, are valid
// until the next decode, and column values alias the frame. The hot frames
// (begin, row changes, commit, progress) therefore allocate nothing once
// the column slices have grown to the widest row. Relation, truncate and
// message frames are rare and allocate a fresh message: the assembler keeps
// their strings.
type frameDecoder struct {
	begin    pgoutput.Begin
	insert   pgoutput.Insert
	update   pgoutput.Update
	delete   pgoutput.Delete
	commit   pgoutput.Commit
	progress Progress
	oldCols  []pgoutput.Column
	newCols  []pgoutput.Column
}

// decode is DecodeFrame into d's messages (see frameDecoder).
func (d *frameDecoder) decode(b []byte, at uint64) (pgoutput.Message, error) {
	r := frameReader{buf: b}
	version := r.u8("version")
	typ := r.u8("type")
	if r.failed() {
		return nil, r.err(at, 0)
	}
	if version != FrameVersion {
		r.failAt(0, "frame version %d, this sidecar reads version %d", version, FrameVersion)
		return nil, r.err(at, typ)
	}
	var m pgoutput.Message
	switch typ {
	case frameBegin:
		d.begin = pgoutput.Begin{Xid: pgoutput.XID(r.u32("xid")), FinalLSN: pgoutput.LSN(r.u64("final_lsn")),
			CommitTime: r.time("commit_time")}
		m = &d.begin
	case frameRelation:
		m = r.relation()
	case frameInsert:
		d.insert = pgoutput.Insert{RelationID: pgoutput.OID(r.u32("relid")), New: r.tuple("new tuple", &d.newCols)}
		m = &d.insert
	case frameUpdate:
		u := &d.update
		*u = pgoutput.Update{RelationID: pgoutput.OID(r.u32("relid"))}
		u.OldKind = r.oldKind()
		if u.OldKind != pgoutput.TupleNone {
			u.Old = r.tuple("old tuple", &d.oldCols)
		}
		u.New = r.tuple("new tuple", &d.newCols)
		m = u
	case frameDelete:
		del := &d.delete
		*del = pgoutput.Delete{RelationID: pgoutput.OID(r.u32("relid"))}
		del.OldKind = r.oldKind()
		if del.OldKind != pgoutput.TupleNone {
			del.Old = r.tuple("old tuple", &d.oldCols)
		}
		m = del
	case frameTruncate:
		m = r.truncate()
	case frameMessage:
		m = &pgoutput.LogicalMessage{Transactional: true, LSN: pgoutput.LSN(r.u64("lsn")),
			Prefix: string(r.str("prefix")), Content: r.str("content")}
	case frameCommit:
		if f := r.u8("flags"); f != 0 && !r.failed() {
			r.failAt(r.off-1, "commit flags %#x, version 1 defines none", f)
		}
		d.commit = pgoutput.Commit{CommitLSN: pgoutput.LSN(r.u64("commit_lsn")), EndLSN: pgoutput.LSN(r.u64("end_lsn")),
			CommitTime: r.time("commit_time")}
		m = &d.commit
	case frameProgress:
		d.progress = Progress{LSN: pgoutput.LSN(r.u64("lsn"))}
		m = &d.progress
	default:
		r.failAt(1, "unknown frame type %q", rune(typ))
	}
	if !r.failed() && r.remaining() > 0 {
		r.fail("%d trailing bytes", r.remaining())
	}
	if r.failed() {
		return nil, r.err(at, typ)
	}
	if c := &d.commit; typ == frameCommit && c.EndLSN < c.CommitLSN {
		return nil, &FrameError{LSN: uint64(c.CommitLSN), Type: typ, Offset: 11,
			Reason: fmt.Sprintf("end LSN %s precedes commit LSN %s", c.EndLSN, c.CommitLSN)}
	}
	return m, nil
}

func (r *frameReader) relation() *pgoutput.Relation {
	m := &pgoutput.Relation{RelationID: pgoutput.OID(r.u32("relid"))}
	m.Namespace = string(r.str("namespace"))
	m.Name = string(r.str("name"))
	ri := pgoutput.ReplicaIdentity(r.u8("replica identity"))
	switch ri {
	case pgoutput.ReplicaIdentityDefault, pgoutput.ReplicaIdentityNothing, pgoutput.ReplicaIdentityFull, pgoutput.ReplicaIdentityIndex:
	default:
		if !r.failed() {
			r.failAt(r.off-1, "replica identity %q is not d, n, f or i", rune(ri))
		}
	}
	m.ReplicaIdentity = ri
	n := int(r.u16("column count"))
	// Each column takes at least 13 bytes: refuse a count the frame cannot
	// hold before allocating for it.
	if !r.failed() && n*13 > r.remaining() {
		r.fail("%d columns cannot fit in the %d remaining bytes", n, r.remaining())
	}
	if r.failed() {
		return m
	}
	m.Columns = make([]pgoutput.RelationColumn, n)
	for i := range m.Columns {
		flags := r.u8("column flags")
		if flags&^colFlagKey != 0 && !r.failed() {
			r.failAt(r.off-1, "column %d flags %#x: only bit 0 (key) is defined", i, flags)
		}
		m.Columns[i] = pgoutput.RelationColumn{Key: flags&colFlagKey != 0, Name: string(r.str("column name")),
			TypeOID: pgoutput.OID(r.u32("column type")), TypeModifier: int32(r.u32("column typmod"))}
		if r.failed() {
			return m
		}
	}
	return m
}

func (r *frameReader) truncate() *pgoutput.Truncate {
	flags := r.u8("truncate flags")
	if flags&^(truncCascade|truncRestartSeqs) != 0 && !r.failed() {
		r.failAt(r.off-1, "truncate flags %#x: only bits 0 and 1 are defined", flags)
	}
	m := &pgoutput.Truncate{Cascade: flags&truncCascade != 0, RestartIdentity: flags&truncRestartSeqs != 0}
	n := r.u32("relation count")
	if r.failed() {
		return m
	}
	if n == 0 || uint64(n)*4 != uint64(r.remaining()) {
		r.fail("relation count %d does not match the %d remaining bytes", n, r.remaining())
		return m
	}
	m.RelationIDs = make([]pgoutput.OID, n)
	for i := range m.RelationIDs {
		m.RelationIDs[i] = pgoutput.OID(r.u32("relid"))
	}
	return m
}

func (r *frameReader) oldKind() pgoutput.TupleKind {
	k := r.u8("old tuple kind")
	switch k {
	case oldKey:
		return pgoutput.TupleKey
	case oldFull:
		return pgoutput.TupleOld
	case oldNone:
		return pgoutput.TupleNone
	}
	if !r.failed() {
		r.failAt(r.off-1, "old tuple kind %q is not K, O or -", rune(k))
	}
	return pgoutput.TupleNone
}

// tuple reads a tuple into *cols, grown as needed: the result is (*cols)[:n]
// with every element written.
func (r *frameReader) tuple(what string, cols *[]pgoutput.Column) []pgoutput.Column {
	// Field names are composed only for an error: not per tuple or column.
	r.scope = what
	defer func() { r.scope = "" }()
	n := int(r.u16("column count"))
	if !r.failed() && n > r.remaining() {
		r.fail("%s: %d columns cannot fit in the %d remaining bytes", what, n, r.remaining())
	}
	if r.failed() {
		return nil
	}
	if *cols == nil || cap(*cols) < n {
		*cols = make([]pgoutput.Column, n)
	}
	out := (*cols)[:n]
	for i := range out {
		// The common cases, a whole text value or a null, without the
		// per-field checks; anything else (and every failure) takes the
		// general path below.
		b := r.buf[r.off:]
		if len(b) >= 5 && b[0] == colText {
			if l := binary.BigEndian.Uint32(b[1:]); uint64(l) <= uint64(len(b)-5) {
				end := 5 + int(l)
				out[i] = pgoutput.Column{Kind: pgoutput.ColumnText, Data: b[5:end:end]}
				r.off += end
				continue
			}
		} else if len(b) >= 1 && b[0] == colNull {
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnNull}
			r.off++
			continue
		}
		k := r.u8("value kind")
		switch k {
		case colNull:
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnNull}
		case colUnchanged:
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnUnchangedToast}
		case colText:
			out[i] = pgoutput.Column{Kind: pgoutput.ColumnText, Data: r.str("value")}
		default:
			if !r.failed() {
				r.failAt(r.off-1, "%s column %d: value kind %q is not n, u or t", what, i, rune(k))
			}
		}
		if r.failed() {
			return nil
		}
	}
	return out
}

// frameReader is a bounds-checked cursor over one frame: the first failed
// read records where and why, later reads return zero values, and the
// decoder checks once.
type frameReader struct {
	buf    []byte
	off    int
	reason string
	errOff int
	scope  string // prefixes field names in errors ("new tuple")
}

func (r *frameReader) remaining() int { return len(r.buf) - r.off }
func (r *frameReader) failed() bool   { return r.reason != "" }

func (r *frameReader) fail(format string, args ...any) { r.failAt(r.off, format, args...) }

func (r *frameReader) failAt(off int, format string, args ...any) {
	if r.reason == "" {
		r.reason, r.errOff = fmt.Sprintf(format, args...), off
	}
}

func (r *frameReader) err(at uint64, typ byte) error {
	return &FrameError{LSN: at, Type: typ, Offset: r.errOff, Reason: r.reason}
}

// name is field as errors spell it: within the scope, with suffix.
func (r *frameReader) name(field, suffix string) string {
	if r.scope != "" {
		return r.scope + " " + field + suffix
	}
	return field + suffix
}

func (r *frameReader) need(n int, field, suffix string) bool {
	if r.reason != "" {
		return false
	}
	if n > r.remaining() {
		r.fail("truncated: %s needs %d bytes, %d remain", r.name(field, suffix), n, r.remaining())
		return false
	}
	return true
}

func (r *frameReader) u8(field string) uint8 {
	if !r.need(1, field, "") {
		return 0
	}
	r.off++
	return r.buf[r.off-1]
}

func (r *frameReader) u16(field string) uint16 {
	if !r.need(2, field, "") {
		return 0
	}
	r.off += 2
	return binary.BigEndian.Uint16(r.buf[r.off-2:])
}

func (r *frameReader) u32(field string) uint32 { return r.u32s(field, "") }

func (r *frameReader) u32s(field, suffix string) uint32 {
	if !r.need(4, field, suffix) {
		return 0
	}
	r.off += 4
	return binary.BigEndian.Uint32(r.buf[r.off-4:])
}

func (r *frameReader) u64(field string) uint64 {
	if !r.need(8, field, "") {
		return 0
	}
	r.off += 8
	return binary.BigEndian.Uint64(r.buf[r.off-8:])
}

// time reads a Unix-microsecond time as a pgoutput timestamp. Wrapping
// arithmetic: an absurd value stays absurd, it cannot panic.
func (r *frameReader) time(field string) pgoutput.Timestamp {
	return pgoutput.Timestamp(int64(r.u64(field)) - postgresEpochUnixMicros)
}

// str reads a u32-length string without copying; the slice's capacity ends
// at its length so an append by a consumer cannot overwrite what follows.
func (r *frameReader) str(field string) []byte {
	n := r.u32s(field, " length")
	if r.failed() {
		return nil
	}
	if uint64(n) > uint64(r.remaining()) {
		r.fail("truncated: %s is %d bytes, %d remain", r.name(field, ""), n, r.remaining())
		return nil
	}
	s := r.buf[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s
}
