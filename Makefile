# Trellara build, test and evidence targets. See README.md.
SHELL := /bin/bash
GO ?= go
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
STATICCHECK ?= $(GOBIN_DIR)/staticcheck
PROTOC_GEN_GO ?= $(GOBIN_DIR)/protoc-gen-go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/trellara/trellara/internal/buildinfo.Version=$(VERSION) -X github.com/trellara/trellara/internal/buildinfo.Commit=$(COMMIT)
PKGS := ./...
TEST_TIMEOUT ?= 25m

.PHONY: all build deps test test-phases ext-test lint fmt-check vet staticcheck generate generate-check unit demo demo-kafka demo-lake demo-lake-kafka bench bench-e2e bench-mem bench-fleet fuzz fuzz-short clean

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/trellara ./cmd/trellara
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/trellara-check ./cmd/trellara-check
	$(GO) build -trimpath -tags full -ldflags '$(LDFLAGS)' -o bin/trellara-full ./cmd/trellara-full

# make test: everything CI gates on. Integration tests start real PostgreSQL
# servers; TRELLARA_REQUIRE_PG=1 (set by .ci/run) turns "no server binary"
# from a skip into a failure.
test: deps
	@$(MAKE) --no-print-directory test-phases

# deps: what the tests need and this machine lacks (scripts/deps.sh):
# PostgreSQL 15 server and headers, protoc, gcc (Debian packages, as root),
# protoc-gen-go and staticcheck at their pinned versions, the Go modules.
# Idempotent: it installs nothing that is already there.
deps:
	@GO=$(GO) ./scripts/deps.sh

# Each phase of make test, timed (scripts/phase.sh prints its duration).
PHASE := ./scripts/phase.sh
test-phases:
	@$(PHASE) lint $(MAKE) --no-print-directory lint
	@$(PHASE) generate-check $(MAKE) --no-print-directory generate-check
	@$(PHASE) build $(MAKE) --no-print-directory build
	@$(PHASE) ext-test $(MAKE) --no-print-directory ext-test
	@$(PHASE) go-test $(GO) test -race -timeout $(TEST_TIMEOUT) $(PKGS)
	@$(PHASE) examples sh -c 'cd examples && $(GO) vet ./... && $(GO) test -race -timeout $(TEST_TIMEOUT) ./...'
	@$(PHASE) go-test-kafka $(GO) test -race -timeout $(TEST_TIMEOUT) -tags full -run Kafka ./internal/flow
	@$(PHASE) go-test-lake $(GO) test -race -timeout $(TEST_TIMEOUT) -tags full ./internal/lake/...
	@$(PHASE) fuzz-short $(MAKE) --no-print-directory fuzz-short

# The native extension: -Wall -Werror build, PGXS regression suite and the
# live background-worker test on PostgreSQL 15 (installs into that server's
# directories; needs root or write access there).
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
ext-test:
	PG_CONFIG=$(PG_CONFIG) bash ext/run-regress.sh
	PG_CONFIG=$(PG_CONFIG) bash ext/run-worker-test.sh

unit:
	$(GO) test -short $(PKGS)

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags full $(PKGS)

staticcheck:
	$(STATICCHECK) $(PKGS)

generate:
	PATH="$(GOBIN_DIR):$$PATH" protoc --go_out=. --go_opt=module=github.com/trellara/trellara envelope/envelope.proto

# The committed generated code must be exactly what `make generate` writes.
generate-check:
	@tmp=$$(mktemp -d); \
	PATH="$(GOBIN_DIR):$$PATH" protoc --go_out=$$tmp --go_opt=module=github.com/trellara/trellara envelope/envelope.proto && \
	if ! diff -u envelope/envelopepb/envelope.pb.go $$tmp/envelope/envelopepb/envelope.pb.go; then \
		echo "envelope/envelopepb is stale: run make generate and commit"; rm -rf $$tmp; exit 1; fi; \
	rm -rf $$tmp

demo: deps build
	./scripts/demo.sh

# The public loop over a three-broker in-process Kafka cluster
# (trellara-full dev kafka-cluster); ends on CONVERGED.
demo-kafka: build
	./scripts/demo-kafka.sh

# bench: every performance claim beside its baseline in the same run, one
# table at the end (parts, sizes and BENCH_PARTS in scripts/bench.sh; about
# 75 minutes on 2 cores at the published sizes).
bench: build
	./scripts/bench.sh

# Three sources fanned into one Iceberg changelog (sqlite catalog, file://
# warehouse): one taken offline gives a complete_with_gaps epoch, back up a
# complete one, and fanin verify ends on CONVERGED.
demo-lake: build
	./scripts/demo-lake.sh

# demo-lake-kafka: the fleet over Kafka: three relays as their own
# processes, the lake committer alone reading their topics (in-process
# kfake brokers); ends on a complete epoch, fanin verify CONVERGED and the
# independent reader's check.
demo-lake-kafka: build
	./scripts/demo-lake-kafka.sh

# bench-e2e: the end-to-end part of make bench (backlog catch-up on both
# capture paths and steady-rate latency against native logical
# replication, ABBA) and its table; sizes in scripts/bench.sh.
bench-e2e: build
	./scripts/bench-e2e.sh

# bench-fleet: the qualified source count. N sources as databases over a
# few clusters, a light steady load each, through one fleet run into the
# lake; one row per N (sizes, clusters, rate and window from the
# TRELLARA_BENCH_FLEET_* variables, internal/lake/fleetbench_full_test.go).
bench-fleet: build
	TRELLARA_BENCH_FLEET_SOURCES=$${TRELLARA_BENCH_FLEET_SOURCES:-100,200,400} \
		$(GO) test -tags full -run '^$$' -bench BenchmarkFleet -benchtime 1x -timeout 4h -v ./internal/lake

