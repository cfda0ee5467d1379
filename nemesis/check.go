package nemesis

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/queue"
)

// The checks, as Violation.Check names them.
const (
	// CheckGPU: each GPU's history is linearizable against the lease
	// model — at most one holder, a holder ends only by an end its node
	// wrote, fencing tokens grow, every read sees the holder.
	CheckGPU = "gpu-linearizable"
	// CheckAckedLease: an acknowledged lease was written, and survives its
	// node's restart until an end is written.
	CheckAckedLease = "acked-lease-lost"
	// CheckTokens: each node grants tokens that only grow, restarts
	// included.
	CheckTokens = "token-order"
	// CheckQueueLost: an acknowledged submission is written at its origin
	// and stays there until it is finished or cancelled.
	CheckQueueLost = "queue-entry-lost"
	// CheckRunTwice: no attempt of a queue entry (no gang rank) runs twice.
	CheckRunTwice = "entry-run-twice"
	// CheckGang: a gang runs with all its ranks or none, beyond the times
	// the queue policy allows for starting and stopping.
	CheckGang = "gang-partial"
	// CheckConvergence: every board showed the owners' truth within
	// CheckOptions.ConvergeWithin of a fault healing.
	CheckConvergence = "convergence"
	// CheckFalseDead: no live member was called dead under packet loss.
	CheckFalseDead = "false-dead"
	// CheckRestart: no running work is ended by a restart or kill of an
	// agent that came back within the grace (SchedConfig.LostAfter): no
	// gang rank is stopped or counted lost unless something else broke
	// its gang.
	CheckRestart = "restart-ended-work"
	// CheckArrayTwice: no attempt of a job array's task runs twice.
	CheckArrayTwice = "array-task-twice"
	// CheckArrayLost: an acknowledged job array not cancelled is still
	// queued at its origin at the end, or every one of its tasks ran.
	CheckArrayLost = "array-task-lost"
	// CheckArrayThrottle: never more than an array's throttle of its
	// tasks hold leases at once.
	CheckArrayThrottle = "array-throttle"
	// CheckDependency: a run waiting for others (--after, --after-any)
	// starts only after every part of each ended, and for --after only if
	// it ran and was not cancelled.
	CheckDependency = "dependency-order"
	// CheckReboot: every lease running a session on a node that rebooted
	// or lost power ends, once its agent is back, for the reboot
	// (lease.EndRebooted) within CheckOptions.RebootWithin; no lease ends
	// so unless its node rebooted while it was held.
	CheckReboot = "reboot-end"
)

// allChecks lists every check in the order a report shows them.
func allChecks() []string {
	return []string{CheckGPU, CheckAckedLease, CheckTokens, CheckQueueLost, CheckRunTwice, CheckArrayTwice, CheckArrayLost, CheckArrayThrottle, CheckDependency, CheckGang, CheckRestart, CheckReboot,
		CheckServiceCopies, CheckServiceStopped, CheckServiceDown, CheckConvergence, CheckFalseDead}
}

