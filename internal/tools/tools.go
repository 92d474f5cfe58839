// Package tools pins module dependencies that are used across the tree
// before every importing package exists, so go.mod stays stable.
//go:build tools

package tools

import (
	_ "github.com/goreleaser/nfpm/v2"
	_ "github.com/jackc/pglogrepl"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "github.com/urfave/cli/v2"
	_ "github.com/zeebo/xxh3"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/protobuf/proto"
)
