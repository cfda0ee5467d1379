package lease

import (
	"slices"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Place chooses n of the free GPUs, keeping them as close as the topology
// allows (NVLink, then the same PCIe switch) and preferring the lowest indices
// among equally close sets. free must be sorted and hold at least n indices.
//
// It grows a set greedily from each free GPU and keeps the best: exact search
// is exponential and a node has at most a handful of GPUs, where greedy growth
// finds the NVLink or switch group the person expects.
func Place(snap nodeprobe.Snapshot, free []int, n int) []int {
	if n <= 0 || n > len(free) {
		return nil
	}
	if n == len(free) {
		return slices.Clone(free)
	}
	byIndex := make(map[int]*nodeprobe.GPU, len(snap.GPUs))
	for i := range snap.GPUs {
		byIndex[snap.GPUs[i].Index] = &snap.GPUs[i]
	}
	dist := func(a, b int) int {
		if g := byIndex[a]; g != nil {
			return g.DistanceTo(b)
		}
		return nodeprobe.LinkSystem.Distance()
	}
	var best []int
	bestMax, bestSum, bestBreak := 0, 0, 0
	for _, start := range free {
		set := []int{start}
		in := map[int]bool{start: true}
		for len(set) < n {
			pick, pickCost := -1, 0
			for _, c := range free {
				if in[c] {
					continue
				}
				cost := 0
				for _, s := range set {
					if d := dist(s, c); d > cost {
						cost = d
					}
				}
				if pick < 0 || cost < pickCost {
					pick, pickCost = c, cost
				}
			}
			set = append(set, pick)
			in[pick] = true
		}
		slices.Sort(set)
		mx, sum := 0, 0
		for i := range set {
			for j := i + 1; j < len(set); j++ {
				d := dist(set[i], set[j])
				sum += d
				if d > mx {
					mx = d
				}
			}
		}
		// Among equally close sets, take the one that breaks up the fewest
		// free close neighbours: fill an island already in use before
		// opening a whole one that a larger claim could need.
		brk := 0
		for _, s := range set {
			for _, c := range free {
				if !in[c] && dist(s, c) <= nodeprobe.LinkSameBoard.Distance() {
					brk++
				}
			}
		}
		better := best == nil || mx < bestMax
		if !better && mx == bestMax {
			switch {
			case sum != bestSum:
				better = sum < bestSum
			case brk != bestBreak:
				better = brk < bestBreak
			default:
				better = slices.Compare(set, best) < 0
			}
		}
		if better {
			best, bestMax, bestSum, bestBreak = set, mx, sum, brk
		}
	}
	return best
}

// Candidate is one node that a cluster-wide claim could land on.
type Candidate struct {
	Node   string
	Snap   nodeprobe.Snapshot
	Leases []Lease
	// Bookings are the node's bookings not started yet.
	Bookings []Lease
	// Local marks the node the person asked from; it wins ties, since their
	// data and shell are there.
	Local bool
}

// ChooseNode picks the node for a claim of n GPUs with no node named: one
// where all n fit; among those the one with the fewest free GPUs left over
// (pack, so whole nodes stay free for multi-node jobs), then the closest GPUs,
// then the node the person asked from, then the name. It returns "" and a refusal when no node fits.
func ChooseNode(cands []Candidate, n int) (string, error) {
	if n <= 0 {
		return "", refusal.Invalidf("say how many GPUs (-g N)")
	}
	if len(cands) == 0 {
		return "", refusal.Errorf(refusal.CodeUnavailable, "no node is up to take a claim for %s: `dibs ls` shows the cluster", words.GPUCount(n))
	}
	best, bestLeft, bestDist, bestLocal := "", 0, 0, false
	most, mostNode, biggest := 0, "", 0
	for _, c := range cands {
		biggest = max(biggest, WholeGPUs(c.Snap))
		free := FreeGPUs(c.Snap, c.Leases)
		if len(free) > most {
			most, mostNode = len(free), c.Node
		}
		if len(free) < n {
			continue
		}
		pick := Place(c.Snap, free, n)
		dist := Spread(c.Snap, pick)
		left := len(free) - n
		better := best == "" || left < bestLeft || (left == bestLeft && dist < bestDist)
		if !better && left == bestLeft && dist == bestDist {
			better = c.Local && !bestLocal || (c.Local == bestLocal && c.Node < best)
		}
		if better {
			best, bestLeft, bestDist, bestLocal = c.Node, left, dist, c.Local
		}
	}
	if best != "" {
		return best, nil
	}
	if n > biggest {
		return "", refusal.Invalidf("no node has %s (the largest has %d): ask for fewer, or for several nodes", words.GPUCount(n), biggest)
	}
	if mostNode == "" {
		return "", refusal.Errorf(refusal.CodeConflict, "asked for %s but no GPU is free anywhere: `dibs ls` shows who holds them", words.GPUCount(n))
	}
	return "", refusal.Errorf(refusal.CodeConflict, "asked for %s on one node but at most %d are free together (on %s): `dibs ls` shows who holds the rest", words.GPUCount(n), most, mostNode)
}

// WholeGPUs is how many of a node's GPUs can be claimed whole: not those
// split into MIG instances, which are claimed by instance. A claim's
// refusal here and a queued request's (queue.CheckFeasible) both count
// so, and name the same largest node: one said 8 where the other said 6.
func WholeGPUs(snap nodeprobe.Snapshot) int {
	n := 0
	for i := range snap.GPUs {
		if snap.GPUs[i].MIG != nodeprobe.MIGEnabled {
			n++
		}
	}
	return n
}

// Spread is the largest distance between any two GPUs of a set.
func Spread(snap nodeprobe.Snapshot, set []int) int {
	mx := 0
	for i := range set {
		var g *nodeprobe.GPU
		for k := range snap.GPUs {
			if snap.GPUs[k].Index == set[i] {
				g = &snap.GPUs[k]
			}
		}
		if g == nil {
			continue
		}
		for j := i + 1; j < len(set); j++ {
			if d := g.DistanceTo(set[j]); d > mx {
				mx = d
			}
		}
	}
	return mx
}

// SchedNode is one node as the scheduler sees it.
type SchedNode struct {
	Name  string
	Alive bool
	Snap  nodeprobe.Snapshot
	// Leases are the node's leases, reservations included.
	Leases []Lease
	// Idle is the node's idle history (nil: none known).
	Idle *IdleTracker
	// Bookings are the node's bookings not started yet: GPUs the queue
	// may use only for runs that end before them.
	Bookings []Lease
}
