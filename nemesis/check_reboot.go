package nemesis

import (
	"fmt"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// checkReboots checks the promises of a reboot and a power cut, both
// ways. Every lease running a session on a node when the node went down
// (its last put before the power went off names a session and is no mere
// reservation, and no end of it was written before) ends, once the agent
// is back (a service's excepted: it is started again), for the reboot
// (lease.EndRebooted) and within
// CheckOptions.RebootWithin of the agent's return — never left held by a
// session that is gone, never ended for another reason. And no lease ends
// for a reboot unless its node rebooted or lost power while it was held:
// an agent restart (same boot) is never taken for one.
func checkReboots(x *index, o CheckOptions) []Violation {
	h := x.h
	var reboots []*Fault
	for i := range h.Faults {
		if rebootFault(h.Faults[i].Kind) {
			reboots = append(reboots, &h.Faults[i])
		}
	}
	var out []Violation
	for _, in := range x.all {
		if len(in.puts) == 0 {
			continue
		}
		var end *Write
		if in.end >= 0 {
			end = &h.Writes[in.end]
		}
		if end != nil && lease.EndReason(end.Ledger.Reason) == lease.EndRebooted {
			put := &h.Writes[in.puts[0]]
			if !slices.ContainsFunc(reboots, func(f *Fault) bool {
				return slices.Contains(f.Nodes, in.node) && poweredOff(f) >= put.Start && poweredOff(f) <= end.Start
			}) {
				v := Violation{Check: CheckReboot, Subject: "lease " + in.id,
					What: fmt.Sprintf("%s ended %s although %s did not reboot or lose power while it was held: a restart was taken for a reboot", in.id, lease.EndRebooted, in.node)}
				v.History = append(v.History, writeLine(h, in.puts[0]), writeLine(h, in.end))
				v.History = append(v.History, restartsOf(h, in.node, put.Start, end.Done)...)
				out = append(out, v)
			}
		}
		for _, f := range reboots {
			if !slices.Contains(f.Nodes, in.node) {
				continue
			}
			if end != nil && end.Done <= f.Off {
				continue // ended before the power went off
			}
			p := lastPutBefore(h, in, poweredOff(f))
			if p < 0 {
				continue
			}
			l := &h.Writes[p].Lease
			if l.Session == "" || !l.ReservedUntil.IsZero() || l.IsService() {
				// A bare claim, a reservation: nothing of it died. A
				// service's lease is kept through a reboot, its replica
				// started again in place (lease.DiedInReboot); the
				// service checks hold it to answering again.
				break
			}
			within := o.RebootWithin
			switch {
			case end == nil:
				out = append(out, rebootViolation(h, in, f, p, "was never ended: its session died with the node, and the lease stayed held"))
			case lease.EndReason(end.Ledger.Reason) != lease.EndRebooted:
				out = append(out, rebootViolation(h, in, f, p, fmt.Sprintf("ended %s after the node came back, not %s", end.Ledger.Reason, lease.EndRebooted)))
			case end.Done > f.Healed+int64(within):
				out = append(out, rebootViolation(h, in, f, p, fmt.Sprintf("ended %s only %s after the agent was back (the promise: %s)",
					lease.EndRebooted, time.Duration(end.Done-f.Healed).Round(time.Millisecond), within)))
			}
			break // the first reboot that struck it decides
		}
	}
	return out
}

// poweredOff is when a reboot's node had lost its last process: what its
// agent wrote until then (a graceful stop takes a moment, and may finish a
// start in flight), it wrote under the boot that ended.
func poweredOff(f *Fault) int64 {
	if f.Off > 0 {
		return f.Off
	}
	return f.Start
}

// lastPutBefore is in's last put durable by t, -1 if none.
func lastPutBefore(h *History, in *instance, t int64) int {
	last := -1
	for _, p := range in.puts {
		if h.Writes[p].Done <= t {
			last = p
		}
	}
	return last
}

func rebootViolation(h *History, in *instance, f *Fault, put int, what string) Violation {
	v := Violation{Check: CheckReboot, Subject: "lease " + in.id,
		What: fmt.Sprintf("%s ran a session on %s when it %s at %s ms, and %s", in.id, in.node, rebootWords(f.Kind), ms(f.Start), what)}
	v.History = append(v.History, writeLine(h, put), faultLine(f))
	if in.end >= 0 {
		v.History = append(v.History, writeLine(h, in.end))
	}
	return v
}

func rebootWords(k FaultKind) string {
	if k == FaultPowerCut {
		return "lost power"
	}
	return "rebooted"
}

// restartsOf are the faults that took node's agent down between from and
// to: what a reader of a reboot mistaken looks at.
func restartsOf(h *History, node string, from, to int64) []string {
	var out []string
	for i := range h.Faults {
		f := &h.Faults[i]
		if agentDown(f.Kind) && slices.Contains(f.Nodes, node) && f.Start <= to && f.Healed >= from {
			out = append(out, faultLine(f))
		}
	}
	return out
}
