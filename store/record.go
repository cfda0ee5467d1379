package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/runrecord"
	"github.com/dibs-gpu/dibs/service"
)

// recordVersion is the first byte of every lease, queue and ledger body in a
// schema-2 file. It names the shape of the JSON that follows, so a record can
// change shape without a new schema: a dibs that meets a version it does not
// know refuses the file instead of misreading it.
const recordVersion = 1

// sumSize is the length of the checksum that ends every stored value.
const sumSize = 4

// castagnoli is CRC-32C: it finds every single-bit and every burst error of up
// to 32 bits, and disks, ext4 and iSCSI use it for the same job. The table is
// made at first use, not at start: every dibsd command (probe, keygen, config
// check, the board) links this package through the agent, and making it costs
// 0.2 ms that only the agent needs. (The dibs client links no store: see
// floorplan_test.go.)
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// leaseRecord is how a lease is stored. Its JSON is frozen: schema-1 files hold
// exactly this JSON (lease.Lease's tags when that schema was written), so the
// API and the gossip wire may rename or add fields to lease.Lease without
// changing the file. A change here needs a new recordVersion and a decoder
// for the old one — except a new optional field (omitempty, zero when
// absent), which records written before it decode to unchanged.
type leaseRecord struct {
	ID             string    `json:"id"`
	Node           string    `json:"node"`
	GPUs           []int     `json:"gpus"`
	User           string    `json:"user"`
	UID            int       `json:"uid"`
	Token          uint64    `json:"token"`
	Kind           string    `json:"kind"`
	Note           string    `json:"note"`
	StartedAt      time.Time `json:"started_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	Session        string    `json:"session,omitempty"`
	Warned         bool      `json:"warned,omitempty"`
	OverdueNoticed bool      `json:"overdue_noticed,omitempty"`
	Entry          string    `json:"entry,omitempty"`
	Gang           string    `json:"gang,omitempty"`
	Rank           int       `json:"rank,omitempty"`
	Borrowed       bool      `json:"borrowed,omitempty"`
	ReservedUntil  time.Time `json:"reserved_until,omitzero"`
	PreemptedAt    time.Time `json:"preempted_at,omitzero"`
	PreemptReason  string    `json:"preempt_reason,omitempty"`
	SignalledAt    time.Time `json:"signalled_at,omitzero"`
	// Added after schema 1, optional.
	RequestID string            `json:"request_id,omitempty"`
	Mono      *lease.MonoLimits `json:"mono,omitempty"`
	QueuedAt  time.Time         `json:"queued_at,omitzero"`
	// Added with MIG, shared GPUs and bookings, optional: a booking is a
	// lease record with booked set (and, for `dibs run --at`, its job).
	MIG    string     `json:"mig,omitempty"`
	MemMiB uint64     `json:"mem_mib,omitempty"`
	Share  float64    `json:"share,omitempty"`
	Booked bool       `json:"booked,omitempty"`
	Job    *jobRecord `json:"job,omitempty"`
	// Added with the events (issue 14), optional.
	FinalWarned bool `json:"final_warned,omitempty"`
	// Added with bookings across nodes (issue 23), optional.
	Group string `json:"group,omitempty"`
	// Added with adopted containers (issue 21), optional.
	Containers []string `json:"containers,omitempty"`
	// Added with CPUs close to the GPUs (issue 35), optional: without
	// them a restart would forget the cores chosen for a lease.
	CPUs   []string `json:"cpus,omitempty"`
	AnyCPU bool     `json:"any_cpu,omitempty"`
	// Added with services (issue 33), optional.
	Service *serviceRecord `json:"service,omitempty"`
}

// serviceRecord is how a service's definition and status are stored
// (lease.Lease.Service), frozen like leaseRecord.
type serviceRecord struct {
	Name        string    `json:"name"`
	Port        int       `json:"port,omitempty"`
	Health      string    `json:"health,omitempty"`
	HealthCmd   string    `json:"health_cmd,omitempty"`
	Preemptible bool      `json:"preemptible,omitempty"`
	State       string    `json:"state,omitempty"`
	Restarts    int       `json:"restarts,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	PID         int       `json:"pid,omitempty"`

	// Added with the idle flag, the proxy and replicas (issue 33),
	// optional.
	IdleSince time.Time    `json:"idle_since,omitzero"`
	ProxyPort int          `json:"proxy_port,omitempty"`
	Replica   int          `json:"replica,omitempty"`
	Replicas  int          `json:"replicas,omitempty"`
	Replaces  string       `json:"replaces,omitempty"`
	Root      string       `json:"root,omitempty"`
	Place     *placeRecord `json:"place,omitempty"`
}

