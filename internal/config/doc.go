// Package config reads, validates, redacts and writes Trellara's
// configuration file (schema v2, YAML).
//
// Reading is strict: an unknown key is an error naming its full path and
// line, and every problem in a file is reported at once in a
// *ValidationError, each with the fix. docs/CONFIG.md documents every key.
//
// Credentials never need to be in the file. A credential key holds a
// reference — {env: NAME} or {file: /absolute/path} — resolved by
// ResolveSecrets into Secret values that print as "<redacted>" through fmt,
// encoding/json, yaml and log/slog; Secret.Reveal is the only accessor.
// An inline value is accepted only outside environment: production.
//
// environment: production is a gate, not a label: Validate refuses inline
// credentials, evaluation flows, and any Kafka transport that does not meet
// the production contract (TLS; mutual TLS or SASL SCRAM; replication factor
// ≥ 3; min.insync.replicas ≥ 2 and ≤ the replication factor; acks all;
// idempotent producer).
//
// The life of a configuration:
//
//	cfg, err := config.Load("trellara.yml")   // decode + defaults + Validate
//	secrets, err := cfg.ResolveSecrets()       // env/file → Secret, every failure at once
//	conn := pgx.Connect(ctx, secrets.SourceDatabaseURL.Reveal())
//
// Redact turns raw YAML into a shareable copy; Starter and CreateFile write
// the file `trellara init` starts from.
package config
