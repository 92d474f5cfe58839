#!/usr/bin/env bash
# make install-test: install what `make packages` put in dist/ on this
# machine, check it, purge it, and check that nothing but operator files is
# left. Run as root on a disposable Debian 12 machine (CI): it installs and
# purges the trellara packages for real.
#
#   1. apt-get install ./dist/trellara_*.deb (+ postgresql-15-trellara if built)
#   2. user, state directory, nothing enabled; systemd-analyze verify on the
#      units; /usr/bin/trellara --version, trellara-check --help
#   3. the installed extension in a throwaway PostgreSQL 15 cluster:
#      shared_preload_libraries, CREATE EXTENSION, a trellara decoding slot
#   4. purge with operator data present: data and operator config stay, the
#      package's files go
#   5. install + purge on a clean slate: nothing at all is left, user removed
#   6. the trellara .rpm: rpm -qpl, --scripts, --configfiles, digests
#   7. the extension .rpms (postgresqlNN-trellara, PGDG layout): one per
#      extension .deb, rpm -qpi/-qpl/-qpR, the same file bytes as the .deb,
#      and a C library dependency (deb and rpm) that covers trellara.so's
#      GLIBC symbol versions
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" = 0 ] || { echo "install-test: run as root (it installs packages)" >&2; exit 1; }

pass=0
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; pass=$((pass + 1)); }

