#!/bin/sh
# dibs package: after removal (deb: remove | purge | upgrade …; rpm: 0 | 1).
# Purge also deletes the lease store and SSH host key in /var/lib/dibs and the
# runtime directory; /etc/dibs/cluster.key, which the package did not
# install, stays.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
	rm -rf /var/lib/dibs /run/dibs
fi
exit 0
