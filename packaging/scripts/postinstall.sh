#!/bin/sh
# dibs package: after install or upgrade (deb: configure [OLD]; rpm: 1 | 2).
# It says what it did to the agent and to running work, with and without
# systemd, and only what is true where it runs (no systemctl advice without
# systemd). It enables and starts nothing on a first install (the agent needs
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

# --- agent_pids: kept the same in postinstall.sh and preremove.sh (TestPackageScriptsFindTheAgentAlike) ---
# agent_socket prints the socket this node's agent serves: the top-level
# socket key of /etc/dibs/dibs.toml, else the default.
agent_socket() {
	s=
	if [ -r /etc/dibs/dibs.toml ]; then
		s=$(sed -n -e '/^[[:space:]]*\[/q' -e "s/^[[:space:]]*socket[[:space:]]*=[[:space:]]*[\"']\([^\"']*\)[\"'].*/\1/p" /etc/dibs/dibs.toml)
	fi
	echo "${s:-/run/dibs/dibs.sock}"
}

# agent_pids prints the pid of the process that listens on the agent's
# socket: the agent, however it was started and from whichever binary. It is
# found by its socket, never by a binary's name: a person's board (`dibs`,
# `dibsd tui`) runs the same binary and listens on nothing, and must
# outlive the package. /proc/net/unix lists this network namespace's unix
# sockets; a listening one has flags 00010000.
agent_pids() {
	sock=$(agent_socket)
	inodes=$(while read -r _ _ _ flags _ _ inode path; do
		if [ "$flags" = 00010000 ] && [ "$path" = "$sock" ]; then echo "$inode"; fi
	done </proc/net/unix)
	for i in $inodes; do
		find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\\[$i\\]" 2>/dev/null
	done | sed 's|^/proc/\([0-9]*\)/.*|\1|' | sort -un
}
# --- end agent_pids ---

running=
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ -n "$old" ] && systemctl is-active --quiet dibs.service; then
		echo "dibs: restarting the agent (dibs.service) onto the new binary; running sessions keep running and keep their leases"
		systemctl try-restart dibs.service || echo "dibs: the restart failed: see systemctl status dibs"
	fi
	enabled=$(systemctl is-enabled dibs.service 2>/dev/null || true)
	active=$(systemctl is-active dibs.service 2>/dev/null || true)
	echo "dibs: the agent (dibs.service) is ${enabled:-disabled} and ${active:-inactive}"
	[ "$active" != active ] || running=1
	if [ "$active" != active ] && [ -e /etc/dibs/cluster.key ]; then
		echo "dibs: to start it: dibs config check && systemctl enable --now dibs"
	fi
else
	pids=$(agent_pids | tr '\n' ' ')
	if [ -n "$pids" ]; then
		running=1
		echo "dibs: no systemd here; an agent runs (pid ${pids% }, serving $(agent_socket)) and keeps running the binary it started from: restart it yourself to run this release (kill -TERM it, then start /usr/bin/dibsd agent as before; sessions and leases survive)"
	elif [ -e /etc/dibs/cluster.key ]; then
		echo "dibs: no systemd here and no agent running; start one under your supervisor: /usr/bin/dibsd agent --config /etc/dibs/dibs.toml (create /run/dibs, mode 0755, first)"
	else
		echo "dibs: no systemd here and no agent running"
	fi
fi

if [ ! -e /etc/dibs/cluster.key ]; then
	# Step 3 is what starts an agent here: systemctl with systemd, your
	# supervisor without it.
	if [ -d /run/systemd/system ]; then
		start="dibs config check && systemctl enable --now dibs"
	else
		start="dibs config check, then start /usr/bin/dibsd agent --config /etc/dibs/dibs.toml
     under your supervisor (no systemd here; create /run/dibs, mode 0755, first)"
	fi
	if [ -n "$running" ]; then
		head="dibs is installed; an agent runs here, without a cluster key. To make this node one of a cluster:"
	else
		head="dibs is installed; no agent runs yet. To start one on this node:"
	fi
	cat <<MSG
$head
  1. once, on one node:  dibs keygen /etc/dibs/cluster.key
     then to each other node:
       ssh root@NODE 'install -m 0600 /dev/stdin /etc/dibs/cluster.key' < /etc/dibs/cluster.key
  2. add join = ["node01", "node02", …] under [cluster] in /etc/dibs/dibs.toml
  3. $start
Ports: 7946 TCP and UDP between the nodes. The whole guide: /usr/share/doc/dibs/operations.md
MSG
fi
exit 0
