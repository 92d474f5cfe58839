// Package pgtest starts throwaway PostgreSQL clusters for tests that must run
// against a real server.
//
// A cluster lives in its own directory under os.TempDir():
//
//	trellara-pgtest-XXXX/   (0755, so the server user can traverse it)
//	├── data/               initdb output, owned by the server user
//	├── sock/               unix_socket_directories
//	└── server.log          postmaster stdout+stderr, appended across restarts
//
// Server binaries are found in this order: $TRELLARA_PG_BIN, `pg_config
// --bindir` on PATH, then /usr/lib/postgresql/*/bin (highest major first, or
// the one Options.Major asks for).
//
// The postmaster is started directly, not through pg_ctl, so that Kill can
// SIGKILL it the way a crash would and Restart then exercises crash recovery.
// PostgreSQL refuses to run as root, so when the test binary is root the
// directories are chowned to the "postgres" user and initdb and postgres are
// run with that user's credentials.
//
// StartStandby clones a cluster with pg_basebackup into a streaming hot
// standby, for tests of standby behaviour.
//
// Tests that need a server call Start (which calls Require). Require skips
// the test only when no server binary exists at all; with
// TRELLARA_REQUIRE_PG=1 (set by CI) it fails instead, so CI never passes by
// skipping.
package pgtest
