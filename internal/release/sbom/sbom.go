package sbom

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// Document is the subset of the CycloneDX 1.5 JSON model this package
// writes (https://cyclonedx.org/docs/1.5/json/).
type Document struct {
	BOMFormat    string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	SerialNumber string       `json:"serialNumber"`
	Version      int          `json:"version"`
	Metadata     Metadata     `json:"metadata"`
	Components   []Component  `json:"components"`
	Dependencies []Dependency `json:"dependencies"`
}

// Metadata describes the product the BOM is about and how it was made.
type Metadata struct {
	Timestamp string    `json:"timestamp"`
	Tools     Tools     `json:"tools"`
	Component Component `json:"component"`
}

// Tools lists the generator (CycloneDX 1.5 form: tools as components).
type Tools struct {
	Components []Component `json:"components"`
}

// Component is an application (a binary) or a library (a Go module).
type Component struct {
	Type       string     `json:"type"`
	BOMRef     string     `json:"bom-ref,omitempty"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

// Hash is one digest of a component.
type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

// Property is a name/value pair outside the core model.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Dependency says which components ref depends on.
type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// Options names the product and when it was built.
type Options struct {
	Product   string    // "trellara"
	Version   string    // git describe output, as stamped into the binaries
	Module    string    // the main module path, for the product's purl
	Timestamp time.Time // the commit time, so rebuilds are identical
	Tool      string    // generator name and version for metadata.tools
}

// Generate reads the build information of each binary and returns the BOM.
func Generate(binaries []string, opts Options) (*Document, error) {
	if len(binaries) == 0 {
		return nil, fmt.Errorf("sbom: no binaries given")
	}
	product := Component{
		Type:    "application",
		BOMRef:  "pkg:golang/" + opts.Module + "@" + opts.Version,
		Name:    opts.Product,
		Version: opts.Version,
		PURL:    "pkg:golang/" + opts.Module + "@" + opts.Version,
	}
	doc := &Document{
		BOMFormat:   "CycloneDX",
		SpecVersion: "1.5",
		Version:     1,
		Metadata: Metadata{
			Timestamp: opts.Timestamp.UTC().Format(time.RFC3339),
			Tools:     Tools{Components: []Component{{Type: "application", Name: opts.Tool}}},
			Component: product,
		},
	}
	libs := map[string]Component{}
	productDep := Dependency{Ref: product.BOMRef}
	var appDeps []Dependency
	for _, path := range binaries {
		app, refs, err := binary(path, opts, libs)
		if err != nil {
			return nil, err
		}
		doc.Components = append(doc.Components, app)
		productDep.DependsOn = append(productDep.DependsOn, app.BOMRef)
		appDeps = append(appDeps, Dependency{Ref: app.BOMRef, DependsOn: refs})
	}
	libRefs := make([]string, 0, len(libs))
	for ref := range libs {
		libRefs = append(libRefs, ref)
	}
	sort.Strings(libRefs)
	for _, ref := range libRefs {
		doc.Components = append(doc.Components, libs[ref])
	}
	doc.Dependencies = append([]Dependency{productDep}, appDeps...)
	// Libraries depend on nothing the linker recorded; CycloneDX wants
	// every component listed, with an empty dependsOn meaning "none known".
	for _, ref := range libRefs {
		doc.Dependencies = append(doc.Dependencies, Dependency{Ref: ref, DependsOn: []string{}})
	}
	serial, err := serialNumber(doc)
	if err != nil {
		return nil, err
	}
	doc.SerialNumber = serial
	return doc, nil
}

// binary describes one binary and adds the modules it links to libs,
// returning their refs.
func binary(path string, opts Options, libs map[string]Component) (Component, []string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return Component{}, nil, fmt.Errorf("sbom: %s: no Go build information: %w", path, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return Component{}, nil, err
	}
	name := filepath.Base(path)
	app := Component{
		Type:    "application",
		BOMRef:  "binary:" + name,
		Name:    name,
		Version: opts.Version,
		Hashes:  []Hash{{Alg: "SHA-256", Content: sum}},
		Properties: []Property{
			{Name: "trellara:go:package", Value: info.Path},
			{Name: "trellara:go:version", Value: info.GoVersion},
		},
	}
	for _, s := range info.Settings {
		app.Properties = append(app.Properties, Property{Name: "trellara:go:build:" + s.Key, Value: s.Value})
	}

	std := Component{
		Type:    "library",
		BOMRef:  "pkg:golang/std@" + info.GoVersion,
		Name:    "std",
		Version: info.GoVersion,
		PURL:    "pkg:golang/std@" + info.GoVersion,
	}
	libs[std.BOMRef] = std
	refs := []string{std.BOMRef}
	for _, dep := range info.Deps {
		lib, err := module(dep)
		if err != nil {
			return Component{}, nil, fmt.Errorf("sbom: %s: %w", path, err)
		}
		libs[lib.BOMRef] = lib
		refs = append(refs, lib.BOMRef)
	}
	sort.Strings(refs)
	return app, refs, nil
}

// module turns one linked module into a library component. A replaced
// module is listed as what was actually built (the replacement), naming
// the original in a property.
func module(dep *debug.Module) (Component, error) {
	m := dep
	var props []Property
	if dep.Replace != nil {
		props = append(props, Property{Name: "trellara:go:replaces", Value: dep.Path + "@" + dep.Version})
		m = dep.Replace
	}
	c := Component{
		Type:       "library",
		BOMRef:     "pkg:golang/" + m.Path + "@" + m.Version,
		Name:       m.Path,
		Version:    m.Version,
		PURL:       "pkg:golang/" + m.Path + "@" + m.Version,
		Properties: props,
	}
	if m.Version == "" || m.Version == "(devel)" {
		// A local directory replacement has no version or hash.
		c.BOMRef = "pkg:golang/" + m.Path
		c.PURL = ""
		c.Version = ""
	}
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		raw, err := base64.StdEncoding.DecodeString(h)
		if err != nil || len(raw) != sha256.Size {
			return Component{}, fmt.Errorf("module %s@%s: malformed hash %q", m.Path, m.Version, m.Sum)
		}
		c.Hashes = []Hash{{Alg: "SHA-256", Content: hex.EncodeToString(raw)}}
	}
	return c, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("sbom: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// serialNumber derives the urn:uuid from the document's content (RFC 9562
// version 8, the "custom" layout), so the same binaries always get the same
// serial number and different ones never share it.
func serialNumber(doc *Document) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	u := h[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// Write encodes the document as indented JSON.
func (d *Document) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
