package queue_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

var carol = lease.Caller{UID: 1003, User: "carol"}

// snode is an alive node of n GPUs in NVLink islands of four, holding leases.
func snode(name string, n int, leases ...lease.Lease) lease.SchedNode {
	sizes := []int{}
	for left := n; left > 0; left -= 4 {
		sizes = append(sizes, min(left, 4))
	}
	for i := range leases {
		leases[i].Node = name
		leases[i].ID = lease.LeaseID(name, leases[i].Token)
	}
	return lease.SchedNode{Name: name, Alive: true, Snap: islands(sizes...), Leases: leases}
}

// on is a lease of c on gpus from start until end.
func on(token uint64, c lease.Caller, gpus []int, start, end time.Time) lease.Lease {
	return lease.Lease{Token: token, User: c.User, UID: c.UID, GPUs: gpus, Kind: lease.KindBatch, StartedAt: start, ExpiresAt: end}
}

// ask is a queue entry of c for nodes × g GPUs for dur, submitted at.
func ask(id string, c lease.Caller, nodes, g int, dur time.Duration, at time.Time) queue.QueueEntry {
	return queue.QueueEntry{ID: id, Origin: "gpu-01", User: c.User, UID: c.UID, SubmittedAt: at, Nodes: nodes, GPUsPerNode: g, Duration: dur, Kind: lease.KindBatch}
}

func gpus(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// started names the plan's starts as "id@node:gpus+node:gpus".
func started(p queue.Plan) []string {
	var out []string
	for _, s := range p.Start {
		var ranks []string
		for _, r := range s.Ranks {
			ranks = append(ranks, fmt.Sprintf("%s:%v", r.Node, r.GPUs))
		}
		tag := ""
		if s.Backfill {
			tag += " backfill"
		}
		if s.Borrowed {
			tag += " borrowed"
		}
		out = append(out, s.Entry.ID+"@"+strings.Join(ranks, "+")+tag)
	}
	return out
}

func order(p queue.Plan) []string {
	var out []string
	for _, r := range p.Order {
		out = append(out, r.Entry.ID)
	}
	return out
}

func ranked(t *testing.T, p queue.Plan, id string) queue.Ranked {
	t.Helper()
	for _, r := range p.Order {
		if r.Entry.ID == id {
			return r
		}
	}
	t.Fatalf("entry %s is not in the order %v", id, order(p))
	return queue.Ranked{}
}

func reclaimed(p queue.Plan) []string {
	var out []string
	for _, r := range p.Reclaim {
		out = append(out, r.Lease.ID+" "+r.Reason+" for "+r.For)
	}
	return out
}

func checkList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestScheduleOrder(t *testing.T) {
	full := snode("gpu-01", 8, on(1, carol, gpus(0, 7), t0, t0.Add(time.Hour)))
	// alice used 100 GPU-hours this week, bob one.
	usage := queue.Usage{"alice": 100 * 3600, "bob": 3600}
	entries := []queue.QueueEntry{
		ask("gpu-01-q1", alice, 1, 1, time.Hour, t0.Add(-3*time.Hour)),
		ask("gpu-01-q2", bob, 1, 1, time.Hour, t0.Add(-time.Hour)),
		ask("gpu-01-q3", alice, 1, 1, time.Hour, t0.Add(-2*time.Hour)),
		ask("gpu-01-q4", bob, 1, 1, time.Hour, t0.Add(-time.Hour)), // ties q2 but for the id
	}
	p := queue.Schedule(entries, []lease.SchedNode{full}, usage, t0, queue.SchedConfig{})
	checkList(t, "order: the light user first although later, then by submit time, then id",
		order(p), []string{"gpu-01-q2", "gpu-01-q4", "gpu-01-q1", "gpu-01-q3"})
	for i, r := range p.Order {
		if r.Position != i+1 {
			t.Errorf("%s position = %d, want %d", r.Entry.ID, r.Position, i+1)
		}
	}
	if a, b := ranked(t, p, "gpu-01-q1"), ranked(t, p, "gpu-01-q2"); a.Priority >= b.Priority {
		t.Errorf("heavy user's priority %v is not below light user's %v", a.Priority, b.Priority)
	}

	// Age: waiting long enough lifts the heavy user's old request above a
	// fresh light one.
	later := t0.Add(7 * day)
	fresh := ask("gpu-01-q9", bob, 1, 1, time.Hour, later)
	old := entries[0]
	p = queue.Schedule([]queue.QueueEntry{fresh, old}, []lease.SchedNode{full}, queue.Usage{"alice": 3600, "bob": 3000}, later, queue.SchedConfig{})
	checkList(t, "order after a week of waiting", order(p), []string{"gpu-01-q1", "gpu-01-q9"})
}

func TestScheduleSameWhateverTheInputOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		nodes, entries, usage := randomCluster(rng)
		want := queue.Schedule(entries, nodes, usage, t0, queue.SchedConfig{Quotas: map[string]int{"alice": 8, "bob": 4}})
		for range 3 {
			e2, n2 := slices.Clone(entries), slices.Clone(nodes)
			rng.Shuffle(len(e2), func(i, j int) { e2[i], e2[j] = e2[j], e2[i] })
			rng.Shuffle(len(n2), func(i, j int) { n2[i], n2[j] = n2[j], n2[i] })
			got := queue.Schedule(e2, n2, usage, t0, queue.SchedConfig{Quotas: map[string]int{"alice": 8, "bob": 4}})
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: shuffled inputs give another plan:\n got %v %v\nwant %v %v", round, order(got), started(got), order(want), started(want))
			}
		}
	}
}

