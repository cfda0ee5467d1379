package lease

import (
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
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
		return Lease{}, refusal.Errorf(refusal.CodeNotFound, "pid %d is not on any GPU of %s: `dibs ls` lists the processes it sees", pid, t.node)
	}
	if owner.UID != c.UID && !c.Admin {
		if owner.Container != "" && runsAsRoot(*owner) {
			return Lease{}, refusal.Errorf(refusal.CodeForbidden, "pid %d is root's, in container %s: if that container is yours and runs on your leased GPUs, `dibs adopt --container %s` makes its processes yours", pid, termsafe.String(owner.Container), termsafe.String(owner.Container))
		}
		return Lease{}, refusal.Errorf(refusal.CodeForbidden, "pid %d belongs to %s, not you: only its owner can adopt it", pid, ownerName(*owner))
	}
	if len(migs) > 1 || len(migs) == 1 && (len(gpus) > 1 || mig == nil) {
		return Lease{}, refusal.Invalidf("pid %d runs on several MIG instances or GPUs: claim each with --mig and run it again under the lease", pid)
	}
	uses := t.uses()
	for _, g := range gpus {
		u := uses[g]
		l := u.first()
		if mig != nil {
			l = u.MIG(mig.UUID)
			if l == nil && u != nil {
				l = u.Whole
			}
		}
		if l != nil {
			if l.UID == owner.UID {
				return Lease{}, refusal.Errorf(refusal.CodeConflict, "GPU %d is already in your lease %s", g, l.ID)
			}
			return Lease{}, refusal.Errorf(refusal.CodeConflict, "GPU %d is held by %s (lease %s): pid %d runs on someone else's GPU", g, l.User, l.ID, pid)
		}
	}
	dur, err := CheckDuration(d, KindInteractive, p)
	if err != nil {
		return Lease{}, err
	}
	if note == "" {
		// The command is whatever the process calls itself: escape it, and
		// keep the note within what a typed one may be.
		note = clipNote(fmt.Sprintf("adopted pid %d (%s)", pid, termsafe.String(owner.Command)))
	} else if err := words.CheckNote(note); err != nil {
		return Lease{}, err
	}
	token := t.lastToken + 1
	l := Lease{
		ID: LeaseID(t.node, token), Node: t.node, GPUs: gpus,
		User: owner.User, UID: owner.UID, Token: token, Kind: KindInteractive,
		Note: note, StartedAt: now.Round(0), ExpiresAt: now.Round(0).Add(dur),
	}
	if mig != nil {
		l.MIG, l.Share = mig.UUID, Share(mig.MemoryTotalMiB, migGPU.MemoryTotalMiB)
	}
	return l, nil
}
