package capture

import (
	"strings"
	"testing"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/relay/pgoutput"
)

// pgbench's TPC-B tables as pgoutput describes them: int4 keys and
// balances, blank-padded char(n) filler (type 1042, modifier n+4) and the
// history row's timestamp (1114).
var (
	tpcbAccounts = &pgoutput.Relation{RelationID: 16401, Namespace: "public", Name: "pgbench_accounts", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "aid", TypeOID: 23, TypeModifier: -1},
			{Name: "bid", TypeOID: 23, TypeModifier: -1}, {Name: "abalance", TypeOID: 23, TypeModifier: -1},
			{Name: "filler", TypeOID: 1042, TypeModifier: 88}}}
	tpcbTellers = &pgoutput.Relation{RelationID: 16402, Namespace: "public", Name: "pgbench_tellers", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "tid", TypeOID: 23, TypeModifier: -1},
			{Name: "bid", TypeOID: 23, TypeModifier: -1}, {Name: "tbalance", TypeOID: 23, TypeModifier: -1},
			{Name: "filler", TypeOID: 1042, TypeModifier: 88}}}
	tpcbBranches = &pgoutput.Relation{RelationID: 16403, Namespace: "public", Name: "pgbench_branches", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Key: true, Name: "bid", TypeOID: 23, TypeModifier: -1},
			{Name: "bbalance", TypeOID: 23, TypeModifier: -1}, {Name: "filler", TypeOID: 1042, TypeModifier: 92}}}
	tpcbHistory = &pgoutput.Relation{RelationID: 16404, Namespace: "public", Name: "pgbench_history", ReplicaIdentity: 'd',
		Columns: []pgoutput.RelationColumn{{Name: "tid", TypeOID: 23, TypeModifier: -1},
			{Name: "bid", TypeOID: 23, TypeModifier: -1}, {Name: "aid", TypeOID: 23, TypeModifier: -1},
			{Name: "delta", TypeOID: 23, TypeModifier: -1}, {Name: "mtime", TypeOID: 1114, TypeModifier: -1},
			{Name: "filler", TypeOID: 1042, TypeModifier: 26}}}
)

// tpcbTransaction is one pgbench TPC-B transaction as pgoutput sends it
// (BEGIN, three UPDATEs, one INSERT, COMMIT), decoded from its wire form
// so that column data aliases a receive buffer, as in capture.
func tpcbTransaction(tb testing.TB, xid uint32, lsn uint64) []pgoutput.Message {
	tb.Helper()
	null := pgoutput.Column{Kind: pgoutput.ColumnNull}
	msgs := []pgoutput.Message{
		&pgoutput.Begin{FinalLSN: pgoutput.LSN(lsn), Xid: pgoutput.XID(xid), CommitTime: 849_000_000_000_000},
		&pgoutput.Update{RelationID: tpcbAccounts.RelationID, New: []pgoutput.Column{txt("1234567"), txt("13"), txt("-4711"), txt(strings.Repeat(" ", 84))}},
		&pgoutput.Update{RelationID: tpcbTellers.RelationID, New: []pgoutput.Column{txt("117"), txt("13"), txt("-202811"), null}},
		&pgoutput.Update{RelationID: tpcbBranches.RelationID, New: []pgoutput.Column{txt("13"), txt("1893311"), null}},
		&pgoutput.Insert{RelationID: tpcbHistory.RelationID, New: []pgoutput.Column{txt("117"), txt("13"), txt("1234567"), txt("-4711"),
			txt("2026-12-01 13:21:48.123456"), null}},
		&pgoutput.Commit{CommitLSN: pgoutput.LSN(lsn), EndLSN: pgoutput.LSN(lsn + 0x30), CommitTime: 849_000_000_000_000},
	}
	for i, m := range msgs {
		// The package-level Decode: a Decoder's messages last only until its next Decode.
		dm, err := pgoutput.Decode(pgoutput.Append(nil, m), pgoutput.LSN(lsn), false)
		if err != nil {
			tb.Fatal(err)
		}
		msgs[i] = dm
	}
	return msgs
}

// BenchmarkCaptureTPCB is capture's CPU per TPC-B transaction, shared by
// the external relay and the sidecar: the Assembler builds the
// transaction's rows from pgoutput and Batch.Add encodes its envelope.
// One op is one transaction.
func BenchmarkCaptureTPCB(b *testing.B) {
	var batch Batch
	a := NewAssembler(AssemblerOptions{SourceID: "bench", Pins: memPins{}}, func(e *pb.Envelope, end uint64, final bool) error {
		_, err := batch.Add(Resume{}, e, end, final)
		return err
	})
	for _, r := range []*pgoutput.Relation{tpcbAccounts, tpcbTellers, tpcbBranches, tpcbHistory} {
		if err := a.Handle(r, 0x100); err != nil {
			b.Fatal(err)
		}
	}
	txn := tpcbTransaction(b, 700, 0x1000)
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range txn {
			if err := a.Handle(m, 0x1000); err != nil {
				b.Fatal(err)
			}
		}
		if batch.Full() {
			batch.Reset()
		}
	}
	if a.Stats().Transactions == 0 || len(batch.Units) == 0 {
		b.Fatal("nothing was published")
	}
}