func TestBackfill(t *testing.T) {
	// gpu-01: 4 GPUs held for two more hours, 4 free; gpu-02: 2 free.
	nodes := []lease.SchedNode{
		snode("gpu-01", 8, on(1, carol, gpus(0, 3), t0.Add(-time.Hour), t0.Add(2*time.Hour))),
		snode("gpu-02", 2),
	}
	head := ask("gpu-01-q1", alice, 1, 8, 4*time.Hour, t0.Add(-time.Hour))
	tests := []struct {
		name    string
		next    queue.QueueEntry
		started []string
	}{
		{"short enough to end before the head can start", ask("gpu-01-q2", bob, 1, 4, time.Hour, t0), []string{"gpu-01-q2@gpu-01:[4 5 6 7] backfill"}},
		{"ends exactly at the shadow time", ask("gpu-01-q2", bob, 1, 4, 2*time.Hour, t0), []string{"gpu-01-q2@gpu-01:[4 5 6 7] backfill"}},
		{"too long: it would delay the head", ask("gpu-01-q2", bob, 1, 4, 3*time.Hour, t0), nil},
		{"long, but on GPUs the head does not need", ask("gpu-01-q2", bob, 1, 2, 24*time.Hour, t0), []string{"gpu-01-q2@gpu-02:[0 1] backfill"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule([]queue.QueueEntry{head, tt.next}, nodes, nil, t0, queue.SchedConfig{})
			checkList(t, "starts", started(p), tt.started)
			h := ranked(t, p, head.ID)
			if want := t0.Add(2 * time.Hour); !h.EstStart.Equal(want) {
				t.Errorf("head EstStart = %v, want %v (when carol's lease ends)", h.EstStart, want)
			}
			if !strings.Contains(h.Waiting, "next to start") {
				t.Errorf("head waiting = %q, want it to say it is next", h.Waiting)
			}
		})
	}
}

func TestGangAllOrNothing(t *testing.T) {
	nodes := []lease.SchedNode{
		snode("gpu-01", 4),
		snode("gpu-02", 4),
		snode("gpu-03", 4, on(1, carol, gpus(0, 1), t0, t0.Add(time.Hour))),
	}
	tests := []struct {
		name    string
		e       queue.QueueEntry
		started []string
	}{
		{"2×4 fits on the two whole nodes", ask("gpu-01-q1", alice, 2, 4, time.Hour, t0), []string{"gpu-01-q1@gpu-01:[0 1 2 3]+gpu-02:[0 1 2 3]"}},
		{"3×4 does not fit and nothing partial starts", ask("gpu-01-q1", alice, 3, 4, time.Hour, t0), nil},
		{"3×2 packs onto the partly used node too", ask("gpu-01-q1", alice, 3, 2, time.Hour, t0), []string{"gpu-01-q1@gpu-01:[0 1]+gpu-02:[0 1]+gpu-03:[2 3]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule([]queue.QueueEntry{tt.e}, nodes, nil, t0, queue.SchedConfig{})
			checkList(t, "starts", started(p), tt.started)
		})
	}
}

