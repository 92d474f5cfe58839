package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trellara/trellara/internal/flow"
)

// progressDisplay renders `run --local` progress. On a terminal it is one
// line rewritten in place; anywhere else (a file, a pipe, a log collector)
// it is a plain line every plainEvery, with no carriage return or escape
// code. finish ends the display so that what follows starts on a line of
// its own.
type progressDisplay struct {
	w        io.Writer
	tty      bool
	every    time.Duration
	last     time.Time
	inPlace  bool // a line is on screen without its newline
	lastText string
}

// plainEvery spaces the plain lines written to a non-terminal.
const plainEvery = 5 * time.Second

func newProgressDisplay(w io.Writer) *progressDisplay {
	d := &progressDisplay{w: w, tty: isTerminal(w), every: plainEvery}
	if d.tty {
		d.every = 250 * time.Millisecond
	}
	return d
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (d *progressDisplay) update(p flow.Progress) {
	if p.Phase == "done" {
		d.finish()
		return
	}
	var text string
	switch {
	case p.Snapshot != nil:
		s := p.Snapshot
		text = fmt.Sprintf("snapshot %s: %d rows, %.1f MB, %.0f rows/s, ETA %.0fs", s.Table, s.Rows, float64(s.Bytes)/1e6, s.RowsPerSecond, s.ETASeconds)
	case p.Phase == "verifying":
		text = "verifying convergence..."
	default:
		text = fmt.Sprintf("streaming: this run %d units published · flow total %d transactions applied · checkpoint %s → %s", p.Published, p.Applied, p.Checkpoint, p.Target)
	}
	if text == d.lastText || (time.Since(d.last) < d.every && p.Phase != "verifying") {
		return
	}
	d.last, d.lastText = time.Now(), text
	if d.tty {
		fmt.Fprint(d.w, "\r\033[K"+text)
		d.inPlace = true
		return
	}
	fmt.Fprintln(d.w, text)
}

// finish clears an in-place line, so an error or the report never lands
// glued to it.
func (d *progressDisplay) finish() {
	if d.inPlace {
		fmt.Fprint(d.w, "\r\033[K")
		d.inPlace = false
	}
}
