package pgoutput

import (
	"fmt"
	"math"
	"time"

	"github.com/jackc/pglogrepl"
)

// LSN is a WAL position. It is pglogrepl's type so that positions flow
// between the replication connection and the decoder without conversion.
type LSN = pglogrepl.LSN

// XID is a PostgreSQL transaction id. 0 is InvalidTransactionId; the
// decoder never returns it for a field the protocol requires to be valid.
type XID uint32

// OID is a PostgreSQL object id (relations, types).
type OID uint32

// Timestamp is a PostgreSQL TimestampTz as sent on the wire: microseconds
// since 2000-01-01 00:00:00 UTC. It is kept raw, not as time.Time, so that
// decoding is lossless and re-encoding reproduces the input exactly.
type Timestamp int64

// postgresEpochUnixMicros is 2000-01-01 00:00:00 UTC in Unix microseconds.
const postgresEpochUnixMicros = 946_684_800_000_000

// Time converts t to a time.Time in UTC. Values so far from the epoch that
// the Unix conversion would overflow saturate; PostgreSQL never sends them.
func (t Timestamp) Time() time.Time {
	us := int64(t)
	if us > math.MaxInt64-postgresEpochUnixMicros {
		us = math.MaxInt64
	} else {
		us += postgresEpochUnixMicros
	}
	return time.UnixMicro(us).UTC()
}

// TimestampOf converts a time.Time to a Timestamp, truncating to
// microseconds.
func TimestampOf(t time.Time) Timestamp {
	return Timestamp(t.UnixMicro() - postgresEpochUnixMicros)
}

func (t Timestamp) String() string { return t.Time().Format(time.RFC3339Nano) }

// MessageType is the first byte of every pgoutput message.
type MessageType byte

// Message types of protocol versions 1 and 2.
const (
	MsgBegin          MessageType = 'B'
	MsgCommit         MessageType = 'C'
	MsgOrigin         MessageType = 'O'
	MsgRelation       MessageType = 'R'
	MsgType           MessageType = 'Y'
	MsgInsert         MessageType = 'I'
	MsgUpdate         MessageType = 'U'
	MsgDelete         MessageType = 'D'
	MsgTruncate       MessageType = 'T'
	MsgLogicalMessage MessageType = 'M'
	MsgStreamStart    MessageType = 'S'
	MsgStreamStop     MessageType = 'E'
	MsgStreamCommit   MessageType = 'c'
	MsgStreamAbort    MessageType = 'A'
)

var messageTypeNames = map[MessageType]string{
	MsgBegin:          "Begin",
	MsgCommit:         "Commit",
	MsgOrigin:         "Origin",
	MsgRelation:       "Relation",
	MsgType:           "Type",
	MsgInsert:         "Insert",
	MsgUpdate:         "Update",
	MsgDelete:         "Delete",
	MsgTruncate:       "Truncate",
	MsgLogicalMessage: "Message",
	MsgStreamStart:    "StreamStart",
	MsgStreamStop:     "StreamStop",
	MsgStreamCommit:   "StreamCommit",
	MsgStreamAbort:    "StreamAbort",
}

func (t MessageType) known() bool { _, ok := messageTypeNames[t]; return ok }

// String returns the protocol documentation's name for t ("Insert",
// "StreamAbort"), or the byte in quoted and hex form if t is unknown.
func (t MessageType) String() string {
	if s, ok := messageTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("%q (0x%02x)", rune(t), byte(t))
}

// Message is one decoded pgoutput message: one of *Begin, *Commit, *Origin,
// *Relation, *Type, *Insert, *Update, *Delete, *Truncate, *LogicalMessage,
// *StreamStart, *StreamStop, *StreamCommit or *StreamAbort.
type Message interface {
	MessageType() MessageType
}

// Begin starts a (non-streamed) transaction.
type Begin struct {
	// FinalLSN is the LSN of the transaction's commit record.
	FinalLSN   LSN
	CommitTime Timestamp
	Xid        XID
}

// Commit ends the transaction opened by the last Begin.
type Commit struct {
	// CommitLSN is the LSN of the commit record, equal to Begin.FinalLSN.
	CommitLSN LSN
	// EndLSN is the end of the commit record: where decoding of the next
	// transaction starts, and what a consumer confirms once the transaction
	// is durable.
	EndLSN     LSN
	CommitTime Timestamp
}

// Origin names the replication origin the current transaction came from.
type Origin struct {
	// CommitLSN is the commit LSN on the origin server; 0 when sent inside
	// a stream block.
	CommitLSN LSN
	Name      string
}

// ReplicaIdentity is pg_class.relreplident: which old values UPDATE and
// DELETE carry.
type ReplicaIdentity byte

// Replica identity settings.
const (
	ReplicaIdentityDefault ReplicaIdentity = 'd' // primary key
	ReplicaIdentityNothing ReplicaIdentity = 'n'
	ReplicaIdentityFull    ReplicaIdentity = 'f' // whole old row
	ReplicaIdentityIndex   ReplicaIdentity = 'i' // USING INDEX
)

func (r ReplicaIdentity) valid() bool {
	switch r {
	case ReplicaIdentityDefault, ReplicaIdentityNothing, ReplicaIdentityFull, ReplicaIdentityIndex:
		return true
	}
	return false
}