// commit turns a plan's starts into leases on the nodes, as the agents do once
// every reservation of a gang holds.
func commit(nodes []lease.SchedNode, p queue.Plan, now time.Time, token *uint64) {
	for _, s := range p.Start {
		for rank, r := range s.Ranks {
			for i := range nodes {
				if nodes[i].Name != r.Node {
					continue
				}
				*token++
				l := on(*token, lease.Caller{User: s.Entry.User}, r.GPUs, now, now.Add(s.Entry.Duration))
				l.Node, l.ID, l.Entry, l.Rank, l.Borrowed = r.Node, lease.LeaseID(r.Node, *token), s.Entry.Key(), rank, s.Borrowed
				if s.Entry.Nodes > 1 {
					l.Gang = s.Entry.ID
				}
				nodes[i].Leases = append(nodes[i].Leases, l)
			}
		}
	}
}

func TestCompetingGangs(t *testing.T) {
	nodes := []lease.SchedNode{snode("gpu-01", 4), snode("gpu-02", 4), snode("gpu-03", 4)}
	g1 := ask("gpu-01-q1", alice, 2, 4, time.Hour, t0.Add(-time.Minute))
	g2 := ask("gpu-02-q1", bob, 2, 4, time.Hour, t0)
	entries := []queue.QueueEntry{g1, g2}

	p := queue.Schedule(entries, nodes, nil, t0, queue.SchedConfig{})
	checkList(t, "pass 1 starts", started(p), []string{"gpu-01-q1@gpu-01:[0 1 2 3]+gpu-02:[0 1 2 3]"})
	if w := ranked(t, p, g2.ID); !w.EstStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("second gang EstStart = %v, want %v (when the first ends)", w.EstStart, t0.Add(time.Hour))
	}

	// The first gang's reservations are out: it is starting, the second still
	// does not fit and holds nothing.
	var token uint64
	commit(nodes, p, t0, &token)
	for i := range nodes {
		for j := range nodes[i].Leases {
			nodes[i].Leases[j].ReservedUntil = t0.Add(30 * time.Second)
		}
	}
	now := t0.Add(10 * time.Second)
	p = queue.Schedule(entries, nodes, nil, now, queue.SchedConfig{})
	checkList(t, "pass 2 starts", started(p), nil)
	if w := ranked(t, p, g1.ID).Waiting; w != "starting" {
		t.Errorf("first gang waiting = %q, want starting", w)
	}

	// The reservations were never committed and expired: the first gang is
	// planned again, whole, the second still waits whole.
	now = t0.Add(time.Minute)
	p = queue.Schedule(entries, nodes, nil, now, queue.SchedConfig{})
	checkList(t, "pass 3 starts", started(p), []string{"gpu-01-q1@gpu-01:[0 1 2 3]+gpu-02:[0 1 2 3]"})

	// Committed this time; the first gang runs and leaves the queue.
	for i := range nodes {
		nodes[i].Leases = nil
	}
	commit(nodes, p, now, &token)
	entries[0].Running = true
	p = queue.Schedule(entries, nodes, nil, now.Add(time.Minute), queue.SchedConfig{})
	checkList(t, "pass 4 starts", started(p), nil)
	checkList(t, "pass 4 order", order(p), []string{g2.ID})

	// Its leases end: the second gang starts.
	for i := range nodes {
		nodes[i].Leases = nil
	}
	p = queue.Schedule(entries[1:], nodes, nil, now.Add(time.Hour), queue.SchedConfig{})
	checkList(t, "pass 5 starts", started(p), []string{"gpu-02-q1@gpu-01:[0 1 2 3]+gpu-02:[0 1 2 3]"})
}

