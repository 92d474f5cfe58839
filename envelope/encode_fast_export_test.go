package envelope

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Test access to the hand encoder: its body without the fallback, the test
// of when it applies, and the list of fields it writes.
var (
	AppendEnvelopeHand = appendEnvelopeBody
	AppendEnvelopeWire = appendEnvelopeProto
	EnvelopeEncodable  = envelopeEncodable
)

func EncodedFields() map[protoreflect.FullName][]protowire.Number { return encodedFields }
