package pilot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/trellara/trellara/internal/release/sign"
)

type entry struct {
	name string
	data []byte
	kind byte // tar.TypeReg when 0
}

// tarGz writes entries as a package would be, or as an attacker would.
func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		kind := e.kind
		if kind == 0 {
			kind = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: kind, Size: int64(len(e.data))}
		if kind != tar.TypeReg {
			h.Size = 0
			h.Linkname = "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// untar returns a package's entries in order.
func untar(t *testing.T, pkg []byte) []entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out = append(out, entry{name: h.Name, data: data})
	}
}

func gradedPackage(t *testing.T, key ed25519.PrivateKey) []byte {
	t.Helper()
	p := &Package{Files: map[string][]byte{}, Manifest: Manifest{FormatVersion: FormatVersion, Flow: "sales", Files: []FileInfo{}, NotRun: []NotRun{}}}
	p.Put(FileCheck, "grade", []byte(`{"grade": "D", "headline": "slot holds WAL"}`))
	p.Put(FileChaosHTML, "report", []byte(`<html>not scored</html>`))
	if key != nil {
		p.SignWith(key)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// forge is the attack: check.json set to grade A and every
// SHA-256 in manifest.json recomputed; the signature, if any, kept as it
// was (a forger cannot make a new one).
func forge(t *testing.T, pkg []byte, keepSignature bool) []byte {
	t.Helper()
	es := untar(t, pkg)
	var man Manifest
	if err := json.Unmarshal(es[0].data, &man); err != nil {
		t.Fatal(err)
	}
	var out []entry
	for _, e := range es {
		if e.name == FileCheck {
			e.data = []byte(`{"grade": "A", "headline": "no findings"}`)
		}
		if e.name == FileSignature && !keepSignature {
			continue
		}
		out = append(out, e)
	}
	for i, f := range man.Files {
		for _, e := range out {
			if e.name == f.Path {
				sum := sha256.Sum256(e.data)
				man.Files[i].SHA256, man.Files[i].Bytes = hex.EncodeToString(sum[:]), len(e.data)
			}
		}
	}
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out[0].data = append(data, '\n')
	return tarGz(t, out...)
}

// The forgery of issue 30 is refused, by name, when the package is signed
// and the recipient gives the sender's public key; stripped of its
// signature it is refused under the key, and without one it is scored but
// stated UNSIGNED, never "not altered".
//
// Mutation tried: checkSignature returning SignedVerified without calling
// sign.Verify — the forged-and-signed case then scores grade A (red).
func TestSignedPackageForgeryDetected(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signed := gradedPackage(t, key)

	p, err := Read(bytes.NewReader(signed), pub)
	if err != nil {
		t.Fatalf("an intact signed package: %v", err)
	}
	want := "signed-by-" + sign.KeyID(pub)
	if p.Signature.State != SignedVerified || !strings.HasPrefix(p.Signature.Statement, want) {
		t.Errorf("intact signed package: %+v, want %s verified", p.Signature, want)
	}
	if _, ok := p.Files[FileChaosHTML]; ok {
		t.Errorf("Read kept %s, which the scorecard does not parse", FileChaosHTML)
	}
	var text bytes.Buffer
	if err := Score(p, "signed.tar.gz").RenderText(&text); err != nil || !strings.Contains(text.String(), "signature: "+want) {
		t.Errorf("the text scorecard does not state %s (%v):\n%s", want, err, text.String())
	}

	forged := forge(t, signed, true)
	if _, err := Read(bytes.NewReader(forged), pub); !errors.Is(err, sign.ErrBadSignature) || !strings.Contains(err.Error(), "BAD SIGNATURE") {
		t.Errorf("the forged, signed package: %v, want a refusal naming the bad signature", err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := Read(bytes.NewReader(signed), other); !errors.Is(err, sign.ErrBadSignature) {
		t.Errorf("a package signed by another key: %v, want ErrBadSignature", err)
	}
	stripped := forge(t, signed, false)
	if _, err := Read(bytes.NewReader(stripped), pub); !errors.Is(err, ErrUnsigned) {
		t.Errorf("the forgery with its signature stripped, under a public key: %v, want ErrUnsigned", err)
	}

	for name, pkg := range map[string][]byte{"forged unsigned": forge(t, gradedPackage(t, nil), false), "stripped": stripped} {
		p, err := Read(bytes.NewReader(pkg), nil)
		if err != nil {
			t.Fatalf("%s, no public key: %v", name, err)
		}
		sc := Score(p, name)
		js, _ := json.Marshal(sc)
		text.Reset()
		_ = sc.RenderText(&text)
		for form, out := range map[string]string{"json": string(js), "text": text.String()} {
			if !strings.Contains(out, "UNSIGNED") || strings.Contains(out, "not altered") {
				t.Errorf("%s, %s: does not state UNSIGNED, or claims not altered:\n%s", name, form, out)
			}
		}
	}
	// Signed but read without a key: said, not trusted.
	p, err = Read(bytes.NewReader(signed), nil)
	if err != nil || p.Signature.State != SignedUnverified || !strings.Contains(p.Signature.Statement, "NOT VERIFIED") {
		t.Errorf("a signed package read without a key: %+v %v", p.Signature, err)
	}
}

// Read refuses what pilot-package never writes, naming the entry.
//
// Mutation tried: safeEntry returning nil — every case but the limits goes
// red.
func TestReadRefusesUnsafeEntries(t *testing.T) {
	man := func(paths ...string) entry {
		m := Manifest{FormatVersion: FormatVersion, Files: []FileInfo{}}
		for _, p := range paths {
			sum := sha256.Sum256([]byte("x"))
			m.Files = append(m.Files, FileInfo{Path: p, SHA256: hex.EncodeToString(sum[:]), Bytes: 1})
		}
		data, _ := json.Marshal(m)
		return entry{name: FileManifest, data: data}
	}
	x := []byte("x")
	small := DefaultLimits
	small.EntriesMax, small.TotalBytesMax = 4, 1<<10
	for _, c := range []struct {
		name    string
		entries []entry
		lim     Limits
		want    error
		says    string
	}{
		{"symlink", []entry{man("a"), {name: "a", kind: tar.TypeSymlink}}, DefaultLimits, ErrUnsafeEntry, `"a" is a link`},
		{"hard link", []entry{man("a"), {name: "a", kind: tar.TypeLink}}, DefaultLimits, ErrUnsafeEntry, `"a" is a link`},
		{"device", []entry{man("a"), {name: "a", kind: tar.TypeChar}}, DefaultLimits, ErrUnsafeEntry, "device"},
		{"fifo", []entry{man("a"), {name: "a", kind: tar.TypeFifo}}, DefaultLimits, ErrUnsafeEntry, "device or FIFO"},
		{"directory", []entry{man("a"), {name: "d/", kind: tar.TypeDir}}, DefaultLimits, ErrUnsafeEntry, "directory"},
		{"absolute", []entry{man("/etc/cron.d/x"), {name: "/etc/cron.d/x", data: x}}, DefaultLimits, ErrUnsafeEntry, "absolute"},
		{"dot-dot", []entry{man("../x"), {name: "../x", data: x}}, DefaultLimits, ErrUnsafeEntry, `".."`},
		{"inner dot-dot", []entry{man("a/../../x"), {name: "a/../../x", data: x}}, DefaultLimits, ErrUnsafeEntry, `".."`},
		{"too many", []entry{man("a", "b", "c", "d"), {name: "a", data: x}, {name: "b", data: x}, {name: "c", data: x}, {name: "d", data: x}}, small, ErrTooLarge, "more than 4 entries"},
		{"total", []entry{man("a", "b"), {name: "a", data: bytes.Repeat(x, 1500)}, {name: "b", data: bytes.Repeat(x, 1500)}}, small, ErrTooLarge, "over the 1024-byte limit of a package"},
		{"manifest not first", []entry{{name: "a", data: x}, man("a")}, DefaultLimits, nil, "does not start with manifest.json"},
		{"twice", []entry{man("a"), {name: "a", data: x}, {name: "a", data: x}}, DefaultLimits, nil, "twice"},
	} {
		_, err := ReadLimited(bytes.NewReader(tarGz(t, c.entries...)), nil, c.lim)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}

// bombHelperEnv makes the test binary, re-executed, read one package and
// print Read's error: a child process whose peak RSS the parent reads.
const bombHelperEnv = "TRELLARA_PILOT_READ_HELPER"

func TestReadHelperProcess(t *testing.T) {
	path := os.Getenv(bombHelperEnv)
	if path == "" {
		t.Skip("the child of TestReadRefusesBomb")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Read(f, nil)
	fmt.Printf("READ-ERROR: %v\n", err)
}

// writeBomb writes a ~1 MiB .tar.gz: manifest.json (as Write puts it
// first, so the reader reaches the big entry), then one entry, name,
// holding 1 GiB of zeros. It is gzip members concatenated (gzip readers
// join them), one deflate of 1 MiB of zeros repeated, so it costs no
// compression time.
func writeBomb(t *testing.T, path, name string) int64 {
	t.Helper()
	const size = 1 << 30
	member := func(data []byte) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write(data)
		zw.Close()
		return b.Bytes()
	}
	man, _ := json.Marshal(Manifest{FormatVersion: FormatVersion, Files: []FileInfo{{Path: name, SHA256: strings.Repeat("0", 64), Bytes: size}}})
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: FileManifest, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(man))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(man)
	// WriteHeader pads the manifest and writes the big entry's header at
	// once; its body follows as the repeated members.
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: size}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	out.Write(member(hdr.Bytes()))
	chunk := member(make([]byte, 1<<20))
	for range size >> 20 {
		out.Write(chunk)
	}
	out.Write(member(make([]byte, 1024))) // the tar's end: two zero blocks
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return int64(out.Len())
}

// A 1 MiB package holding 1 GiB of zeros is refused with a clear error and
// the reading process's peak RSS stays under 64 MiB: each entry's size is
// checked before it is read, and an entry is streamed through its hash,
// never held.
//
// Mutation tried: Read with io.ReadAll on every entry and no size check
// (0335858's) — the child's peak RSS goes past 1 GiB (red).
func TestReadRefusesBomb(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileChaosHTML, FileCheck} {
		bomb := filepath.Join(t.TempDir(), "bomb.tar.gz")
		n := writeBomb(t, bomb, name)
		if n > 2<<20 {
			t.Fatalf("the bomb is %d bytes, want about 1 MiB", n)
		}
		cmd := exec.Command(exe, "-test.run=^TestReadHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), bombHelperEnv+"="+bomb)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: the child failed: %v\n%s", name, err, out)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		rssBytes := ru.Maxrss << 10 // kilobytes on Linux
		t.Logf("%s: a %d-byte package of 1 GiB: peak RSS %d KiB; %s", name, n, ru.Maxrss, firstLine(string(out), "READ-ERROR"))
		if rssBytes >= 64<<20 {
			t.Errorf("%s: peak RSS %d MiB reading a 1 GiB bomb, want under 64 MiB", name, rssBytes>>20)
		}
		if !strings.Contains(string(out), "READ-ERROR: pilot: "+name+": 1073741824 bytes, over the") {
			t.Errorf("%s: the bomb was not refused by its size:\n%s", name, out)
		}
	}
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
