package apply

import (
	"errors"
	"os"
	"testing"
)

func init() { testLogOut = os.Stderr }

func TestZZMessage(t *testing.T) {
	qe := &QuarantinedError{Flow: "sales", SourceID: "store_001", CommitLSN: 0x16B3748, Unit: "transaction", Relation: "public.orders", SQLState: "23505", ID: 3, ConfigPath: "trellara.yml", Err: errors.New("ERROR: duplicate key value violates unique constraint \"orders_pkey\" (SQLSTATE 23505)")}
	t.Log(qe)
	t.Log(&QuarantinedError{Flow: "sales", SourceID: "store_001", CommitLSN: 0x16B3748, Unit: "transaction", Relation: "public.orders", ID: 4, Err: &divergenceError{op: "UPDATE", matched: 0, key: `id="7"`}})
}