// placeRecord is how a service's placement (service.Placement) is
// stored, frozen like serviceRecord.
type placeRecord struct {
	Tags       []string `json:"tags,omitempty"`
	Model      string   `json:"model,omitempty"`
	CPUsPerGPU int      `json:"cpus_per_gpu,omitempty"`
	MIG        string   `json:"mig,omitempty"`
	Nodelist   []string `json:"nodelist,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
}

func serviceToRecord(s *service.Service) *serviceRecord {
	if s == nil {
		return nil
	}
	rec := &serviceRecord{Name: s.Name, Port: s.Port, Health: s.Health, HealthCmd: s.HealthCmd, Preemptible: s.Preemptible,
		State: string(s.State), Restarts: s.Restarts, Since: s.Since, PID: s.PID}
	rec.IdleSince, rec.ProxyPort = s.IdleSince, s.ProxyPort
	rec.Replica, rec.Replicas, rec.Replaces, rec.Root = s.Replica, s.Replicas, s.Replaces, s.Root
	if p := s.Place; p != nil {
		rec.Place = &placeRecord{Tags: p.Tags, Model: p.Model, CPUsPerGPU: p.CPUsPerGPU, MIG: p.MIG, Nodelist: p.Nodelist, Exclude: p.Exclude}
	}
	return rec
}

func (r *serviceRecord) service() *service.Service {
	if r == nil {
		return nil
	}
	svc := &service.Service{Spec: service.Spec{Name: r.Name, Port: r.Port, Health: r.Health, HealthCmd: r.HealthCmd, Preemptible: r.Preemptible},
		Status: service.Status{State: service.State(r.State), Restarts: r.Restarts, Since: r.Since, PID: r.PID}}
	svc.IdleSince, svc.ProxyPort = r.IdleSince, r.ProxyPort
	svc.Replica, svc.Replicas, svc.Replaces, svc.Root = r.Replica, r.Replicas, r.Replaces, r.Root
	if p := r.Place; p != nil {
		svc.Place = &service.Placement{Tags: p.Tags, Model: p.Model, CPUsPerGPU: p.CPUsPerGPU, MIG: p.MIG, Nodelist: p.Nodelist, Exclude: p.Exclude}
	}
	return svc
}

func leaseToRecord(l lease.Lease) leaseRecord {
	return leaseRecord{
		ID: l.ID, Node: l.Node, GPUs: l.GPUs, User: l.User, UID: l.UID, Token: l.Token,
		Kind: string(l.Kind), Note: l.Note, StartedAt: l.StartedAt, ExpiresAt: l.ExpiresAt,
		Session: l.Session, Warned: l.Warned, OverdueNoticed: l.OverdueNoticed,
		Entry: l.Entry, Gang: l.Gang, Rank: l.Rank, Borrowed: l.Borrowed,
		ReservedUntil: l.ReservedUntil, PreemptedAt: l.PreemptedAt,
		PreemptReason: l.PreemptReason, SignalledAt: l.SignalledAt,
		RequestID: l.RequestID, Mono: l.Mono, QueuedAt: l.QueuedAt, FinalWarned: l.FinalWarned,
		MIG: l.MIG, MemMiB: l.MemMiB, Share: l.Share, Booked: l.Booked, Job: jobToRecord(l.Job),
		Group: l.Group, Containers: l.Containers, CPUs: l.CPUs, AnyCPU: l.AnyCPU, Service: serviceToRecord(l.Service),
	}
}

func jobToRecord(j *job.Job) *jobRecord {
	if j == nil {
		return nil
	}
	return &jobRecord{Command: j.Command, Dir: j.Dir, Name: j.Name, Torchrun: j.Torchrun, PerGPU: j.PerGPU, Env: j.Env, Kept: j.Kept}
}

func (r *jobRecord) job() *job.Job {
	if r == nil {
		return nil
	}
	return &job.Job{Command: r.Command, Dir: r.Dir, Name: r.Name, Torchrun: r.Torchrun, PerGPU: r.PerGPU, Env: r.Env, Kept: r.Kept}
}

func (r *leaseRecord) lease() lease.Lease {
	return lease.Lease{
		ID: r.ID, Node: r.Node, GPUs: r.GPUs, User: r.User, UID: r.UID, Token: r.Token,
		Kind: lease.Kind(r.Kind), Note: r.Note, StartedAt: r.StartedAt, ExpiresAt: r.ExpiresAt,
		Session: r.Session, Warned: r.Warned, OverdueNoticed: r.OverdueNoticed,
		Entry: r.Entry, Gang: r.Gang, Rank: r.Rank, Borrowed: r.Borrowed,
		ReservedUntil: r.ReservedUntil, PreemptedAt: r.PreemptedAt,
		PreemptReason: r.PreemptReason, SignalledAt: r.SignalledAt,
		RequestID: r.RequestID, Mono: r.Mono, QueuedAt: r.QueuedAt, FinalWarned: r.FinalWarned,
		MIG: r.MIG, MemMiB: r.MemMiB, Share: r.Share, Booked: r.Booked, Job: r.Job.job(),
		Group: r.Group, Containers: r.Containers, CPUs: r.CPUs, AnyCPU: r.AnyCPU, Service: r.Service.service(),
	}
}

// jobRecord is how a queued run's job is stored (frozen, like leaseRecord).
type jobRecord struct {
	Command  []string `json:"command,omitempty"`
	Dir      string   `json:"dir,omitempty"`
	Name     string   `json:"name,omitempty"`
	Torchrun bool     `json:"torchrun,omitempty"`
	PerGPU   bool     `json:"per_gpu,omitempty"`
	// Env is job.Job.Env: the caller's PATH and Python environment.
	Env map[string]string `json:"env,omitempty"`
	// Kept is job.Job.Kept. A node stores its own jobs whole, so it is
	// false in every record written; kept so no field is lost.
	Kept bool `json:"kept,omitempty"`
}

// entryRecord is how a queue entry is stored (frozen, like leaseRecord).
type entryRecord struct {
	ID          string     `json:"id"`
	Origin      string     `json:"origin"`
	User        string     `json:"user"`
	UID         int        `json:"uid"`
	SubmittedAt time.Time  `json:"submitted_at"`
	Nodes       int        `json:"nodes"`
	GPUsPerNode int        `json:"gpus_per_node"`
	Node        string     `json:"node,omitempty"`
	Duration    int64      `json:"duration"` // nanoseconds
	Kind        string     `json:"kind"`
	Note        string     `json:"note,omitempty"`
	Job         *jobRecord `json:"job,omitempty"`
	Requeue     bool       `json:"requeue,omitempty"`
	NoRequeue   bool       `json:"no_requeue,omitempty"`
	MaxRestarts int        `json:"max_restarts,omitempty"`
	Restarts    int        `json:"restarts,omitempty"`
	Attempt     int        `json:"attempt,omitempty"`
	Running     bool       `json:"running,omitempty"`
	Model       string     `json:"model,omitempty"`
	// Added after schema 1, optional.
	RequestID string `json:"request_id,omitempty"`
	// Added with pools and shared GPUs, optional.
	Tags   []string `json:"tags,omitempty"`
	MemMiB uint64   `json:"mem_mib,omitempty"`
	// Added with origin-arbitrated starts, optional.
	Placer string `json:"placer,omitempty"`
	// Added with spaced requeues, optional: a restart of the agent keeps
	// a requeued run's pause.
	RetryAt  time.Time `json:"retry_at,omitzero"`
	RetryWhy string    `json:"retry_why,omitempty"`
	// Added with job arrays and dependencies, optional.
	Array *arrayRecord `json:"array,omitempty"`
	After []depRecord  `json:"after,omitempty"`
	// Added with queued MIG instances, optional: without it a queued MIG
	// request would come back from a restart as one for whole GPUs.
	MIG string `json:"mig,omitempty"`
	// Added with --nodelist and --exclude, optional: without them a queued
	// request would come back from a restart free to run anywhere.
	Nodelist []string `json:"nodelist,omitempty"`
	Exclude  []string `json:"exclude,omitempty"`
	// Added with CPUs close to the GPUs (issue 35), optional: without
	// them a queued request would come back from a restart without its
	// cores.
	CPUsPerGPU int  `json:"cpus_per_gpu,omitempty"`
	AnyCPU     bool `json:"any_cpu,omitempty"`
}

// arrayRecord is how a job array's parent keeps its tasks (frozen, like
// leaseRecord).
type arrayRecord struct {
	Spec      string `json:"spec"`
	Throttle  int    `json:"throttle,omitempty"`
	Next      int    `json:"next,omitempty"`
	Done      string `json:"done,omitempty"`
	Failed    string `json:"failed,omitempty"`
	Cancelled string `json:"cancelled,omitempty"`
	Started   bool   `json:"started,omitempty"`
}

// depRecord is how a dependency is stored (frozen, like leaseRecord).
type depRecord struct {
	ID  string `json:"id"`
	Any bool   `json:"any,omitempty"`
}

func sweepToRecord(e queue.QueueEntry) (*arrayRecord, []depRecord) {
	var a *arrayRecord
	if e.Array != nil {
		a = &arrayRecord{Spec: e.Array.Spec, Throttle: e.Array.Throttle, Next: e.Array.Next, Done: e.Array.Done,
			Failed: e.Array.Failed, Cancelled: e.Array.Cancelled, Started: e.Array.Started}
	}
	var d []depRecord
	for _, x := range e.After {
		d = append(d, depRecord{ID: x.ID, Any: x.Any})
	}
	return a, d
}

func (r *entryRecord) sweep() (*queue.Array, []queue.Dep) {
	var a *queue.Array
	if r.Array != nil {
		a = &queue.Array{Spec: r.Array.Spec, Throttle: r.Array.Throttle, Next: r.Array.Next, Done: r.Array.Done,
			Failed: r.Array.Failed, Cancelled: r.Array.Cancelled, Started: r.Array.Started}
	}
	var d []queue.Dep
	for _, x := range r.After {
		d = append(d, queue.Dep{ID: x.ID, Any: x.Any})
	}
	return a, d
}

func entryToRecord(e queue.QueueEntry) entryRecord {
	r := entryRecord{
		ID: e.ID, Origin: e.Origin, User: e.User, UID: e.UID, SubmittedAt: e.SubmittedAt,
		Nodes: e.Nodes, GPUsPerNode: e.GPUsPerNode, Node: e.Node, Duration: int64(e.Duration),
		Kind: string(e.Kind), Note: e.Note, Requeue: e.Requeue, MaxRestarts: e.MaxRestarts, NoRequeue: e.NoRequeue,
		Restarts: e.Restarts, Attempt: e.Attempt, Running: e.Running, Model: e.Model,
		RequestID: e.RequestID, Tags: e.Tags, MemMiB: e.MemMiB, Job: jobToRecord(e.Job), Placer: e.Placer,
		RetryAt: e.RetryAt, RetryWhy: e.RetryWhy, MIG: e.MIG, Nodelist: e.Only, Exclude: e.NodeChoice.Exclude,
		CPUsPerGPU: e.CPUsPerGPU, AnyCPU: e.AnyCPU,
	}
	r.Array, r.After = sweepToRecord(e)
	return r
}

func (r *entryRecord) entry() queue.QueueEntry {
	e := queue.QueueEntry{
		ID: r.ID, Origin: r.Origin, User: r.User, UID: r.UID, SubmittedAt: r.SubmittedAt,
		Nodes: r.Nodes, GPUsPerNode: r.GPUsPerNode, Node: r.Node, Duration: time.Duration(r.Duration),
		Kind: lease.Kind(r.Kind), Note: r.Note, Requeue: r.Requeue, MaxRestarts: r.MaxRestarts, NoRequeue: r.NoRequeue,
		Restarts: r.Restarts, Attempt: r.Attempt, Running: r.Running, Model: r.Model,
		RequestID: r.RequestID, Tags: r.Tags, MemMiB: r.MemMiB, Job: r.Job.job(), Placer: r.Placer,
		RetryAt: r.RetryAt, RetryWhy: r.RetryWhy, MIG: r.MIG,
		NodeChoice: lease.NodeChoice{Only: r.Nodelist, Exclude: r.Exclude},
		CPUsPerGPU: r.CPUsPerGPU, AnyCPU: r.AnyCPU,
	}
	e.Array, e.After = r.sweep()
	return e
}

// ledgerRecord is how an ended lease is stored (frozen, like leaseRecord).
type ledgerRecord struct {
	LeaseID    string    `json:"lease_id"`
	Node       string    `json:"node"`
	User       string    `json:"user"`
	UID        int       `json:"uid"`
	GPUs       []int     `json:"gpus"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	GPUSeconds float64   `json:"gpu_seconds"`
	Reason     string    `json:"reason"`
	By         string    `json:"by,omitempty"`
	// Added after schema 1, optional.
	Kind     string    `json:"kind,omitempty"`
	Limit    int64     `json:"limit,omitempty"` // nanoseconds
	Entry    string    `json:"entry,omitempty"`
	Gang     string    `json:"gang,omitempty"`
	Rank     int       `json:"rank,omitempty"`
	QueuedAt time.Time `json:"queued_at,omitzero"`
	// Added with restarts that remember ended queued runs, optional.
	Reserved bool `json:"reserved,omitempty"`
	// Added with the record of each run (issue 34), optional.
	Figures        *runrecord.Figures `json:"figures,omitempty"`
	IdleGPUSeconds float64            `json:"idle_gpu_seconds,omitempty"`
	Folded         int                `json:"folded,omitempty"`
	// Added with services' stops kept across restarts (issue 33), optional.
	ServiceRoot string `json:"service_root,omitempty"`
}

