package lease

import (
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/service"
)

func TestDiedInReboot(t *testing.T) {
	withBoot := func(l Lease, boot string) Lease { l.Mono = &MonoLimits{Boot: boot}; return l }
	run := Lease{ID: "n1-1", Session: "dibs-n1-1"}
	bare := Lease{ID: "n1-2"}
	svc := run
	svc.Kind, svc.Service = KindService, &service.Service{}
	reserved := run
	reserved.ReservedUntil = time.Unix(1e9, 0)
	for _, tc := range []struct {
		name           string
		l              Lease
		lastBoot, boot string
		want           bool
	}{
		{"a session written under the boot that runs now", withBoot(run, "B"), "B", "B", false},
		{"a session written under another boot", withBoot(run, "A"), "B", "B", true},
		{"the lease's own boot decides over the boot file", withBoot(run, "A"), "", "B", true},
		{"a lease with no boot of its own, the boot file says another", run, "A", "B", true},
		{"a lease with no boot of its own, the same boot", run, "B", "B", false},
		{"a lease with no boot of its own, no boot file", run, "", "B", false},
		{"a bare claim", withBoot(bare, "A"), "A", "B", false},
		{"a service (its supervisor starts it again)", withBoot(svc, "A"), "A", "B", false},
		{"an uncommitted reservation", withBoot(reserved, "A"), "A", "B", false},
		{"an unknown boot decides nothing", withBoot(run, "A"), "A", "", false},
	} {
		if got := DiedInReboot(tc.l, tc.lastBoot, tc.boot); got != tc.want {
			t.Errorf("%s: DiedInReboot = %v, want %v", tc.name, got, tc.want)
		}
	}
}
