// Package consumerconfig opens a consumer from a flow's trellara.yml: the
// convenience for a program that runs beside the trellara CLI and shares
// its configuration file.
//
// It is the one public package that reads the CLI's YAML schema
// (internal/config), and it is deliberately outside the data path: package
// consumer, like capture, relay, apply, transport and segmentlog, takes its
// own Options and never imports internal/config (the import rules are a
// test: internal/importrules). A program that has no trellara.yml calls
// consumer.Open with the log directory instead.
//
//	c, err := consumerconfig.Open("trellara.yml", "search-index", consumer.Options{})
package consumerconfig

import (
	"fmt"

	"github.com/trellara/trellara/consumer"
	"github.com/trellara/trellara/internal/config"
)

// Open opens the log of the flow configured in configPath for consumer
// name. It reads only the transport section; no secret is resolved.
func Open(configPath, name string, opts consumer.Options) (*consumer.Consumer, error) {
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, err
	}
	if cfg.Transport.Local == nil {
		return nil, fmt.Errorf("consumer: flow %s has no local log (transport.local); read its topic with package consumer/kafkaconsumer (docs/CONSUMERS.md)", cfg.Flow)
	}
	return consumer.Open(cfg.Transport.Local.LogDir(), name, opts)
}
