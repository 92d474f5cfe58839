#!/bin/sh
# trellara: before removal (deb prerm "remove"; rpm %preun, $1 = 0 on erase,
# 1 on upgrade).
#
# Stops running instances of every unit the package installs (each one runs
# the binary about to disappear; packaging/systemd/*.service, checked by
# packaging/pack's TestPrermStopsEveryUnit). Upgrades leave them alone: the
# new binary is picked up at the next restart, which the operator schedules.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl stop 'trellara@*.service' 'trellara-relay@*.service' \
		'trellara-applier@*.service' 'trellara-sidecar@*.service' >/dev/null 2>&1 || true
fi
exit 0
