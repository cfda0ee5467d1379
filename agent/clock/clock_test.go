package clock

import (
	"testing"
	"time"
)

func recv(ch <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestFakeTickersAndTimers(t *testing.T) {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tk := f.NewTicker(time.Second)
	after := f.After(3 * time.Second)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticker fired before any time passed")
	}
	f.Advance(time.Second)
	if got, ok := recv(tk.C()); !ok || !got.Equal(start.Add(time.Second)) {
		t.Fatalf("ticker after 1s: %v %v", got, ok)
	}
	if _, ok := recv(after); ok {
		t.Fatal("3s timer fired after 1s")
	}
	f.Advance(5 * time.Second) // one tick delivered, like a time.Ticker with a slow reader
	if _, ok := recv(tk.C()); !ok {
		t.Fatal("ticker did not fire after 5s more")
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticker queued more than one tick")
	}
	if _, ok := recv(after); !ok {
		t.Fatal("3s timer did not fire at 6s")
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("stopped ticker fired")
	}
}

func TestFakeWallStepsLeaveMonotonicAlone(t *testing.T) {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tk := f.NewTicker(time.Minute)
	mono := f.Mono()
	f.StepWall(3 * time.Hour)
	if _, ok := recv(tk.C()); ok {
		t.Error("a wall step forward fired a ticker")
	}
	if f.Mono() != mono || !f.Now().Equal(start.Add(3*time.Hour)) {
		t.Errorf("after a 3h wall step: mono %v (was %v), wall %v", f.Mono(), mono, f.Now())
	}
	f.StepWall(-5 * time.Hour)
	f.Advance(time.Minute)
	if _, ok := recv(tk.C()); !ok {
		t.Error("after a wall step back the ticker stopped following the monotonic clock")
	}
	if want := start.Add(-2*time.Hour + time.Minute); !f.Now().Equal(want) {
		t.Errorf("wall = %v, want %v", f.Now(), want)
	}
	f.Reboot("b2")
	if f.Boot() != "b2" || f.Mono() > time.Hour {
		t.Errorf("after a reboot: boot %q mono %v", f.Boot(), f.Mono())
	}
}

func TestRealMonoCountsAndNamesTheBoot(t *testing.T) {
	c := Real()
	a := c.Mono()
	<-c.After(2 * time.Millisecond)
	if b := c.Mono(); b <= a {
		t.Errorf("Mono went from %v to %v", a, b)
	}
	if c.Boot() == "" {
		t.Error("no boot id")
	}
}