func TestScheduleFreeGPUs(t *testing.T) {
	reservation := on(1, carol, gpus(0, 3), t0, t0.Add(time.Hour))
	reservation.ReservedUntil = t0.Add(20 * time.Second)
	expired := reservation
	expired.ReservedUntil = t0.Add(-time.Second)
	overdue := on(1, carol, gpus(0, 3), t0.Add(-2*time.Hour), t0.Add(-time.Hour))
	dead := snode("gpu-00", 8)
	dead.Alive = false
	squatted := snode("gpu-01", 4)
	squatted.Snap = withProc(squatted.Snap, 1, proc(77, bob, "python"))
	broken := snode("gpu-01", 4)
	broken.Snap = withDown(broken.Snap, 2)

	e := ask("gpu-01-q1", alice, 1, 4, time.Hour, t0)
	tests := []struct {
		name    string
		nodes   []lease.SchedNode
		started []string
		waiting string
	}{
		{"a dead node is never used", []lease.SchedNode{dead}, nil, "no node that is up has 4 working GPUs"},
		{"a dead node is never used, even when it would pack best", []lease.SchedNode{dead, snode("gpu-01", 8)}, []string{"gpu-01-q1@gpu-01:[0 1 2 3]"}, ""},
		{"a live reservation holds its GPUs", []lease.SchedNode{snode("gpu-01", 4, reservation)}, nil, "next to start"},
		{"an expired reservation holds nothing", []lease.SchedNode{snode("gpu-01", 4, expired)}, []string{"gpu-01-q1@gpu-01:[0 1 2 3]"}, ""},
		{"a lease past its end still holds", []lease.SchedNode{snode("gpu-01", 4, overdue)}, nil, "next to start"},
		{"a GPU used outside dibs is not free", []lease.SchedNode{squatted}, nil, "in use outside dibs"},
		{"a GPU with an error is not free", []lease.SchedNode{broken}, nil, "no node that is up has 4 working GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule([]queue.QueueEntry{e}, tt.nodes, nil, t0, queue.SchedConfig{})
			checkList(t, "starts", started(p), tt.started)
			e := ranked(t, p, e.ID)
			if tt.waiting == "" && e.Waiting != "" || !strings.Contains(e.Waiting, tt.waiting) {
				t.Errorf("waiting = %q, want it to say %q", e.Waiting, tt.waiting)
			}
		})
	}
}

func TestScheduleEstStart(t *testing.T) {
	nodes := []lease.SchedNode{
		snode("gpu-01", 4,
			on(1, carol, []int{0, 1}, t0.Add(-time.Hour), t0.Add(time.Hour)),
			on(2, carol, []int{2, 3}, t0.Add(-time.Hour), t0.Add(3*time.Hour))),
		snode("gpu-02", 4, on(1, bob, gpus(0, 3), t0.Add(-time.Hour), t0.Add(-time.Minute))),
	}
	gone := snode("gpu-03", 4)
	gone.Alive = false
	nodes = append(nodes, gone)
	entries := []queue.QueueEntry{
		ask("gpu-01-q1", alice, 1, 2, 30*time.Minute, t0.Add(-4*time.Minute)),
		ask("gpu-01-q2", alice, 1, 2, 2*time.Hour, t0.Add(-3*time.Minute)),
		ask("gpu-01-q3", alice, 1, 4, time.Hour, t0.Add(-2*time.Minute)),
		ask("gpu-01-q4", alice, 3, 4, time.Hour, t0.Add(-time.Minute)),
	}
	p := queue.Schedule(entries, nodes, nil, t0, queue.SchedConfig{})
	want := map[string]time.Time{
		// bob's lease is past its end: it is expected to go any moment.
		"gpu-01-q1": t0.Add(time.Minute),
		"gpu-01-q2": t0.Add(time.Minute),
		// q1 and q2 are booked on gpu-02 until 2h01m; gpu-01 is whole at 3h.
		"gpu-01-q3": t0.Add(121 * time.Minute),
		// three nodes, one down: unknown.
		"gpu-01-q4": {},
	}
	for id, w := range want {
		if got := ranked(t, p, id).EstStart; !got.Equal(w) {
			t.Errorf("%s EstStart = %v, want %v", id, got, w)
		}
	}
}