// CheckOptions tunes Check; the zero value is what Check uses.
type CheckOptions struct {
	// Timeout bounds porcupine's search over one chunk of one GPU's
	// history (default 10 s); a chunk it cannot decide in time counts as
	// undecided (Report.Undecided), not as a violation.
	Timeout time.Duration
	// VisualizeDir, when set, receives porcupine's HTML view of every GPU
	// chunk found not linearizable (one file per violation).
	VisualizeDir string
	// ConvergeWithin is how soon after a heal every board must agree
	// (default 5 s).
	ConvergeWithin time.Duration
	// GangSlack is added to the queue policy's times when judging gangs
	// (default 10 s): failure detection, gossip, the scheduler's and the
	// node's ticks.
	GangSlack time.Duration
	// RestartSlack is how much shorter than the grace an agent's absence
	// may be and still count as past it (default 2 s): the failure
	// detector and the re-join after it came back.
	RestartSlack time.Duration
	// PublishWithin is how soon after a durable write its node shows it
	// to readers at the latest (default 250 ms). The node publishes at
	// once, under the lock its next write takes, so this only bounds a
	// node's last write before a quiet spell; a node killed or paused is
	// given it again from its return.
	PublishWithin time.Duration
	// RebootWithin is how soon after a rebooted node's agent is back the
	// leases whose sessions died with the node must have ended (default
	// 5 s; the agent ends them before it serves).
	RebootWithin time.Duration
	// CopySlack is how much longer than the grace two copies of a
	// service's replica may answer at once (default 5 s): the watchdog
	// reads the heartbeat's age in whole seconds and allows a second
	// more (ceil(grace)+1 s), looks once a second, and the agent touches
	// the heartbeat once a second (3 s together); the observer's rounds
	// and the copy's exit after SIGTERM take the rest.
	CopySlack time.Duration
	// StopWithin is how soon after `dibs stop` is answered no copy of
	// the service answers (default 2 s): the stop kills the session
	// before it answers, and the copy exits at its SIGHUP.
	StopWithin time.Duration
	// DetectWithin is how soon a node that went away is called dead
	// (default 5 s, the failure detector's promise, gossip/config.go),
	// and MoveWithin how long a move takes once its node is lost past
	// the grace (default 3 s: the scheduler's next pass, the claim, the
	// tmux session, the first probe): both bound when a service answers
	// again (serviceBound).
	DetectWithin, MoveWithin time.Duration
	// MinChunk is how many operations a GPU's chunk holds at least before
	// the history is cut at the next quiescent point (default 128).
	MinChunk int
	// Workers check GPU chunks in parallel (default GOMAXPROCS).
	Workers int
}

