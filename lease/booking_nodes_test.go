package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
)

// BookNodes places each part of a booking across nodes as BookNode places a
// booking of one node, on distinct nodes, and says how many nodes could
// take a part when too few can.
func TestBookNodes(t *testing.T) {
	a, b, c := cand("a", islands(4), "h100"), cand("b", islands(2), "h100"), cand("c", islands(2), "l40s")
	booked := cand("d", islands(2), "h100")
	bk := held(9, bob, []int{0, 1}, t0.Add(time.Hour), 4*time.Hour)
	bk.Booked = true
	booked.Bookings = []lease.Lease{bk}
	pools := lease.Pools{"l40s": {MaxTime: 2 * time.Hour}}
	from, to := t0.Add(2*time.Hour), t0.Add(5*time.Hour)
	for _, tc := range []struct {
		name      string
		cands     []lease.Candidate
		nodes, n  int
		tags      []string
		want      []string
		code      refusal.Code
		wantWords []string
	}{
		{name: "distinct nodes, sorted", cands: []lease.Candidate{a, b, booked}, nodes: 2, n: 2, want: []string{"a", "b"}},
		{name: "the pool's max_time keeps c out", cands: []lease.Candidate{a, b, c}, nodes: 2, n: 2, want: []string{"a", "b"}},
		{name: "a booked node is skipped", cands: []lease.Candidate{booked, a, b}, nodes: 2, n: 1, want: []string{"a", "b"}},
		{name: "only pool h100", cands: []lease.Candidate{a, b, c}, nodes: 2, n: 1, tags: []string{"h100"}, want: []string{"a", "b"}},
		{name: "too few nodes up", cands: []lease.Candidate{a, b}, nodes: 3, n: 1, code: refusal.CodeConflict, wantWords: []string{"asked to book 3 nodes but only 2 are up"}},
		{name: "too few can take a part", cands: []lease.Candidate{a, booked, c}, nodes: 2, n: 3, code: refusal.CodeConflict,
			wantWords: []string{"asked to book 3 GPUs on each of 2 nodes", "only 1 node can take a part (a)", "on the others:"}},
		{name: "none can", cands: []lease.Candidate{b, c}, nodes: 2, n: 4, code: refusal.CodeConflict, wantWords: []string{"at most 2 can be booked together"}},
		{name: "one node: the rest of a booking", cands: []lease.Candidate{a, b}, nodes: 1, n: 2, want: []string{"b"}},
		{name: "no nodes", cands: []lease.Candidate{a, b}, nodes: 0, n: 1, code: refusal.CodeInvalid, wantWords: []string{"1 to 64 nodes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lease.BookNodes(tc.cands, tc.nodes, tc.n, "", tc.tags, pools, "alice", from, to)
			if tc.want != nil {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if got != nil {
				t.Errorf("got nodes %v with a refusal", got)
			}
			checkRefusal(t, err, tc.code, tc.wantWords...)
		})
	}
}

// A part's group is a booking id; the first part names itself, so it comes
// with Lead and no group. Every part records its group.
func TestBookingGroup(t *testing.T) {
	base := lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour}
	for _, tc := range []struct {
		name  string
		group string
		lead  bool
		ok    bool
	}{
		{"none", "", false, true},
		{"lead", "", true, true},
		{"part", "node01-7", false, true},
		{"not an id", "node01", false, false},
		{"lead with a group", "node01-7", true, false},
		{"a hostile node name", "\x1b[2J-7", false, false},
	} {
		r := base
		r.Group, r.Lead = tc.group, tc.lead
		if err := r.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	tb := table()
	first, err := tb.PlanBooking(bob, lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour, Lead: true}, islands(2), t0, lease.DefaultPolicy())
	if err != nil || first.Group != first.ID {
		t.Fatalf("the first part: %+v, %v; want its group to be its own id", first, err)
	}
	tb.Put(first, lease.At(t0))
	part, err := tb.PlanBooking(bob, lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour, Group: "node09-3"}, islands(2), t0, lease.DefaultPolicy())
	if err != nil || part.Group != "node09-3" || part.ID == first.ID {
		t.Fatalf("another part: %+v, %v; want group node09-3", part, err)
	}
}
