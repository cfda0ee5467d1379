package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// unitsBoard is a node in pools a100 and mig with a GPU split into MIG
// instances (one alice's, one bob's, one free), a shared GPU (alice 20 GiB,
// bob 30 GiB and over it), a free GPU booked by bob tomorrow, and beside it
// an L40S node in pool inference.
func unitsBoard() api.Board {
	const a100 = "NVIDIA A100-SXM4-80GB"
	n := api.Node{Name: "gpu-a", State: api.NodeAlive, Host: host("gpu-a", 128, 1024), TelemetryAt: fixedNow.Add(-2 * time.Second)}
	n.Host.Tags = []string{"a100", "mig"}
	for i := range 3 {
		n.GPUs = append(n.GPUs, gpu(a100, i, 0, 0, 81920))
	}
	g0 := &n.GPUs[0]
	g0.MIG, g0.UtilizationPct = nodeprobe.MIGEnabled, nil
	g0.MIGDevices = []nodeprobe.MIGDevice{
		{Index: 0, UUID: "MIG-aaaa", Profile: "3g.40gb", MemoryTotalMiB: 40160, MemoryUsedMiB: 12000},
		{Index: 1, UUID: "MIG-bbbb", Profile: "2g.20gb", MemoryTotalMiB: 20080, MemoryUsedMiB: 8000},
		{Index: 2, UUID: "MIG-cccc", Profile: "1g.10gb", MemoryTotalMiB: 10040},
	}
	mine := *mkLease("gpu-a-5", "gpu-a", "alice", uidAlice, []int{0}, 2*time.Hour)
	mine.MIG, mine.Share, mine.Note = "MIG-aaaa", 0.49, "eval"
	bobs := *mkLease("gpu-a-6", "gpu-a", "bob", uidBob, []int{0}, 50*time.Minute)
	bobs.MIG, bobs.Share = "MIG-bbbb", 0.25
	g0.Shares = []lease.Lease{mine, bobs}
	p := proc(4100, "alice", uidAlice, "python eval.py", 12000)
	p.MIGDevice = "MIG-aaaa"
	g0.Processes = []nodeprobe.Process{p}

	g1 := &n.GPUs[1]
	a := *mkLease("gpu-a-7", "gpu-a", "alice", uidAlice, []int{1}, 3*time.Hour)
	a.MemMiB, a.Share = 20<<10, 0.25
	b := *mkLease("gpu-a-8", "gpu-a", "bob", uidBob, []int{1}, time.Hour)
	b.MemMiB, b.Share = 30<<10, 0.375
	g1.Shares = []lease.Lease{a, b}
	setUtil(g1, 64)
	g1.MemoryUsedMiB = 52 << 10
	g1.Processes = []nodeprobe.Process{proc(4200, "alice", uidAlice, "python serve.py", 16<<10), proc(5200, "bob", uidBob, "python big.py", 36<<10)}
	g1.Flags = []lease.Flag{lease.FlagOverBudget}
	g1.OverBudget = []lease.Overrun{{User: "bob", UID: uidBob, UsedMiB: 36 << 10, BudgetMiB: 30 << 10}}

	booking := *mkLease("gpu-a-9", "gpu-a", "bob", uidBob, []int{2}, 0)
	booking.Booked, booking.Note = true, "deadline run"
	booking.StartedAt = time.Date(2026, 3, 11, 9, 0, 0, 0, time.UTC)
	booking.ExpiresAt = booking.StartedAt.Add(3 * time.Hour)
	n.Bookings = []lease.Lease{booking}

	l := api.Node{Name: "gpu-b", State: api.NodeAlive, Host: host("gpu-b", 64, 512), TelemetryAt: fixedNow.Add(-time.Second)}
	l.Host.Tags = []string{"inference"}
	for i := range 2 {
		l.GPUs = append(l.GPUs, gpu("NVIDIA L40S", i, 0, 0, 46068))
	}
	return api.Board{Self: "gpu-a", You: lease.Caller{UID: uidAlice, User: "alice"}, GeneratedAt: fixedNow, Nodes: []api.Node{n, l}}
}

// borrowedBoard is unitsBoard with the L40S node's GPUs held beyond quota:
// GPU 0 by bob, GPU 1 by alice (the caller), both borrowed.
func borrowedBoard() api.Board {
	b := unitsBoard()
	n := &b.Nodes[1]
	bobs := mkLease("gpu-b-3", "gpu-b", "bob", uidBob, []int{0}, 2*time.Hour)
	bobs.Borrowed, bobs.Note = true, "sweep"
	mine := mkLease("gpu-b-4", "gpu-b", "alice", uidAlice, []int{1}, time.Hour)
	mine.Borrowed = true
	n.GPUs[0].Lease, n.GPUs[1].Lease = bobs, mine
	setUtil(&n.GPUs[0], 80)
	setUtil(&n.GPUs[1], 40)
	return b
}

