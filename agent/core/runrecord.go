package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
	"github.com/dibs-gpu/dibs/queue"
)

// Run is what dibs knows of one run for `dibs export sbatch`: by queue id,
// its entry (queued or running) or, once it is gone, its ledger entries;
// by lease id, the lease (and its entry, if queued) or its ledger entry.
func (b *Bound) Run(ctx context.Context, id string) (api.RunRecord, error) {
	s := b.s
	v := s.View()
	rec := api.RunRecord{ID: id}
	entryID := ""
	if _, ok := queue.OriginOfQueueID(id); ok {
		entryID = id
	} else {
		if _, ok := lease.NodeOfID(id); !ok {
			return rec, refusal.Invalidf("%q is neither a queue id (node01-q7) nor a lease id (node01-42): `dibs queue` and `dibs usage` show them", id)
		}
		if l, ok := v.FindLease(id); ok && l.ReservedUntil.IsZero() {
			rec.State, rec.Lease = api.RunRunning, []lease.Lease{l}
			if l.Entry == "" {
				rec.Job = b.keptJob(ctx, l.Node, l.ID, l.User)
				return rec, nil
			}
			entryID, _, _ = strings.Cut(l.Entry, "#")
		}
	}
	if entryID != "" {
		for _, e := range v.Entries() {
			if e.ID != entryID {
				continue
			}
			// The entry's command, directory and environment only for
			// its holder and admins.
			e = e.ShownTo(b.c)
			rec.ID, rec.Entry, rec.State = e.ID, &e, api.RunQueued
			if e.Running {
				rec.State = api.RunRunning
				rec.Lease = nil
				for _, l := range v.Leases() {
					if l.Entry == e.Key() {
						rec.Lease = append(rec.Lease, l)
					}
				}
			}
			return rec, nil
		}
		if rec.State != "" {
			return rec, nil
		}
	}
	// Gone from the queue and the leases: its ledger entries, wherever
	// its ranks ran.
	since := v.Now.Add(-doctor.Keep)
	var latest string
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Alive() {
			continue
		}
		h, err := s.nodeHistory(ctx, n.Name, since, peer.HistoryLedger)
		if err != nil {
			continue
		}
		for _, e := range h.Entries {
			switch {
			case entryID != "" && strings.HasPrefix(e.Entry, entryID+"#"):
				// The last attempt is the run.
				if e.Entry > latest {
					latest, rec.Ended = e.Entry, nil
				}
				if e.Entry == latest {
					rec.Ended = append(rec.Ended, e)
				}
			case entryID == "" && e.LeaseID == id:
				rec.Ended = append(rec.Ended, e)
			}
		}
	}
	if len(rec.Ended) == 0 {
		return rec, &refusal.Error{Code: refusal.CodeNotFound, Msg: fmt.Sprintf("no run %s in the queue, the leases or the last %s of any node's ledger", id, words.FormatDuration(doctor.Keep))}
	}
	slices.SortFunc(rec.Ended, func(a, b lease.LedgerEntry) int { return cmp.Compare(a.Rank, b.Rank) })
	rec.State = api.RunFinished
	// Its command, as the node of its first rank kept it.
	first := rec.Ended[0]
	rec.Job = b.keptJob(ctx, first.Node, first.LeaseID, first.User)
	return rec, nil
}

// keptJob asks node for the command lease leaseID's session was started
// with (node.Node.KeptRun), for its holder and admins only: nil for anyone
// else, when the node kept none, or when it cannot be asked.
func (b *Bound) keptJob(ctx context.Context, node, leaseID, user string) *job.Job {
	if !b.c.SeesJobOf(user) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := peer.Call(cctx, b.s.deps.Peers, node, peer.History, peer.System, peer.HistoryRequest{Part: peer.HistoryRun, AfterID: leaseID})
	if err != nil || r.Run == nil || r.RunUser != user {
		return nil
	}
	return r.Run
}
