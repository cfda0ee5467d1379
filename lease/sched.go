package lease

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Why a lease is reclaimed (Reclaim.Reason, Lease.PreemptReason).
const (
	// PreemptQuota: the lease is borrowed and someone within their quota
	// waits for its GPUs.
	PreemptQuota = "quota"
	// PreemptIdle: the lease has been idle past SchedConfig.IdleReclaimAfter
	// and someone waits for its GPUs.
	PreemptIdle = "idle"
	// PreemptGang: another rank of its gang failed or was lost, so this
	// rank is stopped too (all or nothing).
	PreemptGang = "gang"
)

// WaitingStarting is Ranked.Waiting for an entry whose start is under way
// (its leases or reservations exist, the origin has not marked it running
// yet): it does not wait for anything.
const WaitingStarting = "starting"

// Ranked is one waiting entry as `dibs queue` shows it.
type Ranked struct {
	Entry    QueueEntry `json:"entry"`
	Priority float64    `json:"priority"`
	// Position is 1-based, in the order the scheduler considers entries.
	Position int `json:"position"`
	// EstStart is when the entry is expected to start: now when it starts in
	// this pass, zero when it cannot be told (its GPUs are held outside
	// dibs, or it cannot run on the nodes that are up).
	EstStart time.Time `json:"est_start,omitzero"`
	// Waiting says in one line why it waits; empty when it starts now.
	Waiting string `json:"waiting,omitempty"`
}

// RankPlacement is where one rank of a start runs.
type RankPlacement struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
}

// Start is an entry the scheduler starts in this pass: every rank at once, or
// (for a gang) reservations on every rank's node that the agent commits
// together.
type Start struct {
	Entry QueueEntry `json:"entry"`
	// Ranks has one placement per node, rank 0 (MASTER_ADDR) first.
	Ranks []RankPlacement `json:"ranks"`
	// Borrowed: the start takes its user (or group) beyond quota; its leases
	// are marked so and may be preempted for someone within quota.
	Borrowed bool `json:"borrowed,omitempty"`
	// Backfill: it starts ahead of a higher-priority entry that waits, on
	// GPUs that entry does not need, or only until it could start.
	Backfill bool `json:"backfill,omitempty"`
}

// Reclaim asks the agent to end a lease cooperatively for a waiting entry:
// tell the holder, wait the preempt grace, end it.
type Reclaim struct {
	Lease  Lease  `json:"lease"`
	Reason string `json:"reason"` // PreemptQuota or PreemptIdle
	For    string `json:"for"`    // the entry id it is reclaimed for
}

// Plan is what one scheduling pass decides.
type Plan struct {
	// Order is every entry that is not Running, in the order the scheduler
	// considered them.
	Order   []Ranked  `json:"order"`
	Start   []Start   `json:"start,omitempty"`
	Reclaim []Reclaim `json:"reclaim,omitempty"`
}

