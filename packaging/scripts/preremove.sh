#!/bin/sh
# dibs package: before removal (deb: remove | upgrade NEW | …; rpm: 0 | 1).
# On removal the agent leaves the cluster for good and stops, with systemd
# or without (else it would run on from the deleted binary): users' tmux
# sessions keep running, but nothing holds their GPUs any more. On an
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
	if systemctl is-active --quiet dibs.service || systemctl is-enabled --quiet dibs.service 2>/dev/null; then
		leave_for_good || true
		echo "dibs: stopping and disabling the agent (dibs.service); running sessions keep running, but their leases end with it"
		systemctl disable --now dibs.service || true
	fi
else
	pids=$(agent_pids | tr '\n' ' ')
	if [ -n "$pids" ]; then
		leave_for_good || true
		echo "dibs: no systemd here; stopping the agent (pid ${pids% }) before its binary goes; running sessions keep running, but their leases end with it"
		# shellcheck disable=SC2086 # one word per pid
		kill -TERM $pids 2>/dev/null || true
		i=0
		while [ $i -lt 20 ] && [ -n "$(agent_pids)" ]; do
			sleep 0.5
			i=$((i + 1))
		done
		if [ -n "$(agent_pids)" ]; then
			echo "dibs: the agent (pid $(agent_pids | tr '\n' ' ')) did not stop in 10 s; stop it yourself"
		fi
	fi
fi
exit 0
