package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/service"
)

// TestServiceStopsAreKeptLongerAndBounded: a service's stop outlives the
// ten minutes of a queued run's end (a node may be lost for hours), names
// the root every copy of the replica shares, and at most MaxServiceStops
// are kept, the oldest going first.
func TestServiceStopsAreKeptLongerAndBounded(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	moved := Lease{ID: "node01-7", Kind: KindService, Service: &service.Service{Spec: service.Spec{Name: "web", Root: "node02-3"}}}
	runs := RememberEnded(nil, EndedRun{Entry: "q1", Lease: "node01-1", Reason: EndReleased, At: t0}, t0)
	runs = RememberEnded(runs, ServiceStop(moved, EndReleased, t0), t0)
	later := t0.Add(2 * time.Hour)
	runs = RememberEnded(runs, EndedRun{Entry: "q2", Lease: "node01-9", Reason: EndReleased, At: later}, later)
	if !ServiceStopped(runs, "node02-3") || ServiceStopped(runs, "node01-7") {
		t.Fatalf("after 2 h the stop of root node02-3 should be kept (and no other): %+v", runs)
	}
	for _, x := range runs {
		if x.Entry == "q1" {
			t.Fatalf("a queued run's end outlived EndedRunKeep: %+v", runs)
		}
	}
	for i := range MaxServiceStops + 5 {
		l := Lease{ID: fmt.Sprintf("node01-%d", 100+i), Kind: KindService, Service: &service.Service{Spec: service.Spec{Name: "s"}}}
		runs = RememberEnded(runs, ServiceStop(l, EndCrashLoop, later), later)
	}
	stops := 0
	for _, x := range runs {
		if err := x.Validate(); err != nil {
			t.Fatal(err)
		}
		if ServiceStopped([]EndedRun{x}, x.Lease) || x.Lease == "node01-7" {
			stops++
		}
	}
	if stops != MaxServiceStops || ServiceStopped(runs, "node02-3") || !ServiceStopped(runs, fmt.Sprintf("node01-%d", 100+MaxServiceStops+4)) {
		t.Fatalf("kept %d stops (want %d, the newest; the oldest, node02-3, gone: %v)", stops, MaxServiceStops, !ServiceStopped(runs, "node02-3"))
	}
	if got := runs[len(runs)-1].Entry; len(got) > 256 {
		t.Fatalf("entry too long: %q", got)
	}
}