// CheckFeasible refuses, at submission, a request no node set of the cluster
// could ever serve, naming the limit, so it is not queued forever: more GPUs
// per node than any node has, more nodes than the cluster has, a model no
// node has, a pinned node that does not exist or is too small. Nodes that
// are down count (they may come back); GPUs count whatever their state.
// model is matched as a case-insensitive substring of the GPUs' model, ""
// meaning any; callers pass e.Model, which Schedule matches the same way.
func CheckFeasible(e QueueEntry, nodes []SchedNode, model string) error {
	switch {
	case e.GPUsPerNode < 1:
		return Invalidf("say how many GPUs (-g N)")
	case e.Nodes < 1:
		return Invalidf("ask for at least one node")
	case e.Nodes > 1 && e.Node != "":
		return Invalidf("a request for %d nodes cannot be pinned to %s: drop the node, or ask for one node", e.Nodes, e.Node)
	case len(nodes) == 0:
		return errorf(CodeUnavailable, "no node is known yet: `dibs ls` shows the cluster")
	}
	want := strings.ToLower(model)
	of := ""
	if model != "" {
		of = fmt.Sprintf(" matching %q", model)
	}
	var models []string
	largest, big := 0, 0
	pinned := -1
	for i := range nodes {
		n := 0
		for _, g := range nodes[i].Snap.GPUs {
			if want == "" || strings.Contains(strings.ToLower(g.Model), want) {
				n++
			}
			if m := termsafe.String(g.Model); m != "" && !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
		largest = max(largest, n)
		if n >= e.GPUsPerNode {
			big++
		}
		if nodes[i].Name == e.Node {
			pinned = n
		}
	}
	if want != "" && largest == 0 {
		slices.Sort(models)
		return Invalidf("no node has a GPU%s (the cluster has %s): ask for one of those, or leave the model out", of, strings.Join(models, ", "))
	}
	if e.Node != "" {
		if pinned < 0 {
			return Invalidf("no node named %q in the cluster: `dibs ls` shows the nodes", e.Node)
		}
		if pinned < e.GPUsPerNode {
			return Invalidf("%s has only %s%s; asked for %d: ask for at most %d, or for another node", e.Node, gpuCount(pinned), of, e.GPUsPerNode, pinned)
		}
		return nil
	}
	if e.GPUsPerNode > largest {
		return Invalidf("no node has %s%s (the largest has %d): ask for fewer, or for several nodes", gpuCount(e.GPUsPerNode), of, largest)
	}
	if e.Nodes > big {
		if big == len(nodes) {
			return Invalidf("the cluster has %d nodes; asked for %d: ask for at most %d", len(nodes), e.Nodes, big)
		}
		return Invalidf("only %d of the %d nodes have %s%s; asked for %d nodes × %d: ask for fewer nodes, or fewer GPUs per node", big, len(nodes), gpuCount(e.GPUsPerNode), of, e.Nodes, e.GPUsPerNode)
	}
	return nil
}

// Schedule runs one pass of the queue: it ranks every entry, starts what fits
// now, and asks for leases to be reclaimed for the first entry that waits.
// It is pure and deterministic: the same inputs, in any order, give the same
// plan, so any agent can compute `dibs queue` and agree with the scheduler.
//
// Order. Entries whose start would keep their user (and group) within quota
// come before entries that would borrow (Kueue's rule, so a borrower never
// takes GPUs that a within-quota request is waiting to reclaim); within each
// part, by Priority descending, then SubmittedAt, then ID. With no quotas
// configured this is plain priority order.
//
// Free GPUs. A GPU is free when its node is alive, it has no error, no
// process and no lease; a gang reservation holds its GPUs until ReservedUntil,
// a lease past its end holds them until the agent ends it. A node may offer
// at most its 64 lowest-numbered GPUs.
//
// Starts. Entries are walked in order. A single-node entry lands where
// ChooseNode would put it (fewest free GPUs left over, closest GPUs, its
// origin node, the name), honouring its Node pin and Model. A gang needs
// Nodes distinct nodes with GPUsPerNode free GPUs each, packing (fewest left
// over, then name); rank 0 is the chosen node with the lowest name. A start
// is emitted only when every rank fits at once in this pass, so two gangs
// competing for the same nodes never each hold part: one starts, the other
// waits whole. Running entries are not in the queue at all; an entry whose
// attempt already has leases or live reservations (Lease.Entry == Key()) is
// starting and is left alone; a reservation that is never committed expires
// by itself and its entry is planned again.
//
// Backfill (EASY). The first entry that cannot start — the head — gets the
// GPUs it would start on at its shadow time (the earliest time enough GPUs
// come free, from lease ends, planned starts and reclaims) protected: a
// later entry may start now on a protected GPU only if its Duration ends by
// that shadow time; on unprotected free GPUs it may start at once. Later
// waiting entries are not protected. An entry that cannot run on the nodes
// that are up (too few alive nodes, a down pinned node) waits without
// blocking anyone; so does a head whose shadow time is unknown (GPUs held
// outside dibs).
//
// Reclaim, for the head only, only when the head could then start now
// (counting leases already being preempted first, so passes do not pile up
// reclaims), and only when its GPUs would not come free within PreemptGrace
// anyway (a lease past its end does not count: it may linger): leases of other users idle for at least IdleReclaimAfter
// (reason idle, longest idle first), then, when the head's user is within
// quota, borrowed leases of other users (reason quota, most recently started
// first). The chosen set is irreducible: no lease in it could be spared. A
// gang is reclaimed whole. A waiting user's own idle leases are never
// reclaimed for them: they can end those themselves.
//
// EstStart. List scheduling on each GPU's expected free time: lease ends
// (a lease past its end or already preempted is expected to go within a
// minute or its grace), the ends of starts planned in this pass, and the
// estimated runs of the waiting entries ahead; holes are not backfilled in
// the estimate. An entry with no Duration is taken to hold its GPUs for good:
// it never backfills onto protected GPUs, and what waits for its GPUs has no
// estimate.
func Schedule(entries []QueueEntry, nodes []SchedNode, usage Usage, now time.Time, cfg SchedConfig) Plan {
	cfg = cfg.WithDefaults()
	s := newScheduler(nodes, now, cfg)
	order := s.rank(entries, usage)
	plan := Plan{Order: make([]Ranked, len(order))}
	for i, k := range order {
		e := &entries[k.idx]
		r := &plan.Order[i]
		r.Entry, r.Priority, r.Position = *e, k.prio, i+1
		s.visit(e, r, &plan)
	}
	return plan
}

// never is the expected free time of a GPU nobody can say will come free.
const never = int64(math.MaxInt64)

// overdueSlack is how soon a lease past its end (end action warn) is
// expected to go: any moment, so its GPUs are estimated free shortly.
const overdueSlack = time.Minute

// maxNodeGPUs bounds the GPUs the scheduler considers on one node, so a
// node's GPUs fit in a bit set.
const maxNodeGPUs = 64

// sgpu is one GPU of an alive node during a pass.
type sgpu struct {
	index int
	// freeAt is when it is expected free, in nanoseconds from now: 0 when
	// free now, never when unknown.
	freeAt int64
	// late: freeAt is a guess for a lease past its end (or past its
	// preemption grace), which may in fact linger.
	late bool
}

// snode is one node during a pass. GPU bit i is gpus[i]; gpus are sorted by
// index.
type snode struct {
	name  string
	snap  *nodeprobe.Snapshot
	idle  *IdleTracker
	alive bool
	gpus  []sgpu
	// usable: no error (on an alive node); avail: free now and not taken
	// by a start of this pass; protect: free GPUs kept for the head.
	usable, avail, protect uint64
	// leases are the node's live leases (expired reservations dropped).
	leases []*Lease
	// topo names the node's topology: nodes with the same topo place alike.
	topo int
}

type placeKey struct {
	topo int
	mask uint64
	n    int
}

type placeResult struct {
	gpus   []int
	mask   uint64
	spread int
}

type rankKey struct {
	idx    int
	prio   float64
	borrow bool
}

// pick is a tentative placement on one node: the GPUs (as a bit set), and
// for estimates when they are all free and how many are free now.
type pick struct {
	node    int
	mask    uint64
	left    int
	at      int64
	nowFree int
	place   *placeResult
}

type scheduler struct {
	now        time.Time
	cfg        SchedConfig
	nodes      []snode
	byName     map[string]int
	totalAvail int
	quotas     bool
	userUsed   map[string]int
	groupUsed  map[string]int
	starting   map[string]bool
	places     map[placeKey]*placeResult
	models     map[string][]uint64

	// The head: the first entry that waits, with its shadow time.
	head   *QueueEntry
	headAt int64

	picks []pick // scratch
}

func newScheduler(nodes []SchedNode, now time.Time, cfg SchedConfig) *scheduler {
	s := &scheduler{
		now:       now,
		cfg:       cfg,
		nodes:     make([]snode, len(nodes)),
		byName:    make(map[string]int, len(nodes)),
		quotas:    len(cfg.Quotas) > 0 || len(cfg.GroupQuotas) > 0,
		userUsed:  make(map[string]int),
		groupUsed: make(map[string]int),
		starting:  make(map[string]bool),
		places:    make(map[placeKey]*placeResult),
	}
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(nodes[a].Name, nodes[b].Name) })
	topos := make(map[string]int)
	var sig []byte
	for i, k := range order {
		sig = s.addNode(&s.nodes[i], &nodes[k], topos, sig[:0])
		s.byName[nodes[k].Name] = i
	}
	return s
}

