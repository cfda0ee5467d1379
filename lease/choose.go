package lease

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Want is what a claim asks of a node, as placement across nodes reads it:
// Count whole GPUs, one MIG instance, or a memory budget on a shared GPU;
// of a model (substring, any case), on a node with every tag.
type Want struct {
	Count  int
	MIG    string
	MemMiB uint64
	Model  string
	Tags   []string
	// Duration is the time limit the person chose (0: the default, which a
	// pool's MaxTime or a booking cuts instead of refusing), from Now.
	Duration time.Duration
	// Span is how long the lease would run: Duration, or the kind's
	// default (0: unknown, so any booking ahead may cut it).
	Span time.Duration
	Now  time.Time
	// Held is what the person holds in each pool with a MaxGPUs
	// (ClusterView.PoolHeld); nil counts nothing.
	Held map[string]float64
}

// Want is what placing c across nodes reads of it, at now, for a person
// who holds held in the pools: the span is c's time limit under p, the
// placing node's policy (Limit), or the duration asked for when p refuses
// it (the granting node's policy decides, and may differ).
func (c Claim) Want(p Policy, now time.Time, held map[string]float64) Want {
	_, span, err := c.Limit(p)
	if err != nil {
		span = c.Duration
	}
	return Want{Count: c.Count, MIG: c.MIG, MemMiB: c.MemMiB, Model: c.Model, Tags: c.Tags,
		Duration: c.Duration, Span: span, Now: now, Held: held}
}

// weight is how many GPUs the claim counts against a pool's MaxGPUs on a
// node with snap: its GPUs, or the share of a GPU a MIG instance or budget
// holds there.
func (w Want) weight(snap nodeprobe.Snapshot) float64 {
	return ClaimWeight(snap, Claim{Count: w.Count, MIG: w.MIG, MemMiB: w.MemMiB})
}

// fitsNow reports whether the node's hardware could take the claim now,
// limits aside.
func (w Want) fitsNow(c Candidate) bool {
	switch {
	case w.MIG != "":
		return FreeMIG(c.Snap, c.Leases, w.MIG, w.Model) > 0
	case w.MemMiB > 0:
		_, ok := fitShared(c.Snap, usesOfList(c.Leases), w.MemMiB, func(g *nodeprobe.GPU) bool { return MatchModel(g, w.Model) })
		return ok
	}
	n := 0
	for _, i := range FreeGPUs(c.Snap, c.Leases) {
		if g := FindGPU(c.Snap, i); g != nil && MatchModel(g, w.Model) {
			n++
		}
	}
	return n >= w.Count
}

// unbooked is the candidate with the GPUs booked before the claim would end
// counted as held (every booked GPU when its span is unknown).
func (w Want) unbooked(c Candidate) Candidate {
	for _, b := range c.Bookings {
		if w.Span <= 0 || b.StartedAt.Before(w.Now.Add(w.Span+MinBeforeBooking)) {
			c.Leases = append(slices.Clip(c.Leases), b)
		}
	}
	return c
}

// ChooseNodeFor picks the node for a claim with no node named, honouring
// its model and pools: among the candidates with the tags asked for whose
// pools' limits allow it (Pools.Refuses: users, MaxTime against the time
// asked, MaxGPUs against w.Held), whole GPUs as ChooseNode places them (on
// the GPUs of the model; first where no booking cuts the claim short), a MIG
// instance on the node with the fewest free ones of the profile left
// (pack), a budget on the node whose best GPU it fills best; ties go to the
// node asked from, then the name. A refusal is the closest fit's: a node
// with room now whose pool refuses says why; otherwise what the cluster
// has: the pools, the models, what is free.
func ChooseNodeFor(cands []Candidate, w Want, pools Pools, user string) (string, error) {
	if len(cands) == 0 {
		return "", refusal.Errorf(refusal.CodeUnavailable, "no node is up to take the claim: `dibs ls` shows the cluster")
	}
	var in []Candidate
	var limited, closest error
	for _, c := range cands {
		if !HasTags(c.Snap.Host.Tags, w.Tags) {
			continue
		}
		if err := pools.Refuses(c.Snap.Host.Tags, user, w.weight(c.Snap), w.Duration, w.Duration > 0, w.Held); err != nil {
			// The closest fit is a node the hardware could take the claim
			// on now, were it not for its pool's limit.
			if limited == nil {
				limited = err
			}
			if closest == nil && w.fitsNow(c) {
				closest = err
			}
			continue
		}
		in = append(in, c)
	}
	switch {
	case len(in) == 0 && closest != nil:
		return "", closest
	case len(in) == 0 && limited != nil:
		return "", limited
	case len(in) == 0:
		return "", refusal.Invalidf("no node that is up is in pool %s (%s): ask for one of those", strings.Join(w.Tags, "+"), candTags(cands))
	}
	if w.MIG == "" && w.MemMiB == 0 {
		// Whole GPUs go where no booking cuts the claim short, when a node
		// has room so; otherwise where they fit now (the node's table then
		// cuts the time or refuses, naming the booking).
		unbooked := make([]Candidate, len(in))
		for i, c := range in {
			unbooked[i] = w.unbooked(c)
		}
		if node, err := chooseAmong(unbooked, w); err == nil {
			return node, nil
		}
	}
	node, err := chooseAmong(in, w)
	switch {
	case err == nil || closest == nil:
		return node, err
	case refusal.CodeOf(err) == refusal.CodeConflict:
		return "", refusal.Errorf(refusal.CodeOf(closest), "%s (no other node has room now: %v)", closest.(*refusal.Error).Msg, err)
	}
	// No other node could ever take it: the closest fit's limit is the answer.
	return "", closest
}

