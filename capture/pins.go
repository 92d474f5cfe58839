package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/trellara/trellara/pgname"
	"github.com/trellara/trellara/schemachange"
)

// FilePins is a Pins store kept as a JSON file beside the flow's transport
// state. Every Pin rewrites the file durably (write, fsync, rename, fsync
// directory) so a pin survives a crash the moment it is taken.
//
// Beside each fingerprint it keeps the pinned shape (columns, types, key
// flags and the catalog facts read when it was pinned), which schema change
// classification compares the live shape with. A file written before shapes
// were kept has fingerprints only; the shape is filled in the next time the
// relation is seen unchanged.
type FilePins struct {
	path   string
	mu     sync.Mutex
	pins   map[string]uint64
	shapes map[string]schemachange.Shape
}

type pinsDoc struct {
	Pins      map[string]string             `json:"pins"`
	Relations map[string]schemachange.Shape `json:"relations,omitempty"`
}

// OpenPins loads (or starts) the pin file at path.
func OpenPins(path string) (*FilePins, error) {
	p := &FilePins{path: path, pins: map[string]uint64{}, shapes: map[string]schemachange.Shape{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relay: read schema pins %s: %w", path, err)
	}
	var doc pinsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("relay: schema pins %s are damaged: %w", path, err)
	}
	for k, v := range doc.Pins {
		var fp uint64
		if _, err := fmt.Sscanf(v, "%016x", &fp); err != nil {
			return nil, fmt.Errorf("relay: schema pins %s: relation %s has fingerprint %q: %w", path, k, v, err)
		}
		p.pins[k] = fp
	}
	for k, v := range doc.Relations {
		if _, ok := p.pins[k]; ok {
			p.shapes[k] = v
		}
	}
	return p, nil
}

// PinnedShape returns the pinned shape of relation, when one was kept.
func (p *FilePins) PinnedShape(relation string) (schemachange.Shape, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sh, ok := p.shapes[relation]
	return sh, ok
}

// PinShape records relation's fingerprint and shape durably, together.
func (p *FilePins) PinShape(relation string, fingerprint uint64, shape schemachange.Shape) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pins[relation] = fingerprint
	p.shapes[relation] = shape
	return p.writeLocked()
}

// Pinned returns the pinned fingerprint of relation (schema.name).
func (p *FilePins) Pinned(relation string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fp, ok := p.pins[relation]
	return fp, ok
}

// All returns a copy of every pin.
func (p *FilePins) All() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]uint64, len(p.pins))
	for k, v := range p.pins {
		out[k] = v
	}
	return out
}

// Pin records relation's fingerprint durably.
func (p *FilePins) Pin(relation string, fingerprint uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pins[relation] = fingerprint
	delete(p.shapes, relation)
	return p.writeLocked()
}

func (p *FilePins) writeLocked() error {
	doc := pinsDoc{Pins: map[string]string{}, Relations: p.shapes}
	for k, v := range p.pins {
		doc.Pins[k] = fmt.Sprintf("%016x", v)
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return WriteFileDurable(p.path, b)
}

// CatalogFacts reads what the source catalog says about relation's columns
// that pgoutput does not carry. It is the catalog now, which may be later
// than the stream position being classified.
func CatalogFacts(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, relation string) (map[string]schemachange.Facts, error) {
	t, err := pgname.Parse(relation)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, t.Schema, t.Name)
	if err != nil {
		return nil, err
	}
	out := map[string]schemachange.Facts{}
	for rows.Next() {
		var name string
		var fc schemachange.Facts
		if err := rows.Scan(&name, &fc.TypeName, &fc.NotNull, &fc.HasDefault); err != nil {
			rows.Close()
			return nil, err
		}
		out[name] = fc
	}
	return out, rows.Err()
}
