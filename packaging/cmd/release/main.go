// Command release signs and verifies a release's SHA256SUMS and writes
// its build provenance (internal/release/sign). `make release` runs it;
// packaging/README.md documents each step.
//
//	release sign -key KEY -o dist/SHA256SUMS.sig -pub dist/trellara-release.pub dist/SHA256SUMS
//	release verify -pub trellara-release.pub -sig SHA256SUMS.sig SHA256SUMS
//	release provenance -o dist/provenance.intoto.json -version V -commit C [-dirty] -command CMD ARTIFACT...
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/trellara/trellara/internal/release/sign"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "sign":
		err = signCmd(os.Args[2:])
	case "verify":
		err = verifyCmd(os.Args[2:])
	case "provenance":
		err = provenanceCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release "+os.Args[1]+": "+err.Error())
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release sign -key KEY -o SIG [-pub PUB] FILE | release verify -pub PUB -sig SIG FILE | release provenance -o OUT -version V -commit C [-dirty] -command CMD ARTIFACT...")
	os.Exit(2)
}

func signCmd(args []string) error {
	fs := flag.NewFlagSet("sign", flag.ExitOnError)
	key := fs.String("key", "", "ed25519 private key: PEM (PKCS#8) or raw 32/64 bytes (bytes, hex or base64)")
	out := fs.String("o", "", "signature file to write")
	pub := fs.String("pub", "", "also write the public key (PEM) here")
	_ = fs.Parse(args)
	if *key == "" {
		return fmt.Errorf("no signing key: set RELEASE_KEY=/path/to/ed25519.pem (make release RELEASE_KEY=...); create one with: openssl genpkey -algorithm ed25519 -out release.pem")
	}
	if *out == "" || fs.NArg() != 1 {
		usage()
	}
	k, err := sign.LoadPrivateKey(*key)
	if err != nil {
		return err
	}
	msg, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, sign.Sign(k, msg), 0o644); err != nil {
		return err
	}
	if *pub != "" {
		p, err := sign.PublicPEM(k)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*pub, p, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("signed %s: %s\n", fs.Arg(0), *out)
	return nil
}

// verifyCmd checks the signature over the sums file, then every file the
// sums list that is present beside it.
func verifyCmd(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	pubPath := fs.String("pub", "", "the release's ed25519 public key (PEM or raw)")
	sigPath := fs.String("sig", "", "the signature file (default FILE.sig)")
	_ = fs.Parse(args)
	if *pubPath == "" || fs.NArg() != 1 {
		usage()
	}
	sums := fs.Arg(0)
	if *sigPath == "" {
		*sigPath = sums + ".sig"
	}
	pd, err := os.ReadFile(*pubPath)
	if err != nil {
		return err
	}
	pub, err := sign.ParsePublicKey(pd)
	if err != nil {
		return fmt.Errorf("public key %s: %w", *pubPath, err)
	}
	msg, err := os.ReadFile(sums)
	if err != nil {
		return err
	}
	sig, err := os.ReadFile(*sigPath)
	if err != nil {
		return err
	}
	if err := sign.Verify(pub, msg, sig); err != nil {
		return fmt.Errorf("%s (signature %s, key %s): %w", sums, *sigPath, *pubPath, err)
	}
	fmt.Printf("%s: signature OK\n", sums)
	dir := filepath.Dir(sums)
	sc := bufio.NewScanner(bytes.NewReader(msg))
	var bad []string
	for sc.Scan() {
		want, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			return fmt.Errorf("%s: line %q is not \"<sha256>  <file>\"", sums, sc.Text())
		}
		got, err := sign.FileSHA256(filepath.Join(dir, name))
		switch {
		case os.IsNotExist(err):
			fmt.Printf("%s: not here, not checked\n", name)
		case err != nil:
			return err
		case got != want:
			bad = append(bad, name)
			fmt.Printf("%s: FAILED (sha256 %s, SHA256SUMS says %s)\n", name, got, want)
		default:
			fmt.Printf("%s: OK\n", name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d files do not match the signed %s: %s", len(bad), sums, strings.Join(bad, ", "))
	}
	return nil
}

func provenanceCmd(args []string) error {
	fs := flag.NewFlagSet("provenance", flag.ExitOnError)
	out := fs.String("o", "", "statement file to write")
	version := fs.String("version", "", "git describe output the binaries carry")
	commit := fs.String("commit", "", "source commit")
	dirty := fs.Bool("dirty", false, "the work tree had uncommitted changes")
	goSum := fs.String("go-sum", "go.sum", "the module's go.sum")
	command := fs.String("command", "make release", "the build command")
	stamp := fs.Int64("time", 0, "build time in unix seconds (the commit time, so rebuilds are identical)")
	_ = fs.Parse(args)
	if *out == "" || *commit == "" || fs.NArg() == 0 {
		usage()
	}
	builtAt := time.Now().UTC()
	if *stamp > 0 {
		builtAt = time.Unix(*stamp, 0).UTC()
	}
	st, err := sign.Provenance(fs.Args(), *goSum, sign.Inputs{Commit: *commit, Dirty: *dirty, Version: *version}, toolchain(), *command, builtAt.Format(time.RFC3339))
	if err != nil {
		return err
	}
	b, err := st.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d artifacts\n", *out, len(st.Subject))
	return nil
}

// toolchain names the tools' versions; a tool that is not installed is
// recorded as such.
func toolchain() map[string]string {
	tc := map[string]string{"go": runtime.Version()}
	for name, argv := range map[string][]string{
		"protoc":    {"protoc", "--version"},
		"gcc":       {"gcc", "--version"},
		"pg_config": {os.Getenv("PG_CONFIG"), "--version"},
	} {
		if argv[0] == "" {
			continue
		}
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			tc[name] = "not available: " + err.Error()
			continue
		}
		tc[name], _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	return tc
}