// addNode builds a node's pass state from its snapshot and leases.
func (s *scheduler) addNode(sn *snode, n *SchedNode, topos map[string]int, sig []byte) []byte {
	sn.name, sn.snap, sn.idle, sn.alive = n.Name, &n.Snap, n.Idle, n.Alive
	if !n.Alive {
		return sig
	}
	gs := n.Snap.GPUs
	pos := make([]int, 0, len(gs))
	for i := range gs {
		pos = append(pos, i)
	}
	slices.SortStableFunc(pos, func(a, b int) int { return cmp.Compare(gs[a].Index, gs[b].Index) })
	if len(pos) > maxNodeGPUs {
		pos = pos[:maxNodeGPUs]
	}
	sn.gpus = make([]sgpu, len(pos))
	for b, p := range pos {
		sn.gpus[b] = sgpu{index: gs[p].Index}
	}
	held := uint64(0)
	for li := range n.Leases {
		l := &n.Leases[li]
		if !l.ReservedUntil.IsZero() && !l.ReservedUntil.After(s.now) {
			continue // an uncommitted reservation that expired holds nothing
		}
		sn.leases = append(sn.leases, l)
		if l.Entry != "" {
			s.starting[l.Entry] = true
		}
		s.userUsed[l.User] += len(l.GPUs)
		if g := s.cfg.UserGroups[l.User]; g != "" {
			s.groupUsed[g] += len(l.GPUs)
		}
		end, late := s.leaseEnd(l)
		for _, idx := range l.GPUs {
			b := sn.bit(idx)
			if b < 0 {
				continue
			}
			g := &sn.gpus[b]
			if held&(1<<b) == 0 || end > g.freeAt {
				g.freeAt, g.late = end, late
			}
			held |= 1 << b
		}
	}
	for b, p := range pos {
		g, sg := &gs[p], &sn.gpus[b]
		switch {
		case g.Error != "":
			sg.freeAt = never
		case held&(1<<b) != 0:
			sn.usable |= 1 << b
		case len(g.Processes) > 0:
			// Used outside dibs: nobody can say when it comes free.
			sn.usable |= 1 << b
			sg.freeAt = never
		default:
			sn.usable |= 1 << b
			sn.avail |= 1 << b
		}
	}
	s.totalAvail += bits.OnesCount64(sn.avail)

	// The topology signature: indices and every pairwise distance, all that
	// Place and spread look at.
	for _, p := range pos {
		g := &gs[p]
		sig = append(sig, byte(g.Index), byte(g.Index>>8), byte(g.Index>>16))
		for _, q := range pos {
			sig = append(sig, byte(g.DistanceTo(gs[q].Index)+1))
		}
	}
	id, ok := topos[string(sig)]
	if !ok {
		id = len(topos)
		topos[string(sig)] = id
	}
	sn.topo = id
	return sig
}

