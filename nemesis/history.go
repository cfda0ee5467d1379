package nemesis

import (
	"math"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Never is the return time of an operation whose outcome the client never
// learned (its agent died or its answer was lost): it may have taken effect
// at any time after it was called.
const Never int64 = math.MaxInt64

// OpKind names what a client asked an agent for.
type OpKind string

// What clients do.
const (
	// OpClaim asks for GPUs on Node: the GPUs listed, or Count anywhere
	// on Node. OK carries the Lease granted.
	OpClaim OpKind = "claim"
	// OpRelease ends LeaseID.
	OpRelease OpKind = "release"
	// OpExtend extends LeaseID.
	OpExtend OpKind = "extend"
	// OpRead reads the board from Node's own agent: Holders is the lease on
	// each of Node's GPUs as that agent answered.
	OpRead OpKind = "read"
	// OpSubmit queues a request (Nodes > 1: a gang); OK carries EntryID.
	OpSubmit OpKind = "submit"
	// OpCancel withdraws EntryID.
	OpCancel OpKind = "cancel"
)

// Outcome is what the client learned.
type Outcome int

// Outcomes.
const (
	// OK: the agent answered that it was done.
	OK Outcome = iota
	// Refused: the agent answered that it was not done (Code says why).
	Refused
	// Unknown: no answer came; it may or may not have been done.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	default:
		return "unknown"
	}
}

// Op is one client operation from call to return. Times are nanoseconds
// since the run started, on the harness's monotonic clock.
type Op struct {
	// Client numbers the client (a goroutine issuing one op at a time).
	Client int
	Kind   OpKind
	// Via is the agent the client talked to; Node is the node the op is
	// about (a claim's or read's node, a released lease's node, a queued
	// entry's origin).
	Via  string
	Node string
	// GPUs are the indices a claim asked for (nil: Count anywhere on
	// Node).
	GPUs  []int
	Count int
	// RequestID is the claim's or submission's idempotency id.
	RequestID string
	// LeaseID is the lease a release or extend is about, or the lease a
	// claim got (with Lease).
	LeaseID string
	Lease   *lease.Lease
	// EntryID is the queue entry a submit made or a cancel withdraws;
	// Nodes is how many nodes a submit asked for (2 or more: a gang).
	EntryID string
	Nodes   int
	// Array is a submit's job array ("0-3%2"); After and AfterAny the
	// entries it waits for (to succeed, or to end).
	Array           string
	After, AfterAny []string
	// Holders is what a read saw: GPU index → lease id, "" for free, for
	// every GPU of Node.
	Holders map[int]string
	// Call and Return bound when the op took effect; Return is Never when
	// the outcome is Unknown.
	Call, Return int64
	Outcome      Outcome
	// Code and Err are the refusal (or the transport error of an Unknown).
	Code refusal.Code
	Err  string
}

// WriteKind is what a node wrote to its store.
type WriteKind string

// Store writes.
const (
	WritePut         WriteKind = "put"
	WriteEnd         WriteKind = "end"
	WritePutEntry    WriteKind = "put-entry"
	WriteDeleteEntry WriteKind = "delete-entry"
)

// Write is one write a node's store made durable (it returned nil), in the
// order the node made them. It is the node's own record of what it
// granted and ended — the linearization point of every change to its
// GPUs — so the checker takes the ends and grants no client asked for
// (expiry, queued starts, gang reservations) from here.
type Write struct {
	Node string
	// Seq orders one node's writes (from 1, across restarts).
	Seq int
	// Boot counts the node's restarts: 0 for its first start.
	Boot int
	Kind WriteKind
	// Start and Done bound the write (Start before the store was called,
	// Done after it returned), in nanoseconds since the run started, as an
	// Op's times; Mono is the system's monotonic clock
	// (CLOCK_BOOTTIME, what lease.MonoLimits count on) at Done.
	Start, Done int64
	Mono        time.Duration
	// Lease is the lease put (WritePut).
	Lease lease.Lease
	// Ledger is the end recorded (WriteEnd): Ledger.LeaseID ended, on
	// Ledger.GPUs, for Ledger.Reason.
	Ledger lease.LedgerEntry
	// Entry is the queue entry put (WritePutEntry); EntryID the one deleted
	// (WriteDeleteEntry).
	Entry   queue.QueueEntry
	EntryID string
}

// FaultKind names a way the nemesis breaks the cluster.
type FaultKind string

// Faults.
const (
	// FaultKill: a node's agent dies at once (only what its store made
	// durable survives) and starts again at Healed.
	FaultKill FaultKind = "kill"
	// FaultRestart: a node's agent is restarted gracefully, as SIGTERM
	// does (systemctl restart, an upgrade): it steps out of the cluster
	// without leaving, and starts again at Healed. The cluster keeps its
	// work for the grace (SchedConfig.LostAfter).
	FaultRestart FaultKind = "restart"
	// FaultPause: a node stops (no network, no timers, no answers) for
	// longer than the failure detector allows, then goes on.
	FaultPause FaultKind = "pause"
	// FaultPartition: Nodes cannot reach the others, nor they Nodes.
	FaultPartition FaultKind = "partition"
	// FaultLoss, FaultDelay, FaultDuplicate: every agent's packets are
	// dropped, delayed or sent twice at random.
	FaultLoss      FaultKind = "loss"
	FaultDelay     FaultKind = "delay"
	FaultDuplicate FaultKind = "duplicate"
	// FaultClockStep: a node's wall clock jumps (Detail says by how much),
	// and jumps back at Healed.
	FaultClockStep FaultKind = "clock-step"
	// FaultFsync, FaultDiskFull, FaultSlowDisk: a node's store fails its
	// fsyncs, refuses writes as a full disk, or takes long over each.
	FaultFsync    FaultKind = "fsync-error"
	FaultDiskFull FaultKind = "disk-full"
	FaultSlowDisk FaultKind = "slow-disk"
	// FaultReboot: a node reboots cleanly (an admin's `reboot`): its agent
	// stops as SIGTERM stops it, its store closed whole, every process of
	// the node ends (its tmux servers, every session), and it comes back
	// at Healed under a new kernel boot id.
	FaultReboot FaultKind = "reboot"
	// FaultPowerCut: a node loses power: everything it had not synced is
	// gone (its store keeps only what it made durable, the write in
	// flight is lost), every process ends at once with no goodbye, and it
	// comes back at Healed under a new kernel boot id.
	FaultPowerCut FaultKind = "power-cut"
)

