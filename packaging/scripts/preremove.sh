#!/bin/sh
# dibs package: before removal (deb: remove | upgrade NEW | …; rpm: 0 | 1).
# On removal the agent leaves the cluster for good and stops, with systemd
# or without (else it would run on from the deleted binary): users' tmux
# sessions keep running, but nothing holds their GPUs any more. Only the
# agent is ended: found by the unit or by the socket it listens on, never by
# its binary's name, so people's boards (`dibs`, `dibsd tui`) stay open. On an
# upgrade nothing happens here: postinstall restarts the agent, which keeps
# its leases and its gangs (SIGTERM means "restarting").
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac

# Removal is leaving for good (an upgrade is not: it only restarts the
# agent, which its peers wait out for the grace): `dibs leave` tells the
# cluster, so peers end this node's ranks at once instead of after the
# grace, and the agent exits 0. It fails when no agent answers, which is
# fine here.
leave_for_good() {
	echo "dibs: this node leaves the cluster for good (dibs leave): peers end its gangs' ranks now"
	/usr/bin/dibs leave >/dev/null 2>&1
}

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

# gone PIDS waits up to 10 s for those processes to end; false if some
# still run ($left names them).
gone() {
	i=0
	while [ $i -lt 20 ]; do
		left=
		for p in $1; do
			if kill -0 "$p" 2>/dev/null; then left="$left $p"; fi
		done
		[ -n "$left" ] || return 0
		sleep 0.5
		i=$((i + 1))
	done
	return 1
}

# stop_agent PIDS ends the agent (only the processes named). After `dibs
# leave` it is leaving and stops by itself: it gets 10 s for that (on a
# loaded node the leave's broadcast takes seconds), since a SIGTERM before
# it is done means "restarting", and the others would wait out the grace
# instead of taking the node as left. Then SIGTERM, and 10 s more.
stop_agent() {
	gone "$1" && return 0
	# shellcheck disable=SC2086 # one word per pid
	kill -TERM $left 2>/dev/null || true
	gone "$left" && return 0
	echo "dibs: the agent (pid${left}) did not stop in 20 s; stop it yourself"
}

if [ -d /run/systemd/system ]; then
	if systemctl is-active --quiet dibs.service || systemctl is-enabled --quiet dibs.service 2>/dev/null; then
		leave_for_good || true
		echo "dibs: stopping and disabling the agent (dibs.service); running sessions keep running, but nothing holds their GPUs any more (the others show this node left, its GPUs unknown)"
		systemctl disable --now dibs.service || true
	fi
fi
# An agent that systemd does not run (no systemd here, or one started by
# hand beside it) is found by its socket, and stopped before its binary goes
# (else it would run on from the deleted file).
pids=$(agent_pids | tr '\n' ' ')
if [ -n "$pids" ]; then
	leave_for_good || true
	if [ -d /run/systemd/system ]; then
		where="an agent outside dibs.service serves $(agent_socket)"
	else
		where="no systemd here"
	fi
	echo "dibs: $where; stopping the agent (pid ${pids% }) before its binary goes; running sessions keep running, but nothing holds their GPUs any more (the others show this node left, its GPUs unknown)"
	stop_agent "${pids% }"
fi
exit 0
