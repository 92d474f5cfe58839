#!/usr/bin/env bash
# make packages: build everything a release ships into dist/ —
#   trellara_<v>-1_amd64.deb, trellara-<v>-1.x86_64.rpm   (binaries, units, config)
#   postgresql-NN-trellara_<v>-1_amd64.deb,               (extension, per major built:
#   postgresqlNN-trellara-<v>-1.x86_64.rpm                 Debian's and PGDG's layout)
#   trellara_<v>.cdx.json                                 (CycloneDX 1.5 SBOM of the binaries)
#   SHA256SUMS
# from bin/ (make build) and the extension built here per major, as the
# package definitions nfpm.yaml and nfpm-extension.yaml at the repository
# root say.
#
# The extension is built from a pristine copy of ext/ per major, under
# .cache/build/ext/pgNN, with that major's pg_config: 15 from Debian,
# 17 and 18 from the headers pgmatrix/provision.sh fetches (no 16 headers
# exist here). A major whose headers or build fail gets no package, and the
# summary says why.
#
#   VERSION=...             git describe output (the Makefile passes its own)
#   PACKAGE_PG_MAJORS="15"  majors to build the extension for (default 15 17 18)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
version=${VERSION:-$(git describe --tags --always --dirty)}
majors=${PACKAGE_PG_MAJORS:-15 17 18}
mtime=$(git log -1 --format=%ct)
dist=dist
build=.cache/build/ext

for b in trellara trellara-check trellara-full; do
	[ -x "bin/$b" ] || { echo "packages: bin/$b missing: run make build" >&2; exit 1; }
done
# The binaries must carry the version being packaged, or the package would
# lie about what it contains.
stamped=$(bin/trellara --version)
case $stamped in
*" $version "*) ;;
*) echo "packages: bin/trellara reports \"$stamped\", not $version: run make build" >&2; exit 1 ;;
esac

rm -rf "$dist"
mkdir -p "$dist"

ext_args=()
notes=()
if [ ! -f ext/Makefile ]; then
	notes+=("extension: ext/ has no Makefile: no extension package")
	majors=""
fi
for major in $majors; do
	if ! pg_config=$(pgmatrix/provision.sh headers "$major" 2>"$dist/.headers.log"); then
		notes+=("extension for PostgreSQL $major: not built: $(tail -n1 "$dist/.headers.log")")
		continue
	fi
	dir=$build/pg$major
	rm -rf "$dir"
	mkdir -p "$dir"
	tar -C ext --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./results \
		--exclude='regression.*' --exclude=./log --exclude=./tmp_check -cf - . | tar -C "$dir" -xf -
	if ! make -C "$dir" PG_CONFIG="$pg_config" >"$dir/build.log" 2>&1; then
		notes+=("extension for PostgreSQL $major: not built: the extension build failed (see $dir/build.log)")
		continue
	fi
	# PGXS builds with -g; the package ships the stripped library.
	strip --strip-unneeded "$dir/trellara.so"
	ext_args+=(-ext "$major=$dir")
	notes+=("postgresql-$major-trellara (.deb), postgresql$major-trellara (.rpm): built with $("$pg_config" --version)")
done
rm -f "$dist/.headers.log"

tools=.cache/build/bin
mkdir -p "$tools"
go build -o "$tools/" ./packaging/cmd/mkpkg ./packaging/cmd/sbom
"$tools/mkpkg" -describe "$version" -mtime "$mtime" -out "$dist" "${ext_args[@]}"
"$tools/sbom" -version "$version" -time "$mtime" \
	-o "$dist/trellara_$("$tools/mkpkg" -print-version -describe "$version").cdx.json" \
	bin/trellara bin/trellara-check bin/trellara-full
(cd "$dist" && sha256sum -- *.deb *.rpm *.cdx.json >SHA256SUMS)

echo "== dist/"
ls -l "$dist"
for n in "${notes[@]}"; do echo "$n"; done
echo "extension for PostgreSQL 16: not built: no PostgreSQL 16 server headers are obtainable on this machine"
