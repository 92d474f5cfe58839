// Package envelope is Trellara's transaction envelope: one committed source
// transaction, carried as one protobuf message with its boundaries, its
// schema fingerprint and a checksum over the whole message.
//
// The IDL is envelope.proto in this directory; the generated Go lives in
// envelopepb. This package adds what protobuf does not give: validation on
// both encode and decode, and the checksum framing.
//
// # Wire form
//
// An encoded envelope is the deterministic protobuf encoding of fields 1–12
// followed by exactly one field 13 (the checksum), always last:
//
//	+--------------------------------------+------+------------------------+
//	| protobuf fields 1..12 (deterministic) | 0x69 | xxh3_64, 8 bytes, LE   |
//	+--------------------------------------+------+------------------------+
//	                                         tag 13, wire type 1 (fixed64)
//
// The checksum is xxh3_64 (seed 0) of every byte before the 0x69 tag byte.
// Because the trailer is fixed at nine bytes and the checksum covers the
// whole prefix, any single flipped bit anywhere in the encoding is rejected:
// a flip in the prefix changes the hash, a flip in the tag byte removes the
// trailer, a flip in the checksum bytes mismatches.
//
// A protobuf parser that knows nothing of Trellara still reads an encoded
// envelope as an ordinary Envelope message (field 13 is an ordinary fixed64);
// verifying the checksum is the only extra step. docs/ENVELOPE.md is the
// reference for other languages.
//
// Encode writes fields 1–12 with a hand encoder (encode_fast.go) whose
// bytes are those of deterministic proto.Marshal, proved by property and
// fuzz tests against it; it falls back to proto.Marshal for a message with
// unknown fields or a string that is not UTF-8, and a test walking the
// descriptor of envelope.proto fails on any field it does not write.
//
// # Validation
//
// Encode refuses, and Decode rejects, an envelope that breaks any rule in
// Validate: protocol version, required identity fields, LSN order, dense row
// sequence, row count, relation references and column counts, value kinds,
// schema fingerprint, and boundary consistency.
package envelope