// bit returns the bit of GPU index on the node, or -1.
func (sn *snode) bit(index int) int {
	b, ok := slices.BinarySearchFunc(sn.gpus, index, func(g sgpu, i int) int { return cmp.Compare(g.index, i) })
	if !ok {
		return -1
	}
	return b
}

// leaseEnd is when a lease is expected to give its GPUs back, from now, and
// whether that is a guess because its time is already up.
func (s *scheduler) leaseEnd(l *Lease) (int64, bool) {
	end := l.ExpiresAt
	if l.ReservedUntil.After(end) {
		end = l.ReservedUntil
	}
	if end.IsZero() {
		return never, false
	}
	if !l.PreemptedAt.IsZero() {
		if p := l.PreemptedAt.Add(s.cfg.PreemptGrace); p.Before(end) {
			end = p
		}
	}
	if !end.After(s.now) {
		return int64(overdueSlack), true
	}
	return int64(end.Sub(s.now)), false
}

// rank orders the entries (see Schedule).
func (s *scheduler) rank(entries []QueueEntry, usage Usage) []rankKey {
	fs := newFairShare(usage, s.cfg)
	factors := make(map[string]float64)
	keys := make([]rankKey, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Running {
			continue
		}
		f, ok := factors[e.User]
		if !ok {
			f = fs.factor(e.User)
			factors[e.User] = f
		}
		keys = append(keys, rankKey{idx: i, prio: priority(e, f, s.now, s.cfg), borrow: s.borrows(e.User, e.GPUs())})
	}
	slices.SortFunc(keys, func(a, b rankKey) int {
		ea, eb := &entries[a.idx], &entries[b.idx]
		switch {
		case a.borrow != b.borrow:
			if a.borrow {
				return 1
			}
			return -1
		case a.prio != b.prio:
			return cmp.Compare(b.prio, a.prio)
		}
		if c := ea.SubmittedAt.Compare(eb.SubmittedAt); c != 0 {
			return c
		}
		if c := cmp.Compare(ea.ID, eb.ID); c != 0 {
			return c
		}
		if c := cmp.Compare(ea.Attempt, eb.Attempt); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
	return keys
}

// borrows reports whether n more GPUs would take user beyond quota, given
// what this pass has counted so far.
func (s *scheduler) borrows(user string, n int) bool {
	return s.quotas && s.cfg.Borrows(user, n, s.userUsed[user], s.groupUsed[s.cfg.UserGroups[user]])
}

// visit decides one entry.
func (s *scheduler) visit(e *QueueEntry, r *Ranked, plan *Plan) {
	if s.starting[e.Key()] {
		r.EstStart, r.Waiting = s.now, WaitingStarting
		return
	}
	if why := s.unservable(e); why != "" {
		r.Waiting = why
		return
	}
	mm := s.modelMask(e.Model)
	if n := e.GPUs(); s.totalAvail >= n {
		picks, ok := s.place(e, mm, false)
		if !ok && s.head != nil && e.Duration > 0 && int64(e.Duration) <= s.headAt {
			picks, ok = s.place(e, mm, true)
		}
		if ok {
			plan.Start = append(plan.Start, s.commit(e, picks))
			r.EstStart = s.now
			return
		}
	}
	if s.head == nil {
		s.head = e
		// Reclaim only what could serve it sooner than GPUs whose leases
		// end within the grace anyway.
		if soon, _ := s.estimate(e, mm, true); soon > int64(s.cfg.PreemptGrace) {
			r.Waiting = s.reclaim(e, mm, plan)
		}
		at, picks := s.estimate(e, mm, false)
		if at == never {
			s.headAt = -1 // nothing to protect, nothing may use it
		} else {
			s.headAt = at
			for _, p := range picks {
				sn := &s.nodes[p.node]
				sn.protect |= p.mask & sn.avail
			}
		}
		s.book(e, at, picks)
		s.setEst(r, at)
		if r.Waiting == "" {
			r.Waiting = "next to start: " + s.needs(e, mm)
			if at == never {
				r.Waiting = "next to start, no estimate (its GPUs are held with no known end): " + s.needs(e, mm)
			}
		}
		return
	}
	at, picks := s.estimate(e, mm, false)
	s.book(e, at, picks)
	s.setEst(r, at)
	r.Waiting = "waiting behind higher-priority requests"
}

func (s *scheduler) setEst(r *Ranked, at int64) {
	if at != never {
		r.EstStart = s.now.Add(time.Duration(at))
	}
}

// unservable says why an entry cannot run on the nodes that are up, even
// with every GPU free; "" when it can.
func (s *scheduler) unservable(e *QueueEntry) string {
	switch {
	case e.Nodes < 1 || e.GPUsPerNode < 1:
		return "asks for no GPUs"
	case e.Nodes > 1 && e.Node != "":
		return "a multi-node request cannot be pinned to one node"
	case e.GPUsPerNode > maxNodeGPUs:
		return fmt.Sprintf("no node offers %s", gpuCount(e.GPUsPerNode))
	}
	if e.Node != "" {
		i, ok := s.byName[e.Node]
		if !ok {
			return fmt.Sprintf("node %s is not in the cluster", e.Node)
		}
		if !s.nodes[i].alive {
			return fmt.Sprintf("node %s is down", e.Node)
		}
	}
	mm := s.modelMask(e.Model)
	fit := 0
	for i := range s.nodes {
		if bits.OnesCount64(s.eligible(i, e, mm)) >= e.GPUsPerNode {
			fit++
		}
	}
	if fit >= e.Nodes {
		return ""
	}
	of := ""
	if e.Model != "" {
		of = fmt.Sprintf(" matching %q", e.Model)
	}
	if e.Nodes == 1 {
		if e.Node != "" {
			return fmt.Sprintf("%s has fewer than %d working %s%s", e.Node, e.GPUsPerNode, gpuWord(e.GPUsPerNode), of)
		}
		return fmt.Sprintf("no node that is up has %d working %s%s", e.GPUsPerNode, gpuWord(e.GPUsPerNode), of)
	}
	return fmt.Sprintf("needs %d nodes with %d working %s%s; %d are up", e.Nodes, e.GPUsPerNode, gpuWord(e.GPUsPerNode), of, fit)
}

// needs describes what the entry waits for, with what is free now.
func (s *scheduler) needs(e *QueueEntry, mm []uint64) string {
	if e.Nodes == 1 {
		most := 0
		for i := range s.nodes {
			most = max(most, bits.OnesCount64(s.nodes[i].avail&s.eligible(i, e, mm)))
		}
		return fmt.Sprintf("%s on one node, at most %d free together", gpuCount(e.GPUsPerNode), most)
	}
	have := 0
	for i := range s.nodes {
		if bits.OnesCount64(s.nodes[i].avail&s.eligible(i, e, mm)) >= e.GPUsPerNode {
			have++
		}
	}
	return fmt.Sprintf("%d nodes with %d free %s each, %d have them", e.Nodes, e.GPUsPerNode, gpuWord(e.GPUsPerNode), have)
}

// modelMask returns, per node, the GPUs matching model; nil for any model.
func (s *scheduler) modelMask(model string) []uint64 {
	if model == "" {
		return nil
	}
	if m, ok := s.models[model]; ok {
		return m
	}
	want := strings.ToLower(model)
	m := make([]uint64, len(s.nodes))
	for i := range s.nodes {
		sn := &s.nodes[i]
		for b := range sn.gpus {
			p := slices.IndexFunc(sn.snap.GPUs, func(g nodeprobe.GPU) bool { return g.Index == sn.gpus[b].index })
			if p >= 0 && strings.Contains(strings.ToLower(sn.snap.GPUs[p].Model), want) {
				m[i] |= 1 << b
			}
		}
	}
	if s.models == nil {
		s.models = make(map[string][]uint64)
	}
	s.models[model] = m
	return m
}

// eligible is the set of the node's working GPUs the entry may ever use.
func (s *scheduler) eligible(i int, e *QueueEntry, mm []uint64) uint64 {
	sn := &s.nodes[i]
	if !sn.alive || e.Node != "" && e.Node != sn.name {
		return 0
	}
	if mm != nil {
		return sn.usable & mm[i]
	}
	return sn.usable
}

// place finds where the entry starts now, on free GPUs (and protected ones
// when withProtected), or reports that it does not fit.
func (s *scheduler) place(e *QueueEntry, mm []uint64, withProtected bool) ([]pick, bool) {
	g := e.GPUsPerNode
	s.picks = s.picks[:0]
	for i := range s.nodes {
		sn := &s.nodes[i]
		free := sn.avail & s.eligible(i, e, mm)
		if !withProtected {
			free &^= sn.protect
		}
		if c := bits.OnesCount64(free); c >= g {
			s.picks = append(s.picks, pick{node: i, mask: free, left: c - g})
		}
	}
	if len(s.picks) < e.Nodes {
		return nil, false
	}
	if e.Nodes == 1 {
		// ChooseNode's preference: fewest left over, closest, origin, name.
		best := -1
		for k := range s.picks {
			p := &s.picks[k]
			if best >= 0 && p.left > s.picks[best].left {
				continue
			}
			p.place = s.placeOn(p.node, p.mask, g)
			if best < 0 {
				best = k
				continue
			}
			b := &s.picks[best]
			switch {
			case p.left != b.left:
				best = k
			case p.place.spread != b.place.spread:
				if p.place.spread < b.place.spread {
					best = k
				}
			case s.nodes[p.node].name == e.Origin:
				best = k
			}
		}
		s.picks[0], s.picks = s.picks[best], s.picks[:1]
	} else {
		slices.SortStableFunc(s.picks, func(a, b pick) int { return cmp.Compare(a.left, b.left) })
		s.picks = s.picks[:e.Nodes]
		slices.SortFunc(s.picks, func(a, b pick) int { return cmp.Compare(a.node, b.node) })
		for k := range s.picks {
			s.picks[k].place = s.placeOn(s.picks[k].node, s.picks[k].mask, g)
		}
	}
	return s.picks, true
}

// placeOn runs Place on a node's free set, cached: nodes with the same
// topology and free set get the same GPUs, and a pass asks the same
// question many times.
func (s *scheduler) placeOn(i int, free uint64, n int) *placeResult {
	sn := &s.nodes[i]
	key := placeKey{topo: sn.topo, mask: free, n: n}
	if r, ok := s.places[key]; ok {
		return r
	}
	idx := make([]int, 0, bits.OnesCount64(free))
	for m := free; m != 0; m &= m - 1 {
		idx = append(idx, sn.gpus[bits.TrailingZeros64(m)].index)
	}
	r := &placeResult{gpus: Place(*sn.snap, idx, n)}
	for _, x := range r.gpus {
		r.mask |= 1 << sn.bit(x)
	}
	r.spread = spread(*sn.snap, r.gpus)
	s.places[key] = r
	return r
}

// commit takes the picked GPUs for the entry and builds its start.
func (s *scheduler) commit(e *QueueEntry, picks []pick) Start {
	st := Start{
		Entry:    *e,
		Ranks:    make([]RankPlacement, len(picks)),
		Borrowed: s.borrows(e.User, e.GPUs()),
		Backfill: s.head != nil,
	}
	end := never
	if e.Duration > 0 {
		end = int64(e.Duration)
	}
	for k, p := range picks {
		sn := &s.nodes[p.node]
		st.Ranks[k] = RankPlacement{Node: sn.name, GPUs: slices.Clone(p.place.gpus)}
		sn.avail &^= p.place.mask
		for m := p.place.mask; m != 0; m &= m - 1 {
			g := &sn.gpus[bits.TrailingZeros64(m)]
			g.freeAt, g.late = end, false
		}
		s.totalAvail -= bits.OnesCount64(p.place.mask)
	}
	s.userUsed[e.User] += e.GPUs()
	if g := s.cfg.UserGroups[e.User]; g != "" {
		s.groupUsed[g] += e.GPUs()
	}
	return st
}

// estimate finds the earliest time the entry could start from the GPUs'
// expected free times, and where: per node the GPUsPerNode GPUs that come
// free first, then the nodes whose GPUs come free first (fewest GPUs that
// are free now, then the name, on ties). It returns never when no such time
// is known. strict counts GPUs of leases whose time is up as never free.
func (s *scheduler) estimate(e *QueueEntry, mm []uint64, strict bool) (int64, []pick) {
	g := e.GPUsPerNode
	s.picks = s.picks[:0]
	var at [maxNodeGPUs]int64
	var bs [maxNodeGPUs]int
	for i := range s.nodes {
		sn := &s.nodes[i]
		el := s.eligible(i, e, mm)
		if bits.OnesCount64(el) < g {
			continue
		}
		k := 0
		for m := el; m != 0; m &= m - 1 {
			b := bits.TrailingZeros64(m)
			at[k], bs[k] = sn.gpus[b].freeAt, b
			if strict && sn.gpus[b].late {
				at[k] = never
			}
			k++
		}
		// Partial selection sort: the g earliest, ties by index.
		for x := 0; x < g; x++ {
			min := x
			for y := x + 1; y < k; y++ {
				if at[y] < at[min] {
					min = y
				}
			}
			at[x], at[min] = at[min], at[x]
			bs[x], bs[min] = bs[min], bs[x]
		}
		if at[g-1] == never {
			continue
		}
		p := pick{node: i, at: at[g-1]}
		for x := 0; x < g; x++ {
			p.mask |= 1 << bs[x]
		}
		p.nowFree = bits.OnesCount64(p.mask & sn.avail)
		s.picks = append(s.picks, p)
	}
	if len(s.picks) < e.Nodes {
		return never, nil
	}
	// Partial selection of the e.Nodes best: a full sort of every node for
	// every waiting entry is most of a pass's time.
	before := func(a, b *pick) bool {
		if a.at != b.at {
			return a.at < b.at
		}
		if a.nowFree != b.nowFree {
			return a.nowFree < b.nowFree
		}
		return a.node < b.node
	}
	for x := 0; x < e.Nodes; x++ {
		best := x
		for y := x + 1; y < len(s.picks); y++ {
			if before(&s.picks[y], &s.picks[best]) {
				best = y
			}
		}
		s.picks[x], s.picks[best] = s.picks[best], s.picks[x]
	}
	s.picks = s.picks[:e.Nodes]
	return s.picks[e.Nodes-1].at, s.picks
}

// book writes an estimated run into the GPUs' expected free times, so the
// entries behind it are estimated after it.
func (s *scheduler) book(e *QueueEntry, at int64, picks []pick) {
	if at == never {
		return
	}
	end := never
	if e.Duration > 0 && at <= never-int64(e.Duration) {
		end = at + int64(e.Duration)
	}
	for _, p := range picks {
		sn := &s.nodes[p.node]
		for m := p.mask; m != 0; m &= m - 1 {
			g := &sn.gpus[bits.TrailingZeros64(m)]
			g.freeAt, g.late = end, false
		}
	}
}

// reclaimGroup is what ends together: one lease, or every rank of a gang.
type reclaimGroup struct {
	key      string
	user     string
	leases   []leaseAt
	borrowed bool
	idle     bool
	pending  bool  // already being preempted
	idleFrom int64 // latest time (ns from now, <= 0) any of it went idle
	started  time.Time
}

type leaseAt struct {
	node int
	l    *Lease
	mask uint64
}

// reclaim picks the leases to reclaim so the head can start, records them in
// the plan and in the GPUs' expected free times, and says so; "" when it
// reclaims nothing.
func (s *scheduler) reclaim(e *QueueEntry, mm []uint64, plan *Plan) string {
	groups := s.reclaimGroups()
	extra := make([]uint64, len(s.nodes))
	pending := 0
	for gi := range groups {
		if groups[gi].pending {
			s.addGroup(extra, &groups[gi])
			pending++
		}
	}
	if pending > 0 && s.fits(e, mm, extra) {
		return "next to start, once leases being reclaimed end"
	}
	within := s.quotas && !s.borrows(e.User, e.GPUs())
	var cands []*reclaimGroup
	for gi := range groups {
		g := &groups[gi]
		if g.pending || g.user == e.User {
			continue
		}
		if g.idle || within && g.borrowed {
			cands = append(cands, g)
		}
	}
	slices.SortFunc(cands, func(a, b *reclaimGroup) int {
		switch {
		case a.idle != b.idle:
			if a.idle {
				return -1
			}
			return 1
		case a.idle && a.idleFrom != b.idleFrom:
			return cmp.Compare(a.idleFrom, b.idleFrom)
		case !a.idle && !a.started.Equal(b.started):
			return b.started.Compare(a.started)
		}
		return cmp.Compare(a.key, b.key)
	})
	var chosen []*reclaimGroup
	fit := false
	for _, g := range cands {
		chosen = append(chosen, g)
		s.addGroup(extra, g)
		if fit = s.fits(e, mm, extra); fit {
			break
		}
	}
	if !fit {
		return ""
	}
	// Spare what is not needed, least preferred first.
	for k := len(chosen) - 2; k >= 0; k-- {
		clear(extra)
		for gi := range groups {
			if groups[gi].pending {
				s.addGroup(extra, &groups[gi])
			}
		}
		for j, g := range chosen {
			if j != k {
				s.addGroup(extra, g)
			}
		}
		if s.fits(e, mm, extra) {
			chosen = slices.Delete(chosen, k, k+1)
		}
	}
	soon := int64(s.cfg.PreemptGrace)
	n := 0
	reasons := ""
	for _, g := range chosen {
		why := PreemptQuota
		if g.idle {
			why = PreemptIdle
		}
		if !strings.Contains(reasons, why) {
			if reasons != "" {
				reasons += ", "
			}
			reasons += why
		}
		for _, la := range g.leases {
			plan.Reclaim = append(plan.Reclaim, Reclaim{Lease: *la.l, Reason: why, For: e.ID})
			n += len(la.l.GPUs)
			sn := &s.nodes[la.node]
			for m := la.mask; m != 0; m &= m - 1 {
				if gp := &sn.gpus[bits.TrailingZeros64(m)]; gp.freeAt > soon || gp.late {
					gp.freeAt, gp.late = min(gp.freeAt, soon), false
				}
			}
		}
	}
	return fmt.Sprintf("next to start: reclaiming %s (%s) for it", gpuCount(n), reasons)
}

func (s *scheduler) addGroup(extra []uint64, g *reclaimGroup) {
	for _, la := range g.leases {
		extra[la.node] |= la.mask
	}
}

// fits reports whether the entry could start now if the GPUs in extra were
// free too.
func (s *scheduler) fits(e *QueueEntry, mm []uint64, extra []uint64) bool {
	n := 0
	for i := range s.nodes {
		free := (s.nodes[i].avail | extra[i]) & s.eligible(i, e, mm)
		if bits.OnesCount64(free) >= e.GPUsPerNode {
			if n++; n >= e.Nodes {
				return true
			}
		}
	}
	return false
}

// reclaimGroups gathers the committed leases of alive nodes into what ends
// together, in a deterministic order.
func (s *scheduler) reclaimGroups() []reclaimGroup {
	var groups []reclaimGroup
	at := make(map[string]int)
	for i := range s.nodes {
		sn := &s.nodes[i]
		for _, l := range sn.leases {
			if !l.ReservedUntil.IsZero() {
				continue
			}
			key := sn.name + "/" + l.ID
			if l.Gang != "" {
				key = "gang/" + l.Gang
			}
			gi, ok := at[key]
			if !ok {
				gi = len(groups)
				at[key] = gi
				groups = append(groups, reclaimGroup{key: key, user: l.User, idle: true, idleFrom: math.MinInt64})
			}
			g := &groups[gi]
			la := leaseAt{node: i, l: l}
			for _, idx := range l.GPUs {
				if b := sn.bit(idx); b >= 0 {
					la.mask |= 1 << b
				}
			}
			g.leases = append(g.leases, la)
			g.borrowed = g.borrowed || l.Borrowed
			g.pending = g.pending || !l.PreemptedAt.IsZero()
			if l.StartedAt.After(g.started) {
				g.started = l.StartedAt
			}
			if from, idle := s.idleFrom(sn, l); idle && g.idle {
				g.idleFrom = max(g.idleFrom, from)
			} else {
				g.idle = false
			}
		}
	}
	for gi := range groups {
		slices.SortFunc(groups[gi].leases, func(a, b leaseAt) int {
			if c := cmp.Compare(a.node, b.node); c != 0 {
				return c
			}
			return cmp.Compare(a.l.ID, b.l.ID)
		})
	}
	return groups
}

// idleFrom reports whether every GPU of the lease has been quiet for at least
// IdleReclaimAfter, counting from its start at the earliest, and since when
// (ns from now).
func (s *scheduler) idleFrom(sn *snode, l *Lease) (int64, bool) {
	if sn.idle == nil || len(l.GPUs) == 0 {
		return 0, false
	}
	from := l.StartedAt
	for _, idx := range l.GPUs {
		since, ok := sn.idle.QuietSince(idx)
		if !ok {
			return 0, false
		}
		if since.After(from) {
			from = since
		}
	}
	if s.now.Sub(from) < s.cfg.IdleReclaimAfter {
		return 0, false
	}
	return int64(from.Sub(s.now)), true
}
