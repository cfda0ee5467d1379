// Package api is the local API between the dibs CLI or board and the agent on
// the same node: HTTP+JSON over a unix socket. The caller is identified by the
// kernel (SO_PEERCRED), so no request carries a user. This package holds the
// request and response shapes and the Go client; the server lives in agent.
package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// Node states as the board shows them. Only a node that is alive has GPUs
// that can be free; the others' GPUs show as unknown, never as free.
const (
	NodeAlive   = queue.NodeAlive
	NodeSuspect = queue.NodeSuspect
	NodeDead    = queue.NodeDead
	NodeLeft    = queue.NodeLeft
	// NodeRestarting: away within the grace (its agent restarting, or
	// silent for less than queue.lost_after); its leases and gangs hold.
	NodeRestarting = queue.NodeRestarting
)

// FlagUnknown marks a GPU whose node is not alive: its state cannot be known.
const FlagUnknown lease.Flag = "unknown"

// Board is the whole cluster as one agent sees it: what `dibs ls` prints and
// the TUI draws.
type Board struct {
	// Self is the node whose agent answered.
	Self string `json:"self"`
	// You is the caller as the agent identified them.
	You         lease.Caller `json:"you"`
	GeneratedAt time.Time    `json:"generated_at"`
	Nodes       []Node       `json:"nodes"`
	// Notices are messages for the caller (a lease near its end, a queued run
	// that started), newest first.
	Notices []string `json:"notices,omitempty"`
	// Services are the services' leases, every node's (a service
	// without a GPU holds none, so the GPUs above do not show it).
	Services []lease.Lease `json:"services,omitempty"`
}

// Node is one node on the board.
type Node struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Addr is where its agent gossips, empty for this node in single-node mode.
	Addr string         `json:"addr,omitempty"`
	Host nodeprobe.Host `json:"host"`
	// TelemetryAt is when the GPU numbers shown were probed.
	TelemetryAt time.Time `json:"telemetry_at"`
	GPUs        []GPU     `json:"gpus"`
	// Bookings are the node's bookings not started yet, soonest first.
	Bookings []lease.Lease `json:"bookings,omitempty"`
}

// GPU is one GPU with what the rules say about it: the probe's facts, the
// lease on it (nil when none) and the flags.
type GPU struct {
	nodeprobe.GPU
	Flags []lease.Flag `json:"flags"`
	Lease *lease.Lease `json:"lease"`
	// Shares are the leases on parts of the GPU: its MIG instances, or the
	// budgets on it when it is shared. Lease is nil when there are any.
	Shares []lease.Lease `json:"shares,omitempty"`
	// OverBudget are the holders of a shared GPU using more memory than
	// their budgets (the GPU is flagged over-budget).
	OverBudget []lease.Overrun `json:"over_budget,omitempty"`
}

// Free reports whether -g N could pick this GPU: alive node, no lease (of
// it or of a part), no process, not split into MIG instances.
func (g *GPU) Free(nodeState string) bool {
	return nodeState == NodeAlive && g.Lease == nil && len(g.Shares) == 0 && len(g.Processes) == 0 &&
		g.Error == "" && g.MIG != nodeprobe.MIGEnabled
}

