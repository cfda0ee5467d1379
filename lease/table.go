package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// Table is one node's lease table: the leases this agent alone grants, renews
// and ends (single writer per GPU), and the fencing-token counter. Plan methods
// never mutate; the agent persists what they return and then calls Put or
// Remove, so memory never runs ahead of disk. A Table is not safe for
// concurrent use; the agent serialises access.
type Table struct {
	node      string
	leases    map[string]*entry
	lastToken uint64
}

type entry struct {
	Lease
	// mono holds the lease's limits on the monotonic clock, so a
	// wall-clock jump forward cannot end it (or its graces) early.
	mono MonoLimits
}

// NewTable rebuilds a node's table from what the store loaded. A lease
// written under the same boot keeps its monotonic limits; the others' are
// measured from now's wall clock.
func NewTable(node string, leases []Lease, lastToken uint64, now Instant) *Table {
	t := &Table{node: node, leases: make(map[string]*entry, len(leases)), lastToken: lastToken}
	for _, l := range leases {
		t.put(l, now)
	}
	return t
}

// Node is the name of the node this table belongs to.
func (t *Table) Node() string { return t.node }

// LastToken is the highest fencing token ever granted on this node.
func (t *Table) LastToken() uint64 { return t.lastToken }

// Get returns the lease with id.
func (t *Table) Get(id string) (Lease, bool) {
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, false
	}
	l := e.Lease
	l.Mono = nil
	return l, true
}

