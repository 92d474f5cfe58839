package pilot

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// IsArchivePath says whether an --output or --package path names the
// gzip'd tar form (.tar.gz, .tgz); any other path is a directory.
func IsArchivePath(path string) bool {
	return strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz")
}

// CheckDirOutput refuses, before any work is done, a directory that
// already holds files: a package is never mixed into another.
func CheckDirOutput(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("pilot: output directory %s: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("pilot: output directory %s is not empty (%d entries); fix: name a new or empty directory, or a .tar.gz file", dir, len(entries))
	}
	return nil
}

// WriteDir writes the package into directory dir (created 0700, or empty):
// the same files, manifest first, as Write puts in the archive.
func (p *Package) WriteDir(dir string) error {
	if err := CheckDirOutput(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pilot: create %s: %w", dir, err)
	}
	// The archive is the one encoding of a package: unpack what Write
	// writes, so the two forms cannot differ.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(p.Write(pw)) }()
	defer pr.Close()
	gz, err := gzip.NewReader(pr)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("pilot: create %s: %w", filepath.Dir(path), err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("pilot: write %s: %w", path, err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pilot: write %s: %w", path, err)
		}
	}
}

// ReadDir reads a package written by WriteDir (or unpacked from an
// archive) with the same checks and limits as Read: its regular files are
// streamed through Read as one archive, manifest first; a link, device or
// other special file is refused by name.
func ReadDir(dir string, pub ed25519.PublicKey) (*Package, error) {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("pilot: %s is not a regular file (%s); a package holds regular files only", path, d.Type())
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		if len(names) > DefaultLimits.EntriesMax {
			return fmt.Errorf("pilot: %s holds more than %d files", dir, DefaultLimits.EntriesMax)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The manifest and its signature first, as Write orders them.
	order := func(n string) int {
		switch n {
		case FileManifest:
			return 0
		case FileSignature:
			return 1
		}
		return 2
	}
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && order(names[j]) < order(names[j-1]); j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	pr, pw := io.Pipe()
	go func() {
		gz := gzip.NewWriter(pw)
		tw := tar.NewWriter(gz)
		err := func() error {
			for _, n := range names {
				f, err := os.Open(filepath.Join(dir, filepath.FromSlash(n)))
				if err != nil {
					return err
				}
				st, err := f.Stat()
				if err == nil {
					err = tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: st.Size(), Typeflag: tar.TypeReg, Format: tar.FormatPAX})
				}
				if err == nil {
					_, err = io.CopyN(tw, f, st.Size())
				}
				f.Close()
				if err != nil {
					return err
				}
			}
			if err := tw.Close(); err != nil {
				return err
			}
			return gz.Close()
		}()
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	return Read(pr, pub)
}
