// Command sbom writes a CycloneDX 1.5 JSON SBOM for Trellara's Go binaries
// from the build information embedded in them. `make packages` runs it; see
// internal/release/sbom for what the document contains.
//
//	sbom -version "$(git describe --tags --always --dirty)" -time UNIX \
//	     -o dist/trellara.cdx.json bin/trellara bin/trellara-check bin/trellara-full
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/trellara/trellara/internal/release/sbom"
)

func main() {
	version := flag.String("version", "", "product version (git describe output, as stamped into the binaries)")
	stamp := flag.Int64("time", 0, "BOM timestamp in unix seconds (the commit time, so rebuilds are identical)")
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	if *version == "" || *stamp <= 0 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: sbom -version V -time UNIX [-o FILE] BINARY...")
		os.Exit(2)
	}
	doc, err := sbom.Generate(flag.Args(), sbom.Options{
		Product:   "trellara",
		Version:   *version,
		Module:    "github.com/trellara/trellara",
		Timestamp: time.Unix(*stamp, 0),
		Tool:      "trellara packaging/cmd/sbom",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var buf bytes.Buffer
	if err := doc.Write(&buf); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(buf.Bytes())
	} else {
		err = os.WriteFile(*out, buf.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}
