package lease

import (
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// PlanAdopt takes a run started without a lease into one, on the GPUs its
// process uses, if the caller owns the process and nobody else holds them.
func (t *Table) PlanAdopt(c Caller, pid int, d time.Duration, note string, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	var gpus []int
	var owner *nodeprobe.Process
	var migs []string
	var mig *nodeprobe.MIGDevice
	var migGPU *nodeprobe.GPU
	for gi := range snap.GPUs {
		g := &snap.GPUs[gi]
		for i := range g.Processes {
			// A pid on several MIG slices of one GPU is listed once per slice.
			if g.Processes[i].PID == pid {
				if !slices.Contains(gpus, g.Index) {
					gpus = append(gpus, g.Index)
				}
				owner = &g.Processes[i]
				if u := owner.MIGDevice; u != "" && !slices.Contains(migs, u) {
					migs = append(migs, u)
					migGPU = g
					for k := range g.MIGDevices {
						if g.MIGDevices[k].UUID == u {
							mig = &g.MIGDevices[k]
						}
					}
				}
			}
		}
	}
	if owner == nil {
		return Lease{}, errorf(CodeNotFound, "pid %d is not on any GPU of %s: `dibs ls` lists the processes it sees", pid, t.node)
	}
	if owner.UID != c.UID && !c.Admin {
		return Lease{}, errorf(CodeForbidden, "pid %d belongs to %s, not you: only its owner can adopt it", pid, ownerName(*owner))
	}
	if len(migs) > 1 || len(migs) == 1 && (len(gpus) > 1 || mig == nil) {
		return Lease{}, Invalidf("pid %d runs on several MIG instances or GPUs: claim each with --mig and run it again under the lease", pid)
	}
	uses := t.uses()
	for _, g := range gpus {
		u := uses[g]
		l := u.first()
		if mig != nil {
			l = u.mig(mig.UUID)
			if l == nil && u != nil {
				l = u.whole
			}
		}
		if l != nil {
			if l.UID == owner.UID {
				return Lease{}, errorf(CodeConflict, "GPU %d is already in your lease %s", g, l.ID)
			}
			return Lease{}, errorf(CodeConflict, "GPU %d is held by %s (lease %s): pid %d runs on someone else's GPU", g, l.User, l.ID, pid)
		}
	}
	dur, err := checkDuration(d, KindInteractive, p)
	if err != nil {
		return Lease{}, err
	}
	if note == "" {
		// The command is whatever the process calls itself: escape it, and
		// keep the note within what a typed one may be.
		note = clipNote(fmt.Sprintf("adopted pid %d (%s)", pid, termsafe.String(owner.Command)))
	} else if err := checkNote(note); err != nil {
		return Lease{}, err
	}
	token := t.lastToken + 1
	l := Lease{
		ID: LeaseID(t.node, token), Node: t.node, GPUs: gpus,
		User: owner.User, UID: owner.UID, Token: token, Kind: KindInteractive,
		Note: note, StartedAt: now.Round(0), ExpiresAt: now.Round(0).Add(dur),
	}
	if mig != nil {
		l.MIG, l.Share = mig.UUID, share(mig.MemoryTotalMiB, migGPU.MemoryTotalMiB)
	}
	return l, nil
}

// ByRequest finds the lease a caller's earlier claim with the same request
// id made, so a retried claim whose answer was lost gets that lease back
// instead of more GPUs.
func (t *Table) ByRequest(uid int, requestID string) (Lease, bool) {
	if requestID == "" {
		return Lease{}, false
	}
	for _, e := range t.leases {
		if e.UID == uid && e.RequestID == requestID {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// ByEntry finds the lease (or reservation) started for a queued attempt, so
// a retried start gets what the first one got.
func (t *Table) ByEntry(key string) (Lease, bool) {
	for _, e := range t.leases {
		if e.Entry == key {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// RanBefore reports how an attempt that already ran here ended: an attempt
// never runs twice on one node, whatever a late or repeated start says.
func RanBefore(ended []EndedRun, key string) (EndedRun, bool) {
	for _, x := range ended {
		if x.Entry == key && !x.Reserved {
			return x, true
		}
	}
	return EndedRun{}, false
}

// ValidRequestID accepts the ids clients put on claims: 8 to 64 letters,
// digits, '-' and '_'.
func ValidRequestID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
