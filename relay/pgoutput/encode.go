package pgoutput

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// The Append* functions append the exact bytes PostgreSQL's pgoutput sends
// for a message, so that tests and the deterministic simulator can build
// pgoutput streams without a server. They are the inverse of Decode: for
// every message m that Decode can return, Decode(Append*(nil, m), lsn,
// inStream) returns a message equal to m, where inStream is m.Xid != 0 for
// the message types that carry an xid in stream blocks.
//
// Like PostgreSQL, the encoders write the xid of Relation, Type, Insert,
// Update, Delete, Truncate and LogicalMessage only when Xid is non-zero: set
// Xid exactly for messages that go inside a StreamStart/StreamStop block.
//
// A message that has no valid encoding (a NUL inside a string, an unknown
// column or tuple kind, more than 65535 columns, a value over 2 GiB) is a bug
// in the caller and panics. To produce malformed input on purpose, encode a
// valid message and then corrupt the bytes.

// Append appends the encoding of m, which must be one of the message types
// of this package, to dst.
func Append(dst []byte, m Message) []byte {
	switch m := m.(type) {
	case *Begin:
		return AppendBegin(dst, m)
	case *Commit:
		return AppendCommit(dst, m)
	case *Origin:
		return AppendOrigin(dst, m)
	case *Relation:
		return AppendRelation(dst, m)
	case *Type:
		return AppendType(dst, m)
	case *Insert:
		return AppendInsert(dst, m)
	case *Update:
		return AppendUpdate(dst, m)
	case *Delete:
		return AppendDelete(dst, m)
	case *Truncate:
		return AppendTruncate(dst, m)
	case *LogicalMessage:
		return AppendLogicalMessage(dst, m)
	case *StreamStart:
		return AppendStreamStart(dst, m)
	case *StreamStop:
		return AppendStreamStop(dst, m)
	case *StreamCommit:
		return AppendStreamCommit(dst, m)
	case *StreamAbort:
		return AppendStreamAbort(dst, m)
	}
	panic(fmt.Sprintf("pgoutput: Append of unsupported message type %T", m))
}

// AppendBegin appends a Begin 'B' message.
func AppendBegin(dst []byte, m *Begin) []byte {
	dst = append(dst, byte(MsgBegin))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.FinalLSN))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.CommitTime))
	return binary.BigEndian.AppendUint32(dst, uint32(m.Xid))
}

// AppendCommit appends a Commit 'C' message (flags 0).
func AppendCommit(dst []byte, m *Commit) []byte {
	dst = append(dst, byte(MsgCommit), 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.CommitLSN))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.EndLSN))
	return binary.BigEndian.AppendUint64(dst, uint64(m.CommitTime))
}

// AppendOrigin appends an Origin 'O' message.
func AppendOrigin(dst []byte, m *Origin) []byte {
	dst = append(dst, byte(MsgOrigin))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.CommitLSN))
	return appendCString(dst, m.Name)
}

// AppendRelation appends a Relation 'R' message; the xid only if m.Xid != 0.
func AppendRelation(dst []byte, m *Relation) []byte {
	if !m.ReplicaIdentity.valid() {
		panic(fmt.Sprintf("pgoutput: AppendRelation: unknown replica identity %s", m.ReplicaIdentity))
	}
	if len(m.Columns) > math.MaxUint16 {
		panic(fmt.Sprintf("pgoutput: AppendRelation: %d columns exceed the protocol's 65535", len(m.Columns)))
	}
	dst = appendHeader(dst, MsgRelation, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.RelationID))
	dst = appendCString(dst, m.Namespace)
	dst = appendCString(dst, m.Name)
	dst = append(dst, byte(m.ReplicaIdentity))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Columns)))
	for _, c := range m.Columns {
		var flags byte
		if c.Key {
			flags = 1
		}
		dst = append(dst, flags)
		dst = appendCString(dst, c.Name)
		dst = binary.BigEndian.AppendUint32(dst, uint32(c.TypeOID))
		dst = binary.BigEndian.AppendUint32(dst, uint32(c.TypeModifier))
	}
	return dst
}

// AppendType appends a Type 'Y' message; the xid only if m.Xid != 0.
func AppendType(dst []byte, m *Type) []byte {
	dst = appendHeader(dst, MsgType, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.TypeOID))
	dst = appendCString(dst, m.Namespace)
	return appendCString(dst, m.Name)
}

// AppendInsert appends an Insert 'I' message; the xid only if m.Xid != 0.
func AppendInsert(dst []byte, m *Insert) []byte {
	dst = appendHeader(dst, MsgInsert, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.RelationID))
	dst = append(dst, byte(TupleNew))
	return appendTuple(dst, m.New)
}

