package service

import (
	"testing"
	"time"
)

func TestTrackerRestartsWithGrowingBackoffThenStopsACrashLoop(t *testing.T) {
	r := Rules{StartAllowance: 10 * time.Second, FailsInARow: 3, BackoffBase: time.Second, BackoffMax: 8 * time.Second, CrashRestarts: 3, CrashWindow: 10 * time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := NewTracker(r, t0, 0)
	now := t0
	dead := Probe{}
	// First death: back at once.
	if got := tr.Observe(dead, now); got != Restart {
		t.Fatalf("first death: got %v, want Restart", got)
	}
	tr.Started(now)
	// Second: waits BackoffBase.
	if got := tr.Observe(dead, now); got != Wait {
		t.Fatalf("second death: got %v, want Wait (backoff)", got)
	}
	if at, ok := tr.Waiting(); !ok || at.Sub(now) != time.Second {
		t.Fatalf("backoff: got %v %v, want 1s", at.Sub(now), ok)
	}
	now = now.Add(time.Second)
	if got := tr.Observe(dead, now); got != Restart {
		t.Fatalf("after the backoff: got %v, want Restart", got)
	}
	tr.Started(now)
	if got := tr.Observe(dead, now); got != Wait {
		t.Fatalf("third death: got %v, want Wait", got)
	}
	if at, _ := tr.Waiting(); at.Sub(now) != 2*time.Second {
		t.Fatalf("backoff grows: got %v, want 2s", at.Sub(now))
	}
	now = now.Add(2 * time.Second)
	if got := tr.Observe(dead, now); got != Restart {
		t.Fatalf("got %v, want Restart", got)
	}
	tr.Started(now)
	if got := tr.Observe(dead, now); got != Stop || tr.State != CrashLoop {
		t.Fatalf("fourth death within the window: got %v %s, want Stop crash-looping", got, tr.State)
	}
}

func TestTrackerCountsFailedChecksOnlyAfterTheAllowance(t *testing.T) {
	r := Rules{StartAllowance: 10 * time.Second, FailsInARow: 2}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := NewTracker(r, t0, 0)
	sick := Probe{Running: true}
	for i := range 5 {
		if got := tr.Observe(sick, t0.Add(time.Duration(i)*time.Second)); got != Wait || tr.State != Starting {
			t.Fatalf("within the allowance: got %v %s, want Wait starting", got, tr.State)
		}
	}
	if tr.Observe(Probe{Running: true, Healthy: true}, t0.Add(6*time.Second)); tr.State != Healthy {
		t.Fatalf("got %s, want healthy", tr.State)
	}
	// Once healthy, failures count at once, allowance or not.
	if got := tr.Observe(sick, t0.Add(7*time.Second)); got != Wait || tr.State != Unhealthy {
		t.Fatalf("one failure: got %v %s, want Wait unhealthy", got, tr.State)
	}
	if got := tr.Observe(sick, t0.Add(8*time.Second)); got != Restart {
		t.Fatalf("two in a row: got %v, want Restart", got)
	}
}

func TestSpecCheck(t *testing.T) {
	for _, c := range []struct {
		s  Spec
		ok bool
	}{
		{Spec{Name: "llm", Port: 8000, Health: "/health"}, true},
		{Spec{Name: "tb"}, true},
		{Spec{Name: "9lives"}, false},
		{Spec{Name: "a b"}, false},
		{Spec{Name: "x", Port: 70000}, false},
		{Spec{Name: "x", Health: "/h"}, false},
		{Spec{Name: "x", Port: 1, Health: "h"}, false},
		{Spec{Name: "r", Replicas: 8, Replica: 7, Replaces: "node01-42"}, true},
		{Spec{Name: "r", Replicas: 9}, false},
		{Spec{Name: "r", Replicas: -1}, false},
		{Spec{Name: "r", Replicas: 2, Replica: 2}, false},
		{Spec{Name: "r", Replica: 1}, false},
		{Spec{Name: "r", Replaces: "a b"}, false},
		{Spec{Name: "p", Place: &Placement{Nodelist: []string{"node01", "gpu-2.lab"}, Exclude: []string{"node03"}}}, true},
		{Spec{Name: "p", Place: &Placement{Nodelist: []string{"node 1"}}}, false},
		{Spec{Name: "p", Place: &Placement{Exclude: []string{"\x1b[2J"}}}, false},
		{Spec{Name: "p", Place: &Placement{Exclude: make([]string, 65)}}, false},
	} {
		if err := c.s.Check(); (err == nil) != c.ok {
			t.Errorf("%+v: got %v, want ok=%v", c.s, err, c.ok)
		}
	}
}

func TestWriteStatusHoldsBackAFlappingCheck(t *testing.T) {
	healthy := Status{State: Healthy, Restarts: 1, PID: 10}
	for _, c := range []struct {
		name      string
		old, now  Status
		sinceLast time.Duration
		want      bool
	}{
		{"no change", healthy, healthy, time.Hour, false},
		{"a flap soon after the last write", healthy, Status{State: Unhealthy, Restarts: 1, PID: 10}, time.Second, false},
		{"a flap after StatusEvery", healthy, Status{State: Unhealthy, Restarts: 1, PID: 10}, StatusEvery, true},
		{"a restart at once", healthy, Status{State: Restarting, Restarts: 2, PID: 10}, 0, true},
		{"found healthy after starting, at once", Status{State: Starting, Restarts: 2, PID: 11}, Status{State: Healthy, Restarts: 2, PID: 11}, 0, true},
	} {
		if got := WriteStatus(c.old, c.now, c.sinceLast); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReplicaNames(t *testing.T) {
	for _, c := range []struct {
		s              Spec
		label, session string
	}{
		{Spec{Name: "llm"}, "llm", "svc-llm"},
		{Spec{Name: "llm", Replicas: 2}, "llm/0", "svc-llm"},
		{Spec{Name: "llm", Replicas: 2, Replica: 1}, "llm/1", "svc1-llm"},
		{Spec{Name: "llm-1"}, "llm-1", "svc-llm-1"},
	} {
		if got := c.s.Label(); got != c.label {
			t.Errorf("%+v: label %q, want %q", c.s, got, c.label)
		}
		if got := ReplicaSession(c.s.Name, c.s.Replica); got != c.session {
			t.Errorf("%+v: session %q, want %q", c.s, got, c.session)
		}
	}
	for in, want := range map[string]string{"svc-llm": "svcu-llm", "svcu-llm": "svc-llm", "svc1-llm-2": "svc1u-llm-2", "svc1u-llm-2": "svc1-llm-2"} {
		if got := UpdateSession(in); got != want {
			t.Errorf("UpdateSession(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		ref     string
		name    string
		replica int
		pick    bool
		ok      bool
	}{
		{"llm", "llm", 0, false, true},
		{"llm/1", "llm", 1, true, true},
		{"llm/01", "", 0, false, false},
		{"llm/8", "", 0, false, false},
		{"llm/-1", "", 0, false, false},
		{"9x/1", "", 0, false, false},
	} {
		name, replica, pick, err := ParseRef(c.ref)
		if (err == nil) != c.ok || name != c.name || replica != c.replica || pick != c.pick {
			t.Errorf("ParseRef(%q) = %q %d %v %v, want %q %d %v ok=%v", c.ref, name, replica, pick, err, c.name, c.replica, c.pick, c.ok)
		}
	}
}
