package lease

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// checkWhere refuses a claim the node is not for: a pool (tag) it is not
// in, a pool that is closed to the caller, a model it has no GPU of. It
// returns the time limit the node's pools allow (see Policy.PoolLimit).
func (t *Table) checkWhere(c Caller, req Claim, snap nodeprobe.Snapshot, dur time.Duration, p Policy) (time.Duration, error) {
	tags := snap.Host.Tags
	if !HasTags(tags, req.Tags) {
		return 0, refusal.Invalidf("%s is not in pool %s (%s): pick another node, or leave --node out", t.node, strings.Join(req.Tags, "+"), describeTags(tags))
	}
	if why := p.PoolDenies(tags, c.User); why != "" {
		return 0, refusal.Errorf(refusal.CodeForbidden, "%s: pick a node outside it", why)
	}
	dur, err := p.PoolLimit(tags, dur, req.Duration > 0)
	if err != nil {
		return 0, err
	}
	if req.Model != "" && !slices.ContainsFunc(snap.GPUs, func(g nodeprobe.GPU) bool { return MatchModel(&g, req.Model) }) {
		return 0, refusal.Invalidf("%s has no %s GPU (it has %s): ask for one of those, or another node", t.node, termsafe.String(req.Model), nodeModels(snap))
	}
	return dur, nil
}

// describeTags says which pools a node is in, for a message.
func describeTags(tags []string) string {
	if len(tags) == 0 {
		return "it is in no pool"
	}
	return "its pools: " + strings.Join(tags, ", ")
}

