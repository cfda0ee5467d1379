package peer

import (
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// The endpoints. A new one is added here, with its types below, and
// registered once (agent/core).
var (
	// Claim asks a node for GPUs (and a session on them) for a user: the
	// claim the asking agent's edge made and validated (core.claimOf).
	Claim = Endpoint[ClaimRequest, LeaseReply]{Name: "claim", MadeAtEdge: true}
	// Release ends leases on the node that holds them.
	Release = Endpoint[ReleaseRequest, ReleaseReply]{Name: "release"}
	// Extend moves a lease's end.
	Extend = Endpoint[ExtendRequest, LeaseReply]{Name: "extend"}
	// Start starts, reserves or commits a node's part of a queued attempt.
	Start = Endpoint[StartRequest, StartReply]{Name: "start"}
	// Started tells an entry's origin that the attempt runs.
	Started = Endpoint[StartedRequest, Empty]{Name: "started"}
	// Preempt signals a lease's session and ends it after the grace.
	Preempt = Endpoint[PreemptRequest, Empty]{Name: "preempt"}
	// Cancel withdraws a queued entry at its origin.
	Cancel = Endpoint[CancelRequest, Empty]{Name: "cancel"}
	// Usage reads a node's ledger: GPU-seconds per user since a time.
	Usage = Endpoint[UsageRequest, UsageReply]{Name: "usage"}
	// Refused tells an entry's origin that a node refused to start it for
	// good (no account there, a command it cannot run), so the entry fails
	// with the reason instead of blocking the queue.
	Refused = Endpoint[RefusedRequest, Empty]{Name: "refused"}
	// Place asks an entry's origin to let one scheduler start an attempt:
	// the origin is the single writer of its entries, so it alone decides
	// who starts each, and two schedulers (either side of a partition, or
	// a paused one that goes on) never start it twice.
	Place = Endpoint[PlaceRequest, PlaceReply]{Name: "place"}
)

// PlaceReply lets the scheduler start the attempt, and hands it the
// entry's job whole: its command, directory and environment stay with the
// origin (gossip carries only Job.Public), so the scheduler carries them
// in its start requests to the nodes that run it.
type PlaceReply struct {
	Job *job.Job `json:"job,omitempty"`
}

// Validate implements Message.
func (r PlaceReply) Validate() error {
	if r.Job == nil {
		return nil
	}
	return r.Job.Check()
}

// PlaceRequest asks to start an attempt (QueueEntry.Key) as Placer, the
// asking scheduler's node/instance.
type PlaceRequest struct {
	Key    string `json:"key"`
	Placer string `json:"placer"`
}

// Validate implements Message.
func (r PlaceRequest) Validate() error {
	if err := (StartedRequest{Key: r.Key}).Validate(); err != nil {
		return err
	}
	if r.Placer == "" || len(r.Placer) > 2*words.MaxNameLen || words.CheckText("placer", r.Placer) != nil {
		return refusal.Invalidf("bad placer")
	}
	return nil
}

// RefusedRequest names the attempt a node refused and why.
type RefusedRequest struct {
	Key    string `json:"key"`
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Validate implements Message.
func (r RefusedRequest) Validate() error {
	if err := (StartedRequest{Key: r.Key}).Validate(); err != nil {
		return err
	}
	if words.ValidNodeName(r.Node) != nil || len(r.Reason) > 1024 {
		return refusal.Invalidf("bad refusal")
	}
	return words.CheckText("reason", r.Reason)
}

// Run is the session a claim or a booking starts: the run spec made at
// the edge, carried as is (job.RunSpec).
type Run = job.RunSpec

// ClaimRequest is a claim made at another node for this one: the claim
// the requesting agent made at its edge, sent as is. Its JSON is
// lease.Claim's, whose names are v0.1.0's (dialect_v6.json), and its
// Validate (lease.Claim.Validate) is run again on what arrives.
type ClaimRequest = lease.Claim

// LeaseReply is a granted or changed lease.
type LeaseReply struct {
	Lease lease.Lease `json:"lease"`
}

// Validate implements Message.
func (r LeaseReply) Validate() error { return r.Lease.Validate() }

// ReleaseRequest names leases to end.
type ReleaseRequest struct {
	IDs []string `json:"ids"`
	// Kill sends the sessions SIGKILL before tmux hangs up on them
	// (api.ReleaseRequest.Kill). From HardReleaseSince; an older agent
	// ignores it and ends them with the hangup alone.
	Kill bool `json:"kill,omitempty"`
}

const maxIDs = 256

func checkIDs(ids []string) error {
	if len(ids) > maxIDs {
		return refusal.Invalidf("%d ids, over %d", len(ids), maxIDs)
	}
	for _, id := range ids {
		if _, ok := lease.NodeOfID(id); !ok || len(id) > 2*words.MaxNameLen {
			return refusal.Invalidf("%q is not a lease id", truncate(id))
		}
	}
	return nil
}

// Validate implements Message.
func (r ReleaseRequest) Validate() error { return checkIDs(r.IDs) }

// ReleaseReply lists what was ended.
type ReleaseReply struct {
	Released []string `json:"released"`
}

// Validate implements Message.
func (r ReleaseReply) Validate() error { return checkIDs(r.Released) }

// ExtendRequest moves a lease's end by Duration.
type ExtendRequest struct {
	ID       string        `json:"id"`
	Duration time.Duration `json:"duration"`
}

// Validate implements Message.
func (r ExtendRequest) Validate() error {
	if err := checkIDs([]string{r.ID}); err != nil {
		return err
	}
	if r.Duration <= 0 || r.Duration > words.MaxDuration {
		return refusal.Invalidf("extend by a positive duration")
	}
	return nil
}

// Phase is how far a start goes: a single-node run starts at once; a gang
// reserves every rank first and commits only when all hold.
type Phase string

// Start phases.
const (
	PhaseStart   Phase = "start"
	PhaseReserve Phase = "reserve"
	PhaseCommit  Phase = "commit"
)

// StartRequest asks a node to start (or reserve, or commit) its part of a
// queued attempt.
type StartRequest struct {
	Entry    queue.QueueEntry  `json:"entry"`
	Phase    Phase             `json:"phase"`
	GPUs     []int             `json:"gpus"`
	Borrowed bool              `json:"borrowed,omitempty"`
	Gang     string            `json:"gang,omitempty"`
	Rank     int               `json:"rank,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// envKey reports whether s is an environment variable's name as a rank
// may be given one: [A-Z_][A-Z0-9_]{0,63}, checked byte by byte (a
// bounded-repetition regexp costs every dibs command its compile at start).
func envKey(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// Validate implements Message.
func (r StartRequest) Validate() error {
	if err := r.Entry.Validate(); err != nil {
		return err
	}
	switch r.Phase {
	case PhaseStart, PhaseReserve, PhaseCommit:
	default:
		return refusal.Invalidf("unknown start phase %q", truncate(string(r.Phase)))
	}
	if err := lease.CheckGPUs(r.GPUs); err != nil {
		return err
	}
	if r.Rank < 0 || r.Rank >= words.MaxGangNodes {
		return refusal.Invalidf("rank %d is out of range", r.Rank)
	}
	if len(r.Gang) > 2*words.MaxNameLen {
		return refusal.Invalidf("gang id too long")
	}
	if len(r.Env) > 32 {
		return refusal.Invalidf("%d environment variables, over 32", len(r.Env))
	}
	for k, v := range r.Env {
		if !envKey(k) || len(v) > words.MaxPathLen {
			return refusal.Invalidf("bad environment variable %q", truncate(k))
		}
	}
	return nil
}

// StartReply is a node's answer: the lease, and for a gang's rank 0 where
// the rendezvous listens.
type StartReply struct {
	Lease lease.Lease `json:"lease"`
	Host  string      `json:"host"`
	Port  int         `json:"port,omitempty"`
}

// Validate implements Message.
func (r StartReply) Validate() error {
	if err := r.Lease.Validate(); err != nil {
		return err
	}
	if r.Host == "" || len(r.Host) > 255 || r.Port < 0 || r.Port > 65535 {
		return refusal.Invalidf("bad rendezvous address")
	}
	return nil
}

// StartedRequest tells an origin that an attempt (QueueEntry.Key) runs.
type StartedRequest struct {
	Key string `json:"key"`
}

// Validate implements Message.
func (r StartedRequest) Validate() error {
	if r.Key == "" || len(r.Key) > 2*words.MaxNameLen {
		return refusal.Invalidf("bad entry key")
	}
	return nil
}

// PreemptRequest tells a node to signal a lease's session and end the lease
// after the grace; the token must still be the lease's.
type PreemptRequest struct {
	Lease  string `json:"lease"`
	Token  uint64 `json:"token"`
	Reason string `json:"reason"`
	// Signal overrides the node's preemption signal (SIGTERM for a gang).
	Signal int `json:"signal,omitempty"`
}

// Validate implements Message.
func (r PreemptRequest) Validate() error {
	if err := checkIDs([]string{r.Lease}); err != nil {
		return err
	}
	switch r.Reason {
	case lease.PreemptQuota, lease.PreemptIdle, lease.PreemptGang, lease.PreemptOverdue:
	default:
		return refusal.Invalidf("unknown preemption reason %q", truncate(r.Reason))
	}
	switch syscall.Signal(r.Signal) {
	case 0, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2:
	default:
		return refusal.Invalidf("signal %d is not one a preemption sends", r.Signal)
	}
	return nil
}

// CancelRequest withdraws a queued entry.
type CancelRequest struct {
	ID string `json:"id"`
}

// Validate implements Message.
func (r CancelRequest) Validate() error {
	if _, ok := queue.OriginOfQueueID(r.ID); !ok || len(r.ID) > 2*words.MaxNameLen {
		return refusal.Invalidf("%q is not a queue id", truncate(r.ID))
	}
	return nil
}

// UsageRequest asks for GPU-seconds per user since a time.
type UsageRequest struct {
	Since time.Time `json:"since"`
}

// Validate implements Message.
func (r UsageRequest) Validate() error {
	if !words.ValidSince(r.Since) {
		return refusal.Invalidf("bad time")
	}
	return nil
}

// UsageReply is GPU-seconds per user.
type UsageReply struct {
	GPUSeconds map[string]float64 `json:"gpu_seconds"`
	// IdleGPUSeconds is the part of each user's GPU-seconds whose GPUs sat
	// at 0 % (absent from agents before protocol 8).
	IdleGPUSeconds map[string]float64 `json:"idle_gpu_seconds,omitempty"`
}

// Validate implements Message.
func (r UsageReply) Validate() error {
	if len(r.GPUSeconds) > 10000 {
		return refusal.Invalidf("usage of %d users", len(r.GPUSeconds))
	}
	if len(r.IdleGPUSeconds) > 10000 {
		return refusal.Invalidf("idle usage of %d users", len(r.IdleGPUSeconds))
	}
	for u, s := range r.IdleGPUSeconds {
		if !words.ValidUserName(u) || math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
			return fmt.Errorf("bad idle usage entry %q", truncate(u))
		}
	}
	for u, s := range r.GPUSeconds {
		if !words.ValidUserName(u) || math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
			return fmt.Errorf("bad usage entry %q", truncate(u))
		}
	}
	return nil
}

// Empty is a reply with nothing in it.
type Empty struct{}

// Validate implements Message.
func (Empty) Validate() error { return nil }

// The doctor's endpoints: what `dibs doctor`, `dibs replay` and `dibs
// export` ask of every node. They are registered in agent/core/doctor.go.
var (
	// Health asks a node for its report: version, clock, cluster settings,
	// tmux, probe, disk, and the leases and sessions that need a look.
	Health = Endpoint[HealthRequest, HealthReply]{Name: "health"}
	// History reads one page of a node's ledger, or of its GPU samples,
	// since a time.
	History = Endpoint[HistoryRequest, HistoryReply]{Name: "history"}
)

// HealthRequest asks for a node's report; it carries nothing.
type HealthRequest struct{}

// Validate implements Message.
func (HealthRequest) Validate() error { return nil }

// HealthReply is a node's report of itself.
type HealthReply struct {
	Report doctor.Report `json:"report"`
}

// Validate implements Message.
func (r HealthReply) Validate() error {
	if err := r.Report.Validate(); err != nil {
		return refusal.Wrap(refusal.CodeInvalid, err)
	}
	return nil
}

// Parts of a node's history.
const (
	HistoryLedger  = "ledger"
	HistorySamples = "samples"
	// HistoryRun asks for the command a run's session was started with
	// (the lease id in AfterID), kept past its end for `dibs export
	// sbatch`. The asking agent shows it only to the run's holder and
	// admins.
	HistoryRun = "run"
)

// HistoryPageBytes bounds the items of one history reply, well under
// MaxBody with the envelope around them.
const HistoryPageBytes = 160 << 10

// MaxHistoryItems bounds the items of one history reply.
const MaxHistoryItems = 2000

// HistoryRequest asks for one page of a node's ledger (entries that ended
// since Since, by end time then lease id, after the cursor) or of its
// samples (hours since Since, after the cursor hour).
type HistoryRequest struct {
	Part  string    `json:"part"`
	Since time.Time `json:"since"`
	// AfterEnd and AfterID continue a ledger page; AfterHour a samples
	// page. Zero: from the start.
	AfterEnd  time.Time `json:"after_end,omitzero"`
	AfterID   string    `json:"after_id,omitempty"`
	AfterHour time.Time `json:"after_hour,omitzero"`
}

// Validate implements Message.
func (r HistoryRequest) Validate() error {
	if r.Part != HistoryLedger && r.Part != HistorySamples && r.Part != HistoryRun {
		return refusal.Invalidf("unknown history part %q", truncate(r.Part))
	}
	if r.Part == HistoryRun && r.AfterID == "" {
		return refusal.Invalidf("a run's history names its lease id")
	}
	if !words.ValidSince(r.Since) || !words.ValidSince(r.AfterEnd) || !words.ValidSince(r.AfterHour) {
		return refusal.Invalidf("bad time")
	}
	if r.AfterID != "" {
		if _, ok := lease.NodeOfID(r.AfterID); !ok || len(r.AfterID) > 2*words.MaxNameLen {
			return refusal.Invalidf("%q is not a lease id", truncate(r.AfterID))
		}
	}
	return nil
}

// HistoryReply is one page; More says another follows.
type HistoryReply struct {
	Entries []lease.LedgerEntry `json:"entries,omitempty"`
	Buckets []doctor.Bucket     `json:"buckets,omitempty"`
	More    bool                `json:"more,omitempty"`
	// Run is the kept command of the run asked for (HistoryRun), nil when
	// the node kept none; RunUser is its holder.
	Run     *job.Job `json:"run,omitempty"`
	RunUser string   `json:"run_user,omitempty"`
}

// Validate implements Message.
func (r HistoryReply) Validate() error {
	if len(r.Entries)+len(r.Buckets) > MaxHistoryItems {
		return refusal.Invalidf("%d history items, over %d", len(r.Entries)+len(r.Buckets), MaxHistoryItems)
	}
	for i := range r.Entries {
		if err := r.Entries[i].Validate(); err != nil {
			return err
		}
	}
	for i := range r.Buckets {
		if err := r.Buckets[i].Validate(); err != nil {
			return refusal.Wrap(refusal.CodeInvalid, err)
		}
	}
	if r.Run != nil {
		if err := r.Run.Check(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "a kept run: %v", err)
		}
		if r.Run.Kept || !words.ValidUserName(r.RunUser) {
			return refusal.Invalidf("a kept run without its command or holder")
		}
	}
	return nil
}