// TestGoldenUnits renders MIG instances, a shared GPU with its budgets (one
// over), pools, a booking and borrowed leases, at both sizes.
func TestGoldenUnits(t *testing.T) {
	tests := []struct {
		name string
		w, h int
		keys []string
	}{
		{"units_mig_160x48", 160, 48, nil},
		// GPU 0 takes three cells (its MIG instances): GPU 1 is the fourth.
		{"units_shared_160x48", 160, 48, []string{"l", "l", "l"}},
		{"units_shared_80x24", 80, 24, []string{"l", "l", "l"}},
		{"units_booked_160x48", 160, 48, []string{"l", "l", "l", "l"}},
		{"units_mig_theirs_80x24", 80, 24, []string{"l"}},
		{"units_mig_80x24", 80, 24, nil},
		{"units_borrowed_160x48", 160, 48, []string{"j"}},
		{"units_borrowed_80x24", 80, 24, []string{"j"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.w, tc.h, Options{})
			b := unitsBoard()
			if strings.HasPrefix(tc.name, "units_borrowed") {
				b = borrowedBoard()
			}
			h.send(BoardMsg(b))
			h.keys(tc.keys...)
			requireGolden(t, tc.name, h.screen())
		})
	}
}

// A borrowed lease's cell says so: "bob~", "★mine~".
func TestBorrowedCells(t *testing.T) {
	b := borrowedBoard()
	views, _ := buildViews(&b, "", false)
	var got []string
	for _, c := range views[1].cells {
		got = append(got, c.label)
	}
	if strings.Join(got, "|") != "bob~|★mine~" {
		t.Errorf("cells %q, want bob~ and ★mine~", got)
	}
}

func TestUnitCells(t *testing.T) {
	b := unitsBoard()
	views, sum := buildViews(&b, "", false)
	var got []string
	for _, c := range views[0].cells {
		got = append(got, c.label)
	}
	// The split GPU 0 is a cell per MIG instance: alice's, bob's, a free one.
	if strings.Join(got, "|") != "★mine|bob|·free|!budget|·free" {
		t.Errorf("cells %q, want ★mine, bob, ·free (GPU 0's instances), !budget, ·free", got)
	}
	var subs []string
	for _, c := range views[0].cells[:3] {
		subs = append(subs, c.sub)
	}
	if strings.Join(subs, "|") != "0:0 3g.40gb|0:1 2g.20gb|0:2 1g.10gb" {
		t.Errorf("MIG cells name %q, want each instance's GPU:INDEX and profile", subs)
	}
	if views[0].cells[0].kind != kindMine || views[0].cells[1].kind != kindTheirs || views[0].cells[2].kind != kindFree {
		t.Errorf("MIG cell kinds %v %v %v, want mine, theirs, free", views[0].cells[0].kind, views[0].cells[1].kind, views[0].cells[2].kind)
	}
	if views[0].gpus != 3 || sum.gpus != 5 || sum.mine != 2 || sum.free != 3 {
		t.Errorf("node gpus %d, cluster gpus %d, mine %d, free %d; want 3 GPUs on gpu-a (not 5 cells), 5 in all, 2 of alice's GPUs, 3 free whole GPUs", views[0].gpus, sum.gpus, sum.mine, sum.free)
	}
}

// On a split GPU each instance's cell is its own: x and e act on the
// instance under the cursor, and a free instance has nothing to release.
func TestMIGCellsActOnTheirInstance(t *testing.T) {
	tests := []struct {
		col       int
		key, want string
	}{
		{0, "x", "gpu-a-5"},
		{1, "x", "gpu-a-6"},
		{1, "e", "gpu-a-6"},
		{2, "x", ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s on cell %d", tc.key, tc.col), func(t *testing.T) {
			h := newHarness(t, 160, 48, Options{})
			h.send(BoardMsg(unitsBoard()))
			h.moveTo("gpu-a", 0)
			h.keys(slices.Repeat([]string{"l"}, tc.col)...)
			h.keys(tc.key)
			switch {
			case tc.want == "" && (h.m.confirm != nil || !strings.Contains(h.screen(), "MIG 0:2 1g.10gb on gpu-a is free")):
				t.Errorf("x on a free instance opened %+v, want the status to say it is free:\n%s", h.m.confirm, h.screen())
			case tc.want == "":
			case tc.key == "x" && (h.m.confirm == nil || h.m.confirm.id != tc.want):
				t.Errorf("x opened %+v, want the release of %s", h.m.confirm, tc.want)
			case tc.key == "e" && (h.m.form == nil || h.m.form.lease != tc.want):
				t.Errorf("e opened %+v, want the extension of %s", h.m.form, tc.want)
			}
		})
	}
}

