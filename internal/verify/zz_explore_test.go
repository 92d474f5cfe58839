package verify

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func cpuOf(t *testing.T, conn *pgx.Conn) time.Duration {
	var pid int
	if err := conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	u, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(u+st) * 10 * time.Millisecond
}

func TestZZExplore(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "host=/tmp/vproto port=57391 user=postgres dbname=postgres")
	if err != nil {
		t.Skip(err)
	}
	conn.Exec(ctx, "SET jit=off; SET enable_sort=off; SET work_mem='64MB'; SET max_parallel_workers_per_gather=0")
	qs := map[string]string{
		"count":      "SELECT count(*) FROM b",
		"cur":        `SELECT ((hashtextextended(t.id::text COLLATE "C", 0) & 9223372036854775807) % 128) AS b, count(*), sum(hashtextextended((t.*)::text COLLATE "C", 0))::text FROM ONLY b t GROUP BY 1`,
		"int8key":    `SELECT ((hashint8extended(t.id, 0) & 9223372036854775807) % 128) AS b, count(*), sum(hashtextextended((t.*)::text COLLATE "C", 0))::text FROM ONLY b t GROUP BY 1`,
		"rowonly":    `SELECT sum(hashtextextended((t.*)::text COLLATE "C", 0))::text FROM ONLY b t`,
		"textonly":   `SELECT sum(length((t.*)::text)) FROM ONLY b t`,
		"rowexpr":    `SELECT sum(hashtextextended(ROW(t.id,t.a,t.t,t.n,t.ts)::text COLLATE "C", 0))::text FROM ONLY b t`,
		"hashrec":    `SELECT ((hashint8extended(t.id, 0) & 9223372036854775807) % 128) AS b, count(*), sum(hash_record_extended(t.*, 0))::text FROM ONLY b t GROUP BY 1`,
		"groupcount": `SELECT ((hashint8extended(t.id, 0) & 9223372036854775807) % 128) AS b, count(*) FROM ONLY b t GROUP BY 1`,
		"md5":        `SELECT sum(('x'||substr(md5((t.*)::text),1,16))::bit(64)::bigint) FROM ONLY b t`,
	}
	for round := 0; round < 3; round++ {
		for _, name := range []string{"count", "cur", "int8key", "rowonly", "textonly", "rowexpr", "hashrec", "groupcount", "md5"} {
			c0 := cpuOf(t, conn)
			w0 := time.Now()
			rows, err := conn.Query(ctx, qs[name])
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
			}
			rows.Close()
			w := time.Since(w0)
			c := cpuOf(t, conn) - c0
			t.Logf("%-10s cpu %6.0f ms  wall %6.0f ms  => %.2f M rows/cpu-s", name, c.Seconds()*1000, w.Seconds()*1000, 1/c.Seconds())
		}
	}
}
