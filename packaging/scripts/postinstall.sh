#!/bin/sh
# dibs package: after install or upgrade (deb: configure [OLD]; rpm: 1 | 2).
# Enables and starts nothing: the agent needs the cluster key first. On an
# upgrade, an agent that was running is restarted onto the new binary; users'
# tmux sessions survive it (KillMode=process).
set -e

upgrade=
case "$1" in
configure) [ -n "$2" ] && upgrade=1 ;; # deb: $2 is the version replaced
1) ;;                                  # rpm: first install
[0-9]*) upgrade=1 ;;                   # rpm: 2 or more installed = upgrade
esac

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ -n "$upgrade" ]; then
		systemctl try-restart dibs.service || true
	fi
fi

if [ -z "$upgrade" ] && [ ! -e /etc/dibs/cluster.key ]; then
	cat <<'MSG'
dibs is installed; no agent runs yet. To start one on this node:
  1. once, on one node:  dibs keygen /etc/dibs/cluster.key
     then to each other node:
       ssh root@NODE 'install -m 0600 /dev/stdin /etc/dibs/cluster.key' < /etc/dibs/cluster.key
  2. add join = ["node01", "node02", …] under [cluster] in /etc/dibs/dibs.toml
  3. dibs config check && systemctl enable --now dibs
Ports: 7946 TCP and UDP between the nodes. The whole guide: /usr/share/doc/dibs/operations.md
MSG
fi
exit 0
