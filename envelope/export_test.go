package envelope

import pb "github.com/trellara/trellara/envelope/envelopepb"

// ParsedByHand reports whether the Decoder's own parser (not its
// proto.Unmarshal fallback) accepts the sealed envelope b.
func (d *Decoder) ParsedByHand(b []byte) bool {
	return len(b) >= trailerLen && d.parse(b[:len(b)-trailerLen], new(pb.Envelope))
}