func ledgerToRecord(e lease.LedgerEntry) ledgerRecord {
	return ledgerRecord{
		LeaseID: e.LeaseID, Node: e.Node, User: e.User, UID: e.UID, GPUs: e.GPUs,
		Start: e.Start, End: e.End, GPUSeconds: e.GPUSeconds, Reason: e.Reason, By: e.By,
		Kind: string(e.Kind), Limit: int64(e.Limit), Entry: e.Entry, Gang: e.Gang, Rank: e.Rank, QueuedAt: e.QueuedAt, Reserved: e.Reserved,
		Figures: e.Figures, IdleGPUSeconds: e.IdleGPUSeconds, Folded: e.Folded, ServiceRoot: e.ServiceRoot,
	}
}

func (r *ledgerRecord) entry() lease.LedgerEntry {
	return lease.LedgerEntry{
		LeaseID: r.LeaseID, Node: r.Node, User: r.User, UID: r.UID, GPUs: r.GPUs,
		Start: r.Start, End: r.End, GPUSeconds: r.GPUSeconds, Reason: r.Reason, By: r.By,
		Kind: lease.Kind(r.Kind), Limit: time.Duration(r.Limit), Entry: r.Entry, Gang: r.Gang, Rank: r.Rank, QueuedAt: r.QueuedAt, Reserved: r.Reserved,
		Figures: r.Figures, IdleGPUSeconds: r.IdleGPUSeconds, Folded: r.Folded, ServiceRoot: r.ServiceRoot,
	}
}