func TestCheckFeasible(t *testing.T) {
	a100 := snode("gpu-03", 2)
	for i := range a100.Snap.GPUs {
		a100.Snap.GPUs[i].Model = "NVIDIA A100-SXM4-40GB"
	}
	down := snode("gpu-02", 8)
	down.Alive = false
	nodes := []lease.SchedNode{snode("gpu-01", 8), down, a100}
	with := func(e queue.QueueEntry, f func(*queue.QueueEntry)) queue.QueueEntry { f(&e); return e }
	e := ask("gpu-01-q1", alice, 1, 4, time.Hour, t0)
	tests := []struct {
		name string
		e    queue.QueueEntry
		want []string // nil: feasible
	}{
		{"fits", e, nil},
		{"fits only on a node that is down now", with(e, func(e *queue.QueueEntry) { e.Nodes, e.GPUsPerNode = 2, 8 }), nil},
		{"more GPUs per node than any node has", with(e, func(e *queue.QueueEntry) { e.GPUsPerNode = 9 }), []string{"no node has 9 GPUs", "the largest has 8"}},
		{"more nodes than the cluster has", with(e, func(e *queue.QueueEntry) { e.Nodes = 4; e.GPUsPerNode = 1 }), []string{"the cluster has 3 nodes", "asked for 4"}},
		{"more big nodes than there are", with(e, func(e *queue.QueueEntry) { e.Nodes = 3 }), []string{"only 2 of the 3 nodes have 4 GPUs"}},
		{"a model no node has", with(e, func(e *queue.QueueEntry) { e.Model = "b200" }), []string{`no node has a GPU matching "b200"`, "NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3"}},
		{"a model matched without case", with(e, func(e *queue.QueueEntry) { e.Model = "a100"; e.GPUsPerNode = 2 }), nil},
		{"too many of a model", with(e, func(e *queue.QueueEntry) { e.Model = "A100" }), []string{`no node has 4 GPUs matching "A100"`, "the largest has 2"}},
		{"pinned to an unknown node", with(e, func(e *queue.QueueEntry) { e.Node = "gpu-09" }), []string{`no node named "gpu-09"`}},
		{"pinned to a small node", with(e, func(e *queue.QueueEntry) { e.Node = "gpu-03" }), []string{"gpu-03 has only 2 GPUs", "asked for 4"}},
		{"a pinned gang", with(e, func(e *queue.QueueEntry) { e.Node, e.Nodes = "gpu-01", 2 }), []string{"cannot be pinned"}},
		{"no GPUs", with(e, func(e *queue.QueueEntry) { e.GPUsPerNode = 0 }), []string{"how many GPUs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := queue.CheckFeasible(tt.e, nodes, tt.e.Model, nil)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckFeasible = %v, want it accepted", err)
				}
				return
			}
			checkRefusal(t, err, refusal.CodeInvalid, tt.want...)
		})
	}
}

func TestScheduleModelAndPin(t *testing.T) {
	a100 := snode("gpu-00", 4)
	for i := range a100.Snap.GPUs {
		a100.Snap.GPUs[i].Model = "NVIDIA A100-SXM4-40GB"
	}
	nodes := []lease.SchedNode{a100, snode("gpu-01", 8), snode("gpu-02", 2)}
	e := ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)
	pinned, model := e, e
	pinned.Node, model.Model = "gpu-01", "h100"
	for name, tt := range map[string]struct {
		e    queue.QueueEntry
		want string
	}{
		"packs onto the smallest fit": {e, "gpu-01-q1@gpu-02:[0 1]"},
		"pinned":                      {pinned, "gpu-01-q1@gpu-01:[0 1]"},
		"model":                       {model, "gpu-01-q1@gpu-02:[0 1]"},
	} {
		p := queue.Schedule([]queue.QueueEntry{tt.e}, nodes, nil, t0, queue.SchedConfig{})
		checkList(t, name, started(p), []string{tt.want})
	}
	model.GPUsPerNode = 4
	p := queue.Schedule([]queue.QueueEntry{model}, nodes, nil, t0, queue.SchedConfig{})
	checkList(t, "4 H100s skip the 4 A100s", started(p), []string{"gpu-01-q1@gpu-01:[0 1 2 3]"})
}

func TestQuotaBorrowing(t *testing.T) {
	nodes := []lease.SchedNode{snode("gpu-01", 8, on(1, alice, gpus(0, 3), t0.Add(-time.Hour), t0.Add(time.Hour)))}
	cfg := queue.SchedConfig{
		Quotas:      map[string]int{"alice": 4, "bob": 2},
		GroupQuotas: map[string]int{"vision": 1},
		UserGroups:  map[string]string{"carol": "vision"},
	}
	entries := []queue.QueueEntry{
		ask("gpu-01-q1", alice, 1, 1, time.Hour, t0.Add(-3*time.Minute)),
		ask("gpu-01-q2", bob, 1, 2, time.Hour, t0.Add(-2*time.Minute)),
		ask("gpu-01-q3", carol, 1, 1, time.Hour, t0.Add(-time.Minute)),
	}
	p := queue.Schedule(entries, nodes, nil, t0, cfg)
	checkList(t, "within-quota requests first, borrowers after", order(p), []string{"gpu-01-q2", "gpu-01-q3", "gpu-01-q1"})
	checkList(t, "starts", started(p), []string{
		"gpu-01-q2@gpu-01:[4 5]",
		"gpu-01-q3@gpu-01:[6]",
		"gpu-01-q1@gpu-01:[7] borrowed",
	})
	unlisted := ask("gpu-01-q4", lease.Caller{User: "dave"}, 1, 1, time.Hour, t0)
	p = queue.Schedule([]queue.QueueEntry{unlisted}, nodes, nil, t0, cfg)
	checkList(t, "a user with no quota borrows", started(p), []string{"gpu-01-q4@gpu-01:[4] borrowed"})
	p = queue.Schedule([]queue.QueueEntry{unlisted}, nodes, nil, t0, queue.SchedConfig{})
	checkList(t, "with no quotas nobody borrows", started(p), []string{"gpu-01-q4@gpu-01:[4]"})
}

