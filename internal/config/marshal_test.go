package config

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// roundTrip checks Marshal → Parse → Marshal is stable.
func roundTrip(t *testing.T, c *Config) []byte {
	t.Helper()
	a, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(a)
	if err != nil {
		t.Fatalf("Marshal output does not parse: %v\n%s", err, a)
	}
	b, err := Marshal(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("round trip changed the file:\n%s\n---\n%s", a, b)
	}
	return a
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, name := range []string{"local.yml", "kafka-production.yml"} {
		c, err := Parse([]byte(readTestdata(t, name)))
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c)
	}
	// Every optional field set to a non-default value.
	c, err := Parse([]byte(readTestdata(t, "kafka-production.yml")))
	if err != nil {
		t.Fatal(err)
	}
	c.Environment = Staging
	c.Source.Capture, c.Source.Socket = CaptureExtension, "/run/postgresql/trellara.sock"
	c.Source.ProtocolVersion, c.Source.Streaming, c.Source.MemoryBytesMax = 1, false, 3*MiB+1
	c.Source.Tables = append(c.Source.Tables, TableName{Schema: "Sales", Name: "line.items"})
	k := c.Transport.Kafka
	k.Profile, k.Acks, k.Idempotent, k.ReplicationFactor, k.MinInsyncReplicas = ProfileDevelopment, AcksNone, false, 1, 1
	k.TLS = &TLS{}
	k.SASL.Mechanism, k.SASL.Password = SASLPlain, InlineRef(`pa"ss: #word`)
	c.Target.Mode, c.Target.Schema, c.Target.CreateTables = ModePartitioned, "trellara_meta", true
	c.Schema.UnknownTablePolicy = PolicyAllowCompatible
	c.Run = Run{Evaluate: true, Listen: Listen{Relay: "127.0.0.1:9501", Applier: "[::1]:9502"}}
	out := roundTrip(t, c)
	back, _ := Parse(out)
	if s, _ := back.Transport.Kafka.SASL.Password.Resolve(); s.Reveal() != `pa"ss: #word` {
		t.Errorf("inline value did not survive: %s", out)
	}
	if !strings.Contains(string(out), "tls: {}") {
		t.Errorf("empty tls not written as {}:\n%s", out)
	}
	c.Transport.Kafka = nil
	c.Transport.Local = DefaultLocal()
	c.Transport.Local.Dir = "/d"
	c.Transport.Local.Retention = Retention{MaxBytes: 0, MaxAge: 36 * time.Hour}
	c.Transport.Local.ExpirePastRetention = true
	roundTrip(t, c)
}

func TestMarshalRefusesInvalid(t *testing.T) {
	c := Default()
	if _, err := Marshal(c); err == nil {
		t.Fatal("Marshal of an incomplete config succeeded")
	}
}

func TestStarter(t *testing.T) {
	c, err := Starter(StarterOptions{
		SourceDatabaseURL: InlineRef("postgres://app:pw@localhost/shop"),
		TargetDatabaseURL: EnvRef("TRELLARA_TARGET_URL"),
		Tables:            []string{"public.line_items", "public.Sales"},
		Database:          "Sales",
		Evaluate:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Flow != "sales" || c.Source.Slot != "trellara_sales" || !c.Source.OwnsSlot || !c.Run.Evaluate ||
		c.Transport.Local.Dir != "trellara-data/sales" || !c.Target.CreateTables {
		t.Errorf("evaluate starter: %+v", c)
	}
	out := roundTrip(t, c)
	if !strings.HasPrefix(string(out), "# Trellara configuration, schema v2") {
		t.Errorf("no header comment:\n%s", out)
	}

	c, err = Starter(StarterOptions{SourceDatabaseURL: EnvRef("SRC"), Tables: []string{`inv."Stock-Levels"`, "inv.orders"}, Database: "Stock-Levels", Environment: Production})
	if err != nil {
		t.Fatal(err)
	}
	if c.Flow != "stock_levels" || c.Target != nil || c.Source.OwnsSlot || c.Transport.Local.Dir != "/var/lib/trellara/stock_levels" {
		t.Errorf("production starter: %+v", c)
	}

	_, err = Starter(StarterOptions{SourceDatabaseURL: InlineRef("postgres://u:pw@h/db"), Tables: []string{"sales"}, Environment: Production})
	errs := validationErrors(t, err)
	paths := map[string]bool{}
	for _, fe := range errs {
		paths[fe.Path] = true
	}
	if !paths["source.tables[0]"] || !paths["source.database_url"] || strings.Contains(err.Error(), "pw@") {
		t.Errorf("starter errors: %v", err)
	}

	// The flow is named after the database, never after a table; without
	// either a name or a database it is asked for.
	_, err = Starter(StarterOptions{SourceDatabaseURL: EnvRef("SRC"), Tables: []string{"public.users", "public.posts"}})
	if errs := validationErrors(t, err); len(errs) != 1 || errs[0].Path != "flow" {
		t.Errorf("starter without a flow name or database: %v", err)
	}
}

func TestCreateFile(t *testing.T) {
	c, err := Starter(StarterOptions{SourceDatabaseURL: InlineRef("postgres://u:pw@h/db"), Tables: []string{"public.sales"}, Flow: "sales", Evaluate: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "trellara.yml")
	if err := CreateFile(path, c); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600 (the file may hold an inline credential)", st.Mode().Perm())
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Transport.Local.Dir != filepath.Join(dir, "trellara-data/sales") {
		t.Errorf("dir = %s", loaded.Transport.Local.Dir)
	}
	before, _ := os.ReadFile(path)
	err = CreateFile(path, c)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second CreateFile: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("existing file was modified")
	}
	if err := CreateFile(filepath.Join(dir, "missing-dir", "t.yml"), c); err == nil || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("CreateFile into missing dir: %v", err)
	}
}
