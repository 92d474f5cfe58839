package check

import (
	"context"
	"testing"
	"time"

	"github.com/trellara/trellara/internal/pgsession"
	"github.com/trellara/trellara/internal/pgtest"
)

// The grader reads numbers and settings as text: its sessions run under the
// pinned settings, whatever the database sets.
func TestSessionRunsUnderPinnedSettings(t *testing.T) {
	c := pgtest.Start(t, pgtest.Options{NoFsync: true})
	c.Exec(t, `ALTER DATABASE postgres SET DateStyle = 'SQL, DMY'`,
		`ALTER DATABASE postgres SET extra_float_digits = 0`,
		`ALTER DATABASE postgres SET client_encoding = 'LATIN1'`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Connect(ctx, c.URL("postgres"), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := pgsession.Confirm(ctx, s.Conn.PgConn()); err != nil {
		t.Error(err)
	}
}