// ClaimRequest asks for GPUs, and with Run, a tmux session on them.
type ClaimRequest struct {
	// Node to claim on; empty means this node in single-node mode and the best
	// node cluster-wide otherwise.
	Node  string `json:"node,omitempty"`
	Count int    `json:"count,omitempty"`
	GPUs  []int  `json:"gpus,omitempty"`
	// Duration like "4h"; empty means the kind's default.
	Duration string   `json:"duration,omitempty"`
	Note     string   `json:"note,omitempty"`
	Kind     string   `json:"kind,omitempty"`
	Force    bool     `json:"force,omitempty"`
	Run      *RunSpec `json:"run,omitempty"`
	// RequestID names this claim so that retrying it after a lost answer
	// (a timeout, an agent restart) returns the lease it made instead of
	// claiming more GPUs. Clients make one per claim: 8 to 64 letters,
	// digits, '-' and '_'.
	RequestID string `json:"request_id,omitempty"`
	// MIG asks for one MIG instance instead of GPUs: a profile (3g.40gb),
	// a UUID (MIG-…) or GPU:INDEX.
	MIG string `json:"mig,omitempty"`
	// Mem asks for a memory budget on a shared GPU instead of whole GPUs,
	// like "20G".
	Mem string `json:"mem,omitempty"`
	// Model restricts the claim to GPUs whose model contains it.
	Model string `json:"model,omitempty"`
	// Tags restricts the claim to nodes in every one of these pools.
	Tags []string `json:"tags,omitempty"`
	// PreferHere, with no Node named, takes the GPUs on the node whose
	// agent answers when they fit there, before looking elsewhere: a
	// claim meant for the shell it is typed in (`eval "$(dibs claim)"`).
	PreferHere bool `json:"prefer_here,omitempty"`
	// CPUs is --cpus: "local" (or empty) binds the session to the cores
	// local to its GPUs, "any" to none.
	CPUs string `json:"cpus,omitempty"`
	// CPUsPerGPU is --cpus-per-gpu: that many of each GPU's local cores,
	// chosen for the lease and shown to everyone.
	CPUsPerGPU int `json:"cpus_per_gpu,omitempty"`
	// Service makes the claim a service (`dibs serve`): its name, port
	// and check; Run is its command.
	Service *service.Spec `json:"service,omitempty"`
	// NodeChoice is --nodelist and --exclude (JSON nodelist, exclude):
	// the nodes it may run on, and those it must not. Node is a nodelist
	// of one; the two are not given together.
	lease.NodeChoice
}

// RunSpec is the session to start under a new lease: the one run spec
// (job.RunSpec), which the agent carries as is to the node that starts
// it.
type RunSpec = job.RunSpec

// ClaimResponse is a granted lease, as `dibs claim --json` prints it.
type ClaimResponse struct {
	ID                 string    `json:"id"`
	Node               string    `json:"node"`
	GPUs               []int     `json:"gpus"`
	CUDAVisibleDevices string    `json:"cuda_visible_devices"`
	Token              uint64    `json:"token"`
	Kind               string    `json:"kind"`
	ExpiresAt          time.Time `json:"expires_at"`
	Session            string    `json:"session,omitempty"`
	// MIG is the MIG instance held (its UUID); MemMiB the budget of a
	// lease on a shared GPU.
	MIG    string `json:"mig,omitempty"`
	MemMiB uint64 `json:"mem_mib,omitempty"`
	// Borrowed: the lease takes its holder beyond their quota, so it may be
	// preempted when someone within theirs waits.
	Borrowed bool `json:"borrowed,omitempty"`
	// CutBy names the booking the time limit was cut short for: the lease
	// cannot be extended past its start.
	CutBy string `json:"cut_by,omitempty"`
	// CPUs are the cores chosen for the lease (--cpus-per-gpu), as a
	// Linux CPU list.
	CPUs string `json:"cpus,omitempty"`
	// Notice says what the person should know about the grant: a time
	// limit cut short to end before a booking, a lease that borrows.
	Notice string `json:"notice,omitempty"`
	// Here is true when the lease is on the node whose agent answered:
	// only then do its CUDA_VISIBLE_DEVICES mean anything in the caller's
	// shell.
	Here bool `json:"here"`
}

// ReleaseRequest ends leases by id, or all of the caller's with All.
type ReleaseRequest struct {
	IDs []string `json:"ids,omitempty"`
	All bool     `json:"all,omitempty"`
	// Kill sends each session's processes SIGKILL before tmux hangs up on
	// them: the end of a short grace the caller gave with SIGTERM (dibs
	// run --follow cancelling a run), for processes that ignore both.
	Kill bool `json:"kill,omitempty"`
}

// ReleaseResponse lists what was ended.
type ReleaseResponse struct {
	Released []string `json:"released"`
}

// ExtendRequest moves a lease's end later by Duration.
type ExtendRequest struct {
	ID       string `json:"id"`
	Duration string `json:"duration"`
}

// AdoptRequest takes a running process's GPUs into a lease.
type AdoptRequest struct {
	PID      int    `json:"pid"`
	Duration string `json:"duration,omitempty"`
	Note     string `json:"note,omitempty"`
}

