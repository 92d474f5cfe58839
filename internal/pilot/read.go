package pilot

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/trellara/trellara/internal/release/sign"
)

// FileSignature is the ed25519 signature of manifest.json's exact bytes,
// as `make release` writes SHA256SUMS.sig (internal/release/sign): one
// base64 line. It follows manifest.json in the tar and is not listed in
// the manifest (it cannot sign itself).
const FileSignature = "manifest.json.sig"

// Signature states: what a reader may say about who built the package.
const (
	// Unsigned: no signature. The SHA-256 sums then detect accidental
	// damage only: anyone can change a file and recompute its sum.
	Unsigned = "UNSIGNED"
	// SignedVerified: the signature verifies against the public key the
	// reader was given.
	SignedVerified = "signed"
	// SignedUnverified: a signature is present but no public key was
	// given, so it proves nothing yet.
	SignedUnverified = "signed, not verified"
)

// Signature is what Read established about the manifest's signature.
type Signature struct {
	State string `json:"state"`            // Unsigned, SignedVerified or SignedUnverified
	KeyID string `json:"key_id,omitempty"` // the verifying key's id; for SignedUnverified, the id the manifest claims
	// Statement is the one line every output prints: UNSIGNED, or
	// signed-by-KEY-ID, and what that does and does not prove.
	Statement string `json:"statement"`
}

func unsignedSignature() Signature {
	return Signature{State: Unsigned, Statement: "UNSIGNED: the SHA-256 sums detect accidental damage only; anyone could have changed a file and its sum " +
		"(ask the sender for a package built with pilot-package --signing-key, and score it with --public-key)"}
}

// ErrUnsigned is Read's error for an unsigned package when a public key
// was given: the recipient asked for proof of origin and there is none.
var ErrUnsigned = errors.New("the package is UNSIGNED")

// SignWith makes Write sign the manifest with k: the manifest then names
// the key (signing_key) and the tar carries FileSignature.
func (p *Package) SignWith(k ed25519.PrivateKey) {
	p.signer = k
	p.Manifest.SigningKey = sign.KeyID(k.Public().(ed25519.PublicKey))
}

