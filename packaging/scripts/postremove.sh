#!/bin/sh
# dibs package: after removal (deb: remove | purge | upgrade …; rpm: 0 | 1).
# Purge also deletes the lease store and SSH host key in /var/lib/dibs and the
# runtime directory /run/dibs, after unmounting the small tmpfs the agent
# mounted there for each user's exit statuses (/run/dibs/exit/UID; a mount
# point cannot be removed). /etc/dibs/cluster.key, which the package did not
# install, stays. A run still going at purge keeps running; when it ends,
# its exit status has nowhere to go and is not recorded (no agent is left to
# read it anyway), and nothing is made again under /run.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi

# unmount_exit_dirs unmounts the exit-status tmpfs mounts the agent made
# (filesystem tmpfs, source dibs-exit) under /run/dibs/exit, and nothing
# else. Lazily: a file still open there does not keep the purge from
# finishing.
unmount_exit_dirs() {
	sed -n 's|^[^ ]* [^ ]* [^ ]* [^ ]* \(/run/dibs/exit/[^ ]*\) .* - tmpfs dibs-exit .*|\1|p' /proc/self/mountinfo |
		while read -r mp; do
			umount -l "$mp" || echo "dibs: cannot unmount $mp; unmount it yourself (umount -l $mp), then rm -rf /run/dibs"
		done
}

if [ "$1" = purge ]; then
	unmount_exit_dirs
	rm -rf /var/lib/dibs /run/dibs || echo "dibs: could not remove all of /var/lib/dibs and /run/dibs (above); the package is purged"
fi
exit 0
