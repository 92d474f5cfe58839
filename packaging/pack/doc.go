// Package pack turns the nfpm configs under packaging/nfpm into .deb and
// .rpm files, with the package version derived from `git describe`.
//
// Two kinds of package are built:
//
//	trellara                   binaries, systemd units, example config  .deb .rpm
//	postgresql-NN-trellara     the extension for major NN (Debian paths) .deb
//
// The configs are plain nfpm YAML with ${NAME} placeholders; Build fills
// them from Options and refuses a placeholder it does not know, so a typo
// cannot silently become an empty field in a shipped package.
package pack
