package service

import "time"

// Rules are the supervisor's numbers. Zero fields take the defaults.
type Rules struct {
	// StartAllowance is how long a new replica may take before failing
	// checks counts against it (a model loading its weights).
	StartAllowance time.Duration
	// FailsInARow is how many failed checks in a row restart a replica.
	FailsInARow int
	// BackoffBase is the wait before the second restart within the crash
	// window; each further one doubles it, up to BackoffMax. The first
	// restart waits nothing: a one-off crash is back at once.
	BackoffBase, BackoffMax time.Duration
	// CrashRestarts restarts within CrashWindow are a crash loop: the
	// service is stopped (its log kept) and its owner told.
	CrashRestarts int
	CrashWindow   time.Duration
	// TellUnhealthyAfter is how long a replica may go without passing a
	// check before its owner is told (DefaultTellUnhealthyAfter).
	TellUnhealthyAfter time.Duration
}

// DefaultRules are what a small team's endpoint wants: vLLM takes a minute
// or two to load a model (StartAllowance 5 min), three failed checks a
// few seconds apart are a hung server, and five restarts in ten minutes
// are a bug no restart will fix.
func DefaultRules() Rules {
	return Rules{StartAllowance: 5 * time.Minute, FailsInARow: 3, BackoffBase: time.Second, BackoffMax: time.Minute,
		CrashRestarts: 5, CrashWindow: 10 * time.Minute}
}

// WithDefaults is r with every zero field given its default.
func (r Rules) WithDefaults() Rules { return r.withDefaults() }

func (r Rules) withDefaults() Rules {
	d := DefaultRules()
	if r.StartAllowance <= 0 {
		r.StartAllowance = d.StartAllowance
	}
	if r.FailsInARow <= 0 {
		r.FailsInARow = d.FailsInARow
	}
	if r.BackoffBase <= 0 {
		r.BackoffBase = d.BackoffBase
	}
	if r.BackoffMax <= 0 {
		r.BackoffMax = d.BackoffMax
	}
	if r.CrashRestarts <= 0 {
		r.CrashRestarts = d.CrashRestarts
	}
	if r.CrashWindow <= 0 {
		r.CrashWindow = d.CrashWindow
	}
	if r.TellUnhealthyAfter <= 0 {
		r.TellUnhealthyAfter = DefaultTellUnhealthyAfter
	}
	return r
}

// Probe is one look at a replica: whether its command still runs, and
// whether its check passed (the port answers and its listener is the
// replica's own process, or the HTTP path answers 2xx).
type Probe struct {
	Running bool
	Healthy bool
}

// Action is what the supervisor is to do after a probe.
type Action int

// What a Tracker may ask for.
const (
	// Wait: nothing to do now.
	Wait Action = iota
	// Restart: stop the replica (if it still runs) and start it again.
	Restart
	// Stop: the service crash-loops; end it and tell its owner.
	Stop
)

// Tracker follows one replica on its node: pure state, driven by Observe.
// The supervisor keeps one per service and starts a new one (with the
// restarts the lease recorded) when the agent restarts.
type Tracker struct {
	Rules Rules
	// State is the replica's state as last decided.
	State State
	// Since is when the replica now running was started (or adopted).
	Since time.Time
	// Restarts counts every restart; Recent holds those in the crash
	// window.
	Restarts int
	Recent   []time.Time
	// fails counts failed checks in a row; restartAt is when a restart
	// waiting out its backoff may go.
	fails     int
	restartAt time.Time
	checked   bool
}

// NewTracker follows a replica started (or found running) at since.
func NewTracker(r Rules, since time.Time, restarts int) *Tracker {
	return &Tracker{Rules: r.withDefaults(), State: Starting, Since: since, Restarts: restarts}
}

// Backoff is the wait before a restart when n restarts happened in the
// crash window before it: none for the first, then BackoffBase doubling
// up to BackoffMax.
func (r Rules) Backoff(n int) time.Duration {
	r = r.withDefaults()
	if n <= 0 {
		return 0
	}
	d := r.BackoffBase
	for i := 1; i < n && d < r.BackoffMax; i++ {
		d *= 2
	}
	return min(d, r.BackoffMax)
}

// Observe takes one probe at now and says what to do. A replica whose
// command ended, or that failed FailsInARow checks in a row after its
// start-up allowance, is restarted after its backoff; the restart that
// would pass CrashRestarts in CrashWindow is a crash loop instead.
func (t *Tracker) Observe(p Probe, now time.Time) Action {
	if !t.restartAt.IsZero() {
		if now.Before(t.restartAt) {
			return Wait
		}
		return t.restart(now)
	}
	switch {
	case !p.Running:
		return t.scheduleRestart(now)
	case p.Healthy:
		t.fails, t.checked = 0, true
		t.State = Healthy
		return Wait
	case now.Sub(t.Since) < t.Rules.StartAllowance && !t.checked:
		t.State = Starting
		return Wait
	}
	t.fails++
	t.State = Unhealthy
	if t.fails >= t.Rules.FailsInARow {
		return t.scheduleRestart(now)
	}
	return Wait
}

// scheduleRestart asks for a restart now, or after its backoff, or says
// the service crash-loops.
func (t *Tracker) scheduleRestart(now time.Time) Action {
	t.prune(now)
	if len(t.Recent) >= t.Rules.CrashRestarts {
		t.State = CrashLoop
		return Stop
	}
	wait := t.Rules.Backoff(len(t.Recent))
	t.State = Restarting
	if wait <= 0 {
		return t.restart(now)
	}
	t.restartAt = now.Add(wait)
	return Wait
}

func (t *Tracker) restart(now time.Time) Action {
	t.restartAt = time.Time{}
	t.Recent = append(t.Recent, now)
	t.Restarts++
	t.fails, t.checked = 0, false
	t.State = Restarting
	return Restart
}

// Started records that the restarted replica began at now.
func (t *Tracker) Started(now time.Time) {
	t.Since = now
	t.State = Starting
}

// Waiting reports whether a restart is waiting out its backoff, and until
// when.
func (t *Tracker) Waiting() (time.Time, bool) { return t.restartAt, !t.restartAt.IsZero() }

func (t *Tracker) prune(now time.Time) {
	keep := t.Recent[:0]
	for _, at := range t.Recent {
		if now.Sub(at) < t.Rules.CrashWindow {
			keep = append(keep, at)
		}
	}
	t.Recent = keep
}

// StatusEvery bounds how often a check that flaps between healthy and
// unhealthy is written to the service's lease: each write is an fsync and
// a broadcast to every node.
const StatusEvery = 2 * time.Second

// WriteStatus reports whether the supervisor should write now as the
// lease's status when old is what it holds, written sinceLast ago: only
// a change, and a flap between healthy and unhealthy at most every
// StatusEvery (the next probe writes it, if it still holds). A restart,
// a new process, and a replica found healthy after starting are written
// at once.
func WriteStatus(old, now Status, sinceLast time.Duration) bool {
	if now.State == old.State && now.Restarts == old.Restarts && now.PID == old.PID && now.IdleSince.Equal(old.IdleSince) {
		return false
	}
	checked := func(s State) bool { return s == Healthy || s == Unhealthy }
	flap := checked(now.State) && checked(old.State) && now.Restarts == old.Restarts && now.PID == old.PID
	return !flap || sinceLast >= StatusEvery
}
