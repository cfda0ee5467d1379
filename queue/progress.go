package queue

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Progress is what the cluster shows of every queued attempt: where each
// started, and which hold only gang reservations so far. The scheduler reads
// it so an attempt is never started twice.
type Progress struct {
	// Started maps an attempt's key to a node where it has (or had) a
	// committed lease.
	Started map[string]string
	// Reserving holds the keys of attempts with only gang reservations.
	Reserving map[string]bool
}

// Progress reads the view's leases and ended runs. An attempt that already
// ran somewhere counts as started even when its lease is gone before its
// origin's "running" mark arrives.
func (v ClusterView) Progress() Progress {
	p := Progress{Started: map[string]string{}, Reserving: map[string]bool{}}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, l := range n.Leases {
			switch {
			case l.Entry == "":
			case l.ReservedUntil.IsZero():
				p.Started[l.Entry] = n.Name
			default:
				p.Reserving[l.Entry] = true
			}
		}
		for _, x := range n.Ended {
			if !x.Reserved {
				p.Started[x.Entry] = n.Name
			}
		}
	}
	return p
}

// InFlight is a start the scheduler has sent and not yet seen in the
// cluster's state. Until it shows, its GPUs count as taken, so no other
// entry is planned onto them.
type InFlight struct {
	Key   string
	At    time.Time
	Ranks []RankPlacement
	User  string
	UID   int
}

// InFlightTimeout is how long an unseen start holds its GPUs in the
// scheduler's plans before it is forgotten.
const InFlightTimeout = 15 * time.Second

// Settled reports whether the scheduler is done with an in-flight start:
// its lease shows, its origin says it runs, its entry is gone or moved on to
// another attempt, or it is stale.
func (f InFlight) Settled(p Progress, entries map[string]QueueEntry, now time.Time) bool {
	if now.Sub(f.At) > InFlightTimeout {
		return true
	}
	if _, seen := p.Started[f.Key]; seen {
		return true
	}
	id, _, _ := strings.Cut(f.Key, "#")
	e, ok := entries[id]
	return !ok || e.Running || e.Key() != f.Key
}

// Hold adds placeholder leases for in-flight starts to the nodes they were
// sent to.
func Hold(nodes []lease.SchedNode, inflight []InFlight) {
	for _, f := range inflight {
		for _, rk := range f.Ranks {
			for i := range nodes {
				if nodes[i].Name == rk.Node {
					nodes[i].Leases = append(nodes[i].Leases, lease.Lease{ID: "inflight-" + f.Key, Node: rk.Node, GPUs: rk.GPUs,
						User: f.User, UID: f.UID, Entry: f.Key, StartedAt: f.At, ExpiresAt: f.At.Add(time.Hour), ReservedUntil: f.At.Add(InFlightTimeout)})
				}
			}
		}
	}
}

// Waiting splits the cluster's queue for one scheduling pass: the entries
// the scheduler may start now, and those that already started somewhere
// whose origin has not heard (to be told again, never started twice). An
// entry is started only while its origin, its source of truth, is alive to
// hear that it runs.
func (v ClusterView) Waiting(p Progress) (waiting, retell []QueueEntry) {
	for _, e := range v.Entries() {
		if e.Running || e.Backoff(v.Now) || e.Held() {
			continue
		}
		if o, ok := v.Node(e.Origin); !ok || !o.Alive() {
			continue
		}
		key := e.Key()
		if p.Reserving[key] {
			continue
		}
		if _, ok := p.Started[key]; ok {
			retell = append(retell, e)
			continue
		}
		waiting = append(waiting, e)
	}
	return waiting, retell
}

// RunAction is what an origin does about one of its running entries.
type RunAction int

// What JudgeRunning may say.
const (
	// RunWait: nothing yet (it runs, or its end has not reached here).
	RunWait RunAction = iota
	// RunStopRanks: a gang rank failed or was lost: stop the others (Stop).
	RunStopRanks
	// RunDone: every lease is gone; the entry is finished (or, when
	// Failed and it asked for it, requeued: see QueueEntry.AfterRun).
	RunDone
)

// RunVerdict is JudgeRunning's answer.
type RunVerdict struct {
	Action RunAction
	Failed bool
	Why    string
	// Preempted: a lease of the attempt was preempted for someone else
	// (quota or idle reclaim), so it goes back in the queue unless it was
	// submitted with NoRequeue (QueueEntry.AfterPreempt).
	Preempted bool
	// Stop lists the live ranks to stop (RunStopRanks).
	Stop []lease.Lease
	// Missing counts the ranks of a running gang that no lease accounts
	// for — not committed, not ended, no reservation pending — so its other
	// ranks run without them (a commit that never arrived, a reservation
	// that expired). Gossip lags a little, so the origin acts only once it
	// has been so for a reservation's lifetime (origin.Reconcile); the
	// verdict stays RunWait, with Live the ranks that run.
	Missing int
	Live    []lease.Lease
}