// chooseAmong picks among nodes whose pools allow the claim.
func chooseAmong(in []Candidate, w Want) (string, error) {
	if w.Model != "" {
		var models []string
		found := false
		for _, c := range in {
			for i := range c.Snap.GPUs {
				g := &c.Snap.GPUs[i]
				found = found || MatchModel(g, w.Model)
				if m := termsafe.String(g.Model); !slices.Contains(models, m) {
					models = append(models, m)
				}
			}
		}
		if !found {
			slices.Sort(models)
			return "", refusal.Invalidf("no node has a %s GPU (they have %s): ask for one of those, or leave --model out", termsafe.String(w.Model), strings.Join(models, ", "))
		}
	}
	switch {
	case w.MIG != "":
		return chooseMIG(in, w)
	case w.MemMiB > 0:
		return chooseShared(in, w)
	}
	if w.Model == "" {
		return ChooseNode(in, w.Count)
	}
	// ChooseNode over the GPUs of the model only.
	of := make([]Candidate, len(in))
	for i, c := range in {
		of[i] = c
		of[i].Snap.GPUs = slices.DeleteFunc(slices.Clone(c.Snap.GPUs), func(g nodeprobe.GPU) bool { return !MatchModel(&g, w.Model) })
	}
	node, err := ChooseNode(of, w.Count)
	if err != nil {
		var e *refusal.Error
		if errors.As(err, &e) {
			e.Msg = strings.Replace(e.Msg, "GPUs", termsafe.String(w.Model)+" GPUs", 1)
		}
	}
	return node, err
}

func chooseMIG(cands []Candidate, w Want) (string, error) {
	best, bestFree, bestLocal := "", 0, false
	any, exists := false, false
	for _, c := range cands {
		if MIGProfiles(c.Snap) != "" {
			any = true
		}
		if free, busy := findMIG(c.Snap, usesOfList(c.Leases), w.MIG, w.Model, false); len(free)+len(busy) > 0 {
			exists = true
		}
		n := FreeMIG(c.Snap, c.Leases, w.MIG, w.Model)
		if n == 0 {
			continue
		}
		better := best == "" || n < bestFree || n == bestFree && (c.Local && !bestLocal || c.Local == bestLocal && c.Node < best)
		if better {
			best, bestFree, bestLocal = c.Node, n, c.Local
		}
	}
	switch {
	case best != "":
		return best, nil
	case !any:
		return "", refusal.Invalidf("no node that is up has a GPU split into MIG instances: claim whole GPUs (-g N)")
	}
	var have []string
	for _, c := range cands {
		if p := MIGProfiles(c.Snap); p != "" {
			have = append(have, c.Node+": "+p)
		}
	}
	if !exists {
		// Waiting would never help: refuse, saying what there is.
		return "", refusal.Invalidf("no node has a MIG instance %s (%s): ask for one of those, by profile, MIG- UUID or GPU:INDEX (`dibs ls` lists them)", termsafe.String(w.MIG), strings.Join(have, "; "))
	}
	return "", refusal.Errorf(refusal.CodeConflict, "no MIG instance %s is free on any node (%s): wait, or ask for another profile; `dibs ls` shows who holds them", termsafe.String(w.MIG), strings.Join(have, "; "))
}

