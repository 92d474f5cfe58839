package consumer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/envelope"
	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/envelope/envelopetest"
	"github.com/trellara/trellara/segmentlog"
)

func writeLog(t *testing.T, n int) (string, *segmentlog.Log, []*pb.Envelope) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "log")
	l, _, err := segmentlog.Open(dir, segmentlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rng := rand.New(rand.NewPCG(5, 5))
	var envs []*pb.Envelope
	for i := range n {
		e := envelopetest.Random(rng, "src", uint64(0x100+i*0x10))
		b, err := envelope.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	return dir, l, envs
}

var errStop = errors.New("handler says stop")

// A unit whose handler fails is not committed: the next consumer with the
// same name starts at it.
func TestRunCommitsOnlyDoneUnits(t *testing.T) {
	dir, _, envs := writeLog(t, 8)
	c, err := consumer.Open(dir, "app", consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	err = c.Run(context.Background(), func(_ context.Context, u consumer.Unit) error {
		if u.Envelope.Checksum != envs[u.Offset].Checksum {
			t.Fatalf("offset %d: checksum %016x, appended %016x", u.Offset, u.Envelope.Checksum, envs[u.Offset].Checksum)
		}
		if u.Offset == 5 {
			return errStop
		}
		seen = append(seen, u.Offset)
		return nil
	})
	if !errors.Is(err, errStop) || len(seen) != 5 {
		t.Fatalf("Run: %v after %v, want errStop after offsets 0..4", err, seen)
	}
	c.Close()

	c, err = consumer.Open(dir, "app", consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u, err := c.Next(context.Background())
	if err != nil || u.Offset != 5 {
		t.Fatalf("reopened consumer starts at offset %d (%v), want 5: the failed unit again", u.Offset, err)
	}
}

// A log entry that is not a valid envelope stops the consumer with its
// offset; it is never skipped.
func TestInvalidEnvelopeStops(t *testing.T) {
	dir, l, _ := writeLog(t, 2)
	b, _ := envelope.Encode(envelopetest.Random(rand.New(rand.NewPCG(1, 1)), "src", 0x900))
	b[len(b)/2] ^= 1
	if _, err := l.Append(b); err != nil {
		t.Fatal(err)
	}
	c, err := consumer.Open(dir, "app", consumer.Options{NoCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Run(context.Background(), func(context.Context, consumer.Unit) error { return nil })
	var de *consumer.DecodeError
	if !errors.As(err, &de) || de.Offset != 2 {
		t.Fatalf("Run over a damaged envelope: %v, want *DecodeError at offset 2", err)
	}
	if _, ok, _ := l.CursorOffset("app"); ok {
		t.Fatal("a NoCommit consumer registered its cursor")
	}
}
