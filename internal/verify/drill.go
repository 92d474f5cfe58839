package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/trellara/trellara/internal/config"
)

const (
	// drillLevelsMax bounds how many times a mismatching bucket is split
	// before giving up on examples. Each level is one filtered scan per
	// side, and with the default budget a bucket that still exceeds it
	// after three splits would need a table of about 10^17 rows.
	drillLevelsMax = 4
	// keyTextMax bounds one example key in the report.
	keyTextMax = 200
)

// keyHash is one row as drill-down sees it.
type keyHash struct {
	key  string
	hash int64
}

// drill names example keys for a table with mismatching buckets, inside the
// snapshots that found them. It fetches (key text, row hash) for a few of
// the smallest mismatching buckets from both sides and diffs them in
// memory. When even those hold more than DrillRowsMax rows, it first splits
// them by the key hash with another seed (one aggregate per side, same
// query shape as the bucket pass) and keeps only mismatching sub-buckets,
// so the rows fetched stay bounded however large the table.
func (v *verifier) drill(ctx context.Context, t *tableState) error {
	budget := int64(v.o.DrillRowsMax)
	size := func(src, dst map[int64]bucketStat) func(int64) int64 {
		return func(id int64) int64 { return max(src[id].rows, dst[id].rows) }
	}
	keep, rows := pick(t.mismatched, size(t.src, t.dst), v.o.SampleKeysMax, budget)
	levels := []level{{seed: 0, mod: t.buckets, keep: keep}}
	for rows > budget {
		if len(levels) >= drillLevelsMax {
			t.notes = append(t.notes, fmt.Sprintf("no example keys: the smallest mismatching part still holds %d rows after %d splits (DrillRowsMax is %d)", rows, len(levels)-1, budget))
			return nil
		}
		seed, mod := len(levels), subBuckets(rows, budget, v.o.SampleKeysMax)
		var srcStats, dstStats map[int64]bucketStat
		err := both(ctx,
			func(ctx context.Context) (err error) {
				srcStats, _, err = v.src.buckets(ctx, t.spec.src, t.srcPlan, levels, seed, mod)
				return err
			},
			func(ctx context.Context) (err error) {
				dstStats, _, err = v.dst.buckets(ctx, t.spec.dst, t.dstPlan, levels, seed, mod)
				return err
			})
		if err != nil {
			return err
		}
		sub := mismatchedBuckets(srcStats, dstStats)
		if len(sub) == 0 {
			// Within one pair of snapshots a mismatching bucket must split
			// into mismatching parts; say so rather than invent keys.
			t.notes = append(t.notes, "no example keys: splitting the mismatching buckets found no differing part")
			return nil
		}
		keep, rows = pick(sub, size(srcStats, dstStats), v.o.SampleKeysMax, budget)
		levels = append(levels, level{seed: seed, mod: mod, keep: keep})
	}
	var srcRows, dstRows []keyHash
	err := both(ctx,
		func(ctx context.Context) (err error) {
			srcRows, err = v.src.keys(ctx, t.spec.src, t.srcPlan, levels, v.o.DrillRowsMax)
			return err
		},
		func(ctx context.Context) (err error) {
			dstRows, err = v.dst.keys(ctx, t.spec.dst, t.dstPlan, levels, v.o.DrillRowsMax)
			return err
		})
	if err != nil {
		return err
	}
	all := diffRows(srcRows, dstRows)
	t.samples = all
	if len(all) > v.o.SampleKeysMax {
		t.samples = all[:v.o.SampleKeysMax]
		t.notes = append(t.notes, fmt.Sprintf("showing %d of %d differing keys found in %d drilled bucket(s)", v.o.SampleKeysMax, len(all), len(levels[0].keep)))
	}
	return nil
}

// pick chooses buckets for drill-down, smallest first, up to n of them and
// up to budget rows, but always at least one. Each mismatching bucket holds
// at least one differing key, so n buckets can yield n examples.
func pick(ids []int64, size func(int64) int64, n int, budget int64) ([]int64, int64) {
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, func(a, b int64) int {
		if sa, sb := size(a), size(b); sa != sb {
			return int(min(max(sa-sb, -1), 1))
		}
		return int(min(max(a-b, -1), 1))
	})
	var out []int64
	var rows int64
	for _, id := range sorted {
		if len(out) == n || (len(out) > 0 && rows+size(id) > budget) {
			break
		}
		out = append(out, id)
		rows += size(id)
	}
	slices.Sort(out)
	return out, rows
}

// subBuckets picks a split so that a part holds about budget/(2n) rows,
// leaving room to pick n parts within the budget.
func subBuckets(rows, budget int64, n int) int64 {
	per := max(budget/int64(2*n), 1)
	mod := int64(2)
	for mod < bucketsMax && mod*per < rows {
		mod *= 2
	}
	return mod
}

// keys fetches (key text, row hash) for the rows selected by levels. The
// query asks for one row more than limit only to prove the bound held.
func (s *side) keys(ctx context.Context, tn config.TableName, p plan, levels []level, limit int) ([]keyHash, error) {
	wrap := func(err error) error { return &TableError{Table: tn.String(), Side: s.role, Err: err} }
	q, args := p.rowsQuery(levels, limit+1)
	rows, err := s.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	var out []keyHash
	for rows.Next() {
		var k keyHash
		if err := rows.Scan(&k.key, &k.hash); err != nil {
			return nil, wrap(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	if len(out) > limit {
		// pick sized the selection from counts in this same snapshot.
		return nil, wrap(fmt.Errorf("drill-down selected more than %d rows though the bucket counts promised fewer", limit))
	}
	return out, nil
}

// diffRows compares the rows of the drilled buckets as multisets per key,
// so whole-row tables with duplicate rows are handled too, and returns
// every differing key: missing, then extra, then changed, each by key
// (shorter first, so integer keys read in numeric order).
func diffRows(src, dst []keyHash) []SampleKey {
	group := func(rows []keyHash) map[string][]int64 {
		m := map[string][]int64{}
		for _, r := range rows {
			m[r.key] = append(m[r.key], r.hash)
		}
		return m
	}
	sm, dm := group(src), group(dst)
	keys := make([]string, 0, len(sm)+len(dm))
	for k := range sm {
		keys = append(keys, k)
	}
	for k := range dm {
		if _, ok := sm[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []SampleKey
	for _, k := range keys {
		a, b := sm[k], dm[k]
		var kind DiffKind
		switch {
		case len(a) > len(b):
			kind = KindMissing
		case len(a) < len(b):
			kind = KindExtra
		default:
			slices.Sort(a)
			slices.Sort(b)
			if slices.Equal(a, b) {
				continue
			}
			kind = KindChanged
		}
		out = append(out, SampleKey{Key: k, Kind: kind})
	}
	rank := map[DiffKind]int{KindMissing: 0, KindExtra: 1, KindChanged: 2}
	slices.SortStableFunc(out, func(a, b SampleKey) int {
		if a.Kind != b.Kind {
			return rank[a.Kind] - rank[b.Kind]
		}
		if len(a.Key) != len(b.Key) {
			return len(a.Key) - len(b.Key)
		}
		return strings.Compare(a.Key, b.Key)
	})
	for i := range out {
		out[i].Key = shorten(out[i].Key)
	}
	return out
}

// shorten cuts s to keyTextMax bytes on a character boundary.
func shorten(s string) string {
	if len(s) <= keyTextMax {
		return s
	}
	cut := keyTextMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
