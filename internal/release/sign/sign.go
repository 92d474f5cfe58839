// Package sign signs a release's SHA256SUMS with an ed25519 key the
// operator provides, verifies the signature, and writes the build
// provenance statement (in-toto v1 Statement, SLSA-style predicate).
// `make release` runs it through packaging/cmd/release; packaging/README.md
// documents the verify step.
package sign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ParsePrivateKey reads an ed25519 private key: PEM (PKCS#8, as `openssl
// genpkey -algorithm ed25519` writes), or raw: the 32-byte seed or the
// 64-byte key, as bytes, hex or base64.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if blk, _ := pem.Decode(data); blk != nil {
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %q: %w", blk.Type, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PEM block %q holds a %T, not an ed25519 key", blk.Type, k)
		}
		return ek, nil
	}
	raw, err := rawKey(data)
	if err != nil {
		return nil, err
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.PrivateKey(raw)
		if !k.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(raw[:32]).Public()) {
			return nil, errors.New("a 64-byte key whose public half does not match its seed")
		}
		return k, nil
	}
	return nil, fmt.Errorf("%d bytes: an ed25519 private key is a PEM block, a 32-byte seed or a 64-byte key", len(raw))
}

// ParsePublicKey reads an ed25519 public key: PEM (PKIX, "PUBLIC KEY") or
// raw 32 bytes, as bytes, hex or base64.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if blk, _ := pem.Decode(data); blk != nil {
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %q: %w", blk.Type, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("PEM block %q holds a %T, not an ed25519 key", blk.Type, k)
		}
		return ek, nil
	}
	raw, err := rawKey(data)
	if err != nil {
		return nil, err
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%d bytes: an ed25519 public key is a PEM block or 32 bytes", len(raw))
	}
	return ed25519.PublicKey(raw), nil
}

// rawKey accepts the key's bytes as they are, or hex or base64 text.
func rawKey(data []byte) ([]byte, error) {
	switch len(data) {
	case 32, 64:
		return data, nil
	}
	s := strings.TrimSpace(string(data))
	if b, err := hex.DecodeString(s); err == nil {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return nil, fmt.Errorf("%d bytes that are neither PEM, a raw key, hex nor base64", len(data))
}

// PublicPEM is the public key of k as a PKIX PEM block, the file to
// publish beside a release.
func PublicPEM(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// Sign returns the signature file's contents for msg: the base64 ed25519
// signature and a newline.
func Sign(k ed25519.PrivateKey, msg []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(ed25519.Sign(k, msg)) + "\n")
}

// ErrBadSignature is a signature that does not match the file and key.
var ErrBadSignature = errors.New("the signature does not match: the file was altered, or was signed by another key")

// Verify checks sig (as Sign writes it) over msg.
func Verify(pub ed25519.PublicKey, msg, sig []byte) error {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("the signature is not a base64 ed25519 signature")
	}
	if !ed25519.Verify(pub, msg, raw) {
		return ErrBadSignature
	}
	return nil
}

// LoadPrivateKey reads and parses the key file at path.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the signing key: %w", err)
	}
	k, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads and parses the public key file at path.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the public key: %w", err)
	}
	k, err := ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return k, nil
}

// KeyID names a public key in output: "ed25519:" and the first 8 bytes of
// the SHA-256 of its 32 raw bytes, in hex. It identifies, it does not
// authenticate: only Verify against the key itself does.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}
