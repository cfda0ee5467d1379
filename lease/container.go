package lease

import (
	"cmp"
	"slices"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// runsAsRoot reports whether a process runs as root, the way a rootful
// container runtime starts a container's processes.
func runsAsRoot(pr nodeprobe.Process) bool { return ownedByUser(pr, 0, "root") }

// ownsContainerProcess reports whether pr, a process on one of l's GPUs,
// counts as l's holder's because it is root's process in a container the
// holder adopted, or one started with the lease's DIBS_LEASE_ID in its
// environment. Only root's: a container's processes that run as some other
// user are that user's (and rootless podman's already run as the holder),
// so a container id cannot turn someone else's process into the holder's.
// Only on l's GPUs: Judge asks it only of the leases on the process's GPU.
func (l *Lease) ownsContainerProcess(pr nodeprobe.Process) bool {
	if pr.Container == "" || !runsAsRoot(pr) {
		return false
	}
	return slices.Contains(l.Containers, pr.Container) || pr.LeaseID != "" && pr.LeaseID == l.ID
}

// Owns reports whether pr, a process on one of l's GPUs, is the holder's
// as Judge counts it: by uid (by name when /proc gave none), or root's
// process in a container l adopted or started with l's DIBS_LEASE_ID. Front
// ends mark a process "not the holder" by it, so they agree with the flags.
func (l *Lease) Owns(pr nodeprobe.Process) bool { return ownedBy(pr, l) }

// callerLease is the lease of uid that covers pr's place on the GPU: the
// whole GPU, the MIG instance NVML places it on, or a part of the GPU; nil
// when uid holds none of them.
func (u *Use) callerLease(pr nodeprobe.Process, uid int) *Lease {
	switch {
	case u == nil:
		return nil
	case u.Whole != nil:
		if u.Whole.UID == uid {
			return u.Whole
		}
		return nil
	case pr.MIGDevice != "":
		if l := u.MIG(pr.MIGDevice); l != nil && l.UID == uid {
			return l
		}
		return nil
	}
	for _, l := range u.parts {
		if l.UID == uid {
			return l
		}
	}
	return nil
}

// PlanAdoptContainer records that container id is c's: every lease of c
// whose GPUs its processes run on adopts it, so root's processes of the
// container there count as c's. It refuses, changing nothing, a container
// with no process on this node's GPUs and one with a process on a GPU c
// does not hold (adopting it would hide a squat on someone else's GPU).
// Adopting a container a lease already has is no change. The leases come
// back changed, by id, for the caller to save; the table is not touched.
func (t *Table) PlanAdoptContainer(c Caller, id string, snap nodeprobe.Snapshot) ([]Lease, error) {
	short, err := job.ParseContainerID(id)
	if err != nil {
		return nil, err
	}
	uses := t.uses()
	var mine []*Lease
	for gi := range snap.GPUs {
		g := &snap.GPUs[gi]
		for _, pr := range g.Processes {
			if pr.Container != short {
				continue
			}
			u := uses[g.Index]
			l := u.callerLease(pr, c.UID)
			if l == nil {
				who := "not leased"
				if h := u.first(); h != nil {
					who = "held by " + h.User
				}
				return nil, refusal.Errorf(refusal.CodeForbidden, "container %s runs pid %d on GPU %d (%s), which you do not hold: only a container whose processes all run on your leased GPUs can be adopted", short, pr.PID, g.Index, who)
			}
			if !l.ReservedUntil.IsZero() {
				return nil, refusal.Errorf(refusal.CodeConflict, "container %s runs on GPU %d of gang reservation %s, not yet a lease: adopt it once the gang has started", short, g.Index, l.ID)
			}
			if !slices.Contains(mine, l) {
				mine = append(mine, l)
			}
		}
	}
	if len(mine) == 0 {
		return nil, refusal.Errorf(refusal.CodeNotFound, "no process of container %s runs on a GPU of %s: `dibs ls` shows each GPU process's container; adopt on the node it runs on", short, t.node)
	}
	out := make([]Lease, 0, len(mine))
	for _, l := range mine {
		nl := *l
		nl.Mono = nil
		if !slices.Contains(l.Containers, short) {
			if len(l.Containers) >= job.MaxContainers {
				return nil, refusal.Invalidf("lease %s has adopted %d containers already, the most it may: start a new lease for more", l.ID, job.MaxContainers)
			}
			nl.Containers = append(slices.Clone(l.Containers), short)
		}
		out = append(out, nl)
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
