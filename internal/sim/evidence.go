package sim

import (
	"strings"
	"unicode"
)

// Evidence is one row of the project's real-server evidence that backs a
// failure-point family: the simulations run the real code against
// simulated I/O, these run it against real PostgreSQL servers, real
// processes killed with SIGKILL and a real disk. Every text field is
// quoted verbatim from Doc, so the report never claims what the
// documents do not (TestEvidenceQuotesTheDocs).
type Evidence struct {
	// Doc is the document's path relative to the repository root.
	Doc string
	// Section is the heading the row sits under (without the "## ").
	Section string
	// Row is the row's claim or title, as the document has it.
	Row string
	// Command is the command that proves it, as the document has it.
	Command string
	// Note is what the command exercises, as the document has it
	// (optional).
	Note string
}

// Anchor is the link to the row's section, relative to the repository
// root, with the fragment GitHub gives the heading.
func (e Evidence) Anchor() string { return e.Doc + "#" + headingSlug(e.Section) }

// headingSlug is GitHub's anchor for a Markdown heading: lower case,
// punctuation dropped, spaces as hyphens.
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

const (
	readme   = "README.md"
	evidence = "docs/EVIDENCE.md"
	readmeEv = "Evidence"
)

var (
	evAck = Evidence{Doc: readme, Section: readmeEv,
		Row:     "Publish before acknowledge: the slot is never confirmed past what is durable; restart never duplicates",
		Command: "go test ./relay -run 'SIGKILL|Resume'"}
	evDecode = Evidence{Doc: readme, Section: readmeEv,
		Row:     "pgoutput v2 decode (streaming, subtransaction aborts, TOAST, truncate, messages), one envelope per committed transaction, bounded memory with spill",
		Command: "go test ./relay/...", Note: "captured corpus, fuzz, relay output = server's own decoding"}
	evLoop = Evidence{Doc: readme, Section: readmeEv,
		Row:     "The public loop: init → check → preflight → run --local --verify → the service with verify beside it → status",
		Command: "go test ./internal/flow", Note: "pipeline SIGKILLed, target killed, source restarted → CONVERGED, exactly once"}
	evApply = Evidence{Doc: readme, Section: readmeEv,
		Row:     "Atomic apply: data and checkpoint in one target transaction, redelivery skipped, unchanged TOAST untouched, quarantine with replay command",
		Command: "go test ./apply", Note: "half-applied never visible, target SIGKILL, quarantine atomicity"}
	evLog = Evidence{Doc: readme, Section: readmeEv,
		Row:     "Durable local segment log: fsync, group commit, sparse index, torn-tail repair, cursors, retention, chunked large payloads",
		Command: "go test ./segmentlog", Note: "SIGKILL crash loop, simulated power loss, fault injection, golden format = docs/LOG-FORMAT.md"}
	evEnvelope = Evidence{Doc: readme, Section: readmeEv,
		Row:     "Envelope: 13-field protobuf IDL, xxh3_64 over the whole message, validated both ways",
		Command: "go test ./envelope"}
	evFanIn = Evidence{Doc: readme, Section: readmeEv,
		Row:     "Fleet and Iceberg fan-in (`trellara-full`): `fleet.yml`, `fleet run` (one relay per source and one lake committer in one process, or the committer alone reading sources' Kafka topics, their relays run elsewhere as `run --role relay`), one append-only Iceberg changelog per source table across sources, dedup by source and commit LSN, `_trellara_epochs` with `complete` / `complete_with_gaps`, `lake epoch` gate, `lake plan`, `fanin verify`, `fleet report`/`scorecard`; SQL catalog on PostgreSQL and SQLite with a `file://` warehouse ([docs/LAKE.md](docs/LAKE.md))",
		Command: "go test -tags full ./internal/lake -run TestFleetFanIn", Note: "three sources, one stopped and restarted, fleet SIGKILLed mid-commit → no duplicates, no overclaiming epoch, CONVERGED"}
	evRepairPlan = Evidence{Doc: readme, Section: readmeEv,
		Row:     "`repair-plan`: quarantined units and diverged tables with their fixes",
		Command: "go test ./internal/flow -run TestQuarantineRepairPlanReplay"}

	evKafka = Evidence{Doc: "docs/KAFKA.md", Section: "Tests, and what kfake does not cover",
		Row:     "partitioned mode, barrier held: a cross-partition transaction is never visible half-applied to a concurrent reader of the target, with manifests before their chunks, orphaned chunks and restarts",
		Command: "go test ./transport/kafka -run 'Partitioned|Manifest|Barrier'"}

	evBenchRelay = Evidence{Doc: evidence, Section: "Relay (`BenchmarkRelayVsRecvlogical`, ./internal/flow)",
		Row: "Relay (`BenchmarkRelayVsRecvlogical`, ./internal/flow)", Command: "make bench"}
	evBenchLarge = Evidence{Doc: evidence, Section: "Large transactions (`BenchmarkLargeTransactionMemory`, ./relay)",
		Row: "Large transactions (`BenchmarkLargeTransactionMemory`, ./relay)", Command: "make bench"}
	evBenchApply = Evidence{Doc: evidence, Section: "Apply (`BenchmarkApplyVsNativeReplication`, ./internal/flow)",
		Row: "Apply (`BenchmarkApplyVsNativeReplication`, ./internal/flow)", Command: "make bench"}
	evBenchLog = Evidence{Doc: evidence, Section: "Durable local log (`go test -bench . ./segmentlog`)",
		Row: "Durable local log (`go test -bench . ./segmentlog`)", Command: "go test -bench . ./segmentlog"}
)

// FamilyEvidence lists, per family, the real-server evidence that backs
// it: first the README's claims and the tests that prove them, then the
// measurements in docs/EVIDENCE.md of the same code on a real server.
var FamilyEvidence = map[string][]Evidence{
	FamilyRelay:     {evAck, evDecode, evLoop, evBenchRelay, evBenchLarge},
	FamilyApplier:   {evApply, evLoop, evBenchApply},
	FamilyStorage:   {evLog, evBenchLog},
	FamilyTransport: {evAck, evEnvelope, evLoop},
	FamilyKafka:     {evKafka, evAck},
	FamilySchema:    {evDecode, evApply, evRepairPlan, evLog},
	FamilyFanIn:     {evFanIn},
}

// MatrixEvidence is docs/EVIDENCE.md's own measurement of this catalogue.
var MatrixEvidence = Evidence{Doc: evidence, Section: "Failure matrix (`trellara chaos run`)",
	Row: "the deterministic catalogue (119 scenarios, 46 simulations) from the CLI", Command: "trellara chaos run"}
