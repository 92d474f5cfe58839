package check

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/trellara/trellara/internal/config"
	"github.com/trellara/trellara/lsn"
)

// LSN is a WAL position (the repository's one type for it).
type LSN = lsn.LSN

// parseLSN reads PostgreSQL's "X/Y" hex form.
func parseLSN(s string) (LSN, error) {
	v, err := lsn.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("check: %w", err)
	}
	return v, nil
}

// fmtBytes renders a byte count with a binary unit, as PostgreSQL's
// pg_size_pretty does (kB = 1024 bytes).
func fmtBytes(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	v := float64(n)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := fmt.Sprintf("%.0f %s", v, units[i])
	if i > 0 && v < 10 {
		s = fmt.Sprintf("%.1f %s", v, units[i])
	}
	if neg {
		s = "-" + s
	}
	return s
}

func fmtRate(bytesPerSecond float64) string {
	return fmtBytes(int64(math.Round(bytesPerSecond*3600))) + "/h"
}

// fmtDuration renders coarse durations the way an operator reads them:
// 2h14m, 36h, 3d4h, 45s.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		m := int(d.Minutes()) - 60*h
		if m == 0 || h >= 10 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days := int(d.Hours()) / 24
		return fmt.Sprintf("%dd%dh", days, int(d.Hours())-24*days)
	}
}

// quoteIdent quotes an SQL identifier only when PostgreSQL would need it,
// so actions stay readable for ordinary names (config.QuoteIdent: the one
// rule, shared with the table names in configs and messages).
func quoteIdent(s string) string { return config.QuoteIdent(s) }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func qualified(schema, name string) string {
	return config.TableName{Schema: schema, Name: name}.String()
}

// settingBytes converts a memory or size setting as pg_settings reports it
// (setting in units of unit, e.g. "8kB", "MB") to bytes. ok is false for
// non-size units.
func settingBytes(setting, unit string) (int64, bool) {
	v, err := strconv.ParseInt(setting, 10, 64)
	if err != nil {
		return 0, false
	}
	mult, base := int64(1), unit
	if i := strings.IndexFunc(unit, func(r rune) bool { return r < '0' || r > '9' }); i > 0 {
		m, err := strconv.ParseInt(unit[:i], 10, 64)
		if err != nil {
			return 0, false
		}
		mult, base = m, unit[i:]
	}
	var scale int64
	switch base {
	case "B":
		scale = 1
	case "kB":
		scale = 1 << 10
	case "MB":
		scale = 1 << 20
	case "GB":
		scale = 1 << 30
	case "TB":
		scale = 1 << 40
	default:
		return 0, false
	}
	if v < 0 {
		return v, true
	}
	return v * mult * scale, true
}

// settingDuration converts a time setting (unit ms, s or min) to a duration.
func settingDuration(setting, unit string) (time.Duration, bool) {
	v, err := strconv.ParseInt(setting, 10, 64)
	if err != nil {
		return 0, false
	}
	switch unit {
	case "ms":
		return time.Duration(v) * time.Millisecond, true
	case "s":
		return time.Duration(v) * time.Second, true
	case "min":
		return time.Duration(v) * time.Minute, true
	}
	return 0, false
}