// List returns every lease, ordered by token (grant order). Bookings are
// not leases yet: Bookings lists them.
func (t *Table) List() []Lease {
	out := make([]Lease, 0, len(t.leases))
	for _, e := range t.leases {
		if e.Booked {
			continue
		}
		l := e.Lease
		l.Mono = nil
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

// Len is the number of live leases.
func (t *Table) Len() int { return len(t.leases) }

// Stamp returns l with its monotonic limits as the table will keep them
// once l is Put at now, for the store to persist with it.
func (t *Table) Stamp(l Lease, now Instant) Lease {
	m := t.limits(&l, now)
	l.Mono = &m
	return l
}

func (t *Table) limits(l *Lease, now Instant) MonoLimits {
	if old, ok := t.leases[l.ID]; ok {
		return moved(old.mono, &old.Lease, l, now)
	}
	if l.Mono != nil && l.Mono.Boot != "" && l.Mono.Boot == now.Boot {
		return *l.Mono
	}
	return limitsAt(l, now)
}

// Put records a lease the store has made durable.
func (t *Table) Put(l Lease, now Instant) { t.put(l, now) }

func (t *Table) put(l Lease, now Instant) {
	m := t.limits(&l, now)
	l.Mono = &m
	if old, ok := t.leases[l.ID]; ok {
		old.Lease, old.mono = l, m
		return
	}
	t.leases[l.ID] = &entry{Lease: l, mono: m}
	if l.Token > t.lastToken {
		t.lastToken = l.Token
	}
}

// Remove forgets a lease the store has deleted.
func (t *Table) Remove(id string) { delete(t.leases, id) }

// Current reports whether token is the live token of lease id. The agent
// checks it before starting or signalling a session, so a stale actor (an old
// request, a restarted watcher) cannot touch a lease that has moved on.
func (t *Table) Current(id string, token uint64) bool {
	e, ok := t.leases[id]
	return ok && e.Token == token
}

// PlanClaim decides a claim without changing the table: the lease to persist,
// or a refusal that says why and what to do. The claim's text (its note)
// was checked where it was made (Claim.Validate: at the edge, and again by
// agent/peer on what arrives), so it is not checked twice here.
func (t *Table) PlanClaim(c Caller, req Claim, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	l, err := t.planClaim(c, req, snap, now, p)
	if err != nil {
		return Lease{}, err
	}
	if err := t.planCPUs(&l, req, snap); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// planClaim is PlanClaim's GPUs and time: the lease before its cores.
func (t *Table) planClaim(c Caller, req Claim, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	var dur time.Duration
	var err error
	if req.Kind, dur, err = req.Limit(p); err != nil {
		return Lease{}, err
	}
	if req.Service != nil && req.Count == 0 && len(req.GPUs) == 0 && req.MIG == "" && req.MemMiB == 0 {
		// A service without a GPU (-g 0: TensorBoard, a dashboard).
		return t.newLease(c, req, nil, now, dur), nil
	}
	if len(snap.GPUs) == 0 {
		return Lease{}, refusal.Errorf(refusal.CodeUnavailable, "node %s has no GPUs the probe can see", t.node)
	}
	if dur, err = t.checkWhere(c, req, snap, dur, p); err != nil {
		return Lease{}, err
	}
	if req.MIG != "" || req.MemMiB > 0 {
		return t.planPart(c, req, snap, now, dur)
	}
	uses := t.uses()
	var gpus []int
	if err := countDisagrees(req.Count, req.GPUs); err != nil {
		return Lease{}, err
	}
	switch {
	case len(req.GPUs) > 0:
		gpus, err = checkNamed(c, req, snap, uses, now, t.node)
	case req.Count > 0:
		gpus, err = t.pickFree(c, req, snap, uses, now, dur)
	default:
		return Lease{}, refusal.Invalidf("say how many GPUs (-g N) or which (--ids 0,2)")
	}
	if err == nil {
		dur, err = t.fitBookings(gpus, now, dur, req.Duration > 0)
	}
	if err != nil {
		return Lease{}, err
	}
	return t.newLease(c, req, gpus, now, dur), nil
}

// newLease is the lease a plan grants: the next token, from now for dur.
func (t *Table) newLease(c Caller, req Claim, gpus []int, now time.Time, dur time.Duration) Lease {
	token := t.lastToken + 1
	var svc *service.Service
	if req.Service != nil {
		svc = &service.Service{Spec: *req.Service, Status: service.Status{State: service.Starting, Since: now.Round(0)}}
	}
	return Lease{
		Service:   svc,
		ID:        LeaseID(t.node, token),
		Node:      t.node,
		GPUs:      gpus,
		User:      c.User,
		UID:       c.UID,
		Token:     token,
		Kind:      req.Kind,
		Note:      req.Note,
		StartedAt: now.Round(0),
		ExpiresAt: now.Round(0).Add(dur),
		QueuedAt:  req.QueuedAt.Round(0),
	}
}

// PlanRelease checks that c may end lease id.
func (t *Table) PlanRelease(c Caller, id string) (Lease, error) {
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, refusal.Errorf(refusal.CodeNotFound, "no lease %s on %s: `dibs ls` shows the live ones", id, t.node)
	}
	if e.UID != c.UID && !c.Admin {
		return Lease{}, refusal.Errorf(refusal.CodeForbidden, "lease %s belongs to %s; only they (or an admin) can end it", id, e.User)
	}
	return e.Lease, nil
}

// PlanExtend moves a lease's end by d, refusing to go past the kind's maximum
// measured from now.
func (t *Table) PlanExtend(c Caller, id string, d time.Duration, at Instant, p Policy) (Lease, error) {
	now := at.Wall
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, refusal.Errorf(refusal.CodeNotFound, "no lease %s on %s: `dibs ls` shows the live ones", id, t.node)
	}
	if e.UID != c.UID {
		return Lease{}, refusal.Errorf(refusal.CodeForbidden, "lease %s belongs to %s; only they can extend it", id, e.User)
	}
	if e.Booked {
		return Lease{}, refusal.Invalidf("%s is a booking, which cannot be extended: unbook it and book again", id)
	}
	if e.IsService() {
		return Lease{}, refusal.Invalidf("%s is service %s's, which has no time limit: it runs until dibs stop %s", id, e.Service.Name, e.Service.Name)
	}
	if d <= 0 {
		return Lease{}, refusal.Invalidf("extend by a positive duration, like --for 2h")
	}
	_, max := p.Limits(e.Kind)
	// An overdue lease is extended from now; one still running from its end.
	// Overdue is judged as Due judges it, so a wall clock that jumped forward
	// does not make a running lease look overdue and lose its time left.
	base := e.ExpiresAt
	if e.ended(at) {
		base = now.Round(0)
	}
	end := base.Add(d)
	if end.Sub(now) > max {
		room := max - base.Sub(now)
		if room < time.Minute {
			return Lease{}, refusal.Invalidf("lease %s already ends %s from now, the %s maximum", id, words.FormatDuration(e.ExpiresAt.Sub(now)), e.Kind)
		}
		return Lease{}, refusal.Invalidf("extending %s by %s would end it %s from now, over the %s maximum of %s: extend by at most %s", id, words.FormatDuration(d), words.FormatDuration(end.Sub(now)), e.Kind, words.FormatDuration(max), words.FormatDuration(room.Truncate(time.Minute)))
	}
	if b := t.firstBooking(e.GPUs, now, end, id); b != nil {
		room := b.StartedAt.Sub(base).Truncate(time.Minute)
		if room < time.Minute {
			return Lease{}, refusal.Errorf(refusal.CodeConflict, "lease %s cannot run longer: %s", id, describeBooking(b, now))
		}
		return Lease{}, refusal.Errorf(refusal.CodeConflict, "extending %s by %s would run into a booking: %s: extend by at most %s", id, words.FormatDuration(d), describeBooking(b, now), words.FormatDuration(room))
	}
	l := e.Lease
	l.GPUs = slices.Clone(l.GPUs)
	l.ExpiresAt = end
	l.Warned = false
	l.FinalWarned = false
	l.OverdueNoticed = false
	l.SignalledAt = time.Time{}
	return l, nil
}