shopt -s nullglob
debs=(dist/trellara_*.deb)
rpms=(dist/trellara-*.rpm)
ext_debs=(dist/postgresql-15-trellara_*.deb)
all_ext_debs=(dist/postgresql-[0-9]*-trellara_*.deb)
ext_rpms=(dist/postgresql[0-9]*-trellara-*.rpm)
shopt -u nullglob
[ ${#debs[@]} = 1 ] || fail "want exactly one dist/trellara_*.deb, found ${#debs[@]}: run make packages"
[ ${#rpms[@]} = 1 ] || fail "want exactly one dist/trellara-*.rpm, found ${#rpms[@]}: run make packages"
version=$(dpkg-deb -f "${debs[0]}" Version)
echo "== install test of trellara $version"

(cd dist && sha256sum --quiet -c SHA256SUMS) || fail "dist/SHA256SUMS does not match dist/"
ok "dist/SHA256SUMS matches"
grep -q '"specVersion": "1.5"' dist/*.cdx.json || fail "no CycloneDX 1.5 SBOM in dist/"
ok "SBOM present (CycloneDX 1.5)"

# A previous interrupted run may have left the packages installed.
# purge: apt-get purge whichever of the packages is installed (apt refuses
# a name it knows nothing about).
purge() {
	local p installed=()
	for p in trellara postgresql-15-trellara; do
		if dpkg -s "$p" >/dev/null 2>&1; then installed+=("$p"); fi
	done
	[ ${#installed[@]} -gt 0 ] || return 0
	apt-get purge -y -qq "${installed[@]}" >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; return 1; }
}
work=$(mktemp -d /tmp/trellara-install-test.XXXXXX)
chmod 755 "$work"

# ext/run-regress.sh installs a developer build into the same PostgreSQL 15
# paths this package owns. Keep those files aside and put them back at the
# end, so the test leaves the machine as it found it.
ext_files=(/usr/lib/postgresql/15/lib/trellara.so /usr/share/postgresql/15/extension/trellara.control
	/usr/share/postgresql/15/extension/trellara--0.1.sql /usr/share/postgresql/15/extension/trellara--0.1--0.2.sql
	/usr/share/postgresql/15/extension/trellara--0.2.sql /usr/share/postgresql/15/extension/trellara--0.2--0.3.sql
	/usr/share/postgresql/15/extension/trellara--0.3.sql)
mkdir -p "$work/aside"
for f in "${ext_files[@]}"; do
	if [ -e "$f" ] && ! dpkg -S "$f" >/dev/null 2>&1; then
		cp -a "$f" "$work/aside/"
		echo "$f" >>"$work/aside/list"
	fi
done
cleanup() {
	set +e
	[ -n "${pgdata:-}" ] && runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$pgdata" -m immediate stop >/dev/null 2>&1
	purge
	rm -f /etc/trellara/install-test.yml /var/lib/trellara/install-test.data
	rmdir /etc/trellara /var/lib/trellara 2>/dev/null
	if [ -f "$work/aside/list" ]; then
		while read -r f; do cp -a "$work/aside/$(basename "$f")" "$f"; done <"$work/aside/list"
	fi
	rm -rf "$work"
}
trap cleanup EXIT

if dpkg -s trellara >/dev/null 2>&1; then
	echo "   purging a trellara left installed by an earlier run"
	purge
fi

# The package's own state directories must be the package's to make: one a
# test (or an earlier tool) left behind would hide what postinst does.
for d in /var/lib/trellara /var/lib/trellara-sidecar; do
	if [ -e "$d" ] && ! dpkg -s trellara >/dev/null 2>&1; then
		fail "$d exists before the package is installed ($(stat -c '%U:%G %a' "$d"), $(find "$d" | head -5 | tr '\n' ' ')): something outside the package created it; remove it and find what did"
	fi
done

# --- 1. install ---------------------------------------------------------------
pkgs=("./${debs[0]}")
if [ ${#ext_debs[@]} = 1 ]; then
	pkgs+=("./${ext_debs[0]}")
else
	echo "   no postgresql-15-trellara package in dist/: extension checks skipped"
fi
t=$SECONDS
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "apt-get install ${pkgs[*]}"; }
ok "apt-get install ${pkgs[*]} ($((SECONDS - t))s)"
dpkg -L trellara >"$work/files"
[ ${#ext_debs[@]} = 1 ] && dpkg -L postgresql-15-trellara >>"$work/files"

# --- 2. what the package set up ---------------------------------------------------
IFS=: read -r _ _ _ _ gecos home shell < <(getent passwd trellara) || fail "no trellara user after install"
if [ "$home" != /var/lib/trellara ] || [ "$shell" != /usr/sbin/nologin ]; then
	fail "trellara user: home $home, shell $shell"
fi
getent group trellara >/dev/null || fail "no trellara group"
ok "system user trellara ($gecos), home $home, shell $shell"
[ "$(stat -c '%U:%G %a' /var/lib/trellara)" = "trellara:trellara 750" ] ||
	fail "/var/lib/trellara is $(stat -c '%U:%G %a' /var/lib/trellara), want trellara:trellara 750"
ok "/var/lib/trellara trellara:trellara 0750"
# The extension path's state directory, for the sidecar unit and the first
# run --local --verify as the server's user.
[ "$(stat -c '%U:%G %a' /var/lib/trellara-sidecar 2>&1)" = "postgres:trellara 750" ] ||
	fail "/var/lib/trellara-sidecar is $(stat -c '%U:%G %a' /var/lib/trellara-sidecar 2>&1), want postgres:trellara 750"
ok "/var/lib/trellara-sidecar postgres:trellara 0750"
sidecar_unit=/usr/lib/systemd/system/trellara-sidecar@.service
grep -q -- '--role all' "$sidecar_unit" || fail "$sidecar_unit: does not run --role all (the sidecar and its appliers, as postgres)"
grep -q '^User=postgres$' "$sidecar_unit" || fail "$sidecar_unit: does not run as postgres"
ok "trellara-sidecar@ runs the sidecar and its appliers (--role all) as postgres"
if [ ${#ext_debs[@]} = 1 ]; then
	for want in "trellara extension installed for PostgreSQL 15" "ALTER SYSTEM SET shared_preload_libraries" \
		"ALTER SYSTEM SET trellara.tables" "runuser -u postgres -- trellara run --config /etc/trellara/FLOW.yml --local --verify" \
		"systemctl enable --now trellara-sidecar@FLOW"; do
		grep -qF -- "$want" "$work/install.log" || { cat "$work/install.log"; fail "the extension package's post-install text lacks: $want"; }
	done
	ok "postgresql-15-trellara's post-install text names the settings, the restart, the first run and the unit"
fi
enabled=$(find /etc/systemd/system -name 'trellara-*' 2>/dev/null)
[ -z "$enabled" ] || fail "install enabled units: $enabled"
ok "no unit enabled or started"

for u in trellara trellara-relay trellara-applier trellara-sidecar; do
	unit=/usr/lib/systemd/system/$u@.service
	[ -f "$unit" ] || fail "$unit not installed"
	# verify prints nothing for a clean unit; any output is a finding. The
	# template is checked as an instance, the way systemd would load it.
	out=$(systemd-analyze verify "$u@install-test.service" 2>&1) ||
		fail "systemd-analyze verify $u@install-test.service: $out"
	[ -z "$out" ] || fail "systemd-analyze verify $u@install-test.service: $out"
	# The exposure score (0 = fully sandboxed, 10 = not at all) is
	# informational; the units are written against the hardening list.
	exposure=$(systemd-analyze security --offline=true "$unit" 2>/dev/null | grep -o 'exposure level for [^:]*: [0-9.]* [A-Z]*' || true)
	ok "systemd-analyze verify $u@.service clean${exposure:+ (${exposure})}"
done

# The relay and applier run as separate units: the applier starts the relay
# (Wants=) and is ordered after it (After=), as installed.
applier_unit=/usr/lib/systemd/system/trellara-applier@.service
grep -Eq '^After=.*trellara-relay@%i\.service' "$applier_unit" || fail "$applier_unit: no After=trellara-relay@%i.service"
grep -Eq '^Wants=.*trellara-relay@%i\.service' "$applier_unit" || fail "$applier_unit: no Wants=trellara-relay@%i.service"
grep -q -- '--role applier' "$applier_unit" || fail "$applier_unit: does not run --role applier"
if grep -qi 'not supported\|not implemented' "$applier_unit"; then fail "$applier_unit still says the applier is not supported"; fi
ok "trellara-applier@ starts after trellara-relay@ (Wants=, After=)"

# The binary's stamped version must be the one the package is named after.
got=$(/usr/bin/trellara --version)
stamped=$(sed -n 's/^trellara version \([^ ]*\) .*/\1/p' <<<"$got")
want=$(.cache/build/bin/mkpkg -print-version -describe "$stamped")-1
[ "$want" = "$version" ] || fail "/usr/bin/trellara says \"$got\", which packages as $want, but the package is $version"
ok "/usr/bin/trellara --version: $got (matches package $version)"
/usr/bin/trellara-check --help >/dev/null 2>&1 || fail "/usr/bin/trellara-check --help"
ok "/usr/bin/trellara-check --help"
/usr/bin/trellara-full --version >/dev/null || fail "/usr/bin/trellara-full --version"
ok "/usr/bin/trellara-full --version: $(/usr/bin/trellara-full --version)"
# Validation also resolves the credential references, so give it some.
TRELLARA_SOURCE_URL=postgres://source.invalid/db TRELLARA_TARGET_URL=postgres://target.invalid/db \
	/usr/bin/trellara config validate --config /etc/trellara/example.yml >/dev/null ||
	fail "/etc/trellara/example.yml does not validate"
ok "/etc/trellara/example.yml validates"
for f in /usr/share/trellara/prometheus/trellara-alerts.yml /usr/share/trellara/grafana/trellara-dashboard.json; do
	[ -f "$f" ] || fail "$f not installed"
done
ok "alert rules and dashboard in /usr/share/trellara"

# --- 3. the installed extension in a throwaway PostgreSQL 15 cluster -----------
if [ ${#ext_debs[@]} = 1 ]; then
	bin=/usr/lib/postgresql/15/bin
	pgdata=$work/data
	port=$((55000 + RANDOM % 400))
	chown postgres: "$work"
	runuser -u postgres -- "$bin/initdb" -D "$pgdata" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$work/initdb.log" 2>&1 ||
		{ cat "$work/initdb.log"; fail initdb; }
	{
		echo "shared_preload_libraries = 'trellara'"
		echo "wal_level = logical"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$work'"
		echo "port = $port"
		# Newer minors refuse plugins not listed; older ones refuse to start
		# if the setting exists. Same rule as ext/run-regress.sh.
		if "$bin/postgres" --describe-config 2>/dev/null | grep '^output_plugin_libraries' >/dev/null; then
			echo "output_plugin_libraries = 'pgoutput, test_decoding, trellara'"
		fi
	} >>"$pgdata/postgresql.conf"
	runuser -u postgres -- "$bin/pg_ctl" -D "$pgdata" -l "$work/server.log" -w -t 60 start >/dev/null ||
		{ cat "$work/server.log"; fail "PostgreSQL 15 with shared_preload_libraries=trellara did not start"; }
	sql() { runuser -u postgres -- "$bin/psql" -h "$work" -p "$port" -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
	ok "PostgreSQL 15 started with shared_preload_libraries = trellara ($(sql 'SHOW server_version'))"
	sql "CREATE EXTENSION trellara" || fail "CREATE EXTENSION trellara"
	ok "CREATE EXTENSION trellara (version $(sql "SELECT extversion FROM pg_extension WHERE extname = 'trellara'"))"
	sql "SELECT 'x' FROM pg_create_logical_replication_slot('install_test', 'trellara')" >/dev/null
	sql "CREATE TABLE install_test (id int PRIMARY KEY); INSERT INTO install_test VALUES (1)"
	frames=$(sql "SELECT count(*) FROM pg_logical_slot_get_binary_changes('install_test', NULL, NULL)")
	rendered=$(sql "SELECT trellara_frame_text('\x01500000000001000000'::bytea, true)")
	sql "SELECT pg_drop_replication_slot('install_test')" >/dev/null
	[ "$frames" -gt 0 ] || fail "the trellara output plugin produced no frames for a committed insert"
	ok "output plugin 'trellara' decoded a committed insert into $frames frames; trellara_frame_text works ($rendered)"
	runuser -u postgres -- "$bin/pg_ctl" -D "$pgdata" -m fast stop >/dev/null
	pgdata=""
fi

# --- 4. purge with operator data present ------------------------------------------
echo "version: 2" >/etc/trellara/install-test.yml
echo data >/var/lib/trellara/install-test.data
chown trellara: /var/lib/trellara/install-test.data
purge
grep -q 'purge leaves the state directories in place' "$work/purge.log" ||
	fail "purge with data did not say it kept /var/lib/trellara: $(cat "$work/purge.log")"
[ -f /var/lib/trellara/install-test.data ] || fail "purge deleted data in /var/lib/trellara"
[ -f /etc/trellara/install-test.yml ] || fail "purge deleted an operator's config file"
getent passwd trellara >/dev/null || fail "purge removed the user while files it owns remain"
ok "purge kept operator data, operator config and the user owning them, and said so"
left=()
while read -r f; do
	[ -d "$f" ] && continue # shared directories (/usr/bin, ...) stay
	[ -e "$f" ] && left+=("$f")
done <"$work/files"
[ ${#left[@]} = 0 ] || fail "purge left package files: ${left[*]}"
! dpkg -s trellara >/dev/null 2>&1 || fail "dpkg still knows trellara after purge"
ok "purge removed all $(wc -l <"$work/files") packaged paths but shared directories"
rm -f /etc/trellara/install-test.yml /var/lib/trellara/install-test.data
rmdir /etc/trellara

# --- 5. install + purge on a clean slate --------------------------------------------
rmdir /var/lib/trellara
userdel trellara 2>/dev/null || true
getent group trellara >/dev/null && groupdel trellara
apt-get install -y -qq --no-install-recommends "./${debs[0]}" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; fail "reinstall"; }
purge
for p in /etc/trellara /var/lib/trellara /var/lib/trellara-sidecar /usr/bin/trellara /usr/lib/systemd/system/trellara-relay@.service; do
	[ ! -e "$p" ] || fail "$p left after install + purge"
done
! getent passwd trellara >/dev/null || fail "purge left the trellara user it created"
! getent group trellara >/dev/null || fail "purge left the trellara group it created"
ok "install + purge on a clean slate leaves nothing (no files, no user, no group)"

# --- 6. the rpm ----------------------------------------------------------------------
command -v rpm >/dev/null || apt-get install -y -qq --no-install-recommends rpm >/dev/null
rpm=${rpms[0]}
rpm -K --nosignature "$rpm" >/dev/null || fail "rpm -K: digests of $rpm do not verify"
ok "rpm -K --nosignature $rpm"
list=$(rpm -qpl "$rpm")
for p in /usr/bin/trellara /usr/bin/trellara-check /usr/bin/trellara-full /etc/trellara/example.yml \
	/usr/lib/systemd/system/trellara-relay@.service /usr/lib/systemd/system/trellara-applier@.service \
	/usr/lib/systemd/system/trellara-sidecar@.service /usr/lib/systemd/system/trellara@.service \
	/usr/share/trellara/prometheus/trellara-alerts.yml /usr/share/trellara/grafana/trellara-dashboard.json; do
	grep -qx "$p" <<<"$list" || fail "rpm -qpl: $p missing"
done
ok "rpm -qpl lists the binaries, units, config, alert rules and dashboard ($(wc -l <<<"$list") paths)"
[ "$(rpm -qp --configfiles "$rpm")" = /etc/trellara/example.yml ] || fail "rpm config files: $(rpm -qp --configfiles "$rpm")"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | grep -q '^cn /etc/trellara/example.yml$' ||
	fail "example.yml is not %config(noreplace) in the rpm"
ok "rpm: /etc/trellara/example.yml is %config(noreplace)"
scripts=$(rpm -qp --scripts "$rpm")
for s in "postinstall scriptlet" "preuninstall scriptlet" "postuninstall scriptlet"; do
	grep -q "$s" <<<"$scripts" || fail "rpm -qp --scripts: no $s"
done
if grep -Eq 'systemctl (enable|start|restart)' <<<"$scripts"; then fail "rpm scripts enable or start units"; fi
for u in trellara trellara-relay trellara-applier trellara-sidecar; do
	grep -qF "'$u@*.service'" <<<"$scripts" || fail "rpm preuninstall does not stop $u@*.service"
done
ok "rpm -qp --scripts: post/preun/postun present, preun stops every unit, none enables or starts a unit"

# --- 7. the extension rpms -----------------------------------------------------------
# Built from the same definition (nfpm-extension.yaml) and the same build as
# the .debs: one postgresqlNN-trellara .rpm per postgresql-NN-trellara .deb,
# with PGDG's paths and dependency and the .deb's bytes.
rpm_version=$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$rpm")
[ ${#all_ext_debs[@]} = ${#ext_rpms[@]} ] ||
	fail "${#all_ext_debs[@]} extension .debs (${all_ext_debs[*]}) but ${#ext_rpms[@]} extension .rpms (${ext_rpms[*]})"
for deb in "${all_ext_debs[@]}"; do
	major=$(sed -n 's|^dist/postgresql-\([0-9]*\)-trellara_.*|\1|p' <<<"$deb")
	name=postgresql$major-trellara
	shopt -s nullglob
	found=("dist/$name-"*.rpm)
	shopt -u nullglob
	[ ${#found[@]} = 1 ] || fail "$deb has no $name .rpm (found: ${found[*]:-none})"
	erpm=${found[0]}
	rpm -K --nosignature "$erpm" >/dev/null || fail "rpm -K: digests of $erpm do not verify"
	info=$(rpm -qpi "$erpm")
	[ "$(rpm -qp --qf '%{NAME} %{VERSION}-%{RELEASE} %{ARCH}' "$erpm")" = "$name $rpm_version x86_64" ] ||
		fail "rpm -qpi $erpm: $info"
	grep -q "^Summary *: Trellara change capture extension for PostgreSQL $major\.$" <<<"$info" ||
		fail "rpm -qpi $erpm: summary does not name PostgreSQL $major: $info"
	# Same files as the .deb, moved from Debian's layout to PGDG's.
	x=$work/ext-$major
	mkdir -p "$x"
	dpkg-deb -x "$deb" "$x"
	# Both packages require at least the C library the library was linked
	# against (nfpm-extension.yaml declares it; a build may need more).
	needs=$(objdump -T "$x/usr/lib/postgresql/$major/lib/trellara.so" | grep -o 'GLIBC_[0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n1)
	[ -n "$needs" ] || fail "objdump -T: no GLIBC symbol versions in $deb's trellara.so"
	deb_libc=$(dpkg-deb -f "$deb" Depends | sed -n 's/.*libc6 (>= \([0-9.]*\)).*/\1/p')
	requires=$(rpm -qpR "$erpm" | grep -v '^rpmlib(' || true)
	rpm_libc=$(sed -n 's/^glibc >= \([0-9.]*\)$/\1/p' <<<"$requires")
	for declared in "deb libc6 ${deb_libc:-(none)}" "rpm glibc ${rpm_libc:-(none)}"; do
		v=${declared##* }
		[ "$v" != "(none)" ] && [ "$(printf '%s\n%s\n' "$needs" "$v" | sort -V | tail -n1)" = "$v" ] ||
			fail "trellara.so for PostgreSQL $major uses GLIBC_$needs symbols but the $declared dependency allows less: raise it in nfpm-extension.yaml"
	done
	[ "$(sort <<<"$requires")" = "$(printf 'glibc >= %s\npostgresql%s-server' "$rpm_libc" "$major")" ] ||
		fail "rpm -qpR $erpm: requires \"$requires\", want postgresql$major-server and glibc"
	want=$(cd "$x" && find . -type f | sort | while read -r f; do
		printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$f"
	done | sed -e "s| \./usr/lib/postgresql/$major/lib/| /usr/pgsql-$major/lib/|" \
		-e "s| \./usr/share/postgresql/$major/extension/| /usr/pgsql-$major/share/extension/|" | sort -k2)
	got=$(rpm -qp --qf '[%{FILEDIGESTS} %{FILENAMES}\n]' "$erpm" | sort -k2)
	[ "$got" = "$want" ] || fail "$erpm does not ship $deb's files in PGDG's paths:
rpm:  $got
want: $want"
	grep -qx "[0-9a-f]* /usr/pgsql-$major/lib/trellara.so" <<<"$got" || fail "$erpm: no /usr/pgsql-$major/lib/trellara.so"
	grep -qx "[0-9a-f]* /usr/pgsql-$major/share/extension/trellara.control" <<<"$got" ||
		fail "$erpm: no /usr/pgsql-$major/share/extension/trellara.control"
	grep -q " /usr/pgsql-$major/share/extension/trellara--.*\.sql$" <<<"$got" ||
		fail "$erpm: no install script under /usr/pgsql-$major/share/extension"
	[ "$(rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$erpm" | grep ' /usr/pgsql-[0-9]*/lib/trellara.so$' | cut -d' ' -f1)" = -rwxr-xr-x ] ||
		fail "$erpm: trellara.so is not 0755"
	rpm -qp --scripts "$erpm" | grep -qF "ALTER SYSTEM SET shared_preload_libraries" ||
		fail "$erpm: no post-install text naming the settings (rpm -qp --scripts)"
	ok "$name $rpm_version: requires postgresql$major-server, glibc >= $rpm_libc (trellara.so needs GLIBC_$needs); $(wc -l <<<"$got") files under /usr/pgsql-$major, the same bytes as $(basename "$deb")"
done
[ ${#all_ext_debs[@]} -gt 0 ] || echo "   no extension packages in dist/: extension rpm checks skipped"

echo "== install test passed ($pass checks)"
