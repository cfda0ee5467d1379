package replay

import (
	"cmp"
	"container/heap"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	jobpkg "github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// Policy names a way for a team to share its GPUs.
type Policy string

// The policies a replay compares.
const (
	// PolicyDibs is dibs as configured: direct claims start at once when
	// their GPUs are free, the rest queue; the queue is queue.Schedule's
	// (fair-share, age, EASY backfill, gangs whole); idle leases are
	// reclaimed when someone waits; a lease past its time limit follows the
	// end action (warn: it stays while nobody waits for its GPUs).
	PolicyDibs Policy = "dibs"
	// PolicySlack is no tool at all: a person takes GPUs that are free, or
	// tries again every few minutes until they give up; nothing ends a
	// session but its owner, and some owners forget to say they are done.
	PolicySlack Policy = "slack"
	// PolicySLURM is a batch scheduler: everything queues (salloc for a
	// session), ordered by fair-share and age with EASY backfill — the same
	// queue.Schedule — but a job ends at its time limit, work or not, and
	// nothing idle is taken back before it.
	PolicySLURM Policy = "slurm"
)

// Policies are every policy, in the order the table prints them.
func Policies() []Policy { return []Policy{PolicyDibs, PolicySlack, PolicySLURM} }

// ParsePolicy reads a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q: use dibs, slack or slurm", s)
}

// Config is how the policies behave where the trace cannot say.
type Config struct {
	// Lease is dibs's lease policy (default lease.DefaultPolicy): time
	// limits and the end action.
	Lease lease.Policy
	// Sched is dibs's queue policy (fair-share, idle reclaim, quotas).
	Sched queue.SchedConfig
	// RetryEvery is how often a Slack user looks again for free GPUs, on
	// average (default 10 min); each try waits RetryEvery × (1 ± a draw of
	// up to RetryJitter) (default 0.5; below zero: exactly RetryEvery).
	RetryEvery  time.Duration
	RetryJitter float64
	// GiveUpAfter is when a Slack user stops trying (default 24 h).
	GiveUpAfter time.Duration
	// ForgetShare is the share of Slack users who do not say they are done,
	// so the GPUs stay taken for ForgetFor more (default 0.2; below zero:
	// nobody forgets). ForgetFor defaults to 12 h.
	ForgetShare float64
	ForgetFor   time.Duration
	// Seed makes the Slack users' choices (who forgets, when they retry);
	// the same seed gives the same figures.
	Seed uint64
	// Drain is how long after the window the replay goes on so work that
	// waits can start (default 24 h); what has not started by then never
	// started.
	Drain time.Duration
}

func (c Config) withDefaults() Config {
	if c.Lease.IsZero() {
		c.Lease = lease.DefaultPolicy()
	}
	c.Sched.PreemptGrace = c.Lease.PreemptGrace
	c.Sched = c.Sched.WithDefaults()
	if c.RetryEvery <= 0 {
		c.RetryEvery = 10 * time.Minute
	}
	if c.RetryJitter == 0 {
		c.RetryJitter = 0.5
	}
	if c.GiveUpAfter <= 0 {
		c.GiveUpAfter = 24 * time.Hour
	}
	if c.ForgetShare == 0 {
		c.ForgetShare = 0.2
	}
	if c.ForgetFor <= 0 {
		c.ForgetFor = 12 * time.Hour
	}
	if c.Drain <= 0 {
		c.Drain = 24 * time.Hour
	}
	return c
}

// Step is one thing that happened in a replay, for a test that drives a
// live cluster through the same story.
type Step struct {
	At      time.Time             `json:"at"`
	Kind    string                `json:"kind"` // StepSubmit, StepStart or StepEnd
	Request string                `json:"request"`
	Ranks   []queue.RankPlacement `json:"ranks,omitempty"`
}

// Step kinds.
const (
	StepSubmit = "submit"
	StepStart  = "start"
	StepEnd    = "end"
)

// job is one request during a replay.
type job struct {
	r       Request
	entry   queue.QueueEntry
	queued  bool
	started bool
	ended   bool
	gaveUp  bool
	start   time.Time
	workEnd time.Time
	// endAt is when the GPUs come back as planned now; end is when they
	// did.
	endAt     time.Time
	end       time.Time
	ranks     []queue.RankPlacement
	leases    []*lease.Lease
	killed    bool
	reclaimed bool
	// reclaimWhy is the reclaim's reason (lease.PreemptIdle, PreemptOverdue).
	reclaimWhy string
	forgot     bool
	tries      int
	// arr is the array this job is a task of (nil: none).
	arr *arrayRun
}

