// Package lease holds one domain: the rules of a lease on a node's GPUs,
// with no I/O. What a lease, a claim and a booking are; who may claim,
// extend or end one (Table and its Plan* methods); which GPUs, or which part
// of one, a claim gets (placement, units, pools and their limits, the choice
// of a node); when a lease is due for its warning or its end (Due, on a
// monotonic Instant); which GPUs are idle or squatted (Judge); the policy
// that bounds all of these; and the ledger of ended leases. Refusals
// (package refusal), people's words and the bounds of text (package words)
// and what a run starts (package job) live below it; the rules of queued
// work (package queue) and of events (package event) are built on it, and
// this package knows neither. The agent owns the clock, the store and the
// goroutines; this package only decides.
package lease

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// Kind separates leases a person sits at from leases a job runs under; they
// get different default and maximum time limits.
type Kind string

// Lease kinds.
const (
	KindInteractive Kind = "interactive"
	KindBatch       Kind = "batch"
	// KindService is a service's lease (`dibs serve`): no end while the
	// service is up (ServiceSpan), no idle reclaim, no time limit.
	KindService Kind = "service"
)

// ParseKind is the one reading of a lease's kind, for every door a kind
// comes in by (the CLI's --kind, a claim, a booking or a queued request
// from the socket or a peer, a stored queue entry, a replayed trace): the
// kinds a person may type, in any case, none meaning interactive. Service
// is refused here: only `dibs serve` makes a service lease.
func ParseKind(s string) (Kind, error) {
	return parseKind(s, false)
}

// parseKind is ParseKind, accepting service where a lease may have it
// (service says so).
func parseKind(s string, service bool) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "", KindInteractive:
		return KindInteractive, nil
	case KindBatch:
		return KindBatch, nil
	case KindService:
		if service {
			return KindService, nil
		}
		return "", errServiceKind()
	}
	return "", refusal.Invalidf("unknown lease kind %q: use interactive or batch", s)
}

// errServiceKind refuses a service lease asked for any other way than
// `dibs serve`.
func errServiceKind() error {
	return refusal.Invalidf("a service lease is started with dibs serve NAME -- COMMAND, not with --kind service")
}

// checkKind accepts the kinds a lease may have: those a person types, and
// service, which only `dibs serve` makes (a queued request or a booking
// of kind service is refused by ParseKind).
func checkKind(k Kind) error {
	_, err := parseKind(string(k), true)
	return err
}

// Caller is who asks. The agent fills it from SO_PEERCRED or the SSH key, never
// from the request, so the rules here can trust it.
type Caller struct {
	UID   int    `json:"uid"`
	User  string `json:"user"`
	Admin bool   `json:"admin,omitempty"`
}

func (c Caller) String() string {
	if c.User != "" {
		return c.User
	}
	return "uid " + strconv.Itoa(c.UID)
}

