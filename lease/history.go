package lease

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// RunState is how an ended lease ended, in the words of `dibs history`'s
// state column (SLURM's sacct states, in dibs's terms). It is read from
// the ledger entry's reason, never stored, so every entry ever written has
// one.
type RunState string

// The states of ended leases.
const (
	StateCompleted RunState = "completed" // its command exited 0, or its shell ended
	StateFailed    RunState = "failed"    // its command exited non-zero, or its session could not start
	StateReleased  RunState = "released"  // its holder released it
	StateExpired   RunState = "expired"   // it reached its time limit
	StateReclaimed RunState = "reclaimed" // ended for someone waiting (idle, overdue)
	StatePreempted RunState = "preempted" // ended for someone within their quota, or with its gang
	StateRequeued  RunState = "requeued"  // a queued run ended for someone else, back in the queue
	StateCancelled RunState = "cancelled" // ended by an admin, or withdrawn before it ran
	StateLost      RunState = "lost"      // its node went down past the grace
	StateFolded    RunState = "folded"    // a row standing for many plain leases (the ledger's daily cap)
)

// RunStates lists the states, for the flag's help and its check.
var RunStates = []RunState{StateCompleted, StateFailed, StateReleased, StateExpired, StateReclaimed,
	StatePreempted, StateRequeued, StateCancelled, StateLost, StateFolded}

// State is how e ended.
func (e *LedgerEntry) State() RunState {
	r := EndReason(e.Reason)
	if code, ok := r.ExitCode(); ok {
		if code == 0 {
			return StateCompleted
		}
		return StateFailed
	}
	switch r {
	case EndReleased:
		return StateReleased
	case EndExpired, EndBooked, EndBookingLapsed:
		return StateExpired
	case EndSessionEnded:
		return StateCompleted
	case EndSessionFailed, EndUserGone:
		return StateFailed
	case EndByAdmin, EndUnbooked, EndReservationExpired:
		return StateCancelled
	case EndLost:
		return StateLost
	case ReasonCompacted:
		return StateFolded
	case PreemptedReason(PreemptIdle), PreemptedReason(PreemptOverdue):
		if e.Entry != "" && r != PreemptedReason(PreemptOverdue) {
			return StateRequeued
		}
		return StateReclaimed
	case PreemptedReason(PreemptQuota):
		if e.Entry != "" {
			return StateRequeued
		}
		return StatePreempted
	case PreemptedReason(PreemptGang):
		return StatePreempted
	}
	return StateFailed
}

// ExitCode is the exit status of e's command, when it ran one to its end.
func (e *LedgerEntry) ExitCode() (int, bool) { return EndReason(e.Reason).ExitCode() }

// HistoryFilter is what `dibs history` asks of each node's ledger: every
// field set must match. It travels to each node, which answers with the
// rows that match, not its whole ledger.
type HistoryFilter struct {
	User   string     `json:"user,omitempty"`
	States []RunState `json:"states,omitempty"`
	Node   string     `json:"node,omitempty"`
	// Since and Until bound when the lease ended.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Job is a gang id, a queued request's id or an array's id: the runs
	// of that gang, request or array (every task).
	Job string `json:"job,omitempty"`
	// ID is one run: a lease id, or a queued request's (its attempts).
	ID string `json:"id,omitempty"`
	// Limit caps the rows, the newest kept (0: MaxHistoryRows).
	Limit int `json:"limit,omitempty"`
}

// MaxHistoryRows bounds the rows one node answers `dibs history` with.
const MaxHistoryRows = 2000

// DefaultHistoryWindow is how far back `dibs history` looks unless told.
const DefaultHistoryWindow = 7 * 24 * time.Hour