func TestQuotaPreemption(t *testing.T) {
	borrowed := func(l lease.Lease) lease.Lease { l.Borrowed = true; return l }
	cfg := queue.SchedConfig{Quotas: map[string]int{"alice": 4, "bob": 4, "carol": 4}}
	cluster := func(extra ...lease.Lease) []lease.SchedNode {
		return []lease.SchedNode{
			snode("gpu-01", 8,
				on(1, alice, gpus(0, 3), t0.Add(-5*time.Hour), t0.Add(5*time.Hour)),
				borrowed(on(2, alice, gpus(4, 7), t0.Add(-2*time.Hour), t0.Add(5*time.Hour)))),
			snode("gpu-02", 4, append([]lease.Lease{borrowed(on(1, carol, gpus(0, 3), t0.Add(-time.Hour), t0.Add(5*time.Hour)))}, extra...)...),
		}
	}
	bobWants := ask("gpu-03-q1", bob, 1, 4, time.Hour, t0)
	p := queue.Schedule([]queue.QueueEntry{bobWants}, cluster(), nil, t0, cfg)
	checkList(t, "the most recently started borrowed lease of someone else, only", reclaimed(p), []string{"gpu-02-1 quota for gpu-03-q1"})
	if w := ranked(t, p, bobWants.ID); !strings.Contains(w.Waiting, "reclaiming 4 GPUs (quota)") || !w.EstStart.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("bob's request: waiting %q, EstStart %v; want it to say it reclaims, starting after the grace", w.Waiting, w.EstStart)
	}

	bobGang := ask("gpu-03-q1", bob, 2, 4, time.Hour, t0)
	cfg8 := queue.SchedConfig{Quotas: map[string]int{"alice": 4, "bob": 8, "carol": 4}}
	p = queue.Schedule([]queue.QueueEntry{bobGang}, cluster(), nil, t0, cfg8)
	checkList(t, "a gang needs both", reclaimed(p), []string{"gpu-02-1 quota for gpu-03-q1", "gpu-01-2 quota for gpu-03-q1"})

	// Already being preempted: no more reclaims pile up.
	nodes := cluster()
	nodes[1].Leases[0].PreemptedAt = t0.Add(-time.Minute)
	nodes[1].Leases[0].PreemptReason = lease.PreemptQuota
	p = queue.Schedule([]queue.QueueEntry{bobWants}, nodes, nil, t0, cfg)
	checkList(t, "while a reclaim is under way", reclaimed(p), nil)
	if w := ranked(t, p, bobWants.ID); !w.EstStart.Equal(t0.Add(time.Minute)) {
		t.Errorf("EstStart = %v, want the end of the grace %v", w.EstStart, t0.Add(time.Minute))
	}

	// GPUs that come free within the grace anyway: nobody is preempted. A
	// lease past its end keeps its GPUs only while nobody waits: it is
	// reclaimed first (issue 23; it used to linger while a borrowed lease
	// was preempted instead).
	dave := lease.Caller{UID: 1004, User: "dave"}
	soon := cluster()
	soon = append(soon, snode("gpu-03", 4, on(1, dave, gpus(0, 3), t0.Add(-time.Hour), t0.Add(time.Minute))))
	p = queue.Schedule([]queue.QueueEntry{bobWants}, soon, nil, t0, cfg)
	checkList(t, "a lease ends within the grace", reclaimed(p), nil)
	soon[2].Leases[0].ExpiresAt = t0.Add(-time.Hour)
	p = queue.Schedule([]queue.QueueEntry{bobWants}, soon, nil, t0, cfg)
	checkList(t, "a lease past its end", reclaimed(p), []string{"gpu-03-1 overdue for gpu-03-q1"})

	// Beyond quota: bob waits, nobody is preempted for him.
	p = queue.Schedule([]queue.QueueEntry{ask("gpu-03-q1", bob, 1, 8, time.Hour, t0)}, cluster(), nil, t0, cfg)
	checkList(t, "bob beyond quota", reclaimed(p), nil)
	// No quotas: nobody is preempted.
	p = queue.Schedule([]queue.QueueEntry{bobWants}, cluster(), nil, t0, queue.SchedConfig{})
	checkList(t, "no quotas", reclaimed(p), nil)
	// Carol within quota (her borrowed lease aside) is not served by her own lease.
	p = queue.Schedule([]queue.QueueEntry{ask("gpu-03-q2", carol, 1, 4, time.Hour, t0)}, cluster(),
		nil, t0, queue.SchedConfig{Quotas: map[string]int{"alice": 4, "carol": 8}})
	checkList(t, "never her own lease", reclaimed(p), []string{"gpu-01-2 quota for gpu-03-q2"})
}