// Lease is an exclusive, time-limited, advisory hold on some GPUs of one node.
type Lease struct {
	ID        string    `json:"id"`
	Node      string    `json:"node"`
	GPUs      []int     `json:"gpus"`
	User      string    `json:"user"`
	UID       int       `json:"uid"`
	Token     uint64    `json:"token"`
	Kind      Kind      `json:"kind"`
	Note      string    `json:"note"`
	StartedAt time.Time `json:"started_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Session is the tmux session started for this lease, empty for a bare claim.
	Session string `json:"session,omitempty"`
	// Warned records that the holder was told the end is near, so they are told
	// once, not every tick.
	Warned bool `json:"warned,omitempty"`
	// FinalWarned records the last warning, a minute before the end.
	FinalWarned bool `json:"final_warned,omitempty"`
	// OverdueNoticed records that the holder was told the lease is past its
	// end (end action warn).
	OverdueNoticed bool `json:"overdue_noticed,omitempty"`
	// Entry is the queue entry this lease was started for, so a retried
	// start is recognised and the submitter learns its request ran.
	Entry string `json:"entry,omitempty"`
	// Gang names the multi-node launch this lease is one rank of; Rank is
	// its NODE_RANK.
	Gang string `json:"gang,omitempty"`
	Rank int    `json:"rank,omitempty"`
	// Borrowed marks a lease beyond its user's quota: it may be preempted
	// when someone within their quota waits.
	Borrowed bool `json:"borrowed,omitempty"`
	// ReservedUntil, while set, makes this a gang reservation, not yet a
	// lease: it holds the GPUs and ends by itself at that time unless the
	// scheduler commits it.
	ReservedUntil time.Time `json:"reserved_until,omitzero"`
	// PreemptedAt is when cooperative preemption (or idle reclaim) told the
	// holder to stop; the lease ends a grace later. Zero until then.
	PreemptedAt time.Time `json:"preempted_at,omitzero"`
	// PreemptReason says why: "quota" or "idle".
	PreemptReason string `json:"preempt_reason,omitempty"`
	// SignalledAt is when the end action sent SIGTERM; SIGKILL follows a grace
	// later. Zero until then.
	SignalledAt time.Time `json:"signalled_at,omitzero"`
	// RequestID is the client's id for the claim that made this lease, so
	// a retried claim (the answer was lost) finds the lease instead of
	// taking more GPUs.
	RequestID string `json:"request_id,omitempty"`
	// QueuedAt is when the queue entry this lease was started for was
	// submitted; zero for a direct claim. The ledger keeps it, so `dibs
	// doctor` can tell how long queued work waited.
	QueuedAt time.Time `json:"queued_at,omitzero"`
	// MIG is the UUID ("MIG-…") of the one MIG instance the lease holds;
	// GPUs then names the GPU the instance lives on. Empty when the lease
	// holds whole GPUs.
	MIG string `json:"mig,omitempty"`
	// MemMiB is the memory budget of a lease on a shared GPU (the one GPU
	// in GPUs), which other shared leases may use beside it; 0 when the
	// lease holds whole GPUs.
	MemMiB uint64 `json:"mem_mib,omitempty"`
	// Share is the part of its GPU a MIG or shared lease counts for in
	// usage and fair-share, above 0 and at most 1; 0 for whole GPUs.
	Share float64 `json:"share,omitempty"`
	// Booked marks a booking: the GPUs are promised to the holder from
	// StartedAt to ExpiresAt and held by nobody before. At StartedAt the
	// node turns it into a lease (Booked cleared); until then nothing that
	// reads leases sees it (Table.List, State.Leases and NodeView.Leases
	// leave bookings out).
	Booked bool `json:"booked,omitempty"`
	// Group is the id of the multi-node booking this booking (or the
	// lease it became) is a part of: its first part's id, which names
	// the whole (`dibs unbook` withdraws every part). Empty for a booking
	// of one node; older agents ignore it.
	Group string `json:"group,omitempty"`
	// Job is the command a booking made with `dibs run --at` starts when
	// it turns into a lease.
	Job *job.Job `json:"job,omitempty"`
	// Containers are the short ids of the containers the holder adopted
	// (`dibs adopt --container`): a rootful runtime runs a container's
	// processes as root, and root's processes of these containers on this
	// lease's GPUs count as the holder's, not as squatters. At most
	// MaxContainers; older agents ignore the field.
	Containers []string `json:"containers,omitempty"`
	// CPUs are the cores chosen for the lease (--cpus-per-gpu), one Linux
	// CPU list per GPU in the order of GPUs, which its session is bound
	// to; empty when none were asked for (the session is then bound to
	// its GPUs' local cores). Agents before protocol 8 ignore the field.
	CPUs []string `json:"cpus,omitempty"`
	// AnyCPU: the holder asked for no binding (--cpus any).
	AnyCPU bool `json:"any_cpu,omitempty"`
	// Service is the service this lease runs (Kind service): its
	// definition and what its supervisor last saw. Its Job holds the
	// command, which travels whole to every node so a move survives the
	// loss of this one (Published). Older agents ignore the field.
	Service *service.Service `json:"service,omitempty"`
	// Mono is kept by the store only: the lease's limits on the monotonic
	// clock of the boot that wrote them (see Table.Stamp). Nil elsewhere.
	Mono *MonoLimits `json:"mono,omitempty"`
}

// EachString calls f with the JSON name and the address of every string
// field of l, so code that checks or escapes text from outside (gossip, the
// front ends) need not list the fields, and a field added here is covered
// there. f may replace the string.
func (l *Lease) EachString(f func(field string, p *string)) {
	f("id", &l.ID)
	f("node", &l.Node)
	f("user", &l.User)
	f("kind", (*string)(&l.Kind))
	f("note", &l.Note)
	f("session", &l.Session)
	f("entry", &l.Entry)
	f("gang", &l.Gang)
	f("group", &l.Group)
	f("preempt_reason", &l.PreemptReason)
	f("request_id", &l.RequestID)
	f("mig", &l.MIG)
	for i := range l.Containers {
		f("container", &l.Containers[i])
	}
	for i := range l.CPUs {
		f("cpus", &l.CPUs[i])
	}
	l.Job.EachString(f)
	if l.Service != nil {
		f("service", &l.Service.Name)
		f("health", &l.Service.Health)
		f("health_cmd", &l.Service.HealthCmd)
		f("replaces", &l.Service.Replaces)
		f("root", &l.Service.Root)
		if p := l.Service.Place; p != nil {
			for i := range p.Tags {
				f("place.tags", &p.Tags[i])
			}
			f("place.model", &p.Model)
			f("place.mig", &p.MIG)
			for i := range p.Nodelist {
				f("place.nodelist", &p.Nodelist[i])
			}
			for i := range p.Exclude {
				f("place.exclude", &p.Exclude[i])
			}
		}
		f("state", (*string)(&l.Service.State))
	}
}