// Write writes the package as a gzip'd tar: manifest.json first, then its
// signature when the package is signed (SignWith), then the files in
// manifest order.
func (p *Package) Write(w io.Writer) error {
	if p.signer == nil {
		p.Manifest.SigningKey = ""
	}
	man, err := json.MarshalIndent(p.Manifest, "", "  ")
	if err != nil {
		return err
	}
	man = append(man, '\n')
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	mtime := p.Manifest.CreatedAt
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put(FileManifest, man); err != nil {
		return err
	}
	if p.signer != nil {
		if err := put(FileSignature, sign.Sign(p.signer, man)); err != nil {
			return err
		}
	}
	for _, f := range p.Manifest.Files {
		if err := put(f.Path, p.Files[f.Path]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// Limits bound what Read accepts, so a small hostile package cannot make
// the reader use unbounded memory or time: every entry is streamed and
// hashed, and only the files the scorecard parses are kept.
type Limits struct {
	EntriesMax        int   // entries in the tar, manifest and signature included
	EntryBytesMax     int64 // one entry's size
	ScoredBytesMax    int64 // one entry that is kept in memory (Scored, manifest)
	TotalBytesMax     int64 // all entries together, uncompressed
	SignatureBytesMax int64 // manifest.json.sig
}

// DefaultLimits are generous for a real package (tens of files, a few MiB)
// and small against a bomb.
var DefaultLimits = Limits{EntriesMax: 64, EntryBytesMax: 256 << 20, ScoredBytesMax: 16 << 20, TotalBytesMax: 1 << 30, SignatureBytesMax: 1 << 10}

// Scored are the files Score parses; Read keeps these and no others.
var Scored = map[string]bool{FileCheck: true, FileStatus: true, FileLastVerify: true, FileChaosJSON: true,
	FileQualificationJSON: true, FileLiveChaosJSON: true, FileSemantics: true, FileFleet: true}

// ErrUnsafeEntry is an entry Read refuses by its kind or name: a link, a
// device, a directory, an absolute path or one with "..".
var ErrUnsafeEntry = errors.New("an entry an evidence package never holds")

// ErrTooLarge is an entry, or the package, over its Limits.
var ErrTooLarge = errors.New("larger than an evidence package holds")

// Read reads a package Write wrote and checks every file against the
// manifest: a file missing, added or different from its SHA-256 is an
// error naming it. With pub, the manifest must carry a signature by that
// key (an unsigned package is ErrUnsigned, a wrong one
// sign.ErrBadSignature); without, the result's Signature says UNSIGNED or
// that the signature was not verified. Only an unsigned-or-verified
// reading is ever returned without error.
func Read(r io.Reader, pub ed25519.PublicKey) (*Package, error) {
	return ReadLimited(r, pub, DefaultLimits)
}

// ReadLimited is Read with lim instead of DefaultLimits.
func ReadLimited(r io.Reader, pub ed25519.PublicKey, lim Limits) (*Package, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("pilot: not a gzip'd evidence package: %w", err)
	}
	tr := tar.NewReader(gz)
	var total int64
	entries := 0
	// next returns the next entry's header after the safety checks, or
	// nil at the end.
	next := func() (*tar.Header, error) {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("pilot: read the package: %w", err)
		}
		entries++
		if entries > lim.EntriesMax {
			return nil, fmt.Errorf("pilot: the package has more than %d entries: %w; it was not built by trellara pilot-package", lim.EntriesMax, ErrTooLarge)
		}
		if err := safeEntry(h); err != nil {
			return nil, err
		}
		if h.Size < 0 || h.Size > lim.EntryBytesMax {
			return nil, fmt.Errorf("pilot: %s: %d bytes, over the %d-byte limit of one entry: %w; refused before reading it", h.Name, h.Size, lim.EntryBytesMax, ErrTooLarge)
		}
		total += h.Size
		if total > lim.TotalBytesMax {
			return nil, fmt.Errorf("pilot: %s: the entries so far hold %d bytes, over the %d-byte limit of a package: %w", h.Name, total, lim.TotalBytesMax, ErrTooLarge)
		}
		return h, nil
	}
	keep := func(h *tar.Header, max int64) ([]byte, error) {
		if h.Size > max {
			return nil, fmt.Errorf("pilot: %s: %d bytes, over the %d-byte limit of a file the scorecard reads: %w", h.Name, h.Size, max, ErrTooLarge)
		}
		data, err := io.ReadAll(io.LimitReader(tr, max+1))
		if err != nil {
			return nil, fmt.Errorf("pilot: read %s from the package: %w", h.Name, err)
		}
		return data, nil
	}

	h, err := next()
	if err != nil {
		return nil, err
	}
	if h == nil || h.Name != FileManifest {
		return nil, fmt.Errorf("pilot: the package does not start with %s: build it with trellara pilot-package", FileManifest)
	}
	man, err := keep(h, lim.ScoredBytesMax)
	if err != nil {
		return nil, err
	}
	p := &Package{Files: map[string][]byte{}}
	if err := json.Unmarshal(man, &p.Manifest); err != nil {
		return nil, fmt.Errorf("pilot: %s: %w", FileManifest, err)
	}
	if p.Manifest.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("pilot: %s format_version %d: this trellara reads %d", FileManifest, p.Manifest.FormatVersion, FormatVersion)
	}

	h, err = next()
	if err != nil {
		return nil, err
	}
	var sig []byte
	if h != nil && h.Name == FileSignature {
		if sig, err = keep(h, lim.SignatureBytesMax); err != nil {
			return nil, err
		}
		if h, err = next(); err != nil {
			return nil, err
		}
	}
	if p.Signature, err = checkSignature(man, sig, p.Manifest.SigningKey, pub); err != nil {
		return nil, err
	}

	// The manifest is trusted as far as the signature allows; each file is
	// now checked against it as it streams past.
	want := map[string]FileInfo{}
	for _, f := range p.Manifest.Files {
		want[f.Path] = f
	}
	seen := map[string]bool{}
	for ; h != nil; h, err = next() {
		name := h.Name
		f, listed := want[name]
		switch {
		case seen[name]:
			return nil, fmt.Errorf("pilot: %s is in the package twice: it was not built by trellara pilot-package", name)
		case !listed:
			return nil, fmt.Errorf("pilot: %s is in the package but not in %s: it was added after the manifest was written", name, FileManifest)
		}
		seen[name] = true
		hash := sha256.New()
		var n int64
		if Scored[name] {
			data, err := keep(h, lim.ScoredBytesMax)
			if err != nil {
				return nil, err
			}
			hash.Write(data)
			n = int64(len(data))
			p.Files[name] = data
		} else if n, err = io.Copy(hash, tr); err != nil {
			return nil, fmt.Errorf("pilot: read %s from the package: %w", name, err)
		}
		if got := hex.EncodeToString(hash.Sum(nil)); got != f.SHA256 || n != int64(f.Bytes) {
			return nil, fmt.Errorf("pilot: %s: SHA-256 %s (%d bytes), but %s says %s (%d bytes): the file changed after the manifest was written",
				name, got, n, FileManifest, f.SHA256, f.Bytes)
		}
	}
	if err != nil {
		return nil, err
	}
	for _, f := range p.Manifest.Files {
		if !seen[f.Path] {
			return nil, fmt.Errorf("pilot: %s lists %s, which the package lacks", FileManifest, f.Path)
		}
	}
	return p, nil
}

