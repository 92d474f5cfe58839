package sign

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Statement is an in-toto v1 Statement (https://in-toto.io/Statement/v1)
// whose predicate says how the release was built.
type Statement struct {
	Type          string    `json:"_type"`
	Subject       []Subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     Predicate `json:"predicate"`
}

// Subject is one artifact and its digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Predicate is the build: what went in, with which tools, by which command.
type Predicate struct {
	Inputs    Inputs            `json:"inputs"`
	Toolchain map[string]string `json:"toolchain"`
	Command   string            `json:"build_command"`
	BuiltAt   string            `json:"built_at"`
}

// Inputs identify the source the release was built from.
type Inputs struct {
	Commit    string `json:"source_commit"`
	Dirty     bool   `json:"dirty"`
	Version   string `json:"version"`
	GoSumHash string `json:"go_sum_sha256"`
}

// PredicateType names this predicate's schema.
const PredicateType = "https://trellara.dev/provenance/build/v1"

// FileSHA256 is the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Provenance builds the statement over artifacts (named by base name);
// goSum is the module's go.sum, hashed as an input.
func Provenance(artifacts []string, goSum string, in Inputs, toolchain map[string]string, command, builtAt string) (*Statement, error) {
	st := &Statement{Type: "https://in-toto.io/Statement/v1", PredicateType: PredicateType, Subject: []Subject{},
		Predicate: Predicate{Inputs: in, Toolchain: toolchain, Command: command, BuiltAt: builtAt}}
	for _, a := range artifacts {
		d, err := FileSHA256(a)
		if err != nil {
			return nil, err
		}
		st.Subject = append(st.Subject, Subject{Name: filepath.Base(a), Digest: map[string]string{"sha256": d}})
	}
	d, err := FileSHA256(goSum)
	if err != nil {
		return nil, err
	}
	st.Predicate.Inputs.GoSumHash = d
	return st, nil
}

// Marshal is the statement's file form.
func (s *Statement) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	return append(b, '\n'), err
}
