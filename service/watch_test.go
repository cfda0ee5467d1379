package service

import (
	"slices"
	"testing"
	"time"
)

var w0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestWatchTellsAStartsFirstHealthyAndEachRestart: a replica's first
// passing check after its start, and after each restart, is told; a
// check that keeps passing tells nothing more.
func TestWatchTellsAStartsFirstHealthyAndEachRestart(t *testing.T) {
	w := NewWatch(Status{State: Starting}, w0, time.Hour, 0)
	steps := []struct {
		st        State
		restarted bool
		want      []Tell
	}{
		{Starting, false, nil},
		{Healthy, false, []Tell{TellHealthy}},
		{Healthy, false, nil},
		{Restarting, true, []Tell{TellRestarted}},
		{Starting, false, nil},
		{Healthy, false, []Tell{TellHealthy}},
		{Healthy, false, nil},
	}
	for i, s := range steps {
		got, _ := w.Observe(s.st, s.restarted, true, w0.Add(time.Duration(i)*time.Second))
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d (%s, restarted %v): told %v, want %v", i, s.st, s.restarted, got, s.want)
		}
	}
}

// TestWatchBoundsAFlappingCheck: a check that passes and fails every
// probe for ten minutes is told at most once a minute each way, and the
// next told change says how many were not.
func TestWatchBoundsAFlappingCheck(t *testing.T) {
	w := NewWatch(Status{State: Healthy}, w0, time.Hour, 0)
	told, skipped := 0, 0
	var last Tell
	observe := func(i int, st State) {
		tells, untold := w.Observe(st, false, true, w0.Add(time.Duration(i)*time.Second))
		for _, x := range tells {
			told++
			last = x
		}
		skipped += untold
	}
	for i := range 600 { // one probe a second for 10 minutes
		st := Healthy
		if i%2 == 0 {
			st = Unhealthy
		}
		observe(i, st)
	}
	if told > 11 || told < 5 {
		t.Errorf("a check flapping every second for 10 minutes told %d events, want about one a minute (at most 11)", told)
	}
	// It settles healthy: told within a minute, the last word healthy,
	// and every change either told or counted.
	for i := 600; i < 700; i++ {
		observe(i, Healthy)
	}
	if last != TellHealthy {
		t.Errorf("settled healthy after the flapping: last told %v, want healthy", last)
	}
	if told+skipped != 600 {
		t.Errorf("%d changes told and %d counted as not told, want the 600 in all", told, skipped)
	}
}

// TestWatchTellsABlipAndItsRecovery: one failed check between passing
// ones is told, and so is the recovery, within FlapEvery, so the log's
// last word is not "unhealthy" for a replica that is fine.
func TestWatchTellsABlipAndItsRecovery(t *testing.T) {
	w := NewWatch(Status{State: Healthy}, w0, time.Hour, 0)
	var told []Tell
	untoldSum := 0
	for i := range 120 {
		st := Healthy
		if i == 10 {
			st = Unhealthy
		}
		tells, untold := w.Observe(st, false, true, w0.Add(time.Duration(i)*time.Second))
		told = append(told, tells...)
		untoldSum += untold
	}
	if !slices.Equal(told, []Tell{TellUnhealthy, TellHealthy}) {
		t.Fatalf("a one-probe blip told %v, want unhealthy then healthy", told)
	}
	if untoldSum != 0 {
		t.Errorf("the events carried %d untold changes, want none (both changes were told)", untoldSum)
	}
}

// TestWatchTellsUnhealthyForLongOnce: a replica that has not passed a
// check for TellUnhealthyAfter is told once, and again only after it
// passed one in between.
func TestWatchTellsUnhealthyForLongOnce(t *testing.T) {
	w := NewWatch(Status{State: Starting}, w0, 10*time.Minute, 0)
	count := func(from, to time.Duration, st State) int {
		n := 0
		for d := from; d < to; d += 5 * time.Second {
			tells, _ := w.Observe(st, false, true, w0.Add(d))
			for _, x := range tells {
				if x == TellUnhealthyLong {
					n++
				}
			}
		}
		return n
	}
	if n := count(0, 9*time.Minute, Starting); n != 0 {
		t.Fatalf("told unhealthy-for-long %d times within 9 minutes of its start", n)
	}
	if n := count(9*time.Minute, 30*time.Minute, Unhealthy); n != 1 {
		t.Fatalf("told unhealthy-for-long %d times over 21 more minutes, want once", n)
	}
	count(30*time.Minute, 31*time.Minute, Healthy)
	if n := count(31*time.Minute, 45*time.Minute, Unhealthy); n != 1 {
		t.Fatalf("after passing again then failing 14 minutes: told %d times, want once", n)
	}
}

// TestWatchFlagsIdleOnceAndClearsOnUse: no use for IdleAfter flags the
// replica idle, told once however long it stays so; a request clears it;
// IdleAfter 0 never flags; an agent's restart keeps the flag untold.
func TestWatchFlagsIdleOnceAndClearsOnUse(t *testing.T) {
	w := NewWatch(Status{State: Healthy}, w0, time.Hour, time.Minute)
	idleTold := 0
	for d := time.Duration(0); d < 5*time.Minute; d += time.Second {
		tells, _ := w.Observe(Healthy, false, false, w0.Add(d))
		idleTold += len(tells)
		if d < time.Minute && !w.IdleSince().IsZero() {
			t.Fatalf("idle after %s, want only after a minute", d)
		}
	}
	if idleTold != 1 || !w.IdleSince().Equal(w0) {
		t.Fatalf("5 minutes unused: told %d events, idle since %v; want one svc-idle, idle since the start", idleTold, w.IdleSince())
	}
	adopted := NewWatch(Status{State: Healthy, IdleSince: w0}, w0.Add(5*time.Minute), time.Hour, time.Minute)
	if tells, _ := adopted.Observe(Healthy, false, false, w0.Add(6*time.Minute)); len(tells) != 0 || !adopted.IdleSince().Equal(w0) {
		t.Fatalf("an agent's restart: told %v, idle since %v; want nothing told, still idle since %v", tells, adopted.IdleSince(), w0)
	}
	w.Observe(Healthy, false, true, w0.Add(5*time.Minute))
	if !w.IdleSince().IsZero() {
		t.Fatal("a request did not clear the idle flag")
	}
	never := NewWatch(Status{State: Healthy}, w0, time.Hour, 0)
	for d := time.Duration(0); d < 48*time.Hour; d += time.Minute {
		if tells, _ := never.Observe(Healthy, false, false, w0.Add(d)); len(tells) != 0 {
			t.Fatalf("service_idle_after 0 told %v", tells)
		}
	}
}
