// Package pack turns the nfpm package definitions at the repository root
// into .deb and .rpm files, with the package version derived from
// `git describe`.
//
// Two definitions, each built as .deb and .rpm:
//
//	nfpm.yaml             trellara: binaries, systemd units, example config
//	nfpm-extension.yaml   the extension, once per PostgreSQL major NN:
//	                        postgresql-NN-trellara .deb (Debian's paths)
//	                        postgresqlNN-trellara  .rpm (PGDG's /usr/pgsql-NN)
//
// The definitions are plain nfpm YAML with ${NAME} placeholders; Build fills
// them from Options and refuses a placeholder it does not know, so a typo
// cannot silently become an empty field in a shipped package.
package pack
