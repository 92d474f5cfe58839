// Package sbom writes a CycloneDX 1.5 JSON software bill of materials for
// Trellara's Go binaries from the module information the Go linker embeds
// in each of them — the same data `go version -m BINARY` prints — so it
// describes exactly what was built, needs no network and no go.mod.
//
// Shape of the document:
//
//	metadata.component   trellara, the product, at the release version
//	components           one "application" per binary (name, SHA-256 of
//	                     the file, Go version and build settings as
//	                     properties), then one "library" per Go module any
//	                     binary links, plus "std" for the Go standard library
//	dependencies         product -> binaries; each binary -> the modules
//	                     it links (the linker records no deeper graph)
//
// Module hashes are the go.sum "h1:" hash (SHA-256 over the module's file
// tree, see golang.org/x/mod/sumdb/dirhash) in hex, the convention of other
// CycloneDX Go generators; they identify the module's source, not an
// archive. Licences are not included: they would need the module sources.
//
// The output is deterministic: components are sorted, the timestamp is the
// caller's (the commit time) and the serial number is derived from the
// content.
package sbom