// agentDown reports whether a fault of kind takes a node's agent down
// and starts it again at the heal (a pause only stops it).
func agentDown(kind FaultKind) bool {
	return kind == FaultKill || kind == FaultRestart || kind == FaultReboot || kind == FaultPowerCut
}

// rebootFault reports whether a fault of kind ends every session of its
// node under a new boot id.
func rebootFault(kind FaultKind) bool { return kind == FaultReboot || kind == FaultPowerCut }

// Fault is one fault from injection to heal.
type Fault struct {
	Kind FaultKind
	// Nodes are the nodes it struck (for a partition, one side; empty for
	// a fault on the whole network).
	Nodes []string
	// Start and Healed are when it struck and when it was healed, in
	// nanoseconds since the run started (as every time in a History).
	Start  int64
	Healed int64
	// Off is when a rebooted node's last process had ended (FaultReboot,
	// FaultPowerCut): what its agent wrote until then it wrote before
	// the power went.
	Off    int64 `json:",omitempty"`
	Detail string
}

// Heal is one measurement of convergence: after a fault healed, how long
// until every agent's board showed each node's leases as that node's own
// agent had them.
type Heal struct {
	Fault FaultKind
	// At is when the fault healed (nanoseconds since the run started).
	At   int64
	Took time.Duration
	// Converged is false when it took longer than the harness waited.
	Converged bool
}

// Membership is a false alarm watched for while the network lost packets
// and nothing else was wrong: an agent that called a live member dead.
type Membership struct {
	At       int64
	Observer string
	Member   string
	State    string
}

// SvcOpKind names what the service client did.
type SvcOpKind string

// What the service client does.
const (
	// SvcServe starts a service (`dibs serve NAME`); OK carries the
	// lease it got (LeaseID on Node).
	SvcServe SvcOpKind = "serve"
	// SvcStop stops one (`dibs stop NAME`: the board names the lease, a
	// release ends it); LeaseID is the lease released.
	SvcStop SvcOpKind = "stop"
	// SvcKill kills a replica's process with SIGKILL (PID on Node), as
	// an out-of-memory kill does: the supervisor restarts it in place.
	SvcKill SvcOpKind = "kill"
)

// SvcOp is one thing the service client did to a service, from call to
// return (Return is Never when it never learned the outcome).
type SvcOp struct {
	Kind SvcOpKind
	// Service is the service's name: the client never gives one name to
	// two services in a run, so a name is one service's whole life.
	Service string
	// Via is the agent asked; Node the node the lease (or the killed
	// process) was on; LeaseID the lease (a stop's: every lease of the
	// service the board listed, comma-separated, and their nodes so).
	Via, Node string
	LeaseID   string
	// GPUs is how many GPUs a serve asked for; Port the port it
	// answers on; PID the process a kill killed.
	GPUs, Port, PID int
	Call, Return    int64
	Outcome         Outcome
	Err             string
}

// Seen is one run of identical answers from one node's address for one
// service: the observer asked every node's address in rounds, and from
// From to To (the starts of the first and last rounds that got it) this
// node answered with this copy (lease, process, start token) every time.
// A copy is answering at least over [From, To]; between two Seens of a
// service with no other Seen in the gap, no copy answered for at most the
// gap plus a round.
type Seen struct {
	Service string
	// Node is the node whose address answered; Lease the lease its copy
	// serves (DIBS_LEASE_ID); PID and Token tell one start of the copy
	// from another (a restart in place keeps the lease, not the token).
	Node, Lease string
	PID         int
	Token       string
	From, To    int64
}

// History is everything one run recorded, for the checker.
type History struct {
	// GPUs is how many GPUs each node has.
	GPUs map[string]int
	// Sched is the queue policy the agents ran (ReservationTTL and
	// LostAfter bound how long a gang may be partial).
	Sched queue.SchedConfig
	// Ops are the clients' operations, Writes every node's durable writes,
	// Faults what the nemesis did, Heals how fast boards converged after
	// each, FalseDead the members called dead under packet loss alone.
	Ops       []Op
	Writes    []Write
	Faults    []Fault
	Heals     []Heal
	FalseDead []Membership
	// End is when the run stopped (every fault healed, the cluster quiet).
	End int64
	// FinalEntries are the queue entry ids each origin held at End (read
	// from each origin once the cluster was quiet), so the checker can
	// tell an entry never deleted from one lost. An origin missing from
	// the map was not read, and its entries are not judged so.
	FinalEntries map[string][]string
	// SvcOps are what the service client did; Seen what the observer saw
	// of every service's copies; SvcRules the supervisor's numbers the
	// agents ran (the restart backoff bounds when a service is back);
	// SvcRound how often the observer asked.
	SvcOps   []SvcOp
	Seen     []Seen
	SvcRules service.Rules
	SvcRound time.Duration
	// SvcEnd is when the observer stopped (zero: at End): what it saw of
	// the services ends there.
	SvcEnd int64 `json:",omitempty"`
}
