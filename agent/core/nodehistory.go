package core

// A node's history on the peer wire (peer.History): its ledger, its GPU
// samples and a kept run, served a bounded page at a time and read back
// page by page, for `dibs doctor`, `dibs replay` and `dibs export`.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/lease"
)

// history serves one page of this node's ledger or samples.
func (s *Service) history(r peer.HistoryRequest, d DoctorDeps) (peer.HistoryReply, error) {
	var out peer.HistoryReply
	size := 0
	fits := func(v any) bool {
		b, _ := json.Marshal(v)
		size += len(b) + 1
		return size <= peer.HistoryPageBytes && len(out.Entries)+len(out.Buckets) < peer.MaxHistoryItems
	}
	switch r.Part {
	case peer.HistoryLedger:
		// A page is a binary search into the ledger kept in memory, in
		// end order, and the page itself: never the whole ledger again.
		err := s.deps.Node.Usage().EachEnded(r.Since, r.AfterEnd, r.AfterID, func(e lease.LedgerEntry) bool {
			if e.Validate() != nil {
				return true // written by a broken agent: not worth a failed doctor
			}
			if !fits(e) {
				out.More = true
				return false
			}
			out.Entries = append(out.Entries, e)
			return true
		})
		if err != nil {
			return out, err
		}
	case peer.HistoryRun:
		if kr, ok := s.deps.Node.KeptRun(r.AfterID); ok {
			out.Run, out.RunUser = &kr.Job, kr.User
		}
	case peer.HistorySamples:
		if d.Samples == nil {
			return out, nil
		}
		for _, b := range d.Samples(r.Since) {
			if !r.AfterHour.IsZero() && !b.Hour.After(r.AfterHour) {
				continue
			}
			if !fits(b) {
				out.More = true
				break
			}
			out.Buckets = append(out.Buckets, b)
		}
	}
	return out, nil
}

// nodeHistory reads a node's whole history since a time, page by page.
func (s *Service) nodeHistory(ctx context.Context, node string, since time.Time, part string) (peer.HistoryReply, error) {
	var all peer.HistoryReply
	req := peer.HistoryRequest{Part: part, Since: since}
	for page := 0; page < 1000; page++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := peer.Call(cctx, s.deps.Peers, node, peer.History, peer.System, req)
		cancel()
		if err != nil {
			return all, err
		}
		all.Entries = append(all.Entries, r.Entries...)
		all.Buckets = append(all.Buckets, r.Buckets...)
		if !r.More {
			return all, nil
		}
		switch {
		case len(r.Entries) > 0:
			last := r.Entries[len(r.Entries)-1]
			req.AfterEnd, req.AfterID = last.End, last.LeaseID
		case len(r.Buckets) > 0:
			req.AfterHour = r.Buckets[len(r.Buckets)-1].Hour
		default:
			return all, fmt.Errorf("%s sent an empty page of its history", node)
		}
	}
	return all, fmt.Errorf("%s's history did not end after 1000 pages", node)
}
