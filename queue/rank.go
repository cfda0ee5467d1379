package queue

import (
	"strconv"
	"strings"
)

// How a gang's ranks are started: what each is told of the others, and the
// command it runs (torchrun's flags, or one process per GPU as srun does).

// GangID names a gang after its entry's attempt; it reaches every rank as
// DIBS_GANG_ID and torchrun's rendezvous id.
func GangID(e QueueEntry) string { return strings.ReplaceAll(e.Key(), "#", "-") }

// RendezvousEnv is what every rank of a gang is told about the others:
// rank 0's host and port, every host, and the env:// variables that are
// right for the one process dibs starts on each node (WORLD_SIZE is the
// number of nodes; RankEnv adds RANK). NPROC_PER_NODE says how many GPUs
// each node holds, for a launcher (torchrun, PerGPUCommand) that starts one
// process per GPU and sets WORLD_SIZE = NNODES × NPROC_PER_NODE itself.
func RendezvousEnv(e QueueEntry, hosts []string, masterPort int) map[string]string {
	return map[string]string{
		"MASTER_ADDR":      hosts[0],
		"MASTER_PORT":      strconv.Itoa(masterPort),
		"WORLD_SIZE":       strconv.Itoa(e.Nodes),
		"LOCAL_WORLD_SIZE": "1",
		"LOCAL_RANK":       "0",
		"NNODES":           strconv.Itoa(e.Nodes),
		"NPROC_PER_NODE":   strconv.Itoa(e.GPUsPerNode),
		"DIBS_GANG_ID":     GangID(e),
		"DIBS_HOSTS":       strings.Join(hosts, ","),
	}
}

// RankEnv is one rank's environment: the gang's plus its NODE_RANK, which
// is also its RANK while one process runs per node.
func RankEnv(gang map[string]string, rank int) map[string]string {
	env := make(map[string]string, len(gang)+2)
	for k, v := range gang {
		env[k] = v
	}
	env["NODE_RANK"] = strconv.Itoa(rank)
	env["RANK"] = strconv.Itoa(rank)
	return env
}

// TorchrunCommand wraps a command in torchrun with the gang's c10d
// rendezvous. It writes the flags in the underscore spelling, the only one
// torch 1.x knows and one every later torchrun still accepts. torchrun
// runs its script with its own Python, so a command that names its
// interpreter (python3 train.py, /opt/venv/bin/python -m pkg) runs as
// written under --no_python, and a one-word command line (a shell line, as
// in a plain run) runs under /bin/sh -c. --redirects=1 --tee=1 is there
// for Debian 12's torch 1.13 on Python 3.11, whose torchrun fails before
// it starts a worker without it; every torchrun accepts it, and the
// workers' output still reaches the session (tee), prefixed with the rank.
// dibs knows which rank's node hosts the rendezvous store (NODE_RANK 0's,
// MASTER_ADDR), so it says so (is_host): torchrun's own guess compares
// MASTER_ADDR with what the host name resolves to, which on Debian
// (127.0.1.1 in /etc/hosts) never matches a node's address, and then no
// rank hosts the store.
//
// The rendezvous endpoint is not among the flags: it travels in the
// rank's environment (TorchrunEnv), which no other user can read, where a
// command line is everyone's (ps): another user who read the port there
// could bind it before torchrun did, and torch's TCPStore has no
// authentication (issue 31).
func TorchrunCommand(e QueueEntry, env map[string]string, cmd []string) []string {
	isHost := "0"
	if env["NODE_RANK"] == "0" {
		isHost = "1"
	}
	argv := []string{"torchrun",
		"--nnodes=" + strconv.Itoa(e.Nodes),
		"--nproc_per_node=" + strconv.Itoa(e.GPUsPerNode),
		"--rdzv_backend=c10d",
		"--rdzv_id=" + env["DIBS_GANG_ID"],
		"--rdzv_conf=is_host=" + isHost,
		"--redirects=1", "--tee=1",
	}
	return append(argv, TorchrunProgram(cmd)...)
}