// AdoptContainerRequest says a container on the caller's leased GPUs is
// theirs (`dibs adopt --container`): a rootful runtime runs its processes as
// root, which the board would otherwise flag as not the holder's. Container
// is its id as `docker ps` prints it (12 hex digits) or the full id.
type AdoptContainerRequest struct {
	Container string `json:"container"`
}

// AdoptContainerResponse names the container's short id and the caller's
// leases that adopted it, as saved.
type AdoptContainerResponse struct {
	Container string        `json:"container"`
	Leases    []lease.Lease `json:"leases"`
}

// AttachResponse says how to reach a lease's session.
type AttachResponse struct {
	Lease lease.Lease `json:"lease"`
	// Local is true when the session lives on the node that answered.
	Local bool `json:"local"`
	// Command is the argv that attaches: tmux attach here, ssh -t elsewhere.
	Command []string `json:"command"`
}

// Status is one agent's view of itself and the cluster, for `dibs status`.
type Status struct {
	Node      string        `json:"node"`
	Version   string        `json:"version"`
	StartedAt time.Time     `json:"started_at"`
	Backend   string        `json:"backend"`
	DataDir   string        `json:"data_dir"`
	Socket    string        `json:"socket"`
	Members   []Member      `json:"members"`
	Gossip    GossipCounter `json:"gossip"`
	Leases    int           `json:"leases"`
	LastToken uint64        `json:"last_token"`
}

// Member is one cluster member as this agent sees it.
type Member struct {
	Name         string `json:"name"`
	Addr         string `json:"addr"`
	State        string `json:"state"`
	StateVersion uint64 `json:"state_version"`
	// Protocol is the newest agent protocol the member's agent speaks (0:
	// not known): during a rolling upgrade it tells the upgraded nodes from
	// the others, and a feature new in this release waits until every
	// member has it.
	Protocol int `json:"protocol,omitempty"`
	// TelemetryAge is how long ago the GPU numbers held for the member were
	// read. A node sends its numbers only when they change (and once a
	// minute regardless), so on an alive node with steady GPUs this grows
	// to a minute without anything being wrong.
	TelemetryAge time.Duration `json:"telemetry_age_ns"`
	// SinceHeard is how long ago this agent last heard from the member (it
	// answered this agent's probe, or sent a newer part of its state).
	// While it is alive that is within a probe round, members × 0.5 s (2 s
	// on 4 nodes); it grows once it is not. Zero for the agent's own node
	// and for a member never heard from.
	SinceHeard time.Duration `json:"since_heard_ns,omitempty"`
}

// GossipCounter counts gossip traffic so an operator can tell a healthy
// cluster from one dropping messages or holding the wrong key.
type GossipCounter struct {
	MessagesIn      uint64 `json:"messages_in"`
	MessagesOut     uint64 `json:"messages_out"`
	BytesIn         uint64 `json:"bytes_in"`
	BytesOut        uint64 `json:"bytes_out"`
	Dropped         uint64 `json:"dropped"`
	DecryptFailures uint64 `json:"decrypt_failures"`
	// LabelMismatches is the part of DecryptFailures that came from agents
	// of another cluster name (the rest: another key, or not an agent).
	LabelMismatches   uint64 `json:"label_mismatches,omitempty"`
	RemoteRequests    uint64 `json:"remote_requests"`
	RemoteRequestErrs uint64 `json:"remote_request_errors"`
	// StreamsRefused counts inbound TCP streams closed unread: over the
	// caps per address or in all, or silent too long (a flood of idle
	// connections shows here).
	StreamsRefused uint64 `json:"streams_refused,omitempty"`
}

// ErrorBody is what the agent sends with every non-2xx answer.
type ErrorBody struct {
	Error string       `json:"error"`
	Code  refusal.Code `json:"code,omitempty"`
}