// nodeModels lists a node's GPU models, for a message.
func nodeModels(snap nodeprobe.Snapshot) string {
	var ms []string
	for _, g := range snap.GPUs {
		if m := termsafe.String(g.Model); !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	return strings.Join(ms, ", ")
}

// planPart decides a claim for part of a GPU: a MIG instance or a memory
// budget on a shared GPU.
func (t *Table) planPart(c Caller, req Claim, snap nodeprobe.Snapshot, now time.Time, dur time.Duration) (Lease, error) {
	switch {
	case req.MIG != "" && req.MemMiB > 0:
		return Lease{}, refusal.Invalidf("ask for a MIG instance (--mig) or a memory budget (--mem), not both")
	case req.Count > 1:
		return Lease{}, refusal.Invalidf("--mig and --mem claim part of one GPU: drop -g %d (claim again for another part)", req.Count)
	case len(req.GPUs) > 1 || req.MIG != "" && len(req.GPUs) > 0:
		return Lease{}, refusal.Invalidf("--mem takes at most one GPU (--ids N), and --mig names its instance itself")
	}
	uses := t.uses()
	var l Lease
	if req.MIG != "" {
		free, busy := findMIG(snap, uses, req.MIG, req.Model, req.Force)
		if len(free) == 0 {
			return Lease{}, t.noMIG(req, snap, busy)
		}
		ch := free[0]
		l = t.newLease(c, req, []int{ch.gpu.Index}, now, dur)
		l.MIG, l.Share = ch.inst.UUID, Share(ch.inst.MemoryTotalMiB, ch.gpu.MemoryTotalMiB)
	} else {
		g, err := t.pickShared(req, snap, uses, now, dur)
		if err != nil {
			return Lease{}, err
		}
		l = t.newLease(c, req, []int{g.Index}, now, dur)
		l.MemMiB, l.Share = req.MemMiB, Share(req.MemMiB, g.MemoryTotalMiB)
	}
	d, err := t.fitBookings(l.GPUs, now, dur, req.Duration > 0)
	if err != nil {
		return Lease{}, err
	}
	l.ExpiresAt = l.StartedAt.Add(d)
	return l, nil
}

// noMIG says why no MIG instance fits a claim, and what there is.
func (t *Table) noMIG(req Claim, snap nodeprobe.Snapshot, busy []string) error {
	have := MIGProfiles(snap)
	switch {
	case have == "":
		return refusal.Invalidf("%s has no GPU split into MIG instances: claim whole GPUs (-g N), or another node", t.node)
	case len(busy) == 0:
		return refusal.Invalidf("%s has no MIG instance %s (it has %s): ask for one of those", t.node, termsafe.String(req.MIG), have)
	}
	return refusal.Errorf(refusal.CodeConflict, "no MIG instance %s is free on %s: %s: wait, or ask for another profile (it has %s)", termsafe.String(req.MIG), t.node, strings.Join(busy, "; "), have)
}

// pickShared finds the GPU a budget fits on now, or says what is free.
func (t *Table) pickShared(req Claim, snap nodeprobe.Snapshot, uses map[int]*Use, now time.Time, dur time.Duration) (*nodeprobe.GPU, error) {
	ok := func(g *nodeprobe.GPU) bool {
		if len(req.GPUs) == 1 && g.Index != req.GPUs[0] || !MatchModel(g, req.Model) {
			return false
		}
		b := t.firstBooking([]int{g.Index}, now, now.Add(dur), "")
		return b == nil || req.Duration == 0 && b.StartedAt.Sub(now) >= MinBeforeBooking
	}
	if gi, found := fitShared(snap, uses, req.MemMiB, ok); found {
		return FindGPU(snap, gi), nil
	}
	if len(req.GPUs) == 1 {
		g := FindGPU(snap, req.GPUs[0])
		switch {
		case g == nil:
			return nil, refusal.Invalidf("no GPU %d on %s: it has GPUs %s", req.GPUs[0], t.node, indexRange(snap))
		case g.MIG == nodeprobe.MIGEnabled:
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d on %s is split into MIG instances: claim one with --mig PROFILE (%s)", g.Index, t.node, MIGProfiles(snap))
		case uses[g.Index] != nil && uses[g.Index].Whole != nil:
			l := uses[g.Index].Whole
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d is held whole by %s %s (lease %s): it cannot be shared until they release it", g.Index, l.User, timeLeft(l.ExpiresAt, now), l.ID)
		}
		return nil, refusal.Errorf(refusal.CodeConflict, "asked for %s on GPU %d of %s but %s: ask for less, another GPU, or wait", FormatMem(req.MemMiB), g.Index, t.node, roomOf(g, uses[g.Index]))
	}
	best, at := uint64(0), -1
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if ok(g) {
			if r := SharedRoom(g, uses[g.Index]); at < 0 || r > best {
				best, at = r, g.Index
			}
		}
	}
	if at < 0 || best == 0 {
		return nil, refusal.Errorf(refusal.CodeConflict, "asked for %s on a shared GPU but no GPU of %s has memory to share: every one is held whole, split into MIG instances or full: wait, or ask the holders", FormatMem(req.MemMiB), t.node)
	}
	return nil, refusal.Errorf(refusal.CodeConflict, "asked for %s on a shared GPU but at most %s is free on one GPU of %s (GPU %d: %s): ask for %s or less, or wait", FormatMem(req.MemMiB), FormatMem(best), t.node, at, roomOf(FindGPU(snap, at), uses[at]), FormatMem(best))
}

// roomOf says where a GPU's memory goes: "12 GiB of its 80 GiB is free;
// alice and bob hold budgets of 60 GiB, 8 GiB is used outside dibs".
func roomOf(g *nodeprobe.GPU, u *Use) string {
	s := fmt.Sprintf("%s of its %s is free", FormatMem(SharedRoom(g, u)), FormatMem(g.MemoryTotalMiB))
	if u != nil && len(u.parts) > 0 {
		s += fmt.Sprintf("; %s budgets of %s", partHolders(u), FormatMem(u.budget))
	}
	var outside uint64
	for _, pr := range g.Processes {
		if !u.holdsProcess(pr) {
			outside += pr.UsedMemoryMiB
		}
	}
	if outside > 0 {
		s += fmt.Sprintf("; %s is used by processes outside dibs", FormatMem(outside))
	}
	return s
}
