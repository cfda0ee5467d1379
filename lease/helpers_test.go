package lease_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// t0 is the fixed wall-clock "now" of the rule tests. It has no monotonic
// reading, like every time read back from the store or the wire.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

const node = "gpu-01"

var (
	alice = lease.Caller{UID: 1001, User: "alice"}
	bob   = lease.Caller{UID: 1002, User: "bob"}
	root  = lease.Caller{UID: 0, User: "root", Admin: true}
)

// islands builds a node whose GPUs form NVLink islands of the given sizes;
// GPUs of different islands meet only across the CPU sockets (NUMA).
// islands(4, 4) is an 8-GPU box with NVLink islands 0-3 and 4-7.
func islands(sizes ...int) nodeprobe.Snapshot {
	var island []int
	for i, n := range sizes {
		for range n {
			island = append(island, i)
		}
	}
	return topo(func(a, b int) nodeprobe.LinkKind {
		if island[a] == island[b] {
			return nodeprobe.LinkNVLink
		}
		return nodeprobe.LinkNUMA
	}, len(island))
}

// topo builds a node of n GPUs whose links come from kind.
func topo(kind func(a, b int) nodeprobe.LinkKind, n int) nodeprobe.Snapshot {
	snap := nodeprobe.Snapshot{TakenAt: t0, Host: nodeprobe.Host{Name: node, Backend: nodeprobe.BackendSim}}
	for i := range n {
		g := nodeprobe.GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Model: "NVIDIA H100 80GB HBM3",
			MemoryTotalMiB: 81559, UtilizationPct: nodeprobe.IntPtr(0), MIG: nodeprobe.MIGDisabled,
		}
		for j := range n {
			if j != i {
				g.Links = append(g.Links, nodeprobe.Link{Peer: j, Kind: kind(i, j)})
			}
		}
		snap.GPUs = append(snap.GPUs, g)
	}
	return snap
}

// withProc returns a copy of snap with a process on gpu.
func withProc(snap nodeprobe.Snapshot, gpu int, pr nodeprobe.Process) nodeprobe.Snapshot {
	snap.GPUs = slices.Clone(snap.GPUs)
	g := &snap.GPUs[gpu]
	g.Processes = append(slices.Clone(g.Processes), pr)
	return snap
}

// withUtil returns a copy of snap with gpu at pct utilisation (nil: unknown).
func withUtil(snap nodeprobe.Snapshot, gpu int, pct *int) nodeprobe.Snapshot {
	snap.GPUs = slices.Clone(snap.GPUs)
	snap.GPUs[gpu].UtilizationPct = pct
	return snap
}

// withDown returns a copy of snap where the probe could not read gpu.
func withDown(snap nodeprobe.Snapshot, gpu int) nodeprobe.Snapshot {
	snap.GPUs = slices.Clone(snap.GPUs)
	snap.GPUs[gpu].Error = "GPU is lost"
	return snap
}

func proc(pid int, c lease.Caller, cmd string) nodeprobe.Process {
	return nodeprobe.Process{PID: pid, UID: c.UID, User: c.User, Command: cmd, UsedMemoryMiB: 1024}
}

// held is a lease of c on gpus, granted at start for dur.
func held(token uint64, c lease.Caller, gpus []int, start time.Time, dur time.Duration) lease.Lease {
	return lease.Lease{
		ID: lease.LeaseID(node, token), Node: node, GPUs: gpus, User: c.User, UID: c.UID,
		Token: token, Kind: lease.KindInteractive, StartedAt: start, ExpiresAt: start.Add(dur),
	}
}

// table rebuilds a node's table holding leases, as the agent does at start.
func table(leases ...lease.Lease) *lease.Table {
	var last uint64
	for _, l := range leases {
		last = max(last, l.Token)
	}
	return lease.NewTable(node, leases, last, lease.At(t0))
}

// checkRefusal asserts err is a refusal with code whose message holds every
// one of want (what went wrong and what to do about it).
func checkRefusal(t *testing.T, err error, code refusal.Code, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a %s refusal saying %q", code, want)
	}
	if got := refusal.CodeOf(err); got != code {
		t.Errorf("code = %q, want %q (message %q)", got, code, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q does not say %q", err, w)
		}
	}
}

var carol = lease.Caller{UID: 1003, User: "carol"}