// SubmitRequest queues a claim or a run: single-node (Nodes 0 or 1, with
// Count or GPUs in Claim) or a gang of Nodes × GPUsPerNode.
type SubmitRequest struct {
	Claim       ClaimRequest `json:"claim"`
	Nodes       int          `json:"nodes,omitempty"`
	GPUsPerNode int          `json:"gpus_per_node,omitempty"`
	Requeue     bool         `json:"requeue,omitempty"`
	MaxRestarts int          `json:"max_restarts,omitempty"`
	// NoRequeue: a run preempted for someone else ends instead of going
	// back in the queue.
	NoRequeue bool `json:"no_requeue,omitempty"`
	Torchrun  bool `json:"torchrun,omitempty"`
	// PerGPU starts the command once per GPU, with RANK and LOCAL_RANK
	// set (job.Job.PerGPU).
	PerGPU bool   `json:"per_gpu,omitempty"`
	Model  string `json:"model,omitempty"`
	// Array makes it a job array: "0-19%4" runs the request once per
	// index, at most 4 at once (queue.ParseArray).
	Array string `json:"array,omitempty"`
	// After and AfterAny are entries it waits for: to succeed, or to end
	// however (queue.Dep).
	After    []string `json:"after,omitempty"`
	AfterAny []string `json:"after_any,omitempty"`
}

// EntryStatus is where a queued request stands at its origin: waiting,
// backing off before a retry (until RetryAt, and why), running, or how it
// ended. Clients follow it rather than the words of a notice.
type EntryStatus = queue.EntryStatus

// LeaveResponse answers `dibs leave`: the node that left.
type LeaveResponse struct {
	Node string `json:"node"`
}

// Submitted is a queued request's id and where it stands.
type Submitted struct {
	ID       string `json:"id"`
	Position int    `json:"position"`
	Waiting  int    `json:"waiting"`
}

// Queue is every waiting request in the cluster, in the order the scheduler
// will consider them: the same on every node.
type Queue struct {
	Scheduler string        `json:"scheduler"`
	Entries   []QueuedEntry `json:"entries"`
}

// WaitsForOthers reports whether the entry is not in line yet: it waits
// for other runs (--after), so it has no position.
func (e *QueuedEntry) WaitsForOthers() bool {
	return !e.Running && e.Position == 0 && e.Reason != nil && e.Reason.Code == queue.WaitDependency
}

// Line is how a listing of the queue (`dibs queue`, the TUI's queue view)
// shows where e stands at now: its place in line ("-" running or not in
// line, "dep" while it waits for other runs), its size (GPUs, or nodes x
// GPUs each) and when it may start ("?" unknown, "now", "in 2h",
// "running"). Both listings read it here, so they never disagree.
func (e *QueuedEntry) Line(now time.Time) (pos, size, start string) {
	pos, size, start = strconv.Itoa(e.Position), strconv.Itoa(e.GPUsPerNode), "?"
	if e.Nodes > 1 {
		size = fmt.Sprintf("%dx%d", e.Nodes, e.GPUsPerNode)
	}
	switch {
	case e.Running:
		pos, start = "-", "running"
	case e.WaitsForOthers():
		pos = "dep" // not in line: it waits for other runs first
	case e.Position == 0:
		pos = "-"
	case !e.EstStart.IsZero() && !e.EstStart.After(now):
		start = "now"
	case !e.EstStart.IsZero():
		start = "in " + words.FormatDuration(e.EstStart.Sub(now))
	}
	return pos, size, start
}

