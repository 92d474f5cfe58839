package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecode checks that Decode never panics, that every failure is a
// *DecodeError pointing inside the input, and that every success is exact:
// re-encoding gives back the input bytes and decoding those gives the same
// message.
//
// Seeds: testdata/fuzz/FuzzDecode holds messages captured from PostgreSQL 15
// (one per message type and variant, chosen from testdata/captured.txt;
// TestFuzzSeedsAreCaptured holds them to it); the hand-built cases of
// decode_test.go are added here.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(tc.data, tc.inStream)
	}
	for _, tc := range errorCases {
		f.Add(tc.data, tc.inStream)
	}
	f.Fuzz(func(t *testing.T, data []byte, inStream bool) {
		m, err := Decode(data, testLSN, inStream)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || m != nil {
				t.Fatalf("got %#v, %v (%T); want nil, *DecodeError", m, err, err)
			}
			if de.Offset < 0 || de.Offset > len(data) || de.LSN != testLSN || de.Reason == "" {
				t.Fatalf("bad DecodeError %+v for %d bytes", de, len(data))
			}
			return
		}
		enc := Append(nil, m)
		if !bytes.Equal(enc, data) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, data)
		}
		again, err := Decode(enc, testLSN, inStream)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("decode(encode(m)) != m:\n got %#v\nwant %#v", again, m)
		}
		if m.MessageType() != MessageType(data[0]) {
			t.Fatalf("MessageType() %v for type byte %q", m.MessageType(), data[0])
		}
	})
}

// pgoutput carries no checksum, so FuzzDecode's mutations all reach the
// decoder; what matters is that its seeds are real server output. Every
// seed in testdata/fuzz/FuzzDecode must be a message of
// testdata/captured.txt (same bytes, same in-stream flag), and every kind
// of message the capture holds, per protocol, format and in-stream flag,
// must have a seed.
func TestFuzzSeedsAreCaptured(t *testing.T) {
	type variant struct {
		typ      byte
		session  string
		inStream bool
	}
	// Message bytes and flag → the variants sending exactly those bytes
	// (the same transaction read by two sessions often gives the same).
	captured := map[string][]variant{}
	need := map[variant]bool{}
	for _, caps := range loadCaptures(t) {
		for _, c := range caps {
			v := variant{c.typ, c.session, c.inStream}
			k := string(c.data) + strconv.FormatBool(c.inStream)
			captured[k] = append(captured[k], v)
			need[v] = true
		}
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		data, inStream, err := parseSeed(string(b))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		vs, ok := captured[string(data)+strconv.FormatBool(inStream)]
		if !ok {
			t.Errorf("seed %s is not a message of captured.txt (in stream %v)", e.Name(), inStream)
		}
		for _, v := range vs {
			delete(need, v)
		}
	}
	for v := range need {
		t.Errorf("no seed for captured %q messages of session %q (in stream %v); add one from captured.txt to %s", v.typ, v.session, v.inStream, dir)
	}
}

// parseSeed reads a corpus file of FuzzDecode: "go test fuzz v1", then a
// []byte and a bool, each as a Go literal on its own line.
func parseSeed(s string) ([]byte, bool, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 3 || lines[0] != "go test fuzz v1" ||
		!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") ||
		!strings.HasPrefix(lines[2], "bool(") || !strings.HasSuffix(lines[2], ")") {
		return nil, false, errors.New("not a corpus file of ([]byte, bool)")
	}
	data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		return nil, false, err
	}
	inStream, err := strconv.ParseBool(strings.TrimSuffix(strings.TrimPrefix(lines[2], "bool("), ")"))
	return []byte(data), inStream, err
}

// FuzzDecoder feeds a session of messages to one Decoder: session is a
// sequence of messages, each prefixed by its length as a big-endian uint16
// (a cut-off last one is dropped). The Decoder must never panic, and every
// message it returns must equal what the package-level Decode gives for
// the same bytes and stream state: decoding into the structs of earlier
// messages leaves nothing of them behind. An error must be the same as
// Decode's, or, where Decode succeeds, an out-of-sequence one.
//
// Seeds: the reuse session of decode_test.go and the captured sessions.
func FuzzDecoder(f *testing.F) {
	var seed []byte
	add := func(data []byte) {
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(data)))
		seed = append(seed, data...)
	}
	for _, name := range reuseSession {
		add(decodeCaseNamed(f, name).data)
	}
	f.Add(seed)
	for _, caps := range loadCaptures(f) {
		seed = nil
		for _, c := range caps {
			if len(c.data) <= 0xffff {
				add(c.data)
			}
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, session []byte) {
		var d Decoder
		for len(session) >= 2 {
			n := int(binary.BigEndian.Uint16(session))
			if n > len(session)-2 {
				return
			}
			data := session[2 : 2+n]
			session = session[2+n:]
			in := d.InStream()
			got, err := d.Decode(data, testLSN)
			want, wantErr := Decode(bytes.Clone(data), testLSN, in)
			switch {
			case wantErr != nil:
				if err == nil || err.Error() != wantErr.Error() || got != nil {
					t.Fatalf("Decoder gave %#v, %v; Decode's error is %v", got, err, wantErr)
				}
				return
			case err != nil:
				var de *DecodeError
				if !errors.As(err, &de) || !strings.HasPrefix(de.Reason, "out of sequence: ") || got != nil {
					t.Fatalf("Decoder gave %#v, %v where Decode succeeds", got, err)
				}
				return
			case !reflect.DeepEqual(got, want):
				t.Fatalf("Decoder:\n got %#v\nwant %#v", got, want)
			}
		}
	})
}
