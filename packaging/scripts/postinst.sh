#!/bin/sh
# trellara: after install or upgrade (deb postinst "configure"; rpm %post,
# $1 = 1 on install, 2 on upgrade).
#
# Creates the trellara system user and group and the state directory when
# they are missing, and makes systemd see the new units. It never enables or
# starts a unit: which flows run is the operator's decision.
set -e

case "$1" in
configure | 1 | 2) ;;
*) exit 0 ;; # deb abort-upgrade, abort-remove, ...: nothing was changed
esac

# The comment marks the user as created by this package; postrm removes only
# a user carrying it, never one an administrator made.
comment="Trellara change-data services (created by the trellara package)"
if ! getent group trellara >/dev/null; then
	groupadd --system trellara
fi
if ! getent passwd trellara >/dev/null; then
	useradd --system --gid trellara --home-dir /var/lib/trellara --no-create-home \
		--shell /usr/sbin/nologin --comment "$comment" trellara
fi
# systemd's StateDirectory= would create it at the first start; creating it
# here lets an operator run `trellara run --local` as the trellara user
# before enabling any unit.
if [ ! -d /var/lib/trellara ]; then
	install -d -o trellara -g trellara -m 0750 /var/lib/trellara
fi
# The extension path's state: trellara-sidecar@.service runs as the server's
# OS user (postgres), and so does the flow's first `trellara run --local
# --verify` (its initial snapshot), which needs the directory before any
# unit has started. Made only where the Debian/PGDG server user exists.
if [ ! -d /var/lib/trellara-sidecar ] && getent passwd postgres >/dev/null; then
	install -d -o postgres -g trellara -m 0750 /var/lib/trellara-sidecar
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