func TestIdleReclaim(t *testing.T) {
	quiet := map[int]time.Time{
		0: t0.Add(-40 * time.Minute), 1: t0.Add(-40 * time.Minute), // lease 1: idle 40 min
		2: t0.Add(-20 * time.Minute), 3: t0.Add(-20 * time.Minute), // lease 2: idle 20 min
		4: t0.Add(-2 * time.Hour), 5: t0.Add(-2 * time.Hour), //       lease 3: started 10 min ago
		6: t0.Add(-3 * time.Hour), // lease 4: half idle
	}
	n := snode("gpu-01", 8,
		on(1, carol, []int{0, 1}, t0.Add(-time.Hour), t0.Add(time.Hour)),
		on(2, carol, []int{2, 3}, t0.Add(-time.Hour), t0.Add(time.Hour)),
		on(3, carol, []int{4, 5}, t0.Add(-10*time.Minute), t0.Add(time.Hour)),
		on(4, carol, []int{6, 7}, t0.Add(-time.Hour), t0.Add(time.Hour)))
	n.Idle = lease.IdleTrackerFrom(quiet)
	for _, tt := range []struct {
		name string
		e    queue.QueueEntry
		want []string
	}{
		{"only what is needed, idle past the threshold", ask("gpu-01-q1", alice, 1, 2, time.Hour, t0), []string{"gpu-01-1 idle for gpu-01-q1"}},
		{"not enough idle GPUs: nothing is reclaimed", ask("gpu-01-q1", alice, 1, 4, time.Hour, t0), nil},
		{"not for the holder herself", ask("gpu-01-q1", carol, 1, 2, time.Hour, t0), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := queue.Schedule([]queue.QueueEntry{tt.e}, []lease.SchedNode{n}, nil, t0, queue.SchedConfig{})
			checkList(t, "reclaims", reclaimed(p), tt.want)
		})
	}
	// A service idle as long is never reclaimed: idle reclaim does not
	// apply to services (an endpoint waits for requests), even preemptible.
	for _, preemptible := range []bool{false, true} {
		svc := n
		svc.Leases = slices.Clone(n.Leases)
		svc.Leases[0].Kind = lease.KindService
		svc.Leases[0].Service = &service.Service{Spec: service.Spec{Name: "llm", Preemptible: preemptible}}
		p := queue.Schedule([]queue.QueueEntry{ask("gpu-01-q1", alice, 1, 2, time.Hour, t0)}, []lease.SchedNode{svc}, nil, t0, queue.SchedConfig{})
		checkList(t, fmt.Sprintf("reclaims of an idle service (preemptible %v)", preemptible), reclaimed(p), nil)
	}
}

