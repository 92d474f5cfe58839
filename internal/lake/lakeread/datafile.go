package lakeread

import (
	"errors"
	"io"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// Cell is one value of a data file: a long (Int) or a string (Str), or
// null.
type Cell struct {
	Null  bool
	IsStr bool // Str holds the value; else Int does
	Int   int64
	Str   string
}

// String is the cell's text: the string, or the long in decimal.
func (c Cell) String() string {
	if c.Null {
		return "NULL"
	}
	if c.IsStr {
		return c.Str
	}
	return strconv.FormatInt(c.Int, 10)
}

// dataRowsMax bounds the rows one data file may hold.
const dataRowsMax = 1 << 26

// ReadDataFile reads the Parquet file r of size bytes into rows of cells,
// one cell per field of fields in that order. Columns are matched by
// Iceberg field id (the Parquet field_id), or by name in a file that
// carries no ids; a field the file lacks (a column added after the file
// was written) is null. Only flat files of long, int and string columns
// are read; anything else is refused with ErrUnsupported.
func ReadDataFile(r io.ReaderAt, size int64, fields []Field) (rows [][]Cell, err error) {
	defer func() {
		if p := recover(); p != nil {
			rows, err = nil, corrupt("the Parquet decoder failed: %v", p)
		}
	}()
	f, err := parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, corrupt("not a Parquet file: %v", err)
	}
	if f.NumRows() < 0 || f.NumRows() > dataRowsMax {
		return nil, unsupported("%d rows, over the reader's limit of %d", f.NumRows(), dataRowsMax)
	}
	// leaf column index -> position in fields, -1 when not read.
	leaves := f.Root().Columns()
	target := make([]int, len(leaves))
	kinds := make([]string, len(fields))
	for i, fd := range fields {
		switch fd.TypeName() {
		case "long", "int", "string":
			kinds[i] = fd.TypeName()
		default:
			return nil, unsupported("field %s (id %d) has type %s; this reader reads long, int and string columns", fd.Name, fd.ID, fd.Type)
		}
	}
	for li, c := range leaves {
		target[li] = -1
		if !c.Leaf() || c.Repeated() {
			return nil, unsupported("column %s is nested or repeated", c.Name())
		}
		for i, fd := range fields {
			if (c.ID() != 0 && c.ID() == fd.ID) || (c.ID() == 0 && c.Name() == fd.Name) {
				target[li] = i
				want := parquet.Int64Type.Kind()
				switch kinds[i] {
				case "int":
					want = parquet.Int32Type.Kind()
				case "string":
					want = parquet.ByteArrayType.Kind()
				}
				if got := c.Type().Kind(); got != want {
					return nil, corrupt("column %s (field id %d) is Parquet %s, the schema says %s", c.Name(), c.ID(), got, kinds[i])
				}
				break
			}
		}
	}
	buf := make([]parquet.Row, 512)
	for _, rg := range f.RowGroups() {
		rr := rg.Rows()
		for {
			n, err := rr.ReadRows(buf)
			for _, row := range buf[:n] {
				out := make([]Cell, len(fields))
				for i := range out {
					out[i].Null = true
				}
				for _, v := range row {
					li := v.Column()
					if li < 0 || li >= len(target) || target[li] < 0 {
						continue
					}
					c := &out[target[li]]
					if v.IsNull() {
						continue
					}
					c.Null = false
					switch kinds[target[li]] {
					case "long":
						c.Int = v.Int64()
					case "int":
						c.Int = int64(v.Int32())
					case "string":
						c.IsStr, c.Str = true, string(v.ByteArray())
					}
				}
				rows = append(rows, out)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				_ = rr.Close()
				return nil, corrupt("row group after %d rows: %v", len(rows), err)
			}
			if len(rows) > dataRowsMax {
				_ = rr.Close()
				return nil, unsupported("more than %d rows", dataRowsMax)
			}
		}
		if err := rr.Close(); err != nil {
			return nil, corrupt("row group: %v", err)
		}
	}
	if int64(len(rows)) != f.NumRows() {
		return nil, corrupt("read %d rows, the footer says %d", len(rows), f.NumRows())
	}
	return rows, nil
}
