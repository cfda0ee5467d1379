package queue

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

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
	// by says what holds it until freeAt: hold is the lease, who (and
	// whoRank) the entry of this pass ahead of the one asking
	// (waitreason.go).
	by      cause
	hold    *lease.Lease
	who     string
	whoRank rankKey
}

// snode is one node during a pass. GPU bit i is gpus[i]; gpus are sorted by
// index.
type snode struct {
	name  string
	snap  *nodeprobe.Snapshot
	idle  *lease.IdleTracker
	alive bool
	gpus  []sgpu
	// usable: no error (on an alive node); avail: free now and not taken
	// by a start of this pass; protect: free GPUs kept for the head;
	// shadow: every GPU the head is estimated to start on.
	usable, avail, protect, shadow uint64
	// overdue counts its leases past their end not being reclaimed
	// (reclaimOverdue looks only where there are some).
	overdue int
	// leases are the node's live leases (expired reservations dropped).
	leases []*lease.Lease
	// topo names the node's topology: nodes with the same topo place alike.
	topo int
	// tags are the node's pools.
	tags []string
	// books are, per GPU bit, the bookings' windows on it (nil when the
	// node has none): runs there must end before them.
	books [][]window
	// room is, per GPU bit, how much memory a shared run may still take
	// there; nil until a shared entry asks (sharedRooms).
	room []uint64
	// taken are the GPUs whole-GPU runs of this pass took.
	taken uint64
	// pools are the limits of the pools the node is in, poolNames their
	// tags.
	pools     []lease.PoolLimits
	poolNames []string
	// held are, per GPU bit, the leases on it soonest-ending first, and
	// total its memory; filled with room.
	held  [][]*lease.Lease
	total []uint64
	// migUses is who holds each GPU (nil until a MIG entry asks), and
	// migTaken the instances starts of this pass took, by UUID.
	migUses  map[int]*lease.Use
	migTaken map[string]bool
	// spoken is, per GPU bit, the memory being reclaimed there that an
	// entry of this pass waits for (nil until one does).
	spoken []uint64
}

// window is a booked time, in nanoseconds from now.
type window struct{ start, end int64 }

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
	// maxMem is the largest GPU memory of the pass's nodes (0: not looked
	// yet), what a budget's share is counted against before it is placed.
	maxMem    uint64
	userUsed  map[string]float64
	groupUsed map[string]float64
	starting  map[string]bool
	places    map[placeKey]*placeResult
	models    map[string][]uint64
	// poolUsed counts the GPUs each user holds in each pool with a
	// MaxGPUs, by poolKey: whole GPUs, and the share of a GPU a MIG
	// instance or a budget holds.
	poolUsed map[poolKey]float64

	// reclaimed are the budgets this pass asked to reclaim.
	reclaimed map[*lease.Lease]bool

	// The head: the first entry that waits, with its shadow time.
	head     *QueueEntry
	headAt   int64
	headRank rankKey

	picks []pick // scratch

	// cur is the rank of the entry being visited, which its starts and
	// estimates leave on the GPUs they take (sgpu.whoRank).
	cur rankKey
}

func newScheduler(nodes []lease.SchedNode, now time.Time, cfg SchedConfig) *scheduler {
	s := &scheduler{
		now:       now,
		cfg:       cfg,
		nodes:     make([]snode, len(nodes)),
		byName:    make(map[string]int, len(nodes)),
		quotas:    len(cfg.Quotas) > 0 || len(cfg.GroupQuotas) > 0,
		userUsed:  make(map[string]float64),
		groupUsed: make(map[string]float64),
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
func (s *scheduler) addNode(sn *snode, n *lease.SchedNode, topos map[string]int, sig []byte) []byte {
	sn.name, sn.snap, sn.idle, sn.alive = n.Name, &n.Snap, n.Idle, n.Alive
	sn.tags = n.Snap.Host.Tags
	for _, t := range s.cfg.Pools.PoolsOf(sn.tags) {
		sn.pools, sn.poolNames = append(sn.pools, s.cfg.Pools[t]), append(sn.poolNames, t)
	}
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
		s.charge(sn, l.User, l.Weight())
		end, late := s.leaseEnd(l)
		if late && l.PreemptedAt.IsZero() {
			sn.overdue++
		}
		for _, idx := range l.GPUs {
			b := sn.bit(idx)
			if b < 0 {
				continue
			}
			g := &sn.gpus[b]
			if held&(1<<b) == 0 || end > g.freeAt {
				g.freeAt, g.late = end, late
				g.by, g.hold = causeLease, l
			}
			held |= 1 << b
		}
	}
	booked := s.addBookings(sn, n.Bookings)
	for b, p := range pos {
		g, sg := &gs[p], &sn.gpus[b]
		switch {
		case g.Error != "" || g.MIG == nodeprobe.MIGEnabled:
			// Down, or only for MIG claims: never a whole GPU.
			sg.freeAt = never
		case booked&(1<<b) != 0:
			// Its booking has begun: held until the booking ends.
			sn.usable |= 1 << b
			sg.freeAt = max(sg.freeAt, sn.books[b][0].end)
			sg.by = causeBooking
		case held&(1<<b) != 0:
			sn.usable |= 1 << b
		case len(g.Processes) > 0:
			// Used outside dibs: nobody can say when it comes free.
			sn.usable |= 1 << b
			sg.freeAt, sg.by = never, causeSquat
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
func (s *scheduler) leaseEnd(l *lease.Lease) (int64, bool) {
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
		keys = append(keys, rankKey{idx: i, prio: priority(e, f, s.now, s.cfg), borrow: s.borrows(e.User, s.weight(e))})
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
// weight is how much of the quota an entry would take: its GPUs, or for a
// budget its share of the largest GPU it could land on (the least it can
// count; where it starts, the start counts its share of that GPU).
func (s *scheduler) weight(e *QueueEntry) float64 {
	if e.MemMiB == 0 {
		return float64(e.GPUs())
	}
	if s.maxMem == 0 {
		s.maxMem = 1 // looked once per pass
		for i := range s.nodes {
			for _, g := range s.nodes[i].snap.GPUs {
				s.maxMem = max(s.maxMem, g.MemoryTotalMiB)
			}
		}
	}
	return min(float64(e.MemMiB)/float64(s.maxMem), 1)
}

func (s *scheduler) borrows(user string, n float64) bool {
	return s.quotas && s.cfg.Borrows(user, n, s.userUsed[user], s.groupUsed[s.cfg.UserGroups[user]])
}
