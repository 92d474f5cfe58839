package envelope

import (
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Test access to the hand encoder: its body without the fallback, the test
// of when it applies, and the list of fields it writes.
// Each uses the relations' sealed encodings where Seal left them, as
// Encode does; AppendEnvelopeHandUnsealed encodes every relation afresh.
func AppendEnvelopeHand(b []byte, e *pb.Envelope) []byte {
	return appendEnvelopeBody(b, e, sealedRelationsOf(nil, e.GetRelations()), nil)
}

func AppendEnvelopeWire(b []byte, e *pb.Envelope) ([]byte, error) {
	return appendEnvelopeProto(b, e, sealedRelationsOf(nil, e.GetRelations()))
}

func EnvelopeEncodable(e *pb.Envelope) bool {
	return envelopeEncodable(e, sealedRelationsOf(nil, e.GetRelations()))
}

func AppendEnvelopeHandUnsealed(b []byte, e *pb.Envelope) []byte {
	return appendEnvelopeBody(b, e, nil, nil)
}

// SealedRelations reports how many of rels Encode would take from their
// sealed encoding.
func SealedRelations(rels []*pb.Relation) int {
	n := 0
	for _, s := range sealedRelationsOf(nil, rels) {
		if s != nil {
			n++
		}
	}
	return n
}

func EncodedFields() map[protoreflect.FullName][]protowire.Number { return encodedFields }
