package event

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// FlagEvents are the events a node's new judgements call for: a GPU newly
// squatted (a process without the lease), a leased GPU newly idle. old and
// cur are the judgements before and after; quietSince says since when each
// GPU has been quiet.
func FlagEvents(node string, old, cur map[int]lease.Judgement, leases []lease.Lease, quietSince map[int]time.Time, now time.Time) []Event {
	holder := map[int]*lease.Lease{}
	for i := range leases {
		if leases[i].ReservedUntil.IsZero() {
			for _, g := range leases[i].GPUs {
				holder[g] = &leases[i]
			}
		}
	}
	gpus := make([]int, 0, len(cur))
	for g := range cur {
		gpus = append(gpus, g)
	}
	slices.Sort(gpus)
	var out []Event
	for _, g := range gpus {
		j, was := cur[g], old[g]
		if j.Has(lease.FlagSquatted) && !was.Has(lease.FlagSquatted) && len(j.Squatters) > 0 {
			p := j.Squatters[0]
			who := p.User
			if who == "" {
				who = "uid " + strconv.Itoa(p.UID)
			}
			out = append(out, SquatterEvent(node, g, who, p.PID, clipCommand(p.Command), holder[g], now))
		}
		if l := holder[g]; l != nil && j.Has(lease.FlagIdle) && !was.Has(lease.FlagIdle) {
			// Idle time counts from the lease's own start: the GPU's quiet
			// time before it was claimed is not its holder's.
			idle := time.Duration(0)
			if t, ok := quietSince[g]; ok {
				idle = now.Sub(later(t, l.StartedAt))
			}
			out = append(out, IdleEvent(*l, g, words.ToMinute(idle), now))
		}
	}
	return out
}

// clipCommand keeps a process's command short and to one line.
func clipCommand(c string) string {
	c = strings.Join(strings.Fields(c), " ")
	if len(c) > 60 {
		cut := 60
		for cut > 0 && (c[cut]&0xC0) == 0x80 {
			cut--
		}
		c = c[:cut] + "…"
	}
	return c
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
