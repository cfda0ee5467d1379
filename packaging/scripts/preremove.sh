#!/bin/sh
# dibs package: before removal (deb: remove | upgrade NEW; rpm: 0 | 1).
# On removal, stop and disable the agent; users' tmux sessions keep running
# (KillMode=process). On upgrade, postinstall restarts it instead.
set -e

case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now dibs.service || true
	fi
	;;
esac
exit 0
