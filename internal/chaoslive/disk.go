package chaoslive

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// maxFillBytes bounds the filesystem a disk-full fault may fill: only a
// size-limited one made for the purpose (a tmpfs or loop mount under
// transport.local.dir), never the machine's own disk.
const maxFillBytes = 4 << 30

func ballastPath(dir string) string { return filepath.Join(dir, ".chaos-ballast") }

// diskStatus says why a disk-full fault cannot be injected under dir, or
// "" when it can.
func diskStatus(dir string) string {
	p := dir
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(p, &st); err == nil {
			total := uint64(st.Blocks) * uint64(st.Bsize)
			if total > maxFillBytes {
				return fmt.Sprintf("not available: transport.local.dir (%s) is on a %.1f GiB filesystem; chaos live fills only a size-limited one (at most 4 GiB): put the directory on one, e.g. mount -t tmpfs -o size=512m tmpfs %s (root), or a loop-mounted file system", dir, float64(total)/(1<<30), dir)
			}
			return ""
		} else if !errors.Is(err, syscall.ENOENT) {
			return fmt.Sprintf("not available: statfs %s: %v", p, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "not available: no existing directory above " + dir
		}
		p = parent
	}
}

// fillDisk writes zeros to path until the filesystem is full and returns
// how many bytes it took.
func fillDisk(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("disk full: create %s: %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for n < maxFillBytes {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("disk full: write %s: %w", path, err)
		}
	}
	return n, fmt.Errorf("disk full: wrote %d bytes to %s without filling its filesystem", n, path)
}
