package config

import (
	"strings"
	"testing"
)

func prodLocal(t *testing.T, extra ...string) string {
	t.Helper()
	pairs := append([]string{"environment: development", "environment: production"}, extra...)
	return edit(t, readTestdata(t, "local.yml"), pairs...)
}

// The production TLS rule, by every way a connection string can fall
// short, at the source and a target; each refusal names the key and the
// fix, never the URL. Outside production the same strings pass and
// PlaintextNote names them.
//
// Mutation tried: ResolveSecretsWith without checkTLS — every production
// case resolves (red); CheckPostgresTLS accepting sslmode=require (red).
func TestProductionRequiresVerifiedTLS(t *testing.T) {
	const ca = "sslrootcert=/etc/trellara/pg-ca.pem"
	good := "postgres://app:Pw1@db.internal:5432/sales?sslmode=verify-full&" + ca
	for _, c := range []struct {
		name, url, extra, says string
	}{
		{"no sslmode", "postgres://app:Pw1@db.internal/sales", "", "has no sslmode"},
		{"disable", "postgres://app:Pw1@db.internal/sales?sslmode=disable", "", `sslmode="disable"`},
		{"prefer", "host=db.internal user=app password=Pw1 sslmode=prefer", "", `sslmode="prefer"`},
		{"require", "postgres://app:Pw1@db.internal/sales?sslmode=require&" + ca, "", `sslmode="require"`},
		{"verify-full without a CA", "postgres://app:Pw1@db.internal/sales?sslmode=verify-full", "", "no sslrootcert"},
		{"relative CA", "postgres://app:Pw1@db.internal/sales?sslmode=verify-full&sslrootcert=ca.pem", "", "not an absolute path"},
		{"verify-ca without a reason", "postgres://app:Pw1@db.internal/sales?sslmode=verify-ca&" + ca, "", "verify_ca_reason states no reason"},
		{"not a connection string", "Pw1-typed-here", "", "not a PostgreSQL URL"},
		{"verify-full", good, "", ""},
		{"keyword verify-full", "host=db.internal user=app password=Pw1 sslmode=verify-full " + ca, "", ""},
		{"verify-ca with a reason", "postgres://app:Pw1@10.0.0.5/sales?sslmode=verify-ca&" + ca, "  verify_ca_reason: reached by IP over a private link\n", ""},
		{"unix socket", "host=/var/run/postgresql user=app dbname=sales", "", ""},
	} {
		for _, at := range []string{"source", "target"} {
			in := prodLocal(t)
			env := map[string]string{"TRELLARA_SOURCE_URL": good, "TRELLARA_TARGET_URL": good}
			key := "source.database_url"
			if at == "source" {
				env["TRELLARA_SOURCE_URL"] = c.url
				in = edit(t, in, "  tables: [public.sales, public.line_items]\n", "  tables: [public.sales, public.line_items]\n"+c.extra)
			} else {
				key = "target.database_url"
				env["TRELLARA_TARGET_URL"] = c.url
				in = edit(t, in, "  mode: strict\n", "  mode: strict\n"+c.extra)
			}
			cfg, err := Parse([]byte(in))
			if err != nil {
				t.Fatalf("%s at %s: %v", c.name, at, err)
			}
			_, err = cfg.ResolveSecretsWith(fakeResolver{env: env})
			if c.says == "" {
				if err != nil {
					t.Errorf("%s at %s: refused: %v", c.name, at, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s at %s: production accepted it", c.name, at)
				continue
			}
			errs := validationErrors(t, err)
			if len(errs) != 1 || errs[0].Path != key || !strings.Contains(errs[0].Message, c.says) || errs[0].Fix == "" || errs[0].Line == 0 {
				t.Errorf("%s at %s: %v, want one error at %s saying %q with a fix", c.name, at, err, key, c.says)
			}
			if strings.Contains(err.Error(), "Pw1") {
				t.Errorf("%s at %s: the error shows the URL: %v", c.name, at, err)
			}

			// The same string outside production: accepted, and noted.
			dev, err := Parse([]byte(strings.Replace(in, "environment: production", "environment: development", 1)))
			if err != nil {
				t.Fatal(err)
			}
			sec, err := dev.ResolveSecretsWith(fakeResolver{env: env})
			if err != nil {
				t.Errorf("%s at %s: development refused it: %v", c.name, at, err)
				continue
			}
			if m, _ := ParseTLSMode(c.url); m.Verified() {
				continue // verify-ca verifies the chain: no plaintext to note
			}
			if n := dev.PlaintextNote(sec); !strings.Contains(n, key) || strings.Contains(n, "Pw1") {
				t.Errorf("%s at %s: the note %q does not name %s", c.name, at, n, key)
			}
		}
	}
}

// In production a listener beyond loopback needs run.listen_public with a
// reason; the opt-in without a reason, or a reason without the opt-in, is
// refused anywhere.
//
// Mutation tried: validator.listeners not called — 0.0.0.0 and ":port"
// pass production (red).
func TestProductionListenersNeedOptIn(t *testing.T) {
	run := func(listen string) string { return "run:\n  listen: {" + listen + "}\n" }
	for _, c := range []struct {
		name, runBlock, key, says string
	}{
		{"every interface", run("relay: '0.0.0.0:56351'"), "run.listen.relay", "listens beyond loopback"},
		{"empty host", run("applier: ':56350'"), "run.listen.applier", "listens beyond loopback"},
		{"IPv6 any", run("relay: '[::]:9401'"), "run.listen.relay", "listens beyond loopback"},
		{"a host name", run("relay: 'metrics.internal:9401'"), "run.listen.relay", "listens beyond loopback"},
		{"opt-in without reason", run("relay: '0.0.0.0:9401'") + "  listen_public: true\n", "run.listen_public_reason", "required with run.listen_public: true"},
		{"reason without opt-in", "run:\n  listen_public_reason: firewalled\n", "run.listen_public", "is not true"},
		{"loopback", run("relay: '127.0.0.1:9401', applier: 'localhost:9402'"), "", ""},
		{"IPv6 loopback", run("relay: '[::1]:9401'"), "", ""},
		{"opted in", run("relay: '0.0.0.0:9401'") + "  listen_public: true\n  listen_public_reason: firewalled to 10.0.9.0/24\n", "", ""},
	} {
		_, err := Parse([]byte(prodLocal(t) + c.runBlock))
		if c.key == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: production accepted it", c.name)
			continue
		}
		errs := validationErrors(t, err)
		if len(errs) != 1 || errs[0].Path != c.key || !strings.Contains(errs[0].Message, c.says) || errs[0].Fix == "" {
			t.Errorf("%s: %v, want one error at %s saying %q", c.name, err, c.key, c.says)
		}
	}
	// Outside production a public listener is allowed (and stated by
	// status: flow.listenNote).
	cfg, err := Parse([]byte(readTestdata(t, "local.yml") + "run:\n  listen: {relay: '0.0.0.0:9401'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if pub := cfg.PublicListeners(); len(pub) != 1 || pub[0].Key != "run.listen.relay" {
		t.Errorf("PublicListeners: %+v", pub)
	}
}
