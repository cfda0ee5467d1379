package lease

import (
	"encoding/json"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/service"
)

// ServiceSpan is a service lease's time limit: none that matters. A
// service holds its GPUs while it is up and ends when it is stopped (or
// crash-loops), never at a time; the far end keeps every rule that reads
// ExpiresAt (warnings, the end action, bookings) from acting on it.
const ServiceSpan = 100 * 365 * 24 * time.Hour

// IsService reports whether l is a service's lease.
func (l *Lease) IsService() bool { return l.Kind == KindService && l.Service != nil }

// ServiceRoot is the lease l's replica was first started as (its own id
// when it was never moved): the name every copy of one replica shares.
func (l *Lease) ServiceRoot() string {
	if l.Service != nil && l.Service.Root != "" {
		return l.Service.Root
	}
	return l.ID
}

// ServiceStop is the record a node keeps and gossips, among its ended
// runs, when a copy of a service's replica ends for good (stopped,
// crash-looped, ended by an admin): a copy of the same root elsewhere
// (on a node lost past the grace, or cut off when the stop came) must
// not run again. Its Entry never matches a queued run's key.
func ServiceStop(l Lease, reason EndReason, at time.Time) EndedRun {
	return EndedRun{Entry: serviceStopPrefix + l.ServiceRoot(), Lease: l.ID, Reason: reason, At: at}
}

// StopOfEnded is the stop a ledger entry records: a service's copy that
// ended for good (not moved away). A restarted node rebuilds the stops it
// keeps from its ledger with it, so a copy on a node lost past the grace
// is still ended when that node returns after this one restarted.
func StopOfEnded(e LedgerEntry) (EndedRun, bool) {
	if e.ServiceRoot == "" || EndReason(e.Reason) == EndMovedAway {
		return EndedRun{}, false
	}
	return EndedRun{Entry: serviceStopPrefix + e.ServiceRoot, Lease: e.LeaseID, Reason: EndReason(e.Reason), At: e.End}, true
}

// ServiceStopped reports whether runs hold a stop of root's replica.
func ServiceStopped(runs []EndedRun, root string) bool {
	for _, x := range runs {
		if x.Entry == serviceStopPrefix+root {
			return true
		}
	}
	return false
}

// serviceStopPrefix begins a service stop's Entry (ServiceStop).
const serviceStopPrefix = "service-stop/"

// ServiceStopKeep is how long a node remembers a service's stop: far
// longer than a node is lost before it is fixed or removed, so its copy
// is ended when it returns. A node's restart rebuilds them from its
// ledger (StopOfEnded). At most MaxServiceStops are kept.
const ServiceStopKeep = 7 * 24 * time.Hour

// MaxServiceStops bounds the stops one node keeps (the oldest go first),
// well under what a peer accepts among a node's ended runs.
const MaxServiceStops = 256

// checkService ties a claim's kind to its service: a service lease is
// made by `dibs serve`, with a definition that fits every node's state.
func (c Claim) checkService() error {
	if (c.Kind == KindService) != (c.Service != nil) {
		return errServiceKind()
	}
	if c.Service == nil {
		return nil
	}
	if err := c.Service.Check(); err != nil {
		return &refusal.Error{Code: refusal.CodeInvalid, Msg: err.Error()}
	}
	if c.Run == nil || len(c.Run.Command) == 0 {
		return refusal.Invalidf("service %s needs a command: dibs serve %s -- COMMAND", c.Service.Name, c.Service.Name)
	}
	if b, err := json.Marshal(c.Run.Job()); err != nil || len(b) > service.MaxDefBytes {
		return refusal.Invalidf("service %s: its command, directory and environment take more than %d bytes; every node holds them, so keep them short (a script)", c.Service.Name, service.MaxDefBytes)
	}
	return nil
}
