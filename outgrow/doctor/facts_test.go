package doctor

import (
	"reflect"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// TestCountServicesCountsNamesAndEveryReplicasGPUs: two replicas of one
// service are one service holding both their GPUs; another person's
// service of the same name is another service.
func TestCountServicesCountsNamesAndEveryReplicasGPUs(t *testing.T) {
	svc := func(user, name string, replica int, gpus ...int) lease.Lease {
		return lease.Lease{User: user, Kind: lease.KindService, GPUs: gpus,
			Service: &service.Service{Spec: service.Spec{Name: name, Replicas: 2, Replica: replica}}}
	}
	var f Findings
	f.CountServices([]lease.Lease{svc("ana", "llm", 0, 0), svc("ana", "llm", 1, 1), svc("bo", "llm", 0, 2, 3), {User: "cy", GPUs: []int{4}}})
	if f.Services != 2 || f.ServiceGPUs != 4 {
		t.Fatalf("got %d services holding %d GPUs, want 2 holding 4", f.Services, f.ServiceGPUs)
	}
}

// TestLeaseFacts: a lease past its end is overdue by how long; a booking's
// reservation is neither overdue nor a holder; a squatted GPU names its
// holder, its squatters' owners once each (a uid where the name is
// unknown) and how long it has been seen so.
func TestLeaseFacts(t *testing.T) {
	now := t0.Add(time.Hour)
	leases := []lease.Lease{
		{ID: "n-1", User: "ana", GPUs: []int{0}, Session: "dibs-n-1", ExpiresAt: now.Add(-10 * time.Minute)},
		{ID: "n-2", User: "bo", GPUs: []int{1}, ExpiresAt: now.Add(time.Hour)},
		{ID: "n-3", User: "cy", GPUs: []int{1}, ExpiresAt: now.Add(-time.Hour), ReservedUntil: now.Add(time.Hour)},
	}
	squatted := lease.Judgement{Flags: []lease.Flag{lease.FlagSquatted}, Squatters: []nodeprobe.Process{
		{PID: 7, User: "eve"}, {PID: 8, User: "eve"}, {PID: 9, UID: 1005}}}
	judged := map[int]lease.Judgement{1: squatted, 2: squatted}
	since := func(gpu int) time.Time {
		if gpu == 1 {
			return now.Add(-5 * time.Minute)
		}
		return time.Time{}
	}
	overdue, squats := LeaseFacts(leases, []nodeprobe.GPU{gpu(0), gpu(1), gpu(2)}, judged, now, since)
	if want := []LeaseFact{{Lease: "n-1", User: "ana", GPUs: []int{0}, Session: "dibs-n-1", For: 10 * time.Minute}}; !reflect.DeepEqual(overdue, want) {
		t.Errorf("overdue = %+v, want %+v", overdue, want)
	}
	want := []SquatFact{
		{GPU: 1, Holder: "bo", Users: []string{"eve", "uid 1005"}, PIDs: []int{7, 8, 9}, For: 5 * time.Minute},
		{GPU: 2, Users: []string{"eve", "uid 1005"}, PIDs: []int{7, 8, 9}},
	}
	if !reflect.DeepEqual(squats, want) {
		t.Errorf("squatted = %+v, want %+v", squats, want)
	}
}

// TestSessionFacts: a dibs- session no lease holds is stray (another name
// is the user's own); a lease whose session is not listed is lost once a
// minute old; a user whose sessions were not listed is not judged.
func TestSessionFacts(t *testing.T) {
	now := t0.Add(time.Hour)
	leases := []lease.Lease{
		{ID: "n-1", User: "ana", Session: "dibs-n-1", StartedAt: t0},
		{ID: "n-2", User: "ana", Session: "dibs-n-2", StartedAt: t0},
		{ID: "n-3", User: "ana", Session: "dibs-n-3", StartedAt: now.Add(-time.Second)},
		{ID: "n-4", User: "bo", Session: "dibs-n-4", StartedAt: t0},
	}
	listed := map[string][]string{"ana": {"dibs-n-1", "dibs-old", "mine"}}
	stray, lost := SessionFacts(leases, listed, now)
	if want := []SessionFact{{User: "ana", Session: "dibs-old"}}; !reflect.DeepEqual(stray, want) {
		t.Errorf("stray = %+v, want %+v", stray, want)
	}
	if want := []LeaseFact{{Lease: "n-2", User: "ana", Session: "dibs-n-2", For: time.Hour}}; !reflect.DeepEqual(lost, want) {
		t.Errorf("lost = %+v, want %+v", lost, want)
	}
	owners := SessionOwners(leases, Tally{UserHours: map[string]float64{"cy": 1, "ana": 2, "": 1}})
	if want := []string{"ana", "bo", "cy"}; !reflect.DeepEqual(owners, want) {
		t.Errorf("SessionOwners = %q, want %q", owners, want)
	}
}

// TestSquatClock: a GPU's clock starts when it is first seen squatted,
// holds while it stays so, and stops when it is seen clean.
func TestSquatClock(t *testing.T) {
	c := SquatClock{}
	sq := lease.Judgement{Flags: []lease.Flag{lease.FlagSquatted}}
	c.Seen(map[int]lease.Judgement{0: sq, 1: {}}, t0)
	c.Seen(map[int]lease.Judgement{0: sq, 1: sq}, t0.Add(time.Minute))
	if want := (SquatClock{0: t0, 1: t0.Add(time.Minute)}); !reflect.DeepEqual(c, want) {
		t.Fatalf("clock = %v, want %v", c, want)
	}
	c.Seen(map[int]lease.Judgement{1: sq}, t0.Add(2*time.Minute))
	if want := (SquatClock{1: t0.Add(time.Minute)}); !reflect.DeepEqual(c, want) {
		t.Fatalf("clock = %v, want %v", c, want)
	}
}

// TestTallyPages: the pages of a tally add up to it, the counts on the
// first page only.
func TestTallyPages(t *testing.T) {
	all := Tally{Leases: 3, Overdue: 1, UserHours: map[string]float64{"ana": 2},
		Waits: []time.Duration{1, 2, 3, 4, 5}, GangRanks: []GangRank{{Entry: "a"}, {Entry: "b"}}}
	var sum Tally
	for p := 0; ; p++ {
		page, more := all.Page(p, 2, 1)
		if p > 0 && page.Leases != 0 {
			t.Errorf("page %d carries the counts", p)
		}
		sum.Add(page)
		if !more {
			if p != 2 {
				t.Errorf("%d pages, want 3", p+1)
			}
			break
		}
	}
	if !reflect.DeepEqual(sum.Waits, all.Waits) || !reflect.DeepEqual(sum.GangRanks, all.GangRanks) || sum.Leases != 3 || sum.Overdue != 1 || sum.UserHours["ana"] != 2 {
		t.Errorf("the pages add up to %+v, want %+v", sum, all)
	}
}