# bench-mem: peak RSS of run --local for one large transaction (1.5M and
# 4.5M rows by default; sizes in scripts/bench-mem.sh).
bench-mem: build
	./scripts/bench-mem.sh

fuzz:
	$(GO) test ./envelope -run='^$$' -fuzz=FuzzDecode -fuzztime=60s

# fuzz-short: every Fuzz target in the repository, each for FUZZTIME
# (scripts/fuzz-short.sh: how targets are found, and the reruns of a run
# that fails only by Go 1.26's fuzzing deadline race, which
# scripts/fuzz-short-check.sh checks first).
FUZZTIME ?= 5s
FUZZFLAGS ?=
fuzz-short:
	@./scripts/fuzz-short-check.sh
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZFLAGS='$(FUZZFLAGS)' ./scripts/fuzz-short.sh

clean:
	rm -rf bin dist

# --- Packages, install test and the PostgreSQL 15-18 matrix ------------------
# packaging/README.md and pgmatrix/README.md describe these.
.PHONY: packages install-test pgmatrix

# dist/: trellara .deb/.rpm, the extension's .deb and .rpm (postgresql-NN-trellara,
# postgresqlNN-trellara) per major whose extension builds here, the CycloneDX
# SBOM and SHA256SUMS, as nfpm.yaml and nfpm-extension.yaml define them.
packages: build
	VERSION='$(VERSION)' packaging/packages.sh

# release: make packages, plus the three binaries in dist/, the build
# provenance (dist/provenance.intoto.json), SHA256SUMS over all of them and
# its ed25519 signature (dist/SHA256SUMS.sig) with the operator's key, and
# the public key to publish (dist/trellara-release.pub). packaging/README.md
# says how to verify a release.
#   make release RELEASE_KEY=/path/to/ed25519.pem
.PHONY: release
release:
	@if [ -z "$(RELEASE_KEY)" ]; then echo "release: no signing key: run make release RELEASE_KEY=/path/to/ed25519.pem (create one with: openssl genpkey -algorithm ed25519 -out release.pem; keep it off this tree)" >&2; exit 1; fi
	@if [ ! -r "$(RELEASE_KEY)" ]; then echo "release: RELEASE_KEY=$(RELEASE_KEY) is not a readable file" >&2; exit 1; fi
	$(MAKE) --no-print-directory packages
	@mkdir -p .cache/build/bin
	$(GO) build -o .cache/build/bin/ ./packaging/cmd/release
	cp bin/trellara bin/trellara-check bin/trellara-full dist/
	cd dist && ../.cache/build/bin/release provenance -o provenance.intoto.json -go-sum ../go.sum \
		-version '$(VERSION)' -commit "$$(git rev-parse HEAD)" $$(git diff --quiet HEAD -- 2>/dev/null || echo -dirty) \
		-time "$$(git log -1 --format=%ct)" -command 'make release' \
		trellara trellara-check trellara-full *.deb *.rpm *.cdx.json
	cd dist && sha256sum -- trellara trellara-check trellara-full *.deb *.rpm *.cdx.json provenance.intoto.json >SHA256SUMS
	.cache/build/bin/release sign -key '$(RELEASE_KEY)' -o dist/SHA256SUMS.sig -pub dist/trellara-release.pub dist/SHA256SUMS
	.cache/build/bin/release verify -pub dist/trellara-release.pub dist/SHA256SUMS

# Installs dist/'s .debs on this machine, checks units, binaries and the
# extension in a throwaway PostgreSQL 15 cluster, purges, checks leftovers;
# inspects the .rpms. Needs root.
install-test: packages
	packaging/install-test.sh

# Integration suite + extension tests on PostgreSQL 15, 16, 17, 18; writes
# pgmatrix/results/pgNN.json and docs/SUPPORT.md.
pgmatrix:
	pgmatrix/run.sh

# --- Live evidence (internal/chaoslive, docs/QUALIFICATION.md) ----------------
# soak: the built-in workload on throwaway servers with periodic faults
# (SIGKILLs, server restarts, network cuts) and verify, resource samples
# judged for leaks (a leak fails it); report in out/soak/.
#   make soak DURATION=30m
# qualify: the same run as a qualification report (environment, checksums,
# live chaos, soak curves, verify, not covered) in out/qualify/report.html,
# rendered in headless Chromium when one is installed.
DURATION ?= 30m
.PHONY: soak qualify
soak: build
	scripts/live.sh soak $(DURATION) out/soak
qualify: build
	scripts/live.sh qualify $(DURATION) out/qualify
	@if command -v chromium >/dev/null || [ -n "$$CHROMIUM" ]; then scripts/chaos-render-check.sh out/qualify/report.html; \
	else echo "qualify: no Chromium: the render check did not run"; fi

# --- Failure matrix (internal/sim, docs/CORRECTNESS.md) ----------------------
# chaos-check: the deterministic catalogue passes, the mutation tests catch
# every broken protection, and docs/correctness/report.json is what the code
# produces now (CI gate). UPDATE=1 rewrites the report for review.
.PHONY: chaos-check
chaos-check:
	$(GO) test -race -count=1 ./internal/sim/ $(if $(UPDATE),-run TestReportUpToDate -args -update,)
