package lease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// indexRange lists a node's GPU indices: 0-7 when they run without a gap,
// 0,1,3 otherwise.
func indexRange(snap nodeprobe.Snapshot) string {
	if len(snap.GPUs) == 0 {
		return "none"
	}
	idx := make([]int, len(snap.GPUs))
	for i, g := range snap.GPUs {
		idx[i] = g.Index
	}
	slices.Sort(idx)
	if idx[len(idx)-1]-idx[0] == len(idx)-1 && len(idx) > 1 {
		return fmt.Sprintf("%d-%d", idx[0], idx[len(idx)-1])
	}
	return strings.TrimPrefix(strings.TrimPrefix(gpuList(idx), "GPUs "), "GPU ")
}

// ownerName names a process's owner for a message. The name comes from the
// node's account database through /proc, so it is made terminal-safe.
func ownerName(pr nodeprobe.Process) string {
	switch {
	case pr.User != "":
		return termsafe.String(pr.User)
	case pr.UID >= 0:
		return "uid " + strconv.Itoa(pr.UID)
	}
	return "an unknown user"
}

// describeBusy says who holds the GPUs that are not free, and until when, so
// a refusal tells the person whom to ask.
func describeBusy(snap nodeprobe.Snapshot, uses map[int]*use, now time.Time) string {
	type hold struct {
		who   string
		gpus  []int
		until time.Time
	}
	var order []string
	m := make(map[string]*hold)
	add := func(key, who string, g int, until time.Time) {
		h, ok := m[key]
		if !ok {
			h = &hold{who: who, until: until}
			m[key] = h
			order = append(order, key)
		}
		h.gpus = append(h.gpus, g)
	}
	for _, g := range snap.GPUs {
		if l := uses[g.Index].first(); l != nil && !l.Partial() {
			add("lease "+l.ID, l.User, g.Index, l.ExpiresAt)
		} else if g.MIG == nodeprobe.MIGEnabled {
			add("mig", "", g.Index, time.Time{})
		} else if l != nil {
			add("shared", "", g.Index, time.Time{})
		} else if len(g.Processes) > 0 {
			who := ownerName(g.Processes[0])
			add("proc "+who, who, g.Index, time.Time{})
		} else if g.Error != "" {
			add("down", "", g.Index, time.Time{})
		}
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		h := m[k]
		var s string
		switch {
		case k == "down":
			s = gpuList(h.gpus) + " down"
		case k == "mig":
			s = gpuList(h.gpus) + " split into MIG instances (--mig claims one)"
		case k == "shared":
			s = gpuList(h.gpus) + " shared (--mem claims a budget beside the others)"
		case h.until.IsZero():
			s = fmt.Sprintf("%s runs unleased processes on %s", h.who, gpuList(h.gpus))
		default:
			s = fmt.Sprintf("%s holds %s %s", h.who, gpuList(h.gpus), timeLeft(h.until, now))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// timeLeft says how long a lease still runs, or how long it is overdue (end
// action warn keeps it held past its end).
func timeLeft(end, now time.Time) string {
	if left := end.Sub(now); left > 0 {
		return "for " + FormatDuration(left) + " more"
	}
	return FormatDuration(now.Sub(end)) + " past its end"
}

func gpuList(g []int) string {
	if len(g) == 1 {
		return "GPU " + strconv.Itoa(g[0])
	}
	s := make([]string, len(g))
	for i, x := range g {
		s[i] = strconv.Itoa(x)
	}
	return "GPUs " + strings.Join(s, ",")
}