type snode struct {
	name   string
	snap   nodeprobe.Snapshot
	leases []*lease.Lease
	token  uint64
	quiet  map[int]time.Time
}

type evKind int

const (
	evSubmit evKind = iota
	evWorkEnd
	evEnd
	evRetry
	evLook // an idle lease may now be reclaimed: look again
)

type event struct {
	at   time.Time
	seq  uint64
	kind evKind
	j    *job
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(a, b int) bool {
	if c := e[a].at.Compare(e[b].at); c != 0 {
		return c < 0
	}
	return e[a].seq < e[b].seq
}
func (e events) Swap(a, b int) { e[a], e[b] = e[b], e[a] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	p       Policy
	cfg     Config
	sched   queue.SchedConfig
	now     time.Time
	horizon time.Time
	nodes   []*snode
	byName  map[string]*snode
	jobs    []*job
	byLease map[string]*job
	waiting []*job
	active  int
	ledger  []lease.LedgerEntry
	ev      events
	seq     uint64
	steps   []Step
	queueN  map[string]uint64
}

// Run replays the trace under one policy.
func Run(t Trace, p Policy, cfg Config) (Result, error) {
	if err := t.Check(); err != nil {
		return Result{}, err
	}
	if _, err := ParsePolicy(string(p)); err != nil {
		return Result{}, err
	}
	cfg = cfg.withDefaults()
	s := &sim{p: p, cfg: cfg, sched: cfg.Sched, byName: map[string]*snode{}, byLease: map[string]*job{}, queueN: map[string]uint64{}}
	if p == PolicySLURM {
		// Nothing is taken back before its limit; nobody borrows.
		s.sched.IdleReclaimAfter = words.MaxDuration
		s.sched.Quotas, s.sched.GroupQuotas = nil, nil
	}
	start, end := t.window()
	s.horizon = end.Add(cfg.Drain)
	for _, n := range t.Nodes {
		snap, err := n.snapshot(start)
		if err != nil {
			return Result{}, err
		}
		sn := &snode{name: n.Name, snap: snap, quiet: map[int]time.Time{}}
		for _, g := range snap.GPUs {
			sn.quiet[g.Index] = start
		}
		s.nodes = append(s.nodes, sn)
		s.byName[n.Name] = sn
	}
	slices.SortFunc(s.nodes, func(a, b *snode) int { return cmp.Compare(a.name, b.name) })
	first := t.Nodes[0].Name
	for _, r := range t.sortedRequests() {
		if r.Array != "" {
			s.addArray(r.normalized(cfg.Lease, first))
			continue
		}
		j := &job{r: r.normalized(cfg.Lease, first)}
		j.forgot = p == PolicySlack && s.roll(j.r.ID, 0) < cfg.ForgetShare
		s.jobs = append(s.jobs, j)
		s.push(j.r.At, evSubmit, j)
	}
	s.loop()
	return s.result(t, start, end), nil
}

func (s *sim) push(at time.Time, k evKind, j *job) {
	s.seq++
	heap.Push(&s.ev, event{at: at, seq: s.seq, kind: k, j: j})
}

// roll is a deterministic draw in [0,1) for one request and one purpose.
func (s *sim) roll(id string, n int) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return rand.New(rand.NewPCG(s.cfg.Seed, h.Sum64()+uint64(n)*0x9e3779b97f4a7c15)).Float64()
}

func (s *sim) loop() {
	for s.ev.Len() > 0 {
		at := s.ev[0].at
		if at.After(s.horizon) {
			break
		}
		s.now = at
		dirty := false
		for s.ev.Len() > 0 && s.ev[0].at.Equal(at) {
			e := heap.Pop(&s.ev).(event)
			if s.handle(e) {
				dirty = true
			}
		}
		if dirty && s.p != PolicySlack && len(s.waiting) > 0 {
			s.pass()
		}
	}
	s.now = s.horizon
}

// handle applies one event and reports whether the scheduler should look.
func (s *sim) handle(e event) bool {
	j := e.j
	switch e.kind {
	case evSubmit:
		s.step(StepSubmit, j)
		switch {
		case s.p == PolicySlack:
			s.try(j)
		case s.p == PolicyDibs && j.r.Via == ViaClaim && s.claim(j):
		default:
			s.enqueue(j)
		}
		return true
	case evRetry:
		if !j.started && !j.gaveUp {
			s.try(j)
		}
	case evWorkEnd:
		if j.started && !j.ended {
			for _, l := range j.leases {
				for _, g := range l.GPUs {
					s.byName[l.Node].quiet[g] = s.now
				}
			}
			if s.p == PolicyDibs && j.endAt.After(s.now.Add(s.sched.IdleReclaimAfter)) {
				s.push(s.now.Add(s.sched.IdleReclaimAfter), evLook, j)
			}
		}
	case evLook:
		return !j.ended
	case evEnd:
		if j.started && !j.ended && j.endAt.Equal(s.now) {
			s.finish(j)
			return true
		}
	}
	return false
}

