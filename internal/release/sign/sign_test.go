package sign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Sign then verify with the published public key, from a PEM key and a
// raw seed; a SHA256SUMS altered after signing, or a wrong key, fails.
func TestSignVerifyRoundTripAndTamper(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	sums := []byte("0123abcd  trellara_1.0.0-1_amd64.deb\n4567ef01  trellara_1.0.0.cdx.json\n")
	for name, keyData := range map[string][]byte{"PEM": pemKey, "raw seed": priv.Seed(), "hex seed": []byte(hex.EncodeToString(priv.Seed()) + "\n")} {
		k, err := ParsePrivateKey(keyData)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pubPEM, err := PublicPEM(k)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := ParsePublicKey(pubPEM)
		if err != nil {
			t.Fatal(err)
		}
		sig := Sign(k, sums)
		if err := Verify(pub, sums, sig); err != nil {
			t.Errorf("%s: round trip: %v", name, err)
		}
		tampered := append([]byte{}, sums...)
		tampered[0] = '9'
		if err := Verify(pub, tampered, sig); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: a tampered SHA256SUMS verified: %v", name, err)
		}
		other, _, _ := ed25519.GenerateKey(rand.Reader)
		if err := Verify(other, sums, sig); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: another key verified: %v", name, err)
		}
	}
	if _, err := ParsePrivateKey([]byte("not a key")); err == nil {
		t.Error("garbage parsed as a key")
	}
}

// The provenance statement lists every artifact with its SHA-256, and
// go.sum's.
func TestProvenanceListsEveryArtifact(t *testing.T) {
	dir := t.TempDir()
	var arts []string
	want := map[string]string{}
	for i, name := range []string{"trellara", "trellara-check", "trellara-full", "trellara_1_amd64.deb", "SHA256SUMS"} {
		p := filepath.Join(dir, name)
		data := []byte(name + string(rune('a'+i)))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want[name] = hex.EncodeToString(sum[:])
		arts = append(arts, p)
	}
	goSum := filepath.Join(dir, "go.sum")
	if err := os.WriteFile(goSum, []byte("mod v1 h1:x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Provenance(arts, goSum, Inputs{Commit: "abc123", Dirty: true, Version: "v1"}, map[string]string{"go": "go1.x"}, "make release", "2026-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var got Statement
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Subject) != len(want) {
		t.Errorf("%d subjects, want %d", len(got.Subject), len(want))
	}
	for _, s := range got.Subject {
		if want[s.Name] == "" || s.Digest["sha256"] != want[s.Name] {
			t.Errorf("subject %s: sha256 %s, want %s", s.Name, s.Digest["sha256"], want[s.Name])
		}
		delete(want, s.Name)
	}
	if len(want) != 0 {
		t.Errorf("artifacts missing from the statement: %v", want)
	}
	gs := sha256.Sum256([]byte("mod v1 h1:x\n"))
	if got.Predicate.Inputs.GoSumHash != hex.EncodeToString(gs[:]) || !got.Predicate.Inputs.Dirty || got.Predicate.Inputs.Commit != "abc123" ||
		got.Type != "https://in-toto.io/Statement/v1" || got.Predicate.Command != "make release" {
		t.Errorf("predicate: %+v", got)
	}
}