// QueuedEntry is one request in `dibs queue`.
type QueuedEntry struct {
	ID string `json:"id"`
	// Position is 1-based in the order the scheduler considers waiting
	// entries; absent (0) for a running one.
	Position    int      `json:"position,omitempty"`
	User        string   `json:"user"`
	Nodes       int      `json:"nodes"`
	GPUsPerNode int      `json:"gpus_per_node"`
	Node        string   `json:"node,omitempty"`
	Kind        string   `json:"kind"`
	Duration    string   `json:"duration"`
	Note        string   `json:"note,omitempty"`
	Command     []string `json:"command,omitempty"`
	// Priority is the multifactor priority (fair-share and age; see
	// docs/queue.md); 0 for a running entry. `dibs queue` prints it
	// rounded to a whole number, in its table and in its JSON.
	Priority    float64   `json:"priority"`
	SubmittedAt time.Time `json:"submitted_at"`
	// EstStart is when it should start given current leases' ends; absent
	// when unknown.
	EstStart time.Time `json:"est_start,omitzero"`
	// Waiting is Reason's words.
	Waiting string `json:"waiting,omitempty"`
	// Reason is why it waits, as a code clients can act on and words: the
	// cause on the node where it would start soonest. Absent when it
	// starts now or runs.
	Reason *queue.Reason `json:"reason,omitempty"`
	// NodeReasons are why it does not start on each node now (a whole-GPU
	// request's; `dibs queue -v` lists them).
	NodeReasons []queue.Reason `json:"node_reasons,omitempty"`
	Running     bool           `json:"running,omitempty"`
	Restarts    int            `json:"restarts,omitempty"`
	// RetryAt is when a requeued run tries again: restarts are spaced, so
	// it waits until then (Waiting says why).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Model, Tags, MemMiB and MIG are what it asks of the GPUs: a model,
	// pools, a budget on a shared GPU, a MIG instance.
	Model  string   `json:"model,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	MemMiB uint64   `json:"mem_mib,omitempty"`
	MIG    string   `json:"mig,omitempty"`
	// NodeChoice is its --nodelist and --exclude.
	lease.NodeChoice
	// Array is a job array's tasks at a glance; its tasks have no rows
	// of their own.
	Array *ArrayView `json:"array,omitempty"`
	// After are the entries it still waits for (afterok:ID, afterany:ID).
	After []string `json:"after,omitempty"`
}

// ArrayView is a job array's tasks at a glance, for `dibs queue`.
type ArrayView struct {
	// Spec is the array as --array took it (0-19%4).
	Spec string `json:"spec"`
	// RunningTasks are the indices running now.
	RunningTasks []int `json:"running_tasks,omitempty"`
	// Waiting, Done, Failed and Cancelled count the other tasks.
	Waiting   int `json:"waiting"`
	Done      int `json:"done"`
	Failed    int `json:"failed,omitempty"`
	Cancelled int `json:"cancelled,omitempty"`
}

// Summary is the array in one line: n1-q7[3-5] running, 12 waiting, 3 done.
func (a ArrayView) Summary(id string) string {
	var parts []string
	if len(a.RunningTasks) > 0 {
		parts = append(parts, id+"["+queue.FormatIndices(a.RunningTasks)+"] running")
	} else {
		parts = append(parts, id+" none running")
	}
	parts = append(parts, fmt.Sprintf("%d waiting", a.Waiting), fmt.Sprintf("%d done", a.Done))
	if a.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", a.Failed))
	}
	if a.Cancelled > 0 {
		parts = append(parts, fmt.Sprintf("%d cancelled", a.Cancelled))
	}
	return strings.Join(parts, ", ")
}

// UsageReport is `dibs usage`: GPU-hours per user over a window and each
// user's fair-share factor now.
type UsageReport struct {
	Since time.Time   `json:"since"`
	Users []UserUsage `json:"users"`
	// Missing lists nodes that did not answer; their usage is not counted.
	Missing []string `json:"missing,omitempty"`
}

// UserUsage is one user's line in `dibs usage`.
type UserUsage struct {
	User      string  `json:"user"`
	GPUHours  float64 `json:"gpu_hours"`
	Decayed   float64 `json:"decayed_gpu_hours"`
	Share     float64 `json:"share"`
	FairShare float64 `json:"fair_share"`
	// RunningGPU counts the GPUs of the user's running leases, a GPU
	// held in part (a MIG instance, a budget) as one: kept for scripts.
	RunningGPU int `json:"running_gpus"`
	// Running is what those leases count for, as quotas and pools count
	// them: a whole GPU 1, a MIG instance or a budget its share of its
	// GPU. The usage view and `dibs usage` show it.
	Running float64 `json:"running"`
	Quota   int     `json:"quota,omitempty"`
	// IdleGPUHours is the part of GPUHours whose GPUs sat at 0 %: held
	// but idle (from ended leases that kept figures; older ones count as
	// used).
	IdleGPUHours float64 `json:"idle_gpu_hours,omitempty"`
}