func (s *sim) step(kind string, j *job) {
	st := Step{At: s.now, Kind: kind, Request: j.r.ID}
	if kind == StepStart {
		st.Ranks = j.ranks
	}
	s.steps = append(s.steps, st)
}

// entry is the queue entry of a request, as `dibs run --queue` would
// submit it at its origin.
func (s *sim) entryOf(j *job) queue.QueueEntry {
	if j.entry.ID != "" {
		return j.entry
	}
	s.queueN[j.r.From]++
	e := queue.QueueEntry{
		ID: queue.QueueID(j.r.From, s.queueN[j.r.From]), Origin: j.r.From, User: j.r.User, SubmittedAt: j.r.At,
		Nodes: j.r.Nodes, GPUsPerNode: j.r.GPUs, Duration: j.r.Limit, Kind: j.r.Kind, Model: j.r.Model,
	}
	if j.r.Kind == lease.KindBatch || j.r.Nodes > 1 {
		e.Job = &jobpkg.Job{Command: []string{"work"}}
	}
	j.entry = e
	return e
}

func (s *sim) enqueue(j *job) {
	e := s.entryOf(j)
	if err := queue.CheckFeasible(e, s.schedNodes(), e.Model, s.sched.Pools); err != nil {
		j.gaveUp = true // refused at submission: it never runs
		s.taskOver(j)
		return
	}
	j.queued = true
	s.waiting = append(s.waiting, j)
}

// claim is a direct claim: the node lease.ChooseNode picks, the GPUs
// lease.Place picks there, or false when it does not fit now.
func (s *sim) claim(j *job) bool {
	var cands []lease.Candidate
	for _, n := range s.nodes {
		cands = append(cands, lease.Candidate{Node: n.name, Snap: n.snap, Leases: n.values(), Local: n.name == j.r.From})
	}
	if j.r.Model != "" {
		return false // a claim cannot name a model; it queues
	}
	name, err := lease.ChooseNode(cands, j.r.GPUs)
	if err != nil {
		return false
	}
	n := s.byName[name]
	gpus := lease.Place(n.snap, lease.FreeGPUs(n.snap, n.values()), j.r.GPUs)
	if len(gpus) != j.r.GPUs {
		return false
	}
	s.begin(j, []queue.RankPlacement{{Node: name, GPUs: gpus}})
	return true
}

// try is a Slack user looking at nvidia-smi: the first placement that fits
// now, or another look later.
func (s *sim) try(j *job) {
	e := s.entryOf(j)
	if j.tries == 0 {
		if err := queue.CheckFeasible(e, s.schedNodes(), e.Model, s.sched.Pools); err != nil {
			j.gaveUp = true
			s.taskOver(j)
			return
		}
	}
	j.tries++
	cfg := s.sched
	cfg.IdleReclaimAfter = words.MaxDuration
	plan := queue.Schedule([]queue.QueueEntry{e}, s.schedNodes(), nil, s.now, cfg)
	if len(plan.Start) == 1 {
		s.begin(j, plan.Start[0].Ranks)
		return
	}
	wait := s.cfg.RetryEvery
	if s.cfg.RetryJitter > 0 {
		wait = time.Duration(float64(wait) * (1 + s.cfg.RetryJitter*(2*s.roll(j.r.ID, j.tries)-1)))
	}
	if next := s.now.Add(wait); next.Sub(j.r.At) <= s.cfg.GiveUpAfter {
		s.push(next, evRetry, j)
		return
	}
	j.gaveUp = true
	s.taskOver(j)
}