// TorchrunEnv is a rank's environment for TorchrunCommand: env (not
// changed) plus PET_RDZV_ENDPOINT, MASTER_ADDR:MASTER_PORT, which every
// torchrun since torch 1.9 reads for --rdzv_endpoint when the flag is
// absent (PET_ and the flag's name).
func TorchrunEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out["PET_RDZV_ENDPOINT"] = joinHostPort(env["MASTER_ADDR"], env["MASTER_PORT"])
	return out
}

// TorchrunProgram is what follows torchrun's own flags for cmd: cmd
// itself when it starts with a script (torchrun runs it with Python), and
// after --no_python when it names its interpreter or is a shell line.
func TorchrunProgram(cmd []string) []string {
	switch {
	case len(cmd) == 1 && strings.ContainsAny(cmd[0], " \t|;&<>()$`'\"*?"):
		return append([]string{"--no_python", "/bin/sh", "-c"}, cmd...)
	case len(cmd) > 0 && IsInterpreter(cmd[0]):
		return append([]string{"--no_python"}, cmd...)
	}
	return cmd
}

// IsInterpreter reports whether a command's first word names Python
// (python, python3, python3.11, /usr/bin/python3, a venv's python), which
// torchrun would otherwise take for the script to run.
func IsInterpreter(word string) bool {
	base := word[strings.LastIndexByte(word, '/')+1:]
	rest, ok := strings.CutPrefix(base, "python")
	if !ok {
		return false
	}
	for _, c := range rest {
		if c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// perGPUScript starts NPROC_PER_NODE copies of its arguments, one per GPU
// of the lease, each with the env:// variables torchrun and srun give a
// worker, and waits for them: the first to fail stops the others and its
// status is the script's, so a failed rank fails the run. Every copy sees
// all the lease's GPUs; LOCAL_RANK picks one (torch.cuda.set_device). In a
// session bound to its GPUs' cores (launch.CPUMain exports the helper),
// each copy runs under `_cpus rank`, bound to its own GPU's cores.
const perGPUScript = `n=${NPROC_PER_NODE:-1}; node=${NODE_RANK:-0}
export WORLD_SIZE=$(( ${NNODES:-1} * n )) LOCAL_WORLD_SIZE=$n GROUP_RANK=$node
[ $# -eq 1 ] && set -- "${SHELL:-/bin/sh}" -c "$1"
[ -n "$DIBS_CPU_HELPER" ] && [ -n "$DIBS_GPU_CPUS" ] && set -- "$DIBS_CPU_HELPER" _cpus rank "$@"
pids=
i=0
while [ $i -lt $n ]; do
  RANK=$(( node * n + i )) LOCAL_RANK=$i "$@" &
  pids="$pids $!"
  i=$(( i + 1 ))
done
st=0
i=0
while [ $i -lt $n ]; do
  wait -n
  s=$?
  if [ $s -ne 0 ] && [ $st -eq 0 ]; then st=$s; kill $pids 2>/dev/null; fi
  i=$(( i + 1 ))
done
exit $st`

// PerGPUCommand wraps a command so that it runs once per GPU of the lease
// (as srun --ntasks-per-node or torchrun do), each copy with RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK set from the
// rank's NODE_RANK, NNODES and NPROC_PER_NODE. It runs under bash for
// wait -n.
func PerGPUCommand(cmd []string) []string {
	return append([]string{"/bin/bash", "-c", perGPUScript, "dibs-per-gpu"}, cmd...)
}

// joinHostPort is net.JoinHostPort without importing net.
func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// RankSessionName is the tmux session name of one rank of a named gang run,
// so the ranks on one node do not collide.
func RankSessionName(name string, e QueueEntry, rank int) string {
	if name == "" || e.Nodes <= 1 {
		return name
	}
	return name + "-" + strconv.Itoa(rank)
}