// JudgeRunning decides what the origin does about a running entry, from
// what the cluster shows of its attempt: its live leases, how its ended
// leases ended, and which of its nodes are away. An agent's restart is not
// its node's death: the rank's session lives in tmux and outlives its
// agent, so a lease on a node that is restarting or silent (suspect, dead,
// not yet heard) still runs for the grace. Only a lease on a node that left
// for good, or has been silent for grace, counts as lost: its rank failed,
// and the entry finishes (and requeues, if it asked) without waiting for
// that node to return.
func (v ClusterView) JudgeRunning(e QueueEntry, grace time.Duration) RunVerdict {
	key := e.Key()
	interactive := !e.Job.RunsCommand()
	var out RunVerdict
	var live []lease.Lease
	// held counts the ranks on nodes away within the grace: they run on,
	// out of sight.
	ended, held := 0, 0
	// committed counts the gang's ranks that hold (or held) their GPUs as
	// a run, on any node; reserving, whether a commit is still pending.
	committed, reserving := 0, false
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, x := range n.Ended {
			if x.Entry != key || x.Reserved {
				continue
			}
			ended++
			committed++
			if x.Reason.Failed(interactive) {
				out.Failed, out.Why = true, fmt.Sprintf("lease %s ended: %s", x.Lease, x.Reason)
			}
			if x.Reason == lease.PreemptedReason(lease.PreemptQuota) || x.Reason == lease.PreemptedReason(lease.PreemptIdle) {
				out.Preempted = true
			}
		}
		for _, l := range n.Leases {
			if l.Entry != key {
				continue
			}
			if l.ReservedUntil.IsZero() {
				committed++
			} else {
				reserving = true
			}
			switch {
			case n.Alive():
				live = append(live, l)
			case n.State == NodeLeft:
				ended++
				out.Failed, out.Why = true, fmt.Sprintf("node %s left the cluster: rank %d (lease %s) is lost", n.Name, l.Rank, l.ID)
			case n.Lost(v.Now, grace):
				ended++
				out.Failed, out.Why = true, fmt.Sprintf("node %s has been down since %s: rank %d (lease %s) is lost", n.Name, n.Since.Local().Format("15:04:05"), l.Rank, l.ID)
			default:
				// Restarting, or silent within the grace: its rank
				// holds, and comes back with its agent.
				held++
			}
		}
	}
	if len(live) > 0 {
		if out.Failed && e.Nodes > 1 {
			for _, l := range live {
				if l.PreemptedAt.IsZero() {
					out.Stop = append(out.Stop, l)
				}
			}
			if len(out.Stop) > 0 {
				out.Action = RunStopRanks
				return out
			}
		}
		wait := RunVerdict{Action: RunWait}
		if e.Nodes > 1 && !reserving && committed < e.Nodes && len(live) > 0 {
			wait.Missing, wait.Live = e.Nodes-committed, live
		}
		return wait
	}
	if ended == 0 || held > 0 && !out.Failed {
		// Not seen ending yet (gossip may lag), or a rank still runs on
		// a node that is away.
		return RunVerdict{Action: RunWait}
	}
	out.Action = RunDone
	return out
}

// AfterRun is the entry after its attempt ended: back in the queue for
// another attempt when it failed and asked for it (requeue true), else
// finished for good. A requeued entry waits until RetryAt (zero: at once;
// see RequeueDelay), and carries why it failed.
func (e QueueEntry) AfterRun(failed bool) (next QueueEntry, requeue bool) {
	if !failed || !e.Requeue || e.Restarts >= e.MaxRestarts {
		return e, false
	}
	e.Running = false
	e.Restarts++
	e.Attempt++
	e.Placer = ""
	return e, true
}

// RequeueDelay is how long a run requeued for its restart'th time waits
// before it may start again: base, doubled for every restart before it, at
// most limit, then scaled by a jitter in [0.75, 1.25) drawn from rnd (a
// number in [0, 1)), so gangs that failed together do not all retry in the
// same second. A rank that cannot start no longer uses up every restart in
// seconds.
func RequeueDelay(restart int, base, limit time.Duration, rnd float64) time.Duration {
	d := base
	for i := 1; i < restart && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return time.Duration(float64(d) * (0.75 + rnd/2))
}

// MaxRetryWhy bounds QueueEntry.RetryWhy, as it travels in every node's
// gossiped state.
const MaxRetryWhy = 200

