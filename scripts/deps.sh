#!/usr/bin/env bash
# make deps (run first by make test and make demo): installs what the tests
# need and this machine lacks, and nothing it already has, so the README's
# two commands are the whole set-up on a fresh Debian 12 machine.
#   - PostgreSQL 15 server, client and server headers (PGXS), protoc, gcc,
#     make: Debian packages, when missing (needs root; otherwise it names
#     the apt-get line to run and stops);
#   - protoc-gen-go and staticcheck at the pinned versions, when missing or
#     at another version (go install into $(go env GOPATH)/bin);
#   - the Go modules (go mod download).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
gobin=$("$GO" env GOPATH)/bin
protoc_gen_go_version=v1.36.12
staticcheck_version=v0.8.2

missing=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15)
[ -x /usr/lib/postgresql/15/bin/psql ] || command -v psql >/dev/null || missing+=(postgresql-client-15)
[ -f /usr/lib/postgresql/15/lib/pgxs/src/makefiles/pgxs.mk ] && [ -f /usr/include/postgresql/15/server/postgres.h ] || missing+=(postgresql-server-dev-15)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
command -v gcc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing Debian packages: ${missing[*]}; run as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	echo "== deps: apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# have TOOL VERSION: TOOL is in GOPATH/bin at VERSION (go version -m reads
# the module version a binary was built from).
have() { [ -x "$gobin/$1" ] && "$GO" version -m "$gobin/$1" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]].*[[:space:]]$2([[:space:]]|$)"; }
if ! have protoc-gen-go "$protoc_gen_go_version"; then
	echo "== deps: go install protoc-gen-go@$protoc_gen_go_version"
	"$GO" install "google.golang.org/protobuf/cmd/protoc-gen-go@$protoc_gen_go_version"
fi
if ! have staticcheck "$staticcheck_version"; then
	echo "== deps: go install staticcheck@$staticcheck_version"
	"$GO" install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi
"$GO" mod download
