package chaoslive

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strings"
)

// Sample is one reading of the flow's resources, T seconds into the run.
type Sample struct {
	T      float64            `json:"t"`
	Values map[string]float64 `json:"values"`
}

// Leak thresholds. A series leaks when, over the second half of the run,
// its least-squares trend grows by more than LeakRelative of its mean and
// by more than its absolute floor (so a few bytes on a small mean, or
// noise, is not a leak). The first half is warm-up: caches fill, the log
// reaches its working size.
const (
	LeakRelative   = 0.25
	MinLeakSamples = 6
)

// leakFloor is the smallest growth over the second half worth calling a
// leak, per series suffix.
func leakFloor(series string) float64 {
	switch {
	case strings.HasSuffix(series, "rss_bytes"):
		return 16 << 20
	case strings.HasSuffix(series, "open_fds"):
		return 16
	case strings.HasSuffix(series, "goroutines"):
		return 50
	case strings.HasSuffix(series, "lag_bytes"):
		return 16 << 20
	case strings.HasSuffix(series, "log_bytes"):
		return 64 << 20
	}
	return 0
}

// LeakFinding is the trend of one series.
type LeakFinding struct {
	Series   string  `json:"series"`
	Samples  int     `json:"samples"` // in the second half
	Mean     float64 `json:"mean"`
	Growth   float64 `json:"growth"` // trend over the second half
	Relative float64 `json:"relative"`
	Floor    float64 `json:"floor"`
	Judged   bool    `json:"judged"` // false: too few samples to say
	Leak     bool    `json:"leak"`
}

// Summary is one line for text output.
func (l LeakFinding) Summary() string {
	if !l.Judged {
		return fmt.Sprintf("not judged: %d samples in the second half, need %d", l.Samples, MinLeakSamples)
	}
	verdict := "bounded"
	if l.Leak {
		verdict = "LEAK"
	}
	return fmt.Sprintf("%s: trend %+.3g over the second half (%+.1f%% of mean %.3g, floor %.3g)", verdict, l.Growth, 100*l.Relative, l.Mean, l.Floor)
}

// DetectLeak fits a least-squares line to the second half of (ts, vs) and
// flags growth beyond LeakRelative of the mean and beyond floor.
func DetectLeak(series string, ts, vs []float64, floor float64) LeakFinding {
	f := LeakFinding{Series: series, Floor: floor}
	if len(ts) == 0 {
		return f
	}
	mid := (ts[0] + ts[len(ts)-1]) / 2
	var x, y []float64
	for i := range ts {
		if ts[i] >= mid {
			x = append(x, ts[i])
			y = append(y, vs[i])
		}
	}
	f.Samples = len(x)
	if len(x) < MinLeakSamples {
		return f
	}
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	f.Mean = sy / n
	den := n*sxx - sx*sx
	if den == 0 {
		return f
	}
	slope := (n*sxy - sx*sy) / den
	f.Judged = true
	f.Growth = slope * (x[len(x)-1] - x[0])
	if f.Mean != 0 {
		f.Relative = f.Growth / math.Abs(f.Mean)
	} else if f.Growth > 0 {
		f.Relative = math.Inf(1)
	}
	f.Leak = f.Growth > floor && f.Relative > LeakRelative
	return f
}

// seriesNames lists every series in samples, sorted.
func seriesNames(samples []Sample) []string {
	seen := map[string]bool{}
	for _, s := range samples {
		for k := range s.Values {
			seen[k] = true
		}
	}
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func seriesOf(samples []Sample, name string) (ts, vs []float64) {
	for _, s := range samples {
		if v, ok := s.Values[name]; ok {
			ts = append(ts, s.T)
			vs = append(vs, v)
		}
	}
	return ts, vs
}

// DetectLeaks judges every series in samples.
func DetectLeaks(samples []Sample) []LeakFinding {
	var out []LeakFinding
	for _, name := range seriesNames(samples) {
		ts, vs := seriesOf(samples, name)
		out = append(out, DetectLeak(name, ts, vs, leakFloor(name)))
	}
	return out
}

// SVG renders one series as a self-contained line chart.
func SVG(name string, ts, vs []float64) string {
	const w, h, pad = 520.0, 140.0, 36.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, w, h, w, h, html.EscapeString(name))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff" stroke="#ccc"/>`, w, h)
	fmt.Fprintf(&b, `<text x="6" y="14" font-size="11" font-family="sans-serif">%s</text>`, html.EscapeString(name))
	if len(ts) < 2 {
		b.WriteString(`<text x="6" y="40" font-size="11" font-family="sans-serif">fewer than two samples</text></svg>`)
		return b.String()
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if hi == lo {
		hi = lo + 1
	}
	t0, t1 := ts[0], ts[len(ts)-1]
	if t1 == t0 {
		t1 = t0 + 1
	}
	px := func(t float64) float64 { return pad + (t-t0)/(t1-t0)*(w-2*pad) }
	py := func(v float64) float64 { return h - 18 - (v-lo)/(hi-lo)*(h-40) }
	pts := make([]string, len(ts))
	for i := range ts {
		pts[i] = fmt.Sprintf("%.1f,%.1f", px(ts[i]), py(vs[i]))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
	fmt.Fprintf(&b, `<text x="%.0f" y="26" font-size="10" font-family="sans-serif" text-anchor="end">max %.4g</text>`, w-4, hi)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="10" font-family="sans-serif" text-anchor="end">min %.4g</text>`, w-4, h-4, lo)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="10" font-family="sans-serif">%.0fs</text>`, pad, h-4, t0)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="10" font-family="sans-serif" text-anchor="middle">%.0fs</text>`, w/2, h-4, t1)
	b.WriteString(`</svg>`)
	return b.String()
}