// CheckText refuses a lease holding text no correct agent writes: every
// string of a lease is checked where it is made (notes by CheckNote, names
// by the agent), so a control character, bidi control or invisible
// character in one means the lease came from a broken or hostile peer.
func (l *Lease) CheckText() error {
	// A booked run's command and directory are its holder's own argv and
	// path and may hold anything (as a queue entry's may).
	c := words.TextChecker{Skip: []string{"command", "dir"}}
	l.EachString(c.Check)
	return c.Err
}

// Holds reports whether the lease covers GPU index.
func (l *Lease) Holds(gpu int) bool { return slices.Contains(l.GPUs, gpu) }

// Partial reports whether the lease holds part of a GPU (a MIG instance or
// a memory budget on a shared GPU) rather than whole GPUs.
func (l *Lease) Partial() bool { return l.MIG != "" || l.MemMiB > 0 }

// Weight is how many GPUs the lease counts for in usage and fair-share: its
// share of the GPU for a MIG or shared lease, else its number of GPUs.
func (l *Lease) Weight() float64 {
	if l.Partial() {
		return l.Share
	}
	return float64(len(l.GPUs))
}

// CUDAVisibleDevices is the value a job under this lease gets, in nvidia-smi's
// numbering (dibs also sets CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees). A
// MIG instance is named by its UUID, the only way CUDA accepts one.
func (l *Lease) CUDAVisibleDevices() string {
	if l.MIG != "" {
		return l.MIG
	}
	parts := make([]string, len(l.GPUs))
	for i, g := range l.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// Env is the environment every process started under the lease gets. A
// lease on a shared GPU also says its budget (DIBS_MEM_BUDGET_MIB), so a job
// can size its batches or cap its allocator to it.
func (l *Lease) Env() map[string]string {
	env := map[string]string{
		"CUDA_VISIBLE_DEVICES": l.CUDAVisibleDevices(),
		"CUDA_DEVICE_ORDER":    "PCI_BUS_ID",
		"DIBS_LEASE_ID":        l.ID,
		"DIBS_LEASE_TOKEN":     strconv.FormatUint(l.Token, 10),
		"DIBS_NODE":            l.Node,
	}
	if l.MemMiB > 0 {
		env["DIBS_MEM_BUDGET_MIB"] = strconv.FormatUint(l.MemMiB, 10)
	}
	for k, v := range job.ArrayEnv(l.Entry) {
		env[k] = v
	}
	return env
}

// DeviceEnv names the lease's GPUs the way container runtimes take them:
// by UUID, which means the same GPU in every numbering (a container's
// CUDA_VISIBLE_DEVICES counts from 0 again). DIBS_GPU_UUIDS is the list,
// for `docker run --gpus "device=$DIBS_GPU_UUIDS"`, podman's CDI
// (`--device nvidia.com/gpu=UUID`) and apptainer; NVIDIA_VISIBLE_DEVICES
// holds the same, for the NVIDIA container runtime and `apptainer
// --nvccli`. A MIG lease names its instance. Empty when a GPU's UUID is
// unknown (snap lacks it): a partial list would hand a container too few.
func (l *Lease) DeviceEnv(snap nodeprobe.Snapshot) map[string]string {
	uuids := []string{l.MIG}
	if l.MIG == "" {
		uuids = uuids[:0]
		for _, i := range l.GPUs {
			u := ""
			for _, g := range snap.GPUs {
				if g.Index == i {
					u = g.UUID
				}
			}
			if u == "" || strings.ContainsAny(u, ", \t\n\"'") {
				return nil
			}
			uuids = append(uuids, u)
		}
	}
	if len(uuids) == 0 {
		return nil
	}
	list := strings.Join(uuids, ",")
	return map[string]string{"DIBS_GPU_UUIDS": list, "NVIDIA_VISIBLE_DEVICES": list}
}

// LogName names the file the output of the run under the lease is kept
// in: its session and the instant it started, so two runs that share a
// session name never write one file (lease ids start again at 1 when a
// node's state is new, and --name is the holder's choice). It is what
// tmux keeps as a session name (launch.CheckName), at most 128 bytes.
func (l *Lease) LogName() string {
	suffix := "-" + strconv.FormatInt(l.StartedAt.UnixNano(), 36)
	s := l.Session
	if len(s)+len(suffix) > 128 {
		s = s[:128-len(suffix)]
	}
	return s + suffix
}

// LeaseID names a lease after its node and fencing token: unique per node,
// short enough to type, and it says where the lease lives.
func LeaseID(node string, token uint64) string {
	return node + "-" + strconv.FormatUint(token, 10)
}

// NodeOfID returns the node part of a lease id, so a request can be routed to
// the agent that owns the lease.
func NodeOfID(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 {
		return "", false
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 64); err != nil {
		return "", false
	}
	return id[:i], true
}
