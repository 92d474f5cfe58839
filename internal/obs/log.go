package obs

import (
	"io"
	"log/slog"
)

// NewLogger is the one log format of every command and mode: JSON lines on
// w. A time.Duration attribute is written in human units ("1.5s", "2m0s"),
// never as the integer nanoseconds slog's JSON handler would print.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: humanDurations}))
}

func humanDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