// Validate checks a filter from a person or a peer.
func (f *HistoryFilter) Validate() error {
	if f.User != "" && !words.ValidUserName(f.User) {
		return refusal.Invalidf("--user %s is not a user name", words.QuoteInput(f.User))
	}
	if f.Node != "" {
		if err := words.ValidNodeName(f.Node); err != nil {
			return refusal.Invalidf("--node %s is not a node name", words.QuoteInput(f.Node))
		}
	}
	if len(f.States) > len(RunStates) {
		return refusal.Invalidf("more --state values than there are states")
	}
	for _, s := range f.States {
		if !slices.Contains(RunStates, s) {
			return refusal.Invalidf("--state %s is not one of %s", words.QuoteInput(string(s)), joinStates())
		}
	}
	for _, s := range []string{f.Job, f.ID} {
		if s != "" && !words.ValidToken(s, 2*words.MaxNameLen) {
			return refusal.Invalidf("%s is not a run, gang or array id", words.QuoteInput(s))
		}
	}
	if !words.ValidSince(f.Since) || !words.ValidSince(f.Until) {
		return refusal.Invalidf("--since or --until is out of range")
	}
	if !f.Until.IsZero() && f.Until.Before(f.Since) {
		return refusal.Invalidf("--until %s is before --since %s: swap them", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	if f.Limit < 0 || f.Limit > MaxHistoryRows {
		return refusal.Invalidf("a history limit of %d is not in 0..%d", f.Limit, MaxHistoryRows)
	}
	return nil
}

func joinStates() string {
	s := make([]string, len(RunStates))
	for i, x := range RunStates {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// ParseStates reads --state's comma-separated list.
func ParseStates(s string) ([]RunState, error) {
	var out []RunState
	for _, x := range strings.Split(s, ",") {
		x = strings.ToLower(strings.TrimSpace(x))
		if x == "" {
			continue
		}
		if !slices.Contains(RunStates, RunState(x)) {
			return nil, refusal.Invalidf("--state %s is not one of %s", words.QuoteInput(x), joinStates())
		}
		out = append(out, RunState(x))
	}
	return out, nil
}

// Match reports whether e is one of the rows f asks for. A folded row
// matches a user, node and time filter, but never a run's or a job's (it
// stands for plain leases only).
func (f *HistoryFilter) Match(e *LedgerEntry) bool {
	switch {
	case f.User != "" && e.User != f.User,
		f.Node != "" && e.Node != f.Node,
		!f.Since.IsZero() && e.End.Before(f.Since),
		!f.Until.IsZero() && e.End.After(f.Until),
		len(f.States) > 0 && !slices.Contains(f.States, e.State()):
		return false
	}
	req := e.Entry
	if i := strings.LastIndexByte(req, '#'); i >= 0 {
		req = req[:i]
	}
	if f.ID != "" && e.LeaseID != f.ID && (req == "" || req != f.ID) {
		return false
	}
	if f.Job != "" {
		array, _, _ := strings.Cut(req, "/")
		if e.Gang != f.Job && (req == "" || req != f.Job && array != f.Job) {
			return false
		}
	}
	return true
}

// FilterLedger is the entries (ordered by end) that f matches, the newest
// f.Limit of them (MaxHistoryRows when unset), in end order, and whether
// more matched than it returns.
func FilterLedger(entries []LedgerEntry, f HistoryFilter) (rows []LedgerEntry, more bool) {
	limit := f.Limit
	if limit <= 0 {
		limit = MaxHistoryRows
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := &entries[i]
		if !f.Since.IsZero() && e.End.Before(f.Since) {
			break // ordered by end: nothing older matches
		}
		if !f.Match(e) {
			continue
		}
		if len(rows) == limit {
			more = true
			break
		}
		rows = append(rows, *e)
	}
	slices.Reverse(rows)
	return rows, more
}

// HistoryWords is a row's "how it ended" in words: the exit code, or the
// state with why.
func (e *LedgerEntry) HistoryWords() string {
	if code, ok := e.ExitCode(); ok {
		return fmt.Sprintf("exit %d", code)
	}
	switch e.State() {
	case StateFolded:
		return "folded"
	case StateReleased, StateExpired, StateCompleted, StateLost:
		if e.By != "" {
			return string(e.State()) + " by " + e.By
		}
		return string(e.State())
	}
	return string(e.State()) + " (" + e.Reason + ")"
}
