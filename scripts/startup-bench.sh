#!/usr/bin/env bash
# startup-bench.sh [RUNS]: whole-process times of dibs commands, start to
# exit, as a person at a shell feels them: the median and p90 of RUNS runs
# each (default 100). When this machine runs SLURM (slurmctld answering
# `squeue`; scripts/slurm-local.sh starts one), each dibs command is also
# timed side by side with its SLURM counterpart, the two interleaved run for
# run so a busy machine slows both alike, with the ratio of the medians:
#   dibs version           / sinfo --version
#   dibs ls                / squeue
#   dibs claim -g 1        / salloc --gres=gpu:1 true
#   dibs run -g 1 -- true  / srun --gres=gpu:1 true
#
# It builds dibs and dibsd as the release does (-trimpath, -s -w; dibs pure
# Go) unless DIBS names a client binary (with its dibsd beside it), starts
# an agent on 8 simulated GPUs on a socket of its own, and times:
#   dibs version               no socket at all: process start-up alone
#   dibs help                  the same, and cobra's help template
#   dibs ls                    one request
#   dibs claim -g 1            one request with a bbolt commit (released untimed)
#   dibs run -g 1 -- true      a claim and a tmux session (released untimed)
# With GODEBUG=inittrace=1 it also sums the package init of `dibs help`.
#
# BASE=OLD-BINARY times OLD-BINARY too, run for run interleaved with the new
# one against the same agent, so a busy machine slows both alike: the
# before-and-after of docs/benchmarks.md.
set -euo pipefail
runs=${1:-100}
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
# The agent keeps the runs' exit status in exit/ beside its socket, where
# each user's wrapper must reach it, as in /run/dibs: mktemp's 0700 would
# make every run fall back to starting without it (and log a warning),
# which is not the path a real install takes.
chmod 0755 "$tmp"
agent_pid=
cleanup() {
	[ -z "$agent_pid" ] || kill "$agent_pid" 2>/dev/null || true
	[ -z "$agent_pid" ] || wait "$agent_pid" 2>/dev/null || true
	[ ! -d "$tmp/tmux" ] || TMUX_TMPDIR=$tmp/tmux tmux kill-server 2>/dev/null || true
	# An agent run as root caps each user's exit directory with a tmpfs.
	for m in "$tmp"/exit/*; do ! mountpoint -q "$m" || umount "$m" || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

dibs=${DIBS:-}
if [ -z "$dibs" ]; then
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/dibs" ./cmd/dibs
	go build -trimpath -ldflags "-s -w" -o "$tmp/dibsd" ./cmd/dibsd
	dibs=$tmp/dibs
fi
base=${BASE:-}
mkdir -m 0700 "$tmp/tmux"
export TMUX_TMPDIR=$tmp/tmux
"$dibs" agent --node-name node01 --sim 8xH100-80GB --data-dir "$tmp/data" --socket "$tmp/dibs.sock" >"$tmp/agent.log" 2>&1 &
agent_pid=$!
export DIBS_SOCKET=$tmp/dibs.sock
for _ in $(seq 100); do
	"$dibs" status >/dev/null 2>&1 && break
	sleep 0.1
done
"$dibs" status >/dev/null || { echo "the agent did not start:"; cat "$tmp/agent.log"; exit 1; }

# once CMD...: runs CMD and appends its wall time in µs to the file $into.
into=
once() {
	local t0 t1
	t0=$EPOCHREALTIME
	"$@" >/dev/null 2>"$tmp/err" || { echo "$* failed: $(cat "$tmp/err")"; exit 1; }
	t1=$EPOCHREALTIME
	echo $((${t1/./} - ${t0/./})) >>"$into"
}

# stats FILE: the median and the p90 of the µs in FILE, in ms.
stats() {
	sort -n "$1" | awk '{v[NR] = $1} END {printf "%8.2f %8.2f", v[int(NR / 2) + 1] / 1000, v[int(NR * 9 / 10) + 1] / 1000}'
}

# bench NAME AFTER CMD...: runs CMD RUNS times, AFTER (untimed) after each,
# and prints NAME, the median and the p90 in ms. CMD "dibs" is the dibs
# under test (and BASE, interleaved in alternating order, when set).
bench() {
	local name=$1 after=$2 i
	shift 2
	: >"$tmp/new"
	: >"$tmp/base"
	for ((i = 0; i < runs; i++)); do
		if [ "$1" != dibs ]; then
			into=$tmp/new once "$@"
			[ -z "$after" ] || $after
			continue
		fi
		if [ -n "$base" ] && ((i % 2 == 0)); then
			into=$tmp/base once "$base" "${@:2}"
			[ -z "$after" ] || $after
		fi
		into=$tmp/new once "$dibs" "${@:2}"
		[ -z "$after" ] || $after
		if [ -n "$base" ] && ((i % 2 == 1)); then
			into=$tmp/base once "$base" "${@:2}"
			[ -z "$after" ] || $after
		fi
	done
	if [ -n "$base" ] && [ "$1" = dibs ]; then
		printf '%-26s %s   %s\n' "$name" "$(stats "$tmp/base")" "$(stats "$tmp/new")"
	else
		printf '%-26s %s\n' "$name" "$(stats "$tmp/new")"
	fi
}
release_all() { "$dibs" release --all >/dev/null 2>&1 || true; }
inittrace() {
	GODEBUG=inittrace=1 "$1" help 2>&1 >/dev/null |
		awk '/^init /{ms += $5; kb += $8 / 1024; n++} END {printf "%d packages, %.2f ms, %.0f KiB", n, ms, kb}'
}

echo "$(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $runs runs each"
echo "dibs: $(stat -c %s "$dibs") bytes, $("$dibs" version | head -1), $(go version -m "$dibs" 2>/dev/null | grep -c '^[[:space:]]*dep') modules"
if [ -n "$base" ]; then
	echo "BASE: $(stat -c %s "$base") bytes, $("$base" version | head -1)"
	printf '%-26s %17s   %17s\n' "" "BASE" "dibs"
	printf '%-26s %8s %8s   %8s %8s\n' "command (ms)" "median" "p90" "median" "p90"
else
	printf '%-26s %8s %8s\n' "command (ms)" "median" "p90"
fi
# pair NAME AFTER DIBS-ARGS vs SLURM-CMD...: RUNS runs of the dibs command
# and of the SLURM one, alternating which goes first, AFTER (untimed) after
# each dibs run; prints both medians and p90s and the ratio of the medians.
pair() {
	local name=$1 after=$2 i dargs=() sargs=()
	shift 2
	while [ "$1" != vs ]; do dargs+=("$1"); shift; done
	shift
	sargs=("$@")
	# Five untimed rounds first: page cache, the agent's first answers.
	for ((i = 0; i < 5; i++)); do
		"$dibs" "${dargs[@]}" >/dev/null 2>&1 || true
		[ -z "$after" ] || $after
		"${sargs[@]}" >/dev/null 2>&1 || true
	done
	: >"$tmp/pd"
	: >"$tmp/ps"
	for ((i = 0; i < runs; i++)); do
		if ((i % 2 == 0)); then into=$tmp/ps once "${sargs[@]}"; fi
		into=$tmp/pd once "$dibs" "${dargs[@]}"
		[ -z "$after" ] || $after
		if ((i % 2 == 1)); then into=$tmp/ps once "${sargs[@]}"; fi
	done
	local d s
	d=$(sort -n "$tmp/pd" | awk '{v[NR] = $1} END {print v[int(NR / 2) + 1]}')
	s=$(sort -n "$tmp/ps" | awk '{v[NR] = $1} END {print v[int(NR / 2) + 1]}')
	printf '%-24s %s   %-26s %s   %5.2fx\n' "$name" "$(stats "$tmp/pd")" "${sargs[*]}" "$(stats "$tmp/ps")" "$(awk -v d="$d" -v s="$s" 'BEGIN {print d / s}')"
}
if command -v squeue >/dev/null && squeue -h >/dev/null 2>&1 && srun -N1 --gres=gpu:1 true >/dev/null 2>&1; then
	echo "side by side with SLURM, interleaved ($runs runs each; ms: median p90)"
	pair "dibs ls" "" ls vs squeue
	pair "dibs claim -g 1" release_all claim -g 1 vs salloc -N1 --gres=gpu:1 true
	pair "dibs run -g 1 -- true" release_all run -g 1 -- true vs srun -N1 --gres=gpu:1 true
	# Last: it needs no agent, and runs first it met the agent's start.
	pair "dibs version" "" version vs sinfo --version
	echo
fi
bench "dibs version" "" dibs version
bench "dibs help" "" dibs help
bench "dibs ls" "" dibs ls
bench "dibs claim -g 1" release_all dibs claim -g 1
bench "dibs run -g 1 -- true" release_all dibs run -g 1 -- true
if command -v squeue >/dev/null && squeue -h >/dev/null 2>&1; then
	bench "squeue" "" squeue
	if command -v srun >/dev/null && srun -N1 --gres=gpu:1 true >/dev/null 2>&1; then
		bench "srun --gres=gpu:1 true" "" srun -N1 --gres=gpu:1 true
	else
		echo "srun --gres=gpu:1 true: not timed (no node with a GPU gres answers here)"
	fi
else
	echo "squeue, srun: not timed (no slurmctld answers here)"
fi
echo "package init of dibs help: $(inittrace "$dibs")"
[ -z "$base" ] || echo "package init of BASE help: $(inittrace "$base")"
# CPU time is steadier than wall time on a shared machine.
if command -v perf >/dev/null && perf stat -e task-clock true >/dev/null 2>&1; then
	cpu() {
		perf stat -r "$runs" -e task-clock,page-faults "$@" 2>&1 >/dev/null |
			awk '/task-clock/ {ms = $1} /page-faults/ {pf = $1} END {printf "%.2f ms CPU, %s page faults", ms, pf}'
	}
	echo "dibs ls, mean of $runs: $(cpu "$dibs" ls)"
	[ -z "$base" ] || echo "BASE ls, mean of $runs: $(cpu "$base" ls)"
	if command -v squeue >/dev/null && squeue -h >/dev/null 2>&1; then
		echo "squeue, mean of $runs: $(cpu squeue)"
	fi
	echo "dibs version, mean of $runs: $(cpu "$dibs" version)"
	[ -z "$base" ] || echo "BASE version, mean of $runs: $(cpu "$base" version)"
	if command -v sinfo >/dev/null && sinfo --version >/dev/null 2>&1; then
		echo "sinfo --version, mean of $runs: $(cpu sinfo --version)"
	fi
fi
