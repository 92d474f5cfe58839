#!/bin/sh
# postgresql-NN-trellara (deb postinst "configure"; rpm %post): the library
# is installed but loads only at the server's next start, and only when
# listed in shared_preload_libraries. Print what to set; change nothing:
# which server and tables to capture is the operator's decision.
set -e

case "$1" in
configure | 1 | 2) ;;
*) exit 0 ;;
esac

# The major this package is for: the directory its library went to.
major=""
for so in /usr/lib/postgresql/*/lib/trellara.so /usr/pgsql-*/lib/trellara.so; do
	[ -f "$so" ] || continue
	major=$(echo "$so" | sed -n 's|^/usr/lib/postgresql/\([0-9]*\)/.*|\1|p; s|^/usr/pgsql-\([0-9]*\)/.*|\1|p')
done

cat <<TEXT
trellara extension installed for PostgreSQL ${major:-NN}. To capture a flow with it
(the extension column of "The evaluation path" in /usr/share/doc/trellara/README.md):
  1. As a superuser, keeping the libraries already listed:
       ALTER SYSTEM SET shared_preload_libraries = 'trellara';   -- e.g. 'pg_stat_statements,trellara'
       ALTER SYSTEM SET trellara.database = 'DBNAME';
       ALTER SYSTEM SET trellara.tables = 'public.orders,public.line_items';
     and, on servers that have the setting output_plugin_libraries:
       ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'trellara';
     then restart the server (systemctl restart postgresql${major:+@$major-main}).
  2. trellara init --capture extension --source-database-url URL --table public.orders ... --output /etc/trellara/FLOW.yml
  3. As the server's OS user (the extension's socket admits only it):
       runuser -u postgres -- trellara preflight --config /etc/trellara/FLOW.yml
       runuser -u postgres -- trellara run --config /etc/trellara/FLOW.yml --local --verify   # initial snapshot, CONVERGED
  4. systemctl enable --now trellara-sidecar@FLOW   # the sidecar and its appliers, as postgres
TEXT
exit 0
