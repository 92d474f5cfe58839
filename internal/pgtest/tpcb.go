package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TPCBSchema is the benchmark schema shared by the relay, apply and sidecar
// benchmarks, so their numbers compare: three balance tables, a history
// table and a publication of all four.
const TPCBSchema = `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE tellers (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE branches (id int PRIMARY KEY, balance bigint NOT NULL, filler text);
CREATE TABLE history (id bigserial PRIMARY KEY, aid int, tid int, bid int, delta int, mtime timestamptz DEFAULT clock_timestamp(), filler text);
INSERT INTO accounts SELECT g, 0, repeat('a', 80) FROM generate_series(1, 100000) g;
INSERT INTO tellers SELECT g, 0, repeat('t', 80) FROM generate_series(1, 100) g;
INSERT INTO branches SELECT g, 0, repeat('b', 80) FROM generate_series(1, 10) g;
CREATE PUBLICATION pub FOR TABLE accounts, tellers, branches, history;
`

// tpcbScript is one TPC-B-like transaction: three updates and an insert.
const tpcbScript = `\set aid random(1, 100000)
\set tid random(1, 100)
\set bid random(1, 10)
\set delta random(-5000, 5000)
BEGIN;
UPDATE accounts SET balance = balance + :delta WHERE id = :aid;
UPDATE tellers SET balance = balance + :delta WHERE id = :tid;
UPDATE branches SET balance = balance + :delta WHERE id = :bid;
INSERT INTO history (aid, tid, bid, delta) VALUES (:aid, :tid, :bid, :delta);
END;
`

// BenchTxns sizes benchmark workloads: TRELLARA_BENCH_TXNS, default 20000.
func BenchTxns() int {
	if v, err := strconv.Atoi(os.Getenv("TRELLARA_BENCH_TXNS")); err == nil && v > 0 {
		return v
	}
	return 20000
}

// RunTPCB commits txns TPC-B-like transactions on c with pgbench from the
// cluster's own bin directory, over clients connections.
func RunTPCB(t testing.TB, c *Cluster, txns, clients int) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "tpcb.sql")
	if err := os.WriteFile(script, []byte(tpcbScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(c.BinDir(), "pgbench"), "-n", "-c", strconv.Itoa(clients), "-j", "2",
		"-t", strconv.Itoa(txns/clients), "-f", script, c.URL("postgres"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v\n%s", err, out)
	}
}