// On a GPU held in parts, e and x act on the caller's own part (alice's MIG
// instance, her budget), whoever else holds one beside her.
func TestKeysActOnYourPart(t *testing.T) {
	tests := []struct {
		gpu       int
		key, want string
	}{
		{0, "x", "gpu-a-5"},
		{0, "e", "gpu-a-5"},
		{1, "x", "gpu-a-7"},
		{1, "e", "gpu-a-7"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s on GPU %d", tc.key, tc.gpu), func(t *testing.T) {
			h := newHarness(t, 160, 48, Options{})
			h.send(BoardMsg(unitsBoard()))
			h.moveTo("gpu-a", tc.gpu)
			h.keys(tc.key)
			switch {
			case tc.key == "x" && (h.m.confirm == nil || h.m.confirm.id != tc.want):
				t.Errorf("x opened %+v, want the release of %s", h.m.confirm, tc.want)
			case tc.key == "e" && (h.m.form == nil || h.m.form.lease != tc.want):
				t.Errorf("e opened %+v, want the extension of %s", h.m.form, tc.want)
			}
		})
	}
}

// "My sessions" lists the caller's parts of GPUs too: a MIG instance and a
// budget are leases of theirs like any other.
func TestSessionsListYourParts(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(unitsBoard()))
	h.keys("4")
	s := h.screen()
	for _, id := range []string{"gpu-a-5", "gpu-a-7"} {
		if !strings.Contains(s, id) {
			t.Errorf("my sessions lacks alice's %s:\n%s", id, s)
		}
	}
	for _, id := range []string{"gpu-a-6", "gpu-a-8"} {
		if strings.Contains(s, id) {
			t.Errorf("my sessions lists bob's %s:\n%s", id, s)
		}
	}
}

// A booking that ends on another day says which (issue 20: a week-long one
// read "09:00–09:00").
func TestMultiDayBookingShowsItsEndDay(t *testing.T) {
	b := unitsBoard()
	bk := &b.Nodes[0].Bookings[0]
	bk.ExpiresAt = bk.StartedAt.Add(3 * 24 * time.Hour)
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(b))
	h.keys("l", "l", "l", "l")
	if s := h.screen(); !strings.Contains(s, "Wed 09:00–Sat 09:00") {
		t.Errorf("the booking's line does not say it ends on Saturday:\n%s", s)
	}
}

// A part of a booking across nodes says which booking it belongs to, and
// the first part says it spans nodes (issue 23).
func TestBookingAcrossNodesShowsItsGroup(t *testing.T) {
	for _, tc := range []struct{ group, want string }{
		{"gpu-a-9", "gpu-a-9 bob GPU 2 Wed 09:00–12:00 · across nodes"},
		{"gpu-z-4", "gpu-a-9 bob GPU 2 Wed 09:00–12:00 · part of gpu-z-4"},
	} {
		b := unitsBoard()
		b.Nodes[0].Bookings[0].Group = tc.group
		h := newHarness(t, 160, 48, Options{})
		h.send(BoardMsg(b))
		h.keys("l", "l")
		if s := h.screen(); !strings.Contains(s, tc.want) {
			t.Errorf("group %s: no %q in\n%s", tc.group, tc.want, s)
		}
	}
}

// A MIG cell too narrow for "0:0 3g.40gb" still names its profile, whole.
func TestNarrowMIGCellsNameTheirProfile(t *testing.T) {
	h := newHarness(t, 60, 24, Options{})
	h.send(BoardMsg(unitsBoard()))
	s := h.screen()
	for _, want := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
		if !strings.Contains(s, want) {
			t.Errorf("a 60-column board does not name the instance %s:\n%s", want, s)
		}
	}
}

// c on a free MIG instance claims that instance (--mig GPU:INDEX), not a
// count of GPUs on the node.
func TestClaimOnAFreeMIGInstance(t *testing.T) {
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(unitsBoard()))
	h.moveTo("gpu-a", 0)
	h.keys("l", "l", "space")
	if !strings.Contains(h.m.status, "MIG 0:2 1g.10gb is an instance") || len(h.m.grid.sel) != 0 {
		t.Errorf("space on a MIG instance: status %q, selection %v; want it refused with c suggested", h.m.status, h.m.grid.sel)
	}
	h.keys("c")
	if h.m.form == nil || h.m.form.title != "claim on gpu-a: MIG 0:2 1g.10gb" {
		t.Fatalf("c on the free instance 0:2 opened %+v", h.m.form)
	}
	h.keys("enter")
	h.be.mu.Lock()
	defer h.be.mu.Unlock()
	if len(h.be.claims) != 1 || h.be.claims[0].MIG != "0:2" || h.be.claims[0].Count != 0 || len(h.be.claims[0].GPUs) != 0 || h.be.claims[0].Node != "gpu-a" {
		t.Errorf("claims %+v, want one of MIG 0:2 on gpu-a", h.be.claims)
	}
}