// AppendUpdate appends an Update 'U' message; the xid only if m.Xid != 0.
// The old tuple is written for OldKind TupleKey or TupleOld, and omitted
// (Old ignored) for TupleNone.
func AppendUpdate(dst []byte, m *Update) []byte {
	dst = appendHeader(dst, MsgUpdate, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.RelationID))
	switch m.OldKind {
	case TupleNone:
	case TupleKey, TupleOld:
		dst = append(dst, byte(m.OldKind))
		dst = appendTuple(dst, m.Old)
	default:
		panic(fmt.Sprintf("pgoutput: AppendUpdate: old tuple kind %q is not 0, 'K' or 'O'", rune(m.OldKind)))
	}
	dst = append(dst, byte(TupleNew))
	return appendTuple(dst, m.New)
}

// AppendDelete appends a Delete 'D' message; the xid only if m.Xid != 0.
func AppendDelete(dst []byte, m *Delete) []byte {
	if m.OldKind != TupleKey && m.OldKind != TupleOld {
		panic(fmt.Sprintf("pgoutput: AppendDelete: old tuple kind %q is not 'K' or 'O'", rune(m.OldKind)))
	}
	dst = appendHeader(dst, MsgDelete, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.RelationID))
	dst = append(dst, byte(m.OldKind))
	return appendTuple(dst, m.Old)
}

// AppendTruncate appends a Truncate 'T' message; the xid only if m.Xid != 0.
func AppendTruncate(dst []byte, m *Truncate) []byte {
	if uint64(len(m.RelationIDs)) > math.MaxUint32 {
		panic(fmt.Sprintf("pgoutput: AppendTruncate: %d relations exceed the protocol's count field", len(m.RelationIDs)))
	}
	dst = appendHeader(dst, MsgTruncate, m.Xid)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.RelationIDs)))
	var opts byte
	if m.Cascade {
		opts |= truncateCascade
	}
	if m.RestartIdentity {
		opts |= truncateRestartIdentity
	}
	dst = append(dst, opts)
	for _, id := range m.RelationIDs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(id))
	}
	return dst
}

// AppendLogicalMessage appends a Message 'M' message; the xid only if
// m.Xid != 0.
func AppendLogicalMessage(dst []byte, m *LogicalMessage) []byte {
	if len(m.Content) > math.MaxInt32 {
		panic(fmt.Sprintf("pgoutput: AppendLogicalMessage: content of %d bytes exceeds the protocol's Int32 length", len(m.Content)))
	}
	dst = appendHeader(dst, MsgLogicalMessage, m.Xid)
	var flags byte
	if m.Transactional {
		flags = messageTransactional
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.LSN))
	dst = appendCString(dst, m.Prefix)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Content)))
	return append(dst, m.Content...)
}

// AppendStreamStart appends a StreamStart 'S' message.
func AppendStreamStart(dst []byte, m *StreamStart) []byte {
	dst = append(dst, byte(MsgStreamStart))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Xid))
	if m.FirstSegment {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// AppendStreamStop appends a StreamStop 'E' message.
func AppendStreamStop(dst []byte, _ *StreamStop) []byte {
	return append(dst, byte(MsgStreamStop))
}

// AppendStreamCommit appends a StreamCommit 'c' message (flags 0).
func AppendStreamCommit(dst []byte, m *StreamCommit) []byte {
	dst = append(dst, byte(MsgStreamCommit))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Xid))
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.CommitLSN))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.EndLSN))
	return binary.BigEndian.AppendUint64(dst, uint64(m.CommitTime))
}

// AppendStreamAbort appends a protocol version 2 StreamAbort 'A' message.
func AppendStreamAbort(dst []byte, m *StreamAbort) []byte {
	dst = append(dst, byte(MsgStreamAbort))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Xid))
	return binary.BigEndian.AppendUint32(dst, uint32(m.SubXid))
}

// appendHeader writes the type byte and, for a streamed change, its xid.
func appendHeader(dst []byte, t MessageType, xid XID) []byte {
	dst = append(dst, byte(t))
	if xid != 0 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(xid))
	}
	return dst
}

func appendCString(dst []byte, s string) []byte {
	if i := strings.IndexByte(s, 0); i >= 0 {
		panic(fmt.Sprintf("pgoutput: string %q has a NUL at byte %d and cannot be sent as a C string", s, i))
	}
	dst = append(dst, s...)
	return append(dst, 0)
}

func appendTuple(dst []byte, cols []Column) []byte {
	if len(cols) > math.MaxUint16 {
		panic(fmt.Sprintf("pgoutput: tuple of %d columns exceeds the protocol's 65535", len(cols)))
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(cols)))
	for i, c := range cols {
		dst = append(dst, c.Kind)
		switch c.Kind {
		case ColumnNull, ColumnUnchangedToast:
		case ColumnText, ColumnBinary:
			if len(c.Data) > math.MaxInt32 {
				panic(fmt.Sprintf("pgoutput: tuple column %d of %d bytes exceeds the protocol's Int32 length", i, len(c.Data)))
			}
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Data)))
			dst = append(dst, c.Data...)
		default:
			panic(fmt.Sprintf("pgoutput: tuple column %d has kind %q, not 'n', 'u', 't' or 'b'", i, rune(c.Kind)))
		}
	}
	return dst
}
