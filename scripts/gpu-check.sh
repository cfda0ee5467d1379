#!/usr/bin/env bash
# gpu-check.sh build | run OUTDIR: prove dibs on a real NVIDIA GPU.
#
# `build` (on any x86-64 Linux with Go): puts in hw/ what a GPU machine
# without Go needs: dibs and dibsd built as the release builds them (dibsd
# with cgo and -tags nvml, so NVML is linked), the nodeprobe/nvml test binary, and tmux's Debian packages in
# case that machine has no tmux.
#
# `run OUTDIR` (as root, on the GPU machine, from the repository root):
#   1. the hardware tests: what dibs reads through NVML against nvidia-smi,
#      field by field, and a real CUDA process with its owner and memory;
#   2. one NVML probe timed (the agent's once-a-second read);
#   3. a user's session: an agent on the real GPU, `dibs ls`, `dibs run` of
#      a CUDA program, the board in tmux, a squatter, `dibs doctor`, release.
# Everything goes to OUTDIR/gpu-check.log, the board to OUTDIR/board.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

build() {
	set -e
	mkdir -p hw/debs
	CGO_ENABLED=0 go build -trimpath -o hw/dibs ./cmd/dibs
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
		go build -trimpath -tags nvml -o hw/dibsd ./cmd/dibsd
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
		go test -tags nvml -c -o hw/nvml.test ./nodeprobe/nvml
	(cd hw/debs && apt-get download tmux libevent-core-2.1-7 libutempter0 >/dev/null)
	cp scripts/gpu-check.sh hw/
	ls -la hw hw/debs
}

step() { printf '\n===== %s\n' "$*"; }

run() {
	out=$1
	mkdir -p "$out"
	exec > >(tee "$out/gpu-check.log") 2>&1
	hw=$PWD/hw
	# The binaries every user runs, where every user may read them.
	mkdir -p /tmp/gpu-check-bin
	install -m 755 "$hw/dibs" /tmp/gpu-check-bin/dibs
	install -m 755 "$hw/dibsd" /tmp/gpu-check-bin/dibsd
	step "machine"
	uname -a
	nvidia-smi
	nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current,driver_version --format=csv
	if ! command -v tmux >/dev/null; then
		mkdir -p /tmp/tmuxroot
		for f in "$hw"/debs/*.deb; do dpkg -x "$f" /tmp/tmuxroot; done
		# Every user's session needs it, so it goes where every PATH looks.
		cp /tmp/tmuxroot/usr/bin/tmux /usr/local/bin/
		cp -a /tmp/tmuxroot/usr/lib/x86_64-linux-gnu/lib* /usr/local/lib/
		ldconfig
		echo "tmux from Debian's packages: $(tmux -V)"
	fi

	step "1. hardware tests (NVML against nvidia-smi)"
	(cd nodeprobe/nvml && "$hw/nvml.test" -test.v -test.count=1 -test.run Hardware -nvml.hardware)
	step "2. one probe timed: the real driver, then the mock for comparison"
	(cd nodeprobe/nvml && "$hw/nvml.test" -test.run '^$' -test.bench 'HardwareSnapshot|NVMLSnapshot8$' -test.benchtime 2s -test.count 3 -nvml.hardware)

	step "3. a user's session"
	export PATH=/tmp/gpu-check-bin:$PATH
	dibs probe
	dibs probe --backend nvidia-smi
	data=$(mktemp -d)
	# shellcheck disable=SC2086 # GPU_CHECK_AGENT: more agent flags, e.g. --sim 1xH200 for a dry run
	dibs agent ${GPU_CHECK_AGENT:---backend nvml} --data-dir "$data" --node-name h200 >"$out/agent.log" 2>&1 &
	agent=$!
	for _ in $(seq 50); do dibs ls >/dev/null 2>&1 && break; sleep 0.2; done
	dibs status
	dibs ls
	py="import torch,time,os; x=torch.empty(2<<30,dtype=torch.uint8,device='cuda'); torch.cuda.synchronize(); print('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True); time.sleep(90)"
	start=$(date +%s.%N)
	dibs run -g 1 --name train --note "gpu check" --for 10m -- python3 -c "$py"
	echo "dibs run returned in $(python3 -c "import time; print(round(time.time()-$start, 3))") s"
	sleep 12
	dibs logs train
	dibs ls
	dibs who
	dibs probe
	step "the board (dibs tui in tmux, 120x30)"
	tmux new-session -d -s board -x 120 -y 30 "/tmp/gpu-check-bin/dibs tui"
	sleep 4
	tmux capture-pane -p -t board | tee "$out/board.txt"
	step "a squatter: CUDA work started outside dibs"
	python3 -c "import torch,time; x=torch.empty(1<<30,dtype=torch.uint8,device='cuda'); torch.cuda.synchronize(); time.sleep(60)" &
	squat=$!
	sleep 12
	dibs ls
	tmux capture-pane -p -t board | tee "$out/board-squatter.txt"
	dibs doctor --window 1d
	echo "doctor exit: $?"
	kill "$squat" 2>/dev/null
	step "release"
	dibs release --all
	sleep 3
	dibs ls
	step "another user: alice runs on the GPU root let go (session started as her, her process on the board)"
	id alice >/dev/null 2>&1 || useradd -m alice
	py3=$(command -v python3)
	su alice -c "cd /tmp && PATH=/tmp/gpu-check-bin:\$PATH dibs run -g 1 --name alice-train --for 10m -- $py3 -c \"$py\""
	sleep 12
	dibs ls
	su alice -c "cd /tmp && PATH=/tmp/gpu-check-bin:\$PATH dibs logs alice-train"
	su alice -c "PATH=/tmp/gpu-check-bin:\$PATH dibs release --all"
	sleep 2
	dibs events --since 1h
	tmux kill-server 2>/dev/null
	kill "$agent"
	wait "$agent"
	echo "agent exit: $?"
	cp "$out/agent.log" "$out/agent.txt" 2>/dev/null
	tail -20 "$out/agent.log"
}

case ${1:-} in
build) build ;;
run) run "${2:?run needs OUTDIR}" ;;
*) echo "usage: $0 build | run OUTDIR" >&2; exit 2 ;;
esac
