//go:build full

package lake

import (
	"context"
	"strings"
	"testing"

	"github.com/trellara/trellara/internal/config"
)

// A production fleet's sql-postgres catalog needs verified TLS, and is
// refused before any connection (the address is not listening: a
// connection attempt would fail differently).
//
// Mutation tried: Open without the CheckPostgresTLS call — the error is a
// connection failure, not the rule (red).
func TestProductionCatalogNeedsVerifiedTLS(t *testing.T) {
	sink := Sink{Production: true, Warehouse: "file://" + t.TempDir(), Namespace: "n",
		Catalog: Catalog{Kind: CatalogPostgres, Name: "c", URI: config.InlineRef("postgres://lake:CatPw-1@127.0.0.1:1/catalog?sslmode=require")}}
	_, err := Open(context.Background(), sink)
	if err == nil || !strings.Contains(err.Error(), "lake.catalog.uri: has sslmode=\"require\"") || strings.Contains(err.Error(), "CatPw-1") {
		t.Errorf("a production catalog over sslmode=require: %v", err)
	}
}
