package apply

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/trellara/trellara/envelope/envelopepb"
)

// tpcbPayload is one pgbench TPC-B transaction's entry: three updates and
// a history insert.
func tpcbPayload(tb testing.TB, i int) []byte {
	none := pb.OldTuple_OLD_TUPLE_NONE
	acc := relation("public", "accounts", 'd', "aid*", "bid", "abalance", "filler")
	tel := relation("public", "tellers", 'd', "tid*", "bid", "tbalance", "filler")
	bra := relation("public", "branches", 'd', "bid*", "bbalance", "filler")
	his := relation("public", "history", 'd', "tid", "bid", "aid", "delta", "mtime", "filler")
	s := strconv.Itoa
	return newTxn(uint64(0x1000000+i*128)).
		update(acc, none, nil, vals(s(i%100000+1), s(i%10+1), s(i*7), "")).
		update(tel, none, nil, vals(s(i%100+1), s(i%10+1), s(i*3), "")).
		update(bra, none, nil, vals(s(i%10+1), s(i*5), "")).
		insert(his, vals(s(i%100+1), s(i%10+1), s(i%100000+1), s(i%5000), "2026-11-30 12:00:00", "")...).encode(tb)
}

// TestDecodedUnitsSurviveLaterReads: the reader copies small payloads
// into shared blocks and the Decoder carves rows and values from shared
// slabs; a unit decoded earlier — its payload and the values aliasing it
// — must be unchanged however many units are read after it, even when
// the transport reuses its buffer for every entry.
func TestDecodedUnitsSurviveLaterReads(t *testing.T) {
	a, err := New(nil, Config{Flow: testFlow, SourceID: testSource})
	if err != nil {
		t.Fatal(err)
	}
	var dec decoder
	var transportBuf []byte // the transport's buffer, overwritten by every read
	read := func(i int) *unit {
		transportBuf = append(transportBuf[:0], tpcbPayload(t, i)...)
		u, err := a.decode(&dec, uint64(i), transportBuf)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	var kept []*unit
	var payloads [][]byte
	var envs []*pb.Envelope
	for i := range 20 {
		u := read(i)
		kept = append(kept, u)
		payloads = append(payloads, bytes.Clone(u.payload))
		envs = append(envs, proto.Clone(u.env).(*pb.Envelope))
	}
	for i := range 5000 {
		read(20 + i)
	}
	for i, u := range kept {
		if !bytes.Equal(u.payload, payloads[i]) {
			t.Fatalf("unit %d: payload changed after later reads", i)
		}
		if !proto.Equal(u.env, envs[i]) {
			t.Fatalf("unit %d: envelope changed after later reads:\n got %v\nwant %v", i, u.env, envs[i])
		}
	}
}

// BenchmarkDecodeUnits is the applier's reader decoding TPC-B entries
// into units (copy of the payload, decode, checks), as `trellara run`
// does while catching up.
func BenchmarkDecodeUnits(b *testing.B) {
	a, err := New(nil, Config{Flow: testFlow, SourceID: testSource})
	if err != nil {
		b.Fatal(err)
	}
	payloads := make([][]byte, 1024)
	for i := range payloads {
		payloads[i] = tpcbPayload(b, i)
	}
	var dec decoder
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := a.decode(&dec, uint64(i), payloads[i%len(payloads)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
