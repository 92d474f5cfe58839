package flow

import (
	"context"
	"strings"
	"testing"
)

// A failed connection's error keeps its words when the password is short or
// a common word: the connection string is scrubbed by its structure, never
// by searching the text for the password.
func TestConnectErrorIsScrubbedNotMangled(t *testing.T) {
	for _, pw := range []string{"a", "failed", "connect"} {
		url := "postgres://app:" + pw + "@127.0.0.1:1/sales?connect_timeout=5"
		_, err := connect(context.Background(), "source", url)
		if err == nil {
			t.Fatalf("password %q: connected to port 1", pw)
		}
		msg := err.Error()
		for _, keep := range []string{"connect to source 127.0.0.1:1/sales", "failed to connect", "database=sales", "connection refused"} {
			if !strings.Contains(msg, keep) {
				t.Errorf("password %q: error lost %q: %s", pw, keep, msg)
			}
		}
		if strings.Contains(msg, "app:"+pw+"@") || strings.Contains(msg, "<redacted>") {
			t.Errorf("password %q: error %s", pw, msg)
		}
	}
}
