package flow

import (
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// Status states endpoints beyond loopback: with the opt-in and its reason,
// or that production would refuse them; nothing for loopback ones.
//
// Mutation tried: listenNote returning "" — red on both stated cases.
func TestListenNoteStatesPublicEndpoints(t *testing.T) {
	base := "version: 2\nflow: sales\nsource: {id: s, database_url: {env: X}, tables: [public.t]}\ntransport: {local: {dir: /tmp/x}}\n"
	for _, c := range []struct{ run, want string }{
		{"", ""},
		{"run: {listen: {relay: '0.0.0.0:9401'}}\n", "run.listen.relay 0.0.0.0:9401; environment production would refuse them"},
		{"environment: production\nrun: {listen: {relay: ':9401'}, listen_public: true, listen_public_reason: firewalled to 10.0.9.0/24}\n",
			"run.listen.relay :9401; run.listen_public: true, reason: firewalled to 10.0.9.0/24"},
	} {
		cfg, err := config.Parse([]byte(base + c.run))
		if err != nil {
			t.Fatal(err)
		}
		got := listenNote(cfg)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%q: note %q, want %q", c.run, got, c.want)
		}
	}
}
