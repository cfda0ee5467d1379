package nemesis

import (
	"fmt"
	"slices"

	"github.com/dibs-gpu/dibs/lease"
)

// checkRestartKeptWork checks the promise of a restart: no running work is ended
// by an agent's restart or crash that came back within the grace. A gang
// rank stopped for its gang (preempted-gang) or counted lost must have
// been stopped for a reason other than that: another rank ended failed, or
// a rank's node was away (killed, restarted, paused, cut off from the
// origin) for about the grace or longer — firstBreak with the grace less
// CheckOptions.RestartSlack. Anything else ended a gang for a restart.
func checkRestartKeptWork(x *index, o CheckOptions) []Violation {
	h := x.h
	cfg := h.Sched.WithDefaults()
	within := max(cfg.LostAfter-o.RestartSlack, 0)
	var out []Violation
	for _, a := range gangAttempts(x) {
		// What may explain a stop: every break but the stops themselves
		// (a rank ended for its gang, or counted lost, breaks nothing on
		// its own).
		explained := slices.ContainsFunc(gangBreaks(x, a, within), func(ev gangEvent) bool {
			return ev.self == nil || !stoppedForGang(h, ev.self)
		})
		if explained {
			continue
		}
		for r := range a.nodes {
			for _, in := range a.ranks[r] {
				if in.end < 0 || in.commit < 0 {
					continue
				}
				if !stoppedForGang(h, in) {
					continue
				}
				reason := lease.EndReason(h.Writes[in.end].Ledger.Reason)
				v := Violation{Check: CheckRestart, Subject: "gang " + a.key,
					What: fmt.Sprintf("rank %d (%s on %s) ended %s although nothing broke its gang: every agent it depended on that went away came back within the grace (%s)",
						r, in.id, in.node, reason, cfg.LostAfter)}
				v.History = append(v.History, restartLines(x, a)...)
				v.History = append(v.History, rankLines(x, a, in)...)
				out = append(out, v)
			}
		}
	}
	return out
}

// restartLines are the restarts and kills of the gang's nodes and origin
// while it ran: what the reader looks at first.
func restartLines(x *index, a *gangAttempt) []string {
	h := x.h
	nodes := []string{a.origin}
	for r := range a.nodes {
		for _, in := range a.ranks[r] {
			nodes = append(nodes, in.node)
		}
	}
	var lines []string
	for i := range h.Faults {
		f := &h.Faults[i]
		if !agentDown(f.Kind) {
			continue
		}
		if slices.ContainsFunc(f.Nodes, func(n string) bool { return slices.Contains(nodes, n) }) {
			lines = append(lines, faultLine(f))
		}
	}
	return lines
}

// stoppedForGang reports whether a rank's lease ended because the cluster
// gave its gang up: stopped for the gang, or counted lost.
func stoppedForGang(h *History, in *instance) bool {
	if in.end < 0 {
		return false
	}
	r := lease.EndReason(h.Writes[in.end].Ledger.Reason)
	return r == lease.PreemptedReason(lease.PreemptGang) || r == lease.EndLost
}
