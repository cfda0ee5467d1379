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
