package lsn

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestStringParseRoundTrip(t *testing.T) {
	for _, v := range []LSN{0, 1, 0x16B3748, 0x16_B374D848, 0xFFFFFFFF, 1 << 32, math.MaxUint64} {
		s := v.String()
		got, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if got != v {
			t.Fatalf("Parse(%q) = %d, want %d", s, got, v)
		}
	}
}

func TestStringUpperCase(t *testing.T) {
	cases := map[LSN]string{
		0:              "0/0",
		0x16_B374D848:  "16/B374D848",
		0xABCDEF:       "0/ABCDEF",
		math.MaxUint64: "FFFFFFFF/FFFFFFFF",
	}
	for v, want := range cases {
		if got := v.String(); got != want {
			t.Errorf("LSN(%#x).String() = %q, want %q", uint64(v), got, want)
		}
		if got := Format(uint64(v)); got != want {
			t.Errorf("Format(%#x) = %q, want %q", uint64(v), got, want)
		}
	}
	// Lower case is read (PostgreSQL accepts it) and written back upper case.
	v, err := Parse("16/b374d848")
	if err != nil || v.String() != "16/B374D848" {
		t.Fatalf("Parse lower case = %v, %v", v, err)
	}
}

func TestParseInvalid(t *testing.T) {
	for _, s := range []string{"", "/", "0/", "/0", "0", "16B374D848", "0/0/0", " 0/0", "0/0 ",
		"G/0", "0/x1", "-1/0", "+1/0", "0x1/0", "123456789/0", "0/123456789", "0//0"} {
		if v, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, v)
		} else if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error %v does not wrap ErrSyntax", s, err)
		}
	}
}

func TestJSON(t *testing.T) {
	type doc struct {
		At  LSN  `json:"at"`
		Opt *LSN `json:"opt,omitempty"`
	}
	b, err := json.Marshal(doc{At: 0x16_B374D848})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"at":"16/B374D848"}` {
		t.Fatalf("marshal = %s", b)
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"at":"1/A","opt":"0/FF"}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.At != 0x1_0000000A || d.Opt == nil || *d.Opt != 0xFF {
		t.Fatalf("unmarshal = %+v", d)
	}
	if err := json.Unmarshal([]byte(`{"at":"nope"}`), &d); !errors.Is(err, ErrSyntax) {
		t.Fatalf("unmarshal invalid: %v", err)
	}
	if err := json.Unmarshal([]byte(`{"at":42}`), &d); err == nil {
		t.Fatal("unmarshal number: want an error (an LSN is a JSON string)")
	}
}