// safeEntry refuses what Write never writes: anything but a regular file,
// and a name that is absolute, climbs out with "..", or is not clean.
func safeEntry(h *tar.Header) error {
	kind := ""
	switch h.Typeflag {
	case tar.TypeReg:
	case tar.TypeSymlink, tar.TypeLink:
		kind = "a link"
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind = "a device or FIFO"
	case tar.TypeDir:
		kind = "a directory"
	default:
		kind = fmt.Sprintf("tar entry type %q", h.Typeflag)
	}
	if kind != "" {
		return fmt.Errorf("pilot: %q is %s: %w; refused", h.Name, kind, ErrUnsafeEntry)
	}
	name := h.Name
	switch {
	case name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\"):
		return fmt.Errorf("pilot: %q is an absolute or non-portable path: %w; refused", name, ErrUnsafeEntry)
	case name == ".." || strings.HasPrefix(name, "../") || strings.HasSuffix(name, "/..") || strings.Contains(name, "/../"):
		return fmt.Errorf("pilot: %q climbs out with \"..\": %w; refused", name, ErrUnsafeEntry)
	case path.Clean(name) != name:
		return fmt.Errorf("pilot: %q is not a clean relative path: %w; refused", name, ErrUnsafeEntry)
	}
	return nil
}

// checkSignature decides the package's Signature. claimed is the manifest's
// signing_key.
func checkSignature(man, sig []byte, claimed string, pub ed25519.PublicKey) (Signature, error) {
	switch {
	case sig == nil && pub == nil:
		return unsignedSignature(), nil
	case sig == nil:
		return Signature{}, fmt.Errorf("pilot: %w, but a public key (%s) was given: nothing shows who built it, and a forger can rewrite its files and sums; "+
			"refused (ask the sender for a package built with pilot-package --signing-key)", ErrUnsigned, sign.KeyID(pub))
	case pub == nil:
		id := claimed
		if id == "" {
			id = "an unnamed key"
		}
		return Signature{State: SignedUnverified, KeyID: claimed, Statement: "signed-by-" + id + ", NOT VERIFIED: no public key was given, so the signature proves nothing yet " +
			"(score it with --public-key FILE holding the sender's public key)"}, nil
	}
	id := sign.KeyID(pub)
	if err := sign.Verify(pub, man, sig); err != nil {
		return Signature{}, fmt.Errorf("pilot: %s: BAD SIGNATURE for key %s (the manifest names %q): %w; the package is refused: "+
			"its manifest was changed after it was signed, or another key signed it", FileSignature, id, claimed, err)
	}
	return Signature{State: SignedVerified, KeyID: id, Statement: "signed-by-" + id + ": the signature over manifest.json verifies with the given public key, " +
		"and every file matches the manifest's SHA-256"}, nil
}