func chooseShared(cands []Candidate, w Want) (string, error) {
	best, bestLeft, bestLocal := "", uint64(0), false
	most, mostNode := uint64(0), ""
	for _, c := range cands {
		room, _ := BestSharedRoom(c.Snap, c.Leases, w.Model)
		if room > most {
			most, mostNode = room, c.Node
		}
		uses := usesOfList(c.Leases)
		gi, ok := fitShared(c.Snap, uses, w.MemMiB, func(g *nodeprobe.GPU) bool { return MatchModel(g, w.Model) })
		if !ok {
			continue
		}
		left := SharedRoom(FindGPU(c.Snap, gi), uses[gi]) - w.MemMiB
		better := best == "" || left < bestLeft || left == bestLeft && (c.Local && !bestLocal || c.Local == bestLocal && c.Node < best)
		if better {
			best, bestLeft, bestLocal = c.Node, left, c.Local
		}
	}
	if best != "" {
		return best, nil
	}
	if mostNode == "" {
		return "", refusal.Errorf(refusal.CodeConflict, "asked for %s on a shared GPU but no GPU has memory to share: every one is held whole, split into MIG instances or full: wait, or `dibs claim --queue`", FormatMem(w.MemMiB))
	}
	return "", refusal.Errorf(refusal.CodeConflict, "asked for %s on a shared GPU but at most %s is free on one GPU (on %s): ask for %s or less, wait, or `dibs claim --queue`", FormatMem(w.MemMiB), FormatMem(most), mostNode, FormatMem(most))
}

// candTags lists the pools of the candidates, for a message.
func candTags(cands []Candidate) string {
	nodes := make([]SchedNode, len(cands))
	for i, c := range cands {
		nodes[i] = SchedNode{Snap: c.Snap}
	}
	return ClusterTags(nodes)
}

// BookNode picks the node for a booking with no node named: among the
// candidates with the tags whose pools' limits allow it (Pools.Refuses: the
// users, MaxTime against the booking's length, MaxGPUs against n), one where
// n GPUs (of the model) are bookable over [start, end); the one with the
// fewest left over (pack), then the node asked from, then the name. When
// none can, the refusal is the closest fit's: a node with room whose pool
// refuses says so.
func BookNode(cands []Candidate, n int, model string, tags []string, pools Pools, user string, start, end time.Time) (string, error) {
	best, bestLeft, bestLocal := "", 0, false
	most, mostNode, inPool := 0, "", 0
	var limited, closest error
	for _, c := range cands {
		if !HasTags(c.Snap.Host.Tags, tags) {
			continue
		}
		free, _ := Bookable(c.Snap, append(slices.Clone(c.Leases), c.Bookings...), model, start, end)
		// A booking is held to the pools' limits as the lease it becomes
		// will be (what the person will hold then is not known now).
		if err := pools.Refuses(c.Snap.Host.Tags, user, float64(n), end.Sub(start), true, nil); err != nil {
			if limited == nil {
				limited = err
			}
			if closest == nil && len(free) >= n {
				closest = err
			}
			continue
		}
		inPool++
		if len(free) > most {
			most, mostNode = len(free), c.Node
		}
		if len(free) < n {
			continue
		}
		left := len(free) - n
		if best == "" || left < bestLeft || left == bestLeft && (c.Local && !bestLocal || c.Local == bestLocal && c.Node < best) {
			best, bestLeft, bestLocal = c.Node, left, c.Local
		}
	}
	switch {
	case best != "":
		return best, nil
	case inPool == 0 && closest != nil:
		return "", closest
	case inPool == 0 && limited != nil:
		return "", limited
	case closest != nil:
		return "", refusal.Errorf(refusal.CodeOf(closest), "%s (no other node can be booked %s)", closest.(*refusal.Error).Msg, bookingSpan(start, end))
	case inPool == 0 && len(tags) > 0:
		return "", refusal.Invalidf("no node that is up is in pool %s (%s): ask for one of those", strings.Join(tags, "+"), candTags(cands))
	case inPool == 0:
		return "", refusal.Errorf(refusal.CodeUnavailable, "no node is up to take the booking: `dibs ls` shows the cluster")
	case mostNode == "":
		return "", refusal.Errorf(refusal.CodeConflict, "no GPU can be booked %s: every one is held or booked then: `dibs bookings` shows the bookings", bookingSpan(start, end))
	}
	return "", refusal.Errorf(refusal.CodeConflict, "asked to book %d GPUs %s but at most %d can be booked together (on %s): book fewer, or another time", n, bookingSpan(start, end), most, mostNode)
}
