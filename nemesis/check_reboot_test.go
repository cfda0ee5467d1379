package nemesis

import (
	"testing"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// reboot records a reboot (or power cut) of node from start to healed,
// its last process ended 1 ms after start.
func (b *builder) reboot(kind FaultKind, node string, start, healed float64) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: kind, Nodes: []string{node}, Start: at(start), Off: at(start + 1), Healed: at(healed)})
}

// session is a lease on node running a session.
func session(node string, token uint64, gpus []int) lease.Lease {
	return lease.Lease{ID: lease.LeaseID(node, token), Node: node, Token: token, GPUs: gpus, Session: "dibs-" + lease.LeaseID(node, token)}
}

func TestCheckReboots(t *testing.T) {
	runCases(t, []checkCase{
		{name: "a session's lease ended for the reboot as the agent came back passes", build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.reboot(FaultPowerCut, "n1", 20, 40)
			b.end(l.ID, l.GPUs, lease.EndRebooted, 35, 36)
			return b.history(100)
		}},
		{name: "a lease granted while the agent stopped for the reboot, ended for it, passes", build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.h.Faults = append(b.h.Faults, Fault{Kind: FaultReboot, Nodes: []string{"n1"}, Start: at(20), Off: at(30), Healed: at(40)})
			b.put(l, 25, 26) // a start in flight, finished during the graceful stop
			b.end(l.ID, l.GPUs, lease.EndRebooted, 35, 36)
			return b.history(100)
		}},
		{name: "a bare claim kept across a reboot passes", build: func(b *builder) *History {
			a := b.claim(0, "n1", []int{0}, 1, 0, 10)
			b.reboot(FaultReboot, "n1", 20, 40)
			b.read(1, "n1", map[int]string{0: a.ID, 1: ""}, 50, 60)
			return b.history(100)
		}},
		{name: "a service's lease kept across a reboot passes", build: func(b *builder) *History {
			// Its replica is started again in place (lease.DiedInReboot).
			l := session("n1", 1, []int{0})
			l.Kind, l.Session = lease.KindService, "svc-web"
			l.Service = &service.Service{Spec: service.Spec{Name: "web"}}
			b.put(l, 0, 1)
			b.reboot(FaultPowerCut, "n1", 20, 40)
			return b.history(100)
		}},
		{name: "a lease released before the power went passes", build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.reboot(FaultReboot, "n1", 20, 40)
			b.end(l.ID, l.GPUs, lease.EndReleased, 19, 20.5)
			return b.history(100)
		}},
		{name: "a session's lease left held after a reboot fails", fails: CheckReboot, names: []string{"put n1-1", "power-cut n1"}, build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.reboot(FaultPowerCut, "n1", 20, 40)
			return b.history(100)
		}},
		{name: "a session's lease ended as a plain session end after a reboot fails", fails: CheckReboot, names: []string{"session-ended"}, build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.reboot(FaultReboot, "n1", 20, 40)
			b.end(l.ID, l.GPUs, lease.EndSessionEnded, 41, 42)
			return b.history(100)
		}},
		{name: "a session's lease ended for the reboot long after the agent came back fails", fails: CheckReboot, names: []string{"reboot n1", "(node-rebooted)"}, build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.reboot(FaultReboot, "n1", 20, 40)
			b.end(l.ID, l.GPUs, lease.EndRebooted, 9000, 9001)
			return b.history(10000)
		}},
		{name: "a lease ended for a reboot after a mere restart fails", fails: CheckReboot, names: []string{"restart n1", "(node-rebooted)"}, build: func(b *builder) *History {
			l := session("n1", 1, []int{0})
			b.put(l, 0, 1)
			b.fault(FaultRestart, []string{"n1"}, 20, 40)
			b.end(l.ID, l.GPUs, lease.EndRebooted, 35, 36)
			return b.history(100)
		}},
	})
}
