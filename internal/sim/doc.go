// Package sim is Trellara's deterministic failure matrix: it runs the real
// relay session and assembler, the real segment log and the real applier
// against a simulated source (a seeded history rendered as pgoutput bytes),
// a simulated filesystem (segmentlog/segmentlogtest: unsynced data lost on
// power loss, torn writes, fsync errors, a full disk), a simulated slot and
// a simulated transactional target, interleaved by a seeded scheduler on
// one goroutine, and checks every invariant while faults are injected at
// named points. The same seed reproduces a run byte for byte.
//
// Files:
//
//	scenario.go  simulations, scenarios, faults, invariants, results
//	catalog.go   the catalogue: every simulation and scenario, stable ids
//	source.go    the history generator and walsender stream
//	model.go     tables, rows and the order-independent state hash
//	target.go    the target (apply.Target)
//	harness.go   the scheduler, the fault points, crash and recovery
//	check.go     the invariants
//	swarm.go     randomized fault mixes; running many scenarios
//	report.go    the report: JSON (docs/correctness/report.json), text, HTML
//	evidence.go  the real-server evidence behind each family, quoted from the docs
//
// docs/CORRECTNESS.md documents what is real and what is simulated, the
// fault points, the invariants, the catalogue and how to add a scenario.
// The command is `trellara chaos` (internal/cli/chaos.go).
package sim
