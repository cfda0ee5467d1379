package lease

import (
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Which GPUs are free, and which of them a claim for a count takes.

// usable reports whether -g N may pick g: no lease (of it or of a part),
// no process, not split into MIG instances, and the probe could read it (a
// GPU with an error is down, never free).
func usable(g *nodeprobe.GPU, held bool) bool {
	return !held && len(g.Processes) == 0 && g.Error == "" && g.MIG != nodeprobe.MIGEnabled
}

// FreeGPUs lists the GPUs with no lease, no process and no error, the only
// ones -g N picks from.
func FreeGPUs(snap nodeprobe.Snapshot, leases []Lease) []int {
	held := make(map[int]bool)
	for _, l := range leases {
		if l.Booked {
			continue
		}
		for _, g := range l.GPUs {
			held[g] = true
		}
	}
	var free []int
	for i := range snap.GPUs {
		if g := &snap.GPUs[i]; usable(g, held[g.Index]) {
			free = append(free, g.Index)
		}
	}
	return free
}

// pickFree chooses req.Count free GPUs of the model asked for: among those
// no booking needs within dur if there are enough (a claim with its own
// time limit takes only those), else among every free one, the time limit
// then cut to end before the first booking (fitBookings).
func (t *Table) pickFree(c Caller, req Claim, snap nodeprobe.Snapshot, uses map[int]*Use, now time.Time, dur time.Duration) ([]int, error) {
	n, node := req.Count, t.node
	var free, clear []int
	of := 0
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if !MatchModel(g, req.Model) {
			continue
		}
		of++
		if !usable(g, uses[g.Index] != nil) {
			continue
		}
		switch b := t.firstBooking([]int{g.Index}, now, now.Add(dur), ""); {
		case b == nil:
			clear = append(clear, g.Index)
			free = append(free, g.Index)
		case b.StartedAt.Sub(now) >= MinBeforeBooking:
			free = append(free, g.Index)
		}
	}
	in := ""
	if req.Model != "" {
		in = " " + termsafe.String(req.Model)
	}
	if n > of {
		return nil, refusal.Invalidf("%s has only %d%s %s; asked for %d: ask for at most %d, or for several nodes", node, of, in, words.GPUWord(of), n, of)
	}
	if len(clear) >= n {
		return Place(snap, clear, n), nil
	}
	if len(free) >= n && req.Duration == 0 {
		return Place(snap, free, n), nil
	}
	if len(free) >= n {
		b := t.firstBooking(free, now, now.Add(dur), "")
		return nil, refusal.Errorf(refusal.CodeConflict, "asked for %s for %s but only %d are free that long on %s: %s: ask for a shorter time, fewer GPUs, or wait", words.GPUCount(n), words.FormatDuration(dur), len(clear), node, describeBooking(b, now))
	}
	busy, othersHold := describeBusy(c, snap, uses, now)
	out := "wait for them, or ask the holders"
	if !othersHold {
		out = "release what you hold there, or wait"
	}
	if len(free) > 0 {
		out = fmt.Sprintf("ask for %d or fewer, wait, or ask the holders", len(free))
	}
	return nil, refusal.Errorf(refusal.CodeConflict, "asked for %d%s %s but only %d free on %s: %s; %s", n, in, words.GPUWord(n), len(free), node, busy, out)
}
