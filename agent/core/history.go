package core

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/runrecord"
)

// historyCallTimeout bounds one node's answer to `dibs history`.
const historyCallTimeout = 5 * time.Second

// DefaultHistoryLimit is how many rows `dibs history` lists unless told.
const DefaultHistoryLimit = 500

// registerHistoryOps serves the record of each run to other agents: the
// ledger rows a filter matches, and one GPU's samples.
func (s *Service) registerHistoryOps() {
	m := s.deps.Peers
	peer.Handle(m, peer.RunHistory, func(ctx context.Context, from string, who peer.Actor, r peer.RunHistoryRequest) (peer.RunHistoryReply, error) {
		rows, more, err := s.deps.Node.Usage().History(r.Filter)
		if err != nil {
			return peer.RunHistoryReply{}, err
		}
		fit, cut := peer.FitHistory(rows, r.Series)
		return peer.RunHistoryReply{Entries: fit, More: more || cut}, nil
	})
	peer.Handle(m, peer.GPUSamples, func(ctx context.Context, from string, who peer.Actor, r peer.SamplesRequest) (peer.SamplesReply, error) {
		samples, window := s.deps.Node.Samples(r.GPU, r.Since)
		return peer.SamplesOf(samples, window), nil
	})
}

// History is `dibs history`: the ended runs and leases of every node that
// f matches, each node filtering its own ledger.
func (b *Bound) History(ctx context.Context, r api.HistoryRequest) (api.HistoryReport, error) {
	s := b.s
	f := r.Filter
	v := s.View()
	if f.Since.IsZero() {
		f.Since = v.Now.Add(-lease.DefaultHistoryWindow)
		if f.ID != "" || f.Job != "" {
			// One run or job: as far back as runs are kept one by one.
			f.Since = v.Now.Add(-lease.DefaultLedgerKeep)
		}
	}
	if f.Limit == 0 {
		f.Limit = DefaultHistoryLimit
	}
	if err := f.Validate(); err != nil {
		return api.HistoryReport{}, err
	}
	rep := api.HistoryReport{Since: f.Since.Round(0), Rows: []api.HistoryRow{}}
	var mu sync.Mutex
	var all []lease.LedgerEntry
	add := func(entries []lease.LedgerEntry, more bool) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, entries...)
		rep.More = rep.More || more
	}
	models := map[string]nodeprobe.Snapshot{}
	var wg sync.WaitGroup
	for i := range v.Nodes {
		n := &v.Nodes[i]
		models[n.Name] = n.Snap
		if f.Node != "" && n.Name != f.Node {
			continue
		}
		if n.Self {
			rows, more, err := s.deps.Node.Usage().History(f)
			if err != nil {
				return rep, err
			}
			add(rows, more)
			continue
		}
		if n.State != queue.NodeAlive && n.State != queue.NodeSuspect {
			rep.Missing = append(rep.Missing, n.Name)
			continue
		}
		if n.Protocol != 0 && n.Protocol < peer.RunHistorySince {
			rep.NotAsked = append(rep.NotAsked, n.Name)
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, historyCallTimeout)
			defer cancel()
			x, err := peer.Call(cctx, s.deps.Peers, name, peer.RunHistory, peer.As(b.c.User), peer.RunHistoryRequest{Filter: f, Series: f.ID != ""})
			var refused *refusal.Error
			switch {
			case errors.As(err, &refused) && (refused.Code == refusal.CodeNotFound || refused.Code == refusal.CodeInvalid):
				// An agent that does not know the request (it spoke no
				// protocol in gossip yet).
				mu.Lock()
				rep.NotAsked = append(rep.NotAsked, name)
				mu.Unlock()
			case err != nil:
				mu.Lock()
				rep.Missing = append(rep.Missing, name)
				mu.Unlock()
			default:
				add(x.Entries, x.More)
			}
		}(n.Name)
	}
	wg.Wait()
	slices.SortFunc(all, lease.ByEnd)
	if len(all) > f.Limit {
		all, rep.More = all[len(all)-f.Limit:], true
	}
	for _, e := range all {
		rep.Rows = append(rep.Rows, api.RowOf(e, modelOf(models[e.Node], e.GPUs)))
	}
	slices.Sort(rep.Missing)
	slices.Sort(rep.NotAsked)
	return rep, nil
}

// modelOf names the model of a node's GPUs gpus, as its last snapshot says.
func modelOf(snap nodeprobe.Snapshot, gpus []int) string {
	for _, g := range snap.GPUs {
		if len(gpus) > 0 && g.Index == gpus[0] {
			return g.Model
		}
	}
	return ""
}

// Samples is one GPU's recent readings on node (this one when empty).
func (b *Bound) Samples(ctx context.Context, node string, gpu int, since time.Time) (api.SamplesReport, error) {
	s := b.s
	if gpu < 0 || gpu >= words.MaxGPUsPerNode {
		return api.SamplesReport{}, refusal.Invalidf("gpu %d is not a GPU index", gpu)
	}
	if !words.ValidSince(since) {
		return api.SamplesReport{}, refusal.Invalidf("since is out of range")
	}
	if node == "" || node == s.cfg.Node {
		samples, window := s.deps.Node.Samples(gpu, since)
		return api.SamplesReport{Node: s.cfg.Node, GPU: gpu, Window: window, Samples: samples}, nil
	}
	if err := words.ValidNodeName(node); err != nil {
		return api.SamplesReport{}, refusal.Invalidf("%s is not a node name", words.QuoteInput(node))
	}
	v := s.View()
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.Name != node {
			continue
		}
		if n.Protocol != 0 && n.Protocol < peer.RunHistorySince {
			return api.SamplesReport{}, &refusal.Error{Code: refusal.CodeUnavailable, Msg: node + " runs an older dibs that keeps no GPU samples: upgrade it"}
		}
		cctx, cancel := context.WithTimeout(ctx, historyCallTimeout)
		defer cancel()
		x, err := peer.Call(cctx, s.deps.Peers, node, peer.GPUSamples, peer.As(b.c.User), peer.SamplesRequest{GPU: gpu, Since: since})
		if err != nil {
			return api.SamplesReport{}, err
		}
		return api.SamplesReport{Node: node, GPU: gpu, Window: x.Window, Samples: x.Samples()}, nil
	}
	return api.SamplesReport{}, &refusal.Error{Code: refusal.CodeNotFound, Msg: "no node " + words.QuoteInput(node) + " in the cluster"}
}

// RunningFigures is a running lease of this node's figures so far (for
// the metrics).
func (s *Service) RunningFigures(id string) (runrecord.Figures, bool) {
	return s.deps.Node.RunningFigures(id)
}
