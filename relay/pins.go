package relay

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/trellara/trellara/capture"
)

// FilePins is a Pins store kept as a JSON file beside the flow's transport
// state. Every Pin rewrites the file durably (write, fsync, rename, fsync
// directory) so a pin survives a crash the moment it is taken.
type FilePins struct {
	path string
	mu   sync.Mutex
	pins map[string]uint64
}

// OpenPins loads (or starts) the pin file at path.
func OpenPins(path string) (*FilePins, error) {
	p := &FilePins{path: path, pins: map[string]uint64{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relay: read schema pins %s: %w", path, err)
	}
	var doc struct {
		Pins map[string]string `json:"pins"`
	}
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
	return p, nil
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
	doc := struct {
		Pins map[string]string `json:"pins"`
	}{Pins: map[string]string{}}
	for k, v := range p.pins {
		doc.Pins[k] = fmt.Sprintf("%016x", v)
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return WriteFileDurable(p.path, b)
}

// WriteFileDurable is capture.WriteFileDurable.
func WriteFileDurable(path string, data []byte) error { return capture.WriteFileDurable(path, data) }
