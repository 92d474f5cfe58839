package envelopepb

// HasUnknownFields reports whether the message holds fields this build of
// envelope.proto does not know (kept by a decode of a newer writer's
// bytes). The envelope package's hand encoder does not write those and
// falls back to proto.Marshal; through ProtoReflect().GetUnknown() the same
// question cost a fifth of its time.
func (x *Envelope) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *Relation) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *RelationColumn) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *Value) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *Row) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *DDLEvent) HasUnknownFields() bool { return len(x.unknownFields) != 0 }

// HasUnknownFields: see (*Envelope).HasUnknownFields.
func (x *Boundary) HasUnknownFields() bool { return len(x.unknownFields) != 0 }
