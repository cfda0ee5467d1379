package nemesis

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// synth shapes a synthetic history: many clients claiming, releasing,
// extending and reading against a correct cluster (every operation takes
// effect at one instant inside its interval, against one true state), with
// leases expiring on their own and a few answers lost.
type synth struct {
	nodes, gpus, clients, ops int
	seed                      uint64
}

// planned is one operation before it is played: its times are fixed,
// what it does is decided at its effect time.
type planned struct {
	client         int
	call, eff, ret int64
	kind           string
	node           string
}

// synthLease is a lease of the true state.
type synthLease struct {
	l     lease.Lease
	alive bool
}

// synthRun plays a synth against the true state.
type synthRun struct {
	rng      *rand.Rand
	h        History
	holders  map[string][]string
	token    map[string]uint64
	seq      map[string]int
	leases   map[string]*synthLease
	believed map[int][]string
	ended    []string
	nreq     int
}

func (s synth) history() *History {
	rng := rand.New(rand.NewPCG(s.seed, 1))
	us := func(lo, hi int) int64 { return int64(lo+rng.IntN(hi-lo+1)) * int64(time.Microsecond) }
	var plan []planned
	nodes := make([]string, s.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%d", i+1)
	}
	kinds := []string{"read", "read", "read", "read", "claim", "claim", "claim", "release", "release", "extend", "stale"}
	end := int64(0)
	for c := range s.clients {
		t := us(0, 1000)
		for range s.ops / s.clients {
			call := t + us(0, 1500)
			eff := call + us(50, 800)
			ret := eff + us(50, 800)
			plan = append(plan, planned{client: c, call: call, eff: eff, ret: ret, kind: kinds[rng.IntN(len(kinds))], node: nodes[rng.IntN(len(nodes))]})
			t, end = ret, max(end, ret)
		}
	}
	for _, n := range nodes {
		for t := us(0, 4000); t < end; t += us(2000, 6000) {
			plan = append(plan, planned{client: -1, eff: t, kind: "expire", node: n})
		}
	}
	slices.SortStableFunc(plan, func(a, b planned) int { return cmp.Compare(a.eff, b.eff) })
	r := &synthRun{rng: rng, holders: map[string][]string{}, token: map[string]uint64{}, seq: map[string]int{},
		leases: map[string]*synthLease{}, believed: map[int][]string{}}
	r.h.GPUs = map[string]int{}
	for _, n := range nodes {
		r.h.GPUs[n] = s.gpus
		r.holders[n] = make([]string, s.gpus)
	}
	for _, p := range plan {
		r.play(p)
	}
	r.h.End = end + int64(time.Second)
	return &r.h
}

func (r *synthRun) write(w Write, at int64) {
	r.seq[w.Node]++
	w.Seq, w.Start, w.Done = r.seq[w.Node], at, at+int64(time.Microsecond)
	r.h.Writes = append(r.h.Writes, w)
}

func (r *synthRun) end(id string, reason lease.EndReason, at int64) {
	sl := r.leases[id]
	sl.alive = false
	for _, g := range sl.l.GPUs {
		r.holders[sl.l.Node][g] = ""
	}
	r.ended = append(r.ended, id)
	r.write(Write{Node: sl.l.Node, Kind: WriteEnd, Ledger: lease.LedgerEntry{LeaseID: id, Node: sl.l.Node, GPUs: sl.l.GPUs, Reason: string(reason)}}, at)
}

