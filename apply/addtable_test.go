package apply

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	pb "github.com/trellara/trellara/envelope/envelopepb"
	"github.com/trellara/trellara/internal/pgtest"
	"github.com/trellara/trellara/pgcatalog"
)

// An add_table barrier creates the target table (and its schema) from the
// source definition it carries, in the same target transaction as the
// table's first rows; redelivered, it changes nothing; without a
// definition it is refused, naming the relation and the LSN. With
// synchronous commits the CREATE is the transaction's first statement,
// sent outside its pipeline: it must still follow the transaction's BEGIN
// (lazyTx).
func TestAddTableBarrierCreatesTheTargetTable(t *testing.T) {
	_, conn := target(t, pgtest.Options{NoFsync: true})
	for _, mode := range []string{SyncCommitOn, SyncCommitOff} {
		t.Run("synchronous_commit="+mode, func(t *testing.T) {
			exec(t, conn, "DROP SCHEMA IF EXISTS app CASCADE", "DROP SCHEMA IF EXISTS trellara CASCADE")
			addTableBarrier(t, conn, func(c *Config) { c.SynchronousCommit = mode })
		})
	}
}

func addTableBarrier(t *testing.T, conn *pgx.Conn, mod func(*Config)) {
	rel := relation("app", "new_t", 'd', "id*", "v")
	detail, err := AddTableDetail(pgcatalog.TableDef{Schema: "app", Name: "new_t", PrimaryKey: []string{"id"},
		Columns: []pgcatalog.ColumnDef{{Name: "id", Type: "text", NotNull: true}, {Name: "v", Type: "text"}}})
	if err != nil {
		t.Fatal(err)
	}
	barrier := func(lsn uint64, detail string, id string) []byte {
		tx := newTxn(lsn).insert(rel, tv(id), tv("first"))
		tx.e.DdlEvents = []*pb.DDLEvent{{Kind: "add_table", Relation: "app.new_t", NewFingerprint: rel.Fingerprint, Detail: detail}}
		return tx.encode(t)
	}
	cur := &recCursor{}
	mustDrain(t, newApplier(t, conn, mod), cur, 0, [][]byte{barrier(100, detail, "1"), newTxn(200).insert(rel, tv("2"), tv("later")).encode(t)})
	if same := queryString(t, conn, `SELECT ((SELECT xmin FROM pg_class WHERE oid = 'app.new_t'::regclass)::text =
		(SELECT xmin FROM app.new_t WHERE id = '1')::text)::text`); same != "true" {
		t.Fatal("the target table was created in another transaction than its first row")
	}
	if n := queryInt(t, conn, `SELECT count(*) FROM app.new_t`); n != 2 {
		t.Fatalf("target holds %d rows, want 2", n)
	}
	if pk := queryString(t, conn, `SELECT string_agg(a.attname, ',') FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = 'app.new_t'::regclass AND i.indisprimary`); pk != "id" {
		t.Fatalf("target primary key %q, want id", pk)
	}
	// The same barrier again (a relay crash before the pin moved): the
	// table exists already, and the new row lands.
	mustDrain(t, newApplier(t, conn, mod), cur, 2, [][]byte{barrier(300, detail, "3")})
	if n := queryInt(t, conn, `SELECT count(*) FROM app.new_t`); n != 3 {
		t.Fatalf("after the barrier again: %d rows, want 3", n)
	}
	err = drain(t, newApplier(t, conn, mod), cur, 3, [][]byte{barrier(400, `{"Schema":"app"}`, "4")})
	if err == nil || !strings.Contains(err.Error(), "add_table of app.new_t") || !strings.Contains(err.Error(), "0/190") {
		t.Fatalf("a barrier without a definition: %v", err)
	}
}
