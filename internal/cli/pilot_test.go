package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/internal/pilot"
	"github.com/trellara/trellara/internal/release/sign"
)

// pilot-package on a real flow: every file the manifest lists is in the
// tarball with that SHA-256, no byte of it holds a planted credential, and
// pilot-scorecard's verdicts follow the files: a CONVERGED last verify at a
// watermark proves claim 3, a DIVERGED one fails it, and a file altered
// without its manifest entry is refused.
func TestPilotPackageAndScorecard(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{NoFsync: true})
	pg.CreateDB(t, "shop")
	pg.CreateDB(t, "shop_copy")
	pg.ExecDB(t, "shop", `CREATE TABLE public.orders (id int PRIMARY KEY, v text)`,
		`INSERT INTO public.orders SELECT g, 'o' || g FROM generate_series(1, 100) g`,
		// Not the flow's: the package must not name them (check.json
		// grades the flow's tables and slot only).
		`CREATE SCHEMA "we;ird"`, `CREATE TABLE `+weirdTable+` (v text)`,
		`CREATE PUBLICATION trellara_other FOR TABLE `+weirdTable)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trellara.yml")
	if out, errOut, code := run(t, "init", "--source-database-url", pg.URL("shop"), "--target-database-url", pg.URL("shop_copy"),
		"--table", "public.orders", "--evaluate", "--output", cfg); code != 0 {
		t.Fatalf("init: %d %s%s", code, out, errOut)
	}
	// The planted credentials: passwords in an env-referenced and a
	// file-referenced URL (the test server trusts local connections, so
	// they connect), and a password-like string in the config itself.
	const srcPw, tgtPw, cfgPw = "Src-Pl4nted-pw-7731", "Tgt-Pl4nted-pw-1177", "Cfg-Pl4nted-pw-4242"
	withPw := func(url, pw string) string { return strings.Replace(url, "postgres@", "postgres:"+pw+"@", 1) }
	t.Setenv("PILOT_SOURCE_URL", withPw(pg.URL("shop"), srcPw))
	tgtFile := filepath.Join(dir, "target-url")
	if err := os.WriteFile(tgtFile, []byte(withPw(pg.URL("shop_copy"), tgtPw)), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	urls := regexp.MustCompile(`(?m)^(\s*database_url:).*$`)
	n := 0
	body := urls.ReplaceAllStringFunc(string(raw), func(line string) string {
		n++
		key := urls.FindStringSubmatch(line)[1]
		if n == 1 {
			return key + ` {env: PILOT_SOURCE_URL}`
		}
		return key + ` {file: "` + tgtFile + `"}`
	})
	if n != 2 {
		t.Fatalf("init wrote %d database_url lines, want 2:\n%s", n, raw)
	}
	body = "# the old password: " + cfgPw + "\n" + body
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "run", "--config", cfg, "--local", "--verify"); code != 0 {
		t.Fatalf("run --local --verify: %d\n%s%s\nconfig:\n%s", code, out, errOut, body)
	}

	// The operator's key, as make release takes it (PKCS#8 PEM), and its
	// public half for the recipient.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile := filepath.Join(dir, "operator.pem"), filepath.Join(dir, "operator.pub")
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	pubPEM, _ := sign.PublicPEM(priv)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	signedBy := "signed-by-" + sign.KeyID(pub)

	v := newJSONValidator(t)
	pkg := filepath.Join(dir, "evidence.tar.gz")
	out, errOut, code := run(t, "pilot-package", "--config", cfg, "--output", pkg, "--format", "json", "--signing-key", keyFile)
	if code != 0 {
		t.Fatalf("pilot-package: exit %d\n%s%s", code, out, errOut)
	}
	v.check(t, "pilot-package", out)
	if !strings.Contains(out, `"signature": "`+signedBy+`"`) {
		t.Errorf("pilot-package --signing-key does not say %s:\n%s", signedBy, out)
	}
	if !strings.Contains(errOut, "pilot: chaos: running") {
		t.Errorf("pilot-package wrote no progress lines on stderr:\n%s", errOut)
	}
	for _, s := range []string{srcPw, tgtPw, cfgPw} {
		if strings.Contains(out+errOut, s) {
			t.Errorf("pilot-package's output holds the planted credential %q", s)
		}
	}

	// Every byte of the tarball, and of the tar inside it.
	gzBytes, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gzBytes))
	if err != nil {
		t.Fatal(err)
	}
	tarBytes, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{srcPw, tgtPw, cfgPw} {
		if bytes.Contains(tarBytes, []byte(s)) || bytes.Contains(gzBytes, []byte(s)) {
			t.Errorf("the package holds the planted credential %q", s)
		}
	}

	// The manifest's checksums, recomputed here from the tar.
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(tarBytes))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	var man pilot.Manifest
	if err := json.Unmarshal(files[pilot.FileManifest], &man); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	listed := map[string]bool{}
	for _, f := range man.Files {
		listed[f.Path] = true
		sum := sha256.Sum256(files[f.Path])
		if _, in := files[f.Path]; !in || hex.EncodeToString(sum[:]) != f.SHA256 || len(files[f.Path]) != f.Bytes {
			t.Errorf("%s: in the tar %v, sha256 %x, manifest says %s (%d bytes)", f.Path, in, sum, f.SHA256, f.Bytes)
		}
	}
	for _, want := range []string{pilot.FileConfig, pilot.FileVersions, pilot.FileSBOM, pilot.FileCheck, pilot.FileStatus,
		pilot.FileLastVerify, pilot.FileChaosJSON, pilot.FileChaosHTML} {
		if !listed[want] {
			t.Errorf("the manifest does not list %s; not run: %+v", want, man.NotRun)
		}
	}
	if len(files) != len(man.Files)+2 {
		t.Errorf("the tar holds %d files, the manifest lists %d (+ itself and its signature)", len(files), len(man.Files))
	}
	var qual bool
	for _, nr := range man.NotRun {
		qual = qual || nr.File == pilot.FileQualification
	}
	if !qual || listed[pilot.FileQualification] {
		t.Errorf("the qualification report is not listed as not run: %+v", man.NotRun)
	}
	if !bytes.Contains(files[pilot.FileConfig], []byte("PILOT_SOURCE_URL")) {
		t.Errorf("the redacted config lost its references:\n%s", files[pilot.FileConfig])
	}

	verdicts := func(m map[string]any) []string {
		var vs []string
		for _, c := range m["claims"].([]any) {
			vs = append(vs, c.(map[string]any)["verdict"].(string))
		}
		return vs
	}
	// Between bounded runs the flow's slot is inactive: the flow at rest,
	// whose log holds the data. The grader knows its own flow's slot, so
	// the grade passes, and claim 1 with it.
	var grade struct{ Grade string }
	if err := json.Unmarshal(files[pilot.FileCheck], &grade); err != nil || (grade.Grade != "A" && grade.Grade != "B") {
		t.Fatalf("check.json grade %q (%v), want A or B for a healthy flow at rest\n%s", grade.Grade, err, files[pilot.FileCheck])
	}
	for _, absent := range []string{"we;ird", `ta\"\"b'le`, "trellara_other"} {
		if bytes.Contains(files[pilot.FileCheck], []byte(absent)) {
			t.Errorf("check.json names %q, which the flow does not capture:\n%s", absent, files[pilot.FileCheck])
		}
	}
	if !bytes.Contains(files[pilot.FileCheck], []byte(`"other_tables": 1`)) || !bytes.Contains(files[pilot.FileCheck], []byte(`"other_publications": 1`)) {
		t.Errorf("check.json does not count what it leaves out:\n%s", files[pilot.FileCheck])
	}
	sc := v.jsonRun(t, 0, "pilot-scorecard", "--config", cfg, "--package", pkg, "--public-key", pubFile)
	if st := sc["signature"].(map[string]any); st["state"] != pilot.SignedVerified || !strings.HasPrefix(st["statement"].(string), signedBy) {
		t.Errorf("scorecard --public-key of a signed package: %v, want %s verified", st, signedBy)
	}
	if got := strings.Join(verdicts(sc), ","); got != "pass,pass,pass,not run" {
		t.Errorf("scorecard of a CONVERGED flow at rest: %s, want pass,pass,pass,not run\n%v", got, sc)
	}
	text, errOut, code := run(t, "pilot-scorecard", "--config", cfg, "--package", pkg)
	if code != 0 || !strings.Contains(text, "claim 1  PASS") || !strings.Contains(text, "claim 3  PASS") || !strings.Contains(text, pilot.FileLastVerify) ||
		!strings.Contains(text, "signature: "+signedBy+", NOT VERIFIED") {
		t.Errorf("text scorecard: exit %d\n%s%s", code, text, errOut)
	}

	// A DIVERGED last verify, with the manifest updated to match, fails
	// claim 3.
	// The package rebuilt from the tar's files, as anyone holding it can;
	// without the operator's key it is written unsigned.
	p := &pilot.Package{Files: map[string][]byte{}, Manifest: man}
	for n, data := range files {
		if n != pilot.FileManifest && n != pilot.FileSignature {
			p.Files[n] = data
		}
	}
	p.Manifest.Files = append([]pilot.FileInfo{}, man.Files...)
	lv := bytes.Replace(p.Files[pilot.FileLastVerify], []byte(`"verdict": "CONVERGED"`), []byte(`"verdict": "DIVERGED"`), 1)
	if bytes.Equal(lv, p.Files[pilot.FileLastVerify]) {
		t.Fatalf("last-verify.json has no CONVERGED verdict:\n%s", lv)
	}
	p.Put(pilot.FileLastVerify, "", lv)
	// A grade D check.json fails claim 1: the verdict is the file's.
	p.Put(pilot.FileCheck, "", bytes.Replace(p.Files[pilot.FileCheck], []byte(`"grade": "`+grade.Grade+`"`), []byte(`"grade": "D"`), 1))
	diverged := filepath.Join(dir, "diverged.tar.gz")
	writePackage(t, p, diverged)
	sc = v.jsonRun(t, ExitFindings, "pilot-scorecard", "--config", cfg, "--package", diverged)
	if got := strings.Join(verdicts(sc), ","); got != "fail,pass,fail,not run" {
		t.Errorf("grade D and a DIVERGED last verify: %s, want fail,pass,fail,not run", got)
	}
	if st := sc["signature"].(map[string]any); st["state"] != pilot.Unsigned {
		t.Errorf("a rewritten package is not stated UNSIGNED: %v", st)
	}
	// Under the operator's public key the rewrite is refused.
	if out, errOut, code := run(t, "pilot-scorecard", "--config", cfg, "--package", diverged, "--public-key", pubFile); code != ExitError || !strings.Contains(errOut, "UNSIGNED") {
		t.Errorf("a rewritten package under --public-key: exit %d, want %d saying UNSIGNED\n%s%s", code, ExitError, out, errOut)
	}

	// The same change without the manifest's digest: refused.
	p.Files[pilot.FileLastVerify] = lv
	p.Manifest.Files = append([]pilot.FileInfo{}, man.Files...)
	tampered := filepath.Join(dir, "tampered.tar.gz")
	writePackage(t, p, tampered)
	if out, errOut, code := run(t, "pilot-scorecard", "--config", cfg, "--package", tampered); code != ExitError || !strings.Contains(errOut, "the file changed after the manifest was written") {
		t.Errorf("a tampered package: exit %d, want %d naming the altered file\n%s%s", code, ExitError, out, errOut)
	}
}

func writePackage(t *testing.T, p *pilot.Package, path string) {
	t.Helper()
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}