func (r *synthRun) play(p planned) {
	o := Op{Client: p.client, Kind: OpRead, Via: p.node, Node: p.node, Call: p.call, Return: p.ret, Outcome: OK}
	mine := r.believed[p.client]
	switch {
	case p.kind == "expire":
		var alive []string
		for _, id := range r.holders[p.node] {
			if id != "" && !slices.Contains(alive, id) {
				alive = append(alive, id)
			}
		}
		if len(alive) > 0 {
			r.end(alive[r.rng.IntN(len(alive))], lease.EndExpired, p.eff)
		}
		return
	case p.kind == "claim":
		r.claim(&o, p)
	case p.kind == "release" && len(mine) > 0, p.kind == "extend" && len(mine) > 0:
		id := mine[0]
		if p.kind == "release" {
			r.believed[p.client] = mine[1:]
		}
		sl := r.leases[id]
		o.Kind, o.LeaseID, o.Node, o.Via = OpRelease, id, sl.l.Node, sl.l.Node
		if p.kind == "extend" {
			o.Kind = OpExtend
		}
		switch {
		case !sl.alive:
			o.Outcome, o.Code = Refused, refusal.CodeNotFound
		case p.kind == "release":
			r.end(id, lease.EndReleased, p.eff)
		default:
			r.write(Write{Node: sl.l.Node, Kind: WritePut, Lease: sl.l}, p.eff)
		}
	case p.kind == "stale" && len(r.ended) > 0:
		id := r.ended[r.rng.IntN(len(r.ended))]
		sl := r.leases[id]
		o.Kind, o.LeaseID, o.Node, o.Via, o.Outcome, o.Code = OpRelease, id, sl.l.Node, sl.l.Node, Refused, refusal.CodeNotFound
	default:
		o.Holders = map[int]string{}
		for g, id := range r.holders[p.node] {
			o.Holders[g] = id
		}
	}
	r.h.Ops = append(r.h.Ops, o)
}

// claim grants one or two free GPUs, or refuses; a few answers are lost
// (half of those claims took effect).
func (r *synthRun) claim(o *Op, p planned) {
	r.nreq++
	o.Kind, o.RequestID = OpClaim, fmt.Sprintf("req-%08d", r.nreq)
	var gpus []int
	if r.rng.IntN(2) == 0 {
		o.GPUs = []int{r.rng.IntN(len(r.holders[p.node]))}
		if r.holders[p.node][o.GPUs[0]] == "" {
			gpus = o.GPUs
		}
	} else {
		o.Count = 1 + r.rng.IntN(2)
		for g, id := range r.holders[p.node] {
			if id == "" && len(gpus) < o.Count {
				gpus = append(gpus, g)
			}
		}
		if len(gpus) < o.Count {
			gpus = nil
		}
	}
	lost := r.rng.IntN(50) == 0
	if lost {
		o.Outcome, o.Return, o.Err = Unknown, Never, "connection reset"
		if r.rng.IntN(2) == 0 {
			gpus = nil
		}
	}
	if gpus == nil {
		if !lost {
			o.Outcome, o.Code = Refused, refusal.CodeConflict
		}
		return
	}
	r.token[p.node]++
	l := lease.Lease{ID: lease.LeaseID(p.node, r.token[p.node]), Node: p.node, Token: r.token[p.node], GPUs: gpus, RequestID: o.RequestID}
	r.leases[l.ID] = &synthLease{l: l, alive: true}
	for _, g := range gpus {
		r.holders[p.node][g] = l.ID
	}
	r.write(Write{Node: p.node, Kind: WritePut, Lease: l}, p.eff)
	if !lost {
		o.LeaseID, o.Lease = l.ID, &l
		r.believed[p.client] = append(r.believed[p.client], l.ID)
	}
}

func TestCheckSyntheticHistoryPasses(t *testing.T) {
	h := synth{nodes: 3, gpus: 4, clients: 12, ops: 3000, seed: 1}.history()
	cut := CheckWith(h, CheckOptions{MinChunk: 16})
	if cut.Failed() || cut.Undecided > 0 {
		t.Fatalf("a correct cluster's history was reported broken:\n%s", cut)
	}
	if cut.Chunks <= cut.GPUs {
		t.Errorf("the GPU histories were not cut at quiescent points: %d chunks for %d GPUs", cut.Chunks, cut.GPUs)
	}
	whole := CheckWith(h, CheckOptions{MinChunk: 1 << 30})
	if whole.Failed() || whole.Chunks != whole.GPUs {
		t.Fatalf("uncut, the same history should pass in one chunk per GPU:\n%s", whole)
	}
}