// randomCluster builds a seeded random cluster and queue.
func randomCluster(rng *rand.Rand) ([]lease.SchedNode, []queue.QueueEntry, queue.Usage) {
	users := []lease.Caller{alice, bob, carol}
	var nodes []lease.SchedNode
	for i := range 1 + rng.IntN(6) {
		name := fmt.Sprintf("gpu-%02d", i)
		size := []int{1, 2, 4, 8}[rng.IntN(4)]
		var leases []lease.Lease
		var token uint64
		for g := 0; g < size; {
			k := 1 + rng.IntN(size-g)
			if rng.IntN(2) == 0 {
				token++
				l := on(token, users[rng.IntN(3)], gpus(g, g+k-1), t0.Add(-time.Hour), t0.Add(time.Duration(rng.IntN(240)-30)*time.Minute))
				l.Borrowed = rng.IntN(3) == 0
				if rng.IntN(5) == 0 {
					l.ReservedUntil = t0.Add(time.Duration(rng.IntN(60)-30) * time.Second)
				}
				leases = append(leases, l)
			}
			g += k
		}
		n := snode(name, size, leases...)
		n.Alive = rng.IntN(6) != 0
		if rng.IntN(5) == 0 {
			n.Snap = withProc(n.Snap, rng.IntN(size), proc(9, bob, "x"))
		}
		if rng.IntN(5) == 0 {
			n.Snap = withDown(n.Snap, rng.IntN(size))
		}
		idle := map[int]time.Time{}
		for g := range size {
			if rng.IntN(2) == 0 {
				idle[g] = t0.Add(-time.Duration(rng.IntN(120)) * time.Minute)
			}
		}
		n.Idle = lease.IdleTrackerFrom(idle)
		nodes = append(nodes, n)
	}
	var entries []queue.QueueEntry
	for i := range rng.IntN(25) {
		c := users[rng.IntN(3)]
		nn := 1
		if rng.IntN(4) == 0 {
			nn = 1 + rng.IntN(3)
		}
		e := ask(fmt.Sprintf("gpu-%02d-q%d", rng.IntN(3), i), c, nn, 1+rng.IntN(8), time.Duration(1+rng.IntN(300))*time.Minute, t0.Add(-time.Duration(rng.IntN(600))*time.Minute))
		if nn == 1 && rng.IntN(6) == 0 {
			e.Node = nodes[rng.IntN(len(nodes))].Name
		}
		entries = append(entries, e)
	}
	usage := queue.Usage{"alice": float64(rng.IntN(100000)), "bob": float64(rng.IntN(100000))}
	return nodes, entries, usage
}

func TestSchedulePlanIsSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 500 {
		nodes, entries, usage := randomCluster(rng)
		cfg := queue.SchedConfig{}
		if round%2 == 0 {
			cfg.Quotas = map[string]int{"alice": 4, "bob": 8, "carol": 2}
		}
		p := queue.Schedule(entries, nodes, usage, t0, cfg)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("round %d: "+format+"\nplan starts %v\nreclaims %v", append([]any{round}, append(args, started(p), reclaimed(p))...)...)
		}
		if len(p.Order) != len(entries) {
			fail("order has %d entries, want %d", len(p.Order), len(entries))
		}
		byName := map[string]lease.SchedNode{}
		for _, n := range nodes {
			byName[n.Name] = n
		}
		taken := map[string]bool{}
		for _, s := range p.Start {
			if len(s.Ranks) != s.Entry.Nodes {
				fail("%s starts %d ranks, want %d", s.Entry.ID, len(s.Ranks), s.Entry.Nodes)
			}
			seen := map[string]bool{}
			for _, r := range s.Ranks {
				n, ok := byName[r.Node]
				if !ok || !n.Alive {
					fail("%s placed on %s, not an alive node", s.Entry.ID, r.Node)
				}
				if seen[r.Node] {
					fail("%s has two ranks on %s", s.Entry.ID, r.Node)
				}
				seen[r.Node] = true
				if s.Entry.Node != "" && r.Node != s.Entry.Node {
					fail("%s pinned to %s placed on %s", s.Entry.ID, s.Entry.Node, r.Node)
				}
				if len(r.GPUs) != s.Entry.GPUsPerNode {
					fail("%s got %d GPUs on %s, want %d", s.Entry.ID, len(r.GPUs), r.Node, s.Entry.GPUsPerNode)
				}
				free := freeAt(n, t0)
				for _, g := range r.GPUs {
					k := fmt.Sprintf("%s/%d", r.Node, g)
					if taken[k] {
						fail("GPU %s assigned twice", k)
					}
					taken[k] = true
					if !slices.Contains(free, g) {
						fail("%s got GPU %s which is not free (free: %v)", s.Entry.ID, k, free)
					}
				}
			}
		}
		for _, r := range p.Reclaim {
			if !r.Lease.PreemptedAt.IsZero() || !r.Lease.ReservedUntil.IsZero() {
				fail("reclaims %s, already preempted or a reservation", r.Lease.ID)
			}
			if r.Reason == lease.PreemptQuota && !r.Lease.Borrowed {
				fail("reclaims %s for quota, but it is not borrowed", r.Lease.ID)
			}
		}
	}
}

// freeAt is what the scheduler may hand out on a node at now.
func freeAt(n lease.SchedNode, now time.Time) []int {
	var live []lease.Lease
	for _, l := range n.Leases {
		if l.ReservedUntil.IsZero() || l.ReservedUntil.After(now) {
			live = append(live, l)
		}
	}
	return lease.FreeGPUs(n.Snap, live)
}
