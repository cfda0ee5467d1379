package lease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func checkNamed(c Caller, req Claim, snap nodeprobe.Snapshot, uses map[int]*Use, now time.Time, node string) ([]int, error) {
	seen := make(map[int]bool)
	gpus := make([]int, 0, len(req.GPUs))
	for _, g := range req.GPUs {
		if seen[g] {
			return nil, refusal.Invalidf("GPU %d named twice", g)
		}
		seen[g] = true
		gpu := FindGPU(snap, g)
		if gpu == nil {
			return nil, refusal.Invalidf("no GPU %d on %s: it has GPUs %s", g, node, indexRange(snap))
		}
		// Down whoever holds it: the probe cannot read it, so neither can a job.
		if gpu.Error != "" {
			return nil, refusal.Errorf(refusal.CodeUnavailable, "GPU %d on %s is down (%s): pick another GPU", g, node, termsafe.String(gpu.Error))
		}
		if !MatchModel(gpu, req.Model) {
			return nil, refusal.Invalidf("GPU %d on %s is an %s, not a %s: pick another GPU, or leave --model out", g, node, termsafe.String(gpu.Model), termsafe.String(req.Model))
		}
		u := uses[g]
		if l := u.first(); l != nil && !l.Partial() {
			if l.UID == c.UID {
				return nil, refusal.Errorf(refusal.CodeConflict, "you already hold GPU %d %s (lease %s, until %s): use that lease, or pick another GPU", g, timeLeft(l.ExpiresAt, now), l.ID, l.ExpiresAt.Local().Format("Mon 15:04"))
			}
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d is held by %s %s (lease %s, until %s): pick another GPU, or ask %s", g, l.User, timeLeft(l.ExpiresAt, now), l.ID, l.ExpiresAt.Local().Format("Mon 15:04"), l.User)
		}
		if gpu.MIG == nodeprobe.MIGEnabled {
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d on %s is split into MIG instances (%s): claim one with --mig PROFILE", g, node, MIGProfiles(snap))
		}
		if u != nil && len(u.parts) > 0 {
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d is shared: %s budgets of %s of its %s: ask for a budget beside them with --mem, or pick another GPU", g, partHolders(u), FormatMem(u.budget), FormatMem(gpu.MemoryTotalMiB))
		}
		if len(gpu.Processes) > 0 && !req.Force {
			pr := gpu.Processes[0]
			return nil, refusal.Errorf(refusal.CodeConflict, "GPU %d has no lease but %s's process %s (pid %d) is running on it: pick another GPU, or add --force if you know it is safe", g, ownerName(pr), termsafe.String(pr.Command), pr.PID)
		}
		gpus = append(gpus, g)
	}
	slices.Sort(gpus)
	return gpus, nil
}

// partHolders names the holders of a GPU's parts with the verb: "alice
// holds", "alice and bob hold".
func partHolders(u *Use) string {
	var names []string
	for _, l := range u.parts {
		if !slices.Contains(names, l.User) {
			names = append(names, l.User)
		}
	}
	if len(names) == 1 {
		return names[0] + " holds"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " hold"
}

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
// a refusal tells the person whom to ask; what c holds is said as "you
// hold". othersHold is false when nobody but c holds or runs anything there.
func describeBusy(c Caller, snap nodeprobe.Snapshot, uses map[int]*Use, now time.Time) (busy string, othersHold bool) {
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
			who := l.User
			if l.UID == c.UID {
				who = "you"
			} else {
				othersHold = true
			}
			add("lease "+l.ID, who, g.Index, l.ExpiresAt)
		} else if g.MIG == nodeprobe.MIGEnabled {
			othersHold = true
			add("mig", "", g.Index, time.Time{})
		} else if l != nil {
			othersHold = true
			add("shared", "", g.Index, time.Time{})
		} else if len(g.Processes) > 0 {
			who := ownerName(g.Processes[0])
			if g.Processes[0].UID == c.UID && c.UID >= 0 {
				who = "you"
			} else {
				othersHold = true
			}
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
		case h.until.IsZero() && h.who == "you":
			s = fmt.Sprintf("you run unleased processes on %s", gpuList(h.gpus))
		case h.until.IsZero():
			s = fmt.Sprintf("%s runs unleased processes on %s", h.who, gpuList(h.gpus))
		case h.who == "you":
			s = fmt.Sprintf("you hold %s %s", gpuList(h.gpus), timeLeft(h.until, now))
		default:
			s = fmt.Sprintf("%s holds %s %s", h.who, gpuList(h.gpus), timeLeft(h.until, now))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; "), othersHold
}
