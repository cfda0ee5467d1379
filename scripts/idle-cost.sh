#!/usr/bin/env bash
# Measures what an idle agent costs: 8 simulated GPUs probed at 1 Hz, no
# clients. Prints CPU as a share of one core over the window, and RSS.
# Usage: scripts/idle-cost.sh [SECONDS]   (default 60)
set -euo pipefail
secs=${1:-60}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
go build -o "$dir/" ./cmd/dibs ./cmd/dibsd
"$dir/dibs" agent --sim 8xH100-80GB --node-name idle01 --data-dir "$dir/data" --socket "$dir/dibs.sock" 2>"$dir/log" &
pid=$!
sleep 3 # let it start and settle
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
c0=$(cpu); t0=$(date +%s.%N)
sleep "$secs"
c1=$(cpu); t1=$(date +%s.%N)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v tck="$tck" -v rss="$rss" 'BEGIN {
  printf "idle agent, 8 simulated GPUs at 1 Hz, %.0f s: CPU %.3f%% of one core, RSS %.1f MB\n", t1-t0, 100*(c1-c0)/tck/(t1-t0), rss/1024 }'
