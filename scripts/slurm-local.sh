#!/usr/bin/env bash
# slurm-local.sh CMD [ARGS...]: runs CMD with a throwaway one-node SLURM up on
# this machine — munged, slurmctld and slurmd on loopback, in a temporary
# directory, with two fake GPUs (device nodes made with mknod) as gres — and
# SLURM_CONF pointing at it; stops it all afterwards. For comparing dibs with
# SLURM's clients on the same machine:
#   scripts/slurm-local.sh scripts/startup-bench.sh 100
# Needs root and the Debian packages munge, slurmctld, slurmd, slurm-client
# (.ci/run installs them). Jobs are not confined (proctrack/linuxproc,
# task/none): a container has no cgroup tree for slurmd.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm-local: needs root (daemons, mknod)"; exit 1; }
for b in munged slurmctld slurmd squeue srun sinfo scontrol; do
	command -v $b >/dev/null || [ -x /usr/sbin/$b ] || { echo "slurm-local: $b is missing: apt-get install munge slurmctld slurmd slurm-client"; exit 1; }
done
PATH=$PATH:/usr/sbin

dir=$(mktemp -d)
chmod 755 "$dir"
pids=()
cleanup() {
	scontrol shutdown >/dev/null 2>&1 || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir"/{dev,munge,state,spool,log}
chmod 700 "$dir/munge"
mknod -m 666 "$dir/dev/nvidia0" c 195 0
mknod -m 666 "$dir/dev/nvidia1" c 195 1

host=$(hostname -s)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mem=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)

head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged -F --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
	--log-file="$dir/log/munged.log" --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" >"$dir/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done

cat >"$dir/slurm.conf" <<EOF
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
echo "NodeName=$host Name=gpu File=$dir/dev/nvidia[0-1]" >"$dir/gres.conf"
printf "CgroupPlugin=autodetect\nConstrainDevices=no\n" >"$dir/cgroup.conf"
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$dir/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
	sinfo -h -N -o '%N %t' 2>/dev/null | grep -q "^$host idle" && break
	sleep 0.1
done
sinfo -h -N -o '%N %t' 2>/dev/null | grep -q "^$host idle" || {
	echo "slurm-local: the node did not come up idle"
	for f in "$dir"/log/*; do echo "== $f"; tail -n 20 "$f"; done
	exit 1
}
echo "slurm-local: $host idle, 2 fake GPUs, SLURM_CONF=$SLURM_CONF"
"$@"