// pass is one scheduling pass over the queue.
func (s *sim) pass() {
	nodes := s.schedNodes()
	entries := make([]queue.QueueEntry, len(s.waiting))
	for i, j := range s.waiting {
		entries[i] = j.entry
	}
	usage := queue.DecayedUsage(s.ledger, s.activeLeases(), s.now, s.sched.HalfLife)
	plan := queue.Schedule(entries, nodes, usage, s.now, s.sched)
	started := map[string]bool{}
	for _, st := range plan.Start {
		for _, j := range s.waiting {
			if j.entry.ID == st.Entry.ID {
				s.begin(j, st.Ranks)
				started[j.entry.ID] = true
			}
		}
	}
	if len(started) > 0 {
		s.waiting = slices.DeleteFunc(s.waiting, func(j *job) bool { return started[j.entry.ID] })
	}
	if s.p != PolicyDibs {
		return
	}
	for _, rc := range plan.Reclaim {
		j := s.byLease[rc.Lease.ID]
		if j == nil || j.ended {
			continue
		}
		for _, l := range j.leases {
			if l.ID == rc.Lease.ID && l.PreemptedAt.IsZero() {
				l.PreemptedAt, l.PreemptReason = s.now, rc.Reason
			}
		}
		if end := s.now.Add(s.cfg.Lease.PreemptGrace); end.Before(j.endAt) {
			j.reclaimed, j.reclaimWhy = true, rc.Reason
			j.endAt = end
			s.push(end, evEnd, j)
		}
	}
}

// begin starts a job on its placement.
func (s *sim) begin(j *job, ranks []queue.RankPlacement) {
	j.started, j.start, j.ranks = true, s.now, ranks
	j.workEnd = s.now.Add(j.r.Work)
	gang := ""
	if j.r.Nodes > 1 {
		gang = queue.GangID(j.entry)
	}
	for rank, rp := range ranks {
		n := s.byName[rp.Node]
		n.token++
		l := &lease.Lease{
			ID: lease.LeaseID(n.name, n.token), Node: n.name, GPUs: slices.Clone(rp.GPUs), User: j.r.User, Token: n.token,
			Kind: j.r.Kind, StartedAt: s.now, ExpiresAt: s.now.Add(j.r.Limit), Gang: gang, Rank: rank,
		}
		if j.queued {
			l.Entry, l.QueuedAt = j.entry.Key(), j.r.At
		}
		n.leases = append(n.leases, l)
		for _, g := range rp.GPUs {
			delete(n.quiet, g)
		}
		j.leases = append(j.leases, l)
		s.byLease[l.ID] = j
	}
	s.active++
	// When the GPUs come back: with the command (batch), when the person
	// lets go (interactive), at the time limit where it is enforced.
	end := s.now.Add(j.r.Hold)
	if j.forgot {
		end = end.Add(s.cfg.ForgetFor)
	}
	switch {
	case s.p == PolicySLURM:
		end = minTime(end, s.now.Add(j.r.Limit))
	case s.p == PolicyDibs && s.cfg.Lease.EndAction == lease.ActionEnd:
		end = minTime(end, s.now.Add(j.r.Limit))
	case s.p == PolicyDibs && s.cfg.Lease.EndAction == lease.ActionSignal:
		end = minTime(end, s.now.Add(j.r.Limit+s.cfg.Lease.SignalGrace))
	}
	j.endAt = end
	s.step(StepStart, j)
	if j.workEnd.Before(end) {
		s.push(j.workEnd, evWorkEnd, j)
	}
	s.push(end, evEnd, j)
}

// finish gives a job's GPUs back and writes its ledger entries.
func (s *sim) finish(j *job) {
	j.ended, j.end = true, s.now
	j.killed = s.now.Before(j.workEnd)
	reason := lease.EndReleased
	switch {
	case j.reclaimed:
		reason = lease.PreemptedReason(j.reclaimWhy)
	case j.killed:
		reason = lease.EndExpired
	case j.r.Kind == lease.KindBatch:
		reason = lease.ExitReason(0)
	}
	for _, l := range j.leases {
		n := s.byName[l.Node]
		n.leases = slices.DeleteFunc(n.leases, func(x *lease.Lease) bool { return x == l })
		for _, g := range l.GPUs {
			n.quiet[g] = s.now
		}
		s.ledger = append(s.ledger, lease.Ended(*l, s.now, string(reason), ""))
		delete(s.byLease, l.ID)
	}
	s.active--
	s.step(StepEnd, j)
	s.taskOver(j)
}

func (n *snode) values() []lease.Lease {
	out := make([]lease.Lease, len(n.leases))
	for i, l := range n.leases {
		out[i] = *l
	}
	return out
}

func (s *sim) schedNodes() []lease.SchedNode {
	out := make([]lease.SchedNode, len(s.nodes))
	for i, n := range s.nodes {
		out[i] = lease.SchedNode{Name: n.name, Alive: true, Snap: n.snap, Leases: n.values(), Idle: lease.IdleTrackerFrom(n.quiet)}
	}
	return out
}

func (s *sim) activeLeases() []lease.Lease {
	var out []lease.Lease
	for _, n := range s.nodes {
		out = append(out, n.values()...)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
