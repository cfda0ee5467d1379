package lease

import (
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/service"
)

// Claim is what a person asks for on one node, made once at the edge (the
// agent's socket handler reads the words of a request into it) and carried
// as is to the node that grants it: the agents send it to each other as the
// claim endpoint's request (agent/peer.ClaimRequest is this type), so its
// JSON names are the protocol's and must stay as v0.1.0 decodes them.
// Validate is every bound a claim is held to before any node plans it; the
// node's own rules (Table.PlanClaim) decide the rest.
//
// A field added here travels between agents: it takes omitempty and must
// mean "as before" when zero (an older agent leaves it out), and an agent
// of protocol 6 never sees it (agent/peer prunes to dialect_v6.json); a
// field that must not travel takes `json:"-"`, as QueuedAt does.
type Claim struct {
	// Count GPUs chosen by dibs, or exactly GPUs; one of the two.
	Count int   `json:"count,omitempty"`
	GPUs  []int `json:"gpus,omitempty"`
	// Duration is the time limit; zero means the kind's default (Limit).
	Duration time.Duration `json:"duration,omitempty"`
	Note     string        `json:"note,omitempty"`
	// Kind is interactive or batch; empty means interactive (Limit).
	Kind Kind `json:"kind,omitempty"`
	// Force allows naming GPUs that have someone's process on them but no lease.
	Force bool `json:"force,omitempty"`
	// Run, when set, is the tmux session to start on the new lease.
	Run *job.RunSpec `json:"run,omitempty"`
	// Service makes the lease a service's (Kind service, `dibs serve`):
	// Run is its command. Agents before protocol 8 know no services
	// (peer.ServiceSince); the edge refuses one while such a node is up.
	Service *service.Spec `json:"service,omitempty"`
	// RequestID names the claim so a retry (same id, same caller) gets
	// the lease the first try made instead of more GPUs.
	RequestID string `json:"request_id,omitempty"`
	// QueuedAt is when the queue entry this claim starts was submitted
	// (zero for a direct claim); it becomes Lease.QueuedAt. It never
	// travels: a queued start carries its entry.
	QueuedAt time.Time `json:"-"`
	// MIG asks for one MIG instance instead of GPUs: by profile (3g.40gb),
	// UUID (MIG-…) or GPU:INDEX (0:1).
	MIG string `json:"mig,omitempty"`
	// MemMiB asks for a memory budget on a shared GPU instead of GPUs
	// (with GPUs naming at most the one GPU to share).
	MemMiB uint64 `json:"mem_mib,omitempty"`
	// Model restricts the claim to GPUs whose model contains it (any case).
	Model string `json:"model,omitempty"`
	// Tags restricts the claim to a node carrying every one (a pool).
	Tags []string `json:"tags,omitempty"`
	// Where is the --nodelist and --exclude it was made with. It never
	// travels: the edge picks the node a claim goes to (or a queued
	// entry carries its own, QueueEntry.NodeChoice).
	Where NodeChoice `json:"-"`
	// CPUsPerGPU asks for that many of each GPU's local cores, chosen at
	// the grant and kept on the lease (Lease.CPUs); 0 binds the session
	// to all of them.
	CPUsPerGPU int `json:"cpus_per_gpu,omitempty"`
	// AnyCPU asks for no binding at all (--cpus any).
	AnyCPU bool `json:"any_cpu,omitempty"`
}

// Validate refuses a claim no node could grant as asked, with words for
// the person who asked: the edge runs it on the claim it made, and the
// owning node again on the claim the network brought (agent/peer runs it
// on every request it decodes).
func (c Claim) Validate() error {
	if c.Count < 0 {
		return refusal.Invalidf("GPU count must be positive, got %d", c.Count)
	}
	if c.Count > words.MaxGPUsPerNode {
		return refusal.Invalidf("GPU count %d is out of range: a node has at most %d", c.Count, words.MaxGPUsPerNode)
	}
	if err := CheckGPUs(c.GPUs); err != nil {
		return err
	}
	if err := CheckCountOrIDs(c.Count, c.GPUs); err != nil {
		return err
	}
	if c.Duration < 0 || c.Duration > words.MaxDuration {
		return refusal.Invalidf("time limit %s is out of range", words.FormatDuration(c.Duration))
	}
	if err := checkKind(c.Kind); err != nil {
		return err
	}
	if err := words.CheckNote(c.Note); err != nil {
		return err
	}
	if err := c.checkService(); err != nil {
		return err
	}
	if c.RequestID != "" && !ValidRequestID(c.RequestID) {
		return refusal.Invalidf("request id %s must be 8 to 64 letters, digits, '-' or '_'", words.QuoteInput(c.RequestID))
	}
	if err := c.checkWant(); err != nil {
		return err
	}
	if err := c.checkCPUAsk(); err != nil {
		return err
	}
	if err := c.Where.Check(); err != nil {
		return err
	}
	return c.Run.Check()
}

// checkWant bounds the parts of a claim that ask for a MIG instance, a
// memory budget, a model or pools.
func (c Claim) checkWant() error {
	if len(c.MIG) > words.MaxNameLen || len(c.Model) > words.MaxModelLen || c.MemMiB > words.MaxMemMiB {
		return refusal.Invalidf("the MIG instance, model or memory budget is too long or too large")
	}
	if err := words.CheckText("MIG instance", c.MIG); err != nil {
		return err
	}
	if err := words.CheckText("model", c.Model); err != nil {
		return err
	}
	return CheckTags(c.Tags)
}

// CheckCountOrIDs refuses a request that both counts GPUs and names them:
// the two say which GPUs in two ways, and dibs does not guess which was
// meant. Claims, bookings and the command line (before it sends) share it,
// so the rule and its words live once; the words are the flags', which
// every way of asking (API, peer, TUI) maps onto.
func CheckCountOrIDs(count int, gpus []int) error { return countOrIDs(count, gpus, false) }

// countDisagrees is the planners' (Table.Plan, Table.Book) looser form of
// CheckCountOrIDs, for a request that skipped Validate (a peer's): a count
// that matches the GPUs named beside it says the same thing twice and
// passes.
func countDisagrees(count int, gpus []int) error { return countOrIDs(count, gpus, true) }

// countOrIDs is the rule of CheckCountOrIDs; with sameCountPasses a count
// equal to the number of GPUs named passes.
func countOrIDs(count int, gpus []int, sameCountPasses bool) error {
	if count <= 0 || len(gpus) == 0 || sameCountPasses && count == len(gpus) {
		return nil
	}
	ids := make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = strconv.Itoa(g)
	}
	return refusal.Invalidf("-g %d and --ids %s both say which GPUs: give -g N for any N free GPUs, or --ids for those GPUs, not both", count, strings.Join(ids, ","))
}