// ClipRetryWhy makes a failure's reason fit QueueEntry.RetryWhy: one line,
// at most MaxRetryWhy bytes, cut on a rune boundary.
func ClipRetryWhy(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= MaxRetryWhy {
		return s
	}
	cut := MaxRetryWhy - len("…")
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// Backoff reports whether a requeued entry still waits to retry at now.
func (e *QueueEntry) Backoff(now time.Time) bool { return !e.RetryAt.IsZero() && now.Before(e.RetryAt) }

// AfterPreempt is the entry after its attempt was preempted for someone
// else: back in the queue unless it was submitted with NoRequeue. It is not
// a restart (the run did not fail), so MaxRestarts does not bound it.
func (e QueueEntry) AfterPreempt() (next QueueEntry, requeue bool) {
	if e.NoRequeue {
		return e, false
	}
	e.Running = false
	e.Attempt++
	e.Placer = ""
	return e, true
}

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
func TorchrunCommand(e QueueEntry, env map[string]string, cmd []string) []string {
	isHost := "0"
	if env["NODE_RANK"] == "0" {
		isHost = "1"
	}
	argv := []string{"torchrun",
		"--nnodes=" + strconv.Itoa(e.Nodes),
		"--nproc_per_node=" + strconv.Itoa(e.GPUsPerNode),
		"--rdzv_backend=c10d",
		"--rdzv_endpoint=" + joinHostPort(env["MASTER_ADDR"], env["MASTER_PORT"]),
		"--rdzv_id=" + env["DIBS_GANG_ID"],
		"--rdzv_conf=is_host=" + isHost,
		"--redirects=1", "--tee=1",
	}
	return append(argv, TorchrunProgram(cmd)...)
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
// all the lease's GPUs; LOCAL_RANK picks one (torch.cuda.set_device).
const perGPUScript = `n=${NPROC_PER_NODE:-1}; node=${NODE_RANK:-0}
export WORLD_SIZE=$(( ${NNODES:-1} * n )) LOCAL_WORLD_SIZE=$n GROUP_RANK=$node
[ $# -eq 1 ] && set -- "${SHELL:-/bin/sh}" -c "$1"
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

// Orphans lists the committed leases started for origin's entries whose
// attempt is over: the entry is gone (finished or cancelled) or has moved on
// to another attempt. They appear when a rank's node comes back after its
// gang was given up; the origin stops them, so no rank of a past attempt
// keeps running.
func (v ClusterView) Orphans(origin string, entries map[string]QueueEntry) []lease.Lease {
	var out []lease.Lease
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Alive() {
			continue
		}
		for _, l := range n.Leases {
			if l.Entry == "" || !l.ReservedUntil.IsZero() || !l.PreemptedAt.IsZero() {
				continue
			}
			id, _, _ := strings.Cut(l.Entry, "#")
			if o, ok := OriginOfQueueID(id); !ok || o != origin {
				continue
			}
			if e, ok := entries[id]; !ok || e.Key() != l.Entry {
				out = append(out, l)
			}
		}
	}
	return out
}

// EntryState is where a queued run stands, as its origin says: what a
// client follows (`dibs run --queue`), never the words of a notice.
type EntryState string

// The states of an entry.
const (
	EntryWaiting EntryState = "waiting"
	// EntryBackoff: requeued after a failure, waiting until RetryAt.
	EntryBackoff   EntryState = "backoff"
	EntryRunning   EntryState = "running"
	EntryFinished  EntryState = "finished"
	EntryFailed    EntryState = "failed"
	EntryCancelled EntryState = "cancelled"
	// EntryUnknown: its origin has no record of it (it ended before the
	// agent last started, or long ago; `dibs events` may say more).
	EntryUnknown EntryState = "unknown"
)

// EntryStatus is one entry's state at its origin.
type EntryStatus struct {
	ID    string     `json:"id"`
	State EntryState `json:"state"`
	// Reason is why it failed, or why it waits to retry.
	Reason string `json:"reason,omitempty"`
	// RetryAt is when a requeued run tries again (EntryBackoff).
	RetryAt     time.Time `json:"retry_at,omitzero"`
	Restarts    int       `json:"restarts,omitempty"`
	MaxRestarts int       `json:"max_restarts,omitempty"`
}

// Status is the state of an entry its origin still holds, at now.
func (e *QueueEntry) Status(now time.Time) EntryStatus {
	s := EntryStatus{ID: e.ID, State: EntryWaiting, Restarts: e.Restarts, MaxRestarts: e.MaxRestarts}
	switch {
	case e.Running || e.Array != nil && e.Array.Started:
		s.State = EntryRunning
	case e.Backoff(now):
		s.State, s.Reason, s.RetryAt = EntryBackoff, e.RetryWhy, e.RetryAt
	}
	return s
}

// RunExit says how a finished queued run ended, from its ended leases:
// "exit 0", or the worst exit status of its ranks; when no rank recorded
// one (an interactive run), why its leases ended if that was not its
// holder's doing (its time limit, a booking of its GPUs); else empty.
func (v ClusterView) RunExit(e QueueEntry) string {
	key := e.Key()
	worst, found := 0, false
	why := ""
	for i := range v.Nodes {
		for _, x := range v.Nodes[i].Ended {
			if x.Entry != key || x.Reserved {
				continue
			}
			if code, ok := x.Reason.ExitCode(); ok && (!found || code > worst) {
				worst, found = code, true
			}
			if x.Reason == lease.EndExpired || x.Reason == lease.EndBooked {
				why = "ended " + x.Reason.Words()
			}
		}
	}
	if !found {
		return why
	}
	return "exit " + strconv.Itoa(worst)
}