// body encodes a record: the record version, then its JSON.
func body(rec any) ([]byte, error) {
	j, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return append([]byte{recordVersion}, j...), nil
}

// checksum is the CRC-32C of a record's bucket name, key and body. The bucket
// and key are in it so a record moved under another key, or into another
// bucket, fails as surely as one with a flipped bit.
func checksum(bucket, key, body []byte) uint32 {
	var n [4]byte
	castagnoli := castagnoli()
	h := crc32.Update(0, castagnoli, bucket)
	h = crc32.Update(h, castagnoli, []byte{0})
	binary.BigEndian.PutUint32(n[:], uint32(len(key)))
	h = crc32.Update(h, castagnoli, n[:])
	h = crc32.Update(h, castagnoli, key)
	return crc32.Update(h, castagnoli, body)
}

// seal appends the checksum to body: what goes into bbolt.
func seal(bucket, key, body []byte) []byte {
	v := make([]byte, len(body), len(body)+sumSize)
	copy(v, body)
	return binary.BigEndian.AppendUint32(v, checksum(bucket, key, body))
}

// unseal checks a stored value and returns its body and checksum.
func unseal(bucket, key, v []byte) (body []byte, sum uint32, err error) {
	if len(v) < sumSize {
		return nil, 0, fmt.Errorf("record is %d bytes, too short to hold its checksum", len(v))
	}
	body, stored := v[:len(v)-sumSize], binary.BigEndian.Uint32(v[len(v)-sumSize:])
	if sum := checksum(bucket, key, body); sum != stored {
		return nil, 0, fmt.Errorf("record does not match its key and checksum (CRC-32C %08x, stored %08x)", sum, stored)
	}
	return body, stored, nil
}

// digest sums a bucket's records: how many there are and the sum of their
// checksums. Kept in meta and updated with every write, it catches what a
// record's own checksum cannot: a record lost, repeated, or replaced by an
// older copy (a page pointer that now leads to a page bbolt freed).
type digest struct {
	n   uint64
	sum uint64
}

func (d *digest) add(sum uint32)    { d.n++; d.sum += uint64(sum) }
func (d *digest) remove(sum uint32) { d.n--; d.sum -= uint64(sum) }

func (d digest) bytes() []byte {
	b := binary.BigEndian.AppendUint64(nil, d.n)
	return binary.BigEndian.AppendUint64(b, d.sum)
}
