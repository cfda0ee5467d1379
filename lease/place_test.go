package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestPlace(t *testing.T) {
	box := islands(4, 4)
	pairs := islands(2, 2, 2, 2)
	tests := []struct {
		name string
		snap nodeprobe.Snapshot
		free []int
		n    int
		want []int
	}{
		{"none asked", box, []int{0, 1}, 0, nil},
		{"more than free", box, []int{0, 1}, 3, nil},
		{"all of the free", box, []int{1, 5, 6}, 3, []int{1, 5, 6}},
		{"one: the lowest", box, []int{3, 4, 5, 6, 7}, 1, []int{3}},
		{"one: fills a broken island before opening a whole one", box, []int{0, 1, 2, 3, 7}, 1, []int{7}},
		{"a pair inside an island", box, []int{3, 4, 5, 6, 7}, 2, []int{4, 5}},
		{"a pair with islands 0-1 and 6-7 broken", pairs, []int{1, 2, 3, 6}, 2, []int{2, 3}},
		{"three across the fewest links", box, []int{0, 4, 5, 6}, 3, []int{4, 5, 6}},
		{"no topology: lowest indices", nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0}, {Index: 1}, {Index: 2}}}, []int{0, 1, 2}, 2, []int{0, 1}},
		{"a free GPU missing from the snapshot goes last", box, []int{2, 3, 9}, 2, []int{2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lease.Place(tt.snap, tt.free, tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("Place(free %v, %d) = %v, want %v", tt.free, tt.n, got, tt.want)
			}
		})
	}
}

func TestChooseNode(t *testing.T) {
	eight := islands(4, 4)
	cand := func(name string, snap nodeprobe.Snapshot, busy ...int) lease.Candidate {
		c := lease.Candidate{Node: name, Snap: snap}
		if len(busy) > 0 {
			c.Leases = []lease.Lease{held(1, alice, busy, t0, time.Hour)}
		}
		return c
	}
	a := cand("a", eight)                   // 8 free
	b := cand("b", eight, 0, 1, 2, 3, 4)    // 3 free: 5,6,7 in one island
	c := cand("c", eight, 0, 1, 2, 3, 4, 5) // 2 free: 6,7
	// aa has 2 free, but across the islands; its name would sort first.
	d := cand("aa", eight, 1, 2, 3, 5, 6, 7)
	full := cand("full", eight, 0, 1, 2, 3, 4, 5, 6, 7)
	small := cand("small", islands(2), 0)

	tests := []struct {
		name  string
		cands []lease.Candidate
		n     int
		want  string
		code  refusal.Code
		msg   []string
	}{
		{name: "pack: the tightest fit", cands: []lease.Candidate{a, b, c}, n: 2, want: "c"},
		{name: "pack: three", cands: []lease.Candidate{a, b, c}, n: 3, want: "b"},
		{name: "pack: only the empty node fits", cands: []lease.Candidate{a, b, c}, n: 4, want: "a"},
		{name: "same leftover: closer GPUs win", cands: []lease.Candidate{d, c}, n: 2, want: "c"},
		{name: "same leftover and distance: by name", cands: []lease.Candidate{cand("z", eight, 0, 1, 2, 3, 4, 5), c}, n: 2, want: "c"},
		{name: "same leftover and distance: the asking node before the name", cands: []lease.Candidate{c, func() lease.Candidate { x := cand("z", eight, 0, 1, 2, 3, 4, 5); x.Local = true; return x }()}, n: 2, want: "z"},
		{name: "a full node is skipped", cands: []lease.Candidate{full, small}, n: 1, want: "small"},
		{name: "bigger than any node says the largest size", cands: []lease.Candidate{a, small}, n: 16,
			code: refusal.CodeInvalid, msg: []string{"no node has 16 GPUs (the largest has 8)", "ask for fewer, or for several nodes"}},
		{name: "nothing free anywhere", cands: []lease.Candidate{full, cand("full2", islands(2), 0, 1)}, n: 1,
			code: refusal.CodeConflict, msg: []string{"no GPU is free anywhere", "dibs ls"}},
		{name: "free GPUs, but not together", cands: []lease.Candidate{b, c, full}, n: 4,
			code: refusal.CodeConflict, msg: []string{"at most 3 are free together (on b)"}},
		{name: "GPUs that are down are not free", cands: []lease.Candidate{cand("sick", withDown(withDown(islands(2), 0), 1))}, n: 1,
			code: refusal.CodeConflict, msg: []string{"no GPU is free anywhere"}},
		{name: "no nodes", cands: nil, n: 1, code: refusal.CodeUnavailable, msg: []string{"no node is up"}},
		{name: "zero GPUs", cands: []lease.Candidate{a}, n: 0, code: refusal.CodeInvalid, msg: []string{"-g N"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lease.ChooseNode(tt.cands, tt.n)
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ChooseNode(-g %d) = %q, %v; want %q", tt.n, got, err, tt.want)
			}
		})
	}
}

func TestFreeGPUs(t *testing.T) {
	snap := withDown(withProc(islands(4, 4), 2, proc(1, bob, "python")), 5)
	got := lease.FreeGPUs(snap, []lease.Lease{held(1, alice, []int{0, 7}, t0, time.Hour)})
	if want := []int{1, 3, 4, 6}; !slices.Equal(got, want) {
		t.Errorf("FreeGPUs = %v, want %v (not leased, no process, not down)", got, want)
	}
}
