// Package importrules holds no code: its test is the module's layering
// rules, checked on the real import graph (go list -deps, with and without
// the full build tag). docs/DESIGN.md shows the layers.
//
//   - The data path (capture, relay/..., sidecar, segmentlog/...,
//     transport/..., apply, consumer/...) takes its own Options types: none
//     of it depends on internal/config, internal/cli or internal/flow.
//   - apply does not depend on capture: they meet only in the envelope and
//     the transport.
//   - envelope depends on nothing in the module but its generated
//     envelopepb and the leaf lsn.
package importrules
