package config

import (
	"math"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	ok := map[string]ByteSize{
		"0": 0, "4096": 4096, "4096B": 4096, "64MiB": 64 * MiB, "64mib": 64 * MiB, "50GiB": 50 * GiB, "1TiB": TiB,
		"1KiB": KiB, "1KB": 1000, "2MB": 2e6, "3GB": 3e9, "1TB": 1e12, "1.5GiB": 3 * GiB / 2, " 8 MiB ": 8 * MiB,
		"0.5KiB": 512, "1.0000000000001B": 1, "0.0000000000001TiB": 0, "8388607TiB": 8388607 * TiB,
	}
	for in, want := range ok {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.MiB", ".5MiB", "1e9", "64 megs", "1,000", "8388608TiB",
		"9223372036854775808", "0x10", "1.5.5GiB", "9223372036854775807.9KiB"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want error", in, got)
		}
	}
	if v, err := ParseByteSize("9223372036854775807"); err != nil || v != math.MaxInt64 {
		t.Errorf("max int64: %d %v", v, err)
	}
}

func TestByteSizeString(t *testing.T) {
	for b, want := range map[ByteSize]string{0: "0B", 1000: "1000B", KiB: "1KiB", 64 * MiB: "64MiB", 50 * GiB: "50GiB",
		1536 * MiB: "1536MiB", 2 * TiB: "2TiB", MiB + 1: "1048577B"} {
		if got := b.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(b), got, want)
		}
		if back, err := ParseByteSize(b.String()); err != nil || back != b {
			t.Errorf("round trip %d: %d %v", int64(b), back, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	ok := map[string]time.Duration{
		"7d": 7 * day, "1d12h": 36 * time.Hour, "36h": 36 * time.Hour, "90m": 90 * time.Minute, "0": 0, "0d": 0,
		"1h30m": 90 * time.Minute, "500ms": 500 * time.Millisecond, "30d": 30 * day,
	}
	for in, want := range ok {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "7", "7 days", "-1h", "1d-1h", "1w", "d7", "99999999999999d", "106751d24h"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want error", in, got)
		}
	}
	for _, d := range []time.Duration{0, time.Second, 90 * time.Minute, 7 * day, day + 12*time.Hour + time.Second, 1500 * time.Millisecond, day + time.Millisecond} {
		back, err := ParseDuration(formatDuration(d))
		if err != nil || back != d {
			t.Errorf("round trip %v via %q: %v %v", d, formatDuration(d), back, err)
		}
	}
}
