package lakeread

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
)

// File is an open table file: random access and its size, which is all
// Parquet (footer first) and Avro need.
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Opener opens a file of the table by its location as the metadata and
// manifests write it (file:///..., s3://bucket/key, ...). An Opener for
// another scheme is the only thing a new kind of warehouse needs.
type Opener interface {
	Open(ctx context.Context, location string) (File, error)
}

// FileOpener opens file:// locations (file:///abs/path, and file:/abs/path
// as Java writers spell it) and plain absolute paths on the local file
// system. Any other scheme is refused with ErrUnsupported.
type FileOpener struct{}

// Open implements Opener.
func (FileOpener) Open(_ context.Context, location string) (File, error) {
	p, err := LocalPath(location)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return &osFile{File: f, size: st.Size()}, nil
}

type osFile struct {
	*os.File
	size int64
}

func (f *osFile) Size() int64 { return f.size }

// LocalPath is the local path of a file:// location or an absolute path.
func LocalPath(location string) (string, error) {
	if strings.HasPrefix(location, "/") {
		return location, nil
	}
	u, err := url.Parse(location)
	if err != nil {
		return "", fmt.Errorf("location %q: %w", location, err)
	}
	if u.Scheme != "file" {
		return "", unsupported("location %q: scheme %q (this reader opens file:// locations; an Opener for %s:// is not built)", location, u.Scheme, u.Scheme)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", unsupported("location %q: a file:// location with host %q (write file:///absolute/path)", location, u.Host)
	}
	if !strings.HasPrefix(u.Path, "/") {
		return "", unsupported("location %q: not an absolute path", location)
	}
	return u.Path, nil
}

// readAll reads a whole file, refusing one larger than limitBytes.
func readAll(ctx context.Context, o Opener, location string, limitBytes int64) ([]byte, error) {
	f, err := o.Open(ctx, location)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := f.Size()
	if n > limitBytes {
		return nil, unsupported("%d bytes, over the reader's limit of %d for this kind of file", n, limitBytes)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