// injectDoubleGrant adds an OK claim of a GPU while a read shows it held,
// granted by its node with a fresh token. It returns the new lease's id.
func injectDoubleGrant(t *testing.T, h *History) string {
	t.Helper()
	for i := len(h.Ops) / 2; i < len(h.Ops); i++ {
		o := h.Ops[i]
		if o.Kind != OpRead || o.Holders[0] == "" {
			continue
		}
		l := lease.Lease{ID: lease.LeaseID(o.Node, 999999), Node: o.Node, Token: 999999, GPUs: []int{0}}
		h.Ops = append(h.Ops, Op{Client: 999, Kind: OpClaim, Via: o.Node, Node: o.Node, GPUs: []int{0}, LeaseID: l.ID, Lease: &l,
			Call: o.Call, Return: o.Return, Outcome: OK})
		h.Writes = append(h.Writes, Write{Node: o.Node, Kind: WritePut, Lease: l, Start: o.Call, Done: o.Call + 1})
		slices.SortStableFunc(h.Writes, func(a, b Write) int { return cmp.Compare(a.Start, b.Start) })
		seq := map[string]int{}
		for i := range h.Writes {
			seq[h.Writes[i].Node]++
			h.Writes[i].Seq = seq[h.Writes[i].Node]
		}
		return l.ID
	}
	t.Fatal("no read in the second half of the history shows GPU 0 held")
	return ""
}

func TestCheckFindsAnInjectedDoubleGrantWithAShortHistory(t *testing.T) {
	h := synth{nodes: 2, gpus: 2, clients: 6, ops: 2000, seed: 2}.history()
	id := injectDoubleGrant(t, h)
	node, _ := lease.NodeOfID(id)
	for _, minChunk := range []int{16, 1 << 30} {
		r := CheckWith(h, CheckOptions{MinChunk: minChunk, VisualizeDir: t.TempDir()})
		var v *Violation
		for i := range r.Violations {
			if r.Violations[i].Check == CheckGPU && r.Violations[i].Subject == node+" GPU 0" {
				v = &r.Violations[i]
			}
		}
		if v == nil {
			t.Fatalf("chunks of at least %d: the double grant of %s GPU 0 was not found:\n%s", minChunk, node, r)
		}
		onGPU := 0
		for _, o := range h.Ops {
			if o.Node == node && (o.Kind == OpRead || (o.Lease != nil && slices.Contains(o.Lease.GPUs, 0))) {
				onGPU++
			}
		}
		hist := strings.Join(v.History, "\n")
		if len(v.History) > maxLines+4 || len(v.History) >= onGPU {
			t.Errorf("chunks of at least %d: the shortest history has %d lines (the GPU's has %d ops):\n%s", minChunk, len(v.History), onGPU, hist)
		}
		if !strings.Contains(hist, "acquire "+id) || !strings.Contains(hist, "visualization: ") {
			t.Errorf("chunks of at least %d: the history does not show the injected grant %s and its visualization:\n%s", minChunk, id, hist)
		}
	}
}

// BenchmarkCheck100k checks a synthetic history of 100,000 client
// operations on 4 nodes of 8 GPUs.
func BenchmarkCheck100k(b *testing.B) {
	h := synth{nodes: 4, gpus: 8, clients: 32, ops: 100000, seed: 3}.history()
	b.ResetTimer()
	for b.Loop() {
		r := Check(h)
		if r.Failed() || r.Undecided > 0 {
			b.Fatalf("a correct history failed:\n%s", r)
		}
	}
	b.ReportMetric(float64(len(h.Ops)), "ops/history")
}
