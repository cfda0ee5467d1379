package service

import "time"

// A replica's events are told by its supervisor from what its Tracker
// decides; Watch says which, bounded so a flapping service cannot flood
// the event log (nor its owner's hourly budget of events there): a start
// or restart and the first healthy check after it are always told (a
// crash loop bounds those), while a flap between healthy and unhealthy
// with no restart is told at most once every FlapEvery, the next event
// carrying how many changes were not told.

// FlapEvery bounds how often a check that passes and fails in turn is
// told as svc-healthy and svc-unhealthy events.
const FlapEvery = time.Minute

// DefaultTellUnhealthyAfter is how long a replica may go without a
// passing check before its owner is told (a notice in their sessions,
// their webhook): twice the default start-up allowance, so a model that
// loads slowly is not reported, and one that never answers is.
const DefaultTellUnhealthyAfter = 10 * time.Minute

// Tell is one event a probe calls for.
type Tell int

// What a Watch may call for.
const (
	// TellHealthy: the replica passes its check, first since its start
	// or again after failing.
	TellHealthy Tell = iota + 1
	// TellUnhealthy: a healthy replica fails its check.
	TellUnhealthy
	// TellUnhealthyLong: the replica has not passed a check for
	// TellUnhealthyAfter; told once until it passes again.
	TellUnhealthyLong
	// TellRestarted: the supervisor restarted it in place.
	TellRestarted
	// TellIdle: no requests and no SM use for IdleAfter; told once until
	// it is used again.
	TellIdle
)

// Watch follows one replica's checks and use on its node, for its
// events and its idle flag: pure state, driven by Observe after each of
// the Tracker's decisions.
type Watch struct {
	// TellUnhealthyAfter: see DefaultTellUnhealthyAfter (zero: it).
	TellUnhealthyAfter time.Duration
	// IdleAfter is how long without requests nor SM use makes the
	// replica idle; zero never does.
	IdleAfter time.Duration

	state       State     // the state last seen
	healthyTold bool      // a healthy check was told since the last (re)start
	told        State     // the state last told (healthy or unhealthy); "" since a (re)start
	lastFlap    time.Time // when a flap was last told
	changes     int       // changes between healthy and unhealthy since the last told
	failingFrom time.Time // since when no check passed; zero while healthy
	toldLong    bool
	lastUse     time.Time // the last time a request or SM use was seen
	idle        bool
}

// NewWatch follows a replica whose lease says st, adopted (or started)
// at now: an agent's restart tells nothing of what it had told already.
// A replica the lease calls idle stays idle since then, not told again.
func NewWatch(st Status, now time.Time, tellAfter, idleAfter time.Duration) *Watch {
	if tellAfter <= 0 {
		tellAfter = DefaultTellUnhealthyAfter
	}
	w := &Watch{TellUnhealthyAfter: tellAfter, IdleAfter: idleAfter, state: st.State, healthyTold: st.State == Healthy, lastUse: now}
	if st.State == Healthy || st.State == Unhealthy {
		w.told = st.State
	}
	if st.State != Healthy {
		w.failingFrom = now
	}
	if !st.IdleSince.IsZero() {
		w.lastUse, w.idle = st.IdleSince, true
	}
	return w
}

// Observe takes the state the Tracker left the replica in at now, whether
// it restarted it, and whether the replica was used since the last probe
// (a request to its port, SM use on its GPUs), and says what to tell;
// untold is the number of changes between healthy and unhealthy not told
// before this one (for its event's words). A change held back is told
// once FlapEvery has passed if the replica is still in it, so the last
// told word is the replica's state within a minute.
func (w *Watch) Observe(st State, restarted, used bool, now time.Time) (tells []Tell, untold int) {
	if restarted {
		tells = append(tells, TellRestarted)
		w.healthyTold, w.told = false, ""
	}
	prev := w.state
	w.state = st
	if !restarted && (st == Healthy && prev == Unhealthy || st == Unhealthy && prev == Healthy) {
		w.changes++
	}
	switch {
	case st == Healthy:
		w.failingFrom, w.toldLong = time.Time{}, false
		switch {
		case !w.healthyTold:
			w.healthyTold, w.told, w.changes = true, Healthy, 0
			tells = append(tells, TellHealthy)
		case w.told != Healthy || w.changes > 0:
			tells, untold = w.flap(tells, TellHealthy, Healthy, now)
		}
	default:
		if w.failingFrom.IsZero() {
			w.failingFrom = now
		}
		if st == Unhealthy && !restarted && w.told != "" && (w.told == Healthy || w.changes > 0) {
			tells, untold = w.flap(tells, TellUnhealthy, Unhealthy, now)
		}
		if !w.toldLong && now.Sub(w.failingFrom) >= w.TellUnhealthyAfter {
			w.toldLong = true
			tells = append(tells, TellUnhealthyLong)
		}
	}
	if used || restarted {
		w.lastUse, w.idle = now, false
	} else if w.IdleAfter > 0 && !w.idle && now.Sub(w.lastUse) >= w.IdleAfter {
		w.idle = true
		tells = append(tells, TellIdle)
	}
	return tells, untold
}

// flap tells t (the replica now in state st) unless a change was told
// within FlapEvery; untold is how many changes between healthy and
// unhealthy since the last told one it does not tell (the one it tells
// is among them).
func (w *Watch) flap(tells []Tell, t Tell, st State, now time.Time) (_ []Tell, untold int) {
	if !w.lastFlap.IsZero() && now.Sub(w.lastFlap) < FlapEvery {
		return tells, 0
	}
	untold = max(w.changes-1, 0)
	w.lastFlap, w.told, w.changes = now, st, 0
	return append(tells, t), untold
}

// IdleSince is when the replica was last used, while it is idle; zero
// while it is not.
func (w *Watch) IdleSince() time.Time {
	if !w.idle {
		return time.Time{}
	}
	return w.lastUse
}
