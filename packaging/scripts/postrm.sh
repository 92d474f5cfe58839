#!/bin/sh
# trellara: after removal (deb postrm "remove"/"purge"; rpm %postun, $1 = 0
# on erase, 1 on upgrade).
#
# Removes only what this package created. Data is never deleted: the state
# directories hold the segment log and checkpoints, and losing them forces a
# reseed, so a non-empty one stays until the operator deletes it.
set -e

case "$1" in
remove | purge | 0) ;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi

# rpm has no purge; deb "remove" keeps configuration and the user for a
# later reinstall. Both stop here.
[ "$1" = purge ] || exit 0

# An empty state directory holds no data (postinst made it); remove it.
rmdir /var/lib/trellara 2>/dev/null || true
rmdir /var/lib/trellara-sidecar 2>/dev/null || true
kept=""
for dir in /var/lib/trellara /var/lib/trellara-sidecar; do
	if [ -e "$dir" ]; then
		kept="$kept $dir"
	fi
done
if [ -n "$kept" ]; then
	echo "trellara: purge leaves the state directories in place:$kept" >&2
	echo "trellara: they may hold segment logs and checkpoints; delete them yourself when they are no longer needed (rm -rf$kept)" >&2
	# Files there are owned by the trellara uid: keep the user and group so
	# that uid is not reused by another account.
	echo "trellara: the trellara user and group are kept while those files exist" >&2
	exit 0
fi

comment="Trellara change-data services (created by the trellara package)"
if [ "$(getent passwd trellara | cut -d: -f5)" = "$comment" ]; then
	userdel trellara >/dev/null 2>&1 || true
	# userdel usually drops the user's group too (USERGROUPS_ENAB); if it is
	# still there and has no members, it was ours.
	if getent group trellara >/dev/null && [ -z "$(getent group trellara | cut -d: -f4)" ]; then
		groupdel trellara >/dev/null 2>&1 || true
	fi
fi
exit 0