func (r ReplicaIdentity) String() string {
	switch r {
	case ReplicaIdentityDefault:
		return "default"
	case ReplicaIdentityNothing:
		return "nothing"
	case ReplicaIdentityFull:
		return "full"
	case ReplicaIdentityIndex:
		return "index"
	}
	return fmt.Sprintf("%q", rune(r))
}

// Relation describes a table before the first change to it in a session
// (and again after its definition changes). Later changes refer to it by
// RelationID only.
type Relation struct {
	Xid        XID // streamed transactions only; 0 otherwise
	RelationID OID
	// Namespace is the schema name; "" means pg_catalog.
	Namespace       string
	Name            string
	ReplicaIdentity ReplicaIdentity
	Columns         []RelationColumn
}

// RelationColumn is one published column of a Relation, in tuple order.
type RelationColumn struct {
	// Key is true if the column is part of the replica identity key.
	Key  bool
	Name string
	// TypeOID is the column's type; for a domain, the domain's OID.
	TypeOID OID
	// TypeModifier is pg_attribute.atttypmod, -1 when there is none.
	TypeModifier int32
}

// Type describes a non-built-in data type used by a following Relation,
// e.g. an enum. For a domain, pgoutput names the domain's base type.
type Type struct {
	Xid       XID // streamed transactions only; 0 otherwise
	TypeOID   OID
	Namespace string // "" means pg_catalog
	Name      string
}

// Column kinds in tuple data.
const (
	ColumnNull           byte = 'n'
	ColumnUnchangedToast byte = 'u' // TOASTed value not changed and not sent
	ColumnText           byte = 't'
	ColumnBinary         byte = 'b'
)

// Column is one value of a tuple.
type Column struct {
	// Kind is ColumnNull, ColumnUnchangedToast, ColumnText or ColumnBinary.
	Kind byte
	// Data is the value for ColumnText and ColumnBinary, nil otherwise.
	Data []byte
}

// TupleKind says which tuple follows in Update and Delete.
type TupleKind byte

// Tuple kinds.
const (
	TupleNone TupleKind = 0   // Update without old values
	TupleKey  TupleKind = 'K' // old replica identity key columns only
	TupleOld  TupleKind = 'O' // whole old row (REPLICA IDENTITY FULL)
	TupleNew  TupleKind = 'N'
)

// Insert is a new row.
type Insert struct {
	Xid        XID // streamed transactions only; 0 otherwise
	RelationID OID
	New        []Column
}

// Update is a changed row.
type Update struct {
	Xid        XID // streamed transactions only; 0 otherwise
	RelationID OID
	// OldKind is TupleNone (Old is nil), TupleKey or TupleOld. PostgreSQL
	// sends old values only for REPLICA IDENTITY FULL, or when a replica
	// identity key column changed.
	OldKind TupleKind
	Old     []Column
	New     []Column
}

// Delete is a removed row, identified by its old key or whole old row.
type Delete struct {
	Xid        XID // streamed transactions only; 0 otherwise
	RelationID OID
	OldKind    TupleKind // TupleKey or TupleOld
	Old        []Column
}

// Truncate empties one or more tables.
type Truncate struct {
	Xid             XID // streamed transactions only; 0 otherwise
	Cascade         bool
	RestartIdentity bool
	RelationIDs     []OID
}

// LogicalMessage is a message written with pg_logical_emit_message.
type LogicalMessage struct {
	Xid           XID // streamed transactions only; 0 otherwise
	Transactional bool
	LSN           LSN
	Prefix        string
	Content       []byte
}

// StreamStart opens a block of changes of the in-progress transaction Xid.
type StreamStart struct {
	Xid XID
	// FirstSegment is true for the transaction's first block.
	FirstSegment bool
}

// StreamStop closes the current stream block.
type StreamStop struct{}

// StreamCommit commits the streamed transaction Xid.
type StreamCommit struct {
	Xid        XID
	CommitLSN  LSN
	EndLSN     LSN
	CommitTime Timestamp
}

// StreamAbort discards streamed changes: of the whole transaction Xid when
// SubXid == Xid, otherwise only those of subtransaction SubXid (a ROLLBACK
// TO SAVEPOINT inside a streamed transaction).
type StreamAbort struct {
	Xid    XID
	SubXid XID
}

// MessageType implementations.

func (*Begin) MessageType() MessageType          { return MsgBegin }
func (*Commit) MessageType() MessageType         { return MsgCommit }
func (*Origin) MessageType() MessageType         { return MsgOrigin }
func (*Relation) MessageType() MessageType       { return MsgRelation }
func (*Type) MessageType() MessageType           { return MsgType }
func (*Insert) MessageType() MessageType         { return MsgInsert }
func (*Update) MessageType() MessageType         { return MsgUpdate }
func (*Delete) MessageType() MessageType         { return MsgDelete }
func (*Truncate) MessageType() MessageType       { return MsgTruncate }
func (*LogicalMessage) MessageType() MessageType { return MsgLogicalMessage }
func (*StreamStart) MessageType() MessageType    { return MsgStreamStart }
func (*StreamStop) MessageType() MessageType     { return MsgStreamStop }
func (*StreamCommit) MessageType() MessageType   { return MsgStreamCommit }
func (*StreamAbort) MessageType() MessageType    { return MsgStreamAbort }