func (o CheckOptions) withDefaults() CheckOptions {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.ConvergeWithin <= 0 {
		o.ConvergeWithin = 5 * time.Second
	}
	if o.GangSlack <= 0 {
		o.GangSlack = 10 * time.Second
	}
	if o.RestartSlack <= 0 {
		o.RestartSlack = 2 * time.Second
	}
	if o.PublishWithin <= 0 {
		o.PublishWithin = 250 * time.Millisecond
	}
	if o.RebootWithin <= 0 {
		o.RebootWithin = 5 * time.Second
	}
	if o.CopySlack <= 0 {
		o.CopySlack = 5 * time.Second
	}
	if o.StopWithin <= 0 {
		o.StopWithin = 2 * time.Second
	}
	if o.DetectWithin <= 0 {
		o.DetectWithin = 5 * time.Second
	}
	if o.MoveWithin <= 0 {
		o.MoveWithin = 3 * time.Second
	}
	if o.MinChunk <= 0 {
		o.MinChunk = 128
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	return o
}

// Violation is one broken promise, with the shortest history found that
// shows it.
type Violation struct {
	// Check is one of the Check* names.
	Check string
	// Subject is what broke: a GPU ("n1 GPU 0"), a lease, an entry, a gang.
	Subject string
	// What says what went wrong, in one sentence.
	What string
	// History is the operations and writes that show it, one line each,
	// times in milliseconds since the run started.
	History []string
}

// Report is what the checker found in one history.
type Report struct {
	// Ops counts the clients' operations, by kind and by outcome; Writes
	// the nodes' durable writes.
	Ops          int
	OpsByKind    map[OpKind]int
	OpsByOutcome map[Outcome]int
	Writes       int
	// Faults counts what the nemesis did, by kind.
	Faults       int
	FaultsByKind map[FaultKind]int
	// Heals are the convergence measurements; HealsConverged those that
	// converged within CheckOptions.ConvergeWithin.
	Heals, HealsConverged int
	// FalseDead counts live members called dead under packet loss alone.
	FalseDead int
	// GPUs is how many GPUs had a history to check, Chunks how many
	// pieces those histories were cut into at quiescent points, Undecided
	// how many chunks porcupine could not decide within the timeout.
	GPUs, Chunks, Undecided int
	// ReadsSkipped counts OK reads not answered by the GPUs' own node
	// (they show gossip, not the owner's truth, so the model skips them).
	ReadsSkipped int
	// Services are the service checks' figures: services started (and
	// answered), stopped, replicas SIGKILLed, crash-looped; the runs of
	// answers the observer recorded; how often and how long at most two
	// copies of a replica answered at once; how often a running service
	// answered nowhere, the longest it took to answer again after the
	// heal it was measured from, and the bound held against it.
	Services ServiceFigures
	// Ran is how long the run lasted, Took how long the check did.
	Ran, Took time.Duration
	// Violations are what broke, check by check.
	Violations []Violation
}

// Failed reports whether any promise was broken.
func (r Report) Failed() bool { return len(r.Violations) > 0 }

// ByCheck counts the violations of each check, every check included.
func (r Report) ByCheck() map[string]int {
	out := map[string]int{}
	for _, c := range allChecks() {
		out[c] = 0
	}
	for _, v := range r.Violations {
		out[v.Check]++
	}
	return out
}

// Check reads a whole history and reports every promise it shows broken,
// with the default options.
func Check(h *History) Report { return CheckWith(h, CheckOptions{}) }

// CheckWith is Check with options.
func CheckWith(h *History, o CheckOptions) Report {
	o = o.withDefaults()
	began := time.Now()
	r := count(h, o)
	x := newIndex(h, o)
	g := checkGPUs(x, o)
	r.GPUs, r.Chunks, r.Undecided, r.ReadsSkipped = g.gpus, g.chunks, g.undecided, g.readsSkipped
	r.Violations = append(r.Violations, g.violations...)
	r.Violations = append(r.Violations, checkAcked(x)...)
	r.Violations = append(r.Violations, checkTokens(x)...)
	r.Violations = append(r.Violations, checkQueue(x)...)
	r.Violations = append(r.Violations, checkRunTwice(x)...)
	r.Violations = append(r.Violations, checkArrays(x)...)
	r.Violations = append(r.Violations, checkDependencies(x)...)
	r.Violations = append(r.Violations, checkGangs(x, o)...)
	r.Violations = append(r.Violations, checkRestartKeptWork(x, o)...)
	r.Violations = append(r.Violations, checkReboots(x, o)...)
	sv, sf := checkServices(h, o)
	r.Violations = append(r.Violations, sv...)
	r.Services = sf
	r.Violations = append(r.Violations, checkHeals(h, o)...)
	r.Violations = append(r.Violations, checkExpiry(h)...)
	for i := range r.Violations {
		if r.Violations[i].Check != CheckGPU {
			r.Violations[i].History = byTime(r.Violations[i].History)
		}
	}
	r.Took = time.Since(began)
	return r
}

// count fills the plain counts of a report.
func count(h *History, o CheckOptions) Report {
	r := Report{Ops: len(h.Ops), OpsByKind: map[OpKind]int{}, OpsByOutcome: map[Outcome]int{},
		Writes: len(h.Writes), Faults: len(h.Faults), FaultsByKind: map[FaultKind]int{},
		Heals: len(h.Heals), FalseDead: len(h.FalseDead), Ran: time.Duration(h.End)}
	for i := range h.Ops {
		r.OpsByKind[h.Ops[i].Kind]++
		r.OpsByOutcome[h.Ops[i].Outcome]++
	}
	for _, f := range h.Faults {
		r.FaultsByKind[f.Kind]++
	}
	for _, x := range h.Heals {
		if x.Converged && x.Took <= o.ConvergeWithin {
			r.HealsConverged++
		}
	}
	return r
}

// checkHeals turns slow heals and false alarms into violations: the issue
// promises 100 % of heals converged in time and no false "dead".
func checkHeals(h *History, o CheckOptions) []Violation {
	var out []Violation
	for _, x := range h.Heals {
		if x.Converged && x.Took <= o.ConvergeWithin {
			continue
		}
		took := "did not converge while the harness waited (" + x.Took.String() + ")"
		if x.Converged {
			took = "took " + x.Took.Round(time.Millisecond).String()
		}
		out = append(out, Violation{Check: CheckConvergence, Subject: fmt.Sprintf("heal of %s at %s ms", x.Fault, ms(x.At)),
			What: fmt.Sprintf("boards agreed with the owners %s after the fault healed; the promise is %s", took, o.ConvergeWithin)})
	}
	for _, m := range h.FalseDead {
		out = append(out, Violation{Check: CheckFalseDead, Subject: m.Member,
			What:    fmt.Sprintf("%s called live member %s %s under packet loss alone", m.Observer, m.Member, m.State),
			History: []string{fmt.Sprintf("%s ms  %s: %s is %s", ms(m.At), m.Observer, m.Member, m.State)}})
	}
	return out
}

// maxPrinted bounds the violations String prints in full.
const maxPrinted = 50

// String is the summary a person reads at the end of a run: what ran,
// what broke it, and every violation with its history.
func (r Report) String() string {
	var b strings.Builder
	if r.Ops == 0 {
		fmt.Fprintf(&b, "ops: none in %s, %d writes\n", r.Ran.Round(time.Second), r.Writes)
	} else {
		fmt.Fprintf(&b, "ops: %d in %s (%s; %s), %d writes\n", r.Ops, r.Ran.Round(time.Second),
			countsText(r.OpsByKind, []OpKind{OpClaim, OpRelease, OpExtend, OpRead, OpSubmit, OpCancel}),
			countsText(r.OpsByOutcome, []Outcome{OK, Refused, Unknown}), r.Writes)
	}
	fmt.Fprintf(&b, "faults: %d (%s)\n", r.Faults, countsText(r.FaultsByKind, AllFaults()))
	if r.Heals == 0 {
		b.WriteString("heals: none measured\n")
	} else {
		fmt.Fprintf(&b, "heals: %d of %d converged in time (%.1f %%)\n", r.HealsConverged, r.Heals, 100*float64(r.HealsConverged)/float64(r.Heals))
	}
	fmt.Fprintf(&b, "false dead: %d\n", r.FalseDead)
	if s := r.Services; s.Started > 0 {
		fmt.Fprintf(&b, "services: %d started (%d answered), %d stopped, %d replicas killed, %d crash-looped; %d runs of answers seen, %d copies stopped while cut off, %d placed by a move; two copies at once %d times, the longest %s (allowed: the grace plus slack); down %d times, back at most %s after the heal it was measured from (bound %s)\n",
			s.Started, s.Acked, s.Stopped, s.Kills, s.CrashLooped, s.Seen, s.Fenced, s.Moved, s.Overlaps, s.LongestOverlap.Round(time.Millisecond), s.Gaps, s.Slowest.Round(time.Millisecond), s.Bound)
	}
	fmt.Fprintf(&b, "linearizability: %d GPUs in %d chunks, %d undecided (timed out), %d reads not from the owner skipped\n", r.GPUs, r.Chunks, r.Undecided, r.ReadsSkipped)
	by := r.ByCheck()
	checks := allChecks()
	parts := make([]string, len(checks))
	for i, c := range checks {
		parts[i] = fmt.Sprintf("%s %d", c, by[c])
	}
	fmt.Fprintf(&b, "violations: %d (%s)\n", len(r.Violations), strings.Join(parts, ", "))
	fmt.Fprintf(&b, "checked in %s\n", r.Took.Round(time.Millisecond))
	for i, v := range r.Violations {
		if i == maxPrinted {
			fmt.Fprintf(&b, "\n… and %d more violations\n", len(r.Violations)-maxPrinted)
			break
		}
		fmt.Fprintf(&b, "\nviolation %d [%s] %s: %s\n", i+1, v.Check, v.Subject, v.What)
		for _, l := range v.History {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}

// countsText writes counts in order, skipping zeros ("claim 3, read 10").
func countsText[K comparable](m map[K]int, order []K) string {
	var parts []string
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%v %d", k, m[k]))
		}
	}
	var extra []string
	for k, n := range m {
		if !slices.Contains(order, k) && n > 0 {
			extra = append(extra, fmt.Sprintf("%v %d", k, n))
		}
	}
	slices.Sort(extra)
	parts = append(parts, extra...)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// interactive reports whether a queue entry's runs are interactive (no
// command): their session ending is their normal end.
func interactive(e queue.QueueEntry) bool { return !e.Job.RunsCommand() }
