#!/bin/sh
# dibs package: after install or upgrade (deb: configure [OLD]; rpm: 1 | 2).
# It says what it did to the agent and to running work, with and without
# systemd. It enables and starts nothing on a first install (the agent needs
# the cluster key first). On an upgrade a running agent is restarted onto the
# new binary: SIGTERM means "restarting", so users' tmux sessions keep running
# (KillMode=process), their leases stay held, and peers keep this node's
# gangs for the grace (queue.lost_after) while it is away.
set -e

# deb passes the version last configured, also when reinstalling over the
# config files a `dpkg -r` left; rpm passes how many are installed now.
old=
case "$1" in
configure) old=$2 ;;
[2-9] | [1-9][0-9]*) old=earlier ;;
esac

# agent_pids lists agents running without systemd's knowledge: a dibsd, or
# an older release's `dibs agent`, from this package's binaries (also when
# the file they started from was just replaced).
agent_pids() {
	for d in /proc/[0-9]*; do
		exe=$(readlink "$d/exe" 2>/dev/null) || continue
		case "$exe" in
		/usr/bin/dibsd | "/usr/bin/dibsd (deleted)") echo "${d#/proc/}" ;;
		/usr/bin/dibs | "/usr/bin/dibs (deleted)")
			tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q '^[^ ]* agent' && echo "${d#/proc/}" ;;
		esac
	done
}

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ -n "$old" ] && systemctl is-active --quiet dibs.service; then
		echo "dibs: restarting the agent (dibs.service) onto the new binary; running sessions keep running and keep their leases"
		systemctl try-restart dibs.service || echo "dibs: the restart failed: see systemctl status dibs"
	fi
	enabled=$(systemctl is-enabled dibs.service 2>/dev/null || true)
	active=$(systemctl is-active dibs.service 2>/dev/null || true)
	echo "dibs: the agent (dibs.service) is ${enabled:-disabled} and ${active:-inactive}"
	if [ "$active" != active ] && [ -e /etc/dibs/cluster.key ]; then
		echo "dibs: to start it: dibs config check && systemctl enable --now dibs"
	fi
else
	pids=$(agent_pids | tr '\n' ' ')
	if [ -n "$pids" ]; then
		echo "dibs: no systemd here; an agent runs (pid ${pids% }) and keeps running the binary it started from: restart it yourself to run this release (kill -TERM it, then start /usr/bin/dibsd agent as before; sessions and leases survive)"
	else
		echo "dibs: no systemd here and no agent running; run /usr/bin/dibsd agent --config /etc/dibs/dibs.toml under your supervisor (create /run/dibs, mode 0755, first)"
	fi
fi

if [ ! -e /etc/dibs/cluster.key ]; then
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
