#!/usr/bin/env bash
# run-ab.sh OLD_DIR NEW_DIR [RUNS]: `dibs run -g 1 -- true`, start to exit,
# with two builds side by side: each directory holds a dibs and a dibsd
# (build them as the release does: CGO_ENABLED=0 go build -trimpath
# -ldflags "-s -w" -o DIR/dibs ./cmd/dibs; go build ... -o DIR/dibsd
# ./cmd/dibsd). Each build gets an agent of its own (8 simulated GPUs, its
# own socket, data and TMUX_TMPDIR), and the two are timed run for run,
# interleaved, so a busy machine slows both alike; each run's lease is
# released, untimed, before the next. Prints the p25, median and p75 of
# RUNS runs each (default 100), in ms. For the agent's side of a run (the
# claim, the session's start), which startup-bench.sh's BASE (a second
# client against one agent) does not compare.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_DIR NEW_DIR [RUNS]"; exit 2; }
runs=${3:-100}
tmp=$(mktemp -d)
# The agent keeps the runs' exit status in exit/ beside its socket, where
# each user's wrapper must reach it, as in /run/dibs: mktemp's 0700 would
# make every run fall back to starting without it (and log a warning),
# which is not the path a real install takes.
chmod 0755 "$tmp"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in old new; do
		[ ! -d "$tmp/$n/tmux" ] || TMUX_TMPDIR=$tmp/$n/tmux tmux kill-server 2>/dev/null || true
		# An agent run as root caps each user's exit directory with a tmpfs.
		for m in "$tmp/$n"/exit/*; do ! mountpoint -q "$m" || umount "$m" || true; done
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
declare -A bin=([old]=$1 [new]=$2)
for n in old new; do
	mkdir -p "$tmp/$n" && mkdir -m 0700 "$tmp/$n/tmux"
	TMUX_TMPDIR=$tmp/$n/tmux "${bin[$n]}/dibs" agent --node-name node01 --sim 8xH100-80GB \
		--data-dir "$tmp/$n/data" --socket "$tmp/$n/dibs.sock" >"$tmp/$n/agent.log" 2>&1 &
	pids+=($!)
done
for n in old new; do
	for _ in $(seq 100); do
		DIBS_SOCKET=$tmp/$n/dibs.sock "${bin[$n]}/dibs" status >/dev/null 2>&1 && break
		sleep 0.1
	done
	DIBS_SOCKET=$tmp/$n/dibs.sock "${bin[$n]}/dibs" status >/dev/null || { echo "the $n agent did not start:"; cat "$tmp/$n/agent.log"; exit 1; }
	: >"$tmp/$n.us"
done
cd "$tmp"
for _ in $(seq "$runs"); do
	for n in old new; do
		export DIBS_SOCKET=$tmp/$n/dibs.sock TMUX_TMPDIR=$tmp/$n/tmux
		t0=$EPOCHREALTIME
		"${bin[$n]}/dibs" run -g 1 -- true >/dev/null 2>"$tmp/err" || { echo "$n: dibs run failed: $(cat "$tmp/err")"; exit 1; }
		t1=$EPOCHREALTIME
		echo $((${t1/./} - ${t0/./})) >>"$tmp/$n.us"
		"${bin[$n]}/dibs" release --all >/dev/null 2>&1 || true
		sleep 0.05
	done
done
for n in old new; do
	sort -n "$tmp/$n.us" | awk -v n="$n" -v d="${bin[$n]}" '{v[NR] = $1} END {printf "%-4s %-30s p25 %6.2f  median %6.2f  p75 %6.2f ms\n", n, d, v[int(NR / 4) + 1] / 1000, v[int(NR / 2) + 1] / 1000, v[int(NR * 3 / 4) + 1] / 1000}'
done
